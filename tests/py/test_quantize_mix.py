"""Quantization mixes by name (`anvil quantize IN OUT Q4_K_M` ...) against
llama.cpp's quantizer (llama_model_quantize from llama-cpp-python, the
same code as llama-quantize) on the same F16 files:

  - every tensor gets the same type, and general.file_type is the same,
    for every mix anvil offers, on three models: SmolLM2-135M (576-wide
    rows: the fallback rules), and two small random llama-shaped models
    written here with the gguf package whose rows divide into 256-element
    super-blocks (16 layers with 4 query heads per KV head and a tied
    embedding; 8 layers without grouping and a separate output matrix), so
    the per-layer and per-category rules all fire;
  - every converted tensor decodes (gguf.quants.dequantize) with an RMSE
    no worse than llama.cpp's own quantization of it;
  - llama-cpp-python loads anvil's files and answers as the F16 model does
    (first greedy token among the F16 model's top 5);
  - files written by llama.cpp load and run in anvil. That needs anvil to
    read the K-quant and 5-bit types, which the kq branch adds: until it is
    merged, that test reports SKIPPED with the reason.
"""
import ctypes
import os
import subprocess

import numpy as np
import pytest

import gguf
import llama_cpp
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import quants  # noqa: E402
import conftest  # noqa: E402  (the default model: written once, in the Makefile)

ROOT = os.environ.get("ANVIL_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
MODEL = conftest.MODEL
ANVIL = os.path.join(ROOT, "bin", "anvil")

# llama.cpp's llama_ftype of each mix anvil accepts
FTYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10,
         "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16,
         "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "BF16": 32}
QUANT_MIXES = [m for m in FTYPE if m not in ("F32", "F16", "BF16")]
SMOL_MIXES = ["Q4_K_M", "Q5_K_M", "Q6_K", "Q3_K_M", "Q2_K", "IQ4_XS"]

pytestmark = [pytest.mark.skipif(not os.path.exists(ANVIL), reason="bin/anvil not built")]


def run(args, timeout=1200, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


def llama_quantize(src, dst, ftype, pure=False):
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype = ftype
    p.nthread = 2
    p.pure = pure
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    assert rc == 0, f"llama_model_quantize({src}, ftype {ftype}) failed"


def anvil_quantize(src, dst, mix, *extra):
    p = run([ANVIL, "quantize", "-q", "-t", "2", *extra, src, dst, mix])
    assert p.returncode == 0, p.stderr


def tensors(path):
    r = gguf.GGUFReader(path)
    f = r.fields.get("general.file_type")  # a source file may have none
    return {t.name: t for t in r.tensors}, int(f.parts[f.data[0]][0]) if f else -1


def compare(src, ours, theirs, mix, ftypes=FTYPE):
    """Same types tensor by tensor, same file type, and per converted
    tensor an RMSE no worse than llama.cpp's. Returns the SSE ratio."""
    s, _ = tensors(src)
    a, fa = tensors(ours)
    b, fb = tensors(theirs)
    assert fa == fb == ftypes[mix]
    assert sorted(a) == sorted(b) == sorted(s)
    diff = [(n, a[n].tensor_type.name, b[n].tensor_type.name) for n in a
            if a[n].tensor_type != b[n].tensor_type]
    assert not diff, (mix, diff[:10])
    sse_a = sse_b = 0.0
    for n, t in s.items():
        if a[n].tensor_type == t.tensor_type:
            assert np.array_equal(np.asarray(a[n].data), np.asarray(t.data)), n  # copied
            continue
        x = quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        ea = np.sum((x - quants.dequantize(a[n].data, a[n].tensor_type)) ** 2)
        eb = np.sum((x - quants.dequantize(b[n].data, b[n].tensor_type)) ** 2)
        assert ea <= eb * (1 + 1e-9) + 1e-18, (mix, n, a[n].tensor_type.name,
                                                np.sqrt(ea / x.size), np.sqrt(eb / x.size))
        sse_a += ea
        sse_b += eb
    return sse_a / sse_b if sse_b else 1.0


# ----------------------------------------------------------------------------
# small random llama-shaped models

def write_llama(path, n_layer, n_embd, n_ff, n_head, n_head_kv, tied, n_vocab=256, seed=0):
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("mix-test")
    w.add_block_count(n_layer)
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(1)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(n_vocab)])
    w.add_token_types([1] * n_vocab)
    w.add_token_merges([])

    def mat(rows, cols):
        # heavy-ish tails, like trained weights
        return (rng.standard_t(5, size=(rows, cols)) * 0.02).astype(np.float16)

    kv = n_embd // n_head * n_head_kv
    w.add_tensor("token_embd.weight", mat(n_vocab, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=np.float32))
    if not tied:
        w.add_tensor("output.weight", mat(n_vocab, n_embd))
    for i in range(n_layer):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "attn_k.weight", mat(kv, n_embd))
        w.add_tensor(p + "attn_v.weight", mat(kv, n_embd))
        w.add_tensor(p + "attn_output.weight", mat(n_embd, n_embd))
        w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_up.weight", mat(n_ff, n_embd))
        w.add_tensor(p + "ffn_down.weight", mat(n_embd, n_ff))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


SYNTH = {
    "gqa4_tied": dict(n_layer=16, n_embd=256, n_ff=512, n_head=8, n_head_kv=2, tied=True),
    "gqa1_untied": dict(n_layer=8, n_embd=256, n_ff=768, n_head=4, n_head_kv=4, tied=False),
}


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    d = tmp_path_factory.mktemp("synth")
    out = {}
    for k, cfg in SYNTH.items():
        out[k] = str(d / f"{k}.f16.gguf")
        write_llama(out[k], **cfg, seed=len(out))
    return out


@pytest.mark.parametrize("model", list(SYNTH))
@pytest.mark.parametrize("mix", QUANT_MIXES)
def test_mix_matches_llama_cpp_synthetic(synth, tmp_path, model, mix):
    src = synth[model]
    ours, theirs = str(tmp_path / "anvil.gguf"), str(tmp_path / "llama.gguf")
    anvil_quantize(src, ours, mix)
    llama_quantize(src, theirs, FTYPE[mix])
    compare(src, ours, theirs, mix)


@pytest.mark.parametrize("mix", ["Q4_K_M", "Q3_K_S", "IQ4_XS"])
def test_pure_matches_llama_cpp(synth, tmp_path, mix):
    """--pure: every matrix the base type (llama-quantize --pure)."""
    src = synth["gqa4_tied"]
    ours, theirs = str(tmp_path / "anvil.gguf"), str(tmp_path / "llama.gguf")
    anvil_quantize(src, ours, mix, "--pure")
    llama_quantize(src, theirs, FTYPE[mix], pure=True)
    compare(src, ours, theirs, mix)


@pytest.mark.parametrize("mix", ["F16", "BF16"])
def test_float_mixes(synth, tmp_path, mix):
    src = synth["gqa1_untied"]
    ours, theirs = str(tmp_path / "anvil.gguf"), str(tmp_path / "llama.gguf")
    anvil_quantize(src, ours, mix)
    llama_quantize(src, theirs, FTYPE[mix])
    a, fa = tensors(ours)
    b, fb = tensors(theirs)
    assert fa == fb == FTYPE[mix]
    assert {n: t.tensor_type for n, t in a.items()} == {n: t.tensor_type for n, t in b.items()}
    for n in a:
        assert np.array_equal(np.asarray(a[n].data), np.asarray(b[n].data)), n


# ----------------------------------------------------------------------------
# SmolLM2-135M

@pytest.fixture(scope="module")
def smol_f16(tmp_path_factory):
    if not os.path.exists(MODEL):
        pytest.fail(f"default model missing: {MODEL} (run `make model`)")
    path = str(tmp_path_factory.mktemp("smol") / "smol.f16.gguf")
    anvil_quantize(MODEL, path, "F16")
    return path


@pytest.fixture(scope="module")
def smol_pairs(smol_f16, tmp_path_factory):
    d = tmp_path_factory.mktemp("smolq")
    out = {}
    for mix in SMOL_MIXES:
        ours, theirs = str(d / f"anvil.{mix}.gguf"), str(d / f"llama.{mix}.gguf")
        anvil_quantize(smol_f16, ours, mix)
        llama_quantize(smol_f16, theirs, FTYPE[mix])
        out[mix] = (ours, theirs)
    return out


@pytest.mark.parametrize("mix", SMOL_MIXES)
def test_mix_matches_llama_cpp_smollm2(smol_f16, smol_pairs, mix):
    ours, theirs = smol_pairs[mix]
    ratio = compare(smol_f16, ours, theirs, mix)
    print(f"{mix}: anvil/llama.cpp squared error over converted tensors {ratio:.4f}")
    assert os.path.getsize(ours) == os.path.getsize(theirs)


PROMPT = "The capital of France is"


def top_tokens(path, k=5):
    m = llama_cpp.Llama(model_path=path, n_ctx=128, verbose=False, n_threads=2, logits_all=True)
    toks = m.tokenize(PROMPT.encode(), add_bos=False)
    m.eval(toks)
    logits = np.array(m.scores[m.n_tokens - 1], dtype=np.float32)
    # without logits_all the row stays zero and every top-k would be 0..k-1
    assert np.ptp(logits) > 1.0, "llama.cpp returned no logits"
    return list(np.argsort(-logits)[:k])


@pytest.mark.parametrize("mix", ["Q4_K_M", "Q6_K", "Q2_K"])
def test_llama_cpp_runs_anvil_files(smol_f16, smol_pairs, mix):
    ref = top_tokens(smol_f16)
    top = top_tokens(smol_pairs[mix][0])
    assert top[0] in ref, (mix, top, ref)


def anvil_reads_k_quants(path):
    p = run([ANVIL, "inspect", path])
    return p.returncode == 0


@pytest.mark.parametrize("mix", ["Q4_K_M", "Q6_K"])
def test_anvil_runs_llama_cpp_files(smol_f16, smol_pairs, mix):
    """Needs the K-quant reader and kernels of the kq branch; SKIPPED (with
    this reason) until anvil's reader accepts the file."""
    theirs = smol_pairs[mix][1]
    if not anvil_reads_k_quants(theirs):
        pytest.skip("anvil cannot read Q4_K/Q6_K/Q5_0 tensors yet: needs the kq branch "
                    "(K-quant and 5-bit dequantizers and kernels)")
    p = run([ANVIL, "run", "-m", theirs, "-p", PROMPT, "-n", "4", "--temp", "0", "-t", "2"])
    assert p.returncode == 0, p.stderr[-2000:]
    # anvil's greedy first token on llama.cpp's file is among the F16 model's top 5
    ids = run([ANVIL, "tokenize", "-m", smol_f16, "-p", p.stdout, "--ids-only"])
    assert ids.returncode == 0
    first = int(ids.stdout.split()[0])
    assert first in top_tokens(smol_f16), (mix, p.stdout)
