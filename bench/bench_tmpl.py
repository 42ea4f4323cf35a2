#!/usr/bin/env python3
"""Chat-template render time per request on the largest templates of
llama.cpp's corpus, anvil's interpreter (tests/tool_tmpl) against jinja2.

    bench/bench_tmpl.py [--top 8] [-r 200] [--json]

For each of the --top largest templates (bytes of source) and the
"calls" conversation of tests/py/tmplref.py (tools, parallel calls, tool
results; the conversation that makes templates do the most), anvil's
rendering is first checked against jinja2's (a bench that reports a
number for a wrong rendering reports nothing: such a template is marked
"mismatch" and not timed), then rendered -r times in one tool_tmpl --batch
process; the process's start-up (a batch of one) is subtracted. jinja2
is timed rendering the compiled template the same number of times
(compiling once, as a server caches it). One JSON line per template with
--json; a table otherwise. A benchmark, never a test.
"""
import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))

from tmplref import NOW, conversations, environment, jinja_render  # noqa: E402
from tokutil import sdist_models  # noqa: E402


def commit():
    p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                       text=True)
    return p.stdout.strip()


def batch_time(tool, tmpl_path, ctx_path, n, d):
    lst = os.path.join(d, f"list{n}")
    with open(lst, "w") as f:
        for i in range(n):
            f.write(f"{tmpl_path}\t{ctx_path}\t{os.path.join(d, 'out')}\n")
    t0 = time.perf_counter()
    subprocess.run([tool, "--batch", lst, str(NOW)], check=True)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=8)
    ap.add_argument("-r", type=int, default=200)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "release", "tests", "tool_tmpl"))
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(sdist_models(), "templates", "*.jinja")),
                   key=os.path.getsize, reverse=True)[:a.top]
    ctx = conversations()["calls-gen1"]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        cpath = os.path.join(d, "c.json")
        with open(cpath, "w") as f:
            json.dump(ctx, f)
        for path in files:
            with open(path, encoding="utf-8", newline="") as f:
                src = f.read()
            row = {"bench": "tmpl_render", "template": os.path.basename(path), "bytes": len(src),
                   "conversation": "calls-gen1", "reps": a.r, "commit": commit(),
                   "cpu": platform.processor() or platform.machine()}
            ok, want = jinja_render(src, ctx)
            lst = os.path.join(d, "one")
            with open(lst, "w") as f:
                f.write(f"{path}\t{cpath}\t{os.path.join(d, 'chk')}\n")
            subprocess.run([a.tool, "--batch", lst, str(NOW)], check=True)
            got_ok = os.path.exists(os.path.join(d, "chk"))
            got = open(os.path.join(d, "chk"), encoding="utf-8").read() if got_ok else None
            for p in ("chk", "chk.err"):
                if os.path.exists(os.path.join(d, p)):
                    os.remove(os.path.join(d, p))
            if not ok or not got_ok or got != want:
                row["status"] = "mismatch" if ok or got_ok else "both fail"
                rows.append(row)
                continue
            base = min(batch_time(a.tool, path, cpath, 1, d) for _ in range(3))
            full = min(batch_time(a.tool, path, cpath, a.r + 1, d) for _ in range(3))
            row["anvil_us"] = round((full - base) / a.r * 1e6, 1)
            t = environment().from_string(src)
            t0 = time.perf_counter()
            for _ in range(a.r):
                t.render(**ctx)
            row["jinja2_us"] = round((time.perf_counter() - t0) / a.r * 1e6, 1)
            row["out_bytes"] = len(want.encode())
            row["status"] = "ok"
            rows.append(row)
    if a.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(f"{'template':60} {'bytes':>7} {'anvil us':>9} {'jinja2 us':>9}")
        for r in rows:
            print(f"{r['template'][:60]:60} {r['bytes']:7} {r.get('anvil_us', r['status']):>9} "
                  f"{r.get('jinja2_us', ''):>9}")


if __name__ == "__main__":
    main()
