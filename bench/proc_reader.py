"""Reading processes from /proc, without torch: the children and descendants of a process, one
process's PSS, RSS and USS (smaps_rollup), and a thread that reads every few milliseconds. The
PyTorch references sample themselves with it (torch_reference.PssSampler); the benchmarks read
both sides from outside with it (harness.OutsideReader)."""
import os
import threading


def children(pid):
    """The children of every thread of pid: /proc/PID/task/TID/children lists only those TID
    started, and shoald starts its leaders from other threads than its first."""
    out = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(p) for p in f.read().split()]
        except OSError:
            pass
    return out


def descendants(pid):
    """Every process below pid: forkserver workers are the server's children, not ours."""
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def rollup(pid):
    """{"Rss", "Pss", "Uss"} of pid in bytes (Uss: Private_Clean + Private_Dirty, pages no other
    process maps); None when it is gone or unreadable."""
    out = {"Uss": 0}
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                k, _, rest = line.partition(":")
                if k in ("Rss", "Pss"):
                    out[k] = int(rest.split()[0]) * 1024
                elif k in ("Private_Clean", "Private_Dirty"):
                    out["Uss"] += int(rest.split()[0]) * 1024
    except OSError:
        return None
    return out


class Periodic:
    """A daemon thread calling self._tick() every `every_ms` while in the `with` block."""

    def __init__(self, every_ms):
        self._every = every_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        while not self._stop.is_set():
            self._tick()
            self._stop.wait(self._every)
