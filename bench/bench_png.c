/*
 * bench_png.c - charts of `anvil bench --png`: find Python with matplotlib,
 * write the compiled-in bench/plot.py into a private temporary directory
 * (or take $ANVIL_PLOT), keep the records there too, run the script (see
 * bench_png.h for the search order).
 *
 * The script runs as a child process with its stdout sent to our stderr,
 * so nothing it prints can mix into the JSON lines on our stdout.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "args.h"
#include "bench_png.h"

/* bench/plot.py, compiled in by the Makefile (build/<mode>/gen/plot_py.c) */
extern const char bench_plot_py[];
extern const size_t bench_plot_py_len;

/* plot.py's exit statuses (it documents the same) */
enum { PLOT_OK = 0, PLOT_FAILED = 1, PLOT_BAD_INPUT = 2, PLOT_NO_MATPLOTLIB = 3 };
/* our child's status when exec itself failed (as a shell reports it) */
enum { EXEC_FAILED = 127 };

/* ---------------------------------------------------------------------- */
/* where things are */

static bool readable(const char *path) { return access(path, R_OK) == 0; }

/* A private directory for the run's files, "anvil-bench-XXXXXX" under
 * $TMPDIR (or /tmp), in p->dir: the script and the records live there, so
 * Python's path starts in a directory only we write to. Returns 0, or 1
 * after a message (p->dir is then empty). */
static int make_dir(struct bench_png *p) {
    const char *tmp = getenv("TMPDIR");
    snprintf(p->dir, sizeof(p->dir), "%s/anvil-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (mkdtemp(p->dir)) return 0;
    cli_fail(p->cmd, "cannot create a temporary directory %s: %s", p->dir, strerror(errno));
    p->dir[0] = 0;
    return 1;
}

/* The chart script: $ANVIL_PLOT when set (a plot.py being worked on), else
 * the compiled-in copy written to p->dir/plot.py. Returns 0, or 1 after a
 * message. */
static int find_script(struct bench_png *p) {
    const char *env = getenv("ANVIL_PLOT");
    if (env && *env) {
        snprintf(p->script, sizeof(p->script), "%s", env);
        if (readable(p->script)) return 0;
        cli_fail(p->cmd, "ANVIL_PLOT=%s: cannot read it: %s", env, strerror(errno));
        return 1;
    }
    snprintf(p->script, sizeof(p->script), "%s/plot.py", p->dir);
    FILE *f = fopen(p->script, "w");
    bool ok = f && fwrite(bench_plot_py, 1, bench_plot_py_len, f) == bench_plot_py_len;
    if (f && fclose(f) != 0) ok = false;
    if (!ok) cli_fail(p->cmd, "cannot write the chart script to %s: %s", p->script, strerror(errno));
    return ok ? 0 : 1;
}

/* Remove what p->dir holds and the directory itself. */
static void drop_dir(struct bench_png *p) {
    if (!p->dir[0]) return;
    char path[PATH_MAX + 16];
    static const char *const files[] = {"plot.py", "records.jsonl"};
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", p->dir, files[i]);
        unlink(path);
    }
    rmdir(p->dir);
    p->dir[0] = 0;
}

/* ---------------------------------------------------------------------- */
/* running the script */

/* python script argv[0..n) and wait. Returns the exit status, EXEC_FAILED
 * when python could not be started, or -1 when it died from a signal. */
static int run_script(const char *python, const char *script, const char *const *argv, int n) {
    const char *av[BENCH_PNG_MAX_ARGS + 12];
    int k = 0;
    av[k++] = python;
    av[k++] = script;
    for (int i = 0; i < n && k < (int)(sizeof(av) / sizeof(av[0])) - 1; i++) av[k++] = argv[i];
    av[k] = NULL;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        dup2(STDERR_FILENO, STDOUT_FILENO); /* keep our stdout for the records */
        execvp(python, (char *const *)av);
        _exit(EXEC_FAILED);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int bench_png_open(struct bench_png *p, const char *cmd, const char *kind, const char *out,
                   const char *const *args, int n_args) {
    memset(p, 0, sizeof(*p));
    p->cmd = cmd;
    p->kind = kind;
    p->out = out;
    for (int i = 0; i < n_args && i < BENCH_PNG_MAX_ARGS; i++) p->args[p->n_args++] = args[i];

    if (make_dir(p)) return 1;
    if (find_script(p)) {
        drop_dir(p);
        return 1;
    }

    /* candidates, first that imports matplotlib wins */
    char venv[PATH_MAX];
    const char *cand[2];
    int n_cand = 0;
    const char *env = getenv("ANVIL_PYTHON"), *home = getenv("HOME");
    if (env && *env) {
        cand[n_cand++] = env;
    } else {
        if (home && *home) {
            snprintf(venv, sizeof(venv), "%s/.cache/anvil/venv/bin/python", home);
            if (access(venv, X_OK) == 0) cand[n_cand++] = venv;
        }
        cand[n_cand++] = "python3";
    }
    snprintf(p->prog, sizeof(p->prog), "anvil %s", cmd);
    const char *check[BENCH_PNG_MAX_ARGS + 6] = {kind, "--check", "--as", p->prog, "--out", out};
    for (int i = 0; i < p->n_args; i++) check[6 + i] = p->args[i];
    char why[2 * PATH_MAX + 64] = "";
    for (int c = 0; c < n_cand; c++) {
        int st = run_script(cand[c], p->script, check, 6 + p->n_args);
        if (st == PLOT_OK) {
            snprintf(p->python, sizeof(p->python), "%s", cand[c]);
            break;
        }
        if (st == PLOT_BAD_INPUT) { /* the script said why */
            drop_dir(p);
            return 2;
        }
        if (st != PLOT_NO_MATPLOTLIB && st != EXEC_FAILED) {
            cli_fail(cmd, "%s %s --check failed (status %d)", cand[c], p->script, st);
            drop_dir(p);
            return 1;
        }
        size_t l = strlen(why);
        snprintf(why + l, sizeof(why) - l, "%s%s (%s)", l ? ", " : "", cand[c],
                 st == EXEC_FAILED ? "cannot run" : "no matplotlib");
    }
    if (!p->python[0]) {
        cli_fail(cmd,
                 "--png needs Python 3 with matplotlib; tried %s. Install it with `make deps` "
                 "(Debian's python3-matplotlib) or `pip install matplotlib`, or set "
                 "ANVIL_PYTHON to a Python that has it",
                 why);
        drop_dir(p);
        return 1;
    }
    snprintf(p->data, sizeof(p->data), "%s/records.jsonl", p->dir);
    if (!(p->f = fopen(p->data, "w"))) {
        cli_fail(cmd, "cannot create a temporary file %s: %s", p->data, strerror(errno));
        drop_dir(p);
        return 1;
    }
    return 0;
}

FILE *bench_png_data(const struct bench_png *p) { return p->f; }

int bench_png_draw(struct bench_png *p) {
    if (!p->f || fflush(p->f) != 0 || ferror(p->f)) {
        cli_fail(p->cmd, "cannot write the chart data to %s", p->data);
        return 1;
    }
    const char *argv[BENCH_PNG_MAX_ARGS + 6] = {p->kind, "--as", p->prog, "--out", p->out};
    int n = 5;
    for (int i = 0; i < p->n_args; i++) argv[n++] = p->args[i];
    argv[n++] = p->data;
    int st = run_script(p->python, p->script, argv, n);
    if (st != PLOT_OK) {
        /* the script printed its reason, unless it could not start or died */
        if (st == EXEC_FAILED || st < 0)
            cli_fail(p->cmd, "%s %s did not run to the end", p->python, p->script);
        return 1;
    }
    fprintf(stderr, "anvil %s: wrote %s\n", p->cmd, p->out);
    return 0;
}

void bench_png_close(struct bench_png *p) {
    if (!p) return;
    if (p->f) fclose(p->f);
    p->f = NULL;
    p->data[0] = 0;
    drop_dir(p);
}
