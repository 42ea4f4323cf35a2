"""Helpers for the tests that drive `anvil serve` over loopback: a server
subprocess on a free port, the OpenAI error-shape check, an SSE parser.

ANVIL_SERVE_BIN overrides the binary (default bin/anvil), and
ANVIL_SERVE_BIN_ASAN the ASan+UBSan one (default bin/anvil-asan).
"""
import http.client
import json
import os
import re
import resource
import signal
import subprocess
import tempfile
import threading
import time

import openai
import pytest

ROOT = os.environ.get("ANVIL_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def serve_bin():
    return os.environ.get("ANVIL_SERVE_BIN") or os.path.join(ROOT, "bin", "anvil")


def asan_bin():
    """The ASan+UBSan binary; its absence fails the test (make asan, which
    make test runs first)."""
    p = os.environ.get("ANVIL_SERVE_BIN_ASAN") or os.path.join(ROOT, "bin", "anvil-asan")
    if not os.path.exists(p):
        pytest.fail(f"{p} is not built (make asan)")
    return p


def asan_env():
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = "detect_leaks=1:abort_on_error=0"
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    return env


SANITIZER_REPORTS = ("AddressSanitizer", "LeakSanitizer", "runtime error")


def raise_nofile(n):
    """Let this process hold n sockets (soft RLIMIT_NOFILE up to the hard
    limit); fails the test when the hard limit is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        if hard != resource.RLIM_INFINITY and hard < n:
            pytest.fail(f"RLIMIT_NOFILE hard limit {hard} < {n}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, hard))


class Server:
    """`anvil serve -m MODEL --port 0 -t THREADS EXTRA...` in a subprocess,
    its port read from the ready line."""

    def __init__(self, binary, model, *extra, env=None, cwd=None, threads=1):
        self.err = tempfile.TemporaryFile()
        # one engine thread: on this small shared machine a spinning pool of
        # two is slower, and the tests check behaviour, not speed
        cmd = [binary, "serve", "-m", model, "--port", "0", "-t", str(threads), *extra]
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

    def conn(self, timeout=600):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=600):
        c = self.conn(timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, dict(r.getheaders()), data

    def post(self, path, body, **kw):
        st, h, data = self.request("POST", path, body, **kw)
        return st, h, data

    def client(self, api_key="none"):
        return openai.OpenAI(base_url=f"http://127.0.0.1:{self.port}/v1", api_key=api_key,
                             max_retries=0, timeout=600)

    def metrics(self, headers=None):
        st, _, data = self.request("GET", "/metrics", headers=headers)
        assert st == 200
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

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


def sse_events(data):
    """Parse an SSE body into the JSON payloads; checks the [DONE] end."""
    assert data.endswith(b"data: [DONE]\n\n"), data[-200:]
    out = []
    for block in data.decode().split("\n\n"):
        if not block.strip():
            continue
        assert block.startswith("data: "), block
        payload = block[6:]
        if payload == "[DONE]":
            break
        out.append(json.loads(payload))
    return out


def check_error(status, data, want_status, param=None, code=None):
    """OpenAI's error shape; returns the error object."""
    assert status == want_status, (status, data[:300])
    d = json.loads(data)
    assert set(d) == {"error"} and set(d["error"]) == {"message", "type", "param", "code"}, d
    assert isinstance(d["error"]["message"], str) and d["error"]["message"]
    assert isinstance(d["error"]["type"], str)
    if param is not None:
        assert d["error"]["param"] == param, d
    if code is not None:
        assert d["error"]["code"] == code, d
    return d["error"]


def wait_until(pred, secs=30, step=0.05, what="condition"):
    """pred's first true value, polled every step; fails the test after
    secs (a watchdog: the condition is expected long before)."""
    t_end = time.time() + secs
    while time.time() < t_end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    pytest.fail(f"timed out waiting for {what}")
