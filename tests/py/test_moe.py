"""Mixture-of-experts models (src/model/moe.c) on tiny random-weight files
of tests/gen/tiny_arch.py (mixtral, qwen3moe, qwen2moe, olmoe,
granitemoe). test_archs.py already checks each of them against numpy on
every kernel family, against llama-cpp-python, prefill against decode and
batch invariance; here:

- the expert-grouped path against the row-by-row reference layer
  (ANVIL_MOE_REF=1): the same bits, on every kernel family, with 1, 2 and
  3 threads (the (expert, row tile) split) and token by token;
- Q4_K experts (n_embd 256) against numpy;
- sigmoid gating, expert_weights_norm given by the file against the
  architecture's default, expert_weights_scale;
- routing ties (a zero router: every probability equal, the lowest
  experts win, as in llama.cpp) and experts that no token chooses (their
  weights are NaN here: a path that read them would poison the logits);
- greedy text against llama-cpp-python (`full`);
- bad input: exit status 2 and a message naming the key or tensor.
"""
import json
import os
import sys

import numpy as np
import pytest

from conftest import ROOT, build_path, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_arch  # noqa: E402
from test_archs import anvil_rows, kernel_families, rel_err  # noqa: E402

pytestmark = pytest.mark.kernels

TOKS = [int(x) for x in np.random.default_rng(12).integers(0, 256, 80)]


def logits_json(path, toks, env=None, args=()):
    e = dict(os.environ, **(env or {}))
    p = run([build_path("release", "tool_logits"), path, "-a", *args],
            input=" ".join(map(str, toks)) + "\n", text=True, env=e)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[0])["all"]


@pytest.mark.parametrize("name", tiny_arch.MOE_ARCHS)
def test_grouped_equals_reference(tmp_path, name):
    path = str(tmp_path / f"{name}.gguf")
    tiny_arch.make_gguf(path, name, "Q8_0", seed=3)
    for fam in kernel_families():
        ref = logits_json(path, TOKS, {"ANVIL_MOE_REF": "1"}, ["-k", fam])
        for threads in ("1", "2", "3"):
            got = logits_json(path, TOKS, {"ANVIL_MOE_REF": "0"}, ["-k", fam, "-t", threads])
            assert got == ref, f"{name} {fam} -t {threads}: grouped != reference"
        tok = logits_json(path, TOKS, {"ANVIL_MOE_REF": "0"}, ["-k", fam, "-s", "1", "-t", "2"])
        assert tok == ref, f"{name} {fam}: token by token != reference"


def test_q4k_experts_vs_numpy(tmp_path):
    cfg = {"n_embd": 256, "moe_changes": {"n_ff_exp": 256}}
    path = str(tmp_path / "q4k.gguf")
    w = tiny_arch.make_gguf(path, "qwen3moe", "Q4_K", seed=2, cfg=cfg)
    ref = tiny_arch.forward("qwen3moe", w, TOKS, cfg=cfg)
    for fam in kernel_families():
        err = rel_err(anvil_rows(path, TOKS, fam), ref)
        # a few rows may route differently (activations are quantized): the
        # bulk must agree closely
        assert np.median(err) <= 5e-3 and np.mean(err > 4e-2) <= 0.05, (fam, np.median(err), err.max())


@pytest.mark.parametrize("moe", [
    dict(gating=2),                              # sigmoid router
    dict(norm_w=False, norm_key=True),           # the file overrides qwen3moe's renormalization
    dict(gating=2, norm_w=True, norm_key=True, w_scale=2.5),
])
def test_gating_options_vs_numpy(tmp_path, moe):
    cfg = {"moe_changes": moe}
    path = str(tmp_path / "g.gguf")
    w = tiny_arch.make_gguf(path, "qwen3moe", "F32", seed=4, cfg=cfg)
    ref = tiny_arch.forward("qwen3moe", w, TOKS, cfg=cfg)
    # the same weights under the default routing are far off: the option is used
    plain = tiny_arch.forward("qwen3moe", w, TOKS)
    assert rel_err(plain, ref).max() > 1e-2
    for fam in kernel_families():
        err = rel_err(anvil_rows(path, TOKS, fam), ref)
        assert err.max() <= 1e-3, (moe, fam, err.max())


def tie_file(tmp_path, name):
    """A zero router (every token ties on every expert, so experts 0..k-1
    win) and NaN weights in the experts no token chooses."""
    cfg = {"moe_changes": {"zero_router": True}}
    c = tiny_arch.cfg_of(name, **cfg)
    k, n_exp = c["moe"]["used"], c["moe"]["n_expert"]
    path = str(tmp_path / f"tie-{name}.gguf")
    w = tiny_arch.make_gguf(path, name, "F32", seed=6, cfg=cfg)
    override = {}
    for l in range(c["n_layer"]):
        for part in ("gate", "up", "down"):
            t = w[f"blk.{l}.ffn_{part}_exps.weight"].astype(np.float32)
            t[k:] = np.nan
            override[f"blk.{l}.ffn_{part}_exps.weight"] = t
    w = tiny_arch.make_gguf(path, name, "F32", seed=6, cfg=cfg, override=override)
    return path, w, cfg, k, n_exp


@pytest.mark.parametrize("name", ["qwen3moe", "mixtral"])
def test_routing_ties_and_unchosen_experts(tmp_path, name):
    path, w, cfg, k, n_exp = tie_file(tmp_path, name)
    stats = {}
    ref = tiny_arch.forward(name, w, TOKS, stats=stats, cfg=cfg)
    assert stats["chosen"] == set(range(k)) and k < n_exp
    assert np.isfinite(ref).all()
    for fam in kernel_families():
        for env in ("0", "1"):
            got = np.array(logits_json(path, TOKS, {"ANVIL_MOE_REF": env}, ["-k", fam, "-t", "2"]))
            assert np.isfinite(got).all(), (fam, env)
            assert rel_err(got, ref).max() <= 1e-3, (fam, env)


def test_batched_rows_share_experts(tmp_path):
    """Several sequences in one batch (rows of different sequences meeting
    at the same experts) give each its own greedy continuation and logits,
    with 2 threads."""
    path = str(tmp_path / "b.gguf")
    tiny_arch.make_gguf(path, "qwen3moe", "Q8_0", seed=8)
    prompts = [TOKS[:30], TOKS[5:70], TOKS[:3], TOKS[40:]]
    inp = "".join(" ".join(map(str, t)) + "\n" for t in prompts)
    tool = build_path("release", "tool_logits")
    one = run([tool, path, "-g", "16", "-t", "2"], input=inp, text=True)
    many = run([tool, path, "-g", "16", "-t", "2", "-b"], input=inp, text=True)
    assert one.returncode == 0 and many.returncode == 0, one.stderr + many.stderr
    assert one.stdout == many.stdout


@pytest.mark.full
@pytest.mark.parametrize("name", tiny_arch.MOE_ARCHS)
def test_greedy_text_vs_llamacpp(tmp_path, name):
    import llama_cpp
    path = str(tmp_path / f"{name}.gguf")
    tiny_arch.make_gguf(path, name, "F32", seed=7)
    prompt, n_gen = TOKS[:20], 24
    llm = llama_cpp.Llama(model_path=path, n_ctx=128, n_batch=64, logits_all=True, n_threads=2,
                          verbose=False)
    llm.eval(prompt)
    want = []
    for _ in range(n_gen):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        want.append(t)
        llm.eval([t])
    p = run([build_path("release", "tool_logits"), path, "-g", str(n_gen)],
            input=" ".join(map(str, prompt)) + "\n", text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.splitlines()[0])["gen"] == want


@pytest.mark.full
def test_ties_vs_llamacpp(tmp_path):
    """llama.cpp breaks the zero router's ties the same way (lowest expert
    first): the NaN experts stay unread there too."""
    import llama_cpp
    path, _, _, _, _ = tie_file(tmp_path, "qwen3moe")
    llm = llama_cpp.Llama(model_path=path, n_ctx=128, n_batch=128, logits_all=True, n_threads=2,
                          verbose=False)
    llm.eval(TOKS)
    ref = np.array(llm.scores[:len(TOKS)], dtype=np.float64)
    got = np.array(logits_json(path, TOKS))
    assert rel_err(got, ref).max() <= 2e-3


# ---------------------------------------------------------------------------
# bad input

def load_error(anvil_bin, path):
    p = run([anvil_bin, "run", "-m", path, "-p", "hi", "-n", "1"], text=True)
    return p.returncode, p.stderr


BAD = {
    "used_zero": ("qwen3moe", dict(extra_u32={"qwen3moe.expert_used_count": 0}), "expert_used_count"),
    "used_too_many": ("qwen3moe", dict(cfg={"moe_changes": {"used": 9}}), "expert_used_count 9"),
    "no_experts": ("qwen3moe", dict(extra_u32={"qwen3moe.expert_count": 0}), "expert_count"),
    "missing_router": ("qwen3moe", dict(drop=["blk.1.ffn_gate_inp.weight"]), "blk.1.ffn_gate_inp.weight"),
    "router_shape": ("mixtral", dict(override={"blk.0.ffn_gate_inp.weight": np.zeros((3, 128), np.float32)}),
                     "blk.0.ffn_gate_inp.weight"),
    "expert_shape": ("olmoe", dict(override={"blk.0.ffn_up_exps.weight": np.zeros((8, 32, 128), np.float32)}),
                     "blk.0.ffn_up_exps.weight"),
    "missing_down": ("qwen2moe", dict(drop=["blk.1.ffn_down_exps.weight"]), "blk.1.ffn_down_exps.weight"),
    "gating": ("qwen3moe", dict(cfg={"moe_changes": {"gating": 3}}), "expert_gating_func 3"),
    "shared_len": ("qwen2moe", dict(drop=["blk.0.ffn_gate_shexp.weight"]), "blk.0.ffn_gate_shexp.weight"),
    "logit_scale": ("granitemoe", dict(cfg={"granite": None}), "granitemoe.logit_scale"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_moe_bad_input(tmp_path, anvil_bin, anvil_bins, case):
    name, kw, want = BAD[case]
    path = str(tmp_path / f"{case}.gguf")
    if case == "no_experts":  # the writer adds expert_count itself: patch it in place
        tiny_arch.make_gguf(path, name)
        with open(path, "r+b") as f:
            data = f.read()
            i = data.index(b"qwen3moe.expert_count") + len(b"qwen3moe.expert_count") + 4
            f.seek(i)
            f.write((0).to_bytes(4, "little"))
    elif case == "used_zero":
        tiny_arch.make_gguf(path, name)
        with open(path, "r+b") as f:
            data = f.read()
            i = data.index(b"qwen3moe.expert_used_count") + len(b"qwen3moe.expert_used_count") + 4
            f.seek(i)
            f.write((0).to_bytes(4, "little"))
    else:
        tiny_arch.make_gguf(path, name, **kw)
    for b in anvil_bins:
        rc, err = load_error(b, path)
        assert rc == 2, (b, case, rc, err)
        assert want in err, (case, err)
        assert "AddressSanitizer" not in err and "runtime error" not in err


def test_old_per_expert_tensors_refused(tmp_path, anvil_bins):
    """Old Mixtral conversions (blk.N.ffn_gate.E.weight) get a message."""
    path = str(tmp_path / "old.gguf")
    e = np.zeros((64, 128), np.float32)
    tiny_arch.make_gguf(path, "mixtral", override={"blk.0.ffn_gate.0.weight": e})
    for b in anvil_bins:
        rc, err = load_error(b, path)
        assert rc == 2 and "blk.0.ffn_gate.0.weight" in err and "3-D" in err, err
