"""`anvil-microbench --attention --kind hp1`: HP1 gated attention next to the
softmax at the same shapes through the engine's attention driver, dense
and sparse PV, at controlled sparsities; the JSON records, the table, and
bad options. Timings are not checked (the machine is shared); the records'
structure and the sparsity actually reached are."""
import json

import pytest

from conftest import run


def test_hp1_records(microbench_bin):
    p = run([microbench_bin, "--attention", "--kind", "hp1", "--shape", "smollm2,mqa",
             "--batch", "1,3", "--ctx", "300,600", "--sparsity", "0,70", "--threads", "2",
             "--footprint", "4", "-r", "2", "--no-bw", "--json"], text=True, timeout=900)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    hp1 = [r for r in recs if r["bench"] == "attention_hp1"]
    # shapes x batches x contexts x split (off, on) x sparsities
    assert len(hp1) == 2 * 2 * 2 * 2 * 2
    for r in hp1:
        assert abs(r["zero_frac"] - r["sparsity_target"]) <= 0.05, r
        for k in ("softmax_us", "hp1_us", "hp1_dense_us", "hp1_gate_only_us", "hp1_gbs"):
            assert r[k] > 0, (k, r)
        assert r["kv_bytes"] == 2 * r["batch"] * r["head_dim"] * r["n_head_kv"] * r["ctx"] * 2
        if r["split"] == "on":
            assert r["split_used"]
        else:
            assert not r["split_used"]


def test_hp1_table(microbench_bin):
    p = run([microbench_bin, "--attention", "--kind", "hp1", "--shape", "smollm2", "--batch", "2",
             "--ctx", "100", "--sparsity", "50", "--split", "on", "--footprint", "2", "-r", "2",
             "--no-bw"], text=True, timeout=600)
    assert p.returncode == 0, p.stderr
    assert "HP1 vs softmax" in p.stdout
    rows = [l for l in p.stdout.splitlines() if l.startswith("| smollm2")]
    assert len(rows) == 1 and "50%" in rows[0], p.stdout


@pytest.mark.parametrize("args,want", [
    (["--kind", "hp2"], "--kind"),
    (["--kind", "hp1", "--sparsity", "100"], "--sparsity"),
    (["--kind", "hp1", "--png", "x.png"], "--png"),
])
def test_hp1_bad_options(microbench_bin, args, want):
    p = run([microbench_bin, "--attention"] + args, text=True)
    assert p.returncode == 2 and want in p.stderr, (args, p.stderr)
