/*
 * bench_toolfmt.c - `anvil bench --toolfmt`: what parsing a family's
 * tool-call and reasoning format costs per token (src/server/toolfmt.c).
 *
 * For each format, a recorded-style answer (a thought where the family
 * has one, words, two calls) is fed to the output parser in pieces of 4
 * bytes (about one token of text) through srv_outparse_feed, as the
 * server feeds each token's text; the time per piece is the parse cost
 * per token. Thread CPU time, the median of --reps runs of --n answers
 * each. Before timing, one answer is parsed and must give two calls: a
 * format that does not is an error and gets no number.
 *
 * What it does not measure: the constrained decode of a call inside a
 * format (that is `anvil bench --constrained`'s decode, with the call
 * schema; docs/tool-calls.md).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "bench.h"
#include "bench_util.h"
#include "server/srv_int.h"

#define CMD "bench --toolfmt"

#define DS_B "<\xef\xbd\x9c"
#define DS_E "\xef\xbd\x9c>"
#define U2581 "\xe2\x96\x81"

struct sample {
    const char *name;
    struct srv_outfmt f;
    const char *text;
};

#define ARGS "{\"city\": \"Paris\", \"unit\": \"celsius\", \"days\": 3}"
static const struct sample samples[] = {
    {"hermes", {.tool_format = SRV_TOOLFMT_HERMES, .reasoning_format = SRV_REASONING_THINK},
     "<think>\nThe user wants the weather in two cities; I call the tool twice.\n</think>\n\n"
     "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " ARGS "}\n"
     "</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " ARGS "}\n</tool_call>"},
    {"llama3", {.tool_format = SRV_TOOLFMT_LLAMA3, .reasoning_format = SRV_REASONING_NONE},
     "{\"name\": \"get_weather\", \"parameters\": " ARGS "}; "
     "{\"name\": \"get_weather\", \"parameters\": " ARGS "}"},
    {"mistral", {.tool_format = SRV_TOOLFMT_MISTRAL, .reasoning_format = SRV_REASONING_NONE},
     "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": " ARGS "}, "
     "{\"name\": \"get_weather\", \"arguments\": " ARGS "}]"},
    {"harmony", {.tool_format = SRV_TOOLFMT_HARMONY, .reasoning_format = SRV_REASONING_HARMONY},
     "<|channel|>analysis<|message|>The user wants the weather; two calls.<|end|>"
     "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
     "<|message|>" ARGS "<|call|><|start|>assistant<|channel|>commentary "
     "to=functions.get_weather <|constrain|>json<|message|>" ARGS "<|call|>"},
    {"deepseek_r1", {.tool_format = SRV_TOOLFMT_DEEPSEEK_R1, .reasoning_format = SRV_REASONING_THINK},
     "<think>\nTwo calls.\n</think>\n\n" DS_B "tool" U2581 "calls" U2581 "begin" DS_E
     DS_B "tool" U2581 "call" U2581 "begin" DS_E "function" DS_B "tool" U2581 "sep" DS_E
     "get_weather\n```json\n" ARGS "\n```" DS_B "tool" U2581 "call" U2581 "end" DS_E
     DS_B "tool" U2581 "call" U2581 "begin" DS_E "function" DS_B "tool" U2581 "sep" DS_E
     "get_weather\n```json\n" ARGS "\n```" DS_B "tool" U2581 "call" U2581 "end" DS_E
     DS_B "tool" U2581 "calls" U2581 "end" DS_E},
    {"granite", {.tool_format = SRV_TOOLFMT_GRANITE, .reasoning_format = SRV_REASONING_NONE},
     "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": " ARGS "}, "
     "{\"name\": \"get_weather\", \"arguments\": " ARGS "}]"},
    {"command_r", {.tool_format = SRV_TOOLFMT_COMMAND_R, .reasoning_format = SRV_REASONING_NONE},
     "Action: ```json\n[{\"tool_name\": \"get_weather\", \"parameters\": " ARGS "}, "
     "{\"tool_name\": \"get_weather\", \"parameters\": " ARGS "}]\n```"},
    {"functionary", {.tool_format = SRV_TOOLFMT_FUNCTIONARY, .reasoning_format = SRV_REASONING_NONE},
     "<function=get_weather>" ARGS "</function><function=get_weather>" ARGS "</function>"},
    {"generic", {.tool_format = SRV_TOOLFMT_GENERIC, .reasoning_format = SRV_REASONING_NONE},
     "{\"tool_calls\": [{\"name\": \"get_weather\", \"arguments\": " ARGS "}, "
     "{\"name\": \"get_weather\", \"arguments\": " ARGS "}]}"},
    {"json", {.tool_format = SRV_TOOLFMT_JSON, .reasoning_format = SRV_REASONING_NONE},
     "{\"name\": \"get_weather\", \"arguments\": " ARGS "}"},
};

struct counts {
    int calls_ended;
    size_t bytes;
};

static void on_part(void *user, const struct srv_part *p) {
    struct counts *c = user;
    if (p->kind == SRV_PART_CALL_END) c->calls_ended++;
    c->bytes += p->n;
}

/* One answer through a fresh parser, in pieces of 4 bytes. */
static int parse_once(const struct sample *s, struct counts *c) {
    struct srv_outparse *p = srv_outparse_new(&s->f, SRV_TOOLS_AUTO, false, 7);
    if (!p) return -1;
    size_t n = strlen(s->text);
    for (size_t i = 0; i < n; i += 4)
        srv_outparse_feed(p, s->text + i, n - i < 4 ? n - i : 4, on_part, c);
    srv_outparse_end(p, true, on_part, c);
    srv_outparse_free(p);
    return 0;
}

int bench_toolfmt(int argc, char **argv) {
    long reps = 5, n = 2000;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--toolfmt")) continue;
        if (!strcmp(a, "--json")) {
            json = true;
        } else if (!strcmp(a, "--reps") && i + 1 < argc) {
            if (!cli_int(CMD, a, argv[++i], 1, 1000, &reps)) return 2;
        } else if (!strcmp(a, "--n") && i + 1 < argc) {
            if (!cli_int(CMD, a, argv[++i], 1, 10000000, &n)) return 2;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: anvil bench --toolfmt [--reps N] [--n ANSWERS] [--json]\n"
                   "  parse time per token (4-byte pieces) of each tool-call format\n");
            return 0;
        } else {
            return cli_fail(CMD, "unknown option '%s'", a);
        }
    }
    if (!json)
        printf("%-12s %8s %10s %12s %12s\n", "format", "bytes", "pieces", "ns/piece", "MB/s");
    int rc = 0;
    double *t = calloc((size_t)reps, sizeof(*t));
    if (!t) return 1;
    for (size_t k = 0; k < sizeof(samples) / sizeof(samples[0]); k++) {
        const struct sample *s = &samples[k];
        struct counts c = {0};
        int want = s->f.tool_format == SRV_TOOLFMT_JSON ? 1 : 2;
        if (parse_once(s, &c) != 0 || c.calls_ended != want) {
            fprintf(stderr, "anvil %s: %s: the sample gave %d calls, not %d: no number\n", CMD,
                    s->name, c.calls_ended, want);
            rc = 1;
            continue;
        }
        size_t len = strlen(s->text), pieces = (len + 3) / 4;
        for (long r = 0; r < reps; r++) {
            double t0 = bench_thread_cpu_s();
            for (long i = 0; i < n; i++) parse_once(s, &c);
            t[r] = bench_thread_cpu_s() - t0;
        }
        double med = bench_percentile(t, (int)reps, 0.5);
        double ns = med * 1e9 / ((double)n * (double)pieces);
        double mbs = (double)len * (double)n / med / 1e6;
        if (json) {
            struct bench_json j;
            bench_json_begin(&j, stdout, NULL);
            bench_json_str(&j, "bench", "toolfmt");
            bench_json_str(&j, "format", s->name);
            bench_json_int(&j, "bytes", (long long)len);
            bench_json_int(&j, "pieces", (long long)pieces);
            bench_json_num(&j, "ns_per_piece", ns, 1);
            bench_json_num(&j, "mb_per_s", mbs, 1);
            bench_json_int(&j, "reps", reps);
            bench_json_str(&j, "commit", bench_commit());
            bench_json_str(&j, "cpu", bench_cpu_flags());
            bench_json_end(&j);
        } else {
            printf("%-12s %8zu %10zu %12.1f %12.1f\n", s->name, len, pieces, ns, mbs);
        }
    }
    free(t);
    return rc;
}
