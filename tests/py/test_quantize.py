"""`bin/anvil quantize IN OUT TYPE` with the reference types on the default
model, checked three ways:

  1. our own GGUF reader accepts every output (`anvil inspect`, exit 0);
  2. against the gguf package: metadata copied (general.file_type set to the
     llama.cpp ftype), tensor types as documented (2-D -> TYPE, 1-D -> F32,
     the tied lm_head Q8_0 as llama.cpp's rule gives for 576-wide rows), and
     the bytes of converted tensors equal
     gguf.quants.quantize(gguf.quants.dequantize(src), TYPE) exactly (Q8_0,
     Q4_0 and Q4_1 use ggml's reference conversion);
  3. llama-cpp-python loads each output and generates; its first greedy
     token is among the original model's top 5, so the weights still mean
     the same thing.
The shipped file is Q4_1: F16 is made from it first, and the other types
from that F16 file (quantizing the Q4_1 file to a type with more bits is
refused). Plus the error paths: bad type, a source already quantized
below the target, unreadable input, unwritable output, a write failing
half way (file size limit) - exit 2, one line on stderr, and neither OUT
nor OUT.tmp left behind. The searched types and the mixes are in
test_quantizers.py and test_quantize_mix.py.
"""
import os
import resource
import signal
import struct
import subprocess

import numpy as np
import pytest

import gguf
from gguf import GGMLQuantizationType as QT  # noqa: E402
from gguf import quants  # noqa: E402

import gguf_synth as G  # noqa: E402
import conftest  # noqa: E402  (the default model: written once, in the Makefile)

ROOT = os.environ.get("ANVIL_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
MODEL = conftest.MODEL
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
    for name in ["F16"] + [t for t in TYPES if t != "F16"]:
        path = str(d / f"model.{name}.gguf")
        src = MODEL if name == "F16" else out["F16"]
        p = run([ANVIL, "quantize", src, path, name])
        assert p.returncode == 0, p.stderr
        assert "tensor 272/272" in p.stderr  # progress, on stderr
        assert "anvil quantize: wrote " in p.stderr.splitlines()[-1]
        assert p.stdout == ""
        assert not os.path.exists(path + ".tmp")
        out[name] = path
    return out


def source_of(outputs, name):
    return MODEL if name == "F16" else outputs["F16"]


@pytest.mark.parametrize("name", list(TYPES))
def test_our_reader_accepts(outputs, name):
    p = run([ANVIL, "inspect", outputs[name]])
    assert p.returncode == 0, p.stderr
    assert f"general.file_type                            u32                {FTYPE[name]}" in p.stdout


def header(path):
    with open(path, "rb") as f:
        head = f.read(4 << 20)
    return head, G.Layout(head)


BLOCK = {QT.F32: (1, 4), QT.F16: (1, 2), QT.BF16: (1, 2), QT.Q8_0: (32, 34), QT.Q4_0: (32, 18),
         QT.Q4_1: (32, 20)}


def tensor_fields(head, lay, t):
    ne = [struct.unpack_from("<Q", head, o)[0] for o in t["ne"]]
    ty = struct.unpack_from("<I", head, t["type"])[0]
    off = struct.unpack_from("<Q", head, t["offset"])[0]
    return ne, QT(ty), off


def tensor_bytes(path, lay, ne, ty, off, rows=None):
    blck, bsz = BLOCK[ty]
    row = ne[0] // blck * bsz
    n_rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
    if rows is not None:
        n_rows = min(n_rows, rows)
    mm = np.memmap(path, dtype=np.uint8, mode="r", offset=lay.data_offset + off,
                   shape=(n_rows, row))
    return np.array(mm)


@pytest.mark.parametrize("name", list(TYPES))
def test_layout_and_bytes(outputs, name):
    """Header parsed with tests/py/gguf_synth.py; tensor bytes compared with
    gguf.quants.quantize(gguf.quants.dequantize(source rows))."""
    src_path = source_of(outputs, name)
    shead, slay = header(src_path)
    dhead, dlay = header(outputs[name])
    # metadata: byte-identical, except the 4 value bytes of general.file_type
    ft = slay.kv["general.file_type"]["value"]
    assert dlay.kv_order == slay.kv_order
    assert struct.unpack_from("<I", dhead, ft)[0] == FTYPE[name]
    meta_end = slay.tensors[0]["name_len"]
    assert dlay.tensors[0]["name_len"] == meta_end
    assert dhead[:ft] == shead[:ft] and dhead[ft + 4:meta_end] == shead[ft + 4:meta_end]
    assert dlay.alignment == slay.alignment
    # tensors: same names, shapes and order; types by the documented rule
    assert [t["name"] for t in dlay.tensors] == [t["name"] for t in slay.tensors]
    checked = 0
    for st, dt in zip(slay.tensors, dlay.tensors):
        sne, sty, soff = tensor_fields(shead, slay, st)
        dne, dty, doff = tensor_fields(dhead, dlay, dt)
        assert dne == sne, st["name"]
        want = TYPES[name] if len(sne) >= 2 and sne[1] > 1 else QT.F32
        if st["name"] == "token_embd.weight" and name in ("Q4_0", "Q4_1"):
            want = QT.Q8_0  # the tied lm_head: Q6_K, which 576 does not divide -> Q8_0
        assert dty == want, (st["name"], dty, want)
        assert doff % dlay.alignment == 0
        nm = st["name"]
        if not (nm.startswith("blk.0.") or nm.startswith("blk.29.")
                or nm in ("token_embd.weight", "output_norm.weight")):
            continue
        sb = tensor_bytes(src_path, slay, sne, sty, soff, rows=2048)
        db = tensor_bytes(outputs[name], dlay, dne, dty, doff, rows=2048)
        if sty == dty:
            assert np.array_equal(sb, db), nm
        else:
            x = quants.dequantize(sb, sty).astype(np.float32)
            ref = x if want == QT.F32 else quants.quantize(x, want)
            assert np.array_equal(db.reshape(-1), np.ascontiguousarray(ref).view(np.uint8).reshape(-1)), nm
        checked += 1
    assert checked >= 20


def test_gguf_package_reads_output(outputs):
    """The gguf package's own reader parses an output (slow: one type)."""
    r = gguf.GGUFReader(outputs["Q4_0"])
    f = r.fields["general.file_type"]
    assert int(f.parts[f.data[0]][0]) == FTYPE["Q4_0"]
    assert len(r.tensors) == 272
    types = {t.name: t.tensor_type for t in r.tensors}
    assert types["token_embd.weight"] == QT.Q8_0 and types["output_norm.weight"] == QT.F32
    assert types["blk.0.attn_q.weight"] == QT.Q4_0
    t = next(t for t in r.tensors if t.name == "blk.3.ffn_up.weight")
    assert t.data.shape == (1536, 576 // 32 * 18)


def top_tokens(model_path, prompt, k=5):
    import llama_cpp
    m = llama_cpp.Llama(model_path=model_path, n_ctx=256, verbose=False, logits_all=True)
    toks = m.tokenize(prompt.encode(), add_bos=False)
    m.eval(toks)
    logits = np.array(m.scores[m.n_tokens - 1], dtype=np.float32)
    # without logits_all the row stays zero and every top-k would be 0..k-1
    assert np.ptp(logits) > 1.0, "llama.cpp returned no logits"
    m.reset()
    text = m(prompt, max_tokens=6, temperature=0.0)["choices"][0]["text"]
    return list(np.argsort(-logits)[:k]), text


PROMPT = "The capital of France is"


@pytest.fixture(scope="module")
def reference_top():
    return top_tokens(MODEL, PROMPT)[0]


@pytest.mark.parametrize("name", list(TYPES))
def test_llama_cpp_runs_output(outputs, reference_top, name):
    """llama.cpp reads each output, and anvil's greedy first token on it is
    among llama.cpp's top 3 on the same file. Types with at least the
    source's bits also keep llama.cpp's choice among the source's top 5
    (Q4_0 from a Q4_1 source loses it: llama-quantize's own Q4_0 of the
    same file picks the same other token)."""
    top, text = top_tokens(outputs[name], PROMPT)
    assert len(text) > 0
    if name != "Q4_0":
        assert top[0] in reference_top, (name, top, reference_top, text)
    p = run([ANVIL, "run", "-m", outputs[name], "-p", PROMPT, "-n", "2", "--temp", "0", "-t", "2"])
    assert p.returncode == 0, p.stderr[-2000:]
    ids = run([ANVIL, "tokenize", "-m", outputs[name], "-p", p.stdout, "--ids-only"])
    assert ids.returncode == 0, ids.stderr
    assert int(ids.stdout.split()[0]) in top[:3], (name, p.stdout, top)


@pytest.mark.asan
def test_asan_quantize(tmp_path):
    """ASan+UBSan over a real file: Q3_K_S from the Q4_1 file takes Q3_K
    (ffn_down, 1536 wide) and the Q4_0 fallback (576 wide) without any
    tensor going up in bits."""
    out = str(tmp_path / "asan.gguf")
    p = run([ANVIL_ASAN, "quantize", "-q", "-t", "2", MODEL, out, "Q3_K_S"], timeout=1200)
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr == ""
    r = gguf.GGUFReader(out)
    types = {t.name: t.tensor_type for t in r.tensors}
    assert types["blk.0.ffn_down.weight"] == QT.Q3_K
    assert types["blk.0.ffn_up.weight"] == QT.Q4_0


# ----------------------------------------------------------------------------
# errors

def assert_one_line_error(p, frag):
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("anvil quantize: ") and frag in lines[0], lines[0]


def test_bad_type(tmp_path):
    out = str(tmp_path / "o.gguf")
    for t in ("Q4_K_X", "q9_0", "", "F32x", "Q2_K_S", "IQ2_XXS"):
        p = run([ANVIL, "quantize", MODEL, out, t])
        assert_one_line_error(p, "unknown type")
        assert "Q4_K_M" in p.stderr  # the message lists the choices
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("target", ["Q8_0", "Q4_K_M", "Q6_K", "Q5_1"])
def test_already_quantized_below_target(tmp_path, target):
    """The shipped file is Q4_1 (5 bits per weight): a target with more bits
    for any of its tensors is refused, naming the tensor."""
    out = str(tmp_path / "o.gguf")
    p = run([ANVIL, "quantize", MODEL, out, target])
    assert_one_line_error(p, "already quantized to Q4_1")
    assert "from an F16 or F32 file" in p.stderr
    assert os.listdir(tmp_path) == []


def test_usage():
    assert run([ANVIL, "quantize", "--help"]).returncode == 0
    assert_one_line_error(run([ANVIL, "quantize", MODEL]), "usage")
    assert_one_line_error(run([ANVIL, "quantize", "--bogus", "a", "b", "Q8_0"]), "unknown option")


def test_unreadable_input(tmp_path):
    out = str(tmp_path / "o.gguf")
    assert_one_line_error(run([ANVIL, "quantize", str(tmp_path / "missing.gguf"), out, "F16"]),
                          "No such file")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    assert_one_line_error(run([ANVIL, "quantize", str(bad), out, "Q8_0"]), "gguf:")
    assert sorted(os.listdir(tmp_path)) == ["bad.gguf"]


def test_unwritable_output(tmp_path):
    assert_one_line_error(run([ANVIL, "quantize", MODEL, str(tmp_path / "no" / "dir.gguf"), "F16"]),
                          "cannot create")
    if os.geteuid() != 0:  # root ignores permissions
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        assert_one_line_error(run([ANVIL, "quantize", MODEL, str(ro / "o.gguf"), "F16"]),
                              "cannot create")


def test_write_failure_leaves_nothing(tmp_path):
    """A write that fails half way (RLIMIT_FSIZE) leaves no OUT, no OUT.tmp,
    and an existing OUT untouched."""
    out = tmp_path / "o.gguf"
    out.write_bytes(b"previous contents")

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 20, 8 << 20))

    p = run([ANVIL, "quantize", "-q", MODEL, str(out), "F16"], preexec_fn=limit)
    assert_one_line_error(p, "cannot write")
    assert out.read_bytes() == b"previous contents"
    assert sorted(os.listdir(tmp_path)) == ["o.gguf"]
