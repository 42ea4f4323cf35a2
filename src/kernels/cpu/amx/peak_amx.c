/*
 * peak_amx.c - the int8 multiply-accumulate peak of the tile unit: a loop
 * of TDPBSSD (16 x 16 int32 += 16 x 64 int8 times 64 x 16 int8, 16384
 * products) on four independent C tiles, A and B loaded once: no memory
 * traffic. bench --kernels prints it beside the VNNI peak, so that the
 * AMX kernels' rates can be read against the limit they face.
 */
#include <immintrin.h>
#include <stdint.h>
#include <time.h>

#include "kernels/cpu/amx/amx.h"

static const struct tile_cfg cfg = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16},
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double kn_amx_int8_peak(double seconds) {
    static int8_t a[16 * 64] __attribute__((aligned(64))), b[16 * 64] __attribute__((aligned(64)));
    for (int i = 0; i < 16 * 64; i++) a[i] = (int8_t)(i % 7 - 3), b[i] = (int8_t)(i % 5 - 2);
    _tile_loadconfig(&cfg);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, b, 64);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    long iters = 0;
    double t0 = now_s(), el;
    do {
        for (int r = 0; r < 256; r++) {
            _tile_dpbssd(0, 4, 5);
            _tile_dpbssd(1, 4, 5);
            _tile_dpbssd(2, 4, 5);
            _tile_dpbssd(3, 4, 5);
        }
        iters += 256;
        el = now_s() - t0;
    } while (el < seconds);
    _tile_release();
    return (double)iters * 4 * 16384 * 2 / el / 1e9; /* 2 ops per multiply-accumulate */
}
