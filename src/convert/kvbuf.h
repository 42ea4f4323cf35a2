/*
 * kvbuf.h - GGUF metadata key/values serialized into memory as they are
 * added (key, type, value in the file's byte layout), so that the count
 * is known before the header is written. Used by convert.c; errors
 * (out of memory) are sticky in oom.
 */
#ifndef ANVIL_KVBUF_H
#define ANVIL_KVBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvbuf {
    uint8_t *p;
    size_t n, cap;
    uint64_t count;
    bool oom;
};

void kb_u32(struct kvbuf *b, const char *key, uint32_t v);
void kb_i32(struct kvbuf *b, const char *key, int32_t v);
void kb_f32(struct kvbuf *b, const char *key, float v);
void kb_bool(struct kvbuf *b, const char *key, bool v);
void kb_str(struct kvbuf *b, const char *key, const char *s, size_t len);
/* Arrays: strings (each with its length), i32, f32, u8. */
void kb_arr_str(struct kvbuf *b, const char *key, const char *const *s, const size_t *len,
                uint64_t n);
void kb_arr_i32(struct kvbuf *b, const char *key, const int32_t *v, uint64_t n);
void kb_arr_f32(struct kvbuf *b, const char *key, const float *v, uint64_t n);
void kb_arr_u8(struct kvbuf *b, const char *key, const uint8_t *v, uint64_t n);
void kb_free(struct kvbuf *b);

#endif
