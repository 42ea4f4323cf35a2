/*
 * gguf_split.h - split GGUF files as llama.cpp's gguf-split writes them:
 * PREFIX-00001-of-0000N.gguf, ..., each a complete GGUF file holding a run
 * of the tensors; the first also holds all the metadata. Every part has
 * split.no (u16, 0-based), split.count (u16) and split.tensors.count
 * (i32, the tensors of all parts).
 *
 * Reading: gguf_open on the first part opens all of them (gguf.c), so a
 * split model loads as one file.
 */
#ifndef ANVIL_GGUF_SPLIT_H
#define ANVIL_GGUF_SPLIT_H

#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

/* Path of part i (0-based) of n: PREFIX-%05d-of-%05d.gguf, PREFIX being out
 * without a trailing ".gguf". false when it does not fit cap. */
bool gguf_split_path(char *buf, size_t cap, const char *out, int i, int n);

/* Write the tensors of the single file `in` as parts of at most max_bytes
 * each (a tensor larger than that gets a part of its own). *n_parts and
 * *bytes_out (optional) get the part count and the bytes written. Parts
 * are written as NAME.tmp and renamed when all are complete. */
anvil_status gguf_split_write(const char *in, const char *out, uint64_t max_bytes, int *n_parts,
                              uint64_t *bytes_out, char *err, size_t err_cap);

#endif
