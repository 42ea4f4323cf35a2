"""Differential tests of the reference quant formats (src/kernels/cpu/ref/blocks.c)
against the `gguf` Python package (gguf.quants), bit for bit.

tests/tool_dequant.c exposes kn_dequantize_row / kn_quantize_row and the GGUF
reader. We compare:
  - dequantization of random blocks (random payload bytes, random finite f16
    scales, including subnormals, zeros and negative scales) for F16, BF16,
    Q8_0, Q4_0, Q4_1;
  - dequantization of real tensors of the default model, read through our
    GGUF reader vs gguf.GGUFReader;
  - quantization of random and real float data for the same types.
Every comparison is on the raw bits (uint32 of the floats, bytes of the
blocks), so a single differing rounding fails the test.
"""
import os
import subprocess

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import quants  # noqa: E402
import conftest  # noqa: E402  (the default model: written once, in the Makefile)

ROOT = os.environ.get("ANVIL_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
MODEL = conftest.MODEL

TYPES = {"F16": QT.F16, "BF16": QT.BF16, "Q8_0": QT.Q8_0, "Q4_0": QT.Q4_0, "Q4_1": QT.Q4_1}
BLOCK = {"F16": (1, 2), "BF16": (1, 2), "Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20)}


def tools():
    out = []
    for mode in conftest.MODES:
        p = os.path.join(ROOT, "build", mode, "tests", "tool_dequant")
        if os.path.exists(p):
            out.append(p)
    return out


TOOLS = tools()
pytestmark = pytest.mark.skipif(not TOOLS, reason="tool_dequant not built")


def run(tool, *args):
    p = subprocess.run([tool, *args], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr


def ours_dequant(tool, tmp_path, name, raw):
    src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
    src.write_bytes(raw.tobytes())
    run(tool, "dequant", name, str(src), str(dst))
    return np.fromfile(dst, dtype=np.float32)


def ours_quant(tool, tmp_path, name, x):
    src, dst = tmp_path / "in.f32", tmp_path / "out.bin"
    src.write_bytes(np.ascontiguousarray(x, dtype=np.float32).tobytes())
    run(tool, "quant", name, str(src), str(dst))
    return np.fromfile(dst, dtype=np.uint8)


def finite_f16_bits(rng, n):
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    inf_nan = (h & 0x7C00) == 0x7C00
    h[inf_nan] ^= 0x4000  # exponent 31 -> 15: finite
    return h


def random_blocks(rng, name, n_blocks):
    blck, bsz = BLOCK[name]
    raw = rng.integers(0, 256, size=(n_blocks, bsz), dtype=np.uint8)
    if name == "F16":
        raw = finite_f16_bits(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    elif name in ("Q8_0", "Q4_0"):
        raw[:, 0:2] = finite_f16_bits(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    elif name == "Q4_1":
        raw[:, 0:2] = finite_f16_bits(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
        raw[:, 2:4] = finite_f16_bits(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    # BF16: every bit pattern, NaNs included (dequantization is a shift)
    return raw


def assert_same_bits(ours, ref, what):
    ref = np.ascontiguousarray(ref, dtype=np.float32).reshape(-1)
    assert ours.shape == ref.shape, (what, ours.shape, ref.shape)
    a, b = ours.view(np.uint32), ref.view(np.uint32)
    bad = np.nonzero(a != b)[0]
    if len(bad):
        i = bad[:5]
        pytest.fail(f"{what}: {len(bad)} of {len(a)} differ; first at {list(i)}: "
                    f"ours {ours[i]} ({[hex(v) for v in a[i]]}) ref {ref[i]} ({[hex(v) for v in b[i]]})")


@pytest.mark.parametrize("tool", TOOLS, ids=lambda p: p.split(os.sep)[-3])
@pytest.mark.parametrize("name", list(TYPES))
def test_dequant_random_blocks(tool, name, tmp_path):
    rng = np.random.default_rng(1234 + list(TYPES).index(name))
    for n_blocks in (1, 7, 4096):
        raw = random_blocks(rng, name, n_blocks)
        ours = ours_dequant(tool, tmp_path, name, raw)
        ref = quants.dequantize(raw, TYPES[name])
        assert_same_bits(ours, ref, f"{name} x{n_blocks} blocks")


@pytest.mark.parametrize("tool", TOOLS, ids=lambda p: p.split(os.sep)[-3])
def test_dequant_f16_specials(tool, tmp_path):
    # every f16 bit pattern: finite ones bit-exact, NaNs both NaN
    raw = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    ours = ours_dequant(tool, tmp_path, "F16", raw.view(np.uint8))
    ref = quants.dequantize(raw.view(np.uint8), QT.F16).reshape(-1)
    nan = np.isnan(ref)
    assert np.array_equal(np.isnan(ours), nan)
    assert_same_bits(ours[~nan], ref[~nan], "F16 all patterns")


def quant_inputs(rng):
    """Float blocks that exercise the rounding paths of every format."""
    n = 32 * 512
    x = rng.standard_normal(n).astype(np.float32) * np.repeat(
        np.exp(rng.uniform(-12, 6, n // 32)).astype(np.float32), 32)
    edge = [
        np.zeros(32, np.float32),                       # d = 0
        np.full(32, 3.25, np.float32),                  # constant: max == min
        np.full(32, -1e-30, np.float32),                # tiny: d underflows in f16
        np.linspace(-8, 8, 32, dtype=np.float32),       # exact ties for q4_0 scale
        np.arange(32, dtype=np.float32) - 15.5,         # half-way values
        np.arange(32, dtype=np.float32) * 127 / 31,
        np.concatenate([[127], np.arange(31) - 15.5]).astype(np.float32),  # q8_0: d = 1, x.5 ties
        np.where(np.arange(32) % 2, 60000, -60000).astype(np.float32),  # near f16 max
        np.full(32, 1e6, np.float32) * np.sign(rng.standard_normal(32)).astype(np.float32),
        rng.uniform(-1, 1, 32).astype(np.float32) * np.float32(6e-8),   # f16 subnormal range
    ]
    return np.concatenate([x] + edge)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda p: p.split(os.sep)[-3])
@pytest.mark.parametrize("name", list(TYPES))
def test_quant_random(tool, name, tmp_path):
    rng = np.random.default_rng(99 + list(TYPES).index(name))
    x = quant_inputs(rng)
    if name in ("F16", "BF16"):
        # also random finite float32 bit patterns: overflow to inf, subnormals, ties
        bits = rng.integers(0, 1 << 32, size=1 << 15, dtype=np.uint64).astype(np.uint32)
        bits = bits[(bits & 0x7F800000) != 0x7F800000]
        x = np.concatenate([x, bits.view(np.float32)])
    ours = ours_quant(tool, tmp_path, name, x)
    ref = quants.quantize(x.reshape(1, -1), TYPES[name]).view(np.uint8).reshape(-1)
    assert ours.shape == ref.shape
    bad = np.nonzero(ours != ref)[0]
    if len(bad):
        bsz = BLOCK[name][1]
        blk = bad[0] // bsz
        pytest.fail(f"{name}: {len(bad)} bytes differ; first in block {blk}: "
                    f"ours {ours[blk*bsz:(blk+1)*bsz].tolist()} ref {ref[blk*bsz:(blk+1)*bsz].tolist()}")


@pytest.mark.parametrize("tool", TOOLS, ids=lambda p: p.split(os.sep)[-3])
@pytest.mark.parametrize("name", ["F16", "BF16"])
def test_quant_nan(tool, name, tmp_path):
    """NaN in, NaN out. F16 NaN *bits* differ on purpose for signalling NaNs:
    numpy's software conversion keeps them signalling (0x7f800001 -> 0x7c01),
    we quiet them (-> 0x7e00) as x86 F16C (vcvtps2ph) - and so ggml on this
    CPU - does. Quiet NaNs and everything finite match bit for bit."""
    x = np.array([np.nan, -np.nan, np.inf, -np.inf] * 8, np.float32)
    x.view(np.uint32)[4] = 0x7F800001  # signalling NaN with a low payload
    ours = ours_quant(tool, tmp_path, name, x)
    ref = quants.quantize(x.reshape(1, -1), TYPES[name]).view(np.uint8).reshape(-1)
    dt = np.float16 if name == "F16" else None
    if dt is None:
        assert np.array_equal(ours, ref)  # bf16: the package spells out ggml's rule
    else:
        o, r = ours.view(np.float16), ref.view(np.float16)
        assert np.array_equal(np.isnan(o), np.isnan(r))
        assert np.array_equal(o[~np.isnan(o)], r[~np.isnan(r)])


# ----------------------------------------------------------------------------
# real tensors of the default model

@pytest.fixture(scope="module")
def reader():
    if not os.path.exists(MODEL):
        pytest.skip(f"model {MODEL} not present")
    return gguf.GGUFReader(MODEL)  # ~3 s: parse once per module


REAL = ["blk.0.attn_q.weight", "blk.29.ffn_down.weight", "token_embd.weight",
        "blk.3.ffn_norm.weight", "output_norm.weight"]


@pytest.mark.parametrize("tname", REAL)
def test_dequant_real_tensor(reader, tname, tmp_path):
    t = next(t for t in reader.tensors if t.name == tname)
    # the big token embedding only in the release build (asan is slow)
    tools_here = TOOLS[:1] if t.n_elements > 4_000_000 else TOOLS
    ref = quants.dequantize(t.data, t.tensor_type)
    for tool in tools_here:
        out = tmp_path / "t.f32"
        run(tool, "tensor", MODEL, tname, str(out))
        assert_same_bits(np.fromfile(out, np.float32), ref, tname)


@pytest.mark.parametrize("name", list(TYPES))
def test_quant_real_weights(reader, name, tmp_path):
    """Requantize a real (dequantized Q4_1) weight matrix to every type."""
    t = next(t for t in reader.tensors if t.name == "blk.5.ffn_gate.weight")
    x = quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
    ours = ours_quant(TOOLS[0], tmp_path, name, x)
    ref = quants.quantize(x.reshape(1, -1), TYPES[name]).view(np.uint8).reshape(-1)
    assert np.array_equal(ours, ref), f"{name}: {np.count_nonzero(ours != ref)} bytes differ"
