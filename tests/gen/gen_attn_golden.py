#!/usr/bin/env python3
"""Write tests/data/attn_golden.bin: attention outputs computed by numpy in
float64, for tests/unit_attn.c (test_golden). Sums are math.fsum and exp is
math.exp, so the file does not depend on the BLAS or SIMD of the machine
that writes it (numpy's matmul and vectorized exp do).

Inputs are not stored: both sides generate them from the same 32-bit LCG
(tests/unit_attn.c: lcg_uniform), so the file holds only the outputs. K and
V are rounded the way the cache stores them before attention: to float16
(round to nearest even), or through the gguf package's Q8_0 (bit-exact with
ggml's quantize_row_q8_0). q stays float32.

Format (little endian):
  magic "ANVATTN1", u32 n_cases, then per case:
  i32 type (1 = F16, 8 = Q8_0), head_dim, n_head, n_head_kv, pos, n_rows, seed
  f32 out[n_rows][n_head][head_dim]
Row r is at position pos + r and attends to keys [0, pos + r].

Usage: python tests/gen/gen_attn_golden.py [out_path]
"""
import math
import struct
import sys

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

CASES = [
    # type, head_dim, n_head, n_head_kv, pos, n_rows, seed
    (1, 64, 9, 3, 299, 1, 11),     # SmolLM2 shape, decode, 2 chunks
    (8, 128, 8, 2, 520, 1, 12),    # Q8_0, GQA 4, 3 chunks
    (1, 64, 4, 4, 30, 20, 13),     # prefill on a prefix, MHA
    (8, 64, 8, 1, 250, 10, 14),    # Q8_0 prefill crossing a chunk edge, GQA 8
    (1, 128, 3, 1, 0, 1, 15),      # a single key
    (8, 64, 6, 2, 16, 17, 16),     # Q8_0 prefill, GQA 3
]


def lcg_uniform(seed, n):
    """n floats in [-1, 1): x = x*1664525 + 1013904223 (mod 2^32), then
    (x >> 8) * 2^-23 - 1, exact in float32."""
    out = np.empty(n, dtype=np.float64)
    x = seed & 0xFFFFFFFF
    # plain loop: the sizes are small and this mirrors the C code exactly
    for i in range(n):
        x = (x * 1664525 + 1013904223) & 0xFFFFFFFF
        out[i] = (x >> 8) * (2.0 ** -23) - 1.0
    return out.astype(np.float32)


def store(x, typ):
    """Round rows of x (..., head_dim) the way the cache stores them."""
    if typ == 1:
        return x.astype(np.float16).astype(np.float64)
    shp = x.shape
    q = quantize(x.reshape(-1, shp[-1]).astype(np.float32), GGMLQuantizationType.Q8_0)
    return dequantize(q, GGMLQuantizationType.Q8_0).reshape(shp).astype(np.float64)


def case_out(typ, hd, n_head, n_kv_head, pos, n_rows, seed):
    n_kv = pos + n_rows
    u = lcg_uniform(seed, 2 * n_kv * n_kv_head * hd + n_rows * n_head * hd)
    o = 0
    k = u[o:o + n_kv * n_kv_head * hd].reshape(n_kv, n_kv_head, hd)
    o += n_kv * n_kv_head * hd
    v = u[o:o + n_kv * n_kv_head * hd].reshape(n_kv, n_kv_head, hd)
    o += n_kv * n_kv_head * hd
    q = (4.0 * u[o:o + n_rows * n_head * hd]).astype(np.float32).reshape(n_rows, n_head, hd)
    k = store(k, typ)
    v = store(v, typ)
    q = q.astype(np.float64)
    group = n_head // n_kv_head
    scale = float(np.float32(1.0) / np.sqrt(np.float32(hd)))
    out = np.zeros((n_rows, n_head, hd))
    for r in range(n_rows):
        m = pos + r + 1
        for i in range(n_head):
            h = i // group
            s = np.array([math.fsum((k[j, h, :] * q[r, i]).tolist()) for j in range(m)]) * scale
            p = np.array([math.exp(x) for x in (s - s.max()).tolist()])
            num = [math.fsum((p * v[:m, h, d]).tolist()) for d in range(hd)]
            out[r, i] = np.array(num) / math.fsum(p.tolist())
    return out.astype(np.float32)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "tests/data/attn_golden.bin"
    with open(path, "wb") as f:
        f.write(b"ANVATTN1")
        f.write(struct.pack("<I", len(CASES)))
        for c in CASES:
            f.write(struct.pack("<7i", *c))
            f.write(case_out(*c).tobytes())
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
