/*
 * kv_internal.h - the cache's private state (kv_cache.c: pool, tables,
 * prefix cache). Not for use outside src/kv.
 */
#ifndef ANVIL_KV_INTERNAL_H
#define ANVIL_KV_INTERNAL_H

#include "kv/kv_cache.h"

enum { BLK_FREE = 0, BLK_CACHED = 1, BLK_USED = 2 };

struct kv_block {
    int32_t ref;        /* block-table entries pointing here */
    int32_t prev, next; /* free list (next only) or LRU list */
    int32_t hnext;      /* hash-bucket chain */
    int32_t parent;     /* hashed: block before it in the prefix (-1: first) */
    uint32_t parent_gen;/* hashed: parent's gen when this block was hashed */
    uint32_t gen;       /* bumped each time the block is hashed: its identity */
    uint8_t state;      /* BLK_* */
    uint8_t hashed;     /* in the hash table (content = parent chain + tokens) */
    uint64_t key;       /* hash of (parent, parent_gen, tokens) */
};

struct kv_seq {
    int32_t len;        /* committed positions */
    int32_t n_blocks;   /* table entries (>= ceil(len / block_size)) */
    int32_t nohash_pos; /* token ids at positions >= this are unknown */
    int32_t mark;       /* scratch for kv_reserve's duplicate check */
    int32_t first;      /* first table entry still held (windowed caches:
                           the ones before it are -1) */
};

struct kv_cache {
    struct kv_params p;
    struct kn_kv_layout lay;
    int32_t bs;               /* block_size */
    int32_t n_blocks;
    int32_t max_blocks_seq;   /* ceil(n_ctx / bs) */
    size_t block_bytes;       /* one block, all layers */
    size_t layer_bytes;       /* one layer, all blocks */
    uint8_t *pool;            /* (n_layer, n_blocks, n_head_kv, tile) */
    void *mem;                /* the one allocation */
    size_t mem_bytes;
    struct kv_block *blk;     /* (n_blocks) */
    int32_t *tok;             /* (n_blocks, bs): token ids held by each block */
    int32_t *tables;          /* (n_seq_max, max_blocks_seq) */
    struct kv_seq *seqs;      /* (n_seq_max) */
    int32_t *htab;            /* (hmask + 1) bucket heads */
    uint32_t hmask;
    int32_t free_head, n_free;
    int32_t lru_head, lru_tail, n_cached;
    int32_t n_used;
    int64_t n_cow, n_evicted, n_matched;
    int32_t n_handed;         /* blocks [0, n_handed) have been handed out */
    int32_t n_faulted;        /* blocks [0, n_faulted) are resident (kv_prefault) */
    int32_t pf_to, pf_layer;  /* kv_prefault in progress: [n_faulted, pf_to) up to layer pf_layer */
    void *ext;                /* kv_set_ext: the attention plan (src/attn) */
    void (*ext_free)(void *); /* frees ext in kv_free */
};

#endif
