#!/usr/bin/python3
"""data_parallel (seed 002) with Shoal and with PyTorch's DistributedDataParallel, side by side.

For every point of the grid (scaling x batch x workers, fixed before the first run and written to
plan.json) three sides train the same network on the same per-worker batch for the same steps,
through bench/harness.py:

  shoal   `shoal submit --kind data_parallel` (Gloo all-reduce of bucketed gradients, Shoal's
          default threads: floor(cores / workers)), on a shoald of its own, settled before the
          run and stopped after it;
  users   bench/reference_data_parallel.py (DDP on Gloo, torch.multiprocessing.spawn) as users
          run it: PyTorch's own thread count in every rank, glibc's defaults;
  best    the same at its best tuning: floor(cores / workers) threads a rank, glibc's
          thresholds raised.

Warm-up: none on either side; both time from the first step (Shoal: its first step any worker
took, PyTorch: the barrier before it) to the last step any rank finished, so both windows hold
the first step's one-off costs (DDP's bucket rebuild, Shoal's allocator plan). The batch per
worker is --batch with weak scaling, --batch / workers with strong.

Memory: one reader in this program (bench/harness.py's OutsideReader) sums the PSS, RSS and USS
of every process a side runs every --sample-ms: for PyTorch the script and everything below it
(its ranks and torch.multiprocessing's manager), for Shoal everything below shoald. Shoal's step
split (compute, communication) and bus bandwidth are kept in raw.jsonl, their medians shown.
Points with more workers than cores are oversubscribed: say so when quoting them.

  bench/data_parallel_vs_pytorch.py [--model mnist_convnet|resnet18_cifar] [--workers 1,2]
                                    [--batch 32] [--scaling weak,strong] [--batches 10]
                                    [--repeats 3] [--out DIR]
"""
import argparse
import datetime
import os

from harness import (Comparison, figure_column, own_pss_check, reference_cmd_side, settings_of,
                     shoal_submit_side)
from shoal_bench import ROOT

REFERENCE = os.path.join(ROOT, "bench", "reference_data_parallel.py")


def per_worker(p):
    return p["batch"] if p["scaling"] == "weak" else p["batch"] // p["workers"]


def shoal_side(args):
    def argv(p):
        return ["--kind", "data_parallel", "--model", args.model, "--workers", str(p["workers"]),
                "--batch-size", str(p["batch"]), "--scaling", p["scaling"], "--batches",
                str(args.batches), "--eval-samples", "0"]

    def more(e, p):
        d = e["result"]["data_parallel"]
        # A step as the reference times one: the training window over the steps.
        return {"window_step_ms": e["result"]["train_ms"] / args.batches,
                **{k: d.get(k) for k in ("step_ms", "compute_ms", "comm_ms",
                                         "bus_bandwidth_gbps", "batch_per_worker")}}
    return shoal_submit_side(args.bin, argv, more)


def reference_side(args, tuning):
    def argv(p):
        threads = max(1, os.cpu_count() // p["workers"]) if tuning == "best" else 0
        return ["/usr/bin/python3", REFERENCE, "--model", args.model, "--workers",
                str(p["workers"]), "--batch-per-worker", str(per_worker(p)), "--batches",
                str(args.batches), "--tuning", tuning, "--threads", str(threads)]

    label = {"users": "PyTorch DDP as users run it", "best": "PyTorch DDP best tuning"}[tuning]
    return reference_cmd_side(tuning, label, argv,
                              lambda r, p: {"window_step_ms": r["step_ms"]})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mnist_convnet")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--scaling", default="weak,strong")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample-ms", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat(),
                                                  "data_parallel"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    points = [{"scaling": s, "batch": int(b), "workers": int(w)}
              for s in args.scaling.split(",") for b in args.batch.split(",")
              for w in args.workers.split(",")]
    bad = [p for p in points if p["batch"] % p["workers"]]
    if "strong" in args.scaling and bad:
        raise SystemExit(f"--batch must divide by every worker count with strong scaling: {bad}")
    sides = [shoal_side(args), reference_side(args, "users"), reference_side(args, "best")]
    settings = settings_of(args)
    cmp = Comparison(args.out, points, sides, args.repeats, settings, args.sample_ms,
                     context={"cores": os.cpu_count()},
                     describe=lambda p: f"{p['scaling']} batch {p['batch']} x{p['workers']}")
    cmp.run()
    cores = os.cpu_count()
    print(cmp.write_summary(
        ("scaling", "batch", "workers"),
        heading=lambda p: (f"## {p['scaling']} scaling, batch {p['batch']}, {p['workers']} "
                           f"worker(s){' (oversubscribed)' if p['workers'] > cores else ''}: "
                           f"{args.model}, {args.batches} steps, {per_worker(p)} a worker"),
        extra=[figure_column("ms a step (window / steps)", "window_step_ms", "{:.1f}"),
               figure_column("Shoal compute ms", "compute_ms", "{:.1f}"),
               figure_column("Shoal comm ms", "comm_ms", "{:.2f}"),
               ("Shoal's own PSS / outside", own_pss_check)]))


if __name__ == "__main__":
    main()
