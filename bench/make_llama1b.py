#!/usr/bin/env python3
"""Write a random-weight GGUF of Llama-3.2-1B's shape, for benchmarks.

Shape: 16 layers, hidden 2048, 32 query / 8 KV heads (head dim 64), FFN
8192, vocabulary 128256 with the embedding tied to the output (as the
real model), RoPE base 500000. The vocabulary is a real one: Llama 3's BPE
(tokenizer.* keys copied from vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf
in the llama-cpp-python 0.3.36 sdist), so prompts tokenize as they would.

Speed depends on shapes, not values: weights are normal with std 0.02 and
norms are 1, which keeps activations finite through the 16 layers (the
logits mean nothing). Written in F16 (~2.5 GB) with the gguf package, one
tensor at a time, then quantized to Q4_K_M (~0.8 GB) with `anvil quantize`
(or --quantizer llama: llama-quantize from bench/build_llamacpp.sh).

Files go to a cache directory outside the repository (default
~/.cache/anvil/models); existing files are kept (idempotent). Prints the
paths. Run it niced on a shared machine:

    nice bench/make_llama1b.py [--out-dir DIR] [--types Q4_K_M,Q8_0] [--quantizer anvil|llama]
"""
import argparse
import os
import subprocess
import sys
import tarfile
import time

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("make_llama1b.py: needs the gguf package (the test venv has it: "
             "~/.cache/anvil/venv/bin/python bench/make_llama1b.py)")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.environ.get("ANVIL_CACHE", os.path.expanduser("~/.cache/anvil"))
SDIST_VERSION = "0.3.36"
VOCAB_MEMBER = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/models/ggml-vocab-llama-bpe.gguf"

N_LAYER, N_EMBD, N_FF, N_HEAD, N_HEAD_KV, N_VOCAB = 16, 2048, 8192, 32, 8, 128256
HEAD_DIM = N_EMBD // N_HEAD
STD = 0.02


def log(msg):
    print(f"make_llama1b: {msg}", file=sys.stderr, flush=True)


def vocab_file():
    """The Llama 3 BPE vocabulary GGUF, extracted from the cached sdist."""
    out = os.path.join(CACHE, "vocab", "ggml-vocab-llama-bpe.gguf")
    if os.path.exists(out):
        return out
    sdist = os.path.join(CACHE, "sdist", f"llama_cpp_python-{SDIST_VERSION}.tar.gz")
    if not os.path.exists(sdist):
        log("downloading the llama-cpp-python sdist (pip download)")
        os.makedirs(os.path.dirname(sdist), exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary",
                        ":all:", f"llama-cpp-python=={SDIST_VERSION}", "-d",
                        os.path.dirname(sdist)], check=True)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with tarfile.open(sdist) as tf:
        src = tf.extractfile(VOCAB_MEMBER)
        with open(out + ".tmp", "wb") as f:
            f.write(src.read())
    os.replace(out + ".tmp", out)
    return out


def copy_tokenizer(w, path):
    r = gguf.GGUFReader(path)
    n = 0
    for key, field in r.fields.items():
        if not key.startswith("tokenizer."):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub_type=sub)
        n += 1
    tokens = r.fields["tokenizer.ggml.tokens"]
    if len(tokens.data) != N_VOCAB:
        sys.exit(f"make_llama1b.py: {path} has {len(tokens.data)} tokens, expected {N_VOCAB}")
    return n


def tensor_plan():
    """(name, numpy shape (rows, cols), kind) in file order; the embedding is tied."""
    kv = HEAD_DIM * N_HEAD_KV
    plan = [("token_embd.weight", (N_VOCAB, N_EMBD), "w")]
    for i in range(N_LAYER):
        p = f"blk.{i}."
        plan += [
            (p + "attn_norm.weight", (N_EMBD,), "norm"),
            (p + "attn_q.weight", (N_EMBD, N_EMBD), "w"),
            (p + "attn_k.weight", (kv, N_EMBD), "w"),
            (p + "attn_v.weight", (kv, N_EMBD), "w"),
            (p + "attn_output.weight", (N_EMBD, N_EMBD), "w"),
            (p + "ffn_norm.weight", (N_EMBD,), "norm"),
            (p + "ffn_gate.weight", (N_FF, N_EMBD), "w"),
            (p + "ffn_up.weight", (N_FF, N_EMBD), "w"),
            (p + "ffn_down.weight", (N_EMBD, N_FF), "w"),
        ]
    plan.append(("output_norm.weight", (N_EMBD,), "norm"))
    return plan


def write_f16(path, seed):
    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, "llama")
    w.add_name("llama-3.2-1b-shape-random")
    w.add_description("random weights (normal, std 0.02) in Llama-3.2-1B's shape, for benchmarks")
    w.add_block_count(N_LAYER)
    w.add_context_length(131072)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(500000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(N_VOCAB)
    w.add_file_type(1)
    n = copy_tokenizer(w, vocab_file())
    log(f"copied {n} tokenizer keys")
    plan = tensor_plan()
    for name, shape, kind in plan:
        dt = np.float32 if kind == "norm" else np.float16
        nbytes = int(np.prod(shape)) * np.dtype(dt).itemsize
        w.add_tensor_info(name, shape, np.dtype(dt), nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    t0 = time.time()
    total = sum(int(np.prod(s)) for _, s, _ in plan)
    done = 0
    for i, (name, shape, kind) in enumerate(plan):
        if kind == "norm":
            a = np.ones(shape, dtype=np.float32)
        else:
            a = np.empty(shape, dtype=np.float16)
            rows = max(1, (64 << 20) // (shape[1] * 4))  # 64 MiB of float32 at a time
            for r in range(0, shape[0], rows):
                block = rng.standard_normal((min(rows, shape[0] - r), shape[1]), dtype=np.float32)
                a[r:r + rows] = block * STD
        w.write_tensor_data(a)
        done += a.size
        print(f"\rmake_llama1b: writing F16 {100 * done / total:5.1f}% ({i + 1}/{len(plan)} "
              f"tensors, {time.time() - t0:.0f} s)", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    w.close()
    os.replace(tmp, path)


def quantize(src, dst, mix, quantizer):
    tmp = dst + ".part"
    if quantizer == "anvil":
        cmd = [os.path.join(ROOT, "bin", "anvil"), "quantize", src, tmp, mix]
    else:
        b = subprocess.run([os.path.join(ROOT, "bench", "build_llamacpp.sh")], check=True,
                           capture_output=True, text=True).stdout.strip().splitlines()[-1]
        cmd = [os.path.join(b, "llama-quantize"), src, tmp, mix]
    log(" ".join(cmd))
    subprocess.run(cmd, check=True)
    os.replace(tmp, dst)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default=os.path.join(CACHE, "models"))
    ap.add_argument("--types", default="Q4_K_M", help="comma-separated mixes ('' for F16 only)")
    ap.add_argument("--quantizer", choices=["anvil", "llama"], default="anvil")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    f16 = os.path.join(a.out_dir, "llama1b-shape.F16.gguf")
    if os.path.exists(f16):
        log(f"exists: {f16}")
    else:
        write_f16(f16, a.seed)
    print(f16)
    for mix in filter(None, a.types.split(",")):
        suffix = "" if a.quantizer == "anvil" else ".llama"
        out = os.path.join(a.out_dir, f"llama1b-shape.{mix}{suffix}.gguf")
        if os.path.exists(out):
            log(f"exists: {out}")
        else:
            quantize(f16, out, mix, a.quantizer)
        print(out)


if __name__ == "__main__":
    main()
