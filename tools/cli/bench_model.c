/*
 * bench_model.c - model benchmarks of `anvil bench`:
 *
 *   single stream (llama-bench style): pp<N> = one prompt of N tokens in
 *   one batch; tg<N> = N tokens decoded one at a time from an empty cache.
 *   Mean +- sd over -r repetitions after a warmup.
 *
 *   serving scenarios (../shared/SCENARIOS.md) through the engine: all
 *   requests submitted at t=0, greedy, EOS ignored, prompts cut from one
 *   filler text to exact lengths. Reported per scenario: wall time,
 *   throughputs, TTFT and inter-token latency percentiles, peak RSS and
 *   peak KV blocks. Throughputs follow the usual serving convention:
 *   total_tok_s = (prompt + generated tokens) / wall, prefill_tok_s =
 *   prompt tokens / wall, decode_tok_s = generated tokens / wall.
 *
 * Benchmarks never gate tests; they refuse to run when the allocation
 * counter shows mallocs inside the timed decode loop.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"
#include "cli.h"
#include "core/core.h"

#ifndef ANVIL_COMMIT
#define ANVIL_COMMIT "unknown"
#endif

const char *bench_commit(void) { return ANVIL_COMMIT; }

double bench_peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

static void mean_sd(const double *x, int n, double *mean, double *sd) {
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++) s += x[i];
    *mean = s / n;
    for (int i = 0; i < n; i++) ss += (x[i] - *mean) * (x[i] - *mean);
    *sd = n > 1 ? sqrt(ss / (n - 1)) : 0.0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_percentile(double *x, int n, double q) {
    if (n == 0) return 0.0;
    qsort(x, (size_t)n, sizeof(double), cmp_double);
    double pos = q * (n - 1);
    int i = (int)pos;
    double f = pos - i;
    return i + 1 < n ? x[i] * (1 - f) + x[i + 1] * f : x[i];
}

/* ---------------------------------------------------------------------- */
/* single stream: pp / tg */

struct pp_tg_opts {
    const char *model;
    const char *kernels;
    int n_prompt, n_gen, n_threads, reps;
    bool json;
};

static void print_row(const struct pp_tg_opts *o, struct anvil_model *m, const char *test,
                      double mean, double sd) {
    if (o->json) {
        printf("{\"test\": \"%s\", \"threads\": %d, \"tok_s\": %.3f, \"tok_s_sd\": %.3f, "
               "\"model\": \"%s\", \"quant\": \"%s\", \"kernels\": \"%s\", \"reps\": %d, "
               "\"commit\": \"%s\"}\n",
               test, o->n_threads, mean, sd, anvil_model_desc(m),
               anvil_type_name(anvil_model_type(m)), anvil_model_kernels(m), o->reps,
               bench_commit());
    } else {
        printf("| %-44s | %5s | %7d | %-7s | %6s | %10.2f ± %6.2f |\n", anvil_model_desc(m),
               anvil_type_name(anvil_model_type(m)), o->n_threads, anvil_model_kernels(m), test,
               mean, sd);
    }
    fflush(stdout);
}

static int run_pp_tg(const struct pp_tg_opts *o) {
    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model_params mp = anvil_model_default_params();
    mp.kernels = o->kernels;
    struct anvil_model *m;
    if (anvil_model_load(o->model, &mp, &m, err, sizeof(err)) != ANVIL_OK)
        return cli_fail("bench", "%s", err);
    struct anvil_ctx_params cp = anvil_ctx_default_params();
    cp.n_ctx = o->n_prompt + o->n_gen + 16;
    cp.n_batch = o->n_prompt > 0 ? o->n_prompt : 1;
    cp.n_threads = o->n_threads;
    struct anvil_ctx *c;
    if (anvil_ctx_init(m, &cp, &c, err, sizeof(err)) != ANVIL_OK) {
        anvil_model_free(m);
        return cli_fail("bench", "cannot create a context: %s", err);
    }
    int n_max = o->n_prompt > o->n_gen ? o->n_prompt : o->n_gen;
    anvil_token *tok = malloc((size_t)n_max * sizeof(anvil_token));
    int32_t *pos = malloc((size_t)n_max * sizeof(int32_t));
    int32_t *seq = calloc((size_t)n_max, sizeof(int32_t));
    double *t = malloc((size_t)(o->reps + 1) * sizeof(double));
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int n_vocab = anvil_model_n_vocab(m), rc = 0;
    for (int i = 0; i < n_max; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        tok[i] = (anvil_token)(rng % (uint64_t)n_vocab);
        pos[i] = i;
    }
    if (!o->json) {
        printf("| %-44s | %5s | %7s | %-7s | %6s | %19s |\n", "model", "type", "threads",
               "kernels", "test", "t/s");
        printf("|----------------------------------------------|-------|---------|---------|"
               "--------|---------------------|\n");
    }
    if (o->n_prompt > 0) {
        for (int r = 0; r <= o->reps; r++) { /* r == 0 is the warmup */
            anvil_seq_truncate(c, 0, 0);
            struct anvil_batch b = {.n_tokens = o->n_prompt, .token = tok, .pos = pos, .seq_id = seq};
            double t0 = time_now_s();
            if (anvil_decode(c, &b) != ANVIL_OK) {
                rc = cli_fail("bench", "decode failed: %s", anvil_ctx_errmsg(c));
                goto done;
            }
            t[r] = o->n_prompt / (time_now_s() - t0);
        }
        double mean, sd;
        mean_sd(t + 1, o->reps, &mean, &sd);
        char name[32];
        snprintf(name, sizeof(name), "pp%d", o->n_prompt);
        print_row(o, m, name, mean, sd);
    }
    if (o->n_gen > 0) {
        for (int r = 0; r <= o->reps; r++) {
            anvil_seq_truncate(c, 0, 0);
            uint64_t allocs = anvil_alloc_count();
            double t0 = time_now_s();
            for (int i = 0; i < o->n_gen; i++) {
                struct anvil_batch b = {.n_tokens = 1, .token = tok + i, .pos = pos + i, .seq_id = seq};
                if (anvil_decode(c, &b) != ANVIL_OK) {
                    rc = cli_fail("bench", "decode failed: %s", anvil_ctx_errmsg(c));
                    goto done;
                }
            }
            t[r] = o->n_gen / (time_now_s() - t0);
            if (anvil_alloc_count() != allocs) {
                rc = cli_fail("bench", "the decode loop allocated memory (%llu calls): refusing "
                              "to report", (unsigned long long)(anvil_alloc_count() - allocs));
                goto done;
            }
        }
        double mean, sd;
        mean_sd(t + 1, o->reps, &mean, &sd);
        char name[32];
        snprintf(name, sizeof(name), "tg%d", o->n_gen);
        print_row(o, m, name, mean, sd);
    }
done:
    free(tok);
    free(pos);
    free(seq);
    free(t);
    anvil_ctx_free(c);
    anvil_model_free(m);
    return rc;
}

/* ---------------------------------------------------------------------- */
/* serving scenarios */

struct scenario {
    const char *name;
    int n_req, n_gen;
    int prompt_len[8]; /* repeating pattern; one entry = all the same */
    int n_pattern;
};

static const struct scenario scenarios[] = {
    {"decode_heavy_b32", 32, 256, {64}, 1},
    {"large_batch_short_b128", 128, 64, {48}, 1},
    {"balanced_b32", 32, 128, {256}, 1},
    {"prefill_heavy_b16", 16, 16, {1024}, 1},
    {"long_prefill_b4", 4, 8, {2048}, 1},
    {"mixed_prefill_b32", 32, 64, {32, 64, 96, 128, 192, 256, 384, 512}, 8},
    {"long_decode_b32", 32, 1024, {512}, 1},
    {"single_stream", 1, 128, {512}, 1},
};
#define N_SCENARIOS (int)(sizeof(scenarios) / sizeof(scenarios[0]))

static const char FILLER[] =
    "The history of computing is a story of people who wanted to think faster than their "
    "hands could write. Early mechanical calculators added and multiplied numbers with gears, "
    "and the difference engine promised tables without human error. Electronic machines "
    "replaced relays with vacuum tubes, then transistors, then integrated circuits that put "
    "millions of switches on a sliver of silicon. Programmers moved from wiring panels to "
    "assembly language, from assembly to compiled languages, and from single machines to "
    "networks that span the planet. Each step made computation cheaper and more abundant, "
    "and each step changed what people expected a computer to do. Today a phone holds more "
    "memory than the mainframes of the past, and a language model can draft a letter, "
    "summarise a report or explain a proof. Yet the principles remain: data must be stored, "
    "moved and transformed, and the speed of the whole is set by its slowest part. ";

struct req_rec {
    struct bench_scn *b;
    double t_submit, t_first, t_last;
    double *gaps;
    int n_gaps, cap_gaps, n_gen, done;
};

struct bench_scn {
    double t0;
};

static void on_event(void *user, const struct anvil_event *ev) {
    struct req_rec *r = user;
    double now = time_now_s();
    if (ev->type == ANVIL_EVENT_TOKEN) {
        if (r->n_gen == 0) r->t_first = now;
        else if (r->n_gaps < r->cap_gaps) r->gaps[r->n_gaps++] = now - r->t_last;
        r->t_last = now;
        r->n_gen++;
    } else {
        r->done = 1;
    }
}

int bench_run_scenario(const char *model_path, const char *kernels, int n_threads,
                       const char *name, bool json, struct bench_scenario_result *res) {
    const struct scenario *sc = NULL;
    for (int i = 0; i < N_SCENARIOS; i++)
        if (!strcmp(scenarios[i].name, name)) sc = &scenarios[i];
    if (!sc) return cli_fail("bench", "unknown scenario '%s' (see anvil bench --help)", name);
    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model_params mp = anvil_model_default_params();
    mp.kernels = kernels;
    struct anvil_model *m;
    if (anvil_model_load(model_path, &mp, &m, err, sizeof(err)) != ANVIL_OK)
        return cli_fail("bench", "%s", err);

    /* prompts: the filler tokenized once, repeated, each request starting
     * at its own offset so that no two prompts are identical */
    int max_len = 0, total_in = 0;
    for (int i = 0; i < sc->n_pattern; i++)
        if (sc->prompt_len[i] > max_len) max_len = sc->prompt_len[i];
    anvil_token ftok[512];
    int nf = anvil_tokenize(m, FILLER, strlen(FILLER), ftok, 512, false, false);
    if (nf <= 0) {
        anvil_model_free(m);
        return cli_fail("bench", "cannot tokenize the filler text");
    }
    struct anvil_engine_params ep = anvil_engine_default_params();
    ep.n_threads = n_threads;
    ep.max_running = sc->n_req < 128 ? sc->n_req : 128;
    ep.n_ctx = max_len + sc->n_gen + 8;
    struct anvil_engine *e;
    if (anvil_engine_init(m, &ep, &e, err, sizeof(err)) != ANVIL_OK) {
        anvil_model_free(m);
        return cli_fail("bench", "cannot create the engine: %s", err);
    }
    struct req_rec *recs = calloc((size_t)sc->n_req, sizeof(*recs));
    anvil_token *prompt = malloc((size_t)max_len * sizeof(anvil_token));
    int rc = 0;
    double t0 = time_now_s();
    for (int i = 0; i < sc->n_req; i++) {
        int len = sc->prompt_len[i % sc->n_pattern];
        for (int k = 0; k < len; k++) prompt[k] = ftok[(i * 37 + k) % nf];
        total_in += len;
        recs[i].cap_gaps = sc->n_gen;
        recs[i].gaps = malloc((size_t)sc->n_gen * sizeof(double));
        recs[i].t_submit = time_now_s();
        struct anvil_request_params rp = {.prompt = prompt, .n_prompt = len,
                                          .max_tokens = sc->n_gen, .ignore_eos = true};
        rp.sampling = anvil_sampler_default_params();
        rp.sampling.temperature = 0.0f; /* greedy, as SCENARIOS.md specifies */
        if (anvil_engine_submit(e, &rp, on_event, &recs[i], NULL, err, sizeof(err)) != ANVIL_OK) {
            rc = cli_fail("bench", "submit failed: %s", err);
            goto done;
        }
    }
    int32_t peak_blocks = 0;
    for (;;) {
        int32_t active;
        anvil_engine_step(e, &active);
        struct anvil_engine_stats st;
        anvil_engine_get_stats(e, &st);
        if (st.kv_blocks_used > peak_blocks) peak_blocks = st.kv_blocks_used;
        if (active == 0) break;
    }
    double wall = time_now_s() - t0;
    int total_out = 0, n_gaps = 0;
    for (int i = 0; i < sc->n_req; i++) {
        total_out += recs[i].n_gen;
        n_gaps += recs[i].n_gaps;
    }
    double *ttft = malloc((size_t)sc->n_req * sizeof(double));
    double *itl = malloc((size_t)(n_gaps > 0 ? n_gaps : 1) * sizeof(double));
    int k = 0;
    for (int i = 0; i < sc->n_req; i++) {
        ttft[i] = (recs[i].t_first - recs[i].t_submit) * 1e3;
        for (int j = 0; j < recs[i].n_gaps; j++) itl[k++] = recs[i].gaps[j] * 1e3;
    }
    struct anvil_engine_stats st;
    anvil_engine_get_stats(e, &st);
    struct bench_scenario_result r = {
        .name = sc->name,
        .n_req = sc->n_req,
        .in_tokens = total_in,
        .out_tokens = total_out,
        .wall_s = wall,
        .total_tok_s = (total_in + total_out) / wall,
        .prefill_tok_s = total_in / wall,
        .decode_tok_s = total_out / wall,
        .ttft_p50_ms = bench_percentile(ttft, sc->n_req, 0.50),
        .ttft_p99_ms = bench_percentile(ttft, sc->n_req, 0.99),
        .itl_p50_ms = bench_percentile(itl, n_gaps, 0.50),
        .itl_p99_ms = bench_percentile(itl, n_gaps, 0.99),
        .peak_rss_mb = bench_peak_rss_mb(),
        .kv_blocks_used = peak_blocks,
        .preemptions = (int)st.n_preemptions,
        .ttft_ms = ttft,
        .n_ttft = sc->n_req,
        .itl_ms = itl,
        .n_itl = n_gaps,
    };
    if (json) {
        printf("{\"scenario\": \"%s\", \"model\": \"%s\", \"quant\": \"%s\", \"threads\": %d, "
               "\"kernels\": \"%s\", \"commit\": \"%s\", \"requests\": %d, \"in_tokens\": %d, "
               "\"out_tokens\": %d, \"wall_s\": %.3f, \"total_tok_s\": %.2f, "
               "\"prefill_tok_s\": %.2f, \"decode_tok_s\": %.2f, \"ttft_p50_ms\": %.1f, "
               "\"ttft_p99_ms\": %.1f, \"itl_p50_ms\": %.2f, \"itl_p99_ms\": %.2f, "
               "\"peak_rss_mb\": %.1f, \"kv_blocks_used\": %d, \"preemptions\": %d}\n",
               r.name, anvil_model_desc(m), anvil_type_name(anvil_model_type(m)), n_threads,
               anvil_model_kernels(m), bench_commit(), r.n_req, r.in_tokens, r.out_tokens,
               r.wall_s, r.total_tok_s, r.prefill_tok_s, r.decode_tok_s, r.ttft_p50_ms,
               r.ttft_p99_ms, r.itl_p50_ms, r.itl_p99_ms, r.peak_rss_mb, r.kv_blocks_used,
               r.preemptions);
    } else {
        printf("%-24s wall %7.2f s | total %8.1f tok/s (in %7.1f, out %7.1f) | TTFT p50 %7.0f "
               "p99 %7.0f ms | ITL p50 %6.1f p99 %6.1f ms | RSS %5.0f MB | KV blocks %d\n",
               r.name, r.wall_s, r.total_tok_s, r.prefill_tok_s, r.decode_tok_s, r.ttft_p50_ms,
               r.ttft_p99_ms, r.itl_p50_ms, r.itl_p99_ms, r.peak_rss_mb, r.kv_blocks_used);
    }
    fflush(stdout);
    if (res) {
        *res = r; /* the caller frees ttft_ms / itl_ms */
    } else {
        free(ttft);
        free(itl);
    }
done:
    for (int i = 0; i < sc->n_req; i++) free(recs[i].gaps);
    free(recs);
    free(prompt);
    anvil_engine_free(e);
    anvil_model_free(m);
    return rc;
}

int bench_scenario_count(void) { return N_SCENARIOS; }
const char *bench_scenario_name(int i) { return scenarios[i].name; }

/* ---------------------------------------------------------------------- */

int bench_single_stream(const char *model, const char *kernels, int n_prompt, int n_gen,
                        int n_threads, int reps, bool json) {
    struct pp_tg_opts o = {.model = model, .kernels = kernels, .n_prompt = n_prompt,
                           .n_gen = n_gen, .n_threads = n_threads, .reps = reps, .json = json};
    return run_pp_tg(&o);
}
