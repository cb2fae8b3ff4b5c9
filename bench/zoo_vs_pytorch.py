#!/usr/bin/python3
"""The models people train, Shoal against torch.multiprocessing Hogwild, side by side in one run.

Models (bench/zoo_models.py, random init): torchvision's resnet50, vit_b_16, mobilenet_v3_large,
efficientnet_b0, densenet121 (10 classes, --image square images), and GPT-2 small
(tests/models/gpt.py, --seq tokens). For every point of the grid (model x start method x workers,
fixed before the first run and written to plan.json) four sides train the same weights on the
same kind of synthetic data with the same untimed warm-up (3 forward and backward passes a worker):

  shoal-all    `shoal submit --model-file` with no tuning flag (shared weights, planned
               allocator, floor(cores / workers) threads a worker) but `--concurrent-steps W`:
               every worker steps at once, the program PyTorch's W processes run;
  shoal-turns  the same with Shoal's default turns (only as many workers step at once as the
               cores hold; the same program as shoal-all where they hold every worker);
  users   bench/reference_zoo.py as users run it: glibc's defaults, PyTorch's thread count;
  best    the same at its best tuning: floor(cores / workers) threads, raised malloc thresholds
          (the heap trimmed once the model is shared), torch and torchvision preloaded in the
          forkserver.

Memory: one reader in this program (bench/harness.py's OutsideReader) sums the PSS (and RSS,
USS) of every process a side runs, every --sample-ms (50): for PyTorch the script and everything
below it; for Shoal everything below shoald (its forkserver and idle pool too whenever they
run: shoald stops them while a fork or spawn run trains), shoald itself (serving, uploads) kept
apart. Each Shoal run has a shoald of its own, started and settled before the run and stopped
after it, so no Shoal process runs beside a PyTorch run. Shoal's own figure (its experiment's
processes) is checked against the same reader's sum over those processes; both sides also sample
themselves every 200 ms (Shoal's default), as users run them.
Speed: samples / (first timed step started -> last finished), each side's own clock; both
sides' workers start their timed steps together (Shoal's start gate, a barrier in PyTorch's).

The runs follow bench/harness.py: the repeats interleaved (every point once, then again), the
order of the sides rotating; every run appended to raw.jsonl as it ends, failed ones counted and
not retried; a rerun with the same --out and arguments resumes (any other plan is refused),
running again whole each (point, repeat) not every side of which ran; summary.md gives, per
point and side, medians [min-max], ok / failed and the ratios Shoal / PyTorch.

  bench/zoo_vs_pytorch.py [--models resnet50,...,gpt] [--workers 1,2,4]
                          [--start fork,spawn,forkserver] [--repeats 3] [--out DIR]
                          [--memory-format channels_last] [--shoal-flags '...']
"""
import argparse
import contextlib
import datetime
import json
import os
import shlex
import shutil
import subprocess
import tempfile

from harness import (Comparison, Side, Started, all_at_once_flags, concurrent_steps, own_pss_check,
                     pytorch_side, reference_figures, settings_of, shoal_figures, turns_sides)
from shoal_bench import (ROOT, fresh_shoald, reference_finished, run_json, shoal_processes,
                         submit_finished, submit_started)

ALL_MODELS = "resnet50,vit_b_16,mobilenet_v3_large,efficientnet_b0,densenet121,gpt"


def threads_for(workers):
    return max(1, (os.cpu_count() or 1) // workers)


def batch_of(args, info):
    return args.gpt_batch_size if info["kind"] == "tokens" else args.batch_size


def shoal_side(args, models, zoo, turns, key, label):
    def start(p):
        info = zoo[p["model"]]
        stack = contextlib.ExitStack()
        cli = stack.enter_context(fresh_shoald(args.bin))
        shoal = [os.path.join(args.bin, "shoal"), "--socket", cli.socket]
        cmd = shoal + ["submit", "--model-file", os.path.join(models, info["name"] + ".pt"),
                       "--input", info["input"], "--classes", str(info["classes"]), "--workers",
                       str(p["workers"]), "--start", p["start"], "--batches", str(args.batches),
                       "--batch-size", str(batch_of(args, info)), "--memory-format",
                       args.memory_format, "--wait", "--json"] + shlex.split(args.shoal_flags)
        cmd += all_at_once_flags(turns, "cpu", p["workers"])
        proc = submit_started(cmd, stack)

        def wait():
            e, err, daemon_pss = submit_finished(proc, cli.pid)
            # The record as `get` gives it, the spec the daemon completed: whether the workers
            # took turns at their steps, and why.
            done = run_json(shoal + ["get", e["id"], "--json"]) if e.get("id") else {}
            hogwild = done.get("spec", {}).get("hogwild", {})
            return shoal_figures(e, err, daemon_pss,
                                 concurrent_steps=hogwild.get("concurrent_steps"),
                                 concurrent_steps_why=hogwild.get("concurrent_steps_why"))

        # The tree: everything below shoald; "experiment": what Shoal's own figure counts.
        return Started(wait, below=[cli.pid], close=stack.close, others=[proc.pid],
                       groups=lambda: {"experiment": shoal_processes(cli.pid, p["start"])})
    return Side(key, label, start, shoal=True)


def reference_side(args, models, zoo, tuning):
    def start(p):
        info, workers = zoo[p["model"]], p["workers"]
        threads = threads_for(workers) if tuning == "best" else 0
        cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench", "reference_zoo.py"), "--models",
               models, "--name", info["name"], "--workers", str(workers), "--start", p["start"],
               "--batches", str(args.batches), "--batch-size", str(batch_of(args, info)),
               "--threads", str(threads), "--tuning", tuning, "--sample-ms", "200",
               "--memory-format", args.memory_format]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def wait():
            r, err = reference_finished(proc)
            return reference_figures(r, err, threads,
                                     self_peak_pss_sum_bytes=r.get("self_peak_pss_sum_bytes"))
        return Started(wait, roots=[proc.pid])
    return pytorch_side(tuning, start)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=ALL_MODELS)
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--start", default="fork,spawn,forkserver")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batches", type=int, default=8, help="timed steps a worker")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--gpt-batch-size", type=int, default=2)
    ap.add_argument("--image", type=int, default=64)
    ap.add_argument("--gpt", choices=["small", "tiny"], default="small")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--sample-ms", type=int, default=50)
    ap.add_argument("--memory-format", choices=["contiguous", "channels_last"],
                    default="contiguous",
                    help="every side's memory order: an option PyTorch has too, so both take it")
    ap.add_argument("--shoal-flags", default="",
                    help="extra flags for Shoal's side only: a measured option such as "
                         "'--optimizer-in-backward yes' (recorded in plan.json)")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat(), "zoo"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    models = tempfile.mkdtemp(prefix="shoal-zoo.")
    try:
        subprocess.run(["/usr/bin/python3", "-W", "ignore",
                        os.path.join(ROOT, "bench", "zoo_models.py"), models, "--image",
                        str(args.image), "--gpt", args.gpt, "--seq", str(args.seq), "--only",
                        args.models], check=True)
        with open(os.path.join(models, "zoo.json")) as f:
            zoo = json.load(f)
        points = [{"model": m, "start": s, "workers": int(w)} for m in args.models.split(",")
                  for s in args.start.split(",") for w in args.workers.split(",") if m in zoo]
        sides = [shoal_side(args, models, zoo, *s) for s in turns_sides("cpu")]
        sides += [reference_side(args, models, zoo, t) for t in ("users", "best")]
        settings = settings_of(args)
        cmp = Comparison(args.out, points, sides, args.repeats, settings, args.sample_ms,
                         context={"zoo": zoo},
                         describe=lambda p: f"{p['model']} {p['start']} {p['workers']}")
        cmp.run()
        notes = [f"Shoal's side ran with `{args.shoal_flags}`.\n"] if args.shoal_flags else []
        if args.memory_format != "contiguous":
            notes.append(f"Every side ran in {args.memory_format} memory order (Shoal's "
                         f"--memory-format, PyTorch's model.to(memory_format=...) and inputs).\n")

        def heading(p):
            info = zoo[p["model"]]
            shape = info["input"].replace("B", str(batch_of(args, info)))
            return (f"## {p['model']} ({info['parameters'] / 1e6:.1f}M parameters, "
                    f"{info['tensors']} tensors; input {shape}, {args.batches} timed steps a "
                    f"worker)")
        own = ("Shoal's own PSS / outside, its processes", own_pss_check)
        print(cmp.write_summary(("start", "workers"), heading=heading, notes=notes,
                                extra=[own, ("concurrent steps", concurrent_steps)]))
    finally:
        shutil.rmtree(models, ignore_errors=True)


if __name__ == "__main__":
    main()
