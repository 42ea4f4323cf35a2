/*
 * safetensors.c - the safetensors reader (safetensors.h): map each file,
 * parse its JSON header with cJSON, and check every entry against the
 * bytes that are really there before anyone reads a tensor.
 *
 * Checks, each a one-line error naming the file and tensor: the header
 * length fits the file; the header is a JSON object of objects; dtype is
 * one of the known names; shape is a list of at most 8 non-negative
 * integers whose product does not overflow; data_offsets is [begin, end]
 * with begin <= end <= the data size and end - begin equal to the element
 * count times the dtype size; no two tensors of a file overlap; no name
 * appears twice (also across shards).
 *
 * What it does not do: write anything, convert dtypes (st_get reads one
 * element), or know model names.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "convert/safetensors.h"
#include "kernels/blocks.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[] = {
    [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2}, [ST_F64] = {"F64", 8},
    [ST_I8] = {"I8", 1},   [ST_U8] = {"U8", 1},   [ST_I16] = {"I16", 2},   [ST_I32] = {"I32", 4},
    [ST_I64] = {"I64", 8}, [ST_BOOL] = {"BOOL", 1},
};
#define N_DTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

const char *st_dtype_name(enum st_dtype t) { return (unsigned)t < N_DTYPES ? dtypes[t].name : "?"; }
size_t st_dtype_size(enum st_dtype t) { return (unsigned)t < N_DTYPES ? dtypes[t].size : 0; }

static void name_key(const void *ctx, uint32_t id, const void **key, size_t *len) {
    const struct st_set *s = ctx;
    *key = s->tensors[id].name;
    *len = strlen(s->tensors[id].name);
}

const struct st_tensor *st_find(const struct st_set *set, const char *name) {
    if (!set || !set->index.slot) return NULL;
    int64_t id = hash_index_find(&set->index, name, strlen(name), name_key, set);
    return id < 0 ? NULL : &set->tensors[id];
}

float st_get(const struct st_tensor *t, uint64_t i) {
    const uint8_t *p = t->data + i * dtypes[t->dtype].size;
    switch (t->dtype) {
    case ST_F32: { float v; memcpy(&v, p, 4); return v; }
    case ST_F16: { uint16_t v; memcpy(&v, p, 2); return kn_f16_to_f32(v); }
    case ST_BF16: { uint16_t v; memcpy(&v, p, 2); return kn_bf16_to_f32(v); }
    case ST_F64: { double v; memcpy(&v, p, 8); return (float)v; }
    case ST_I8: return (float)(int8_t)p[0];
    case ST_U8: case ST_BOOL: return (float)p[0];
    case ST_I16: { int16_t v; memcpy(&v, p, 2); return (float)v; }
    case ST_I32: { int32_t v; memcpy(&v, p, 4); return (float)v; }
    case ST_I64: { int64_t v; memcpy(&v, p, 8); return (float)v; }
    }
    return 0.0f;
}

/* A JSON number that is a non-negative integer below 2^53 (exact in a double). */
static bool json_u64(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return false;
    double d = j->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return false;
    *out = (uint64_t)d;
    return true;
}

struct ext { uint64_t b, e; uint32_t id; };
static int cmp_ext(const void *a, const void *b) {
    uint64_t x = ((const struct ext *)a)->b, y = ((const struct ext *)b)->b;
    return x < y ? -1 : x > y;
}

/* Bounded printable copy of an untrusted name for messages. */
static const char *shown(char *buf, size_t cap, const char *s) {
    size_t o = 0;
    for (; *s && o + 5 < cap; s++) buf[o++] = (*s >= 0x20 && *s < 0x7f) ? *s : '?';
    if (*s) memcpy(buf + o, "...", 3), o += 3;
    buf[o] = 0;
    return buf;
}

static anvil_status add_tensor(struct st_set *set, const char *name, const cJSON *e,
                               const uint8_t *data, uint64_t data_size, const char *what,
                               char *err, size_t cap) {
    char nb[80];
    shown(nb, sizeof nb, name);
    if (!cJSON_IsObject(e)) {
        errmsg_set(err, cap, "safetensors: %s: entry '%s' is not an object", what, nb);
        return ANVIL_ERR_FORMAT;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of)) {
        errmsg_set(err, cap, "safetensors: %s: tensor '%s' needs a string dtype, a shape list "
                   "and a data_offsets list", what, nb);
        return ANVIL_ERR_FORMAT;
    }
    struct st_tensor t = {0};
    unsigned k;
    for (k = 0; k < N_DTYPES; k++)
        if (!strcmp(dt->valuestring, dtypes[k].name)) break;
    if (k == N_DTYPES) {
        char db[40];
        errmsg_set(err, cap, "safetensors: %s: tensor '%s' has dtype '%s', which anvil does not "
                   "read (F32, F16, BF16, F64, I8, U8, I16, I32, I64, BOOL)", what, nb,
                   shown(db, sizeof db, dt->valuestring));
        return ANVIL_ERR_FORMAT;
    }
    t.dtype = (enum st_dtype)k;
    int nd = cJSON_GetArraySize(sh);
    if (nd > ST_MAX_DIMS) {
        errmsg_set(err, cap, "safetensors: %s: tensor '%s' has %d dimensions (at most %d)", what,
                   nb, nd, ST_MAX_DIMS);
        return ANVIL_ERR_FORMAT;
    }
    t.n_dims = (uint32_t)nd;
    t.n_elem = 1;
    int i = 0;
    const cJSON *d;
    cJSON_ArrayForEach(d, sh) {
        if (!json_u64(d, &t.shape[i]) || !u64_mul(t.n_elem, t.shape[i], &t.n_elem)) {
            errmsg_set(err, cap, "safetensors: %s: tensor '%s': shape entry %d is not a "
                       "non-negative integer or the element count overflows", what, nb, i);
            return ANVIL_ERR_FORMAT;
        }
        i++;
    }
    uint64_t b, en;
    if (cJSON_GetArraySize(of) != 2 || !json_u64(cJSON_GetArrayItem(of, 0), &b) ||
        !json_u64(cJSON_GetArrayItem(of, 1), &en) || b > en) {
        errmsg_set(err, cap, "safetensors: %s: tensor '%s': data_offsets must be [begin, end] "
                   "with 0 <= begin <= end", what, nb);
        return ANVIL_ERR_FORMAT;
    }
    uint64_t want;
    if (!u64_mul(t.n_elem, dtypes[k].size, &want) || want != en - b) {
        errmsg_set(err, cap, "safetensors: %s: tensor '%s' (%s, %llu elements) has data_offsets "
                   "[%llu, %llu]: %llu bytes where its shape needs %llu", what, nb,
                   dtypes[k].name, (unsigned long long)t.n_elem, (unsigned long long)b,
                   (unsigned long long)en, (unsigned long long)(en - b),
                   (unsigned long long)t.n_elem * dtypes[k].size);
        return ANVIL_ERR_FORMAT;
    }
    if (en > data_size) {
        errmsg_set(err, cap, "safetensors: %s: tensor '%s' data [%llu, %llu) extends past the end "
                   "of the file (%llu data bytes): the file is truncated or the header is wrong",
                   what, nb, (unsigned long long)b, (unsigned long long)en,
                   (unsigned long long)data_size);
        return ANVIL_ERR_FORMAT;
    }
    t.data = data + b;
    t.nbytes = en - b;
    if (set->n_tensors == set->cap_tensors) {
        uint32_t nc = set->cap_tensors ? set->cap_tensors * 2 : 64;
        if (nc > (1u << 28)) return ANVIL_ERR_NOMEM;
        struct st_tensor *nt = core_realloc(set->tensors, (size_t)nc * sizeof(*nt));
        if (!nt) return ANVIL_ERR_NOMEM;
        set->tensors = nt;
        set->cap_tensors = nc;
    }
    size_t len = strlen(name);
    if (!(t.name = core_malloc(len + 1))) return ANVIL_ERR_NOMEM;
    memcpy(t.name, name, len + 1);
    uint32_t id = set->n_tensors;
    set->tensors[id] = t;
    int64_t dup;
    anvil_status st = hash_index_add(&set->index, id, t.name, len, name_key, set, &dup);
    if (st != ANVIL_OK) {
        core_free(t.name);
        return st;
    }
    if (dup >= 0) {
        core_free(t.name);
        errmsg_set(err, cap, "safetensors: %s: tensor '%s' appears twice in the checkpoint", what,
                   nb);
        return ANVIL_ERR_FORMAT;
    }
    set->n_tensors++;
    set->total_bytes += t.nbytes;
    return ANVIL_OK;
}

anvil_status st_parse(struct st_set *set, const uint8_t *buf, size_t size, const char *what,
                      char *err, size_t err_cap) {
    anvil_status st = ANVIL_OK;
    struct ext *ex = NULL;
    if (!set->index.slot && hash_index_init(&set->index, 64) != ANVIL_OK) goto nomem;
    if (size < 8) {
        errmsg_set(err, err_cap, "safetensors: %s: %zu bytes is too small (the header length "
                   "alone is 8)", what, size);
        return ANVIL_ERR_FORMAT;
    }
    uint64_t hlen;
    memcpy(&hlen, buf, 8);
    if (hlen < 2 || hlen > size - 8) {
        errmsg_set(err, err_cap, "safetensors: %s: header length %llu does not fit a file of %zu "
                   "bytes (truncated, or not a safetensors file)", what,
                   (unsigned long long)hlen, size);
        return ANVIL_ERR_FORMAT;
    }
    if (hlen > (100u << 20)) {
        errmsg_set(err, err_cap, "safetensors: %s: header of %llu bytes is over the 100 MB limit",
                   what, (unsigned long long)hlen);
        return ANVIL_ERR_FORMAT;
    }
    cJSON *root = cJSON_ParseWithLength((const char *)buf + 8, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        errmsg_set(err, err_cap, "safetensors: %s: the header is not a JSON object", what);
        return ANVIL_ERR_FORMAT;
    }
    const uint8_t *data = buf + 8 + hlen;
    uint64_t data_size = size - 8 - hlen;
    uint32_t first = set->n_tensors;
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (!e->string) continue;
        if (!strcmp(e->string, "__metadata__")) continue;
        st = add_tensor(set, e->string, e, data, data_size, what, err, err_cap);
        if (st == ANVIL_ERR_NOMEM) {
            cJSON_Delete(root);
            goto nomem;
        }
        if (st != ANVIL_OK) break;
    }
    cJSON_Delete(root);
    if (st != ANVIL_OK) return st;
    /* no two extents of this file overlap (empty tensors cannot) */
    uint32_t n = set->n_tensors - first;
    if (n > 1) {
        if (!(ex = core_malloc((size_t)n * sizeof(*ex)))) goto nomem;
        for (uint32_t i = 0; i < n; i++) {
            const struct st_tensor *t = &set->tensors[first + i];
            uint64_t b = (uint64_t)(t->data - data);
            ex[i] = (struct ext){b, b + t->nbytes, first + i};
        }
        qsort(ex, n, sizeof(*ex), cmp_ext);
        for (uint32_t i = 0; i + 1 < n; i++)
            if (ex[i].e > ex[i + 1].b && ex[i].e > ex[i].b && ex[i + 1].e > ex[i + 1].b) {
                char na[80], nb[80];
                errmsg_set(err, err_cap, "safetensors: %s: tensors '%s' and '%s' overlap", what,
                           shown(na, sizeof na, set->tensors[ex[i].id].name),
                           shown(nb, sizeof nb, set->tensors[ex[i + 1].id].name));
                st = ANVIL_ERR_FORMAT;
                break;
            }
        core_free(ex);
    }
    return st;
nomem:
    errmsg_set(err, err_cap, "safetensors: out of memory");
    return ANVIL_ERR_NOMEM;
}

/* ---------------------------------------------------------------------- */
/* files */

static anvil_status map_file(struct st_set *set, const char *path, char *err, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errmsg_set(err, cap, "safetensors: cannot open '%s': %s", path, strerror(errno));
        return ANVIL_ERR_IO;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        errmsg_set(err, cap, "safetensors: '%s' is not a regular file", path);
        return ANVIL_ERR_IO;
    }
    size_t size = (size_t)sb.st_size;
    void *p = NULL;
    if (size > 0) {
        p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            close(fd);
            errmsg_set(err, cap, "safetensors: cannot map '%s': %s", path, strerror(errno));
            return ANVIL_ERR_IO;
        }
        madvise(p, size, MADV_SEQUENTIAL);
    }
    close(fd);
    struct st_map *nm = core_realloc(set->maps, (size_t)(set->n_files + 1) * sizeof(*nm));
    if (!nm) {
        if (p) munmap(p, size);
        errmsg_set(err, cap, "safetensors: out of memory");
        return ANVIL_ERR_NOMEM;
    }
    set->maps = nm;
    set->maps[set->n_files++] = (struct st_map){p, size};
    const char *base = strrchr(path, '/');
    return st_parse(set, p ? p : (const uint8_t *)"", size, base ? base + 1 : path, err, cap);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The shard names of the index (its weight_map's values, each once, sorted). */
static anvil_status index_shards(const char *path, char ***names, int *n, char *err, size_t cap) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        errmsg_set(err, cap, "safetensors: cannot open '%s': %s", path, strerror(errno));
        return ANVIL_ERR_IO;
    }
    char *txt = NULL;
    size_t len = 0, cap_t = 0;
    for (;;) {
        if (len + 65536 > cap_t) {
            char *nt = core_realloc(txt, cap_t = cap_t * 2 + 65536);
            if (!nt) break;
            txt = nt;
        }
        size_t r = fread(txt + len, 1, cap_t - len, fp);
        len += r;
        if (r == 0) break;
    }
    fclose(fp);
    cJSON *root = txt ? cJSON_ParseWithLength(txt, len) : NULL;
    core_free(txt);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    if (!cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        errmsg_set(err, cap, "safetensors: '%s' has no weight_map object", path);
        return ANVIL_ERR_FORMAT;
    }
    int cnt = cJSON_GetArraySize(wm), k = 0;
    char **v = core_calloc((size_t)cnt + 1, sizeof(*v));
    const cJSON *e;
    cJSON_ArrayForEach(e, wm) {
        if (!v) break;
        if (!cJSON_IsString(e) || strchr(e->valuestring, '/') || e->valuestring[0] == '.') {
            errmsg_set(err, cap, "safetensors: '%s': weight_map values must be file names in "
                       "the same directory", path);
            for (int i = 0; i < k; i++) core_free(v[i]);
            core_free(v);
            cJSON_Delete(root);
            return ANVIL_ERR_FORMAT;
        }
        bool seen = false;
        for (int i = 0; i < k && !seen; i++) seen = !strcmp(v[i], e->valuestring);
        if (seen) continue;
        size_t l = strlen(e->valuestring);
        if (!(v[k] = core_malloc(l + 1))) break;
        memcpy(v[k++], e->valuestring, l + 1);
    }
    cJSON_Delete(root);
    if (!v) {
        errmsg_set(err, cap, "safetensors: out of memory");
        return ANVIL_ERR_NOMEM;
    }
    qsort(v, (size_t)k, sizeof(*v), cmp_str);
    *names = v;
    *n = k;
    return ANVIL_OK;
}

anvil_status st_open_dir(const char *dir, struct st_set **out, char *err, size_t err_cap) {
    anvil_status st = ANVIL_OK;
    char **names = NULL;
    int n = 0;
    size_t dl = strlen(dir);
    char *path = core_malloc(dl + 512);
    struct st_set *set = core_calloc(1, sizeof(*set));
    if (!path || !set) {
        core_free(path);
        core_free(set);
        errmsg_set(err, err_cap, "safetensors: out of memory");
        return ANVIL_ERR_NOMEM;
    }
    snprintf(path, dl + 512, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) == 0) {
        TRY(index_shards(path, &names, &n, err, err_cap));
    } else {
        DIR *d = opendir(dir);
        if (!d) {
            errmsg_set(err, err_cap, "convert: cannot read directory '%s': %s", dir,
                       strerror(errno));
            st = ANVIL_ERR_IO;
            goto fail;
        }
        struct dirent *de;
        int cap = 0;
        while ((de = readdir(d))) {
            size_t l = strlen(de->d_name);
            if (l < 12 || strcmp(de->d_name + l - 12, ".safetensors") || l > 400) continue;
            if (n + 1 >= cap) {
                char **nn = core_realloc(names, (size_t)(cap = cap * 2 + 8) * sizeof(*nn));
                if (!nn) break;
                names = nn;
            }
            if (!(names[n] = core_malloc(l + 1))) break;
            memcpy(names[n++], de->d_name, l + 1);
        }
        closedir(d);
        if (n) qsort(names, (size_t)n, sizeof(*names), cmp_str);
    }
    if (n == 0) {
        errmsg_set(err, err_cap, "convert: no *.safetensors file in '%s'", dir);
        st = ANVIL_ERR_IO;
        goto fail;
    }
    for (int i = 0; i < n; i++) {
        if (strlen(names[i]) > 400) {
            errmsg_set(err, err_cap, "safetensors: shard name too long");
            st = ANVIL_ERR_FORMAT;
            goto fail;
        }
        snprintf(path, dl + 512, "%s/%s", dir, names[i]);
        TRY(map_file(set, path, err, err_cap));
    }
    *out = set;
    set = NULL;
fail:
    for (int i = 0; i < n; i++) core_free(names[i]);
    core_free(names);
    core_free(path);
    st_close(set);
    return st;
}

void st_close(struct st_set *set) {
    if (!set) return;
    for (uint32_t i = 0; i < set->n_tensors; i++) core_free(set->tensors[i].name);
    core_free(set->tensors);
    for (uint32_t i = 0; i < set->n_files; i++)
        if (set->maps[i].p) munmap((void *)set->maps[i].p, set->maps[i].size);
    core_free(set->maps);
    hash_index_free(&set->index);
    core_free(set);
}
