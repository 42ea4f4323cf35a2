/*
 * wmat.c - the product with a weight matrix that may come in parts (QKV,
 * gate/up stored as separate tensors, or one packed matrix): each part's
 * rows go to their slice of the output (model.h struct wmat).
 */
#include "model/model.h"

/* ---------------------------------------------------------------------- */
/* multi-part matmul */

void wmat_matmul(const struct kn_ops *ops, const struct wmat *w, float *y, size_t ldy,
                 const void *x, size_t x_stride, int n_tokens, int r0, int r1) {
    if (w->packed) {
        ops->matmul_packed[w->packed_type](y, ldy, w->packed, 0, x, x_stride, w->n_in, n_tokens,
                                           r0, r1);
        return;
    }
    int off = 0;
    for (int p = 0; p < w->n_parts; p++) {
        int rows = w->part[p].rows;
        int a = r0 > off ? r0 : off, b = r1 < off + rows ? r1 : off + rows;
        const uint8_t *xp = (const uint8_t *)x + w->part[p].act_off;
        if (a < b && w->part[p].packed)
            ops->matmul_packed[w->part[p].type](y + off, ldy, w->part[p].packed, 0, xp, x_stride,
                                                w->n_in, n_tokens, a - off, b - off);
        else if (a < b)
            ops->matmul[w->part[p].type](y + off, ldy, w->part[p].data, w->part[p].row_bytes, xp,
                                         x_stride, w->n_in, n_tokens, a - off, b - off);
        off += rows;
    }
}

void wmat_matmul_tile(const struct kn_ops *ops, const struct wmat *w, float *y, size_t ldy,
                      const void *x, size_t x_stride, int n_tokens, int a, int b) {
    if (w->packed) { /* callers cut windows on tile boundaries */
        ANVIL_ASSERT(a % KN_PACK_ROWS == 0);
        ops->matmul_packed[w->packed_type](y, ldy, w->packed + (size_t)(a / KN_PACK_ROWS) * w->packed_tile,
                                           0, x, x_stride, w->n_in, n_tokens, 0, b - a);
        return;
    }
    int off = 0;
    for (int p = 0; p < w->n_parts; p++) {
        int rows = w->part[p].rows;
        int lo = a > off ? a : off, hi = b < off + rows ? b : off + rows;
        const uint8_t *xp = (const uint8_t *)x + w->part[p].act_off;
        int type = w->part[p].type;
        if (lo < hi && w->part[p].packed) { /* parts start on tile boundaries */
            size_t at = (size_t)((lo - off) / KN_PACK_ROWS) * w->part[p].packed_tile;
            ops->matmul_packed[type](y + (lo - a), ldy, w->part[p].packed + at, 0, xp, x_stride,
                                     w->n_in, n_tokens, 0, hi - lo);
        } else if (lo < hi) {
            ops->matmul[type](y + (lo - a), ldy,
                              w->part[p].data + (size_t)(lo - off) * w->part[p].row_bytes,
                              w->part[p].row_bytes, xp, x_stride, w->n_in, n_tokens, 0, hi - lo);
        }
        off += rows;
    }
}
