/*
 * fuzz_util.h - helpers shared by the fuzz harnesses. A harness may define
 * FUZZ_NAME (its name in abort messages) before including it.
 */
#ifndef ANVIL_FUZZ_UTIL_H
#define ANVIL_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "anvil.h"

#ifndef FUZZ_NAME
#define FUZZ_NAME "fuzz"
#endif

/* The model the harnesses load: $ANVIL_MODEL, else the default model. */
static inline const char *fuzz_model_path(void) {
    const char *path = getenv("ANVIL_MODEL");
    return path && *path ? path : ANVIL_DEFAULT_MODEL;
}

/* A property of the code under test: abort (the fuzzer's crash) naming it
 * when it does not hold. */
static inline void fuzz_check(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, FUZZ_NAME ": property broken: %s\n", what);
        abort();
    }
}

/* The model at fuzz_model_path with default parameters, or abort. */
static inline struct anvil_model *fuzz_load_model(void) {
    const char *path = fuzz_model_path();
    char err[256] = "";
    struct anvil_model_params mp = anvil_model_default_params();
    struct anvil_model *m = NULL;
    if (anvil_model_load(path, &mp, &m, err, sizeof(err)) != ANVIL_OK) {
        fprintf(stderr, FUZZ_NAME ": cannot load %s: %s\n", path, err);
        abort();
    }
    return m;
}

/* Strict UTF-8 (Unicode table 3-7): no overlongs, no surrogates, <= U+10FFFF.
 * Written here, independent of src/tok/utf8.c. */
static inline bool valid_utf8(const uint8_t *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        size_t len;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            len = 2;
        } else if (c >= 0xe0 && c <= 0xef) {
            len = 3;
            if (c == 0xe0) lo = 0xa0;
            if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            len = 4;
            if (c == 0xf0) lo = 0x90;
            if (c == 0xf4) hi = 0x8f;
        } else {
            return false;
        }
        if (n - i < len) return false;
        if (s[i + 1] < lo || s[i + 1] > hi) return false;
        for (size_t k = 2; k < len; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf) return false;
        i += len;
    }
    return true;
}

#endif
