"""The PyTorch reference for bench/zoo_vs_pytorch.py: torch.multiprocessing Hogwild of one eager
model of the zoo (a torchvision classifier or tests/models/gpt.py's GPT), as a user writes it.

The module is built as bench/zoo_models.py built it (--name, --info: its zoo.json) and takes the
weights of the TorchScript archive Shoal trains, so both sides start from the same numbers; then
model.share_memory(). The data is of the kind Shoal's synthetic tensor set holds and of its
size: for images, normal noise plus a fixed random pattern per class, labels uniform in
[0, classes); for tokens, uniform tokens and next-token targets (Shoal also plants each sample's
label in some of its tokens: the same work a step). SGD lr 0.01 momentum 0.5 (Shoal's defaults), cross-entropy (over every
position for a language model's [B, T, vocab]).

Each worker first takes the same untimed warm-up as a Shoal worker (3 forward and backward passes
on its first batch, no optimiser step: bench/zoo_vs_pytorch.py keeps the two equal), then
--batches timed steps, every worker starting them together (a barrier, as Shoal's start gate).
--tuning users: glibc's defaults and PyTorch's thread count; best: raised malloc thresholds
(bench/tuning.py) with the heap trimmed once the model is shared, --threads per process, torch
and torchvision preloaded in the forkserver. Prints one JSON object: samples/s over the timed
steps (first step started to last step finished, any worker: Shoal's definition), and its own
peak PSS sum (a thread in this program, every --sample-ms, Shoal's sampler's default 200 ms; the
benchmark's figure is read from outside).
"""
import time

import os

T0 = float(os.environ.get("SHOAL_REFERENCE_T0", time.time()))

import argparse  # noqa: E402
import ctypes  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "models"))
from tuning import reexec_if_best  # noqa: E402

reexec_if_best(T0)

import torch  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import zoo_models  # noqa: E402
from torch_reference import (add_hogwild_args, class_pattern_data, hogwild_steps,  # noqa: E402
                             run_hogwild)

WARM_UP_RUNS = 3  # worker/model_file.cc's WarmUpModelFile


def data(info, n, seed):
    if info["kind"] == "tokens":
        x = torch.randint(0, info["vocab"], (n, info["seq"]),
                          generator=torch.Generator().manual_seed(seed))
        return x, torch.roll(x, -1, dims=1)
    x, labels = class_pattern_data(info["sample_shape"], n, info["classes"], seed)
    return x.to(getattr(torch, info["dtype"])), labels


def loss_of(out, y):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))


def train(rank, model, x, y, args, ready, done, gate):
    hogwild_steps(rank, model, x, y, args, ready, done, gate, loss_of, WARM_UP_RUNS)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="bench/zoo_models.py's output directory")
    ap.add_argument("--name", required=True)
    add_hogwild_args(ap, batches=8, batch_size=8, threads=0, sample_ms=200)
    ap.add_argument("--memory-format", choices=["contiguous", "channels_last"],
                    default="contiguous")
    args = ap.parse_args()
    with open(os.path.join(args.models, "zoo.json")) as f:
        info = json.load(f)[args.name]
    mp.set_start_method(args.start)
    if args.tuning == "best" and args.start == "forkserver":
        mp.set_forkserver_preload(["torch", "torch.nn", "torch.nn.functional", "torchvision",
                                   "zoo_models"])
    if args.start == "forkserver" and info["tensors"] + 8 >= 252:
        # The forkserver passes each shared tensor's descriptor (and a few of its own), fewer
        # than 256 a process (multiprocessing.forkserver.MAXFDS_TO_SEND): past that a user must
        # switch strategy.
        mp.set_sharing_strategy("file_system")
    model = zoo_models.build(info)
    # The archive holds non-persistent buffers too (the GPT's causal masks): made again by build.
    # Loaded inline, so that its own copy of the weights is not held for the run.
    missing, _ = model.load_state_dict(
        torch.jit.load(os.path.join(args.models, args.name + ".pt")).state_dict(), strict=False)
    assert not missing, missing
    order = getattr(torch, args.memory_format + "_format" if args.memory_format == "contiguous"
                    else args.memory_format)
    model.to(memory_format=order)  # 4-d weights in that order, as a user converts a model
    model.share_memory()
    x, y = data(info, zoo_models.synthetic_samples(info, args.batch_size), args.seed)
    if x.dim() == 4:
        x = x.contiguous(memory_format=order)
    if args.tuning == "best":
        # What share_memory() and loading freed goes back to the kernel before the workers start
        # (the raised trim threshold would keep it for the run); Shoal's leader does the same.
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    ok, sampler, ready, done, t_request = run_hogwild(mp, train, model, x, y, args)
    samples = args.workers * args.batches * args.batch_size
    print(json.dumps({
        "ok": ok,
        "samples_per_sec": samples / (max(done) - min(ready)) if ok else None,
        "self_peak_pss_sum_bytes": sampler.peak["pss"],
        "ready_ms": (max(ready) - T0) * 1000 if ok else None,
        "sharing_strategy": mp.get_sharing_strategy(),
    }))


if __name__ == "__main__":
    main()
