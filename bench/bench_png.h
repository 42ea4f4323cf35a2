/*
 * bench_png.h - `anvil bench ... --png FILE`: a bench writes its records
 * (the JSON lines of --json, plus whatever the chart alone needs) into a
 * temporary data file, and bench/plot.py draws the chart from it with
 * matplotlib.
 *
 * The Python interpreter: $ANVIL_PYTHON when set; otherwise the project's
 * venv (~/.cache/anvil/venv/bin/python, made by `make venv`, matplotlib
 * pinned in tests/requirements.txt), then `python3` on PATH (`make deps`
 * installs Debian's python3-matplotlib), the first that imports
 * matplotlib. The script: $ANVIL_PLOT when set (to try a changed plot.py
 * without a rebuild), else bench/plot.py as compiled into the binary,
 * written into the run's temporary directory: nothing is read from the
 * source tree, wherever the binary is.
 *
 * bench_png_open runs before the bench, so that a missing matplotlib or a
 * bad input file fails at once rather than after a long run.
 */
#ifndef ANVIL_BENCH_PNG_H
#define ANVIL_BENCH_PNG_H

#include <limits.h>
#include <stdio.h>

#define BENCH_PNG_MAX_ARGS 8

struct bench_png {
    const char *cmd;   /* for messages: "bench", "bench --kernels" */
    char prog[64];     /* "anvil " + cmd: the script's messages start with it */
    const char *kind;  /* plot.py's chart kind: kernels, batched, scenarios, attention */
    const char *out;   /* the PNG path (the caller's string) */
    const char *args[BENCH_PNG_MAX_ARGS]; /* extra plot.py arguments (borrowed) */
    int n_args;
    char python[PATH_MAX];
    char dir[PATH_MAX];        /* private temporary directory of the run */
    char script[PATH_MAX + 16]; /* $ANVIL_PLOT, or dir/plot.py */
    char data[PATH_MAX + 16];  /* dir/records.jsonl: the JSON-lines records */
    FILE *f;             /* open on data */
};

/* Find Python with matplotlib and plot.py, let the script check `args`
 * (n_args strings, borrowed until bench_png_close; e.g. a --compare file),
 * and create the data file. Returns 0; 2 when the script rejected an input
 * (it printed why); 1 when there is no usable Python or script, or the
 * temporary file cannot be created (a message is printed). On failure
 * nothing needs closing. */
int bench_png_open(struct bench_png *p, const char *cmd, const char *kind, const char *out,
                   const char *const *args, int n_args);

/* The stream the bench writes its records to (one JSON object a line). */
FILE *bench_png_data(const struct bench_png *p);

/* Draw the chart from the records written so far into p->out. Returns 0
 * (and prints "anvil CMD: wrote FILE" on stderr) or 1. */
int bench_png_draw(struct bench_png *p);

/* Remove the temporary files. NULL or an unopened p is a no-op. */
void bench_png_close(struct bench_png *p);

#endif
