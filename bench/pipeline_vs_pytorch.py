#!/usr/bin/python3
"""pipeline (seed 004) with Shoal and with PyTorch, side by side.

For every configuration (stages:chunks:checkpoint, fixed before the first run and written to
plan.json) three sides train the same AmoebaNet-D on the same random mini-batches, cut into the
same stages by the same --balance (as even as can be, the first stages taking the remainder,
given to both), through bench/harness.py:

  shoal   `shoal submit --kind pipeline` (a process per stage, cores / stages threads each), on a
          shoald of its own, settled before the run and stopped after it;
  users   bench/reference_pipeline.py as users run it (one stage: GPipe's schedule by hand with
          torch.utils.checkpoint; k stages: torch.distributed.pipeline.sync.Pipe, every partition
          in one process on the CPU; the cores' threads), glibc's defaults;
  best    the same with glibc's thresholds raised.

Warm-up: none on either side: both report the mean step over every step (the first one's
one-off costs in both), and samples/s is the mini-batch over that mean, both sides alike.
Shoal's counted peak allocation (the figure its pipeline tables use; PyTorch has no allocation
counter on the CPU) is kept in raw.jsonl and shown.

Memory: one reader in this program (bench/harness.py's OutsideReader) sums the PSS, RSS and USS
of every process a side runs every --sample-ms: PyTorch's one process, Shoal's leader and stages
(whose libraries are mapped once per stage, which PSS shares out).

  bench/pipeline_vs_pytorch.py [--layers 18] [--filters 64] [--batch 8] [--batches 4]
                               [--configs 1:1:never,1:4:always,2:4:except_last]
                               [--repeats 3] [--out DIR]
"""
import argparse
import datetime
import os

from harness import (Comparison, PYTORCH_LABELS, figure_column, own_pss_check, reference_cmd_side,
                     settings_of, shoal_submit_side)
from shoal_bench import ROOT

REFERENCE = os.path.join(ROOT, "bench", "reference_pipeline.py")
HEAD_LAYERS = 6  # the stem's and the head's: a balance sums to --layers + 6 (shoal submit --help)


def balance(args, stages):
    total = args.layers + HEAD_LAYERS
    return ",".join(str(total // stages + (i < total % stages)) for i in range(stages))


def parse_configs(text):
    """stages:chunks:checkpoint, or chunks:checkpoint for one stage."""
    out = []
    for c in text.split(","):
        f = c.split(":")
        stages, chunks, mode = (int(f[0]), int(f[1]), f[2]) if len(f) == 3 else (1, int(f[0]),
                                                                                  f[1])
        out.append({"stages": stages, "chunks": chunks, "checkpoint": mode})
    return out


def speed(args, step_ms):
    return {"samples_per_sec": args.batch / (step_ms / 1e3), "step_ms": step_ms}


def shoal_side(args):
    def argv(p):
        return ["--kind", "pipeline", "--layers", str(args.layers), "--filters",
                str(args.filters), "--batch-size", str(args.batch), "--stages", str(p["stages"]),
                "--balance", balance(args, p["stages"]), "--chunks", str(p["chunks"]),
                "--checkpoint", p["checkpoint"], "--batches", str(args.batches), "--threads",
                str(max(1, os.cpu_count() // p["stages"]))]

    def more(e, p):
        pl = e["result"]["pipeline"]
        return {**speed(args, pl["step_ms"]),
                "peak_allocated_sum_bytes": pl.get("peak_allocated_sum_bytes")}
    return shoal_submit_side(args.bin, argv, more)


def reference_side(args, tuning):
    def argv(p):
        return ["/usr/bin/python3", REFERENCE, "--layers", str(args.layers), "--filters",
                str(args.filters), "--batch-size", str(args.batch), "--chunks", str(p["chunks"]),
                "--checkpoint", p["checkpoint"], "--batches", str(args.batches), "--tuning",
                tuning, "--stages", str(p["stages"]), "--balance", balance(args, p["stages"])]
    label = PYTORCH_LABELS[tuning]
    return reference_cmd_side(tuning, label, argv, lambda r, p: speed(args, r["step_ms"]))


def allocated_mib(side, ok):
    xs = sorted(r["figures"]["peak_allocated_sum_bytes"] / 2**20 for r in ok
                if r["figures"].get("peak_allocated_sum_bytes"))
    return f"{xs[len(xs) // 2]:.0f}" if xs else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=18)
    ap.add_argument("--filters", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--configs", default="1:1:never,1:4:always,2:4:except_last")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample-ms", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat(), "pipeline"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    points = parse_configs(args.configs)
    sides = [shoal_side(args), reference_side(args, "users"), reference_side(args, "best")]
    settings = settings_of(args)
    cmp = Comparison(args.out, points, sides, args.repeats, settings, args.sample_ms,
                     context={"cores": os.cpu_count()},
                     describe=lambda p: f"{p['stages']}:{p['chunks']}:{p['checkpoint']}")
    cmp.run()
    print(cmp.write_summary(
        ("stages", "chunks", "checkpoint"),
        heading=lambda p: (f"## {p['stages']} stage(s) (balance {balance(args, p['stages'])}), "
                           f"{p['chunks']} chunks, checkpoint {p['checkpoint']}: AmoebaNet-D "
                           f"({args.layers}, {args.filters}), batch {args.batch}, "
                           f"{args.batches} steps"),
        extra=[figure_column("step ms", "step_ms", "{:.0f}"),
               ("Shoal peak allocated MiB (stages summed)", allocated_mib),
               ("Shoal's own PSS / outside", own_pss_check)]))


if __name__ == "__main__":
    main()
