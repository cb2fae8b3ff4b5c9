#!/usr/bin/python3
"""The models people train, Shoal against torch.multiprocessing Hogwild, side by side in one run.

Models (bench/zoo_models.py, random init): torchvision's resnet50, vit_b_16, mobilenet_v3_large,
efficientnet_b0, densenet121 (10 classes, --image square images), and GPT-2 small
(tests/models/gpt.py, --seq tokens). For every point of the grid (model x start method x workers,
fixed before the first run and written to plan.json) three sides train the same weights on the
same kind of synthetic data with the same untimed warm-up (3 forward and backward passes a worker):

  shoal   `shoal submit --model-file` with no tuning flag (shared weights, planned allocator,
          floor(cores / workers) threads a worker);
  users   bench/reference_zoo.py as users run it: glibc's defaults, PyTorch's thread count;
  best    the same at its best tuning: floor(cores / workers) threads, raised malloc thresholds
          (the heap trimmed once the model is shared), torch and torchvision preloaded in the
          forkserver.

Memory: one reader in this program (OutsideReader) sums the PSS of every process a side runs,
every --sample-ms (50): for PyTorch the script and everything below it; for Shoal everything
below shoald (its forkserver and idle pool too whenever they run: shoald stops them while a
fork or spawn run trains), shoald itself (serving, uploads) kept apart. Each Shoal run
has a shoald of its own, started and settled before the run and stopped after it, so no Shoal
process runs beside a PyTorch run. Shoal's own figure (its experiment's processes) is checked
against the same reader's sum over those processes; both sides also sample themselves every
200 ms (Shoal's default), as users run them.
Speed: samples / (first timed step started -> last finished), each side's own clock; both
sides' workers start their timed steps together (Shoal's start gate, a barrier in PyTorch's).

The repeats are interleaved (every point once, then again), the order of the sides rotating;
every run is appended to raw.jsonl as it ends (a rerun with the same --out resumes), and
summary.md gives medians [min-max] with the ratios Shoal / PyTorch.

  bench/zoo_vs_pytorch.py [--models resnet50,...,gpt] [--workers 1,2,4]
                          [--start fork,spawn,forkserver] [--repeats 3] [--out DIR]
                          [--memory-format channels_last] [--shoal-flags '...']
"""
import argparse
import contextlib
import datetime
import json
import shlex
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from proc_reader import Periodic, children, descendants, rollup
from shoal_bench import ROOT, daemon

SIDES = ("shoal", "users", "best")
FORKSERVER_POOL = 16  # shoald --forkserver-pool's default
ALL_MODELS = "resnet50,vit_b_16,mobilenet_v3_large,efficientnet_b0,densenet121,gpt"


class OutsideReader(Periodic):
    """The peak over time of the summed PSS (and RSS) of each group of pids `which()` names
    ({group: [pid]}), every `every_ms`."""

    def __init__(self, every_ms, which):
        super().__init__(every_ms)
        self._which = which
        self.peak = {}
        self.reads = 0

    def _tick(self):
        cache = {}
        for group, pids in self._which().items():
            pss = rss = 0
            for pid in pids:
                if pid not in cache:  # a pid in two groups is read once a tick
                    cache[pid] = rollup(pid)
                r = cache[pid]
                if r:
                    pss += r.get("Pss", 0)
                    rss += r.get("Rss", 0)
            peak = self.peak.setdefault(group, {"pss": 0, "rss": 0})
            peak["pss"] = max(peak["pss"], pss)
            peak["rss"] = max(peak["rss"], rss)
        self.reads += 1


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def is_forkserver(pid):
    return cmdline(pid)[1:3] == [b"--role", b"forkserver"]


def shoal_processes(shoald, start):
    """The experiment's processes as Shoal's own peak_pss_sum_bytes counts them: every process
    below shoald, the forkserver's tree only under its start method."""
    out = []
    for kid in children(shoald):
        if start != "forkserver" and is_forkserver(kid):
            continue
        out += [kid] + descendants(kid)
    return out


@contextlib.contextmanager
def fresh_shoald(args):
    """A shoald of its own for one run, ready as a long-running one is: its forkserver up with
    its pool forked (it warms LibTorch at start), so that nothing of Shoal boots beside the run,
    and nothing of it is left for the PyTorch runs after."""
    with daemon(args.bin) as cli:
        deadline = time.time() + 60
        while time.time() < deadline:
            servers = [k for k in children(cli.pid) if is_forkserver(k)]
            if servers and len(children(servers[0])) >= FORKSERVER_POOL:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        yield cli


def outside(reader):
    """What the outside reader saw of a run's processes (its "node" group)."""
    node = reader.peak.get("node", {})
    return {"outside_peak_pss_bytes": node.get("pss"), "outside_peak_rss_bytes": node.get("rss"),
            "reads": reader.reads}


def threads_for(workers):
    return max(1, (os.cpu_count() or 1) // workers)


def run_shoal(args, models, info, start, workers):
    archive = os.path.join(models, info["name"] + ".pt")
    with fresh_shoald(args) as cli:
        cmd = [os.path.join(args.bin, "shoal"), "--socket", cli.socket, "submit", "--model-file",
               archive, "--input", info["input"], "--classes", str(info["classes"]), "--workers",
               str(workers), "--start", start, "--batches", str(args.batches), "--batch-size",
               str(batch_of(args, info)), "--memory-format", args.memory_format, "--wait",
               "--json"] + shlex.split(args.shoal_flags)
        groups = lambda: {"node": descendants(cli.pid),
                          "experiment": shoal_processes(cli.pid, start)}
        with OutsideReader(args.sample_ms, groups) as reader:
            done = subprocess.run(cmd, capture_output=True, text=True)
        daemon_pss = (rollup(cli.pid) or {}).get("Pss")
    try:
        e = json.loads(done.stdout)
    except ValueError:
        e = {}
    ok = e.get("state") == "SUCCEEDED"
    r = e.get("result", {})
    return {"ok": ok, "error": None if ok else (e.get("error") or done.stderr[-500:]),
            "samples_per_sec": r.get("samples_per_sec"), **outside(reader),
            "outside_experiment_peak_pss_bytes": reader.peak.get("experiment", {}).get("pss"),
            "self_peak_pss_sum_bytes": r.get("peak_pss_sum_bytes"),
            "experiment": e.get("id"), "threads": e.get("spec", {}).get("threads"),
            "daemon_pss_bytes": daemon_pss}


def run_reference(args, models, info, start, workers, tuning):
    cmd = ["/usr/bin/python3", os.path.join(ROOT, "bench", "reference_zoo.py"), "--models",
           models, "--name", info["name"], "--workers", str(workers), "--start", start,
           "--batches", str(args.batches), "--batch-size", str(batch_of(args, info)),
           "--threads", str(threads_for(workers) if tuning == "best" else 0), "--tuning", tuning,
           "--sample-ms", "200", "--memory-format", args.memory_format]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tree = lambda: {"node": [proc.pid] + descendants(proc.pid)}
    with OutsideReader(args.sample_ms, tree) as reader:
        out, err = proc.communicate()
    try:
        r = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        r = {"ok": False}
    return {"ok": bool(r.get("ok")), "error": None if r.get("ok") else err[-500:],
            "samples_per_sec": r.get("samples_per_sec"), **outside(reader),
            "self_peak_pss_sum_bytes": r.get("self_peak_pss_sum_bytes"),
            "threads": threads_for(workers) if tuning == "best" else None}


def batch_of(args, info):
    return args.gpt_batch_size if info["kind"] == "tokens" else args.batch_size


def plan(args, zoo):
    return [{"model": m, "start": s, "workers": int(w)} for m in args.models.split(",")
            for s in args.start.split(",") for w in args.workers.split(",") if m in zoo]


def key(run):
    return (run["model"], run["start"], run["workers"], run["repeat"], run["side"])


def measure(args, models, zoo, points, raw_path):
    done = set()
    if os.path.exists(raw_path):
        with open(raw_path) as f:
            for line in f:
                try:
                    run = json.loads(line)
                except ValueError:
                    continue  # a line cut short when a run was killed
                if run.get("ok"):
                    done.add(key(run))
    with open(raw_path, "a") as raw:
        for repeat in range(args.repeats):
            for p in points:
                info = zoo[p["model"]]
                order = SIDES[repeat % 3:] + SIDES[:repeat % 3]
                for side in order:
                    run = dict(p, repeat=repeat, side=side)
                    if key(run) in done:
                        continue
                    t0 = time.time()
                    if side == "shoal":
                        run.update(run_shoal(args, models, info, p["start"], p["workers"]))
                    else:
                        run.update(run_reference(args, models, info, p["start"], p["workers"],
                                                 side))
                    run["wall_s"] = round(time.time() - t0, 2)
                    raw.write(json.dumps(run) + "\n")
                    raw.flush()
                    print(f"{p['model']} {p['start']} {p['workers']} run {repeat} {side}: "
                          f"{'ok' if run['ok'] else 'FAILED ' + str(run['error'])[:200]}, "
                          f"{run['wall_s']} s", file=sys.stderr)


def same_settings(out, args):
    """A rerun into the same --out resumes only with the settings its runs were taken with."""
    path = os.path.join(out, "plan.json")
    if not os.path.exists(path):
        return
    with open(path) as f:
        before = json.load(f)["args"]
    free = {"repeats", "models", "workers", "start", "out"}
    differ = sorted(k for k, v in vars(args).items() if k not in free and before.get(k) != v)
    if differ:
        sys.exit(f"{out} holds runs taken with other settings ({', '.join(differ)}): "
                 "give another --out")


def median_cell(xs, fmt):
    if not xs:
        return "-", None
    m = statistics.median(xs)
    return f"{fmt(m)} [{fmt(min(xs))}-{fmt(max(xs))}]", m


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"


def summary(args, zoo, points, raw_path):
    runs = {}
    with open(raw_path) as f:
        for line in f:
            r = json.loads(line)
            runs.setdefault((r["model"], r["start"], r["workers"], r["side"]), []).append(r)
    out = [f"Shoal's side ran with `{args.shoal_flags}`.\n"] if args.shoal_flags else []
    if args.memory_format != "contiguous":
        out.append(f"Every side ran in {args.memory_format} memory order (Shoal's "
                   f"--memory-format, PyTorch's model.to(memory_format=...) and inputs).\n")
    mib = lambda v: f"{v / 2**20:.0f}"
    sps = lambda v: f"{v:.1f}" if v < 100 else f"{v:.0f}"
    for model in dict.fromkeys(p["model"] for p in points):
        info = zoo[model]
        shape = info["input"].replace("B", str(batch_of(args, info)))
        out.append(f"## {model} ({info['parameters'] / 1e6:.1f}M parameters, {info['tensors']} "
                   f"tensors; input {shape}, {args.batches} timed steps a worker)\n")
        out.append("| start | workers | PSS MiB Shoal | users | best | Shoal / users | "
                   "Shoal / best | samples/s Shoal | users | best | Shoal / users | "
                   "Shoal / best | Shoal's own PSS / outside, its processes |")
        out.append("| --- " * 13 + "|")
        for p in points:
            if p["model"] != model:
                continue
            pss, speed, own = {}, {}, "-"
            cells = []
            for side in SIDES:
                rs = [r for r in runs.get((model, p["start"], p["workers"], side), [])
                      if r["ok"] and r["samples_per_sec"] and r["outside_peak_pss_bytes"]]
                text, pss[side] = median_cell([r["outside_peak_pss_bytes"] for r in rs], mib)
                stext, speed[side] = median_cell([r["samples_per_sec"] for r in rs], sps)
                cells.append((text, stext))
                checks = [r["self_peak_pss_sum_bytes"] / r["outside_experiment_peak_pss_bytes"]
                          for r in rs if side == "shoal" and r.get("self_peak_pss_sum_bytes")
                          and r.get("outside_experiment_peak_pss_bytes")]
                if checks:
                    own = f"{statistics.median(checks):.3f}"
                failed = len(runs.get((model, p["start"], p["workers"], side), [])) - len(rs)
                if failed:
                    cells[-1] = (cells[-1][0] + f" ({failed} failed)", cells[-1][1])
            out.append(
                f"| {p['start']} | {p['workers']} | {cells[0][0]} | {cells[1][0]} | "
                f"{cells[2][0]} | {ratio(pss['shoal'], pss['users'])} | "
                f"{ratio(pss['shoal'], pss['best'])} | {cells[0][1]} | {cells[1][1]} | "
                f"{cells[2][1]} | {ratio(speed['shoal'], speed['users'])} | "
                f"{ratio(speed['shoal'], speed['best'])} | {own} |")
        out.append("")
    return "\n".join(out)


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
    os.makedirs(args.out, exist_ok=True)
    same_settings(args.out, args)
    models = tempfile.mkdtemp(prefix="shoal-zoo.")
    try:
        subprocess.run(["/usr/bin/python3", "-W", "ignore",
                        os.path.join(ROOT, "bench", "zoo_models.py"), models, "--image",
                        str(args.image), "--gpt", args.gpt, "--seq", str(args.seq), "--only",
                        args.models], check=True)
        with open(os.path.join(models, "zoo.json")) as f:
            zoo = json.load(f)
        points = plan(args, zoo)
        with open(os.path.join(args.out, "plan.json"), "w") as f:
            json.dump({"args": vars(args), "points": points, "zoo": zoo,
                       "cpus": os.cpu_count()}, f, indent=1)
        raw_path = os.path.join(args.out, "raw.jsonl")
        measure(args, models, zoo, points, raw_path)
        text = summary(args, zoo, points, raw_path)
        with open(os.path.join(args.out, "summary.md"), "w") as f:
            f.write(text + "\n")
        print(text)
    finally:
        shutil.rmtree(models, ignore_errors=True)


if __name__ == "__main__":
    main()
