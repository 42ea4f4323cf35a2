/*
 * tool_sampler.c - drives the sampler for tests/py/test_sampler.py.
 *
 *   tool_sampler rng SEED N     first N outputs of the sampler RNG (hex)
 *   tool_sampler cases FILE     run every case in FILE (format below)
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
    fprintf(stderr, "usage: tool_sampler rng SEED N | cases FILE\n");
    return 2;
}
