/*
 * spm.c - SentencePiece-style merging ("llama" vocabularies: Llama 2,
 * Mistral v1, Phi-3, Gemma 3), as llama.cpp's llm_tokenizer_spm_session
 * does it.
 *
 * The fragment (spaces already shown as U+2581) starts as one symbol per
 * character, cut by the lead byte alone (utf8_lead_len; a truncated or
 * invalid sequence is one symbol of what is left). Every adjacent pair
 * whose concatenation is a token is a candidate, scored by that token's
 * score; the best candidate (ties: the leftmost) is merged, and the pairs
 * around the merged symbol become candidates. A final symbol that is a
 * token is emitted; any other (a character the vocabulary lacks) is
 * emitted byte by byte as byte tokens <0xNN> (byte fallback).
 *
 * Candidates live in a binary heap and stale ones (a side merged away or
 * grown since) are skipped when popped: O(n log n) for n characters with
 * no pre-splitting, so a 1 MB fragment costs about as much per byte as a
 * short one (the naive rescan for the best pair is O(n^2)).
 *
 * One deliberate difference from llama.cpp: a pair whose concatenation
 * is a control token is not a candidate (SentencePiece never produces a
 * control token from text), so typed text cannot turn into <s> or
 * <start_of_turn> by merging. No vocabulary we test has such a merge
 * chain, so the outputs agree.
 */
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

struct spm_sym {
    int32_t prev, next;  /* neighbours, -1 at the ends */
    uint32_t start, len; /* bytes of the text; len 0 = merged away */
};

struct spm_bigram {
    float score;
    int32_t left, right;
    uint32_t size;  /* bytes of left + right when pushed: detects staleness */
    int32_t tok;
};

// ----------------------------------------------------------------------------
// heap of candidates: highest score on top, ties to the leftmost

static inline bool better(const struct spm_bigram *a, const struct spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

TOK_BIGRAM_HEAP(struct spm_bigram, better)

/* The token a text is, or -1 (merge-only symbols of the table are not
 * tokens). */
static int32_t token_of(const struct tok_spm *s, const char *p, size_t n) {
    int32_t id = strtab_find(s->syms, p, n);
    return id >= 0 && id < s->n_vocab ? id : -1;
}

static void try_pair(const struct tok_spm *s, const char *text, const struct spm_sym *sym,
                     int32_t l, int32_t r, struct spm_bigram *heap, size_t *n_heap) {
    if (l < 0 || r < 0) return;
    /* symbols are contiguous: the pair's text is one slice */
    uint32_t size = sym[l].len + sym[r].len;
    int32_t t = token_of(s, text + sym[l].start, size);
    if (t < 0 || (s->attr[t] & TOK_ATTR_CONTROL)) return;
    heap_push(heap, n_heap, (struct spm_bigram){s->score[t], l, r, size, t});
}

anvil_status spm_encode(const struct tok_spm *s, const char *text, size_t n, struct tok_work *w,
                        struct tok_out *o) {
    anvil_status st;
    if (n == 0) return ANVIL_OK;
    if (n > INT32_MAX / 4) return ANVIL_ERR_INVALID;
    if ((st = tok_grow((void **)&w->ssym, &w->ssym_cap, n, sizeof(struct spm_sym))) != ANVIL_OK)
        return st;
    /* n - 1 initial pairs, at most 2 more per merge */
    if ((st = tok_grow((void **)&w->sheap, &w->sheap_cap, 3 * n, sizeof(struct spm_bigram))) !=
        ANVIL_OK)
        return st;
    struct spm_sym *sym = w->ssym;
    struct spm_bigram *heap = w->sheap;
    size_t n_heap = 0;

    int32_t n_sym = 0;
    for (size_t i = 0; i < n;) {
        size_t len = (size_t)utf8_lead_len((unsigned char)text[i]);
        if (len > n - i) len = n - i;
        sym[n_sym] = (struct spm_sym){n_sym - 1, -1, (uint32_t)i, (uint32_t)len};
        if (n_sym > 0) sym[n_sym - 1].next = n_sym;
        n_sym++;
        i += len;
    }
    for (int32_t i = 0; i + 1 < n_sym; i++) try_pair(s, text, sym, i, i + 1, heap, &n_heap);

    while (n_heap > 0) {
        struct spm_bigram g = heap_pop(heap, &n_heap);
        struct spm_sym *l = &sym[g.left], *r = &sym[g.right];
        /* stale: a side is gone or has grown. Sizes only grow, and a live
         * right side is always the left side's neighbour, so equal sizes
         * mean the pair is unchanged (llama.cpp's test) */
        if (l->len == 0 || r->len == 0 || l->len + r->len != g.size) continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = g.left;
        try_pair(s, text, sym, l->prev, g.left, heap, &n_heap);
        try_pair(s, text, sym, g.left, l->next, heap, &n_heap);
    }

    for (int32_t i = 0; i >= 0; i = sym[i].next) {
        int32_t t = token_of(s, text + sym[i].start, sym[i].len);
        if (t >= 0) {
            tok_out_push(o, t);
            continue;
        }
        /* byte fallback; llama.cpp throws when a byte has no token at all,
         * we emit the unknown token (or nothing, without one) */
        for (uint32_t k = 0; k < sym[i].len; k++) {
            int32_t b = s->byte_tok[(uint8_t)text[sym[i].start + k]];
            if (b < 0) b = s->unk;
            if (b >= 0) tok_out_push(o, b);
        }
    }
    return ANVIL_OK;
}
