/*
 * cmd_bench.c - `anvil bench`.
 *
 *   anvil bench --kernels [...]           kernel micro-benchmark (bench_kernels.c)
 *   anvil bench -m MODEL [-p 512] [-n 128] [-t T] [-r REPS] [--json]
 *                                          pp/tg on a model (issue 3; not built yet)
 */
#include <string.h>

#include "cli.h"

int cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--kernels")) return cli_bench_kernels(argc, argv);

    /* ---- model benchmark (pp512 / tg128) goes here ---- */
    return cli_fail("bench", "model benchmark not available in this build yet (try --kernels)");
}
