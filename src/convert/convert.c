/*
 * convert.c - cv_convert: a Hugging Face checkpoint folder to GGUF.
 *
 * Steps:
 *   1. config.json: architectures[0] picks a row of ARCHS (the GGUF
 *      architecture and its quirks); the hyperparameters become the
 *      {arch}.* keys llama.cpp's convert_hf_to_gguf.py writes for it.
 *   2. the safetensors (safetensors.c) are mapped; every tensor name is
 *      mapped to its GGUF name (map_name) or the conversion stops naming
 *      it. Quirks, as llama.cpp's converter applies them:
 *        - llama/mistral/mixtral: the rows of q_proj and k_proj are
 *          permuted from the halves layout of HF's rotate_half to the
 *          adjacent pairs of GGUF's "norm" RoPE (within each head, row
 *          2j+i comes from row i*head_dim/2 + j);
 *        - gemma3: RMSNorm weights are stored as 1 + w (HF keeps w);
 *        - MoE: the experts' matrices are stacked into one 3-D tensor
 *          per layer and kind (ffn_{gate,up,down}_exps);
 *        - tied embeddings: no output.weight;
 *        - llama3 rope scaling: the rope_freqs.weight factors.
 *   3. tokenizer (cv_tok.c).
 *   4. data: 1-D tensors and MoE routers as F32, the matrices as the
 *      requested float type; a tensor whose type and layout do not change
 *      is copied from the mapping in one write (disk speed), others row
 *      by row through floats.
 *   5. a quantized type: the float file (each matrix in its source's own
 *      float type, so nothing is lost) goes through anvil_quantize, the
 *      same code and mixes as `anvil quantize`; --split-max-size: the
 *      result is cut into parts by gguf_split_write.
 * Files are written as NAME.tmp and renamed when complete.
 *
 * What it does not do: WordPiece/SentencePiece vocabularies, encoder
 * architectures (bert), granitemoe's fused expert layout, longrope.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "convert/convert.h"
#include "convert/cv_int.h"
#include "convert/safetensors.h"
#include "gguf/gguf.h"
#include "gguf/gguf_split.h"
#include "gguf/gguf_write.h"
#include "quantize/quantize_int.h"

enum {
    Q_PERMUTE = 1 << 0,   /* llama-style q/k row permutation */
    Q_NORM1 = 1 << 1,     /* gemma: norm weights + 1 */
    Q_GEMMA_NORMS = 1 << 2, /* post_attention_layernorm is a post norm */
    Q_MOE = 1 << 3,
    Q_BERT = 1 << 4,      /* encoder: BERT names, layer norms with bias, no RoPE */
    Q_XLMR = 1 << 5,      /* XLM-R: positions start at pad_token_id + 1 (rows dropped) */
    Q_RANK = 1 << 6,      /* a sequence-classification head: pooling rank */
    Q_NOMIC = 1 << 7,     /* nomic-bert: fused Wqkv, RoPE, SwiGLU fc11/fc12/fc2 */
};

struct arch_def {
    const char *hf;   /* config.json architectures[0] */
    const char *arch; /* GGUF general.architecture */
    unsigned quirks;
};

static const struct arch_def ARCHS[] = {
    {"LlamaForCausalLM", "llama", Q_PERMUTE},
    {"MistralForCausalLM", "llama", Q_PERMUTE},
    {"MixtralForCausalLM", "llama", Q_PERMUTE | Q_MOE},
    {"Qwen2ForCausalLM", "qwen2", 0},
    {"Qwen3ForCausalLM", "qwen3", 0},
    {"Qwen2MoeForCausalLM", "qwen2moe", Q_MOE},
    {"Qwen3MoeForCausalLM", "qwen3moe", Q_MOE},
    {"OlmoeForCausalLM", "olmoe", Q_MOE},
    {"Phi3ForCausalLM", "phi3", 0},
    {"Gemma3ForCausalLM", "gemma3", Q_NORM1 | Q_GEMMA_NORMS},
    {"BertModel", "bert", Q_BERT},
    {"XLMRobertaModel", "bert", Q_BERT | Q_XLMR},
    {"NomicBertModel", "nomic-bert", Q_BERT | Q_NOMIC},
    {"XLMRobertaForSequenceClassification", "bert", Q_BERT | Q_XLMR | Q_RANK},
};
#define N_ARCHS (sizeof(ARCHS) / sizeof(ARCHS[0]))

const char *cv_known_archs(void) {
    static char buf[1024];
    if (!buf[0]) {
        size_t o = 0;
        for (size_t i = 0; i < N_ARCHS; i++)
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s (%s)", i ? ", " : "",
                                  ARCHS[i].hf, ARCHS[i].arch);
    }
    return buf;
}

/* the same list short enough for a one-line error message: the stems of
 * the *ForCausalLM names, then the others */
static const char *known_short(void) {
    static char buf[512];
    size_t o = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < N_ARCHS && o < sizeof buf; i++) {
            const char *hf = ARCHS[i].hf, *sfx = strstr(hf, "ForCausalLM");
            if ((pass == 0) != (sfx != NULL)) continue;
            int l = sfx ? (int)(sfx - hf) : (int)strlen(hf);
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%.*s", o ? ", " : "", l, hf);
            if (pass == 0 && o < sizeof buf && !strstr(ARCHS[i + 1 < N_ARCHS ? i + 1 : i].hf, "ForCausalLM"))
                o += (size_t)snprintf(buf + o, sizeof buf - o, " (ForCausalLM)");
        }
    return buf;
}

/* ---------------------------------------------------------------------- */
/* config.json */

static bool cfg_num(const cJSON *c, const char *k, double *v) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(c, k);
    if (!cJSON_IsNumber(j)) return false;
    *v = j->valuedouble;
    return true;
}
static uint32_t cfg_u32(const cJSON *c, const char *k, uint32_t def) {
    double v;
    return cfg_num(c, k, &v) && v >= 0 && v < 4294967296.0 ? (uint32_t)v : def;
}

struct hp {
    uint32_t n_embd, n_layer, n_ff, n_head, n_head_kv, head_dim, n_vocab, n_ctx;
    uint32_t n_expert, n_expert_used;
    uint32_t pos_offset; /* XLM-R: position rows dropped from the front */
    bool tied;
};

/* ---------------------------------------------------------------------- */
/* output tensors */

#define MAX_SRC_NAME 160

struct otensor {
    char name[96];
    uint32_t n_dims;
    uint64_t ne[4];
    int type;
    const struct st_tensor **src; /* n_src sources: experts stacked along ne[2] */
    uint32_t n_src;
    uint32_t permute;             /* heads of the q/k permutation, 0 = none */
    bool plus_one;
    float *gen;                   /* generated F32 data (rope_freqs) */
    struct st_tensor *view;       /* owned: a row range of a source (XLM-R positions) */
    uint64_t offset, nbytes;
};

struct plan {
    struct otensor *t;
    uint32_t n, cap;
};

static struct otensor *plan_add(struct plan *p) {
    if (p->n == p->cap) {
        uint32_t nc = p->cap ? p->cap * 2 : 64;
        struct otensor *nt = core_realloc(p->t, (size_t)nc * sizeof(*nt));
        if (!nt) return NULL;
        p->t = nt;
        p->cap = nc;
    }
    struct otensor *o = &p->t[p->n++];
    memset(o, 0, sizeof(*o));
    return o;
}

static void plan_free(struct plan *p) {
    for (uint32_t i = 0; i < p->n; i++) {
        core_free(p->t[i].src);
        core_free(p->t[i].gen);
        core_free(p->t[i].view);
    }
    core_free(p->t);
}

static struct otensor *plan_find(struct plan *p, const char *name) {
    for (uint32_t i = 0; i < p->n; i++)
        if (!strcmp(p->t[i].name, name)) return &p->t[i];
    return NULL;
}

/* HF suffix (after model.layers.N.) -> GGUF suffix (after blk.N.) */
static const char *const LAYER_MAP[][2] = {
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.o_proj.bias", "attn_output.bias"},
    {"self_attn.qkv_proj.weight", "attn_qkv.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"input_layernorm.weight", "attn_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
    {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
    {"mlp.gate_up_proj.weight", "ffn_up.weight"},
    {"mlp.gate.weight", "ffn_gate_inp.weight"},
    {"block_sparse_moe.gate.weight", "ffn_gate_inp.weight"},
    {"mlp.shared_expert.gate_proj.weight", "ffn_gate_shexp.weight"},
    {"mlp.shared_expert.up_proj.weight", "ffn_up_shexp.weight"},
    {"mlp.shared_expert.down_proj.weight", "ffn_down_shexp.weight"},
    {"mlp.shared_expert_gate.weight", "ffn_gate_inp_shexp.weight"},
};

/* BERT: HF suffix after encoder.layer.N. -> blk.N. */
static const char *const BERT_LAYER_MAP[][2] = {
    {"attention.self.query.weight", "attn_q.weight"},
    {"attention.self.query.bias", "attn_q.bias"},
    {"attention.self.key.weight", "attn_k.weight"},
    {"attention.self.key.bias", "attn_k.bias"},
    {"attention.self.value.weight", "attn_v.weight"},
    {"attention.self.value.bias", "attn_v.bias"},
    {"attention.output.dense.weight", "attn_output.weight"},
    {"attention.output.dense.bias", "attn_output.bias"},
    {"attention.output.LayerNorm.weight", "attn_output_norm.weight"},
    {"attention.output.LayerNorm.bias", "attn_output_norm.bias"},
    {"intermediate.dense.weight", "ffn_up.weight"},
    {"intermediate.dense.bias", "ffn_up.bias"},
    {"output.dense.weight", "ffn_down.weight"},
    {"output.dense.bias", "ffn_down.bias"},
    {"output.LayerNorm.weight", "layer_output_norm.weight"},
    {"output.LayerNorm.bias", "layer_output_norm.bias"},
};
/* nomic-bert: HF suffix after encoder.layers.N. -> blk.N. */
static const char *const NOMIC_LAYER_MAP[][2] = {
    {"attn.Wqkv.weight", "attn_qkv.weight"},       {"attn.Wqkv.bias", "attn_qkv.bias"},
    {"attn.out_proj.weight", "attn_output.weight"}, {"attn.out_proj.bias", "attn_output.bias"},
    {"norm1.weight", "attn_output_norm.weight"},    {"norm1.bias", "attn_output_norm.bias"},
    {"mlp.fc11.weight", "ffn_up.weight"},           {"mlp.fc12.weight", "ffn_gate.weight"},
    {"mlp.fc2.weight", "ffn_down.weight"},          {"norm2.weight", "layer_output_norm.weight"},
    {"norm2.bias", "layer_output_norm.bias"},
};
static const char *const BERT_TOP_MAP[][2] = {
    {"emb_ln.weight", "token_embd_norm.weight"},
    {"emb_ln.bias", "token_embd_norm.bias"},
    {"embeddings.word_embeddings.weight", "token_embd.weight"},
    {"embeddings.position_embeddings.weight", "position_embd.weight"},
    {"embeddings.token_type_embeddings.weight", "token_types.weight"},
    {"embeddings.LayerNorm.weight", "token_embd_norm.weight"},
    {"embeddings.LayerNorm.bias", "token_embd_norm.bias"},
};

/* expert matrices: HF "<prefix>.E.<kind>.weight" -> blk.N.<gguf> */
static const char *const EXPERT_MAP[][3] = {
    {"mlp.experts.", "gate_proj.weight", "ffn_gate_exps.weight"},
    {"mlp.experts.", "up_proj.weight", "ffn_up_exps.weight"},
    {"mlp.experts.", "down_proj.weight", "ffn_down_exps.weight"},
    {"block_sparse_moe.experts.", "w1.weight", "ffn_gate_exps.weight"},
    {"block_sparse_moe.experts.", "w3.weight", "ffn_up_exps.weight"},
    {"block_sparse_moe.experts.", "w2.weight", "ffn_down_exps.weight"},
};

static bool parse_uint(const char **s, uint32_t *v) {
    const char *p = *s;
    if (*p < '0' || *p > '9') return false;
    uint64_t x = 0;
    while (*p >= '0' && *p <= '9' && x < 100000000) x = x * 10 + (uint64_t)(*p++ - '0');
    if (*p != '.') return false;
    *v = (uint32_t)x;
    *s = p + 1;
    return true;
}

static bool is_float_dtype(enum st_dtype d) {
    return d == ST_F32 || d == ST_F16 || d == ST_BF16 || d == ST_F64;
}

/* ---------------------------------------------------------------------- */
/* writing */

struct wctx {
    struct gguf_wr *w;
    float *row;
    uint8_t *obuf;
    uint64_t bytes_done, bytes_total;
    const struct cv_params *p;
    uint32_t n_out;
};

static void write_tensor(struct wctx *c, const struct otensor *o, uint32_t idx) {
    struct gguf_wr *w = c->w;
    const uint64_t ne0 = o->ne[0];
    if (o->gen) {
        gguf_wr_bytes(w, o->gen, (size_t)ne0 * 4);
    }
    /* a permuted vector (a q/k bias) permutes single elements */
    const uint64_t rlen = o->permute && o->n_dims == 1 ? 1 : ne0;
    const size_t orow = gguf_row_size(o->type, rlen);
    for (uint32_t s = 0; s < o->n_src; s++) {
        const struct st_tensor *t = o->src[s];
        const uint64_t rows = rlen ? t->n_elem / rlen : 0;
        const size_t esz = st_dtype_size(t->dtype), srow = (size_t)rlen * esz;
        const bool same = (o->type == ANVIL_TYPE_F32 && t->dtype == ST_F32) ||
                          (o->type == ANVIL_TYPE_F16 && t->dtype == ST_F16) ||
                          (o->type == ANVIL_TYPE_BF16 && t->dtype == ST_BF16);
        if (same && !o->permute && !o->plus_one) {
            gguf_wr_bytes(w, t->data, (size_t)t->nbytes);
        } else {
            const uint64_t hd = o->permute ? rows / o->permute : 0;
            for (uint64_t r = 0; r < rows && !w->err_no; r++) {
                uint64_t sr = r;
                if (o->permute) { /* out row h*hd + 2j + i <- in row h*hd + i*hd/2 + j */
                    uint64_t h = r / hd, k = r % hd, j = k / 2, i = k % 2;
                    sr = h * hd + i * (hd / 2) + j;
                }
                const uint8_t *src = t->data + sr * srow;
                if (same && !o->plus_one) {
                    gguf_wr_bytes(w, src, srow);
                    continue;
                }
                struct st_tensor view = *t;
                view.data = src;
                for (uint64_t e = 0; e < rlen; e++)
                    c->row[e] = st_get(&view, e) + (o->plus_one ? 1.0f : 0.0f);
                qt_quantize_row(o->type, c->row, c->obuf, (int64_t)rlen);
                gguf_wr_bytes(w, c->obuf, orow);
            }
        }
        c->bytes_done += t->nbytes;
    }
    gguf_wr_pad(w, 32);
    if (c->p->progress) {
        struct cv_event ev = {.tensor = idx + 1, .n_tensors = c->n_out, .name = o->name,
                              .type = o->type, .bytes_done = c->bytes_done,
                              .bytes_total = c->bytes_total};
        c->p->progress(c->p->user, &ev);
    }
}

static anvil_status tmp_name(const char *out, char **tmp) {
    size_t l = strlen(out);
    if (!(*tmp = core_malloc(l + 8))) return ANVIL_ERR_NOMEM;
    memcpy(*tmp, out, l);
    memcpy(*tmp + l, ".tmp", 5);
    return ANVIL_OK;
}

/* ---------------------------------------------------------------------- */

static int float_type_of(const char *t, bool *is_float) {
    *is_float = true;
    if (!t || !strcasecmp(t, "f16")) return ANVIL_TYPE_F16;
    if (!strcasecmp(t, "f32")) return ANVIL_TYPE_F32;
    if (!strcasecmp(t, "bf16")) return ANVIL_TYPE_BF16;
    *is_float = false;
    return -1; /* per source: F16/BF16 kept, others F32 */
}

static anvil_status map_tensors(const struct arch_def *a, const struct hp *h,
                                const struct st_set *set, struct plan *pl, int ftype, char *err,
                                size_t cap) {
    for (uint32_t i = 0; i < set->n_tensors; i++) {
        const struct st_tensor *t = &set->tensors[i];
        const char *n = t->name;
        char gname[96] = "";
        uint32_t permute = 0, layer = 0, expert = 0;
        bool is_expert = false;
        if (strstr(n, "rotary_emb.inv_freq")) continue;
        if (a->quirks & Q_BERT) {
            if (!strncmp(n, "bert.", 5)) n += 5;
            if (!strncmp(n, "roberta.", 8)) n += 8;
            static const char *const CLS_MAP[][2] = {
                {"classifier.dense.weight", "cls.weight"}, {"classifier.dense.bias", "cls.bias"},
                {"classifier.out_proj.weight", "cls.output.weight"},
                {"classifier.out_proj.bias", "cls.output.bias"}};
            for (size_t k = 0; (a->quirks & Q_RANK) && k < 4; k++)
                if (!strcmp(n, CLS_MAP[k][0])) snprintf(gname, sizeof gname, "%s", CLS_MAP[k][1]);
            /* buffers and the heads of other tasks: not part of the encoder */
            if (!strcmp(n, "embeddings.position_ids") || !strncmp(n, "pooler.", 7) ||
                !strncmp(n, "cls.", 4))
                continue;
            for (size_t k = 0; !gname[0] && k < sizeof(BERT_TOP_MAP) / sizeof(BERT_TOP_MAP[0]); k++)
                if (!strcmp(n, BERT_TOP_MAP[k][0]))
                    snprintf(gname, sizeof gname, "%s", BERT_TOP_MAP[k][1]);
            const char *s = n + 14;
            if (!gname[0] && !strncmp(n, "encoder.layer.", 14) && parse_uint(&s, &layer) &&
                layer < h->n_layer)
                for (size_t k = 0; k < sizeof(BERT_LAYER_MAP) / sizeof(BERT_LAYER_MAP[0]); k++)
                    if (!strcmp(s, BERT_LAYER_MAP[k][0]))
                        snprintf(gname, sizeof gname, "blk.%u.%s", layer, BERT_LAYER_MAP[k][1]);
            const char *s2 = n + 15;
            if (!gname[0] && (a->quirks & Q_NOMIC) && !strncmp(n, "encoder.layers.", 15) &&
                parse_uint(&s2, &layer) && layer < h->n_layer)
                for (size_t k = 0; k < sizeof(NOMIC_LAYER_MAP) / sizeof(NOMIC_LAYER_MAP[0]); k++)
                    if (!strcmp(s2, NOMIC_LAYER_MAP[k][0]))
                        snprintf(gname, sizeof gname, "blk.%u.%s", layer, NOMIC_LAYER_MAP[k][1]);
            if (!gname[0]) goto unknown;
        } else if (!strcmp(n, "model.embed_tokens.weight")) {
            snprintf(gname, sizeof gname, "token_embd.weight");
        } else if (!strcmp(n, "model.norm.weight")) {
            snprintf(gname, sizeof gname, "output_norm.weight");
        } else if (!strcmp(n, "lm_head.weight")) {
            if (h->tied) continue;
            snprintf(gname, sizeof gname, "output.weight");
        } else if (!strncmp(n, "model.layers.", 13)) {
            const char *s = n + 13;
            if (!parse_uint(&s, &layer) || layer >= h->n_layer) goto unknown;
            for (size_t k = 0; k < sizeof(LAYER_MAP) / sizeof(LAYER_MAP[0]) && !gname[0]; k++) {
                if (strcmp(s, LAYER_MAP[k][0])) continue;
                const char *g = LAYER_MAP[k][1];
                if ((a->quirks & Q_GEMMA_NORMS) && !strcmp(s, "post_attention_layernorm.weight"))
                    g = "post_attention_norm.weight";
                snprintf(gname, sizeof gname, "blk.%u.%s", layer, g);
                if ((a->quirks & Q_PERMUTE) && !strncmp(s, "self_attn.q_proj.", 17))
                    permute = h->n_head;
                if ((a->quirks & Q_PERMUTE) && !strncmp(s, "self_attn.k_proj.", 17))
                    permute = h->n_head_kv;
            }
            for (size_t k = 0; k < sizeof(EXPERT_MAP) / sizeof(EXPERT_MAP[0]) && !gname[0]; k++) {
                size_t pl_ = strlen(EXPERT_MAP[k][0]);
                const char *q = s + pl_;
                if (strncmp(s, EXPERT_MAP[k][0], pl_) || !parse_uint(&q, &expert) ||
                    strcmp(q, EXPERT_MAP[k][1]))
                    continue;
                if (expert >= h->n_expert) goto unknown;
                snprintf(gname, sizeof gname, "blk.%u.%s", layer, EXPERT_MAP[k][2]);
                is_expert = true;
            }
            if (!gname[0]) goto unknown;
        } else {
            goto unknown;
        }
        if (!is_float_dtype(t->dtype)) {
            errmsg_set(err, cap, "convert: tensor '%s' has dtype %s; anvil convert reads "
                       "float checkpoints (F32, F16, BF16)", n, st_dtype_name(t->dtype));
            return ANVIL_ERR_UNSUPPORTED;
        }
        if (t->n_dims < 1 || t->n_dims > 2 || t->n_elem == 0) {
            errmsg_set(err, cap, "convert: tensor '%s' has %u dimensions (1 or 2 expected)", n,
                       t->n_dims);
            return ANVIL_ERR_FORMAT;
        }
        struct otensor *o = is_expert ? plan_find(pl, gname) : NULL;
        if (!o) {
            if (!(o = plan_add(pl))) return ANVIL_ERR_NOMEM;
            snprintf(o->name, sizeof o->name, "%s", gname);
            o->n_src = is_expert ? h->n_expert : 1;
            if (!(o->src = core_calloc(o->n_src, sizeof(*o->src)))) return ANVIL_ERR_NOMEM;
            if (h->pos_offset && !strcmp(gname, "position_embd.weight")) {
                /* XLM-R: rows 0..pad are never used; llama.cpp's files start at pad + 1 */
                if (t->n_dims != 2 || t->shape[0] <= h->pos_offset) {
                    errmsg_set(err, cap, "convert: %s has %llu rows, not more than pad_token_id + 1",
                               n, (unsigned long long)(t->n_dims == 2 ? t->shape[0] : 1));
                    return ANVIL_ERR_FORMAT;
                }
                if (!(o->view = core_malloc(sizeof(*o->view)))) return ANVIL_ERR_NOMEM;
                *o->view = *t;
                size_t rb = (size_t)t->shape[1] * st_dtype_size(t->dtype);
                o->view->shape[0] -= h->pos_offset;
                o->view->data += rb * h->pos_offset;
                o->view->nbytes -= (uint64_t)rb * h->pos_offset;
                o->view->n_elem -= t->shape[1] * h->pos_offset;
                t = o->view;
            }
            o->ne[0] = t->shape[t->n_dims - 1];
            o->ne[1] = t->n_dims == 2 ? t->shape[0] : 1;
            o->ne[2] = is_expert ? h->n_expert : 1;
            o->ne[3] = 1;
            o->n_dims = is_expert ? 3 : t->n_dims;
            /* a (1, n) gate vector (the shared expert's) is 1-D in GGUF */
            if (o->n_dims == 2 && o->ne[1] == 1 && strstr(gname, "ffn_gate_inp_shexp"))
                o->n_dims = 1;
            o->permute = permute;
            o->plus_one = (a->quirks & Q_NORM1) && strstr(gname, "norm.weight") != NULL;
            /* kept F32 as llama.cpp keeps them: routers, position and token-type embeddings */
            bool vec = o->n_dims == 1;
            bool router = strstr(gname, "ffn_gate_inp.weight") || !strcmp(gname, "position_embd.weight") ||
                          !strcmp(gname, "token_types.weight");
            if (vec || router || ftype == ANVIL_TYPE_F32)
                o->type = ANVIL_TYPE_F32;
            else if (ftype >= 0)
                o->type = ftype;
            else
                o->type = t->dtype == ST_F16 ? ANVIL_TYPE_F16
                          : t->dtype == ST_BF16 ? ANVIL_TYPE_BF16 : ANVIL_TYPE_F32;
            uint64_t prow = o->n_dims == 1 ? o->ne[0] : o->ne[1];
            if (permute && (prow % permute || (prow / permute) % 2)) {
                errmsg_set(err, cap, "convert: tensor '%s': %llu rows do not split into %u "
                           "heads of an even size", n, (unsigned long long)prow, permute);
                return ANVIL_ERR_FORMAT;
            }
        }
        uint32_t slot = is_expert ? expert : 0;
        if (o->src[slot]) {
            errmsg_set(err, cap, "convert: tensors '%s' and '%s' both map to %s", o->src[slot]->name,
                       n, gname);
            return ANVIL_ERR_FORMAT;
        }
        if (is_expert && (t->shape[t->n_dims - 1] != o->ne[0] ||
                          (t->n_dims == 2 ? t->shape[0] : 1) != o->ne[1])) {
            errmsg_set(err, cap, "convert: expert tensor '%s' has another shape than expert 0's", n);
            return ANVIL_ERR_FORMAT;
        }
        o->src[slot] = t;
        continue;
    unknown:
        errmsg_set(err, cap, "convert: tensor '%s' has no GGUF name for architecture %s (%s)", n,
                   a->arch, a->hf);
        return ANVIL_ERR_UNSUPPORTED;
    }
    for (uint32_t i = 0; i < pl->n; i++)
        for (uint32_t s = 0; s < pl->t[i].n_src; s++)
            if (!pl->t[i].src[s]) {
                errmsg_set(err, cap, "convert: %s: expert %u is missing from the checkpoint",
                           pl->t[i].name, s);
                return ANVIL_ERR_FORMAT;
            }
    if (!plan_find(pl, "token_embd.weight")) {
        errmsg_set(err, cap, "convert: the checkpoint has no token embeddings (%s)",
                   (a->quirks & Q_BERT) ? "embeddings.word_embeddings.weight"
                                        : "model.embed_tokens.weight");
        return ANVIL_ERR_FORMAT;
    }
    return ANVIL_OK;
}

/* The sentence-transformers pooling (modules.json names the Pooling
 * module's folder, its config.json the mode) as llama.cpp's pooling type:
 * 1 mean, 2 cls, 3 last. false when the checkpoint has none. */
static bool pooling_type(const char *dir, uint32_t *out) {
    bool missing;
    anvil_status st;
    char ignore[8];
    cJSON *mods = cv_read_json(dir, "modules.json", &missing, &st, ignore, sizeof ignore);
    const cJSON *e;
    bool found = false;
    cJSON_ArrayForEach(e, mods) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(e, "type");
        const cJSON *pa = cJSON_GetObjectItemCaseSensitive(e, "path");
        if (!cJSON_IsString(ty) || !cJSON_IsString(pa) || !strstr(ty->valuestring, "Pooling") ||
            strstr(pa->valuestring, ".."))
            continue;
        char sub[512];
        snprintf(sub, sizeof sub, "%s/config.json", pa->valuestring);
        cJSON *pc = cv_read_json(dir, sub, &missing, &st, ignore, sizeof ignore);
        static const struct { const char *key; uint32_t type; } modes[] = {
            {"pooling_mode_mean_tokens", 1}, {"pooling_mode_cls_token", 2},
            {"pooling_mode_lasttoken", 3}};
        for (size_t k = 0; k < 3 && !found; k++)
            if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pc, modes[k].key))) {
                *out = modes[k].type;
                found = true;
            }
        cJSON_Delete(pc);
        break;
    }
    cJSON_Delete(mods);
    return found;
}

/* llama.cpp's rope_freqs for rope_scaling.rope_type "llama3" */
static anvil_status llama3_freqs(const cJSON *rs, const struct hp *h, double theta, uint32_t n_rot,
                                 struct plan *pl) {
    double factor = 8.0, lo = 1.0, hi = 4.0, old = 8192.0;
    cfg_num(rs, "factor", &factor);
    cfg_num(rs, "low_freq_factor", &lo);
    cfg_num(rs, "high_freq_factor", &hi);
    cfg_num(rs, "original_max_position_embeddings", &old);
    (void)h;
    struct otensor *o = plan_add(pl);
    if (!o || !(o->gen = core_malloc((size_t)(n_rot / 2) * sizeof(float)))) return ANVIL_ERR_NOMEM;
    snprintf(o->name, sizeof o->name, "rope_freqs.weight");
    o->n_dims = 1;
    o->ne[0] = n_rot / 2, o->ne[1] = o->ne[2] = o->ne[3] = 1;
    o->type = ANVIL_TYPE_F32;
    double lo_wl = old / lo, hi_wl = old / hi;
    for (uint32_t i = 0; i < n_rot / 2; i++) {
        double freq = 1.0 / pow(theta, 2.0 * i / n_rot), wl = 2.0 * 3.14159265358979323846 / freq, f;
        if (wl < hi_wl)
            f = 1.0;
        else if (wl > lo_wl)
            f = factor;
        else {
            double sm = (old / wl - lo) / (hi - lo);
            f = 1.0 / ((1.0 - sm) / factor + sm);
        }
        o->gen[i] = (float)f;
    }
    return ANVIL_OK;
}

static anvil_status write_file(const char *path, struct kvbuf *kb, struct plan *pl,
                               const struct cv_params *p, uint64_t bytes_total, char *err,
                               size_t cap) {
    anvil_status st;
    struct gguf_wr w = {0};
    struct wctx c = {.w = &w, .p = p, .n_out = pl->n, .bytes_total = bytes_total};
    uint64_t max_ne0 = 1, off = 0;
    for (uint32_t i = 0; i < pl->n; i++) {
        struct otensor *o = &pl->t[i];
        uint64_t nel = o->ne[0] * o->ne[1] * o->ne[2] * o->ne[3];
        o->nbytes = gguf_row_size(o->type, o->ne[0]) * (nel / o->ne[0]);
        o->offset = off;
        off += (o->nbytes + 31) / 32 * 32;
        if (o->ne[0] > max_ne0) max_ne0 = o->ne[0];
    }
    c.row = core_malloc((size_t)max_ne0 * sizeof(float));
    c.obuf = core_malloc((size_t)max_ne0 * sizeof(float));
    if (!c.row || !c.obuf) {
        st = ANVIL_ERR_NOMEM;
        errmsg_set(err, cap, "convert: out of memory");
        goto done;
    }
    if ((st = gguf_wr_open(&w, path, err, cap)) != ANVIL_OK) goto done;
    gguf_wr_header(&w, pl->n, kb->count);
    gguf_wr_bytes(&w, kb->p, kb->n);
    for (uint32_t i = 0; i < pl->n; i++)
        gguf_wr_tensor_info(&w, pl->t[i].name, pl->t[i].n_dims, pl->t[i].ne, pl->t[i].type,
                            pl->t[i].offset);
    gguf_wr_pad(&w, 32);
    for (uint32_t i = 0; i < pl->n && !w.err_no; i++) write_tensor(&c, &pl->t[i], i);
    st = gguf_wr_close(&w, err, cap);
    if (st != ANVIL_OK) remove(path);
done:
    core_free(c.row);
    core_free(c.obuf);
    return st;
}

anvil_status cv_convert(const char *dir, const char *out, const struct cv_params *p,
                        struct cv_stats *stats, char *err, size_t err_cap) {
    anvil_status st = ANVIL_OK;
    cJSON *cfg = NULL;
    struct st_set *set = NULL;
    struct kvbuf kb = {0};
    struct plan pl = {0};
    char *tmp = NULL, *tmpq = NULL;
    const char *final_src = NULL;
    bool missing;
    struct cv_stats sx = {0};
    char key[128];

    if (!dir || !out || !p) return ANVIL_ERR_INVALID;
    bool is_float;
    int ftype = float_type_of(p->type, &is_float);
    if (!is_float && !qt_mix_find(p->type)) {
        errmsg_set(err, err_cap, "convert: unknown --type '%s' (f32, f16, bf16, or a type of "
                   "`anvil quantize`: %s)", p->type, qt_mix_names());
        return ANVIL_ERR_INVALID;
    }
    cfg = cv_read_json(dir, "config.json", &missing, &st, err, err_cap);
    if (missing) {
        errmsg_set(err, err_cap, "convert: %s/config.json is missing (is '%s' a Hugging Face "
                   "checkpoint folder?)", dir, dir);
        return ANVIL_ERR_FORMAT;
    }
    if (!cfg) return st;
    const cJSON *archs = cJSON_GetObjectItemCaseSensitive(cfg, "architectures");
    const cJSON *a0 = cJSON_GetArrayItem(archs, 0);
    const struct arch_def *a = NULL;
    for (size_t i = 0; cJSON_IsString(a0) && i < N_ARCHS; i++)
        if (!strcmp(a0->valuestring, ARCHS[i].hf)) a = &ARCHS[i];
    if (!a) {
        errmsg_set(err, err_cap, "convert: architecture '%s' is not one anvil converts; it knows %s",
                   cJSON_IsString(a0) ? a0->valuestring : "(config.json has no architectures)",
                   known_short());
        st = ANVIL_ERR_UNSUPPORTED;
        goto fail;
    }
    sx.arch = a->arch;

    /* hyperparameters */
    struct hp h = {0};
    h.n_embd = cfg_u32(cfg, "hidden_size", cfg_u32(cfg, "n_embd", 0));
    h.n_layer = cfg_u32(cfg, "num_hidden_layers", cfg_u32(cfg, "n_layer", 0));
    h.n_ff = cfg_u32(cfg, "intermediate_size", cfg_u32(cfg, "n_inner", 0));
    h.n_head = cfg_u32(cfg, "num_attention_heads", cfg_u32(cfg, "n_head", 0));
    h.n_head_kv = cfg_u32(cfg, "num_key_value_heads", h.n_head);
    h.n_vocab = cfg_u32(cfg, "vocab_size", 0);
    h.n_ctx = cfg_u32(cfg, "max_position_embeddings", cfg_u32(cfg, "n_positions", 4096));
    /* nomic-embed-text v1/v1.5: 8192 positions in config, trained for 2048 (as llama.cpp) */
    if ((a->quirks & Q_NOMIC) && h.n_ctx == 8192 && cfg_u32(cfg, "max_trained_positions", 2048) == 2048)
        h.n_ctx = 2048;
    if (a->quirks & Q_XLMR) {
        double pad;
        if (cfg_num(cfg, "pad_token_id", &pad) && pad >= 0 && pad < 1e6) {
            h.pos_offset = (uint32_t)pad + 1;
            h.n_ctx = h.n_ctx > h.pos_offset ? h.n_ctx - h.pos_offset : 0;
        }
    }
    h.n_expert = cfg_u32(cfg, "num_local_experts", cfg_u32(cfg, "num_experts", 0));
    h.n_expert_used = cfg_u32(cfg, "num_experts_per_tok", 0);
    const cJSON *tie = cJSON_GetObjectItemCaseSensitive(cfg, "tie_word_embeddings");
    h.tied = cJSON_IsBool(tie) ? cJSON_IsTrue(tie) : !strcmp(a->arch, "gemma3");
    if (!h.n_embd || !h.n_layer || !h.n_head || !h.n_head_kv || h.n_layer > 100000 ||
        h.n_head > 100000 || h.n_embd % h.n_head || h.n_head % h.n_head_kv) {
        errmsg_set(err, err_cap, "convert: config.json: hidden_size, num_hidden_layers and "
                   "num_attention_heads must be positive, and the heads divide evenly");
        st = ANVIL_ERR_FORMAT;
        goto fail;
    }
    if ((a->quirks & Q_MOE) && (!h.n_expert || !h.n_expert_used || h.n_expert > 4096)) {
        errmsg_set(err, err_cap, "convert: config.json: a MoE model needs num_experts / "
                   "num_local_experts and num_experts_per_tok");
        st = ANVIL_ERR_FORMAT;
        goto fail;
    }
    h.head_dim = cfg_u32(cfg, "head_dim", h.n_embd / h.n_head);
    double theta = 10000.0, eps = 1e-5, v;
    cfg_num(cfg, "rope_theta", &theta);
    if (!cfg_num(cfg, "rms_norm_eps", &eps) && !cfg_num(cfg, "layer_norm_eps", &eps))
        cfg_num(cfg, "layer_norm_epsilon", &eps);
    cfg_num(cfg, "rotary_emb_base", &theta);
    uint32_t n_rot = h.head_dim;
    if (cfg_num(cfg, "partial_rotary_factor", &v) && v > 0 && v <= 1)
        n_rot = (uint32_t)(v * h.n_embd) / h.n_head;

    /* general and arch keys */
    const char *ar = a->arch;
    kb_str(&kb, "general.architecture", ar, strlen(ar));
    const char *base = strrchr(dir, '/');
    base = base && base[1] ? base + 1 : dir;
    kb_str(&kb, "general.name", base, strlen(base));
#define AK(suffix) (snprintf(key, sizeof key, "%s." suffix, ar), key)
    kb_u32(&kb, AK("context_length"), h.n_ctx);
    kb_u32(&kb, AK("embedding_length"), h.n_embd);
    kb_u32(&kb, AK("block_count"), h.n_layer);
    if (h.n_ff) kb_u32(&kb, AK("feed_forward_length"), h.n_ff);
    kb_u32(&kb, AK("attention.head_count"), h.n_head);
    kb_u32(&kb, AK("attention.head_count_kv"), h.n_head_kv);
    if (a->quirks & Q_BERT) {
        kb_f32(&kb, AK("attention.layer_norm_epsilon"), (float)eps);
        kb_bool(&kb, AK("attention.causal"), false);
        if (a->quirks & Q_NOMIC) kb_f32(&kb, AK("rope.freq_base"), (float)theta);
    } else {
        kb_f32(&kb, AK("rope.freq_base"), (float)theta);
        kb_f32(&kb, AK("attention.layer_norm_rms_epsilon"), (float)eps);
    }
    uint32_t pooling;
    if (a->quirks & Q_RANK)
        kb_u32(&kb, AK("pooling_type"), 4); /* rank: the classifier scores the pair */
    else if (pooling_type(dir, &pooling))
        kb_u32(&kb, AK("pooling_type"), pooling);
    else if (a->quirks & Q_NOMIC)
        kb_u32(&kb, AK("pooling_type"), 1); /* nomic-embed-text pools by mean */
    if (h.head_dim != h.n_embd / h.n_head) {
        kb_u32(&kb, AK("attention.key_length"), h.head_dim);
        kb_u32(&kb, AK("attention.value_length"), h.head_dim);
    }
    if (!(a->quirks & Q_BERT) && (n_rot != h.head_dim || !strcmp(ar, "llama"))) kb_u32(&kb, AK("rope.dimension_count"), n_rot);
    if (h.n_vocab) kb_u32(&kb, AK("vocab_size"), h.n_vocab);
    if (a->quirks & Q_MOE) {
        kb_u32(&kb, AK("expert_count"), h.n_expert);
        kb_u32(&kb, AK("expert_used_count"), h.n_expert_used);
        uint32_t fe = cfg_u32(cfg, "moe_intermediate_size", 0);
        if (fe) kb_u32(&kb, AK("expert_feed_forward_length"), fe);
        uint32_t fs = cfg_u32(cfg, "shared_expert_intermediate_size", 0);
        if (fs) kb_u32(&kb, AK("expert_shared_feed_forward_length"), fs);
        const cJSON *nt = cJSON_GetObjectItemCaseSensitive(cfg, "norm_topk_prob");
        if (cJSON_IsBool(nt)) kb_bool(&kb, AK("expert_weights_norm"), cJSON_IsTrue(nt));
    }
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(cfg, "sliding_window");
    const cJSON *usw = cJSON_GetObjectItemCaseSensitive(cfg, "use_sliding_window");
    if (cJSON_IsNumber(sw) && sw->valuedouble > 0 && !cJSON_IsFalse(usw) &&
        sw->valuedouble < h.n_ctx)
        kb_u32(&kb, AK("attention.sliding_window"), (uint32_t)sw->valuedouble);
    if (!strcmp(ar, "gemma3") && cfg_num(cfg, "rope_local_base_freq", &v))
        kb_f32(&kb, AK("rope.freq_base_swa"), (float)v);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(cfg, "rope_scaling");
    const cJSON *rt = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!cJSON_IsString(rt)) rt = cJSON_GetObjectItemCaseSensitive(rs, "type");
    bool llama3_rope = false;
    if (cJSON_IsString(rt)) {
        double f = 1.0;
        cfg_num(rs, "factor", &f);
        if (!strcmp(rt->valuestring, "linear") || !strcmp(rt->valuestring, "yarn")) {
            kb_str(&kb, AK("rope.scaling.type"), rt->valuestring, strlen(rt->valuestring));
            kb_f32(&kb, AK("rope.scaling.factor"), (float)f);
            if (cfg_num(rs, "original_max_position_embeddings", &v))
                kb_u32(&kb, AK("rope.scaling.original_context_length"), (uint32_t)v);
        } else if (!strcmp(rt->valuestring, "llama3")) {
            llama3_rope = true;
        } else if (strcmp(rt->valuestring, "default")) {
            errmsg_set(err, err_cap, "convert: rope_scaling type '%s' is not converted yet",
                       rt->valuestring);
            st = ANVIL_ERR_UNSUPPORTED;
            goto fail;
        }
    }
#undef AK
    kb_u32(&kb, "general.file_type", ftype == ANVIL_TYPE_F32 ? 0 : ftype == ANVIL_TYPE_BF16 ? 32 : 1);
    kb_u32(&kb, "general.quantization_version", 2);

    /* tokenizer, then the tensors */
    TRY(cv_tokenizer(dir, cfg, h.n_vocab, &kb, sx.pre, err, err_cap));
    if (kb.oom) goto nomem;
    TRY(st_open_dir(dir, &set, err, err_cap));
    TRY(map_tensors(a, &h, set, &pl, ftype, err, err_cap));
    if (llama3_rope) TRY(llama3_freqs(rs, &h, theta, n_rot, &pl));

    /* write: the float file, then quantize and split as asked */
    sx.n_tensors = pl.n;
    sx.bytes_in = set->total_bytes;
    TRY(tmp_name(out, &tmp));
    TRY(write_file(tmp, &kb, &pl, p, set->total_bytes, err, err_cap));
    final_src = tmp;
    st_close(set);
    set = NULL;
    if (!is_float) {
        TRY(tmp_name(tmp, &tmpq));
        struct anvil_quantize_params qp = {.type = p->type, .n_threads = p->n_threads,
                                           .progress = p->qprogress, .user = p->user};
        st = anvil_quantize(tmp, tmpq, &qp, NULL, err, err_cap);
        remove(tmp);
        if (st != ANVIL_OK) goto fail;
        final_src = tmpq;
    }
    if (p->split_max) {
        st = gguf_split_write(final_src, out, p->split_max, &sx.n_parts, &sx.bytes_out, err,
                              err_cap);
        remove(final_src);
        if (st != ANVIL_OK) goto fail;
    } else {
        if (rename(final_src, out) != 0) {
            errmsg_set(err, err_cap, "convert: cannot rename '%s' to '%s': %s", final_src, out,
                       strerror(errno));
            remove(final_src);
            st = ANVIL_ERR_IO;
            goto fail;
        }
        struct gguf_file *chk = NULL;
        sx.n_parts = 1;
        if (gguf_open(out, &chk, err, err_cap) == ANVIL_OK) sx.bytes_out = chk->map_size;
        gguf_close(chk);
    }
    if (stats) *stats = sx;
    goto done;
nomem:
    errmsg_set(err, err_cap, "convert: out of memory");
    st = ANVIL_ERR_NOMEM;
fail:
    if (tmp) remove(tmp);
done:
    core_free(tmp);
    core_free(tmpq);
    plan_free(&pl);
    kb_free(&kb);
    st_close(set);
    cJSON_Delete(cfg);
    return st;
}
