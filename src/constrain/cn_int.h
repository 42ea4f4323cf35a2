/*
 * cn_int.h - internals of the constraint engine shared by its files, from
 * the front door down (a file calls only files below it in this list):
 *
 *   constrain.c the front door: cn_compile (parse, or_text, compile)
 *   vocab.c     token trie and the mask walk
 *   runtime.c   parse-stack sets, stepping, the per-request state
 *   ref.c       the slow twin: an Earley recognizer straight on the IR
 *   compile.c   IR checks (undefined, left recursion, productive),
 *               inlining, Thompson NFA per call-rule
 *   dfa.c       byte classes, subset construction, pruning -> cn_program
 *   schema.c    JSON Schema -> IR, the keyword walk (schema_int.h:
 *               schema_scalar.c strings and numbers, schema_json.c JSON
 *               syntax, errors, the value writer)
 *   numrange.c  integer and number ranges as digit automata
 *   gbnf.c      GBNF text -> IR
 *   regex.c     regex text -> IR
 *   ir.c        the grammar IR every source language lowers to, with its
 *               builder (byte sets, code-point classes as UTF-8 sequences)
 *   limits.c    options and limits with their defaults, array growth
 *
 * IR. A grammar is a list of rules; a rule's body is a node of an
 * expression DAG over byte sets: NONE (no string), EMPTY (the empty
 * string), BYTES (one byte from a set), SEQ, ALT, REP{min,max} and REF (a
 * rule). Nodes may be shared by several parents: they mean the same
 * language wherever they appear (the NFA builder copies them). Node ids are
 * indices; CN_NIL is "no node" and is what builders return after an error.
 * Builders never fail loudly: the first error (out of memory, a bound) is
 * kept in the IR (sticky) and every later builder call returns CN_NIL, so a
 * parser checks once at the end (or whenever it wants to stop early).
 */
#ifndef ANVIL_CN_INT_H
#define ANVIL_CN_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "constrain/constrain.h"

#define CN_NIL UINT32_MAX
#define CN_MAX_CP 0x10FFFFu

/* defaults of struct cn_limits */
#define CN_DEF_MAX_NFA 1000000
#define CN_DEF_MAX_DFA 200000
#define CN_DEF_MAX_WORK 400000000LL
#define CN_DEF_MAX_DEPTH 128
#define CN_DEF_MAX_STACK 1024
#define CN_DEF_MAX_STACKS 64
/* Largest repetition count any parser accepts (bigger ones cannot fit the
 * NFA budget anyway; this keeps the arithmetic small). */
#define CN_MAX_REPEAT 100000

/* ---------------------------------------------------------------------- */
/* limits.c */

/* The limits with defaults filled in (l NULL: all defaults). */
struct cn_limits cn_limits_resolve(const struct cn_limits *l);

/* Grow *p (elements of sz bytes, capacity *cap) to hold at least need:
 * doubling from 16, the capacity a uint32 below UINT32_MAX. False when
 * the size overflows or memory runs out (*p and *cap unchanged). The
 * check is inline: the run time's steps call it for every configuration. */
bool cn_grow_slow(void **p, uint32_t *cap, uint64_t need, size_t sz);
static inline bool cn_grow(void **p, uint32_t *cap, uint64_t need, size_t sz) {
    return need <= *cap || cn_grow_slow(p, cap, need, sz);
}

/* ---------------------------------------------------------------------- */
/* IR */

struct cn_bset {
    uint64_t w[4];
};
static inline bool bset_has(const struct cn_bset *s, unsigned b) {
    return (s->w[b >> 6] >> (b & 63)) & 1;
}
static inline void bset_add(struct cn_bset *s, unsigned b) {
    s->w[b >> 6] |= (uint64_t)1 << (b & 63);
}
static inline void bset_add_range(struct cn_bset *s, unsigned lo, unsigned hi) {
    for (unsigned b = lo; b <= hi; b++) bset_add(s, b);
}
static inline bool bset_empty(const struct cn_bset *s) {
    return !(s->w[0] | s->w[1] | s->w[2] | s->w[3]);
}

/* SUBSEQ: members m1..mk in order, any subset that contains the required
 * ones (and, when min is 1, at least one member), with the separator
 * between consecutive chosen members: the properties of a JSON object,
 * where optional ones may be left out. Kids are [sep, m1, .., mk];
 * kreq[i] marks a required member. It exists so
 * that this language has a linear NFA (a chain of "something emitted
 * yet?" states) instead of the quadratic expansion a plain regex needs. */
enum ir_op { IR_NONE = 0, IR_EMPTY, IR_BYTES, IR_SEQ, IR_ALT, IR_REP, IR_REF, IR_SUBSEQ };

struct ir_node {
    uint8_t op;
    uint32_t a;       /* BYTES: set id; REP: child node; REF: rule id; SEQ/ALT/SUBSEQ: first kid */
    uint32_t n;       /* SEQ/ALT/SUBSEQ: number of kids (in ir.kids[a .. a+n)) */
    int32_t min, max; /* REP: counts, max -1 = unbounded */
};

struct ir_rule {
    char *name;    /* owned, NUL-terminated */
    uint32_t body; /* CN_NIL until defined */
    int32_t line;  /* where it was first referenced or defined (GBNF errors), 0 unknown */
};

struct cn_ir {
    struct ir_node *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *kids;
    uint8_t *kreq; /* (cap_kids) SUBSEQ: 1 = required member */
    uint32_t n_kids, cap_kids;
    struct cn_bset *sets; /* distinct byte sets, deduplicated */
    uint32_t n_sets, cap_sets;
    uint32_t *set_hash; /* open addressing over sets, CN_NIL empty; cap_hash slots */
    uint32_t cap_hash;
    struct ir_rule *rules;
    uint32_t n_rules, cap_rules;
    uint32_t root; /* rule id of the start rule, CN_NIL until set */
    uint32_t max_nodes;
    anvil_status st; /* first error, sticky */
    char err[256];
};

/* A fresh IR; max_nodes bounds nodes + kids (0 = CN_DEF_MAX_NFA). */
anvil_status ir_init(struct cn_ir **out, uint32_t max_nodes);
void ir_free(struct cn_ir *g);
/* Record an error (only the first one is kept). Returns CN_NIL. */
uint32_t ir_fail(struct cn_ir *g, anvil_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline bool ir_ok(const struct cn_ir *g) { return g->st == ANVIL_OK; }

uint32_t ir_none(struct cn_ir *g);
uint32_t ir_empty(struct cn_ir *g);
uint32_t ir_bytes(struct cn_ir *g, const struct cn_bset *s); /* empty set: NONE */
uint32_t ir_byte(struct cn_ir *g, uint8_t b);
uint32_t ir_byte_range(struct cn_ir *g, uint8_t lo, uint8_t hi);
uint32_t ir_lit(struct cn_ir *g, const char *s, size_t n); /* bytes in sequence */
uint32_t ir_str(struct cn_ir *g, const char *s);           /* NUL-terminated literal */
uint32_t ir_seq(struct cn_ir *g, const uint32_t *k, uint32_t n); /* n = 0: EMPTY */
uint32_t ir_alt(struct cn_ir *g, const uint32_t *k, uint32_t n); /* n = 0: NONE */
uint32_t ir_seq2(struct cn_ir *g, uint32_t a, uint32_t b);
uint32_t ir_seq3(struct cn_ir *g, uint32_t a, uint32_t b, uint32_t c);
uint32_t ir_alt2(struct cn_ir *g, uint32_t a, uint32_t b);
uint32_t ir_rep(struct cn_ir *g, uint32_t x, int32_t min, int32_t max); /* max -1: unbounded */
uint32_t ir_opt(struct cn_ir *g, uint32_t x);
uint32_t ir_ref(struct cn_ir *g, uint32_t rule);
/* SUBSEQ (above): n members, req[i] true for required ones; nonempty:
 * at least one member even when all are optional. */
uint32_t ir_subseq(struct cn_ir *g, uint32_t sep, const uint32_t *m, const bool *req, uint32_t n,
                   bool nonempty);

/* Rules. ir_rule_add makes a new undefined rule (the name is copied; names
 * need not be unique: lookups are the parsers' business). */
uint32_t ir_rule_add(struct cn_ir *g, const char *name, size_t len);
void ir_rule_define(struct cn_ir *g, uint32_t rule, uint32_t body);

/* A growable list of node ids for building SEQ/ALT kid lists. Push failures
 * are recorded in the IR. */
struct ir_list {
    uint32_t *v;
    uint32_t n, cap;
};
void ir_list_push(struct cn_ir *g, struct ir_list *l, uint32_t x);
void ir_list_free(struct ir_list *l);

/* Code-point sets: sorted, disjoint, non-adjacent ranges [lo, hi]. */
struct cp_range {
    uint32_t lo, hi;
};
struct cp_set {
    struct cp_range *r;
    uint32_t n, cap;
};
void cps_add(struct cn_ir *g, struct cp_set *s, uint32_t lo, uint32_t hi); /* any order */
void cps_normalize(struct cp_set *s);           /* sort and merge */
void cps_negate(struct cn_ir *g, struct cp_set *s); /* complement in [0, 0x10FFFF] (normalizes) */
void cps_free(struct cp_set *s);
/* The UTF-8 encodings of the set's code points (surrogates excluded) as an
 * ALT of byte-set sequences. The set is normalized first. */
uint32_t ir_cps(struct cn_ir *g, struct cp_set *s);
uint32_t ir_any_cp(struct cn_ir *g);           /* any scalar value */
uint32_t ir_cp(struct cn_ir *g, uint32_t cp);  /* one code point's UTF-8 bytes */
/* The value of hex digit c, -1 when c is none. */
static inline int cn_hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}
/* Encode cp (<= 0x10FFFF) as UTF-8 into out; returns the length 1..4. */
int cn_utf8_encode(uint32_t cp, uint8_t out[4]);
/* Decode one code point from s[0..n): returns its length (1..4), 0 when
 * the bytes are not valid UTF-8 (strict: no overlongs, no surrogates). */
int cn_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Write the IR as GBNF text (for debugging and the tool's `dump`).
 * Returns a string owned by the caller (core_free), NULL on OOM. */
char *ir_to_gbnf(const struct cn_ir *g);

/* ---------------------------------------------------------------------- */
/* parsers: text -> IR. Each returns OK with *out a fresh IR whose root is
 * set, or an error with err filled (and *out unchanged). */

struct cn_regex_opts {
    bool search;       /* JSON Schema pattern: unanchored sides match any text */
    int32_t max_depth; /* group nesting */
};
/* Build the regex as a node of g (its language over UTF-8 bytes). Returns
 * CN_NIL with g's error set on failure. */
uint32_t regex_to_ir(struct cn_ir *g, const char *re, size_t len, const struct cn_regex_opts *o);

anvil_status cn_parse_regex(const char *text, size_t len, const struct cn_options *opt,
                            struct cn_ir **out, char *err, size_t err_cap);
anvil_status cn_parse_gbnf(const char *text, size_t len, const struct cn_options *opt,
                           struct cn_ir **out, char *err, size_t err_cap);
anvil_status cn_parse_schema(const char *text, size_t len, const struct cn_options *opt,
                             struct cn_ir **out, char *err, size_t err_cap);
/* tool calls (CN_CALLS, constrain.h) */
anvil_status cn_parse_calls(const char *text, size_t len, const struct cn_options *opt,
                            struct cn_ir **out, char *err, size_t err_cap);
/* any JSON object (CN_JSON) */
anvil_status cn_parse_json_any(const struct cn_options *opt, struct cn_ir **out, char *err,
                               size_t err_cap);
/* Dispatch on kind (constrain.c). */
anvil_status cn_parse(enum cn_kind kind, const char *text, size_t len,
                      const struct cn_options *opt, struct cn_ir **out, char *err,
                      size_t err_cap);

/* numrange.c: decimal ranges as IR (tested against brute force).
 * Integers in [lo, hi] (lo/hi_set false: unbounded on that side), plain
 * decimal syntax -?(0|[1-9][0-9]*), no "-0". max_digits bounds the digit
 * count of unbounded sides. */
uint32_t ir_int_range(struct cn_ir *g, bool lo_set, int64_t lo, bool hi_set, int64_t hi,
                      int max_digits);
/* A decimal bound: value = (neg ? -1 : 1) * int(ip) . fp, digits in
 * strings (ip without leading zeros, "0" for zero; fp without trailing
 * zeros, possibly empty). */
struct dec_bound {
    bool set, excl, neg;
    char ip[24], fp[24];
};
/* Parse a double into a dec_bound (shortest round-trip decimal). Fails
 * (false) when it has more than 15 significant digits or |v| >= 1e15. */
bool dec_from_double(double v, bool excl, struct dec_bound *out);
/* JSON numbers in [lo, hi] without exponent: -?(0|[1-9]d*)(.d+)?, no "-0"
 * spelling of zero, at most 15 digits in all when a fraction is present. */
uint32_t ir_num_range(struct cn_ir *g, const struct dec_bound *lo, const struct dec_bound *hi);

/* ---------------------------------------------------------------------- */
/* the compiled program */

enum {
    CN_SF_BYTES = 1, /* has at least one byte transition */
    CN_SF_FINAL = 2, /* its rule may end here */
    CN_SF_CALLS = 4, /* has call edges */
};

struct cn_call {
    int32_t start; /* the called rule's start state */
    int32_t ret;   /* where the caller continues after it */
};

/* Masks of a pure program by DFA state (the mask of a pure program is a
 * function of the state alone), shared by every request using the
 * program: filled lazily and published with an atomic compare-exchange,
 * so concurrent fill_mask calls from several threads are safe. Only for
 * the first vocabulary that asks (a program is used with one model), and
 * within a memory budget. */
struct cn_mask_cache {
    _Atomic(const struct cn_vocab *) vocab;
    _Atomic(uint8_t *) *slot; /* (n_states) mask bytes, then the int32 count */
    _Atomic int64_t budget;   /* bytes left */
};

struct cn_program {
    int32_t n_states, n_classes;
    uint8_t class_of[256];
    int32_t *trans;      /* (n_states, n_classes) row-major: next state, -1 none */
    uint8_t *flags;      /* (n_states) CN_SF_* */
    uint32_t *call_off;  /* (n_states + 1) calls of state s: calls[call_off[s] .. call_off[s+1]) */
    struct cn_call *calls;
    int64_t *dist;       /* (n_states) fewest bytes from s to its rule's end (calls included) */
    uint64_t *loopsig;   /* (n_states) buckets (cn_bucket) whose every byte leads back to s */
    int32_t start;       /* root rule's start state */
    bool pure;           /* no call edges anywhere: one DFA, stacks always empty */
    int32_t n_rules;     /* call-rules (root included) */
    int32_t n_nfa;
    int32_t max_stack, max_stacks;
    size_t bytes;
    struct cn_mask_cache *cache; /* pure programs only, else NULL */
};

/* The NFA the compiler hands to the determinizer: states 0..n_states-1,
 * edges grouped by source (CSR). A call edge's label is a call-rule index
 * (0 is the root). */
enum { NFA_EPS = 0, NFA_SET = 1, NFA_CALL = 2 };
struct nfa_edge {
    uint32_t to;
    uint32_t label; /* SET: byte set id in the IR; CALL: call-rule index */
    uint8_t kind;
};
struct cn_nfa {
    uint32_t n_states;
    uint32_t *off; /* (n_states + 1) */
    struct nfa_edge *out;
    uint32_t n_edges;
    uint32_t n_crules;
    uint32_t *cr_start, *cr_final; /* (n_crules) NFA states */
    uint32_t *cr_rule;             /* (n_crules) IR rule id (for messages) */
};

/* dfa.c: determinize each call-rule of the NFA and build the program. */
anvil_status dfa_build(const struct cn_ir *g, const struct cn_nfa *a, const struct cn_limits *lim,
                       struct cn_program **out, char *err, size_t err_cap);

/* Compile an IR (compile.c + dfa.c). The IR is only read. */
anvil_status cn_compile_ir(const struct cn_ir *g, const struct cn_options *opt,
                           struct cn_program **out, char *err, size_t err_cap);


/* ---------------------------------------------------------------------- */
/* runtime internals exposed to vocab.c and tests */

struct cn_cfg {
    int32_t top;  /* DFA state */
    uint32_t stk; /* frame index, 0 = empty stack */
};

struct cn_frame {
    int32_t ret;     /* state to continue at after the callee ends */
    uint32_t parent; /* frame below, 0 = none */
    uint32_t depth;  /* frames in this stack (1 for a frame over the empty stack) */
};

/* Scratch of one state: configuration sets of a walk (a stack of levels),
 * frames made during stepping, the closure's visited table and work list. */
struct cn_scratch {
    struct cn_cfg *cfg;
    uint32_t cap_cfg;
    struct cn_cfg *work;
    uint32_t cap_work;
    uint64_t *vis;      /* visited (top, stk) keys of one closure, generation-stamped */
    uint32_t *vis_gen;
    uint32_t cap_vis, gen;
    void *dstate;       /* (max token length + 1) pure walk: transition row per trie depth */
    uint32_t cap_dstate;
    struct cn_level *lev;
    uint32_t cap_lev;
    uint32_t *map, *hash, *chain; /* commit: frame renumbering */
    uint32_t cap_map, cap_hash, cap_chain;
    bool oom;   /* a growth failed since the API call began */
    bool bound; /* a run-time bound (max_stacks, max_stack, visits) refused something */
    /* pushdown programs: the last masks by exact parse state (key: acc,
     * then per configuration its top and its stack's return states) */
    struct cn_mask_ent {
        uint64_t hash;
        uint32_t *key;
        uint32_t key_len, cap_key, age;
        uint8_t *mask;
        int32_t count;
    } mc[4];
    uint32_t mc_clock;
    uint32_t *key;
    uint32_t cap_key;
};

struct cn_level {
    uint32_t off, n; /* configurations at scratch cfg[off .. off+n) */
    uint32_t n_fr;   /* frames in use when this level was made */
    bool acc;
};

struct cn_state {
    const struct cn_program *p;
    const struct cn_vocab *v;
    /* persistent part: the set of parse configurations after the output
     * so far, each with a byte transition; frames[0] is the empty stack */
    struct cn_cfg *cfg;
    uint32_t n_cfg, cap_cfg;
    struct cn_frame *fr;
    uint32_t n_fr, cap_fr; /* frames above n_fr are scratch of the current walk */
    struct cn_frame *fr2;  /* spare arrays: commit builds the next state here and swaps */
    uint32_t cap_fr2;
    struct cn_cfg *cfg2;
    uint32_t cap_cfg2;
    bool acc;  /* the output so far is complete */
    bool done; /* an EOG token was appended */
    struct cn_scratch sc;
    /* control tokens allowed by their text (cn_state_set_specials; borrowed) */
    int32_t n_sp;
    const anvil_token *sp_id;
    const uint8_t *const *sp_bytes;
    const int32_t *sp_len;
};

/* The index in s's specials of control token t, or -1. */
int32_t rt_special(const struct cn_state *s, anvil_token t);

/* Step a set by byte b. The input is the persistent set (in_scratch
 * false) or scratch cfg[in_off .. in_off+n_in); the result is written to
 * scratch cfg[out_off ..) (growing it; it must not overlap the input).
 * Frames made go above *ftop, which is updated (frames at and above the
 * caller's value are scratch). Returns the count (>= 0) and sets *acc, or
 * -1 when a bound or memory ran out (treated as "not allowed": refusing is
 * never unsound). */
int32_t rt_step(struct cn_state *s, bool in_scratch, uint32_t in_off, uint32_t n_in, uint8_t b,
                uint32_t out_off, bool *acc, uint32_t *ftop);

/* cn_fill_mask without its caches: the trie walk itself (tests compare the
 * two; the bench times both). */
int32_t cn_fill_mask_walk(struct cn_state *s, uint8_t *mask);

/* ---------------------------------------------------------------------- */
/* vocabulary */

struct cn_trie_node {
    uint32_t skip;  /* index of the first node after this node's subtree */
    uint32_t tok;   /* first token of the subtree in cn_vocab.end_ids (the ntok ending
                       here come first; the subtree's are up to nodes[skip].tok) */
    uint16_t ntok;
    uint16_t depth; /* 1 for a first byte */
    uint8_t byte;
};

/* Byte buckets for the mask walk's shortcut: a trie node carries the set
 * of buckets of every byte in its subtree, a DFA state the set of buckets
 * whose bytes all lead back to it; when the first is inside the second,
 * every token below the node is allowed (the state just loops) and the
 * walk sets them without stepping. Controls, quote, backslash and each
 * punctuation mark have buckets of their own (grammars treat them
 * specially); letters and digits are grouped; UTF-8 bytes by role. */
static inline unsigned cn_bucket(uint8_t b) {
    if (b >= 0x80) return b < 0xC0 ? 60 : b < 0xE0 ? 61 : b < 0xF0 ? 62 : 63;
    if (b == '\t') return 56;
    if (b == '\n') return 57;
    if (b == '\r') return 58;
    if (b < 0x20) return 59;
    if (b == 0x7F) return 55;
    if (b >= '0' && b <= '9') return 50;
    if (b >= 'A' && b <= 'Z') return b <= 'M' ? 51 : 52;
    if (b >= 'a' && b <= 'z') return b <= 'm' ? 53 : 54;
    if (b <= 0x2F) return b - 0x20;        /* space and ! " # ... / : 0..15 */
    if (b <= 0x40) return 16 + b - 0x3A;   /* : ; < = > ? @ : 16..22 */
    if (b <= 0x60) return 23 + b - 0x5B;   /* [ \ ] ^ _ ` : 23..28 */
    return 29 + b - 0x7B;                  /* { | } ~ : 29..32 */
}

struct cn_vocab {
    int32_t n_vocab;
    uint8_t *kind;      /* (n_vocab) cn_tok_kind, NEVER for unusable TEXT tokens */
    uint32_t *off;      /* (n_vocab + 1) bytes of token t: data[off[t] .. off[t+1]) */
    uint8_t *data;
    struct cn_trie_node *nodes; /* (n_nodes + 1): a sentinel with tok = the token count */
    uint64_t *sig;              /* (n_nodes) buckets of the bytes in each node's subtree */
    uint32_t n_nodes;
    int32_t *end_ids;   /* tokens by trie node (sorted by bytes) */
    int32_t *eog;       /* EOG token ids */
    int32_t n_eog;
    uint32_t max_len;   /* longest TEXT token */
    size_t bytes;
};

/* ---------------------------------------------------------------------- */
/* the reference recognizer (ref.c): Earley over the IR, for tests. Slow,
 * obviously correct, no limits beyond memory. */

struct cn_ref;
anvil_status cn_ref_init(const struct cn_ir *g, struct cn_ref **out);
void cn_ref_free(struct cn_ref *r);
/* Feed bytes; returns false once the input is no prefix of the language
 * (later feeds keep it false). */
bool cn_ref_feed(struct cn_ref *r, const uint8_t *b, size_t n);
bool cn_ref_accepts(const struct cn_ref *r);
void cn_ref_reset(struct cn_ref *r);
/* Undo the last byte fed (tests probe every next byte this way). */
void cn_ref_pop(struct cn_ref *r);
/* Bytes fed so far (a dead byte counts: pop it too). */
size_t cn_ref_len(const struct cn_ref *r);

#endif /* ANVIL_CN_INT_H */
