#!/usr/bin/env python3
"""Shoal's peak PSS, RSS and USS sums against an independent reader of /proc, at any worker count.

Beside each Shoal experiment, this script (not the project's code) walks
/proc/<pid>/smaps_rollup of every process under shoald (the experiment's leader and workers, and
a forkserver run's forkserver with its idle children) every 50 ms and keeps the peak of the
summed PSS, RSS and USS (Private_Clean + Private_Dirty). It prints both peaks of each, their
ratio, and the sampler's own CPU cost. The test suite runs the same check at 2 and 4 workers
(tests/figures_e2e_test.cc).

  /usr/bin/python3 bench/pss_check.py [--workers 8,16] [--start fork,spawn,forkserver] [--batches 4]
"""
import argparse
import os
import threading
import time

from shoal_bench import ROOT, daemon


def parents():
    """pid -> parent pid of every live process."""
    out = {}
    for n in os.listdir("/proc"):
        if not n.isdigit():
            continue
        try:
            with open(f"/proc/{n}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            if rest[0] != "Z":
                out[int(n)] = int(rest[1])
        except (OSError, IndexError, ValueError):
            pass
    return out


def descendants(root):
    children = {}
    for pid, parent in parents().items():
        children.setdefault(parent, []).append(pid)
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def rollup_kb(pid):
    """(rss, pss, uss) in kB, zeros for a process that is gone."""
    rss = pss = uss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key == "Rss":
                    rss = int(rest.split()[0])
                elif key == "Pss":
                    pss = int(rest.split()[0])
                elif key in ("Private_Clean", "Private_Dirty"):
                    uss += int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        pass
    return rss, pss, uss


class Reader(threading.Thread):
    def __init__(self, root):
        super().__init__(daemon=True)
        self.root, self.peak_kb, self.reads, self.stop = root, [0, 0, 0], 0, False

    def run(self):
        while not self.stop:
            total = [0, 0, 0]
            for pid in descendants(self.root):
                total = [a + b for a, b in zip(total, rollup_kb(pid))]
            self.peak_kb = [max(a, b) for a, b in zip(self.peak_kb, total)]
            self.reads += 1
            time.sleep(0.05)


def one(cli, workers, start, batches):
    reader = Reader(cli.pid)  # before the submit: it sees every process born
    reader.start()
    eid = cli("submit", "--workers", str(workers), "--start", start, "--batches", str(batches),
              "--dataset", "/usr/share/datasets/fashion-mnist", "--eval-samples", "0", "--json")["id"]
    e = cli("get", eid, "--json")
    while e["state"] in ("QUEUED", "RUNNING"):
        time.sleep(0.2)
        e = cli("get", eid, "--json")
    reader.stop = True
    reader.join()
    r = e["result"]
    cells = []
    for key, kb in zip(("peak_rss_sum_bytes", "peak_pss_sum_bytes", "peak_uss_sum_bytes"), reader.peak_kb):
        shoal, indep = r[key] / 2**30, kb / 2**20
        cells.append(f"{shoal:.3f} | {indep:.3f} | {shoal / indep:.4f}")
    print(f"| {start} | {workers} | {e['state'].lower()} | {cells[1]} | {cells[0]} | {cells[2]} | "
          f"{r['sampler_cpu_percent']:.2f} | {r['smaps_reads']} | {reader.reads} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", default="8,16")
    ap.add_argument("--start", default="fork,spawn,forkserver")
    ap.add_argument("--batches", type=int, default=4)
    a = ap.parse_args()
    print("| start | workers | state | Shoal PSS GiB | independent | ratio | Shoal RSS GiB | "
          "independent | ratio | Shoal USS GiB | independent | ratio | sampler % of a core | "
          "Shoal walks | independent reads |")
    print("|" + " --- |" * 15)
    with daemon(os.path.join(ROOT, "build", "bin"), settle_s=2) as cli:
        for start in a.start.split(","):
            for w in a.workers.split(","):
                one(cli, int(w), start, a.batches)


if __name__ == "__main__":
    main()
