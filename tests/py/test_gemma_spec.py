"""Speculative decoding on Gemma 3 270M (models/gemma-3-270m-q4_k_m.gguf):
its sliding-window layers must let a request roll back rejected proposals,
before and after the window has slid, and the greedy output must stay that
of plain decoding. Kept out of test_gemma.py's `kernels` marker: this is
the engine and the KV cache, not kernel numerics, so the forced kernel
passes of .ci/run need not repeat it (it takes minutes on the scalar
reference kernels).
"""
import os

import pytest

from conftest import GEMMA, build_path, run

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n",
    "Once upon a time, a small robot",
    "Repeat after me: the quick brown fox jumps over the lazy dog. Again: the quick",
    " ".join(f"item {i % 40}: the value is {i % 7}." for i in range(90)),
]


@pytest.fixture(scope="module")
def vocab():
    if not os.path.exists(GEMMA):
        pytest.fail(f"{GEMMA} missing (make model-gemma)")
    import llama_cpp
    return llama_cpp.Llama(model_path=GEMMA, vocab_only=True, verbose=False)


def test_engine_spec_equals_plain(vocab):
    lines = []
    for i, t in enumerate(PROMPTS):
        toks = vocab.tokenize(t.encode(), add_bos=True, special=True)
        lines.append(f"{24 + 4 * (i % 3)} 0 {i + 1} - {' '.join(map(str, toks))}\n")
    assert len(vocab.tokenize(PROMPTS[-1].encode(), add_bos=True)) > 600  # past the 512 window
    tool = build_path("release", "tool_engine")
    a = run([tool, GEMMA, "-r", "8", "-t", "2"], input="".join(lines), text=True)
    b = run([tool, GEMMA, "-r", "8", "-t", "2", "--spec", "ngram"], input="".join(lines), text=True)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout
    st = dict(kv.split("=") for kv in b.stderr.splitlines()[-1].split())
    assert int(st["spec_accepted"]) > 0 and st["kv_used"] == "0", b.stderr
