#!/usr/bin/env python3
"""The "real output" blocks of README.md and docs/: checked against this build, or rewritten from it.

An example is a fenced block whose first line is `$ shoal ...`: each `$ ` line (a trailing `\\`
continues it) is a command, the lines after it what it printed. A line `...` marks an excerpt.

  deploy/examples.py --check   # run every example; fail when what a command prints has another shape
  deploy/examples.py --write   # run every example and put what it printed in its block

The shape of an output is its keys, in order: `experiment`/`uploaded`/`submitted` lines by their
first word, field lines by their label (`  memory      ...` -> `memory`), `  >> label:` lines,
`Word: ` lines by their word, headings and the header rows of tables. Figures, ids and table rows may differ from machine
to machine and run to run; keys may not. An excerpt's keys must appear in order among the
printed ones; a whole block's must equal them. --write keeps an excerpt an excerpt: only the
printed parts whose key the block shows (a heading and all below it up to the next heading, else a
key's line and the lines up to the next key).

Commands run in a scratch folder holding the names the examples use (mynet.pt: the tests' small
CNN; train.py: bench/command_train.py; out/), against --socket's shoald or, without it, one this
script starts (with --allow-commands) and stops. In a command, `PYTHONPATH=...` points at this
checkout's client/python and an experiment or sweep id is the one the file's previous example
printed.
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ID = re.compile(r"\b[xs][0-9a-f]{10}\b")
# --quick: what each example's length is cut to (what it prints, not how long it takes, is checked).
# Repeats stay 2 where there were more: a report says how it took repeats only when there are.
QUICK = {"--repeats": 2, "--batches": 2, "--epoch-samples": 128, "--iterations": 10}


class Example:
    def __init__(self, path, start):
        self.path, self.start = path, start  # the line of its first `$ `, 0-based
        self.end = start  # one past its last line
        self.commands = []  # [command text, [printed lines], [its lines as written]]


def examples_in(path):
    """The examples of one Markdown file, in order."""
    lines = open(path).read().split("\n")
    out, fenced, current, continued = [], False, None, False
    for i, line in enumerate(lines):
        if line.startswith("```"):
            if current:
                current.end = i
            fenced, current, continued = not fenced, None, False
            continue
        if not fenced:
            continue
        if continued:
            current.commands[-1][0] += " " + line.strip().rstrip("\\").strip()
            current.commands[-1][2].append(line)
            continued = line.endswith("\\")
        elif line.startswith("$ shoal ") and (current or lines[i - 1].startswith("```")):
            if current is None:
                current = Example(path, i)
                out.append(current)
            current.commands.append([line[2:].rstrip("\\").strip(), [], [line]])
            continued = line.endswith("\\")
        elif current:
            current.commands[-1][1].append(line)
    return out


def key(line, next_line=""):
    """A printed line's key, or None for a line that is content (a row, a value, prose)."""
    for word in ("experiment ", "uploaded ", "submitted "):
        if line.startswith(word):
            return word.strip()
    if line.startswith("#"):  # a report's headings, "# Sweep ID: state" by its first words
        return line if line.startswith("## ") else " ".join(line.split()[:2])
    if re.match(r"[A-Za-z]+: ", line):  # "Fixed: ...", "Columns: ...", "GPUs: ..."
        return line[:line.index(":") + 1]
    if line.startswith("  ==="):  # multi_model's block of a variant
        return "==="
    if line.startswith("|") and next_line.startswith("| ---"):
        return header_shape(line)
    if line.startswith("  >> "):
        return ">> " + re.split(r"[:\d]", line[5:], maxsplit=1)[0].strip()
    if len(line) > 3 and line.startswith("  ") and line[2].isalpha():
        # "  run 1   x0123456789 ..." (a repeated point's runs): the label, not its number
        return re.sub(r"\s+\d.*$", "", line[2:13].strip())
    return None


def header_shape(row):
    """A table's header row with its run of numbered columns as one `#` (the steps or seconds a
    curve was read at, the worker counts of a sweep: the run's, not the table's shape)."""
    out = []
    for cell in row.strip("|").split("|"):
        cell = cell.strip()
        if re.fullmatch(r"[\d.]+( s| ms)?", cell):
            cell = "#"
        if not (cell == "#" and out and out[-1] == "#"):
            out.append(cell)
    return "| " + " | ".join(out) + " |"


def keys(lines):
    return [k for i, l in enumerate(lines)
            if (k := key(l, lines[i + 1] if i + 1 < len(lines) else "")) is not None]


def units(lines):
    """(key, lines) for each part of `lines`: a heading and all below it up to the next heading
    (its tables are its own), else a key's line and the content lines up to the next key."""
    out, in_section = [], False
    for i, line in enumerate(lines):
        k = key(line, lines[i + 1] if i + 1 < len(lines) else "")
        if line.startswith("#"):  # "# Sweep ID: state" ends a section; "## title" starts one
            in_section = line.startswith("## ")
        if not out or (k is not None and (line.startswith("#") or not in_section)):
            out.append((k, []))
        out[-1][1].append(line)
    return out


def is_subsequence(small, big):
    it = iter(big)
    return all(any(k == b for b in it) for k in small)


def printed(result):
    """What a command printed that an example shows: stderr's `uploaded` lines, then stdout from
    the record on (the live lines of --wait before it are not shown)."""
    err = [l for l in result.stderr.splitlines() if l.startswith("uploaded ")]
    out = result.stdout.rstrip("\n").split("\n")
    for i, line in enumerate(out):
        if line.startswith(("experiment ", "# Sweep ")):
            return err + out[i:]
    return err + out


def rewrite(shown, got):
    """The block's new lines for a command: all it printed, or for an excerpt the parts it shows."""
    if "..." not in shown:
        return got
    wanted, out, skipped = set(keys(shown)), [], shown[0] == "..."
    for k, lines in units(got):
        if k in wanted:
            if skipped and (not out or out[-1] != "..."):
                out.append("...")
            out += lines
            skipped = False
        else:
            skipped = True
    if skipped or shown[-1] == "...":
        out.append("...")
    return out


def cut(value, most):
    """A --quick value: each number of a comma list at most `most`, still distinct (an axis stays
    an axis of as many points); anything else as it is."""
    items = value.split(",")
    if not all(x.isdigit() for x in items):
        return value
    out = []
    for x in items:
        v = min(int(x), most)
        while v in out:
            v += 1
        out.append(v)
    return ",".join(map(str, out))


class Runner:
    def __init__(self, shoal, socket, scratch, quick=False):
        self.shoal, self.socket, self.scratch, self.last_id = shoal, socket, scratch, None
        self.quick = quick

    def resolve_ids(self, text):
        return ID.sub(self.last_id, text) if self.last_id else text

    def args(self, command):
        words = shlex.split(command)[1:]  # words[0] is `shoal`
        out = []
        ours = True  # Shoal's flags; after `--`, the user's program's, left as written
        for i, w in enumerate(words):
            ours = ours and w != "--"
            if ours and self.quick and i > 0 and words[i - 1] in QUICK:
                w = cut(w, QUICK[words[i - 1]])
            if w.startswith("PYTHONPATH="):
                w = "PYTHONPATH=" + os.path.join(ROOT, "client", "python")
            out.append(self.resolve_ids(w))  # as its line is written back (resolve_ids)
        return out

    def run(self, command):
        env = dict(os.environ, SHOAL_SOCKET=self.socket)
        started = time.monotonic()
        r = subprocess.run([self.shoal, *self.args(command)], cwd=self.scratch, env=env,
                           capture_output=True, text=True, timeout=600)
        self.seconds = time.monotonic() - started  # what each example costs CI, printed by --check
        if r.returncode != 0:
            raise RuntimeError(f"`{command}` exited {r.returncode}:\n{r.stdout}{r.stderr}")
        ids = ID.findall(r.stdout + r.stderr)
        if ids and command.split()[1] != "get":  # a sweep's id, else its experiment's
            self.last_id = next((i for i in ids if i.startswith("s")), ids[0])
        return printed(r)


def check(example, runner):
    """The problems of one example: each command whose printed keys do not match its block's."""
    problems = []
    for command, shown, _ in example.commands:
        try:
            got = runner.run(command)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            problems.append(f"{example.path}:{example.start + 1}: {e}")
            continue
        print(f"{example.path}:{example.start + 1}: {runner.seconds:.1f} s `{command[:70]}`")
        want, have = keys(shown), keys(got)
        ok = is_subsequence(want, have) if "..." in shown else want == have
        if not ok:
            problems.append(f"{example.path}:{example.start + 1}: `{command}`\n"
                            f"  the block's keys: {want}\n  printed keys:     {have}")
    return problems


def write(path, found, runner):
    """Runs the file's examples in order (a `get` takes the id printed before it), then puts
    what they printed in their blocks, the last block first so earlier line numbers stay right;
    a command that fails leaves the file as it was."""
    lines = open(path).read().split("\n")
    new = []
    for ex in found:
        ex_lines = []
        for command, shown, written in ex.commands:
            got = runner.run(command)  # before its lines: they show the id it ran with
            ex_lines += [runner.resolve_ids(l) for l in written] + rewrite(shown, got)
        new.append(ex_lines)
    for ex, ex_lines in reversed(list(zip(found, new))):
        lines[ex.start:ex.end] = ex_lines
    open(path, "w").write("\n".join(lines))


def markdown_files(root):
    files = [os.path.join(root, "README.md")]
    for folder, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".md")]
    return files


def scratch_folder(made_models):
    tmp = tempfile.mkdtemp(prefix="shoal-examples.")
    os.makedirs(os.path.join(tmp, "out"))
    shutil.copy(os.path.join(ROOT, "bench", "command_train.py"), os.path.join(tmp, "train.py"))
    if made_models:
        shutil.copy(os.path.join(made_models, "bench_cnn.pt"), os.path.join(tmp, "mynet.pt"))
    else:
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tests", "models", "make_models.py"),
                        tmp], check=True, capture_output=True)
        os.rename(os.path.join(tmp, "bench_cnn.pt"), os.path.join(tmp, "mynet.pt"))
    return tmp


def start_daemon(bin_dir, tmp):
    socket = os.path.join(tmp, "s.sock")
    proc = subprocess.Popen([os.path.join(bin_dir, "shoald"), "--socket", socket, "--state-dir",
                             os.path.join(tmp, "state"), "--log-level", "warn",
                             "--allow-commands"])
    for _ in range(100):
        if os.path.exists(socket):
            break
        time.sleep(0.1)
    return proc, socket


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true")
    mode.add_argument("--write", action="store_true")
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--socket", help="a running shoald's (with --allow-commands); else one of ours")
    ap.add_argument("--quick", action="store_true",
                    help="cut repeats, batches, epochs' samples and iterations (--check in CI)")
    ap.add_argument("--models", help="a folder with the tests' made models (bench_cnn.pt)")
    ap.add_argument("files", nargs="*", help="Markdown files (default: README.md and docs/)")
    a = ap.parse_args()
    files = a.files or markdown_files(ROOT)
    scratch = scratch_folder(a.models)
    proc, socket = (None, a.socket) if a.socket else start_daemon(a.bin_dir, scratch)
    problems, count = [], 0
    try:
        for path in files:
            found = examples_in(path)
            runner = Runner(os.path.join(a.bin_dir, "shoal"), socket, scratch, a.quick and a.check)
            count += len(found)
            if a.write and found:
                write(path, found, runner)
            for ex in found if a.check else []:
                problems += check(ex, runner)
    finally:
        if proc:
            proc.terminate()
            proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"{count} examples in {len(files)} files" + (", rewritten" if a.write else ""))
    for p in problems:
        print(p)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
