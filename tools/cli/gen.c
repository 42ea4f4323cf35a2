/*
 * gen.c - the generation loop shared by `anvil run` and `anvil chat`.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "gen.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void gen_opts_default(struct gen_opts *o) {
    memset(o, 0, sizeof(*o));
    o->n_predict = 128;
    o->sp = anvil_sampler_default_params();
    o->sp.temperature = 0.8f;
    o->sp.top_k = 40;
    o->sp.top_p = 0.95f;
    o->sp.min_p = 0.05f;
}

void gen_print_opts_help(FILE *f) {
    fprintf(f,
            "  -m, --model FILE      GGUF model (required)\n"
            "  -n, --n-predict N     tokens to generate (default 128, >= 1)\n"
            "  -t, --threads N       threads (default: all online CPUs)\n"
            "  -c, --ctx N           context length (default: min(train, 4096))\n"
            "      --temp T          temperature, 0 = greedy (default 0.8)\n"
            "      --top-k K         top-k, 0 = off (default 40)\n"
            "      --top-p P         top-p in (0, 1] (default 0.95)\n"
            "      --min-p P         min-p in [0, 1] (default 0.05)\n"
            "      --repeat-penalty R  repetition penalty, 1 = off (default 1)\n"
            "      --repeat-last-n N   penalty window (default 64)\n"
            "      --presence-penalty P, --frequency-penalty P   in [-2, 2]\n"
            "      --seed S          RNG seed (default: random, printed in the stats)\n"
            "      --system TEXT     system message (chat template)\n"
            "      --chat-template NAME  chat template family instead of the model's: chatml,\n"
            "                        llama3, gemma, mistral-v1, mistral-v3, mistral-v7, phi3\n"
            "      --ignore-eos      keep generating past end-of-generation tokens\n"
            "      --kernels K       auto, ref, avx2 or avx512\n"
            "  -v, --verbose         print the model, kernels and seed\n");
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
    } else if (!strcmp(a, "--kernels")) {
        VAL();
        o->kernels = v;
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
        o->verbose = true;
    } else if (!strcmp(a, "--ignore-eos")) {
        o->ignore_eos = true;
    } else {
        return 0;
    }
#undef VAL
    return 1;
}

int gen_open(const char *cmd, const struct gen_opts *o, struct gen_session *s) {
    memset(s, 0, sizeof(*s));
    char err[ANVIL_ERRMSG_CAP];
    if (!o->model_path) return cli_fail(cmd, "a model is required (-m FILE)");
    struct anvil_sampler_params sp = o->sp;
    if (!o->seed_set) sp.seed = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 32);
    if (anvil_sampler_params_check(&sp, err, sizeof(err)) != ANVIL_OK)
        return cli_fail(cmd, "%s", err);
    struct anvil_model_params mp = anvil_model_default_params();
    mp.kernels = o->kernels;
    anvil_status st = anvil_model_load(o->model_path, &mp, &s->model, err, sizeof(err));
    if (st != ANVIL_OK) return cli_fail(cmd, "%s", err);
    if (o->chat_template) {
        if (anvil_chat_template_set(s->model, o->chat_template) != ANVIL_OK) {
            gen_close(s);
            return cli_fail(cmd, "unknown chat template '%s' (known: %s)", o->chat_template,
                            anvil_chat_template_names());
        }
    } else if (o->chat && anvil_chat_template_source(s->model) == ANVIL_CHAT_FALLBACK) {
        fprintf(stderr,
                "anvil %s: warning: the model's chat template is missing or not one anvil "
                "recognises; using ChatML (choose another with --chat-template NAME: %s)\n",
                cmd, anvil_chat_template_names());
    }
    struct anvil_ctx_params cp = anvil_ctx_default_params();
    cp.n_ctx = o->n_ctx;
    cp.n_threads = o->n_threads;
    if ((st = anvil_ctx_init(s->model, &cp, &s->ctx, err, sizeof(err))) != ANVIL_OK) {
        gen_close(s);
        return cli_fail(cmd, "cannot create a context: %s", err);
    }
    if ((st = anvil_sampler_init(&sp, anvil_model_n_vocab(s->model), &s->smp)) != ANVIL_OK) {
        gen_close(s);
        return cli_fail(cmd, "cannot create the sampler: %s", anvil_status_str(st));
    }
    s->n_ctx = anvil_ctx_n_ctx(s->ctx);
    s->cached = malloc((size_t)s->n_ctx * sizeof(anvil_token));
    s->buf = malloc((size_t)s->n_ctx * sizeof(anvil_token));
    if (!s->cached || !s->buf) {
        gen_close(s);
        return cli_fail(cmd, "out of memory");
    }
    s->seed = sp.seed;
    if (o->verbose)
        fprintf(stderr, "anvil: %s, kernels %s, chat template %s, seed %llu\n",
                anvil_model_desc(s->model), anvil_model_kernels(s->model),
                anvil_chat_template_name(s->model), (unsigned long long)sp.seed);
    return 0;
}

void gen_close(struct gen_session *s) {
    anvil_sampler_free(s->smp);
    anvil_ctx_free(s->ctx);
    anvil_model_free(s->model);
    free(s->cached);
    free(s->buf);
    memset(s, 0, sizeof(*s));
}

/* Decode tokens [from, n) of s->buf for sequence 0 in n_batch chunks;
 * the last chunk asks for logits of its last row. */
static anvil_status prefill(struct gen_session *s, int from, int n) {
    enum { CHUNK = 512 };
    static int32_t pos[CHUNK], seq[CHUNK];
    for (int i = from; i < n; i += CHUNK) {
        int k = n - i < CHUNK ? n - i : CHUNK;
        for (int j = 0; j < k; j++) {
            pos[j] = i + j;
            seq[j] = 0;
        }
        struct anvil_batch b = {.n_tokens = k, .token = s->buf + i, .pos = pos, .seq_id = seq};
        anvil_status st = anvil_decode(s->ctx, &b);
        if (st != ANVIL_OK) return st;
    }
    return ANVIL_OK;
}

/* Generate after the n prompt tokens in s->buf. */
static int generate(const char *cmd, const struct gen_opts *o, struct gen_session *s, int n,
                    FILE *out, char **reply) {
    anvil_status st;
    if (n == 0) return cli_fail(cmd, "the prompt is empty after tokenization");
    if (n >= s->n_ctx)
        return cli_fail(cmd, "the prompt (%d tokens) leaves no room in the context (%d)", n,
                        s->n_ctx);

    /* reuse the longest cached prefix, but always recompute at least the
     * last prompt token so that we get its logits */
    int keep = 0;
    while (keep < s->n_cached && keep < n - 1 && s->cached[keep] == s->buf[keep]) keep++;
    if (anvil_seq_truncate(s->ctx, 0, keep) != ANVIL_OK) {
        /* sliding-window layers no longer hold the window at `keep`:
         * recompute the whole prompt */
        keep = 0;
        anvil_seq_truncate(s->ctx, 0, 0);
    }
    anvil_sampler_reset(s->smp);
    for (int i = 0; i < n; i++) anvil_sampler_accept(s->smp, s->buf[i]);

    double t0 = now_s();
    st = prefill(s, keep, n);
    if (st != ANVIL_OK) return cli_fail(cmd, "prefill failed: %s", anvil_ctx_errmsg(s->ctx));
    double t1 = now_s();
    memcpy(s->cached, s->buf, (size_t)n * sizeof(anvil_token));
    s->n_cached = n;

    struct anvil_detok dt;
    anvil_detok_reset(&dt);
    char piece[512];
    size_t rlen = 0, rcap = 256;
    char *r = reply ? malloc(rcap) : NULL;
    int n_gen = 0;
    const char *stop_reason = "length";
    while (n_gen < o->n_predict) {
        const float *logits = anvil_get_logits(s->ctx, 0);
        anvil_token t = anvil_sampler_sample(s->smp, logits, NULL);
        if (t < 0) {
            stop_reason = "no token";
            break;
        }
        if (!o->ignore_eos && anvil_token_is_eog(s->model, t)) {
            stop_reason = "eos";
            break;
        }
        anvil_sampler_accept(s->smp, t);
        n_gen++;
        int k = anvil_detok_push(s->model, &dt, t, piece, sizeof(piece));
        if (k > 0) {
            fwrite(piece, 1, (size_t)k, out);
            fflush(out);
            if (r) {
                while (rlen + (size_t)k + 1 > rcap) r = realloc(r, rcap *= 2);
                memcpy(r + rlen, piece, (size_t)k);
                rlen += (size_t)k;
            }
        }
        if (s->n_cached >= s->n_ctx) {
            stop_reason = "context full";
            break;
        }
        if (n_gen == o->n_predict) break;
        int32_t pos = s->n_cached, seq = 0;
        struct anvil_batch b = {.n_tokens = 1, .token = &t, .pos = &pos, .seq_id = &seq};
        if ((st = anvil_decode(s->ctx, &b)) != ANVIL_OK) {
            stop_reason = "context full";
            break;
        }
        s->cached[s->n_cached++] = t;
    }
    int k = anvil_detok_flush(&dt, piece, sizeof(piece));
    if (k > 0) {
        fwrite(piece, 1, (size_t)k, out);
        if (r) {
            while (rlen + (size_t)k + 1 > rcap) r = realloc(r, rcap *= 2);
            memcpy(r + rlen, piece, (size_t)k);
            rlen += (size_t)k;
        }
    }
    fflush(out);
    double t2 = now_s();
    int n_pre = n - keep;
    fprintf(stderr,
            "\n[prompt %d tok (%d reused), prefill %.1f tok/s | generated %d tok, decode %.1f "
            "tok/s | stop: %s]\n",
            n, keep, n_pre / (t1 - t0 > 0 ? t1 - t0 : 1e-9), n_gen,
            n_gen > 1 ? (n_gen - 1) / (t2 - t1 > 0 ? t2 - t1 : 1e-9) : 0.0, stop_reason);
    if (r) {
        r[rlen] = '\0';
        *reply = r;
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
    int n = anvil_chat_tokenize(s->model, msgs, n_msgs, true, s->buf, s->n_ctx);
    if (n == INT32_MIN) return cli_fail(cmd, "could not render the chat (out of memory?)");
    if (n < 0) return cli_fail(cmd, "the chat (%d tokens) is longer than the context (%d)", -n,
                               s->n_ctx);
    return generate(cmd, o, s, n, out, reply);
}
