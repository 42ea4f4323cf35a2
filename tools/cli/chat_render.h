/*
 * chat_render.h - how the CLI commands (run --chat, chat, tokenize --chat,
 * serve) choose and apply the chat renderer: the model's Jinja template
 * (the GGUF's, or --chat-template-file FILE), or a built-in family
 * (--chat-template NAME, or when the model has no usable template).
 */
#ifndef ANVIL_CLI_CHAT_RENDER_H
#define ANVIL_CLI_CHAT_RENDER_H

#include <stdbool.h>
#include <stddef.h>

#include "anvil.h"

/* Apply --chat-template NAME (name) or --chat-template-file FILE (file) to
 * m (at most one may be given) and print the renderer in use, and any
 * warning, to stderr when verbose_choice. Returns 0 or an exit status
 * (error printed). */
int cli_chat_choose(const char *cmd, struct anvil_model *m, const char *name, const char *file,
                    bool verbose_choice);
/* "the GGUF's Jinja template", "the Jinja template of the file",
 * "the built-in NAME family" into buf. */
const char *cli_chat_renderer(const struct anvil_model *m, char *buf, size_t cap);
/* The conversation's prompt tokens (with the Jinja template when one is in
 * use, else anvil_chat_tokenize). anvil_chat_tokenize's return convention;
 * INT32_MIN with err set on failure. */
int32_t cli_chat_tokenize(const struct anvil_model *m, const struct anvil_chat_msg *msgs,
                          size_t n_msgs, anvil_token *out, int32_t cap, char *err,
                          size_t err_cap);
/* The conversation's rendered prompt as text (malloc'd), or NULL with err
 * set. */
char *cli_chat_prompt(const struct anvil_model *m, const struct anvil_chat_msg *msgs,
                      size_t n_msgs, char *err, size_t err_cap);

#endif
