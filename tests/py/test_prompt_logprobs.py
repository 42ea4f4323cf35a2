"""vLLM's `prompt_logprobs` on /v1/completions and /v1/chat/completions
(brief api item 2).

The answer carries `prompt_logprobs` as vLLM returns it: a list as long as
the prompt, null first, then for each prompt token a dict keyed by token
id (a string in JSON) of {logprob, rank, decoded_token}: the prompt token
itself, then the N most likely alternatives (ranks 1..N). On a tiny F32
model (tests/gen/tiny_arch.py) the numbers are checked against
llama-cpp-python with logits_all (log-softmax of its rows in float64):
logprobs within 1e-3, the alternatives and the ranks exact (ties aside).
Chat: the same field at the top level, for the rendered prompt
(return_token_ids gives its ids). Bad values are 400s naming the field.
"""
import json
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "gen"))
sys.path.insert(0, HERE)

import tiny_arch  # noqa: E402
from anvil_server import Server, check_error, serve_bin  # noqa: E402

TOKS = [int(x) for x in np.random.default_rng(7).integers(0, 256, 40)]


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = str(tmp_path_factory.mktemp("plp") / "tiny.gguf")
    tiny_arch.make_gguf(p, "llama3", "F32", seed=2, n_ctx=512)
    return p


@pytest.fixture(scope="module")
def srv(path):
    s = Server(serve_bin(), path, "--ctx", "512", "--kv-mem", "32M")
    yield s
    assert s.stop() == 0, s.stderr()


@pytest.fixture(scope="module")
def llm(path):
    import llama_cpp
    return llama_cpp.Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=2, logits_all=True,
                           verbose=False)


def ref_lsm(llm, toks):
    llm.reset()
    llm.eval(toks)
    x = np.asarray(llm.scores[:len(toks)], dtype=np.float64)
    m = x.max(axis=1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=1, keepdims=True))


def check(plp, toks, lsm, k):
    assert len(plp) == len(toks) and plp[0] is None
    for i in range(1, len(toks)):
        row, d = lsm[i - 1], plp[i]
        t = str(toks[i])
        assert t in d and list(d)[0] == t, (i, d)
        order = np.argsort(-row, kind="stable")
        assert abs(d[t]["logprob"] - row[toks[i]]) < 1e-3, (i, d[t], row[toks[i]])
        # rank: 1 + tokens more likely (a near-tie may swap: allow one)
        want_rank = 1 + int((row > row[toks[i]] + 1e-6).sum())
        if want_rank <= 20:
            assert abs(d[t]["rank"] - want_rank) <= 1, (i, d[t], want_rank)
        else:
            assert d[t]["rank"] == 21
        alts = [int(x) for x in list(d)[1:]]
        want = [int(x) for x in order[:k] if int(x) != toks[i]]
        assert len(alts) == len(want), (i, alts, want)
        # the same set, up to near-ties at the edge
        assert len(set(alts) & set(want)) >= len(want) - 1, (i, alts, want)
        for a in alts:
            e = d[str(a)]
            assert abs(e["logprob"] - row[a]) < 1e-3
            assert isinstance(e["decoded_token"], str)
        ranks = [d[str(a)]["rank"] for a in alts]
        assert ranks == sorted(ranks) and all(1 <= r <= k for r in ranks)


def post(srv, path, body):
    st, _, data = srv.post(path, body)
    assert st == 200, data
    return json.loads(data)


@pytest.mark.parametrize("k", [0, 3])
def test_completions_vs_llama_cpp(srv, llm, k):
    d = post(srv, "/v1/completions", {"prompt": TOKS, "max_tokens": 2, "temperature": 0,
                                      "prompt_logprobs": k})
    check(d["choices"][0]["prompt_logprobs"], TOKS, ref_lsm(llm, TOKS), k)
    assert d["usage"]["completion_tokens"] == 2


def test_n_choices_each_carry_it(srv):
    d = post(srv, "/v1/completions", {"prompt": TOKS[:10], "max_tokens": 1, "n": 2,
                                      "prompt_logprobs": 1})
    a, b = (c["prompt_logprobs"] for c in d["choices"])
    assert a == b and len(a) == 10


def test_chat_top_level(srv, llm):
    d = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "the then"}],
                                           "max_tokens": 1, "prompt_logprobs": 2,
                                           "return_token_ids": True})
    ids = d["prompt_token_ids"]
    assert len(ids) == d["usage"]["prompt_tokens"]
    check(d["prompt_logprobs"], ids, ref_lsm(llm, ids), 2)


def test_absent_means_absent(srv):
    d = post(srv, "/v1/completions", {"prompt": TOKS[:5], "max_tokens": 1})
    assert "prompt_logprobs" not in d["choices"][0]


@pytest.mark.parametrize("body,param", [
    ({"prompt_logprobs": -1}, "prompt_logprobs"),
    ({"prompt_logprobs": 21}, "prompt_logprobs"),
    ({"prompt_logprobs": "2"}, "prompt_logprobs"),
    ({"prompt_logprobs": 1.5}, "prompt_logprobs"),
])
def test_bad_values(srv, body, param):
    st, _, data = srv.post("/v1/completions", dict({"prompt": "x"}, **body))
    check_error(st, data, 400, param=param)


def test_stream_carries_them(srv):
    """Streamed (the openai client, extra_body): the first chunk of choice 0
    that follows the prompt carries prompt_logprobs in its choice, equal to
    the whole answer's."""
    cl = srv.client()
    mid = cl.models.list().data[0].id
    whole = post(srv, "/v1/completions", {"prompt": TOKS[:12], "max_tokens": 3,
                                          "temperature": 0, "prompt_logprobs": 3})
    got = [c.choices[0].model_extra.get("prompt_logprobs")
           for c in cl.completions.create(model=mid, prompt=TOKS[:12], max_tokens=3,
                                          temperature=0, stream=True,
                                          extra_body={"prompt_logprobs": 3}) if c.choices]
    got = [g for g in got if g is not None]
    assert got == [whole["choices"][0]["prompt_logprobs"]]
    msgs = [{"role": "user", "content": "hello there"}]
    whole = post(srv, "/v1/chat/completions", {"messages": msgs, "max_tokens": 3,
                                               "temperature": 0, "prompt_logprobs": 2})
    got = [c.choices[0].model_extra.get("prompt_logprobs")
           for c in cl.chat.completions.create(model=mid, messages=msgs, max_tokens=3,
                                               temperature=0, stream=True,
                                               extra_body={"prompt_logprobs": 2}) if c.choices]
    got = [g for g in got if g is not None]
    assert got == [whole["prompt_logprobs"]]


def stream_chunks(srv, path, body):
    from anvil_server import sse_events
    st, _, data = srv.post(path, dict(body, stream=True))
    assert st == 200, data
    return sse_events(data)


def test_token_ids(srv, llm):
    """vLLM's return_token_ids on the answer's side: each choice's
    token_ids are its greedy tokens as llama-cpp-python draws them on the
    same file; echoed prompt tokens are left out (they are
    prompt_token_ids); an end-of-generation token that ends the choice
    comes last; a stream's chunks put together say the same, with logprobs
    on or off (the tokens whose text the parser holds ride with a later
    chunk, never lost)."""
    llm.reset()
    want = []
    for t in llm.generate(TOKS[:16], temp=0.0):
        want.append(int(t))
        if len(want) == 6:
            break
    body = {"prompt": TOKS[:16], "max_tokens": 6, "temperature": 0, "return_token_ids": True}
    d = post(srv, "/v1/completions", body)
    ch = d["choices"][0]
    assert ch["token_ids"] == want and ch["finish_reason"] == "length"
    assert ch["prompt_token_ids"] == TOKS[:16]
    d = post(srv, "/v1/completions", dict(body, echo=True, logprobs=2))
    assert d["choices"][0]["token_ids"] == want
    for extra in ({}, {"logprobs": 1}, {"echo": True}):
        ids = [t for c in stream_chunks(srv, "/v1/completions", dict(body, **extra))
               for ch in c["choices"] for t in ch.get("token_ids") or []]
        assert ids == want, extra
    # an end-of-generation token ends the choice: kept last, not counted
    eos = llm.token_eos()
    d = post(srv, "/v1/completions", dict(body, logit_bias={str(eos): 100}))
    ch = d["choices"][0]
    assert ch["finish_reason"] == "stop" and ch["token_ids"] == [eos], d
    assert d["usage"]["completion_tokens"] == 0
    ids = [t for c in stream_chunks(srv, "/v1/completions", dict(body, logit_bias={str(eos): 100}))
           for ch in c["choices"] for t in ch.get("token_ids") or []]
    assert ids == [eos]
    # chat, n 2: each choice its own
    msgs = [{"role": "user", "content": "hi"}]
    d = post(srv, "/v1/chat/completions", {"messages": msgs, "max_tokens": 4, "n": 2,
                                           "temperature": 0, "return_token_ids": True})
    a, b = (c["token_ids"] for c in d["choices"])
    assert a == b and len(a) == 4
    # without the field: no token_ids
    d = post(srv, "/v1/completions", {"prompt": TOKS[:4], "max_tokens": 1})
    assert "token_ids" not in d["choices"][0]


def test_answers_match_openapi(srv):
    from test_server_openapi import DOC_PATH, validator
    doc = json.load(open(DOC_PATH))
    d = post(srv, "/v1/completions", {"prompt": TOKS[:8], "max_tokens": 1, "prompt_logprobs": 2,
                                      "return_token_ids": True})
    validator(doc, "/components/schemas/TextCompletion").validate(d)
    d = post(srv, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                           "max_tokens": 1, "prompt_logprobs": 1,
                                           "return_token_ids": True})
    validator(doc, "/components/schemas/ChatCompletion").validate(d)
    for path, body, schema in (
            ("/v1/completions", {"prompt": TOKS[:8]}, "TextCompletionChunk"),
            ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]},
             "ChatCompletionChunk")):
        for c in stream_chunks(srv, path, dict(body, max_tokens=3, return_token_ids=True)):
            validator(doc, "/components/schemas/" + schema).validate(c)
