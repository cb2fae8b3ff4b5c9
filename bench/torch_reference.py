"""What the PyTorch references share: the study's ConvNet, the IDX reader, a sampler of the
summed PSS/RSS of a process and everything below it (read from /proc/PID/smaps_rollup), and one of
their GPU memory and the device's utilisation (NVML)."""
import gzip
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from proc_reader import Periodic, descendants, rollup  # noqa: F401 (theirs to import too)


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


def class_pattern_data(shape, n, classes, seed):
    """n samples of `shape` as Shoal's synthetic tensor set draws them: normal noise plus a fixed
    random pattern per class, labels uniform in [0, classes)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    patterns = torch.randn((classes, *shape), generator=g)
    return torch.randn((n, *shape), generator=g) + patterns[labels], labels


def add_hogwild_args(ap, batches, batch_size, threads, sample_ms):
    """The options every torch.multiprocessing reference of a user's model takes, with its
    defaults: workers, start method, steps, threads, tuning, seed, how often it reads itself."""
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--start", choices=["fork", "spawn", "forkserver"], default="fork")
    ap.add_argument("--batches", type=int, default=batches)
    ap.add_argument("--batch-size", type=int, default=batch_size)
    ap.add_argument("--threads", type=int, default=threads,
                    help="per process; 0: PyTorch's default")
    ap.add_argument("--tuning", choices=["users", "best"], default="users")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sample-ms", type=int, default=sample_ms)


def hogwild_steps(rank, model, x, y, args, ready, done, gate, loss_fn=F.cross_entropy,
                  warm_up=0):
    """One torch.multiprocessing Hogwild worker as users write it: SGD lr 0.01 momentum 0.5 on
    its own shuffle of (x, y), args.batches steps of args.batch_size (args.threads intra-op
    threads unless 0, seed args.seed + rank). `warm_up` untimed forward and backward passes on
    the first batch come first, no optimiser step; then every worker waits at `gate` (a Barrier)
    and they start together, as Shoal's workers pass its start gate, so the timed window holds
    no worker's start-up. ready[rank] and done[rank] get the times its timed steps began and
    ended."""
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed + rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    model.train()
    n = x.shape[0]
    first = torch.arange(args.batch_size)
    for _ in range(warm_up):
        loss_fn(model(x[first]), y[first]).backward()
    opt.zero_grad(set_to_none=True)
    gate.wait(timeout=300)  # a worker that died first breaks the gate for the others, not hang them
    perm, pos = torch.randperm(n), 0
    for step in range(args.batches):
        if step == 0:
            ready[rank] = time.time()
        if pos + args.batch_size > n:
            perm, pos = torch.randperm(n), 0
        idx = perm[pos:pos + args.batch_size]
        pos += args.batch_size
        opt.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    done[rank] = time.time()


def run_hogwild(mp, target, model, x, y, args):
    """Starts args.workers processes of `target` (hogwild_steps' signature) through `mp` (a
    start method's context or the module) and
    waits for them, reading this process's tree meanwhile. Returns (every worker exited 0, the
    PssSampler, the ready and done times, when the first was asked for)."""
    ready = mp.Array("d", args.workers, lock=False)
    done = mp.Array("d", args.workers, lock=False)
    gate = mp.Barrier(args.workers)
    procs = [mp.Process(target=target, args=(r, model, x, y, args, ready, done, gate))
             for r in range(args.workers)]
    with PssSampler(args.sample_ms) as sampler:
        t_request = time.time()
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    return all(p.exitcode == 0 for p in procs), sampler, ready, done, t_request


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
