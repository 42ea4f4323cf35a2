"""Replicas of `anvil serve` behind nginx, on loopback.

Each test starts its own replicas (one engine thread each, a small
context) and a private nginx: the configuration is deploy/nginx/anvil.conf
rendered by deploy/nginx/render.sh into a temporary prefix directory, with
its own pid file and logs; the system nginx service is not involved.

Covered: streaming passes through unbuffered and unchanged; affinity (the
same X-Session-Id always reaches the same replica, different ones spread);
a bounded mixed load during which one replica is killed (every request
completes or fails cleanly, nothing hangs, new requests go to the
survivor); a replica killed mid-stream (the client gets an error, not a
hang or a silently short answer); a draining replica (SIGTERM) gets no new
requests while its in-flight stream finishes; nginx's own errors in
OpenAI's shape; deploy/run-local.sh; the Kubernetes manifests (parsed
with PyYAML, cross-checked, and their `anvil serve` arguments run).

A missing nginx or haproxy is a failure (`make deps` installs them).
"""
import concurrent.futures as cf
import glob
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from serve_util import ROOT, Server, check_error, http_request, model_or_fail, serve_bin, wait_until

RENDER = os.path.join(ROOT, "deploy", "nginx", "render.sh")
TEMPLATE = os.path.join(ROOT, "deploy", "nginx", "anvil.conf")
K8S = os.path.join(ROOT, "deploy", "k8s")
REPLICA_ARGS = ("--ctx", "512", "--parallel", "8", "--kv-mem", "64M", "--drain-timeout", "30")


def program_or_fail(name):
    """The path of a Debian-packaged program the test needs (nginx,
    haproxy: installed by `make deps`); its absence fails the test."""
    path = shutil.which(name) or (os.path.exists(f"/usr/sbin/{name}") and f"/usr/sbin/{name}")
    if path:
        return path
    if shutil.which("apt-cache"):
        p = subprocess.run(["apt-cache", "policy", name], capture_output=True, text=True)
        if "Candidate:" in p.stdout and "Candidate: (none)" not in p.stdout:
            pytest.fail(f"{name} is installable but not installed: run `make deps`")
    pytest.fail(f"{name} is missing and apt has no candidate for it (install {name} on the PATH)")


def nginx_or_fail():
    return program_or_fail("nginx")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Cluster:
    """n replicas (r1..rn) behind a private nginx on a free port."""

    def __init__(self, n=2, extra=REPLICA_ARGS):
        self.nginx_bin = nginx_or_fail()
        self.replicas = []
        self.nginx = None
        self.prefix = tempfile.mkdtemp(prefix="anvil-nginx-")
        try:
            for i in range(n):
                self.replicas.append(Server(*extra, "--replica-id", f"r{i + 1}"))
            self.port = free_port()
            conf = subprocess.run([RENDER, "-p", self.prefix, f"127.0.0.1:{self.port}"] +
                                  [f"127.0.0.1:{r.port}" for r in self.replicas],
                                  capture_output=True, text=True, check=True).stdout
            self.conf = os.path.join(self.prefix, "nginx.conf")
            with open(self.conf, "w") as f:
                f.write(conf)
            base = [self.nginx_bin, "-p", self.prefix, "-c", self.conf,
                    "-e", os.path.join(self.prefix, "error.log")]
            t = subprocess.run(base + ["-t", "-q"], capture_output=True, text=True)
            assert t.returncode == 0, t.stderr
            self.nginx = subprocess.Popen(base + ["-g", "daemon off;"], stdout=subprocess.DEVNULL,
                                          stderr=subprocess.PIPE)
            wait_until(lambda: self._up(), secs=20, what="nginx to answer /health")
        except BaseException:
            self.close()
            raise

    def _up(self):
        if self.nginx.poll() is not None:
            pytest.fail("nginx exited: " + self.nginx.stderr.read().decode(errors="replace"))
        try:
            return http_request(self.port, "GET", "/health", timeout=5)[0] == 200
        except OSError:
            return False

    def replica(self, rid):
        return self.replicas[int(rid[1:]) - 1]

    def access_log(self):
        try:
            with open(os.path.join(self.prefix, "access.log")) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def close(self):
        if self.nginx and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGQUIT)
            try:
                self.nginx.wait(20)
            except subprocess.TimeoutExpired:
                self.nginx.kill()
                self.nginx.wait()
        for r in self.replicas:
            if r.p.poll() is None:
                r.stop()
            elif r.p.stdout:
                r.p.stdout.close()
        shutil.rmtree(self.prefix, ignore_errors=True)


@pytest.fixture
def cluster():
    c = Cluster()
    yield c
    c.close()


def via(c, method, path, body=None, key=None, timeout=60):
    h = {"X-Session-Id": key} if key else {}
    return http_request(c.port, method, path, body, headers=h, timeout=timeout)


def replica_of(c, key):
    st, h, _ = via(c, "POST", "/tokenize", {"content": "x"}, key=key)
    assert st == 200
    return h["x-anvil-replica"]


def keys_for(c, rid, n=1):
    """Session keys that hash to replica rid."""
    out = []
    for i in range(400):
        k = f"session-{i}"
        if replica_of(c, k) == rid:
            out.append(k)
            if len(out) == n:
                return out
    pytest.fail(f"no key hashes to {rid}")


class Stream:
    """A streaming POST through nginx, read line by line with http.client
    (which undoes the chunked framing)."""

    def __init__(self, port, path, body, key=None, timeout=60):
        self.c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        h = {"Content-Type": "application/json"}
        if key:
            h["X-Session-Id"] = key
        self.c.request("POST", path, body=json.dumps(body), headers=h)
        self.r = self.c.getresponse()
        self.status = self.r.status
        self.replica = self.r.getheader("X-Anvil-Replica")
        self.events = []
        self.error = None

    def next_event(self):
        """The next data payload, or None at the end (self.error set if cut)."""
        data = None
        try:
            while True:
                line = self.r.readline()
                if not line:
                    return data
                line = line.rstrip(b"\r\n")
                if line.startswith(b"data: "):
                    data = line[6:]
                elif line == b"" and data is not None:
                    self.events.append(data)
                    return data
        except (http.client.IncompleteRead, ConnectionError, http.client.HTTPException) as e:
            self.error = e
            return None

    def read_all(self):
        while self.next_event() is not None:
            pass
        self.c.close()
        return self

    @property
    def complete(self):
        return self.error is None and bool(self.events) and self.events[-1] == b"[DONE]"


# ---------------------------------------------------------------------------
# the configuration


def test_render_script_arguments():
    nginx = nginx_or_fail()
    for args in ([], ["127.0.0.1:1"], ["a", "127.0.0.1:2"], ["-p"], ["-p", "", "a:1", "b:2"]):
        p = subprocess.run([RENDER, *args], capture_output=True, text=True)
        assert p.returncode == 2, args
        assert p.stderr.startswith(("render.sh:", "usage:")), p.stderr
    # the http-context file as Debian would include it, for 3 replicas
    out = subprocess.run([RENDER, "127.0.0.1:9000", "127.0.0.1:9001", "127.0.0.1:9002",
                          "127.0.0.1:9003"], capture_output=True, text=True, check=True).stdout
    servers = re.findall(r"^\s*server (\S+) max_fails=1 fail_timeout=\d+s;  # anvil-replica$", out, re.M)
    assert servers == ["127.0.0.1:9001", "127.0.0.1:9002", "127.0.0.1:9003"], servers
    assert re.search(r"^\s*listen 127\.0\.0\.1:9000;  # anvil-listen$", out, re.M)
    with tempfile.TemporaryDirectory() as d:
        with open(os.path.join(d, "anvil.conf"), "w") as f:
            f.write(out.replace("/var/log/nginx/anvil-access.log", os.path.join(d, "a.log")))
        with open(os.path.join(d, "main.conf"), "w") as f:
            f.write(f"pid {d}/n.pid;\nevents {{}}\nhttp {{\ninclude {d}/anvil.conf;\n}}\n")
        p = subprocess.run([nginx, "-t", "-p", d, "-c", os.path.join(d, "main.conf"),
                            "-e", os.path.join(d, "e.log")], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr


def test_streaming_is_unbuffered_and_unchanged(cluster):
    # tokens arrive as they are made, not in one block at the end: the
    # first event comes through the proxy while its request still runs on
    # the replica (a buffering proxy would hold it until the last of the
    # 400 tokens). Judged by the replica's own gauge, not by a clock.
    long = {"prompt": "Count to twenty:", "max_tokens": 400, "ignore_eos": True,
            "stream": True, "temperature": 0}
    s = Stream(cluster.port, "/v1/completions", long)
    assert s.status == 200
    assert s.next_event() is not None, s.error
    m = cluster.replica(s.replica).metrics()
    assert m["anvil_requests_in_flight"] >= 1, m
    s.c.close()  # the client leaves: the replica cancels the rest
    body = dict(long, max_tokens=48)
    s = Stream(cluster.port, "/v1/completions", body).read_all()
    assert s.status == 200 and s.complete, s.error
    # the same bytes as straight from the replica that served it
    r = cluster.replica(s.replica)
    st, h, raw = http_request(r.port, "POST", "/v1/completions", body)
    direct = [m.group(1) for m in re.finditer(rb"data: (.*?)\n\n", raw)]
    strip = lambda e: re.sub(rb'"(id|created)":("[^"]*"|\d+),', b"", e)
    assert [strip(e) for e in s.events] == [strip(e) for e in direct]


def test_affinity_same_key_same_replica(cluster):
    seen = {}
    for i in range(24):
        k = f"conversation-{i}"
        got = {replica_of(cluster, k) for _ in range(3)}
        assert len(got) == 1, (k, got)
        seen[k] = got.pop()
    assert set(seen.values()) == {"r1", "r2"}, seen  # keys spread over both
    # a chat conversation stays put across turns (and across endpoints)
    k = "conversation-0"
    msgs = [{"role": "user", "content": "Hi"}]
    for _ in range(3):
        st, h, data = via(cluster, "POST", "/v1/chat/completions",
                          {"messages": msgs, "max_tokens": 4, "temperature": 0}, key=k)
        assert st == 200 and h["x-anvil-replica"] == seen[k]
        msgs += [json.loads(data)["choices"][0]["message"], {"role": "user", "content": "More"}]
    # no key: no affinity, requests spread
    got = {via(cluster, "POST", "/tokenize", {"content": "x"})[1]["x-anvil-replica"]
           for _ in range(30)}
    assert got == {"r1", "r2"}


# ---------------------------------------------------------------------------
# failures


def run_one(c, i, key):
    """One request of the mixed load: a dict describing what happened."""
    kind = ("chat_stream", "completion", "tokenize", "chat")[i % 4]
    out = {"i": i, "kind": kind, "t0": time.time(), "key": key}
    try:
        if kind == "chat_stream":
            s = Stream(c.port, "/v1/chat/completions",
                       {"messages": [{"role": "user", "content": f"Tell me fact {i}."}],
                        "max_tokens": 32, "stream": True, "temperature": 0}, key=key)
            out["replica"] = s.replica
            out["status"] = s.status
            s.read_all()
            out["outcome"] = "ok" if s.status == 200 and s.complete else \
                "cut" if s.status == 200 else "http_error"
            if s.status == 200 and s.complete:
                for e in s.events[:-1]:
                    json.loads(e)
        else:
            if kind == "completion":
                path, body = "/v1/completions", {"prompt": f"Item {i}:", "max_tokens": 16,
                                                 "temperature": 0}
            elif kind == "chat":
                path, body = "/v1/chat/completions", {
                    "messages": [{"role": "user", "content": f"Say {i}."}], "max_tokens": 12}
            else:
                path, body = "/tokenize", {"content": f"text number {i}"}
            st, h, data = via(c, "POST", path, body, key=key)
            out["status"], out["replica"] = st, h.get("x-anvil-replica")
            if st == 200:
                j = json.loads(data)
                assert j["tokens"] if kind == "tokenize" else j["choices"], j
                out["outcome"] = "ok"
            else:
                # the only error a client may see: a clean, retryable 503
                check_error(st, data, 503)
                out["outcome"] = "http_error"
    except Exception as e:  # a hang (timeout) or garbage: reported below
        out["outcome"] = f"exception: {e!r}"
    out["t1"] = time.time()
    return out


def test_mixed_load_with_a_replica_killed(cluster):
    n, deadline = 40, 150
    keys = [f"user-{k}" for k in range(10)]
    r2_keys = [k for k in keys if replica_of(cluster, k) == "r2"]
    assert r2_keys, "no session of the load maps to r2"
    kill = {}
    finished = []

    def killer():
        # kill r2 a third of the way through, while work is in flight on it
        r2 = "127.0.0.1:%d" % cluster.replica("r2").port
        wait_until(lambda: len(finished) >= n // 3 and r2 in cluster.access_log(), secs=120,
                   what="a third of the load")
        kill["t"] = time.time()
        cluster.replica("r2").kill()

    def one(i):
        r = run_one(cluster, i, keys[i % len(keys)])
        finished.append(i)
        return r

    t_start = time.time()
    kt = threading.Thread(target=killer)
    kt.start()
    with cf.ThreadPoolExecutor(6) as ex:
        futs = [ex.submit(one, i) for i in range(n)]
        done, pending = cf.wait(futs, timeout=deadline)
    kill.setdefault("t", time.time())
    kt.join(60)
    assert not pending, f"{len(pending)} requests hung past {deadline} s"
    res = sorted((f.result() for f in done), key=lambda r: r["i"])
    assert time.time() - t_start < deadline
    bad = [r for r in res if r["outcome"].startswith("exception")]
    assert not bad, bad
    for r in res:
        if r["outcome"] == "http_error":
            assert r["status"] == 503, r  # clean: OpenAI's JSON, retryable
        if r["outcome"] == "cut":  # only a stream r2 was serving when it died
            assert r["kind"] == "chat_stream" and r["replica"] == "r2", r
            assert r["t0"] < kill["t"] < r["t1"] + 1, r
        if r["kind"] != "chat_stream":
            # nginx retried anything that had not started answering
            assert r["outcome"] == "ok", r
    after = [r for r in res if r["t0"] > kill["t"] + 0.2]
    assert after, "the kill came after the whole load"
    for r in after:
        assert r["outcome"] == "ok" and r["replica"] == "r1", r
    assert any(r["replica"] == "r2" for r in res), "r2 served nothing before it died"
    # the survivor still serves everything, r2's sessions included
    for k in r2_keys:
        st, h, _ = via(cluster, "POST", "/tokenize", {"content": "x"}, key=k)
        assert st == 200 and h["x-anvil-replica"] == "r1"


def test_replica_killed_mid_stream_is_an_error_for_the_client(cluster):
    import openai
    key = keys_for(cluster, "r2")[0]
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{cluster.port}/v1", api_key="x",
                           max_retries=0, timeout=30, default_headers={"X-Session-Id": key})
    stream = client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", stream=True, max_tokens=400, temperature=0,
        messages=[{"role": "user", "content": "Write a long story about the sea."}])
    n = 0
    killed = False
    with pytest.raises(Exception) as exc:
        for chunk in stream:
            n += 1
            if n == 5:
                killed = True
                cluster.replica("r2").kill()
    assert killed, "the stream ended before the kill"
    # an error for the cut stream, not the client's timeout (a hang)
    assert not isinstance(exc.value, (AssertionError, openai.APITimeoutError)), exc.value
    assert n < 400
    # the same conversation continues on the survivor
    r = client.chat.completions.with_raw_response.create(
        model="SmolLM2-135M-Instruct.Q4_1", max_tokens=4,
        messages=[{"role": "user", "content": "Hi"}])
    assert r.headers["x-anvil-replica"] == "r1"


def test_draining_replica_gets_no_new_requests(cluster):
    key = keys_for(cluster, "r2")[0]
    s = Stream(cluster.port, "/v1/completions",
               {"prompt": "Count:", "max_tokens": 120, "ignore_eos": True, "stream": True,
                "temperature": 0}, key=key)
    assert s.replica == "r2"
    for _ in range(3):
        assert s.next_event() is not None
    r2 = cluster.replica("r2")
    r2.p.send_signal(signal.SIGTERM)
    wait_until(lambda: http_request(r2.port, "GET", "/health")[0] == 503, secs=20,
               what="r2 draining")
    # r2's sessions now land on r1: the first is answered 503 by r2 and
    # retried by nginx, the rest skip r2 (max_fails)
    for i in range(6):
        st, h, data = via(cluster, "POST", "/v1/chat/completions",
                          {"messages": [{"role": "user", "content": f"Hi {i}"}], "max_tokens": 3},
                          key=key)
        assert st == 200 and h["x-anvil-replica"] == "r1", (st, h, data[:200])
        st, h, _ = via(cluster, "POST", "/tokenize", {"content": "x"}, key=key)
        assert st == 200 and h["x-anvil-replica"] == "r1"
    assert re.search(r"upstream_status=503, 200", cluster.access_log()), \
        "no request was retried after a 503"
    # the in-flight stream on the draining replica finishes whole
    s.read_all()
    assert s.complete, s.error
    assert json.loads(s.events[-2])["choices"][0]["finish_reason"] == "length"
    assert r2.p.wait(30) == 0, r2.stderr()
    # the balancer itself stays healthy
    assert via(cluster, "GET", "/health")[0] == 200


def test_no_replica_left_is_a_json_503(cluster):
    for r in cluster.replicas:
        r.kill()
    st, h, data = via(cluster, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 2})
    check_error(st, data, 503, code="no_replica")
    assert h["retry-after"] == "1" and h["content-type"] == "application/json"
    st, _, data = via(cluster, "GET", "/health")
    check_error(st, data, 503, code="no_replica")


def test_body_over_the_limit_is_a_json_413(cluster):
    st, h, data = via(cluster, "POST", "/v1/completions",
                      {"prompt": "x" * (5 << 20), "max_tokens": 1})
    check_error(st, data, 413, code="request_too_large")


# ---------------------------------------------------------------------------
# deploy/run-local.sh


def test_run_local_script():
    nginx_or_fail()
    port = free_port()
    p = subprocess.Popen([os.path.join(ROOT, "deploy", "run-local.sh"), "-p", str(port), "-n", "2",
                          "-m", model_or_fail(), "--", "--ctx", "256", "--kv-mem", "32M"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        t_end = time.time() + 120
        while time.time() < t_end:
            line = p.stdout.readline()
            assert line, "run-local.sh exited:\n" + "".join(lines)
            lines.append(line)
            if "Ctrl-C stops everything" in line:
                break
        work = re.search(r"logs:\s+(\S+)", "".join(lines)).group(1)
        got = set()
        for i in range(12):
            st, h, _ = http_request(port, "POST", "/tokenize", {"content": "x"},
                                    headers={"X-Session-Id": f"k{i}"})
            assert st == 200
            got.add(h["x-anvil-replica"])
        assert got == {"r1", "r2"}
        st, h, data = http_request(port, "GET", "/")
        assert st == 200 and b"<title>anvil</title>" in data
    finally:
        p.send_signal(signal.SIGTERM)
        out, _ = p.communicate(timeout=60)
    assert p.returncode == 0, out
    assert "stopped" in out
    for i in (1, 2):
        log = open(os.path.join(work, f"replica-{i}.log")).read()
        assert "draining" in log and "stopped" in log, log
    shutil.rmtree(work, ignore_errors=True)
    with pytest.raises(OSError):
        http_request(port, "GET", "/health", timeout=2)


def test_run_local_bad_arguments():
    for args in (["-n", "0"], ["-n", "x"], ["-p"], ["--bogus"], ["-m", "/nonexistent.gguf"]):
        p = subprocess.run([os.path.join(ROOT, "deploy", "run-local.sh"), *args],
                           capture_output=True, text=True, timeout=30)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert p.stderr.startswith("run-local.sh: "), p.stderr


# ---------------------------------------------------------------------------
# Kubernetes manifests (no cluster here: parsed and cross-checked)


def k8s_docs():
    import yaml
    docs = {}
    files = sorted(glob.glob(os.path.join(K8S, "*.yaml")))
    assert files
    for f in files:
        with open(f) as fh:
            for d in yaml.safe_load_all(fh):
                assert d and "kind" in d and "apiVersion" in d, f
                assert d["kind"] not in docs, f"two {d['kind']}s"
                docs[d["kind"]] = d
    return docs


def arg_value(args, flag):
    assert flag in args, (flag, args)
    return args[args.index(flag) + 1]


def test_k8s_manifests_are_consistent():
    docs = k8s_docs()
    assert set(docs) == {"Deployment", "Service", "Ingress", "PodDisruptionBudget"}
    dep, svc, ing, pdb = (docs[k] for k in ("Deployment", "Service", "Ingress",
                                            "PodDisruptionBudget"))
    assert dep["apiVersion"] == "apps/v1" and dep["spec"]["replicas"] >= 2
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert dep["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert svc["spec"]["selector"].items() <= labels.items()
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    args = [str(a) for a in c["args"]]
    assert args[0] == "serve"
    port = int(arg_value(args, "--port"))
    assert arg_value(args, "--host") == "0.0.0.0"
    drain = int(arg_value(args, "--drain-timeout"))
    threads = int(arg_value(args, "-t"))
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["http"] == port
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        g = c[probe]["httpGet"]
        assert g["path"] == "/health" and ports.get(g["port"], g["port"]) == port, probe
    # readiness reacts within seconds of a drain; liveness is slower
    r = c["readinessProbe"]
    assert r["periodSeconds"] * r.get("failureThreshold", 3) <= 5
    # preStop sleeps, then SIGTERM drains: the grace period covers both
    cmd = c["lifecycle"]["preStop"]["exec"]["command"]
    assert cmd[0] == "sleep"
    pre = int(cmd[1])
    assert pod["terminationGracePeriodSeconds"] >= pre + drain + 1
    assert float(c["resources"]["requests"]["cpu"]) >= threads
    assert dep["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    # the Service and the Ingress point at the container port
    (sp,) = svc["spec"]["ports"]
    assert sp["targetPort"] == "http"
    backend = ing["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend["name"] == svc["metadata"]["name"]
    assert backend["port"]["name"] == sp["name"]
    # the ingress hashes on the same header as deploy/nginx/anvil.conf
    ann = ing["metadata"]["annotations"]
    with open(TEMPLATE) as f:
        conf = f.read()
    header = re.search(r"map \$http_(\w+) \$anvil_affinity", conf).group(1)
    assert ann["nginx.ingress.kubernetes.io/upstream-hash-by"] == "$http_" + header
    assert ann["nginx.ingress.kubernetes.io/proxy-buffering"] == "off"
    assert "http_503" in ann["nginx.ingress.kubernetes.io/proxy-next-upstream"]


def test_k8s_container_args_run():
    # the Deployment's arguments, on loopback with a free port and the
    # local model: anvil accepts every one of them and serves
    docs = k8s_docs()
    (c,) = docs["Deployment"]["spec"]["template"]["spec"]["containers"]
    args = [str(a) for a in c["args"]][1:]
    args[args.index("-m") + 1] = model_or_fail()
    args[args.index("--host") + 1] = "127.0.0.1"
    args[args.index("--port") + 1] = "0"
    args[args.index("--replica-id") + 1] = "anvil-7d9c-x2"  # $(POD_NAME)
    args[args.index("-t") + 1] = "1"
    s = Server(*args, "--ctx", "256", "--kv-mem", "32M")
    try:
        st, h, data = s.request("GET", "/health")
        assert st == 200 and h["x-anvil-replica"] == "anvil-7d9c-x2"
        p = json.loads(s.request("GET", "/props")[2])
        assert p["parallel"] == int(arg_value(args, "--parallel"))
    finally:
        assert s.stop() == 0, s.stderr()


# ---------------------------------------------------------------------------
# HAProxy (deploy/haproxy/anvil.cfg): the active health checks nginx lacks

HAPROXY_CFG = os.path.join(ROOT, "deploy", "haproxy", "anvil.cfg")


def haproxy_or_fail():
    return program_or_fail("haproxy")


def render_haproxy(listen, replicas, sock=None):
    """The template with its marked lines replaced (as render.sh does for nginx)."""
    out, done = [], False
    with open(HAPROXY_CFG) as f:
        for line in f:
            if line.rstrip().endswith("# anvil-listen"):
                line = re.sub(r"bind \S+", f"bind {listen}", line)
            elif line.rstrip().endswith("# anvil-replica"):
                if done:
                    continue
                done = True
                line = "".join(f"    server r{i + 1} {addr} check  # anvil-replica\n"
                               for i, addr in enumerate(replicas))
            elif sock and line.startswith("global"):
                line += f"    stats socket {sock} level operator\n"
            out.append(line)
    return "".join(out)


def haproxy_state(sock):
    """{server name: operational state} from the admin socket (2 = up)."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(sock)
    s.sendall(b"show servers state anvil_replicas\n")
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    state = {}
    for line in data.decode().splitlines():
        f = line.split()
        if len(f) > 5 and f[1] == "anvil_replicas":
            state[f[3]] = int(f[5])  # srv_name, srv_op_state
    return state


def test_haproxy_config_is_valid():
    h = haproxy_or_fail()
    p = subprocess.run([h, "-c", "-f", HAPROXY_CFG], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "h.cfg")
        with open(path, "w") as f:
            f.write(render_haproxy("127.0.0.1:9000", ["127.0.0.1:9001", "127.0.0.1:9002",
                                                      "127.0.0.1:9003"]))
        p = subprocess.run([h, "-c", "-f", path], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout + p.stderr
        assert open(path).read().count("# anvil-replica") == 3 + 1  # + the header comment


def test_haproxy_active_check_takes_a_draining_replica_out():
    h = haproxy_or_fail()
    # a stream long enough (1000 tokens, seconds even on a fast machine)
    # to outlive the check interval, so the replica is still up and
    # serving when the check takes it out
    reps = [Server("--ctx", "1100", "--parallel", "4", "--kv-mem", "64M", "--drain-timeout", "300",
                   "--replica-id", f"r{i + 1}") for i in range(2)]
    d = tempfile.mkdtemp(prefix="anvil-haproxy-")
    sock = os.path.join(d, "admin.sock")
    port = free_port()
    cfg = os.path.join(d, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write(render_haproxy(f"127.0.0.1:{port}", [f"127.0.0.1:{r.port}" for r in reps], sock))
    hp = subprocess.Popen([h, "-db", "-f", cfg], stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE)
    try:
        wait_until(lambda: os.path.exists(sock) and haproxy_state(sock) == {"r1": 2, "r2": 2},
                   secs=20, what="haproxy with both replicas up")
        # affinity: a key sticks; keys spread
        seen = {}
        for i in range(16):
            got = {http_request(port, "POST", "/tokenize", {"content": "x"},
                                headers={"X-Session-Id": f"s{i}"})[1]["x-anvil-replica"]
                   for _ in range(3)}
            assert len(got) == 1
            seen[f"s{i}"] = got.pop()
        assert set(seen.values()) == {"r1", "r2"}
        key = next(k for k, v in seen.items() if v == "r2")
        s = Stream(port, "/v1/completions", {"prompt": "Count:", "max_tokens": 1000,
                                             "ignore_eos": True, "stream": True,
                                             "temperature": 0}, key=key)
        assert s.status == 200 and s.replica == "r2"
        for _ in range(3):
            assert s.next_event() is not None
        reps[1].p.send_signal(signal.SIGTERM)
        # with no request sent, the checks alone take r2 out: its socket
        # still accepts (a TCP check would pass), its /health says 503
        wait_until(lambda: haproxy_state(sock).get("r2") == 0, secs=30,
                   what="the health check to mark the draining replica down")
        assert reps[1].p.poll() is None, "r2 exited: the check could not be told from a TCP one"
        assert haproxy_state(sock)["r1"] == 2
        for i in range(6):
            st, hd, _ = http_request(port, "POST", "/v1/completions",
                                     {"prompt": f"Hi {i}", "max_tokens": 2},
                                     headers={"X-Session-Id": key})
            assert st == 200 and hd["x-anvil-replica"] == "r1"
        # r2's in-flight stream was not cut by the check
        s.read_all()
        assert s.complete, s.error
        assert reps[1].p.wait(30) == 0, reps[1].stderr()
    finally:
        hp.terminate()
        try:
            hp.wait(20)
        except subprocess.TimeoutExpired:
            hp.kill()
            hp.wait()
        for r in reps:
            if r.p.poll() is None:
                r.stop()
            elif r.p.stdout:
                r.p.stdout.close()
        shutil.rmtree(d, ignore_errors=True)
