/*
 * quantize.c - anvil_quantize: copy a GGUF file, converting its weight
 * matrices to the types a mix chooses (mix.c) with the searched row
 * quantizers (blocks32.c, kquants.c; Q8_0/Q4_0/Q4_1 and the float types
 * with the reference conversions of kernels/cpu/ref).
 *
 * The writer loop:
 *   - plan: the output type of every tensor (mix.c), checked against its
 *     source: converting a quantized tensor to a type with more bits per
 *     weight is refused (the lost precision does not come back, and the
 *     file would only grow: quantize from F16/F32);
 *   - header: metadata copied in order; general.file_type set to the
 *     mix's llama.cpp ftype and general.quantization_version to 2, as
 *     llama-quantize does (added when missing); the input's alignment;
 *   - data, tensor by tensor in the input's order: a tensor whose type
 *     does not change is copied byte for byte; the others are converted
 *     in chunks of rows, each chunk split over the threads (every row is
 *     quantized on its own, so the bytes do not depend on the thread
 *     count), and a row holding NaN or infinity stops the run with an
 *     error naming the tensor.
 * The output is written to OUT.tmp and renamed over OUT only when
 * complete, so OUT is never half-written; on failure OUT.tmp is removed.
 *
 * Layering: quantizing is a tool above both the file format (gguf/) and
 * the block formats (kernels/blocks.h), so it has its own module and
 * neither of those depends on it.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/pool.h"
#include "gguf/gguf.h"
#include "gguf/gguf_write.h"
#include "kernels/blocks.h"
#include "quantize/quantize_int.h"

/* floats per chunk of rows converted between two writes (and progress
 * reports): 4 MiB of them */
#define CHUNK_ELEMS (1u << 20)

static bool is_float_type(int type) {
    return type == ANVIL_TYPE_F32 || type == ANVIL_TYPE_F16 || type == ANVIL_TYPE_BF16;
}


// ----------------------------------------------------------------------------
// one chunk of rows, split over the threads

struct job {
    const struct gguf_tensor *t;
    int type_out;
    size_t row_in, row_out;
    uint64_t r0, n_rows;   /* rows [r0, r0 + n_rows) of the tensor */
    uint8_t *out;          /* n_rows * row_out bytes */
    float **scratch;       /* one row of floats per thread */
    int64_t *bad_row;      /* per thread: first row with NaN/inf, or -1 */
};

static void convert_rows(void *arg, int ith, int nth) {
    struct job *j = arg;
    int a, b;
    pool_split((int)j->n_rows, ith, nth, 1, &a, &b);
    const int64_t ne0 = (int64_t)j->t->ne[0];
    float *x = j->scratch[ith];
    j->bad_row[ith] = -1;
    for (int r = a; r < b; r++) {
        uint64_t row = j->r0 + (uint64_t)r;
        kn_dequantize_row(j->t->type, (const uint8_t *)j->t->data + row * j->row_in, x, ne0);
        for (int64_t i = 0; i < ne0; i++)
            if (!isfinite(x[i])) {
                j->bad_row[ith] = (int64_t)row;
                return;
            }
        qt_quantize_row(j->type_out, x, j->out + (size_t)r * j->row_out, ne0);
    }
}

static void run_job(struct pool *pool, struct job *j) {
    if (pool)
        pool_run(pool, convert_rows, j);
    else
        convert_rows(j, 0, 1);
}

// ----------------------------------------------------------------------------

anvil_status anvil_quantize(const char *in, const char *out, const struct anvil_quantize_params *p,
                            struct anvil_quantize_stats *stats, char *err, size_t err_cap) {
    anvil_status st = ANVIL_OK;
    struct gguf_file *f = NULL;
    struct gguf_wr w = {0};
    struct pool *pool = NULL;
    char *tmp = NULL;
    int *types = NULL;
    uint64_t *offs = NULL;
    uint8_t *chunk = NULL;
    float **scratch = NULL;
    int64_t *bad_row = NULL;
    int nth = 0;
    bool tmp_made = false;
    char gerr[ANVIL_ERRMSG_CAP];
    struct anvil_quantize_stats sx = {0};

    if (!in || !out || !p) {
        errmsg_set(err, err_cap, "quantize: input and output paths and params are required");
        return ANVIL_ERR_INVALID;
    }
    const struct qt_mix *mix = qt_mix_find(p->type);
    if (!mix) {
        errmsg_set(err, err_cap, "quantize: unknown type '%s' (choose one of %s)",
                   p->type ? p->type : "(null)", qt_mix_names());
        return ANVIL_ERR_INVALID;
    }
    st = gguf_open(in, &f, gerr, sizeof(gerr));
    if (st != ANVIL_OK) {
        errmsg_set(err, err_cap, "%s", gerr);
        return st;
    }

    /* plan: output type and offset of every tensor, largest row, totals */
    const uint64_t n = f->n_tensors;
    types = core_calloc(n ? (size_t)n : 1, sizeof(*types));
    offs = core_calloc(n ? (size_t)n : 1, sizeof(*offs));
    if (!types || !offs) goto nomem;
    TRY(qt_mix_plan(f, mix, p->pure, types, &sx.n_fallback, err, err_cap));
    uint64_t off = 0, max_ne0 = 0, max_chunk = 0;
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const int to = types[i];
        uint64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]; /* checked by gguf_open */
        if (to != t->type) {
            if (!qt_type_get(to)) { /* a copied type the reader knows: cannot happen */
                errmsg_set(err, err_cap, "quantize: cannot write type %s", gguf_type_name_any(to));
                st = ANVIL_ERR_UNSUPPORTED;
                goto fail;
            }
            if (!is_float_type(t->type) && qt_type_get(to)->quantized &&
                gguf_type_bpw(t->type) < gguf_type_bpw(to) - 1e-9) {
                errmsg_set(err, err_cap,
                           "quantize: tensor '%s' is already quantized to %s (%.2f bits per "
                           "weight), below its target %s (%.2f): quantize from an F16 or F32 "
                           "file instead", t->name, gguf_type_name_any(t->type), gguf_type_bpw(t->type),
                           gguf_type_name_any(to), gguf_type_bpw(to));
                st = ANVIL_ERR_INVALID;
                goto fail;
            }
            sx.n_converted++;
        } else {
            sx.n_copied++;
        }
        uint64_t nb = to == t->type ? t->nbytes : gguf_row_size(to, t->ne[0]) * (nel / t->ne[0]);
        offs[i] = off;
        off += (nb + f->alignment - 1) / f->alignment * f->alignment;
        sx.bytes_in += t->nbytes;
        sx.bytes_out += nb;
        sx.n_elements += nel;
        if (to != t->type) {
            uint64_t rows = (CHUNK_ELEMS + t->ne[0] - 1) / t->ne[0];
            if (t->ne[0] > max_ne0) max_ne0 = t->ne[0];
            if (rows * gguf_row_size(to, t->ne[0]) > max_chunk)
                max_chunk = rows * gguf_row_size(to, t->ne[0]);
        }
    }

    /* workers and their buffers (rows are bounded by gguf_open's checks:
     * at most a few file sizes) */
    nth = p->n_threads > 0 ? p->n_threads : cpu_count_online();
    if (nth < 1) nth = 1;
    if (nth > 256) nth = 256;
    if (sx.n_converted == 0) nth = 1;
    if (nth > 1 && (st = pool_create(nth, &pool)) != ANVIL_OK) {
        errmsg_set(err, err_cap, "quantize: cannot start %d threads", nth);
        goto fail;
    }
    scratch = core_calloc((size_t)nth, sizeof(*scratch));
    bad_row = core_calloc((size_t)nth, sizeof(*bad_row));
    if (!scratch || !bad_row) goto nomem;
    for (int t = 0; t < nth && max_ne0; t++)
        if (!(scratch[t] = core_malloc_aligned((size_t)max_ne0 * sizeof(float)))) goto nomem;
    if (max_chunk && !(chunk = core_malloc_aligned((size_t)max_chunk))) goto nomem;

    size_t olen = strlen(out);
    tmp = core_malloc(olen + 5);
    if (!tmp) goto nomem;
    memcpy(tmp, out, olen);
    memcpy(tmp + olen, ".tmp", 5);
    TRY(gguf_wr_open(&w, tmp, err, err_cap));
    tmp_made = true;

    /* header and metadata */
    bool has_ft = gguf_find(f, "general.file_type") != NULL;
    bool has_qv = gguf_find(f, "general.quantization_version") != NULL;
    /* a split input (gguf.c opens all its parts) is written as one file:
     * its split.* keys are left out */
    uint64_t n_split_keys = 0;
    for (uint64_t i = 0; i < f->n_kv; i++)
        n_split_keys += f->kv[i].key.len >= 6 && !memcmp(f->kv[i].key.ptr, "split.", 6);
    gguf_wr_header(&w, n, f->n_kv - n_split_keys + !has_ft + !has_qv);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        if (kv->key.len >= 6 && !memcmp(kv->key.ptr, "split.", 6))
            continue;
        else if (gguf_str_eq(kv->key, "general.file_type"))
            gguf_wr_kv_u32(&w, "general.file_type", (uint32_t)mix->ftype);
        else if (gguf_str_eq(kv->key, "general.quantization_version"))
            gguf_wr_kv_u32(&w, "general.quantization_version", 2);
        else
            gguf_wr_kv(&w, kv);
    }
    if (!has_ft) gguf_wr_kv_u32(&w, "general.file_type", (uint32_t)mix->ftype);
    if (!has_qv) gguf_wr_kv_u32(&w, "general.quantization_version", 2);
    for (uint64_t i = 0; i < n; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        gguf_wr_tensor_info(&w, t->name, t->n_dims, t->ne, types[i], offs[i]);
    }
    gguf_wr_pad(&w, f->alignment);
    uint64_t data0 = w.pos;

    /* tensor data */
    struct anvil_quantize_event ev = {.n_tensors = n, .total = sx.n_elements};
    for (uint64_t i = 0; i < n && !w.err_no; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        uint64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        ANVIL_ASSERT(w.pos - data0 == offs[i]);
        ev.tensor = i + 1, ev.name = t->name, ev.type_in = t->type, ev.type_out = types[i];
        if (types[i] == t->type) {
            gguf_wr_bytes(&w, t->data, (size_t)t->nbytes);
            ev.done += nel;
            if (p->progress) p->progress(p->user, &ev);
        } else {
            struct job j = {.t = t,
                            .type_out = types[i],
                            .row_in = gguf_row_size(t->type, t->ne[0]),
                            .row_out = gguf_row_size(types[i], t->ne[0]),
                            .out = chunk,
                            .scratch = scratch,
                            .bad_row = bad_row};
            uint64_t n_rows = nel / t->ne[0];
            uint64_t per = (CHUNK_ELEMS + t->ne[0] - 1) / t->ne[0];
            for (uint64_t r = 0; r < n_rows && !w.err_no; r += per) {
                j.r0 = r;
                j.n_rows = n_rows - r < per ? n_rows - r : per;
                run_job(pool, &j);
                for (int k = 0; k < nth; k++)
                    if (bad_row[k] >= 0) {
                        errmsg_set(err, err_cap, "quantize: tensor '%s' has a NaN or infinite "
                                   "value in row %lld", t->name, (long long)bad_row[k]);
                        st = ANVIL_ERR_FORMAT;
                        goto fail;
                    }
                gguf_wr_bytes(&w, chunk, (size_t)(j.n_rows * j.row_out));
                ev.done += j.n_rows * t->ne[0];
                if (p->progress) p->progress(p->user, &ev);
            }
        }
        gguf_wr_pad(&w, f->alignment);
    }
    st = gguf_wr_close(&w, err, err_cap);
    if (st != ANVIL_OK) goto fail;
    if (rename(tmp, out) != 0) {
        errmsg_set(err, err_cap, "cannot rename '%s' to '%s': %s", tmp, out, strerror(errno));
        st = ANVIL_ERR_IO;
        goto fail;
    }
    tmp_made = false;
    if (stats) *stats = sx;
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
    pool_free(pool);
    for (int t = 0; scratch && t < nth; t++) core_free_aligned(scratch[t]);
    core_free(scratch);
    core_free(bad_row);
    core_free(tmp);
    core_free(types);
    core_free(offs);
    core_free_aligned(chunk);
    gguf_close(f);
    return st;
}
