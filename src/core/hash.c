/*
 * hash.c - FNV-1a and the open-addressing id index (contracts in hash.h).
 */
#include <string.h>

#include "core/core.h"
#include "core/hash.h"

uint64_t hash_fnv1a(const void *p, size_t n) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* The slot index for a hash: the low bits, after folding the high half in
 * (FNV-1a's low bits alone mix the last byte weakly). */
static inline uint32_t slot_of(uint64_t h, uint32_t mask) {
    return (uint32_t)(h ^ (h >> 32)) & mask;
}

static anvil_status table_alloc(uint32_t **slot, size_t size) {
    *slot = core_calloc(size, sizeof(uint32_t));
    return *slot ? ANVIL_OK : ANVIL_ERR_NOMEM;
}

anvil_status hash_index_init(struct hash_index *ix, size_t n_hint) {
    memset(ix, 0, sizeof(*ix));
    if (n_hint > (1u << 30)) return ANVIL_ERR_NOMEM;
    size_t size = 16;
    while (size < 2 * n_hint + 2) size *= 2; /* n_hint <= 2^30: no overflow */
    anvil_status st = table_alloc(&ix->slot, size);
    if (st != ANVIL_OK) return st;
    ix->mask = (uint32_t)(size - 1);
    return ANVIL_OK;
}

void hash_index_free(struct hash_index *ix) {
    core_free(ix->slot);
    memset(ix, 0, sizeof(*ix));
}

int64_t hash_index_find(const struct hash_index *ix, const void *key, size_t len,
                        hash_key_fn key_of, const void *ctx) {
    if (!ix->slot) return -1;
    for (uint32_t h = slot_of(hash_fnv1a(key, len), ix->mask);; h = (h + 1) & ix->mask) {
        uint32_t s = ix->slot[h];
        if (!s) return -1;
        const void *k;
        size_t n;
        key_of(ctx, s - 1, &k, &n);
        if (n == len && (len == 0 || memcmp(k, key, len) == 0)) return (int64_t)(s - 1);
    }
}

/* Place id (hash h) in a table known not to hold its key. */
static void place(uint32_t *slot, uint32_t mask, uint64_t h, uint32_t id) {
    uint32_t i = slot_of(h, mask);
    while (slot[i]) i = (i + 1) & mask;
    slot[i] = id + 1;
}

static anvil_status grow(struct hash_index *ix, hash_key_fn key_of, const void *ctx) {
    size_t size = (size_t)ix->mask + 1;
    if (size > (1u << 31)) return ANVIL_ERR_NOMEM;
    uint32_t *ns;
    anvil_status st = table_alloc(&ns, size * 2);
    if (st != ANVIL_OK) return st;
    uint32_t nmask = (uint32_t)(size * 2 - 1);
    for (size_t i = 0; i < size; i++) {
        uint32_t s = ix->slot[i];
        if (!s) continue;
        const void *k;
        size_t n;
        key_of(ctx, s - 1, &k, &n);
        place(ns, nmask, hash_fnv1a(k, n), s - 1);
    }
    core_free(ix->slot);
    ix->slot = ns;
    ix->mask = nmask;
    return ANVIL_OK;
}

anvil_status hash_index_add(struct hash_index *ix, uint32_t id, const void *key, size_t len,
                            hash_key_fn key_of, const void *ctx, int64_t *dup) {
    if (dup) *dup = -1;
    if (!ix->slot || id == UINT32_MAX) return ANVIL_ERR_INVALID;
    uint64_t h = hash_fnv1a(key, len);
    for (uint32_t i = slot_of(h, ix->mask);; i = (i + 1) & ix->mask) {
        uint32_t s = ix->slot[i];
        if (!s) break;
        const void *k;
        size_t n;
        key_of(ctx, s - 1, &k, &n);
        if (n == len && (len == 0 || memcmp(k, key, len) == 0)) {
            if (dup) *dup = (int64_t)(s - 1);
            return ANVIL_OK;
        }
    }
    /* keep the table at most half full, counting the new id */
    if ((uint64_t)(ix->n + 1) * 2 > (uint64_t)ix->mask + 1) {
        anvil_status st = grow(ix, key_of, ctx);
        if (st != ANVIL_OK) return st;
    }
    place(ix->slot, ix->mask, h, id);
    ix->n++;
    return ANVIL_OK;
}
