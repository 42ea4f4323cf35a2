/*
 * gguf_types.h - the tensor type table: one row per ggml type id with its
 * name, its block geometry (elements and bytes per block) and what anvil
 * does with it. The GGUF reader, the quantizer (src/quantize) and the
 * kernels (src/kernels) all read their geometry and names from here; the
 * block structs that spell each layout out are in kernels/blocks.h, and
 * tests/unit_kernels.c checks that their sizes agree with this table.
 *
 * Reference: ggml/include/ggml.h (enum ggml_type: the ids, gaps are ids
 * ggml removed) and ggml/src/ggml.c (type_traits: blck_size, type_size);
 * tests/unit_gguf.c checks every row against those numbers.
 */
#ifndef ANVIL_GGUF_TYPES_H
#define ANVIL_GGUF_TYPES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gguf_type_info {
    const char *name; /* ggml's name, "Q4_K" */
    uint32_t blck;    /* elements per block */
    uint32_t bytes;   /* bytes per block */
    bool read;        /* anvil loads tensors of this type (gguf_open accepts it) */
    bool write;       /* anvil quantize writes it (every read type but Q8_K,
                         an activation type) */
    bool quantized;   /* blocks with scales: every read type but F32/F16/BF16 */
};

/* The row of a ggml type id, supported or not; NULL for an id ggml never
 * gave a type. */
const struct gguf_type_info *gguf_type_info(int type);
/* Name of any ggml type id ("IQ2_XXS" too); "?" for an id with no row. */
const char *gguf_type_name_any(int type);
/* Block geometry of a type anvil reads: elements per block and bytes per
 * block (either pointer may be NULL). False for any other id. */
bool gguf_type_block(int type, uint32_t *blck, uint32_t *bytes);
/* Bytes of one row of n elements of a type anvil reads (n a multiple of
 * the block); 0 for any other id. */
size_t gguf_row_size(int type, uint64_t n);
/* Bits per weight of a type anvil reads (8 * bytes / blck); 0 otherwise. */
double gguf_type_bpw(int type);

#endif
