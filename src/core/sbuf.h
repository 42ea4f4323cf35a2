/*
 * sbuf.h - the growable byte buffer: text and JSON output (the server's
 * replies, the constraint engine's dumps and schema texts).
 *
 * Storage comes from core_realloc and is released with core_free (also
 * what sb_take hands out). An allocation failure sets `oom` and makes
 * later appends no-ops, so a formatter appends freely and checks once at
 * the end.
 *
 * JSON strings: RFC 8259 section 7. Output is always valid UTF-8: a byte
 * that does not start or continue a valid sequence (overlongs, surrogates
 * and code points above U+10FFFF included) becomes U+FFFD, the same rule
 * as the detokenizer's.
 */
#ifndef ANVIL_CORE_SBUF_H
#define ANVIL_CORE_SBUF_H

#include <stdbool.h>
#include <stddef.h>

struct sbuf {
    char *p; /* NUL terminated when len > 0 or after sb_reserve */
    size_t len, cap;
    bool oom;
};

void sb_init(struct sbuf *b);
void sb_free(struct sbuf *b);
void sb_clear(struct sbuf *b); /* keeps the storage */
bool sb_reserve(struct sbuf *b, size_t extra);
void sb_put(struct sbuf *b, const char *s, size_t n);
void sb_puts(struct sbuf *b, const char *s);
void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append s[0..n) as a quoted JSON string. Bytes that are not valid UTF-8
 * become U+FFFD, so the output is always valid JSON whatever the model
 * emits (a byte-level token can be half a character). */
void sb_json_str(struct sbuf *b, const char *s, size_t n);
/* Append a float as a JSON number (finite values; -inf/NaN become -9999). */
void sb_json_num(struct sbuf *b, double v);
/* Hand the storage to the caller (NUL terminated; free with core_free)
 * and reset b. NULL after an allocation failure. */
char *sb_take(struct sbuf *b, size_t *len);

/* Length of the valid UTF-8 sequence at s[0..n) (1 to 4), or 0 when the
 * bytes there are not one: a stray continuation byte, an overlong form, a
 * surrogate, a code point above U+10FFFF or a cut sequence (RFC 3629). */
size_t sb_utf8_len(const unsigned char *s, size_t n);
/* Offset of the first byte of s[0..n) that is not valid UTF-8, or n. */
size_t sb_utf8_check(const char *s, size_t n);

#endif /* ANVIL_CORE_SBUF_H */
