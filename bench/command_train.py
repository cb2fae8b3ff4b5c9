#!/usr/bin/python3
"""A torchrun-style training script for bench/command_vs_plain.py: an MNIST-sized ConvNet on
synthetic data, DistributedDataParallel over Gloo from env:// when WORLD_SIZE > 1, reporting each
step to Shoal (a no-op under another launcher) and timing itself the same way under both.

  RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 command_train.py OUT STEPS BATCH
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client",
                                "python"))
import shoal_report  # noqa: E402


def main():
    out, steps, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 32, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(32, 64, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Flatten(), torch.nn.Linear(64 * 5 * 5, 10))
    if world > 1:
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    g = torch.Generator().manual_seed(rank)
    first = last = None
    for _ in range(steps):
        x, y = torch.randn(batch, 1, 28, 28, generator=g), torch.randint(0, 10, (batch,), generator=g)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        shoal_report.step(samples=batch, loss=loss.item())
        last = time.time()
        first = first or last
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump({"first": first, "last": last, "samples": batch * (steps - 1)}, f)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
