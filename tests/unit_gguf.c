/*
 * unit_gguf.c - the GGUF reader on small images built byte by byte here:
 * the happy path (every value type, v2 and v3, custom alignment), lookups,
 * and malformed files (every truncation point, bad magic/version, absurd
 * counts/lengths/dims, bad types, offsets, overlap, duplicates, alignment),
 * plus an out-of-memory walk. Every failure must be a status code and one
 * line of text, never a crash; ASan builds check reads stay in bounds.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "gguf/gguf.h"
#include "kernels/blocks.h"

// ----------------------------------------------------------------------------
// image builder

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}
static void u8_(struct buf *b, uint8_t v) { put(b, &v, 1); }
static void u32_(struct buf *b, uint32_t v) { put(b, &v, 4); }
static void u64_(struct buf *b, uint64_t v) { put(b, &v, 8); }
static void str_(struct buf *b, const char *s) {
    u64_(b, strlen(s));
    put(b, s, strlen(s));
}
static void hdr(struct buf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    put(b, "GGUF", 4);
    u32_(b, version);
    u64_(b, n_tensors);
    u64_(b, n_kv);
}
static void kv_u32(struct buf *b, const char *key, uint32_t v) {
    str_(b, key);
    u32_(b, GGUF_VT_UINT32);
    u32_(b, v);
}
static void kv_str(struct buf *b, const char *key, const char *v) {
    str_(b, key);
    u32_(b, GGUF_VT_STRING);
    str_(b, v);
}
static void tinfo(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                  uint32_t type, uint64_t offset) {
    str_(b, name);
    u32_(b, n_dims);
    for (uint32_t i = 0; i < n_dims; i++) u64_(b, ne[i]);
    u32_(b, type);
    u64_(b, offset);
}
static void pad(struct buf *b, size_t align) {
    while (b->n % align) u8_(b, 0);
}
static void fill(struct buf *b, size_t n, uint8_t v) {
    for (size_t i = 0; i < n; i++) u8_(b, (uint8_t)(v + i));
}

static char tmp_path[64];

static void write_file(const void *p, size_t n) {
    strcpy(tmp_path, "/tmp/unit_gguf_XXXXXX");
    int fd = mkstemp(tmp_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, p, n), (ssize_t)n);
    close(fd);
}

static char err[ANVIL_ERRMSG_CAP];

/* Open an image; returns the status, leaves the message in err. */
static anvil_status open_img(const void *p, size_t n, struct gguf_file **out) {
    write_file(p, n);
    err[0] = 0;
    anvil_status st = gguf_open(tmp_path, out, err, sizeof(err));
    unlink(tmp_path);
    if (st != ANVIL_OK) {
        /* one clear line */
        assert_true(strlen(err) > 6);
        assert_null(strchr(err, '\n'));
        assert_memory_equal(err, "gguf: ", 6);
    }
    return st;
}

/* Expect failure with the given status and a message containing `frag`. */
static void expect_fail(struct buf *b, anvil_status want, const char *frag) {
    struct gguf_file *f = NULL;
    int64_t live = core_alloc_live();
    anvil_status st = open_img(b->p, b->n, &f);
    if (st != want || !strstr(err, frag))
        fail_msg("want status %d with '%s', got %d: %s", want, frag, st, err);
    assert_null(f);
    assert_int_equal(core_alloc_live(), live);
    free(b->p);
    *b = (struct buf){0};
}

// ----------------------------------------------------------------------------
// a valid image with every value type and three tensors

static const uint64_t ne_norm[1] = {64};
static const uint64_t ne_q8[2] = {64, 3};
static const uint64_t ne_q41[3] = {32, 2, 2};

static void build_good(struct buf *b, uint32_t version, uint32_t align) {
    uint64_t n_kv = 17 + (align ? 1 : 0);
    hdr(b, version, 3, n_kv);
    if (align) kv_u32(b, "general.alignment", align);
    kv_str(b, "general.architecture", "llama");
    kv_u32(b, "llama.block_count", 30);
    str_(b, "k.u8"), u32_(b, GGUF_VT_UINT8), u8_(b, 200);
    str_(b, "k.i8"), u32_(b, GGUF_VT_INT8), u8_(b, 0xfe); /* -2 */
    str_(b, "k.u16"), u32_(b, GGUF_VT_UINT16), u8_(b, 0x34), u8_(b, 0x12);
    str_(b, "k.i16"), u32_(b, GGUF_VT_INT16), u8_(b, 0xff), u8_(b, 0xff);
    str_(b, "k.i32"), u32_(b, GGUF_VT_INT32), u32_(b, (uint32_t)-7);
    float fv = 1.5f;
    str_(b, "k.f32"), u32_(b, GGUF_VT_FLOAT32), put(b, &fv, 4);
    str_(b, "k.bool"), u32_(b, GGUF_VT_BOOL), u8_(b, 1);
    str_(b, "k.u64"), u32_(b, GGUF_VT_UINT64), u64_(b, (uint64_t)1 << 40);
    str_(b, "k.u64big"), u32_(b, GGUF_VT_UINT64), u64_(b, UINT64_MAX);
    str_(b, "k.i64"), u32_(b, GGUF_VT_INT64), u64_(b, (uint64_t)INT64_MIN);
    double dv = 0.25;
    str_(b, "k.f64"), u32_(b, GGUF_VT_FLOAT64), put(b, &dv, 8);
    /* arrays: i32, strings, empty f32, u8 */
    str_(b, "arr.i32"), u32_(b, GGUF_VT_ARRAY), u32_(b, GGUF_VT_INT32), u64_(b, 3);
    u32_(b, 1), u32_(b, 2), u32_(b, 3);
    str_(b, "arr.str"), u32_(b, GGUF_VT_ARRAY), u32_(b, GGUF_VT_STRING), u64_(b, 3);
    str_(b, "a"), str_(b, ""), str_(b, "hello");
    str_(b, "arr.empty"), u32_(b, GGUF_VT_ARRAY), u32_(b, GGUF_VT_FLOAT32), u64_(b, 0);
    str_(b, "arr.u8"), u32_(b, GGUF_VT_ARRAY), u32_(b, GGUF_VT_UINT8), u64_(b, 5);
    fill(b, 5, 10);

    uint32_t a = align ? align : 32;
    /* q8_0: 3 rows of 2 blocks = 204 bytes; q4_1: 4 rows x 1 block = 80 */
    uint64_t off_q8 = 0, off_norm = (204 + a - 1) / a * a, off_q41 = off_norm + a * ((256 + a - 1) / a);
    tinfo(b, "tok.weight", 2, ne_q8, ANVIL_TYPE_Q8_0, off_q8);
    tinfo(b, "norm.weight", 1, ne_norm, ANVIL_TYPE_F32, off_norm);
    tinfo(b, "blk.q41", 3, ne_q41, ANVIL_TYPE_Q4_1, off_q41);
    pad(b, a);
    size_t data0 = b->n;
    fill(b, 204, 1);
    pad(b, a);
    assert_int_equal(b->n - data0, off_norm);
    fill(b, 256, 2);
    while (b->n - data0 < off_q41) u8_(b, 0);
    fill(b, 80, 3);
}

static void check_good(const struct gguf_file *f, uint32_t version, uint32_t align) {
    assert_int_equal(f->version, version);
    assert_int_equal(f->alignment, align ? align : 32);
    assert_int_equal(f->n_tensors, 3);
    assert_int_equal(f->data_offset % f->alignment, 0);

    uint32_t u;
    int64_t i;
    float x;
    bool bl;
    struct gguf_str s;
    assert_true(gguf_get_u32(f, "llama.block_count", &u));
    assert_int_equal(u, 30);
    assert_true(gguf_get_u32(f, "k.u8", &u));
    assert_int_equal(u, 200);
    assert_true(gguf_get_u32(f, "k.u16", &u));
    assert_int_equal(u, 0x1234);
    assert_false(gguf_get_u32(f, "k.i8", &u)); /* negative */
    assert_false(gguf_get_u32(f, "k.u64", &u)); /* does not fit */
    assert_true(gguf_get_i64(f, "k.i8", &i));
    assert_int_equal(i, -2);
    assert_true(gguf_get_i64(f, "k.i16", &i));
    assert_int_equal(i, -1);
    assert_true(gguf_get_i64(f, "k.i32", &i));
    assert_int_equal(i, -7);
    assert_true(gguf_get_i64(f, "k.u64", &i));
    assert_int_equal(i, (int64_t)1 << 40);
    assert_false(gguf_get_i64(f, "k.u64big", &i));
    assert_true(gguf_get_i64(f, "k.i64", &i));
    assert_true(i == INT64_MIN);
    assert_false(gguf_get_i64(f, "k.f32", &i));
    assert_true(gguf_get_f32(f, "k.f32", &x));
    assert_true(x == 1.5f);
    assert_true(gguf_get_f32(f, "k.f64", &x));
    assert_true(x == 0.25f);
    assert_false(gguf_get_f32(f, "k.i32", &x));
    assert_true(gguf_get_bool(f, "k.bool", &bl));
    assert_true(bl);
    assert_false(gguf_get_bool(f, "k.u8", &bl));
    assert_true(gguf_get_str(f, "general.architecture", &s));
    assert_true(gguf_str_eq(s, "llama"));
    assert_false(gguf_str_eq(s, "llam"));
    assert_false(gguf_get_str(f, "k.u8", &s));
    assert_false(gguf_get_u32(f, "missing", &u));
    assert_null(gguf_find(f, "missing"));
    assert_null(gguf_find(f, "k.u"));

    const struct gguf_kv *kv;
    assert_true(gguf_get_arr(f, "arr.i32", GGUF_VT_INT32, &kv));
    assert_int_equal(kv->n, 3);
    int32_t third;
    memcpy(&third, kv->data + 8, 4);
    assert_int_equal(third, 3);
    assert_false(gguf_get_arr(f, "arr.i32", GGUF_VT_UINT32, &kv));
    assert_false(gguf_get_arr(f, "k.u8", GGUF_VT_UINT8, &kv));
    assert_true(gguf_get_arr(f, "arr.str", GGUF_VT_STRING, &kv));
    assert_int_equal(kv->n, 3);
    assert_true(gguf_str_eq(kv->strs[0], "a"));
    assert_true(gguf_str_eq(kv->strs[1], ""));
    assert_true(gguf_str_eq(kv->strs[2], "hello"));
    assert_true(gguf_get_arr(f, "arr.empty", GGUF_VT_FLOAT32, &kv));
    assert_int_equal(kv->n, 0);
    assert_true(gguf_get_arr(f, "arr.u8", GGUF_VT_UINT8, &kv));
    assert_int_equal(kv->data[4], 14);

    const struct gguf_tensor *t = gguf_find_tensor(f, "tok.weight");
    assert_non_null(t);
    assert_int_equal(t->type, ANVIL_TYPE_Q8_0);
    assert_int_equal(t->n_dims, 2);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 3);
    assert_int_equal(t->ne[2], 1);
    assert_int_equal(t->nbytes, 204);
    assert_ptr_equal(t->data, f->map + f->data_offset);
    assert_int_equal(((const uint8_t *)t->data)[5], 6);
    t = gguf_find_tensor(f, "norm.weight");
    assert_non_null(t);
    assert_int_equal(t->nbytes, 256);
    assert_int_equal(((const uint8_t *)t->data)[0], 2);
    t = gguf_find_tensor(f, "blk.q41");
    assert_non_null(t);
    assert_int_equal(t->nbytes, 80);
    assert_int_equal(t->ne[2], 2);
    assert_int_equal(((const uint8_t *)t->data)[79], 3 + 79);
    assert_null(gguf_find_tensor(f, "blk"));
    assert_null(gguf_find_tensor(f, "tok.weight2"));
}

static void test_good(void **state) {
    (void)state;
    const uint32_t versions[] = {2, 3}, aligns[] = {0, 1, 32, 64, 256};
    for (int v = 0; v < 2; v++)
        for (int a = 0; a < 5; a++) {
            struct buf b = {0};
            build_good(&b, versions[v], aligns[a]);
            struct gguf_file *f = NULL;
            anvil_status st = open_img(b.p, b.n, &f);
            if (st != ANVIL_OK) fail_msg("v%u align %u: %s", versions[v], aligns[a], err);
            check_good(f, versions[v], aligns[a]);
            gguf_close(f);
            free(b.p);
        }
    gguf_close(NULL);
}

static void test_empty_file_sections(void **state) {
    (void)state;
    /* no tensors, no metadata: valid, nothing after the header */
    struct buf b = {0};
    hdr(&b, 3, 0, 0);
    struct gguf_file *f = NULL;
    assert_int_equal(open_img(b.p, b.n, &f), ANVIL_OK);
    assert_int_equal(f->n_kv, 0);
    assert_null(gguf_find(f, "general.alignment"));
    assert_null(gguf_find_tensor(f, "x"));
    gguf_close(f);
    free(b.p);
}

/* Every proper prefix of a valid file fails cleanly with FORMAT. */
static void test_truncated_everywhere(void **state) {
    (void)state;
    struct buf b = {0};
    build_good(&b, 3, 64);
    for (size_t n = 0; n < b.n; n++) {
        struct gguf_file *f = NULL;
        anvil_status st = open_img(b.p, n, &f);
        if (st != ANVIL_ERR_FORMAT) fail_msg("prefix %zu of %zu: status %d (%s)", n, b.n, st, err);
        assert_null(f);
    }
    free(b.p);
}

/* Every row of the type table against ggml's numbers (ggml/include/ggml.h
 * enum ggml_type, ggml/src/ggml.c type_traits): name, elements and bytes
 * per block; which of them anvil reads and writes. */
static void test_type_table(void **state) {
    (void)state;
    static const struct {
        int id;
        const char *name;
        uint32_t blck, bytes;
        bool read, write;
    } spec[] = {
        {0, "F32", 1, 4, true, true},         {1, "F16", 1, 2, true, true},
        {2, "Q4_0", 32, 18, true, true},      {3, "Q4_1", 32, 20, true, true},
        {6, "Q5_0", 32, 22, true, true},      {7, "Q5_1", 32, 24, true, true},
        {8, "Q8_0", 32, 34, true, true},      {9, "Q8_1", 32, 36, false, false},
        {10, "Q2_K", 256, 84, true, true},    {11, "Q3_K", 256, 110, true, true},
        {12, "Q4_K", 256, 144, true, true},   {13, "Q5_K", 256, 176, true, true},
        {14, "Q6_K", 256, 210, true, true},   {15, "Q8_K", 256, 292, true, false},
        {16, "IQ2_XXS", 256, 66, false, false}, {17, "IQ2_XS", 256, 74, false, false},
        {18, "IQ3_XXS", 256, 98, false, false}, {19, "IQ1_S", 256, 50, false, false},
        {20, "IQ4_NL", 32, 18, true, true},   {21, "IQ3_S", 256, 110, false, false},
        {22, "IQ2_S", 256, 82, false, false}, {23, "IQ4_XS", 256, 136, true, true},
        {24, "I8", 1, 1, false, false},       {25, "I16", 1, 2, false, false},
        {26, "I32", 1, 4, false, false},      {27, "I64", 1, 8, false, false},
        {28, "F64", 1, 8, false, false},      {29, "IQ1_M", 256, 56, false, false},
        {30, "BF16", 1, 2, true, true},       {34, "TQ1_0", 256, 54, false, false},
        {35, "TQ2_0", 256, 66, false, false}, {39, "MXFP4", 32, 17, true, true},
    };
    const size_t n_spec = sizeof(spec) / sizeof(spec[0]);
    int listed = 0;
    for (int id = -2; id < 64; id++) {
        const struct gguf_type_info *t = gguf_type_info(id);
        size_t k = 0;
        while (k < n_spec && spec[k].id != id) k++;
        if (k == n_spec) { /* ids ggml removed or never used */
            assert_null(t);
            assert_string_equal(gguf_type_name_any(id), "?");
            assert_false(gguf_type_block(id, NULL, NULL));
            continue;
        }
        listed++;
        assert_non_null(t);
        assert_string_equal(t->name, spec[k].name);
        assert_string_equal(gguf_type_name_any(id), spec[k].name);
        assert_int_equal(t->blck, spec[k].blck);
        assert_int_equal(t->bytes, spec[k].bytes);
        assert_int_equal(t->read, spec[k].read);
        assert_int_equal(t->write, spec[k].write);
        assert_int_equal(t->quantized, spec[k].blck > 1);
        uint32_t bl = 0, by = 0;
        assert_int_equal(gguf_type_block(id, &bl, &by), spec[k].read);
        assert_int_equal(gguf_row_size(id, 3 * (uint64_t)spec[k].blck), spec[k].read ? 3 * spec[k].bytes : 0);
        if (spec[k].read) {
            assert_int_equal(bl, spec[k].blck);
            assert_int_equal(by, spec[k].bytes);
            assert_string_equal(anvil_type_name(id), spec[k].name);
            assert_int_equal(anvil_type_from_name(spec[k].name), id);
            assert_true(gguf_type_bpw(id) == 8.0 * spec[k].bytes / spec[k].blck);
        } else {
            assert_null(anvil_type_name(id));
            assert_int_equal(anvil_type_from_name(spec[k].name), -1);
            assert_true(gguf_type_bpw(id) == 0.0);
        }
    }
    assert_int_equal(listed, (int)n_spec);
}

static void test_type_helpers(void **state) {
    (void)state;
    uint32_t bl, by;
    assert_true(gguf_type_block(ANVIL_TYPE_Q4_0, &bl, &by));
    assert_int_equal(bl, 32);
    assert_int_equal(by, 18);
    assert_true(gguf_type_block(ANVIL_TYPE_Q4_K, &bl, &by));
    assert_int_equal(bl, 256);
    assert_int_equal(by, 144);
    assert_true(gguf_type_block(ANVIL_TYPE_Q8_K, &bl, &by)); /* a size only */
    assert_int_equal(by, 292);
    assert_false(gguf_type_block(16, &bl, &by)); /* IQ2_XXS */
    assert_false(gguf_type_block(9, &bl, &by));  /* Q8_1 */
    assert_false(gguf_type_block(-1, &bl, &by));
    assert_int_equal(gguf_row_size(ANVIL_TYPE_Q8_0, 64), 68);
    assert_int_equal(gguf_row_size(ANVIL_TYPE_Q4_1, 576), 360);
    assert_int_equal(gguf_row_size(ANVIL_TYPE_BF16, 5), 10);
    assert_int_equal(gguf_row_size(ANVIL_TYPE_F32, 5), 20);
    assert_int_equal(gguf_row_size(99, 5), 0);
    assert_string_equal(anvil_type_name(ANVIL_TYPE_BF16), "BF16");
    assert_string_equal(anvil_type_name(ANVIL_TYPE_Q8_0), "Q8_0");
    assert_string_equal(anvil_type_name(ANVIL_TYPE_IQ4_XS), "IQ4_XS");
    assert_string_equal(anvil_type_name(ANVIL_TYPE_Q6_K), "Q6_K");
    assert_null(anvil_type_name(16));
    assert_null(anvil_type_name(-3));
    assert_int_equal(anvil_type_from_name("q4_1"), ANVIL_TYPE_Q4_1);
    assert_int_equal(anvil_type_from_name("F16"), ANVIL_TYPE_F16);
    assert_int_equal(anvil_type_from_name("Q4_K"), ANVIL_TYPE_Q4_K);
    assert_int_equal(anvil_type_from_name("iq4_nl"), ANVIL_TYPE_IQ4_NL);
    assert_int_equal(anvil_type_from_name("IQ2_XXS"), -1);
    assert_int_equal(anvil_type_from_name(""), -1);
    assert_string_equal(gguf_vtype_name(GGUF_VT_STRING), "str");
    assert_string_equal(gguf_vtype_name((enum gguf_vtype)77), "?");
}

static void test_io_errors(void **state) {
    (void)state;
    struct gguf_file *f = NULL;
    assert_int_equal(gguf_open("/nonexistent/x.gguf", &f, err, sizeof(err)), ANVIL_ERR_IO);
    assert_non_null(strstr(err, "No such file"));
    assert_int_equal(gguf_open("/tmp", &f, err, sizeof(err)), ANVIL_ERR_IO);
    assert_non_null(strstr(err, "not a regular file"));
    assert_null(f);
    /* NULL error buffer is allowed */
    assert_int_equal(gguf_open("/nonexistent/x.gguf", &f, NULL, 0), ANVIL_ERR_IO);
}

// ----------------------------------------------------------------------------
// malformed headers and metadata

static void test_bad_header(void **state) {
    (void)state;
    struct buf b = {0};
    hdr(&b, 3, 0, 0);
    b.p[0] = 'X';
    expect_fail(&b, ANVIL_ERR_FORMAT, "bad magic");
    hdr(&b, 1, 0, 0);
    expect_fail(&b, ANVIL_ERR_UNSUPPORTED, "version 1");
    hdr(&b, 4, 0, 0);
    expect_fail(&b, ANVIL_ERR_UNSUPPORTED, "version 4");
    hdr(&b, 0x03000000, 0, 0);
    expect_fail(&b, ANVIL_ERR_UNSUPPORTED, "big-endian");
    put(&b, "GGUF", 4), u32_(&b, 3), u64_(&b, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "too small");
    hdr(&b, 3, 0, (uint64_t)1 << 60);
    expect_fail(&b, ANVIL_ERR_FORMAT, "cannot fit");
    hdr(&b, 3, UINT64_MAX, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "cannot fit");
    hdr(&b, 3, (uint64_t)1 << 59, (uint64_t)1 << 59);
    expect_fail(&b, ANVIL_ERR_FORMAT, "cannot fit");
    /* tensor count that fits the file before the metadata, not after */
    hdr(&b, 3, 2, 1);
    kv_str(&b, "general.name", "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
    fill(&b, 20, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "tensor");
}

static void test_bad_metadata(void **state) {
    (void)state;
    struct buf b = {0};
    /* absurd key length */
    hdr(&b, 3, 0, 1);
    u64_(&b, (uint64_t)1 << 63), fill(&b, 16, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "string length");
    /* absurd string value length */
    hdr(&b, 3, 0, 1);
    str_(&b, "general.name"), u32_(&b, GGUF_VT_STRING), u64_(&b, UINT64_MAX - 3);
    fill(&b, 16, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "string length");
    /* unknown value type */
    hdr(&b, 3, 0, 1);
    str_(&b, "k"), u32_(&b, 13), u64_(&b, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "unknown value type 13");
    hdr(&b, 3, 0, 1);
    str_(&b, "k"), u32_(&b, 0xffffffffu), u64_(&b, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "unknown value type");
    /* unknown array element type, nested arrays */
    hdr(&b, 3, 0, 1);
    str_(&b, "k"), u32_(&b, GGUF_VT_ARRAY), u32_(&b, 99), u64_(&b, 1), u64_(&b, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "unknown array element type 99");
    hdr(&b, 3, 0, 1);
    str_(&b, "k"), u32_(&b, GGUF_VT_ARRAY), u32_(&b, GGUF_VT_ARRAY), u64_(&b, 1), u64_(&b, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "nested");
    /* absurd array lengths, scalar and string */
    hdr(&b, 3, 0, 1);
    str_(&b, "k"), u32_(&b, GGUF_VT_ARRAY), u32_(&b, GGUF_VT_UINT32), u64_(&b, (uint64_t)1 << 62);
    fill(&b, 64, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "array of");
    hdr(&b, 3, 0, 1);
    str_(&b, "k"), u32_(&b, GGUF_VT_ARRAY), u32_(&b, GGUF_VT_UINT64), u64_(&b, (uint64_t)1 << 61);
    fill(&b, 64, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "array of");
    hdr(&b, 3, 0, 1);
    str_(&b, "tokenizer.ggml.tokens"), u32_(&b, GGUF_VT_ARRAY), u32_(&b, GGUF_VT_STRING);
    u64_(&b, (uint64_t)1 << 60), fill(&b, 64, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "array of");
    /* a string inside an array that runs off the end */
    hdr(&b, 3, 0, 1);
    str_(&b, "toks"), u32_(&b, GGUF_VT_ARRAY), u32_(&b, GGUF_VT_STRING), u64_(&b, 2);
    str_(&b, "ok"), u64_(&b, 1000), fill(&b, 10, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "string #1");
    /* duplicate keys */
    hdr(&b, 3, 0, 2);
    kv_u32(&b, "llama.block_count", 1), kv_u32(&b, "llama.block_count", 2);
    expect_fail(&b, ANVIL_ERR_FORMAT, "duplicate key 'llama.block_count'");
    /* bad alignment values and type */
    const uint32_t bad_align[] = {0, 3, 48, 0x80000001u};
    for (int i = 0; i < 4; i++) {
        hdr(&b, 3, 0, 1);
        kv_u32(&b, "general.alignment", bad_align[i]);
        expect_fail(&b, ANVIL_ERR_FORMAT, "power of two");
    }
    hdr(&b, 3, 0, 1);
    str_(&b, "general.alignment"), u32_(&b, GGUF_VT_UINT64), u64_(&b, 32);
    expect_fail(&b, ANVIL_ERR_FORMAT, "must be u32");
    /* non-printable key bytes are escaped in the message */
    hdr(&b, 3, 0, 1);
    u64_(&b, 3), put(&b, "a\nb", 3), u32_(&b, 200), u64_(&b, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "'a\\x0ab'");
}

// ----------------------------------------------------------------------------
// malformed tensor tables

/* One tensor with the given fields, data section of data_bytes. */
static void one_tensor(struct buf *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                       uint32_t type, uint64_t offset, size_t data_bytes) {
    hdr(b, 3, 1, 0);
    tinfo(b, name, n_dims, ne, type, offset);
    pad(b, 32);
    fill(b, data_bytes, 0);
}

static void test_bad_tensors(void **state) {
    (void)state;
    struct buf b = {0};
    const uint64_t ne64[4] = {64, 1, 1, 1};
    one_tensor(&b, "t", 1, ne64, ANVIL_TYPE_F32, 0, 256);
    struct gguf_file *f = NULL;
    assert_int_equal(open_img(b.p, b.n, &f), ANVIL_OK);
    gguf_close(f);
    free(b.p);
    b = (struct buf){0};

    one_tensor(&b, "t", 0, ne64, ANVIL_TYPE_F32, 0, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "0 dimensions");
    one_tensor(&b, "t", 5, (const uint64_t[5]){64, 1, 1, 1, 1}, ANVIL_TYPE_F32, 0, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "5 dimensions");
    one_tensor(&b, "t", 2, (const uint64_t[2]){64, 0}, ANVIL_TYPE_F32, 0, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "dimension 1 is 0");
    one_tensor(&b, "t", 2, (const uint64_t[2]){(uint64_t)1 << 32, (uint64_t)1 << 32},
               ANVIL_TYPE_F32, 0, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "int64");
    one_tensor(&b, "t", 1, (const uint64_t[1]){UINT64_MAX}, ANVIL_TYPE_F32, 0, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "int64");
    one_tensor(&b, "t", 4, (const uint64_t[4]){1 << 16, 1 << 16, 1 << 16, 1 << 16},
               ANVIL_TYPE_F32, 0, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "int64");
    /* element count fits int64 but the byte size (x4) does not fit the file */
    one_tensor(&b, "t", 2, (const uint64_t[2]){1 << 30, 1 << 30}, ANVIL_TYPE_F32, 0, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "extends past end of file");
    one_tensor(&b, "t", 2, (const uint64_t[2]){(uint64_t)1 << 62, 1}, ANVIL_TYPE_F32, 0, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "overflows");
    /* unknown / unsupported types name the type */
    one_tensor(&b, "blk.0.attn_q.weight", 1, ne64, 16, 0, 256);
    expect_fail(&b, ANVIL_ERR_UNSUPPORTED, "type 16 (IQ2_XXS)");
    one_tensor(&b, "blk.0.attn_q.weight", 1, ne64, 9, 0, 256);
    expect_fail(&b, ANVIL_ERR_UNSUPPORTED, "type 9 (Q8_1)");
    one_tensor(&b, "t", 1, ne64, 1000, 0, 256);
    expect_fail(&b, ANVIL_ERR_UNSUPPORTED, "type 1000 (?)");
    one_tensor(&b, "t", 1, ne64, 0x80000000u, 0, 256);
    expect_fail(&b, ANVIL_ERR_UNSUPPORTED, "not supported");
    /* row length not a multiple of the block */
    one_tensor(&b, "t", 2, (const uint64_t[2]){33, 2}, ANVIL_TYPE_Q8_0, 0, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "row length 33");
    /* super-block types: rows of SmolLM2's 576 do not divide into 256 */
    one_tensor(&b, "blk.0.attn_q.weight", 2, (const uint64_t[2]){576, 2}, ANVIL_TYPE_Q4_K, 0, 2048);
    expect_fail(&b, ANVIL_ERR_FORMAT, "tensor 'blk.0.attn_q.weight': row length 576 is not a multiple of the Q4_K block size 256");
    one_tensor(&b, "t", 1, ne64, ANVIL_TYPE_IQ4_XS, 0, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "IQ4_XS block size 256");
    /* offsets */
    one_tensor(&b, "t", 1, ne64, ANVIL_TYPE_F32, 16, 512);
    expect_fail(&b, ANVIL_ERR_FORMAT, "not a multiple of the alignment 32");
    one_tensor(&b, "blk.0.attn_q.weight", 1, ne64, ANVIL_TYPE_F32, 32, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT,
                "tensor 'blk.0.attn_q.weight': data [offset 32, 256 bytes] extends past end");
    one_tensor(&b, "t", 1, ne64, ANVIL_TYPE_F32, UINT64_MAX - 31, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "extends past end");
    one_tensor(&b, "t", 1, ne64, ANVIL_TYPE_F32, 0, 255);
    expect_fail(&b, ANVIL_ERR_FORMAT, "extends past end");
    /* names */
    one_tensor(&b, "", 1, ne64, ANVIL_TYPE_F32, 0, 256);
    expect_fail(&b, ANVIL_ERR_FORMAT, "empty or contains NUL");
    hdr(&b, 3, 1, 0);
    u64_(&b, 3), put(&b, "a\0b", 3), u32_(&b, 1), u64_(&b, 64), u32_(&b, 0), u64_(&b, 0);
    pad(&b, 32), fill(&b, 256, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "'a\\x00b' is empty or contains NUL");
    /* tensor name length absurd */
    hdr(&b, 3, 1, 0);
    u64_(&b, UINT64_MAX), fill(&b, 64, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "string length");
    /* duplicate names and overlapping data */
    hdr(&b, 3, 2, 0);
    tinfo(&b, "w", 1, ne64, ANVIL_TYPE_F32, 0);
    tinfo(&b, "w", 1, ne64, ANVIL_TYPE_F32, 256);
    pad(&b, 32), fill(&b, 512, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "duplicate tensor name 'w'");
    hdr(&b, 3, 2, 0);
    tinfo(&b, "a", 1, ne64, ANVIL_TYPE_F32, 0);
    tinfo(&b, "b", 1, ne64, ANVIL_TYPE_F32, 224);
    pad(&b, 32), fill(&b, 512, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "tensor 'a' [offset 0, 256 bytes] overlaps tensor 'b'");
    hdr(&b, 3, 2, 0);
    tinfo(&b, "a", 1, ne64, ANVIL_TYPE_F32, 256);
    tinfo(&b, "b", 1, ne64, ANVIL_TYPE_F32, 256);
    pad(&b, 32), fill(&b, 512, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "overlaps");
    /* data section start past the end of the file */
    hdr(&b, 3, 1, 0);
    tinfo(&b, "a", 1, (const uint64_t[1]){1}, ANVIL_TYPE_F32, 0);
    expect_fail(&b, ANVIL_ERR_FORMAT, "data");
}

/* Many distinct keys and tensors: hashing must find every one. */
static void test_many_entries(void **state) {
    (void)state;
    enum { NK = 2000, NT = 500 };
    struct buf b = {0};
    hdr(&b, 3, NT, NK);
    char name[32];
    for (int i = 0; i < NK; i++) {
        snprintf(name, sizeof(name), "key.%d", i);
        kv_u32(&b, name, (uint32_t)i * 3);
    }
    for (int i = 0; i < NT; i++) {
        snprintf(name, sizeof(name), "blk.%d.w", i);
        tinfo(&b, name, 1, (const uint64_t[1]){8}, ANVIL_TYPE_F32, (uint64_t)i * 32);
    }
    pad(&b, 32), fill(&b, NT * 32, 0);
    struct gguf_file *f = NULL;
    assert_int_equal(open_img(b.p, b.n, &f), ANVIL_OK);
    for (int i = 0; i < NK; i++) {
        snprintf(name, sizeof(name), "key.%d", i);
        uint32_t v;
        assert_true(gguf_get_u32(f, name, &v));
        assert_int_equal(v, (uint32_t)i * 3);
    }
    for (int i = 0; i < NT; i++) {
        snprintf(name, sizeof(name), "blk.%d.w", i);
        const struct gguf_tensor *t = gguf_find_tensor(f, name);
        assert_non_null(t);
        assert_int_equal(t->offset, (uint64_t)i * 32);
    }
    gguf_close(f);
    free(b.p);
}

/* Fail each allocation of gguf_open in turn: clean NOMEM, no leak. */
static void test_oom_walk(void **state) {
    (void)state;
    struct buf b = {0};
    build_good(&b, 3, 32);
    write_file(b.p, b.n);
    int n_fail = 0;
    for (uint64_t k = 1; k < 100; k++) {
        int64_t live = core_alloc_live();
        struct gguf_file *f = NULL;
        core_alloc_fail_at(k);
        anvil_status st = gguf_open(tmp_path, &f, err, sizeof(err));
        core_alloc_fail_at(0);
        if (st == ANVIL_OK) {
            check_good(f, 3, 32);
            gguf_close(f);
            assert_int_equal(core_alloc_live(), live);
            break;
        }
        assert_int_equal(st, ANVIL_ERR_NOMEM);
        assert_null(f);
        assert_int_equal(core_alloc_live(), live);
        n_fail++;
    }
    unlink(tmp_path);
    assert_true(n_fail >= 5); /* impl + kv + index + strs + tensors ... */
    free(b.p);
}

int main(int argc, char **argv) {
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* a test name or glob */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_good),
        cmocka_unit_test(test_empty_file_sections),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_type_helpers),
        cmocka_unit_test(test_io_errors),
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_bad_metadata),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_many_entries),
        cmocka_unit_test(test_oom_walk),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
