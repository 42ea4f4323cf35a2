/*
 * amx.h - the AMX kernels. Compiled with the AVX-512 and AMX -m flags;
 * callers (the avx512 packed matmuls) reach them only when
 * kn_amx_active() says the CPU has AMX and the OS granted its tile state.
 */
#ifndef ANVIL_KN_AMX_H
#define ANVIL_KN_AMX_H

#include <stddef.h>
#include <stdint.h>

/* The 64-byte operand of ldtilecfg (palette 1): tile i is rows[i] rows
 * of colsb[i] bytes. Each kernel keeps a constant one: GCC 12 drops
 * stores into a local struct before ldtilecfg (it does not see the
 * instruction read them), and the tile instructions then fault. */
struct tile_cfg {
    uint8_t palette, start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};

/* The P16 packed matmul (cpu/avx512/p16.h; pt = T_*) for the first
 * n_tokens / 16 * 16 tokens, with AMX integer dot products and the AVX-512
 * kernel's float steps: y is bit-identical to kn_matmul_p_*_avx512's.
 * Returns the number of tokens done (the caller runs the rest); 0 when the
 * shape does not suit (fewer than 16 tokens). */
int kn_matmul_p_amx(int pt, float *restrict y, size_t ldy, const void *restrict w, const void *restrict x,
                    size_t x_stride, int n, int n_tokens, int r0, int r1);

/* The same for the P16K packed K-quant types (cpu/avx512/p16k.h; pt =
 * T_Q4_K, T_Q5_K, T_Q6_K, T_IQ4_XS, T_Q2_K or T_Q3_K): bit-identical to
 * kn_matmul_p_*_avx512 of matmul_pk.c. */
int kn_matmul_pk_amx(int pt, float *restrict y, size_t ldy, const void *restrict w, const void *restrict x,
                     size_t x_stride, int n, int n_tokens, int r0, int r1);

/* GOP/s of one thread's register-only TDPBSSD loop over `seconds`
 * (peak_amx.c): the tile unit's int8 peak. */
double kn_amx_int8_peak(double seconds);

/* A buffer of at least `bytes` for the calling thread, kept between calls
 * and freed when the thread ends; NULL when out of memory. One per
 * thread: a kernel's callee must not ask for it. */
void *kn_amx_scratch(size_t bytes);

#endif
