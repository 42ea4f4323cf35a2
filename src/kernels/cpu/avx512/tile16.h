/*
 * tile16.h - what the packed layouts (p16.h, p16k.h) share: tiles of
 * KN_PACK_ROWS = 16 rows, one per zmm dword lane, and the lanes of a tile
 * a row range covers. Plain C.
 */
#ifndef ANVIL_KN_TILE16_H
#define ANVIL_KN_TILE16_H

#include <stdint.h>

#include "kernels/ops.h"

enum { R = KN_PACK_ROWS }; /* rows per tile = zmm dword lanes */

/* lanes of tile k that hold rows in [r0, r1) */
static inline uint16_t lanes(int k, int r0, int r1) {
    int lo = r0 - k * R, hi = r1 - k * R;
    if (lo < 0) lo = 0;
    if (hi > R) hi = R;
    if (hi <= lo) return 0;
    return (uint16_t)(((1u << hi) - 1) & ~((1u << lo) - 1));
}

#endif
