/*
 * cmd_quantize.c - `anvil quantize IN OUT TYPE`: thin wrapper over
 * anvil_quantize (progress on stderr, exit 2 on bad input or output).
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "core/core.h"

static void help(FILE *f) {
    fprintf(f, "usage: anvil quantize [options] IN.gguf OUT.gguf TYPE\n"
               "\n"
               "Write a copy of IN with its weight matrices (token embedding included)\n"
               "converted to TYPE: Q8_0, Q4_0, Q4_1, F16 or BF16. 1-D tensors (norms) are\n"
               "stored as F32; metadata is copied, with general.file_type updated.\n"
               "OUT is written as OUT.tmp and renamed when complete.\n"
               "\n"
               "options:\n"
               "  -q, --quiet   no progress output\n"
               "  -h, --help    this help\n"
               "\n"
               "Exit status: 0 ok, 1 out of memory, 2 bad usage, input or output.\n");
}

struct prog {
    bool tty, quiet;
    double t0;
};

static void on_progress(void *user, uint64_t done, uint64_t total) {
    struct prog *p = user;
    if (p->quiet) return;
    /* a terminal gets a live counter; a log gets a line every ~10% */
    if (p->tty) {
        fprintf(stderr, "\ranvil quantize: tensor %llu/%llu", (unsigned long long)done,
                (unsigned long long)total);
        if (done == total) fputc('\n', stderr);
    } else if (done == total || (total >= 10 && done % (total / 10) == 0)) {
        fprintf(stderr, "anvil quantize: tensor %llu/%llu\n", (unsigned long long)done,
                (unsigned long long)total);
    }
}

int cmd_quantize(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0;
    struct prog p = {.tty = isatty(2) != 0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            help(stdout);
            return 0;
        } else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) {
            p.quiet = true;
        } else if (a[0] == '-' && a[1]) {
            return cli_fail("quantize", "unknown option '%s' (see --help)", a);
        } else if (n_pos < 3) {
            pos[n_pos++] = a;
        } else {
            return cli_fail("quantize", "unexpected argument '%s' (see --help)", a);
        }
    }
    if (n_pos != 3) return cli_fail("quantize", "usage: anvil quantize IN.gguf OUT.gguf TYPE");
    int type = anvil_type_from_name(pos[2]);
    if (type != ANVIL_TYPE_Q8_0 && type != ANVIL_TYPE_Q4_0 && type != ANVIL_TYPE_Q4_1 &&
        type != ANVIL_TYPE_F16 && type != ANVIL_TYPE_BF16)
        return cli_fail("quantize", "unknown type '%s' (choose Q8_0, Q4_0, Q4_1, F16 or BF16)",
                        pos[2]);

    char err[ANVIL_ERRMSG_CAP] = "";
    p.t0 = time_now_s();
    anvil_status st = anvil_quantize(pos[0], pos[1], type, on_progress, &p, err, sizeof(err));
    if (st != ANVIL_OK) {
        if (p.tty && !p.quiet) fputc('\n', stderr);
        cli_fail("quantize", "%s", err[0] ? err : anvil_status_str(st));
        return st == ANVIL_ERR_NOMEM ? 1 : 2;
    }
    if (!p.quiet)
        fprintf(stderr, "anvil quantize: wrote %s (%s) in %.2f s\n", pos[1], anvil_type_name(type),
                time_now_s() - p.t0);
    return 0;
}
