/*
 * sampling.c - the sampling fields of a generation request ->
 * struct anvil_sampler_params: OpenAI's (temperature, top_p, seed, the
 * penalties, logit_bias), the common extensions (top_k, min_p) and
 * llama-server's (repeat_penalty, repeat_last_n, typical_p, top_n_sigma,
 * min_keep, dry_*, xtc_*, mirostat*, samplers, n_probs, cache_prompt).
 *
 * Rules: types and ranges through fields.c's validators (null = absent,
 * no coercion); llama-server's "-1 = the context size" for the two
 * windows; llama-server's sampler names and aliases; logit_bias as
 * OpenAI's object (token ids as string keys) or llama-server's array of
 * [id or "text", bias] pairs, where a bias of false bans the token and a
 * text gets the bias on each of its tokens. docs/sampling.md has the
 * user's view. Defaults: OpenAI's temperature 1 and top_p 1, llama.cpp's
 * for the rest (every llama-server sampler off unless asked for).
 */
#include <ctype.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "server/srv_int.h"

#define MAX_WINDOW (1 << 20) /* the sampler's bound on both windows */

static uint64_t random_seed(void) {
    static _Atomic uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    uint64_t k = atomic_fetch_add(&counter, 1);
    uint64_t mixed = t ^ core_splitmix64(&k);
    return core_splitmix64(&mixed);
}

/* ---------------------------------------------------------------------- */
/* samplers: the order */

struct stage_name {
    const char *name;
    int stage; /* 0 = accepted and ignored */
};

static const struct stage_name stage_names[] = {
    {"penalties", ANVIL_STAGE_PENALTIES},     {"dry", ANVIL_STAGE_DRY},
    {"top_n_sigma", ANVIL_STAGE_TOP_N_SIGMA}, {"top-n-sigma", ANVIL_STAGE_TOP_N_SIGMA},
    {"topnsigma", ANVIL_STAGE_TOP_N_SIGMA},   {"top_k", ANVIL_STAGE_TOP_K},
    {"top-k", ANVIL_STAGE_TOP_K},             {"topk", ANVIL_STAGE_TOP_K},
    {"typ_p", ANVIL_STAGE_TYPICAL},           {"typ-p", ANVIL_STAGE_TYPICAL},
    {"typp", ANVIL_STAGE_TYPICAL},            {"typ", ANVIL_STAGE_TYPICAL},
    {"typical_p", ANVIL_STAGE_TYPICAL},       {"typical", ANVIL_STAGE_TYPICAL},
    {"top_p", ANVIL_STAGE_TOP_P},             {"top-p", ANVIL_STAGE_TOP_P},
    {"topp", ANVIL_STAGE_TOP_P},              {"nucleus", ANVIL_STAGE_TOP_P},
    {"min_p", ANVIL_STAGE_MIN_P},             {"min-p", ANVIL_STAGE_MIN_P},
    {"minp", ANVIL_STAGE_MIN_P},              {"xtc", ANVIL_STAGE_XTC},
    {"temperature", ANVIL_STAGE_TEMPERATURE}, {"temp", ANVIL_STAGE_TEMPERATURE},
    {"infill", 0},
};

static const char stage_chars[] = "edskyp" "mxti"; /* llama-server's one-letter names */
static const int stage_of_char[] = {
    ANVIL_STAGE_PENALTIES, ANVIL_STAGE_DRY,   ANVIL_STAGE_TOP_N_SIGMA, ANVIL_STAGE_TOP_K,
    ANVIL_STAGE_TYPICAL,   ANVIL_STAGE_TOP_P, ANVIL_STAGE_MIN_P,       ANVIL_STAGE_XTC,
    ANVIL_STAGE_TEMPERATURE, 0,
};

static bool add_stage(struct anvil_sampler_params *s, int stage, struct srv_err *e) {
    if (stage == 0) return true;
    if (s->n_order >= ANVIL_SAMPLER_MAX_ORDER)
        return srv_bad(e, "samplers", "'samplers' holds at most %d entries",
                       ANVIL_SAMPLER_MAX_ORDER);
    s->order[s->n_order++] = (uint8_t)stage;
    return true;
}

static bool parse_order(const cJSON *root, struct anvil_sampler_params *s, struct srv_err *e) {
    const cJSON *v = srv_field(root, "samplers");
    if (!v) return true;
    if (cJSON_IsString(v)) { /* "edkypmxt": one letter a stage */
        for (const char *c = v->valuestring; *c; c++) {
            const char *at = strchr(stage_chars, tolower((unsigned char)*c));
            if (!at)
                return srv_bad(e, "samplers", "'samplers': unknown sampler letter '%c' (known: "
                               "%s)", *c, stage_chars);
            if (!add_stage(s, stage_of_char[at - stage_chars], e)) return false;
        }
    } else if (cJSON_IsArray(v)) {
        for (const cJSON *c = v->child; c; c = c->next) {
            if (!cJSON_IsString(c))
                return srv_bad(e, "samplers", "'samplers' must be an array of strings, got %s "
                               "in it", srv_type_name(c));
            char low[32];
            size_t n = strlen(c->valuestring);
            if (n >= sizeof low) n = sizeof low - 1;
            for (size_t i = 0; i < n; i++) low[i] = (char)tolower((unsigned char)c->valuestring[i]);
            low[n] = 0;
            int found = -1;
            for (size_t i = 0; i < sizeof stage_names / sizeof stage_names[0]; i++)
                if (!strcmp(stage_names[i].name, low)) found = stage_names[i].stage;
            if (found < 0)
                return srv_bad(e, "samplers", "'samplers': unknown sampler '%.40s' (known: "
                               "penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, "
                               "temperature)", c->valuestring);
            if (!add_stage(s, found, e)) return false;
        }
    } else {
        return srv_bad(e, "samplers", "'samplers' must be an array of strings or a string, got %s",
                       srv_type_name(v));
    }
    if (s->n_order == 0 && !(cJSON_IsArray(v) ? v->child != NULL : v->valuestring[0] != 0))
        return srv_bad(e, "samplers", "'samplers' must not be empty");
    return true;
}

/* ---------------------------------------------------------------------- */
/* logit_bias */

static bool add_bias(struct anvil_sampler_params *s, anvil_token id, float bias,
                     struct srv_err *e) {
    if (s->n_bias >= ANVIL_SAMPLER_MAX_BIAS)
        return srv_bad(e, "logit_bias", "'logit_bias' holds at most %d tokens",
                       ANVIL_SAMPLER_MAX_BIAS);
    s->bias[s->n_bias].id = id;
    s->bias[s->n_bias].bias = bias;
    s->n_bias++;
    return true;
}

/* bias value: a number in [-100, 100], or false (the token is banned) */
static bool bias_value(const cJSON *v, float *out, struct srv_err *e) {
    if (cJSON_IsFalse(v)) {
        *out = -INFINITY;
        return true;
    }
    if (!cJSON_IsNumber(v))
        return srv_bad(e, "logit_bias", "a 'logit_bias' value must be a number in [-100, 100] or "
                       "false, got %s", srv_type_name(v));
    double d = v->valuedouble;
    if (!isfinite(d) || d < -100.0 || d > 100.0)
        return srv_bad(e, "logit_bias", "a 'logit_bias' value must be in [-100, 100], got %g", d);
    *out = (float)d;
    return true;
}

static bool bias_id(const struct srv_limits *lim, long long id, struct srv_err *e) {
    if (id < 0 || id >= lim->n_vocab)
        return srv_bad(e, "logit_bias", "'logit_bias': token id %lld is outside the vocabulary "
                       "[0, %d)", id, (int)lim->n_vocab);
    return true;
}

/* every token of text gets the bias */
static bool bias_text(const struct srv_limits *lim, const char *text, float bias,
                      struct anvil_sampler_params *s, struct srv_err *e) {
    if (!lim->model)
        return srv_bad(e, "logit_bias", "'logit_bias' with text needs a tokenizer");
    anvil_token toks[64];
    int32_t n = anvil_tokenize(lim->model, text, strlen(text), toks, 64, false, false);
    if (n < 0)
        return srv_bad(e, "logit_bias", "a 'logit_bias' text must be at most 64 tokens");
    for (int32_t i = 0; i < n; i++)
        if (!add_bias(s, toks[i], bias, e)) return false;
    return true;
}

static bool parse_logit_bias(const struct srv_limits *lim, const cJSON *root,
                             struct anvil_sampler_params *s, struct srv_err *e) {
    const cJSON *v = srv_field(root, "logit_bias");
    if (!v) return true;
    if (cJSON_IsObject(v)) {
        for (const cJSON *c = v->child; c; c = c->next) {
            float b;
            if (!bias_value(c, &b, e)) return false;
            const char *k = c->string;
            char *end = NULL;
            long long id = strtoll(k, &end, 10);
            if (*k && end && !*end && (isdigit((unsigned char)k[0]) || k[0] == '-')) {
                if (!bias_id(lim, id, e) || !add_bias(s, (anvil_token)id, b, e)) return false;
            } else if (!bias_text(lim, k, b, s, e)) {
                return false;
            }
        }
        return true;
    }
    if (!cJSON_IsArray(v))
        return srv_bad(e, "logit_bias", "'logit_bias' must be an object or an array of [token, "
                       "bias] pairs, got %s", srv_type_name(v));
    for (const cJSON *c = v->child; c; c = c->next) {
        if (!cJSON_IsArray(c) || cJSON_GetArraySize(c) != 2)
            return srv_bad(e, "logit_bias", "'logit_bias' array entries must be [token, bias] "
                           "pairs");
        const cJSON *t = c->child, *bv = t->next;
        float b;
        if (!bias_value(bv, &b, e)) return false;
        if (cJSON_IsNumber(t)) {
            double d = t->valuedouble;
            if (!isfinite(d) || d != floor(d))
                return srv_bad(e, "logit_bias", "'logit_bias': a token id must be an integer");
            if (!bias_id(lim, (long long)d, e) || !add_bias(s, (anvil_token)d, b, e)) return false;
        } else if (cJSON_IsString(t)) {
            if (!bias_text(lim, t->valuestring, b, s, e)) return false;
        } else {
            return srv_bad(e, "logit_bias", "'logit_bias': a token must be an id or a string, got "
                           "%s", srv_type_name(t));
        }
    }
    return true;
}

/* ---------------------------------------------------------------------- */
/* DRY's sequence breakers */

static bool add_breaker(const struct srv_limits *lim, const char *text,
                        struct anvil_sampler_params *s, struct srv_err *e) {
    if (!text[0])
        return srv_bad(e, "dry_sequence_breakers", "'dry_sequence_breakers' strings must not be "
                       "empty");
    if (s->n_dry_breakers >= ANVIL_SAMPLER_MAX_BREAKERS)
        return srv_bad(e, "dry_sequence_breakers", "'dry_sequence_breakers' holds at most %d "
                       "strings", ANVIL_SAMPLER_MAX_BREAKERS);
    if (!lim->model) return true; /* no tokenizer (parser tests): nothing to match */
    int32_t i = s->n_dry_breakers;
    int32_t n = anvil_tokenize(lim->model, text, strlen(text), s->dry_breakers[i],
                               ANVIL_SAMPLER_MAX_BREAKER_LEN, false, false);
    if (n < 0)
        return srv_bad(e, "dry_sequence_breakers", "a DRY sequence breaker must be at most %d "
                       "tokens", ANVIL_SAMPLER_MAX_BREAKER_LEN);
    if (n == 0) return true;
    s->dry_breaker_len[i] = n;
    s->n_dry_breakers++;
    return true;
}

static bool parse_breakers(const struct srv_limits *lim, const cJSON *root,
                           struct anvil_sampler_params *s, struct srv_err *e) {
    const cJSON *v = srv_field(root, "dry_sequence_breakers");
    if (!v) {
        if (s->dry_multiplier <= 0.0f) return true;
        static const char *const def[] = {"\n", ":", "\"", "*"}; /* llama.cpp's */
        for (int i = 0; i < 4; i++)
            if (!add_breaker(lim, def[i], s, e)) return false;
        return true;
    }
    if (!cJSON_IsArray(v) || !v->child)
        return srv_bad(e, "dry_sequence_breakers", "'dry_sequence_breakers' must be a non-empty "
                       "array of strings, got %s", srv_type_name(v));
    for (const cJSON *c = v->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return srv_bad(e, "dry_sequence_breakers", "'dry_sequence_breakers' must be an array "
                           "of strings, got %s in it", srv_type_name(c));
        if (s->dry_multiplier > 0.0f && !add_breaker(lim, c->valuestring, s, e)) return false;
    }
    return true;
}

/* ---------------------------------------------------------------------- */
/* the fields */

/* an integer window where -1 means the context size */
static bool get_window(const struct srv_limits *lim, const cJSON *root, const char *key,
                       int32_t *out, struct srv_err *e) {
    long long v = 0;
    bool present = false;
    if (!srv_get_int(root, key, -1, MAX_WINDOW, &v, &present, e)) return false;
    if (!present) return true;
    if (v == -1) v = lim->n_ctx > 0 ? lim->n_ctx : MAX_WINDOW;
    *out = (int32_t)(v < MAX_WINDOW ? v : MAX_WINDOW);
    return true;
}

bool srv_parse_sampling(const struct srv_limits *lim, const cJSON *root, struct srv_req *r,
                        struct srv_err *e) {
    struct anvil_sampler_params *s = &r->sampling;
    *s = anvil_sampler_default_params();
    /* OpenAI's defaults for its own fields; every extra sampler off */
    s->temperature = 1.0f;
    s->top_k = 0;
    s->top_p = 1.0f;
    s->min_p = 0.0f;
    s->repeat_penalty = 1.0f;
    s->repeat_last_n = 64;
    s->dry_last_n = lim->n_ctx > 0 && lim->n_ctx < MAX_WINDOW ? lim->n_ctx : MAX_WINDOW;
    if (!srv_get_num(root, "temperature", 0.0, 2.0, &s->temperature, e)) return false;
    if (!srv_get_num(root, "top_p", 0.0, 1.0, &s->top_p, e)) return false;
    if (!srv_get_num(root, "min_p", 0.0, 1.0, &s->min_p, e)) return false;
    if (!srv_get_num(root, "presence_penalty", -2.0, 2.0, &s->presence_penalty, e)) return false;
    if (!srv_get_num(root, "frequency_penalty", -2.0, 2.0, &s->frequency_penalty, e)) return false;
    long long v = 0;
    bool present = false;
    if (!srv_get_int(root, "top_k", 0, lim->n_vocab, &v, &present, e)) return false;
    if (present) s->top_k = (int32_t)v;
    if (s->top_p == 0.0f) {
        /* OpenAI accepts top_p 0 (keep only the most likely token); the
         * sampler wants (0, 1], and top_k 1 is the same distribution */
        s->top_p = 1.0f;
        s->top_k = 1;
    }
    /* +-(2^53 - 1): every integer in it is exact in a double (cJSON's
     * numbers), and one past it cannot pass for it: 2^53 + 1 reads as
     * 2^53, which is out of range (a bound of 2^53 would let 2^53 + 1
     * through) */
    if (!srv_get_int(root, "seed", -9007199254740991.0, 9007199254740991.0, &v, &present, e))
        return false;
    s->seed = present ? (uint64_t)v : lim->default_seed ? lim->default_seed : random_seed();

    /* llama-server's */
    if (!srv_get_num(root, "repeat_penalty", 0.0, 100.0, &s->repeat_penalty, e)) return false;
    if (!get_window(lim, root, "repeat_last_n", &s->repeat_last_n, e)) return false;
    float typ = 1.0f;
    if (!srv_get_num(root, "typical_p", 0.0, 1.0, &typ, e)) return false;
    s->typical_p = typ < 1.0f ? typ : 0.0f;
    float sigma = -1.0f;
    if (!srv_get_num(root, "top_n_sigma", -1e6, 1e6, &sigma, e)) return false;
    s->top_n_sigma = sigma > 0.0f ? sigma : 0.0f; /* llama-server: <= 0 is off */
    if (!srv_get_int(root, "min_keep", 0, lim->n_vocab, &v, &present, e)) return false;
    if (present) s->min_keep = (int32_t)v;
    if (!srv_get_num(root, "dry_multiplier", 0.0, 1e6, &s->dry_multiplier, e)) return false;
    if (!srv_get_num(root, "dry_base", 0.0, 1e6, &s->dry_base, e)) return false;
    if (!srv_get_int(root, "dry_allowed_length", 0, MAX_WINDOW, &v, &present, e)) return false;
    if (present) s->dry_allowed_length = (int32_t)v;
    if (!get_window(lim, root, "dry_penalty_last_n", &s->dry_last_n, e)) return false;
    if (!parse_breakers(lim, root, s, e)) return false;
    if (!srv_get_num(root, "xtc_probability", 0.0, 1.0, &s->xtc_probability, e)) return false;
    if (!srv_get_num(root, "xtc_threshold", 0.0, 1.0, &s->xtc_threshold, e)) return false;
    if (!srv_get_int(root, "mirostat", 0, 2, &v, &present, e)) return false;
    if (present) s->mirostat = (int32_t)v;
    if (!srv_get_num(root, "mirostat_tau", 0.0, 1e6, &s->mirostat_tau, e)) return false;
    if (!srv_get_num(root, "mirostat_eta", 0.0, 1e6, &s->mirostat_eta, e)) return false;
    if (!parse_order(root, s, e)) return false;
    if (!parse_logit_bias(lim, root, s, e)) return false;
    /* cache_prompt: anvil always reuses the prefix cache; the type is checked */
    bool cp = true;
    if (!srv_get_bool(root, "cache_prompt", &cp, NULL, e)) return false;
    /* n_probs (llama-server's /completion): the top alternatives, as
     * top_logprobs when the request did not ask for logprobs itself */
    if (!srv_get_int(root, "n_probs", 0, 1 << 20, &v, &present, e)) return false;
    if (present && v > 0 && !r->logprobs) {
        r->logprobs = true;
        r->top_logprobs = (int32_t)(v < ANVIL_MAX_TOP_LOGPROBS ? v : ANVIL_MAX_TOP_LOGPROBS);
    }
    char msg[160];
    if (anvil_sampler_params_check(s, msg, sizeof(msg)) != ANVIL_OK)
        return srv_bad(e, NULL, "%s", msg);
    return true;
}
