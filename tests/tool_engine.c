/*
 * tool_engine.c - drive the serving engine for the Python tests.
 *
 * usage: tool_engine MODEL [-r MAX_RUNNING] [-s STEP_TOKENS] [-c PREFILL_CHUNK]
 *                          [-x N_CTX] [-t THREADS] [--serial] [--cancel-after K]
 *                          [--kv-mem BYTES] [--thread]
 * stdin: one request per line: "max_tokens temp seed stop|- [c=KIND:FILE] id id id ..."
 *        (stop: a stop string with '_' for spaces, or '-' for none; c=
 *        constrains the output: KIND regex, gbnf, schema, json, or
 *        schema+text (or_text), FILE its source; a compile error prints
 *        "tool_engine: compile N: MESSAGE" and exits 2; a request that
 *        ends with an error prints "tool_engine: error N: MESSAGE")
 * stdout: one line per request, in input order:
 *        "<finish> <n_gen> <ids...> | <text as hex>"
 * --spec ngram|draft [--spec-k K] [--draft MODEL] turns speculation on
 * (stats on stderr gain spec_verify/proposed/accepted/tokens).
 * --kv-report N prints {"windowed_bytes", "full_bytes"} of one sequence of
 * N positions (F16 KV) and exits.
 * --serial runs the requests one at a time; otherwise all are submitted at
 * once. --cancel-after K cancels request 0 after its K-th token.
 * After all requests end it checks that the KV cache is empty again and
 * prints "kv_used=<blocks> preemptions=<n> ..." (the engine stats, with
 * prefix_tokens: positions reused from the prefix cache) on stderr.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "anvil.h"

#define MAX_REQ 512

struct out {
    int finish, n_gen, done, n_ids;
    char error[512];
    anvil_token ids[4096];
    char text[65536];
    int n_text;
    int cancel_after;
    anvil_req_id id;
    struct anvil_engine *e;
};

static void on_event(void *user, const struct anvil_event *ev) {
    struct out *o = user;
    if (ev->text_len > 0 && o->n_text + ev->text_len < (int)sizeof(o->text)) {
        memcpy(o->text + o->n_text, ev->text, (size_t)ev->text_len);
        o->n_text += ev->text_len;
    }
    if (ev->type == ANVIL_EVENT_TOKEN) {
        if (o->n_ids < 4096) o->ids[o->n_ids++] = ev->token;
        if (o->cancel_after > 0 && o->n_ids == o->cancel_after) anvil_engine_cancel(o->e, o->id);
    } else {
        o->finish = ev->finish;
        o->n_gen = ev->n_gen;
        o->done = 1;
        if (ev->error) snprintf(o->error, sizeof(o->error), "%s", ev->error);
    }
}

static struct out outs[MAX_REQ];
static struct anvil_request_params reqs[MAX_REQ];
static anvil_token prompts[MAX_REQ][2048];
static char stops[MAX_REQ][64];
static const char *stop_ptr[MAX_REQ][1];
static char cons_spec[MAX_REQ][1024];

static char *read_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    *n = fread(b, 1, (size_t)len, f);
    b[*n] = 0;
    fclose(f);
    return b;
}

/* c=KIND:FILE -> a compiled constraint (exits 2 on a compile error) */
static struct anvil_constraint *compile_spec(struct anvil_model *m, int i, const char *spec) {
    char kind[32];
    const char *colon = strchr(spec, ':');
    if (!colon || colon - spec >= (long)sizeof(kind)) {
        fprintf(stderr, "tool_engine: bad constraint '%s'\n", spec);
        exit(2);
    }
    memcpy(kind, spec, (size_t)(colon - spec));
    kind[colon - spec] = 0;
    struct anvil_constraint_params cp = {0};
    enum anvil_constraint_kind k;
    if (!strcmp(kind, "regex")) k = ANVIL_CONSTRAINT_REGEX;
    else if (!strcmp(kind, "gbnf")) k = ANVIL_CONSTRAINT_GBNF;
    else if (!strcmp(kind, "schema")) k = ANVIL_CONSTRAINT_JSON_SCHEMA;
    else if (!strcmp(kind, "schema+text")) {
        k = ANVIL_CONSTRAINT_JSON_SCHEMA;
        cp.or_text = true;
    } else if (!strcmp(kind, "json")) k = ANVIL_CONSTRAINT_JSON;
    else {
        fprintf(stderr, "tool_engine: bad constraint kind '%s'\n", kind);
        exit(2);
    }
    size_t n = 0;
    char *text = read_file(colon + 1, &n);
    if (!text) {
        fprintf(stderr, "tool_engine: cannot read %s\n", colon + 1);
        exit(2);
    }
    /* regex files hold one pattern: drop the final newline */
    if (k == ANVIL_CONSTRAINT_REGEX && n > 0 && text[n - 1] == '\n') n--;
    char err[512];
    struct anvil_constraint *c = NULL;
    if (anvil_constraint_compile(m, k, text, n, &cp, &c, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "tool_engine: compile %d: %s\n", i, err);
        exit(2);
    }
    free(text);
    return c;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    struct anvil_engine_params ep = anvil_engine_default_params();
    int serial = 0, cancel_after = 0, use_thread = 0, kv_report = 0;
    const char *draft_path = NULL;
    ep.n_threads = 2;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "-r")) ep.max_running = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s")) ep.step_tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c")) ep.prefill_chunk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-x")) ep.n_ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t")) ep.n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv-mem")) ep.kv_mem = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--serial")) serial = 1;
        else if (!strcmp(argv[i], "--thread")) use_thread = 1;
        else if (!strcmp(argv[i], "--cancel-after")) cancel_after = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kv-report")) kv_report = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--spec-k")) ep.spec_k = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--draft")) draft_path = argv[++i];
        else if (!strcmp(argv[i], "--spec")) {
            const char *v = argv[++i];
            ep.spec = !strcmp(v, "ngram") ? ANVIL_SPEC_NGRAM : !strcmp(v, "draft") ? ANVIL_SPEC_DRAFT
                                                                                   : ANVIL_SPEC_OFF;
        }
    }
    if (kv_report > 0) {
        char err[ANVIL_ERRMSG_CAP];
        struct anvil_model *m;
        if (anvil_model_load(argv[1], NULL, &m, err, sizeof(err)) != ANVIL_OK) {
            fprintf(stderr, "tool_engine: %s\n", err);
            return 2;
        }
        printf("{\"n_ctx\": %d, \"windowed_bytes\": %lld, \"full_bytes\": %lld}\n", kv_report,
               (long long)anvil_model_kv_bytes(m, ANVIL_TYPE_F16, kv_report, true),
               (long long)anvil_model_kv_bytes(m, ANVIL_TYPE_F16, kv_report, false));
        anvil_model_free(m);
        return 0;
    }
    int n = 0;
    static char line[1 << 16];
    while (n < MAX_REQ && fgets(line, sizeof(line), stdin)) {
        struct anvil_request_params *r = &reqs[n];
        memset(r, 0, sizeof(*r));
        r->sampling = anvil_sampler_default_params();
        char *save, *tok = strtok_r(line, " \n", &save);
        if (!tok) continue;
        r->max_tokens = atoi(tok);
        r->sampling.temperature = (float)atof(strtok_r(NULL, " \n", &save));
        r->sampling.seed = strtoull(strtok_r(NULL, " \n", &save), NULL, 10);
        char *st = strtok_r(NULL, " \n", &save);
        if (strcmp(st, "-")) {
            snprintf(stops[n], sizeof(stops[n]), "%s", st);
            for (char *c = stops[n]; *c; c++)
                if (*c == '_') *c = ' ';
            stop_ptr[n][0] = stops[n];
            r->stop = stop_ptr[n];
            r->n_stop = 1;
        }
        int k = 0;
        cons_spec[n][0] = 0;
        while ((tok = strtok_r(NULL, " \n", &save)) && k < 2048) {
            if (!strncmp(tok, "c=", 2)) {
                snprintf(cons_spec[n], sizeof(cons_spec[n]), "%s", tok + 2);
                continue;
            }
            prompts[n][k++] = atoi(tok);
        }
        r->prompt = prompts[n];
        r->n_prompt = k;
        n++;
    }
    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model *m;
    if (anvil_model_load(argv[1], NULL, &m, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "tool_engine: %s\n", err);
        return 2;
    }
    struct anvil_model *dm = NULL;
    if (draft_path) {
        if (anvil_model_load(draft_path, NULL, &dm, err, sizeof(err)) != ANVIL_OK) {
            fprintf(stderr, "tool_engine: draft: %s\n", err);
            return 2;
        }
        ep.draft = dm;
    }
    for (int i = 0; i < n; i++)
        if (cons_spec[i][0]) reqs[i].constraint = compile_spec(m, i, cons_spec[i]);
    struct anvil_engine *e;
    if (anvil_engine_init(m, &ep, &e, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "tool_engine: engine init failed: %s\n", err);
        return 2;
    }
    if (use_thread) anvil_engine_start(e);
    int first = 0;
    while (first < n) {
        int last = serial ? first + 1 : n;
        for (int i = first; i < last; i++) {
            outs[i].e = e;
            outs[i].cancel_after = i == 0 ? cancel_after : 0;
            if (anvil_engine_submit(e, &reqs[i], on_event, &outs[i], &outs[i].id, err,
                                    sizeof(err)) != ANVIL_OK) {
                fprintf(stderr, "tool_engine: submit %d: %s\n", i, err);
                outs[i].done = 1;
                outs[i].finish = -1;
            }
            /* the request holds its own reference */
            anvil_constraint_free(reqs[i].constraint);
            reqs[i].constraint = NULL;
        }
        for (;;) {
            int all = 1;
            for (int i = first; i < last; i++) all &= outs[i].done;
            if (all) break;
            if (use_thread) usleep(1000);
            else anvil_engine_step(e, NULL);
        }
        first = last;
    }
    /* the stats are published at the end of a step, and the last DONE
     * comes from inside one: with the driver thread, join it first (the
     * step finishes), or kv_used may still count the last request's
     * blocks */
    if (use_thread) anvil_engine_stop(e);
    struct anvil_engine_stats s;
    anvil_engine_get_stats(e, &s);
    for (int i = 0; i < n; i++)
        if (outs[i].error[0]) fprintf(stderr, "tool_engine: error %d: %s\n", i, outs[i].error);
    fprintf(stderr, "kv_used=%d preemptions=%llu steps=%llu spec_verify=%llu spec_proposed=%llu "
            "spec_accepted=%llu spec_tokens=%llu prefix_tokens=%llu cons_tokens=%llu "
            "cons_masks=%llu\n",
            s.kv_blocks_used, (unsigned long long)s.n_preemptions, (unsigned long long)s.n_steps,
            (unsigned long long)s.n_spec_verify, (unsigned long long)s.n_spec_proposed,
            (unsigned long long)s.n_spec_accepted, (unsigned long long)s.n_spec_tokens,
            (unsigned long long)s.n_prefix_tokens, (unsigned long long)s.n_cons_tokens,
            (unsigned long long)s.n_cons_masks);
    for (int i = 0; i < n; i++) {
        printf("%d %d", outs[i].finish, outs[i].n_gen);
        for (int k = 0; k < outs[i].n_ids; k++) printf(" %d", outs[i].ids[k]);
        printf(" |");
        for (int k = 0; k < outs[i].n_text; k++) printf("%02x", (unsigned char)outs[i].text[k]);
        printf("\n");
    }
    anvil_engine_free(e);
    anvil_model_free(m);
    anvil_model_free(dm);
    return 0;
}
