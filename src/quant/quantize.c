/*
 * quantize.c - anvil_quantize: copy a GGUF file, converting its weight
 * matrices to another type with the reference quant routines.
 *
 * Rules (compare llama.cpp src/llama-quant.cpp):
 *   - every tensor with two or more non-trivial dims (ggml_n_dims >= 2),
 *     the token embedding included, becomes the target type, requantized
 *     from f32 (dequantize source row -> kn_quantize_row); a tensor already
 *     of the target type is copied byte for byte. A matrix whose row length
 *     is not a multiple of the target block keeps its type.
 *   - 1-D tensors (norms, biases) become F32 (exact from any source type).
 *   - metadata is copied in order; general.file_type is set to the
 *     llama.cpp ftype of the target and general.quantization_version to 2,
 *     as llama-quantize does (added when missing).
 *   - alignment: the input's general.alignment (default 32) is kept.
 *   - except the lm_head: for Q4_0/Q4_1 targets, output.weight - or the
 *     token embedding when the output is tied to it - becomes Q8_0. llama.cpp
 *     keeps this matrix at higher precision too (Q6_K today, Q8_0 in the
 *     versions that made the shipped SmolLM2 Q4_1 file); anvil does not read
 *     Q6_K, so Q8_0. Measured on SmolLM2-135M: with a Q4_0 lm_head the
 *     greedy answer to "The capital of France is" stops being " Paris".
 *
 * The output is written to OUT.tmp and renamed over OUT only when complete,
 * so OUT is never half-written; on failure OUT.tmp is removed.
 *
 * Layering: quantizing is a tool above both the file format (gguf/) and
 * the block formats (kernels/quant.h), so it has its own module and
 * neither of those depends on it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "kernels/quant.h"

/* llama.cpp enum llama_ftype values */
static int ftype_of(int type) {
    switch (type) {
    case ANVIL_TYPE_F32: return 0;
    case ANVIL_TYPE_F16: return 1;
    case ANVIL_TYPE_Q4_0: return 2;
    case ANVIL_TYPE_Q4_1: return 3;
    case ANVIL_TYPE_Q8_0: return 7;
    case ANVIL_TYPE_BF16: return 32;
    default: return -1;
    }
}

static uint32_t eff_dims(const struct gguf_tensor *t) {
    uint32_t n = t->n_dims;
    while (n > 1 && t->ne[n - 1] == 1) n--;
    return n;
}

static int out_type(const struct gguf_tensor *t, int target, bool is_lm_head) {
    if (eff_dims(t) < 2) return ANVIL_TYPE_F32;
    if (is_lm_head && (target == ANVIL_TYPE_Q4_0 || target == ANVIL_TYPE_Q4_1))
        target = ANVIL_TYPE_Q8_0;
    uint32_t blck;
    gguf_type_block(target, &blck, NULL);
    return t->ne[0] % blck == 0 ? target : t->type;
}

anvil_status anvil_quantize(const char *in, const char *out, int type, anvil_progress_fn progress,
                            void *user, char *err, size_t err_cap) {
    anvil_status st = ANVIL_OK;
    struct gguf_file *f = NULL;
    struct gguf_wr w = {0};
    char *tmp = NULL;
    int *types = NULL;
    uint64_t *offs = NULL;
    float *row = NULL;
    uint8_t *qrow = NULL;
    bool tmp_made = false;
    char gerr[ANVIL_ERRMSG_CAP];

    if (!in || !out) {
        errmsg_set(err, err_cap, "quantize: input and output paths are required");
        return ANVIL_ERR_INVALID;
    }
    if (type != ANVIL_TYPE_Q8_0 && type != ANVIL_TYPE_Q4_0 && type != ANVIL_TYPE_Q4_1 &&
        type != ANVIL_TYPE_F16 && type != ANVIL_TYPE_BF16) {
        errmsg_set(err, err_cap, "quantize: type %d (%s) is not a target (choose Q8_0, Q4_0, "
                   "Q4_1, F16 or BF16)", type, anvil_type_name(type) ? anvil_type_name(type) : "?");
        return ANVIL_ERR_INVALID;
    }
    st = gguf_open(in, &f, gerr, sizeof(gerr));
    if (st != ANVIL_OK) {
        errmsg_set(err, err_cap, "%s", gerr);
        return st;
    }

    /* plan: output type, offset and the largest row of every tensor */
    uint64_t n = f->n_tensors, off = 0, max_ne0 = 0, max_row = 0;
    types = anvil_calloc(n ? (size_t)n : 1, sizeof(*types));
    offs = anvil_calloc(n ? (size_t)n : 1, sizeof(*offs));
    if (!types || !offs) goto nomem;
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        bool lm_head = !strcmp(t->name, "output.weight") ||
                       (!strcmp(t->name, "token_embd.weight") &&
                        !gguf_find_tensor(f, "output.weight"));
        types[i] = out_type(t, type, lm_head);
        offs[i] = off;
        uint64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; /* checked by gguf_open */
        uint64_t nb = gguf_row_size(types[i], t->ne[0]) * (nel / t->ne[0]);
        off += (nb + f->alignment - 1) / f->alignment * f->alignment;
        if (t->ne[0] > max_ne0) max_ne0 = t->ne[0];
        if (gguf_row_size(types[i], t->ne[0]) > max_row) max_row = gguf_row_size(types[i], t->ne[0]);
    }
    /* rows are at most a few file sizes long: bounded by gguf_open's checks */
    row = anvil_malloc_aligned((size_t)max_ne0 * sizeof(float));
    qrow = anvil_malloc_aligned((size_t)max_row + 1);
    if (!row || !qrow) goto nomem;

    size_t olen = strlen(out);
    tmp = anvil_malloc(olen + 5);
    if (!tmp) goto nomem;
    memcpy(tmp, out, olen);
    memcpy(tmp + olen, ".tmp", 5);
    TRY(gguf_wr_open(&w, tmp, err, err_cap));
    tmp_made = true;

    /* header and metadata */
    bool has_ft = gguf_find(f, "general.file_type") != NULL;
    bool has_qv = gguf_find(f, "general.quantization_version") != NULL;
    gguf_wr_header(&w, n, f->n_kv + !has_ft + !has_qv);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        if (gguf_str_eq(kv->key, "general.file_type"))
            gguf_wr_kv_u32(&w, "general.file_type", (uint32_t)ftype_of(type));
        else if (gguf_str_eq(kv->key, "general.quantization_version"))
            gguf_wr_kv_u32(&w, "general.quantization_version", 2);
        else
            gguf_wr_kv(&w, kv);
    }
    if (!has_ft) gguf_wr_kv_u32(&w, "general.file_type", (uint32_t)ftype_of(type));
    if (!has_qv) gguf_wr_kv_u32(&w, "general.quantization_version", 2);
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        gguf_wr_tensor_info(&w, t->name, t->n_dims, t->ne, types[i], offs[i]);
    }
    gguf_wr_pad(&w, f->alignment);
    uint64_t data0 = w.pos;

    /* tensor data */
    for (uint64_t i = 0; i < n && !w.err_no; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        ANVIL_ASSERT(w.pos - data0 == offs[i]);
        if (types[i] == t->type) {
            gguf_wr_bytes(&w, t->data, (size_t)t->nbytes);
        } else {
            uint64_t n_rows = t->nbytes / gguf_row_size(t->type, t->ne[0]);
            size_t in_row = gguf_row_size(t->type, t->ne[0]);
            size_t out_row = gguf_row_size(types[i], t->ne[0]);
            for (uint64_t r = 0; r < n_rows && !w.err_no; r++) {
                kn_dequantize_row(t->type, (const uint8_t *)t->data + r * in_row, row,
                                  (int64_t)t->ne[0]);
                kn_quantize_row(types[i], row, qrow, (int64_t)t->ne[0]);
                gguf_wr_bytes(&w, qrow, out_row);
            }
        }
        gguf_wr_pad(&w, f->alignment);
        if (progress) progress(user, i + 1, n);
    }
    st = gguf_wr_close(&w, err, err_cap);
    if (st != ANVIL_OK) goto fail;
    if (rename(tmp, out) != 0) {
        errmsg_set(err, err_cap, "cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
        st = ANVIL_ERR_IO;
        goto fail;
    }
    tmp_made = false;
    goto done;

nomem:
    errmsg_set(err, err_cap, "quantize: out of memory");
    st = ANVIL_ERR_NOMEM;
fail:
    if (w.fp) {
        char ignore[8];
        gguf_wr_close(&w, ignore, sizeof(ignore));
    }
    if (tmp_made) remove(tmp);
done:
    anvil_free(tmp);
    anvil_free(types);
    anvil_free(offs);
    anvil_free_aligned(row);
    anvil_free_aligned(qrow);
    gguf_close(f);
    return st;
}
