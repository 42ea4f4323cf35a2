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
 * --profile (both): the share of the time in each category of anvil.h's
 * anvil_prof_cat (matmul, attention, norms and element-wise ops, the
 * decode call around the pass, sampling, the scheduler), from the
 * counters of anvil_ctx_set_profile / anvil_engine_set_profile. pp/tg
 * also measure what the counters cost: 2x the repetitions, profiling off
 * and on in ABBA order (the machine's load drifts), reported side by
 * side with the on/off ratio of each adjacent pair.
 *
 * Benchmarks never gate tests; they refuse to report when the allocation
 * counter shows mallocs inside the timed decode loop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "bench.h"
#include "bench_route.h"
#include "bench_util.h"
#include "core/core.h"
#include "kernels/ops.h"

/* ---------------------------------------------------------------------- */
/* profile by category (--profile) */

static const char *const PROF_KEY[ANVIL_PROF_COUNT] = {
    "prof_matmul", "prof_attn",   "prof_norm",   "prof_router", "prof_experts",
    "prof_scatter", "prof_decode", "prof_sample", "prof_sched"};

static void prof_add(struct anvil_prof *acc, const struct anvil_prof *p) {
    for (int k = 0; k < ANVIL_PROF_COUNT; k++) acc->s[k] += p->s[k];
    acc->total_s += p->total_s;
    acc->n_calls += p->n_calls;
    acc->n_clock_reads += p->n_clock_reads;
}

/* Nanoseconds of one clock read (the profiler's time_now_s), best of 5
 * runs of 100k: with anvil_prof.n_clock_reads it bounds what profiling
 * costs a call, whatever the machine's load does to the A/B timings. */
static double clock_read_ns(void) {
    static double best = 0.0;
    if (best > 0.0) return best;
    for (int r = 0; r < 5; r++) {
        double t0 = time_now_s(), sink = 0.0;
        for (int i = 0; i < 100000; i++) sink += time_now_s();
        double ns = (time_now_s() - t0) * 1e9 / 100000.0;
        if (sink != 0.0 && (best == 0.0 || ns < best)) best = ns;
    }
    return best;
}

/* Upper bound of the profiler's share of the profiled time. */
static double prof_cost_bound(const struct anvil_prof *p) {
    return p->total_s > 0.0 ? (double)p->n_clock_reads * clock_read_ns() * 1e-9 / p->total_s : 0.0;
}

static double prof_share(const struct anvil_prof *p, int k) {
    return p->total_s > 0.0 ? p->s[k] / p->total_s : 0.0;
}

/* The shares as JSON fields (0..1), plus milliseconds per profiled call. */
static void prof_json(struct bench_json *j, const struct anvil_prof *p) {
    for (int k = 0; k < ANVIL_PROF_COUNT; k++) bench_json_num(j, PROF_KEY[k], prof_share(p, k), 4);
    bench_json_num(j, "prof_ms_per_call", p->n_calls ? 1e3 * p->total_s / (double)p->n_calls : 0.0, 4);
    bench_json_num(j, "prof_clock_read_ns", clock_read_ns(), 1);
    bench_json_num(j, "prof_clock_reads_per_call",
                   p->n_calls ? (double)p->n_clock_reads / (double)p->n_calls : 0.0, 1);
    bench_json_num(j, "prof_cost_bound", prof_cost_bound(p), 5);
}

static bool is_moe_cat(int k) {
    return k == ANVIL_PROF_ROUTER || k == ANVIL_PROF_EXPERTS || k == ANVIL_PROF_SCATTER;
}

/* A mixture of experts ran in this profile: the table shows the router,
 * experts and scatter columns (a dense model's table has none). */
static bool prof_moe(const struct anvil_prof *p) {
    for (int k = 0; k < ANVIL_PROF_COUNT; k++)
        if (is_moe_cat(k) && p->s[k] > 0.0) return true;
    return false;
}

/* "| 71.2% | ..." for the table; categories a benchmark never runs ('-'). */
static void prof_cells(const struct anvil_prof *p, bool engine, bool moe) {
    for (int k = 0; k < ANVIL_PROF_COUNT; k++) {
        if (!moe && is_moe_cat(k)) continue;
        if (!engine && (k == ANVIL_PROF_SAMPLE || k == ANVIL_PROF_SCHED)) printf(" %9s |", "-");
        else printf(" %8.1f%% |", 100.0 * prof_share(p, k));
    }
}

static void prof_header(const char *first, const char *last, bool moe) {
    printf("| %-24s | %9s | %9s | %9s |", first, "matmul", "attention", "norms+elt");
    if (moe) printf(" %9s | %9s | %9s |", "router", "experts", "scatter");
    printf(" %9s | %9s | %9s |%s\n", "decode", "sampling", "scheduler", last);
    printf("|--------------------------|-----------|-----------|-----------|");
    if (moe) printf("-----------|-----------|-----------|");
    printf("-----------|-----------|-----------|");
}

/* ---------------------------------------------------------------------- */
/* single stream: pp / tg */

struct pp_tg_opts {
    const char *model;
    const char *kernels;
    int n_prompt, n_gen, n_threads, reps;
    bool json, profile;
};

/* One test's numbers: tok/s with profiling off; with --profile also on,
 * the on/off ratio of ABBA-ordered pairs, and the categories. */
struct pp_tg_res {
    double mean, sd, mean_on, sd_on, ratio_med, ratio_lo, ratio_hi;
    struct anvil_prof prof;
    struct bench_route route; /* a mixture of experts' routing, over the profiled reps */
};

/* the kernel family, "+amx" when its packed prefill runs on AMX */
static const char *kernels_label(struct anvil_model *m, bool *amx) {
    const char *k = anvil_model_kernels(m);
    *amx = !strcmp(k, "avx512") && kn_amx_active();
    return *amx ? "avx512+amx" : k;
}

static void print_row(const struct pp_tg_opts *o, struct anvil_model *m, const char *test,
                      const struct pp_tg_res *r) {
    bool amx;
    const char *kl = kernels_label(m, &amx);
    if (o->json) {
        struct bench_json j;
        bench_json_begin(&j, stdout, NULL);
        bench_json_str(&j, "test", test);
        bench_json_int(&j, "threads", o->n_threads);
        bench_json_num(&j, "tok_s", r->mean, 3);
        bench_json_num(&j, "tok_s_sd", r->sd, 3);
        bench_json_str(&j, "model", anvil_model_desc(m));
        bench_json_str(&j, "quant", anvil_type_name(anvil_model_type(m)));
        bench_json_str(&j, "kernels", anvil_model_kernels(m));
        bench_json_bool(&j, "amx", amx);
        bench_json_int(&j, "reps", o->reps);
        bench_json_str(&j, "commit", bench_commit());
        if (o->profile) {
            prof_json(&j, &r->prof);
            bench_route_json(&j, &r->route);
            bench_json_num(&j, "tok_s_prof_on", r->mean_on, 3);
            bench_json_num(&j, "tok_s_prof_on_sd", r->sd_on, 3);
            bench_json_num(&j, "prof_on_off_ratio", r->ratio_med, 4);
            bench_json_num(&j, "prof_on_off_ratio_min", r->ratio_lo, 4);
            bench_json_num(&j, "prof_on_off_ratio_max", r->ratio_hi, 4);
        }
        bench_json_end(&j);
    } else {
        printf("| %-44s | %5s | %7d | %-10s | %6s | %10.2f ± %6.2f |\n", anvil_model_desc(m),
               anvil_type_name(anvil_model_type(m)), o->n_threads, kl, test, r->mean, r->sd);
        fflush(stdout);
    }
}

/* Print the --profile table of the tests run (after the speed table). */
static void print_profile(const struct pp_tg_opts *o, const char *const *tests,
                          const struct pp_tg_res *res, int n) {
    if (o->json || !o->profile || n == 0) return;
    printf("\nprofile: share of decode time by category (%d threads, profiled repetitions); "
           "throughput with profiling off and on, %d repetitions each in ABBA order, and the "
           "on/off ratio of each pair (median, min-max); bound: clock reads x %.0f ns per read, "
           "over the time\n\n", o->n_threads, o->reps, clock_read_ns());
    bool moe = false;
    for (int i = 0; i < n; i++) moe = moe || prof_moe(&res[i].prof);
    prof_header("test", " t/s off             | t/s on              | on/off (min-max)       |"
                        "   bound |", moe);
    printf("---------------------|---------------------|------------------------|---------|\n");
    for (int i = 0; i < n; i++) {
        printf("| %-24s |", tests[i]);
        prof_cells(&res[i].prof, false, moe);
        printf(" %8.2f ± %7.2f | %8.2f ± %7.2f | %.3f (%.3f-%.3f)    | %6.3f%% |\n", res[i].mean,
               res[i].sd, res[i].mean_on, res[i].sd_on, res[i].ratio_med, res[i].ratio_lo,
               res[i].ratio_hi, 100.0 * prof_cost_bound(&res[i].prof));
    }
    fflush(stdout);
}

/* Time reps repetitions of one test (after a warmup), profiling off; with
 * o->profile, 2*reps in ABBA order (off on on off ...), the counters kept
 * over the "on" ones. n_tok tokens per repetition; prefill: one batch of
 * n_tok rows, else n_tok single-row decodes. Returns 0 or an exit status. */
static int time_test(const struct pp_tg_opts *o, const struct anvil_model *m, struct anvil_ctx *c,
                     bool prefill, int n_tok,
                     const anvil_token *tok, const int32_t *pos, const int32_t *seq, double *t,
                     struct pp_tg_res *res) {
    int n_rep = o->profile ? 2 * o->reps : o->reps;
    double *t_on = t + o->reps;
    int n_off = 0, n_on = 0;
    memset(res, 0, sizeof(*res));
    if (o->profile && !bench_route_init(&res->route, m, c, bench_route_get_ctx))
        return cli_fail("bench", "out of memory");
    for (int r = -1; r < n_rep; r++) { /* r == -1 is the warmup */
        bool on = r >= 0 && o->profile && (r % 4 == 1 || r % 4 == 2);
        anvil_seq_truncate(c, 0, 0);
        anvil_ctx_set_profile(c, on);
        uint64_t allocs = core_alloc_count();
        double t0 = bench_wall_s();
        for (int i = 0; i < (prefill ? 1 : n_tok); i++) {
            struct anvil_batch b = {.n_tokens = prefill ? n_tok : 1, .token = tok + i,
                                    .pos = pos + i, .seq_id = seq};
            if (anvil_decode(c, &b) != ANVIL_OK)
                return cli_fail("bench", "decode failed: %s", anvil_ctx_errmsg(c));
        }
        double tps = n_tok / (bench_wall_s() - t0);
        if (!prefill && core_alloc_count() != allocs)
            return cli_fail("bench", "the decode loop allocated memory (%llu calls): refusing "
                            "to report", (unsigned long long)(core_alloc_count() - allocs));
        if (on) {
            struct anvil_prof p;
            anvil_ctx_get_profile(c, &p);
            prof_add(&res->prof, &p);
            bench_route_add(&res->route, c, bench_route_get_ctx);
            anvil_ctx_set_profile(c, false);
            t_on[n_on++] = tps;
        } else if (r >= 0) {
            t[n_off++] = tps;
        }
    }
    bench_mean_sd(t, n_off, &res->mean, &res->sd);
    if (o->profile) {
        bench_mean_sd(t_on, n_on, &res->mean_on, &res->sd_on);
        /* pairs in time order: the k-th off with the k-th on */
        double *ratio = t_on + o->reps;
        for (int k = 0; k < n_on; k++) ratio[k] = t_on[k] / t[k];
        res->ratio_med = bench_percentile(ratio, n_on, 0.5);
        res->ratio_lo = ratio[0];
        res->ratio_hi = ratio[n_on - 1];
    }
    return 0;
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
    anvil_token *tok = core_malloc((size_t)n_max * sizeof(anvil_token));
    int32_t *pos = core_malloc((size_t)n_max * sizeof(int32_t));
    int32_t *seq = core_calloc((size_t)n_max, sizeof(int32_t));
    double *t = core_malloc((size_t)(3 * o->reps + 1) * sizeof(double));
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    int n_vocab = anvil_model_n_vocab(m), rc = 0, n_res = 0;
    struct pp_tg_res res[2];
    char names[2][32];
    const char *tests[2];
    if (!tok || !pos || !seq || !t) {
        fprintf(stderr, "anvil bench: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int i = 0; i < n_max; i++) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        tok[i] = (anvil_token)(rng % (uint64_t)n_vocab);
        pos[i] = i;
    }
    if (!o->json) {
        printf("| %-44s | %5s | %7s | %-10s | %6s | %19s |\n", "model", "type", "threads",
               "kernels", "test", "t/s");
        printf("|----------------------------------------------|-------|---------|------------|"
               "--------|---------------------|\n");
    }
    for (int k = 0; k < 2; k++) {
        int n_tok = k == 0 ? o->n_prompt : o->n_gen;
        if (n_tok <= 0) continue;
        snprintf(names[n_res], sizeof(names[n_res]), "%s%d", k == 0 ? "pp" : "tg", n_tok);
        tests[n_res] = names[n_res];
        rc = time_test(o, m, c, k == 0, n_tok, tok, pos, seq, t, &res[n_res]);
        n_res++;
        if (rc) goto done;
        print_row(o, m, names[n_res - 1], &res[n_res - 1]);
    }
    print_profile(o, tests, res, n_res);
    if (!o->json && o->profile) {
        struct bench_route rt[2];
        for (int i = 0; i < n_res; i++) rt[i] = res[i].route;
        bench_route_table(tests, rt, n_res);
    }
done:
    for (int i = 0; i < n_res; i++) bench_route_free(&res[i].route);
    core_free(tok);
    core_free(pos);
    core_free(seq);
    core_free(t);
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
    double t_submit, t_first, t_last;
    double *gaps; /* (cap_gaps) seconds between consecutive tokens */
    int n_gaps, cap_gaps, n_gen, done;
};

struct scenario_result {
    int in_tokens, out_tokens;
    double wall_s, total_tok_s, prefill_tok_s, decode_tok_s;
    double ttft_p50_ms, ttft_p99_ms, itl_p50_ms, itl_p99_ms, peak_rss_mb;
    int kv_blocks_used, preemptions;
};

static void on_event(void *user, const struct anvil_event *ev) {
    struct req_rec *r = user;
    double now = bench_wall_s();
    if (ev->type == ANVIL_EVENT_TOKEN) {
        if (r->n_gen == 0) r->t_first = now;
        else if (r->n_gaps < r->cap_gaps) r->gaps[r->n_gaps++] = now - r->t_last;
        r->t_last = now;
        r->n_gen++;
    } else {
        r->done = 1;
    }
}

/* The scenario's record: one table row, or one JSON line to stdout (json)
 * and/or to the chart's data file (plot). */
static void print_scenario(const struct scenario *sc, struct anvil_model *m, int n_threads,
                           const struct scenario_result *r, const struct anvil_prof *prof,
                           bool json, FILE *plot) {
    if (json || plot) {
        struct bench_json j;
        bench_json_begin(&j, json ? stdout : NULL, plot);
        bench_json_str(&j, "scenario", sc->name);
        bench_json_str(&j, "model", anvil_model_desc(m));
        bench_json_str(&j, "quant", anvil_type_name(anvil_model_type(m)));
        bench_json_int(&j, "threads", n_threads);
        bench_json_str(&j, "kernels", anvil_model_kernels(m));
        bench_json_str(&j, "commit", bench_commit());
        bench_json_int(&j, "requests", sc->n_req);
        bench_json_int(&j, "in_tokens", r->in_tokens);
        bench_json_int(&j, "out_tokens", r->out_tokens);
        bench_json_num(&j, "wall_s", r->wall_s, 3);
        bench_json_num(&j, "total_tok_s", r->total_tok_s, 2);
        bench_json_num(&j, "prefill_tok_s", r->prefill_tok_s, 2);
        bench_json_num(&j, "decode_tok_s", r->decode_tok_s, 2);
        bench_json_num(&j, "ttft_p50_ms", r->ttft_p50_ms, 1);
        bench_json_num(&j, "ttft_p99_ms", r->ttft_p99_ms, 1);
        bench_json_num(&j, "itl_p50_ms", r->itl_p50_ms, 2);
        bench_json_num(&j, "itl_p99_ms", r->itl_p99_ms, 2);
        bench_json_num(&j, "peak_rss_mb", r->peak_rss_mb, 1);
        bench_json_int(&j, "kv_blocks_used", r->kv_blocks_used);
        bench_json_int(&j, "preemptions", r->preemptions);
        if (prof) prof_json(&j, prof);
        bench_json_end(&j);
    }
    if (!json) {
        printf("%-24s wall %7.2f s | total %8.1f tok/s (in %7.1f, out %7.1f) | TTFT p50 %7.0f "
               "p99 %7.0f ms | ITL p50 %6.1f p99 %6.1f ms | RSS %5.0f MB | KV blocks %d\n",
               sc->name, r->wall_s, r->total_tok_s, r->prefill_tok_s, r->decode_tok_s,
               r->ttft_p50_ms, r->ttft_p99_ms, r->itl_p50_ms, r->itl_p99_ms, r->peak_rss_mb,
               r->kv_blocks_used);
        fflush(stdout);
    }
}

int bench_run_scenario(const char *model_path, const char *kernels, int n_threads,
                       const char *name, bool json, FILE *plot, struct anvil_prof *prof) {
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
    anvil_token ftok[2048]; /* byte-level vocabularies need one token per byte */
    int nf = anvil_tokenize(m, FILLER, strlen(FILLER), ftok, 2048, false, false);
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
    struct req_rec *recs = core_calloc((size_t)sc->n_req, sizeof(*recs));
    anvil_token *prompt = core_malloc((size_t)max_len * sizeof(anvil_token));
    double *ttft = NULL, *itl = NULL;
    int rc = 0;
    if (!recs || !prompt) goto oom;
    for (int i = 0; i < sc->n_req; i++) {
        recs[i].cap_gaps = sc->n_gen;
        if (!(recs[i].gaps = core_malloc((size_t)sc->n_gen * sizeof(double)))) goto oom;
    }
    if (prof) anvil_engine_set_profile(e, true);
    double t0 = bench_wall_s();
    for (int i = 0; i < sc->n_req; i++) {
        int len = sc->prompt_len[i % sc->n_pattern];
        for (int k = 0; k < len; k++) prompt[k] = ftok[(i * 37 + k) % nf];
        total_in += len;
        recs[i].t_submit = bench_wall_s();
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
    double wall = bench_wall_s() - t0;
    int total_out = 0, n_gaps = 0;
    for (int i = 0; i < sc->n_req; i++) {
        total_out += recs[i].n_gen;
        n_gaps += recs[i].n_gaps;
    }
    ttft = core_malloc((size_t)sc->n_req * sizeof(double));
    itl = core_malloc((size_t)(n_gaps > 0 ? n_gaps : 1) * sizeof(double));
    if (!ttft || !itl) goto oom;
    int k = 0;
    for (int i = 0; i < sc->n_req; i++) {
        ttft[i] = (recs[i].t_first - recs[i].t_submit) * 1e3;
        for (int j = 0; j < recs[i].n_gaps; j++) itl[k++] = recs[i].gaps[j] * 1e3;
    }
    struct anvil_engine_stats st;
    anvil_engine_get_stats(e, &st);
    struct scenario_result r = {
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
    };
    if (prof) anvil_engine_get_profile(e, prof);
    print_scenario(sc, m, n_threads, &r, prof, json, plot);
    if (plot) {
        struct bench_json j;
        bench_json_begin(&j, plot, NULL);
        bench_json_str(&j, "bench", "scenario_samples");
        bench_json_str(&j, "scenario", sc->name);
        bench_json_nums(&j, "ttft_ms", ttft, sc->n_req, 3);
        bench_json_nums(&j, "itl_ms", itl, n_gaps, 3);
        bench_json_end(&j);
    }
    goto done;
oom:
    fprintf(stderr, "anvil bench: out of memory\n");
    rc = 1;
done:
    for (int i = 0; recs && i < sc->n_req; i++) core_free(recs[i].gaps);
    core_free(recs);
    core_free(prompt);
    core_free(ttft);
    core_free(itl);
    anvil_engine_free(e);
    anvil_model_free(m);
    return rc;
}

void bench_print_scenario_profiles(const char *const *names, const struct anvil_prof *prof, int n) {
    printf("\nprofile: share of step time by category (engine steps: the forward pass, the "
           "decode call around it, sampling, the scheduler)\n\n");
    bool moe = false;
    for (int i = 0; i < n; i++) moe = moe || prof_moe(&prof[i]);
    prof_header("scenario", " ms/step |   bound |", moe);
    printf("---------|---------|\n");
    for (int i = 0; i < n; i++) {
        printf("| %-24s |", names[i]);
        prof_cells(&prof[i], true, moe);
        printf(" %7.2f | %6.3f%% |\n",
               prof[i].n_calls ? 1e3 * prof[i].total_s / (double)prof[i].n_calls : 0.0,
               100.0 * prof_cost_bound(&prof[i]));
    }
    fflush(stdout);
}

int bench_scenario_count(void) { return N_SCENARIOS; }
const char *bench_scenario_name(int i) { return scenarios[i].name; }

/* ---------------------------------------------------------------------- */

int bench_single_stream(const char *model, const char *kernels, int n_prompt, int n_gen,
                        int n_threads, int reps, bool json, bool profile) {
    struct pp_tg_opts o = {.model = model, .kernels = kernels, .n_prompt = n_prompt,
                           .n_gen = n_gen, .n_threads = n_threads, .reps = reps, .json = json,
                           .profile = profile};
    return run_pp_tg(&o);
}
