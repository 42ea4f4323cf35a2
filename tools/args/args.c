/*
 * args.c - strict argument parsing shared by the commands (tools/cli) and
 * the benchmarks (bench/): whole-string numbers with range checks, option
 * values, the one-line "anvil CMD: message" error with exit status 2, and
 * reading the whole of a file an argument names.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"

int cli_fail(const char *cmd, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "anvil %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 2;
}

bool cli_int(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) {
        cli_fail(cmd, "%s expects an integer, got '%s'", opt, s);
        return false;
    }
    if (v < lo || v > hi) {
        cli_fail(cmd, "%s must be in [%ld, %ld], got %ld", opt, lo, hi, v);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *cmd, const char *opt, const char *s, double lo, double hi,
               double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        cli_fail(cmd, "%s expects a number, got '%s'", opt, s);
        return false;
    }
    if (v < lo || v > hi) {
        cli_fail(cmd, "%s must be in [%g, %g], got %g", opt, lo, hi, v);
        return false;
    }
    *out = v;
    return true;
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_fail(cmd, "option %s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

int cli_int_list(const char *cmd, const char *opt, const char *s, long lo, long hi, int *out,
                 int cap) {
    int n = 0;
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < lo || v > hi || n == cap || (*end && *end != ','))
            break;
        out[n++] = (int)v;
        if (!*end) return n;
        p = end + 1;
    }
    cli_fail(cmd, "%s expects a comma-separated list of up to %d integers in [%ld, %ld], got '%s'",
             opt, cap, lo, hi, s);
    return -1;
}

bool cli_read_lines(const char *cmd, const char *path, char **buf, const char ***list, int *n) {
    size_t len;
    if (!(*buf = cli_read_file(path, &len))) {
        cli_fail(cmd, "cannot read %s: %s", path, strerror(errno));
        return false;
    }
    size_t lines = 1;
    for (size_t i = 0; i < len; i++) lines += (*buf)[i] == '\n';
    if (lines > (size_t)INT32_MAX - (size_t)*n - 1) {
        cli_fail(cmd, "%s has too many lines", path);
        return false;
    }
    const char **l2 = realloc(*list, ((size_t)*n + lines + 1) * sizeof(**list));
    if (!l2) {
        cli_fail(cmd, "out of memory");
        return false;
    }
    *list = l2;
    for (char *p = *buf, *nl; p && *p; p = nl ? nl + 1 : NULL) {
        nl = strchr(p, '\n');
        if (nl) *nl = '\0';
        size_t l = strlen(p);
        if (l && p[l - 1] == '\r') p[--l] = '\0';
        if (l) (*list)[(*n)++] = p;
    }
    (*list)[*n] = NULL;
    return true;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap);
    while (b) {
        n += fread(b + n, 1, cap - 1 - n, f);
        if (n < cap - 1) break; /* a short read: end of file or an error */
        char *nb = cap <= SIZE_MAX / 2 ? realloc(b, cap * 2) : NULL;
        if (!nb) {
            free(b);
            b = NULL;
            break;
        }
        b = nb;
        cap *= 2;
    }
    if (b && ferror(f)) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (!b) return NULL;
    b[n] = '\0';
    *len = n;
    return b;
}
