"""Differential tests of the forward pass against llama-cpp-python (the same
llama.cpp, built from source) on the default GGUF: last-row logits and greedy
continuations, plus batch and thread-count invariance of our own engine.

Tolerances. With F16 weights (the default model converted by `anvil
quantize`), neither engine quantizes activations and the logits agree to
about 0.06% of the logit range (max |diff| 0.023 of 37); we require 0.25%.
With the Q4_1 model both engines round activations to 8 bits per block of
32 before every matmul, but differently (llama.cpp: Q8_1 with fp16 scale
and sum; anvil: Q8A with float scale and sum), and 30 layers amplify that
rounding noise (our own scalar and AVX-512 kernels, which differ only in
summation order, differ by up to 0.64 for the same reason): measured over
22 prompts, max |diff| up to 4.0% of the range, mean up to 1.5%,
correlation >= 0.999. We require max <= 6% and mean <= 2.5% of the range,
correlation >= 0.997, the same top token (unless the reference's top two
are a near-tie) and 3 of the top-5 ids in common.
"""
import json
import os

import numpy as np
import pytest

from conftest import build_path, run

# model-level numerics: .ci/run runs them again with each kernel family forced
pytestmark = pytest.mark.kernels

PROMPTS = [
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "The three primary colors are",
    "import numpy as np\n\nx = np.arange(10)\n",
    "Water boils at a temperature of",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nName a fruit.<|im_end|>\n<|im_start|>assistant\n",
    "In 1969, the first humans landed on",
    "The quick brown fox",
    "Photosynthesis is the process by which",
    "SELECT name, age FROM users WHERE",
    "1, 2, 3, 5, 8, 13,",
    "My favourite book is",
    "The best way to learn a new language is",
    "<|im_start|>user\nWrite a haiku about the moon.<|im_end|>\n<|im_start|>assistant\n",
    "The mitochondria is",
    "To be or not to be,",
    "A list of European countries: Germany, Spain,",
    "The largest planet in the solar system is",
    "Translate to French: Good morning! ->",
    "int main(void) {\n    printf(",
]
N_GEN = 32
# A divergence is allowed only where the reference's top two logits are
# closer than this. The Q4_1 logits of the two engines differ by up to about
# 1.5 (p99 about 0.6, see above), so a gap below 0.5 is a tie within noise;
# measured: every divergence in the 22 prompts came at a gap below 0.25.
NEAR_TIE = 0.5


def ref_tokens(llm, text):
    return llm.tokenize(text.encode(), add_bos=False, special=True)


def last_logits(llm):
    """The reference's logits of the last evaluated token (llama.cpp's own
    buffer: llama-cpp-python fills llm.scores only with logits_all)."""
    import llama_cpp
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32).copy()


def ref_greedy(llm, toks, n_gen):
    """Greedy continuation with the reference and its top-2 gap per step."""
    llm.reset()
    llm.eval(toks)
    gen, gaps, first_logits = [], [], None
    for _ in range(n_gen):
        logits = last_logits(llm)
        if first_logits is None:
            first_logits = logits.copy()
        top2 = np.argsort(-logits)[:2]
        gen.append(int(top2[0]))
        gaps.append(float(logits[top2[0]] - logits[top2[1]]))
        llm.eval([int(top2[0])])
    return gen, gaps, first_logits


def anvil_logits(model_path, prompts_ids, n_gen, extra=(), mode="release"):
    tool = build_path(mode, "tool_logits")
    inp = "".join(" ".join(map(str, ids)) + "\n" for ids in prompts_ids)
    p = run([tool, model_path, "-g", str(n_gen), *extra], input=inp, text=True)
    assert p.returncode == 0, p.stderr
    rows = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    assert len(rows) == len(prompts_ids)
    return rows


@pytest.fixture(scope="module")
def reference(llama_ref):
    out = []
    for text in PROMPTS:
        toks = ref_tokens(llama_ref, text)
        gen, gaps, logits = ref_greedy(llama_ref, toks, N_GEN)
        out.append((toks, gen, gaps, logits))
    return out


@pytest.fixture(scope="module")
def ours(model_path, reference):
    return anvil_logits(model_path, [r[0] for r in reference], N_GEN, ("-t", "2"))


def test_logits_match_reference(reference, ours):
    worst, worst_mean = 0.0, 0.0
    for (toks, _, gaps, ref), row in zip(reference, ours):
        got = np.array(row["logits"], dtype=np.float32)
        assert got.shape == ref.shape
        assert np.all(np.isfinite(got))
        rng = float(ref.max() - ref.min())
        assert rng > 1.0, "reference logits look empty"
        d = np.abs(got - ref)
        worst = max(worst, float(d.max()) / rng)
        worst_mean = max(worst_mean, float(d.mean()) / rng)
        assert d.max() <= 0.06 * rng, f"max |diff| {d.max():.4f} > 6% of range {rng:.2f}"
        assert d.mean() <= 0.025 * rng, f"mean |diff| {d.mean():.4f} > 2.5% of range {rng:.2f}"
        assert np.corrcoef(got, ref)[0, 1] >= 0.997
        if gaps[0] >= NEAR_TIE:
            assert int(np.argmax(got)) == int(np.argmax(ref))
        assert len(set(np.argsort(-got)[:5]) & set(np.argsort(-ref)[:5])) >= 3
    print(f"worst max|diff|/range = {worst:.4f}, worst mean|diff|/range = {worst_mean:.4f}")


def test_logits_f16_tight(tmp_path, model_path, anvil_bin):
    """Without activation quantization the two engines agree closely."""
    import llama_cpp
    f16 = str(tmp_path / "smol-f16.gguf")
    p = run([anvil_bin, "quantize", model_path, f16, "F16"], text=True)
    assert p.returncode == 0, p.stderr
    llm = llama_cpp.Llama(model_path=f16, n_ctx=512, n_threads=2, verbose=False)
    prompts = [ref_tokens(llm, t) for t in PROMPTS[:6]]
    rows = anvil_logits(f16, prompts, 0, ("-t", "2"))
    for toks, row in zip(prompts, rows):
        llm.reset()
        llm.eval(toks)
        ref = last_logits(llm)
        got = np.array(row["logits"], dtype=np.float32)
        rng = float(ref.max() - ref.min())
        err = float(np.max(np.abs(got - ref)))
        assert err <= 0.0025 * rng, f"F16: max |diff| {err:.4f} > 0.25% of range {rng:.2f}"
        assert int(np.argmax(got)) == int(np.argmax(ref))


def test_greedy_matches_reference(reference, ours):
    exact = 0
    for (toks, gen_ref, gaps, _), row in zip(reference, ours):
        gen = row["gen"]
        assert len(gen) == N_GEN
        if gen == gen_ref:
            exact += 1
            continue
        i = next(k for k in range(N_GEN) if gen[k] != gen_ref[k])
        assert gaps[i] < NEAR_TIE, (
            f"diverged at step {i} without a near-tie: ref gap {gaps[i]:.3f}, "
            f"ours {gen[i]} vs ref {gen_ref[i]}")
    print(f"{exact}/{len(PROMPTS)} continuations identical for all {N_GEN} tokens")


def test_batch_invariance(model_path, reference, ours):
    """All prompts in one batch (one sequence each) give bit-identical
    logits and continuations to the one-by-one run."""
    batched = anvil_logits(model_path, [r[0] for r in reference], N_GEN, ("-t", "2", "-b"))
    for a, b in zip(ours, batched):
        assert a["gen"] == b["gen"]
        assert a["logits"] == b["logits"]


def test_thread_count_invariance(model_path, reference, ours):
    one = anvil_logits(model_path, [r[0] for r in reference[:4]], 8, ("-t", "1"))
    for a, b in zip(ours[:4], one):
        assert a["logits"] == b["logits"]
        assert a["gen"][:8] == b["gen"]


def test_reference_kernels_agree(model_path, reference, ours):
    """The scalar reference kernels give the same greedy text (up to
    near-ties) and close logits."""
    ref_rows = anvil_logits(model_path, [r[0] for r in reference[:4]], 8, ("-t", "2", "-k", "ref"))
    for (toks, gen_ref, gaps, ref), a in zip(reference[:4], ref_rows):
        got = np.array(a["logits"], dtype=np.float32)
        assert float(np.max(np.abs(got - ref))) <= 0.06 * float(ref.max() - ref.min())
