/*
 * bench_route.c - routing statistics beside the speed (bench_route.h).
 */
#include <stdio.h>
#include <string.h>

#include "bench_route.h"
#include "core/core.h"

int32_t bench_route_get_ctx(const void *ctx, int32_t layer, struct anvil_route_stats *out,
                            uint64_t *counts, int32_t cap) {
    return anvil_ctx_get_route_stats(ctx, layer, out, counts, cap);
}

bool bench_route_init(struct bench_route *r, const struct anvil_model *m, const void *h,
                      bench_route_get_fn get) {
    memset(r, 0, sizeof(*r));
    r->n_layer = anvil_model_n_layer(m);
    for (int l = 0; l < r->n_layer && r->n_expert == 0; l++) {
        int32_t n = get(h, l, NULL, NULL, 0);
        r->n_expert = n < 0 ? -n : n;
    }
    if (r->n_expert == 0) return true;
    r->st = core_calloc((size_t)r->n_layer, sizeof(*r->st));
    r->cnt = core_calloc((size_t)r->n_layer * (size_t)r->n_expert, sizeof(uint64_t));
    return r->st && r->cnt;
}

void bench_route_free(struct bench_route *r) {
    core_free(r->st);
    core_free(r->cnt);
    memset(r, 0, sizeof(*r));
}

void bench_route_add(struct bench_route *r, const void *h, bench_route_get_fn get) {
    if (r->n_expert == 0 || !r->st) return;
    uint64_t cnt[4096]; /* the loader's bound on n_expert (model/moe_bind.c) */
    for (int l = 0; l < r->n_layer; l++) {
        struct anvil_route_stats s;
        if (get(h, l, &s, cnt, 4096) != r->n_expert) continue; /* a layer without experts */
        struct anvil_route_stats *a = &r->st[l];
        a->n_steps += s.n_steps;
        a->n_rows += s.n_rows;
        a->touched += s.touched;
        a->step_max += s.step_max;
        a->rows_big += s.rows_big;
        for (int e = 0; e < r->n_expert; e++) r->cnt[(size_t)l * r->n_expert + e] += cnt[e];
    }
}

/* ---------------------------------------------------------------------- */
/* summaries */

struct route_sum {
    uint64_t steps;       /* of the (first) layer: decodes counted */
    double min, mean, max; /* rows per expert per step */
    double imb;           /* max / mean */
    double unused;        /* share of experts (cells) no row chose */
    double touched;       /* experts a step touched */
    double per_touched;   /* rows per touched expert per step */
    double step_max;      /* the most rows one expert got in a step, on average */
    double big;           /* share of rows in groups of >= 16 */
    int n_layers;
};

/* Layers [l0, l1) pooled: their (layer, expert) cells, each as rows per
 * step; the per-step numbers as means over the layers. */
static struct route_sum summarize(const struct bench_route *r, int l0, int l1) {
    struct route_sum s = {0};
    double sum = 0.0, touched = 0.0, step_max = 0.0;
    uint64_t rows = 0, tch = 0, big = 0, cells = 0, zero = 0;
    bool any = false;
    for (int l = l0; l < l1; l++) {
        const struct anvil_route_stats *a = &r->st[l];
        if (a->n_steps == 0) continue;
        if (s.n_layers++ == 0) s.steps = a->n_steps;
        for (int e = 0; e < r->n_expert; e++) {
            uint64_t c = r->cnt[(size_t)l * r->n_expert + e];
            double v = (double)c / (double)a->n_steps;
            if (!any || v < s.min) s.min = v;
            if (!any || v > s.max) s.max = v;
            any = true;
            sum += v;
            rows += c;
            cells++;
            zero += c == 0;
        }
        tch += a->touched;
        big += a->rows_big;
        touched += (double)a->touched / (double)a->n_steps;
        step_max += (double)a->step_max / (double)a->n_steps;
    }
    if (!cells) return s;
    s.mean = sum / (double)cells;
    s.imb = s.mean > 0.0 ? s.max / s.mean : 0.0;
    s.unused = (double)zero / (double)cells;
    s.touched = touched / s.n_layers;
    s.step_max = step_max / s.n_layers;
    s.per_touched = tch ? (double)rows / (double)tch : 0.0;
    s.big = rows ? (double)big / (double)rows : 0.0;
    return s;
}

void bench_route_json(struct bench_json *j, const struct bench_route *r) {
    if (r->n_expert == 0 || !r->st) return;
    struct route_sum s = summarize(r, 0, r->n_layer);
    bench_json_int(j, "route_n_expert", r->n_expert);
    bench_json_int(j, "route_steps", (long long)s.steps);
    bench_json_num(j, "route_rows_per_expert_min", s.min, 3);
    bench_json_num(j, "route_rows_per_expert_mean", s.mean, 3);
    bench_json_num(j, "route_rows_per_expert_max", s.max, 3);
    bench_json_num(j, "route_imbalance", s.imb, 4);
    bench_json_num(j, "route_unused_share", s.unused, 4);
    bench_json_num(j, "route_experts_per_step", s.touched, 3);
    bench_json_num(j, "route_rows_per_touched_expert", s.per_touched, 3);
    bench_json_num(j, "route_step_max_rows", s.step_max, 3);
    bench_json_num(j, "route_rows_big_share", s.big, 4);
    int n = r->n_layer;
    double *v = core_malloc((size_t)n * 6 * sizeof(double));
    int32_t *ci = core_malloc((size_t)n * (size_t)r->n_expert * sizeof(int32_t) + 4);
    if (v && ci) {
        for (int l = 0; l < n; l++) {
            struct route_sum ls = summarize(r, l, l + 1);
            v[l] = (double)r->st[l].n_rows;
            v[n + l] = ls.imb;
            v[2 * n + l] = ls.unused;
            v[3 * n + l] = ls.touched;
            v[4 * n + l] = ls.min;
            v[5 * n + l] = ls.max;
        }
        bench_json_nums(j, "route_layer_rows", v, n, 0);
        bench_json_nums(j, "route_layer_imbalance", v + n, n, 4);
        bench_json_nums(j, "route_layer_unused_share", v + 2 * n, n, 4);
        bench_json_nums(j, "route_layer_experts_per_step", v + 3 * n, n, 3);
        bench_json_nums(j, "route_layer_rows_per_expert_min", v + 4 * n, n, 3);
        bench_json_nums(j, "route_layer_rows_per_expert_max", v + 5 * n, n, 3);
        size_t nc = (size_t)n * (size_t)r->n_expert;
        for (size_t i = 0; i < nc; i++)
            ci[i] = r->cnt[i] > INT32_MAX ? INT32_MAX : (int32_t)r->cnt[i];
        bench_json_int_rows(j, "route_counts", ci, n, r->n_expert);
    }
    core_free(v);
    core_free(ci);
}

static void row(const char *test, const char *layer, const struct route_sum *s) {
    printf("| %-24s | %5s | %6.2f / %8.2f / %8.2f | %6.3f | %6.1f%% | %8.1f | %8.2f | %8.2f | %6.1f%% |\n",
           test, layer, s->min, s->mean, s->max, s->imb, 100.0 * s->unused, s->touched,
           s->per_touched, s->step_max, 100.0 * s->big);
}

void bench_route_table(const char *const *tests, const struct bench_route *r, int n) {
    bool any = false;
    for (int i = 0; i < n; i++) any = any || (r[i].n_expert > 0 && r[i].st);
    if (!any) return;
    printf("\nrouting: rows per expert per step (min / mean / max over the experts), imbalance "
           "(max / mean), experts no row chose, experts a step touched, rows per touched "
           "expert, the most rows of one expert in a step, rows in groups of >= 16 (the packed "
           "prefill kernels' size); per MoE layer and over all of them. A random-weight model "
           "(bench/moe_shape.py) routes by its random router, not by what the tokens mean: "
           "expected near uniform, but the Qwen3 shape's deeper layers send most rows of a "
           "prompt to one expert (bench/results/route-qwen3shape-2026-12-03.txt); neither is "
           "a trained model's routing.\n\n");
    printf("| %-24s | %5s | %-28s | %6s | %7s | %8s | %8s | %8s | %7s |\n", "test", "layer",
           "rows/expert/step min/mean/max", "imbal", "unused", "touched", "rows/tch",
           "step max", ">=16");
    printf("|--------------------------|-------|------------------------------|--------|---------|"
           "----------|----------|----------|---------|\n");
    for (int i = 0; i < n; i++) {
        if (r[i].n_expert == 0 || !r[i].st) continue;
        char name[16];
        for (int l = 0; l < r[i].n_layer; l++) {
            struct route_sum s = summarize(&r[i], l, l + 1);
            if (!s.n_layers) continue;
            snprintf(name, sizeof(name), "%d", l);
            row(tests[i], name, &s);
        }
        struct route_sum s = summarize(&r[i], 0, r[i].n_layer);
        row(tests[i], "all", &s);
    }
    fflush(stdout);
}
