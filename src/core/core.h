/*
 * core.h - shared internals: assertions, status forwarding, logging,
 * allocation (the only malloc in the library, with fault injection for
 * tests), CPU feature detection and overflow-checked arithmetic.
 *
 * Nothing here knows about models, files or kernels.
 */
#ifndef ANVIL_CORE_H
#define ANVIL_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anvil.h"

/* ---------------------------------------------------------------------- */
/* assertions: ANVIL_ASSERT stays on in release, ANVIL_DASSERT is debug only */

void core_abort(const char *file, int line, const char *expr);

#define ANVIL_ASSERT(x) \
    do { \
        if (!(x)) core_abort(__FILE__, __LINE__, #x); \
    } while (0)

#ifdef ANVIL_DEBUG
#define ANVIL_DASSERT(x) ANVIL_ASSERT(x)
#else
#define ANVIL_DASSERT(x) ((void)0)
#endif

/* ---------------------------------------------------------------------- */
/* logging: level from ANVIL_LOG (0 quiet .. 3 debug); default 1 (errors) */

enum { CORE_LOG_ERROR = 1, CORE_LOG_INFO = 2, CORE_LOG_DEBUG = 3 };
void core_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int core_log_level(void);

/* Forward a non-OK status, logging the site at debug level. Needs a local
 * `anvil_status st` and a `fail:` label. */
#define TRY(expr) \
    do { \
        st = (expr); \
        if (st != ANVIL_OK) { \
            if (core_log_level() >= CORE_LOG_DEBUG) \
                core_log(CORE_LOG_DEBUG, "%s:%d: %s -> %s", __FILE__, __LINE__, #expr, \
                          anvil_status_str(st)); \
            goto fail; \
        } \
    } while (0)

/* Write a formatted one-line message into a caller's buffer (may be NULL). */
void errmsg_set(char *err, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---------------------------------------------------------------------- */
/* allocation: every heap allocation of the library goes through these */

void *core_malloc(size_t n);
void *core_calloc(size_t n, size_t size);
void *core_realloc(void *p, size_t n);
/* 64-byte aligned; free with core_free_aligned. */
void *core_malloc_aligned(size_t n);
/* For large buffers read as streams (the packed weights): from 8 MiB up,
 * 2 MiB aligned and advised to the kernel as huge pages (Linux THP in
 * "madvise" mode, Debian's default), so that a decode step streaming the
 * whole model walks hundreds of pages, not hundreds of thousands; below,
 * as core_malloc_aligned. Free with core_free_aligned. */
void *core_malloc_huge(size_t n);
void core_free(void *p);
void core_free_aligned(void *p);
char *core_strdup(const char *s);

/* Test hooks: make the Nth allocation from now fail (0 = never), and read
 * the counters (allocations made, live blocks). */
void core_alloc_fail_at(uint64_t n);
uint64_t core_alloc_count(void);
int64_t core_alloc_live(void);

/* ---------------------------------------------------------------------- */
/* overflow-checked size arithmetic: return false on overflow */

static inline bool size_mul(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool size_add(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline bool u64_mul(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool u64_add(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* ---------------------------------------------------------------------- */
/* CPU features (cpu.c) */

struct cpu_features {
    bool avx2, fma, f16c;
    bool avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16;
    bool amx; /* AMX-TILE and AMX-INT8, tile state enabled in XCR0 and granted by the OS */
    bool amd; /* vendor AuthenticAMD: memory-stream tuning only (kernels/cpu/avx512/avx512.h) */
    int family; /* CPUID display family (base + extended): 0x19 Zen 3/4, 0x1A Zen 5; tuning only */
};
/* Features the CPU has and the OS enables (XCR0 checked). Cached. */
const struct cpu_features *cpu_get_features(void);
int cpu_count_online(void);

/* ---------------------------------------------------------------------- */
/* time */
double time_now_s(void); /* monotonic seconds */

/* ---------------------------------------------------------------------- */
/* splitmix64 (https://prng.di.unimi.it/): advances *state by the golden
 * gamma and returns the mixed output. Seeds the sampler's xoshiro256**
 * and mixes the server's random seeds. */
static inline uint64_t core_splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif /* ANVIL_CORE_H */
