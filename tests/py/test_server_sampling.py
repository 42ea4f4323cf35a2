"""llama-server's sampler fields and OpenAI's logit_bias over HTTP
(src/server/sampling.c), with the default model.

Where a field's effect on a greedy request can be computed from what the
server reports (the raw top logprobs of the model's distribution, which do
not depend on the sampling fields), the test computes the expected token
with a reference and compares: logit bias (bans, boosts, text keys, the
array form) and DRY (numpy's DRY from test_sampler_ext on the prompt
ids). Settings that reduce to greedy by definition are checked to give the
greedy output (mirostat 2 with tau 0, top_n_sigma near 0, top_k 1 through
`samplers`). Bad values are 400s naming the field.
"""
import json

import numpy as np
import pytest

from anvil_server import Server, check_error, serve_bin
from test_sampler_ext import BASE, dry

CTX = 512
MOTIF = "one two three four five, "


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(serve_bin(), model_path, "--ctx", str(CTX), "--parallel", "4", "--kv-mem", "64M")
    yield s
    assert s.stop() == 0, s.stderr()


def tokenize(srv, text):
    st, _, data = srv.post("/tokenize", {"content": text})
    assert st == 200, data
    return json.loads(data)["tokens"]


def complete(srv, prompt, **kw):
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 5}
    body.update(kw)
    st, _, data = srv.post("/v1/completions", body)
    assert st == 200, data[:400]
    return json.loads(data)["choices"][0]


def top_ids(srv, choice):
    """The first step's top alternatives as {id: logprob} (pieces that
    tokenize to one token, which is every one for this model's common
    words)."""
    out = {}
    for text, lp in choice["logprobs"]["top_logprobs"][0].items():
        ids = tokenize(srv, text)
        if len(ids) == 1:
            out[ids[0]] = lp
    assert len(out) >= 3, choice["logprobs"]
    return out


@pytest.fixture(scope="module")
def base(srv):
    prompt = tokenize(srv, "The capital of France is")
    c = complete(srv, prompt)
    return prompt, c, top_ids(srv, c)


def first_id(srv, choice):
    ids = tokenize(srv, choice["text"])
    return ids[0]


def test_logit_bias_ban_and_boost(srv, base):
    prompt, c, top = base
    ranked = sorted(top, key=lambda t: -top[t])
    assert first_id(srv, c) == ranked[0]
    # ban the top token three ways: the next one wins
    for lb in ({str(ranked[0]): -100}, {str(ranked[0]): False}, [[ranked[0], False]]):
        got = complete(srv, prompt, logit_bias=lb)
        assert first_id(srv, got) == ranked[1], (lb, got["text"])
        # logprobs stay the model's own (raw) distribution
        want_top = c["logprobs"]["top_logprobs"][0]
        got_top = got["logprobs"]["top_logprobs"][0]
        assert set(got_top) == set(want_top)
        assert all(abs(got_top[k] - want_top[k]) < 1e-3 for k in want_top)
    # boost the third above the first: the reference margin plus 0.5
    boost = top[ranked[0]] - top[ranked[2]] + 0.5
    got = complete(srv, prompt, logit_bias={str(ranked[2]): boost})
    assert first_id(srv, got) == ranked[2]
    # ... and a boost 0.5 short of the margin changes nothing
    got = complete(srv, prompt, logit_bias=[[ranked[2], boost - 1.0]])
    assert first_id(srv, got) == ranked[0]
    # a text key: each of its tokens gets the bias
    piece = c["logprobs"]["tokens"][0]
    got = complete(srv, prompt, logit_bias={piece: False})
    assert first_id(srv, got) == ranked[1]
    got = complete(srv, prompt, logit_bias=[[piece, -100]])
    assert first_id(srv, got) == ranked[1]


def test_logit_bias_forces_a_token(srv, base):
    prompt, _, _ = base
    forced = tokenize(srv, " banana")[0]
    st, _, data = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 3, "temperature": 0,
                                              "logit_bias": {str(forced): 100}, "ignore_eos": True})
    assert st == 200
    assert tokenize(srv, json.loads(data)["choices"][0]["text"]) == [forced] * 3
    # chat takes it too
    st, _, data = srv.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "temperature": 0,
        "logit_bias": {str(forced): 100}})
    assert st == 200
    assert json.loads(data)["choices"][0]["message"]["content"].strip() == "banana banana"


def test_dry_matches_reference(srv):
    prompt = tokenize(srv, MOTIF * 4 + "one two three")
    c = complete(srv, prompt)
    top = top_ids(srv, c)
    params = dict(BASE, dry_multiplier=3.0, dry_base=1.75, dry_allowed_length=2, dry_last_n=CTX)
    # numpy's DRY on the raw top logprobs (a shift of the logits: the argmax is the same)
    ids = sorted(top)
    lp = np.array([top[i] for i in ids], dtype=np.float32)
    vocab = max(ids) + 1
    full = np.full(vocab, -np.inf, dtype=np.float32)
    full[ids] = lp
    breaker = tokenize(srv, "@@")
    pen = dry(full, prompt, params, [breaker])
    adj = {i: float(pen[i]) for i in ids}
    want = max(adj, key=lambda i: adj[i])
    assert want != max(top, key=lambda i: top[i])  # DRY changes the greedy choice here
    assert adj[want] > min(top.values())  # nothing outside the top 5 can win
    got = complete(srv, prompt, dry_multiplier=3.0, dry_base=1.75, dry_allowed_length=2,
                   dry_penalty_last_n=-1, dry_sequence_breakers=["@@"])
    assert first_id(srv, got) == want
    # allowed length longer than any repeat: no effect
    got = complete(srv, prompt, dry_multiplier=3.0, dry_allowed_length=100)
    assert got["text"] == c["text"]


def test_repeat_penalty(srv):
    prompt = tokenize(srv, MOTIF * 4 + "one two three")
    c = complete(srv, prompt, max_tokens=8)
    got = complete(srv, prompt, max_tokens=8, repeat_penalty=3.0, repeat_last_n=-1)
    assert got["text"] != c["text"]
    same = complete(srv, prompt, max_tokens=8, repeat_penalty=3.0, repeat_last_n=0)
    assert same["text"] == c["text"]


def greedy_text(srv, prompt, n=16):
    return complete(srv, prompt, max_tokens=n, ignore_eos=True, logprobs=None)["text"]


@pytest.mark.parametrize("fields", [
    {"mirostat": 2, "mirostat_tau": 0.0, "temperature": 1.0, "seed": 3},
    {"top_n_sigma": 1e-4, "temperature": 1.0, "seed": 4},
    {"samplers": ["top_k", "temperature"], "top_k": 1, "temperature": 1.0, "seed": 5},
    {"samplers": "kt", "top_k": 1, "temperature": 1.0, "seed": 5},
    {"top_p": 1e-6, "min_keep": 1, "temperature": 1.0, "seed": 6},
], ids=["mirostat2-tau0", "sigma0", "samplers-topk1", "samplers-letters", "top_p-tiny"])
def test_reduces_to_greedy(srv, fields):
    prompt = tokenize(srv, "Once upon a time")
    assert complete(srv, prompt, max_tokens=16, ignore_eos=True, logprobs=None, **fields)["text"] == \
        greedy_text(srv, prompt)


def test_order_and_sampling_fields_change_draws(srv):
    prompt = tokenize(srv, "Once upon a time")
    g = greedy_text(srv, prompt, 24)
    # top_k is left out of the order: it does not run, so T = 1 really samples
    free = complete(srv, prompt, max_tokens=24, ignore_eos=True, logprobs=None, top_k=1,
                    temperature=1.0, seed=7, samplers=["top_p", "temperature"])["text"]
    assert free != g
    for fields in ({"typical_p": 0.5}, {"xtc_probability": 1.0, "xtc_threshold": 0.05},
                   {"mirostat": 1}, {"mirostat": 2}, {"min_keep": 3, "min_p": 0.5},
                   {"dry_multiplier": 0.8}):
        a = complete(srv, prompt, max_tokens=12, temperature=1.0, seed=11, logprobs=None, **fields)
        b = complete(srv, prompt, max_tokens=12, temperature=1.0, seed=11, logprobs=None, **fields)
        assert a["text"] == b["text"], fields  # seeded: the same draws


def test_n_probs_and_cache_prompt(srv, base):
    prompt, c, _ = base
    st, _, data = srv.post("/v1/completions", {"prompt": prompt, "max_tokens": 2, "temperature": 0,
                                              "n_probs": 3, "cache_prompt": True})
    assert st == 200
    lp = json.loads(data)["choices"][0]["logprobs"]
    assert lp and len(lp["top_logprobs"][0]) == 3
    st, _, data = srv.post("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "n_probs": 2})
    assert st == 200
    lp = json.loads(data)["choices"][0]["logprobs"]["content"][0]
    assert len(lp["top_logprobs"]) == 2


BAD = [
    ({"repeat_penalty": 0}, None),
    ({"repeat_penalty": "1.1"}, "repeat_penalty"),
    ({"repeat_last_n": -2}, "repeat_last_n"),
    ({"typical_p": 1.5}, "typical_p"),
    ({"top_n_sigma": "x"}, "top_n_sigma"),
    ({"min_keep": -1}, "min_keep"),
    ({"dry_multiplier": -1}, "dry_multiplier"),
    ({"dry_base": True}, "dry_base"),
    ({"dry_allowed_length": 1.5}, "dry_allowed_length"),
    ({"dry_penalty_last_n": -5}, "dry_penalty_last_n"),
    ({"dry_sequence_breakers": []}, "dry_sequence_breakers"),
    ({"dry_sequence_breakers": "\n"}, "dry_sequence_breakers"),
    ({"dry_multiplier": 1, "dry_sequence_breakers": [""]}, "dry_sequence_breakers"),
    ({"dry_multiplier": 1, "dry_sequence_breakers": [5]}, "dry_sequence_breakers"),
    ({"xtc_probability": 2}, "xtc_probability"),
    ({"xtc_threshold": -0.1}, "xtc_threshold"),
    ({"mirostat": 3}, "mirostat"),
    ({"mirostat_tau": -1}, "mirostat_tau"),
    ({"mirostat_eta": "a"}, "mirostat_eta"),
    ({"n_probs": -1}, "n_probs"),
    ({"cache_prompt": "yes"}, "cache_prompt"),
    ({"samplers": ["top_k", "bogus"]}, "samplers"),
    ({"samplers": "kz"}, "samplers"),
    ({"samplers": []}, "samplers"),
    ({"samplers": 5}, "samplers"),
    ({"samplers": ["k"] * 17}, "samplers"),
    ({"logit_bias": {"1": 101}}, "logit_bias"),
    ({"logit_bias": {"1": "x"}}, "logit_bias"),
    ({"logit_bias": {"1": True}}, "logit_bias"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias"),
    ({"logit_bias": {"-1": 1}}, "logit_bias"),
    ({"logit_bias": [[1]]}, "logit_bias"),
    ({"logit_bias": [[1.5, 2]]}, "logit_bias"),
    ({"logit_bias": [[None, 2]]}, "logit_bias"),
    ({"logit_bias": 5}, "logit_bias"),
    ({"logit_bias": {str(i): 1 for i in range(513)}}, "logit_bias"),
]


@pytest.mark.parametrize("patch,param", BAD, ids=[json.dumps(p)[:40] for p, _ in BAD])
def test_bad_values(srv, patch, param):
    for path, body in (("/v1/completions", {"prompt": "hi", "max_tokens": 1}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                 "max_tokens": 1})):
        body.update(patch)
        st, _, data = srv.post(path, body)
        check_error(st, data, 400, param=param)
