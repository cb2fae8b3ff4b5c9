#!/usr/bin/env python3
"""Per point, the range over a figure soak's runs of Shoal / the test's independent reader.

    bench/figures_soak_summary.py bench/results/<date>/figures_soak_<name>

Reads every run-N.log that bench/figures_soak.sh kept and prints one line a FiguresE2E point:
the peak PSS, RSS and VmHWM sums' ratios, the peak USS sum's (USS/held and USS/highest where the
USS peak is a moment, tested against the level the reader saw held and its highest read), the
leader's own peak PSS against the reader's highest read of it, and the sampler's CPU. Nothing is
dropped: a point a run failed counts as well, and `n` says how many runs printed each figure.
"""
import pathlib
import re
import sys

RATIO = re.compile(r"^  (PSS|RSS|USS|VmHWM): Shoal ([\d.]+) MiB, independent ([\d.]+) MiB, ratio")
MOMENT = re.compile(r"^  (PSS|RSS|USS): Shoal ([\d.]+) MiB, independent held ([\d.]+) MiB, "
                    r"highest ([\d.]+) MiB")
SAMPLER = re.compile(r"^  sampler ([\d.]+)% of a core")
LEADER = re.compile(r"^  leader peak PSS: Shoal ([\d.]+) MiB, independent ([\d.]+) MiB")
RUN = re.compile(r"^\[ RUN +\] \S*FiguresE2E\S*/(\w+)")


def parse(log, points):
    point = None
    for line in log.read_text(errors="replace").splitlines():
        if m := RUN.match(line):
            point = points.setdefault(m.group(1), {})
            continue
        if point is None:
            continue
        add = lambda key, value: point.setdefault(key, []).append(value)
        if m := MOMENT.match(line):
            shoal, held, highest = map(float, m.group(2, 3, 4))
            add(m.group(1) + "/held", shoal / held)
            add(m.group(1) + "/highest", shoal / highest)
        elif m := RATIO.match(line):
            add(m.group(1), float(m.group(2)) / float(m.group(3)))
        elif m := LEADER.match(line):
            add("leader", float(m.group(1)) / float(m.group(2)))
        elif m := SAMPLER.match(line):
            add("cpu%", float(m.group(1)))


def main():
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    logs = sorted(out.glob("run-*.log"), key=lambda p: int(re.sub(r"\D", "", p.stem)))
    if not logs:
        sys.exit(f"no run-N.log in {out}")
    points = {}
    for log in logs:
        parse(log, points)
    print(f"{len(logs)} runs in {out}")
    for name, figures in points.items():
        cols = [f"{k} {min(v):.3f}-{max(v):.3f} (n={len(v)})" for k, v in figures.items()]
        print(name, " ".join(cols))


if __name__ == "__main__":
    main()
