/*
 * kv_cache.c - the paged KV cache: block pool, per-sequence block tables,
 * copy-on-write, prefix cache (hash of parent + token ids, LRU of unused
 * cached blocks), K/V writes in F16 or Q8_0, and the invariant checker.
 * See kv_cache.h for the layout and the contract.
 *
 * Does not: run attention (src/attn, which reads the tiles of
 * kv_layout.h and hangs its plan on the cache: kv_set_ext), schedule or
 * preempt (the engine),
 * know about models or tokens beyond their ids.
 *
 * Invariants (kv_check): every block is FREE, CACHED or USED; FREE blocks
 * are exactly the free list, CACHED exactly the LRU list; a block's ref is
 * the number of table entries naming it; hashed blocks are exactly those
 * in the hash table; a block written through kv_write is private (ref 1,
 * not hashed) - kv_seq_reserve makes it so.
 *
 * The reference for the design is vLLM's PagedAttention block manager
 * (Kwon et al., SOSP 2023) and its automatic prefix caching.
 */
#include <string.h>
#include <sys/mman.h>

#include "core/core.h"
#include "kernels/blocks.h"
#include "kv/kv_internal.h"

#define HUGE_ALIGN ((size_t)2 << 20)

/* ---------------------------------------------------------------------- */
/* sizes and init */

static int kv_type(const struct kv_params *p) {
    return p->type == ANVIL_TYPE_F32 ? ANVIL_TYPE_F16 : p->type;
}
static int32_t kv_bs(const struct kv_params *p) { return p->block_size ? p->block_size : 16; }

size_t kv_block_bytes(const struct kv_params *p) {
    struct kn_kv_layout l;
    if (p->n_layer < 1 || kn_kv_layout_init(&l, kv_type(p), kv_bs(p), p->head_dim, p->n_head_kv))
        return 0;
    size_t b;
    if (!size_mul(l.tile_bytes, (size_t)p->n_head_kv, &b) || !size_mul(b, (size_t)p->n_layer, &b))
        return 0;
    return b;
}

static size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Carve one region of `n` bytes at alignment a from a running offset. */
static bool carve(size_t *off, size_t n, size_t a, size_t *at) {
    size_t o = align_up(*off, a);
    if (o < *off || !size_add(o, n, off)) return false;
    *at = o;
    return true;
}

anvil_status kv_init(const struct kv_params *p, struct kv_cache **out, char *err, size_t err_cap) {
    struct kn_kv_layout lay;
    int type = kv_type(p);
    int32_t bs = kv_bs(p);
    if (p->n_layer < 1 || p->n_layer > 4096 || p->n_head_kv < 1 || p->n_head < p->n_head_kv ||
        p->n_head % p->n_head_kv) {
        errmsg_set(err, err_cap, "kv: bad head counts %d/%d or layers %d", p->n_head,
                   p->n_head_kv, p->n_layer);
        return ANVIL_ERR_INVALID;
    }
    if (kn_kv_layout_init(&lay, type, bs, p->head_dim, p->n_head_kv)) {
        errmsg_set(err, err_cap,
                   "kv: unsupported type %d / block_size %d / head_dim %d (F16 or Q8_0, block a "
                   "multiple of 16, head_dim a multiple of 32 up to 256)",
                   type, bs, p->head_dim);
        return ANVIL_ERR_UNSUPPORTED;
    }
    if (p->window < 0 || (p->window > 0 && p->window < bs)) {
        errmsg_set(err, err_cap, "kv: window %d must be 0 or at least a block (%d)", p->window, bs);
        return ANVIL_ERR_INVALID;
    }
    if (p->n_seq_max < 1 || p->n_seq_max > (1 << 20) || p->n_ctx < 1 || p->n_ctx > (1 << 26) ||
        p->n_threads < 0 || p->n_threads > 1024) {
        errmsg_set(err, err_cap, "kv: bad n_seq_max %d / n_ctx %d / n_threads %d", p->n_seq_max,
                   p->n_ctx, p->n_threads);
        return ANVIL_ERR_INVALID;
    }
    size_t block_bytes = kv_block_bytes(p);
    int64_t nb = p->n_blocks;
    if (nb == 0 && block_bytes) nb = (int64_t)(p->mem_bytes / block_bytes);
    if (nb < 1 || nb > INT32_MAX / 2 || !block_bytes) {
        errmsg_set(err, err_cap, "kv: pool of %lld blocks (block %zu bytes, budget %zu)",
                   (long long)nb, block_bytes, p->mem_bytes);
        return ANVIL_ERR_INVALID;
    }
    int32_t n_threads = p->n_threads ? p->n_threads : 1;
    int32_t max_blocks_seq = (p->n_ctx + bs - 1) / bs;
    uint32_t nbuckets = 16;
    while (nbuckets < (uint32_t)nb && nbuckets < (1u << 30)) nbuckets <<= 1;
    bool ok = true;

    size_t off = 0, o_kv, o_blk, o_tok, o_tab, o_seq, o_htab, o_pool, pool_bytes = 0;
    size_t nseq = (size_t)p->n_seq_max;
    ok = ok && carve(&off, sizeof(struct kv_cache), 64, &o_kv) &&
         carve(&off, (size_t)nb * sizeof(struct kv_block), 64, &o_blk) &&
         carve(&off, (size_t)nb * (size_t)bs * sizeof(int32_t), 64, &o_tok) &&
         carve(&off, nseq * (size_t)max_blocks_seq * sizeof(int32_t), 64, &o_tab) &&
         carve(&off, nseq * sizeof(struct kv_seq), 64, &o_seq) &&
         carve(&off, (size_t)nbuckets * sizeof(int32_t), 64, &o_htab) &&
         size_mul((size_t)nb, block_bytes, &pool_bytes);
    /* big pools start on a 2 MiB boundary and ask for huge pages: tiles of
     * one sequence are scattered, so 4 KiB pages would cost a TLB miss per
     * tile read */
    size_t palign = pool_bytes >= 4 * HUGE_ALIGN ? HUGE_ALIGN : 4096;
    size_t total = 0;
    ok = ok && carve(&off, pool_bytes, 4096, &o_pool) && size_add(off, palign, &total);
    if (!ok) {
        errmsg_set(err, err_cap, "kv: size overflow");
        return ANVIL_ERR_INVALID;
    }
    uint8_t *mem = core_malloc(total);
    if (!mem) {
        errmsg_set(err, err_cap, "kv: cannot allocate %zu bytes", total);
        return ANVIL_ERR_NOMEM;
    }
    /* shift every region so that the pool lands on palign */
    size_t shift = (palign - ((uintptr_t)(mem + o_pool) % palign)) % palign;
    uint8_t *base = mem + shift;
    struct kv_cache *kv = (struct kv_cache *)(base + o_kv);
    memset(base, 0, o_pool); /* metadata only; the pool is left untouched */
    kv->p = *p;
    kv->p.type = type;
    kv->p.block_size = bs;
    kv->p.n_threads = n_threads;
    kv->p.n_blocks = (int32_t)nb;
    kv->lay = lay;
    kv->bs = bs;
    kv->n_blocks = (int32_t)nb;
    kv->max_blocks_seq = max_blocks_seq;
    kv->block_bytes = block_bytes;
    kv->layer_bytes = (size_t)nb * (size_t)p->n_head_kv * lay.tile_bytes;
    kv->mem = mem;
    kv->mem_bytes = total;
    kv->blk = (struct kv_block *)(base + o_blk);
    kv->tok = (int32_t *)(base + o_tok);
    kv->tables = (int32_t *)(base + o_tab);
    kv->seqs = (struct kv_seq *)(base + o_seq);
    kv->htab = (int32_t *)(base + o_htab);
    kv->hmask = nbuckets - 1;
    kv->pool = base + o_pool;
    if (palign == HUGE_ALIGN) (void)madvise(kv->pool, pool_bytes & ~(HUGE_ALIGN - 1), MADV_HUGEPAGE);

    for (uint32_t i = 0; i <= kv->hmask; i++) kv->htab[i] = -1;
    /* free list in index order: low blocks are handed out first */
    for (int32_t i = 0; i < kv->n_blocks; i++) {
        struct kv_block *b = &kv->blk[i];
        b->state = BLK_FREE;
        b->next = i + 1 < kv->n_blocks ? i + 1 : -1;
        b->prev = b->hnext = b->parent = -1;
    }
    kv->free_head = 0;
    kv->n_free = kv->n_blocks;
    kv->lru_head = kv->lru_tail = -1;
    for (int32_t s = 0; s < p->n_seq_max; s++) kv->seqs[s].nohash_pos = INT32_MAX;
    *out = kv;
    return ANVIL_OK;
}

void kv_free(struct kv_cache *kv) {
    if (!kv) return;
    if (kv->ext_free) kv->ext_free(kv->ext);
    core_free(kv->mem);
}

void *kv_ext(const struct kv_cache *kv) { return kv->ext; }

void kv_set_ext(struct kv_cache *kv, void *ext, void (*ext_free)(void *)) {
    ANVIL_ASSERT(!kv->ext);
    kv->ext = ext;
    kv->ext_free = ext_free;
}

const struct kv_params *kv_params_of(const struct kv_cache *kv) { return &kv->p; }

/* ---------------------------------------------------------------------- */
/* prefault */

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

int32_t kv_prefault(struct kv_cache *kv, int32_t ahead) {
    if (kv->pf_layer == 0) {
        int32_t from = kv->n_faulted > kv->n_handed ? kv->n_faulted : kv->n_handed;
        int64_t want = (int64_t)kv->n_handed + (ahead > 0 ? ahead : 0);
        kv->pf_to = want < kv->n_blocks ? (int32_t)want : kv->n_blocks;
        if (kv->pf_to <= from) return 0;
        kv->n_faulted = from;
    }
    /* one layer per call, so that an idle owner is never long away */
    int32_t l = kv->pf_layer;
    size_t span = (size_t)kv->p.n_head_kv * kv->lay.tile_bytes; /* one block in one layer */
    uint8_t *layer = kv->pool + (size_t)l * kv->layer_bytes;
    uint8_t *lo = layer + (size_t)kv->n_faulted * span, *hi = layer + (size_t)kv->pf_to * span;
    uint8_t *a = (uint8_t *)((uintptr_t)lo & ~(uintptr_t)4095);
    if (madvise(a, (size_t)(hi - a), MADV_POPULATE_WRITE) != 0) {
        /* blocks never handed out hold nothing yet: zeroing them changes no
         * byte anyone reads (some may have been handed out since the range
         * was set, so start past those) */
        uint8_t *z = layer + (size_t)(kv->n_handed > kv->n_faulted ? kv->n_handed : kv->n_faulted) * span;
        if (z < hi) memset(z, 0, (size_t)(hi - z));
    }
    if (++kv->pf_layer == kv->p.n_layer) {
        kv->pf_layer = 0;
        kv->n_faulted = kv->pf_to;
    }
    return 1;
}

int32_t kv_n_prefaulted(const struct kv_cache *kv) { return kv->n_faulted; }

/* ---------------------------------------------------------------------- */
/* block lists and the hash table */

static int32_t *table_of(const struct kv_cache *kv, int32_t seq) {
    return kv->tables + (size_t)seq * (size_t)kv->max_blocks_seq;
}

static void lru_remove(struct kv_cache *kv, int32_t i) {
    struct kv_block *b = &kv->blk[i];
    if (b->prev >= 0) kv->blk[b->prev].next = b->next;
    else kv->lru_head = b->next;
    if (b->next >= 0) kv->blk[b->next].prev = b->prev;
    else kv->lru_tail = b->prev;
    b->prev = b->next = -1;
    kv->n_cached--;
}

static void lru_append(struct kv_cache *kv, int32_t i) {
    struct kv_block *b = &kv->blk[i];
    b->prev = kv->lru_tail;
    b->next = -1;
    if (kv->lru_tail >= 0) kv->blk[kv->lru_tail].next = i;
    else kv->lru_head = i;
    kv->lru_tail = i;
    kv->n_cached++;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static uint64_t block_key(int32_t parent, uint32_t pgen, const int32_t *tok, int32_t bs) {
    uint64_t h = mix64(((uint64_t)(uint32_t)parent << 32) ^ pgen ^ 0x9e3779b97f4a7c15ULL);
    for (int32_t i = 0; i < bs; i++) h = mix64(h ^ (uint32_t)tok[i]) + (uint64_t)i;
    return h;
}

/* The hashed block holding exactly (parent, pgen, tok), or -1. */
static int32_t hash_find(const struct kv_cache *kv, uint64_t key, int32_t parent, uint32_t pgen,
                         const int32_t *tok) {
    for (int32_t i = kv->htab[key & kv->hmask]; i >= 0; i = kv->blk[i].hnext) {
        const struct kv_block *b = &kv->blk[i];
        if (b->key == key && b->parent == parent && b->parent_gen == pgen &&
            !memcmp(kv->tok + (size_t)i * kv->bs, tok, (size_t)kv->bs * sizeof(int32_t)))
            return i;
    }
    return -1;
}

static void hash_insert(struct kv_cache *kv, int32_t i, uint64_t key, int32_t parent,
                        uint32_t pgen) {
    struct kv_block *b = &kv->blk[i];
    b->key = key;
    b->parent = parent;
    b->parent_gen = pgen;
    b->gen++; /* a new identity: children hashed under an older gen no longer match */
    b->hashed = 1;
    b->hnext = kv->htab[key & kv->hmask];
    kv->htab[key & kv->hmask] = i;
}

static void hash_remove(struct kv_cache *kv, int32_t i) {
    struct kv_block *b = &kv->blk[i];
    int32_t *pp = &kv->htab[b->key & kv->hmask];
    while (*pp != i) pp = &kv->blk[*pp].hnext;
    *pp = b->hnext;
    b->hnext = b->parent = -1;
    b->hashed = 0;
}

/* Hand out a block (ref 1): the free list first, else evict the least
 * recently used cached block. The caller has checked availability. */
static int32_t block_alloc(struct kv_cache *kv) {
    int32_t i;
    if (kv->free_head >= 0) {
        i = kv->free_head;
        kv->free_head = kv->blk[i].next;
        kv->blk[i].next = -1;
        kv->n_free--;
    } else {
        i = kv->lru_head;
        ANVIL_ASSERT(i >= 0);
        lru_remove(kv, i);
        hash_remove(kv, i);
        kv->n_evicted++;
    }
    kv->blk[i].state = BLK_USED;
    kv->blk[i].ref = 1;
    kv->n_used++;
    if (i >= kv->n_handed) kv->n_handed = i + 1;
    return i;
}

/* Take one more reference to a block (possibly back from the LRU). */
static void block_acquire(struct kv_cache *kv, int32_t i) {
    struct kv_block *b = &kv->blk[i];
    if (b->state == BLK_CACHED) {
        lru_remove(kv, i);
        b->state = BLK_USED;
        kv->n_used++;
    }
    b->ref++;
}

static void block_release(struct kv_cache *kv, int32_t i) {
    struct kv_block *b = &kv->blk[i];
    ANVIL_ASSERT(b->state == BLK_USED && b->ref > 0);
    if (--b->ref > 0) return;
    kv->n_used--;
    if (b->hashed) {
        b->state = BLK_CACHED;
        lru_append(kv, i);
    } else {
        b->state = BLK_FREE;
        b->next = kv->free_head;
        kv->free_head = i;
        kv->n_free++;
    }
}

/* ---------------------------------------------------------------------- */
/* sequences */

static bool seq_ok(const struct kv_cache *kv, int32_t seq) {
    return seq >= 0 && seq < kv->p.n_seq_max;
}

int32_t kv_seq_len(const struct kv_cache *kv, int32_t seq) {
    return seq_ok(kv, seq) ? kv->seqs[seq].len : 0;
}

int32_t kv_n_available(const struct kv_cache *kv) { return kv->n_free + kv->n_cached; }

int32_t kv_seq_blocks_needed(const struct kv_cache *kv, int32_t seq, int32_t n) {
    if (!seq_ok(kv, seq) || n < 0) return -1;
    const struct kv_seq *s = &kv->seqs[seq];
    if ((int64_t)s->len + n > kv->p.n_ctx) return -1;
    if (n == 0) return 0;
    int32_t end_blocks = (s->len + n + kv->bs - 1) / kv->bs;
    int32_t need = end_blocks > s->n_blocks ? end_blocks - s->n_blocks : 0;
    int32_t i0 = s->len / kv->bs; /* first block written */
    if (i0 < s->n_blocks && kv->blk[table_of(kv, seq)[i0]].ref > 1) need++; /* copy on write */
    return need;
}

/* Make table entry idx of seq private: copy a shared block, or take a
 * hashed block we alone hold out of the hash table (it is about to change). */
static void make_private(struct kv_cache *kv, int32_t seq, int32_t idx) {
    int32_t *tab = table_of(kv, seq);
    int32_t old = tab[idx];
    struct kv_block *b = &kv->blk[old];
    if (b->ref == 1) {
        if (b->hashed) hash_remove(kv, old);
        return;
    }
    int32_t nb = block_alloc(kv);
    size_t span = (size_t)kv->p.n_head_kv * kv->lay.tile_bytes;
    for (int32_t l = 0; l < kv->p.n_layer; l++) {
        uint8_t *layer = kv->pool + (size_t)l * kv->layer_bytes;
        memcpy(layer + (size_t)nb * span, layer + (size_t)old * span, span);
    }
    memcpy(kv->tok + (size_t)nb * kv->bs, kv->tok + (size_t)old * kv->bs,
           (size_t)kv->bs * sizeof(int32_t));
    tab[idx] = nb;
    block_release(kv, old);
    kv->n_cow++;
}

static void do_reserve(struct kv_cache *kv, int32_t seq, int32_t n) {
    struct kv_seq *s = &kv->seqs[seq];
    if (n == 0) return;
    int32_t *tab = table_of(kv, seq);
    int32_t end_blocks = (s->len + n + kv->bs - 1) / kv->bs;
    int32_t i0 = s->len / kv->bs;
    if (i0 < s->n_blocks) make_private(kv, seq, i0);
    while (s->n_blocks < end_blocks) tab[s->n_blocks++] = block_alloc(kv);
}

anvil_status kv_seq_reserve(struct kv_cache *kv, int32_t seq, int32_t n) {
    int32_t need = kv_seq_blocks_needed(kv, seq, n);
    if (need < 0) return ANVIL_ERR_INVALID;
    if (need > kv_n_available(kv)) return ANVIL_ERR_KV_FULL;
    do_reserve(kv, seq, n);
    return ANVIL_OK;
}

anvil_status kv_reserve(struct kv_cache *kv, int32_t n_seqs, const int32_t *seq,
                        const int32_t *n) {
    anvil_status st = ANVIL_OK;
    int64_t need = 0;
    int32_t i = 0;
    for (; i < n_seqs; i++) {
        int32_t k = kv_seq_blocks_needed(kv, seq[i], n[i]);
        if (k < 0 || kv->seqs[seq[i]].mark) {
            st = ANVIL_ERR_INVALID; /* bad or repeated sequence */
            break;
        }
        kv->seqs[seq[i]].mark = 1;
        need += k;
    }
    for (int32_t j = 0; j < i; j++) kv->seqs[seq[j]].mark = 0;
    if (st != ANVIL_OK) return st;
    if (need > kv_n_available(kv)) return ANVIL_ERR_KV_FULL;
    for (i = 0; i < n_seqs; i++) do_reserve(kv, seq[i], n[i]);
    return ANVIL_OK;
}

/* Block idx of seq just became full: hash it, or swap it for an identical
 * block already cached. */
static void seq_hash_block(struct kv_cache *kv, int32_t seq, int32_t idx) {
    struct kv_seq *s = &kv->seqs[seq];
    int32_t *tab = table_of(kv, seq);
    int32_t b = tab[idx];
    if (kv->blk[b].hashed || (int64_t)(idx + 1) * kv->bs > s->nohash_pos) return;
    if (idx > 0 && tab[idx - 1] < 0) return; /* windowed: the parent is gone */
    int32_t parent = idx > 0 ? tab[idx - 1] : -1;
    if (parent >= 0 && !kv->blk[parent].hashed) return; /* the chain is broken */
    uint32_t pgen = parent >= 0 ? kv->blk[parent].gen : 0;
    const int32_t *tok = kv->tok + (size_t)b * kv->bs;
    uint64_t key = block_key(parent, pgen, tok, kv->bs);
    int32_t x = hash_find(kv, key, parent, pgen, tok);
    if (x >= 0) {
        block_acquire(kv, x); /* same prefix computed elsewhere: share it */
        tab[idx] = x;
        block_release(kv, b);
    } else {
        hash_insert(kv, b, key, parent, pgen);
    }
}

anvil_status kv_seq_commit(struct kv_cache *kv, int32_t seq, int32_t n, const anvil_token *tokens) {
    if (!seq_ok(kv, seq) || n < 0) return ANVIL_ERR_INVALID;
    struct kv_seq *s = &kv->seqs[seq];
    if ((int64_t)s->len + n > (int64_t)s->n_blocks * kv->bs) return ANVIL_ERR_INVALID;
    int32_t *tab = table_of(kv, seq);
    if (n > 0) {
        /* the positions must have been reserved: their first block private
         * (a shared or hashed block here means kv_seq_reserve was skipped) */
        const struct kv_block *b = &kv->blk[tab[s->len / kv->bs]];
        if (b->ref != 1 || b->hashed) return ANVIL_ERR_INVALID;
    }
    if (tokens) {
        for (int32_t i = 0; i < n; i++) {
            int32_t p = s->len + i;
            kv->tok[(size_t)tab[p / kv->bs] * kv->bs + p % kv->bs] = tokens[i];
        }
    } else if (n > 0 && s->len < s->nohash_pos) {
        s->nohash_pos = s->len;
    }
    int32_t old = s->len;
    s->len += n;
    if (kv->p.prefix_cache)
        for (int32_t idx = old / kv->bs; (idx + 1) * kv->bs <= s->len; idx++)
            seq_hash_block(kv, seq, idx);
    kv_seq_trim(kv, seq);
    return ANVIL_OK;
}

/* First position a query at `len` still reads in a windowed cache, less
 * the slack: blocks wholly below it may go. */
static int64_t window_floor(const struct kv_cache *kv, int64_t len) {
    return len - kv->p.window - KV_WINDOW_SLACK;
}

anvil_status kv_seq_truncate(struct kv_cache *kv, int32_t seq, int32_t len) {
    if (!seq_ok(kv, seq)) return ANVIL_ERR_INVALID;
    struct kv_seq *s = &kv->seqs[seq];
    if (len < 0 || len > s->len) return ANVIL_ERR_INVALID;
    int32_t *tab = table_of(kv, seq);
    /* the window of the new length must still be held: the first key a
     * query at len reads is len - window + 1 (0 while len < window) */
    int64_t need = (int64_t)len - kv->p.window + 1;
    if (len > 0 && kv->p.window > 0 && (int64_t)s->first * kv->bs > (need > 0 ? need : 0))
        return ANVIL_ERR_UNSUPPORTED;
    int32_t keep = (len + kv->bs - 1) / kv->bs;
    /* last block first: a prefix's tail enters the LRU before its head, so
     * eviction takes leaves before the blocks they hang from */
    while (s->n_blocks > keep) {
        int32_t b = tab[--s->n_blocks];
        if (b >= 0) block_release(kv, b);
        tab[s->n_blocks] = -1;
    }
    if (s->first > s->n_blocks) s->first = s->n_blocks;
    if (len == 0) s->first = 0;
    s->len = len;
    if (len <= s->nohash_pos) s->nohash_pos = INT32_MAX;
    return ANVIL_OK;
}

void kv_seq_trim(struct kv_cache *kv, int32_t seq) {
    if (!seq_ok(kv, seq) || kv->p.window <= 0) return;
    struct kv_seq *s = &kv->seqs[seq];
    int32_t *tab = table_of(kv, seq);
    int64_t floor = window_floor(kv, s->len);
    while (s->first < s->n_blocks && (int64_t)(s->first + 1) * kv->bs <= floor) {
        block_release(kv, tab[s->first]);
        tab[s->first++] = -1;
    }
}

int32_t kv_seq_capacity(const struct kv_cache *kv, int32_t seq) {
    return seq_ok(kv, seq) ? kv->seqs[seq].n_blocks * kv->bs : 0;
}

int32_t kv_seq_n_held(const struct kv_cache *kv, int32_t seq) {
    return seq_ok(kv, seq) ? kv->seqs[seq].n_blocks - kv->seqs[seq].first : 0;
}

int32_t kv_blocks_for_len(const struct kv_cache *kv, int64_t n, int32_t step) {
    int64_t b = (n + kv->bs - 1) / kv->bs;
    if (kv->p.window > 0) {
        /* the window plus slack, plus one step, one block of misalignment
         * at each end */
        int64_t w = ((int64_t)kv->p.window + KV_WINDOW_SLACK + step + kv->bs - 1) / kv->bs + 2;
        if (b > w) b = w;
    }
    return b > INT32_MAX ? INT32_MAX : (int32_t)b;
}

void kv_seq_free(struct kv_cache *kv, int32_t seq) { (void)kv_seq_truncate(kv, seq, 0); }

int32_t kv_seq_match(struct kv_cache *kv, int32_t seq, const anvil_token *tokens, int32_t n) {
    if (!seq_ok(kv, seq) || n < 0) return ANVIL_ERR_INVALID;
    struct kv_seq *s = &kv->seqs[seq];
    if (s->len != 0 || s->n_blocks != 0) return ANVIL_ERR_INVALID;
    if (!kv->p.prefix_cache) return 0;
    int32_t *tab = table_of(kv, seq);
    int32_t lim = n < kv->p.n_ctx ? n : kv->p.n_ctx;
    int32_t parent = -1;
    uint32_t pgen = 0;
    int32_t k = 0;
    while ((int64_t)(k + 1) * kv->bs <= lim) {
        const int32_t *tok = tokens + (size_t)k * kv->bs;
        int32_t x = hash_find(kv, block_key(parent, pgen, tok, kv->bs), parent, pgen, tok);
        if (x < 0) break;
        block_acquire(kv, x);
        tab[k++] = x;
        parent = x;
        pgen = kv->blk[x].gen;
    }
    s->n_blocks = k;
    s->len = k * kv->bs;
    s->nohash_pos = INT32_MAX;
    kv->n_matched += k;
    return s->len;
}

anvil_status kv_seq_fork(struct kv_cache *kv, int32_t dst, int32_t src) {
    if (!seq_ok(kv, dst) || !seq_ok(kv, src) || dst == src) return ANVIL_ERR_INVALID;
    struct kv_seq *d = &kv->seqs[dst];
    const struct kv_seq *s = &kv->seqs[src];
    if (d->len != 0 || d->n_blocks != 0) return ANVIL_ERR_INVALID;
    int32_t n = (s->len + kv->bs - 1) / kv->bs;
    const int32_t *ts = table_of(kv, src);
    int32_t *td = table_of(kv, dst);
    for (int32_t i = 0; i < n; i++) {
        td[i] = ts[i];
        if (ts[i] >= 0) block_acquire(kv, ts[i]);
    }
    d->first = s->first;
    d->n_blocks = n;
    d->len = s->len;
    d->nohash_pos = s->nohash_pos;
    return ANVIL_OK;
}

/* ---------------------------------------------------------------------- */
/* data */

const struct kn_kv_layout *kv_layout(const struct kv_cache *kv) { return &kv->lay; }

const uint8_t *kv_layer_base(const struct kv_cache *kv, int32_t layer) {
    return kv->pool + (size_t)layer * kv->layer_bytes;
}

const int32_t *kv_seq_blocks(const struct kv_cache *kv, int32_t seq) { return table_of(kv, seq); }

void kv_write(struct kv_cache *kv, int32_t layer, int32_t seq, int32_t pos, int32_t n,
              const float *k, size_t k_stride, const float *v, size_t v_stride) {
    const struct kn_kv_layout *L = &kv->lay;
    int32_t bs = kv->bs, hd = L->head_dim, nkv = L->n_head_kv;
    ANVIL_ASSERT(seq_ok(kv, seq) && layer >= 0 && layer < kv->p.n_layer && pos >= 0 &&
                 (int64_t)pos + n <= (int64_t)kv->seqs[seq].n_blocks * bs);
    const int32_t *tab = table_of(kv, seq);
    uint8_t *base = kv->pool + (size_t)layer * kv->layer_bytes;
    for (int32_t t = 0; t < n; t++) {
        int32_t p = pos + t, j = p % bs;
        int32_t b = tab[p / bs];
        ANVIL_DASSERT(kv->blk[b].ref == 1 && !kv->blk[b].hashed);
        const float *kr = k + (size_t)t * k_stride, *vr = v + (size_t)t * v_stride;
        for (int32_t h = 0; h < nkv; h++) {
            uint8_t *tile = (uint8_t *)kn_kv_tile(L, base, b, h);
            const float *kh = kr + (size_t)h * hd, *vh = vr + (size_t)h * hd;
            if (L->type == ANVIL_TYPE_F16) {
                kn_f16 *kt = (kn_f16 *)tile, *vt = (kn_f16 *)(tile + L->v_off);
                kn_f16_row_fn cvt = kv->p.f16_row ? kv->p.f16_row : kn_ops_ref.f16_row;
                cvt(kt + j, (size_t)bs, kh, hd);
                cvt(vt + (size_t)j * hd, 1, vh, hd);
            } else {
                struct blk_q8_0 qk[KN_KV_MAX_HEAD_DIM / QK], qv[KN_KV_MAX_HEAD_DIM / QK];
                kn_quantize_row(ANVIL_TYPE_Q8_0, kh, qk, hd);
                kn_quantize_row(ANVIL_TYPE_Q8_0, vh, qv, hd);
                int8_t *kq = (int8_t *)tile, *vq = (int8_t *)(tile + L->v_off);
                kn_f16 *ks = (kn_f16 *)(tile + L->ks_off), *vs = (kn_f16 *)(tile + L->vs_off);
                for (int32_t g = 0; g < hd / QK; g++) {
                    ks[(size_t)g * bs + j] = qk[g].d;
                    vs[(size_t)g * bs + j] = qv[g].d;
                    for (int32_t i = 0; i < QK; i++) {
                        kq[(size_t)(g * QK + i) * bs + j] = qk[g].qs[i];
                        vq[(size_t)j * hd + g * QK + i] = qv[g].qs[i];
                    }
                }
            }
        }
    }
}

void kv_fill_random(struct kv_cache *kv, uint64_t seed) {
    const struct kn_kv_layout *L = &kv->lay;
    size_t n_tiles = (size_t)kv->p.n_layer * (size_t)kv->n_blocks * (size_t)L->n_head_kv;
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n_tiles; i++) {
        uint8_t *tile = kv->pool + i * L->tile_bytes;
        for (size_t o = 0; o + 8 <= L->tile_bytes; o += 8) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            uint64_t w = x;
            if (L->type == ANVIL_TYPE_F16) {
                /* four halves: sign, exponent 12..15 (2^-3..2^0), mantissa */
                uint64_t keep = 0x83ff83ff83ff83ffULL;
                w = (w & keep) | 0x3000300030003000ULL | ((w >> 3) & 0x0c000c000c000c00ULL);
            }
            memcpy(tile + o, &w, 8);
        }
        if (L->type == ANVIL_TYPE_Q8_0) {
            size_t n_scales = (size_t)kv->bs * (size_t)(L->head_dim / QK);
            kn_f16 *ks = (kn_f16 *)(tile + L->ks_off), *vs = (kn_f16 *)(tile + L->vs_off);
            for (size_t j = 0; j < n_scales; j++) ks[j] = vs[j] = kn_f32_to_f16(1.0f / 127.0f);
        }
    }
}

/* ---------------------------------------------------------------------- */
/* accounting */

void kv_get_stats(const struct kv_cache *kv, struct kv_stats *st) {
    memset(st, 0, sizeof(*st));
    st->n_blocks = kv->n_blocks;
    st->n_free = kv->n_free;
    st->n_cached = kv->n_cached;
    st->n_used = kv->n_used;
    st->block_size = kv->bs;
    st->block_bytes = kv->block_bytes;
    st->pool_bytes = (size_t)kv->n_blocks * kv->block_bytes;
    st->total_bytes = kv->mem_bytes;
    st->n_cow = kv->n_cow;
    st->n_evicted = kv->n_evicted;
    st->n_matched = kv->n_matched;
}

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            errmsg_set(err, err_cap, __VA_ARGS__); \
            st = ANVIL_ERR_INVALID; \
            goto fail; \
        } \
    } while (0)

anvil_status kv_check(const struct kv_cache *kv, char *err, size_t err_cap) {
    anvil_status st = ANVIL_OK;
    int32_t nb = kv->n_blocks;
    /* per block: table references (low 30 bits) and list membership */
    int32_t *cnt = core_calloc((size_t)nb, sizeof(int32_t));
    uint8_t *seen = core_calloc((size_t)nb, 1);
    if (!cnt || !seen) {
        st = ANVIL_ERR_NOMEM;
        goto fail;
    }
    int32_t n = 0;
    for (int32_t i = kv->free_head; i >= 0; i = kv->blk[i].next, n++) {
        CHECK(i < nb && n < nb, "free list corrupt at %d", i);
        const struct kv_block *b = &kv->blk[i];
        CHECK(!seen[i], "block %d twice in the lists", i);
        seen[i] = 1;
        CHECK(b->state == BLK_FREE && b->ref == 0 && !b->hashed, "free block %d: state %d ref %d hashed %d",
              i, b->state, b->ref, b->hashed);
    }
    CHECK(n == kv->n_free, "free list has %d blocks, n_free %d", n, kv->n_free);
    n = 0;
    int32_t prev = -1;
    for (int32_t i = kv->lru_head; i >= 0; prev = i, i = kv->blk[i].next, n++) {
        CHECK(i < nb && n < nb, "LRU list corrupt at %d", i);
        const struct kv_block *b = &kv->blk[i];
        CHECK(!seen[i], "block %d twice in the lists", i);
        seen[i] = 2;
        CHECK(b->prev == prev, "LRU back link of %d", i);
        CHECK(b->state == BLK_CACHED && b->ref == 0 && b->hashed, "cached block %d: state %d ref %d hashed %d",
              i, b->state, b->ref, b->hashed);
    }
    CHECK(prev == kv->lru_tail, "LRU tail %d, last %d", kv->lru_tail, prev);
    CHECK(n == kv->n_cached, "LRU has %d blocks, n_cached %d", n, kv->n_cached);
    int32_t n_used = 0;
    for (int32_t i = 0; i < nb; i++) {
        const struct kv_block *b = &kv->blk[i];
        if (!seen[i]) {
            CHECK(b->state == BLK_USED && b->ref > 0, "block %d in no list: state %d ref %d", i,
                  b->state, b->ref);
            n_used++;
        }
    }
    CHECK(n_used == kv->n_used, "%d used blocks, n_used %d", n_used, kv->n_used);
    CHECK(kv->n_free + kv->n_cached + kv->n_used == nb, "free %d + cached %d + used %d != %d",
          kv->n_free, kv->n_cached, kv->n_used, nb);
    for (int32_t q = 0; q < kv->p.n_seq_max; q++) {
        const struct kv_seq *s = &kv->seqs[q];
        const int32_t *tab = table_of(kv, q);
        CHECK(s->len >= 0 && s->n_blocks >= 0 && s->n_blocks <= kv->max_blocks_seq &&
                  (int64_t)s->n_blocks * kv->bs >= s->len && s->len <= kv->p.n_ctx,
              "seq %d: len %d with %d blocks", q, s->len, s->n_blocks);
        CHECK(s->mark == 0, "seq %d marked", q);
        CHECK(s->first >= 0 && s->first <= s->n_blocks && (kv->p.window > 0 || s->first == 0),
              "seq %d: first held block %d of %d", q, s->first, s->n_blocks);
        /* the window of the length is held (the slack beyond it is not
         * checked: truncating back, as speculative decoding does, uses it) */
        if (kv->p.window > 0 && s->first > 0)
            CHECK((int64_t)s->first * kv->bs <= (int64_t)s->len - kv->p.window + 1,
                  "seq %d: len %d window %d but blocks from %d", q, s->len, kv->p.window, s->first);
        for (int32_t i = 0; i < s->first; i++)
            CHECK(tab[i] == -1, "seq %d entry %d below the window is %d", q, i, tab[i]);
        for (int32_t i = s->first; i < s->n_blocks; i++) {
            CHECK(tab[i] >= 0 && tab[i] < nb, "seq %d entry %d = %d", q, i, tab[i]);
            cnt[tab[i]]++;
            const struct kv_block *b = &kv->blk[tab[i]];
            /* a hashed block in a table continues a hashed chain (unless
             * its parent fell out of the window) */
            if (b->hashed && !(i > 0 && i - 1 < s->first)) {
                int32_t par = i > 0 ? tab[i - 1] : -1;
                CHECK(b->parent == par && (par < 0 || (kv->blk[par].hashed && kv->blk[par].gen == b->parent_gen)),
                      "seq %d entry %d: hashed block %d has parent %d, table has %d", q, i, tab[i],
                      b->parent, par);
            }
            /* blocks past the length (reserved) are private and unhashed */
            if ((int64_t)i * kv->bs >= s->len)
                CHECK(b->ref == 1 && !b->hashed, "seq %d reserved entry %d: ref %d hashed %d", q, i,
                      b->ref, b->hashed);
        }
    }
    for (int32_t i = 0; i < nb; i++)
        CHECK(cnt[i] == kv->blk[i].ref, "block %d: ref %d, %d table entries", i, kv->blk[i].ref,
              cnt[i]);
    /* hash table: exactly the hashed blocks, each in its bucket */
    n = 0;
    for (uint32_t h = 0; h <= kv->hmask; h++) {
        for (int32_t i = kv->htab[h]; i >= 0; i = kv->blk[i].hnext, n++) {
            CHECK(i < nb && n < nb, "hash chain corrupt in bucket %u", h);
            const struct kv_block *b = &kv->blk[i];
            CHECK(b->hashed && (b->key & kv->hmask) == h, "block %d in bucket %u: hashed %d", i, h,
                  b->hashed);
            CHECK(b->key == block_key(b->parent, b->parent_gen, kv->tok + (size_t)i * kv->bs, kv->bs),
                  "block %d: key does not match its tokens", i);
        }
    }
    int32_t n_hashed = 0;
    for (int32_t i = 0; i < nb; i++) n_hashed += kv->blk[i].hashed;
    CHECK(n == n_hashed, "hash table holds %d blocks, %d are hashed", n, n_hashed);
fail:
    core_free(cnt);
    core_free(seen);
    return st;
}
