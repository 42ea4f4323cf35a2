"""Routing statistics of `anvil bench --profile` on a mixture of experts
(bench/bench_route.c, anvil_ctx_get_route_stats): on a tiny random-weight
qwen3moe file, the rows per expert the JSON reports, per layer, are the
routing a numpy forward pass computes on the same file for the bench's
prompt (tests/gen/tiny_arch.py), summed over the profiled repetitions; they
add up to tokens * expert_used per layer; the per-step numbers follow
(a one-row decode step touches expert_used experts, a prefill step the
experts some row chose). Both the grouped path and the reference layer
(ANVIL_MOE_REF=1) count. A dense model reports no routing.
"""
import json
import os
import sys

import numpy as np
import pytest

from conftest import ROOT, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_arch  # noqa: E402

N_PP, N_TG, REPS = 32, 6, 2


def bench_tokens(n, n_vocab):
    """The prompt `anvil bench` decodes (bench_model.c run_pp_tg): a
    xorshift64 stream from a fixed seed, modulo n_vocab."""
    rng, out, mask = 0x9e3779b97f4a7c15, [], (1 << 64) - 1
    for _ in range(n):
        rng ^= (rng << 13) & mask
        rng ^= rng >> 7
        rng ^= (rng << 17) & mask
        out.append(rng % n_vocab)
    return out


def rows(out):
    return {r["test"]: r for r in (json.loads(l) for l in out.splitlines() if l.startswith("{"))}


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("route") / "qwen3moe.gguf")
    w = tiny_arch.make_gguf(path, "qwen3moe", "F32", seed=5)
    return path, w


@pytest.mark.parametrize("moe_ref", ["0", "1"])
def test_route_counts_match_numpy(anvil_bin, moe, moe_ref):
    path, w = moe
    c = tiny_arch.cfg_of("qwen3moe")
    k, n_exp, n_layer = c["moe"]["used"], c["moe"]["n_expert"], c["n_layer"]
    toks = bench_tokens(max(N_PP, N_TG), w["token_embd.weight"].shape[0])
    p = run([anvil_bin, "bench", "-m", path, "-p", str(N_PP), "-n", str(N_TG), "-r", str(REPS),
             "-t", "2", "--profile", "--json"], text=True, env=dict(os.environ, ANVIL_MOE_REF=moe_ref))
    assert p.returncode == 0, p.stderr
    got = rows(p.stdout)
    for test, n, steps in ((f"pp{N_PP}", N_PP, 1), (f"tg{N_TG}", N_TG, N_TG)):
        stats = {}
        tiny_arch.forward("qwen3moe", w, toks[:n], stats=stats)
        want = np.array([stats["route"][l] for l in range(n_layer)]) * REPS
        r = got[test]
        cnt = np.array(r["route_counts"])
        assert cnt.shape == (n_layer, n_exp), r
        assert (cnt.sum(axis=1) == REPS * n * k).all(), (test, cnt)
        # float32 against float64 agree on the choices away from near ties
        # (a margin below 1e-5 may move one row's choice: 2 cells a rep)
        ties = stats.get("near_ties", 0)
        assert ties <= n * n_layer // 4, ties  # the comparison still means something
        assert np.abs(cnt - want).sum() <= 2 * REPS * ties, (test, ties, cnt.tolist(), want.tolist())
        if ties:
            want = cnt  # the per-step numbers below from what anvil counted
        assert r["route_layer_rows"] == [REPS * n] * n_layer
        assert r["route_steps"] == REPS * steps and r["route_n_expert"] == n_exp
        per_step = want / (REPS * steps)
        assert r["route_rows_per_expert_max"] == pytest.approx(per_step.max(), abs=1e-3)
        assert r["route_rows_per_expert_min"] == pytest.approx(per_step.min(), abs=1e-3)
        assert r["route_rows_per_expert_mean"] == pytest.approx(n * k / (steps * n_exp), abs=1e-3)
        assert r["route_imbalance"] == pytest.approx(per_step.max() / per_step.mean(), abs=1e-3)
        assert r["route_unused_share"] == pytest.approx((want == 0).mean(), abs=1e-4)
        touched = k if steps > 1 else (want > 0).sum(axis=1).mean()
        assert r["route_experts_per_step"] == pytest.approx(touched, abs=1e-3), test
        # groups of >= 16 rows: only a prefill of 32 rows over 8 experts has them
        big = (want[want >= 16 * REPS]).sum() / want.sum() if steps == 1 else 0.0
        assert r["route_rows_big_share"] == pytest.approx(big, abs=1e-4), test


def test_route_table_and_dense(anvil_bin, moe):
    path, _ = moe
    p = run([anvil_bin, "bench", "-m", path, "-p", "16", "-n", "2", "-r", "1", "--profile"],
            text=True)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "routing:" in out and "random-weight model" in out, out
    lines = [l for l in out.splitlines() if l.startswith("| pp16 ") and "/" in l]
    assert [l.split("|")[2].strip() for l in lines] == ["0", "1", "all"], out
    dense = str(os.path.dirname(path) + "/dense.gguf")
    tiny_arch.make_gguf(dense, "qwen3", "F32", seed=1)
    p = run([anvil_bin, "bench", "-m", dense, "-p", "16", "-n", "2", "-r", "1", "--profile",
             "--json"], text=True)
    assert p.returncode == 0, p.stderr
    assert all("route_counts" not in r for r in rows(p.stdout).values())
    p = run([anvil_bin, "bench", "-m", dense, "-p", "16", "-n", "0", "-r", "1", "--profile"],
            text=True)
    assert p.returncode == 0 and "routing:" not in p.stdout
