/*
 * tok.h - tokenizer built from GGUF metadata: byte-level BPE
 * (tokenizer.ggml.model = "gpt2") with the pre-tokenizer regexes that
 * tokenizer.ggml.pre names (PCRE2, Unicode properties), SentencePiece-style
 * vocabularies ("llama": merges by score, byte fallback, U+2581 for
 * spaces), raw-UTF-8 BPE ("gemma4"), the encoders' WordPiece ("bert") and
 * Unigram ("t5", with SentencePiece's precompiled charsmap), special and
 * user-defined tokens cut
 * out before merging, streaming-safe decoding, and the chat template
 * family recognised from tokenizer.chat_template.
 *
 * The vocabulary is read-only after tok_load (tok_chat_set aside, which
 * must run before the vocabulary is shared) and may be used by any number
 * of threads. Reference behaviour: llama.cpp's llama-vocab.cpp /
 * unicode.cpp (the differential tests compare against llama-cpp-python on
 * the same GGUF).
 */
#ifndef ANVIL_TOK_H
#define ANVIL_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anvil.h"
#include "gguf/gguf.h"

struct tok_vocab;

/* Build the vocabulary from f's tokenizer.* keys. ANVIL_ERR_FORMAT for
 * missing/inconsistent keys, ANVIL_ERR_UNSUPPORTED for an unknown model or
 * pre-tokenizer; a one-line reason goes to err. The vocab copies what it
 * needs: it does not keep pointers into f after returning. */
anvil_status tok_load(const struct gguf_file *f, struct tok_vocab **out, char *err,
                      size_t err_cap);
void tok_free(struct tok_vocab *v); /* NULL is a no-op */

int32_t tok_n_vocab(const struct tok_vocab *v);
anvil_token tok_bos(const struct tok_vocab *v); /* -1 if none */
anvil_token tok_eos(const struct tok_vocab *v); /* -1 if none */
/* The separator ([SEP] for WordPiece, </s> for XLM-R vocabularies;
 * tokenizer.ggml.seperator_token_id, llama.cpp's spelling), -1 if none.
 * A reranker's pair is [CLS] query [SEP] document [SEP]: tok_encode the
 * query with add_special (which for WordPiece gives [CLS] ... [SEP]), then
 * the document without it, then append tok_sep. */
anvil_token tok_sep(const struct tok_vocab *v);
/* Whether add_special puts the separator last (WordPiece). */
bool tok_add_sep(const struct tok_vocab *v);
bool tok_add_bos(const struct tok_vocab *v);
bool tok_add_eos(const struct tok_vocab *v); /* EOS after a text with add_special */
/* A fill-in-the-middle token (enum anvil_fim), -1 if none. */
anvil_token tok_fim(const struct tok_vocab *v, int which);
bool tok_is_eog(const struct tok_vocab *v, anvil_token t);

/* Same contracts as anvil_tokenize / anvil_token_to_piece / anvil_detok_* /
 * anvil_chat_apply in anvil.h, made precise here:
 *
 * tok_encode: number of tokens; -(needed) when cap is too small (out holds
 *   the first cap ids); INT32_MIN on out-of-memory or bad arguments
 *   (v NULL, text NULL with len > 0, cap < 0, len > 1 GiB). Allocates
 *   per-call scratch (freed before returning). Thread-safe on a shared v.
 * tok_piece: byte count (not NUL-terminated); -(needed) when cap is too
 *   small; 0 for an out-of-range id, an unused token, or a control/unknown
 *   token when special is false.
 * tok_detok_push: appends token t (control tokens print nothing) and writes
 *   the complete characters now available, NUL-terminated; invalid bytes
 *   become U+FFFD. Returns bytes written (without the NUL), or -(needed,
 *   NUL included) when cap is too small, in which case *d is unchanged.
 * tok_detok_flush: the held-back tail (at most 3 bytes of an unfinished
 *   character) becomes one U+FFFD; same return convention.
 * tok_chat_apply: the conversation rendered as text (BOS left out: it is
 *   added by tokenizing with add_special); bytes written without the NUL;
 *   -(needed, NUL included) when cap is too small; INT32_MIN on
 *   out-of-memory or bad arguments. Allocates per-call scratch.
 * tok_chat_tokenize: the same conversation tokenized as tok_encode of that
 *   text with add_special and parse_special would, except that control
 *   tokens are not recognised inside message content or roles (a message
 *   that contains "<|im_start|>" gives its text tokens). Same return
 *   convention as tok_encode. */
int32_t tok_encode(const struct tok_vocab *v, const char *text, size_t len, anvil_token *out,
                   int32_t cap, bool add_special, bool parse_special);
int32_t tok_piece(const struct tok_vocab *v, anvil_token t, char *buf, int32_t cap, bool special);
int32_t tok_detok_push(const struct tok_vocab *v, struct anvil_detok *d, anvil_token t, char *buf,
                       int32_t cap);
int32_t tok_detok_flush(struct anvil_detok *d, char *buf, int32_t cap);
int32_t tok_chat_apply(const struct tok_vocab *v, const struct anvil_chat_msg *msgs,
                       size_t n_msgs, bool add_assistant, char *buf, int32_t cap);
int32_t tok_chat_tokenize(const struct tok_vocab *v, const struct anvil_chat_msg *msgs,
                          size_t n_msgs, bool add_assistant, anvil_token *out, int32_t cap);
/* tok_chat_apply, with the BOS text written where the template has
 * bos_token when with_bos (the tests compare with Jinja that way). */
int32_t tok_chat_render_text(const struct tok_vocab *v, const struct anvil_chat_msg *msgs,
                             size_t n_msgs, bool add_assistant, bool with_bos, char *buf,
                             int32_t cap);

/* The chat template family in use ("chatml", "llama3", "gemma", ...) and
 * how it was chosen (enum anvil_chat_source). */
const char *tok_chat_name(const struct tok_vocab *v);
int tok_chat_source(const struct tok_vocab *v);
/* Use family `name` (one of anvil_chat_template_names()); ANVIL_ERR_INVALID
 * for an unknown name. Not thread-safe: call before sharing v. */
anvil_status tok_chat_set(struct tok_vocab *v, const char *name);
/* "chatml, llama3, ..." */
const char *tok_chat_names(void);

/* The Jinja template (chat_jinja.c). The GGUF's tokenizer.chat_template is
 * in use when it parses; tok_chat_jinja_set replaces it with src[0..n)
 * (copied; ANVIL_ERR_FORMAT with err when it does not parse); tok_chat_set
 * drops it (the built-in family renders). Not thread-safe: before sharing v.
 * tok_chat_jinja_text: the source in use, NUL-terminated, or NULL.
 * tok_chat_jinja_origin: TOK_JINJA_NONE / _GGUF / _FILE (0, 1, 2).
 * tok_chat_jinja_warning: why the GGUF's template is not used, or NULL. */
anvil_status tok_chat_jinja_set(struct tok_vocab *v, const char *src, size_t n, char *err,
                                size_t err_cap);
const char *tok_chat_jinja_text(const struct tok_vocab *v);
int tok_chat_jinja_origin(const struct tok_vocab *v);
const char *tok_chat_jinja_warning(const struct tok_vocab *v);
/* Render the context ctx[0..n) (a JSON object, see anvil_chat_render_json)
 * with the Jinja template in use: *out (core_malloc, NUL-terminated, free
 * with core_free), *out_len. ANVIL_ERR_INVALID with err for a bad context,
 * a template failure ("chat template: line N: ...") or no template in use;
 * ANVIL_ERR_NOMEM. */
anvil_status tok_chat_jinja_render(const struct tok_vocab *v, const char *ctx, size_t n,
                                   char **out, size_t *out_len, char *err, size_t err_cap);
/* The same rendering tokenized with control tokens parsed except in the
 * caller's text; tok_encode's return convention, INT32_MIN on failure with
 * err and *status (may be NULL) set. */
int32_t tok_chat_jinja_tokenize(const struct tok_vocab *v, const char *ctx, size_t n,
                                anvil_token *out, int32_t cap, char *err, size_t err_cap,
                                anvil_status *status);

#endif
