"""PyTorch at its best tuning, before torch is imported (no torch here).

Thresholds no step reaches (the study ConvNet's first conv output is 147 MB at batch 64): glibc
2.36 takes them as given, so big tensors come from the heap and freed memory stays there for the
next step instead of going back to the kernel and faulting in again. glibc reads them at start-up,
so a script asked for `--tuning best` re-executes itself with them.
"""
import os
import sys

TUNED_ENV = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(4 << 30)}


def reexec_if_best(t0):
    """Re-executes this script with TUNED_ENV when argv says --tuning best (keeping t0)."""
    if "--tuning" not in sys.argv or sys.argv[sys.argv.index("--tuning") + 1:][:1] != ["best"]:
        return
    if any(os.environ.get(k) != v for k, v in TUNED_ENV.items()):
        os.execve(sys.executable, [sys.executable] + sys.argv,
                  {**os.environ, **TUNED_ENV, "SHOAL_REFERENCE_T0": repr(t0)})
