#!/usr/bin/env python3
"""anvil against llama.cpp's own llama-bench (built natively by
bench/build_llamacpp.sh), side by side in one run: for every model and
thread count, pp<P> and tg<N> of `anvil bench` and of llama-bench, in ABBA
order (anvil, llama, llama, anvil) so that a drift of the machine's load
falls on both alike. Each side's rate is the mean over its two passes.

Writes one JSON document (every pass, the means, the ratios, the load
average before and after) and prints a Markdown table.

With --bw, the machine's read bandwidth at the same thread count
(anvil-microbench --kernels' streaming read) is measured before every pass and after
the last, and each side's decode is reported as a share of it: weight
bytes read per generated token (every tensor of the file but the token
embedding, which a step reads one row of unless it is also the output
matrix; of a mixture of experts' stacked expert tensors, the share
expert_used_count / expert_count that one token's router picks) times tg
tok/s, over the mean of the bandwidths measured around
that side's passes. Decode of a model bigger than the caches is bound by
that bandwidth, so this share, not the ratio, says how close to the limit
each engine runs.

usage: compare_llamacpp.py MODEL [MODEL...] [-p 512] [-n 128] [-t 1,2]
                           [-r 3] [--bw] [--json FILE]
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
MICROBENCH = os.path.join(ROOT, "bin", "anvil-microbench")


def llama_tool(name="llama-bench", amx=False):
    """Path of one of llama.cpp's native tools (bench/build_llamacpp.sh builds them;
    amx: the build with AMX, for a machine that grants it)."""
    cmd = [os.path.join(ROOT, "bench", "build_llamacpp.sh")] + (["--amx"] if amx else [])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.split()
    return os.path.join(out[-1], name)


def abba(label, run_anvil_pass, run_llama_pass, keys, say_extra=None):
    """Passes in ABBA order (anvil, llama, llama, anvil); returns the passes
    and, per key, each side's mean over its two passes and their ratio. A
    pass returns {key: rate} (or {key: (rate, ...)})."""
    passes = {"anvil": [], "llama": []}
    for i, who in enumerate(("anvil", "llama", "llama", "anvil")):
        extra = say_extra(i) if say_extra else ""
        say(f"{label} {who}{extra}")
        passes[who].append(run_anvil_pass() if who == "anvil" else run_llama_pass())
    row = {"passes": passes}
    for key in keys:
        rate = lambda x: x[key][0] if isinstance(x[key], (tuple, list)) else x[key]  # noqa: E731
        an = statistics.mean(rate(x) for x in passes["anvil"])
        ll = statistics.mean(rate(x) for x in passes["llama"])
        row[key] = {"anvil": round(an, 2), "llama": round(ll, 2),
                    "ratio": round(an / ll, 3) if ll > 0 else None}
    return row


def save(doc, json_out):
    doc["load_after"] = os.getloadavg()
    if json_out:
        with open(json_out, "w") as f:
            json.dump(doc, f, indent=1)


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
            kern = j.get("kernels", "") + ("+amx" if j.get("amx") else "")
            rec[j["test"][:2]] = (j["tok_s"], j.get("tok_s_sd", 0.0), kern)
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


def read_bw(t):
    """GB/s of anvil's streaming read at t threads (anvil-microbench --kernels)."""
    cmd = [MICROBENCH, "--kernels", "-t", str(t), "--types", "Q4_0", "--shapes", "kv",
           "--m", "1", "-r", "1", "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            if j.get("bench") == "membw" and j.get("threads") == t:
                return j["gbps"]
    raise RuntimeError("anvil-microbench --kernels printed no bandwidth")


def decode_bytes(model):
    """Weight bytes a decode step reads (see the module's docstring)."""
    import gguf  # the test venv has it
    r = gguf.GGUFReader(model)
    names = {t.name: int(t.n_bytes) for t in r.tensors}
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    n_exp = r.fields.get(f"{arch}.expert_count")
    n_used = r.fields.get(f"{arch}.expert_used_count")
    share = 1.0
    if n_exp is not None and n_used is not None:
        share = int(n_used.parts[-1][0]) / int(n_exp.parts[-1][0])
    total = 0.0
    for name, n in names.items():
        # a mixture of experts: one token reads its chosen experts' slices
        # of each stacked expert tensor (blk.N.ffn_{gate,up,down}_exps.*)
        total += n * share if "_exps." in name else n
    if "output.weight" in names and "token_embd.weight" in names:
        total -= names["token_embd.weight"]
    return int(total)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("-t", default="2")
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--json", dest="json_out")
    ap.add_argument("--amx", action="store_true",
                    help="the peer is llama.cpp built with AMX (build_llamacpp.sh --amx), "
                         "the native build on a machine that grants the tiles")
    ap.add_argument("--bw", action="store_true",
                    help="measure read bandwidth around each pass; decode as a share of it")
    a = ap.parse_args()
    threads = [int(x) for x in a.t.split(",")]
    if any(t < 1 for t in threads) or a.p < 1 or a.n < 1 or a.r < 1:
        ap.error("-p, -n, -r and every -t must be positive")
    for m in a.models:
        if not os.path.isfile(m):
            ap.error(f"no such model: {m}")
    llama = llama_tool(amx=a.amx)
    doc = {"load_before": os.getloadavg(), "p": a.p, "n": a.n, "reps": a.r,
           "llama_bench": llama, "llama_amx": a.amx, "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": []}
    steps = len(a.models) * len(threads) * 4
    k = 0
    for m in a.models:
        for t in threads:
            bw = []  # bw[i] before pass i; bw[4] after the last

            def before(i):
                if not a.bw:
                    return ""
                bw.append(read_bw(t))
                return f" (read bandwidth {bw[-1]:.1f} GB/s)"

            k += 4
            row = abba(f"[{k - 3}-{k}/{steps}] {os.path.basename(m)} t={t}",
                       lambda: run_anvil(m, a.p, a.n, t, a.r),
                       lambda: run_llama(llama, m, a.p, a.n, t, a.r), ("pp", "tg"), before)
            passes = row["passes"]
            row.update({"model": os.path.basename(m), "threads": t,
                        "kernels": passes["anvil"][0]["pp"][2]})
            if a.bw:
                bw.append(read_bw(t))
                nbytes = decode_bytes(m)
                # the bandwidth around each side's passes: anvil 0,1 and 3,4; llama 1,2 and 2,3
                around = {"anvil": statistics.mean([bw[0], bw[1], bw[3], bw[4]]),
                          "llama": statistics.mean([bw[1], bw[2], bw[2], bw[3]])}
                row["bw"] = {"gbps": bw, "decode_bytes": nbytes}
                for who in ("anvil", "llama"):
                    tg = statistics.mean(x["tg"][0] for x in passes[who])
                    row["bw"][who + "_share"] = round(nbytes * tg / 1e9 / around[who], 3)
            doc["rows"].append(row)
    save(doc, a.json_out)
    print(f"| model | t | pp{a.p} anvil | pp{a.p} llama-bench | ratio | tg{a.n} anvil | "
          f"tg{a.n} llama-bench | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for r in doc["rows"]:
        print(f"| {r['model']} | {r['threads']} | {r['pp']['anvil']:.1f} | {r['pp']['llama']:.1f} | "
              f"{r['pp']['ratio']:.2f}x | {r['tg']['anvil']:.1f} | {r['tg']['llama']:.1f} | "
              f"{r['tg']['ratio']:.2f}x |")
    for r in doc["rows"]:
        if "bw" in r:
            b = r["bw"]
            print(f"{r['model']} t={r['threads']}: decode reads {b['decode_bytes'] / 1e6:.0f} MB "
                  f"per token; read bandwidth {min(b['gbps']):.1f}-{max(b['gbps']):.1f} GB/s; "
                  f"tg as a share of it: anvil {100 * b['anvil_share']:.0f}%, "
                  f"llama-bench {100 * b['llama_share']:.0f}%")
    print(f"load average before {doc['load_before'][0]:.2f}, after {doc['load_after'][0]:.2f}")


if __name__ == "__main__":
    main()
