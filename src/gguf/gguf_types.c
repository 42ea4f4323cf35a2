/*
 * gguf_types.c - the tensor type table (gguf_types.h) and the public
 * type-name functions of include/anvil.h (anvil_type_name,
 * anvil_type_from_name), which read it.
 *
 * Every ggml type id has its row, so that a file holding a type anvil does
 * not run is refused with that type's name; only the rows marked `read`
 * pass gguf_open.
 */
#include <strings.h>

#include "gguf/gguf_types.h"
#include "anvil.h"

/* ggml/src/ggml.c type_traits: blck_size, type_size */
static const struct gguf_type_info types[] = {
    [ANVIL_TYPE_F32] = {"F32", 1, 4, true, true, false},
    [ANVIL_TYPE_F16] = {"F16", 1, 2, true, true, false},
    [ANVIL_TYPE_Q4_0] = {"Q4_0", 32, 18, true, true, true},
    [ANVIL_TYPE_Q4_1] = {"Q4_1", 32, 20, true, true, true},
    [ANVIL_TYPE_Q5_0] = {"Q5_0", 32, 22, true, true, true},
    [ANVIL_TYPE_Q5_1] = {"Q5_1", 32, 24, true, true, true},
    [ANVIL_TYPE_Q8_0] = {"Q8_0", 32, 34, true, true, true},
    [9] = {"Q8_1", 32, 36, false, false, true},
    [ANVIL_TYPE_Q2_K] = {"Q2_K", 256, 84, true, true, true},
    [ANVIL_TYPE_Q3_K] = {"Q3_K", 256, 110, true, true, true},
    [ANVIL_TYPE_Q4_K] = {"Q4_K", 256, 144, true, true, true},
    [ANVIL_TYPE_Q5_K] = {"Q5_K", 256, 176, true, true, true},
    [ANVIL_TYPE_Q6_K] = {"Q6_K", 256, 210, true, true, true},
    [ANVIL_TYPE_Q8_K] = {"Q8_K", 256, 292, true, false, true},
    [16] = {"IQ2_XXS", 256, 66, false, false, true},
    [17] = {"IQ2_XS", 256, 74, false, false, true},
    [18] = {"IQ3_XXS", 256, 98, false, false, true},
    [19] = {"IQ1_S", 256, 50, false, false, true},
    [ANVIL_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18, true, true, true},
    [21] = {"IQ3_S", 256, 110, false, false, true},
    [22] = {"IQ2_S", 256, 82, false, false, true},
    [ANVIL_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136, true, true, true},
    [24] = {"I8", 1, 1, false, false, false},
    [25] = {"I16", 1, 2, false, false, false},
    [26] = {"I32", 1, 4, false, false, false},
    [27] = {"I64", 1, 8, false, false, false},
    [28] = {"F64", 1, 8, false, false, false},
    [29] = {"IQ1_M", 256, 56, false, false, true},
    [ANVIL_TYPE_BF16] = {"BF16", 1, 2, true, true, false},
    [34] = {"TQ1_0", 256, 54, false, false, true},
    [35] = {"TQ2_0", 256, 66, false, false, true},
    [39] = {"MXFP4", 32, 17, true, true, true},
};
#define N_TYPES ((int)(sizeof(types) / sizeof(types[0])))

const struct gguf_type_info *gguf_type_info(int type) {
    if (type < 0 || type >= N_TYPES || !types[type].name) return NULL;
    return &types[type];
}

/* the row of a type anvil reads, or NULL */
static const struct gguf_type_info *read_info(int type) {
    const struct gguf_type_info *t = gguf_type_info(type);
    return t && t->read ? t : NULL;
}

const char *gguf_type_name_any(int type) {
    const struct gguf_type_info *t = gguf_type_info(type);
    return t ? t->name : "?";
}

bool gguf_type_block(int type, uint32_t *blck, uint32_t *bytes) {
    const struct gguf_type_info *t = read_info(type);
    if (!t) return false;
    if (blck) *blck = t->blck;
    if (bytes) *bytes = t->bytes;
    return true;
}

size_t gguf_row_size(int type, uint64_t n) {
    const struct gguf_type_info *t = read_info(type);
    return t ? (size_t)(n / t->blck) * t->bytes : 0;
}

double gguf_type_bpw(int type) {
    const struct gguf_type_info *t = read_info(type);
    return t ? 8.0 * t->bytes / t->blck : 0.0;
}

const char *anvil_type_name(int type) {
    const struct gguf_type_info *t = read_info(type);
    return t ? t->name : NULL;
}

int anvil_type_from_name(const char *name) {
    if (!name) return -1;
    for (int i = 0; i < N_TYPES; i++)
        if (types[i].read && !strcasecmp(name, types[i].name)) return i;
    return -1;
}
