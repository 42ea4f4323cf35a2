/*
 * args.h - strict argument parsing for the anvil commands and benchmarks,
 * and reading a file an argument names.
 * Every parser prints one line "anvil CMD: message" on bad input and
 * reports failure; the caller returns exit status 2.
 */
#ifndef ANVIL_CLI_ARGS_H
#define ANVIL_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>

/* Print "anvil CMD: message" to stderr and return 2 (bad usage/input). */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Strict number parsing: whole string, range-checked. On failure print an
 * error naming the option and return false. */
bool cli_int(const char *cmd, const char *opt, const char *s, long lo, long hi, long *out);
bool cli_float(const char *cmd, const char *opt, const char *s, double lo, double hi,
               double *out);

/* "1,4,16": 1..cap integers in [lo, hi], no empty items, into out.
 * Returns the count, or -1 after printing an error naming opt. */
int cli_int_list(const char *cmd, const char *opt, const char *s, long lo, long hi, int *out,
                 int cap);

/* Value of option argv[*i] (advances *i); NULL with an error when missing. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

/* The whole of the file at path (a file named by an argument), malloc'd
 * and NUL-terminated (the NUL not counted in *len); NULL with errno when
 * it cannot be read. The caller frees it with free(). */
char *cli_read_file(const char *path, size_t *len);

/* The non-empty lines of the file at path (a trailing CR dropped) appended
 * to the array *list of *n strings, which grows (realloc) with room for a
 * NULL after them. The lines point into *buf, the file's bytes, which the
 * caller frees with free(). Returns false after cli_fail(cmd, ...). */
bool cli_read_lines(const char *cmd, const char *path, char **buf, const char ***list, int *n);

#endif
