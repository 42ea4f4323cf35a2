"""Malformed GGUF files: `anvil inspect` - release and
ASan/UBSan builds - must answer each with exit status 2 and exactly one
line on stderr, never a crash, a sanitizer report or a hang.

Two sources of bad files:
  - the default model with one header field patched (its header is read,
    patched, and written as a sparse file of the real size, so the cases
    cost no disk);
  - a small synthetic GGUF built byte by byte (tests/py/gguf_synth.py), for
    what the real file does not contain (alignment key, nested arrays...).
A few valid files are checked too (exit 0), so the harness itself can fail.
"""
import os
import struct
import subprocess

import pytest

import gguf_synth as G
import conftest  # noqa: E402  (the default model: written once, in the Makefile)

ROOT = os.environ.get("ANVIL_ROOT", os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))))
MODEL = conftest.MODEL
BINS = [b for b in (os.path.join(ROOT, "bin", "anvil"), os.path.join(ROOT, "bin", "anvil-asan"))
        if os.path.exists(b) and (conftest.ASAN or not b.endswith("-asan"))]
pytestmark = pytest.mark.skipif(not BINS, reason="bin/anvil not built")


def inspect(binary, path):
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="halt_on_error=1")
    return subprocess.run([binary, "inspect", path], capture_output=True, text=True,
                          timeout=120, env=env)


def check_rejected(path, frag=None):
    for b in BINS:
        p = inspect(b, path)
        lines = p.stderr.strip().splitlines()
        where = f"{os.path.basename(b)} on {os.path.basename(path)}"
        assert p.returncode == 2, f"{where}: exit {p.returncode}, stderr {p.stderr[-2000:]}"
        assert len(lines) == 1, f"{where}: stderr is not one line: {p.stderr[-2000:]}"
        assert lines[0].startswith("anvil inspect: "), lines[0]
        assert len(lines[0]) < 400, lines[0]
        if frag:
            assert frag in lines[0], f"{where}: {lines[0]!r} lacks {frag!r}"


def check_accepted(path):
    for b in BINS:
        p = inspect(b, path)
        assert p.returncode == 0, f"{b}: {p.stderr[-2000:]}"
        assert p.stderr == ""


# ----------------------------------------------------------------------------
# patched copies of the real model

@pytest.fixture(scope="module")
def real():
    if not os.path.exists(MODEL):
        pytest.skip("default model missing")
    size = os.path.getsize(MODEL)
    with open(MODEL, "rb") as f:
        head = f.read(4 << 20)
    lay = G.Layout(head)
    return head[:lay.data_offset], lay, size


def write_sparse(path, head, size, data_patch=None):
    with open(path, "wb") as f:
        f.write(head[:size])
        f.truncate(size)  # the tensor data is a hole: reads as zeros
        if data_patch:  # (file offset, bytes) inside the data section
            f.seek(data_patch[0])
            f.write(data_patch[1])


def same_len_pair(names):
    by_len = {}
    for n in names:
        by_len.setdefault(len(n), []).append(n)
    return next(v[:2] for v in by_len.values() if len(v) >= 2)


def real_cases(head, L, size):
    """name -> (header bytes, file size, expected message fragment)."""
    c = {}
    U32, U64 = "<I", "<Q"
    P = G.patch
    t0, t1, t2 = L.tensors[0], L.tensors[1], L.tensors[2]
    last = L.tensors[-1]
    toks = L.kv["tokenizer.ggml.tokens"]
    # truncation at many points: header, metadata, vocab, tensor table, data
    cuts = [0, 1, 3, 4, 7, 8, 15, 16, 23, 24, 30, L.kv[L.kv_order[0]]["value"] + 2,
            toks["arr_n"] + 3, toks["strs"][100] + 4, L.kv["tokenizer.ggml.merges"]["value"] + 5000,
            L.tensors[0]["name_len"] + 10, L.tensors[100]["offset"] + 2, L.end_of_infos - 1,
            L.end_of_infos, L.data_offset + 1, size // 2, size - 1]
    for n in cuts:
        c[f"truncated_at_{n}"] = (head, n, "gguf: ")
    c["magic_GGUX"] = (b"GGUX" + head[4:], size, "bad magic")
    c["magic_zero"] = (b"\0\0\0\0" + head[4:], size, "bad magic")
    for v in (0, 1, 4, 0x03000000, 0xFFFFFFFF):
        c[f"version_{v:#x}"] = (P(head, 4, U32, v), size, "GGUF")
    for v in (2**63, 2**64 - 1, L.n_tensors + 1):
        c[f"n_tensors_{v}"] = (P(head, 8, U64, v), size, "gguf: ")
    for v in (2**60, 2**64 - 1, L.n_kv + 1, L.n_kv - 1):
        c[f"n_kv_{v}"] = (P(head, 16, U64, v), size, "gguf: ")
    c["key_len_huge"] = (P(head, 24, U64, 2**63), size, "string length")
    arch = L.kv["general.architecture"]
    c["string_value_len_huge"] = (P(head, arch["value"], U64, 2**62), size, "string length")
    c["vocab_string_len_huge"] = (P(head, toks["strs"][100], U64, 2**64 - 1), size, "string #100")
    c["vocab_string_len_1e12"] = (P(head, toks["strs"][100], U64, 10**12), size, "string #100")
    c["vocab_array_len_huge"] = (P(head, toks["arr_n"], U64, 2**62), size, "array of")
    tt = L.kv["tokenizer.ggml.token_type"]
    c["token_type_array_len_huge"] = (P(head, tt["arr_n"], U64, 2**61), size, "array of")
    c["token_type_array_len_plus1"] = (P(head, tt["arr_n"], U64, 49153), size, "gguf: ")
    c["array_elem_type_13"] = (P(head, toks["arr_type"], U32, 13), size, "unknown array element type")
    c["array_nested"] = (P(head, toks["arr_type"], U32, G.ARR), size, "nested")
    first = L.kv[L.kv_order[0]]
    c["value_type_13"] = (P(head, first["type"], U32, 13), size, "unknown value type 13")
    c["value_type_huge"] = (P(head, first["type"], U32, 0xFFFFFFFF), size, "unknown value type")
    # scalar of another type: a u32 rewritten as u64 swallows the next key's bytes
    bc = L.kv["llama.block_count"]
    c["value_type_u32_as_u64"] = (P(head, bc["type"], U32, G.U64), size, "gguf: ")
    # dims
    c["n_dims_0"] = (P(head, t1["n_dims"], U32, 0), size, "dimensions")
    c["n_dims_5"] = (P(head, t1["n_dims"], U32, 5), size, "gguf: ")
    c["n_dims_huge"] = (P(head, t1["n_dims"], U32, 2**31), size, "dimensions")
    c["dim_zero"] = (P(head, t0["ne"][1], U64, 0), size, "dimension 1 is 0")
    c["dim_huge"] = (P(head, t0["ne"][1], U64, 2**63), size, "int64")
    c["dims_overflow"] = (P(P(head, t0["ne"][0], U64, 2**32), t0["ne"][1], U64, 2**32), size, "int64")
    c["dims_too_big_for_file"] = (P(head, t0["ne"][1], U64, 2**40), size, "extends past end of file")
    q41 = next(t for t in L.tensors if t["name"].endswith("attn_q.weight"))
    c["row_not_block_multiple"] = (P(head, q41["ne"][0], U64, 577), size, "row length 577")
    # offsets
    c["offset_past_eof"] = (P(head, t2["offset"], U64, 2**63), size, "extends past end of file")
    c["offset_wraps"] = (P(head, t2["offset"], U64, 2**64 - 32), size, "extends past end of file")
    off1 = struct.unpack_from("<Q", head, t1["offset"])[0]
    c["offset_misaligned"] = (P(head, t1["offset"], U64, off1 + 16), size, "alignment")
    c["offset_misaligned_by_1"] = (P(head, t1["offset"], U64, off1 + 1), size, "alignment")
    off0 = struct.unpack_from("<Q", head, t0["offset"])[0]
    c["offset_overlap"] = (P(head, t1["offset"], U64, off0), size, "overlaps")
    last_off = struct.unpack_from("<Q", head, last["offset"])[0]
    c["last_tensor_past_eof"] = (P(head, last["offset"], U64, last_off + 4096), size, "extends past end")
    c["file_shorter_than_data"] = (head, size - 100, "extends past end of file")
    # types: unknown ones are named; a known type whose blocks do not divide
    # the row, or whose size does not match the data laid out for the real
    # type, is refused naming the tensor (t2 is a Q4_1 [1536, 576] matrix,
    # q41 a Q4_1 [576, 576] one)
    for ty, frag in ((16, "type 16 (IQ2_XXS)"), (9, "type 9 (Q8_1)"), (99, "type 99"),
                     (2**31, "not supported")):
        c[f"tensor_type_{ty}"] = (P(head, t2["type"], U32, ty), size, frag)
    c["type_Q4_K_smaller"] = (P(head, t2["type"], U32, 12), size,
                              "(Q4_K, 497664 bytes) ends at offset")  # the next one starts later
    c["type_Q6_K_larger"] = (P(head, t2["type"], U32, 14), size, "overlaps")
    c["type_Q5_1_larger"] = (P(head, t2["type"], U32, 7), size, "overlaps")
    c["type_Q4_0_smaller"] = (P(head, t2["type"], U32, 2), size, "a tensor size does not match its type")
    c["type_Q4_K_row_576"] = (P(head, q41["type"], U32, 12), size,
                              "row length 576 is not a multiple of the Q4_K block size 256")
    c["type_IQ4_XS_row_576"] = (P(head, q41["type"], U32, 23), size, "IQ4_XS block size 256")
    c["type_Q8_K_larger"] = (P(head, t2["type"], U32, 15), size, "overlaps")
    # duplicates: rename an entry to another of the same length
    a, b = same_len_pair([t["name"] for t in L.tensors])
    ta = L.tensor(a)
    h = bytearray(head)
    h[ta["name_len"] + 8:ta["name_len"] + 8 + len(a)] = b.encode()
    c["duplicate_tensor"] = (bytes(h), size, "duplicate tensor name")
    ka, kb = same_len_pair(L.kv_order)
    h = bytearray(head)
    p = L.kv[ka]["key_len"] + 8
    h[p:p + len(ka)] = kb.encode()
    c["duplicate_key"] = (bytes(h), size, "duplicate key")
    return c


@pytest.fixture(scope="module")
def real_cases_built(real):
    head, L, size = real
    return real_cases(head, L, size)


def test_real_model_accepted(real, tmp_path):
    head, L, size = real
    path = str(tmp_path / "sparse.gguf")
    write_sparse(path, head, size)
    check_accepted(path)  # the sparse copy is structurally the model


def test_real_model_bad_scales(real, tmp_path):
    """An infinite or NaN f16 scale in one block of a real tensor (data read
    by inspect's scale pass): refused naming the tensor and the block."""
    head, L, size = real
    t = next(t for t in L.tensors if head[t["name_len"] + 8:t["n_dims"]] == b"blk.3.attn_k.weight")
    (ty,) = struct.unpack_from("<I", head, t["type"])
    (off,) = struct.unpack_from("<Q", head, t["offset"])
    assert ty == G.T_Q4_1
    for field, bits in ((0, 0x7C00), (2, 0xFC01)):  # d = +inf, m = NaN
        path = str(tmp_path / "bad.gguf")
        write_sparse(path, head, size, (L.data_offset + off + 7 * 20 + field, struct.pack("<H", bits)))
        check_rejected(path, "tensor 'blk.3.attn_k.weight': block 7 has a NaN or infinite scale")
        os.unlink(path)


def test_real_model_patched(real_cases_built, tmp_path):
    failures = []
    for name, (head, size, frag) in real_cases_built.items():
        path = str(tmp_path / f"{name}.gguf")
        write_sparse(path, head, size)
        try:
            check_rejected(path, frag)
        except AssertionError as e:
            failures.append(f"{name}: {e}")
        os.unlink(path)
    assert not failures, "\n".join(failures)
    assert len(real_cases_built) >= 60


# ----------------------------------------------------------------------------
# synthetic files

def synth_cases():
    c = {}
    S = G
    c["alignment_0"] = (S.tiny_model(extra_kvs=[("general.alignment", S.U32, 0)]), "power of two")
    c["alignment_3"] = (S.tiny_model(extra_kvs=[("general.alignment", S.U32, 3)]), "power of two")
    c["alignment_48"] = (S.tiny_model(extra_kvs=[("general.alignment", S.U32, 48)]), "power of two")
    c["alignment_u64"] = (S.tiny_model(extra_kvs=[("general.alignment", S.U64, 32)]), "must be u32")
    c["alignment_str"] = (S.tiny_model(extra_kvs=[("general.alignment", S.STR, "32")]), "must be u32")
    # declared alignment 64, but offsets laid out for 32
    good64 = S.tiny_model(alignment=64, extra_kvs=[("general.alignment", S.U32, 64)])
    bad = S.build([("general.alignment", S.U32, 64)],
                  [("a", [64], S.T_F32, 0), ("b", [8], S.T_F32, 256 + 32)], alignment=64)
    c["offset_not_multiple_of_alignment_key"] = (bad, "alignment 64")
    nested = S.s("k") + struct.pack("<IIQ", S.ARR, S.ARR, 1) + struct.pack("<IQ", S.U8, 0)
    c["nested_array"] = (S.tiny_model(raw_kvs=[nested]), "nested")
    c["unknown_value_type"] = (S.tiny_model(raw_kvs=[S.s("k") + struct.pack("<IQ", 13, 0)]),
                               "unknown value type 13")
    c["duplicate_key"] = (S.tiny_model(extra_kvs=[("llama.block_count", S.U32, 2)]), "duplicate key")
    c["duplicate_tensor"] = (S.tiny_model(extra_tensors=[("token_embd.weight", [64], S.T_F32)]),
                             "duplicate tensor name")
    c["empty_tensor_name"] = (S.tiny_model(extra_tensors=[("", [64], S.T_F32)]), "empty")
    c["nul_in_tensor_name"] = (S.tiny_model(extra_tensors=[("a\0b", [64], S.T_F32)]), "NUL")
    c["control_chars_in_name"] = (S.tiny_model(extra_tensors=[("x\n\x1b[31m", [64], 77)]), "type 77")
    c["unknown_tensor_type"] = (S.tiny_model(extra_tensors=[("x", [256], 16)]), "IQ2_XXS")
    c["q4_k_row_not_multiple"] = (S.tiny_model(extra_tensors=[("x", [64, 2], S.T_Q4_K)]),
                                  "tensor 'x': row length 64 is not a multiple of the Q4_K block size 256")
    c["q5_0_row_not_multiple"] = (S.tiny_model(extra_tensors=[("x", [40, 2], S.T_Q5_0)]), "row length 40")
    # a block scale that is NaN or infinite, in every type's scale field
    for ty, blk in S.SCALE_OFFSETS.items():
        for k, bits in enumerate((0x7C00, 0xFE00)):
            c[f"bad_scale_{S.TYPE_NAMES[ty]}_{k}"] = (
                S.tiny_model(extra_tensors=[("w", [S.BLOCK[ty][0] * 2, 3], ty)],
                             patch_scale=("w", 4, blk[-1], bits)),
                "tensor 'w': block 4 has a NaN or infinite scale")
    c["tensor_0_dims"] = (S.tiny_model(extra_tensors=[("x", [], S.T_F32)]), "dimensions")
    c["tensor_5_dims"] = (S.tiny_model(extra_tensors=[("x", [1, 1, 1, 1, 1], S.T_F32)]), "dimensions")
    c["row_not_multiple"] = (S.tiny_model(extra_tensors=[("x", [48, 2], S.T_Q4_0)]), "row length 48")
    c["empty_file"] = (b"", "too small")
    c["tiny_file"] = (b"GGUF\x03\0\0\0" + b"\0" * 15, "too small")
    c["header_only_counts_lie"] = (b"GGUF" + struct.pack("<IQQ", 3, 1, 1), "cannot fit")
    c["v3_kv_count_huge"] = (S.tiny_model(n_kv=2**62), "cannot fit")
    c["v3_tensor_count_huge"] = (S.tiny_model(n_tensors=2**62), "cannot fit")
    c["bad_version_v1"] = (S.tiny_model(version=1), "version 1")
    c["utf8_garbage_key"] = (S.tiny_model(raw_kvs=[S.s(b"\xff\xfe\x00") + struct.pack("<IQ", 99, 0)]),
                             "unknown value type 99")
    return c, {"good64": good64}


SYNTH, SYNTH_GOOD = synth_cases()


@pytest.mark.parametrize("name", sorted(SYNTH))
def test_synthetic_rejected(name, tmp_path):
    data, frag = SYNTH[name]
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(data)
    check_rejected(str(path), frag)


@pytest.mark.parametrize("version", [2, 3])
def test_synthetic_valid(version, tmp_path):
    path = tmp_path / "ok.gguf"
    path.write_bytes(G.tiny_model(version=version))
    check_accepted(str(path))
    path.write_bytes(SYNTH_GOOD["good64"])
    check_accepted(str(path))


def test_paths(tmp_path):
    check_rejected(str(tmp_path / "does-not-exist.gguf"), "No such file")
    check_rejected(str(tmp_path), "not a regular file")
    for b in BINS:
        p = subprocess.run([b, "inspect"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
        p = subprocess.run([b, "inspect", "--help"], capture_output=True, text=True, timeout=60)
        assert p.returncode == 0 and "usage" in p.stdout
