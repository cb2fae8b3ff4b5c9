"""What the benchmarks share: a throwaway shoald, the CLI and the PyTorch reference, as JSON."""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE = os.path.join(ROOT, "bench", "reference_hogwild.py")


def run_json(cmd):
    """Runs cmd (argv) and parses the last line of its stdout as JSON."""
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@contextlib.contextmanager
def daemon(bin_dir, settle_s=0.0, extra=()):
    """A shoald on a temporary socket and state dir; yields a function that runs the CLI on it
    (with .socket, the socket's path, and .pid, the daemon's). A SIGTERM to the benchmark ends
    it through the cleanup below (Python's default would leave the daemon and its workers)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    tmp = tempfile.mkdtemp(prefix="shoal-bench.")
    sock = os.path.join(tmp, "s.sock")
    proc = subprocess.Popen([os.path.join(bin_dir, "shoald"), "--socket", sock, "--state-dir",
                             os.path.join(tmp, "state"), "--log-level", "warn", *extra])
    try:
        for _ in range(100):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        time.sleep(settle_s)
        cli = lambda *args: run_json([os.path.join(bin_dir, "shoal"), "--socket", sock, *args])
        cli.socket, cli.pid = sock, proc.pid
        yield cli
    finally:
        proc.terminate()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def reference(*args):
    """One run of the torch.multiprocessing reference on Debian's python3."""
    return run_json(["/usr/bin/python3", REFERENCE, *[str(a) for a in args]])
