#!/usr/bin/env python3
"""A torchrun-style DDP script on CUDA for bench/gpu_check.py's command check: each rank trains a
small ConvNet on cuda:LOCAL_RANK (of the devices CUDA_VISIBLE_DEVICES leaves it) on synthetic
data, DistributedDataParallel over NCCL where every rank has a GPU of its own, else over Gloo on
the CUDA tensors (two ranks on one GPU: NCCL refuses a device twice), reporting each step to Shoal.

  command_ddp_cuda.py STEPS BATCH        (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_* from the launcher)
"""
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "client",
                                "python"))
import shoal_report  # noqa: E402


def main():
    steps, batch = int(sys.argv[1]), int(sys.argv[2])
    world, local = int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    gpus = torch.cuda.device_count()
    device = torch.device("cuda", local % gpus)
    torch.cuda.set_device(device)
    backend = "nccl" if gpus >= int(os.environ["LOCAL_WORLD_SIZE"]) else "gloo"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(64, 128, 3), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(4), torch.nn.Flatten(),
                                torch.nn.Linear(128 * 16, 10)).to(device)
    if world > 1:
        dist.init_process_group(backend)
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index])
    print(f"rank {os.environ['RANK']}: {device}, backend {backend if world > 1 else '-'}",
          flush=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    g = torch.Generator(device=device).manual_seed(int(os.environ["RANK"]))
    for _ in range(steps):
        x = torch.randn(batch, 3, 64, 64, generator=g, device=device)
        y = torch.randint(0, 10, (batch,), generator=g, device=device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        shoal_report.step(samples=batch, loss=loss.item())
    if world > 1:
        # Both replicas hold the same weights: what DDP promises, checked where it ran.
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        other = flat.clone()
        dist.broadcast(other, 0)
        print(f"rank {os.environ['RANK']}: weights equal rank 0's: {bool(torch.equal(flat, other))}",
              flush=True)
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
