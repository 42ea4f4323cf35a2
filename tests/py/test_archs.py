"""Every architecture anvil runs, on tiny random-weight GGUF files written
by tests/gen/tiny_arch.py (llama with Llama-3 rope_freqs, llama with a
Mistral-style sliding window, qwen2, qwen3, gemma3, phi3), checked three
ways:

- against the independent float64 numpy forward pass of tiny_arch.py, at
  every position of a 120-token sequence (long enough for the sliding
  windows of mistral and gemma3, and for their KV blocks outside the
  window to be given back), for every kernel family the CPU runs;
- against llama-cpp-python on the same file (llama.cpp runs each of these
  architectures; it ignores the Mistral-style window on `llama`, so there
  only the positions inside the window are compared);
- against itself: token by token and in uneven chunks gives the same bits
  as the whole prompt in one batch (prefill equals decode, windows
  included), and several sequences batched together give each sequence's
  own greedy continuation.

Tolerances: with F32 weights only summation order and the F16 KV cache
(emulated in numpy) separate the engines: 1e-3 of the logit range. Q8_0
weights also quantize activations per block of 32: 4e-2.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, build_path, run

sys.path.insert(0, os.path.join(ROOT, "tests", "gen"))
import tiny_arch  # noqa: E402

# model-level numerics: .ci/run runs them again with each kernel family forced
pytestmark = pytest.mark.kernels

# HP1 variants have their own tests (test_hp1_model.py): llama.cpp cannot run them;
# a bidirectional model (gemma-embedding) embeds, test_embed_gemma.py checks it
ARCHS = [n for n, c in tiny_arch.CONFIGS.items() if not c["hp1"] and not c["bidir"]]
TOKS = [int(x) for x in np.random.default_rng(11).integers(0, 256, 120)]
TOL = {"F32": 1e-3, "Q8_0": 4e-2}


def kernel_families():
    fams = ["ref"]
    flags = open("/proc/cpuinfo").read()
    if " avx2 " in flags and " fma " in flags:
        fams.append("avx2")
    if all(f" {f} " in flags for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni")):
        fams.append("avx512")
    return fams


def anvil_rows(path, toks, kernels=None, chunk=0, extra=()):
    args = [build_path("release", "tool_logits"), path, "-a"]
    if kernels:
        args += ["-k", kernels]
    if chunk:
        args += ["-s", str(chunk)]
    p = run(args + list(extra), input=" ".join(map(str, toks)) + "\n", text=True)
    assert p.returncode == 0, p.stderr
    return np.array(json.loads(p.stdout.splitlines()[0])["all"])


def rel_err(got, ref):
    rng = ref.max(axis=1) - ref.min(axis=1)
    return np.abs(got - ref).max(axis=1) / rng


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("archs")
    out = {}
    for name in ARCHS:
        for wt in TOL:
            path = str(d / f"{name}-{wt}.gguf")
            out[name, wt] = (path, tiny_arch.make_gguf(path, name, wt, seed=5))
    return out


@pytest.mark.parametrize("wtype", list(TOL))
@pytest.mark.parametrize("name", ARCHS)
def test_arch_vs_numpy(files, name, wtype):
    path, w = files[name, wtype]
    ref = tiny_arch.forward(name, w, TOKS)
    for fam in kernel_families():
        err = rel_err(anvil_rows(path, TOKS, fam), ref)
        assert err.max() <= TOL[wtype], f"{name} {wtype} {fam}: worst row {err.argmax()} {err.max():.2e}"


@pytest.mark.parametrize("wtype", list(TOL))
@pytest.mark.parametrize("name", ARCHS)
def test_arch_vs_llamacpp(files, name, wtype):
    import llama_cpp
    path, _ = files[name, wtype]
    llm = llama_cpp.Llama(model_path=path, n_ctx=256, n_batch=256, logits_all=True, n_threads=2,
                          verbose=False)
    llm.eval(TOKS)
    ref = np.array(llm.scores[:len(TOKS)], dtype=np.float64)
    got = anvil_rows(path, TOKS)
    n = len(TOKS)
    if name == "mistral":
        n = tiny_arch.CONFIGS[name]["swa"]  # llama.cpp runs `llama` without the window
    err = rel_err(got[:n], ref[:n])
    assert err.max() <= 2 * TOL[wtype], f"{name} {wtype}: worst row {err.argmax()} {err.max():.2e}"
    same_top = np.mean(np.argmax(got[:n], axis=1) == np.argmax(ref[:n], axis=1))
    assert same_top >= (1.0 if wtype == "F32" else 0.9), f"{name}: same top token {same_top:.2f}"


@pytest.mark.parametrize("name", ARCHS)
def test_arch_prefill_equals_decode(files, name):
    path, _ = files[name, "Q8_0"]
    fam = kernel_families()[-1]
    whole = anvil_rows(path, TOKS, fam)
    for chunk in (1, 7, 33):
        part = anvil_rows(path, TOKS, fam, chunk=chunk)
        assert np.array_equal(whole, part), f"{name}: chunks of {chunk} differ from one batch"


@pytest.mark.parametrize("name", ARCHS)
def test_arch_batch_invariance(files, name):
    path, _ = files[name, "F32"]
    prompts = [TOKS[:40], TOKS[10:90], TOKS[:7]]
    inp = "".join(" ".join(map(str, t)) + "\n" for t in prompts)
    tool = build_path("release", "tool_logits")
    one = run([tool, path, "-g", "24"], input=inp, text=True)
    many = run([tool, path, "-g", "24", "-b"], input=inp, text=True)
    assert one.returncode == 0 and many.returncode == 0, one.stderr + many.stderr
    a = [json.loads(l) for l in one.stdout.splitlines()]
    b = [json.loads(l) for l in many.stdout.splitlines()]
    for x, y in zip(a, b):
        assert x["gen"] == y["gen"]
        assert x["logits"] == y["logits"]


def test_windowed_kv_is_smaller(tmp_path, anvil_bin):
    """A gemma3 context keeps the window on its local layers only: its KV
    pool for 8k positions is far below the same layers at full length."""
    path = str(tmp_path / "g.gguf")
    tiny_arch.make_gguf(path, "gemma3", "F32", seed=1, n_ctx=8192)
    p = run([build_path("release", "tool_engine"), path, "--kv-report", "8192"], text=True)
    assert p.returncode == 0, p.stderr
    rep = json.loads(p.stdout)
    # 1 global layer of 6 keeps 8192 positions; 5 local layers keep ~the
    # window (16) plus slack and a step
    assert rep["windowed_bytes"] < 0.3 * rep["full_bytes"], rep


# ---------------------------------------------------------------------------
# bad input: exit status 2 and a message naming what is wrong

def load_error(anvil_bin, path):
    p = run([anvil_bin, "run", "-m", path, "-p", "hi", "-n", "1"], text=True)
    return p.returncode, p.stderr


@pytest.mark.parametrize("case", ["missing", "misshaped", "window", "heads", "unknown_arch", "bias"])
def test_arch_bad_input(tmp_path, anvil_bin, anvil_bins, case):
    path = str(tmp_path / f"{case}.gguf")
    if case == "missing":
        tiny_arch.make_gguf(path, "gemma3", drop=["blk.3.post_ffw_norm.weight"])
        want = "blk.3.post_ffw_norm.weight"
    elif case == "misshaped":
        tiny_arch.make_gguf(path, "qwen3", override={"blk.1.attn_k_norm.weight": np.ones(32, np.float32)})
        want = "blk.1.attn_k_norm.weight"
    elif case == "window":
        tiny_arch.make_gguf(path, "gemma3", n_ctx=64, extra_u32={"gemma3.attention.sliding_window": 100})
        want = "sliding_window"
    elif case == "heads":
        tiny_arch.make_gguf(path, "llama3", cfg={"n_head": 4, "n_head_kv": 3})
        want = "n_head_kv 3"
    elif case == "bias":
        tiny_arch.make_gguf(path, "qwen2", drop=["blk.0.attn_v.bias"])
        want = "attn_q/k/v.bias"
    else:
        import gguf
        tiny_arch.make_gguf(path, "llama3")
        with open(path, "r+b") as f:  # rename the architecture in place
            data = f.read()
            i = data.index(b"llama", data.index(b"general.architecture"))
            f.seek(i)
            f.write(b"xlama")
        want = "llama, qwen2, qwen3, gemma3, phi3"
    for b in anvil_bins:
        rc, err = load_error(b, path)
        assert rc == 2, (b, rc, err)
        assert want in err, (case, err)
        assert "AddressSanitizer" not in err and "runtime error" not in err


@pytest.mark.parametrize("name", ["gemma3", "mistral"])
def test_windowed_engine_prefix_cache_and_preemption(tmp_path, name):
    """Sliding-window layers under the serving engine: prompts well past
    the window (16 positions here) so that blocks leave the window and go
    back to the pool, every prompt twice (the second reuses the cached
    prefix, the window's blocks included), and a pool small enough to
    preempt. Every output must equal the serial run's, which recomputes
    everything (the full-recompute oracle), and the pool must end empty."""
    path = str(tmp_path / f"{name}.gguf")
    tiny_arch.make_gguf(path, name, "F32", seed=9)
    rng = np.random.default_rng(4)
    lines = []
    for i in range(6):
        toks = [int(x) for x in rng.integers(0, 256, 60 + 25 * i)]
        lines.append(f"{20 + 3 * i} {0.0 if i % 2 else 0.8} {i + 1} - {' '.join(map(str, toks))}\n")
    lines = lines + lines
    tool = build_path("release", "tool_engine")
    serial = run([tool, path, "--serial", "-r", "1", "-x", "512"], input="".join(lines), text=True)
    assert serial.returncode == 0, serial.stderr
    kv_mem = {"gemma3": "400000", "mistral": "120000"}[name]  # small enough to preempt
    for args in (["-r", "8", "-x", "512"],
                 ["-r", "6", "-x", "512", "-s", "48", "-c", "16", "--kv-mem", kv_mem]):
        p = run([tool, path, *args], input="".join(lines), text=True)
        assert p.returncode == 0, p.stderr
        assert p.stdout == serial.stdout, args
        assert "kv_used=0 " in p.stderr, p.stderr
        if "--kv-mem" in args:
            assert "preemptions=0 " not in p.stderr, p.stderr
