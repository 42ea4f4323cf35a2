/*
 * pool.c - persistent pthread pool with a spin-then-sleep barrier.
 *
 * Dispatch: the caller bumps `gen`; workers wait for gen to change,
 * spinning a little and then sleeping on a futex, so an idle pool costs no
 * CPU and a busy decode loop pays no wake-up.
 * Barrier: sense-reversing counter; a thread that arrives early spins for
 * a short while (a balanced phase ends within microseconds) and then
 * sleeps on a futex of the sense word; the last to arrive flips the sense
 * and wakes the sleepers, if any (counted, so the common case makes no
 * system call). The caller waits for the workers at the end of pool_run
 * the same way.
 *
 * Why sleep rather than spin or yield: with more threads than free cores
 * (-t 4 on 2 cores, or another process holding a core) a spinning waiter
 * burns the very core the thread it waits for needs, and sched_yield does
 * not hand the core over reliably (CFS may pick the spinner again); the
 * step then collapses to the scheduler's tick. A futex wait gives the core
 * away until the event happens (measured in bench/results/pool-*.json).
 *
 * Memory order: every shared counter here is seq_cst, so "announce I sleep,
 * then re-check the condition" on one side and "change the condition, then
 * check for sleepers" on the other cannot both miss each other; the futex
 * wait itself re-checks the word atomically in the kernel.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Spins before a worker idle between runs sleeps: a decode loop calls
 * pool_run again within tens of microseconds, and must not pay a wake-up. */
#define SPIN_IDLE 20000
/* Spins before a barrier or the end of a run sleeps: phases are balanced,
 * so a wait longer than this means a thread was descheduled. */
#define SPIN_WAIT 2000

/* Sleep while *word == val (returns at once if it already differs; may
 * return spuriously: callers loop). */
static void word_wait(_Atomic int *word, int val) {
#if defined(__linux__)
    (void)syscall(SYS_futex, (int *)word, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    (void)word;
    (void)val;
    sched_yield();
#endif
}

static void word_wake_all(_Atomic int *word) {
#if defined(__linux__)
    (void)syscall(SYS_futex, (int *)word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
#else
    (void)word;
#endif
}

struct worker {
    struct pool *pool;
    pthread_t tid;
    int ith;
};

struct pool {
    int n;
    struct worker *workers; /* n - 1 workers; the caller is thread 0 */
    pool_fn fn;
    void *arg;
    _Atomic int gen;          /* bumped once per pool_run (wraps; only change matters) */
    _Atomic int n_done;       /* workers finished with this gen */
    _Atomic int stop;
    _Atomic int bar_count;    /* threads arrived at the barrier */
    _Atomic int bar_sense;
    _Atomic int n_sleeping;   /* workers asleep on gen */
    _Atomic int bar_sleeping; /* threads asleep on bar_sense */
    _Atomic int done_sleeping;/* the caller asleep on n_done */
};

static void *worker_main(void *v) {
    struct worker *w = v;
    struct pool *p = w->pool;
    int seen = 0;
    for (;;) {
        int g;
        int spins = 0;
        while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop)) {
            if (++spins < SPIN_IDLE) {
                cpu_relax();
                continue;
            }
            atomic_fetch_add(&p->n_sleeping, 1);
            if (atomic_load(&p->gen) == seen && !atomic_load(&p->stop)) word_wait(&p->gen, seen);
            atomic_fetch_sub(&p->n_sleeping, 1);
            spins = 0;
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        p->fn(p->arg, w->ith, p->n);
        if (atomic_fetch_add(&p->n_done, 1) == p->n - 2 && atomic_load(&p->done_sleeping))
            word_wake_all(&p->n_done); /* the last worker out wakes the caller */
    }
    return NULL;
}

anvil_status pool_create(int n_threads, struct pool **out) {
    if (n_threads < 1) n_threads = 1;
    struct pool *p = core_calloc(1, sizeof(*p));
    if (!p) return ANVIL_ERR_NOMEM;
    p->n = n_threads;
    if (n_threads > 1) {
        p->workers = core_calloc((size_t)n_threads - 1, sizeof(*p->workers));
        if (!p->workers) {
            pool_free(p);
            return ANVIL_ERR_NOMEM;
        }
        for (int i = 0; i < n_threads - 1; i++) {
            p->workers[i].pool = p;
            p->workers[i].ith = i + 1;
            if (pthread_create(&p->workers[i].tid, NULL, worker_main, &p->workers[i]) != 0) {
                p->n = i + 1; /* the ones that started */
                pool_free(p);
                return ANVIL_ERR_NOMEM;
            }
        }
    }
    *out = p;
    return ANVIL_OK;
}

void pool_free(struct pool *p) {
    if (!p) return;
    if (p->workers) {
        atomic_store(&p->stop, 1);
        atomic_fetch_add(&p->gen, 1);
        word_wake_all(&p->gen);
        for (int i = 0; i < p->n - 1; i++) pthread_join(p->workers[i].tid, NULL);
        core_free(p->workers);
    }
    core_free(p);
}

int pool_size(const struct pool *p) { return p->n; }

void pool_run(struct pool *p, pool_fn fn, void *arg) {
    if (p->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store(&p->n_done, 0);
    atomic_fetch_add(&p->gen, 1); /* seq_cst: ordered before the n_sleeping load */
    if (atomic_load(&p->n_sleeping) > 0) word_wake_all(&p->gen);
    fn(arg, 0, p->n);
    int spins = 0, d;
    while ((d = atomic_load(&p->n_done)) != p->n - 1) {
        if (++spins < SPIN_WAIT) {
            cpu_relax();
            continue;
        }
        atomic_fetch_add(&p->done_sleeping, 1);
        if ((d = atomic_load(&p->n_done)) != p->n - 1) word_wait(&p->n_done, d);
        atomic_fetch_sub(&p->done_sleeping, 1);
    }
}

void pool_barrier(struct pool *p) {
    if (p->n == 1) return;
    int sense = atomic_load(&p->bar_sense);
    if (atomic_fetch_add(&p->bar_count, 1) == p->n - 1) {
        atomic_store(&p->bar_count, 0);
        atomic_store(&p->bar_sense, !sense);
        if (atomic_load(&p->bar_sleeping) > 0) word_wake_all(&p->bar_sense);
        return;
    }
    int spins = 0;
    while (atomic_load(&p->bar_sense) == sense) {
        if (++spins < SPIN_WAIT) {
            cpu_relax();
            continue;
        }
        atomic_fetch_add(&p->bar_sleeping, 1);
        if (atomic_load(&p->bar_sense) == sense) word_wait(&p->bar_sense, sense);
        atomic_fetch_sub(&p->bar_sleeping, 1);
    }
}

void pool_split(int n, int ith, int nth, int align, int *r0, int *r1) {
    if (align < 1) align = 1;
    int units = (n + align - 1) / align;
    int per = units / nth, rem = units % nth;
    int u0 = ith * per + (ith < rem ? ith : rem);
    int u1 = u0 + per + (ith < rem ? 1 : 0);
    int a = u0 * align, b = u1 * align;
    *r0 = a < n ? a : n;
    *r1 = b < n ? b : n;
}
