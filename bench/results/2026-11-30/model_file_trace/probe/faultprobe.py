#!/usr/bin/python3
# per worker: cumulative minor faults (bytes) vs cumulative positive RSS increments, every 20 ms
import json, os, subprocess, sys, time, threading
sys.path.insert(0, "/work/main/bench")
from shoal_bench import fresh_shoald
from proc_reader import descendants
BIN = "/work/main/build/bin"; PG = 4096
def read(p):
    try:
        t = open(f"/proc/{p}/stat").read(); f = t[t.rfind(')')+2:].split()
        rss = int(open(f"/proc/{p}/statm").read().split()[1]) * PG
        return t[t.find('(')+1:t.rfind(')')], int(f[7]) * PG, rss
    except (OSError, IndexError): return None
def room(p):
    d = {}
    try:
        for line in open(f"/proc/{p}/smaps_rollup"):
            k, _, rest = line.partition(":")
            if k in ("Pss_Anon", "Anonymous", "Pss"): d[k] = int(rest.split()[0]) * 1024
    except OSError: return None
    return d
with fresh_shoald(BIN) as cli:
    st, stop, log = {}, threading.Event(), []
    def loop():
        while not stop.is_set():
            for p in descendants(cli.pid):
                r = read(p)
                if not r or r[0] != "shoal-worker": continue
                c, flt, rss = r
                s = st.setdefault(p, {"flt0": flt, "rss": rss, "grown": 0, "t0": time.time()})
                s["grown"] += max(0, rss - s["rss"]); s["rss"] = rss; s["flt"] = flt
                s["unexp"] = (flt - s["flt0"]) - s["grown"]
            time.sleep(0.02)
    def slow():
        while not stop.is_set():
            for p, s in list(st.items()):
                r = room(p)
                if r and "unexp" in s: log.append((time.time() - s["t0"], p, s["unexp"]/2**20, (s["flt"]-s["flt0"])/2**20, s["grown"]/2**20, (r.get("Anonymous",0)-r.get("Pss_Anon",0))/2**20, r.get("Pss",0)/2**20))
            time.sleep(0.25)
    ths = [threading.Thread(target=loop), threading.Thread(target=slow)]
    [t.start() for t in ths]
    out = subprocess.run([f"{BIN}/shoal", "--socket", cli.socket, "submit", *sys.argv[1:], "--wait", "--json"], capture_output=True, text=True)
    stop.set(); [t.join() for t in ths]
    print(out.stdout[:300] if out.returncode else "ok")
    for t, p, u, f, g, rm, pss in log: print(f"{t:6.2f} {p} unexplained {u:7.1f} faults {f:7.1f} grown {g:7.1f} room {rm:6.1f} pss {pss:6.1f}")
