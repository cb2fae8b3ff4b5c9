#!/usr/bin/env python3
"""A user's TorchScript model on CUDA: Shoal beside PyTorch's eager Hogwild of the same module on
the same GPU, on a GPU node under deploy/gpu-node.sh ($SHOAL):

  deploy/gpu-node.sh python3 bench/gpu_user_model.py --model resnet50 --input 3,224,224 \
      --workers 1,2,4 --share yes,no --start spawn --batch-size 32 --batches 60 --out DIR

The module is torchvision's (random weights, seeded), scripted with torch.jit.script and saved:
Shoal trains the archive (`--model-file`), bench/reference_user_model.py --device cuda trains
the eager module with the archive's weights, so both start from the same numbers. Equal terms:
the same synthetic data shape and size (Shoal's synthetic set: noise plus a class pattern, as many
samples as fit 256 MiB, at most 1024), SGD lr 0.01 momentum 0.5, cross-entropy, one CPU thread a
worker, 3 untimed forward+backward passes on the first batch before the workers start together
(Shoal's warm-up), samples/s over the window from the first worker's first timed step to the last
worker's end. Both sides' GPU memory is read by this script (NVML, every --sample-ms, every
compute process on the device: a run has the GPU to itself; torch_reference.GpuSampler), and
the device's utilisation.

The points (workers x share, the start method given) are fixed before the runs and run
--repeats times each, Shoal and PyTorch alternating in order; every run is appended to
DIR/runs.jsonl as it ends; the tables print medians, spreads (min-max) and Shoal / PyTorch.
"""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from torch_reference import GpuSampler  # noqa: E402  (the one NVML reader of both sides)
REFERENCE = os.path.join(HERE, "reference_user_model.py")
WARM_UP = 3  # worker/model_file.h kWarmUpRuns


def gpu_figures(reader):
    """What the outside reader (torch_reference.GpuSampler over every process) saw of a run."""
    per = sorted(reader.per_pid.values())
    busy = [u for _, u in reader.util if u > 0]
    return {"gpu_peak_sum_bytes": reader.peak, "gpu_per_process_bytes": per,
            "gpu_largest_process_bytes": per[-1] if per else None,
            "gpu_util_mean_busy_percent": statistics.mean(busy) if busy else None}


def synthetic_samples(shape, batch):
    sample = 4
    for d in shape:
        sample *= d
    return max(batch, min(1024, (256 << 20) // sample))  # shared/spec/input_spec.cc


def make_archive(args, path):
    import torch
    import torchvision
    torch.manual_seed(args.seed)
    m = getattr(torchvision.models, args.model)(num_classes=args.classes)
    torch.jit.script(m).save(path)


def shoal_run(args, archive, workers, share):
    shape = "float32[B," + args.input + "]"
    cmd = shlex.split(os.environ["SHOAL"]) + [
        "submit", "--model-file", archive, "--input", shape, "--classes", str(args.classes),
        "--device", "cuda", "--workers", str(workers), "--share", share, "--start", args.start,
        "--batch-size", str(args.batch_size), "--batches", str(args.batches), "--threads", "1",
        "--seed", str(args.seed), "--wait", "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.point_timeout)
    try:
        e = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"ok": False, "error": r.stderr.strip()[-1500:]}
    res = e.get("result") or {}
    return {"ok": e.get("state") == "SUCCEEDED", "error": e.get("error", ""), "id": e.get("id"),
            "samples_per_sec": res.get("samples_per_sec"),
            "shoal_peak_gpu_memory_bytes": res.get("peak_gpu_memory_bytes"),
            "first_loss": res.get("first_loss"), "last_loss": res.get("last_loss"),
            "phases_ms": {k: res.get(k) for k in ("data_ms", "forward_ms", "backward_ms",
                                                  "optimizer_ms")},
            "peak_pss_sum_bytes": res.get("peak_pss_sum_bytes")}


def torch_run(args, archive, workers, share):
    cmd = [sys.executable, REFERENCE, "--torchvision", args.model, "--archive", archive,
           "--input", args.input, "--classes", str(args.classes),
           "--samples", str(synthetic_samples([int(d) for d in args.input.split(",")],
                                              args.batch_size)),
           "--device", "cuda", "--share", share, "--start", args.start, "--workers", str(workers),
           "--batches", str(args.batches), "--batch-size", str(args.batch_size), "--threads", "1",
           "--warm-up", str(WARM_UP), "--seed", str(args.seed), "--sample-ms", "200"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.point_timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"no result within {args.point_timeout} s"}
    try:
        j = json.loads(r.stdout.strip().splitlines()[-1])
    except (IndexError, json.JSONDecodeError):
        return {"ok": False, "error": r.stderr.strip()[-1500:]}
    return {"ok": bool(j.get("ok")), "samples_per_sec": j.get("samples_per_sec"),
            "peak_pss_sum_bytes": j.get("peak_pss_sum_bytes"), "error": r.stderr.strip()[-500:]}


def measured(run, *a):
    t0 = time.time()
    with GpuSampler(ARGS.sample_ms, anyone=True) as reader:
        out = run(*a)
    out.update(gpu_figures(reader))
    out["wall_s"] = time.time() - t0
    return out


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs):
    xs = [x for x in xs if x is not None]
    return f"{min(xs):.0f}-{max(xs):.0f}" if len(xs) > 1 else ""


def table(runs, points):
    gib = lambda b: f"{b / 2**30:.2f}" if b is not None else "-"
    rows = ["| workers | share | samples/s Shoal | PyTorch | Shoal/PyTorch | GPU GiB Shoal (sum) "
            "| PyTorch | ratio | largest process GiB Shoal | PyTorch | util % Shoal | PyTorch |",
            "|" + "---|" * 12]
    for (w, share) in points:
        side = {s: [r for r in runs if r["side"] == s and r["workers"] == w and r["share"] == share
                    and r["ok"]] for s in ("shoal", "pytorch")}
        f = {s: {k: median([r.get(k) for r in side[s]]) for k in
                 ("samples_per_sec", "gpu_peak_sum_bytes", "gpu_largest_process_bytes",
                  "gpu_util_mean_busy_percent")} for s in side}
        ratio = lambda k, fmt: (fmt.format(f["shoal"][k] / f["pytorch"][k])
                                if f["shoal"][k] and f["pytorch"][k] else "-")
        sps = {s: (f"{f[s]['samples_per_sec']:.0f}" if f[s]["samples_per_sec"] else "-") +
               (f" ({spread([r['samples_per_sec'] for r in side[s]])})"
                if spread([r['samples_per_sec'] for r in side[s]]) else "") for s in side}
        util = {s: f"{f[s]['gpu_util_mean_busy_percent']:.0f}"
                if f[s]["gpu_util_mean_busy_percent"] is not None else "-" for s in side}
        rows.append(f"| {w} | {share} | {sps['shoal']} | {sps['pytorch']} | "
                    f"{ratio('samples_per_sec', '{:.2f}')} | {gib(f['shoal']['gpu_peak_sum_bytes'])} | "
                    f"{gib(f['pytorch']['gpu_peak_sum_bytes'])} | {ratio('gpu_peak_sum_bytes', '{:.2f}')} | "
                    f"{gib(f['shoal']['gpu_largest_process_bytes'])} | "
                    f"{gib(f['pytorch']['gpu_largest_process_bytes'])} | {util['shoal']} | "
                    f"{util['pytorch']} |")
    return "\n".join(rows)


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet50", help="a torchvision.models constructor")
    ap.add_argument("--input", default="3,224,224", help="one sample's shape")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--share", default="yes,no")
    ap.add_argument("--start", default="spawn")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sample-ms", type=int, default=50)
    ap.add_argument("--point-timeout", type=int, default=240)
    ap.add_argument("--out", required=True)
    ARGS = args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    archive = os.path.join(args.out, f"{args.model}.pt")
    make_archive(args, archive)
    points = [(int(w), s) for s in args.share.split(",") for w in args.workers.split(",")]
    runs = []
    for rep in range(args.repeats):
        for (w, share) in points:
            order = [("shoal", shoal_run), ("pytorch", torch_run)]
            for side, fn in (order if rep % 2 == 0 else order[::-1]):
                r = measured(fn, args, archive, w, share)
                r.update({"side": side, "workers": w, "share": share, "repeat": rep,
                          "start": args.start, "model": args.model,
                          "batch_size": args.batch_size, "batches": args.batches})
                runs.append(r)
                with open(os.path.join(args.out, "runs.jsonl"), "a") as f:
                    f.write(json.dumps(r) + "\n")
                print(f"{side} workers {w} share {share}: ok {r['ok']} "
                      f"{r.get('samples_per_sec') or 0:.0f} samples/s, GPU "
                      f"{(r['gpu_peak_sum_bytes'] or 0) / 2**30:.2f} GiB {r.get('error', '')[:300]}",
                      flush=True)
    head = (f"{args.model} ({args.input}, {args.classes} classes), start {args.start}, batch "
            f"{args.batch_size} x {args.batches} a worker, {args.repeats} run(s) a point; median "
            f"(min-max); GPU memory read by NVML beside both every {args.sample_ms} ms.")
    text = head + "\n\n" + table(runs, points)
    print(text)
    with open(os.path.join(args.out, "tables.md"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
