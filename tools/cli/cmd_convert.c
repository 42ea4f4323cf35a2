/*
 * cmd_convert.c - `anvil convert DIR -o OUT.gguf [--type T]
 * [--split-max-size N]`: thin wrapper over cv_convert (src/convert):
 * progress on stderr (tensors and MB/s), exit 2 on bad input or output.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "convert/convert.h"
#include "core/core.h"
#include "gguf/gguf_types.h"

static void help(FILE *f) {
    fprintf(f,
            "usage: anvil convert [options] DIR -o OUT.gguf\n"
            "\n"
            "Convert a Hugging Face checkpoint folder (config.json, *.safetensors or a\n"
            "model.safetensors.index.json with its shards, tokenizer.json,\n"
            "tokenizer_config.json) to GGUF with the metadata keys llama.cpp's\n"
            "converter writes. Architectures: %s.\n"
            "\n"
            "options:\n"
            "  -o, --outfile OUT     the GGUF file to write (required)\n"
            "  --type T              f16 (default), bf16, f32, or any type of `anvil quantize`\n"
            "                        (Q8_0, Q4_K_M, ...: the same mixes)\n"
            "  --split-max-size N    write parts of at most N bytes (suffix K, M or G):\n"
            "                        OUT-00001-of-0000K.gguf, ... with llama.cpp's split.* keys\n"
            "  -t N                  threads for quantizing (default: all CPUs)\n"
            "  -q, --quiet           no progress output\n"
            "  -h, --help            this help\n"
            "\n"
            "Exit status: 0 ok, 1 out of memory, 2 bad usage, input or output.\n",
            cv_known_archs());
}

struct prog {
    bool tty, quiet;
    double t0;
    int last_pct;
};

static void on_progress(void *user, const struct cv_event *ev) {
    struct prog *p = user;
    if (p->quiet) return;
    double dt = time_now_s() - p->t0;
    double mbs = dt > 0 ? (double)ev->bytes_done / 1e6 / dt : 0.0;
    int pct = ev->bytes_total ? (int)(100.0 * (double)ev->bytes_done / (double)ev->bytes_total) : 100;
    bool last = ev->tensor == ev->n_tensors;
    if (p->tty) {
        fprintf(stderr, "\r\033[Kanvil convert: %3d%% tensor %llu/%llu %s -> %s, %.0f MB/s", pct,
                (unsigned long long)ev->tensor, (unsigned long long)ev->n_tensors, ev->name,
                gguf_type_name_any(ev->type), mbs);
        if (last) fputc('\n', stderr);
    } else if (last || pct / 10 > p->last_pct / 10) {
        fprintf(stderr, "anvil convert: %3d%% tensor %llu/%llu %s -> %s, %.0f MB/s\n", pct,
                (unsigned long long)ev->tensor, (unsigned long long)ev->n_tensors, ev->name,
                gguf_type_name_any(ev->type), mbs);
    }
    p->last_pct = pct;
}

static void on_qprogress(void *user, const struct anvil_quantize_event *ev) {
    struct prog *p = user;
    if (p->quiet) return;
    bool last = ev->done == ev->total && ev->tensor == ev->n_tensors;
    int pct = ev->total ? (int)(100.0 * (double)ev->done / (double)ev->total) : 100;
    if (last || pct / 25 > p->last_pct / 25)
        fprintf(stderr, "anvil convert: quantizing %3d%% tensor %llu/%llu %s -> %s\n", pct,
                (unsigned long long)ev->tensor, (unsigned long long)ev->n_tensors, ev->name,
                gguf_type_name_any(ev->type_out));
    p->last_pct = pct;
}

/* "500M", "2G", "1000000" -> bytes */
static bool parse_size(const char *s, uint64_t *out) {
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0)) return false;
    double m = 1;
    if (*end == 'K' || *end == 'k') m = 1e3, end++;
    else if (*end == 'M' || *end == 'm') m = 1e6, end++;
    else if (*end == 'G' || *end == 'g') m = 1e9, end++;
    if (*end) return false;
    if (v * m < 1 || v * m > 1e15) return false;
    *out = (uint64_t)(v * m);
    return true;
}

int cmd_convert(int argc, char **argv) {
    const char *dir = NULL, *out = NULL;
    struct prog pr = {.tty = isatty(2) != 0, .last_pct = -1};
    struct cv_params cp = {.type = "f16", .progress = on_progress, .qprogress = on_qprogress,
                           .user = &pr};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            pr.quiet = true;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--outfile")) {
            if (!(out = cli_value("convert", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--type") || !strcmp(a, "--outtype")) {
            if (!(cp.type = cli_value("convert", argc, argv, &i))) return 2;
        } else if (!strcmp(a, "--split-max-size")) {
            const char *v = cli_value("convert", argc, argv, &i);
            if (!v) return 2;
            if (!parse_size(v, &cp.split_max))
                return cli_fail("convert", "--split-max-size: '%s' is not a size (e.g. 500M, 2G)", v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            const char *v = cli_value("convert", argc, argv, &i);
            long t;
            if (!v || !cli_int("convert", a, v, 1, 256, &t)) return 2;
            cp.n_threads = (int)t;
        } else if (a[0] == '-' && a[1]) {
            return cli_fail("convert", "unknown option '%s' (see --help)", a);
        } else if (!dir) {
            dir = a;
        } else {
            return cli_fail("convert", "unexpected argument '%s' (see --help)", a);
        }
    }
    if (!dir || !out) return cli_fail("convert", "usage: anvil convert DIR -o OUT.gguf [--type T]");
    char err[ANVIL_ERRMSG_CAP] = "";
    struct cv_stats s = {0};
    pr.t0 = time_now_s();
    anvil_status st = cv_convert(dir, out, &cp, &s, err, sizeof(err));
    if (st != ANVIL_OK) {
        if (pr.tty && !pr.quiet && pr.last_pct >= 0) fputc('\n', stderr);
        cli_fail("convert", "%s", err[0] ? err : anvil_status_str(st));
        return st == ANVIL_ERR_NOMEM ? 1 : 2;
    }
    if (!pr.quiet) {
        double dt = time_now_s() - pr.t0;
        fprintf(stderr, "anvil convert: wrote %s (%s, %s, pre-tokenizer %s): %llu tensors, %.2f MiB "
                        "-> %.2f MiB in %d file%s, %.2f s (%.0f MB/s)\n",
                out, s.arch, cp.type, s.pre[0] ? s.pre : "-", (unsigned long long)s.n_tensors,
                (double)s.bytes_in / 1048576.0, (double)s.bytes_out / 1048576.0, s.n_parts,
                s.n_parts == 1 ? "" : "s", dt, dt > 0 ? (double)s.bytes_in / 1e6 / dt : 0.0);
    }
    return 0;
}
