"""A real shoald per test module, on a temporary socket and state folder (SHOAL_BIN_DIR: the
build's bin/, as ctest sets it)."""
import os
import shutil
import socket as pysocket
import subprocess
import tempfile
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
BIN = os.environ.get("SHOAL_BIN_DIR", os.path.join(ROOT, "build", "bin"))


class Daemon:
    def __init__(self, folder, *extra):
        self.folder = folder
        self.socket = os.path.join(folder, "s.sock")
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "shoald"), "--socket", self.socket, "--state-dir",
             os.path.join(folder, "state"), "--log-level", "warn", *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for _ in range(200):
            if os.path.exists(self.socket):
                return
            if self.proc.poll() is not None:
                raise RuntimeError("shoald exited: " + self.proc.stderr.read().decode())
            time.sleep(0.05)
        raise RuntimeError("shoald made no socket in 10 s")

    def cli(self, *args):
        """The CLI against this daemon: (exit code, stdout, stderr)."""
        r = subprocess.run([os.path.join(BIN, "shoal"), "--socket", self.socket, *args],
                           capture_output=True, text=True)
        return r.returncode, r.stdout, r.stderr

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def daemon():
    folder = tempfile.mkdtemp(prefix="shoal-py-")
    d = Daemon(folder)
    yield d
    d.stop()
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture()
def folder():
    f = tempfile.mkdtemp(prefix="shoal-pyt-")
    yield f
    shutil.rmtree(f, ignore_errors=True)


def free_port():
    with pysocket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
