#!/usr/bin/env python3
"""Quality of anvil's quantizer against llama.cpp's, type by type.

SmolLM2-135M (the shipped Q4_1 file, converted to F16 by `anvil quantize`)
is quantized to every mix by `anvil quantize` and by llama-quantize (same
F16 file), and each file is scored on the same text against the F16
model: file size, perplexity, KL divergence (mean, p99), the share of
positions whose top token is the same, and the RMS change of the next
token's probability. Goal: anvil's mean KL divergence is never
worse than llama.cpp's by more than 2%, for every type.

Scoring engine (--engine):
  llama  llama-perplexity (built by bench/build_llamacpp.sh) scores both
         sides' files: a like-for-like comparison of the two quantizers
         with the native peer (full-vocabulary KL, as llama-perplexity
         computes it);
  anvil  `anvil perplexity --save-logits/--kl-divergence` (KL over the base's
         top-128 tokens plus the rest: a lower bound of the full KL).

Text: fortune cookies of the Debian package `fortunes`
(/usr/share/games/fortunes: literature, wisdom, people, science, ...;
quotes and short prose), concatenated in a fixed order, '%' separators
dropped; windows of --ctx tokens, --chunks of them.

Writes bench/results/quality-<date>.json and .md. Runs niced; everything
it makes goes to ~/.cache/anvil/quality (the files are kept for reuse:
delete the directory to start over).

    ~/.cache/anvil/venv/bin/python bench/quality.py [--chunks 16] [--ctx 512] [-t 2]
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time

from repo import default_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("ANVIL_CACHE", os.path.expanduser("~/.cache/anvil"))
MODEL = default_model()
ANVIL = os.path.join(ROOT, "bin", "anvil")

# the mixes people download first, then the rest
MIXES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K", "IQ4_XS", "Q8_0", "Q5_K_S", "Q5_1",
         "Q5_0", "Q4_K_S", "IQ4_NL", "Q4_1", "Q4_0", "Q3_K_L", "Q3_K_S"]
FORTUNE_DIR = "/usr/share/games/fortunes"
FORTUNE_FILES = ["literature", "wisdom", "people", "science", "art", "education", "humorists",
                 "love", "work", "politics", "law", "medicine", "food", "pets", "sports", "kids",
                 "platitudes", "miscellaneous", "news", "goedel", "tao", "paradoxum", "magic",
                 "riddles"]


def log(msg):
    print(f"quality: {msg}", file=sys.stderr, flush=True)


def run(cmd, **kw):
    kw.setdefault("check", True)
    kw.setdefault("text", True)
    return subprocess.run(cmd, **kw)


def corpus(path):
    if os.path.exists(path):
        return path
    if not os.path.isdir(FORTUNE_DIR):
        sys.exit("quality.py: the text comes from the Debian package `fortunes` "
                 f"({FORTUNE_DIR} is missing): apt-get install fortunes (make deps)")
    parts = []
    for name in FORTUNE_FILES:
        with open(os.path.join(FORTUNE_DIR, name), encoding="utf-8", errors="replace") as f:
            for entry in f.read().split("\n%\n"):
                entry = entry.strip("\n")
                if entry.strip() and entry.strip() != "%":
                    parts.append(entry)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        f.write("\n\n".join(parts) + "\n")
    os.replace(path + ".tmp", path)
    return path


def llama_bin():
    out = run([os.path.join(ROOT, "bench", "build_llamacpp.sh")], capture_output=True).stdout
    return out.strip().splitlines()[-1]


def quantize(kind, src, dst, mix, threads, llama_dir):
    if os.path.exists(dst):
        return 0.0
    t0 = time.time()
    tmp = dst + ".part"
    if kind == "anvil":
        run([ANVIL, "quantize", "-q", "-t", str(threads), src, tmp, mix])
    else:
        run([os.path.join(llama_dir, "llama-quantize"), src, tmp, mix, str(threads)],
            capture_output=True)
    os.replace(tmp, dst)
    return time.time() - t0


# ----------------------------------------------------------------------------
# scoring

def parse_llama_kld(out):
    def num(pat):
        m = re.search(pat, out)
        if not m:
            raise RuntimeError(f"llama-perplexity output has no /{pat}/:\n{out[-3000:]}")
        return float(m.group(1))
    return {
        "ppl": num(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)"),
        "ppl_err": num(r"Mean PPL\(Q\)\s*:\s*[0-9.]+\s*±\s*([0-9.]+)"),
        "base_ppl": num(r"Mean PPL\(base\)\s*:\s*([0-9.]+)"),
        "kl_mean": num(r"Mean\s+KLD:\s*([0-9.eE+-]+)"),
        "kl_err": num(r"Mean\s+KLD:\s*[0-9.eE+-]+\s*±\s*([0-9.eE+-]+)"),
        "kl_p99": num(r"99\.0%\s+KLD:\s*([0-9.eE+-]+)"),
        "kl_median": num(r"Median\s+KLD:\s*([0-9.eE+-]+)"),
        "same_top": num(r"Same top p:\s*([0-9.]+)") / 100.0,
        "dp_rms": num(r"RMS Δp\s*:\s*([0-9.]+)") / 100.0,
        "dp_p99": num(r"99\.0%\s+Δp:\s*(-?[0-9.]+)") / 100.0,
    }


class LlamaScorer:
    def __init__(self, llama_dir, text, ctx, chunks, threads, work):
        self.exe = os.path.join(llama_dir, "llama-perplexity")
        self.text, self.ctx, self.chunks, self.threads = text, ctx, chunks, threads
        self.base = os.path.join(work, f"base.llama.c{ctx}.n{chunks}.kld")

    def common(self):
        return ["-c", str(self.ctx), "--chunks", str(self.chunks), "-t", str(self.threads),
                "-b", str(self.ctx)]

    def save_base(self, f16):
        if not os.path.exists(self.base):
            run([self.exe, "-m", f16, "-f", self.text, "--kl-divergence-base", self.base + ".part",
                 *self.common()], capture_output=True)
            os.replace(self.base + ".part", self.base)

    def score(self, path):
        p = run([self.exe, "-m", path, "--kl-divergence-base", self.base, "--kl-divergence",
                 *self.common()], capture_output=True)
        return parse_llama_kld(p.stdout + p.stderr)


class AnvilScorer:
    def __init__(self, text, ctx, chunks, threads, work):
        self.text, self.ctx, self.chunks, self.threads = text, ctx, chunks, threads
        self.base = os.path.join(work, f"base.anvil.c{ctx}.n{chunks}.kld")

    def save_base(self, f16):
        if not os.path.exists(self.base):
            run([ANVIL, "perplexity", "-m", f16, "-f", self.text, "-c", str(self.ctx),
                 "--chunks", str(self.chunks), "-t", str(self.threads), "--save-logits",
                 self.base + ".part"], capture_output=True)
            os.replace(self.base + ".part", self.base)

    def score(self, path):
        p = run([ANVIL, "perplexity", "-m", path, "--kl-divergence", self.base, "-t",
                 str(self.threads), "--json"], capture_output=True)
        j = json.loads(p.stdout)
        return {"ppl": j["ppl"], "ppl_err": j["ppl_err"], "base_ppl": j["base_ppl"],
                "kl_mean": j["kl_mean"], "kl_err": j["kl_err"], "kl_p99": j["kl_p99"],
                "kl_median": j["kl_median"], "same_top": j["same_top"], "dp_rms": j["dp_rms"],
                "dp_p99": j["dp_abs_p99"]}


# ----------------------------------------------------------------------------

def markdown(rec):
    m = rec["meta"]
    lines = [
        f"# Quantizer quality: anvil vs llama.cpp ({m['date']})",
        "",
        f"SmolLM2-135M-Instruct, the shipped Q4_1 file converted to F16 by `anvil quantize`, "
        f"then quantized to each mix by `anvil quantize` (commit {m['commit']}) and by "
        f"llama-quantize (llama-cpp-python {m['llama_version']}'s vendored llama.cpp, built "
        f"natively). Scored by {m['engine_desc']} on {m['scored']} positions: {m['chunks']} "
        f"windows of {m['ctx']} tokens of the Debian `fortunes` text, second half of each "
        f"window. Base: the F16 model (PPL {m['base_ppl']:.3f}). KL = mean KL(F16 || quantized) "
        f"per position; same top = share of positions with the same most likely token; "
        f"RMS dp = RMS change of the next token's probability.",
        "",
        "| mix | MiB anvil | MiB llama | PPL anvil | PPL llama | KL anvil | KL llama | "
        "KL anvil/llama | KL p99 anvil | KL p99 llama | same top anvil | same top llama | "
        "RMS dp anvil | RMS dp llama | goal |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rec["rows"]:
        a, b = r["anvil"], r["llama"]
        ratio = a["kl_mean"] / b["kl_mean"] if b["kl_mean"] > 0 else float("nan")
        lines.append(
            f"| {r['mix']} | {a['mib']:.2f} | {b['mib']:.2f} | {a['ppl']:.3f} | {b['ppl']:.3f} | "
            f"{a['kl_mean']:.5f} | {b['kl_mean']:.5f} | {ratio:.3f} | {a['kl_p99']:.4f} | "
            f"{b['kl_p99']:.4f} | {100 * a['same_top']:.2f}% | {100 * b['same_top']:.2f}% | "
            f"{100 * a['dp_rms']:.2f}% | {100 * b['dp_rms']:.2f}% | "
            f"{'ok' if ratio <= 1.02 else 'MISS'} |")
    lines += ["", f"Goal met (anvil KL <= 1.02 x llama.cpp's) for "
              f"{sum(1 for r in rec['rows'] if r['goal_met'])}/{len(rec['rows'])} mixes.", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--mixes", default=",".join(MIXES))
    ap.add_argument("--engine", choices=["llama", "anvil"], default="llama")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--tag", default="", help="suffix of the result file names")
    a = ap.parse_args()
    try:
        os.nice(10)
    except OSError:
        pass
    work = os.path.join(CACHE, "quality")
    os.makedirs(work, exist_ok=True)
    if not os.path.exists(ANVIL):
        sys.exit("quality.py: bin/anvil is missing (make)")
    if not os.path.exists(MODEL):
        sys.exit(f"quality.py: {MODEL} is missing (make model)")
    llama_dir = llama_bin()
    text = corpus(os.path.join(work, "fortunes.txt"))
    f16 = os.path.join(work, "smol.F16.gguf")
    quantize("anvil", MODEL, f16, "F16", a.threads, llama_dir)
    if a.engine == "llama":
        scorer = LlamaScorer(llama_dir, text, a.ctx, a.chunks, a.threads, work)
        desc = "llama-perplexity --kl-divergence (full vocabulary)"
    else:
        scorer = AnvilScorer(text, a.ctx, a.chunks, a.threads, work)
        desc = "anvil perplexity --kl-divergence (base top-128 + rest)"
    log("base logits of the F16 model")
    scorer.save_base(f16)
    commit = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True).stdout.strip()
    date = datetime.date.today().isoformat()
    meta = {"date": date, "commit": commit, "engine": a.engine, "engine_desc": desc,
            "ctx": a.ctx, "chunks": a.chunks, "scored": a.chunks * (a.ctx - 1 - a.ctx // 2),
            "threads": a.threads, "text": "Debian fortunes: " + ",".join(FORTUNE_FILES),
            "model": os.path.basename(MODEL), "llama_version": "0.3.36", "llama_dir": llama_dir,
            "base_ppl": None}
    os.makedirs(a.out, exist_ok=True)
    stem = os.path.join(a.out, f"quality-{date}{a.tag}")
    rows = []
    for mix in filter(None, a.mixes.split(",")):
        row = {"mix": mix}
        for kind in ("anvil", "llama"):
            path = os.path.join(work, f"smol.{mix}.{kind}.gguf")
            secs = quantize(kind, f16, path, mix, a.threads, llama_dir)
            log(f"{mix} {kind}: scoring")
            s = scorer.score(path)
            s["mib"] = os.path.getsize(path) / 2**20
            s["quantize_s"] = round(secs, 2)
            row[kind] = s
            meta["base_ppl"] = s["base_ppl"]
        row["kl_ratio"] = row["anvil"]["kl_mean"] / row["llama"]["kl_mean"]
        row["goal_met"] = row["kl_ratio"] <= 1.02
        log(f"{mix}: KL anvil {row['anvil']['kl_mean']:.5f} llama {row['llama']['kl_mean']:.5f} "
            f"(x{row['kl_ratio']:.3f})")
        rows.append(row)
        # written after every mix: a long run interrupted keeps what it measured
        rec = {"meta": meta, "rows": rows}
        with open(stem + ".json", "w") as f:
            json.dump(rec, f, indent=1)
        with open(stem + ".md", "w") as f:
            f.write(markdown(rec))
    print(stem + ".md")


if __name__ == "__main__":
    main()
