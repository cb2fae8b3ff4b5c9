"""The shoal package against a real shoald: submit, watch, upload, sweep, DataFrames equal to
the CLI's CSV, traces, errors, TLS with a token, a daemon of another version."""
import hashlib
import io
import json
import os
import subprocess

import pandas as pd
import pytest

import shoal
from conftest import Daemon, free_port

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
SMALL = dict(batches=4, eval_samples=0, dataset="synthetic")


def test_a_submitted_run_streams_typed_samples_and_ends_with_its_figures(daemon):
    c = shoal.Client(daemon.socket)
    run = c.submit(workers=2, start="forkserver", **SMALL)
    samples = list(run.watch())
    assert samples, "no sample streamed"
    assert all(isinstance(s, shoal.Sample) for s in samples)
    times = [s.t_ms for s in samples]
    assert times == sorted(times)
    assert max(s.pss_sum_gib for s in samples) > 0
    run.wait()
    assert run.state == "SUCCEEDED", run.error
    assert int(run.result["samples"]) == 2 * 4 * 64  # workers x batches x batch size
    kinds = {type(x) for x in c.get(run.id).watch(events=True)}  # an ended run: its end
    assert shoal.StateChange in kinds
    procs = run.processes()
    assert sorted(procs[procs.role == "worker"]["index"]) == [0, 1]
    frame = run.samples()
    assert set(frame.pid) >= set(procs[procs.role == "worker"].pid)
    assert (frame.pss_bytes > 0).all()


def test_an_uploaded_model_trains_and_is_named_by_its_hash(daemon, folder):
    path = os.path.join(folder, "mlp.pt")
    subprocess.run(["/usr/bin/python3", "-c",
                    "import sys, torch; torch.jit.script(torch.nn.Sequential(torch.nn.Linear(8, 16),"
                    " torch.nn.ReLU(), torch.nn.Linear(16, 4))).save(sys.argv[1])", path],
                   check=True)
    c = shoal.Client(daemon.socket)
    digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
    assert c.upload(path) == "sha256:" + digest
    run = c.submit(model_file=path, input="float32[B,8]", classes=4, workers=2, batches=3,
                   wait=True)  # a path: uploaded, as the CLI does
    assert run.state == "SUCCEEDED", run.error
    assert run.record.spec.model_file == "sha256:" + digest
    assert run.record.model_file.name == "mlp.pt"


def test_a_sweeps_results_are_the_clis_csv_and_its_tables_the_reports(daemon):
    c = shoal.Client(daemon.socket)
    sw = c.sweep(workers=[1, 2], start=["fork", "spawn"], wait=True, **SMALL)
    assert sw.state == "SUCCEEDED"
    df = sw.results()
    code, out, err = daemon.cli("report", sw.id, "--format", "csv")
    assert code == 0, err
    pd.testing.assert_frame_equal(df, pd.read_csv(io.StringIO(out)))
    assert len(df) == 4 and set(df.workers) == {1, 2} and set(df.start) == {"fork", "spawn"}
    memory = sw.tables()["host_memory_gib"]
    assert list(memory.columns) == ["1", "2"]
    # The report's cell is the run's peak PSS sum in GiB (one run a cell).
    one = df[(df.workers == 2) & (df.start == "spawn")].peak_pss_sum_bytes.iloc[0] / 2**30
    assert memory.loc["spawn", "2"] == pytest.approx(one)
    assert "<iframe" in sw._repr_html_() and sw.id in sw.report("html")
    both = c.results(sw.experiments())
    assert sorted(both.experiment_id) == sorted(df.experiment_id)
    # Repeats: each cell's median and spread, as the report has them: over its undisturbed runs
    # while there is one (a busy machine, a full ctest beside it, may disturb one of the two).
    rep = c.sweep(workers=[1], repeats=2, wait=True, **SMALL)
    calm = {e.id for e in rep.experiments() if not e.result.get("disturbed")}
    df = rep.results()
    counted = df[df.experiment_id.isin(calm)] if calm else df
    runs = counted.peak_pss_sum_bytes / 2**30
    cell = {w: rep.tables(w)["host_memory_gib"].iloc[0, 0] for w in ("value", "min", "max", "runs")}
    assert cell["runs"] == len(runs) == (len(calm) or 2)
    assert cell["min"] == pytest.approx(runs.min()) and cell["max"] == pytest.approx(runs.max())
    assert cell["value"] == pytest.approx(runs.median())


def test_a_trace_is_the_clis_and_its_totals_the_records(daemon, folder):
    c = shoal.Client(daemon.socket)
    run = c.submit(workers=2, wait=True, **dict(SMALL, eval_samples=64))
    path = os.path.join(folder, "run.json")
    trace = run.trace(path)
    code, out, err = daemon.cli("trace", run.id)
    assert code == 0, err
    assert open(path).read() == out
    events = trace["traceEvents"]
    peak = max(e["args"]["pss"] for e in events if e["name"] == "memory sum (MiB)")
    assert peak * 2**20 == pytest.approx(int(run.result["peak_pss_sum_bytes"]), abs=1)
    names = {e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert {"worker 0", "worker 1", "leader"} <= {n.split(" (")[0] for n in names}
    whole = next(e for e in events if e["ph"] == "X" and e["name"] == "run")
    assert whole["args"]["steps"] == int(run.result["steps"])
    assert whole["args"]["state"] == "SUCCEEDED"
    # Each worker's steps, one by one with their phases (4 batches: all of them), and worker 0's
    # evaluation, as the record has them.
    steps = [e for e in events if e["ph"] == "X" and e["name"].startswith("step ")]
    assert len(steps) == int(run.result["steps"]) == 8
    assert sum(1 for e in events if e["ph"] == "X" and e["name"] == "forward") == 8
    evals = [e for e in events if e["ph"] == "X" and e["name"] == "evaluating"]
    worker0 = next(p for p in run.record.processes if p.role == "worker" and p.index == 0)
    assert len(evals) == len(worker0.evaluation_spans) == 1
    span = worker0.evaluation_spans[0]
    assert evals[0]["dur"] == pytest.approx(1000 * (span.to_ms - span.from_ms), abs=1)
    ends = [e["args"].get("end") for e in events if e["ph"] == "X" and e["name"] == "alive"]
    assert ends.count("exited with code 0") >= 3  # leader and both workers
    # Drawn in headless Chromium by docs/trace-viewer.html: every track and slice.
    view = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "trace_view.py"), path,
                           os.path.join(folder, "run.png")], capture_output=True, text=True)
    assert view.returncode == 0, view.stderr
    drawn = json.loads(view.stdout)
    assert drawn["tracks"] == len(names)
    assert drawn["slices"] == sum(1 for e in events if e["ph"] == "X")
    assert os.path.getsize(os.path.join(folder, "run.png")) > 10000


def test_bad_input_is_a_clear_error_and_changes_nothing(daemon):
    c = shoal.Client(daemon.socket)
    before = len(c.experiments())
    for kwargs, code, words in [
            (dict(workers=0), "INVALID_ARGUMENT", "workers: 0 is outside the allowed range"),
            (dict(wrokers=2), "INVALID_ARGUMENT", "'wrokers' is not a spec field"),
            (dict(batch_size=[1, 2]), "INVALID_ARGUMENT", "a list of values is a sweep's axis"),
            (dict(lr=object()), "INVALID_ARGUMENT", "lr: object is not a value")]:
        with pytest.raises(shoal.ShoalError) as e:
            c.submit(**kwargs)
        assert e.value.code == code and words in e.value.message, e.value
    with pytest.raises(shoal.ShoalError) as e:
        c.sweep(workers=[1, 1], **SMALL)
    assert e.value.code == "INVALID_ARGUMENT" and "listed twice" in e.value.message
    assert len(c.experiments()) == before  # nothing was queued
    with pytest.raises(shoal.ShoalError) as e:
        c.get("x0123456789")
    assert e.value.code == "NOT_FOUND"
    code, _, err = daemon.cli("trace", "x0123456789")
    assert code == 1 and "no experiment with id 'x0123456789'" in err, err
    running = c.submit(batches=100000, eval_samples=0, dataset="synthetic")
    with pytest.raises(shoal.ShoalError) as e:
        running.trace()
    assert e.value.code == "FAILED_PRECONDITION" and "once it has ended" in e.value.message
    running.cancel().wait()
    assert running.state == "CANCELLED"
    assert c.results([]).empty
    with pytest.raises(shoal.ShoalError) as e:
        shoal.Client(os.path.join(os.path.dirname(daemon.socket), "none.sock"))
    assert e.value.code == "UNAVAILABLE" and "is it running?" in e.value.message


def test_a_cancelled_sweeps_frame_says_how_each_run_ended(daemon):
    c = shoal.Client(daemon.socket)
    sw = c.sweep(workers=[1, 2], batches=100000, eval_samples=0, dataset="synthetic")
    sw.cancel().wait()
    df = sw.results()
    assert len(df) == 2 and set(df.state) == {"cancelled"}


def test_a_daemon_older_than_the_package_is_refused(daemon, monkeypatch):
    monkeypatch.setattr(shoal._client, "__version__", "99.0.0")
    with pytest.raises(shoal.ShoalError) as e:
        shoal.Client(daemon.socket)
    assert e.value.code == "FAILED_PRECONDITION"
    assert "older than this client (99.0.0)" in e.value.message


def test_over_tls_a_token_lets_in_only_its_holder(folder):
    cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
    subprocess.run(["/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                    "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True)
    tokens = os.path.join(folder, "tokens")
    with open(os.open(tokens, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write("alice alice-0123456789abcdef\n")
    port = free_port()
    d = Daemon(folder, "--listen", f"127.0.0.1:{port}", "--tls-cert", cert, "--tls-key", key,
               "--token-file", tokens)
    try:
        c = shoal.Client(target=f"localhost:{port}", tls=cert, token="alice-0123456789abcdef")
        run = c.submit(wait=True, **SMALL)
        assert run.state == "SUCCEEDED" and run.record.submitter == "token alice"
        with pytest.raises(shoal.ShoalError) as e:
            shoal.Client(target=f"localhost:{port}", tls=cert, token="mallory-0123456789abcdef")
        assert e.value.code == "UNAUTHENTICATED" and "mallory" not in e.value.message
        with pytest.raises(shoal.ShoalError) as e:
            shoal.Client(target=f"localhost:{port}", token="alice-0123456789abcdef",
                         insecure=True, tls=cert)
        assert e.value.code == "INVALID_ARGUMENT"
    finally:
        d.stop()
