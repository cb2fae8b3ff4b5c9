#!/usr/bin/python3
"""Draws a Shoal trace (`shoal trace ID`) with docs/trace-viewer.html in headless Chromium: a
PNG of its tracks, and what the page drew (tracks, slices, counter points) as JSON on stdout.
Perfetto's UI cannot be fetched here; this is the check that the file draws.

  bench/trace_view.py run.json run.png
"""
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
CHROMIUM = ["/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--host-resolver-rules=MAP * ~NOTFOUND"]


def page_with(trace_text: str, folder: str) -> str:
    viewer = open(os.path.join(ROOT, "docs", "trace-viewer.html")).read()
    # Inside a <script>: "</" would end it early.
    page = viewer.replace("/*TRACE*/null", trace_text.replace("</", "<\\/"), 1)
    path = os.path.join(folder, "trace.html")
    with open(path, "w") as f:
        f.write(page)
    return path


def view(trace_path: str, png: str) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        page = page_with(open(trace_path).read(), folder)
        profile = "--user-data-dir=" + os.path.join(folder, "chromium")
        dom = subprocess.run(CHROMIUM + [profile, "--dump-dom", "file://" + page],
                             capture_output=True, text=True, timeout=120)
        if dom.returncode != 0:
            raise SystemExit("chromium --dump-dom failed: " + dom.stderr[-2000:])
        body = re.search(r"<body([^>]*)>", dom.stdout)
        drawn = dict(re.findall(r'data-(\w+)="(\d+)"', body.group(1) if body else ""))
        shot = subprocess.run(CHROMIUM + [profile, "--window-size=1400,900",
                                          "--screenshot=" + os.path.abspath(png),
                                          "file://" + page],
                              capture_output=True, text=True, timeout=120)
        if shot.returncode != 0:
            raise SystemExit("chromium --screenshot failed: " + shot.stderr[-2000:])
    return {k: int(v) for k, v in drawn.items()}


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    print(json.dumps(view(sys.argv[1], sys.argv[2])))
