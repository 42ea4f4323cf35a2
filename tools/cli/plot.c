/*
 * plot.c - line, bar and CDF charts rendered into an RGB buffer and written
 * as PNG with libpng's simplified API (png_image_write_to_file).
 *
 * What it does: keeps copies of the series, and at write time computes axis
 * ranges and ticks, lays out title/labels/tick labels around a plot area,
 * draws grid, reference lines, data, frame, legend and text. Text is a 5x9
 * bitmap font (cap height 7, two rows for descenders) drawn in this file.
 * What it does not do: anti-aliasing, fonts beyond ASCII, colour maps,
 * error bars. It is a tool for `anvil bench --png`, not a plotting library.
 *
 * Invariants: every pixel write goes through put(), which clips to the
 * canvas clip rectangle; line segments are clipped in floating point
 * (Liang-Barsky) before rasterising, so far-away or huge coordinates never
 * make a long loop. Non-finite data never reaches the pixel mapping.
 */
#include "plot.h"

#include <math.h>
#include <png.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLOT_MIN_SIDE 64
#define PLOT_MAX_SIDE 8192

// ----------------------------------------------------------------------------
// font: 5x9 cells for ASCII 32..126. Each byte is one row, top first; bit 4
// is the leftmost pixel. Rows 0..6 hold capitals and digits (baseline under
// row 6); rows 7..8 are descenders (g j p q y , _). Drawn for this file.

#define FONT_W 5
#define FONT_H 9
#define FONT_ADV 6 /* advance per character: glyph + 1 column gap */
#define FONT_CAP 7 /* cap height, used to centre text on a point */

static const uint8_t font5x9[95][FONT_H] = {
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /*   */
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04, 0x00, 0x00}, /* ! */
    {0x0a, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* " */
    {0x0a, 0x0a, 0x1f, 0x0a, 0x1f, 0x0a, 0x0a, 0x00, 0x00}, /* # */
    {0x04, 0x0f, 0x14, 0x0e, 0x05, 0x1e, 0x04, 0x00, 0x00}, /* $ */
    {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03, 0x00, 0x00}, /* % */
    {0x0c, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0d, 0x00, 0x00}, /* & */
    {0x04, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* ' */
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02, 0x00, 0x00}, /* ( */
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08, 0x00, 0x00}, /* ) */
    {0x00, 0x04, 0x15, 0x0e, 0x15, 0x04, 0x00, 0x00, 0x00}, /* star */
    {0x00, 0x04, 0x04, 0x1f, 0x04, 0x04, 0x00, 0x00, 0x00}, /* + */
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x04, 0x08, 0x00}, /* , */
    {0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x00, 0x00, 0x00}, /* - */
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x0c, 0x00, 0x00}, /* . */
    {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00, 0x00, 0x00}, /* slash */
    {0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e, 0x00, 0x00}, /* 0 */
    {0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e, 0x00, 0x00}, /* 1 */
    {0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f, 0x00, 0x00}, /* 2 */
    {0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e, 0x00, 0x00}, /* 3 */
    {0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02, 0x00, 0x00}, /* 4 */
    {0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e, 0x00, 0x00}, /* 5 */
    {0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e, 0x00, 0x00}, /* 6 */
    {0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08, 0x00, 0x00}, /* 7 */
    {0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e, 0x00, 0x00}, /* 8 */
    {0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c, 0x00, 0x00}, /* 9 */
    {0x00, 0x0c, 0x0c, 0x00, 0x0c, 0x0c, 0x00, 0x00, 0x00}, /* : */
    {0x00, 0x0c, 0x0c, 0x00, 0x0c, 0x04, 0x08, 0x00, 0x00}, /* ; */
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02, 0x00, 0x00}, /* < */
    {0x00, 0x00, 0x1f, 0x00, 0x1f, 0x00, 0x00, 0x00, 0x00}, /* = */
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08, 0x00, 0x00}, /* > */
    {0x0e, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04, 0x00, 0x00}, /* ? */
    {0x0e, 0x11, 0x01, 0x0d, 0x15, 0x15, 0x0e, 0x00, 0x00}, /* @ */
    {0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11, 0x00, 0x00}, /* A */
    {0x1e, 0x11, 0x11, 0x1e, 0x11, 0x11, 0x1e, 0x00, 0x00}, /* B */
    {0x0e, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0e, 0x00, 0x00}, /* C */
    {0x1c, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1c, 0x00, 0x00}, /* D */
    {0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f, 0x00, 0x00}, /* E */
    {0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x10, 0x00, 0x00}, /* F */
    {0x0e, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0f, 0x00, 0x00}, /* G */
    {0x11, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11, 0x00, 0x00}, /* H */
    {0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e, 0x00, 0x00}, /* I */
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c, 0x00, 0x00}, /* J */
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11, 0x00, 0x00}, /* K */
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f, 0x00, 0x00}, /* L */
    {0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11, 0x00, 0x00}, /* M */
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11, 0x00, 0x00}, /* N */
    {0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e, 0x00, 0x00}, /* O */
    {0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10, 0x00, 0x00}, /* P */
    {0x0e, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0d, 0x00, 0x00}, /* Q */
    {0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11, 0x00, 0x00}, /* R */
    {0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e, 0x00, 0x00}, /* S */
    {0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00}, /* T */
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e, 0x00, 0x00}, /* U */
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0a, 0x04, 0x00, 0x00}, /* V */
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0a, 0x00, 0x00}, /* W */
    {0x11, 0x11, 0x0a, 0x04, 0x0a, 0x11, 0x11, 0x00, 0x00}, /* X */
    {0x11, 0x11, 0x0a, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00}, /* Y */
    {0x1f, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1f, 0x00, 0x00}, /* Z */
    {0x0e, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0e, 0x00, 0x00}, /* [ */
    {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00, 0x00, 0x00}, /* backslash */
    {0x0e, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0e, 0x00, 0x00}, /* ] */
    {0x04, 0x0a, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* ^ */
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1f, 0x00}, /* _ */
    {0x08, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00}, /* ` */
    {0x00, 0x00, 0x0e, 0x01, 0x0f, 0x11, 0x0f, 0x00, 0x00}, /* a */
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1e, 0x00, 0x00}, /* b */
    {0x00, 0x00, 0x0e, 0x10, 0x10, 0x11, 0x0e, 0x00, 0x00}, /* c */
    {0x01, 0x01, 0x0d, 0x13, 0x11, 0x11, 0x0f, 0x00, 0x00}, /* d */
    {0x00, 0x00, 0x0e, 0x11, 0x1f, 0x10, 0x0e, 0x00, 0x00}, /* e */
    {0x06, 0x09, 0x08, 0x1c, 0x08, 0x08, 0x08, 0x00, 0x00}, /* f */
    {0x00, 0x00, 0x0f, 0x11, 0x11, 0x11, 0x0f, 0x01, 0x0e}, /* g */
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00, 0x00}, /* h */
    {0x04, 0x00, 0x0c, 0x04, 0x04, 0x04, 0x0e, 0x00, 0x00}, /* i */
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c}, /* j */
    {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12, 0x00, 0x00}, /* k */
    {0x0c, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e, 0x00, 0x00}, /* l */
    {0x00, 0x00, 0x1a, 0x15, 0x15, 0x15, 0x15, 0x00, 0x00}, /* m */
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11, 0x00, 0x00}, /* n */
    {0x00, 0x00, 0x0e, 0x11, 0x11, 0x11, 0x0e, 0x00, 0x00}, /* o */
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x1e, 0x10, 0x10}, /* p */
    {0x00, 0x00, 0x0d, 0x13, 0x11, 0x11, 0x0f, 0x01, 0x01}, /* q */
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10, 0x00, 0x00}, /* r */
    {0x00, 0x00, 0x0f, 0x10, 0x0e, 0x01, 0x1e, 0x00, 0x00}, /* s */
    {0x08, 0x08, 0x1c, 0x08, 0x08, 0x09, 0x06, 0x00, 0x00}, /* t */
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0d, 0x00, 0x00}, /* u */
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0a, 0x04, 0x00, 0x00}, /* v */
    {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0a, 0x00, 0x00}, /* w */
    {0x00, 0x00, 0x11, 0x0a, 0x04, 0x0a, 0x11, 0x00, 0x00}, /* x */
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x11, 0x0f, 0x01, 0x0e}, /* y */
    {0x00, 0x00, 0x1f, 0x02, 0x04, 0x08, 0x1f, 0x00, 0x00}, /* z */
    {0x03, 0x04, 0x04, 0x08, 0x04, 0x04, 0x03, 0x00, 0x00}, /* { */
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x00}, /* | */
    {0x18, 0x04, 0x04, 0x02, 0x04, 0x04, 0x18, 0x00, 0x00}, /* } */
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00, 0x00, 0x00}, /* ~ */
};

// ----------------------------------------------------------------------------
// data

enum series_kind { SERIES_LINE, SERIES_BARS, SERIES_CDF };

struct series {
    enum series_kind kind;
    char *label;  /* legend text, NULL for none */
    int n;        /* points (line), categories (bars), finite samples (cdf) */
    double *x;    /* line: (n,) x; cdf: (n,) samples sorted ascending; bars: NULL */
    double *y;    /* line: (n,) y; bars: (n,) values; cdf: NULL */
    char **cats;  /* bars: (n,) category labels; otherwise NULL */
};

struct hline {
    double y;
    char *label; /* NULL for none */
};

struct plot {
    int w, h;
    char *title, *xlabel, *ylabel; /* NULL for none */
    bool log_x, log_y;
    double x_lo, x_hi, y_lo, y_hi; /* fixed range ends, NAN = automatic */
    struct series *s;
    int ns, s_cap;
    struct hline *hl;
    int nh, hl_cap;
    bool in_grid; /* owned by a plot_grid */
};

struct plot_grid {
    int cols, rows, pw, ph;
    int top; /* height of the title band above the panels (0 without title) */
    char *title;
    struct plot **panels; /* (cols*rows,), NULL for panels never asked for */
};

/* Distinct colours for series (the widely used "tab10" set), in order. */
static const uint32_t palette[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd,
                                   0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22, 0x17becf};
#define N_PALETTE ((int)(sizeof palette / sizeof palette[0]))
#define N_MARKERS 6

#define COLOR_BG 0xffffff
#define COLOR_GRID 0xe4e4e4
#define COLOR_FRAME 0x404040
#define COLOR_TEXT 0x202020
#define COLOR_HLINE 0x505050
#define COLOR_LEGEND_BORDER 0xb0b0b0

static char *dup_label(const char *s) {
    if (!s || !*s) return NULL;
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* 0 when s is NULL/empty (result NULL) or copied; -1 when out of memory. */
static int dup_opt(const char *s, char **out) {
    *out = dup_label(s);
    return (s && *s && !*out) ? -1 : 0;
}

static void series_free(struct series *s) {
    free(s->label);
    free(s->x);
    free(s->y);
    if (s->cats)
        for (int i = 0; i < s->n; i++) free(s->cats[i]);
    free(s->cats);
}

static void plot_init(struct plot *p, int w, int h) {
    memset(p, 0, sizeof *p);
    p->w = w;
    p->h = h;
    p->x_lo = p->x_hi = p->y_lo = p->y_hi = NAN;
}

static void plot_clear(struct plot *p) {
    free(p->title);
    free(p->xlabel);
    free(p->ylabel);
    for (int i = 0; i < p->ns; i++) series_free(&p->s[i]);
    free(p->s);
    for (int i = 0; i < p->nh; i++) free(p->hl[i].label);
    free(p->hl);
}

static bool side_ok(int v) { return v >= PLOT_MIN_SIDE && v <= PLOT_MAX_SIDE; }

struct plot *plot_new(int width, int height, const char *title, const char *xlabel,
                      const char *ylabel) {
    if (!side_ok(width) || !side_ok(height)) return NULL;
    struct plot *p = malloc(sizeof *p);
    if (!p) return NULL;
    plot_init(p, width, height);
    if (plot_set_labels(p, title, xlabel, ylabel) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

void plot_free(struct plot *p) {
    if (!p || p->in_grid) return;
    plot_clear(p);
    free(p);
}

int plot_set_labels(struct plot *p, const char *title, const char *xlabel, const char *ylabel) {
    char *t, *x = NULL, *y = NULL;
    if (dup_opt(title, &t) || dup_opt(xlabel, &x) || dup_opt(ylabel, &y)) {
        free(t);
        free(x);
        free(y);
        return -1;
    }
    free(p->title);
    free(p->xlabel);
    free(p->ylabel);
    p->title = t;
    p->xlabel = x;
    p->ylabel = y;
    return 0;
}

void plot_log_x(struct plot *p, bool on) { p->log_x = on; }
void plot_log_y(struct plot *p, bool on) { p->log_y = on; }
void plot_x_range(struct plot *p, double lo, double hi) {
    p->x_lo = lo;
    p->x_hi = hi;
}
void plot_y_range(struct plot *p, double lo, double hi) {
    p->y_lo = lo;
    p->y_hi = hi;
}

static bool has_kind(const struct plot *p, enum series_kind k) {
    for (int i = 0; i < p->ns; i++)
        if (p->s[i].kind == k) return true;
    return false;
}

/* A zeroed slot at the end of p->s, or NULL when out of memory. */
static struct series *series_push(struct plot *p) {
    if (p->ns == p->s_cap) {
        int cap = p->s_cap ? 2 * p->s_cap : 4;
        struct series *s = realloc(p->s, (size_t)cap * sizeof *s);
        if (!s) return NULL;
        p->s = s;
        p->s_cap = cap;
    }
    struct series *s = &p->s[p->ns];
    memset(s, 0, sizeof *s);
    return s;
}

/* Copy n doubles (n may be 0: returns a valid 1-element allocation). */
static double *dup_doubles(const double *v, int n) {
    double *d = malloc((size_t)(n > 0 ? n : 1) * sizeof *d);
    if (d && n > 0) memcpy(d, v, (size_t)n * sizeof *d);
    return d;
}

int plot_line(struct plot *p, const char *label, const double *x, const double *y, int n) {
    if (!p || n < 0 || (n > 0 && (!x || !y)) || has_kind(p, SERIES_BARS)) return -1;
    struct series *s = series_push(p);
    if (!s) return -1;
    s->kind = SERIES_LINE;
    s->n = n;
    s->x = dup_doubles(x, n);
    s->y = dup_doubles(y, n);
    if (!s->x || !s->y || dup_opt(label, &s->label)) {
        series_free(s);
        return -1;
    }
    p->ns++;
    return 0;
}

int plot_bars(struct plot *p, const char *const *labels, const double *values, int n,
              const char *series) {
    if (!p || n < 0 || (n > 0 && (!labels || !values)) || has_kind(p, SERIES_LINE) ||
        has_kind(p, SERIES_CDF))
        return -1;
    for (int i = 0; i < n; i++)
        if (!labels[i]) return -1;
    struct series *s = series_push(p);
    if (!s) return -1;
    s->kind = SERIES_BARS;
    s->y = dup_doubles(values, n);
    s->cats = calloc((size_t)(n > 0 ? n : 1), sizeof *s->cats);
    if (!s->y || !s->cats || dup_opt(series, &s->label)) goto fail;
    for (int i = 0; i < n; i++) {
        size_t len = strlen(labels[i]) + 1;
        s->cats[i] = malloc(len);
        s->n = i + 1; /* so series_free frees what was made */
        if (!s->cats[i]) goto fail;
        memcpy(s->cats[i], labels[i], len);
    }
    s->n = n;
    p->ns++;
    return 0;
fail:
    series_free(s);
    return -1;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int plot_cdf(struct plot *p, const char *label, const double *samples, int n) {
    if (!p || n < 0 || (n > 0 && !samples) || has_kind(p, SERIES_BARS)) return -1;
    struct series *s = series_push(p);
    if (!s) return -1;
    s->kind = SERIES_CDF;
    s->x = malloc((size_t)(n > 0 ? n : 1) * sizeof *s->x);
    if (!s->x || dup_opt(label, &s->label)) {
        series_free(s);
        return -1;
    }
    int m = 0;
    for (int i = 0; i < n; i++)
        if (isfinite(samples[i])) s->x[m++] = samples[i];
    qsort(s->x, (size_t)m, sizeof *s->x, cmp_double);
    s->n = m;
    p->ns++;
    return 0;
}

int plot_hline(struct plot *p, double y, const char *label) {
    if (!p || !isfinite(y)) return -1;
    if (p->nh == p->hl_cap) {
        int cap = p->hl_cap ? 2 * p->hl_cap : 4;
        struct hline *h = realloc(p->hl, (size_t)cap * sizeof *h);
        if (!h) return -1;
        p->hl = h;
        p->hl_cap = cap;
    }
    char *l;
    if (dup_opt(label, &l)) return -1;
    p->hl[p->nh].y = y;
    p->hl[p->nh].label = l;
    p->nh++;
    return 0;
}

// ----------------------------------------------------------------------------
// ticks

int plot_nice_ticks(double lo, double hi, int max_ticks, bool expand, double *ticks, int cap,
                    double *out_lo, double *out_hi, double *out_step) {
    if (!isfinite(lo) || !isfinite(hi)) return 0;
    /* 3, not 2: a range that straddles a multiple of every step (e.g. 0)
     * needs three ticks once rounded out */
    if (max_ticks < 3) max_ticks = 3;
    if (lo > hi) {
        double t = lo;
        lo = hi;
        hi = t;
    }
    double mag_v = fmax(fabs(lo), fabs(hi));
    if (hi - lo <= mag_v * 1e-12) { /* all equal (or nearly): widen around the value */
        double d = mag_v > 0 ? mag_v * 0.1 : 1.0;
        lo -= d;
        hi += d;
    }
    if (!isfinite(hi - lo)) return 0;
    double raw = (hi - lo) / (max_ticks - 1);
    double mag = pow(10.0, floor(log10(raw)));
    static const double mult[] = {1, 2, 5, 10, 20, 50};
    double step = 0, first = 0, last = 0;
    /* Tolerance for "on a tick": values computed as k*step are off by ulps. */
    const double eps = 1e-9;
    for (size_t k = 0; k < sizeof mult / sizeof mult[0]; k++) {
        step = mult[k] * mag;
        if (expand) {
            first = floor(lo / step + eps);
            last = ceil(hi / step - eps);
        } else {
            first = ceil(lo / step - eps);
            last = floor(hi / step + eps);
        }
        if (last - first + 1 <= max_ticks) break;
    }
    if (expand) {
        lo = first * step;
        hi = last * step;
    }
    int n = 0;
    for (double k = first; k <= last && n < cap; k += 1) {
        double t = k * step;
        if (fabs(t) < step * 1e-9) t = 0; /* no "-0" or 1e-17 at the origin */
        ticks[n++] = t;
    }
    if (out_lo) *out_lo = lo;
    if (out_hi) *out_hi = hi;
    if (out_step) *out_step = step;
    return n;
}

int plot_log_ticks(double lo, double hi, int max_ticks, bool expand, double *ticks, int cap,
                   double *out_lo, double *out_hi) {
    if (!isfinite(lo) || !isfinite(hi)) return 0;
    if (lo > hi) {
        double t = lo;
        lo = hi;
        hi = t;
    }
    if (!(lo > 0)) return 0;
    if (max_ticks < 2) max_ticks = 2;
    if (hi / lo < 1 + 1e-9) { /* one value: show the decades around it */
        lo /= 3;
        hi *= 3;
    }
    const double eps = 1e-9;
    double e0 = log10(lo), e1 = log10(hi);
    if (expand && e1 - e0 < 3) {
        /* under three decades, whole decades can waste most of the axis: round
         * out to the nearest 1-2-5 values instead */
        static const double mult[] = {1, 2, 5, 10};
        double d = floor(e0 + eps), m = 1;
        for (int k = 3; k >= 0; k--)
            if (mult[k] * pow(10.0, d) <= lo * (1 + eps)) {
                m = mult[k];
                break;
            }
        lo = m * pow(10.0, d);
        d = floor(e1 - eps);
        for (int k = 0; k < 4; k++)
            if (mult[k] * pow(10.0, d) >= hi * (1 - eps)) {
                m = mult[k];
                break;
            }
        hi = m * pow(10.0, d);
        e0 = log10(lo);
        e1 = log10(hi);
    } else if (expand) {
        e0 = floor(e0 + eps);
        e1 = ceil(e1 - eps);
        lo = pow(10.0, e0);
        hi = pow(10.0, e1);
    }
    if (!(lo > 0) || !isfinite(hi)) return 0;
    double d0 = ceil(e0 - eps), d1 = floor(e1 + eps); /* decades inside [lo, hi] */
    int n = 0;
    if (e1 - e0 < 3) { /* few decades: 1, 2, 5 in each */
        static const double mult[] = {1, 2, 5};
        for (double d = floor(e0 + eps); d <= d1; d += 1)
            for (int k = 0; k < 3; k++) {
                double v = mult[k] * pow(10.0, d);
                if (v >= lo * (1 - eps) && v <= hi * (1 + eps) && n < cap) ticks[n++] = v;
            }
        if (n > max_ticks) n = 0; /* too dense: decades only */
    }
    if (n == 0 && d1 >= d0) {
        double ndec = d1 - d0 + 1, k = 1;
        while (ceil(ndec / k) > max_ticks) k += 1;
        /* keep multiples of k so ticks stay at "round" exponents */
        for (double d = ceil(d0 / k) * k; d <= d1 && n < cap; d += k) ticks[n++] = pow(10.0, d);
    }
    if (n < 2) { /* less than a decade without 1-2-5 points: linear ticks inside */
        n = plot_nice_ticks(lo, hi, max_ticks, false, ticks, cap, NULL, NULL, NULL);
        int m = 0;
        for (int i = 0; i < n; i++)
            if (ticks[i] > 0) ticks[m++] = ticks[i];
        n = m;
    }
    if (out_lo) *out_lo = lo;
    if (out_hi) *out_hi = hi;
    return n;
}

void plot_format_tick(double v, double step, char *buf, size_t cap) {
    if (!cap) return;
    if (!isfinite(v)) {
        snprintf(buf, cap, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    if (step > 0 && fabs(v) < step * 1e-6) v = 0;
    if (v == 0) { /* also turns -0 into "0" */
        snprintf(buf, cap, "0");
        return;
    }
    double a = fabs(v);
    if (a >= 1e7 || a < 1e-4) {
        snprintf(buf, cap, "%.3g", v);
    } else if (step > 0) {
        int dec = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
        if (dec > 10) dec = 10;
        snprintf(buf, cap, "%.*f", dec, v);
    } else {
        snprintf(buf, cap, "%.6g", v);
    }
}

/* Bar value labels: three significant digits, no exponent below 1e7. */
static void format_value(double v, char *buf, size_t cap) {
    double a = fabs(v);
    if (a >= 1e7 || (a < 0.01 && a != 0)) {
        snprintf(buf, cap, "%.2g", v);
        return;
    }
    snprintf(buf, cap, "%.*f", a >= 100 ? 0 : a >= 10 ? 1 : 2, v);
    char *dot = strchr(buf, '.');
    if (!dot) return;
    char *end = buf + strlen(buf);
    while (end > dot + 1 && end[-1] == '0') *--end = 0; /* "70.0" -> "70" */
    if (end == dot + 1) *dot = 0;
}

// ----------------------------------------------------------------------------
// canvas and raster primitives

struct canvas {
    uint8_t *px; /* (h, w, 3) RGB, row-major */
    int w, h;
    int cx0, cy0, cx1, cy1; /* clip rectangle, [cx0, cx1) x [cy0, cy1) */
};

static void set_clip(struct canvas *c, int x0, int y0, int x1, int y1) {
    c->cx0 = x0 < 0 ? 0 : x0;
    c->cy0 = y0 < 0 ? 0 : y0;
    c->cx1 = x1 > c->w ? c->w : x1;
    c->cy1 = y1 > c->h ? c->h : y1;
}

static void put(struct canvas *c, int x, int y, uint32_t rgb) {
    if (x < c->cx0 || x >= c->cx1 || y < c->cy0 || y >= c->cy1) return;
    uint8_t *q = c->px + ((size_t)y * (size_t)c->w + (size_t)x) * 3;
    q[0] = (uint8_t)(rgb >> 16);
    q[1] = (uint8_t)(rgb >> 8);
    q[2] = (uint8_t)rgb;
}

static uint32_t get(const struct canvas *c, int x, int y) {
    const uint8_t *q = c->px + ((size_t)y * (size_t)c->w + (size_t)x) * 3;
    return (uint32_t)q[0] << 16 | (uint32_t)q[1] << 8 | q[2];
}

/* Filled rectangle [x0, x1] x [y0, y1] (inclusive, any order). */
static void fill_rect(struct canvas *c, int x0, int y0, int x1, int y1, uint32_t rgb) {
    if (x0 > x1) {
        int t = x0;
        x0 = x1;
        x1 = t;
    }
    if (y0 > y1) {
        int t = y0;
        y0 = y1;
        y1 = t;
    }
    if (x0 < c->cx0) x0 = c->cx0;
    if (y0 < c->cy0) y0 = c->cy0;
    if (x1 >= c->cx1) x1 = c->cx1 - 1;
    if (y1 >= c->cy1) y1 = c->cy1 - 1;
    for (int y = y0; y <= y1; y++)
        for (int x = x0; x <= x1; x++) put(c, x, y, rgb);
}

static void rect_outline(struct canvas *c, int x0, int y0, int x1, int y1, uint32_t rgb) {
    fill_rect(c, x0, y0, x1, y0, rgb);
    fill_rect(c, x0, y1, x1, y1, rgb);
    fill_rect(c, x0, y0, x0, y1, rgb);
    fill_rect(c, x1, y0, x1, y1, rgb);
}

/* Liang-Barsky: clip segment to [x0, x1] x [y0, y1]; false when outside. */
static bool clip_segment(double *ax, double *ay, double *bx, double *by, double x0, double y0,
                         double x1, double y1) {
    double t0 = 0, t1 = 1, dx = *bx - *ax, dy = *by - *ay;
    double p[4] = {-dx, dx, -dy, dy};
    double q[4] = {*ax - x0, x1 - *ax, *ay - y0, y1 - *ay};
    for (int i = 0; i < 4; i++) {
        if (p[i] == 0) {
            if (q[i] < 0) return false;
            continue;
        }
        double r = q[i] / p[i];
        if (p[i] < 0) {
            if (r > t1) return false;
            if (r > t0) t0 = r;
        } else {
            if (r < t0) return false;
            if (r < t1) t1 = r;
        }
    }
    double sx = *ax, sy = *ay;
    *ax = sx + t0 * dx;
    *ay = sy + t0 * dy;
    *bx = sx + t1 * dx;
    *by = sy + t1 * dy;
    return true;
}

/* Segment of the given width (1 or 2 px), clipped to the canvas clip rect;
 * dash > 0 draws dash px on, dash*2/3 px off. */
static void draw_line(struct canvas *c, double fx0, double fy0, double fx1, double fy1,
                      int width, int dash, uint32_t rgb) {
    if (!isfinite(fx0) || !isfinite(fy0) || !isfinite(fx1) || !isfinite(fy1)) return;
    if (!clip_segment(&fx0, &fy0, &fx1, &fy1, c->cx0, c->cy0, c->cx1 - 1, c->cy1 - 1)) return;
    if (!isfinite(fx0) || !isfinite(fy0) || !isfinite(fx1) || !isfinite(fy1)) return;
    int x0 = (int)lround(fx0), y0 = (int)lround(fy0), x1 = (int)lround(fx1), y1 = (int)lround(fy1);
    int dx = abs(x1 - x0), dy = -abs(y1 - y0);
    int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, err = dx + dy;
    int period = dash + dash * 2 / 3;
    for (int i = 0;; i++) {
        if (dash <= 0 || i % period < dash) {
            put(c, x0, y0, rgb);
            if (width > 1) {
                /* thicken across the main direction */
                if (dx >= -dy)
                    put(c, x0, y0 + 1, rgb);
                else
                    put(c, x0 + 1, y0, rgb);
            }
        }
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * err;
        if (e2 >= dy) {
            err += dy;
            x0 += sx;
        }
        if (e2 <= dx) {
            err += dx;
            y0 += sy;
        }
    }
}

/* Filled marker of radius r centred on (x, y); shape by index. */
static void draw_marker(struct canvas *c, int x, int y, int r, int shape, uint32_t rgb) {
    for (int dy = -r; dy <= r; dy++)
        for (int dx = -r; dx <= r; dx++) {
            bool on;
            switch (shape % N_MARKERS) {
            case 0: on = dx * dx + dy * dy <= r * r + 1; break;                /* circle */
            case 1: on = abs(dx) < r && abs(dy) < r; break;                    /* square */
            case 2: on = 2 * abs(dx) <= dy + r; break;                         /* triangle up */
            case 3: on = abs(dx) + abs(dy) <= r; break;                        /* diamond */
            case 4: on = 2 * abs(dx) <= r - dy; break;                         /* triangle down */
            default: on = abs(dx) <= 1 || abs(dy) <= 1; break;                 /* plus */
            }
            if (on) put(c, x + dx, y + dy, rgb);
        }
}

// ----------------------------------------------------------------------------
// text

static const uint8_t *glyph(unsigned char ch) {
    if (ch < 32 || ch > 126) ch = '?';
    return font5x9[ch - 32];
}

/* Width in pixels of the first len characters at the given scale. */
static int text_wn(size_t len, int scale) { return len ? (int)(len * FONT_ADV - 1) * scale : 0; }
static int text_w(const char *s, int scale) { return s ? text_wn(strlen(s), scale) : 0; }

/* First len characters of s with the cell's top-left at (x, y). */
static void draw_textn(struct canvas *c, int x, int y, const char *s, size_t len, int scale,
                       uint32_t rgb) {
    for (size_t k = 0; k < len; k++) {
        const uint8_t *g = glyph((unsigned char)s[k]);
        int gx = x + (int)k * FONT_ADV * scale;
        for (int r = 0; r < FONT_H; r++)
            for (int col = 0; col < FONT_W; col++)
                if (g[r] & (0x10 >> col))
                    fill_rect(c, gx + col * scale, y + r * scale, gx + col * scale + scale - 1,
                              y + r * scale + scale - 1, rgb);
    }
}

static void draw_text(struct canvas *c, int x, int y, const char *s, int scale, uint32_t rgb) {
    if (s) draw_textn(c, x, y, s, strlen(s), scale, rgb);
}

/* Text reading bottom to top (rotated 90 degrees counter-clockwise), its
 * glyph tops facing left: the cell's left column is x, the text starts at
 * y and runs upwards. */
static void draw_text_up(struct canvas *c, int x, int y, const char *s, uint32_t rgb) {
    for (size_t k = 0; s && s[k]; k++) {
        const uint8_t *g = glyph((unsigned char)s[k]);
        for (int r = 0; r < FONT_H; r++)
            for (int col = 0; col < FONT_W; col++)
                if (g[r] & (0x10 >> col)) put(c, x + r, y - (int)k * FONT_ADV - col, rgb);
    }
}

/* s cut to fit max_w pixels at scale 1, with a '~' marking the cut; the
 * result is in buf (cap bytes). */
static const char *fit_text(const char *s, int max_w, char *buf, size_t cap) {
    size_t len = strlen(s);
    if (text_wn(len, 1) <= max_w || cap < 2) return s;
    size_t keep = max_w > 0 ? (size_t)(max_w + 1) / FONT_ADV : 0;
    if (keep >= cap) keep = cap - 1;
    if (keep == 0) return "";
    memcpy(buf, s, keep - 1);
    buf[keep - 1] = '~';
    buf[keep] = 0;
    return buf;
}

// ----------------------------------------------------------------------------
// layout and rendering of one plot into a rectangle of the canvas

#define MAX_TICKS 64 /* tick array size; tick budgets stay far below (TICK_BUDGET) */
#define TICK_BUDGET(px, per) ((px) / (per) < 3 ? 3 : (px) / (per) > 16 ? 16 : (px) / (per))

struct axis {
    double lo, hi;
    bool log;
    int p0, len; /* pixel start and extent */
    bool flip;   /* y axes grow upwards */
    double ticks[MAX_TICKS];
    int n_ticks;
    double step; /* linear tick step, 0 for log */
};

static bool valid_on(const struct axis *a, double v) { return isfinite(v) && (!a->log || v > 0); }

/* A CDF fraction usable on the y axis (0 has no place on a log axis). */
static double cdf_level(const struct axis *ya, double f) { return ya->log && f < ya->lo ? ya->lo : f; }

static double axis_map(const struct axis *a, double v) {
    double t = a->log ? (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo))
                      : (v - a->lo) / (a->hi - a->lo);
    double span = a->len - 1;
    return a->flip ? a->p0 + (1 - t) * span : a->p0 + t * span;
}

/* Data extent [*lo, *hi] grown by v when v is usable on the axis. */
static void grow(double v, bool log, double *lo, double *hi) {
    if (!isfinite(v) || (log && !(v > 0))) return;
    if (v < *lo) *lo = v;
    if (v > *hi) *hi = v;
}

/* Widen a data extent by 3% on each side (multiplicatively on log axes),
 * so markers at the extremes do not sit on the frame. */
static void pad_range(double *lo, double *hi, bool log) {
    if (!(*lo < *hi)) return;
    if (log) {
        double f = pow(*hi / *lo, 0.03);
        if (isfinite(f)) {
            *lo /= f;
            *hi *= f;
        }
    } else {
        double d = (*hi - *lo) * 0.03;
        if (isfinite(*lo - d) && isfinite(*hi + d)) {
            *lo -= d;
            *hi += d;
        }
    }
}

/* Final range and ticks from the data extent, fixed ends and tick budget. */
static void axis_setup(struct axis *a, double dlo, double dhi, double fix_lo, double fix_hi,
                       int max_ticks) {
    if (a->log) {
        if (!(fix_lo > 0)) fix_lo = NAN; /* a non-positive fixed end is unusable */
        if (!(fix_hi > 0)) fix_hi = NAN;
    }
    if (!isnan(fix_lo)) dlo = fix_lo;
    if (!isnan(fix_hi)) dhi = fix_hi;
    if (!(dlo <= dhi)) { /* no data (or a fixed end beyond the data) */
        if (!isnan(fix_lo) && isnan(fix_hi)) {
            dhi = a->log ? dlo * 10 : dlo + 1;
        } else if (!isnan(fix_hi) && isnan(fix_lo)) {
            dlo = a->log ? dhi / 10 : dhi - 1;
        } else if (isnan(fix_lo) && isnan(fix_hi)) {
            dlo = a->log ? 1 : 0;
            dhi = a->log ? 10 : 1;
        } else {
            double t = dlo;
            dlo = dhi;
            dhi = t;
        }
    }
    bool expand = isnan(fix_lo) || isnan(fix_hi);
    double lo = dlo, hi = dhi;
    if (a->log) {
        a->n_ticks = plot_log_ticks(dlo, dhi, max_ticks, expand, a->ticks, MAX_TICKS, &lo, &hi);
        a->step = 0;
    } else {
        a->n_ticks = plot_nice_ticks(dlo, dhi, max_ticks, expand, a->ticks, MAX_TICKS, &lo, &hi,
                                     &a->step);
    }
    if (a->n_ticks == 0) { /* unusable range (overflow): fall back to a unit axis */
        lo = a->log ? 1 : 0;
        hi = a->log ? 10 : 1;
        a->n_ticks = a->log ? plot_log_ticks(lo, hi, max_ticks, false, a->ticks, MAX_TICKS, NULL,
                                             NULL)
                            : plot_nice_ticks(lo, hi, max_ticks, false, a->ticks, MAX_TICKS,
                                              NULL, NULL, &a->step);
    }
    if (!isnan(fix_lo)) lo = fix_lo;
    if (!isnan(fix_hi)) hi = fix_hi;
    if (!(lo < hi)) { /* equal fixed ends */
        lo = a->log ? lo / 2 : lo - 0.5;
        hi = a->log ? hi * 2 : hi + 0.5;
    }
    /* drop ticks a fixed end cut off */
    int m = 0;
    double tol = (hi - lo) * 1e-9;
    for (int i = 0; i < a->n_ticks; i++)
        if (a->ticks[i] >= lo - tol && a->ticks[i] <= hi + tol) a->ticks[m++] = a->ticks[i];
    a->n_ticks = m;
    a->lo = lo;
    a->hi = hi;
}

/* Category list of a bar chart: union of all series' labels, first
 * appearance first. Returns the count (<= total labels), -1 on OOM. */
static int bar_categories(const struct plot *p, const char ***out) {
    int total = 0;
    for (int i = 0; i < p->ns; i++) total += p->s[i].n;
    const char **cats = malloc((size_t)(total > 0 ? total : 1) * sizeof *cats);
    if (!cats) return -1;
    int n = 0;
    for (int i = 0; i < p->ns; i++)
        for (int j = 0; j < p->s[i].n; j++) {
            int k = 0;
            while (k < n && strcmp(cats[k], p->s[i].cats[j]) != 0) k++;
            if (k == n) cats[n++] = p->s[i].cats[j];
        }
    *out = cats;
    return n;
}

static int bar_index(const char *const *cats, int n, const char *name) {
    for (int k = 0; k < n; k++)
        if (strcmp(cats[k], name) == 0) return k;
    return -1;
}

/* Count pixels in [x0, x1] x [y0, y1] that hold data ink (not background,
 * not grid), used to put the legend where it hides least. */
static long ink(const struct canvas *c, int x0, int y0, int x1, int y1) {
    long n = 0;
    for (int y = y0 < 0 ? 0 : y0; y <= y1 && y < c->h; y++)
        for (int x = x0 < 0 ? 0 : x0; x <= x1 && x < c->w; x++) {
            uint32_t v = get(c, x, y);
            n += v != COLOR_BG && v != COLOR_GRID;
        }
    return n;
}

static void draw_legend(struct canvas *c, const struct plot *p, int ax, int ay, int aw, int ah) {
    int n = 0, lw = 0;
    for (int i = 0; i < p->ns; i++)
        if (p->s[i].label) {
            n++;
            int w = text_w(p->s[i].label, 1);
            if (w > lw) lw = w;
        }
    if (n == 0) return;
    const int row = 13, swatch = 22;
    int bw = 8 + swatch + 6 + lw + 8, bh = 6 + n * row + 2;
    if (bw > aw - 12) bw = aw - 12;
    if (bw < 40 || bh > ah - 12) return; /* no room: leave the data readable */
    int xs[2] = {ax + aw - 7 - bw, ax + 6};
    int ys[2] = {ay + 6, ay + ah - 7 - bh};
    /* corners in order of preference: top right, top left, bottom right, bottom left */
    static const int order[4][2] = {{0, 0}, {1, 0}, {0, 1}, {1, 1}};
    long best = -1;
    int bx = xs[0], by = ys[0];
    for (int k = 0; k < 4; k++) {
        int x = xs[order[k][0]], y = ys[order[k][1]];
        long v = ink(c, x, y, x + bw - 1, y + bh - 1);
        if (best < 0 || v < best) {
            best = v;
            bx = x;
            by = y;
        }
    }
    fill_rect(c, bx, by, bx + bw - 1, by + bh - 1, COLOR_BG);
    rect_outline(c, bx, by, bx + bw - 1, by + bh - 1, COLOR_LEGEND_BORDER);
    int y = by + 5;
    char buf[256];
    for (int i = 0; i < p->ns; i++) {
        const struct series *s = &p->s[i];
        if (!s->label) continue;
        uint32_t col = palette[i % N_PALETTE];
        int cy = y + FONT_CAP / 2;
        if (s->kind == SERIES_BARS) {
            fill_rect(c, bx + 8 + 5, cy - 4, bx + 8 + swatch - 6, cy + 4, col);
        } else {
            draw_line(c, bx + 8, cy, bx + 8 + swatch - 1, cy, 2, 0, col);
            if (s->kind == SERIES_LINE) draw_marker(c, bx + 8 + swatch / 2, cy, 3, i, col);
        }
        const char *t = fit_text(s->label, bw - (8 + swatch + 6) - 6, buf, sizeof buf);
        draw_text(c, bx + 8 + swatch + 6, y, t, 1, COLOR_TEXT);
        y += row;
    }
}

static void draw_series_line(struct canvas *c, const struct series *s, int idx,
                             const struct axis *xa, const struct axis *ya, int ax, int ay, int aw,
                             int ah) {
    uint32_t col = palette[idx % N_PALETTE];
    set_clip(c, ax, ay, ax + aw, ay + ah);
    bool have = false;
    double px = 0, py = 0;
    for (int i = 0; i < s->n; i++) {
        if (!valid_on(xa, s->x[i]) || !valid_on(ya, s->y[i])) {
            have = false; /* a gap breaks the line */
            continue;
        }
        double qx = axis_map(xa, s->x[i]), qy = axis_map(ya, s->y[i]);
        if (have) draw_line(c, px, py, qx, qy, 2, 0, col);
        px = qx;
        py = qy;
        have = true;
    }
    /* Markers may stick out of the plot area by their radius, not more.
     * Dense series (> 64 points) get none: they would merge into a band. */
    if (s->n > 64) return;
    const int r = 3;
    set_clip(c, ax - r, ay - r, ax + aw + r, ay + ah + r);
    for (int i = 0; i < s->n; i++) {
        if (!valid_on(xa, s->x[i]) || !valid_on(ya, s->y[i])) continue;
        double qx = axis_map(xa, s->x[i]), qy = axis_map(ya, s->y[i]);
        if (qx < ax - 0.5 || qx > ax + aw - 0.5 || qy < ay - 0.5 || qy > ay + ah - 0.5) continue;
        draw_marker(c, (int)lround(qx), (int)lround(qy), r, idx, col);
    }
}

static void draw_series_cdf(struct canvas *c, const struct series *s, int idx,
                            const struct axis *xa, const struct axis *ya, int ax, int ay, int aw,
                            int ah) {
    uint32_t col = palette[idx % N_PALETTE];
    set_clip(c, ax, ay, ax + aw, ay + ah);
    bool have = false;
    double px = 0, py = 0;
    for (int i = 0; i < s->n; i++) {
        /* samples <= 0 on a log axis come first (sorted): counted, not drawn */
        if (!valid_on(xa, s->x[i])) continue;
        if (!have) py = axis_map(ya, cdf_level(ya, (double)i / s->n));
        /* ties: one step up to the last equal sample's level */
        while (i + 1 < s->n && s->x[i + 1] == s->x[i]) i++;
        double qx = axis_map(xa, s->x[i]);
        double level = axis_map(ya, cdf_level(ya, (double)(i + 1) / s->n));
        if (have) draw_line(c, px, py, qx, py, 2, 0, col);
        draw_line(c, qx, py, qx, level, 2, 0, col);
        px = qx;
        py = level;
        have = true;
    }
}

static void draw_bars(struct canvas *c, const struct plot *p, const char *const *cats, int ncat,
                      const struct axis *ya, int ax, int ay, int aw, int ah) {
    int nb = p->ns;
    if (ncat == 0 || nb == 0) return;
    double slot = (double)aw / ncat, group = slot * 0.8, bw = group / nb;
    double base = ya->log ? ya->lo : fmin(fmax(0.0, ya->lo), ya->hi);
    double pbase = axis_map(ya, base);
    char buf[32];
    for (int b = 0; b < nb; b++) {
        const struct series *s = &p->s[b];
        uint32_t col = palette[b % N_PALETTE];
        for (int j = 0; j < s->n; j++) {
            int k = bar_index(cats, ncat, s->cats[j]);
            if (k < 0 || !valid_on(ya, s->y[j])) continue;
            double x0 = ax + slot * k + (slot - group) / 2 + bw * b;
            int ix0 = (int)lround(x0), ix1 = (int)lround(x0 + bw) - 1;
            if (bw >= 5) ix1--; /* a 1 px gap between bars of a group */
            if (ix1 < ix0) ix1 = ix0;
            double pv = axis_map(ya, s->y[j]);
            /* clamp in floating point: values far off the axis map far away */
            pv = fmin(fmax(pv, ay - 1.0), ay + ah + 0.0);
            set_clip(c, ax, ay, ax + aw, ay + ah);
            fill_rect(c, ix0, (int)lround(pbase), ix1, (int)lround(pv), col);
            /* value above the bar when it fits */
            format_value(s->y[j], buf, sizeof buf);
            int tw = text_w(buf, 1);
            int ty = s->y[j] >= base ? (int)lround(pv) - FONT_CAP - 3 : (int)lround(pv) + 3;
            if (tw <= ix1 - ix0 + 3 && ty >= ay + 1 && ty + FONT_CAP < ay + ah - 1)
                draw_text(c, (ix0 + ix1 + 1 - tw) / 2, ty, buf, 1, COLOR_TEXT);
        }
    }
}

/* Render p into the canvas rectangle at (ox, oy), p->w x p->h. Returns 0,
 * -1 when out of memory. */
static int render(const struct plot *p, struct canvas *c, int ox, int oy) {
    const int pad = 10;
    int w = p->w, h = p->h;
    set_clip(c, ox, oy, ox + w, oy + h);
    fill_rect(c, ox, oy, ox + w - 1, oy + h - 1, COLOR_BG);

    bool bars = has_kind(p, SERIES_BARS), cdf = has_kind(p, SERIES_CDF);
    const char **cats = NULL;
    int ncat = 0;
    if (bars) {
        ncat = bar_categories(p, &cats);
        if (ncat < 0) return -1;
    }

    /* title */
    int top = oy + pad;
    if (p->title) {
        char buf[256];
        int scale = text_w(p->title, 2) <= w - 2 * pad ? 2 : 1;
        const char *t = scale == 2 ? p->title : fit_text(p->title, w - 2 * pad, buf, sizeof buf);
        draw_text(c, ox + (w - text_w(t, scale)) / 2, top, t, scale, COLOR_TEXT);
        top += FONT_CAP * scale + 10;
    }
    top += 4; /* half a tick label above the top tick */

    /* bottom: x label, tick labels (two rows when bar categories are staggered) */
    int est_aw = w - 2 * pad - 60;
    bool stagger = false;
    if (bars && ncat > 0) {
        int widest = 0;
        for (int k = 0; k < ncat; k++) {
            int tw = text_w(cats[k], 1);
            if (tw > widest) widest = tw;
        }
        stagger = ncat > 1 && widest > est_aw / ncat - 6;
    }
    int xlabel_h = p->xlabel ? FONT_H + 4 : 0;
    int xtick_h = 5 + 4 + FONT_H + (stagger ? FONT_H + 2 : 0);
    int ay1 = oy + h - pad - xlabel_h - xtick_h; /* one past the last row of the area */
    int ay = top, ah = ay1 - ay;

    /* y axis first: its tick labels set the left margin */
    struct axis ya = {.log = p->log_y, .flip = true, .p0 = ay, .len = ah};
    double ylo = INFINITY, yhi = -INFINITY;
    for (int i = 0; i < p->ns; i++) {
        const struct series *s = &p->s[i];
        if (s->kind == SERIES_CDF) continue;
        for (int j = 0; j < s->n; j++) {
            if (s->kind == SERIES_LINE &&
                (!isfinite(s->x[j]) || (p->log_x && !(s->x[j] > 0))))
                continue;
            grow(s->y[j], ya.log, &ylo, &yhi);
        }
    }
    if (cdf) {
        grow(ya.log ? 1e-3 : 0.0, ya.log, &ylo, &yhi);
        grow(1.0, ya.log, &ylo, &yhi);
    }
    for (int i = 0; i < p->nh; i++) grow(p->hl[i].y, ya.log, &ylo, &yhi);
    if (bars && !ya.log && ylo <= yhi) {
        ylo = fmin(ylo, 0.0);
        yhi = fmax(yhi, 0.0);
        if (isnan(p->y_hi) && yhi > 0) yhi += (yhi - ylo) * 0.08; /* room for value labels */
    }
    if (!bars && !cdf) pad_range(&ylo, &yhi, ya.log);
    double fix_ylo = p->y_lo, fix_yhi = p->y_hi;
    if (cdf && !ya.log) { /* fractions: exactly 0..1 unless fixed */
        if (isnan(fix_ylo)) fix_ylo = 0;
        if (isnan(fix_yhi)) fix_yhi = 1;
    }
    axis_setup(&ya, ylo, yhi, fix_ylo, fix_yhi, TICK_BUDGET(ah, 32));

    char lab[MAX_TICKS][32];
    int ytw = 0;
    for (int i = 0; i < ya.n_ticks; i++) {
        plot_format_tick(ya.ticks[i], ya.step, lab[i], sizeof lab[i]);
        int tw = text_w(lab[i], 1);
        if (tw > ytw) ytw = tw;
    }
    int ylabel_w = p->ylabel ? FONT_H + 6 : 0;
    int ax = ox + pad + ylabel_w + ytw + 4 + 5;
    int ax1 = ox + w - pad - 14; /* room for half of the last x tick label */
    int aw = ax1 - ax;
    if (aw < 16 || ah < 16) { /* too small for axes: title only */
        free(cats);
        return 0;
    }

    /* x axis */
    struct axis xa = {.log = p->log_x && !bars, .p0 = ax, .len = aw};
    if (!bars) {
        double xlo = INFINITY, xhi = -INFINITY;
        for (int i = 0; i < p->ns; i++) {
            const struct series *s = &p->s[i];
            for (int j = 0; j < s->n; j++) {
                if (s->kind == SERIES_LINE && !valid_on(&ya, s->y[j])) continue;
                grow(s->x[j], xa.log, &xlo, &xhi);
            }
        }
        if (!cdf) pad_range(&xlo, &xhi, xa.log);
        axis_setup(&xa, xlo, xhi, p->x_lo, p->x_hi, TICK_BUDGET(aw, 70));
    }

    /* grid */
    set_clip(c, ax, ay, ax + aw, ay + ah);
    for (int i = 0; i < ya.n_ticks; i++) {
        int y = (int)lround(axis_map(&ya, ya.ticks[i]));
        fill_rect(c, ax, y, ax + aw - 1, y, COLOR_GRID);
    }
    if (!bars)
        for (int i = 0; i < xa.n_ticks; i++) {
            int x = (int)lround(axis_map(&xa, xa.ticks[i]));
            fill_rect(c, x, ay, x, ay + ah - 1, COLOR_GRID);
        }

    /* data */
    if (bars) {
        draw_bars(c, p, cats, ncat, &ya, ax, ay, aw, ah);
    } else {
        for (int i = 0; i < p->ns; i++) {
            if (p->s[i].kind == SERIES_LINE)
                draw_series_line(c, &p->s[i], i, &xa, &ya, ax, ay, aw, ah);
            else
                draw_series_cdf(c, &p->s[i], i, &xa, &ya, ax, ay, aw, ah);
        }
    }

    /* reference lines, labelled above their right end (below when at the top) */
    for (int i = 0; i < p->nh; i++) {
        if (!valid_on(&ya, p->hl[i].y)) continue;
        double y = axis_map(&ya, p->hl[i].y);
        if (y < ay - 0.5 || y > ay + ah - 0.5) continue;
        set_clip(c, ax, ay, ax + aw, ay + ah);
        draw_line(c, ax, y, ax + aw - 1, y, 2, 8, COLOR_HLINE);
        if (p->hl[i].label) {
            char buf[256];
            const char *t = fit_text(p->hl[i].label, aw - 8, buf, sizeof buf);
            int tw = text_w(t, 1);
            int ty = (int)lround(y) - FONT_CAP - 3;
            if (ty < ay + 2) ty = (int)lround(y) + 4;
            fill_rect(c, ax + aw - 5 - tw - 2, ty - 1, ax + aw - 5 + 1, ty + FONT_CAP, COLOR_BG);
            draw_text(c, ax + aw - 5 - tw, ty, t, 1, COLOR_HLINE);
        }
    }

    /* frame, ticks, tick labels */
    set_clip(c, ox, oy, ox + w, oy + h);
    rect_outline(c, ax - 1, ay - 1, ax + aw, ay + ah, COLOR_FRAME);
    for (int i = 0; i < ya.n_ticks; i++) {
        int y = (int)lround(axis_map(&ya, ya.ticks[i]));
        fill_rect(c, ax - 5, y, ax - 2, y, COLOR_FRAME);
        draw_text(c, ax - 5 - 4 - text_w(lab[i], 1), y - FONT_CAP / 2, lab[i], 1, COLOR_TEXT);
    }
    int tick_y = ay + ah + 5 + 4;
    if (bars) {
        double slot = (double)aw / (ncat > 0 ? ncat : 1);
        char buf[256];
        for (int k = 0; k < ncat; k++) {
            int cx = (int)lround(ax + slot * (k + 0.5));
            int room = (int)(stagger ? 2 * slot : slot) - 6;
            const char *t = fit_text(cats[k], room, buf, sizeof buf);
            int row = stagger ? k % 2 : 0;
            fill_rect(c, cx, ay + ah + 1, cx, ay + ah + 4 + row * (FONT_H + 2), COLOR_FRAME);
            draw_text(c, cx - text_w(t, 1) / 2, tick_y + row * (FONT_H + 2), t, 1, COLOR_TEXT);
        }
    } else {
        int last_x1 = -1000000;
        for (int i = 0; i < xa.n_ticks; i++) {
            int x = (int)lround(axis_map(&xa, xa.ticks[i]));
            fill_rect(c, x, ay + ah + 1, x, ay + ah + 4, COLOR_FRAME);
            char buf[32];
            plot_format_tick(xa.ticks[i], xa.step, buf, sizeof buf);
            int tw = text_w(buf, 1), tx = x - tw / 2;
            if (tx <= last_x1 + 6) continue; /* would touch its left neighbour */
            draw_text(c, tx, tick_y, buf, 1, COLOR_TEXT);
            last_x1 = tx + tw;
        }
    }

    /* axis labels */
    if (p->xlabel) {
        int tw = text_w(p->xlabel, 1);
        draw_text(c, ax + (aw - tw) / 2, oy + h - pad - FONT_CAP, p->xlabel, 1, COLOR_TEXT);
    }
    if (p->ylabel) {
        int tw = text_w(p->ylabel, 1);
        int y0 = ay + (ah + tw) / 2;
        if (tw > ah) y0 = ay + ah; /* too long: start at the bottom, clip at the top */
        draw_text_up(c, ox + pad, y0, p->ylabel, COLOR_TEXT);
    }

    set_clip(c, ox, oy, ox + w, oy + h);
    draw_legend(c, p, ax, ay, aw, ah);
    free(cats);
    return 0;
}

// ----------------------------------------------------------------------------
// PNG output

static void set_err(char *err, size_t cap, const char *fmt, ...) {
    if (!err || !cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

static int canvas_new(struct canvas *c, int w, int h, char *err, size_t cap) {
    c->w = w;
    c->h = h;
    c->px = malloc((size_t)w * (size_t)h * 3);
    if (!c->px) {
        set_err(err, cap, "out of memory for a %dx%d image", w, h);
        return -1;
    }
    memset(c->px, 0xff, (size_t)w * (size_t)h * 3);
    set_clip(c, 0, 0, w, h);
    return 0;
}

static int canvas_write(const struct canvas *c, const char *path, char *err, size_t cap) {
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    img.width = (png_uint_32)c->w;
    img.height = (png_uint_32)c->h;
    img.format = PNG_FORMAT_RGB;
    if (!png_image_write_to_file(&img, path, 0, c->px, 0, NULL)) {
        set_err(err, cap, "%s: %s", path, img.message[0] ? img.message : "write failed");
        png_image_free(&img);
        return -1;
    }
    return 0;
}

int plot_write_png(const struct plot *p, const char *path, char *err, size_t cap) {
    if (!p || !path) {
        set_err(err, cap, "no plot or no path");
        return -1;
    }
    struct canvas c;
    if (canvas_new(&c, p->w, p->h, err, cap)) return -1;
    int rc = render(p, &c, 0, 0);
    if (rc)
        set_err(err, cap, "out of memory while drawing");
    else
        rc = canvas_write(&c, path, err, cap);
    free(c.px);
    return rc;
}

// ----------------------------------------------------------------------------
// grids

struct plot_grid *plot_grid_new(int cols, int rows, int panel_w, int panel_h, const char *title) {
    if (cols < 1 || rows < 1 || !side_ok(panel_w) || !side_ok(panel_h)) return NULL;
    int top = title && *title ? 2 * FONT_CAP + 16 : 0;
    if ((long)cols * panel_w > PLOT_MAX_SIDE || (long)rows * panel_h + top > PLOT_MAX_SIDE)
        return NULL;
    struct plot_grid *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->cols = cols;
    g->rows = rows;
    g->pw = panel_w;
    g->ph = panel_h;
    g->top = top;
    g->panels = calloc((size_t)cols * (size_t)rows, sizeof *g->panels);
    if (!g->panels || dup_opt(title, &g->title)) {
        free(g->panels);
        free(g);
        return NULL;
    }
    return g;
}

void plot_grid_free(struct plot_grid *g) {
    if (!g) return;
    for (int i = 0; i < g->cols * g->rows; i++)
        if (g->panels[i]) {
            plot_clear(g->panels[i]);
            free(g->panels[i]);
        }
    free(g->panels);
    free(g->title);
    free(g);
}

struct plot *plot_grid_panel(struct plot_grid *g, int i) {
    if (!g || i < 0 || i >= g->cols * g->rows) return NULL;
    if (!g->panels[i]) {
        struct plot *p = malloc(sizeof *p);
        if (!p) return NULL;
        plot_init(p, g->pw, g->ph);
        p->in_grid = true;
        g->panels[i] = p;
    }
    return g->panels[i];
}

int plot_grid_write_png(const struct plot_grid *g, const char *path, char *err, size_t cap) {
    if (!g || !path) {
        set_err(err, cap, "no grid or no path");
        return -1;
    }
    struct canvas c;
    if (canvas_new(&c, g->cols * g->pw, g->rows * g->ph + g->top, err, cap)) return -1;
    int rc = 0;
    if (g->title) {
        int scale = text_w(g->title, 2) <= c.w - 20 ? 2 : 1;
        int tw = text_w(g->title, scale);
        draw_text(&c, tw <= c.w - 20 ? (c.w - tw) / 2 : 10, 10, g->title, scale, COLOR_TEXT);
    }
    for (int i = 0; i < g->cols * g->rows && rc == 0; i++)
        if (g->panels[i])
            rc = render(g->panels[i], &c, (i % g->cols) * g->pw, g->top + (i / g->cols) * g->ph);
    if (rc)
        set_err(err, cap, "out of memory while drawing");
    else
        rc = canvas_write(&c, path, err, cap);
    free(c.px);
    return rc;
}
