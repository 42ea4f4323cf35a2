"""Fuzz smoke test: build the libFuzzer harnesses (`make fuzz`, clang) and
run each one briefly on its seed corpus (tests/fuzz/corpus/NAME).

Each harness (tests/fuzz/fuzz_*.c) checks properties of its own (see their
headers) under ASan+UBSan; a crash, a sanitizer report, a leak or a broken
property stops libFuzzer with a non-zero status and a crash-* file, and the
test fails, naming the file to replay:

    build/fuzz/fuzz_NAME build/fuzz/smoke/NAME/crash-...

Without clang 14 and its libFuzzer runtime (Debian clang-14,
libclang-rt-14-dev; `make deps` installs them) the test is skipped.
New corpus units go to a temporary directory, never into the repository.
FUZZ_SECONDS overrides the 20 s per harness.
"""
import glob
import os
import shutil
import subprocess
import tempfile

import pytest

ROOT = os.environ.get("ANVIL_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
FUZZ_CC = os.environ.get("FUZZ_CC", "clang-14")
SECONDS = int(os.environ.get("FUZZ_SECONDS", "20"))
HARNESSES = ["gguf", "tok", "request", "web"]


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
    if why:
        pytest.skip(f"fuzz smoke test skipped: {why}")
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
    env.setdefault("ANVIL_MODEL", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    with tempfile.TemporaryDirectory() as work:
        # libFuzzer writes new units into the first corpus directory
        cmd = [fuzz_bins[name], f"-max_total_time={SECONDS}", "-runs=1000000", "-seed=1",
               "-timeout=30", "-rss_limit_mb=3072",
               f"-artifact_prefix={art}/", "-print_final_stats=1"]
        d = os.path.join(ROOT, "tests", "fuzz", f"{name}.dict")
        if os.path.exists(d):
            cmd.append(f"-dict={d}")
        cmd += [work, corpus]
        p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                           timeout=SECONDS + 120)
    out = p.stdout + p.stderr
    crashes = sorted(glob.glob(os.path.join(art, "*")))
    assert p.returncode == 0 and not crashes, (
        f"fuzz_{name} found a problem (exit {p.returncode}); replay with:\n"
        f"  build/fuzz/fuzz_{name} {' '.join(crashes)}\n" + out[-6000:])
    assert "stat::number_of_executed_units" in out, out[-2000:]
