/*
 * resp_store.c - the Responses API's store of kept responses: a list in
 * insertion order (oldest first), a linear search by id. The bounds keep
 * it small (the defaults: 1024 entries), so a search costs microseconds
 * next to a generation.
 */
#include "server/resp_store.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct entry {
    char *id, *response, *conv;
    size_t bytes;
    double expires;
};

struct resp_store {
    pthread_mutex_t mu;
    struct entry *e; /* (n,) oldest first */
    int n, max_n;
    size_t bytes, max_bytes;
    double ttl;
};

struct resp_store *resp_store_new(int max_n, size_t max_bytes, double ttl) {
    if (max_n <= 0 || max_bytes == 0 || !(ttl > 0)) return NULL;
    struct resp_store *st = calloc(1, sizeof(*st));
    if (!st) return NULL;
    st->e = calloc((size_t)max_n, sizeof(*st->e));
    if (!st->e) {
        free(st);
        return NULL;
    }
    pthread_mutex_init(&st->mu, NULL);
    st->max_n = max_n;
    st->max_bytes = max_bytes;
    st->ttl = ttl;
    return st;
}

static void entry_free(struct entry *x) {
    free(x->id);
    free(x->response);
    free(x->conv);
    memset(x, 0, sizeof(*x));
}

/* Remove entry i (under mu), keeping the order. */
static void drop(struct resp_store *st, int i) {
    st->bytes -= st->e[i].bytes;
    entry_free(&st->e[i]);
    memmove(&st->e[i], &st->e[i + 1], (size_t)(st->n - i - 1) * sizeof(*st->e));
    st->n--;
    memset(&st->e[st->n], 0, sizeof(*st->e));
}

static void drop_expired(struct resp_store *st, double now) {
    for (int i = 0; i < st->n;) {
        if (st->e[i].expires <= now)
            drop(st, i);
        else
            i++;
    }
}

static int find(const struct resp_store *st, const char *id) {
    for (int i = 0; i < st->n; i++)
        if (!strcmp(st->e[i].id, id)) return i;
    return -1;
}

void resp_store_free(struct resp_store *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) entry_free(&st->e[i]);
    free(st->e);
    pthread_mutex_destroy(&st->mu);
    free(st);
}

static char *dup_or_empty(const char *s) { return strdup(s ? s : ""); }

bool resp_store_put(struct resp_store *st, const char *id, const char *response,
                    const char *conv, double now) {
    if (!st || !id) return false;
    size_t bytes = strlen(id) + (response ? strlen(response) : 0) + (conv ? strlen(conv) : 0);
    if (bytes > st->max_bytes) return false;
    struct entry x = {dup_or_empty(id), dup_or_empty(response), dup_or_empty(conv), bytes,
                      now + st->ttl};
    if (!x.id || !x.response || !x.conv) {
        entry_free(&x);
        return false;
    }
    pthread_mutex_lock(&st->mu);
    int i = find(st, id);
    if (i >= 0) drop(st, i);
    drop_expired(st, now);
    while (st->n > 0 && (st->n >= st->max_n || st->bytes + bytes > st->max_bytes)) drop(st, 0);
    st->e[st->n++] = x;
    st->bytes += bytes;
    pthread_mutex_unlock(&st->mu);
    return true;
}

bool resp_store_get(struct resp_store *st, const char *id, double now, char **response,
                    char **conv) {
    if (response) *response = NULL;
    if (conv) *conv = NULL;
    if (!st || !id) return false;
    pthread_mutex_lock(&st->mu);
    int i = find(st, id);
    bool ok = false;
    if (i >= 0 && st->e[i].expires <= now) {
        drop(st, i);
    } else if (i >= 0) {
        ok = true;
        if (response && !(*response = strdup(st->e[i].response))) ok = false;
        if (ok && conv && !(*conv = strdup(st->e[i].conv))) ok = false;
        if (!ok && response) {
            free(*response);
            *response = NULL;
        }
    }
    pthread_mutex_unlock(&st->mu);
    return ok;
}

bool resp_store_delete(struct resp_store *st, const char *id, double now) {
    if (!st || !id) return false;
    pthread_mutex_lock(&st->mu);
    int i = find(st, id);
    bool ok = i >= 0 && st->e[i].expires > now;
    if (i >= 0) drop(st, i);
    pthread_mutex_unlock(&st->mu);
    return ok;
}

int resp_store_count(struct resp_store *st) {
    if (!st) return 0;
    pthread_mutex_lock(&st->mu);
    int n = st->n;
    pthread_mutex_unlock(&st->mu);
    return n;
}

size_t resp_store_bytes(struct resp_store *st) {
    if (!st) return 0;
    pthread_mutex_lock(&st->mu);
    size_t n = st->bytes;
    pthread_mutex_unlock(&st->mu);
    return n;
}
