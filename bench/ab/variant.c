/*
 * variant.c - one revision of the packed AVX-512 matmul kernels
 * (matmul_p.c or matmul_pk.c, named by SRC) with its exported symbols
 * prefixed by PFX, so that two revisions link into one harness
 * (bench/ab/harness.c, built by bench/ab_kernels.sh).
 */
#define CAT2(a,b) a##b
#define CAT(a,b) CAT2(a,b)
#define kn_matmul_p_q8_0_avx512 CAT(PFX,q8_0)
#define kn_matmul_p_q4_0_avx512 CAT(PFX,q4_0)
#define kn_matmul_p_q4_1_avx512 CAT(PFX,q4_1)
#define kn_matmul_p_q5_0_avx512 CAT(PFX,q5_0)
#define kn_matmul_p_q5_1_avx512 CAT(PFX,q5_1)
#define kn_matmul_p_iq4_nl_avx512 CAT(PFX,iq4_nl)
#define kn_matmul_p_q4_k_avx512 CAT(PFX,q4_k)
#define kn_matmul_p_q5_k_avx512 CAT(PFX,q5_k)
#define kn_matmul_p_q6_k_avx512 CAT(PFX,q6_k)
#define kn_matmul_p_iq4_xs_avx512 CAT(PFX,iq4_xs)
#define kn_matmul_p_q2_k_avx512 CAT(PFX,q2_k)
#define kn_matmul_p_q3_k_avx512 CAT(PFX,q3_k)
#define kn_pack_rows_avx512 CAT(PFX,pack_rows)
#define kn_pack_size_avx512 CAT(PFX,pack_size)
#define kn_pack_rows_pk_avx512 CAT(PFX,pack_rows_pk)
#define kn_pack_size_pk_avx512 CAT(PFX,pack_size_pk)
#include SRC
