"""The 5-bit, K-quant and IQ4 formats against the `gguf` package
and numpy, through tests/tool_dequant.c:

  - dequantization of random blocks (random payload bytes, random finite
    f16 scales: subnormals, zeros, negatives) of Q5_0, Q5_1, IQ4_NL, Q2_K,
    Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, bit for bit with gguf.quants;
  - dequantization of every tensor of the Gemma 3 270M Q4_K_M file (Q4_K,
    Q6_K, Q5_0, Q8_0, F32), read through our GGUF reader, bit for bit with
    gguf.GGUFReader + gguf.quants;
  - the Q8K activation format, byte for byte with a numpy transcription of
    its definition (kernels/blocks.h), and the Q8A half of Q8A_Q8K;
  - the reference matmul of every type against numpy in float64 on
    the dequantized weights and activations, on random blocks and on the
    Gemma tensors (tolerance from the float32 arithmetic, below), and the
    avx2 kernels against the reference bit for bit (they replay the
    reference's float operations; kernels/cpu/avx2/matmul_k.c).
"""
import os
import struct
import subprocess

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as QT
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES

import conftest
import gguf_synth

ROOT = os.environ.get("ANVIL_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
GEMMA = conftest.GEMMA

# name -> (ggml type, block elements, block bytes, byte offsets of f16
# scales, byte range of the quants)
TYPES = {
    "Q5_0": (QT.Q5_0, 32, 22, [0], (2, 22)),
    "Q5_1": (QT.Q5_1, 32, 24, [0, 2], (4, 24)),
    "IQ4_NL": (QT.IQ4_NL, 32, 18, [0], (2, 18)),
    "Q2_K": (QT.Q2_K, 256, 84, [80, 82], (16, 80)),
    "Q3_K": (QT.Q3_K, 256, 110, [108], (0, 96)),
    "Q4_K": (QT.Q4_K, 256, 144, [0, 2], (16, 144)),
    "Q5_K": (QT.Q5_K, 256, 176, [0, 2], (16, 176)),
    "Q6_K": (QT.Q6_K, 256, 210, [208], (0, 192)),
    "IQ4_XS": (QT.IQ4_XS, 256, 136, [0], (8, 136)),
}
QBYTES = {QT.Q8_0: (34, (2, 34))}
QBYTES.update({v[0]: (v[2], v[4]) for v in TYPES.values()})
Q8A_TYPES = {"Q5_0", "Q5_1", "IQ4_NL"}


def tools():
    out = []
    for mode in conftest.MODES:
        p = os.path.join(ROOT, "build", mode, "tests", "tool_dequant")
        if os.path.exists(p):
            out.append(p)
    return out


TOOLS = tools()
if not TOOLS:
    pytest.fail("tool_dequant is not built (make)", pytrace=False)
TOOL_IDS = [p.split(os.sep)[-3] for p in TOOLS]


def run(tool, *args):
    p = subprocess.run([tool, *map(str, args)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return p


def has_avx2():
    with open("/proc/cpuinfo") as f:
        flags = f.read()
    return all(f" {x}" in flags for x in ("avx2", "fma", "f16c"))


def finite_f16_bits(rng, n):
    h = rng.integers(0, 1 << 16, size=n, dtype=np.uint32).astype(np.uint16)
    inf_nan = (h & 0x7C00) == 0x7C00
    h[inf_nan] ^= 0x4000  # exponent 31 -> 15: finite
    return h


def random_blocks(rng, name, n_blocks, small_scales=False):
    _, _, bsz, offs, _ = TYPES[name]
    raw = rng.integers(0, 256, size=(n_blocks, bsz), dtype=np.uint8)
    for o in offs:
        h = finite_f16_bits(rng, n_blocks)
        if small_scales:  # |d| in [2^-10, 2^-6): products stay in float range
            h = (h & 0x83FF) | np.uint16(5 << 10) + (h & np.uint16(3 << 10))
        raw[:, o:o + 2] = h.view(np.uint8).reshape(n_blocks, 2)
    return raw


def assert_same_bits(ours, ref, what):
    ref = np.ascontiguousarray(ref, dtype=np.float32).reshape(-1)
    assert ours.shape == ref.shape, (what, ours.shape, ref.shape)
    a, b = ours.view(np.uint32), ref.view(np.uint32)
    bad = np.nonzero(a != b)[0]
    if len(bad):
        i = bad[:5]
        pytest.fail(f"{what}: {len(bad)} of {len(a)} differ; first at {list(i)}: "
                    f"ours {ours[i]} ref {ref[i]}")


# ----------------------------------------------------------------------------
# dequantization

@pytest.mark.parametrize("tool", TOOLS, ids=TOOL_IDS)
@pytest.mark.parametrize("name", list(TYPES))
def test_dequant_random_blocks(tool, name, tmp_path):
    rng = np.random.default_rng(4321 + list(TYPES).index(name))
    qt = TYPES[name][0]
    for n_blocks in (1, 3, 2048):
        raw = random_blocks(rng, name, n_blocks)
        src, dst = tmp_path / "in.bin", tmp_path / "out.bin"
        src.write_bytes(raw.tobytes())
        run(tool, "dequant", name, src, dst)
        ref = quants.dequantize(raw, qt)
        assert_same_bits(np.fromfile(dst, np.float32), ref, f"{name} x{n_blocks} blocks")


class Tensor:
    def __init__(self, name, qt, shape, data):
        self.name, self.tensor_type, self.shape, self.data = name, qt, shape, data
        self.n_elements = int(np.prod(shape))


def read_tensors(path):
    """The tensor table of a GGUF file, data as memory-mapped row bytes
    (float32 for F32, as gguf.GGUFReader gives them). Reads the header with
    tests/py/gguf_synth.py's independent walker: gguf.GGUFReader decodes
    all 262144 vocabulary strings of the Gemma file, ~50 s here."""
    with open(path, "rb") as f:
        head = f.read(64 << 20)
    lay = gguf_synth.Layout(head)
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    out = []
    for t in lay.tensors:
        ne = [struct.unpack_from("<Q", head, o)[0] for o in t["ne"]]
        (tt,) = struct.unpack_from("<I", head, t["type"])
        (off,) = struct.unpack_from("<Q", head, t["offset"])
        qt = QT(tt)
        blk, bsz = GGML_QUANT_SIZES[qt]
        rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
        nb = rows * ne[0] // blk * bsz
        data = mm[lay.data_offset + off:lay.data_offset + off + nb].reshape(rows, -1)
        if qt == QT.F32:
            data = data.view(np.float32).reshape(-1) if rows == 1 else data.view(np.float32)
        out.append(Tensor(t["name"], qt, ne, data))
    return out


class Model:
    def __init__(self, path):
        self.tensors = read_tensors(path)


@pytest.fixture(scope="module")
def gemma():
    if not os.path.exists(GEMMA):
        pytest.fail(f"{GEMMA} missing (make model-gemma)")
    return Model(GEMMA)


def test_read_tensors_against_gguf_writer(tmp_path):
    """The walker above on a file gguf.GGUFWriter wrote (strings, arrays and
    tensors of several types), so the Gemma tests stand on a checked reader."""
    rng = np.random.default_rng(3)
    path = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"] * 100)
    w.add_custom_alignment(64)
    want = []
    for i, name in enumerate(["Q4_K", "Q5_0", "Q6_K", "IQ4_XS"]):
        qt, blk, bsz = TYPES[name][0], TYPES[name][1], TYPES[name][2]
        rows, n = 3 + i, 512
        raw = random_blocks(rng, name, rows * n // blk)
        w.add_tensor(f"t{i}", raw.reshape(rows, -1), raw_shape=(rows, n // blk * bsz), raw_dtype=qt)
        want.append((f"t{i}", qt, [n, rows], raw))
    f = rng.standard_normal(40).astype(np.float32)
    w.add_tensor("f", f)
    want.append(("f", QT.F32, [40], f))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    got = read_tensors(path)
    assert [(t.name, t.tensor_type, list(t.shape)) for t in got] == [x[:3] for x in want]
    for t, x in zip(got, want):
        assert np.asarray(t.data).tobytes() == x[3].tobytes(), t.name


def test_gemma_has_the_types(gemma):
    kinds = {t.tensor_type.name for t in gemma.tensors}
    assert kinds == {"F32", "Q4_K", "Q6_K", "Q5_0", "Q8_0"}, kinds


def test_dequant_every_gemma_tensor(gemma, tmp_path):
    """Every tensor, read through our GGUF reader, bit for bit; the 167M
    element token embedding in row chunks, and only by the release tool
    (the ASan one does the other 235)."""
    out = tmp_path / "t.f32"
    n_checked = 0
    for t in gemma.tensors:
        rows = int(np.prod(t.shape[1:])) if len(t.shape) > 1 else 1
        if t.n_elements > 4_000_000:
            step = 32768
            data = t.data.reshape(rows, -1)
            for r0 in range(0, rows, step):
                nr = min(step, rows - r0)
                run(TOOLS[0], "tensor", GEMMA, t.name, out, r0, nr)
                ref = quants.dequantize(data[r0:r0 + nr], t.tensor_type)
                assert_same_bits(np.fromfile(out, np.float32), ref, f"{t.name} rows {r0}+{nr}")
        else:
            ref = quants.dequantize(t.data, t.tensor_type)
            for tool in TOOLS:
                run(tool, "tensor", GEMMA, t.name, out)
                assert_same_bits(np.fromfile(out, np.float32), ref, t.name)
        n_checked += 1
    assert n_checked == len(gemma.tensors) == 236


# ----------------------------------------------------------------------------
# activations

def q8_round(v):
    """round-half-even of v clamped to [-127, 127], NaN -> 0 (float32 in)."""
    v = np.where(np.isnan(v), np.float32(0), v)
    return np.rint(np.clip(v, -127, 127)).astype(np.int8)


def q8k_numpy(x):
    """One row of floats -> Q8K bytes (blocks.h), float32 arithmetic."""
    x = x.astype(np.float32).reshape(-1, 256)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        amax = np.max(np.where(np.isnan(x), np.float32(0), np.abs(x)), axis=1).astype(np.float32)
        d = amax / np.float32(127)
        inv = np.where(d != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
        q = q8_round(x * inv[:, None])
    bs = q.astype(np.int32).reshape(-1, 16, 16).sum(axis=2).astype(np.int16)
    return q.tobytes() + d.astype(np.float32).tobytes() + bs.tobytes()


def q8a_numpy(x):
    x = x.astype(np.float32).reshape(-1, 32)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        amax = np.max(np.where(np.isnan(x), np.float32(0), np.abs(x)), axis=1).astype(np.float32)
        d = amax / np.float32(127)
        inv = np.where(d != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
        q = q8_round(x * inv[:, None])
        s = (d * q.astype(np.int32).sum(axis=1).astype(np.float32)).astype(np.float32)
    return q.tobytes() + d.tobytes() + s.tobytes()


def pad64(b):
    return b + b"\0" * (-len(b) % 64)


def act_inputs(rng, n, rows):
    x = rng.standard_normal((rows, n)).astype(np.float32)
    x *= np.exp(rng.uniform(-8, 8, (rows, 1))).astype(np.float32)
    x[0, :256] = 0                                    # amax 0
    x[0, 256:512] = np.float32(1e-42)                 # subnormal amax: id infinite
    if n >= 1024:
        x[0, 512:768] = np.linspace(-127, 127, 256, dtype=np.float32)  # ties of x*id
        x[0, 768] = np.nan
        x[0, 800] = np.inf
    return x


@pytest.mark.parametrize("tool", TOOLS, ids=TOOL_IDS)
@pytest.mark.parametrize("kernels", ["ref", "avx2"])
def test_act_q8k_bytes(tool, kernels, tmp_path):
    """Q8K and Q8A_Q8K rows (NaN, inf, zero and subnormal-scale blocks
    included) byte for byte with numpy."""
    if kernels == "avx2" and not has_avx2():
        pytest.skip("SKIP avx2: this CPU cannot run it")
    rng = np.random.default_rng(77)
    for n in (256, 1024, 2048):
        for act in ("q8k", "q8a_q8k"):
            x = act_inputs(rng, n, 5)
            (tmp_path / "x.f32").write_bytes(x.tobytes())
            run(tool, "act", kernels, act, n, tmp_path / "x.f32", tmp_path / "a.bin")
            got = (tmp_path / "a.bin").read_bytes()
            want = b""
            for r in range(5):
                k = pad64(q8k_numpy(x[r]))
                want += (pad64(q8a_numpy(x[r])) + k) if act == "q8a_q8k" else k
            assert len(got) == len(want), (act, n)
            if got != want:
                i = next(i for i in range(len(got)) if got[i] != want[i])
                pytest.fail(f"{act} [{kernels}] n {n}: first differing byte {i} "
                            f"({got[i]} vs {want[i]})")


# ----------------------------------------------------------------------------
# matmul: reference vs numpy, avx2 vs reference

def q8k_values(b, n):
    q = np.frombuffer(b, np.int8, n).astype(np.float64)
    d = np.frombuffer(b, np.float32, n // 256, n).astype(np.float64)
    return q * np.repeat(d, 256)


def q8a_values(b, n):
    q = np.frombuffer(b, np.int8, n).astype(np.float64)
    d = np.frombuffer(b, np.float32, n // 32, n).astype(np.float64)
    return q * np.repeat(d, 32)


def offset_part(raw, qt, shape):
    """The weights with every quant bit zeroed: the constant part of each
    (sub-)block (-dmin*m, -16*d, m, -32*d*sc...). |w| + |w0| bounds both
    terms the kernels round separately (e.g. d*sc*q and dmin*m)."""
    bsz, (a, b) = QBYTES[qt]
    z = np.array(raw, dtype=np.uint8).reshape(-1, bsz).copy()
    z[:, a:b] = 0
    return quants.dequantize(z, qt).reshape(shape)


def check_matmul(w_deq, w0, x, y, act, what):
    """y (n_tokens, rows) from our kernels vs float64 numpy on the
    dequantized weights and activations. The kernels round each
    super-block's (or block's) float step: a few float32 roundings per
    step, each at most 2^-24 of a term bounded by sum (|w| + |w0|) |a|
    over the step, and the running sum once per step: |err| <= (steps + 8)
    * 2^-22 * sum (|w| + |w0|) |a| covers both with a margin of ~4x; a
    dropped or doubled block misses by far more."""
    n = x.shape[1]
    blk = 256 if act == "q8k" else 32
    a = np.stack([(q8k_numpy if act == "q8k" else q8a_numpy)(r) for r in x])
    av = np.stack([(q8k_values if act == "q8k" else q8a_values)(r, n) for r in a])
    want = av @ w_deq.T.astype(np.float64)
    mag = np.abs(av) @ (np.abs(w_deq) + np.abs(w0)).T.astype(np.float64)
    tol = (n // blk + 8) * 2.0 ** -22 * mag + 1e-30
    err = np.abs(y.astype(np.float64) - want)
    bad = np.argwhere(~(err <= tol))
    assert len(bad) == 0, (f"{what}: {len(bad)} of {err.size} outside tolerance; first "
                           f"{bad[:3].tolist()} got {y[tuple(bad[0])]} want {want[tuple(bad[0])]}")


def write_gguf(path, name, raw, qt, n, rows):
    w = gguf.GGUFWriter(str(path), "test")
    w.add_tensor(name, raw.reshape(rows, -1), raw_shape=(rows, raw.size // rows), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("name", list(TYPES))
def test_matmul_random_blocks(name, tmp_path):
    """Random blocks (small finite scales), several shapes and token
    counts: ref vs numpy; avx2 == ref bit for bit; release and ASan."""
    qt, blk, bsz, _, _ = TYPES[name]
    act = "q8a" if name in Q8A_TYPES else "q8k"
    rng = np.random.default_rng(900 + list(TYPES).index(name))
    for n, rows in ((blk, 3), (blk * 3, 17), (2048, 40)):
        raw = random_blocks(rng, name, rows * n // blk, small_scales=True)
        path = tmp_path / f"w_{n}.gguf"
        write_gguf(path, "w", raw, qt, n, rows)
        w_deq = quants.dequantize(raw, qt).reshape(rows, n)
        w0 = offset_part(raw, qt, (rows, n))
        for nt in (1, 2, 9, 33):
            x = rng.standard_normal((nt, n)).astype(np.float32)
            (tmp_path / "x.f32").write_bytes(x.tobytes())
            ys = {}
            for tool in TOOLS:
                for kern in ("ref", "avx2") if has_avx2() else ("ref",):
                    run(tool, "matmul", kern, path, "w", tmp_path / "x.f32", tmp_path / "y.f32")
                    ys[(tool, kern)] = np.fromfile(tmp_path / "y.f32", np.float32).reshape(nt, rows)
            y_ref = ys[(TOOLS[0], "ref")]
            check_matmul(w_deq, w0, x, y_ref, act, f"{name} n {n} rows {rows} n_tokens {nt}")
            for k, y in ys.items():
                assert_same_bits(y.reshape(-1), y_ref, f"{name} n {n} nt {nt} {k} vs ref")


GEMMA_MM = ["blk.0.attn_output.weight",   # Q4_K 1024 -> 640
            "blk.0.ffn_down.weight",      # Q6_K 2048 -> 640
            "blk.1.ffn_down.weight",      # Q4_K 2048 -> 640
            "blk.0.attn_q.weight",        # Q5_0 640 -> 1024
            "blk.0.attn_v.weight"]        # Q8_0 640 -> 256


@pytest.mark.parametrize("tname", GEMMA_MM)
def test_matmul_gemma_tensors(gemma, tname, tmp_path):
    t = next(t for t in gemma.tensors if t.name == tname)
    n, rows = int(t.shape[0]), int(t.shape[1])
    w_deq = quants.dequantize(t.data, t.tensor_type).reshape(rows, n)
    w0 = offset_part(t.data, t.tensor_type, (rows, n))
    act = "q8k" if t.tensor_type in (QT.Q4_K, QT.Q6_K) else "q8a"
    rng = np.random.default_rng(5)
    for nt in (1, 5, 64):
        x = rng.standard_normal((nt, n)).astype(np.float32)
        (tmp_path / "x.f32").write_bytes(x.tobytes())
        run(TOOLS[0], "matmul", "ref", GEMMA, tname, tmp_path / "x.f32", tmp_path / "y.f32")
        y_ref = np.fromfile(tmp_path / "y.f32", np.float32).reshape(nt, rows)
        check_matmul(w_deq, w0, x, y_ref, act, f"{tname} n_tokens {nt}")
        if has_avx2() and t.tensor_type != QT.Q8_0:  # Q8_0's avx2 kernel rounds differently
            run(TOOLS[0], "matmul", "avx2", GEMMA, tname, tmp_path / "x.f32", tmp_path / "y.f32")
            y = np.fromfile(tmp_path / "y.f32", np.float32)
            assert_same_bits(y, y_ref, f"{tname} n_tokens {nt} avx2 vs ref")
