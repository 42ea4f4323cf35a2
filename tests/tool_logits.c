/*
 * tool_logits.c - test driver for the differential model tests.
 *
 * usage: tool_logits MODEL [-t THREADS] [-k KERNELS] [-g N_GEN] [-b] [-a] [-c N_CTX]
 *                         [-s CHUNK]
 * stdin: one prompt per line as space-separated token ids.
 * stdout: one JSON object per prompt:
 *   {"gen": [greedy continuation of N_GEN ids], "logits": [last prompt row]}
 * and with -a also "all": [the logits row of every prompt position], or
 * with -a -o FILE those rows as raw float32 in FILE (row-major; for big
 * vocabularies, where JSON text would run to gigabytes).
 * -s CHUNK feeds each prompt in chunks of CHUNK tokens (1 = token by
 * token), which must not change any number (prefill == decode).
 * With -b all prompts are decoded together in one batch (one sequence
 * each), and then generated in lock-step batches: the output must equal
 * the one-by-one run (batch invariance).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "anvil.h"

#define MAX_PROMPTS 64
#define MAX_TOK 4096

static int argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: tool_logits MODEL [-t N] [-k KERNELS] [-g N] [-b]\n");
        return 2;
    }
    int n_threads = 1, n_gen = 0, batched = 0, all = 0, n_ctx = 1024, chunk = 0;
    const char *kernels = NULL, *out_path = NULL;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) n_threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) kernels = argv[++i];
        else if (!strcmp(argv[i], "-g") && i + 1 < argc) n_gen = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) n_ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s") && i + 1 < argc) chunk = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b")) batched = 1;
        else if (!strcmp(argv[i], "-a")) all = 1;
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out_path = argv[++i];
    }
    if (batched && (all || chunk)) {
        fprintf(stderr, "tool_logits: -b goes with neither -a nor -s\n");
        return 2;
    }
    static anvil_token prompts[MAX_PROMPTS][MAX_TOK];
    static int n_prompt[MAX_PROMPTS];
    int np = 0;
    static char line[1 << 20];
    while (np < MAX_PROMPTS && fgets(line, sizeof(line), stdin)) {
        int n = 0;
        for (char *tok = strtok(line, " \n"); tok && n < MAX_TOK; tok = strtok(NULL, " \n"))
            prompts[np][n++] = atoi(tok);
        if (n == 0) continue;
        n_prompt[np++] = n;
    }
    char err[ANVIL_ERRMSG_CAP];
    struct anvil_model_params mp = anvil_model_default_params();
    mp.kernels = kernels;
    struct anvil_model *m;
    if (anvil_model_load(argv[1], &mp, &m, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "tool_logits: %s\n", err);
        return 2;
    }
    int n_vocab = anvil_model_n_vocab(m);
    struct anvil_ctx_params cp = anvil_ctx_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = n_threads;
    cp.n_seq_max = batched ? np : 1;
    if (all) cp.n_outputs = MAX_TOK < 2048 ? MAX_TOK : 2048;
    cp.n_batch = 2048;
    struct anvil_ctx *c;
    if (anvil_ctx_init(m, &cp, &c, NULL, 0) != ANVIL_OK) {
        fprintf(stderr, "tool_logits: ctx init failed\n");
        return 1;
    }
    static anvil_token gen[MAX_PROMPTS][1024];
    static float *last[MAX_PROMPTS];
    static float *rows[MAX_PROMPTS]; /* -a: (n_prompt, n_vocab) */
    static anvil_token tok[2048];
    static int32_t pos[2048], seq[2048];
    static int8_t want[2048];
    int groups = batched ? 1 : np;
    for (int g = 0; g < groups; g++) {
        int s0 = batched ? 0 : g, s1 = batched ? np : g + 1;
        int n = 0;
        for (int s = s0; s < s1; s++) {
            for (int i = 0; i < n_prompt[s]; i++) {
                tok[n] = prompts[s][i];
                pos[n] = i;
                seq[n] = batched ? s : 0;
                want[n] = i == n_prompt[s] - 1;
                n++;
            }
        }
        if (!batched) anvil_seq_truncate(c, 0, 0);
        struct anvil_batch b = {.n_tokens = n, .token = tok, .pos = pos, .seq_id = seq, .logits = want};
        if (!batched && (all || chunk)) {
            /* one sequence, in chunks, every row's logits if asked */
            int step = chunk > 0 ? chunk : n;
            if (all) rows[g] = malloc((size_t)n * n_vocab * sizeof(float));
            for (int i0 = 0; i0 < n; i0 += step) {
                int k = n - i0 < step ? n - i0 : step;
                for (int i = 0; i < k; i++) want[i0 + i] = all || i0 + i == n - 1;
                struct anvil_batch bc = {.n_tokens = k, .token = tok + i0, .pos = pos + i0,
                                         .seq_id = seq + i0, .logits = want + i0};
                if (anvil_decode(c, &bc) != ANVIL_OK) {
                    fprintf(stderr, "tool_logits: decode failed: %s\n", anvil_ctx_errmsg(c));
                    return 1;
                }
                if (all)
                    for (int i = 0; i < k; i++)
                        memcpy(rows[g] + (size_t)(i0 + i) * n_vocab, anvil_get_logits(c, i),
                               (size_t)n_vocab * sizeof(float));
            }
            last[g] = malloc((size_t)n_vocab * sizeof(float));
            memcpy(last[g], anvil_get_logits(c, anvil_n_logits(c) - 1), (size_t)n_vocab * sizeof(float));
        } else {
            if (anvil_decode(c, &b) != ANVIL_OK) {
                fprintf(stderr, "tool_logits: decode failed: %s\n", anvil_ctx_errmsg(c));
                return 1;
            }
            for (int s = s0; s < s1; s++) {
                last[s] = malloc((size_t)n_vocab * sizeof(float));
                memcpy(last[s], anvil_get_logits(c, s - s0), (size_t)n_vocab * sizeof(float));
            }
        }
        for (int k = 0; k < n_gen; k++) {
            n = 0;
            for (int s = s0; s < s1; s++) {
                const float *lg = k == 0 ? last[s] : anvil_get_logits(c, s - s0);
                gen[s][k] = argmax(lg, n_vocab);
                if ((k > 0 || !(all || chunk)) && anvil_get_argmax(c, s - s0) != gen[s][k]) {
                    fprintf(stderr, "tool_logits: fused argmax %d != argmax of logits %d\n",
                            anvil_get_argmax(c, s - s0), gen[s][k]);
                    return 1;
                }
                tok[n] = gen[s][k];
                pos[n] = n_prompt[s] + k;
                seq[n] = batched ? s : 0;
                want[n] = 1;
                n++;
            }
            if (k + 1 == n_gen) break;
            b.n_tokens = n;
            if (anvil_decode(c, &b) != ANVIL_OK) {
                fprintf(stderr, "tool_logits: decode failed: %s\n", anvil_ctx_errmsg(c));
                return 1;
            }
        }
    }
    for (int s = 0; s < np; s++) {
        printf("{\"gen\": [");
        for (int k = 0; k < n_gen; k++) printf("%s%d", k ? ", " : "", gen[s][k]);
        printf("], \"logits\": [");
        for (int i = 0; i < n_vocab; i++) printf("%s%.9g", i ? ", " : "", last[s][i]);
        printf("]");
        if (all && rows[s] && out_path) {
            FILE *fo = fopen(out_path, s == 0 ? "wb" : "ab");
            if (!fo || fwrite(rows[s], sizeof(float), (size_t)n_prompt[s] * n_vocab, fo) !=
                           (size_t)n_prompt[s] * n_vocab) {
                fprintf(stderr, "tool_logits: cannot write %s\n", out_path);
                return 1;
            }
            fclose(fo);
            free(rows[s]);
        } else if (all && rows[s]) {
            printf(", \"all\": [");
            for (int r = 0; r < n_prompt[s]; r++) {
                printf("%s[", r ? ", " : "");
                for (int i = 0; i < n_vocab; i++)
                    printf("%s%.9g", i ? ", " : "", rows[s][(size_t)r * n_vocab + i]);
                printf("]");
            }
            printf("]");
            free(rows[s]);
        }
        printf("}\n");
        free(last[s]);
    }
    anvil_ctx_free(c);
    anvil_model_free(m);
    return 0;
}
