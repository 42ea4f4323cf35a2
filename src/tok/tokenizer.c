/*
 * tokenizer.c - text to tokens and tokens to bytes.
 *
 * tok_encode follows llama.cpp's llama_vocab::impl::tokenize:
 *   1. special tokens are cut out of the raw bytes first (special.c);
 *   2. each raw fragment is encoded by the vocabulary's kind:
 *      BPE: decoded (utf8_decode_lenient: bad bytes become U+FFFD; raw BPE
 *        also shows spaces as U+2581), split by the pre-tokenizer and
 *        merged word by word (bpe.c);
 *      SPM: a space goes in front when the fragment follows a special
 *        token or starts the text (add_space_prefix), spaces become
 *        U+2581, and the whole fragment is merged by score (spm.c);
 *      WPM: normalized, split into words, each matched greedily (wpm.c);
 *      UGM: normalized by the charsmap, segmented by Viterbi (ugm.c).
 * With add_special, BOS goes first (and EOS last) when the vocabulary asks
 * for it (tokenizer.ggml.add_bos_token / add_eos_token); WordPiece always
 * puts [CLS] (its BOS) first and [SEP] last, as llama.cpp does.
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
    core_free(w->norm);
    core_free(w->rx);
    core_free(w->spans);
    core_free(w->spans2);
    core_free(w->sym);
    core_free(w->heap);
    core_free(w->ssym);
    core_free(w->sheap);
    core_free(w->cps);
    core_free(w->best);
    core_free(w->enc);
    core_free(w->hits);
    core_free(w->owner);
    if (w->md) pcre2_match_data_free(w->md);
    memset(w, 0, sizeof(*w));
}

// ----------------------------------------------------------------------------
// encode

static const char SPACE_MARK[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 */

/* BPE: tokens of one raw fragment (no special tokens in it). */
static anvil_status encode_bpe(const struct tok_vocab *v, const char *text, size_t n,
                               struct tok_work *w, struct tok_out *o) {
    anvil_status st;
    size_t need;
    if (!size_mul(n, 3, &need)) return ANVIL_ERR_NOMEM;
    /* a bad byte becomes U+FFFD and a space U+2581 (3 bytes each); nothing
     * else grows */
    if ((st = tok_grow((void **)&w->norm, &w->norm_cap, need, 1)) != ANVIL_OK) return st;
    if ((st = tok_grow((void **)&w->rx, &w->rx_cap, need, 1)) != ANVIL_OK) return st;

    /* norm: the text as llama.cpp re-encodes its code points (these bytes
     * are what BPE sees). rx: the same, with surrogates (which llama.cpp
     * passes through, and PCRE2 refuses) shown as U+FFF0, an unassigned
     * code point: llama.cpp's patterns see a surrogate as a character of
     * no category, and both take 3 bytes, so offsets agree. */
    size_t m = 0, i = 0;
    while (i < n) {
        uint32_t cp = utf8_decode_lenient((const unsigned char *)text, n, &i);
        int k;
        if (cp == ' ' && v->escape_spaces) {
            memcpy(w->norm + m, SPACE_MARK, 3);
            k = 3;
        } else {
            k = utf8_encode(cp, w->norm + m);
        }
        if (cp >= 0xd800 && cp <= 0xdfff)
            memcpy(w->rx + m, "\xef\xbf\xb0", 3);
        else
            memcpy(w->rx + m, w->norm + m, (size_t)k);
        m += (size_t)k;
    }

    size_t n_spans;
    if ((st = pretok_split(&v->pre, w->rx, m, w, &n_spans)) != ANVIL_OK) return st;
    for (size_t s = 0; s < n_spans; s++) {
        st = bpe_encode_word(&v->bpe, w->norm + w->spans[s].start, w->spans[s].len, w, o);
        if (st != ANVIL_OK) return st;
    }
    return ANVIL_OK;
}

/* SPM: tokens of one raw fragment; prefix puts a space in front. */
static anvil_status encode_spm(const struct tok_vocab *v, const char *text, size_t n, bool prefix,
                               struct tok_work *w, struct tok_out *o) {
    anvil_status st;
    size_t need;
    if (!size_mul(n + 1, 3, &need)) return ANVIL_ERR_NOMEM;
    if ((st = tok_grow((void **)&w->norm, &w->norm_cap, need, 1)) != ANVIL_OK) return st;
    size_t m = 0;
    if (prefix) {
        memcpy(w->norm, SPACE_MARK, 3);
        m = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (text[i] == ' ') {
            memcpy(w->norm + m, SPACE_MARK, 3);
            m += 3;
        } else {
            w->norm[m++] = text[i];
        }
    }
    return spm_encode(&v->spm, w->norm, m, w, o);
}

static int32_t encode(const struct tok_vocab *v, const char *text, size_t len,
                      const struct tok_span *protect, size_t n_protect, anvil_token *out,
                      int32_t cap, bool add_special, bool parse_special) {
    if (!v || (!text && len) || cap < 0 || (!out && cap > 0)) return INT32_MIN;
    if (len > UINT32_MAX / 4) return INT32_MIN; /* offsets are 32-bit */
    anvil_status st = ANVIL_OK;
    struct tok_out o = {out, cap, 0};
    struct tok_work w;
    struct tok_frag *frags = NULL;
    size_t frags_cap = 0, n_frags = 0;
    memset(&w, 0, sizeof(w));

    if (add_special && v->add_bos) tok_out_push(&o, v->bos);
    if (len > 0) {
        TRY(special_partition(&v->specials, v->attr, &v->syms, text, len, parse_special, protect,
                              n_protect, &w, &frags, &frags_cap, &n_frags));
        /* SPM: the first fragment counts as following a special token */
        bool prev_special = true;
        for (size_t i = 0; i < n_frags; i++) {
            const struct tok_frag *f = &frags[i];
            if (f->tok >= 0) {
                tok_out_push(&o, f->tok);
                prev_special = true;
            } else if (v->kind == TOK_KIND_SPM) {
                TRY(encode_spm(v, text + f->start, f->len, v->space_prefix && prev_special, &w,
                               &o));
                prev_special = false;
            } else if (v->kind == TOK_KIND_WPM) {
                TRY(wpm_encode(&v->wpm, text + f->start, f->len, &w, &o));
            } else if (v->kind == TOK_KIND_UGM) {
                TRY(ugm_encode(&v->ugm, text + f->start, f->len, &w, &o));
            } else {
                TRY(encode_bpe(v, text + f->start, f->len, &w, &o));
            }
        }
    }
    if (add_special && v->add_eos) tok_out_push(&o, v->eos);
    if (add_special && v->add_sep) tok_out_push(&o, v->sep);
fail:
    tok_work_free(&w);
    core_free(frags);
    if (st != ANVIL_OK || o.n > INT32_MAX) return INT32_MIN;
    return o.n > cap ? (int32_t)-o.n : (int32_t)o.n;
}

int32_t tok_encode(const struct tok_vocab *v, const char *text, size_t len, anvil_token *out,
                   int32_t cap, bool add_special, bool parse_special) {
    return encode(v, text, len, NULL, 0, out, cap, add_special, parse_special);
}

int32_t tok_encode_protected(const struct tok_vocab *v, const char *text, size_t len,
                             const struct tok_span *protect, size_t n_protect,
                             anvil_token *out, int32_t cap, bool add_special) {
    if (n_protect && !protect) return INT32_MIN;
    return encode(v, text, len, protect, n_protect, out, cap, add_special, true);
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
