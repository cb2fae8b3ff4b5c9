#!/usr/bin/python3
"""Time from asking for N workers to all N training, by start method, Shoal beside PyTorch.

For every start method (fork, forkserver, spawn; the points, fixed before the first run and
written to plan.json) three sides start --workers Hogwild workers of the study's ConvNet, one
thread each, and train one batch, through bench/harness.py:

  shoal   `shoal submit --batches 1 --threads 1`, on a shoald of its own, settled before the run
          (its forkserver up with LibTorch loaded and its pool forked, as on a daemon that has
          been up) and stopped after it; the figure is the result's `start_ms` (the leader's
          first request -> the last worker's first step);
  users   bench/reference_hogwild.py (torch.multiprocessing) as users run it: the first
          Process.start() -> the last worker's first step (forkserver's server is started by that
          first start(), as users meet it; Python's forkserver does not preload torch);
  best    the same at its best tuning (torch preloaded in the forkserver, glibc's thresholds
          raised).

The reader sums every side's memory as for every comparison. OUT/summary.md has the ready times
(start_ms, median [min-max]) beside the usual columns (samples/s of a one-batch run mean little).

  bench/ready_time.py [--workers 16] [--repeats 3] [--out DIR]
"""
import argparse
import datetime
import os
import statistics

from harness import Comparison, PYTORCH_LABELS, reference_cmd_side, settings_of, shoal_submit_side
from shoal_bench import REFERENCE, ROOT


def start_ms(side, ok):
    xs = [r["figures"]["start_ms"] for r in ok if r["figures"].get("start_ms") is not None]
    if not xs:
        return "-"
    return f"{statistics.median(xs):.0f} [{min(xs):.0f}-{max(xs):.0f}]"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--start", default="fork,forkserver,spawn")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--sample-ms", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat(),
                                                  "ready_time"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    common = ["--workers", str(args.workers), "--batches", "1", "--threads", "1", "--dataset",
              args.dataset]

    shoal = shoal_submit_side(
        args.bin, lambda p: common + ["--start", p["start"], "--eval-samples", "0"],
        lambda e, p: {"start_ms": e["result"].get("start_ms")})

    def reference(tuning):
        label = PYTORCH_LABELS[tuning]
        return reference_cmd_side(
            tuning, label,
            lambda p: ["/usr/bin/python3", REFERENCE, *common, "--start", p["start"],
                       "--tuning", tuning],
            lambda r, p: {"start_ms": r.get("start_ms")})

    points = [{"start": s} for s in args.start.split(",")]
    settings = settings_of(args)
    cmp = Comparison(args.out, points, [shoal, reference("users"), reference("best")],
                     args.repeats, settings, args.sample_ms, context={"cores": os.cpu_count()},
                     describe=lambda p: p["start"])
    cmp.run()
    print(cmp.write_summary(
        ("start",),
        heading=lambda p: (f"## {p['start']}: {args.workers} workers, request -> all training"),
        extra=[("start_ms: request -> all training", start_ms)]))


if __name__ == "__main__":
    main()
