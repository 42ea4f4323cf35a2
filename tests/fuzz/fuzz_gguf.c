/*
 * fuzz_gguf.c - libFuzzer harness: bytes -> GGUF reader -> tokenizer and
 * model loaders.
 *
 * gguf_open only reads files (it maps them), so each input is written to a
 * private temporary file first. When the file opens, every metadata value
 * and every tensor extent is read back (ASan catches a read outside the
 * mapping), the lookups are checked against the tables, and the same file
 * goes through tok_load and anvil_model_load, which interpret the metadata;
 * a model that loads runs one small batch through the forward pass (ref
 * kernels, n_ctx 16), so that what the loader accepts is also safe to run.
 * Looking for: crashes, sanitizer reports, leaks, and violations of the
 * invariants gguf.h promises after a successful open.
 *
 *   make fuzz && build/fuzz/fuzz_gguf -max_total_time=60 tests/fuzz/corpus/gguf
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "gguf/gguf.h"
#include "kernels/blocks.h"
#include "tok/tok.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_path[256];
static int g_fd = -1;

static void check(bool ok, const char *what) {
    if (!ok) {
        fprintf(stderr, "fuzz_gguf: invariant broken: %s\n", what);
        abort();
    }
}

static void remove_tmp(void) {
    if (g_fd >= 0) close(g_fd);
    if (g_path[0]) unlink(g_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *dir = getenv("TMPDIR");
    snprintf(g_path, sizeof(g_path), "%s/anvil-fuzz-gguf-XXXXXX", dir && *dir ? dir : "/tmp");
    g_fd = mkstemp(g_path);
    if (g_fd < 0) {
        perror("fuzz_gguf: mkstemp");
        abort();
    }
    atexit(remove_tmp);
    if (!getenv("ANVIL_LOG")) setenv("ANVIL_LOG", "0", 1); /* loaders log their errors */
    return 0;
}

static void write_input(const uint8_t *data, size_t size) {
    check(ftruncate(g_fd, 0) == 0, "ftruncate");
    size_t off = 0;
    while (off < size) {
        ssize_t n = pwrite(g_fd, data + off, size - off, (off_t)off);
        check(n > 0, "pwrite");
        off += (size_t)n;
    }
}

/* Touch every byte of a range so ASan sees a read outside the mapping. */
static volatile uint8_t g_sink;
static void touch(const void *p, uint64_t n) {
    const uint8_t *b = p;
    uint8_t x = 0;
    for (uint64_t i = 0; i < n; i++) x ^= b[i];
    g_sink ^= x;
}

static bool inside(const struct gguf_file *f, const void *p, uint64_t n) {
    const uint8_t *b = p;
    return b >= f->map && b <= f->map + f->map_size && n <= (uint64_t)(f->map + f->map_size - b);
}

static void walk_kv(const struct gguf_file *f, const struct gguf_kv *kv) {
    check(inside(f, kv->key.ptr, kv->key.len), "key inside the mapping");
    touch(kv->key.ptr, kv->key.len);
    check((unsigned)kv->type < GGUF_VT_COUNT, "value type known");
    check(gguf_vtype_name(kv->type)[0] != '?', "value type has a name");

    /* lookup by name finds this entry (keys with a NUL cannot be looked up) */
    if (kv->key.len < 256 && !memchr(kv->key.ptr, 0, (size_t)kv->key.len)) {
        char key[256];
        memcpy(key, kv->key.ptr, (size_t)kv->key.len);
        key[kv->key.len] = '\0';
        check(gguf_find(f, key) == kv, "gguf_find returns the entry");
        uint32_t u32;
        int64_t i64;
        float f32;
        bool b;
        struct gguf_str s;
        const struct gguf_kv *arr;
        if (gguf_get_u32(f, key, &u32)) g_sink ^= (uint8_t)u32;
        if (gguf_get_i64(f, key, &i64)) g_sink ^= (uint8_t)i64;
        if (gguf_get_f32(f, key, &f32)) g_sink ^= (uint8_t)(f32 == f32);
        if (gguf_get_bool(f, key, &b)) g_sink ^= (uint8_t)b;
        if (gguf_get_str(f, key, &s)) {
            check(kv->type == GGUF_VT_STRING, "string getter on a string");
            check(inside(f, s.ptr, s.len), "string value inside the mapping");
            touch(s.ptr, s.len);
        }
        if (gguf_get_arr(f, key, kv->arr_type, &arr)) check(arr == kv, "array getter");
    }

    if (kv->type == GGUF_VT_STRING) return; /* read through gguf_get_str above */
    if (kv->type != GGUF_VT_ARRAY) {
        static const uint8_t size[GGUF_VT_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        check(inside(f, kv->data, size[kv->type]), "scalar inside the mapping");
        touch(kv->data, size[kv->type]);
        return;
    }
    check((unsigned)kv->arr_type < GGUF_VT_COUNT && kv->arr_type != GGUF_VT_ARRAY,
          "array element type");
    if (kv->arr_type == GGUF_VT_STRING) {
        check(kv->n == 0 || kv->strs != NULL, "string array decoded");
        for (uint64_t i = 0; i < kv->n; i++) {
            check(inside(f, kv->strs[i].ptr, kv->strs[i].len), "array string inside the mapping");
            touch(kv->strs[i].ptr, kv->strs[i].len);
        }
        return;
    }
    static const uint8_t size[GGUF_VT_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    check(inside(f, kv->data, kv->n * size[kv->arr_type]), "array inside the mapping");
    touch(kv->data, kv->n * size[kv->arr_type]);
}

static void walk_tensor(const struct gguf_file *f, const struct gguf_tensor *t) {
    check(t->name != NULL && t->name[0] != '\0', "tensor has a name");
    check(gguf_find_tensor(f, t->name) == t, "gguf_find_tensor returns the tensor");
    check(t->n_dims >= 1 && t->n_dims <= GGUF_MAX_DIMS, "tensor rank");
    uint32_t blck, bsz;
    check(gguf_type_block(t->type, &blck, &bsz), "tensor type supported");
    uint64_t nel = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        check(t->ne[d] >= 1, "dims >= 1");
        check(u64_mul(nel, t->ne[d], &nel), "element count fits");
    }
    check(t->ne[0] % blck == 0, "row is whole blocks");
    check(t->nbytes == nel / blck * bsz, "byte size exact");
    check(t->offset % f->alignment == 0, "data offset aligned");
    check(inside(f, t->data, t->nbytes), "tensor data inside the mapping");
    check((const uint8_t *)t->data == f->map + f->data_offset + t->offset, "data pointer");
    if (t->nbytes) { /* first and last byte: the whole range is inside */
        touch(t->data, 1);
        touch((const uint8_t *)t->data + t->nbytes - 1, 1);
    }
    check(gguf_row_size(t->type, t->ne[0]) == t->ne[0] / blck * bsz, "row size");
    /* the block formats on fuzzed bytes: the scale check over the whole
     * tensor, the dequantizer on its first and last rows */
    uint64_t rows = nel / t->ne[0];
    int64_t bad = kn_find_bad_scale(t->type, t->data, (int64_t)rows, (int64_t)t->ne[0],
                                    gguf_row_size(t->type, t->ne[0]));
    check(bad >= -1 && bad < (int64_t)(nel / blck), "bad scale index inside the tensor");
    if (t->ne[0] <= 65536) {
        float *row = core_malloc((size_t)t->ne[0] * sizeof(float));
        if (row) {
            size_t rb = gguf_row_size(t->type, t->ne[0]);
            kn_dequantize_row(t->type, t->data, row, (int64_t)t->ne[0]);
            kn_dequantize_row(t->type, (const uint8_t *)t->data + (rows - 1) * rb, row, (int64_t)t->ne[0]);
            touch(row, (uint64_t)t->ne[0] * sizeof(float));
            core_free(row);
        }
    }
}

/* Tokenize a prompt and decode it in one batch; the values may be anything
 * (the weights are fuzzed), the point is that nothing reads out of bounds. */
static void run_model(struct anvil_model *m, int32_t n_vocab) {
    struct anvil_ctx_params cp = anvil_ctx_default_params();
    cp.n_ctx = 16;
    cp.n_batch = 16;
    cp.n_threads = 1;
    struct anvil_ctx *c = NULL;
    if (anvil_ctx_init(m, &cp, &c, NULL, 0) != ANVIL_OK) return;
    anvil_token tok[8];
    int32_t pos[8], seq[8];
    int32_t n = anvil_tokenize(m, "Hi there", 8, tok, 8, true, false);
    if (n <= 0) {
        tok[0] = n_vocab - 1;
        n = 1;
    }
    for (int32_t i = 0; i < n; i++) {
        check(tok[i] >= 0 && tok[i] < n_vocab, "token id in the vocabulary");
        pos[i] = i;
        seq[i] = 0;
    }
    struct anvil_batch b = {.n_tokens = n, .token = tok, .pos = pos, .seq_id = seq};
    if (anvil_decode(c, &b) == ANVIL_OK) {
        const float *logits = anvil_get_logits(c, 0);
        check(logits != NULL, "logits of the last row");
        touch(logits, (uint64_t)n_vocab * sizeof(float));
    }
    anvil_ctx_free(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    write_input(data, size);
    char err[256] = "";
    struct gguf_file *f = NULL;
    int64_t live0 = core_alloc_live();
    anvil_status st = gguf_open(g_path, &f, err, sizeof(err));
    if (st != ANVIL_OK) {
        check(f == NULL, "out untouched on failure");
        check(err[0] != '\0', "failure has a message");
        check(st == ANVIL_ERR_FORMAT || st == ANVIL_ERR_UNSUPPORTED || st == ANVIL_ERR_NOMEM ||
                  st == ANVIL_ERR_IO,
              "failure status");
        check(core_alloc_live() == live0, "nothing left allocated after a failed open");
        return 0;
    }
    check(f->version == 2 || f->version == 3, "version");
    check(f->alignment && (f->alignment & (f->alignment - 1)) == 0, "alignment power of two");
    check(f->data_offset <= f->map_size, "data section inside the file");
    for (uint64_t i = 0; i < f->n_kv; i++) walk_kv(f, &f->kv[i]);
    for (uint64_t i = 0; i < f->n_tensors; i++) walk_tensor(f, &f->tensors[i]);

    /* the metadata interpreters on top of the reader */
    struct tok_vocab *v = NULL;
    if (tok_load(f, &v, err, sizeof(err)) == ANVIL_OK) {
        static const char text[] = "Hello, world! <|im_start|>user\n\xc3\xa9\xe2\x82\xac 123";
        anvil_token ids[64];
        int32_t n = tok_encode(v, text, sizeof(text) - 1, ids, 64, true, true);
        check(n != INT32_MIN, "tok_encode works on a loaded vocab");
        for (int32_t i = 0; i < n && i < 64; i++) {
            char piece[64];
            tok_piece(v, ids[i], piece, sizeof(piece), true);
        }
        tok_free(v);
    }
    gguf_close(f);

    struct anvil_model *m = NULL;
    struct anvil_model_params mp = anvil_model_default_params();
    mp.kernels = "ref";
    if (anvil_model_load(g_path, &mp, &m, err, sizeof(err)) == ANVIL_OK) {
        int32_t n_vocab = anvil_model_n_vocab(m);
        check(n_vocab > 0, "model has a vocabulary");
        run_model(m, n_vocab);
        anvil_model_free(m);
    }
    check(core_alloc_live() == live0, "nothing left allocated");
    return 0;
}
