"""`anvil serve`: the errors written before a route runs, in the shape of
the API the path belongs to (brief api37 item 4): an unknown path, a method
the route does not take, a body over the limit (announced, or chunked), a
missing key and bad JSON. /v1/messages... answers as Anthropic does
({"type": "error", "error": {"type", "message"}}), /api/... as Ollama does
({"error": "..."}), /v1/responses and the rest as OpenAI does.
"""
import http.client
import json

import pytest

from anvil_server import Server, check_error, serve_bin

KEY = "sk-errors"
MAX_BODY = 4 << 20  # cmd_serve.c's MAX_BODY


@pytest.fixture(scope="module")
def srv(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--parallel", "2", "--kv-mem", "32M",
               "--api-key", KEY)
    yield s
    assert s.stop() == 0, s.stderr()


AUTH = {"Authorization": f"Bearer {KEY}"}


def anth(status, data, want_status, want_type):
    assert status == want_status, (status, data[:300])
    d = json.loads(data)
    assert d["type"] == "error" and set(d["error"]) == {"type", "message"}, d
    assert d["error"]["type"] == want_type, d
    assert d["error"]["message"]
    return d["error"]["message"]


def ollama(status, data, want_status):
    assert status == want_status, (status, data[:300])
    d = json.loads(data)
    assert set(d) == {"error"} and isinstance(d["error"], str) and d["error"], d
    return d["error"]


def openai_shape(status, data, want_status):
    return check_error(status, data, want_status)


SHAPES = {"/v1/messages": lambda st, d, want, t: anth(st, d, want, t),
          "/v1/messages/count_tokens": lambda st, d, want, t: anth(st, d, want, t),
          "/api/chat": lambda st, d, want, t: ollama(st, d, want),
          "/api/generate": lambda st, d, want, t: ollama(st, d, want),
          "/v1/responses": lambda st, d, want, t: openai_shape(st, d, want),
          "/v1/chat/completions": lambda st, d, want, t: openai_shape(st, d, want)}


@pytest.mark.parametrize("path", list(SHAPES))
def test_wrong_method(srv, path):
    st, h, data = srv.request("PUT", path, {}, headers=AUTH)
    SHAPES[path](st, data, 405, "invalid_request_error")
    assert "POST" in h["Allow"]


@pytest.mark.parametrize("path,shape", [("/v1/messages/nope", "/v1/messages"),
                                        ("/api/nope", "/api/chat"),
                                        ("/v1/nope", "/v1/responses")])
def test_unknown_route(srv, path, shape):
    st, _, data = srv.request("POST", path, {}, headers=AUTH)
    msg = SHAPES[shape](st, data, 404, "not_found_error")
    assert "nope" in json.dumps(msg) or "nope" in data.decode()


@pytest.mark.parametrize("path", list(SHAPES))
def test_body_over_the_limit_announced(srv, path):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    c.putrequest("POST", path)
    c.putheader("Content-Type", "application/json")
    c.putheader("Authorization", f"Bearer {KEY}")
    c.putheader("Content-Length", str(MAX_BODY + 1))
    c.endheaders()
    r = c.getresponse()
    data = r.read()
    c.close()
    SHAPES[path](r.status, data, 413, "request_too_large")


@pytest.mark.parametrize("path", ["/v1/messages", "/api/chat", "/v1/responses"])
def test_body_over_the_limit_chunked(srv, path):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
    body = (b"x" * (1 << 20) for _ in range(5))
    c.request("POST", path, body=body, headers={"Content-Type": "application/json", **AUTH},
              encode_chunked=True)
    r = c.getresponse()
    data = r.read()
    c.close()
    SHAPES[path](r.status, data, 413, "request_too_large")


@pytest.mark.parametrize("path", list(SHAPES))
def test_missing_key(srv, path):
    st, _, data = srv.request("POST", path, {})
    SHAPES[path](st, data, 401, "authentication_error")


@pytest.mark.parametrize("path", list(SHAPES))
def test_bad_json(srv, path):
    st, _, data = srv.request("POST", path, b"{\"model\": ", headers=AUTH)
    SHAPES[path](st, data, 400, "invalid_request_error")
