/*
 * gen.c - the generation loop shared by `anvil run` and `anvil chat`: one
 * request at a time through the serving engine (stepped on this thread),
 * so the CLI and the server share one code path - stop handling, prefix
 * caching across chat turns, speculation and constraints.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "core/core.h"
#include "chat_render.h"
#include "gen.h"

void gen_opts_default(struct gen_opts *o) {
    memset(o, 0, sizeof(*o));
    o->n_predict = 128;
    o->sp = anvil_sampler_default_params();
}

void gen_print_opts_help(FILE *f) {
    const struct anvil_sampler_params d = anvil_sampler_default_params();
    fprintf(f,
            "  -m, --model FILE      GGUF model (required)\n"
            "  -n, --n-predict N     tokens to generate (default 128, >= 1)\n"
            "  -t, --threads N       threads (default: all online CPUs)\n"
            "  -c, --ctx N           context length (default: min(train, 4096))\n"
            "      --temp T          temperature, 0 = greedy (default %g)\n"
            "      --top-k K         top-k, 0 = off (default %d)\n"
            "      --top-p P         top-p in (0, 1] (default %g)\n"
            "      --min-p P         min-p in [0, 1] (default %g)\n"
            "      --repeat-penalty R  repetition penalty, 1 = off (default %g)\n"
            "      --repeat-last-n N   penalty window (default %d)\n"
            "      --presence-penalty P, --frequency-penalty P   in [-2, 2]\n"
            "      --seed S          RNG seed (default: random, printed in the stats)\n"
            "      --system TEXT     system message (chat template)\n"
            "      --chat-template NAME  chat template family instead of the model's: chatml,\n"
            "                        llama3, gemma, mistral-v1, mistral-v3, mistral-v7, phi3\n"
            "                        (default: the GGUF's own Jinja template)\n"
            "      --chat-template-file FILE  a Jinja chat template instead of the GGUF's\n"
            "      --print-prompt    print the rendered chat prompt and exit\n"
            "      --ignore-eos      keep generating past end-of-generation tokens\n"
            "      --json-schema FILE  the output is one JSON value valid under the schema\n"
            "      --grammar FILE    the output follows the GBNF grammar (start rule root)\n"
            "      --regex RE        the whole output matches the regular expression\n"
            "                        (one of the three; see docs/structured-output.md)\n"
            "      --spec ngram|draft  speculative decoding: prompt lookup, or --draft\n"
            "      --draft FILE      draft model (same vocabulary) for --spec draft\n"
            "      --spec-k K        most tokens proposed per step (1..%d, default %d)\n"
            "      --kernels K       auto, ref, avx2 or avx512\n"
            "  -v, --verbose         print the model, kernels and seed\n",
            (double)d.temperature, (int)d.top_k, (double)d.top_p, (double)d.min_p,
            (double)d.repeat_penalty, (int)d.repeat_last_n, ANVIL_SPEC_K_MAX, ANVIL_SPEC_K_DEFAULT);
}

int gen_parse_opt(const char *cmd, struct gen_opts *o, int argc, char **argv, int *i) {
    const char *a = argv[*i], *v;
    long iv;
    double fv;
#define VAL() \
    do { \
        if (!(v = cli_value(cmd, argc, argv, i))) return -1; \
    } while (0)
    if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
        VAL();
        o->model_path = v;
    } else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
        VAL();
        if (!cli_int(cmd, a, v, 1, 1 << 24, &iv)) return -1;
        o->n_predict = (int)iv;
    } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
        VAL();
        if (!cli_int(cmd, a, v, 1, 256, &iv)) return -1;
        o->n_threads = (int)iv;
    } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
        VAL();
        if (!cli_int(cmd, a, v, 16, 1 << 20, &iv)) return -1;
        o->n_ctx = (int)iv;
    } else if (!strcmp(a, "--temp")) {
        VAL();
        if (!cli_float(cmd, a, v, 0.0, 1e6, &fv)) return -1;
        o->sp.temperature = (float)fv;
    } else if (!strcmp(a, "--top-k")) {
        VAL();
        if (!cli_int(cmd, a, v, 0, 1 << 30, &iv)) return -1;
        o->sp.top_k = (int)iv;
    } else if (!strcmp(a, "--top-p")) {
        VAL();
        if (!cli_float(cmd, a, v, -1e30, 1e30, &fv)) return -1;
        if (!(fv > 0.0 && fv <= 1.0)) {
            cli_fail(cmd, "--top-p must be in (0, 1], got %g", fv);
            return -1;
        }
        o->sp.top_p = (float)fv;
    } else if (!strcmp(a, "--min-p")) {
        VAL();
        if (!cli_float(cmd, a, v, 0.0, 1.0, &fv)) return -1;
        o->sp.min_p = (float)fv;
    } else if (!strcmp(a, "--repeat-penalty")) {
        VAL();
        if (!cli_float(cmd, a, v, 1e-6, 1e6, &fv)) return -1;
        o->sp.repeat_penalty = (float)fv;
    } else if (!strcmp(a, "--repeat-last-n")) {
        VAL();
        if (!cli_int(cmd, a, v, 0, 1 << 20, &iv)) return -1;
        o->sp.repeat_last_n = (int)iv;
    } else if (!strcmp(a, "--presence-penalty")) {
        VAL();
        if (!cli_float(cmd, a, v, -2.0, 2.0, &fv)) return -1;
        o->sp.presence_penalty = (float)fv;
    } else if (!strcmp(a, "--frequency-penalty")) {
        VAL();
        if (!cli_float(cmd, a, v, -2.0, 2.0, &fv)) return -1;
        o->sp.frequency_penalty = (float)fv;
    } else if (!strcmp(a, "--seed")) {
        VAL();
        char *end;
        unsigned long long s = strtoull(v, &end, 10);
        if (!*v || *end || v[0] == '-') {
            cli_fail(cmd, "--seed expects a non-negative integer, got '%s'", v);
            return -1;
        }
        o->sp.seed = (uint64_t)s;
        o->seed_set = true;
    } else if (!strcmp(a, "--system")) {
        VAL();
        o->system = v;
    } else if (!strcmp(a, "--chat-template")) {
        VAL();
        o->chat_template = v;
    } else if (!strcmp(a, "--chat-template-file")) {
        VAL();
        o->chat_template_file = v;
    } else if (!strcmp(a, "--print-prompt")) {
        o->print_prompt = true;
    } else if (!strcmp(a, "--kernels")) {
        VAL();
        o->kernels = v;
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
        o->verbose = true;
    } else if (!strcmp(a, "--ignore-eos")) {
        o->ignore_eos = true;
    } else if (!strcmp(a, "--json-schema")) {
        VAL();
        o->json_schema_file = v;
    } else if (!strcmp(a, "--grammar")) {
        VAL();
        o->grammar_file = v;
    } else if (!strcmp(a, "--regex")) {
        VAL();
        o->regex = v;
    } else if (!strcmp(a, "--spec")) {
        VAL();
        if (!strcmp(v, "ngram")) o->spec = ANVIL_SPEC_NGRAM;
        else if (!strcmp(v, "draft")) o->spec = ANVIL_SPEC_DRAFT;
        else if (!strcmp(v, "off")) o->spec = ANVIL_SPEC_OFF;
        else {
            cli_fail(cmd, "--spec must be ngram, draft or off, got '%s'", v);
            return -1;
        }
    } else if (!strcmp(a, "--draft")) {
        VAL();
        o->draft_path = v;
    } else if (!strcmp(a, "--spec-k")) {
        VAL();
        if (!cli_int(cmd, a, v, 1, ANVIL_SPEC_K_MAX, &iv)) return -1;
        o->spec_k = (int)iv;
    } else {
        return 0;
    }
#undef VAL
    return 1;
}

/* --json-schema / --grammar / --regex: compile (exit 2 with the message
 * on error). */
static int open_constraint(const char *cmd, const struct gen_opts *o, struct gen_session *s) {
    int n_src = !!o->json_schema_file + !!o->grammar_file + !!o->regex;
    if (n_src == 0) return 0;
    if (n_src > 1) return cli_fail(cmd, "--json-schema, --grammar and --regex exclude each other");
    if (o->ignore_eos)
        return cli_fail(cmd, "--ignore-eos cannot be combined with a constraint (the constraint "
                        "decides where the output ends)");
    enum anvil_constraint_kind kind = o->regex          ? ANVIL_CONSTRAINT_REGEX
                                      : o->grammar_file ? ANVIL_CONSTRAINT_GBNF
                                                        : ANVIL_CONSTRAINT_JSON_SCHEMA;
    const char *path = o->grammar_file ? o->grammar_file : o->json_schema_file;
    const char *opt = o->regex ? "--regex" : o->grammar_file ? "--grammar" : "--json-schema";
    size_t n = 0;
    char *text = NULL;
    if (o->regex) {
        n = strlen(o->regex);
    } else if (!(text = cli_read_file(path, &n))) {
        return cli_fail(cmd, "%s: cannot read '%s'", opt, path);
    }
    char err[512];
    anvil_status st = anvil_constraint_compile(s->model, kind, o->regex ? o->regex : text, n, NULL,
                                               &s->constraint, err, sizeof(err));
    free(text);
    if (st == ANVIL_ERR_NOMEM) {
        fprintf(stderr, "anvil %s: %s: out of memory\n", cmd, opt);
        return 1;
    }
    if (st != ANVIL_OK) return cli_fail(cmd, "%s: %s", opt, err);
    return 0;
}

int gen_open(const char *cmd, const struct gen_opts *o, struct gen_session *s) {
    memset(s, 0, sizeof(*s));
    char err[ANVIL_ERRMSG_CAP];
    if (!o->model_path) return cli_fail(cmd, "a model is required (-m FILE)");
    struct anvil_sampler_params sp = o->sp;
    if (!o->seed_set) sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    if (anvil_sampler_params_check(&sp, err, sizeof(err)) != ANVIL_OK)
        return cli_fail(cmd, "%s", err);
    if (o->spec == ANVIL_SPEC_DRAFT && !o->draft_path)
        return cli_fail(cmd, "--spec draft needs --draft FILE");
    struct anvil_model_params mp = anvil_model_default_params();
    mp.kernels = o->kernels;
    anvil_status st = anvil_model_load(o->model_path, &mp, &s->model, err, sizeof(err));
    if (st != ANVIL_OK) return cli_fail(cmd, "%s", err);
    int rc;
    if ((o->chat || o->chat_template || o->chat_template_file) &&
        (rc = cli_chat_choose(cmd, s->model, o->chat_template, o->chat_template_file,
                              false)) != 0) {
        gen_close(s);
        return rc;
    }
    if (o->draft_path &&
        (st = anvil_model_load(o->draft_path, &mp, &s->draft, err, sizeof(err))) != ANVIL_OK) {
        gen_close(s);
        return cli_fail(cmd, "--draft: %s", err);
    }
    if ((rc = open_constraint(cmd, o, s)) != 0) {
        gen_close(s);
        return rc;
    }
    /* one request at a time: one sequence, the CLI's context default
     * (min(train, 4096)), prompt chunks as large as a step */
    struct anvil_engine_params ep = anvil_engine_default_params();
    int32_t train = anvil_model_n_ctx_train(s->model);
    ep.n_ctx = o->n_ctx ? o->n_ctx : train < 4096 ? train : 4096;
    ep.n_threads = o->n_threads;
    ep.max_running = 1;
    ep.max_queue = 1;
    ep.step_tokens = 512;
    ep.prefill_chunk = 512;
    ep.spec = o->spec;
    ep.spec_k = o->spec_k;
    ep.draft = o->spec == ANVIL_SPEC_DRAFT ? s->draft : NULL;
    if ((st = anvil_engine_init(s->model, &ep, &s->engine, err, sizeof(err))) != ANVIL_OK) {
        gen_close(s);
        if (st == ANVIL_ERR_INVALID || st == ANVIL_ERR_UNSUPPORTED || st == ANVIL_ERR_FORMAT)
            return cli_fail(cmd, "%s", err);
        fprintf(stderr, "anvil %s: cannot start the engine: %s\n", cmd, err);
        return 1;
    }
    s->n_ctx = anvil_engine_n_ctx(s->engine);
    s->buf = malloc((size_t)s->n_ctx * sizeof(anvil_token));
    if (!s->buf) {
        gen_close(s);
        fprintf(stderr, "anvil %s: out of memory\n", cmd);
        return 1;
    }
    s->seed = sp.seed;
    if (o->verbose)
        fprintf(stderr, "anvil: %s, kernels %s, chat template %s, seed %llu\n",
                anvil_model_desc(s->model), anvil_model_kernels(s->model),
                anvil_chat_template_name(s->model), (unsigned long long)sp.seed);
    return 0;
}

void gen_close(struct gen_session *s) {
    anvil_engine_free(s->engine);
    anvil_constraint_free(s->constraint);
    anvil_model_free(s->draft);
    anvil_model_free(s->model);
    free(s->buf);
    memset(s, 0, sizeof(*s));
}

/* What the engine's events leave for the stats line and the caller. */
struct run_state {
    FILE *out;
    char *reply; /* NULL when the caller wants none */
    size_t len, cap;
    bool oom;
    bool done;
    enum anvil_finish finish;
    int32_t n_gen, n_reused;
    double t_first, t_done;
    char error[256];
};

static void put_text(struct run_state *rs, const char *t, int32_t n) {
    if (n <= 0) return;
    fwrite(t, 1, (size_t)n, rs->out);
    fflush(rs->out);
    if (!rs->reply || rs->oom) return;
    if (rs->len + (size_t)n + 1 > rs->cap) {
        size_t cap = rs->cap;
        while (rs->len + (size_t)n + 1 > cap) cap *= 2;
        char *r = realloc(rs->reply, cap);
        if (!r) {
            rs->oom = true;
            return;
        }
        rs->reply = r;
        rs->cap = cap;
    }
    memcpy(rs->reply + rs->len, t, (size_t)n);
    rs->len += (size_t)n;
    rs->reply[rs->len] = '\0';
}

static void on_event(void *user, const struct anvil_event *ev) {
    struct run_state *rs = user;
    put_text(rs, ev->text, ev->text_len);
    if (ev->type == ANVIL_EVENT_TOKEN) {
        if (rs->t_first == 0) rs->t_first = time_now_s();
        return;
    }
    rs->done = true;
    rs->t_done = time_now_s();
    rs->finish = ev->finish;
    rs->n_gen = ev->n_gen;
    rs->n_reused = ev->n_reused;
    if (ev->error) snprintf(rs->error, sizeof(rs->error), "%s", ev->error);
}

/* Generate after the n prompt tokens in s->buf. */
static int generate(const char *cmd, const struct gen_opts *o, struct gen_session *s, int n,
                    FILE *out, char **reply) {
    if (n == 0) return cli_fail(cmd, "the prompt is empty after tokenization");
    if (n >= s->n_ctx)
        return cli_fail(cmd, "the prompt (%d tokens) leaves no room in the context (%d)", n,
                        s->n_ctx);
    /* the context bounds the answer, as it always did: "context full" */
    int room = s->n_ctx - n;
    int max_tokens = o->n_predict < room ? o->n_predict : room;
    struct anvil_request_params rp = {
        .prompt = s->buf,
        .n_prompt = n,
        .max_tokens = max_tokens,
        .sampling = o->sp,
        .ignore_eos = o->ignore_eos,
        .constraint = s->constraint,
    };
    rp.sampling.seed = s->seed;
    /* each turn of a chat draws on from where the seed leaves it */
    s->seed = s->seed * 6364136223846793005ull + 1442695040888963407ull;
    struct run_state rs = {.out = out};
    if (reply) {
        rs.cap = 256;
        rs.reply = malloc(rs.cap);
        if (rs.reply) rs.reply[0] = '\0';
    }
    char err[256];
    double t0 = time_now_s();
    anvil_status st = anvil_engine_submit(s->engine, &rp, on_event, &rs, NULL, err, sizeof(err));
    if (st != ANVIL_OK) {
        free(rs.reply);
        return cli_fail(cmd, "%s", err);
    }
    while (!rs.done) {
        st = anvil_engine_step(s->engine, NULL);
        if (st != ANVIL_OK && !rs.done) {
            fprintf(stderr, "anvil %s: %s\n", cmd, anvil_engine_errmsg(s->engine));
            break;
        }
    }
    fflush(out);
    const char *why = rs.finish == ANVIL_FINISH_STOP     ? "eos"
                      : rs.finish == ANVIL_FINISH_LENGTH ? (rs.n_gen < o->n_predict ? "context full"
                                                                                    : "length")
                      : rs.finish == ANVIL_FINISH_ERROR  ? "error"
                      : rs.finish == ANVIL_FINISH_CONSTRAINT ? "constraint dead end"
                                                         : "cancelled";
    if (rs.finish == ANVIL_FINISH_STOP && s->constraint) why = "eos (output complete)";
    double t1 = rs.t_first > 0 ? rs.t_first : rs.t_done;
    int n_pre = n - rs.n_reused;
    fprintf(stderr,
            "\n[prompt %d tok (%d reused), prefill %.1f tok/s | generated %d tok, decode %.1f "
            "tok/s | stop: %s]\n",
            n, rs.n_reused, n_pre / (t1 - t0 > 0 ? t1 - t0 : 1e-9), rs.n_gen,
            rs.n_gen > 1 ? (rs.n_gen - 1) / (rs.t_done - t1 > 0 ? rs.t_done - t1 : 1e-9) : 0.0,
            why);
    if (reply) *reply = rs.reply;
    else free(rs.reply);
    if (rs.finish == ANVIL_FINISH_CONSTRAINT) { /* the constraint asks what cannot be spelled */
        fprintf(stderr, "anvil %s: %s\n", cmd, rs.error);
        return 2;
    }
    if (rs.finish == ANVIL_FINISH_ERROR || !rs.done) {
        fprintf(stderr, "anvil %s: %s\n", cmd, rs.error[0] ? rs.error : "generation failed");
        return 1;
    }
    return 0;
}

int gen_run(const char *cmd, const struct gen_opts *o, struct gen_session *s, const char *text,
            FILE *out, char **reply) {
    size_t len = strlen(text);
    if (len == 0) return cli_fail(cmd, "the prompt is empty");
    int n = anvil_tokenize(s->model, text, len, s->buf, s->n_ctx, true, true);
    if (n == INT32_MIN) return cli_fail(cmd, "tokenization failed (out of memory?)");
    if (n < 0) return cli_fail(cmd, "the prompt (%d tokens) is longer than the context (%d)", -n,
                               s->n_ctx);
    return generate(cmd, o, s, n, out, reply);
}

int gen_run_chat(const char *cmd, const struct gen_opts *o, struct gen_session *s,
                 const struct anvil_chat_msg *msgs, size_t n_msgs, FILE *out, char **reply) {
    char err[ANVIL_ERRMSG_CAP];
    if (o->print_prompt) {
        char *p = cli_chat_prompt(s->model, msgs, n_msgs, err, sizeof err);
        if (!p) return cli_fail(cmd, "%s", err);
        fputs(p, out);
        free(p);
        return 0;
    }
    int n = cli_chat_tokenize(s->model, msgs, n_msgs, s->buf, s->n_ctx, err, sizeof err);
    if (n == INT32_MIN) return cli_fail(cmd, "%s", err);
    if (n < 0) return cli_fail(cmd, "the chat (%d tokens) is longer than the context (%d)", -n,
                               s->n_ctx);
    return generate(cmd, o, s, n, out, reply);
}
