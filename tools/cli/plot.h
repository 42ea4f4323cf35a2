/*
 * plot.h - small charts for the benchmark commands, written as PNG files.
 *
 * A struct plot collects series (copies of the caller's data) and renders
 * them only when written, so axis ranges cover everything that was added.
 * Three kinds of chart, one kind per plot:
 *   - line charts: plot_line() series with markers, numeric x axis;
 *   - bar charts: plot_bars() calls, one per series; categories are matched
 *     by label, several series give grouped bars;
 *   - distributions: plot_cdf() empirical CDFs (y axis 0..1).
 * plot_hline() adds a labelled dashed reference line to any of them.
 * A struct plot_grid lays several plots out as panels of one image.
 *
 * Text uses a built-in 5x9 bitmap font (ASCII 32..126; other bytes print
 * as '?'), so the only dependency is libpng. Axes pick "nice" 1-2-5 ticks;
 * log axes tick at decades (plus 2 and 5 when few decades are shown).
 * Non-finite values are skipped, and so are values <= 0 on a log axis.
 *
 * Not thread-safe per object; distinct objects are independent. Memory is
 * the CLI's (malloc), not the library's: this is tools/ code.
 */
#ifndef ANVIL_PLOT_H
#define ANVIL_PLOT_H

#include <stdbool.h>
#include <stddef.h>

struct plot;
struct plot_grid;

/* A new empty chart of width x height pixels (each 64..16384). title,
 * xlabel, ylabel are copied; NULL or "" means none. Returns NULL on bad
 * size or out of memory. Free with plot_free(). */
struct plot *plot_new(int width, int height, const char *title, const char *xlabel,
                      const char *ylabel);
/* NULL is a no-op. Must not be called on a panel of a grid. */
void plot_free(struct plot *p);

/* Replace title and axis labels (copied; NULL or "" means none).
 * Returns 0, or -1 when out of memory (the old labels stay). */
int plot_set_labels(struct plot *p, const char *title, const char *xlabel, const char *ylabel);

/* Logarithmic axes (base 10). Ignored for the x axis of bar charts. */
void plot_log_x(struct plot *p, bool on);
void plot_log_y(struct plot *p, bool on);
/* Fix an axis range; NAN for either end keeps that end automatic.
 * Automatic ranges cover the data (line charts plus a 3% margin), then
 * round outwards to a tick (on log axes to a 1-2-5 value or a decade); bar
 * charts on a linear axis always include 0, CDF y axes are 0..1. */
void plot_x_range(struct plot *p, double lo, double hi);
void plot_y_range(struct plot *p, double lo, double hi);

/* Add a line series: points (x[i], y[i]), i < n, joined in order, each with
 * a marker; a non-finite point breaks the line. label may be NULL (no
 * legend entry). Data is copied. Returns 0, or -1 when out of memory, n < 0
 * or the plot already holds bars. */
int plot_line(struct plot *p, const char *label, const double *x, const double *y, int n);

/* Add a bar series: values[i] for category labels[i], i < n. Categories
 * are shared across calls by label (first appearance sets the order); each
 * call is one colour within each group. series names the legend entry (NULL:
 * none). Returns 0, or -1 when out of memory, n < 0, a label is NULL, or the
 * plot already holds lines or CDFs. */
int plot_bars(struct plot *p, const char *const *labels, const double *values, int n,
              const char *series);

/* Add the empirical CDF of samples[0..n) as a step curve: F(x) = fraction of
 * samples <= x. Non-finite samples are dropped before counting. Returns 0, or
 * -1 when out of memory, n < 0 or the plot already holds bars. */
int plot_cdf(struct plot *p, const char *label, const double *samples, int n);

/* A dashed horizontal reference line at y (e.g. a bandwidth ceiling), with
 * label (may be NULL) written above its right end. The automatic y range
 * includes it. Returns 0, or -1 when out of memory or y is not finite. */
int plot_hline(struct plot *p, double y, const char *label);

/* Render and write an RGB PNG. Returns 0, or -1 with a message in err
 * (when err != NULL and cap > 0). */
int plot_write_png(const struct plot *p, const char *path, char *err, size_t cap);

/* ---- multi-panel images */

/* A grid of cols x rows panels, each panel_w x panel_h pixels (64..16384;
 * the whole image at most 16384 on a side), with an optional overall title
 * (copied; NULL or "" for none) in a band above the panels. NULL on bad
 * arguments or out of memory. Free with plot_grid_free(). */
struct plot_grid *plot_grid_new(int cols, int rows, int panel_w, int panel_h, const char *title);
/* NULL is a no-op; frees the panels too. */
void plot_grid_free(struct plot_grid *g);

/* Panel i (0 <= i < cols*rows, row-major from the top left), created empty
 * on first use: draw into it with the calls above and plot_set_labels().
 * The grid owns it (never plot_free it). NULL on bad i or out of memory.
 * Panels never asked for stay blank. */
struct plot *plot_grid_panel(struct plot_grid *g, int i);

/* Render all panels and write one PNG; as plot_write_png(). */
int plot_grid_write_png(const struct plot_grid *g, const char *path, char *err, size_t cap);

/* ---- tick computation (exposed for tests) */

/* Nice linear ticks for [lo, hi]: step is 1, 2 or 5 times a power of ten,
 * the smallest such that at most max_ticks ticks (values below 3 count as 3)
 * cover the range; at least one tick is always inside it. With
 * expand, lo/hi are first rounded outwards to multiples of the step; the
 * range used is returned in *out_lo and *out_hi. lo == hi is widened around
 * the value. Writes up to cap ticks, returns the count (0 if lo or hi is
 * not finite). */
int plot_nice_ticks(double lo, double hi, int max_ticks, bool expand, double *ticks, int cap,
                    double *out_lo, double *out_hi, double *out_step);

/* Ticks for a log10 axis over [lo, hi] (lo > 0): powers of ten, every k-th
 * decade when there are too many, with 2 and 5 added when fewer than three
 * decades are shown. With expand, the range is first rounded out to
 * decades. Writes up to cap ticks; returns the count, 0 on bad input. */
int plot_log_ticks(double lo, double hi, int max_ticks, bool expand, double *ticks, int cap,
                   double *out_lo, double *out_hi);

/* Format tick value v for an axis whose tick step is step (0 for log axes):
 * enough decimals to tell ticks apart, no trailing noise ("0.3", not
 * "0.30000000000000004"), exponent form for very large or small values. */
void plot_format_tick(double v, double step, char *buf, size_t cap);

#endif
