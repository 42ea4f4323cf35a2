/*
 * bpe.c - BPE on one pre-tokenized word: merges by rank.
 *
 * A word starts as one symbol per byte (byte-level BPE: the symbol whose
 * text is the GPT-2 alphabet character for that byte) or one per UTF-8
 * character (raw BPE, gemma4). Adjacent pairs that have a merge go into a
 * min-heap keyed by (merge rank, position of the left symbol); the best
 * pair is merged and the pairs around it are pushed again. Heap entries
 * that went stale (one side merged away or grown since) are skipped when
 * popped. O(n log n) per word, so a 10k-byte word without spaces is fine.
 *
 * This is the order llama.cpp's llm_tokenizer_bpe_session uses (lowest
 * rank first, ties to the leftmost pair), and its fallback for a final
 * symbol that is not a token: each byte of the symbol's text is emitted as
 * the token spelling that byte ("b" for byte-level BPE, "<0xBB>" for raw
 * BPE), or dropped when there is none.
 *
 * Symbols are ids in the string table: token texts first, then texts that
 * occur only in merges (so merge chains through non-tokens still work).
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
// merge table: (left symbol, right symbol) -> rank; the rank indexes merge_res

bool bpe_merge_find(const struct tok_bpe *b, int32_t l, int32_t r, int32_t *rank,
                    int32_t *res) {
    if (l < 0 || r < 0) return false;
    int32_t k = map64_get(&b->merges, (uint64_t)(uint32_t)l << 32 | (uint32_t)r);
    if (k < 0) return false;
    *rank = k;
    *res = b->merge_res[k];
    return true;
}

void bpe_free(struct tok_bpe *b) {
    map64_free(&b->merges);
    core_free(b->merge_res);
    memset(b, 0, sizeof(*b));
}

anvil_status bpe_init(struct tok_bpe *b, struct tok_strtab *syms, int32_t n_vocab, bool raw,
                      const struct gguf_str *merges, int32_t n_merges, char *err, size_t err_cap) {
    anvil_status st = ANVIL_OK;
    memset(b, 0, sizeof(*b));
    b->syms = syms;
    b->n_vocab = n_vocab;
    b->raw = raw;
    if (n_merges < 0 || (n_merges > 0 && !merges)) return ANVIL_ERR_INVALID;
    if ((st = map64_init(&b->merges, (size_t)n_merges)) != ANVIL_OK) return st;
    b->merge_res = core_malloc(sizeof(int32_t) * (size_t)(n_merges ? n_merges : 1));
    if (!b->merge_res) return ANVIL_ERR_NOMEM;
    b->n_merges = n_merges;

    char *cat = NULL;
    size_t cat_cap = 0;
    for (int32_t i = 0; i < n_merges; i++) {
        const char *p = merges[i].ptr;
        size_t n = merges[i].len;
        b->merge_res[i] = -1;
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
        b->merge_res[i] = res;
        /* the first of duplicate merges wins (llama.cpp: bpe_ranks.emplace) */
        if ((st = map64_put_first(&b->merges, (uint64_t)(uint32_t)l << 32 | (uint32_t)r, i)) !=
            ANVIL_OK)
            goto done;
    }
done:
    core_free(cat);
    if (st == ANVIL_ERR_FORMAT) errmsg_set(err, err_cap, "tokenizer merges too large");
    return st;
}

// ----------------------------------------------------------------------------
// heap of candidate merges: smallest (rank, left) on top

static inline bool bigram_less(const struct bpe_bigram *a, const struct bpe_bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

TOK_BIGRAM_HEAP(struct bpe_bigram, bigram_less)

static void try_pair(const struct tok_bpe *b, const struct bpe_sym *sym, int32_t l, int32_t r,
                     struct bpe_bigram *heap, size_t *n_heap) {
    if (l < 0 || r < 0) return;
    int32_t rank, res;
    if (!bpe_merge_find(b, sym[l].id, sym[r].id, &rank, &res)) return;
    heap_push(heap, n_heap, (struct bpe_bigram){rank, l, r, sym[l].id, sym[r].id, res});
}

// ----------------------------------------------------------------------------
// output

/* Emit the token for a final symbol, or llama.cpp's byte fallback over
 * the bytes of its text. */
static void emit_symbol(const struct tok_bpe *b, const char *word, const struct bpe_sym *s,
                        struct tok_out *o) {
    if (s->id >= 0 && s->id < b->n_vocab) {
        tok_out_push(o, s->id);
        return;
    }
    for (uint32_t i = s->start; i < s->start + s->len; i++) {
        uint8_t c = (uint8_t)word[i];
        if (b->raw) {
            if (b->fallback[c] >= 0) tok_out_push(o, b->fallback[c]);
            continue;
        }
        for (int k = 0; k < b->byte_enc_len[c]; k++) {
            int32_t t = b->fallback[(uint8_t)b->byte_enc[c][k]];
            if (t >= 0) tok_out_push(o, t);
        }
    }
}

/* The token of a whole word, or -1 (ignore_merges / newline words). */
static int32_t whole_word(const struct tok_bpe *b, const char *word, size_t n, struct tok_work *w,
                          anvil_status *st) {
    *st = ANVIL_OK;
    const char *text = word;
    size_t m = n;
    if (!b->raw) {
        /* the word's text in the byte alphabet */
        if ((*st = tok_grow((void **)&w->enc, &w->enc_cap, 2 * n, 1)) != ANVIL_OK) return -1;
        m = 0;
        for (size_t i = 0; i < n; i++) {
            uint8_t c = (uint8_t)word[i];
            memcpy(w->enc + m, b->byte_enc[c], b->byte_enc_len[c]);
            m += b->byte_enc_len[c];
        }
        text = w->enc;
    }
    int32_t id = strtab_find(b->syms, text, m);
    return id >= 0 && id < b->n_vocab ? id : -1;
}

static bool all_newlines(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != '\n') return false;
    return true;
}

anvil_status bpe_encode_word(const struct tok_bpe *b, const char *word, size_t n,
                             struct tok_work *w, struct tok_out *o) {
    anvil_status st;
    if (n == 0) return ANVIL_OK;
    if (n > INT32_MAX / 4) return ANVIL_ERR_INVALID;

    /* llama3: a word that is a token as a whole is not merged (llama.cpp
     * ignore_merges; Hugging Face tokenizers' BPE ignore_merges); gemma4:
     * the same for a word of newlines */
    if (b->ignore_merges || (b->newline_words && all_newlines(word, n))) {
        int32_t id = whole_word(b, word, n, w, &st);
        if (st != ANVIL_OK) return st;
        if (id >= 0) {
            tok_out_push(o, id);
            return ANVIL_OK;
        }
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

    int32_t n_sym = 0;
    for (size_t i = 0; i < n;) {
        size_t len = 1;
        int32_t id;
        if (b->raw) {
            /* a character, cut as llama.cpp does (the text is re-encoded
             * UTF-8, so the lead byte tells the truth) */
            len = (size_t)utf8_lead_len((unsigned char)word[i]);
            if (len > n - i) len = n - i;
            id = strtab_find(b->syms, word + i, len);
        } else {
            id = b->byte_sym[(uint8_t)word[i]];
        }
        sym[n_sym] = (struct bpe_sym){id, n_sym - 1, -1, (uint32_t)i, (uint32_t)len};
        if (n_sym > 0) sym[n_sym - 1].next = n_sym;
        n_sym++;
        i += len;
    }
    for (int32_t i = 0; i + 1 < n_sym; i++) try_pair(b, sym, i, i + 1, heap, &n_heap);

    while (n_heap > 0) {
        struct bpe_bigram g = heap_pop(heap, &n_heap);
        struct bpe_sym *l = &sym[g.left], *r = &sym[g.right];
        /* stale: a side was merged away, or grew (its id changed) since */
        if (l->len == 0 || r->len == 0 || l->next != g.right || l->id != g.left_id ||
            r->id != g.right_id)
            continue;
        l->id = g.res;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = g.left;
        try_pair(b, sym, l->prev, g.left, heap, &n_heap);
        try_pair(b, sym, g.left, l->next, heap, &n_heap);
    }

    for (int32_t i = 0; i >= 0; i = sym[i].next) emit_symbol(b, word, &sym[i], o);
    return ANVIL_OK;
}
