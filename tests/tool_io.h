/*
 * tool_io.h - whole-file reads and writes for the test helpers that the
 * Python tests drive (tool_dequant.c, tool_quantize.c). Include once, from
 * the tool's main file.
 */
#ifndef ANVIL_TESTS_TOOL_IO_H
#define ANVIL_TESTS_TOOL_IO_H

#include <stdio.h>
#include <stdlib.h>

/* The whole file at path in a malloc'd buffer (freed by the caller), its
 * size in *n; NULL if it cannot be opened or read. */
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

/* Write n bytes to path: 0, or 2 (the tools' exit status for bad I/O). */
static int write_all(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return 2;
    size_t w = fwrite(p, 1, n, f);
    return (fclose(f) == 0 && w == n) ? 0 : 2;
}

#endif
