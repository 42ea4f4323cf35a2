/*
 * unit_plot.c - the CLI's PNG chart module (tools/cli/plot.c): tick
 * computation, tick labels, and PNG files read back with libpng and checked
 * pixel by pixel (sizes, where ink is, bar heights against their values).
 *
 * plot.c belongs to the CLI, not to libanvil.a, so it is compiled into
 * this test directly; that also lets the test look at its internals.
 */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "../tools/cli/plot.c"

// ----------------------------------------------------------------------------
// helpers

static char tmpdir[64];

static int setup_dir(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/anvil_plot_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int remove_dir(void **state) {
    (void)state;
    return rmdir(tmpdir);
}

static void tmp_path(char *buf, size_t cap, const char *name) {
    snprintf(buf, cap, "%s/%s", tmpdir, name);
}

struct img {
    int w, h;
    uint8_t *px; /* (h, w, 3) RGB */
};

/* Read an RGB PNG with libpng's simplified API (independent of plot.c's
 * writer) and delete the file. */
static struct img read_png(const char *path) {
    png_image pi;
    memset(&pi, 0, sizeof pi);
    pi.version = PNG_IMAGE_VERSION;
    assert_true(png_image_begin_read_from_file(&pi, path));
    pi.format = PNG_FORMAT_RGB;
    struct img im = {(int)pi.width, (int)pi.height, malloc(PNG_IMAGE_SIZE(pi))};
    assert_non_null(im.px);
    assert_true(png_image_finish_read(&pi, NULL, im.px, 0, NULL));
    assert_int_equal(remove(path), 0);
    return im;
}

static uint32_t pix(const struct img *im, int x, int y) {
    const uint8_t *q = im->px + ((size_t)y * im->w + x) * 3;
    return (uint32_t)q[0] << 16 | (uint32_t)q[1] << 8 | q[2];
}

/* Pixels of exactly this colour in [x0, x1) x [y0, y1). */
static long count_color(const struct img *im, int x0, int y0, int x1, int y1, uint32_t rgb) {
    long n = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) n += pix(im, x, y) == rgb;
    return n;
}

/* Pixels darker than mid-grey (text, frame) in the rectangle. */
static long count_dark(const struct img *im, int x0, int y0, int x1, int y1) {
    long n = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) {
            uint32_t v = pix(im, x, y);
            n += ((v >> 16) & 255) + ((v >> 8) & 255) + (v & 255) < 3 * 100;
        }
    return n;
}

static bool is_nice_step(double step) {
    double m = step / pow(10.0, floor(log10(step) + 1e-9));
    return fabs(m - 1) < 1e-6 || fabs(m - 2) < 1e-6 || fabs(m - 5) < 1e-6;
}

// ----------------------------------------------------------------------------
// ticks

static void test_nice_ticks_examples(void **state) {
    (void)state;
    double t[64], lo, hi, step;
    int n = plot_nice_ticks(0, 10, 6, true, t, 64, &lo, &hi, &step);
    assert_int_equal(n, 6);
    assert_true(step == 2 && lo == 0 && hi == 10);
    for (int i = 0; i < n; i++) assert_true(t[i] == 2.0 * i);

    n = plot_nice_ticks(0.13, 0.87, 6, true, t, 64, &lo, &hi, &step);
    assert_int_equal(n, 6);
    assert_true(fabs(step - 0.2) < 1e-12 && lo == 0 && fabs(hi - 0.8) > 0.1);
    assert_true(fabs(hi - 1.0) < 1e-12);

    n = plot_nice_ticks(0.13, 0.87, 5, false, t, 64, &lo, &hi, &step);
    assert_int_equal(n, 4); /* 0.2 0.4 0.6 0.8 */
    assert_true(fabs(t[0] - 0.2) < 1e-12 && fabs(t[3] - 0.8) < 1e-12);
    assert_true(lo == 0.13 && hi == 0.87);

    /* reversed input, negative values, zero snapped exactly */
    n = plot_nice_ticks(3, -7, 11, true, t, 64, &lo, &hi, &step);
    assert_true(step == 1 && lo == -7 && hi == 3 && n == 11);
    n = plot_nice_ticks(-0.3, 0.3, 7, true, t, 64, &lo, &hi, &step);
    assert_true(fabs(step - 0.1) < 1e-12);
    bool zero = false;
    for (int i = 0; i < n; i++) zero |= t[i] == 0 && !signbit(t[i]);
    assert_true(zero);

    /* all-equal values are widened around the value; 0 gets [-1, 1] */
    n = plot_nice_ticks(5, 5, 5, true, t, 64, &lo, &hi, &step);
    assert_true(n >= 2 && lo < 5 && hi > 5);
    n = plot_nice_ticks(0, 0, 5, true, t, 64, &lo, &hi, &step);
    assert_true(n >= 2 && lo <= -1 && hi >= 1);

    /* unusable input */
    assert_int_equal(plot_nice_ticks(NAN, 1, 5, true, t, 64, &lo, &hi, &step), 0);
    assert_int_equal(plot_nice_ticks(0, INFINITY, 5, true, t, 64, &lo, &hi, &step), 0);
    assert_int_equal(plot_nice_ticks(-DBL_MAX, DBL_MAX, 5, true, t, 64, &lo, &hi, &step), 0);
    /* cap is honoured */
    assert_int_equal(plot_nice_ticks(0, 100, 11, true, t, 3, &lo, &hi, &step), 3);
}

/* Properties over many random ranges: 1-2-5 steps, at most max_ticks,
 * evenly spaced multiples of the step, covering (expand) or inside the range. */
static void test_nice_ticks_properties(void **state) {
    (void)state;
    srand(1234);
    double t[64];
    for (int it = 0; it < 20000; it++) {
        double scale = pow(10.0, rand() % 19 - 9);
        double a = ((double)rand() / RAND_MAX - 0.5) * scale * 10;
        double b = a + (double)rand() / RAND_MAX * scale;
        int max_ticks = 3 + rand() % 12;
        bool expand = rand() & 1;
        double lo = NAN, hi = NAN, step = NAN;
        int n = plot_nice_ticks(a, b, max_ticks, expand, t, 64, &lo, &hi, &step);
        assert_true(n >= 1 && n <= max_ticks);
        assert_true(is_nice_step(step));
        for (int i = 0; i < n; i++) {
            double k = t[i] / step;
            assert_true(fabs(k - round(k)) < 1e-6);
            if (i > 0) assert_true(fabs(t[i] - t[i - 1] - step) < step * 1e-6);
            assert_true(t[i] >= lo - step * 1e-6 && t[i] <= hi + step * 1e-6);
        }
        if (expand) {
            assert_true(lo <= a && hi >= b);
            assert_true(fabs(t[0] - lo) < step * 1e-6 && fabs(t[n - 1] - hi) < step * 1e-6);
        } else if (b > a) {
            assert_true(lo == a && hi == b);
        }
    }
}

static void test_log_ticks(void **state) {
    (void)state;
    double t[64], lo, hi;
    /* three decades and more: decades only */
    int n = plot_log_ticks(1, 1000, 10, true, t, 64, &lo, &hi);
    assert_int_equal(n, 4);
    assert_true(t[0] == 1 && t[1] == 10 && t[2] == 100 && t[3] == 1000);
    /* fewer decades: 1-2-5 values, range rounded out to them */
    n = plot_log_ticks(64, 8192, 10, true, t, 64, &lo, &hi);
    assert_true(lo == 50 && hi == 10000);
    double want[] = {50, 100, 200, 500, 1000, 2000, 5000, 10000};
    assert_int_equal(n, 8);
    for (int i = 0; i < n; i++) assert_true(t[i] == want[i]);
    /* many decades with a small budget: every k-th decade, at multiples of k */
    n = plot_log_ticks(1e-3, 1e9, 5, true, t, 64, &lo, &hi);
    assert_true(n >= 2 && n <= 5);
    for (int i = 0; i < n; i++) {
        double e = log10(t[i]);
        assert_true(fabs(e - round(e)) < 1e-9);
    }
    /* inside one decade with no 1-2-5 value: linear ticks, all positive */
    n = plot_log_ticks(21, 39, 5, false, t, 64, &lo, &hi);
    assert_true(n >= 2);
    for (int i = 0; i < n; i++) assert_true(t[i] >= 21 && t[i] <= 39);
    /* one value */
    n = plot_log_ticks(7, 7, 5, true, t, 64, &lo, &hi);
    assert_true(n >= 2 && lo < 7 && hi > 7);
    /* unusable */
    assert_int_equal(plot_log_ticks(0, 10, 5, true, t, 64, &lo, &hi), 0);
    assert_int_equal(plot_log_ticks(-1, 10, 5, true, t, 64, &lo, &hi), 0);
    assert_int_equal(plot_log_ticks(1, NAN, 5, true, t, 64, &lo, &hi), 0);
}

static void test_format_tick(void **state) {
    (void)state;
    char b[32];
    plot_format_tick(0.1 + 0.2, 0.1, b, sizeof b);
    assert_string_equal(b, "0.3");
    plot_format_tick(3 * 0.05, 0.05, b, sizeof b);
    assert_string_equal(b, "0.15");
    plot_format_tick(1500, 500, b, sizeof b);
    assert_string_equal(b, "1500");
    plot_format_tick(-0.0, 1, b, sizeof b);
    assert_string_equal(b, "0");
    plot_format_tick(1e-17, 0.2, b, sizeof b); /* float noise at the origin */
    assert_string_equal(b, "0");
    plot_format_tick(2e-9, 1e-9, b, sizeof b);
    assert_string_equal(b, "2e-09");
    plot_format_tick(5e8, 1e8, b, sizeof b);
    assert_string_equal(b, "5e+08");
    plot_format_tick(1000, 0, b, sizeof b); /* log axis */
    assert_string_equal(b, "1000");
    plot_format_tick(0.01, 0, b, sizeof b);
    assert_string_equal(b, "0.01");
    format_value(70.0, b, sizeof b);
    assert_string_equal(b, "70");
    format_value(80.25, b, sizeof b);
    assert_string_equal(b, "80.2");
    format_value(1499.6, b, sizeof b);
    assert_string_equal(b, "1500");
}

// ----------------------------------------------------------------------------
// rendering, read back from the PNG

static void test_line_png(void **state) {
    (void)state;
    char path[128], err[256] = "";
    tmp_path(path, sizeof path, "line.png");
    struct plot *p = plot_new(640, 400, "Throughput", "threads", "tokens/s");
    assert_non_null(p);
    double x[5] = {1, 2, 4, 8, 16}, y1[5] = {10, 19, 35, 60, 80}, y2[5] = {5, NAN, 20, 30, 45};
    assert_int_equal(plot_line(p, "avx512", x, y1, 5), 0);
    assert_int_equal(plot_line(p, "ref", x, y2, 5), 0);
    assert_int_equal(plot_hline(p, 100, "ceiling"), 0);
    assert_int_equal(plot_write_png(p, path, err, sizeof err), 0);
    plot_free(p);

    struct img im = read_png(path);
    assert_int_equal(im.w, 640);
    assert_int_equal(im.h, 400);
    /* both series drawn in their palette colours, inside the plot area
     * (well inside the margins: not on the title, labels or frame) */
    assert_true(count_color(&im, 60, 40, 630, 360, palette[0]) > 200);
    assert_true(count_color(&im, 60, 40, 630, 360, palette[1]) > 100);
    assert_int_equal(count_color(&im, 0, 0, 640, 400, palette[2]), 0);
    /* title: dark pixels near the top, in the middle */
    assert_true(count_dark(&im, 200, 0, 440, 30) > 50);
    assert_int_equal(count_dark(&im, 0, 0, 150, 30), 0);
    /* the reference line's colour */
    assert_true(count_color(&im, 0, 0, 640, 400, COLOR_HLINE) > 200);
    free(im.px);

    /* the same plot without title: nothing dark near the top */
    p = plot_new(640, 400, NULL, NULL, NULL);
    assert_int_equal(plot_line(p, NULL, x, y1, 5), 0);
    assert_int_equal(plot_write_png(p, path, err, sizeof err), 0);
    plot_free(p);
    im = read_png(path);
    assert_int_equal(count_dark(&im, 0, 0, 640, 8), 0);
    assert_true(count_color(&im, 0, 0, 640, 400, palette[0]) > 200);
    free(im.px);
}

/* Bars of value v and 2v: the second is twice as tall (linear axis from 0). */
static void test_bars_png(void **state) {
    (void)state;
    char path[128], err[256] = "";
    tmp_path(path, sizeof path, "bars.png");
    struct plot *p = plot_new(500, 400, "bars", NULL, "tokens/s");
    const char *cats[2] = {"a", "b"};
    double v[2] = {30, 60};
    assert_int_equal(plot_bars(p, cats, v, 2, NULL), 0);
    const char *cats2[1] = {"b"};
    double v2[1] = {45};
    assert_int_equal(plot_bars(p, cats2, v2, 1, "second"), 0);
    assert_int_equal(plot_line(p, "no", v, v, 2), -1); /* kinds don't mix */
    assert_int_equal(plot_cdf(p, "no", v, 2), -1);
    assert_int_equal(plot_write_png(p, path, err, sizeof err), 0);
    plot_free(p);

    struct img im = read_png(path);
    /* tallest run of palette[0] in each half of the image */
    int height[2] = {0, 0};
    for (int half = 0; half < 2; half++)
        for (int x = half * 250; x < half * 250 + 250; x++) {
            int run = 0;
            for (int y = 0; y < 400; y++) run += pix(&im, x, y) == palette[0];
            if (run > height[half]) height[half] = run;
        }
    assert_true(height[0] > 40);
    assert_true(fabs((double)height[1] / height[0] - 2.0) < 0.05);
    /* the second series is only in category "b" (right half) */
    /* the second series has a bar in category "b" (right half) only; on
     * the left there is at most its legend swatch */
    assert_true(count_color(&im, 250, 0, 500, 400, palette[1]) > 1000);
    assert_true(count_color(&im, 0, 0, 250, 400, palette[1]) <= 12 * 9);
    free(im.px);
}

static void test_cdf(void **state) {
    (void)state;
    char path[128], err[256] = "";
    tmp_path(path, sizeof path, "cdf.png");
    struct plot *p = plot_new(400, 300, "TTFT", "ms", "fraction");
    double s[7] = {4, NAN, 1, 3, INFINITY, 2, 2};
    assert_int_equal(plot_cdf(p, "ttft", s, 7), 0);
    assert_int_equal(p->s[0].n, 5); /* non-finite samples dropped */
    for (int i = 1; i < 5; i++) assert_true(p->s[0].x[i - 1] <= p->s[0].x[i]);
    assert_int_equal(plot_bars(p, (const char *const[]){"a"}, s, 1, NULL), -1);
    plot_log_x(p, true);
    assert_int_equal(plot_write_png(p, path, err, sizeof err), 0);
    plot_free(p);
    struct img im = read_png(path);
    /* a rising staircase: ink in the lower left and upper right quadrants */
    assert_true(count_color(&im, 0, 0, 400, 300, palette[0]) > 100);
    free(im.px);
}

/* Empty series, n = 1, all equal, all NaN, log axes with values <= 0: no
 * crash, a valid image, and no series ink where there is nothing to draw. */
static void test_edge_cases(void **state) {
    (void)state;
    char path[128], err[256] = "";
    tmp_path(path, sizeof path, "edge.png");
    double nan3[3] = {NAN, NAN, NAN}, eq[3] = {5, 5, 5}, x3[3] = {1, 2, 3}, neg[3] = {-1, 0, -5};

    struct plot *p = plot_new(300, 200, "", NULL, NULL);
    /* no labels: legend swatches would carry the series colours */
    assert_int_equal(plot_line(p, NULL, x3, eq, 0), 0);
    assert_int_equal(plot_line(p, NULL, x3, nan3, 3), 0);
    assert_int_equal(plot_cdf(p, NULL, nan3, 3), 0);
    assert_int_equal(plot_line(p, "bad", x3, eq, -1), -1);
    assert_int_equal(plot_hline(p, NAN, "x"), -1);
    assert_int_equal(plot_write_png(p, path, err, sizeof err), 0);
    plot_free(p);
    struct img im = read_png(path);
    assert_int_equal(im.w, 300);
    for (int k = 0; k < 3; k++) assert_int_equal(count_color(&im, 0, 0, 300, 200, palette[k]), 0);
    free(im.px);

    p = plot_new(300, 200, "one point, all equal", NULL, NULL);
    assert_int_equal(plot_line(p, "one", x3, eq, 1), 0);
    assert_int_equal(plot_line(p, "equal", x3, eq, 3), 0);
    assert_int_equal(plot_write_png(p, path, err, sizeof err), 0);
    plot_free(p);
    im = read_png(path);
    assert_true(count_color(&im, 0, 0, 300, 200, palette[0]) > 10); /* the lone marker */
    assert_true(count_color(&im, 0, 0, 300, 200, palette[1]) > 100);
    free(im.px);

    /* log axes with nothing positive; fixed ranges; huge values */
    p = plot_new(300, 200, "log", NULL, NULL);
    plot_log_x(p, true);
    plot_log_y(p, true);
    assert_int_equal(plot_line(p, "neg", neg, neg, 3), 0);
    double big[2] = {1e300, -1e300}, xb[2] = {1, 2};
    assert_int_equal(plot_line(p, "big", xb, big, 2), 0);
    plot_y_range(p, NAN, 100);
    assert_int_equal(plot_write_png(p, path, err, sizeof err), 0);
    plot_free(p);
    free(read_png(path).px);

    p = plot_new(300, 200, "range", NULL, NULL);
    assert_int_equal(plot_line(p, "big", xb, big, 2), 0);
    plot_y_range(p, -1, 1); /* the segment crosses the area from far away */
    plot_x_range(p, 1, 1);
    assert_int_equal(plot_write_png(p, path, err, sizeof err), 0);
    plot_free(p);
    free(read_png(path).px);

    /* text outside the font, long labels */
    char lon[600];
    memset(lon, 'W', sizeof lon - 1);
    lon[sizeof lon - 1] = 0;
    p = plot_new(64, 64, "\xc2\xb5s \x01\x7f", lon, lon);
    assert_int_equal(plot_line(p, lon, x3, eq, 3), 0);
    assert_int_equal(plot_hline(p, 5, lon), 0);
    assert_int_equal(plot_write_png(p, path, err, sizeof err), 0);
    plot_free(p);
    free(read_png(path).px);

    assert_null(plot_new(63, 100, NULL, NULL, NULL));
    assert_null(plot_new(100, 100000, NULL, NULL, NULL));
    plot_free(NULL);
}

static void test_write_error(void **state) {
    (void)state;
    char err[256] = "";
    struct plot *p = plot_new(100, 100, NULL, NULL, NULL);
    assert_int_equal(plot_write_png(p, "/nonexistent-dir/x.png", err, sizeof err), -1);
    assert_true(strstr(err, "/nonexistent-dir/x.png") != NULL);
    assert_int_equal(plot_write_png(p, "/nonexistent-dir/x.png", NULL, 0), -1);
    plot_free(p);
}

static void test_grid_png(void **state) {
    (void)state;
    char path[128], err[256] = "";
    tmp_path(path, sizeof path, "grid.png");
    struct plot_grid *g = plot_grid_new(2, 2, 300, 200, "scenario");
    assert_non_null(g);
    assert_null(plot_grid_panel(g, 4));
    assert_null(plot_grid_panel(g, -1));
    struct plot *a = plot_grid_panel(g, 0);
    assert_true(a == plot_grid_panel(g, 0));
    assert_int_equal(plot_set_labels(a, "throughput", NULL, "tok/s"), 0);
    const char *cats[2] = {"x", "y"};
    double v[2] = {3, 4};
    assert_int_equal(plot_bars(a, cats, v, 2, NULL), 0);
    struct plot *b = plot_grid_panel(g, 1);
    double s[4] = {1, 2, 3, 4};
    assert_int_equal(plot_cdf(b, "itl", s, 4), 0);
    struct plot *c = plot_grid_panel(g, 2);
    assert_int_equal(plot_line(c, NULL, s, s, 4), 0);
    plot_free(c); /* a panel belongs to its grid: no-op */
    /* panel 3 never asked for */
    assert_int_equal(plot_grid_write_png(g, path, err, sizeof err), 0);
    int top = g->top;
    plot_grid_free(g);

    struct img im = read_png(path);
    assert_int_equal(im.w, 600);
    assert_int_equal(im.h, 400 + top);
    assert_true(top > 0);
    assert_true(count_dark(&im, 200, 0, 400, top) > 30);              /* grid title */
    assert_true(count_color(&im, 0, top, 300, top + 200, palette[0]) > 500); /* bars */
    assert_true(count_color(&im, 300, top, 600, top + 200, palette[0]) > 50); /* cdf */
    assert_true(count_color(&im, 0, top + 200, 300, top + 400, palette[0]) > 50); /* line */
    assert_int_equal(count_color(&im, 300, top + 200, 600, top + 400, COLOR_BG), 300 * 200);

    assert_null(plot_grid_new(0, 1, 100, 100, NULL));
    assert_null(plot_grid_new(100, 1, 100, 100, NULL)); /* 10000 px wide */
    plot_grid_free(NULL);
    free(im.px);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nice_ticks_examples),
        cmocka_unit_test(test_nice_ticks_properties),
        cmocka_unit_test(test_log_ticks),
        cmocka_unit_test(test_format_tick),
        cmocka_unit_test(test_line_png),
        cmocka_unit_test(test_bars_png),
        cmocka_unit_test(test_cdf),
        cmocka_unit_test(test_edge_cases),
        cmocka_unit_test(test_write_error),
        cmocka_unit_test(test_grid_png),
    };
    return cmocka_run_group_tests(tests, setup_dir, remove_dir);
}
