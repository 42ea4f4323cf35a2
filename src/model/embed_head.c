/*
 * embed_head.c - the rank head of a reranker, bound at load (model.c calls
 * embed_bind_head when <arch>.pooling_type is rank): cls.weight and
 * cls.bias (then tanh), cls.output.weight and cls.output.bias, as
 * llama.cpp's converter names them, copied to owned F32 arrays (they are
 * small); embed.c scores with them. A file of its own so that nothing the
 * loader calls depends on embed.c (no call circle in src/model).
 *
 * Also sentence-transformers' Dense layers after pooling (dense_2,
 * dense_3: EmbeddingGemma), bound the same way (embed_bind_dense).
 *
 * What it does not do: more than 64 classes, or a head on another row
 * than embed.c picks.
 */
#include "gguf/gguf_types.h"
#include "kernels/blocks.h"
#include "model/model.h"


/* Tensor name as an owned F32 (rows, cols) copy, or NULL when absent; a
 * tensor of the wrong shape sets err and *bad (what: the part it is of). */
static float *head_tensor(const struct anvil_model *m, const char *name, int64_t cols,
                          int64_t rows_max, int *rows, bool *bad, char *err, size_t err_cap,
                          const char *what) {
    const struct gguf_tensor *t = gguf_find_tensor(m->gguf, name);
    if (!t) return NULL;
    int64_t r = t->n_dims > 1 ? (int64_t)t->ne[1] : 1;
    if ((int64_t)t->ne[0] != cols || t->n_dims > 2 || r < 1 || r > rows_max ||
        gguf_row_size(t->type, t->ne[0]) == 0 || (t->n_dims > 1 && rows_max == 1)) {
        errmsg_set(err, err_cap, "model: tensor %s has the wrong shape for %s", name, what);
        *bad = true;
        return NULL;
    }
    size_t rb = gguf_row_size(t->type, t->ne[0]);
    if ((uint64_t)rb * (uint64_t)r > t->nbytes) {
        errmsg_set(err, err_cap, "model: tensor %s is shorter than its shape", name);
        *bad = true;
        return NULL;
    }
    float *out = core_malloc((size_t)r * (size_t)cols * sizeof(float));
    if (!out) {
        errmsg_set(err, err_cap, "model: out of memory");
        *bad = true;
        return NULL;
    }
    for (int64_t i = 0; i < r; i++)
        kn_dequantize_row(t->type, (const uint8_t *)t->data + (size_t)i * rb, out + (size_t)i * cols,
                          cols);
    if (rows) *rows = (int)r;
    return out;
}

anvil_status embed_bind_head(struct anvil_model *m, char *err, size_t err_cap) {
    int ne = m->hp.n_embd, n_out = 0, rows = 0;
    bool bad = false;
    static const char what[] = "the rank head";
    m->cls_w = head_tensor(m, "cls.weight", ne, ne, &rows, &bad, err, err_cap, what);
    if (!bad && m->cls_w && rows != ne) {
        errmsg_set(err, err_cap, "model: cls.weight must be (%d, %d)", ne, ne);
        bad = true;
    }
    if (!bad) m->cls_b = head_tensor(m, "cls.bias", ne, 1, NULL, &bad, err, err_cap, what);
    if (!bad)
        m->cls_out_w =
            head_tensor(m, "cls.output.weight", ne, 64, &n_out, &bad, err, err_cap, what);
    if (!bad && m->cls_out_w)
        m->cls_out_b = head_tensor(m, "cls.output.bias", n_out, 1, NULL, &bad, err, err_cap, what);
    if (!bad && !m->cls_w && !m->cls_out_w) {
        errmsg_set(err, err_cap,
                   "model: pooling rank needs a classification head (cls.weight or "
                   "cls.output.weight), the file has neither");
        bad = true;
    }
    if (bad) {
        embed_free_head(m);
        return ANVIL_ERR_FORMAT;
    }
    m->n_cls_out = m->cls_out_w ? n_out : ne;
    return ANVIL_OK;
}

void embed_free_head(struct anvil_model *m) {
    core_free(m->cls_w);
    core_free(m->cls_b);
    core_free(m->cls_out_w);
    core_free(m->cls_out_b);
    m->cls_w = m->cls_b = m->cls_out_w = m->cls_out_b = NULL;
    core_free(m->dense2);
    core_free(m->dense2_b);
    core_free(m->dense3);
    m->dense2 = m->dense2_b = m->dense3 = NULL;
}

anvil_status embed_bind_dense(struct anvil_model *m, char *err, size_t err_cap) {
    int ne = m->hp.n_embd, n = 0, rows = 0;
    bool bad = false;
    static const char what[] = "the Dense layers (dense_2: (n, n_embd), dense_3: (n_embd, n))";
    m->dense2 = head_tensor(m, "dense_2.weight", ne, 1 << 16, &n, &bad, err, err_cap, what);
    if (!bad && m->dense2)
        m->dense3 = head_tensor(m, "dense_3.weight", n, ne, &rows, &bad, err, err_cap, what);
    if (!bad && m->dense3)
        m->dense2_b = head_tensor(m, "dense_2.bias", n, 1, NULL, &bad, err, err_cap, what);
    if (!bad && m->dense2 && (!m->dense3 || rows != ne)) {
        errmsg_set(err, err_cap, "model: %s: dense_3.weight is %s", what,
                   m->dense3 ? "not (n_embd, n)" : "missing");
        bad = true;
    }
    if (!bad && !m->dense2 && gguf_find_tensor(m->gguf, "dense_3.weight")) {
        errmsg_set(err, err_cap, "model: dense_3.weight without dense_2.weight");
        bad = true;
    }
    if (bad) {
        embed_free_head(m);
        return ANVIL_ERR_FORMAT;
    }
    m->n_dense = m->dense2 ? n : 0;
    return ANVIL_OK;
}

