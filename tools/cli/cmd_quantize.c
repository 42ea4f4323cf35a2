/*
 * cmd_quantize.c - `anvil quantize IN OUT TYPE`: thin wrapper over
 * anvil_quantize (progress on stderr, exit 2 on bad input or output).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/core.h"
#include "quantize/quantize_int.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: anvil quantize [options] IN.gguf OUT.gguf TYPE\n"
            "\n"
            "Write a copy of IN with its weight matrices quantized to TYPE, a mix by\n"
            "name with llama-quantize's per-tensor rules:\n"
            "  Q4_K_M Q4_K_S Q5_K_M Q5_K_S Q6_K Q3_K_M Q3_K_S Q3_K_L Q2_K IQ4_XS IQ4_NL\n"
            "  Q8_0 Q5_0 Q5_1 Q4_0 Q4_1, MXFP4_MOE (MoE experts MXFP4, the rest Q8_0)\n"
            "or a bare type for every matrix (Q3_K, Q4_K, Q5_K), or F16, BF16, F32.\n"
            "Rows that do not divide into 256-element super-blocks fall back to\n"
            "Q4_0/Q5_0/Q5_1/Q8_0/IQ4_NL as llama.cpp does. 1-D tensors (norms) are\n"
            "stored as F32; metadata is copied, with general.file_type updated.\n"
            "A tensor already quantized below its target type is an error: quantize\n"
            "from an F16/F32 file. OUT is written as OUT.tmp and renamed when complete.\n"
            "\n"
            "options:\n"
            "  --pure        every matrix gets the mix's base type (no per-tensor rules)\n"
            "  -t N          threads (default: all CPUs)\n"
            "  -q, --quiet   no progress output\n"
            "  -h, --help    this help\n"
            "\n"
            "Exit status: 0 ok, 1 out of memory, 2 bad usage, input or output.\n");
}

struct prog {
    bool tty, quiet;
    int last_pct;
};

static void on_progress(void *user, const struct anvil_quantize_event *ev) {
    struct prog *p = user;
    if (p->quiet) return;
    int pct = ev->total ? (int)(100.0 * (double)ev->done / (double)ev->total) : 100;
    const char *ti = gguf_type_name_any(ev->type_in), *to = gguf_type_name_any(ev->type_out);
    bool last = ev->done == ev->total && ev->tensor == ev->n_tensors;
    /* a terminal gets a live line; a log gets a line every ~10% */
    if (p->tty) {
        fprintf(stderr, "\r\033[Kanvil quantize: %3d%% tensor %llu/%llu %s %s -> %s", pct,
                (unsigned long long)ev->tensor, (unsigned long long)ev->n_tensors, ev->name, ti,
                to);
        if (last) fputc('\n', stderr);
    } else if (last || pct / 10 > p->last_pct / 10) {
        fprintf(stderr, "anvil quantize: %3d%% tensor %llu/%llu %s %s -> %s\n", pct,
                (unsigned long long)ev->tensor, (unsigned long long)ev->n_tensors, ev->name, ti,
                to);
    }
    p->last_pct = pct;
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0;
    struct prog pr = {.tty = isatty(2) != 0, .last_pct = -1};
    struct anvil_quantize_params qp = {.progress = on_progress, .user = &pr};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            pr.quiet = true;
        } else if (!strcmp(a, "--pure")) {
            qp.pure = true;
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            const char *v = cli_value("quantize", argc, argv, &i);
            long t;
            if (!v || !cli_int("quantize", a, v, 1, 256, &t)) return 2;
            qp.n_threads = (int)t;
        } else if (a[0] == '-' && a[1]) {
            return cli_fail("quantize", "unknown option '%s' (see --help)", a);
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            return cli_fail("quantize", "unexpected argument '%s' (see --help)", a);
        }
    }
    if (n_pos != 3) return cli_fail("quantize", "usage: anvil quantize IN.gguf OUT.gguf TYPE");
    qp.type = pos[2];

    char err[ANVIL_ERRMSG_CAP] = "";
    struct anvil_quantize_stats s;
    double t0 = time_now_s();
    anvil_status st = anvil_quantize(pos[0], pos[1], &qp, &s, err, sizeof(err));
    if (st != ANVIL_OK) {
        if (pr.tty && !pr.quiet && pr.last_pct >= 0) fputc('\n', stderr);
        cli_fail("quantize", "%s", err[0] ? err : anvil_status_str(st));
        return st == ANVIL_ERR_NOMEM ? 1 : 2;
    }
    if (!pr.quiet) {
        fprintf(stderr,
                "anvil quantize: wrote %s (%s): %.2f MiB -> %.2f MiB (%.2f bits per weight), "
                "%d tensors converted, %d copied",
                pos[1], pos[2], (double)s.bytes_in / 1048576.0, (double)s.bytes_out / 1048576.0,
                s.n_elements ? 8.0 * (double)s.bytes_out / (double)s.n_elements : 0.0,
                s.n_converted, s.n_copied);
        if (s.n_fallback)
            fprintf(stderr, ", %d with rows that do not divide into the type's blocks fell "
                            "back to a smaller block", s.n_fallback);
        fprintf(stderr, ", in %.2f s\n", time_now_s() - t0);
    }
    return 0;
}
