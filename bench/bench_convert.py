#!/usr/bin/env python3
"""anvil convert at disk speed? Writes a random ~1 GB F16 Llama-style
Hugging Face checkpoint (config.json, two safetensors shards and an index,
a small byte-level BPE tokenizer.json), then times

  - `cp` of the checkpoint's files to another file (the copy the disk can
    do), and
  - `anvil convert DIR -o OUT.gguf` (F16 -> F16: the matrices are copied
    from the mapping, the q/k rows permuted, the norms widened to F32),

each --reps times, best of, and prints JSON: bytes, seconds and MB/s of
both, and their ratio. The page cache is warm for both (the checkpoint was
just written); the output is fsync'ed by anvil, so cp is followed by sync
to be fair.

    python3 bench/bench_convert.py [--dir /tmp/anvil-bench-convert] [--gb 1] [--reps 3]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "py"))


def tokenizer(n_vocab):
    sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
    import tiny_llama
    from test_convert import tokenizer_json
    toks, types, merges = tiny_llama.vocab()
    vocab = {t: i for i, t in enumerate(toks) if types[i] == 1}
    return tokenizer_json(vocab, merges, [])


def write(d, gb):
    from safetensors.numpy import save_file
    ne, nf, nh, nkv, nv = 2048, 5632, 16, 4, 32000
    hd = ne // nh
    per_layer = 2 * (ne * ne + 2 * ne * nkv * hd + ne * ne + 3 * ne * nf)
    n_layer = max(1, int((gb * 1e9 - 2 * 2 * nv * ne) / per_layer))
    rng = np.random.default_rng(0)

    def m(r, c):
        return (rng.standard_normal((r, c), dtype=np.float32) * 0.02).astype(np.float16)

    os.makedirs(d, exist_ok=True)
    shard_of = {}
    tensors = [{}, {}]
    tensors[0]["model.embed_tokens.weight"] = m(nv, ne)
    tensors[1]["lm_head.weight"] = m(nv, ne)
    tensors[1]["model.norm.weight"] = np.ones(ne, np.float16)
    for l in range(n_layer):
        t = tensors[0 if l < n_layer // 2 else 1]
        p = f"model.layers.{l}."
        t[p + "self_attn.q_proj.weight"] = m(ne, ne)
        t[p + "self_attn.k_proj.weight"] = m(nkv * hd, ne)
        t[p + "self_attn.v_proj.weight"] = m(nkv * hd, ne)
        t[p + "self_attn.o_proj.weight"] = m(ne, ne)
        t[p + "mlp.gate_proj.weight"] = m(nf, ne)
        t[p + "mlp.up_proj.weight"] = m(nf, ne)
        t[p + "mlp.down_proj.weight"] = m(ne, nf)
        t[p + "input_layernorm.weight"] = np.ones(ne, np.float16)
        t[p + "post_attention_layernorm.weight"] = np.ones(ne, np.float16)
    for i, t in enumerate(tensors):
        fn = f"model-{i + 1:05d}-of-00002.safetensors"
        save_file(t, os.path.join(d, fn))
        shard_of.update({k: fn for k in t})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": shard_of}, f)
    cfg = {"architectures": ["LlamaForCausalLM"], "hidden_size": ne, "intermediate_size": nf,
           "num_attention_heads": nh, "num_key_value_heads": nkv, "num_hidden_layers": n_layer,
           "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "vocab_size": nv,
           "max_position_embeddings": 4096, "tie_word_embeddings": False}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tokenizer(nv), f)
    return n_layer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", default="/tmp/anvil-bench-convert")
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--anvil", default=os.path.join(ROOT, "bin", "anvil"))
    a = ap.parse_args()
    ck = os.path.join(a.dir, "ck")
    n_layer = write(ck, a.gb)
    shards = sorted(f for f in os.listdir(ck) if f.endswith(".safetensors"))
    nbytes = sum(os.path.getsize(os.path.join(ck, f)) for f in shards)
    out = os.path.join(a.dir, "out.gguf")
    cp_t, cv_t = [], []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        for f in shards:
            subprocess.run(["cp", os.path.join(ck, f), os.path.join(a.dir, "copy-" + f)], check=True)
        subprocess.run(["sync"], check=True)
        cp_t.append(time.perf_counter() - t0)
        for f in shards:
            os.remove(os.path.join(a.dir, "copy-" + f))
        t0 = time.perf_counter()
        p = subprocess.run([a.anvil, "convert", ck, "-o", out, "-q"], capture_output=True, text=True)
        cv_t.append(time.perf_counter() - t0)
        if p.returncode != 0:
            sys.exit(p.stderr)
    res = {"bench": "convert", "checkpoint_bytes": nbytes, "n_layer": n_layer,
           "out_bytes": os.path.getsize(out),
           "cp_s": min(cp_t), "cp_MBps": nbytes / 1e6 / min(cp_t),
           "convert_s": min(cv_t), "convert_MBps": nbytes / 1e6 / min(cv_t)}
    res["convert_vs_cp"] = res["convert_MBps"] / res["cp_MBps"]
    print(json.dumps(res))
    shutil.rmtree(a.dir)


if __name__ == "__main__":
    main()
