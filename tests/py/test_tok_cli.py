"""`anvil tokenize`: ids equal llama-cpp-python's on a few texts (the
library itself is covered by test_tok.py), pieces are shown, and bad usage
exits with status 2 and one line of error."""
import os
import subprocess

import pytest

ROOT = os.environ.get("ANVIL_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MODEL = os.environ.get("ANVIL_MODEL") or os.path.join(ROOT, "models",
                                                      "SmolLM2-135M-Instruct.Q4_1.gguf")

TEXTS = [
    "Hello world",
    "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>\n<|im_start|>assistant\n",
    "  spaces,\ttabs\nand newlines  ",
    "emoji 😀👍🏽 and 日本語 and Привет",
]


def bins():
    out = [os.path.join(ROOT, "bin", b) for b in ("anvil", "anvil-asan")]
    out = [b for b in out if os.path.exists(b)]
    if not out:
        pytest.fail("bin/anvil is not built (run make)")
    return out


def tok(b, *args):
    return subprocess.run([b, "tokenize", *args], capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def ref():
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=MODEL, vocab_only=True, verbose=False)


def test_ids_match_llama_cpp(ref):
    for b in bins():
        for t in TEXTS:
            for special in (True, False):
                args = ["-m", MODEL, "-p", t, "--ids-only"] + ([] if special else ["--no-special"])
                p = tok(b, *args)
                assert p.returncode == 0, p.stderr
                ids = [int(x) for x in p.stdout.split()]
                assert ids == ref.tokenize(t.encode(), add_bos=True, special=special), (b, t)


def test_file_input_and_pieces(tmp_path):
    f = tmp_path / "in.txt"
    f.write_bytes(b"bad \xff byte\n<|im_end|>")
    p = tok(bins()[0], "-m", MODEL, "-f", str(f))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.decode().splitlines()
    assert lines[-1].split() == ["2", "->", "'<|im_end|>'"]
    # U+FFFD from the bad byte is printed as a whole character
    assert "\ufffd" in p.stdout.decode()


@pytest.mark.parametrize("args", [
    [],
    ["-p", "hi"],
    ["-m", MODEL],
    ["-m", MODEL, "-p", ""],
    ["-m", MODEL, "-p", "x", "-f", "/dev/null"],
    ["-m", "/no/such/model.gguf", "-p", "hi"],
    ["-m", MODEL, "-f", "/no/such/file"],
    ["-m", MODEL, "-p", "hi", "--bogus"],
    ["-m"],
])
def test_bad_usage(args):
    for b in bins():
        p = tok(b, *args)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        err = p.stderr.decode()
        assert err.startswith("anvil tokenize: ") or "usage:" in err, err


def test_help():
    p = tok(bins()[0], "--help")
    assert p.returncode == 0 and b"usage: anvil tokenize" in p.stdout
