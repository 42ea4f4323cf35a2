/*
 * status.c - status strings, error-message formatting, logging, abort.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core.h"

const char *anvil_status_str(anvil_status s) {
    switch (s) {
    case ANVIL_OK: return "ok";
    case ANVIL_ERR_NOMEM: return "out of memory";
    case ANVIL_ERR_IO: return "i/o error";
    case ANVIL_ERR_FORMAT: return "invalid file format";
    case ANVIL_ERR_UNSUPPORTED: return "unsupported";
    case ANVIL_ERR_INVALID: return "invalid argument";
    case ANVIL_ERR_KV_FULL: return "kv cache full";
    case ANVIL_ERR_DEVICE: return "device error";
    case ANVIL_ERR_ABORTED: return "aborted";
    }
    return "unknown status";
}

void core_abort(const char *file, int line, const char *expr) {
    fprintf(stderr, "anvil: assertion failed at %s:%d: %s\n", file, line, expr);
    abort();
}

int core_log_level(void) {
    static int level = -1; /* benign race: every thread computes the same value */
    if (level < 0) {
        const char *e = getenv("ANVIL_LOG");
        level = e ? atoi(e) : CORE_LOG_ERROR;
    }
    return level;
}

void core_log(int level, const char *fmt, ...) {
    if (level > core_log_level()) return;
    va_list ap;
    va_start(ap, fmt);
    fputs("anvil: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void errmsg_set(char *err, size_t cap, const char *fmt, ...) {
    if (!err || cap == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
}

double time_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
