"""Tiny random-weight GGUF files of every architecture anvil runs, and an
independent float64 numpy forward pass for each.

CONFIGS names one small model per architecture feature set:
  llama3   llama with rope_freqs (Llama 3.1 frequency factors), untied output
  mistral  llama with attention.sliding_window (every layer windowed)
  qwen2    Q/K/V biases, RoPE on NeoX pairs, tied output
  qwen3    per-head Q/K RMSNorm, head_dim (key_length) != n_embd / n_head
  gemma3   embeddings * sqrt(n_embd), post-attention and post-FFN norms,
           Q/K norms, GeGLU (tanh), head_dim 64 with 4/1 heads, sliding
           window on 5 of 6 layers with a different RoPE base, tied output
  phi3     fused attn_qkv and gate/up (ffn_up of 2*n_ff rows), partial
           rotary (rope.dimension_count = head_dim / 2)
  hp1      llama with HP1 gated attention on every layer (docs/attention.md):
           one kv head for 4 query heads, K = 3 taps (1, -a, -a)
           per head with the ReLU, lo 0, hi 1: about 70% of the p are zero
  hp1mix   qwen2 with layers hp1, softmax, hp1: K = 5 random taps, no ReLU,
           lo < 0 (mostly nonzero p), gamma and hi of their own
  mixtral  llama with llama.expert_count: 8 experts, 2 used, renormalized;
           the expert length is feed_forward_length
  qwen3moe qwen3 attention, 8 experts, 3 used, renormalized top-k,
           expert_feed_forward_length
  qwen2moe qwen2 attention, 4 experts, 2 used, not renormalized, a shared
           expert with its sigmoid gate (ffn_gate_inp_shexp)
  olmoe    one RMSNorm over the whole q and k, 8 experts, 2 used
  granitemoe  Granite's embedding, residual, attention and logit scales,
           4 experts, 2 used, an ungated shared expert
  gemma-embedding  gemma3's layers attending both ways (EmbeddingGemma):
           the windowed layers keep |i - j| <= sliding_window / 2; an
           embedding model (make_embed_gguf, optional Dense layers)
The MoE routers (ffn_gate_inp) stay F32 in quantized files, as
llama-quantize leaves them.

make_gguf(path, name, wtype) writes the file and returns the weights as
stored (dequantized, float64); forward(name, w, tokens) gives the logits of
every position. K and V are rounded to float16 like the engine's cache.
HP1 taps are drawn by make_gguf (hp1_taps) and returned with the weights
as "hp1.taps" (n_layer, n_head, K); forward() runs the HP1 formula of
src/attn/hp1/attn_hp1.h in float64 and, given a stats dict, counts the
share of p that are exactly zero.
The vocabulary is the byte-level BPE of tiny_llama.py (300 tokens), which
both anvil and llama.cpp load for every architecture. Nothing here is
checked in as data.
"""
import os
import sys

import gguf
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_llama  # noqa: E402

N_VOCAB = tiny_llama.N_VOCAB

BASE = dict(n_embd=128, n_ff=192, n_head=4, n_head_kv=2, head_dim=None, n_layer=2, n_rot=None,
            rope_base=10000.0, eps=1e-5, rope="norm", act="silu", bias=False, qk_norm=False,
            post_norms=False, embd_scale=False, fused=False, tied=False, rope_freqs=False,
            swa=0, swa_layers=None, rope_base_swa=10000.0, attn=None, hp1=None, moe=None,
            qk_norm_full=False, granite=None, bidir=False)

# MoE: n_expert, used, n_ff_exp (ffe_key: written as expert_feed_forward_length,
# else the expert length is feed_forward_length), shared length, shared gate,
# norm_w (written as expert_weights_norm when "norm_key"), gating (1 softmax,
# 2 sigmoid; written when given), router_scale (spread of the logits)
MOE = dict(n_expert=4, used=2, n_ff_exp=64, ffe_key=False, n_sh=0, sh_gate=False, norm_w=True,
           norm_key=False, gating=None, w_scale=None, router_scale=6.0, zero_router=False)

# HP1 parameters: K taps, gamma, lo, hi, relu; taps "gate" = (1, -a, -a) with
# a per head in [a_lo, a_hi), "random" = normal(0, 0.5) with c_0 made positive
HP1_GATE = dict(k=3, gamma=0.05, lo=0.0, hi=1.0, relu=True, taps="gate", a_lo=0.45, a_hi=0.9)
HP1_RAND = dict(k=5, gamma=0.02, lo=-0.25, hi=0.75, relu=False, taps="random")

CONFIGS = {
    "llama3": dict(BASE, arch="llama", rope_freqs=True, rope_base=500000.0),
    "mistral": dict(BASE, arch="llama", swa=16, n_layer=2),
    "qwen2": dict(BASE, arch="qwen2", rope="neox", bias=True, tied=True, rope_base=1000000.0),
    "qwen3": dict(BASE, arch="qwen3", rope="neox", qk_norm=True, head_dim=64, rope_base=1000000.0),
    "gemma3": dict(BASE, arch="gemma3", rope="neox", act="gelu", qk_norm=True, post_norms=True,
                   embd_scale=True, n_embd=96, n_head=4, n_head_kv=1, head_dim=64, n_layer=6,
                   n_ff=160, tied=True, swa=16, rope_base=1000000.0, rope_base_swa=10000.0,
                   eps=1e-6),
    "phi3": dict(BASE, arch="phi3", rope="neox", fused=True, n_rot=16),
    "hp1": dict(BASE, arch="llama", n_head=4, n_head_kv=1, attn="hp1", hp1=HP1_GATE),
    "hp1mix": dict(BASE, arch="qwen2", rope="neox", bias=True, tied=True, rope_base=1000000.0,
                   n_layer=3, attn=["hp1", "softmax", "hp1"], hp1=HP1_RAND),
    "mixtral": dict(BASE, arch="llama", n_ff=64, moe=dict(MOE, n_expert=8)),
    "qwen3moe": dict(BASE, arch="qwen3moe", rope="neox", qk_norm=True, head_dim=64,
                     rope_base=1000000.0, n_ff=96,
                     moe=dict(MOE, n_expert=8, used=3, n_ff_exp=64, ffe_key=True)),
    "qwen2moe": dict(BASE, arch="qwen2moe", rope="neox", bias=True, rope_base=1000000.0,
                     moe=dict(MOE, ffe_key=True, n_sh=96, sh_gate=True, norm_w=False)),
    "olmoe": dict(BASE, arch="olmoe", rope="neox", qk_norm=True, qk_norm_full=True, n_ff=64, n_head_kv=4,
                  moe=dict(MOE, n_expert=8, norm_w=False)),
    "gemma-embedding": dict(BASE, arch="gemma-embedding", rope="neox", act="gelu", qk_norm=True,
                            post_norms=True, embd_scale=True, n_embd=96, n_head=4, n_head_kv=1,
                            head_dim=64, n_layer=6, n_ff=160, tied=True, swa=16,
                            rope_base=1000000.0, rope_base_swa=10000.0, eps=1e-6, bidir=True),
    "granitemoe": dict(BASE, arch="granitemoe", n_ff=64, moe=dict(MOE, n_sh=64),
                       granite=dict(embedding_scale=4.0, residual_scale=0.5,
                                    attention_scale=0.09, logit_scale=3.0)),
}
MOE_ARCHS = [n for n, c in CONFIGS.items() if c["moe"]]


GEMMA = ("gemma3", "gemma-embedding")  # Gemma 3's window pattern and RoPE bases


def cfg_of(name, **changes):
    c = dict(CONFIGS[name], **changes)
    if c["head_dim"] is None:
        c["head_dim"] = c["n_embd"] // c["n_head"]
    if c["n_rot"] is None:
        c["n_rot"] = c["head_dim"]
    if isinstance(c["attn"], list):
        c["attn_layers"] = list(c["attn"])
    else:
        c["attn_layers"] = [c["attn"] or "softmax"] * c["n_layer"]
    if c["moe"] and changes.get("moe_changes"):
        c["moe"] = dict(c["moe"], **changes["moe_changes"])
    if c["swa_layers"] is None:
        if c["swa"] and c["arch"] in GEMMA:
            c["swa_layers"] = [l % 6 < 5 for l in range(c["n_layer"])]
        else:
            c["swa_layers"] = [bool(c["swa"])] * c["n_layer"]
    return c


def weights(c, seed):
    rng = np.random.default_rng(seed)
    ne, nf, hd = c["n_embd"], c["n_ff"], c["head_dim"]
    qd, kd = c["n_head"] * hd, c["n_head_kv"] * hd

    def mat(rows, cols, s=1.0):
        return rng.normal(0, s / np.sqrt(cols), (rows, cols)).astype(np.float32)

    def norm(n):
        return (1 + 0.1 * rng.normal(size=n)).astype(np.float32)

    w = {"token_embd.weight": rng.normal(0, 1.0 / (np.sqrt(ne) if c["embd_scale"] else 1.0),
                                         (N_VOCAB, ne)).astype(np.float32),
         "output_norm.weight": norm(ne)}
    if not c["tied"]:
        w["output.weight"] = mat(N_VOCAB, ne, 0.5)
    if c["rope_freqs"]:
        w["rope_freqs.weight"] = (1.0 + 3.0 * rng.random(c["n_rot"] // 2)).astype(np.float32)
    for l in range(c["n_layer"]):
        p = f"blk.{l}."
        w[p + "attn_norm.weight"] = norm(ne)
        w[p + "ffn_norm.weight"] = norm(ne)
        if c["fused"]:
            w[p + "attn_qkv.weight"] = mat(qd + 2 * kd, ne)
            w[p + "ffn_up.weight"] = mat(2 * nf, ne)
        else:
            w[p + "attn_q.weight"] = mat(qd, ne)
            w[p + "attn_k.weight"] = mat(kd, ne)
            w[p + "attn_v.weight"] = mat(kd, ne)
        if c["moe"]:
            m = c["moe"]
            E, fe = m["n_expert"], m["n_ff_exp"]
            w[p + "ffn_gate_inp.weight"] = (np.zeros((E, ne), np.float32) if m["zero_router"]
                                            else mat(E, ne, m["router_scale"]))
            w[p + "ffn_gate_exps.weight"] = np.stack([mat(fe, ne) for _ in range(E)])
            w[p + "ffn_up_exps.weight"] = np.stack([mat(fe, ne) for _ in range(E)])
            w[p + "ffn_down_exps.weight"] = np.stack([mat(ne, fe, 0.5) for _ in range(E)])
            if m["n_sh"]:
                w[p + "ffn_gate_shexp.weight"] = mat(m["n_sh"], ne)
                w[p + "ffn_up_shexp.weight"] = mat(m["n_sh"], ne)
                w[p + "ffn_down_shexp.weight"] = mat(ne, m["n_sh"], 0.5)
                if m["sh_gate"]:
                    w[p + "ffn_gate_inp_shexp.weight"] = (rng.normal(size=ne) / np.sqrt(ne)).astype(np.float32)
        elif not c["fused"]:
            w[p + "ffn_gate.weight"] = mat(nf, ne)
            w[p + "ffn_up.weight"] = mat(nf, ne)
        if c["bias"]:
            w[p + "attn_q.bias"] = (0.3 * rng.normal(size=qd)).astype(np.float32)
            w[p + "attn_k.bias"] = (0.3 * rng.normal(size=kd)).astype(np.float32)
            w[p + "attn_v.bias"] = (0.3 * rng.normal(size=kd)).astype(np.float32)
        if c["qk_norm"]:
            w[p + "attn_q_norm.weight"] = norm(qd if c["qk_norm_full"] else hd)
            w[p + "attn_k_norm.weight"] = norm(kd if c["qk_norm_full"] else hd)
        if c["post_norms"]:
            w[p + "post_attention_norm.weight"] = norm(ne)
            w[p + "post_ffw_norm.weight"] = norm(ne)
        w[p + "attn_output.weight"] = mat(ne, qd, 0.5)
        if not c["moe"]:
            w[p + "ffn_down.weight"] = mat(ne, nf, 0.5)
    return w


def hp1_taps(c, seed):
    """Taps (n_layer, n_head, K) float32; zero rows on softmax layers."""
    h = c["hp1"]
    rng = np.random.default_rng(seed + 1000)
    t = np.zeros((c["n_layer"], c["n_head"], h["k"]), np.float32)
    for l, kind in enumerate(c["attn_layers"]):
        if kind != "hp1":
            continue
        if h["taps"] == "gate":
            a = rng.uniform(h["a_lo"], h["a_hi"], c["n_head"])
            t[l, :, 0] = 1.0
            t[l, :, 1:] = -a[:, None]
        else:
            t[l] = rng.normal(0, 0.5, (c["n_head"], h["k"]))
            t[l, :, 0] = np.abs(t[l, :, 0]) + 0.25
    return t


def hp1_meta(c, taps):
    """The HP1 metadata of docs/attention.md: suffix -> value."""
    if not c["hp1"]:
        return {}
    h = c["hp1"]
    kinds = c["attn_layers"]
    return {"attention.kind": kinds[0] if len(set(kinds)) == 1 else kinds,
            "attention.hp1.fir_k": h["k"], "attention.hp1.taps": [float(x) for x in taps.ravel()],
            "attention.hp1.gamma": h["gamma"], "attention.hp1.lo": h["lo"],
            "attention.hp1.hi": h["hi"], "attention.hp1.relu": h["relu"]}


def add_meta(wr, key, val):
    """One metadata value by Python type: bool, int (u32), float (f32), str,
    list of str/float/int, or ("f64", x) / ("i32", x) / ("f64s", [...])
    for the other types the bad-input tests need."""
    if isinstance(val, tuple):
        kind, v = val
        if kind == "f64":
            wr.add_float64(key, v)
        elif kind == "i32":
            wr.add_int32(key, v)
        elif kind == "f64s":
            wr.add_key_value(key, list(v), gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.FLOAT64)
        else:
            raise ValueError(kind)
    elif isinstance(val, bool):
        wr.add_bool(key, val)
    elif isinstance(val, int):
        wr.add_uint32(key, val)
    elif isinstance(val, float):
        wr.add_float32(key, val)
    elif isinstance(val, str):
        wr.add_string(key, val)
    elif isinstance(val, list):
        wr.add_array(key, val)
    else:
        raise TypeError(type(val))


QTYPES = dict(tiny_llama.QTYPES, Q4_K=gguf.GGMLQuantizationType.Q4_K)


def q4k_random(arr, seed):
    """Random Q4_K blocks (gguf.quants cannot quantize to Q4_K) whose
    values spread about as arr's rows do: the bytes of arr's shape."""
    rng = np.random.default_rng(seed)
    n_blocks = arr.size // 256
    std = float(arr.std()) or 1.0
    b = rng.integers(0, 256, (n_blocks, 144), dtype=np.uint8)
    d = np.full(n_blocks, std / 180.0, np.float16)
    b[:, 0:2] = d.view(np.uint8).reshape(-1, 2)
    b[:, 2:4] = (d * np.float16(0.9)).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return b.reshape(arr.shape[:-1] + (arr.shape[-1] // 256 * 144,))


def make_gguf(path, name, wtype="F32", seed=0, n_ctx=512, drop=(), override=None, extra_u32=None,
              cfg=None, meta=None):
    """Write the model; returns the weights as the file holds them (float64).
    For bad-input tests: drop omits tensors by name, override replaces
    tensors (name -> array), extra_u32 adds u32 metadata, cfg changes the
    configuration (e.g. head counts), meta changes the HP1 metadata
    (suffix after "<arch>." -> value for add_meta, None = left out)."""
    c = cfg_of(name, **(cfg or {}))
    w = weights(c, seed)
    for tname in drop:
        del w[tname]
    w.update(override or {})
    qt = QTYPES[wtype]
    arch = c["arch"]
    wr = gguf.GGUFWriter(path, arch)
    wr.add_name("anvil-tiny")  # not the arch: llama.cpp keys vocab quirks on "phi3" in the name
    wr.add_block_count(c["n_layer"])
    wr.add_context_length(n_ctx)
    wr.add_embedding_length(c["n_embd"])
    wr.add_feed_forward_length(c["n_ff"])
    wr.add_head_count(c["n_head"])
    wr.add_head_count_kv(c["n_head_kv"])
    if c["head_dim"] != c["n_embd"] // c["n_head"]:
        wr.add_key_length(c["head_dim"])
        wr.add_value_length(c["head_dim"])
    if c["n_rot"] != c["head_dim"]:
        wr.add_rope_dimension_count(c["n_rot"])
    wr.add_rope_freq_base(c["rope_base"])
    wr.add_layer_norm_rms_eps(c["eps"])
    extra_u32 = dict(extra_u32 or {})
    if c["swa"] and f"{arch}.attention.sliding_window" not in extra_u32:
        wr.add_sliding_window(c["swa"])
    if c["swa"]:
        if arch in GEMMA:
            wr.add_float32(f"{arch}.rope.freq_base_swa", c["rope_base_swa"])
    m = c["moe"]
    if m:
        wr.add_expert_count(m["n_expert"])
        wr.add_expert_used_count(m["used"])
        if m["ffe_key"]:
            wr.add_expert_feed_forward_length(m["n_ff_exp"])
        if m["n_sh"]:
            wr.add_expert_shared_feed_forward_length(m["n_sh"])
        if m["norm_key"]:
            wr.add_expert_weights_norm(m["norm_w"])
        if m["gating"] is not None:
            wr.add_uint32(f"{arch}.expert_gating_func", m["gating"])
        if m["w_scale"] is not None:
            wr.add_expert_weights_scale(m["w_scale"])
    if c["granite"]:
        g = c["granite"]
        wr.add_embedding_scale(g["embedding_scale"])
        wr.add_residual_scale(g["residual_scale"])
        wr.add_float32(f"{arch}.attention.scale", g["attention_scale"])
        wr.add_logit_scale(g["logit_scale"])
    for key, val in extra_u32.items():
        wr.add_uint32(key, val)
    taps = hp1_taps(c, seed) if c["hp1"] else None
    hmeta = dict(hp1_meta(c, taps), **(meta or {}))
    for suffix, val in hmeta.items():
        if val is not None:
            add_meta(wr, f"{arch}.{suffix}", val)
    toks, types, merges = tiny_llama.vocab()
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("smollm")
    wr.add_token_list(toks)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_bos_token_id(256 + len(merges))
    wr.add_eos_token_id(256 + len(merges))
    wr.add_add_bos_token(False)
    held = {}
    for tname, arr in w.items():
        if arr.ndim == 1 or qt == gguf.GGMLQuantizationType.F32 or tname.endswith("ffn_gate_inp.weight"):
            wr.add_tensor(tname, arr)
            held[tname] = arr.astype(np.float64)
        elif qt == gguf.GGMLQuantizationType.Q4_K:
            q = q4k_random(arr, seed + len(held))
            wr.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=qt)
            held[tname] = gguf.quants.dequantize(q, qt).reshape(arr.shape).astype(np.float64)
        else:
            q = gguf.quants.quantize(arr, qt)
            wr.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=qt)
            held[tname] = gguf.quants.dequantize(q, qt).reshape(arr.shape).astype(np.float64)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    if c["tied"]:
        held["output.weight"] = held["token_embd.weight"]
    if taps is not None:
        held["hp1.taps"] = taps.astype(np.float64)
    return held


# ---------------------------------------------------------------------------
# numpy reference


def rmsnorm(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x, pos, inv, n_rot, neox):
    """x: (n_tokens, n_heads, head_dim); rotate the first n_rot dims."""
    ang = np.asarray(pos, dtype=np.float64)[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    half = n_rot // 2
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * c - b * s
        out[..., half:n_rot] = a * s + b * c
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * c - b * s
        out[..., 1:n_rot:2] = a * s + b * c
    return out


def inv_freq(c, w, base):
    half = c["n_rot"] // 2
    inv = base ** (-2.0 * np.arange(half) / c["n_rot"])
    if c["rope_freqs"]:
        inv = inv / w["rope_freqs.weight"]
    return inv


def gelu_tanh(g):
    return 0.5 * g * (1 + np.tanh(np.sqrt(2 / np.pi) * (g + 0.044715 * g ** 3)))


def hp1_attention(s, c, taps, visible):
    """HP1 gated attention weights p (n, n) of one head from its scores s
    (n, n) (scale applied), taps (K,), and the causal mask: r = ReLU(s),
    z_t = sum_j c_j r_{t-j} (0 before the first key), p = gamma *
    clip(z, lo, hi), zero where a key is not visible."""
    h = c["hp1"]
    r = np.maximum(s, 0.0) if h["relu"] else s.copy()
    r = np.where(visible, r, 0.0)
    z = np.zeros_like(r)
    for j, cj in enumerate(taps):
        z[:, j:] += float(cj) * r[:, :r.shape[1] - j]
    p = h["gamma"] * np.clip(z, h["lo"], h["hi"])
    return np.where(visible, p, 0.0)


def forward(name, w, tokens, stats=None, cfg=None):
    """Logits (n_tokens, n_vocab) for one sequence at positions 0..n-1.
    stats (a dict), when given, gets "hp1_zero" and "hp1_gate": the number
    of HP1 weights p_t (query row, head, visible key) that are exactly 0,
    and of all of them. cfg changes the configuration (the tests' power
    checks: the same weights with another attention)."""
    c = cfg_of(name, **(cfg or {}))
    n = len(tokens)
    ne, hd, nh, nkv, nf = c["n_embd"], c["head_dim"], c["n_head"], c["n_head_kv"], c["n_ff"]
    eps = c["eps"]
    x = w["token_embd.weight"][tokens].copy()
    if c["embd_scale"]:
        x = x * np.float64(np.float32(np.sqrt(ne)))
    gr = c["granite"] or {}
    f32 = lambda v: np.float64(np.float32(v))  # noqa: E731  (the file stores float32)
    if gr:
        x = x * f32(gr["embedding_scale"])
    rs = f32(gr["residual_scale"]) if gr else 1.0
    pos = np.arange(n)
    group = nh // nkv
    scale = f32(gr["attention_scale"]) if gr else 1.0 / np.sqrt(hd)
    for l in range(c["n_layer"]):
        p = f"blk.{l}."
        local = c["swa_layers"][l]
        base = c["rope_base_swa"] if local and c["arch"] in GEMMA else c["rope_base"]
        inv = inv_freq(c, w, base)
        h = rmsnorm(x, w[p + "attn_norm.weight"], eps)
        if c["fused"]:
            qkv = h @ w[p + "attn_qkv.weight"].T
            q, k, v = np.split(qkv, [nh * hd, nh * hd + nkv * hd], axis=1)
        else:
            q, k, v = (h @ w[p + "attn_q.weight"].T, h @ w[p + "attn_k.weight"].T,
                       h @ w[p + "attn_v.weight"].T)
        if c["bias"]:
            q, k, v = q + w[p + "attn_q.bias"], k + w[p + "attn_k.bias"], v + w[p + "attn_v.bias"]
        if c["qk_norm_full"]:
            q = rmsnorm(q, w[p + "attn_q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "attn_k_norm.weight"], eps)
        q, k, v = q.reshape(n, nh, hd), k.reshape(n, nkv, hd), v.reshape(n, nkv, hd)
        if c["qk_norm"] and not c["qk_norm_full"]:
            q = rmsnorm(q, w[p + "attn_q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "attn_k_norm.weight"], eps)
        neox = c["rope"] == "neox"
        q, k = rope(q, pos, inv, c["n_rot"], neox), rope(k, pos, inv, c["n_rot"], neox)
        if not c["bidir"]:  # the engine's F16 cache (a bidirectional model has none)
            k = k.astype(np.float16).astype(np.float64)
            v = v.astype(np.float16).astype(np.float64)
        out = np.zeros((n, nh, hd))
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        if c["bidir"]:  # both ways; llama.cpp's symmetric window
            visible = np.ones((n, n), bool)
            if local:
                visible &= np.abs(i - j) <= c["swa"] // 2
        else:
            visible = j <= i
            if local:
                visible &= j > i - c["swa"]
        mask = np.where(visible, 0.0, -np.inf)
        for hh in range(nh):
            kv = hh // group
            if c["attn_layers"][l] == "hp1":
                # float32 parameters, as the file stores them
                hc = dict(c, hp1={**c["hp1"], **{x: float(np.float32(c["hp1"][x]))
                                                 for x in ("gamma", "lo", "hi")}})
                p_ = hp1_attention(q[:, hh, :] @ k[:, kv, :].T * scale, hc, w["hp1.taps"][l, hh],
                                   visible)
                if stats is not None:
                    stats["hp1_zero"] = stats.get("hp1_zero", 0) + int(np.sum((p_ == 0) & visible))
                    stats["hp1_gate"] = stats.get("hp1_gate", 0) + int(np.sum(visible))
                out[:, hh, :] = p_ @ v[:, kv, :]
                continue
            sc = q[:, hh, :] @ k[:, kv, :].T * scale + mask
            sc = np.exp(sc - sc.max(axis=1, keepdims=True))
            sc /= sc.sum(axis=1, keepdims=True)
            out[:, hh, :] = sc @ v[:, kv, :]
        o = out.reshape(n, -1) @ w[p + "attn_output.weight"].T
        if c["post_norms"]:
            o = rmsnorm(o, w[p + "post_attention_norm.weight"], eps)
        x = x + o * rs
        h = rmsnorm(x, w[p + "ffn_norm.weight"], eps)
        if c["moe"]:
            x = x + moe_ffn(c, w, p, h, stats) * rs
            continue
        if c["fused"]:
            gu = h @ w[p + "ffn_up.weight"].T
            g, u = gu[:, :nf], gu[:, nf:]
        else:
            g, u = h @ w[p + "ffn_gate.weight"].T, h @ w[p + "ffn_up.weight"].T
        a = gelu_tanh(g) * u if c["act"] == "gelu" else g / (1 + np.exp(-g)) * u
        d = a @ w[p + "ffn_down.weight"].T
        if c["post_norms"]:
            d = rmsnorm(d, w[p + "post_ffw_norm.weight"], eps)
        x = x + d
    logits = rmsnorm(x, w["output_norm.weight"], eps) @ w["output.weight"].T
    return logits / f32(gr["logit_scale"]) if gr else logits


def silu(v):
    return v / (1 + np.exp(-v))


def moe_ffn(c, w, p, h, stats=None):
    """The mixture of experts of src/model/moe.h on rows h (n, n_embd):
    softmax or sigmoid of the router logits, the top-k largest (equal
    probabilities: lowest expert first), renormalized (sum clamped at
    2^-14) or not, scaled, the experts' SwiGLU outputs weighted and summed,
    plus the shared expert (times sigmoid(gate . h) when it has a gate).
    stats, when given, gets "chosen": the set of experts some row chose,
    "route": {layer: rows per expert (n_expert)}, and "min_gap": the
    smallest margin between a row's last chosen and first unchosen
    probability, "near_ties": the rows where that margin is below 1e-5."""
    m = c["moe"]
    logits = h @ w[p + "ffn_gate_inp.weight"].T
    if m["gating"] == 2:
        probs = 1 / (1 + np.exp(-logits))
    else:
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        probs = e / e.sum(axis=1, keepdims=True)
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        order = sorted(range(m["n_expert"]), key=lambda e: (-probs[t, e], e))[:m["used"]]
        wts = probs[t, order]
        if m["norm_w"]:
            wts = wts / max(wts.sum(), 6.103515625e-5)
        if m["w_scale"] not in (None, 0.0, 1.0):
            wts = wts * np.float32(m["w_scale"])
        for e, wt in zip(order, wts):
            gt = w[p + "ffn_gate_exps.weight"][e] @ h[t]
            up = w[p + "ffn_up_exps.weight"][e] @ h[t]
            out[t] += wt * (w[p + "ffn_down_exps.weight"][e] @ (silu(gt) * up))
        if stats is not None:
            stats.setdefault("chosen", set()).update(order)
            route = stats.setdefault("route", {})  # layer -> rows per expert
            cnt = route.setdefault(int(p.split(".")[1]), np.zeros(m["n_expert"], np.int64))
            cnt[order] += 1
            # the margin between the last chosen and the first unchosen
            # probability: a near tie may go either way in float32
            rest = [probs[t, e] for e in range(m["n_expert"]) if e not in order]
            if rest:
                gap = probs[t, order[-1]] - max(rest)
                stats["min_gap"] = min(stats.get("min_gap", np.inf), gap)
                stats["near_ties"] = stats.get("near_ties", 0) + int(gap < 1e-5)
    if m["n_sh"]:
        sh = (silu(h @ w[p + "ffn_gate_shexp.weight"].T) * (h @ w[p + "ffn_up_shexp.weight"].T)) \
            @ w[p + "ffn_down_shexp.weight"].T
        if m["sh_gate"]:
            sh = sh / (1 + np.exp(-(h @ w[p + "ffn_gate_inp_shexp.weight"])))[:, None]
        out = out + sh
    return out


# ---------------------------------------------------------------------------
# gpt-oss (src/model/arch/gptoss.c): its own writer and numpy forward pass,
# kept apart from CONFIGS (its tensors and types differ: MXFP4 experts,
# biases everywhere, attention sinks, YaRN). Layers alternate sliding
# window (even) and full attention (odd), as gpt-oss does.

GPTOSS = dict(n_embd=128, n_head=4, n_head_kv=2, head_dim=64, n_layer=3, n_expert=4, used=2,
              n_ff_exp=64, swa=16, rope_base=150000.0, eps=1e-5, yarn_factor=8.0, yarn_orig=64,
              beta_fast=None, beta_slow=None, attn_factor=None, sink_scale=1.5, gu_scale=4.0,
              limit=7.0, alpha=1.702)


def gptoss_cfg(**changes):
    return dict(GPTOSS, **changes)


def gptoss_weights(c, seed):
    rng = np.random.default_rng(seed)
    ne, hd, E, fe = c["n_embd"], c["head_dim"], c["n_expert"], c["n_ff_exp"]
    qd, kd = c["n_head"] * hd, c["n_head_kv"] * hd

    def mat(rows, cols, s=1.0):
        return rng.normal(0, s / np.sqrt(cols), (rows, cols)).astype(np.float32)

    def vec(n, s):
        return (s * rng.normal(size=n)).astype(np.float32)

    def norm(n):
        return (1 + 0.1 * rng.normal(size=n)).astype(np.float32)

    w = {"token_embd.weight": rng.normal(0, 1.0, (N_VOCAB, ne)).astype(np.float32),
         "output_norm.weight": norm(ne), "output.weight": mat(N_VOCAB, ne, 0.5)}
    for l in range(c["n_layer"]):
        p = f"blk.{l}."
        w[p + "attn_norm.weight"] = norm(ne)
        w[p + "post_attention_norm.weight"] = norm(ne)
        w[p + "attn_q.weight"], w[p + "attn_q.bias"] = mat(qd, ne), vec(qd, 0.3)
        w[p + "attn_k.weight"], w[p + "attn_k.bias"] = mat(kd, ne), vec(kd, 0.3)
        w[p + "attn_v.weight"], w[p + "attn_v.bias"] = mat(kd, ne), vec(kd, 0.3)
        w[p + "attn_output.weight"], w[p + "attn_output.bias"] = mat(ne, qd, 0.5), vec(ne, 0.1)
        w[p + "attn_sinks.weight"] = vec(c["n_head"], c["sink_scale"])
        w[p + "ffn_gate_inp.weight"], w[p + "ffn_gate_inp.bias"] = mat(E, ne, 6.0), vec(E, 0.5)
        s = c["gu_scale"]
        w[p + "ffn_gate_exps.weight"] = np.stack([mat(fe, ne, s) for _ in range(E)])
        w[p + "ffn_up_exps.weight"] = np.stack([mat(fe, ne, s) for _ in range(E)])
        w[p + "ffn_down_exps.weight"] = np.stack([mat(ne, fe, 0.2) for _ in range(E)])
        w[p + "ffn_gate_exps.bias"] = vec(E * fe, 1.0).reshape(E, fe)
        w[p + "ffn_up_exps.bias"] = vec(E * fe, 1.0).reshape(E, fe)
        w[p + "ffn_down_exps.bias"] = vec(E * ne, 0.1).reshape(E, ne)
    return w


def gptoss_type(tname, dense, experts):
    """The stored type of a tensor: experts' matrices `experts`, the other
    matrices `dense`, vectors, biases, sinks and the router F32."""
    if tname.endswith(".bias") or "norm" in tname or "sinks" in tname or "ffn_gate_inp" in tname:
        return "F32"
    return experts if "_exps." in tname else dense


def make_gguf_gptoss(path, dense="Q8_0", experts="MXFP4", seed=0, n_ctx=256, drop=(),
                     override=None, u32=None, f32=None, strs=None, cfg=None):
    """Write a tiny gpt-oss; returns the weights as stored (float64). drop,
    override (name -> array, written F32), u32/f32/strs (full key -> value,
    added or replacing the writer's) are for the bad-input tests."""
    c = gptoss_cfg(**(cfg or {}))
    w = gptoss_weights(c, seed)
    for tname in drop:
        del w[tname]
    arch = "gpt-oss"
    wr = gguf.GGUFWriter(path, arch)
    wr.add_name("anvil-tiny")
    u32 = dict(u32 or {})
    f32 = dict(f32 or {})
    strs = dict(strs or {})
    meta_u32 = {"block_count": c["n_layer"], "context_length": n_ctx,
                "embedding_length": c["n_embd"], "feed_forward_length": c["n_ff_exp"],
                "attention.head_count": c["n_head"], "attention.head_count_kv": c["n_head_kv"],
                "attention.key_length": c["head_dim"], "attention.value_length": c["head_dim"],
                "attention.sliding_window": c["swa"], "expert_count": c["n_expert"],
                "expert_used_count": c["used"], "expert_feed_forward_length": c["n_ff_exp"]}
    meta_f32 = {"rope.freq_base": c["rope_base"], "attention.layer_norm_rms_epsilon": c["eps"]}
    meta_str = {}
    if c["yarn_factor"]:
        meta_str["rope.scaling.type"] = "yarn"
        meta_f32["rope.scaling.factor"] = c["yarn_factor"]
        meta_u32["rope.scaling.original_context_length"] = c["yarn_orig"]
        for k, key in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow"),
                       ("attn_factor", "attn_factor")):
            if c[k] is not None:
                meta_f32["rope.scaling." + key] = c[k]
    for d, extra in ((meta_u32, u32), (meta_f32, f32), (meta_str, strs)):
        for k in list(d):
            if f"{arch}.{k}" in extra:
                del d[k]
    for k, v in meta_u32.items():
        wr.add_uint32(f"{arch}.{k}", v)
    for k, v in meta_f32.items():
        wr.add_float32(f"{arch}.{k}", v)
    for k, v in meta_str.items():
        wr.add_string(f"{arch}.{k}", v)
    for k, v in u32.items():
        wr.add_uint32(k, v)
    for k, v in f32.items():
        wr.add_float32(k, v)
    for k, v in strs.items():
        wr.add_string(k, v)
    toks, types, merges = tiny_llama.vocab()
    wr.add_tokenizer_model("gpt2")
    wr.add_tokenizer_pre("smollm")
    wr.add_token_list(toks)
    wr.add_token_types(types)
    wr.add_token_merges(merges)
    wr.add_bos_token_id(256 + len(merges))
    wr.add_eos_token_id(256 + len(merges))
    wr.add_add_bos_token(False)
    held = {}
    qmap = dict(QTYPES, MXFP4=gguf.GGMLQuantizationType.MXFP4)
    override = dict(override or {})
    for tname, arr in w.items():
        if tname in override:
            arr = override.pop(tname)
            wr.add_tensor(tname, arr)
            held[tname] = np.asarray(arr, np.float64)
            continue
        qt = qmap[gptoss_type(tname, dense, experts)]
        if qt in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
            a = arr.astype(np.float16) if qt == gguf.GGMLQuantizationType.F16 else arr
            wr.add_tensor(tname, a)
            held[tname] = a.astype(np.float64)
        else:
            q = gguf.quants.quantize(arr, qt)
            wr.add_tensor(tname, q, raw_shape=q.shape, raw_dtype=qt)
            held[tname] = gguf.quants.dequantize(q, qt).reshape(arr.shape).astype(np.float64)
    for tname, arr in override.items():  # tensors the model does not have
        wr.add_tensor(tname, arr)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()
    return held


def yarn_inv_freq(c):
    """The per-pair RoPE frequencies of YaRN (ggml's rope_yarn): the
    original ones below the dim where beta_fast rotations fit the original
    context, the interpolated ones (/ factor) above beta_slow's, a linear
    ramp between; and mscale = attn_factor * (1 + 0.1 ln factor)."""
    n = c["head_dim"]
    base = np.float64(np.float32(c["rope_base"]))
    inv = base ** (-2.0 * np.arange(n // 2) / n)
    if not c["yarn_factor"]:
        return inv, 1.0
    f = np.float64(np.float32(c["yarn_factor"]))
    bf = np.float64(np.float32(c["beta_fast"] if c["beta_fast"] is not None else 32.0))
    bs = np.float64(np.float32(c["beta_slow"] if c["beta_slow"] is not None else 1.0))
    af = np.float64(np.float32(c["attn_factor"] if c["attn_factor"] is not None else 1.0))

    def corr(beta):
        return n * np.log(c["yarn_orig"] / (beta * 2 * np.pi)) / (2 * np.log(base))
    lo, hi = max(0.0, np.floor(corr(bf))), min(n - 1.0, np.ceil(corr(bs)))
    ramp = 1.0 - np.clip((np.arange(n // 2) - lo) / max(0.001, hi - lo), 0.0, 1.0)
    inv = inv / f * (1 - ramp) + inv * ramp
    return inv, af * (1.0 + 0.1 * np.log(f))


def forward_gptoss(w, tokens, cfg=None):
    """Logits (n_tokens, n_vocab) of the tiny gpt-oss, float64: biased
    Q/K/V and Wo, NeoX RoPE with YaRN (q.k scaled by mscale^2), the sink
    logit of each head in its softmax denominator, windows on the even
    layers, then the MoE: router with bias, the top-k logits (equal:
    lowest expert first) softmaxed, each expert's biased gate/up through
    the clamped SwiGLU (min(g, 7), clip(u, -7, 7), g sigmoid(1.702 g)
    (u + 1)) and its biased down."""
    c = gptoss_cfg(**(cfg or {}))
    n = len(tokens)
    hd, nh, nkv, eps = c["head_dim"], c["n_head"], c["n_head_kv"], c["eps"]
    group = nh // nkv
    inv, ms = yarn_inv_freq(c)
    scale = 1.0 / np.sqrt(hd) * ms * ms
    lim, al = c["limit"], np.float64(np.float32(c["alpha"]))
    x = w["token_embd.weight"][tokens].copy()
    pos = np.arange(n)
    for l in range(c["n_layer"]):
        p = f"blk.{l}."
        h = rmsnorm(x, w[p + "attn_norm.weight"], eps)
        q = h @ w[p + "attn_q.weight"].T + w[p + "attn_q.bias"]
        k = h @ w[p + "attn_k.weight"].T + w[p + "attn_k.bias"]
        v = h @ w[p + "attn_v.weight"].T + w[p + "attn_v.bias"]
        q, k, v = q.reshape(n, nh, hd), k.reshape(n, nkv, hd), v.reshape(n, nkv, hd)
        q, k = rope(q, pos, inv, hd, True), rope(k, pos, inv, hd, True)
        k = k.astype(np.float16).astype(np.float64)
        v = v.astype(np.float16).astype(np.float64)
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]
        visible = j <= i
        if l % 2 == 0:
            visible &= j > i - c["swa"]
        out = np.zeros((n, nh, hd))
        for hh in range(nh):
            s = np.where(visible, q[:, hh, :] @ k[:, hh // group, :].T * scale, -np.inf)
            sink = w[p + "attn_sinks.weight"][hh]
            m = np.maximum(s.max(axis=1, keepdims=True), sink)
            e = np.exp(s - m)
            out[:, hh, :] = (e @ v[:, hh // group, :]) / (e.sum(axis=1, keepdims=True) + np.exp(sink - m))
        x = x + out.reshape(n, -1) @ w[p + "attn_output.weight"].T + w[p + "attn_output.bias"]
        h = rmsnorm(x, w[p + "post_attention_norm.weight"], eps)
        logits = h @ w[p + "ffn_gate_inp.weight"].T + w[p + "ffn_gate_inp.bias"]
        moe = np.zeros_like(h)
        for t in range(n):
            order = sorted(range(c["n_expert"]), key=lambda e: (-logits[t, e], e))[:c["used"]]
            lg = logits[t, order]
            wts = np.exp(lg - lg.max())
            wts /= wts.sum()
            for e, wt in zip(order, wts):
                g = w[p + "ffn_gate_exps.weight"][e] @ h[t] + w[p + "ffn_gate_exps.bias"][e]
                u = w[p + "ffn_up_exps.weight"][e] @ h[t] + w[p + "ffn_up_exps.bias"][e]
                g = np.minimum(g, lim)
                u = np.clip(u, -lim, lim)
                a = g / (1 + np.exp(-al * g)) * (u + 1)
                moe[t] += wt * (w[p + "ffn_down_exps.weight"][e] @ a + w[p + "ffn_down_exps.bias"][e])
        x = x + moe
    return rmsnorm(x, w["output_norm.weight"], eps) @ w["output.weight"].T


class control_tokens:
    """with control_tokens(["<|a|>", ...]): make_gguf's vocabulary has those
    texts as control tokens (type 3) in the last unused slots, ending at
    <unused299> (the FIM, harmony and other marker tests)."""

    def __init__(self, texts):
        self.texts = list(texts)

    def __enter__(self):
        self.orig = orig = tiny_llama.vocab
        texts = self.texts

        def vocab():
            toks, types, merges = orig()
            first = toks.index("<unused299>") - len(texts) + 1
            for i, t in enumerate(texts):
                toks[first + i], types[first + i] = t, 3
            return toks, types, merges

        tiny_llama.vocab = vocab
        return vocab

    def __exit__(self, *exc):
        tiny_llama.vocab = self.orig
        return False


def make_gguf_template(path, name, template, **kw):
    """make_gguf with tokenizer.chat_template set to template (the tool-call
    and reasoning tests give tiny models the real templates of families)."""
    orig = gguf.GGUFWriter

    class WithTemplate(orig):
        def write_header_to_file(self, *a, **k):
            self.add_chat_template(template)
            return super().write_header_to_file(*a, **k)

    gguf.GGUFWriter = WithTemplate
    try:
        return make_gguf(path, name, **kw)
    finally:
        gguf.GGUFWriter = orig


# ---------------------------------------------------------------------------
# embedding and reranking variants (tests/py/test_embed*.py)

POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}


def rank_head(c, seed):
    """The classification head llama.cpp's converter writes for rank
    pooling: cls.weight/bias (n_embd, n_embd) then tanh, cls.output
    weight/bias (1 class)."""
    rng = np.random.default_rng(seed + 77)
    ne = c["n_embd"]
    return {"cls.weight": (rng.standard_normal((ne, ne)) / np.sqrt(ne)).astype(np.float32),
            "cls.bias": (rng.standard_normal(ne) * 0.1).astype(np.float32),
            "cls.output.weight": (rng.standard_normal((1, ne)) / np.sqrt(ne)).astype(np.float32),
            "cls.output.bias": np.array([0.25], dtype=np.float32)}


def dense_layers(c, n, seed, bias=False):
    """sentence-transformers' Dense layers after pooling, as llama.cpp's
    converter writes them (--sentence-transformers-dense-modules):
    dense_2 (n, n_embd) and dense_3 (n_embd, n); dense_2.bias when asked."""
    rng = np.random.default_rng(seed + 99)
    ne = c["n_embd"]
    d = {"dense_2.weight": (rng.standard_normal((n, ne)) / np.sqrt(ne)).astype(np.float32),
         "dense_3.weight": (rng.standard_normal((ne, n)) / np.sqrt(n)).astype(np.float32)}
    if bias:
        d["dense_2.bias"] = (0.1 * rng.standard_normal(n)).astype(np.float32)
    return d


def make_embed_gguf(path, name, pooling, wtype="F32", seed=0, n_ctx=512, dense=0,
                    dense_bias=False):
    """make_gguf with <arch>.pooling_type (and the rank head for "rank");
    dense > 0: Dense layers of that width after pooling."""
    arch = CONFIGS[name]["arch"]
    c = cfg_of(name)
    extra = rank_head(c, seed) if pooling == "rank" else {}
    u32 = {f"{arch}.pooling_type": POOLING[pooling]}
    if dense:
        extra.update(dense_layers(c, dense, seed, dense_bias))
        u32.update({f"{arch}.dense_2_feat_in": c["n_embd"], f"{arch}.dense_2_feat_out": dense,
                    f"{arch}.dense_3_feat_in": dense, f"{arch}.dense_3_feat_out": c["n_embd"]})
    return make_gguf(path, name, wtype, seed=seed, n_ctx=n_ctx, override=extra or None,
                     extra_u32=u32)


def hidden(name, w, tokens):
    """Hidden states after the output norm (n_tokens, n_embd): forward()
    with the identity for lm_head."""
    ne = cfg_of(name)["n_embd"]
    return forward(name, dict(w, **{"output.weight": np.eye(ne)}), tokens)


def embed_ref(name, w, tokens, pooling, normalize=True):
    """One sequence's pooled vector (mean, cls, last) or rank score."""
    h = hidden(name, w, tokens)
    if pooling == "rank":
        x = np.tanh(h[-1] @ w["cls.weight"].T + w["cls.bias"])
        return float(x @ w["cls.output.weight"][0] + w["cls.output.bias"][0])
    v = {"mean": h.mean(axis=0), "cls": h[0], "last": h[-1]}[pooling]
    if "dense_2.weight" in w:  # the Dense layers after pooling
        t = w["dense_2.weight"] @ v + w.get("dense_2.bias", 0.0)
        v = w["dense_3.weight"] @ t
    return v / np.linalg.norm(v) if normalize else v
