#!/usr/bin/env python3
"""Write the seed corpora of the fuzz harnesses into tests/fuzz/corpus/.

    python3 tests/fuzz/gen_corpus.py

gguf/     small GGUF files written byte by byte with tests/py/gguf_synth.py
          (independent of anvil's reader): an empty header, one key of
          every value type with two tensors, a tokenizer-only file, a
          one-layer micro Llama that anvil_model_load accepts, and cut-down
          copies of them.
tok/      strings: ASCII, accents, CJK, emoji, digits, whitespace runs,
          special-token text, invalid UTF-8.
request/  JSON bodies of /v1/chat/completions and /v1/completions.
web/      bodies of /tokenize and /detokenize, and request paths (the
          same bytes are tried as each).

Deterministic: running it again rewrites the same bytes. Needs only the
Python standard library (no numpy, no gguf package).
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))
import gguf_synth as g  # noqa: E402

OUT = os.path.join(HERE, "corpus")


def put(sub, name, data):
    d = os.path.join(OUT, sub)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def bytes_to_unicode():
    """GPT-2's byte alphabet (openai/gpt-2 encoder.py)."""
    bs = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


CHATML = ("{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
          "{{ '<|im_start|>system\\nYou are a fuzzer.<|im_end|>\\n' }}{% endif %}"
          "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
          "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def tiny_vocab():
    b2u = bytes_to_unicode()
    toks = [b2u[b] for b in range(256)]
    types = [1] * 256
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("1", "2")]:
        merges.append(f"{a} {b}")
        toks.append(a + b)
        types.append(1)
    for s in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]:
        toks.append(s)
        types.append(3)
    return toks, types, merges


def tokenizer_kvs(pre="smollm"):
    toks, types, merges = tiny_vocab()
    eos = toks.index("<|im_end|>")
    return [
        ("tokenizer.ggml.model", g.STR, "gpt2"),
        ("tokenizer.ggml.pre", g.STR, pre),
        ("tokenizer.ggml.tokens", g.ARR, (g.STR, toks)),
        ("tokenizer.ggml.token_type", g.ARR, (g.I32, types)),
        ("tokenizer.ggml.merges", g.ARR, (g.STR, merges)),
        ("tokenizer.ggml.bos_token_id", g.U32, toks.index("<|endoftext|>")),
        ("tokenizer.ggml.eos_token_id", g.U32, eos),
        ("tokenizer.ggml.add_bos_token", g.BOOL, 0),
        ("tokenizer.chat_template", g.STR, CHATML),
    ], len(toks)


def micro_llama():
    """One layer, n_embd 32, one head of 32, tied embeddings."""
    kvs, n_vocab = tokenizer_kvs()
    hp = [
        ("general.architecture", g.STR, "llama"),
        ("general.name", g.STR, "fuzz-micro"),
        ("llama.block_count", g.U32, 1),
        ("llama.context_length", g.U32, 64),
        ("llama.embedding_length", g.U32, 32),
        ("llama.feed_forward_length", g.U32, 32),
        ("llama.attention.head_count", g.U32, 1),
        ("llama.attention.head_count_kv", g.U32, 1),
        ("llama.rope.freq_base", g.F32, 10000.0),
        ("llama.attention.layer_norm_rms_epsilon", g.F32, 1e-5),
    ]
    e = 32
    tensors = [
        ("token_embd.weight", [e, n_vocab], g.T_Q4_0),
        ("output_norm.weight", [e], g.T_F32),
        ("blk.0.attn_norm.weight", [e], g.T_F32),
        ("blk.0.ffn_norm.weight", [e], g.T_F32),
        ("blk.0.attn_q.weight", [e, e], g.T_Q8_0),
        ("blk.0.attn_k.weight", [e, e], g.T_Q8_0),
        ("blk.0.attn_v.weight", [e, e], g.T_Q8_0),
        ("blk.0.attn_output.weight", [e, e], g.T_Q4_1),
        ("blk.0.ffn_gate.weight", [e, e], g.T_BF16),
        ("blk.0.ffn_up.weight", [e, e], g.T_BF16),
        ("blk.0.ffn_down.weight", [e, e], g.T_F16),
    ]
    return g.build(hp + kvs, tensors)


def all_types():
    kvs = [
        ("u8", g.U8, 200), ("i8", g.I8, -100), ("u16", g.U16, 60000), ("i16", g.I16, -30000),
        ("u32", g.U32, 4000000000), ("i32", g.I32, -2000000000), ("f32", g.F32, 1.5),
        ("bool", g.BOOL, 1), ("str", g.STR, "hello"), ("u64", g.U64, 1 << 40),
        ("i64", g.I64, -(1 << 40)), ("f64", g.F64, -2.25),
        ("arr.u8", g.ARR, (g.U8, [1, 2, 3])), ("arr.i32", g.ARR, (g.I32, [-1, 0, 1])),
        ("arr.f32", g.ARR, (g.F32, [0.5, 1.0])), ("arr.str", g.ARR, (g.STR, ["a", "", "ccc"])),
        ("arr.empty", g.ARR, (g.U64, [])), ("arr.bool", g.ARR, (g.BOOL, [0, 1])),
        ("general.alignment", g.U32, 64),
    ]
    tensors = [("a", [4], g.T_F32), ("b", [32, 2], g.T_Q8_0), ("c", [2, 3, 1, 2], g.T_F16)]
    return g.build(kvs, tensors, alignment=64)


def gguf_seeds():
    put("gguf", "empty_v3.gguf", g.build([], []))
    put("gguf", "empty_v2.gguf", g.build([], [], version=2))
    put("gguf", "all_types.gguf", all_types())
    kvs, _ = tokenizer_kvs()
    vocab = g.build(kvs, [])
    put("gguf", "vocab_only.gguf", vocab)
    kvs_l3, _ = tokenizer_kvs(pre="llama-bpe")
    put("gguf", "vocab_llama3_pre.gguf", g.build(kvs_l3, []))
    m = micro_llama()
    put("gguf", "micro_llama.gguf", m)
    # cut down: inside the tokens array, inside the tensor table, inside the data
    lay = g.Layout(m)
    put("gguf", "micro_llama_cut_kv.gguf", m[:lay.kv["tokenizer.ggml.tokens"]["value"] + 300])
    put("gguf", "micro_llama_cut_tensors.gguf", m[:lay.end_of_infos - 20])
    put("gguf", "micro_llama_cut_data.gguf", m[:len(m) - 100])


def tok_seeds():
    strings = {
        "ascii": "Hello, world! The quick brown fox jumps over the lazy dog.",
        "accents": "Café naïve façade résumé — déjà vu, Ærøskøbing, Łódź",
        "cjk": "日本語のテキストと中文文本，还有한국어 텍스트。",
        "emoji": "emoji 🙂👍🏽 flags 🇫🇷 zwj 👩‍👩‍👧 keycap 1️⃣",
        "digits": "3.14159 2026-11-22 1234567890 0x1F +42 -7e10",
        "spaces": "  leading\ttabs\n\nnewlines   \r\n  trailing   ",
        "special": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<|endoftext|>",
        "code": "def f(x):\n    return {'a': [1, 2, 3], \"b\": x ** 2}  # comment\n",
        "contractions": "I'm you're he'll we've they'd it's DON'T Can'T",
        "mixed_scripts": "Привет мир Γειά σου κόσμε שלום עולם مرحبا",
    }
    for name, s in strings.items():
        put("tok", name + ".txt", s)
    put("tok", "invalid_utf8.bin", b"ok \xff\xfe bad \xc3 cut \xe2\x82 half \xed\xa0\x80 surrogate "
        b"\xf4\x90\x80\x80 big \xc0\xaf overlong \x00 nul")
    put("tok", "empty.txt", b"")


def request_seeds():
    mid = "SmolLM2-135M-Instruct.Q4_1"
    chat = [
        {"messages": [{"role": "user", "content": "Hello"}]},
        {"model": mid, "messages": [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Why is the sky blue?"}],
         "max_tokens": 32, "temperature": 0.7, "top_p": 0.9, "seed": 42, "stop": ["\n", "END"]},
        {"messages": [{"role": "user", "content": [{"type": "text", "text": "part one "},
                                                   {"type": "text", "text": "part two"}]},
                      {"role": "assistant", "content": None},
                      {"role": "developer", "content": "dev"}],
         "stream": True, "stream_options": {"include_usage": True}, "logprobs": True,
         "top_logprobs": 3, "max_completion_tokens": 8},
        {"messages": [{"role": "user", "content": "x"}], "top_k": 40, "min_p": 0.05,
         "presence_penalty": 0.5, "frequency_penalty": -0.5, "ignore_eos": True, "n": 1,
         "response_format": {"type": "text"}, "tools": [], "user": "u", "logit_bias": {}},
    ]
    comp = [
        {"prompt": "The capital of France is", "max_tokens": 16},
        {"prompt": [1, 2, 3, 400, 5000], "max_tokens": 4, "logprobs": 2, "echo": False,
         "best_of": 1, "suffix": ""},
        {"prompt": [[10, 20, 30]], "stream": True, "stop": "."},
        {"prompt": ["single prompt in a list"], "temperature": 2, "top_p": 0},
    ]
    for i, b in enumerate(chat):
        put("request", f"chat_{i}.json", json.dumps(b))
    for i, b in enumerate(comp):
        put("request", f"completion_{i}.json", json.dumps(b))
    put("request", "bad_types.json", '{"prompt": "x", "max_tokens": "10", "temperature": null}')
    put("request", "unicode.json", '{"messages": [{"role": "user", "content": "caf\\u00e9 '
        '\\ud83d\\ude42 \\ud800 lone"}]}')
    put("request", "malformed.json", '{"prompt": "x", "max_tokens": 1e400, ')


def web_seeds():
    bodies = {
        "tok_plain.json": {"content": "Hello world"},
        "tok_special_pieces.json": {"content": "<|im_start|>user\nhi<|im_end|>",
                                    "with_pieces": True},
        "tok_unicode.json": {"content": "caf\u00e9 \U0001f642", "add_special": True,
                             "parse_special": False, "with_pieces": True},
        "tok_bad.json": {"content": 1, "extra": True},
        "detok.json": {"tokens": [19556, 905, 1, 2, 0]},
        "detok_empty.json": {"tokens": []},
        "detok_bad.json": {"tokens": [1.5, -1, "x", None]},
    }
    for name, b in bodies.items():
        put("web", name, json.dumps(b))
    put("web", "tok_lone_surrogate.json", '{"content": "a\\ud800b", "with_pieces": true}')
    for name, path in [("path_root.txt", "/"), ("path_index.txt", "/index.html"),
                       ("path_dotdot.txt", "/%2e%2e/app.js"), ("path_nul.txt", "/app.js%00.png"),
                       ("path_double.txt", "/%252e%252e%252fapp.js"),
                       ("path_slashes.txt", "//app.js/..//style.css")]:
        put("web", name, path)


if __name__ == "__main__":
    gguf_seeds()
    tok_seeds()
    request_seeds()
    web_seeds()
