/*
 * kv_layout.h - the storage format of the paged KV cache: where the K and
 * V of one token and one kv head sit inside a block. The cache
 * (kv_cache.c) writes this layout; the attention kernels (src/attn) read
 * it. Nothing here knows about attention itself.
 *
 * The cache is a pool of blocks of block_size token positions. For one
 * layer, block b and kv head h form a "tile" (kn_kv_layout):
 *   F16:  K^T  f16  (head_dim, block_size)   key j, dim d at [d*block_size + j]
 *         V    f16  (block_size, head_dim)   value j, dim d at [j*head_dim + d]
 *   Q8_0: K^T  int8 (head_dim, block_size), then the K scales
 *              f16  (head_dim/32, block_size): token j's dims 32g..32g+31
 *                                              are kq * scale[g*block_size + j]
 *         V    int8 (block_size, head_dim), then the V scales
 *              f16  (head_dim/32, block_size): token j's dims 32g..32g+31
 *                                              are vq * scale[g*block_size + j]
 *         (ggml's Q8_0 numerics: blocks of 32 along head_dim, f16 scale,
 *         split into quants and scales so SIMD loads stay aligned.)
 * K is stored transposed so that 16 keys of one dim are one vector: the
 * 16 scores of an attention step accumulate in one register with no
 * horizontal sums. V stays row-major for the P.V accumulation. A tile of
 * 16 tokens with head_dim 64 in F16 is 4 KiB, read front to back.
 */
#ifndef ANVIL_KV_LAYOUT_H
#define ANVIL_KV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#define KN_KV_BLOCK_STEP 16     /* block_size is a multiple of this (the
                                 * attention step, src/attn/attn.h) */
#define KN_KV_MAX_HEAD_DIM 256

/* Geometry of one layer of the paged cache as the kernels read it. */
struct kn_kv_layout {
    int type;           /* ANVIL_TYPE_F16 or ANVIL_TYPE_Q8_0 */
    int block_size;     /* tokens per block: a multiple of KN_KV_BLOCK_STEP */
    int head_dim;       /* a multiple of 32, <= KN_KV_MAX_HEAD_DIM */
    int n_head_kv;
    size_t tile_bytes;  /* bytes of one (block, kv head) tile; multiple of 64 */
    size_t v_off;       /* offset of V in a tile */
    size_t ks_off;      /* Q8_0: offset of the K scales in a tile */
    size_t vs_off;      /* Q8_0: offset of the V scales in a tile */
};

/* Fill a layout for (type, block_size, head_dim, n_head_kv). Returns 0, or
 * -1 when the combination is not supported. */
int kn_kv_layout_init(struct kn_kv_layout *l, int type, int block_size, int head_dim,
                      int n_head_kv);

/* Address of the tile of block b, kv head h, given a layer's base. */
static inline const uint8_t *kn_kv_tile(const struct kn_kv_layout *l, const uint8_t *base,
                                        int32_t b, int h) {
    return base + ((size_t)b * (size_t)l->n_head_kv + (size_t)h) * l->tile_bytes;
}

#endif
