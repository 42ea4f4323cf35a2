/*
 * convert.h - Hugging Face checkpoint folders to GGUF (`anvil convert`):
 * config.json to the architecture's GGUF keys, safetensors tensors to the
 * GGUF names and layouts llama.cpp's converter writes, tokenizer.json and
 * tokenizer_config.json to tokenizer.ggml.*, then (optionally) the
 * quantizer and the split writer. See docs/convert.md.
 */
#ifndef ANVIL_CONVERT_H
#define ANVIL_CONVERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"

struct cv_event {
    uint64_t tensor, n_tensors; /* 1-based index of the tensor just written */
    const char *name;
    int type;                   /* its output type */
    uint64_t bytes_done, bytes_total; /* source bytes read so far / in all */
};

struct cv_params {
    const char *type;        /* "f32", "f16" (default), "bf16", or a mix anvil quantize knows */
    uint64_t split_max;      /* bytes per split file; 0 = one file */
    int n_threads;           /* for the quantizer; 0 = all CPUs */
    void (*progress)(void *user, const struct cv_event *ev);
    void *user;
    /* the quantizer's own progress, when the type is quantized (an
     * anvil_quantize_params progress function, see include/anvil.h) */
    anvil_quantize_fn qprogress;
};

struct cv_stats {
    const char *arch;        /* GGUF architecture name (static) */
    uint64_t n_tensors, bytes_in, bytes_out;
    int n_parts;             /* files written (1 unless split) */
    char pre[32];            /* tokenizer.ggml.pre written ("" when no BPE vocab) */
};

/* Convert the checkpoint in dir to out. A checkpoint of an unknown
 * architecture, a missing config.json or tokenizer, or a malformed
 * safetensors file is ANVIL_ERR_FORMAT / ANVIL_ERR_UNSUPPORTED / ANVIL_ERR_IO
 * with a one-line message. out is written as out.tmp and renamed when
 * complete; split outputs are OUT-0000i-of-0000N.gguf (OUT without .gguf). */
anvil_status cv_convert(const char *dir, const char *out, const struct cv_params *p,
                        struct cv_stats *stats, char *err, size_t err_cap);

/* "llama (LlamaForCausalLM, MistralForCausalLM), ..." for messages. */
const char *cv_known_archs(void);

#endif
