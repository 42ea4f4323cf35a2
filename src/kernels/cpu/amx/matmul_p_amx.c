/*
 * matmul_p_amx.c - the P16 packed matmul (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL,
 * Q8_0 weights times Q8A activations) of 16 tokens and more, with the
 * block dot products on AMX and the float steps of the AVX-512 kernel.
 *
 * Why: one TDPBSSD multiplies a 16-token x 32-byte activation tile by a
 * 32 x 16-row weight tile, 8192 multiply-adds, where vpdpbusd does 64. On
 * Sapphire Rapids class cores the tile unit runs about 10x the int8 rate
 * of the VNNI loop (bench --kernels prints both peaks), so the integer
 * work leaves the vector ports to the float steps every block needs
 * anyway: per token, row and block, convert, scale and accumulate.
 *
 * How, per 16-row weight tile (cpu/avx512/p16.h) and window of WB blocks:
 *   1. the window's blocks are unpacked once into AMX's B layout: block b
 *      as 8 rows of 64 bytes, row j holding elements 4j..4j+3 of the 16
 *      weight rows - the P16 chunk order, so Q8_0 needs only its +128 bias
 *      removed and Q4/Q5 their nibbles split (chunk c's low nibbles are
 *      row c, its high nibbles row 4 + c). Values are signed (Q4_0 q - 8,
 *      Q5_0 q - 16, IQ4_NL its table value, Q8_0 q; Q4_1, Q5_1 q), so
 *      TDPBSSD yields sum(qw * qa) - k * sum(qa), the integer the VNNI
 *      kernel reaches from its correction, with no correction here;
 *   2. for every 16 tokens: per block, load the activations' block (16
 *      rows of 32 bytes, x_stride apart) and the unpacked weights, one
 *      TDPBSSD into a zeroed C tile, store C (16 tokens x 16 rows, int32),
 *      and run matmul_p.c's per-lane float steps on it in block order
 *      (acc = fma(float(isum), dw * da, acc), Q4_1/Q5_1 + mw * sa, IQ4_NL
 *      unfused). Two C tiles alternate so that the next block's tile work
 *      overlaps this block's float steps. acc is carried across windows
 *      through y (a float stored and reloaded is the same float).
 * So every output lane runs the AVX-512 kernel's operations in its order:
 * y is bit-identical to kn_matmul_p_*_avx512 (and batch-invariant with
 * it), which unit_kernels checks with AMX on and off.
 *
 * Tile state: each call loads its configuration (the thread pool's
 * threads may run anything in between) and releases the tiles on return.
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/amx/amx.h"
#include "kernels/cpu/avx512/p16.h"

enum {
    TM = 16,  /* tokens per activation tile */
    WB = 64,  /* blocks per unpacked window (32 KiB), at most */
    /* one token tile: 32 blocks, so that the window and the tile's
     * activations for it (16 KiB each at any width) stay in L1 together
     * (1.07-1.25x at 16 tokens on rows of 1536-8192, commit fc65fbd); with
     * more token tiles per unpack the wider window is faster */
    WB1 = 32,
    BT = 512, /* bytes of one unpacked block: 8 rows x 64 */
    LAG = 2,  /* blocks between a C tile's store and its float steps */
    NCB = 4   /* C tile buffers (a ring; > LAG + 1) */
};
#define XCH_BYTES ((size_t)1 << 20) /* activation bytes per token chunk */

/* tiles: 0-3 C (16 tokens x 16 int32); 4, 5 A (16 tokens x 32 int8);
 * 6, 7 B (8 x 64 int8) */
static const struct tile_cfg cfg = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, QK, QK, 64, 64},
    .rows = {TM, TM, TM, TM, TM, TM, QK / 4, QK / 4},
};

static void tile_config(void) { _tile_loadconfig(&cfg); }

/* Blocks [b0, b0 + wl) of tile tp into wq (B layout, signed) and their d
 * (and m) into dwf (mwf) as floats. */
static inline __attribute__((always_inline)) void unpack(int pt, const uint8_t *tp, int nb, int b0, int wl,
                                                         int8_t *wq, float *dwf, float *mwf) {
    const __m512i nib = _mm512_set1_epi8(0x0f), b4 = _mm512_set1_epi8(0x10);
    __m128i l16;
    if (pt == T_IQ4_NL)
        l16 = _mm_loadu_si128((const __m128i *)kn_iq4nl_values);
    else if (pt == T_Q4_0)
        l16 = _mm_setr_epi8(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    else
        l16 = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i lut = _mm512_broadcast_i32x4(l16);
    for (int j = 0; j < wl; j++) {
        const int b = b0 + j;
        const uint8_t *q = tp + q_off(pt, nb, b);
        int8_t *o = wq + (size_t)j * BT;
        if (pt == T_Q8_0) {
            const __m512i bias = _mm512_set1_epi8((char)0x80);
#pragma GCC unroll 8
            for (int c = 0; c < 8; c++)
                _mm512_store_si512(o + 64 * c, _mm512_xor_si512(_mm512_load_si512(q + 64 * c), bias));
        } else {
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                __m512i v = _mm512_load_si512(q + 64 * c), lo, hi;
                __m512i l4 = _mm512_and_si512(v, nib), h4 = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                if (is_q5(pt)) { /* nibble | the high bit moved to bit 4 (matmul_p.c) */
                    const __m512i hb = _mm512_load_si512(q + 4 * 64);
                    lo = _mm512_ternarylogic_epi32(l4, _mm512_slli_epi16(hb, 4 - c), b4, 0xF8);
                    hi = _mm512_ternarylogic_epi32(h4, _mm512_srli_epi16(hb, c), b4, 0xF8);
                    if (pt == T_Q5_0) {
                        lo = _mm512_sub_epi8(lo, b4);
                        hi = _mm512_sub_epi8(hi, b4);
                    }
                } else {
                    lo = _mm512_shuffle_epi8(lut, l4);
                    hi = _mm512_shuffle_epi8(lut, h4);
                }
                _mm512_store_si512(o + 64 * c, lo);
                _mm512_store_si512(o + 64 * (4 + c), hi);
            }
        }
        _mm512_store_ps(dwf + 16 * j,
                        _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(tp + d_off(pt, b)))));
        if (has_m(pt))
            _mm512_store_ps(mwf + 16 * j,
                            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(tp + m_off(pt, nb, b)))));
    }
}

/* matmul_p.c's float steps for one block of 16 tokens: c the C tile as
 * stored (token t's 16 rows at c + 16 t), da[t] and sa[t] token t's da
 * and sa of the block. */
static inline __attribute__((always_inline)) void block_steps(int pt, __m512 acc[TM], const int32_t *c,
                                                              const float *dwf, const float *mwf,
                                                              const float *da, const float *sa) {
    const __m512 dw = _mm512_load_ps(dwf);
    const __m512 mw = has_m(pt) ? _mm512_load_ps(mwf) : _mm512_setzero_ps();
#pragma GCC unroll 16
    for (int t = 0; t < TM; t++) {
        __m512 sc = _mm512_mul_ps(dw, _mm512_set1_ps(da[t]));
        __m512 f = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * t));
        if (pt == T_IQ4_NL) {
            acc[t] = _mm512_add_ps(acc[t], _mm512_mul_ps(sc, f));
        } else {
            acc[t] = _mm512_fmadd_ps(f, sc, acc[t]);
            if (has_m(pt)) acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(sa[t]), acc[t]);
        }
    }
}

/* Block J's tile product into C tile J % 4, from A and B tiles of J's
 * parity (tiles 4, 6 and 5, 7): activations at xa, weights at wq. */
#define AMX_MUL1(C, A, B, J)                                                                                   \
    do {                                                                                                       \
        _tile_loadd(A, xa + (size_t)(J)*BT, QK);                                                               \
        _tile_loadd(B, wq + (size_t)(J)*BT, 64);                                                               \
        _tile_zero(C);                                                                                         \
        _tile_dpbssd(C, A, B);                                                                                 \
    } while (0)
#define AMX_MUL(J)                                                                                             \
    do {                                                                                                       \
        switch ((J) % 4) {                                                                                     \
        case 0:                                                                                                \
            AMX_MUL1(0, 4, 6, J);                                                                              \
            break;                                                                                             \
        case 1:                                                                                                \
            AMX_MUL1(1, 5, 7, J);                                                                              \
            break;                                                                                             \
        case 2:                                                                                                \
            AMX_MUL1(2, 4, 6, J);                                                                              \
            break;                                                                                             \
        default:                                                                                               \
            AMX_MUL1(3, 5, 7, J);                                                                              \
            break;                                                                                             \
        }                                                                                                      \
    } while (0)
/* block J's C tile into its ring buffer */
#define AMX_STORE(J)                                                                                           \
    do {                                                                                                       \
        switch ((J) % 4) {                                                                                     \
        case 0:                                                                                                \
            _tile_stored(0, cb[(J) % NCB], 64);                                                                \
            break;                                                                                             \
        case 1:                                                                                                \
            _tile_stored(1, cb[(J) % NCB], 64);                                                                \
            break;                                                                                             \
        case 2:                                                                                                \
            _tile_stored(2, cb[(J) % NCB], 64);                                                                \
            break;                                                                                             \
        default:                                                                                               \
            _tile_stored(3, cb[(J) % NCB], 64);                                                                \
            break;                                                                                             \
        }                                                                                                      \
    } while (0)

/* A scratch buffer per thread, grown on demand and kept (a fresh mapping
 * per call would fault its pages in every time); freed when the thread
 * ends. NULL when out of memory. */
struct scratch {
    size_t cap;
    void *p;
};
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;
static void scratch_free(void *v) {
    struct scratch *sc = v;
    free(sc->p);
    free(sc);
}
static void scratch_init(void) {
    if (pthread_key_create(&scratch_key, scratch_free)) abort();
}
void *kn_amx_scratch(size_t bytes) {
    pthread_once(&scratch_once, scratch_init);
    struct scratch *sc = pthread_getspecific(scratch_key);
    if (!sc) {
        sc = calloc(1, sizeof *sc);
        if (!sc) return NULL;
        if (pthread_setspecific(scratch_key, sc)) {
            free(sc);
            return NULL;
        }
    }
    if (sc->cap < bytes) {
        size_t cap = (bytes + 4095) & ~(size_t)4095;
        void *p = aligned_alloc(64, cap);
        if (!p) return NULL;
        free(sc->p);
        sc->p = p;
        sc->cap = cap;
    }
    return sc->p;
}

static inline __attribute__((always_inline)) int matmul_p_amx(int pt, float *restrict y, size_t ldy,
                                                              const uint8_t *restrict w,
                                                              const uint8_t *restrict x, size_t x_stride, int n,
                                                              int n_tokens, int r0, int r1) {
    const int nb = n / QK, ntk = n_tokens / TM * TM;
    const size_t ts = tile_size(pt, nb);
    const int k0 = r0 / R, k1 = (r1 + R - 1) / R, wbl = ntk > TM ? WB : WB1;
    int8_t wq[WB * BT] __attribute__((aligned(64)));
    float dwf[WB * 16] __attribute__((aligned(64))), mwf[WB * 16] __attribute__((aligned(64)));
    int32_t cb[NCB][TM * 16] __attribute__((aligned(64)));
    if (ntk == 0 || r0 >= r1) return 0;
    /* The call's activations once more, as the tiles read them: token
     * tile tt, block b at xt + (tt * nb + b) * BT, 16 rows of 32 bytes (a
     * tile load then reads 8 whole lines in a row, not 16 half lines 16
     * rows apart), and every token's da (and sa) by token tile, block,
     * token, so that the float steps broadcast them from one pointer. */
    const size_t xbytes = (size_t)ntk * n, fl = (size_t)ntk * nb;
    uint8_t *xt = kn_amx_scratch(xbytes + fl * (has_m(pt) ? 2 : 1) * sizeof(float));
    if (!xt) return 0;
    float *dt = (float *)(xt + xbytes), *st = dt + (has_m(pt) ? fl : 0);
    for (int t = 0; t < ntk; t++) {
        const uint8_t *row = x + (size_t)t * x_stride;
        const float *d = (const float *)(row + n);
        const size_t tb = (size_t)(t / TM) * nb;
        uint8_t *o = xt + tb * BT + (size_t)(t % TM) * QK;
        for (int b = 0; b < nb; b++)
            _mm256_store_si256((__m256i *)(o + (size_t)b * BT),
                               _mm256_loadu_si256((const __m256i *)(row + (size_t)b * QK)));
        for (int b = 0; b < nb; b++) dt[(tb + b) * TM + t % TM] = d[b];
        if (has_m(pt))
            for (int b = 0; b < nb; b++) st[(tb + b) * TM + t % TM] = d[nb + b];
    }
    tile_config();
    /* tokens in chunks whose activations stay in L2 (XCH_BYTES) while
     * every weight tile passes over them */
    int tch = (int)(XCH_BYTES / (size_t)n) / TM * TM;
    if (tch < TM) tch = TM;
    for (int c0 = 0; c0 < ntk; c0 += tch) {
        const int c1 = ntk - c0 < tch ? ntk : c0 + tch;
        for (int k = k0; k < k1; k++) {
            const uint8_t *tp = w + (size_t)k * ts;
            const __mmask16 sm = lanes(k, r0, r1);
            for (int b0 = 0; b0 < nb; b0 += wbl) {
                const int wl = nb - b0 < wbl ? nb - b0 : wbl;
                unpack(pt, tp, nb, b0, wl, wq, dwf, mwf);
                for (int t0 = c0; t0 < c1; t0 += TM) {
                    const uint8_t *xa = xt + ((size_t)t0 / TM * nb + b0) * BT;
                    float *yt = y + (size_t)t0 * ldy + (size_t)k * R;
                    const float *dat = dt + (size_t)t0 * nb + (size_t)b0 * TM,
                                *sat = st + (size_t)t0 * nb + (size_t)b0 * TM;
                    __m512 acc[TM];
#pragma GCC unroll 16
                    for (int t = 0; t < TM; t++) {
                        acc[t] = b0 ? _mm512_maskz_loadu_ps(sm, yt + (size_t)t * ldy) : _mm512_setzero_ps();
                    }
                    /* a software pipeline: step s multiplies block s, stores
                     * block s - 1's C tile (its product done by then) and runs
                     * the float steps of block s - 1 - LAG. A tile store
                     * waits for its product, and a vector load of the stored
                     * bytes for the store to retire (no forwarding); in
                     * order, each would stall the core. */
                    for (int s = 0; s < wl + 1 + LAG; s++) {
                        if (s < wl) AMX_MUL(s);
                        if (s >= 1 && s <= wl) AMX_STORE(s - 1);
                        const int e = s - 1 - LAG;
                        if (e >= 0)
                            block_steps(pt, acc, cb[e % NCB], dwf + 16 * e, mwf + 16 * e, dat + TM * e,
                                        sat + TM * e);
                    }
#pragma GCC unroll 16
                    for (int t = 0; t < TM; t++) _mm512_mask_storeu_ps(yt + (size_t)t * ldy, sm, acc[t]);
                }
            }
        }
    }
    _tile_release();
    return ntk;
}

int kn_matmul_p_amx(int pt, float *restrict y, size_t ldy, const void *restrict w, const void *restrict x,
                    size_t x_stride, int n, int n_tokens, int r0, int r1) {
    switch (pt) {
    case T_Q8_0:
        return matmul_p_amx(T_Q8_0, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    case T_Q4_0:
        return matmul_p_amx(T_Q4_0, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    case T_Q4_1:
        return matmul_p_amx(T_Q4_1, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    case T_Q5_0:
        return matmul_p_amx(T_Q5_0, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    case T_Q5_1:
        return matmul_p_amx(T_Q5_1, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    case T_IQ4_NL:
        return matmul_p_amx(T_IQ4_NL, y, ldy, w, x, x_stride, n, n_tokens, r0, r1);
    default:
        return 0;
    }
}
