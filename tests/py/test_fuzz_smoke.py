"""Fuzz smoke test: build the libFuzzer harnesses (`make fuzz`, clang) and
run each one on its seed corpus (tests/fuzz/corpus/NAME) for a fixed
number of inputs from a fixed seed (-seed=1 -runs=N), so that what it
covers is the same on any machine, however fast: a time box would test
less on a slow or busy one.

Each harness (tests/fuzz/fuzz_*.c) checks properties of its own (see their
headers) under ASan+UBSan; a crash, a sanitizer report, a leak or a broken
property stops libFuzzer with a non-zero status and a crash-* file, and the
test fails, naming the file to replay:

    build/fuzz/fuzz_NAME build/fuzz/smoke/NAME/crash-...

clang 14 and its libFuzzer runtime (Debian clang-14, libclang-rt-14-dev)
are installed by `make deps`; without them the test fails, it does not
skip. New corpus units go to a temporary directory, never into the
repository. FUZZ_RUNS overrides the number of inputs of every harness.
"""
import glob
import os
import re
import shutil
import subprocess
import tempfile

import pytest

from conftest import MODEL, ROOT

FUZZ_CC = os.environ.get("FUZZ_CC", "clang-14")
# fuzz_request is the cheapest per input, fuzz_http (an engine step per generated token),
# fuzz_gguf (a forward pass per model that loads) and fuzz_constrain (every
# byte checked against the Earley reference) the dearest
RUNS = {"gguf": 3000, "tok": 3000, "request": 20000, "http": 3000, "constrain": 1500,
        "web": 5000, "anthropic": 5000, "responses": 5000, "ollama": 5000, "safetensors": 20000,
        "tmpl": 3000, "embed": 5000}
HARNESSES = list(RUNS)


def libfuzzer_available():
    cc = shutil.which(FUZZ_CC)
    if not cc:
        return f"{FUZZ_CC} not found (Debian packages clang-14 libclang-rt-14-dev)"
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "t.c")
        with open(src, "w") as f:
            f.write("#include <stddef.h>\n#include <stdint.h>\n"
                    "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\n"
                    "int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n)"
                    " { (void)d; (void)n; return 0; }\n")
        p = subprocess.run([cc, "-fsanitize=fuzzer,address,undefined", src, "-o",
                            os.path.join(d, "t")], capture_output=True, text=True)
        if p.returncode != 0:
            return f"{FUZZ_CC} cannot link libFuzzer (libclang-rt-14-dev): {p.stderr[-300:]}"
    return None


@pytest.fixture(scope="module")
def fuzz_bins():
    why = libfuzzer_available()
    assert not why, f"cannot build the fuzz harnesses: {why} (make deps)"
    p = subprocess.run(["make", "-j2", "fuzz", f"FUZZ_CC={FUZZ_CC}"], cwd=ROOT,
                       capture_output=True, text=True, timeout=1800)
    assert p.returncode == 0, "make fuzz failed:\n" + (p.stdout + p.stderr)[-4000:]
    return {h: os.path.join(ROOT, "build", "fuzz", f"fuzz_{h}") for h in HARNESSES}


@pytest.mark.parametrize("name", HARNESSES)
def test_fuzz_smoke(fuzz_bins, name):
    corpus = os.path.join(ROOT, "tests", "fuzz", "corpus", name)
    assert os.path.isdir(corpus) and os.listdir(corpus), f"empty seed corpus {corpus}"
    art = os.path.join(ROOT, "build", "fuzz", "smoke", name)
    os.makedirs(art, exist_ok=True)
    for old in glob.glob(os.path.join(art, "*")):
        os.remove(old)
    env = dict(os.environ)
    env.setdefault("ANVIL_MODEL", MODEL)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    with tempfile.TemporaryDirectory() as work:
        # libFuzzer writes new units into the first corpus directory
        runs = int(os.environ.get("FUZZ_RUNS", RUNS[name]))
        cmd = [fuzz_bins[name], f"-runs={runs}", "-seed=1", "-timeout=30", "-rss_limit_mb=3072",
               f"-artifact_prefix={art}/", "-print_final_stats=1"]
        d = os.path.join(ROOT, "tests", "fuzz", f"{name}.dict")
        if os.path.exists(d):
            cmd.append(f"-dict={d}")
        cmd += [work, corpus]
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=1800)
    out = p.stdout + p.stderr
    crashes = sorted(glob.glob(os.path.join(art, "*")))
    assert p.returncode == 0 and not crashes, (
        f"fuzz_{name} found a problem (exit {p.returncode}); replay with:\n"
        f"  build/fuzz/fuzz_{name} {' '.join(crashes)}\n" + out[-6000:])
    m = re.search(r"stat::number_of_executed_units: (\d+)", out)
    assert m and int(m.group(1)) >= runs, out[-2000:]
