/*
 * unit_engine.c - the serving engine on the default model (ANVIL_MODEL or
 * models/SmolLM2-135M-Instruct.Q4_1.gguf):
 *
 *   - the KV-fit rule: anvil_engine_seq_capacity is what submit enforces
 *     (a request of exactly that many positions is taken, one more is
 *     refused), n_ctx when the pool is large, less when it is small;
 *   - a draft model whose decode fails: the request ends normally with the
 *     tokens of plain decoding, speculation with the draft is switched off
 *     for it and counted (n_spec_draft_failed), and the log says why.
 *     The failure is made by giving the engine a draft context whose batch
 *     holds one row, so the draft's catch-up of the prompt is refused.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "engine/engine_int.h"

static const char *model_path(void) {
    const char *p = getenv("ANVIL_MODEL");
    return p ? p : "models/SmolLM2-135M-Instruct.Q4_1.gguf";
}

static struct anvil_model *load(void) {
    struct anvil_model *m = NULL;
    char err[256];
    if (anvil_model_load(model_path(), NULL, &m, err, sizeof err) != ANVIL_OK) {
        print_error("cannot load %s: %s\n", model_path(), err);
        fail();
    }
    return m;
}

/* ---------------------------------------------------------------------- */
/* the KV-fit rule */

static void test_seq_capacity(void **st) {
    (void)st;
    struct anvil_model *m = load();
    char err[256];
    struct anvil_engine_params ep = anvil_engine_default_params();
    ep.n_threads = 1;
    ep.max_running = 2;
    ep.n_ctx = 1024;
    struct anvil_engine *e = NULL;
    assert_int_equal(anvil_engine_init(m, &ep, &e, err, sizeof err), ANVIL_OK);
    assert_int_equal(anvil_engine_seq_capacity(e), anvil_engine_n_ctx(e));
    anvil_engine_free(e);

    /* a pool of about 256 positions for a context of 1024 */
    ep.kv_mem = anvil_model_kv_bytes(m, ANVIL_TYPE_F16, 256, false);
    assert_int_equal(anvil_engine_init(m, &ep, &e, err, sizeof err), ANVIL_OK);
    int64_t cap = anvil_engine_seq_capacity(e);
    assert_true(cap > 16 && cap < anvil_engine_n_ctx(e));
    anvil_token prompt[4] = {1, 2, 3, 4};
    struct anvil_request_params rp = {.prompt = prompt, .n_prompt = 4,
                                      .max_tokens = (int32_t)cap - 4,
                                      .sampling = anvil_sampler_default_params()};
    anvil_req_id id;
    assert_int_equal(anvil_engine_submit(e, &rp, NULL, NULL, &id, err, sizeof err), ANVIL_OK);
    rp.max_tokens++;
    assert_int_equal(anvil_engine_submit(e, &rp, NULL, NULL, &id, err, sizeof err),
                     ANVIL_ERR_INVALID);
    assert_non_null(strstr(err, "KV cache"));
    anvil_engine_free(e);
    anvil_model_free(m);
}

/* ---------------------------------------------------------------------- */
/* a failing draft model */

struct run {
    anvil_token tok[64];
    int n;
    enum anvil_finish finish;
    bool done;
};

static void on_event(void *user, const struct anvil_event *ev) {
    struct run *r = user;
    if (ev->type == ANVIL_EVENT_TOKEN && r->n < 64) r->tok[r->n++] = ev->token;
    if (ev->type == ANVIL_EVENT_DONE) r->done = true, r->finish = ev->finish;
}

/* Greedy generation of 24 tokens; sabotage: replace the draft context by
 * one that refuses any batch of more than one row. */
static void generate(struct anvil_model *m, enum anvil_spec spec, bool sabotage, struct run *out,
                     struct anvil_engine_stats *stats) {
    char err[256];
    struct anvil_engine_params ep = anvil_engine_default_params();
    ep.n_threads = 1;
    ep.max_running = 2;
    ep.n_ctx = 256;
    ep.spec = spec;
    ep.spec_k = 4;
    if (spec == ANVIL_SPEC_DRAFT) ep.draft = m;
    struct anvil_engine *e = NULL;
    assert_int_equal(anvil_engine_init(m, &ep, &e, err, sizeof err), ANVIL_OK);
    if (sabotage) {
        struct anvil_ctx_params dp = anvil_ctx_default_params();
        dp.n_ctx = anvil_engine_n_ctx(e);
        dp.n_seq_max = ep.max_running;
        dp.n_batch = 1;
        dp.n_threads = 1;
        dp.n_outputs = ep.max_running;
        struct anvil_ctx *bad = NULL;
        assert_int_equal(anvil_ctx_init(m, &dp, &bad, err, sizeof err), ANVIL_OK);
        anvil_ctx_free(e->dctx);
        e->dctx = bad;
    }
    anvil_token prompt[64];
    const char *text = "The capital of France is Paris. The capital of France is";
    int32_t n = anvil_tokenize(m, text, strlen(text), prompt, 64, true, false);
    assert_true(n > 1);
    struct anvil_request_params rp = {.prompt = prompt, .n_prompt = n, .max_tokens = 24,
                                      .sampling = anvil_sampler_default_params(),
                                      .ignore_eos = true};
    rp.sampling.temperature = 0.0f;
    memset(out, 0, sizeof(*out));
    anvil_req_id id;
    assert_int_equal(anvil_engine_submit(e, &rp, on_event, out, &id, err, sizeof err), ANVIL_OK);
    int32_t active = 1;
    for (int i = 0; i < 200 && active; i++)
        assert_int_equal(anvil_engine_step(e, &active), ANVIL_OK);
    assert_true(out->done);
    anvil_engine_get_stats(e, stats);
    anvil_engine_free(e);
}

static void test_draft_failure(void **st) {
    (void)st;
    struct anvil_model *m = load();
    struct run plain, spec, failed;
    struct anvil_engine_stats s_plain, s_spec, s_failed;
    generate(m, ANVIL_SPEC_OFF, false, &plain, &s_plain);
    generate(m, ANVIL_SPEC_DRAFT, false, &spec, &s_spec);
    generate(m, ANVIL_SPEC_DRAFT, true, &failed, &s_failed);
    assert_int_equal(plain.finish, ANVIL_FINISH_LENGTH);
    assert_int_equal(plain.n, 24);
    /* the working draft speculates; the output is plain decoding's */
    assert_true(s_spec.n_spec_proposed > 0);
    assert_int_equal(s_spec.n_spec_draft_failed, 0);
    assert_int_equal(spec.n, plain.n);
    assert_memory_equal(spec.tok, plain.tok, sizeof(anvil_token) * (size_t)plain.n);
    /* the failing one is switched off once, and the output is the same */
    assert_int_equal(failed.finish, ANVIL_FINISH_LENGTH);
    assert_int_equal(s_failed.n_spec_draft_failed, 1);
    assert_int_equal(s_failed.n_spec_proposed, 0);
    assert_int_equal(failed.n, plain.n);
    assert_memory_equal(failed.tok, plain.tok, sizeof(anvil_token) * (size_t)plain.n);
    anvil_model_free(m);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seq_capacity),
        cmocka_unit_test(test_draft_failure),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
