/*
 * ccache.c - compiled constraints kept by their source: a schema sent
 * with every request is compiled once and its masks are shared.
 *
 * SRV_CCACHE_N entries, least recently used out; an entry holds its own
 * reference to the constraint, and a hit hands out a new one, so an
 * entry evicted while requests still use its constraint frees nothing
 * under them. Keyed by kind, the compile options and the source text
 * byte for byte. Thread-safe (one mutex, never held while compiling).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_int.h"

struct cc_ent {
    enum anvil_constraint_kind kind;
    struct anvil_constraint_params p;
    char *text;
    size_t len;
    uint64_t age;
    struct anvil_constraint *c; /* the cache's reference */
};

struct srv_ccache {
    pthread_mutex_t mu;
    struct cc_ent e[SRV_CCACHE_N];
    uint64_t clock;
};

struct srv_ccache *srv_ccache_new(void) {
    struct srv_ccache *c = calloc(1, sizeof(*c));
    if (c) pthread_mutex_init(&c->mu, NULL);
    return c;
}

void srv_ccache_free(struct srv_ccache *c) {
    if (!c) return;
    for (int i = 0; i < SRV_CCACHE_N; i++) {
        free(c->e[i].text);
        anvil_constraint_free(c->e[i].c);
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}

static bool cc_same(const struct cc_ent *x, enum anvil_constraint_kind kind,
                    const struct anvil_constraint_params *p, const char *text, size_t len) {
    return x->c && x->kind == kind && x->p.compact == p->compact && x->p.or_text == p->or_text &&
           x->len == len && !memcmp(x->text, text, len);
}

/* Compilation runs outside the lock: two requests with the same new
 * schema may both compile it, and the second copy is simply dropped. */
anvil_status srv_ccache_get(struct srv_ccache *cc, const struct anvil_model *m,
                            enum anvil_constraint_kind kind,
                            const struct anvil_constraint_params *p, const char *text,
                            size_t len, struct anvil_constraint **out, char *err,
                            size_t err_cap) {
    if (cc) {
        pthread_mutex_lock(&cc->mu);
        for (int i = 0; i < SRV_CCACHE_N; i++)
            if (cc_same(&cc->e[i], kind, p, text, len)) {
                cc->e[i].age = ++cc->clock;
                *out = anvil_constraint_retain(cc->e[i].c);
                pthread_mutex_unlock(&cc->mu);
                return ANVIL_OK;
            }
        pthread_mutex_unlock(&cc->mu);
    }
    struct anvil_constraint *c = NULL;
    anvil_status st = anvil_constraint_compile(m, kind, text, len, p, &c, err, err_cap);
    if (st != ANVIL_OK) return st;
    *out = c;
    char *copy = cc ? malloc(len + 1) : NULL;
    if (!copy) return ANVIL_OK; /* not cached */
    memcpy(copy, text, len);
    copy[len] = 0;
    pthread_mutex_lock(&cc->mu);
    struct cc_ent *lru = &cc->e[0];
    for (int i = 0; i < SRV_CCACHE_N; i++) {
        if (cc_same(&cc->e[i], kind, p, text, len)) { /* compiled meanwhile */
            lru = NULL;
            break;
        }
        if (!cc->e[i].c || cc->e[i].age < lru->age) lru = &cc->e[i];
    }
    struct anvil_constraint *old = NULL;
    if (lru) {
        free(lru->text);
        old = lru->c;
        *lru = (struct cc_ent){kind, *p, copy, len, ++cc->clock, anvil_constraint_retain(c)};
        copy = NULL;
    }
    pthread_mutex_unlock(&cc->mu);
    free(copy);
    anvil_constraint_free(old);
    return ANVIL_OK;
}
