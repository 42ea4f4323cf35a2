"""Shared fixtures for anvil's Python tests: paths to the binaries, the
default model, a session-wide llama-cpp-python reference, and the check
that a PNG written by `anvil bench --png` is a real chart."""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.environ.get("ANVIL_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.environ.get("ANVIL_MODEL") or os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

# `anvil bench --png` draws with bench/plot.py; the tests make it use this
# interpreter (the test venv, matplotlib pinned in tests/requirements.txt)
# rather than whichever Python it would find. test_bench_plot.py checks the
# search itself.
os.environ.setdefault("ANVIL_PYTHON", sys.executable)


def build_path(mode, name):
    return os.path.join(ROOT, "build", mode, "tests", name)


@pytest.fixture(scope="session")
def root():
    return ROOT


@pytest.fixture(scope="session")
def model_path():
    if not os.path.exists(MODEL):
        pytest.fail(f"default model missing: {MODEL} (run `make model`)")
    return MODEL


@pytest.fixture(scope="session")
def anvil_bin():
    return os.path.join(ROOT, "bin", "anvil")


@pytest.fixture(scope="session")
def anvil_bins():
    """The release binary, plus the ASan+UBSan one when it is built."""
    bins = [os.path.join(ROOT, "bin", "anvil")]
    asan = os.path.join(ROOT, "bin", "anvil-asan")
    if os.path.exists(asan):
        bins.append(asan)
    return bins


@pytest.fixture(scope="session")
def llama_ref(model_path):
    """llama-cpp-python on the same GGUF, 2 threads, f16 KV cache."""
    import llama_cpp
    llm = llama_cpp.Llama(model_path=model_path, n_ctx=1024, n_batch=512, n_threads=2,
                          seed=0, verbose=False)
    return llm


def run(cmd, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("timeout", 600)
    return subprocess.run(cmd, **kw)


@pytest.fixture(scope="session")
def llama_vocab(model_path):
    """llama-cpp-python with only the default model's vocabulary: the
    reference tokenizer for building prompts."""
    import llama_cpp
    return llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)


def assert_chart(path, min_w=1000, min_h=400, min_kb=20):
    """path is a PNG chart of at least min_w x min_h pixels and min_kb KB,
    with the many shades anti-aliased text and lines leave (a blank or
    truncated image fails)."""
    from PIL import Image
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert len(data) >= min_kb * 1024, f"{path}: {len(data)} bytes"
    with Image.open(path) as im:
        im.load()  # decodes every row: a truncated file raises here
        w, h = im.size
        assert w >= min_w and h >= min_h, f"{path}: {w}x{h}"
        colors = im.convert("RGB").getcolors(maxcolors=1 << 20)
        assert colors is not None and len(colors) > 200, f"{path}: {len(colors or [])} colours"
