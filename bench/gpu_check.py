#!/usr/bin/env python3
"""The GPU checks, run on a GPU node by deploy/gpu-node.sh (nothing here can run without one):

    deploy/gpu-node.sh /usr/bin/env python3 bench/gpu_check.py

Every start method and sharing mode trains on CUDA and must succeed; shared weights must end as
one copy (every worker's fingerprint is the leader's buffer's), private ones as several; fork with
shared weights is refused; Shoal's peak GPU memory, summed and per process, is checked against
nvidia-smi read beside it (2%), and each worker's torch.cuda allocator peaks against its NVML
figure; --cuda-sync events (the default), phases and step train, events' phase split agrees with
phases' and step has none; a user's TorchScript model (resnet18) trains on CUDA under every start
method, shared or not; the command kind runs a DDP script on the GPU, its ranks' NVML figures
against nvidia-smi's, GPM and energy read or their absence explained;
pipeline stages on CUDA (activations through CUDA IPC slots) train to the CPU's loss for the same
configuration (within 1e-3: run it with NVIDIA_TF32_OVERRIDE=0 in shoald's environment, as
bench/gpu_session.sh does; PyTorch's default TF32 convolutions put a 2-stage AmoebaNet's first
loss 0.6% off on an H100) and report each stage's CUDA allocator figures, on the devices cuda_devices names (and
across devices where the node has two); a run past the GPU's memory fails with CUDA's own
out-of-memory message and the daemon runs the next; nothing is left on the GPU or in /dev/shm.

Each check runs on after another's failure (a failed expectation ends only the run it is about), so
one call of a short-lived GPU machine says everything that is wrong; exits non-zero if anything
failed, naming each failure again at the end. --only modes,nvidia-smi,cuda-sync,model-file,
command,pipeline,oom runs
those checks alone (the refusals and the leftovers are always checked)."""
import argparse
import json
import os
import shlex
import subprocess
import sys
import threading
import time

SHOAL = shlex.split(os.environ["SHOAL"])
FAILURES = []


class Failed(Exception):
    """An expectation failed: what it was about (one run, one check) cannot go on."""


def fail(what):
    print("FAIL " + what, flush=True)
    FAILURES.append(what)


def shoal(*args, check=True):
    r = subprocess.run(SHOAL + list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        fail(f"shoal {' '.join(args)}: {r.stderr.strip()}")
        raise Failed()
    return r


def submit(*args):
    return json.loads(shoal("submit", "--device", "cuda", "--dataset", "synthetic", *args,
                            "--wait", "--json").stdout)


def expect(cond, what, fatal=True):
    """Prints ok or FAIL; a fatal failure ends what it is about (raises Failed), others go on."""
    if cond:
        print("ok   " + what, flush=True)
        return
    fail(what)
    if fatal:
        raise Failed()


def attempt(fn, *args):
    """Runs one check or one run of it; its failure is recorded and the next goes on."""
    try:
        fn(*args)
    except Failed:
        pass
    except (KeyError, TypeError, ValueError) as e:  # a result without what the check reads
        fail(f"{fn.__name__}{args}: {type(e).__name__} {e}")


def smi_apps():
    """{pid: MiB} of compute processes, as nvidia-smi reads them (independently of Shoal)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    apps = {}
    for line in out.splitlines():
        pid, mib = [x.strip() for x in line.split(",")]
        apps[int(pid)] = int(mib)
    return apps


class SmiPoller:
    """nvidia-smi every 0.1 s while in the `with` block (an independent reader of Shoal's
    figures): the peak of the summed compute processes' MiB ("peak") and each pid's ("pids").
    The block's failure stops it too."""

    def __init__(self):
        self.seen = {"peak": 0, "pids": {}}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll)

    def _poll(self):
        while not self._done.is_set():
            apps = smi_apps()
            self.seen["peak"] = max(self.seen["peak"], sum(apps.values()))
            for pid, m in apps.items():
                self.seen["pids"][pid] = max(self.seen["pids"].get(pid, 0), m)
            time.sleep(0.1)

    def __enter__(self):
        self._thread.start()
        return self.seen

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()


def mib(b):
    return "?" if b is None else f"{b / 2**20:.0f}"


def check_mode(start, share):
    e = submit("--workers", "2", "--start", start, "--share", share, "--batches", "100",
               "--eval-samples", "500")
    r = e["result"]
    tag = f"{start} share {share}"
    expect(e["state"] == "SUCCEEDED", f"{tag}: succeeded ({e.get('error', '')})")
    expect((r.get("peak_gpu_memory_bytes") or 0) > 0,
           f"{tag}: GPU memory measured ({r.get('gpu_status', '')}, {r.get('gpu_reads')} reads)",
           fatal=False)
    expect(r.get("gpu_util_mean_percent") is not None, f"{tag}: GPU utilisation measured",
           fatal=False)
    expect((r.get("test_accuracy") or 0) > 0.5,
           f"{tag}: learnt (accuracy {r.get('test_accuracy')})", fatal=False)
    sums = {p["weights_checksum"] for p in e["processes"] if p["role"] == "worker"}
    devices = [p.get("cuda_device") for p in e["processes"] if p["role"] == "worker"]
    expect(devices == [0, 0], f"{tag}: workers on device 0 ({devices})", fatal=False)
    if share == "yes":
        expect(sums == {r["final_shared_checksum"]}, f"{tag}: one shared copy")
    else:
        expect(len(sums) == 2, f"{tag}: two private copies")


def check_modes():
    for start, share in [("spawn", "yes"), ("spawn", "no"), ("forkserver", "yes"), ("fork", "no")]:
        attempt(check_mode, start, share)


def check_against_nvidia_smi():
    """Shoal's NVML figures against nvidia-smi polled beside them: the peak sum, and each
    process's own peak (a worker's GPU memory is flat once it trains, so the two peaks are
    readings of the same moment) within 2%; each worker's CUDA allocator peaks (what
    torch.cuda.max_memory_allocated/_reserved read in it) under its NVML figure, the rest being
    its CUDA context and what the driver holds outside LibTorch."""
    with SmiPoller() as seen:
        e = submit("--workers", "4", "--start", "spawn", "--share", "yes", "--batches", "600",
                   "--eval-samples", "0", "--sample-interval-ms", "100")
    shoal_mib = e["result"]["peak_gpu_memory_bytes"] / 2**20
    ratio = shoal_mib / max(1, seen["peak"])
    expect(0.98 <= ratio <= 1.02,
           f"peak GPU memory: Shoal {shoal_mib:.0f} MiB, nvidia-smi {seen['peak']} MiB ({ratio:.3f})",
           fatal=False)
    for p in e["processes"]:
        tag = f"{p['role']} {p['index']} (pid {p['pid']})"
        mine, smi = p.get("peak_gpu_memory_bytes"), seen["pids"].get(p["pid"])
        expect(mine is not None and smi is not None and abs(mine / 2**20 / smi - 1) <= 0.02,
               f"{tag}: Shoal {mib(mine)} MiB, nvidia-smi {smi} MiB", fatal=False)
        if p["role"] != "worker":
            continue
        alloc, res = p.get("peak_cuda_allocated_bytes"), p.get("peak_cuda_reserved_bytes")
        expect(None not in (alloc, res, mine) and 0 < alloc <= res < mine,
               f"{tag}: torch.cuda allocated {mib(alloc)} MiB <= reserved {mib(res)} MiB < NVML "
               f"{mib(mine)} MiB (context and driver: {mib(mine - (res or 0)) if mine else '?'} MiB)",
               fatal=False)


def check_cuda_sync():
    """cuda_sync events (the default), phases and step all train and learn; events and phases
    split the step (data, forward, backward, update), step does not (absent, not 0); events'
    split agrees with phases' (the same work timed on the device without the host waiting, and
    after waiting): each of forward, backward and update within 15%, and their sum within 10%."""
    runs = {}
    for sync in ("events", "phases", "step"):
        e = submit("--workers", "2", "--start", "spawn", "--share", "no", "--batches", "300",
                   "--eval-samples", "500", "--cuda-sync", sync)
        r = e["result"]
        split = ", ".join(f"{k} {r.get(k) or 0:.0f}" for k in SPLIT)
        expect(e["state"] == "SUCCEEDED" and (r.get("test_accuracy") or 0) > 0.5,
               f"cuda_sync {sync}: succeeded and learnt ({e.get('error', '')}, "
               f"{r.get('samples_per_sec') or 0:.0f} samples/s; {split} ms)")
        runs[sync] = r
    expect(all(runs[s].get(k) is not None for k in SPLIT for s in ("events", "phases"))
           and all(runs["step"].get(k) is None for k in SPLIT),
           "cuda_sync step: no phase split; events and phases: one")
    ev, ph = runs["events"], runs["phases"]
    for k in ("forward_ms", "backward_ms", "optimizer_ms"):
        expect(ph.get(k) and ev.get(k) and abs(ev[k] / ph[k] - 1) <= 0.15,
               f"cuda_sync events' {k} {ev.get(k)} against phases' {ph.get(k)}", fatal=False)
    total = lambda r: sum(r.get(k) or 0 for k in ("forward_ms", "backward_ms", "optimizer_ms"))
    expect(total(ph) and abs(total(ev) / total(ph) - 1) <= 0.10,
           f"cuda_sync events' step {total(ev):.0f} ms against phases' {total(ph):.0f} ms "
           f"(forward + backward + update, summed over workers)", fatal=False)


SPLIT = ("data_ms", "forward_ms", "backward_ms", "optimizer_ms")


def model_archive():
    """torchvision's resnet18 for 10 classes, scripted (random weights, seeded), once."""
    path = os.path.join(os.environ.get("SHOAL_DIR", "/tmp"), "resnet18.pt")
    if not os.path.exists(path):
        import torch
        import torchvision
        torch.manual_seed(0)
        torch.jit.script(torchvision.models.resnet18(num_classes=10)).save(path)
    return path


def check_model_file_mode(start, share):
    e = json.loads(shoal("submit", "--model-file", model_archive(), "--input",
                         "float32[B,3,64,64]", "--classes", "10", "--device", "cuda",
                         "--workers", "2", "--start", start, "--share", share, "--batches", "40",
                         "--batch-size", "16", "--wait", "--json").stdout)
    r, tag = e.get("result") or {}, f"model file (resnet18) {start} share {share}"
    expect(e["state"] == "SUCCEEDED", f"{tag}: succeeded ({e.get('error', '')}, "
           f"{r.get('samples_per_sec') or 0:.0f} samples/s, loss {r.get('first_loss')} -> "
           f"{r.get('last_loss')})")
    expect((r.get("peak_gpu_memory_bytes") or 0) > 0, f"{tag}: GPU memory measured", fatal=False)
    expect(all(r.get(k) is not None for k in SPLIT), f"{tag}: phases split by events", fatal=False)
    workers = [p for p in e["processes"] if p["role"] == "worker"]
    sums = {p["weights_checksum"] for p in workers}
    devices = [p.get("cuda_device") for p in workers]
    expect(devices == [0, 0], f"{tag}: workers on device 0 ({devices})", fatal=False)
    gpu = [p.get("peak_gpu_memory_bytes") for p in workers]
    expect(all(g for g in gpu), f"{tag}: each worker on the GPU ({[mib(g) for g in gpu]} MiB)",
           fatal=False)
    if share == "yes":
        expect(sums == {r["final_shared_checksum"]}, f"{tag}: one shared copy")
    else:
        expect(len(sums) == 2, f"{tag}: two private copies")


def check_model_file():
    """A user's TorchScript model (torchvision's resnet18) trains on CUDA under every start
    method CUDA allows, shared weights as one copy in the leader's device buffer."""
    for start, share in [("spawn", "yes"), ("spawn", "no"), ("forkserver", "yes"), ("fork", "no")]:
        attempt(check_model_file_mode, start, share)
    r = shoal("submit", "--model-file", model_archive(), "--input", "float32[B,3,64,64]",
              "--classes", "10", "--device", "cuda", "--autocast", "bfloat16", "--start",
              "spawn", check=False)
    expect(r.returncode != 0 and "CPU autocast" in r.stderr,
           f"model file: autocast bfloat16 on cuda refused ({r.stderr.strip()[:120]})", fatal=False)


def check_command():
    """The command kind on the GPU: a DDP script (NCCL with a GPU a rank, Gloo on CUDA tensors
    where two ranks share one) under Shoal; every rank's NVML figure against nvidia-smi polled
    beside it (2%), the replicas' weights equal, and GPM SM activity and energy read from the
    driver or the reason they are absent."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "command_ddp_cuda.py")
    with SmiPoller() as seen:
        e = json.loads(shoal("submit", "--kind", "command", "--device", "cuda", "--cuda-devices",
                             "0", "--workers", "2", "--sample-interval-ms", "100", "--wait",
                             "--json", "--", sys.executable, script, "600", "64").stdout)
    r = e.get("result") or {}
    expect(e["state"] == "SUCCEEDED", f"command DDP on cuda: succeeded ({e.get('error', '')}, "
           f"{r.get('samples_per_sec') or 0:.0f} samples/s, loss {r.get('first_loss')} -> "
           f"{r.get('last_loss')})")
    log = shoal("logs", e["id"], check=False).stdout
    print("\n".join("     " + l for l in log.splitlines() if "] rank " in l), flush=True)
    expect(log.count("weights equal rank 0's: True") == 2, "command: both replicas equal",
           fatal=False)
    ranks = [p for p in e["processes"] if p["role"] == "worker"]
    for p in ranks:
        mine, smi = p.get("peak_gpu_memory_bytes"), seen["pids"].get(p["pid"])
        expect(mine is not None and smi is not None and abs(mine / 2**20 / smi - 1) <= 0.02,
               f"command rank {p['index']} (pid {p['pid']}): Shoal {mib(mine)} MiB, nvidia-smi "
               f"{smi} MiB", fatal=False)
    print(f"     GPM: {r.get('gpm_status')!r}, SM active {r.get('gpu_sm_active_percent')}; "
          f"energy {r.get('gpu_energy_j')} J ({r.get('gpu_energy_status')!r}); utilisation "
          f"{r.get('gpu_util_mean_percent')}", flush=True)
    expect(r.get("gpu_sm_active_percent") is not None or r.get("gpm_status"),
           "command: GPM SM activity, or the reason it is absent", fatal=False)
    expect(r.get("gpu_energy_j") is not None or r.get("gpu_energy_status"),
           "command: GPU energy, or the reason it is absent", fatal=False)


def check_stage_devices(e, tag, devices):
    """Each stage ran where the spec put it: stage i on the (i mod n)-th of cuda_devices."""
    listed = [int(d) for d in e["spec"]["cuda_devices"].split(",")]
    got = [st.get("cuda_device") for st in e["result"]["pipeline"]["stage"]]
    want = [listed[i % len(listed)] for i in range(len(got))]
    expect(got == want and all(d < devices for d in got), f"{tag}: stages on devices {got}")


def check_pipeline_run(e, tag, want, devices):
    """It succeeded, on the devices its spec names, to the CPU's loss for the same configuration."""
    expect(e["state"] == "SUCCEEDED", f"{tag}: succeeded ({e.get('error', '')})")
    check_stage_devices(e, tag, devices)
    got = e["result"].get("last_loss")
    off = f", {abs(got / want - 1):.2%} off" if got is not None and want else ""
    expect(got is not None and abs(got - want) <= 1e-3 * abs(want),
           f"{tag}: loss of its one step {got} (CPU {want}{off})", fatal=False)


def check_pipeline_devices(base, shape, want, devices):
    """Where stages go: by default stage i on device i mod the node's; a device the node does not
    have is refused; with two or more devices, stages across devices (activations read under the
    neighbour's device and copied across) train as on one."""
    r = shoal("submit", "--device", "cuda", "--dataset", "synthetic", *base, *shape,
              "--cuda-devices", str(devices), check=False)
    expect(r.returncode != 0 and f"sees {devices} device(s)" in r.stderr,
           f"pipeline on device {devices} of {devices} refused ({r.stderr.strip()})")
    if devices < 2:
        print(f"note: {devices} device: stages across devices not run", flush=True)
        return
    for listed in ("0,1", "1,0", "0,0"):
        attempt(lambda: check_pipeline_run(
            submit(*base, *shape, "--start", "spawn", "--cuda-devices", listed),
            f"pipeline across devices {listed}", want, devices))


def check_pipeline(devices):
    """pipeline on CUDA: a stage per process, activations and gradients through CUDA IPC slots.
    Each configuration's first loss must match the same configuration on the CPU (BatchNorm
    normalises per micro-batch, so the reference needs the same chunks)."""
    base = ["--kind", "pipeline", "--layers", "18", "--filters", "64", "--batch-size", "8",
            "--batches", "1", "--sample-interval-ms", "50"]  # NVML must see short-lived stages
    for stages, chunks, ckpt in ((2, 4, "except_last"), (4, 8, "always")):
        attempt(check_pipeline_shape, base, stages, chunks, ckpt, devices)


def check_pipeline_shape(base, stages, chunks, ckpt, devices):
    """One shape: its CPU reference, then every start method on CUDA (each on its own)."""
    shape = ["--stages", str(stages), "--chunks", str(chunks), "--checkpoint", ckpt]
    cpu = json.loads(shoal("submit", "--dataset", "synthetic", *base, *shape, "--wait",
                           "--json").stdout)
    expect(cpu["state"] == "SUCCEEDED", f"pipeline {shape} on the CPU ({cpu.get('error')})")
    want = cpu["result"]["last_loss"]
    for start in ("spawn", "forkserver", "fork"):
        attempt(check_pipeline_start, base + shape + ["--start", start],
                f"pipeline {start} {stages} stages {chunks} chunks {ckpt}", want, devices)
    if stages == 2:
        attempt(check_pipeline_devices, base, shape, want, devices)


def check_pipeline_start(args, tag, want, devices):
    """One pipeline run on CUDA: the CPU's loss, and each stage's allocator figures under NVML's."""
    e = submit(*args)
    check_pipeline_run(e, tag, want, devices)
    for st in e["result"]["pipeline"]["stage"]:
        alloc, res, gpu = (st.get(k) for k in ("peak_allocated_bytes", "peak_reserved_bytes",
                                               "peak_gpu_memory_bytes"))
        expect(None not in (alloc, res, gpu),
               f"{tag}: stage {st.get('stage', 0)} has allocated {alloc}, reserved {res}, "
               f"NVML {gpu}", fatal=False)
        if None not in (alloc, res, gpu):
            expect(0 < alloc <= res < gpu,
                   f"{tag}: stage {st.get('stage', 0)} allocated {alloc / 2**20:.0f} MiB <= "
                   f"reserved {res / 2**20:.0f} < NVML {gpu / 2**20:.0f}", fatal=False)


def check_out_of_memory():
    """A run that outgrows the GPU fails cleanly: the experiment FAILED with the worker's own CUDA
    out-of-memory message, the daemon still runs the next one, and (check_leftovers, after every
    check) nothing is left on the GPU or in /dev/shm. 64 private workers at batch 4096 need about
    64 x (1.3 GiB of context and cache + 8.8 GiB of activations), far past an 80 GiB H100's."""
    r = shoal("submit", "--device", "cuda", "--dataset", "synthetic", "--workers", "64",
              "--start", "spawn", "--share", "no", "--batch-size", "4096", "--batches", "20",
              "--eval-samples", "0", "--force", "--wait", "--json", check=False)
    e = json.loads(r.stdout)  # a failed run exits 1 and still prints its record
    err, wall = e.get("error", ""), (e.get("result") or {}).get("wall_ms") or 0
    expect(r.returncode == 1 and e["state"] == "FAILED" and "out of memory" in err,
           f"out of memory: {e['state']} in {wall / 1000:.1f} s ({err[:300]})")
    after = submit("--workers", "1", "--start", "spawn", "--share", "no", "--batches", "20",
                   "--eval-samples", "0")
    expect(after["state"] == "SUCCEEDED", f"out of memory: the next run succeeded ({after.get('error', '')})")


CHECKS = {"modes": check_modes, "nvidia-smi": check_against_nvidia_smi,
          "cuda-sync": check_cuda_sync, "model-file": check_model_file,
          "command": check_command, "pipeline": None,  # pipeline: needs the devices
          "oom": check_out_of_memory}


def check_refusals():
    r = shoal("submit", "--device", "cuda", "--start", "fork", "--share", "yes", check=False)
    expect(r.returncode != 0 and "impossible" in r.stderr, "fork + cuda + shared weights refused",
           fatal=False)


def check_leftovers():
    expect(not smi_apps(), "nothing left on the GPU", fatal=False)
    expect(not [f for f in os.listdir("/dev/shm") if f.startswith("shoal.")],
           "nothing in /dev/shm", fatal=False)


def main():
    ap = argparse.ArgumentParser(description="The GPU checks (see this file's docstring).")
    ap.add_argument("--only", default=",".join(CHECKS),
                    help="comma-separated, of " + ", ".join(CHECKS))
    only = ap.parse_args().only.split(",")
    unknown = [c for c in only if c not in CHECKS]
    if unknown:
        ap.error(f"--only: unknown check(s) {', '.join(unknown)}; known: {', '.join(CHECKS)}")
    try:
        node = json.loads(shoal("node", "--json").stdout)
        expect(node["cuda_status"].startswith("ready"), f"node: {node['cuda_status']}")
    except Failed:
        sys.exit("FAIL: no CUDA node to check")
    devices = int(node["cuda_status"].split()[1])  # "ready: N device(s) for LibTorch V"
    attempt(check_refusals)
    for name in only:
        attempt(check_pipeline, devices) if name == "pipeline" else attempt(CHECKS[name])
    attempt(check_leftovers)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s):", *FAILURES, sep="\n  ", flush=True)
        sys.exit(1)
    print("every check passed", flush=True)

if __name__ == "__main__":
    main()
