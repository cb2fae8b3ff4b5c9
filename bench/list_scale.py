#!/usr/bin/python3
"""How the record listing scales: N finished records on a throwaway shoald, then the CLI's
`list` (it follows every page), a filtered `list`, `get` of the newest and `rm` of one record,
each timed. The records are copies of one real finished run with fresh ids and times, written
into the store before the daemon starts (running N experiments would take hours).

  bench/list_scale.py [--records 1000,5000,20000] [--bin build/bin]

Prints one JSON line per N: seconds for each call, and seconds per 1,000 records for the full
listing (flat when listing is linear in the records, growing with N when it is not).
"""
import argparse
import contextlib
import json
import os
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time

from shoal_bench import ROOT

sys.path.insert(0, os.path.join(ROOT, "build", "python"))
from shoal.v1 import shoal_pb2  # noqa: E402


@contextlib.contextmanager
def shoald_on(bin_dir, sock, state):
    """A shoald on this socket and state dir (the store may be there already); yields the CLI."""
    d = subprocess.Popen([os.path.join(bin_dir, "shoald"), "--socket", sock, "--state-dir", state,
                          "--log-level", "warn"])
    try:
        for _ in range(600):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        yield [os.path.join(bin_dir, "shoal"), "--socket", sock]
    finally:
        d.terminate()
        d.wait()


def one_real_record(bin_dir, tmp):
    """A finished hogwild run of 1 worker and a few steps, as the store holds it."""
    state = os.path.join(tmp, "seed")
    with shoald_on(bin_dir, os.path.join(tmp, "seed.sock"), state) as cli:
        subprocess.run(cli + ["submit", "--workers", "1", "--batches", "4", "--dataset", "synthetic",
                              "--eval-samples", "0", "--wait"], check=True, capture_output=True)
    db = sqlite3.connect(os.path.join(state, "shoal.db"))
    body = db.execute("SELECT body FROM experiments").fetchone()[0]
    db.close()
    e = shoal_pb2.Experiment()
    e.ParseFromString(body)
    return e


def fill(state, template, n):
    """n copies of the template under fresh ids, one millisecond apart, half of them failed."""
    os.makedirs(state, mode=0o700)
    db = sqlite3.connect(os.path.join(state, "shoal.db"))
    db.execute("CREATE TABLE IF NOT EXISTS experiments (id TEXT PRIMARY KEY, submitted INTEGER, "
               "state INTEGER, body BLOB)")
    t0 = int(time.time() * 1000) - n
    rows = []
    for i in range(n):
        e = shoal_pb2.Experiment()
        e.CopyFrom(template)
        e.id = "x" + secrets.token_hex(5)
        e.submitted_unix_ms = t0 + i
        if i % 2:
            e.state = shoal_pb2.FAILED
        rows.append((e.id, e.submitted_unix_ms, e.state, e.SerializeToString()))
    db.executemany("INSERT INTO experiments VALUES (?,?,?,?)", rows)
    db.commit()
    db.close()
    return rows[-1][0]


def timed(cmd):
    t = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t, out


def measure(bin_dir, template, n):
    tmp = tempfile.mkdtemp(prefix="shoal-list.")
    sock, state = os.path.join(tmp, "s.sock"), os.path.join(tmp, "state")
    newest = fill(state, template, n)
    try:
        with shoald_on(bin_dir, sock, state) as cli:
            full_s, out = timed(cli + ["list", "--json"])
            listed = len(json.loads(out).get("experiments", []))
            failed_s, out = timed(cli + ["list", "--json", "--state", "failed"])
            failed = len(json.loads(out).get("experiments", []))
            get_s, _ = timed(cli + ["get", newest, "--json"])
            rm_s, _ = timed(cli + ["rm", newest])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if listed != n or failed != n // 2:
        sys.exit(f"listed {listed} of {n} records, {failed} of {n // 2} failed ones")
    return {"records": n, "list_s": round(full_s, 3), "list_s_per_1000": round(full_s / n * 1000, 4),
            "list_failed_s": round(failed_s, 3), "get_s": round(get_s, 3), "rm_s": round(rm_s, 3)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", default="1000,5000,20000")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="shoal-list-seed.")
    try:
        template = one_real_record(a.bin, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for n in (int(x) for x in a.records.split(",")):
        print(json.dumps(measure(a.bin, template, n)), flush=True)


if __name__ == "__main__":
    main()
