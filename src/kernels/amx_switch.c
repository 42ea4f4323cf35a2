/*
 * amx_switch.c - whether the avx512 packed matmuls run their dot products
 * on AMX (kernels/ops.h: kn_amx_active, kn_amx_set).
 *
 * A file of its own, built without ISA flags, so that the kernels that
 * ask (cpu/avx512/matmul_p.c, matmul_pk.c) call down into it and not back
 * into dispatch.c, which holds their tables; and so that any CPU may call
 * it (tests and benchmarks ask before they know the family).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "kernels/ops.h"

/* -1: not read yet; 0 off; 1 on */
static atomic_int amx_state = -1;

bool kn_amx_active(void) {
    int s = atomic_load_explicit(&amx_state, memory_order_relaxed);
    if (s < 0) {
        const char *env = getenv("ANVIL_AMX");
        s = cpu_get_features()->amx && !(env && !strcmp(env, "0"));
        atomic_store_explicit(&amx_state, s, memory_order_relaxed);
    }
    return s == 1;
}

bool kn_amx_set(int on) {
    if (on && !cpu_get_features()->amx) return false;
    atomic_store_explicit(&amx_state, on ? 1 : 0, memory_order_relaxed);
    return true;
}
