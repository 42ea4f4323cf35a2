"""`anvil-microbench --attention --prefill N`: prefill chunks of N causal rows per
sequence through the engine's attention driver, GFLOP/s and the share of
the float FMA peak measured in the same run. Timings are not checked (the
machine is shared); the records' structure, the flop count, and bad
options are. The bench compares every case with the reference kernel
before timing it and exits non-zero on a disagreement."""
import json

import pytest

from conftest import run


def test_prefill_records(microbench_bin):
    p = run([microbench_bin, "--attention", "--prefill", "40", "--shape", "smollm2,mqa",
             "--batch", "1,3", "--ctx", "40,300", "--threads", "2", "--footprint", "4", "-r", "2",
             "--no-bw", "--json"], text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    att = [r for r in recs if r["bench"] == "attention"]
    assert len(att) == 2 * 2 * 2  # shapes x batches x contexts, split off only
    peaks = [r for r in recs if r["bench"] == "f32_peak_all"]
    for r in att:
        assert r["rows"] == 40 and r["split"] == "off", r
        n_head = r["n_head"]
        pairs = r["batch"] * n_head * (40 * (r["ctx"] - 40) + 40 * 41 / 2)
        flops = 4 * r["head_dim"] * pairs
        assert r["gflops"] == pytest.approx(flops / (r["us"] * 1e-6) / 1e9, rel=0.02), r
        if peaks:
            assert r["peak_frac"] == pytest.approx(r["gflops"] / peaks[0]["gflops"], abs=0.002)


def test_prefill_table(microbench_bin):
    p = run([microbench_bin, "--attention", "--prefill", "20", "--shape", "smollm2",
             "--batch", "2", "--ctx", "100", "--footprint", "2", "-r", "2", "--no-bw"],
            text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "prefill attention" in p.stdout and "FMA peak" in p.stdout
    rows = [l for l in p.stdout.splitlines() if l.startswith("| smollm2")]
    assert len(rows) == 1, p.stdout


@pytest.mark.parametrize("args,want", [
    (["--prefill", "0"], "--prefill"),
    (["--prefill", "64", "--ctx", "32"], "--ctx"),
    (["--prefill", "8", "--kind", "hp1"], "--prefill"),
])
def test_prefill_bad_options(microbench_bin, args, want):
    p = run([microbench_bin, "--attention"] + args, text=True)
    assert p.returncode == 2 and want in p.stderr, (args, p.stderr)
