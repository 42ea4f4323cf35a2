/*
 * blocks32.c - searched quantizers for the 32-element block types whose
 * scale is one f16 per block: Q5_0, Q5_1 and IQ4_NL.
 *
 * Error measure: search.c's weighted squared error, with sigma2 the
 * block's mean square. Per block: the float fit of search.c, then the
 * stored (f16-rounded) scale is searched again: the least-squares scale
 * of the indices at the rounded scale, and the f16 neighbours, keeping
 * whichever decodes with the lowest error. (llama.cpp without an
 * importance matrix quantizes Q5_0/Q5_1 by plain min/max and IQ4_NL with a
 * candidate search of the float scale only.)
 *
 * Layouts (GGUF): Q5_0 x = d * (q - 16), Q5_1 x = d * q + m, q 5-bit with
 * the low nibbles of elements j and j + 16 in qs[j] and the fifth bits in
 * qh (bit j for element j); IQ4_NL x = d * table[q], nibbles as Q5_0's.
 */
#include <string.h>

#include "kernels/blocks.h"
#include "quantize/quantize_int.h"

/* Next f16 value away from (dir > 0) or towards (dir < 0) zero; 0 when
 * there is none (zero magnitude, or the next would be inf). */
static bool f16_step(float v, int dir, float *out) {
    kn_f16 h = kn_f32_to_f16(v);
    uint16_t mag = h & 0x7fff;
    if (dir < 0 && mag == 0) return false;
    if (dir > 0 && mag >= 0x7bff) return false;
    h = (kn_f16)((h & 0x8000) | (uint16_t)(mag + (dir > 0 ? 1 : -1)));
    *out = kn_f16_to_f32(h);
    return true;
}

/* The f16 scale of a symmetric block and its indices. */
static float sym_f16(const struct qs_grid *g, const float *x, const float *w, uint8_t *L) {
    uint8_t Lc[QK];
    float d = qs_f16_round(qs_fit_sym(g, QK, x, w, L, NULL));
    double best = qs_sym_round(g, QK, x, w, d, L);
    for (int it = 0; it < 4; it++) {
        float d2 = qs_f16_round((float)qs_sym_ls(g, QK, x, w, L));
        if (d2 == d) break;
        double e = qs_sym_round(g, QK, x, w, d2, Lc);
        if (!(e < best)) break;
        best = e, d = d2;
        memcpy(L, Lc, QK);
    }
    float d0 = d;
    for (int dir = -1; dir <= 1; dir += 2) {
        float d2;
        if (!f16_step(d0, dir, &d2)) continue;
        double e = qs_sym_round(g, QK, x, w, d2, Lc);
        if (e < best) {
            best = e, d = d2;
            memcpy(L, Lc, QK);
        }
    }
    return d;
}

static void pack_5bit(const uint8_t *L, uint8_t *qs, uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < QK / 2; j++) {
        qs[j] = (uint8_t)((L[j] & 0xf) | (L[j + QK / 2] & 0xf) << 4);
        h |= (uint32_t)(L[j] >> 4) << j;
        h |= (uint32_t)(L[j + QK / 2] >> 4) << (j + QK / 2);
    }
    for (int b = 0; b < 4; b++) qh[b] = (uint8_t)(h >> (8 * b));
}

void qt_quantize_q5_0(const float *x, void *dst, int64_t n) {
    struct blk_q5_0 *y = dst;
    float w[QK];
    uint8_t L[QK];
    for (int64_t b = 0; b < n / QK; b++, x += QK) {
        qs_weights(x, QK, w);
        float d = sym_f16(&qs_grid_q5, x, w, L);
        y[b].d = kn_f32_to_f16(d);
        pack_5bit(L, y[b].qs, y[b].qh);
    }
}

void qt_quantize_iq4_nl(const float *x, void *dst, int64_t n) {
    struct blk_iq4_nl *y = dst;
    float w[QK];
    uint8_t L[QK];
    for (int64_t b = 0; b < n / QK; b++, x += QK) {
        qs_weights(x, QK, w);
        float d = sym_f16(&qs_grid_iq4, x, w, L);
        y[b].d = kn_f32_to_f16(d);
        for (int j = 0; j < QK / 2; j++) y[b].qs[j] = (uint8_t)(L[j] | L[j + QK / 2] << 4);
    }
}

void qt_quantize_q5_1(const float *x, void *dst, int64_t n) {
    struct blk_q5_1 *y = dst;
    float w[QK];
    uint8_t L[QK], Lc[QK];
    for (int64_t b = 0; b < n / QK; b++, x += QK) {
        qs_weights(x, QK, w);
        float o;
        float s = qs_fit_affine(31, false, QK, x, w, L, &o, NULL);
        float d = qs_f16_round(s), m = qs_f16_round(o);
        double best = qs_aff_round(31, QK, x, w, d, m, L);
        for (int it = 0; it < 4; it++) {
            double oo, ss = qs_aff_ls(QK, x, w, L, false, &oo);
            float d2 = qs_f16_round((float)ss), m2 = qs_f16_round((float)oo);
            if (d2 == d && m2 == m) break;
            double e = qs_aff_round(31, QK, x, w, d2, m2, Lc);
            if (!(e < best)) break;
            best = e, d = d2, m = m2;
            memcpy(L, Lc, QK);
        }
        y[b].d = kn_f32_to_f16(d);
        y[b].m = kn_f32_to_f16(m);
        pack_5bit(L, y[b].qs, y[b].qh);
    }
}
