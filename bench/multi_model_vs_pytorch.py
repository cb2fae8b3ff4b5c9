#!/usr/bin/python3
"""multi_model (seed 001) with Shoal and with the original loop in PyTorch, side by side.

For each n it runs Shoal's multi_model (each variant in its own worker, in turn) and
reference_multi_model.py (the original's loop, the variants in turn in one process) with the same
shapes, iterations, batch, optimiser and one thread, and prints time per iteration of each variant
for both (PyTorch as users run it, and at its best tuning: glibc's thresholds raised), the ratios,
each variant against n separate Linears, and Shoal's peak allocated MiB.

  bench/multi_model_vs_pytorch.py [--models 1,8,32,64] [--iterations 100]
"""
import argparse
import json
import os
import subprocess
import sys

from shoal_bench import ROOT, daemon

# PyTorch at its best tuning: glibc keeps freed memory for the next iteration (see
# reference_hogwild.py); as users run it: glibc's defaults.
TUNED = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}


def reference(n, iterations, tuned):
    env = {**os.environ, **(TUNED if tuned else {})}
    out = subprocess.run(["/usr/bin/python3", REFERENCE, "--models", str(n), "--iterations",
                          str(iterations), "--threads", "1"], check=True, capture_output=True,
                         text=True, env=env).stdout
    return {v["variant"]: v for v in json.loads(out.strip().splitlines()[-1])["variants"]}

REFERENCE = os.path.join(ROOT, "bench", "reference_multi_model.py")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="1,8,32,64")
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    rows = []
    with daemon(args.bin) as shoal_cli:
        for n in [int(x) for x in args.models.split(",")]:
            e = shoal_cli("submit", "--kind", "multi_model", "--models", str(n), "--iterations",
                          str(args.iterations), "--threads", "1", "--wait", "--json")
            assert e["state"] == "SUCCEEDED", e
            shoal = {v["variant"]: v for v in e["result"]["multi_model"]["variants"]}
            torch = reference(n, args.iterations, False)
            best = reference(n, args.iterations, True)
            base_s = next(shoal[k]["total_ms"] for k in ("linear", "mlinear") if k in shoal)
            base_t = next(torch[k]["total_s"] * 1e3 for k in ("linear", "mlinear") if k in torch)
            for name, v in shoal.items():
                s_ms = v["total_ms"] / args.iterations
                t_ms = torch[name]["total_s"] * 1e3 / args.iterations
                b_ms = best[name]["total_s"] * 1e3 / args.iterations
                rows.append((n, name, s_ms, t_ms, b_ms, v["total_ms"] / base_s,
                             torch[name]["total_s"] * 1e3 / base_t,
                             v["peak_allocated_bytes"] / 2**20))
            print(f"done: n={n}", file=sys.stderr)
    print(f"multi_model, batch 32, {args.iterations} iterations, 1 thread, {os.cpu_count()} cores; "
          "ms per iteration, definition included\n")
    print("| n | variant | Shoal ms/it | PyTorch ms/it (users) | PyTorch ms/it (best) | Shoal / users "
          "| Shoal / best | Shoal vs n Linears | PyTorch (users) vs n Linears | Shoal peak allocated MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for n, name, s, t, b, sv, tv, mib in rows:
        print(f"| {n} | {name} | {s:.3f} | {t:.3f} | {b:.3f} | {s / t:.2f} | {s / b:.2f} | {sv:.2f} | "
              f"{tv:.2f} | {mib:.2f} |")


if __name__ == "__main__":
    main()
