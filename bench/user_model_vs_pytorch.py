#!/usr/bin/python3
"""A user's model, Shoal against torch.multiprocessing, side by side in one run.

The model is tests/models/make_models.py's bench_cnn (a CIFAR-shaped CNN with BatchNorm and
Dropout), made now by Debian's PyTorch. Shoal trains its TorchScript archive (--model-file, shared
weights, Hogwild); PyTorch trains the eager module with the same weights on the same kind of data,
as users run it and at its best tuning (bench/reference_user_model.py). For each start method and
worker count: peak PSS sums, samples/s and ready time, medians of --repeats runs (interleaved),
with the ratios Shoal / PyTorch. Shoal's ready_ms includes loading the archive in every worker
that cannot inherit it (spawn, forkserver) and the profiling executor's warm-up steps. Both sides
take the same untimed warm-up (3 forward and backward passes a worker, then a start gate or
barrier), so samples/s times the same steps on both.

  bench/user_model_vs_pytorch.py [--workers 1,2,4] [--start fork,spawn,forkserver]
                                 [--batches 20] [--repeats 3]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

from shoal_bench import ROOT, daemon, run_json

TUNINGS = ("users", "best")
KEYS = ("peak_pss_sum_bytes", "samples_per_sec", "ready_ms")
# A model file's worker's untimed passes before its start gate (worker/model_file.h,
# kWarmUpRuns): the reference takes as many before its barrier.
WARM_UP = 3


def reference(archive, args, start, w, tuning):
    threads = 1 if tuning == "best" else 0
    return run_json(["/usr/bin/python3", os.path.join(ROOT, "bench", "reference_user_model.py"),
                     "--archive", archive, "--workers", str(w), "--start", start,
                     "--batches", str(args.batches), "--batch-size", str(args.batch_size),
                     "--threads", str(threads), "--tuning", tuning, "--warm-up", str(WARM_UP)])


def run_point(cli, archive, args, start, w):
    runs = {who: [] for who in ("shoal",) + TUNINGS}
    for _ in range(args.repeats):
        e = cli("submit", "--model-file", archive, "--input", "float32[B,3,32,32]", "--classes",
                "10", "--workers", str(w), "--start", start, "--batches", str(args.batches),
                "--batch-size", str(args.batch_size), "--threads", "1", "--wait", "--json")
        assert e["state"] == "SUCCEEDED", e
        runs["shoal"].append(e["result"])
        for tuning in TUNINGS:
            r = reference(archive, args, start, w, tuning)
            assert r["ok"], r
            runs[tuning].append(r)
    return {who: {k: statistics.median(x[k] for x in xs) for k in KEYS} for who, xs in runs.items()}


def print_table(rows, key, title, fmt):
    print(f"{title}\n")
    print("| start | workers | Shoal | PyTorch as users run it | PyTorch best | Shoal / users | "
          "Shoal / best |")
    print("| --- " * 7 + "|")
    for start, w, m in rows:
        s, u, b = m["shoal"][key], m["users"][key], m["best"][key]
        print(f"| {start} | {w} | {fmt(s)} | {fmt(u)} | {fmt(b)} | {s / u:.2f} | {s / b:.2f} |")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--start", default="fork,spawn,forkserver")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    models = tempfile.mkdtemp(prefix="shoal-models.")
    subprocess.run(["/usr/bin/python3", "-W", "ignore",
                    os.path.join(ROOT, "tests", "models", "make_models.py"), models], check=True)
    archive = os.path.join(models, "bench_cnn.pt")
    rows = []
    with daemon(args.bin) as cli:
        for start in args.start.split(","):
            for w in (int(x) for x in args.workers.split(",")):
                rows.append((start, w, run_point(cli, archive, args, start, w)))
                print(f"done: {start} {w}", file=sys.stderr)
    print(f"bench_cnn (tests/models/make_models.py), batch {args.batch_size}, {args.batches} "
          f"batches a worker, shared weights, 1 thread a Shoal worker; medians of {args.repeats} "
          f"runs\n")
    print_table(rows, "peak_pss_sum_bytes", "Peak PSS sum (MiB)", lambda v: f"{v / 2**20:.0f}")
    print_table(rows, "samples_per_sec", "Samples/s (all workers)", lambda v: f"{v:.0f}")
    print_table(rows, "ready_ms", "Ready (ms: start to every worker training)", lambda v: f"{v:.0f}")


if __name__ == "__main__":
    main()
