/*
 * guide.c - constraints in the engine: the compiled-constraint handle of
 * the public API, the per-model vocabulary index, and the per-request
 * choice of tokens under a constraint. guide.h says how a token is chosen
 * and why that is exact; src/constrain does the automata.
 */
#include <string.h>

#include <cjson/cJSON.h>

#include "core/core.h"
#include "engine/guide.h"

/* ---------------------------------------------------------------------- */
/* the public handle */

/* Whether the string member `key` of the calls document holds piece. */
static bool member_has(const cJSON *doc, const char *key, const char *piece, size_t k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    return cJSON_IsString(v) && memmem(v->valuestring, strlen(v->valuestring), piece, k);
}

/* The control tokens of m (no text as output) whose text occurs in the
 * calls document: a format's markers that are control tokens, allowed by
 * their text (gpt-oss's <|constrain|>, <|message|>). An end-of-generation
 * token counts only where the calls end, in the separator or the end
 * (gpt-oss's <|call|>): drawn there it ends the answer after the call,
 * while inside a call's JSON strings its text would cut the call. False
 * when out of memory. */
static bool find_specials(struct anvil_constraint *c, const struct anvil_model *m,
                          const char *text, size_t len) {
    int32_t nv = anvil_model_n_vocab(m);
    size_t used = 0, cap = 0;
    int32_t n = 0, ncap = 0;
    cJSON *doc = cJSON_ParseWithLength(text, len);
    for (int32_t t = 0; t < nv; t++) {
        char piece[128];
        if (anvil_token_to_piece(m, t, piece, sizeof(piece), false) != 0) continue;
        int32_t k = anvil_token_to_piece(m, t, piece, sizeof(piece), true);
        if (k <= 0 || k > (int32_t)sizeof(piece) || !memmem(text, len, piece, (size_t)k)) continue;
        if (anvil_token_is_eog(m, t) && !member_has(doc, "sep", piece, (size_t)k) &&
            !member_has(doc, "end", piece, (size_t)k))
            continue;
        if (n == ncap) {
            int32_t nc = ncap ? 2 * ncap : 8;
            anvil_token *ids = core_realloc(c->sp_id, (size_t)nc * sizeof(*ids));
            if (ids) c->sp_id = ids;
            int32_t *lens = ids ? core_realloc(c->sp_len, (size_t)nc * sizeof(*lens)) : NULL;
            if (!lens) goto oom;
            c->sp_len = lens;
            ncap = nc;
        }
        if (used + (size_t)k > cap) {
            size_t nc = cap ? 2 * cap : 256;
            while (nc < used + (size_t)k) nc *= 2;
            char *b = core_realloc(c->sp_text, nc);
            if (!b) goto oom;
            c->sp_text = b;
            cap = nc;
        }
        memcpy(c->sp_text + used, piece, (size_t)k);
        c->sp_id[n] = t;
        c->sp_len[n++] = k;
        used += (size_t)k;
    }
    cJSON_Delete(doc);
    if (n == 0) return true;
    if (!(c->sp_bytes = core_malloc((size_t)n * sizeof(*c->sp_bytes)))) return false;
    for (int32_t i = 0, off = 0; i < n; off += c->sp_len[i++])
        c->sp_bytes[i] = (const uint8_t *)c->sp_text + off;
    c->n_sp = n;
    return true;
oom:
    cJSON_Delete(doc);
    return false;
}

static void free_specials(struct anvil_constraint *c) {
    core_free(c->sp_id);
    core_free(c->sp_len);
    core_free(c->sp_bytes);
    core_free(c->sp_text);
}

anvil_status anvil_constraint_compile(const struct anvil_model *m, enum anvil_constraint_kind kind,
                                      const char *text, size_t len,
                                      const struct anvil_constraint_params *p,
                                      struct anvil_constraint **out, char *err, size_t err_cap) {
    if (err && err_cap) err[0] = '\0';
    if (!m || !out || (!text && len)) {
        errmsg_set(err, err_cap, "constraint: model and out are required");
        return ANVIL_ERR_INVALID;
    }
    enum cn_kind ck;
    switch (kind) {
    case ANVIL_CONSTRAINT_REGEX: ck = CN_REGEX; break;
    case ANVIL_CONSTRAINT_GBNF: ck = CN_GBNF; break;
    case ANVIL_CONSTRAINT_JSON_SCHEMA: ck = CN_JSON_SCHEMA; break;
    case ANVIL_CONSTRAINT_JSON: ck = CN_JSON; break;
    case ANVIL_CONSTRAINT_CALLS: ck = CN_CALLS; break;
    default:
        errmsg_set(err, err_cap, "constraint: unknown kind %d", (int)kind);
        return ANVIL_ERR_INVALID;
    }
    struct cn_options o = cn_default_options();
    if (p) {
        o.ws = p->compact ? CN_WS_COMPACT : CN_WS_FLEX;
        o.or_text = p->or_text;
    }
    struct anvil_constraint *c = core_calloc(1, sizeof(*c));
    if (!c) {
        errmsg_set(err, err_cap, "out of memory");
        return ANVIL_ERR_NOMEM;
    }
    anvil_status st = cn_compile(ck, text ? text : "", len, &o, &c->prog, err, err_cap);
    if (st != ANVIL_OK) {
        core_free(c);
        return st;
    }
    if (kind == ANVIL_CONSTRAINT_CALLS && !find_specials(c, m, text ? text : "", len)) {
        free_specials(c);
        cn_program_free(c->prog);
        core_free(c);
        errmsg_set(err, err_cap, "out of memory");
        return ANVIL_ERR_NOMEM;
    }
    atomic_init(&c->refs, 1);
    c->m = m;
    *out = c;
    return ANVIL_OK;
}

void guide_ref(struct anvil_constraint *c) { atomic_fetch_add(&c->refs, 1); }

struct anvil_constraint *anvil_constraint_retain(struct anvil_constraint *c) {
    if (c) guide_ref(c);
    return c;
}

void anvil_constraint_free(struct anvil_constraint *c) {
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
    cn_program_free(c->prog);
    free_specials(c);
    core_free(c);
}

bool anvil_constraint_matches(const struct anvil_constraint *c, const char *text, size_t len) {
    struct cn_state *s = NULL;
    if (!c || (!text && len) || cn_state_init(c->prog, NULL, &s) != ANVIL_OK) return false;
    bool ok = cn_advance_bytes(s, (const uint8_t *)text, len) == ANVIL_OK && cn_accepts(s);
    cn_state_free(s);
    return ok;
}

/* ---------------------------------------------------------------------- */
/* the vocabulary index */

void guide_index_init(struct guide_index *ix) {
    pthread_mutex_init(&ix->mu, NULL);
    atomic_init(&ix->v, NULL);
}

void guide_index_free(struct guide_index *ix) {
    cn_vocab_free(atomic_load(&ix->v));
    pthread_mutex_destroy(&ix->mu);
}

/* Every token's bytes as the model writes them (control tokens without
 * their text: they never spell output), end-of-generation tokens marked. */
static anvil_status build_index(const struct anvil_model *m, struct cn_vocab **out, char *err,
                                size_t err_cap) {
    int32_t n = anvil_model_n_vocab(m);
    anvil_status st = ANVIL_ERR_NOMEM;
    const uint8_t **bytes = core_calloc((size_t)n, sizeof(*bytes));
    int32_t *lens = core_calloc((size_t)n, sizeof(*lens));
    uint32_t *off = core_calloc((size_t)n + 1, sizeof(*off));
    uint8_t *kinds = core_calloc((size_t)n, 1);
    size_t cap = (size_t)1 << 16, len = 0;
    uint8_t *data = core_malloc(cap);
    if (!bytes || !lens || !off || !kinds || !data) goto fail;
    for (int32_t t = 0; t < n; t++) {
        for (;;) { /* grow until the piece fits */
            int32_t k = anvil_token_to_piece(m, t, (char *)data + len, (int32_t)(cap - len),
                                             false);
            if (k >= 0) {
                lens[t] = k;
                break;
            }
            size_t need = len + (size_t)-k, nc = cap;
            while (nc < need) nc *= 2;
            uint8_t *d = core_realloc(data, nc);
            if (!d) goto fail;
            data = d;
            cap = nc;
        }
        off[t] = (uint32_t)len;
        len += (size_t)lens[t];
        kinds[t] = anvil_token_is_eog(m, t) ? CN_TOK_EOG : lens[t] == 0 ? CN_TOK_NEVER : CN_TOK_TEXT;
    }
    for (int32_t t = 0; t < n; t++) bytes[t] = data + off[t];
    st = cn_vocab_build(n, bytes, lens, kinds, out, err, err_cap);
fail:
    if (st == ANVIL_ERR_NOMEM && err && err_cap && !err[0])
        errmsg_set(err, err_cap, "out of memory (vocabulary index)");
    core_free(bytes);
    core_free(lens);
    core_free(off);
    core_free(kinds);
    core_free(data);
    return st;
}

anvil_status guide_index_get(struct guide_index *ix, const struct anvil_model *m,
                            const struct cn_vocab **out, char *err, size_t err_cap) {
    struct cn_vocab *v = atomic_load_explicit(&ix->v, memory_order_acquire);
    if (v) {
        *out = v;
        return ANVIL_OK;
    }
    pthread_mutex_lock(&ix->mu);
    anvil_status st = ANVIL_OK;
    v = atomic_load_explicit(&ix->v, memory_order_relaxed);
    if (!v && (st = build_index(m, &v, err, err_cap)) == ANVIL_OK)
        atomic_store_explicit(&ix->v, v, memory_order_release);
    pthread_mutex_unlock(&ix->mu);
    if (st == ANVIL_OK) *out = v;
    return st;
}

/* ---------------------------------------------------------------------- */
/* per request */

anvil_status guide_req_init(struct guide_req *q, struct anvil_constraint *c,
                           const struct cn_vocab *v, char *err, size_t err_cap) {
    memset(q, 0, sizeof(*q));
    anvil_status st = cn_state_init(c->prog, v, &q->st);
    if (st == ANVIL_OK) cn_state_set_specials(q->st, c->n_sp, c->sp_id, c->sp_bytes, c->sp_len);
    if (st == ANVIL_ERR_UNSUPPORTED) {
        errmsg_set(err, err_cap, "constraint: too ambiguous to start (more than the run-time "
                   "bound of simultaneous parses)");
        return st;
    }
    if (st == ANVIL_OK && !(q->mask = core_malloc(((size_t)cn_vocab_n_vocab(v) + 7) / 8)))
        st = ANVIL_ERR_NOMEM;
    if (st != ANVIL_OK) {
        if (st == ANVIL_ERR_NOMEM) errmsg_set(err, err_cap, "out of memory");
        cn_state_free(q->st);
        memset(q, 0, sizeof(*q));
        return st;
    }
    guide_ref(c);
    q->c = c;
    q->v = v;
    return ANVIL_OK;
}

void guide_req_free(struct guide_req *q) {
    if (!q->c) return;
    cn_state_free(q->st);
    cn_state_free(q->scratch);
    core_free(q->mask);
    anvil_constraint_free(q->c);
    memset(q, 0, sizeof(*q));
}

static anvil_token choose(struct guide_req *q, struct anvil_sampler *smp, bool greedy,
                          bool penalized, const float *logits, anvil_token argmax,
                          anvil_token draft, const char **why) {
    if (greedy) {
        /* the model's own choice first: when allowed it is the answer */
        anvil_token t = penalized && logits ? anvil_sampler_sample(smp, logits, NULL) : argmax;
        if (t >= 0 && cn_allowed(q->st, t)) return t;
    }
    if (!logits) {
        *why = "the logits are not finite";
        return -1;
    }
    q->n_masks++;
    int32_t n = cn_fill_mask(q->st, q->mask);
    if (n < 0) {
        *why = "out of memory (constraint mask)";
        return -1;
    }
    if (n == 0) {
        *why = "constraint: no token of the vocabulary can continue the output here (the "
               "grammar needs text the model cannot spell, or a run-time bound of the "
               "constraint was reached)";
        return GUIDE_DEAD_END;
    }
    anvil_token t = draft >= 0 ? anvil_sampler_sample_spec(smp, logits, q->mask, draft)
                               : anvil_sampler_sample(smp, logits, q->mask);
    if (t < 0) *why = "the logits of every allowed token are not finite";
    return t;
}

anvil_token guide_choose(struct guide_req *q, struct anvil_sampler *smp, bool greedy, bool penalized,
                        const float *logits, anvil_token argmax, anvil_token draft,
                        const char **why) {
    double t0 = time_now_s();
    q->n_tokens++;
    anvil_token t = choose(q, smp, greedy, penalized, logits, argmax, draft, why);
    q->secs += time_now_s() - t0;
    return t;
}

static int32_t cut(struct guide_req *q, const anvil_token *d, int32_t n) {
    if (!q->scratch && cn_state_init(q->c->prog, q->v, &q->scratch) != ANVIL_OK) return 0;
    if (cn_state_copy(q->scratch, q->st) != ANVIL_OK) return 0;
    int32_t i = 0;
    /* an end-of-generation proposal is allowed only when the output is
     * complete, and nothing is allowed after it */
    while (i < n && cn_advance(q->scratch, d[i]) == ANVIL_OK) i++;
    return i;
}

int32_t guide_cut(struct guide_req *q, const anvil_token *d, int32_t n) {
    if (n <= 0) return 0;
    double t0 = time_now_s();
    int32_t k = cut(q, d, n);
    q->secs += time_now_s() - t0;
    return k;
}

anvil_status guide_advance(struct guide_req *q, anvil_token t) {
    double t0 = time_now_s();
    anvil_status st = cn_advance(q->st, t);
    q->secs += time_now_s() - t0;
    return st;
}

bool guide_complete(const struct guide_req *q) {
    return cn_accepts(q->st) && !cn_can_continue(q->st);
}

/* ---------------------------------------------------------------------- */
/* the thought gate */

anvil_status guide_gate_init(struct guide_gate *g, const anvil_token *end, int32_t n_end, bool open,
                             int32_t budget, const anvil_token *prefix, int32_t n_prefix,
                             char *err, size_t err_cap) {
    memset(g, 0, sizeof(*g));
    if (n_end < 0 || n_prefix < 0 || n_end > 256 || n_prefix > 256 || (n_end && !end) ||
        (n_prefix && !prefix)) {
        errmsg_set(err, err_cap, "think_end and answer_prefix take 0 to 256 tokens");
        return ANVIL_ERR_INVALID;
    }
    if (open && n_end == 0) {
        errmsg_set(err, err_cap, "think_open needs the tokens that end a thought (think_end)");
        return ANVIL_ERR_INVALID;
    }
    if (n_end + n_prefix > 0) {
        g->seq = core_malloc((size_t)(n_end + n_prefix) * sizeof(*g->seq));
        if (!g->seq) {
            errmsg_set(err, err_cap, "out of memory");
            return ANVIL_ERR_NOMEM;
        }
        if (n_end) memcpy(g->seq, end, (size_t)n_end * sizeof(*g->seq));
        if (n_prefix) memcpy(g->seq + n_end, prefix, (size_t)n_prefix * sizeof(*g->seq));
    }
    g->n_end = n_end;
    g->n_prefix = n_prefix;
    g->budget = budget;
    g->in_thought = open;
    g->n_force = n_end + n_prefix;
    /* no thought: the prefix comes first; a budget of 0: the end at once */
    g->i_force = open && budget != 0 ? g->n_force : open ? 0 : n_end;
    return ANVIL_OK;
}

void guide_gate_free(struct guide_gate *g) {
    core_free(g->seq);
    core_free(g->mask);
    memset(g, 0, sizeof(*g));
}

anvil_status guide_gate_start(struct guide_gate *g, const anvil_token *start, int32_t n_start,
                              char *err, size_t err_cap) {
    if (n_start < 0 || n_start > 16 || (n_start && !start)) {
        errmsg_set(err, err_cap, "think_start takes 0 to 16 tokens");
        return ANVIL_ERR_INVALID;
    }
    if (!n_start || g->in_thought || g->n_end == 0) return ANVIL_OK;
    memcpy(g->start, start, (size_t)n_start * sizeof(*start));
    g->n_start = n_start;
    g->deciding = g->alive_s = true;
    g->alive_p = g->n_prefix > 0;
    g->k = 0;
    return ANVIL_OK;
}

bool guide_gate_deciding(const struct guide_gate *g) { return g->deciding; }

anvil_token guide_gate_forced(const struct guide_gate *g) {
    if (g->deciding) return -1;
    return g->i_force < g->n_force ? g->seq[g->i_force] : -1;
}

bool guide_gate_active(const struct guide_gate *g) {
    return !g->deciding && !g->in_thought && g->i_force >= g->n_force;
}

bool guide_gate_for_constraint(const struct guide_gate *g, anvil_token t) {
    if (!g->deciding) return guide_gate_active(g);
    /* the first token without a prefix: the answer's unless it starts the thought */
    return g->k == 0 && !g->alive_p && t != g->start[0];
}

anvil_token guide_gate_choose(struct guide_gate *g, struct guide_req *q, struct anvil_sampler *smp,
                              const float *logits, int32_t n_vocab, const char **why) {
    /* the constraint's vocabulary and the logits' may differ in size: the
     * mask covers both */
    int32_t nv = q && cn_vocab_n_vocab(q->v) > n_vocab ? cn_vocab_n_vocab(q->v) : n_vocab;
    size_t nb = ((size_t)nv + 7) / 8;
    if (!g->mask && !(g->mask = core_malloc(nb))) {
        *why = "out of memory (thought gate)";
        return -1;
    }
    bool answer_free = g->k == 0 && !g->alive_p; /* the constraint's first token, or any */
    if (answer_free && q) {
        int32_t n = cn_fill_mask(q->st, g->mask);
        if (n < 0) {
            *why = "out of memory (constraint state)";
            return -1;
        }
        anvil_token s0 = g->start[0];
        if (s0 >= 0 && s0 < n_vocab && (g->mask[s0 / 8] >> (s0 % 8) & 1)) {
            /* the constraint itself allows the start: no choice to make */
            g->deciding = false;
            return guide_choose(q, smp, false, true, logits, -1, -1, why);
        }
    } else {
        memset(g->mask, answer_free ? 0xff : 0, nb);
    }
    anvil_token c[2] = {g->alive_s ? g->start[g->k] : -1,
                        g->alive_p && g->k < g->n_prefix ? g->seq[g->n_end + g->k] : -1};
    for (int i = 0; i < 2; i++)
        if (c[i] >= 0 && c[i] < n_vocab) g->mask[c[i] / 8] |= (uint8_t)(1u << (c[i] % 8));
    anvil_token t = anvil_sampler_sample(smp, logits, g->mask);
    if (t < 0) *why = "no token can start the answer or a thought";
    return t;
}

/* a token taken while deciding */
static void gate_decide(struct guide_gate *g, anvil_token t) {
    bool s = g->alive_s && t == g->start[g->k];
    bool pfx = g->alive_p && g->k < g->n_prefix && t == g->seq[g->n_end + g->k];
    g->k++;
    g->alive_s = s;
    g->alive_p = pfx;
    if (s && g->k == g->n_start) { /* the model opened a thought */
        g->deciding = false;
        g->in_thought = true;
        g->match = 0;
        g->n_thought = 0;
        g->i_force = g->budget != 0 ? g->n_force : 0;
        return;
    }
    if (s && (!pfx || g->k < g->n_prefix)) return; /* still the thought's start (or both) */
    /* the answer: the prefix's tokens taken so far count as forced */
    g->deciding = false;
    g->alive_s = false;
    if (pfx) g->i_force = g->n_end + g->k;
}

void guide_gate_take(struct guide_gate *g, anvil_token t) {
    if (g->deciding) {
        gate_decide(g, t);
        return;
    }
    if (g->i_force < g->n_force) {
        /* a forced token (the caller kept what guide_gate_forced said) */
        g->i_force++;
        if (g->in_thought && g->i_force >= g->n_end) g->in_thought = false;
        return;
    }
    if (!g->in_thought) return;
    g->n_thought++;
    /* the end tokens in a row; on a mismatch the token may start them
     * again (an end sequence whose own prefix repeats inside it would
     * need KMP; the families' markers are one to a few distinct tokens) */
    if (t == g->seq[g->match]) g->match++;
    else g->match = t == g->seq[0] ? 1 : 0;
    if (g->match == g->n_end) { /* the model closed its thought */
        g->in_thought = false;
        g->i_force = g->n_end; /* the prefix, if any, follows */
        return;
    }
    if (g->budget >= 0 && g->n_thought >= g->budget) {
        g->i_force = g->match; /* the rest of the end tokens, then the prefix */
        if (g->i_force >= g->n_end) g->in_thought = false;
    }
}
