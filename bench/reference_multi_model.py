"""The PyTorch reference for multi_model: the original benchmark-pytorch-mmodel loop (run.py) on
the CPU, one variant after the other in one process, as the original runs them.

Prints one JSON object: per variant its phase times summed over the iterations (seconds), the
parameter count and the whole variant's wall time.
  reference_multi_model.py --models N --iterations I [--batch 32] [--threads 1 (0: PyTorch's own)]
"""
import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Stacked(nn.Module):
    def __init__(self, n, make):
        super().__init__()
        self.parts = nn.ModuleList([make() for _ in range(n)])

    def forward(self, x):
        return torch.stack([m(x[i]) for i, m in enumerate(self.parts)])


def variant(name, n, b):
    if name == "linear":
        return nn.Linear(256, 512), (b, 256), (b, 512)
    if name == "conv1d":
        return nn.Conv1d(256, 512, 1), (b, 256, 1), (b, 512, 1)
    if name == "mlinear":
        return Stacked(n, lambda: nn.Linear(256, 512)), (n, b, 256), (n, b, 512)
    if name == "mconv1d":
        return Stacked(n, lambda: nn.Conv1d(256, 512, 1)), (n, b, 256, 1), (n, b, 512, 1)
    return nn.Conv1d(n * 256, n * 512, 1, groups=n), (b, n * 256, 1), (b, n * 512, 1)


def run(name, n, args):
    torch.manual_seed(args.seed)
    t_all = time.perf_counter()
    model, xs, ys = variant(name, n, args.batch)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    define = time.perf_counter() - t_all
    phases = dict(data=0.0, zero_grad=0.0, forward=0.0, backward=0.0, optim=0.0)
    for _ in range(args.iterations):
        t0 = time.perf_counter()
        x, y = torch.rand(xs), torch.rand(ys)
        t1 = time.perf_counter()
        opt.zero_grad()
        t2 = time.perf_counter()
        out = model(x)
        t3 = time.perf_counter()
        F.mse_loss(out, y).backward()
        t4 = time.perf_counter()
        opt.step()
        t5 = time.perf_counter()
        for k, a, b in (("data", t0, t1), ("zero_grad", t1, t2), ("forward", t2, t3),
                        ("backward", t3, t4), ("optim", t4, t5)):
            phases[k] += b - a
    return dict(variant=name, define_s=define, total_s=time.perf_counter() - t_all,
                parameters=sum(p.numel() for p in model.parameters()), **phases)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=114514)
    args = ap.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    names = ["linear", "conv1d"] if args.models == 1 else ["mlinear", "mconv1d", "gconv1d"]
    print(json.dumps({"variants": [run(n, args.models, args) for n in names],
                      "threads": torch.get_num_threads(), "batch": args.batch}))


if __name__ == "__main__":
    main()
