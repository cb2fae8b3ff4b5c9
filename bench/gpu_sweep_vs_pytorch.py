#!/usr/bin/env python3
"""The CUDA sweep, with Shoal and with the PyTorch reference, side by side, on a GPU node:

  deploy/gpu-node.sh python3 bench/gpu_sweep_vs_pytorch.py [--workers 1,2,4,8,16]
      [--start spawn,forkserver,fork] [--share yes,no] [--batches 200] [--batch-size 64] [--out DIR]

Runs `$SHOAL sweep --device cuda --dataset synthetic` over worker counts x start methods x sharing,
then bench/reference_hogwild.py --device cuda (torch.multiprocessing, this node's PyTorch, one
thread per process) on every point of the same grid but fork with shared weights (impossible: the
weights' CUDA buffer must exist before the fork), one after the other, with the same network, data,
batch size and batches. Prints Markdown tables: peak GPU memory summed over each side's processes
(NVML) and its ratio (Shoal / PyTorch), the GPU memory each extra worker adds, the mean GPU
utilisation while training, samples/s and host memory (peak sum of PSS). "-": the point did not
run (or failed, said on stderr); "?": it ran but has no such figure. With --out DIR, also writes
tables.md, Shoal's sweep (sweep.json) and report (report.md, report.json, report.svg) and the
reference's figures (reference.jsonl, one line a point as it ends) there. A grid too long for one
sitting runs in parts (--start spawn, then --start forkserver,fork, each with its own --out);
--tables-from DIR1,DIR2 then prints the parts' tables as one grid.
"""
import argparse
import json
import os
import shlex
import signal
import subprocess
import sys


def table(title, workers, rows, cell):
    """A Markdown grid: a row per (start, share), a column per worker count."""
    out = [f"### {title}", "", "| start | share | " + " | ".join(str(w) for w in workers) + " |",
           "| --- | --- | " + " | ".join("---" for _ in workers) + " |"]
    for (start, share) in rows:
        out.append(f"| {start} | {share} | " +
                   " | ".join(cell(start, share, w) for w in workers) + " |")
    return "\n".join(out) + "\n"


REFERENCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reference_hogwild.py")
NOT_RUN, MISSING = "-", "?"


def shoal(*args):
    """The CLI of deploy/gpu-node.sh's daemon ($SHOAL), as a finished subprocess."""
    if "SHOAL" not in os.environ:
        sys.exit("no $SHOAL: run this under deploy/gpu-node.sh")
    return subprocess.run(shlex.split(os.environ["SHOAL"]) + [str(a) for a in args],
                          capture_output=True, text=True)


def last_json(r, what):
    """The JSON on the last line of r's stdout, or None (saying why on stderr)."""
    if r.returncode != 0:
        print(f"{what} exited {r.returncode}: {r.stderr.strip()}", file=sys.stderr)
    lines = r.stdout.strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        print(f"{what} printed no JSON: {lines[-1]!r}", file=sys.stderr)
        return None


def run_sweep(args):
    r = shoal("sweep", "--workers", args.workers, "--start", args.start, "--share", args.share,
              "--device", "cuda", "--dataset", "synthetic", "--batches", args.batches,
              "--batch-size", args.batch_size, "--eval-samples", "0", "--sample-interval-ms", "100",
              "--wait", "--json")
    report = last_json(r, "shoal sweep")
    if report is None:
        sys.exit("shoal sweep gave no report")
    return report


def largest(values):
    values = [v for v in values if v is not None]
    return max(values) if values else None


def shoal_points(report):
    """{(start, share, workers): result}, for the points that succeeded; each result with
    "largest_gpu_process_bytes" (the biggest of its processes' peaks) added."""
    out = {}
    for e in report["experiments"]:
        s = e["spec"]
        key = (s["start"], "yes" if s["share"] else "no", s["workers"])
        if e.get("state") != "SUCCEEDED" or not e.get("result"):
            print(f"shoal {key}: {e.get('state')} {e.get('error', '')}", file=sys.stderr)
            continue
        procs = e.get("processes") or []
        out[key] = {**e["result"],
                    "largest_gpu_process_bytes": largest(p.get("peak_gpu_memory_bytes") for p in procs),
                    "worker_context_bytes": worker_context(procs)}
    return out


def worker_context(procs):
    """Mean over workers of NVML's figure less the CUDA allocator's peak reserved: the CUDA
    context and what the driver holds beside LibTorch; None unless every worker has both."""
    gaps = [p["peak_gpu_memory_bytes"] - p["peak_cuda_reserved_bytes"]
            for p in procs if p["role"] == "worker" and p.get("peak_cuda_reserved_bytes") is not None
            and p.get("peak_gpu_memory_bytes") is not None]
    workers = [p for p in procs if p["role"] == "worker"]
    return sum(gaps) / len(gaps) if gaps and len(gaps) == len(workers) else None


def save_report(sweep_id, out_dir):
    for fmt in ("md", "json", "svg"):
        r = shoal("report", sweep_id, "--format", fmt)
        if r.returncode != 0:
            print(f"shoal report --format {fmt} failed: {r.stderr.strip()}", file=sys.stderr)
            continue
        with open(os.path.join(out_dir, f"report.{fmt}"), "w") as f:
            f.write(r.stdout)


def reference(start, share, workers, args):
    """One run of reference_hogwild.py on CUDA; None when it failed."""
    cmd = [sys.executable, REFERENCE, "--device", "cuda", "--dataset", "synthetic",
           "--workers", workers, "--start", start, "--share", share, "--batches", args.batches,
           "--batch-size", args.batch_size, "--threads", 1, "--sample-ms", 100,
           "--stack-dump-s", max(5, args.point_timeout - 15)]
    what = f"pytorch {start} share={share} workers={workers}"
    # One point that hangs must not take the grid with it (fork, private, 16 did on an H100), nor
    # leave its workers on the GPU: it runs in its own process group, killed whole at the limit.
    p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=args.point_timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        print(f"{what}: no result within {args.point_timeout} s; stderr: {err[-2000:]!r}", file=sys.stderr)
        return None
    r = subprocess.CompletedProcess(cmd, p.returncode, out, err)
    j = last_json(r, what)
    if j is None or not j.get("ok"):
        return None
    j["largest_gpu_process_bytes"] = largest(j.get("gpu_memory_per_process_bytes") or [])
    return j


def run_references(grid, args):
    """Each point as it ends is also appended to DIR/reference.jsonl (--out): a run cut short
    keeps what it measured (each PyTorch point takes ~20 s on an H100 node, most of it importing
    torch in every spawned process)."""
    out = {}
    for (start, share, w) in grid:
        if start == "fork" and share == "yes":
            continue
        out[(start, share, w)] = reference(start, share, w, args)
        print(f"pytorch {start} share={share} workers={w} done", file=sys.stderr)
        if args.out:
            with open(os.path.join(args.out, "reference.jsonl"), "a") as f:
                f.write(json.dumps({"start": start, "share": share, "workers": w,
                                    "result": out[(start, share, w)]}) + "\n")
    return {k: v for k, v in out.items() if v is not None}


def fig(points, key, field):
    """A point's figure: NOT_RUN when the point has no result, MISSING when it lacks the field."""
    p = points.get(key)
    if p is None:
        return NOT_RUN
    v = p.get(field)
    return MISSING if v is None else v


def show(v, fmt):
    return v if isinstance(v, str) else fmt(v)


def gib(b):
    return f"{b / 2**30:.2f}"


def gap(a, b):
    """What a cell made of figures a and b shows when one is a marker: NOT_RUN first."""
    return NOT_RUN if NOT_RUN in (a, b) else MISSING


def ratio(a, b):
    if isinstance(a, str) or isinstance(b, str):
        return gap(a, b)
    return f"{a / b:.2f}" if b else MISSING


def slope(points, start, share, workers):
    """GPU memory each extra worker adds, GiB: (mem(max) - mem(min)) / (max - min) workers."""
    lo, hi = min(workers), max(workers)
    a = fig(points, (start, share, lo), "peak_gpu_memory_bytes")
    b = fig(points, (start, share, hi), "peak_gpu_memory_bytes")
    if isinstance(a, str) or isinstance(b, str):
        return gap(a, b)
    return gib((b - a) / (hi - lo)) if hi > lo else MISSING


def versions():
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True)
        gpu = r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "?"
    except OSError:
        gpu = "? (no nvidia-smi)"
    try:
        import torch  # its versions only: CUDA stays uninitialised here
    except ImportError:
        return f"GPU 0: {gpu} (name, driver); no torch in {sys.executable}"
    return (f"GPU 0: {gpu} (name, driver); torch {torch.__version__}, CUDA {torch.version.cuda}, "
            f"cuDNN {torch.backends.cudnn.version()}")


def tables(shoal_pts, ref_pts, workers, rows):
    """Every table, as Markdown strings."""
    def one(points, field, fmt):
        return lambda s, h, w: show(fig(points, (s, h, w), field), fmt)

    def both(field, fmt):
        return lambda s, h, w: f"{one(shoal_pts, field, fmt)(s, h, w)}; {one(ref_pts, field, fmt)(s, h, w)}"

    def ratio_of(field):
        return lambda s, h, w: ratio(fig(shoal_pts, (s, h, w), field), fig(ref_pts, (s, h, w), field))

    def per_worker(s, h, side):
        return slope(shoal_pts if side == "Shoal" else ref_pts, s, h, workers)

    mem, sps, n = "peak_gpu_memory_bytes", "samples_per_sec", lambda v: f"{v:.0f}"
    lo, hi = min(workers), max(workers)
    t = lambda title, cell: table(title, workers, rows, cell)
    return [
        t("GPU memory, Shoal (GiB, peak sum over its processes)", one(shoal_pts, mem, gib)),
        t("GPU memory, PyTorch (GiB, peak sum over its processes)", one(ref_pts, mem, gib)),
        t("GPU memory, Shoal / PyTorch", ratio_of(mem)),
        table(f"GPU memory per extra worker (GiB: (mem({hi}) - mem({lo})) / ({hi} - {lo}))",
              ["Shoal", "PyTorch"], rows, per_worker),
        t("GPU memory, largest process (GiB, its peak; Shoal; PyTorch)",
          both("largest_gpu_process_bytes", gib)),
        t("GPU memory, PyTorch's own max reserved (GiB, sum over workers, no CUDA context)",
          one(ref_pts, "torch_max_reserved_bytes", gib)),
        t("A worker's GPU memory beyond its CUDA allocator (MiB, NVML less max reserved, mean "
          "over workers; Shoal; PyTorch)", both("worker_context_bytes", lambda b: f"{b / 2**20:.0f}")),
        t("GPU utilisation, Shoal (mean % while training)", one(shoal_pts, "gpu_util_mean_percent", n)),
        t("GPU utilisation, PyTorch (mean % while training)", one(ref_pts, "gpu_util_mean_percent", n)),
        t("Samples/s, Shoal", one(shoal_pts, sps, n)),
        t("Samples/s, PyTorch", one(ref_pts, sps, n)),
        t("Samples/s, Shoal / PyTorch", ratio_of(sps)),
        t("Host memory (GiB, peak sum of PSS; Shoal; PyTorch)", both("peak_pss_sum_bytes", gib)),
    ]


def load_parts(dirs):
    """Shoal's points and the reference's from --out directories of earlier runs (sweep.json,
    reference.jsonl): a grid run in parts (one device call each) is tabled as one."""
    shoal_pts, ref_pts, ids, where, shape = {}, {}, [], set(), set()
    for d in dirs:
        with open(os.path.join(d, "versions.txt")) as f:  # this script's versions() there
            where.add(f.read().strip())
        with open(os.path.join(d, "sweep.json")) as f:
            report = json.load(f)
        ids.append(report["sweep"]["id"])
        base = report["sweep"]["spec"]["base"]
        shape.add((base.get("batch_size"), base.get("batches")))
        shoal_pts.update(shoal_points(report))
        with open(os.path.join(d, "reference.jsonl")) as f:
            for line in f:
                j = json.loads(line)
                if j["result"] is not None:
                    ref_pts[(j["start"], j["share"], j["workers"])] = j["result"]
    if len(shape) != 1:
        sys.exit(f"--tables-from: the parts ran different batch sizes or lengths: {sorted(shape)}")
    return shoal_pts, ref_pts, ",".join(ids), "; ".join(sorted(where)), shape.pop()


def grid_of(points):
    """The worker counts and (start, share) rows the loaded points hold, in the study's order."""
    workers = sorted({w for (_, _, w) in points})
    order = [(s, h) for s in ("spawn", "forkserver", "fork") for h in ("yes", "no")]
    rows = [r for r in order if any((r[0], r[1], w) in points for w in workers)]
    return workers, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,4,8,16")
    ap.add_argument("--start", default="spawn,forkserver,fork")
    ap.add_argument("--share", default="yes,no")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--point-timeout", type=int, default=120, help="seconds a PyTorch point may take")
    ap.add_argument("--out", help="a directory for tables.md, sweep.json, report.{md,json,svg}, "
                                  "reference.jsonl")
    ap.add_argument("--tables-from", help="comma-separated --out directories of earlier runs: "
                                          "print their tables together, running nothing")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]
    starts, shares = args.start.split(","), args.share.split(",")
    rows = [(s, h) for s in starts for h in shares]
    if args.tables_from:
        shoal_pts, ref_pts, sweep_id, where, (args.batch_size, args.batches) = load_parts(
            args.tables_from.split(","))
        workers, rows = grid_of(shoal_pts)
    else:
        where = versions()
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "versions.txt"), "w") as f:
                f.write(where + "\n")
        report = run_sweep(args)
        sweep_id = report["sweep"]["id"]
        print(f"shoal sweep {sweep_id} done", file=sys.stderr)
        shoal_pts = shoal_points(report)
        if args.out:
            with open(os.path.join(args.out, "sweep.json"), "w") as f:
                json.dump(report, f)
            save_report(sweep_id, args.out)
        ref_pts = run_references([(s, h, w) for s in starts for h in shares for w in workers], args)

    head = (f"CUDA sweep {sweep_id}, mnist_convnet, synthetic data, batch {args.batch_size} x "
            f"{args.batches} per worker, one thread per PyTorch process. {where}.\n"
            f"{NOT_RUN}: did not run (fork with shared weights is impossible on CUDA) or failed; "
            f"{MISSING}: no such figure.\n")
    text = "\n".join([head] + tables(shoal_pts, ref_pts, workers, rows))
    print(text)
    if args.out:
        with open(os.path.join(args.out, "tables.md"), "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
