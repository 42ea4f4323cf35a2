/*
 * tool_quantize.c - test helper exposing the searched row quantizers of
 * src/quantize (qt_quantize_row) to the Python tests (tests/py/
 * test_quantizers.py), which decode the bytes with the gguf package and
 * compare the error with llama.cpp's quantizer on the same rows.
 *
 *   tool_quantize TYPE N_PER_ROW IN OUT     float32 rows -> raw rows of TYPE
 *
 * TYPE is a type name (Q4_K, IQ4_NL, ...). IN holds whole rows of
 * N_PER_ROW little-endian floats; N_PER_ROW must be a multiple of the
 * type's block. Exit status 0 ok, 2 on bad input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "quantize/quantize_int.h"

#include "tool_io.h"

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: tool_quantize TYPE N_PER_ROW IN OUT\n");
        return 2;
    }
    int type = -1;
    for (int t = 0; t < 64 && type < 0; t++) {
        const struct gguf_type_info *q = qt_type_get(t);
        if (q && !strcasecmp(q->name, argv[1])) type = t;
    }
    long npr = strtol(argv[2], NULL, 10);
    const struct gguf_type_info *q = qt_type_get(type);
    if (!q || npr <= 0 || npr % q->blck) {
        fprintf(stderr, "tool_quantize: bad type '%s' or row length %ld\n", argv[1], npr);
        return 2;
    }
    size_t n;
    float *x = read_all(argv[3], &n);
    if (!x || n % ((size_t)npr * sizeof(float))) {
        fprintf(stderr, "tool_quantize: cannot read whole rows from %s\n", argv[3]);
        return 2;
    }
    size_t rows = n / ((size_t)npr * sizeof(float)), rs = gguf_row_size(type, (uint64_t)npr);
    unsigned char *y = malloc(rows * rs + 1);
    for (size_t r = 0; r < rows; r++) qt_quantize_row(type, x + r * (size_t)npr, y + r * rs, npr);
    int rc = write_all(argv[4], y, rows * rs);
    free(x);
    free(y);
    return rc;
}
