/*
 * sbuf.c - the growable byte buffer and its JSON writers (contracts in
 * sbuf.h).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/sbuf.h"

void sb_init(struct sbuf *b) { memset(b, 0, sizeof(*b)); }

void sb_free(struct sbuf *b) {
    core_free(b->p);
    sb_init(b);
}

void sb_clear(struct sbuf *b) {
    b->len = 0;
    if (b->p) b->p[0] = '\0';
}

bool sb_reserve(struct sbuf *b, size_t extra) {
    if (b->oom) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    if (extra > ((size_t)-1) / 2 - b->len) {
        b->oom = true;
        return false;
    }
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = core_realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void sb_put(struct sbuf *b, const char *s, size_t n) {
    if (!sb_reserve(b, n)) return;
    if (n) memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

void sb_puts(struct sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

void sb_printf(struct sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof(tmp)) {
        sb_put(b, tmp, (size_t)n);
        return;
    }
    if (!sb_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

size_t sb_utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t len;
    unsigned cp;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if (n < len) return 0;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF))) return 0;
    if (cp >= 0xD800 && cp <= 0xDFFF) return 0;
    return len;
}

void sb_json_str(struct sbuf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    /* worst case: every byte becomes \u00XX (6) or U+FFFD (3) */
    if (!sb_reserve(b, n * 6 + 2)) return;
    char *o = b->p + b->len;
    *o++ = '"';
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c >= 0x80) {
            size_t l = sb_utf8_len(u + i, n - i);
            if (l == 0) {
                memcpy(o, "\xEF\xBF\xBD", 3);
                o += 3;
                i += 1;
            } else {
                memcpy(o, u + i, l);
                o += l;
                i += l;
            }
            continue;
        }
        switch (c) {
        case '"': *o++ = '\\'; *o++ = '"'; break;
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '\n': *o++ = '\\'; *o++ = 'n'; break;
        case '\r': *o++ = '\\'; *o++ = 'r'; break;
        case '\t': *o++ = '\\'; *o++ = 't'; break;
        case '\b': *o++ = '\\'; *o++ = 'b'; break;
        case '\f': *o++ = '\\'; *o++ = 'f'; break;
        default:
            if (c < 0x20 || c == 0x7F) {
                *o++ = '\\'; *o++ = 'u'; *o++ = '0'; *o++ = '0';
                *o++ = hex[c >> 4]; *o++ = hex[c & 15];
            } else {
                *o++ = (char)c;
            }
        }
        i++;
    }
    *o++ = '"';
    *o = '\0';
    b->len = (size_t)(o - b->p);
}

void sb_json_num(struct sbuf *b, double v) {
    /* JSON has no inf/NaN; a -inf logprob (masked token) is reported as a
     * large negative number, as OpenAI does with -9999. */
    if (!isfinite(v)) v = -9999.0;
    sb_printf(b, "%.7g", v);
}

size_t sb_utf8_check(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { /* the common case: ASCII runs */
            i++;
            continue;
        }
        size_t l = sb_utf8_len(u + i, n - i);
        if (l == 0) return i;
        i += l;
    }
    return n;
}

char *sb_take(struct sbuf *b, size_t *len) {
    if (!sb_reserve(b, 0)) return NULL;
    char *p = b->p;
    if (len) *len = b->len;
    sb_init(b);
    return p;
}
