#!/usr/bin/env python3
"""Shoal's peak PSS sum against an independent reader of /proc, at any worker count.

Beside each Shoal experiment, this script (not the project's code) walks
/proc/<pid>/smaps_rollup of every process in the experiment's process group every 50 ms and keeps
the peak of the summed PSS. It prints both peaks, their ratio, and the sampler's own CPU cost.
The test suite runs the same check at 2 and 4 workers (tests/figures_e2e_test.cc).

  /usr/bin/python3 bench/pss_check.py [--workers 8,16] [--start fork,spawn] [--batches 4]
"""
import argparse
import os
import threading
import time

from shoal_bench import ROOT, daemon


def group_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return -1 if rest[0] == "Z" else int(rest[2])
    except (OSError, IndexError, ValueError):
        return -1


def pss_kb(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Reader(threading.Thread):
    def __init__(self, pgid):
        super().__init__(daemon=True)
        self.pgid, self.peak_kb, self.reads, self.stop = pgid, 0, 0, False

    def run(self):
        while not self.stop:
            total = sum(pss_kb(n) for n in os.listdir("/proc") if n.isdigit() and group_of(n) == self.pgid)
            self.peak_kb = max(self.peak_kb, total)
            self.reads += 1
            time.sleep(0.05)


def one(cli, workers, start, batches):
    eid = cli("submit", "--workers", str(workers), "--start", start, "--batches", str(batches),
              "--dataset", "/usr/share/datasets/fashion-mnist", "--eval-samples", "0", "--json")["id"]
    leader = None
    while leader is None:
        e = cli("get", eid, "--json")
        leader = next((p["pid"] for p in e["processes"] if p["role"] == "leader"), None)
        time.sleep(0.05)
    reader = Reader(leader)
    reader.start()
    while e["state"] in ("QUEUED", "RUNNING"):
        time.sleep(0.2)
        e = cli("get", eid, "--json")
    reader.stop = True
    reader.join()
    r = e["result"]
    shoal_gib = r["peak_pss_sum_bytes"] / 2**30
    indep_gib = reader.peak_kb / 2**20
    print(f"| {start} | {workers} | {e['state'].lower()} | {shoal_gib:.3f} | {indep_gib:.3f} | "
          f"{shoal_gib / indep_gib:.4f} | {r['sampler_cpu_percent']:.2f} | {r['smaps_reads']} | {reader.reads} |",
          flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="8,16")
    ap.add_argument("--start", default="fork,spawn")
    ap.add_argument("--batches", type=int, default=4)
    a = ap.parse_args()
    print("| start | workers | state | Shoal peak PSS sum GiB | independent GiB | ratio | "
          "sampler % of a core | Shoal walks | independent reads |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    with daemon(os.path.join(ROOT, "build", "bin"), settle_s=2) as cli:
        for start in a.start.split(","):
            for w in a.workers.split(","):
                one(cli, int(w), start, a.batches)


if __name__ == "__main__":
    main()
