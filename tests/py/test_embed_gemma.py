"""EmbeddingGemma (general.architecture "gemma-embedding", issue 38):
Gemma 3's layers attending both ways, the windowed layers within
|i - j| <= sliding_window / 2 (llama.cpp's symmetric window), mean
pooling, then sentence-transformers' Dense layers when the file has them
(src/model/forward.c bidir_attention, src/model/embed.c dense_out).

On tiny random-weight files (tests/gen/tiny_arch.py "gemma-embedding":
6 layers, 5 of them windowed with a window of 16, 4 query heads on 1 KV
head; sequences up to 39 tokens, so the window cuts):

- against the independent float64 numpy forward pass (tiny_arch.embed_ref,
  attention both ways), F32 and Q8_0, with and without Dense layers (and
  dense_2's bias, which llama.cpp's loader for this architecture refuses);
- against llama-cpp-python (embedding=True, the whole sequence in one
  ubatch, as a non-causal model needs) on the same file;
- batching does not change the answer (each sequence alone and all in one
  batch, bit for bit: the attention's kernel gives the same bits whatever
  the shape);
- the model embeds, it does not generate: `anvil run` and `anvil serve -m`
  on it are a clear error (exit 2), and /v1/embeddings serves it.
"""
import json
import os
import sys

import numpy as np
import pytest

from conftest import ROOT, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_arch  # noqa: E402

from test_embed import ANVIL, TOL, anvil_embed  # noqa: E402

NAME = "gemma-embedding"
SEQS = [[5, 6, 7, 8, 9], [10, 11, 12], list(range(1, 40)), [200],
        [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2]]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gemb")
    out = {}
    for wt, dense, bias in (("F32", 0, False), ("F32", 64, False), ("F32", 64, True),
                            ("Q8_0", 0, False), ("Q8_0", 64, False)):
        path = str(d / f"gemb-{wt}-{dense}{'-b' if bias else ''}.gguf")
        out[wt, dense, bias] = (path, tiny_arch.make_embed_gguf(path, NAME, "mean", wt, seed=5,
                                                                dense=dense, dense_bias=bias))
    return out


@pytest.mark.parametrize("wt,dense,bias", [("F32", 0, False), ("F32", 64, False),
                                           ("F32", 64, True), ("Q8_0", 0, False),
                                           ("Q8_0", 64, False)])
def test_vs_numpy(files, wt, dense, bias):
    """dense_2.bias: anvil reads it (llama.cpp's build_dense_out adds one);
    llama.cpp's gemma-embedding loader refuses a file that has it."""
    path, w = files[wt, dense, bias]
    got = anvil_embed(path, SEQS, "-b", "48")
    for g, s in zip(got, SEQS):
        ref = tiny_arch.embed_ref(NAME, w, s, "mean")
        assert abs(np.linalg.norm(g) - 1) < 1e-5
        assert np.abs(g - ref).max() <= TOL[wt], (len(s), np.abs(g - ref).max())
    # the window matters: the same weights attending causally give another vector
    causal = tiny_arch.embed_ref(NAME, w, SEQS[2], "mean") - \
        np.asarray(_causal_ref(w, SEQS[2]))
    assert np.abs(causal).max() > 0.1


def _causal_ref(w, toks):
    c = dict(tiny_arch.CONFIGS[NAME], bidir=False)
    saved = tiny_arch.CONFIGS[NAME]
    tiny_arch.CONFIGS[NAME] = c
    try:
        return tiny_arch.embed_ref(NAME, w, toks, "mean")
    finally:
        tiny_arch.CONFIGS[NAME] = saved


def test_batching_does_not_change_vectors(files):
    path, _ = files["F32", 64, False]
    together = anvil_embed(path, SEQS, "-b", "128")
    for s, t in zip(SEQS, together):
        alone = anvil_embed(path, [s])[0]
        assert np.array_equal(alone, t), len(s)


def test_vs_llama_cpp(files):
    import llama_cpp
    for dense in (0, 64):
        path, _ = files["F32", dense, False]
        llm = llama_cpp.Llama(path, embedding=True, verbose=False, n_ctx=128, n_batch=128,
                              n_ubatch=128)
        # llama-cpp-python tokenizes its inputs: hand it our token lists by name
        llm.tokenize = lambda b, *a, **k: SEQS[int(b.decode())]
        ref = np.array(llm.embed([str(i) for i in range(len(SEQS))], normalize=True))
        got = anvil_embed(path, SEQS)
        assert np.abs(got - ref).max() < 1e-3, (dense, np.abs(got - ref).max())
        del llm


def test_does_not_generate(files):
    path, _ = files["F32", 0, False]
    p = run([ANVIL, "run", "-m", path, "-p", "hello", "-n", "4"], capture_output=True, text=True)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "does not generate" in p.stderr, p.stderr
    assert "Sanitizer" not in p.stderr
    # as the chat model of a server: refused at start, exit 2
    p = run([ANVIL, "serve", "-m", path, "--port", "0"], capture_output=True, text=True,
            timeout=60)
    assert p.returncode == 2 and "does not generate" in p.stderr, (p.returncode, p.stderr)


def test_served(files, tmp_path):
    from anvil_server import Server, serve_bin
    path, w = files["F32", 64, False]
    chat = str(tmp_path / "chat.gguf")
    tiny_arch.make_gguf(chat, "qwen3", "F32", seed=1, n_ctx=128)
    s = Server(serve_bin(), chat, "--embedding-model", path, "--ctx", "128")
    try:
        st, _, data = s.post("/v1/embeddings", {"input": [SEQS[2], SEQS[4]]})
        assert st == 200, data
        vecs = [d["embedding"] for d in json.loads(data)["data"]]
        for v, t in zip(vecs, (SEQS[2], SEQS[4])):
            assert np.abs(np.array(v) - tiny_arch.embed_ref(NAME, w, t, "mean")).max() < 1e-4
    finally:
        assert s.stop() == 0, s.stderr()


@pytest.mark.parametrize("drop,msg", [
    ("dense_3.weight", "dense_3.weight is missing"),
    ("dense_2.weight", "dense_3.weight without dense_2.weight"),
])
def test_bad_dense(tmp_path, drop, msg):
    c = tiny_arch.cfg_of(NAME)
    dense = tiny_arch.dense_layers(c, 64, seed=1)
    del dense[drop]
    path = str(tmp_path / "bad.gguf")
    tiny_arch.make_gguf(path, NAME, "F32", seed=1, override=dense,
                        extra_u32={f"{NAME}.pooling_type": 1})
    p = run([ANVIL, "embed", "-m", path, "--tokens", "1 2 3"], capture_output=True, text=True)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert msg in p.stderr, p.stderr
    assert "Sanitizer" not in p.stderr
