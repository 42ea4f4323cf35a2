/*
 * dispatch.c - pick a kernel table at run time from CPUID.
 *
 * Order of preference: avx512 (needs F, BW, VL, DQ and VNNI; the variant
 * using AVX512_BF16 instructions only when the CPU has them), avx2 (AVX2,
 * FMA, F16C), ref. ANVIL_KERNELS=ref|avx2|avx512 overrides the automatic
 * choice; a forced family the CPU cannot run is refused, never run.
 * AMX is not a family of its own: the avx512 packed matmuls use it when
 * kn_amx_active() (amx_switch.c; ANVIL_AMX=0 turns it off).
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/ops.h"

extern const struct kn_ops kn_ops_avx2;
extern const struct kn_ops kn_ops_avx512;
extern const struct kn_ops kn_ops_avx512_nobf16; /* same without AVX512_BF16 instructions */

static const struct kn_ops *avx512_table(void) {
    const struct cpu_features *f = cpu_get_features();
    if (!(f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni && f->fma &&
          f->f16c))
        return NULL;
    return f->avx512bf16 ? &kn_ops_avx512 : &kn_ops_avx512_nobf16;
}

static const struct kn_ops *avx2_table(void) {
    const struct cpu_features *f = cpu_get_features();
    if (!(f->avx2 && f->fma && f->f16c)) return NULL;
    return &kn_ops_avx2;
}

const struct kn_ops *kn_select(const char *force) {
    if (!force || !strcmp(force, "auto")) {
        const char *env = getenv("ANVIL_KERNELS");
        force = (env && *env) ? env : "auto";
    }
    if (!strcmp(force, "ref")) return &kn_ops_ref;
    if (!strcmp(force, "avx2")) return avx2_table();
    if (!strcmp(force, "avx512")) return avx512_table();
    if (!strcmp(force, "auto")) {
        const struct kn_ops *t = avx512_table();
        if (!t) t = avx2_table();
        return t ? t : &kn_ops_ref;
    }
    return NULL;
}
