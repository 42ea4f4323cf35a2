/*
 * cmd_bench.c - `anvil bench`.
 *
 *   anvil bench -m MODEL [-p 512] [-n 128] [-t 1,2] [-r 5] [--json]
 *                                          single stream pp/tg (bench_model.c)
 *   anvil bench -m MODEL --scenario NAME|all [-t T] [--json] [--png FILE]
 *                                          serving scenarios of SCENARIOS.md
 *   anvil bench -m MODEL --batched [...]  batched decode, llama-batched-bench style
 *                                          (bench_batched.c)
 *   anvil bench --kernels [...]            matmul micro-benchmark (bench_kernels.c)
 *   anvil bench --attention [...]          decode attention micro-benchmark (bench_attn.c)
 *
 * The kernel family is the automatic choice; ANVIL_KERNELS=ref|avx2|avx512
 * forces one.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "bench_attn.h"
#include "cli.h"
#include "core/core.h"
#include "plot.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: anvil bench -m MODEL [-p N] [-n N] [-t T[,T...]] [-r REPS] [--json]\n"
            "       anvil bench -m MODEL --scenario NAME|all [-t T] [--json] [--png FILE]\n"
            "       anvil bench -m MODEL --batched [--help]   batched decode throughput\n"
            "       anvil bench --kernels [--help]     matmul micro-benchmark\n"
            "       anvil bench --attention [--help]   decode attention micro-benchmark\n\n"
            "  -p N            prompt tokens for pp (default 512; 0 = skip)\n"
            "  -n N            generated tokens for tg (default 128; 0 = skip)\n"
            "  -t T[,T...]     thread counts (default: online CPUs)\n"
            "  -r REPS         repetitions after one warmup (default 5)\n"
            "  --json          one JSON object per line\n"
            "  --scenario S    serving scenario, or 'all':\n");
    for (int i = 0; i < bench_scenario_count(); i++) fprintf(f, "                    %s\n", bench_scenario_name(i));
    fprintf(f, "  --png FILE      with --scenario: throughput and TTFT/ITL distributions\n"
               "Set ANVIL_KERNELS=ref|avx2|avx512 to force a kernel family.\n");
}

static int write_scenario_png(const char *path, struct bench_scenario_result *res, int n) {
    struct plot_grid *g = plot_grid_new(3, 1, 640, 420, "anvil serving scenarios");
    if (!g) return cli_fail("bench", "cannot create the plot");
    const char **names = malloc((size_t)n * sizeof(*names));
    double *tput = malloc((size_t)n * sizeof(double));
    for (int i = 0; i < n; i++) {
        names[i] = res[i].name;
        tput[i] = res[i].total_tok_s;
    }
    struct plot *p = plot_grid_panel(g, 0);
    plot_set_labels(p, "throughput", "scenario", "total tok/s");
    plot_bars(p, names, tput, n, "anvil");
    p = plot_grid_panel(g, 1);
    plot_set_labels(p, "time to first token (CDF)", "ms", "fraction");
    plot_log_x(p, true);
    for (int i = 0; i < n; i++) plot_cdf(p, res[i].name, res[i].ttft_ms, res[i].n_ttft);
    p = plot_grid_panel(g, 2);
    plot_set_labels(p, "inter-token latency (CDF)", "ms", "fraction");
    plot_log_x(p, true);
    for (int i = 0; i < n; i++) plot_cdf(p, res[i].name, res[i].itl_ms, res[i].n_itl);
    char err[256];
    int rc = 0;
    if (plot_grid_write_png(g, path, err, sizeof(err)) != 0) rc = cli_fail("bench", "%s", err);
    else fprintf(stderr, "anvil bench: wrote %s\n", path);
    plot_grid_free(g);
    free(names);
    free(tput);
    return rc;
}

static int run_scenarios(const char *model, const char *which, int n_threads, bool json,
                         const char *png) {
    int n = bench_scenario_count(), n_done = 0, rc = 0;
    struct bench_scenario_result *res = calloc((size_t)n, sizeof(*res));
    for (int i = 0; i < n && !rc; i++) {
        const char *name = bench_scenario_name(i);
        if (strcmp(which, "all") && strcmp(which, name)) continue;
        if (!json) fprintf(stderr, "anvil bench: running %s ...\n", name);
        rc = bench_run_scenario(model, NULL, n_threads, name, json, &res[n_done]);
        if (!rc) n_done++;
    }
    if (!rc && n_done == 0) rc = cli_fail("bench", "unknown scenario '%s' (see --help)", which);
    if (!rc && png) rc = write_scenario_png(png, res, n_done);
    for (int i = 0; i < n_done; i++) {
        free(res[i].ttft_ms);
        free(res[i].itl_ms);
    }
    free(res);
    return rc;
}

int cmd_bench(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kernels")) return cli_bench_kernels(argc, argv);
        if (!strcmp(argv[i], "--attention")) return bench_attention(argc, argv);
        if (!strcmp(argv[i], "--batched")) return bench_batched(argc, argv);
    }
    const char *model = NULL, *scenario = NULL, *png = NULL, *threads = NULL;
    long n_prompt = 512, n_gen = 128, reps = 5;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            if (!(model = cli_value("bench", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--scenario")) {
            if (!(scenario = cli_value("bench", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--png")) {
            if (!(png = cli_value("bench", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (!(threads = cli_value("bench", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "-p")) {
            if (!(v = cli_value("bench", argc, argv, &i)) ||
                !cli_int("bench", a, v, 0, 1 << 16, &n_prompt))
                return 2;
        } else if (!strcmp(a, "-n")) {
            if (!(v = cli_value("bench", argc, argv, &i)) ||
                !cli_int("bench", a, v, 0, 1 << 16, &n_gen))
                return 2;
        } else if (!strcmp(a, "-r")) {
            if (!(v = cli_value("bench", argc, argv, &i)) ||
                !cli_int("bench", a, v, 1, 1000, &reps))
                return 2;
        } else {
            return cli_fail("bench", "unknown option '%s' (see anvil bench --help)", a);
        }
    }
    if (!model) return cli_fail("bench", "a model is required (-m FILE)");
    if (n_prompt == 0 && n_gen == 0 && !scenario) return cli_fail("bench", "nothing to run");

    /* thread list "1,2" */
    long tl[16];
    int nt = 0;
    if (!threads) {
        tl[nt++] = cpu_count_online();
    } else {
        char buf[128];
        snprintf(buf, sizeof(buf), "%s", threads);
        for (char *tok = strtok(buf, ","); tok && nt < 16; tok = strtok(NULL, ","))
            if (!cli_int("bench", "-t", tok, 1, 256, &tl[nt++])) return 2;
    }
    int rc = 0;
    for (int k = 0; k < nt && !rc; k++) {
        if (scenario) rc = run_scenarios(model, scenario, (int)tl[k], json, png);
        else rc = bench_single_stream(model, NULL, (int)n_prompt, (int)n_gen, (int)tl[k], (int)reps,
                                      json || k > 0 ? json : false);
    }
    return rc;
}
