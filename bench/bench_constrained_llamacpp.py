#!/usr/bin/env python3
"""Structured output against llama.cpp, in one run: `anvil bench
--constrained --json --batch 1` and llama-cpp-python's grammar-constrained
decoding (LlamaGrammar.from_json_schema) on the same schemas, the same
prompt text and the same model file, greedy, one request at a time.

For llama-cpp-python, per schema:
  compile  LlamaGrammar.from_json_schema (schema -> GBNF in Python, then
           llama.cpp's grammar parser), median thread CPU time of -r runs;
  decode   -r requests through Llama.generate with the grammar until the
           end-of-generation token or -n tokens, then the same number of
           tokens without a grammar (the end token does not stop it), like
           anvil's free run. tok/s = tokens after the first over the time
           from the first token to the last (the prompt is cached by a
           warmup request, so prefill is excluded on both sides).
A schema llama-cpp-python cannot convert is reported with its error.

usage: bench_constrained_llamacpp.py MODEL [--anvil bin/anvil] [--schemas small,medium,large]
                                     [-n 256] [-r 3] [-t 2]
Prints one JSON object per line, then a table.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data", "constrain", "schemas")
# the files `anvil bench --constrained` calls small, medium and large
NAMED = {"small": "sentiment.json", "medium": "medium_nested.json",
         "large": "large_enum_recursive.json"}
HEAD = "Reply with one JSON value that follows this JSON schema:\n"


def schema_file(name):
    return os.path.join(DATA, NAMED[name]) if name in NAMED else name


def prompt_tokens(llm, schema):
    text = HEAD + json.dumps(schema, separators=(",", ":"))
    fmt = Jinja2ChatFormatter(template=llm.metadata["tokenizer.chat_template"],
                              eos_token="", bos_token="")
    rendered = fmt(messages=[{"role": "user", "content": text}]).prompt
    return llm.tokenize(rendered.encode(), add_bos=False, special=True)


def decode(llm, toks, n, grammar=None, count=None):
    """Greedy tokens of one request: stops at the end token (grammar run) or
    after count tokens. Returns (tokens, tok/s after the first token)."""
    out, times = [], []
    for t in llm.generate(toks, temp=0.0, top_k=1, grammar=grammar, reset=True):
        times.append(time.perf_counter())
        if count is None and llm.token_eos() == t:
            break
        out.append(t)
        if len(out) >= (count if count is not None else n):
            break
    rate = (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0
    return out, len(times), rate


def llamacpp_schema(llm, name, n, reps):
    path = schema_file(name)
    src = open(path, encoding="utf-8").read()
    schema = json.loads(src)
    rec = {"engine": "llama-cpp-python " + llama_cpp.__version__, "schema": name, "file": path}
    ct = []
    try:
        for _ in range(reps):
            t0 = time.thread_time()
            g = llama_cpp.LlamaGrammar.from_json_schema(src, verbose=False)
            ct.append(time.thread_time() - t0)
    except Exception as e:  # its converter refuses some keywords
        rec["error"] = f"{type(e).__name__}: {e}"[:300]
        return rec
    rec["compile_cpu_ms"] = 1e3 * statistics.median(ct)
    toks = prompt_tokens(llm, schema)
    decode(llm, toks, 2)  # warmup: the prompt into the cache
    n_cons = n_free = 0
    t_cons = t_free = 0.0
    complete = 0
    for _ in range(reps):
        g = llama_cpp.LlamaGrammar.from_json_schema(src, verbose=False)
        out, k, rate = decode(llm, toks, n, grammar=g)
        complete += len(out) < n
        text = llm.detokenize(out).decode("utf-8", "replace")
        if len(out) < n:
            json.loads(text)  # a grammar-complete output parses
        _, k2, rate2 = decode(llm, toks, n, count=max(k, 2))
        if rate > 0 and rate2 > 0:
            n_cons += k - 1
            t_cons += (k - 1) / rate
            n_free += k2 - 1
            t_free += (k2 - 1) / rate2
    rec.update({"batch": 1, "requests": reps, "complete": complete,
                "constrained_tok_s": n_cons / t_cons if t_cons else 0.0,
                "free_tok_s": n_free / t_free if t_free else 0.0})
    rec["ratio"] = rec["constrained_tok_s"] / rec["free_tok_s"] if rec["free_tok_s"] else 0.0
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--anvil", default=os.path.join(HERE, "..", "bin", "anvil"))
    ap.add_argument("--schemas", default="small,medium,large")
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("-t", type=int, default=2)
    a = ap.parse_args()
    names = a.schemas.split(",")

    p = subprocess.run([a.anvil, "bench", "-m", a.model, "--constrained", "--json", "--batch", "1",
                        "-n", str(a.n), "-r", str(a.r), "-t", str(a.t), "--data", DATA,
                        "--schemas", ",".join(names)],
                       capture_output=True, text=True, cwd=os.path.join(HERE, ".."))
    if p.returncode != 0:
        sys.exit(f"anvil bench --constrained failed:\n{p.stderr[-2000:]}")
    anvil = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
    for r in anvil:
        r["engine"] = "anvil"
        print(json.dumps(r), flush=True)

    llm = llama_cpp.Llama(model_path=a.model, n_ctx=4096, n_batch=512, n_threads=a.t,
                          n_threads_batch=a.t, verbose=False)
    mine = []
    for name in names:
        rec = llamacpp_schema(llm, name, a.n, a.r)
        mine.append(rec)
        print(json.dumps(rec), flush=True)

    index = next((r for r in anvil if r["case"] == "index"), {})
    print(f"\nanvil vocabulary index (once per model): {index.get('cpu_ms', 0):.2f} ms CPU")
    print("| schema | engine | compile ms | free tok/s | constrained tok/s | ratio | complete |")
    print("|---|---|---|---|---|---|---|")
    for name, rec in zip(names, mine):
        comp = next((r for r in anvil if r["case"] == "compile" and r["schema"] == name), {})
        dec = next((r for r in anvil if r["case"] == "decode" and r["schema"] == name), {})
        print(f"| {name} | anvil | {comp.get('cpu_ms', 0):.2f} | {dec.get('free_tok_s', 0):.1f} | "
              f"{dec.get('constrained_tok_s', 0):.1f} | {100 * dec.get('ratio', 0):.1f}% | "
              f"{dec.get('complete', 0)}/{dec.get('requests', 0)} |")
        if "error" in rec:
            print(f"| {name} | llama.cpp | refused: {rec['error'][:60]} | | | | |")
        else:
            print(f"| {name} | llama.cpp | {rec['compile_cpu_ms']:.2f} | {rec['free_tok_s']:.1f} | "
                  f"{rec['constrained_tok_s']:.1f} | {100 * rec['ratio']:.1f}% | "
                  f"{rec['complete']}/{rec['requests']} |")


if __name__ == "__main__":
    main()
