/*
 * unit_quantize.c - the quantize module (src/quantize): the scale search, the
 * type table, the mix rules and anvil_quantize on small GGUF files written
 * here with gguf_write.h.
 *
 *   - the search: on random blocks, the searched fit is never worse (by
 *     the stated weighted error) than the plain max-magnitude / min-max
 *     solution it starts from, the error it reports is the error of what
 *     it returns, and degenerate blocks (zeros, constants) are exact;
 *   - every row quantizer is deterministic and leaves no byte of its
 *     output unwritten (the output is compared for two fill patterns);
 *   - anvil_quantize: tensor types by the mix rules on a small llama-shaped
 *     file (rules, fallback, tied output, 1-D norms, --pure), the bytes do
 *     not depend on the thread count, requantizing below the source's bits
 *     is refused, a NaN is an error naming the tensor, unknown types are
 *     refused, and every allocation failure is clean (no file, no leak).
 * The decoded values are checked against the gguf package and llama.cpp's
 * own quantizer in tests/py/test_quantizers.py and test_quantize_mix.py.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "kernels/blocks.h"
#include "quantize/quantize_int.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* xorshift64*, [0, 1) */
    rng ^= rng >> 12, rng ^= rng << 25, rng ^= rng >> 27;
    return (double)((rng * 0x2545f4914f6cdd1dull) >> 11) / 9007199254740992.0;
}
static float nrand(void) {
    double u = urand() + 1e-12, v = urand();
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

// ----------------------------------------------------------------------------
// type table

static void test_types(void **state) {
    (void)state;
    const int all[] = {ANVIL_TYPE_F32,  ANVIL_TYPE_F16,  ANVIL_TYPE_BF16,   ANVIL_TYPE_Q8_0,
                       ANVIL_TYPE_Q4_0, ANVIL_TYPE_Q4_1, ANVIL_TYPE_Q5_0,   ANVIL_TYPE_Q5_1,
                       ANVIL_TYPE_Q2_K, ANVIL_TYPE_Q3_K, ANVIL_TYPE_Q4_K,   ANVIL_TYPE_Q5_K,
                       ANVIL_TYPE_Q6_K, ANVIL_TYPE_IQ4_NL, ANVIL_TYPE_IQ4_XS};
    /* the write set: geometry and names are the type table's
     * (gguf_types.h, checked against the spec in unit_gguf.c) */
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        const struct gguf_type_info *t = qt_type_get(all[i]);
        assert_non_null(t);
        assert_true(t->read && t->write);
        assert_true(t->quantized == (i >= 3));
        assert_int_equal(gguf_row_size(all[i], 2 * t->blck), 2 * t->bytes);
    }
    assert_null(qt_type_get(ANVIL_TYPE_Q8_K));
    assert_null(qt_type_get(16)); /* IQ2_XXS: read by neither */
    assert_null(qt_type_get(9999));
    assert_true(fabs(gguf_type_bpw(ANVIL_TYPE_Q4_K) - 4.5) < 1e-12);
    assert_true(fabs(gguf_type_bpw(ANVIL_TYPE_Q6_K) - 6.5625) < 1e-12);
    /* mixes: case-insensitive names, llama.cpp's ftype numbers */
    assert_int_equal(qt_mix_find("q4_k_m")->ftype, 15);
    assert_int_equal(qt_mix_find("Q6_K")->ftype, 18);
    assert_int_equal(qt_mix_find("IQ4_XS")->ftype, 30);
    assert_int_equal(qt_mix_find("Q5_1")->ftype, 9);
    assert_true(qt_mix_find("Q4_K")->pure);
    assert_null(qt_mix_find("Q2_K_S")); /* needs an importance matrix */
    assert_null(qt_mix_find("IQ2_XXS"));
    assert_null(qt_mix_find(NULL));
}

// ----------------------------------------------------------------------------
// the search

static double sym_err(const struct qs_grid *g, int n, const float *x, const float *w, float s,
                      const uint8_t *L) {
    double e = 0;
    for (int i = 0; i < n; i++) {
        double r = (double)x[i] - (double)s * g->lv[L[i]];
        e += (double)w[i] * r * r;
    }
    return e;
}

static double aff_err(int n, const float *x, const float *w, float s, float o, const uint8_t *L) {
    double e = 0;
    for (int i = 0; i < n; i++) {
        double r = (double)x[i] - ((double)s * L[i] + o);
        e += (double)w[i] * r * r;
    }
    return e;
}

static void test_search_sym(void **state) {
    (void)state;
    const struct qs_grid *grids[] = {&qs_grid_q3, &qs_grid_q5, &qs_grid_q6, &qs_grid_iq4};
    const int ns[] = {16, 32, 16, 32};
    float x[32], w[32];
    uint8_t L[32], L0[32];
    for (int gi = 0; gi < 4; gi++) {
        const struct qs_grid *g = grids[gi];
        const int n = ns[gi];
        int better = 0;
        for (int trial = 0; trial < 300; trial++) {
            for (int i = 0; i < n; i++) x[i] = nrand() * (trial % 3 == 2 ? nrand() : 1.0f);
            qs_weights(x, n, w);
            double e;
            float s = qs_fit_sym(g, n, x, w, L, &e);
            for (int i = 0; i < n; i++) assert_true(L[i] < g->k);
            double e_chk = sym_err(g, n, x, w, s, L);
            assert_true(fabs(e - e_chk) <= 1e-4 * (e_chk + 1e-12));
            /* the plain solution: the largest magnitude on the grid's far end */
            float amax = 0, xm = 0;
            for (int i = 0; i < n; i++)
                if (fabsf(x[i]) > amax) amax = fabsf(x[i]), xm = x[i];
            float s0 = xm / (float)g->lv[0];
            for (int i = 0; i < n; i++) L0[i] = (uint8_t)qs_nearest(g, x[i] / s0);
            double e0 = sym_err(g, n, x, w, s0, L0);
            assert_true(e <= e0 * (1 + 1e-6));
            better += e < e0 * 0.999;
            /* rounding at a fixed scale gives the nearest level */
            double er = qs_sym_round(g, n, x, w, s, L0);
            assert_true(fabs(er - sym_err(g, n, x, w, s, L0)) <= 1e-4 * er + 1e-12);
        }
        assert_true(better > 150); /* the search finds something in most blocks */
        /* zeros: scale 0, every index the zero level */
        memset(x, 0, sizeof(x));
        qs_weights(x, n, w);
        double e;
        assert_true(qs_fit_sym(g, n, x, w, L, &e) == 0.0f);
        assert_true(e == 0.0);
    }
    /* nearest on the IQ4 table: every integer in range against a scan */
    for (int v = -140; v <= 130; v++) {
        for (int h = 0; h < 4; h++) {
            float f = (float)v + 0.25f * (float)h;
            int best = 0;
            for (int j = 1; j < 16; j++)
                if (fabsf(f - qs_grid_iq4.lv[j]) < fabsf(f - qs_grid_iq4.lv[best])) best = j;
            int got = qs_nearest(&qs_grid_iq4, f);
            assert_true(fabsf(f - qs_grid_iq4.lv[got]) == fabsf(f - qs_grid_iq4.lv[best]));
        }
    }
    /* rounding is ties-to-even, no libm */
    assert_int_equal(qs_round(2.5f), 2);
    assert_int_equal(qs_round(3.5f), 4);
    assert_int_equal(qs_round(-1.5f), -2);
    assert_int_equal(qs_round(-0.4f), 0);
}

static void test_search_affine(void **state) {
    (void)state;
    const int nmaxs[] = {3, 15, 31};
    float x[32], w[32];
    uint8_t L[32], L0[32];
    for (int k = 0; k < 3; k++) {
        const int nmax = nmaxs[k], n = nmax == 3 ? 16 : 32;
        int better = 0;
        for (int trial = 0; trial < 300; trial++) {
            float shift = trial % 4 == 3 ? 2.0f : 0.0f; /* some all-positive blocks */
            for (int i = 0; i < n; i++) x[i] = nrand() + shift;
            qs_weights(x, n, w);
            for (int np = 0; np < 2; np++) {
                float o;
                double e;
                float s = qs_fit_affine(nmax, np, n, x, w, L, &o, &e);
                assert_true(s >= 0.0f);
                if (np) assert_true(o <= 0.0f);
                for (int i = 0; i < n; i++) assert_true(L[i] <= nmax);
                double e_chk = aff_err(n, x, w, s, o, L);
                assert_true(fabs(e - e_chk) <= 1e-4 * (e_chk + 1e-12));
                /* min/max: [min, max] onto [0, nmax] (min clamped to <= 0) */
                float mn = x[0], mx = x[0];
                for (int i = 0; i < n; i++) mn = fminf(mn, x[i]), mx = fmaxf(mx, x[i]);
                if (np && mn > 0) mn = 0;
                float s0 = (mx - mn) / (float)nmax;
                for (int i = 0; i < n; i++) L0[i] = (uint8_t)qs_round((x[i] - mn) / s0);
                double e0 = aff_err(n, x, w, s0, mn, L0);
                assert_true(e <= e0 * (1 + 1e-6));
                better += e < e0 * 0.999;
            }
        }
        assert_true(better > 300);
    }
    /* a constant block: scale 0, offset the constant (up to rounding) */
    for (int i = 0; i < 32; i++) x[i] = -0.75f;
    qs_weights(x, 32, w);
    float o;
    double e;
    float s = qs_fit_affine(15, true, 32, x, w, L, &o, &e);
    assert_true(s == 0.0f && fabsf(o + 0.75f) < 1e-6f && e < 1e-10);
}

/* Every type: deterministic, every output byte written (two fill patterns
 * of the output buffer give the same bytes), all-zero rows stay zero-ish
 * and tiny or huge values do not break anything. */
static void test_row_quantizers(void **state) {
    (void)state;
    const int types[] = {ANVIL_TYPE_Q5_0, ANVIL_TYPE_Q5_1, ANVIL_TYPE_IQ4_NL, ANVIL_TYPE_Q2_K,
                         ANVIL_TYPE_Q3_K, ANVIL_TYPE_Q4_K, ANVIL_TYPE_Q5_K, ANVIL_TYPE_Q6_K,
                         ANVIL_TYPE_IQ4_XS, ANVIL_TYPE_Q8_0, ANVIL_TYPE_F16};
    enum { N = 512 };
    static float x[N];
    static uint8_t a[N * 2], b[N * 2];
    for (size_t k = 0; k < sizeof(types) / sizeof(types[0]); k++) {
        size_t rs = gguf_row_size(types[k], N);
        assert_true(rs > 0 && rs <= sizeof(a));
        for (int pass = 0; pass < 4; pass++) {
            for (int i = 0; i < N; i++) {
                float v = nrand();
                x[i] = pass == 0 ? v : pass == 1 ? 0.0f : pass == 2 ? v * 1e-6f : v * 1e3f;
            }
            memset(a, 0x00, sizeof(a));
            memset(b, 0xff, sizeof(b));
            assert_true(qt_quantize_row(types[k], x, a, N));
            assert_true(qt_quantize_row(types[k], x, b, N));
            assert_memory_equal(a, b, rs);
        }
    }
    assert_false(qt_quantize_row(ANVIL_TYPE_Q8_K, x, a, N));
}

// ----------------------------------------------------------------------------
// anvil_quantize on small files

static char in_path[64], out_path[80], tmp_path[96];

static void wr_kv_str(struct gguf_wr *w, const char *k, const char *v) {
    gguf_wr_str(w, k, strlen(k));
    gguf_wr_u32(w, GGUF_VT_STRING);
    gguf_wr_str(w, v, strlen(v));
}

struct tdesc {
    const char *name;
    uint32_t n_dims;
    uint64_t ne[2];
    int type;
};

/* A llama-shaped file: n_layer blocks of attn_q/k/v/output (ne0 x ne0),
 * ffn_gate/up (ne0 -> ff), ffn_down (ff -> ne0), F32 norms, a token
 * embedding (and an output matrix when untied), plus a 96-wide and a
 * 48-wide matrix named like FFN weights of an extra block, and one 1-D F16
 * norm. Values are seeded normals; `poison` puts a NaN in blk.0.ffn_up. */
static int make_model(const char *path, int n_layer, uint64_t ne0, uint64_t ff, bool tied,
                      int wtype, bool poison, struct tdesc *td) {
    int n = 0;
    static char names[256][48];
    ANVIL_ASSERT(n_layer * 9 + 5 <= 256);
    td[n++] = (struct tdesc){"token_embd.weight", 2, {ne0, 64}, wtype};
    if (!tied) td[n++] = (struct tdesc){"output.weight", 2, {ne0, 64}, wtype};
    td[n++] = (struct tdesc){"output_norm.weight", 1, {ne0, 1}, ANVIL_TYPE_F32};
    static const char *const mats[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate",
                                       "ffn_up", "ffn_down", "attn_norm", "ffn_norm"};
    for (int l = 0; l < n_layer; l++)
        for (int k = 0; k < 9; k++) {
            snprintf(names[n], sizeof(names[n]), "blk.%d.%s.weight", l, mats[k]);
            uint64_t a = ne0, b = ne0;
            if (k == 4 || k == 5) b = ff;
            if (k == 6) a = ff;
            td[n] = k >= 7 ? (struct tdesc){names[n], 1, {ne0, 1}, l == 0 && k == 8 ? ANVIL_TYPE_F16 : ANVIL_TYPE_F32}
                           : (struct tdesc){names[n], 2, {a, b}, wtype};
            n++;
        }
    snprintf(names[n], sizeof(names[n]), "blk.%d.ffn_up.weight", n_layer);
    td[n] = (struct tdesc){names[n], 2, {96, 4}, wtype};
    n++;
    snprintf(names[n], sizeof(names[n]), "blk.%d.ffn_gate.weight", n_layer);
    td[n] = (struct tdesc){names[n], 2, {48, 4}, qt_type_get(wtype)->quantized ? ANVIL_TYPE_F16 : wtype};
    n++;
    /* names[] is reused by the caller after return: copy them */
    static char keep[256][48];
    for (int i = 0; i < n; i++) {
        snprintf(keep[i], sizeof(keep[i]), "%s", td[i].name);
        td[i].name = keep[i];
    }

    struct gguf_wr w = {0};
    char err[ANVIL_ERRMSG_CAP];
    if (gguf_wr_open(&w, path, err, sizeof(err)) != ANVIL_OK) fail_msg("%s", err);
    gguf_wr_header(&w, (uint64_t)n, 6);
    wr_kv_str(&w, "general.architecture", "llama");
    gguf_wr_kv_u32(&w, "general.file_type", 1);
    gguf_wr_kv_u32(&w, "llama.block_count", (uint32_t)n_layer);
    gguf_wr_kv_u32(&w, "llama.attention.head_count", 8);
    gguf_wr_kv_u32(&w, "llama.attention.head_count_kv", 2);
    wr_kv_str(&w, "general.name", "unit");
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        gguf_wr_tensor_info(&w, td[i].name, td[i].n_dims, td[i].ne, td[i].type, off);
        off += (gguf_row_size(td[i].type, td[i].ne[0]) * td[i].ne[1] + 31) / 32 * 32;
    }
    gguf_wr_pad(&w, 32);
    for (int i = 0; i < n; i++) {
        uint64_t nel = td[i].ne[0] * td[i].ne[1];
        float *x = malloc(nel * sizeof(float));
        uint8_t *q = malloc(gguf_row_size(td[i].type, td[i].ne[0]) * td[i].ne[1] + 1);
        for (uint64_t j = 0; j < nel; j++) x[j] = td[i].n_dims == 1 ? 1.0f : 0.02f * nrand();
        if (poison && !strcmp(td[i].name, "blk.0.ffn_up.weight")) x[nel / 2] = NAN;
        for (uint64_t r = 0; r < td[i].ne[1]; r++)
            kn_quantize_row(td[i].type, x + r * td[i].ne[0],
                            q + r * gguf_row_size(td[i].type, td[i].ne[0]), (int64_t)td[i].ne[0]);
        gguf_wr_bytes(&w, q, gguf_row_size(td[i].type, td[i].ne[0]) * td[i].ne[1]);
        gguf_wr_pad(&w, 32);
        free(x);
        free(q);
    }
    if (gguf_wr_close(&w, err, sizeof(err)) != ANVIL_OK) fail_msg("%s", err);
    return n;
}

static void quantize_ok(const char *type, bool pure, int threads) {
    char err[ANVIL_ERRMSG_CAP] = "";
    struct anvil_quantize_params p = {.type = type, .pure = pure, .n_threads = threads};
    struct anvil_quantize_stats s;
    int64_t live = core_alloc_live();
    if (anvil_quantize(in_path, out_path, &p, &s, err, sizeof(err)) != ANVIL_OK)
        fail_msg("quantize %s: %s", type, err);
    assert_int_equal(core_alloc_live(), live);
    assert_int_equal(access(tmp_path, F_OK), -1);
    assert_true(s.n_converted > 0 && s.bytes_out > 0);
}

/* Types of an output file, read with the writer-side table (so the test
 * does not need the reader to know the new types): a tiny header walk. */
static int out_type(const char *path, const char *name) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    uint8_t h[24];
    assert_int_equal(fread(h, 1, 24, fp), 24);
    uint64_t nt, nkv;
    memcpy(&nt, h + 8, 8);
    memcpy(&nkv, h + 16, 8);
    for (uint64_t i = 0; i < nkv; i++) { /* the writer's kvs: strings and u32 only */
        uint64_t len;
        uint32_t vt;
        assert_int_equal(fread(&len, 8, 1, fp), 1);
        fseek(fp, (long)len, SEEK_CUR);
        assert_int_equal(fread(&vt, 4, 1, fp), 1);
        if (vt == GGUF_VT_STRING) {
            assert_int_equal(fread(&len, 8, 1, fp), 1);
            fseek(fp, (long)len, SEEK_CUR);
        } else {
            assert_int_equal(vt, GGUF_VT_UINT32);
            fseek(fp, 4, SEEK_CUR);
        }
    }
    int found = -1;
    for (uint64_t i = 0; i < nt && found < 0; i++) {
        uint64_t len, ne;
        uint32_t nd, ty;
        char nm[128];
        assert_int_equal(fread(&len, 8, 1, fp), 1);
        assert_true(len < sizeof(nm));
        assert_int_equal(fread(nm, 1, len, fp), len);
        nm[len] = 0;
        assert_int_equal(fread(&nd, 4, 1, fp), 1);
        for (uint32_t d = 0; d < nd; d++) assert_int_equal(fread(&ne, 8, 1, fp), 1);
        assert_int_equal(fread(&ty, 4, 1, fp), 1);
        fseek(fp, 8, SEEK_CUR);
        if (!strcmp(nm, name)) found = (int)ty;
    }
    fclose(fp);
    if (found < 0) fail_msg("no tensor %s in %s", name, path);
    return found;
}

static uint32_t out_file_type(const char *path) {
    /* general.file_type is the writer's second kv here (after the arch) */
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    uint8_t buf[512];
    size_t n = fread(buf, 1, sizeof(buf), fp);
    fclose(fp);
    const char *key = "general.file_type";
    for (size_t i = 0; i + strlen(key) + 8 < n; i++)
        if (!memcmp(buf + i, key, strlen(key))) {
            uint32_t v;
            memcpy(&v, buf + i + strlen(key) + 4, 4);
            return v;
        }
    fail_msg("no general.file_type");
    return 0;
}

static void set_paths(void) {
    snprintf(in_path, sizeof(in_path), "/tmp/anvil_unit_quant_%d.gguf", (int)getpid());
    snprintf(out_path, sizeof(out_path), "%s.out", in_path);
    snprintf(tmp_path, sizeof(tmp_path), "%s.tmp", out_path);
}

static void test_mix_rules(void **state) {
    (void)state;
    set_paths();
    struct tdesc td[256];
    /* 16 layers, rows of 256: every K type fits, gqa 4 */
    make_model(in_path, 16, 256, 512, true, ANVIL_TYPE_F16, false, td);
    quantize_ok("Q4_K_M", false, 2);
    assert_int_equal(out_file_type(out_path), 15);
    /* tied: the embedding is the lm_head -> Q6_K */
    assert_int_equal(out_type(out_path, "token_embd.weight"), ANVIL_TYPE_Q6_K);
    assert_int_equal(out_type(out_path, "blk.5.attn_q.weight"), ANVIL_TYPE_Q4_K);
    /* more_bits(i, 16): i < 2, i >= 14, (i - 2) % 3 == 2 */
    for (int l = 0; l < 16; l++) {
        char nm[48];
        bool more = l < 2 || l >= 14 || (l - 2) % 3 == 2;
        snprintf(nm, sizeof(nm), "blk.%d.attn_v.weight", l);
        assert_int_equal(out_type(out_path, nm), more ? ANVIL_TYPE_Q6_K : ANVIL_TYPE_Q4_K);
        snprintf(nm, sizeof(nm), "blk.%d.ffn_down.weight", l);
        assert_int_equal(out_type(out_path, nm), more ? ANVIL_TYPE_Q6_K : ANVIL_TYPE_Q4_K);
    }
    /* norms F32 (the F16 one converted), fallback by row length */
    assert_int_equal(out_type(out_path, "blk.0.ffn_norm.weight"), ANVIL_TYPE_F32);
    assert_int_equal(out_type(out_path, "blk.16.ffn_up.weight"), ANVIL_TYPE_Q5_0);
    assert_int_equal(out_type(out_path, "blk.16.ffn_gate.weight"), ANVIL_TYPE_F16);

    quantize_ok("Q2_K", false, 1);
    assert_int_equal(out_type(out_path, "blk.3.attn_v.weight"), ANVIL_TYPE_Q4_K); /* gqa 4 */
    assert_int_equal(out_type(out_path, "blk.3.ffn_down.weight"), ANVIL_TYPE_Q3_K);
    assert_int_equal(out_type(out_path, "blk.3.attn_output.weight"), ANVIL_TYPE_Q3_K);
    assert_int_equal(out_type(out_path, "blk.3.attn_q.weight"), ANVIL_TYPE_Q2_K);
    assert_int_equal(out_type(out_path, "blk.16.ffn_up.weight"), ANVIL_TYPE_Q4_0);

    quantize_ok("Q3_K_M", false, 1);
    assert_int_equal(out_type(out_path, "blk.0.attn_v.weight"), ANVIL_TYPE_Q5_K);
    assert_int_equal(out_type(out_path, "blk.2.attn_v.weight"), ANVIL_TYPE_Q4_K);
    assert_int_equal(out_type(out_path, "blk.0.ffn_down.weight"), ANVIL_TYPE_Q5_K); /* < 16/16 */
    assert_int_equal(out_type(out_path, "blk.1.ffn_down.weight"), ANVIL_TYPE_Q4_K);
    assert_int_equal(out_type(out_path, "blk.1.attn_output.weight"), ANVIL_TYPE_Q4_K);

    quantize_ok("IQ4_XS", false, 1);
    assert_int_equal(out_type(out_path, "blk.4.attn_v.weight"), ANVIL_TYPE_Q5_K);
    assert_int_equal(out_type(out_path, "blk.1.ffn_down.weight"), ANVIL_TYPE_Q5_K);
    assert_int_equal(out_type(out_path, "blk.2.ffn_down.weight"), ANVIL_TYPE_IQ4_XS);
    assert_int_equal(out_type(out_path, "blk.16.ffn_up.weight"), ANVIL_TYPE_IQ4_NL);

    quantize_ok("Q6_K", false, 1);
    assert_int_equal(out_type(out_path, "token_embd.weight"), ANVIL_TYPE_Q6_K);
    assert_int_equal(out_type(out_path, "blk.16.ffn_up.weight"), ANVIL_TYPE_Q8_0);

    quantize_ok("Q4_K", false, 1); /* a bare type is pure */
    assert_int_equal(out_file_type(out_path), 14);
    assert_int_equal(out_type(out_path, "token_embd.weight"), ANVIL_TYPE_Q4_K);
    assert_int_equal(out_type(out_path, "blk.0.attn_v.weight"), ANVIL_TYPE_Q4_K);
    quantize_ok("Q5_K_M", true, 1); /* --pure */
    assert_int_equal(out_type(out_path, "blk.0.ffn_down.weight"), ANVIL_TYPE_Q5_K);

    quantize_ok("Q8_0", false, 1);
    assert_int_equal(out_type(out_path, "token_embd.weight"), ANVIL_TYPE_Q8_0);
    assert_int_equal(out_type(out_path, "blk.16.ffn_gate.weight"), ANVIL_TYPE_F16);
    quantize_ok("BF16", false, 1);
    assert_int_equal(out_type(out_path, "blk.16.ffn_gate.weight"), ANVIL_TYPE_BF16);
    assert_int_equal(out_type(out_path, "blk.0.attn_norm.weight"), ANVIL_TYPE_F32);

    /* untied, rows of 576 (SmolLM2's width): output Q8_0 (does not divide
     * into 256), the rest falls back */
    make_model(in_path, 4, 576, 1536, false, ANVIL_TYPE_F32, false, td);
    quantize_ok("Q4_K_M", false, 2);
    assert_int_equal(out_type(out_path, "output.weight"), ANVIL_TYPE_Q8_0);
    assert_int_equal(out_type(out_path, "token_embd.weight"), ANVIL_TYPE_Q5_0);
    assert_int_equal(out_type(out_path, "blk.1.attn_q.weight"), ANVIL_TYPE_Q5_0);
    /* more_bits(i, 4) holds for i = 2, 3 */
    assert_int_equal(out_type(out_path, "blk.0.attn_v.weight"), ANVIL_TYPE_Q5_0); /* Q4_K -> */
    assert_int_equal(out_type(out_path, "blk.2.attn_v.weight"), ANVIL_TYPE_Q8_0); /* Q6_K -> */
    assert_int_equal(out_type(out_path, "blk.3.ffn_down.weight"), ANVIL_TYPE_Q6_K); /* 1536 */
    assert_int_equal(out_type(out_path, "blk.1.ffn_down.weight"), ANVIL_TYPE_Q4_K);
    quantize_ok("Q5_K_M", false, 2);
    assert_int_equal(out_type(out_path, "blk.1.attn_q.weight"), ANVIL_TYPE_Q5_1);
    unlink(out_path);
    unlink(in_path);
}

static void read_all(const char *path, uint8_t **p, size_t *n) {
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *n = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    *p = malloc(*n);
    assert_int_equal(fread(*p, 1, *n, fp), *n);
    fclose(fp);
}

static void test_threads_same_bytes(void **state) {
    (void)state;
    set_paths();
    struct tdesc td[256];
    make_model(in_path, 2, 512, 768, true, ANVIL_TYPE_F16, false, td);
    const char *mixes[] = {"Q4_K_M", "Q3_K_S", "IQ4_XS", "Q5_1"};
    for (int k = 0; k < 4; k++) {
        uint8_t *a, *b;
        size_t na, nb;
        quantize_ok(mixes[k], false, 1);
        read_all(out_path, &a, &na);
        quantize_ok(mixes[k], false, 3);
        read_all(out_path, &b, &nb);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na);
        free(a);
        free(b);
    }
    unlink(out_path);
    unlink(in_path);
}

static void test_quantize_errors(void **state) {
    (void)state;
    set_paths();
    struct tdesc td[256];
    char err[ANVIL_ERRMSG_CAP];
    struct anvil_quantize_params p = {.type = "Q4_K_M"};
    int64_t live = core_alloc_live();

    /* already quantized below the target: Q4_0 -> Q8_0, -> Q6_K, and the
     * Q4_0 mix too (its tied lm_head is Q6_K) refused; -> pure Q4_0
     * (copied) and -> F16 (exact) fine */
    make_model(in_path, 2, 256, 256, true, ANVIL_TYPE_Q4_0, false, td);
    unlink(out_path);
    p.type = "Q8_0";
    assert_int_equal(anvil_quantize(in_path, out_path, &p, NULL, err, sizeof(err)),
                     ANVIL_ERR_INVALID);
    assert_non_null(strstr(err, "already quantized to Q4_0"));
    assert_non_null(strstr(err, "token_embd.weight")); /* the first tensor in the file */
    p.type = "Q6_K";
    assert_int_equal(anvil_quantize(in_path, out_path, &p, NULL, err, sizeof(err)),
                     ANVIL_ERR_INVALID);
    assert_int_equal(access(out_path, F_OK), -1);
    assert_int_equal(access(tmp_path, F_OK), -1);
    p.type = "F16";
    assert_int_equal(anvil_quantize(in_path, out_path, &p, NULL, err, sizeof(err)), ANVIL_OK);
    p.type = "Q4_0";
    assert_int_equal(anvil_quantize(in_path, out_path, &p, NULL, err, sizeof(err)),
                     ANVIL_ERR_INVALID);
    p.pure = true;
    assert_int_equal(anvil_quantize(in_path, out_path, &p, NULL, err, sizeof(err)), ANVIL_OK);
    p.pure = false;

    /* unknown type, bad paths */
    p.type = "Q4_K_X";
    assert_int_equal(anvil_quantize(in_path, out_path, &p, NULL, err, sizeof(err)),
                     ANVIL_ERR_INVALID);
    assert_non_null(strstr(err, "unknown type 'Q4_K_X'"));
    p.type = NULL;
    assert_int_equal(anvil_quantize(in_path, out_path, &p, NULL, err, sizeof(err)),
                     ANVIL_ERR_INVALID);
    assert_int_equal(anvil_quantize(in_path, out_path, NULL, NULL, err, sizeof(err)),
                     ANVIL_ERR_INVALID);
    p.type = "Q8_0";
    assert_int_equal(anvil_quantize("/nonexistent.gguf", out_path, &p, NULL, err, sizeof(err)),
                     ANVIL_ERR_IO);
    p.type = "F16";
    assert_int_equal(anvil_quantize(in_path, "/nonexistent/dir/x.gguf", &p, NULL, err,
                                    sizeof(err)), ANVIL_ERR_IO);

    /* a NaN in a tensor: an error naming it, nothing written */
    make_model(in_path, 2, 256, 256, true, ANVIL_TYPE_F32, true, td);
    unlink(out_path);
    for (int th = 1; th <= 2; th++) {
        p.type = "Q4_K_M", p.n_threads = th;
        assert_int_equal(anvil_quantize(in_path, out_path, &p, NULL, err, sizeof(err)),
                         ANVIL_ERR_FORMAT);
        assert_non_null(strstr(err, "blk.0.ffn_up.weight"));
        assert_non_null(strstr(err, "NaN"));
        assert_int_equal(access(out_path, F_OK), -1);
        assert_int_equal(access(tmp_path, F_OK), -1);
    }
    assert_int_equal(core_alloc_live(), live);
    unlink(in_path);
}

static void test_quantize_oom(void **state) {
    (void)state;
    set_paths();
    struct tdesc td[256];
    char err[ANVIL_ERRMSG_CAP];
    make_model(in_path, 1, 256, 256, true, ANVIL_TYPE_F16, false, td);
    unlink(out_path);
    int64_t live = core_alloc_live();
    struct anvil_quantize_params p = {.type = "Q4_K_M", .n_threads = 2};
    uint64_t k;
    for (k = 1; k < 200; k++) {
        core_alloc_fail_at(k);
        anvil_status st = anvil_quantize(in_path, out_path, &p, NULL, err, sizeof(err));
        core_alloc_fail_at(0);
        assert_int_equal(core_alloc_live(), live);
        if (st == ANVIL_OK) break;
        assert_int_equal(st, ANVIL_ERR_NOMEM);
        assert_int_equal(access(out_path, F_OK), -1);
        assert_int_equal(access(tmp_path, F_OK), -1);
    }
    assert_true(k > 3 && k < 200);
    assert_int_equal(access(out_path, F_OK), 0);
    unlink(out_path);
    unlink(in_path);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_types),
        cmocka_unit_test(test_search_sym),
        cmocka_unit_test(test_search_affine),
        cmocka_unit_test(test_row_quantizers),
        cmocka_unit_test(test_mix_rules),
        cmocka_unit_test(test_threads_same_bytes),
        cmocka_unit_test(test_quantize_errors),
        cmocka_unit_test(test_quantize_oom),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
