/*
 * gen.h - the generation loop of `run` and `chat`: options, model and
 * engine setup, one request at a time through the serving engine (the
 * code path of `anvil serve`: prefix caching, speculation, constraints),
 * streaming UTF-8-safe output and the stats line.
 */
#ifndef ANVIL_CLI_GEN_H
#define ANVIL_CLI_GEN_H

#include <stdio.h>

#include "anvil.h"

struct gen_opts {
    const char *model_path;
    const char *prompt;
    const char *system;
    int n_predict;
    int n_threads;
    int n_ctx;
    bool chat;
    bool ignore_eos;
    bool seed_set;
    bool verbose;
    const char *kernels;
    const char *chat_template; /* --chat-template NAME, or NULL: the model's */
    struct anvil_sampler_params sp;
    /* structured output: at most one of these */
    const char *json_schema_file; /* --json-schema FILE */
    const char *grammar_file;     /* --grammar FILE */
    const char *regex;            /* --regex RE */
    /* speculative decoding */
    enum anvil_spec spec;   /* --spec ngram|draft (DEFAULT: off) */
    const char *draft_path; /* --draft FILE */
    int spec_k;             /* --spec-k K (0: the engine's default) */
    const char *chat_template_file; /* --chat-template-file FILE: a Jinja template */
    bool print_prompt;      /* --print-prompt: print the rendered chat prompt, generate nothing */
};

struct gen_session {
    struct anvil_model *model;
    struct anvil_model *draft;
    struct anvil_engine *engine;
    struct anvil_constraint *constraint; /* NULL: free text */
    anvil_token *buf;  /* (n_ctx) scratch for tokenization */
    int n_ctx;
    uint64_t seed;
};

/* Parse the options common to run/chat starting at argv[*i]. Returns 1 if
 * argv[*i] was consumed (with its value), 0 if not an option of ours, -1 on
 * a bad value (an error was printed). */
int gen_parse_opt(const char *cmd, struct gen_opts *o, int argc, char **argv, int *i);
void gen_opts_default(struct gen_opts *o);
void gen_print_opts_help(FILE *f);

/* Load the model (and draft), compile the constraint, start the engine.
 * Returns 0 or an exit status (error printed: 2 for bad input). */
int gen_open(const char *cmd, const struct gen_opts *o, struct gen_session *s);
void gen_close(struct gen_session *s);

/* Tokenize text, then generate up to o->n_predict tokens (fewer when the
 * context is full), streaming text to out; a cached prefix of an earlier
 * request is reused. *reply (optional) gets the text (malloc'd). Returns 0
 * or an exit status. */
int gen_run(const char *cmd, const struct gen_opts *o, struct gen_session *s, const char *text,
            FILE *out, char **reply);
/* The same for a conversation: rendered with the model's chat template
 * (its Jinja template, or the built-in family: chat_render.h) and
 * tokenized so that what the user typed is never read as control tokens.
 * With o->print_prompt, the rendered text goes to out instead. */
int gen_run_chat(const char *cmd, const struct gen_opts *o, struct gen_session *s,
                 const struct anvil_chat_msg *msgs, size_t n_msgs, FILE *out, char **reply);

#endif
