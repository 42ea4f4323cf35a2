"""`anvil serve` under many, idle, slow and surplus connections, on loopback
with bounded loops.

- 2,000 idle connections (half of them silent, half stopped in the middle
  of a request head) do not stall a new client: health, a completion and
  a stream are answered while they stay open. Thread-per-connection
  serving with a limit of max_running + max_queue + 64 (1,152 by default)
  failed this; now a connection costs a socket, not a thread.
- Past --max-conn a connection's first request gets 503
  too_many_connections with Retry-After and the connection is closed; the
  server serves again once connections close.
- --header-timeout: a connection that does not deliver a whole request
  head in time (silent, dripping a byte at a time, idle keep-alive) is
  closed, and /metrics counts it.
"""
import json
import socket
import time

import pytest

from anvil_server import Server, check_error, raise_nofile, serve_bin, sse_events, wait_until


def metrics(srv):
    return srv.metrics()


def open_idle(port, n, half_head_every=2):
    """n connections; every half_head_every-th one sends half a request
    head and stops."""
    socks = []
    for i in range(n):
        k = socket.create_connection(("127.0.0.1", port), timeout=30)
        if i % half_head_every == 1:
            k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Ty")
        socks.append(k)
    return socks


def test_two_thousand_idle_connections_do_not_block(model_path):
    raise_nofile(4096)
    s = Server(serve_bin(), model_path, "--ctx", "256", "--parallel", "4", "--kv-mem", "64M")
    socks = []
    try:
        socks = open_idle(s.port, 2000)
        wait_until(lambda: metrics(s)["anvil_http_connections_open"] >= 2000,
                   what="2000 connections open")
        # a new client is served while they stay open (the timeouts are
        # watchdogs for a blocked server, not a measure of its speed)
        st, _, data = s.request("GET", "/health", timeout=60)
        assert st == 200, (st, data)
        st, _, data = s.post("/v1/completions", {"prompt": [300], "max_tokens": 2,
                                                 "temperature": 0}, timeout=60)
        assert st == 200 and json.loads(data)["usage"]["completion_tokens"] == 2, data
        st, _, data = s.post("/v1/chat/completions",
                             {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                              "stream": True}, timeout=30)
        assert st == 200 and sse_events(data)[-1]["choices"][0]["finish_reason"] is not None
        # every idle connection is still open (none was dropped to make room)
        assert metrics(s)["anvil_http_connections_open"] >= 2000
    finally:
        for k in socks:
            k.close()
    try:
        wait_until(lambda: metrics(s)["anvil_http_connections_open"] <= 1,
                   what="the idle connections to close")
        assert s.request("GET", "/health")[0] == 200
    finally:
        assert s.stop() == 0, s.stderr()


def test_connection_limit_503(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--parallel", "2", "--kv-mem", "64M",
               "--max-conn", "40")
    socks = []
    try:
        socks = open_idle(s.port, 40)
        wait_until(lambda: metrics_count(s) >= 40, what="40 connections open")
        # over the limit: one answer, 503 with the JSON error, then closed
        for path in ("/health", "/v1/models"):
            st, h, data = s.request("GET", path, timeout=10)
            e = check_error(st, data, 503, code="too_many_connections")
            assert h["Retry-After"] == "1" and h["Connection"].lower() == "close", h
            assert "40" in e["message"]
        # room again once some close
        for k in socks[:10]:
            k.close()
        socks = socks[10:]
        wait_until(lambda: s.request("GET", "/health", timeout=10)[0] == 200,
                   what="room for a connection again")
        assert metrics(s)["anvil_http_connections_refused_total"] >= 2
        st, _, data = s.post("/v1/completions", {"prompt": [300], "max_tokens": 1})
        assert st == 200, data
    finally:
        for k in socks:
            k.close()
        assert s.stop() == 0, s.stderr()


def metrics_count(s):
    """Open connections, read over a connection that may itself be refused."""
    st, _, data = s.request("GET", "/metrics", timeout=10)
    if st != 200:
        return 10 ** 9
    for line in data.decode().splitlines():
        if line.startswith("anvil_http_connections_open "):
            return int(float(line.split()[1]))
    return 0


def closed_within(k, secs):
    """Seconds until the server closes k (reads EOF or a reset), or None."""
    k.settimeout(0.2)
    t0 = time.time()
    while time.time() - t0 < secs:
        try:
            if k.recv(4096) == b"":
                return time.time() - t0
        except socket.timeout:
            continue
        except ConnectionResetError:
            return time.time() - t0
    return None


def test_header_timeout(model_path):
    s = Server(serve_bin(), model_path, "--ctx", "256", "--parallel", "2", "--kv-mem", "64M",
               "--header-timeout", "2")
    try:
        base = metrics(s)["anvil_http_connections_head_timeout_total"]
        silent = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        # a slowloris: one byte of the head every 0.2 s resets an idle
        # timer (the server's --timeout), not the deadline: the drip would
        # go on for its whole head, 40 s, if only the idle timer applied.
        # The head-timeout counter below says which rule closed them.
        drip = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
        cut = False
        for b in head:
            try:
                drip.sendall(bytes([b]))
            except (BrokenPipeError, ConnectionResetError):
                cut = True
                break
            if closed_within(drip, 0.1) is not None:  # waits 0.2 s
                cut = True
                break
        assert cut, "a dripped request head outlived the head deadline"
        assert closed_within(silent, 30) is not None
        # a keep-alive connection idle after its answer gets the same
        # deadline, and only once idle: it serves a second request first
        k = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        for _ in range(2):
            k.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            got = b""
            while b'"ok"' not in got:
                chunk = k.recv(4096)
                assert chunk, "the keep-alive connection was closed under a request"
                got += chunk
        assert closed_within(k, 30) is not None
        for x in (silent, drip, k):
            x.close()
        m = metrics(s)
        assert m["anvil_http_connections_head_timeout_total"] >= base + 3, m
        # a client that sends its request in time is served as usual
        st, _, data = s.post("/v1/completions", {"prompt": [300], "max_tokens": 2})
        assert st == 200, data
    finally:
        assert s.stop() == 0, s.stderr()


@pytest.mark.parametrize("stream", [False, True])
def test_parked_request_client_gone(model_path, stream):
    """A request waiting for the engine (its connection parked, unwatched by
    libmicrohttpd) is cancelled when its client goes away, and the KV
    blocks return."""
    s = Server(serve_bin(), model_path, "--ctx", "512", "--parallel", "2", "--kv-mem", "64M")
    try:
        k = socket.create_connection(("127.0.0.1", s.port), timeout=30)
        body = json.dumps({"prompt": [300], "max_tokens": 400, "ignore_eos": True,
                           "stream": stream}).encode()
        k.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                  % (len(body), body))
        wait_until(lambda: metrics(s)["anvil_kv_blocks_used"] > 0, what="the request to run")
        k.close()
        m = wait_until(lambda: (lambda m: m if m["anvil_kv_blocks_used"] == 0 and
                                m["anvil_requests_in_flight"] == 0 else None)(metrics(s)),
                       what="the cancel to free the KV blocks")
        assert m['anvil_requests_finished_total{reason="cancelled"}'] == 1
        assert m['anvil_requests_finished_total{reason="length"}'] == 0
    finally:
        assert s.stop() == 0, s.stderr()
