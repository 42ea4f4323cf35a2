/*
 * kv_internal.h - the cache's private state, shared by kv_cache.c (pool,
 * tables, prefix cache) and kv_attn.c (attention driver). Not for use
 * outside src/kv.
 */
#ifndef ANVIL_KV_INTERNAL_H
#define ANVIL_KV_INTERNAL_H

#include "kernels/attn_hp1.h"
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

/* One entry of an attention plan. */
struct kv_attn_ent {
    struct kv_attn_seq s;
    const int32_t *blocks;
    int32_t n_kv;       /* keys seen by the last row: pos + n_tokens */
    int32_t units;      /* work items per kv head */
    int32_t rows;       /* query rows per prefill tile (prefill only) */
    int32_t c_lo;       /* decode: first chunk holding a key of its window */
    int32_t n_chunks;   /* decode: chunks [c_lo, c_lo + n_chunks) */
    int64_t part_off;   /* split decode: first record (in records) */
    uint8_t decode;     /* n_tokens == 1 */
};

struct kv_attn_job {
    const struct kv_cache *kv;
    const struct kn_attn_ops *ops;   /* softmax kernels, or NULL for HP1 */
    const struct kn_hp1_ops *hp1;    /* HP1 kernels, or NULL for softmax */
    struct kn_hp1_params hp;         /* HP1: taps (n_head, n_taps) of the layer */
    enum kn_hp1_pv pv;               /* HP1: PV mode (SPARSE but in benchmarks) */
    size_t rec;                      /* floats of one split-K record */
    const uint8_t *base;
    size_t q_stride, out_stride;
    float scale;
    int32_t window;     /* the cache's sliding window, 0 = none */
    int32_t group;
    int n_threads;
    bool split;         /* decode entries are split into chunk items */
    int32_t n_ent;
    struct kv_attn_ent *ent;  /* (n_seq_max) */
    int32_t *item_off;        /* (n_seq_max + 1): first item of each entry */
    int32_t *th_start;        /* (n_threads_max + 1): first item of each thread */
    int32_t *red;             /* (n_seq_max): decode entries, for the reduction */
    int32_t n_red;            /* decode entries (split only) */
    int32_t *nkv;             /* (n_seq_max): decode contexts, for the policy */
    float *part;              /* split-K records */
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
    size_t part_recs;         /* capacity of job.part, in records */
    struct kv_attn_job job;
};

#endif
