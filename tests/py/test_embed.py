"""Pooled embeddings and rank scores of the decoder archs (src/model/embed.c,
`anvil embed`), on tiny random-weight qwen3 and llama GGUF files written
by tests/gen/tiny_arch.py with <arch>.pooling_type (and a rank head):

- against the independent float64 numpy forward pass (tiny_arch.embed_ref)
  for mean, cls, last and rank pooling, F32 and Q8_0 weights, sequences
  of several lengths packed into one batch and split over batches;
- against llama-cpp-python (embedding=True) on the same file, with the
  pooling the file names;
- batching does not change the answer: each sequence alone gives the
  same vector as all of them in one call (tolerance: summation order);
- bad input: a chat model without pooling_type, a token id out of range,
  an input longer than the batch, an unknown --pooling: exit 2 with a
  message, never a crash.
"""
import json
import os
import sys

import numpy as np
import pytest

from conftest import ROOT, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_arch  # noqa: E402

ANVIL = os.path.join(ROOT, "bin", "anvil")
SEQS = [[5, 6, 7, 8, 9], [10, 11, 12], list(range(1, 40)), [200], [3, 1, 4, 1, 5, 9, 2, 6]]
TOL = {"F32": 1e-4, "Q8_0": 3e-2}


def anvil_embed(path, seqs, *extra):
    p = run([ANVIL, "embed", "-m", path, "--tokens", "-t", "2", *extra,
             *[" ".join(map(str, s)) for s in seqs]], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    return np.array(json.loads(p.stdout))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("embed")
    out = {}
    for name in ("qwen3", "llama3"):
        for pool in ("last", "mean", "cls", "rank"):
            for wt in ("F32", "Q8_0"):
                if name == "llama3" and wt == "Q8_0":
                    continue
                path = str(d / f"{name}-{pool}-{wt}.gguf")
                out[name, pool, wt] = (path, tiny_arch.make_embed_gguf(path, name, pool, wt, seed=3))
    return out


@pytest.mark.parametrize("name,pool,wt", [(n, p, w) for n in ("qwen3", "llama3")
                                          for p in ("last", "mean", "cls", "rank")
                                          for w in ("F32", "Q8_0")
                                          if not (n == "llama3" and w == "Q8_0")])
def test_embed_vs_numpy(files, name, pool, wt):
    path, w = files[name, pool, wt]
    # batch 48: the 39-token sequence gets a batch of its own, the others share
    got = anvil_embed(path, SEQS, "-b", "48")
    for g, s in zip(got, SEQS):
        ref = tiny_arch.embed_ref(name, w, s, pool)
        if pool == "rank":
            assert g.shape == (1,)
            assert abs(g[0] - ref) <= TOL[wt] * max(1.0, abs(ref)), (s, g, ref)
        else:
            assert abs(np.linalg.norm(g) - 1) < 1e-5
            assert np.abs(g - ref).max() <= TOL[wt], (s, np.abs(g - ref).max())


def test_unnormalized_and_pooling_override(files):
    path, w = files["qwen3", "last", "F32"]
    got = anvil_embed(path, SEQS[:2], "--no-normalize", "--pooling", "mean")
    for g, s in zip(got, SEQS[:2]):
        ref = tiny_arch.embed_ref("qwen3", w, s, "mean", normalize=False)
        assert np.abs(g - ref).max() <= 1e-4 * np.abs(ref).max()
        assert abs(np.linalg.norm(g) - 1) > 1e-3  # really not normalized


def test_batching_does_not_change_vectors(files):
    path, _ = files["qwen3", "mean", "F32"]
    together = anvil_embed(path, SEQS)
    alone = np.array([anvil_embed(path, [s])[0] for s in SEQS])
    assert np.abs(together - alone).max() < 1e-6


def test_matrix_format(files):
    path, _ = files["qwen3", "last", "F32"]
    p = run([ANVIL, "embed", "-m", path, "--tokens", "--format", "matrix", "1 2 3", "4 5"],
            capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    rows = [list(map(float, ln.split())) for ln in p.stdout.splitlines()]
    assert len(rows) == 2 and all(len(r) == 128 for r in rows)
    assert np.allclose(rows, anvil_embed(path, [[1, 2, 3], [4, 5]]), atol=1e-7)


def test_vs_llama_cpp(files):
    import llama_cpp
    for pool in ("last", "mean", "cls"):
        path, _ = files["qwen3", pool, "F32"]
        llm = llama_cpp.Llama(path, embedding=True, verbose=False, n_ctx=128, n_batch=128)
        # llama-cpp-python tokenizes its inputs: hand it our token lists by name
        llm.tokenize = lambda b, *a, **k: SEQS[int(b.decode())]
        ref = np.array(llm.embed([str(i) for i in range(len(SEQS))], normalize=True))
        got = anvil_embed(path, SEQS)
        assert np.abs(got - ref).max() < 1e-3, pool
        del llm


@pytest.mark.parametrize("args,msg", [
    (["1 2 3"], "pooling"),                        # the chat model (no pooling_type)
    (["--pooling", "mean", "1 99999"], "out of range"),
    (["--pooling", "mean", "-b", "4", "1 2 3 4 5 6"], "longer than the batch"),
    (["--pooling", "max", "1"], "--pooling"),
    (["--pooling", "mean", "1 x"], "token ids"),
    ([], "no input"),
])
def test_bad_input(tmp_path, args, msg):
    path = str(tmp_path / "chat.gguf")
    tiny_arch.make_gguf(path, "qwen3", "F32", seed=1)  # no pooling_type: a chat model
    p = run([ANVIL, "embed", "-m", path, "--tokens", *args], capture_output=True, text=True)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert msg in p.stderr, p.stderr
    assert "Sanitizer" not in p.stderr


def test_rank_head_required(tmp_path):
    path = str(tmp_path / "nohead.gguf")
    tiny_arch.make_gguf(path, "qwen3", "F32", seed=1, extra_u32={"qwen3.pooling_type": 4})
    p = run([ANVIL, "embed", "-m", path, "--tokens", "1 2"], capture_output=True, text=True)
    assert p.returncode != 0 and "classification head" in p.stderr, p.stderr
