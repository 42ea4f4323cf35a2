/*
 * unit_kquant.c - the quantized types run by kernels/cpu/avx2/matmul_k.c
 * (Q4_0, Q4_1, Q8_0, Q5_0, Q5_1, IQ4_NL, Q2_K..Q6_K, IQ4_XS) and the Q8K
 * activation formats, every variant this CPU can run against the
 * reference, op x variant x shape x 3 seeds (the harness of
 * unit_kernels.c, kept apart so that neither file grows past a readable
 * size).
 *
 * Every kernel here is bit-exact with the reference by construction (the
 * integer sums are exact and the float steps are the reference's own
 * operations, kernels/cpu/avx2/matmul_k.c), so the comparisons are exact:
 * any difference is a bug, and no tolerance can hide one. The one
 * exception: the AVX-512 kernels of Q4_0, Q4_1 and Q8_0
 * (cpu/avx512/matmul_q.c), and the packed ones of Q5_0 and Q5_1, sum
 * blocks in another order or fuse their float steps, so their matmuls are
 * compared with a tolerance in unit_kernels.c and only their batch
 * invariance is checked here. The
 * "avx512-packed" variant runs the K-quants, IQ4_NL and IQ4_XS
 * through the packed kernels (cpu/avx512/matmul_pk.c, matmul_p.c), which
 * are bit-exact too. The reference
 * itself is checked against numpy and the gguf package in
 * tests/py/test_kquant.py.
 *
 * Inputs are random blocks (random quant bytes, finite f16 scales over a
 * wide range, some zero, subnormal or negative) plus blocks with every
 * quant at its maximum, against activation rows that are all +-127: the
 * largest integer sums the kernels' int16 stages must hold without
 * overflow. Variants the CPU cannot run are reported as skipped, never as
 * passed.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "kernels/cpu/ref/ref.h"
#include "kernels/ops.h"
#include "kernels/blocks.h"
#include "packed_variant.h"
#include "kernel_variants.h"

/* The "-packed" variant (packed_variant.h) for these types: every test
 * below, the exact comparisons included, covers packing and the packed
 * kernels (cpu/avx512/matmul_pk.c, matmul_p.c) */
static const int PACKED_TYPES[] = {ANVIL_TYPE_Q2_K, ANVIL_TYPE_Q3_K, ANVIL_TYPE_Q4_K, ANVIL_TYPE_Q5_K,
                                   ANVIL_TYPE_Q6_K, ANVIL_TYPE_IQ4_NL, ANVIL_TYPE_IQ4_XS};
#define N_PACKED ((int)(sizeof(PACKED_TYPES) / sizeof(PACKED_TYPES[0])))

static void variants_init(void) { variants_init_packed(PACKED_TYPES, N_PACKED); }

/* ---------------------------------------------------------------------- */
/* types */

/* The types, their block bytes, the offsets of their f16 scales, and
 * whether the AVX-512 matmul is bit-exact too (see the header). */
struct ktype {
    int type;
    const char *name;
    int blck, bytes, off[2], n_off;
    bool avx512_inexact;
};
static const struct ktype KTYPES[] = {
    {ANVIL_TYPE_Q4_0, "Q4_0", 32, 18, {0}, 1, true},
    {ANVIL_TYPE_Q4_1, "Q4_1", 32, 20, {0, 2}, 2, true},
    {ANVIL_TYPE_Q8_0, "Q8_0", 32, 34, {0}, 1, true},
    {ANVIL_TYPE_Q5_0, "Q5_0", 32, 22, {0}, 1, false},
    {ANVIL_TYPE_Q5_1, "Q5_1", 32, 24, {0, 2}, 2, false},
    {ANVIL_TYPE_IQ4_NL, "IQ4_NL", 32, 18, {0}, 1, false},
    {ANVIL_TYPE_Q2_K, "Q2_K", 256, 84, {80, 82}, 2, false},
    {ANVIL_TYPE_Q3_K, "Q3_K", 256, 110, {108}, 1, false},
    {ANVIL_TYPE_Q4_K, "Q4_K", 256, 144, {0, 2}, 2, false},
    {ANVIL_TYPE_Q5_K, "Q5_K", 256, 176, {0, 2}, 2, false},
    {ANVIL_TYPE_Q6_K, "Q6_K", 256, 210, {208}, 1, false},
    {ANVIL_TYPE_IQ4_XS, "IQ4_XS", 256, 136, {0}, 1, false},
};
enum { N_KTYPES = sizeof(KTYPES) / sizeof(KTYPES[0]) };

/* A finite f16 scale: mostly |d| in [2^-12, 2^-4), both signs; some zero,
 * subnormal or large (the products must stay finite: |d| < 2^6). */
static kn_f16 rand_scale(void) {
    uint32_t r = rng_u32();
    uint16_t sign = (uint16_t)((r & 1) << 15), man = (uint16_t)((r >> 1) & 0x3ff);
    switch ((r >> 11) % 16) {
    case 0: return 0;
    case 1: return (kn_f16)(sign | man); /* subnormal */
    case 2: return (kn_f16)(sign | (20u << 10) | man);
    default: return (kn_f16)(sign | ((3u + (r >> 16) % 8) << 10) | man);
    }
}

/* rows x n weights of kt: random quant bytes, random scales; every 7th
 * block has its largest quants (int16 bounds): all quant bits set, for
 * Q8_0 every byte -128 (|w| = 128 under the sign trick) */
static void make_weights(const struct ktype *kt, uint8_t *w, int rows, int n) {
    size_t nb = (size_t)rows * (n / kt->blck);
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = w + b * kt->bytes;
        bool max = b % 7 == 3;
        uint8_t mb = kt->type == ANVIL_TYPE_Q8_0 ? 0x80 : 0xff;
        for (int i = 0; i < kt->bytes; i++) blk[i] = max ? mb : (uint8_t)rng_u32();
        for (int s = 0; s < kt->n_off; s++) {
            kn_f16 h = rand_scale();
            memcpy(blk + kt->off[s], &h, 2);
        }
    }
}

/* Float rows for activations: mostly N(0,1) at varied scales; some rows
 * constant +c or -c (every qa = +-127 after quantization), zero blocks. */
static void make_floats(float *x, int rows, int n) {
    for (int r = 0; r < rows; r++) {
        float *xr = x + (size_t)r * n;
        uint32_t kind = rng_u32() % 8;
        float sc = kind == 0 ? 1e-3f : kind == 1 ? 40.0f : 1.0f;
        for (int i = 0; i < n; i++) xr[i] = kind == 2 ? 3.5f : kind == 3 ? -0.25f : rng_normal() * sc;
        if (kind > 3 && n >= 512) memset(xr + 256, 0, 256 * sizeof(float));
    }
}

/* ---------------------------------------------------------------------- */
/* matmul: every variant bit-exact with the reference */

struct mm_case {
    const struct ktype *kt;
    int n, rows, n_tokens, act;
    uint8_t *w, *x;
    size_t ws, xs;
    float *y_ref; /* (n_tokens, rows) */
};

static void mm_make(struct mm_case *c, const struct ktype *kt, int n, int rows, int n_tokens, int seed) {
    c->kt = kt;
    c->n = n;
    c->rows = rows;
    c->n_tokens = n_tokens;
    c->act = kn_act_for_type(kt->type);
    c->ws = gguf_row_size(kt->type, (uint64_t)n);
    c->xs = kn_act_row_size(c->act, n);
    rng_seed((uint64_t)seed * 1000003u + (uint64_t)kt->type * 7919u + (uint64_t)n * 31u + (uint64_t)rows);
    c->w = xmalloc(c->ws * rows);
    make_weights(kt, c->w, rows, n);
    float *f = xmalloc(sizeof(float) * (size_t)n * n_tokens);
    make_floats(f, n_tokens, n);
    c->x = xmalloc(c->xs * n_tokens);
    for (int t = 0; t < n_tokens; t++) kn_ops_ref.act[c->act](c->x + c->xs * t, f + (size_t)t * n, n);
    free(f);
    c->y_ref = xmalloc(sizeof(float) * (size_t)rows * n_tokens);
    kn_ops_ref.matmul[kt->type](c->y_ref, rows, c->w, c->ws, c->x, c->xs, n, n_tokens, 0, rows);
}

static void mm_free(struct mm_case *c) {
    free(c->w);
    free(c->x);
    free(c->y_ref);
}

/* Rows [r0, r1) of case c with variant v into a wider y (ldy = rows + 3):
 * bit-exact with the reference inside, untouched outside. */
static bool mm_check(const struct variant *v, const struct mm_case *c, int r0, int r1, int seed) {
    size_t ldy = (size_t)c->rows + 3;
    float *y = xmalloc(sizeof(float) * ldy * c->n_tokens);
    for (size_t i = 0; i < ldy * c->n_tokens; i++) y[i] = -777.0f;
    v->ops->matmul[c->kt->type](y, ldy, c->w, c->ws, c->x, c->xs, c->n, c->n_tokens, r0, r1);
    int bad = 0;
    for (int t = 0; t < c->n_tokens; t++)
        for (size_t r = 0; r < ldy; r++) {
            float got = y[t * ldy + r];
            bool inside = (int)r >= r0 && (int)r < r1;
            float want = inside ? c->y_ref[(size_t)t * c->rows + r] : -777.0f;
            if (memcmp(&got, &want, sizeof(float))) {
                if (bad < 5)
                    printf("FAIL matmul %s [%s] n %d rows [%d,%d) of %d n_tokens %d seed %d: y[%d][%zu] = "
                           "%.9g, want %.9g%s\n",
                           c->kt->name, v->name, c->n, r0, r1, c->rows, c->n_tokens, seed, t, r, got, want,
                           inside ? "" : " (outside the range)");
                bad++;
            }
        }
    free(y);
    return bad == 0;
}

struct shape {
    int n, rows;
    const int *tokens; /* 0-terminated */
};
static const int TOK_ALL[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 33, 0};
static const int TOK_FEW[] = {1, 4, 5, 0};
static const int TOK_LONG[] = {70, 300, 0}; /* 300: past a 256-token call chunk */
static const int TOK_WIN[] = {25, 0}; /* Q2_K/Q3_K's decoded tiles, three windows at 4608 */
/* n: one unit, a few, SmolLM2 / Gemma widths, 1B widths, and past the 64
 * super-blocks whose d the packed K-quant tiles copy to the stack
 * (matmul_pk.c DLOC); rows around the kernels' row groups (3, 8); token
 * counts around their tiles (8, 32) */
static const struct shape SHAPES_32[] = {{32, 5, TOK_ALL},   {96, 9, TOK_ALL},   {576, 17, TOK_ALL},
                                         {640, 8, TOK_FEW},  {576, 4, TOK_LONG}, {2048, 3, TOK_FEW},
                                         {8224, 2, TOK_FEW}};
static const struct shape SHAPES_256[] = {{256, 5, TOK_ALL},  {768, 9, TOK_ALL},   {1536, 17, TOK_ALL},
                                          {2048, 8, TOK_FEW}, {1024, 4, TOK_LONG}, {8448, 3, TOK_FEW},
                                          {256, 1, TOK_FEW},  {16640, 2, TOK_FEW}, {4608, 5, TOK_WIN}};

static void test_matmul(void **state, int ki) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    const struct ktype *kt = &KTYPES[ki];
    const struct shape *sh = kt->blck == QK ? SHAPES_32 : SHAPES_256;
    int n_sh = (int)(kt->blck == QK ? sizeof(SHAPES_32) : sizeof(SHAPES_256)) / (int)sizeof(struct shape);
    int fails = 0;
    for (int s = 0; s < n_sh && fails < 4; s++)
        for (const int *nt = sh[s].tokens; *nt; nt++)
            for (int seed = 1; seed <= 3; seed++) {
                struct mm_case c;
                mm_make(&c, kt, sh[s].n, sh[s].rows, *nt, seed);
                int R = sh[s].rows;
                if (!mm_check(v, &c, 0, R, seed)) fails++;
                if (R > 4 && !mm_check(v, &c, seed, R - 2, seed)) fails++;
                if (R > 2 && !mm_check(v, &c, R - 1, R, seed)) fails++;
                mm_free(&c);
            }
    assert_int_equal(fails, 0);
}

/* Batch invariance: y(t, r) of one call over all tokens and rows equals the
 * values of calls over one token and of odd token windows with the rows cut
 * in three (the reference included: the property is the variant's own). */
static void test_batch_invariance(void **state) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    int fails = 0;
    for (int ki = 0; ki < N_KTYPES; ki++) {
        const struct ktype *kt = &KTYPES[ki];
        int n = kt->blck == QK ? 576 : 1536, R = 23, T = 45;
        struct mm_case c;
        mm_make(&c, kt, n, R, T, 5);
        kn_matmul_fn mm = v->ops->matmul[kt->type];
        float *full = xmalloc(sizeof(float) * R * T), *part = xmalloc(sizeof(float) * R * T);
        mm(full, R, c.w, c.ws, c.x, c.xs, n, T, 0, R);
        for (int t = 0; t < T; t++) {
            const uint8_t *xt = c.x + t * c.xs;
            mm(part + (size_t)t * R, R, c.w, c.ws, xt, c.xs, n, 1, 0, 4);
            mm(part + (size_t)t * R, R, c.w, c.ws, xt, c.xs, n, 1, 4, R);
        }
        if (memcmp(full, part, sizeof(float) * R * T)) {
            printf("FAIL batch invariance %s [%s]: n_tokens %d vs 1\n", kt->name, v->name, T);
            fails++;
        }
        memset(part, 0, sizeof(float) * R * T);
        for (int t0 = 0, w = 3; t0 < T; t0 += w, w = w % 11 + 2) {
            int nt = T - t0 < w ? T - t0 : w;
            const uint8_t *xt = c.x + t0 * c.xs;
            float *yt = part + (size_t)t0 * R;
            mm(yt, R, c.w, c.ws, xt, c.xs, n, nt, 0, 7);
            mm(yt, R, c.w, c.ws, xt, c.xs, n, nt, 7, 15);
            mm(yt, R, c.w, c.ws, xt, c.xs, n, nt, 15, R);
        }
        if (memcmp(full, part, sizeof(float) * R * T)) {
            printf("FAIL batch invariance %s [%s]: token windows\n", kt->name, v->name);
            fails++;
        }
        free(full);
        free(part);
        mm_free(&c);
    }
    assert_int_equal(fails, 0);
}

/* ---------------------------------------------------------------------- */
/* activation formats */

static const int ACT_NS[] = {256, 512, 1536, 2048, 8448};

/* rows with specials: NaN, +-inf, a subnormal-scale block, exact halves */
static void make_act_row(float *x, int n, int seed, int salt) {
    rng_seed((uint64_t)seed * 7777u + (uint64_t)salt * 131u + (uint64_t)n);
    make_floats(x, 1, n);
    if (seed == 2) {
        x[5] = NAN;
        x[300 % n] = INFINITY;
        x[n - 1] = -INFINITY;
    }
    if (seed == 3 && n >= 512) {
        for (int i = 256; i < 512; i++) x[i] = 1e-42f * (float)(i % 5 - 2);
        x[7] = 127.0f;
        x[8] = 0.5f; /* with x[7] the scale: q = 0.5 exactly, a tie */
    }
}

static bool bytes_equal(const char *op, const char *var, int n, int seed, const void *a, const void *b,
                        size_t len) {
    if (!memcmp(a, b, len)) return true;
    const uint8_t *pa = a, *pb = b;
    size_t i = 0;
    while (pa[i] == pb[i]) i++;
    printf("FAIL %s [%s] n %d seed %d: first differing byte %zu of %zu (%02x vs ref %02x)\n", op, var, n,
           seed, i, len, pa[i], pb[i]);
    return false;
}

/* bytes of a row that carry data (Q8A_Q8K: its two parts, padding between) */
static bool act_equal(const char *op, const char *var, int act, int n, int seed, const uint8_t *a,
                      const uint8_t *b) {
    size_t q8k = (size_t)n + (size_t)(n / QK_K) * 4 + (size_t)(n / 16) * 2;
    if (act == KN_ACT_Q8K) return bytes_equal(op, var, n, seed, a, b, q8k);
    size_t q8a = (size_t)n + (size_t)(n / QK) * 8, off = kn_act_part_offset(act, KN_ACT_Q8K, n);
    return bytes_equal(op, var, n, seed, a, b, q8a) &&
           bytes_equal(op, var, n, seed, a + off, b + off, q8k);
}

static void test_act(void **state) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    int fails = 0;
    for (int act = KN_ACT_Q8K; act <= KN_ACT_Q8A_Q8K; act++)
        for (size_t k = 0; k < sizeof(ACT_NS) / sizeof(int); k++)
            for (int seed = 1; seed <= 3; seed++) {
                int n = ACT_NS[k];
                float *x = xmalloc(sizeof(float) * n);
                make_act_row(x, n, seed, act);
                size_t rs = kn_act_row_size(act, n);
                uint8_t *a = xmalloc(rs), *b = xmalloc(rs);
                v->ops->act[act](a, x, n);
                kn_ops_ref.act[act](b, x, n);
                if (!act_equal(act == KN_ACT_Q8K ? "act Q8K" : "act Q8A_Q8K", v->name, act, n, seed, a, b))
                    fails++;
                /* the format's own invariants, on the reference */
                const float *d = (const float *)(b + kn_act_part_offset(act, KN_ACT_Q8K, n) + n);
                const int8_t *q = (const int8_t *)(b + kn_act_part_offset(act, KN_ACT_Q8K, n));
                const int16_t *bs = (const int16_t *)(d + n / QK_K);
                for (int g = 0; g < n / 16; g++) {
                    int sum = 0;
                    for (int i = 0; i < 16; i++) {
                        assert_true(q[16 * g + i] >= -127);
                        sum += q[16 * g + i];
                    }
                    assert_int_equal(bs[g], sum);
                }
                free(a);
                free(b);
                free(x);
            }
    assert_int_equal(fails, 0);
}

/* The fused ops in the Q8K formats equal the variant's own unfused
 * composition byte for byte (the norm or SiLU row, then the conversion),
 * and the reference's fused ops are its compositions. Across variants the
 * float rows differ by rounding (unit_kernels.c bounds that), so the
 * comparison is within a variant. */
static void test_fused(void **state) {
    bool skip;
    const struct variant *v = case_variant(state, &skip);
    if (skip) skip();
    int fails = 0;
    for (int act = KN_ACT_Q8K; act <= KN_ACT_Q8A_Q8K; act++)
        for (size_t k = 0; k < sizeof(ACT_NS) / sizeof(int); k++)
            for (int seed = 1; seed <= 3; seed += 2) {
                int n = ACT_NS[k];
                float *x = xmalloc(sizeof(float) * n), *w = xmalloc(sizeof(float) * n);
                float *t = xmalloc(sizeof(float) * n);
                make_act_row(x, n, seed, 10 + act);
                make_act_row(w, n, seed, 20 + act);
                size_t rs = kn_act_row_size(act, n);
                uint8_t *a = xmalloc(rs), *b = xmalloc(rs);
                v->ops->rmsnorm_act(a, x, w, n, 1e-5f, act);
                v->ops->rmsnorm(t, x, w, n, 1e-5f);
                v->ops->act[act](b, t, n);
                if (!act_equal("rmsnorm_act", v->name, act, n, seed, a, b)) fails++;
                v->ops->silu_mul_act(a, x, w, n, act);
                v->ops->silu_mul(t, x, w, n);
                v->ops->act[act](b, t, n);
                if (!act_equal("silu_mul_act", v->name, act, n, seed, a, b)) fails++;
                free(a);
                free(b);
                free(t);
                free(x);
                free(w);
            }
    assert_int_equal(fails, 0);
}

/* ---------------------------------------------------------------------- */
/* the part offsets and sizes model.c relies on for mixed matrices */

static void test_act_layout(void **state) {
    (void)state;
    for (size_t k = 0; k < sizeof(ACT_NS) / sizeof(int); k++) {
        int n = ACT_NS[k];
        size_t a = kn_act_row_size(KN_ACT_Q8A, n), q = kn_act_row_size(KN_ACT_Q8K, n);
        assert_int_equal(kn_act_row_size(KN_ACT_Q8A_Q8K, n), a + q);
        assert_int_equal(kn_act_part_offset(KN_ACT_Q8A_Q8K, KN_ACT_Q8K, n), a);
        assert_int_equal(kn_act_part_offset(KN_ACT_Q8A_Q8K, KN_ACT_Q8A, n), 0);
        assert_int_equal(kn_act_part_offset(KN_ACT_Q8K, KN_ACT_Q8K, n), 0);
        assert_true(a % 64 == 0 && q % 64 == 0);
        /* every format fits the F32 row the forward pass sizes its buffer by */
        assert_true(kn_act_row_size(KN_ACT_Q8A_Q8K, n) <= kn_act_row_size(KN_ACT_F32, n));
    }
    assert_int_equal(kn_act_merge(KN_ACT_Q8A, KN_ACT_Q8K), KN_ACT_Q8A_Q8K);
    assert_int_equal(kn_act_merge(KN_ACT_Q8K, KN_ACT_Q8A), KN_ACT_Q8A_Q8K);
    assert_int_equal(kn_act_merge(KN_ACT_Q8A_Q8K, KN_ACT_Q8K), KN_ACT_Q8A_Q8K);
    assert_int_equal(kn_act_merge(KN_ACT_Q8K, KN_ACT_Q8K), KN_ACT_Q8K);
    assert_int_equal(kn_act_merge(KN_ACT_F32, KN_ACT_Q8A), -1);
    assert_int_equal(kn_act_merge(KN_ACT_BF16, KN_ACT_Q8K), -1);
    for (int i = 0; i < N_KTYPES; i++) {
        int act = kn_act_for_type(KTYPES[i].type);
        assert_int_equal(act, KTYPES[i].blck == QK ? KN_ACT_Q8A : KN_ACT_Q8K);
        uint32_t bl, by;
        assert_true(gguf_type_block(KTYPES[i].type, &bl, &by));
        assert_int_equal(bl, KTYPES[i].blck);
        assert_int_equal(by, KTYPES[i].bytes);
    }
    assert_int_equal(kn_act_for_type(ANVIL_TYPE_Q8_K), -1); /* activations only */
}

/* AMX (kernels/ops.h: kn_amx_active): where the CPU has it, the avx512
 * packed matmuls of 16 tokens and more run their dot products on it, and
 * must give the very bits of the AVX-512 path. Every type the table packs,
 * token counts around the 16-token tiles, row ranges that cut tiles, rows
 * wide enough for several of the AMX kernel's unpack windows; y is also
 * untouched outside the rows asked for. Skipped where the CPU has no
 * usable AMX. */
static void test_amx_same_bits(void **state) {
    (void)state;
    const struct kn_ops *ops = kn_select("avx512");
    bool was = kn_amx_active();
    if (!ops || !kn_amx_set(1)) skip();
    static const int tokens[] = {16, 31, 45, 300};
    int fails = 0, cases = 0;
    for (int i = 0; i < N_KTYPES; i++) {
        const struct ktype *kt = &KTYPES[i];
        const int ns[2] = {kt->blck == QK ? 576 : 1536, kt->blck == QK ? 8224 : 8448};
        for (int si = 0; si < 2; si++)
            for (int ti = 0; ti < 4; ti++) {
                const int n = ns[si], R = 37, T = tokens[ti];
                if (si == 1 && T > 45) continue; /* wide rows: enough at two counts */
                size_t sz = ops->pack_size(kt->type, R, n);
                if (!sz) continue;
                struct mm_case c;
                mm_make(&c, kt, n, R, T, 11 + ti);
                uint8_t *pw = xmalloc(sz);
                memset(pw, 0, sz);
                ops->pack_rows(kt->type, pw, n, 0, R, c.w, c.ws);
                const size_t ldy = (size_t)R + 3, ny = ldy * (size_t)T;
                float *y[2] = {xmalloc(sizeof(float) * ny), xmalloc(sizeof(float) * ny)};
                static const int cuts[][2] = {{0, 37}, {5, 34}, {17, 19}};
                for (int k = 0; k < 3; k++) {
                    for (int a = 0; a < 2; a++) {
                        kn_amx_set(a);
                        for (size_t e = 0; e < ny; e++) y[a][e] = -777.0f;
                        ops->matmul_packed[kt->type](y[a], ldy, pw, 0, c.x, c.xs, n, T, cuts[k][0], cuts[k][1]);
                    }
                    cases++;
                    bool outside = true;
                    for (int t = 0; t < T; t++)
                        for (int r = 0; r < (int)ldy; r++)
                            if ((r < cuts[k][0] || r >= cuts[k][1]) && y[1][(size_t)t * ldy + r] != -777.0f)
                                outside = false;
                    if (memcmp(y[0], y[1], sizeof(float) * ny) || !outside) {
                        printf("FAIL amx same bits %s n %d tokens %d rows [%d, %d)%s\n", kt->name, n, T,
                               cuts[k][0], cuts[k][1], outside ? "" : ": wrote outside the rows");
                        fails++;
                    }
                }
                free(y[0]);
                free(y[1]);
                free(pw);
                mm_free(&c);
            }
    }
    kn_amx_set(was);
    assert_true(cases > 0);
    assert_int_equal(fails, 0);
}

/* kn_find_bad_scale: NaN/inf in any scale field of any block is found,
 * finite ones (subnormals included) are not, and nothing else is read as
 * a scale. */
static void test_bad_scale(void **state) {
    (void)state;
    for (int i = 0; i < N_KTYPES; i++) {
        const struct ktype *kt = &KTYPES[i];
        int rows = 3, n = kt->blck * 4;
        size_t ws = gguf_row_size(kt->type, (uint64_t)n);
        uint8_t *w = xmalloc(ws * rows);
        rng_seed(99 + i);
        make_weights(kt, w, rows, n);
        assert_int_equal(kn_find_bad_scale(kt->type, w, rows, n, ws), -1);
        /* every non-scale byte 0xff: still no bad scale */
        for (int b = 0; b < rows * 4; b++)
            for (int j = 0; j < kt->bytes; j++) {
                bool is_scale = false;
                for (int s = 0; s < kt->n_off; s++) is_scale |= j == kt->off[s] || j == kt->off[s] + 1;
                if (!is_scale) w[b * kt->bytes + j] = 0xff;
            }
        assert_int_equal(kn_find_bad_scale(kt->type, w, rows, n, ws), -1);
        for (int s = 0; s < kt->n_off; s++) {
            static const uint16_t bad[] = {0x7c00, 0xfc00, 0x7e00, 0x7c01};
            for (int k = 0; k < 4; k++) {
                uint8_t saved[2];
                int blk = 6; /* row 1, block 2 */
                uint8_t *p = w + blk * kt->bytes + kt->off[s];
                memcpy(saved, p, 2);
                memcpy(p, &bad[k], 2);
                assert_int_equal(kn_find_bad_scale(kt->type, w, rows, n, ws), blk);
                memcpy(p, saved, 2);
            }
        }
        free(w);
    }
}

/* ---------------------------------------------------------------------- */

#define MM(I) \
    static void test_matmul_##I(void **state) { test_matmul(state, I); }
MM(0)
MM(1)
MM(2)
MM(3)
MM(4)
MM(5)
MM(6)
MM(7)
MM(8)
MM(9)
MM(10)
MM(11)
static const CMUnitTestFunction MM_FNS[N_KTYPES] = {
    test_matmul_0, test_matmul_1, test_matmul_2, test_matmul_3,  test_matmul_4,  test_matmul_5,
    test_matmul_6, test_matmul_7, test_matmul_8, test_matmul_9, test_matmul_10, test_matmul_11};

int main(int argc, char **argv) {
    variants_init();
    static struct CMUnitTest tests[(N_KTYPES + 4) * N_VARIANTS + 3];
    static char names[(N_KTYPES + 4) * N_VARIANTS][64];
    const char *filter = argc > 1 ? argv[1] : NULL;
    size_t nt = 0;
    for (int v = 0; v < N_VARIANTS; v++) {
        struct {
            const char *op;
            CMUnitTestFunction fn;
        } ops[N_KTYPES + 3];
        int no = 0;
        static char opn[N_KTYPES][32];
        for (int i = 0; i < N_KTYPES; i++) {
            /* not bit-exact by design: unit_kernels.c's tolerance tests */
            if (KTYPES[i].avx512_inexact && !strncmp(variants[v].name, "avx512", 6)) continue;
            snprintf(opn[i], sizeof(opn[i]), "matmul_%s", KTYPES[i].name);
            ops[no].op = opn[i];
            ops[no++].fn = MM_FNS[i];
        }
        ops[no].op = "batch_invariance", ops[no++].fn = test_batch_invariance;
        ops[no].op = "act", ops[no++].fn = test_act;
        ops[no].op = "fused_act", ops[no++].fn = test_fused;
        for (int i = 0; i < no; i++) {
            /* ref vs ref is trivially equal: the reference gets batch
             * invariance and the fused-op compositions */
            if (v == 0 && strcmp(ops[i].op, "batch_invariance") && strcmp(ops[i].op, "fused_act")) continue;
            snprintf(names[nt], sizeof(names[nt]), "%s/%s", ops[i].op, variants[v].name);
            if (filter && !strstr(names[nt], filter)) continue;
            tests[nt] = (struct CMUnitTest){names[nt], ops[i].fn, NULL, NULL, &variants[v]};
            nt++;
        }
    }
    if (!filter || strstr("act_layout", filter))
        tests[nt++] = (struct CMUnitTest){"act_layout", test_act_layout, NULL, NULL, NULL};
    if (!filter || strstr("bad_scale", filter))
        tests[nt++] = (struct CMUnitTest){"bad_scale", test_bad_scale, NULL, NULL, NULL};
    if (!filter || strstr("amx_same_bits", filter))
        tests[nt++] = (struct CMUnitTest){"amx_same_bits", test_amx_same_bits, NULL, NULL, NULL};
    return _cmocka_run_group_tests("kquant", tests, nt, NULL, NULL);
}
