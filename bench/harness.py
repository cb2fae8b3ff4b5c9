"""One harness for every comparison of Shoal with PyTorch (bench/*_vs_pytorch.py).

A comparison is a plan, fixed before the first run: points (what one row of the table is
measured at, e.g. {"start": "fork", "workers": 2}) x sides (Shoal's and PyTorch's ways of running
a point) x repeats, with the settings that hold for every run. It is written to OUT/plan.json
before the first run; a rerun into the same OUT resumes it only when its plan is the same
(points, sides, repeats, settings) and refuses any other, leaving plan.json as it was.

Sides. A Side is a key (raw.jsonl's), a label (the tables'), whether it is Shoal's or PyTorch's,
and a callable start(point) that starts one run and returns a Started: the root pid(s) whose
process trees the reader sums (`roots`: each pid and everything below it; `below`: only what is
below each pid, a daemon itself kept apart), optional `groups` (a callable giving other named
pid lists read at the same ticks), `wait` (blocks until the run ended and returns what the side
measured: "ok", "error", "samples_per_sec" and anything else worth keeping) and `close` (called
once the reader has stopped, e.g. to stop a daemon of its own).

The reader. One OutsideReader in this process reads every side's processes at the same interval
(--sample-ms, 50 by default): each tick it sums PSS, RSS and USS (Private_Clean + Private_Dirty)
from /proc/PID/smaps_rollup over the run's tree ("tree") and each group, and keeps each sum's
peak. It starts as soon as start() returns (the run's processes launched) and stops when wait()
returns. Each side also keeps its own figures (Shoal's sampler, the reference's PssSampler) as
users see them. On a GPU (Comparison(..., gpu=True)) the same ticks also read NVML
(bench/nvml.py: libnvidia-ml.so.1, or $SHOAL_NVML_LIBRARY, e.g. the tests' fake): the GPU memory
of every compute process on device 0, summed (a run has the device to itself) and over each
group (so that Shoal's own GPU figure is checked against the same processes), so both sides'
GPU memory is read by the same reader as their host memory. Its plan says so ("gpu_reader":
"nvml"), and NVML that cannot be read stops the comparison before its first run.

Runs. Repeat r runs every point in the plan's order; at each point every side runs once, the
order of the sides rotated by r, so no side always runs first or after the same one. Every run
is appended to OUT/raw.jsonl as it ends: session, side, point, repeat, ok, error, wall_s, the
side's figures and the reader's peaks (bytes) and reads. A failed run (ok false, or start/wait
raised) is recorded and counted, never retried. A resume skips each (point, repeat) for which
one session recorded every side, and runs again, whole, every (point, repeat) that no session
completed (a killed run's point): a failing run is never re-run alone. With run_timeout_s, a run
not ended by then is killed (its tree, SIGKILL) and recorded as failed, saying so. The lines of an
incomplete (point, repeat) stay in raw.jsonl and are left out of the summary.

Summary. Per point and side: samples/s and the reader's peak PSS sum (MiB) (with a GPU reader
also the peak of the processes' summed GPU memory, the largest process's peak and the device's
mean utilisation while any of them held memory there), each the median [min-max] over the runs
that succeeded, "n ok / n failed", and on each Shoal side's row its ratios of medians to each
PyTorch side (Shoal / PyTorch).

    cmp = Comparison(out, points, sides, repeats, settings, sample_ms=50, context={...})
    cmp.run()
    print(cmp.write_summary(columns=("start", "workers")))
"""
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback

from proc_reader import Periodic, descendants, rollup

SAMPLE_MS = 50


class OutsideReader(Periodic):
    """The peak over time of the summed PSS, RSS and USS of each group of pids `which()` names
    ({group: [pid]}), every `every_ms`: peak[group] = {"pss", "rss", "uss"} in bytes. With `gpu`
    (a bench/nvml.py Device), at the same ticks the GPU memory NVML gives each compute process on
    the device: its sum over every one of them (gpu_peak["device"]: a run has the device to
    itself) and over each group, each process's peak (gpu_per_pid), and the device's
    utilisation on the ticks when any process held memory there (gpu_util_held)."""

    def __init__(self, every_ms, which, gpu=None):
        super().__init__(every_ms)
        self._which, self._gpu = which, gpu
        self.peak, self.gpu_peak, self.gpu_per_pid, self.gpu_util_held = {}, {}, {}, []
        self.reads = self.gpu_reads = 0

    def _tick(self):
        cache = {}
        groups = self._which()
        for group, pids in groups.items():
            sums = {"pss": 0, "rss": 0, "uss": 0}
            for pid in dict.fromkeys(pids):
                if pid not in cache:  # a pid in two groups is read once a tick
                    cache[pid] = rollup(pid)
                r = cache[pid] or {}
                for k in sums:
                    sums[k] += r.get(k.capitalize(), 0)
            peak = self.peak.setdefault(group, {"pss": 0, "rss": 0, "uss": 0})
            for k, v in sums.items():
                peak[k] = max(peak[k], v)
        self.reads += 1
        if self._gpu is not None:
            self._gpu_tick(groups)

    def _gpu_tick(self, groups):
        from nvml import NvmlError
        try:
            used, util = self._gpu.processes(), self._gpu.utilisation()
        except NvmlError:
            return  # a reading missed, not the run
        sums = {"device": sum(used.values())}
        sums.update({g: sum(used.get(p, 0) for p in dict.fromkeys(pids))
                     for g, pids in groups.items()})
        for g, v in sums.items():
            self.gpu_peak[g] = max(self.gpu_peak.get(g, 0), v)
        for pid, b in used.items():
            self.gpu_per_pid[pid] = max(self.gpu_per_pid.get(pid, 0), b)
        if sums["device"] > 0:
            self.gpu_util_held.append(util)
        self.gpu_reads += 1


def gpu_figures(reader):
    """What an OutsideReader with a GPU saw of a run: the peak of the device's compute processes'
    summed GPU memory, that of each group's, each process's peak (sorted), the largest, and the
    device's mean utilisation while any process held memory there; {} when NVML was never read
    (unknown, not 0)."""
    if not reader.gpu_reads:
        return {}
    per = sorted(reader.gpu_per_pid.values())
    held = reader.gpu_util_held
    return {"peak_sum_bytes": reader.gpu_peak["device"],
            "peak_by_group_bytes": {g: v for g, v in reader.gpu_peak.items() if g != "device"},
            "per_process_bytes": per, "largest_process_bytes": per[-1] if per else None,
            "util_mean_percent": statistics.mean(held) if held else None,
            "reads": reader.gpu_reads}


def alive(pid):
    """Whether pid runs (a zombie, ended but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def nvml_device():
    """Device 0 through NVML (bench/nvml.py: libnvidia-ml.so.1 or $SHOAL_NVML_LIBRARY)."""
    from nvml import Device
    return Device(0)


class Started:
    """One run under way (see the module's docstring). `others`: pids not read but killed with
    the run's tree when it outlives the comparison's run_timeout_s (e.g. a `shoal submit`
    waiting on it)."""

    def __init__(self, wait, roots=(), below=(), groups=None, close=None, others=()):
        self.wait, self.roots, self.below, self.groups, self.close = (
            wait, list(roots), list(below), groups, close)
        self.others = list(others)

    def kill(self, grace_s=5.0):
        """Ends every process of the run (a daemon in `below` itself spared: its close() stops
        it), so that wait() returns: SIGTERM first, then SIGKILL to what is left after grace_s.
        SIGTERM lets Shoal's leader clean up, and Python's multiprocessing resource tracker,
        which ignores it, outlive the reference's processes and unlink the named semaphores
        they leave in /dev/shm (a SIGKILL to it leaves them there)."""
        pids = self.which()["tree"] + self.others
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            deadline = time.time() + grace_s
            while sig == signal.SIGTERM and time.time() < deadline and any(map(alive, pids)):
                time.sleep(0.1)
            pids = [p for p in pids if alive(p)]

    def which(self):
        tree = [p for r in self.roots for p in [r] + descendants(r)]
        tree += [p for b in self.below for p in descendants(b)]
        return {"tree": tree, **(self.groups() if self.groups else {})}


class Side:
    def __init__(self, key, label, start, shoal):
        self.key, self.label, self.start, self.shoal = key, label, start, shoal


def point_key(point):
    return json.dumps(point, sort_keys=True)


def cell(xs, fmt):
    """("median [min-max]", median) of xs; ("-", None) without any."""
    if not xs:
        return "-", None
    m = statistics.median(xs)
    return f"{fmt(m)} [{fmt(min(xs))}-{fmt(max(xs))}]", m


def ratio(a, b):
    return f"{a / b:.2f}" if a is not None and b else "-"


def mib(v):
    return f"{v / 2**20:.0f}"


def sps(v):
    return f"{v:.1f}" if v < 100 else f"{v:.0f}"


def own_pss_check(side, ok):
    """An extra column: a Shoal side's own peak PSS sum (figure self_peak_pss_sum_bytes) over the
    reader's peak over the same processes (group "experiment"), median over ok runs."""
    xs = [r["figures"]["self_peak_pss_sum_bytes"] / r["reader"]["experiment"]["pss"]
          for r in ok if side.shoal and r["figures"].get("self_peak_pss_sum_bytes")
          and r["reader"].get("experiment", {}).get("pss")]
    return f"{statistics.median(xs):.3f}" if xs else "-"


class Comparison:
    def __init__(self, out, points, sides, repeats, settings, sample_ms=SAMPLE_MS, context=None,
                 describe=None, gpu=False, run_timeout_s=None):
        self.out, self.points, self.sides, self.repeats = out, points, sides, repeats
        self.sample_ms = sample_ms
        # The cores are the plan's too: a resume on another machine would mix its runs in.
        self.plan = {"points": points, "sides": [s.key for s in sides], "repeats": repeats,
                     "sample_ms": sample_ms, "settings": settings, "cpus": os.cpu_count()}
        self.gpu, self.run_timeout_s = gpu, run_timeout_s
        if gpu:  # only then, so that a plan of a CPU comparison stays what it was
            self.plan["gpu_reader"] = "nvml"
        self.context = context or {}
        self.describe = describe or (lambda p: " ".join(str(v) for v in p.values()))
        self.raw_path = os.path.join(out, "raw.jsonl")
        self._check_plan()

    def _check_plan(self):
        """Writes plan.json, or refuses a plan other than the one OUT's runs were taken with."""
        os.makedirs(self.out, exist_ok=True)
        path = os.path.join(self.out, "plan.json")
        if os.path.exists(path):
            with open(path) as f:
                before = json.load(f)
            mine = json.loads(json.dumps(self.plan))  # tuples as lists, as stored
            differ = sorted(k for k in mine if k != "settings" and before.get(k) != mine[k])
            differ += sorted(f"settings.{k}" for k in set(mine["settings"]) |
                             set(before.get("settings", {}))
                             if before.get("settings", {}).get(k) != mine["settings"].get(k))
            if differ:
                sys.exit(f"{self.out} holds runs of another plan ({', '.join(differ)}): give "
                         "another output folder, or the same arguments to resume")
            return
        with open(path, "w") as f:
            json.dump({**self.plan, "context": self.context,
                       "written": time.strftime("%Y-%m-%d %H:%M:%S")}, f, indent=1)

    def _records(self):
        """{(point key, repeat): {side: run}}: each (point, repeat) that one session ran whole,
        that session's runs (the first such session)."""
        by = {}
        if os.path.exists(self.raw_path):
            with open(self.raw_path) as f:
                for line in f:
                    try:
                        r = json.loads(line)
                    except ValueError:
                        continue  # a line cut short when the harness was killed
                    unit = (point_key(r["point"]), r["repeat"], r["session"])
                    by.setdefault(unit, {})[r["side"]] = r
        keys = {s.key for s in self.sides}
        whole = {}
        for (p, repeat, _), runs in by.items():
            if keys <= set(runs) and (p, repeat) not in whole:
                whole[(p, repeat)] = runs
        return whole

    def _one(self, side, point, repeat, session, device=None):
        run = {"session": session, "side": side.key, "point": point, "repeat": repeat}
        t0, started, reader, figures = time.time(), None, None, {}
        try:
            started = side.start(dict(point))
            with OutsideReader(self.sample_ms, started.which, device) as reader, \
                    self._limit(started) as limit:
                figures = started.wait()
            if limit.is_set():
                figures = {**figures, "ok": False, "error": f"no result within "
                           f"{self.run_timeout_s} s: the run's processes were killed"}
        except Exception as e:  # recorded as a failed run, the others go on
            figures = {"ok": False, "error": f"{type(e).__name__}: {e}",
                       "traceback": traceback.format_exc()[-2000:]}
        finally:
            if started is not None and started.close is not None:
                try:
                    started.close()
                except Exception as e:  # the run is still recorded, its side's close failing
                    figures = {**figures, "ok": False,
                               "error": f"closing it: {type(e).__name__}: {e}"}
        ok, error = bool(figures.pop("ok", False)), figures.pop("error", None)
        run.update(ok=ok, error=None if ok else str(error or "failed"),
                   wall_s=round(time.time() - t0, 2), figures=figures,
                   reader=reader.peak if reader else {}, reads=reader.reads if reader else 0)
        if self.gpu:
            run["gpu"] = gpu_figures(reader) if reader else {}
        return run

    @contextlib.contextmanager
    def _limit(self, started):
        """Kills `started`'s processes once it has run run_timeout_s (if set); yields an Event
        set when it did. A run that hangs (a PyTorch point did on an H100) must not hold up
        the comparison, nor leave its processes on the device."""
        fired = threading.Event()

        def expire():
            fired.set()
            started.kill()
        timer = threading.Timer(self.run_timeout_s, expire) if self.run_timeout_s else None
        if timer:
            timer.start()
        try:
            yield fired
        finally:
            if timer:
                timer.cancel()

    def run(self):
        """Every (point, repeat) not yet run whole, each side once, appended to raw.jsonl."""
        # NVML that cannot be read stops the comparison before its first run.
        with (nvml_device() if self.gpu else contextlib.nullcontext()) as device:
            self._run(device)

    def _run(self, device):
        done = self._records()
        session = f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}"
        n = len(self.sides)
        # A harness killed mid-line left a line without its end: the next record starts anew.
        if os.path.exists(self.raw_path) and os.path.getsize(self.raw_path) > 0:
            with open(self.raw_path, "rb") as f:
                f.seek(-1, os.SEEK_END)
                cut_short = f.read(1) != b"\n"
            if cut_short:
                with open(self.raw_path, "a") as f:
                    f.write("\n")
        with open(self.raw_path, "a") as raw:
            for repeat in range(self.repeats):
                for point in self.points:
                    if (point_key(point), repeat) in done:
                        continue
                    for side in self.sides[repeat % n:] + self.sides[:repeat % n]:
                        run = self._one(side, point, repeat, session, device)
                        raw.write(json.dumps(run) + "\n")
                        raw.flush()
                        print(f"{self.describe(point)} repeat {repeat} {side.key}: "
                              f"{'ok' if run['ok'] else 'FAILED ' + run['error'][:300]}, "
                              f"{run['wall_s']} s", file=sys.stderr)

    def runs(self):
        """{(point key, side key): [run]} over every (point, repeat) run whole."""
        out = {}
        for (p, _), runs in sorted(self._records().items(), key=lambda kv: kv[0][1]):
            for side, r in runs.items():
                out.setdefault((p, side), []).append(r)
        return out

    def summary(self, columns, extra=(), heading=None, notes=()):
        """Markdown: one row per point and side (see the module's docstring). `columns`: the
        point's keys shown; `extra`: (title, fn(side, ok runs) -> str) columns; `heading`:
        fn(point) -> a section title, a new section whenever it changes; `notes`: lines first."""
        runs = self.runs()
        pytorch = [s for s in self.sides if not s.shoal]
        measures = self._measures()
        extra = list(extra) + (GPU_COLUMNS if self.gpu else [])
        head = list(columns) + ["side"] + [title for title, _, _, _ in measures] + ["ok / failed"]
        for _, _, _, short in measures:
            head += [f"{short} Shoal / {s.key}" for s in pytorch]
        head += [t for t, _ in extra]
        lines = list(notes) + ["Sides: " + "; ".join(f"{s.key} = {s.label}" for s in self.sides)
                               + f". Medians [min-max] of the runs that succeeded; PSS: this "
                               f"harness's reader, every {self.sample_ms} ms"
                               + (", GPU memory: its NVML reader, every compute process on the "
                                  "device, at the same ticks" if self.gpu else "") + ".", ""]
        section = None
        for i, point in enumerate(self.points):
            title = heading(point) if heading else None
            if i == 0 or title != section:
                lines += ([""] if i else []) + ([title, ""] if title else [])
                lines += ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
                section = title
            cells, oks = {}, {}
            for s in self.sides:
                rs = runs.get((point_key(point), s.key), [])
                oks[s.key] = (ok := [r for r in rs if r["ok"]], len(rs) - len(ok))
                cells[s.key] = [cell([v for v in map(value, ok) if v], fmt)
                                for _, value, fmt, _ in measures]
            for s in self.sides:
                ok, n_failed = oks[s.key]
                row = [str(point.get(c, "")) for c in columns] + [s.label]
                row += [text for text, _ in cells[s.key]] + [f"{len(ok)} / {n_failed}"]
                for j in range(len(measures)):
                    row += [ratio(cells[s.key][j][1], cells[p.key][j][1]) if s.shoal else ""
                            for p in pytorch]
                row += [fn(s, ok) for _, fn in extra]
                lines.append("| " + " | ".join(row) + " |")
        return "\n".join(lines)

    def _measures(self):
        """(column, value of a run, format, short name for its ratio) of each figure a summary
        gives a median and ratios of."""
        out = [("samples/s", lambda r: r["figures"].get("samples_per_sec"), sps, "samples/s"),
               ("peak PSS MiB (outside)", lambda r: r["reader"].get("tree", {}).get("pss"), mib,
                "PSS")]
        if self.gpu:
            out.append(("peak GPU MiB (NVML)", lambda r: r.get("gpu", {}).get("peak_sum_bytes"),
                        mib, "GPU"))
        return out

    def write_summary(self, *args, **kwargs):
        """summary(...) written to OUT/summary.md, and returned."""
        text = self.summary(*args, **kwargs)
        with open(os.path.join(self.out, "summary.md"), "w") as f:
            f.write(text + "\n")
        return text


PYTORCH_LABELS = {"users": "PyTorch as users run it", "best": "PyTorch best tuning"}


def settings_of(args):
    """A script's arguments as its plan's settings: all but where it writes, how many repeats
    and which build (none of which changes what a run measures)."""
    return {k: v for k, v in vars(args).items() if k not in ("out", "repeats", "bin")}


def pytorch_side(tuning, start):
    """The side of PyTorch at `tuning` ("users" or "best"), its runs started by start(point)."""
    return Side(tuning, PYTORCH_LABELS[tuning], start, shoal=False)


def reference_figures(r, err, threads, **more):
    """What a reference's last JSON line `r` says, as a side's figures: ok, the error (its
    stderr's tail) if not, samples/s, the threads it was given (None: its own choice), and
    `more`."""
    ok = bool(r.get("ok"))
    return {"ok": ok, "error": None if ok else err, "samples_per_sec": r.get("samples_per_sec"),
            "threads": threads or None, **more}


def shoal_figures(e, err, daemon_pss, **more):
    """What a Shoal side's run says, from `shoal submit --wait --json`'s experiment `e` (and the
    CLI's stderr `err`): ok, the error if not, samples/s, Shoal's own peak PSS sum, the
    experiment's id and threads, shoald's own PSS, and `more`."""
    ok = e.get("state") == "SUCCEEDED"
    r = e.get("result", {})
    return {"ok": ok, "error": None if ok else (e.get("error") or err[-500:]),
            "samples_per_sec": r.get("samples_per_sec"),
            "self_peak_pss_sum_bytes": r.get("peak_pss_sum_bytes"),
            "experiment": e.get("id"), "threads": e.get("spec", {}).get("threads"),
            "daemon_pss_bytes": daemon_pss, **more}


def own_gpu_check(side, ok):
    """An extra column: a Shoal side's own peak GPU memory (figure self_peak_gpu_memory_bytes,
    NVML summed over its experiment's processes by shoald) over the outside reader's NVML peak
    over the same processes (group "experiment"), median over ok runs."""
    def outside(r):
        return r.get("gpu", {}).get("peak_by_group_bytes", {}).get("experiment")
    xs = [r["figures"]["self_peak_gpu_memory_bytes"] / outside(r)
          for r in ok if side.shoal and r["figures"].get("self_peak_gpu_memory_bytes")
          and outside(r)]
    return f"{statistics.median(xs):.3f}" if xs else "-"


def concurrent_steps(side, ok):
    """An extra column: the concurrent steps a Shoal side's hogwild runs took, and why (Shoal's
    own words: its figures concurrent_steps and concurrent_steps_why)."""
    seen = {(r["figures"].get("concurrent_steps"), r["figures"].get("concurrent_steps_why") or "")
            for r in ok if side.shoal}
    return "; ".join(f"{n}" + (f" ({why})" if why else "") for n, why in sorted(seen, key=str))


def figure_column(title, key, fmt="{:.3f}", part="figures"):
    """An extra summary column: the median over a side's ok runs of its figure `key` (of the
    run's `part`: its side's "figures", or the reader's "gpu"), "-" where none has it; `fmt` a
    format string or a function."""
    def column(side, ok):
        xs = [r[part][key] for r in ok if r.get(part, {}).get(key) is not None]
        if not xs:
            return "-"
        m = statistics.median(xs)
        return fmt(m) if callable(fmt) else fmt.format(m)
    return (title, column)


# The summary's columns of a comparison with a GPU reader, beside its GPU memory and ratios.
GPU_COLUMNS = [figure_column("largest GPU process MiB", "largest_process_bytes", mib, "gpu"),
               figure_column("GPU util % while held", "util_mean_percent", "{:.0f}", "gpu")]


def turns_sides(device):
    """The Shoal sides a hogwild comparison runs, as (turns, key, label): on the CPU two, labelled,
    with Shoal's turns (its default: only as many workers step at once as the cores hold) and
    with every worker at once (`--concurrent-steps W`), which is the program PyTorch's W
    processes run; on CUDA one, every worker at once (no step arena is shared there)."""
    if device == "cuda":
        return [(False, "shoal", "Shoal (every worker at once, its default on CUDA)")]
    return [(False, "shoal-all", "Shoal, every worker at once"), (True, "shoal-turns", "Shoal, turns")]


def all_at_once_flags(turns, device, workers):
    """Shoal's flags for a side of turns_sides(): every worker at once is --concurrent-steps W."""
    return [] if turns or device == "cuda" else ["--concurrent-steps", str(workers)]


def shoal_submit_side(bin_dir, argv, more=None, key="shoal", label="Shoal",
                      start_of=lambda p: p.get("start", "fork"), daemon_extra=()):
    """A Shoal side: each run on a fresh, settled shoald of its own (shoal_bench.fresh_shoald,
    stopped after it), `shoal submit ARGV(point) --wait --json`. Its figures: shoal_figures(),
    and on success more(experiment, point) over them. The reader sums everything below shoald
    (shoald kept apart) and, as group "experiment", the processes Shoal's own figure counts
    (start_of(point): the start method, to tell the forkserver's)."""
    from shoal_bench import fresh_shoald, shoal_processes, submit_finished, submit_started

    def start(p):
        stack = contextlib.ExitStack()
        cli = stack.enter_context(fresh_shoald(bin_dir, daemon_extra))
        try:  # before any `--` in argv: what follows it is a command's own
            cmd = [os.path.join(bin_dir, "shoal"), "--socket", cli.socket, "submit", "--wait",
                   "--json", *argv(p)]
        except BaseException:
            stack.close()
            raise
        proc = submit_started(cmd, stack)

        def wait():
            e, err, daemon_pss = submit_finished(proc, cli.pid)
            figures = shoal_figures(e, err, daemon_pss)
            if figures["ok"] and more:
                figures.update(more(e, p))
            return figures
        return Started(wait, below=[cli.pid], close=stack.close, others=[proc.pid],
                       groups=lambda: {"experiment": shoal_processes(cli.pid, start_of(p))})
    return Side(key, label, start, shoal=True)


def reference_cmd_side(key, label, argv, more=None, env=None):
    """A PyTorch side: each run the command ARGV(point) (a bench/reference_*.py printing one JSON
    line), with `env(point)` added to the environment. Its figures: reference_figures() (the
    samples/s of that line, where it has one), and on success more(line, point) over them. The
    reader sums the command and every process below it."""
    from shoal_bench import reference_finished

    def start(p):
        proc = subprocess.Popen(argv(p), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, **(env(p) if env else {})})

        def wait():
            r, err = reference_finished(proc)
            # These references print no "ok": a JSON line and exit 0 is success
            # (reference_finished marks anything else failed).
            figures = reference_figures({"ok": True, **r}, err, r.get("threads"))
            if figures["ok"] and more:
                figures.update(more(r, p))
            return figures
        return Started(wait, roots=[proc.pid])
    return Side(key, label, start, shoal=False)
