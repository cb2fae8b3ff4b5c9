"""What the benchmarks share: a throwaway shoald (or a fresh, settled one for a single run), the
CLI and the PyTorch reference, as JSON, and which of shoald's processes are an experiment's."""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from proc_reader import children, descendants

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


FORKSERVER_POOL = 16  # shoald --forkserver-pool's default


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def is_forkserver(pid):
    return cmdline(pid)[1:3] == [b"--role", b"forkserver"]


def shoal_processes(shoald, start):
    """The experiment's processes as Shoal's own peak_pss_sum_bytes counts them: every process
    below shoald, the forkserver's tree only under its start method."""
    out = []
    for kid in children(shoald):
        if start != "forkserver" and is_forkserver(kid):
            continue
        out += [kid] + descendants(kid)
    return out


@contextlib.contextmanager
def fresh_shoald(bin_dir, extra=()):
    """A shoald of its own for one run, ready as a long-running one is: its forkserver up with
    its pool forked (it warms LibTorch at start), so that nothing of Shoal boots beside the run,
    and nothing of it is left for the PyTorch runs after. `extra`: shoald's own flags."""
    with daemon(bin_dir, extra=extra) as cli:
        deadline = time.time() + 60
        while time.time() < deadline:
            servers = [k for k in children(cli.pid) if is_forkserver(k)]
            if servers and len(children(servers[0])) >= FORKSERVER_POOL:
                break
            time.sleep(0.1)
        time.sleep(0.5)
        yield cli


def submit_started(cmd, stack):
    """Starts `shoal submit ... --wait --json` (cmd, argv); if it cannot, closes `stack` (the
    side's daemon with it) before raising."""
    try:
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    except BaseException:
        stack.close()
        raise


def submit_finished(proc, daemon_pid):
    """Waits for a submit_started command: (the record it printed, {} if none; its stderr;
    shoald's own PSS in bytes then, kept apart from the run's)."""
    from proc_reader import rollup
    out, err = proc.communicate()
    daemon_pss = (rollup(daemon_pid) or {}).get("Pss")
    try:
        e = json.loads(out)
    except ValueError:
        e = {}
    return e, err, daemon_pss


def reference_finished(proc):
    """Waits for a PyTorch reference (bench/reference_*.py, started with stdout and stderr
    piped): (the JSON of its last line, {"ok": False} if none or if it exited non-zero; its
    stderr's tail)."""
    out, err = proc.communicate()
    try:
        r = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False}, err[-500:]
    return (r if proc.returncode == 0 else {**r, "ok": False}), err[-500:]
