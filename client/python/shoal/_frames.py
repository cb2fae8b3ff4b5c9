"""Records as pandas DataFrames. pandas is imported only here, and only when a frame is asked for."""
from __future__ import annotations

import io
from typing import Any, Dict, Iterable, List

from google.protobuf import json_format

from shoal.v1 import shoal_pb2


def pandas():
    try:
        import pandas as pd  # noqa: F401
    except ImportError as e:  # the package works without it; frames do not
        raise ImportError("shoal: DataFrames need pandas (Debian: apt-get install python3-pandas; "
                          "pip: shoal[pandas])") from e
    return pd


def from_csv(text: str):
    """A report's CSV as the CLI prints it, read as it is (one row per run)."""
    if not text.strip():
        return pandas().DataFrame()
    return pandas().read_csv(io.StringIO(text))


def _numbers(d: Dict[str, Any]) -> Dict[str, Any]:
    # JSON carries 64-bit integers as text: numbers again.
    return {k: int(v) if isinstance(v, str) and v.lstrip("-").isdigit() else v
            for k, v in d.items()}


def _flat(prefix: str, msg, defaults: bool = False) -> Dict[str, Any]:
    d = json_format.MessageToDict(msg, preserving_proto_field_name=True,
                                  including_default_value_fields=defaults)
    out: Dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            for k2, v2 in v.items():
                if not isinstance(v2, (dict, list)):
                    out[f"{prefix}{k}.{k2}"] = v2
        elif not isinstance(v, list):
            out[prefix + k] = v
    return _numbers(out)


def experiments_frame(records: Iterable[shoal_pb2.Experiment]):
    """One row per experiment: its id, state, error and host, every spec field given or filled
    (their names as in the CSV) and every figure of its result (units in their names)."""
    rows: List[Dict[str, Any]] = []
    for e in records:
        row: Dict[str, Any] = {"experiment_id": e.id, "state": shoal_pb2.ExperimentState.Name(
            e.state).lower(), "error": e.error, "host": e.host.hostname if e.HasField("host")
            else None}
        row.update(_flat("", e.spec))
        row.update(_flat("", e.result))
        rows.append(row)
    return pandas().DataFrame(rows)


def samples_frame(samples: Iterable[shoal_pb2.Sample]):
    """One row per sample per process: the sample's time and node, the process's pid, role,
    index and memory (bytes), CPU and GPU where read."""
    rows = []
    for s in samples:
        for p in s.processes:
            rows.append({
                "t_ms": s.t_ms, "node": s.node if s.HasField("node") else None,
                "pid": p.pid, "role": p.role, "index": p.index, "rss_bytes": p.rss_bytes,
                "pss_bytes": p.pss_bytes, "uss_bytes": p.uss_bytes,
                "cpu_percent": p.cpu_percent if p.HasField("cpu_percent") else None,
                "gpu_memory_bytes": p.gpu_memory_bytes if p.HasField("gpu_memory_bytes")
                else None,
                "total_pss_bytes": s.total_pss_bytes, "steps": s.steps})
    return pandas().DataFrame(rows, columns=[
        "t_ms", "node", "pid", "role", "index", "rss_bytes", "pss_bytes", "uss_bytes",
        "cpu_percent", "gpu_memory_bytes", "total_pss_bytes", "steps"])


def processes_frame(e: shoal_pb2.Experiment):
    """One row per process of the run (and the forkserver's): its role, exit and peaks."""
    # Every plain field, 0 included (worker 0, exit code 0); optional ones only where known.
    rows = [_flat("", p, defaults=True) for p in list(e.processes) + list(e.fork_server_processes)]
    return pandas().DataFrame(rows)


def tables_frames(report: Dict[str, Any], what: str = "value") -> Dict[str, Any]:
    """The report's tables (`report --format json`), each as a DataFrame of one figure of its
    cells: `value` (the median the report prints), `min`, `max` (the spread of a cell's repeats)
    or `runs`; rows labelled by its row fields, columns by its column axis."""
    if what not in ("value", "min", "max", "runs"):
        raise ValueError(f"what: '{what}' is not one of value, min, max, runs")
    pd = pandas()
    out = {}
    for t in report.get("tables", []):
        index = [" ".join(r["labels"]) or t["key"] for r in t["rows"]]
        data = [[c.get(what) for c in r["cells"]] for r in t["rows"]]
        frame = pd.DataFrame(data, index=index, columns=t["columns"])
        frame.columns.name = t["column_field"]
        frame.attrs["title"] = t["title"]
        out[t["key"]] = frame
    return out
