"""Helpers for the tests that run `anvil serve` (and nginx) as
subprocesses with the default model: plain HTTP requests with lower-case
headers, raw and streaming requests, SSE payloads. The server process
itself, the error-shape check and wait_until are anvil_server's. Used by
test_server_web.py, test_webui_browser.py and test_deploy.py."""
import http.client
import json
import os
import re
import socket

import pytest

import anvil_server
import conftest
from anvil_server import ROOT, check_error, serve_bin, wait_until  # noqa: F401 (re-exported)

MODEL = conftest.MODEL  # the default model: written once, in the Makefile


def model_or_fail():
    if not os.path.exists(MODEL):
        pytest.fail(f"default model missing: {MODEL} (run `make model`)")
    return MODEL


class Server(anvil_server.Server):
    """`anvil serve -m MODEL --port 0 -t 1 EXTRA...` (the default model
    unless model= is given), answered through http_request."""

    def __init__(self, *extra, model=None, binary=None, env=None, cwd=None, threads=1):
        super().__init__(binary or serve_bin(), model or model_or_fail(), *extra, env=env,
                         cwd=cwd, threads=threads)

    def request(self, method, path, body=None, headers=None, timeout=120):
        return http_request(self.port, method, path, body, headers, timeout)


def http_request(port, method, path, body=None, headers=None, timeout=120):
    """One request on a fresh connection: (status, headers dict, body bytes)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    h = {"Content-Type": "application/json"} if body is not None else {}
    h.update(headers or {})
    try:
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def read_all(k):
    """Everything socket k receives until the peer closes."""
    out = b""
    while True:
        chunk = k.recv(65536)
        if not chunk:
            return out
        out += chunk


def raw_request(port, raw, timeout=30):
    """Send raw bytes, read until the server closes: the whole response."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(raw)
        return read_all(s)
    finally:
        s.close()


def stream_post(port, path, body, headers=None, timeout=120):
    """Start a streaming POST; returns the open socket after the request
    is sent (read the response with recv)."""
    data = json.dumps(body).encode()
    h = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(data)}\r\n{h}Connection: close\r\n\r\n".encode() + data)
    return s


def sse_data(raw):
    """The `data:` payloads of an SSE body (chunked framing tolerated)."""
    return [m.group(1) for m in re.finditer(rb"data: (.*?)\r?\n\r?\n", raw)]
