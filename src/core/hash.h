/*
 * hash.h - FNV-1a and an open-addressing index from byte-string keys to
 * entry ids: the one hash table of the library (gguf keys and tensor
 * names, tokenizer texts).
 *
 * The index stores ids only; the caller owns the entries and lends a
 * function that reads an entry's key, so one index type serves any array
 * of records. Linear probing over a power-of-two table kept at most half
 * full (grown on insert), so a lookup touches a couple of slots on
 * average whatever the keys; a hostile set of keys still costs one hash
 * and short probes each, as FNV-1a spreads the bytes of every key.
 *
 * Not here: deletion (no caller needs it), ownership of keys, thread
 * safety for writers (readers of a finished index may share it).
 */
#ifndef ANVIL_HASH_H
#define ANVIL_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "anvil.h"

/* 64-bit FNV-1a of n bytes. */
uint64_t hash_fnv1a(const void *p, size_t n);

/* Reads the key of entry `id` of the caller's array (ctx). */
typedef void (*hash_key_fn)(const void *ctx, uint32_t id, const void **key, size_t *len);

struct hash_index {
    uint32_t *slot; /* (mask + 1): 0 = empty, else id + 1 */
    uint32_t mask;  /* table size - 1, a power of two minus one */
    uint32_t n;     /* ids added */
};

/* An empty index with room for n_hint ids before it grows. ANVIL_ERR_NOMEM
 * when the allocation fails or n_hint is over 2^30. */
anvil_status hash_index_init(struct hash_index *ix, size_t n_hint);
/* Frees the table; the struct is zeroed (freeing twice is harmless). */
void hash_index_free(struct hash_index *ix);

/* Id of the entry whose key equals key[0 .. len), or -1. */
int64_t hash_index_find(const struct hash_index *ix, const void *key, size_t len,
                        hash_key_fn key_of, const void *ctx);

/* Add entry `id` whose key is key[0 .. len). When an entry with an equal
 * key is already there nothing is added and *dup (if not NULL) gets its
 * id; otherwise *dup is -1. Grows the table as needed (ANVIL_ERR_NOMEM,
 * with the index unchanged, when that fails). */
anvil_status hash_index_add(struct hash_index *ix, uint32_t id, const void *key, size_t len,
                            hash_key_fn key_of, const void *ctx, int64_t *dup);

#endif /* ANVIL_HASH_H */
