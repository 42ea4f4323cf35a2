#!/usr/bin/env python3
"""Time llama-cpp-python (the same llama.cpp, built from source in the test
venv) on a GGUF the way `anvil bench` times anvil: pp<N> = one prompt of N
random tokens in one batch from an empty cache, tg<N> = N single-token
decodes from an empty cache; mean +- sd over -r repetitions after a warmup.
Prints one JSON object per line with the keys of `anvil bench --json`.

usage: bench_llamacpp.py MODEL [-p 512] [-n 128] [-t 1,2] [-r 5]
"""
import argparse
import json
import random
import statistics
import time

import llama_cpp


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", default="2")
    ap.add_argument("-r", type=int, default=5)
    a = ap.parse_args()
    for t in map(int, a.t.split(",")):
        llm = llama_cpp.Llama(model_path=a.model, n_ctx=a.p + a.n + 16, n_batch=max(a.p, 1),
                              n_ubatch=max(a.p, 1), n_threads=t, n_threads_batch=t,
                              verbose=False)
        rng = random.Random(0)
        toks = [rng.randrange(llm.n_vocab()) for _ in range(max(a.p, a.n))]
        for test, n in (("pp", a.p), ("tg", a.n)):
            if n == 0:
                continue
            rates = []
            for rep in range(a.r + 1):
                llm.reset()
                llm._ctx.memory_clear(True) if hasattr(llm._ctx, "memory_clear") else None
                t0 = time.perf_counter()
                if test == "pp":
                    llm.eval(toks[:n])
                else:
                    for i in range(n):
                        llm.eval([toks[i]])
                dt = time.perf_counter() - t0
                if rep:
                    rates.append(n / dt)
            print(json.dumps({"test": f"{test}{n}", "threads": t, "tok_s": statistics.mean(rates),
                              "tok_s_sd": statistics.stdev(rates) if len(rates) > 1 else 0.0,
                              "engine": "llama-cpp-python " + llama_cpp.__version__}), flush=True)


if __name__ == "__main__":
    main()
