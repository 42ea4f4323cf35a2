/*
 * p16.h - the P16 packed layout of the 32-element block types (Q4_0, Q4_1,
 * Q5_0, Q5_1, IQ4_NL, MXFP4, Q8_0): type codes and byte offsets inside a tile.
 * The layout is described in matmul_p.c, which packs and reads it with
 * AVX-512; cpu/amx/matmul_p_amx.c reads the same tiles with AMX. Plain C,
 * no intrinsics: any translation unit may include it.
 */
#ifndef ANVIL_KN_P16_H
#define ANVIL_KN_P16_H

#include "kernels/cpu/avx512/tile16.h"
#include "kernels/ops.h"
#include "kernels/blocks.h"

enum { T_Q8_0, T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_IQ4_NL, T_MXFP4 };
enum { GB = 8 }; /* blocks per group: d (and m) first, then the quants */

static inline int ptype(int type) {
    switch (type) {
    case ANVIL_TYPE_Q8_0:
        return T_Q8_0;
    case ANVIL_TYPE_Q4_0:
        return T_Q4_0;
    case ANVIL_TYPE_Q4_1:
        return T_Q4_1;
    case ANVIL_TYPE_Q5_0:
        return T_Q5_0;
    case ANVIL_TYPE_Q5_1:
        return T_Q5_1;
    case ANVIL_TYPE_IQ4_NL:
        return T_IQ4_NL;
    case ANVIL_TYPE_MXFP4:
        return T_MXFP4;
    default:
        return -1;
    }
}

static inline int is_q5(int pt) { return pt == T_Q5_0 || pt == T_Q5_1; }
/* an integer correction k * sum(qa) per block (see Numerics) */
static inline int has_corr(int pt) { return pt != T_Q4_1 && pt != T_Q5_1; }
static inline int chunks(int pt) { return pt == T_Q8_0 ? 8 : is_q5(pt) ? 5 : 4; }
static inline int has_m(int pt) { return pt == T_Q4_1 || pt == T_Q5_1; }

/* byte offsets inside a tile of nb blocks: groups of GB blocks, each its
 * head (d, then m) rounded up to 64 bytes, then its quants */
static inline size_t head_bytes(int pt, int gl) {
    return ((size_t)gl * (has_m(pt) ? 64 : 32) + 63) & ~(size_t)63;
}
static inline size_t grp_bytes(int pt, int gl) { return head_bytes(pt, gl) + (size_t)gl * chunks(pt) * 64; }
static inline int grp_len(int nb, int b) { return nb - b / GB * GB < GB ? nb - b / GB * GB : GB; }
static inline size_t grp_off(int pt, int b) { return (size_t)(b / GB) * grp_bytes(pt, GB); }
static inline size_t q_off(int pt, int nb, int b) {
    return grp_off(pt, b) + head_bytes(pt, grp_len(nb, b)) + (size_t)(b % GB) * chunks(pt) * 64;
}
static inline size_t d_off(int pt, int b) { return grp_off(pt, b) + (size_t)(b % GB) * 32; }
static inline size_t m_off(int pt, int nb, int b) { return d_off(pt, b) + (size_t)grp_len(nb, b) * 32; }
static inline size_t tile_size(int pt, int nb) {
    return grp_off(pt, nb - 1) + grp_bytes(pt, grp_len(nb, nb - 1));
}

#endif
