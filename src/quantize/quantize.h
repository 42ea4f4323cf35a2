/*
 * quantize.h - what the quantization module offers the rest of the project
 * besides anvil_quantize (include/anvil.h): the searched row quantizers,
 * for tools that need weights of a type (benchmarks, tests). The module's
 * internals (search, mixes, the file writer) are in quantize_int.h.
 */
#ifndef ANVIL_QUANTIZE_H
#define ANVIL_QUANTIZE_H

#include <stdbool.h>
#include <stdint.h>

/* Quantize n floats (a multiple of the type's block) into `type` blocks
 * with the searched quantizer anvil quantize uses (ggml's reference
 * conversion for Q8_0/Q4_0/Q4_1, float conversions for F16/BF16/F32).
 * Returns false for a type it does not write. */
bool qt_quantize_row(int type, const float *x, void *dst, int64_t n);

#endif
