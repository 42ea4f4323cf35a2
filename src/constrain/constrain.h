/*
 * constrain.h - the constraint engine: structured output enforced while
 * decoding. A JSON Schema, a GBNF grammar or a regular expression is
 * compiled into an automaton over bytes; a vocabulary index, built once
 * per model from the tokens' byte strings, turns an automaton state into
 * the set of tokens that may come next.
 *
 * What it does
 *   - parses the three source languages with its own parsers (errors name
 *     the problem: syntax, undefined rule, left recursion, unsupported
 *     keyword, a bound exceeded);
 *   - lowers them to one grammar form (rules whose bodies are regular
 *     expressions over byte sets and rule references), inlines every rule
 *     that is not recursive (up to a size budget), and determinizes each
 *     remaining rule into a DFA over byte classes. A constraint without
 *     recursion is one DFA; a recursive one (a GBNF grammar, $ref cycles,
 *     free-form JSON) runs as a pushdown automaton over those DFAs;
 *   - answers, per request: is token t allowed now (cheap: walks t's bytes),
 *     the full allowed-token bitmask (walks the vocabulary trie against the
 *     automaton, pruning whole subtrees), advance by a token, accepts.
 * What it does not do: sampling, HTTP, tokenizing. It sees tokens only as
 * the byte strings handed to cn_vocab_build (no dependency on src/tok) and
 * uses nothing above src/core (cJSON parses schemas).
 *
 * Why our own regex engine and not PCRE2 (which the tokenizer uses): a
 * constraint must be run on a partial output one token at a time, asked
 * "can this prefix still become a match" for thousands of candidate tokens
 * per step, cloned and rolled back. PCRE2's partial matching re-scans the
 * whole subject for each question and has no state to advance or copy; a
 * DFA answers each question in one table lookup per byte.
 *
 * ---------------------------------------------------------------------------
 * Regular expressions (CN_REGEX, and JSON Schema "pattern")
 *   Python `re` syntax and semantics, with \d \w \s ASCII-only (re.ASCII;
 *   ECMA-262 agrees on this subset). The pattern is matched against UTF-8
 *   text as code points.
 *   - literals (UTF-8), `.` (any code point but \n), escapes \n \t \r \f
 *     \v \0 \a, \xHH \uHHHH \UHHHHHHHH (code points), escaped punctuation;
 *   - classes [...] and [^...] with ranges (any code points: compiled to
 *     UTF-8 byte sequences), \d \D \w \W \s \S inside and outside classes;
 *   - groups (...), (?:...), (?P<name>...), (?<name>...); alternation |;
 *   - quantifiers * + ? {m} {m,} {,n} {m,n}, and their lazy forms (same
 *     language); a `{` that does not start a quantifier is a literal;
 *   - anchors: ^ at the start of a top-level alternative and $ at its end
 *     (CN_REGEX is always anchored: the whole output must match).
 *   Errors: backreferences, lookaround, \b \B \A \Z, inline flags, possessive
 *   quantifiers, anchors elsewhere. Surrogates never match.
 *
 * GBNF (CN_GBNF): llama.cpp's grammar syntax.
 *   name ::= alternatives; sequences, |, ( ), * + ? {m} {m,} {m,n}, "string"
 *   and [class] / [^class] terminals with ranges (code points, UTF-8), `.`
 *   (any code point), escapes \xHH \uHHHH \UHHHHHHHH \t \r \n \\ \" \[ \]
 *   \-, # comments; a rule ends at a newline outside parentheses. Rule names
 *   are [A-Za-z0-9_-]+; `root` is the start. Errors: syntax (line:column),
 *   undefined or duplicate rules, left recursion (direct, indirect or behind
 *   a nullable prefix: it would make a top-down recognizer loop), token
 *   references <...>.
 *
 * JSON Schema (CN_JSON_SCHEMA): draft 2020-12 keywords.
 *   type (one or a list), properties, required, additionalProperties (false,
 *   true, a schema), items, prefixItems, minItems/maxItems, enum, const,
 *   anyOf, oneOf (compiled as anyOf: the schema's branches must be disjoint
 *   for the output to validate), allOf with one element, $ref to "#" and
 *   "#/..." JSON pointers ($defs, definitions; recursion included),
 *   minLength/maxLength (code points), pattern (the regex subset above,
 *   with JSON Schema's search semantics: an unanchored side may have any
 *   text), format date, time and date-time (RFC 3339, with an offset),
 *   uuid, email (a format with fixed length may sit next to length bounds;
 *   other combinations of pattern, format and lengths are errors: they
 *   would need an intersection),
 *   minimum/maximum/exclusiveMinimum/exclusiveMaximum (numbers, or draft-04
 *   booleans) on integers (exact digit automata, |bound| <= 2^53) and
 *   numbers (see below), multipleOf 1 on integers. Older drafts: the
 *   `definitions` container, `items` as an array with `additionalItems`.
 *   enum/const may sit next to `type` only (values of other types are
 *   dropped). Annotations are accepted and ignored: title, description,
 *   examples, default, $schema, $id, $comment, $anchor, deprecated,
 *   readOnly, writeOnly, contentMediaType, contentEncoding. Every other
 *   keyword (known but unsupported, like not, if, patternProperties,
 *   uniqueItems: true, or unknown) is an error naming it and its place.
 *   Generation choices (the output is always valid; these pick which valid
 *   outputs can be produced):
 *   - properties come in declared order; optional ones may be left out;
 *   - with "properties" given and additionalProperties absent, only the
 *     declared properties are produced (a model inventing keys is the usual
 *     failure); without "properties", an absent additionalProperties means
 *     any properties. Extra property names never equal a declared name and,
 *     when names are declared, contain no escape sequences (so they cannot
 *     spell one in disguise);
 *   - prefixItems without items: no items after the prefix;
 *   - whitespace: CN_WS_FLEX allows, after { [ , and before } ], either
 *     nothing, one space, or a newline and up to 20 spaces/tabs, and one
 *     optional space after ':'; CN_WS_COMPACT allows none. Nothing before
 *     or after the value. Whitespace is therefore bounded. enum/const
 *     objects and arrays take the same whitespace, numbers and strings in
 *     them their one canonical spelling (1.0 is "1", "é" is raw UTF-8);
 *   - strings: any UTF-8 text, escapes \" \\ \/ \b \f \n \r \t and \uXXXX
 *     (not surrogates, so one escape is one code point for minLength);
 *   - numbers without bounds: up to 16 integer digits, up to 16 fraction
 *     digits, an exponent of up to 3 digits (a model stuck on "0000" ends);
 *     integers without bounds: up to 19 digits;
 *   - numbers with bounds: no exponent, at most 15 integer digits, and
 *     when a fraction is present at most 15 digits in all, so the value
 *     converts to a double exactly enough that the comparison a validator
 *     makes agrees with ours; the bounds must have at most 15 significant
 *     digits and |bound| < 1e15.
 *
 * ---------------------------------------------------------------------------
 * Bounds. Compilation is bounded in states, work and nesting (struct
 * cn_limits); past a bound it fails with a message naming the bound, in
 * time proportional to the bound, never a hang or an out-of-memory. At run
 * time a state holds at most max_stacks parse stacks of at most max_stack
 * frames (nesting deeper than that is refused: the token that would open it
 * is not allowed). A bound can only refuse a valid continuation, never
 * allow an invalid one; grammars that reach them are pathological (JSON
 * nests once per level; 64 simultaneous parses means heavy ambiguity).
 *
 * Costs (measured by bench/bench_constrain.c; a run on SmolLM2's 49,152
 * tokens: bench/results/bench-constrain-2026-12-02.txt). cn_vocab_build
 * and cn_compile are milliseconds; cn_allowed is tens of nanoseconds (one
 * table lookup per byte of the token). cn_fill_mask costs what the trie
 * walk steps: microseconds where few tokens fit (after '{', in an enum or
 * a number), tens inside a free string where nearly all fit (subtrees
 * whose bytes all loop on the state are taken whole), and most inside a
 * string with a maxLength (each character moves to the next counting
 * state, so every live trie node is stepped). Each state's mask is
 * computed once: masks are cached per program by DFA state (shared by all
 * requests, 16 MiB budget, thread-safe) and per request by exact parse
 * state (4 entries); a cached mask is a copy.
 *
 * ---------------------------------------------------------------------------
 * Use by the engine (the integration task):
 *   per model   cn_vocab_build once, from anvil_token_to_piece of every id
 *               (CN_TOK_EOG for end-of-generation tokens, CN_TOK_NEVER for
 *               control/unused tokens with no text). Read-only afterwards,
 *               shared by every request and thread.
 *   per request cn_compile on the server thread before submit (an error is
 *               a 400 / CLI exit 2 with err's text); programs are read-only
 *               and may be cached by source text and shared. cn_state_init.
 *   per token   candidates first: greedy takes the first allowed token in
 *               logit order (cn_allowed on the top few; that is exactly
 *               the masked argmax); cn_fill_mask only when none passes, and
 *               its bitmask goes to anvil_sampler_sample. A sampled draw is
 *               exact under the mask only when the sampler's kept set is
 *               decided by the candidates tested (top_k) - otherwise use
 *               the mask. Then cn_advance with the chosen token. The mask
 *               for the next step depends only on the state, so it can be
 *               computed while the next forward pass runs.
 *   finish      cn_fill_mask returning 0 ends the request (finish reason
 *               "constraint": no token of the vocabulary continues the
 *               output); cn_accepts && !cn_can_continue means only EOG is
 *               allowed, so the request can end without sampling.
 *   preemption  cn_state_reset and re-advance the generated tokens.
 *   speculation cn_state_copy into a checkpoint state before advancing
 *               draft tokens; copy back to roll back.
 * Threading: programs and vocabularies are read-only and shared; a state
 * is used by one thread at a time (it holds its own scratch).
 */
#ifndef ANVIL_CONSTRAIN_H
#define ANVIL_CONSTRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "anvil.h"

/* ---------------------------------------------------------------------- */
/* compiling */

enum cn_kind {
    CN_REGEX = 1,       /* a regular expression; the whole output must match */
    CN_GBNF = 2,        /* a GBNF grammar with a `root` rule */
    CN_JSON_SCHEMA = 3, /* a JSON Schema; the output is one JSON value */
    CN_JSON = 4,        /* any JSON object ({"type":"json_object"}); text is ignored */
    CN_CALLS = 5,       /* tool calls in a family's format: see below */
};

/* CN_CALLS: one or more calls, each one of several alternatives of
 * literal text around a JSON Schema (a tool-call format's markers around
 * each tool's arguments). The text is a JSON document
 *   {"$defs": {...}, "calls": [{"before": S, "schema": {...}, "after": S}, ...],
 *    "sep": S, "end": S, "max": N}
 * whose language is  call (sep call){0,N-1} end  (N 0 or absent: unbounded;
 * absent strings are empty),
 * call being the alternation of before_i schema_i after_i. "$ref"s in the
 * schemas resolve against the whole document (so tools' parameters sit
 * under $defs once). Every alternative must name its tool in its literal
 * text for the alternation to say which tool was called. */

enum cn_ws {
    CN_WS_FLEX = 0,    /* bounded optional whitespace (see above) */
    CN_WS_COMPACT = 1, /* no whitespace at all */
};

/* Zero fields take the defaults. */
struct cn_limits {
    int32_t max_nfa_states; /* NFA states over all rules (and grammar nodes); 0 = 1,000,000 */
    int32_t max_dfa_states; /* DFA states over all rules; 0 = 200,000 */
    int64_t max_work;       /* determinization steps; 0 = 400,000,000 */
    int32_t max_depth;      /* syntax nesting: ( ), schema levels; 0 = 128 */
    int32_t max_stack;      /* run time: frames per parse stack; 0 = 1024 */
    int32_t max_stacks;     /* run time: parse stacks at once; 0 = 64 */
};

struct cn_options {
    enum cn_ws ws; /* JSON whitespace (CN_JSON_SCHEMA, CN_JSON) */
    /* Also accept free text: the output is either a string of the
     * constraint's language or any UTF-8 text (the empty one included)
     * whose first character is not '{'. With a language of JSON objects
     * the first byte decides which (tool_choice "auto": a call or an
     * answer in words). */
    bool or_text;
    struct cn_limits limits;
};

struct cn_options cn_default_options(void);

/* A compiled constraint: read-only, shareable between threads and states. */
struct cn_program;

/* Compile `len` bytes of `text` (need not be NUL-terminated) as `kind`.
 * opt may be NULL (defaults). On failure *out is unchanged and err gets a
 * one-line message naming the problem: ANVIL_ERR_INVALID for syntax errors,
 * undefined rules, left recursion, invalid schemas, empty languages;
 * ANVIL_ERR_UNSUPPORTED for unsupported features and keywords and for a
 * limit exceeded; ANVIL_ERR_NOMEM. */
anvil_status cn_compile(enum cn_kind kind, const char *text, size_t len,
                        const struct cn_options *opt, struct cn_program **out, char *err,
                        size_t err_cap);
void cn_program_free(struct cn_program *p); /* NULL is a no-op */

struct cn_program_info {
    int32_t n_states;  /* DFA states, all rules */
    int32_t n_classes; /* byte equivalence classes */
    int32_t n_rules;   /* rules left as calls (0 recursion-free: a single DFA is rule 0) */
    int32_t n_nfa;     /* NFA states built */
    size_t bytes;      /* memory held by the program */
};
void cn_program_info(const struct cn_program *p, struct cn_program_info *out);

/* ---------------------------------------------------------------------- */
/* vocabulary index (once per model) */

enum cn_tok_kind {
    CN_TOK_TEXT = 0,  /* allowed when its bytes continue the output */
    CN_TOK_EOG = 1,   /* end of generation: allowed exactly when the output is complete */
    CN_TOK_NEVER = 2, /* never allowed (control, unused; also a TEXT token with no bytes) */
};

struct cn_vocab;

/* Build the index of n_vocab tokens: token t has lens[t] bytes at bytes[t]
 * and kind kinds[t] (kinds NULL: all CN_TOK_TEXT). Everything is copied.
 * Tokens longer than 65535 bytes are never allowed. ANVIL_ERR_INVALID for
 * bad sizes, ANVIL_ERR_NOMEM. */
anvil_status cn_vocab_build(int32_t n_vocab, const uint8_t *const *bytes, const int32_t *lens,
                            const uint8_t *kinds, struct cn_vocab **out, char *err,
                            size_t err_cap);
void cn_vocab_free(struct cn_vocab *v); /* NULL is a no-op */
int32_t cn_vocab_n_vocab(const struct cn_vocab *v);
/* Trie nodes and memory of the index (for benchmarks). */
int32_t cn_vocab_n_nodes(const struct cn_vocab *v);
size_t cn_vocab_bytes(const struct cn_vocab *v);

/* ---------------------------------------------------------------------- */
/* per-request state */

struct cn_state;

/* A state at the start of the output. Borrows p and v (both must outlive
 * it). v may be NULL for byte-level use only (cn_advance_bytes, accepts).
 * ANVIL_ERR_UNSUPPORTED when a run-time bound (max_stacks) refuses even
 * the start (a pathologically ambiguous grammar); ANVIL_ERR_NOMEM. */
anvil_status cn_state_init(const struct cn_program *p, const struct cn_vocab *v,
                           struct cn_state **out);
void cn_state_free(struct cn_state *s); /* NULL is a no-op */
/* Back to the start of the output (preemption recomputes from here). */
void cn_state_reset(struct cn_state *s);
/* Make dst equal to src (same program and vocabulary): a checkpoint for
 * rollback. ANVIL_ERR_INVALID when they differ, ANVIL_ERR_NOMEM (dst is
 * then unchanged). */
anvil_status cn_state_copy(struct cn_state *dst, const struct cn_state *src);

/* Control tokens this state also allows, each where its text continues
 * the output as a text token's bytes would (a tool-call format whose
 * markers are control tokens: gpt-oss's <|constrain|> and <|message|> in
 * a calls document). n tokens: ids[i] spells lens[i] bytes at bytes[i];
 * each should be CN_TOK_NEVER in the vocabulary (an EOG or text token
 * keeps its own rule). Borrowed: the arrays must outlive the state.
 * Replaces an earlier set; cn_state_copy copies it. */
void cn_state_set_specials(struct cn_state *s, int32_t n, const anvil_token *ids,
                           const uint8_t *const *bytes, const int32_t *lens);

/* May token t come next? EOG tokens: exactly when the output so far is
 * complete. Out-of-range ids and CN_TOK_NEVER tokens: false. Walks t's
 * bytes; no allocation once the state's scratch has grown (it grows with
 * the largest parse-stack set seen; a failed growth answers false). */
bool cn_allowed(struct cn_state *s, anvil_token t);

/* Write the allowed-token bitmask: bit t of mask[t / 8] (the format of
 * anvil_sampler_sample), (n_vocab + 7) / 8 bytes, every byte written.
 * Returns the number of allowed tokens (0: nothing can follow), or
 * ANVIL_ERR_NOMEM (negative) when the scratch could not grow. */
int32_t cn_fill_mask(struct cn_state *s, uint8_t *mask);

/* Append token t. ANVIL_ERR_INVALID (state unchanged) when t is not
 * allowed; after an EOG token the state is finished (nothing is allowed,
 * cn_accepts stays true). ANVIL_ERR_NOMEM leaves the state unchanged. */
anvil_status cn_advance(struct cn_state *s, anvil_token t);
/* Append raw bytes (forced text, tests). Same contract; all or nothing. */
anvil_status cn_advance_bytes(struct cn_state *s, const uint8_t *bytes, size_t n);

/* The output so far is a complete match (an EOG token is allowed). */
bool cn_accepts(const struct cn_state *s);
/* More bytes may follow (some byte continues a valid output). When a
 * state neither accepts nor can continue, no output can ever complete from
 * it; a state reached only through successful cn_advance calls is never so
 * (every automaton state kept at compile time can reach acceptance), but
 * the vocabulary may still offer no token: check cn_fill_mask's count. */
bool cn_can_continue(const struct cn_state *s);

/* Fewest bytes that complete the output from here (0 when accepting), or
 * -1 when it neither accepts nor can continue. For tools that steer
 * random walks to an end. */
int64_t cn_min_remaining(const struct cn_state *s);

#endif /* ANVIL_CONSTRAIN_H */
