/*
 * ab_util.h - what the A/B harnesses (harness.c: the VNNI packed kernels,
 * amx_harness.c: the AMX ones) share: the clock, the random weight bytes
 * and the JSON line of the two best times.
 */
#ifndef ANVIL_AB_UTIL_H
#define ANVIL_AB_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double ab_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Random weight bytes in which every f16 read as a scale is a normal number
 * (exponent field 4..29, sign clear): no denormal assists, no inf/NaN. */
static inline void ab_fill_weights(uint8_t *w, size_t n) {
    for (size_t i = 0; i < n; i++) w[i] = (uint8_t)((rand() & 0x77) | 0x11);
}

/* One JSON line: best[0] is A's best time, best[1] B's (seconds). */
static inline void ab_report(const char *ty, int n, int rows, int m, int reps, const double best[2]) {
    const double mac = (double)n * rows * m;
    printf("{\"type\": \"%s\", \"n\": %d, \"rows\": %d, \"m\": %d, \"reps\": %d, \"a_us\": %.1f, \"b_us\": %.1f, "
           "\"a_gmacs\": %.2f, \"b_gmacs\": %.2f, \"b_over_a\": %.3f}\n",
           ty, n, rows, m, reps, best[0] * 1e6, best[1] * 1e6, mac / best[0] * 1e-9, mac / best[1] * 1e-9,
           best[0] / best[1]);
}

#endif
