#!/usr/bin/python3
"""pipeline (seed 004) with Shoal and with PyTorch, side by side, on one stage.

For each (chunks, checkpoint) configuration: Shoal's pipeline kind with one stage (every layer in
one process, threads = cores) and reference_pipeline.py (the same AmoebaNet-D, mini-batch,
micro-batches and checkpoint mode with torch.utils.checkpoint, threads = cores), as users run it
and at its best tuning. Prints the median step time after the first and the process's peak RSS
of each, and Shoal's over PyTorch's. Shoal's counted peak allocation is printed beside them (the
figure its pipeline tables use); PyTorch has no allocation counter on the CPU.

  bench/pipeline_vs_pytorch.py [--layers 18] [--filters 64] [--batch 8] [--batches 4]
                               [--configs 1:never,4:always,4:except_last]
"""
import argparse
import os
import statistics

from shoal_bench import ROOT, daemon, run_json

REFERENCE = os.path.join(ROOT, "bench", "reference_pipeline.py")


def reference(args, chunks, mode, tuning):
    return run_json(["/usr/bin/python3", REFERENCE, "--layers", str(args.layers), "--filters",
                     str(args.filters), "--batch-size", str(args.batch), "--chunks", str(chunks),
                     "--checkpoint", mode, "--batches", str(args.batches), "--tuning", tuning])


def shoal(cli, args, chunks, mode):
    e = cli("submit", "--kind", "pipeline", "--layers", str(args.layers), "--filters",
            str(args.filters), "--batch-size", str(args.batch), "--chunks", str(chunks),
            "--checkpoint", mode, "--batches", str(args.batches), "--threads",
            str(os.cpu_count()), "--wait", "--json")
    stage = e["result"]["pipeline"]["stage"][0]
    return e, stage


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=18)
    ap.add_argument("--filters", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--configs", default="1:never,4:always,4:except_last")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    configs = [(int(c.split(":")[0]), c.split(":")[1]) for c in args.configs.split(",")]
    print(f"AmoebaNet-D ({args.layers}, {args.filters}), batch {args.batch}, {args.batches} steps, "
          f"one stage, {os.cpu_count()} threads; step ms: the mean over every step, both\n")
    print("| chunks | checkpoint | Shoal step ms | PyTorch users | PyTorch best | Shoal/users | "
          "Shoal/best | Shoal peak RSS MiB | PyTorch users RSS MiB | RSS ratio | Shoal peak "
          "allocated MiB |")
    print("| --- " * 11 + "|")
    mib = 1 << 20
    with daemon(args.bin) as cli:
        for chunks, mode in configs:
            e, st = shoal(cli, args, chunks, mode)
            users, best = (reference(args, chunks, mode, t) for t in ("users", "best"))
            step = e["result"]["pipeline"]["step_ms"]
            rss = int(st["peak_rss_bytes"])
            print(f"| {chunks} | {mode} | {step:.0f} | {users['step_ms']:.0f} | "
                  f"{best['step_ms']:.0f} | {step / users['step_ms']:.2f} | "
                  f"{step / best['step_ms']:.2f} | {rss / mib:.0f} | "
                  f"{users['peak_rss_bytes'] / mib:.0f} | {rss / users['peak_rss_bytes']:.2f} | "
                  f"{int(st['peak_allocated_bytes']) / mib:.0f} |", flush=True)


if __name__ == "__main__":
    main()
