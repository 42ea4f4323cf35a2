/*
 * tool_dequant.c - test helper that exposes the reference quant formats
 * (kn_dequantize_row / kn_quantize_row) and the GGUF reader to the Python
 * differential tests (tests/py/test_quant.py), which compare the results
 * with the gguf package bit for bit.
 *
 *   tool_dequant dequant TYPE IN OUT      raw rows of TYPE -> float32
 *   tool_dequant quant TYPE IN OUT        float32 -> raw rows of TYPE
 *   tool_dequant tensor MODEL NAME OUT    one GGUF tensor -> float32, read
 *                                         through gguf_open
 * IN/OUT are raw little-endian files. The element count of IN must be a
 * multiple of the type's block. Exit status 0 ok, 2 on bad input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "kernels/quant.h"

static void *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(sz > 0 ? (size_t)sz : 1);
    if (p && fread(p, 1, (size_t)sz, f) != (size_t)sz) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *n = (size_t)sz;
    return p;
}

static int write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 2;
    size_t w = fwrite(p, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : 2;
}

static int usage(void) {
    fprintf(stderr, "usage: tool_dequant dequant|quant TYPE IN OUT\n"
                    "       tool_dequant tensor MODEL NAME OUT\n");
    return 2;
}

int main(int argc, char **argv) {
    if (argc != 5) return usage();
    if (!strcmp(argv[1], "tensor")) {
        char err[ANVIL_ERRMSG_CAP];
        struct gguf_file *g = NULL;
        if (gguf_open(argv[2], &g, err, sizeof(err)) != ANVIL_OK) {
            fprintf(stderr, "tool_dequant: %s\n", err);
            return 2;
        }
        const struct gguf_tensor *t = gguf_find_tensor(g, argv[3]);
        if (!t) {
            fprintf(stderr, "tool_dequant: no tensor '%s'\n", argv[3]);
            gguf_close(g);
            return 2;
        }
        uint64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        float *y = malloc((size_t)nel * sizeof(float));
        size_t row = gguf_row_size(t->type, t->ne[0]);
        /* row by row, as the model code will */
        for (uint64_t r = 0; r < nel / t->ne[0]; r++)
            kn_dequantize_row(t->type, (const uint8_t *)t->data + r * row, y + r * t->ne[0],
                              (int64_t)t->ne[0]);
        int rc = write_all(argv[4], y, (size_t)nel * sizeof(float));
        free(y);
        gguf_close(g);
        return rc;
    }

    int type = anvil_type_from_name(argv[2]);
    uint32_t blck, bsz;
    if (type < 0 || !gguf_type_block(type, &blck, &bsz)) {
        fprintf(stderr, "tool_dequant: unknown type '%s'\n", argv[2]);
        return 2;
    }
    size_t n;
    void *in = read_all(argv[3], &n);
    if (!in) {
        fprintf(stderr, "tool_dequant: cannot read '%s'\n", argv[3]);
        return 2;
    }
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
        if (n % sizeof(float) == 0 && nel % blck == 0) {
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
