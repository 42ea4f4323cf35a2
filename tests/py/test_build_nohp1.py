"""`make HP1=0`: anvil built without HP1 attention (src/attn/hp1/ left
out, src/attn/hp1_none.c in its place), in its own build directory
(build/release-nohp1) and binary (bin/anvil-nohp1), so that no object
mixes with the default build.

- no HP1 object is built and the library defines no HP1 kernel table;
- the attention and KV unit tests of that build pass;
- a greedy `anvil run` on the default model gives the same text as the
  default build;
- a GGUF whose layers ask for HP1 is refused at load with exit status 2
  and "built without HP1" (ANVIL_ERR_UNSUPPORTED), not run as softmax.

A full build of its own, hence marked full (the whole suite only).
"""
import os
import subprocess
import sys

import pytest

from conftest import MODEL, ROOT, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_arch  # noqa: E402

pytestmark = pytest.mark.full

BUILD = os.path.join(ROOT, "build", "release-nohp1")
BIN = os.path.join(ROOT, "bin", "anvil-nohp1")
UNITS = ["unit_attn", "unit_kv"]


@pytest.fixture(scope="module")
def nohp1():
    targets = ["bin/anvil-nohp1"] + [f"build/release-nohp1/tests/{u}" for u in UNITS]
    p = run(["make", "--no-print-directory", "-C", ROOT, "-j2", "MODE=release", "HP1=0",
             *targets], text=True, timeout=3600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return BUILD


def test_no_hp1_objects(nohp1):
    assert not os.path.exists(os.path.join(nohp1, "src", "attn", "hp1"))
    syms = run(["nm", "--defined-only", os.path.join(nohp1, "libanvil.a")], text=True).stdout
    assert "kn_hp1_ops_ref" not in syms and "kn_hp1_ops_avx2" not in syms
    assert "hp1_meta_load" in syms  # the refusing entry point of hp1_none.c


@pytest.mark.parametrize("unit", UNITS)
def test_unit_binaries_pass(nohp1, unit):
    p = run([os.path.join(nohp1, "tests", unit)], text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "PASSED" in p.stdout + p.stderr


def test_greedy_run_matches_default_build(nohp1, model_path):
    args = ["run", "-m", model_path, "-p", "The capital of France is", "-n", "16",
            "--temp", "0", "--seed", "1"]
    got = run([BIN, *args], text=True)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip(), "no text generated"
    default = os.path.join(ROOT, "bin", "anvil")
    if os.path.exists(default):
        want = run([default, *args], text=True)
        assert want.returncode == 0, want.stderr
        assert got.stdout == want.stdout


def test_hp1_model_refused(nohp1, tmp_path):
    path = str(tmp_path / "hp1.gguf")
    tiny_arch.make_gguf(path, "hp1", "F32", seed=7, n_ctx=64)
    p = run([BIN, "run", "-m", path, "-p", "hi", "-n", "1"], text=True)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "built without HP1" in p.stderr, p.stderr
