"""Byte-level GGUF helpers for the malformed-file tests: a writer that
will happily produce invalid files (the gguf package refuses to), and a
layout walker that records the file offset of every field of a real file so
a test can patch exactly one of them.

Independent of anvil's C reader on purpose: written from the GGUF spec.
"""
import struct

# value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR_FMT = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f",
              BOOL: "<B", U64: "<Q", I64: "<q", F64: "<d"}

# tensor types and block geometry (elements, bytes)
T_F32, T_F16, T_Q4_0, T_Q4_1, T_Q8_0, T_BF16 = 0, 1, 2, 3, 8, 30
T_Q5_0, T_Q5_1, T_Q2_K, T_Q3_K, T_Q4_K, T_Q5_K, T_Q6_K, T_IQ4_NL, T_IQ4_XS = 6, 7, 10, 11, 12, 13, 14, 20, 23
BLOCK = {T_F32: (1, 4), T_F16: (1, 2), T_Q4_0: (32, 18), T_Q4_1: (32, 20), T_Q8_0: (32, 34),
         T_BF16: (1, 2), T_Q5_0: (32, 22), T_Q5_1: (32, 24), T_Q2_K: (256, 84), T_Q3_K: (256, 110),
         T_Q4_K: (256, 144), T_Q5_K: (256, 176), T_Q6_K: (256, 210), T_IQ4_NL: (32, 18),
         T_IQ4_XS: (256, 136)}
TYPE_NAMES = {T_F32: "F32", T_F16: "F16", T_Q4_0: "Q4_0", T_Q4_1: "Q4_1", T_Q8_0: "Q8_0",
              T_BF16: "BF16", T_Q5_0: "Q5_0", T_Q5_1: "Q5_1", T_Q2_K: "Q2_K", T_Q3_K: "Q3_K",
              T_Q4_K: "Q4_K", T_Q5_K: "Q5_K", T_Q6_K: "Q6_K", T_IQ4_NL: "IQ4_NL", T_IQ4_XS: "IQ4_XS"}
# byte offsets of the f16 scales (d, dmin, m) inside one block (GGUF layouts)
SCALE_OFFSETS = {T_Q4_0: [0], T_Q4_1: [0, 2], T_Q8_0: [0], T_Q5_0: [0], T_Q5_1: [0, 2],
                 T_Q2_K: [80, 82], T_Q3_K: [108], T_Q4_K: [0, 2], T_Q5_K: [0, 2], T_Q6_K: [208],
                 T_IQ4_NL: [0], T_IQ4_XS: [0]}


def s(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def value(vt, v):
    if vt == STR:
        return s(v)
    if vt == ARR:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        return out + b"".join(value(et, x) for x in items)
    return struct.pack(SCALAR_FMT[vt], v)


def kv(key, vt, v):
    return s(key) + struct.pack("<I", vt) + value(vt, v)


def tensor_nbytes(ne, ttype):
    blck, bsz = BLOCK[ttype]
    n = 1
    for d in ne:
        n *= d
    return n // blck * bsz


def build(kvs, tensors, version=3, alignment=32, magic=b"GGUF", n_kv=None, n_tensors=None,
          raw_kvs=None, patch_scale=None):
    """kvs: list of (key, vtype, value); tensors: list of (name, ne, type) laid
    out back to back (offsets computed, aligned) or (name, ne, type, offset).
    raw_kvs: extra pre-encoded key/value bytes appended after kvs.
    The data bytes are a fixed pattern whose f16 block scales are sane
    (finite); patch_scale = (tensor name, block, byte offset in the block,
    u16) then writes one scale, e.g. an infinity."""
    raw_kvs = raw_kvs or []
    body = b"".join(kv(*x) for x in kvs) + b"".join(raw_kvs)
    infos, off, data_size, where = b"", 0, 0, {}
    for t in tensors:
        name, ne, tt = t[:3]
        o = t[3] if len(t) > 3 else off
        where[name] = (o, tt)
        infos += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        infos += struct.pack("<IQ", tt, o)
        nb = tensor_nbytes(ne, tt) if tt in BLOCK else 0
        off = (o + nb + alignment - 1) // alignment * alignment
        data_size = max(data_size, off)
    head = magic + struct.pack("<IQQ", version,
                               len(tensors) if n_tensors is None else n_tensors,
                               len(kvs) + len(raw_kvs) if n_kv is None else n_kv)
    out = head + body + infos
    out += b"\0" * ((-len(out)) % alignment)
    # deterministic non-zero data; bit 6 of every odd byte clear, so that no
    # f16 read at an even offset (every block scale) has an all-ones
    # exponent: scales are finite
    data = bytearray((i * 7 + 3) & (0xFF if i % 2 == 0 else 0xBF) for i in range(data_size))
    if patch_scale:
        name, blk, field, bits = patch_scale
        o, tt = where[name]
        struct.pack_into("<H", data, o + blk * BLOCK[tt][1] + field, bits)
    return out + bytes(data)


def tiny_model(**kw):
    """A small valid file shaped like a Llama GGUF (enough for `inspect`);
    keyword arguments go to build()."""
    kvs = [
        ("general.architecture", STR, "llama"),
        ("llama.block_count", U32, 1),
        ("llama.embedding_length", U32, 64),
        ("tokenizer.ggml.tokens", ARR, (STR, ["a", "b", "<s>"])),
        ("tokenizer.ggml.scores", ARR, (F32, [0.0, -1.0, -2.0])),
    ]
    tensors = [
        ("token_embd.weight", [64, 3], T_Q8_0),
        ("blk.0.attn_norm.weight", [64], T_F32),
        ("blk.0.attn_q.weight", [64, 64], T_Q4_1),
    ]
    return build(kvs + kw.pop("extra_kvs", []), tensors + kw.pop("extra_tensors", []), **kw)


class Layout:
    """Offsets of the fields of a GGUF file (read from its header only)."""

    def __init__(self, b):
        self.b = b
        self.kv = {}       # key -> dict(key_len=, type=, value=, [arr_type=, arr_n=, strs=[...]])
        self.kv_order = []
        self.tensors = []  # dicts: name_len, n_dims, ne=[...], type, offset
        p = 24
        self.version, self.n_tensors, self.n_kv = struct.unpack_from("<IQQ", b, 4)
        for _ in range(self.n_kv):
            f = {"key_len": p}
            (n,) = struct.unpack_from("<Q", b, p)
            key = b[p + 8:p + 8 + n].decode()
            p += 8 + n
            f["type"] = p
            (vt,) = struct.unpack_from("<I", b, p)
            p += 4
            f["value"] = p
            p = self._skip(vt, p, f)
            self.kv[key] = f
            self.kv_order.append(key)
        for _ in range(self.n_tensors):
            t = {"name_len": p}
            (n,) = struct.unpack_from("<Q", b, p)
            t["name"] = b[p + 8:p + 8 + n].decode()
            p += 8 + n
            t["n_dims"] = p
            (nd,) = struct.unpack_from("<I", b, p)
            p += 4
            t["ne"] = [p + 8 * i for i in range(nd)]
            p += 8 * nd
            t["type"] = p
            t["offset"] = p + 4
            p += 12
            self.tensors.append(t)
        self.end_of_infos = p
        align = 32
        if "general.alignment" in self.kv:
            (align,) = struct.unpack_from("<I", b, self.kv["general.alignment"]["value"])
        self.alignment = align
        self.data_offset = (p + align - 1) // align * align

    def _skip(self, vt, p, f=None):
        b = self.b
        if vt == STR:
            (n,) = struct.unpack_from("<Q", b, p)
            return p + 8 + n
        if vt == ARR:
            et, n = struct.unpack_from("<IQ", b, p)
            if f is not None:
                f["arr_type"], f["arr_n"], f["strs"] = p, p + 4, []
            p += 12
            if et == STR:
                for _ in range(n):
                    if f is not None and len(f["strs"]) < 200:
                        f["strs"].append(p)
                    p = self._skip(STR, p)
                return p
            return p + n * struct.calcsize(SCALAR_FMT[et])
        return p + struct.calcsize(SCALAR_FMT[vt])

    def tensor(self, name):
        return next(t for t in self.tensors if t["name"] == name)


def patch(b, off, fmt, v):
    out = bytearray(b)
    struct.pack_into(fmt, out, off, v)
    return bytes(out)
