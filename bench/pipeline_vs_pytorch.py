#!/usr/bin/python3
"""pipeline (seed 004) with Shoal and with PyTorch, side by side.

For each (stages, chunks, checkpoint) configuration: Shoal's pipeline kind (one process per stage,
threads = cores / stages each) and reference_pipeline.py (the same AmoebaNet-D, mini-batch,
micro-batches and checkpoint mode, threads = cores), as users run it and at its best tuning. One
stage: GPipe's schedule by hand with torch.utils.checkpoint; k stages: PyTorch's own
torch.distributed.pipeline.sync.Pipe cut with Shoal's balance (on the CPU, all its partitions in
one process). Prints the mean step time over every step and the peak RSS of each (Shoal: its
stages' peaks summed, which counts the libraries each maps once per stage), and Shoal's over
PyTorch's. Shoal's counted peak allocation is printed beside them (the figure its pipeline tables
use); PyTorch has no allocation counter on the CPU.

  bench/pipeline_vs_pytorch.py [--layers 18] [--filters 64] [--batch 8] [--batches 4]
                               [--configs 1:1:never,1:4:always,2:4:except_last]
"""
import argparse
import os
import statistics

from shoal_bench import ROOT, daemon, run_json

REFERENCE = os.path.join(ROOT, "bench", "reference_pipeline.py")


def reference(args, stages, chunks, mode, balance, tuning):
    return run_json(["/usr/bin/python3", REFERENCE, "--layers", str(args.layers), "--filters",
                     str(args.filters), "--batch-size", str(args.batch), "--chunks", str(chunks),
                     "--checkpoint", mode, "--batches", str(args.batches), "--tuning", tuning,
                     "--stages", str(stages), "--balance", balance])


def shoal(cli, args, stages, chunks, mode):
    e = cli("submit", "--kind", "pipeline", "--layers", str(args.layers), "--filters",
            str(args.filters), "--batch-size", str(args.batch), "--stages", str(stages),
            "--chunks", str(chunks), "--checkpoint", mode, "--batches", str(args.batches),
            "--threads", str(max(1, os.cpu_count() // stages)), "--wait", "--json")
    st = e["result"]["pipeline"]["stage"]
    balance = ",".join(str(s["end_layer"] - s.get("first_layer", 0)) for s in st)
    return e, st, balance


def parse_configs(text):
    """stages:chunks:checkpoint, or chunks:checkpoint for one stage."""
    out = []
    for c in text.split(","):
        f = c.split(":")
        out.append((int(f[0]), int(f[1]), f[2]) if len(f) == 3 else (1, int(f[0]), f[1]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=18)
    ap.add_argument("--filters", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--configs", default="1:1:never,1:4:always,2:4:except_last")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    print(f"AmoebaNet-D ({args.layers}, {args.filters}), batch {args.batch}, {args.batches} steps, "
          f"{os.cpu_count()} cores; step ms: the mean over every step, both\n")
    print("| stages | balance | chunks | checkpoint | Shoal step ms | PyTorch users | PyTorch best "
          "| Shoal/users | Shoal/best | Shoal peak RSS MiB (stages summed) | PyTorch users RSS "
          "MiB | RSS ratio | Shoal peak allocated MiB |")
    print("| --- " * 13 + "|")
    mib = 1 << 20
    with daemon(args.bin) as cli:
        for stages, chunks, mode in parse_configs(args.configs):
            e, st, balance = shoal(cli, args, stages, chunks, mode)
            users, best = (reference(args, stages, chunks, mode, balance, t)
                           for t in ("users", "best"))
            step = e["result"]["pipeline"]["step_ms"]
            rss = sum(int(s["peak_rss_bytes"]) for s in st)
            alloc = sum(int(s["peak_allocated_bytes"]) for s in st)
            print(f"| {stages} | {balance} | {chunks} | {mode} | {step:.0f} | "
                  f"{users['step_ms']:.0f} | {best['step_ms']:.0f} | "
                  f"{step / users['step_ms']:.2f} | {step / best['step_ms']:.2f} | "
                  f"{rss / mib:.0f} | {users['peak_rss_bytes'] / mib:.0f} | "
                  f"{rss / users['peak_rss_bytes']:.2f} | {alloc / mib:.0f} |", flush=True)


if __name__ == "__main__":
    main()
