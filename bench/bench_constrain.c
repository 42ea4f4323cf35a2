/*
 * bench_constrain.c - the constraint engine's costs, measured in thread CPU
 * time (the development machine is shared; wall time is noise there):
 *
 *   vocab49k / vocab262k   cn_vocab_build on the model's vocabulary and on a
 *                          synthetic 262,144-token one (the model's tokens
 *                          plus seeded concatenations of two of them)
 *   compile:NAME           cn_compile of tests/data/constrain/schemas/NAME
 *                          (small, medium ~20 nested properties, large:
 *                          hundreds of enum values and recursion), of a
 *                          10,000-value string enum (enum10k: a trie-shaped
 *                          DFA), rep5000x2 ([a-z]{1,5000}[0-9]{1,5000}),
 *                          gbnf_seq20k (20,000 literals in a row) and
 *                          the json_object and gbnf_arith grammars
 *   refuse:BOUND           a compile that a bound refuses: how long until
 *                          the error (work: (a|b)*a(a|b){20}, nfa: a
 *                          100,000-fold repetition of any code point,
 *                          depth: a schema nested 200 deep)
 *   mask:NAME@STATE        cn_fill_mask over the model's vocabulary after
 *                          a given prefix (inside a string: most tokens
 *                          allowed; after '{': few)
 *   allowed:NAME@STATE     cn_allowed on random tokens
 *
 * Before timing a mask it is checked against cn_allowed for every token;
 * a disagreement aborts the run (no number for a wrong result).
 *
 *   anvil-microbench --constrain [--model GGUF] [--data DIR] [-r N] [--json]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "constrain/cn_int.h"
#include "constrain/constrain.h"
#include "core/core.h"
#include "gguf/gguf.h"
#include "tok/tok.h"

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct stat3 {
    double med, p10, p90;
};

static struct stat3 stats(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    struct stat3 s = {v[n / 2], v[n / 10], v[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1]};
    return s;
}

static bool g_json;

static void report(const char *name, const char *unit, struct stat3 s, const char *extra) {
    if (g_json)
        printf("{\"case\": \"%s\", \"unit\": \"%s\", \"median\": %.3f, \"p10\": %.3f, \"p90\": %.3f%s%s}\n",
               name, unit, s.med, s.p10, s.p90, extra[0] ? ", " : "", extra);
    else
        printf("%-44s %10.3f %-3s  (p10 %.3f, p90 %.3f)  %s\n", name, s.med, unit, s.p10, s.p90,
               extra);
}

static void die(const char *m) {
    fprintf(stderr, "bench_constrain: %s\n", m);
    exit(1);
}

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)len + 1);
    if (fread(b, 1, (size_t)len, f) != (size_t)len) die("read failed");
    fclose(f);
    b[len] = 0;
    *n = (size_t)len;
    return b;
}

/* the model's token byte strings */
struct toks {
    int32_t n;
    uint8_t **b;
    int32_t *len;
    uint8_t *kind;
};

static void load_toks(const char *model, struct toks *t) {
    struct gguf_file *gf = NULL;
    struct tok_vocab *tv = NULL;
    char err[256] = "";
    if (gguf_open(model, &gf, err, sizeof err) != ANVIL_OK || tok_load(gf, &tv, err, sizeof err) != ANVIL_OK) {
        fprintf(stderr, "bench_constrain: %s: %s\n", model, err);
        exit(1);
    }
    t->n = tok_n_vocab(tv);
    t->b = calloc((size_t)t->n, sizeof *t->b);
    t->len = calloc((size_t)t->n, sizeof *t->len);
    t->kind = calloc((size_t)t->n, 1);
    char buf[1024];
    for (int32_t i = 0; i < t->n; i++) {
        int32_t l = tok_piece(tv, i, buf, sizeof buf, false);
        if (l < 0) die("token too long");
        t->b[i] = malloc((size_t)l + 1);
        memcpy(t->b[i], buf, (size_t)l);
        t->len[i] = l;
        t->kind[i] = tok_is_eog(tv, i) ? CN_TOK_EOG : l == 0 ? CN_TOK_NEVER : CN_TOK_TEXT;
    }
    tok_free(tv);
    gguf_close(gf);
}

static uint64_t rs = 42;
static uint64_t rnd(void) { return core_splitmix64(&rs); }

static void bench_vocab(const char *name, const struct toks *t, int reps) {
    double *v = malloc((size_t)reps * sizeof *v);
    struct cn_vocab *voc = NULL;
    char err[256];
    for (int r = 0; r < reps; r++) {
        double c0 = cpu_s();
        if (cn_vocab_build(t->n, (const uint8_t *const *)t->b, t->len, t->kind, &voc, err, sizeof err) != ANVIL_OK)
            die(err);
        v[r] = (cpu_s() - c0) * 1e3;
        if (r + 1 < reps) {
            cn_vocab_free(voc);
            voc = NULL;
        }
    }
    char extra[160];
    snprintf(extra, sizeof extra, g_json ? "\"tokens\": %d, \"nodes\": %d, \"bytes\": %zu"
                                         : "tokens %d, trie nodes %d, %zu bytes",
             t->n, cn_vocab_n_nodes(voc), cn_vocab_bytes(voc));
    report(name, "ms", stats(v, reps), extra);
    cn_vocab_free(voc);
    free(v);
}

static struct cn_program *bench_compile(const char *name, enum cn_kind kind, const char *text, size_t n,
                                        int reps) {
    double *v = malloc((size_t)reps * sizeof *v);
    struct cn_program *p = NULL;
    char err[512];
    for (int r = 0; r < reps; r++) {
        if (p) cn_program_free(p);
        p = NULL;
        double c0 = cpu_s();
        if (cn_compile(kind, text, n, NULL, &p, err, sizeof err) != ANVIL_OK) die(err);
        v[r] = (cpu_s() - c0) * 1e3;
    }
    struct cn_program_info in;
    cn_program_info(p, &in);
    char extra[160], label[96];
    snprintf(extra, sizeof extra, g_json ? "\"states\": %d, \"classes\": %d, \"rules\": %d, \"bytes\": %zu"
                                         : "states %d, classes %d, call-rules %d, %zu bytes",
             in.n_states, in.n_classes, in.n_rules, in.bytes);
    snprintf(label, sizeof label, "compile:%s", name);
    report(label, "ms", stats(v, reps), extra);
    free(v);
    return p;
}

/* A compile that must fail with ANVIL_ERR_UNSUPPORTED (a bound): the
 * time until the error. */
static void bench_refuse(const char *name, enum cn_kind kind, const char *text, size_t n, int reps) {
    double *v = malloc((size_t)reps * sizeof *v);
    char err[512], label[96];
    for (int r = 0; r < reps; r++) {
        struct cn_program *p = NULL;
        double c0 = cpu_s();
        anvil_status st = cn_compile(kind, text, n, NULL, &p, err, sizeof err);
        v[r] = (cpu_s() - c0) * 1e3;
        if (st != ANVIL_ERR_UNSUPPORTED) die("a bound did not refuse the refuse: case");
    }
    snprintf(label, sizeof label, "refuse:%s", name);
    report(label, "ms", stats(v, reps), "");
    free(v);
}

static void bench_mask(const char *name, const struct cn_program *p, const struct cn_vocab *voc,
                       const char *prefix, int reps) {
    struct cn_state *s = NULL;
    if (cn_state_init(p, voc, &s) != ANVIL_OK) die("state");
    if (cn_advance_bytes(s, (const uint8_t *)prefix, strlen(prefix)) != ANVIL_OK) die("prefix refused");
    int32_t nv = cn_vocab_n_vocab(voc);
    uint8_t *mask = malloc(((size_t)nv + 7) / 8);
    int32_t cnt = cn_fill_mask(s, mask);
    if (cnt < 0) die("fill_mask failed");
    for (int32_t t = 0; t < nv; t++)
        if ((((mask[t >> 3] >> (t & 7)) & 1) != 0) != cn_allowed(s, t)) die("mask and cn_allowed disagree");
    int iters = 20;
    double *v = malloc((size_t)reps * sizeof *v);
    char label[128], extra[96];
    snprintf(extra, sizeof extra, g_json ? "\"allowed\": %d" : "%d tokens allowed", cnt);
    /* the trie walk (a state's first mask) */
    for (int r = 0; r < reps; r++) {
        double c0 = cpu_s();
        for (int i = 0; i < iters; i++) cn_fill_mask_walk(s, mask);
        v[r] = (cpu_s() - c0) * 1e6 / iters;
    }
    snprintf(label, sizeof label, "mask-walk:%s", name);
    report(label, "us", stats(v, reps), extra);
    /* the same state again (cached) */
    for (int r = 0; r < reps; r++) {
        double c0 = cpu_s();
        for (int i = 0; i < iters; i++) cn_fill_mask(s, mask);
        v[r] = (cpu_s() - c0) * 1e6 / iters;
    }
    snprintf(label, sizeof label, "mask-cached:%s", name);
    report(label, "us", stats(v, reps), extra);
    /* cn_allowed on random tokens (the candidate test) */
    int32_t *ids = malloc(4096 * sizeof *ids);
    for (int i = 0; i < 4096; i++) ids[i] = (int32_t)(rnd() % (uint64_t)nv);
    int sink = 0;
    for (int r = 0; r < reps; r++) {
        double c0 = cpu_s();
        for (int i = 0; i < 4096; i++) sink += cn_allowed(s, ids[i]);
        v[r] = (cpu_s() - c0) * 1e9 / 4096;
    }
    snprintf(label, sizeof label, "allowed:%s", name);
    snprintf(extra, sizeof extra, g_json ? "\"hits\": %d" : "(%d of 4096 allowed)", sink / reps);
    report(label, "ns", stats(v, reps), extra);
    free(ids);
    free(v);
    free(mask);
    cn_state_free(s);
}

int bench_constrain(int argc, char **argv) {
    const char *model = ANVIL_DEFAULT_MODEL;
    const char *data = "tests/data/constrain/schemas";
    int reps = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) model = argv[++i];
        else if (!strcmp(argv[i], "--data") && i + 1 < argc) data = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--json")) g_json = true;
        else {
            fprintf(stderr, "usage: anvil-microbench --constrain [--model GGUF] [--data DIR] [-r N] [--json]\n");
            return 2;
        }
    }
    if (reps < 1) reps = 1;
    struct toks t;
    load_toks(model, &t);
    bench_vocab("vocab:model", &t, reps);
    /* 262,144 tokens: the model's, then concatenations of two (<= 24 bytes) */
    struct toks big = {.n = 262144};
    big.b = calloc((size_t)big.n, sizeof *big.b);
    big.len = calloc((size_t)big.n, sizeof *big.len);
    big.kind = calloc((size_t)big.n, 1);
    for (int32_t i = 0; i < big.n; i++) {
        if (i < t.n) {
            big.b[i] = t.b[i];
            big.len[i] = t.len[i];
            big.kind[i] = t.kind[i];
            continue;
        }
        int32_t a = (int32_t)(rnd() % (uint64_t)t.n), b = (int32_t)(rnd() % (uint64_t)t.n);
        int32_t la = t.len[a] > 12 ? 12 : t.len[a], lb = t.len[b] > 12 ? 12 : t.len[b];
        big.b[i] = malloc((size_t)(la + lb + 1));
        memcpy(big.b[i], t.b[a], (size_t)la);
        memcpy(big.b[i] + la, t.b[b], (size_t)lb);
        big.len[i] = la + lb;
        big.kind[i] = la + lb ? CN_TOK_TEXT : CN_TOK_NEVER;
    }
    bench_vocab("vocab:synthetic262k", &big, reps);

    struct cn_vocab *voc = NULL;
    char err[256];
    if (cn_vocab_build(t.n, (const uint8_t *const *)t.b, t.len, t.kind, &voc, err, sizeof err) != ANVIL_OK) die(err);
    static const struct {
        const char *label, *file;
        const char *states[4][2]; /* name, prefix */
    } cases[] = {
        {"small", "sentiment.json", {{"start", ""}, {"after{", "{"}, {"in-enum", "{\"label\":\"ne"}, {NULL, NULL}}},
        {"medium", "medium_nested.json",
         {{"after{", "{"},
          {"in-uuid", "{\"id\":\"123e4567-e8"},
          {"in-string", "{\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"created\":\"2024-01-02T03:04:05Z\","
                        "\"status\":\"active\",\"title\":\"T\",\"summary\":\"A "},
          {"in-maxLength80", "{\"id\":\"123e4567-e89b-12d3-a456-426614174000\",\"created\":\"2024-01-02T03:04:05Z\","
                             "\"status\":\"active\",\"title\":\"A "}}},
        {"large", "large_enum_recursive.json",
         {{"after{", "{"}, {"in-enum", "{\"name\":\"x\",\"countries\":[\""}, {"in-maxLength40", "{\"name\":\"x "},
          {NULL, NULL}}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s", data, cases[c].file);
        size_t n;
        char *text = slurp(path, &n);
        if (!text) die("cannot read a schema (run from the repository root or pass --data)");
        struct cn_program *p = bench_compile(cases[c].label, CN_JSON_SCHEMA, text, n, reps);
        for (int k = 0; k < 4 && cases[c].states[k][0]; k++) {
            char name[96];
            snprintf(name, sizeof name, "%s@%s", cases[c].label, cases[c].states[k][0]);
            bench_mask(name, p, voc, cases[c].states[k][1], reps);
        }
        cn_program_free(p);
        free(text);
    }
    /* free-form JSON (a pushdown program) and a GBNF grammar */
    struct cn_program *pj = bench_compile("json_object", CN_JSON, NULL, 0, reps);
    bench_mask("json_object@after{", pj, voc, "{", reps);
    bench_mask("json_object@in-string", pj, voc, "{\"a\":[{\"b\":\"x ", reps);
    bench_mask("json_object@value", pj, voc, "{\"a\":[{\"b\":", reps);
    cn_program_free(pj);
    const char *arith = "root ::= expr\nexpr ::= term ([-+] term)*\nterm ::= factor ([*/] factor)*\n"
                        "factor ::= [0-9]+ | \"(\" expr \")\"\n";
    struct cn_program *pg = bench_compile("gbnf_arith", CN_GBNF, arith, strlen(arith), reps);
    bench_mask("gbnf_arith@nested", pg, voc, "((1+2)*(3", reps);
    cn_program_free(pg);
    /* 10,000 string values, one DFA */
    size_t cap = 400000, m = 0;
    char *sch = malloc(cap);
    m += (size_t)snprintf(sch + m, cap - m, "{\"enum\":[");
    for (int i = 0; i < 10000; i++)
        m += (size_t)snprintf(sch + m, cap - m, "%s\"value-%d-%x\"", i ? "," : "", i, i * 2654435761u);
    m += (size_t)snprintf(sch + m, cap - m, "]}");
    cn_program_free(bench_compile("enum10k", CN_JSON_SCHEMA, sch, m, reps));
    /* long bounded repetitions, and a GBNF sequence of 20,000 literals */
    const char *reps2 = "[a-z]{1,5000}[0-9]{1,5000}";
    cn_program_free(bench_compile("rep5000x2", CN_REGEX, reps2, strlen(reps2), reps));
    m = (size_t)snprintf(sch, cap, "root ::=");
    for (int i = 0; i < 20000; i++) m += (size_t)snprintf(sch + m, cap - m, " \"%d\"", i);
    cn_program_free(bench_compile("gbnf_seq20k", CN_GBNF, sch, m, reps));
    /* bounds */
    const char *work = "(a|b)*a(a|b){20}", *nfa = "[\\u0000-\\U0010ffff]{100000}";
    bench_refuse("work", CN_REGEX, work, strlen(work), reps);
    bench_refuse("nfa", CN_REGEX, nfa, strlen(nfa), reps);
    m = 0;
    for (int i = 0; i < 200; i++) m += (size_t)snprintf(sch + m, cap - m, "{\"type\":\"array\",\"items\":");
    m += (size_t)snprintf(sch + m, cap - m, "{\"type\":\"null\"}");
    for (int i = 0; i < 200; i++) sch[m++] = '}';
    sch[m] = 0;
    bench_refuse("depth", CN_JSON_SCHEMA, sch, m, reps);
    free(sch);
    cn_vocab_free(voc);
    return 0;
}
