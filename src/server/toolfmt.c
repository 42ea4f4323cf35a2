/*
 * toolfmt.c - the families' tool-call formats and reasoning markers
 * (toolfmt.h): detection from the chat template's text, and the
 * incremental parsers that turn a generation's raw text into parts.
 *
 * One state machine, fed a byte at a time (so any split of the input
 * gives the same parts): in text it looks for the markers of the current
 * format (held while they may still be starting); a marker hands the
 * bytes that follow to a sub-reader (a call object or an array of them,
 * a name up to a terminator, a JSON argument value, an expected literal)
 * whose continuation, per format, says what comes next. Until a call's
 * name is known every byte since its opening marker is kept, and goes
 * out as content when the call turns out not to be one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "server/toolfmt.h"

/* the markers (DeepSeek's use U+FF5C and U+2581) */
#define DS_CALLS_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALLS_END "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_CALL_BEGIN "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>"
#define DS_CALL_END "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>"
#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>"

enum st {
    ST_TEXT,
    ST_COBJ,    /* a call object / array (tf_cobj) */
    ST_EXPECT,  /* a literal after optional whitespace */
    ST_NAME,    /* a name up to a terminator */
    ST_ARGS,    /* a JSON object: the current call's arguments */
    ST_SEMI,    /* after a whole-answer call: ';' and another, or text */
    ST_PYTAG,   /* after <|python_tag|> */
    ST_PYCODE,  /* python code or name.call(...) after <|python_tag|> */
    ST_DS_WAIT, /* DeepSeek: between calls */
    ST_MISTRAL, /* after [TOOL_CALLS]: an array, or name[ARGS]{...} */
    ST_GENERIC, /* the generic format: the whole answer, read at the end */
    ST_H_HDR,   /* harmony: a message header, up to <|message|> */
    ST_H_BODY,  /* harmony: a message body */
    ST_H_WAIT,  /* harmony: after a message, before the next <|start|> */
};

struct srv_tfp;
typedef void (*tf_next_fn)(struct srv_tfp *p);

struct srv_tfp {
    struct srv_outfmt f;
    bool calls_on;
    uint64_t seed;
    srv_part_fn fn;
    void *user;
    /* output: pieces of one kind are joined until the kind changes or the feed ends */
    struct sbuf ob;
    int ob_kind; /* enum srv_part_kind, -1 = empty */
    struct sbuf wsh; /* trailing whitespace of the text, held */
    bool lead;       /* drop the leading whitespace of the next text */
    bool fresh;      /* no text, thought or call yet in the answer */
    bool in_thought;
    bool thought_seen; /* a thought was opened or closed: no second one */
    int wsh_kind;
    const char *think_open, *think_close;
    enum st st;
    tf_next_fn next;
    struct sbuf hold; /* text that may start a marker */
    struct sbuf tent; /* raw text since a call's opening marker, before its name */
    struct sbuf nb;   /* a name or header being read */
    const char *lit;  /* ST_EXPECT */
    bool lit_opt;
    size_t lit_i;
    const char *term; /* ST_NAME */
    struct tf_cobj co;
    struct tf_jscan js;
    bool js_started;
    int h_kind; /* harmony body: SRV_PART_CONTENT, _REASONING or _CALL_ARGS */
    bool call_open;
    int n_calls;
    bool bare; /* the call object being read came without the format's tags */
    char id[40];
    char name[SRV_TOOL_NAME_MAX + 1];
};

static void step(struct srv_tfp *p, unsigned char c);

/* ---------------------------------------------------------------------- */
/* output */

static void flush(struct srv_tfp *p) {
    if (!p->ob.len || p->ob_kind < 0) return;
    struct srv_part part = {.kind = (enum srv_part_kind)p->ob_kind,
                            .call_index = p->n_calls - 1,
                            .text = p->ob.p,
                            .n = p->ob.len};
    if (part.kind != SRV_PART_CALL_ARGS) part.call_index = 0;
    if (p->fn) p->fn(p->user, &part);
    sb_clear(&p->ob);
}

static void ob_put(struct srv_tfp *p, int kind, const char *s, size_t n) {
    if (!n) return;
    if (p->ob_kind != kind) {
        flush(p);
        p->ob_kind = kind;
    }
    sb_put(&p->ob, s, n);
}

static int text_kind(const struct srv_tfp *p) {
    return p->in_thought ? SRV_PART_REASONING : SRV_PART_CONTENT;
}

static bool ws(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* answer or thought text, through the whitespace rule: leading whitespace
 * after a boundary (a thought's markers, a call) is dropped, trailing
 * whitespace is held until more text comes */
static void out_text(struct srv_tfp *p, int kind, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (ws(c)) {
            if (p->wsh.len && p->wsh_kind != kind) sb_clear(&p->wsh);
            p->wsh_kind = kind;
            if (!p->lead) sb_put(&p->wsh, (const char *)&c, 1);
            continue;
        }
        p->lead = false;
        p->fresh = false;
        if (p->wsh.len && p->wsh_kind == kind) ob_put(p, kind, p->wsh.p, p->wsh.len);
        sb_clear(&p->wsh);
        size_t j = i;
        while (j < n && !ws((unsigned char)s[j])) j++;
        ob_put(p, kind, s + i, j - i);
        i = j - 1;
    }
}

/* a boundary: held whitespace is dropped, the next text's leading whitespace too */
static void boundary(struct srv_tfp *p) {
    sb_clear(&p->wsh);
    p->lead = true;
}

static void begin_call(struct srv_tfp *p, const char *name) {
    boundary(p);
    flush(p);
    uint64_t z = p->seed + 0x9E3779B97F4A7C15ull * (uint64_t)(p->n_calls + 1);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    snprintf(p->id, sizeof(p->id), "call_%016llx%08x", (unsigned long long)z,
             (unsigned)(p->seed >> 7) ^ (unsigned)p->n_calls);
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->n_calls++;
    p->call_open = true;
    p->fresh = false;
    sb_clear(&p->tent);
    struct srv_part part = {.kind = SRV_PART_CALL_BEGIN, .call_index = p->n_calls - 1,
                            .id = p->id, .name = p->name};
    if (p->fn) p->fn(p->user, &part);
}

static void call_args(struct srv_tfp *p, const char *s, size_t n) {
    if (p->call_open) ob_put(p, SRV_PART_CALL_ARGS, s, n);
}

static void end_call(struct srv_tfp *p) {
    if (!p->call_open) return;
    flush(p);
    p->call_open = false;
    struct srv_part part = {.kind = SRV_PART_CALL_END, .call_index = p->n_calls - 1};
    if (p->fn) p->fn(p->user, &part);
    boundary(p);
    sb_clear(&p->tent);
}

/* a call that was not one: its raw text is content, text goes on */
static void fallback(struct srv_tfp *p) {
    p->bare = false;
    if (p->call_open) { /* begun: ended where the output broke */
        end_call(p);
    } else {
        p->lead = false;
        out_text(p, SRV_PART_CONTENT, p->tent.p ? p->tent.p : "", p->tent.len);
    }
    sb_clear(&p->tent);
    sb_clear(&p->nb);
    p->st = p->f.tool_format == SRV_TOOLFMT_HARMONY ? ST_H_WAIT : ST_TEXT;
}

/* ---------------------------------------------------------------------- */
/* markers */

/* Append c to the hold; returns the index of the marker the hold now
 * ends with (the text before it released through rel), or -1, having
 * released what can no longer start a marker. */
static int scan(struct srv_tfp *p, unsigned char c, const char *const *m, int nm,
                void (*rel)(struct srv_tfp *, const char *, size_t)) {
    sb_put(&p->hold, (const char *)&c, 1);
    size_t n = p->hold.len;
    const char *h = p->hold.p;
    for (int i = 0; i < nm; i++) {
        size_t ml = strlen(m[i]);
        if (ml <= n && !memcmp(h + n - ml, m[i], ml)) {
            if (n > ml) rel(p, h, n - ml);
            sb_clear(&p->hold);
            return i;
        }
    }
    size_t k = 0;
    for (; k < n; k++) {
        bool pre = false;
        for (int i = 0; i < nm && !pre; i++) {
            size_t ml = strlen(m[i]);
            pre = n - k < ml && !memcmp(h + k, m[i], n - k);
        }
        if (pre) break;
    }
    if (k) {
        rel(p, h, k);
        memmove(p->hold.p, p->hold.p + k, n - k);
        p->hold.len = n - k;
    }
    return -1;
}

static void rel_text(struct srv_tfp *p, const char *s, size_t n) { out_text(p, text_kind(p), s, n); }
static void rel_none(struct srv_tfp *p, const char *s, size_t n) {
    (void)p;
    (void)s;
    (void)n;
}

/* ---------------------------------------------------------------------- */
/* sub-readers */

unsigned long long srv_tool_hash(const char *s, unsigned long n) {
    unsigned long long h = 0xcbf29ce484222325ull;
    for (unsigned long i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 0x100000001b3ull;
    return h;
}

static bool is_tool(const struct srv_tfp *p, const char *name) {
    unsigned long long h = srv_tool_hash(name, strlen(name));
    for (int i = 0; i < p->f.n_tools && i < SRV_OUTFMT_TOOLS; i++)
        if (p->f.tool_hash[i] == h) return true;
    return false;
}

/* Hermes: a call written without its tags (a bare JSON object, or one in
 * a ```json fence) is one when its name is a tool's */
static bool hermes_bare(const struct srv_tfp *p) {
    return p->f.tool_format == SRV_TOOLFMT_HERMES && p->f.n_tools > 0;
}

static bool co_begin(void *u, const char *name) {
    struct srv_tfp *p = u;
    if (!tf_name_ok(name, strlen(name))) return false;
    if (p->bare && !is_tool(p, name)) return false;
    begin_call(p, name);
    return true;
}
static void co_args(void *u, const char *s, size_t n) { call_args(u, s, n); }
static void co_end(void *u) { end_call(u); }
static const struct tf_cobj_ops co_ops = {co_begin, co_args, co_end};

static void to_text(struct srv_tfp *p) { p->st = ST_TEXT; }


static void read_cobj(struct srv_tfp *p, bool array_ok, tf_next_fn next) {
    tf_cobj_free(&p->co);
    tf_cobj_init(&p->co, &co_ops, p, array_ok);
    p->st = ST_COBJ;
    p->next = next;
}

static void expect(struct srv_tfp *p, const char *lit, bool optional, tf_next_fn next) {
    p->lit = lit;
    p->lit_opt = optional;
    p->lit_i = 0;
    p->st = ST_EXPECT;
    p->next = next;
}

static void read_name(struct srv_tfp *p, const char *term, tf_next_fn next) {
    sb_clear(&p->nb);
    p->term = term;
    p->st = ST_NAME;
    p->next = next;
}

static void read_args(struct srv_tfp *p, tf_next_fn next) {
    tf_jscan_init(&p->js);
    p->js_started = false;
    p->st = ST_ARGS;
    p->next = next;
}

/* re-read bytes (a literal's partial match) in the current state */
static void refeed(struct srv_tfp *p, const char *s, size_t n) {
    char t[64];
    if (n > sizeof(t)) n = sizeof(t);
    memcpy(t, s, n);
    for (size_t i = 0; i < n; i++) step(p, (unsigned char)t[i]);
}

/* ---------------------------------------------------------------------- */
/* the formats' continuations */

static void hermes_after(struct srv_tfp *p) { expect(p, "</tool_call>", false, to_text); }
static void bare_after(struct srv_tfp *p) {
    p->bare = false;
    p->st = ST_TEXT;
}
static void fence_after(struct srv_tfp *p) {
    p->bare = false;
    expect(p, "```", true, to_text);
}
static void semi(struct srv_tfp *p) { p->st = ST_SEMI; }
static void ds_wait(struct srv_tfp *p) {
    p->st = ST_DS_WAIT;
}
static void ds_after_fence(struct srv_tfp *p) { expect(p, DS_CALL_END, false, ds_wait); }
static void ds_after_args(struct srv_tfp *p) { expect(p, "```", true, ds_after_fence); }
static void ds_args(struct srv_tfp *p) { read_args(p, ds_after_args); }
static void ds_before_args(struct srv_tfp *p) { expect(p, "```json", true, ds_args); }
static void ds_named(struct srv_tfp *p) {
    /* the header before <｜tool▁sep｜>: "function" (R1, V3: the name
     * follows on its line) or the name itself (V3.1) */
    const char *h = p->nb.len ? p->nb.p : "";
    if (!strcmp(h, "function")) {
        read_name(p, "\n", ds_before_args);
        return;
    }
    if (!tf_name_ok(h, p->nb.len)) {
        fallback(p);
        return;
    }
    begin_call(p, h);
    ds_before_args(p);
}
static void fn31_after(struct srv_tfp *p) { expect(p, "</function>", false, to_text); }
static void fn31_args(struct srv_tfp *p) { read_args(p, fn31_after); }
static void fn32_args(struct srv_tfp *p) { read_args(p, to_text); }
static void mistral_args(struct srv_tfp *p) { read_args(p, to_text); }
static void cr_after_fence(struct srv_tfp *p) { p->st = ST_TEXT; }
static void cr_after(struct srv_tfp *p) { expect(p, "```", true, cr_after_fence); }
static void cr_arr(struct srv_tfp *p) { read_cobj(p, true, cr_after); }
static void cr7_after(struct srv_tfp *p) { expect(p, "<|END_ACTION|>", false, to_text); }

/* ST_NAME finished: the name is nb less the terminator */
static void name_done(struct srv_tfp *p) {
    size_t tl = strlen(p->term);
    p->nb.len -= tl;
    if (p->nb.p) p->nb.p[p->nb.len] = 0;
    /* Mistral's [TOOL_CALLS]name[CALL_ID]id[ARGS]: the name ends at '[' */
    char *br = p->nb.len ? memchr(p->nb.p, '[', p->nb.len) : NULL;
    if (br) {
        *br = 0;
        p->nb.len = (size_t)(br - p->nb.p);
    }
    while (p->nb.len && ws((unsigned char)p->nb.p[p->nb.len - 1])) p->nb.p[--p->nb.len] = 0;
    size_t a = 0;
    while (a < p->nb.len && ws((unsigned char)p->nb.p[a])) a++;
    const char *name = p->nb.len ? p->nb.p + a : "";
    size_t nn = p->nb.len - a;
    tf_next_fn next = p->next;
    if (next == ds_named) { /* a DeepSeek header, judged there */
        memmove(p->nb.p, name, nn + 1);
        p->nb.len = nn;
        next(p);
        return;
    }
    if (p->f.tool_format == SRV_TOOLFMT_FUNCTIONARY && next == fn32_args &&
        nn == 3 && !memcmp(name, "all", 3)) { /* >>>all: text */
        sb_clear(&p->tent);
        p->fresh = false;
        p->lead = true;
        p->st = ST_TEXT;
        return;
    }
    if (!tf_name_ok(name, nn)) {
        fallback(p);
        return;
    }
    begin_call(p, name);
    next(p);
}

/* ---------------------------------------------------------------------- */
/* the text state: each format's markers */

enum mk {
    MK_THINK_OPEN, MK_THINK_CLOSE, MK_HERMES, MK_PYTAG, MK_MISTRAL, MK_DS, MK_GRANITE,
    MK_CR_ACTION, MK_CR7_ACTION, MK_CR7_DROP, MK_FN31, MK_FN32, MK_FENCE, MK_COUNT
};

static int text_markers(const struct srv_tfp *p, const char **m, int *id) {
    int n = 0;
#define ADD(s, k) (m[n] = (s), id[n++] = (k))
    if (p->in_thought) {
        ADD(p->think_close, MK_THINK_CLOSE);
        return n;
    }
    if (p->fresh && p->think_open && !p->thought_seen) ADD(p->think_open, MK_THINK_OPEN);
    if (!p->calls_on) return n;
    switch (p->f.tool_format) {
    case SRV_TOOLFMT_HERMES:
        ADD("<tool_call>", MK_HERMES);
        if (p->fresh && hermes_bare(p)) ADD("```json", MK_FENCE);
        break;
    case SRV_TOOLFMT_LLAMA3: ADD("<|python_tag|>", MK_PYTAG); break;
    case SRV_TOOLFMT_MISTRAL: ADD("[TOOL_CALLS]", MK_MISTRAL); break;
    case SRV_TOOLFMT_DEEPSEEK_R1:
    case SRV_TOOLFMT_DEEPSEEK_V3:
        ADD(DS_CALLS_BEGIN, MK_DS);
        ADD("<\xef\xbd\x9ctool_calls_begin\xef\xbd\x9c>", MK_DS);
        ADD("<\xef\xbd\x9ctool calls begin\xef\xbd\x9c>", MK_DS);
        break;
    case SRV_TOOLFMT_GRANITE: ADD("<|tool_call|>", MK_GRANITE); break;
    case SRV_TOOLFMT_COMMAND_R:
        ADD("Action:", MK_CR_ACTION);
        ADD("<|START_ACTION|>", MK_CR7_ACTION);
        ADD("<|START_RESPONSE|>", MK_CR7_DROP);
        ADD("<|END_RESPONSE|>", MK_CR7_DROP);
        break;
    case SRV_TOOLFMT_FUNCTIONARY:
        ADD("<function=", MK_FN31);
        ADD("<|python_tag|>", MK_PYTAG);
        ADD(">>>", MK_FN32);
        break;
    default: break;
    }
#undef ADD
    return n;
}

/* the whole answer is a call object (anvil's JSON, Llama 3, generic) */
static bool json_answer_format(const struct srv_tfp *p) {
    enum srv_toolfmt t = p->f.tool_format;
    return t == SRV_TOOLFMT_JSON || t == SRV_TOOLFMT_LLAMA3 || t == SRV_TOOLFMT_GENERIC;
}

static void st_text(struct srv_tfp *p, unsigned char c) {
    if (p->calls_on && p->fresh && !p->in_thought && !p->hold.len) {
        if (ws(c)) {
            out_text(p, SRV_PART_CONTENT, (const char *)&c, 1);
            return;
        }
        if (c == '{' && json_answer_format(p)) {
            sb_clear(&p->tent);
            if (p->f.tool_format == SRV_TOOLFMT_GENERIC) {
                sb_put(&p->tent, "{", 1);
                p->st = ST_GENERIC;
                return;
            }
            read_cobj(p, false, semi);
            step(p, c);
            return;
        }
        if (c == '{' && hermes_bare(p)) {
            sb_clear(&p->tent);
            read_cobj(p, false, bare_after);
            p->bare = true;
            step(p, c);
            return;
        }
        if (p->f.tool_format == SRV_TOOLFMT_FUNCTIONARY && c != '<') {
            /* v3.2: the prompt ends with ">>>", a name line comes first */
            sb_clear(&p->tent);
            read_name(p, "\n", fn32_args);
            step(p, c);
            return;
        }
    }
    const char *m[MK_COUNT];
    int id[MK_COUNT];
    int nm = text_markers(p, m, id);
    int k = scan(p, c, m, nm, rel_text);
    if (k < 0) return;
    /* a call's marker: its raw text, with the whitespace before it, is
     * kept until the call is certain */
    sb_clear(&p->tent);
    sb_put(&p->tent, p->wsh.p ? p->wsh.p : "", p->wsh.len);
    sb_clear(&p->wsh);
    sb_puts(&p->tent, m[k]);
    switch (id[k]) {
    case MK_THINK_OPEN:
        p->in_thought = true;
        p->thought_seen = true;
        boundary(p);
        sb_clear(&p->tent);
        return;
    case MK_THINK_CLOSE:
        flush(p);
        p->in_thought = false;
        p->thought_seen = true;
        p->fresh = true; /* the answer starts */
        boundary(p);
        sb_clear(&p->tent);
        return;
    case MK_HERMES: boundary(p); read_cobj(p, false, hermes_after); return;
    case MK_PYTAG: boundary(p); p->st = ST_PYTAG; return;
    case MK_MISTRAL: boundary(p); p->st = ST_MISTRAL; return;
    case MK_DS: boundary(p); p->st = ST_DS_WAIT; return;
    case MK_GRANITE: boundary(p); read_cobj(p, true, to_text); return;
    case MK_CR_ACTION: boundary(p); expect(p, "```json", true, cr_arr); return;
    case MK_CR7_ACTION: boundary(p); read_cobj(p, true, cr7_after); return;
    case MK_CR7_DROP: sb_clear(&p->tent); boundary(p); return;
    case MK_FN31: boundary(p); read_name(p, ">", fn31_args); return;
    case MK_FN32: boundary(p); read_name(p, "\n", fn32_args); return;
    case MK_FENCE:
        boundary(p);
        read_cobj(p, false, fence_after);
        p->bare = true;
        return;
    }
}

/* ---------------------------------------------------------------------- */
/* harmony (gpt-oss) */

static void rel_hbody(struct srv_tfp *p, const char *s, size_t n) {
    if (p->h_kind == SRV_PART_CALL_ARGS) call_args(p, s, n);
    else out_text(p, p->h_kind, s, n);
}

static void rel_hwait(struct srv_tfp *p, const char *s, size_t n) {
    out_text(p, SRV_PART_CONTENT, s, n); /* text outside any message */
}

/* a header is whole (nb, without <|message|>) */
static void h_header(struct srv_tfp *p) {
    const char *h = p->nb.len ? p->nb.p : "";
    char chan[32] = "", to[SRV_TOOL_NAME_MAX + 16] = "";
    const char *c = strstr(h, "<|channel|>");
    if (c) {
        c += 11;
        size_t i = 0;
        while (c[i] >= 'a' && c[i] <= 'z' && i + 1 < sizeof(chan)) chan[i] = c[i], i++;
        chan[i] = 0;
    }
    const char *t = strstr(h, "to=");
    if (t) {
        t += 3;
        size_t i = 0;
        while (t[i] && !ws((unsigned char)t[i]) && t[i] != '<' && i + 1 < sizeof(to)) to[i] = t[i], i++;
        to[i] = 0;
    }
    boundary(p);
    if (to[0] && p->calls_on) {
        const char *name = strncmp(to, "functions.", 10) ? to : to + 10;
        if (tf_name_ok(name, strlen(name))) {
            begin_call(p, name);
            p->h_kind = SRV_PART_CALL_ARGS;
            p->st = ST_H_BODY;
            return;
        }
    }
    p->h_kind = !strcmp(chan, "analysis") ? SRV_PART_REASONING : SRV_PART_CONTENT;
    if (p->h_kind == SRV_PART_REASONING) flush(p);
    p->st = ST_H_BODY;
    sb_clear(&p->tent);
}

static void st_harmony(struct srv_tfp *p, unsigned char c) {
    static const char *const body_end[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>",
                                           "<|channel|>"};
    static const char *const wait_m[] = {"<|start|>", "<|channel|>"};
    if (p->st == ST_H_HDR) {
        sb_put(&p->tent, (const char *)&c, 1);
        sb_put(&p->nb, (const char *)&c, 1);
        if (p->nb.len >= 11 && !memcmp(p->nb.p + p->nb.len - 11, "<|message|>", 11)) {
            p->nb.len -= 11;
            p->nb.p[p->nb.len] = 0;
            h_header(p);
        } else if (p->nb.len > 256 || (p->nb.len == 1 && (!c || !strchr("< a", c)))) {
            fallback(p); /* not a header: text */
        }
        return;
    }
    if (p->st == ST_H_BODY) {
        int k = scan(p, c, body_end, 5, rel_hbody);
        if (k < 0) return;
        end_call(p);
        flush(p);
        boundary(p);
        sb_clear(&p->nb);
        sb_clear(&p->tent);
        if (k == 4) sb_puts(&p->nb, "<|channel|>"), sb_puts(&p->tent, "<|channel|>");
        p->st = k >= 3 ? ST_H_HDR : ST_H_WAIT;
        return;
    }
    int k = scan(p, c, wait_m, 2, rel_hwait);
    if (k < 0) return;
    sb_clear(&p->nb);
    sb_clear(&p->tent);
    if (k == 1) sb_puts(&p->nb, "<|channel|>"), sb_puts(&p->tent, "<|channel|>");
    p->st = ST_H_HDR;
}

/* ---------------------------------------------------------------------- */
/* the byte step */

static void step(struct srv_tfp *p, unsigned char c) {
    switch (p->st) {
    case ST_TEXT: st_text(p, c); return;
    case ST_COBJ: {
        if (!tf_cobj_open(&p->co)) sb_put(&p->tent, (const char *)&c, 1);
        enum tf_co r = tf_cobj_byte(&p->co, c);
        if (r == TF_CO_ERR) {
            fallback(p);
            return;
        }
        if (r == TF_CO_END) {
            sb_clear(&p->tent);
            p->next(p);
        }
        return;
    }
    case ST_EXPECT: {
        if (p->lit_i == 0 && ws(c)) return;
        if (c == (unsigned char)p->lit[p->lit_i]) {
            if (!p->lit[++p->lit_i]) p->next(p);
            return;
        }
        size_t got = p->lit_i;
        const char *lit = p->lit;
        if (p->lit_opt) p->next(p);
        else p->st = p->f.tool_format == SRV_TOOLFMT_HARMONY ? ST_H_WAIT : ST_TEXT;
        refeed(p, lit, got);
        step(p, c);
        return;
    }
    case ST_NAME: {
        sb_put(&p->tent, (const char *)&c, 1);
        sb_put(&p->nb, (const char *)&c, 1);
        size_t tl = strlen(p->term);
        if (p->nb.len >= tl && !memcmp(p->nb.p + p->nb.len - tl, p->term, tl)) {
            name_done(p);
            return;
        }
        if (p->nb.len > SRV_TOOL_NAME_MAX + 40 || (c == '\n' && strcmp(p->term, "\n")))
            fallback(p);
        return;
    }
    case ST_ARGS: {
        if (!p->js_started) {
            if (ws(c)) return;
            if (c != '{') { /* no arguments object */
                call_args(p, "{}", 2);
                end_call(p);
                p->st = ST_TEXT;
                step(p, c);
                return;
            }
            p->js_started = true;
        }
        enum tf_js r = tf_jscan_byte(&p->js, c);
        if (r == TF_JS_ERR) {
            end_call(p);
            p->st = ST_TEXT;
            step(p, c);
            return;
        }
        call_args(p, (const char *)&c, 1);
        if (r == TF_JS_END) {
            end_call(p);
            p->next(p);
        }
        return;
    }
    case ST_SEMI:
        if (ws(c)) return;
        if (c == ';') return;
        if (c == '{') {
            sb_clear(&p->tent);
            read_cobj(p, false, semi);
            step(p, c);
            return;
        }
        p->st = ST_TEXT;
        step(p, c);
        return;
    case ST_PYTAG:
        if (ws(c)) {
            sb_put(&p->tent, (const char *)&c, 1);
            return;
        }
        if (c == '{') {
            read_cobj(p, false, semi);
            step(p, c);
            return;
        }
        sb_clear(&p->nb);
        p->st = ST_PYCODE;
        step(p, c);
        return;
    case ST_PYCODE:
        sb_put(&p->nb, (const char *)&c, 1);
        sb_put(&p->tent, (const char *)&c, 1);
        return;
    case ST_DS_WAIT: {
        static const char *const m[] = {DS_CALL_BEGIN, DS_CALLS_END};
        sb_put(&p->tent, (const char *)&c, 1);
        if (!p->hold.len && ws(c)) return;
        int k = scan(p, c, m, 2, rel_none);
        if (k == 0) {
            sb_clear(&p->tent);
            sb_puts(&p->tent, DS_CALL_BEGIN);
            read_name(p, DS_SEP, ds_named);
        } else if (k == 1) {
            sb_clear(&p->tent);
            boundary(p);
            p->st = ST_TEXT;
        } else if (!p->hold.len) { /* neither: what came is text */
            fallback(p);
        }
        return;
    }
    case ST_MISTRAL:
        if (ws(c)) {
            sb_put(&p->tent, (const char *)&c, 1);
            return;
        }
        if (c == '[' || c == '{') read_cobj(p, true, to_text);
        else read_name(p, "[ARGS]", mistral_args);
        step(p, c);
        return;
    case ST_GENERIC: sb_put(&p->tent, (const char *)&c, 1); return;
    case ST_H_HDR:
    case ST_H_BODY:
    case ST_H_WAIT: st_harmony(p, c); return;
    }
}

/* ---------------------------------------------------------------------- */
/* the generic format, read whole at the end */

static void generic_call(struct srv_tfp *p, const cJSON *c) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(c, "function");
    if (cJSON_IsObject(f)) c = f; /* {"type": "function", "function": {...}} */
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(c, "arguments");
    if (!a) a = cJSON_GetObjectItemCaseSensitive(c, "parameters");
    if (!cJSON_IsString(n) || !tf_name_ok(n->valuestring, strlen(n->valuestring))) return;
    begin_call(p, n->valuestring);
    char *t = NULL;
    if (cJSON_IsString(a)) {
        cJSON *pa = cJSON_Parse(a->valuestring);
        if (cJSON_IsObject(pa)) t = cJSON_PrintUnformatted(pa);
        cJSON_Delete(pa);
    } else if (cJSON_IsObject(a)) {
        t = cJSON_PrintUnformatted(a);
    }
    call_args(p, t ? t : "{}", t ? strlen(t) : 2);
    free(t);
    end_call(p);
}

static void generic_end(struct srv_tfp *p) {
    cJSON *j = cJSON_ParseWithLength(p->tent.p ? p->tent.p : "", p->tent.len);
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(j, "tool_calls");
    const cJSON *one = cJSON_GetObjectItemCaseSensitive(j, "tool_call");
    const cJSON *resp = cJSON_GetObjectItemCaseSensitive(j, "response");
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    int before = p->n_calls;
    if (cJSON_IsArray(tc)) {
        const cJSON *c;
        cJSON_ArrayForEach(c, tc) generic_call(p, c);
    } else if (cJSON_IsObject(one)) {
        generic_call(p, one);
    } else if (cJSON_IsString(name)) {
        generic_call(p, j);
    }
    if (p->n_calls > before || cJSON_IsArray(tc)) {
        /* calls */
    } else if (cJSON_IsString(resp)) {
        out_text(p, SRV_PART_CONTENT, resp->valuestring, strlen(resp->valuestring));
    } else {
        out_text(p, SRV_PART_CONTENT, p->tent.p ? p->tent.p : "", p->tent.len);
    }
    cJSON_Delete(j);
    sb_clear(&p->tent);
}

/* ---------------------------------------------------------------------- */
/* the interface */

struct srv_tfp *srv_tfp_new(const struct srv_outfmt *f, enum srv_tools_mode tools, bool thinking,
                            uint64_t id_seed) {
    struct srv_tfp *p = calloc(1, sizeof(*p));
    if (!p) return NULL;
    p->f = f ? *f : (struct srv_outfmt){0};
    if ((unsigned)p->f.tool_format >= SRV_TOOLFMT_COUNT) p->f.tool_format = SRV_TOOLFMT_JSON;
    p->calls_on = tools != SRV_TOOLS_NONE;
    p->seed = id_seed;
    p->ob_kind = -1;
    p->fresh = true;
    sb_init(&p->ob);
    sb_init(&p->wsh);
    sb_init(&p->hold);
    sb_init(&p->tent);
    sb_init(&p->nb);
    tf_cobj_init(&p->co, &co_ops, p, false);
    if (p->f.reasoning_format == SRV_REASONING_THINK) {
        p->think_open = "<think>";
        p->think_close = "</think>";
        if (p->f.tool_format == SRV_TOOLFMT_COMMAND_R) {
            p->think_open = "<|START_THINKING|>";
            p->think_close = "<|END_THINKING|>";
        } else if (p->f.tool_format == SRV_TOOLFMT_MISTRAL) {
            p->think_open = "[THINK]";
            p->think_close = "[/THINK]";
        }
        if (thinking) {
            p->in_thought = true;
            p->lead = true;
        }
    }
    if (p->f.tool_format == SRV_TOOLFMT_HARMONY || p->f.reasoning_format == SRV_REASONING_HARMONY) {
        p->f.tool_format = SRV_TOOLFMT_HARMONY;
        p->st = ST_H_HDR;
    }
    return p;
}

void srv_tfp_free(struct srv_tfp *p) {
    if (!p) return;
    sb_free(&p->ob);
    sb_free(&p->wsh);
    sb_free(&p->hold);
    sb_free(&p->tent);
    sb_free(&p->nb);
    tf_cobj_free(&p->co);
    free(p);
}

void srv_tfp_feed(struct srv_tfp *p, const char *s, size_t n, srv_part_fn fn, void *user) {
    if (!p) return;
    p->fn = fn;
    p->user = user;
    for (size_t i = 0; i < n; i++) step(p, (unsigned char)s[i]);
    flush(p);
}

void srv_tfp_end(struct srv_tfp *p, bool complete, srv_part_fn fn, void *user) {
    if (!p) return;
    p->fn = fn;
    p->user = user;
    switch (p->st) {
    case ST_TEXT:
    case ST_H_BODY:
    case ST_H_WAIT: {
        /* the held text is not a marker after all */
        struct sbuf h = p->hold;
        sb_init(&p->hold);
        if (p->st == ST_TEXT) rel_text(p, h.p ? h.p : "", h.len);
        else if (p->st == ST_H_BODY) rel_hbody(p, h.p ? h.p : "", h.len);
        else rel_hwait(p, h.p ? h.p : "", h.len);
        sb_free(&h);
        break;
    }
    case ST_PYCODE: {
        struct sbuf name, args;
        sb_init(&name);
        sb_init(&args);
        if (tf_pycall_to_json(p->nb.p ? p->nb.p : "", p->nb.len, &name, &args) &&
            tf_name_ok(name.p, name.len)) {
            begin_call(p, name.p);
        } else { /* code: a call of "python" */
            sb_clear(&args);
            sb_puts(&args, "{\"code\":");
            sb_json_str(&args, p->nb.p ? p->nb.p : "", p->nb.len);
            sb_puts(&args, "}");
            begin_call(p, "python");
        }
        call_args(p, args.p ? args.p : "{}", args.len);
        end_call(p);
        sb_free(&name);
        sb_free(&args);
        break;
    }
    case ST_GENERIC: generic_end(p); break;
    case ST_EXPECT:
    case ST_SEMI:
    case ST_DS_WAIT:
        break; /* the call is whole; a missing closer is forgiven */
    case ST_H_HDR:
        if (p->tent.len && !p->call_open) out_text(p, SRV_PART_CONTENT, p->tent.p, p->tent.len);
        break;
    default:
        /* inside a call */
        if (p->call_open) {
            if (p->st == ST_ARGS && !p->js_started) call_args(p, "{}", 2);
            (void)complete;
            end_call(p);
        } else if (p->tent.len) {
            out_text(p, SRV_PART_CONTENT, p->tent.p, p->tent.len);
        }
        break;
    }
    sb_clear(&p->tent);
    if (p->wsh.len && p->n_calls == 0 && p->wsh_kind == SRV_PART_CONTENT)
        ob_put(p, SRV_PART_CONTENT, p->wsh.p, p->wsh.len);
    sb_clear(&p->wsh);
    end_call(p);
    flush(p);
    p->st = ST_TEXT;
}

int srv_tfp_n_calls(const struct srv_tfp *p) { return p ? p->n_calls : 0; }

/* ---------------------------------------------------------------------- */
/* detection */

static bool has(const char *s, const char *m) { return strstr(s, m) != NULL; }

void srv_outfmt_detect(const char *t, struct srv_outfmt *out) {
    *out = (struct srv_outfmt){.tool_format = SRV_TOOLFMT_JSON, .reasoning_format = SRV_REASONING_NONE};
    if (!t || !*t) return;
    enum srv_toolfmt f = SRV_TOOLFMT_JSON;
    if (has(t, "<|channel|>")) f = SRV_TOOLFMT_HARMONY;
    else if (has(t, "tool\xe2\x96\x81" "calls\xe2\x96\x81" "begin"))
        f = has(t, "```json") ? SRV_TOOLFMT_DEEPSEEK_R1 : SRV_TOOLFMT_DEEPSEEK_V3;
    else if (has(t, "[TOOL_CALLS]")) f = SRV_TOOLFMT_MISTRAL;
    else if (has(t, "<|tool_call|>")) f = SRV_TOOLFMT_GRANITE;
    else if (has(t, "<|START_ACTION|>") || (has(t, "Action:") && has(t, "```json")))
        f = SRV_TOOLFMT_COMMAND_R;
    else if ((has(t, ">>>") && has(t, "all")) || (has(t, "<function=") && has(t, "<|python_tag|>")))
        f = SRV_TOOLFMT_FUNCTIONARY;
    else if (has(t, "<tool_call>") && !has(t, "<function=") && !has(t, "<arg_key>"))
        f = SRV_TOOLFMT_HERMES;
    else if (has(t, "<|python_tag|>") ||
             (has(t, "<|start_header_id|>") && has(t, "\"parameters\"") && has(t, "tools")))
        f = SRV_TOOLFMT_LLAMA3;
    else if (has(t, "tools") || has(t, "tool_calls"))
        f = SRV_TOOLFMT_GENERIC;
    out->tool_format = f;
    if (f == SRV_TOOLFMT_HARMONY) out->reasoning_format = SRV_REASONING_HARMONY;
    else if (has(t, "</think>") || has(t, "<|END_THINKING|>") || has(t, "[/THINK]"))
        out->reasoning_format = SRV_REASONING_THINK;
}

const char *srv_toolfmt_name(enum srv_toolfmt f) {
    static const char *const n[SRV_TOOLFMT_COUNT] = {
        "json", "hermes", "llama3", "mistral", "harmony", "deepseek_r1", "deepseek_v3",
        "granite", "command_r", "functionary", "generic"};
    return (unsigned)f < SRV_TOOLFMT_COUNT ? n[f] : "unknown";
}

const char *srv_reasoningfmt_name(enum srv_reasoningfmt f) {
    static const char *const n[SRV_REASONING_COUNT] = {"none", "think", "harmony"};
    return (unsigned)f < SRV_REASONING_COUNT ? n[f] : "unknown";
}
