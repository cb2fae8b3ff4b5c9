"""Makes the hostile and broken model files tests/model_file_e2e_test.cc submits: each must fail
its experiment naming the stage and the cause (or, for many tiny tensors, train), while the
daemon serves and the queue moves. python3 make_hostile.py OUT_DIR writes OUT_DIR/<name>.pt."""
import sys
from typing import List

import torch
import torch.nn as nn


class Forever(nn.Module):
    """forward never returns: the probe's time bound must end it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        i = 0
        while i >= 0:
            i += 1
        return self.fc(x)


class LaterForever(nn.Module):
    """forward returns `after` times in a process, then never: the probe passes (2 calls in the
    leader), and a spawned worker's warm-up (calls 1-3) or a later step hangs; the bound the
    leader derived from its probe must end it."""

    def __init__(self, after: int):
        super().__init__()
        self.fc = nn.Linear(8, 10)
        self.after = after
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        i = 0
        while self.calls > self.after and i >= 0:
            i += 1
        return self.fc(x)


class Hoarder(nn.Module):
    """forward allocates without bound (256 MiB a tensor, never touched, never freed)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        kept: List[torch.Tensor] = []
        for _ in range(1000000):
            t = torch.empty(1 << 26)
            t[0] = 1.0  # one page touched: the rest is address space, which the bound counts
            kept.append(t)
        return self.fc(x) + kept[-1][0]


class NotANumber(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(x) * float("nan")


class WrongShape(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 7)

    def forward(self, x):
        return self.fc(x)


class ManyTiny(nn.Module):
    """3000 one-element parameters beside a linear layer: thousands of tensors in the segment."""

    def __init__(self, n: int = 3000):
        super().__init__()
        self.tiny = nn.ParameterList([nn.Parameter(torch.zeros(1)) for _ in range(n)])
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        s = torch.zeros(1)
        for p in self.tiny:
            s = s + p
        return self.fc(x) + s


def main(out):
    torch.manual_seed(0)
    for name, m in {"forever": Forever(), "hoarder": Hoarder(), "nan": NotANumber(),
                    "wrong_shape": WrongShape(), "many_tiny": ManyTiny(),
                    "warm_up_forever": LaterForever(2), "step_forever": LaterForever(5)}.items():
        torch.jit.script(m).save(f"{out}/{name}.pt")


if __name__ == "__main__":
    main(sys.argv[1])
