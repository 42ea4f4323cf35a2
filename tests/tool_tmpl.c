/*
 * tool_tmpl.c - render a chat template with src/tmpl (for the Python
 * tests, which compare it with jinja2):
 *
 *     tool_tmpl TEMPLATE_FILE CONTEXT_JSON_FILE [NOW]
 *
 * Prints the rendered text to stdout byte for byte and exits 0, or prints
 * "error: MESSAGE" to stderr and exits 1. NOW (seconds since the epoch)
 * is the time strftime_now formats; default the current time.
 */
#include <stdio.h>
#include <stdlib.h>
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

int main(int argc, char **argv)
{
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
