#!/usr/bin/env python3
"""Run every anvil test and print one closing line: "N passed, N failed".

Layers, fastest first:
  1. C unit tests (cmocka), once per build mode given (release, asan);
  2. Python differential tests (pytest, tests/py) against numpy, the gguf
     package and llama-cpp-python, driving bin/anvil and libanvil.
With --fast (`make check`), the Python layer leaves out the tests marked
`full` (tests/py/conftest.py says which: a second engine, a browser, a
proxy, minutes of work); the unit tests all run. The closing line also
says how long the run took.
Exit status is non-zero when anything failed, a layer could not run, or a
Python test was skipped: `make test` installs every dependency, so a skip
means a layer silently did not run. ANVIL_ALLOW_SKIP=1 (documented in the
README) lets skips pass, for a machine that cannot install something (a
browser, say); the closing line still counts them.

C unit tests report variants the CPU cannot run (AVX-512 on an AVX2
machine) as skipped inside cmocka; those are the expected shape of a
run on that CPU and are not counted here.
"""
import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_unit(mode):
    tdir = os.path.join(ROOT, "build", mode, "tests")
    passed = failed = 0
    if not os.path.isdir(tdir):
        print(f"[{mode}] no unit tests built in {tdir}")
        return 0, 1
    bins = sorted(f for f in os.listdir(tdir)
                  if f.startswith("unit_") and not f.endswith((".o", ".d")))
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1:abort_on_error=0")
    env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
    for b in bins:
        t0 = time.time()
        try:
            p = subprocess.run([os.path.join(tdir, b)], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=1200)
            out = p.stdout + p.stderr
            rc = p.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            out += "\nTIMEOUT"
            rc = -1
        np_ = sum(int(m) for m in re.findall(r"\[  PASSED  \] (\d+) test", out))
        nf = sum(int(m) for m in re.findall(r"\[  FAILED  \] (\d+) test", out))
        if rc != 0 and nf == 0:
            nf = 1  # crashed, leaked or sanitizer error without a cmocka count
        passed += np_
        failed += nf
        status = "ok" if rc == 0 and nf == 0 else "FAIL"
        print(f"[{mode}] {b}: {np_} passed, {nf} failed ({time.time() - t0:.1f}s) {status}")
        if status != "ok":
            sys.stdout.write(out[-6000:] + "\n")
    return passed, failed


def fast_args(extra):
    """extra with `full` deselected: an -m EXPR of its own becomes
    -m '(EXPR) and not full'."""
    out, i, merged = [], 0, False
    while i < len(extra):
        a = extra[i]
        if a == "-m" and i + 1 < len(extra):
            out += ["-m", f"({extra[i + 1]}) and not full"]
            merged = True
            i += 2
            continue
        out.append(a)
        i += 1
    return out if merged else out + ["-m", "not full"]


def run_pytest(model, modes, extra):
    env = dict(os.environ)
    env["ANVIL_ROOT"] = ROOT
    env["ANVIL_TEST_MODES"] = modes
    if model:
        env["ANVIL_MODEL"] = os.path.abspath(model)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "--durations=40", os.path.join(ROOT, "tests", "py")] + extra
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    out = p.stdout + p.stderr
    sys.stdout.write(out[-20000:])
    last = [l for l in out.splitlines() if re.search(r"\d+ (passed|failed|error)", l)]
    passed = failed = skipped = 0
    if last:
        line = last[-1]
        for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped)", line):
            if what == "passed":
                passed = int(n)
            elif what == "skipped":
                skipped = int(n)
            else:
                failed += int(n)
    if p.returncode not in (0,) and failed == 0:
        failed = 1
    return passed, failed, skipped


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--modes", default="release")
    ap.add_argument("--model", default=None)
    ap.add_argument("--unit-only", action="store_true")
    ap.add_argument("--fast", action="store_true",
                    help="the fast tier: deselect the Python tests marked full")
    ap.add_argument("pytest_args", nargs="*")
    a = ap.parse_args()
    t0 = time.time()
    tp = tf = ts = 0
    for mode in a.modes.split(","):
        p, f = run_unit(mode)
        tp += p
        tf += f
    if not a.unit_only:
        p, f, s = run_pytest(a.model, a.modes, fast_args(a.pytest_args) if a.fast else a.pytest_args)
        tp += p
        tf += f
        ts += s
    tail = f", {ts} skipped" if ts else ""
    allow_skip = os.environ.get("ANVIL_ALLOW_SKIP") == "1"
    if ts and not allow_skip:
        print(f"{ts} test(s) skipped: a skipped layer is a failure (set ANVIL_ALLOW_SKIP=1 to allow)")
        tf += ts
    print(f"{tp} passed, {tf} failed{tail} in {time.time() - t0:.0f} s")
    sys.exit(1 if tf else 0)


if __name__ == "__main__":
    main()
