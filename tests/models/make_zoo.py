"""Makes the models people really train, at sizes the CI machine can step, for
tests/zoo_e2e_test.cc: torchvision's classifiers scripted as a user would script them (random
init; nothing is downloaded), one in bfloat16, and a Conv3d net (rank-5 weights).
python3 make_zoo.py OUT_DIR writes OUT_DIR/<name>.pt and OUT_DIR/zoo.json, which says what each
holds (tensors, bytes, ranks, dtypes) for the test to check Shoal's figures against."""
import json
import sys

import torch
import torch.nn as nn
import torchvision


class Clip3d(nn.Module):
    """A video classifier's shape: Conv3d (weights of rank 5), BatchNorm3d, a linear head."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv3d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm3d(8)
        self.conv2 = nn.Conv3d(8, 16, 3, padding=1, stride=2)
        self.bn2 = nn.BatchNorm3d(16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean((2, 3, 4)))


def describe(m):
    params = list(m.parameters())
    buffers = list(m.buffers())
    return {
        "parameters": len(params),
        "buffers": len(buffers),
        "parameter_bytes": sum(p.numel() * p.element_size() for p in params),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in buffers),
        "max_rank": max(p.dim() for p in params),
        "dtypes": sorted({str(p.dtype) for p in params}),
    }


def main(out):
    torch.manual_seed(0)
    models = {
        "densenet121": torchvision.models.densenet121(num_classes=10),
        "efficientnet_b0": torchvision.models.efficientnet_b0(num_classes=10),
        "mobilenet_v3_small_bf16": torchvision.models.mobilenet_v3_small(num_classes=10).to(
            torch.bfloat16),
        "clip3d": Clip3d(),
    }
    info = {}
    for name, m in models.items():
        torch.jit.script(m).save(f"{out}/{name}.pt")
        info[name] = describe(m)
    with open(f"{out}/zoo.json", "w") as f:
        json.dump(info, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
