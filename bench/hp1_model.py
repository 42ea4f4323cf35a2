#!/usr/bin/env python3
"""HP1 variants of a real model for the serving benchmarks, and
the serving scenarios of HP1 and softmax side by side.

    python3 bench/hp1_model.py convert [--model M] [--out F] [--zeros 0.7]
    python3 bench/hp1_model.py compare [--model M] [--hp1 F] [--scenario S[,S...]|all]
                                        [-t T] [--json FILE]

convert writes a copy of a llama-architecture GGUF (default: the default
model, SmolLM2-135M-Instruct Q4_1) whose every layer has HP1 gated
attention (docs/attention.md), into ~/.cache/anvil/hp1/ unless --out
says otherwise. Every tensor and every other metadata value is copied as
is; the file gains <arch>.attention.kind = "hp1" and the HP1 parameters.
No model ships with this attention, so the parameters are chosen, not
learned: taps (1, -a, -a) with the ReLU, lo 0, hi 1 (the served model's
shape in ../shared/seeds/hp1-attention-vllm-kernels.zh.md), with a per
layer and head calibrated so that the share of gate weights p that are
exactly zero is --zeros on a calibration text. The calibration runs the
model's own forward pass in numpy (float64, weights dequantized with the
gguf package) with the HP1 attention of the layers before: the scores a
layer sees depend on the layers below it. gamma (one per model)
scales the attention output of layer 0 to the size the softmax's would
have (weights summing to about 1 at the calibration length), so the hidden
states stay in range;
the text the model then writes is meaningless, which the benchmarks do not
mind (greedy, EOS ignored, fixed lengths).

compare runs `anvil bench --scenario` on both files (same binary, threads
and scenario list) and prints one table with the two side by side; --json
keeps both runs' records.

Needs numpy and gguf (the test venv has both) and bin/anvil (for the
tokenizer and the benchmark).
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np

from repo import default_model

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_MODEL = default_model()
ANVIL = os.path.join(ROOT, "bin", "anvil")
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "anvil", "hp1")

CALIB_TEXT = (
    "The history of computing is a story of people who wanted to think faster than their hands "
    "could write. Early mechanical calculators added and multiplied numbers with gears, and the "
    "difference engine promised tables without human error. Electronic machines replaced relays "
    "with vacuum tubes, then transistors, then integrated circuits that put millions of switches "
    "on a sliver of silicon. Programmers moved from wiring panels to assembly language, from "
    "assembly to compiled languages, and from single machines to networks that span the planet. "
    "Each step made computation cheaper and more abundant, and each step changed what people "
    "expected a computer to do.")


def die(msg):
    print(f"hp1_model.py: {msg}", file=sys.stderr)
    sys.exit(2)


# ---------------------------------------------------------------------------
# the model's forward pass in numpy, with calibrated HP1 attention


def field(reader, key, default=None):
    f = reader.fields.get(key)
    return f.contents() if f is not None else default


def tensor(reader, name):
    import gguf
    for t in reader.tensors:
        if t.name == name:
            data = gguf.quants.dequantize(t.data, t.tensor_type)
            return np.asarray(data, dtype=np.float64).reshape(tuple(int(x) for x in reversed(t.shape)))
    die(f"tensor {name} missing")


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_pairs(x, base):
    """RoPE on adjacent pairs (llama's layout in GGUF), x (n, heads, hd)."""
    n, _, hd = x.shape
    inv = base ** (-np.arange(0, hd, 2) / hd)
    ang = np.arange(n)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    a, b = x[..., 0::2], x[..., 1::2]
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def hp1_p(r, a, visible):
    """p of taps (1, -a, -a), lo 0, hi 1, gamma 1 from r = ReLU(scores)."""
    z = r.copy()
    z[:, 1:] -= a * r[:, :-1]
    z[:, 2:] -= a * r[:, :-2]
    return np.where(visible, np.clip(z, 0.0, 1.0), 0.0)


def calibrate_a(r, visible, zeros):
    """a >= 0 whose zero share of p over the visible pairs is closest to
    zeros (bisection: the share grows with a)."""
    n_vis = visible.sum()

    def share(a):
        return ((hp1_p(r, a, visible) == 0) & visible).sum() / n_vis

    lo, hi = 0.0, 1.0
    if share(lo) >= zeros:
        return lo, share(lo)
    while share(hi) < zeros and hi < 1024:
        lo, hi = hi, hi * 2
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        if share(mid) < zeros:
            lo = mid
        else:
            hi = mid
    return hi, share(hi)


def calibrate(reader, tokens, zeros):
    """taps (n_layer, n_head, 3), gamma, and the zero share per layer."""
    arch = field(reader, "general.architecture")
    if arch != "llama":
        die(f"calibration runs the llama forward pass; this file is {arch}")
    n_layer = field(reader, f"{arch}.block_count")
    nh = field(reader, f"{arch}.attention.head_count")
    nkv = field(reader, f"{arch}.attention.head_count_kv", nh)
    ne = field(reader, f"{arch}.embedding_length")
    base = field(reader, f"{arch}.rope.freq_base", 10000.0)
    eps = field(reader, f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    hd = ne // nh
    n = len(tokens)
    scale = 1.0 / np.sqrt(hd)
    visible = np.tril(np.ones((n, n), dtype=bool))
    x = tensor(reader, "token_embd.weight")[tokens]
    taps = np.zeros((n_layer, nh, 3), np.float32)
    sums, shares = [], []
    gamma = 1.0
    for l in range(n_layer):
        p = f"blk.{l}."
        h = rmsnorm(x, tensor(reader, p + "attn_norm.weight"), eps)
        q = (h @ tensor(reader, p + "attn_q.weight").T).reshape(n, nh, hd)
        k = (h @ tensor(reader, p + "attn_k.weight").T).reshape(n, nkv, hd)
        v = (h @ tensor(reader, p + "attn_v.weight").T).reshape(n, nkv, hd)
        q, k = rope_pairs(q, base), rope_pairs(k, base)
        out = np.zeros((n, nh, hd))
        layer_zero, layer_sum = [], []
        for i in range(nh):
            j = i // (nh // nkv)
            r = np.maximum(q[:, i, :] @ k[:, j, :].T * scale, 0.0)
            a, sh = calibrate_a(r, visible, zeros)
            taps[l, i] = (1.0, -a, -a)
            pw = hp1_p(r, a, visible)
            layer_zero.append(sh)
            layer_sum.append(pw.sum(axis=1).mean())
            out[:, i, :] = pw @ v[:, j, :]
        # gamma (one per model): from layer 0, the softmax-sized output there
        if l == 0:
            gamma = float(1.0 / max(np.mean(layer_sum), 1e-6))
        x = x + (gamma * out.reshape(n, -1)) @ tensor(reader, p + "attn_output.weight").T
        h = rmsnorm(x, tensor(reader, p + "ffn_norm.weight"), eps)
        gt, up = h @ tensor(reader, p + "ffn_gate.weight").T, h @ tensor(reader, p + "ffn_up.weight").T
        x = x + (gt / (1 + np.exp(-gt)) * up) @ tensor(reader, p + "ffn_down.weight").T
        sums.append(np.mean(layer_sum))
        shares.append(float(np.mean(layer_zero)))
        print(f"  layer {l:2d}: zero share {shares[-1]:.3f}, a in [{-taps[l, :, 1].max():.3f}, "
              f"{-taps[l, :, 1].min():.3f}], sum of p {sums[-1]:.2f}", file=sys.stderr)
    return taps, gamma, shares


# ---------------------------------------------------------------------------
# convert


def copy_with_hp1(src, dst, taps, gamma):
    import gguf
    r = gguf.GGUFReader(src)
    arch = field(r, "general.architecture")
    w = gguf.GGUFWriter(dst, arch)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        if f.name.startswith(f"{arch}.attention.kind") or f.name.startswith(f"{arch}.attention.hp1."):
            continue
        vt = f.types[0]
        sub = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vt, sub_type=sub)
    w.add_string(f"{arch}.attention.kind", "hp1")
    w.add_uint32(f"{arch}.attention.hp1.fir_k", 3)
    w.add_array(f"{arch}.attention.hp1.taps", [float(x) for x in taps.ravel()])
    w.add_float32(f"{arch}.attention.hp1.gamma", gamma)
    w.add_float32(f"{arch}.attention.hp1.lo", 0.0)
    w.add_float32(f"{arch}.attention.hp1.hi", 1.0)
    w.add_bool(f"{arch}.attention.hp1.relu", True)
    for t in r.tensors:
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in r.tensors:
        w.write_tensor_data(t.data)
    w.close()


def cmd_convert(args):
    import gguf
    if not os.path.exists(args.model):
        die(f"no model at {args.model} (make model)")
    if not 0.0 <= args.zeros < 1.0:
        die("--zeros must be in [0, 1)")
    out = args.out or os.path.join(
        CACHE, os.path.basename(args.model).replace(".gguf", f".hp1-z{int(round(args.zeros * 100))}.gguf"))
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    p = subprocess.run([ANVIL, "tokenize", "-m", args.model, "-p", CALIB_TEXT, "--ids-only"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        die(f"anvil tokenize failed: {p.stderr.strip()}")
    tokens = [int(t) for t in p.stdout.replace(",", " ").replace("[", " ").replace("]", " ").split()]
    tokens = tokens[:args.calib_tokens]
    print(f"calibrating on {len(tokens)} tokens for {args.zeros:.0%} zeros ...", file=sys.stderr)
    reader = gguf.GGUFReader(args.model)
    taps, gamma, shares = calibrate(reader, tokens, args.zeros)
    copy_with_hp1(args.model, out, taps, gamma)
    print(json.dumps({"out": out, "zeros_target": args.zeros, "zeros_reached": float(np.mean(shares)),
                      "gamma": gamma, "calib_tokens": len(tokens)}))


# ---------------------------------------------------------------------------
# compare


COLS = [("total_tok_s", "total tok/s", 1), ("ttft_p50_ms", "TTFT p50 ms", 0),
        ("ttft_p99_ms", "TTFT p99 ms", 0), ("itl_p50_ms", "ITL p50 ms", 1),
        ("itl_p99_ms", "ITL p99 ms", 1), ("peak_rss_mb", "RSS MB", 0), ("preemptions", "preempt", 0)]


def run_scenarios(model, scenario, threads, extra):
    cmd = ["nice", ANVIL, "bench", "-m", model, "--scenario", scenario, "-t", str(threads), "--json",
           *extra]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        die(f"{' '.join(cmd)} failed: {p.stderr.strip()}")
    return [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]


def cmd_compare(args):
    for f in (args.model, args.hp1):
        if not os.path.exists(f):
            die(f"no model at {f}")
    extra = ["--profile"] if args.profile else []
    recs = {}
    for kind, model in (("softmax", args.model), ("hp1", args.hp1)):
        for sc in args.scenario.split(","):
            print(f"running {sc} on {kind} ...", file=sys.stderr)
            for rec in run_scenarios(model, sc, args.threads, extra):
                rec["attention"] = kind
                recs[kind, rec["scenario"]] = rec
    if args.json:
        with open(args.json, "w") as f:
            for rec in recs.values():
                f.write(json.dumps(rec) + "\n")
    names = [s for (k, s) in recs if k == "softmax"]
    head = "| scenario | " + " | ".join(f"{c[1]} softmax / hp1" for c in COLS) + " | hp1/softmax tok/s |"
    if args.profile:
        head += " attention share softmax / hp1 |"
    print(head)
    print("|" + "---|" * (len(COLS) + 2 + (1 if args.profile else 0)))
    for sc in names:
        a, b = recs["softmax", sc], recs.get(("hp1", sc))
        if b is None:
            continue
        cells = [f"{a[k]:.{d}f} / {b[k]:.{d}f}" for k, _, d in COLS]
        line = f"| {sc} | " + " | ".join(cells) + f" | {b['total_tok_s'] / a['total_tok_s']:.2f}x |"
        if args.profile:
            line += f" {100 * a['prof_attn']:.1f}% / {100 * b['prof_attn']:.1f}% |"
        print(line)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="write the HP1 variant of a model")
    c.add_argument("--model", default=DEFAULT_MODEL)
    c.add_argument("--out", default=None, help=f"default: {CACHE}/<model>.hp1-z<zeros>.gguf")
    c.add_argument("--zeros", type=float, default=0.7, help="target share of p == 0 (default 0.7)")
    c.add_argument("--calib-tokens", type=int, default=160)
    m = sub.add_parser("compare", help="serving scenarios, softmax and HP1 side by side")
    m.add_argument("--model", default=DEFAULT_MODEL)
    m.add_argument("--hp1", default=os.path.join(CACHE, "SmolLM2-135M-Instruct.Q4_1.hp1-z70.gguf"))
    m.add_argument("--scenario", default="all")
    m.add_argument("-t", "--threads", type=int, default=os.cpu_count())
    m.add_argument("--profile", action="store_true", help="also the attention share (anvil bench --profile)")
    m.add_argument("--json", default=None, help="write both runs' records here")
    args = ap.parse_args()
    if args.cmd == "convert":
        cmd_convert(args)
    else:
        cmd_compare(args)


if __name__ == "__main__":
    main()
