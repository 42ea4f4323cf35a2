"""A tiny random-weight Llama GGUF and an independent numpy forward pass.

make_tiny_gguf() writes a 2-layer GQA model (vocab 300: the 256 byte
tokens of byte-level BPE, a few merges, control tokens) with weights in
the requested type; forward() is the reference: float64 numpy, RoPE on
adjacent pairs (llama "norm" style), grouped-query attention with a causal
mask, K/V rounded to float16 like the engine's cache. Used by
tests/py/test_tiny_model.py; nothing here is checked in as data.
"""
import numpy as np
import gguf

N_VOCAB, N_EMBD, N_FF, N_HEAD, N_HEAD_KV, N_LAYER = 300, 128, 192, 4, 2, 2  # head_dim 32: the KV cache needs a multiple of 32
HEAD_DIM = N_EMBD // N_HEAD
ROPE_BASE, EPS = 10000.0, 1e-5


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def vocab():
    b2u = bytes_to_unicode()
    toks = [b2u[b] for b in range(256)]
    types = [1] * 256
    merges = []
    for a, b in [("t", "h"), ("th", "e"), ("Ġ", "t"), ("Ġt", "he"), ("i", "n"), ("a", "n"), ("e", "r"), ("o", "n")]:
        merges.append(f"{a} {b}")
        toks.append(a + b)
        types.append(1)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    for s in specials:
        toks.append(s)
        types.append(3)
    while len(toks) < N_VOCAB:
        toks.append(f"<unused{len(toks)}>")
        types.append(4)
    return toks, types, merges


def weights(seed):
    rng = np.random.default_rng(seed)
    w = {}
    s = 0.5
    w["token_embd.weight"] = rng.normal(0, 1.0, (N_VOCAB, N_EMBD)).astype(np.float32)
    w["output_norm.weight"] = (1 + 0.1 * rng.normal(size=N_EMBD)).astype(np.float32)
    w["output.weight"] = rng.normal(0, s / np.sqrt(N_EMBD), (N_VOCAB, N_EMBD)).astype(np.float32)
    for l in range(N_LAYER):
        p = f"blk.{l}."
        w[p + "attn_norm.weight"] = (1 + 0.1 * rng.normal(size=N_EMBD)).astype(np.float32)
        w[p + "ffn_norm.weight"] = (1 + 0.1 * rng.normal(size=N_EMBD)).astype(np.float32)
        w[p + "attn_q.weight"] = rng.normal(0, 1 / np.sqrt(N_EMBD), (N_HEAD * HEAD_DIM, N_EMBD)).astype(np.float32)
        w[p + "attn_k.weight"] = rng.normal(0, 1 / np.sqrt(N_EMBD), (N_HEAD_KV * HEAD_DIM, N_EMBD)).astype(np.float32)
        w[p + "attn_v.weight"] = rng.normal(0, 1 / np.sqrt(N_EMBD), (N_HEAD_KV * HEAD_DIM, N_EMBD)).astype(np.float32)
        w[p + "attn_output.weight"] = rng.normal(0, s / np.sqrt(N_EMBD), (N_EMBD, N_HEAD * HEAD_DIM)).astype(np.float32)
        w[p + "ffn_gate.weight"] = rng.normal(0, 1 / np.sqrt(N_EMBD), (N_FF, N_EMBD)).astype(np.float32)
        w[p + "ffn_up.weight"] = rng.normal(0, 1 / np.sqrt(N_EMBD), (N_FF, N_EMBD)).astype(np.float32)
        w[p + "ffn_down.weight"] = rng.normal(0, s / np.sqrt(N_FF), (N_EMBD, N_FF)).astype(np.float32)
    return w


QTYPES = {
    "F32": gguf.GGMLQuantizationType.F32,
    "F16": gguf.GGMLQuantizationType.F16,
    "BF16": gguf.GGMLQuantizationType.BF16,
    "Q8_0": gguf.GGMLQuantizationType.Q8_0,
    "Q4_0": gguf.GGMLQuantizationType.Q4_0,
    "Q4_1": gguf.GGMLQuantizationType.Q4_1,
}


def make_tiny_gguf(path, wtype="F32", seed=0, tied=False):
    """Write the model; returns the dequantized weights the file holds."""
    w = weights(seed)
    if tied:
        del w["output.weight"]
    qt = QTYPES[wtype]
    wr = gguf.GGUFWriter(path, "llama")
    wr.add_name("anvil-tiny")
    wr.add_block_count(N_LAYER)
    wr.add_context_length(256)
    wr.add_embedding_length(N_EMBD)
    wr.add_feed_forward_length(N_FF)
    wr.add_head_count(N_HEAD)
    wr.add_head_count_kv(N_HEAD_KV)
    wr.add_rope_freq_base(ROPE_BASE)
    wr.add_layer_norm_rms_eps(EPS)
    toks, types, merges = vocab()
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("smollm")
    wr.add_token_list(toks)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_bos_token_id(256 + len(merges))
    wr.add_eos_token_id(256 + len(merges))
    wr.add_add_bos_token(False)
    held = {}
    for name, arr in w.items():
        if arr.ndim == 1 or qt == gguf.GGMLQuantizationType.F32:
            wr.add_tensor(name, arr)
            held[name] = arr.astype(np.float64)
        else:
            q = gguf.quants.quantize(arr, qt)
            wr.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qt)
            held[name] = gguf.quants.dequantize(q, qt).reshape(arr.shape).astype(np.float64)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    if tied:
        held["output.weight"] = held["token_embd.weight"]
    return held


def rmsnorm(x, w):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * w


def rope(x, pos):
    """x: (n_tokens, n_heads, head_dim); rotate adjacent pairs."""
    half = HEAD_DIM // 2
    inv = ROPE_BASE ** (-2.0 * np.arange(half) / HEAD_DIM)
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def forward(w, tokens):
    """Logits (n_tokens, n_vocab) for one sequence at positions 0..n-1."""
    n = len(tokens)
    x = w["token_embd.weight"][tokens]
    pos = np.arange(n)
    group = N_HEAD // N_HEAD_KV
    for l in range(N_LAYER):
        p = f"blk.{l}."
        h = rmsnorm(x, w[p + "attn_norm.weight"])
        q = (h @ w[p + "attn_q.weight"].T).reshape(n, N_HEAD, HEAD_DIM)
        k = (h @ w[p + "attn_k.weight"].T).reshape(n, N_HEAD_KV, HEAD_DIM)
        v = (h @ w[p + "attn_v.weight"].T).reshape(n, N_HEAD_KV, HEAD_DIM)
        q, k = rope(q, pos), rope(k, pos)
        k = k.astype(np.float16).astype(np.float64)  # the engine's F16 cache
        v = v.astype(np.float16).astype(np.float64)
        out = np.zeros((n, N_HEAD, HEAD_DIM))
        mask = np.triu(np.full((n, n), -np.inf), 1)
        for hh in range(N_HEAD):
            kv = hh // group
            sc = q[:, hh, :] @ k[:, kv, :].T / np.sqrt(HEAD_DIM) + mask
            sc = np.exp(sc - sc.max(axis=1, keepdims=True))
            sc /= sc.sum(axis=1, keepdims=True)
            out[:, hh, :] = sc @ v[:, kv, :]
        x = x + out.reshape(n, -1) @ w[p + "attn_output.weight"].T
        h = rmsnorm(x, w[p + "ffn_norm.weight"])
        g = h @ w[p + "ffn_gate.weight"].T
        u = h @ w[p + "ffn_up.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "ffn_down.weight"].T
    return rmsnorm(x, w["output_norm.weight"]) @ w["output.weight"].T
