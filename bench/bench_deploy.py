#!/usr/bin/env python3
"""bench_deploy.py - the serving scenarios over HTTP through nginx, with
one and with two replicas, against one replica with all the threads.

Configurations, run one after the other for each scenario (same run, so
they share the machine's state):

  direct_1x2   one replica, 2 threads, clients talk to it directly
  nginx_1x2    the same replica behind nginx (the proxy's own cost)
  nginx_1x1    one replica, 1 thread, behind nginx
  nginx_2x1    two replicas, 1 thread each, behind nginx (the scaling)

nginx runs with deploy/nginx/anvil.conf rendered by deploy/nginx/render.sh
into a private prefix (never the system service). Clients send no
X-Session-Id, so nginx spreads requests by a random key; the split is
recorded per row.

Workloads: the scenarios of /work/shared/SCENARIOS.md (prompts cut from
the same filler text as `anvil bench --scenario`, sent as token ids;
greedy; EOS ignored; every request submitted at t = 0, one streaming
client each). TTFT and ITL are measured by the client. Total tok/s =
(prompt + generated tokens) / wall.

The machine is small and may be shared: each row records the 1-minute
load average before and after it. Results go to --out (one JSON object
per line) and a Markdown table to stdout.

Usage:
  bench/bench_deploy.py [--scenarios balanced_b32,decode_heavy_b32|all]
                        [--configs direct_1x2,nginx_1x2,nginx_1x1,nginx_2x1]
                        [--out bench/results/deploy-DATE.json]
Never run by `make test`.
"""
import argparse
import concurrent.futures as cf
import datetime
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from repo import default_model

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_serve import SCENARIOS, commit, filler_ids, percentile, stream_one  # noqa: E402

# name: (requests, prompt lengths (cycled), new tokens)
# (replicas, threads each, through nginx)
CONFIGS = {
    "direct_1x2": (1, 2, False),
    "nginx_1x2": (1, 2, True),
    "nginx_1x1": (1, 1, True),
    "nginx_2x1": (2, 1, True),
}
KV_BYTES_PER_TOKEN = 30 * 2 * 3 * 64 * 2  # SmolLM2-135M, F16 cache: layers, K+V, kv heads, head_dim


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Replica:
    def __init__(self, anvil, model, threads, n_ctx, parallel, kv_mb, rid):
        cmd = [anvil, "serve", "-m", model, "--port", "0", "-t", str(threads), "--ctx",
               str(n_ctx), "--parallel", str(parallel), "--max-queue", "4096",
               "--kv-mem", f"{kv_mb}M", "--replica-id", rid]
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.p.stdout.readline().decode()
        m = re.search(r"listening on http://[^ ]*:(\d+)", line)
        if not m:
            self.p.kill()
            sys.exit(f"bench_deploy: replica did not start: {line!r}")
        self.port = int(m.group(1))

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(120)


class Nginx:
    def __init__(self, replicas):
        self.prefix = tempfile.mkdtemp(prefix="anvil-bench-nginx-")
        self.port = free_port()
        conf = subprocess.run([os.path.join(ROOT, "deploy", "nginx", "render.sh"), "-p",
                               self.prefix, f"127.0.0.1:{self.port}"] +
                              [f"127.0.0.1:{r.port}" for r in replicas],
                              capture_output=True, text=True, check=True).stdout
        path = os.path.join(self.prefix, "nginx.conf")
        with open(path, "w") as f:
            f.write(conf)
        self.p = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-p", self.prefix,
                                   "-c", path, "-e", os.path.join(self.prefix, "error.log"),
                                   "-g", "daemon off;"], stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        sys.exit("bench_deploy: nginx did not start")

    def stop(self):
        self.p.send_signal(signal.SIGQUIT)
        self.p.wait(60)
        shutil.rmtree(self.prefix, ignore_errors=True)


def run(anvil, model, ftok, scen, cfg):
    n_req, lens, n_gen = SCENARIOS[scen]
    n_rep, threads, proxied = CONFIGS[cfg]
    prompts = [[ftok[(i * 37 + k) % len(ftok)] for k in range(lens[i % len(lens)])]
               for i in range(n_req)]
    n_ctx = max(lens) + n_gen + 8
    kv_tokens = sum(len(p) + n_gen for p in prompts)
    kv_mb = max(64, int(kv_tokens * KV_BYTES_PER_TOKEN * 1.25 / 2**20) + 16)
    reps = [Replica(anvil, model, threads, n_ctx, n_req, kv_mb, f"r{i + 1}") for i in range(n_rep)]
    ngx = None
    try:
        if proxied:
            ngx = Nginx(reps)
        port = ngx.port if ngx else reps[0].port
        for r in reps:  # warm each replica directly
            stream_one(r.port, prompts[0][:16], 4)
        load0 = os.getloadavg()[0]
        t0 = time.perf_counter()
        with cf.ThreadPoolExecutor(n_req) as ex:
            res = list(ex.map(lambda p: stream_one(port, p, n_gen), prompts))
        wall = time.perf_counter() - t0
        load1 = os.getloadavg()[0]
    finally:
        if ngx:
            ngx.stop()
        for r in reps:
            r.stop()
    ttft = [x[0] * 1e3 for x in res]
    itl = [g * 1e3 for x in res for g in x[1]]
    n_in = sum(len(p) for p in prompts)
    n_out = sum(x[2] for x in res)
    split = {}
    for x in res:
        split[x[3]] = split.get(x[3], 0) + 1
    return {
        "scenario": scen, "config": cfg, "replicas": n_rep, "threads_each": threads,
        "nginx": proxied, "model": os.path.basename(model), "commit": commit(),
        "requests": n_req, "wall_s": wall, "total_tok_s": (n_in + n_out) / wall,
        "prefill_tok_s": n_in / wall, "decode_tok_s": n_out / wall,
        "ttft_p50_ms": percentile(ttft, 0.5), "ttft_p99_ms": percentile(ttft, 0.99),
        "itl_p50_ms": percentile(itl, 0.5), "itl_p99_ms": percentile(itl, 0.99),
        "out_tokens": n_out, "expected_out_tokens": n_req * n_gen, "split": split,
        "loadavg_before": load0, "loadavg_after": load1, "nproc": os.cpu_count(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=default_model())
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin", "anvil"))
    ap.add_argument("--scenarios", default="balanced_b32,decode_heavy_b32,mixed_prefill_b32,"
                                           "large_batch_short_b128,single_stream")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--out", default=os.path.join(
        ROOT, "bench", "results", f"deploy-{datetime.date.today().isoformat()}.json"))
    a = ap.parse_args()
    scens = list(SCENARIOS) if a.scenarios == "all" else a.scenarios.split(",")
    cfgs = a.configs.split(",")
    for s in scens:
        if s not in SCENARIOS:
            ap.error(f"unknown scenario {s!r} (one of {', '.join(SCENARIOS)} or all)")
    for c in cfgs:
        if c not in CONFIGS:
            ap.error(f"unknown config {c!r} (one of {', '.join(CONFIGS)})")
    if any(CONFIGS[c][2] for c in cfgs) and not (shutil.which("nginx") or
                                                  os.path.exists("/usr/sbin/nginx")):
        sys.exit("bench_deploy: nginx is missing (make deps)")
    ftok = filler_ids(a.bin, a.model)
    rows = []
    print("| scenario | config | total tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | split | load |")
    print("|---|---|---|---|---|---|---|")
    with open(a.out, "w") as f:
        for s in scens:
            for c in cfgs:
                r = run(a.bin, a.model, ftok, s, c)
                rows.append(r)
                f.write(json.dumps(r) + "\n")
                f.flush()
                split = "/".join(str(r["split"].get(f"r{i + 1}", 0)) for i in range(r["replicas"]))
                print(f"| {s} | {c} | {r['total_tok_s']:.0f} | {r['ttft_p50_ms']:.0f} / "
                      f"{r['ttft_p99_ms']:.0f} | {r['itl_p50_ms']:.1f} / {r['itl_p99_ms']:.1f} | "
                      f"{split} | {r['loadavg_before']:.1f}-{r['loadavg_after']:.1f} |", flush=True)
                if r["out_tokens"] != r["expected_out_tokens"]:
                    print(f"bench_deploy: warning: {r['out_tokens']} tokens generated, expected "
                          f"{r['expected_out_tokens']}", file=sys.stderr)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
