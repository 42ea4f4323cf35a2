/*
 * wpm.c - WordPiece (tokenizer.ggml.model = "bert"): BERT's uncased
 * tokenizer, as llama.cpp's llm_tokenizer_wpm runs it on a GGUF vocabulary.
 *
 * Per raw fragment (special tokens are cut out before, special.c):
 *   1. decode UTF-8 leniently (utf8_decode_lenient: a bad byte is U+FFFD);
 *   2. with strip_accents, map every code point to the first code point of
 *      its canonical decomposition (one code point in, one out: this is
 *      llama.cpp's "NFD", so U+00E9 becomes 'e' and a Hangul syllable its
 *      leading jamo), and drop marks (\p{M});
 *   3. whitespace ends a word; NUL, U+FFFD and control characters (\p{C})
 *      vanish; punctuation (\p{P}), ASCII symbols and CJK ideographs are
 *      words of their own; everything else (lower-cased when asked) extends
 *      the current word;
 *   4. each word, prefixed with U+2581 (the converter writes word-initial
 *      pieces as "\u2581piece" and continuation pieces "##piece" as
 *      "piece"), is cut greedily: at each byte offset the longest token
 *      text that matches there (bytes, at most the longest token's length);
 *      when some offset matches nothing the whole word becomes [UNK].
 *
 * [CLS] before and [SEP] after the text are added by tokenizer.c.
 * Not done: clean_text's other rules and the HF tokenizer's handling of
 * never_split tokens, which llama.cpp does not do either. The character
 * tables are Unicode 15 (unicode_tab.c); llama.cpp's may be a later
 * version, which only matters for characters assigned since.
 */
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

// ----------------------------------------------------------------------------
// character data

static int uclass(uint32_t cp) {
    int lo = 0, hi = tok_n_uclass - 1; /* last range with start <= cp */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (tok_uclass[mid].start <= cp)
            lo = mid;
        else
            hi = mid - 1;
    }
    return tok_uclass[lo].cls;
}

static uint32_t pair_lookup(const uint32_t (*tab)[2], int n, uint32_t cp) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (tab[mid][0] == cp) return tab[mid][1];
        if (tab[mid][0] < cp)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return cp;
}

static uint32_t to_lower(uint32_t cp) {
    if (cp < 0x80) return cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
    return pair_lookup(tok_ulower, tok_ulower_n, cp);
}

static uint32_t nfd_first(uint32_t cp) {
    if (cp < 0xc0) return cp;
    if (cp >= 0xac00 && cp <= 0xd7a3) return 0x1100 + (cp - 0xac00) / 588; /* Unicode 3.12 */
    return pair_lookup(tok_unfd, tok_unfd_n, cp);
}

/* llama.cpp's whitespace set (Unicode's White_Space property). */
static bool is_space(uint32_t cp) {
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0d)) return true;
    if (cp < 0x85) return false;
    return cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
           cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

/* BERT's CJK ideograph blocks, with the HF tokenizer's upper bound of
 * Extension E's block as llama.cpp copies it (0x2B920, not 0x2B820). */
static bool is_cjk(uint32_t cp) {
    return (cp >= 0x4e00 && cp <= 0x9fff) || (cp >= 0x3400 && cp <= 0x4dbf) ||
           (cp >= 0x20000 && cp <= 0x2a6df) || (cp >= 0x2a700 && cp <= 0x2b73f) ||
           (cp >= 0x2b740 && cp <= 0x2b81f) || (cp >= 0x2b920 && cp <= 0x2ceaf) ||
           (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0x2f800 && cp <= 0x2fa1f);
}

// ----------------------------------------------------------------------------
// words

static const char SPACE_MARK[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 */

/* The tokens of one word (word[0..n) begins with U+2581). */
static void encode_word(const struct tok_wpm *p, const char *word, size_t n, struct tok_out *o) {
    int64_t start = o->n;
    size_t i = 0;
    while (i < n) {
        size_t j = n - i < (size_t)p->max_len ? n : i + (size_t)p->max_len;
        int32_t id = -1;
        for (; j > i; j--) {
            id = strtab_find(p->syms, word + i, j - i);
            if (id >= 0 && id < p->n_vocab) break;
            id = -1;
        }
        if (id < 0) { /* some offset matches nothing: the word is [UNK] */
            o->n = start;
            break;
        }
        tok_out_push(o, id);
        i = j;
    }
    if (o->n == start && p->unk >= 0) tok_out_push(o, p->unk);
}

anvil_status wpm_encode(const struct tok_wpm *p, const char *text, size_t n, struct tok_work *w,
                        struct tok_out *o) {
    anvil_status st;
    size_t need;
    /* a word is U+2581 + at most 4 bytes per input byte (U+FFFD is dropped,
     * so a byte never grows past 3; 4 keeps the bound obvious) */
    if (!size_mul(n, 4, &need) || need > SIZE_MAX - 8) return ANVIL_ERR_NOMEM;
    if ((st = tok_grow((void **)&w->norm, &w->norm_cap, need + 8, 1)) != ANVIL_OK) return st;
    char *word = w->norm;
    size_t m = 3; /* word[0..3) is U+2581, then the word's bytes */
    memcpy(word, SPACE_MARK, 3);
    size_t i = 0;
    while (i < n) {
        uint32_t cp = utf8_decode_lenient((const unsigned char *)text, n, &i);
        if (p->strip_accents) cp = nfd_first(cp);
        if (is_space(cp)) {
            if (m > 3) encode_word(p, word, m, o);
            m = 3;
            continue;
        }
        if (cp == 0 || cp == 0xfffd) continue;
        int cls = uclass(cp);
        if (cls == TOK_UCLS_CONTROL) continue;
        if (p->strip_accents && cls == TOK_UCLS_MARK) continue;
        char u[4];
        int k = utf8_encode(p->lowercase ? to_lower(cp) : cp, u);
        if (cls == TOK_UCLS_PUNCT || (cp < 0x7f && cls == TOK_UCLS_SYMBOL) || is_cjk(cp)) {
            if (m > 3) encode_word(p, word, m, o);
            memcpy(word + 3, u, (size_t)k);
            encode_word(p, word, 3 + (size_t)k, o);
            m = 3;
            continue;
        }
        memcpy(word + m, u, (size_t)k);
        m += (size_t)k;
    }
    if (m > 3) encode_word(p, word, m, o);
    return ANVIL_OK;
}
