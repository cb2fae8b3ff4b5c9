#!/usr/bin/python3
"""A user's model, Shoal against torch.multiprocessing Hogwild, side by side in one run.

The model is tests/models/make_models.py's bench_cnn (a CIFAR-shaped CNN with BatchNorm and
Dropout), made now by Debian's PyTorch. For every point of the grid (start method x workers,
fixed before the first run and written to plan.json) three sides train the same weights on the
same kind of synthetic data with the same untimed warm-up (3 forward and backward passes a
worker, then a start gate or barrier), so samples/s times the same steps on all of them:

  shoal   `shoal submit --model-file bench_cnn.pt` with one thread a worker (shared weights,
          Hogwild), on a shoald of its own, started and settled before the run, stopped after;
  users   bench/reference_user_model.py as users run it: the eager module with the archive's
          weights, glibc's defaults, PyTorch's thread count;
  best    the same at its best tuning: one thread a process, raised malloc thresholds, torch
          preloaded in the forkserver.

Memory: one reader in this program (bench/harness.py's OutsideReader) sums the PSS (and RSS,
USS) of every process a side runs, every --sample-ms (50): for PyTorch the script and everything
below it; for Shoal everything below shoald (shoald itself kept apart), and Shoal's own figure is
checked against the same reader's sum over its experiment's processes. Speed: samples / (first
timed step started -> last finished), each side's own clock. Shoal's ready time includes loading
the archive in every worker that cannot inherit it (spawn, forkserver).

The runs follow bench/harness.py: repeats interleaved, the order of the sides rotating, every run
kept in raw.jsonl as it ends, failed ones counted and never retried, a rerun into the same --out
resuming the same plan (any other refused); summary.md gives medians [min-max], ok / failed and
the ratios Shoal / PyTorch.

  bench/user_model_vs_pytorch.py [--workers 1,2,4] [--start fork,spawn,forkserver]
                                 [--batches 20] [--batch-size 64] [--repeats 3] [--out DIR]
"""
import argparse
import contextlib
import datetime
import os
import shutil
import subprocess
import tempfile

from harness import (Comparison, Side, Started, own_pss_check, pytorch_side, reference_figures,
                     settings_of, shoal_figures)
from shoal_bench import (ROOT, fresh_shoald, reference_finished, shoal_processes, submit_finished,
                         submit_started)


def shoal_side(args, archive):
    def start(p):
        stack = contextlib.ExitStack()
        cli = stack.enter_context(fresh_shoald(args.bin))
        cmd = [os.path.join(args.bin, "shoal"), "--socket", cli.socket, "submit", "--model-file",
               archive, "--input", "float32[B,3,32,32]", "--classes", "10", "--workers",
               str(p["workers"]), "--start", p["start"], "--batches", str(args.batches),
               "--batch-size", str(args.batch_size), "--threads", "1", "--wait", "--json"]
        proc = submit_started(cmd, stack)

        def wait():
            e, err, daemon_pss = submit_finished(proc, cli.pid)
            return shoal_figures(e, err, daemon_pss,
                                 ready_ms=e.get("result", {}).get("ready_ms"))
        return Started(wait, below=[cli.pid], close=stack.close,
                       groups=lambda: {"experiment": shoal_processes(cli.pid, p["start"])})
    return Side("shoal", "Shoal", start, shoal=True)


def reference_side(args, archive, tuning):
    def start(p):
        threads = 1 if tuning == "best" else 0
        cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench", "reference_user_model.py"),
               "--archive", archive, "--workers", str(p["workers"]), "--start", p["start"],
               "--batches", str(args.batches), "--batch-size", str(args.batch_size),
               "--threads", str(threads), "--tuning", tuning, "--warm-up", "3",
               "--sample-ms", "200"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def wait():
            r, err = reference_finished(proc)
            return reference_figures(r, err, threads, ready_ms=r.get("ready_ms"),
                                     self_peak_pss_sum_bytes=r.get("peak_pss_sum_bytes"))
        return Started(wait, roots=[proc.pid])
    return pytorch_side(tuning, start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--start", default="fork,spawn,forkserver")
    ap.add_argument("--batches", type=int, default=20, help="timed steps a worker")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample-ms", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat(), "user_model"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    models = tempfile.mkdtemp(prefix="shoal-models.")
    try:
        subprocess.run(["/usr/bin/python3", "-W", "ignore",
                        os.path.join(ROOT, "tests", "models", "make_models.py"), models],
                       check=True)
        archive = os.path.join(models, "bench_cnn.pt")
        points = [{"start": s, "workers": int(w)} for s in args.start.split(",")
                  for w in args.workers.split(",")]
        sides = [shoal_side(args, archive)] + [reference_side(args, archive, t)
                                               for t in ("users", "best")]
        settings = settings_of(args)
        settings["model"] = "bench_cnn"
        cmp = Comparison(args.out, points, sides, args.repeats, settings, args.sample_ms,
                         describe=lambda p: f"{p['start']} {p['workers']}")
        cmp.run()
        own = ("Shoal's own PSS / outside, its processes", own_pss_check)
        print(cmp.write_summary(
            ("start", "workers"),
            heading=lambda p: (f"## {p['start']}, {p['workers']} worker(s): bench_cnn, batch "
                               f"{args.batch_size}, {args.batches} timed steps a worker"),
            extra=[own]))
    finally:
        shutil.rmtree(models, ignore_errors=True)


if __name__ == "__main__":
    main()
