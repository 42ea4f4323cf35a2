"""Kernel-level checks driven from Python:

- tests/data/kernels_golden.bin (read by tests/unit_kernels.c) is exactly
  what the checked-in generator tests/gen/gen_kernels.py writes, so the C
  golden test compares against numpy/gguf, not against a stale file;
- `anvil bench --kernels` runs, verifies each kernel against the reference
  before timing, and prints well-formed JSON records and a PNG. Speed is
  never asserted here.
"""
import json
import os
import subprocess
import sys

import pytest


def test_golden_file_is_reproducible(root, tmp_path):
    out = tmp_path / "kernels_golden.bin"
    subprocess.run([sys.executable, os.path.join(root, "tests", "gen", "gen_kernels.py"), str(out)],
                   check=True, cwd=root)
    with open(os.path.join(root, "tests", "data", "kernels_golden.bin"), "rb") as f:
        committed = f.read()
    assert out.read_bytes() == committed, "rerun tests/gen/gen_kernels.py and commit its output"


@pytest.mark.parametrize("threads", [1, 2])
def test_bench_kernels_json(anvil_bin, tmp_path, threads):
    png = tmp_path / "k.png"
    p = subprocess.run([anvil_bin, "bench", "--kernels", "--json", "--hot", "-r", "1", "-t", str(threads),
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
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_kernels_bad_options(anvil_bin):
    for args in (["--types", "Q5_K"], ["-t", "0"], ["--cpu-time", "-t", "2"], ["--m", "3"]):
        p = subprocess.run([anvil_bin, "bench", "--kernels"] + args, capture_output=True, text=True)
        assert p.returncode == 2, (args, p.stderr)
