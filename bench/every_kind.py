#!/usr/bin/python3
"""One small run of every kind (and each start method, a model file, a sweep), kept as `get --json`,
to check that a refactor changes no behaviour, figure or default.

  every_kind.py run OUT [--bin build/bin] [--model-file M.pt]   # OUT/<point>.json, OUT/sweep.json
  every_kind.py diff BEFORE AFTER                                # what changed, point by point

`diff` flattens both records into leaf paths, maps a path that moved (ALIASES: the per-kind
messages of issue 55) to its old name, and compares: a figure that must be exact (a spec field, a
loss, a checksum, a count of steps, samples or parameters) must be equal; a measured one (times,
memory, CPU, rates) is shown as after/before. Fields only one side has are listed.
"""
import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from shoal_bench import ROOT, daemon  # noqa: E402

# Each point: a label and the CLI's submit flags. Deterministic where a figure can be (one hogwild
# worker per shared segment, or private weights; data_parallel's replicas; fixed seeds).
POINTS = [
    ("hogwild-fork", ["--workers", "1", "--batches", "30", "--start", "fork"]),
    ("hogwild-spawn-private", ["--workers", "2", "--batches", "20", "--start", "spawn", "--share",
                               "no"]),
    ("hogwild-forkserver", ["--workers", "1", "--batches", "20", "--start", "forkserver",
                            "--concurrent-steps", "1"]),
    ("multi_model", ["--kind", "multi_model", "--models", "4", "--iterations", "50"]),
    ("data_loading", ["--kind", "data_loading", "--loaders", "1", "--prefetch", "2",
                      "--epoch-samples", "2048", "--eval-samples", "256"]),
    ("data_parallel", ["--kind", "data_parallel", "--workers", "2", "--batches", "10",
                       "--scaling", "strong", "--batch-size", "64"]),
    ("pipeline", ["--kind", "pipeline", "--stages", "2", "--layers", "3", "--filters", "32",
                  "--chunks", "2", "--batches", "2", "--checkpoint", "never"]),
    ("command", ["--kind", "command", "--workers", "2", "--", "/usr/bin/python3",
                 os.path.join(ROOT, "bench", "command_train.py"), "/tmp/every-kind-command-out", "20", "32"]),
]
MODEL_FILE_POINT = ["--workers", "2", "--batches", "4", "--batch-size", "4", "--start", "spawn",
                    "--share", "no", "--input", "float32[B,3,64,64]", "--classes", "10"]

MEASURED = re.compile(r"(_ms|_ns|bytes|_per_sec|percent|cpu|_reads|unix_ms|pid|_w$|_j$|"
                      r"per_sample|_gbps|bubble|hwm|disturb|outside|t_ms|^spec\.name$|"
                      r"submitter|environment|\.id$|^id$|experiment_id|status|\.ref$|"
                      r"faults_per_step|\.why$|_why$|model_file\.name|dataset|sweep_id)")

# New path prefix -> the old one (issue 55 moved kind fields into per-kind messages).
ALIASES = [
    (r"spec\.command\.argv\.", "spec.command."),
    (r"spec\.command\.(env|cwd)", r"spec.\1"),
    (r"spec\.(hogwild|multi_model|data_loading|data_parallel|pipeline)\.", "spec."),
    (r"base\.(hogwild|multi_model|data_loading|data_parallel|pipeline)\.", "base."),
    (r"^result\.data_loading\.epochs\.(\d+)\.epoch$", r"result.epochs.\1.epoch"),
    (r"^result\.multi_model\.variants", "result.variants"),
    (r"^result\.command\.report_lines_ignored", "result.report_lines_ignored"),
    (r"^result\.data_loading\.epochs\.(\d+)\.load_cpu_ms", r"result.epochs.\1.load_cpu_ms"),
]


def run(args):
    os.makedirs(args.out, exist_ok=True)
    points = list(POINTS)
    if args.model_file:
        points.append(("model_file-spawn", ["--model-file", args.model_file] + MODEL_FILE_POINT))
    with daemon(args.bin, extra=("--allow-commands",)) as cli:
        for label, flags in points:
            if os.path.exists(os.path.join(args.out, label + ".json")):
                continue  # kept from an earlier run into OUT
            os.makedirs("/tmp/every-kind-command-out", exist_ok=True)
            if "--" in flags:  # kind command: no seed of Shoal's to give
                at = flags.index("--")
                flags = flags[:at] + ["--wait", "--json"] + flags[at:]
            else:
                flags = flags + ["--seed", "7", "--wait", "--json"]
            e = cli("submit", *flags)
            print(f"{label:24} {e['state']} {e.get('error', '')}", flush=True)
            json.dump(e, open(os.path.join(args.out, label + ".json"), "w"), indent=1)
            text = subprocess.run([os.path.join(args.bin, "shoal"), "--socket", cli.socket, "get",
                                   e["id"]], capture_output=True, text=True).stdout
            open(os.path.join(args.out, label + ".txt"), "w").write(text)
        sw = cli("sweep", "--workers", "1,2", "--start", "fork,spawn", "--batches", "10",
                 "--seed", "7", "--wait", "--json")
        json.dump(sw, open(os.path.join(args.out, "sweep.json"), "w"), indent=1)
        print("sweep", sw["sweep"]["state"])


def racy(e):
    """Hogwild workers sharing one set of weights: their losses and weights depend on the
    interleaving of their steps, run to run."""
    spec = e.get("spec", {})
    return spec.get("kind") == "hogwild" and spec.get("share") and spec.get("workers", 1) > 1


def normalise(v):
    """Processes in a fixed order (the leader, then workers by index), whatever order the
    daemon listed them in; racy records' exact figures marked measured."""
    if isinstance(v, dict):
        if isinstance(v.get("processes"), list):
            v["processes"].sort(key=lambda p: (p.get("role", ""), p.get("index", 0)))
        if racy(v):
            v["racy"] = True
        for x in v.values():
            normalise(x)
    elif isinstance(v, list):
        for x in v:
            normalise(x)
    return v


def flatten(v, path, out):
    if v is None or v == "":
        return  # absent (proto3 prints unset fields as null or "")
    if isinstance(v, dict):
        for k, x in v.items():
            flatten(x, f"{path}.{k}" if path else k, out)
    elif isinstance(v, list):
        for i, x in enumerate(v):
            flatten(x, f"{path}.{i}", out)
    else:
        for new, old in ALIASES:
            path = re.sub(new, old, path)
        out[path] = v


def masked(path):
    """`get`'s text with ids, numbers and column padding masked, its lines sorted (processes are
    listed by pid): what is printed, not what was measured."""
    out = []
    for line in open(path):
        line = re.sub(r"\bx[0-9a-f]{10}\b", "ID", line)
        line = re.sub(r"[0-9][0-9.]*", "#", line)
        out.append(" ".join(line.split()))
    return sorted(out)


def diff_texts(args):
    bad = 0
    for name in sorted(os.listdir(args.before)):
        after = os.path.join(args.after, name)
        if not name.endswith(".txt") or not os.path.exists(after):
            continue
        b, a = masked(os.path.join(args.before, name)), masked(after)
        if b != a:
            print(f"== {name}: `get` prints differently")
            for x, y in zip(b + [""] * len(a), a + [""] * len(b)):
                if x != y:
                    print(f"  - {x}\n  + {y}")
            bad += 1
    return bad


def diff(args):
    bad = 0
    for name in sorted(os.listdir(args.before)):
        if (not name.endswith(".json") or name.startswith("rank")
                or not os.path.exists(os.path.join(args.after, name))):
            continue
        b, a = {}, {}
        flatten(normalise(json.load(open(os.path.join(args.before, name)))), "", b)
        flatten(normalise(json.load(open(os.path.join(args.after, name)))), "", a)
        racy_prefixes = {k[:-len(".racy")] for k in a if k.endswith(".racy")} | (
            {""} if "racy" in a else set())
        print(f"== {name}")
        for k in sorted(set(b) | set(a)):
            if k not in a or k not in b:
                print(f"  only {'before' if k in b else 'after '}: {k} = {b.get(k, a.get(k))}")
                bad += k not in a
            elif MEASURED.search(k) or k.startswith("tables.") or any(
                    k.startswith(p + "." if p else "") for p in racy_prefixes):
                if isinstance(b[k], (int, float)) and b[k] and isinstance(a[k], (int, float)):
                    if args.verbose:
                        print(f"  {k}: {a[k] / b[k]:.3f}x")
            elif a[k] != b[k]:
                print(f"  DIFFERS {k}: {b[k]} -> {a[k]}")
                bad += 1
    bad += diff_texts(args)
    print("no exact figure, spec field or default changed" if not bad else f"{bad} differences")
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("out")
    r.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    r.add_argument("--model-file")
    d = sub.add_parser("diff")
    d.add_argument("before")
    d.add_argument("after")
    d.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    return run(args) if args.cmd == "run" else diff(args)


if __name__ == "__main__":
    sys.exit(main() or 0)
