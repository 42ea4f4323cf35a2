/*
 * avx512.h - the avx512 kernels, named so that the table (ops.c) and the
 * tests can reach them (kn_<op>_avx512). Signatures are those of
 * kernels/ops.h. Only files under cpu/avx512/ may call them: they are
 * compiled with the AVX-512 -m flags, and dispatch.c hands out the table
 * only when CPUID says the CPU can run it.
 */
#ifndef ANVIL_KN_AVX512_H
#define ANVIL_KN_AVX512_H

#include "core/core.h"
#include "kernels/ops.h"

/* Weight streams of the packed matmuls' one-token matvec (decode;
 * matmul_p.c, matmul_pk.c): how many tiles it walks in lockstep (separate
 * memory streams) and whether it prefetches them in software. Tuned per
 * vendor, on cold (streamed) weights:
 *   Intel (Cascade Lake): 4 streams, each prefetched a page ahead into L1:
 *     ~1.5x no prefetch, and 4 streams reach ~100% of the read bandwidth
 *     where one reaches ~60% (commit 9faad9c);
 *   AMD (Zen 4): the tiles in order, one stream, no software prefetch
 *     (Zen 5: one stream, prefetched; kn_one_pf below).
 *     The tiles are laid out to be read strictly forward, and the hardware
 *     prefetchers then hold one core at 22-31 GB/s; prefetching into L2
 *     (prefetcht1) holds it at 17-21, into L1 with 4 streams lower still
 *     (1B-shaped Q4_K_M decode at 2 threads: 0.6x llama.cpp's; commit
 *     dd84934).
 * The multi-token tiles (prefill) reuse each weight line from L1 for every
 * token of a register tile and prefetch into L1 everywhere: prefetching
 * into L2 costs 1B-shaped prefill about 10% on Zen 4. Speed only: the
 * arithmetic is the same either way. */
static inline int kn_one_stream(void) { return cpu_get_features()->amd; }
/* Whether the one stream (AMD) is also prefetched in software, a page
 * ahead into L1. Zen 5 (family 0x1A): yes. Its hardware prefetchers alone
 * held one core at 12-16 GB/s on the 32-element and K-quant tiles (of
 * 31 GB/s one core reads), and with the prefetch 26-33 GB/s, as fast as 4
 * prefetched streams (MXFP4 2.5x, Q4_0 2.4x, Q4_K 1.9x; microbench
 * --kernels --m 1 -t 1, cold weights). Zen 4 keeps what it measured. */
static inline int kn_one_pf(void) { return cpu_get_features()->family >= 0x1a; }
/* always_inline: GCC 12's IPA mod-ref pass takes a plain inline function
 * whose only statement is a prefetch for one without effects and deletes
 * its calls before inlining it, leaving the matmuls with no prefetch at
 * all (fixed in commit 25c113d; tests/py/test_prefetch.py checks the
 * objects) */
static inline __attribute__((always_inline)) void kn_pf(const void *p) { _mm_prefetch((const char *)p, _MM_HINT_T0); }

#define DECLARE_MATMUL_AVX512(NAME) \
    void NAME(float *restrict y, size_t ldy, const void *restrict w, size_t w_stride, \
              const void *restrict x, size_t x_stride, int n, int n_tokens, int r0, int r1);
DECLARE_MATMUL_AVX512(kn_matmul_q8_0_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_q4_0_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_q4_1_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_f16_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_f32_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_bf16_avx512)    /* AVX512_BF16 (vdpbf16ps) */
DECLARE_MATMUL_AVX512(kn_matmul_bf16f_avx512)   /* AVX-512F only: bf16 widened to f32 */
/* packed (P16) layouts, matmul_p.c */
DECLARE_MATMUL_AVX512(kn_matmul_p_q8_0_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_p_q4_0_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_p_q4_1_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_p_q5_0_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_p_q5_1_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_p_iq4_nl_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_p_mxfp4_avx512)
/* packed K-quant layouts (P16K), matmul_pk.c; kn_pack_*_avx512 route the
 * K types to these */
DECLARE_MATMUL_AVX512(kn_matmul_p_q4_k_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_p_q5_k_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_p_q6_k_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_p_iq4_xs_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_p_q2_k_avx512)
DECLARE_MATMUL_AVX512(kn_matmul_p_q3_k_avx512)
size_t kn_pack_size_pk_avx512(int type, int rows, int n);
void kn_pack_rows_pk_avx512(int type, void *dst, int n, int row0, int count, const void *src,
                            size_t src_stride);
size_t kn_pack_size_avx512(int type, int rows, int n);
void kn_pack_rows_avx512(int type, void *dst, int n, int row0, int count, const void *src,
                         size_t src_stride);

void kn_act_q8a_avx512(void *restrict dst, const float *restrict x, int n);
void kn_act_q8k_avx512(void *restrict dst, const float *restrict x, int n);
void kn_act_q8a_q8k_avx512(void *restrict dst, const float *restrict x, int n);
void kn_act_bf16_avx512(void *restrict dst, const float *restrict x, int n);
void kn_rmsnorm_avx512(float *y, const float *x, const float *w, int n, float eps);
void kn_add_rmsnorm_avx512(float *restrict res, const float *restrict delta, float *restrict y,
                           const float *restrict w, int n, float eps);
void kn_rmsnorm_act_avx512(void *restrict dst, const float *restrict x, const float *restrict w,
                           int n, float eps, int act);
void kn_silu_mul_avx512(float *y, const float *g, const float *u, int n);
void kn_gelu_mul_avx512(float *y, const float *g, const float *u, int n);
/* enc.c: the encoder ops of kernels/ops.h */
void kn_layernorm_avx512(float *y, const float *x, const float *w, const float *b, int n, float eps);
void kn_gelu_erf_avx512(float *y, const float *x, int n);
void kn_gelu_mul_act_avx512(void *restrict dst, const float *restrict g, const float *restrict u,
                            int n, int act);
void kn_silu_mul_act_avx512(void *restrict dst, const float *restrict g, const float *restrict u,
                            int n, int act);
void kn_rope_avx512(float *x, int n_head, int head_dim, int pos, const float *inv_freq);

/* The two avx512 tables: with AVX512_BF16 instructions (BF16 matmul by
 * vdpbf16ps) and without; dispatch.c picks by CPUID. */
double kn_int8_peak_avx512(double seconds);
double kn_f32_peak_avx512(double seconds);

extern const struct kn_ops kn_ops_avx512;
extern const struct kn_ops kn_ops_avx512_nobf16;

#endif
