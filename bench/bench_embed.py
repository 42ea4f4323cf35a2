#!/usr/bin/env python3
"""Embedding throughput: sentences per second for N sentences of about
8-128 tokens, anvil against llama.cpp's own tools on the same GGUF, in
the same run, same thread count. JSON on stdout.

Three measurements:
  cli_batched     `anvil embed --seqs 64` against `llama-embedding`,
                  both reading one file of N lines. llama-embedding packs
                  up to 256 prompts per pass on its own (its -np 1 means a
                  unified cache of llama_max_parallel_sequences(); a
                  smaller -np aborts in get_sub_batch when more prompts
                  fit a pass), so this is batched on both sides; there is
                  no batch-1 mode of llama-embedding.
  server_batch1   `anvil serve --embedding-model` against `llama-server
                  --embeddings`: one POST /v1/embeddings per sentence, one
                  after another (batch 1, HTTP included on both sides).
  server_batched  the same servers, POST /v1/embeddings with 64 inputs per
                  request.
The servers' vectors are compared too (worst cosine over the N).

The sentences are words drawn from a fixed seed (lengths uniform in
8..128 tokens' worth), one per line of a file both CLIs read. anvil's CLI
time is the embedding call alone (ANVIL_EMBED_TIME, printed by `anvil
embed`); llama-embedding prints no such figure, so its time is its wall
time minus the wall time of the same command on one sentence (the load).
Both are told --pooling (default mean, what BERT-style files use; a
decoder embedding model wants last).

    bench/bench_embed.py [--model M] [--n 1000] [--threads 2] [--pooling mean]
                         [--llama-bin DIR]   (default: bench/build_llamacpp.sh's)
                         [--skip-cli] [--skip-server]
"""
import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("the of and to in is was for on that with as by at from his her it an were are which "
         "this be or has had not but one all new first after who they have two been their more "
         "time city river music north family known world school during team season war house "
         "state system village game film album station party county line church").split()


def sentences(n, seed=7):
    rng = random.Random(seed)
    # about 1.3 tokens per word for this vocabulary: 6..100 words
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(6, 98))).capitalize() + "."
            for _ in range(n)]


def default_model():
    mk = open(os.path.join(ROOT, "Makefile")).read()
    m = re.search(r"^MODEL\s*[:?]?=\s*(\S+)", mk, re.M)
    return os.path.join(ROOT, m.group(1)) if m else None


def run_anvil(model, path, n, threads, pooling, seqs):
    env = dict(os.environ, ANVIL_EMBED_TIME="1")
    cmd = [os.path.join(ROOT, "bin", "anvil"), "embed", "-m", model, "-f", path, "--format",
           "matrix", "--pooling", pooling, "-t", str(threads), "-b", "2048", "--seqs", str(seqs)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"anvil embed failed: {p.stderr}")
    s = float(re.search(r"inputs, ([0-9.]+) s", p.stderr).group(1))
    return {"seconds": s, "sentences_per_s": n / s}


def run_llama(bin_dir, model, path, one, n, threads, pooling, seqs):
    exe = os.path.join(bin_dir, "llama-embedding")
    if not os.path.exists(exe):
        return {"error": f"{exe} missing (bench/build_llamacpp.sh builds it)"}

    def wall(f):
        cmd = [exe, "-m", model, "-f", f, "--pooling", pooling, "-t", str(threads), "-c", str(max(4096, 512 * seqs)),
               "-b", "2048", "-ub", "2048", "--embd-normalize", "2", "--embd-output-format", "json",
               "-np", str(seqs), "--no-warmup"]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            return None, p.stderr[-800:]
        return time.perf_counter() - t0, None

    load, err = wall(one)
    total, err2 = wall(path)
    if load is None or total is None:
        return {"error": err or err2}
    s = max(total - load, 1e-9)
    return {"seconds": s, "sentences_per_s": n / s, "load_seconds": load}


def server_bench(name, cmd, port, texts, timeout=600):
    """Batch 1 and 64 inputs per request on one server: sentences/s and the vectors."""
    from bench_rerank import post, wait_up
    print(f"[{name}] {' '.join(cmd)}", file=sys.stderr, flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up(port, p)
        post(port, "/v1/embeddings", {"input": texts[:4]}, timeout)  # warm-up
        res, vecs = {}, None
        for mode, per in (("server_batch1", 1), ("server_batched", 64)):
            t0 = time.perf_counter()
            out = []
            for i in range(0, len(texts), per):
                r = post(port, "/v1/embeddings", {"input": texts[i:i + per] if per > 1 else texts[i]},
                         timeout)
                out += [d["embedding"] for d in sorted(r["data"], key=lambda d: d["index"])]
            dt = time.perf_counter() - t0
            assert len(out) == len(texts), (name, mode, len(out))
            res[mode] = {"seconds": dt, "sentences_per_s": len(texts) / dt}
            print(f"[{name}] {mode}: {len(texts) / dt:.1f} sentences/s", file=sys.stderr, flush=True)
            vecs = vecs or out
        return res, vecs
    finally:
        p.terminate()
        p.wait(10)


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pooling", default="mean")
    ap.add_argument("--llama-bin", default=None)
    ap.add_argument("--skip-cli", action="store_true")
    ap.add_argument("--skip-server", action="store_true")
    a = ap.parse_args()
    if not a.model or not os.path.exists(a.model):
        sys.exit(f"model missing: {a.model} (make model)")
    bin_dir = a.llama_bin
    if bin_dir is None:
        p = subprocess.run([os.path.join(ROOT, "bench", "build_llamacpp.sh")], capture_output=True,
                           text=True)
        bin_dir = p.stdout.strip().splitlines()[-1] if p.returncode == 0 else ""
    ss = sentences(a.n)
    out = {"model": os.path.basename(a.model), "n": a.n, "threads": a.threads,
           "pooling": a.pooling, "date": time.strftime("%Y-%m-%d"), "results": {}}
    if not a.skip_cli:
        with tempfile.TemporaryDirectory() as d:
            path, one = os.path.join(d, "s.txt"), os.path.join(d, "one.txt")
            open(path, "w").write("\n".join(ss) + "\n")
            open(one, "w").write(ss[0] + "\n")
            r = {"anvil": run_anvil(a.model, path, a.n, a.threads, a.pooling, 64)}
            if bin_dir:
                r["llama.cpp"] = run_llama(bin_dir, a.model, path, one, a.n, a.threads,
                                           a.pooling, 1)
                if "sentences_per_s" in r["llama.cpp"]:
                    r["speedup"] = (r["anvil"]["sentences_per_s"] /
                                    r["llama.cpp"]["sentences_per_s"])
            out["results"]["cli_batched"] = r
    if not a.skip_server and bin_dir:
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        from bench_rerank import free_port
        t = str(a.threads)
        port = free_port()
        ra, va = server_bench("anvil", [os.path.join(ROOT, "bin", "anvil"), "serve", "-m", a.model,
                                        "--embedding-model", a.model, "--port", str(port), "-t", t,
                                        "--ctx", "512"], port, ss)
        port = free_port()
        rl, vl = server_bench("llama-server", [os.path.join(bin_dir, "llama-server"), "-m", a.model,
                                               "--embeddings", "--pooling", a.pooling, "--port",
                                               str(port), "-t", t, "-tb", t, "-np", "16",
                                               "--ctx-size", str(512 * 16), "-b", "4096", "-ub",
                                               "4096"], port, ss)
        for mode in ra:
            out["results"][mode] = {"anvil": ra[mode], "llama.cpp": rl[mode],
                                    "speedup": ra[mode]["sentences_per_s"] /
                                    rl[mode]["sentences_per_s"]}
        out["results"]["server_worst_cosine"] = min(cosine(x, y) for x, y in zip(va, vl))
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
