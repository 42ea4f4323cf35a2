/*
 * pool.h - persistent thread pool for the forward pass.
 *
 * pool_run() runs fn(arg, ith, nth) on nth threads (the caller is ith 0) and
 * returns when all are done. Inside fn, pool_barrier() synchronises all nth
 * threads, so a whole layer can run in one pool_run with a few barriers
 * (ggml's ith/nth model). Workers spin briefly, then sleep, between runs.
 * Threads are created once at pool_create; nothing is allocated per run.
 */
#ifndef ANVIL_POOL_H
#define ANVIL_POOL_H

#include "core.h"

struct pool;
typedef void (*pool_fn)(void *arg, int ith, int nth);

anvil_status pool_create(int n_threads, struct pool **out);
void pool_free(struct pool *p); /* NULL is a no-op; joins the workers */
int pool_size(const struct pool *p);
void pool_run(struct pool *p, pool_fn fn, void *arg);
void pool_barrier(struct pool *p);

/* Split [0, n) into nth near-equal parts, aligned to `align`: part ith is
 * [*r0, *r1). */
void pool_split(int n, int ith, int nth, int align, int *r0, int *r1);

#endif
