/*
 * tool_teacher.c - teacher-forced logits for the fidelity tests
 * (tests/py/test_kquant_fidelity.py): the logits of every position of one
 * token sequence, so that a model file can be compared with another
 * engine position by position.
 *
 * usage: tool_teacher MODEL OUT [-t THREADS] [-k KERNELS] [-c CHUNK]
 * stdin: the token ids, space-separated. OUT: float32 (n_tokens, n_vocab),
 * row i = the logits after tokens 0..i. The sequence is decoded in chunks
 * of CHUNK tokens (default 64), every row asking for its logits.
 * Exit status 0 ok, 2 on bad input or a model that does not load.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anvil.h"

#define MAX_TOK 4096

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tool_teacher MODEL OUT [-t N] [-k KERNELS] [-c CHUNK]\n");
        return 2;
    }
    int n_threads = 2, chunk = 64;
    const char *kernels = NULL;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) kernels = argv[++i];
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) chunk = atoi(argv[++i]);
    }
    if (chunk < 1 || chunk > 512) chunk = 64;
    static anvil_token tok[MAX_TOK];
    int n = 0, v;
    while (n < MAX_TOK && scanf("%d", &v) == 1) tok[n++] = v;
    if (n == 0) {
        fprintf(stderr, "tool_teacher: no tokens on stdin\n");
        return 2;
    }
    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model_params mp = anvil_model_default_params();
    mp.kernels = kernels;
    struct anvil_model *m;
    if (anvil_model_load(argv[1], &mp, &m, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "tool_teacher: %s\n", err);
        return 2;
    }
    struct anvil_ctx_params cp = anvil_ctx_default_params();
    cp.n_ctx = n < 64 ? 64 : n;
    cp.n_batch = chunk;
    cp.n_outputs = chunk;
    cp.n_threads = n_threads;
    struct anvil_ctx *c;
    if (anvil_ctx_init(m, &cp, &c, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "tool_teacher: context init failed: %s\n", err);
        anvil_model_free(m);
        return 2;
    }
    FILE *out = fopen(argv[2], "wb");
    int rc = out ? 0 : 2;
    int n_vocab = anvil_model_n_vocab(m);
    static int32_t pos[512], seq[512];
    static int8_t want[512];
    for (int t0 = 0; t0 < n && rc == 0; t0 += chunk) {
        int k = n - t0 < chunk ? n - t0 : chunk;
        for (int i = 0; i < k; i++) {
            pos[i] = t0 + i;
            seq[i] = 0;
            want[i] = ANVIL_OUT_LOGITS;
        }
        struct anvil_batch b = {.n_tokens = k, .token = tok + t0, .pos = pos, .seq_id = seq, .logits = want};
        if (anvil_decode(c, &b) != ANVIL_OK) {
            fprintf(stderr, "tool_teacher: decode failed: %s\n", anvil_ctx_errmsg(c));
            rc = 2;
            break;
        }
        for (int i = 0; i < k; i++) {
            const float *l = anvil_get_logits(c, i);
            if (!l || fwrite(l, sizeof(float), (size_t)n_vocab, out) != (size_t)n_vocab) rc = 2;
        }
    }
    if (out && fclose(out) != 0) rc = 2;
    anvil_ctx_free(c);
    anvil_model_free(m);
    return rc;
}
