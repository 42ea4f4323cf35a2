#!/usr/bin/env python3
"""How far prompt lookup can go on a model's own greedy output.

Speculative decoding with prompt lookup (n-gram) can only propose tokens
that appeared earlier in the sequence. How many of a model's tokens it can
get right depends on how much that model copies: this script measures it
offline, on the tokens `anvil bench --spec ... --dump-tokens FILE` wrote
(each prompt's tokens and its greedy output), with verification taken as
free (a step verifying k proposals costing what a one-token step costs).

For every set in FILE it prints tokens per forward pass (the speedup free
verification would give) for:

  engine   the engine's proposer (src/engine/spec.c): the most recent
           earlier occurrence of the last 4, 3, then 2 tokens, up to k
           proposals with k adapted to the acceptance as the engine does
           (k_max 8, --k-max);
  fixed-k  the same proposals, always k_max long;
  ceiling  an oracle: at every step, the longest correct run any earlier
           occurrence of any suffix (1 to 8 tokens) would have proposed,
           up to 16 tokens. No single-candidate lookup proposer does
           better on that output.

Usage: bench/spec_ceiling.py FILE [--k-max K] [--n-max N] [--json]
"""
import argparse
import json
import sys


def propose(toks, k, n_max=4, n_min=2):
    """spec_ngram_propose: the longest suffix (n_max..n_min) found earlier,
    most recent occurrence first; what followed it, up to k tokens."""
    n_t = len(toks)
    for n in range(n_max, n_min - 1, -1):
        if n_t <= n:
            continue
        suf = toks[-n:]
        for j in range(n_t - n - 1, -1, -1):
            if toks[j:j + n] == suf:
                out = toks[j + n:j + n + k]
                if out:
                    return out
    return []


class Adapt:
    """spec_adapt_init / spec_adapt_update."""

    def __init__(self, k_max):
        self.k_max = max(1, k_max)
        self.rate = 0.5
        self.k = min(self.k_max, 4)

    def update(self, proposed, accepted):
        if proposed <= 0:
            return
        self.rate = 0.7 * self.rate + 0.3 * accepted / proposed
        run = self.rate / (1.0 - self.rate) if self.rate < 0.95 else 19.0
        self.k = max(1, min(self.k_max, int(run + 1.5)))


def run_len(prop, out, g):
    a = 0
    while a < len(prop) and g + a < len(out) and prop[a] == out[g + a]:
        a += 1
    return a


def simulate(prompt, out, k_max, adaptive):
    """(tokens, passes) after the first token, proposals as the engine's."""
    ad = Adapt(k_max)
    g, passes = 1, 0
    while g < len(out):
        k = min(ad.k if adaptive else k_max, len(out) - g - 1)
        prop = propose(prompt + out[:g], k) if k > 0 else []
        acc = run_len(prop, out, g)
        if prop:
            ad.update(len(prop), acc)
        g += acc + 1
        passes += 1
    return max(len(out) - 1, 0), passes


def ceiling(prompt, out, n_max, k_cap=16):
    g, passes = 1, 0
    while g < len(out):
        toks = prompt + out[:g]
        best = 0
        for n in range(1, n_max + 1):
            if len(toks) <= n:
                break
            suf = toks[-n:]
            for j in range(len(toks) - n - 1, -1, -1):
                if toks[j:j + n] == suf:
                    best = max(best, run_len(toks[j + n:j + n + k_cap], out, g))
        g += min(best + 1, len(out) - g)
        passes += 1
    return max(len(out) - 1, 0), passes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--k-max", type=int, default=8)
    ap.add_argument("--n-max", type=int, default=8, help="longest suffix the ceiling looks up")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    sets = {}
    try:
        with open(a.file) as f:
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                r = json.loads(line)
                sets.setdefault(r["set"], []).append((list(r["prompt"]), list(r["output"])))
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"spec_ceiling.py: {a.file}: {e}")
    if not a.json:
        print("| set | prompts | output tokens | engine | fixed-k | ceiling |")
        print("|---|---|---|---|---|---|")
    for name, rows in sets.items():
        res = {}
        for label, fn in (("engine", lambda p, o: simulate(p, o, a.k_max, True)),
                          ("fixed_k", lambda p, o: simulate(p, o, a.k_max, False)),
                          ("ceiling", lambda p, o: ceiling(p, o, a.n_max))):
            t = s = 0
            for p, o in rows:
                tt, ss = fn(p, o)
                t, s = t + tt, s + ss
            res[label] = t / s if s else 1.0
        n_out = sum(len(o) for _, o in rows)
        if a.json:
            print(json.dumps({"set": name, "prompts": len(rows), "output_tokens": n_out,
                              "k_max": a.k_max, **{k: round(v, 3) for k, v in res.items()}}))
        else:
            print(f"| {name} | {len(rows)} | {n_out} | {res['engine']:.2f} | "
                  f"{res['fixed_k']:.2f} | {res['ceiling']:.2f} |")


if __name__ == "__main__":
    main()
