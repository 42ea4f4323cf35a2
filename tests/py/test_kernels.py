"""Kernel-level checks driven from Python:

- tests/data/kernels_golden.bin and attn_golden.bin (read by
  tests/unit_kernels.c and unit_attn.c) are what the checked-in generators
  write, so the C golden tests compare against numpy/gguf, not against a
  stale file. Inputs and quantized bytes must match exactly; computed
  floats within 4 ulps, since the generators' libm may round differently
  on another machine (their sums are order-fixed);
- `anvil-microbench --kernels` runs, verifies each kernel against the reference
  before timing, and prints well-formed JSON records and a PNG. Speed is
  never asserted here.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import assert_chart

# model-level numerics: .ci/run runs them again with each kernel family forced
pytestmark = pytest.mark.kernels


def read_kernel_records(buf):
    """Parse kernels_golden.bin (format in tests/gen/gen_kernels.py)."""
    assert buf[:8] == b"ANVKRN01"
    (n,) = struct.unpack_from("<I", buf, 8)
    o, recs = 12, []
    for _ in range(n):
        name = buf[o:o + 16].rstrip(b"\0").decode()
        o += 16
        (ni,) = struct.unpack_from("<I", buf, o)
        ints = struct.unpack_from("<%di" % ni, buf, o + 4)
        o += 4 + 4 * ni
        (na,) = struct.unpack_from("<I", buf, o)
        o += 4
        arrays = []
        for _ in range(na):
            dt, cnt = struct.unpack_from("<IQ", buf, o)
            o += 12
            np_dt = {0: np.float32, 1: np.uint8, 2: np.float64}[dt]
            arrays.append(np.frombuffer(buf, dtype=np_dt, count=cnt, offset=o))
            o += cnt * np.dtype(np_dt).itemsize
        recs.append((name, ints, arrays))
    assert o == len(buf)
    return recs


def assert_close_ulps(got, want, ulps, what):
    if got.dtype == np.uint8:
        assert np.array_equal(got, want), what
        return
    tol = ulps * np.spacing(np.abs(want).astype(want.dtype))
    bad = np.abs(got.astype(np.float64) - want.astype(np.float64)) > tol
    assert not bad.any(), f"{what}: {int(bad.sum())} values differ by more than {ulps} ulps"


def test_golden_kernels_reproducible(root, tmp_path):
    out = tmp_path / "kernels_golden.bin"
    subprocess.run([sys.executable, os.path.join(root, "tests", "gen", "gen_kernels.py"), str(out)],
                   check=True, cwd=root)
    with open(os.path.join(root, "tests", "data", "kernels_golden.bin"), "rb") as f:
        committed = read_kernel_records(f.read())
    fresh = read_kernel_records(out.read_bytes())
    assert len(fresh) == len(committed), "rerun tests/gen/gen_kernels.py and commit its output"
    for i, ((n1, i1, a1), (n2, i2, a2)) in enumerate(zip(fresh, committed)):
        assert (n1, i1, len(a1)) == (n2, i2, len(a2)), f"record {i}: rerun the generator"
        for j, (x, y) in enumerate(zip(a1, a2)):
            assert x.dtype == y.dtype and x.size == y.size, f"record {i} ({n1}) array {j}"
            # the first arrays of a record are inputs (exact); computed
            # results may move by a few ulps with another libm
            assert_close_ulps(x, y, 4, f"record {i} ({n1}) array {j}")


def test_golden_attn_reproducible(root, tmp_path):
    out = tmp_path / "attn_golden.bin"
    subprocess.run([sys.executable, os.path.join(root, "tests", "gen", "gen_attn_golden.py"), str(out)],
                   check=True, cwd=root, capture_output=True)
    with open(os.path.join(root, "tests", "data", "attn_golden.bin"), "rb") as f:
        committed = f.read()
    fresh = out.read_bytes()
    assert len(fresh) == len(committed) and fresh[:12] == committed[:12]
    # headers are 7 int32 per case; compare everything as float32 words
    # within 4 ulps (header ints are small and equal bit for bit anyway)
    a = np.frombuffer(fresh, dtype=np.float32, offset=12)
    b = np.frombuffer(committed, dtype=np.float32, offset=12)
    ia, ib = a.view(np.int32), b.view(np.int32)
    assert np.all(np.abs(ia.astype(np.int64) - ib.astype(np.int64)) <= 4), \
        "rerun tests/gen/gen_attn_golden.py and commit its output"


@pytest.mark.parametrize("threads", [1, 2])
def test_bench_kernels_json(microbench_bin, tmp_path, threads):
    png = tmp_path / "k.png"
    p = subprocess.run([microbench_bin, "--kernels", "--json", "--hot", "-r", "1", "-t", str(threads),
                        "--types", "Q4_1,Q8_0,BF16", "--shapes", "kv", "--m", "1,4",
                        "--no-membw", "--png", str(png)],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    mm = [r for r in recs if r["bench"] == "matmul"]
    # ref runs at m <= 4; avx2/avx512 where the CPU has them
    assert {(r["type"], r["m"]) for r in mm} == {(t, m) for t in ("Q4_1", "Q8_0", "BF16") for m in (1, 4)}
    for r in mm:
        for k in ("variant", "shape", "n", "rows", "threads", "us", "us_sd", "gflops", "gbps", "commit", "cpu"):
            assert k in r
        assert r["threads"] == threads and r["n"] == 576 and r["rows"] == 192
        assert r["us"] > 0 and r["gflops"] > 0
        # GFLOP/s is 2*m*n*rows per call (printed with 3 decimals)
        assert abs(r["gflops"] - 2 * r["m"] * r["n"] * r["rows"] / r["us"] / 1e3) < 1e-2 * r["gflops"] + 2e-3
    assert_chart(png)


def test_bench_kernels_bad_options(microbench_bin):
    for args in (["--types", "Q9_Z"], ["-t", "0"], ["--cpu-time", "-t", "2"], ["--m", "3"]):
        p = subprocess.run([microbench_bin, "--kernels"] + args, capture_output=True, text=True)
        assert p.returncode == 2, (args, p.stderr)
