/*
 * bench_batched.c - `anvil bench --batched`: batched decode throughput the
 * way llama.cpp's llama-batched-bench measures it, so the two can be put
 * side by side (bench/bench_llamacpp_batched.py runs the peer).
 *
 * For each B in --npl, a fresh ctx with n_seq_max = B and n_ctx = PP + TG
 * per sequence (anvil's n_ctx is per sequence; the KV pool holds B of them):
 *   prefill  B sequences of PP prompt tokens, in chunks of --n-batch rows;
 *            T_PP = its wall time, S_PP = B*PP / T_PP;
 *   decode   TG steps of B rows (one per sequence), greedy: each row asks
 *            for ANVIL_OUT_ARGMAX and the argmax is fed back as the next
 *            token; T_TG = wall time of the TG steps, S_TG = B*TG / T_TG;
 *   total    T = T_PP + T_TG, N_KV = B*(PP + TG), S = N_KV / T
 * (batched-bench's definitions, prompt not shared).
 *
 * Prompts: the filler text below tokenized once (no BOS); sequence j reads
 * PP tokens from offset 37*j (wrapping), so every sequence has a distinct
 * prompt and sequence 0's prompt is the same for every B. batched-bench
 * feeds token 0 everywhere; the work per token is the same.
 *
 * Before the timed repetitions, one untimed warmup per B: the whole prefill
 * plus two decode steps (first touch of the KV pool, threads awake). The
 * timed decode loop must not allocate: the allocation counter is read
 * around it and a run that allocated reports nothing.
 *
 * --png draws S_PP and S_TG against B with bench/plot.py, with the rows of
 * --compare FILE (JSON lines of other engines, one series per "label").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "bench.h"
#include "bench_png.h"
#include "bench_util.h"
#include "core/core.h"

#define MAX_NPL 32

struct bopts {
    const char *model, *png, *compare;
    int npp, ntg, threads, reps, n_batch, kv_type;
    int npl[MAX_NPL], n_npl;
    bool json, dump_tokens;
};

struct bres {
    int npl;
    double t_pp, t_tg, s_pp, s_tg, s_pp_sd, s_tg_sd;
};

static const char FILLER[] =
    "A lighthouse keeper on a small island kept a notebook of every ship that passed. "
    "In spring the fishing boats came early, their engines coughing in the cold, and the "
    "gulls followed them out past the reef. In summer the ferries ran twice a day, loud with "
    "tourists who waved at the tower as if it might wave back. Autumn brought the cargo "
    "ships, long and slow, riding low with grain and timber, and the storms that made the "
    "lamp matter. The keeper trimmed the wick, wound the clockwork that turned the lens, and "
    "wrote down the wind, the sea state and the names painted on the hulls. Years later the "
    "notebooks filled a whole shelf, and a historian from the mainland read them cover to "
    "cover, finding in the plain entries a record of trade, weather and ordinary courage "
    "that no official archive had kept. ";

static void usage(FILE *f) {
    fprintf(f,
            "usage: anvil bench -m MODEL --batched [--npp 64] [--ntg 128] [--npl 1,4,16,32,64]\n"
            "                   [-t T] [-r REPS] [--n-batch N] [--kv-type f16|q8_0] [--json]\n"
            "                   [--png FILE [--compare FILE]]\n\n"
            "Batched decode throughput as llama.cpp's llama-batched-bench measures it: for\n"
            "each B in --npl, prefill B distinct prompts of --npp tokens, then --ntg greedy\n"
            "decode steps of B rows. Columns: PP, TG, B, N_KV = B*(PP+TG), T_PP s,\n"
            "S_PP = B*PP/T_PP, T_TG s, S_TG = B*TG/T_TG, T = T_PP+T_TG, S = N_KV/T.\n\n"
            "  --npp N         prompt tokens per sequence (default 64)\n"
            "  --ntg N         decode steps (generated tokens per sequence; default 128)\n"
            "  --npl B[,B...]  parallel sequences, one run each (default 1,4,16,32,64)\n"
            "  -t T            threads (default: online CPUs)\n"
            "  -r REPS         timed repetitions after one warmup; times are means (default 1)\n"
            "  --n-batch N     rows per prefill decode call (default 512)\n"
            "  --kv-type T     KV cache type: f16 (default) or q8_0\n"
            "  --json          one JSON object per line instead of the table\n"
            "  --png FILE      plot S_PP and S_TG against B\n"
            "  --compare FILE  with --png: also plot the JSON lines of FILE (e.g. from\n"
            "                  bench/bench_llamacpp_batched.py), one series per \"label\"\n"
            "Set ANVIL_KERNELS=ref|avx2|avx512 to force a kernel family.\n");
}

static int parse(int argc, char **argv, struct bopts *o) {
    *o = (struct bopts){.npp = 64, .ntg = 128, .reps = 1, .n_batch = 512,
                        .kv_type = ANVIL_TYPE_F16, .npl = {1, 4, 16, 32, 64}, .n_npl = 5};
    long v;
    const char *s;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--batched")) {
            continue;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return -1;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else if (!strcmp(a, "--dump-tokens")) { /* hidden: generated ids in the JSON */
            o->dump_tokens = true;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(o->model = cli_value("bench", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--png")) {
            if (!(o->png = cli_value("bench", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--compare")) {
            if (!(o->compare = cli_value("bench", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--npl")) {
            if (!(s = cli_value("bench", argc, argv, &i)) ||
                (o->n_npl = cli_int_list("bench", a, s, 1, 4096, o->npl, MAX_NPL)) < 0)
                return 2;
        } else if (!strcmp(a, "--kv-type")) {
            if (!(s = cli_value("bench", argc, argv, &i))) return 2;
            int t = anvil_type_from_name(s);
            if (t != ANVIL_TYPE_F16 && t != ANVIL_TYPE_Q8_0)
                return cli_fail("bench", "--kv-type must be f16 or q8_0, got '%s'", s);
            o->kv_type = t;
        } else if (!strcmp(a, "--npp") || !strcmp(a, "--ntg") || !strcmp(a, "-t") ||
                   !strcmp(a, "--threads") || !strcmp(a, "-r") || !strcmp(a, "--n-batch")) {
            long hi = !strcmp(a, "-t") || !strcmp(a, "--threads") ? 256
                      : !strcmp(a, "-r")                          ? 1000
                                                                  : 1 << 16;
            if (!(s = cli_value("bench", argc, argv, &i)) || !cli_int("bench", a, s, 1, hi, &v))
                return 2;
            if (!strcmp(a, "--npp")) o->npp = (int)v;
            else if (!strcmp(a, "--ntg")) o->ntg = (int)v;
            else if (!strcmp(a, "-r")) o->reps = (int)v;
            else if (!strcmp(a, "--n-batch")) o->n_batch = (int)v;
            else o->threads = (int)v;
        } else {
            return cli_fail("bench", "unknown option '%s' (see anvil bench --batched --help)", a);
        }
    }
    if (!o->model) return cli_fail("bench", "a model is required (-m FILE)");
    if (o->compare && !o->png) return cli_fail("bench", "--compare needs --png FILE");
    if (!o->threads) o->threads = cpu_count_online();
    return 0;
}

/* ---------------------------------------------------------------------- */
/* one B */

struct bufs {
    anvil_token *tok;  /* (B*PP) prefill rows, then reused for decode rows */
    int32_t *pos, *seq;
    int8_t *out;
    anvil_token *cur;  /* (B) last argmax of each sequence */
    anvil_token *gen;  /* (B, TG + 1) generated ids */
};

static bool progress_tty(void) {
    static int tty = -1;
    if (tty < 0) tty = isatty(STDERR_FILENO);
    return tty == 1;
}

/* Token k of sequence j's prompt. */
static anvil_token prompt_token(const anvil_token *ftok, int nf, int j, int k) {
    return ftok[(37 * j + k) % nf];
}

/* Prefill every sequence's prompt in chunks of n_batch rows; the first
 * generated token of each sequence (argmax of its last prompt row) goes
 * to cur[] and gen[j][0]. */
static anvil_status prefill(struct anvil_ctx *c, const struct bopts *o, int B, int n_batch,
                            const anvil_token *ftok, int nf, struct bufs *b) {
    int n = B * o->npp;
    for (int j = 0; j < B; j++)
        for (int k = 0; k < o->npp; k++) {
            int r = j * o->npp + k;
            b->tok[r] = prompt_token(ftok, nf, j, k);
            b->pos[r] = k;
            b->seq[r] = j;
            b->out[r] = k == o->npp - 1 ? ANVIL_OUT_ARGMAX : ANVIL_OUT_NONE;
        }
    for (int r0 = 0; r0 < n; r0 += n_batch) {
        int nr = n - r0 < n_batch ? n - r0 : n_batch;
        struct anvil_batch bt = {.n_tokens = nr, .token = b->tok + r0, .pos = b->pos + r0,
                                 .seq_id = b->seq + r0, .logits = b->out + r0};
        anvil_status st = anvil_decode(c, &bt);
        if (st != ANVIL_OK) return st;
        int k = 0;
        for (int r = r0; r < r0 + nr; r++)
            if (b->out[r] != ANVIL_OUT_NONE) {
                int j = b->seq[r];
                b->cur[j] = anvil_get_argmax(c, k++);
                b->gen[(size_t)j * (o->ntg + 1)] = b->cur[j];
            }
    }
    return ANVIL_OK;
}

/* n_steps greedy decode steps of B rows after the prompts. */
static anvil_status decode(struct anvil_ctx *c, const struct bopts *o, int B, int n_steps,
                           struct bufs *b) {
    for (int j = 0; j < B; j++) {
        b->seq[j] = j;
        b->out[j] = ANVIL_OUT_ARGMAX;
    }
    for (int i = 0; i < n_steps; i++) {
        for (int j = 0; j < B; j++) {
            b->tok[j] = b->cur[j];
            b->pos[j] = o->npp + i;
        }
        struct anvil_batch bt = {.n_tokens = B, .token = b->tok, .pos = b->pos, .seq_id = b->seq,
                                 .logits = b->out};
        anvil_status st = anvil_decode(c, &bt);
        if (st != ANVIL_OK) return st;
        for (int j = 0; j < B; j++) {
            b->cur[j] = anvil_get_argmax(c, j);
            b->gen[(size_t)j * (o->ntg + 1) + i + 1] = b->cur[j];
        }
        if (progress_tty() && (i % 8 == 7 || i == n_steps - 1))
            fprintf(stderr, "\ranvil bench --batched: B=%d decode %d/%d ", B, i + 1, n_steps);
    }
    return ANVIL_OK;
}

static void clear_all(struct anvil_ctx *c, int B) {
    for (int j = 0; j < B; j++) anvil_seq_truncate(c, j, 0);
}

/* One B's record to stdout (--json) and/or the chart's data file. */
static void print_json(const struct bopts *o, struct anvil_model *m, int n_batch,
                       const struct bres *r, const struct bufs *b, const anvil_token *ftok,
                       int nf, FILE *data) {
    const char *slash = strrchr(o->model, '/');
    struct bench_json j;
    bench_json_begin(&j, o->json ? stdout : NULL, data);
    bench_json_str(&j, "bench", "batched");
    bench_json_str(&j, "engine", "anvil");
    bench_json_str(&j, "label", "anvil");
    bench_json_str(&j, "model", anvil_model_desc(m));
    bench_json_str(&j, "model_file", slash ? slash + 1 : o->model);
    bench_json_str(&j, "quant", anvil_type_name(anvil_model_type(m)));
    bench_json_str(&j, "kernels", anvil_model_kernels(m));
    bench_json_int(&j, "threads", o->threads);
    bench_json_str(&j, "kv_type", o->kv_type == ANVIL_TYPE_Q8_0 ? "q8_0" : "f16");
    bench_json_int(&j, "n_batch", n_batch);
    bench_json_str(&j, "prompt", "distinct");
    bench_json_str(&j, "commit", bench_commit());
    bench_json_int(&j, "reps", o->reps);
    bench_json_int(&j, "npp", o->npp);
    bench_json_int(&j, "ntg", o->ntg);
    bench_json_int(&j, "npl", r->npl);
    bench_json_int(&j, "n_kv", r->npl * (o->npp + o->ntg));
    bench_json_num(&j, "t_pp_s", r->t_pp, 6);
    bench_json_num(&j, "s_pp_tok_s", r->s_pp, 2);
    bench_json_num(&j, "s_pp_sd", r->s_pp_sd, 2);
    bench_json_num(&j, "t_tg_s", r->t_tg, 6);
    bench_json_num(&j, "s_tg_tok_s", r->s_tg, 2);
    bench_json_num(&j, "s_tg_sd", r->s_tg_sd, 2);
    bench_json_num(&j, "t_s", r->t_pp + r->t_tg, 6);
    bench_json_num(&j, "s_tok_s", r->npl * (o->npp + o->ntg) / (r->t_pp + r->t_tg), 2);
    if (o->dump_tokens) {
        /* the prefill rows of b->tok were overwritten by the decode steps */
        for (int jj = 0; jj < r->npl; jj++)
            for (int k = 0; k < o->npp; k++)
                b->tok[(size_t)jj * o->npp + k] = prompt_token(ftok, nf, jj, k);
        bench_json_int_rows(&j, "prompts", b->tok, r->npl, o->npp);
        bench_json_int_rows(&j, "tokens", b->gen, r->npl, o->ntg + 1);
    }
    bench_json_end(&j);
}

/* Returns 0, 1 (runtime failure) or 2 (bad input). */
static int run_one(const struct bopts *o, struct anvil_model *m, int B, const anvil_token *ftok,
                   int nf, FILE *data, struct bres *res) {
    /* no bigger than the prefill, never under B: a decode step is one call of B rows */
    int n_batch = o->n_batch < B * o->npp ? o->n_batch : B * o->npp;
    if (n_batch < B) n_batch = B;
    struct anvil_ctx_params cp = anvil_ctx_default_params();
    cp.n_ctx = o->npp + o->ntg;
    cp.n_seq_max = B;
    cp.n_batch = n_batch;
    cp.n_outputs = B;
    cp.n_threads = o->threads;
    cp.kv_type = o->kv_type;
    struct anvil_ctx *c;
    char err[256];
    anvil_status st = anvil_ctx_init(m, &cp, &c, err, sizeof(err));
    if (st != ANVIL_OK) {
        fprintf(stderr, "anvil bench: cannot create a context for B=%d: %s\n", B, err);
        return 1;
    }
    size_t rows = (size_t)B * (size_t)o->npp;
    struct bufs b = {
        .tok = core_malloc(rows * sizeof(anvil_token)),
        .pos = core_malloc(rows * sizeof(int32_t)),
        .seq = core_malloc(rows * sizeof(int32_t)),
        .out = core_malloc(rows),
        .cur = core_malloc((size_t)B * sizeof(anvil_token)),
        .gen = core_calloc((size_t)B * (size_t)(o->ntg + 1), sizeof(anvil_token)),
    };
    double *spp = core_malloc((size_t)o->reps * sizeof(double));
    double *stg = core_malloc((size_t)o->reps * sizeof(double));
    double tpp = 0, ttg = 0;
    int rc = 0;
    if (!b.tok || !b.pos || !b.seq || !b.out || !b.cur || !b.gen || !spp || !stg) {
        fprintf(stderr, "anvil bench: out of memory\n");
        rc = 1;
        goto done;
    }
    for (int r = 0; r <= o->reps; r++) { /* r == 0: warmup */
        clear_all(c, B);
        if (!r || !progress_tty())
            fprintf(stderr, "anvil bench --batched: B=%d %s: prefill %d tokens, %d decode steps\n",
                    B, r ? "run" : "warmup", B * o->npp, r ? o->ntg : 2);
        double t0 = bench_wall_s();
        if ((st = prefill(c, o, B, n_batch, ftok, nf, &b)) != ANVIL_OK) break;
        double t1 = bench_wall_s();
        uint64_t allocs = core_alloc_count();
        double t2 = bench_wall_s();
        if ((st = decode(c, o, B, r ? o->ntg : 2, &b)) != ANVIL_OK) break;
        double t3 = bench_wall_s();
        if (core_alloc_count() != allocs) {
            fprintf(stderr, "anvil bench: the decode loop allocated memory (%llu calls): refusing "
                    "to report\n", (unsigned long long)(core_alloc_count() - allocs));
            rc = 1;
            goto done;
        }
        if (r) {
            tpp += (t1 - t0) / o->reps;
            ttg += (t3 - t2) / o->reps;
            spp[r - 1] = B * o->npp / (t1 - t0);
            stg[r - 1] = B * o->ntg / (t3 - t2);
        }
        if (progress_tty()) fprintf(stderr, "\n");
    }
    if (st != ANVIL_OK) {
        fprintf(stderr, "anvil bench: decode failed for B=%d: %s\n", B, anvil_ctx_errmsg(c));
        rc = 1;
        goto done;
    }
    *res = (struct bres){.npl = B, .t_pp = tpp, .t_tg = ttg, .s_pp = B * o->npp / tpp,
                         .s_tg = B * o->ntg / ttg};
    double mean;
    bench_mean_sd(spp, o->reps, &mean, &res->s_pp_sd);
    bench_mean_sd(stg, o->reps, &mean, &res->s_tg_sd);
    int n_kv = B * (o->npp + o->ntg);
    if (o->json || data) print_json(o, m, n_batch, res, &b, ftok, nf, data);
    if (!o->json) {
        printf("|%6d | %6d | %4d | %6d | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n", o->npp,
               o->ntg, B, n_kv, tpp, res->s_pp, ttg, res->s_tg, tpp + ttg, n_kv / (tpp + ttg));
        fflush(stdout);
    }
done:
    core_free(b.tok);
    core_free(b.pos);
    core_free(b.seq);
    core_free(b.out);
    core_free(b.cur);
    core_free(b.gen);
    core_free(spp);
    core_free(stg);
    anvil_ctx_free(c);
    return rc;
}

/* ---------------------------------------------------------------------- */

int bench_batched(int argc, char **argv) {
    struct bopts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc < 0 ? 0 : rc;
    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model *m;
    if (anvil_model_load(o.model, NULL, &m, err, sizeof(err)) != ANVIL_OK)
        return cli_fail("bench", "%s", err);
    anvil_token ftok[1024];
    int nf = anvil_tokenize(m, FILLER, strlen(FILLER), ftok, 1024, false, false);
    if (nf <= 0) {
        anvil_model_free(m);
        fprintf(stderr, "anvil bench: cannot tokenize the prompt text\n");
        return 1;
    }
    /* the chart: plot.py checks --compare now, before the run */
    const char *pargs[4] = {"--quant", anvil_type_name(anvil_model_type(m)), "--compare",
                            o.compare};
    struct bench_png png;
    if (o.png && (rc = bench_png_open(&png, "bench", "batched", o.png, pargs, o.compare ? 4 : 2))) {
        anvil_model_free(m);
        return rc;
    }
    FILE *data = o.png ? bench_png_data(&png) : NULL;
    if (!o.json) {
        printf("anvil batched decode: %s, %s, kernels %s, %d threads, KV %s, n_batch %d, "
               "distinct prompts, commit %s\n\n",
               anvil_model_desc(m), anvil_type_name(anvil_model_type(m)), anvil_model_kernels(m),
               o.threads, o.kv_type == ANVIL_TYPE_Q8_0 ? "q8_0" : "f16", o.n_batch, bench_commit());
        printf("|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |\n", "PP", "TG", "B",
               "N_KV", "T_PP s", "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
        printf("|-------|--------|------|--------|----------|----------|----------|----------|"
               "----------|----------|\n");
        fflush(stdout);
    }
    for (int i = 0; i < o.n_npl && !rc; i++) {
        struct bres r;
        rc = run_one(&o, m, o.npl[i], ftok, nf, data, &r);
    }
    if (o.png) {
        if (!rc) rc = bench_png_draw(&png);
        bench_png_close(&png);
    }
    anvil_model_free(m);
    return rc;
}
