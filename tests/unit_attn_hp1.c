/*
 * unit_attn_hp1.c - HP1 gated attention kernels (attn/hp1/attn_hp1.h):
 *   - the double oracle (kn_hp1_naive_ref) against numpy golden outputs
 *     (tests/data/hp1_golden.bin, made by tests/gen/gen_hp1_golden.py);
 *   - every variant the CPU runs (ref, avx2, avx512) against the oracle,
 *     within the first-order rounding bound the oracle derives for each
 *     output; avx2 and avx512 against ref within twice that bound, and
 *     avx512 against avx2 bit for bit (the header gives them the same
 *     arithmetic); F16 and Q8_0, head_dim 32..256, GQA 1/3/4/8,
 *     contexts around the step/block (16) and chunk (256) edges, K 1..8,
 *     ReLU on and off, several lo/hi/gamma;
 *   - bit-exactness inside each variant: split-K with every piece size,
 *     sparse vs dense PV, prefill tiles vs decode rows, block sizes,
 *     and a batch run on a thread pool with random split plans against
 *     each sequence alone;
 *   - the engine's driver (kv_attn_prepare_hp1): every plan (threads,
 *     split off/on/auto, parts of the batch) gives each sequence the
 *     bits of the kernel alone; the policy splits where the model tests
 *     need it to; bad plans are refused;
 *   - edges: one key, K-1 keys, gamma 0 and all-zero p (exact +0
 *     output), V that is NaN where p == 0 (the sparse walk never reads
 *     it), extreme scores (no NaN out);
 *   - controlled sparsity: kn_hp1_calibrate reaches 0/50/70/90% zeros.
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

#include "core/core.h"
#include "core/pool.h"
#include "attn/hp1/attn_hp1.h"
#include "attn/attn_plan.h"
#include "attn/hp1/hp1_plan.h"
#include "kv/kv_cache.h"
#include "attn_fixture.h"

/* ---------------------------------------------------------------------- */
/* helpers */

/* Variant i, or NULL when the CPU cannot run it or its table is one an
 * earlier name already gave (a family without kernels of its own). */
static const struct kn_hp1_ops *pick(int i) {
    const struct kn_hp1_ops *ops = kn_hp1_select(VARIANTS[i]);
    for (int j = 0; ops && j < i; j++)
        if (kn_hp1_select(VARIANTS[j]) == ops) return NULL;
    return ops;
}

static void report_skips(void) {
    for (int i = 0; i < N_VARIANTS; i++)
        if (!pick(i))
            printf("SKIP hp1 variant %s (CPU lacks it, or it runs another variant's kernels)\n",
                   VARIANTS[i]);
}


/* HP1 parameter sets the tests cycle through. */
struct pset {
    int n_taps;
    float gamma, lo, hi;
    bool relu;
    float tap_scale; /* taps uniform in [-tap_scale, tap_scale), c_0 made positive;
                      * negative: |taps| (all positive) */
};

static const struct pset PSETS[] = {
    {3, 1.0f, 0.0f, 1.0f, true, 1.0f},    /* the served model's shape */
    {3, 0.75f, -0.5f, 2.0f, false, 1.0f}, /* ReLU off, negative lo */
    {2, -1.5f, 0.1f, 0.3f, true, 2.0f},   /* narrow clamp, negative gamma */
    {1, 1.0f, 0.0f, 1.0f, false, 1.0f},   /* K = 1 */
    {8, 0.5f, 0.0f, 4.0f, true, 0.5f},    /* K = max */
    {3, 2.0f, 0.25f, 0.25f, true, 1.0f},  /* lo == hi: p = 0.5 everywhere */
    {3, 1.0f, 0.0f, 1.0f, true, -1.0f},   /* positive taps: p = 0 only after 3 scores <= 0 */
};
#define N_PSETS (sizeof(PSETS) / sizeof(PSETS[0]))

struct fixture {
    struct kv_cache *kv;
    int type, hd, n_head, n_head_kv, group;
    int n_kv;   /* keys written in seq 0 */
    int n_rows; /* query rows, the last at position n_kv - 1 */
    float *q;   /* (n_rows, n_head, hd) */
    float *taps; /* (n_head, n_taps) */
    struct kn_hp1_params hp;
    float *want, *bound; /* oracle outputs and rounding bounds, like q */
    float *got;
    int64_t n_zero, n_gate;
};

static void fixture_oracle(struct fixture *f) {
    double *scratch = malloc(3 * ((size_t)f->n_kv + 1) * sizeof(double));
    assert_non_null(scratch);
    size_t stride = (size_t)f->n_head * f->hd;
    f->n_zero = f->n_gate = 0;
    kn_hp1_naive_ref(kv_layout(f->kv), kv_layer_base(f->kv, 0), kv_seq_blocks(f->kv, 0), f->n_head,
                     &f->hp, 1.0f / sqrtf((float)f->hd), f->q, stride, f->want, stride,
                     f->n_kv - f->n_rows, f->n_rows, scratch, f->bound, &f->n_zero, &f->n_gate);
    free(scratch);
}

static void fixture_init(struct fixture *f, int type, int hd, int n_head, int n_head_kv, int n_kv,
                         int n_rows, const struct pset *ps, uint32_t seed, bool dummy) {
    memset(f, 0, sizeof(*f));
    f->type = type;
    f->hd = hd;
    f->n_head = n_head;
    f->n_head_kv = n_head_kv;
    f->group = n_head / n_head_kv;
    f->n_kv = n_kv;
    f->n_rows = n_rows;
    uint32_t x = fixture_start(&f->kv, type, hd, n_head, n_head_kv, n_kv, n_rows, seed, dummy,
                               &f->q, &f->want, &f->got);
    size_t n = (size_t)n_rows * n_head * hd;
    f->bound = malloc(n * sizeof(float));
    f->taps = malloc((size_t)n_head * KN_HP1_MAX_TAPS * sizeof(float));
    assert_true(f->bound && f->taps);
    for (int i = 0; i < n_head * ps->n_taps; i++) {
        f->taps[i] = ps->tap_scale * lcg_uniform(&x);
        if (ps->tap_scale < 0.0f) f->taps[i] = fabsf(f->taps[i]);
    }
    for (int i = 0; i < n_head; i++) f->taps[i * ps->n_taps] = fabsf(f->taps[i * ps->n_taps]) + 0.25f;
    f->hp = (struct kn_hp1_params){.taps = f->taps, .n_taps = ps->n_taps, .gamma = ps->gamma,
                                   .lo = ps->lo, .hi = ps->hi, .relu = ps->relu};
    fixture_oracle(f);
}

static void fixture_free(struct fixture *f) {
    kv_free(f->kv);
    free(f->q);
    free(f->want);
    free(f->bound);
    free(f->got);
    free(f->taps);
}

/* A task for kv head h over rows [r0, r0 + n_rows) of the fixture. */
static struct kn_hp1_task fixture_task(const struct fixture *f, int h, int r0, int n_rows, float *out) {
    struct kn_hp1_task t = {
        .at = fixture_attn_task(f->kv, f->n_head, f->hd, f->group, f->q, f->n_kv, f->n_rows, h, r0,
                                n_rows, out, 0),
        .hp = f->hp,
        .pv = KN_HP1_PV_SPARSE,
    };
    t.hp.taps = f->taps + (size_t)h * f->group * f->hp.n_taps;
    return t;
}

/* Every row as its own decode task, every kv head. */
static void run_decode_rows(const struct kn_hp1_ops *ops, const struct fixture *f, float *out,
                            enum kn_hp1_pv pv) {
    for (int h = 0; h < f->n_head_kv; h++)
        for (int r = 0; r < f->n_rows; r++) {
            struct kn_hp1_task t = fixture_task(f, h, r, 1, out);
            t.pv = pv;
            ops->attn(&t);
        }
}

/* |a - b| <= k * bound + tiny everywhere; prints the first mismatches. */
static void expect_bound(const float *a, const float *b, const float *bound, size_t n, double k,
                         const char *what) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= k * bound[i] + 1e-30)) {
            if (bad < 5)
                printf("  %s: [%zu] got %.9g want %.9g (diff %.3g, bound %.3g)\n", what, i, a[i], b[i],
                       d, k * bound[i]);
            bad++;
        }
    }
    if (bad) fail_msg("%s: %d outside the rounding bound", what, bad);
}

/* The bound must be able to fail: it stays far below the outputs' scale
 * (it is a worst case, n*u for a sum of n terms, hence the 1e-2). */
static void expect_bound_tight(const struct fixture *f, const char *what) {
    size_t n = (size_t)f->n_rows * f->n_head * f->hd;
    double bmax = 0.0, omax = 0.0;
    for (size_t i = 0; i < n; i++) {
        bmax = f->bound[i] > bmax ? f->bound[i] : bmax;
        omax = fabs(f->want[i]) > omax ? fabs(f->want[i]) : omax;
    }
    if (!(bmax <= 1e-2 * omax + 1e-30)) fail_msg("%s: bound %.3g vs outputs %.3g", what, bmax, omax);
}

/* ---------------------------------------------------------------------- */
/* golden data from numpy */

static void test_golden(void **state) {
    (void)state;
    FILE *fp = fopen("tests/data/hp1_golden.bin", "rb");
    if (!fp) fail_msg("tests/data/hp1_golden.bin missing (run from the repo root)");
    char magic[8];
    uint32_t n_cases;
    assert_int_equal(fread(magic, 1, 8, fp), 8);
    assert_memory_equal(magic, "ANVHP1G1", 8);
    assert_int_equal(fread(&n_cases, 4, 1, fp), 1);
    assert_true(n_cases >= 1 && n_cases < 100);
    for (uint32_t c = 0; c < n_cases; c++) {
        int32_t h[9];
        assert_int_equal(fread(h, 4, 9, fp), 9);
        int type = h[0], hd = h[1], n_head = h[2], n_head_kv = h[3], pos = h[4], n_rows = h[5];
        int pset = h[7], seed = h[6], n_zero = h[8];
        assert_true(pset >= 0 && pset < (int)N_PSETS);
        struct fixture f;
        fixture_init(&f, type, hd, n_head, n_head_kv, pos + n_rows, n_rows, &PSETS[pset],
                     (uint32_t)seed, true);
        size_t n = (size_t)n_rows * n_head * hd;
        float *gold = malloc(n * sizeof(float));
        assert_non_null(gold);
        assert_int_equal(fread(gold, sizeof(float), n, fp), n);
        char what[96];
        /* the two oracles (C double sums, numpy fsum) agree to float rounding */
        snprintf(what, sizeof(what), "golden case %u oracle", c);
        for (size_t i = 0; i < n; i++)
            if (!(fabs((double)f.want[i] - gold[i]) <= 1e-6 * fabs(gold[i]) + 1e-7))
                fail_msg("%s: [%zu] %.9g vs numpy %.9g", what, i, f.want[i], gold[i]);
        /* the same zero count: the gate agrees too */
        if (f.n_zero != n_zero) fail_msg("%s: %lld zeros vs numpy %d", what, (long long)f.n_zero, n_zero);
        expect_bound_tight(&f, what);
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const struct kn_hp1_ops *ops = pick(vi);
            if (!ops) continue;
            run_decode_rows(ops, &f, f.got, KN_HP1_PV_SPARSE);
            snprintf(what, sizeof(what), "golden case %u %s", c, ops->name);
            expect_bound(f.got, gold, f.bound, n, 1.25, what);
        }
        free(gold);
        fixture_free(&f);
    }
    fclose(fp);
}

/* ---------------------------------------------------------------------- */
/* decode: variants vs the oracle; split-K, sparse/dense bit-exact */

static void check_decode(const struct kn_hp1_ops *ops, struct fixture *f, float *ref_out) {
    int nc = kn_attn_n_chunks(f->n_kv);
    size_t nout = (size_t)f->n_head * f->hd;
    size_t rec = kn_hp1_rec_floats(f->group, f->hd);
    float *part = malloc((size_t)nc * rec * sizeof(float));
    float *tmp = malloc(nout * sizeof(float));
    assert_true(part && tmp);
    char what[160];
    snprintf(what, sizeof(what), "%s type %d hd %d G %d n_kv %d K %d relu %d lo %g hi %g gamma %g",
             ops->name, f->type, f->hd, f->group, f->n_kv, f->hp.n_taps, f->hp.relu, f->hp.lo,
             f->hp.hi, f->hp.gamma);
    memset(f->got, 0xff, nout * sizeof(float));
    run_decode_rows(ops, f, f->got, KN_HP1_PV_SPARSE);
    expect_bound(f->got, f->want, f->bound, nout, 1.25, what);
    if (ref_out) {
        char w2[256];
        snprintf(w2, sizeof(w2), "%s vs ref", what);
        expect_bound(f->got, ref_out, f->bound, nout, 2.5, w2);
    }
    /* dense PV: the same bits (V is finite) */
    memset(tmp, 0xff, nout * sizeof(float));
    run_decode_rows(ops, f, tmp, KN_HP1_PV_DENSE);
    char w3[256];
    snprintf(w3, sizeof(w3), "%s dense vs sparse", what);
    expect_same(tmp, f->got, nout, w3);
    /* no PV: zeros */
    run_decode_rows(ops, f, tmp, KN_HP1_PV_NONE);
    for (size_t i = 0; i < nout; i++)
        if (tmp[i] != 0.0f) fail_msg("%s pv none: [%zu] %g", what, i, tmp[i]);
    /* split-K: every piece size, pieces computed separately, then reduced */
    for (int piece = 1; piece <= nc; piece++) {
        if (nc > 5 && piece > 3 && piece != nc - 1 && piece != nc) continue;
        memset(tmp, 0xff, nout * sizeof(float));
        for (int h = 0; h < f->n_head_kv; h++) {
            for (int c0 = 0; c0 < nc; c0 += piece) {
                struct kn_hp1_task t = fixture_task(f, h, 0, 1, tmp);
                t.at.c0 = c0;
                t.at.c1 = c0 + piece < nc ? c0 + piece : nc;
                t.at.part = part + (size_t)c0 * rec;
                ops->partial(&t);
            }
            struct kn_hp1_task t = fixture_task(f, h, 0, 1, tmp);
            t.at.c0 = 0;
            t.at.c1 = nc;
            t.at.part = part;
            ops->reduce(&t);
        }
        char w2[256];
        snprintf(w2, sizeof(w2), "%s split piece %d", what, piece);
        expect_same(tmp, f->got, nout, w2);
    }
    free(part);
    free(tmp);
}

static const int CTX_LENS[] = {1, 2, 3, 15, 16, 17, 255, 256, 257, 513, 1000, 2049};
#define N_CTX (sizeof(CTX_LENS) / sizeof(CTX_LENS[0]))

static void test_decode_variants(void **state) {
    (void)state;
    static const int GROUPS[] = {1, 3, 4, 8};
    static const int TYPES[] = {ANVIL_TYPE_F16, ANVIL_TYPE_Q8_0};
    static const int HDS[] = {64, 128};
    uint32_t seed = 100;
    int pi = 0;
    for (int ti = 0; ti < 2; ti++)
        for (int hi = 0; hi < 2; hi++)
            for (int gi = 0; gi < 4; gi++)
                for (size_t li = 0; li < N_CTX; li++) {
                    int G = GROUPS[gi], nkv = G <= 3 ? 2 : 1;
                    struct fixture f;
                    fixture_init(&f, TYPES[ti], HDS[hi], G * nkv, nkv, CTX_LENS[li], 1,
                                 &PSETS[pi++ % N_PSETS], seed++, true);
                    if (CTX_LENS[li] > 64) expect_bound_tight(&f, "decode oracle");
                    float *ref_out = NULL;
                    for (int vi = 0; vi < N_VARIANTS; vi++) {
                        const struct kn_hp1_ops *ops = pick(vi);
                        if (!ops) continue;
                        check_decode(ops, &f, ref_out);
                        if (vi == 0) {
                            size_t n = (size_t)f.n_head * f.hd;
                            ref_out = malloc(n * sizeof(float));
                            memcpy(ref_out, f.got, n * sizeof(float));
                        }
                    }
                    free(ref_out);
                    fixture_free(&f);
                }
    report_skips();
}

/* Other head sizes (every multiple of 32 takes the 64- and 32-column walks). */
static void test_head_dims(void **state) {
    (void)state;
    static const int HDS[] = {32, 96, 160, 256};
    for (int hi = 0; hi < 4; hi++)
        for (int ti = 0; ti < 2; ti++) {
            struct fixture f;
            fixture_init(&f, ti ? ANVIL_TYPE_Q8_0 : ANVIL_TYPE_F16, HDS[hi], 6, 2, 300, 1,
                         &PSETS[(hi + ti) % N_PSETS], 40 + hi * 2 + ti, true);
            for (int vi = 0; vi < N_VARIANTS; vi++) {
                const struct kn_hp1_ops *ops = pick(vi);
                if (ops) check_decode(ops, &f, NULL);
            }
            fixture_free(&f);
        }
}

/* The shapes the AVX-512 kernel treats differently from the AVX2 one:
 * head_dim 64 (PV in 4 vectors), 128 (8 vectors, one walk over a mask,
 * F16 sparse walks from the tiles), 256 (two walks); groups of 1, 3, 4
 * and 8 (up to 8 query vectors share a K pass in registers; prefill
 * tiles of more use the K buffer). Every variant against the oracle,
 * split, dense and tiles; and avx512 against avx2 bit for bit, since the
 * header gives them the same arithmetic. */
static void test_avx512_shapes(void **state) {
    (void)state;
    static const int HDS[] = {64, 128, 256};
    static const int GROUPS[] = {1, 3, 4, 8};
    const struct kn_hp1_ops *v2 = kn_hp1_select("avx2"), *v5 = kn_hp1_select("avx512");
    uint32_t seed = 1200;
    int pi = 0;
    for (int ti = 0; ti < 2; ti++)
        for (int hi = 0; hi < 3; hi++)
            for (int gi = 0; gi < 4; gi++) {
                int type = ti ? ANVIL_TYPE_Q8_0 : ANVIL_TYPE_F16, hd = HDS[hi], G = GROUPS[gi];
                int nkv = G <= 3 ? 2 : 1;
                const struct pset *ps = &PSETS[pi++ % N_PSETS];
                char what[96];
                /* decode: oracle, dense, every split */
                struct fixture f;
                fixture_init(&f, type, hd, G * nkv, nkv, 530, 1, ps, seed++, true);
                float *d2 = NULL;
                size_t nd = (size_t)f.n_head * hd;
                for (int vi = 0; vi < N_VARIANTS; vi++) {
                    const struct kn_hp1_ops *ops = pick(vi);
                    if (!ops) continue;
                    check_decode(ops, &f, NULL);
                    if (ops == v2 && v5 && v5 != v2) {
                        d2 = malloc(nd * sizeof(float));
                        memcpy(d2, f.got, nd * sizeof(float));
                    } else if (ops == v5 && d2) {
                        snprintf(what, sizeof(what), "avx512 vs avx2 decode type %d hd %d G %d", type, hd, G);
                        expect_same(f.got, d2, nd, what);
                    }
                }
                free(d2);
                fixture_free(&f);
                /* prefill: a tile of every row against decode rows (tiles
                 * of 4 rows at G 8 take the K buffer) */
                int rows = KN_ATTN_MAXQ / G < 6 ? KN_ATTN_MAXQ / G : 6;
                fixture_init(&f, type, hd, G * nkv, nkv, 250 + rows, rows, ps, seed++, true);
                size_t n = (size_t)rows * f.n_head * hd;
                float *dec = malloc(n * sizeof(float)), *t2 = malloc(n * sizeof(float));
                bool have2 = false;
                for (int vi = 0; vi < N_VARIANTS; vi++) {
                    const struct kn_hp1_ops *ops = pick(vi);
                    if (!ops) continue;
                    snprintf(what, sizeof(what), "%s tile type %d hd %d G %d", ops->name, type, hd, G);
                    run_decode_rows(ops, &f, dec, KN_HP1_PV_SPARSE);
                    expect_bound(dec, f.want, f.bound, n, 1.25, what);
                    memset(f.got, 0xff, n * sizeof(float));
                    for (int h = 0; h < nkv; h++) {
                        struct kn_hp1_task t = fixture_task(&f, h, 0, rows, f.got);
                        ops->attn(&t);
                    }
                    expect_same(f.got, dec, n, what);
                    if (ops == v2 && v5 && v5 != v2) {
                        memcpy(t2, f.got, n * sizeof(float));
                        have2 = true;
                    } else if (ops == v5 && have2) {
                        snprintf(what, sizeof(what), "avx512 vs avx2 tile type %d hd %d G %d", type, hd, G);
                        expect_same(f.got, t2, n, what);
                    }
                }
                free(dec);
                free(t2);
                fixture_free(&f);
            }
}

/* ---------------------------------------------------------------------- */
/* prefill: tiles vs decode rows, bit for bit */

static void test_prefill_variants(void **state) {
    (void)state;
    static const struct {
        int type, hd, n_head, n_head_kv, pos, n_rows;
    } C[] = {
        {ANVIL_TYPE_F16, 64, 9, 3, 0, 40},    /* no prefix */
        {ANVIL_TYPE_F16, 64, 9, 3, 250, 30},  /* prefix, rows cross a chunk edge */
        {ANVIL_TYPE_Q8_0, 128, 8, 2, 17, 33}, /* GQA 4 */
        {ANVIL_TYPE_F16, 128, 4, 4, 500, 20}, /* MHA, rows cross 512 */
        {ANVIL_TYPE_Q8_0, 64, 8, 1, 0, 9},    /* GQA 8 */
        {ANVIL_TYPE_F16, 64, 3, 1, 1, 2},     /* tiny: the FIR sees the first keys */
        {ANVIL_TYPE_Q8_0, 64, 6, 2, 30, 12},  /* Q8_0, GQA 3: decode reads K in place, tiles buffer it */
    };
    for (size_t ci = 0; ci < sizeof(C) / sizeof(C[0]); ci++) {
        for (size_t pi = 0; pi < N_PSETS; pi += 2) {
            struct fixture f;
            fixture_init(&f, C[ci].type, C[ci].hd, C[ci].n_head, C[ci].n_head_kv,
                         C[ci].pos + C[ci].n_rows, C[ci].n_rows, &PSETS[(pi + ci) % N_PSETS],
                         300 + (uint32_t)(ci * 10 + pi), true);
            size_t n = (size_t)f.n_rows * f.n_head * f.hd;
            float *dec = malloc(n * sizeof(float));
            assert_non_null(dec);
            for (int vi = 0; vi < N_VARIANTS; vi++) {
                const struct kn_hp1_ops *ops = pick(vi);
                if (!ops) continue;
                char what[128];
                snprintf(what, sizeof(what), "prefill %s case %zu pset %zu", ops->name, ci,
                         (pi + ci) % N_PSETS);
                run_decode_rows(ops, &f, dec, KN_HP1_PV_SPARSE);
                expect_bound(dec, f.want, f.bound, n, 1.25, what);
                int max_rows = KN_ATTN_MAXQ / f.group;
                for (int tile = 2; tile <= max_rows; tile = tile * 2 + 1) {
                    for (int pv = 0; pv < 2; pv++) {
                        memset(f.got, 0xff, n * sizeof(float));
                        for (int h = 0; h < f.n_head_kv; h++)
                            for (int r0 = 0; r0 < f.n_rows; r0 += tile) {
                                int nr = f.n_rows - r0 < tile ? f.n_rows - r0 : tile;
                                struct kn_hp1_task t = fixture_task(&f, h, r0, nr, f.got);
                                t.pv = (enum kn_hp1_pv)pv;
                                ops->attn(&t);
                            }
                        char w2[256];
                        snprintf(w2, sizeof(w2), "%s tile %d pv %d vs decode", what, tile, pv);
                        expect_same(f.got, dec, n, w2);
                    }
                }
            }
            free(dec);
            fixture_free(&f);
        }
    }
}

/* The numbers do not depend on the block size: the same K/V in caches of
 * 16-, 32- and 64-token blocks give the same bits (with 32 and 64 the FIR
 * history of a step sits in the same block, with 16 in the previous one). */
static void test_block_sizes(void **state) {
    (void)state;
    for (int ti = 0; ti < 2; ti++) {
        int type = ti ? ANVIL_TYPE_Q8_0 : ANVIL_TYPE_F16;
        float *first[N_VARIANTS] = {NULL};
        for (int bs = 16; bs <= 64; bs *= 2) {
            g_block = bs;
            struct fixture f;
            fixture_init(&f, type, 64, 9, 3, 300, 5, &PSETS[0], 900, true);
            size_t n = (size_t)f.n_rows * f.n_head * f.hd;
            for (int vi = 0; vi < N_VARIANTS; vi++) {
                const struct kn_hp1_ops *ops = pick(vi);
                if (!ops) continue;
                for (int h = 0; h < f.n_head_kv; h++) {
                    struct kn_hp1_task t = fixture_task(&f, h, 0, f.n_rows, f.got);
                    ops->attn(&t);
                }
                char what[96];
                snprintf(what, sizeof(what), "%s type %d block %d", ops->name, type, bs);
                expect_bound(f.got, f.want, f.bound, n, 1.25, what);
                if (!first[vi]) {
                    first[vi] = malloc(n * sizeof(float));
                    memcpy(first[vi], f.got, n * sizeof(float));
                } else {
                    expect_same(f.got, first[vi], n, what);
                }
            }
            fixture_free(&f);
            /* and decode with every split: the FIR history of chunk 1 is
             * the step [240, 256), inside a block of 32 or 64 keys */
            fixture_init(&f, type, 64, 9, 3, 600, 1, &PSETS[4], 901, true);
            for (int vi = 0; vi < N_VARIANTS; vi++) {
                const struct kn_hp1_ops *ops = pick(vi);
                if (ops) check_decode(ops, &f, NULL);
            }
            fixture_free(&f);
        }
        for (int vi = 0; vi < N_VARIANTS; vi++) free(first[vi]);
    }
    g_block = 16;
}

/* ---------------------------------------------------------------------- */
/* batch invariance: a batch on a thread pool with random split plans */

enum { BN = 6, BNH = 9, BNKV = 3, BHD = 64, BMAXC = 8 };

struct bseq {
    int n_kv, n_tokens; /* the last n_tokens of n_kv are query rows */
};

/* One work item: a prefill tile or decode task (c1 == 0), or a piece of
 * chunks [c0, c1) of a decode row. */
struct bitem {
    int seq, h, r0, nr, c0, c1;
};

struct bjob {
    const struct kn_hp1_ops *ops;
    struct kv_cache *kv;
    const struct bseq *bs;
    float *const *q, *const *out;
    const float *taps;
    struct kn_hp1_params hp;
    struct bitem items[512];
    int n_items;
    float *part[BN]; /* decode rows: (n_head_kv, chunks) records */
    int split[BN];
};

static struct kn_hp1_task bjob_task(const struct bjob *j, int s, int h, int r0, int nr) {
    size_t stride = (size_t)BNH * BHD;
    int G = BNH / BNKV;
    struct kn_hp1_task t = {
        .at = {
            .kv = kv_layout(j->kv),
            .base = kv_layer_base(j->kv, 0),
            .blocks = kv_seq_blocks(j->kv, s),
            .kv_head = h,
            .group = G,
            .scale = 0.125f,
            .q = j->q[s] + (size_t)r0 * stride + (size_t)h * G * BHD,
            .q_stride = stride,
            .out = j->out[s] + (size_t)r0 * stride + (size_t)h * G * BHD,
            .out_stride = stride,
            .pos = j->bs[s].n_kv - j->bs[s].n_tokens + r0,
            .n_rows = nr,
        },
        .hp = j->hp,
    };
    t.hp.taps = j->taps + (size_t)h * G * j->hp.n_taps;
    return t;
}

static void bjob_fn(void *arg, int ith, int nth) {
    struct bjob *j = arg;
    int G = BNH / BNKV;
    size_t rec = kn_hp1_rec_floats(G, BHD);
    /* items round robin over the threads, then a barrier, then reductions */
    for (int i = ith; i < j->n_items; i += nth) {
        const struct bitem *it = &j->items[i];
        struct kn_hp1_task t = bjob_task(j, it->seq, it->h, it->r0, it->nr);
        if (it->c1 == 0) {
            j->ops->attn(&t);
        } else {
            int nc = kn_attn_n_chunks(j->bs[it->seq].n_kv);
            t.at.c0 = it->c0;
            t.at.c1 = it->c1;
            t.at.part = j->part[it->seq] + ((size_t)it->h * nc + it->c0) * rec;
            j->ops->partial(&t);
        }
    }
}

static void bjob_reduce(struct bjob *j, const int *order, int n) {
    int G = BNH / BNKV;
    size_t rec = kn_hp1_rec_floats(G, BHD);
    for (int oi = 0; oi < n; oi++) {
        int s = order[oi];
        if (!j->split[s] || j->bs[s].n_tokens > 1) continue;
        int nc = kn_attn_n_chunks(j->bs[s].n_kv);
        for (int h = 0; h < BNKV; h++) {
            struct kn_hp1_task t = bjob_task(j, s, h, 0, 1);
            t.at.c0 = 0;
            t.at.c1 = nc;
            t.at.part = j->part[s] + (size_t)h * nc * rec;
            j->ops->reduce(&t);
        }
    }
}

/* Plan: prefill sequences in tiles of `tile` rows; decode rows split into
 * pieces of random size when split[s], else one task. */
static void bjob_plan(struct bjob *j, const int *order, int n, int tile, uint32_t *x) {
    j->n_items = 0;
    for (int oi = 0; oi < n; oi++) {
        int s = order[oi];
        const struct bseq *b = &j->bs[s];
        for (int h = 0; h < BNKV; h++) {
            if (b->n_tokens > 1) {
                for (int r0 = 0; r0 < b->n_tokens; r0 += tile) {
                    int nr = b->n_tokens - r0 < tile ? b->n_tokens - r0 : tile;
                    j->items[j->n_items++] = (struct bitem){s, h, r0, nr, 0, 0};
                }
            } else if (!j->split[s]) {
                j->items[j->n_items++] = (struct bitem){s, h, 0, 1, 0, 0};
            } else {
                int nc = kn_attn_n_chunks(b->n_kv);
                for (int c0 = 0; c0 < nc;) {
                    int len = 1 + (int)((*x = *x * 1664525u + 1013904223u) >> 16) % 3;
                    int c1 = c0 + len < nc ? c0 + len : nc;
                    j->items[j->n_items++] = (struct bitem){s, h, 0, 1, c0, c1};
                    c0 = c1;
                }
            }
            assert_true(j->n_items < 500);
        }
    }
}

/* The queries (q, with room for ref and out) and the K/V of the BN
 * sequences of B: the queries of every sequence first, then the K/V
 * block by block in turn, so the block tables interleave. */
static void batch_fill(struct kv_cache *kv, const struct bseq *B, float **q, float **ref,
                       float **out, uint32_t *x) {
    for (int s = 0; s < BN; s++) {
        size_t n = (size_t)B[s].n_tokens * BNH * BHD;
        q[s] = malloc(n * sizeof(float));
        ref[s] = malloc(n * sizeof(float));
        out[s] = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++) q[s][i] = 4.0f * lcg_uniform(x);
    }
    for (int t0 = 0; t0 < 1100; t0 += 16)
        for (int s = 0; s < BN; s++)
            if (t0 < B[s].n_kv) {
                int nn = B[s].n_kv - t0 < 16 ? B[s].n_kv - t0 : 16;
                fill_seq(kv, s, -1, nn, BNKV, BHD, x, NULL, NULL);
            }
}

static void test_batch_invariance(void **state) {
    (void)state;
    static const struct bseq B[BN] = {{1, 1}, {3, 1}, {300, 1}, {1100, 1}, {300, 20}, {40, 40}};
    struct pool *pool = NULL;
    assert_int_equal(pool_create(2, &pool), ANVIL_OK);
    for (int ti = 0; ti < 2; ti++) {
        int type = ti ? ANVIL_TYPE_Q8_0 : ANVIL_TYPE_F16;
        struct kv_cache *kv = make_kv(type, BHD, BNH, BNKV, 1200, BN, 2);
        uint32_t x = 77 + ti;
        float *q[BN], *ref[BN], *out[BN];
        batch_fill(kv, B, q, ref, out, &x);
        float taps[BNH * 3];
        for (int i = 0; i < BNH * 3; i++) taps[i] = lcg_uniform(&x);
        struct bjob j = {.kv = kv, .bs = B, .q = q, .out = out, .taps = taps};
        j.hp = (struct kn_hp1_params){.taps = taps, .n_taps = 3, .gamma = 1.0f, .lo = 0.0f,
                                      .hi = 1.0f, .relu = true};
        for (int s = 0; s < BN; s++)
            j.part[s] = malloc((size_t)BNKV * kn_attn_n_chunks(B[s].n_kv) *
                               kn_hp1_rec_floats(BNH / BNKV, BHD) * sizeof(float));
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const struct kn_hp1_ops *ops = pick(vi);
            if (!ops) continue;
            j.ops = ops;
            /* each sequence alone, one thread, decode rows unsplit, prefill as rows */
            memset(j.split, 0, sizeof(j.split));
            for (int s = 0; s < BN; s++) {
                j.out = ref;
                bjob_plan(&j, &s, 1, 1, &x);
                bjob_fn(&j, 0, 1);
            }
            /* the oracle, for good measure */
            double *scratch = malloc(3 * 1200 * sizeof(double));
            for (int s = 0; s < BN; s++) {
                size_t n = (size_t)B[s].n_tokens * BNH * BHD;
                float *nv = malloc(n * sizeof(float)), *bd = malloc(n * sizeof(float));
                kn_hp1_naive_ref(kv_layout(kv), kv_layer_base(kv, 0), kv_seq_blocks(kv, s), BNH, &j.hp,
                                 0.125f, q[s], BNH * BHD, nv, BNH * BHD, B[s].n_kv - B[s].n_tokens,
                                 B[s].n_tokens, scratch, bd, NULL, NULL);
                expect_bound(ref[s], nv, bd, n, 1.25, ops->name);
                free(nv);
                free(bd);
            }
            free(scratch);
            /* the whole batch (or a rotated part) on 2 threads, random plans */
            for (int trial = 0; trial < 6; trial++) {
                int order[BN], n = 0;
                for (int i = 0; i < BN; i++)
                    if (trial < 3 || i % 2 == trial % 2) order[n++] = (i + trial) % BN;
                for (int s = 0; s < BN; s++) j.split[s] = (trial + s) % 3 != 0;
                int tile = 1 + trial * 2;
                if (tile > KN_ATTN_MAXQ / (BNH / BNKV)) tile = KN_ATTN_MAXQ / (BNH / BNKV);
                bjob_plan(&j, order, n, tile, &x);
                j.out = out;
                for (int i = 0; i < n; i++)
                    memset(out[order[i]], 0xff, (size_t)B[order[i]].n_tokens * BNH * BHD * sizeof(float));
                pool_run(pool, bjob_fn, &j);
                bjob_reduce(&j, order, n);
                for (int i = 0; i < n; i++) {
                    int s = order[i];
                    char what[128];
                    snprintf(what, sizeof(what), "%s type %d trial %d seq %d", ops->name, type, trial, s);
                    expect_same(out[s], ref[s], (size_t)B[s].n_tokens * BNH * BHD, what);
                }
            }
        }
        for (int s = 0; s < BN; s++) {
            free(q[s]);
            free(ref[s]);
            free(out[s]);
            free(j.part[s]);
        }
        kv_free(kv);
    }
    pool_free(pool);
}

/* ---------------------------------------------------------------------- */
/* the engine's attention driver (attn/attn_plan.c) with HP1 plans */

/* One layer's HP1 attention for sequences order[0, n) of B through
 * kv_attn_prepare_hp1 + kv_attn_run. */
static void driver_run(struct kv_cache *kv, const struct kn_hp1_ops *ops,
                       const struct kn_hp1_params *hp, struct pool *pool, int nt,
                       enum kv_split split, const struct bseq *B, const int *order, int n,
                       float *const *q, float *const *out, bool *was_split) {
    struct kv_attn_seq s[BN];
    for (int i = 0; i < n; i++) {
        int k = order[i];
        s[i] = (struct kv_attn_seq){.seq = k, .pos = B[k].n_kv - B[k].n_tokens,
                                    .n_tokens = B[k].n_tokens, .q = q[k], .out = out[k]};
    }
    struct kv_attn_job *job = NULL;
    size_t stride = (size_t)BNH * BHD;
    assert_int_equal(kv_attn_prepare_hp1(kv, ops, hp, KN_HP1_PV_SPARSE, 0, s, n, stride, stride, nt,
                                         split, 0.125f, &job),
                     ANVIL_OK);
    *was_split = kv_attn_job_split(job);
    kv_attn_run(job, pool);
}

/* The driver's plans (threads 1..3, split off/on/auto, whole batch or
 * parts of it; decode rows around the chunk edges, prefill rows on a
 * prefix and from scratch) give every sequence the bits of the kernel
 * run on it alone, row by row: the FIR history of split pieces and the
 * plain-sum reduction are the kernel's, the plan only schedules. */
static void test_driver(void **state) {
    (void)state;
    static const struct bseq B[BN] = {{1, 1}, {257, 1}, {300, 1}, {1100, 1}, {300, 20}, {40, 40}};
    struct pool *pools[4] = {NULL};
    for (int nt = 2; nt <= 3; nt++) assert_int_equal(pool_create(nt, &pools[nt]), ANVIL_OK);
    for (int ti = 0; ti < 2; ti++) {
        int type = ti ? ANVIL_TYPE_Q8_0 : ANVIL_TYPE_F16;
        struct kv_cache *kv = make_kv(type, BHD, BNH, BNKV, 1200, BN, 3);
        uint32_t x = 91 + ti;
        float *q[BN], *ref[BN], *out[BN];
        batch_fill(kv, B, q, ref, out, &x);
        float taps[BNH * 4];
        for (int i = 0; i < BNH * 4; i++) taps[i] = lcg_uniform(&x);
        struct kn_hp1_params hp = {.taps = taps, .n_taps = 4, .gamma = 0.5f, .lo = 0.0f,
                                   .hi = 1.0f, .relu = true};
        struct bjob j = {.kv = kv, .bs = B, .q = q, .out = ref, .taps = taps, .hp = hp};
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const struct kn_hp1_ops *ops = pick(vi);
            if (!ops) continue;
            j.ops = ops;
            memset(j.split, 0, sizeof(j.split));
            for (int s = 0; s < BN; s++) { /* alone, row by row, unsplit */
                bjob_plan(&j, &s, 1, 1, &x);
                bjob_fn(&j, 0, 1);
            }
            int n_split = 0;
            for (int nt = 1; nt <= 3; nt++)
                for (int sp = 0; sp < 3; sp++)
                    for (int sub = 0; sub < 3; sub++) {
                        if (sub && nt != 2) continue; /* parts on the machine's 2 threads */
                        int order[BN], n = 0;
                        for (int i = 0; i < BN; i++) {
                            int k = sub == 2 ? (i + 3) % BN : i;
                            if (sub == 1 && B[k].n_tokens != 1) continue;
                            if (sub == 2 && i >= 4) continue;
                            order[n++] = k;
                        }
                        for (int i = 0; i < n; i++)
                            memset(out[order[i]], 0xff,
                                   (size_t)B[order[i]].n_tokens * BNH * BHD * sizeof(float));
                        bool was_split = false;
                        driver_run(kv, ops, &hp, pools[nt], nt, (enum kv_split)sp, B, order, n, q,
                                   out, &was_split);
                        if (sp == KV_SPLIT_ON) assert_true(was_split);
                        if (sp == KV_SPLIT_OFF) assert_false(was_split);
                        n_split += was_split;
                        for (int i = 0; i < n; i++) {
                            char what[128];
                            snprintf(what, sizeof(what), "driver %s type %d threads %d split %d sub %d seq %d",
                                     ops->name, type, nt, sp, sub, order[i]);
                            expect_same(out[order[i]], ref[order[i]],
                                        (size_t)B[order[i]].n_tokens * BNH * BHD, what);
                        }
                    }
            assert_true(n_split > 0);
        }
        for (int s = 0; s < BN; s++) {
            free(q[s]);
            free(ref[s]);
            free(out[s]);
        }
        kv_free(kv);
    }
    for (int nt = 2; nt <= 3; nt++) pool_free(pools[nt]);
}

/* The split policy (KV_SPLIT_AUTO) does split a long batch-1 decode row
 * on a one-kv-head shape at 2 threads, the case the model tests use to
 * reach split-K through the forward pass (tests/py/test_hp1_model.py). */
static void test_driver_policy_splits(void **state) {
    (void)state;
    struct kv_cache *kv = make_kv(ANVIL_TYPE_F16, 32, 4, 1, 600, 1, 2);
    uint32_t x = 5;
    fill_seq(kv, 0, -1, 520, 1, 32, &x, NULL, NULL);
    float q[4 * 32], o[4 * 32], taps[4 * 3];
    for (int i = 0; i < 4 * 32; i++) q[i] = lcg_uniform(&x);
    for (int i = 0; i < 4 * 3; i++) taps[i] = lcg_uniform(&x);
    struct kn_hp1_params hp = {.taps = taps, .n_taps = 3, .gamma = 1.0f, .lo = 0.0f, .hi = 1.0f, .relu = true};
    struct kv_attn_seq s = {.seq = 0, .pos = 519, .n_tokens = 1, .q = q, .out = o};
    struct kv_attn_job *job = NULL;
    assert_int_equal(kv_attn_prepare_hp1(kv, kn_hp1_select("ref"), &hp, KN_HP1_PV_SPARSE, 0, &s, 1,
                                         128, 128, 2, KV_SPLIT_AUTO, 0.125f, &job),
                     ANVIL_OK);
    assert_true(kv_attn_job_split(job));
    kv_free(kv);
}

/* Bad plans are refused before anything runs: a windowed cache, bad
 * parameters, a bad PV mode, the softmax checks (bad layer, threads). */
static void test_driver_bad_input(void **state) {
    (void)state;
    struct kv_cache *kv = make_kv(ANVIL_TYPE_F16, 64, 3, 1, 64, 2, 2);
    uint32_t x = 1;
    fill_seq(kv, 0, -1, 20, 1, 64, &x, NULL, NULL);
    float q[3 * 64], o[3 * 64], taps[3 * 3] = {1, -0.5f, -0.5f, 1, -0.5f, -0.5f, 1, -0.5f, -0.5f};
    for (int i = 0; i < 3 * 64; i++) q[i] = lcg_uniform(&x);
    const struct kn_hp1_ops *ops = kn_hp1_select("ref");
    struct kn_hp1_params hp = {.taps = taps, .n_taps = 3, .gamma = 1.0f, .lo = 0.0f, .hi = 1.0f, .relu = true};
    struct kv_attn_seq s = {.seq = 0, .pos = 19, .n_tokens = 1, .q = q, .out = o};
    struct kv_attn_job *job = NULL;
    struct kn_hp1_params bad = hp;
    bad.n_taps = 0;
    assert_int_equal(kv_attn_prepare_hp1(kv, ops, &bad, KN_HP1_PV_SPARSE, 0, &s, 1, 192, 192, 1,
                                         KV_SPLIT_AUTO, 0.125f, &job), ANVIL_ERR_INVALID);
    bad.n_taps = KN_HP1_MAX_TAPS + 1;
    assert_int_equal(kv_attn_prepare_hp1(kv, ops, &bad, KN_HP1_PV_SPARSE, 0, &s, 1, 192, 192, 1,
                                         KV_SPLIT_AUTO, 0.125f, &job), ANVIL_ERR_INVALID);
    bad = hp;
    bad.taps = NULL;
    assert_int_equal(kv_attn_prepare_hp1(kv, ops, &bad, KN_HP1_PV_SPARSE, 0, &s, 1, 192, 192, 1,
                                         KV_SPLIT_AUTO, 0.125f, &job), ANVIL_ERR_INVALID);
    assert_int_equal(kv_attn_prepare_hp1(kv, NULL, &hp, KN_HP1_PV_SPARSE, 0, &s, 1, 192, 192, 1,
                                         KV_SPLIT_AUTO, 0.125f, &job), ANVIL_ERR_INVALID);
    assert_int_equal(kv_attn_prepare_hp1(kv, ops, &hp, (enum kn_hp1_pv)7, 0, &s, 1, 192, 192, 1,
                                         KV_SPLIT_AUTO, 0.125f, &job), ANVIL_ERR_INVALID);
    assert_int_equal(kv_attn_prepare_hp1(kv, ops, &hp, KN_HP1_PV_SPARSE, 1, &s, 1, 192, 192, 1,
                                         KV_SPLIT_AUTO, 0.125f, &job), ANVIL_ERR_INVALID);
    assert_int_equal(kv_attn_prepare_hp1(kv, ops, &hp, KN_HP1_PV_SPARSE, 0, &s, 1, 192, 192, 3,
                                         KV_SPLIT_AUTO, 0.125f, &job), ANVIL_ERR_INVALID);
    s.pos = 40; /* past the sequence */
    assert_int_equal(kv_attn_prepare_hp1(kv, ops, &hp, KN_HP1_PV_SPARSE, 0, &s, 1, 192, 192, 1,
                                         KV_SPLIT_AUTO, 0.125f, &job), ANVIL_ERR_INVALID);
    s.pos = 19;
    assert_int_equal(kv_attn_prepare_hp1(kv, ops, &hp, KN_HP1_PV_SPARSE, 0, &s, 1, 192, 192, 2,
                                         KV_SPLIT_AUTO, 0.125f, &job), ANVIL_OK);
    kv_free(kv);
    /* a windowed cache */
    struct kv_params p = {.n_layer = 1, .n_head = 3, .n_head_kv = 1, .head_dim = 64,
                          .type = ANVIL_TYPE_F16, .block_size = 16, .n_blocks = 8, .n_seq_max = 1,
                          .n_ctx = 64, .n_threads = 1, .window = 16};
    char err[256];
    assert_int_equal(kv_init(&p, &kv, err, sizeof(err)), ANVIL_OK);
    fill_seq(kv, 0, -1, 20, 1, 64, &x, NULL, NULL);
    assert_int_equal(kv_attn_prepare_hp1(kv, ops, &hp, KN_HP1_PV_SPARSE, 0, &s, 1, 192, 192, 1,
                                         KV_SPLIT_AUTO, 0.125f, &job), ANVIL_ERR_INVALID);
    kv_free(kv);
}

/* ---------------------------------------------------------------------- */
/* edges */

/* gamma 0, and lo = hi = 0: every p is zero and the output is exactly +0
 * (no -0, no NaN), for every mode and split. */
static void test_all_zero(void **state) {
    (void)state;
    struct pset zs[2] = {{3, 0.0f, 0.0f, 1.0f, true, 1.0f}, {3, 1.0f, 0.0f, 0.0f, false, 1.0f}};
    for (int zi = 0; zi < 2; zi++) {
        struct fixture f;
        fixture_init(&f, ANVIL_TYPE_F16, 64, 9, 3, 600, 3, &zs[zi], 5 + zi, true);
        assert_int_equal(f.n_zero, f.n_gate);
        size_t n = (size_t)f.n_rows * f.n_head * f.hd;
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const struct kn_hp1_ops *ops = pick(vi);
            if (!ops) continue;
            for (int pv = 0; pv < 3; pv++) {
                memset(f.got, 0xff, n * sizeof(float));
                run_decode_rows(ops, &f, f.got, (enum kn_hp1_pv)pv);
                for (size_t i = 0; i < n; i++) {
                    uint32_t bits;
                    memcpy(&bits, &f.got[i], 4);
                    if (bits != 0) fail_msg("%s zero set %d pv %d: [%zu] = %g (bits %08x)", ops->name,
                                            zi, pv, i, f.got[i], bits);
                }
            }
            memset(f.got, 0xff, n * sizeof(float));
            for (int h = 0; h < f.n_head_kv; h++) {
                struct kn_hp1_task t = fixture_task(&f, h, 0, f.n_rows, f.got);
                ops->attn(&t);
            }
            for (size_t i = 0; i < n; i++)
                if (f.got[i] != 0.0f || signbit(f.got[i])) fail_msg("%s tile: [%zu] %g", ops->name, i, f.got[i]);
        }
        fixture_free(&f);
    }
}

/* PV never lets a V row that a query vector does not need into its sum,
 * even when another head of the group needs it (the row is then loaded
 * and converted): head g's score follows key dim g, on for 50%, 70%, 30%
 * of the keys (so heads 1 and 2 take both the masked and the sparse
 * walk), and V is infinite exactly where head 0 is on and heads 1 and 2
 * are off. Heads 1 and 2 must match the oracle; head 0 and the dense
 * walk (0 * inf) must not be finite, or the test proves nothing. A
 * second group of 8 heads (0 on for 50%, the others for 30%) gives
 * spans whose F16 rows serve many sparse walks: the avx2 kernel then
 * converts them to its buffer, where with 3 heads the sparse walks read
 * the tiles (span_pv); heads 1-7 must match there too. The 3 heads again
 * at head_dim 128, where the avx512 kernel's sparse walks read the tiles
 * too (avx2's use the buffer there). */
static void test_sparse_skips_v(void **state) {
    (void)state;
    enum { NKV = 700, NH_MAX = 8 };
    static const float ONS[2][NH_MAX] = {{0.5f, 0.7f, 0.3f},
                                         {0.5f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f, 0.3f}};
    for (int ci = 0; ci < 6; ci++) {
        int type = ci % 2 ? ANVIL_TYPE_Q8_0 : ANVIL_TYPE_F16;
        int nh = ci < 2 || ci >= 4 ? 3 : 8;
        const int HD = ci < 4 ? 64 : 128;
        const float *on_frac = ONS[nh == 3 ? 0 : 1];
        size_t row = HD;
        float *k = malloc((size_t)NKV * row * sizeof(float)), *v = malloc((size_t)NKV * row * sizeof(float));
        uint32_t x = 123;
        int n_inf = 0;
        for (int t = 0; t < NKV; t++) {
            bool on[NH_MAX], others = false;
            for (int g = 0; g < nh; g++) on[g] = 0.5f * (lcg_uniform(&x) + 1.0f) < on_frac[g];
            for (int g = 1; g < nh; g++) others |= on[g];
            bool inf = on[0] && !others;
            n_inf += inf;
            for (int d = 0; d < HD; d++) {
                k[t * row + d] = d < nh ? (on[d] ? 1.0f : -1.0f) : 0.05f * lcg_uniform(&x);
                /* stored as inf: F16 overflows, and so does Q8_0's scale
                 * (quants +-127), without a NaN through the quantizer */
                v[t * row + d] = inf ? (d % 2 ? 1e30f : -1e30f) : lcg_uniform(&x);
            }
        }
        assert_true(n_inf > 20);
        struct fixture f;
        memset(&f, 0, sizeof(f));
        f.type = type;
        f.hd = HD;
        f.n_head = nh;
        f.n_head_kv = 1;
        f.group = nh;
        f.n_kv = NKV;
        f.n_rows = 2;
        f.kv = make_kv(type, HD, nh, 1, NKV + 16, 2, 2);
        fill_seq(f.kv, 0, 1, NKV, 1, HD, &x, k, v);
        size_t n = (size_t)f.n_rows * nh * HD;
        f.q = calloc(n, sizeof(float));
        f.want = malloc(n * sizeof(float));
        f.bound = malloc(n * sizeof(float));
        f.got = malloc(n * sizeof(float));
        f.taps = malloc(nh * 3 * sizeof(float));
        for (int i = 0; i < f.n_rows * nh; i++) {
            int g = i % nh;
            f.q[i * HD + g] = 4.0f + i;
            for (int d = nh; d < HD; d++) f.q[i * HD + d] = lcg_uniform(&x);
            f.taps[g * 3] = 1.0f;
            f.taps[g * 3 + 1] = f.taps[g * 3 + 2] = -0.5f;
        }
        f.hp = (struct kn_hp1_params){.taps = f.taps, .n_taps = 3, .gamma = 1.0f, .lo = 0.0f, .hi = 1.0f,
                                      .relu = true};
        fixture_oracle(&f);
        float *tile = malloc(n * sizeof(float));
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const struct kn_hp1_ops *ops = pick(vi);
            if (!ops) continue;
            for (int mode = 0; mode < 3; mode++) {
                /* decode rows, a prefill tile, split pieces of one chunk each */
                memset(f.got, 0xff, n * sizeof(float));
                if (mode == 0) {
                    run_decode_rows(ops, &f, f.got, KN_HP1_PV_SPARSE);
                } else if (mode == 1) {
                    struct kn_hp1_task t = fixture_task(&f, 0, 0, f.n_rows, f.got);
                    ops->attn(&t);
                } else {
                    for (int r = 0; r < f.n_rows; r++) {
                        int nc = kn_attn_n_chunks(NKV - f.n_rows + r + 1);
                        float *part = malloc((size_t)nc * nh * HD * sizeof(float));
                        struct kn_hp1_task t = fixture_task(&f, 0, r, 1, f.got);
                        for (int c = 0; c < nc; c++) {
                            t.at.c0 = c;
                            t.at.c1 = c + 1;
                            t.at.part = part + (size_t)c * nh * HD;
                            ops->partial(&t);
                        }
                        t.at.c0 = 0;
                        t.at.c1 = nc;
                        t.at.part = part;
                        ops->reduce(&t);
                        free(part);
                    }
                }
                for (int r = 0; r < f.n_rows; r++) {
                    const float *o = f.got + (size_t)r * nh * HD;
                    int fin0 = 0;
                    for (int d = 0; d < HD; d++) fin0 += isfinite(o[d]);
                    if (fin0 == HD) fail_msg("%s mode %d: head 0 is finite: the inf rows were not used", ops->name, mode);
                    char what[64];
                    snprintf(what, sizeof(what), "%s mode %d row %d heads 1-%d", ops->name, mode, r, nh - 1);
                    expect_bound(o + HD, f.want + (size_t)r * nh * HD + HD, f.bound + (size_t)r * nh * HD + HD,
                                 (size_t)(nh - 1) * HD, 1.25, what);
                }
            }
            /* the dense walk multiplies the inf rows by 0 */
            run_decode_rows(ops, &f, tile, KN_HP1_PV_DENSE);
            int nan = 0;
            for (size_t i = 0; i < n; i++) nan += i % (size_t)(nh * HD) >= (size_t)HD && isnan(tile[i]);
            if (!nan) fail_msg("%s: dense PV did not touch the inf rows", ops->name);
        }
        free(tile);
        free(k);
        free(v);
        fixture_free(&f);
    }
}

/* Scores far beyond float range (inf, and inf - inf = NaN inside the
 * dot): the gate maps them into [lo, hi], so outputs stay finite. With
 * positive taps and ReLU every key saturates at hi or lo, and outputs
 * match the oracle. */
static void test_extreme_scores(void **state) {
    (void)state;
    for (int pi = 0; pi < 4; pi++) {
        struct pset ps = {3, 1.0f, 0.0f, 1.0f, pi % 2 == 0, 1.0f};
        struct fixture f;
        fixture_init(&f, pi < 2 ? ANVIL_TYPE_F16 : ANVIL_TYPE_Q8_0, 64, 6, 2, 530, 3, &ps, 60 + pi, true);
        size_t n = (size_t)f.n_rows * f.n_head * f.hd;
        for (size_t i = 0; i < n; i++) f.q[i] *= 1e37f;
        for (int i = 0; i < f.n_head * 3; i++) f.taps[i] = pi < 2 ? fabsf(f.taps[i]) + 0.1f : f.taps[i];
        fixture_oracle(&f);
        double vmax = 0.0;
        for (size_t i = 0; i < n; i++) vmax = fabs(f.want[i]) > vmax ? fabs(f.want[i]) : vmax;
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const struct kn_hp1_ops *ops = pick(vi);
            if (!ops) continue;
            run_decode_rows(ops, &f, f.got, KN_HP1_PV_SPARSE);
            for (size_t i = 0; i < n; i++)
                if (!isfinite(f.got[i]) || fabs(f.got[i]) > 600.0)
                    fail_msg("%s extreme %d: [%zu] = %g", ops->name, pi, i, f.got[i]);
            if (pi == 0) expect_bound(f.got, f.want, f.bound, n, 1.25, "extreme, saturated");
        }
        fixture_free(&f);
    }
}

/* ---------------------------------------------------------------------- */
/* controlled sparsity */

/* Gate dimensions (keys once, then queries with an on share of
 * 1 - target) and taps calibrated on the ref scores
 * reach each target share within 2%, the oracle counts the same share,
 * and the kernels agree with the oracle at that sparsity. */
static void test_calibrate(void **state) {
    (void)state;
    static const double TARGET[] = {0.0, 0.5, 0.7, 0.9};
    enum { NKV = 1024, HD = 64, NH = 9, NHKV = 3 };
    for (int shared = 0; shared < 2; shared++) {
        size_t row = (size_t)NHKV * HD;
        float *k = malloc((size_t)NKV * row * sizeof(float));
        uint32_t x = 500 + shared;
        for (size_t i = 0; i < (size_t)NKV * row; i++) k[i] = lcg_uniform(&x);
        kn_hp1_gate_keys(k, row, NKV, NHKV, HD, NH / NHKV, shared, 99 + shared);
        struct fixture f;
        memset(&f, 0, sizeof(f));
        f.type = ANVIL_TYPE_F16;
        f.hd = HD;
        f.n_head = NH;
        f.n_head_kv = NHKV;
        f.group = NH / NHKV;
        f.n_kv = NKV;
        f.n_rows = 1;
        size_t n = (size_t)NH * HD;
        f.q = malloc(n * sizeof(float));
        f.want = malloc(n * sizeof(float));
        f.bound = malloc(n * sizeof(float));
        f.got = malloc(n * sizeof(float));
        f.taps = malloc(NH * 3 * sizeof(float));
        f.kv = make_kv(f.type, HD, NH, NHKV, NKV + 16, 2, 2);
        fill_seq(f.kv, 0, 1, NKV, NHKV, HD, &x, k, NULL);
        float *sc = malloc((size_t)NH * NKV * sizeof(float));
        for (int ti = 0; ti < 4; ti++) {
            for (size_t i = 0; i < n; i++) f.q[i] = lcg_uniform(&x);
            double on = 1.0 - TARGET[ti];
            kn_hp1_gate_queries(f.q, n, 1, NH, NHKV, HD, 0.125f, on);
            for (int i = 0; i < NH; i++)
                kn_hp1_scores_ref(kv_layout(f.kv), kv_layer_base(f.kv, 0), kv_seq_blocks(f.kv, 0),
                                  i / f.group, f.q + (size_t)i * HD, 0.125f, NKV, sc + (size_t)i * NKV);
            double got = kn_hp1_calibrate(sc, NH, NKV, TARGET[ti], NH, f.taps, &f.hp);
            printf("  calibrate %.2f shared %d -> %.4f (on %.2f, a = %g, lo = %g)\n", TARGET[ti], shared,
                   got, on, -f.taps[1], f.hp.lo);
            if (TARGET[ti] == 0.0) assert_true(got == 0.0);
            else if (!(fabs(got - TARGET[ti]) <= 0.02)) fail_msg("target %g reached %g", TARGET[ti], got);
            fixture_oracle(&f);
            double of = (double)f.n_zero / (double)f.n_gate;
            if (!(fabs(of - got) <= 0.005)) fail_msg("oracle zero share %g vs %g", of, got);
            for (int vi = 0; vi < N_VARIANTS; vi++) {
                const struct kn_hp1_ops *ops = pick(vi);
                if (ops) check_decode(ops, &f, NULL);
            }
        }
        free(sc);
        free(k);
        fixture_free(&f);
    }
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* a test name or glob */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_decode_variants),
        cmocka_unit_test(test_head_dims),
        cmocka_unit_test(test_avx512_shapes),
        cmocka_unit_test(test_prefill_variants),
        cmocka_unit_test(test_block_sizes),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_driver),
        cmocka_unit_test(test_driver_policy_splits),
        cmocka_unit_test(test_driver_bad_input),
        cmocka_unit_test(test_all_zero),
        cmocka_unit_test(test_sparse_skips_v),
        cmocka_unit_test(test_extreme_scores),
        cmocka_unit_test(test_calibrate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
