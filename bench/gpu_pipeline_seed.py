#!/usr/bin/env python3
"""Seed 004's table (torchgpipe's AmoebaNet-D memory benchmark, GPipe's Table 1) with Shoal's
stage processes, on a GPU node (stage i on device i mod the node's devices, as the seed puts one
partition on each GPU; all on device 0 on a one-GPU node; activations through CUDA IPC slots):

    deploy/gpu-node.sh python3 bench/gpu_pipeline_seed.py [--out DIR]

The five configurations as the seed runs them (SEEDS.md 004): batch 128, 128 micro-batches,
checkpoint except_last, 2 steps, RMSprop. Per configuration it prints parameters, model memory
(12 bytes a parameter), and the seed's "peak activation memory" two ways: from each stage's CUDA
allocator peak reserved (the seed's max_memory_cached) and from peak allocated, each summed over
stages minus model memory; and NVML's per-process peaks summed (contexts included). Each run's
JSON goes to --out. --device cpu with smaller --batch/--chunks/--filters-div is a smoke test."""
import argparse
import json
import os
import shlex
import subprocess

SHOAL = shlex.split(os.environ.get("SHOAL", "shoal"))
CONFIGS = [  # name, L, D, balance (SEEDS.md 004)
    ("baseline", 18, 208, "24"),
    ("pipeline-1", 18, 416, "24"),
    ("pipeline-2", 18, 544, "16,8"),
    ("pipeline-4", 36, 544, "16,12,7,7"),
    ("pipeline-8", 72, 512, "23,16,11,6,6,5,5,6"),
]
GIB = 2**30


def run(name, layers, filters, balance, a):
    chunks = 1 if name == "baseline" else a.chunks  # the seed's baseline has no pipeline
    args = ["submit", "--kind", "pipeline", "--device", a.device, "--dataset", "synthetic",
            "--layers", str(layers), "--filters", str(filters),
            "--stages", str(len(balance.split(","))), "--balance", balance,
            "--batch-size", str(a.batch), "--chunks", str(chunks), "--checkpoint", "except_last",
            "--batches", "2", "--wait", "--json"]
    r = subprocess.run(SHOAL + args, capture_output=True, text=True)
    if r.returncode != 0 and not r.stdout.strip():
        return {"state": "REFUSED", "error": r.stderr.strip()}
    return json.loads(r.stdout)


def row(name, layers, filters, e):
    p = e.get("result", {}).get("pipeline", {})
    stages = p.get("stage", [])
    if e.get("state") != "SUCCEEDED" or not stages:
        return f"| {name} | ({layers}, {filters}) | {e.get('state')}: {e.get('error', '')} |"
    model = p["model_memory_bytes"]
    alloc = sum(s.get("peak_allocated_bytes", 0) for s in stages)
    res = [s.get("peak_reserved_bytes") for s in stages]
    nvml = [s.get("peak_gpu_memory_bytes") for s in stages]
    fmt = lambda v: f"{v / GIB:.2f}" if v is not None else "-"
    reserved = sum(res) if None not in res else None
    # An absent figure is null in Shoal's JSON: on the CPU a stage has no CUDA device.
    devices = ",".join("cpu" if s.get("cuda_device") is None else str(s["cuda_device"])
                       for s in stages)
    return (f"| {name} | ({layers}, {filters}) | {devices} | {p['parameters'] / 1e6:.2f}M | "
            f"{fmt(model)} | {fmt(reserved - model if reserved is not None else None)} | "
            f"{fmt(alloc - model)} | {fmt(sum(nvml) if None not in nvml else None)} | "
            f"{p['step_ms']:.0f} |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/results/pipeline-seed")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--chunks", type=int, default=128)
    ap.add_argument("--filters-div", type=float, default=1.0, help="scale D down (smoke tests)")
    ap.add_argument("--configs", default=",".join(c[0] for c in CONFIGS))
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    print("| config | (L, D) | stage devices | parameters | model GiB | activation GiB (reserved) | "
          "activation GiB (allocated) | NVML GiB, stages summed | step ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, layers, filters, balance in CONFIGS:
        if name not in a.configs.split(","):
            continue
        filters = max(4, int(round(filters / a.filters_div / 4)) * 4)  # D stays a multiple of 4
        e = run(name, layers, filters, balance, a)
        with open(os.path.join(a.out, f"{name}.json"), "w") as f:
            json.dump(e, f, indent=1)
        print(row(name, layers, filters, e), flush=True)


if __name__ == "__main__":
    main()
