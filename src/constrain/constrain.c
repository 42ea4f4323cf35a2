/*
 * constrain.c - the front door of the constraint engine (constrain.h):
 * cn_compile picks the parser for the kind, adds the free-text branch of
 * cn_options.or_text, and hands the IR to the compiler; cn_program_info
 * reports on the result.
 *
 * Nothing in the room calls back here: the parsers (regex.c, gbnf.c,
 * schema.c) and the compiler (compile.c, dfa.c) take their defaults from
 * limits.c, so the calls run one way, door -> parsers -> IR and door ->
 * compiler -> determinizer.
 */
#include <string.h>

#include "constrain/cn_int.h"

anvil_status cn_parse(enum cn_kind kind, const char *text, size_t len,
                      const struct cn_options *opt, struct cn_ir **out, char *err,
                      size_t err_cap) {
    if (!out || (!text && len && kind != CN_JSON)) {
        errmsg_set(err, err_cap, "no constraint text");
        return ANVIL_ERR_INVALID;
    }
    switch (kind) {
    case CN_REGEX: return cn_parse_regex(text ? text : "", len, opt, out, err, err_cap);
    case CN_GBNF: return cn_parse_gbnf(text ? text : "", len, opt, out, err, err_cap);
    case CN_JSON_SCHEMA: return cn_parse_schema(text ? text : "", len, opt, out, err, err_cap);
    case CN_JSON: return cn_parse_json_any(opt, out, err, err_cap);
    case CN_CALLS: return cn_parse_calls(text ? text : "", len, opt, out, err, err_cap);
    }
    errmsg_set(err, err_cap, "unknown constraint kind %d", (int)kind);
    return ANVIL_ERR_INVALID;
}

/* cn_options.or_text: root' ::= root | "" | [^{] .* (code points). The
 * text branch is one DFA state looping on UTF-8, so it costs nothing. */
static anvil_status or_text(struct cn_ir *g, char *err, size_t err_cap) {
    static const char name[] = "root_or_text";
    uint32_t r = ir_rule_add(g, name, sizeof name - 1);
    struct cp_set first = {0};
    cps_add(g, &first, 0, '{' - 1);
    cps_add(g, &first, '{' + 1, CN_MAX_CP);
    uint32_t lead = ir_cps(g, &first);
    cps_free(&first);
    uint32_t text = ir_opt(g, ir_seq2(g, lead, ir_rep(g, ir_any_cp(g), 0, -1)));
    ir_rule_define(g, r, ir_alt2(g, ir_ref(g, g->root), text));
    if (!ir_ok(g)) {
        errmsg_set(err, err_cap, "%s", g->err);
        return g->st;
    }
    g->root = r;
    return ANVIL_OK;
}

anvil_status cn_compile(enum cn_kind kind, const char *text, size_t len,
                        const struct cn_options *opt, struct cn_program **out, char *err,
                        size_t err_cap) {
    struct cn_ir *g = NULL;
    anvil_status st = cn_parse(kind, text, len, opt, &g, err, err_cap);
    if (st != ANVIL_OK) return st;
    if (opt && opt->or_text && (st = or_text(g, err, err_cap)) != ANVIL_OK) {
        ir_free(g);
        return st;
    }
    st = cn_compile_ir(g, opt, out, err, err_cap);
    ir_free(g);
    return st;
}

void cn_program_info(const struct cn_program *p, struct cn_program_info *out) {
    memset(out, 0, sizeof *out);
    out->n_states = p->n_states;
    out->n_classes = p->n_classes;
    out->n_rules = p->pure ? 0 : p->n_rules;
    out->n_nfa = p->n_nfa;
    out->bytes = p->bytes;
}
