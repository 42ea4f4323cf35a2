/*
 * kv_layout.c - the tile geometry of kv_layout.h for a (type, block size,
 * head_dim, kv heads) combination.
 */
#include <string.h>

#include "anvil.h"
#include "kv/kv_layout.h"

static size_t round64(size_t n) { return (n + 63) & ~(size_t)63; }

int kn_kv_layout_init(struct kn_kv_layout *l, int type, int block_size, int head_dim,
                      int n_head_kv) {
    if (block_size < KN_KV_BLOCK_STEP || block_size % KN_KV_BLOCK_STEP || block_size > 1024)
        return -1;
    if (head_dim < 32 || head_dim % 32 || head_dim > KN_KV_MAX_HEAD_DIM) return -1;
    if (n_head_kv < 1 || n_head_kv > 1024) return -1;
    memset(l, 0, sizeof(*l));
    l->type = type;
    l->block_size = block_size;
    l->head_dim = head_dim;
    l->n_head_kv = n_head_kv;
    size_t n = (size_t)block_size * (size_t)head_dim;
    if (type == ANVIL_TYPE_F16) {
        l->v_off = n * 2;
        l->tile_bytes = n * 4;
    } else if (type == ANVIL_TYPE_Q8_0) {
        size_t scales = round64((size_t)block_size * (size_t)(head_dim / 32) * 2);
        l->ks_off = n;
        l->v_off = n + scales;
        l->vs_off = l->v_off + n;
        l->tile_bytes = round64(l->vs_off + scales);
    } else {
        return -1;
    }
    return 0;
}
