/*
 * main.c - `anvil COMMAND [options]`: dispatch to one command file each,
 * and the shared strict argument parsers.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

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

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"chat", cmd_chat, "interactive chat with the model's template"},
    {"inspect", cmd_inspect, "print a GGUF file's metadata and tensor table"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"quantize", cmd_quantize, "convert a GGUF's weights to another type"},
    {"perplexity", cmd_perplexity, "perplexity and KL divergence over a text"},
    {"bench", cmd_bench, "measure prefill/decode speed and kernels"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: anvil COMMAND [options]   (anvil COMMAND --help for details)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "anvil: unknown command '%s' (see anvil --help)\n", argv[1]);
    return 2;
}
