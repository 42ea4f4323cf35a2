#!/usr/bin/env python3
"""Soak `anvil serve` (the ASan+UBSan build by default) with mixed, hostile
clients, then check that nothing leaked, nothing was lost and nothing was
counted twice.

    bench/soak.py --minutes 10            # bin/anvil-asan, default model
    bench/soak.py --minutes 10 --out bench/results

Not part of `make test` (tests/py/test_server_soak.py runs this program
for ~30 s: --minutes 0.5 --rss-tol 0.10). Build first: `make asan`.
Prints the result as one JSON document on stdout; exit status 0 when every
check passed, 1 otherwise.

Clients, each a thread that sends requests until its phase ends or its
request budget (a bound per client type) is spent, every request on a new
connection with `Connection: close`, so that exactly one response (or the
server closing) answers it:

  normal    non-streaming completions and chats, short            -> 200
  stream    streaming completions and chats with usage            -> 200, [DONE]
  cancel    a long stream, hung up after two events               -> 200 cut
  gone      a long non-streaming request, hung up while it waits  -> nothing
  slow      a head dripped slower than --header-timeout allows     -> closed
            (and, in turn, a head sent in pieces within the time   -> 200)
  big       Content-Length 8 MiB (refused unread); 5 MiB chunked   -> 413
  invalid   malformed JSON, not UTF-8, too deep, unknown model,
            a bad field, a wrong method, an unknown path           -> 400/404/405
  idle      holds IDLE_CONNS connections that send nothing and     -> closed
            reopens them when the head deadline closes them

Run: a warm-up phase (a tenth of the time, at least 20 s), every client
stopped, the server left to go idle and its RSS read; then the main phase,
the same way. Checks at the end:

  - every request a client sent got exactly one outcome its type allows
    (one whole response with the expected status and shape, or the
    server closing a connection it had to close); anything else is
    counted as bad, with samples;
  - the server's counters agree with the clients': responses by status
    (anvil_http_requests_total), generation requests finished by reason
    (length+stop = whole answers, cancelled = hung up), connections shut
    for a late head (anvil_http_connections_head_timeout_total);
  - no response id was seen twice;
  - /metrics at the end: every KV block free, nothing queued, running or
    in flight;
  - RSS after the main phase within 5% of RSS after the warm-up;
  - the server stops on SIGTERM with status 0 and ASan/UBSan/LSan print
    nothing.

ASan holds freed memory in a quarantine (256 MiB by default) that would
read as growth; the run caps it (ASAN_OPTIONS quarantine_size_mb=16) and
has the allocator return free memory to the OS every second, so RSS
measures what the server holds.

Writes soak-<date>.json (and a short .md) into --out when given.
"""
import argparse
import datetime
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from repo import default_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IDLE_CONNS = 100
HEADER_TIMEOUT = 4
SANITIZER_REPORTS = ("AddressSanitizer", "LeakSanitizer", "runtime error", "ERROR: ")

# ---------------------------------------------------------------------------
# a minimal HTTP/1.1 client on raw sockets


class Response:
    def __init__(self, status, headers, body, extra):
        self.status, self.headers, self.body, self.extra = status, headers, body, extra

    def json(self):
        return json.loads(self.body)


def read_all(s, deadline):
    data = b""
    while True:
        s.settimeout(max(0.05, deadline - time.time()))
        try:
            c = s.recv(65536)
        except socket.timeout:
            raise TimeoutError("no end of response in time")
        if not c:
            return data
        data += c


def dechunk(b):
    out, pos = b"", 0
    while True:
        eol = b.index(b"\r\n", pos)
        n = int(b[pos:eol].split(b";")[0], 16)
        pos = eol + 2
        if n == 0:
            end = b.index(b"\r\n\r\n", pos - 2) + 4
            return out, b[end:]
        out += b[pos:pos + n]
        if b[pos + n:pos + n + 2] != b"\r\n":
            raise ValueError("bad chunk framing")
        pos += n + 2


def parse_response(data):
    """One response from data read up to EOF; extra = bytes after it."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep or not head.startswith(b"HTTP/1.1 "):
        raise ValueError(f"not an HTTP response: {data[:80]!r}")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        headers[k.strip().lower()] = v.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body, extra = dechunk(rest)
    elif "content-length" in headers:
        n = int(headers["content-length"])
        if len(rest) < n:
            raise ValueError("body shorter than Content-Length")
        body, extra = rest[:n], rest[n:]
    else:
        body, extra = rest, b""
    return Response(status, headers, body, extra)


def request_bytes(port, method, path, body=None, headers=()):
    h = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{port}", "Connection: close"]
    h += list(headers)
    data = b""
    if body is not None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        h += ["Content-Type: application/json", f"Content-Length: {len(data)}"]
    return ("\r\n".join(h) + "\r\n\r\n").encode() + data


def roundtrip(port, method, path, body=None, headers=(), timeout=300):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        s.sendall(request_bytes(port, method, path, body, headers))
        return parse_response(read_all(s, time.time() + timeout))
    finally:
        s.close()


def sse(body):
    events = []
    for block in body.decode("utf-8").split("\n\n"):
        if not block:
            continue
        if not block.startswith("data: "):
            raise ValueError(f"not an SSE data event: {block[:60]!r}")
        events.append(block[6:])
    return events


def is_error_shape(r):
    try:
        d = r.json()
    except ValueError:
        return False
    e = d.get("error") if isinstance(d, dict) else None
    return (isinstance(e, dict) and set(d) == {"error"} and
            set(e) == {"message", "type", "param", "code"} and
            isinstance(e["message"], str) and e["message"])


# ---------------------------------------------------------------------------
# bookkeeping


class Tally:
    def __init__(self):
        self.mu = threading.Lock()
        self.counts = {}      # (client, outcome) -> n
        self.status = {}      # HTTP status received -> n
        self.bad = []         # samples of unexpected outcomes
        self.ids = set()
        self.dup_ids = 0
        self.gen_whole = 0    # generation requests answered whole
        self.gen_aborted = 0  # generation requests the client hung up on
        self.head_cuts = 0    # connections the server shut for a late head
        self.idle_racing = 0  # idle connections closed by us with no cut seen yet
        self.scrapes = 0      # GET /metrics by the soak itself

    def add(self, client, outcome, status=None, rid=None):
        with self.mu:
            self.counts[(client, outcome)] = self.counts.get((client, outcome), 0) + 1
            if status is not None:
                self.status[status] = self.status.get(status, 0) + 1
            if rid is not None:
                if rid in self.ids:
                    self.dup_ids += 1
                self.ids.add(rid)

    def fail(self, client, what):
        with self.mu:
            self.counts[(client, "bad")] = self.counts.get((client, "bad"), 0) + 1
            if len(self.bad) < 50:
                self.bad.append(f"{client}: {what}")

    def inc(self, field, n=1):
        with self.mu:
            setattr(self, field, getattr(self, field) + n)


# ---------------------------------------------------------------------------
# clients: each function sends one request and records its outcome


def c_normal(port, t, rng):
    if rng.random() < 0.2:
        path = "/v1/chat/completions"
        body = {"messages": [{"role": "user", "content": rng.choice(["Hi", "Name a color."])}],
                "max_tokens": 2}
    else:
        path = "/v1/completions"
        body = {"prompt": [rng.randrange(300, 2000) for _ in range(rng.randint(1, 3))],
                "max_tokens": rng.randint(1, 4), "temperature": rng.choice([0, 0.8])}
    r = roundtrip(port, "POST", path, body)
    d = r.json() if r.status == 200 else None
    if r.status != 200 or r.extra or not d["choices"] or d["usage"]["completion_tokens"] < 1:
        return t.fail("normal", f"status {r.status} extra {len(r.extra)} {r.body[:200]!r}")
    t.add("normal", "ok", 200, d["id"])
    t.inc("gen_whole")


def c_stream(port, t, rng):
    chat = rng.random() < 0.25
    if chat:
        path, body = "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}],
                                              "max_tokens": 2}
    else:
        path, body = "/v1/completions", {"prompt": [rng.randrange(300, 2000)],
                                         "max_tokens": rng.randint(2, 6)}
    body.update(stream=True, stream_options={"include_usage": True})
    r = roundtrip(port, "POST", path, body)
    if r.status != 200 or r.extra:
        return t.fail("stream", f"status {r.status} {r.body[:200]!r}")
    ev = sse(r.body)
    if ev[-1] != "[DONE]" or ev.count("[DONE]") != 1:
        return t.fail("stream", f"stream does not end with one [DONE]: {ev[-3:]}")
    chunks = [json.loads(e) for e in ev[:-1]]
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    ids = {c["id"] for c in chunks}
    if len(finals) != 1 or chunks[-1]["choices"] != [] or len(ids) != 1:
        return t.fail("stream", f"bad stream shape: {ev[-3:]}")
    t.add("stream", "ok", 200, ids.pop())
    t.inc("gen_whole")


def c_cancel(port, t, rng):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        s.sendall(request_bytes(port, "POST", "/v1/completions",
                                {"prompt": [rng.randrange(300, 2000)], "max_tokens": 200,
                                 "ignore_eos": True, "stream": True}))
        got = b""
        deadline = time.time() + 300
        while got.count(b"data: ") < 2:
            s.settimeout(max(0.05, deadline - time.time()))
            c = s.recv(4096)
            if not c:
                return t.fail("cancel", f"stream ended early: {got[:200]!r}")
            got += c
        if not got.startswith(b"HTTP/1.1 200"):
            return t.fail("cancel", f"{got[:100]!r}")
    finally:
        s.close()
    t.add("cancel", "hung_up", 200)
    t.inc("gen_aborted")


def c_gone(port, t, rng):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        s.sendall(request_bytes(port, "POST", "/v1/completions",
                                {"prompt": [rng.randrange(300, 2000)], "max_tokens": 200,
                                 "ignore_eos": True}))
        s.settimeout(rng.uniform(0.2, 1.0))
        try:
            c = s.recv(4096)
        except socket.timeout:
            c = None
        if c is not None:
            return t.fail("gone", f"an answer before the hang-up: {c[:100]!r}")
    finally:
        s.close()
    t.add("gone", "hung_up")
    t.inc("gen_aborted")


def c_slow(port, t, rng):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        if rng.random() < 0.5:
            # too slow: a byte every 0.5 s, never finished within the deadline
            head = request_bytes(port, "GET", "/health", headers=["X-Pad: " + "p" * 40])
            t0 = time.time()
            for b in head:
                try:
                    s.sendall(bytes([b]))
                except (BrokenPipeError, ConnectionResetError):
                    break
                s.settimeout(0.5)
                try:
                    c = s.recv(4096)
                    if c:
                        return t.fail("slow", f"answered a cut head: {c[:100]!r}")
                    break  # closed by the server
                except socket.timeout:
                    pass
                if time.time() - t0 > HEADER_TIMEOUT + 10:
                    return t.fail("slow", "head deadline not enforced")
            t.add("slow", "closed")
            t.inc("head_cuts")
        else:
            # slow but in time: three pieces over ~1.5 s
            req = request_bytes(port, "GET", "/health")
            for i in range(3):
                s.sendall(req[i * len(req) // 3:(i + 1) * len(req) // 3])
                time.sleep(0.5)
            r = parse_response(read_all(s, time.time() + 60))
            if r.status != 200 or r.json() != {"status": "ok"} or r.extra:
                return t.fail("slow", f"status {r.status} {r.body[:100]!r}")
            t.add("slow", "ok", 200)
    finally:
        s.close()


def c_big(port, t, rng):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    try:
        if rng.random() < 0.5:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (8 << 20))
        else:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                      b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
            piece = b"x" * 65536
            for _ in range(80):  # 5 MiB, over the 4 MiB limit
                s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
            s.sendall(b"0\r\n\r\n")
        r = parse_response(read_all(s, time.time() + 120))
    finally:
        s.close()
    if r.status != 413 or not is_error_shape(r) or r.extra:
        return t.fail("big", f"status {r.status} {r.body[:100]!r}")
    t.add("big", "refused", 413)


INVALID = [
    ("POST", "/v1/completions", b'{"prompt": "hi", ', 400),
    ("POST", "/v1/completions", b'{"prompt": "\xff\xfe", "max_tokens": 1}', 400),
    ("POST", "/v1/completions", b"[" * 100 + b"]" * 100, 400),
    ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": "3"}, 400),
    ("POST", "/v1/completions", {"prompt": "hi", "n": 0}, 400),  # (unknown fields are ignored now)
    ("POST", "/v1/chat/completions", {"messages": []}, 400),
    ("POST", "/v1/chat/completions", {"model": "gpt-4", "messages": [{"role": "user",
                                                                     "content": "x"}]}, 404),
    ("GET", "/v1/models/gpt-4", None, 404),
    ("GET", "/v1/completions", None, 405),
    ("DELETE", "/v1/chat/completions", None, 405),
    ("GET", "/v2/nothing", None, 404),
]


def c_invalid(port, t, rng):
    method, path, body, want = rng.choice(INVALID)
    r = roundtrip(port, method, path, body)
    if r.status != want or not is_error_shape(r) or r.extra:
        return t.fail("invalid", f"{method} {path}: status {r.status} {r.body[:100]!r}")
    t.add("invalid", "refused", want)


CLIENTS = {  # name: (function, threads, requests per minute at most)
    "normal": (c_normal, 2, 120),
    "stream": (c_stream, 2, 120),
    "cancel": (c_cancel, 1, 30),
    "gone": (c_gone, 1, 30),
    "slow": (c_slow, 1, 30),
    "big": (c_big, 1, 30),
    "invalid": (c_invalid, 1, 300),
}


def idle_holder(port, t, stop):
    """Keep IDLE_CONNS silent connections open; count the ones the head
    deadline closes, and reopen them."""
    socks = []
    try:
        while not stop.is_set():
            while len(socks) < IDLE_CONNS:
                socks.append(socket.create_connection(("127.0.0.1", port), timeout=30))
            time.sleep(0.2)
            alive = []
            for k in socks:
                k.setblocking(False)
                try:
                    c = k.recv(1)
                    if c == b"":
                        k.close()
                        t.inc("head_cuts")
                        continue
                    t.fail("idle", f"data on an idle connection: {c!r}")
                except BlockingIOError:
                    pass
                except ConnectionResetError:
                    k.close()
                    t.inc("head_cuts")
                    continue
                alive.append(k)
            socks = alive
    finally:
        # one the deadline cuts between this look and the close is counted
        # by the server only: the check allows for these
        for k in socks:
            try:
                c = k.recv(1)
                if c == b"":
                    t.inc("head_cuts")
                else:
                    t.inc("idle_racing")
            except BlockingIOError:
                t.inc("idle_racing")
            except ConnectionResetError:
                t.inc("head_cuts")
            k.close()


def client_loop(name, fn, port, t, stop, budget, seed):
    rng = random.Random(seed)
    n = 0
    while not stop.is_set() and n < budget[0]:
        with budget[1]:
            if budget[2] >= budget[0]:
                break
            budget[2] += 1
        n += 1
        try:
            fn(port, t, rng)
        except Exception as e:  # a timeout, a reset, a malformed answer
            t.fail(name, f"{type(e).__name__}: {e}")


def run_phase(port, t, seconds, seed, scale):
    stop = threading.Event()
    threads = []
    for k, (name, (fn, nthreads, per_min)) in enumerate(CLIENTS.items()):
        budget = [max(1, int(per_min * seconds / 60 * scale)), threading.Lock(), 0]
        for i in range(nthreads):
            th = threading.Thread(target=client_loop,
                                  args=(name, fn, port, t, stop, budget, seed * 1000 + k * 10 + i),
                                  daemon=True)
            threads.append(th)
    threads.append(threading.Thread(target=idle_holder, args=(port, t, stop), daemon=True))
    for th in threads:
        th.start()
    time.sleep(seconds)
    stop.set()
    for th in threads:
        th.join(600)
    return not any(th.is_alive() for th in threads)


# ---------------------------------------------------------------------------
# the server


def metrics(port):
    r = roundtrip(port, "GET", "/metrics")
    assert r.status == 200, r.status
    out = {}
    for line in r.body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def scrape(port, t):
    m = metrics(port)
    t.inc("scrapes")
    return m


def wait_idle(port, t, secs=120):
    """Until nothing runs and every connection but ours has closed."""
    t_end = time.time() + secs
    while True:
        m = scrape(port, t)
        if (m["anvil_requests_in_flight"] == 0 and m["anvil_kv_blocks_used"] == 0 and
                m["anvil_queue_depth"] == 0 and m["anvil_running_sequences"] == 0 and
                m["anvil_http_connections_open"] <= 1) or time.time() > t_end:
            return m
        time.sleep(0.25)


def commit():
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                              capture_output=True).stdout.strip()
    except OSError:
        return "unknown"


def soak(minutes, binary, model, seed=1, rss_tol=0.05, scale=1.0, log=print):
    total = minutes * 60
    warm = max(20.0, total / 10)
    main = max(10.0, total - warm)
    env = dict(os.environ)
    env["ASAN_OPTIONS"] = ("detect_leaks=1:abort_on_error=0:quarantine_size_mb=16:"
                           "allocator_release_to_os_interval_ms=1000")
    env["UBSAN_OPTIONS"] = "print_stacktrace=1:halt_on_error=1"
    err = tempfile.TemporaryFile()
    cmd = [binary, "serve", "-m", model, "--port", "0", "-t", "1", "--ctx", "512",
           "--parallel", "8", "--kv-mem", "64M", "--max-queue", "64",
           "--header-timeout", str(HEADER_TIMEOUT), "--timeout", "60"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, env=env)
    line = p.stdout.readline().decode()
    m = re.match(r"anvil serve: listening on http://127\.0\.0\.1:(\d+)(?: |$)", line.strip())
    if not m:
        p.kill()
        err.seek(0)
        raise RuntimeError(f"server did not start: {line!r} {err.read()[-2000:]!r}")
    port = int(m.group(1))
    t = Tally()
    result = {"commit": commit(), "date": datetime.datetime.now().isoformat(timespec="seconds"),
              "binary": os.path.relpath(binary, ROOT), "server_cmd": cmd[1:],
              "minutes": minutes, "warmup_s": warm, "main_s": main, "seed": seed,
              "idle_conns": IDLE_CONNS, "header_timeout_s": HEADER_TIMEOUT}
    try:
        m0 = scrape(port, t)
        log(f"soak: warm-up {warm:.0f} s on port {port}")
        ok1 = run_phase(port, t, warm, seed, scale)
        mw = wait_idle(port, t)
        time.sleep(2)  # the allocator's release interval
        rss_warm = rss_kb(p.pid)
        log(f"soak: after warm-up RSS {rss_warm} kB; main phase {main:.0f} s")
        ok2 = run_phase(port, t, main, seed + 1, scale)
        m1 = wait_idle(port, t)
        time.sleep(2)
        rss_end = rss_kb(p.pid)
        # the scrapes are 200s the server counted too
        m1 = scrape(port, t)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(600)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = p.wait()
        err.seek(0)
        stderr = err.read().decode(errors="replace")

    def delta(key):
        return int(m1.get(key, 0) - m0.get(key, 0))

    checks = {}
    checks["client threads finished"] = ok1 and ok2
    checks["no bad outcome"] = not t.bad and not any(o == "bad" for (_, o) in t.counts)
    checks["no response id seen twice"] = t.dup_ids == 0
    # responses by status: the clients' plus the scrapes (all but the last,
    # which the server counted after it built its own answer)
    want_status = dict(t.status)
    want_status[200] = want_status.get(200, 0) + t.scrapes - 1
    got_status = {c: delta(f'anvil_http_requests_total{{code="{c}"}}')
                  for c in (200, 400, 401, 404, 405, 413, 431, 500, 503)}
    got_status["other"] = delta('anvil_http_requests_total{code="other"}')
    checks["responses by status agree"] = all(
        got_status.get(c, 0) == want_status.get(c, 0) for c in set(got_status) | set(want_status))
    fin = {r: delta(f'anvil_requests_finished_total{{reason="{r}"}}')
           for r in ("length", "stop", "cancelled", "error")}
    checks["whole answers = finished length+stop"] = fin["length"] + fin["stop"] == t.gen_whole
    checks["hang-ups = finished cancelled"] = fin["cancelled"] == t.gen_aborted
    checks["no generation error"] = fin["error"] == 0
    cut = delta("anvil_http_connections_head_timeout_total")
    checks["late heads shut = clients that saw it"] = t.head_cuts <= cut <= t.head_cuts + t.idle_racing
    checks["KV blocks all free"] = (m1["anvil_kv_blocks_used"] == 0 and
                                    m1["anvil_kv_blocks_free"] == m1["anvil_kv_blocks_total"])
    checks["nothing queued, running or in flight"] = (
        m1["anvil_queue_depth"] == 0 and m1["anvil_running_sequences"] == 0 and
        m1["anvil_requests_in_flight"] == 0)
    checks[f"RSS within {rss_tol:.0%} of warm-up"] = rss_end <= rss_warm * (1 + rss_tol)
    checks["clean exit on SIGTERM"] = rc == 0
    checks["no sanitizer report"] = not any(s in stderr for s in SANITIZER_REPORTS)
    result.update({
        "requests": {f"{c}/{o}": n for (c, o), n in sorted(t.counts.items())},
        "requests_total": sum(n for (c, o), n in t.counts.items()),
        "client_status": {str(k): v for k, v in sorted(t.status.items())},
        "server_status": {str(k): v for k, v in got_status.items() if v},
        "finished": fin, "whole_answers": t.gen_whole, "hang_ups": t.gen_aborted,
        "head_timeouts_server": cut, "head_timeouts_clients": t.head_cuts,
        "idle_closed_at_phase_end": t.idle_racing,
        "connections_total": delta("anvil_http_connections_total"),
        "tokens_generated": delta("anvil_generation_tokens_total"),
        "preemptions": delta("anvil_preemptions_total"),
        "rss_kb": {"after_warmup": rss_warm, "end": rss_end,
                   "growth": round(rss_end / rss_warm - 1, 4) if rss_warm else None},
        "kv_blocks": {"used": m1["anvil_kv_blocks_used"], "total": m1["anvil_kv_blocks_total"]},
        "exit_status": rc, "bad_samples": t.bad,
        "sanitizer_output": [l for l in stderr.splitlines()
                             if any(s in l for s in SANITIZER_REPORTS)][:20],
        "checks": checks, "passed": all(checks.values()),
    })
    return result


def write_md(path, r):
    lines = [f"# Soak {r['date'][:10]}: {r['minutes']} min of hostile clients against "
             f"`{r['binary']} serve`", "",
             f"Commit {r['commit']}; `bench/soak.py --minutes {r['minutes']:g}`; server "
             f"`anvil-asan {' '.join(os.path.basename(c) for c in r['server_cmd'])}`.",
             f"Warm-up {r['warmup_s']:.0f} s, main phase {r['main_s']:.0f} s, "
             f"{r['idle_conns']} idle connections held throughout.", "",
             f"{r['requests_total']} requests on {r['connections_total']} connections, "
             f"{r['tokens_generated']} tokens generated.", "",
             "| client / outcome | requests |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in r["requests"].items()]
    lines += ["", f"RSS after warm-up {r['rss_kb']['after_warmup']} kB, at the end "
              f"{r['rss_kb']['end']} kB ({r['rss_kb']['growth']:+.2%}).", "",
              "| check | |", "|---|---|"]
    lines += [f"| {k} | {'pass' if v else 'FAIL'} |" for k, v in r["checks"].items()]
    if r["bad_samples"]:
        lines += ["", "Unexpected outcomes (samples):", ""] + [f"- {b}" for b in r["bad_samples"]]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin", "anvil-asan"))
    ap.add_argument("--model", default=os.environ.get("ANVIL_MODEL") or default_model())
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rss-tol", type=float, default=0.05,
                    help="RSS growth allowed after the warm-up (a fraction; default 0.05)")
    ap.add_argument("--out", help="directory for soak-<date>.json and .md")
    a = ap.parse_args()
    if not os.path.exists(a.bin):
        sys.exit(f"soak: {a.bin} not built (make asan)")
    r = soak(a.minutes, a.bin, a.model, a.seed, rss_tol=a.rss_tol,
             log=lambda s: print(s, file=sys.stderr))
    print(json.dumps(r, indent=1))
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        base = os.path.join(a.out, f"soak-{r['date'][:10]}")
        with open(base + ".json", "w") as f:
            json.dump(r, f, indent=1)
            f.write("\n")
        write_md(base + ".md", r)
    sys.exit(0 if r["passed"] else 1)


if __name__ == "__main__":
    main()
