#!/usr/bin/env python3
"""The GPU checks, run on a GPU node by deploy/gpu-node.sh (nothing here can run without one):

    deploy/gpu-node.sh /usr/bin/env python3 bench/gpu_check.py

Every start method and sharing mode trains on CUDA and must succeed; shared weights must end as
one copy (every worker's fingerprint is the leader's buffer's), private ones as several; fork with
shared weights is refused; Shoal's peak GPU memory, summed and per process, is checked against
nvidia-smi read beside it (2%), and each worker's torch.cuda allocator peaks against its NVML
figure; --cuda-sync step trains and reports no phase split;
pipeline stages on CUDA (activations through CUDA IPC slots) train to the CPU's loss for the same
configuration (within 1e-3: run it with NVIDIA_TF32_OVERRIDE=0 in shoald's environment, as
bench/gpu_session.sh does; PyTorch's default TF32 convolutions put a 2-stage AmoebaNet's first
loss 0.6% off on an H100) and report each stage's CUDA allocator figures, on the devices cuda_devices names (and
across devices where the node has two); nothing is left on the GPU or in /dev/shm. Exits
non-zero on the first failure."""
import json
import os
import shlex
import subprocess
import sys
import threading
import time

SHOAL = shlex.split(os.environ["SHOAL"])


def shoal(*args, check=True):
    r = subprocess.run(SHOAL + list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"FAIL: shoal {' '.join(args)}: {r.stderr.strip()}")
    return r


def submit(*args):
    return json.loads(shoal("submit", "--device", "cuda", "--dataset", "synthetic", *args,
                            "--wait", "--json").stdout)


def expect(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        sys.exit(1)


def smi_apps():
    """{pid: MiB} of compute processes, as nvidia-smi reads them (independently of Shoal)."""
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True).stdout
    apps = {}
    for line in out.splitlines():
        pid, mib = [x.strip() for x in line.split(",")]
        apps[int(pid)] = int(mib)
    return apps


def mib(b):
    return "?" if b is None else f"{b / 2**20:.0f}"


def check_modes():
    for start, share in [("spawn", "yes"), ("spawn", "no"), ("forkserver", "yes"), ("fork", "no")]:
        e = submit("--workers", "2", "--start", start, "--share", share, "--batches", "100",
                   "--eval-samples", "500")
        r = e["result"]
        tag = f"{start} share {share}"
        expect(e["state"] == "SUCCEEDED", f"{tag}: succeeded ({e.get('error', '')})")
        expect((r.get("peak_gpu_memory_bytes") or 0) > 0,
               f"{tag}: GPU memory measured ({r.get('gpu_status', '')}, {r.get('gpu_reads')} reads)")
        expect(r.get("gpu_util_mean_percent") is not None, f"{tag}: GPU utilisation measured")
        expect((r.get("test_accuracy") or 0) > 0.5, f"{tag}: learnt (accuracy {r.get('test_accuracy')})")
        sums = {p["weights_checksum"] for p in e["processes"] if p["role"] == "worker"}
        devices = [p.get("cuda_device") for p in e["processes"] if p["role"] == "worker"]
        expect(devices == [0, 0], f"{tag}: workers on device 0 ({devices})")
        if share == "yes":
            expect(sums == {r["final_shared_checksum"]}, f"{tag}: one shared copy")
        else:
            expect(len(sums) == 2, f"{tag}: two private copies")


def check_against_nvidia_smi():
    """Shoal's NVML figures against nvidia-smi polled beside them: the peak sum, and each
    process's own peak (a worker's GPU memory is flat once it trains, so the two peaks are
    readings of the same moment) within 2%; each worker's CUDA allocator peaks (what
    torch.cuda.max_memory_allocated/_reserved read in it) under its NVML figure, the rest being
    its CUDA context and what the driver holds outside LibTorch."""
    seen = {"peak": 0, "pids": {}}
    done = threading.Event()

    def poll():
        while not done.is_set():
            apps = smi_apps()
            seen["peak"] = max(seen["peak"], sum(apps.values()))
            for pid, mib in apps.items():
                seen["pids"][pid] = max(seen["pids"].get(pid, 0), mib)
            time.sleep(0.1)

    t = threading.Thread(target=poll)
    t.start()
    e = submit("--workers", "4", "--start", "spawn", "--share", "yes", "--batches", "600",
               "--eval-samples", "0", "--sample-interval-ms", "100")
    done.set()
    t.join()
    shoal_mib = e["result"]["peak_gpu_memory_bytes"] / 2**20
    ratio = shoal_mib / max(1, seen["peak"])
    expect(0.98 <= ratio <= 1.02,
           f"peak GPU memory: Shoal {shoal_mib:.0f} MiB, nvidia-smi {seen['peak']} MiB ({ratio:.3f})")
    for p in e["processes"]:
        tag = f"{p['role']} {p['index']} (pid {p['pid']})"
        mine, smi = p.get("peak_gpu_memory_bytes"), seen["pids"].get(p["pid"])
        expect(mine is not None and smi is not None and abs(mine / 2**20 / smi - 1) <= 0.02,
               f"{tag}: Shoal {mib(mine)} MiB, nvidia-smi {smi} MiB")
        if p["role"] != "worker":
            continue
        alloc, res = p.get("peak_cuda_allocated_bytes"), p.get("peak_cuda_reserved_bytes")
        expect(alloc is not None and res is not None and 0 < alloc <= res < mine,
               f"{tag}: torch.cuda allocated {mib(alloc)} MiB <= reserved {mib(res)} MiB < NVML "
               f"{mib(mine)} MiB (context and driver: {mib(mine - (res or 0))} MiB)")


def check_cuda_sync_step():
    """cuda_sync step: the device is waited for once a step; it trains as phases does, and the
    phase split it did not time is absent, not 0."""
    runs = {}
    for sync in ("phases", "step"):
        e = submit("--workers", "2", "--start", "spawn", "--share", "no", "--batches", "300",
                   "--eval-samples", "500", "--cuda-sync", sync)
        r = e["result"]
        expect(e["state"] == "SUCCEEDED" and (r.get("test_accuracy") or 0) > 0.5,
               f"cuda_sync {sync}: succeeded and learnt ({e.get('error', '')}, "
               f"{r.get('samples_per_sec') or 0:.0f} samples/s)")
        runs[sync] = r
    split = ("data_ms", "forward_ms", "backward_ms", "optimizer_ms")  # absent: null in JSON
    expect(all(runs["phases"].get(k) is not None for k in split)
           and all(runs["step"].get(k) is None for k in split),
           "cuda_sync step: no phase split, phases: one")


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
    expect(got is not None and abs(got - want) <= 1e-3 * abs(want),
           f"{tag}: loss of its one step {got} (CPU {want})")


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
        e = submit(*base, *shape, "--start", "spawn", "--cuda-devices", listed)
        check_pipeline_run(e, f"pipeline across devices {listed}", want, devices)


def check_pipeline(devices):
    """pipeline on CUDA: a stage per process, activations and gradients through CUDA IPC slots.
    Each configuration's first loss must match the same configuration on the CPU (BatchNorm
    normalises per micro-batch, so the reference needs the same chunks)."""
    base = ["--kind", "pipeline", "--layers", "18", "--filters", "64", "--batch-size", "8",
            "--batches", "1", "--sample-interval-ms", "50"]  # NVML must see short-lived stages
    for stages, chunks, ckpt in ((2, 4, "except_last"), (4, 8, "always")):
        shape = ["--stages", str(stages), "--chunks", str(chunks), "--checkpoint", ckpt]
        cpu = json.loads(shoal("submit", "--dataset", "synthetic", *base, *shape, "--wait",
                               "--json").stdout)
        expect(cpu["state"] == "SUCCEEDED", f"pipeline {shape} on the CPU ({cpu.get('error')})")
        want = cpu["result"]["last_loss"]
        for start in ("spawn", "forkserver", "fork"):
            e = submit(*base, *shape, "--start", start)
            tag = f"pipeline {start} {stages} stages {chunks} chunks {ckpt}"
            check_pipeline_run(e, tag, want, devices)
            for st in e["result"]["pipeline"]["stage"]:
                alloc, res, gpu = (st.get(k) for k in ("peak_allocated_bytes",
                                                       "peak_reserved_bytes",
                                                       "peak_gpu_memory_bytes"))
                expect(None not in (alloc, res, gpu),
                       f"{tag}: stage {st.get('stage', 0)} has allocated {alloc}, reserved {res}, "
                       f"NVML {gpu}")
                expect(0 < alloc <= res < gpu,
                       f"{tag}: stage {st.get('stage', 0)} allocated {alloc / 2**20:.0f} MiB <= "
                       f"reserved {res / 2**20:.0f} < NVML {gpu / 2**20:.0f}")
        if stages == 2:
            check_pipeline_devices(base, shape, want, devices)


def main():
    node = json.loads(shoal("node", "--json").stdout)
    expect(node["cuda_status"].startswith("ready"), f"node: {node['cuda_status']}")
    devices = int(node["cuda_status"].split()[1])  # "ready: N device(s) for LibTorch V"
    r = shoal("submit", "--device", "cuda", "--start", "fork", "--share", "yes", check=False)
    expect(r.returncode != 0 and "impossible" in r.stderr, "fork + cuda + shared weights refused")
    check_modes()
    check_against_nvidia_smi()
    check_cuda_sync_step()
    check_pipeline(devices)
    expect(not smi_apps(), "nothing left on the GPU")
    expect(not [f for f in os.listdir("/dev/shm") if f.startswith("shoal.")], "nothing in /dev/shm")


if __name__ == "__main__":
    main()
