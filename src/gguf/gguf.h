/*
 * gguf.h - GGUF v2/v3 reader: map a file read-only, parse and validate its
 * header, metadata and tensor table. Knows nothing about models.
 *
 * Invariants after a successful gguf_open:
 *   - every string, array and tensor extent lies inside the mapping;
 *   - every tensor's data offset is aligned to general.alignment (default
 *     32), its type is known, its dims are >= 1 and its byte size is exact;
 *   - tensor names are unique and NUL-terminated copies.
 * Strings in metadata point into the mapping and are NOT NUL-terminated:
 * always use (ptr, len).
 *
 * Reference: the GGUF spec (ggml docs/gguf.md).
 */
#ifndef ANVIL_GGUF_H
#define ANVIL_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "gguf/gguf_types.h" /* tensor types: geometry and names */

enum gguf_vtype {
    GGUF_VT_UINT8 = 0,
    GGUF_VT_INT8 = 1,
    GGUF_VT_UINT16 = 2,
    GGUF_VT_INT16 = 3,
    GGUF_VT_UINT32 = 4,
    GGUF_VT_INT32 = 5,
    GGUF_VT_FLOAT32 = 6,
    GGUF_VT_BOOL = 7,
    GGUF_VT_STRING = 8,
    GGUF_VT_ARRAY = 9,
    GGUF_VT_UINT64 = 10,
    GGUF_VT_INT64 = 11,
    GGUF_VT_FLOAT64 = 12,
    GGUF_VT_COUNT
};

struct gguf_str {
    const char *ptr; /* into the mapping; not NUL-terminated */
    uint64_t len;
};

struct gguf_kv {
    struct gguf_str key;
    enum gguf_vtype type;
    enum gguf_vtype arr_type; /* for GGUF_VT_ARRAY */
    uint64_t n;               /* array length (1 for scalars) */
    const uint8_t *data;      /* scalar value / first array element, in the
                                 mapping; for string arrays, the first
                                 (u64 len, bytes) record */
    const struct gguf_str *strs; /* for string arrays: n decoded strings */
};

#define GGUF_MAX_DIMS 4

struct gguf_tensor {
    char *name;                /* NUL-terminated copy */
    uint32_t n_dims;
    uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the contiguous (row) length */
    int type;                  /* enum anvil_type value (ggml type id) */
    uint64_t offset;           /* relative to the data section */
    const void *data;          /* into the mapping */
    uint64_t nbytes;
};

struct gguf_file {
    uint32_t version;
    uint64_t n_kv, n_tensors;
    struct gguf_kv *kv;
    struct gguf_tensor *tensors;
    uint32_t alignment;
    const uint8_t *map; /* whole file, read-only */
    size_t map_size;
    size_t data_offset; /* start of the tensor data section */
};

/* Open and fully validate. The first part of a split model
 * (PREFIX-00001-of-0000N.gguf with split.count N, see gguf_split.h) opens
 * with all its parts: the tensor table then holds every part's tensors
 * (data in each part's own mapping) and the metadata is the first part's.
 * On failure writes a one-line reason to err and
 * returns ANVIL_ERR_IO (cannot open/map), ANVIL_ERR_FORMAT (malformed) or
 * ANVIL_ERR_UNSUPPORTED (unknown tensor type, version). */
anvil_status gguf_open(const char *path, struct gguf_file **out, char *err, size_t err_cap);
void gguf_close(struct gguf_file *f); /* NULL is a no-op */

/* Drop the whole pages of [p, p + len) (inside the file's mapping) from
 * the process: for tensors that were copied elsewhere. The mapping stays
 * valid; a later read faults the bytes back in from the file. */
void gguf_release(struct gguf_file *f, const void *p, size_t len);

/* Lookups; NULL / false when missing or of another type. Integer getters
 * accept any integer type whose value fits. */
const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key);
bool gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const struct gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const struct gguf_file *f, const char *key, struct gguf_str *out);
/* Array of the given element type (e.g. GGUF_VT_STRING); sets *kv. */
bool gguf_get_arr(const struct gguf_file *f, const char *key, enum gguf_vtype elem,
                  const struct gguf_kv **kv);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

const char *gguf_vtype_name(enum gguf_vtype t);
bool gguf_str_eq(struct gguf_str s, const char *cstr);

#endif
