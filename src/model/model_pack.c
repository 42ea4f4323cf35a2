/*
 * model_pack.c - weight packing: when the kernel table packs a weight
 * type (kn_ops.pack_size), each matrix of that type is copied once into
 * the packed layout (multi-part matrices with their parts stacked) in one
 * allocation, and the mapping's pages under it are released.
 */
#include <string.h>

#include "core/pool.h"
#include "model/loader.h"

/* Packing runs on every online CPU (a 1B model's 800 MB took a second on
 * one core): the tiles of a matrix are split in contiguous runs, one per
 * thread, which zeroes its run and then writes the rows that fall in it,
 * part by part. A tile is written by one thread only, and the bytes are
 * the same whatever the split. */
struct pack_job {
    const struct kn_ops *ops;
    int type, n_in;
    uint8_t *dst;
    size_t tile;        /* bytes per tile */
    int n_tiles;        /* of the whole packed matrix */
    const struct wmat *w;
    int p0, p1;         /* parts [p0, p1) go to this matrix */
};

static void pack_run(void *arg, int ith, int nth) {
    const struct pack_job *j = arg;
    int t0 = (int)((int64_t)j->n_tiles * ith / nth), t1 = (int)((int64_t)j->n_tiles * (ith + 1) / nth);
    if (t0 >= t1) return;
    memset(j->dst + (size_t)t0 * j->tile, 0, (size_t)(t1 - t0) * j->tile);
    int row0 = 0;
    for (int p = j->p0; p < j->p1; p++) {
        int rows = j->w->part[p].rows;
        int a = row0 > t0 * KN_PACK_ROWS ? row0 : t0 * KN_PACK_ROWS;
        int b = row0 + rows < t1 * KN_PACK_ROWS ? row0 + rows : t1 * KN_PACK_ROWS;
        if (a < b)
            j->ops->pack_rows(j->type, j->dst, j->n_in, a, b - a,
                              j->w->part[p].data + (size_t)(a - row0) * j->w->part[p].row_bytes,
                              j->w->part[p].row_bytes);
        row0 += rows;
    }
}

/* Parts [p0, p1) of w (of one type, rows stacked from 0) into dst. */
static void pack_into(const struct kn_ops *ops, struct pool *pool, const struct wmat *w, int p0, int p1,
                      uint8_t *dst, int type, int rows) {
    struct pack_job j = {.ops = ops, .type = type, .n_in = w->n_in, .dst = dst,
                         .tile = ops->pack_size(type, KN_PACK_ROWS, w->n_in),
                         .n_tiles = (rows + KN_PACK_ROWS - 1) / KN_PACK_ROWS, .w = w, .p0 = p0, .p1 = p1};
    if (pool) pool_run(pool, pack_run, &j);
    else pack_run(&j, 0, 1);
}

/* Where the packed copies go: one buffer for all of them (core_malloc_huge:
 * huge pages, so a decode step that streams the whole model walks a few
 * hundred pages; with a buffer per matrix the Q/K/V parts and the o
 * projections, below its 8 MiB threshold, took 4 KiB pages: 12% of the 1B
 * shape's weights), each copy starting on a 4 KiB page. pack_weights runs
 * the packing twice: first with base NULL, which only adds up the sizes. */
struct pack_arena {
    uint8_t *base;
    size_t used;
};
static uint8_t *arena_take(struct pack_arena *a, size_t sz) {
    uint8_t *p = a->base ? a->base + a->used : NULL;
    a->used += (sz + 4095) & ~(size_t)4095;
    return p;
}

/* Parts of different types: each part whose type the kernels pack, on its
 * own (when every part starts on a tile boundary, as tile windows need). */
static void pack_parts(const struct kn_ops *ops, struct pool *pool, struct gguf_file *f, struct wmat *w,
                       struct pack_arena *a) {
    for (int p = 0; p < w->n_parts; p++)
        if (w->part[p].rows % KN_PACK_ROWS) return;
    for (int p = 0; p < w->n_parts; p++) {
        int type = w->part[p].type, rows = w->part[p].rows;
        size_t sz = ops->pack_size(type, rows, w->n_in);
        if (sz == 0) continue;
        uint8_t *dst = arena_take(a, sz);
        if (!dst) continue;
        pack_into(ops, pool, w, p, p + 1, dst, type, rows);
        gguf_release(f, w->part[p].data, (size_t)rows * w->part[p].row_bytes);
        w->part[p].packed = dst;
        w->part[p].packed_tile = ops->pack_size(type, KN_PACK_ROWS, w->n_in);
    }
}

/* Copy w into the kernels' packed layout, if they have one for its type
 * (with a->base NULL: count its bytes only). */
static void pack_wmat(const struct kn_ops *ops, struct pool *pool, struct gguf_file *f, struct wmat *w,
                      struct pack_arena *a) {
    if (w->n_out == 0) return; /* absent (a MoE layer's dense FFN, no shared expert) */
    int type = w->part[0].type;
    for (int p = 1; p < w->n_parts; p++)
        if (w->part[p].type != type) {
            pack_parts(ops, pool, f, w, a);
            return;
        }
    size_t sz = ops->pack_size(type, w->n_out, w->n_in);
    if (sz == 0) return;
    uint8_t *dst = arena_take(a, sz);
    if (!dst) return;
    pack_into(ops, pool, w, 0, w->n_parts, dst, type, w->n_out);
    /* the copy serves every product from now on */
    for (int p = 0; p < w->n_parts; p++)
        gguf_release(f, w->part[p].data, (size_t)w->part[p].rows * w->part[p].row_bytes);
    w->packed = dst;
    w->packed_type = type;
    w->packed_tile = ops->pack_size(type, KN_PACK_ROWS, w->n_in);
}

static void pack_all(struct anvil_model *m, struct pool *pool, struct pack_arena *a) {
    /* a tied lm_head is packed too: the embedding lookup then refaults
     * the few rows it reads from the file */
    pack_wmat(m->ops, pool, m->gguf, &m->output, a);
    for (int l = 0; l < m->hp.n_layer; l++) {
        struct model_layer *ly = &m->layers[l];
        pack_wmat(m->ops, pool, m->gguf, &ly->wqkv, a);
        pack_wmat(m->ops, pool, m->gguf, &ly->wo, a);
        pack_wmat(m->ops, pool, m->gguf, &ly->wgu, a);
        pack_wmat(m->ops, pool, m->gguf, &ly->wdown, a);
        if (!ly->moe) continue;
        /* each expert on its own: a step reads only the chosen ones */
        pack_wmat(m->ops, pool, m->gguf, &ly->moe->router, a);
        for (int e = 0; e < m->hp.n_expert; e++) {
            pack_wmat(m->ops, pool, m->gguf, &ly->moe->gu[e], a);
            pack_wmat(m->ops, pool, m->gguf, &ly->moe->down[e], a);
        }
        pack_wmat(m->ops, pool, m->gguf, &ly->moe->sh_gu, a);
        pack_wmat(m->ops, pool, m->gguf, &ly->moe->sh_down, a);
    }
}

anvil_status pack_weights(struct anvil_model *m) {
    if (!m->ops->pack_size) return ANVIL_OK;
    struct pack_arena a = {0};
    pack_all(m, NULL, &a); /* sizes only */
    if (a.used == 0) return ANVIL_OK;
    if (!(m->packed = core_malloc_huge(a.used))) return ANVIL_ERR_NOMEM;
    /* threads for the copy only; without them it runs on this one */
    struct pool *pool = NULL;
    int nth = cpu_count_online();
    if (nth > 1 && pool_create(nth > 64 ? 64 : nth, &pool) != ANVIL_OK) pool = NULL;
    size_t total = a.used;
    a = (struct pack_arena){.base = m->packed};
    pack_all(m, pool, &a);
    ANVIL_ASSERT(a.used == total);
    pool_free(pool);
    return ANVIL_OK;
}
