/*
 * tool_sampler.c - drives the sampler for tests/py/test_sampler.py.
 *
 *   tool_sampler rng SEED N     first N outputs of the sampler RNG (hex)
 *   tool_sampler cases FILE     run every case in FILE (format below)
 *   tool_sampler ext FILE       the general chain (sampler.c): text cases, below
 *
 * A case is little-endian binary: int32 n_vocab, float temperature,
 * int32 top_k, float top_p, float min_p, float repeat_penalty,
 * float presence_penalty, float frequency_penalty, int32 repeat_last_n,
 * int32 n_hist, int32 hist[n_hist], float logits[n_vocab], int32 n_top.
 * For each case it prints three lines:
 *   P n (id value)*        penalized logits of the window tokens (%.9g)
 *   K n (id prob)*         kept set after top-k/top-p/min-p, in order, with draw probabilities
 *   L lp n (id logprob)*   logprob of token 0 and the n_top most likely (raw logits)
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sample/sample.h"

static int rd(FILE *f, void *p, size_t n) {
    return fread(p, 1, n, f) == n;
}

static int run_cases(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 2;
    }
    for (;;) {
        int32_t nv;
        if (!rd(f, &nv, 4)) break;
        struct anvil_sampler_params p = anvil_sampler_default_params();
        int32_t n_hist, n_top;
        if (!rd(f, &p.temperature, 4) || !rd(f, &p.top_k, 4) || !rd(f, &p.top_p, 4) ||
            !rd(f, &p.min_p, 4) || !rd(f, &p.repeat_penalty, 4) || !rd(f, &p.presence_penalty, 4) ||
            !rd(f, &p.frequency_penalty, 4) || !rd(f, &p.repeat_last_n, 4) || !rd(f, &n_hist, 4))
            return 3;
        if (nv <= 0 || n_hist < 0) return 3;
        int32_t *hist = malloc((size_t)n_hist * 4 + 4);
        float *l = malloc((size_t)nv * 4);
        float *pl = malloc((size_t)nv * 4);
        anvil_token *ids = malloc((size_t)nv * 4);
        double *pr = malloc((size_t)nv * 8);
        if (!rd(f, hist, (size_t)n_hist * 4) || !rd(f, l, (size_t)nv * 4) || !rd(f, &n_top, 4))
            return 3;
        struct anvil_sampler *s = NULL;
        char err[128];
        if (anvil_sampler_params_check(&p, err, sizeof err) != ANVIL_OK ||
            anvil_sampler_init(&p, nv, &s) != ANVIL_OK) {
            fprintf(stderr, "bad case: %s\n", err);
            return 3;
        }
        for (int32_t i = 0; i < n_hist; i++) anvil_sampler_accept(s, hist[i]);

        memcpy(pl, l, (size_t)nv * 4);
        sample_apply_penalties(s, pl);
        int32_t nd = 0;
        for (int32_t i = 0; i < nv; i++) nd += memcmp(&pl[i], &l[i], 4) != 0;
        printf("P %d", nd);
        for (int32_t i = 0; i < nv; i++)
            if (memcmp(&pl[i], &l[i], 4) != 0) printf(" %d %.9g", i, (double)pl[i]);
        printf("\n");

        int32_t nk = sample_kept(s, l, NULL, ids, pr);
        printf("K %d", nk);
        for (int32_t i = 0; i < nk; i++) printf(" %d %.17g", ids[i], pr[i]);
        printf("\n");

        struct sample_logprob *top = malloc((size_t)(n_top > 0 ? n_top : 1) * sizeof *top);
        float lp = 0.0f;
        int32_t nt = sample_logprobs(l, nv, 0, n_top, top, &lp);
        printf("L %.9g %d", (double)lp, nt);
        for (int32_t i = 0; i < nt; i++) printf(" %d %.9g", top[i].id, (double)top[i].logprob);
        printf("\n");

        free(top);
        anvil_sampler_free(s);
        free(hist);
        free(l);
        free(pl);
        free(ids);
        free(pr);
    }
    fclose(f);
    return 0;
}


/* ---------------------------------------------------------------------- */
/* ext: text cases for the general chain. A case is four lines:
 *   params key=value ...   (anvil_sampler_params fields by name; order=4,6
 *                           stage numbers; bias=id:value,... with -inf;
 *                           breakers=1,2|3 token lists split by '|')
 *   hist id ...            accepted before the draws (may be empty)
 *   logits v ...           n_vocab floats
 *   run XTC_WORD N         XTC's random word for K, and N public draws
 * Output per case:
 *   K n (id prob)*         the kept set with draw probabilities (XTC_WORD)
 *   D (token mu)*          N draws with the sampler's RNG from the same
 *                          logits, each accepted, and mirostat's mu after it */

static int set_param(struct anvil_sampler_params *p, const char *k, char *v) {
#define F(name, field) if (!strcmp(k, name)) { p->field = strtof(v, NULL); return 0; }
#define I(name, field) if (!strcmp(k, name)) { p->field = (int32_t)strtol(v, NULL, 10); return 0; }
    F("temperature", temperature) I("top_k", top_k) F("top_p", top_p) F("min_p", min_p)
    F("repeat_penalty", repeat_penalty) I("repeat_last_n", repeat_last_n)
    F("presence_penalty", presence_penalty) F("frequency_penalty", frequency_penalty)
    I("min_keep", min_keep) F("typical_p", typical_p) F("top_n_sigma", top_n_sigma)
    F("dry_multiplier", dry_multiplier) F("dry_base", dry_base)
    I("dry_allowed_length", dry_allowed_length) I("dry_last_n", dry_last_n)
    F("xtc_probability", xtc_probability) F("xtc_threshold", xtc_threshold)
    I("mirostat", mirostat) F("mirostat_tau", mirostat_tau) F("mirostat_eta", mirostat_eta)
#undef F
#undef I
    if (!strcmp(k, "seed")) {
        p->seed = strtoull(v, NULL, 0);
        return 0;
    }
    if (!strcmp(k, "order")) {
        for (char *t = strtok(v, ","); t && p->n_order < ANVIL_SAMPLER_MAX_ORDER; t = strtok(NULL, ","))
            p->order[p->n_order++] = (uint8_t)atoi(t);
        return 0;
    }
    if (!strcmp(k, "bias")) {
        for (char *t = strtok(v, ","); t && p->n_bias < ANVIL_SAMPLER_MAX_BIAS; t = strtok(NULL, ",")) {
            char *c = strchr(t, ':');
            if (!c) return 1;
            p->bias[p->n_bias].id = atoi(t);
            p->bias[p->n_bias].bias = strtof(c + 1, NULL);
            p->n_bias++;
        }
        return 0;
    }
    if (!strcmp(k, "breakers")) {
        char *save = NULL;
        for (char *b = strtok_r(v, "|", &save); b && p->n_dry_breakers < ANVIL_SAMPLER_MAX_BREAKERS;
             b = strtok_r(NULL, "|", &save)) {
            int32_t i = p->n_dry_breakers++, n = 0;
            for (char *t = strtok(b, ","); t && n < ANVIL_SAMPLER_MAX_BREAKER_LEN; t = strtok(NULL, ","))
                p->dry_breakers[i][n++] = atoi(t);
            p->dry_breaker_len[i] = n;
        }
        return 0;
    }
    return 1;
}

static char line[1 << 22];

static int run_ext(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        return 2;
    }
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "params", 6)) continue;
        struct anvil_sampler_params p = anvil_sampler_default_params();
        char *save = NULL;
        strtok_r(line, " \n", &save);
        for (char *kv; (kv = strtok_r(NULL, " \n", &save));) {
            char *eq = strchr(kv, '=');
            if (!eq) return 3;
            *eq = 0;
            if (set_param(&p, kv, eq + 1)) {
                fprintf(stderr, "unknown param %s\n", kv);
                return 3;
            }
        }
        static anvil_token hist[1 << 16];
        int32_t n_hist = 0;
        if (!fgets(line, sizeof line, f) || strncmp(line, "hist", 4)) return 3;
        for (char *t = strtok(line + 4, " \n"); t && n_hist < (1 << 16); t = strtok(NULL, " \n"))
            hist[n_hist++] = atoi(t);
        static float l[1 << 18];
        int32_t nv = 0;
        if (!fgets(line, sizeof line, f) || strncmp(line, "logits", 6)) return 3;
        for (char *t = strtok(line + 6, " \n"); t && nv < (1 << 18); t = strtok(NULL, " \n"))
            l[nv++] = strtof(t, NULL);
        uint64_t xw = 0;
        int nd = 0;
        if (!fgets(line, sizeof line, f) || sscanf(line, "run %" SCNu64 " %d", &xw, &nd) != 2)
            return 3;
        struct anvil_sampler *s = NULL;
        char err[160] = "";
        if (anvil_sampler_params_check(&p, err, sizeof err) != ANVIL_OK ||
            anvil_sampler_init(&p, nv, &s) != ANVIL_OK) {
            fprintf(stderr, "bad case: %s\n", err);
            return 3;
        }
        for (int32_t i = 0; i < n_hist; i++) anvil_sampler_accept(s, hist[i]);
        anvil_token *ids = malloc((size_t)nv * 4);
        double *pr = malloc((size_t)nv * 8);
        int32_t nk = s->ext ? sample_ext_kept(s, l, NULL, xw, ids, pr) : sample_kept(s, l, NULL, ids, pr);
        printf("K %d", nk);
        for (int32_t i = 0; i < nk; i++) printf(" %d %.17g", ids[i], pr[i]);
        printf("\nD");
        for (int i = 0; i < nd; i++) {
            anvil_token t = anvil_sampler_sample(s, l, NULL);
            anvil_sampler_accept(s, t);
            printf(" %d %.9g", t, s->ext ? (double)s->ext->mu : 0.0);
        }
        printf("\n");
        free(ids);
        free(pr);
        anvil_sampler_free(s);
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "rng")) {
        struct anvil_sampler_params p = anvil_sampler_default_params();
        p.seed = strtoull(argv[2], NULL, 0);
        struct anvil_sampler *s = NULL;
        if (anvil_sampler_init(&p, 1, &s) != ANVIL_OK) return 2;
        int n = atoi(argv[3]);
        for (int i = 0; i < n; i++) printf("%016" PRIx64 "\n", sample_rng_next(s));
        anvil_sampler_free(s);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "cases")) return run_cases(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "ext")) return run_ext(argv[2]);
    fprintf(stderr, "usage: tool_sampler rng SEED N | cases FILE | ext FILE\n");
    return 2;
}
