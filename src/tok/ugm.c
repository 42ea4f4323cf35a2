/*
 * ugm.c - Unigram (tokenizer.ggml.model = "t5"): SentencePiece's unigram
 * model as llama.cpp's llm_tokenizer_ugm runs it (T5, XLM-RoBERTa:
 * BGE-M3, multilingual E5, bge-reranker, nomic-embed-text-v2).
 *
 * Per raw fragment (special tokens are cut out before, special.c):
 *   1. normalize: at each input offset, the longest user-defined token
 *      that starts there is kept as it is; else the longest input prefix
 *      the precompiled charsmap knows is replaced by its string; else one
 *      UTF-8 character is copied (lead byte length, continuation bytes
 *      present), or an invalid byte becomes U+FFFD;
 *   2. spaces of that result become U+2581: with remove_extra_whitespaces
 *      every run of non-spaces gets one U+2581 in front and spaces vanish;
 *      otherwise each space is one, and add_space_prefix puts one before
 *      the first non-space;
 *   3. Viterbi: walking the text one character at a time, every token
 *      (normal, user-defined at score 0, unused) that starts there offers
 *      best(start) + score to best(end); a character no single token spells
 *      offers best(start) + unk_score (lowest normal score - 10) as [UNK].
 *      Sums are doubles, as SentencePiece's. The best path, read back from
 *      the end, gives the tokens; adjacent [UNK]s become one.
 *
 * The charsmap (tokenizer.ggml.precompiled_charsmap) is SentencePiece's:
 * a u32 byte count, then that many bytes of XOR-compressed compact double
 * array (Kanda 2018) entries of 32 bits (BASE in bits 10-30, shifted left
 * 8 more when bit 9 is set; LEAF bit 8; LCHECK bits 0-7 plus bit 31; a
 * leaf's BASE points at the entry holding the replacement's offset), then
 * the NUL-terminated replacement strings. It is untrusted: every index is
 * checked, and a walk that would leave the arrays ends the match (llama.cpp
 * throws there); a replacement offset out of range or without its NUL is no
 * match.
 */
#include <float.h>
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

struct ugm_best {
    int32_t tok;   /* last token of the best path to here */
    uint32_t from; /* where that token starts */
    double score;  /* the path's score */
};

static const char SPACE_MARK[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 */

// ----------------------------------------------------------------------------
// setup

/* A trie over the texts of the tokens that want(attr) picks. */
static anvil_status trie_build(struct tok_map64 *edge, int32_t **node_tok, int32_t *n_nodes,
                               const struct tok_strtab *syms, int32_t n_vocab,
                               const uint16_t *attr, uint16_t want) {
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (attr[i] & want) {
            size_t len;
            strtab_text(syms, i, &len);
            total += len;
        }
    if (total >= INT32_MAX) return ANVIL_ERR_NOMEM;
    *node_tok = core_malloc(sizeof(int32_t) * (total + 1));
    if (!*node_tok) return ANVIL_ERR_NOMEM;
    anvil_status st = map64_init(edge, total / 2 + 16);
    if (st != ANVIL_OK) return st;
    *n_nodes = 1;
    (*node_tok)[0] = -1;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (!(attr[i] & want)) continue;
        size_t len;
        const char *t = strtab_text(syms, i, &len);
        int32_t node = 0;
        for (size_t j = 0; j < len; j++) {
            uint64_t key = (uint64_t)(uint32_t)node << 8 | (uint8_t)t[j];
            int32_t child = map64_get(edge, key);
            if (child < 0) {
                child = (*n_nodes)++;
                (*node_tok)[child] = -1;
                if ((st = map64_put_first(edge, key, child)) != ANVIL_OK) return st;
            }
            node = child;
        }
        if (node > 0) (*node_tok)[node] = i; /* texts are distinct */
    }
    return ANVIL_OK;
}

void ugm_free(struct tok_ugm *u) {
    map64_free(&u->edge);
    map64_free(&u->uedge);
    core_free(u->node_tok);
    core_free(u->unode_tok);
    core_free(u->xcda);
    core_free(u->repl);
    memset(u, 0, sizeof(*u));
}

anvil_status ugm_init(struct tok_ugm *u, const struct tok_strtab *syms, int32_t n_vocab,
                      const float *score, const uint16_t *attr, int32_t unk,
                      const uint8_t *charsmap, size_t charsmap_len, char *err, size_t err_cap) {
    anvil_status st;
    bool sp = u->space_prefix, rx = u->remove_extra_ws;
    memset(u, 0, sizeof(*u));
    u->space_prefix = sp;
    u->remove_extra_ws = rx;
    u->score = score;
    u->attr = attr;
    u->unk = unk;
    double lo = FLT_MAX;
    for (int32_t i = 0; i < n_vocab; i++)
        if ((attr[i] & TOK_ATTR_NORMAL) && score[i] < lo) lo = score[i];
    u->unk_score = lo - 10.0;
    if (charsmap && charsmap_len > 0) {
        uint32_t blob;
        if (charsmap_len < 4) goto bad;
        memcpy(&blob, charsmap, 4); /* little-endian, as GGUF */
        if ((uint64_t)blob + 4 >= charsmap_len) goto bad;
        u->n_xcda = blob / 4;
        u->n_repl = charsmap_len - 4 - blob;
        u->xcda = core_malloc(sizeof(uint32_t) * (u->n_xcda ? u->n_xcda : 1));
        u->repl = core_malloc(u->n_repl);
        if (!u->xcda || !u->repl) {
            st = ANVIL_ERR_NOMEM;
            goto fail;
        }
        memcpy(u->xcda, charsmap + 4, 4 * u->n_xcda);
        memcpy(u->repl, charsmap + 4 + blob, u->n_repl);
    }
    if ((st = trie_build(&u->edge, &u->node_tok, &u->n_nodes, syms, n_vocab, attr,
                         TOK_ATTR_NORMAL | TOK_ATTR_USER | TOK_ATTR_UNUSED)) != ANVIL_OK)
        goto fail;
    if ((st = trie_build(&u->uedge, &u->unode_tok, &u->n_unodes, syms, n_vocab, attr,
                         TOK_ATTR_USER)) != ANVIL_OK)
        goto fail;
    return ANVIL_OK;
bad:
    errmsg_set(err, err_cap, "tokenizer.ggml.precompiled_charsmap: its %llu bytes do not hold "
               "the array its header announces", (unsigned long long)charsmap_len);
    st = ANVIL_ERR_FORMAT;
fail:
    ugm_free(u);
    return st;
}

// ----------------------------------------------------------------------------
// normalization

/* Length of the longest text of trie (edge, node_tok) at s[0..n), or 0. */
static size_t trie_longest(const struct tok_map64 *edge, const int32_t *node_tok, const char *s,
                           size_t n) {
    int32_t node = 0;
    size_t best = 0;
    for (size_t j = 0; j < n; j++) {
        node = map64_get(edge, (uint64_t)(uint32_t)node << 8 | (uint8_t)s[j]);
        if (node < 0) break;
        if (node_tok[node] >= 0) best = j + 1;
    }
    return best;
}

/* The charsmap's longest match at s[0..n): its length (0: none) and the
 * replacement (*r, *r_len). */
static size_t charsmap_match(const struct tok_ugm *u, const char *s, size_t n, const char **r,
                             size_t *r_len) {
    if (u->n_xcda == 0) return 0;
    const uint32_t *a = u->xcda;
    size_t best = 0, off = 0;
#define XBASE(x) (((x) >> 10) << (((x) & (1u << 9)) >> 6))
    size_t node = XBASE(a[0]);
    for (size_t j = 0; j < n; j++) {
        unsigned char c = (unsigned char)s[j];
        if (c == 0) break;
        node ^= c;
        if (node >= u->n_xcda) break;
        uint32_t e = a[node];
        if ((e & ((1u << 31) | 0xffu)) != c) break; /* LCHECK: not a child */
        bool leaf = (e >> 8) & 1;
        node ^= XBASE(e);
        if (leaf) {
            if (node >= u->n_xcda) break;
            best = j + 1;
            off = a[node] & ((1u << 31) - 1);
        }
    }
#undef XBASE
    if (best == 0 || off >= u->n_repl) return 0;
    const char *p = u->repl + off;
    const char *z = memchr(p, 0, u->n_repl - off);
    if (!z) return 0;
    *r = p;
    *r_len = (size_t)(z - p);
    return best;
}

/* Length of the UTF-8 character at s[0..n) as llama.cpp's
 * unicode_cpt_from_utf8 accepts it (lead byte gives the length, the
 * continuation bytes must be there; no check of the value), or 0. */
static size_t utf8_char_len(const unsigned char *s, size_t n) {
    size_t k = s[0] < 0x80 ? 1 : s[0] < 0xc0 ? 0 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3
               : s[0] < 0xf8 ? 4 : 0;
    if (k == 0 || k > n) return 0;
    for (size_t j = 1; j < k; j++)
        if ((s[j] & 0xc0) != 0x80) return 0;
    return k;
}

static anvil_status put(struct tok_work *w, size_t *m, const char *s, size_t k) {
    anvil_status st = tok_grow((void **)&w->norm, &w->norm_cap, *m + k + 1, 1);
    if (st != ANVIL_OK) return st;
    memcpy(w->norm + *m, s, k);
    *m += k;
    return ANVIL_OK;
}

/* The normalized fragment in w->norm[0 .. *out_n). */
static anvil_status normalize(const struct tok_ugm *u, const char *text, size_t n,
                              struct tok_work *w, size_t *out_n) {
    anvil_status st;
    size_t m = 0, i = 0;
    bool in_word = false, prefixed = false;
    if ((st = tok_grow((void **)&w->norm, &w->norm_cap, n + 16, 1)) != ANVIL_OK) return st;
    while (i < n) {
        const char *r = text + i;
        size_t r_len, used;
        r_len = used = trie_longest(&u->uedge, u->unode_tok, text + i, n - i);
        if (used == 0) used = charsmap_match(u, text + i, n - i, &r, &r_len);
        if (used == 0) {
            r = text + i;
            r_len = used = utf8_char_len((const unsigned char *)text + i, n - i);
            if (used == 0) {
                r = "\xef\xbf\xbd";
                r_len = 3;
                used = 1;
            }
        }
        for (size_t j = 0; j < r_len; j++) {
            if (r[j] != ' ') {
                if (!in_word) {
                    in_word = true;
                    if ((u->space_prefix && !prefixed) || u->remove_extra_ws) {
                        if ((st = put(w, &m, SPACE_MARK, 3)) != ANVIL_OK) return st;
                        prefixed = true;
                    }
                }
                if ((st = put(w, &m, r + j, 1)) != ANVIL_OK) return st;
            } else {
                in_word = false;
                if (!u->remove_extra_ws && (st = put(w, &m, SPACE_MARK, 3)) != ANVIL_OK)
                    return st;
            }
        }
        i += used;
    }
    *out_n = m;
    return ANVIL_OK;
}

// ----------------------------------------------------------------------------
// Viterbi

anvil_status ugm_encode(const struct tok_ugm *u, const char *text, size_t n, struct tok_work *w,
                        struct tok_out *o) {
    anvil_status st;
    size_t len;
    if ((st = normalize(u, text, n, w, &len)) != ANVIL_OK) return st;
    if (len == 0) return ANVIL_OK;
    if (len >= UINT32_MAX) return ANVIL_ERR_NOMEM;
    if ((st = tok_grow((void **)&w->best, &w->best_cap, len + 1, sizeof(struct ugm_best))) !=
        ANVIL_OK)
        return st;
    const char *s = w->norm;
    struct ugm_best *b = w->best;
    for (size_t k = 0; k <= len; k++) b[k] = (struct ugm_best){u->unk, 0, -DBL_MAX};
    b[0].score = 0;
    for (size_t i = 0; i < len;) {
        size_t ch = (size_t)utf8_lead_len((unsigned char)s[i]);
        if (ch > len - i) ch = len - i;
        bool whole = false; /* a token spells exactly this character */
        double base = b[i].score;
        int32_t node = 0;
        for (size_t j = i; j < len; j++) {
            node = map64_get(&u->edge, (uint64_t)(uint32_t)node << 8 | (uint8_t)s[j]);
            if (node < 0) break;
            int32_t t = u->node_tok[node];
            if (t < 0) continue;
            if (j + 1 - i == ch) whole = true;
            double sc = base + ((u->attr[t] & TOK_ATTR_USER) ? 0.0 : (double)u->score[t]);
            if (sc > b[j + 1].score) b[j + 1] = (struct ugm_best){t, (uint32_t)i, sc};
        }
        if (!whole) {
            double sc = base + u->unk_score;
            if (sc > b[i + ch].score) b[i + ch] = (struct ugm_best){u->unk, (uint32_t)i, sc};
        }
        i += ch;
    }
    /* read the path back from the end (into w->cps), then emit it forwards */
    if ((st = tok_grow((void **)&w->cps, &w->cps_cap, len, sizeof(uint32_t))) != ANVIL_OK)
        return st;
    size_t n_path = 0;
    bool prev_unk = false;
    for (size_t k = len;;) {
        const struct ugm_best *e = &b[k];
        bool is_unk = e->tok == u->unk;
        if (!(prev_unk && is_unk) && e->tok >= 0) w->cps[n_path++] = (uint32_t)e->tok;
        if (e->from == 0) break;
        prev_unk = is_unk;
        k = e->from;
    }
    while (n_path > 0) tok_out_push(o, (anvil_token)w->cps[--n_path]);
    return ANVIL_OK;
}
