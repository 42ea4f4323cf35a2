/*
 * bench_spec.c - `anvil bench -m MODEL --spec ngram|draft`: decode speed
 * with and without speculative decoding on prompt sets the repo ships
 * (bench/prompts/copy.jsonl: answers that copy their input; free.jsonl:
 * open-ended text), at one or more batch sizes, greedy, in one run.
 *
 * For each set and batch size B the same requests run twice through the
 * serving engine, first plainly and then speculating; B = 1 runs the
 * prompts one after the other, B > 1 runs B of them at once. Decode tok/s
 * is the generated tokens after each request's first one over the time
 * from the last request's first token to the end (prefill excluded).
 * Before it reports, the bench checks that both runs produced the same
 * tokens (greedy speculation is exact); a difference is an error and no
 * number is printed. Acceptance = accepted / proposed; tokens per step =
 * tokens produced per verification (accepted proposals + the model's
 * own next token).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "bench.h"
#include "bench_util.h"

#define CMD "bench --spec"
#define MAX_PROMPTS 64
#define MAX_GEN 1024

static void usage(FILE *f) {
    fprintf(f,
            "usage: anvil bench -m MODEL --spec ngram|draft [--draft MODEL] [--spec-k K]\n"
            "                   [--prompts copy,free|FILE.jsonl] [--batch 1,8] [-n N] [-t T] [--json]\n\n"
            "  --spec MODE      ngram (prompt lookup) or draft (needs --draft)\n"
            "  --draft MODEL    draft model with the same vocabulary\n"
            "  --spec-k K       most proposed tokens per step (default 8)\n"
            "  --prompts SETS   comma list of copy, free (bench/prompts/*.jsonl) or .jsonl files\n"
            "  --batch B[,B]    requests at once (default 1,8)\n"
            "  -n N             max tokens per request (default 192)\n"
            "  -t T             threads (default: online CPUs)\n"
            "  --json           one JSON object per line\n"
            "  --dump-tokens F  append each prompt's tokens and its greedy output to F, one\n"
            "                   JSON object per line (first batch size only; for\n"
            "                   bench/spec_ceiling.py)\n\n"
            "tokens/step: tokens per verification step (accepted + 1); tokens/pass: tokens\n"
            "per forward pass of a request, steps without a proposal included: the speedup\n"
            "speculation would give if verifying cost what decoding one token costs.\n");
}

struct req_out {
    anvil_token ids[MAX_GEN];
    int n;
    double t_first, t_end;
    int done;
};

static void on_event(void *user, const struct anvil_event *ev) {
    struct req_out *o = user;
    double now = bench_wall_s();
    if (ev->type == ANVIL_EVENT_TOKEN) {
        if (o->n == 0) o->t_first = now;
        if (o->n < MAX_GEN) o->ids[o->n++] = ev->token;
    } else {
        o->t_end = now;
        o->done = 1;
    }
}

/* Prompts of a set: "copy"/"free" name bench/prompts/<set>.jsonl next to
 * the binary's source tree (the working directory), else a path. */
static int load_prompts(const char *set, char **out, int cap) {
    char path[512];
    if (!strchr(set, '/') && !strstr(set, ".jsonl"))
        snprintf(path, sizeof(path), "bench/prompts/%s.jsonl", set);
    else
        snprintf(path, sizeof(path), "%s", set);
    FILE *f = fopen(path, "r");
    if (!f) {
        cli_fail(CMD, "cannot open %s (run from the repository, or give a path)", path);
        return -1;
    }
    int n = 0;
    static char line[1 << 16];
    while (n < cap && fgets(line, sizeof(line), f)) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *p = j ? cJSON_GetObjectItemCaseSensitive(j, "prompt") : NULL;
        if (!cJSON_IsString(p)) {
            cJSON_Delete(j);
            if (line[0] == '\n') continue;
            fclose(f);
            cli_fail(CMD, "%s: line %d is not {\"prompt\": \"...\"}", path, n + 1);
            return -1;
        }
        out[n++] = strdup(p->valuestring);
        cJSON_Delete(j);
    }
    fclose(f);
    if (n == 0) cli_fail(CMD, "%s holds no prompt", path);
    return n > 0 ? n : -1;
}

/* The prompt as a user message in the model's chat template, tokenized. */
static int chat_tokens(struct anvil_model *m, const char *text, anvil_token *out, int cap) {
    struct anvil_chat_msg msg = {"user", text};
    int32_t n = anvil_chat_tokenize(m, &msg, 1, true, out, cap);
    if (n > 0) return n;
    return anvil_tokenize(m, text, strlen(text), out, cap, true, false);
}

struct run_res {
    double tok_s;
    int64_t n_tok;
    int64_t n_passes; /* forward passes of requests past their first token */
    struct anvil_engine_stats st;
};

/* Run the prompts through e, batch at a time, greedy; outputs into outs. */
static int run_set(struct anvil_engine *e, struct anvil_model *m, char **prompts, int n_prompts,
                   int batch, int n_gen, enum anvil_spec spec, struct req_out *outs,
                   struct run_res *res) {
    static anvil_token toks[8192];
    double decode_s = 0.0;
    int64_t n_dec = 0, n_pass = 0;
    for (int first = 0; first < n_prompts; first += batch) {
        int last = first + batch < n_prompts ? first + batch : n_prompts;
        for (int i = first; i < last; i++) {
            memset(&outs[i], 0, sizeof(outs[i]));
            int n = chat_tokens(m, prompts[i], toks, (int)(sizeof(toks) / sizeof(toks[0])));
            if (n <= 0) return cli_fail(CMD, "prompt %d does not tokenize", i), 1;
            struct anvil_request_params rp = {.prompt = toks, .n_prompt = n, .max_tokens = n_gen,
                                              .sampling = anvil_sampler_default_params(),
                                              .spec = spec};
            rp.sampling.temperature = 0.0f;
            char err[256];
            anvil_req_id id;
            if (anvil_engine_submit(e, &rp, on_event, &outs[i], &id, err, sizeof(err)) != ANVIL_OK) {
                fprintf(stderr, "anvil %s: prompt %d: %s\n", CMD, i, err);
                return 1;
            }
        }
        for (;;) {
            int all = 1;
            for (int i = first; i < last; i++) all &= outs[i].done;
            if (all) break;
            /* requests decoding in this step (their prompts done): each
             * gets one forward pass, whatever it proposed */
            for (int i = first; i < last; i++) n_pass += outs[i].n > 0 && !outs[i].done;
            if (anvil_engine_step(e, NULL) != ANVIL_OK) return 1;
        }
        double t0 = 0.0, t1 = 0.0;
        for (int i = first; i < last; i++) {
            if (outs[i].t_first > t0) t0 = outs[i].t_first;
            if (outs[i].t_end > t1) t1 = outs[i].t_end;
            /* tokens after the slowest request's first: those decoded while
             * every request was past its prefill */
            n_dec += outs[i].n > 0 ? outs[i].n - 1 : 0;
        }
        decode_s += t1 - t0;
    }
    res->n_tok = n_dec;
    res->n_passes = n_pass;
    res->tok_s = decode_s > 0 ? (double)n_dec / decode_s : 0.0;
    anvil_engine_get_stats(e, &res->st);
    return 0;
}

/* --dump-tokens: {"set", "prompt": [ids], "output": [ids]} per prompt. */
static int dump_tokens(const char *path, const char *set, struct anvil_model *m, char **prompts,
                       int n_prompts, const struct req_out *outs) {
    static anvil_token toks[8192];
    FILE *f = fopen(path, "a");
    if (!f) return cli_fail(CMD, "cannot write %s", path), 1;
    for (int i = 0; i < n_prompts; i++) {
        int n = chat_tokens(m, prompts[i], toks, (int)(sizeof(toks) / sizeof(toks[0])));
        fprintf(f, "{\"set\": \"%s\", \"prompt\": [", set);
        for (int j = 0; j < n; j++) fprintf(f, "%s%d", j ? ", " : "", toks[j]);
        fprintf(f, "], \"output\": [");
        for (int j = 0; j < outs[i].n; j++) fprintf(f, "%s%d", j ? ", " : "", outs[i].ids[j]);
        fprintf(f, "]}\n");
    }
    return fclose(f) ? (cli_fail(CMD, "cannot write %s", path), 1) : 0;
}

int bench_spec(int argc, char **argv) {
    const char *model = NULL, *draft = NULL, *sets = "copy,free", *mode = NULL, *dump = NULL;
    long n_gen = 192, k = 0, threads = 0;
    int batches[8] = {1, 8}, n_batches = 2;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--spec")) {
            if (!(mode = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--draft")) {
            if (!(draft = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--dump-tokens")) {
            if (!(dump = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--prompts")) {
            if (!(sets = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--spec-k")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_int(CMD, a, v, 1, ANVIL_SPEC_K_MAX, &k))
                return 2;
        } else if (!strcmp(a, "-n")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_int(CMD, a, v, 2, MAX_GEN, &n_gen)) return 2;
        } else if (!strcmp(a, "-t")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_int(CMD, a, v, 1, 256, &threads)) return 2;
        } else if (!strcmp(a, "--batch")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return 2;
            if ((n_batches = cli_int_list(CMD, a, v, 1, MAX_PROMPTS, batches, 8)) < 0) return 2;
        } else {
            usage(stderr);
            return cli_fail(CMD, "unknown option '%s'", a);
        }
    }
    if (!model) return cli_fail(CMD, "a model is required (-m FILE)");
    enum anvil_spec spec = !mode ? ANVIL_SPEC_OFF
                           : !strcmp(mode, "ngram") ? ANVIL_SPEC_NGRAM
                           : !strcmp(mode, "draft") ? ANVIL_SPEC_DRAFT
                                                    : ANVIL_SPEC_DEFAULT;
    if (spec == ANVIL_SPEC_DEFAULT || spec == ANVIL_SPEC_OFF)
        return cli_fail(CMD, "--spec must be ngram or draft");
    if (spec == ANVIL_SPEC_DRAFT && !draft) return cli_fail(CMD, "--spec draft needs --draft MODEL");

    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model *m = NULL, *dm = NULL;
    if (anvil_model_load(model, NULL, &m, err, sizeof(err)) != ANVIL_OK) return cli_fail(CMD, "%s", err);
    if (draft && anvil_model_load(draft, NULL, &dm, err, sizeof(err)) != ANVIL_OK) {
        anvil_model_free(m);
        return cli_fail(CMD, "draft: %s", err);
    }
    int rc = 0;
    char *set_buf = strdup(sets), *save = NULL;
    static struct req_out plain[MAX_PROMPTS], fast[MAX_PROMPTS];
    if (!json)
        printf("| set | batch | spec | k | plain tok/s | spec tok/s | speedup | accepted | tokens/step | tokens/pass |\n"
               "|---|---|---|---|---|---|---|---|---|---|\n");
    for (char *set = strtok_r(set_buf, ",", &save); set && !rc; set = strtok_r(NULL, ",", &save)) {
        char *prompts[MAX_PROMPTS];
        int n_prompts = load_prompts(set, prompts, MAX_PROMPTS);
        if (n_prompts < 0) {
            rc = 2;
            break;
        }
        for (int bi = 0; bi < n_batches && !rc; bi++) {
            int batch = batches[bi];
            struct anvil_engine_params ep = anvil_engine_default_params();
            ep.n_threads = (int32_t)threads;
            ep.max_running = batch;
            ep.n_ctx = 4096;
            ep.spec_k = (int32_t)k;
            ep.draft = dm;
            struct anvil_engine *e0 = NULL, *e1 = NULL;
            struct run_res r0, r1;
            if (anvil_engine_init(m, &ep, &e0, err, sizeof(err)) != ANVIL_OK ||
                anvil_engine_init(m, &ep, &e1, err, sizeof(err)) != ANVIL_OK) {
                fprintf(stderr, "anvil %s: %s\n", CMD, err);
                anvil_engine_free(e0);
                rc = 1;
                break;
            }
            if (!json) fprintf(stderr, "anvil %s: %s, batch %d ...\n", CMD, set, batch);
            rc = run_set(e0, m, prompts, n_prompts, batch, (int)n_gen, ANVIL_SPEC_OFF, plain, &r0);
            if (!rc) rc = run_set(e1, m, prompts, n_prompts, batch, (int)n_gen, spec, fast, &r1);
            anvil_engine_free(e0);
            anvil_engine_free(e1);
            for (int i = 0; i < n_prompts && !rc; i++)
                if (plain[i].n != fast[i].n || memcmp(plain[i].ids, fast[i].ids, sizeof(anvil_token) * plain[i].n)) {
                    fprintf(stderr, "anvil %s: prompt %d: speculative output differs from plain greedy decoding: no number reported\n",
                            CMD, i);
                    rc = 1;
                }
            if (!rc && dump && bi == 0) rc = dump_tokens(dump, set, m, prompts, n_prompts, plain);
            if (rc) break;
            double acc = r1.st.n_spec_proposed ? (double)r1.st.n_spec_accepted / r1.st.n_spec_proposed : 0;
            double tps = r1.st.n_spec_verify ? (double)r1.st.n_spec_tokens / r1.st.n_spec_verify : 1.0;
            double speedup = r0.tok_s > 0 ? r1.tok_s / r0.tok_s : 0;
            /* tokens per forward pass: the speedup if a step verifying k
             * proposals cost what a one-token step costs (the proposals'
             * own ceiling; plain decoding makes one token per pass) */
            double tpp = r1.n_passes ? (double)r1.n_tok / (double)r1.n_passes : 1.0;
            if (json)
                printf("{\"bench\": \"spec\", \"set\": \"%s\", \"batch\": %d, \"spec\": \"%s\", \"k\": %ld, "
                       "\"n_gen\": %ld, \"threads\": %ld, \"plain_tok_s\": %.2f, \"spec_tok_s\": %.2f, "
                       "\"speedup\": %.3f, \"accepted\": %.4f, \"tokens_per_step\": %.3f, \"tokens_per_pass\": %.3f, "
                       "\"decoded_tokens\": %lld, \"commit\": \"%s\", \"cpu\": \"%s\"}\n",
                       set, batch, mode, k ? k : 8, n_gen, threads, r0.tok_s, r1.tok_s, speedup, acc,
                       tps, tpp, (long long)r0.n_tok, bench_commit(), bench_cpu_flags());
            else
                printf("| %s | %d | %s | %ld | %.1f | %.1f | %.2fx | %.1f%% | %.2f | %.2f |\n", set, batch,
                       mode, k ? k : 8, r0.tok_s, r1.tok_s, speedup, 100 * acc, tps, tpp);
            fflush(stdout);
        }
        for (int i = 0; i < n_prompts; i++) free(prompts[i]);
    }
    free(set_buf);
    anvil_model_free(dm);
    anvil_model_free(m);
    return rc;
}
