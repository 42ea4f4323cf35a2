#!/usr/bin/env python3
"""anvil against llama.cpp's own llama-bench (built natively by
bench/build_llamacpp.sh), side by side in one run: for every model and
thread count, pp<P> and tg<N> of `anvil bench` and of llama-bench, in ABBA
order (anvil, llama, llama, anvil) so that a drift of the machine's load
falls on both alike. Each side's rate is the mean over its two passes.

Writes one JSON document (every pass, the means, the ratios, the load
average before and after) and prints a Markdown table.

usage: compare_llamacpp.py MODEL [MODEL...] [-p 512] [-n 128] [-t 1,2]
                           [-r 3] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ANVIL = os.path.join(ROOT, "bin", "anvil")


def llama_bin():
    out = subprocess.run([os.path.join(ROOT, "bench", "build_llamacpp.sh")], check=True,
                         capture_output=True, text=True).stdout.split()
    return os.path.join(out[-1], "llama-bench")


def say(msg):
    print(msg, file=sys.stderr, flush=True)


def run_anvil(model, p, n, t, r):
    cmd = [ANVIL, "bench", "-m", model, "-p", str(p), "-n", str(n), "-t", str(t), "-r", str(r),
           "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    rec = {}
    for line in out.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            rec[j["test"][:2]] = (j["tok_s"], j.get("tok_s_sd", 0.0), j.get("kernels"))
    return rec


def run_llama(binary, model, p, n, t, r):
    rec = {}
    # one process per test, like anvil's: pp with -n 0, tg with -p 0
    for test, pp, tg in (("pp", p, 0), ("tg", 0, n)):
        cmd = [binary, "-m", model, "-p", str(pp), "-n", str(tg), "-t", str(t), "-r", str(r),
               "-o", "jsonl"]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("{"):
                j = json.loads(line)
                rec[test] = (j["avg_ts"], j.get("stddev_ts", 0.0), None)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", default="2")
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--json", dest="json_out")
    a = ap.parse_args()
    threads = [int(x) for x in a.t.split(",")]
    if any(t < 1 for t in threads) or a.p < 1 or a.n < 1 or a.r < 1:
        ap.error("-p, -n, -r and every -t must be positive")
    for m in a.models:
        if not os.path.isfile(m):
            ap.error(f"no such model: {m}")
    llama = llama_bin()
    doc = {"load_before": os.getloadavg(), "p": a.p, "n": a.n, "reps": a.r,
           "llama_bench": llama, "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": []}
    steps = len(a.models) * len(threads) * 4
    k = 0
    for m in a.models:
        for t in threads:
            passes = {"anvil": [], "llama": []}
            for who in ("anvil", "llama", "llama", "anvil"):
                k += 1
                say(f"[{k}/{steps}] {os.path.basename(m)} t={t} {who}")
                rec = run_anvil(m, a.p, a.n, t, a.r) if who == "anvil" else \
                    run_llama(llama, m, a.p, a.n, t, a.r)
                passes[who].append(rec)
            row = {"model": os.path.basename(m), "threads": t,
                   "kernels": passes["anvil"][0]["pp"][2], "passes": passes}
            for test in ("pp", "tg"):
                an = statistics.mean(x[test][0] for x in passes["anvil"])
                ll = statistics.mean(x[test][0] for x in passes["llama"])
                row[test] = {"anvil": round(an, 2), "llama": round(ll, 2),
                             "ratio": round(an / ll, 3) if ll > 0 else None}
            doc["rows"].append(row)
    doc["load_after"] = os.getloadavg()
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(doc, f, indent=1)
    print(f"| model | t | pp{a.p} anvil | pp{a.p} llama-bench | ratio | tg{a.n} anvil | "
          f"tg{a.n} llama-bench | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in doc["rows"]:
        print(f"| {r['model']} | {r['threads']} | {r['pp']['anvil']:.1f} | {r['pp']['llama']:.1f} | "
              f"{r['pp']['ratio']:.2f}x | {r['tg']['anvil']:.1f} | {r['tg']['llama']:.1f} | "
              f"{r['tg']['ratio']:.2f}x |")
    print(f"load average before {doc['load_before'][0]:.2f}, after {doc['load_after'][0]:.2f}")


if __name__ == "__main__":
    main()
