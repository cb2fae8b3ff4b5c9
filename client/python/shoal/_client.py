"""The client: experiments and sweeps submitted to shoald and read back, typed."""
from __future__ import annotations

import html
import json
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

import grpc
from google.protobuf import json_format

from shoal import _frames
from shoal._connect import open_channel
from shoal._errors import ShoalError
from shoal.v1 import shoal_pb2, shoal_pb2_grpc

# With the project (CMakeLists.txt): 0.2.0 is the first shoald that reads fields by name.
__version__ = "0.2.0"

_ENDED = {"SUCCEEDED", "FAILED", "CANCELLED", "INTERRUPTED"}
_CHUNK = 1 << 20
GiB = float(1 << 30)


def _version(text: str):
    return tuple(int(x) for x in text.split(".")[:3] if x.isdigit())


def _text(field: str, value: Any) -> str:
    """A keyword argument's value as the CLI would type it; the daemon parses it."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float, str)):
        return repr(value) if isinstance(value, float) else str(value)
    raise ShoalError("INVALID_ARGUMENT",
                     f"{field}: {type(value).__name__} is not a value (give a str, int, float "
                     f"or bool; a list only to sweep)")


@dataclass(frozen=True)
class Sample:
    """One tick of a run's telemetry (Watch), names as in the CLI's JSON."""
    t_ms: float
    steps: int
    steps_total: Optional[int]
    steps_per_sec: Optional[float]
    samples_per_sec: Optional[float]
    loss: float
    total_pss_bytes: int
    total_rss_bytes: int
    total_uss_bytes: int
    gpu_memory_bytes: Optional[int]
    node: Optional[int]
    message: shoal_pb2.Sample

    @property
    def pss_sum_gib(self) -> float:
        return self.total_pss_bytes / GiB

    @property
    def rss_sum_gib(self) -> float:
        return self.total_rss_bytes / GiB

    @classmethod
    def of(cls, s: shoal_pb2.Sample) -> "Sample":
        def opt(name):
            return getattr(s, name) if s.HasField(name) else None
        return cls(s.t_ms, s.steps, opt("steps_total"), opt("steps_per_sec"),
                   opt("samples_per_sec"), s.loss, s.total_pss_bytes, s.total_rss_bytes,
                   s.total_uss_bytes, opt("gpu_memory_bytes"), opt("node"), s)


@dataclass(frozen=True)
class StateChange:
    state: str


@dataclass(frozen=True)
class Event:
    t_ms: float
    text: str


class Experiment:
    """One run: its record (`record`, refreshed by refresh() and wait()), its telemetry and trace."""

    def __init__(self, client: "Client", record: shoal_pb2.Experiment):
        self._c = client
        self.record = record

    id = property(lambda self: self.record.id)
    state = property(lambda self: shoal_pb2.ExperimentState.Name(self.record.state))
    error = property(lambda self: self.record.error)

    @property
    def result(self) -> Dict[str, Any]:
        return json_format.MessageToDict(self.record.result, preserving_proto_field_name=True)

    @property
    def profile_traces(self) -> List[str]:
        """Kind command: the torch.profiler traces its ranks wrote to SHOAL_PROFILE_DIR, as
        paths on the daemon's machine (the folder Holistic Trace Analysis reads)."""
        return [os.path.join(self.record.profile_dir, t.name) for t in self.record.profile_traces]

    def to_dict(self) -> Dict[str, Any]:
        return json_format.MessageToDict(self.record, preserving_proto_field_name=True)

    def refresh(self) -> "Experiment":
        self.record = self._c._call("Get", shoal_pb2.GetRequest(id=self.id))
        return self

    def watch(self, events: bool = False) -> Iterator[Union[Sample, StateChange, Event]]:
        """The live stream until the run ends: its samples, or with events=True its state
        changes and events too."""
        try:
            for ev in self._c._stub.Watch(shoal_pb2.WatchRequest(id=self.id),
                                          metadata=self._c._metadata):
                what = ev.WhichOneof("what")
                if what == "sample":
                    yield Sample.of(ev.sample)
                elif events and what == "state":
                    yield StateChange(shoal_pb2.ExperimentState.Name(ev.state))
                elif events and what == "event":
                    yield Event(ev.event.t_ms, ev.event.text)
        except grpc.RpcError as e:
            raise ShoalError.of(e) from None

    def wait(self) -> "Experiment":
        for _ in self.watch():
            pass
        while self.refresh().state not in _ENDED:  # the stream ended with the run
            time.sleep(0.1)
        return self

    def cancel(self) -> "Experiment":
        self.record = self._c._call("Cancel", shoal_pb2.CancelRequest(id=self.id))
        return self

    def logs(self) -> str:
        out, offset = b"", 0
        while True:
            r = self._c._call("GetLogs", shoal_pb2.LogsRequest(id=self.id, offset=offset))
            out += r.data
            offset = r.next_offset
            if not r.data:
                return out.decode(errors="replace")

    def samples(self):
        """Its kept telemetry: one row per sample per process (pandas)."""
        r = self._c._call("GetSamples", shoal_pb2.GetRequest(id=self.id))
        return _frames.samples_frame(r.samples)

    def processes(self):
        return _frames.processes_frame(self.record)

    def trace(self, path: Optional[str] = None) -> Dict[str, Any]:
        """The ended run's trace (Chrome trace-event JSON, as `shoal trace`): written to `path`
        when given, returned parsed."""
        body = self._c._call("Trace", shoal_pb2.GetRequest(id=self.id)).body
        if path is not None:
            with open(path, "wb") as f:
                f.write(body)
        return json.loads(body)

    def __repr__(self) -> str:
        return f"<shoal.Experiment {self.id} {self.state}>"

    def _repr_html_(self) -> str:
        rows = [("state", self.state), ("kind", self.record.spec.kind),
                ("workers", self.record.spec.workers)]
        if self.error:
            rows.append(("error", self.error))
        rows += sorted(self.result.items())
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
                       f"<td>{html.escape(str(v))}</td></tr>" for k, v in rows)
        return f"<b>experiment {html.escape(self.id)}</b><table>{body}</table>"


class Sweep:
    """A grid of runs: its record (`record`: the sweep and its points), its report as the CLI's."""

    def __init__(self, client: "Client", sweep_id: str):
        self._c = client
        self.id = sweep_id
        self.record: Optional[shoal_pb2.SweepReport] = None
        self.refresh()

    state = property(lambda self: shoal_pb2.ExperimentState.Name(self.record.sweep.state))

    def refresh(self) -> "Sweep":
        self.record = self._c._call("GetSweep", shoal_pb2.GetRequest(id=self.id))
        return self

    def experiments(self) -> List[Experiment]:
        return [Experiment(self._c, e) for e in self.record.experiments]

    def wait(self, poll_s: float = 0.5) -> "Sweep":
        while self.refresh().state not in _ENDED:
            time.sleep(poll_s)
        return self

    def cancel(self) -> "Sweep":
        self._c._call("CancelSweep", shoal_pb2.CancelRequest(id=self.id))
        return self.refresh()

    def report(self, format: str = "md", plot: Optional[str] = None) -> str:
        """`shoal report` as the daemon renders it: md, csv, json, html or svg."""
        r = self._c._call("Report", shoal_pb2.ReportRequest(id=self.id, format=format,
                                                            plot=plot or ""))
        return r.body.decode()

    def results(self):
        """One row per run, every spec field and figure a column (the CLI's CSV, as pandas)."""
        return _frames.from_csv(self.report("csv"))

    def tables(self, what: str = "value") -> Dict[str, Any]:
        """The report's tables by key ("host_memory_gib", "samples_per_sec", ...): each cell's
        median (`value`), or the spread of its repeats (`min`, `max`) or their count (`runs`)."""
        return _frames.tables_frames(json.loads(self.report("json")), what)

    def __repr__(self) -> str:
        return f"<shoal.Sweep {self.id} {self.state}, {len(self.record.experiments)} runs>"

    def _repr_html_(self) -> str:
        page = self.report("html")  # a whole page: its own styles stay in its frame
        return (f'<iframe srcdoc="{html.escape(page, quote=True)}" '
                f'style="width:100%;height:640px;border:0"></iframe>')


class Client:
    """A connection to shoald: its unix socket (the CLI's default, or `socket`), or `target`
    HOST:PORT over TLS (`tls`: the CA's PEM file; `cert`/`key` for mTLS) with `token` or
    `token_file`. A daemon older than this package is refused (it would drop what it does not
    know)."""

    def __init__(self, socket: Optional[str] = None, *, target: Optional[str] = None,
                 tls: Optional[str] = None, token: Optional[str] = None,
                 token_file: Optional[str] = None, cert: Optional[str] = None,
                 key: Optional[str] = None, insecure: bool = False,
                 socket_owner: Optional[int] = None, timeout_s: float = 60):
        self._channel, self._metadata = open_channel(socket, target, tls, token, token_file,
                                                     cert, key, insecure, socket_owner)
        self._stub = shoal_pb2_grpc.ShoalStub(self._channel)
        self._timeout = timeout_s
        self.node_info = self._call("NodeInfo", shoal_pb2.NodeInfoRequest())
        daemon = self.node_info.versions.get("shoal", "")
        if _version(daemon) < _version(__version__):
            raise ShoalError("FAILED_PRECONDITION",
                             f"shoald is version {daemon or 'unknown'}, older than this client "
                             f"({__version__}): it would ignore what it does not know; upgrade "
                             f"shoald or use the shoal package of its version")

    def _call(self, method: str, request):
        try:
            return getattr(self._stub, method)(request, metadata=self._metadata,
                                               timeout=self._timeout)
        except grpc.RpcError as e:
            raise ShoalError.of(e) from None

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def node(self) -> Dict[str, Any]:
        return json_format.MessageToDict(self.node_info, preserving_proto_field_name=True)

    def upload(self, path: str) -> str:
        """A file (a TorchScript model, a tensor data set) stored by the daemon: its ref,
        "sha256:...", to pass as model_file= or dataset=."""
        size = os.path.getsize(path)

        def chunks():
            with open(path, "rb") as f:
                first = True
                while True:
                    data = f.read(_CHUNK)
                    if first:
                        yield shoal_pb2.UploadChunk(name=os.path.basename(path), size=size,
                                                    data=data)
                        first = False
                    elif data:
                        yield shoal_pb2.UploadChunk(data=data)
                    if not data:
                        return
        try:
            return self._stub.Upload(chunks(), metadata=self._metadata).ref
        except grpc.RpcError as e:
            raise ShoalError.of(e) from None

    # A local file named where the CLI would upload one is uploaded, once however often named.
    def _resolve_files(self, fields: Dict[str, Any], done: Dict[str, str]) -> None:
        def local(v):
            return isinstance(v, str) and not v.startswith("sha256:") and os.path.isfile(v)

        for name in ("model_file", "dataset"):
            values = fields.get(name)
            if values is None or (name == "dataset" and "model_file" not in fields):
                continue
            many = isinstance(values, (list, tuple))
            out = []
            for v in (values if many else [values]):
                if local(v) or (name == "model_file" and isinstance(v, str)
                                and not v.startswith("sha256:")):
                    if v not in done:
                        done[v] = self.upload(v)
                    v = done[v]
                out.append(v)
            fields[name] = out if many else out[0]

    @staticmethod
    def _command(spec: shoal_pb2.ExperimentSpec, command: Optional[Sequence[str]],
                 env: Optional[Dict[str, Any]], cwd: Optional[str]) -> List[shoal_pb2.Axis]:
        """Kind command's program, environment and folder; an env value that is a list is an
        axis ("env.NAME")."""
        axes = []
        if command is not None:
            spec.command.argv.extend(list(command))
        for name, value in (env or {}).items():
            if isinstance(value, (list, tuple)):
                axes.append(shoal_pb2.Axis(field="env." + name, values=[str(v) for v in value]))
            else:
                spec.command.env.append(f"{name}={value}")
        if cwd is not None:
            spec.command.cwd = cwd
        return axes

    def submit(self, *, wait: bool = False, command: Optional[Sequence[str]] = None,
               env: Optional[Dict[str, Any]] = None, cwd: Optional[str] = None,
               **fields: Any) -> Experiment:
        """An experiment: every spec field a keyword argument, named as the CLI's options
        (batch_size=, start=, model_file=, ...), checked by the daemon with the CLI's refusals.
        command= (kind command) is the program to run, as after the CLI's `--`."""
        if command is not None:
            fields.setdefault("kind", "command")
        self._resolve_files(fields, {})
        req = shoal_pb2.SubmitRequest()
        if self._command(req.spec, command, env, cwd):
            raise ShoalError("INVALID_ARGUMENT", "env: a list of values sweeps; submit takes one")
        for k, v in fields.items():
            if v is None:
                continue
            if isinstance(v, (list, tuple)):
                raise ShoalError("INVALID_ARGUMENT",
                                 f"{k}: a list of values is a sweep's axis (Client.sweep)")
            req.fields.add(field=k, value=_text(k, v))
        e = Experiment(self, self._call("Get", shoal_pb2.GetRequest(
            id=self._call("Submit", req).id)))
        return e.wait() if wait else e

    def sweep(self, *, wait: bool = False, repeats: Optional[int] = None,
              skip_after_oom: Optional[bool] = None, command: Optional[Sequence[str]] = None,
              env: Optional[Dict[str, Any]] = None, cwd: Optional[str] = None,
              **fields: Any) -> Sweep:
        """A grid: a field given a list is an axis, one given a value is fixed (`shoal sweep`'s
        comma-separated lists)."""
        if command is not None:
            fields.setdefault("kind", "command")
        self._resolve_files(fields, {})
        spec = shoal_pb2.SweepSpec()
        spec.axes.extend(self._command(spec.base, command, env, cwd))
        if repeats is not None:
            spec.repeats = repeats
        if skip_after_oom is not None:
            spec.skip_after_oom = skip_after_oom
        for k, v in fields.items():
            if v is None:
                continue
            if isinstance(v, (list, tuple)):
                spec.axes.add(field=k, values=[_text(k, x) for x in v])
            else:
                spec.fields.add(field=k, value=_text(k, v))
        s = Sweep(self, self._call("SubmitSweep", shoal_pb2.SubmitSweepRequest(spec=spec)).id)
        return s.wait() if wait else s

    def get(self, record_id: str) -> Union[Experiment, Sweep]:
        """An experiment ("x...") or a sweep ("s...") by its id."""
        if record_id.startswith("s"):
            return Sweep(self, record_id)
        return Experiment(self, self._call("Get", shoal_pb2.GetRequest(id=record_id)))

    def experiments(self, state: Optional[str] = None, kind: Optional[str] = None,
                    mine: Optional[bool] = None) -> List[Experiment]:
        """Every experiment the daemon recorded, or those matching each filter given."""
        out, token = [], ""
        while True:
            req = shoal_pb2.ListRequest(page_token=token)
            if state is not None:
                req.state = shoal_pb2.ExperimentState.Value(state.upper())
            if kind is not None:
                req.kind = kind
            if mine is not None:
                req.mine = mine
            r = self._call("List", req)
            out += [Experiment(self, e) for e in r.experiments]
            token = r.next_page_token
            if not token:
                return out

    def results(self, runs: Union[Sweep, Sequence[Union[Experiment, str]]]):
        """One row per run (pandas): a sweep's as its report's CSV, a list of experiments (or
        ids) as their spec fields and result figures."""
        if isinstance(runs, Sweep):
            return runs.results()
        records = [r.record if isinstance(r, Experiment) else
                   self._call("Get", shoal_pb2.GetRequest(id=r)) for r in runs]
        return _frames.experiments_frame(records)
