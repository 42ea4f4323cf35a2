/*
 * pool.c - persistent pthread pool with a spinning barrier.
 *
 * Dispatch: the caller bumps `gen` (release); workers wait for gen to
 * change, spinning for a while and then sleeping on a condition variable,
 * so an idle pool costs no CPU but a busy decode loop pays no wake-up.
 * Barrier: sense-reversing counter, spin only (all threads are in fn).
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "pool.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_BEFORE_SLEEP 200000
#define SPIN_BEFORE_YIELD 2000 /* then yield: survives more threads than cores */

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
    _Atomic uint64_t gen;     /* bumped once per pool_run */
    _Atomic int n_done;       /* workers finished with this gen */
    _Atomic int stop;
    _Atomic int bar_count;    /* threads arrived at the barrier */
    _Atomic int bar_sense;
    _Atomic int n_sleeping;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void *worker_main(void *v) {
    struct worker *w = v;
    struct pool *p = w->pool;
    uint64_t seen = 0;
    for (;;) {
        uint64_t g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
               !atomic_load(&p->stop)) {
            if (++spins < SPIN_BEFORE_SLEEP) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        p->fn(p->arg, w->ith, p->n);
        atomic_fetch_add_explicit(&p->n_done, 1, memory_order_release);
    }
    return NULL;
}

anvil_status pool_create(int n_threads, struct pool **out) {
    if (n_threads < 1) n_threads = 1;
    struct pool *p = anvil_calloc(1, sizeof(*p));
    if (!p) return ANVIL_ERR_NOMEM;
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    if (n_threads > 1) {
        p->workers = anvil_calloc((size_t)n_threads - 1, sizeof(*p->workers));
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
        pthread_mutex_lock(&p->mu);
        atomic_store(&p->stop, 1);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n - 1; i++) pthread_join(p->workers[i].tid, NULL);
        anvil_free(p->workers);
    }
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    anvil_free(p);
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
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(arg, 0, p->n);
    for (int spins = 0; atomic_load_explicit(&p->n_done, memory_order_acquire) != p->n - 1;)
        if (++spins < SPIN_BEFORE_YIELD) cpu_relax();
        else sched_yield();
}

void pool_barrier(struct pool *p) {
    if (p->n == 1) return;
    int sense = atomic_load(&p->bar_sense);
    if (atomic_fetch_add(&p->bar_count, 1) == p->n - 1) {
        atomic_store(&p->bar_count, 0);
        atomic_store(&p->bar_sense, !sense);
    } else {
        for (int spins = 0; atomic_load(&p->bar_sense) == sense;)
            if (++spins < SPIN_BEFORE_YIELD) cpu_relax();
            else sched_yield();
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
