/*
 * bpe.c - byte-level BPE on one pre-tokenized word.
 *
 * A word starts as one symbol per byte (the symbol whose text is the GPT-2
 * alphabet character for that byte). Adjacent pairs that have a merge go
 * into a min-heap keyed by (merge rank, position of the left symbol); the
 * best pair is merged and the pairs around it are pushed again. Heap
 * entries that went stale (one side merged away or grown since) are
 * skipped when popped. O(n log n) per word, so a 10k-byte word without
 * spaces is fine.
 *
 * This is the order llama.cpp's llm_tokenizer_bpe_session uses (lowest
 * rank first, ties to the leftmost pair), and its fallback for a final
 * symbol that is not a token: each byte of the symbol's (encoded) text that
 * is itself a one-byte token is emitted, the others are dropped.
 *
 * Symbols are ids in vocab->syms: token texts first, then texts that occur
 * only in merges (so merge chains through non-tokens still work).
 */
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

struct bpe_sym {
    int32_t id;          /* symbol id, or -1 for a byte whose character is unknown */
    int32_t prev, next;  /* neighbours in the word, -1 at the ends */
    uint32_t start, len; /* raw bytes of the word it covers; len 0 = merged away */
};

struct bpe_bigram {
    int32_t rank;
    int32_t left, right;     /* symbol positions */
    int32_t left_id, right_id; /* their ids when pushed, to detect staleness */
    int32_t res;             /* id of the merged symbol */
};

// ----------------------------------------------------------------------------
// merge table lookup

bool bpe_merge_find(const struct tok_merges *m, int32_t l, int32_t r, int32_t *rank,
                    int32_t *res) {
    if (!m->key || l < 0 || r < 0) return false;
    uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
    for (uint32_t h = tok_hash64(key) & m->mask;; h = (h + 1) & m->mask) {
        if (m->key[h] == UINT64_MAX) return false;
        if (m->key[h] == key) {
            *rank = m->rank[h];
            *res = m->res[h];
            return true;
        }
    }
}

// ----------------------------------------------------------------------------
// merge table: (left symbol, right symbol) -> (rank, merged symbol), open
// addressing on the pair (ids are dense, so the murmur finalizer spreads them)

void bpe_merges_free(struct tok_merges *m) {
    anvil_free(m->key);
    anvil_free(m->rank);
    anvil_free(m->res);
    memset(m, 0, sizeof(*m));
}

anvil_status bpe_merges_build(struct tok_merges *m, struct tok_strtab *syms,
                              const struct gguf_str *merges, int32_t n_merges, char *err,
                              size_t err_cap) {
    anvil_status st = ANVIL_OK;
    memset(m, 0, sizeof(*m));
    uint32_t slots = 16;
    while (slots < (uint32_t)n_merges * 2u + 2u && slots < (1u << 30)) slots <<= 1;
    m->key = anvil_malloc(sizeof(uint64_t) * slots);
    m->rank = anvil_malloc(sizeof(int32_t) * slots);
    m->res = anvil_malloc(sizeof(int32_t) * slots);
    if (!m->key || !m->rank || !m->res) return ANVIL_ERR_NOMEM;
    memset(m->key, 0xff, sizeof(uint64_t) * slots);
    m->mask = slots - 1;

    char *cat = NULL;
    size_t cat_cap = 0;
    for (int32_t i = 0; i < n_merges; i++) {
        const char *p = merges[i].ptr;
        size_t n = merges[i].len;
        /* llama.cpp splits at the first space after position 0 (a merge is
         * "left right"); without one the merge can never apply */
        const char *sp = n > 1 ? memchr(p + 1, ' ', n - 1) : NULL;
        if (!sp) continue;
        size_t nl = (size_t)(sp - p), nr = n - nl - 1;
        if (nr == 0) continue;
        int32_t l, r, res;
        if ((st = strtab_intern(syms, p, nl, &l, NULL)) != ANVIL_OK) goto done;
        if ((st = strtab_intern(syms, sp + 1, nr, &r, NULL)) != ANVIL_OK) goto done;
        if ((st = tok_grow((void **)&cat, &cat_cap, nl + nr, 1)) != ANVIL_OK) goto done;
        memcpy(cat, p, nl);
        memcpy(cat + nl, sp + 1, nr);
        if ((st = strtab_intern(syms, cat, nl + nr, &res, NULL)) != ANVIL_OK) goto done;
        uint64_t key = (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
        int32_t rk, rs;
        if (bpe_merge_find(m, l, r, &rk, &rs)) continue; /* first one wins */
        uint32_t h = tok_hash64(key) & m->mask;
        while (m->key[h] != UINT64_MAX) h = (h + 1) & m->mask;
        m->key[h] = key;
        m->rank[h] = i;
        m->res[h] = res;
    }
done:
    anvil_free(cat);
    if (st == ANVIL_ERR_FORMAT) errmsg_set(err, err_cap, "tokenizer merges too large");
    return st;
}

// ----------------------------------------------------------------------------
// heap of candidate merges: smallest (rank, left) on top

static inline bool bigram_less(const struct bpe_bigram *a, const struct bpe_bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void heap_push(struct bpe_bigram *h, size_t *n, struct bpe_bigram b) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!bigram_less(&b, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = b;
}

static struct bpe_bigram heap_pop(struct bpe_bigram *h, size_t *n) {
    struct bpe_bigram top = h[0];
    struct bpe_bigram last = h[--(*n)];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && bigram_less(&h[c + 1], &h[c])) c++;
        if (!bigram_less(&h[c], &last)) break;
        h[i] = h[c];
        i = c;
    }
    if (m > 0) h[i] = last;
    return top;
}

static void try_pair(const struct tok_vocab *v, const struct bpe_sym *sym, int32_t l, int32_t r,
                     struct bpe_bigram *heap, size_t *n_heap) {
    if (l < 0 || r < 0) return;
    int32_t rank, res;
    if (!bpe_merge_find(&v->merges, sym[l].id, sym[r].id, &rank, &res)) return;
    heap_push(heap, n_heap,
              (struct bpe_bigram){rank, l, r, sym[l].id, sym[r].id, res});
}

// ----------------------------------------------------------------------------
// output

/* Emit the token for a final symbol, or llama.cpp's byte fallback. */
static void emit_symbol(const struct tok_vocab *v, const char *word, const struct bpe_sym *s,
                        struct tok_out *o) {
    if (s->id >= 0 && s->id < v->n_vocab) {
        tok_out_push(o, s->id);
        return;
    }
    for (uint32_t i = s->start; i < s->start + s->len; i++) {
        uint8_t b = (uint8_t)word[i];
        for (int k = 0; k < v->byte_enc_len[b]; k++) {
            int32_t t = v->byte_tok1[(uint8_t)v->byte_enc[b][k]];
            if (t >= 0) tok_out_push(o, t);
        }
    }
}

anvil_status bpe_encode_word(const struct tok_vocab *v, const char *word, size_t n,
                             struct tok_work *w, struct tok_out *o) {
    anvil_status st;
    if (n == 0) return ANVIL_OK;
    if (n > INT32_MAX / 4) return ANVIL_ERR_INVALID;

    if (v->pre.ignore_merges) {
        /* llama3: a word that is a token as a whole is not merged (llama.cpp
         * ignore_merges; Hugging Face tokenizers' BPE ignore_merges) */
        size_t m = 0;
        if ((st = tok_grow((void **)&w->enc, &w->enc_cap, 2 * n, 1)) != ANVIL_OK) return st;
        for (size_t i = 0; i < n; i++) {
            uint8_t b = (uint8_t)word[i];
            memcpy(w->enc + m, v->byte_enc[b], v->byte_enc_len[b]);
            m += v->byte_enc_len[b];
        }
        int32_t id = strtab_find(&v->syms, w->enc, m);
        if (id >= 0 && id < v->n_vocab) {
            tok_out_push(o, id);
            return ANVIL_OK;
        }
    }

    if (n == 1) {
        struct bpe_sym s = {v->byte_sym[(uint8_t)word[0]], -1, -1, 0, 1};
        emit_symbol(v, word, &s, o);
        return ANVIL_OK;
    }

    if ((st = tok_grow((void **)&w->sym, &w->sym_cap, n, sizeof(struct bpe_sym))) != ANVIL_OK)
        return st;
    /* n - 1 initial pairs, and at most 2 more per merge (n - 1 merges) */
    if ((st = tok_grow((void **)&w->heap, &w->heap_cap, 3 * n, sizeof(struct bpe_bigram))) !=
        ANVIL_OK)
        return st;
    struct bpe_sym *sym = w->sym;
    struct bpe_bigram *heap = w->heap;
    size_t n_heap = 0;

    for (size_t i = 0; i < n; i++) {
        sym[i] = (struct bpe_sym){v->byte_sym[(uint8_t)word[i]], (int32_t)i - 1,
                                  i + 1 < n ? (int32_t)i + 1 : -1, (uint32_t)i, 1};
    }
    for (size_t i = 0; i + 1 < n; i++) try_pair(v, sym, (int32_t)i, (int32_t)i + 1, heap, &n_heap);

    while (n_heap > 0) {
        struct bpe_bigram b = heap_pop(heap, &n_heap);
        struct bpe_sym *l = &sym[b.left], *r = &sym[b.right];
        /* stale: a side was merged away, or grew (its id changed) since */
        if (l->len == 0 || r->len == 0 || l->next != b.right || l->id != b.left_id ||
            r->id != b.right_id)
            continue;
        l->id = b.res;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        try_pair(v, sym, l->prev, b.left, heap, &n_heap);
        try_pair(v, sym, b.left, l->next, heap, &n_heap);
    }

    for (int32_t i = 0; i >= 0; i = sym[i].next) emit_symbol(v, word, &sym[i], o);
    return ANVIL_OK;
}
