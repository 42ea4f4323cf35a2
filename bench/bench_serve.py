#!/usr/bin/env python3
"""bench_serve.py - drive `anvil serve` over loopback with concurrent
streaming clients and report throughput, TTFT and inter-token latency.

Workload: the balanced_b32 shape of /work/shared/SCENARIOS.md - 32
requests, 256 prompt tokens each, 128 new tokens each, greedy, EOS
ignored - with prompts built exactly as `anvil bench --scenario` builds
them (the same filler text tokenized with the model's tokenizer, request i
taking tokens (i*37 + k) mod n of it), sent as token ids so that HTTP and
in-process runs do the same work. Clients are closed-loop: C client
threads share the request list, each sending its next request when the
previous one ends; C = 32 submits everything at t = 0, like the
in-process scenario.

Per request, TTFT is the time from sending the request to the first
chunk that carries text; ITL is the gap between consecutive text chunks.
Both are measured by the client, so they include HTTP and SSE overhead.

Output: a table on stdout and one JSON object per client count (SCENARIOS
keys plus `clients` and `req_s`; the run with as many clients as requests
also carries the in-process numbers of `anvil bench --scenario
balanced_b32`, run just before it, and the HTTP/in-process throughput
ratio) written to --out.

--scenario NAME|all runs the shapes of SCENARIOS.md instead (requests,
prompt lengths, new tokens; as many clients as requests); --default-flags
starts `anvil serve` with no sizing flags at all (only -m, -t, --port), as a
user would: the inter-token latency a streaming client sees under the
defaults, with its maximum (itl_max_ms) next to the percentiles. --idle N
holds N idle connections open to the server during each run (the
latency of clients served next to a crowd of idle sockets; recorded as
idle_conns).

--server anvil|llama|both runs the same workload against llama.cpp's
llama-server on the same GGUF (--llama-server PATH; default the native
build of ~/.cache/anvil/llama.cpp-*/bin) with the same client: the same
token-id prompts, greedy, max_tokens fixed and ignore_eos (both servers
accept the field), so that both decode the same count even on a
random-weight model. llama-server gets -t THREADS, one slot per client
(-np) and that many times the per-request context (-c); its prompt cache
is left on, as anvil's prefix cache is. Records carry `server`; with both,
the anvil record of each client count also carries its throughput over
llama-server's (`vs_llama_server`). Per request the records give TTFT and
the client's tokens/s (completion tokens over the request's wall time:
client_tok_s_*; clients == requests makes a request a client), and the
aggregate tokens/s (decode_tok_s). A progress line on stderr counts the
finished requests.

Usage:
  bench/bench_serve.py [-m MODEL] [-t THREADS] [--clients 1,8,32]
                       [--requests 32] [--prompt 256] [--gen 128]
                       [--scenario NAME|all] [--default-flags] [--idle N]
                       [--server anvil|llama|both] [--llama-server PATH]
                       [--out bench_serve.json] [--no-compare]
Never run by `make test`.
"""
import argparse
import concurrent.futures as cf
import glob
import http.client
import json
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import threading
import time

from repo import default_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# bench/bench_model.c FILLER, verbatim: the same prompts as in-process
FILLER = (
    "The history of computing is a story of people who wanted to think faster than their "
    "hands could write. Early mechanical calculators added and multiplied numbers with gears, "
    "and the difference engine promised tables without human error. Electronic machines "
    "replaced relays with vacuum tubes, then transistors, then integrated circuits that put "
    "millions of switches on a sliver of silicon. Programmers moved from wiring panels to "
    "assembly language, from assembly to compiled languages, and from single machines to "
    "networks that span the planet. Each step made computation cheaper and more abundant, "
    "and each step changed what people expected a computer to do. Today a phone holds more "
    "memory than the mainframes of the past, and a language model can draft a letter, "
    "summarise a report or explain a proof. Yet the principles remain: data must be stored, "
    "moved and transformed, and the speed of the whole is set by its slowest part. ")


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    i = q * (len(xs) - 1)
    lo = int(i)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (i - lo)


def filler_ids(anvil, model):
    p = subprocess.run([anvil, "tokenize", "-m", model, "-p", FILLER, "--no-special", "--no-bos",
                        "--ids-only"], capture_output=True, text=True, check=True)
    return [int(x) for x in p.stdout.split()]


def commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True).stdout.strip()
    except OSError:
        return ""


# SCENARIOS.md: requests, prompt tokens (repeating), new tokens
SCENARIOS = {
    "decode_heavy_b32": (32, [64], 256),
    "large_batch_short_b128": (128, [48], 64),
    "balanced_b32": (32, [256], 128),
    "prefill_heavy_b16": (16, [1024], 16),
    "long_prefill_b4": (4, [2048], 8),
    "mixed_prefill_b32": (32, [32, 64, 96, 128, 192, 256, 384, 512], 64),
    "long_decode_b32": (32, [512], 1024),
    "single_stream": (1, [512], 128),
}


def default_llama_server():
    hits = sorted(glob.glob(os.path.expanduser("~/.cache/anvil/llama.cpp-*/bin/llama-server")))
    return hits[-1] if hits else "llama-server"


class Proc:
    """A server process: its peak RSS and its end."""
    def peak_rss_mb(self):
        try:
            with open(f"/proc/{self.p.pid}/status") as f:
                for l in f:
                    if l.startswith("VmHWM:"):
                        return int(l.split()[1]) / 1024.0
        except OSError:
            pass
        return float("nan")

    def stop(self):
        self.p.terminate()
        self.p.wait(120)


class LlamaServer(Proc):
    """llama.cpp's llama-server on the same file: `threads` threads,
    `parallel` slots of n_ctx tokens each (its -c is the total)."""
    kind = "llama-server"

    def __init__(self, binary, model, threads, n_ctx, parallel):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(self.port),
               "-t", str(threads), "-tb", str(threads), "-np", str(parallel),
               "-c", str((n_ctx or 4096) * parallel), "--no-warmup"]
        self.p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        t0 = time.time()
        while True:  # /health answers 503 while the model loads
            if self.p.poll() is not None:
                sys.exit(f"bench_serve: llama-server exited ({self.p.returncode}): {' '.join(cmd)}")
            try:
                c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
                c.request("GET", "/health")
                ok = c.getresponse().status == 200
                c.close()
                if ok:
                    break
            except OSError:
                pass
            if time.time() - t0 > 600:
                self.p.kill()
                sys.exit("bench_serve: llama-server did not become healthy in 600 s")
            time.sleep(0.25)

    def metrics(self):
        raise KeyError("kv blocks")  # anvil's gauge; llama-server has no such block count


class Server(Proc):
    kind = "anvil"
    def __init__(self, anvil, model, threads, n_ctx, parallel):
        cmd = [anvil, "serve", "-m", model, "--port", "0", "-t", str(threads)]
        if n_ctx:  # None: the server's defaults, as a user starts it
            cmd += ["--ctx", str(n_ctx), "--parallel", str(parallel), "--max-queue", "4096"]
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.p.stdout.readline().decode()
        m = re.search(r"listening on http://[^ ]*:(\d+)", line)
        if not m:
            self.p.kill()
            sys.exit(f"bench_serve: server did not start: {line!r}")
        self.port = int(m.group(1))

    def metrics(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("GET", "/metrics")
        text = c.getresponse().read().decode()
        c.close()
        out = {}
        for l in text.splitlines():
            if l and not l.startswith("#"):
                k, v = l.rsplit(" ", 1)
                out[k] = float(v)
        return out


def stream_one(port, prompt, n_gen):
    """One streaming request; returns (ttft_s, [itl_s], n_tokens, replica,
    wall_s): replica is the X-Anvil-Replica header (None without
    --replica-id), wall_s the request's time from sending to the end of
    the stream."""
    body = json.dumps({"prompt": prompt, "max_tokens": n_gen, "temperature": 0,
                       "ignore_eos": True, "stream": True,
                       "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"status {r.status}: {r.read()[:200]!r}")
    replica = r.getheader("X-Anvil-Replica")
    t_first = t_last = None
    gaps = []
    n_tok = 0
    while True:
        line = r.readline()
        if not line:
            break
        if not line.startswith(b"data: "):
            continue
        payload = line[6:].strip()
        if payload == b"[DONE]":
            break
        d = json.loads(payload)
        if d.get("usage"):
            n_tok = d["usage"]["completion_tokens"]
        ch = d["choices"][0] if d.get("choices") else None
        # a token's chunk: its text, or an empty text before the end (a
        # random-weight model draws tokens that print nothing)
        if ch is not None and (ch.get("text") or ch.get("finish_reason") is None):
            now = time.perf_counter()
            if t_first is None:
                t_first = now
            else:
                gaps.append(now - t_last)
            t_last = now
    wall = time.perf_counter() - t0
    c.close()
    return (t_first - t0) if t_first else float("nan"), gaps, n_tok, replica, wall


def run_clients(srv, prompts, n_gen, n_clients, progress=False):
    todo = list(range(len(prompts)))
    lock = threading.Lock()
    results = []
    peak = [0.0]
    stop = threading.Event()

    def poll_kv():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], srv.metrics()["anvil_kv_blocks_used"])
            except (OSError, KeyError, ValueError):
                pass
            stop.wait(0.2)

    def client():
        while True:
            with lock:
                if not todo:
                    return
                i = todo.pop(0)
            results.append(stream_one(srv.port, prompts[i], n_gen))
            if progress:
                print(f"\r  {srv.kind}: {len(results)}/{len(prompts)} requests done",
                      end="", file=sys.stderr, flush=True)

    poller = threading.Thread(target=poll_kv, daemon=True)
    poller.start()
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(n_clients) as ex:
        for f in [ex.submit(client) for _ in range(n_clients)]:
            f.result()
    wall = time.perf_counter() - t0
    if progress:
        print(file=sys.stderr)
    stop.set()
    poller.join()
    return wall, results, peak[0]


def in_process(anvil, model, threads):
    p = subprocess.run([anvil, "bench", "-m", model, "--scenario", "balanced_b32", "-t",
                        str(threads), "--json"], capture_output=True, text=True)
    for l in p.stdout.splitlines():
        try:
            d = json.loads(l)
        except ValueError:
            continue
        if d.get("scenario") == "balanced_b32":
            return d
    return None


def run_shape(a, name, n_req, plens, gen, clients):
    """One workload: n_req requests with prompt lengths plens, gen new
    tokens each, at each client count; returns the records."""
    ftok = filler_ids(a.bin, a.model)
    prompts = [[ftok[(i * 37 + k) % len(ftok)] for k in range(plens[i])] for i in range(n_req)]
    ref = None
    base = {
        "scenario": name,
        "model": os.path.basename(a.model),
        "quant": re.sub(r".*\.", "", os.path.basename(a.model).removesuffix(".gguf")),
        "threads": a.threads,
        "commit": commit(),
        "transport": "http+sse",
        "server_flags": "defaults" if a.default_flags else "sized",
        "idle_conns": a.idle,
    }
    records = []
    servers = ["anvil", "llama-server"] if a.server == "both" else \
        ["llama-server" if a.server == "llama" else "anvil"]
    print(f"{name}: {'server':>12} {'clients':>7} {'wall_s':>8} {'req/s':>7} {'tok/s':>8} "
          f"{'dec tok/s':>9} {'cli tok/s':>9} {'ttft p50':>9} {'ttft p99':>9} {'itl p50':>8} "
          f"{'itl p99':>8} {'itl max':>8}  (ms)")
    for c in clients:
        if c == n_req and not a.no_compare and name == "balanced_b32" and "anvil" in servers:
            # right before the HTTP run it is compared with: on a shared
            # machine the load drifts over minutes
            ref = in_process(a.bin, a.model, a.threads)
        n_ctx = None if a.default_flags else max(plens) + gen + 8
        by_kind = {}
        for kind in servers:
            if kind == "anvil":
                srv = Server(a.bin, a.model, a.threads, n_ctx, max(c, 1))
            else:
                srv = LlamaServer(a.llama_server, a.model, a.threads, n_ctx, max(c, 1))
            idle = []
            try:
                idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(a.idle)]
                stream_one(srv.port, prompts[0][:16], 4)  # warm up
                wall, res, peak_kv = run_clients(srv, prompts, gen, c, progress=True)
                rss = srv.peak_rss_mb()
            finally:
                for k in idle:
                    k.close()
                srv.stop()
            ttft = [r[0] * 1e3 for r in res]
            itl = [g * 1e3 for r in res for g in r[1]]
            cli = [r[2] / r[4] for r in res if r[4] > 0]  # a request's tokens / its wall time
            n_in = sum(plens[:len(res)])
            n_out = sum(r[2] for r in res)
            rec = dict(base, server=kind, clients=c, requests=len(res), wall_s=wall,
                       req_s=len(res) / wall,
                       total_tok_s=(n_in + n_out) / wall, prefill_tok_s=n_in / wall,
                       decode_tok_s=n_out / wall,
                       client_tok_s_p50=percentile(cli, 0.5), client_tok_s_min=min(cli),
                       client_tok_s_max=max(cli), client_tok_s=sorted(cli),
                       ttft_p50_ms=percentile(ttft, 0.5), ttft_p99_ms=percentile(ttft, 0.99),
                       ttft_max_ms=max(ttft) if ttft else float("nan"),
                       itl_p50_ms=percentile(itl, 0.5), itl_p99_ms=percentile(itl, 0.99),
                       itl_max_ms=max(itl) if itl else float("nan"),
                       peak_rss_mb=rss, kv_blocks_used=peak_kv if kind == "anvil" else None,
                       out_tokens=n_out, ignore_eos=True, max_tokens=gen)
            if kind == "llama-server":
                rec["server_bin"] = a.llama_server
            if ref and c == n_req and kind == "anvil":
                rec["in_process_total_tok_s"] = ref.get("total_tok_s")
                rec["in_process_wall_s"] = ref.get("wall_s")
                if ref.get("total_tok_s"):
                    rec["http_vs_in_process"] = rec["total_tok_s"] / ref["total_tok_s"]
            by_kind[kind] = rec
            records.append(rec)
            print(f"{name}: {kind:>12} {c:>7} {wall:>8.2f} {rec['req_s']:>7.2f} "
                  f"{rec['total_tok_s']:>8.1f} {rec['decode_tok_s']:>9.1f} "
                  f"{rec['client_tok_s_p50']:>9.2f} {rec['ttft_p50_ms']:>9.1f} "
                  f"{rec['ttft_p99_ms']:>9.1f} {rec['itl_p50_ms']:>8.1f} {rec['itl_p99_ms']:>8.1f} "
                  f"{rec['itl_max_ms']:>8.1f}", flush=True)
            if n_out != gen * len(res):
                print(f"bench_serve: warning: {kind}: {n_out} tokens generated, expected "
                      f"{gen * len(res)}", file=sys.stderr)
        if len(by_kind) == 2 and by_kind["llama-server"]["decode_tok_s"] > 0:
            an, ll = by_kind["anvil"], by_kind["llama-server"]
            an["vs_llama_server"] = an["decode_tok_s"] / ll["decode_tok_s"]
            an["ttft_p50_vs_llama_server"] = an["ttft_p50_ms"] / ll["ttft_p50_ms"]
            print(f"{name}: {c} clients: anvil / llama-server decode tok/s "
                  f"{an['vs_llama_server']:.2f}x, TTFT p50 {an['ttft_p50_vs_llama_server']:.2f}x")
    if ref:
        print(f"in-process balanced_b32: wall {ref.get('wall_s', float('nan')):.2f} s, "
              f"{ref.get('total_tok_s', float('nan')):.1f} tok/s, ttft p50 "
              f"{ref.get('ttft_p50_ms', float('nan')):.1f} ms, itl p50 "
              f"{ref.get('itl_p50_ms', float('nan')):.1f} ms")
        for r in records:
            if "http_vs_in_process" in r:
                print(f"HTTP / in-process throughput at {r['clients']} clients: "
                      f"{r['http_vs_in_process']:.3f}")
    return records


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-m", "--model", default=default_model())
    ap.add_argument("--bin", default=os.path.join(ROOT, "bin", "anvil"))
    ap.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--gen", type=int, default=128)
    ap.add_argument("--out", default="bench_serve.json")
    ap.add_argument("--scenario", help="a SCENARIOS.md shape or 'all' (clients = requests)")
    ap.add_argument("--default-flags", action="store_true",
                    help="start the server with no --ctx/--parallel/--max-queue")
    ap.add_argument("--idle", type=int, default=0,
                    help="idle connections held open to the server during each run")
    ap.add_argument("--server", choices=["anvil", "llama", "both"], default="anvil",
                    help="which server(s) to drive with the same client (llama: llama-server)")
    ap.add_argument("--llama-server", default=default_llama_server(),
                    help="llama-server binary (default: the native build in ~/.cache/anvil)")
    ap.add_argument("--no-compare", action="store_true",
                    help="skip the in-process `anvil bench --scenario balanced_b32` run")
    a = ap.parse_args()
    if a.idle:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = a.idle + 256
        if soft < want and (hard == resource.RLIM_INFINITY or hard >= want):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    if a.scenario:
        names = list(SCENARIOS) if a.scenario == "all" else [a.scenario]
        if any(n not in SCENARIOS for n in names):
            ap.error(f"--scenario: one of {', '.join(SCENARIOS)} or all")
        records = []
        for n in names:
            req, plens, gen = SCENARIOS[n]
            records += run_shape(a, n, req, [plens[i % len(plens)] for i in range(req)], gen,
                                 [req])
    else:
        clients = [int(x) for x in a.clients.split(",")]
        if a.requests < 1 or a.prompt < 1 or a.gen < 1 or min(clients) < 1:
            ap.error("--requests, --prompt, --gen and --clients must be >= 1")
        name = "balanced_b32" if (a.requests, a.prompt, a.gen) == (32, 256, 128) \
            else f"custom_r{a.requests}_p{a.prompt}_g{a.gen}"
        records = run_shape(a, name, a.requests, [a.prompt] * a.requests, a.gen, clients)
    with open(a.out, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
