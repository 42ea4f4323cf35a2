/*
 * quantize_int.h - internals of the quantize module (src/quantize): the searched
 * row quantizers (search.c, blocks32.c, kquants.c), the mix rules
 * (mix.c) and the file writer (quantize.c). Nothing outside src/quantize and
 * its tests includes this.
 *
 * Layering: above gguf/ (the file format) and kernels/blocks.h (the block
 * structs and f16 conversion); neither depends on this module.
 */
#ifndef ANVIL_QUANTIZE_INT_H
#define ANVIL_QUANTIZE_INT_H

#include "quantize/quantize.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/core.h"
#include "gguf/gguf_types.h"

/* ---------------------------------------------------------------------- */
/* types the quantizer writes (qtypes.c) */

/* The row of gguf_types.h for a type anvil quantize writes (write set:
 * F32, F16, BF16 and every block type the reader runs but Q8_K), or NULL.
 * Geometry, names and bits per weight are that table's (gguf_row_size,
 * gguf_type_bpw, gguf_type_name_any). */
const struct gguf_type_info *qt_type_get(int type);

/* ---------------------------------------------------------------------- */
/* row quantizers (blocks32.c, kquants.c) */

/* qt_quantize_row (blocks.h): one row of n floats (n a multiple of the
 * type's block) into dst (gguf_row_size(type, n) bytes), every type of
 * qt_type_get: F32, F16, BF16 and Q8_0/Q4_0/Q4_1 with the reference
 * conversions of kernels/cpu/ref (bit-compatible with ggml's), the others
 * with the searched quantizers of this module. Deterministic: the same
 * input gives the same bytes on every x86-64 CPU (plain IEEE float/double
 * arithmetic, no libm beyond sqrt). */

/* Per type quantizers, n a multiple of the block. */
void qt_quantize_q5_0(const float *x, void *dst, int64_t n);
void qt_quantize_q5_1(const float *x, void *dst, int64_t n);
void qt_quantize_iq4_nl(const float *x, void *dst, int64_t n);
void qt_quantize_q2_k(const float *x, void *dst, int64_t n);
void qt_quantize_q3_k(const float *x, void *dst, int64_t n);
void qt_quantize_q4_k(const float *x, void *dst, int64_t n);
void qt_quantize_q5_k(const float *x, void *dst, int64_t n);
void qt_quantize_q6_k(const float *x, void *dst, int64_t n);
void qt_quantize_iq4_xs(const float *x, void *dst, int64_t n);

/* ---------------------------------------------------------------------- */
/* the search (search.c): shared by every searched type */

/* Importance weights of the error measure for n elements of a (super-)
 * block: w[i] = sqrt(sigma2 + x[i]^2), sigma2 the block's mean square. */
void qs_weights(const float *x, int n, float *w);

/* A grid of levels for symmetric quantization, x ~= s * lv[L]: ascending
 * int8 levels with lv[0] < 0 < lv[k-1]; linear grids (lv[j] = lv[0] + j)
 * round in O(1), the IQ4 table by binary search. */
struct qs_grid {
    const int8_t *lv;
    int k;
    bool linear;
};
extern const struct qs_grid qs_grid_q3; /* -4..3 */
extern const struct qs_grid qs_grid_q5; /* -16..15 */
extern const struct qs_grid qs_grid_q6; /* -32..31 */
extern const struct qs_grid qs_grid_iq4; /* the IQ4_NL table */

/* Index of the level nearest to v. */
int qs_nearest(const struct qs_grid *g, float v);

/* Symmetric fit of n elements: the scale s (either sign) and indices L
 * that minimise sum w (x - s lv[L])^2 over candidate scales around the
 * max-magnitude solution (both ends of the grid), each refined by
 * alternating nearest rounding and a least-squares scale. Returns s;
 * *err (optional) gets the weighted error. All-zero input gives s = 0. */
float qs_fit_sym(const struct qs_grid *g, int n, const float *x, const float *w, uint8_t *L,
                 double *err);

/* Affine fit x ~= s*L + o, L in [0, nmax], s >= 0: candidates around the
 * min/max solution, each refined by rounding and a joint least-squares
 * refit of (s, o). With nonpos_offset, o <= 0 (the K-quants store a
 * subtracted, non-negative min). Returns s; *o gets the offset. */
float qs_fit_affine(int nmax, bool nonpos_offset, int n, const float *x, const float *w,
                    uint8_t *L, float *o, double *err);

/* Indices for a fixed scale d (and offset o): nearest rounding, and the
 * weighted error of the decoded values. d = 0 decodes to 0 (sym) or o. */
double qs_sym_round(const struct qs_grid *g, int n, const float *x, const float *w, float d,
                    uint8_t *L);
double qs_aff_round(int nmax, int n, const float *x, const float *w, float d, float o,
                    uint8_t *L);
/* Least-squares scale for fixed indices (sym), or scale and offset (aff,
 * the offset into *o, <= 0 with nonpos_offset). */
double qs_sym_ls(const struct qs_grid *g, int n, const float *x, const float *w,
                 const uint8_t *L);
double qs_aff_ls(int n, const float *x, const float *w, const uint8_t *L, bool nonpos_offset,
                 double *o);

/* Nearest integer (ties to even) of |v| < 2^22 without libm. */
int qs_round(float v);

/* Round a float to the value an f16 field will hold. */
float qs_f16_round(float v);

/* ---------------------------------------------------------------------- */
/* mixes (mix.c) */

struct gguf_file;

struct qt_mix {
    const char *name; /* "Q4_K_M" */
    int ftype;        /* llama.cpp's llama_ftype, written as general.file_type */
    int base;         /* the type most matrices get */
    bool pure;        /* a bare K type name: no per-tensor rules */
};

/* Look a mix (or plain type) name up, case-insensitive; NULL if unknown. */
const struct qt_mix *qt_mix_find(const char *name);
/* "Q4_0, Q4_1, ..." - every accepted name, for messages. */
const char *qt_mix_names(void);

/* Output type of every tensor of f under the mix (types[i] for
 * f->tensors[i]); *n_fallback counts matrices whose row did not divide
 * into the chosen type's blocks. pure forces the base type on every
 * matrix (shape fallback only). Returns ANVIL_ERR_UNSUPPORTED with a
 * message when a rule needs something this quantizer does not have. */
anvil_status qt_mix_plan(const struct gguf_file *f, const struct qt_mix *mix, bool pure, int *types,
                         int *n_fallback, char *err, size_t err_cap);

#endif
