/*
 * resp_store.h - responses kept in memory for the OpenAI Responses API
 * (GET /v1/responses/{id}, previous_response_id): a bound on their number
 * and their bytes, an expiry, oldest evicted first. Thread-safe (one
 * mutex). Time is passed in (seconds, any monotonic origin) so that the
 * expiry can be tested without waiting.
 */
#ifndef ANVIL_SRV_RESP_STORE_H
#define ANVIL_SRV_RESP_STORE_H

#include <stdbool.h>
#include <stddef.h>

struct resp_store;

/* A store of at most max_n entries and max_bytes bytes (id + both texts),
 * each kept ttl seconds after it was put. NULL when out of memory or a
 * bound is not positive. */
struct resp_store *resp_store_new(int max_n, size_t max_bytes, double ttl);
void resp_store_free(struct resp_store *st);

/* Keep copies of response (the response object's JSON text, for GET) and
 * conv (the conversation so far as chat messages' JSON text, for
 * previous_response_id) under id, replacing an entry of the same id.
 * Expired entries go first, then the oldest until the new one fits.
 * False (nothing kept, nothing evicted) when the entry alone is over
 * max_bytes or out of memory. */
bool resp_store_put(struct resp_store *st, const char *id, const char *response,
                    const char *conv, double now);
/* Malloc'd copies of the entry's texts (either out may be NULL); false
 * when there is no such entry or it has expired (it is then dropped). */
bool resp_store_get(struct resp_store *st, const char *id, double now, char **response,
                    char **conv);
/* Drop the entry; false when there was none (or it had expired). */
bool resp_store_delete(struct resp_store *st, const char *id, double now);
/* Entries and bytes held now (expired ones included until next touched). */
int resp_store_count(struct resp_store *st);
size_t resp_store_bytes(struct resp_store *st);

#endif
