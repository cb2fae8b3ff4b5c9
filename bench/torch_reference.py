"""What the PyTorch references share: the study's ConvNet, the IDX reader, a sampler of the
summed PSS/RSS of a process and everything below it (read from /proc/PID/smaps_rollup), and one of
their GPU memory and the device's utilisation (NVML)."""
import gzip
import os
import threading
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 1000, kernel_size=5)
        self.conv2 = nn.Conv2d(1000, 20, kernel_size=5)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(320, 50)
        self.fc2 = nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 320)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def load_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    return torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def load_split(directory, split="train"):
    """(images [n, 28, 28] uint8, labels [n] uint8) of an MNIST IDX directory."""
    pick = lambda stem: next(os.path.join(directory, f) for f in sorted(os.listdir(directory))
                             if f.startswith(stem))
    return load_idx(pick(f"{split}-images")), load_idx(pick(f"{split}-labels"))


def children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def descendants(pid):
    """Every process below pid: forkserver workers are the server's children, not ours."""
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def rollup(pid):
    out = {}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, _, rest = line.partition(":")
                if k in ("Rss", "Pss"):
                    out[k] = int(rest.split()[0]) * 1024
    except OSError:
        return None
    return out


class Periodic:
    """A daemon thread calling self._tick() every `every_ms` while in the `with` block."""

    def __init__(self, every_ms):
        self._every = every_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        while not self._stop.is_set():
            self._tick()
            self._stop.wait(self._every)


class PssSampler(Periodic):
    """Peak of the summed PSS and RSS of this process and its descendants, every `every_ms`."""

    def __init__(self, every_ms):
        super().__init__(every_ms)
        self.peak = {"pss": 0, "rss": 0}

    def _tick(self):
        me = os.getpid()
        pss = rss = 0
        for pid in [me] + descendants(me):
            r = rollup(pid)
            if r:
                pss += r.get("Pss", 0)
                rss += r.get("Rss", 0)
        self.peak["pss"] = max(self.peak["pss"], pss)
        self.peak["rss"] = max(self.peak["rss"], rss)


class GpuSampler(Periodic):
    """NVML on one device, every `every_ms`: the peak of the summed GPU memory of this process and
    its descendants (`peak`), each one's peak (`per_pid`), and the device's utilisation with the
    time it was read (`util`: [(unix time, percent)]). NVML only: it never touches CUDA, so a
    parent that forks CUDA workers afterwards may run it."""

    def __init__(self, every_ms, index=0):
        super().__init__(every_ms)
        import pynvml  # only where there is a GPU
        self._nvml = pynvml
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.peak, self.per_pid, self.util = 0, {}, []

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self._nvml.nvmlShutdown()

    def _tick(self):
        me = os.getpid()
        mine = {me, *descendants(me)}
        used = {}
        try:
            for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
                if p.pid in mine:
                    used[p.pid] = used.get(p.pid, 0) + (p.usedGpuMemory or 0)
            util = self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
        except self._nvml.NVMLError:
            return  # a reading missed, not the run
        self.util.append((time.time(), util))
        self.peak = max(self.peak, sum(used.values()))
        for pid, b in used.items():
            self.per_pid[pid] = max(self.per_pid.get(pid, 0), b)

    def utilisation(self, start, end):
        """(mean, peak) percent over the readings taken between start and end (unix times);
        (None, None) without one."""
        xs = [u for t, u in self.util if start <= t <= end]
        return (sum(xs) / len(xs), max(xs)) if xs else (None, None)
