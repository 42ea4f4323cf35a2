/*
 * unit_fuzz.c - regression tests for the bugs the fuzz harnesses
 * (tests/fuzz/fuzz_*.c) found, one case per bug, each failing (crash,
 * ASan/UBSan report or assertion) on the code before its fix. They run in
 * the release and the ASan+UBSan builds like every unit test, with no
 * clang needed; the inputs that found them are also in tests/fuzz/corpus/,
 * which the fuzz smoke test replays.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/core.h"
#include "kernels/cpu/ref/ref.h"
#include "kernels/blocks.h"

/* fuzz_gguf (a fuzzed model's forward pass): the reference Q8A activation
 * quantizer converted x * (127 / amax) to int with NaN (a NaN or infinite
 * activation) or +-inf (a subnormal amax makes 127 / amax infinite),
 * undefined behaviour in C (UBSan: "-nan is outside the range of
 * representable values of type 'int'"). Now NaN lanes give 0 and the rest
 * is clamped to [-127, 127]. */
static void test_act_q8a_ref_nonfinite(void **state) {
    (void)state;
    enum { N = 4 * QK };
    float x[N];
    for (int i = 0; i < N; i++) x[i] = (float)(i % 7) - 3.0f;
    x[1] = NAN;                       /* block 0: one NaN among finite values */
    x[QK + 2] = INFINITY;             /* block 1: amax inf, every lane NaN */
    for (int i = 2 * QK; i < 3 * QK; i++) x[i] = 0.0f;
    x[2 * QK + 3] = 1e-40f;           /* block 2: subnormal amax, id = inf */
    x[2 * QK + 4] = -1e-40f;
    uint8_t row[1024];
    assert_true(kn_act_row_size(KN_ACT_Q8A, N) <= sizeof(row));
    memset(row, 0x55, sizeof(row));
    kn_act_q8a_ref(row, x, N);
    const int8_t *q = (const int8_t *)row;
    const float *d = (const float *)(row + N);
    /* block 0: the NaN lane is 0, the finite lanes quantize as usual */
    assert_int_equal(q[1], 0);
    assert_int_equal(q[0], -127); /* -3 of amax 3 */
    assert_int_equal(q[3], 0);
    assert_true(fabsf(d[0] - 3.0f / 127.0f) < 1e-9f);
    /* block 1: all NaN after the infinite scale: all 0 */
    for (int j = 0; j < QK; j++) assert_int_equal(q[QK + j], 0);
    /* block 2: the subnormal extremes are +-127, zeros stay 0 */
    assert_int_equal(q[2 * QK + 3], 127);
    assert_int_equal(q[2 * QK + 4], -127);
    assert_int_equal(q[2 * QK + 5], 0);
    /* block 3 is an ordinary block */
    assert_int_equal(q[3 * QK + 1], 127); /* x = 3 */
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* a test name or glob */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_act_q8a_ref_nonfinite),
    };
    return cmocka_run_group_tests_name("fuzz regressions", tests, NULL, NULL);
}
