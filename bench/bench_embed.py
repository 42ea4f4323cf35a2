#!/usr/bin/env python3
"""Embedding throughput: sentences per second for N sentences of about
8-128 tokens, one sequence per forward pass ("batch 1") and many
("batched"), anvil (`anvil embed`) against llama.cpp's llama-embedding
on the same GGUF, in the same run, same thread count. JSON on stdout.

The sentences are words drawn from a fixed seed (lengths uniform in
8..128 tokens' worth), one per line of a file both tools read. anvil's
time is the embedding call alone (ANVIL_EMBED_TIME, printed by `anvil
embed`); llama-embedding prints no such figure, so its time is its wall
time minus the wall time of the same command on one sentence (the load).
The model needs no pooling_type: both tools are told --pooling (default
last, the decoder embedding models' choice).

    bench/bench_embed.py [--model M] [--n 1000] [--threads 2] [--pooling last]
                         [--llama-bin DIR]   (default: bench/build_llamacpp.sh's)
"""
import argparse
import json
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=default_model())
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pooling", default="last")
    ap.add_argument("--llama-bin", default=None)
    a = ap.parse_args()
    if not a.model or not os.path.exists(a.model):
        sys.exit(f"model missing: {a.model} (make model)")
    bin_dir = a.llama_bin
    if bin_dir is None:
        p = subprocess.run([os.path.join(ROOT, "bench", "build_llamacpp.sh")], capture_output=True,
                           text=True)
        bin_dir = p.stdout.strip().splitlines()[-1] if p.returncode == 0 else ""
    with tempfile.TemporaryDirectory() as d:
        path, one = os.path.join(d, "s.txt"), os.path.join(d, "one.txt")
        ss = sentences(a.n)
        open(path, "w").write("\n".join(ss) + "\n")
        open(one, "w").write(ss[0] + "\n")
        out = {"model": os.path.basename(a.model), "n": a.n, "threads": a.threads,
               "pooling": a.pooling, "results": {}}
        for name, seqs in (("batch1", 1), ("batched", 64)):
            r = {"anvil": run_anvil(a.model, path, a.n, a.threads, a.pooling, seqs)}
            if bin_dir:
                r["llama.cpp"] = run_llama(bin_dir, a.model, path, one, a.n, a.threads,
                                           a.pooling, seqs)
                if "sentences_per_s" in r["llama.cpp"]:
                    r["speedup"] = (r["anvil"]["sentences_per_s"] /
                                    r["llama.cpp"]["sentences_per_s"])
            out["results"][name] = r
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
