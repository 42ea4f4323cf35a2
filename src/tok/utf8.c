/*
 * utf8.c - the three UTF-8 readers the tokenizer needs, and the GPT-2 byte
 * alphabet.
 *
 *   - utf8_decode_lenient: llama.cpp's decoder (unicode.cpp,
 *     unicode_cpt_from_utf8 + unicode_cpts_from_utf8), reproduced so that
 *     invalid input tokenizes exactly as llama.cpp does: every byte that
 *     does not start a well-formed-looking sequence becomes U+FFFD; overlong
 *     forms and surrogates pass through as the code points they spell.
 *   - utf8_next_strict: the Unicode "maximal subpart" rule, for the
 *     streaming detokenizer (same output as Python's errors="replace").
 *   - utf8_encode: plain encoder; like llama.cpp it also encodes surrogates.
 *
 * The byte alphabet is GPT-2's bytes_to_unicode (openai/gpt-2 encoder.py):
 * printable Latin-1 bytes stand for themselves, the other 68 bytes are
 * shown as U+0100.. in byte order.
 */
#include "tok/tok_int.h"

// ----------------------------------------------------------------------------
// llama.cpp-compatible lenient decoder

uint32_t utf8_decode_lenient(const unsigned char *s, size_t n, size_t *i) {
    size_t o = *i;
    unsigned c = s[o];
    if (c < 0x80) {
        *i = o + 1;
        return c;
    }
    int len;
    uint32_t cp;
    if (!(c & 0x40)) goto bad;      /* 10xxxxxx: a continuation byte */
    if (!(c & 0x20)) {
        len = 2;
        cp = c & 0x1f;
    } else if (!(c & 0x10)) {
        len = 3;
        cp = c & 0x0f;
    } else if (!(c & 0x08)) {
        len = 4;
        cp = c & 0x07;
    } else {
        goto bad;                   /* 0xF8..0xFF */
    }
    /* llama.cpp tests `offset + len - 1 >= size`: the whole sequence must fit */
    if (o + (size_t)len > n) goto bad;
    for (int k = 1; k < len; k++) {
        unsigned cc = s[o + k];
        if ((cc & 0xc0) != 0x80) goto bad;
        cp = (cp << 6) | (cc & 0x3f);
    }
    /* deviation: llama.cpp decodes F4 90.. - F7 BF.. to cp > 0x10FFFF and
     * then throws in unicode_cpt_to_utf8 (the process aborts); we treat the
     * lead byte as invalid instead. */
    if (cp > 0x10ffff) goto bad;
    *i = o + (size_t)len;
    return cp;
bad:
    *i = o + 1;
    return 0xfffd;
}

int utf8_encode(uint32_t cp, char *b) {
    if (cp < 0x80) {
        b[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        b[0] = (char)(0xc0 | (cp >> 6));
        b[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        b[0] = (char)(0xe0 | (cp >> 12));
        b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    b[0] = (char)(0xf0 | (cp >> 18));
    b[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    b[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    b[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

int utf8_lead_len(unsigned char c) {
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[c >> 4];
}

// ----------------------------------------------------------------------------
// strict decoder (Unicode 15, section 3.9, table 3-7)

int utf8_next_strict(const unsigned char *s, size_t n) {
    if (n == 0) return 0;
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int len;
    unsigned lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0) lo = 0xa0;       /* no overlongs */
        if (c == 0xed) hi = 0x9f;       /* no surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0) lo = 0x90;       /* no overlongs */
        if (c == 0xf4) hi = 0x8f;       /* <= U+10FFFF */
    } else {
        return -1;                      /* 80..C1, F5..FF never start a character */
    }
    for (int k = 1; k < len; k++) {
        if ((size_t)k >= n) return 0;   /* valid so far, incomplete */
        unsigned cc = s[k];
        unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xbf;
        if (cc < l || cc > h) return -k;
    }
    return len;
}

// ----------------------------------------------------------------------------
// GPT-2 byte alphabet

static bool byte_is_shown_as_itself(unsigned b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
}

/* The 68 other bytes take U+0100.. in increasing byte order: 0x00-0x20
 * (33 bytes), then 0x7F-0xA0 (34 bytes), then 0xAD. */
uint32_t utf8_byte_to_cp(uint8_t b) {
    if (byte_is_shown_as_itself(b)) return b;
    if (b <= 0x20) return 256u + b;
    if (b <= 0xa0) return 256u + 33u + (b - 0x7fu);
    return 256u + 67u; /* 0xAD */
}

int utf8_cp_to_byte(uint32_t cp) {
    if (cp < 256) return byte_is_shown_as_itself(cp) ? (int)cp : -1;
    uint32_t k = cp - 256;
    if (k <= 32) return (int)k;
    if (k <= 66) return (int)(0x7f + (k - 33));
    if (k == 67) return 0xad;
    return -1;
}
