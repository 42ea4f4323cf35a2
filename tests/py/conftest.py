"""Shared fixtures for anvil's Python tests: paths to the binaries, the
default model, a session-wide llama-cpp-python reference, and the check
that a PNG written by `anvil bench --png` is a real chart."""
import inspect
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.environ.get("ANVIL_ROOT") or os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_default(name):
    """The value the Makefile gives `name` (`NAME ?= path` or `NAME := path`),
    as an absolute path: the default model's path is written only there."""
    with open(os.path.join(ROOT, "Makefile")) as f:
        for line in f:
            m = re.match(r"%s\s*[?:]?=\s*(\S+)\s*$" % re.escape(name), line)
            if m:
                return os.path.join(ROOT, m.group(1))
    raise RuntimeError("Makefile sets no %s" % name)


MODEL = os.environ.get("ANVIL_MODEL") or make_default("MODEL")
GEMMA = os.environ.get("ANVIL_GEMMA") or make_default("GEMMA")

# `anvil bench --png` draws with bench/plot.py; the tests make it use this
# interpreter (the test venv, matplotlib pinned in tests/requirements.txt)
# rather than whichever Python it would find. test_bench_plot.py checks the
# search itself.
os.environ.setdefault("ANVIL_PYTHON", sys.executable)


# The builds under test: tests/run_all.py passes its --modes (the
# Makefile's TEST_MODES) as ANVIL_TEST_MODES. The ASan+UBSan binaries run
# only when "asan" is among them (.ci/run's forced-kernel passes are
# release only); tests that exist only to run them are then deselected,
# never skipped.
MODES = [m for m in os.environ.get("ANVIL_TEST_MODES", "release,asan").split(",") if m]
ASAN = "asan" in MODES


def pytest_configure(config):
    config.addinivalue_line("markers", "asan: runs the ASan+UBSan build only (deselected "
                            "when ANVIL_TEST_MODES has no asan)")
    config.addinivalue_line("markers", "kernels: its results depend on the kernel family; "
                            ".ci/run runs these again (-m kernels) with ANVIL_KERNELS=avx2 "
                            "and =ref forced")
    config.addinivalue_line("markers", "full: the whole suite only (`make test`); `make check`, "
                            "the fast tier, deselects it (-m 'not full'). Given by FULL_FILES "
                            "and FULL_TESTS below, or by the test needing llama-cpp-python")


# The tests of the whole suite only, marked `full` here so that the choice
# is in one place (a file may also mark a test itself): what needs a second
# engine, a browser, a proxy, the fuzzing tool chain, or minutes of work.
# Decided by measuring (pytest --durations=0 on 2 cores); docs/testing.md
# says what stays in the fast tier. A test that uses llama-cpp-python (in
# its own body, in a fixture it asks for, or a module that imports it at
# the top) is `full` without being listed.
FULL_FILES = {
    "test_deploy.py",          # nginx and haproxy in front of replicas
    "test_webui_browser.py",   # Chromium
    "test_server_soak.py",     # half a minute of hostile load on the ASan build
    "test_fuzz_smoke.py",      # builds the libFuzzer harnesses with clang
    "test_amx.py",             # quantizes and runs the model once per AMX type mix
}
# The slowest of the rest (file::test, every parametrization): each one
# several seconds of its own on 2 cores. Every file keeps faster tests of
# the same module in the fast tier.
FULL_TESTS = {
    "test_prefetch.py::test_every_prefetch_is_compiled",
    "test_engine.py::test_batched_equals_serial",
    "test_engine.py::test_preemption_is_transparent",
    "test_engine.py::test_driver_thread",
    "test_kernels.py::test_bench_kernels_json",
    "test_hp1_model.py::test_hp1_prefill_equals_decode",
    "test_hp1_model.py::test_hp1_engine_batched_equals_serial",
    "test_spec.py::test_bench_spec_json",
    "test_spec.py::test_sampling_keeps_the_distribution",
    "test_bench_plot.py::test_scenario_png",
    "test_bench_plot.py::test_python_search",
    "test_bench_plot.py::test_bad_data",
    "test_bench_plot.py::test_bad_compare",
    "test_bench_plot.py::test_png_bad_directory",
    "test_bench_plot.py::test_png_needs_no_source_tree",
    "test_bench_plot.py::test_attention_png",
    "test_bench_batched.py::test_png_with_compare",
    "test_quantize.py::test_our_reader_accepts",
    "test_quantize.py::test_gguf_package_reads_output",
    "test_quant.py::test_dequant_real_tensor",
    "test_kquant.py::test_dequant_every_gemma_tensor",
    "test_kquant.py::test_matmul_random_blocks",
    "test_cli_constrain.py::test_speculation_changes_nothing",
    "test_cli_constrain.py::test_json_schema",
    "test_constrain.py::test_schema_walks_validate",
    "test_server_constrain.py::test_parse_sampled",
    "test_server_constrain.py::test_sampled_schemas_validate",
    "test_server_constrain.py::test_parse_pydantic",
    "test_server_web.py::test_props_match_the_gguf",
    "test_archs.py::test_arch_vs_numpy",
    "test_perplexity.py::test_ppl_is_mean_of_saved_logprobs",
}
SECOND_ENGINE = re.compile(r"\bllama_cpp\b")
MODULE_IMPORT = re.compile(r"^(import|from) llama_cpp\b", re.M)
_src_cache = {}


def _mentions(obj, pattern):
    key = (id(obj), pattern.pattern)
    if key not in _src_cache:
        try:
            _src_cache[key] = bool(pattern.search(inspect.getsource(obj)))
        except (OSError, TypeError):
            _src_cache[key] = False
    return _src_cache[key]


def _code_names(code):
    """Every global name a code object and the code nested in it use."""
    names = set(code.co_names)
    for c in code.co_consts:
        if inspect.iscode(c):
            names |= _code_names(c)
    return names


def _uses_llama(func, depth=4, seen=None):
    """func, or a function of its own module that it calls (to depth),
    mentions llama_cpp."""
    seen = set() if seen is None else seen
    if id(func) in seen or not inspect.isfunction(func):
        return False
    seen.add(id(func))
    if _mentions(func, SECOND_ENGINE):
        return True
    if depth == 0:
        return False
    g = func.__globals__
    return any(_uses_llama(g[n], depth - 1, seen) for n in _code_names(func.__code__)
               if inspect.isfunction(g.get(n)) and g[n].__module__ == func.__module__)


def needs_full(item):
    name = os.path.basename(str(item.fspath))
    if name in FULL_FILES or f"{name}::{item.originalname}" in FULL_TESTS:
        return True
    if item.get_closest_marker("full"):
        return True
    if item.module is not None and _mentions(item.module, MODULE_IMPORT):
        return True
    if _uses_llama(getattr(item, "function", None)):
        return True
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    for fname in item.fixturenames:
        for fd in defs.get(fname, ()):
            if _uses_llama(fd.func):
                return True
    return False


@pytest.hookimpl(tryfirst=True)  # before -m 'not full' selects
def pytest_collection_modifyitems(config, items):
    for it in items:
        if needs_full(it) and not it.get_closest_marker("full"):
            it.add_marker(pytest.mark.full)
    if ASAN:
        return
    drop = [it for it in items if it.get_closest_marker("asan")]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [it for it in items if not it.get_closest_marker("asan")]


def mode_paths(fmt):
    """fmt % mode for each build under test whose file exists."""
    return [fmt % m for m in MODES if os.path.exists(fmt % m)]


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
def microbench_bin():
    """bin/anvil-microbench: the micro-benchmarks (`make tests` builds it)."""
    path = os.path.join(ROOT, "bin", "anvil-microbench")
    if not os.path.exists(path):
        pytest.fail(f"{path} missing (run `make tests` or `make microbench`)")
    return path


@pytest.fixture(scope="session")
def anvil_bins():
    """The release binary, plus the ASan+UBSan one when it is built."""
    bins = [os.path.join(ROOT, "bin", "anvil")]
    asan = os.path.join(ROOT, "bin", "anvil-asan")
    if ASAN and os.path.exists(asan):
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
