/*
 * gguf_split.c - the split writer (gguf_split.h): plan the parts (tensors
 * in file order, a new part when the next tensor would pass max_bytes),
 * then write each as a GGUF file with the split.* keys, tensor data copied
 * from the input's mapping. What it does not do: read splits (gguf.c).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "gguf/gguf.h"
#include "gguf/gguf_split.h"
#include "gguf/gguf_write.h"

#define MAX_PARTS 99999

bool gguf_split_path(char *buf, size_t cap, const char *out, int i, int n) {
    size_t l = strlen(out);
    if (l >= 5 && !strcmp(out + l - 5, ".gguf")) l -= 5;
    int r = snprintf(buf, cap, "%.*s-%05d-of-%05d.gguf", (int)l, out, i + 1, n);
    return r > 0 && (size_t)r < cap;
}

static void kv_raw(struct gguf_wr *w, const char *key, enum gguf_vtype t, const void *v, size_t n) {
    gguf_wr_str(w, key, strlen(key));
    gguf_wr_u32(w, (uint32_t)t);
    gguf_wr_bytes(w, v, n);
}

static bool is_split_key(const struct gguf_kv *kv) {
    return kv->key.len >= 6 && !memcmp(kv->key.ptr, "split.", 6);
}

anvil_status gguf_split_write(const char *in, const char *out, uint64_t max_bytes, int *n_parts,
                              uint64_t *bytes_out, char *err, size_t err_cap) {
    anvil_status st;
    struct gguf_file *f = NULL;
    uint32_t *part_of = NULL;
    char path[4096], tmp[4112];
    int n = 0, done_parts = 0;
    uint64_t total = 0;
    if ((st = gguf_open(in, &f, err, err_cap)) != ANVIL_OK) return st;
    if (f->n_tensors == 0) {
        errmsg_set(err, err_cap, "split: '%s' has no tensors", in);
        st = ANVIL_ERR_INVALID;
        goto fail;
    }
    if (!(part_of = core_calloc((size_t)f->n_tensors, sizeof(*part_of)))) {
        errmsg_set(err, err_cap, "split: out of memory");
        st = ANVIL_ERR_NOMEM;
        goto fail;
    }
    /* plan */
    uint64_t cur = 0;
    n = 1;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        uint64_t sz = (f->tensors[i].nbytes + f->alignment - 1) / f->alignment * f->alignment;
        if (cur > 0 && cur + sz > max_bytes) {
            n++;
            cur = 0;
        }
        cur += sz;
        part_of[i] = (uint32_t)(n - 1);
    }
    if (n > MAX_PARTS) {
        errmsg_set(err, err_cap, "split: %d parts is more than %d", n, MAX_PARTS);
        st = ANVIL_ERR_INVALID;
        goto fail;
    }
    uint64_t n_meta = 0;
    for (uint64_t k = 0; k < f->n_kv; k++) n_meta += !is_split_key(&f->kv[k]);
    for (int p = 0; p < n; p++) {
        if (!gguf_split_path(path, sizeof path, out, p, n)) {
            errmsg_set(err, err_cap, "split: output path too long");
            st = ANVIL_ERR_INVALID;
            goto fail;
        }
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        struct gguf_wr w = {0};
        if ((st = gguf_wr_open(&w, tmp, err, err_cap)) != ANVIL_OK) goto fail;
        done_parts = p + 1;
        uint64_t nt = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) nt += part_of[i] == (uint32_t)p;
        gguf_wr_header(&w, nt, 3 + (p == 0 ? n_meta : 0));
        if (p == 0)
            for (uint64_t k = 0; k < f->n_kv; k++)
                if (!is_split_key(&f->kv[k])) gguf_wr_kv(&w, &f->kv[k]);
        uint16_t no = (uint16_t)p, cnt = (uint16_t)n;
        int32_t tc = (int32_t)f->n_tensors;
        kv_raw(&w, "split.no", GGUF_VT_UINT16, &no, 2);
        kv_raw(&w, "split.count", GGUF_VT_UINT16, &cnt, 2);
        kv_raw(&w, "split.tensors.count", GGUF_VT_INT32, &tc, 4);
        uint64_t off = 0;
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            if (part_of[i] != (uint32_t)p) continue;
            const struct gguf_tensor *t = &f->tensors[i];
            gguf_wr_tensor_info(&w, t->name, t->n_dims, t->ne, t->type, off);
            off += (t->nbytes + f->alignment - 1) / f->alignment * f->alignment;
        }
        gguf_wr_pad(&w, f->alignment);
        for (uint64_t i = 0; i < f->n_tensors; i++) {
            if (part_of[i] != (uint32_t)p) continue;
            gguf_wr_bytes(&w, f->tensors[i].data, (size_t)f->tensors[i].nbytes);
            gguf_wr_pad(&w, f->alignment);
        }
        total += w.pos;
        if ((st = gguf_wr_close(&w, err, err_cap)) != ANVIL_OK) goto fail;
    }
    for (int p = 0; p < n; p++) {
        gguf_split_path(path, sizeof path, out, p, n);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        if (rename(tmp, path) != 0) {
            errmsg_set(err, err_cap, "split: cannot rename '%s': %s", tmp, strerror(errno));
            st = ANVIL_ERR_IO;
            goto fail;
        }
    }
    done_parts = 0;
    if (n_parts) *n_parts = n;
    if (bytes_out) *bytes_out = total;
fail:
    for (int p = 0; p < done_parts; p++) {
        gguf_split_path(path, sizeof path, out, p, n);
        snprintf(tmp, sizeof tmp, "%s.tmp", path);
        remove(tmp);
    }
    core_free(part_of);
    gguf_close(f);
    return st;
}
