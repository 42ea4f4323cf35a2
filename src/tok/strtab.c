/*
 * strtab.c - the tokenizer's bottom floor: a string table (symbol id <->
 * text, indexed by core/hash) and the growable scratch buffer. Every other
 * file of src/tok may call these; these call nothing of src/tok.
 *
 * The table is append-only: ids are dense from 0, texts are stored back
 * to back in one blob (32-bit offsets, so at most 4 GiB of text).
 */
#include <string.h>

#include "core/core.h"
#include "tok/tok_int.h"

anvil_status tok_grow(void **p, size_t *cap, size_t n, size_t sz) {
    if (*cap >= n) return ANVIL_OK;
    size_t nc = *cap * 2 > n ? *cap * 2 : n;
    size_t bytes;
    if (!size_mul(nc, sz, &bytes)) return ANVIL_ERR_NOMEM;
    void *q = core_realloc(*p, bytes);
    if (!q) return ANVIL_ERR_NOMEM;
    *p = q;
    *cap = nc;
    return ANVIL_OK;
}

// ----------------------------------------------------------------------------
// string table

static void text_of(const void *ctx, uint32_t id, const void **key, size_t *len) {
    const struct tok_strtab *t = ctx;
    *key = t->blob + t->off[id];
    *len = t->off[id + 1] - t->off[id];
}

anvil_status strtab_init(struct tok_strtab *t, int32_t n_hint, size_t blob_hint) {
    memset(t, 0, sizeof(*t));
    if (n_hint < 0) n_hint = 0;
    anvil_status st = hash_index_init(&t->ix, (size_t)n_hint);
    if (st != ANVIL_OK) return st;
    if ((st = tok_grow((void **)&t->off, &t->off_cap, (size_t)n_hint + 1, sizeof(uint32_t))) !=
            ANVIL_OK ||
        (st = tok_grow((void **)&t->blob, &t->blob_cap, blob_hint ? blob_hint : 1, 1)) !=
            ANVIL_OK) {
        strtab_free(t);
        return st;
    }
    t->off[0] = 0;
    return ANVIL_OK;
}

void strtab_free(struct tok_strtab *t) {
    core_free(t->blob);
    core_free(t->off);
    hash_index_free(&t->ix);
    memset(t, 0, sizeof(*t));
}

int32_t strtab_find(const struct tok_strtab *t, const char *s, size_t n) {
    return (int32_t)hash_index_find(&t->ix, s, n, text_of, t);
}

anvil_status strtab_intern(struct tok_strtab *t, const char *s, size_t n, int32_t *id,
                           bool *added) {
    anvil_status st;
    if (added) *added = false;
    *id = strtab_find(t, s, n);
    if (*id >= 0) return ANVIL_OK;
    if (t->blob_len + n > UINT32_MAX || t->n >= INT32_MAX - 1) return ANVIL_ERR_FORMAT;
    if ((st = tok_grow((void **)&t->blob, &t->blob_cap, t->blob_len + n, 1)) != ANVIL_OK)
        return st;
    if ((st = tok_grow((void **)&t->off, &t->off_cap, (size_t)t->n + 2, sizeof(uint32_t))) !=
        ANVIL_OK)
        return st;
    if (n) memcpy(t->blob + t->blob_len, s, n);
    t->off[t->n + 1] = (uint32_t)(t->blob_len + n);
    /* the text is readable as id t->n before the index sees it */
    if ((st = hash_index_add(&t->ix, (uint32_t)t->n, s, n, text_of, t, NULL)) != ANVIL_OK)
        return st;
    t->blob_len += n;
    *id = t->n++;
    if (added) *added = true;
    return ANVIL_OK;
}

// ----------------------------------------------------------------------------
// u64 -> int32 map (murmur3's finalizer spreads dense ids over the table)

static inline uint32_t mix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (uint32_t)k;
}

static anvil_status map64_alloc(struct tok_map64 *m, size_t size) {
    m->key = core_malloc(sizeof(uint64_t) * size);
    m->val = core_malloc(sizeof(int32_t) * size);
    if (!m->key || !m->val) {
        core_free(m->key);
        core_free(m->val);
        m->key = NULL;
        m->val = NULL;
        return ANVIL_ERR_NOMEM;
    }
    memset(m->key, 0xff, sizeof(uint64_t) * size);
    m->mask = (uint32_t)(size - 1);
    return ANVIL_OK;
}

anvil_status map64_init(struct tok_map64 *m, size_t n_hint) {
    memset(m, 0, sizeof(*m));
    if (n_hint > (1u << 29)) return ANVIL_ERR_NOMEM;
    size_t size = 16;
    while (size < 2 * n_hint + 2) size *= 2;
    return map64_alloc(m, size);
}

void map64_free(struct tok_map64 *m) {
    core_free(m->key);
    core_free(m->val);
    memset(m, 0, sizeof(*m));
}

int32_t map64_get(const struct tok_map64 *m, uint64_t key) {
    if (!m->key) return -1;
    for (uint32_t h = mix64(key) & m->mask;; h = (h + 1) & m->mask) {
        if (m->key[h] == key) return m->val[h];
        if (m->key[h] == UINT64_MAX) return -1;
    }
}

static void map64_place(struct tok_map64 *m, uint64_t key, int32_t val) {
    uint32_t h = mix64(key) & m->mask;
    while (m->key[h] != UINT64_MAX) h = (h + 1) & m->mask;
    m->key[h] = key;
    m->val[h] = val;
}

anvil_status map64_put_first(struct tok_map64 *m, uint64_t key, int32_t val) {
    if (!m->key || key == UINT64_MAX) return ANVIL_ERR_INVALID;
    if (map64_get(m, key) >= 0) return ANVIL_OK;
    if ((uint64_t)(m->n + 1) * 2 > (uint64_t)m->mask + 1) {
        if (m->mask >= (1u << 30)) return ANVIL_ERR_NOMEM;
        struct tok_map64 g;
        memset(&g, 0, sizeof(g));
        anvil_status st = map64_alloc(&g, ((size_t)m->mask + 1) * 2);
        if (st != ANVIL_OK) return st;
        for (uint32_t i = 0; i <= m->mask; i++)
            if (m->key[i] != UINT64_MAX) map64_place(&g, m->key[i], m->val[i]);
        g.n = m->n;
        map64_free(m);
        *m = g;
    }
    map64_place(m, key, val);
    m->n++;
    return ANVIL_OK;
}
