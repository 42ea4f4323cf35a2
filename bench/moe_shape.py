#!/usr/bin/env python3
"""Write a random-weight GGUF of Qwen3-30B-A3B's or gpt-oss-20b's layer shape, for benchmarks.

Shape (per layer, as the real model): hidden 2048, 32 query / 4 KV heads of
128 (qwen3 per-head Q/K norms), 128 experts of FFN 768 with 8 used
(softmax, top-k renormalized), vocabulary 151,936 (Qwen 2's BPE: the
tokenizer.* keys of vendor/llama.cpp/models/ggml-vocab-qwen2.gguf from the
cached llama-cpp-python sdist), untied output; fewer layers (default 4) so
that the file fits this machine: the per-layer cost is the same.

Speed depends on shapes, not values: the quantized tensors are random
blocks written directly (gguf cannot quantize to K types) in a Q4_K_M-like
mix: Q4_K for the embedding, Q, K, O, the experts' gate and up; Q6_K for V,
the experts' down and the output; routers and norms F32. Block scales are
small and finite, so activations stay finite (the logits mean nothing).

--shape gptoss: gpt-oss-20b's layer (hidden 2880, 64 query / 8 KV heads of
64 with Q/K/V/O biases and attention sinks, a sliding window of 128 on every
other layer, YaRN factor 32 on an original context of 4096, 32 experts of
FFN 2880 with 4 used, router and expert biases, the clamped SwiGLU) with the
experts in MXFP4 (random 4-bit codes under one fixed E8M0 scale) and the
dense matrices in Q8_0; the vocabulary is the same Qwen 2 BPE padded with
unused tokens to o200k's 201,088 (the real model's embedding and lm_head
sizes; the padding is never produced by the tokenizer), tokenizer.ggml.pre
"gpt-4o".

Files go to ~/.cache/anvil/models (or --out-dir); an existing file is kept.
Prints the path. Run it niced on a shared machine:

    nice ~/.cache/anvil/venv/bin/python bench/moe_shape.py [--layers 4] [--experts 128]
    bin/anvil bench -m ~/.cache/anvil/models/qwen3moe-shape-4L.gguf -p 512 -n 128 -t 2 --profile
"""
import argparse
import os
import sys
import time

import numpy as np

try:
    import gguf
except ImportError:
    sys.exit("moe_shape.py: needs the gguf package (~/.cache/anvil/venv/bin/python)")

CACHE = os.environ.get("ANVIL_CACHE", os.path.expanduser("~/.cache/anvil"))
VOCAB = os.path.join(CACHE, "llama_cpp_python-0.3.36", "vendor", "llama.cpp", "models",
                     "ggml-vocab-qwen2.gguf")
N_EMBD, N_HEAD, N_HEAD_KV, HEAD_DIM, N_FF_EXP, N_USED = 2048, 32, 4, 128, 768, 8
QT = gguf.GGMLQuantizationType
# bytes per block of 256 and where the f16 scale(s) sit, with a scale that
# gives values of std ~0.02
KQ = {QT.Q4_K: (144, [(0, 7e-5), (2, 5e-4)]), QT.Q6_K: (210, [(208, 1.5e-5)])}
# 32-element blocks: bytes per block (Q8_0: f16 scale then 32 int8; MXFP4:
# E8M0 scale byte then 16 bytes of codes)
B32 = {QT.Q8_0: 34, QT.MXFP4: 17}
# gpt-oss-20b
G_EMBD, G_HEAD, G_HEAD_KV, G_HEAD_DIM, G_FF_EXP, G_EXPERTS, G_USED, G_SWA = \
    2880, 64, 8, 64, 2880, 32, 4, 128

G_VOCAB = 201088  # o200k_harmony's size


def log(msg):
    print(f"moe_shape: {msg}", file=sys.stderr, flush=True)


def plan(n_layer, n_expert, n_vocab):
    """(name, GGUF shape ne (row length first), type) in file order."""
    q, kv = N_HEAD * HEAD_DIM, N_HEAD_KV * HEAD_DIM
    p = [("token_embd.weight", [N_EMBD, n_vocab], QT.Q4_K)]
    for i in range(n_layer):
        b = f"blk.{i}."
        p += [(b + "attn_norm.weight", [N_EMBD], QT.F32),
              (b + "attn_q.weight", [N_EMBD, q], QT.Q4_K),
              (b + "attn_k.weight", [N_EMBD, kv], QT.Q4_K),
              (b + "attn_v.weight", [N_EMBD, kv], QT.Q6_K),
              (b + "attn_q_norm.weight", [HEAD_DIM], QT.F32),
              (b + "attn_k_norm.weight", [HEAD_DIM], QT.F32),
              (b + "attn_output.weight", [q, N_EMBD], QT.Q4_K),
              (b + "ffn_norm.weight", [N_EMBD], QT.F32),
              (b + "ffn_gate_inp.weight", [N_EMBD, n_expert], QT.F32),
              (b + "ffn_gate_exps.weight", [N_EMBD, N_FF_EXP, n_expert], QT.Q4_K),
              (b + "ffn_up_exps.weight", [N_EMBD, N_FF_EXP, n_expert], QT.Q4_K),
              (b + "ffn_down_exps.weight", [N_FF_EXP, N_EMBD, n_expert], QT.Q6_K)]
    p += [("output_norm.weight", [N_EMBD], QT.F32), ("output.weight", [N_EMBD, n_vocab], QT.Q6_K)]
    return p


def plan_gptoss(n_layer, n_vocab):
    """gpt-oss-20b's tensors, (name, ne, type) in file order."""
    q, kv, E = G_HEAD * G_HEAD_DIM, G_HEAD_KV * G_HEAD_DIM, G_EXPERTS
    p = [("token_embd.weight", [G_EMBD, n_vocab], QT.Q8_0)]
    for i in range(n_layer):
        b = f"blk.{i}."
        p += [(b + "attn_norm.weight", [G_EMBD], QT.F32),
              (b + "attn_q.weight", [G_EMBD, q], QT.Q8_0), (b + "attn_q.bias", [q], QT.F32),
              (b + "attn_k.weight", [G_EMBD, kv], QT.Q8_0), (b + "attn_k.bias", [kv], QT.F32),
              (b + "attn_v.weight", [G_EMBD, kv], QT.Q8_0), (b + "attn_v.bias", [kv], QT.F32),
              (b + "attn_output.weight", [q, G_EMBD], QT.Q8_0),
              (b + "attn_output.bias", [G_EMBD], QT.F32),
              (b + "attn_sinks.weight", [G_HEAD], QT.F32),
              (b + "post_attention_norm.weight", [G_EMBD], QT.F32),
              (b + "ffn_gate_inp.weight", [G_EMBD, E], QT.F32),
              (b + "ffn_gate_inp.bias", [E], QT.F32),
              (b + "ffn_gate_exps.weight", [G_EMBD, G_FF_EXP, E], QT.MXFP4),
              (b + "ffn_gate_exps.bias", [G_FF_EXP, E], QT.F32),
              (b + "ffn_up_exps.weight", [G_EMBD, G_FF_EXP, E], QT.MXFP4),
              (b + "ffn_up_exps.bias", [G_FF_EXP, E], QT.F32),
              (b + "ffn_down_exps.weight", [G_FF_EXP, G_EMBD, E], QT.MXFP4),
              (b + "ffn_down_exps.bias", [G_EMBD, E], QT.F32)]
    p += [("output_norm.weight", [G_EMBD], QT.F32), ("output.weight", [G_EMBD, n_vocab], QT.Q8_0)]
    return p


def nbytes(ne, t):
    n = int(np.prod(ne))
    if t in B32:
        return n // 32 * B32[t]
    return n * 4 if t == QT.F32 else n // 256 * KQ[t][0]


def data(name, ne, t, rng):
    """The tensor's bytes (F32: a numpy float array)."""
    if t == QT.F32:
        if name.endswith("ffn_gate_inp.weight"):
            return (rng.standard_normal(int(np.prod(ne)), dtype=np.float32) * 0.02).reshape(ne[::-1])
        if name.endswith(".bias") or name.endswith("attn_sinks.weight"):
            return (rng.standard_normal(int(np.prod(ne)), dtype=np.float32) * 0.02).reshape(ne[::-1])
        return np.ones(ne[::-1], np.float32)
    if t in B32:
        nb = int(np.prod(ne)) // 32
        b = rng.integers(0, 256, (nb, B32[t]), dtype=np.uint8)
        if t == QT.MXFP4:
            b[:, 0] = 119  # E8M0 2^-8 (ggml halves it: codes up to 12 give ~0.02)
        else:
            b[:, 0:2] = np.full(nb, 1.5e-4, np.float16).view(np.uint8).reshape(-1, 2)
        return b
    size, scales = KQ[t]
    nb = int(np.prod(ne)) // 256
    b = rng.integers(0, 256, (nb, size), dtype=np.uint8)
    for off, val in scales:
        b[:, off:off + 2] = np.full(nb, val, np.float16).view(np.uint8).reshape(-1, 2)
    return b


def header_gptoss(w, n_layer):
    a = "gpt-oss"
    w.add_name("gpt-oss-20b-shape-random")
    w.add_description("random weights in gpt-oss-20b's layer shape, for benchmarks")
    for k, v in {"block_count": n_layer, "context_length": 131072, "embedding_length": G_EMBD,
                 "feed_forward_length": G_FF_EXP, "attention.head_count": G_HEAD,
                 "attention.head_count_kv": G_HEAD_KV, "attention.key_length": G_HEAD_DIM,
                 "attention.value_length": G_HEAD_DIM, "attention.sliding_window": G_SWA,
                 "expert_count": G_EXPERTS, "expert_used_count": G_USED,
                 "expert_feed_forward_length": G_FF_EXP,
                 "rope.scaling.original_context_length": 4096}.items():
        w.add_uint32(f"{a}.{k}", v)
    for k, v in {"rope.freq_base": 150000.0, "attention.layer_norm_rms_epsilon": 1e-5,
                 "rope.scaling.factor": 32.0}.items():
        w.add_float32(f"{a}.{k}", v)
    w.add_string(f"{a}.rope.scaling.type", "yarn")
    w.add_file_type(38)  # MOSTLY_MXFP4_MOE


def write(path, n_layer, n_expert, seed, shape="qwen3moe"):
    r = gguf.GGUFReader(VOCAB)
    n_vocab = len(r.fields["tokenizer.ggml.tokens"].data)
    tmp = path + ".tmp"
    if shape == "gptoss":
        w = gguf.GGUFWriter(tmp, "gpt-oss")
        header_gptoss(w, n_layer)
        p = plan_gptoss(n_layer, G_VOCAB)
        return write_rest(w, r, p, tmp, path, seed, pre="gpt-4o", pad_to=G_VOCAB)
    w = gguf.GGUFWriter(tmp, "qwen3moe")
    w.add_name("qwen3-30b-a3b-shape-random")
    w.add_description("random weights in Qwen3-30B-A3B's layer shape, for benchmarks")
    w.add_block_count(n_layer)
    w.add_context_length(40960)
    w.add_embedding_length(N_EMBD)
    w.add_feed_forward_length(6144)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_key_length(HEAD_DIM)
    w.add_value_length(HEAD_DIM)
    w.add_rope_freq_base(1000000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(n_expert)
    w.add_expert_used_count(N_USED)
    w.add_expert_feed_forward_length(N_FF_EXP)
    w.add_file_type(15)  # MOSTLY_Q4_K_M
    return write_rest(w, r, plan(n_layer, n_expert, n_vocab), tmp, path, seed)


def write_rest(w, r, p, tmp, path, seed, pre=None, pad_to=None):
    """The tokenizer keys of the vocabulary file r (tokenizer.ggml.pre
    replaced when pre is given; tokens and their types padded with unused
    tokens to pad_to when given), then the tensors of plan p."""
    for key, field in r.fields.items():
        if key.startswith("tokenizer."):
            if key == "tokenizer.ggml.pre" and pre:
                w.add_string(key, pre)
                continue
            vtype = field.types[0]
            sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
            val = field.contents()
            if pad_to and key == "tokenizer.ggml.tokens":
                val = val + [f"<|pad_{i}|>" for i in range(len(val), pad_to)]
            elif pad_to and key == "tokenizer.ggml.token_type":
                val = val + [int(gguf.TokenType.UNUSED)] * (pad_to - len(val))
            w.add_key_value(key, val, vtype, sub_type=sub)
    for name, ne, t in p:
        if t == QT.F32:
            w.add_tensor_info(name, ne[::-1], np.dtype(np.float32), nbytes(ne, t))
        else:
            per = B32[t] if t in B32 else KQ[t][0]
            shape = ne[::-1][:-1] + [ne[0] // (32 if t in B32 else 256) * per]
            w.add_tensor_info(name, shape, np.dtype(np.uint8), nbytes(ne, t), raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    rng = np.random.default_rng(seed)
    t0 = time.time()
    for i, (name, ne, t) in enumerate(p):
        w.write_tensor_data(data(name, ne, t, rng))
        print(f"\rmoe_shape: {i + 1}/{len(p)} tensors, {time.time() - t0:.0f} s", end="",
              file=sys.stderr, flush=True)
    print(file=sys.stderr)
    w.close()
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", default=os.path.join(CACHE, "models"))
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--shape", choices=["qwen3moe", "gptoss"], default="qwen3moe")
    a = ap.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    suffix = "" if a.experts == 128 else f"-{a.experts}x"
    if a.shape == "gptoss":
        path = os.path.join(a.out_dir, f"gptoss-shape-{a.layers}L.gguf")
    else:
        path = os.path.join(a.out_dir, f"qwen3moe-shape-{a.layers}L{suffix}.gguf")
    if os.path.exists(path):
        log(f"exists: {path}")
    else:
        write(path, a.layers, a.experts, a.seed, a.shape)
    print(path)


if __name__ == "__main__":
    main()
