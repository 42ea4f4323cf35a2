#!/usr/bin/env python3
"""anvil's batched decode against llama.cpp's own llama-batched-bench (built
natively by bench/build_llamacpp.sh), side by side in one run.

For every B in --npl: `anvil bench --batched` and `llama-batched-bench`
(flash attention on, n_batch 2048, n_ubatch 512, the context B*(PP+TG)),
both prefilling B distinct prompts of PP tokens and then decoding TG steps
of B rows. The order is ABBA (anvil, llama, llama, anvil) so that a drift
of the machine's load falls on both alike; each side's S_TG (decode tok/s)
and S_PP are the means of its two passes. llama-batched-bench's prompts are
its own (random token ids); decode speed does not depend on the values.

Writes one JSON document (every pass, the means, the ratios, the load
average before and after) and prints a Markdown table.

usage: compare_batched_llamacpp.py MODEL [--npp 64] [--ntg 128]
           [--npl 16,32,64] [-t 2] [--json FILE]
"""
import argparse
import json
import os
import subprocess
import time

from compare_llamacpp import ANVIL, abba, llama_tool, save


def run_anvil(model, npp, ntg, b, t):
    cmd = [ANVIL, "bench", "-m", model, "--batched", "--npp", str(npp), "--ntg", str(ntg),
           "--npl", str(b), "-t", str(t), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            return {"s_pp": j["s_pp_tok_s"], "s_tg": j["s_tg_tok_s"]}
    raise RuntimeError("anvil bench --batched printed no result")


def run_llama(binary, model, npp, ntg, b, t):
    cmd = [binary, "-m", model, "-c", str(b * (npp + ntg)), "-b", "2048", "-ub", "512",
           "-npp", str(npp), "-ntg", str(ntg), "-npl", str(b), "-t", str(t), "-fa", "on",
           "--output-format", "jsonl"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.startswith("{"):
            j = json.loads(line)
            return {"s_pp": j["speed_pp"], "s_tg": j["speed_tg"]}
    raise RuntimeError("llama-batched-bench printed no result")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--npp", type=int, default=64)
    ap.add_argument("--ntg", type=int, default=128)
    ap.add_argument("--npl", default="16,32,64")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("--json", dest="json_out")
    a = ap.parse_args()
    npl = [int(x) for x in a.npl.split(",")]
    if a.npp < 1 or a.ntg < 1 or a.t < 1 or any(b < 1 for b in npl):
        ap.error("--npp, --ntg, -t and every --npl must be positive")
    if not os.path.isfile(a.model):
        ap.error(f"no such model: {a.model}")
    llama = llama_tool("llama-batched-bench")
    doc = {"load_before": os.getloadavg(), "npp": a.npp, "ntg": a.ntg, "threads": a.t,
           "model": os.path.basename(a.model), "llama_batched_bench": llama,
           "flash_attn": "on", "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "rows": []}
    for i, b in enumerate(npl):
        row = abba(f"[{i + 1}/{len(npl)}] B={b}", lambda: run_anvil(a.model, a.npp, a.ntg, b, a.t),
                   lambda: run_llama(llama, a.model, a.npp, a.ntg, b, a.t), ("s_pp", "s_tg"))
        row["npl"] = b
        doc["rows"].append(row)
    save(doc, a.json_out)
    print(f"| B | S_TG anvil | S_TG llama-batched-bench (fa on) | ratio | S_PP anvil | "
          f"S_PP llama | ratio |")
    print("|---|---|---|---|---|---|---|")
    for r in doc["rows"]:
        print(f"| {r['npl']} | {r['s_tg']['anvil']:.1f} | {r['s_tg']['llama']:.1f} | "
              f"{r['s_tg']['ratio']:.2f}x | {r['s_pp']['anvil']:.1f} | {r['s_pp']['llama']:.1f} | "
              f"{r['s_pp']['ratio']:.2f}x |")
    print(f"load average before {doc['load_before'][0]:.2f}, after {doc['load_after'][0]:.2f}")


if __name__ == "__main__":
    main()
