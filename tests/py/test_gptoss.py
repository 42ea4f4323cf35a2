"""gpt-oss (src/model/arch/gptoss.c) on a tiny random-weight file written
by tests/gen/tiny_arch.py (make_gguf_gptoss): 3 layers (sliding window 16
on layers 0 and 2, full attention on 1), 4 query heads of 64 on 2 kv
heads, biases on Q/K/V/Wo, attention sinks, YaRN RoPE (factor 8, original
context 64), 4 experts of which 2 are used (top-k softmax gating) with
biases and the clamped SwiGLU (the gate/up weights are large enough that
the clamp at 7 bites), experts in MXFP4 and the dense parts in F32, Q8_0
or F16. Prompts run well past the window.

- anvil's logits against the independent float64 numpy forward pass
  (forward_gptoss), on every kernel family this CPU runs;
- the expert-grouped MoE path against the row-by-row reference
  (ANVIL_MOE_REF=1), 1-3 threads, and token by token (prefill == decode);
- a 300-token prompt: prefill tiles across the 256-key chunk edge with
  windowed layers that skip chunks, against numpy;
- against llama-cpp-python on the same file: logits and greedy text
  (`full`: llama-cpp-python);
- the gpt-4o (o200k) pre-tokenizer against llama-cpp-python on the
  default vocabulary relabelled (`full`);
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

TOKS = [int(x) for x in np.random.default_rng(35).integers(0, 256, 72)]
# worst row's error over the row's logit range, by the dense parts' type
# (the MXFP4 experts take their activations in Q8 blocks on every type)
TOL = {"F32": 5e-2, "F16": 5e-2, "Q8_0": 6e-2}


def logits_json(path, toks, env=None, args=()):
    e = dict(os.environ, **(env or {}))
    p = run([build_path("release", "tool_logits"), path, "-a", *args],
            input=" ".join(map(str, toks)) + "\n", text=True, env=e)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.splitlines()[0])["all"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gptoss")
    out = {}
    for dense in TOL:
        path = str(d / f"gptoss-{dense}.gguf")
        out[dense] = (path, tiny_arch.make_gguf_gptoss(path, dense=dense, seed=1))
    return out


@pytest.mark.parametrize("dense", list(TOL))
def test_vs_numpy(files, dense):
    path, w = files[dense]
    ref = tiny_arch.forward_gptoss(w, TOKS)
    for fam in kernel_families():
        err = rel_err(anvil_rows(path, TOKS, fam), ref)
        assert err.max() <= TOL[dense], f"{dense} {fam}: worst row {err.argmax()} {err.max():.2e}"


def test_numpy_checks_every_feature(files):
    """The features change the numbers (each check above can fail): with
    the sinks zeroed, no YaRN, no clamp or no window the numpy reference
    moves far beyond the tolerance."""
    path, w = files["F32"]
    ref = tiny_arch.forward_gptoss(w, TOKS)
    got = anvil_rows(path, TOKS, "ref")
    assert rel_err(got, ref).max() <= TOL["F32"]
    no_sink = dict(w)
    for l in range(3):
        no_sink[f"blk.{l}.attn_sinks.weight"] = np.full(4, -np.inf)
    variants = {"sinks": (no_sink, {}), "yarn": (w, {"yarn_factor": 0.0}),
                "clamp": (w, {"limit": 1e9}), "window": (w, {"swa": 1000})}
    for what, (wv, cfg) in variants.items():
        other = tiny_arch.forward_gptoss(wv, TOKS, cfg)
        assert rel_err(got, other).max() > 5 * TOL["F32"], what


def test_grouped_equals_reference(files):
    path, _ = files["Q8_0"]
    for fam in kernel_families():
        ref = logits_json(path, TOKS, {"ANVIL_MOE_REF": "1"}, ["-k", fam])
        for threads in ("1", "2", "3"):
            got = logits_json(path, TOKS, {"ANVIL_MOE_REF": "0"}, ["-k", fam, "-t", threads])
            assert got == ref, f"{fam} -t {threads}: grouped != reference"
        tok = logits_json(path, TOKS, {"ANVIL_MOE_REF": "0"}, ["-k", fam, "-s", "1", "-t", "2"])
        assert tok == ref, f"{fam}: token by token != reference"


def test_long_prompt_vs_numpy(files):
    """300 positions: past the 256-key chunk and the original context of
    YaRN; prefill in chunks of 100 equals the whole prompt."""
    path, w = files["F32"]
    toks = [int(x) for x in np.random.default_rng(36).integers(0, 256, 300)]
    ref = tiny_arch.forward_gptoss(w, toks)
    fam = kernel_families()[-1]
    whole = anvil_rows(path, toks, fam)
    # a few rows whose two best router logits nearly tie may pick another
    # expert than float64 does (the MXFP4 matmuls quantize activations):
    # those rows differ; every other row is within the tolerance
    err = rel_err(whole, ref)
    assert np.mean(err <= TOL["F32"]) >= 0.97 and np.median(err) <= TOL["F32"] / 3, np.sort(err)[-8:]
    chunked = anvil_rows(path, toks, fam, chunk=100)
    assert np.array_equal(whole, chunked)


def test_vs_llamacpp(files):
    import llama_cpp
    for dense in ("F32", "Q8_0"):
        path, _ = files[dense]
        llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=256, logits_all=True,
                              n_threads=2, verbose=False)
        llm.eval(TOKS)
        ref = np.array(llm.scores[:len(TOKS)], dtype=np.float64)
        got = anvil_rows(path, TOKS)
        err = rel_err(got, ref)
        assert err.max() <= 2 * TOL[dense], f"{dense}: worst row {err.argmax()} {err.max():.2e}"
        same_top = np.mean(np.argmax(got, axis=1) == np.argmax(ref, axis=1))
        assert same_top >= 0.9, f"{dense}: same top token {same_top:.2f}"


def test_greedy_text_vs_llamacpp(files):
    import llama_cpp
    path, _ = files["F32"]
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


# ---------------------------------------------------------------------------
# the gpt-4o pre-tokenizer (src/tok/pretok.c)

CASE_TEXTS = [s.encode() for s in (
    "HelloWorld camelCaseXMLParser getHTTPResponseCode IOError",
    "I'M YOU'RE they'll We'VE it'S", "McDonald's O'Neil's don't",
    "\u00c9COLE \u00e9cole \u00c9cole", "\u0391\u0392\u0393 \u03b1\u03b2\u03b3 \u0391\u03b2\u03b3",
    "nai\u0308ve cafe\u0301 \u0915\u093f\u0924\u093e\u092c",
    "path/to/file\n\n  /usr/bin\r\n", "12345 1234567 \u0661\u0662\u0663\u0664",
    "  \u00a0 x\u3000y \t\n z", "\u4f60\u597d\u4e16\u754c ABC\u4f60 abc", "ǅungla ǈ ǋ",
)]


@pytest.mark.parametrize("pre", ["gpt-4o", "llama4"])
def test_pretokenizer_gpt4o(tmp_path, pre):
    import llama_cpp
    from tokutil import MODEL, TEXTS, compare, tools, write_gguf_with
    path = str(tmp_path / f"vocab-{pre}.gguf")
    write_gguf_with(MODEL, path, {"tokenizer.ggml.pre": pre})
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    texts = TEXTS[::2] + [t for t in TEXTS if len(t) >= 5000] + CASE_TEXTS
    compare(tools()[0], path, llm, texts, True, label=pre)


# ---------------------------------------------------------------------------
# bad input

def load_error(anvil_bin, path):
    p = run([anvil_bin, "run", "-m", path, "-p", "hi", "-n", "1"], text=True)
    return p.returncode, p.stderr


def mxfp4_nan_scale(path):
    """A file whose blk.1.ffn_down_exps.weight has an MXFP4 block with
    scale byte 0xFF (E8M0 NaN)."""
    tiny_arch.make_gguf_gptoss(path)
    import gguf
    r = gguf.GGUFReader(path)
    t = next(t for t in r.tensors if t.name == "blk.1.ffn_down_exps.weight")
    off = int(t.data_offset) + 17 * 5  # the sixth block's scale byte
    with open(path, "r+b") as f:
        f.seek(off)
        f.write(b"\xff")


A = "gpt-oss"
BAD = {
    "used_zero": (dict(u32={f"{A}.expert_used_count": 0}), "expert_used_count 0"),
    "used_too_many": (dict(u32={f"{A}.expert_used_count": 5}), "expert_used_count 5"),
    "missing_sinks": (dict(drop=["blk.2.attn_sinks.weight"]), "blk.2.attn_sinks.weight"),
    "sinks_shape": (dict(override={"blk.0.attn_sinks.weight": np.zeros(3, np.float32)}),
                    "blk.0.attn_sinks.weight"),
    "sinks_nan": (dict(override={"blk.1.attn_sinks.weight": np.array([0, np.nan, 0, 0], np.float32)}),
                  "blk.1.attn_sinks.weight"),
    "missing_gate_bias": (dict(drop=["blk.1.ffn_gate_exps.bias"]), "blk.1.ffn_gate_exps.bias"),
    "down_bias_shape": (dict(override={"blk.0.ffn_down_exps.bias": np.zeros((4, 64), np.float32)}),
                        "blk.0.ffn_down_exps.bias"),
    "missing_router_bias": (dict(drop=["blk.0.ffn_gate_inp.bias"]), "blk.0.ffn_gate_inp.bias"),
    "expert_shape": (dict(override={"blk.2.ffn_up_exps.weight": np.zeros((4, 32, 128), np.float32)}),
                     "blk.2.ffn_up_exps.weight"),
    "missing_down": (dict(drop=["blk.0.ffn_down_exps.weight"]), "blk.0.ffn_down_exps.weight"),
    "missing_out_bias": (dict(drop=["blk.1.attn_output.bias"]), "blk.1.attn_output.bias"),
    "gating": (dict(u32={f"{A}.expert_gating_func": 4}), "expert_gating_func 4"),
    "no_window": (dict(u32={f"{A}.attention.sliding_window": 0}), "sliding_window"),
    "yarn_factor": (dict(f32={f"{A}.rope.scaling.factor": 0.5}), "rope.scaling.factor"),
    "rope_type": (dict(strs={f"{A}.rope.scaling.type": "longrope"}), "longrope"),
    "mxfp4_nan": (None, "blk.1.ffn_down_exps.weight"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input(tmp_path, anvil_bins, case):
    kw, want = BAD[case]
    path = str(tmp_path / f"{case}.gguf")
    if case == "mxfp4_nan":
        mxfp4_nan_scale(path)
    else:
        tiny_arch.make_gguf_gptoss(path, **kw)
    for b in anvil_bins:
        rc, err = load_error(b, path)
        assert rc == 2, (b, case, rc, err)
        assert want in err, (case, err)
        assert "AddressSanitizer" not in err and "runtime error" not in err
