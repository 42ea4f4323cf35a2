/*
 * tok.h - tokenizer built from GGUF metadata: byte-level BPE
 * (tokenizer.ggml.model = "gpt2") with the pre-tokenizer regexes that
 * tokenizer.ggml.pre names (PCRE2, Unicode properties), special and
 * user-defined tokens matched before BPE, streaming-safe decoding, and the
 * chat template from tokenizer.chat_template.
 *
 * Designed so that a SentencePiece ("llama") vocabulary can be added as a
 * second `enum tok_kind` behind the same calls.
 *
 * The vocabulary is read-only after tok_load and may be shared by threads.
 * Reference behaviour: llama.cpp's llama-vocab.cpp / unicode.cpp (the
 * differential tests compare against llama-cpp-python on the same GGUF).
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
bool tok_add_bos(const struct tok_vocab *v);
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
 * tok_chat_apply: bytes written without the NUL; -(needed, NUL included)
 *   when cap is too small; 0 when the vocabulary has no template anvil
 *   recognises (the caller falls back). Allocation-free. */
int32_t tok_encode(const struct tok_vocab *v, const char *text, size_t len, anvil_token *out,
                   int32_t cap, bool add_special, bool parse_special);
int32_t tok_piece(const struct tok_vocab *v, anvil_token t, char *buf, int32_t cap, bool special);
int32_t tok_detok_push(const struct tok_vocab *v, struct anvil_detok *d, anvil_token t, char *buf,
                       int32_t cap);
int32_t tok_detok_flush(struct anvil_detok *d, char *buf, int32_t cap);
int32_t tok_chat_apply(const struct tok_vocab *v, const struct anvil_chat_msg *msgs,
                       size_t n_msgs, bool add_assistant, char *buf, int32_t cap);
/* "chatml", "llama3", or NULL when no recognised template (static). */
const char *tok_chat_name(const struct tok_vocab *v);

#endif
