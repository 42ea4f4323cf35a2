/*
 * outparse.c - a choice's raw output -> parts (dialect.h): content text,
 * reasoning text, tool calls (begin with id and name, arguments in
 * pieces, end).
 *
 * The tool-call format and the reasoning markers come from the model's
 * chat template (srv_outfmt_detect). Formats, one case each in the
 * switches of outparse_feed / outparse_end:
 *   SRV_TOOLFMT_JSON      anvil's own call object {"name", "arguments"},
 *                         split by toolcall.c's srv_call splitter (one
 *                         call per answer, decided by the first byte under
 *                         "auto");
 *   every family format  (Hermes, Llama 3, Mistral, harmony, DeepSeek,
 *                         Granite, Command R, Functionary, generic) and
 *                         every reasoning format (<think>, harmony's
 *                         analysis channel): toolfmt.c's srv_tfp parsers,
 *                         which split thoughts, answer text and calls
 *                         (several per answer);
 * and for reasoning:
 *   SRV_REASONING_NONE    with the JSON format: every byte is content.
 * The JSON format keeps its own splitter because its "auto" decides on
 * the first byte under the or_text constraint (toolcall.c), which the
 * family parsers do not need: they find the family's markers anywhere.
 */
#include <stdlib.h>
#include <string.h>

#include "server/srv_int.h"
#include "server/toolfmt.h"

struct srv_outparse {
    struct srv_outfmt f;
    enum srv_tools_mode tools;
    bool thinking;
    uint64_t id_seed;
    int n_calls;   /* CALL_BEGIN sent */
    bool call_end; /* CALL_END sent for the current call */
    char id[40];
    /* a family format or reasoning markers: toolfmt.c's parser */
    struct srv_tfp *tfp;
    /* SRV_TOOLFMT_JSON */
    struct srv_call call;
    struct sbuf cpart, apart; /* one feed's content and arguments */
};

// ----------------------------------------------------------------------------
// formats

/* The formats' names and srv_outfmt_detect: toolfmt.c. */

// ----------------------------------------------------------------------------
// the parser

struct srv_outparse *srv_outparse_new(const struct srv_outfmt *f, enum srv_tools_mode tools,
                                      bool thinking, uint64_t id_seed) {
    struct srv_outparse *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    if (f) p->f = *f;
    p->tools = tools;
    p->thinking = thinking;
    p->id_seed = id_seed;
    if (p->f.tool_format != SRV_TOOLFMT_JSON || p->f.reasoning_format != SRV_REASONING_NONE) {
        if (!(p->tfp = srv_tfp_new(&p->f, tools, thinking, id_seed))) {
            free(p);
            return NULL;
        }
    }
    srv_call_init(&p->call, tools == SRV_TOOLS_REQUIRED || tools == SRV_TOOLS_NAMED);
    sb_init(&p->cpart);
    sb_init(&p->apart);
    return p;
}

void srv_outparse_free(struct srv_outparse *p) {
    if (!p) return;
    srv_tfp_free(p->tfp);
    srv_call_free(&p->call);
    sb_free(&p->cpart);
    sb_free(&p->apart);
    free(p);
}

int srv_outparse_n_calls(const struct srv_outparse *p) {
    return p->tfp ? srv_tfp_n_calls(p->tfp) : p->n_calls;
}

static void emit_text(enum srv_part_kind kind, const char *s, size_t n, srv_part_fn fn,
                      void *user) {
    if (n == 0) return;
    struct srv_part part = {.kind = kind, .text = s, .n = n};
    fn(user, &part);
}

static void begin_call(struct srv_outparse *p, const char *name, srv_part_fn fn, void *user) {
    /* the first call's id is srv_call_id(id_seed); later ones vary it */
    uint64_t seed = p->id_seed ^ ((uint64_t)p->n_calls * 0xD1B54A32D192ED03ull);
    srv_call_id(p->id, sizeof(p->id), seed);
    struct srv_part part = {
        .kind = SRV_PART_CALL_BEGIN, .call_index = p->n_calls, .id = p->id, .name = name};
    p->n_calls++;
    p->call_end = false;
    fn(user, &part);
}

static void emit_args(struct srv_outparse *p, const char *s, size_t n, srv_part_fn fn,
                      void *user) {
    if (n == 0 || p->n_calls == 0) return;
    struct srv_part part = {
        .kind = SRV_PART_CALL_ARGS, .call_index = p->n_calls - 1, .text = s, .n = n};
    fn(user, &part);
}

static void end_call(struct srv_outparse *p, srv_part_fn fn, void *user) {
    if (p->n_calls == 0 || p->call_end) return;
    p->call_end = true;
    struct srv_part part = {.kind = SRV_PART_CALL_END, .call_index = p->n_calls - 1};
    fn(user, &part);
}

/* The JSON format's splitter output of one feed (or the end) as parts. */
static void json_flush(struct srv_outparse *p, srv_part_fn fn, void *user) {
    emit_text(SRV_PART_CONTENT, p->cpart.p, p->cpart.len, fn, user);
    if (p->call.named && p->n_calls == 0) begin_call(p, p->call.name, fn, user);
    emit_args(p, p->apart.p, p->apart.len, fn, user);
    sb_clear(&p->cpart);
    sb_clear(&p->apart);
}

void srv_outparse_feed(struct srv_outparse *p, const char *s, size_t n, srv_part_fn fn,
                       void *user) {
    if (n == 0) return;
    if (p->tfp) {
        srv_tfp_feed(p->tfp, s, n, fn, user);
        return;
    }
    /* the JSON format without reasoning markers */
    if (p->tools == SRV_TOOLS_NONE) {
        emit_text(SRV_PART_CONTENT, s, n, fn, user);
        return;
    }
    switch (p->f.tool_format) {
    case SRV_TOOLFMT_JSON:
    default:
        srv_call_feed(&p->call, s, n, &p->cpart, &p->apart);
        json_flush(p, fn, user);
        break;
    }
}

void srv_outparse_end(struct srv_outparse *p, bool complete, srv_part_fn fn, void *user) {
    if (p->tfp) {
        srv_tfp_end(p->tfp, complete, fn, user);
        return;
    }
    if (p->tools == SRV_TOOLS_NONE) return;
    switch (p->f.tool_format) {
    case SRV_TOOLFMT_JSON:
    default:
        srv_call_end(&p->call, complete && p->call.named, &p->cpart, &p->apart);
        json_flush(p, fn, user);
        if (complete && p->call.named) end_call(p, fn, user);
        break;
    }
}
