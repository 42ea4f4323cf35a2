/*
 * unit_engine_guide.c - constraints in the engine (src/engine/guide.c)
 * against brute force, on small vocabularies built by hand:
 *
 *   - greedy: guide_choose (the argmax tested first, the mask only when it
 *     is refused) equals the argmax over the tokens cn_allowed accepts,
 *     with and without penalties, along whole outputs;
 *   - sampling: guide_choose draws exactly the token the sampler draws
 *     with the brute-force mask and the same random word (the masked
 *     distribution, not a candidates-first approximation), plain and with
 *     a preferred proposal;
 *   - proposals are cut at the first refused one, end-of-generation
 *     included, and the request's own state does not move;
 *   - a state no token can continue ends with a message, not a token;
 *   - the public API on the default model: compile errors name the
 *     problem, anvil_constraint_matches, and the engine refuses a
 *     constraint with ignore_eos or compiled for another model;
 *   - the thought gate (guide_gate): a thought's end tokens written in a
 *     row or forced by the budget (from where a partial match left off),
 *     the answer prefix forced next, the constraint active only after;
 *     and in the engine on the default model: forced tokens come out in
 *     order, the answer after them matches the constraint, a thought is
 *     not held to it.
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

#include "constrain/constrain.h"
#include "core/core.h"
#include "engine/guide.h"
#include "sample/sample.h"

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static uint64_t rnd(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* A vocabulary of n tokens: the single bytes of `alpha`, then random
 * strings of 2-4 of its bytes, then one EOG token (the last id). */
static struct cn_vocab *small_vocab(const char *alpha, int32_t n) {
    size_t na = strlen(alpha);
    uint8_t **bytes = calloc((size_t)n, sizeof(*bytes));
    int32_t *lens = calloc((size_t)n, sizeof(*lens));
    uint8_t *kinds = calloc((size_t)n, 1);
    for (int32_t t = 0; t < n - 1; t++) {
        int32_t len = t < (int32_t)na ? 1 : 2 + (int32_t)(rnd() % 3);
        bytes[t] = malloc(4);
        for (int32_t k = 0; k < len; k++)
            bytes[t][k] = (uint8_t)(t < (int32_t)na ? alpha[t] : alpha[rnd() % na]);
        lens[t] = len;
    }
    kinds[n - 1] = CN_TOK_EOG;
    struct cn_vocab *v = NULL;
    char err[128];
    assert_int_equal(cn_vocab_build(n, (const uint8_t *const *)bytes, lens, kinds, &v, err,
                                    sizeof err),
                     ANVIL_OK);
    for (int32_t t = 0; t < n; t++) free(bytes[t]);
    free(bytes);
    free(lens);
    free(kinds);
    return v;
}

/* A constraint handle without a model (guide.c only reads prog). */
static struct anvil_constraint *handle(enum cn_kind kind, const char *text) {
    struct anvil_constraint *c = core_calloc(1, sizeof(*c));
    char err[256] = "";
    if (cn_compile(kind, text, strlen(text), NULL, &c->prog, err, sizeof err) != ANVIL_OK) {
        print_error("compile <<%s>>: %s\n", text, err);
        fail();
    }
    atomic_init(&c->refs, 1);
    return c;
}

static void random_logits(float *l, int32_t n) {
    for (int32_t t = 0; t < n; t++) {
        l[t] = (float)((int64_t)(rnd() % 2000) - 1000) / 100.0f;
        if (rnd() % 7 == 0) l[t] = l[rnd() % (uint64_t)n]; /* ties */
    }
}

static anvil_token plain_argmax(const float *l, int32_t n) {
    anvil_token best = 0;
    for (int32_t t = 1; t < n; t++)
        if (l[t] > l[best]) best = t;
    return best;
}

/* the allowed set by asking cn_allowed about every token */
static int32_t brute_mask(struct cn_state *s, int32_t n, uint8_t *mask) {
    memset(mask, 0, ((size_t)n + 7) / 8);
    int32_t k = 0;
    for (int32_t t = 0; t < n; t++)
        if (cn_allowed(s, t)) {
            mask[t >> 3] |= (uint8_t)(1u << (t & 7));
            k++;
        }
    return k;
}

static const char *const SOURCES[][2] = {
    {"r", "(ab|ba)+c?"},
    {"r", "[a-c]{2,5}(,[a-c]{1,3}){0,4}"},
    {"g", "root ::= \"{\" (pair (\",\" pair)*)? \"}\"\npair ::= [a-c]+ \":\" (root | [a-c])"},
    {"s", "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":4},"
          "\"b\":{\"enum\":[\"ab\",\"cab\"]}},\"required\":[\"b\"]}"},
};

static enum cn_kind kind_of(const char *k) {
    return k[0] == 'r' ? CN_REGEX : k[0] == 'g' ? CN_GBNF : CN_JSON_SCHEMA;
}

/* ---------------------------------------------------------------------- */

static void run_greedy(bool penalized) {
    const int32_t n = 64;
    struct cn_vocab *v = small_vocab("abc{}:,\" ", n);
    float *l = malloc((size_t)n * sizeof(float)), *lp = malloc((size_t)n * sizeof(float));
    uint8_t *mask = malloc((size_t)(n + 7) / 8);
    int checked = 0, refused = 0;
    for (size_t s = 0; s < sizeof(SOURCES) / sizeof(SOURCES[0]); s++) {
        struct anvil_constraint *c = handle(kind_of(SOURCES[s][0]), SOURCES[s][1]);
        for (int run = 0; run < 20; run++) {
            struct guide_req q;
            char err[128];
            assert_int_equal(guide_req_init(&q, c, v, err, sizeof err), ANVIL_OK);
            struct anvil_sampler_params sp = anvil_sampler_default_params();
            sp.temperature = 0.0f;
            if (penalized) {
                sp.repeat_penalty = 1.7f;
                sp.repeat_last_n = 8;
                sp.presence_penalty = 0.5f;
            }
            struct anvil_sampler *smp = NULL;
            assert_int_equal(anvil_sampler_init(&sp, n, &smp), ANVIL_OK);
            for (int step = 0; step < 40; step++) {
                random_logits(l, n);
                memcpy(lp, l, (size_t)n * sizeof(float));
                if (penalized) sample_apply_penalties(smp, lp);
                int32_t k = brute_mask(q.st, n, mask);
                const char *why = NULL;
                anvil_token got = guide_choose(&q, smp, true, penalized, l, plain_argmax(l, n), -1,
                                              &why);
                if (k == 0) {
                    assert_int_equal(got, -1);
                    break;
                }
                /* the masked argmax, lowest id among ties */
                anvil_token want = -1;
                for (int32_t t = 0; t < n; t++)
                    if (((mask[t >> 3] >> (t & 7)) & 1) && (want < 0 || lp[t] > lp[want])) want = t;
                assert_int_equal(got, want);
                if (!cn_allowed(q.st, plain_argmax(lp, n))) refused++;
                checked++;
                if (got == n - 1) break; /* EOG */
                assert_int_equal(guide_advance(&q, got), ANVIL_OK);
                anvil_sampler_accept(smp, got);
                if (guide_complete(&q)) break;
            }
            anvil_sampler_free(smp);
            guide_req_free(&q);
        }
        anvil_constraint_free(c);
    }
    /* both paths ran: the top token accepted and refused */
    assert_true(checked > 200 && refused > 50 && refused < checked);
    free(l);
    free(lp);
    free(mask);
    cn_vocab_free(v);
}

static void test_greedy_is_masked_argmax(void **st) {
    (void)st;
    run_greedy(false);
}

static void test_greedy_penalized(void **st) {
    (void)st;
    run_greedy(true);
}

/* With the same seed, guide_choose and the sampler with the brute-force
 * mask consume the same random word and must return the same token. */
static void test_sampled_is_masked_draw(void **st) {
    (void)st;
    const int32_t n = 64;
    struct cn_vocab *v = small_vocab("abc{}:,\" ", n);
    float *l = malloc((size_t)n * sizeof(float));
    uint8_t *mask = malloc((size_t)(n + 7) / 8);
    int checked = 0;
    struct anvil_sampler_params variants[3];
    for (int i = 0; i < 3; i++) variants[i] = anvil_sampler_default_params();
    variants[0].temperature = 1.0f;
    variants[1].temperature = 0.7f;
    variants[1].top_k = 5;
    variants[1].top_p = 0.9f;
    variants[2].temperature = 1.3f;
    variants[2].min_p = 0.05f;
    variants[2].repeat_penalty = 1.3f;
    variants[2].repeat_last_n = 16;
    for (size_t s = 0; s < sizeof(SOURCES) / sizeof(SOURCES[0]); s++) {
        struct anvil_constraint *c = handle(kind_of(SOURCES[s][0]), SOURCES[s][1]);
        for (int run = 0; run < 30; run++) {
            struct anvil_sampler_params sp = variants[run % 3];
            sp.seed = (uint64_t)run * 77 + s;
            struct anvil_sampler *a = NULL, *b = NULL;
            assert_int_equal(anvil_sampler_init(&sp, n, &a), ANVIL_OK);
            assert_int_equal(anvil_sampler_init(&sp, n, &b), ANVIL_OK);
            struct guide_req q;
            char err[128];
            assert_int_equal(guide_req_init(&q, c, v, err, sizeof err), ANVIL_OK);
            for (int step = 0; step < 40; step++) {
                random_logits(l, n);
                int32_t k = brute_mask(q.st, n, mask);
                anvil_token draft = step % 3 == 0 ? (anvil_token)(rnd() % (uint64_t)n) : -1;
                if (draft >= 0 && !((mask[draft >> 3] >> (draft & 7)) & 1)) draft = -1;
                const char *why = NULL;
                anvil_token got = guide_choose(&q, a, false, sample_penalties_on(a), l,
                                              plain_argmax(l, n), draft, &why);
                if (k == 0) {
                    assert_int_equal(got, -1);
                    break;
                }
                anvil_token want = draft >= 0 ? anvil_sampler_sample_spec(b, l, mask, draft)
                                              : anvil_sampler_sample(b, l, mask);
                assert_int_equal(got, want);
                assert_true((mask[got >> 3] >> (got & 7)) & 1);
                checked++;
                if (got == n - 1) break;
                assert_int_equal(guide_advance(&q, got), ANVIL_OK);
                anvil_sampler_accept(a, got);
                anvil_sampler_accept(b, got);
                if (guide_complete(&q)) break;
            }
            anvil_sampler_free(a);
            anvil_sampler_free(b);
            guide_req_free(&q);
        }
        anvil_constraint_free(c);
    }
    assert_true(checked > 300);
    free(l);
    free(mask);
    cn_vocab_free(v);
}

static void test_cut(void **st) {
    (void)st;
    /* tokens: a b c then EOG */
    const uint8_t *bytes[4] = {(const uint8_t *)"a", (const uint8_t *)"b", (const uint8_t *)"c",
                               NULL};
    int32_t lens[4] = {1, 1, 1, 0};
    uint8_t kinds[4] = {CN_TOK_TEXT, CN_TOK_TEXT, CN_TOK_TEXT, CN_TOK_EOG};
    struct cn_vocab *v = NULL;
    char err[128];
    assert_int_equal(cn_vocab_build(4, bytes, lens, kinds, &v, err, sizeof err), ANVIL_OK);
    struct anvil_constraint *c = handle(CN_REGEX, "ab*c?");
    struct guide_req q;
    assert_int_equal(guide_req_init(&q, c, v, err, sizeof err), ANVIL_OK);
    anvil_constraint_free(c); /* the request holds its own reference */
    anvil_token d1[] = {0, 1, 1, 2, 1};
    assert_int_equal(guide_cut(&q, d1, 5), 4); /* "abbc", then nothing */
    anvil_token d2[] = {1, 0};
    assert_int_equal(guide_cut(&q, d2, 2), 0); /* the state has not moved: 'b' first is refused */
    anvil_token d3[] = {0, 3, 0};
    assert_int_equal(guide_cut(&q, d3, 3), 2); /* "a" EOG: nothing after the end */
    anvil_token d4[] = {3};
    assert_int_equal(guide_cut(&q, d4, 1), 0); /* EOG before the output is complete */
    assert_int_equal(guide_cut(&q, d1, 0), 0);
    assert_int_equal(guide_advance(&q, 0), ANVIL_OK);
    assert_false(guide_complete(&q)); /* "a" may go on */
    assert_int_equal(guide_advance(&q, 2), ANVIL_OK);
    assert_true(guide_complete(&q)); /* "ac": complete, nothing may follow */
    guide_req_free(&q);
    cn_vocab_free(v);
}

static void test_dead_end(void **st) {
    (void)st;
    const uint8_t *bytes[3] = {(const uint8_t *)"a", (const uint8_t *)"bb", NULL};
    int32_t lens[3] = {1, 2, 0};
    uint8_t kinds[3] = {CN_TOK_TEXT, CN_TOK_TEXT, CN_TOK_EOG};
    struct cn_vocab *v = NULL;
    char err[128];
    assert_int_equal(cn_vocab_build(3, bytes, lens, kinds, &v, err, sizeof err), ANVIL_OK);
    /* "ab" needs a lone b after a: no token spells it */
    struct anvil_constraint *c = handle(CN_REGEX, "ab");
    struct guide_req q;
    assert_int_equal(guide_req_init(&q, c, v, err, sizeof err), ANVIL_OK);
    struct anvil_sampler_params sp = anvil_sampler_default_params();
    struct anvil_sampler *smp = NULL;
    assert_int_equal(anvil_sampler_init(&sp, 3, &smp), ANVIL_OK);
    float l[3] = {1.0f, 2.0f, 3.0f};
    const char *why = NULL;
    assert_int_equal(guide_choose(&q, smp, true, false, l, 2, -1, &why), 0);
    assert_int_equal(guide_advance(&q, 0), ANVIL_OK);
    why = NULL;
    assert_int_equal(guide_choose(&q, smp, true, false, l, 2, -1, &why), GUIDE_DEAD_END);
    assert_non_null(why);
    assert_non_null(strstr(why, "no token of the vocabulary"));
    anvil_sampler_free(smp);
    guide_req_free(&q);
    anvil_constraint_free(c);
    cn_vocab_free(v);
}

/* ---------------------------------------------------------------------- */
/* the public API on the default model */

static const char *model_path(void) {
    const char *p = getenv("ANVIL_MODEL");
    return p && *p ? p : ANVIL_DEFAULT_MODEL;
}

static void test_public_api(void **st) {
    (void)st;
    struct anvil_model *m = NULL, *m2 = NULL;
    char err[256];
    if (anvil_model_load(model_path(), NULL, &m, err, sizeof err) != ANVIL_OK) {
        print_error("cannot load %s: %s\n", model_path(), err);
        fail();
    }
    assert_int_equal(anvil_model_load(model_path(), NULL, &m2, err, sizeof err), ANVIL_OK);
    struct {
        enum anvil_constraint_kind k;
        const char *text, *msg;
        anvil_status st;
    } bad[] = {
        {ANVIL_CONSTRAINT_REGEX, "a(b", "", ANVIL_ERR_INVALID},
        {ANVIL_CONSTRAINT_REGEX, "(a)\\1", "backreference", ANVIL_ERR_UNSUPPORTED},
        {ANVIL_CONSTRAINT_GBNF, "root ::= x", "undefined", ANVIL_ERR_INVALID},
        {ANVIL_CONSTRAINT_GBNF, "root ::= root \"a\" | \"b\"", "left recursion", ANVIL_ERR_INVALID},
        {ANVIL_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"object\",\"if\":{}}", "if",
         ANVIL_ERR_UNSUPPORTED},
        {ANVIL_CONSTRAINT_JSON_SCHEMA, "{\"type\":", "", ANVIL_ERR_INVALID},
        {(enum anvil_constraint_kind)9, "", "kind", ANVIL_ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct anvil_constraint *c = (struct anvil_constraint *)&err; /* must stay unchanged */
        err[0] = 0;
        anvil_status s = anvil_constraint_compile(m, bad[i].k, bad[i].text, strlen(bad[i].text),
                                                  NULL, &c, err, sizeof err);
        if (s != bad[i].st || !strstr(err, bad[i].msg) || !err[0]) {
            print_error("%s: status %d, message '%s'\n", bad[i].text, s, err);
            fail();
        }
        assert_ptr_equal(c, (struct anvil_constraint *)&err);
    }
    struct anvil_constraint *c = NULL;
    const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
                         "\"required\":[\"n\"]}";
    assert_int_equal(anvil_constraint_compile(m, ANVIL_CONSTRAINT_JSON_SCHEMA, schema,
                                              strlen(schema), NULL, &c, err, sizeof err),
                     ANVIL_OK);
    assert_true(anvil_constraint_matches(c, "{\"n\": 5}", 8));
    assert_true(anvil_constraint_matches(c, "{\"n\":5}", 7));
    assert_false(anvil_constraint_matches(c, "{\"n\": 5", 7));
    assert_false(anvil_constraint_matches(c, "{}", 2));
    struct anvil_constraint *ct = NULL;
    struct anvil_constraint_params cp = {.compact = true, .or_text = true};
    assert_int_equal(anvil_constraint_compile(m, ANVIL_CONSTRAINT_JSON_SCHEMA, schema,
                                              strlen(schema), &cp, &ct, err, sizeof err),
                     ANVIL_OK);
    assert_true(anvil_constraint_matches(ct, "{\"n\":5}", 7));
    assert_false(anvil_constraint_matches(ct, "{\"n\": 5}", 8)); /* compact */
    assert_true(anvil_constraint_matches(ct, "hello {", 7));      /* text */
    assert_true(anvil_constraint_matches(ct, "", 0));
    assert_false(anvil_constraint_matches(ct, "{nope", 5));

    /* the engine refuses what it cannot honour */
    struct anvil_engine_params ep = anvil_engine_default_params();
    ep.n_threads = 1;
    ep.max_running = 2;
    ep.n_ctx = 256;
    struct anvil_engine *e = NULL;
    assert_int_equal(anvil_engine_init(m, &ep, &e, err, sizeof err), ANVIL_OK);
    anvil_token prompt[3] = {1, 2, 3};
    struct anvil_request_params rp = {.prompt = prompt, .n_prompt = 3, .max_tokens = 4,
                                      .sampling = anvil_sampler_default_params(),
                                      .constraint = c, .ignore_eos = true};
    anvil_req_id id;
    assert_int_equal(anvil_engine_submit(e, &rp, NULL, NULL, &id, err, sizeof err),
                     ANVIL_ERR_INVALID);
    assert_non_null(strstr(err, "ignore_eos"));
    struct anvil_constraint *other = NULL;
    assert_int_equal(anvil_constraint_compile(m2, ANVIL_CONSTRAINT_JSON, NULL, 0, NULL, &other,
                                              err, sizeof err),
                     ANVIL_OK);
    rp.ignore_eos = false;
    rp.constraint = other;
    assert_int_equal(anvil_engine_submit(e, &rp, NULL, NULL, &id, err, sizeof err),
                     ANVIL_ERR_INVALID);
    assert_non_null(strstr(err, "another model"));
    /* accepted; the caller's reference can go at once */
    rp.constraint = c;
    assert_int_equal(anvil_engine_submit(e, &rp, NULL, NULL, &id, err, sizeof err), ANVIL_OK);
    anvil_constraint_free(c);
    int32_t active = 1;
    for (int i = 0; i < 100 && active; i++) anvil_engine_step(e, &active);
    assert_int_equal(active, 0);
    struct anvil_engine_stats es;
    anvil_engine_get_stats(e, &es);
    assert_true(es.n_cons_tokens >= 1);
    anvil_engine_free(e);
    anvil_constraint_free(ct);
    anvil_constraint_free(other);
    anvil_model_free(m2);
    anvil_model_free(m);
}

/* ---------------------------------------------------------------------- */
/* the thought gate */

static void take_all(struct guide_gate *g, const anvil_token *t, int n) {
    for (int i = 0; i < n; i++) {
        anvil_token f = guide_gate_forced(g);
        assert_true(f < 0 || f == t[i]); /* the caller keeps what is forced */
        guide_gate_take(g, t[i]);
    }
}

static void test_gate(void **st) {
    (void)st;
    char err[128];
    struct guide_gate g;
    memset(&g, 0, sizeof(g));
    assert_true(guide_gate_active(&g)); /* zeroed: no gate */
    assert_int_equal(guide_gate_forced(&g), -1);
    const anvil_token end[2] = {7, 8}, pre[1] = {5};
    /* the model closes the thought itself, a false start on the way */
    assert_int_equal(guide_gate_init(&g, end, 2, true, -1, pre, 1, err, sizeof err), ANVIL_OK);
    assert_false(guide_gate_active(&g));
    take_all(&g, (const anvil_token[]){1, 2, 7, 3, 7, 7}, 6);
    assert_false(guide_gate_active(&g));
    assert_int_equal(guide_gate_forced(&g), -1);
    take_all(&g, (const anvil_token[]){8}, 1);
    assert_int_equal(guide_gate_forced(&g), 5);
    assert_false(guide_gate_active(&g));
    take_all(&g, pre, 1);
    assert_true(guide_gate_active(&g));
    take_all(&g, (const anvil_token[]){7, 8, 1}, 3); /* the answer: nothing moves */
    assert_true(guide_gate_active(&g));
    assert_int_equal(guide_gate_forced(&g), -1);
    guide_gate_free(&g);
    /* the budget: after 3 thought tokens, the rest of the end is forced */
    assert_int_equal(guide_gate_init(&g, end, 2, true, 3, pre, 1, err, sizeof err), ANVIL_OK);
    take_all(&g, (const anvil_token[]){1, 2, 7}, 3);
    assert_int_equal(guide_gate_forced(&g), 8);
    take_all(&g, (const anvil_token[]){8}, 1);
    assert_int_equal(guide_gate_forced(&g), 5);
    take_all(&g, pre, 1);
    assert_true(guide_gate_active(&g));
    guide_gate_free(&g);
    /* budget 3, no partial match: the whole end, then the prefix */
    assert_int_equal(guide_gate_init(&g, end, 2, true, 3, NULL, 0, err, sizeof err), ANVIL_OK);
    take_all(&g, (const anvil_token[]){1, 2, 3}, 3);
    assert_int_equal(guide_gate_forced(&g), 7);
    take_all(&g, end, 2);
    assert_true(guide_gate_active(&g));
    guide_gate_free(&g);
    /* budget 0: closed at once */
    assert_int_equal(guide_gate_init(&g, end, 2, true, 0, pre, 1, err, sizeof err), ANVIL_OK);
    assert_int_equal(guide_gate_forced(&g), 7);
    take_all(&g, (const anvil_token[]){7, 8, 5}, 3);
    assert_true(guide_gate_active(&g));
    guide_gate_free(&g);
    /* no thought: the prefix first */
    assert_int_equal(guide_gate_init(&g, end, 2, false, 0, pre, 1, err, sizeof err), ANVIL_OK);
    assert_int_equal(guide_gate_forced(&g), 5);
    take_all(&g, pre, 1);
    assert_true(guide_gate_active(&g));
    guide_gate_free(&g);
    /* refused */
    assert_int_equal(guide_gate_init(&g, NULL, 0, true, -1, NULL, 0, err, sizeof err),
                     ANVIL_ERR_INVALID);
    assert_non_null(strstr(err, "think_end"));
    anvil_token big[257] = {0};
    assert_int_equal(guide_gate_init(&g, big, 257, true, -1, NULL, 0, err, sizeof err),
                     ANVIL_ERR_INVALID);
    guide_gate_free(&g);
}

/* a thought the model opens itself (guide_gate_start): the choice at the
 * start of the output, with a start that shares its first token with the
 * prefix (as "<think>" and "<tool_call>" do in a byte-level vocabulary) */
static void test_gate_start(void **st) {
    (void)st;
    char err[128];
    struct guide_gate g;
    const anvil_token end[2] = {7, 8}, start[2] = {4, 6}, pre[2] = {4, 5};
    /* the model takes the start: a thought, then its end, then the prefix */
    assert_int_equal(guide_gate_init(&g, end, 2, false, -1, pre, 2, err, sizeof err), ANVIL_OK);
    assert_int_equal(guide_gate_start(&g, start, 2, err, sizeof err), ANVIL_OK);
    assert_true(guide_gate_deciding(&g));
    assert_int_equal(guide_gate_forced(&g), -1);
    assert_false(guide_gate_active(&g));
    assert_false(guide_gate_for_constraint(&g, 4));
    take_all(&g, (const anvil_token[]){4}, 1); /* both still possible */
    assert_true(guide_gate_deciding(&g));
    take_all(&g, (const anvil_token[]){6}, 1); /* the thought */
    assert_false(guide_gate_deciding(&g));
    assert_false(guide_gate_active(&g));
    assert_int_equal(guide_gate_forced(&g), -1);
    take_all(&g, (const anvil_token[]){1, 7, 8}, 3);
    assert_int_equal(guide_gate_forced(&g), 4);
    take_all(&g, pre, 2);
    assert_true(guide_gate_active(&g));
    guide_gate_free(&g);
    /* the model takes the prefix: the answer, the prefix's rest forced */
    assert_int_equal(guide_gate_init(&g, end, 2, false, -1, pre, 2, err, sizeof err), ANVIL_OK);
    assert_int_equal(guide_gate_start(&g, start, 2, err, sizeof err), ANVIL_OK);
    take_all(&g, (const anvil_token[]){4, 5}, 2);
    assert_false(guide_gate_deciding(&g));
    assert_true(guide_gate_active(&g));
    guide_gate_free(&g);
    /* no prefix: a token other than the start is the constraint's */
    assert_int_equal(guide_gate_init(&g, end, 2, false, 2, NULL, 0, err, sizeof err), ANVIL_OK);
    assert_int_equal(guide_gate_start(&g, start, 2, err, sizeof err), ANVIL_OK);
    assert_true(guide_gate_for_constraint(&g, 9));
    assert_false(guide_gate_for_constraint(&g, 4));
    take_all(&g, (const anvil_token[]){9}, 1);
    assert_false(guide_gate_deciding(&g));
    assert_true(guide_gate_active(&g));
    guide_gate_free(&g);
    /* no prefix, the start taken, budget 2: the end is forced after two */
    assert_int_equal(guide_gate_init(&g, end, 2, false, 2, NULL, 0, err, sizeof err), ANVIL_OK);
    assert_int_equal(guide_gate_start(&g, start, 2, err, sizeof err), ANVIL_OK);
    take_all(&g, (const anvil_token[]){4, 6, 1, 2}, 4);
    assert_int_equal(guide_gate_forced(&g), 7);
    take_all(&g, end, 2);
    assert_true(guide_gate_active(&g));
    guide_gate_free(&g);
    /* a gate already in a thought, or without an end: no choice */
    assert_int_equal(guide_gate_init(&g, end, 2, true, -1, NULL, 0, err, sizeof err), ANVIL_OK);
    assert_int_equal(guide_gate_start(&g, start, 2, err, sizeof err), ANVIL_OK);
    assert_false(guide_gate_deciding(&g));
    guide_gate_free(&g);
    assert_int_equal(guide_gate_init(&g, NULL, 0, false, -1, pre, 2, err, sizeof err), ANVIL_OK);
    assert_int_equal(guide_gate_start(&g, start, 2, err, sizeof err), ANVIL_OK);
    assert_false(guide_gate_deciding(&g));
    assert_int_equal(guide_gate_forced(&g), 4);
    anvil_token big[17] = {0};
    assert_int_equal(guide_gate_start(&g, big, 17, err, sizeof err), ANVIL_ERR_INVALID);
    guide_gate_free(&g);
}

struct gate_out {
    anvil_token tok[256];
    char text[4096];
    int32_t n, n_text;
    enum anvil_finish finish;
};

static void gate_cb(void *user, const struct anvil_event *ev) {
    struct gate_out *o = user;
    if (ev->type == ANVIL_EVENT_TOKEN && o->n < 256) o->tok[o->n++] = ev->token;
    if (ev->text_len > 0 && o->n_text + ev->text_len < (int32_t)sizeof(o->text)) {
        memcpy(o->text + o->n_text, ev->text, (size_t)ev->text_len);
        o->n_text += ev->text_len;
    }
    if (ev->type == ANVIL_EVENT_DONE) o->finish = ev->finish;
}

static void test_gate_engine(void **st) {
    (void)st;
    struct anvil_model *m = NULL;
    char err[256];
    if (anvil_model_load(model_path(), NULL, &m, err, sizeof err) != ANVIL_OK) {
        print_error("cannot load %s: %s\n", model_path(), err);
        fail();
    }
    const char *schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\"}},"
                         "\"required\":[\"n\"],\"additionalProperties\":false}";
    struct anvil_constraint *c = NULL;
    assert_int_equal(anvil_constraint_compile(m, ANVIL_CONSTRAINT_JSON_SCHEMA, schema,
                                              strlen(schema), NULL, &c, err, sizeof err),
                     ANVIL_OK);
    anvil_token end[16], pre[16], prompt[64];
    int32_t n_end = anvil_tokenize(m, " </think>", 9, end, 16, false, true);
    int32_t n_pre = anvil_tokenize(m, "ANSWER:", 7, pre, 16, false, true);
    const char *ptext = "<|im_start|>user\nThink about seven.<|im_end|>\n<|im_start|>assistant\n";
    int32_t n_prompt = anvil_tokenize(m, ptext, strlen(ptext), prompt, 64, false, true);
    assert_true(n_end > 0 && n_pre > 0 && n_prompt > 0);
    struct anvil_engine_params ep = anvil_engine_default_params();
    ep.n_threads = 1;
    ep.max_running = 2;
    ep.n_ctx = 256;
    struct anvil_engine *e = NULL;
    assert_int_equal(anvil_engine_init(m, &ep, &e, err, sizeof err), ANVIL_OK);
    for (int32_t budget = 0; budget <= 6; budget += 6) {
        struct gate_out o;
        memset(&o, 0, sizeof(o));
        struct anvil_request_params rp = {.prompt = prompt, .n_prompt = n_prompt,
                                          .max_tokens = 64,
                                          .sampling = anvil_sampler_default_params(),
                                          .constraint = c, .think_open = true,
                                          .think_end = end, .n_think_end = n_end,
                                          .think_budget = budget, .answer_prefix = pre,
                                          .n_answer_prefix = n_pre};
        rp.sampling.temperature = 0.0f;
        anvil_req_id id;
        assert_int_equal(anvil_engine_submit(e, &rp, gate_cb, &o, &id, err, sizeof err), ANVIL_OK);
        int32_t active = 1;
        for (int i = 0; i < 200 && active; i++) anvil_engine_step(e, &active);
        assert_int_equal(active, 0);
        /* a thought of at most `budget` tokens (it may end sooner, by the
         * model's own end tokens or an end of generation) */
        int32_t at = -1;
        for (int32_t i = 0; i + n_end + n_pre <= o.n && at < 0; i++)
            if (!memcmp(o.tok + i, end, (size_t)n_end * sizeof(*end)) &&
                !memcmp(o.tok + i + n_end, pre, (size_t)n_pre * sizeof(*pre)))
                at = i;
        if (budget == 0) assert_int_equal(at, 0);
        if (at < 0) { /* ended inside the thought */
            assert_true(o.n <= budget);
            continue;
        }
        assert_true(at <= budget);
        /* the answer after the prefix is the constraint's, whole */
        const char *ans = strstr(o.text, "ANSWER:");
        assert_non_null(ans);
        ans += 7;
        assert_int_equal(o.finish, ANVIL_FINISH_STOP);
        if (!anvil_constraint_matches(c, ans, strlen(ans))) {
            print_error("budget %d: answer '%s' does not match\n", budget, ans);
            fail();
        }
    }
    anvil_engine_free(e);
    anvil_constraint_free(c);
    anvil_model_free(m);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy_is_masked_argmax),
        cmocka_unit_test(test_greedy_penalized),
        cmocka_unit_test(test_sampled_is_masked_draw),
        cmocka_unit_test(test_cut),
        cmocka_unit_test(test_dead_end),
        cmocka_unit_test(test_public_api),
        cmocka_unit_test(test_gate),
        cmocka_unit_test(test_gate_start),
        cmocka_unit_test(test_gate_engine),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
