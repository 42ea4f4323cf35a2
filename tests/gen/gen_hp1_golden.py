#!/usr/bin/env python3
"""Write tests/data/hp1_golden.bin: HP1 gated attention outputs computed by
numpy in float64 for tests/unit_attn_hp1.c (test_golden). Every sum is
math.fsum (exactly rounded), so the file does not depend on the BLAS or
SIMD of the machine that writes it; there is no transcendental function
in HP1.

The formula (src/attn/hp1/attn_hp1.h), for query head i at position P:
    s_t = (q . k_t) * scale          r_t = ReLU(s_t) or s_t, 0 for t < 0
    z_t = sum_j c_j r_{t-j}          p_t = gamma * min(max(z_t, lo), hi)
    o   = sum_t p_t v_t

Inputs are not stored: both sides generate them from the same 32-bit LCG
in the same order (tests/unit_attn_hp1.c: fixture_init): K then V of
every key (n_kv, n_head_kv, head_dim), then q (n_rows, n_head, head_dim)
times 4, then the taps (n_head, K) times the parameter set's tap scale,
with c_0 replaced by |c_0| + 1/4 (float32 arithmetic). K and V are
rounded the way the cache stores them: to float16 (round to nearest
even), or through the gguf package's Q8_0 (bit-exact with ggml's
quantize_row_q8_0).

Format (little endian):
  magic "ANVHP1G1", u32 n_cases, then per case:
  i32 type (1 = F16, 8 = Q8_0), head_dim, n_head, n_head_kv, pos, n_rows,
      seed, parameter set (PSETS below, = the C test's PSETS), n_zero
      (number of (row, head, key) with p == 0)
  f32 out[n_rows][n_head][head_dim]
Row r is at position pos + r and attends to keys [0, pos + r].

Usage: python tests/gen/gen_hp1_golden.py [out_path]
"""
import math
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

# n_taps, gamma, lo, hi, relu, tap_scale: tests/unit_attn_hp1.c PSETS
PSETS = [
    (3, 1.0, 0.0, 1.0, True, 1.0),
    (3, 0.75, -0.5, 2.0, False, 1.0),
    (2, -1.5, 0.1, 0.3, True, 2.0),
    (1, 1.0, 0.0, 1.0, False, 1.0),
    (8, 0.5, 0.0, 4.0, True, 0.5),
    (3, 2.0, 0.25, 0.25, True, 1.0),
    (3, 1.0, 0.0, 1.0, True, -1.0),  # negative tap scale: |taps|
]

CASES = [
    # type, head_dim, n_head, n_head_kv, pos, n_rows, seed, pset
    (1, 64, 9, 3, 299, 1, 11, 0),    # SmolLM2 shape, decode, 2 chunks, the served gate
    (8, 128, 8, 2, 520, 1, 12, 1),   # Q8_0, GQA 4, 3 chunks, ReLU off
    (1, 64, 4, 4, 30, 20, 13, 2),    # prefill on a prefix, MHA, narrow clamp
    (8, 64, 8, 1, 250, 10, 14, 4),   # Q8_0 prefill across a chunk edge, GQA 8, K = 8
    (1, 128, 3, 1, 0, 1, 15, 3),     # a single key, K = 1
    (8, 64, 6, 2, 16, 17, 16, 5),    # Q8_0 prefill, GQA 3, lo == hi
    (1, 32, 2, 1, 1, 1, 17, 0),      # two keys: K - 1
    (1, 64, 6, 3, 60, 40, 18, 6),    # prefill, positive taps: most p nonzero
]


def lcg(seed, n):
    """n floats in [-1, 1): x = x*1664525 + 1013904223 (mod 2^32), then
    (x >> 8) * 2^-23 - 1, exact in float32; returns (values, next state)."""
    out = np.empty(n, dtype=np.float64)
    x = seed & 0xFFFFFFFF
    for i in range(n):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        out[i] = (x >> 8) * (2.0 ** -23) - 1.0
    return out.astype(np.float32), x


def store(x, typ):
    """Round rows of x (..., head_dim) the way the cache stores them."""
    if typ == 1:
        return x.astype(np.float16).astype(np.float64)
    shp = x.shape
    q = quantize(x.reshape(-1, shp[-1]).astype(np.float32), GGMLQuantizationType.Q8_0)
    return dequantize(q, GGMLQuantizationType.Q8_0).reshape(shp).astype(np.float64)


def case_out(typ, hd, n_head, n_kv_head, pos, n_rows, seed, pset):
    n_taps, gamma, lo, hi, relu, tap_scale = PSETS[pset]
    n_kv = pos + n_rows
    nk = n_kv * n_kv_head * hd
    nq = n_rows * n_head * hd
    u, x = lcg(seed, 2 * nk + nq + n_head * n_taps)
    k = store(u[:nk].reshape(n_kv, n_kv_head, hd), typ)
    v = store(u[nk:2 * nk].reshape(n_kv, n_kv_head, hd), typ)
    q = (np.float32(4.0) * u[2 * nk:2 * nk + nq]).astype(np.float64).reshape(n_rows, n_head, hd)
    taps = (np.float32(tap_scale) * u[2 * nk + nq:]).reshape(n_head, n_taps)
    if tap_scale < 0:
        taps = np.abs(taps)
    taps[:, 0] = np.abs(taps[:, 0]) + np.float32(0.25)
    taps = taps.astype(np.float64)
    gamma, lo, hi = (float(np.float32(a)) for a in (gamma, lo, hi))
    group = n_head // n_kv_head
    scale = float(np.float32(1.0) / np.sqrt(np.float32(hd)))
    out = np.zeros((n_rows, n_head, hd))
    n_zero = 0
    for r in range(n_rows):
        m = pos + r + 1
        for i in range(n_head):
            h = i // group
            s = [math.fsum((k[t, h, :] * q[r, i]).tolist()) * scale for t in range(m)]
            rr = [(a if a > 0.0 else 0.0) if relu else a for a in s]
            p = []
            for t in range(m):
                z = math.fsum(taps[i, j] * rr[t - j] for j in range(n_taps) if t - j >= 0)
                z = z if z > lo else lo
                z = z if z < hi else hi
                p.append(gamma * z)
            n_zero += sum(1 for a in p if a == 0.0)
            pa = np.array(p)
            out[r, i] = [math.fsum((pa * v[:m, h, d]).tolist()) for d in range(hd)]
    return out.astype(np.float32), n_zero


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/hp1_golden.bin"
    with open(path, "wb") as f:
        f.write(b"ANVHP1G1")
        f.write(struct.pack("<I", len(CASES)))
        for c in CASES:
            out, n_zero = case_out(*c)
            f.write(struct.pack("<9i", *c, n_zero))
            f.write(out.tobytes())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
