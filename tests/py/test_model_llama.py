"""Differential tests of the forward pass against llama-cpp-python (the same
llama.cpp, built from source) on the default GGUF: last-row logits and greedy
continuations, plus batch invariance of our own engine.

Tolerance for logits: both engines quantize activations to 8 bits per block
of 32 before each quantized matmul (llama.cpp: Q8_1 with fp16 scales for
Q4_1 weights, Q8_0 for the lm_head; anvil: Q8A with float scales), both keep
K/V in F16, and they sum in different orders. Those roundings give
differences of a few hundredths of a logit per layer step. We require the
max |difference| over the vocabulary to stay under 3% of the reference's
logit range (max - min, about 25-35 for this model) and the top-5 ids to be
the same set; measured differences are printed with -s.
"""
import json
import os

import numpy as np
import pytest

from conftest import build_path, run

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
NEAR_TIE = 0.25  # logits; a divergence is allowed only after a top-2 gap below this


def ref_tokens(llm, text):
    return llm.tokenize(text.encode(), add_bos=False, special=True)


def ref_greedy(llm, toks, n_gen):
    """Greedy continuation with the reference and its top-2 gap per step."""
    llm.reset()
    llm.eval(toks)
    gen, gaps, first_logits = [], [], None
    for _ in range(n_gen):
        logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
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
    worst = 0.0
    for (toks, _, _, ref), row in zip(reference, ours):
        got = np.array(row["logits"], dtype=np.float32)
        assert got.shape == ref.shape
        assert np.all(np.isfinite(got))
        rng = float(ref.max() - ref.min())
        err = float(np.max(np.abs(got - ref)))
        worst = max(worst, err / rng)
        assert err <= 0.03 * rng, f"max |diff| {err:.4f} > 3% of range {rng:.2f}"
        assert set(np.argsort(-got)[:5]) == set(np.argsort(-ref)[:5])
    print(f"worst max|diff| / range = {worst:.4f}")


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
    print(f"{exact}/{len(PROMPTS)} continuations identical")
    assert exact >= len(PROMPTS) // 2


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
        assert float(np.max(np.abs(got - ref))) <= 0.03 * float(ref.max() - ref.min())
