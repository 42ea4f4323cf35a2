/*
 * cpu.c - CPUID feature detection for run-time kernel dispatch.
 *
 * A feature counts only when the CPU reports it and the OS saves the
 * registers it needs (XGETBV): AVX needs XCR0 bits 1-2, AVX-512 also 5-7,
 * AMX also 17-18 and, on Linux, the process's permission to use the tile
 * data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once here): a VM may report
 * AMX in CPUID without granting it, and the first tile instruction would
 * then fault.
 */
#include <pthread.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/syscall.h>
#endif

#include "core.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static uint64_t xgetbv0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static bool amx_granted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}

static void detect(struct cpu_features *f) {
    unsigned a, b, c, d;
    if (__get_cpuid(0, &a, &b, &c, &d)) /* "Auth" "enti" "cAMD" in ebx, edx, ecx */
        f->amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    f->family = (int)((a >> 8) & 0xf) == 0xf ? 0xf + (int)((a >> 20) & 0xff) : (int)((a >> 8) & 0xf);
    bool osxsave = (c >> 27) & 1, avx = (c >> 28) & 1;
    f->fma = (c >> 12) & 1;
    f->f16c = (c >> 29) & 1;
    if (!osxsave || !avx) {
        f->fma = f->f16c = false;
        return;
    }
    uint64_t xcr0 = xgetbv0();
    bool os_avx = (xcr0 & 0x6) == 0x6;
    bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
    if (!os_avx) {
        f->fma = f->f16c = false;
        return;
    }
    if (__get_cpuid_max(0, NULL) < 7) return;
    __cpuid_count(7, 0, a, b, c, d);
    f->avx2 = (b >> 5) & 1;
    if (os_avx512) {
        f->avx512f = (b >> 16) & 1;
        f->avx512dq = (b >> 17) & 1;
        f->avx512bw = (b >> 30) & 1;
        f->avx512vl = (b >> 31) & 1;
        f->avx512vnni = (c >> 11) & 1;
        bool amx = (d >> 24) & 1 && (d >> 25) & 1; /* AMX-TILE, AMX-INT8 */
        __cpuid_count(7, 1, a, b, c, d);
        f->avx512bf16 = (a >> 5) & 1;
        if (amx && (xcr0 & 0x60000) == 0x60000) f->amx = amx_granted();
    }
}
#else
static void detect(struct cpu_features *f) { (void)f; }
#endif

static struct cpu_features features;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static void init_features(void) { detect(&features); }

const struct cpu_features *cpu_get_features(void) {
    pthread_once(&once, init_features);
    return &features;
}

int cpu_count_online(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}
