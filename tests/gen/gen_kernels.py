#!/usr/bin/env python3
"""Write tests/data/kernels_golden.bin: golden tensors for the reference
kernels (src/kernels/cpu/ref), computed independently with numpy (float64
unless the format itself is float32) and the gguf package's quantizers.
Read by tests/unit_kernels.c (test_golden).

Cases:
  rmsnorm   y = x / sqrt(mean(x^2) + eps) * w                    (float64)
  rope      Llama "norm" RoPE, adjacent pairs, theta = f32(pos * inv_freq)
            rounded to float32 as the spec says, then cos/sin in float64
  silu_mul  y = g / (1 + exp(-g)) * u                            (float64)
  q8a       the Q8A activation format of kernels/blocks.h, re-implemented
            here in float32 numpy arithmetic: bit-exact expectation
  matmul    weights quantized by gguf.quants (ggml's reference quantizers,
            not ours), activations converted as kn_act_for_type says
            (Q8A / BF16 / F32), y = sum(dequant(w) * dequant(x)) in float64;
            absdot = sum |terms| bounds the float accumulation error

Format (little endian): magic "ANVKRN01", u32 n_records; per record:
  char name[16] (zero padded), u32 n_int, i32 ints[n_int],
  u32 n_arr, then per array: u32 dtype (0 = f32, 1 = u8, 2 = f64), u64 count, data.

Machine independence: every sum is math.fsum (correctly rounded, so the
order and the SIMD width numpy or a BLAS would pick do not matter) and the
transcendental functions come from Python's math module, never numpy's
vectorized ones (whose last bits differ between CPUs). The test that
regenerates the file still compares float results within a few ulps, since
libm itself is not guaranteed correctly rounded.

Usage: python tests/gen/gen_kernels.py [out_path]
"""
import math
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

RNG = np.random.default_rng(20250301)
QK = 32


def arr_f32(a):
    return (0, np.ascontiguousarray(a, dtype=np.float32))


def arr_u8(a):
    return (1, np.ascontiguousarray(a, dtype=np.uint8))


def arr_f64(a):
    return (2, np.ascontiguousarray(a, dtype=np.float64))


def record(name, ints, arrays):
    out = bytearray(name.encode().ljust(16, b"\0"))
    out += struct.pack("<I", len(ints)) + struct.pack("<%di" % len(ints), *ints)
    out += struct.pack("<I", len(arrays))
    for dtype, a in arrays:
        out += struct.pack("<IQ", dtype, a.size) + a.tobytes()
    return bytes(out)


def data(n, scale=1.0):
    x = RNG.standard_normal(n).astype(np.float32) * np.float32(scale)
    if n >= 8:
        x[1] = 0.0
        x[3] *= 30
    return x


# ---------------------------------------------------------------------------


def rmsnorm_case(n, eps):
    x, w = data(n), data(n)
    x64 = x.astype(np.float64)
    ms = math.fsum((x64 * x64).tolist()) / n
    y = x64 / math.sqrt(ms + float(np.float32(eps))) * w
    return record("rmsnorm", [n], [arr_f32(x), arr_f32(w), arr_f32([eps]), arr_f32(y)])


def rope_case(n_head, head_dim, pos, base):
    x = data(n_head * head_dim)
    i = np.arange(head_dim // 2, dtype=np.float64)
    inv = (base ** (-2.0 * i / head_dim)).astype(np.float32)
    theta = (np.float32(pos) * inv).astype(np.float64)  # the spec rounds theta to float
    c = np.array([math.cos(t) for t in theta.tolist()])
    s = np.array([math.sin(t) for t in theta.tolist()])
    v = x.astype(np.float64).reshape(n_head, head_dim // 2, 2)
    a, b = v[..., 0], v[..., 1]
    y = np.stack([a * c - b * s, a * s + b * c], axis=-1).reshape(-1)
    return record("rope", [n_head, head_dim, pos], [arr_f32(x), arr_f32(inv), arr_f32(y)])


def silu_case(n):
    g, u = data(n, 3.0), data(n)
    g[0], g[-1] = -90.0, 40.0
    g64 = g.astype(np.float64)
    e = np.array([math.exp(-v) for v in g64.tolist()])
    y = g64 / (1.0 + e) * u
    return record("silu_mul", [n], [arr_f32(g), arr_f32(u), arr_f32(y)])


def q8a(x):
    """The Q8A row format (kernels/blocks.h) in float32 arithmetic:
    d = amax / 127, q = round_half_even(x * (127 / amax)), s = d * sum(q)."""
    x = x.astype(np.float32).reshape(-1, QK)
    amax = np.max(np.abs(x), axis=1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore"):
        idv = np.where(d != 0, np.float32(127) / amax, np.float32(0)).astype(np.float32)
    q = np.rint((x * idv[:, None]).astype(np.float32)).astype(np.int32)
    s = (d * q.sum(axis=1).astype(np.float32)).astype(np.float32)
    return q.astype(np.int8).reshape(-1), d, s


def q8a_case(n):
    x = data(n)
    x[QK:2 * QK] = 0.0                      # an all-zero block
    x[2 * QK:3 * QK] = 0.25                 # a constant block
    x[3 * QK] = 2.0                         # ties at x * 127/2 = k + 0.5
    x[3 * QK + 1:3 * QK + 6] = [1.0 / 127, 3.0 / 127, -5.0 / 127, 0.5, -1.5]
    q, d, s = q8a(x)
    return record("q8a", [n], [arr_f32(x), arr_u8(q.view(np.uint8)), arr_f32(d), arr_f32(s)])


def bf16_round(x):
    """float32 -> bf16 values as float32, round to nearest even (no NaNs here)."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return r.view(np.float32), (r >> 16).astype(np.uint16)


def fixed_dot(a, b):
    """a @ b.T with every dot a correctly rounded math.fsum of exact float64
    products: the same bits on every machine (numpy's matmul goes through
    a BLAS whose summation order depends on the CPU)."""
    out = np.empty((a.shape[0], b.shape[0]))
    for i in range(a.shape[0]):
        for j in range(b.shape[0]):
            out[i, j] = math.fsum((a[i] * b[j]).tolist())
    return out


TYPE_IDS = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8, "BF16": 30}


def matmul_case(tname, n, rows, n_tokens):
    wf = np.stack([data(n, 0.05 if r % 3 == 0 else 1.0) for r in range(rows)])
    xf = np.stack([data(n) for _ in range(n_tokens)])
    if tname in ("Q4_0", "Q4_1", "Q8_0"):
        qt = getattr(QT, tname)
        wraw = quantize(wf, qt)                           # ggml's reference quantizer
        wdq = dequantize(wraw, qt).astype(np.float64)
        # |terms| as the kernels combine them (see tests/unit_kernels.c)
        blocks = wraw.reshape(rows, n // QK, -1)
        d = blocks[..., 0:2].copy().view(np.float16).astype(np.float64)[..., 0]
        if tname == "Q8_0":
            wabs = np.abs(wdq)
        else:
            qs = blocks[..., 4:20] if tname == "Q4_1" else blocks[..., 2:18]
            nib = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.float64)
            m = (blocks[..., 2:4].copy().view(np.float16).astype(np.float64)[..., 0]
                 if tname == "Q4_1" else 8.0 * np.abs(d))
            wabs = (np.abs(d)[..., None] * nib + np.abs(m)[..., None]).reshape(rows, n)
        xdq = []
        for t in range(n_tokens):
            q, dx, _ = q8a(xf[t])
            xdq.append((q.reshape(-1, QK).astype(np.float64) * dx.astype(np.float64)[:, None]).reshape(-1))
        xdq = np.stack(xdq)
    elif tname == "BF16":
        wv, wbits = bf16_round(wf)
        wraw = wbits.view(np.uint8)
        wdq, wabs = wv.astype(np.float64), np.abs(wv.astype(np.float64))
        xdq = bf16_round(xf)[0].astype(np.float64)
    else:
        if tname == "F16":
            w16 = wf.astype(np.float16)
            wraw, wdq = w16.view(np.uint8), w16.astype(np.float64)
        else:
            wraw, wdq = wf.view(np.uint8), wf.astype(np.float64)
        wabs = np.abs(wdq)
        xdq = xf.astype(np.float64)
    y = fixed_dot(xdq, wdq)                                # (n_tokens, rows)
    absdot = fixed_dot(np.abs(xdq), wabs)
    return record("matmul", [TYPE_IDS[tname], n, rows, n_tokens],
                  [arr_u8(np.ascontiguousarray(wraw).reshape(-1)), arr_f32(xf), arr_f32(y),
                   arr_f64(absdot)])


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "tests/data/kernels_golden.bin"
    recs = [
        rmsnorm_case(576, 1e-5), rmsnorm_case(17, 1e-6), rmsnorm_case(1536, 1e-5),
        rope_case(9, 64, 0, 10000.0), rope_case(9, 64, 37, 10000.0),
        rope_case(3, 64, 4095, 100000.0), rope_case(2, 128, 30000, 10000.0),
        silu_case(1536), silu_case(45),
        q8a_case(576), q8a_case(256),
        matmul_case("Q4_1", 576, 5, 3), matmul_case("Q8_0", 576, 4, 2),
        matmul_case("Q4_0", 96, 3, 2), matmul_case("F16", 40, 3, 2),
        matmul_case("BF16", 33, 2, 2), matmul_case("F32", 17, 3, 1),
        matmul_case("Q4_1", 1536, 2, 1),
    ]
    with open(out, "wb") as f:
        f.write(b"ANVKRN01" + struct.pack("<I", len(recs)))
        for r in recs:
            f.write(r)


if __name__ == "__main__":
    main()
