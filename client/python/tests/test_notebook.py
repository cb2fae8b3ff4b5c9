"""docs/python.ipynb executed end to end against a real shoald, as a reader would run it
(Debian's jupyter-nbconvert and ipykernel)."""
import json
import os
import shutil
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def test_the_notebook_runs_end_to_end(daemon, folder):
    shutil.copy(os.path.join(ROOT, "docs", "python.ipynb"), folder)
    env = dict(os.environ, SHOAL_SOCKET=daemon.socket)
    r = subprocess.run(["jupyter", "nbconvert", "--to", "notebook", "--execute",
                        "--ExecutePreprocessor.timeout=300", "--output", "ran.ipynb",
                        "python.ipynb"], cwd=folder, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    cells = json.load(open(os.path.join(folder, "ran.ipynb")))["cells"]
    outputs = [o for c in cells if c["cell_type"] == "code" for o in c["outputs"]]
    assert not [o for o in outputs if o["output_type"] == "error"]
    text = json.dumps(outputs)
    assert "samples_per_sec" in text and "spawn" in text      # the sweep's frame
    assert "<iframe" in text                                 # its report, inline
    assert "worker 1" in text                                # the trace's tracks
    assert os.path.getsize(os.path.join(folder, "run.json")) > 1000
