#!/usr/bin/env python3
"""Charts of anvil's benchmarks, drawn with matplotlib from their JSON lines.

`anvil bench ... --png FILE` runs this script on the records of the run
(the lines --json prints, plus what only the chart needs, such as every
latency sample of a serving scenario). It can also be run by hand on saved
records, e.g. those in bench/results/:

    python3 bench/plot.py KIND --out FILE.png [--quant Q] [--compare FILE]... DATA...
    python3 bench/plot.py KIND --check [--out FILE.png] [--compare FILE]...

KIND is one of
    kernels    `anvil-microbench --kernels`: decode GB/s of weights per type and
               variant against the memory read bandwidth, prefill GFLOP/s,
               and GFLOP/s against the activation rows m
    batched    `anvil bench --batched`: S_PP and S_TG against the parallel
               sequences B, one series per "label" (anvil, and the peers of
               --compare files, e.g. bench/bench_llamacpp_batched.py's)
    scenarios  `anvil bench --scenario`: throughput per scenario (prompt and
               generated tokens), TTFT and inter-token latency distributions
    attention  `anvil-microbench --attention`: KV GB/s against the context length
               per batch, with the read bandwidth, and the split-K speedup

--check only verifies what a run would need (matplotlib, the --compare
files, the output directory), so that `anvil bench` fails before a long run
rather than after it. Exit status: 0 ok, 1 failure, 2 bad input (one line on
stderr names the file and line), 3 matplotlib cannot be imported (silent
with --check: anvil then tries another Python).

Nothing here measures anything; the numbers are the benchmarks' own.
"""
import argparse
import json
import math
import os
import sys

PROG = "plot.py"

EXIT_FAILED, EXIT_BAD_INPUT, EXIT_NO_MATPLOTLIB = 1, 2, 3

# ---------------------------------------------------------------------------
# input


class BadInput(Exception):
    pass


def read_records(path):
    """The JSON objects of a JSON-lines file, blank lines skipped."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise BadInput(f"cannot open {path}: {e.strerror}") from None
    recs = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except ValueError:
            r = None
        if not isinstance(r, dict):
            raise BadInput(f"{path}:{i}: not a JSON object")
        r["_where"] = f"{path}:{i}"
        recs.append(r)
    return recs


def is_num(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def need(r, keys, what):
    """r must hold every key of keys with a number (or, for names, a string)."""
    bad = [k for k, t in keys.items() if not (is_num(r.get(k)) if t is float else isinstance(r.get(k), t))]
    if bad:
        raise BadInput(f"{r['_where']}: a {what} record needs {', '.join(keys)} "
                       f"(missing or wrong: {', '.join(bad)})")


def peer_rows(path, quant):
    """Rows of a --compare file: other engines' batched runs, one series per
    "label". Rows of another quant than ours, and anvil's own rows, are left
    out (such a file often holds several runs)."""
    rows = []
    for r in read_records(path):
        if isinstance(r.get("quant"), str) and quant and r["quant"] != quant:
            continue
        if isinstance(r.get("engine"), str) and r["engine"].startswith("anvil"):
            continue
        if not (isinstance(r.get("label"), str) and all(is_num(r.get(k)) for k in
                                                         ("npl", "s_pp_tok_s", "s_tg_tok_s"))):
            raise BadInput(f"{r['_where']}: needs label, npl, s_pp_tok_s and s_tg_tok_s")
        rows.append(r)
    return rows


# ---------------------------------------------------------------------------
# style


def setup():
    """Import matplotlib headless and set the house look; None if missing."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    plt.rcParams.update({
        "font.family": "DejaVu Sans",  # ships with matplotlib: same look everywhere
        "font.size": 10,
        "axes.titlesize": 11.5,
        "axes.titleweight": "bold",
        "axes.titlepad": 10,
        "axes.labelsize": 10,
        "axes.labelcolor": "#333333",
        "axes.edgecolor": "#999999",
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "axes.axisbelow": True,
        "grid.color": "#e6e6e6",
        "grid.linewidth": 0.8,
        "xtick.color": "#444444",
        "ytick.color": "#444444",
        "legend.frameon": False,
        "legend.fontsize": 9,
        "figure.facecolor": "white",
        "savefig.facecolor": "white",
        "lines.linewidth": 2.0,
        "lines.markersize": 6,
    })
    return plt


PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
           "#7f7f7f", "#bcbd22", "#17becf"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*", "<", ">"]


def titles(fig, title, subtitle):
    fig.suptitle(title, fontsize=14, fontweight="bold", x=0.01, ha="left", y=0.995)
    if subtitle:
        fig.text(0.01, 0.935, subtitle, fontsize=9.5, color="#555555", ha="left", va="top")


def log2_axis(ax, values):
    """x on a log scale with a tick at each measured value, printed plainly."""
    from matplotlib.ticker import FixedLocator, NullLocator
    vals = sorted(set(values))
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(vals))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([f"{v:g}" for v in vals])
    if len(vals) > 1:
        ax.set_xlim(vals[0] / 1.35, vals[-1] * 1.35)
    ax.grid(True, which="major", axis="both")


def plain_log_ticks(ax):
    """Log-scale x ticks at 1, 2, 5 x 10^k, written as plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}" if v >= 1 else f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def fmt(v):
    """Short value label: 3 significant digits, no exponent for usual sizes."""
    if not is_num(v):
        return ""
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}" if v >= 0.1 else f"{v:.2g}"


def bar_labels(ax, bars, values, size=7.5):
    for b, v in zip(bars, values):
        if is_num(v):
            ax.annotate(fmt(v), (b.get_x() + b.get_width() / 2, b.get_height()),
                        xytext=(0, 2), textcoords="offset points", ha="center", va="bottom",
                        fontsize=size, color="#333333")


def first(recs, key, default=""):
    for r in recs:
        if key in r:
            return r[key]
    return default


# ---------------------------------------------------------------------------
# kernels

VARIANT_ORDER = ["ref", "avx2", "avx512", "avx512p"]
VARIANT_NAMES = {"avx512p": "avx512 packed"}
# bytes of one row of n weights (ggml block layouts: 32 weights a block)
ROW_BYTES = {"F32": lambda n: 4 * n, "F16": lambda n: 2 * n, "BF16": lambda n: 2 * n,
             "Q8_0": lambda n: n // 32 * 34, "Q4_0": lambda n: n // 32 * 18,
             "Q4_1": lambda n: n // 32 * 20}


def plot_kernels(plt, recs):
    mm = [r for r in recs if r.get("bench") == "matmul"]
    if not mm:
        raise BadInput("no matmul records (anvil-microbench --kernels)")
    for r in mm:
        need(r, {"variant": str, "type": str, "shape": str, "n": float, "rows": float,
                 "m": float, "threads": float, "us": float}, "matmul")
    types = list(dict.fromkeys(r["type"] for r in mm))
    variants = sorted(set(r["variant"] for r in mm),
                      key=lambda v: VARIANT_ORDER.index(v) if v in VARIANT_ORDER else 99)
    shapes = list(dict.fromkeys(r["shape"] for r in mm))
    ms = sorted(set(r["m"] for r in mm))
    threads = mm[0]["threads"]
    by = {(r["variant"], r["type"], r["shape"], r["m"]): r for r in mm}

    def agg(v, t, m, what):
        """Over all shapes, as a forward pass adds them: total work / total
        time; None unless every shape has a number."""
        rs = [by.get((v, t, s, m)) for s in shapes]
        if any(r is None for r in rs):
            return None
        us = sum(r["us"] for r in rs)
        if what == "gbps":
            size = ROW_BYTES.get(t)
            work = sum(size(r["n"]) * r["rows"] if size else r["gbps"] * r["us"] * 1e3 for r in rs)
        else:
            work = sum(2.0 * r["m"] * r["n"] * r["rows"] for r in rs)
        return work / us / 1e3

    m_lo, m_hi = ms[0], ms[-1]
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.6))
    fig.subplots_adjust(left=0.045, right=0.99, bottom=0.12, top=0.80, wspace=0.2)
    colors = {v: PALETTE[i % len(PALETTE)] for i, v in enumerate(VARIANT_ORDER)}
    x = list(range(len(types)))
    for ax, m, what, unit, head in ((axes[0], m_lo, "gbps", "GB/s of weights", "decode"),
                                    (axes[1], m_hi, "gflops", "GFLOP/s", "prefill")):
        shown = [v for v in variants if any(agg(v, t, m, what) is not None for t in types)]
        width = 0.8 / max(len(shown), 1)
        for i, v in enumerate(shown):
            vals = [agg(v, t, m, what) for t in types]
            xs = [k - 0.4 + width * (i + 0.5) for k in x]
            bars = ax.bar(xs, [y if y is not None else 0 for y in vals], width * 0.92,
                          color=colors.get(v), label=VARIANT_NAMES.get(v, v))
            bar_labels(ax, bars, vals, size=7.5 if len(shown) * len(types) <= 24 else 6.5)
        ax.set_xticks(x)
        ax.set_xticklabels(types)
        ax.set_xlabel("weight type")
        ax.set_ylabel(unit)
        ax.set_title(f"{head}, m = {m:g}: {unit}")
        ax.grid(False, axis="x")
        ax.legend(loc="upper left", title="kernels", title_fontsize=9)
    # the ceiling a decode matmul cannot pass: reading its weights once
    bw_threads = 2 if threads > 1 else 1
    bw = [r for r in recs if r.get("bench") == "membw" and r.get("threads") == bw_threads
          and is_num(r.get("gbps"))]
    ax = axes[0]
    if bw:
        g = bw[0]["gbps"]
        ax.axhline(g, color="#444444", linestyle="--", linewidth=1.3, zorder=3)
        ax.annotate(f"memory read {g:.1f} GB/s ({bw_threads} thread{'s' if bw_threads > 1 else ''})",
                    (1.0, g), xycoords=("axes fraction", "data"), xytext=(-4, 4),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8.5,
                    color="#333333")
        # headroom above the line for the legend
        ax.set_ylim(0, max(ax.get_ylim()[1] * 1.12, g * 1.4))
    # GFLOP/s against m for the fastest variant present at the largest m
    best = [v for v in variants if any(agg(v, t, m_hi, "gflops") is not None for t in types)]
    ax = axes[2]
    if best:
        v = best[-1]
        for i, t in enumerate(types):
            pts = [(m, agg(v, t, m, "gflops")) for m in ms]
            pts = [(m, y) for m, y in pts if y is not None]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS[i % len(MARKERS)],
                        color=PALETTE[i % len(PALETTE)], label=t)
        ax.legend(loc="upper left", title=f"{VARIANT_NAMES.get(v, v)}", title_fontsize=9)
        ax.set_title("GFLOP/s against activation rows m")
    log2_axis(ax, ms)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("activation rows m (tokens per call)")
    ax.set_ylabel("GFLOP/s")
    r0 = mm[0]
    titles(fig, f"anvil matmul kernels: SmolLM2-135M shapes ({', '.join(shapes)}), "
                f"{threads} thread{'s' if threads > 1 else ''}, "
                f"{r0.get('weights', '?')} weights",
           f"commit {r0.get('commit', '?')}  ·  cpu {r0.get('cpu', '?')}  ·  "
           f"{r0.get('clock', 'wall')} clock  ·  each bar and point sums the shapes "
           f"(total work / total time)" + ("  ·  dashed: memory read bandwidth" if bw else ""))
    return fig


# ---------------------------------------------------------------------------
# batched


def plot_batched(plt, recs, peers, quant):
    own = [r for r in recs if r.get("bench") == "batched"]
    if quant:
        own = [r for r in own if r.get("quant") in (quant, None)]
    elif own:
        quant = own[0].get("quant")
        own = [r for r in own if r.get("quant") in (quant, None)]
    if not own:
        raise BadInput("no batched records (bench --batched)" + (f" of {quant}" if quant else ""))
    for r in own:
        need(r, {"npl": float, "s_pp_tok_s": float, "s_tg_tok_s": float}, "batched")
    series = {}
    for r in own + peers:
        series.setdefault(r.get("label", r.get("engine", "anvil")), []).append(r)
    fig, axes = plt.subplots(1, 2, figsize=(15, 5.8))
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.11, top=0.80, wspace=0.16)
    all_b = sorted(set(r["npl"] for rs in series.values() for r in rs))
    for ax, key, head in ((axes[0], "s_pp_tok_s", "prefill S_PP"),
                          (axes[1], "s_tg_tok_s", "decode S_TG")):
        for i, (label, rs) in enumerate(series.items()):
            rs = sorted(rs, key=lambda r: r["npl"])
            xs, ys = [r["npl"] for r in rs], [r[key] for r in rs]
            ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)], color=PALETTE[i % len(PALETTE)],
                    label=label, zorder=3 if i == 0 else 2)
            if i == 0:  # anvil's own values, the ones this run measured
                for xv, yv in zip(xs, ys):
                    ax.annotate(fmt(yv), (xv, yv), xytext=(0, 7), textcoords="offset points",
                                ha="center", fontsize=8, color=PALETTE[0])
        log2_axis(ax, all_b)
        ax.set_ylim(bottom=0, top=ax.get_ylim()[1] * 1.08)
        ax.set_xlabel("parallel sequences B")
        ax.set_ylabel("tokens/s")
        ax.set_title(f"{head} (tokens/s)")
        ax.legend(loc="best")
    r0 = own[0]
    threads = r0.get("threads", "?")
    titles(fig, f"batched decode: {r0.get('model', '?')}, {threads} threads, "
                f"PP {r0.get('npp', '?')}, TG {r0.get('ntg', '?')}",
           f"kernels {r0.get('kernels', '?')}  ·  KV {r0.get('kv_type', '?')}  ·  "
           f"n_batch {r0.get('n_batch', '?')}  ·  commit {r0.get('commit', '?')}  ·  "
           f"S_PP = B·PP / T_PP, S_TG = B·TG / T_TG (llama-batched-bench)")
    return fig


# ---------------------------------------------------------------------------
# scenarios


def cdf(ax, samples, color, label):
    xs = sorted(s for s in samples if is_num(s) and s > 0)
    if not xs:
        return
    n = len(xs)
    ys = [(i + 1) / n for i in range(n)]
    ax.step([xs[0]] + xs, [0.0] + ys, where="post", color=color, label=label, linewidth=1.8)


def plot_scenarios(plt, recs):
    rows = [r for r in recs if "scenario" in r and r.get("bench") != "scenario_samples"]
    if not rows:
        raise BadInput("no scenario records (bench --scenario)")
    for r in rows:
        need(r, {"scenario": str, "total_tok_s": float, "prefill_tok_s": float,
                 "decode_tok_s": float}, "scenario")
    samples = {r["scenario"]: r for r in recs if r.get("bench") == "scenario_samples"}
    names = [r["scenario"] for r in rows]
    color = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    fig, axes = plt.subplots(1, 3, figsize=(19, 6.2), gridspec_kw={"width_ratios": [1.15, 1, 1]})
    fig.subplots_adjust(left=0.11, right=0.99, bottom=0.1, top=0.82, wspace=0.22)

    ax = axes[0]
    y = list(range(len(rows)))[::-1]
    pre = [r["prefill_tok_s"] for r in rows]
    dec = [r["decode_tok_s"] for r in rows]
    ax.barh(y, pre, 0.7, color=[color[n] for n in names], alpha=0.45)
    ax.barh(y, dec, 0.7, left=pre, color=[color[n] for n in names])
    for yy, r in zip(y, rows):
        ax.annotate(f"{r['total_tok_s']:.0f}", (r["total_tok_s"], yy), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8.5, color="#333333")
    ax.set_yticks(y)
    ax.set_yticklabels(names)
    ax.set_xlim(0, max(r["total_tok_s"] for r in rows) * 1.15)
    ax.grid(False, axis="y")
    ax.set_xlabel("tokens/s: (prompt + generated) / wall")
    ax.set_title("throughput (light: prompt, dark: generated)")

    for ax, key, head in ((axes[1], "ttft", "time to first token"),
                          (axes[2], "itl", "inter-token latency")):
        for r in rows:
            n = r["scenario"]
            s = samples.get(n, {}).get(f"{key}_ms")
            if isinstance(s, list) and s:
                cdf(ax, s, color[n], n)
            elif is_num(r.get(f"{key}_p50_ms")) and is_num(r.get(f"{key}_p99_ms")):
                # saved records without samples: the two percentiles they keep
                ax.plot([r[f"{key}_p50_ms"], r[f"{key}_p99_ms"]], [0.5, 0.99], marker="o",
                        linestyle=":", color=color[n], label=f"{n} (p50, p99)")
        ax.set_xscale("log")
        plain_log_ticks(ax)
        ax.set_ylim(0, 1.02)
        ax.axhline(0.5, color="#bbbbbb", linewidth=0.9, linestyle="--", zorder=1)
        ax.axhline(0.99, color="#bbbbbb", linewidth=0.9, linestyle="--", zorder=1)
        ax.set_xlabel("ms (log scale)")
        ax.set_ylabel("fraction of " + ("requests" if key == "ttft" else "token gaps"))
        ax.set_title(f"{head}, cumulative distribution")
    axes[1].legend(loc="lower right", fontsize=8)
    axes[2].legend(loc="lower right", fontsize=8)
    r0 = rows[0]
    threads = r0.get("threads", "?")
    titles(fig, f"anvil serving scenarios: {r0.get('model', '?')}, {threads} threads",
           f"kernels {r0.get('kernels', '?')}  ·  commit {r0.get('commit', '?')}  ·  "
           f"all requests at t = 0, greedy, EOS ignored (SCENARIOS.md)  ·  "
           f"dashed lines: p50 and p99")
    return fig


# ---------------------------------------------------------------------------
# attention


def plot_attention(plt, recs):
    rows = [r for r in recs if r.get("bench") == "attention"]
    if not rows:
        raise BadInput("no attention records (anvil-microbench --attention)")
    for r in rows:
        need(r, {"shape": str, "batch": float, "ctx": float, "split": str, "us": float,
                 "gbs": float}, "attention")
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    threads = rows[0].get("threads", 1)
    bw = [r["gbs"] for r in recs if r.get("bench") == "read_bw" and r.get("threads") == threads
          and is_num(r.get("gbs"))]
    fig, axes = plt.subplots(len(shapes), 2, figsize=(15, 4.6 * len(shapes) + 1.1), squeeze=False)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.08 / len(shapes),
                        top=1 - 1.3 / (4.6 * len(shapes) + 1.1), wspace=0.16, hspace=0.38)
    for si, shape in enumerate(shapes):
        rs = [r for r in rows if r["shape"] == shape]
        by = {(r["batch"], r["ctx"], r["split"]): r for r in rs}
        batches = sorted(set(r["batch"] for r in rs))
        ctxs = sorted(set(r["ctx"] for r in rs))
        splits = set(r["split"] for r in rs)
        main = "auto" if "auto" in splits else sorted(splits)[0]
        r0 = rs[0]
        dims = f"{r0.get('n_head', '?')}/{r0.get('n_head_kv', '?')} heads, dim {r0.get('head_dim', '?')}"
        ax = axes[si][0]
        for i, b in enumerate(batches):
            pts = [(c, by[(b, c, main)]["gbs"]) for c in ctxs if (b, c, main) in by]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS[i % len(MARKERS)],
                        color=PALETTE[i % len(PALETTE)], label=f"batch {b:g}")
        if bw:
            ax.axhline(bw[0], color="#444444", linestyle="--", linewidth=1.3)
            ax.annotate(f"read bandwidth {bw[0]:.1f} GB/s", (1.0, bw[0]),
                        xycoords=("axes fraction", "data"), xytext=(-4, 4),
                        textcoords="offset points", ha="right", va="bottom", fontsize=8.5)
            ax.set_ylim(0, max(ax.get_ylim()[1], bw[0] * 1.15))
        else:
            ax.set_ylim(bottom=0)
        log2_axis(ax, ctxs)
        ax.set_xlabel("context length (KV tokens per sequence)")
        ax.set_ylabel("GB/s of KV read")
        ax.set_title(f"{shape} ({dims}): KV read, split {main}")
        ax.legend(loc="best", fontsize=8, ncol=2)
        ax = axes[si][1]
        if {"off", "on"} <= splits:
            for i, b in enumerate(batches):
                pts = [(c, by[(b, c, "off")]["us"] / by[(b, c, "on")]["us"]) for c in ctxs
                       if (b, c, "off") in by and (b, c, "on") in by]
                if not pts:
                    continue
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=MARKERS[i % len(MARKERS)],
                        color=PALETTE[i % len(PALETTE)], label=f"batch {b:g}")
                # filled where auto chose to split, hollow where it did not
                for c, s in pts:
                    a = by.get((b, c, "auto"))
                    if a is not None and a.get("split_used") is False:
                        ax.plot([c], [s], marker=MARKERS[i % len(MARKERS)], color="white",
                                markeredgecolor=PALETTE[i % len(PALETTE)], zorder=4)
            ax.axhline(1.0, color="#444444", linestyle="--", linewidth=1.1)
            ax.set_ylabel("time without split / time with split")
            ax.set_title(f"{shape}: split-K speedup (hollow: auto did not split)")
            ax.legend(loc="best", fontsize=8, ncol=2)
        else:
            ax.text(0.5, 0.5, "split-K speedup needs --split off,on", ha="center", va="center",
                    transform=ax.transAxes, color="#777777")
            ax.set_title(f"{shape}: split-K speedup")
        log2_axis(ax, ctxs)
        ax.set_xlabel("context length (KV tokens per sequence)")
    r0 = rows[0]
    titles(fig, f"decode attention over the paged KV cache: {threads} thread"
                f"{'s' if threads != 1 else ''}, KV {r0.get('kv_type', '?')}, "
                f"block {r0.get('block', '?')}",
           f"kernels {r0.get('kernels', '?')}  ·  {r0.get('clock', 'wall')} clock  ·  "
           f"commit {r0.get('commit', '?')}  ·  one decode row per sequence, KV spread over "
           f"more memory than the caches hold")
    return fig


# ---------------------------------------------------------------------------
# command


def main(argv):
    global PROG
    ap = argparse.ArgumentParser(prog="plot.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=["kernels", "batched", "scenarios", "attention"])
    ap.add_argument("data", nargs="*", help="JSON-lines files of the benchmark's records")
    ap.add_argument("--out", "-o", help="the PNG to write")
    ap.add_argument("--check", action="store_true",
                    help="only check matplotlib, --compare files and the output directory")
    ap.add_argument("--compare", action="append", default=[],
                    help="batched: JSON lines of other engines (one series per label)")
    ap.add_argument("--quant", help="batched: the weight type to plot (default: the first record's)")
    ap.add_argument("--as", dest="as_", help=argparse.SUPPRESS)  # anvil's name for messages
    a = ap.parse_intermixed_args(argv)
    if a.as_:
        PROG = a.as_
    plt = setup()
    if plt is None:
        if not a.check:
            print(f"{PROG}: needs matplotlib, which {sys.executable} cannot import; install it "
                  "with `pip install matplotlib` or Debian's python3-matplotlib", file=sys.stderr)
        return EXIT_NO_MATPLOTLIB
    try:
        if a.compare and a.kind != "batched":
            raise BadInput("--compare is for batched charts")
        peers = [r for path in a.compare for r in peer_rows(path, a.quant)]
        if a.out:
            d = os.path.dirname(os.path.abspath(a.out))
            if not os.path.isdir(d) or not os.access(d, os.W_OK):
                raise BadInput(f"cannot write {a.out}: {d} is not a writable directory")
        if a.check:
            return 0
        if not a.out or not a.data:
            raise BadInput("needs --out FILE and at least one data file")
        recs = [r for path in a.data for r in read_records(path)]
        if a.kind == "kernels":
            fig = plot_kernels(plt, recs)
        elif a.kind == "batched":
            fig = plot_batched(plt, recs, peers, a.quant)
        elif a.kind == "scenarios":
            fig = plot_scenarios(plt, recs)
        else:
            fig = plot_attention(plt, recs)
    except BadInput as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        fig.savefig(a.out, dpi=110)
    except OSError as e:
        print(f"{PROG}: cannot write {a.out}: {e.strerror}", file=sys.stderr)
        return EXIT_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
