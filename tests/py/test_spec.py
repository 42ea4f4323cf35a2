"""Speculative decoding in the serving engine (tests/tool_engine.c):

- greedy output is identical, token for token, with prompt lookup and with
  a draft model, to decoding without speculation: many prompts, copy-heavy
  and not, one at a time and all batched, with stop strings and
  max_tokens cutting runs short, with preemption forced by a small KV pool
  and with prefix caching (the same prompt twice);
- copy-heavy prompts do get proposals accepted (the mechanism works);
- sampled output keeps the plain distribution: a two-sample chi-square
  test of the first two tokens over thousands of seeds on a tiny model,
  with its draft proposing every step;
- bad input: a draft with another vocabulary, k out of range.
"""
import os
import sys

import numpy as np
import pytest

from conftest import ROOT, build_path, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_llama  # noqa: E402

TOOL = build_path("release", "tool_engine")

COPY = [
    "Repeat after me: the quick brown fox jumps over the lazy dog. Again: the quick brown fox jumps over",
    "def area(radius):\n    return 3.14159 * radius * radius\n\n# the same function, renamed:\ndef circle_area(radius):\n",
    "Fix the typo in this paragraph: 'The comittee will meet on Monday to discuss the budget for next year.' Fixed: 'The",
    "Document: Paris is the capital of France. It has 2.1 million inhabitants. Question: What is the capital of France? Answer from the document:",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 1, 2, 3, 4, 5,",
    "<ul><li>apple</li><li>banana</li><li>cherry</li></ul> Now the same list again: <ul><li>",
]
FREE = [
    "Once upon a time in a small village,",
    "Write a haiku about the sea.",
    "The three most important inventions of the 20th century are",
    "Tell me a joke about computers.",
]


def parse(out):
    rows = []
    for line in out.splitlines():
        head, _, text = line.partition(" |")
        parts = head.split()
        rows.append((int(parts[0]), int(parts[1]), [int(x) for x in parts[2:]], text))
    return rows


def stats(err):
    line = [l for l in err.splitlines() if l.startswith("kv_used=")][-1]
    return {k: int(v) for k, v in (kv.split("=") for kv in line.split())}


def chi2_two_sample(a, b):
    """Chi-square statistic of a 2 x k contingency table (categories with
    fewer than 10 counts in total pooled into one) and its critical value
    at p = 1e-4 (Wilson-Hilferty approximation of the chi-square quantile:
    within 1% for df >= 3)."""
    cats = sorted(set(a) | set(b))
    rows = [[a.count(c) for c in cats], [b.count(c) for c in cats]]
    big = [i for i in range(len(cats)) if rows[0][i] + rows[1][i] >= 10]
    small = [i for i in range(len(cats)) if i not in big]
    t = np.array([[r[i] for i in big] + [sum(r[i] for i in small)] for r in rows], dtype=float)
    t = t[:, t.sum(axis=0) > 0]
    exp = t.sum(axis=1, keepdims=True) * t.sum(axis=0, keepdims=True) / t.sum()
    stat = float(((t - exp) ** 2 / exp).sum())
    df = t.shape[1] - 1
    z = 3.719  # one-sided normal quantile of 1e-4
    crit = df * (1 - 2 / (9 * df) + z * np.sqrt(2 / (9 * df))) ** 3 if df > 0 else 0.0
    return stat, crit


def engine(model, lines, *args):
    p = run([TOOL, model, "-t", "2", *args], input="".join(lines), text=True)
    assert p.returncode == 0, p.stderr
    return parse(p.stdout), stats(p.stderr)


@pytest.fixture(scope="module")
def prompts(llama_vocab):
    toks = [llama_vocab.tokenize(t.encode(), add_bos=False) for t in COPY + FREE]
    lines = []
    for i, t in enumerate(toks):
        stop = "-" if i % 3 else "the_lazy"  # some requests end on a stop string
        n = 24 + 8 * (i % 4)
        lines.append(f"{n} 0 {i + 1} {stop} {' '.join(map(str, t))}\n")
    return lines


@pytest.fixture(scope="module")
def plain(model_path, prompts):
    return engine(model_path, prompts)[0]


@pytest.mark.parametrize("mode", [["--spec", "ngram"], ["--spec", "ngram", "--spec-k", "2"],
                                  ["--spec", "draft", "--draft", "SELF"]])
@pytest.mark.parametrize("serial", [False, True])
def test_greedy_identical(model_path, prompts, plain, mode, serial):
    mode = [model_path if a == "SELF" else a for a in mode]
    got, st = engine(model_path, prompts, *mode, *(["--serial"] if serial else []))
    assert got == plain
    assert st["spec_verify"] > 0 and st["spec_accepted"] > 0, st
    assert st["kv_used"] == 0


def test_copy_heavy_accepts_most(model_path, llama_vocab):
    t = llama_vocab.tokenize(COPY[4].encode(), add_bos=False)
    _, st = engine(model_path, [f"40 0 1 - {' '.join(map(str, t))}\n"], "--spec", "ngram")
    assert st["spec_accepted"] >= 0.5 * st["spec_proposed"], st
    assert st["spec_tokens"] >= 1.5 * st["spec_verify"], st  # more than one token per verification


def test_preemption_and_prefix_cache(model_path, prompts, plain):
    """A KV pool small enough to preempt, and every prompt submitted twice
    (the second copy reuses the first one's cached blocks)."""
    lines = prompts + prompts
    got, st = engine(model_path, lines, "--spec", "ngram", "-r", "6", "--kv-mem", str(30 * 3 * 4096 * 24))
    assert got == plain + plain
    assert st["kv_used"] == 0


def test_sampling_keeps_the_distribution(tmp_path):
    """The first three sampled tokens on a tiny model over 3000 seeds, with
    and without a draft that proposes every step (the model itself, so its
    greedy proposals are sometimes right and mostly wrong at temperature
    0.3): two-sample chi-square per position, p > 1e-4. The stats must
    show proposals accepted and rejected, or the test would prove nothing."""
    path = str(tmp_path / "tiny.gguf")
    tiny_llama.make_tiny_gguf(path, "F32", seed=3)
    prompt = "5 77 123 42 7 5 77 123 42"
    n = 3000
    res = {}
    for mode in ([], ["--spec", "draft", "--draft", path, "--spec-k", "3"]):
        toks = []
        for chunk in range(0, n, 500):
            lines = [f"4 0.3 {chunk + i + 1} - {prompt}\n" for i in range(500)]
            out, st = engine(path, lines, "-r", "64", *mode)
            toks += [r[2][:3] for r in out]
            if mode:
                assert 0 < st["spec_accepted"] < st["spec_proposed"], st
        res[bool(mode)] = toks
    for pos in (0, 1, 2):
        a = [t[pos] for t in res[False] if len(t) > pos]
        b = [t[pos] for t in res[True] if len(t) > pos]
        stat, crit = chi2_two_sample(a, b)
        assert stat < crit, f"position {pos}: chi2 {stat:.1f} >= {crit:.1f}"


def test_sampling_test_has_power(tmp_path):
    """The same test tells two temperatures apart: it can fail."""
    path = str(tmp_path / "tiny.gguf")
    tiny_llama.make_tiny_gguf(path, "F32", seed=3)
    res = []
    for temp in ("0.3", "0.4"):
        toks = []
        for chunk in range(0, 3000, 500):
            lines = [f"1 {temp} {chunk + i + 1} - 5 77 123 42 7 5 77 123 42\n" for i in range(500)]
            out, _ = engine(path, lines, "-r", "64")
            toks += [r[2][0] for r in out]
        res.append(toks)
    stat, crit = chi2_two_sample(res[0], res[1])
    assert stat > crit, f"chi2 {stat:.1f} <= {crit:.1f}: the test cannot tell 0.3 from 0.4"


def test_bad_draft_vocabulary(tmp_path, model_path):
    path = str(tmp_path / "tiny.gguf")
    tiny_llama.make_tiny_gguf(path, "F32", seed=3)
    p = run([TOOL, model_path, "--spec", "draft", "--draft", path], input="4 0 1 - 1 2 3\n", text=True)
    assert p.returncode == 2 and "vocabularies differ" in p.stderr, p.stderr


def test_bad_k(model_path):
    p = run([TOOL, model_path, "--spec", "ngram", "--spec-k", "17"], input="4 0 1 - 1 2 3\n", text=True)
    assert p.returncode == 2 and "out of range" in p.stderr, p.stderr


def test_bench_spec_json(model_path, anvil_bin):
    """`anvil bench --spec` runs both ways, checks the outputs agree before
    it reports, and writes well-formed records (speed is not asserted)."""
    import json
    p = run([anvil_bin, "bench", "-m", model_path, "--spec", "ngram", "--batch", "1,2", "-n", "12",
             "-t", "2", "--prompts", "copy", "--json"], text=True, cwd=ROOT)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(l) for l in p.stdout.splitlines() if l.strip()]
    assert [r["batch"] for r in recs] == [1, 2]
    for r in recs:
        assert r["set"] == "copy" and r["spec"] == "ngram" and r["plain_tok_s"] > 0 and r["spec_tok_s"] > 0
        assert 0 <= r["accepted"] <= 1 and r["tokens_per_step"] >= 1
        # steps without a proposal make one token: per pass is at most per verification
        assert 1 <= r["tokens_per_pass"] <= r["tokens_per_step"] + 1e-3, r


@pytest.mark.parametrize("args", [["--spec", "fast"], ["--spec", "draft"], ["--spec", "ngram", "--spec-k", "0"],
                                  ["--spec", "ngram", "--prompts", "/nonexistent.jsonl"]])
def test_bench_spec_bad_input(model_path, anvil_bin, args):
    p = run([anvil_bin, "bench", "-m", model_path, *args], text=True, cwd=ROOT)
    assert p.returncode == 2, (args, p.stderr)
