/*
 * bench_constrained.c - `anvil bench -m MODEL --constrained`: what structured
 * output costs. For a small, a medium (about 20 properties, nested) and a
 * large (hundreds of enum values, recursion) JSON Schema of
 * tests/data/constrain/schemas, in one run:
 *
 *   index      the per-model precomputation (the vocabulary index an engine
 *              builds on its first constrained request), thread CPU time;
 *   compile    anvil_constraint_compile of each schema, thread CPU time;
 *   decode     greedy decode tok/s through the serving engine, constrained
 *              against free, at each batch size (default 1 and 32).
 *
 * How decode is made comparable: the constrained requests run first and
 * end where their output is complete; the free requests then run with the
 * same prompts, ignore_eos and max_tokens = the length each constrained
 * request reached. Both runs therefore decode the same number of tokens
 * per request with the same batch at every step, and the only difference
 * left is the constraint's work (testing the argmax, building masks, the
 * full logits a refused argmax needs). Decode tok/s counts the tokens
 * produced after the last request's first token, over the time from then
 * to the last DONE (prefill excluded; the prompt is served from the prefix
 * cache after a warmup request). Batch B submits B requests at once;
 * batch 1 runs --reps requests one after another.
 *
 * Every constrained output that ends with STOP is checked with
 * anvil_constraint_matches; one that does not match is an error and the
 * run prints no number for it.
 *
 * --calls FAMILY[,...] does the same for tool calls inside a family's own
 * format (issue 36): the two tools of bench/bench_toolfmt.py under
 * tool_choice "required", compiled as the server compiles them
 * (srv_tools_calls: an ANVIL_CONSTRAINT_CALLS document), the prompt a
 * chat turn asking for them followed by the format's opening marker (the
 * text the server forces before the constraint starts).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "bench.h"
#include "bench_util.h"
#include "engine/guide.h"
#include "server/srv_int.h"

#define CMD "bench --constrained"
#define MAX_BATCH 64
#define MAX_GEN 1024
#define MAX_ROUNDS 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: anvil bench -m MODEL --constrained [--schemas LIST | --calls LIST] [--batch 1,32]\n"
            "                   [-n N] [-r REPS] [--rounds R] [-t T] [--data DIR] [--json]\n\n"
            "  --schemas LIST   comma list of small, medium, large or schema files\n"
            "                   (default small,medium,large)\n"
            "  --calls LIST     tool calls inside these families' formats instead (hermes,\n"
            "                   llama3, harmony, deepseek_r1, functionary)\n"
            "  --batch B[,B]    requests at once (default 1,32)\n"
            "  -n N             max tokens per request (default 256)\n"
            "  -r REPS          batch 1: requests one after another; also the\n"
            "                   compile and index repetitions (default 3)\n"
            "  --rounds R       constrained and free runs, in turn, R times: the\n"
            "                   ratio is the median of the rounds' (default 3)\n"
            "  -t T             threads (default: online CPUs)\n"
            "  --data DIR       schema directory (default tests/data/constrain/schemas)\n"
            "  --json           one JSON object per line\n");
}

/* the three sizes the issue names, as files of tests/data/constrain/schemas */
static const char *const NAMED[][2] = {
    {"small", "sentiment.json"},
    {"medium", "medium_nested.json"},
    {"large", "large_enum_recursive.json"},
};

struct req_out {
    double t_tok[MAX_GEN]; /* wall time of each token */
    int n;
    double t_end;
    int done;
    enum anvil_finish finish;
    char *text;
    size_t len, cap;
};

static void on_event(void *user, const struct anvil_event *ev) {
    struct req_out *o = user;
    double now = bench_wall_s();
    if (ev->type == ANVIL_EVENT_TOKEN && o->n < MAX_GEN) o->t_tok[o->n++] = now;
    if (ev->text_len > 0) {
        if (o->len + (size_t)ev->text_len + 1 > o->cap) {
            size_t cap = (o->len + (size_t)ev->text_len + 1) * 2;
            char *p = realloc(o->text, cap);
            if (!p) return; /* the check below then fails on a short text */
            o->text = p;
            o->cap = cap;
        }
        memcpy(o->text + o->len, ev->text, (size_t)ev->text_len);
        o->len += (size_t)ev->text_len;
        o->text[o->len] = '\0';
    }
    if (ev->type == ANVIL_EVENT_DONE) {
        o->t_end = now;
        o->finish = ev->finish;
        o->done = 1;
    }
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        if (len >= 0 && fseek(f, 0, SEEK_SET) == 0 && (b = malloc((size_t)len + 1))) {
            if (fread(b, 1, (size_t)len, f) != (size_t)len) {
                free(b);
                b = NULL;
            } else {
                b[len] = '\0';
                *n = (size_t)len;
            }
        }
    }
    fclose(f);
    return b;
}

struct dec_res {
    double tok_s;
    int64_t n_tok;
};

/* One batch-size run: groups of `batch` requests (n_req in all), greedy,
 * each with max_tokens lim[i]; constrained with c, else free with
 * ignore_eos. Fills outs; decode tok/s into res. */
static int run_decode(struct anvil_engine *e, const anvil_token *prompt, int n_prompt, int n_req,
                      int batch, const int *lim, struct anvil_constraint *c, struct req_out *outs,
                      struct dec_res *res) {
    double secs = 0.0;
    int64_t n_dec = 0;
    for (int first = 0; first < n_req; first += batch) {
        int last = first + batch < n_req ? first + batch : n_req;
        for (int i = first; i < last; i++) {
            free(outs[i].text);
            memset(&outs[i], 0, sizeof(outs[i]));
            struct anvil_request_params rp = {.prompt = prompt, .n_prompt = n_prompt,
                                              .max_tokens = lim[i],
                                              .sampling = anvil_sampler_default_params(),
                                              .ignore_eos = c == NULL, .constraint = c};
            rp.sampling.temperature = 0.0f;
            char err[256];
            if (anvil_engine_submit(e, &rp, on_event, &outs[i], NULL, err, sizeof(err)) != ANVIL_OK) {
                fprintf(stderr, "anvil %s: %s\n", CMD, err);
                return 1;
            }
        }
        for (;;) {
            int all = 1;
            for (int i = first; i < last; i++) all &= outs[i].done;
            if (all) break;
            if (anvil_engine_step(e, NULL) != ANVIL_OK) {
                fprintf(stderr, "anvil %s: %s\n", CMD, anvil_engine_errmsg(e));
                return 1;
            }
        }
        double t0 = 0.0, t1 = 0.0;
        for (int i = first; i < last; i++) {
            if (outs[i].n && outs[i].t_tok[0] > t0) t0 = outs[i].t_tok[0];
            if (outs[i].t_end > t1) t1 = outs[i].t_end;
        }
        /* tokens produced while every request of the group was decoding */
        for (int i = first; i < last; i++)
            for (int k = 0; k < outs[i].n; k++) n_dec += outs[i].t_tok[k] > t0;
        secs += t1 - t0;
    }
    res->n_tok = n_dec;
    res->tok_s = secs > 0 ? (double)n_dec / secs : 0.0;
    return 0;
}

/* Median of the thread CPU seconds of reps runs of the index build. */
static int time_index(const struct anvil_model *m, int reps, double *out) {
    double t[16];
    for (int r = 0; r < reps; r++) {
        struct guide_index ix;
        guide_index_init(&ix);
        const struct cn_vocab *v = NULL;
        char err[256];
        double t0 = bench_thread_cpu_s();
        anvil_status st = guide_index_get(&ix, m, &v, err, sizeof(err));
        t[r] = bench_thread_cpu_s() - t0;
        guide_index_free(&ix);
        if (st != ANVIL_OK) {
            fprintf(stderr, "anvil %s: vocabulary index: %s\n", CMD, err);
            return 1;
        }
    }
    *out = bench_percentile(t, reps, 0.5);
    return 0;
}

/* Median thread CPU seconds of compiling text as a constraint of kind. */
static int time_compile(const struct anvil_model *m, enum anvil_constraint_kind kind,
                        const char *name, const char *text, size_t len, int reps, double *out) {
    double t[16];
    for (int r = 0; r < reps; r++) {
        struct anvil_constraint *c = NULL;
        char err[256];
        double t0 = bench_thread_cpu_s();
        anvil_status st = anvil_constraint_compile(m, kind, text, len, NULL, &c, err, sizeof(err));
        t[r] = bench_thread_cpu_s() - t0;
        anvil_constraint_free(c);
        if (st != ANVIL_OK) {
            fprintf(stderr, "anvil %s: %s: %s\n", CMD, name, err);
            return 2;
        }
    }
    *out = bench_percentile(t, reps, 0.5);
    return 0;
}

/* The request prompt: the schema (compact) in a user message. */
static int schema_prompt(struct anvil_model *m, const char *schema, anvil_token *out, int cap) {
    cJSON *j = cJSON_Parse(schema);
    char *compact = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!compact) return -1;
    static const char head[] = "Reply with one JSON value that follows this JSON schema:\n";
    size_t n = strlen(head) + strlen(compact) + 1;
    char *text = malloc(n);
    int32_t k = -1;
    if (text) {
        snprintf(text, n, "%s%s", head, compact);
        struct anvil_chat_msg msg = {"user", text};
        k = anvil_chat_tokenize(m, &msg, 1, true, out, cap);
        if (k <= 0) k = anvil_tokenize(m, text, strlen(text), out, cap, true, false);
    }
    free(text);
    cJSON_free(compact);
    return k;
}

struct opts {
    const char *model, *schemas, *calls, *data;
    long n_gen, reps, threads, rounds;
    int batches[8], n_batches;
    bool json;
};

/* The decode comparison for one constraint: text compiled as kind, the
 * requests' prompt given. */
static int bench_one(struct anvil_model *m, const struct opts *o, const char *label,
                     const char *file, enum anvil_constraint_kind kind, const char *text,
                     size_t len, const anvil_token *prompt, int n_prompt) {
    int rc = 0;
    double t_compile = 0.0;
    struct anvil_constraint *c = NULL;
    static struct req_out cons[MAX_BATCH], free_[MAX_BATCH];
    char err[256];
    if ((rc = time_compile(m, kind, label, text, len, (int)o->reps, &t_compile))) goto out;
    if (anvil_constraint_compile(m, kind, text, len, NULL, &c, err, sizeof(err)) != ANVIL_OK) {
        rc = cli_fail(CMD, "%s: %s", label, err);
        goto out;
    }
    if (o->json)
        printf("{\"bench\": \"constrained\", \"case\": \"compile\", \"schema\": \"%s\", \"file\": "
               "\"%s\", \"bytes\": %zu, \"cpu_ms\": %.3f, \"commit\": \"%s\"}\n",
               label, file, len, 1e3 * t_compile, bench_commit());
    else
        printf("compile %-8s %7.2f ms CPU  (%s, %zu bytes)\n", label, 1e3 * t_compile, file, len);
    fflush(stdout);

    for (int bi = 0; bi < o->n_batches && !rc; bi++) {
        int batch = o->batches[bi], n_req = batch == 1 ? (int)o->reps : batch;
        struct anvil_engine_params ep = anvil_engine_default_params();
        ep.n_threads = (int32_t)o->threads;
        ep.max_running = batch;
        ep.n_ctx = n_prompt + (int)o->n_gen + 16;
        struct anvil_engine *e = NULL;
        if (anvil_engine_init(m, &ep, &e, err, sizeof(err)) != ANVIL_OK) {
            fprintf(stderr, "anvil %s: %s\n", CMD, err);
            rc = 1;
            break;
        }
        if (!o->json) fprintf(stderr, "anvil %s: %s, batch %d ...\n", CMD, label, batch);
        /* warmup: the prompt into the prefix cache, the vocabulary index built */
        int lim[MAX_BATCH], one = 2;
        struct dec_res r0 = {0}, r1 = {0}, rr0, rr1;
        double ratios[MAX_ROUNDS];
        rc = run_decode(e, prompt, n_prompt, 1, 1, &one, c, cons, &rr0);
        struct anvil_engine_stats st0, st;
        anvil_engine_get_stats(e, &st0);
        int n_stop = 0;
        for (int round = 0; round < o->rounds && !rc; round++) {
            for (int i = 0; i < n_req; i++) lim[i] = (int)o->n_gen;
            rc = run_decode(e, prompt, n_prompt, n_req, batch, lim, c, cons, &rr1);
            n_stop = 0;
            for (int i = 0; i < n_req && !rc; i++) {
                lim[i] = cons[i].n > 0 ? cons[i].n : 1;
                if (cons[i].finish == ANVIL_FINISH_STOP) {
                    n_stop++;
                    const char *txt = cons[i].text ? cons[i].text : "";
                    if (!anvil_constraint_matches(c, txt, cons[i].len)) {
                        fprintf(stderr, "anvil %s: %s: request %d ended but its output does not "
                                "match the schema: no number reported\n", CMD, label, i);
                        rc = 1;
                    }
                } else if (cons[i].finish != ANVIL_FINISH_LENGTH) {
                    fprintf(stderr, "anvil %s: %s: request %d ended with finish %d\n", CMD,
                            label, i, (int)cons[i].finish);
                    rc = 1;
                }
            }
            if (!rc) rc = run_decode(e, prompt, n_prompt, n_req, batch, lim, NULL, free_, &rr0);
            if (rc) break;
            ratios[round] = rr0.tok_s > 0 ? rr1.tok_s / rr0.tok_s : 0.0;
            r0.tok_s += rr0.tok_s / (double)o->rounds;
            r1.tok_s += rr1.tok_s / (double)o->rounds;
            r1.n_tok += rr1.n_tok;
        }
        anvil_engine_get_stats(e, &st);
        anvil_engine_free(e);
        if (rc) break;
        /* the median of the rounds' ratios: a round disturbed by the
         * machine moves it less than it moves the mean */
        for (int i = 1; i < o->rounds; i++)
            for (int k = i; k > 0 && ratios[k - 1] > ratios[k]; k--) {
                double x = ratios[k];
                ratios[k] = ratios[k - 1];
                ratios[k - 1] = x;
            }
        double ratio = o->rounds % 2 ? ratios[o->rounds / 2]
                                     : 0.5 * (ratios[o->rounds / 2 - 1] + ratios[o->rounds / 2]);
        uint64_t n_ct = st.n_cons_tokens - st0.n_cons_tokens;
        double masks = n_ct ? (double)(st.n_cons_masks - st0.n_cons_masks) / (double)n_ct : 0;
        /* the constraint's own work per token, and its share of decode:
         * at r1.tok_s a token takes 1 / r1.tok_s of the stepping thread */
        double us_tok = n_ct ? 1e6 * (st.cons_s - st0.cons_s) / (double)n_ct : 0;
        double share = us_tok * 1e-6 * r1.tok_s;
        if (o->json)
            printf("{\"bench\": \"constrained\", \"case\": \"decode\", \"schema\": \"%s\", "
                   "\"batch\": %d, \"requests\": %d, \"n_gen\": %ld, \"threads\": %ld, "
                   "\"free_tok_s\": %.2f, \"constrained_tok_s\": %.2f, \"ratio\": %.4f, "
                   "\"decoded_tokens\": %lld, \"complete\": %d, \"mask_share\": %.4f, "
                   "\"rounds\": %ld, \"cons_us_per_token\": %.3f, \"cons_share\": %.5f, "
                   "\"commit\": \"%s\", \"cpu\": \"%s\"}\n",
                   label, batch, n_req, o->n_gen, o->threads, r0.tok_s, r1.tok_s, ratio,
                   (long long)r1.n_tok, n_stop, masks, o->rounds, us_tok, share, bench_commit(),
                   bench_cpu_flags());
        else if (bi == 0)
            printf("| schema | batch | free tok/s | constrained tok/s | ratio (median of %ld) | "
                   "tokens | complete | masks | constraint us/tok | constraint share |\n"
                   "|---|---|---|---|---|---|---|---|---|---|\n", o->rounds);
        if (!o->json)
            printf("| %s | %d | %.1f | %.1f | %.1f%% | %lld | %d/%d | %.1f%% | %.1f | %.2f%% |\n",
                   label, batch, r0.tok_s, r1.tok_s, 100 * ratio, (long long)r1.n_tok, n_stop,
                   n_req, 100 * masks, us_tok, 100 * share);
        fflush(stdout);
    }
out:
    for (int i = 0; i < MAX_BATCH; i++) {
        free(cons[i].text);
        free(free_[i].text);
        cons[i].text = free_[i].text = NULL;
    }
    anvil_constraint_free(c);
    return rc;
}

static int bench_schema(struct anvil_model *m, const struct opts *o, const char *label,
                        const char *path) {
    size_t len = 0;
    char *text = slurp(path, &len);
    if (!text) return cli_fail(CMD, "cannot read %s", path);
    static anvil_token prompt[16384];
    int n_prompt = schema_prompt(m, text, prompt, (int)(sizeof(prompt) / sizeof(prompt[0])));
    int rc = n_prompt <= 0
                 ? cli_fail(CMD, "%s: not a JSON document, or too long a prompt", path)
                 : bench_one(m, o, label, path, ANVIL_CONSTRAINT_JSON_SCHEMA, text, len, prompt,
                             n_prompt);
    free(text);
    return rc;
}

/* bench/bench_toolfmt.py's two tools, under tool_choice "required" */
static const char CALL_TOOLS[] =
    "{\"tool_choice\": \"required\", \"tools\": ["
    "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", "
    "\"description\": \"The weather in a city.\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 24}, "
    "\"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}, "
    "\"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 14}}, "
    "\"required\": [\"city\", \"unit\"], \"additionalProperties\": false}}}, "
    "{\"type\": \"function\", \"function\": {\"name\": \"get_time\", "
    "\"description\": \"The time in a zone.\", \"parameters\": {\"type\": \"object\", "
    "\"properties\": {\"zone\": {\"type\": \"integer\", \"minimum\": -12, \"maximum\": 14}}, "
    "\"required\": [\"zone\"], \"additionalProperties\": false}}}]}";

/* Tool calls in family fam's format: the server's CALLS document for
 * CALL_TOOLS, a user turn and the format's forced opening as the prompt. */
static int bench_calls(struct anvil_model *m, const struct opts *o, const char *fam) {
    enum srv_toolfmt f = SRV_TOOLFMT_COUNT;
    for (int k = 0; k < SRV_TOOLFMT_COUNT; k++)
        if (!strcmp(fam, srv_toolfmt_name((enum srv_toolfmt)k))) f = (enum srv_toolfmt)k;
    if (f == SRV_TOOLFMT_COUNT) return cli_fail(CMD, "--calls: unknown format '%s'", fam);
    cJSON *root = cJSON_Parse(CALL_TOOLS);
    struct srv_tools t;
    struct srv_err e = {0};
    if (!root || !srv_tools_parse(root, &t, &e)) {
        cJSON_Delete(root);
        return cli_fail(CMD, "--calls: the bench's tools do not parse");
    }
    struct sbuf open;
    sb_init(&open);
    bool handled = false;
    char *doc = srv_tools_calls(&t, f, true, &open, &handled);
    int rc = 0;
    if (!handled) {
        rc = cli_fail(CMD, "--calls: %s is constrained as one JSON Schema (an array of calls, "
                     "srv_tools_family), not as a calls document", fam);
    } else if (!doc || open.oom) {
        rc = cli_fail(CMD, "out of memory");
    } else {
        static anvil_token prompt[4096];
        const int cap = (int)(sizeof(prompt) / sizeof(prompt[0]));
        struct anvil_chat_msg msg = {"user", "What is the weather in Paris and in Rome? Call "
                                             "get_weather for each city."};
        int n = anvil_chat_tokenize(m, &msg, 1, true, prompt, cap);
        int k = n > 0 && open.p ? anvil_tokenize(m, open.p, open.len, prompt + n, cap - n, false,
                                                 false)
                                : 0;
        if (n <= 0 || k < 0) rc = cli_fail(CMD, "--calls: the prompt does not tokenize");
        else rc = bench_one(m, o, fam, "calls", ANVIL_CONSTRAINT_CALLS, doc, strlen(doc), prompt,
                            n + k);
    }
    free(doc);
    sb_free(&open);
    cJSON_Delete(root);
    return rc;
}

int bench_constrained(int argc, char **argv) {
    struct opts o = {.schemas = "small,medium,large", .data = "tests/data/constrain/schemas",
                     .n_gen = 256, .reps = 3, .rounds = 3, .batches = {1, 32}, .n_batches = 2};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--constrained")) {
            continue;
        } else if (!strcmp(a, "--json")) {
            o.json = true;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(o.model = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--schemas")) {
            if (!(o.schemas = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--calls")) {
            if (!(o.calls = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--data")) {
            if (!(o.data = cli_value(CMD, argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-n")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_int(CMD, a, v, 2, MAX_GEN, &o.n_gen))
                return 2;
        } else if (!strcmp(a, "-r")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_int(CMD, a, v, 1, 16, &o.reps))
                return 2;
        } else if (!strcmp(a, "--rounds")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) ||
                !cli_int(CMD, a, v, 1, MAX_ROUNDS, &o.rounds))
                return 2;
        } else if (!strcmp(a, "-t")) {
            if (!(v = cli_value(CMD, argc, argv, &i)) || !cli_int(CMD, a, v, 1, 256, &o.threads))
                return 2;
        } else if (!strcmp(a, "--batch")) {
            if (!(v = cli_value(CMD, argc, argv, &i))) return 2;
            if ((o.n_batches = cli_int_list(CMD, a, v, 1, MAX_BATCH, o.batches, 8)) < 0) return 2;
        } else {
            usage(stderr);
            return cli_fail(CMD, "unknown option '%s'", a);
        }
    }
    if (!o.model) return cli_fail(CMD, "a model is required (-m FILE)");
    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model *m = NULL;
    if (anvil_model_load(o.model, NULL, &m, err, sizeof(err)) != ANVIL_OK)
        return cli_fail(CMD, "%s", err);
    double t_index = 0.0;
    int rc = time_index(m, (int)o.reps, &t_index);
    if (!rc) {
        if (o.json)
            printf("{\"bench\": \"constrained\", \"case\": \"index\", \"n_vocab\": %d, "
                   "\"cpu_ms\": %.3f, \"commit\": \"%s\"}\n",
                   anvil_model_n_vocab(m), 1e3 * t_index, bench_commit());
        else
            printf("vocabulary index (once per model, %d tokens): %.2f ms CPU\n",
                   anvil_model_n_vocab(m), 1e3 * t_index);
    }
    char *list = strdup(o.calls ? o.calls : o.schemas), *save = NULL;
    for (char *s = strtok_r(list, ",", &save); s && !rc; s = strtok_r(NULL, ",", &save)) {
        if (o.calls) {
            rc = bench_calls(m, &o, s);
            continue;
        }
        char path[1024];
        const char *file = NULL;
        for (size_t k = 0; k < sizeof(NAMED) / sizeof(NAMED[0]); k++)
            if (!strcmp(s, NAMED[k][0])) file = NAMED[k][1];
        if (file) snprintf(path, sizeof(path), "%s/%s", o.data, file);
        else snprintf(path, sizeof(path), "%s", s);
        rc = bench_schema(m, &o, s, path);
    }
    free(list);
    anvil_model_free(m);
    return rc;
}
