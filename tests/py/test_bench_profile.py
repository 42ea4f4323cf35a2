"""`anvil bench --profile`: time by category (matmul, attention, norms and
element-wise ops, the decode call, sampling, scheduler) on the pp/tg bench
and the serving scenarios, in the table and the JSON.

The numbers are timings, so the checks are on their structure and on what
must hold whatever the machine does: the shares partition the profiled
time (they add up to 1); pp/tg have no sampling or scheduler; a scenario
has a scheduler; the profiled and unprofiled throughputs are both
reported with the on/off ratio of each pair; and attention is timed at
a short and a long context alike. How its share grows with the context
is a measurement (`anvil bench --profile -n 900`), not asserted: on a
shared machine a share of time moves with the load.
"""
import json
import os
import sys

import pytest

from conftest import ROOT, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_arch  # noqa: E402

CATS = ["prof_matmul", "prof_attn", "prof_norm", "prof_router", "prof_experts", "prof_scatter",
        "prof_decode", "prof_sample", "prof_sched"]
MOE_CATS = ["prof_router", "prof_experts", "prof_scatter"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("prof") / "hp1.gguf")
    tiny_arch.make_gguf(path, "hp1", "F32", seed=3, n_ctx=2048)
    return path


def bench(anvil_bin, *args):
    p = run([anvil_bin, "bench", *args], text=True)
    assert p.returncode == 0, p.stderr
    return p.stdout


def rows(out):
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


def check_shares(r):
    for k in CATS:
        assert 0.0 <= r[k] <= 1.0, (k, r)
    assert abs(sum(r[k] for k in CATS) - 1.0) < 2e-3, r
    assert r["prof_ms_per_call"] > 0


def test_pp_tg_profile_json(anvil_bin, tiny):
    out = rows(bench(anvil_bin, "-m", tiny, "-p", "64", "-n", "8", "-r", "2", "-t", "2",
                     "--profile", "--json"))
    assert [r["test"] for r in out] == ["pp64", "tg8"]
    for r in out:
        check_shares(r)
        assert r["prof_sample"] == 0 and r["prof_sched"] == 0  # no engine here
        assert r["prof_matmul"] > 0 and r["prof_attn"] > 0 and r["prof_norm"] > 0
        assert all(r[k] == 0 for k in MOE_CATS), r  # a dense model
        assert r["tok_s"] > 0 and r["tok_s_prof_on"] > 0
        assert r["prof_on_off_ratio_min"] <= r["prof_on_off_ratio"] <= r["prof_on_off_ratio_max"]


def test_pp_tg_without_profile_has_no_fields(anvil_bin, tiny):
    out = rows(bench(anvil_bin, "-m", tiny, "-p", "16", "-n", "4", "-r", "1", "--json"))
    assert out and all("prof_matmul" not in r for r in out)


def test_attention_timed_at_any_context(anvil_bin, tiny):
    for n in ("8", "300"):
        r, = rows(bench(anvil_bin, "-m", tiny, "-p", "0", "-n", n, "-r", "1", "-t", "1",
                        "--profile", "--json"))
        check_shares(r)
        assert r["test"] == f"tg{n}" and r["prof_attn"] > 0 and r["prof_matmul"] > 0, r


def test_pp_tg_profile_table(anvil_bin, tiny):
    out = bench(anvil_bin, "-m", tiny, "-p", "32", "-n", "4", "-r", "2", "--profile")
    lines = out.splitlines()
    head = [l for l in lines if l.startswith("| test") and "matmul" in l]
    assert head and "t/s on" in head[0]
    assert any(l.startswith("| pp32 ") for l in lines) and any(l.startswith("| tg4 ") for l in lines)


def test_scenario_profile(anvil_bin, tiny):
    out = bench(anvil_bin, "-m", tiny, "--scenario", "decode_heavy_b32", "-t", "2", "--profile",
                "--json")
    r, = rows(out)
    check_shares(r)
    assert r["prof_sched"] > 0 and r["prof_matmul"] > 0 and r["prof_attn"] > 0
    table = bench(anvil_bin, "-m", tiny, "--scenario", "single_stream", "--profile")
    assert any(l.startswith("| single_stream ") and "%" in l for l in table.splitlines()), table


@pytest.mark.parametrize("moe_ref", ["0", "1"])
def test_moe_profile_categories(anvil_bin, tmp_path, moe_ref):
    """A mixture of experts' time is charged to its router, its experts and
    the weighted scatter (the grouped path and the reference alike); the
    shares still partition the profiled time, and the table grows the three
    columns (a dense model's table has none: test_pp_tg_profile_table)."""
    path = str(tmp_path / "qwen3moe.gguf")
    tiny_arch.make_gguf(path, "qwen3moe", "F32", seed=5)
    env = dict(os.environ, ANVIL_MOE_REF=moe_ref)
    p = run([anvil_bin, "bench", "-m", path, "-p", "32", "-n", "4", "-r", "2", "-t", "2",
             "--profile", "--json"], text=True, env=env)
    assert p.returncode == 0, p.stderr
    for r in rows(p.stdout):
        check_shares(r)
        assert all(r[k] > 0 for k in MOE_CATS), r
    p = run([anvil_bin, "bench", "-m", path, "-p", "32", "-n", "0", "-r", "1", "--profile"],
            text=True, env=env)
    assert p.returncode == 0, p.stderr
    head = [l for l in p.stdout.splitlines() if l.startswith("| test") and "matmul" in l]
    assert head and all(c in head[0] for c in ("router", "experts", "scatter")), p.stdout
