"""`bin/anvil quantize IN OUT TYPE` on the default model, checked three ways:

  1. our own GGUF reader accepts every output (`anvil inspect`, exit 0);
  2. against the gguf package: metadata copied (general.file_type set to the
     llama.cpp ftype), tensor types as documented (2-D -> TYPE, 1-D -> F32),
     and the bytes of converted tensors equal
     gguf.quants.quantize(gguf.quants.dequantize(src), TYPE) exactly;
  3. llama-cpp-python loads each output and generates; its first greedy
     token is among the original model's top 5, so the weights still mean
     the same thing.
Plus the error paths: bad type, unreadable input, unwritable output, a
write failing half way (file size limit) - exit 2, one line on stderr, and
neither OUT nor OUT.tmp left behind.
"""
import os
import resource
import signal
import subprocess

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import quants  # noqa: E402

ROOT = os.environ.get("ANVIL_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
MODEL = os.environ.get("ANVIL_MODEL", os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf"))
ANVIL = os.path.join(ROOT, "bin", "anvil")
ANVIL_ASAN = os.path.join(ROOT, "bin", "anvil-asan")

TYPES = {"Q8_0": QT.Q8_0, "Q4_0": QT.Q4_0, "Q4_1": QT.Q4_1, "F16": QT.F16, "BF16": QT.BF16}
FTYPE = {"Q8_0": 7, "Q4_0": 2, "Q4_1": 3, "F16": 1, "BF16": 32}

pytestmark = [
    pytest.mark.skipif(not os.path.exists(ANVIL), reason="bin/anvil not built"),
    pytest.mark.skipif(not os.path.exists(MODEL), reason="default model missing"),
]


def run(args, timeout=300, **kw):
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, **kw)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("quant")
    out = {}
    for name in TYPES:
        path = str(d / f"model.{name}.gguf")
        p = run([ANVIL, "quantize", MODEL, path, name])
        assert p.returncode == 0, p.stderr
        assert "tensor 272/272" in p.stderr  # progress, on stderr
        assert p.stdout == ""
        assert not os.path.exists(path + ".tmp")
        out[name] = path
    return out


@pytest.fixture(scope="module")
def src():
    return gguf.GGUFReader(MODEL)


def field_value(f):
    """Comparable value of a GGUFReader field."""
    return [bytes(f.parts[i]) for i in f.data]


@pytest.mark.parametrize("name", list(TYPES))
def test_our_reader_accepts(outputs, name):
    p = run([ANVIL, "inspect", outputs[name]])
    assert p.returncode == 0, p.stderr
    assert f"general.file_type                            u32                {FTYPE[name]}" in p.stdout


@pytest.mark.parametrize("name", list(TYPES))
def test_layout_and_bytes(outputs, src, name):
    dst = gguf.GGUFReader(outputs[name])
    # metadata: same keys in the same order, same values except the file type
    assert list(dst.fields) == list(src.fields)
    for k, f in src.fields.items():
        g = dst.fields[k]
        if k == "general.file_type":
            assert int(g.parts[g.data[0]][0]) == FTYPE[name]
        else:
            assert g.types == f.types, k
            assert field_value(g) == field_value(f), k
    assert dst.alignment == src.alignment
    # tensors: same names, shapes, order; types by the documented rule
    assert [t.name for t in dst.tensors] == [t.name for t in src.tensors]
    checked = 0
    for s, t in zip(src.tensors, dst.tensors):
        assert list(t.shape) == list(s.shape), s.name
        want = TYPES[name] if len(s.shape) >= 2 and s.shape[1] > 1 else QT.F32
        assert t.tensor_type == want, (s.name, t.tensor_type, want)
        assert t.data_offset % dst.alignment == 0
        if not (s.name.startswith("blk.0.") or s.name.startswith("blk.29.")
                or s.name in ("token_embd.weight", "output_norm.weight")):
            continue
        if s.tensor_type == t.tensor_type:
            assert np.array_equal(np.asarray(s.data).view(np.uint8), np.asarray(t.data).view(np.uint8)), s.name
            checked += 1
            continue
        rows = min(len(s.data), 2048) if s.data.ndim == 2 else len(s.data)
        x = quants.dequantize(np.asarray(s.data[:rows]), s.tensor_type).astype(np.float32)
        ref = x if want == QT.F32 else quants.quantize(x, want)
        got = np.asarray(t.data[:rows])
        assert np.array_equal(got.view(np.uint8).reshape(-1), np.ascontiguousarray(ref).view(np.uint8).reshape(-1)), s.name
        checked += 1
    assert checked >= 20


def top_tokens(model_path, prompt, k=5):
    import llama_cpp
    m = llama_cpp.Llama(model_path=model_path, n_ctx=256, verbose=False, logits_all=False)
    toks = m.tokenize(prompt.encode(), add_bos=False)
    m.eval(toks)
    logits = np.array(m.scores[m.n_tokens - 1], dtype=np.float32)
    text = m(prompt, max_tokens=6, temperature=0.0)["choices"][0]["text"]
    return list(np.argsort(-logits)[:k]), text


PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def reference_top():
    pytest.importorskip("llama_cpp")
    return top_tokens(MODEL, PROMPT)[0]


@pytest.mark.parametrize("name", list(TYPES))
def test_llama_cpp_runs_output(outputs, reference_top, name):
    top, text = top_tokens(outputs[name], PROMPT)
    assert len(text) > 0
    assert top[0] in reference_top, (name, top, reference_top, text)


@pytest.mark.skipif(not os.path.exists(ANVIL_ASAN), reason="bin/anvil-asan not built")
def test_asan_quantize(tmp_path):
    out = str(tmp_path / "asan.gguf")
    p = run([ANVIL_ASAN, "quantize", "-q", MODEL, out, "Q4_1"], timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr == ""
    assert run([ANVIL_ASAN, "inspect", out]).returncode == 0


# ----------------------------------------------------------------------------
# errors

def assert_one_line_error(p, frag):
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("anvil quantize: ") and frag in lines[0], lines[0]


def test_bad_type(tmp_path):
    out = str(tmp_path / "o.gguf")
    for t in ("Q4_K", "q5_0", "", "F32x"):
        p = run([ANVIL, "quantize", MODEL, out, t])
        assert_one_line_error(p, "unknown type")
    assert os.listdir(tmp_path) == []


def test_usage():
    assert run([ANVIL, "quantize", "--help"]).returncode == 0
    assert_one_line_error(run([ANVIL, "quantize", MODEL]), "usage")
    assert_one_line_error(run([ANVIL, "quantize", "--bogus", "a", "b", "Q8_0"]), "unknown option")


def test_unreadable_input(tmp_path):
    out = str(tmp_path / "o.gguf")
    assert_one_line_error(run([ANVIL, "quantize", str(tmp_path / "missing.gguf"), out, "Q8_0"]),
                          "No such file")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    assert_one_line_error(run([ANVIL, "quantize", str(bad), out, "Q8_0"]), "gguf:")
    assert sorted(os.listdir(tmp_path)) == ["bad.gguf"]


def test_unwritable_output(tmp_path):
    assert_one_line_error(run([ANVIL, "quantize", MODEL, str(tmp_path / "no" / "dir.gguf"), "Q8_0"]),
                          "cannot create")
    if os.geteuid() != 0:  # root ignores permissions
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        assert_one_line_error(run([ANVIL, "quantize", MODEL, str(ro / "o.gguf"), "Q8_0"]),
                              "cannot create")


def test_write_failure_leaves_nothing(tmp_path):
    """A write that fails half way (RLIMIT_FSIZE) leaves no OUT, no OUT.tmp,
    and an existing OUT untouched."""
    out = tmp_path / "o.gguf"
    out.write_bytes(b"previous contents")

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 20, 8 << 20))

    p = run([ANVIL, "quantize", "-q", MODEL, str(out), "Q8_0"], preexec_fn=limit)
    assert_one_line_error(p, "cannot write")
    assert out.read_bytes() == b"previous contents"
    assert sorted(os.listdir(tmp_path)) == ["o.gguf"]
