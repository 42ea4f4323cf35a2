/*
 * unit_attn.c - attention over the paged KV cache (attn/attn.h,
 * attn/attn_plan.c; fixture: attn_fixture.h):
 *   - the naive double reference against numpy golden outputs
 *     (tests/data/attn_golden.bin, made by tests/gen/gen_attn_golden.py);
 *   - every kernel variant the CPU runs (ref, avx2, avx512; others SKIP)
 *     against the naive reference: decode for context lengths around the
 *     block (16) and chunk (256) edges, GQA 1/3/4/8, head_dim 64/128, F16
 *     and Q8_0;
 *   - bit-exactness inside each variant: split-K with every chunk split
 *     equals the unsplit kernel; a prefill row equals the decode of that
 *     row whatever tile it sits in; the driver's output does not depend
 *     on threads, split policy or the rest of the batch;
 *   - attention sinks (gpt-oss) in every variant, windowed or not, split-K
 *     adding the sink once; the driver's sinks (kv_attn_job_set_sinks).
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
#include "attn/attn_policy.h"
#include "core/pool.h"
#include "attn/attn.h"
#include "attn/attn_plan.h"
#include "kv/kv_cache.h"
#include "attn_fixture.h"

/* ---------------------------------------------------------------------- */
/* helpers */

/* Variant i, or NULL when the CPU cannot run it or it is the reference
 * under another name (entries not written yet point at the reference). */
static const struct kn_attn_ops *pick(int i) {
    const struct kn_attn_ops *ops = kn_attn_select(VARIANTS[i]);
    if (ops && i > 0 && ops->attn == kn_attn_ref && ops->partial == kn_attn_partial_ref &&
        ops->reduce == kn_attn_reduce_ref)
        return NULL;
    return ops;
}

static const struct kn_attn_ops *variant(int i) {
    const struct kn_attn_ops *ops = pick(i);
    if (!ops) printf("SKIP attention variant %s (CPU lacks it, or it is the reference)\n", VARIANTS[i]);
    return ops;
}

struct fixture {
    struct kv_cache *kv;
    int type, hd, n_head, n_head_kv, group;
    int n_kv;      /* keys written in seq 0 */
    int n_rows;    /* query rows, the last at position n_kv - 1 */
    float *q;      /* (n_rows, n_head, hd) */
    float *want;   /* naive outputs, same shape */
    float *got;
};

static int g_window;      /* sliding window of fixture tasks and the naive reference; 0 = none */
static const float *g_sinks; /* (n_head) sink logits of fixture tasks and the reference, or NULL */

static void fixture_init(struct fixture *f, int type, int hd, int n_head, int n_head_kv, int n_kv,
                         int n_rows, uint32_t seed, bool dummy) {
    memset(f, 0, sizeof(*f));
    f->type = type;
    f->hd = hd;
    f->n_head = n_head;
    f->n_head_kv = n_head_kv;
    f->group = n_head / n_head_kv;
    f->n_kv = n_kv;
    f->n_rows = n_rows;
    fixture_start(&f->kv, type, hd, n_head, n_head_kv, n_kv, n_rows, seed, dummy, &f->q, &f->want,
                  &f->got);
    double *scratch = malloc(((size_t)n_kv + 1) * sizeof(double));
    assert_non_null(scratch);
    size_t stride = (size_t)n_head * hd;
    kn_attn_naive_sink_ref(kv_layout(f->kv), kv_layer_base(f->kv, 0), kv_seq_blocks(f->kv, 0),
                           n_head, 1.0f / sqrtf((float)hd), f->q, stride, f->want, stride,
                           n_kv - n_rows, n_rows, g_window, g_sinks, scratch);
    free(scratch);
}

static void fixture_free(struct fixture *f) {
    kv_free(f->kv);
    free(f->q);
    free(f->want);
    free(f->got);
}

/* A task for kv head h over rows [r0, r0 + n_rows) of the fixture. */
static struct kn_attn_task fixture_task(const struct fixture *f, int h, int r0, int n_rows,
                                        float *out) {
    struct kn_attn_task t = fixture_attn_task(f->kv, f->n_head, f->hd, f->group, f->q, f->n_kv,
                                              f->n_rows, h, r0, n_rows, out, g_window);
    t.sinks = g_sinks ? g_sinks + (size_t)h * f->group : NULL;
    return t;
}

/* |a - b| <= atol + rtol*|b| everywhere and nmse <= 1e-9; prints the first
 * mismatches. */
static void expect_close(const float *a, const float *b, size_t n, double atol, double rtol,
                         const char *what) {
    double num = 0.0, den = 0.0;
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
        if (!(fabs(d) <= atol + rtol * fabs(b[i]))) {
            if (bad < 5) printf("  %s: [%zu] got %.9g want %.9g\n", what, i, a[i], b[i]);
            bad++;
        }
    }
    double nmse = den > 0 ? num / den : num;
    if (bad || !(nmse <= 1e-9)) fail_msg("%s: %d mismatches, nmse %.3g", what, bad, nmse);
}

/* ---------------------------------------------------------------------- */
/* golden data from numpy */

static void test_golden(void **state) {
    (void)state;
    FILE *fp = fopen("tests/data/attn_golden.bin", "rb");
    if (!fp) fail_msg("tests/data/attn_golden.bin missing (run from the repo root)");
    char magic[8];
    uint32_t n_cases;
    assert_int_equal(fread(magic, 1, 8, fp), 8);
    assert_memory_equal(magic, "ANVATTN1", 8);
    assert_int_equal(fread(&n_cases, 4, 1, fp), 1);
    assert_true(n_cases >= 1 && n_cases < 100);
    for (uint32_t c = 0; c < n_cases; c++) {
        int32_t h[7];
        assert_int_equal(fread(h, 4, 7, fp), 7);
        int type = h[0], hd = h[1], n_head = h[2], n_head_kv = h[3], pos = h[4], n_rows = h[5];
        struct fixture f;
        fixture_init(&f, type, hd, n_head, n_head_kv, pos + n_rows, n_rows, (uint32_t)h[6], true);
        size_t n = (size_t)n_rows * n_head * hd;
        float *gold = malloc(n * sizeof(float));
        assert_non_null(gold);
        assert_int_equal(fread(gold, sizeof(float), n, fp), n);
        char what[96];
        snprintf(what, sizeof(what), "golden case %u naive", c);
        expect_close(f.want, gold, n, 1e-6, 1e-5, what);
        /* and every variant, through the kernel directly */
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const struct kn_attn_ops *ops = variant(vi);
            if (!ops) continue;
            for (int kh = 0; kh < n_head_kv; kh++) {
                struct kn_attn_task t = fixture_task(&f, kh, 0, 1, f.got);
                for (int r = 0; r < n_rows; r++) {
                    t = fixture_task(&f, kh, r, 1, f.got);
                    ops->attn(&t);
                }
            }
            snprintf(what, sizeof(what), "golden case %u %s", c, ops->name);
            expect_close(f.got, gold, n, 2e-5, 2e-4, what);
        }
        free(gold);
        fixture_free(&f);
    }
    fclose(fp);
}

/* ---------------------------------------------------------------------- */
/* decode: every variant vs naive; split-K bit-exact */

static const int CTX_LENS[] = {1, 15, 16, 17, 255, 257, 1000, 2049};

static void check_decode(const struct kn_attn_ops *ops, struct fixture *f) {
    int nc = kn_attn_n_chunks(f->n_kv);
    size_t nout = (size_t)f->n_head * f->hd;
    size_t rec = kn_attn_rec_floats(f->group, f->hd);
    float *part = malloc((size_t)nc * rec * sizeof(float));
    float *split = malloc(nout * sizeof(float));
    assert_true(part && split);
    char what[128];
    snprintf(what, sizeof(what), "%s type %d hd %d G %d n_kv %d", ops->name, f->type, f->hd,
             f->group, f->n_kv);
    for (int h = 0; h < f->n_head_kv; h++) {
        struct kn_attn_task t = fixture_task(f, h, 0, 1, f->got);
        ops->attn(&t);
    }
    expect_close(f->got, f->want, nout, 2e-5, 2e-4, what);
    /* split-K: every piece size, pieces computed separately, then reduced */
    for (int piece = 1; piece <= nc; piece++) {
        /* long contexts: a few piece sizes are enough (ragged and even) */
        if (nc > 5 && piece > 3 && piece != nc - 1 && piece != nc) continue;
        memset(split, 0xff, nout * sizeof(float));
        for (int h = 0; h < f->n_head_kv; h++) {
            for (int c0 = 0; c0 < nc; c0 += piece) {
                struct kn_attn_task t = fixture_task(f, h, 0, 1, split);
                t.c0 = c0;
                t.c1 = c0 + piece < nc ? c0 + piece : nc;
                t.part = part + (size_t)c0 * rec;
                ops->partial(&t);
            }
            struct kn_attn_task t = fixture_task(f, h, 0, 1, split);
            t.c0 = 0;
            t.c1 = nc;
            t.part = part;
            ops->reduce(&t);
        }
        char w2[160];
        snprintf(w2, sizeof(w2), "%s split piece %d", what, piece);
        expect_same(split, f->got, nout, w2);
    }
    free(part);
    free(split);
}

static void test_decode_variants(void **state) {
    (void)state;
    static const int GROUPS[] = {1, 3, 4, 8};
    static const int TYPES[] = {ANVIL_TYPE_F16, ANVIL_TYPE_Q8_0};
    static const int HDS[] = {64, 128};
    uint32_t seed = 100;
    for (int ti = 0; ti < 2; ti++)
        for (int hi = 0; hi < 2; hi++)
            for (int gi = 0; gi < 4; gi++)
                for (size_t li = 0; li < sizeof(CTX_LENS) / sizeof(CTX_LENS[0]); li++) {
                    int G = GROUPS[gi], nkv = G <= 3 ? 2 : 1;
                    struct fixture f;
                    fixture_init(&f, TYPES[ti], HDS[hi], G * nkv, nkv, CTX_LENS[li], 1, seed++,
                                 true);
                    for (int vi = 0; vi < N_VARIANTS; vi++) {
                        const struct kn_attn_ops *ops = pick(vi);
                        if (ops) check_decode(ops, &f);
                    }
                    fixture_free(&f);
                }
    for (int vi = 0; vi < N_VARIANTS; vi++) (void)variant(vi); /* report skips once */
}

/* Values far apart: the running max moves up and down across steps and
 * chunks, and exp underflows for most keys. */
static void test_decode_peaky(void **state) {
    (void)state;
    struct fixture f;
    fixture_init(&f, ANVIL_TYPE_F16, 64, 3, 1, 777, 1, 7, true);
    for (int i = 0; i < 3 * 64; i++) f.q[i] *= 16.0f;
    double *scratch = malloc(800 * sizeof(double));
    kn_attn_naive_ref(kv_layout(f.kv), kv_layer_base(f.kv, 0), kv_seq_blocks(f.kv, 0), 3, 0.125f,
                      f.q, 192, f.want, 192, 776, 1, scratch);
    free(scratch);
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        const struct kn_attn_ops *ops = pick(vi);
        if (ops) check_decode(ops, &f);
    }
    fixture_free(&f);
}

/* ---------------------------------------------------------------------- */
/* prefill: tiles vs naive, and each row bit-identical to its decode */

/* Every row of f as a decode against the naive outputs, then tiles of
 * several heights bit-identical to those decodes. */
static void check_prefill(const struct kn_attn_ops *ops, struct fixture *f, int ci) {
    size_t n = (size_t)f->n_rows * f->n_head * f->hd;
    float *dec = malloc(n * sizeof(float));
    assert_non_null(dec);
    char what[128];
    snprintf(what, sizeof(what), "prefill %s case %d window %d", ops->name, ci, g_window);
    for (int h = 0; h < f->n_head_kv; h++)
        for (int r = 0; r < f->n_rows; r++) {
            struct kn_attn_task t = fixture_task(f, h, r, 1, dec);
            ops->attn(&t);
        }
    expect_close(dec, f->want, n, 2e-5, 2e-4, what);
    int max_rows = KN_ATTN_MAXQ / f->group;
    for (int tile = 2; tile <= max_rows; tile = tile * 2 + 1) {
        memset(f->got, 0, n * sizeof(float));
        for (int h = 0; h < f->n_head_kv; h++)
            for (int r0 = 0; r0 < f->n_rows; r0 += tile) {
                int nr = f->n_rows - r0 < tile ? f->n_rows - r0 : tile;
                struct kn_attn_task t = fixture_task(f, h, r0, nr, f->got);
                ops->attn(&t);
            }
        char w2[160];
        snprintf(w2, sizeof(w2), "%s tile %d vs decode", what, tile);
        expect_same(f->got, dec, n, w2);
    }
    free(dec);
}

static void test_prefill_variants(void **state) {
    (void)state;
    static const struct {
        int type, hd, n_head, n_head_kv, pos, n_rows;
    } C[] = {
        {ANVIL_TYPE_F16, 64, 9, 3, 0, 40},      /* no prefix */
        {ANVIL_TYPE_F16, 64, 9, 3, 250, 30},    /* prefix, rows cross a chunk edge */
        {ANVIL_TYPE_Q8_0, 128, 8, 2, 17, 33},   /* GQA 4 */
        {ANVIL_TYPE_F16, 128, 4, 4, 500, 20},   /* MHA */
        {ANVIL_TYPE_Q8_0, 64, 8, 1, 0, 9},      /* GQA 8 */
        /* F16 step buffers too big for L1 beside the accumulators: all
         * rows' scores before any softmax (one step, head_dim 256; two
         * steps at 128) */
        {ANVIL_TYPE_F16, 256, 8, 2, 5, 35},     /* GQA 4, Gemma 3's head_dim */
        {ANVIL_TYPE_F16, 128, 8, 1, 3, 30},     /* GQA 8 */
    };
    for (size_t ci = 0; ci < sizeof(C) / sizeof(C[0]); ci++) {
        struct fixture f;
        fixture_init(&f, C[ci].type, C[ci].hd, C[ci].n_head, C[ci].n_head_kv,
                     C[ci].pos + C[ci].n_rows, C[ci].n_rows, 300 + (uint32_t)ci, true);
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const struct kn_attn_ops *ops = pick(vi);
            if (ops) check_prefill(ops, &f, (int)ci);
        }
        fixture_free(&f);
    }
}

/* Sliding windows (kn_attn_task.window): every variant that honours them
 * against the naive windowed reference, as decode rows, as prefill tiles
 * (bit-identical to the decode rows) and split-K (bit-identical to
 * unsplit), with windows shorter than a step, across step, block and chunk
 * edges, and longer than the context. Gemma 3's shape (head_dim 256, 4
 * query heads on 1 kv head) included. */
static void test_window_variants(void **state) {
    (void)state;
    static const struct {
        int type, hd, n_head, n_head_kv, pos, n_rows, window;
    } C[] = {
        {ANVIL_TYPE_F16, 64, 9, 3, 0, 40, 16},      /* no prefix, one-step window */
        {ANVIL_TYPE_F16, 64, 9, 3, 250, 30, 37},    /* rows cross a chunk edge */
        {ANVIL_TYPE_F16, 256, 4, 1, 600, 24, 512},  /* Gemma 3 local layers */
        {ANVIL_TYPE_Q8_0, 256, 4, 1, 530, 8, 512},
        {ANVIL_TYPE_Q8_0, 128, 8, 2, 300, 20, 5},   /* shorter than a step */
        {ANVIL_TYPE_F16, 64, 1, 1, 1000, 12, 300},  /* MHA, window over two chunks */
        {ANVIL_TYPE_F16, 64, 8, 1, 40, 9, 4096},    /* window past the context */
    };
    int tested = 0;
    for (size_t ci = 0; ci < sizeof(C) / sizeof(C[0]); ci++) {
        g_window = C[ci].window;
        struct fixture f;
        fixture_init(&f, C[ci].type, C[ci].hd, C[ci].n_head, C[ci].n_head_kv,
                     C[ci].pos + C[ci].n_rows, C[ci].n_rows, 700 + (uint32_t)ci, true);
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const struct kn_attn_ops *ops = pick(vi);
            if (!ops || !ops->window) continue;
            check_prefill(ops, &f, (int)ci);
            /* split-K of the last row against its unsplit decode */
            struct fixture last = f;
            size_t stride = (size_t)f.n_head * f.hd;
            last.n_rows = 1;
            last.q = f.q + (size_t)(f.n_rows - 1) * stride;
            last.want = f.want + (size_t)(f.n_rows - 1) * stride;
            last.got = f.got;
            check_decode(ops, &last);
            tested++;
        }
        fixture_free(&f);
        g_window = 0;
    }
    assert_true(tested >= (int)(sizeof(C) / sizeof(C[0]))); /* the reference at least */
}

/* Attention sinks (gpt-oss: one learned logit per query head in the
 * softmax denominator): every variant against the naive reference with
 * sinks, as decode rows, prefill tiles (bit-identical to the decodes) and
 * split-K (bit-identical to unsplit: the sink joins once, in the
 * reduction), with and without a sliding window (gpt-oss: 128 on every
 * other layer), sinks below, around and far above the scores. A sink of
 * -inf is no sink: bit-identical to the task without one. */
static void test_sink_variants(void **state) {
    (void)state;
    static const struct {
        int type, hd, n_head, n_head_kv, pos, n_rows, window;
        float lo, hi; /* sinks spread over [lo, hi] */
    } C[] = {
        {ANVIL_TYPE_F16, 64, 8, 1, 0, 20, 0, -2.0f, 2.0f},       /* gpt-oss heads: GQA 8, hd 64 */
        {ANVIL_TYPE_F16, 64, 8, 1, 300, 16, 128, -1.0f, 4.0f},   /* windowed, past the window */
        {ANVIL_TYPE_Q8_0, 64, 8, 2, 530, 8, 0, 0.0f, 8.0f},      /* three chunks, split-K */
        {ANVIL_TYPE_F16, 128, 4, 4, 250, 12, 0, -30.0f, -20.0f}, /* sinks that hardly count */
        {ANVIL_TYPE_F16, 64, 3, 3, 40, 5, 16, 20.0f, 40.0f},     /* sinks that dominate */
    };
    float sinks[64];
    for (size_t ci = 0; ci < sizeof(C) / sizeof(C[0]); ci++) {
        for (int i = 0; i < C[ci].n_head; i++)
            sinks[i] = C[ci].lo + (C[ci].hi - C[ci].lo) * (float)i / (float)(C[ci].n_head - 1);
        g_window = C[ci].window;
        g_sinks = sinks;
        struct fixture f;
        fixture_init(&f, C[ci].type, C[ci].hd, C[ci].n_head, C[ci].n_head_kv,
                     C[ci].pos + C[ci].n_rows, C[ci].n_rows, 900 + (uint32_t)ci, true);
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const struct kn_attn_ops *ops = pick(vi);
            if (!ops || (g_window && !ops->window)) continue;
            check_prefill(ops, &f, 100 + (int)ci);
            struct fixture last = f;
            size_t stride = (size_t)f.n_head * f.hd;
            last.n_rows = 1;
            last.q = f.q + (size_t)(f.n_rows - 1) * stride;
            last.want = f.want + (size_t)(f.n_rows - 1) * stride;
            check_decode(ops, &last);
        }
        /* the sink changes the output (the test can fail): without it the
         * reference differs */
        size_t stride = (size_t)f.n_head * f.hd, last_off = (size_t)(f.n_rows - 1) * stride;
        float *plain = malloc((size_t)f.n_rows * stride * sizeof(float));
        assert_non_null(plain);
        g_sinks = NULL;
        for (int h = 0; h < f.n_head_kv; h++) {
            struct kn_attn_task t = fixture_task(&f, h, f.n_rows - 1, 1, plain);
            kn_attn_ref(&t);
        }
        double diff = 0.0;
        for (size_t i = 0; i < stride; i++) diff += fabs((double)plain[last_off + i] - f.want[last_off + i]);
        if (C[ci].hi > -10.0f) assert_true(diff > 1e-3); /* tiny sinks: hardly a change */
        free(plain);
        fixture_free(&f);
        g_window = 0;
    }
    /* -inf sinks: the same bits as no sinks */
    for (int i = 0; i < 8; i++) sinks[i] = -INFINITY;
    g_sinks = NULL;
    struct fixture f;
    fixture_init(&f, ANVIL_TYPE_F16, 64, 8, 1, 300, 4, 950, true);
    size_t n = (size_t)f.n_rows * f.n_head * f.hd;
    float *a = malloc(n * sizeof(float));
    assert_non_null(a);
    for (int vi = 0; vi < N_VARIANTS; vi++) {
        const struct kn_attn_ops *ops = pick(vi);
        if (!ops) continue;
        struct kn_attn_task t = fixture_task(&f, 0, 0, f.n_rows, a);
        ops->attn(&t);
        t = fixture_task(&f, 0, 0, f.n_rows, f.got);
        t.sinks = sinks;
        ops->attn(&t);
        expect_same(f.got, a, n, "-inf sinks vs none");
    }
    free(a);
    fixture_free(&f);
}

/* ---------------------------------------------------------------------- */
/* driver: batch invariance over threads, split modes and batch makeup */

struct batch_case {
    int seq, n_kv, n_tokens; /* the last n_tokens of n_kv are query rows */
};

static void run_batch(struct kv_cache *kv, const struct kn_attn_ops *ops, struct pool *pool,
                      int n_threads, enum kv_split split, const struct batch_case *bc, int n,
                      float *const *q, float *const *out, int n_head, int hd, bool *was_split) {
    struct kv_attn_seq s[16];
    for (int i = 0; i < n; i++) {
        s[i].seq = bc[i].seq;
        s[i].pos = bc[i].n_kv - bc[i].n_tokens;
        s[i].n_tokens = bc[i].n_tokens;
        s[i].q = q[i];
        s[i].out = out[i];
    }
    struct kv_attn_job *job = NULL;
    size_t stride = (size_t)n_head * hd;
    assert_int_equal(kv_attn_prepare(kv, ops, 0, s, n, stride, stride, n_threads, split, 1.0f / sqrtf((float)kv_layout(kv)->head_dim), &job),
                     ANVIL_OK);
    if (was_split) *was_split = kv_attn_job_split(job);
    kv_attn_run(job, pool);
}

static void test_driver_invariance(void **state) {
    (void)state;
    enum { N = 7, NH = 9, NKV = 3, HD = 64 };
    static const struct batch_case bc[N] = {
        {0, 1, 1}, {1, 17, 1}, {2, 300, 1}, {3, 1100, 1}, {4, 300, 20}, {5, 256, 1}, {6, 40, 40},
    };
    struct pool *pools[4] = {NULL};
    for (int nt = 2; nt <= 3; nt++) assert_int_equal(pool_create(nt, &pools[nt]), ANVIL_OK);
    for (int ti = 0; ti < 2; ti++) {
        int type = ti ? ANVIL_TYPE_Q8_0 : ANVIL_TYPE_F16;
        struct kv_cache *kv = make_kv(type, HD, NH, NKV, 1200, N, 3);
        uint32_t x = 77;
        float *q[N], *ref[N], *out[N];
        for (int i = 0; i < N; i++) {
            fill_seq(kv, bc[i].seq, -1, bc[i].n_kv, NKV, HD, &x, NULL, NULL);
            size_t n = (size_t)bc[i].n_tokens * NH * HD;
            q[i] = malloc(n * sizeof(float));
            ref[i] = malloc(n * sizeof(float));
            out[i] = malloc(n * sizeof(float));
            for (size_t j = 0; j < n; j++) q[i][j] = 4.0f * lcg_uniform(&x);
        }
        for (int vi = 0; vi < N_VARIANTS; vi++) {
            const struct kn_attn_ops *ops = pick(vi);
            if (!ops) continue;
            /* reference: each sequence alone, one thread, no split */
            for (int i = 0; i < N; i++)
                run_batch(kv, ops, NULL, 1, KV_SPLIT_OFF, &bc[i], 1, &q[i], &ref[i], NH, HD, NULL);
            /* against naive, for good measure */
            double *scratch = malloc(1200 * sizeof(double));
            for (int i = 0; i < N; i++) {
                size_t n = (size_t)bc[i].n_tokens * NH * HD;
                float *nv = malloc(n * sizeof(float));
                kn_attn_naive_ref(kv_layout(kv), kv_layer_base(kv, 0), kv_seq_blocks(kv, bc[i].seq),
                                  NH, 0.125f, q[i], NH * HD, nv, NH * HD,
                                  bc[i].n_kv - bc[i].n_tokens, bc[i].n_tokens, scratch);
                expect_close(ref[i], nv, n, 2e-5, 2e-4, ops->name);
                free(nv);
            }
            free(scratch);
            for (int nt = 1; nt <= 3; nt++)
                for (int sp = 0; sp < 3; sp++)
                    for (int sub = 0; sub < 3; sub++) {
                        /* sub-batches only on the 2-thread pool (the machine's) */
                        if (sub && nt != 2) continue;
                        /* whole batch, decode rows only, or a rotated subset */
                        struct batch_case b2[N];
                        float *q2[N], *o2[N], *r2[N];
                        int n2 = 0;
                        for (int i = 0; i < N; i++) {
                            int j = sub == 2 ? (i + 3) % N : i;
                            if (sub == 1 && bc[j].n_tokens != 1) continue;
                            if (sub == 2 && i >= 5) continue;
                            b2[n2] = bc[j];
                            q2[n2] = q[j];
                            o2[n2] = out[j];
                            r2[n2] = ref[j];
                            n2++;
                        }
                        for (int i = 0; i < n2; i++)
                            memset(o2[i], 0xff, (size_t)b2[i].n_tokens * NH * HD * sizeof(float));
                        bool was_split = false;
                        run_batch(kv, ops, pools[nt], nt, (enum kv_split)sp, b2, n2, q2, o2, NH,
                                  HD, &was_split);
                        if (sp == KV_SPLIT_ON) assert_true(was_split);
                        for (int i = 0; i < n2; i++) {
                            char what[128];
                            snprintf(what, sizeof(what), "%s type %d threads %d split %d sub %d seq %d",
                                     ops->name, type, nt, sp, sub, b2[i].seq);
                            expect_same(o2[i], r2[i], (size_t)b2[i].n_tokens * NH * HD, what);
                        }
                    }
        }
        for (int i = 0; i < N; i++) {
            free(q[i]);
            free(ref[i]);
            free(out[i]);
        }
        kv_free(kv);
    }
    for (int nt = 2; nt <= 3; nt++) pool_free(pools[nt]);
}

static void test_driver_bad_input(void **state) {
    (void)state;
    struct kv_cache *kv = make_kv(ANVIL_TYPE_F16, 64, 3, 1, 64, 2, 2);
    uint32_t x = 1;
    fill_seq(kv, 0, -1, 20, 1, 64, &x, NULL, NULL);
    float q[3 * 64] = {0}, o[3 * 64];
    struct kv_attn_seq s[2] = {{0, 19, 1, q, o}, {0, 19, 1, q, o}};
    struct kv_attn_job *job = NULL;
    const struct kn_attn_ops *ops = kn_attn_select("ref");
    /* the same sequence twice, past its blocks, bad layer, too many threads */
    assert_int_equal(kv_attn_prepare(kv, ops, 0, s, 2, 192, 192, 1, KV_SPLIT_AUTO, 0.125f, &job),
                     ANVIL_ERR_INVALID);
    s[0].pos = 40;
    assert_int_equal(kv_attn_prepare(kv, ops, 0, s, 1, 192, 192, 1, KV_SPLIT_AUTO, 0.125f, &job),
                     ANVIL_ERR_INVALID);
    s[0].pos = 19;
    assert_int_equal(kv_attn_prepare(kv, ops, 1, s, 1, 192, 192, 1, KV_SPLIT_AUTO, 0.125f, &job),
                     ANVIL_ERR_INVALID);
    assert_int_equal(kv_attn_prepare(kv, ops, 0, s, 1, 192, 192, 3, KV_SPLIT_AUTO, 0.125f, &job),
                     ANVIL_ERR_INVALID);
    assert_int_equal(kv_attn_prepare(kv, ops, 0, s, 1, 192, 192, 2, KV_SPLIT_AUTO, 0.125f, &job),
                     ANVIL_OK);
    /* and the marks were cleared by the failures: the cache is consistent */
    char err[256];
    assert_int_equal(kv_check(kv, err, sizeof(err)), ANVIL_OK);
    kv_free(kv);
}

/* The numbers do not depend on the block size (steps of 16 keys, chunks
 * at fixed positions): the same K/V in caches of 16-, 32- and 64-token
 * blocks give the same bits. */
static void test_block_sizes(void **state) {
    (void)state;
    for (int ti = 0; ti < 2; ti++) {
        int type = ti ? ANVIL_TYPE_Q8_0 : ANVIL_TYPE_F16;
        float *first[N_VARIANTS] = {NULL};
        for (int bs = 16; bs <= 64; bs *= 2) {
            g_block = bs;
            struct fixture f;
            fixture_init(&f, type, 64, 9, 3, 300, 5, 900, true);
            size_t n = (size_t)f.n_rows * f.n_head * f.hd;
            for (int vi = 0; vi < N_VARIANTS; vi++) {
                const struct kn_attn_ops *ops = pick(vi);
                if (!ops) continue;
                for (int h = 0; h < f.n_head_kv; h++) {
                    struct kn_attn_task t = fixture_task(&f, h, 0, f.n_rows, f.got);
                    ops->attn(&t);
                }
                char what[96];
                snprintf(what, sizeof(what), "%s type %d block %d", ops->name, type, bs);
                expect_close(f.got, f.want, n, 2e-5, 2e-4, what);
                if (!first[vi]) {
                    first[vi] = malloc(n * sizeof(float));
                    memcpy(first[vi], f.got, n * sizeof(float));
                } else {
                    expect_same(f.got, first[vi], n, what);
                }
            }
            fixture_free(&f);
        }
        for (int vi = 0; vi < N_VARIANTS; vi++) free(first[vi]);
    }
    g_block = 16;
}

static void test_split_policy(void **state) {
    (void)state;
    int32_t one[1] = {8192};
    /* batch 1, 3 kv heads, 2 threads: 3 tasks cannot balance -> split */
    assert_true(kn_attn_split_policy(1, one, 3, 3, 64, 0.0, 2));
    /* one thread never splits */
    assert_false(kn_attn_split_policy(1, one, 3, 3, 64, 0.0, 1));
    /* many equal sequences balance without a split */
    int32_t many[64];
    for (int i = 0; i < 64; i++) many[i] = 2048;
    assert_false(kn_attn_split_policy(64, many, 3, 3, 64, 0.0, 2));
    /* short contexts: one chunk each, nothing to gain */
    int32_t shorts[1] = {100};
    assert_false(kn_attn_split_policy(1, shorts, 8, 4, 128, 0.0, 2));
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* a test name or glob */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_decode_variants),
        cmocka_unit_test(test_decode_peaky),
        cmocka_unit_test(test_prefill_variants),
        cmocka_unit_test(test_window_variants),
        cmocka_unit_test(test_sink_variants),
        cmocka_unit_test(test_driver_invariance),
        cmocka_unit_test(test_driver_bad_input),
        cmocka_unit_test(test_block_sizes),
        cmocka_unit_test(test_split_policy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
