"""Fidelity of the 5-bit, K-quant and IQ4 types end to end:
SmolLM2 requantized to each type by llama.cpp's own quantizer
(llama-cpp-python's llama_model_quantize, pure: every matrix the type, the
576-wide ones falling back as this llama.cpp does: Q4_K -> Q5_0, Q5_K ->
Q5_1, Q6_K -> Q8_0, Q2_K/Q3_K -> Q4_0, IQ4_XS -> IQ4_NL; only ffn_down,
1536 wide, keeps the K type), from an F16 conversion of the
default model by `anvil quantize`. On the same file, anvil's logits at
every position of a teacher-forced text (256 tokens) are compared with
llama-cpp-python's:

  - anvil vs llama.cpp: max and mean |diff|, the share of positions with
    the same top token. The engines quantize activations differently (Q8A
    with float scales vs Q8_0 with f16 ones; Q8K vs Q8_K differ in the
    last bit of d), and 30 layers amplify that, as for Q4_1
    (test_model_llama.py). Measured (avx2, this text): mean |diff|
    0.16-0.26, max 2.0-4.8 (<= 15% of a row's range), top token 90-96%.
  - both against llama.cpp's F16 logits: the quantization error. A wrong
    kernel would move anvil away from F16 much more than llama.cpp, so
    anvil's mean error must stay within 8% (+ 0.02, the engines' noise
    floor: they differ by ~0.2 per logit whatever the type) of llama.cpp's,
    and its top-token share with F16 within 0.05. Measured on this text:
    Q4_K 0.843 vs 0.843, Q6_K 0.294 vs 0.277, IQ4_XS 2.02 vs 2.07; shares
    within 0.02.

The quantized files are cached under build/fidelity/ keyed by the F16
file's SHA-256 and the llama-cpp-python version (the IQ4 quantizers take
about 2 minutes each); nothing is downloaded.
"""
import ctypes
import hashlib
import os
import subprocess

import llama_cpp  # a missing reference is a failure, not a skip
import numpy as np
import pytest

from conftest import ROOT, build_path, run

# model-level numerics: .ci/run runs them again with each kernel family forced
pytestmark = pytest.mark.kernels

# name -> (llama_ftype, the types the pure file must hold)
TYPES = {
    "Q5_0": (8, {"Q5_0"}),
    "Q5_1": (9, {"Q5_1"}),
    "IQ4_NL": (25, {"IQ4_NL"}),
    "Q2_K": (10, {"Q2_K", "Q4_0"}),
    "Q3_K": (11, {"Q3_K", "Q4_0"}),
    "Q4_K": (14, {"Q4_K", "Q5_0"}),
    "Q5_K": (16, {"Q5_K", "Q5_1"}),
    "Q6_K": (18, {"Q6_K", "Q8_0"}),
    "IQ4_XS": (30, {"IQ4_XS", "IQ4_NL"}),
}

TEXT = (
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, counting the steps "
    "as his father had taught him: one hundred and twelve, no more and no less. From the lamp "
    "room he could see the whole bay, the fishing boats coming home with their nets, the gulls "
    "circling the harbour wall, and far out, where the water turned from green to grey, the "
    "long ships that never stopped. He wrote down the weather in a small notebook, the wind in "
    "the morning and again at night, the height of the waves, and the names of the boats that "
    "passed. Nobody had asked him to do this. The notebooks filled a shelf, then two, and the "
    "children from the village would sometimes come up to read them aloud, laughing at the "
    "spelling. In winter the storms came from the north. The glass rattled in its frame and the "
    "beam swept across the foam, white and slow, and he would sit with a cup of tea and listen to "
    "the radio, waiting for the calls that sometimes came. Once, in the year of the great flood, "
    "a ship lost its engine and drifted toward the rocks, and he rang the bell for three hours "
    "until the lifeboat reached it. Afterwards the captain sent him a letter and a bottle of "
    "wine, which he never opened. Def main(): print('hello, world') # 42 + 17 = 59."
)
N_TOK = 256


def types_in(path):
    """{type name} of the file's 2-D tensors, via `anvil inspect`."""
    p = run([os.path.join(ROOT, "bin", "anvil"), "inspect", path, "--no-meta"], text=True)
    assert p.returncode == 0, p.stderr
    out = set()
    for line in p.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[0].isdigit() and " x " in line:
            out.add(parts[2])
    return out


@pytest.fixture(scope="module")
def files(model_path, anvil_bin, tmp_path_factory):
    f16 = str(tmp_path_factory.mktemp("fid") / "smol-f16.gguf")
    p = run([anvil_bin, "quantize", model_path, f16, "F16"], text=True)
    assert p.returncode == 0, p.stderr
    h = hashlib.sha256()
    with open(f16, "rb") as f:
        for b in iter(lambda: f.read(1 << 22), b""):
            h.update(b)
    cache = os.path.join(ROOT, "build", "fidelity", f"{h.hexdigest()[:16]}-{llama_cpp.__version__}")
    os.makedirs(cache, exist_ok=True)
    out = {"F16": f16}
    for name, (ftype, _) in TYPES.items():
        dst = os.path.join(cache, f"smol-{name}.gguf")
        if not os.path.exists(dst):
            qp = llama_cpp.llama_model_quantize_default_params()
            qp.ftype = ftype
            qp.nthread = 2
            qp.pure = True
            tmp = dst + f".part{os.getpid()}"
            rc = llama_cpp.llama_model_quantize(f16.encode(), tmp.encode(), ctypes.byref(qp))
            assert rc == 0, f"llama_model_quantize {name}: {rc}"
            os.replace(tmp, dst)
        out[name] = dst
    return out


def llama_logits(path, toks=None):
    llm = llama_cpp.Llama(model_path=path, n_ctx=1024, n_batch=512, n_threads=2, logits_all=True,
                          seed=0, verbose=False)
    if toks is None:
        toks = llm.tokenize(TEXT.encode(), add_bos=False, special=False)[:N_TOK]
    llm.reset()
    llm.eval(toks)
    return toks, np.array(llm.scores[:len(toks)], dtype=np.float32)


def anvil_logits(path, toks, tmp_path, kernels):
    out = tmp_path / "logits.f32"
    p = subprocess.run([build_path("release", "tool_teacher"), path, str(out), "-k", kernels, "-t", "2"],
                       input=" ".join(map(str, toks)), text=True, capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr
    return np.fromfile(out, np.float32).reshape(len(toks), -1)


@pytest.fixture(scope="module")
def f16_ref(files):
    toks, logits = llama_logits(files["F16"])
    assert len(toks) == N_TOK
    return toks, logits


def kernel_families():
    fams = ["ref"]
    flags = open("/proc/cpuinfo").read()
    if " avx2 " in flags and " fma " in flags and " f16c " in flags:
        fams = ["avx2"]  # bit-exact with ref on every new type (unit_kquant.c): one is enough
    return fams


@pytest.mark.parametrize("name", list(TYPES))
def test_logits_vs_llamacpp(name, files, f16_ref, tmp_path):
    path = files[name]
    want = TYPES[name][1]
    assert types_in(path) >= want, f"{name}: file holds {types_in(path)}"
    toks, f16 = f16_ref
    _, ref = llama_logits(path, toks)
    for kern in kernel_families():
        got = anvil_logits(path, toks, tmp_path, kern)
        assert np.all(np.isfinite(got))
        d = np.abs(got - ref)
        rng = ref.max(axis=1) - ref.min(axis=1)
        same_top = float(np.mean(got.argmax(1) == ref.argmax(1)))
        err_anvil = float(np.abs(got - f16).mean())
        err_llama = float(np.abs(ref - f16).mean())
        top_anvil = float(np.mean(got.argmax(1) == f16.argmax(1)))
        top_llama = float(np.mean(ref.argmax(1) == f16.argmax(1)))
        print(f"{name} [{kern}] vs llama.cpp: max|d| {d.max():.3f} mean|d| {d.mean():.4f} "
              f"same top {same_top:.3f} | vs F16: anvil {err_anvil:.4f} / top {top_anvil:.3f}, "
              f"llama.cpp {err_llama:.4f} / top {top_llama:.3f}")
        assert float(np.max(d.max(axis=1) / rng)) <= 0.25, "max |diff| over 25% of a row's range"
        assert d.mean() <= 0.4, f"mean |diff| {d.mean():.4f}"
        assert same_top >= 0.85, f"same top token at {same_top:.3f} of positions"
        assert err_anvil <= 1.08 * err_llama + 0.02, (err_anvil, err_llama)
        assert top_anvil >= top_llama - 0.05, (top_anvil, top_llama)
