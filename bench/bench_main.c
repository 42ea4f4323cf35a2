/*
 * bench_main.c - `anvil bench`: options, dispatch to the benchmarks, and
 * the single-stream and scenario runs with the scenario chart.
 *
 *   anvil bench -m MODEL [-p 512] [-n 128] [-t 1,2] [-r 5] [--json] [--profile]
 *                                          single stream pp/tg (bench_model.c)
 *   anvil bench -m MODEL --scenario NAME|all [-t T] [--json] [--png FILE] [--profile]
 *                                          serving scenarios of SCENARIOS.md
 *   anvil bench -m MODEL --batched [...]  batched decode, llama-batched-bench style
 *                                          (bench_batched.c)
 *   anvil bench -m MODEL --spec ngram|draft  speculative decoding (bench_spec.c)
 *   anvil bench -m MODEL --constrained     structured output: constrained against
 *                                          free decode, schema compile (bench_constrained.c)
 *
 * The micro-benchmarks (--kernels, --attention) are bin/anvil-microbench
 * (microbench.c); given here, they get a message saying so.
 *
 * The kernel family is the automatic choice; ANVIL_KERNELS=ref|avx2|avx512
 * forces one.
 */
#include <stdio.h>
#include <string.h>

#include "args.h"
#include "bench.h"
#include "bench_png.h"
#include "core/core.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: anvil bench -m MODEL [-p N] [-n N] [-t T[,T...]] [-r REPS] [--json] [--profile]\n"
            "       anvil bench -m MODEL --scenario NAME|all [-t T] [--json] [--png FILE] [--profile]\n"
            "       anvil bench -m MODEL --batched [--help]   batched decode throughput\n"
            "       anvil bench -m MODEL --spec ngram|draft [--help]   speculative decoding\n"
            "       anvil bench -m MODEL --constrained [--help]   structured output cost\n"
            "       anvil bench --toolfmt [--help]   tool-call format parse time per token\n"
            "(the micro-benchmarks --kernels and --attention are anvil-microbench: make microbench)\n\n"
            "  -p N            prompt tokens for pp (default 512; 0 = skip)\n"
            "  -n N            generated tokens for tg (default 128; 0 = skip)\n"
            "  -t T[,T...]     thread counts (default: online CPUs)\n"
            "  -r REPS         repetitions after one warmup (default 5)\n"
            "  --json          one JSON object per line\n"
            "  --profile       time by category (matmul, attention, norms and element-wise,\n"
            "                  decode call, sampling, scheduler); pp/tg also time twice the\n"
            "                  repetitions, profiling off and on alternately, to show its cost\n"
            "  --scenario S    serving scenario, or 'all':\n");
    for (int i = 0; i < bench_scenario_count(); i++) fprintf(f, "                    %s\n", bench_scenario_name(i));
    fprintf(f, "  --png FILE      with --scenario: throughput and TTFT/ITL distributions\n"
               "Set ANVIL_KERNELS=ref|avx2|avx512 to force a kernel family.\n");
}

static bool scenario_known(const char *which) {
    if (!strcmp(which, "all")) return true;
    for (int i = 0; i < bench_scenario_count(); i++)
        if (!strcmp(which, bench_scenario_name(i))) return true;
    return false;
}

/* The scenarios named by which ("all" or one name) at n_threads, and with
 * png their chart: throughput, TTFT and inter-token latency distributions. */
static int run_scenarios(const char *model, const char *which, int n_threads, bool json,
                         const char *png, bool profile) {
    struct bench_png plot;
    int rc = png ? bench_png_open(&plot, "bench", "scenarios", png, NULL, 0) : 0;
    if (rc) return rc;
    FILE *data = png ? bench_png_data(&plot) : NULL;
    struct anvil_prof prof[16];
    const char *names[16];
    int n_prof = 0;
    for (int i = 0; i < bench_scenario_count() && !rc; i++) {
        const char *name = bench_scenario_name(i);
        if (strcmp(which, "all") && strcmp(which, name)) continue;
        if (!json) fprintf(stderr, "anvil bench: running %s ...\n", name);
        bool p = profile && n_prof < 16;
        rc = bench_run_scenario(model, NULL, n_threads, name, json, data, p ? &prof[n_prof] : NULL);
        if (!rc && p) names[n_prof++] = name;
    }
    if (!rc && !json && n_prof) bench_print_scenario_profiles(names, prof, n_prof);
    if (!rc && png) rc = bench_png_draw(&plot);
    if (png) bench_png_close(&plot);
    return rc;
}

int bench_main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--kernels") || !strcmp(argv[i], "--attention"))
            return cli_fail("bench", "%s is a micro-benchmark: run anvil-microbench %s (make microbench)",
                            argv[i], argv[i]);
        if (!strcmp(argv[i], "--batched")) return bench_batched(argc, argv);
        if (!strcmp(argv[i], "--spec")) return bench_spec(argc, argv);
        if (!strcmp(argv[i], "--constrained")) return bench_constrained(argc, argv);
        if (!strcmp(argv[i], "--toolfmt")) return bench_toolfmt(argc, argv);
    }
    const char *model = NULL, *scenario = NULL, *png = NULL, *threads = NULL;
    long n_prompt = 512, n_gen = 128, reps = 5;
    bool json = false, profile = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--profile")) {
            profile = true;
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
    if (scenario && !scenario_known(scenario))
        return cli_fail("bench", "unknown scenario '%s' (see --help)", scenario);
    if (png && !scenario) return cli_fail("bench", "--png needs --scenario (or --kernels, --batched)");

    int tl[16], nt = 1;
    tl[0] = cpu_count_online();
    if (threads && (nt = cli_int_list("bench", "-t", threads, 1, 256, tl, 16)) < 0) return 2;
    int rc = 0;
    for (int k = 0; k < nt && !rc; k++) {
        if (scenario) rc = run_scenarios(model, scenario, tl[k], json, png, profile);
        else rc = bench_single_stream(model, NULL, (int)n_prompt, (int)n_gen, tl[k], (int)reps, json,
                                      profile);
    }
    return rc;
}
