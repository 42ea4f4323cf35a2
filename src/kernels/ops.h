/*
 * ops.h - kernel signatures and the per-ISA kernel table.
 *
 * Kernels are single-threaded and work on a slice given by the caller
 * (rows [r0, r1)); the thread pool splits work outside them, so each
 * variant can be compared with the reference on the same slice.
 *
 * Variants: kn_ops_ref (src/kernels/cpu/ref, plain C11: the specification),
 * kn_ops_avx2, kn_ops_avx512. Entries a variant does not implement point at
 * the reference. kn_select() picks one from CPUID (or ANVIL_KERNELS).
 *
 * Batch invariance: within one variant, the value written for (token t,
 * row r) of a matmul must not depend on n_tokens, r0 or r1 - the
 * reduction order of each dot product is fixed. The serving engine relies
 * on this so that a request's greedy output does not depend on its batch.
 */
#ifndef ANVIL_KN_OPS_H
#define ANVIL_KN_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anvil.h"
#include "kernels/blocks.h"

#define KN_TYPE_MAX 40  /* table size: ggml type ids 0..39 */

/* y[t*ldy + r] = dot(W row r, X row t) for t in [0, n_tokens), r in [r0, r1).
 *   w: weight rows of n elements in the weight type's format, w_stride bytes apart
 *   x: activation rows in kn_act_for_type(type) format, x_stride bytes apart
 *   n: row length (multiple of 32 for quantized types) */
typedef void (*kn_matmul_fn)(float *restrict y, size_t ldy, const void *restrict w,
                             size_t w_stride, const void *restrict x, size_t x_stride, int n,
                             int n_tokens, int r0, int r1);

/* Convert one float row of n elements into an activation format. */
typedef void (*kn_act_fn)(void *restrict dst, const float *restrict x, int n);

/* dst[i * stride] = x[i] rounded to F16 (nearest even; overflow to inf,
 * NaN to a quiet NaN keeping the sign and top payload bits): the same
 * bits in every variant (kn_f32_to_f16). */
typedef void (*kn_f16_row_fn)(kn_f16 *dst, size_t stride, const float *x, int n);

/* y = x / rms(x) * w, rms = sqrt(mean(x^2) + eps); y may alias x. */
typedef void (*kn_rmsnorm_fn)(float *y, const float *x, const float *w, int n, float eps);

/* res += delta; y = rmsnorm(res) * w  (one pass over the row). */
typedef void (*kn_add_rmsnorm_fn)(float *restrict res, const float *restrict delta,
                                  float *restrict y, const float *restrict w, int n, float eps);

/* Fused norm + activation quantization: act(dst) of rmsnorm(x) * w. */
typedef void (*kn_rmsnorm_act_fn)(void *restrict dst, const float *restrict x,
                                  const float *restrict w, int n, float eps, int act);

/* y[i] = silu(g[i]) * u[i]; y may alias g. */
typedef void (*kn_silu_mul_fn)(float *y, const float *g, const float *u, int n);

/* Fused SiLU-gate + activation conversion for the down projection: act(dst)
 * of silu(g) * u (the unfused composition is the definition). */
typedef void (*kn_silu_mul_act_fn)(void *restrict dst, const float *restrict g,
                                   const float *restrict u, int n, int act);

/* Rotate n_head heads of head_dim in place at position pos (Llama "norm"
 * RoPE: adjacent pairs (2i, 2i+1) rotated by pos * inv_freq[i]). */
typedef void (*kn_rope_fn)(float *x, int n_head, int head_dim, int pos, const float *inv_freq);

/* RoPE on the first n_rot dims of each head (n_rot even, <= head_dim; the
 * rest is left alone), with theta_i = f32(pos * inv_freq[i]), i < n_rot/2:
 *   neox == 0: pairs (2i, 2i+1) (the "norm" layout of Llama);
 *   neox != 0: pairs (i, i + n_rot/2) (GPT-NeoX layout: Qwen, Gemma, Phi-3).
 * rope_ext with neox == 0 and n_rot == head_dim equals rope. */
typedef void (*kn_rope_ext_fn)(float *x, int n_head, int head_dim, int n_rot, int pos,
                               const float *inv_freq, int neox);

/* Gated GELU (tanh approximation), written as the sigmoid form it equals:
 *   gelu(g) = g * sigmoid(2z) = g / (1 + e^(-2z)), z = sqrt(2/pi)(g + 0.044715 g^3),
 * y[i] = gelu(g[i]) * u[i]; y may alias g. (0.5 g (1 + tanh z) is the same
 * function; the sigmoid form shares the exp of SiLU.) */
typedef void (*kn_gelu_mul_fn)(float *y, const float *g, const float *u, int n);
typedef void (*kn_gelu_mul_act_fn)(void *restrict dst, const float *restrict g,
                                   const float *restrict u, int n, int act);

/* Weight repacking. A variant may keep quantized matrices in a layout of
 * its own, built once at load time, in tiles of KN_PACK_ROWS rows:
 *   pack_size(type, rows, n): bytes of the packed rows x n matrix; 0 when
 *     the variant keeps this type (or shape) in GGUF layout;
 *   pack_rows(type, dst, n, row0, count, src, src_stride): write the GGUF
 *     rows src[i] (src_stride bytes apart) as rows row0 + i of the packed
 *     matrix dst, which the caller zeroed first (padding rows stay zero);
 *     rows may come from several tensors;
 *   matmul_packed[type]: kn_matmul_fn with w = the packed matrix (64-byte
 *     aligned; w_stride unused). A tile starts every
 *     pack_size(type, KN_PACK_ROWS, n) bytes, so rows [a, b) with a a
 *     multiple of KN_PACK_ROWS are the matrix at that offset.
 * The packed product must be batch-invariant like any matmul. */
#define KN_PACK_ROWS 16
typedef size_t (*kn_pack_size_fn)(int type, int rows, int n);
typedef void (*kn_pack_rows_fn)(int type, void *dst, int n, int row0, int count, const void *src,
                                size_t src_stride);

/* Encoders (model/encoder.c). LayerNorm with bias over one row:
 * y = (x - mean(x)) / sqrt(var(x) + eps) * w + b, var the biased variance;
 * y may alias x. */
typedef void (*kn_layernorm_fn)(float *y, const float *x, const float *w, const float *b, int n,
                                float eps);
/* Exact GELU (BERT's): y = 0.5 x (1 + erf(x / sqrt 2)); y may alias x. */
typedef void (*kn_gelu_erf_fn)(float *y, const float *x, int n);

struct kn_ops {
    const char *name; /* "ref", "avx2", "avx512" */
    kn_matmul_fn matmul[KN_TYPE_MAX];
    kn_pack_size_fn pack_size;            /* NULL: nothing is packed */
    kn_pack_rows_fn pack_rows;
    kn_matmul_fn matmul_packed[KN_TYPE_MAX];
    kn_act_fn act[KN_ACT_COUNT];
    kn_rmsnorm_fn rmsnorm;
    kn_add_rmsnorm_fn add_rmsnorm;
    kn_rmsnorm_act_fn rmsnorm_act;
    kn_silu_mul_fn silu_mul;
    kn_silu_mul_act_fn silu_mul_act;
    kn_rope_fn rope;
    kn_rope_ext_fn rope_ext;
    kn_gelu_mul_fn gelu_mul;
    kn_gelu_mul_act_fn gelu_mul_act;
    kn_layernorm_fn layernorm;
    kn_gelu_erf_fn gelu_erf;
    kn_f16_row_fn f16_row;
    /* The family's int8 multiply-accumulate peak on the calling thread, in
     * GOP/s (2 ops per multiply-accumulate), measured by the best of a few
     * compute-only loops (no memory traffic beyond L1) of the instructions
     * its quantized dot products use, for about
     * `seconds` of thread CPU time; NULL for the reference. For benchmarks:
     * kernel GOP/s as a share of what the core can do. */
    double (*int8_peak)(double seconds);
    /* The same for float multiply-adds (GFLOP/s, 2 flops per FMA lane):
     * a loop of independent vector FMA chains. For the attention kernels'
     * share of the core's float rate. NULL for the reference. */
    double (*f32_peak)(double seconds);
};

extern const struct kn_ops kn_ops_ref;

/* Pick the kernel table. force: NULL/"auto" = best supported (ANVIL_KERNELS
 * env var overrides auto), or "ref"/"avx2"/"avx512". Returns NULL when the
 * forced family is unknown or the CPU cannot run it. */
const struct kn_ops *kn_select(const char *force);

/* AMX (Intel's tile matrix unit) inside the avx512 family (amx_switch.c):
 * the packed matmuls of many tokens run their integer dot products on it when the
 * CPU has it and the OS grants it (core/cpu.c), with bits identical to
 * the AVX-512 VNNI path (cpu/amx/matmul_p_amx.c). ANVIL_AMX=0 in the
 * environment turns it off; kn_amx_set() does it for tests and benchmarks
 * (on = 0 or 1; refused, returning false, when the CPU cannot). */
bool kn_amx_active(void);
bool kn_amx_set(int on);

#endif
