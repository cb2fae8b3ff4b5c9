"""The PyTorch reference: Hogwild training of the study's ConvNet with torch.multiprocessing.

Written the way users run it (the published study's script shape), with the same network, data,
batch size and batches per process as the Shoal run it is compared with. --threads 0 leaves
PyTorch's own thread count (as users run it). --tuning best is PyTorch at its best: glibc's
MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ raised (the interpreter re-executes itself with
them, as glibc reads them at start-up), and with --start forkserver the forkserver preloads torch.
Prints one JSON object: peak PSS/RSS sums over the main process and its children (sampled from
/proc every --sample-ms), samples/s, and time from interpreter start to all processes training.
Each worker takes --warm-up untimed passes (default none, as Shoal's built-in models: see
WARM_UP), then waits at a barrier so that all start their timed steps together (Shoal's start
gate); samples/s runs from the first timed step started to the last finished.

--device cuda trains on cuda:0: shared weights are moved there by the parent and reach the workers
through CUDA IPC (impossible with --start fork: the parent has CUDA); private ones go as a CPU
state dict that each worker loads and moves (so a forked child is the first to touch CUDA). Each
worker copies the images to the device once and batches there. Adds NVML's figures (sampled every
--sample-ms): peak GPU memory summed over this process and its children, each one's peak, the
device's mean and peak utilisation while they train, and PyTorch's own max reserved (no context).
--dataset synthetic: 6000 random images and labels (seeded by --seed) instead of IDX files.
"""
import time

import os

# Before `import torch` (Shoal's ready time also includes loading LibTorch), and kept across the
# --tuning best re-execution so that it counts too.
T0 = float(os.environ.get("SHOAL_REFERENCE_T0", time.time()))

import argparse
import contextlib
import faulthandler
import json
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tuning import reexec_if_best  # noqa: E402

reexec_if_best(T0)

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from nvml import GpuSampler  # noqa: E402
from torch_reference import Net, PssSampler, load_split  # noqa: E402


# Shoal's built-in hogwild kind runs no warm-up pass: only a model file's workers do
# (worker/image/image_kind.cc calls WarmUpModelFile, kWarmUpRuns = 3, for --model-file alone);
# a built-in model's workers go straight from their start gate (PassStartGate) to their timed
# steps, and its samples/s counts every step from the first. So this reference defaults to no
# warm-up either: both sides drop the same number of first steps from the timing (none), and the
# first, cold step (Shoal's planned allocator traces its plan in it) counts on both. --warm-up N
# is there for a comparison that gives both sides N.
WARM_UP = 0


def train(rank, model, images, labels, args, ready, done, reserved, gate):
    if args.stack_dump_s > 0:  # where a hung worker is, on stderr (the parent's dumps its own)
        faulthandler.dump_traceback_later(args.stack_dump_s, exit=False)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda:0" if args.device == "cuda" else "cpu")
    if args.share == "no":
        # A private copy. Passing the model itself to a spawned child would quietly move its
        # parameters into shared memory: a "not shared" run that in fact shares.
        state, model = model, Net()
        model.load_state_dict(state)
        model.to(device)
    images, labels = images.to(device), labels.to(device)  # once, as uint8
    torch.manual_seed(args.seed + rank)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    model.train()
    n = images.shape[0]
    batch = lambda idx: (images[idx].float().div_(255).sub_(0.1307).div_(0.3081).unsqueeze(1),
                         labels[idx].long())
    if args.warm_up > 0:  # untimed forward and backward passes on the first batch, no update
        x, y = batch(torch.arange(min(args.batch_size, n), device=device))
        for _ in range(args.warm_up):
            F.nll_loss(model(x), y).backward()
        optimizer.zero_grad(set_to_none=True)
        if args.device == "cuda":
            torch.cuda.synchronize()
    # Every worker starts its timed steps together, as Shoal's pass its start gate: the timed
    # window holds no worker's start-up.
    gate.wait(timeout=300)  # a worker that died first breaks the gate for the others, not hang them
    perm = torch.randperm(n, device=device)
    pos = 0
    for step in range(args.batches):
        if step == 0:
            ready[rank] = time.time()
        if pos + args.batch_size > n:
            perm, pos = torch.randperm(n, device=device), 0
        x, y = batch(perm[pos:pos + args.batch_size])
        pos += args.batch_size
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        optimizer.step()
    if args.device == "cuda":
        torch.cuda.synchronize()
    done[rank] = time.time()
    if args.device == "cuda":
        reserved[rank] = torch.cuda.max_memory_reserved()


def synthetic(seed, n=6000):
    """n random 28x28 uint8 images and labels 0..9."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 256, (n, 28, 28), dtype=torch.uint8, generator=g),
            torch.randint(0, 10, (n,), dtype=torch.uint8, generator=g))


def gpu_figures(gpu, first, last, reserved):
    mean, peak = gpu.utilisation(first, last)
    # The workers are the largest processes (a shared run's parent holds only the weights).
    workers = sorted(gpu.per_pid.values())[-len(reserved):] if gpu.per_pid else []
    context = ((sum(workers) - sum(reserved)) / len(workers)
               if len(workers) == len(reserved) and all(reserved) else None)
    return {
        "worker_context_bytes": context,  # NVML - torch.cuda.max_memory_reserved, per worker
        "peak_gpu_memory_bytes": gpu.peak,
        "gpu_memory_per_process_bytes": sorted(gpu.per_pid.values()),
        "gpu_util_mean_percent": mean,
        "gpu_util_peak_percent": peak,
        "torch_max_reserved_bytes": sum(reserved),
    }


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
    ap.add_argument("--dataset", default="/usr/share/datasets/fashion-mnist",
                    help="an MNIST IDX directory, or synthetic")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--sample-ms", type=int, default=200)
    ap.add_argument("--warm-up", type=int, default=WARM_UP,
                    help="untimed forward and backward passes a worker before the start barrier "
                         "(default: Shoal's for its built-in models, none)")
    ap.add_argument("--stack-dump-s", type=float, default=0,
                    help="print every thread's Python stack to stderr after this long (0: never)")
    args = ap.parse_args()
    if args.device == "cuda" and args.start == "fork" and args.share == "yes":
        sys.exit("reference_hogwild.py: --device cuda --start fork --share yes is impossible: the "
                 "shared weights must be on CUDA in the parent, and a forked child cannot use CUDA "
                 "initialised before the fork (use spawn or forkserver, or --share no)")

    mp.set_start_method(args.start)
    if args.tuning == "best" and args.start == "forkserver":
        mp.set_forkserver_preload(["torch", "torch.nn", "torch.nn.functional"])
    images, labels = synthetic(args.seed) if args.dataset == "synthetic" else load_split(args.dataset)
    torch.manual_seed(args.seed)
    model = Net()
    if args.share == "yes" and args.device == "cuda":
        model.to("cuda:0")  # its tensors go to the workers through CUDA IPC
    elif args.share == "yes":
        model.share_memory()
    ready = mp.Array("d", args.workers, lock=False)
    done = mp.Array("d", args.workers, lock=False)
    reserved = mp.Array("q", args.workers, lock=False)  # torch.cuda.max_memory_reserved()
    gate = mp.Barrier(args.workers)

    # share no: a CPU state dict, so that the parent stays off CUDA (fork) and each worker moves
    # its own copy to the device.
    payload = model if args.share == "yes" else {k: v.clone() for k, v in model.state_dict().items()}
    procs = [mp.Process(target=train,
                        args=(r, payload, images, labels, args, ready, done, reserved, gate))
             for r in range(args.workers)]
    # fork on CUDA: the children are forked before the samplers' threads and NVML exist in this
    # process (a thread holding a lock at the fork leaves it held forever in the child). On an
    # H100, fork + private with 16 workers once printed nothing within 40 s with them running;
    # whether this was why is not yet known (untried on a GPU since).
    fork_first = args.device == "cuda" and args.start == "fork"
    t_request = time.time()
    if fork_first:
        for p in procs:
            p.start()
    gpu_sampler = GpuSampler(args.sample_ms) if args.device == "cuda" else contextlib.nullcontext()
    with PssSampler(args.sample_ms) as sampler, gpu_sampler as gpu:
        if not fork_first:
            t_request = time.time()
            for p in procs:
                p.start()
        # Armed only now: a forked child inherits an armed timer's state but not its thread, and
        # its own dump_traceback_later then waits for that thread forever.
        if args.stack_dump_s > 0:
            faulthandler.dump_traceback_later(args.stack_dump_s, exit=False)
        for p in procs:
            p.join()
        faulthandler.cancel_dump_traceback_later()
    peak = sampler.peak
    ok = all(p.exitcode == 0 for p in procs)
    first, last = min(ready), max(done)
    samples = args.workers * args.batches * args.batch_size
    out = {
        "ok": ok,
        "peak_pss_sum_bytes": peak["pss"],
        "peak_rss_sum_bytes": peak["rss"],
        "samples_per_sec": samples / (last - first) if ok else 0,
        "ready_ms": (max(ready) - T0) * 1000,
        "start_ms": (max(ready) - t_request) * 1000,
        "wall_ms": (time.time() - T0) * 1000,
    }
    if args.device == "cuda":
        out.update(gpu_figures(gpu, first, last, reserved))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
