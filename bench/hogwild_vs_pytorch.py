#!/usr/bin/python3
"""Runs the same Hogwild experiment with Shoal and with torch.multiprocessing, side by side.

PyTorch runs twice per point: as users run it (glibc's defaults, PyTorch's own thread count) and
at its best tuning (MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ raised, the same threads per
process as Shoal: one when there are at least as many workers as cores, torch preloaded in the
forkserver). For each start method and worker count it prints peak PSS sums, samples/s and times
to ready of all three and the ratios Shoal / PyTorch, medians over --repeats runs. Needs a built
tree (deploy/build.sh) and Debian's python3-torch.

  bench/hogwild_vs_pytorch.py [--workers 1,2,4] [--start fork,spawn,forkserver] [--batches 20]
                              [--repeats 3] [--allocator cache,planned,planned+lean]

Each --allocator entry is one Shoal variant: an allocator, "+lean" for --activations lean, and
"+libtorch" for --kernels libtorch (LibTorch's max-pool kernels instead of Shoal's) and
"+turns" for --concurrent-steps of the cores' worth (workers take turns at their steps and
share that many step arenas), e.g. default,default+libtorch,default+lean,default+turns.
"""
import argparse
import os
import statistics
import sys

from shoal_bench import ROOT, daemon, reference

TUNINGS = ("users", "best")


def run_point(shoal_cli, args, start, share, w, threads):
    """Medians of --repeats runs of Shoal (each allocator) and of PyTorch at each tuning, interleaved."""
    allocators = args.allocator.split(",")
    runs = {who: [] for who in allocators + list(TUNINGS)}
    for _ in range(args.repeats):
        for allocator in allocators:
            name, *extras = allocator.split("+")
            lean = "lean" in extras
            # "default": no --allocator at all, what a user who types no flag gets.
            chosen = [] if name == "default" else ["--allocator", name]
            if "libtorch" in extras:
                chosen += ["--kernels", "libtorch"]
            if "turns" in extras:  # as many steps at once as the cores hold, arenas shared
                chosen += ["--concurrent-steps", str(min(w, max(1, (os.cpu_count() or 1) // threads)))]
            e = shoal_cli("submit", "--workers", str(w), "--start", start, "--share", share,
                          "--batches", str(args.batches), "--batch-size", str(args.batch_size),
                          "--threads", str(threads), "--dataset", args.dataset, "--eval-samples", "0",
                          *chosen, "--activations", "lean" if lean else "pytorch",
                          "--wait", "--json")
            assert e["state"] == "SUCCEEDED", e
            runs[allocator].append(e["result"])
        for tuning in TUNINGS:
            r = reference("--workers", w, "--start", start, "--share", share, "--batches", args.batches,
                          "--batch-size", args.batch_size, "--threads", threads if tuning == "best" else 0,
                          "--tuning", tuning, "--dataset", args.dataset)
            assert r["ok"], r
            runs[tuning].append(r)
    return {who: {k: statistics.median(x[k] for x in xs)
                  for k in ("peak_pss_sum_bytes", "samples_per_sec", "ready_ms")}
            for who, xs in runs.items()}


def print_table(rows, key, title, fmt, allocators):
    print(f"{title}\n")
    shoal = " | ".join(f"Shoal {a}" for a in allocators)
    ratios = " | ".join(f"{a} / users | {a} / best" for a in allocators)
    print(f"| start | share | workers | {shoal} | PyTorch as users run it | PyTorch best | {ratios} |")
    print("| --- " * (5 + 3 * len(allocators)) + "|")
    for (start, share, w, m) in rows:
        u, b = m["users"][key], m["best"][key]
        cells = " | ".join(fmt(m[a][key]) for a in allocators)
        rcells = " | ".join(f"{m[a][key] / u:.2f} | {m[a][key] / b:.2f}" for a in allocators)
        print(f"| {start} | {share} | {w} | {cells} | {fmt(u)} | {fmt(b)} | {rcells} |")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--start", default="fork,spawn,forkserver")
    ap.add_argument("--share", default="yes")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--allocator", default="cache",
                    help="Shoal's allocator policies, comma-separated: default (no flag) | cache | "
                         "planned | retain | system")
    ap.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()

    cores = os.cpu_count()
    rows = []
    with daemon(args.bin) as shoal_cli:
        for start in args.start.split(","):
            for share in args.share.split(","):
                for w in [int(x) for x in args.workers.split(",")]:
                    rows.append((start, share, w, run_point(shoal_cli, args, start, share, w,
                                                            max(1, cores // w))))
                    print(f"done: {start} share={share} workers={w}", file=sys.stderr)

    print(f"Hogwild, mnist_convnet, batch {args.batch_size} x {args.batches} per worker, {cores} cores, "
          f"Shoal allocator(s) {args.allocator}, medians of {args.repeats}\n")
    allocators = args.allocator.split(",")
    print_table(rows, "peak_pss_sum_bytes", "Peak PSS sum, GiB", lambda v: f"{v / 2**30:.2f}", allocators)
    print_table(rows, "samples_per_sec", "Samples/s (all workers)", lambda v: f"{v:.1f}", allocators)
    print_table(rows, "ready_ms", "Ready ms (start -> every worker training)", lambda v: f"{v:.0f}",
                allocators)


if __name__ == "__main__":
    main()
