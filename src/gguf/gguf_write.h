/*
 * gguf_write.h - a small sequential GGUF v3 writer (used by anvil_quantize
 * and available to tests and tools).
 *
 * The caller emits the file in order: header, key/values, tensor infos,
 * padding, tensor data (each tensor padded to the alignment). Errors are
 * sticky: after the first failed write the others do nothing, and
 * gguf_wr_close reports it. Nothing here validates the layout; write what
 * gguf_open would accept (offsets aligned, sizes exact).
 */
#ifndef ANVIL_GGUF_WRITE_H
#define ANVIL_GGUF_WRITE_H

#include <stdio.h>

#include "gguf/gguf.h"

struct gguf_wr {
    FILE *fp;
    const char *path; /* borrowed, for messages */
    uint64_t pos;     /* bytes written so far */
    int err_no;       /* first errno seen; 0 = ok */
};

/* Create/truncate path for writing. ANVIL_ERR_IO with a message on failure. */
anvil_status gguf_wr_open(struct gguf_wr *w, const char *path, char *err, size_t err_cap);
/* Flush, fsync and close. Returns ANVIL_ERR_IO with a message if any write
 * failed. Always closes the file; the caller removes it on failure. */
anvil_status gguf_wr_close(struct gguf_wr *w, char *err, size_t err_cap);

void gguf_wr_bytes(struct gguf_wr *w, const void *p, size_t n);
void gguf_wr_u32(struct gguf_wr *w, uint32_t v);
void gguf_wr_u64(struct gguf_wr *w, uint64_t v);
void gguf_wr_str(struct gguf_wr *w, const char *p, uint64_t len);
/* Zero bytes up to the next multiple of align. */
void gguf_wr_pad(struct gguf_wr *w, uint32_t align);

void gguf_wr_header(struct gguf_wr *w, uint64_t n_tensors, uint64_t n_kv);
/* Copy a parsed key/value (from gguf_open) with its value. */
void gguf_wr_kv(struct gguf_wr *w, const struct gguf_kv *kv);
void gguf_wr_kv_u32(struct gguf_wr *w, const char *key, uint32_t v);
void gguf_wr_tensor_info(struct gguf_wr *w, const char *name, uint32_t n_dims,
                         const uint64_t *ne, int type, uint64_t offset);

#endif
