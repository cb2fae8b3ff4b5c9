"""The models of bench/zoo_vs_pytorch.py, made now by Debian's PyTorch (random init: nothing is
downloaded): torchvision's resnet50, vit_b_16, mobilenet_v3_large, efficientnet_b0 and densenet121
with 10 classes, scripted as a user scripts them, and tests/models/gpt.py's GPT.

    python3 zoo_models.py OUT_DIR --image 64 --gpt small --seq 64 [--only a,b]

writes OUT_DIR/<name>.pt and OUT_DIR/zoo.json: per model what builds the eager module again
(bench/reference_zoo.py) and what Shoal is given (--input, --classes).
"""
import argparse
import json
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "models"))
import gpt  # noqa: E402

VISION = ("resnet50", "vit_b_16", "mobilenet_v3_large", "efficientnet_b0", "densenet121")


def build(info):
    """The eager module `info` (a zoo.json entry) describes, freshly initialised."""
    if info["kind"] == "tokens":
        return gpt.GPT(info["gpt_config"])
    return getattr(torchvision.models, info["name"])(**info["kwargs"])


def synthetic_samples(info, batch):
    """How many samples Shoal's synthetic set holds (shared/spec/input_spec.cc SyntheticSamples):
    256 MiB of them, at most 1024, at least a batch."""
    per = info["sample_bytes"]
    return max(batch, min(1024, (256 << 20) // max(1, per)))


def describe(name, image, gpt_size, seq):
    if name == "gpt":
        cfg = dict(gpt.GPT.SMALL if gpt_size == "small" else gpt.GPT.TINY)
        cfg["block_size"] = max(cfg["block_size"], seq)  # GPT-2 small: 1024 positions
        return {"name": name, "kind": "tokens", "gpt_config": cfg, "vocab": cfg["vocab"],
                "seq": seq, "classes": cfg["vocab"], "sample_bytes": 8 * seq,
                "input": f"int64[B,{seq}]:{cfg['vocab']}", "gpt_size": gpt_size}
    kwargs = {"num_classes": 10}
    if name == "vit_b_16":
        kwargs["image_size"] = image
    shape = [3, image, image]
    return {"name": name, "kind": "image", "kwargs": kwargs, "classes": 10, "dtype": "float32",
            "sample_shape": shape, "sample_bytes": 4 * 3 * image * image,
            "input": f"float32[B,3,{image},{image}]"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--image", type=int, default=64)
    ap.add_argument("--gpt", choices=["small", "tiny"], default="small")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--only", default=",".join(VISION + ("gpt",)))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    zoo = {}
    for name in args.only.split(","):
        info = describe(name, args.image, args.gpt, args.seq)
        torch.manual_seed(0)
        model = build(info)
        torch.jit.script(model).save(os.path.join(args.out, name + ".pt"))
        info["parameters"] = sum(p.numel() for p in model.parameters())
        info["tensors"] = len(list(model.parameters())) + len(list(model.buffers()))
        zoo[name] = info
        print(f"{name}: {info['parameters'] / 1e6:.1f}M parameters, {info['tensors']} tensors",
              file=sys.stderr)
    with open(os.path.join(args.out, "zoo.json"), "w") as f:
        json.dump(zoo, f, indent=1)


if __name__ == "__main__":
    main()
