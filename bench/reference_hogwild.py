"""The PyTorch reference: Hogwild training of the study's ConvNet with torch.multiprocessing.

Written the way users run it (the published study's script shape), with the same network, data,
batch size and batches per process as the Shoal run it is compared with. --threads 0 leaves
PyTorch's own thread count (as users run it). --tuning best is PyTorch at its best: glibc's
MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ raised (the interpreter re-executes itself with
them, as glibc reads them at start-up), and with --start forkserver the fork-server preloads torch.
Prints one JSON object: peak PSS/RSS sums over the main process and its children (sampled from
/proc every --sample-ms), samples/s, and time from interpreter start to all processes training.
"""
import time

import os

# Before `import torch` (Shoal's ready time also includes loading LibTorch), and kept across the
# --tuning best re-execution so that it counts too.
T0 = float(os.environ.get("SHOAL_REFERENCE_T0", time.time()))

import argparse
import gzip
import json
import sys
import threading

# Thresholds no step reaches (the first conv's output is 147 MB at batch 64): glibc 2.36 takes them
# as given, so big tensors come from the heap and freed memory stays there for the next step
# instead of going back to the kernel and faulting in again.
TUNED_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}
if "--tuning" in sys.argv and sys.argv[sys.argv.index("--tuning") + 1:][:1] == ["best"]:
    if any(os.environ.get(k) != v for k, v in TUNED_ENV.items()):
        os.execve(sys.executable, [sys.executable] + sys.argv,
                  {**os.environ, **TUNED_ENV, "SHOAL_REFERENCE_T0": repr(T0)})

import torch
import torch.multiprocessing as mp
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


def train(rank, model, images, labels, args, ready, done):
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    if args.share == "no":
        # A private copy. Passing the model itself to a spawned child would quietly move its
        # parameters into shared memory: a "not shared" run that in fact shares.
        state, model = model, Net()
        model.load_state_dict(state)
    torch.manual_seed(args.seed + rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    model.train()
    n = images.shape[0]
    perm = torch.randperm(n)
    pos = 0
    for step in range(args.batches):
        if step == 0:
            ready[rank] = time.time()
        if pos + args.batch_size > n:
            perm, pos = torch.randperm(n), 0
        idx = perm[pos:pos + args.batch_size]
        pos += args.batch_size
        x = images[idx].float().div_(255).sub_(0.1307).div_(0.3081).unsqueeze(1)
        y = labels[idx].long()
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
    done[rank] = time.time()


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--start", choices=["fork", "spawn", "forkserver"], default="fork")
    ap.add_argument("--share", choices=["yes", "no"], default="yes")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="per process; 0: PyTorch's default")
    ap.add_argument("--tuning", choices=["users", "best"], default="users")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--sample-ms", type=int, default=200)
    args = ap.parse_args()

    mp.set_start_method(args.start)
    if args.tuning == "best" and args.start == "forkserver":
        mp.set_forkserver_preload(["torch", "torch.nn", "torch.nn.functional"])
    d = args.dataset
    pick = lambda stem: next(os.path.join(d, f) for f in sorted(os.listdir(d)) if f.startswith(stem))
    images = load_idx(pick("train-images"))
    labels = load_idx(pick("train-labels"))
    torch.manual_seed(args.seed)
    model = Net()
    if args.share == "yes":
        model.share_memory()
    ready = mp.Array("d", args.workers, lock=False)
    done = mp.Array("d", args.workers, lock=False)

    peak = {"pss": 0, "rss": 0}
    stop = threading.Event()

    def sample():
        me = os.getpid()
        while not stop.is_set():
            pss = rss = 0
            for pid in [me] + descendants(me):
                r = rollup(pid)
                if r:
                    pss += r.get("Pss", 0)
                    rss += r.get("Rss", 0)
            peak["pss"] = max(peak["pss"], pss)
            peak["rss"] = max(peak["rss"], rss)
            stop.wait(args.sample_ms / 1000)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    payload = model if args.share == "yes" else {k: v.clone() for k, v in model.state_dict().items()}
    procs = [mp.Process(target=train, args=(r, payload, images, labels, args, ready, done))
             for r in range(args.workers)]
    t_request = time.time()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    stop.set()
    sampler.join()
    ok = all(p.exitcode == 0 for p in procs)
    first, last = min(ready), max(done)
    samples = args.workers * args.batches * args.batch_size
    print(json.dumps({
        "ok": ok,
        "peak_pss_sum_bytes": peak["pss"],
        "peak_rss_sum_bytes": peak["rss"],
        "samples_per_sec": samples / (last - first) if ok else 0,
        "ready_ms": (max(ready) - T0) * 1000,
        "start_ms": (max(ready) - t_request) * 1000,
        "wall_ms": (time.time() - T0) * 1000,
    }))


if __name__ == "__main__":
    main()
