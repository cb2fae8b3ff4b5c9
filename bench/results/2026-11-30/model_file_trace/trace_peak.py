#!/usr/bin/python3
"""Ad hoc: a fresh shoald, one model-file run, every process below shoald read every 5 ms; prints
the sum's peak, when, who held what then, and Shoal's own figure."""
import json, os, subprocess, sys, time, threading
sys.path.insert(0, "/work/main/bench")
from shoal_bench import fresh_shoald, daemon
from proc_reader import descendants, rollup
BIN = "/work/main/build/bin"
argv = sys.argv[1:]
def comm(p):
    try: return open(f"/proc/{p}/comm").read().strip()
    except OSError: return "?"
with fresh_shoald(BIN) as cli:
    samples, stop = [], threading.Event()
    def loop():
        while not stop.is_set():
            t = time.time(); row = {}
            for p in descendants(cli.pid):
                r = rollup(p)
                if r: row[p] = (comm(p), r["Pss"])
            samples.append((t, row)); time.sleep(0.002)
    th = threading.Thread(target=loop); th.start()
    t0 = time.time()
    out = subprocess.run([f"{BIN}/shoal", "--socket", cli.socket, "submit", *argv, "--wait", "--json"], capture_output=True, text=True)
    stop.set(); th.join()
    e = json.loads(out.stdout)
    full = json.loads(subprocess.run([f"{BIN}/shoal", "--socket", cli.socket, "get", e["id"], "--json"], capture_output=True, text=True).stdout)
    sp = full.get("spec", {})
    smp = subprocess.run([f"{BIN}/shoal", "--socket", cli.socket, "get", e["id"], "--samples", "--format", "csv"], capture_output=True, text=True).stdout
    open(os.environ.get("SAMPLES_CSV", "/tmp/samples.csv"), "w").write(smp)
    print("eval", sp.get("eval_samples"), "allocator", sp.get("allocator"), "steps", sp.get("batches"), {k: v for k, v in (full.get("result") or {}).items() if "ms" in k or "eval" in k})
    own = e["result"]["peak_pss_sum_bytes"]
    # exclude the forkserver and its idle pool unless the run is a forkserver one
    best = max(samples, key=lambda s: sum(v for _, v in s[1].values()))
    tot = sum(v for _, v in best[1].values())
    print(json.dumps({k: e["result"].get(k) for k in ("ready_ms",)}), [ (pr.get("pid"), pr.get("role"), round((pr.get("peak_pss_bytes") or 0)/2**20,1)) for pr in e.get("processes", [])])
    print(f"own {own/2**20:.1f} MiB; 5 ms peak (all below shoald) {tot/2**20:.1f} MiB at +{best[0]-t0:.3f} s; {len(samples)} reads")
    for p, (c, v) in sorted(best[1].items(), key=lambda kv: -kv[1][1])[:8]:
        print(f"  {p} {c} {v/2**20:.1f}")
    # the sum over time, coarse
    pk = best[0]
    for t, row in [x for x in samples if -2.0 < x[0] - pk < 0.3]:
        print(f"  +{t-t0:6.3f} {sum(v for _, v in row.values())/2**20:7.1f} " + " ".join(f"{p}:{v/2**20:.0f}" for p, (c, v) in sorted(row.items(), key=lambda kv: -kv[1][1])[:4]))
