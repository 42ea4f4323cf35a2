#!/usr/bin/env python3
"""Tool calls constrained inside a family's own format against free
decoding, over HTTP: for each family, SmolLM2-135M-Instruct (models/)
served with that family's real chat template (--chat-template-file, from
llama.cpp's corpus), so the format is the family's; greedy,

  constrained  tool_choice "required" with two tools: the forced opening
               marker, then the alternation of per-tool grammars
               (ANVIL_CONSTRAINT_CALLS; docs/tool-calls.md), one or more
               calls;
  free         the same prompt and tools, tool_choice "none", ignore_eos:
               the same model writing unconstrained text.

tok/s is decode only: the tokens after the first over the time from the
first streamed chunk to the last (the prompt is cached by a warmup), the
median of -r runs. One request at a time, one thread.

usage: bench_toolfmt.py [-n 64] [-r 1] [--model M] [--out bench/results/toolfmt-decode-DATE.json]
Prints a table; writes the JSON results.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "gen"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "py"))

from serve_util import Server, read_all, sse_data, stream_post  # noqa: E402

TEMPLATES = os.path.expanduser(
    "~/.cache/anvil/llama_cpp_python-0.3.36/vendor/llama.cpp/models/templates")
FAMILIES = {
    "hermes": "Qwen-Qwen2.5-7B-Instruct.jinja",
    "llama3": "meta-llama-Llama-3.1-8B-Instruct.jinja",
    "harmony": "openai-gpt-oss-120b.jinja",
    "deepseek_r1": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 24},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 14}},
            "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time in a zone.",
        "parameters": {"type": "object", "properties": {
            "zone": {"type": "integer", "minimum": -12, "maximum": 14}},
            "required": ["zone"], "additionalProperties": False}}},
]


def run(srv, body):
    body = dict(body, stream=True, stream_options={"include_usage": True})
    k = stream_post(srv.port, "/v1/chat/completions", body)
    t = []
    usage = None
    raw = b""
    while True:  # time each chunk as it arrives
        b = k.recv(65536)
        if not b:
            break
        now = time.perf_counter()
        if b"delta" in b:
            t.append(now)
        raw += b
    k.close()
    for ev in sse_data(raw):
        if ev in ("[DONE]", b"[DONE]"):
            continue
        j = json.loads(ev)
        if j.get("usage"):
            usage = j["usage"]
    n = usage["completion_tokens"] if usage else 0
    if len(t) < 2 or n < 2:
        return n, None
    return n, (n - 1) / (t[-1] - t[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=1)
    ap.add_argument("--model", default=os.path.join(HERE, "..", "models",
                                                     "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default=os.path.join(
        HERE, "results", f"toolfmt-decode-{datetime.date.today().isoformat()}.json"))
    a = ap.parse_args()
    rows = []
    if True:
        for fam, tpl in FAMILIES.items():
            srv = Server("--chat-template-file", os.path.join(TEMPLATES, tpl), "--ctx", "2048",
                         model=a.model)
            try:
                base = {"messages": [{"role": "user", "content": "Weather in Paris and Rome?"}],
                        "tools": TOOLS, "temperature": 0, "max_tokens": a.n}
                modes = {"constrained": dict(base, tool_choice="required"),
                         "free": dict(base, tool_choice="none", ignore_eos=True)}
                for body in modes.values():
                    run(srv, body)  # warmup: the prompt is cached
                for mode, body in modes.items():
                    got = [run(srv, body) for _ in range(a.r)]
                    tps = [x for _, x in got if x]
                    rows.append({"family": fam, "mode": mode, "tokens": got[0][0],
                                 "tok_s": round(statistics.median(tps), 1) if tps else None,
                                 "runs": a.r})
                    print(json.dumps(rows[-1]), flush=True)
            finally:
                srv.stop()
    print(f"\n{'family':<12} {'constrained tok/s':>18} {'free tok/s':>11} {'ratio':>6}")
    for fam in FAMILIES:
        c = next(r for r in rows if r["family"] == fam and r["mode"] == "constrained")
        f = next(r for r in rows if r["family"] == fam and r["mode"] == "free")
        ratio = c["tok_s"] / f["tok_s"] if c["tok_s"] and f["tok_s"] else float("nan")
        print(f"{fam:<12} {c['tok_s'] or 0:>18.1f} {f['tok_s'] or 0:>11.1f} {ratio:>6.2f}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump({"bench": "toolfmt", "date": datetime.datetime.utcnow().isoformat() + "Z",
                   "n": a.n, "model": os.path.basename(a.model), "threads": 1,
                   "rows": rows}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
