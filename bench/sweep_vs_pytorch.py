#!/usr/bin/python3
"""The published study's CPU sweep, with Shoal and with the PyTorch reference, side by side.

Runs `shoal sweep` over worker counts x start methods x sharing, and bench/reference_hogwild.py
(torch.multiprocessing, Debian's PyTorch) on every point of the same grid with the same network,
data, batch size, batches and threads per process. Prints the host-memory table (peak sum of PSS,
GiB) of each, and their cell-by-cell ratio (Shoal / PyTorch); then the same for samples/s.

  bench/sweep_vs_pytorch.py [--workers 1,2,4,8] [--start fork,spawn,forkserver] [--share yes,no] [--batches 5]
"""
import argparse
import os
import sys

from shoal_bench import ROOT, daemon, reference


def table(title, workers, rows, cell):
    out = [f"### {title}", "", "| start | share | " + " | ".join(str(w) for w in workers) + " |",
           "| --- | --- | " + " | ".join("---" for _ in workers) + " |"]
    for (start, share) in rows:
        out.append(f"| {start} | {share} | " + " | ".join(cell(start, share, w) for w in workers) + " |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,4,8")
    ap.add_argument("--start", default="fork,spawn,forkserver")
    ap.add_argument("--share", default="yes,no")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    starts, shares = args.start.split(","), args.share.split(",")
    cores = os.cpu_count()

    with daemon(args.bin) as shoal_cli:
        report = shoal_cli("sweep", "--workers", args.workers, "--start", args.start, "--share", args.share,
                           "--device", "cpu", "--batches", str(args.batches), "--batch-size", str(args.batch_size),
                           "--eval-samples", "0", "--dataset", args.dataset, "--wait", "--json")
    shoal = {}
    for e in report["experiments"]:
        s = e["spec"]
        shoal[(s["start"], "yes" if s["share"] else "no", s["workers"])] = e["result"]
    print(f"shoal sweep {report['sweep']['id']} done", file=sys.stderr)

    ref = {}
    for start in starts:
        for share in shares:
            for w in workers:
                threads = max(1, cores // w)
                ref[(start, share, w)] = reference("--workers", w, "--start", start, "--share", share,
                                                   "--batches", args.batches, "--batch-size", args.batch_size,
                                                   "--threads", threads, "--dataset", args.dataset)
                print(f"pytorch {start} share={share} workers={w} done", file=sys.stderr)

    rows = [(s, h) for s in starts for h in shares]
    gib = lambda b: f"{b / 2**30:.2f}"
    print(f"CPU sweep, mnist_convnet, batch {args.batch_size} x {args.batches} per worker, {cores} cores; "
          f"threads per worker floor({cores}/workers), at least 1")
    print()
    print(table("Host memory, Shoal (GiB, peak sum of PSS)", workers, rows,
                lambda s, h, w: gib(shoal[(s, h, w)]["peak_pss_sum_bytes"])))
    print(table("Host memory, PyTorch (GiB, peak sum of PSS)", workers, rows,
                lambda s, h, w: gib(ref[(s, h, w)]["peak_pss_sum_bytes"])))
    print(table("Host memory, Shoal / PyTorch", workers, rows,
                lambda s, h, w: f"{shoal[(s, h, w)]['peak_pss_sum_bytes'] / ref[(s, h, w)]['peak_pss_sum_bytes']:.2f}"))
    print(table("Samples/s, Shoal / PyTorch (Shoal; PyTorch)", workers, rows,
                lambda s, h, w: f"{shoal[(s, h, w)]['samples_per_sec'] / ref[(s, h, w)]['samples_per_sec']:.2f} "
                                f"({shoal[(s, h, w)]['samples_per_sec']:.0f}; {ref[(s, h, w)]['samples_per_sec']:.0f})"))


if __name__ == "__main__":
    main()
