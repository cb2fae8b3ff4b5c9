#!/usr/bin/python3
"""Golden values for tests/optimizer_test.cc.

This script produced the checked-in tests/golden/optimizers.json with Debian's PyTorch 1.13
(python3-torch 1.13.1). Rerun it from the repository root with

    /usr/bin/python3 tests/golden/make_optimizer_golden.py

It is deterministic (fixed seed), so rerunning with the same PyTorch rewrites the same file.

Each case runs one torch.optim optimiser over float32 parameters of different shapes for a few
steps with given gradients and records the parameters after every step. The options written
are the ones the optimiser actually ran with (read back from its param group, defaults
included), so the C++ side can build the same optimiser without knowing PyTorch's defaults.
"""

import json
import os

import torch

SEED = 20240613
SHAPES = [[3, 4], [5]]
# Gradient magnitudes change from step to step so that AMSGrad's running maximum, Adagrad's
# accumulator and the momentum buffers all see non-trivial histories.
GRAD_SCALES = [1.0, 2.0, 0.5, 0.25, 1.5]

# case name, torch.optim class, options as passed to it (the rest are PyTorch's defaults).
CASES = [
    ("sgd_plain", "sgd", dict(lr=0.1)),
    ("sgd_momentum_dampening_wd", "sgd",
     dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-2)),
    ("nesterov_momentum_wd", "nesterov", dict(lr=0.05, momentum=0.9, weight_decay=1e-3)),
    ("adagrad_lr_decay_init_acc_wd", "adagrad",
     dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1, weight_decay=1e-2)),
    ("adadelta_defaults", "adadelta", dict()),
    ("adadelta_lr_rho_wd", "adadelta", dict(lr=0.5, rho=0.95, weight_decay=1e-2)),
    ("adam", "adam", dict(lr=1e-2)),
    ("adam_amsgrad_wd", "adam",
     dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-7, weight_decay=1e-2, amsgrad=True)),
    ("adamw_default_wd", "adamw", dict(lr=1e-2)),
    ("rmsprop_plain", "rmsprop", dict(lr=1e-2)),
    ("rmsprop_centered_momentum_wd", "rmsprop",
     dict(lr=1e-2, alpha=0.9, momentum=0.9, centered=True, weight_decay=1e-2)),
]

# The OptimizerConfig fields each optimiser uses, in the order they are written.
FIELDS = {
    "sgd": ["lr", "momentum", "dampening", "weight_decay"],
    "nesterov": ["lr", "momentum", "dampening", "weight_decay"],
    "adagrad": ["lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps"],
    "adadelta": ["lr", "rho", "eps", "weight_decay"],
    "adam": ["lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad"],
    "adamw": ["lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad"],
    "rmsprop": ["lr", "alpha", "eps", "weight_decay", "momentum", "centered"],
}


def make(name, params, options):
    if name == "nesterov":
        return torch.optim.SGD(params, nesterov=True, **options)
    cls = {
        "sgd": torch.optim.SGD,
        "adagrad": torch.optim.Adagrad,
        "adadelta": torch.optim.Adadelta,
        "adam": torch.optim.Adam,
        "adamw": torch.optim.AdamW,
        "rmsprop": torch.optim.RMSprop,
    }[name]
    return cls(params, **options)


def resolved_options(name, optimizer):
    group = dict(optimizer.param_groups[0])
    # Only the plain single-tensor code path is reproduced on the C++ side.
    assert not group.get("maximize", False)
    assert not group.get("foreach")
    assert not group.get("differentiable", False)
    assert not group.get("capturable", False)
    assert group.get("nesterov", False) == (name == "nesterov")
    if "betas" in group:
        group["beta1"], group["beta2"] = group.pop("betas")
    out = {"name": name}
    for field in FIELDS[name]:
        value = group[field]
        out[field] = value if isinstance(value, bool) else float(value)
    return out


def flat(tensor):
    # float32 -> Python float is exact, and json writes the shortest repr that round-trips.
    return tensor.detach().reshape(-1).tolist()


def run_case(case, name, options, gen):
    params = [torch.randn(s, generator=gen, dtype=torch.float32).requires_grad_() for s in SHAPES]
    initial = [flat(p) for p in params]
    optimizer = make(name, params, options)
    steps = []
    for scale in GRAD_SCALES:
        grads = [torch.randn(s, generator=gen, dtype=torch.float32) * scale for s in SHAPES]
        for p, g in zip(params, grads):
            p.grad = g.clone()
        optimizer.step()
        steps.append({"grads": [flat(g) for g in grads], "params": [flat(p) for p in params]})
    return {
        "case": case,
        "options": resolved_options(name, optimizer),
        "shapes": SHAPES,
        "initial": initial,
        "steps": steps,
    }


def dumps(value, indent=""):
    """JSON with objects and lists of lists indented, and lists of numbers kept on one line."""
    inner = indent + " "
    if isinstance(value, dict):
        items = ["%s%s: %s" % (inner, json.dumps(k), dumps(v, inner)) for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + dumps(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(value)


def main():
    gen = torch.Generator().manual_seed(SEED)
    cases = [run_case(case, name, options, gen) for case, name, options in CASES]
    doc = {
        "generator": "tests/golden/make_optimizer_golden.py",
        "torch_version": torch.__version__,
        "seed": SEED,
        "cases": cases,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "optimizers.json")
    with open(path, "w") as f:
        f.write(dumps(doc) + "\n")
    print("wrote %d cases to %s" % (len(cases), path))


if __name__ == "__main__":
    main()
