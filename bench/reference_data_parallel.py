"""The PyTorch reference for data_parallel: DistributedDataParallel on Gloo, as users run it.

k processes (torch.multiprocessing.spawn) meet through init_process_group("gloo") on loopback, wrap
the same network in DistributedDataParallel (default buckets: 25 MiB, a small first one) and train
`--batches` steps of `--batch-per-worker` synthetic samples each (the shapes of the network's data:
1x28x28 for mnist_convnet, 3x32x32 for resnet18_cifar), SGD lr 0.01 momentum 0.5, nll_loss, with
--threads each (0: PyTorch's own choice, as users run it; bench/data_parallel_vs_pytorch.py gives
its best tuning floor(cores / k), Shoal's default). --tuning best raises glibc's thresholds
(tuning.py). Prints one JSON object: samples/s over the training window (first step of the first
rank to the last step of any, as Shoal measures it) and the mean step time.
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
import socket  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from torch_reference import Net  # noqa: E402


class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


class ResNet18Cifar(nn.Module):
    """kuangliu/pytorch-cifar's ResNet-18: 11,173,962 parameters, as Shoal's resnet18_cifar."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for cout in (64, 128, 256, 512):
            layers += [Block(cin, cout, 1 if cout == 64 else 2), Block(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.fc = nn.Linear(512, 10)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.avg_pool2d(self.layers(x), 4).flatten(1)
        return F.log_softmax(self.fc(x), dim=1)


def make(model):
    return (Net(), (1, 28, 28)) if model == "mnist_convnet" else (ResNet18Cifar(), (3, 32, 32))


def train(rank, args, port, times, threads):
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    threads[rank] = torch.get_num_threads()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.workers)
    torch.manual_seed(args.seed)
    net, shape = make(args.model)
    model = nn.parallel.DistributedDataParallel(net)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    gen = torch.Generator().manual_seed(args.seed + rank)
    images = torch.randint(0, 256, (1024, *shape), dtype=torch.uint8, generator=gen)
    labels = torch.randint(0, 10, (1024,), generator=gen)
    dist.barrier()
    start = time.time()
    for step in range(args.batches):
        idx = torch.randint(0, 1024, (args.batch_per_worker,), generator=gen)
        x = images[idx].float().div_(255).sub_(0.1307).div_(0.3081)
        optimizer.zero_grad()
        loss = F.nll_loss(model(x), labels[idx])
        loss.backward()
        optimizer.step()
    times[rank] = (start, time.time())
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mnist_convnet", "resnet18_cifar"], default="mnist_convnet")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-per-worker", type=int, default=32)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--tuning", choices=["users", "best"], default="users")
    ap.add_argument("--threads", type=int, default=0, help="per process; 0: PyTorch's own")
    args = ap.parse_args()
    manager = mp.Manager()
    times, threads = manager.dict(), manager.dict()
    mp.spawn(train, args=(args, free_port(), times, threads), nprocs=args.workers, join=True)
    first = min(t[0] for t in times.values())
    last = max(t[1] for t in times.values())
    samples = args.workers * args.batch_per_worker * args.batches
    print(json.dumps({"samples_per_sec": samples / (last - first),
                      "step_ms": 1000 * (last - first) / args.batches,
                      "workers": args.workers, "batch_per_worker": args.batch_per_worker,
                      "threads": threads[0]}))


if __name__ == "__main__":
    main()
