#!/usr/bin/env python3
"""Seeds for the encoders' tokenizers in tests/fuzz/corpus/gguf/: tiny
vocabulary-only GGUF files that fuzz_gguf sends through tok_load and
tok_encode.

    python3 tests/fuzz/gen_corpus_encoders.py

vocab_wpm.gguf        WordPiece ("bert"): [PAD] [UNK] [CLS] [SEP] [MASK],
                      word-initial pieces "\\u2581x", continuation pieces,
                      the separator and normalizer keys.
vocab_ugm.gguf        Unigram ("t5") with scores, a user-defined token and a
                      precompiled charsmap written by charsmap() below.
vocab_ugm_badmap.gguf the same with a charsmap whose header announces more
                      than it holds (tok_load refuses it).
vocab_ugm_cutmap.gguf the same with the double array cut short (walks end
                      at its end).

charsmap() writes SentencePiece's precompiled charsmap from a mapping
(bytes -> bytes): a u32 byte count, the XOR-compressed compact double array
(32-bit entries: BASE << 10, LEAF bit 8, LCHECK bits 0-7; a value entry has
bit 31 set and holds the replacement's offset), then the NUL-terminated
replacements. A node's children for byte c sit at origin ^ c, where
origin = position ^ BASE; a leaf's value entry sits at its origin. The
tests (tests/py/test_tok_encoders.py) use it to check the walk against
llama.cpp. Deterministic; Python standard library only.
"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "py"))
import gguf_synth as g  # noqa: E402

OUT = os.path.join(HERE, "corpus", "gguf")


def charsmap(mapping):
    # the trie: node -> {byte: child}; leaf value per node
    kids, value = [{}], [None]
    for key in sorted(mapping):
        assert key and 0 not in key
        n = 0
        for c in key:
            if c not in kids[n]:
                kids.append({})
                value.append(None)
                kids[n][c] = len(kids) - 1
            n = kids[n][c]
        value[n] = mapping[key]
    repl, off_of = b"", {}
    for v in value:
        if v is not None and v not in off_of:
            off_of[v] = len(repl)
            repl += v + b"\0"
    entries, used = {}, set()
    pos = {0: 0}  # node -> position of its entry
    origins = []
    order = [0]
    for n in order:
        need = sorted(kids[n])
        o = 1
        while True:
            slots = [o ^ c for c in need] + ([o] if value[n] is not None else [])
            if not any(s in used for s in slots) and 0 not in slots:
                break
            o += 1
        used.update(slots)
        origins.append(o)
        p = pos[n]
        base = p ^ o
        assert base < (1 << 21)
        lcheck = entries.get(p, 0) & 0xff
        entries[p] = (base << 10) | ((1 << 8) if value[n] is not None else 0) | lcheck
        if value[n] is not None:
            entries[o] = (1 << 31) | off_of[value[n]]
        for c in need:
            child = kids[n][c]
            pos[child] = o ^ c
            entries[o ^ c] = c
            order.append(child)
    # room for origin ^ c for every byte c of every node: a walk that
    # leaves the array makes llama.cpp throw (uncaught: it aborts), and the
    # tests compare with it; the cut seed below tests that case on anvil
    size = max(max(entries), max(origins)) + 1
    size = (size | 0xff) + 1
    arr = [entries.get(i, 0) for i in range(size)]
    blob = b"".join(struct.pack("<I", x) for x in arr)
    return struct.pack("<I", len(blob)) + blob + repl


MAPPING = {
    b"A": b"a", b"B": b"b", b"ab": b"X", b"abc": b"Y", b"\t": b" ", b"\n": b" ",
    "\uff21".encode(): b"a", "\u00df".encode(): b"ss", "\ufb01".encode(): b"fi",
    "\u200b".encode(): b"", b"  ": b" ", b"Q": b"q q",
}


def ugm_tokens():
    toks = ["<pad>", "</s>", "<unk>", "<s>", "\u2581", "<u1>", "\u2581ab", "abc", "X", "Y", "ss",
            "fi", "q", "\u2581q"]
    toks += [chr(c) for c in range(ord("a"), ord("z") + 1) if chr(c) not in toks]
    toks += ["\u2581" + chr(c) for c in range(ord("a"), ord("h"))]
    types = [3, 3, 2, 3, 1, 4] + [1] * (len(toks) - 6)
    scores = [0.0] * 5 + [0.0] + [-1.0 - 0.37 * (i % 11) for i in range(len(toks) - 6)]
    return toks, types, scores


def ugm_kvs(cm, remove_ws=True, prefix=True):
    toks, types, scores = ugm_tokens()
    return [
        ("general.architecture", g.STR, "bert"),
        ("general.name", g.STR, "fuzz-ugm"),
        ("bert.block_count", g.U32, 1),
        ("bert.context_length", g.U32, 64),
        ("bert.embedding_length", g.U32, 8),
        ("bert.feed_forward_length", g.U32, 16),
        ("bert.attention.head_count", g.U32, 1),
        ("bert.attention.layer_norm_epsilon", g.F32, 1e-5),
        ("tokenizer.ggml.model", g.STR, "t5"),
        ("tokenizer.ggml.pre", g.STR, "default"),
        ("tokenizer.ggml.tokens", g.ARR, (g.STR, toks)),
        ("tokenizer.ggml.scores", g.ARR, (g.F32, scores)),
        ("tokenizer.ggml.token_type", g.ARR, (g.I32, types)),
        ("tokenizer.ggml.add_space_prefix", g.BOOL, int(prefix)),
        ("tokenizer.ggml.remove_extra_whitespaces", g.BOOL, int(remove_ws)),
        ("tokenizer.ggml.precompiled_charsmap", g.ARR, (g.U8, list(cm))),
        ("tokenizer.ggml.bos_token_id", g.U32, 3),
        ("tokenizer.ggml.eos_token_id", g.U32, 1),
        ("tokenizer.ggml.unknown_token_id", g.U32, 2),
        ("tokenizer.ggml.seperator_token_id", g.U32, 1),
        ("tokenizer.ggml.padding_token_id", g.U32, 0),
        ("tokenizer.ggml.add_bos_token", g.BOOL, 1),
        ("tokenizer.ggml.add_eos_token", g.BOOL, 1),
    ]


def ugm_file(cm, remove_ws=True, prefix=True):
    return g.build(ugm_kvs(cm, remove_ws, prefix), [])


def wpm_file():
    toks = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "\u2581hello", "\u2581world", "\u2581,",
            "\u2581!", "\u2581he", "llo", "l", "o", "\u2581w", "or", "ld", "\u2581\u00e9", "\u2581e",
            "\u2581\u4e2d", "\u2581a", "a", "\u2581b", "b"]
    types = [3, 3, 3, 3, 3] + [1] * (len(toks) - 5)
    return g.build([
        ("general.architecture", g.STR, "bert"),
        ("tokenizer.ggml.model", g.STR, "bert"),
        ("tokenizer.ggml.pre", g.STR, "bert-bge"),
        ("tokenizer.ggml.tokens", g.ARR, (g.STR, toks)),
        ("tokenizer.ggml.token_type", g.ARR, (g.I32, types)),
        ("tokenizer.ggml.unknown_token_id", g.U32, 1),
        ("tokenizer.ggml.cls_token_id", g.U32, 2),
        ("tokenizer.ggml.bos_token_id", g.U32, 2),
        ("tokenizer.ggml.seperator_token_id", g.U32, 3),
        ("tokenizer.ggml.padding_token_id", g.U32, 0),
        ("tokenizer.ggml.mask_token_id", g.U32, 4),
        ("tokenizer.ggml.normalizer.lowercase", g.BOOL, 1),
    ], [])


def main():
    os.makedirs(OUT, exist_ok=True)
    cm = charsmap(MAPPING)
    blob = struct.unpack_from("<I", cm)[0]
    files = {
        "vocab_wpm.gguf": wpm_file(),
        "vocab_ugm.gguf": ugm_file(cm),
        "vocab_ugm_badmap.gguf": ugm_file(struct.pack("<I", blob + 64) + cm[4:]),
        "vocab_ugm_cutmap.gguf": ugm_file(struct.pack("<I", 32) + cm[4:36] + cm[4 + blob:]),
    }
    for name, data in files.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
