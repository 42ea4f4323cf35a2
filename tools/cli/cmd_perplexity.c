/*
 * cmd_perplexity.c - `anvil perplexity`: perplexity of a model over a text,
 * and KL divergence against a saved run of another (unquantized) model,
 * the way llama-perplexity measures them, through the public API only
 * (anvil_decode, anvil_get_logits).
 *
 * Windows (as llama-perplexity): the text is tokenized once (BOS added
 * when the vocabulary asks for it) and cut into n_chunk = n_tokens / ctx
 * windows of ctx tokens; each window is decoded from an empty cache, its
 * first token replaced by BOS when the vocabulary adds one, and the
 * tokens of its second half are scored: the logits at positions
 * ctx/2 .. ctx-2 predict the tokens at ctx/2+1 .. ctx-1. Perplexity is
 * exp(mean negative log-likelihood) over every scored token; its error is
 * ppl * stderr(nll), as llama-perplexity prints it. So the numbers are
 * comparable with llama-perplexity's for the same text, -c and model.
 *
 * --save-logits FILE keeps, for every scored position, the log-probability
 * of the actual next token and the TOP_K most likely tokens with their
 * log-probabilities (not the full distribution: 49152-token vocabularies
 * would take ~100 KB per position); see the format below.
 * --kl-divergence FILE decodes the same tokens (read from FILE) with this
 * model and reports, against the saved run:
 *   - KL(base || this) per position, over the base's top-K tokens plus one
 *     bucket for the rest of the vocabulary. Merging tokens can only lower
 *     a KL divergence, so this is a lower bound of the full-vocabulary KL;
 *     with K = 128 the missing part is the divergence inside the base's
 *     tail (< 1e-3 of its mass on SmolLM2). Mean, median, p99, max.
 *   - the share of positions whose most likely token is the same;
 *   - dp = p_this(next) - p_base(next), the change of the probability of
 *     the actual next token: mean, RMS, p99 of |dp|, max |dp|;
 *   - both perplexities.
 * Model against itself gives KL 0, same top 100%, dp 0 exactly.
 *
 * Saved-logits file, little-endian:
 *   "ANVILKLD" u32 version (1) u32 n_vocab u32 n_ctx u32 top_k u32 n_chunk
 *   u32 n_tokens (= n_chunk * n_ctx), i32 tokens[n_tokens] (the windows,
 *   before the BOS substitution), then for each chunk and each of its
 *   n_ctx - 1 - n_ctx/2 scored positions: f32 logp_next, i32 ids[top_k],
 *   f32 logp[top_k] (descending).
 *
 * Output: the result on stdout (one JSON object with --json), a progress
 * bar on stderr. Exit 2 on bad usage or input (unreadable or too short a
 * text, a logits file of another model or text), 1 on runtime failure.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/core.h"

#define TOP_K 128
#define KLD_MAGIC "ANVILKLD"

struct opts {
    const char *model, *text, *save, *kl;
    long ctx, batch, threads, chunks;
    bool ctx_set, json;
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: anvil perplexity -m MODEL -f TEXT [options]\n"
            "       anvil perplexity -m MODEL --kl-divergence BASE_LOGITS [-f TEXT]\n"
            "\n"
            "Perplexity over TEXT in windows of --ctx tokens, scoring the second half of\n"
            "each window (as llama-perplexity does).\n"
            "\n"
            "options:\n"
            "  -m, --model FILE          GGUF model (required)\n"
            "  -f, --file TEXT           text file to score\n"
            "  -c, --ctx N               window size in tokens (default 512)\n"
            "  -b, --batch N             tokens per decode call (default: min(ctx, 512))\n"
            "      --chunks N            score only the first N windows\n"
            "  -t, --threads N           threads (default: all CPUs)\n"
            "      --save-logits FILE    save this run (top-%d log-probs per position) for\n"
            "                            a later --kl-divergence\n"
            "      --kl-divergence FILE  compare with a saved run: KL divergence, same top\n"
            "                            token, probability change of the next token\n"
            "      --json                print the result as one JSON object\n"
            "  -h, --help                this help\n"
            "\n"
            "Exit status: 0 ok, 1 runtime failure, 2 bad usage or input.\n",
            TOP_K);
}

// ----------------------------------------------------------------------------
// small helpers

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* percentile with linear interpolation over sorted v (as llama-perplexity) */
static double percentile(const float *v, size_t n, double frac) {
    if (n == 0) return 0.0;
    double p = frac * (double)(n - 1);
    size_t i = (size_t)p;
    p -= (double)i;
    return (1.0 - p) * v[i] + p * v[i + 1 < n ? i + 1 : n - 1];
}

/* mean and its standard error from a sum and a sum of squares */
static void mean_err(double s, double s2, size_t n, double *mean, double *err) {
    *mean = n ? s / (double)n : 0.0;
    double var = n > 1 ? s2 / (double)n - *mean * *mean : 0.0;
    *err = var > 0.0 && n > 1 ? sqrt(var / (double)(n - 1)) : 0.0;
}

struct rowstat {
    double lse; /* log sum exp of the row */
    float max;
    int argmax;
};

static void row_stats(const float *l, int n, struct rowstat *r) {
    float mx = l[0];
    int am = 0;
    for (int i = 1; i < n; i++)
        if (l[i] > mx) mx = l[i], am = i;
    double s = 0.0;
    for (int i = 0; i < n; i++) s += exp((double)l[i] - mx);
    r->max = mx;
    r->argmax = am;
    r->lse = mx + log(s);
}

/* the k largest entries of l, descending: a size-k min-heap */
static void top_k(const float *l, int n, int k, int32_t *ids) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m < k) {
            int j = m++;
            while (j > 0 && l[ids[(j - 1) / 2]] > l[i]) ids[j] = ids[(j - 1) / 2], j = (j - 1) / 2;
            ids[j] = i;
        } else if (l[i] > l[ids[0]]) {
            int j = 0;
            for (;;) {
                int c = 2 * j + 1;
                if (c >= m) break;
                if (c + 1 < m && l[ids[c + 1]] < l[ids[c]]) c++;
                if (l[ids[c]] >= l[i]) break;
                ids[j] = ids[c], j = c;
            }
            ids[j] = i;
        }
    }
    /* heap -> descending order (ties by id, for a stable file) */
    for (int a = 1; a < m; a++) {
        int32_t v = ids[a];
        int b = a;
        while (b > 0 && (l[ids[b - 1]] < l[v] || (l[ids[b - 1]] == l[v] && ids[b - 1] > v)))
            ids[b] = ids[b - 1], b--;
        ids[b] = v;
    }
}

struct progress {
    bool tty, quiet;
    double t0;
    int last_decile;
};

static void show_progress(struct progress *p, int done, int total, double ppl) {
    if (p->quiet) return;
    double el = time_now_s() - p->t0;
    double eta = done ? el / done * (total - done) : 0.0;
    if (p->tty) {
        char bar[31];
        int w = (int)(30.0 * done / total);
        for (int i = 0; i < 30; i++) bar[i] = i < w ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r\033[Kanvil perplexity: [%s] %d/%d chunks  ppl %.4f  %.0f s left",
                bar, done, total, ppl, eta);
        if (done == total) fputc('\n', stderr);
    } else if (done == total || 10 * done / total > p->last_decile) {
        fprintf(stderr, "anvil perplexity: %d/%d chunks  ppl %.4f  %.0f s left\n", done, total,
                ppl, eta);
        p->last_decile = 10 * done / total;
    }
}

// ----------------------------------------------------------------------------

static bool parse(int argc, char **argv, struct opts *o, int *rc) {
    *o = (struct opts){.ctx = 512};
    *rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v;
        long x;
#define VAL() \
    if (!(v = cli_value("perplexity", argc, argv, &i))) return false
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            *rc = 0;
            return false;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            VAL();
            o->model = v;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            VAL();
            o->text = v;
        } else if (!strcmp(a, "--save-logits")) {
            VAL();
            o->save = v;
        } else if (!strcmp(a, "--kl-divergence")) {
            VAL();
            o->kl = v;
        } else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) {
            VAL();
            if (!cli_int("perplexity", a, v, 8, 1 << 20, &x)) return false;
            o->ctx = x, o->ctx_set = true;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) {
            VAL();
            if (!cli_int("perplexity", a, v, 1, 1 << 20, &x)) return false;
            o->batch = x;
        } else if (!strcmp(a, "--chunks")) {
            VAL();
            if (!cli_int("perplexity", a, v, 1, 1 << 30, &x)) return false;
            o->chunks = x;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            VAL();
            if (!cli_int("perplexity", a, v, 1, 1024, &x)) return false;
            o->threads = x;
        } else if (!strcmp(a, "--json")) {
            o->json = true;
        } else {
            cli_fail("perplexity", "unknown option '%s' (see anvil perplexity --help)", a);
            return false;
        }
#undef VAL
    }
    if (!o->model) {
        cli_fail("perplexity", "a model is required (-m FILE)");
        return false;
    }
    if (!o->text && !o->kl) {
        cli_fail("perplexity", "a text is required (-f FILE), or --kl-divergence FILE");
        return false;
    }
    if (o->save && o->kl) {
        cli_fail("perplexity", "--save-logits and --kl-divergence cannot be combined");
        return false;
    }
    return true;
}

/* header of a saved-logits file */
struct kld_head {
    uint32_t version, n_vocab, n_ctx, top_k, n_chunk, n_tokens;
};

static bool read_head(FILE *f, struct kld_head *h) {
    char magic[8];
    uint32_t v[6];
    if (fread(magic, 1, 8, f) != 8 || memcmp(magic, KLD_MAGIC, 8) != 0) return false;
    if (fread(v, 4, 6, f) != 6) return false;
    *h = (struct kld_head){v[0], v[1], v[2], v[3], v[4], v[5]};
    return h->version == 1 && h->top_k >= 1 && h->top_k <= 1 << 16 && h->n_ctx >= 8 &&
           h->n_chunk >= 1 && (uint64_t)h->n_chunk * h->n_ctx == h->n_tokens;
}

int cmd_perplexity(int argc, char **argv) {
    struct opts o;
    int rc;
    if (!parse(argc, argv, &o, &rc)) return rc;

    rc = 1;
    struct anvil_model *m = NULL;
    struct anvil_ctx *c = NULL;
    FILE *fsave = NULL, *fbase = NULL;
    anvil_token *tok = NULL, *btok = NULL;
    int32_t *bpos = NULL, *bseq = NULL, *ids = NULL, *bids = NULL;
    int8_t *bout = NULL;
    float *klv = NULL, *dpv = NULL, *blogp = NULL, *rec = NULL;
    char *text = NULL;
    char err[ANVIL_ERRMSG_CAP] = "";
    struct progress pr = {.tty = isatty(2) != 0, .t0 = time_now_s(), .last_decile = 0};

    struct anvil_model_params mp = anvil_model_default_params();
    if (anvil_model_load(o.model, &mp, &m, err, sizeof(err)) != ANVIL_OK) {
        rc = cli_fail("perplexity", "%s", err);
        goto done;
    }
    const int n_vocab = anvil_model_n_vocab(m);

    /* tokens: from the saved run (KL mode) and/or the text */
    struct kld_head bh = {0};
    int32_t n_tok = 0;
    if (o.kl) {
        if (!(fbase = fopen(o.kl, "rb")) || !read_head(fbase, &bh)) {
            rc = cli_fail("perplexity", "%s: not a saved-logits file of anvil perplexity", o.kl);
            goto done;
        }
        if ((int)bh.n_vocab != n_vocab) {
            rc = cli_fail("perplexity", "%s was saved with a vocabulary of %u tokens, the model "
                          "has %d", o.kl, bh.n_vocab, n_vocab);
            goto done;
        }
        if (o.ctx_set && o.ctx != (long)bh.n_ctx) {
            rc = cli_fail("perplexity", "%s was saved with --ctx %u, not %ld", o.kl, bh.n_ctx,
                          o.ctx);
            goto done;
        }
        o.ctx = bh.n_ctx;
        if (!(tok = malloc((size_t)bh.n_tokens * sizeof(*tok)))) goto oom;
        if (fread(tok, sizeof(*tok), bh.n_tokens, fbase) != bh.n_tokens) {
            rc = cli_fail("perplexity", "%s is truncated", o.kl);
            goto done;
        }
        for (uint32_t i = 0; i < bh.n_tokens; i++)
            if (tok[i] < 0 || tok[i] >= n_vocab) {
                rc = cli_fail("perplexity", "%s holds token id %d, outside the vocabulary",
                              o.kl, tok[i]);
                goto done;
            }
        n_tok = (int32_t)bh.n_tokens;
    }
    if (o.text) {
        size_t len;
        if (!(text = cli_read_file(o.text, &len))) {
            rc = cli_fail("perplexity", "cannot read %s", o.text);
            goto done;
        }
        if (len > (size_t)1 << 30) {
            rc = cli_fail("perplexity", "%s is larger than 1 GiB", o.text);
            goto done;
        }
        int32_t need = anvil_tokenize(m, text, len, NULL, 0, true, false);
        if (need < 0) need = -need;
        anvil_token *t2 = malloc(((size_t)need + 1) * sizeof(*t2));
        if (!t2) goto oom;
        int32_t n2 = anvil_tokenize(m, text, len, t2, need + 1, true, false);
        if (o.kl) {
            /* the saved windows are a prefix of the text's tokens */
            bool same = n2 >= n_tok && !memcmp(t2, tok, (size_t)n_tok * sizeof(*tok));
            free(t2);
            if (!same) {
                rc = cli_fail("perplexity", "%s tokenizes differently from the run saved in %s",
                              o.text, o.kl);
                goto done;
            }
        } else {
            tok = t2, n_tok = n2;
        }
    }

    const int ctx = (int)o.ctx;
    int n_chunk = o.kl ? (int)bh.n_chunk : n_tok / ctx;
    if (o.chunks && o.chunks < n_chunk) n_chunk = (int)o.chunks;
    if (n_chunk < 1) {
        rc = cli_fail("perplexity", "%s tokenizes to %d tokens; one window needs --ctx %d",
                      o.text, n_tok, ctx);
        goto done;
    }
    const int first = ctx / 2, n_score = ctx - 1 - first;
    const int batch = (int)(o.batch ? o.batch : (ctx < 512 ? ctx : 512));

    /* does the vocabulary add BOS? then every window starts with it */
    anvil_token probe[4];
    bool add_bos = anvil_tokenize(m, "", 0, probe, 4, true, false) == 1 &&
                   probe[0] == anvil_token_bos(m);

    struct anvil_ctx_params cp = anvil_ctx_default_params();
    cp.n_ctx = ctx;
    cp.n_batch = batch;
    cp.n_outputs = batch;
    cp.n_threads = (int32_t)o.threads;
    char cerr[ANVIL_ERRMSG_CAP];
    anvil_status st = anvil_ctx_init(m, &cp, &c, cerr, sizeof(cerr));
    if (st != ANVIL_OK) {
        rc = cli_fail("perplexity", "cannot create a context of %d tokens: %s", ctx, cerr);
        goto done;
    }
    btok = malloc((size_t)batch * sizeof(*btok));
    bpos = malloc((size_t)batch * sizeof(*bpos));
    bseq = calloc((size_t)batch, sizeof(*bseq));
    bout = malloc((size_t)batch);
    ids = malloc(TOP_K * sizeof(*ids));
    rec = malloc((1 + 2 * (size_t)(o.kl ? bh.top_k : TOP_K)) * sizeof(float));
    if (!btok || !bpos || !bseq || !bout || !ids || !rec) goto oom;
    if (o.kl) {
        size_t n = (size_t)n_chunk * n_score;
        klv = malloc(n * sizeof(float));
        dpv = malloc(n * sizeof(float));
        bids = malloc(bh.top_k * sizeof(*bids));
        blogp = malloc(bh.top_k * sizeof(*blogp));
        if (!klv || !dpv || !bids || !blogp) goto oom;
    }
    if (o.save) {
        if (!(fsave = fopen(o.save, "wb"))) {
            rc = cli_fail("perplexity", "cannot create %s", o.save);
            goto done;
        }
        uint32_t h[6] = {1, (uint32_t)n_vocab, (uint32_t)ctx, TOP_K, (uint32_t)n_chunk,
                         (uint32_t)(n_chunk * ctx)};
        fwrite(KLD_MAGIC, 1, 8, fsave);
        fwrite(h, 4, 6, fsave);
        fwrite(tok, sizeof(*tok), (size_t)n_chunk * ctx, fsave);
    }

    /* sums: nll of this model, of the base, their product; KL; dp; same top */
    double s_nll = 0, s_nll2 = 0, s_b = 0, s_b2 = 0, s_nb = 0, s_kl = 0, s_kl2 = 0;
    double s_dp = 0, s_dp2 = 0, s_dp4 = 0;
    size_t count = 0, same_top = 0;
    const uint32_t bk = bh.top_k;
    for (int ch = 0; ch < n_chunk; ch++) {
        const int start = ch * ctx;
        anvil_seq_truncate(c, 0, 0);
        for (int b0 = 0; b0 < ctx; b0 += batch) {
            int nb = ctx - b0 < batch ? ctx - b0 : batch;
            for (int k = 0; k < nb; k++) {
                int p = b0 + k;
                btok[k] = (p == 0 && add_bos) ? anvil_token_bos(m) : tok[start + p];
                bpos[k] = p;
                /* logits for positions first .. ctx-2: each predicts p + 1 */
                bout[k] = p >= first && p <= ctx - 2 ? ANVIL_OUT_LOGITS : ANVIL_OUT_NONE;
            }
            struct anvil_batch ab = {nb, btok, bpos, bseq, bout};
            st = anvil_decode(c, &ab);
            if (st != ANVIL_OK) {
                /* the context's message says why; the status alone does not */
                const char *why = anvil_ctx_errmsg(c);
                if (pr.tty) fputc('\n', stderr); /* end the progress line first */
                cli_fail("perplexity", "decode failed: %s",
                         why && why[0] ? why : anvil_status_str(st));
                rc = 1; /* a run failure, not a usage error (cli_fail's 2) */
                goto done;
            }
            int row = 0;
            for (int k = 0; k < nb; k++) {
                if (bout[k] != ANVIL_OUT_LOGITS) continue;
                const float *l = anvil_get_logits(c, row++);
                const int next = tok[start + b0 + k + 1];
                struct rowstat rs;
                row_stats(l, n_vocab, &rs);
                const double nll = rs.lse - l[next];
                s_nll += nll, s_nll2 += nll * nll;
                count++;
                if (fsave) {
                    top_k(l, n_vocab, TOP_K, ids);
                    rec[0] = (float)-nll;
                    memcpy(rec + 1, ids, TOP_K * sizeof(float));
                    for (int j = 0; j < TOP_K; j++) rec[1 + TOP_K + j] = (float)(l[ids[j]] - rs.lse);
                    fwrite(rec, sizeof(float), 1 + 2 * TOP_K, fsave);
                }
                if (fbase) {
                    if (fread(rec, sizeof(float), 1 + 2 * (size_t)bk, fbase) != 1 + 2 * (size_t)bk) {
                        if (pr.tty) fputc('\n', stderr);
                        rc = cli_fail("perplexity", "%s is truncated", o.kl);
                        goto done;
                    }
                    const double lp_base_next = rec[0];
                    memcpy(bids, rec + 1, bk * sizeof(*bids));
                    memcpy(blogp, rec + 1 + bk, bk * sizeof(float));
                    /* KL over the base's top-k plus one bucket for the rest */
                    double kl = 0.0, pb_sum = 0.0, q_sum = 0.0;
                    for (uint32_t j = 0; j < bk; j++) {
                        if (bids[j] < 0 || bids[j] >= n_vocab) {
                            if (pr.tty) fputc('\n', stderr);
                            rc = cli_fail("perplexity", "%s holds token id %d, outside the "
                                          "vocabulary", o.kl, bids[j]);
                            goto done;
                        }
                        const double lpb = blogp[j], lq = l[bids[j]] - rs.lse;
                        const double pb = exp(lpb);
                        kl += pb * (lpb - lq);
                        pb_sum += pb, q_sum += exp(lq);
                    }
                    const double pb_rest = 1.0 - pb_sum, q_rest = 1.0 - q_sum;
                    if (pb_rest > 1e-12 && q_rest > 1e-300) kl += pb_rest * log(pb_rest / q_rest);
                    if (kl < 0.0) kl = 0.0; /* rounding of terms that cancel */
                    klv[count - 1] = (float)kl;
                    s_kl += kl, s_kl2 += kl * kl;
                    same_top += bids[0] == rs.argmax;
                    const double nll_b = -lp_base_next;
                    s_b += nll_b, s_b2 += nll_b * nll_b, s_nb += nll * nll_b;
                    /* at the saved (float) precision: a model against its own
                     * run gives exactly 0 */
                    const double dp = exp((double)(float)-nll) - exp(lp_base_next);
                    dpv[count - 1] = (float)dp;
                    s_dp += dp, s_dp2 += dp * dp, s_dp4 += dp * dp * dp * dp;
                }
            }
        }
        show_progress(&pr, ch + 1, n_chunk, exp(s_nll / (double)count));
    }
    if (fsave && (ferror(fsave) | fclose(fsave))) {
        fsave = NULL;
        rc = cli_fail("perplexity", "writing %s failed", o.save);
        goto done;
    }
    fsave = NULL;

    double mnll, enll;
    mean_err(s_nll, s_nll2, count, &mnll, &enll);
    const double ppl = exp(mnll), ppl_err = ppl * enll;
    double kl_mean = 0, kl_err = 0, kl_med = 0, kl_p99 = 0, kl_max = 0, top = 0, top_err = 0;
    double dp_mean = 0, dp_err = 0, dp_rms = 0, dp_p99 = 0, dp_max = 0, pb = 0, pb_err = 0;
    double lr = 0, lr_err = 0;
    if (o.kl) {
        mean_err(s_kl, s_kl2, count, &kl_mean, &kl_err);
        qsort(klv, count, sizeof(float), cmp_float);
        kl_med = percentile(klv, count, 0.5), kl_p99 = percentile(klv, count, 0.99);
        kl_max = klv[count - 1];
        top = (double)same_top / (double)count;
        top_err = count > 1 ? sqrt(top * (1.0 - top) / (double)(count - 1)) : 0.0;
        mean_err(s_dp, s_dp2, count, &dp_mean, &dp_err);
        dp_rms = sqrt(s_dp2 / (double)count);
        for (size_t i = 0; i < count; i++) dpv[i] = fabsf(dpv[i]);
        qsort(dpv, count, sizeof(float), cmp_float);
        dp_p99 = percentile(dpv, count, 0.99), dp_max = dpv[count - 1];
        double mb, eb;
        mean_err(s_b, s_b2, count, &mb, &eb);
        pb = exp(mb), pb_err = pb * eb;
        /* ln(PPL/PPL_base) with the covariance of the two nll series */
        double cov = count > 1 ? (s_nb / (double)count - mnll * mb) / (double)(count - 1) : 0.0;
        lr = mnll - mb;
        double v = enll * enll + eb * eb - 2.0 * cov;
        lr_err = v > 0 ? sqrt(v) : 0.0;
    }

    if (o.json) {
        printf("{\"model\": \"%s\", \"ctx\": %d, \"chunks\": %d, \"scored\": %zu, "
               "\"ppl\": %.6f, \"ppl_err\": %.6f",
               o.model, ctx, n_chunk, count, ppl, ppl_err);
        if (o.kl)
            printf(", \"base_ppl\": %.6f, \"base_ppl_err\": %.6f, \"ln_ppl_ratio\": %.6f, "
                   "\"ln_ppl_ratio_err\": %.6f, \"kl_mean\": %.8f, \"kl_err\": %.8f, "
                   "\"kl_median\": %.8f, \"kl_p99\": %.8f, \"kl_max\": %.8f, \"kl_top_k\": %u, "
                   "\"same_top\": %.6f, \"same_top_err\": %.6f, \"dp_mean\": %.8f, "
                   "\"dp_err\": %.8f, \"dp_rms\": %.8f, \"dp_abs_p99\": %.8f, "
                   "\"dp_abs_max\": %.8f",
                   pb, pb_err, lr, lr_err, kl_mean, kl_err, kl_med, kl_p99, kl_max, bk, top,
                   top_err, dp_mean, dp_err, dp_rms, dp_p99, dp_max);
        printf("}\n");
    } else {
        printf("perplexity: %.4f +/- %.4f  (%d chunks of %d tokens, %zu scored)\n", ppl, ppl_err,
               n_chunk, ctx, count);
        if (o.kl) {
            printf("base perplexity: %.4f +/- %.4f  ln(PPL/PPL_base): %.6f +/- %.6f\n", pb,
                   pb_err, lr, lr_err);
            printf("KL divergence: mean %.6f +/- %.6f  median %.6f  p99 %.6f  max %.6f  "
                   "(base top-%u + rest)\n",
                   kl_mean, kl_err, kl_med, kl_p99, kl_max, bk);
            printf("same top token: %.3f%% +/- %.3f%%\n", 100.0 * top, 100.0 * top_err);
            printf("dp (next token probability, this - base): mean %.3f%% +/- %.3f%%  RMS %.3f%%"
                   "  p99 |dp| %.3f%%  max |dp| %.3f%%\n",
                   100.0 * dp_mean, 100.0 * dp_err, 100.0 * dp_rms, 100.0 * dp_p99,
                   100.0 * dp_max);
        }
    }
    rc = 0;
    goto done;

oom:
    rc = 1;
    cli_fail("perplexity", "out of memory");
done:
    if (fsave) {
        fclose(fsave);
        remove(o.save);
    }
    if (fbase) fclose(fbase);
    free(text);
    free(tok);
    free(btok);
    free(bpos);
    free(bseq);
    free(bout);
    free(ids);
    free(bids);
    free(blogp);
    free(rec);
    free(klv);
    free(dpv);
    anvil_ctx_free(c);
    anvil_model_free(m);
    return rc;
}
