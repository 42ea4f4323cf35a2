"""End to end on a tiny random-weight Llama written by tests/gen/tiny_llama.py,
checked against its independent numpy forward pass, for every weight type,
every kernel family the CPU runs, tied and separate output weights, with
the full prompt in one batch and token by token.

Tolerances: F32 weights use F32 activations, so only float summation order
and the F16 K/V cache (emulated in numpy) separate the two: 1e-3 of the
logit range. BF16 rounds activations to bf16 (8 bits of mantissa); the
8-bit types quantize activations per block of 32: looser bounds, stated
per type below.
"""
import json
import os
import sys

import numpy as np
import pytest

from conftest import ROOT, build_path, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_llama  # noqa: E402

# model-level numerics: .ci/run runs them again with each kernel family forced
pytestmark = pytest.mark.kernels

TOL = {"F32": 1e-3, "F16": 2e-3, "BF16": 2e-2, "Q8_0": 3e-2, "Q4_0": 3e-2, "Q4_1": 3e-2}
TOKENS = [5, 77, 123, 299, 42, 7, 256, 1, 200, 150, 3, 99, 100, 101, 250, 18]


def kernel_families():
    fams = ["ref"]
    flags = open("/proc/cpuinfo").read()
    if " avx2 " in flags and " fma " in flags:
        fams.append("avx2")
    if all(f" {f} " in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni")):
        fams.append("avx512")
    return fams


def ours(path, toks, kernels, gen=0, extra=()):
    p = run([build_path("release", "tool_logits"), path, "-k", kernels, "-g", str(gen), *extra],
            input=" ".join(map(str, toks)) + "\n", text=True)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[0])


@pytest.mark.parametrize("wtype", list(TOL))
@pytest.mark.parametrize("tied", [False, True])
def test_tiny_logits_vs_numpy(tmp_path, wtype, tied):
    path = str(tmp_path / f"tiny-{wtype}.gguf")
    w = tiny_llama.make_tiny_gguf(path, wtype, seed=1, tied=tied)
    for n in (1, 5, len(TOKENS)):
        ref = tiny_llama.forward(w, TOKENS[:n])[-1]
        rng = ref.max() - ref.min()
        for fam in kernel_families():
            got = np.array(ours(path, TOKENS[:n], fam)["logits"])
            err = np.max(np.abs(got - ref))
            assert err <= TOL[wtype] * rng, f"{wtype} {fam} n={n}: {err:.5f} vs range {rng:.3f}"


def test_tiny_incremental_equals_batch(tmp_path):
    """Greedy generation token by token (KV cache reuse) equals recomputing
    the whole sequence with numpy at every step."""
    path = str(tmp_path / "tiny.gguf")
    w = tiny_llama.make_tiny_gguf(path, "F32", seed=2)
    row = ours(path, TOKENS[:4], "ref", gen=12)
    seq = list(TOKENS[:4])
    for t in row["gen"]:
        ref = tiny_llama.forward(w, seq)[-1]
        top = np.argsort(-ref)
        assert t == top[0] or ref[top[0]] - ref[top[1]] < 1e-3
        seq.append(t)
