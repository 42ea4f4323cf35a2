/*
 * kvbuf.c - in-memory GGUF key/value records (kvbuf.h). Value types are
 * the GGUF ids of gguf.h; strings are u64 length + bytes, arrays u32
 * element type + u64 count + elements, all little-endian.
 */
#include <string.h>

#include "convert/kvbuf.h"
#include "core/core.h"
#include "gguf/gguf.h"

static void put(struct kvbuf *b, const void *p, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t nc = b->cap ? b->cap : 4096;
        while (nc < b->n + n) nc *= 2;
        uint8_t *q = core_realloc(b->p, nc);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = nc;
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void put_u32(struct kvbuf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(struct kvbuf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(struct kvbuf *b, const char *s, size_t n) {
    put_u64(b, n);
    put(b, s, n);
}
static void key(struct kvbuf *b, const char *k, enum gguf_vtype t) {
    put_str(b, k, strlen(k));
    put_u32(b, (uint32_t)t);
    b->count++;
}

void kb_u32(struct kvbuf *b, const char *k, uint32_t v) { key(b, k, GGUF_VT_UINT32), put_u32(b, v); }
void kb_i32(struct kvbuf *b, const char *k, int32_t v) { key(b, k, GGUF_VT_INT32), put(b, &v, 4); }
void kb_f32(struct kvbuf *b, const char *k, float v) { key(b, k, GGUF_VT_FLOAT32), put(b, &v, 4); }
void kb_bool(struct kvbuf *b, const char *k, bool v) {
    uint8_t x = v;
    key(b, k, GGUF_VT_BOOL), put(b, &x, 1);
}
void kb_str(struct kvbuf *b, const char *k, const char *s, size_t len) {
    key(b, k, GGUF_VT_STRING), put_str(b, s, len);
}
void kb_arr_str(struct kvbuf *b, const char *k, const char *const *s, const size_t *len,
                uint64_t n) {
    key(b, k, GGUF_VT_ARRAY);
    put_u32(b, GGUF_VT_STRING);
    put_u64(b, n);
    for (uint64_t i = 0; i < n; i++) put_str(b, s[i], len[i]);
}
void kb_arr_i32(struct kvbuf *b, const char *k, const int32_t *v, uint64_t n) {
    key(b, k, GGUF_VT_ARRAY);
    put_u32(b, GGUF_VT_INT32);
    put_u64(b, n);
    put(b, v, (size_t)n * 4);
}
void kb_arr_f32(struct kvbuf *b, const char *k, const float *v, uint64_t n) {
    key(b, k, GGUF_VT_ARRAY);
    put_u32(b, GGUF_VT_FLOAT32);
    put_u64(b, n);
    put(b, v, (size_t)n * 4);
}
void kb_arr_u8(struct kvbuf *b, const char *k, const uint8_t *v, uint64_t n) {
    key(b, k, GGUF_VT_ARRAY);
    put_u32(b, GGUF_VT_UINT8);
    put_u64(b, n);
    put(b, v, (size_t)n);
}
void kb_free(struct kvbuf *b) {
    core_free(b->p);
    *b = (struct kvbuf){0};
}
