"""`pip install ./client/python` as the README's machine does it: offline, into a venv that sees
Debian's grpcio, protobuf and pandas, the gRPC modules generated from proto/ at build time."""
import os
import shutil
import subprocess
import sys

import shoal

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def test_the_package_installs_offline_and_talks_to_shoald(daemon, folder):
    # A copy of the sources (pip builds in place, and the tree stays clean).
    src = os.path.join(folder, "src")
    shutil.copytree(os.path.join(ROOT, "client", "python"), os.path.join(src, "client", "python"),
                    ignore=shutil.ignore_patterns("build", "tests", "*.egg-info", "__pycache__"))
    shutil.copytree(os.path.join(ROOT, "proto"), os.path.join(src, "proto"))
    venv = os.path.join(folder, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    pip = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-index",
                          "--no-build-isolation", os.path.join(src, "client", "python")],
                         capture_output=True, text=True, env=env)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    probe = ("import shoal, shoal.v1.shoal_pb2 as pb, sys; c = shoal.Client(sys.argv[1]); "
             "print(shoal.__file__); print(pb.__file__); print(c.node()['versions']['shoal'])")
    r = subprocess.run([os.path.join(venv, "bin", "python"), "-c", probe, daemon.socket],
                       capture_output=True, text=True, env=env, cwd=folder)
    assert r.returncode == 0, r.stderr
    package, stubs, version = r.stdout.split()
    assert package.startswith(venv) and stubs.startswith(venv), r.stdout
    assert version == shoal.__version__  # the daemon built beside it
    assert os.path.exists(os.path.join(os.path.dirname(package), "py.typed"))
