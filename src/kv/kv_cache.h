/*
 * kv_cache.h - paged KV cache: one pool of fixed-size blocks, per-sequence
 * block tables and prefix sharing. The attention over it is src/attn.
 *
 * Knows nothing about models: it stores per layer, per token, n_head_kv
 * vectors of head_dim for K and for V, in F16 (default) or Q8_0.
 *
 * Memory. Everything is allocated once in kv_init (one allocation: the
 * metadata, then the block pool, aligned to 4 KiB); no call allocates
 * afterwards. A block covers block_size consecutive positions of one
 * sequence for every layer and kv head. Pool layout:
 *     pool  (n_layer, n_blocks, n_head_kv, tile)
 * with the tile of kv_layout.h: for F16 and block_size 16, head_dim 64,
 * K^T (64, 16) f16 then V (16, 64) f16 = 4 KiB. An attention task (one
 * sequence, one kv head, one layer) reads one contiguous tile per block.
 * KV memory = n_blocks * kv_block_bytes(), plus metadata (~110 bytes per
 * block, 4 bytes per table entry); kv_get_stats() reports the total. The
 * attention plan's split-K scratch is allocated by src/attn beside it.
 *
 * Block size. 16 tokens by default: a tile is then 4 KiB (F16, head_dim
 * 64), a whole page, long enough for the hardware prefetcher, while the
 * per-sequence waste (half a block on average) and the prefix-sharing
 * granularity stay small. 32 is allowed (and any multiple of 16); the
 * attention numerics do not depend on it (steps of 16 keys, chunks of 256
 * at fixed positions), and `anvil bench --attention` shows no speed
 * difference between 16 and 32 above the noise (commit dc72612), so the
 * finer block wins.
 *
 * Block states (checked by kv_check):
 *   FREE    ref 0, not hashed, on the free list;
 *   CACHED  ref 0, hashed (a full prefix block kept for reuse), on the LRU
 *           list; taken back by a prefix match or evicted (oldest first)
 *           when the free list is empty;
 *   USED    ref > 0 = the number of block-table entries pointing at it.
 *
 * Prefix caching. When a block of a sequence becomes full (kv_seq_commit
 * with token ids) and the block before it is hashed, it is hashed under
 * (parent block, parent generation, its token ids) and entered in a hash
 * table; an identical block already there replaces it (dedup). A new
 * sequence takes the longest chain of matching blocks (kv_seq_match).
 * Matches compare tokens and the parent's identity exactly, so there are
 * no false hits from hash collisions. Blocks shared by several tables are
 * read-only: a sequence that must write into a shared block (a partial
 * last block after kv_seq_fork, or a truncated shared block) gets a
 * private copy first (copy-on-write, in kv_seq_reserve).
 *
 * Use by the forward pass, per step:
 *   kv_reserve(...)          room for the step's new tokens, all or nothing
 *                            (ANVIL_ERR_KV_FULL leaves everything as it was)
 *   per layer: kv_write(...) K, V of the new tokens (after RoPE)
 *              kv_attn_prepare(...) + kv_attn_run (src/attn/attn_plan.h)
 *   kv_seq_commit(...)       the tokens are now part of the sequence
 * On an error between reserve and commit, kv_seq_truncate(kv, seq,
 * kv_seq_len(kv, seq)) gives the reserved blocks back.
 *
 * Threading: one thread owns the cache (the engine's). kv_write and the
 * attention work functions only read metadata and may run on pool threads.
 */
#ifndef ANVIL_KV_CACHE_H
#define ANVIL_KV_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anvil.h"
#include "kernels/ops.h"
#include "kv/kv_layout.h"

struct pool;
struct kv_cache;

struct kv_params {
    int32_t n_layer;
    int32_t n_head;       /* query heads (a multiple of n_head_kv) */
    int32_t n_head_kv;
    int32_t head_dim;     /* a multiple of 32, <= 256 */
    int type;             /* ANVIL_TYPE_F16 or ANVIL_TYPE_Q8_0; 0 (F32) = F16 */
    int32_t block_size;   /* tokens per block; 0 = 16; a multiple of 16 */
    int32_t n_blocks;     /* pool size; 0 = as many as fit in mem_bytes */
    size_t mem_bytes;     /* pool budget when n_blocks == 0 */
    int32_t n_seq_max;    /* sequence ids are 0 .. n_seq_max-1 */
    int32_t n_ctx;        /* max positions per sequence */
    int32_t n_threads;    /* max threads the attention plan (src/attn) is
                           * sized for; 0 = 1 */
    bool prefix_cache;    /* hash full blocks so that prefixes are shared */
    kn_f16_row_fn f16_row; /* F16 cache: the conversion kv_write uses (the
                           * kernel family's; NULL = the reference's). Every
                           * variant gives the same bits. */
    int32_t window;       /* 0, or the sliding window of every layer of this
                           * cache: a sequence keeps only the blocks holding
                           * its last window + KV_WINDOW_SLACK positions */
};

/* Positions a windowed cache keeps beyond the window, so that a sequence
 * can be truncated back this far (speculative decoding rolls back its
 * rejected draft tokens) without losing keys a query still needs. */
#define KV_WINDOW_SLACK 64

/* Create a cache. ANVIL_ERR_INVALID for bad geometry (message in err),
 * ANVIL_ERR_NOMEM. *out is set only on success. */
anvil_status kv_init(const struct kv_params *p, struct kv_cache **out, char *err, size_t err_cap);
void kv_free(struct kv_cache *kv); /* NULL is a no-op */

/* Bytes of one block (all layers, all kv heads, K and V). */
size_t kv_block_bytes(const struct kv_params *p);

/* ---------------------------------------------------------------------- */
/* sequences */

int32_t kv_seq_len(const struct kv_cache *kv, int32_t seq);
/* Blocks kv_seq_reserve(seq, n) would take from the pool (new blocks plus
 * a copy-on-write copy); -1 when seq/n are invalid. */
int32_t kv_seq_blocks_needed(const struct kv_cache *kv, int32_t seq, int32_t n);
/* Blocks that can be handed out now: free + cached (evictable). */
int32_t kv_n_available(const struct kv_cache *kv);

/* Make positions [len, len + n) of seq writable: allocate blocks and copy a
 * shared block that would be written. All or nothing: ANVIL_ERR_KV_FULL
 * when the pool cannot supply the blocks (nothing changes), and
 * ANVIL_ERR_INVALID when len + n > n_ctx or seq is out of range. */
anvil_status kv_seq_reserve(struct kv_cache *kv, int32_t seq, int32_t n);
/* kv_seq_reserve for several distinct sequences, all or nothing. */
anvil_status kv_reserve(struct kv_cache *kv, int32_t n_seqs, const int32_t *seq,
                        const int32_t *n);

/* Advance seq by n reserved positions whose K/V are written. tokens (n ids,
 * may be NULL = unknown) feed the prefix cache: blocks that become full are
 * hashed and shared. ANVIL_ERR_INVALID when n exceeds the reserved room. */
anvil_status kv_seq_commit(struct kv_cache *kv, int32_t seq, int32_t n, const anvil_token *tokens);

/* Drop positions >= len (0 <= len <= current length) and every reserved
 * block past them; blocks whose count drops to 0 become free or cached.
 * A windowed cache cannot go back to a length whose window it no longer
 * holds: ANVIL_ERR_UNSUPPORTED then (len 0 always works). */
anvil_status kv_seq_truncate(struct kv_cache *kv, int32_t seq, int32_t len);
void kv_seq_free(struct kv_cache *kv, int32_t seq); /* truncate to 0 */

/* For an empty seq: take the longest run of cached full blocks matching
 * tokens[0, n) (whole blocks only). Returns the matched length (a multiple
 * of block_size, <= n); the sequence then has that length. Pass n one less
 * than the prompt if the last prompt token must be computed for logits.
 * A windowed cache keeps every matched block until kv_seq_trim. */
int32_t kv_seq_match(struct kv_cache *kv, int32_t seq, const anvil_token *tokens, int32_t n);

/* Windowed cache: give back the blocks of seq that hold only positions
 * below len - window - KV_WINDOW_SLACK (their table entries become -1).
 * kv_seq_commit does it; call it after kv_seq_match and a truncate. No-op
 * without a window. */
void kv_seq_trim(struct kv_cache *kv, int32_t seq);
/* Blocks a sequence holds now (windowed caches: fewer than its length). */
int32_t kv_seq_n_held(const struct kv_cache *kv, int32_t seq);
/* Blocks a sequence of length n holds at most when it grows by at most
 * `step` positions at a time (a windowed cache trims after each step, so
 * the window plus one step bounds it). */
int32_t kv_blocks_for_len(const struct kv_cache *kv, int64_t n, int32_t step);

/* Make empty seq dst share all of src's positions (blocks referenced, not
 * copied; a partial last block is copied on the first write). */
anvil_status kv_seq_fork(struct kv_cache *kv, int32_t dst, int32_t src);

/* ---------------------------------------------------------------------- */
/* data */

/* Write K and V of positions [pos, pos + n) of seq at layer. Row t of k is
 * (n_head_kv, head_dim) floats at k + t*k_stride (after RoPE); same for v.
 * The positions must be reserved and their blocks private (kv_seq_reserve
 * guarantees both). F16 rounds to nearest even; Q8_0 quantizes each 32
 * values like ggml's quantize_row_q8_0. */
void kv_write(struct kv_cache *kv, int32_t layer, int32_t seq, int32_t pos, int32_t n,
              const float *k, size_t k_stride, const float *v, size_t v_stride);

/* Fill the whole pool (every layer, block and head) with valid
 * pseudo-random K/V: F16 values of magnitude 1/8..1, or Q8_0 quants with
 * scales near 1/127. For benchmarks: touches every page up front without
 * writing token by token. Leaves the metadata alone. */
void kv_fill_random(struct kv_cache *kv, uint64_t seed);

/* Make the pool's memory ahead of use resident, so that the first request
 * to reach it does not pay the page faults (a fresh huge page per layer
 * per ~100 blocks; on some VMs a first touch costs several ms per 2 MiB).
 * Fresh blocks are handed out in index order, so the blocks just past the
 * highest one handed out are the next to be used: this faults in blocks
 * up to `ahead` past it, one layer per call, without changing a byte
 * (MADV_POPULATE_WRITE; where the kernel lacks it, blocks never handed out
 * are zeroed, which they already read as). Call it from the thread that
 * owns the cache, when idle, until it returns 0 (nothing left to do). */
int32_t kv_prefault(struct kv_cache *kv, int32_t ahead);
/* Blocks made resident ahead of use so far (kv_prefault's watermark). */
int32_t kv_n_prefaulted(const struct kv_cache *kv);

/* Kernel-level view, for tests and benchmarks. */
const struct kn_kv_layout *kv_layout(const struct kv_cache *kv);
const uint8_t *kv_layer_base(const struct kv_cache *kv, int32_t layer);
const int32_t *kv_seq_blocks(const struct kv_cache *kv, int32_t seq);

/* ---------------------------------------------------------------------- */
/* accounting */

struct kv_stats {
    int32_t n_blocks, n_free, n_cached, n_used;
    int32_t block_size;
    size_t block_bytes;  /* kv_block_bytes */
    size_t pool_bytes;   /* n_blocks * block_bytes */
    size_t total_bytes;  /* the single allocation: pool + metadata */
    int64_t n_cow;       /* copy-on-write copies made */
    int64_t n_evicted;   /* cached blocks reused for new data */
    int64_t n_matched;   /* blocks taken from the prefix cache */
};
void kv_get_stats(const struct kv_cache *kv, struct kv_stats *st);

/* Check every invariant of the pool: each block is in exactly one state,
 * refcounts equal the number of table entries, the lists and the hash
 * table are consistent, each sequence has the blocks its length needs.
 * ANVIL_OK, or ANVIL_ERR_INVALID with the first violation in err. Slow:
 * for tests and debug builds. Allocates a temporary array
 * (ANVIL_ERR_NOMEM if that fails). */
anvil_status kv_check(const struct kv_cache *kv, char *err, size_t err_cap);

/* ---------------------------------------------------------------------- */
/* for the attention room (src/attn), which reads the cache */

/* The cache's parameters as resolved by kv_init (type, block_size,
 * n_threads and n_blocks filled in). */
const struct kv_params *kv_params_of(const struct kv_cache *kv);
/* Positions the block table of seq covers (written or reserved), 0 for a
 * bad id. */
int32_t kv_seq_capacity(const struct kv_cache *kv, int32_t seq);
/* One object a user of the cache hangs on it (the attention plan,
 * src/attn/attn_plan.c), freed by kv_free through ext_free. At most one:
 * setting it twice is a bug. kv_ext is NULL until then. */
void *kv_ext(const struct kv_cache *kv);
void kv_set_ext(struct kv_cache *kv, void *ext, void (*ext_free)(void *));

#endif
