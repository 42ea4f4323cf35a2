/*
 * special.c - cut special tokens (control, unknown, user-defined) out of
 * the text before the tokenizer proper runs.
 *
 * llama.cpp (tokenizer_st_partition) walks the special tokens longest
 * first and, for each, splits every still-raw fragment at each occurrence,
 * left to right. Done literally that is one scan of the text per special
 * token: Gemma 3 has 6,414 of them, so a 1 MB prompt would cost 6 GB of
 * memmem. We get the same result from one pass:
 *
 *   1. find every occurrence of every special text with a trie over the
 *      texts (one walk per text position, as deep as the longest special
 *      text that matches there; a bit set of first bytes skips the rest);
 *   2. sort the occurrences by (priority, position);
 *   3. accept them in that order, each if none of its bytes is taken yet.
 *
 * Step 3 is the literal algorithm: when token k is processed, the raw
 * fragments are exactly the bytes no earlier token took, and the scan of
 * a fragment from left to right takes each occurrence that does not
 * overlap the previous one of the same token. LSTRIP/RSTRIP tokens mark
 * the ASCII whitespace they eat as taken (llama.cpp drops it from the
 * neighbouring fragment), so later tokens cannot match there either.
 *
 * Cost: O(n * d + k log k) for n bytes, d the depth walked per position
 * (bounded by the longest special text) and k occurrences.
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

struct special_hit {
    int32_t rank; /* priority of the token */
    int32_t tok;
    uint32_t pos;
};

/* the bytes llama.cpp's isspace() strips (C locale) */
static bool ascii_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// ----------------------------------------------------------------------------
// index

void special_free(struct tok_specials *sp) {
    map64_free(&sp->edge);
    core_free(sp->node_tok);
    core_free(sp->rank);
    memset(sp, 0, sizeof(*sp));
}

struct by_len {
    uint32_t len;
    int32_t id;
};

static int cmp_priority(const void *a, const void *b) {
    const struct by_len *x = a, *y = b;
    if (x->len != y->len) return x->len > y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

anvil_status special_init(struct tok_specials *sp, const struct tok_strtab *syms,
                          const uint16_t *attr, int32_t n_vocab) {
    anvil_status st;
    memset(sp, 0, sizeof(*sp));
    int32_t n = 0;
    size_t total = 0;
    for (int32_t i = 0; i < n_vocab; i++)
        if (attr[i] & TOK_ATTR_SPECIAL) {
            size_t len;
            strtab_text(syms, i, &len);
            total += len;
            n++;
        }
    sp->rank = core_malloc(sizeof(int32_t) * (size_t)(n_vocab > 0 ? n_vocab : 1));
    struct by_len *order = core_malloc(sizeof(struct by_len) * (size_t)(n ? n : 1));
    sp->node_tok = core_malloc(sizeof(int32_t) * (total + 1));
    if (!sp->rank || !order || !sp->node_tok) {
        st = ANVIL_ERR_NOMEM;
        goto fail;
    }
    if ((st = map64_init(&sp->edge, total)) != ANVIL_OK) goto fail;
    n = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        sp->rank[i] = -1;
        if (attr[i] & TOK_ATTR_SPECIAL) {
            size_t len;
            strtab_text(syms, i, &len);
            order[n++] = (struct by_len){(uint32_t)len, i};
        }
    }
    /* llama.cpp std::sort()s by length alone, which leaves the order of
     * equal lengths unspecified; ours is by id */
    qsort(order, (size_t)n, sizeof(*order), cmp_priority);
    for (int32_t k = 0; k < n; k++) sp->rank[order[k].id] = k;
    sp->n = n;

    /* the trie: node 0 is the root */
    sp->n_nodes = 1;
    sp->node_tok[0] = -1;
    for (int32_t k = 0; k < n; k++) {
        size_t len;
        const char *t = strtab_text(syms, order[k].id, &len);
        if (len == 0) continue;
        sp->first[(uint8_t)t[0] >> 3] |= (uint8_t)(1u << ((uint8_t)t[0] & 7));
        int32_t node = 0;
        for (size_t j = 0; j < len; j++) {
            uint64_t key = (uint64_t)(uint32_t)node << 8 | (uint8_t)t[j];
            int32_t child = map64_get(&sp->edge, key);
            if (child < 0) {
                child = sp->n_nodes++;
                sp->node_tok[child] = -1;
                if ((st = map64_put_first(&sp->edge, key, child)) != ANVIL_OK) goto fail;
            }
            node = child;
        }
        sp->node_tok[node] = order[k].id; /* texts are distinct: one token per node */
    }
    core_free(order);
    return ANVIL_OK;
fail:
    core_free(order);
    special_free(sp);
    return st;
}

// ----------------------------------------------------------------------------
// partition

static int cmp_hit(const void *a, const void *b) {
    const struct special_hit *x = a, *y = b;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* Does [a, b) meet a protected span? */
static bool is_protected(const struct tok_span *p, size_t n_p, size_t a, size_t b) {
    /* spans are sorted: binary search for the first that ends after a */
    size_t lo = 0, hi = n_p;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if ((size_t)p[mid].start + p[mid].len <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n_p && p[lo].start < b;
}

static anvil_status frag_push(struct tok_frag **f, size_t *cap, size_t *n, struct tok_frag x) {
    anvil_status st = tok_grow((void **)f, cap, *n + 1, sizeof(**f));
    if (st != ANVIL_OK) return st;
    (*f)[(*n)++] = x;
    return ANVIL_OK;
}

enum { FREE = -1, STRIPPED = -2, TAKEN = -3 };

anvil_status special_partition(const struct tok_specials *sp, const uint16_t *attr,
                               const struct tok_strtab *syms, const char *text, size_t n,
                               bool parse_special, const struct tok_span *protect,
                               size_t n_protect, struct tok_work *w, struct tok_frag **frags,
                               size_t *frags_cap, size_t *n_frags) {
    anvil_status st;
    *n_frags = 0;
    if (n == 0) return ANVIL_OK;
    if (n > UINT32_MAX) return ANVIL_ERR_INVALID;

    /* 1. every occurrence of every special text that may take part */
    size_t n_hits = 0;
    if (sp->n > 0) {
        for (size_t i = 0; i < n; i++) {
            uint8_t c0 = (uint8_t)text[i];
            if (!(sp->first[c0 >> 3] >> (c0 & 7) & 1)) continue;
            int32_t node = 0;
            for (size_t j = i; j < n; j++) {
                node = map64_get(&sp->edge, (uint64_t)(uint32_t)node << 8 | (uint8_t)text[j]);
                if (node < 0) break;
                int32_t t = sp->node_tok[node];
                if (t < 0) continue;
                if (attr[t] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)) {
                    /* user-defined tokens always take part (llama.cpp) */
                    if (!parse_special || is_protected(protect, n_protect, i, j + 1)) continue;
                }
                if ((st = tok_grow((void **)&w->hits, &w->hits_cap, n_hits + 1,
                                   sizeof(struct special_hit))) != ANVIL_OK)
                    return st;
                w->hits[n_hits++] = (struct special_hit){sp->rank[t], t, (uint32_t)i};
            }
        }
    }
    if (n_hits == 0) return frag_push(frags, frags_cap, n_frags, (struct tok_frag){-1, 0, (uint32_t)n});

    /* 2. in priority order, then left to right */
    qsort(w->hits, n_hits, sizeof(struct special_hit), cmp_hit);

    /* 3. accept what does not overlap anything taken before */
    if ((st = tok_grow((void **)&w->owner, &w->owner_cap, n, sizeof(int32_t))) != ANVIL_OK)
        return st;
    int32_t *owner = w->owner;
    for (size_t i = 0; i < n; i++) owner[i] = FREE;
    for (size_t h = 0; h < n_hits; h++) {
        uint32_t pos = w->hits[h].pos;
        int32_t t = w->hits[h].tok;
        size_t len;
        strtab_text(syms, t, &len);
        bool free_run = true;
        for (size_t j = pos; j < pos + len; j++)
            if (owner[j] != FREE) {
                free_run = false;
                break;
            }
        if (!free_run) continue;
        owner[pos] = t;
        for (size_t j = pos + 1; j < pos + len; j++) owner[j] = TAKEN;
        if (attr[t] & TOK_ATTR_LSTRIP)
            for (size_t j = pos; j > 0 && owner[j - 1] == FREE && ascii_space(text[j - 1]); j--)
                owner[j - 1] = STRIPPED;
        if (attr[t] & TOK_ATTR_RSTRIP)
            for (size_t j = pos + len; j < n && owner[j] == FREE && ascii_space(text[j]); j++)
                owner[j] = STRIPPED;
    }

    /* fragments: tokens, and maximal runs of free bytes */
    for (size_t i = 0; i < n;) {
        if (owner[i] >= 0) {
            if ((st = frag_push(frags, frags_cap, n_frags, (struct tok_frag){owner[i], 0, 0})) !=
                ANVIL_OK)
                return st;
            i++;
        } else if (owner[i] == FREE) {
            size_t j = i;
            while (j < n && owner[j] == FREE) j++;
            if ((st = frag_push(frags, frags_cap, n_frags,
                                (struct tok_frag){-1, (uint32_t)i, (uint32_t)(j - i)})) != ANVIL_OK)
                return st;
            i = j;
        } else {
            i++;
        }
    }
    return ANVIL_OK;
}
