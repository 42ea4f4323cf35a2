/*
 * cmd_embed.c - `anvil embed`: one embedding per input text (arguments,
 * or one text per line of --file), all run as one batched anvil_embed
 * call; printed as a JSON array of arrays or a plain matrix (one row per
 * input, space-separated floats).
 *
 * --tokens reads each input as whitespace-separated token ids instead of
 * text (for tests that must not depend on a tokenizer). Pooling none
 * (--pooling none, or the file's pooling_type 0) prints one vector per
 * token: JSON an array per input of its tokens' vectors, the matrix one
 * line per token with an empty line after each input. Ranking documents
 * against a query is `anvil rerank` (cmd_rerank.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: anvil embed -m MODEL [options] TEXT...\n\n"
            "  -m, --model FILE      GGUF model (its <arch>.pooling_type says how to pool)\n"
            "  -f, --file FILE       read the inputs from FILE, one per line (empty lines skipped)\n"
            "      --pooling P       none (one vector per token), mean, cls, last, or rank\n"
            "                        (one score per input, with the model's rank head);\n"
            "                        default: the model's\n"
            "      --no-normalize    do not L2-normalize (default: normalize)\n"
            "      --format F        json (default) or matrix\n"
            "      --tokens          inputs are token ids (\"1 2 3\"), not text\n"
            "      --no-special      do not add the tokenizer's BOS/EOS\n"
            "  -b, --batch N         rows per forward pass (default 512)\n"
            "      --seqs N          sequences per forward pass (default 64)\n"
            "  -t, --threads N       threads (default: every online CPU)\n"
            "      --kernels K       auto, ref, avx2 or avx512\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int pooling_of(const char *s) {
    static const char *const names[] = {"none", "mean", "cls", "last", "rank"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) return i;
    return -2;
}

/* Token ids of one input of --tokens; count, -1 when it is not a list of
 * ids, -2 when it holds more than cap. */
static int32_t parse_ids(const char *s, anvil_token *out, int32_t cap) {
    int32_t n = 0;
    while (*s) {
        while (*s == ' ' || *s == '\t' || *s == ',') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > INT32_MAX) return -1;
        if (n == cap) return -2;
        out[n++] = (anvil_token)v;
        s = end;
    }
    return n;
}

int cmd_embed(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *kernels = NULL, *fmt = "json";
    int pooling = ANVIL_POOL_UNSPECIFIED;
    bool normalize = true, tokens = false, special = true;
    long batch = 512, threads = 0, seqs_max = 64;
    const char **texts = calloc((size_t)argc + 1, sizeof(*texts));
    int n_texts = 0;
    if (!texts) return cli_fail("embed", "out of memory");
    int rc = 2;
    char *fbuf = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(texts);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value("embed", argc, argv, &i))) goto out;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_value("embed", argc, argv, &i))) goto out;
        } else if (!strcmp(a, "--kernels")) {
            if (!(kernels = cli_value("embed", argc, argv, &i))) goto out;
        } else if (!strcmp(a, "--format")) {
            if (!(fmt = cli_value("embed", argc, argv, &i))) goto out;
            if (strcmp(fmt, "json") && strcmp(fmt, "matrix")) {
                cli_fail("embed", "--format must be json or matrix, not '%s'", fmt);
                goto out;
            }
        } else if (!strcmp(a, "--pooling")) {
            if (!(v = cli_value("embed", argc, argv, &i))) goto out;
            pooling = pooling_of(v);
            if (pooling < 0) {
                cli_fail("embed", "--pooling must be none, mean, cls, last or rank, not '%s'", v);
                goto out;
            }
        } else if (!strcmp(a, "--no-normalize")) {
            normalize = false;
        } else if (!strcmp(a, "--normalize")) {
            normalize = true;
        } else if (!strcmp(a, "--tokens")) {
            tokens = true;
        } else if (!strcmp(a, "--no-special")) {
            special = false;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) {
            if (!(v = cli_value("embed", argc, argv, &i)) ||
                !cli_int("embed", "--batch", v, 1, 1 << 16, &batch))
                goto out;
        } else if (!strcmp(a, "--seqs")) {
            if (!(v = cli_value("embed", argc, argv, &i)) ||
                !cli_int("embed", "--seqs", v, 1, 4096, &seqs_max))
                goto out;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value("embed", argc, argv, &i)) ||
                !cli_int("embed", "--threads", v, 0, 1024, &threads))
                goto out;
        } else if (a[0] == '-' && a[1]) {
            cli_fail("embed", "unknown option '%s' (see anvil embed --help)", a);
            goto out;
        } else {
            texts[n_texts++] = a;
        }
    }
    if (!model) {
        cli_fail("embed", "a model is required (-m FILE)");
        goto out;
    }
    if (file && !cli_read_lines("embed", file, &fbuf, &texts, &n_texts)) goto out;
    if (n_texts == 0) {
        cli_fail("embed", "no input: give texts as arguments or --file FILE");
        goto out;
    }

    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model_params mp = anvil_model_default_params();
    mp.kernels = kernels;
    struct anvil_model *m = NULL;
    struct anvil_ctx *c = NULL;
    anvil_token **seqs = calloc((size_t)n_texts, sizeof(*seqs));
    int32_t *lens = calloc((size_t)n_texts, sizeof(*lens));
    float *vec = NULL;
    if (!seqs || !lens) {
        cli_fail("embed", "out of memory");
        goto done;
    }
    if (anvil_model_load(model, &mp, &m, err, sizeof(err)) != ANVIL_OK) {
        cli_fail("embed", "%s", err); /* a file anvil cannot load is bad input: exit 2 */
        rc = 2;
        goto done;
    }
    if (pooling == ANVIL_POOL_UNSPECIFIED && anvil_model_pooling(m) == ANVIL_POOL_UNSPECIFIED) {
        cli_fail("embed", "the model does not say how to pool (no %s): give --pooling",
                 "<arch>.pooling_type");
        goto done;
    }
    for (int i = 0; i < n_texts; i++) {
        int32_t cap = (int32_t)batch + 1;
        if (!(seqs[i] = malloc((size_t)cap * sizeof(anvil_token)))) {
            cli_fail("embed", "out of memory");
            goto done;
        }
        int32_t n = tokens ? parse_ids(texts[i], seqs[i], cap)
                           : anvil_tokenize(m, texts[i], strlen(texts[i]), seqs[i], cap, special,
                                            false);
        if (n < 0 || n > batch) { /* -(needed) from anvil_tokenize, -2 from parse_ids */
            cli_fail("embed", "input %d is %s", i,
                     n == -1 && tokens ? "not a list of token ids"
                                       : "longer than the batch (--batch N)");
            goto done;
        }
        if (n == 0) {
            cli_fail("embed", "input %d has no tokens", i);
            goto done;
        }
        lens[i] = n;
    }
    struct anvil_ctx_params cp = anvil_ctx_default_params();
    cp.n_batch = (int32_t)batch;
    cp.n_outputs = (int32_t)batch;
    cp.n_ctx = (int32_t)batch;
    cp.n_seq_max = n_texts < seqs_max ? n_texts : (int32_t)seqs_max;
    cp.n_threads = (int32_t)threads;
    if (anvil_ctx_init(m, &cp, &c, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "anvil embed: %s\n", err);
        rc = 1;
        goto done;
    }
    int eff = pooling == ANVIL_POOL_UNSPECIFIED ? anvil_model_pooling(m) : pooling;
    int ne = eff == ANVIL_POOL_RANK ? 1 : anvil_model_n_embd(m); /* rank: one score */
    bool per_tok = eff == ANVIL_POOL_NONE;
    int64_t n_rows = anvil_embed_rows(m, eff, lens, n_texts);
    if (!(vec = malloc((size_t)n_rows * ne * sizeof(float)))) {
        cli_fail("embed", "out of memory");
        goto done;
    }
    double t0 = now_s();
    anvil_status st =
        anvil_embed(c, (const anvil_token *const *)seqs, lens, n_texts, pooling, normalize, vec);
    double t_embed = now_s() - t0;
    if (st != ANVIL_OK) {
        fprintf(stderr, "anvil embed: %s\n", anvil_ctx_errmsg(c));
        rc = st == ANVIL_ERR_INVALID || st == ANVIL_ERR_UNSUPPORTED ? 2 : 1;
        goto done;
    }
    bool json = !strcmp(fmt, "json");
    if (json) fputc('[', stdout);
    for (int i = 0, row = 0; i < n_texts; i++) {
        int k = per_tok ? lens[i] : 1; /* this input's rows */
        if (json && per_tok) fputs(i ? ",[" : "[", stdout);
        for (int r = 0; r < k; r++, row++) {
            if (json) fputs((per_tok ? r : i) ? ",[" : "[", stdout);
            for (int j = 0; j < ne; j++)
                printf(json ? (j ? ",%.9g" : "%.9g") : (j ? " %.9g" : "%.9g"),
                       (double)vec[(size_t)row * ne + j]);
            fputs(json ? "]" : "\n", stdout);
        }
        if (per_tok) fputs(json ? "]" : "\n", stdout);
    }
    if (json) fputs("]\n", stdout);
    rc = fflush(stdout) ? 1 : 0;
    if (getenv("ANVIL_EMBED_TIME")) /* bench/bench_embed.py: the embedding time alone */
        fprintf(stderr, "anvil embed: %d inputs, %.6f s\n", n_texts, t_embed);
done:
    free(vec);
    if (seqs)
        for (int i = 0; i < n_texts; i++) free(seqs[i]);
    free(seqs);
    free(lens);
    anvil_ctx_free(c);
    anvil_model_free(m);
out:
    free(fbuf);
    free(texts);
    return rc;
}
