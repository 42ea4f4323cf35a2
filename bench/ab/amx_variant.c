/*
 * amx_variant.c - one revision of the AMX matmul kernels (matmul_p_amx.c or
 * matmul_pk_amx.c, named by SRC) with their exported symbols prefixed by
 * PFX, so that two revisions link into one harness (bench/ab/amx_harness.c,
 * built by bench/ab_amx.sh).
 */
#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define kn_matmul_p_amx CAT(PFX, p_amx)
#define kn_matmul_pk_amx CAT(PFX, pk_amx)
#define kn_amx_scratch CAT(PFX, amx_scratch)
#include SRC
