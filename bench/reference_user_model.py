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

--device cuda (bench/user_model_vs_pytorch.py --device cuda): every worker trains on cuda:0 and uploads its own copy of
the data there once. --share yes: the parent moves the module to the device and its tensors reach
the workers through CUDA IPC (torch.multiprocessing's way; not with --start fork); no: each worker
builds its own from a CPU state dict and moves it. --torchvision NAME takes the module from
torchvision.models (NAME(num_classes=--classes)) instead of tests/models. --warm-up N: N untimed
forward and backward passes on the first batch before the start barrier (Shoal's workers run 3).
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

import make_models  # noqa: E402
from torch_reference import (add_hogwild_args, class_pattern_data, hogwild_steps,  # noqa: E402
                             run_hogwild)

MODELS = {"bench_cnn": make_models.BenchCnn, "mlp": make_models.Mlp, "cnn": make_models.Cnn}


def make_module(args):
    if args.torchvision:
        import torchvision
        return getattr(torchvision.models, args.torchvision)(num_classes=args.classes)
    return MODELS[args.model]()


def steps_on_device(rank, payload, x, y, args, ready, done, gate):
    """A worker of --device cuda: its module (shared through CUDA IPC, or built from a CPU state
    dict), its own copy of the data on the device, then hogwild_steps."""
    device = torch.device("cuda:0")
    if isinstance(payload, dict):
        model = make_module(args)
        model.load_state_dict(payload)
        model.to(device)
    else:
        model = payload
    x, y = x.to(device), y.to(device)
    hogwild_steps(rank, model, x, y, args, ready, done, gate, warm_up=args.warm_up)
    torch.cuda.synchronize()  # the last steps done, not queued
    done[rank] = time.time()


def steps_on_cpu(rank, model, x, y, args, ready, done, gate):
    hogwild_steps(rank, model, x, y, args, ready, done, gate, warm_up=args.warm_up)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=sorted(MODELS), default="bench_cnn")
    ap.add_argument("--archive", required=True, help="the .pt Shoal trains: its weights")
    ap.add_argument("--input", default="3,32,32", help="one sample's shape")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--samples", type=int, default=1024)
    ap.add_argument("--torchvision", help="a torchvision.models constructor, e.g. resnet50")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--share", choices=["yes", "no"], default="yes", help="--device cuda only")
    ap.add_argument("--warm-up", type=int, default=0)
    add_hogwild_args(ap, batches=20, batch_size=64, threads=1, sample_ms=200)
    args = ap.parse_args()
    mp.set_start_method(args.start)
    if args.tuning == "best" and args.start == "forkserver":
        mp.set_forkserver_preload(["torch", "torch.nn", "torch.nn.functional"])
    model = make_module(args)
    model.load_state_dict(torch.jit.load(args.archive).state_dict())
    x, y = class_pattern_data([int(d) for d in args.input.split(",")], args.samples, args.classes,
                              args.seed)
    if args.device == "cuda":
        payload = model.to("cuda:0") if args.share == "yes" else model.state_dict()
        target = steps_on_device
    else:
        model.share_memory()
        payload, target = model, steps_on_cpu
    ok, sampler, ready, done, t_request = run_hogwild(mp, target, payload, x, y, args)
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
