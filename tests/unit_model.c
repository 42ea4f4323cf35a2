/*
 * unit_model.c - the model/context API on the default model: every bad
 * batch is refused with the right status and leaves the cache as it was;
 * KV exhaustion is recoverable; out-of-memory at every allocation of
 * load, ctx init and decode fails cleanly and leaks nothing (the default
 * model, and the HP1 micro model of tests/fuzz/corpus/gguf).
 *
 * Needs models/SmolLM2-135M-Instruct.Q4_1.gguf (or ANVIL_MODEL); the test
 * runner fetches it with `make model` first.
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

#include "anvil.h"
#include "attn/hp1/attn_hp1.h"
#include "core/core.h"
#include "model/moe.h"

static const char *model_path(void) {
    const char *p = getenv("ANVIL_MODEL");
    return p && *p ? p : ANVIL_DEFAULT_MODEL;
}

static struct anvil_model *model;

static int setup(void **state) {
    (void)state;
    char err[ANVIL_ERRMSG_CAP];
    if (anvil_model_load(model_path(), NULL, &model, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "unit_model: cannot load %s: %s\n", model_path(), err);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    anvil_model_free(model);
    return 0;
}

static struct anvil_ctx *make_ctx(int n_ctx, int n_seq, int n_batch, int64_t kv_mem) {
    struct anvil_ctx_params p = anvil_ctx_default_params();
    p.n_ctx = n_ctx;
    p.n_seq_max = n_seq;
    p.n_batch = n_batch;
    p.n_threads = 2;
    p.kv_mem = kv_mem;
    struct anvil_ctx *c = NULL;
    assert_int_equal(anvil_ctx_init(model, &p, &c, NULL, 0), ANVIL_OK);
    return c;
}

static anvil_status decode1(struct anvil_ctx *c, anvil_token t, int32_t pos, int32_t seq) {
    struct anvil_batch b = {.n_tokens = 1, .token = &t, .pos = &pos, .seq_id = &seq};
    return anvil_decode(c, &b);
}

static void test_bad_batches(void **state) {
    (void)state;
    struct anvil_ctx *c = make_ctx(64, 2, 8, 0);
    int32_t nv = anvil_model_n_vocab(model);
    assert_int_equal(decode1(c, 100, 0, 0), ANVIL_OK);
    float ref[8];
    memcpy(ref, anvil_get_logits(c, 0), sizeof(ref));

    struct anvil_batch empty = {0};
    assert_int_equal(anvil_decode(c, &empty), ANVIL_ERR_INVALID);
    assert_int_equal(anvil_decode(c, NULL), ANVIL_ERR_INVALID);
    assert_int_equal(decode1(c, -1, 1, 0), ANVIL_ERR_INVALID);
    assert_non_null(strstr(anvil_ctx_errmsg(c), "out of range"));
    assert_int_equal(decode1(c, nv, 1, 0), ANVIL_ERR_INVALID);
    assert_int_equal(decode1(c, 5, 1, 2), ANVIL_ERR_INVALID);  /* seq out of range */
    assert_int_equal(decode1(c, 5, 1, -1), ANVIL_ERR_INVALID);
    assert_int_equal(decode1(c, 5, 3, 0), ANVIL_ERR_INVALID);  /* gap */
    assert_int_equal(decode1(c, 5, 0, 0), ANVIL_ERR_INVALID);  /* rewrite */
    /* rows of one sequence split by another */
    anvil_token tk[3] = {5, 6, 7};
    int32_t pos[3] = {1, 0, 2}, seq[3] = {0, 1, 0};
    struct anvil_batch b = {.n_tokens = 3, .token = tk, .pos = pos, .seq_id = seq};
    assert_int_equal(anvil_decode(c, &b), ANVIL_ERR_INVALID);
    /* more rows than n_batch */
    anvil_token many[9] = {0};
    int32_t mpos[9], mseq[9] = {0};
    for (int i = 0; i < 9; i++) mpos[i] = 1 + i;
    struct anvil_batch big = {.n_tokens = 9, .token = many, .pos = mpos, .seq_id = mseq};
    assert_int_equal(anvil_decode(c, &big), ANVIL_ERR_INVALID);
    /* more logits rows than n_outputs (= n_seq_max = 2) */
    int8_t want[3] = {1, 1, 1};
    struct anvil_batch lg = {.n_tokens = 3, .token = many, .pos = mpos, .seq_id = mseq, .logits = want};
    assert_int_equal(anvil_decode(c, &lg), ANVIL_ERR_INVALID);
    assert_int_equal(anvil_n_logits(c), 0);
    assert_null(anvil_get_logits(c, 0));

    /* nothing changed: the sequence still has one position, and recomputing
     * it from scratch gives the same logits */
    assert_int_equal(anvil_seq_len(c, 0), 1);
    assert_int_equal(anvil_seq_len(c, 1), 0);
    assert_int_equal(anvil_seq_truncate(c, 0, 0), ANVIL_OK);
    assert_int_equal(decode1(c, 100, 0, 0), ANVIL_OK);
    assert_memory_equal(ref, anvil_get_logits(c, 0), sizeof(ref));
    anvil_ctx_free(c);
}

static void test_context_full(void **state) {
    (void)state;
    struct anvil_ctx *c = make_ctx(16, 1, 16, 0);
    anvil_token tk[16];
    int32_t pos[16], seq[16] = {0};
    for (int i = 0; i < 16; i++) tk[i] = 200 + i, pos[i] = i;
    struct anvil_batch b = {.n_tokens = 16, .token = tk, .pos = pos, .seq_id = seq};
    assert_int_equal(anvil_decode(c, &b), ANVIL_OK);
    assert_int_equal(decode1(c, 5, 16, 0), ANVIL_ERR_KV_FULL);
    assert_int_equal(anvil_seq_len(c, 0), 16);
    assert_int_equal(anvil_seq_truncate(c, 0, 15), ANVIL_OK);
    assert_int_equal(decode1(c, 5, 15, 0), ANVIL_OK);
    anvil_ctx_free(c);
}

static void test_kv_pool_exhaustion(void **state) {
    (void)state;
    /* a pool of a few blocks shared by 4 sequences */
    struct anvil_ctx *c = make_ctx(256, 4, 64, 4 * 16 * 30 * 2 * 192 * 2);
    anvil_token tk[64];
    int32_t pos[64], seq[64];
    for (int i = 0; i < 64; i++) tk[i] = 300 + i, pos[i] = i, seq[i] = 0;
    struct anvil_batch b = {.n_tokens = 64, .token = tk, .pos = pos, .seq_id = seq};
    assert_int_equal(anvil_decode(c, &b), ANVIL_OK); /* 4 blocks: the whole pool */
    for (int i = 0; i < 8; i++) seq[i] = 1;
    b.n_tokens = 8;
    assert_int_equal(anvil_decode(c, &b), ANVIL_ERR_KV_FULL);
    assert_int_equal(anvil_seq_len(c, 1), 0);
    assert_int_equal(anvil_seq_len(c, 0), 64);
    assert_int_equal(anvil_seq_truncate(c, 0, 0), ANVIL_OK); /* free seq 0 */
    assert_int_equal(anvil_decode(c, &b), ANVIL_OK);
    assert_int_equal(anvil_seq_len(c, 1), 8);
    anvil_ctx_free(c);
}

static void test_params_rejected(void **state) {
    (void)state;
    struct anvil_ctx_params p = anvil_ctx_default_params();
    struct anvil_ctx *c = (struct anvil_ctx *)0x1;
    p.n_ctx = -5;
    assert_int_equal(anvil_ctx_init(model, &p, &c, NULL, 0), ANVIL_ERR_INVALID);
    assert_true(c == (struct anvil_ctx *)0x1); /* untouched on failure */
    p = anvil_ctx_default_params();
    p.kv_type = ANVIL_TYPE_Q4_0;
    assert_int_equal(anvil_ctx_init(model, &p, &c, NULL, 0), ANVIL_ERR_INVALID);
    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model *m = (struct anvil_model *)0x1;
    assert_int_equal(anvil_model_load("/nonexistent/x.gguf", NULL, &m, err, sizeof(err)),
                     ANVIL_ERR_IO);
    assert_true(m == (struct anvil_model *)0x1);
    struct anvil_model_params mp = anvil_model_default_params();
    mp.kernels = "sse9";
    assert_int_equal(anvil_model_load(model_path(), &mp, &m, err, sizeof(err)),
                     ANVIL_ERR_UNSUPPORTED);
    assert_non_null(strstr(err, "sse9"));
}

static void drain(void *user, const struct anvil_event *ev) {
    (void)ev;
    (*(int *)user)++;
}

/* One pass through everything a server does at start and on a request:
 * model load, a context and a decode, the engine, a request's submit
 * (admission), and steps until it ends. Returns the first failure. */
static anvil_status serve_once(const char *path) {
    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model *m = NULL;
    struct anvil_ctx *c = NULL;
    struct anvil_engine *e = NULL;
    anvil_status st = anvil_model_load(path, NULL, &m, err, sizeof(err));
    if (st == ANVIL_OK) {
        struct anvil_ctx_params p = anvil_ctx_default_params();
        p.n_ctx = 64;
        p.n_threads = 2;
        st = anvil_ctx_init(m, &p, &c, err, sizeof(err));
    }
    if (st == ANVIL_OK) {
        anvil_token t = 42;
        int32_t pos = 0, seq = 0;
        struct anvil_batch b = {.n_tokens = 1, .token = &t, .pos = &pos, .seq_id = &seq};
        st = anvil_decode(c, &b);
        assert_int_equal(st, ANVIL_OK); /* decode never allocates */
    }
    if (st == ANVIL_OK) {
        struct anvil_engine_params ep = anvil_engine_default_params();
        ep.n_threads = 2;
        ep.max_running = 2;
        ep.n_ctx = 64;
        ep.kv_mem = 1 << 20;
        st = anvil_engine_init(m, &ep, &e, err, sizeof(err));
    }
    if (st == ANVIL_OK) {
        anvil_token prompt[4] = {1, 2, 3, 4};
        const char *stop[1] = {"xyz"};
        struct anvil_request_params rp = {.prompt = prompt, .n_prompt = 4, .max_tokens = 3,
                                          .sampling = anvil_sampler_default_params(),
                                          .stop = stop, .n_stop = 1, .top_logprobs = 2};
        rp.sampling.temperature = 0.7f;
        int events = 0;
        anvil_req_id id;
        st = anvil_engine_submit(e, &rp, drain, &events, &id, err, sizeof(err));
        int32_t active = 1;
        for (int i = 0; st == ANVIL_OK && active > 0 && i < 64; i++) st = anvil_engine_step(e, &active);
    }
    anvil_engine_free(e);
    anvil_ctx_free(c);
    anvil_model_free(m);
    return st;
}

/* Count the allocations of one clean serve_once, then fail allocation N
 * for every N of them in turn: every allocation of model load, context
 * init, engine init and request admission fails once (about 400 runs on
 * the default model). Each run must end with NOMEM - or succeed, where a
 * failure is tolerated by design (scratch with a fallback) - and leave no
 * live allocation behind. */
static int oom_walk(const char *path) {
    int64_t base = core_alloc_live();
    uint64_t a0 = core_alloc_count();
    assert_int_equal(serve_once(path), ANVIL_OK);
    uint64_t total = core_alloc_count() - a0;
    int n_fail = 0;
    for (uint64_t n = 1; n <= total; n++) {
        core_alloc_fail_at(n);
        anvil_status st = serve_once(path);
        core_alloc_fail_at(0);
        assert_int_equal(core_alloc_live(), base);
        if (st == ANVIL_OK) {
            if (getenv("ANVIL_OOM_VERBOSE")) printf("allocation %llu: tolerated\n", (unsigned long long)n);
            continue;
        }
        assert_int_equal(st, ANVIL_ERR_NOMEM);
        n_fail++;
    }
    printf("oom walk (%s): %llu allocations failed in turn, %d ended in NOMEM, all cleanly\n",
           path, (unsigned long long)total, n_fail);
    return n_fail;
}

static void test_oom_walk(void **state) {
    (void)state;
    assert_true(oom_walk(model_path()) > 300);
}

/* The same on the one-layer HP1 model of the fuzz corpus: the HP1 taps
 * the model owns and the HP1 kernel selection at ctx init. */
static void test_oom_walk_hp1(void **state) {
    (void)state;
    if (!kn_hp1_select("ref")) {
        /* built without HP1 (make HP1=0): the model is refused, cleanly */
        char err[256] = "";
        struct anvil_model *m = NULL;
        assert_int_equal(anvil_model_load("tests/fuzz/corpus/gguf/micro_llama_hp1.gguf", NULL, &m,
                                          err, sizeof(err)),
                         ANVIL_ERR_UNSUPPORTED);
        assert_null(m);
        assert_non_null(strstr(err, "built without HP1"));
        return;
    }
    assert_true(oom_walk("tests/fuzz/corpus/gguf/micro_llama_hp1.gguf") > 50);
}

/* Load a BERT encoder (src/model/encoder.c), make a context and embed two
 * sequences (mean pooling): the encoder's allocations at load (its norms,
 * biases, token types), at init and per anvil_embed call. */
static anvil_status embed_once(const char *path, float *out) {
    char err[256];
    struct anvil_model *m = NULL;
    struct anvil_ctx *c = NULL;
    anvil_status st = anvil_model_load(path, NULL, &m, err, sizeof(err));
    if (st == ANVIL_OK) {
        struct anvil_ctx_params cp = anvil_ctx_default_params();
        cp.n_threads = 2;
        cp.n_ctx = 16;
        cp.n_batch = 16;
        cp.n_outputs = 16;
        cp.n_seq_max = 2;
        st = anvil_ctx_init(m, &cp, &c, err, sizeof(err));
    }
    if (st == ANVIL_OK) {
        anvil_token a[3] = {1, 2, 3}, b[5] = {7, 8, 9, 10, 11};
        const anvil_token *seqs[2] = {a, b};
        int32_t lens[2] = {3, 5};
        st = anvil_embed(c, seqs, lens, 2, ANVIL_POOL_UNSPECIFIED, true, out);
    }
    anvil_ctx_free(c);
    anvil_model_free(m);
    return st;
}

/* The OOM walk of oom_walk on the encoder: every allocation fails once;
 * each run ends in NOMEM (or succeeds with the same vectors) and leaks
 * nothing. */
static void test_oom_walk_bert(void **state) {
    (void)state;
    const char *path = "tests/fuzz/corpus/gguf/micro_bert.gguf";
    float ref[64], got[64];
    int64_t base = core_alloc_live();
    uint64_t a0 = core_alloc_count();
    assert_int_equal(embed_once(path, ref), ANVIL_OK);
    uint64_t total = core_alloc_count() - a0;
    int n_fail = 0;
    for (uint64_t n = 1; n <= total; n++) {
        core_alloc_fail_at(n);
        anvil_status st = embed_once(path, got);
        core_alloc_fail_at(0);
        assert_int_equal(core_alloc_live(), base);
        if (st == ANVIL_OK) {
            assert_memory_equal(got, ref, sizeof(ref));
            continue;
        }
        assert_int_equal(st, ANVIL_ERR_NOMEM);
        n_fail++;
    }
    printf("oom walk (%s): %llu allocations failed in turn, %d ended in NOMEM, all cleanly\n",
           path, (unsigned long long)total, n_fail);
    assert_true(n_fail > 20);
}

/* Metadata strings and the chat template family (GET /props reads them):
 * snprintf-style cutting, -1 for a missing key and for a non-string one. */
static void test_meta_str(void **state) {
    (void)state;
    char buf[64];
    assert_int_equal(anvil_model_meta_str(model, "general.architecture", buf, sizeof(buf)), 5);
    assert_string_equal(buf, "llama");
    memset(buf, 'x', sizeof(buf));
    assert_int_equal(anvil_model_meta_str(model, "general.architecture", buf, 3), 5);
    assert_string_equal(buf, "ll");
    assert_int_equal(anvil_model_meta_str(model, "general.architecture", NULL, 0), 5);
    memset(buf, 'x', sizeof(buf));
    assert_int_equal(anvil_model_meta_str(model, "no.such.key", buf, sizeof(buf)), -1);
    assert_string_equal(buf, "");
    assert_int_equal(anvil_model_meta_str(model, "llama.block_count", buf, sizeof(buf)), -1);
    assert_string_equal(buf, "");
    int32_t n = anvil_model_meta_str(model, "tokenizer.chat_template", NULL, 0);
    assert_true(n > 0);
    char *t = malloc((size_t)n + 1);
    assert_non_null(t);
    assert_int_equal(anvil_model_meta_str(model, "tokenizer.chat_template", t, (size_t)n + 1), n);
    assert_int_equal(strlen(t), (size_t)n);
    assert_non_null(strstr(t, "<|im_start|>"));
    free(t);
    assert_string_equal(anvil_chat_template_name(model), "chatml");
}

/* moe_route (model/moe.h): ties go to the lowest expert, in order of
 * probability; renormalization and its clamp; sigmoid gating; the scale;
 * NaN logits still pick k distinct experts. */
static void test_moe_route(void **state) {
    (void)state;
    struct model_hparams hp = {.n_expert = 6, .n_expert_used = 3, .moe_norm_w = false,
                               .moe_w_scale = 1.0f, .moe_gating = MODEL_GATING_SOFTMAX};
    float p[6], w[3];
    int32_t sel[3];
    const float tie[6] = {0.5f, 2.0f, 0.5f, 2.0f, 0.5f, -1.0f};
    moe_route(&hp, tie, p, sel, w);
    assert_int_equal(sel[0], 1);
    assert_int_equal(sel[1], 3);
    assert_int_equal(sel[2], 0); /* 0, 2 and 4 tie: the lowest */
    assert_true(w[0] == w[1] && w[0] > w[2]);
    float e2 = expf(2.0f - 2.0f), e05 = expf(0.5f - 2.0f), em1 = expf(-1.0f - 2.0f);
    float sum = 2 * e2 + 3 * e05 + em1;
    assert_float_equal(w[2], e05 / sum, 1e-6);
    const float zero[6] = {0};
    moe_route(&hp, zero, p, sel, w);
    for (int j = 0; j < 3; j++) {
        assert_int_equal(sel[j], j);
        assert_float_equal(w[j], 1.0f / 6.0f, 1e-7);
    }
    hp.moe_norm_w = true;
    hp.moe_w_scale = 2.0f;
    moe_route(&hp, tie, p, sel, w);
    assert_float_equal(w[0] + w[1] + w[2], 2.0f, 1e-6);
    hp.moe_gating = MODEL_GATING_SIGMOID;
    hp.moe_norm_w = false;
    hp.moe_w_scale = 1.0f;
    const float sg[6] = {-3.0f, 1.0f, -40.0f, 0.0f, 4.0f, -40.0f};
    moe_route(&hp, sg, p, sel, w);
    assert_int_equal(sel[0], 4);
    assert_int_equal(sel[1], 1);
    assert_int_equal(sel[2], 3);
    assert_float_equal(w[2], 0.5f, 1e-7);
    /* the clamp: sigmoid weights near 0 renormalize by 2^-14, not by ~0 */
    hp.moe_norm_w = true;
    const float tiny[6] = {-40.0f, -40.0f, -40.0f, -41.0f, -42.0f, -43.0f};
    moe_route(&hp, tiny, p, sel, w);
    assert_true(isfinite(w[0]) && w[0] < 1e-6f);
    const float nanl[6] = {NAN, NAN, 1.0f, NAN, NAN, NAN};
    hp.moe_gating = MODEL_GATING_SOFTMAX;
    moe_route(&hp, nanl, p, sel, w);
    assert_true(sel[0] != sel[1] && sel[1] != sel[2] && sel[0] != sel[2]);
    for (int j = 0; j < 3; j++) assert_true(sel[j] >= 0 && sel[j] < 6);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* a test name or glob */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_batches),
        cmocka_unit_test(test_context_full),
        cmocka_unit_test(test_kv_pool_exhaustion),
        cmocka_unit_test(test_params_rejected),
        cmocka_unit_test(test_oom_walk),
        cmocka_unit_test(test_oom_walk_hp1),
        cmocka_unit_test(test_oom_walk_bert),
        cmocka_unit_test(test_meta_str),
        cmocka_unit_test(test_moe_route),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
