/*
 * cmd_rerank.c - `anvil rerank -m MODEL --query Q DOC...`: scores each
 * document against the query with a reranker (a model whose
 * <arch>.pooling_type is rank: a classification head on the pair), all
 * pairs in one batched anvil_embed call, and prints them as JSON sorted by
 * score, best first: [{"index": i, "relevance_score": s}, ...] (index is
 * the document's place in the input, as /v1/rerank answers).
 *
 * Pairs are built by anvil_rank_pair (BOS when the vocabulary adds one,
 * query, separator, document, separator). --file reads one document per
 * line; --top-n keeps the best N. What it does not do: echo documents back
 * (the caller has them, by index).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: anvil rerank -m MODEL --query TEXT [options] DOCUMENT...\n\n"
            "  -m, --model FILE      GGUF reranker (<arch>.pooling_type rank, with its cls head)\n"
            "  -q, --query TEXT      the query every document is scored against\n"
            "  -f, --file FILE       read the documents from FILE, one per line (empty lines skipped)\n"
            "      --top-n N         print the N best only (default: all)\n"
            "  -b, --batch N         rows per forward pass (default 512)\n"
            "      --seqs N          pairs per forward pass (default 64)\n"
            "  -t, --threads N       threads (default: every online CPU)\n"
            "      --kernels K       auto, ref, avx2 or avx512\n");
}

struct scored {
    int index;
    float score;
};

/* best first; equal scores keep the input order */
static int by_score(const void *a, const void *b) {
    const struct scored *x = a, *y = b;
    if (x->score != y->score) return x->score < y->score ? 1 : -1;
    return (x->index > y->index) - (x->index < y->index);
}

int cmd_rerank(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *kernels = NULL, *query = NULL;
    long batch = 512, threads = 0, seqs_max = 64, top_n = -1;
    const char **docs = calloc((size_t)argc + 1, sizeof(*docs));
    int n_docs = 0, rc = 2;
    char *fbuf = NULL;
    if (!docs) return cli_fail("rerank", "out of memory");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            free(docs);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value("rerank", argc, argv, &i))) goto out;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--query")) {
            if (!(query = cli_value("rerank", argc, argv, &i))) goto out;
        } else if (!strcmp(a, "-f") || !strcmp(a, "--file")) {
            if (!(file = cli_value("rerank", argc, argv, &i))) goto out;
        } else if (!strcmp(a, "--kernels")) {
            if (!(kernels = cli_value("rerank", argc, argv, &i))) goto out;
        } else if (!strcmp(a, "--top-n")) {
            if (!(v = cli_value("rerank", argc, argv, &i)) ||
                !cli_int("rerank", "--top-n", v, 1, INT32_MAX, &top_n))
                goto out;
        } else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) {
            if (!(v = cli_value("rerank", argc, argv, &i)) ||
                !cli_int("rerank", "--batch", v, 1, 1 << 16, &batch))
                goto out;
        } else if (!strcmp(a, "--seqs")) {
            if (!(v = cli_value("rerank", argc, argv, &i)) ||
                !cli_int("rerank", "--seqs", v, 1, 4096, &seqs_max))
                goto out;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(v = cli_value("rerank", argc, argv, &i)) ||
                !cli_int("rerank", "--threads", v, 0, 1024, &threads))
                goto out;
        } else if (a[0] == '-' && a[1]) {
            cli_fail("rerank", "unknown option '%s' (see anvil rerank --help)", a);
            goto out;
        } else {
            docs[n_docs++] = a;
        }
    }
    if (!model) {
        cli_fail("rerank", "a model is required (-m FILE)");
        goto out;
    }
    if (!query) {
        cli_fail("rerank", "a query is required (--query TEXT)");
        goto out;
    }
    if (file && !cli_read_lines("rerank", file, &fbuf, &docs, &n_docs)) goto out;
    if (n_docs == 0) {
        cli_fail("rerank", "no documents: give them as arguments or --file FILE");
        goto out;
    }

    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model_params mp = anvil_model_default_params();
    mp.kernels = kernels;
    struct anvil_model *m = NULL;
    struct anvil_ctx *c = NULL;
    anvil_token **seqs = calloc((size_t)n_docs, sizeof(*seqs));
    int32_t *lens = calloc((size_t)n_docs, sizeof(*lens));
    float *score = calloc((size_t)n_docs, sizeof(float));
    struct scored *order = calloc((size_t)n_docs, sizeof(*order));
    if (!seqs || !lens || !score || !order) {
        cli_fail("rerank", "out of memory");
        goto done;
    }
    if (anvil_model_load(model, &mp, &m, err, sizeof(err)) != ANVIL_OK) {
        cli_fail("rerank", "%s", err);
        goto done;
    }
    if (anvil_model_pooling(m) != ANVIL_POOL_RANK) {
        cli_fail("rerank", "the model is not a reranker (pooling %s, not rank)",
                 anvil_pooling_name(anvil_model_pooling(m)));
        goto done;
    }
    for (int i = 0; i < n_docs; i++) {
        int32_t cap = (int32_t)batch;
        if (!(seqs[i] = malloc((size_t)cap * sizeof(anvil_token)))) {
            cli_fail("rerank", "out of memory");
            goto done;
        }
        int32_t n = anvil_rank_pair(m, query, strlen(query), docs[i], strlen(docs[i]), seqs[i], cap);
        if (n == INT32_MIN) {
            cli_fail("rerank", "out of memory");
            goto done;
        }
        if (n < 0) {
            cli_fail("rerank", "the pair of document %d has %d tokens, longer than the batch "
                     "(--batch N)", i, -n);
            goto done;
        }
        lens[i] = n;
    }
    struct anvil_ctx_params cp = anvil_ctx_default_params();
    cp.n_batch = (int32_t)batch;
    cp.n_outputs = (int32_t)batch;
    cp.n_ctx = (int32_t)batch;
    cp.n_seq_max = n_docs < seqs_max ? n_docs : (int32_t)seqs_max;
    cp.n_threads = (int32_t)threads;
    if (anvil_ctx_init(m, &cp, &c, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "anvil rerank: %s\n", err);
        rc = 1;
        goto done;
    }
    anvil_status st = anvil_embed(c, (const anvil_token *const *)seqs, lens, n_docs,
                                  ANVIL_POOL_RANK, false, score);
    if (st != ANVIL_OK) {
        fprintf(stderr, "anvil rerank: %s\n", anvil_ctx_errmsg(c));
        rc = st == ANVIL_ERR_INVALID || st == ANVIL_ERR_UNSUPPORTED ? 2 : 1;
        goto done;
    }
    for (int i = 0; i < n_docs; i++) order[i] = (struct scored){i, score[i]};
    qsort(order, (size_t)n_docs, sizeof(*order), by_score);
    int shown = top_n > 0 && top_n < n_docs ? (int)top_n : n_docs;
    fputc('[', stdout);
    for (int i = 0; i < shown; i++)
        printf("%s{\"index\":%d,\"relevance_score\":%.9g}", i ? "," : "", order[i].index,
               (double)order[i].score);
    fputs("]\n", stdout);
    rc = fflush(stdout) ? 1 : 0;
done:
    if (seqs)
        for (int i = 0; i < n_docs; i++) free(seqs[i]);
    free(seqs);
    free(lens);
    free(score);
    free(order);
    anvil_ctx_free(c);
    anvil_model_free(m);
out:
    free(fbuf);
    free(docs);
    return rc;
}
