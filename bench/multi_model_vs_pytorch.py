#!/usr/bin/python3
"""multi_model (seed 001) with Shoal and with the original loop in PyTorch, side by side.

For every n (models trained at once; fixed before the first run and written to plan.json) three
sides train the same variants (n = 1: linear, conv1d; n > 1: mlinear, mconv1d, gconv1d) with the
same shapes, batch, iterations and optimiser, through bench/harness.py:

  shoal   `shoal submit --kind multi_model --threads T` (each variant in a worker of its own, one
          after the other), on a shoald of its own, settled before the run and stopped after;
  users   bench/reference_multi_model.py (the original's loop, the variants in turn in one
          process) as users run it: PyTorch's own thread count, glibc's defaults;
  best    the same with T threads and glibc's thresholds raised (MALLOC_MMAP_THRESHOLD_,
          MALLOC_TRIM_THRESHOLD_: freed memory kept for the next iteration).

Warm-up: none on either side: each variant's time includes its definition and its first
iteration (oneDNN's kernel creation), as the original's does, so small figures are noisy.
samples/s, both sides alike: variants x iterations x n x batch over the sum of the variants' own
times (Shoal's `total_ms`, the reference's `total_s`): the handover between Shoal's variant
workers is left out, as the reference has none. Each variant's ms per iteration is kept in
raw.jsonl and its median shown.

Memory: one reader in this program (bench/harness.py's OutsideReader) sums the PSS, RSS and USS
of every process a side runs every --sample-ms: for PyTorch the script, for Shoal everything
below shoald (its leader and the variants' workers, one at a time).

  bench/multi_model_vs_pytorch.py [--models 1,8,32] [--iterations 100] [--threads 1]
                                  [--repeats 3] [--out DIR]
"""
import argparse
import datetime
import os
import statistics

from harness import (Comparison, PYTORCH_LABELS, own_pss_check, reference_cmd_side, settings_of,
                     shoal_submit_side)
from shoal_bench import ROOT

REFERENCE = os.path.join(ROOT, "bench", "reference_multi_model.py")
BATCH = 32  # the original's
TUNED = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}


def speed(ms_by_variant, n, iterations):
    """(samples/s over the variants' own times, {variant: ms per iteration})."""
    total_ms = sum(ms_by_variant.values())
    samples = len(ms_by_variant) * iterations * n * BATCH
    return ({"samples_per_sec": samples / (total_ms / 1e3),
             "ms_per_iteration": {v: ms / iterations for v, ms in ms_by_variant.items()}})


def shoal_side(args):
    def argv(p):
        return ["--kind", "multi_model", "--models", str(p["models"]), "--iterations",
                str(args.iterations), "--batch-size", str(BATCH), "--threads", str(args.threads)]

    def more(e, p):
        vs = e["result"]["multi_model"]["variants"]
        return speed({v["variant"]: v["total_ms"] for v in vs}, p["models"], args.iterations)
    return shoal_submit_side(args.bin, argv, more)


def reference_side(args, tuning):
    def argv(p):
        return ["/usr/bin/python3", REFERENCE, "--models", str(p["models"]), "--iterations",
                str(args.iterations), "--batch", str(BATCH), "--threads",
                str(args.threads if tuning == "best" else 0)]

    def more(r, p):
        return speed({v["variant"]: v["total_s"] * 1e3 for v in r["variants"]}, p["models"],
                     args.iterations)
    label = PYTORCH_LABELS[tuning]
    return reference_cmd_side(tuning, label, argv, more,
                              env=lambda p: TUNED if tuning == "best" else {})


def by_variant(side, ok):
    """The median ms per iteration of each variant."""
    per = {}
    for r in ok:
        for v, ms in r["figures"].get("ms_per_iteration", {}).items():
            per.setdefault(v, []).append(ms)
    return ", ".join(f"{v} {statistics.median(xs):.2f}" for v, xs in per.items()) or "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="1,8,32")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1, help="Shoal's, and PyTorch's at its best")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample-ms", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat(),
                                                  "multi_model"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    points = [{"models": int(n)} for n in args.models.split(",")]
    sides = [shoal_side(args), reference_side(args, "users"), reference_side(args, "best")]
    settings = settings_of(args)
    settings["batch"] = BATCH
    cmp = Comparison(args.out, points, sides, args.repeats, settings, args.sample_ms,
                     context={"cores": os.cpu_count()}, describe=lambda p: f"n={p['models']}")
    cmp.run()
    print(cmp.write_summary(
        ("models",),
        heading=lambda p: (f"## n = {p['models']}: batch {BATCH}, {args.iterations} iterations "
                           "a variant"),
        extra=[("ms per iteration by variant", by_variant),
               ("Shoal's own PSS / outside", own_pss_check)]))


if __name__ == "__main__":
    main()
