/*
 * cv_int.h - internals of the converter (src/convert): JSON file reading
 * and the tokenizer conversion (cv_tok.c), shared with convert.c.
 */
#ifndef ANVIL_CV_INT_H
#define ANVIL_CV_INT_H

#include <cjson/cJSON.h>

#include "convert/kvbuf.h"
#include "core/core.h"

/* dir/name parsed as JSON; NULL with *missing set when the file is not
 * there, NULL with a message (ANVIL_ERR_FORMAT in *st) when it is not JSON. */
cJSON *cv_read_json(const char *dir, const char *name, bool *missing, anvil_status *st, char *err,
                    size_t cap);
/* The whole of dir/name as a NUL-terminated string (NULL when absent). */
char *cv_read_text(const char *dir, const char *name, size_t *len);

/* tokenizer.json (+ tokenizer_config.json, generation_config.json,
 * chat_template.jinja) to tokenizer.ggml.* and tokenizer.chat_template.
 * n_vocab: the model's embedding rows (config vocab_size); the token list
 * is padded to it. pre (>= 32 bytes) gets the pre-tokenizer name. */
anvil_status cv_tokenizer(const char *dir, const cJSON *config, uint64_t n_vocab,
                          struct kvbuf *kb, char *pre, char *err, size_t cap);

#endif
