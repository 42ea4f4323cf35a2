#!/usr/bin/env python3
"""anvil's speculative decoding against llama.cpp's own, on the same GGUF,
the same prompts, greedy, batch 1, the same threads, in one run.

anvil: `anvil bench --spec ngram|draft --batch 1` (bench/bench_spec.c) runs
each prompt set plainly and speculating and prints decode tok/s for both,
the acceptance and the tokens per verification step.

llama.cpp: its native tools built by bench/build_llamacpp.sh, one process
per prompt. Speculating: `llama-lookup` (n-gram lookup from the context)
for ngram, `llama-speculative` (draft model, one branch) for draft.
Plain: `llama-lookup --spec-draft-n-max 0` - the same tool and the same
decode loop with drafting off (nothing is ever proposed, so every step
decodes one token). Each prompt is the exact text of anvil's chat
rendering (the user message in the model's chat template, assistant turn
opened): the ids of `anvil tokenize --chat` turned back into text, checked
to tokenize to the same ids, and passed with -p and --no-escape (-f would
drop the template's trailing newline; escapes would rewrite backslashes in
code). llama.cpp tokenizes it with special tokens parsed, as anvil does;
the prompt token count it prints is checked against anvil's. Both sides
use the same -n, -t, n_ctx 4096 and at most K proposed tokens per step.

Draft mode is not like for like at small -n: anvil's draft model reads
the prompt at the first decode step, inside anvil's decode time, while
llama-speculative prefills the draft before its decode clock starts.

Decode tok/s on both sides counts the tokens after each request's first
one over the time from the end of the prefill to the end of the request,
summed over the set's prompts (llama.cpp's own printed speed counts the
first token too; it is kept in the JSON). Acceptance = accepted / proposed
summed over the set.

With -r R > 1 the sides alternate (anvil first on even passes, llama.cpp
first on odd ones) and each rate is the mean over passes.

Writes one JSON document (every run, every llama.cpp process's statistics,
the load average before and after) and prints a Markdown table on stdout;
progress goes to stderr.

usage: compare_spec_llamacpp.py [-m MODEL] [--spec ngram[,draft]] [--draft FILE]
                                [--prompts copy,free] [-n 192] [-t T] [-k 8]
                                [-r 1] [--json FILE] [--md FILE]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

from repo import default_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANVIL = os.path.join(ROOT, "bin", "anvil")
DEFAULT_MODEL = default_model()
N_CTX = 4096        # anvil bench --spec's engine context
K_MAX = 16          # ANVIL_SPEC_K_MAX
N_GEN_MAX = 1024    # bench_spec.c's MAX_GEN


def say(msg):
    print(msg, file=sys.stderr, flush=True)


class RunError(Exception):
    pass


def run(cmd, timeout, cwd=ROOT):
    """stdout and stderr of cmd (bytes args allowed); RunError on failure."""
    try:
        p = subprocess.run(cmd, cwd=cwd, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RunError(f"timed out after {timeout} s: {_show(cmd)}")
    out = p.stdout.decode("utf-8", "replace")
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode != 0:
        raise RunError(f"exit {p.returncode}: {_show(cmd)}\n{err[-2000:]}")
    return out, err


def _show(cmd):
    parts = [a.decode("utf-8", "replace") if isinstance(a, bytes) else a for a in cmd]
    return " ".join(p if len(p) < 60 and "\n" not in p else "<prompt>" for p in parts)


def llama_bin_dir():
    out, _ = run([os.path.join(ROOT, "bench", "build_llamacpp.sh")], timeout=None)
    return out.split()[-1]


# ---------------------------------------------------------------- prompts

def set_path(s):
    """bench_spec.c's rule: a bare name is bench/prompts/<name>.jsonl."""
    if "/" not in s and ".jsonl" not in s:
        return os.path.join(ROOT, "bench", "prompts", s + ".jsonl")
    return os.path.abspath(s)


def load_prompts(path):
    prompts = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            j = json.loads(line)
            if not isinstance(j, dict) or not isinstance(j.get("prompt"), str):
                raise ValueError(f"{path}: line {i} is not {{\"prompt\": \"...\"}}")
            prompts.append(j["prompt"])
    if not prompts:
        raise ValueError(f"{path} holds no prompt")
    return prompts[:64]  # bench_spec.c's MAX_PROMPTS


_PIECE = re.compile(r"^\s*(\d+) -> '(.*)'$")
_ESC = {"n": b"\n", "r": b"\r", "t": b"\t", "'": b"'", "\\": b"\\"}


def unescape_piece(s):
    """Bytes of one token as `anvil tokenize` prints it (cmd_tokenize.c
    put_piece: \\n \\r \\t \\' \\\\ \\xNN escaped, UTF-8 as is)."""
    out = bytearray()
    i = 0
    while i < len(s):
        c = s[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        e = s[i + 1]
        if e == "x":
            out.append(int(s[i + 2:i + 4], 16))
            i += 4
        else:
            out += _ESC[e]
            i += 2
    return bytes(out)


def chat_prompt(model, prompt):
    """(ids, text): the ids anvil bench --spec decodes from (the prompt as a
    user message in the chat template, assistant turn opened) and the text
    that tokenizes to exactly those ids with special tokens parsed and BOS
    added when the vocabulary asks - what llama.cpp's tools do with -p."""
    out, _ = run([ANVIL, "tokenize", "-m", model, "--chat", "-p", prompt], timeout=120)
    ids, pieces = [], []
    for line in out.splitlines():
        m = _PIECE.match(line)
        if not m:
            raise RunError(f"anvil tokenize: unexpected line {line!r}")
        ids.append(int(m.group(1)))
        pieces.append(unescape_piece(m.group(2)))
    # the rendering may start with BOS, which tokenizing adds back itself
    for skip in (0, 1):
        text = b"".join(pieces[skip:])
        if b"\0" in text:
            break
        back, _ = run([ANVIL, "tokenize", "-m", model, "--ids-only", "-p", text], timeout=120)
        if [int(x) for x in back.split()] == ids:
            return ids, text
    raise RunError("the chat rendering does not tokenize back to the same ids; "
                   "llama.cpp would see another prompt")


# ---------------------------------------------------------------- anvil

def run_anvil(a, mode):
    """One `anvil bench --spec MODE --batch 1` over every set: {set: record}."""
    cmd = [ANVIL, "bench", "-m", a.model, "--spec", mode, "--spec-k", str(a.k),
           "--prompts", ",".join(a.set_paths), "--batch", "1", "-n", str(a.n), "-t", str(a.t),
           "--json"]
    if mode == "draft":
        cmd += ["--draft", a.draft]
    out, _ = run(cmd, timeout=a.timeout)
    recs = [json.loads(x) for x in out.splitlines() if x.startswith("{")]
    if len(recs) != len(a.sets):
        raise RunError(f"anvil bench printed {len(recs)} records for {len(a.sets)} sets")
    return {name: r for name, r in zip(a.sets, recs)}


# ---------------------------------------------------------------- llama.cpp

_STATS = {
    "n_input": re.compile(r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds"),
    "decoded": re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s"),
    "n_drafted": re.compile(r"n_drafted\s*=\s*(\d+)"),
    "n_accept": re.compile(r"n_accept\s*=\s*(\d+)"),
}


def parse_llama(err):
    st = {}
    for key, rx in _STATS.items():
        hits = rx.findall(err)
        if not hits:
            raise RunError(f"llama.cpp printed no '{key}' statistic:\n{err[-1500:]}")
        st[key] = hits[-1]
    dec = st["decoded"]
    return {"n_input": int(st["n_input"][0]), "prefill_s": float(st["n_input"][1]),
            "n_predict": int(dec[0]), "decode_s": float(dec[1]), "printed_tok_s": float(dec[2]),
            "n_drafted": int(st["n_drafted"]), "n_accept": int(st["n_accept"])}


def run_llama(a, tool, text, k):
    """One llama.cpp process on one prompt; its statistics and its output."""
    cmd = [tool, "-m", a.model, "-p", text, "--no-escape", "-n", str(a.n), "-t", str(a.t),
           "-tb", str(a.t), "-c", str(N_CTX), "--temp", "0", "--spec-draft-n-max", str(k)]
    if tool.endswith("llama-speculative"):
        cmd += ["-md", a.draft, "-td", str(a.t), "-tbd", str(a.t), "-np", "1"]
    out, err = run(cmd, timeout=a.timeout)
    st = parse_llama(err)
    st["output"] = out
    return st


def llama_set(a, tool, name, prompts, k, label):
    """Every prompt of a set through one llama.cpp tool: per-prompt records
    and the set's totals in anvil bench's terms."""
    runs = []
    for i, p in enumerate(prompts):
        say(f"  llama.cpp {label} {name} prompt {i + 1}/{len(prompts)}")
        st = run_llama(a, tool, p["text"], k)
        st["prompt"] = i
        st["prompt_tokens_match"] = st["n_input"] == len(p["ids"])
        if not st["prompt_tokens_match"]:
            say(f"  WARNING: {name} prompt {i + 1}: llama.cpp tokenized {st['n_input']} tokens, "
                f"anvil {len(p['ids'])}")
        runs.append(st)
    n_dec = sum(max(r["n_predict"] - 1, 0) for r in runs)
    t_dec = sum(r["decode_s"] for r in runs)
    drafted = sum(r["n_drafted"] for r in runs)
    accepted = sum(r["n_accept"] for r in runs)
    steps = sum(r["n_predict"] - r["n_accept"] for r in runs)
    return {"tok_s": n_dec / t_dec if t_dec > 0 else 0.0, "decoded_tokens": n_dec,
            "decode_s": round(t_dec, 4), "drafted": drafted, "accepted_tokens": accepted,
            "accepted": accepted / drafted if drafted else 0.0,
            "tokens_per_step": sum(r["n_predict"] for r in runs) / steps if steps else 1.0,
            "runs": runs}


def same_greedy(plain, spec):
    """Speculating must not change greedy output: one text is a prefix of
    the other (llama-lookup and llama-speculative may overshoot -n by the
    tokens accepted in the last step; both end with blank lines)."""
    x, y = plain["output"].rstrip("\n"), spec["output"].rstrip("\n")
    return x.startswith(y) or y.startswith(x)


# ---------------------------------------------------------------- main

def save(path, doc):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", default=DEFAULT_MODEL,
                    help=f"GGUF model (default {DEFAULT_MODEL})")
    ap.add_argument("--spec", default="ngram",
                    help="comma list of ngram (llama-lookup) and draft (llama-speculative)")
    ap.add_argument("--draft", help="draft GGUF with the model's vocabulary (for --spec draft)")
    ap.add_argument("--prompts", default="copy,free",
                    help="comma list of copy, free (bench/prompts/*.jsonl) or .jsonl files")
    ap.add_argument("-n", type=int, default=192, help="max new tokens per prompt (default 192)")
    ap.add_argument("-t", type=int, default=os.cpu_count() or 1, help="threads (default: CPUs)")
    ap.add_argument("-k", type=int, default=8, help="max proposed tokens per step (default 8)")
    ap.add_argument("-r", type=int, default=1, help="passes, sides alternating (default 1)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per process")
    ap.add_argument("--json", dest="json_out",
                    default=os.path.join(ROOT, "bench", "results",
                                         "spec-llamacpp-" + time.strftime("%Y-%m-%d") + ".json"),
                    help="JSON file with every run (default bench/results/spec-llamacpp-DATE.json)")
    ap.add_argument("--md", help="also write the Markdown table here")
    a = ap.parse_args()
    a.modes = [x for x in a.spec.split(",") if x]
    if not a.modes or any(x not in ("ngram", "draft") for x in a.modes) or \
            len(set(a.modes)) != len(a.modes):
        ap.error("--spec must be a comma list of ngram, draft")
    if "draft" in a.modes and not a.draft:
        ap.error("--spec draft needs --draft FILE")
    if a.draft and "draft" not in a.modes:
        ap.error("--draft is only used with --spec draft")
    if not 2 <= a.n <= N_GEN_MAX:
        ap.error(f"-n must be in 2..{N_GEN_MAX}")
    if not 1 <= a.t <= 256:
        ap.error("-t must be in 1..256")
    if not 1 <= a.k <= K_MAX:
        ap.error(f"-k must be in 1..{K_MAX}")
    if a.r < 1:
        ap.error("-r must be positive")
    if a.timeout <= 0:
        ap.error("--timeout must be positive")
    a.model = os.path.abspath(a.model if os.path.isabs(a.model) or os.path.exists(a.model)
                              else os.path.join(ROOT, a.model))
    if not os.path.isfile(a.model):
        ap.error(f"no such model: {a.model}")
    if a.draft:
        a.draft = os.path.abspath(a.draft)
        if not os.path.isfile(a.draft):
            ap.error(f"no such draft model: {a.draft}")
    a.sets = [x for x in a.prompts.split(",") if x]
    if not a.sets or len(set(a.sets)) != len(a.sets):
        ap.error("--prompts must be a comma list of distinct sets")
    a.set_paths = [set_path(s) for s in a.sets]
    a.set_prompts = {}
    for s, path in zip(a.sets, a.set_paths):
        if not os.path.isfile(path):
            ap.error(f"no such prompt set: {s} ({path})")
        try:
            a.set_prompts[s] = load_prompts(path)
        except (ValueError, UnicodeDecodeError) as e:
            ap.error(str(e))
    if not os.access(ANVIL, os.X_OK):
        ap.error(f"{ANVIL} is missing: run make first")
    return a


def main():
    a = parse_args()
    bindir = llama_bin_dir()
    tools = {"plain": os.path.join(bindir, "llama-lookup"),
             "ngram": os.path.join(bindir, "llama-lookup"),
             "draft": os.path.join(bindir, "llama-speculative")}
    for mode in ["plain"] + a.modes:
        if not os.access(tools[mode], os.X_OK):
            say(f"compare_spec_llamacpp: {tools[mode]} is not built (bench/build_llamacpp.sh "
                "builds it when the llama.cpp source has it)")
            return 1

    say(f"compare_spec_llamacpp: rendering {sum(map(len, a.set_prompts.values()))} prompts")
    prompts = {s: [dict(zip(("ids", "text"), chat_prompt(a.model, p))) for p in ps]
               for s, ps in a.set_prompts.items()}
    doc = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_before": os.getloadavg(),
           "model": a.model, "draft": a.draft, "sets": dict(zip(a.sets, a.set_paths)),
           "n": a.n, "threads": a.t, "k": a.k, "passes": a.r, "n_ctx": N_CTX,
           "llama_bin": bindir,
           "llama_plain": "llama-lookup --spec-draft-n-max 0 (same tool, drafting off)",
           "llama_spec": {"ngram": "llama-lookup", "draft": "llama-speculative -np 1"},
           "prompt_tokens": {s: [len(p["ids"]) for p in ps] for s, ps in prompts.items()},
           "runs": []}
    try:
        for rep in range(a.r):
            order = ("anvil", "llama") if rep % 2 == 0 else ("llama", "anvil")
            for who in order:
                if who == "anvil":
                    for mode in a.modes:
                        say(f"[pass {rep + 1}/{a.r}] anvil bench --spec {mode}")
                        for s, rec in run_anvil(a, mode).items():
                            doc["runs"].append({**rec, "pass": rep, "side": "anvil", "set": s,
                                                "set_file": rec["set"], "spec": mode})
                    continue
                for s in a.sets:
                    say(f"[pass {rep + 1}/{a.r}] llama.cpp {s}")
                    plain = llama_set(a, tools["plain"], s, prompts[s], 0, "plain")
                    doc["runs"].append({"pass": rep, "side": "llama", "set": s, "spec": "off",
                                        **plain})
                    for mode in a.modes:
                        spec = llama_set(a, tools[mode], s, prompts[s], a.k, mode)
                        spec["same_output"] = all(
                            same_greedy(x, y) for x, y in zip(plain["runs"], spec["runs"]))
                        if not spec["same_output"]:
                            say(f"  WARNING: llama.cpp {mode} output differs from its plain greedy "
                                f"output on {s}")
                        doc["runs"].append({"pass": rep, "side": "llama", "set": s,
                                            "spec": mode, **spec})
    except RunError as e:
        say(f"compare_spec_llamacpp: {e}")
        return 1
    doc["load_after"] = os.getloadavg()
    save(a.json_out, doc)  # the runs are kept even if the summary below fails

    def mean(side, s, spec, key):
        xs = [r[key] for r in doc["runs"] if r["side"] == side and r["set"] == s and r["spec"] == spec]
        return statistics.mean(xs)

    rows = []
    for mode in a.modes:
        for s in a.sets:
            ap_ = mean("anvil", s, mode, "plain_tok_s")
            as_ = mean("anvil", s, mode, "spec_tok_s")
            lp = mean("llama", s, "off", "tok_s")
            ls = mean("llama", s, mode, "tok_s")
            rows.append({"set": s, "spec": mode, "anvil_plain": ap_, "anvil_spec": as_,
                         "anvil_speedup": as_ / ap_ if ap_ else None,
                         "anvil_accepted": mean("anvil", s, mode, "accepted"),
                         "anvil_tokens_per_step": mean("anvil", s, mode, "tokens_per_step"),
                         "llama_plain": lp, "llama_spec": ls,
                         "llama_speedup": ls / lp if lp else None,
                         "llama_accepted": mean("llama", s, mode, "accepted"),
                         "llama_tokens_per_step": mean("llama", s, mode, "tokens_per_step"),
                         "anvil_over_llama_spec": as_ / ls if ls else None})
    doc["table"] = rows
    mismatch = [(r["set"], x["prompt"]) for r in doc["runs"] if r["side"] == "llama"
                for x in r["runs"] if not x["prompt_tokens_match"]]
    differs = [(r["set"], r["spec"]) for r in doc["runs"]
               if r["side"] == "llama" and r["spec"] != "off" and not r["same_output"]]

    def f(x, fmt):
        return fmt.format(x) if x is not None else "-"

    lines = [f"model {os.path.basename(a.model)}, batch 1, greedy, -n {a.n}, -t {a.t}, k {a.k}, "
             f"{a.r} pass(es); tok/s = decode (tokens after the first, prefill excluded)",
             "llama.cpp plain = llama-lookup --spec-draft-n-max 0 (same tool, drafting off); "
             "spec = llama-lookup (ngram), llama-speculative (draft)",
             "",
             "| set | spec | anvil plain | anvil spec | speedup | accepted | llama.cpp plain | "
             "llama.cpp spec | speedup | accepted | anvil spec / llama.cpp spec |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['set']} | {r['spec']} | {r['anvil_plain']:.1f} | {r['anvil_spec']:.1f} | "
                     f"{f(r['anvil_speedup'], '{:.2f}x')} | {100 * r['anvil_accepted']:.1f}% | "
                     f"{r['llama_plain']:.1f} | {r['llama_spec']:.1f} | "
                     f"{f(r['llama_speedup'], '{:.2f}x')} | {100 * r['llama_accepted']:.1f}% | "
                     f"{f(r['anvil_over_llama_spec'], '{:.2f}x')} |")
    lines.append("")
    lines.append(f"load average before {doc['load_before'][0]:.2f}, after {doc['load_after'][0]:.2f}")
    if mismatch:
        lines.append(f"WARNING: llama.cpp's prompt token count differs from anvil's on {mismatch}")
    if differs:
        lines.append(f"WARNING: llama.cpp's speculative output differs from its plain output on {differs}")
    table = "\n".join(lines)
    doc["markdown"] = table

    save(a.json_out, doc)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(table + "\n")
    print(table)
    say(f"compare_spec_llamacpp: wrote {a.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
