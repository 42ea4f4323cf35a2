"""The encoders' tokenizers against llama-cpp-python on the same GGUF:
WordPiece (tokenizer.ggml.model "bert": ggml-vocab-bert-bge.gguf, BGE's
uncased BERT vocabulary) and Unigram ("t5": ggml-vocab-nomic-bert-moe.gguf,
XLM-RoBERTa's 250,048 tokens with SentencePiece's precompiled charsmap).

  - encode: the shared corpus (tokutil.TEXTS: prose, code, emoji, CJK,
    whitespace runs, digits, a 5000-byte word, invalid UTF-8) plus strings
    aimed at these tokenizers (upper case, accents precomposed and not,
    Hangul, control and private-use characters, punctuation runs, the
    special tokens written in the text), with special-token parsing on and
    off, in the release and the ASan builds;
  - add_special ([CLS] ... [SEP] for WordPiece, <s> ... </s> here for
    Unigram), also through `anvil tokenize`;
  - llama.cpp's own test vectors for bert-bge (the .inp/.out beside it);
  - every token's piece, special on and off, and the streaming
    detokenizer on llama.cpp's ids; the separator id;
  - a precompiled charsmap that is inconsistent or corrupted;
  - the MiniLM vocabulary anvil's converter writes, against the HF
    `tokenizers` package on the model's tokenizer.json.
"""
import os
import random
import struct
import subprocess

import llama_cpp
import pytest

import conftest
from tokutil import (ROOT, TEXTS, compare, decode_ids, ours_encode, ref_piece, ref_pieces_match,
                     run_tool, tools, vocab_file)

VOCABS = ["bert-bge", "nomic-bert-moe"]

EXTRA = [s.encode() for s in [
    "HELLO WORLD", "Hello World", "hElLo WoRlD", "ÄÖÜ äöü ß", "Ǆ ǅ ǆ", "İstanbul ıi",
    "Crème brûlée à la façon de Noël", "e\u0301 a\u0300 o\u0308 n\u0303", "Ω ω Σσς ΆΈΉ",
    "한국어 텍스트", "各位好，今天天氣很好。", "東京タワー（とうきょうタワー）", "ｆｕｌｌｗｉｄｔｈ　ＡＢＣ",
    "emoji 😀👍🏽 👨‍👩‍👧 🇫🇷", "!!!???...,,,;;;", "a--b__c~~d", "(a) [b] {c} <d>", "#$%&*+/=@^`|~",
    "1,234,567.89 and 3.14159", "0000000000000000000000", "x" * 300, "supercalifragilistic" * 20,
    "\x01\x02\x1f control \x7f chars", "private \ue000\uf8ff use", "zero\u200bwidth\u200djoiner",
    "tab\there\nnewline\r\ncrlf\x0bvt\x0cff", "\u00a0nbsp\u2003em\u3000ideo", "",
    " ", "   ", "\n\n", "\t \t", "[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]",
    "[CLS] query [SEP] document [SEP]", "a[MASK]b", "[cls] lower", "[ CLS ]", "[CLS][SEP][MASK]",
    "<s>", "</s>", "<mask>", "<unk>", "<pad>", "<s> query </s></s> passage </s>",
    "text<mask>text", "  <s>  ", "don't can't won't", "U.S.A. e.g. i.e.",
    "https://example.com/path?q=1&r=2", "user@example.com", "C++ C# F#", "½ ¼ ¾ ² ³",
    "ﬁ ﬂ ﬃ", "ℌℑℜ ℕℤ", "①②③", "Ⅻ", "\u0300\u0301 leading marks", "ஆங்கிலம் हिन्दी", "ไทย",
]] + [b"\xff\xfe", b"ab\x80cd", b"\xc3\x28", b"\xe2\x82", b"caf\xe9 cr\xe8me", b"\x00nul\x00"]


def ref_model(path):
    return llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)


@pytest.fixture(scope="module", params=VOCABS)
def vocab(request):
    path = vocab_file(request.param)
    return request.param, path, ref_model(path)


def corpus():
    return TEXTS + EXTRA


def test_encode_matches_llama_cpp(vocab):
    name, path, llm = vocab
    texts = corpus()
    for tool in tools():
        for ps in (True, False):
            compare(tool, path, llm, texts, ps, label=name)


def test_add_special_matches_llama_cpp(vocab):
    name, path, llm = vocab
    texts = EXTRA + TEXTS[::7]
    for ps in (True, False):
        ours = ours_encode(tools()[0], path, texts, parse_special=ps, add_special=True)
        for t, o in zip(texts, ours):
            assert o == llm.tokenize(t, add_bos=True, special=ps), (name, t, ps)
    # the markers the models expect
    ids = ours_encode(tools()[0], path, [b"hello"], add_special=True)[0]
    if name == "bert-bge":
        assert ids[0] == 101 and ids[-1] == 102  # [CLS] hello [SEP]
    else:
        assert ids[0] == 0 and ids[-1] == 2  # <s> hello </s>


def test_cli_tokenize(vocab):
    """`anvil tokenize` on the vocabulary-only file: the ids with
    add_special, special tokens parsed or not."""
    name, path, llm = vocab
    bins = [os.path.join(ROOT, "bin", b) for b in ("anvil", "anvil-asan")]
    bins = [b for b in bins if os.path.exists(b) and (conftest.ASAN or not b.endswith("-asan"))]
    assert bins, "bin/anvil is not built"
    texts = ["[CLS] Hello, World! [SEP] document [SEP]", "<s>x</s> Crème Brûlée",
             "我想在apple工作1314151天～   spaced   out   ", "x" * 200]
    for b in bins:
        for t in texts:
            for special in (True, False):
                args = [b, "tokenize", "-m", path, "-p", t, "--ids-only"]
                p = subprocess.run(args + ([] if special else ["--no-special"]),
                                   capture_output=True, timeout=120)
                assert p.returncode == 0, p.stderr
                ids = [int(x) for x in p.stdout.split()]
                assert ids == llm.tokenize(t.encode(), add_bos=True, special=special), (b, t)


def test_llama_cpp_vectors_bert_bge():
    """llama.cpp's tests/test-tokenizer-0 vectors for this vocabulary."""
    path = vocab_file("bert-bge")
    with open(path + ".inp", "rb") as f:
        inp = f.read().split(b"\n__ggml_vocab_test__\n")
    with open(path + ".out") as f:
        out = f.read().split("\n")
    if inp and inp[-1] == b"":
        inp.pop()
    assert len(inp) >= 30 and len(out) >= len(inp)
    ours = ours_encode(tools()[0], path, inp, parse_special=False)
    for t, o, want in zip(inp, ours, out):
        assert o == [int(x) for x in want.split()], t


def test_pieces_match_llama_cpp(vocab):
    name, path, llm = vocab
    ref_pieces_match(tools()[0], path, llm)


def test_separator(vocab):
    name, path, llm = vocab
    info = dict(line.split(" ", 1) for line in
                run_tool(tools()[0], path, "info", b"").decode().splitlines())
    assert int(info["sep"]) == llama_cpp.llama_vocab_sep(llm._model.vocab)
    assert int(info["sep"]) == (102 if name == "bert-bge" else 2)
    assert info["add_sep"] == ("1" if name == "bert-bge" else "0")
    assert int(info["bos"]) == llm.token_bos() and int(info["eos"]) == llm.token_eos()


def test_bad_charsmap(tmp_path):
    """A charsmap whose header announces more than it holds is refused
    (exit status 2, a message naming the key); a truncated but consistent
    one still tokenizes."""
    src = vocab_file("nomic-bert-moe")
    with open(src, "rb") as f:
        data = f.read()
    key = b"tokenizer.ggml.precompiled_charsmap"
    at = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
    vt, et, n = struct.unpack_from("<IIQ", data, at)
    assert vt == 9 and et == 0  # an array of uint8
    head, cm, tail = data[:at], data[at + 16:at + 16 + n], data[at + 16 + n:]

    def write(path, charsmap):
        with open(path, "wb") as f:
            f.write(head + struct.pack("<IIQ", 9, 0, len(charsmap)) + charsmap + tail)

    bad = str(tmp_path / "bad.gguf")
    write(bad, b"\xff\xff\xff\x00" + cm[4:64])
    p = subprocess.run([tools()[0], bad, "info"], capture_output=True, timeout=120)
    assert p.returncode != 0 and b"precompiled_charsmap" in p.stderr, p.stderr
    p = subprocess.run([os.path.join(ROOT, "bin", "anvil"), "tokenize", "-m", bad, "-p", "x"],
                       capture_output=True, timeout=120)
    assert p.returncode == 2 and b"precompiled_charsmap" in p.stderr, p.stderr
    # the XCDA cut to its first 4 KiB, the replacement strings kept: the
    # walks that leave the array end there
    blob = int.from_bytes(cm[:4], "little")
    cut = 4096
    short = cut.to_bytes(4, "little") + cm[4:4 + cut] + cm[4 + blob:]
    ok = str(tmp_path / "short.gguf")
    write(ok, short)
    ours = ours_encode(tools()[0], ok, EXTRA + TEXTS[::5])
    assert len(ours) == len(EXTRA + TEXTS[::5])


def test_minilm_vocab_matches_hf_tokenizers(tmp_path):
    """all-MiniLM-L6-v2 converted by `anvil convert`: our ids equal the HF
    `tokenizers` package's on the model's tokenizer.json, on text where
    BERT's reference normalizer and llama.cpp's agree (Latin script,
    precomposed accents, CJK ideographs, punctuation, words of at most 100
    characters: HF turns longer ones into [UNK], llama.cpp does not), with
    special tokens parsed (HF always parses them)."""
    import tokenizers
    from test_convert import minilm_dir, sentences
    d = minilm_dir()
    out = str(tmp_path / "minilm.gguf")
    p = subprocess.run([os.path.join(ROOT, "bin", "anvil"), "convert", d, "-o", out],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    hf = tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    hf.no_padding()
    hf.no_truncation()
    texts = sentences(100) + [
        "Hello, World!", "HELLO world", "Crème brûlée à la façon de Noël", "naïve café résumé",
        "我想在apple工作1314151天", "!!!???", "1,234.56", "don't stop", "  spaced   out ", "",
        "[CLS] and [SEP] in the text", "a-b_c/d", "supercalifragilisticexpialidocious", "x" * 100]
    ours = ours_encode(tools()[0], out, [t.encode() for t in texts], parse_special=True,
                       add_special=True)
    for t, o in zip(texts, ours):
        assert o == hf.encode(t).ids, t


def test_corrupt_charsmap_is_safe(tmp_path):
    """The charsmap is untrusted input: random bytes written over its
    double array and its replacement strings (and a header pointing
    everywhere) must give a clean load and tokens in range, never a
    crash, in every build (ASan/UBSan included)."""
    src = vocab_file("nomic-bert-moe")
    with open(src, "rb") as f:
        data = f.read()
    key = b"tokenizer.ggml.precompiled_charsmap"
    at = data.index(struct.pack("<Q", len(key)) + key) + 8 + len(key)
    n = struct.unpack_from("<IIQ", data, at)[2]
    cm = bytearray(data[at + 16:at + 16 + n])
    blob = int.from_bytes(cm[:4], "little")
    rng = random.Random(38)
    texts = EXTRA[:40] + TEXTS[:40]
    for k in range(4):
        c = bytearray(cm)
        # the first 64 KiB of the array hold the nodes ASCII and Latin walk through
        for _ in range(2000):
            c[4 + rng.randrange(min(blob, 65536))] = rng.randrange(256)
        for _ in range(200):
            c[4 + blob + rng.randrange(len(c) - 4 - blob)] = rng.randrange(256)
        if k == 3:
            c[4 + blob:] = b"\xff" * (len(c) - 4 - blob)  # no NUL anywhere
        path = str(tmp_path / f"corrupt{k}.gguf")
        with open(path, "wb") as f:
            f.write(data[:at + 16] + bytes(c) + data[at + 16 + n:])
        for tool in tools():
            for ids in ours_encode(tool, path, texts):
                assert all(0 <= t < 250048 for t in ids)


def test_decode_matches_llama_cpp_pieces(vocab):
    """Detokenizing what llama.cpp tokenized: the pieces (special on) are
    llama.cpp's token_to_piece pieces, and the streaming detokenizer gives
    the same text without the control tokens, as valid UTF-8."""
    name, path, llm = vocab
    texts = EXTRA + TEXTS[::9]
    id_lists = [llm.tokenize(t, add_bos=True, special=True) for t in texts]
    for (chunks, pieces), ids in zip(decode_ids(tools()[0], path, id_lists), id_lists):
        assert pieces == b"".join(ref_piece(llm, t, True) for t in ids), ids
        plain = b"".join(ref_piece(llm, t, False) for t in ids)
        assert b"".join(chunks) == plain.decode("utf-8", "replace").encode(), ids


def test_code_points_match_llama_cpp(vocab):
    """Every 11th code point up to U+31FFF (all planes in use but the
    tags and private use, which are sampled), alone between two letters:
    our character tables (Unicode 15, tests/gen/gen_tok_unicode.py) and
    the charsmap walk classify, lower-case and decompose it as llama.cpp
    does. (Run on every code point once: all 202,850 agree.)"""
    name, path, llm = vocab
    cps = [c for c in range(0x20, 0x32000, 11) if not 0xD800 <= c <= 0xDFFF]
    cps += [0xE0001, 0xE0041, 0xE007F, 0xF0000, 0x10FFFD]
    texts = [("a" + chr(c) + "b").encode() for c in cps]
    ours = ours_encode(tools()[0], path, texts, parse_special=False)
    bad = [(hex(c), o) for c, t, o in zip(cps, texts, ours)
           if o != llm.tokenize(t, add_bos=False, special=False)]
    assert not bad, bad[:10]


def crafted():
    import sys
    sys.path.insert(0, os.path.join(ROOT, "tests", "fuzz"))
    import gen_corpus_encoders
    return gen_corpus_encoders


def random_texts(rng, pieces, n):
    return [b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(n)]


@pytest.mark.parametrize("remove_ws,prefix", [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_crafted_charsmap_matches_llama_cpp(tmp_path, remove_ws, prefix):
    """A charsmap written from a known mapping (tests/fuzz/gen_corpus_encoders.py:
    nested keys "ab"/"abc" for the longest match, a multi-byte key, a key
    that maps to nothing, "\\t" to a space) on a tiny vocabulary, with the
    four settings of remove_extra_whitespaces and add_space_prefix:
    random strings of those keys, letters, spaces, a user-defined token and
    stray bytes tokenize as llama.cpp tokenizes them."""
    gen = crafted()
    path = str(tmp_path / "ugm.gguf")
    with open(path, "wb") as f:
        f.write(gen.ugm_file(gen.charsmap(gen.MAPPING), remove_ws, prefix))
    llm = ref_model(path)
    pieces = list(gen.MAPPING) + [b"a", b"b", b"c", b"q", b"z", b" ", b"  ", b"<u1>", b"<s>",
                                  b"\xff", b"\xc3", "\u00e9".encode(), b"\xe2\x96\x81"]
    texts = random_texts(random.Random(remove_ws * 2 + prefix), pieces, 300)
    for tool in tools():
        for ps in (True, False):
            compare(tool, path, llm, texts, ps, label=f"ugm rx={remove_ws} prefix={prefix}")
    ours = ours_encode(tools()[0], path, texts[:50], add_special=True)
    assert ours == [llm.tokenize(t, add_bos=True, special=True) for t in texts[:50]]


def test_crafted_wordpiece_matches_llama_cpp(tmp_path):
    """A tiny WordPiece vocabulary: words that match in pieces, words that
    do not match to their end ([UNK]), accents, CJK, punctuation."""
    gen = crafted()
    path = str(tmp_path / "wpm.gguf")
    with open(path, "wb") as f:
        f.write(gen.wpm_file())
    llm = ref_model(path)
    pieces = [b"hello", b"HELLO", b"world", b"wor", b"ld", b"he", b"l", b"o", b",", b"!", b" ",
              "\u00e9".encode(), "E\u0301".encode(), "\u4e2d".encode(), b"a", b"b", b"ab",
              b"[MASK]", b"[SEP]", b"x", b"\t", b"\xff"]
    texts = random_texts(random.Random(7), pieces, 300)
    for tool in tools():
        for ps in (True, False):
            compare(tool, path, llm, texts, ps, label="wpm tiny")
