/*
 * safetensors.h - read Hugging Face safetensors checkpoints: one file or
 * the shards a model.safetensors.index.json names, mapped read-only.
 *
 * A safetensors file is: u64 little-endian header length N, N bytes of
 * JSON ({"name": {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
 * optional "__metadata__": {str: str}}), then the data; offsets are
 * relative to the byte after the header.
 *
 * Invariants after a successful open: every tensor's extent lies inside
 * its file's mapping, its byte count equals its element count times the
 * dtype's size, extents of one file do not overlap, names are unique over
 * all shards. What it does not do: convert types or interpret names
 * (convert.c does).
 */
#ifndef ANVIL_SAFETENSORS_H
#define ANVIL_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "core/hash.h"

enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_F64, ST_I8, ST_U8, ST_I16, ST_I32, ST_I64, ST_BOOL };

#define ST_MAX_DIMS 8

struct st_tensor {
    char *name;                   /* NUL-terminated copy */
    enum st_dtype dtype;
    uint32_t n_dims;              /* 0 for a scalar */
    uint64_t shape[ST_MAX_DIMS];  /* row-major: shape[n_dims-1] is contiguous */
    uint64_t n_elem;
    const uint8_t *data;          /* into the mapping */
    uint64_t nbytes;
};

struct st_set {
    uint32_t n_files;
    struct st_map { const uint8_t *p; size_t size; } *maps;
    uint32_t n_tensors;
    struct st_tensor *tensors;
    uint64_t total_bytes;         /* sum of the tensors' bytes */
    struct hash_index index;      /* names -> tensors */
    uint32_t cap_tensors;
};

const char *st_dtype_name(enum st_dtype t);
size_t st_dtype_size(enum st_dtype t);

/* Parse the header of one file held in memory (buf, size: the whole file)
 * and append its tensors to set (data pointers into buf). A clear message
 * and ANVIL_ERR_FORMAT for anything malformed; what (the file's name) goes
 * into messages. Used by st_open_dir and the fuzz harness. */
anvil_status st_parse(struct st_set *set, const uint8_t *buf, size_t size, const char *what,
                      char *err, size_t err_cap);

/* Open the checkpoint of a directory: model.safetensors.index.json's
 * shards when it exists, else every *.safetensors file of dir (sorted).
 * ANVIL_ERR_IO when none is there or one cannot be mapped. */
anvil_status st_open_dir(const char *dir, struct st_set **out, char *err, size_t err_cap);
void st_close(struct st_set *set); /* NULL is a no-op; unmaps what st_open_dir mapped */

/* The tensor of that name, NULL when absent. */
const struct st_tensor *st_find(const struct st_set *set, const char *name);

/* Element i of t as a float (F32/F16/BF16/F64 and the integer types). */
float st_get(const struct st_tensor *t, uint64_t i);

#endif
