/*
 * cli.h - the anvil command-line tool: one file per command, thin over
 * libanvil. Exit status: 0 ok, 1 runtime failure, 2 bad usage or bad input.
 */
#ifndef ANVIL_CLI_H
#define ANVIL_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "anvil.h"

int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_serve(int argc, char **argv);

/* `anvil bench --kernels ...` (bench_kernels.c); argv as given to cmd_bench. */
int cli_bench_kernels(int argc, char **argv);

/* Print "anvil CMD: message" to stderr and return 2 (bad usage/input). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Strict number parsing: whole string, range-checked. On failure print an
 * error naming the option and return false. */
bool cli_int(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out);
bool cli_float(const char *cmd, const char *opt, const char *s, double lo, double hi,
               double *out);
/* Value of option argv[*i] (advances *i); NULL with an error when missing. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

#endif
