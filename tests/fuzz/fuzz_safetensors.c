/*
 * fuzz_safetensors.c - libFuzzer harness: bytes -> the safetensors header
 * parser (src/convert/safetensors.c, st_parse) as if they were a whole
 * file held in memory.
 *
 * When the bytes parse, every tensor is checked against the promises of
 * safetensors.h: its extent lies inside the buffer after the header, its
 * byte count is its element count times the dtype size, and it can be
 * found by name; every element is read back with st_get (ASan catches a
 * read outside the buffer). Looking for: crashes, sanitizer reports, leaks
 * and broken invariants on hostile headers (lengths, offsets, shapes,
 * dtypes, duplicate names, deep or huge JSON).
 *
 *   make fuzz && build/fuzz/fuzz_safetensors -max_total_time=60 tests/fuzz/corpus/safetensors
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_safetensors: invariant broken: %s\n", what);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* a private copy: st_parse must not read past size */
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    struct st_set *set = core_calloc(1, sizeof(*set));
    char err[256];
    if (set && st_parse(set, buf, size, "fuzz", err, sizeof err) == ANVIL_OK) {
        uint64_t h;
        memcpy(&h, buf, 8);
        const uint8_t *lo = buf + 8 + h, *hi = buf + size;
        volatile float sum = 0;
        for (uint32_t i = 0; i < set->n_tensors; i++) {
            const struct st_tensor *t = &set->tensors[i];
            check(t->data >= lo && t->data <= hi && t->nbytes <= (uint64_t)(hi - t->data),
                  "extent inside the data");
            check(t->nbytes == t->n_elem * st_dtype_size(t->dtype), "size matches shape");
            check(st_find(set, t->name) == t, "lookup by name");
            for (uint64_t e = 0; e < t->n_elem && e < 4096; e++) sum += st_get(t, e);
        }
        (void)sum;
    } else if (set) {
        check(err[0] != 0, "a failure has a message");
    }
    /* st_close unmaps only what st_open_dir mapped: none here */
    st_close(set);
    free(buf);
    return 0;
}
