#!/usr/bin/env python3
"""bench_routes.py - what the API layers cost: the same streamed chat
workload through /v1/chat/completions, /v1/messages (Anthropic),
/v1/responses (OpenAI Responses) and /api/chat (Ollama) on one `anvil
serve`, and `n` > 1 on /v1/completions against n = 1.

Routes. R requests (default 16) of one user message each, C closed-loop
clients (default 8), greedy, max tokens G (default 64), streamed. The
message is a request-unique header ("Note 3-1-7:") and then the same
filler text (about P tokens, default 256) and an instruction that makes
the model write at length, so every route renders the same template and
decodes the same kind of text, and no route finds another's prompt in the
prefix cache (the header comes first). Each round runs every route once,
in an order rotated from round to round (default 3 rounds), so a drift of
the machine falls on every route alike. Per route: the median over rounds
of the aggregate output tokens/s (output tokens from the route's own usage
report / wall time), of the client-side time to first text, and of the gap
between text events; and each of those as a ratio to chat completions.

n > 1. A prompt of about 1,000 tokens (again with a unique header) on
/v1/completions, max_tokens 32, ignore_eos, streamed, with n = 1 and n = 8
alternately (default 5 each): time to the first text of any choice, the
prompt tokens the engine computed for the request (the server's
anvil_prompt_tokens_total less anvil_prefix_cache_tokens_total, before and
after: n = 8 must prefill the prompt once, not 8 times), and decode tokens/s after the first token (8 choices
decoded as one batch should give several times n = 1's).

Output: a table on stdout and one JSON object written to --out.

Usage:
  bench/bench_routes.py [-m MODEL] [-t THREADS] [--requests 16] [--clients 8]
                        [--prompt 256] [--gen 64] [--rounds 3]
                        [--n-prompt 1000] [--n-trials 5] [--out FILE]
(--rounds 0 or --n-trials 0 leaves that part out.)
Never run by `make test`.
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import os
import statistics
import sys
import time

from bench_serve import FILLER, Server, commit, filler_ids
from repo import default_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

ASK = "\n\nWrite a long, detailed essay about the history above, in many paragraphs."


def post_stream(port, path, body, headers=None):
    """POST and yield (time, line) for every non-empty line of the answer."""
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=3600)
    c.request("POST", path, body=json.dumps(body), headers=h)
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"{path}: status {r.status}: {r.read()[:300]!r}")
    try:
        while True:
            line = r.readline()
            if not line:
                return
            line = line.strip()
            if line:
                yield time.perf_counter(), line
    finally:
        c.close()


def sse(lines):
    """(time, event dict) of every `data:` line of an SSE stream."""
    for t, line in lines:
        if line.startswith(b"data: ") and line[6:] != b"[DONE]":
            yield t, json.loads(line[6:])


# Each route: (path, body from (model, text, n_gen), extract) where extract
# maps one event to (has_text, output_tokens or None).
def chat_body(model, text, g):
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": g,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}


def chat_event(d):
    text = bool(d.get("choices")) and bool(d["choices"][0].get("delta", {}).get("content"))
    u = d.get("usage")
    return text, (u["completion_tokens"] if u else None)


def messages_body(model, text, g):
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": g,
            "temperature": 0, "stream": True}


def messages_event(d):
    if d.get("type") == "content_block_delta":
        return bool(d["delta"].get("text")), None
    if d.get("type") == "message_delta":
        return False, d["usage"]["output_tokens"]
    return False, None


def responses_body(model, text, g):
    return {"model": model, "input": text, "max_output_tokens": g, "temperature": 0,
            "stream": True, "store": False}


def responses_event(d):
    if d.get("type") == "response.output_text.delta":
        return bool(d.get("delta")), None
    if d.get("type") in ("response.completed", "response.incomplete"):
        return False, d["response"]["usage"]["output_tokens"]
    return False, None


def ollama_body(model, text, g):
    return {"model": model, "messages": [{"role": "user", "content": text}], "stream": True,
            "options": {"num_predict": g, "temperature": 0}}


def ollama_event(d):
    text = bool(d.get("message", {}).get("content"))
    return text, (d["eval_count"] if d.get("done") else None)


ROUTES = {
    "chat": ("/v1/chat/completions", chat_body, chat_event, True),
    "messages": ("/v1/messages", messages_body, messages_event, True),
    "responses": ("/v1/responses", responses_body, responses_event, True),
    "ollama": ("/api/chat", ollama_body, ollama_event, False),
}


def one_request(port, route, model, text, g):
    path, body, event, is_sse = ROUTES[route]
    t0 = time.perf_counter()
    lines = post_stream(port, path, body(model, text, g))
    events = sse(lines) if is_sse else ((t, json.loads(l)) for t, l in lines)
    first = last = None
    gaps = []
    n_out = None
    for t, d in events:
        has_text, n = event(d)
        if n is not None:
            n_out = n
        if has_text:
            if first is None:
                first = t
            else:
                gaps.append(t - last)
            last = t
    if n_out is None:
        raise RuntimeError(f"{route}: no usage in the answer")
    return (first - t0) if first else float("nan"), gaps, n_out


def run_route(port, route, model, texts, g, clients):
    t0 = time.perf_counter()
    with cf.ThreadPoolExecutor(clients) as ex:
        res = list(ex.map(lambda s: one_request(port, route, model, s, g), texts))
    wall = time.perf_counter() - t0
    n_out = sum(r[2] for r in res)
    gaps = [x for r in res for x in r[1]]
    return {"wall_s": wall, "output_tokens": n_out, "tok_s": n_out / wall,
            "ttft_ms_p50": 1e3 * statistics.median(r[0] for r in res),
            "itl_ms_p50": 1e3 * statistics.median(gaps) if gaps else float("nan")}


def settled(srv):
    """The server's metrics once no request is in flight (a request's
    tokens are counted when it ends, a moment after its stream)."""
    for _ in range(200):
        m = srv.metrics()
        if m["anvil_requests_in_flight"] == 0:
            return m
        time.sleep(0.01)
    raise RuntimeError("requests still in flight")


def stream_n(port, model, prompt, n, g):
    body = {"model": model, "prompt": prompt, "max_tokens": g, "temperature": 0, "n": n,
            "ignore_eos": True, "stream": True}
    t0 = time.perf_counter()
    first = None
    n_tok = 0
    for t, d in sse(post_stream(port, "/v1/completions", body)):
        for ch in d.get("choices", []):
            if ch.get("text"):
                n_tok += 1
                if first is None:
                    first = t
    end = time.perf_counter()
    return first - t0, end - first, n_tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default=default_model())
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--requests", type=int, default=16)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=256)
    ap.add_argument("--gen", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-prompt", type=int, default=1000)
    ap.add_argument("--n-trials", type=int, default=5)
    ap.add_argument("--out", default="bench_routes.json")
    a = ap.parse_args()
    anvil = os.path.join(ROOT, "bin", "anvil")

    # the filler's words, repeated, cut to about --prompt / --n-prompt tokens
    per = len(filler_ids(anvil, a.model))
    fw = FILLER.split(" ")

    def text_of(n_tok):
        n_words = int(len(fw) * n_tok / per)
        return " ".join((fw * (n_words // len(fw) + 1))[:n_words])

    body = text_of(a.prompt)
    long_body = text_of(a.n_prompt)

    srv = Server(anvil, a.model, a.threads, 8192, 64)
    try:
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=60)
        c.request("GET", "/v1/models")
        model = json.loads(c.getresponse().read())["data"][0]["id"]
        c.close()
        names = list(ROUTES)
        per_route = {r: [] for r in names}
        # warm-up: one request per route
        for r in names if a.rounds else []:
            one_request(srv.port, r, model, "Warm-up." + body + ASK, 8)
        for k in range(a.rounds):
            order = names[k % len(names):] + names[:k % len(names)]
            for r in order:
                texts = [f"Note {k}-{names.index(r)}-{i}: " + body + ASK
                         for i in range(a.requests)]
                res = run_route(srv.port, r, model, texts, a.gen, a.clients)
                per_route[r].append(res)
                print(f"round {k + 1}/{a.rounds} {r:9s} {res['tok_s']:7.1f} tok/s  "
                      f"ttft {res['ttft_ms_p50']:7.1f} ms  itl {res['itl_ms_p50']:6.2f} ms",
                      file=sys.stderr, flush=True)
        summary = {}
        names = names if a.rounds else []
        for r in names:
            med = {key: statistics.median(x[key] for x in per_route[r])
                   for key in ("tok_s", "ttft_ms_p50", "itl_ms_p50")}
            summary[r] = med
        for r in names:
            base = summary["chat"]
            summary[r]["tok_s_vs_chat"] = summary[r]["tok_s"] / base["tok_s"]
            summary[r]["ttft_vs_chat"] = summary[r]["ttft_ms_p50"] / base["ttft_ms_p50"]

        # n > 1
        trials = {1: [], 8: []}
        for k in range(a.n_trials):
            for n in (1, 8) if k % 2 == 0 else (8, 1):
                before = settled(srv)
                ttft, dec, n_tok = stream_n(srv.port, model, f"Trial {k}-{n}: " + long_body, n, 32)
                after = settled(srv)
                computed = (after["anvil_prompt_tokens_total"] - before["anvil_prompt_tokens_total"]
                            - after["anvil_prefix_cache_tokens_total"]
                            + before["anvil_prefix_cache_tokens_total"])
                trials[n].append({"ttft_ms": 1e3 * ttft, "decode_tok_s": (n_tok - n) / dec,
                                  "tokens": n_tok, "prompt_tokens_computed": computed})
                print(f"n={n} trial {k + 1}: ttft {1e3 * ttft:7.1f} ms, prompt tokens computed "
                      f"{computed:.0f}, decode {(n_tok - n) / dec:6.1f} tok/s",
                      file=sys.stderr, flush=True)
        nsum = {} if not a.n_trials else {str(n): {key: statistics.median(t[key] for t in trials[n])
                         for key in ("ttft_ms", "decode_tok_s", "prompt_tokens_computed")}
                for n in trials}
        if nsum:
            nsum["ttft_n8_vs_n1"] = nsum["8"]["ttft_ms"] / nsum["1"]["ttft_ms"]
            nsum["decode_n8_vs_n1"] = nsum["8"]["decode_tok_s"] / nsum["1"]["decode_tok_s"]
    finally:
        srv.stop()

    print(f"\n{'route':10s} {'tok/s':>8s} {'vs chat':>8s} {'ttft ms':>8s} {'vs chat':>8s} "
          f"{'itl ms':>7s}")
    for r in names:
        s = summary[r]
        print(f"{r:10s} {s['tok_s']:8.1f} {s['tok_s_vs_chat']:8.3f} {s['ttft_ms_p50']:8.1f} "
              f"{s['ttft_vs_chat']:8.3f} {s['itl_ms_p50']:7.2f}")
    if nsum:
        print(f"\nn=8 vs n=1 on a {a.n_prompt}-token prompt: ttft {nsum['ttft_n8_vs_n1']:.2f}x "
              f"(prompt tokens computed {nsum['8']['prompt_tokens_computed']:.0f} vs "
              f"{nsum['1']['prompt_tokens_computed']:.0f}), decode tok/s "
              f"{nsum['decode_n8_vs_n1']:.2f}x")
    out = {"model": os.path.basename(a.model), "threads": a.threads, "commit": commit(),
           "date": time.strftime("%Y-%m-%d"), "requests": a.requests, "clients": a.clients,
           "prompt_tokens_approx": a.prompt, "gen": a.gen, "rounds": a.rounds,
           "routes": summary, "route_rounds": per_route, "n": nsum, "n_trials": trials}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
