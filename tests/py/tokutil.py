"""Helpers shared by the tokenizer tests (test_tok*.py, test_chat_templates.py):
the test corpus, the tests/tool_tok driver, the llama-cpp-python sdist's
vocabulary and template files, and GGUF metadata rewriting.

The sdist's models directory (ggml-vocab-*.gguf, templates/*.jinja) is
unpacked under ~/.cache/anvil/ by scripts/fetch_llama_sdist.sh, which
`make test` runs; $ANVIL_LLAMA_MODELS points elsewhere. Nothing from it is
committed.
"""
import ctypes
import os
import random
import struct
import subprocess
import unicodedata

import pytest
import conftest  # noqa: E402  (the default model: written once, in the Makefile)

ROOT = os.environ.get("ANVIL_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MODEL = conftest.MODEL
GEMMA = conftest.GEMMA


def llama_cpp_version():
    with open(os.path.join(ROOT, "tests", "requirements.txt")) as f:
        for line in f:
            if line.startswith("llama-cpp-python=="):
                return line.strip().split("==")[1]
    raise AssertionError("no llama-cpp-python pin in tests/requirements.txt")


def sdist_models():
    """vendor/llama.cpp/models of the pinned llama-cpp-python sdist."""
    d = os.environ.get("ANVIL_LLAMA_MODELS") or os.path.join(
        os.path.expanduser("~"), ".cache", "anvil", f"llama_cpp_python-{llama_cpp_version()}",
        "vendor", "llama.cpp", "models")
    if not os.path.isfile(os.path.join(d, "ggml-vocab-llama-bpe.gguf")):
        pytest.fail(f"llama.cpp's vocabulary files are missing in {d}: run "
                    "scripts/fetch_llama_sdist.sh (make test does)")
    return d


def vocab_file(name):
    return os.path.join(sdist_models(), f"ggml-vocab-{name}.gguf")


def tools():
    out = []
    for mode in conftest.MODES:
        p = os.path.join(ROOT, "build", mode, "tests", "tool_tok")
        if os.path.exists(p):
            out.append(p)
    if not out:
        pytest.fail("tests/tool_tok is not built (run make)")
    return out


def run_tool(tool, model, mode, payload, *args, pre=()):
    env = dict(os.environ)
    env.setdefault("ASAN_OPTIONS", "detect_leaks=1")
    p = subprocess.run([tool, model, *pre, mode, *args], input=payload, capture_output=True,
                       timeout=1200, env=env)
    if p.returncode != 0:
        raise AssertionError(f"{os.path.basename(os.path.dirname(os.path.dirname(tool)))} "
                             f"tool_tok {mode} failed ({p.returncode}): "
                             f"{p.stderr.decode(errors='replace')[-3000:]}")
    return p.stdout


def ours_encode(tool, model, texts, parse_special=True, add_special=False):
    payload = b"".join(struct.pack("<I", len(t)) + t for t in texts)
    args = []
    if not parse_special:
        args.append("--no-parse-special")
    if add_special:
        args.append("--add-special")
    out = run_tool(tool, model, "encode", payload, *args)
    res, o = [], 0
    for _ in texts:
        (n,) = struct.unpack_from("<i", out, o)
        o += 4
        res.append(list(struct.unpack_from(f"<{n}i", out, o)))
        o += 4 * n
    assert o == len(out)
    return res


# ----------------------------------------------------------------------------
# the strings

def llama_decode(b):
    """llama.cpp's lenient UTF-8 decoder (unicode_cpts_from_utf8), as code
    points; used to keep out inputs on which llama.cpp itself aborts."""
    cps, i, n = [], 0, len(b)
    while i < n:
        c = b[i]
        if c < 0x80:
            cps.append(c)
            i += 1
            continue
        if not c & 0x40:
            ln = 0
        elif not c & 0x20:
            ln, cp = 2, c & 0x1F
        elif not c & 0x10:
            ln, cp = 3, c & 0x0F
        elif not c & 0x08:
            ln, cp = 4, c & 0x07
        else:
            ln = 0
        ok = ln and i + ln <= n and all(b[i + k] & 0xC0 == 0x80 for k in range(1, ln))
        if ok:
            for k in range(1, ln):
                cp = (cp << 6) | (b[i + k] & 0x3F)
            cps.append(cp)
            i += ln
        else:
            cps.append(0xFFFD)
            i += 1
    return cps


def llama_aborts_on(b):
    # a 4-byte form above U+10FFFF makes llama.cpp throw from
    # unicode_cpt_to_utf8 (uncaught: the process aborts); we map it to
    # U+FFFD instead (documented deviation, unit-tested in unit_tok.c)
    return any(cp > 0x10FFFF for cp in llama_decode(b))


PROSE = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "In 1492, Columbus sailed the ocean blue.",
    "Why is the sky blue? Rayleigh scattering, mostly.",
    "She said, \"Don't go there!\" -- and left.",
    "Mr. O'Neil's dog (a beagle) barked; the cat didn't care...",
    "E = mc^2 is Einstein's famous equation.",
    "Well... I guess so?! Maybe; maybe not.",
    "A sentence with    several   spaces inside.",
    "Smart “quotes” and ‘apostrophes’ — with dashes – and ellipsis…",
    "Café, naïve, résumé, coöperate, jalapeño, façade.",
    "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nbody",
    "email: someone@example.com, url: https://example.org/a?b=c&d=e#f",
    "#hashtag @mention $100 50% 3*4=12 a|b ~tilde `code` ^caret",
    "ALL CAPS SENTENCE WITH NUMBERS 123 AND SYMBOLS !!!",
    "mIxEd CaSe WoRdS aNd StUfF",
    "Tab\tseparated\tvalues\there",
    "line one\nline two\nline three",
    "trailing newline\n",
    "\nleading newline",
]

CODE = [
    "def f(x):\n    return x * 2\n",
    "for i in range(10):\n\tprint(i, end='')\n",
    "class Foo(Bar):\n    def __init__(self, *args, **kwargs):\n        super().__init__()\n",
    "#include <stdio.h>\nint main(void) {\n    printf(\"%d\\n\", 42);\n    return 0;\n}\n",
    "if (a && b || !c) { x += 1; } else { x -= 1; }",
    "const f = async (a, b) => { await g(a); return b ?? null; };",
    '{"name": "anvil", "version": "0.1.0", "tags": ["llm", "c"], "n": null, "ok": true}',
    '[\n  {\n    "id": 1,\n    "value": 3.5e-7\n  }\n]',
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "<html><body><p class=\"x\">Hi &amp; bye</p></body></html>",
    "$ ls -la | grep '^d' && echo \"done\" > /dev/null 2>&1",
    "x = [i**2 for i in range(100) if i % 3 == 0]",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "    indented with four spaces\n        and eight\n",
    "\t\tdouble tab indent\n",
    "a=1;b=2;c=a+b;// comment\n/* block */",
    "regex: ^[a-z0-9_-]{3,16}$ and \\d+\\s*\\w+",
    "std::vector<int> v{1, 2, 3}; v.push_back(4);",
]

NUMBERS = [
    "0", "7", "42", "123", "1234", "12345", "1234567890", "12345678901234567890123",
    "3.14159", "2.718281828459045", "1,000,000", "1.000.000,50", "-42", "+7", "1e-9",
    "6.022e23", "0x1F4A", "0b101101", "v1.2.3", "2024-01-15", "12:34:56", "+1 (555) 123-4567",
    "100%", "$19.99", "€5,00", "１２３４５", "٣٤٥٦", "१२३४", "²³", "½ ¼ ¾", "Ⅻ Ⅳ", "第3章",
    "a1b2c3", "abc123def456", "1st 2nd 3rd 4th", "000000000000", "9" * 50,
]

EMOJI = [
    "😀", "😀😃😄", "Hello 👋 world 🌍!", "👍🏽 👍🏿", "👨‍👩‍👧‍👦 family", "🏳️‍🌈",
    "🇫🇷🇯🇵🇺🇸", "❤️", "1️⃣ 2️⃣", "🤖🧠💡", "I ❤ NY", "☃ ★ ☂ ✓ ✗", "🙂\n🙃",
    "👩🏽‍💻 coder", "🧑‍🤝‍🧑", "🫠🫡",
]

SCRIPTS = [
    "日本語のテキストです。",
    "我爱自然语言处理。",
    "今天天气很好，我们去公园吧！",
    "한국어 문장입니다.",
    "Привет, мир! Как дела?",
    "Съешь же ещё этих мягких французских булок.",
    "مرحبا بالعالم",
    "שלום עולם",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "สวัสดีครับ",
    "Γειά σου Κόσμε",
    "Tiếng Việt có dấu",
    "e\u0301te\u0301 (decomposed accents)",
    "Ångström ÆØÅ æøå ß ẞ",
    "ﬁ ﬂ ligatures and ｆｕｌｌｗｉｄｔｈ",
    "𝓗𝓮𝓵𝓵𝓸 𝕎𝕠𝕣𝕝𝕕",
    "mixed 中文 and English and русский",
    "zero\u200bwidth\u200bspace and\ufeffbom",
    "soft\u00adhyphen",
]

WHITESPACE = [
    "", " ", "  ", "   ", " " * 16, "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n",
    "\r", " \n", "\n ", " \t \n ", "a b", "a  b", "a   b", "a\tb", "a\nb", "a\n\nb", "a \n b",
    "  leading", "trailing  ", "  both  ", "a\u00a0b", "a\u3000b", "a\u2028b", "a\u0085b",
    "a \u00a0 b", "x" + " " * 40 + "y", "\n" * 10, " \n" * 5, "\t \t \t", "end\n\n\n",
    "a\r\n\r\nb", "   \n   \n", "\u2003em\u2003space", "\x0b\x0c",
]

CONTRACTIONS = [
    "I'm", "don't", "they're", "we've", "she'll", "he'd", "it's", "IT'S", "DON'T", "We'LL",
    "They'RE", "I'D", "'s", "'t", "'re", "''", "'", "rock'n'roll", "O'Neil's", "can't won't",
    "'hello'", "y'all'd've", "ma'am", "'Sup", "the 90's",
]

SPECIALS = [
    "<|im_start|>user\nHi there<|im_end|>\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>",
    "<|endoftext|><|endoftext|>",
    "text<|endoftext|>more text",
    "<|im_end|><|im_start|>",
    "<|im_sta",
    "<|im_start",
    "im_start|>",
    "<|im_start|",
    "< |im_start|>",
    "<|IM_START|>",
    " <|im_start|> spaced ",
    "abc<|im_end|>def",
    "<|im_start|><|im_start|><|im_end|>",
    "<repo_name>anvil<file_sep>main.c",
    "<jupyter_code>print(1)<jupyter_output>1",
    "<|im_start|>user\n<|im_start|>nested<|im_end|>",
    "<|endoftext|>\n\n<|endoftext|>",
    "<<|im_end|>>",
]

INVALID = [
    b"\x80", b"\xbf\xbf", b"abc\xffdef", b"\xff", b"\xfe\xff", b"\xc3", b"\xc3(", b"\xe2\x82",
    b"\xe2\x82x", b"\xf0\x9f\x98", b"\xf0\x9f\x98 ok", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x80\xaf",
    b"\xf0\x80\x80\xaf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\x80\xed\xb0\x80",
    b"\xf8\x88\x80\x80\x80", b"\xfc\x84\x80\x80\x80\x80", b"caf\xe9", b"\xe9t\xe9",
    b"hello \x80\x81\x82 world", b"\x00", b"a\x00b", b"\x00\x00\x00", b"\x7f\x1b[31mred\x1b[0m",
    b"\xef\xbb\xbfBOM", b"\xef\xbf\xbd", b"<|im_start|>\xff<|im_end|>", b"1\xff2\xfe3",
    b"\xe2\x80\xa8\xe2", b" \x80 ", b"\n\x80\n", b"\xc2\xa0\xc2", b"\xf4\x8f\xbf\xbf",
]


def random_strings(rng, n):
    """Mixtures of the pieces above and random code points from many
    blocks (assigned in Python's Unicode tables only)."""
    blocks = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x590, 0x6FF),
              (0x900, 0x97F), (0xE00, 0xE7F), (0x1100, 0x11FF), (0x2000, 0x206F),
              (0x2100, 0x27BF), (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3),
              (0xFF00, 0xFFEF), (0x1D400, 0x1D7FF), (0x1F300, 0x1FAFF), (0x10000, 0x1007F)]
    pool = PROSE + CODE + NUMBERS + EMOJI + SCRIPTS + WHITESPACE + CONTRACTIONS + SPECIALS
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 8)):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(pool).encode())
            elif r < 0.8:
                lo, hi = rng.choice(blocks)
                s = ""
                while len(s) < rng.randint(1, 12):
                    c = chr(rng.randint(lo, hi))
                    if unicodedata.category(c) not in ("Cn", "Cs"):
                        s += c
                parts.append(s.encode())
            elif r < 0.9:
                parts.append(rng.choice([" ", "  ", "\n", "\t", "\r\n", " \n ", "   "]).encode())
            else:
                parts.append(rng.choice(INVALID))
        b = b"".join(parts)
        if not llama_aborts_on(b):
            out.append(b)
    return out


def long_text(rng):
    pool = PROSE + CODE + NUMBERS + EMOJI + SCRIPTS + CONTRACTIONS
    s = ""
    while len(s) < 10000:
        s += rng.choice(pool) + rng.choice([" ", "\n", "  ", "\n\n", ""])
    return s[:10000].encode()


def corpus():
    rng = random.Random(20240515)
    texts = [t.encode() for t in PROSE + CODE + NUMBERS + EMOJI + SCRIPTS + WHITESPACE +
             CONTRACTIONS + SPECIALS]
    texts += INVALID
    texts += random_strings(rng, 220)
    texts.append(long_text(rng))
    texts.append(("a" * 5000).encode())  # one 5000-byte word
    texts.append(("ab1 " * 1000).encode())
    assert not any(llama_aborts_on(t) for t in texts)
    return texts


TEXTS = corpus()


def is_valid_utf8(b):
    try:
        b.decode("utf-8", "strict")
        return True
    except UnicodeDecodeError:
        return False


def write_gguf_with(src, dst, replace):
    """Copy src's metadata (no tensors) with the string values of the keys in
    `replace` replaced (or added)."""
    with open(src, "rb") as f:
        data = f.read()
    assert data[:4] == b"GGUF"
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    o = 24
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(o, t):
        if t in scalar:
            return o + scalar[t]
        if t == 8:
            (n,) = struct.unpack_from("<Q", data, o)
            return o + 8 + n
        assert t == 9
        et, n = struct.unpack_from("<IQ", data, o)
        o += 12
        if et in scalar:
            return o + scalar[et] * n
        for _ in range(n):
            o = skip(o, et)
        return o

    kvs = []
    for _ in range(n_kv):
        (kl,) = struct.unpack_from("<Q", data, o)
        key = data[o + 8:o + 8 + kl].decode()
        (t,) = struct.unpack_from("<I", data, o + 8 + kl)
        end = skip(o + 12 + kl, t)
        kvs.append((key, data[o:end]))
        o = end
    def kv(key, val):
        k, v = key.encode(), val.encode()
        return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, len(v)) + v

    out = [kv(key, replace[key]) if key in replace else raw for key, raw in kvs]
    out += [kv(key, val) for key, val in replace.items() if key not in dict(kvs)]
    with open(dst, "wb") as f:
        f.write(b"GGUF" + struct.pack("<IQQ", version, 0, len(out)) + b"".join(out))




# ----------------------------------------------------------------------------
# comparing with llama-cpp-python

def compare(tool, model, llm, texts, parse_special, label=""):
    """Our ids equal llama.cpp's for every text (add_special off)."""
    ours = ours_encode(tool, model, texts, parse_special=parse_special)
    bad = []
    for t, o in zip(texts, ours):
        r = llm.tokenize(t, add_bos=False, special=parse_special)
        if o != r:
            bad.append((t, o, r))
    rate = 100.0 * (len(texts) - len(bad)) / len(texts)
    print(f"{label or os.path.basename(model)} "
          f"[{os.path.basename(os.path.dirname(os.path.dirname(tool)))}]: "
          f"{len(texts) - len(bad)}/{len(texts)} strings equal ({rate:.1f}%), "
          f"parse_special={parse_special}")
    msg = "\n".join(f"  {t[:80]!r}\n    ours {o[:24]}\n    ref  {r[:24]}" for t, o, r in bad[:8])
    assert not bad, f"{len(bad)} of {len(texts)} strings differ from llama.cpp:\n{msg}"


def ref_piece(llm, t, special):
    import llama_cpp
    vocab = llm._model.vocab
    buf = ctypes.create_string_buffer(256)
    n = llama_cpp.llama_token_to_piece(vocab, t, buf, 256, 0, special)
    if n < 0:  # a long token: the size it needs
        buf = ctypes.create_string_buffer(-n)
        n = llama_cpp.llama_token_to_piece(vocab, t, buf, len(buf), 0, special)
    assert 0 <= n <= len(buf)
    return buf.raw[:n]


def ref_pieces_match(tool, model, llm):
    """Every token's piece (special off and on) equals llama.cpp's."""
    out = run_tool(tool, model, "pieces", b"")
    o, bad = 0, []
    n_vocab = llm.n_vocab()
    for t in range(n_vocab):
        for special in (False, True):
            (n,) = struct.unpack_from("<I", out, o)
            p = out[o + 4:o + 4 + n]
            o += 4 + n
            r = ref_piece(llm, t, special)
            if p != r:
                bad.append((t, special, p, r))
    assert o == len(out)
    assert not bad, f"{len(bad)} of {2 * n_vocab} pieces differ, first: {bad[:5]}"


def decode_ids(tool, model, id_lists):
    """tool_tok decode: per list, (stream chunks, concatenated pieces)."""
    payload = b"".join(struct.pack(f"<I{len(ids)}i", len(ids), *ids) for ids in id_lists)
    out = run_tool(tool, model, "decode", payload)
    res, o = [], 0
    for _ in id_lists:
        (nc,) = struct.unpack_from("<I", out, o)
        o += 4
        chunks = []
        for _ in range(nc):
            (n,) = struct.unpack_from("<I", out, o)
            chunks.append(out[o + 4:o + 4 + n])
            o += 4 + n
        (n,) = struct.unpack_from("<I", out, o)
        res.append((chunks, out[o + 4:o + 4 + n]))
        o += 4 + n
    assert o == len(out)
    return res


def write_gguf_keep_tensors(src, dst, replace):
    """Copy a whole GGUF (tensors included) with the string values of the
    keys in `replace` replaced or added: the tensor table is copied as it
    is (its offsets are relative to the data section) and the data section
    is moved to the next aligned offset."""
    with open(src, "rb") as f:
        data = f.read()
    version, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
    scalar = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}

    def skip(o, t):
        if t in scalar:
            return o + scalar[t]
        if t == 8:
            (n,) = struct.unpack_from("<Q", data, o)
            return o + 8 + n
        et, n = struct.unpack_from("<IQ", data, o)
        o += 12
        if et in scalar:
            return o + scalar[et] * n
        for _ in range(n):
            o = skip(o, et)
        return o

    o, kvs, align = 24, [], 32
    for _ in range(n_kv):
        (kl,) = struct.unpack_from("<Q", data, o)
        key = data[o + 8:o + 8 + kl].decode()
        (t,) = struct.unpack_from("<I", data, o + 8 + kl)
        end = skip(o + 12 + kl, t)
        if key == "general.alignment":
            (align,) = struct.unpack_from("<I", data, o + 12 + kl)
        kvs.append((key, data[o:end]))
        o = end
    t0 = o
    for _ in range(n_tensors):
        (nl,) = struct.unpack_from("<Q", data, o)
        o += 8 + nl
        (nd,) = struct.unpack_from("<I", data, o)
        o += 4 + 8 * nd + 4 + 8
    tensor_table = data[t0:o]
    data_start = (o + align - 1) // align * align

    def kv(key, val):
        k, v = key.encode(), val.encode()
        return struct.pack("<Q", len(k)) + k + struct.pack("<IQ", 8, len(v)) + v

    out = [kv(key, replace[key]) if key in replace else raw for key, raw in kvs]
    out += [kv(key, val) for key, val in replace.items() if key not in dict(kvs)]
    head = b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(out)) + b"".join(out)
    head += tensor_table
    head += b"\0" * ((-len(head)) % align)
    with open(dst, "wb") as f:
        f.write(head + data[data_start:])
