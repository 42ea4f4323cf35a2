"""`anvil serve` on loopback, driven by the `openai` PyPI client and by raw
sockets / http.client.

Each server is a subprocess started with --port 0 (the kernel picks a free
port; the server prints it on its ready line). Covered: both endpoints,
streaming and not; greedy outputs of 32+ concurrent requests equal the
same requests run one by one; greedy output equal to llama-cpp-python's;
a disconnect mid-stream gives the KV blocks back (seen in /metrics);
every request error with the OpenAI error shape (field types and ranges,
bodies that are not UTF-8 or nest too deep, an unknown model's 404); body
and header limits; a bounded load test; SIGTERM with requests in flight;
the ASan build through requests and a SIGTERM with no sanitizer report.
Connection limits and timeouts: test_server_conns.py; the OpenAPI
document: test_server_openapi.py.

ANVIL_SERVE_BIN overrides the binary (default bin/anvil).
"""
import codecs
import concurrent.futures as cf
import json
import os
import re
import signal
import socket
import subprocess
import time

import openai
import pytest

from anvil_server import (ROOT, SANITIZER_REPORTS, Server, asan_bin, asan_env, check_error,
                          serve_bin, sse_events)

# One U+FFFD per byte that does not belong to a valid UTF-8 sequence: the
# rule of the server's JSON strings (src/core/sbuf.c). Python's "replace"
# handler gives one U+FFFD per maximal invalid subpart instead.
codecs.register_error("anvil_per_byte", lambda e: ("\ufffd", e.start + 1))


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("timeout", 600)
    return subprocess.run(cmd, **kw)


CTX = 512
PROMPTS = [f"Fact {i}:" for i in range(32)]  # short: the machine is small and shared


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(serve_bin(), model_path, "--ctx", str(CTX), "--parallel", "32",
               "--kv-mem", "256M", "--max-queue", "512")
    yield s
    rc = s.stop()
    assert rc == 0, s.stderr()


@pytest.fixture(scope="module")
def model_id(srv):
    st, _, data = srv.request("GET", "/v1/models")
    assert st == 200
    return json.loads(data)["data"][0]["id"]


def chat_body(model_id, prompt, **kw):
    b = {"model": model_id, "messages": [{"role": "user", "content": prompt}],
         "temperature": 0, "max_tokens": 12}
    b.update(kw)
    return b


# ---------------------------------------------------------------------------
# basic endpoints


def test_health_models(srv, model_id, model_path):
    st, _, data = srv.request("GET", "/health")
    assert st == 200 and json.loads(data)["status"] == "ok"
    assert model_id == os.path.basename(model_path).removesuffix(".gguf")
    models = srv.client().models.list()
    assert [m.id for m in models.data] == [model_id]
    st, _, data = srv.request("GET", f"/v1/models/{model_id}")
    assert st == 200 and json.loads(data)["id"] == model_id
    st, _, data = srv.request("GET", "/v1/models/nope")
    assert st == 404 and json.loads(data)["error"]["code"] == "model_not_found"


def test_chat_nonstream_and_stream(srv, model_id):
    c = srv.client()
    msgs = [{"role": "system", "content": "You are brief."},
            {"role": "user", "content": "Name a color."}]
    r = c.chat.completions.create(model=model_id, messages=msgs, max_tokens=10, temperature=0)
    assert r.object == "chat.completion"
    ch = r.choices[0]
    assert ch.message.role == "assistant" and isinstance(ch.message.content, str)
    assert ch.finish_reason in ("stop", "length")
    u = r.usage
    assert 0 < u.completion_tokens <= 10 and u.prompt_tokens > 5
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    if ch.finish_reason == "length":
        assert u.completion_tokens == 10

    chunks = list(c.chat.completions.create(model=model_id, messages=msgs, max_tokens=10,
                                            temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert all(k.object == "chat.completion.chunk" for k in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(k.choices[0].delta.content or "" for k in chunks if k.choices)
    finals = [k.choices[0].finish_reason for k in chunks if k.choices and k.choices[0].finish_reason]
    assert text == ch.message.content
    assert finals == [ch.finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == u.completion_tokens
    assert chunks[-1].usage.prompt_tokens == u.prompt_tokens


def test_completions_nonstream_and_stream(srv, model_id):
    c = srv.client()
    r = c.completions.create(model=model_id, prompt="The capital of France is", max_tokens=8,
                             temperature=0)
    assert r.object == "text_completion"
    ch = r.choices[0]
    assert ch.finish_reason in ("stop", "length") and r.usage.completion_tokens <= 8
    parts = []
    finish = None
    for k in c.completions.create(model=model_id, prompt="The capital of France is",
                                  max_tokens=8, temperature=0, stream=True):
        assert k.object == "text_completion"
        parts.append(k.choices[0].text)
        finish = k.choices[0].finish_reason or finish
    assert "".join(parts) == ch.text and finish == ch.finish_reason
    # raw SSE shape: one JSON per data line, final [DONE]
    st, h, data = srv.post("/v1/completions", {"prompt": "Hello", "max_tokens": 4,
                                               "temperature": 0, "stream": True})
    assert st == 200 and h["Content-Type"].startswith("text/event-stream")
    ev = sse_events(data)
    assert ev[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_prompt_token_ids_match_text(srv, model_id):
    """The same prompt as text and as the token ids the server counted."""
    c = srv.client()
    r = c.completions.create(model=model_id, prompt="Once upon a time", max_tokens=6,
                             temperature=0, logprobs=1)
    n = r.usage.prompt_tokens
    assert n > 0
    # one bad id fails only that request, with a 400 naming the prompt
    st, _, data = srv.post("/v1/completions", {"prompt": [1, 2, 10**6], "max_tokens": 2})
    assert st == 400 and json.loads(data)["error"]["param"] == "prompt"
    st, _, data = srv.post("/v1/completions", {"prompt": [1, -1], "max_tokens": 2})
    assert st == 400
    st, _, data = srv.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 2,
                                               "temperature": 0})
    assert st == 200 and json.loads(data)["usage"]["prompt_tokens"] == 3


def test_greedy_matches_llama_cpp(srv, model_id, model_path):
    import llama_cpp  # a missing dependency fails the test (make test installs it)
    llama_ref = llama_cpp.Llama(model_path=model_path, n_ctx=256, n_threads=2, seed=0,
                                verbose=False)
    prompt = "The quick brown fox"
    r = srv.client().completions.create(model=model_id, prompt=prompt, max_tokens=8,
                                        temperature=0)
    ids = llama_ref.tokenize(prompt.encode(), add_bos=True, special=True)
    assert r.usage.prompt_tokens == len(ids)
    ref = llama_ref.create_completion(prompt, max_tokens=8, temperature=0, top_k=1)
    assert r.choices[0].text == ref["choices"][0]["text"]


def test_stop_and_logprobs(srv, model_id):
    c = srv.client()
    base = c.completions.create(model=model_id, prompt="1, 2, 3, 4,", max_tokens=12,
                                temperature=0)
    text = base.choices[0].text
    assert len(text) > 3
    stop = text[2:4]
    r = c.completions.create(model=model_id, prompt="1, 2, 3, 4,", max_tokens=12,
                             temperature=0, stop=[stop, "zzzz"])
    assert r.choices[0].finish_reason == "stop"
    assert text.startswith(r.choices[0].text) and stop not in r.choices[0].text

    # ignore_eos: the answer runs to max_tokens, so every check below runs
    r = c.chat.completions.create(model=model_id, messages=[{"role": "user", "content": "Hi"}],
                                  max_tokens=5, temperature=0, logprobs=True, top_logprobs=3,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    lp = r.choices[0].logprobs.content
    assert len(lp) == r.usage.completion_tokens == 5
    for t in lp:
        assert t.logprob <= 1e-6 and len(t.top_logprobs) == 3
        # greedy: the chosen token is the most likely one
        assert abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4
        # `bytes` are the token's raw bytes, `token` the same bytes as a JSON
        # string, where each byte that is not part of a valid UTF-8
        # sequence becomes one U+FFFD (a byte-level token can hold half a
        # character)
        assert len(t.bytes) > 0 and all(0 <= b < 256 for b in t.bytes)
        assert t.token == bytes(t.bytes).decode("utf-8", errors="anvil_per_byte")
        for a in t.top_logprobs:
            assert len(a.bytes) > 0
            assert a.token == bytes(a.bytes).decode("utf-8", errors="anvil_per_byte")
    # no stop string or end token cut the text: the content is the
    # generated tokens' bytes, one after the other
    assert b"".join(bytes(t.bytes) for t in lp).decode("utf-8", "anvil_per_byte") == \
        r.choices[0].message.content
    r = c.completions.create(model=model_id, prompt="Hi", max_tokens=4, temperature=0,
                             logprobs=2, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 4
    assert all(len(d) <= 2 for d in lp.top_logprobs)


def test_per_byte_replacement_rule():
    """The decoder the logprobs check uses: one U+FFFD per invalid byte."""
    assert b"a\xe2\x82".decode("utf-8", "anvil_per_byte") == "a\ufffd\ufffd"
    assert b"\xe2\x82\xac\xff".decode("utf-8", "anvil_per_byte") == "\u20ac\ufffd"
    assert b"\xed\xa0\x80A".decode("utf-8", "anvil_per_byte") == "\ufffd" * 3 + "A"


def test_seed_bounds_accepted(srv):
    for seed in (2 ** 53 - 1, -(2 ** 53 - 1), 0):
        st, _, data = srv.post("/v1/completions", {"prompt": [300], "max_tokens": 1, "seed": seed})
        assert st == 200, (seed, data)


def test_seeded_sampling_repeats(srv, model_id):
    body = {"prompt": "A word:", "temperature": 1.0, "top_p": 0.9, "seed": 1234, "max_tokens": 6}
    outs = {json.loads(srv.post("/v1/completions", body)[2])["choices"][0]["text"]
            for _ in range(2)}
    assert len(outs) == 1


# ---------------------------------------------------------------------------
# concurrency: batched greedy == one by one


def one(srv, body, stream):
    st, _, data = srv.post("/v1/completions", dict(body, stream=stream))
    assert st == 200, data
    if not stream:
        d = json.loads(data)
        return d["choices"][0]["text"], d["choices"][0]["finish_reason"]
    ev = sse_events(data)
    text = "".join(e["choices"][0]["text"] for e in ev if e["choices"])
    fin = [e["choices"][0]["finish_reason"] for e in ev if e["choices"] and e["choices"][0]["finish_reason"]]
    return text, fin[0]


def test_concurrent_greedy_equals_sequential(srv, model_id):
    bodies = [{"model": model_id, "prompt": p, "max_tokens": 3, "temperature": 0}
              for p in PROMPTS]
    seq = [one(srv, b, False) for b in bodies]
    with cf.ThreadPoolExecutor(len(bodies)) as ex:
        futs = [ex.submit(one, srv, b, i % 2 == 1) for i, b in enumerate(bodies)]
        par = [f.result() for f in futs]
    assert par == seq
    assert len(set(t for t, _ in seq)) > 1  # the prompts really differ


def test_load_bounded(srv, model_id):
    """256 short requests from 16 concurrent keep-alive clients, every one
    answered right. One-token prompts (as ids) and two new tokens keep the
    model's share of the work small: this tests the HTTP layer."""
    prompts = [[t] for t in range(300, 308)]
    want = {}
    for p in prompts:
        st, _, data = srv.post("/v1/completions", {"prompt": p, "max_tokens": 2, "temperature": 0})
        assert st == 200
        want[p[0]] = json.loads(data)["choices"][0]["text"]

    def worker(k):
        c = srv.conn()
        bad = []
        for i in range(16):
            p = prompts[(k + i) % len(prompts)]
            stream = (k + i) % 3 == 0
            body = json.dumps({"prompt": p, "max_tokens": 2, "temperature": 0, "stream": stream})
            c.request("POST", "/v1/completions", body=body,
                      headers={"Content-Type": "application/json"})  # keep-alive
            r = c.getresponse()
            data = r.read()
            if r.status != 200:
                bad.append((r.status, data))
                continue
            if stream:
                text = "".join(e["choices"][0]["text"] for e in sse_events(data))
            else:
                text = json.loads(data)["choices"][0]["text"]
            if text != want[p[0]]:
                bad.append((p, text, want[p[0]]))
        c.close()
        return bad

    with cf.ThreadPoolExecutor(16) as ex:
        bad = sum(ex.map(worker, range(16)), [])
    assert bad == []


# ---------------------------------------------------------------------------
# disconnects give the KV blocks back


def wait_metric(srv, pred, secs=60):
    """The first /metrics that satisfies pred; fails the test after secs (a
    watchdog)."""
    t_end = time.time() + secs
    while time.time() < t_end:
        m = srv.metrics()
        if pred(m):
            return m
        time.sleep(0.05)
    pytest.fail(f"metrics never satisfied the condition: {srv.metrics()}")


def wait_idle(srv, base_cancelled, want_cancel=True, secs=60):
    """KV blocks all returned, nothing in flight (and, with want_cancel, a
    cancel counted past base_cancelled)."""
    return wait_metric(srv, lambda m: m["anvil_kv_blocks_used"] == 0 and
                       m["anvil_requests_in_flight"] == 0 and
                       (not want_cancel or
                        m['anvil_requests_finished_total{reason="cancelled"}'] > base_cancelled),
                       secs)


def raw_post(srv, path, body):
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    data = json.dumps(body).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (path.encode(), len(data), data))
    return s


def test_disconnect_mid_stream_frees_blocks(srv, model_id):
    m0 = wait_idle(srv, 0, want_cancel=False)
    base = m0['anvil_requests_finished_total{reason="cancelled"}']
    assert m0["anvil_kv_blocks_free"] == m0["anvil_kv_blocks_total"] > 0
    s = raw_post(srv, "/v1/completions", {"prompt": "Count to a thousand:", "max_tokens": 400,
                                          "ignore_eos": True, "stream": True})
    got = b""
    while got.count(b"data: ") < 3:
        chunk = s.recv(4096)
        assert chunk, "stream ended early"
        got += chunk
    assert srv.metrics()["anvil_kv_blocks_used"] > 0
    s.close()
    m = wait_idle(srv, base)
    assert m["anvil_kv_blocks_free"] == m["anvil_kv_blocks_total"]


def test_disconnect_non_streaming_frees_blocks(srv, model_id):
    base = wait_idle(srv, 0, want_cancel=False)['anvil_requests_finished_total{reason="cancelled"}']
    s = raw_post(srv, "/v1/completions", {"prompt": "Count to a thousand:", "max_tokens": 400,
                                          "ignore_eos": True})
    wait_metric(srv, lambda m: m["anvil_kv_blocks_used"] > 0)  # it runs: now leave
    s.close()
    wait_idle(srv, base)


# ---------------------------------------------------------------------------
# errors: status and the OpenAI error shape


BAD_CHAT = [
    ({"temperature": -0.5}, "temperature"),
    ({"temperature": "0.5"}, "temperature"),
    ({"temperature": 2.5}, "temperature"),
    ({"top_p": 7}, "top_p"),
    ({"top_p": -0.1}, "top_p"),
    ({"top_k": -1}, "top_k"),
    ({"top_k": 2.5}, "top_k"),
    ({"min_p": 1.5}, "min_p"),
    ({"max_tokens": "10"}, "max_tokens"),
    ({"max_tokens": -5}, "max_tokens"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": 1.5}, "max_tokens"),
    ({"max_tokens": True}, "max_tokens"),
    ({"presence_penalty": 3}, "presence_penalty"),
    ({"frequency_penalty": -2.5}, "frequency_penalty"),
    ({"seed": "x"}, "seed"),
    ({"seed": 0.5}, "seed"),
    # 2^53 + 1 reads as 2^53 in a double: the bound is 2^53 - 1 so that it
    # cannot pass (found by schemathesis, bench/schemathesis_run.py)
    ({"seed": 2 ** 53 + 1}, "seed"),
    ({"seed": 2 ** 53}, "seed"),
    ({"seed": -(2 ** 53)}, "seed"),
    ({"stop": 5}, "stop"),
    ({"stop": [""]}, "stop"),
    ({"stop": ["a"] * 17}, "stop"),
    ({"stop": ["a", 3]}, "stop"),
    ({"n": 0}, "n"),
    ({"n": 129}, "n"),
    ({"n": "1"}, "n"),
    ({"stream": "yes"}, "stream"),
    ({"logprobs": 1}, "logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"top_logprobs": 2}, "top_logprobs"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"model": 3}, "model"),
    ({"tools": [{"type": "function"}]}, "tools[0]"),
    ({"logit_bias": {"1": "x"}}, "logit_bias"),
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"content": "hi"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content"),
    ({"max_tokens": CTX}, "max_tokens"),
]


@pytest.mark.parametrize("patch,param", BAD_CHAT, ids=[json.dumps(p)[:50] for p, _ in BAD_CHAT])
def test_bad_chat_fields(srv, model_id, patch, param):
    body = chat_body(model_id, "hi")
    body.update(patch)
    st, _, data = srv.post("/v1/chat/completions", body)
    e = check_error(st, data, 400, param=param)
    if param == "max_tokens" and patch["max_tokens"] == CTX:
        assert e["code"] == "context_length_exceeded"


BAD_COMPLETION = [
    ({"prompt": 5}, "prompt"),
    ({"prompt": []}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": [1, 2.5]}, "prompt"),
    ({"prompt": [1, "2"]}, "prompt"),
    ({"prompt": "x " * (CTX + 10)}, "prompt"),
    ({"prompt": list(range(1, CTX + 2))}, "prompt"),
    ({"logprobs": 6}, "logprobs"),
    ({"logprobs": True}, "logprobs"),
    ({"echo": 1}, "echo"),
    ({"best_of": 3}, "best_of"),
    ({"suffix": "x"}, "suffix"),
    ({"messages": []}, "messages"),
    ({"top_logprobs": 1}, "top_logprobs"),
    ({"max_tokens": CTX - 1}, "max_tokens"),  # the prompt has more than one token
]


@pytest.mark.parametrize("patch,param", BAD_COMPLETION,
                         ids=[json.dumps(p)[:50] for p, _ in BAD_COMPLETION])
def test_bad_completion_fields(srv, model_id, patch, param):
    body = {"model": model_id, "prompt": "hello there", "max_tokens": 4}
    body.update(patch)
    st, _, data = srv.post("/v1/completions", body)
    check_error(st, data, 400, param=param)


@pytest.mark.parametrize("raw", [b'{"prompt": "hi",', b"[1, 2]", b"", b"null", b"\xff\xfe",
                                 b'{"prompt": "hi"} trailing', b"[" * 5000, b'"just a string"'])
def test_malformed_json(srv, raw):
    st, _, data = srv.post("/v1/completions", raw)
    check_error(st, data, 400)


# Bytes that are not UTF-8 inside a JSON string: the body is not JSON text
# (RFC 8259 section 8.1), whatever cJSON would make of it.
NOT_UTF8 = [
    b"\xff\xfe",            # never valid in UTF-8
    b"\xc0\xaf",            # overlong "/"
    b"\xed\xa0\x80",        # a surrogate (U+D800)
    b"\xf4\x90\x80\x80",    # above U+10FFFF
    b"\xe2\x82",            # a cut sequence (then the closing quote)
    b"\x80",                # a lone continuation byte
]


@pytest.mark.parametrize("bad", NOT_UTF8, ids=[b.hex() for b in NOT_UTF8])
def test_body_not_utf8_is_400(srv, bad):
    body = b'{"prompt": "Hello ' + bad + b'", "max_tokens": 2}'
    st, _, data = srv.post("/v1/completions", body)
    e = check_error(st, data, 400)
    assert "UTF-8" in e["message"] and f"offset {body.index(bad)}" in e["message"], e
    body = b'{"messages": [{"role": "user", "content": "' + bad + b'"}], "max_tokens": 2}'
    st, _, data = srv.post("/v1/chat/completions", body)
    assert "UTF-8" in check_error(st, data, 400)["message"]


def test_body_utf8_accepted(srv):
    """The same checks pass every valid sequence length, raw and escaped."""
    text = "caf\u00e9 \u20ac \U0001f600 \ud55c"
    for body in (json.dumps({"prompt": text, "max_tokens": 1}, ensure_ascii=False).encode(),
                 json.dumps({"prompt": text, "max_tokens": 1}).encode()):
        st, _, data = srv.post("/v1/completions", body)
        assert st == 200, data
    n = json.loads(srv.post("/v1/completions", {"prompt": text, "max_tokens": 1})[2])
    assert n["usage"]["prompt_tokens"] > 5


def nested(depth):
    """A chat body whose deepest array sits `depth` levels down (the
    body object is level 1); `metadata` takes any value."""
    return {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "metadata": json.loads("[" * (depth - 1) + "]" * (depth - 1))}


def test_json_depth_bound(srv):
    st, _, data = srv.post("/v1/chat/completions", nested(64))
    assert st == 200, data
    st, _, data = srv.post("/v1/chat/completions", nested(65))
    e = check_error(st, data, 400)
    assert "64 levels" in e["message"], e
    # brackets inside strings are text, not nesting
    st, _, data = srv.post("/v1/completions", {"prompt": "[{" * 200, "max_tokens": 1})
    assert st == 200, data


def test_nul_in_strings_is_400(srv):
    """cJSON keeps strings NUL terminated: a prompt, stop string or key with
    U+0000 would be cut short silently, so it is refused."""
    for body in (b'{"prompt": "ab\\u0000cd", "max_tokens": 1}',
                 b'{"prompt": "ab", "stop": ["x\\u0000"], "max_tokens": 1}',
                 b'{"prompt": "ab", "max_tokens\\u0000x": 1}'):
        st, _, data = srv.post("/v1/completions", body)
        assert "U+0000" in check_error(st, data, 400)["message"], body
    # raw control bytes inside a string are not JSON (RFC 8259 section 7)
    st, _, data = srv.post("/v1/completions", b'{"prompt": "a\x00b", "max_tokens": 1}')
    check_error(st, data, 400)
    st, _, data = srv.post("/v1/completions", b'{"prompt": "a\nb", "max_tokens": 1}')
    check_error(st, data, 400)
    # an escaped backslash followed by the letters u0000 is plain text
    st, _, data = srv.post("/v1/completions", b'{"prompt": "a\\\\u0000", "max_tokens": 1}')
    assert st == 200, data


def test_unknown_model_404(srv, model_id):
    """OpenAI's answer for a model it does not serve: 404, model_not_found."""
    for path, body in (("/v1/chat/completions", chat_body("gpt-4", "hi")),
                       ("/v1/completions", {"model": "gpt-4", "prompt": "hi"})):
        st, _, data = srv.post(path, body)
        assert st == 404, data
        assert json.loads(data) == {"error": {
            "message": "The model `gpt-4` does not exist or you do not have access to it.",
            "type": "invalid_request_error", "param": None, "code": "model_not_found"}}
    c = srv.client()
    with pytest.raises(openai.NotFoundError) as ei:
        c.chat.completions.create(model="no-such-model", max_tokens=1,
                                  messages=[{"role": "user", "content": "hi"}])
    assert ei.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="no-such-model", prompt="hi", max_tokens=1)
    with pytest.raises(openai.NotFoundError) as ei:
        c.models.retrieve("no-such-model")
    assert ei.value.code == "model_not_found" and ei.value.param == "model"
    # the model served is still found
    assert c.models.retrieve(model_id).id == model_id


def test_error_messages_are_valid_json(srv, model_id):
    """User text echoed in error messages: quotes, control bytes, and a
    UTF-8 character cut by the message's length limit stay valid JSON."""
    cases = [
        ({"prompt": "hi", "model": "x" + "\u00e9" * 80}, 404),  # cut mid-character at 100 bytes
        ({"prompt": "hi", "stream": True, "stream_options": {"we\"ird\n\u0001key": 1}}, 400),
        ({"messages": [{"role": "\u0001\"\\\u2028", "content": "hi"}]}, 400),
    ]
    for body, want in cases:
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        st, _, data = srv.post(path, body)
        data.decode("utf-8")  # strict: no invalid UTF-8 on the wire
        e = check_error(st, data, want)
        # the echoed text: the cut character as U+FFFD, the odd key, the role
        echoed = {404: "\ufffd", 400: "key" if "prompt" in body else "role"}[want]
        assert echoed in e["message"], e


def test_routes_and_methods(srv):
    st, _, data = srv.request("GET", "/v1/nothing")
    check_error(st, data, 404)
    st, _, data = srv.request("POST", "/v2/completions", {})
    check_error(st, data, 404)
    st, h, data = srv.request("GET", "/v1/completions")
    check_error(st, data, 405)
    assert h["Allow"] == "POST"
    st, h, data = srv.request("POST", "/health", {})
    check_error(st, data, 405)
    st, h, data = srv.request("DELETE", "/v1/chat/completions")
    check_error(st, data, 405)


def test_body_limit_413_without_reading_it(srv):
    """64 MiB announced: 413 after the headers; the body is never read."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (64 << 20))
    s.sendall(b'{"prompt": "' + b"a" * 1000)
    resp = b""
    while b"\r\n\r\n" not in resp or not resp.endswith(b"}"):
        chunk = s.recv(65536)
        if not chunk:
            break
        resp += chunk
    s.close()
    head, _, body = resp.partition(b"\r\n\r\n")
    check_error(status_of(head), body, 413, code="request_too_large")
    # a body over the limit with Expect: 100-continue is refused before the upload
    c = srv.conn()
    c.putrequest("POST", "/v1/completions")
    c.putheader("Content-Length", str(64 << 20))
    c.putheader("Expect", "100-continue")
    c.endheaders()
    r = c.getresponse()
    assert r.status == 413
    c.close()
    # the server is still fine
    assert srv.request("GET", "/health")[0] == 200


def status_of(head):
    """The status code of a raw HTTP/1.1 response head (0 when there is
    none, e.g. the connection closed before an answer)."""
    m = re.match(rb"HTTP/1\.1 (\d{3}) ", head)
    return int(m.group(1)) if m else 0


def chunked_post(srv, body_chunks, end=True, limit=None):
    """POST /v1/completions with Transfer-Encoding: chunked; returns (bytes
    sent, the raw response up to the server's close)."""
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=60)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    sent = 0
    try:
        for c in body_chunks:
            s.sendall(b"%x\r\n%s\r\n" % (len(c), c))
            sent += len(c)
        if end:
            s.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    resp = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            resp += chunk
            head, sep, rest = resp.partition(b"\r\n\r\n")
            m = re.search(rb"Content-Length: (\d+)", head, re.I)
            if sep and m and len(rest) >= int(m.group(1)):
                break
    except ConnectionResetError:
        pass
    s.close()
    return sent, resp


def test_chunked_body(srv):
    """A chunked body under the limit is read whole and answered."""
    body = json.dumps({"prompt": "Hello", "max_tokens": 1, "temperature": 0}).encode()
    sent, resp = chunked_post(srv, [body[:7], body[7:]])
    head, _, data = resp.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), resp[:300]
    assert json.loads(data)["usage"]["completion_tokens"] == 1


def test_chunked_body_over_limit_413(srv):
    """5 MiB chunked (no Content-Length, so it cannot be refused up front):
    the client gets 413 with the JSON error once its upload ends."""
    sent, resp = chunked_post(srv, (b"x" * 65536 for _ in range(80)))
    assert sent == 80 * 65536
    head, _, body = resp.partition(b"\r\n\r\n")
    assert b"connection: close" in head.lower()
    check_error(status_of(head), body, 413, code="request_too_large")
    assert srv.request("GET", "/health")[0] == 200


def test_chunked_body_endless_closes(srv):
    """An upload that never ends is read (and dropped) only up to a bound,
    then its connection is closed."""
    def chunks():
        for _ in range(4096):  # 256 MiB if the server read it all
            yield b"x" * 65536
    sent, resp = chunked_post(srv, chunks(), end=False)
    assert sent < (128 << 20), sent  # 4 MiB limit + 64 MiB dropped + socket buffers
    assert resp == b"", resp[:200]  # closed without an answer (http.c: DISCARD_MAX)
    assert srv.request("GET", "/health")[0] == 200


def test_header_limit(srv):
    st, _, _ = srv.request("GET", "/health", headers={"X-Big": "a" * (64 * 1024)})
    assert st in (413, 431)
    assert srv.request("GET", "/health")[0] == 200


def test_metrics_text(srv):
    st, h, data = srv.request("GET", "/metrics")
    assert st == 200 and h["Content-Type"].startswith("text/plain")
    text = data.decode()
    for name in ["anvil_http_requests_total", "anvil_prompt_tokens_total",
                 "anvil_generation_tokens_total", "anvil_queue_depth", "anvil_running_sequences",
                 "anvil_kv_blocks_used", "anvil_kv_blocks_free",
                 "anvil_time_to_first_token_seconds_bucket",
                 "anvil_inter_token_latency_seconds_bucket"]:
        assert name in text, name
    m = srv.metrics()
    assert m['anvil_http_requests_total{code="200"}'] > 0
    assert m['anvil_http_requests_total{code="400"}'] > 0
    assert m["anvil_generation_tokens_total"] > 0 and m["anvil_prompt_tokens_total"] > 0
    assert m['anvil_time_to_first_token_seconds_bucket{le="+Inf"}'] == \
        m["anvil_time_to_first_token_seconds_count"] > 0
    assert m["anvil_inter_token_latency_seconds_count"] > 0


# ---------------------------------------------------------------------------
# servers with their own options


def test_api_key(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--parallel", "2", "--kv-mem", "64M",
               "--api-key", "sekret")
    try:
        st, h, data = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})
        check_error(st, data, 401, code="invalid_api_key")
        st, _, data = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 2},
                             headers={"Authorization": "Bearer wrong"})
        check_error(st, data, 401)
        st, _, data = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 2},
                             headers={"Authorization": "Bearer sekretX"})
        check_error(st, data, 401)
        st, _, _ = s.request("GET", "/v1/models")
        assert st == 401
        assert s.request("GET", "/health")[0] == 200
        with pytest.raises(openai.AuthenticationError):
            s.client("nope").models.list()
        r = s.client("sekret").completions.create(model=s.client("sekret").models.list().data[0].id,
                                                   prompt="hi", max_tokens=2)
        assert r.usage.completion_tokens >= 1
    finally:
        assert s.stop() == 0, s.stderr()


def test_queue_full_503_and_disconnect_while_queued(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "512", "--parallel", "1", "--max-queue", "1",
               "--kv-mem", "64M")
    socks = []
    try:
        long = {"prompt": [300], "max_tokens": 500, "ignore_eos": True}
        a = raw_post(s, "/v1/completions", dict(long, stream=True))  # runs
        socks.append(a)
        got = b""
        while b"data: " not in got:
            got += a.recv(4096)
        # the engine counts an admitted request as queued until the end of
        # its step (stats are published once per step): let it settle
        wait_metric(s, lambda m: m["anvil_queue_depth"] == 0 and m["anvil_running_sequences"] == 1)
        b = raw_post(s, "/v1/completions", long)  # waits in the queue
        socks.append(b)
        wait_metric(s, lambda m: m["anvil_queue_depth"] == 1)
        st, h, data = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})
        check_error(st, data, 503, code="engine_overloaded")
        assert h["Retry-After"] == "1"
        # the queued client goes away before its turn: its request is cancelled
        b.close()
        # (the engine's gauges are refreshed once per step, its events come
        # during the step: wait for both)
        m = wait_metric(s, lambda m: m['anvil_requests_finished_total{reason="cancelled"}'] == 1
                        and m["anvil_queue_depth"] == 0)
        assert m["anvil_running_sequences"] == 1
        a.close()
        wait_idle(s, 1)
        st, _, _ = s.post("/v1/completions", {"prompt": "hi", "max_tokens": 2})
        assert st == 200
        assert s.metrics()['anvil_http_requests_total{code="503"}'] == 1
    finally:
        for k in socks:
            k.close()
        assert s.stop() == 0, s.stderr()


def test_idle_connection_times_out(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--parallel", "1", "--kv-mem", "64M",
               "--timeout", "1")
    try:
        k = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")  # never finished
        assert k.recv(4096) == b""  # the server closes it (after ~1 s)
        k.close()
        assert s.request("GET", "/health")[0] == 200
    finally:
        assert s.stop() == 0, s.stderr()


def test_sigterm_finishes_in_flight(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--parallel", "4", "--kv-mem", "64M")
    body = {"prompt": "Count:", "max_tokens": 40, "ignore_eos": True, "stream": True,
            "temperature": 0}
    k = raw_post(s, "/v1/completions", body)
    got = b""
    while b"data: " not in got:
        got += k.recv(4096)
    s.p.send_signal(signal.SIGTERM)
    while True:
        chunk = k.recv(65536)
        if not chunk:
            break
        got += chunk
    k.close()
    assert b"data: [DONE]" in got
    assert b'"finish_reason":"length"' in got
    assert s.stop() == 0, s.stderr()


@pytest.mark.asan
def test_asan_server_clean_shutdown(model_path):
    env = asan_env()
    s = Server(asan_bin(), model_path, "--ctx", "256", "--parallel", "4", "--kv-mem", "32M", env=env)
    k = None
    try:
        # an ASan forward pass costs about a second per token here: the chat
        # path (template, tokenizer) runs up to the context check only
        st, _, data = s.post("/v1/chat/completions",
                             {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 300,
                              "logprobs": True, "top_logprobs": 2})
        check_error(st, data, 400, param="max_tokens")
        st, _, data = s.post("/v1/completions", {"prompt": [300], "max_tokens": 2,
                                                 "logprobs": 2})
        assert st == 200 and len(json.loads(data)["choices"][0]["logprobs"]["tokens"]) == 2
        st, _, data = s.post("/v1/completions", {"prompt": [300], "max_tokens": 2,
                                                 "stream": True})
        assert st == 200 and data.endswith(b"data: [DONE]\n\n")
        st, _, data = s.post("/v1/completions", b'{"prompt": ')
        assert st == 400
        k = raw_post(s, "/v1/completions", {"prompt": [300], "max_tokens": 200,
                                            "ignore_eos": True, "stream": True})
        k.recv(4096)
        k.close()  # disconnect mid-stream
        k = raw_post(s, "/v1/completions", {"prompt": [300], "max_tokens": 200,
                                            "ignore_eos": True, "stream": True})
        k.recv(4096)
        # still streaming: the first signal starts the drain, the second
        # cancels what is left
        s.p.send_signal(signal.SIGTERM)
        time.sleep(0.5)
    finally:
        rc = s.stop(timeout=600)
    if k:
        k.close()
    err = s.stderr()
    assert rc == 0, err
    for bad in SANITIZER_REPORTS:
        assert bad not in err, err


# ---------------------------------------------------------------------------
# command line


CLI_BAD = [
    (["--port", "70000"], "--port"),
    (["--port", "x"], "integer"),
    (["--parallel", "0"], "--parallel"),
    (["--kv-mem", "12X"], "--kv-mem"),
    (["--kv-mem", "-1G"], "--kv-mem"),
    (["--timeout", "0"], "--timeout"),
    (["--header-timeout", "0"], "--header-timeout"),
    (["--max-conn", "0"], "--max-conn"),
    (["--max-conn", "1048576"], "file descriptors"),  # past any RLIMIT_NOFILE (2^20 max)
    (["--max-queue", "-1"], "--max-queue"),
    (["--api-key", ""], "--api-key"),
    (["--host", "not-an-ip"], "--host"),
    (["-t"], "needs a value"),
    (["--bogus"], "unknown option"),
]


@pytest.mark.parametrize("args,want", CLI_BAD, ids=[" ".join(a) for a, _ in CLI_BAD])
def test_cli_bad_arguments(model_path, args, want):
    p = run([serve_bin(), "serve", "-m", model_path, *args], text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and want in lines[0], p.stderr
    assert p.stdout == ""


def test_cli_help_and_missing_model():
    p = run([serve_bin(), "serve", "--help"], text=True)
    assert p.returncode == 0 and "--api-key" in p.stdout
    p = run([serve_bin(), "serve"], text=True)
    assert p.returncode == 2 and "model" in p.stderr
