/*
 * alloc.c - the only place the library calls malloc.
 *
 * Counters make "no allocation on the hot path" checkable (bench reads
 * core_alloc_count before and after the timed loop), and fault injection
 * lets tests/unit_model.c (test_oom_walk) fail every allocation of model
 * load, context and engine init and request admission in turn, and check that
 * each failure is handled cleanly (sqlite's OOM discipline).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core.h"

static _Atomic uint64_t n_calls;
static _Atomic int64_t n_live;
static _Atomic uint64_t fail_at; /* absolute call number that fails; 0 = never */

void core_alloc_fail_at(uint64_t n) {
    atomic_store(&fail_at, n ? atomic_load(&n_calls) + n : 0);
}
uint64_t core_alloc_count(void) { return atomic_load(&n_calls); }
int64_t core_alloc_live(void) { return atomic_load(&n_live); }

static bool should_fail(void) {
    uint64_t k = atomic_fetch_add(&n_calls, 1) + 1;
    uint64_t f = atomic_load(&fail_at);
    return f != 0 && k == f;
}

void *core_malloc(size_t n) {
    if (should_fail()) return NULL;
    void *p = malloc(n ? n : 1);
    if (p) atomic_fetch_add(&n_live, 1);
    return p;
}

void *core_calloc(size_t n, size_t size) {
    if (should_fail()) return NULL;
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p) atomic_fetch_add(&n_live, 1);
    return p;
}

void *core_realloc(void *p, size_t n) {
    if (should_fail()) return NULL;
    void *q = realloc(p, n ? n : 1);
    if (q && !p) atomic_fetch_add(&n_live, 1);
    return q;
}

void *core_malloc_aligned(size_t n) {
    if (should_fail()) return NULL;
    void *p = NULL;
    size_t sz = (n + 63) & ~(size_t)63;
    if (sz < n || posix_memalign(&p, 64, sz ? sz : 64) != 0) return NULL;
    atomic_fetch_add(&n_live, 1);
    return p;
}

void *core_malloc_huge(size_t n) {
    enum { HUGE = 2 << 20 };
    if (n < 4 * (size_t)HUGE) return core_malloc_aligned(n);
    if (should_fail()) return NULL;
    void *p = NULL;
    size_t sz = (n + HUGE - 1) & ~(size_t)(HUGE - 1);
    if (sz < n || posix_memalign(&p, HUGE, sz) != 0) return NULL;
#if defined(__linux__)
    (void)madvise(p, sz, MADV_HUGEPAGE); /* advice only: the buffer works without it */
#endif
    atomic_fetch_add(&n_live, 1);
    return p;
}

void core_free(void *p) {
    if (!p) return;
    atomic_fetch_sub(&n_live, 1);
    free(p);
}

void core_free_aligned(void *p) { core_free(p); }

char *core_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = core_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}
