#!/usr/bin/python3
"""Runs the same Hogwild experiment with Shoal and with torch.multiprocessing, side by side.

The study's ConvNet (mnist_convnet) on --dataset, --batch-size x --batches steps a worker, shared
weights (--share). For every point (start method x share x worker count, fixed by the arguments
before the first run and written to plan.json) four sides run, through bench/harness.py:

  shoal-all    Shoal, every worker at once: `shoal submit --concurrent-steps W` (W = the
               workers: no turns, one step arena a worker);
  shoal-turns  Shoal, turns: no --concurrent-steps, Shoal's default (with the planned allocator
               on the CPU, floor(cores / threads) workers inside a step at once, the others
               waiting their turn, that many step arenas shared); the value and why Shoal chose
               it (spec.hogwild.concurrent_steps and _why of `shoal get --json`) are kept in the
               raw run;
  users        PyTorch as users run it (bench/reference_hogwild.py): glibc's defaults, PyTorch's
               own thread count;
  best         PyTorch at its best tuning: MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_
               raised, the same threads per process as Shoal, torch preloaded in the forkserver.

Both Shoal sides run with floor(cores / workers) threads a worker (at least 1), each run with a
shoald of its own, settled before it and stopped after it, so no Shoal process runs beside a
PyTorch run. Warm-up: none on either side (Shoal's built-in models take none; the reference's
default, see reference_hogwild.WARM_UP); both sides' workers start their timed steps together
(Shoal's start gate, a barrier in PyTorch's), and samples/s is samples / (first timed step
started -> last finished), each side's own clock.

Memory: one reader in this program (harness.OutsideReader) sums PSS, RSS and USS over every
process a side runs, every --sample-ms (50) for every side: for PyTorch the script and everything
below it; for Shoal everything below shoald (shoald itself kept apart). Both sides also sample
themselves as users run them (Shoal's sampler, the reference's every 200 ms): kept in raw.jsonl.

Every run is appended to OUT/raw.jsonl as it ends, failed ones counted and never retried; a rerun
with the same --out and arguments resumes (another plan is refused), running again whole each
(point, repeat) that did not run every side. OUT/summary.md (also printed): per point and side,
samples/s and the reader's peak PSS sum, medians [min-max], ok / failed, the ratios Shoal /
PyTorch of medians, ready time and the concurrent steps Shoal ran. Needs a built tree
(deploy/build.sh) and Debian's python3-torch.

  bench/hogwild_vs_pytorch.py [--workers 1,2,4] [--start fork,spawn,forkserver] [--share yes]
                              [--batches 20] [--batch-size 64] [--repeats 3] [--out DIR]
                              [--allocator default]

Each --allocator entry is one pair of Shoal sides (every worker at once, turns): an allocator
(default: no --allocator flag, what a user who types none gets; cache, planned, retain, system),
"+lean" for --activations lean and "+libtorch" for --kernels libtorch (LibTorch's max-pool
kernels instead of Shoal's), e.g. default,default+libtorch.

--device cuda (on a GPU node, under deploy/gpu-node.sh: --bin .gpu-bundle/bin, --worker-bin the
node's shoal-worker, --dataset synthetic): the study's grid on the GPU. Shoal runs one side there,
`shoal` (its default, every worker at once: no turns on CUDA); the references train on cuda:0.
Fork with shared weights is left out of the plan (PyTorch cannot: the weights' CUDA buffer would
exist before the fork). The outside reader also reads NVML at the same ticks: GPU memory summed
and of the largest process, the device's utilisation; Shoal's own GPU figure is checked against
it. --run-timeout kills a run that hangs (a PyTorch point did on an H100) and counts it failed.

  deploy/gpu-node.sh python3 bench/hogwild_vs_pytorch.py --device cuda --dataset synthetic \
      --start spawn --share yes,no --workers 1,2,4,8,16 --batches 200 --repeats 1 \
      --run-timeout 120 --bin .gpu-bundle/bin --worker-bin build-gpu/bin/shoal-worker --out DIR
"""
import argparse
import contextlib
import datetime
import os
import statistics
import subprocess
import sys

from harness import (Comparison, Side, Started, all_at_once_flags, concurrent_steps, own_gpu_check,
                     own_pss_check, pytorch_side, reference_figures, settings_of, turns_sides)
from shoal_bench import (REFERENCE, ROOT, fresh_shoald, run_json, shoal_processes, reference_finished,
                         submit_finished, submit_started)


def threads_for(workers):
    return max(1, (os.cpu_count() or 1) // workers)


def variant_flags(variant):
    name, *extras = variant.split("+")
    unknown = set(extras) - {"lean", "libtorch"}
    if unknown:
        raise SystemExit(f"--allocator {variant}: unknown {', '.join(sorted(unknown))} (turns "
                         "are a side of their own now: shoal-turns)")
    flags = [] if name == "default" else ["--allocator", name]
    if "libtorch" in extras:
        flags += ["--kernels", "libtorch"]
    return flags + ["--activations", "lean" if "lean" in extras else "pytorch"]


def shoal_side(args, variant, turns, key, label):
    def start(p):
        w = p["workers"]
        stack = contextlib.ExitStack()
        extra = ("--worker-bin", args.worker_bin) if args.worker_bin else ()
        cli = stack.enter_context(fresh_shoald(args.bin, extra))
        shoal = [os.path.join(args.bin, "shoal"), "--socket", cli.socket]
        cmd = shoal + ["submit", "--workers", str(w), "--start", p["start"], "--share",
                       p["share"], "--batches", str(args.batches), "--batch-size",
                       str(args.batch_size), "--threads", str(threads_for(w)), "--dataset",
                       args.dataset, "--eval-samples", "0", "--device", args.device,
                       *variant_flags(variant)]
        cmd += all_at_once_flags(turns, args.device, w)
        proc = submit_started(cmd + ["--wait", "--json"], stack)

        def wait():
            e, err, daemon_pss = submit_finished(proc, cli.pid)
            if e.get("id"):  # the record as `get` gives it: the spec the daemon completed
                e = run_json(shoal + ["get", e["id"], "--json"])
            ok = e.get("state") == "SUCCEEDED"
            r, hogwild = e.get("result", {}), e.get("spec", {}).get("hogwild", {})
            return {"ok": ok, "error": None if ok else (e.get("error") or err[-500:]),
                    "samples_per_sec": r.get("samples_per_sec"), "ready_ms": r.get("ready_ms"),
                    "self_peak_pss_sum_bytes": r.get("peak_pss_sum_bytes"),
                    "self_peak_rss_sum_bytes": r.get("peak_rss_sum_bytes"),
                    "self_peak_gpu_memory_bytes": r.get("peak_gpu_memory_bytes"),
                    "gpu_util_mean_percent": r.get("gpu_util_mean_percent"),
                    "threads": e.get("spec", {}).get("threads"),
                    "concurrent_steps": hogwild.get("concurrent_steps"),
                    "concurrent_steps_why": hogwild.get("concurrent_steps_why"),
                    "experiment": e.get("id"), "daemon_pss_bytes": daemon_pss}

        return Started(wait, below=[cli.pid], close=stack.close, others=[proc.pid],
                       groups=lambda: {"experiment": shoal_processes(cli.pid, p["start"])})

    suffix = "" if variant == "default" else f"[{variant}]"
    return Side(key + suffix, label + (f" ({variant})" if suffix else ""), start, shoal=True)


def reference_side(args, tuning):
    def start(p):
        w = p["workers"]
        threads = threads_for(w) if tuning == "best" else 0
        cmd = [sys.executable, REFERENCE, "--workers", str(w), "--start", p["start"],
               "--share", p["share"], "--batches", str(args.batches), "--batch-size",
               str(args.batch_size), "--threads", str(threads), "--tuning", tuning,
               "--dataset", args.dataset, "--device", args.device, "--sample-ms", "200"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def wait():
            r, err = reference_finished(proc)
            return reference_figures(r, err, threads, ready_ms=r.get("ready_ms"),
                                     start_ms=r.get("start_ms"),
                                     self_peak_pss_sum_bytes=r.get("peak_pss_sum_bytes"),
                                     self_peak_rss_sum_bytes=r.get("peak_rss_sum_bytes"))

        return Started(wait, roots=[proc.pid])

    return pytorch_side(tuning, start)


def ready(side, ok):
    xs = [r["figures"]["ready_ms"] for r in ok if r["figures"].get("ready_ms") is not None]
    return f"{statistics.median(xs):.0f}" if xs else "-"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--start", default="fork,spawn,forkserver")
    ap.add_argument("--share", default="yes")
    ap.add_argument("--batches", type=int, default=20, help="timed steps a worker")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--allocator", default="default",
                    help="Shoal's variants, comma-separated, each a pair of Shoal sides: "
                         "default (no flag) | cache | planned | retain | system, +lean, "
                         "+libtorch")
    ap.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--sample-ms", type=int, default=50, help="the outside reader's interval")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat(),
                                                  "hogwild_vs_pytorch"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--worker-bin", help="the shoal-worker shoald runs (default: beside it)")
    ap.add_argument("--nvml", action="store_true",
                    help="read NVML beside PSS on the CPU too (a dry run of the GPU reader "
                         "against the tests' fake: SHOAL_NVML_LIBRARY=build/tests/libfake_nvml.so)")
    ap.add_argument("--run-timeout", type=int, help="seconds a run may take before it is killed "
                                                    "and counted failed (default: no limit)")
    args = ap.parse_args()

    variants = args.allocator.split(",")
    for v in variants:
        variant_flags(v)  # refused before any run
    points = [{"start": s, "share": sh, "workers": int(w)} for s in args.start.split(",")
              for sh in args.share.split(",") for w in args.workers.split(",")
              if not (args.device == "cuda" and s == "fork" and sh == "yes")]
    if not points:
        raise SystemExit("no point to run: on CUDA, fork runs only with --share no")
    sides = [shoal_side(args, v, *s) for v in variants for s in turns_sides(args.device)]
    sides += [reference_side(args, t) for t in ("users", "best")]
    # A CPU plan's settings as before these options, so that its earlier runs still resume.
    settings = {k: v for k, v in settings_of(args).items() if k != "worker_bin"
                and (k, v) not in (("device", "cpu"), ("run_timeout", None), ("nvml", False))}
    cmp = Comparison(args.out, points, sides, args.repeats, settings, args.sample_ms,
                     describe=lambda p: f"{p['start']} share={p['share']} workers={p['workers']}",
                     gpu=args.device == "cuda" or args.nvml, run_timeout_s=args.run_timeout)
    cmp.run()
    note = (f"Hogwild, mnist_convnet on {args.device}, batch {args.batch_size} x {args.batches} "
            f"timed steps a worker, no warm-up on either side, {os.cpu_count()} cores, "
            f"floor(cores / workers) threads a Shoal and a best-tuned PyTorch worker; repeats: "
            f"{args.repeats}.\n")
    extra = [("ready ms", ready), ("concurrent steps", concurrent_steps),
             ("Shoal's own PSS / outside", own_pss_check)]
    if args.device == "cuda" or args.nvml:
        extra.append(("Shoal's own GPU / outside", own_gpu_check))
    print(cmp.write_summary(("start", "share", "workers"), notes=[note], extra=extra))


if __name__ == "__main__":
    main()
