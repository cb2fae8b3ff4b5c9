#!/usr/bin/python3
"""data_loading (seed 003) with Shoal and with torch.utils.data.DataLoader, side by side.

For each loader count and start method it runs Shoal's data_loading kind and
reference_data_loading.py (the same ConvNet, Fashion-MNIST, augmentation, batch, epochs, shuffle
and prefetch; DataLoader workers = loaders) as users run it (PIL transforms, glibc's defaults,
PyTorch's threads) and at its best (tensor transforms, glibc's thresholds raised, Shoal's
threads), and prints per epoch (mean over the epochs after the first) the trainer's wait for data,
its compute, the epoch, the CPU time spent making batches, and the peak PSS sum, with the ratios.

  bench/data_loading_vs_pytorch.py [--loaders 0,1,2] [--start fork] [--epochs 2]
                                   [--epoch-samples 512] [--batch-size 64]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

from shoal_bench import ROOT, daemon

REFERENCE = os.path.join(ROOT, "bench", "reference_data_loading.py")


def later_epochs(epochs):
    return epochs[1:] if len(epochs) > 1 else epochs


def shoal_figures(e):
    eps = later_epochs(e["result"]["epochs"])
    mean = lambda k: statistics.mean(x[k] for x in eps) / 1000
    # The kind's own figure lives in its message (result.data_loading), by epoch.
    load = {x["epoch"]: x["load_cpu_ms"] for x in e["result"]["data_loading"]["epochs"]}
    load_cpu_s = statistics.mean(load[x["epoch"]] for x in eps) / 1000
    return {"data_s": mean("data_ms"), "compute_s": mean("train_ms"), "epoch_s": mean("wall_ms"),
            "load_cpu_s": load_cpu_s, "pss_gib": e["result"]["peak_pss_sum_bytes"] / 2**30}


def torch_figures(args, loaders, start, tuning, threads):
    cmd = ["/usr/bin/python3", REFERENCE, "--loaders", str(loaders), "--start", start,
           "--prefetch", str(args.prefetch), "--epochs", str(args.epochs), "--epoch-samples",
           str(args.epoch_samples), "--batch-size", str(args.batch_size), "--tuning", tuning,
           "--dataset", args.dataset]
    if tuning == "best":
        cmd += ["--threads", str(threads)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    eps = later_epochs(r["epochs"])
    figures = {k: statistics.mean(x[k] for x in eps)
               for k in ("data_s", "compute_s", "epoch_s", "load_cpu_s")}
    figures["pss_gib"] = r["peak_pss_sum_bytes"] / 2**30
    return figures


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loaders", default="0,1,2")
    ap.add_argument("--start", default="fork")
    ap.add_argument("--prefetch", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--epoch-samples", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    rows = []
    with daemon(args.bin) as shoal_cli:
        for start in args.start.split(","):
            for loaders in [int(x) for x in args.loaders.split(",")]:
                e = shoal_cli("submit", "--kind", "data_loading", "--loaders", str(loaders),
                              "--start", start, "--prefetch", str(args.prefetch), "--epochs",
                              str(args.epochs), "--epoch-samples", str(args.epoch_samples),
                              "--batch-size", str(args.batch_size), "--eval-samples", "0",
                              "--dataset", args.dataset, "--wait", "--json")
                assert e["state"] == "SUCCEEDED", e
                threads = e["spec"]["threads"]
                rows.append((loaders, start, shoal_figures(e),
                             torch_figures(args, loaders, start, "users", threads),
                             torch_figures(args, loaders, start, "best", threads)))
                print(f"done: loaders={loaders} start={start}", file=sys.stderr)
    print(f"data_loading, batch {args.batch_size}, epochs of {args.epoch_samples} samples, "
          f"{os.cpu_count()} cores; seconds per epoch (mean of the epochs after the first)\n")
    print("| loaders | start | run | data wait s | compute s | epoch s | load CPU s | peak PSS GiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for loaders, start, s, u, b in rows:
        for name, f in (("Shoal", s), ("PyTorch users", u), ("PyTorch best", b)):
            print(f"| {loaders} | {start} | {name} | {f['data_s']:.3f} | {f['compute_s']:.2f} | "
                  f"{f['epoch_s']:.2f} | {f['load_cpu_s']:.3f} | {f['pss_gib']:.2f} |")
    print("\n| loaders | start | epoch Shoal / users | epoch Shoal / best | load CPU Shoal / best "
          "| PSS Shoal / users | PSS Shoal / best |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for loaders, start, s, u, b in rows:
        print(f"| {loaders} | {start} | {s['epoch_s'] / u['epoch_s']:.2f} | "
              f"{s['epoch_s'] / b['epoch_s']:.2f} | {s['load_cpu_s'] / b['load_cpu_s']:.3f} | "
              f"{s['pss_gib'] / u['pss_gib']:.2f} | {s['pss_gib'] / b['pss_gib']:.2f} |")


if __name__ == "__main__":
    main()
