#!/usr/bin/python3
"""Time from asking for N workers to all N training, by start method: Shoal's fork, forkserver and
spawn against torch.multiprocessing's fork, forkserver and spawn (Debian's PyTorch, same network).

Shoal: `start_ms` of the result (the leader's first request -> the last worker's first step).
PyTorch: the first Process.start() -> the last worker's first step (forkserver's server is
started by that first start(), as users meet it). Medians over --repeats.

  bench/ready_time.py [--workers 16] [--repeats 3]
"""
import argparse
import os
import statistics

from shoal_bench import ROOT, daemon, reference


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()

    rows = {}
    # The settle time lets the forkserver load LibTorch, as it has on a daemon that has been up.
    with daemon(args.bin, settle_s=2.0) as shoal_cli:
        for start in ["fork", "forkserver", "spawn"]:
            shoal, ref = [], []
            for _ in range(args.repeats):
                e = shoal_cli("submit", "--workers", str(args.workers), "--start", start, "--batches", "1",
                              "--threads", "1", "--dataset", args.dataset, "--eval-samples", "0", "--wait", "--json")
                assert e["state"] == "SUCCEEDED", e
                shoal.append(e["result"]["start_ms"])
                r = reference("--workers", args.workers, "--start", start, "--batches", 1, "--threads", 1,
                              "--dataset", args.dataset)
                ref.append(r["start_ms"])
            rows[start] = (statistics.median(shoal), statistics.median(ref))
    print(f"{args.workers} workers: request -> all training, ms (median of {args.repeats}, {os.cpu_count()} cores)")
    print()
    print("| start method | Shoal | PyTorch | Shoal / PyTorch | Shoal / Shoal spawn |")
    print("| --- | --- | --- | --- | --- |")
    for start, (s, r) in rows.items():
        print(f"| {start} | {s:.0f} | {r:.0f} | {s / r:.3f} | {s / rows['spawn'][0]:.3f} |")


if __name__ == "__main__":
    main()
