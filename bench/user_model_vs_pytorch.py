#!/usr/bin/python3
"""A user's model, Shoal against torch.multiprocessing Hogwild, side by side in one run.

The model is tests/models/make_models.py's bench_cnn (a CIFAR-shaped CNN with BatchNorm and
Dropout), made now by this Python's PyTorch, or with --model NAME torchvision's NAME (random
weights, seeded, torch.jit.script'ed), e.g. resnet50 with --input 3,224,224. For every point of
the grid (start method x workers, x --share on CUDA; fixed before the first run and written to
plan.json) four sides (three on CUDA) train the same weights on the same kind of synthetic data
(noise plus a class pattern, as many samples as fit 256 MiB, at most 1024: Shoal's synthetic set
for a model file) with the same untimed warm-up (3 forward and backward passes a worker, then a
start gate or barrier), so samples/s times the same steps on all of them:

  shoal-all    `shoal submit --model-file ARCHIVE --concurrent-steps W` with one thread a worker
               (Hogwild), on a shoald of its own, started and settled before the run, stopped
               after: every worker steps at once, the program PyTorch's W processes run (on
               CUDA the one Shoal side, `shoal`, without the flag: no turns there);
  shoal-turns  the same with Shoal's default turns (only as many workers step at once as the
               cores hold);
  users   bench/reference_user_model.py as users run it: the eager module with the archive's
          weights, glibc's defaults, PyTorch's thread count;
  best    the same at its best tuning: one thread a process, raised malloc thresholds, torch
          preloaded in the forkserver.

--device cuda (on a GPU node, under deploy/gpu-node.sh: --bin .gpu-bundle/bin and --worker-bin
the node's shoal-worker): both sides train on cuda:0, shared weights (--share yes: Shoal's CUDA
IPC weight buffer, PyTorch's module moved to the device and passed through CUDA IPC) or private
(no); fork with shared weights is left out of the plan, as PyTorch cannot (its CUDA buffer would
exist before the fork).

Memory: one reader in this program (bench/harness.py's OutsideReader) sums the PSS (and RSS,
USS) of every process a side runs, every --sample-ms (50): for PyTorch the script and everything
below it; for Shoal everything below shoald (shoald itself kept apart), and Shoal's own figure is
checked against the same reader's sum over its experiment's processes. On CUDA the same reader
reads NVML at the same ticks (every compute process on the device): GPU memory summed and of the
largest process, and the device's utilisation. Speed: samples / (first timed step started ->
last finished), each side's own clock. Shoal's ready time includes loading the archive in every
worker that cannot inherit it (spawn, forkserver).

The runs follow bench/harness.py: repeats interleaved, the order of the sides rotating, every run
kept in raw.jsonl as it ends, failed ones counted and never retried, a rerun into the same --out
resuming the same plan (any other refused); summary.md gives medians [min-max], ok / failed and
the ratios Shoal / PyTorch.

  bench/user_model_vs_pytorch.py [--workers 1,2,4] [--start fork,spawn,forkserver]
                                 [--batches 20] [--batch-size 64] [--repeats 3] [--out DIR]
  deploy/gpu-node.sh python3 bench/user_model_vs_pytorch.py --device cuda --model resnet50 \
      --input 3,224,224 --start spawn --workers 1,2,4 --share yes,no --batch-size 32 \
      --batches 60 --bin .gpu-bundle/bin --worker-bin build-gpu/bin/shoal-worker --out DIR
"""
import argparse
import datetime
import os
import shutil
import subprocess
import sys
import tempfile

from harness import (Comparison, Started, all_at_once_flags, concurrent_steps, own_gpu_check,
                     own_pss_check, pytorch_side, reference_figures, settings_of, shoal_submit_side,
                     turns_sides)
from shoal_bench import ROOT, reference_finished

WARM_UP = 3  # worker/model_file.h kWarmUpRuns: Shoal's untimed passes, the reference's too


def synthetic_samples(shape, batch):
    """How many samples Shoal's synthetic set for a model file holds (shared/spec/input_spec.cc):
    as many as fit 256 MiB of float32, at most 1024, at least a batch."""
    size = 4
    for d in shape:
        size *= d
    return max(batch, min(1024, (256 << 20) // size))


def make_archive(args, folder):
    """The TorchScript archive both sides train, made by this Python's PyTorch."""
    if args.model == "bench_cnn":
        subprocess.run([sys.executable, "-W", "ignore",
                        os.path.join(ROOT, "tests", "models", "make_models.py"), folder],
                       check=True)
        return os.path.join(folder, "bench_cnn.pt")
    path = os.path.join(folder, f"{args.model}.pt")
    subprocess.run([sys.executable, "-c", "import sys, torch, torchvision; "
                    "torch.manual_seed(int(sys.argv[3])); "
                    "m = getattr(torchvision.models, sys.argv[1])(num_classes=int(sys.argv[2])); "
                    "torch.jit.script(m).save(sys.argv[4])",
                    args.model, str(args.classes), str(args.seed), path], check=True)
    return path


def shoal_side(args, archive, turns, key, label):
    def argv(p):
        return ["--model-file", archive, "--input", f"float32[B,{args.input}]", "--classes",
                str(args.classes), "--device", args.device, "--share", p.get("share", "yes"),
                "--workers", str(p["workers"]), "--start", p["start"], "--batches",
                str(args.batches), "--batch-size", str(args.batch_size), "--threads", "1",
                "--seed", str(args.seed)] + all_at_once_flags(turns, args.device, p["workers"])

    def more(e, p):
        r = e.get("result", {})
        hogwild = e.get("spec", {}).get("hogwild", {})
        return {"ready_ms": r.get("ready_ms"),
                "concurrent_steps": hogwild.get("concurrent_steps"),
                "concurrent_steps_why": hogwild.get("concurrent_steps_why"),
                "self_peak_gpu_memory_bytes": r.get("peak_gpu_memory_bytes"),
                "first_loss": r.get("first_loss"), "last_loss": r.get("last_loss")}
    extra = ("--worker-bin", args.worker_bin) if args.worker_bin else ()
    return shoal_submit_side(args.bin, argv, more, key=key, label=label, daemon_extra=extra)


def reference_side(args, archive, tuning):
    def start(p):
        threads = 1 if tuning == "best" else 0
        shape = [int(d) for d in args.input.split(",")]
        cmd = [sys.executable, os.path.join(ROOT, "bench", "reference_user_model.py"),
               "--archive", archive, "--input", args.input, "--classes", str(args.classes),
               "--samples", str(synthetic_samples(shape, args.batch_size)),
               "--device", args.device, "--share", p.get("share", "yes"),
               "--workers", str(p["workers"]), "--start", p["start"],
               "--batches", str(args.batches), "--batch-size", str(args.batch_size),
               "--threads", str(threads), "--tuning", tuning, "--warm-up", str(WARM_UP),
               "--seed", str(args.seed), "--sample-ms", "200"]
        if args.model != "bench_cnn":
            cmd += ["--torchvision", args.model]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def wait():
            r, err = reference_finished(proc)
            return reference_figures(r, err, threads, ready_ms=r.get("ready_ms"),
                                     self_peak_pss_sum_bytes=r.get("peak_pss_sum_bytes"))
        return Started(wait, roots=[proc.pid])
    return pytorch_side(tuning, start)


def plan_points(args):
    """The grid, fixed before the first run: start x workers (x share on CUDA), less fork with
    shared weights on CUDA (PyTorch cannot: said in the summary's notes)."""
    shares = args.share.split(",") if args.device == "cuda" else [None]
    points = []
    for s in args.start.split(","):
        for share in shares:
            if args.device == "cuda" and s == "fork" and share == "yes":
                continue
            for w in args.workers.split(","):
                point = {"start": s, "workers": int(w)}
                if share is not None:
                    point["share"] = share
                points.append(point)
    if not points:
        raise SystemExit("no point to run: on CUDA, fork runs only with --share no")
    return points


def arguments():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--model", default="bench_cnn",
                    help="bench_cnn (tests/models) or a torchvision.models constructor")
    ap.add_argument("--input", help="one sample's shape (3,32,32 for bench_cnn, else 3,224,224)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--share", default="yes", help="on CUDA: yes, no or yes,no")
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--start", default="fork,spawn,forkserver")
    ap.add_argument("--batches", type=int, default=20, help="timed steps a worker")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample-ms", type=int, default=50)
    ap.add_argument("--nvml", action="store_true",
                    help="read NVML beside PSS on the CPU too (a dry run of the GPU reader "
                         "against the tests' fake: SHOAL_NVML_LIBRARY=build/tests/libfake_nvml.so)")
    ap.add_argument("--run-timeout", type=int, help="seconds a run may take before it is killed "
                                                    "and counted failed (default: no limit)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat(), "user_model"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--worker-bin", help="the shoal-worker shoald runs (default: beside it)")
    args = ap.parse_args()
    if args.input is None:
        args.input = "3,32,32" if args.model == "bench_cnn" else "3,224,224"
    if args.device == "cpu" and args.share != "yes":
        ap.error("--share no runs on CUDA only (the CPU reference shares its module, as Hogwild)")
    return args


def main():
    args = arguments()
    points = plan_points(args)  # refused before any model is made
    models = tempfile.mkdtemp(prefix="shoal-models.")
    try:
        archive = make_archive(args, models)
        sides = [shoal_side(args, archive, *s) for s in turns_sides(args.device)]
        sides += [reference_side(args, archive, t) for t in ("users", "best")]
        settings = settings_of(args)
        del settings["worker_bin"]  # where the worker is built changes nothing measured
        cmp = Comparison(args.out, points, sides, args.repeats, settings, args.sample_ms,
                         describe=lambda p: " ".join(f"{k}={v}" for k, v in p.items()),
                         gpu=args.device == "cuda" or args.nvml, run_timeout_s=args.run_timeout)
        cmp.run()
        own = ("Shoal's own PSS / outside, its processes", own_pss_check)
        print(cmp.write_summary(
            ("start", "share", "workers") if args.device == "cuda" else ("start", "workers"),
            heading=lambda p: (f"## {p['start']}, {p['workers']} worker(s)"
                               + (f", share {p['share']}" if "share" in p else "")
                               + f": {args.model} ({args.input}) on {args.device}, batch "
                               f"{args.batch_size}, {args.batches} timed steps a worker"),
            extra=[own, ("concurrent steps", concurrent_steps)]
            + ([("Shoal's own GPU / outside", own_gpu_check)]
                           if args.device == "cuda" or args.nvml else [])))
    finally:
        shutil.rmtree(models, ignore_errors=True)


if __name__ == "__main__":
    main()
