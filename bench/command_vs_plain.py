#!/usr/bin/python3
"""Your own script under Shoal's kind command against a plain launcher, side by side in one run.

bench/command_train.py (a ConvNet, DDP over Gloo from env://) runs with N ranks (the points,
fixed before the first run and written to plan.json) on two sides, through bench/harness.py:

  shoal   `shoal submit --kind command --workers N -- python3 command_train.py ...`, on a shoald
          of its own (--allow-commands), settled before the run and stopped after it;
  plain   a plain launcher: the N ranks started directly with what torchrun sets (RANK,
          LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT); Debian's torchrun
          fails here before any rank starts.

The script times itself the same way under both (samples after its first step, over the window
from its first step's end to its last step's end, all ranks): that is the samples/s compared, so
the ratio is what Shoal's launching and sampling cost; the first step is both sides' warm-up.
Shoal's own samples/s (from the ranks' reports) is kept beside.

Memory: one reader in this program (bench/harness.py's OutsideReader) sums the PSS, RSS and USS
of every process a side runs every --sample-ms: the plain launcher's ranks and their children,
and everything below Shoal's shoald (its 4 MiB leader and the ranks).

  bench/command_vs_plain.py [--workers 1,2,4] [--steps 30] [--batch 64] [--repeats 3] [--out DIR]
"""
import argparse
import datetime
import glob
import json
import os
import shutil
import socket
import subprocess
import tempfile

from harness import (Comparison, Side, Started, figure_column, own_pss_check, settings_of,
                     shoal_submit_side)
from shoal_bench import ROOT

SCRIPT = os.path.join(ROOT, "bench", "command_train.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def script_rate(out):
    """The script's own samples/s, from the files its ranks wrote into `out`."""
    ranks = [json.load(open(p)) for p in glob.glob(os.path.join(out, "rank*.json"))]
    window = max(r["last"] for r in ranks) - min(r["first"] for r in ranks)
    return sum(r["samples"] for r in ranks) / window


def script_figures(out, ranks):
    written = len(glob.glob(os.path.join(out, "rank*.json")))
    if written != ranks:
        return {"ok": False, "error": f"{written} of {ranks} ranks wrote their timing"}
    return {"samples_per_sec": script_rate(out)}


def shoal_side(args, tmp):
    outs = {}

    def argv(p):  # a failed run's folder goes with `tmp`, at the end
        outs[p["ranks"]] = tempfile.mkdtemp(prefix="shoal-command.", dir=tmp)
        return ["--kind", "command", "--workers", str(p["ranks"]), "--", "/usr/bin/python3",
                SCRIPT, outs[p["ranks"]], str(args.steps), str(args.batch)]

    def more(e, p):
        out = outs.pop(p["ranks"])
        try:
            return {**script_figures(out, p["ranks"]),
                    "reported_samples_per_sec": e["result"].get("samples_per_sec")}
        finally:
            shutil.rmtree(out, ignore_errors=True)
    return shoal_submit_side(args.bin, argv, more, start_of=lambda p: "spawn",
                             daemon_extra=("--allow-commands",))


def plain_side(args):
    def start(p):
        out, port, n = tempfile.mkdtemp(prefix="shoal-plain."), str(free_port()), p["ranks"]
        procs = []
        for rank in range(n):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(n),
                       LOCAL_WORLD_SIZE=str(n), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            env.pop("SHOAL_REPORT_FD", None)
            procs.append(subprocess.Popen(["/usr/bin/python3", SCRIPT, out, str(args.steps),
                                           str(args.batch)], env=env))

        def wait():
            codes = [proc.wait() for proc in procs]
            if any(codes):
                return {"ok": False, "error": f"exit codes {codes}"}
            return {"ok": True, **script_figures(out, n)}
        return Started(wait, roots=[proc.pid for proc in procs],
                       close=lambda: shutil.rmtree(out, ignore_errors=True))
    return Side("plain", "plain launcher (torchrun's variables)", start, shoal=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sample-ms", type=int, default=50)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results",
                                                  datetime.date.today().isoformat(),
                                                  "command_vs_plain"))
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    points = [{"ranks": int(w)} for w in args.workers.split(",")]
    settings = settings_of(args)
    tmp = tempfile.mkdtemp(prefix="shoal-command-bench.")
    try:
        cmp = Comparison(args.out, points, [shoal_side(args, tmp), plain_side(args)],
                         args.repeats, settings, args.sample_ms,
                         context={"cores": os.cpu_count()},
                         describe=lambda p: f"{p['ranks']} rank(s)")
        cmp.run()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(cmp.write_summary(
        ("ranks",),
        heading=lambda p: (f"## {p['ranks']} rank(s): bench/command_train.py, batch {args.batch}"
                           f" a rank, {args.steps} steps; samples/s: the script's own"),
        extra=[figure_column("Shoal's samples/s (reports)", "reported_samples_per_sec",
                             "{:.0f}"),
               ("Shoal's own PSS / outside", own_pss_check)]))


if __name__ == "__main__":
    main()
