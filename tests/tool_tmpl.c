/*
 * tool_tmpl.c - render a chat template with src/tmpl (for the Python
 * tests, which compare it with jinja2):
 *
 *     tool_tmpl TEMPLATE_FILE CONTEXT_JSON_FILE [NOW]
 *
 * Prints the rendered text to stdout byte for byte and exits 0, or prints
 * "error: MESSAGE" to stderr and exits 1. NOW (seconds since the epoch)
 * is the time strftime_now formats; default the current time.
 *
 *     tool_tmpl --batch LIST NOW
 *
 * renders many cases in one process (the corpus test): each line of LIST
 * is "TEMPLATE_FILE<TAB>CONTEXT_FILE<TAB>OUT_FILE"; the rendering goes to
 * OUT_FILE, or "error: MESSAGE" to OUT_FILE.err. Exits 0 when every line
 * was handled.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "tmpl/tmpl.h"

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, len = 0;
    char *p = malloc(cap);
    for (size_t k; p && (k = fread(p + len, 1, cap - len, f)) > 0;) {
        len += k;
        if (len == cap) {
            char *q = realloc(p, cap *= 2);
            if (!q) {
                free(p);
                p = NULL;
            }
            p = q;
        }
    }
    fclose(f);
    *n = len;
    return p;
}

static int write_file(const char *path, const char *suffix, const char *p, size_t n)
{
    char name[4096];
    snprintf(name, sizeof name, "%s%s", path, suffix);
    FILE *f = fopen(name, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static int batch(const char *list, int64_t now)
{
    FILE *f = fopen(list, "r");
    if (!f) {
        fprintf(stderr, "error: cannot read %s\n", list);
        return 2;
    }
    char line[3 * 4096];
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *c = strchr(line, '\t'), *o = c ? strchr(c + 1, '\t') : NULL;
        if (!o)
            continue;
        *c++ = '\0';
        *o++ = '\0';
        size_t tn, cn;
        char *t = slurp(line, &tn), *x = slurp(c, &cn);
        if (!t || !x) {
            fprintf(stderr, "error: cannot read %s or %s\n", line, c);
            rc = 2;
        } else {
            char err[512], *out;
            size_t n;
            if (tmpl_render(t, tn, x, cn, NULL, now, &out, &n, err, sizeof err) == 0) {
                if (write_file(o, "", out, n))
                    rc = 2;
                core_free(out);
            } else {
                char msg[600];
                int k = snprintf(msg, sizeof msg, "error: %s", err);
                if (write_file(o, ".err", msg, (size_t)k))
                    rc = 2;
            }
        }
        free(t);
        free(x);
    }
    fclose(f);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--batch"))
        return batch(argv[2], strtoll(argv[3], NULL, 10));
    if (argc < 3) {
        fprintf(stderr, "usage: tool_tmpl TEMPLATE CONTEXT_JSON [NOW]\n");
        return 2;
    }
    size_t tn, cn;
    char *t = slurp(argv[1], &tn), *c = slurp(argv[2], &cn);
    if (!t || !c) {
        fprintf(stderr, "error: cannot read input\n");
        return 2;
    }
    int64_t now = argc > 3 ? strtoll(argv[3], NULL, 10) : (int64_t)time(NULL);
    char err[512], *out;
    size_t n;
    int rc = tmpl_render(t, tn, c, cn, NULL, now, &out, &n, err, sizeof err);
    free(t);
    free(c);
    if (rc) {
        fprintf(stderr, "error: %s\n", err);
        return 1;
    }
    fwrite(out, 1, n, stdout);
    core_free(out);
    return 0;
}
