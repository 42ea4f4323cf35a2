/*
 * microbench.c - bin/anvil-microbench: the micro-benchmarks, built apart
 * from bin/anvil (`make microbench`, and by `make tests`: the tests drive
 * them). Each times one part of the engine on synthetic or model data, for
 * the people who change that part; the user's benchmarks (pp/tg, serving
 * scenarios, batched, speculative, constrained) are `anvil bench`.
 *
 *   anvil-microbench --kernels [...]     quantized matmul (bench_kernels.c)
 *   anvil-microbench --attention [...]   decode or --prefill N attention (bench_attn.c)
 *   anvil-microbench --constrain [...]   the constraint engine's costs (bench_constrain.c)
 *
 * Each takes --help. The A/B harnesses of two revisions (bench/ab/) are
 * built by the bench/ab_*.sh scripts, which compile both sides themselves.
 */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static void usage(FILE *f) {
    fprintf(f, "usage: anvil-microbench --kernels [--help]     matmul micro-benchmark\n"
               "       anvil-microbench --attention [--help]   decode (or --prefill N) attention\n"
               "       anvil-microbench --constrain [--help]   constraint engine: vocabulary index,\n"
               "                                               schema compile, masks\n"
               "Set ANVIL_KERNELS=ref|avx2|avx512 to force a kernel family.\n");
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kernels")) return bench_kernels(argc, argv);
        if (!strcmp(argv[i], "--attention")) return bench_attention(argc, argv);
        if (!strcmp(argv[i], "--constrain")) return bench_constrain(argc - i, argv + i);
    }
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    usage(stderr);
    return 2;
}
