/*
 * fuzz_constrain.c - libFuzzer harness: bytes -> the constraint engine's
 * parsers (regex, GBNF, JSON Schema), compiler and run time.
 *
 * The first byte picks the source language (and whitespace mode) and seeds
 * a random walk; the rest is the source text. Small limits keep each run
 * short (and exercise the bound errors). Per input:
 *   - parsing and compiling either succeed or fail with ANVIL_ERR_INVALID /
 *     ANVIL_ERR_UNSUPPORTED and a non-empty NUL-terminated message;
 *   - for a program that compiles, a random walk over allowed bytes: at
 *     every step all 256 next bytes and the accept flag agree with the
 *     Earley reference on the same IR (src/constrain/ref.c), unless a
 *     run-time bound refused something (then only "fast allows => reference
 *     allows" must hold: the bounds may refuse, never invent);
 *   - on a small vocabulary (every byte, a few multi-byte strings, an EOG):
 *     cn_fill_mask (cached or walked) and cn_allowed agree, and a token is
 *     allowed exactly when its bytes advance the state;
 *   - a live state can always finish (cn_min_remaining >= 0), a state
 *     copy behaves like the original, and nothing leaks.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/cn_int.h"
#include "constrain/constrain.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define N_VOCAB 300

static struct cn_vocab *g_vocab;

static void check(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_constrain: property broken: %s\n", what);
        abort();
    }
}

static void unload(void) { cn_vocab_free(g_vocab); }

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    /* bytes 0..255, then pieces a schema or grammar walk can use */
    static const char *multi[] = {"{\"", "\":", "\",", "\"}", "true", "null", "false", "12", "-1",
                                  ".5", "e+", "ab", "abc", "\\n", "\\u00", "é", "中", "😀", "  ",
                                  "\n ", "[{", "}]", "},", "xyz", "()", "((", "))", "a\"", "\"\"",
                                  "\xc3", "\xa9\"", "0.", "00", "19", "20", "-0"};
    const int n_multi = (int)(sizeof multi / sizeof multi[0]);
    uint8_t *bytes[N_VOCAB];
    int32_t lens[N_VOCAB];
    uint8_t kinds[N_VOCAB];
    uint8_t store[256];
    for (int i = 0; i < 256; i++) {
        store[i] = (uint8_t)i;
        bytes[i] = &store[i];
        lens[i] = 1;
        kinds[i] = CN_TOK_TEXT;
    }
    int n = 256;
    for (int i = 0; i < n_multi && n < N_VOCAB - 2; i++, n++) {
        bytes[n] = (uint8_t *)multi[i];
        lens[n] = (int32_t)strlen(multi[i]);
        kinds[n] = CN_TOK_TEXT;
    }
    bytes[n] = NULL;
    lens[n] = 0;
    kinds[n++] = CN_TOK_EOG;
    char err[256];
    if (cn_vocab_build(n, (const uint8_t *const *)bytes, lens, kinds, &g_vocab, err, sizeof err) != ANVIL_OK) {
        fprintf(stderr, "fuzz_constrain: vocabulary: %s\n", err);
        abort();
    }
    atexit(unload);
    return 0;
}

static uint64_t rng;
static uint32_t rnd(uint32_t n) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((rng >> 33) % n);
}

static void walk(const struct cn_ir *g, const struct cn_program *p, int steps) {
    struct cn_ref *r = NULL;
    if (cn_ref_init(g, &r) != ANVIL_OK) return;
    struct cn_state *s = NULL, *tmp = NULL;
    anvil_status st = cn_state_init(p, g_vocab, &s);
    if (st != ANVIL_OK) {
        check(st == ANVIL_ERR_UNSUPPORTED || st == ANVIL_ERR_NOMEM, "state init status");
        cn_ref_free(r);
        return;
    }
    check(cn_state_init(p, g_vocab, &tmp) == ANVIL_OK, "second state");
    int32_t nv = cn_vocab_n_vocab(g_vocab);
    uint8_t mask[(N_VOCAB + 7) / 8], mask2[(N_VOCAB + 7) / 8];
    /* once a bound has dropped a parse stack, the state is a subset of the
     * reference's: only "fast => reference" must hold from then on */
    bool bound_seen = s->sc.bound;
    for (int step = 0; step <= steps; step++) {
        if (cn_accepts(s)) check(cn_ref_accepts(r), "accepts what the reference refuses");
        else check(!cn_ref_accepts(r) || bound_seen, "refuses what the reference accepts");
        int64_t rem = cn_min_remaining(s);
        check(!cn_accepts(s) && !cn_can_continue(s) ? rem < 0 : rem >= 0,
              "min_remaining and liveness");
        /* bytes */
        uint8_t ok[256];
        int n_ok = 0;
        for (int b = 0; b < 256; b++) {
            check(cn_state_copy(tmp, s) == ANVIL_OK, "copy");
            uint8_t c = (uint8_t)b;
            anvil_status a = cn_advance_bytes(tmp, &c, 1);
            check(a == ANVIL_OK || a == ANVIL_ERR_INVALID, "advance status");
            ok[b] = a == ANVIL_OK;
            bool bounded = tmp->sc.bound;
            bool ref_ok = cn_ref_feed(r, &c, 1);
            cn_ref_pop(r);
            if (ok[b]) check(ref_ok, "fast allows a byte the reference refuses");
            else check(!ref_ok || bounded || bound_seen, "fast refuses a byte the reference allows");
            n_ok += ok[b];
        }
        check(cn_can_continue(s) == (n_ok > 0) || bound_seen, "can_continue");
        /* tokens */
        int32_t cnt = cn_fill_mask(s, mask);
        check(cnt >= 0, "fill_mask");
        check(cn_fill_mask_walk(s, mask2) == cnt, "cached and walked counts");
        check(!memcmp(mask, mask2, ((size_t)nv + 7) / 8), "cached and walked masks");
        for (int32_t t = 0; t < nv; t++) {
            bool m = (mask[t >> 3] >> (t & 7)) & 1;
            check(m == cn_allowed(s, t), "mask and cn_allowed");
            if (g_vocab->kind[t] == CN_TOK_EOG) {
                check(m == cn_accepts(s), "EOG allowed exactly when complete");
            } else if (t < 256) {
                check(m == ok[t], "one-byte token and byte");
            }
        }
        if (n_ok == 0 || step == steps) break;
        int k = (int)rnd((uint32_t)n_ok);
        int b = 0;
        for (; b < 256; b++)
            if (ok[b] && k-- == 0) break;
        uint8_t c = (uint8_t)b;
        check(cn_advance_bytes(s, &c, 1) == ANVIL_OK, "advance by an allowed byte");
        bound_seen |= s->sc.bound;
        check(cn_ref_feed(r, &c, 1), "reference advance");
    }
    cn_state_free(s);
    cn_state_free(tmp);
    cn_ref_free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    uint8_t sel = data[0];
    static const enum cn_kind kinds[4] = {CN_REGEX, CN_GBNF, CN_JSON_SCHEMA, CN_JSON_SCHEMA};
    enum cn_kind kind = kinds[sel & 3];
    if ((sel & 3) == 3 && (sel & 8)) kind = CN_CALLS; /* tool calls in a family's format */
    struct cn_options o = cn_default_options();
    o.ws = (sel & 4) ? CN_WS_COMPACT : CN_WS_FLEX;
    o.limits.max_nfa_states = 20000;
    o.limits.max_dfa_states = 3000;
    o.limits.max_work = 3000000;
    o.limits.max_depth = 24;
    o.limits.max_stack = 24;
    o.limits.max_stacks = 16;
    rng = 0x9e3779b97f4a7c15ull ^ sel;
    for (size_t i = 1; i < size && i < 64; i++) rng = rng * 31 + data[i];
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct cn_ir *g = NULL;
    char err[512];
    memset(err, 'x', sizeof err);
    err[sizeof err - 1] = 0;
    anvil_status st = cn_parse(kind, text, len, &o, &g, err, sizeof err);
    if (st != ANVIL_OK) {
        check(st == ANVIL_ERR_INVALID || st == ANVIL_ERR_UNSUPPORTED || st == ANVIL_ERR_NOMEM,
              "parse status");
        check(err[0] && err[0] != 'x' && strlen(err) < sizeof err, "parse message");
        return 0;
    }
    struct cn_program *p = NULL;
    st = cn_compile_ir(g, &o, &p, err, sizeof err);
    if (st != ANVIL_OK) {
        check(st == ANVIL_ERR_INVALID || st == ANVIL_ERR_UNSUPPORTED || st == ANVIL_ERR_NOMEM,
              "compile status");
        check(err[0] && strlen(err) < sizeof err, "compile message");
        ir_free(g);
        return 0;
    }
    /* the one-call entry point agrees */
    struct cn_program *p2 = NULL;
    check(cn_compile(kind, text, len, &o, &p2, err, sizeof err) == ANVIL_OK, "cn_compile agrees");
    check(p2->n_states == p->n_states && p2->pure == p->pure, "deterministic compile");
    cn_program_free(p2);
    if (g->n_nodes < 4000) walk(g, p, 12);
    cn_program_free(p);
    ir_free(g);
    return 0;
}
