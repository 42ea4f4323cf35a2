"""`anvil serve`: the request fields and headers other servers accept
(issue 37 items 4 and 5).

- `n` > 1 on chat and completions: n choices from one prompt, indexed
  0..n-1, each choice i sampled with seed + i (so choice i of n equals the
  single choice of a request with seed + i), streamed chunks carrying
  their choice's index, usage summing the completion tokens;
- unknown request fields: ignored, named in X-Anvil-Ignored-Fields and
  logged once per name; `--strict` restores the 400; a field of the other
  endpoint and fields anvil cannot honour stay a 400;
- usage.prompt_tokens_details.cached_tokens from the prefix cache;
- CORS: --cors-origins, preflight OPTIONS, the headers on every answer to
  an allowed origin and none for another origin;
- a client that closes its side in the middle of a request body is
  dropped at once, not after the body timeout.
"""
import json
import socket
import time

import pytest

from anvil_server import Server, check_error, serve_bin, sse_events, wait_until

CTX = 512


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(serve_bin(), model_path, "--ctx", str(CTX), "--parallel", "8",
               "--kv-mem", "128M", "--cors-origins", "https://a.example,https://b.example")
    yield s
    assert s.stop() == 0, s.stderr()


def chat(prompt, **kw):
    b = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 8}
    b.update(kw)
    return b


# ---------------------------------------------------------------------------
# n

@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_n_choices_match_single_requests(srv, path):
    """Choice i of an n=3 request is what a single request with seed + i
    gives (same prompt, same sampling): the choices are real, distinct
    generations, in order."""
    base = {"prompt": "Once upon a time"} if "chat" not in path else chat("Tell me a story.")
    base.update(temperature=1.0, max_tokens=10, seed=1234)
    st, _, data = srv.post(path, dict(base, n=3))
    assert st == 200, data
    d = json.loads(data)
    assert [c["index"] for c in d["choices"]] == [0, 1, 2]
    text = (lambda c: c["text"]) if "text" in d["choices"][0] \
        else (lambda c: c["message"]["content"])
    got = [text(c) for c in d["choices"]]
    singles = []
    gen = 0
    for i in range(3):
        st, _, one = srv.post(path, dict(base, seed=1234 + i))
        assert st == 200, one
        one = json.loads(one)
        singles.append(text(one["choices"][0]))
        gen += one["usage"]["completion_tokens"]
    assert got == singles
    assert len(set(got)) > 1, got  # different seeds, different stories
    assert d["usage"]["completion_tokens"] == gen
    assert d["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    assert d["usage"]["total_tokens"] == gen + d["usage"]["prompt_tokens"]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_n_stream_indexes(srv, path):
    body = {"prompt": "The sky is"} if "chat" not in path else chat("Say hi.")
    body.update(n=2, stream=True, stream_options={"include_usage": True}, seed=7,
                temperature=1.0, max_tokens=6)
    st, _, data = srv.post(path, body)
    assert st == 200, data
    ev = sse_events(data)
    per = {0: "", 1: ""}
    finishes = {}
    for e in ev[:-1]:
        (c,) = e["choices"]
        i = c["index"]
        assert i in per
        if "delta" in c:
            per[i] += c["delta"].get("content") or ""
        else:
            per[i] += c["text"]
        if c["finish_reason"]:
            finishes[i] = c["finish_reason"]
    assert set(finishes) == {0, 1}
    assert ev[-1]["choices"] == [] and ev[-1]["usage"]["completion_tokens"] >= 2
    # the same request whole gives the same texts
    body.pop("stream")
    body.pop("stream_options")
    st, _, whole = srv.post(path, body)
    cs = json.loads(whole)["choices"]
    texts = [c.get("text", None) if "text" in c else c["message"]["content"] for c in cs]
    assert texts == [per[0], per[1]]


def test_n_prefills_the_prompt_once(srv):
    """n = 4 on a prompt no earlier request sent: the first choice computes
    it, the other three take it from the prefix cache (they wait for its
    blocks instead of computing them beside it), which the server's
    anvil_prefix_cache_tokens_total shows."""
    words = " ".join(f"w{i}q" for i in range(70))  # a prompt of ~300 tokens
    before = srv.metrics()["anvil_prefix_cache_tokens_total"]
    st, _, data = srv.post("/v1/completions", {"prompt": "Fresh " + words, "n": 4,
                                               "max_tokens": 4, "temperature": 1.0,
                                               "seed": 3})
    assert st == 200, data
    n_prompt = json.loads(data)["usage"]["prompt_tokens"]
    assert n_prompt > 200
    wait_until(lambda: srv.metrics()["anvil_requests_in_flight"] == 0)
    got = srv.metrics()["anvil_prefix_cache_tokens_total"] - before
    assert got >= 3 * (n_prompt - 32), (got, n_prompt)  # blocks of 16 tokens at most


def test_n_bounds(srv):
    for n in (0, 129, 1.5, "2"):
        st, _, data = srv.post("/v1/completions", {"prompt": "x", "n": n})
        check_error(st, data, 400, param="n")


# ---------------------------------------------------------------------------
# unknown fields

def test_unknown_fields_ignored_and_named(srv):
    body = chat("hi", repeat_penalty_x=1.1, mirostat_zz=2, typical_q=0.5)
    st, h, data = srv.post("/v1/chat/completions", body)
    assert st == 200, data
    assert h.get("X-Anvil-Ignored-Fields") == "repeat_penalty_x,mirostat_zz,typical_q", h
    # streamed too
    st, h, data = srv.post("/v1/chat/completions", dict(body, stream=True))
    assert st == 200 and h.get("X-Anvil-Ignored-Fields") == \
        "repeat_penalty_x,mirostat_zz,typical_q", h
    sse_events(data)
    # a request without unknown fields has no such header
    st, h, _ = srv.post("/v1/chat/completions", chat("hi"))
    assert st == 200 and "X-Anvil-Ignored-Fields" not in h
    # logged once per name, however many requests sent it
    srv.post("/v1/chat/completions", body)
    log = srv.stderr()
    assert log.count("'mirostat_zz'") == 1, log


def test_unknown_field_names_are_header_safe(srv):
    st, h, data = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1,
                                               "we\"ird\n\u00e9,key": 1})
    assert st == 200, data
    v = h["X-Anvil-Ignored-Fields"]
    assert "\n" not in v and "," not in v and v.isascii(), v


def test_known_but_wrong_fields_stay_400(srv):
    # a field of the other endpoint: a mistake, not a foreign server's knob
    st, data = srv.post("/v1/completions", {"prompt": "x", "messages": []})[::2]
    check_error(st, data, 400, param="messages")
    st, data = srv.post("/v1/chat/completions", chat("x", echo=True))[::2]
    check_error(st, data, 400, param="echo")
    # known, cannot be honoured
    st, data = srv.post("/v1/completions", {"prompt": "x", "best_of": 3})[::2]
    check_error(st, data, 400, param="best_of")


def test_strict_refuses_unknown_fields(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--kv-mem", "64M", "--strict")
    try:
        st, _, data = s.post("/v1/completions", {"prompt": "x", "bogus_field": 1})
        e = check_error(st, data, 400, param="bogus_field")
        assert "Unrecognized request argument" in e["message"]
        st, _, data = s.post("/v1/completions", {"prompt": "x", "max_tokens": 1})
        assert st == 200, data
    finally:
        assert s.stop() == 0, s.stderr()


# ---------------------------------------------------------------------------
# cached tokens

def test_cached_tokens(srv):
    prompt = "A long shared preamble that the prefix cache keeps. " * 12
    body = {"prompt": prompt, "max_tokens": 2, "temperature": 0}
    st, _, data = srv.post("/v1/completions", body)
    assert st == 200, data
    u1 = json.loads(data)["usage"]
    st, _, data = srv.post("/v1/completions", body)
    u2 = json.loads(data)["usage"]
    assert u2["prompt_tokens"] == u1["prompt_tokens"]
    c = u2["prompt_tokens_details"]["cached_tokens"]
    assert 0 < c <= u2["prompt_tokens"], u2
    assert u1["prompt_tokens_details"]["cached_tokens"] < c, (u1, u2)
    st, _, data = srv.post("/v1/completions", dict(body, stream=True,
                                                  stream_options={"include_usage": True}))
    u3 = sse_events(data)[-1]["usage"]
    assert u3["prompt_tokens_details"]["cached_tokens"] == c


# ---------------------------------------------------------------------------
# CORS

def test_cors_allowed_origin(srv):
    o = {"Origin": "https://b.example"}
    st, h, _ = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1}, headers=o)
    assert st == 200
    assert h["Access-Control-Allow-Origin"] == "https://b.example" and h["Vary"] == "Origin"
    assert "X-Anvil-Ignored-Fields" in h["Access-Control-Expose-Headers"]
    # errors too
    st, h, _ = srv.post("/v1/completions", {"prompt": 5}, headers=o)
    assert st == 400 and h["Access-Control-Allow-Origin"] == "https://b.example"
    st, h, _ = srv.request("GET", "/health", headers=o)
    assert st == 200 and h["Access-Control-Allow-Origin"] == "https://b.example"


def test_cors_other_origin_gets_no_headers(srv):
    for o in ("https://evil.example", "https://a.example.evil", "https://a.exampl"):
        st, h, _ = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1},
                            headers={"Origin": o})
        assert st == 200 and "Access-Control-Allow-Origin" not in h, (o, h)
    st, h, _ = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1})
    assert "Access-Control-Allow-Origin" not in h


def test_cors_preflight(srv):
    st, h, data = srv.request("OPTIONS", "/v1/chat/completions", headers={
        "Origin": "https://a.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert st == 204 and data == b""
    assert h["Access-Control-Allow-Origin"] == "https://a.example"
    assert "POST" in h["Access-Control-Allow-Methods"]
    assert h["Access-Control-Allow-Headers"] == "authorization, content-type"
    # not allowed: no grant
    st, h, _ = srv.request("OPTIONS", "/v1/chat/completions",
                           headers={"Origin": "https://evil.example"})
    assert st == 204 and "Access-Control-Allow-Origin" not in h
    # an unknown path is still a 404
    st, _, data = srv.request("OPTIONS", "/v1/nothing", headers={"Origin": "https://a.example"})
    check_error(st, data, 404)


def test_cors_any_and_preflight_before_auth(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--kv-mem", "64M",
               "--cors-origins", "*", "--api-key", "sekrit")
    try:
        st, h, _ = s.request("OPTIONS", "/v1/completions",
                             headers={"Origin": "http://localhost:3000"})
        assert st == 204 and h["Access-Control-Allow-Origin"] == "*"
        st, h, _ = s.post("/v1/completions", {"prompt": "x", "max_tokens": 1},
                          headers={"Origin": "http://localhost:3000"})
        assert st == 401 and h["Access-Control-Allow-Origin"] == "*"
    finally:
        assert s.stop() == 0, s.stderr()


def test_cors_origins_option_checked(model_path):
    import subprocess
    p = subprocess.run([serve_bin(), "serve", "-m", model_path, "--cors-origins", "a b"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--cors-origins" in p.stderr


# ---------------------------------------------------------------------------
# a client gone in the middle of a body

def test_half_body_then_close_is_dropped_at_once(srv):
    def conns():
        return srv.metrics()["anvil_http_connections_open"]

    base = conns()
    k = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n"
              b"Content-Type: application/json\r\n\r\n{\"prompt\": \"hal")
    wait_until(lambda: conns() >= base + 1, what="the connection to open")
    t0 = time.time()
    k.close()
    wait_until(lambda: conns() <= base, secs=5, what="the half-sent connection to close")
    assert time.time() - t0 < 1.0
    # the server still serves
    st, _, data = srv.post("/v1/completions", {"prompt": "x", "max_tokens": 1})
    assert st == 200, data
