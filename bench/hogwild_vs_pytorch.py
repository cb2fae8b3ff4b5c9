#!/usr/bin/python3
"""Runs the same Hogwild experiment with Shoal and with torch.multiprocessing, side by side.

For each start method and worker count it prints both peak PSS sums, both samples/s, both times
to ready and the ratios (Shoal / PyTorch), medians over --repeats runs. Needs a built tree
(deploy/build.sh) and Debian's python3-torch.

  bench/hogwild_vs_pytorch.py [--workers 1,2,4] [--start fork,spawn] [--batches 20] [--repeats 3]
"""
import argparse
import os
import statistics
import sys

from shoal_bench import ROOT, daemon, reference


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--start", default="fork,spawn")
    ap.add_argument("--share", default="yes")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--allocator", default="cache", help="Shoal worker allocator policy: cache | retain | system")
    ap.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()

    cores = os.cpu_count()
    rows = []
    with daemon(args.bin) as shoal_cli:
        for start in args.start.split(","):
            for share in args.share.split(","):
                for w in [int(x) for x in args.workers.split(",")]:
                    threads = max(1, cores // w)
                    shoal, ref = [], []
                    for _ in range(args.repeats):
                        e = shoal_cli("submit", "--workers", str(w), "--start", start, "--share", share,
                                      "--batches", str(args.batches), "--batch-size", str(args.batch_size),
                                      "--threads", str(threads), "--dataset", args.dataset, "--eval-samples", "0",
                                      "--allocator", args.allocator, "--wait", "--json")
                        assert e["state"] == "SUCCEEDED", e
                        shoal.append(e["result"])
                        r = reference("--workers", w, "--start", start, "--share", share, "--batches", args.batches,
                                      "--batch-size", args.batch_size, "--threads", threads, "--dataset", args.dataset)
                        assert r["ok"], r
                        ref.append(r)
                    med = lambda xs, k: statistics.median(x[k] for x in xs)
                    rows.append((start, share, w, threads,
                                 med(shoal, "peak_pss_sum_bytes") / 2**30, med(ref, "peak_pss_sum_bytes") / 2**30,
                                 med(shoal, "samples_per_sec"), med(ref, "samples_per_sec"),
                                 med(shoal, "ready_ms"), med(ref, "ready_ms"),
                                 med(shoal, "peak_rss_hwm_sum_bytes") / 2**30))
                    print(f"done: {start} share={share} workers={w}", file=sys.stderr)

    print(f"Hogwild, mnist_convnet, batch {args.batch_size} x {args.batches} per worker, {cores} cores, "
          f"Shoal allocator '{args.allocator}', medians of {args.repeats}; ratio = Shoal / PyTorch")
    print()
    print("| start | share | workers | threads | PSS GiB Shoal | PSS GiB PyTorch | ratio | samples/s Shoal "
          "| samples/s PyTorch | ratio | ready ms Shoal | ready ms PyTorch | ratio | Shoal VmHWM sum GiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (start, share, w, t, sp, rp, ss, rs, sr, rr, hwm) in rows:
        print(f"| {start} | {share} | {w} | {t} | {sp:.2f} | {rp:.2f} | {sp / rp:.2f} | {ss:.1f} | {rs:.1f} | "
              f"{ss / rs:.2f} | {sr:.0f} | {rr:.0f} | {sr / rr:.2f} | {hwm:.2f} |")


if __name__ == "__main__":
    main()
