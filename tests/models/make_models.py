"""Makes the user models (and a data set) the tests train, at test time, with the PyTorch beside the tests
(Debian's python3-torch; never committed as binaries), and PyTorch's own first-step gradients for
them: python3 make_models.py OUT_DIR writes OUT_DIR/<name>.pt and OUT_DIR/<name>.grads.json.

Each .grads.json holds the batch (inputs, targets), the loss and every parameter's gradient after
one forward and backward of the eager module -- the module before it was scripted or traced --
from the same weights the archive holds."""
import json
import os
import sys
from typing import NamedTuple, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt import GPT  # noqa: E402


class Mlp(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Cnn(nn.Module):
    """BatchNorm and Dropout: per-worker buffers, a random mask. Average pooling keeps the
    logits small enough for SGD at lr 0.01 on normal inputs."""

    def __init__(self, dropout=0.1):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = F.avg_pool2d(F.relu(self.bn(self.conv(x))), 4)
        return self.fc(self.drop(x.flatten(1)))


class Encoder(nn.Module):
    """A small transformer over token ids: embedding, two encoder layers, a mean-pooled head."""

    def __init__(self, dropout=0.1):
        super().__init__()
        self.emb = nn.Embedding(100, 32)
        layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=dropout, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, tokens):
        return self.head(self.enc(self.emb(tokens)).mean(1))


class BenchCnn(nn.Module):
    """bench/user_model_vs_pytorch.py's model: a CIFAR-shaped CNN of a user's kind (two conv
    blocks with BatchNorm, Dropout, a linear head; 0.3 M parameters)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(64 * 8 * 8, 64)
        self.head = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.head(F.relu(self.fc(self.drop(x.flatten(1)))))


class Tied(nn.Module):
    """A language-model head tied to its embedding: one tensor under two names."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.mix = nn.Linear(16, 16)
        self.out = nn.Linear(16, 50, bias=False)
        self.out.weight = self.emb.weight

    def forward(self, tokens):
        return self.out(torch.tanh(self.mix(self.emb(tokens).mean(1))))


class OwnLoss(nn.Module):
    """forward(inputs, targets) returns the loss itself (--loss output)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(20, 4)

    def forward(self, x, y):
        return F.cross_entropy(self.fc(x), y)


class Outputs(NamedTuple):
    """What torchvision's GoogLeNet and Inception return when scripted: the logits first."""
    logits: torch.Tensor
    aux: Optional[torch.Tensor]


class TupleOut(nn.Module):
    """Returns a NamedTuple, as scripted GoogLeNet does: Shoal's output is its first element."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 32)
        self.head = nn.Linear(32, 10)

    def forward(self, x) -> Outputs:
        return Outputs(self.head(torch.relu(self.fc(x))), None)


class CountFirst(nn.Module):
    """Returns (a count, the logits): no output Shoal can take."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 10)

    def forward(self, x) -> Tuple[int, torch.Tensor]:
        return x.size(0), self.fc(x)


def first_step(module, inputs, target, loss):
    module.train()
    module.zero_grad()
    if loss == "output":
        value = module(*inputs, target)
    else:
        out = module(*inputs)
        if isinstance(out, tuple):  # the logits of a NamedTuple, as Shoal takes them
            out = out[0]
        if loss == "cross_entropy" and out.dim() > 2:  # a class per position: [B, T, V]
            value = F.cross_entropy(out.reshape(-1, out.size(-1)), target.reshape(-1))
        elif loss == "cross_entropy":
            value = F.cross_entropy(out, target)
        else:
            value = F.mse_loss(out, target)
    value.backward()
    return {
        "inputs": [{"shape": list(x.shape), "dtype": str(x.dtype), "data": x.flatten().tolist()}
                   for x in inputs],
        "target": target.flatten().tolist(),
        "target_shape": list(target.shape),
        "loss": value.item(),
        "grads": {n: p.grad.flatten().tolist() for n, p in module.named_parameters()
                  if p.grad is not None},
    }


def save(out, name, eager, archive, inputs, target, loss="cross_entropy"):
    archive.save(f"{out}/{name}.pt")
    with open(f"{out}/{name}.grads.json", "w") as f:
        json.dump(first_step(eager, inputs, target, loss), f)


def main(out):
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    mlp = Mlp()
    save(out, "mlp", mlp, torch.jit.script(mlp), [torch.randn(8, 64, generator=g)],
         torch.randint(0, 10, (8,), generator=g))
    torch.jit.script(Mlp(hidden=256)).save(f"{out}/mlp_wide.pt")
    cnn = Cnn()
    # Traced in training mode, as a user tracing for training would; check_trace off: the
    # dropout mask differs between the trace and its check.
    traced = torch.jit.trace(cnn.train(), torch.randn(4, 3, 16, 16), check_trace=False)
    traced.save(f"{out}/cnn.pt")
    cnn_exact = Cnn(dropout=0.0)  # the gradient check: no random mask to reproduce
    save(out, "cnn_exact", cnn_exact, torch.jit.trace(cnn_exact.train(), torch.randn(4, 3, 16, 16)),
         [torch.randn(8, 3, 16, 16, generator=g)], torch.randint(0, 10, (8,), generator=g))
    torch.jit.script(Encoder()).save(f"{out}/encoder.pt")
    enc_exact = Encoder(dropout=0.0)
    save(out, "encoder_exact", enc_exact, torch.jit.script(enc_exact),
         [torch.randint(0, 100, (4, 6), generator=g)], torch.randint(0, 5, (4,), generator=g))
    own = OwnLoss()
    save(out, "own_loss", own, torch.jit.script(own), [torch.randn(8, 20, generator=g)],
         torch.randint(0, 4, (8,), generator=g), loss="output")
    tied = Tied()
    save(out, "tied", tied, torch.jit.script(tied), [torch.randint(0, 50, (8, 5), generator=g)],
         torch.randint(0, 50, (8,), generator=g))
    gpt = GPT(GPT.TINY)  # tests/models/gpt.py at a tiny size: per-token cross-entropy
    save(out, "gpt_tiny", gpt, torch.jit.script(gpt), [torch.randint(0, 100, (3, 12), generator=g)],
         torch.randint(0, 100, (3, 12), generator=g))
    partly = Mlp()
    partly.fc1.requires_grad_(False)  # a frozen backbone, a trained head
    torch.jit.script(partly).save(f"{out}/partly_frozen.pt")
    torch.jit.script(BenchCnn()).save(f"{out}/bench_cnn.pt")
    # A data set of the user's own for mlp (--dataset): 256 samples, classes marked in the inputs.
    labels = torch.randint(0, 10, (256,), generator=g)
    inputs = torch.randn(256, 64, generator=g) + 2 * torch.randn(10, 64, generator=g)[labels]
    torch.save({"inputs": inputs, "targets": labels}, f"{out}/mlp_data.pt")
    torch.save(mlp.state_dict(), f"{out}/state_dict.pt")  # an OrderedDict: not a data set
    torch.save({"inputs": torch.randn(256, 32), "targets": labels}, f"{out}/mlp_data_wrong.pt")
    frozen = torch.jit.script(Mlp())
    for p in frozen.parameters():
        p.requires_grad_(False)
    frozen.save(f"{out}/frozen.pt")
    tg = torch.Generator().manual_seed(2)  # its own: the models above keep their batches
    tuple_out = TupleOut()
    save(out, "tuple_out", tuple_out, torch.jit.script(tuple_out),
         [torch.randn(8, 64, generator=tg)], torch.randint(0, 10, (8,), generator=tg))
    torch.jit.script(CountFirst()).save(f"{out}/count_first.pt")


if __name__ == "__main__":
    main(sys.argv[1])
