/*
 * gguf_write.c - sequential GGUF v3 writer; see gguf_write.h.
 * Values are written field by field, little-endian (the host order; gguf.c
 * asserts a little-endian host), never by dumping structs.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf_write.h"

anvil_status gguf_wr_open(struct gguf_wr *w, const char *path, char *err, size_t err_cap) {
    memset(w, 0, sizeof(*w));
    w->path = path;
    w->fp = fopen(path, "wb");
    if (!w->fp) {
        errmsg_set(err, err_cap, "cannot create '%s': %s", path, strerror(errno));
        return ANVIL_ERR_IO;
    }
    return ANVIL_OK;
}

anvil_status gguf_wr_close(struct gguf_wr *w, char *err, size_t err_cap) {
    if (!w->fp) return ANVIL_OK;
    if (!w->err_no && fflush(w->fp) != 0) w->err_no = errno;
    if (!w->err_no && fsync(fileno(w->fp)) != 0 && errno != EINVAL) w->err_no = errno;
    if (fclose(w->fp) != 0 && !w->err_no) w->err_no = errno;
    w->fp = NULL;
    if (w->err_no) {
        errmsg_set(err, err_cap, "cannot write '%s': %s", w->path, strerror(w->err_no));
        return ANVIL_ERR_IO;
    }
    return ANVIL_OK;
}

void gguf_wr_bytes(struct gguf_wr *w, const void *p, size_t n) {
    if (w->err_no || n == 0) return;
    if (fwrite(p, 1, n, w->fp) != n) {
        w->err_no = errno ? errno : EIO;
        return;
    }
    w->pos += n;
}

void gguf_wr_u32(struct gguf_wr *w, uint32_t v) { gguf_wr_bytes(w, &v, 4); }
void gguf_wr_u64(struct gguf_wr *w, uint64_t v) { gguf_wr_bytes(w, &v, 8); }

void gguf_wr_str(struct gguf_wr *w, const char *p, uint64_t len) {
    gguf_wr_u64(w, len);
    gguf_wr_bytes(w, p, (size_t)len);
}

void gguf_wr_pad(struct gguf_wr *w, uint32_t align) {
    static const uint8_t zeros[64];
    uint64_t n = (align - w->pos % align) % align;
    while (n > 0 && !w->err_no) {
        size_t k = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
        gguf_wr_bytes(w, zeros, k);
        n -= k;
    }
}

void gguf_wr_header(struct gguf_wr *w, uint64_t n_tensors, uint64_t n_kv) {
    gguf_wr_bytes(w, "GGUF", 4);
    gguf_wr_u32(w, 3);
    gguf_wr_u64(w, n_tensors);
    gguf_wr_u64(w, n_kv);
}

static size_t scalar_size(enum gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    case GGUF_VT_UINT64: case GGUF_VT_INT64: case GGUF_VT_FLOAT64: return 8;
    default: return 0;
    }
}

void gguf_wr_kv(struct gguf_wr *w, const struct gguf_kv *kv) {
    gguf_wr_str(w, kv->key.ptr, kv->key.len);
    gguf_wr_u32(w, (uint32_t)kv->type);
    if (kv->type == GGUF_VT_STRING) {
        uint64_t len;
        memcpy(&len, kv->data, 8);
        gguf_wr_str(w, (const char *)kv->data + 8, len);
    } else if (kv->type == GGUF_VT_ARRAY) {
        gguf_wr_u32(w, (uint32_t)kv->arr_type);
        gguf_wr_u64(w, kv->n);
        if (kv->arr_type == GGUF_VT_STRING)
            for (uint64_t i = 0; i < kv->n; i++) gguf_wr_str(w, kv->strs[i].ptr, kv->strs[i].len);
        else /* n * size was checked against the input file by gguf_open */
            gguf_wr_bytes(w, kv->data, (size_t)kv->n * scalar_size(kv->arr_type));
    } else {
        gguf_wr_bytes(w, kv->data, scalar_size(kv->type));
    }
}

void gguf_wr_kv_u32(struct gguf_wr *w, const char *key, uint32_t v) {
    gguf_wr_str(w, key, strlen(key));
    gguf_wr_u32(w, GGUF_VT_UINT32);
    gguf_wr_u32(w, v);
}

void gguf_wr_tensor_info(struct gguf_wr *w, const char *name, uint32_t n_dims,
                         const uint64_t *ne, int type, uint64_t offset) {
    gguf_wr_str(w, name, strlen(name));
    gguf_wr_u32(w, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) gguf_wr_u64(w, ne[d]);
    gguf_wr_u32(w, (uint32_t)type);
    gguf_wr_u64(w, offset);
}
