"""What a training script tells Shoal it did, when Shoal runs it (`shoal submit --kind command`).

    import shoal_report
    for batch in loader:
        ...
        shoal_report.step(samples=len(batch), loss=loss.item())

Each call writes one JSON line to the file descriptor named by SHOAL_REPORT_FD; without that
variable (the script run by hand, or by torchrun) every call does nothing. No dependency beyond
the standard library. Shoal turns the lines into steps, samples/s and the first and last loss;
a line it cannot read is counted and ignored (docs/kinds/command.md).
"""

import json
import math
import os

_out = None
_opened = False


def _stream():
    global _out, _opened
    if not _opened:
        _opened = True
        fd = os.environ.get("SHOAL_REPORT_FD")
        if fd and fd.isdigit():
            try:
                _out = os.fdopen(int(fd), "w", buffering=1, closefd=False)
            except OSError:
                _out = None
    return _out


def step(samples=None, loss=None, step=None, **phases_ms):
    """One training step done: its samples (all of them, this rank's), its loss, its number, and
    any of its phases' times in ms (data_ms=, forward_ms=, backward_ms=, optimizer_ms=)."""
    out = _stream()
    if out is None:
        return
    line = {}
    if step is not None:
        line["step"] = int(step)
    if samples is not None:
        line["samples"] = int(samples)
    if loss is not None and math.isfinite(float(loss)):
        line["loss"] = float(loss)
    for name, ms in phases_ms.items():
        if name in ("data_ms", "forward_ms", "backward_ms", "optimizer_ms") and ms is not None:
            line[name] = max(0.0, float(ms))
    try:
        out.write(json.dumps(line) + "\n")
    except OSError:  # Shoal is gone: the run is being stopped; training goes on until it is
        pass
