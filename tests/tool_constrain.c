/*
 * tool_constrain.c - drives the constraint engine for the Python tests
 * (tests/py/test_constrain*.py). KIND is regex, gbnf, schema or json; SRC
 * is a file, or "-" for stdin, or with --text the source itself.
 *
 *   tool_constrain check KIND SRC [--compact] [--max-dfa N] [--max-nfa N]
 *       compile; prints "ok states=.. classes=.. rules=.. nfa=.. bytes=.. ms=..";
 *       on error "error: MESSAGE" on stderr and exit status 2
 *   tool_constrain dump KIND SRC
 *       the IR as GBNF-like text
 *   tool_constrain match KIND SRC [--ref]
 *       stdin: records (u32 len, bytes); stdout one char per record:
 *       '1' complete match, 'p' a proper prefix of a match, '0' neither;
 *       --ref checks every byte against the Earley reference and exits 3 on
 *       a disagreement
 *   tool_constrain walk KIND SRC [SRC...] --model GGUF [--seed S] [--n N] [--max-tokens T]
 *       random walks over the model's vocabulary (loaded once for all the
 *       sources; lines are prefixed with the source's index): each step draws a random
 *       allowed token (steered towards the end as the budget runs out:
 *       the candidate leaving the fewest bytes to finish), EOG when the
 *       output is complete with some probability. Prints per walk one line
 *       "I ok HEX" (ended with EOG), "I cut HEX" (budget) or "I dead HEX"
 *       (no token allowed); compile errors as "I error MESSAGE". Checks as it goes: the drawn token is allowed, the
 *       mask and cn_allowed agree on sampled tokens, advancing works.
 *   tool_constrain oracle KIND SRC --vocab FILE [--depth D]
 *       FILE: one token per line, hex bytes ("EOG" for an end token).
 *       Enumerates every allowed token sequence up to D tokens; per node
 *       prints "HEXPREFIX ACC ID,ID,..." (the allowed ids from the mask,
 *       ACC 1 when complete); exits 3 when cn_allowed and the mask differ.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/cn_int.h"
#include "constrain/constrain.h"
#include "core/core.h"
#include "gguf/gguf.h"
#include "tok/tok.h"

static void die(int code, const char *fmt, const char *arg) {
    fprintf(stderr, "tool_constrain: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(code);
}

static char *read_all(FILE *f, size_t *n) {
    size_t cap = 4096, len = 0;
    char *b = malloc(cap);
    if (!b) die(1, "%s", "out of memory");
    for (;;) {
        if (len == cap) {
            cap *= 2;
            b = realloc(b, cap);
            if (!b) die(1, "%s", "out of memory");
        }
        size_t r = fread(b + len, 1, cap - len, f);
        if (r == 0) break;
        len += r;
    }
    *n = len;
    return b;
}

static enum cn_kind parse_kind(const char *k) {
    if (!strcmp(k, "regex")) return CN_REGEX;
    if (!strcmp(k, "gbnf")) return CN_GBNF;
    if (!strcmp(k, "schema")) return CN_JSON_SCHEMA;
    if (!strcmp(k, "json")) return CN_JSON;
    die(1, "unknown kind %s", k);
    return CN_REGEX;
}

struct opts {
    int32_t max_dfa, max_nfa;
    const char *model, *vocab;
    uint64_t seed;
    int n, max_tokens, depth;
    bool compact, ref, text;
};

static char *load_src(const char *src, bool text, size_t *n) {
    if (text) {
        *n = strlen(src);
        char *b = malloc(*n + 1);
        memcpy(b, src, *n + 1);
        return b;
    }
    FILE *f = strcmp(src, "-") ? fopen(src, "rb") : stdin;
    if (!f) die(1, "cannot open %s", src);
    char *b = read_all(f, n);
    if (f != stdin) fclose(f);
    return b;
}

/* the options of the command line (whitespace; limits only for check) */
static struct cn_options options_of(const struct opts *o) {
    struct cn_options co = cn_default_options();
    co.ws = o->compact ? CN_WS_COMPACT : CN_WS_FLEX;
    return co;
}

static struct cn_program *compile_or_exit(enum cn_kind kind, const char *t, size_t n,
                                          const struct opts *o, double *ms) {
    struct cn_options co = options_of(o);
    co.limits.max_dfa_states = o->max_dfa;
    co.limits.max_nfa_states = o->max_nfa;
    struct cn_program *p = NULL;
    char err[512] = "";
    double t0 = time_now_s();
    anvil_status st = cn_compile(kind, t, n, &co, &p, err, sizeof err);
    if (ms) *ms = (time_now_s() - t0) * 1e3;
    if (st != ANVIL_OK) {
        fprintf(stderr, "error: %s\n", err);
        exit(2);
    }
    return p;
}

/* ---------------------------------------------------------------------- */
/* rng */

static uint64_t rs;
static uint64_t rnd(void) { return core_splitmix64(&rs); }
static uint32_t below(uint32_t n) { return (uint32_t)(rnd() % n); }

/* ---------------------------------------------------------------------- */
/* vocabulary from a model */

static struct cn_vocab *vocab_from_model(const char *path) {
    struct gguf_file *gf = NULL;
    struct tok_vocab *tv = NULL;
    char err[256] = "";
    if (gguf_open(path, &gf, err, sizeof err) != ANVIL_OK || tok_load(gf, &tv, err, sizeof err) != ANVIL_OK)
        die(1, "cannot load the vocabulary: %s", err);
    int32_t n = tok_n_vocab(tv);
    uint8_t **bytes = calloc((size_t)n, sizeof *bytes);
    int32_t *lens = calloc((size_t)n, sizeof *lens);
    uint8_t *kinds = calloc((size_t)n, 1);
    char buf[1024];
    for (int32_t t = 0; t < n; t++) {
        int32_t len = tok_piece(tv, t, buf, sizeof buf, false);
        if (len < 0) die(1, "%s", "token too long");
        bytes[t] = malloc((size_t)len + 1);
        memcpy(bytes[t], buf, (size_t)len);
        lens[t] = len;
        kinds[t] = tok_is_eog(tv, t) ? CN_TOK_EOG : len == 0 ? CN_TOK_NEVER : CN_TOK_TEXT;
    }
    struct cn_vocab *v = NULL;
    if (cn_vocab_build(n, (const uint8_t *const *)bytes, lens, kinds, &v, err, sizeof err) != ANVIL_OK)
        die(1, "vocab: %s", err);
    for (int32_t t = 0; t < n; t++) free(bytes[t]);
    free(bytes);
    free(lens);
    free(kinds);
    tok_free(tv);
    gguf_close(gf);
    return v;
}

static struct cn_vocab *vocab_from_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) die(1, "cannot open %s", path);
    int32_t n = 0, cap = 64;
    uint8_t **bytes = malloc((size_t)cap * sizeof *bytes);
    int32_t *lens = malloc((size_t)cap * sizeof *lens);
    uint8_t *kinds = malloc((size_t)cap);
    char line[4096];
    while (fgets(line, sizeof line, f)) {
        size_t l = strcspn(line, "\r\n");
        line[l] = 0;
        if (n == cap) {
            cap *= 2;
            bytes = realloc(bytes, (size_t)cap * sizeof *bytes);
            lens = realloc(lens, (size_t)cap * sizeof *lens);
            kinds = realloc(kinds, (size_t)cap);
        }
        bytes[n] = malloc(l / 2 + 1);
        lens[n] = 0;
        kinds[n] = CN_TOK_TEXT;
        if (!strcmp(line, "EOG")) {
            kinds[n] = CN_TOK_EOG;
        } else {
            for (size_t i = 0; i + 1 < l; i += 2) {
                unsigned v;
                sscanf(line + i, "%2x", &v);
                bytes[n][lens[n]++] = (uint8_t)v;
            }
        }
        n++;
    }
    fclose(f);
    struct cn_vocab *v = NULL;
    char err[256];
    if (cn_vocab_build(n, (const uint8_t *const *)bytes, lens, kinds, &v, err, sizeof err) != ANVIL_OK)
        die(1, "vocab: %s", err);
    for (int32_t t = 0; t < n; t++) free(bytes[t]);
    free(bytes);
    free(lens);
    free(kinds);
    return v;
}

/* ---------------------------------------------------------------------- */
/* commands */

static int cmd_check(enum cn_kind kind, const char *t, size_t n, const struct opts *o) {
    double ms;
    struct cn_program *p = compile_or_exit(kind, t, n, o, &ms);
    struct cn_program_info in;
    cn_program_info(p, &in);
    printf("ok states=%d classes=%d rules=%d nfa=%d bytes=%zu ms=%.3f\n", in.n_states,
           in.n_classes, in.n_rules, in.n_nfa, in.bytes, ms);
    cn_program_free(p);
    return 0;
}

/* The IR of the constraint, or NULL after printing the error. */
static struct cn_ir *parse_or_say(enum cn_kind kind, const char *t, size_t n,
                                  const struct cn_options *co) {
    struct cn_ir *g = NULL;
    char err[512];
    if (cn_parse(kind, t, n, co, &g, err, sizeof err) != ANVIL_OK) {
        fprintf(stderr, "error: %s\n", err);
        return NULL;
    }
    return g;
}

static int cmd_dump(enum cn_kind kind, const char *t, size_t n, const struct opts *o) {
    struct cn_options co = options_of(o);
    struct cn_ir *g = parse_or_say(kind, t, n, &co);
    if (!g) return 2;
    char *s = ir_to_gbnf(g);
    fputs(s ? s : "(out of memory)\n", stdout);
    core_free(s);
    ir_free(g);
    return 0;
}

static int cmd_match(enum cn_kind kind, const char *t, size_t n, const struct opts *o) {
    struct cn_options co = options_of(o);
    struct cn_ir *g = parse_or_say(kind, t, n, &co);
    if (!g) return 2;
    char err[512];
    struct cn_program *p = NULL;
    if (cn_compile_ir(g, &co, &p, err, sizeof err) != ANVIL_OK) {
        fprintf(stderr, "error: %s\n", err);
        return 2;
    }
    struct cn_ref *r = NULL;
    if (o->ref && cn_ref_init(g, &r) != ANVIL_OK) die(1, "%s", "out of memory");
    struct cn_state *s = NULL;
    if (cn_state_init(p, NULL, &s) != ANVIL_OK) die(1, "%s", "out of memory");
    uint32_t len;
    while (fread(&len, 4, 1, stdin) == 1) {
        uint8_t *b = malloc(len ? len : 1);
        if (len && fread(b, 1, len, stdin) != len) die(1, "%s", "truncated record");
        cn_state_reset(s);
        if (r) cn_ref_reset(r);
        bool alive = true;
        for (uint32_t i = 0; i < len && alive; i++) {
            alive = cn_advance_bytes(s, b + i, 1) == ANVIL_OK;
            if (r && cn_ref_feed(r, b + i, 1) != alive) {
                fprintf(stderr, "reference disagrees at byte %u\n", i);
                return 3;
            }
        }
        if (r && alive && cn_ref_accepts(r) != cn_accepts(s)) {
            fprintf(stderr, "reference disagrees on acceptance\n");
            return 3;
        }
        putchar(!alive ? '0' : cn_accepts(s) ? '1' : 'p');
        free(b);
    }
    putchar('\n');
    cn_state_free(s);
    cn_ref_free(r);
    cn_program_free(p);
    ir_free(g);
    return 0;
}

static void put_hex(const uint8_t *b, size_t n) {
    static const char hx[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        putchar(hx[b[i] >> 4]);
        putchar(hx[b[i] & 15]);
    }
}

static int walk_one(int idx, struct cn_vocab *v, enum cn_kind kind, const char *t, size_t n,
                    const struct opts *o) {
    struct cn_options co = options_of(o);
    struct cn_program *p = NULL;
    char err[512] = "";
    if (cn_compile(kind, t, n, &co, &p, err, sizeof err) != ANVIL_OK) {
        printf("%d error %s\n", idx, err);
        return 0;
    }
    struct cn_state *s = NULL, *tmp = NULL;
    if (cn_state_init(p, v, &s) != ANVIL_OK || cn_state_init(p, v, &tmp) != ANVIL_OK)
        die(1, "%s", "out of memory");
    int32_t nv = cn_vocab_n_vocab(v);
    uint8_t *mask = malloc(((size_t)nv + 7) / 8);
    int32_t *ids = malloc((size_t)nv * sizeof *ids);
    size_t cap = 1 << 16, len = 0;
    uint8_t *out = malloc(cap);
    rs = o->seed;
    for (int w = 0; w < o->n; w++) {
        cn_state_reset(s);
        len = 0;
        const char *status = "cut";
        for (int step = 0; step < o->max_tokens; step++) {
            int32_t cnt = cn_fill_mask(s, mask);
            if (cnt < 0) die(1, "%s", "fill_mask failed");
            int32_t m = 0, eog = -1, n_eog = 0;
            for (int32_t id = 0; id < nv; id++) {
                if (!((mask[id >> 3] >> (id & 7)) & 1)) continue;
                if (v->kind[id] == CN_TOK_EOG) {
                    if (eog < 0) eog = id;
                    n_eog++;
                } else {
                    ids[m++] = id;
                }
            }
            if (m + n_eog != cnt) die(1, "%s", "mask count mismatch");
            if (cnt == 0) {
                status = "dead";
                break;
            }
            /* the mask against cn_allowed on a sample of all tokens */
            for (int k = 0; k < 64; k++) {
                int32_t id = (int32_t)below((uint32_t)nv);
                bool bit = (mask[id >> 3] >> (id & 7)) & 1;
                if (bit != cn_allowed(s, id)) {
                    fprintf(stderr, "mask and cn_allowed disagree on token %d\n", id);
                    return 3;
                }
            }
            double budget = (double)step / o->max_tokens;
            if (eog >= 0 && (m == 0 || below(1000) < 250 + (uint32_t)(700 * budget))) {
                if (cn_advance(s, eog) != ANVIL_OK) die(1, "%s", "EOG refused");
                status = "ok";
                break;
            }
            int32_t pick = ids[below((uint32_t)m)];
            if (below(1000) < (uint32_t)(1000 * (budget < 0.3 ? 0.1 : budget))) {
                /* steer: the candidate with the fewest bytes left to finish */
                /* late in the budget every candidate, else a sample */
                int64_t best = -1;
                int32_t tries = budget > 0.6 ? m : (m < 96 ? m : 96);
                for (int32_t k = 0; k < tries; k++) {
                    int32_t id = tries == m ? ids[k] : ids[below((uint32_t)m)];
                    if (cn_state_copy(tmp, s) != ANVIL_OK || cn_advance(tmp, id) != ANVIL_OK)
                        die(1, "%s", "advance of an allowed token failed");
                    int64_t r = cn_min_remaining(tmp);
                    if (r >= 0 && (best < 0 || r < best)) {
                        best = r;
                        pick = id;
                    }
                }
            }
            if (!cn_allowed(s, pick)) die(1, "%s", "picked token not allowed");
            if (cn_advance(s, pick) != ANVIL_OK) die(1, "%s", "advance failed");
            uint32_t tl = v->off[pick + 1] - v->off[pick];
            if (len + tl > cap) {
                cap = 2 * (len + tl);
                out = realloc(out, cap);
            }
            memcpy(out + len, v->data + v->off[pick], tl);
            len += tl;
        }
        if (!strcmp(status, "ok") && !cn_accepts(s)) die(1, "%s", "ended but not accepting");
        printf("%d %s ", idx, status);
        put_hex(out, len);
        putchar('\n');
        fflush(stdout);
    }
    free(mask);
    free(ids);
    free(out);
    cn_state_free(s);
    cn_state_free(tmp);
    cn_program_free(p);
    return 0;
}

static int cmd_walk(enum cn_kind kind, char **srcs, int n_srcs, const struct opts *o) {
    if (!o->model) die(1, "%s", "walk needs --model");
    struct cn_vocab *v = vocab_from_model(o->model);
    int rc = 0;
    for (int i = 0; i < n_srcs && rc == 0; i++) {
        size_t n;
        char *t = load_src(srcs[i], o->text, &n);
        rc = walk_one(i, v, kind, t, n, o);
        free(t);
    }
    cn_vocab_free(v);
    return rc;
}

static int oracle_rec(struct cn_state *s, const struct cn_vocab *v, uint8_t *prefix, size_t plen,
                      int depth, int max_depth, uint8_t *mask) {
    int32_t nv = cn_vocab_n_vocab(v);
    int32_t cnt = cn_fill_mask(s, mask);
    if (cnt < 0) die(1, "%s", "fill_mask failed");
    put_hex(prefix, plen);
    printf(" %d ", cn_accepts(s) ? 1 : 0);
    int first = 1;
    for (int32_t id = 0; id < nv; id++) {
        bool bit = (mask[id >> 3] >> (id & 7)) & 1;
        if (bit != cn_allowed(s, id)) {
            fprintf(stderr, "mask and cn_allowed disagree on token %d\n", id);
            return 3;
        }
        if (bit) {
            printf(first ? "%d" : ",%d", id);
            first = 0;
        }
    }
    putchar('\n');
    if (depth == max_depth) return 0;
    uint8_t *m2 = malloc(((size_t)nv + 7) / 8);
    memcpy(m2, mask, ((size_t)nv + 7) / 8);
    struct cn_state *c = NULL;
    if (cn_state_init(s->p, v, &c) != ANVIL_OK) die(1, "%s", "out of memory");
    for (int32_t id = 0; id < nv; id++) {
        if (!((m2[id >> 3] >> (id & 7)) & 1) || v->kind[id] != CN_TOK_TEXT) continue;
        cn_state_copy(c, s);
        if (cn_advance(c, id) != ANVIL_OK) die(1, "%s", "advance of an allowed token failed");
        uint32_t tl = v->off[id + 1] - v->off[id];
        memcpy(prefix + plen, v->data + v->off[id], tl);
        int rc = oracle_rec(c, v, prefix, plen + tl, depth + 1, max_depth, mask);
        if (rc) return rc;
    }
    cn_state_free(c);
    free(m2);
    return 0;
}

static int cmd_oracle(enum cn_kind kind, const char *t, size_t n, const struct opts *o) {
    if (!o->vocab) die(1, "%s", "oracle needs --vocab");
    struct cn_vocab *v = vocab_from_file(o->vocab);
    struct cn_program *p = compile_or_exit(kind, t, n, o, NULL);
    struct cn_state *s = NULL;
    if (cn_state_init(p, v, &s) != ANVIL_OK) die(1, "%s", "out of memory");
    uint8_t *mask = malloc(((size_t)cn_vocab_n_vocab(v) + 7) / 8);
    uint8_t *prefix = malloc((size_t)(o->depth + 1) * (v->max_len + 1) + 1);
    int rc = oracle_rec(s, v, prefix, 0, 0, o->depth, mask);
    free(mask);
    free(prefix);
    cn_state_free(s);
    cn_program_free(p);
    cn_vocab_free(v);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: tool_constrain check|dump|match|walk|oracle KIND SRC [options]\n");
        return 1;
    }
    struct opts o = {.seed = 1, .n = 10, .max_tokens = 200, .depth = 3};
    char **srcs = calloc((size_t)argc, sizeof *srcs);
    int n_srcs = 0;
    srcs[n_srcs++] = argv[3];
    for (int i = 4; i < argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !a[1]) {
            srcs[n_srcs++] = argv[i];
            continue;
        }
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--compact")) o.compact = true;
        else if (!strcmp(a, "--ref")) o.ref = true;
        else if (!strcmp(a, "--text")) o.text = true;
        else if (!strcmp(a, "--model") && val) o.model = argv[++i];
        else if (!strcmp(a, "--vocab") && val) o.vocab = argv[++i];
        else if (!strcmp(a, "--seed") && val) o.seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(a, "--n") && val) o.n = atoi(argv[++i]);
        else if (!strcmp(a, "--max-tokens") && val) o.max_tokens = atoi(argv[++i]);
        else if (!strcmp(a, "--depth") && val) o.depth = atoi(argv[++i]);
        else if (!strcmp(a, "--max-dfa") && val) o.max_dfa = atoi(argv[++i]);
        else if (!strcmp(a, "--max-nfa") && val) o.max_nfa = atoi(argv[++i]);
        else die(1, "unknown option %s", a);
    }
    enum cn_kind kind = parse_kind(argv[2]);
    if (!strcmp(argv[1], "walk")) {
        int rc = cmd_walk(kind, srcs, n_srcs, &o);
        free(srcs);
        return rc;
    }
    size_t n;
    char *t = load_src(argv[3], o.text, &n);
    free(srcs);
    int rc;
    if (!strcmp(argv[1], "check")) rc = cmd_check(kind, t, n, &o);
    else if (!strcmp(argv[1], "dump")) rc = cmd_dump(kind, t, n, &o);
    else if (!strcmp(argv[1], "match")) rc = cmd_match(kind, t, n, &o);
    else if (!strcmp(argv[1], "oracle")) rc = cmd_oracle(kind, t, n, &o);
    else die(1, "unknown command %s", argv[1]);
    free(t);
    return rc;
}
