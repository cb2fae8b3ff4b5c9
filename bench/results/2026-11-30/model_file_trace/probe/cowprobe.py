#!/usr/bin/python3
import json, os, subprocess, sys, time, threading
sys.path.insert(0, "/work/main/bench")
from shoal_bench import fresh_shoald
from proc_reader import descendants
def rollup(pid):
    out = {}
    try:
        for line in open(f"/proc/{pid}/smaps_rollup"):
            k, _, rest = line.partition(":")
            if k in ("Rss", "Pss", "Pss_Anon", "Anonymous"): out[k] = int(rest.split()[0]) * 1024
    except OSError: return None
    return out
BIN = "/work/main/build/bin"
argv = sys.argv[1:]
def comm(p):
    try: return open(f"/proc/{p}/comm").read().strip()
    except OSError: return "?"
def minflt(p):
    try:
        t = open(f"/proc/{p}/stat").read(); f = t[t.rfind(')')+2:].split()
        return int(f[7])  # field 10
    except OSError: return None
with fresh_shoald(BIN) as cli:
    rows, stop = [], threading.Event()
    def loop():
        while not stop.is_set():
            t = time.time()
            for p in descendants(cli.pid):
                r = rollup(p); m = minflt(p)
                if r and m is not None: rows.append((t, p, comm(p), m, r.get("Rss",0), r.get("Pss",0), r.get("Pss_Anon",0), r.get("Anonymous",0)))
            time.sleep(0.01)
    th = threading.Thread(target=loop); th.start()
    t0 = time.time()
    out = subprocess.run([f"{BIN}/shoal", "--socket", cli.socket, "submit", *argv, "--wait", "--json"], capture_output=True, text=True)
    stop.set(); th.join()
    e = json.loads(out.stdout)
    print("own", e["result"]["peak_pss_sum_bytes"]/2**20)
    js = json.loads(subprocess.run([f"{BIN}/shoal", "--socket", cli.socket, "get", e["id"], "--samples", "--format", "json"], capture_output=True, text=True).stdout)
    open("/tmp/cow_samples.json", "w").write(json.dumps(js))
    workers = sorted({p for _, p, c, *_ in rows if c == "shoal-worker"})
    last = {}
    for t, p, c, m, rss, pss, pa, an in rows:
        # only processes with PSS > 20 MiB
        if pss < 20*2**20: continue
        lm = last.get(p, m); last[p] = m
        print(f"+{t-t0:6.3f} {p} {c[:12]:12} flt {m:8d} d{m-lm:6d} rss {rss/2**20:7.1f} pss {pss/2**20:7.1f} pssanon {pa/2**20:7.1f} anon {an/2**20:7.1f} room {(an-pa)/2**20:6.1f}")
