#!/usr/bin/python3
"""What following a big Slurm job array costs shoald (issue 56): a sweep of N points placed with
`shoal sweep --slurm` on a throwaway shoald whose sbatch, scontrol and scancel are fakes that
answer as Slurm's do (scontrol prints one line per started task and one for the pending rest,
as Slurm does), while this script plays the cluster: it starts up to K tasks at a time, ends
them, and writes each one's record as `shoald --run-point` would (copies of one real record, run
once at the start, renamed to each point).

  bench/slurm_bookkeeping.py [--points 10000] [--max-parallel 1000] [--per-second 500]
                             [--max-array-size 1001] [--bin build/bin]

The fake cluster's MaxArraySize is Slurm's default, 1001: a sweep past it is placed as several
arrays, each after the one before (`--dependency=afterany`, which the fake honours).

Prints one JSON object: the submit's seconds (orders written, the array submitted, N records
stored), shoald's CPU seconds and peak RSS over the whole array, scontrol's output at its
largest, seconds from the last record written to the sweep SUCCEEDED, and the store's size.
"""
import argparse
import hashlib
import hmac
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from shoal_bench import ROOT, daemon

sys.path.insert(0, os.path.join(ROOT, "build", "python"))
from shoal.v1 import shoal_pb2  # noqa: E402

# The fake Slurm: one state file, three commands. Tasks not yet started are one PENDING line
# with Slurm's range syntax, as `scontrol -o show job` prints an array's pending rest.
FAKE = r'''#!/usr/bin/python3
import json, os, sys
state = os.environ["FAKE_SLURM_STATE"]
def load():
    if not os.path.exists(state): return {"jobs": {}}
    with open(state) as f: return json.load(f)
def save(s):
    with open(state + ".tmp", "w") as f: json.dump(s, f)
    os.replace(state + ".tmp", state)
cmd = os.path.basename(sys.argv[0])
def arg(prefix):
    got = [a[len(prefix):] for a in sys.argv if a.startswith(prefix)]
    return got[0] if got else None
if cmd == "sbatch":
    s = load()
    n = int(arg("--array=").split("%")[0].split("-")[1]) + 1
    if n > int(os.environ["FAKE_SLURM_MAX_ARRAY"]):
        sys.exit("sbatch: error: Batch job submission failed: Invalid job array specification")
    job = str(77 + len(s["jobs"]))
    s["jobs"][job] = {"tasks": n, "states": {}, "output": arg("--output="),
                      "after": arg("--dependency=afterany:"),
                      "key": os.environ.get("SHOAL_RECORD_KEY", "")}
    save(s)
    print(job)
elif cmd == "scontrol" and sys.argv[1:3] == ["show", "config"]:
    print("MaxArraySize            = " + os.environ["FAKE_SLURM_MAX_ARRAY"])
elif cmd == "scontrol":
    job = sys.argv[-1]
    s = load()["jobs"].get(job)
    if s is None:
        sys.exit("slurm_load_jobs error: Invalid job id specified")
    lines, started = [], s["states"]
    for i, st in started.items():
        lines.append(f"JobId={job}{i} ArrayJobId={job} ArrayTaskId={i} JobName=x "
                     f"JobState={st} Reason=None NodeList=node{int(i) % 100} ExitCode=0:0")
    rest = [i for i in range(s["tasks"]) if str(i) not in started]
    if rest:
        why = "Dependency" if s["after"] else "JobArrayTaskLimit"
        lines.append(f"JobId={job} ArrayJobId={job} ArrayTaskId={rest[0]}-{rest[-1]} JobName=x "
                     f"JobState=PENDING Reason={why} NodeList=(null) ExitCode=0:0")
    sys.stdout.write("\n".join(lines) + "\n")
    with open(state + ".scontrol", "a") as f: f.write(f"{len(lines)} {sum(map(len, lines))}\n")
elif cmd == "scancel":
    pass
'''


def fake_slurm(tmp):
    fakebin = os.path.join(tmp, "fakebin")
    os.makedirs(fakebin)
    for cmd in ("sbatch", "scontrol", "scancel"):
        path = os.path.join(fakebin, cmd)
        with open(path, "w") as f:
            f.write(FAKE)
        os.chmod(path, 0o755)
    return fakebin


def one_record(bin_dir, tmp):
    """A real point's record: one --run-point run, the template every task's record copies."""
    order = os.path.join(tmp, "order.json")
    with open(order, "w") as f:
        json.dump({"sweep_id": "s0", "index": 0, "experiment_id": "x0",
                   "spec": {"workers": 2, "batches": 4, "batch_size": 16, "dataset": "synthetic",
                            "eval_samples": 0}}, f)
    out = os.path.join(tmp, "record.pb")
    subprocess.run([os.path.join(bin_dir, "shoald"), "--state-dir", os.path.join(tmp, "rp"),
                    "--log-level", "warn", "--run-point", order, "--record-out", out], check=True)
    r = shoal_pb2.RunRecord()
    with open(out, "rb") as f:
        r.ParseFromString(f.read())
    return r


def proc_figures(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open(f"/proc/{pid}/status") as f:
        hwm = [int(l.split()[1]) for l in f if l.startswith("VmHWM:")][0]
    return cpu, hwm / 1024


def play_cluster(state, template, points, max_parallel, per_second):
    """Starts tasks up to max_parallel over every array (an array whose dependency has not ended
    waits), ends per_second of them a second with their records."""
    done = 0
    t_last = None
    while done < points:
        with open(state) as f:
            s = json.load(f)
        jobs = s["jobs"]
        budget = max(1, per_second // 5)  # ends this tick, over every array
        for job in jobs.values():
            folder = os.path.dirname(job["output"])
            running = [i for i, st in job["states"].items() if st == "RUNNING"][:budget]
            budget -= len(running)
            for i in running:
                with open(os.path.join(folder, f"order-{i}.json")) as f:
                    order = json.load(f)
                r = shoal_pb2.RunRecord()
                r.CopyFrom(template)
                r.experiment.id = order["experimentId"]
                r.experiment.sweep_id = order["sweepId"]
                r.experiment.sweep_index = int(order.get("index", 0))
                # Sealed as a task's run-point seals it, under the key sbatch's environment held.
                body = r.SerializeToString()
                sealed = shoal_pb2.SealedRecord(
                    record=body,
                    hmac_sha256=hmac.new(bytes.fromhex(job["key"]), body, hashlib.sha256).digest())
                tmp = os.path.join(folder, f"record-{i}.pb.tmp")
                with open(tmp, "wb") as f:
                    f.write(sealed.SerializeToString())
                os.replace(tmp, os.path.join(folder, f"record-{i}.pb"))
                job["states"][i] = "COMPLETED"
                done += 1
        def ended(j):
            return len(jobs[j]["states"]) == jobs[j]["tasks"] and \
                all(v == "COMPLETED" for v in jobs[j]["states"].values())
        running = sum(v == "RUNNING" for job in jobs.values() for v in job["states"].values())
        for job in jobs.values():
            if job["after"] and not ended(job["after"]):
                continue
            while len(job["states"]) < job["tasks"] and running < max_parallel:
                job["states"][str(len(job["states"]))] = "RUNNING"
                running += 1
        with open(state + ".tmp", "w") as f:
            json.dump(s, f)
        os.replace(state + ".tmp", state)
        t_last = time.monotonic()
        time.sleep(0.2)
    return t_last, len(jobs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--points", type=int, default=10000)
    ap.add_argument("--max-parallel", type=int, default=1000)
    ap.add_argument("--per-second", type=int, default=500)
    ap.add_argument("--max-array-size", type=int, default=1001,
                    help="the fake cluster's MaxArraySize (Slurm's default: 1001)")
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="shoal-slurm-bench.")
    try:
        template = one_record(a.bin, tmp)
        # The daemon and the CLI find the fake Slurm first.
        os.environ["PATH"] = fake_slurm(tmp) + ":" + os.environ["PATH"]
        os.environ["FAKE_SLURM_STATE"] = os.path.join(tmp, "slurm.json")
        os.environ["FAKE_SLURM_MAX_ARRAY"] = str(a.max_array_size)
        with daemon(a.bin, settle_s=0.5, extra=("--max-queued", str(a.points))) as cli:
            print(json.dumps(follow_array(a, cli, template)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def follow_array(a, cli, template):
    """Submits the sweep, plays the cluster to its end; returns what it cost shoald."""
    state_dir = os.path.join(os.path.dirname(cli.socket), "state")
    shoal = [os.path.join(a.bin, "shoal"), "--socket", cli.socket]
    repeats = max(1, a.points // 100)
    sizes = ",".join(str(16 + b) for b in range(a.points // repeats))
    t0 = time.monotonic()
    out = subprocess.run(shoal + ["sweep", "--slurm", "--max-parallel", str(a.max_parallel),
                                  "--batch-size", sizes, "--repeats", str(repeats),
                                  "--dataset", "synthetic", "--force", "--json"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("the sweep was refused: " + out.stderr)
    submit_s = time.monotonic() - t0
    sweep = json.loads(out.stdout)["id"]
    cpu0, _ = proc_figures(cli.pid)
    t_last, arrays = play_cluster(os.environ["FAKE_SLURM_STATE"], template, a.points,
                                  a.max_parallel, a.per_second)
    while True:
        r = subprocess.run(shoal + ["get", sweep, "--json"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("get " + sweep + ": " + r.stderr)
        got = json.loads(r.stdout)
        if got["sweep"]["state"] not in ("QUEUED", "RUNNING"):
            break
        time.sleep(0.2)
    merge_s = time.monotonic() - t_last
    cpu1, hwm_mib = proc_figures(cli.pid)
    with open(os.environ["FAKE_SLURM_STATE"] + ".scontrol") as f:
        polls = [tuple(map(int, l.split())) for l in f]
    succeeded = sum(p["state"] == "SUCCEEDED" for p in got["sweep"]["points"])
    return {
        "points": a.points, "max_parallel": a.max_parallel, "per_second": a.per_second,
        "max_array_size": a.max_array_size, "arrays": arrays,
        "record_bytes": template.ByteSize(), "submit_s": round(submit_s, 2),
        "sweep_state": got["sweep"]["state"], "succeeded": succeeded,
        "shoald_cpu_s_while_following": round(cpu1 - cpu0, 2),
        "shoald_peak_rss_mib": round(hwm_mib, 1), "scontrol_calls": len(polls),
        "scontrol_largest_lines": max(p[0] for p in polls),
        "scontrol_largest_bytes": max(p[1] for p in polls),
        "last_record_to_sweep_end_s": round(merge_s, 2),
        "store_mib": round(os.path.getsize(os.path.join(state_dir, "shoal.db")) / 2**20, 1),
    }


if __name__ == "__main__":
    main()
