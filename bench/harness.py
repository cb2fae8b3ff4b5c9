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
users see them.

Runs. Repeat r runs every point in the plan's order; at each point every side runs once, the
order of the sides rotated by r, so no side always runs first or after the same one. Every run
is appended to OUT/raw.jsonl as it ends: session, side, point, repeat, ok, error, wall_s, the
side's figures and the reader's peaks (bytes) and reads. A failed run (ok false, or start/wait
raised) is recorded and counted, never retried. A resume skips each (point, repeat) for which
one session recorded every side, and runs again, whole, every (point, repeat) that no session
completed (a killed run's point): a failing run is never re-run alone. The lines of an
incomplete (point, repeat) stay in raw.jsonl and are left out of the summary.

Summary. Per point and side: samples/s and the reader's peak PSS sum (MiB), each the median
[min-max] over the runs that succeeded, "n ok / n failed", and on each Shoal side's row its
ratios of medians to each PyTorch side (Shoal / PyTorch).

    cmp = Comparison(out, points, sides, repeats, settings, sample_ms=50, context={...})
    cmp.run()
    print(cmp.write_summary(columns=("start", "workers")))
"""
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

from proc_reader import Periodic, descendants, rollup

SAMPLE_MS = 50


class OutsideReader(Periodic):
    """The peak over time of the summed PSS, RSS and USS of each group of pids `which()` names
    ({group: [pid]}), every `every_ms`: peak[group] = {"pss", "rss", "uss"} in bytes."""

    def __init__(self, every_ms, which):
        super().__init__(every_ms)
        self._which = which
        self.peak = {}
        self.reads = 0

    def _tick(self):
        cache = {}
        for group, pids in self._which().items():
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


class Started:
    """One run under way (see the module's docstring)."""

    def __init__(self, wait, roots=(), below=(), groups=None, close=None):
        self.wait, self.roots, self.below, self.groups, self.close = (
            wait, list(roots), list(below), groups, close)

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
                 describe=None):
        self.out, self.points, self.sides, self.repeats = out, points, sides, repeats
        self.sample_ms = sample_ms
        # The cores are the plan's too: a resume on another machine would mix its runs in.
        self.plan = {"points": points, "sides": [s.key for s in sides], "repeats": repeats,
                     "sample_ms": sample_ms, "settings": settings, "cpus": os.cpu_count()}
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

    def _one(self, side, point, repeat, session):
        run = {"session": session, "side": side.key, "point": point, "repeat": repeat}
        t0, started, reader, figures = time.time(), None, None, {}
        try:
            started = side.start(dict(point))
            with OutsideReader(self.sample_ms, started.which) as reader:
                figures = started.wait()
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
        return run

    def run(self):
        """Every (point, repeat) not yet run whole, each side once, appended to raw.jsonl."""
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
                        run = self._one(side, point, repeat, session)
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
        head = list(columns) + ["side", "samples/s", "peak PSS MiB (outside)", "ok / failed"]
        head += [f"samples/s Shoal / {s.key}" for s in pytorch]
        head += [f"PSS Shoal / {s.key}" for s in pytorch] + [t for t, _ in extra]
        lines = list(notes) + ["Sides: " + "; ".join(f"{s.key} = {s.label}" for s in self.sides)
                               + f". Medians [min-max] of the runs that succeeded; PSS: this "
                               f"harness's reader, every {self.sample_ms} ms.", ""]
        section = None
        for i, point in enumerate(self.points):
            title = heading(point) if heading else None
            if i == 0 or title != section:
                lines += ([""] if i else []) + ([title, ""] if title else [])
                lines += ["| " + " | ".join(head) + " |", "| --- " * len(head) + "|"]
                section = title
            medians = {}
            for s in self.sides:
                rs = runs.get((point_key(point), s.key), [])
                ok = [r for r in rs if r["ok"]]
                speed = cell([r["figures"]["samples_per_sec"] for r in ok
                              if r["figures"].get("samples_per_sec")], sps)
                pss = cell([r["reader"]["tree"]["pss"] for r in ok
                            if r["reader"].get("tree", {}).get("pss")], mib)
                medians[s.key] = (speed, pss, len(ok), len(rs) - len(ok), ok)
            for s in self.sides:
                speed, pss, n_ok, n_failed, ok = medians[s.key]
                row = [str(point.get(c, "")) for c in columns]
                row += [s.label, speed[0], pss[0], f"{n_ok} / {n_failed}"]
                for j in (0, 1):  # samples/s, PSS
                    row += [ratio(medians[s.key][j][1], medians[p.key][j][1]) if s.shoal else ""
                            for p in pytorch]
                row += [fn(s, ok) for _, fn in extra]
                lines.append("| " + " | ".join(row) + " |")
        return "\n".join(lines)

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


def figure_column(title, key, fmt="{:.3f}"):
    """An extra summary column: the median over a side's ok runs of its figure `key` ("-" where
    none has it)."""
    def column(side, ok):
        xs = [r["figures"][key] for r in ok if r["figures"].get(key) is not None]
        return fmt.format(statistics.median(xs)) if xs else "-"
    return (title, column)


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
        return Started(wait, below=[cli.pid], close=stack.close,
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
