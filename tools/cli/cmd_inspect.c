/*
 * cmd_inspect.c - `anvil inspect MODEL`: print a GGUF file's header,
 * metadata and tensor table. Uses the internal GGUF reader directly (it
 * validates the whole file first, so a bad file gives one error line),
 * then checks every block scale (NaN or infinite: one error line naming
 * the tensor).
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gguf/gguf.h"
#include "kernels/blocks.h"

#define STR_SHOW 64 /* characters of a string value shown */
#define ARR_SHOW 4  /* array elements shown */
#define KN_TYPES_SHOWN 31 /* ggml type ids 0..30 cover every type anvil reads */

static void help(FILE *f) {
    fprintf(f, "usage: anvil inspect [options] MODEL.gguf\n"
               "\n"
               "Validate a GGUF file and print its version, metadata (arrays as element type,\n"
               "length and first elements; long strings cut) and tensor table.\n"
               "\n"
               "options:\n"
               "  -m, --model PATH   the GGUF file (or give it as the argument)\n"
               "  --no-tensors       metadata only\n"
               "  --no-meta          tensor table only\n"
               "  -h, --help         this help\n"
               "\n"
               "Exit status: 0 ok, 2 bad usage, a file that is not valid GGUF or a block\n"
               "with a NaN or infinite scale.\n");
}

/* Print untrusted bytes escaped, cut at STR_SHOW characters. */
static void put_str(const char *p, uint64_t len) {
    putchar('"');
    uint64_t n = len < STR_SHOW ? len : STR_SHOW;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c); /* UTF-8 bytes pass through; a cut may split one */
    }
    putchar('"');
    if (len > n) printf("...(%llu bytes)", (unsigned long long)len);
}

/* Print element i of a scalar type at p (unaligned). */
static void put_scalar(enum gguf_vtype t, const uint8_t *p) {
    union {
        uint8_t u8;
        int8_t i8;
        uint16_t u16;
        int16_t i16;
        uint32_t u32;
        int32_t i32;
        uint64_t u64;
        int64_t i64;
        float f32;
        double f64;
    } v;
    switch (t) {
    case GGUF_VT_UINT8: memcpy(&v.u8, p, 1); printf("%u", v.u8); break;
    case GGUF_VT_INT8: memcpy(&v.i8, p, 1); printf("%d", v.i8); break;
    case GGUF_VT_UINT16: memcpy(&v.u16, p, 2); printf("%u", v.u16); break;
    case GGUF_VT_INT16: memcpy(&v.i16, p, 2); printf("%d", v.i16); break;
    case GGUF_VT_UINT32: memcpy(&v.u32, p, 4); printf("%u", v.u32); break;
    case GGUF_VT_INT32: memcpy(&v.i32, p, 4); printf("%d", v.i32); break;
    case GGUF_VT_UINT64: memcpy(&v.u64, p, 8); printf("%llu", (unsigned long long)v.u64); break;
    case GGUF_VT_INT64: memcpy(&v.i64, p, 8); printf("%lld", (long long)v.i64); break;
    case GGUF_VT_FLOAT32: memcpy(&v.f32, p, 4); printf("%.9g", v.f32); break;
    case GGUF_VT_FLOAT64: memcpy(&v.f64, p, 8); printf("%.17g", v.f64); break;
    case GGUF_VT_BOOL: fputs(p[0] ? "true" : "false", stdout); break;
    default: fputs("?", stdout); break;
    }
}

/* Tensor names are untrusted too: escape anything not printable ASCII. */
static const char *safe_name(char *buf, size_t cap, const char *s) {
    size_t o = 0;
    for (; *s && o + 5 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c >= 0x20 && c < 0x7f) buf[o++] = (char)c;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    buf[o] = 0;
    return buf;
}

static size_t scalar_size(enum gguf_vtype t) {
    switch (t) {
    case GGUF_VT_UINT8: case GGUF_VT_INT8: case GGUF_VT_BOOL: return 1;
    case GGUF_VT_UINT16: case GGUF_VT_INT16: return 2;
    case GGUF_VT_UINT32: case GGUF_VT_INT32: case GGUF_VT_FLOAT32: return 4;
    default: return 8;
    }
}

static void put_kv(const struct gguf_kv *kv) {
    char type[32];
    if (kv->type == GGUF_VT_ARRAY)
        snprintf(type, sizeof(type), "arr[%s,%llu]", gguf_vtype_name(kv->arr_type),
                 (unsigned long long)kv->n);
    else
        snprintf(type, sizeof(type), "%s", gguf_vtype_name(kv->type));
    printf("  %-44.*s %-18s ", (int)(kv->key.len > 200 ? 200 : kv->key.len), kv->key.ptr, type);
    if (kv->type == GGUF_VT_STRING) {
        uint64_t len;
        memcpy(&len, kv->data, 8);
        put_str((const char *)kv->data + 8, len);
    } else if (kv->type == GGUF_VT_ARRAY) {
        putchar('[');
        uint64_t n = kv->n < ARR_SHOW ? kv->n : ARR_SHOW;
        for (uint64_t i = 0; i < n; i++) {
            if (i) fputs(", ", stdout);
            if (kv->arr_type == GGUF_VT_STRING) put_str(kv->strs[i].ptr, kv->strs[i].len);
            else put_scalar(kv->arr_type, kv->data + i * scalar_size(kv->arr_type));
        }
        if (kv->n > n) fputs(", ...", stdout);
        putchar(']');
    } else {
        put_scalar(kv->type, kv->data);
    }
    putchar('\n');
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    bool show_meta = true, show_tensors = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(path = cli_value("inspect", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--no-tensors")) {
            show_tensors = false;
        } else if (!strcmp(a, "--no-meta")) {
            show_meta = false;
        } else if (a[0] == '-' && a[1]) {
            return cli_fail("inspect", "unknown option '%s' (see --help)", a);
        } else if (!path) {
            path = a;
        } else {
            return cli_fail("inspect", "unexpected argument '%s' (see --help)", a);
        }
    }
    if (!path) return cli_fail("inspect", "no model given (usage: anvil inspect MODEL.gguf)");

    char err[ANVIL_ERRMSG_CAP];
    struct gguf_file *f = NULL;
    anvil_status st = gguf_open(path, &f, err, sizeof(err));
    if (st != ANVIL_OK) return cli_fail("inspect", "%s: %s", path, err);
    /* the block scales too (gguf_open checks structure, not values): one
     * pass over the file's scale fields */
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        int64_t rows = (int64_t)(t->ne[1] * t->ne[2] * t->ne[3]);
        int64_t bad = kn_find_bad_scale(t->type, t->data, rows, (int64_t)t->ne[0],
                                        gguf_row_size(t->type, t->ne[0]));
        if (bad >= 0) {
            char nb[128];
            cli_fail("inspect", "%s: tensor '%s': block %lld has a NaN or infinite scale", path,
                     safe_name(nb, sizeof(nb), t->name), (long long)bad);
            gguf_close(f);
            return 2;
        }
    }

    printf("file: %s (%zu bytes)\n", path, f->map_size);
    printf("GGUF version %u, alignment %u, %llu key/values, %llu tensors, data at offset %zu\n",
           f->version, f->alignment, (unsigned long long)f->n_kv,
           (unsigned long long)f->n_tensors, f->data_offset);
    if (show_meta) {
        printf("\nmetadata:\n");
        for (uint64_t i = 0; i < f->n_kv; i++) put_kv(&f->kv[i]);
    }

    uint64_t n_el = 0, n_bytes = 0;
    uint64_t by_type[KN_TYPES_SHOWN] = {0};
    if (show_tensors) {
        printf("\ntensors:\n  %5s  %-36s %-6s %-24s %12s %12s\n", "#", "name", "type", "shape",
               "offset", "bytes");
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        uint64_t nel = 1;
        char shape[96];
        size_t o = 0;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            nel *= t->ne[d]; /* cannot overflow: checked by gguf_open */
            o += (size_t)snprintf(shape + o, sizeof(shape) - o, d ? " x %llu" : "%llu",
                                  (unsigned long long)t->ne[d]);
        }
        n_el += nel;
        n_bytes += t->nbytes;
        if (t->type >= 0 && t->type < KN_TYPES_SHOWN) by_type[t->type]++;
        char nb[128];
        if (show_tensors)
            printf("  %5llu  %-36s %-6s %-24s %12llu %12llu\n", (unsigned long long)i,
                   safe_name(nb, sizeof(nb), t->name),
                   anvil_type_name(t->type), shape, (unsigned long long)t->offset,
                   (unsigned long long)t->nbytes);
    }
    printf("\ntotal: %llu tensors, %llu elements (%.1fM), %llu bytes of tensor data (%.1f MiB);",
           (unsigned long long)f->n_tensors, (unsigned long long)n_el, (double)n_el / 1e6,
           (unsigned long long)n_bytes, (double)n_bytes / (1024.0 * 1024.0));
    for (int ty = 0; ty < KN_TYPES_SHOWN; ty++)
        if (by_type[ty]) printf(" %s x %llu", anvil_type_name(ty), (unsigned long long)by_type[ty]);
    printf("\n");
    gguf_close(f);
    return 0;
}
