#!/usr/bin/python3
"""Your own script under Shoal's kind command against a plain launcher, side by side in one run.

bench/command_train.py (a ConvNet, DDP over Gloo from env://) runs with N ranks under a plain
launcher (a few lines of Python setting what torchrun sets: Debian's torchrun fails here before
any rank starts) and under `shoal submit --kind command`. The script times itself the same way
under both (samples after its first step, over the window from its first step's end to its last
step's end, all ranks), so the ratio is what Shoal's launching and sampling cost; Shoal's own
figures (its samples/s from the reports, peak PSS sum) are printed beside. Medians of --repeats
interleaved runs.

  bench/command_vs_plain.py [--workers 1,2,4] [--steps 30] [--batch 64] [--repeats 3]
"""
import argparse
import glob
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile

from shoal_bench import ROOT, daemon

SCRIPT = os.path.join(ROOT, "bench", "command_train.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def own_rate(out):
    ranks = [json.load(open(p)) for p in glob.glob(os.path.join(out, "rank*.json"))]
    window = max(r["last"] for r in ranks) - min(r["first"] for r in ranks)
    return sum(r["samples"] for r in ranks) / window


def plain(w, args):
    out = tempfile.mkdtemp(prefix="shoal-plain.")
    port = str(free_port())
    procs = []
    for rank in range(w):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(w),
                   LOCAL_WORLD_SIZE=str(w), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        env.pop("SHOAL_REPORT_FD", None)
        procs.append(subprocess.Popen(["/usr/bin/python3", SCRIPT, out, str(args.steps),
                                       str(args.batch)], env=env))
    assert all(p.wait() == 0 for p in procs)
    return own_rate(out)


def shoal(cli, w, args):
    out = tempfile.mkdtemp(prefix="shoal-command.")
    e = cli("submit", "--kind", "command", "--workers", str(w), "--wait", "--json", "--",
            "/usr/bin/python3", SCRIPT, out, str(args.steps), str(args.batch))
    assert e["state"] == "SUCCEEDED", e
    return own_rate(out), e["result"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="1,2,4")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    print(f"bench/command_train.py, batch {args.batch} a rank, {args.steps} steps, medians of "
          f"{args.repeats} interleaved runs\n")
    print("| ranks | plain: script's samples/s | Shoal: script's samples/s | Shoal / plain | "
          "Shoal's samples/s (reports) | Shoal's peak PSS sum (MiB) |")
    print("| --- " * 6 + "|")
    with daemon(args.bin, extra=("--allow-commands",)) as cli:
        for w in (int(x) for x in args.workers.split(",")):
            p, s, reported, pss = [], [], [], []
            for _ in range(args.repeats):
                p.append(plain(w, args))
                rate, r = shoal(cli, w, args)
                s.append(rate)
                reported.append(r["samples_per_sec"])
                pss.append(r["peak_pss_sum_bytes"] / 2**20)
            mp, ms = statistics.median(p), statistics.median(s)
            print(f"| {w} | {mp:.0f} | {ms:.0f} | {ms / mp:.3f} | "
                  f"{statistics.median(reported):.0f} | {statistics.median(pss):.0f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
