"""The PyTorch reference for a user's model: torch.multiprocessing Hogwild of the eager module,
as a user would write it, on the same kind of data Shoal makes for a model file.

The module is the class in tests/models/make_models.py (--model, e.g. bench_cnn) with the weights
of the TorchScript archive Shoal trains (--archive), so both start from the same numbers. The
data: --samples inputs of --input's shape (one float input, B first), normal noise plus a fixed
random pattern per class, labels uniform in [0, --classes) -- what Shoal's synthetic tensor set
holds. SGD lr 0.01 momentum 0.5, cross-entropy. --tuning and --threads as in
reference_hogwild.py (users: glibc's defaults and PyTorch's thread count; best: raised malloc
thresholds, one thread per process, torch preloaded in the forkserver). Prints one JSON object with
the same figures as reference_hogwild.py (peak PSS/RSS sums, samples/s, ready_ms, start_ms).
"""
import time

import os

T0 = float(os.environ.get("SHOAL_REFERENCE_T0", time.time()))

import argparse
import json
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "models"))
from tuning import reexec_if_best  # noqa: E402

reexec_if_best(T0)

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import make_models  # noqa: E402
from torch_reference import PssSampler  # noqa: E402

MODELS = {"bench_cnn": make_models.BenchCnn, "mlp": make_models.Mlp, "cnn": make_models.Cnn}


def data(shape, n, classes, seed):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (n,), generator=g)
    patterns = torch.randn((classes, *shape), generator=g)
    return torch.randn((n, *shape), generator=g) + patterns[labels], labels


def train(rank, model, x, y, args, ready, done):
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed + rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    model.train()
    n = x.shape[0]
    perm, pos = torch.randperm(n), 0
    for step in range(args.batches):
        if step == 0:
            ready[rank] = time.time()
        if pos + args.batch_size > n:
            perm, pos = torch.randperm(n), 0
        idx = perm[pos:pos + args.batch_size]
        pos += args.batch_size
        opt.zero_grad()
        F.cross_entropy(model(x[idx]), y[idx]).backward()
        opt.step()
    done[rank] = time.time()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), default="bench_cnn")
    ap.add_argument("--archive", required=True, help="the .pt Shoal trains: its weights")
    ap.add_argument("--input", default="3,32,32", help="one sample's shape")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--start", choices=["fork", "spawn", "forkserver"], default="fork")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="per process; 0: PyTorch's default")
    ap.add_argument("--tuning", choices=["users", "best"], default="users")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sample-ms", type=int, default=200)
    args = ap.parse_args()
    mp.set_start_method(args.start)
    if args.tuning == "best" and args.start == "forkserver":
        mp.set_forkserver_preload(["torch", "torch.nn", "torch.nn.functional"])
    model = MODELS[args.model]()
    model.load_state_dict(torch.jit.load(args.archive).state_dict())
    model.share_memory()
    x, y = data([int(d) for d in args.input.split(",")], args.samples, args.classes, args.seed)
    ready = mp.Array("d", args.workers, lock=False)
    done = mp.Array("d", args.workers, lock=False)
    procs = [mp.Process(target=train, args=(r, model, x, y, args, ready, done))
             for r in range(args.workers)]
    with PssSampler(args.sample_ms) as sampler:
        t_request = time.time()
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    ok = all(p.exitcode == 0 for p in procs)
    samples = args.workers * args.batches * args.batch_size
    print(json.dumps({
        "ok": ok,
        "peak_pss_sum_bytes": sampler.peak["pss"],
        "peak_rss_sum_bytes": sampler.peak["rss"],
        "samples_per_sec": samples / (max(done) - min(ready)) if ok else 0,
        "ready_ms": (max(ready) - T0) * 1000,
        "start_ms": (max(ready) - t_request) * 1000,
    }))


if __name__ == "__main__":
    main()
