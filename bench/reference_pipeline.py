"""The PyTorch reference for pipeline (seed 004): AmoebaNet-D in one process, GPipe's schedule.

The same network as Shoal's (torchgpipe's benchmark AmoebaNet-D, written here from the same
genotype and channel plan as shared/kinds/pipeline/amoebanet.cc), the same random 3x224x224 mini-batch split into
`--chunks` micro-batches, every micro-batch forward (under torch.utils.checkpoint per
`--checkpoint`: never, except_last, always), then every backward in reverse order, then RMSprop
with the seed's defaults; threads = the machine's cores (one process, as Shoal's one stage).
With --stages k (> 1) the network is cut by --balance into k partitions run by PyTorch's own
GPipe, torch.distributed.pipeline.sync.Pipe (torchgpipe upstreamed), with the same chunks and
checkpoint mode: on the CPU every partition is on the one device "cpu", so Pipe runs them in one
process, one after another on the schedule's clock (its workers are per device), which is how
PyTorch pipelines on a CPU.
--tuning best raises glibc's thresholds (tuning.py). Prints one JSON object: the mean step time
(every step, as Shoal's figure), the median after the first, and the peak RSS (ru_maxrss).
"""
import time

import os
import sys

T0 = time.time()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tuning import reexec_if_best  # noqa: E402

reexec_if_best(T0)

import argparse  # noqa: E402
import json  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.checkpoint import checkpoint  # noqa: E402

# (input state, operation) pairs, summed two by two; then the states concatenated.
NORMAL = [(1, "conv1x1"), (1, "maxpool3"), (1, "none"), (0, "conv1x7"), (0, "conv1x1"),
          (0, "conv1x7"), (2, "maxpool3"), (2, "none"), (1, "avgpool3"), (5, "conv1x1")]
NORMAL_CONCAT = [0, 3, 4, 6]
REDUCTION = [(0, "maxpool2"), (0, "maxpool3"), (2, "none"), (1, "conv3x3"), (2, "conv1x7"),
             (2, "maxpool3"), (3, "none"), (1, "maxpool2"), (2, "avgpool3"), (3, "conv1x1")]
REDUCTION_CONCAT = [4, 5, 6]


def conv_bn(cin, cout, k=1, stride=1, pad=0):
    return [nn.ReLU(), nn.Conv2d(cin, cout, k, stride, pad, bias=False), nn.BatchNorm2d(cout)]


class Halve(nn.Module):  # the factorized reduce
    def __init__(self, cin, cout):
        super().__init__()
        self.a = nn.Conv2d(cin, cout // 2, 1, 2, bias=False)
        self.b = nn.Conv2d(cin, cout // 2, 1, 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x):
        x = F.relu(x)
        return self.bn(torch.cat([self.a(x), self.b(F.pad(x[:, :, 1:, 1:], (0, 1, 0, 1)))], 1))


def operation(name, c, s):
    q = c // 4
    if name == "none":
        return nn.Identity() if s == 1 else Halve(c, c)
    if name in ("avgpool3", "maxpool3"):  # torchgpipe's max_pool_3x3 is an average pool
        return nn.AvgPool2d(3, s, 1, count_include_pad=False)
    if name == "maxpool2":
        return nn.MaxPool2d(2, s)
    if name == "conv1x1":
        return nn.Sequential(*conv_bn(c, c, 1, s))
    if name == "conv3x3":
        return nn.Sequential(*conv_bn(c, q), *conv_bn(q, q, 3, s, 1), *conv_bn(q, c))
    return nn.Sequential(*conv_bn(c, q), *conv_bn(q, q, (1, 7), (1, s), (0, 3)),
                         *conv_bn(q, q, (7, 1), (s, 1), (3, 0)), *conv_bn(q, c))


class Cell(nn.Module):
    def __init__(self, cpp, cp, c, reduction, reduction_prev):
        super().__init__()
        self.steps, self.concat = (REDUCTION, REDUCTION_CONCAT) if reduction else (NORMAL,
                                                                                   NORMAL_CONCAT)
        self.reduce1 = nn.Sequential(*conv_bn(cp, c))
        self.reduce2 = (Halve(cpp, c) if reduction_prev else
                        nn.Sequential(*conv_bn(cpp, c)) if cpp != c else nn.Identity())
        self.ops = nn.ModuleList(operation(n, c, 2 if reduction and i < 2 else 1)
                                 for i, n in self.steps)

    def forward(self, s):
        s1, s2 = s if isinstance(s, tuple) else (s, s)
        states = [self.reduce1(s1), self.reduce2(s2)]
        for k in range(0, len(self.ops), 2):
            states.append(self.ops[k](states[self.steps[k][0]]) +
                          self.ops[k + 1](states[self.steps[k + 1][0]]))
        return torch.cat([states[i] for i in self.concat], 1), s1


def amoebanet(layers, filters, classes=1000):
    c = filters // 4
    net = [nn.Sequential(nn.ReLU(), nn.Conv2d(3, c, 3, 2, 1, bias=False), nn.BatchNorm2d(c))]
    cpp = cp = c
    red_prev = False

    def cell(reduction):
        nonlocal cpp, cp, c, red_prev
        if reduction:
            c *= 2
        m = Cell(cpp, cp, c, reduction, red_prev)
        cpp, cp, red_prev = cp, c * len(m.concat), reduction
        return m

    net += [cell(True), cell(True)]
    for group in range(3):
        if group:
            net.append(cell(True))
        net += [cell(False) for _ in range(layers // 3)]
    return net, cp


class Head(nn.Module):
    def __init__(self, features, classes):
        super().__init__()
        self.fc = nn.Linear(features, classes)

    def forward(self, s):
        return self.fc(F.avg_pool2d(s[0], 7).flatten(1))


def Step(model, x, y, args):
    """GPipe's schedule in one process: every micro-batch forward, then every backward."""
    losses = []
    for k, (xs, ys) in enumerate(zip(x.chunk(args.chunks), y.chunk(args.chunks))):
        keep = args.checkpoint == "never" or (args.checkpoint == "except_last" and
                                               k == args.chunks - 1)
        out = model(xs) if keep else checkpoint(model, xs, use_reentrant=False)
        losses.append(F.cross_entropy(out, ys, reduction="sum") / args.batch_size)
    for loss in reversed(losses):
        loss.backward()


class TupleOut(nn.Module):
    """Pipe passes tensors or tuples of tensors between partitions: a cell's (state, previous)."""

    def __init__(self, seq):
        super().__init__()
        self.seq = seq

    def forward(self, *x):
        return self.seq(x[0] if len(x) == 1 else tuple(x))


def Partitioned(layers, args):
    from torch.distributed import rpc
    from torch.distributed.pipeline.sync import Pipe
    balance = [int(b) for b in args.balance.split(",")] if args.balance else None
    if not balance or len(balance) != args.stages or sum(balance) != len(layers):
        sys.exit(f"--balance must give {args.stages} stages summing to {len(layers)} layers")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29600 + os.getpid() % 300))
    rpc.init_rpc("reference", rank=0, world_size=1)  # Pipe needs the RPC framework, one process
    parts, at = [], 0
    for b in balance:
        parts.append(TupleOut(nn.Sequential(*layers[at:at + b])))
        at += b
    return Pipe(nn.Sequential(*parts), chunks=args.chunks, checkpoint=args.checkpoint)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=18)
    ap.add_argument("--filters", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("--checkpoint", default="except_last")
    ap.add_argument("--batches", type=int, default=3)
    ap.add_argument("--tuning", default="users")
    ap.add_argument("--stages", type=int, default=1)
    ap.add_argument("--balance", default="", help="layers per stage, e.g. 12,12")
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count())
    torch.manual_seed(1)
    layers, features = amoebanet(args.layers, args.filters)
    layers.append(Head(features, 1000))
    model = nn.Sequential(*layers)
    pipe = Partitioned(layers, args) if args.stages > 1 else None
    opt = torch.optim.RMSprop(model.parameters(), lr=0.01, alpha=0.99, eps=1e-8)
    params = sum(p.numel() for p in model.parameters())
    steps = []
    for step in range(args.batches):
        x = torch.rand(args.batch_size, 3, 224, 224)
        y = torch.randint(0, 1000, (args.batch_size,))
        t = time.perf_counter()
        opt.zero_grad()
        if pipe is not None:
            F.cross_entropy(pipe(x).local_value(), y).backward()
        else:
            Step(model, x, y, args)
        opt.step()
        steps.append((time.perf_counter() - t) * 1e3)
    print(json.dumps({"params": params, "step_ms": statistics.mean(steps),
                      "median_after_first_ms": statistics.median(steps[1:] or steps),
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "threads": torch.get_num_threads(), "tuning": args.tuning,
                      "stages": args.stages}))
    if pipe is not None:
        from torch.distributed import rpc
        rpc.shutdown()


if __name__ == "__main__":
    main()
