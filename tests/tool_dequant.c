/*
 * tool_dequant.c - test helper that exposes the reference quant formats
 * (kn_dequantize_row / kn_quantize_row), the activation conversions, the
 * matmul kernels and the GGUF reader to the Python differential tests
 * (tests/py/test_quant.py, test_kquant.py), which compare the results with
 * the gguf package and numpy.
 *
 *   tool_dequant dequant TYPE IN OUT      raw rows of TYPE -> float32
 *   tool_dequant quant TYPE IN OUT        float32 -> raw rows of TYPE
 *                                         (the types kn_quantize_row does)
 *   tool_dequant tensor MODEL NAME OUT [ROW0 NROWS]
 *                                         one GGUF tensor (or its rows
 *                                         [ROW0, ROW0 + NROWS)) -> float32,
 *                                         read through gguf_open
 *   tool_dequant act KERNELS ACT N IN OUT float32 rows of N -> activation
 *                                         rows (ACT: q8a, q8k, q8a_q8k,
 *                                         bf16, f32), kn_act_row_size apart
 *   tool_dequant matmul KERNELS MODEL NAME IN OUT [R0 R1]
 *                                         float32 token rows IN (n = the
 *                                         tensor's row length) converted
 *                                         with KERNELS' act, times rows
 *                                         [R0, R1) (default all) of the
 *                                         tensor with KERNELS' matmul ->
 *                                         float32 (n_tokens, R1 - R0)
 * KERNELS is ref, avx2, avx512 or auto. IN/OUT are raw little-endian
 * files. Exit status 0 ok, 2 on bad input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "kernels/ops.h"
#include "kernels/blocks.h"

#include "tool_io.h"

static int usage(void) {
    fprintf(stderr, "usage: tool_dequant dequant|quant TYPE IN OUT\n"
                    "       tool_dequant tensor MODEL NAME OUT [ROW0 NROWS]\n"
                    "       tool_dequant act KERNELS ACT N IN OUT\n"
                    "       tool_dequant matmul KERNELS MODEL NAME IN OUT [R0 R1]\n");
    return 2;
}

static int fail(const char *msg, const char *arg) {
    fprintf(stderr, "tool_dequant: %s%s\n", msg, arg ? arg : "");
    return 2;
}

static const struct gguf_tensor *open_tensor(const char *model, const char *name,
                                             struct gguf_file **g) {
    char err[ANVIL_ERRMSG_CAP];
    if (gguf_open(model, g, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, "tool_dequant: %s\n", err);
        return NULL;
    }
    const struct gguf_tensor *t = gguf_find_tensor(*g, name);
    if (!t) fprintf(stderr, "tool_dequant: no tensor '%s'\n", name);
    return t;
}

static int cmd_tensor(int argc, char **argv) {
    if (argc != 5 && argc != 7) return usage();
    struct gguf_file *g = NULL;
    const struct gguf_tensor *t = open_tensor(argv[2], argv[3], &g);
    if (!t) {
        gguf_close(g);
        return 2;
    }
    uint64_t rows = t->ne[1] * t->ne[2] * t->ne[3], r0 = 0, nr = rows;
    if (argc == 7) {
        r0 = strtoull(argv[5], NULL, 10);
        nr = strtoull(argv[6], NULL, 10);
        if (r0 > rows || nr > rows - r0) {
            gguf_close(g);
            return fail("row range out of bounds", NULL);
        }
    }
    float *y = malloc((size_t)(nr * t->ne[0]) * sizeof(float) + 1);
    size_t row = gguf_row_size(t->type, t->ne[0]);
    /* row by row, as the model code does */
    for (uint64_t r = 0; r < nr; r++)
        kn_dequantize_row(t->type, (const uint8_t *)t->data + (r0 + r) * row, y + r * t->ne[0],
                          (int64_t)t->ne[0]);
    int rc = write_all(argv[4], y, (size_t)(nr * t->ne[0]) * sizeof(float));
    free(y);
    gguf_close(g);
    return rc;
}

static int act_from_name(const char *s) {
    static const char *names[KN_ACT_COUNT] = {
        [KN_ACT_F32] = "f32", [KN_ACT_BF16] = "bf16", [KN_ACT_Q8A] = "q8a",
        [KN_ACT_Q8K] = "q8k", [KN_ACT_Q8A_Q8K] = "q8a_q8k"};
    for (int a = 0; a < KN_ACT_COUNT; a++)
        if (names[a] && !strcmp(s, names[a])) return a;
    return -1;
}

static int cmd_act(int argc, char **argv) {
    if (argc != 7) return usage();
    const struct kn_ops *ops = kn_select(argv[2]);
    int act = act_from_name(argv[3]), n = atoi(argv[4]);
    if (!ops) return fail("kernels not available: ", argv[2]);
    if (act < 0 || n <= 0 || n % kn_act_block_len(act)) return fail("bad ACT or N", NULL);
    size_t len;
    float *x = read_all(argv[5], &len);
    if (!x || len % ((size_t)n * 4)) {
        free(x);
        return fail("input is not whole rows of N floats: ", argv[5]);
    }
    size_t rows = len / ((size_t)n * 4), rs = kn_act_row_size(act, n);
    uint8_t *y = calloc(rows ? rows : 1, rs);
    for (size_t r = 0; r < rows; r++) ops->act[act](y + r * rs, x + r * (size_t)n, n);
    int rc = write_all(argv[6], y, rows * rs);
    free(x);
    free(y);
    return rc;
}

static int cmd_matmul(int argc, char **argv) {
    if (argc != 7 && argc != 9) return usage();
    const struct kn_ops *ops = kn_select(argv[2]);
    if (!ops) return fail("kernels not available: ", argv[2]);
    struct gguf_file *g = NULL;
    const struct gguf_tensor *t = open_tensor(argv[3], argv[4], &g);
    int rc = 2;
    float *x = NULL, *y = NULL;
    uint8_t *xa = NULL;
    if (!t) goto out;
    int act = kn_act_for_type(t->type), n = (int)t->ne[0], rows = (int)(t->ne[1] * t->ne[2] * t->ne[3]);
    if (act < 0 || !ops->matmul[t->type]) {
        rc = fail("no matmul for the type of ", argv[4]);
        goto out;
    }
    int r0 = 0, r1 = rows;
    if (argc == 9) {
        r0 = atoi(argv[7]);
        r1 = atoi(argv[8]);
        if (r0 < 0 || r1 > rows || r0 >= r1) {
            rc = fail("bad row range", NULL);
            goto out;
        }
    }
    size_t len;
    x = read_all(argv[5], &len);
    if (!x || len % ((size_t)n * 4) || len == 0) {
        rc = fail("input is not whole rows of n floats: ", argv[5]);
        goto out;
    }
    int nt = (int)(len / ((size_t)n * 4));
    size_t rs = kn_act_row_size(act, n);
    xa = aligned_alloc(64, rs * nt);
    y = malloc(sizeof(float) * (size_t)nt * rows);
    for (int i = 0; i < nt; i++) ops->act[act](xa + rs * i, x + (size_t)i * n, n);
    size_t ws = gguf_row_size(t->type, (uint64_t)n);
    ops->matmul[t->type](y, (size_t)rows, t->data, ws, xa, rs, n, nt, r0, r1);
    for (int i = 0; i < nt; i++) /* keep rows [r0, r1) of each token */
        memmove(y + (size_t)i * (r1 - r0), y + (size_t)i * rows + r0, sizeof(float) * (r1 - r0));
    rc = write_all(argv[6], y, sizeof(float) * (size_t)nt * (r1 - r0));
out:
    free(x);
    free(xa);
    free(y);
    gguf_close(g);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    if (!strcmp(argv[1], "tensor")) return cmd_tensor(argc, argv);
    if (!strcmp(argv[1], "act")) return cmd_act(argc, argv);
    if (!strcmp(argv[1], "matmul")) return cmd_matmul(argc, argv);
    if (argc != 5) return usage();

    int type = anvil_type_from_name(argv[2]);
    uint32_t blck, bsz;
    if (type < 0 || !gguf_type_block(type, &blck, &bsz)) return fail("unknown type ", argv[2]);
    size_t n;
    void *in = read_all(argv[3], &n);
    if (!in) return fail("cannot read ", argv[3]);
    int rc = 2;
    if (!strcmp(argv[1], "dequant")) {
        if (n % bsz == 0) {
            size_t nel = n / bsz * blck;
            float *y = malloc(nel * sizeof(float) + 1);
            kn_dequantize_row(type, in, y, (int64_t)nel);
            rc = write_all(argv[4], y, nel * sizeof(float));
            free(y);
        } else {
            fprintf(stderr, "tool_dequant: %zu bytes is not a whole number of blocks\n", n);
        }
    } else if (!strcmp(argv[1], "quant")) {
        size_t nel = n / sizeof(float);
        if (type != ANVIL_TYPE_F32 && type != ANVIL_TYPE_F16 && type != ANVIL_TYPE_BF16 &&
            type != ANVIL_TYPE_Q8_0 && type != ANVIL_TYPE_Q4_0 && type != ANVIL_TYPE_Q4_1 &&
            type != ANVIL_TYPE_MXFP4) {
            fprintf(stderr, "tool_dequant: kn_quantize_row does not write %s\n", argv[2]);
        } else if (n % sizeof(float) == 0 && nel % blck == 0) {
            size_t out_n = nel / blck * bsz;
            void *y = malloc(out_n + 1);
            kn_quantize_row(type, in, y, (int64_t)nel);
            rc = write_all(argv[4], y, out_n);
            free(y);
        } else {
            fprintf(stderr, "tool_dequant: %zu bytes is not a whole number of blocks\n", n);
        }
    } else {
        rc = usage();
    }
    free(in);
    return rc;
}
