"""Embeddings and reranking served (src/server/api_embed.c): `anvil serve`
with a tiny chat model (no pooling_type), --embedding-model (qwen3, last
pooling) and --rerank-model (qwen3 with a rank head), all tiny random-weight
files of tests/gen/tiny_arch.py sharing one vocabulary.

- /v1/models lists the three; /v1/models/ID answers for each;
- the `openai` client's embeddings.create, float and base64 (the same
  vectors), a string, a list of strings, token ids, a list of token-id
  lists; usage counts the tokens; vectors match the numpy reference on
  the tokens /tokenize gives; dimensions truncates and renormalizes;
- /v1/rerank and /rerank (plain HTTP, Jina's shape): results sorted by
  relevance_score, which matches the numpy rank head on llama-server's
  pair (query, EOS, document, EOS); top_n, return_documents;
- Ollama's /api/embed (the `ollama` client) and /api/embeddings;
- bad input gets the right 4xx in the route's error shape: empty input,
  10,000 inputs (413), a token id out of range, a chat model asked for
  embeddings, an embedding model asked to rerank, dimensions above the
  model's, an unknown model (404), an input over the model's length
  (400; with "truncate": true cut, and said in X-Anvil-Truncated);
- the responses validate against src/server/openapi.json.
"""
import base64
import json
import os
import struct
import sys

import numpy as np
import pytest
from jsonschema import Draft202012Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

from anvil_server import ROOT, Server, serve_bin

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_arch  # noqa: E402

N_CTX = 128  # the tiny files' context_length: the longest input


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("embsrv")
    chat, emb, rr = str(d / "chat.gguf"), str(d / "emb.gguf"), str(d / "rr.gguf")
    tiny_arch.make_gguf(chat, "qwen3", "F32", seed=1, n_ctx=N_CTX)
    w_emb = tiny_arch.make_embed_gguf(emb, "qwen3", "last", seed=3, n_ctx=N_CTX)
    w_rr = tiny_arch.make_embed_gguf(rr, "qwen3", "rank", seed=4, n_ctx=N_CTX)
    return {"chat": chat, "emb": emb, "rr": rr, "w_emb": w_emb, "w_rr": w_rr}


@pytest.fixture(scope="module")
def srv(models):
    s = Server(serve_bin(), models["chat"], "--embedding-model", models["emb"],
               "--rerank-model", models["rr"], "--ctx", "64")
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def doc():
    with open(os.path.join(ROOT, "src", "server", "openapi.json")) as f:
        return json.load(f)


def check_schema(doc, name, body):
    reg = Registry().with_resource("urn:anvil:openapi", Resource(doc, DRAFT202012))
    v = Draft202012Validator({"$ref": f"urn:anvil:openapi#/components/schemas/{name}"},
                             registry=reg)
    v.validate(body)


def tokens(srv, text):
    st, _, data = srv.post("/tokenize", {"content": text, "add_special": True})
    assert st == 200, data
    return [t if isinstance(t, int) else t["id"] for t in json.loads(data)["tokens"]]


def post(srv, path, body):
    st, h, data = srv.post(path, body)
    return st, h, json.loads(data)


def test_models_listed(srv):
    st, _, body = srv.request("GET", "/v1/models")
    ids = [m["id"] for m in json.loads(body)["data"]]
    assert ids == ["chat", "emb", "rr"], ids
    for mid, kind in (("emb", "embedding"), ("rr", "rerank")):
        st, _, body = srv.request("GET", f"/v1/models/{mid}")
        assert st == 200 and json.loads(body)["meta"]["kind"] == kind


def test_openai_float_and_base64(srv, models, doc):
    cl = srv.client()
    texts = ["hello world", "the quick brown fox", "a"]
    r = cl.embeddings.create(model="emb", input=texts)
    assert [d.index for d in r.data] == [0, 1, 2] and r.model == "emb"
    got = np.array([d.embedding for d in r.data])
    toks = [tokens(srv, t) for t in texts]
    assert r.usage.prompt_tokens == r.usage.total_tokens == sum(map(len, toks))
    for g, t in zip(got, toks):
        ref = tiny_arch.embed_ref("qwen3", models["w_emb"], t, "last")
        assert np.abs(g - ref).max() < 1e-4
    # base64: the same floats, little-endian float32
    st, _, body = post(srv, "/v1/embeddings", {"model": "emb", "input": texts,
                                                "encoding_format": "base64"})
    assert st == 200
    check_schema(doc, "EmbeddingResponse", body)
    b64 = np.array([struct.unpack(f"<{len(got[0])}f", base64.b64decode(d["embedding"]))
                    for d in body["data"]])
    assert np.abs(b64 - got).max() < 1e-6
    # asked for base64 explicitly the client hands the strings through
    r2 = cl.embeddings.create(model="emb", input=texts, encoding_format="base64")
    assert [d.embedding for d in r2.data] == [d["embedding"] for d in body["data"]]
    # and float, explicitly, are JSON numbers
    st, _, fl = post(srv, "/v1/embeddings", {"model": "emb", "input": texts,
                                              "encoding_format": "float"})
    assert np.abs(np.array([d["embedding"] for d in fl["data"]]) - got).max() < 1e-6


def test_token_inputs_default_model_and_dimensions(srv, models):
    toks = [[5, 6, 7], [8, 9, 10, 11]]
    st, _, one = post(srv, "/v1/embeddings", {"input": toks[0]})  # default: the embedding model
    assert st == 200 and one["model"] == "emb" and one["usage"]["prompt_tokens"] == 3
    st, _, two = post(srv, "/embeddings", {"model": "emb", "input": toks})
    assert st == 200 and len(two["data"]) == 2
    assert np.allclose(one["data"][0]["embedding"], two["data"][0]["embedding"], atol=1e-6)
    st, _, d16 = post(srv, "/v1/embeddings", {"model": "emb", "input": toks, "dimensions": 16})
    assert st == 200
    for full, cut in zip(two["data"], d16["data"]):
        f = np.array(full["embedding"][:16])
        assert len(cut["embedding"]) == 16
        assert np.abs(np.array(cut["embedding"]) - f / np.linalg.norm(f)).max() < 1e-5


def test_rerank(srv, models, doc):
    q, docs = "where is the cat", ["the cat sat on the mat", "stock prices fell", "cats", "x y z"]
    st, _, body = post(srv, "/v1/rerank", {"model": "rr", "query": q, "documents": docs,
                                           "return_documents": True})
    assert st == 200, body
    check_schema(doc, "RerankResponse", body)
    res = body["results"]
    assert sorted(r["index"] for r in res) == [0, 1, 2, 3]
    scores = [r["relevance_score"] for r in res]
    assert scores == sorted(scores, reverse=True)
    eos = 256 + len(tiny_arch.tiny_llama.vocab()[2])  # make_gguf's EOS (after the merges)
    qt = tokens(srv, q)
    for r in res:
        pair = qt + [eos] + tokens(srv, docs[r["index"]]) + [eos]
        ref = tiny_arch.embed_ref("qwen3", models["w_rr"], pair, "rank")
        assert abs(r["relevance_score"] - ref) < 1e-4, (r, ref)
        assert r["document"]["text"] == docs[r["index"]]
    # /rerank (no v1), Jina's {"text"} documents, top_n
    st, _, top = post(srv, "/rerank", {"query": q, "documents": [{"text": d} for d in docs],
                                       "top_n": 2})
    assert st == 200 and [r["index"] for r in top["results"]] == [r["index"] for r in res[:2]]
    assert "document" not in top["results"][0]


def test_ollama(srv, models):
    import ollama
    cl = ollama.Client(host=f"http://127.0.0.1:{srv.port}")
    r = cl.embed(model="emb", input=["hello world", "a"])
    st, _, body = post(srv, "/v1/embeddings", {"model": "emb", "input": ["hello world", "a"]})
    assert np.abs(np.array(r.embeddings) - np.array([d["embedding"] for d in body["data"]])).max() < 1e-6
    # the older route: one prompt, not normalized
    st, _, old = post(srv, "/api/embeddings", {"model": "emb:latest", "prompt": "hello world"})
    assert st == 200
    v = np.array(old["embedding"])
    assert abs(np.linalg.norm(v) - 1) > 1e-3
    assert np.abs(v / np.linalg.norm(v) - np.array(r.embeddings[0])).max() < 1e-5
    # Ollama truncates by default; its errors are {"error": "..."}
    st, _, long = post(srv, "/api/embed", {"model": "emb", "input": "ab " * 300})
    assert st == 200 and len(long["embeddings"]) == 1
    st, _, err = post(srv, "/api/embed", {"model": "chat", "input": "x"})
    assert st == 400 and list(err) == ["error"] and "pooling" in err["error"]
    st, _, err = post(srv, "/api/embed", {"model": "nope", "input": "x"})
    assert st == 404 and list(err) == ["error"]


@pytest.mark.parametrize("path,body,status,what", [
    ("/v1/embeddings", {"model": "emb", "input": ""}, 400, "empty"),
    ("/v1/embeddings", {"model": "emb", "input": []}, 400, "empty"),
    ("/v1/embeddings", {"model": "emb", "input": [[]]}, 400, "empty"),
    ("/v1/embeddings", {"model": "emb", "input": ["a"] * 10000}, 413, "inputs"),
    ("/v1/embeddings", {"model": "emb", "input": [1, 2, 100000]}, 400, "vocabulary"),
    ("/v1/embeddings", {"model": "emb", "input": [1, -1]}, 400, "vocabulary"),
    ("/v1/embeddings", {"model": "emb", "input": [[1, 2], ["x"]]}, 400, "integers"),
    ("/v1/embeddings", {"model": "emb", "input": 5}, 400, "string or an array"),
    ("/v1/embeddings", {"model": "chat", "input": "hello"}, 400, "pooling"),
    ("/v1/embeddings", {"model": "rr", "input": "hello"}, 400, "rerank"),
    ("/v1/embeddings", {"model": "emb", "input": "x", "dimensions": 129}, 400, "dimensions"),
    ("/v1/embeddings", {"model": "emb", "input": "x", "encoding_format": "int8"}, 400,
     "encoding_format"),
    ("/v1/embeddings", {"model": "nope", "input": "x"}, 404, "does not exist"),
    ("/v1/embeddings", {"model": "emb", "input": list(range(1, 200))}, 400, "truncate"),
    ("/v1/embeddings", {"input": "x", "model": 3}, 400, "model"),
    ("/v1/rerank", {"model": "emb", "query": "q", "documents": ["d"]}, 400, "rank head"),
    ("/v1/rerank", {"model": "chat", "query": "q", "documents": ["d"]}, 400, "rank head"),
    ("/v1/rerank", {"model": "rr", "query": "q", "documents": []}, 400, "empty"),
    ("/v1/rerank", {"model": "rr", "documents": ["d"]}, 400, "query"),
    ("/v1/rerank", {"model": "rr", "query": "q", "documents": [3]}, 400, "document 0"),
    ("/v1/rerank", {"model": "rr", "query": "q", "documents": ["d"] * 10000}, 413, "documents"),
    ("/v1/rerank", {"model": "rr", "query": "q", "documents": ["d"], "top_n": 0}, 400, "top_n"),
])
def test_bad_input(srv, doc, path, body, status, what):
    st, _, err = post(srv, path, body)
    assert st == status, (st, err)
    check_schema(doc, "Error", err)
    assert what in err["error"]["message"], err


def test_truncate(srv):
    st, h, body = post(srv, "/v1/embeddings", {"model": "emb", "input": list(range(1, 200)),
                                               "truncate": True})
    assert st == 200 and body["usage"]["prompt_tokens"] == N_CTX
    assert h.get("X-Anvil-Truncated") == "1"
    st, _, ref = post(srv, "/v1/embeddings", {"model": "emb", "input": list(range(1, N_CTX + 1))})
    assert np.allclose(body["data"][0]["embedding"], ref["data"][0]["embedding"], atol=1e-6)


def test_not_json(srv):
    st, _, data = srv.post("/v1/embeddings", b"{nope")
    assert st == 400 and "parse" in json.loads(data)["error"]["message"]


# ---------------------------------------------------------------------------
# pooling none: llama-server's /embedding gives one vector per token,
# /v1/embeddings refuses it (400), as llama-server does


def test_llama_embedding_route_pooled(srv):
    """/embedding on a pooling model: [{index, embedding: [one vector]}],
    the same normalized vector /v1/embeddings gives."""
    ids = [[5, 6, 7], [9, 10, 11, 12]]
    st, _, body = post(srv, "/embedding", {"input": ids, "model": "emb"})
    assert st == 200, body
    st2, _, oai = post(srv, "/v1/embeddings", {"input": ids, "model": "emb"})
    assert st2 == 200, oai
    assert [x["index"] for x in body] == [0, 1]
    for x, y in zip(body, oai["data"]):
        assert len(x["embedding"]) == 1
        assert np.abs(np.array(x["embedding"][0]) - np.array(y["embedding"])).max() < 1e-6
    st, _, raw = post(srv, "/embedding", {"content": [5, 6, 7], "model": "emb",
                                       "embd_normalize": -1})
    assert st == 200, raw
    v = np.array(raw[0]["embedding"][0])
    assert abs(np.linalg.norm(v) - 1) > 1e-3  # not normalized
    assert np.abs(v / np.linalg.norm(v) - np.array(body[0]["embedding"][0])).max() < 1e-5
    st, _, err = post(srv, "/embedding", {"model": "emb"})
    assert st == 400 and "content" in err["error"]["message"], err


def test_pooling_none_served(models, tmp_path):
    from test_encoder import SEQS, bert_ref, make_bert
    path = str(tmp_path / "bert-none.gguf")
    w = make_bert(path, "none", "F32", seed=11)
    s = Server(serve_bin(), models["chat"], "--embedding-model", path, "--ctx", "64")
    try:
        st, _, body = post(s, "/embedding", {"input": SEQS[:3]})
        assert st == 200, body
        for x, seq in zip(body, SEQS[:3]):
            got = np.array(x["embedding"])
            ref = bert_ref(w, seq)
            assert got.shape == ref.shape, got.shape
            c = [float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) for a, b in zip(got, ref)]
            assert min(c) >= 0.9999, c
            assert np.abs(got - ref).max() < 1e-4  # raw: llama-server does not normalize
        st, _, err = post(s, "/v1/embeddings", {"input": SEQS[0]})
        assert st == 400 and "not OAI compatible" in err["error"]["message"], err
    finally:
        assert s.stop() == 0, s.stderr()
