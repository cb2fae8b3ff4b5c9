#!/usr/bin/python3
"""The control plane under load, on the unix socket: W concurrent Watch streams on one running
experiment plus C clients calling Get and List in a loop, for as long as the experiment runs.

It runs the same experiment twice on one throwaway shoald, without and with the load, and prints:
requests served and errors (must be 0), Get's p50/p99 latency, the daemon's peak RSS (VmHWM) and
its CPU over the loaded run, its RSS early and late in the load against the requests completed
between (it must not grow with them), samples dropped per watcher, and the experiment's samples/s
with and without load. Clients use the Python modules the build makes (build/python).

  bench/control_plane_load.py [--watchers 200] [--clients 50] [--batches 60]
"""
import argparse
import os
import statistics
import sys
import threading
import time

from shoal_bench import ROOT, daemon

sys.path.insert(0, os.path.join(ROOT, "build", "python"))
import grpc  # noqa: E402
from shoal.v1 import shoal_pb2, shoal_pb2_grpc  # noqa: E402


def proc_status(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def spec(batches):
    return shoal_pb2.ExperimentSpec(workers=2, batches=batches, dataset="synthetic", eval_samples=0)


def watcher(stub, exp_id, out, errors):
    dropped, events = 0, 0
    try:
        for ev in stub.Watch(shoal_pb2.WatchRequest(id=exp_id)):
            dropped, events = max(dropped, ev.dropped), events + 1
    except grpc.RpcError:
        errors.append("watch")
    out.append((events, dropped))


def caller(stub, exp_id, stop, latencies, counts, errors):
    n = 0
    while not stop.is_set():
        try:
            t0 = time.perf_counter()
            stub.Get(shoal_pb2.GetRequest(id=exp_id), timeout=30)
            latencies.append(time.perf_counter() - t0)
            stub.List(shoal_pb2.ListRequest(page_size=100), timeout=30)
            n += 2
        except grpc.RpcError:
            errors.append("unary")
    counts.append(n)


def run_loaded(stub, cli, args):
    exp_id = stub.Submit(shoal_pb2.SubmitRequest(spec=spec(args.batches))).id
    stop, latencies, counts, errors, watched = threading.Event(), [], [], [], []
    # Daemon threads: a SIGTERM (timeout(1)) ends the benchmark even while they wait on streams.
    threads = [threading.Thread(target=watcher, args=(stub, exp_id, watched, errors), daemon=True)
               for _ in range(args.watchers)]
    threads += [threading.Thread(target=caller, args=(stub, exp_id, stop, latencies, counts, errors),
                                 daemon=True) for _ in range(args.clients)]
    cpu0 = cpu_seconds(cli.pid)
    for t in threads:
        t.start()
    time.sleep(5)
    rss_early, served_early = proc_status(cli.pid, "VmRSS"), len(latencies) * 2
    while stub.Get(shoal_pb2.GetRequest(id=exp_id)).state in (shoal_pb2.QUEUED, shoal_pb2.RUNNING):
        time.sleep(0.5)
    rss_late, served_late = proc_status(cli.pid, "VmRSS"), len(latencies) * 2
    stop.set()
    for t in threads:
        t.join()
    return {"id": exp_id, "served": sum(counts), "errors": len(errors), "latencies": latencies,
            "watched": watched, "cpu_s": cpu_seconds(cli.pid) - cpu0,
            "rss_early": rss_early, "rss_late": rss_late, "between": served_late - served_early}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--watchers", type=int, default=200)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    args = ap.parse_args()
    with daemon(args.bin, settle_s=1.0) as cli:
        channel = grpc.insecure_channel("unix:" + cli.socket,
                                        options=[("grpc.max_concurrent_streams", 1000)])
        stub = shoal_pb2_grpc.ShoalStub(channel)
        quiet = cli("submit", "--workers", "2", "--batches", str(args.batches), "--dataset",
                    "synthetic", "--eval-samples", "0", "--wait", "--json")
        t0 = time.time()
        r = run_loaded(stub, cli, args)
        wall = time.time() - t0
        loaded = stub.Get(shoal_pb2.GetRequest(id=r["id"]))
        hwm = proc_status(cli.pid, "VmHWM")
    lat = sorted(r["latencies"])
    p = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] * 1e3
    drops = [d for _, d in r["watched"]]
    print(f"{args.watchers} watchers + {args.clients} Get/List clients on one running experiment "
          f"(2 workers, {args.batches} batches), {os.cpu_count()} cores, {wall:.0f} s\n")
    print("| figure | value |\n| --- | --- |")
    rows = [
        ("requests served (Get + List)", f"{r['served']}"),
        ("errors", f"{r['errors']}"),
        ("Get latency p50 / p99 (ms)", f"{p(0.5):.1f} / {p(0.99):.1f}"),
        ("watch streams that ended with the experiment", f"{len(r['watched'])} of {args.watchers}"),
        ("events per watcher (median)", f"{statistics.median(e for e, _ in r['watched']):.0f}"),
        ("samples dropped per watcher (max / mean)", f"{max(drops)} / {statistics.mean(drops):.1f}"),
        ("daemon CPU over the loaded run (s; % of one core)",
         f"{r['cpu_s']:.1f}; {100 * r['cpu_s'] / wall:.0f}%"),
        ("daemon peak RSS, VmHWM (MiB)", f"{hwm / 2**20:.1f}"),
        ("daemon RSS 5 s in -> at the end (MiB), requests between",
         f"{r['rss_early'] / 2**20:.1f} -> {r['rss_late'] / 2**20:.1f}, {r['between']}"),
        ("experiment samples/s without load / with", f"{quiet['result']['samples_per_sec']:.1f} / "
         f"{loaded.result.samples_per_sec:.1f}"),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
