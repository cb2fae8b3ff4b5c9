#!/usr/bin/python3
"""data_parallel (seed 002) with Shoal and with PyTorch's DistributedDataParallel, side by side.

One Shoal sweep over workers x per-worker batch x scaling, then reference_data_parallel.py (DDP on
Gloo, the same network, per-worker batch, steps and threads) for every point, as users run it and
at its best tuning. Prints, per point: Shoal's step split (compute, communication measured, the
seed's subtractive estimate), its bus bandwidth and speed-up, both throughputs and their ratio.
Points with more workers than cores are oversubscribed: say so when quoting them.

  bench/data_parallel_vs_pytorch.py [--model mnist_convnet|resnet18_cifar] [--workers 1,2,4]
                                    [--batch 32,128] [--scaling weak,strong] [--batches 10]
"""
import argparse
import json
import os
import subprocess

from shoal_bench import ROOT, daemon, run_json

REFERENCE = os.path.join(ROOT, "bench", "reference_data_parallel.py")


def reference(model, workers, per_worker, batches, tuning):
    return run_json(["/usr/bin/python3", REFERENCE, "--model", model, "--workers", str(workers),
                     "--batch-per-worker", str(per_worker), "--batches", str(batches),
                     "--tuning", tuning])


def cell(table, row, col):
    c = table["rows"][row]["cells"][col]
    return c["text"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="mnist_convnet")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--batch", default="32,128")
    ap.add_argument("--scaling", default="weak,strong")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    with daemon(args.bin) as cli:
        sweep = cli("sweep", "--kind", "data_parallel", "--model", args.model, "--workers",
                    args.workers, "--batch-size", args.batch, "--scaling", args.scaling,
                    "--batches", str(args.batches), "--eval-samples", "0", "--wait", "--json")
    tables = {t["key"]: t for t in sweep["tables"]}
    step, scale = tables["data_parallel_step_ms"], tables["data_parallel_scaling"]
    cores = os.cpu_count()
    print(f"model {args.model}, {args.batches} steps a point, {cores} cores; "
          "ms per step, samples/s over the training window\n")
    print("| scaling | batch | workers | per worker | step | compute | comm | comm (subtr.) "
          "| bus GB/s | speed-up | Shoal samples/s | PyTorch users | PyTorch best "
          "| Shoal/users | Shoal/best |")
    print("|" + " --- |" * 15)
    for i, e in enumerate(sweep["experiments"]):
        spec, d = e["spec"], e["result"]["data_parallel"]
        k, per = spec["workers"], d["batch_per_worker"]
        users = reference(args.model, k, per, args.batches, "users")["samples_per_sec"]
        best = reference(args.model, k, per, args.batches, "best")["samples_per_sec"]
        mine = e["result"]["samples_per_sec"]
        over = " (oversubscribed)" if k > cores else ""
        print(f"| {spec['data_parallel']['scaling']} | {spec['batch_size']} | {k}{over} | {per} "
              f"| {d['step_ms']:.0f} | {d['compute_ms']:.0f} | {d['comm_ms']:.1f} "
              f"| {cell(step, i, 3)} | {cell(scale, i, 5)} | {cell(scale, i, 3)} "
              f"| {mine:.1f} | {users:.1f} | {best:.1f} | {mine / users:.2f} | {mine / best:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
