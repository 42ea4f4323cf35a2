"""`anvil serve` around the OpenAI API: the embedded chat page
and its path handling, POST /tokenize and /detokenize (against
llama-cpp-python on the same GGUF), GET /props and the /v1/models facts
(against the `gguf` package), X-Anvil-Replica, --no-webui, and the
SIGTERM drain a load balancer relies on.

The page's own behaviour in a browser is test_webui_browser.py.
"""
import json
import os
import signal
import tempfile

import pytest

from serve_util import (ROOT, Server, check_error, http_request, model_or_fail, raw_request,
                        read_all, sse_data, stream_post, wait_until)

WEBUI = os.path.join(ROOT, "src", "server", "webui")
ASSETS = {  # path -> (file, content type)
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/style.css": ("style.css", "text/css; charset=utf-8"),
    "/favicon.svg": ("favicon.svg", "image/svg+xml"),
}


@pytest.fixture(scope="module")
def srv():
    # the server runs in an empty directory holding a decoy: a file the
    # page could be confused with must never be served
    with tempfile.TemporaryDirectory() as cwd:
        for name in ("secret.html", "index.htm", "passwd"):
            with open(os.path.join(cwd, name), "w") as f:
                f.write("DECOY-FROM-DISK\n")
        s = Server("--ctx", "512", "--parallel", "8", "--kv-mem", "64M", "--replica-id", "r-7",
                   cwd=cwd)
        yield s
        assert s.stop() == 0, s.stderr()


# ---------------------------------------------------------------------------
# the page


def test_static_assets_are_the_repository_files(srv):
    assert sorted(os.listdir(WEBUI)) == sorted({f for f, _ in ASSETS.values()}), \
        "a file in src/server/webui is not covered by this test"
    for path, (name, ctype) in ASSETS.items():
        st, h, data = srv.request("GET", path)
        assert st == 200, (path, st)
        with open(os.path.join(WEBUI, name), "rb") as f:
            assert data == f.read(), path
        assert h["content-type"] == ctype
        assert h["x-content-type-options"] == "nosniff"
        assert "script-src 'self'" in h["content-security-policy"]
        assert "unsafe-inline" not in h["content-security-policy"]
        assert h["cache-control"] == "no-cache"
        assert h["etag"].startswith('"') and len(h["etag"]) == 18
        assert h["x-anvil-replica"] == "r-7"


def test_static_etag_and_head(srv):
    st, h, _ = srv.request("GET", "/app.js")
    etag = h["etag"]
    st, h2, data = srv.request("GET", "/app.js", headers={"If-None-Match": etag})
    assert st == 304 and data == b"" and h2["etag"] == etag
    st, _, data = srv.request("GET", "/app.js", headers={"If-None-Match": f'"x", W/{etag}'})
    assert st == 304
    st, _, data = srv.request("GET", "/app.js", headers={"If-None-Match": '"0000000000000000"'})
    assert st == 200 and data
    # another asset's tag does not match
    _, hs, _ = srv.request("GET", "/style.css")
    st, _, _ = srv.request("GET", "/app.js", headers={"If-None-Match": hs["etag"]})
    assert st == 200
    st, h, data = srv.request("HEAD", "/")
    assert st == 200 and data == b"" and h["content-type"].startswith("text/html")


BAD_PATHS = [
    "/..", "/../", "/../etc/passwd", "/../../../../etc/passwd", "/./index.html", "//index.html",
    "/%2e%2e/etc/passwd", "/%2E%2E%2Fetc%2Fpasswd", "/..%2f..%2fetc%2fpasswd", "/.%2e/app.js",
    "/%252e%252e/etc/passwd", "/%252e%252e%252fapp.js", "/%c0%ae%c0%ae/etc/passwd",
    "/%2fapp.js", "/index.html%2f", "/index.html/", "/index.html/..", "/app.js/.",
    "/app.js%00.png", "/app.js%00", "/app.js%20", "/app.js;.png", "/APP.JS", "/Index.html",
    "/webui/app.js", "/src/server/webui/app.js", "/server/webui/index.html", "/.git/config",
    "/Makefile", "/secret.html", "/index.htm", "/passwd", "/etc/passwd", "/proc/self/environ",
    "/favicon.ico", "/robots.txt", "/%", "/%zz", "\\app.js", "/..\\app.js", "app.js", "*",
]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_static_bad_paths_404(srv, path):
    raw = raw_request(srv.port, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                      .encode())
    head, _, body = raw.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    assert status in (400, 404), (path, head)
    assert b"DECOY-FROM-DISK" not in raw and b"root:" not in raw and b"<html" not in raw.lower()
    if status == 404:
        check_error(status, body, 404)


def test_query_string_does_not_change_the_asset(srv):
    st, _, data = srv.request("GET", "/app.js?../../etc/passwd")
    with open(os.path.join(WEBUI, "app.js"), "rb") as f:
        assert st == 200 and data == f.read()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
@pytest.mark.parametrize("path", ["/", "/app.js", "/props"])
def test_static_methods_405(srv, method, path):
    st, h, data = srv.request(method, path, body="{}")
    e = check_error(st, data, 405)
    assert h["allow"] == "GET, HEAD"
    assert method in e["message"]


def test_no_webui():
    s = Server("--ctx", "256", "--kv-mem", "32M", "--no-webui")
    try:
        for path in ASSETS:
            st, h, data = s.request("GET", path)
            check_error(st, data, 404)
            assert "x-anvil-replica" not in h  # no --replica-id: no header
        st, _, data = s.request("GET", "/props")
        assert st == 200 and json.loads(data)["webui"] is False
        st, _, data = s.request("POST", "/tokenize", {"content": "hi"})
        assert st == 200
    finally:
        assert s.stop() == 0, s.stderr()


def test_api_key_page_public_api_not():
    s = Server("--ctx", "256", "--kv-mem", "32M", "--api-key", "k3y")
    try:
        for path in ASSETS:  # the page itself asks for the key
            assert s.request("GET", path)[0] == 200
        auth = {"Authorization": "Bearer k3y"}
        for method, path, body in [("GET", "/props", None), ("POST", "/tokenize", {"content": "a"}),
                                   ("POST", "/detokenize", {"tokens": [1]})]:
            st, h, data = s.request(method, path, body)
            check_error(st, data, 401, code="invalid_api_key")
            st, _, _ = s.request(method, path, body, headers={"Authorization": "Bearer nope"})
            assert st == 401
            st, _, data = s.request(method, path, body, headers=auth)
            assert st == 200, data
    finally:
        assert s.stop() == 0, s.stderr()


# ---------------------------------------------------------------------------
# /tokenize and /detokenize against llama-cpp-python

TEXTS = [
    "", "Hello world", " leading space", "trailing space ", "multiple   spaces\n\nand lines\t tab",
    "The quick brown fox jumps over the lazy dog. 1234567890",
    "café naïve résumé", "日本語のテキスト", "emoji 🙂👍🏽 and flags 🇫🇷", "Привет, мир!",
    "<|im_start|>user\nhi<|im_end|>", "code: def f(x):\n    return x**2  # square",
    "don't won't they're I'm", "a<|endoftext|>b", "\u200b zero width", "mixed: αβγ 123 ..."
]


def tok(srv, content, **kw):
    st, _, data = srv.request("POST", "/tokenize", {"content": content, **kw})
    assert st == 200, data
    return json.loads(data)["tokens"]


@pytest.mark.parametrize("add_special", [False, True])
@pytest.mark.parametrize("parse_special", [True, False])
def test_tokenize_matches_llama_cpp(srv, llama_ref, add_special, parse_special):
    for text in TEXTS:
        got = tok(srv, text, add_special=add_special, parse_special=parse_special)
        want = llama_ref.tokenize(text.encode(), add_bos=add_special, special=parse_special)
        assert got == want, (text, got, want)


def test_tokenize_defaults(srv, llama_ref):
    # llama-server's defaults: no BOS, special tokens parsed
    text = "<|im_start|>hi"
    assert tok(srv, text) == llama_ref.tokenize(text.encode(), add_bos=False, special=True)


def test_tokenize_with_pieces(srv, llama_ref):
    n_split = 0
    for text in TEXTS:
        toks = tok(srv, text, with_pieces=True)
        ids = tok(srv, text)
        assert [t["id"] for t in toks] == ids
        for t in toks:
            want = llama_ref.detokenize([t["id"]], special=True)
            piece = t["piece"]
            if isinstance(piece, str):
                assert piece.encode() == want, (t, want)
            else:  # not valid UTF-8 alone: the byte values
                n_split += 1
                assert isinstance(piece, list) and all(isinstance(b, int) for b in piece)
                assert bytes(piece) == want
                with pytest.raises(UnicodeDecodeError):
                    want.decode("utf-8")
    assert n_split > 0, "no byte-level piece was exercised"


def test_detokenize_round_trip(srv, llama_ref):
    for text in TEXTS:
        for parse_special in (True, False):
            ids = tok(srv, text, parse_special=parse_special)
            st, _, data = srv.request("POST", "/detokenize", {"tokens": ids})
            assert st == 200
            got = json.loads(data)["content"]
            assert got == text, (text, ids, got)
            assert got.encode() == llama_ref.detokenize(ids, special=True)


def test_detokenize_split_character(srv):
    # one emoji is several byte-level tokens: alone each is half a
    # character (U+FFFD), together they are the emoji
    ids = tok(srv, "🙂")
    assert len(ids) > 1
    st, _, data = srv.request("POST", "/detokenize", {"tokens": ids[:1]})
    assert st == 200 and "\ufffd" in json.loads(data)["content"]
    st, _, data = srv.request("POST", "/detokenize", {"tokens": ids})
    assert json.loads(data)["content"] == "🙂"
    st, _, data = srv.request("POST", "/detokenize", {"tokens": []})
    assert st == 200 and json.loads(data) == {"content": ""}


@pytest.mark.parametrize("body,param", [
    ({}, "content"),
    ({"content": None}, "content"),
    ({"content": 1}, "content"),
    ({"content": ["a"]}, "content"),
    ({"content": "a", "add_special": "true"}, "add_special"),
    ({"content": "a", "parse_special": 1}, "parse_special"),
    ({"content": "a", "with_pieces": {}}, "with_pieces"),
    ({"content": "a", "extra": 1}, "extra"),
    ({"prompt": "a"}, "prompt"),
])
def test_tokenize_bad_input(srv, body, param):
    st, _, data = srv.request("POST", "/tokenize", body)
    check_error(st, data, 400, param=param)


@pytest.mark.parametrize("body,param", [
    ({}, "tokens"),
    ({"tokens": None}, "tokens"),
    ({"tokens": 5}, "tokens"),
    ({"tokens": "1 2"}, "tokens"),
    ({"tokens": ["1"]}, "tokens"),
    ({"tokens": [1.5]}, "tokens"),
    ({"tokens": [-1]}, "tokens"),
    ({"tokens": [49152]}, "tokens"),
    ({"tokens": [1e20]}, "tokens"),
    ({"tokens": [1, None]}, "tokens"),
    ({"tokens": [[1]]}, "tokens"),
    ({"tokens": [True]}, "tokens"),
    ({"tokens": [1], "content": "x"}, "content"),
])
def test_detokenize_bad_input(srv, body, param):
    st, _, data = srv.request("POST", "/detokenize", body)
    check_error(st, data, 400, param=param)


@pytest.mark.parametrize("path", ["/tokenize", "/detokenize"])
@pytest.mark.parametrize("raw", ["", "{", "[]", "\"x\"", "null", "{\"content\": \"a\",}", "\xff"])
def test_tok_endpoints_malformed(srv, path, raw):
    st, _, data = srv.request("POST", path, raw.encode("latin-1"))
    check_error(st, data, 400)


def test_tokenize_limit():
    # more tokens than SRV_MAX_TOK_IO (1 << 20): a 400, not a huge answer;
    # "a " is one token per 2 bytes, so 2.2 MiB of it is ~1.15M tokens
    s = Server("--ctx", "256", "--kv-mem", "32M")
    try:
        st, _, data = s.request("POST", "/tokenize", {"content": "a " * (1100 * 1024)})
        e = check_error(st, data, 400, param="content")
        assert "1048576" in e["message"]
        st, _, data = s.request("POST", "/detokenize", {"tokens": [1] * ((1 << 20) + 1)})
        check_error(st, data, 400, param="tokens")
    finally:
        assert s.stop() == 0, s.stderr()


# ---------------------------------------------------------------------------
# /props and /v1/models


def test_props_match_the_gguf(srv):
    import gguf
    r = gguf.GGUFReader(model_or_fail())
    st, h, data = srv.request("GET", "/props")
    assert st == 200 and h["content-type"] == "application/json"
    p = json.loads(data)
    assert p["model_id"] == "SmolLM2-135M-Instruct.Q4_1"
    assert p["architecture"] == r.fields["general.architecture"].contents()
    assert p["name"] == r.fields["general.name"].contents()
    assert p["chat_template"] == r.fields["tokenizer.chat_template"].contents()
    assert p["chat_template_name"] == "chatml"
    assert p["n_ctx"] == 512 and p["default_generation_settings"]["n_ctx"] == 512
    assert p["n_ctx_train"] == r.fields["llama.context_length"].contents()
    assert p["n_embd"] == r.fields["llama.embedding_length"].contents()
    assert p["n_layer"] == r.fields["llama.block_count"].contents()
    assert p["n_vocab"] == len(r.fields["tokenizer.ggml.tokens"].data)
    assert p["parallel"] == 8 and p["total_slots"] == 8
    assert p["replica_id"] == "r-7"
    assert p["kernels"] in ("ref", "avx2", "avx512")
    assert p["type"] == "Q4_1"
    toks = r.fields["tokenizer.ggml.tokens"]
    bos = r.fields["tokenizer.ggml.bos_token_id"].contents()
    eos = r.fields["tokenizer.ggml.eos_token_id"].contents()
    assert p["bos_token"] == toks.contents(bos)
    assert p["eos_token"] == toks.contents(eos)
    assert p["webui"] is True


def test_models_entry_carries_the_facts(srv):
    _, _, data = srv.request("GET", "/props")
    p = json.loads(data)
    st, _, data = srv.request("GET", "/v1/models")
    lst = json.loads(data)
    assert st == 200 and lst["object"] == "list" and len(lst["data"]) == 1
    m = lst["data"][0]
    assert m["id"] == p["model_id"] and m["object"] == "model" and m["owned_by"] == "anvil"
    for k in ("architecture", "name", "desc", "n_ctx", "n_ctx_train", "n_vocab", "n_embd",
              "n_layer", "type", "chat_template_name", "parallel", "kernels", "replica_id"):
        assert m["meta"][k] == p[k], k
    st, _, data = srv.request("GET", "/v1/models/" + p["model_id"])
    assert st == 200 and json.loads(data) == m


def test_openai_client_reads_the_models_entry(srv):
    import openai
    c = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="x", max_retries=0)
    models = c.models.list().data
    assert [m.id for m in models] == ["SmolLM2-135M-Instruct.Q4_1"]


def test_replica_header_everywhere(srv):
    for method, path, body in [("GET", "/health", None), ("GET", "/metrics", None),
                               ("GET", "/nope", None), ("POST", "/tokenize", {"x": 1}),
                               ("POST", "/v1/completions",
                                {"prompt": "Hi", "max_tokens": 2, "temperature": 0})]:
        st, h, _ = srv.request(method, path, body)
        assert h.get("x-anvil-replica") == "r-7", (method, path, st)
    k = stream_post(srv.port, "/v1/completions", {"prompt": "Hi", "max_tokens": 3,
                                                  "stream": True, "temperature": 0})
    raw = b""
    while True:
        chunk = k.recv(65536)
        if not chunk:
            break
        raw += chunk
    k.close()
    head = raw.split(b"\r\n\r\n")[0].lower()
    assert b"x-anvil-replica: r-7" in head and b"x-accel-buffering: no" in head
    assert sse_data(raw)[-1] == b"[DONE]"


# ---------------------------------------------------------------------------
# draining on SIGTERM


def read_until(k, pred, got=b""):
    while not pred(got):
        chunk = k.recv(4096)
        assert chunk, f"connection closed early: {got[:400]!r}"
        got += chunk
    return got


def test_sigterm_drains():
    s = Server("--ctx", "512", "--parallel", "4", "--kv-mem", "64M", "--replica-id", "d1")
    # long enough to outlive the checks below (~1 s of tokens on one thread)
    body = {"prompt": "Count:", "max_tokens": 120, "ignore_eos": True, "stream": True,
            "temperature": 0}
    k = stream_post(s.port, "/v1/completions", body)
    got = read_until(k, lambda g: g.count(b"data: ") >= 3)
    assert s.request("GET", "/health")[0] == 200
    s.p.send_signal(signal.SIGTERM)
    # /health turns 503 "draining" (the wait is a watchdog)
    st, h, data = wait_until(lambda: (lambda r: r if r[0] == 503 else None)(
        s.request("GET", "/health")), secs=30, what="/health 503")
    assert json.loads(data) == {"status": "draining"}
    assert h["retry-after"] == "1" and h["x-anvil-replica"] == "d1"
    # new requests of every kind: 503 with Retry-After, before auth and body
    for method, path, body2 in [("POST", "/v1/completions", {"prompt": "x"}),
                                ("POST", "/v1/chat/completions", {"messages": []}),
                                ("POST", "/tokenize", {"content": "x"}),
                                ("GET", "/", None), ("GET", "/v1/models", None),
                                ("GET", "/props", None)]:
        st, h, data = s.request(method, path, body2)
        check_error(st, data, 503, code="server_draining")
        assert h["retry-after"] == "1" and h["connection"] == "close"
    assert s.request("GET", "/metrics")[0] == 200
    assert s.p.poll() is None, "exited before the in-flight stream finished"
    # the in-flight stream runs to its end
    got += read_all(k)
    k.close()
    events = sse_data(got)
    assert events[-1] == b"[DONE]"
    assert json.loads(events[-2])["choices"][0]["finish_reason"] == "length"
    n_text = sum(1 for e in events[:-1] if json.loads(e)["choices"][0]["text"])
    assert n_text >= 100  # every token came, none was cut
    assert s.stop(timeout=60) == 0, s.stderr()
    assert "draining" in s.stderr()


def long_stream(s):
    """A stream of 2000 tokens, started: (its socket, the bytes so far)."""
    body = {"prompt": "Count:", "max_tokens": 2000, "ignore_eos": True, "stream": True,
            "temperature": 0}
    k = stream_post(s.port, "/v1/completions", body)
    return k, read_until(k, lambda g: b"data: " in g)


def test_drain_timeout_cancels():
    s = Server("--ctx", "2048", "--parallel", "2", "--kv-mem", "128M", "--drain-timeout", "1")
    k, got = long_stream(s)
    s.p.send_signal(signal.SIGTERM)
    got += read_all(k)
    k.close()
    events = sse_data(got)
    assert events[-1] == b"[DONE]"
    # cut by the drain timeout (its message below), not run to its 2000
    # tokens; the stop's timeout is a watchdog for a drain that never ends
    assert any(b'"error"' in e for e in events[-3:]), events[-3:]
    assert s.stop(timeout=60) == 0, s.stderr()
    assert "drain timeout" in s.stderr()


def test_second_signal_cancels_at_once():
    # a drain of 300 s: without the second signal's cancel the stop below
    # would outwait its watchdog
    s = Server("--ctx", "2048", "--parallel", "2", "--kv-mem", "128M", "--drain-timeout", "300")
    k, got = long_stream(s)
    s.p.send_signal(signal.SIGTERM)
    wait_until(lambda: s.request("GET", "/health")[0] == 503, secs=30, what="draining")
    s.p.send_signal(signal.SIGINT)
    got += read_all(k)
    k.close()
    events = sse_data(got)
    assert events[-1] == b"[DONE]"
    assert any(b'"error"' in e for e in events[-3:]), events[-3:]  # cancelled, not run out
    assert s.stop(timeout=60) == 0, s.stderr()
    assert "second signal" in s.stderr()


def test_sigterm_idle_exits_promptly():
    # nothing in flight: no drain to wait for, even one of 300 s (the
    # stop's timeout is the watchdog)
    s = Server("--ctx", "256", "--kv-mem", "32M", "--drain-timeout", "300")
    assert s.stop(timeout=60) == 0, s.stderr()


@pytest.mark.parametrize("args,msg", [
    (["--replica-id", ""], "--replica-id"),
    (["--replica-id", "a b"], "--replica-id"),
    (["--replica-id", "x\r\nSet-Cookie: a=b"], "--replica-id"),
    (["--replica-id", "x" * 65], "--replica-id"),
    (["--drain-timeout", "-1"], "--drain-timeout"),
    (["--drain-timeout", "soon"], "--drain-timeout"),
    (["--drain-timeout"], "--drain-timeout"),
])
def test_cli_new_flags_bad(args, msg):
    import subprocess
    from serve_util import serve_bin
    p = subprocess.run([serve_bin(), "serve", "-m", model_or_fail(), *args], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert msg in p.stderr and p.stderr.count("\n") == 1


def test_chat_template_flag():
    """--chat-template: the ready line names the family in use and where it
    came from; /props and the model entry report it; chat requests render
    with it (Gemma's turn markers are plain text to SmolLM2's vocabulary,
    so the prompt is longer than ChatML's)."""
    import subprocess
    from serve_util import serve_bin
    p = subprocess.run([serve_bin(), "serve", "-m", model_or_fail(), "--chat-template", "nope"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    assert "unknown chat template 'nope'" in p.stderr and "chatml" in p.stderr \
        and "gemma" in p.stderr and p.stderr.count("\n") == 1
    msgs = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "temperature": 0}
    n_prompt = {}
    # without the flag the GGUF's own Jinja template renders (the family
    # recognised in it is still reported as chat_template_name)
    for args, name, source in [((), "chatml", "file"), (("--chat-template", "gemma"), "gemma",
                                                          "chosen")]:
        s = Server("--ctx", "256", "--kv-mem", "32M", *args)
        try:
            want = {"file": "the GGUF's Jinja template",
                    "chosen": "the built-in gemma family"}[source]
            assert s.ready_line.endswith(f"(chat template: {want})"), s.ready_line
            st, _, data = s.request("GET", "/props")
            p = json.loads(data)
            assert (p["chat_template_name"], p["chat_template_source"]) == (name, source)
            st, _, data = s.request("GET", "/v1/models")
            meta = json.loads(data)["data"][0]["meta"]
            assert (meta["chat_template_name"], meta["chat_template_source"]) == (name, source)
            st, _, data = s.request("POST", "/v1/chat/completions", msgs)
            assert st == 200, data
            n_prompt[name] = json.loads(data)["usage"]["prompt_tokens"]
        finally:
            assert s.stop() == 0, s.stderr()
    assert n_prompt["gemma"] != n_prompt["chatml"], n_prompt


def test_cli_help_lists_new_flags():
    import subprocess
    from serve_util import serve_bin
    p = subprocess.run([serve_bin(), "serve", "--help"], capture_output=True, text=True)
    assert p.returncode == 0
    for flag in ("--no-webui", "--replica-id", "--drain-timeout", "--chat-template", "gemma",
                 "/tokenize", "/props"):
        assert flag in p.stdout


@pytest.mark.asan
def test_asan_build_through_the_new_endpoints():
    """The ASan+UBSan binary through the page, the tokenizer endpoints
    (good and bad bodies), /props and a drain with a request in flight:
    no sanitizer report, exit 0."""
    asan = os.environ.get("ANVIL_SERVE_BIN_ASAN") or os.path.join(ROOT, "bin", "anvil-asan")
    if not os.path.exists(asan):
        pytest.fail(f"{asan} is not built (make asan)")
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1")
    s = Server("--ctx", "256", "--parallel", "2", "--kv-mem", "32M", "--replica-id", "a1",
               binary=asan, env=env)
    try:
        for path in list(ASSETS) + BAD_PATHS[:12]:
            raw_request(s.port, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                        .encode())
        assert s.request("GET", "/app.js", headers={"If-None-Match": "*"})[0] == 304
        assert s.request("GET", "/props")[0] == 200
        assert s.request("GET", "/v1/models")[0] == 200
        for body in ({"content": "héllo 🙂 <|im_start|>", "with_pieces": True},
                     {"content": "x", "add_special": True}, {"content": 1}, {"bogus": 1}):
            s.request("POST", "/tokenize", body)
        for body in ({"tokens": [1, 2, 19556, 49151]}, {"tokens": [-1]}, {"tokens": "x"}):
            s.request("POST", "/detokenize", body)
        s.request("POST", "/tokenize", b"{\"content\": \"a\", ")
        # a drain with a stream in flight (ASan: about a second per token)
        k = stream_post(s.port, "/v1/completions", {"prompt": "Hi", "max_tokens": 3,
                                                    "stream": True, "temperature": 0})
        read_until(k, lambda g: b"data: " in g)
        s.p.send_signal(signal.SIGTERM)
        wait_until(lambda: s.request("GET", "/health")[0] == 503, secs=30, what="draining")
        got = read_all(k)
        k.close()
        assert b"[DONE]" in got
        rc = s.stop(timeout=120)
    finally:
        if s.p.poll() is None:
            s.kill()
    err = s.stderr()
    assert rc == 0, err
    assert "ERROR: AddressSanitizer" not in err and "runtime error" not in err \
        and "LeakSanitizer" not in err, err
