"""Differential tests of the tokenizer (src/tok) against llama-cpp-python on
the default model's vocabulary (SmolLM2, byte-level BPE).

  - encode: >= 300 deterministic strings (prose, code, numbers, emoji, CJK and
    other scripts, whitespace runs, contractions, special tokens, invalid
    UTF-8, the empty string, a 10k-character text) must give exactly
    llama.cpp's ids, with and without parse_special, and with add_special;
  - decode: every token's piece equals llama_token_to_piece (special on and
    off); detokenizing our ids gives the input back for valid UTF-8, and the
    streaming detokenizer only ever emits whole UTF-8 characters.

The other vocabularies (SentencePiece, the other pre-tokenizers) are in
test_tok_vocabs.py, the chat templates in test_chat_templates.py. Our side
runs through tests/tool_tok.c (one process for all strings); both the
release and the ASan builds of the tool are checked when present.
"""
import os

import llama_cpp
import pytest

from tokutil import (MODEL, TEXTS, compare, decode_ids, is_valid_utf8, ours_encode, ref_pieces_match,
                     tools)


def ref_model(path):
    return llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)


@pytest.fixture(scope="module")
def ref():
    if not os.path.exists(MODEL):
        pytest.fail(f"default model missing: {MODEL} (run `make model`)")
    return ref_model(MODEL)


def test_corpus_size():
    assert len(TEXTS) >= 300
    assert b"" in TEXTS
    assert any(len(t) >= 10000 for t in TEXTS)
    assert any(not is_valid_utf8(t) for t in TEXTS)


@pytest.mark.parametrize("parse_special", [True, False])
def test_encode_matches_llama_cpp(ref, parse_special):
    for tool in tools():
        compare(tool, MODEL, ref, TEXTS, parse_special)


def test_add_special(ref):
    # SmolLM2 says add_bos_token = false: add_special adds nothing
    texts = [b"Hello", b"<|im_start|>user\nx<|im_end|>", b""]
    ours = ours_encode(tools()[0], MODEL, texts, add_special=True)
    for t, o in zip(texts, ours):
        assert o == ref.tokenize(t, add_bos=True, special=True)


def test_pieces_match_llama_cpp(ref):
    ref_pieces_match(tools()[0], MODEL, ref)


CONTROL_TEXTS = (b"<|im_start|>", b"<|im_end|>", b"<|endoftext|>", b"<repo_name>", b"<file_sep>",
                 b"<jupyter_code>", b"<jupyter_output>")


def strip_control(b):
    for sp in CONTROL_TEXTS:
        b = b.replace(sp, b"")
    return b


def test_decode_round_trip():
    for tool in tools():
        ids = ours_encode(tool, MODEL, TEXTS, parse_special=True)
        dec = decode_ids(tool, MODEL, ids)
        n_rt = 0
        for t, (chunks, pieces) in zip(TEXTS, dec):
            # every chunk the stream emits is whole UTF-8 characters
            for c in chunks:
                assert is_valid_utf8(c), (t[:60], c)
            if is_valid_utf8(t):
                # pieces (special=true) give the exact input back
                assert pieces == t, (t[:60], pieces[:60])
                # the stream prints everything but control tokens
                assert b"".join(chunks) == strip_control(t), (t[:60],)
                n_rt += 1
            else:
                # the stream replaces what is still not UTF-8 in the pieces
                # (surrogates and overlongs pass through llama.cpp's
                # decoder) by U+FFFD, as Python's errors="replace" does
                want = strip_control(pieces).decode("utf-8", "replace").encode()
                assert b"".join(chunks) == want, (t[:60],)
        assert n_rt >= 250


def test_stream_holds_partial_characters():
    # single byte-level tokens of a 4-byte emoji: nothing until the last one
    tool = tools()[0]
    [ids] = ours_encode(tool, MODEL, ["😀".encode()])
    assert len(ids) > 1, ids
    [(chunks, pieces)] = decode_ids(tool, MODEL, [ids])
    assert pieces == "😀".encode()
    assert all(c == b"" for c in chunks[:-2]) and chunks[-2] == "😀".encode() and chunks[-1] == b""
    # cut short: the flush shows one U+FFFD
    [(chunks, _)] = decode_ids(tool, MODEL, [ids[:-1]])
    assert b"".join(chunks) == "\ufffd".encode()


