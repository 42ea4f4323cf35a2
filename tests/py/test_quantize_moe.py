"""Quantization mixes on mixture-of-experts files (`anvil quantize`, issue
35 part 3) against llama.cpp's quantizer (llama_model_quantize, the code of
llama-quantize) on the same F16 files of tests/gen/tiny_arch.py, rows of
256 so that no K-quant falls back:

  - qwen3moe with 8 experts (the 8-expert rules: attn_v and attn_k Q8_0,
    attn_output Q5_K below Q5, ffn_down_exps counted by the layer in its
    name) and qwen2moe (4 experts and a shared expert, whose ffn_down_shexp
    is an ffn_down too): every tensor the same type, the same file type,
    and each converted tensor's RMSE no worse than llama.cpp's
    (test_quantize_mix.compare);
  - gpt-oss under MXFP4_MOE (experts MXFP4, the rest Q8_0) and Q4_K_M;
  - anvil runs the files llama.cpp wrote: its logits on them against the
    float64 numpy forward pass of tiny_arch on the weights as that file
    holds them (dequantized by the gguf package), as close as
    llama-cpp-python's own logits on the file are.
"""
import os
import sys

import numpy as np
import pytest

from conftest import ROOT, build_path, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_arch  # noqa: E402
from test_archs import anvil_rows, rel_err  # noqa: E402
from test_quantize_mix import FTYPE, anvil_quantize, compare, llama_quantize  # noqa: E402

FTYPES = dict(FTYPE, MXFP4_MOE=38)
WIDE = {"n_embd": 256, "n_layer": 8, "moe_changes": {"n_ff_exp": 256}}
CFGS = {"qwen3moe": WIDE,
        "qwen2moe": dict(WIDE, n_layer=4, moe_changes={"n_ff_exp": 256, "n_sh": 256})}
GPTOSS_CFG = {"n_embd": 256, "n_ff_exp": 256, "n_layer": 4}
TOKS = [int(x) for x in np.random.default_rng(4).integers(0, 256, 24)]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    d = tmp_path_factory.mktemp("moe_src")
    out = {}
    out["qwen3moe"] = str(d / "qwen3moe.f16.gguf")
    tiny_arch.make_gguf(out["qwen3moe"], "qwen3moe", "F16", seed=1, cfg=CFGS["qwen3moe"])
    out["qwen2moe"] = str(d / "qwen2moe.f16.gguf")
    tiny_arch.make_gguf(out["qwen2moe"], "qwen2moe", "F16", seed=2, cfg=CFGS["qwen2moe"])
    out["gpt-oss"] = str(d / "gptoss.f16.gguf")
    tiny_arch.make_gguf_gptoss(out["gpt-oss"], dense="F16", experts="F16", seed=3,
                               cfg=GPTOSS_CFG)
    return out


# the other mixes of the 8-expert rules run in the full tier
CASES = [pytest.param(n, m, id=f"{n}-{m}") for n, m in
         (("qwen3moe", "Q4_K_M"), ("qwen2moe", "Q4_K_M"), ("gpt-oss", "MXFP4_MOE"),
          ("gpt-oss", "Q4_K_M"))] + \
        [pytest.param("qwen3moe", m, id=f"qwen3moe-{m}", marks=pytest.mark.full)
         for m in ("Q3_K_M", "Q2_K")]


@pytest.mark.parametrize("name,mix", CASES)
def test_moe_mix_matches_llama_cpp(sources, tmp_path, name, mix):
    src = sources[name]
    ours, theirs = str(tmp_path / "anvil.gguf"), str(tmp_path / "llama.gguf")
    anvil_quantize(src, ours, mix)
    llama_quantize(src, theirs, FTYPES[mix])
    compare(src, ours, theirs, mix, FTYPES)
    if mix in ("MXFP4_MOE", "Q4_K_M"):
        check_runs_llama_file(theirs, name)


def stored_weights(path):
    import gguf
    w = {}
    for t in gguf.GGUFReader(path).tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        w[t.name] = a.reshape([int(x) for x in reversed(t.shape)])
    return w


def check_runs_llama_file(path, name):
    """anvil's logits on llama.cpp's file against numpy's on its weights."""
    import llama_cpp
    w = stored_weights(path)
    if name == "gpt-oss":
        ref = tiny_arch.forward_gptoss(w, TOKS, cfg=GPTOSS_CFG)
    else:
        ref = tiny_arch.forward(name, w, TOKS, cfg=CFGS[name])
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, n_batch=64, logits_all=True, n_threads=2,
                          verbose=False)
    llm.eval(TOKS)
    theirs = rel_err(np.array([llm.scores[i] for i in range(len(TOKS))], dtype=np.float64), ref)
    ours = rel_err(anvil_rows(path, TOKS), ref)
    # both quantize the activations (about 1% of the logits' range over
    # these 8 random layers); a misread type or expert would be O(1)
    assert np.median(ours) <= max(2e-2, 2 * np.median(theirs)), (np.median(ours), np.median(theirs))
    assert ours.max() <= max(0.1, 2 * theirs.max()), (ours.max(), theirs.max())


def test_mxfp4_moe_requantize_copies_experts(sources, tmp_path):
    """A file whose experts are MXFP4 already (as gpt-oss ships) re-mixed
    under MXFP4_MOE keeps their bytes."""
    import gguf
    first, again = str(tmp_path / "a.gguf"), str(tmp_path / "b.gguf")
    anvil_quantize(sources["gpt-oss"], first, "MXFP4_MOE")
    anvil_quantize(first, again, "MXFP4_MOE")
    a = {t.name: t for t in gguf.GGUFReader(first).tensors}
    b = {t.name: t for t in gguf.GGUFReader(again).tensors}
    exps = [n for n in a if "_exps.weight" in n]
    assert exps and all(a[n].tensor_type.name == "MXFP4" for n in exps)
    for n in a:
        assert a[n].tensor_type == b[n].tensor_type, n
        assert np.array_equal(np.asarray(a[n].data), np.asarray(b[n].data)), n
    p = run([build_path("release", "tool_logits"), again, "-g", "4"],
            input=" ".join(map(str, TOKS)) + "\n", text=True)
    assert p.returncode == 0, p.stderr
