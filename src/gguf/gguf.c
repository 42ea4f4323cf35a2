/*
 * gguf.c - GGUF v2/v3 reader: mmap the file read-only, parse the header,
 * the metadata key/values and the tensor table field by field, and
 * validate everything against the mapping before anyone uses it.
 *
 * What it does not do: interpret metadata (model.c does), copy tensor data
 * (weights stay in the mapping), write files (gguf_write.c).
 *
 * Invariants (see gguf.h): every read is preceded by a bounds check on the
 * bytes left in the mapping; every count is checked against those bytes
 * before anything is allocated for it (each key/value needs >= 13 bytes,
 * each tensor record >= 32, each string >= 8), so a count of 2^60 fails
 * at once instead of allocating; all size arithmetic is overflow-checked.
 * Keys and tensor names are hashed, so duplicate detection and lookups stay
 * linear even for a hostile file with millions of entries.
 *
 * Layout (ggml docs/gguf.md; v2 and v3 are identical for little-endian
 * files, v1 used 32-bit counts and is refused):
 *   u32 magic "GGUF", u32 version, u64 n_tensors, u64 n_kv,
 *   n_kv x (string key, u32 type, value),
 *   n_tensors x (string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset),
 *   padding to general.alignment, tensor data.
 *   string = u64 len + bytes; array = u32 elem type + u64 n + elements.
 * The host is assumed little-endian (x86-64, aarch64), as GGUF files are.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/hash.h"
#include "gguf/gguf.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf.c assumes a little-endian host"
#endif

#define GGUF_DEFAULT_ALIGNMENT 32
#define KV_MIN_BYTES 13     /* u64 key len + u32 type + >= 1 byte of value */
#define TENSOR_MIN_BYTES 32 /* u64 name len + u32 n_dims + u64 ne + u32 type + u64 offset */

/* ---------------------------------------------------------------------- */
/* value types */

static const uint32_t vtype_size[GGUF_VT_COUNT] = {
    [GGUF_VT_UINT8] = 1,  [GGUF_VT_INT8] = 1,    [GGUF_VT_UINT16] = 2, [GGUF_VT_INT16] = 2,
    [GGUF_VT_UINT32] = 4, [GGUF_VT_INT32] = 4,   [GGUF_VT_FLOAT32] = 4, [GGUF_VT_BOOL] = 1,
    [GGUF_VT_STRING] = 0, [GGUF_VT_ARRAY] = 0,   [GGUF_VT_UINT64] = 8, [GGUF_VT_INT64] = 8,
    [GGUF_VT_FLOAT64] = 8,
};

const char *gguf_vtype_name(enum gguf_vtype t) {
    static const char *const names[GGUF_VT_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
    };
    if ((unsigned)t >= GGUF_VT_COUNT) return "?";
    return names[t];
}

bool gguf_str_eq(struct gguf_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

/* ---------------------------------------------------------------------- */
/* the file object: gguf_file plus private hash indexes */

struct gguf_impl {
    struct gguf_file f; /* first member: gguf_file * converts to gguf_impl * */
    struct hash_index kv_index, tensor_index; /* ids into f.kv, f.tensors */
    /* the other parts of a split model (gguf_split.h): their tensors were
     * moved into f.tensors, their mappings stay here until gguf_close */
    struct gguf_impl **parts;
    uint32_t n_parts;
};

static void kv_key(const void *ctx, uint32_t id, const void **key, size_t *len) {
    const struct gguf_kv *kv = &((const struct gguf_file *)ctx)->kv[id];
    *key = kv->key.ptr;
    *len = kv->key.len;
}

static void tensor_key(const void *ctx, uint32_t id, const void **key, size_t *len) {
    const char *name = ((const struct gguf_file *)ctx)->tensors[id].name;
    *key = name;
    *len = strlen(name);
}

/* Make room for element n of *arr (capacity *cap, zero-filled growth). */
static anvil_status grow(void **arr, uint64_t *cap, uint64_t n, size_t elem) {
    if (n < *cap) return ANVIL_OK;
    uint64_t nc = *cap ? *cap * 2 : 64; /* n is bounded by the file size */
    uint8_t *p = core_realloc(*arr, (size_t)nc * elem);
    if (!p) return ANVIL_ERR_NOMEM;
    memset(p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return ANVIL_OK;
}


/* ---------------------------------------------------------------------- */
/* bounds-checked reader over the mapping */

struct rd {
    const uint8_t *base;
    size_t size, pos;
    char *err;
    size_t err_cap;
};

static size_t rd_left(const struct rd *r) { return r->size - r->pos; }

/* Make a printable, bounded copy of untrusted bytes for error messages. */
static const char *printable(char *buf, size_t cap, const char *p, uint64_t len) {
    size_t o = 0;
    for (uint64_t i = 0; i < len && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        if (i + 1 < len && o + 8 >= cap) {
            memcpy(buf + o, "...", 4);
            return buf;
        }
    }
    buf[o] = 0;
    return buf;
}

/* Need n bytes at the current position for `what`. */
static anvil_status rd_need(struct rd *r, uint64_t n, const char *what) {
    if (n > rd_left(r)) {
        errmsg_set(r->err, r->err_cap,
                   "gguf: truncated file: %s needs %llu bytes at offset %zu, only %zu left "
                   "(file size %zu)",
                   what, (unsigned long long)n, r->pos, rd_left(r), r->size);
        return ANVIL_ERR_FORMAT;
    }
    return ANVIL_OK;
}

static anvil_status rd_u32(struct rd *r, uint32_t *v, const char *what) {
    anvil_status st = rd_need(r, 4, what);
    if (st != ANVIL_OK) return st;
    memcpy(v, r->base + r->pos, 4);
    r->pos += 4;
    return ANVIL_OK;
}

static anvil_status rd_u64(struct rd *r, uint64_t *v, const char *what) {
    anvil_status st = rd_need(r, 8, what);
    if (st != ANVIL_OK) return st;
    memcpy(v, r->base + r->pos, 8);
    r->pos += 8;
    return ANVIL_OK;
}

static anvil_status rd_str(struct rd *r, struct gguf_str *s, const char *what) {
    uint64_t len;
    anvil_status st = rd_u64(r, &len, what);
    if (st != ANVIL_OK) return st;
    if (len > rd_left(r)) {
        errmsg_set(r->err, r->err_cap,
                   "gguf: %s: string length %llu at offset %zu exceeds the %zu bytes left in "
                   "the file",
                   what, (unsigned long long)len, r->pos - 8, rd_left(r));
        return ANVIL_ERR_FORMAT;
    }
    s->ptr = (const char *)r->base + r->pos;
    s->len = len;
    r->pos += (size_t)len;
    return ANVIL_OK;
}

/* ---------------------------------------------------------------------- */
/* metadata */

static anvil_status parse_kv(struct rd *r, struct gguf_kv *kv, uint64_t i) {
    anvil_status st;
    char what[64], kb[96];
    snprintf(what, sizeof(what), "key #%llu", (unsigned long long)i);
    if ((st = rd_str(r, &kv->key, what)) != ANVIL_OK) return st;
    printable(kb, sizeof(kb), kv->key.ptr, kv->key.len);
    snprintf(what, sizeof(what), "key '%.40s' type", kb);
    uint32_t t;
    if ((st = rd_u32(r, &t, what)) != ANVIL_OK) return st;
    if (t >= GGUF_VT_COUNT) {
        errmsg_set(r->err, r->err_cap, "gguf: key '%s': unknown value type %u", kb, t);
        return ANVIL_ERR_FORMAT;
    }
    kv->type = (enum gguf_vtype)t;
    kv->arr_type = kv->type;
    kv->n = 1;
    kv->strs = NULL;
    snprintf(what, sizeof(what), "key '%.40s' value", kb);
    if (t == GGUF_VT_STRING) {
        kv->data = r->base + r->pos;
        struct gguf_str s;
        return rd_str(r, &s, what);
    }
    if (t != GGUF_VT_ARRAY) {
        kv->data = r->base + r->pos;
        if ((st = rd_need(r, vtype_size[t], what)) != ANVIL_OK) return st;
        r->pos += vtype_size[t];
        return ANVIL_OK;
    }

    /* array: element type, count, elements */
    uint32_t et;
    if ((st = rd_u32(r, &et, what)) != ANVIL_OK) return st;
    if ((st = rd_u64(r, &kv->n, what)) != ANVIL_OK) return st;
    if (et >= GGUF_VT_COUNT) {
        errmsg_set(r->err, r->err_cap, "gguf: key '%s': unknown array element type %u", kb, et);
        return ANVIL_ERR_FORMAT;
    }
    if (et == GGUF_VT_ARRAY) {
        /* ggml's reader refuses nested arrays too; nothing produces them */
        errmsg_set(r->err, r->err_cap, "gguf: key '%s': nested arrays are not supported", kb);
        return ANVIL_ERR_FORMAT;
    }
    kv->arr_type = (enum gguf_vtype)et;
    kv->data = r->base + r->pos;
    uint64_t min_elem = et == GGUF_VT_STRING ? 8 : vtype_size[et];
    uint64_t need;
    if (!u64_mul(kv->n, min_elem, &need) || need > rd_left(r)) {
        errmsg_set(r->err, r->err_cap,
                   "gguf: key '%s': array of %llu %s elements at offset %zu does not fit in the "
                   "%zu bytes left in the file",
                   kb, (unsigned long long)kv->n, gguf_vtype_name(kv->arr_type), r->pos,
                   rd_left(r));
        return ANVIL_ERR_FORMAT;
    }
    if (et != GGUF_VT_STRING) {
        r->pos += (size_t)need;
        return ANVIL_OK;
    }
    /* n * 8 <= bytes left, so this allocation is bounded by the file size */
    struct gguf_str *strs = core_calloc(kv->n ? (size_t)kv->n : 1, sizeof(*strs));
    if (!strs) {
        errmsg_set(r->err, r->err_cap, "gguf: key '%s': out of memory for %llu strings", kb,
                   (unsigned long long)kv->n);
        return ANVIL_ERR_NOMEM;
    }
    kv->strs = strs;
    for (uint64_t j = 0; j < kv->n; j++) {
        size_t at = r->pos;
        if (rd_str(r, &strs[j], "string") != ANVIL_OK) {
            /* reworded here so the vocabulary loop formats nothing per string */
            errmsg_set(r->err, r->err_cap,
                       "gguf: key '%s': string #%llu at offset %zu does not fit in the file "
                       "(size %zu)",
                       kb, (unsigned long long)j, at, r->size);
            return ANVIL_ERR_FORMAT;
        }
    }
    return ANVIL_OK;
}

static anvil_status index_kv(struct gguf_impl *g, uint64_t i, char *err, size_t cap) {
    const struct gguf_kv *kv = &g->f.kv[i];
    int64_t dup;
    anvil_status st = hash_index_add(&g->kv_index, (uint32_t)i, kv->key.ptr, kv->key.len, kv_key,
                                     &g->f, &dup);
    if (st != ANVIL_OK) return st;
    if (dup >= 0) {
        char kb[96];
        errmsg_set(err, cap, "gguf: duplicate key '%s'",
                   printable(kb, sizeof(kb), kv->key.ptr, kv->key.len));
        return ANVIL_ERR_FORMAT;
    }
    return ANVIL_OK;
}

/* Read an integer kv of any integer type as (value, is_negative). */
static bool kv_int(const struct gguf_kv *kv, uint64_t *mag, bool *neg) {
    if (!kv || kv->type == GGUF_VT_ARRAY) return false;
    const void *p = kv->data;
    int64_t s = 0;
    uint64_t u = 0;
    bool is_signed = false;
    switch (kv->type) {
    case GGUF_VT_UINT8: { uint8_t v; memcpy(&v, p, 1); u = v; break; }
    case GGUF_VT_UINT16: { uint16_t v; memcpy(&v, p, 2); u = v; break; }
    case GGUF_VT_UINT32: { uint32_t v; memcpy(&v, p, 4); u = v; break; }
    case GGUF_VT_UINT64: { memcpy(&u, p, 8); break; }
    case GGUF_VT_INT8: { int8_t v; memcpy(&v, p, 1); s = v; is_signed = true; break; }
    case GGUF_VT_INT16: { int16_t v; memcpy(&v, p, 2); s = v; is_signed = true; break; }
    case GGUF_VT_INT32: { int32_t v; memcpy(&v, p, 4); s = v; is_signed = true; break; }
    case GGUF_VT_INT64: { memcpy(&s, p, 8); is_signed = true; break; }
    default: return false;
    }
    if (is_signed) {
        *neg = s < 0;
        *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    } else {
        *neg = false;
        *mag = u;
    }
    return true;
}

/* ---------------------------------------------------------------------- */
/* tensors */

static anvil_status parse_tensor(struct rd *r, struct gguf_tensor *t, uint64_t i) {
    anvil_status st;
    char what[96], nb[96];
    struct gguf_str name;
    snprintf(what, sizeof(what), "tensor #%llu name", (unsigned long long)i);
    if ((st = rd_str(r, &name, what)) != ANVIL_OK) return st;
    printable(nb, sizeof(nb), name.ptr, name.len);
    if (name.len == 0 || memchr(name.ptr, 0, (size_t)name.len)) {
        errmsg_set(r->err, r->err_cap, "gguf: tensor #%llu: name '%s' is empty or contains NUL",
                   (unsigned long long)i, nb);
        return ANVIL_ERR_FORMAT;
    }
    t->name = core_malloc((size_t)name.len + 1);
    if (!t->name) {
        errmsg_set(r->err, r->err_cap, "gguf: out of memory");
        return ANVIL_ERR_NOMEM;
    }
    memcpy(t->name, name.ptr, (size_t)name.len);
    t->name[name.len] = 0;

    snprintf(what, sizeof(what), "tensor '%.60s' header", nb);
    if ((st = rd_u32(r, &t->n_dims, what)) != ANVIL_OK) return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS) {
        errmsg_set(r->err, r->err_cap, "gguf: tensor '%s': %u dimensions (must be 1..%d)", nb,
                   t->n_dims, GGUF_MAX_DIMS);
        return ANVIL_ERR_FORMAT;
    }
    uint64_t nel = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        t->ne[d] = 1;
        if (d >= t->n_dims) continue;
        if ((st = rd_u64(r, &t->ne[d], what)) != ANVIL_OK) return st;
        if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX || !u64_mul(nel, t->ne[d], &nel) ||
            nel > (uint64_t)INT64_MAX) {
            errmsg_set(r->err, r->err_cap,
                       "gguf: tensor '%s': dimension %u is %llu (each must be >= 1 and the "
                       "element count must fit in int64)",
                       nb, d, (unsigned long long)t->ne[d]);
            return ANVIL_ERR_FORMAT;
        }
    }
    uint32_t type;
    if ((st = rd_u32(r, &type, what)) != ANVIL_OK) return st;
    if ((st = rd_u64(r, &t->offset, what)) != ANVIL_OK) return st;
    t->type = (int)type;
    uint32_t blck, bsz;
    if (type > INT32_MAX || !gguf_type_block((int)type, &blck, &bsz)) {
        errmsg_set(r->err, r->err_cap,
                   "gguf: tensor '%s': type %u (%s) is not supported (anvil reads F32, F16, "
                   "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K..Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4)",
                   nb, type, gguf_type_name_any((int)type));
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (t->ne[0] % blck != 0) {
        errmsg_set(r->err, r->err_cap,
                   "gguf: tensor '%s': row length %llu is not a multiple of the %s block size %u",
                   nb, (unsigned long long)t->ne[0], gguf_type_name_any((int)type), blck);
        return ANVIL_ERR_FORMAT;
    }
    /* nel / blck * bsz: at most INT64_MAX / 32 * 34 or INT64_MAX * 4 - check */
    if (!u64_mul(nel / blck, bsz, &t->nbytes)) {
        errmsg_set(r->err, r->err_cap, "gguf: tensor '%s': byte size overflows", nb);
        return ANVIL_ERR_FORMAT;
    }
    return ANVIL_OK;
}

static anvil_status index_tensor(struct gguf_impl *g, uint64_t i, char *err, size_t cap) {
    const struct gguf_tensor *t = &g->f.tensors[i];
    size_t len = strlen(t->name);
    int64_t dup;
    anvil_status st = hash_index_add(&g->tensor_index, (uint32_t)i, t->name, len, tensor_key,
                                     &g->f, &dup);
    if (st != ANVIL_OK) return st;
    if (dup >= 0) {
        char nb[96];
        errmsg_set(err, cap, "gguf: duplicate tensor name '%s'",
                   printable(nb, sizeof(nb), t->name, len));
        return ANVIL_ERR_FORMAT;
    }
    return ANVIL_OK;
}

struct extent {
    uint64_t off, end, idx;
};
static int cmp_extent(const void *a, const void *b) {
    uint64_t x = ((const struct extent *)a)->off, y = ((const struct extent *)b)->off;
    return x < y ? -1 : x > y;
}

/* Tensor data must not overlap: sort extents by offset, compare neighbours.
 * Runs after the extents are checked against the file, so end never wraps. */
static anvil_status check_overlap(struct gguf_file *f, char *err, size_t cap) {
    anvil_status st = ANVIL_OK;
    if (f->n_tensors < 2) return ANVIL_OK;
    struct extent *e = core_malloc((size_t)f->n_tensors * sizeof(*e));
    if (!e) {
        errmsg_set(err, cap, "gguf: out of memory");
        return ANVIL_ERR_NOMEM;
    }
    for (uint64_t i = 0; i < f->n_tensors; i++)
        e[i] = (struct extent){f->tensors[i].offset, f->tensors[i].offset + f->tensors[i].nbytes, i};
    qsort(e, (size_t)f->n_tensors, sizeof(*e), cmp_extent);
    for (uint64_t i = 0; i + 1 < f->n_tensors; i++) {
        if (e[i].end > e[i + 1].off) {
            const struct gguf_tensor *a = &f->tensors[e[i].idx], *b = &f->tensors[e[i + 1].idx];
            char na[96], nb[96];
            errmsg_set(err, cap,
                       "gguf: tensor '%s' [offset %llu, %llu bytes] overlaps tensor '%s' "
                       "[offset %llu]",
                       printable(na, sizeof(na), a->name, strlen(a->name)),
                       (unsigned long long)a->offset, (unsigned long long)a->nbytes,
                       printable(nb, sizeof(nb), b->name, strlen(b->name)),
                       (unsigned long long)b->offset);
            st = ANVIL_ERR_FORMAT;
            break;
        }
    }
    core_free(e);
    return st;
}

/* ---------------------------------------------------------------------- */
/* open / close */

static void free_impl(struct gguf_impl *g) {
    struct gguf_file *f = &g->f;
    if (f->kv)
        for (uint64_t i = 0; i < f->n_kv; i++) core_free((void *)f->kv[i].strs);
    if (f->tensors)
        for (uint64_t i = 0; i < f->n_tensors; i++) core_free(f->tensors[i].name);
    core_free(f->kv);
    core_free(f->tensors);
    hash_index_free(&g->kv_index);
    hash_index_free(&g->tensor_index);
    if (f->map) munmap((void *)f->map, f->map_size);
    for (uint32_t i = 0; i < g->n_parts; i++) free_impl(g->parts[i]);
    core_free(g->parts);
    core_free(g);
}

void gguf_release(struct gguf_file *f, const void *p, size_t len) {
    const uint8_t *base = f->map, *a = p;
    if (!base || a < base || len > f->map_size || (size_t)(a - base) > f->map_size - len) {
        /* a tensor of another part of a split model */
        const struct gguf_impl *g = (const struct gguf_impl *)f;
        for (uint32_t i = 0; i < g->n_parts; i++) {
            const struct gguf_file *pf = &g->parts[i]->f;
            if (a >= pf->map && len <= pf->map_size && (size_t)(a - pf->map) <= pf->map_size - len) {
                gguf_release(&g->parts[i]->f, p, len);
                return;
            }
        }
        return;
    }
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = ((uintptr_t)a + pg - 1) & ~(pg - 1), hi = ((uintptr_t)a + len) & ~(pg - 1);
    if (lo < hi) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

static anvil_status parse(struct gguf_impl *g, struct rd *r) {
    struct gguf_file *f = &g->f;
    anvil_status st;
    char *err = r->err;
    size_t cap = r->err_cap;

    /* header */
    if (r->size < 4 || memcmp(r->base, "GGUF", 4) != 0) {
        char mb[40];
        errmsg_set(err, cap, "gguf: bad magic '%s' (not a GGUF file)",
                   printable(mb, sizeof(mb), (const char *)r->base, r->size < 4 ? r->size : 4));
        return ANVIL_ERR_FORMAT;
    }
    r->pos = 4;
    if ((st = rd_u32(r, &f->version, "header version")) != ANVIL_OK) return st;
    if (f->version != 2 && f->version != 3) {
        if ((f->version & 0xffff) == 0 && f->version != 0)
            errmsg_set(err, cap, "gguf: big-endian GGUF files are not supported");
        else
            errmsg_set(err, cap, "gguf: unsupported GGUF version %u (anvil reads 2 and 3)",
                       f->version);
        return ANVIL_ERR_UNSUPPORTED;
    }
    uint64_t n_tensors, n_kv;
    if ((st = rd_u64(r, &n_tensors, "header tensor count")) != ANVIL_OK) return st;
    if ((st = rd_u64(r, &n_kv, "header key/value count")) != ANVIL_OK) return st;
    uint64_t need_kv, need_t, need;
    if (!u64_mul(n_kv, KV_MIN_BYTES, &need_kv) || !u64_mul(n_tensors, TENSOR_MIN_BYTES, &need_t) ||
        !u64_add(need_kv, need_t, &need) || need > rd_left(r)) {
        errmsg_set(err, cap,
                   "gguf: header claims %llu key/values and %llu tensors, which cannot fit in "
                   "a file of %zu bytes",
                   (unsigned long long)n_kv, (unsigned long long)n_tensors, r->size);
        return ANVIL_ERR_FORMAT;
    }

    /* metadata: arrays grow with what is actually parsed, so a count that
     * fits the file but lies costs no more memory than the bytes behind it */
    uint64_t cap_kv = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (grow((void **)&f->kv, &cap_kv, i, sizeof(*f->kv)) != ANVIL_OK) goto nomem;
        f->n_kv = i + 1;
        if ((st = parse_kv(r, &f->kv[i], i)) != ANVIL_OK) return st;
    }
    if (hash_index_init(&g->kv_index, n_kv) != ANVIL_OK) goto nomem;
    for (uint64_t i = 0; i < n_kv; i++)
        if ((st = index_kv(g, i, err, cap)) != ANVIL_OK) return st;
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *akv = gguf_find(f, "general.alignment");
    if (akv) {
        uint32_t a = 0;
        if (akv->type != GGUF_VT_UINT32) {
            errmsg_set(err, cap, "gguf: general.alignment has type %s (must be u32)",
                       gguf_vtype_name(akv->type));
            return ANVIL_ERR_FORMAT;
        }
        memcpy(&a, akv->data, 4);
        if (a == 0 || (a & (a - 1)) != 0) {
            errmsg_set(err, cap, "gguf: general.alignment is %u (must be a power of two)", a);
            return ANVIL_ERR_FORMAT;
        }
        f->alignment = a;
    }

    /* tensor table: recheck the count against what is left now */
    if (!u64_mul(n_tensors, TENSOR_MIN_BYTES, &need_t) || need_t > rd_left(r)) {
        errmsg_set(err, cap,
                   "gguf: header claims %llu tensors, but only %zu bytes are left for the "
                   "tensor table",
                   (unsigned long long)n_tensors, rd_left(r));
        return ANVIL_ERR_FORMAT;
    }
    uint64_t cap_t = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (grow((void **)&f->tensors, &cap_t, i, sizeof(*f->tensors)) != ANVIL_OK) goto nomem;
        f->n_tensors = i + 1;
        if ((st = parse_tensor(r, &f->tensors[i], i)) != ANVIL_OK) return st;
    }
    if (hash_index_init(&g->tensor_index, n_tensors) != ANVIL_OK) goto nomem;
    for (uint64_t i = 0; i < n_tensors; i++)
        if ((st = index_tensor(g, i, err, cap)) != ANVIL_OK) return st;

    /* data section: starts at the next multiple of the alignment */
    uint64_t data = ((uint64_t)r->pos + f->alignment - 1) / f->alignment * f->alignment;
    if (n_tensors > 0 && data > r->size) {
        errmsg_set(err, cap,
                   "gguf: tensor data section would start at offset %llu, past the end of the "
                   "file (size %zu)",
                   (unsigned long long)data, r->size);
        return ANVIL_ERR_FORMAT;
    }
    f->data_offset = data > r->size ? r->size : (size_t)data;
    uint64_t room = r->size - f->data_offset;
    for (uint64_t i = 0; i < n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        char nb[96];
        printable(nb, sizeof(nb), t->name, strlen(t->name));
        if (t->offset % f->alignment != 0) {
            errmsg_set(err, cap, "gguf: tensor '%s': data offset %llu is not a multiple of the "
                       "alignment %u", nb, (unsigned long long)t->offset, f->alignment);
            return ANVIL_ERR_FORMAT;
        }
        if (t->offset > room || t->nbytes > room - t->offset) {
            errmsg_set(err, cap,
                       "gguf: tensor '%s': data [offset %llu, %llu bytes] extends past end of "
                       "file (size %zu, data section starts at %zu)",
                       nb, (unsigned long long)t->offset, (unsigned long long)t->nbytes, r->size,
                       f->data_offset);
            return ANVIL_ERR_FORMAT;
        }
        t->data = f->map + f->data_offset + t->offset;
    }
    anvil_status ost = check_overlap(f, err, cap);
    if (ost != ANVIL_OK) return ost;
    /* Writers (ggml, gguf-py, ours) lay tensors back to back in table order,
     * each padded to the alignment, and llama.cpp requires it: a tensor
     * that does not start where the previous one ends has a size that does
     * not match its type and shape (a patched type, a truncated row). The
     * sums cannot wrap: every extent was checked against the file above. */
    uint64_t expect = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        if (t->offset != expect) {
            char nb[96], np[96];
            if (i == 0)
                errmsg_set(err, cap, "gguf: tensor '%s' starts at offset %llu, not 0",
                           printable(nb, sizeof(nb), t->name, strlen(t->name)),
                           (unsigned long long)t->offset);
            else
                errmsg_set(err, cap,
                           "gguf: tensor '%s' (%s, %llu bytes) ends at offset %llu but the next "
                           "tensor '%s' starts at %llu: a tensor size does not match its type and "
                           "shape",
                           printable(np, sizeof(np), t[-1].name, strlen(t[-1].name)),
                           gguf_type_name_any(t[-1].type), (unsigned long long)t[-1].nbytes,
                           (unsigned long long)(t[-1].offset + t[-1].nbytes),
                           printable(nb, sizeof(nb), t->name, strlen(t->name)),
                           (unsigned long long)t->offset);
            return ANVIL_ERR_FORMAT;
        }
        expect += (t->nbytes + f->alignment - 1) / f->alignment * f->alignment;
    }
    return ANVIL_OK;

nomem:
    errmsg_set(err, cap, "gguf: out of memory");
    return ANVIL_ERR_NOMEM;
}

static anvil_status open_one(const char *path, struct gguf_impl **out, char *err, size_t err_cap) {
    anvil_status st;
    struct gguf_impl *g = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errmsg_set(err, err_cap, "gguf: cannot open '%s': %s", path, strerror(errno));
        return ANVIL_ERR_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        errmsg_set(err, err_cap, "gguf: cannot stat '%s': %s", path, strerror(errno));
        st = ANVIL_ERR_IO;
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        errmsg_set(err, err_cap, "gguf: '%s' is not a regular file", path);
        st = ANVIL_ERR_IO;
        goto fail;
    }
    if (sb.st_size < 24) {
        errmsg_set(err, err_cap, "gguf: '%s' is too small to be a GGUF file (%lld bytes)", path,
                   (long long)sb.st_size);
        st = ANVIL_ERR_FORMAT;
        goto fail;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        errmsg_set(err, err_cap, "gguf: '%s' is too large to map", path);
        st = ANVIL_ERR_IO;
        goto fail;
    }
    g = core_calloc(1, sizeof(*g));
    if (!g) {
        errmsg_set(err, err_cap, "gguf: out of memory");
        st = ANVIL_ERR_NOMEM;
        goto fail;
    }
    void *map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        errmsg_set(err, err_cap, "gguf: cannot map '%s': %s", path, strerror(errno));
        st = ANVIL_ERR_IO;
        goto fail;
    }
    close(fd);
    fd = -1;
    g->f.map = map;
    g->f.map_size = (size_t)sb.st_size;

    struct rd r = {.base = map, .size = (size_t)sb.st_size, .err = err, .err_cap = err_cap};
    TRY(parse(g, &r));
    *out = g;
    return ANVIL_OK;

fail:
    if (fd >= 0) close(fd);
    if (g) free_impl(g);
    return st;
}

/* A first part of a split model (split.count > 1, split.no 0, named
 * PREFIX-00001-of-0000N.gguf as gguf-split names them): open the other
 * parts and move their tensors into g's table, which then holds the whole
 * model. The names must follow, each part must say its split.no and the
 * same split.count, and the tensor total must be split.tensors.count when
 * that is given. A later part opened directly is read alone. */
static anvil_status open_parts(struct gguf_impl *g, const char *path, char *err, size_t cap) {
    struct gguf_file *f = &g->f;
    uint32_t count = 0, no = 0;
    if (!gguf_find(f, "split.count")) return ANVIL_OK;
    if (!gguf_get_u32(f, "split.count", &count) || !gguf_get_u32(f, "split.no", &no) ||
        count == 0 || count > 99999) {
        errmsg_set(err, cap, "gguf: split.count / split.no of '%s' are not valid", path);
        return ANVIL_ERR_FORMAT;
    }
    if (count == 1 || no != 0) return ANVIL_OK;
    size_t l = strlen(path);
    char tail[32];
    snprintf(tail, sizeof tail, "-%05d-of-%05u.gguf", 1, count);
    size_t tl = strlen(tail);
    if (l < tl || strcmp(path + l - tl, tail) != 0) {
        errmsg_set(err, cap, "gguf: '%s' is part 1 of a %u-part split model, but its name does "
                   "not end in %s (the other parts are found by name)", path, count, tail);
        return ANVIL_ERR_FORMAT;
    }
    char *pp = core_malloc(l + 1);
    if (!(g->parts = core_calloc(count, sizeof(*g->parts))) || !pp) {
        core_free(pp);
        errmsg_set(err, cap, "gguf: out of memory");
        return ANVIL_ERR_NOMEM;
    }
    anvil_status st = ANVIL_OK;
    for (uint32_t i = 1; i < count && st == ANVIL_OK; i++) {
        memcpy(pp, path, l - tl);
        snprintf(pp + l - tl, tl + 1, "-%05u-of-%05u.gguf", i + 1, count);
        struct gguf_impl *q = NULL;
        if ((st = open_one(pp, &q, err, cap)) != ANVIL_OK) break;
        g->parts[g->n_parts++] = q;
        uint32_t qn = 0, qc = 0;
        if (!gguf_get_u32(&q->f, "split.no", &qn) || !gguf_get_u32(&q->f, "split.count", &qc) ||
            qn != i || qc != count) {
            errmsg_set(err, cap, "gguf: '%s' should be part %u of %u but its split.no / "
                       "split.count say otherwise", pp, i + 1, count);
            st = ANVIL_ERR_FORMAT;
            break;
        }
        uint64_t n0 = f->n_tensors, nq = q->f.n_tensors;
        struct gguf_tensor *nt = core_realloc(f->tensors, (size_t)(n0 + nq + 1) * sizeof(*nt));
        if (!nt) {
            errmsg_set(err, cap, "gguf: out of memory");
            st = ANVIL_ERR_NOMEM;
            break;
        }
        f->tensors = nt;
        for (uint64_t j = 0; j < nq && st == ANVIL_OK; j++) {
            f->tensors[n0 + j] = q->f.tensors[j];
            q->f.tensors[j].name = NULL; /* moved */
            f->n_tensors = n0 + j + 1;
            st = index_tensor(g, n0 + j, err, cap);
        }
    }
    core_free(pp);
    int64_t want;
    if (st == ANVIL_OK && gguf_get_i64(f, "split.tensors.count", &want) &&
        (uint64_t)want != f->n_tensors) {
        errmsg_set(err, cap, "gguf: the %u parts of '%s' hold %llu tensors, split.tensors.count "
                   "says %lld", count, path, (unsigned long long)f->n_tensors, (long long)want);
        st = ANVIL_ERR_FORMAT;
    }
    return st;
}

anvil_status gguf_open(const char *path, struct gguf_file **out, char *err, size_t err_cap) {
    struct gguf_impl *g = NULL;
    anvil_status st = open_one(path, &g, err, err_cap);
    if (st != ANVIL_OK) return st;
    if ((st = open_parts(g, path, err, err_cap)) != ANVIL_OK) {
        free_impl(g);
        return st;
    }
    *out = &g->f;
    return ANVIL_OK;
}

void gguf_close(struct gguf_file *f) {
    if (f) free_impl((struct gguf_impl *)f);
}

/* ---------------------------------------------------------------------- */
/* lookups */

const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key) {
    const struct gguf_impl *g = (const struct gguf_impl *)f;
    int64_t id = hash_index_find(&g->kv_index, key, strlen(key), kv_key, f);
    return id < 0 ? NULL : &f->kv[id];
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    const struct gguf_impl *g = (const struct gguf_impl *)f;
    int64_t id = hash_index_find(&g->tensor_index, name, strlen(name), tensor_key, f);
    return id < 0 ? NULL : &f->tensors[id];
}

bool gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out) {
    uint64_t mag;
    bool neg;
    if (!kv_int(gguf_find(f, key), &mag, &neg) || neg || mag > UINT32_MAX)
        return false;
    *out = (uint32_t)mag;
    return true;
}

bool gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out) {
    uint64_t mag;
    bool neg;
    if (!kv_int(gguf_find(f, key), &mag, &neg)) return false;
    if (neg) {
        if (mag > (uint64_t)INT64_MAX + 1) return false;
        *out = mag == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)mag;
    } else {
        if (mag > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)mag;
    }
    return true;
}

bool gguf_get_f32(const struct gguf_file *f, const char *key, float *out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return false;
    if (kv->type == GGUF_VT_FLOAT32) {
        memcpy(out, kv->data, 4);
        return true;
    }
    if (kv->type == GGUF_VT_FLOAT64) {
        double d;
        memcpy(&d, kv->data, 8);
        *out = (float)d;
        return true;
    }
    return false;
}

bool gguf_get_bool(const struct gguf_file *f, const char *key, bool *out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_VT_BOOL) return false;
    *out = kv->data[0] != 0;
    return true;
}

bool gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->type != GGUF_VT_STRING) return false;
    memcpy(&out->len, kv->data, 8); /* validated by parse_kv */
    out->ptr = (const char *)kv->data + 8;
    return true;
}

bool gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_vtype elem,
                  const struct gguf_kv **kv) {
    const struct gguf_kv *k = gguf_find(f, key);
    if (!k || k->type != GGUF_VT_ARRAY || k->arr_type != elem) return false;
    *kv = k;
    return true;
}
