/*
 * kernel_variants.h - what the kernel unit tests (unit_kernels.c,
 * unit_kquant.c) share: the kernel variants every case runs (ref, avx2,
 * avx512, avx512 without AVX512_BF16 instructions, and the packed variant
 * of packed_variant.h over the types each file names), the skip of a
 * variant this CPU cannot run, a seeded PCG32 for the inputs and a
 * 64-byte aligned allocation. Include after cmocka.h, kernels/ops.h and
 * packed_variant.h.
 */
#ifndef ANVIL_TESTS_KERNEL_VARIANTS_H
#define ANVIL_TESTS_KERNEL_VARIANTS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

extern const struct kn_ops kn_ops_avx512_nobf16;

struct variant {
    const char *name;
    const struct kn_ops *ops; /* NULL: this CPU cannot run it */
};
static struct variant variants[] = {{"ref", NULL},           {"avx2", NULL},
                                    {"avx512", NULL},        {"avx512-nobf16", NULL},
                                    {"avx512-packed", NULL}};
enum { N_VARIANTS = sizeof(variants) / sizeof(variants[0]) };

/* Fill in the tables this CPU runs; the packed variant packs the n_packed
 * types of packed_types (packed_variant.h). */
static void variants_init_packed(const int *packed_types, int n_packed) {
    variants[0].ops = &kn_ops_ref;
    variants[1].ops = kn_select("avx2");
    variants[2].ops = kn_select("avx512");
    /* the AVX-512 table without AVX512_BF16 instructions runs wherever the
     * avx512 family does */
    variants[3].ops = variants[2].ops ? &kn_ops_avx512_nobf16 : NULL;
    variants[4].ops =
        variants[2].ops ? packed_table(variants[2].ops, packed_types, n_packed) : NULL;
}

static const struct variant *case_variant(void **state, bool *skip) {
    const struct variant *v = *state;
    *skip = v->ops == NULL;
    if (*skip) printf("SKIP %s: not supported by this CPU\n", v->name);
    return v;
}

/* ---------------------------------------------------------------------- */
/* deterministic inputs */

static uint64_t rng_state;
static void rng_seed(uint64_t s) { rng_state = s * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull; }
static uint32_t rng_u32(void) {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    uint32_t x = (uint32_t)(((rng_state >> 18) ^ rng_state) >> 27);
    uint32_t rot = (uint32_t)(rng_state >> 59);
    return (x >> rot) | (x << ((32 - rot) & 31));
}
/* roughly N(0,1) (Irwin-Hall of 4 uniforms): cheap, enough for test data */
static float rng_normal(void) {
    uint32_t a = rng_u32(), b = rng_u32();
    float s = (float)(a & 0xffff) + (float)(a >> 16) + (float)(b & 0xffff) + (float)(b >> 16);
    return (s * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

static void *xmalloc(size_t n) {
    void *p = aligned_alloc(64, (n + 63) & ~(size_t)63);
    assert_non_null(p);
    return p;
}

#endif
