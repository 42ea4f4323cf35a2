"""A helper for tests that run `anvil serve` (and nginx) as subprocesses:
start on port 0 and read the port from the ready line, plain HTTP
requests, SSE parsing, clean stop. Used by test_server_web.py,
test_webui_browser.py and test_deploy.py."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

ROOT = os.environ.get("ANVIL_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
from conftest import MODEL  # noqa: E402  ($ANVIL_MODEL, else the Makefile's MODEL)


def serve_bin():
    return os.environ.get("ANVIL_SERVE_BIN") or os.path.join(ROOT, "bin", "anvil")


def model_or_fail():
    if not os.path.exists(MODEL):
        pytest.fail(f"default model missing: {MODEL} (run `make model`)")
    return MODEL


class Server:
    """`anvil serve -m MODEL --port 0 -t 1 EXTRA...` in a subprocess."""

    def __init__(self, *extra, model=None, binary=None, env=None, cwd=None, threads=1):
        self.err = tempfile.TemporaryFile()
        cmd = [binary or serve_bin(), "serve", "-m", model or model_or_fail(), "--port", "0",
               "-t", str(threads), *extra]
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err, env=env, cwd=cwd)
        line = [None]

        def read():
            line[0] = self.p.stdout.readline().decode()

        t = threading.Thread(target=read, daemon=True)
        t.start()
        t.join(120)
        m = re.match(r"anvil serve: listening on http://127\.0\.0\.1:(\d+)(?: |$)",
                     (line[0] or "").strip())
        if not m:
            self.p.kill()
            self.p.wait()
            pytest.fail(f"server did not start: {line[0]!r}\n{self.stderr()}")
        self.port = int(m.group(1))
        self.ready_line = line[0].strip()

    def stderr(self):
        self.err.seek(0)
        return self.err.read().decode(errors="replace")

    def request(self, method, path, body=None, headers=None, timeout=120):
        return http_request(self.port, method, path, body, headers, timeout)

    def stop(self, sig=signal.SIGTERM, timeout=60):
        """Signal, wait, return the exit status (fails the test on a hang)."""
        if self.p.poll() is None:
            self.p.send_signal(sig)
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
                pytest.fail("server did not stop on signal\n" + self.stderr())
        if self.p.stdout:
            self.p.stdout.close()
        return self.p.returncode

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
            self.p.wait()
        if self.p.stdout:
            self.p.stdout.close()


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


def raw_request(port, raw, timeout=30):
    """Send raw bytes, read until the server closes: the whole response."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(raw)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return out
            out += chunk
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


def check_error(status, data, want_status, param=None, code=None):
    """OpenAI's error shape; returns the error object."""
    assert status == want_status, (status, data[:300])
    j = json.loads(data)
    assert set(j) == {"error"}, j
    e = j["error"]
    assert set(e) == {"message", "type", "param", "code"}, e
    assert isinstance(e["message"], str) and e["message"]
    if param is not None:
        assert e["param"] == param, e
    if code is not None:
        assert e["code"] == code, e
    return e


def wait_until(pred, secs=30, step=0.05, what="condition"):
    t_end = time.time() + secs
    while time.time() < t_end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    pytest.fail(f"timed out waiting for {what}")
