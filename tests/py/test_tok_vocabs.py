"""The tokenizer on every vocabulary llama.cpp ships a vocabulary-only GGUF
of (the llama-cpp-python sdist's ggml-vocab-*.gguf: Llama 3, Qwen 2 and
3.5, Phi-3, Llama 2 / Mistral v1 SentencePiece, Gemma 4, GPT-2, StarCoder,
DeepSeek, Falcon, ...) and on Gemma 3's, compared with llama-cpp-python
loading the same file:

  - encode: the shared corpus (>= 450 strings: code, emoji, CJK, RTL text,
    whitespace runs, digits, invalid UTF-8) plus strings built around that
    vocabulary's own special tokens (whitespace on both sides, to exercise
    Phi-3's stripping), with special-token parsing on and off, in the
    release and the ASan builds;
  - add_special (BOS/EOS as the vocabulary asks);
  - every token's piece, with special on and off;
  - every pre-tokenizer anvil knows, by re-labelling the default model's
    vocabulary (the regex split is independent of the tokens);
  - encoding stays linear: 1 MB and 2 MB of text, timed inside the tool;
  - tokenizer models anvil does not read and unknown pre-tokenizers fail
    with a message that names them, exit status 2.
The encoders' vocabularies (WordPiece bert-bge, Unigram nomic-bert-moe) are
test_tok_encoders.py's.
"""
import os
import random
import struct
import subprocess

import llama_cpp
import pytest

from tokutil import (GEMMA, MODEL, TEXTS, compare, ours_encode, ref_pieces_match, run_tool,
                     sdist_models, tools, vocab_file, write_gguf_with)

# the vocabularies anvil reads (tokenizer.ggml.model gpt2, llama, gemma4)
VOCABS = ["llama-bpe", "qwen2", "qwen35", "phi-3", "llama-spm", "gemma-4", "gpt-2", "gpt-neox",
          "mpt", "starcoder", "refact", "command-r", "deepseek-llm", "deepseek-coder", "falcon",
          "aquila", "baichuan"]
# WordPiece and Unigram: tested in test_tok_encoders.py
ENCODERS = ["bert-bge", "nomic-bert-moe"]
# tokenizer.ggml.model values anvil refuses
REFUSED = ["rwkv", "plamo2", "no-such-model"]

# one name per pre-tokenizer row of src/tok/pretok.c, and some aliases
PRE_NAMES = ["default", "gpt-2", "phi-2", "mpt", "olmo", "smollm", "starcoder", "command-r",
             "llama-bpe", "llama3", "falcon3", "dbrx", "smaug-bpe", "qwen2", "deepseek-r1-qwen",
             "stablelm2", "grok-2", "qwen35", "laguna", "falcon", "deepseek-llm",
             "deepseek-coder", "deepseek-v3", "hunyuan-dense", "poro-chat", "bloom", "viking"]

ATTR_UNKNOWN, ATTR_CONTROL, ATTR_USER = 1 << 0, 1 << 3, 1 << 4  # llama_token_attr


def ref_model(path):
    return llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)


@pytest.fixture(scope="module")
def gemma3_vocab(tmp_path_factory):
    """Gemma 3's tokenizer (SentencePiece, 262,144 tokens) as a
    vocabulary-only GGUF cut from the model file."""
    if not os.path.exists(GEMMA):
        pytest.fail(f"Gemma 3 model missing: {GEMMA} (make model-gemma, or scripts/fetch_gemma.sh)")
    path = str(tmp_path_factory.mktemp("gemma3") / "ggml-vocab-gemma-3.gguf")
    write_gguf_with(GEMMA, path, {})
    return path


@pytest.fixture(scope="module")
def smollm_vocab(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("smollm") / "vocab-smollm2.gguf")
    write_gguf_with(MODEL, path, {})
    return path


def vocab_path(name, gemma3_vocab):
    return gemma3_vocab if name == "gemma-3" else vocab_file(name)


def special_texts(llm, rng, n_tokens=24):
    """Strings around the vocabulary's own special tokens."""
    vocab = llm._model.vocab
    specials = []
    for t in range(llm.n_vocab()):
        a = llama_cpp.llama_vocab_get_attr(vocab, t)
        if a & (ATTR_UNKNOWN | ATTR_CONTROL | ATTR_USER):
            specials.append(t)
    # the interesting ones first (BOS, EOS, chat markers), then a sample
    pick = [t for t in (llm.token_bos(), llm.token_eos()) if t >= 0]
    named = [b"<|im_start|>", b"<|im_end|>", b"<|user|>", b"<|end|>", b"<|assistant|>",
             b"<start_of_turn>", b"<end_of_turn>", b"<|start_header_id|>", b"<|eot_id|>",
             b"[INST]", b"[/INST]", b"<s>", b"</s>", b"<|endoftext|>"]
    texts = {}
    for t in specials:
        p = llm.detokenize([t], special=True)
        texts[t] = p
        if p in named:
            pick.append(t)
    rng.shuffle(specials)
    pick += specials[:n_tokens]
    pieces = [texts[t] for t in dict.fromkeys(pick) if t in texts and texts[t]]
    out = []
    glue = [b"", b" ", b"  ", b"\n", b" \n ", b"\t", b"hi", b" there", b"x\n"]
    for i in range(60):
        k = rng.randint(1, 4)
        s = b""
        for _ in range(k):
            s += rng.choice(glue) + rng.choice(pieces) + rng.choice(glue)
        out.append(s)
    # a special token split or glued to text
    for p in pieces[:10]:
        out += [p[:-1], p + p, b"a" + p + b"b", b"  " + p + b"  ", p[1:]]
    return out


@pytest.mark.parametrize("name", VOCABS + ["gemma-3"])
def test_vocab_encode_matches_llama_cpp(name, gemma3_vocab):
    path = vocab_path(name, gemma3_vocab)
    llm = ref_model(path)
    texts = TEXTS + special_texts(llm, random.Random(name))
    assert len(texts) >= 300
    for tool in tools():
        for ps in (True, False):
            compare(tool, path, llm, texts, ps, label=name)


@pytest.mark.parametrize("name", VOCABS + ["gemma-3"])
def test_vocab_add_special(name, gemma3_vocab):
    path = vocab_path(name, gemma3_vocab)
    llm = ref_model(path)
    texts = [b"Hello", b"", b" leading space", b"<s>x</s>", TEXTS[50]]
    ours = ours_encode(tools()[0], path, texts, add_special=True)
    for t, o in zip(texts, ours):
        assert o == llm.tokenize(t, add_bos=True, special=True), (name, t)


@pytest.mark.parametrize("name", VOCABS + ["gemma-3"])
def test_vocab_pieces_match_llama_cpp(name, gemma3_vocab):
    path = vocab_path(name, gemma3_vocab)
    ref_pieces_match(tools()[0], path, ref_model(path))


@pytest.mark.parametrize("pre", PRE_NAMES)
def test_pretokenizer(tmp_path, smollm_vocab, pre):
    path = str(tmp_path / f"vocab-{pre}.gguf")
    write_gguf_with(smollm_vocab, path, {"tokenizer.ggml.pre": pre})
    llm = ref_model(path)
    texts = TEXTS[::2] + [t for t in TEXTS if len(t) >= 5000]
    compare(tools()[0], path, llm, texts, True, label=pre)


def timed_encode(path, n_bytes, rng):
    pool = [t for t in TEXTS if len(t) < 2000]
    parts, size = [], 0
    while size < n_bytes:  # a list and one join: appending to bytes is quadratic
        parts.append(rng.choice(pool) + b" ")
        size += len(parts[-1])
    text = b"".join(parts)[:n_bytes]
    out = run_tool(tools()[0], path, "time", struct.pack("<I", len(text)) + text).decode()
    f = out.split()
    assert f[0] == "bytes" and int(f[1]) == len(text)
    return int(f[3]), float(f[5])


@pytest.mark.parametrize("name", ["gemma-3", "llama-spm", "llama-bpe", "qwen2"])
def test_encode_is_linear(name, gemma3_vocab):
    """1 MB and 4 MB of mixed text: four times the text must cost well
    under eight times the time (linear costs four, a quadratic merge
    sixteen). Each size is timed three times and the fastest run counts,
    so a machine busy with other work does not decide the outcome."""
    path = vocab_path(name, gemma3_vocab)
    runs1 = [timed_encode(path, 1 << 20, random.Random(1)) for _ in range(3)]
    runs4 = [timed_encode(path, 4 << 20, random.Random(1)) for _ in range(3)]
    n1, t1 = runs1[0][0], min(t for _, t in runs1)
    n4, t4 = runs4[0][0], min(t for _, t in runs4)
    print(f"{name}: 1 MB -> {n1} tokens in {t1:.3f} s ({(1 << 20) / t1 / 1e6:.1f} MB/s); "
          f"4 MB -> {n4} tokens in {t4:.3f} s")
    assert t4 < 8.0 * t1 + 0.1, (t1, t4)
    assert t1 < 30.0


@pytest.mark.parametrize("model", REFUSED)
def test_refused_vocabularies(tmp_path, smollm_vocab, model):
    path = str(tmp_path / f"vocab-{model}.gguf")
    write_gguf_with(smollm_vocab, path, {"tokenizer.ggml.model": model})
    for tool in tools():
        p = subprocess.run([tool, path, "info"], capture_output=True, timeout=300)
        assert p.returncode == 2, p.stderr
        assert model.encode() in p.stderr, p.stderr


def test_unknown_pretokenizer(tmp_path, smollm_vocab):
    path = str(tmp_path / "vocab-unknown.gguf")
    write_gguf_with(smollm_vocab, path, {"tokenizer.ggml.pre": "no-such-pretokenizer"})
    p = subprocess.run([tools()[0], path, "info"], capture_output=True, timeout=300)
    assert p.returncode == 2
    assert b"no-such-pretokenizer" in p.stderr and b"supported" in p.stderr


def test_sdist_has_the_vocabularies():
    """The list above covers every vocabulary file of the sdist: a new one
    shows up here instead of being silently untested."""
    have = sorted(f[len("ggml-vocab-"):-len(".gguf")] for f in os.listdir(sdist_models())
                  if f.startswith("ggml-vocab-") and f.endswith(".gguf"))
    assert have == sorted(VOCABS + ENCODERS)
