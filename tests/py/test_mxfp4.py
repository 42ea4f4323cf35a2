"""MXFP4 (ggml type 39) against the gguf package (gguf.quants.MXFP4), the
ground truth for the format:
  - dequantization (src/kernels/cpu/ref/blocks.c) bit for bit, on blocks
    with every one of the 256 scale bytes and every 4-bit code in both
    nibble positions;
  - quantization byte for byte (ggml's rule: the scale from the largest
    magnitude, each element the nearest value), on random data of many
    magnitudes, all-zero blocks, ties and values next to powers of two;
  - the matmuls: the reference against float64 numpy on the dequantized
    weights and the Q8A activations, every other kernel family this CPU
    runs (avx2, avx512, auto) equal to the reference bit for bit;
  - a tiny llama (tests/gen/tiny_arch.py) with every matrix in MXFP4:
    anvil's logits against the numpy forward pass, every kernel family.
tests/tool_dequant.c and tool_logits run our side; the helpers are
test_kquant's and test_archs'.
"""
import os
import sys

import numpy as np
import pytest

from gguf import GGMLQuantizationType as QT
from gguf import quants

from conftest import ROOT
from test_kquant import (TOOLS, TOOL_IDS, run, has_avx2, assert_same_bits,
                         check_matmul, write_gguf)
from test_archs import anvil_rows, rel_err, kernel_families as arch_families

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_arch  # noqa: E402

pytestmark = [pytest.mark.kernels,
              pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")]

BLK, BSZ = 32, 17


def ours_dequant(tool, tmp_path, raw):
    (tmp_path / "in.bin").write_bytes(np.ascontiguousarray(raw, np.uint8).tobytes())
    run(tool, "dequant", "MXFP4", tmp_path / "in.bin", tmp_path / "out.f32")
    return np.fromfile(tmp_path / "out.f32", dtype=np.float32)


def ours_quant(tool, tmp_path, x):
    (tmp_path / "in.f32").write_bytes(np.ascontiguousarray(x, np.float32).tobytes())
    run(tool, "quant", "MXFP4", tmp_path / "in.f32", tmp_path / "out.bin")
    return np.fromfile(tmp_path / "out.bin", dtype=np.uint8)


def every_scale_and_code(rng):
    """256 * 16 blocks: scale byte e with its 16 payload bytes holding every
    code pair (lo, hi) = (c, (c + k) % 16) for one k per block, so that each
    code appears at every nibble position, under every scale; then random
    payloads under random scales."""
    blocks = []
    for e in range(256):
        for k in range(16):
            lo = np.arange(16, dtype=np.uint8)
            hi = (lo + k) % 16
            blocks.append(np.concatenate([[e], lo | (hi << 4)]).astype(np.uint8))
    raw = np.stack(blocks)
    extra = rng.integers(0, 256, size=(512, BSZ), dtype=np.uint8)
    return np.concatenate([raw, extra])


@pytest.mark.parametrize("tool", TOOLS, ids=TOOL_IDS)
def test_dequant_every_scale_and_code(tool, tmp_path):
    raw = every_scale_and_code(np.random.default_rng(39))
    ours = ours_dequant(tool, tmp_path, raw)
    ref = quants.dequantize(raw, QT.MXFP4)
    assert_same_bits(ours, ref, "MXFP4 dequant")


def quant_inputs(rng):
    rows = []
    for scale in (1e-30, 1e-6, 0.01, 1.0, 3.0, 1e3, 1e20):
        rows.append(rng.standard_normal(64 * BLK).astype(np.float32) * np.float32(scale))
    rows.append(rng.uniform(-1, 1, 32 * BLK).astype(np.float32))
    rows.append(np.zeros(2 * BLK, np.float32))
    one_big = np.zeros(BLK, np.float32)
    one_big[5] = -7.0
    rows.append(one_big)
    # ties between neighbouring values (h * (kv[i] + kv[i+1]) / 2) and +-0
    h = np.float32(0.25)
    kv = np.array(quants.MXFP4.kvalues[:8], np.float32)
    mids = np.concatenate([h * (kv[:-1] + kv[1:]) / 2, -h * (kv[:-1] + kv[1:]) / 2, [0, -0.0]])
    t = np.zeros(2 * BLK, np.float32)
    t[0], t[BLK] = 3.0, -3.0  # amax 3: h = 2^(floor(log2 3) - 2 + 127 - 128) = 0.25
    t[1:1 + len(mids)] = mids[:BLK - 1]
    t[BLK + 1:BLK + 1 + len(mids)] = -mids[:BLK - 1]
    rows.append(t)
    # largest magnitudes exactly at, just above and just below powers of two
    p = []
    for k in (-20, -1, 0, 1, 3, 7, 12, 40):
        for v in (np.float32(2.0 ** k), np.nextafter(np.float32(2.0 ** k), np.float32(0)),
                  np.nextafter(np.float32(2.0 ** k), np.float32(np.inf))):
            b = rng.uniform(-1, 1, BLK).astype(np.float32) * v
            b[rng.integers(BLK)] = v
            p.append(b)
    rows.append(np.concatenate(p))
    return np.concatenate(rows)


@pytest.mark.parametrize("tool", TOOLS, ids=TOOL_IDS)
def test_quant_matches_gguf(tool, tmp_path):
    x = quant_inputs(np.random.default_rng(3939))
    ours = ours_quant(tool, tmp_path, x)
    ref = quants.quantize(x.reshape(-1, BLK), QT.MXFP4).reshape(-1)
    assert ours.shape == ref.shape
    bad = np.nonzero(ours != ref)[0]
    assert len(bad) == 0, (f"{len(bad)} of {ours.size} bytes differ; first at {bad[:5].tolist()}: "
                           f"ours {ours[bad[:5]].tolist()} ref {ref[bad[:5]].tolist()}")
    # and what it writes dequantizes back within half a step of the input
    back = ours_dequant(tool, tmp_path, ours.reshape(-1, BSZ))
    assert_same_bits(back, quants.dequantize(ref.reshape(-1, BSZ), QT.MXFP4), "round trip")


def random_weights(rng, n_blocks):
    """Random codes under scales 2^-10..2^6 (h = 2^(e-128)), a few of them
    the subnormal bytes 0 and 1: products stay in float range."""
    raw = rng.integers(0, 256, size=(n_blocks, BSZ), dtype=np.uint8)
    raw[:, 0] = rng.integers(118, 135, size=n_blocks, dtype=np.uint8)
    raw[rng.integers(n_blocks, size=max(1, n_blocks // 16)), 0] = rng.integers(0, 2)
    return raw


def kernel_families():
    fams = ["ref"]
    if has_avx2():
        fams.append("avx2")
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    if all(f" {x}" in flags for x in ("avx512f", "avx512bw", "avx512vl", "avx512vnni")):
        fams.append("avx512")
    return fams + ["auto"]


def test_matmul_random_blocks(tmp_path):
    """ref vs numpy; every other kernel family == ref bit for bit, on
    several shapes and token counts, release and ASan."""
    rng = np.random.default_rng(1739)
    for n, rows in ((BLK, 3), (BLK * 3, 17), (2048, 40)):
        raw = random_weights(rng, rows * n // BLK)
        path = tmp_path / f"w_{n}.gguf"
        write_gguf(path, "w", raw, QT.MXFP4, n, rows)
        w_deq = quants.dequantize(raw, QT.MXFP4).reshape(rows, n)
        for nt in (1, 2, 9, 33):
            x = rng.standard_normal((nt, n)).astype(np.float32)
            (tmp_path / "x.f32").write_bytes(x.tobytes())
            ys = {}
            for tool in TOOLS:
                for kern in kernel_families():
                    run(tool, "matmul", kern, path, "w", tmp_path / "x.f32", tmp_path / "y.f32")
                    ys[(tool, kern)] = np.fromfile(tmp_path / "y.f32", np.float32).reshape(nt, rows)
            y_ref = ys[(TOOLS[0], "ref")]
            check_matmul(w_deq, np.zeros_like(w_deq), x, y_ref, "q8a",
                         f"MXFP4 n {n} rows {rows} n_tokens {nt}")
            for k, y in ys.items():
                assert_same_bits(y.reshape(-1), y_ref, f"MXFP4 n {n} nt {nt} {k} vs ref")


# ----------------------------------------------------------------------------
# a whole model: the tiny llama of tests/gen/tiny_arch.py with every matrix
# (embeddings, attention, FFN, output) in MXFP4, through gguf_open, the
# weight binding and the forward pass, against numpy on the dequantized
# weights (Q8A activations add about the error of test_archs.py's Q8_0)

def test_tiny_llama_runs(tmp_path, monkeypatch):
    monkeypatch.setitem(tiny_arch.QTYPES, "MXFP4", QT.MXFP4)
    path = str(tmp_path / "llama3-mxfp4.gguf")
    w = tiny_arch.make_gguf(path, "llama3", "MXFP4", seed=5)
    toks = [int(t) for t in np.random.default_rng(11).integers(0, 256, 120)]
    ref = tiny_arch.forward("llama3", w, toks)
    for fam in arch_families():
        err = rel_err(anvil_rows(path, toks, fam), ref)
        assert err.max() <= 4e-2, f"MXFP4 llama3 {fam}: worst row {err.argmax()} {err.max():.2e}"
