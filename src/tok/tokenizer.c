/*
 * tokenizer.c - text to tokens and tokens to bytes, dispatching on the
 * vocabulary kind (only byte-level BPE today).
 *
 * tok_encode follows llama.cpp's llama_vocab::impl::tokenize:
 *   1. special tokens are cut out of the raw bytes first
 *      (tokenizer_st_partition): for each special token, longest text
 *      first, every occurrence in every still-raw fragment, left to right,
 *      becomes that token. User-defined tokens always take part; control
 *      and unknown ones only when parse_special is set;
 *   2. each raw fragment is decoded (utf8_decode_lenient: bad bytes become
 *      U+FFFD), split by the pre-tokenizer and BPE-encoded word by word.
 * With add_special, BOS goes first (and EOS last) when the vocabulary asks
 * for it (tokenizer.ggml.add_bos_token / add_eos_token).
 *
 * Scratch memory is allocated per call and freed before returning: this is
 * per-request work, not the per-token path. Decoding (tok_piece,
 * tok_detok_*) allocates nothing.
 */
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

// ----------------------------------------------------------------------------
// per-call scratch

void tok_work_free(struct tok_work *w) {
    anvil_free(w->norm);
    anvil_free(w->rx);
    anvil_free(w->spans);
    anvil_free(w->spans2);
    anvil_free(w->sym);
    anvil_free(w->heap);
    anvil_free(w->enc);
    if (w->md) pcre2_match_data_free(w->md);
    memset(w, 0, sizeof(*w));
}

// ----------------------------------------------------------------------------
// special-token partition

struct frag {
    int32_t tok;         /* token id, or -1 for raw text */
    uint32_t start, len; /* raw text: bytes [start, start + len) of the input */
};

struct frags {
    struct frag *a, *b; /* current list and the one being built */
    size_t n, cap_a, cap_b;
};

static anvil_status frag_put(struct frags *f, size_t *nb, struct frag x) {
    anvil_status st = tok_grow((void **)&f->b, &f->cap_b, *nb + 1, sizeof(struct frag));
    if (st != ANVIL_OK) return st;
    f->b[(*nb)++] = x;
    return ANVIL_OK;
}

/* Cut every occurrence of token id (text s, n bytes) out of the raw
 * fragments of f. */
static anvil_status split_on(struct frags *f, const char *text, int32_t id, const char *s,
                             size_t n) {
    anvil_status st;
    size_t nb = 0;
    for (size_t i = 0; i < f->n; i++) {
        struct frag x = f->a[i];
        if (x.tok >= 0) {
            if ((st = frag_put(f, &nb, x)) != ANVIL_OK) return st;
            continue;
        }
        size_t pos = x.start, end = (size_t)x.start + x.len;
        while (pos < end) {
            const char *m = end - pos >= n ? memmem(text + pos, end - pos, s, n) : NULL;
            if (!m) break;
            size_t at = (size_t)(m - text);
            if (at > pos &&
                (st = frag_put(f, &nb, (struct frag){-1, (uint32_t)pos, (uint32_t)(at - pos)})) !=
                    ANVIL_OK)
                return st;
            if ((st = frag_put(f, &nb, (struct frag){id, 0, 0})) != ANVIL_OK) return st;
            pos = at + n;
        }
        if (pos < end &&
            (st = frag_put(f, &nb, (struct frag){-1, (uint32_t)pos, (uint32_t)(end - pos)})) !=
                ANVIL_OK)
            return st;
    }
    struct frag *t = f->a;
    f->a = f->b;
    f->b = t;
    size_t c = f->cap_a;
    f->cap_a = f->cap_b;
    f->cap_b = c;
    f->n = nb;
    return ANVIL_OK;
}

static anvil_status partition(const struct tok_vocab *v, const char *text, size_t len,
                              bool parse_special, struct frags *f) {
    anvil_status st;
    if ((st = tok_grow((void **)&f->a, &f->cap_a, 1, sizeof(struct frag))) != ANVIL_OK) return st;
    f->a[0] = (struct frag){-1, 0, (uint32_t)len};
    f->n = 1;
    for (int32_t k = 0; k < v->n_special; k++) {
        int32_t id = v->special[k];
        if (!parse_special && (v->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) continue;
        size_t n;
        const char *s = tok_text(v, id, &n);
        if (n > len || !memmem(text, len, s, n)) continue; /* cheap common case */
        if ((st = split_on(f, text, id, s, n)) != ANVIL_OK) return st;
    }
    return ANVIL_OK;
}

// ----------------------------------------------------------------------------
// encode

/* Tokens of one raw fragment (no special tokens in it). */
static anvil_status encode_raw(const struct tok_vocab *v, const char *text, size_t n,
                               struct tok_work *w, struct tok_out *o) {
    anvil_status st;
    size_t need;
    if (!size_mul(n, 3, &need)) return ANVIL_ERR_NOMEM;
    /* a bad byte becomes U+FFFD (3 bytes); nothing else grows */
    size_t cap1 = w->text_cap, cap2 = w->text_cap;
    if ((st = tok_grow((void **)&w->norm, &cap1, need, 1)) != ANVIL_OK) return st;
    if ((st = tok_grow((void **)&w->rx, &cap2, need, 1)) != ANVIL_OK) return st;
    w->text_cap = cap1 < cap2 ? cap1 : cap2;

    /* norm: the text as llama.cpp re-encodes its code points (these bytes
     * are what BPE sees). rx: the same, with surrogates (which llama.cpp
     * passes through, and PCRE2 refuses) shown as U+FFFD: both are "other"
     * characters to every pattern, and both take 3 bytes, so offsets agree. */
    size_t m = 0, i = 0;
    while (i < n) {
        uint32_t cp = utf8_decode_lenient((const unsigned char *)text, n, &i);
        int k = utf8_encode(cp, w->norm + m);
        if (cp >= 0xd800 && cp <= 0xdfff)
            memcpy(w->rx + m, "\xef\xbf\xbd", 3);
        else
            memcpy(w->rx + m, w->norm + m, (size_t)k);
        m += (size_t)k;
    }

    switch (v->kind) {
    case TOK_KIND_BPE: {
        size_t n_spans;
        if ((st = pretok_split(&v->pre, w->rx, m, w, &n_spans)) != ANVIL_OK) return st;
        for (size_t s = 0; s < n_spans; s++) {
            st = bpe_encode_word(v, w->norm + w->spans[s].start, w->spans[s].len, w, o);
            if (st != ANVIL_OK) return st;
        }
        return ANVIL_OK;
    }
    }
    return ANVIL_ERR_UNSUPPORTED;
}

int32_t tok_encode(const struct tok_vocab *v, const char *text, size_t len, anvil_token *out,
                   int32_t cap, bool add_special, bool parse_special) {
    if (!v || (!text && len) || cap < 0 || (!out && cap > 0)) return INT32_MIN;
    if (len > UINT32_MAX / 4) return INT32_MIN; /* offsets are 32-bit */
    anvil_status st = ANVIL_OK;
    struct tok_out o = {out, cap, 0};
    struct tok_work w;
    struct frags f;
    memset(&w, 0, sizeof(w));
    memset(&f, 0, sizeof(f));

    if (add_special && v->add_bos) tok_out_push(&o, v->bos);
    if (len > 0) {
        TRY(partition(v, text, len, parse_special, &f));
        for (size_t i = 0; i < f.n; i++) {
            if (f.a[i].tok >= 0)
                tok_out_push(&o, f.a[i].tok);
            else
                TRY(encode_raw(v, text + f.a[i].start, f.a[i].len, &w, &o));
        }
    }
    if (add_special && v->add_eos) tok_out_push(&o, v->eos);
fail:
    tok_work_free(&w);
    anvil_free(f.a);
    anvil_free(f.b);
    if (st != ANVIL_OK || o.n > INT32_MAX) return INT32_MIN;
    return o.n > cap ? (int32_t)-o.n : (int32_t)o.n;
}

// ----------------------------------------------------------------------------
// decode

/* The bytes of token t; NULL (and *n = 0) when it prints nothing. */
static const char *piece_of(const struct tok_vocab *v, anvil_token t, bool special, size_t *n) {
    *n = 0;
    if (t < 0 || t >= v->n_vocab) return NULL;
    if (!special && (v->attr[t] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) return NULL;
    *n = v->piece_off[t + 1] - v->piece_off[t];
    return v->piece + v->piece_off[t];
}

int32_t tok_piece(const struct tok_vocab *v, anvil_token t, char *buf, int32_t cap, bool special) {
    size_t n;
    const char *p = piece_of(v, t, special, &n);
    if (!p || n == 0) return 0;
    if (cap < 0 || (size_t)cap < n) return -(int32_t)n;
    memcpy(buf, p, n);
    return (int32_t)n;
}

/* Write whole characters of pend ++ piece to buf (when it fits); returns
 * the byte count (without NUL) and leaves the incomplete tail in
 * tail/n_tail. Invalid bytes become U+FFFD. */
static size_t detok_run(const unsigned char *pend, int n_pend, const char *piece, size_t n_piece,
                        char *buf, size_t cap, unsigned char *tail, int *n_tail) {
    size_t total = (size_t)n_pend + n_piece, i = 0, w = 0;
    *n_tail = 0;
    while (i < total) {
        unsigned char c[4];
        size_t k = total - i < 4 ? total - i : 4;
        for (size_t j = 0; j < k; j++)
            c[j] = i + j < (size_t)n_pend ? pend[i + j]
                                          : (unsigned char)piece[i + j - (size_t)n_pend];
        int r = utf8_next_strict(c, k);
        if (r == 0) { /* incomplete: keep for the next token */
            memcpy(tail, c, k);
            *n_tail = (int)k;
            break;
        }
        const unsigned char *src = c;
        size_t len = (size_t)r;
        if (r < 0) {
            src = (const unsigned char *)"\xef\xbf\xbd";
            len = 3;
            r = -r;
        }
        if (w + len <= cap) memcpy(buf + w, src, len);
        w += len;
        i += (size_t)r;
    }
    return w;
}

int32_t tok_detok_push(const struct tok_vocab *v, struct anvil_detok *d, anvil_token t, char *buf,
                       int32_t cap) {
    size_t n;
    const char *p = piece_of(v, t, false, &n);
    if (d->n_pend < 0 || d->n_pend > 3) d->n_pend = 0;
    unsigned char tail[4];
    int n_tail;
    size_t room = cap > 0 ? (size_t)cap - 1 : 0;
    size_t w = detok_run(d->pend, d->n_pend, p ? p : "", n, buf, room, tail, &n_tail);
    if (w + 1 > (size_t)(cap > 0 ? cap : 0)) {
        if (w + 1 > INT32_MAX) return INT32_MIN;
        return -(int32_t)(w + 1); /* d unchanged: the caller retries with more room */
    }
    buf[w] = '\0';
    memcpy(d->pend, tail, (size_t)n_tail);
    d->n_pend = n_tail;
    return (int32_t)w;
}

int32_t tok_detok_flush(struct anvil_detok *d, char *buf, int32_t cap) {
    if (d->n_pend < 0 || d->n_pend > 3) d->n_pend = 0;
    /* a pending tail is a valid prefix, hence one maximal subpart */
    size_t w = d->n_pend > 0 ? 3 : 0;
    if (cap < 0 || (size_t)cap < w + 1) return -(int32_t)(w + 1);
    if (w) memcpy(buf, "\xef\xbf\xbd", 3);
    buf[w] = '\0';
    d->n_pend = 0;
    return (int32_t)w;
}
