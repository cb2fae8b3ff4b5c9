#!/usr/bin/python3
"""data_loading (seed 003) with Shoal and with torch.utils.data.DataLoader, side by side.

For every point (start method x loader count, fixed before the first run and written to
plan.json) three sides train the same ConvNet on Fashion-MNIST with the same augmentation,
batch, epochs, shuffle and prefetch, through bench/harness.py:

  shoal   `shoal submit --kind data_loading --loaders L` (loader processes filling shared
          batch slots; the trainer's threads Shoal's default, the cores), on a shoald of its own,
          settled before the run and stopped after it;
  users   bench/reference_data_loading.py (DataLoader with L workers) as users run it: PIL
          transforms, glibc's defaults, PyTorch's threads;
  best    the same at its best: the transforms on tensors (no PIL), glibc's thresholds raised,
          the trainer on the cores' threads as Shoal's.

Warm-up: the first epoch, on both sides: samples/s is the epoch's samples over the mean epoch
time of the epochs after it (--epochs 2 at least), both sides by their own clocks. The trainer's
wait for data and the CPU time spent making batches (mean per later epoch) are kept in raw.jsonl
and their medians shown.

Memory: one reader in this program (bench/harness.py's OutsideReader) sums the PSS, RSS and USS
of every process a side runs every --sample-ms: for PyTorch the script and its loader processes,
for Shoal everything below shoald.

  bench/data_loading_vs_pytorch.py [--loaders 0,1,2] [--start fork] [--epochs 2]
                                   [--epoch-samples 512] [--batch-size 64] [--repeats 3]
                                   [--out DIR]
"""
import argparse
import datetime
import os
import statistics

from harness import (Comparison, figure_column, own_pss_check, reference_cmd_side, settings_of,
                     shoal_submit_side)
from shoal_bench import ROOT

REFERENCE = os.path.join(ROOT, "bench", "reference_data_loading.py")


def after_first(epochs):
    return epochs[1:]


def shoal_side(args):
    def argv(p):
        return ["--kind", "data_loading", "--loaders", str(p["loaders"]), "--start", p["start"],
                "--prefetch", str(args.prefetch), "--epochs", str(args.epochs),
                "--epoch-samples", str(args.epoch_samples), "--batch-size", str(args.batch_size),
                "--eval-samples", "0", "--dataset", args.dataset]

    def more(e, p):
        eps = after_first(e["result"]["epochs"])
        load = {x["epoch"]: x.get("load_cpu_ms")
                for x in e["result"]["data_loading"]["epochs"]}
        # A figure an epoch lacks is unknown for the mean too, not 0.
        mean_s = lambda xs: statistics.mean(xs) / 1e3 if None not in xs else None
        return {"samples_per_sec": args.epoch_samples / mean_s([x["wall_ms"] for x in eps]),
                "data_s": mean_s([x.get("data_ms") for x in eps]),
                "load_cpu_s": mean_s([load.get(x["epoch"]) for x in eps])}
    return shoal_submit_side(args.bin, argv, more)


def reference_side(args, tuning):
    def argv(p):
        cmd = ["/usr/bin/python3", REFERENCE, "--loaders", str(p["loaders"]), "--start",
               p["start"], "--prefetch", str(args.prefetch), "--epochs", str(args.epochs),
               "--epoch-samples", str(args.epoch_samples), "--batch-size", str(args.batch_size),
               "--tuning", tuning, "--dataset", args.dataset]
        return cmd + (["--threads", str(os.cpu_count())] if tuning == "best" else [])

    def more(r, p):
        eps = after_first(r["epochs"])
        mean = lambda k: statistics.mean(x[k] for x in eps)
        return {"samples_per_sec": args.epoch_samples / mean("epoch_s"),
                "data_s": mean("data_s"), "load_cpu_s": mean("load_cpu_s"),
                "self_peak_pss_sum_bytes": r.get("peak_pss_sum_bytes")}
    label = {"users": "PyTorch DataLoader as users run it",
             "best": "PyTorch DataLoader best tuning"}[tuning]
    return reference_cmd_side(tuning, label, argv, more)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loaders", default="0,1,2")
    ap.add_argument("--start", default="fork")
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--epoch-samples", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample-ms", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat(),
                                                  "data_loading"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    if args.epochs < 2:
        raise SystemExit("--epochs must be at least 2: the first is the warm-up, not timed")
    points = [{"start": s, "loaders": int(n)} for s in args.start.split(",")
              for n in args.loaders.split(",")]
    sides = [shoal_side(args), reference_side(args, "users"), reference_side(args, "best")]
    settings = settings_of(args)
    cmp = Comparison(args.out, points, sides, args.repeats, settings, args.sample_ms,
                     context={"cores": os.cpu_count()},
                     describe=lambda p: f"{p['start']} loaders={p['loaders']}")
    cmp.run()
    print(cmp.write_summary(
        ("start", "loaders"),
        heading=lambda p: (f"## {p['start']}, {p['loaders']} loader(s): batch "
                           f"{args.batch_size}, epochs of {args.epoch_samples} samples, the "
                           f"mean of epochs 2-{args.epochs}"),
        extra=[figure_column("data wait s / epoch", "data_s"),
               figure_column("load CPU s / epoch", "load_cpu_s"),
               ("Shoal's own PSS / outside", own_pss_check)]))


if __name__ == "__main__":
    main()
