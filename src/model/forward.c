/*
 * forward.c - the forward pass over a batch of rows (token, position,
 * sequence) that may span several sequences, written once for every
 * architecture: what differs between them is data in model.h (which norms
 * a layer has, the activation, the RoPE layout and frequencies, windows,
 * biases, scales), never a branch on the architecture's name.
 *
 * One anvil_decode is one pool_run: every thread walks the same list of
 * phases, separated by pool_barrier, and takes its share of each phase
 * (tokens for per-row ops, weight rows for matmuls, (token, head) pairs for
 * attention). Per layer:
 *
 *   x  += ffn_post_norm(d)          (previous layer's FFN output; Gemma's
 *                                    post-norm when the layer has one)
 *   act = rmsnorm(x) * attn_norm -> activation format   (fused)
 *   qkv = Wqkv act (+ bias)         (one matmul over the stacked Q, K, V)
 *   q, k: per-head RMSNorm (Qwen 3, Gemma 3), RoPE (norm or NeoX pairs,
 *         partial rotary, per-layer frequencies); k, v -> cache
 *   attn = softmax(scale * q k^T) v over the row's own sequence, causal,
 *         within the layer's sliding window if it has one, with the
 *         layer's sink logits in the denominator (gpt-oss); or HP1 gated
 *         attention (attn/hp1/attn_hp1.h) on layers whose kind is hp1; or,
 *         on a bidirectional model (hp.bidir: gemma-embedding), both ways
 *         over the batch's own rows, nothing cached (bidir_attention)
 *   x  += attn_post_norm(Wo attn (+ bias)); act = rmsnorm(x) * ffn_norm -> act
 *   gu  = Wgu act                   (one matmul over stacked gate, up)
 *   act = silu(gate) * up  or  gelu_tanh(gate) * up -> activation format
 *   d   = Wdown act
 *   (a mixture-of-experts layer instead: model/moe.c writes d)
 *
 * then, for the rows that asked for logits only, x += ffn_post_norm(d),
 * the output norm, and lm_head (with the argmax fused into it); rows that
 * asked for embeddings (ANVIL_OUT_EMBD) stop after the output norm. No
 * allocation happens here: every buffer was sized in anvil_ctx_init.
 *
 * Profiling (anvil_ctx_set_profile): each thread reads the clock at the
 * phase boundaries above (after the barrier that closes a phase) and
 * charges the interval to matmul, attention (K/V writes included) or
 * norms and element-wise ops; off, each boundary costs one branch on a
 * value loaded once per pass.
 */
#include <math.h>
#include <string.h>

#include "model/ctx_int.h"
#include "model/moe.h"

static void matmul_rows(const struct anvil_ctx *c, const struct wmat *w, float *y, size_t ldy,
                        int n_tokens, int ith, int nth) {
    int r0, r1;
    pool_split(w->n_out, ith, nth, 16, &r0, &r1);
    wmat_matmul(c->m->ops, w, y, ldy, c->act, c->act_stride, n_tokens, r0, r1);
}

/* lm_head over this thread's vocabulary rows, LM_TILE rows at a time:
 * full-logits rows are copied out, and every row's running argmax is kept
 * per thread; thread 0 merges them after a barrier (lowest id wins ties, as
 * a left-to-right scan would). */
static void lm_head(struct anvil_ctx *c, int ith, int nth) {
    const struct anvil_model *m = c->m;
    int n_vocab = m->hp.n_vocab, no = c->n_logits;
    int r0, r1;
    pool_split(n_vocab, ith, nth, 16, &r0, &r1);
    float *tile = c->tile + (size_t)ith * c->n_outputs * LM_TILE;
    float *bv = c->best_v + (size_t)ith * c->n_outputs;
    int32_t *bi = c->best_i + (size_t)ith * c->n_outputs;
    for (int o = 0; o < no; o++) {
        bv[o] = -INFINITY;
        bi[o] = -1;
    }
    for (int a = r0; a < r1; a += LM_TILE) {
        int b = a + LM_TILE < r1 ? a + LM_TILE : r1;
        wmat_matmul_tile(m->ops, &m->output, tile, LM_TILE, c->act, c->act_stride, no, a, b);
        if (m->hp.logit_scale != 1.0f) { /* Granite: logits / logit_scale */
            float inv = 1.0f / m->hp.logit_scale;
            for (int o = 0; o < no; o++)
                for (int r = 0; r < b - a; r++) tile[(size_t)o * LM_TILE + r] *= inv;
        }
        for (int o = 0; o < no; o++) {
            const float *y = tile + (size_t)o * LM_TILE;
            for (int r = 0; r < b - a; r++)
                if (y[r] > bv[o]) { /* NaN never wins */
                    bv[o] = y[r];
                    bi[o] = a + r;
                }
            if (c->out_full[o])
                memcpy(c->logits + (size_t)o * n_vocab + a, y, (size_t)(b - a) * sizeof(float));
        }
    }
    pool_barrier(c->pool);
    if (ith != 0) return;
    for (int o = 0; o < no; o++) {
        float v = -INFINITY;
        int32_t best = -1;
        for (int t = 0; t < nth; t++) {
            float tv = c->best_v[(size_t)t * c->n_outputs + o];
            int32_t ti = c->best_i[(size_t)t * c->n_outputs + o];
            if (ti >= 0 && (best < 0 || tv > v)) { /* threads hold increasing ranges */
                v = tv;
                best = ti;
            }
        }
        c->argmax[o] = best;
    }
}

/* y += b (Wo's bias, gpt-oss) */
static void add_bias(float *y, const float *b, int n) {
    for (int i = 0; i < n; i++) y[i] += b[i];
}

/* Bias, per-head Q/K norms and RoPE on one row of qkv, in place. */
static void qk_prepare(const struct anvil_ctx *c, const struct model_layer *ly, float *q, int pos) {
    const struct model_hparams *hp = &c->m->hp;
    const struct kn_ops *ops = c->m->ops;
    int hd = hp->head_dim;
    float *k = q + c->q_dim;
    if (ly->qkv_bias)
        for (int i = 0; i < c->qkv_dim; i++) q[i] += ly->qkv_bias[i];
    if (ly->q_norm && hp->qk_norm_full) { /* OLMoE: one norm over all heads */
        ops->rmsnorm(q, q, ly->q_norm, c->q_dim, hp->norm_eps);
        ops->rmsnorm(k, k, ly->k_norm, c->kv_dim, hp->norm_eps);
    } else if (ly->q_norm) {
        for (int h = 0; h < hp->n_head; h++)
            ops->rmsnorm(q + (size_t)h * hd, q + (size_t)h * hd, ly->q_norm, hd, hp->norm_eps);
        for (int h = 0; h < hp->n_head_kv; h++)
            ops->rmsnorm(k + (size_t)h * hd, k + (size_t)h * hd, ly->k_norm, hd, hp->norm_eps);
    }
    if (hp->rope == MODEL_ROPE_NORM && hp->n_rot == hd) {
        ops->rope(q, hp->n_head, hd, pos, ly->inv_freq);
        ops->rope(k, hp->n_head_kv, hd, pos, ly->inv_freq);
    } else {
        int neox = hp->rope == MODEL_ROPE_NEOX;
        ops->rope_ext(q, hp->n_head, hd, hp->n_rot, pos, ly->inv_freq, neox);
        ops->rope_ext(k, hp->n_head_kv, hd, hp->n_rot, pos, ly->inv_freq, neox);
    }
}

/* A bidirectional model's attention (hp.bidir: every run is a whole
 * sequence from position 0, ctx.c checks), from the batch's own q, k, v
 * rows: no KV cache. This thread's share of the (run, head) pairs; per
 * pair, query tiles of BIDIR_TQ rows: S = Q K^T (the F32 matmul kernel,
 * K's rows as the weights), masked to |i - j| <= n_swa/2 on a windowed
 * layer, softmax per row, then O = P V with V transposed as the weights.
 * The kernel gives the same bits whatever the shape, so a sequence's
 * output does not depend on the batch it is in. */
static void bidir_attention(const struct anvil_ctx *c, const struct model_layer *ly, int ith,
                            int nth) {
    const struct model_hparams *hp = &c->m->hp;
    kn_matmul_fn mm = c->m->ops->matmul[ANVIL_TYPE_F32];
    int hd = hp->head_dim, qd = c->q_dim, group = hp->n_head / hp->n_head_kv;
    size_t ld = (size_t)c->qkv_dim, nb = (size_t)c->n_batch;
    float *s = c->bidir_s + (size_t)ith * ((size_t)BIDIR_TQ + hd) * nb, *vt = s + BIDIR_TQ * nb;
    int half = ly->n_swa > 0 ? ly->n_swa / 2 : -1;
    int p0, p1;
    pool_split(c->n_runs * hp->n_head, ith, nth, 1, &p0, &p1);
    for (int p = p0; p < p1; p++) {
        int r = p / hp->n_head, h = p % hp->n_head, g = h / group;
        int a0 = c->run_row0[r], n = c->run_n[r];
        const float *kp = c->qkv + (size_t)a0 * ld + qd + (size_t)g * hd;
        const float *vp = kp + c->kv_dim;
        for (int t = 0; t < n; t++)
            for (int i = 0; i < hd; i++) vt[(size_t)i * n + t] = vp[(size_t)t * ld + i];
        for (int q0 = 0; q0 < n; q0 += BIDIR_TQ) {
            int nq = n - q0 < BIDIR_TQ ? n - q0 : BIDIR_TQ;
            const float *qp = c->qkv + (size_t)(a0 + q0) * ld + (size_t)h * hd;
            mm(s, (size_t)n, kp, ld * sizeof(float), qp, ld * sizeof(float), hd, nq, 0, n);
            for (int t = 0; t < nq; t++) {
                float *st = s + (size_t)t * n, mx = -INFINITY, sum = 0.0f;
                int lo = 0, hi = n, qi = q0 + t;
                if (half >= 0) {
                    lo = qi - half > 0 ? qi - half : 0;
                    hi = qi + half + 1 < n ? qi + half + 1 : n;
                }
                for (int k = 0; k < n; k++) {
                    st[k] = k >= lo && k < hi ? st[k] * hp->attn_scale : -INFINITY;
                    if (st[k] > mx) mx = st[k];
                }
                for (int k = 0; k < n; k++) {
                    st[k] = k >= lo && k < hi ? expf(st[k] - mx) : 0.0f;
                    sum += st[k];
                }
                float inv = 1.0f / sum;
                for (int k = lo; k < hi; k++) st[k] *= inv;
            }
            mm(c->attn + (size_t)(a0 + q0) * qd + (size_t)h * hd, (size_t)qd, vt,
               (size_t)n * sizeof(float), s, (size_t)n * sizeof(float), n, nq, 0, hd);
        }
    }
}

/* Profiling (anvil.h, ANVIL_PROF_*): the time since the last mark goes to
 * category k of this thread's counters. PROF_MARK is one predictable
 * branch when profiling is off. */
_Static_assert(ANVIL_PROF_MATMUL == 0 && ANVIL_PROF_ATTN == 1 && ANVIL_PROF_NORM == 2 &&
                   ANVIL_PROF_ROUTER == 3 && ANVIL_PROF_EXPERTS == 4 &&
                   ANVIL_PROF_SCATTER == 5 && CTX_PROF_FWD == 6,
               "the forward pass's categories are the first six of anvil_prof_cat");

#define PROF_MARK(k) \
    do { \
        if (prof) ctx_prof_mark(prof_th, (k), &prof_t); \
    } while (0)

static void forward_worker(void *arg, int ith, int nth) {
    struct anvil_ctx *c = arg;
    const struct anvil_model *m = c->m;
    const struct model_hparams *hp = &m->hp;
    const struct kn_ops *ops = m->ops;
    const struct anvil_batch *b = c->b;
    int n = b->n_tokens, ne = hp->n_embd;
    float eps = hp->norm_eps;
    float *nrm = c->nrm + (size_t)ith * c->max_dim;
    int t0, t1;
    pool_split(n, ith, nth, 1, &t0, &t1);
    const bool prof = c->prof_on;
    struct ctx_prof_th *prof_th = &c->prof_th[ith];
    double prof_t = 0.0;
    if (prof) {
        prof_t = time_now_s();
        prof_th->n_reads++;
    }

    for (int t = t0; t < t1; t++) {
        float *x = c->x + (size_t)t * ne;
        kn_dequantize_row(m->tok_embd_type, m->tok_embd + (size_t)b->token[t] * m->tok_embd_row_bytes,
                          x, ne);
        if (hp->embd_scale != 1.0f)
            for (int i = 0; i < ne; i++) x[i] *= hp->embd_scale;
    }

    for (int l = 0; l < hp->n_layer; l++) {
        const struct model_layer *ly = &m->layers[l];
        const float *prev_post = l > 0 ? m->layers[l - 1].ffn_post_norm : NULL;
        int g = c->layer_kv[l], li = c->layer_idx[l];
        /* attention norm (fused with the previous layer's residual add) */
        for (int t = t0; t < t1; t++) {
            float *x = c->x + (size_t)t * ne;
            uint8_t *a = c->act + (size_t)t * c->act_stride;
            if (l == 0) {
                ops->rmsnorm_act(a, x, ly->attn_norm, ne, eps, ly->wqkv.act);
            } else {
                float *d = c->tmp + (size_t)t * ne;
                if (prev_post) ops->rmsnorm(d, d, prev_post, ne, eps);
                if (hp->residual_scale != 1.0f)
                    for (int i = 0; i < ne; i++) d[i] *= hp->residual_scale;
                ops->add_rmsnorm(x, d, nrm, ly->attn_norm, ne, eps);
                ops->act[ly->wqkv.act](a, nrm, ne);
            }
        }
        pool_barrier(c->pool);
        PROF_MARK(ANVIL_PROF_NORM);
        matmul_rows(c, &ly->wqkv, c->qkv, (size_t)c->qkv_dim, n, ith, nth);
        pool_barrier(c->pool);
        PROF_MARK(ANVIL_PROF_MATMUL);

        /* bias, Q/K norms, RoPE on this thread's rows, then their K and V
         * into the layer's cache */
        for (int t = t0; t < t1; t++) qk_prepare(c, ly, c->qkv + (size_t)t * c->qkv_dim, b->pos[t]);
        PROF_MARK(ANVIL_PROF_NORM);
        if (hp->bidir) { /* the batch's own rows, both ways: no cache */
            pool_barrier(c->pool);
            bidir_attention(c, ly, ith, nth);
            pool_barrier(c->pool);
            PROF_MARK(ANVIL_PROF_ATTN);
        } else {
            for (int r = 0; r < c->n_runs; r++) {
                int a0 = c->run_row0[r], a1 = a0 + c->run_n[r];
                int lo = a0 > t0 ? a0 : t0, hi = a1 < t1 ? a1 : t1;
                if (lo >= hi) continue;
                const float *k = c->qkv + (size_t)lo * c->qkv_dim + c->q_dim;
                kv_write(c->kv[g], li, c->run_seq[r], b->pos[lo], hi - lo, k, (size_t)c->qkv_dim,
                         k + c->kv_dim, (size_t)c->qkv_dim);
            }
            /* attention: planned by thread 0 in the same phase (the plan reads
             * only block tables and positions, never the K/V being written),
             * run by all */
            if (ith == 0) {
                anvil_status ast =
                    ly->attn == MODEL_ATTN_HP1
                        ? kv_attn_prepare_hp1(c->kv[g], c->hp1_ops, &ly->hp1, KN_HP1_PV_SPARSE, li,
                                              c->run_attn, c->n_runs, (size_t)c->qkv_dim,
                                              (size_t)c->q_dim, nth, KV_SPLIT_AUTO, hp->attn_scale,
                                              &c->job)
                        : kv_attn_prepare(c->kv[g], c->attn_ops[g], li, c->run_attn, c->n_runs,
                                          (size_t)c->qkv_dim, (size_t)c->q_dim, nth, KV_SPLIT_AUTO,
                                          hp->attn_scale, &c->job);
                ANVIL_ASSERT(ast == ANVIL_OK);
                if (ly->attn_sinks) kv_attn_job_set_sinks(c->job, ly->attn_sinks);
            }
            pool_barrier(c->pool);
            kv_attn_work(c->job, c->pool, ith, nth);
            pool_barrier(c->pool);
            PROF_MARK(ANVIL_PROF_ATTN);
        }

        for (int t = t0; t < t1; t++)
            ops->act[ly->wo.act](c->act + (size_t)t * c->act_stride, c->attn + (size_t)t * c->q_dim,
                                 c->q_dim);
        pool_barrier(c->pool);
        PROF_MARK(ANVIL_PROF_NORM);
        matmul_rows(c, &ly->wo, c->tmp, (size_t)ne, n, ith, nth);
        pool_barrier(c->pool);
        PROF_MARK(ANVIL_PROF_MATMUL);

        /* x += attention output (post-normed when the layer says); FFN norm */
        for (int t = t0; t < t1; t++) {
            float *d = c->tmp + (size_t)t * ne;
            if (ly->wo_bias) add_bias(d, ly->wo_bias, ne);
            if (ly->attn_post_norm) ops->rmsnorm(d, d, ly->attn_post_norm, ne, eps);
            if (hp->residual_scale != 1.0f)
                for (int i = 0; i < ne; i++) d[i] *= hp->residual_scale;
            if (ly->moe) {
                ops->add_rmsnorm(c->x + (size_t)t * ne, d, moe_input_row(c, t), ly->ffn_norm, ne, eps);
                moe_prepare_row(c, ly, t);
                continue;
            }
            ops->add_rmsnorm(c->x + (size_t)t * ne, d, nrm, ly->ffn_norm, ne, eps);
            ops->act[ly->wgu.act](c->act + (size_t)t * c->act_stride, nrm, ne);
        }
        pool_barrier(c->pool);
        PROF_MARK(ANVIL_PROF_NORM);
        if (ly->moe) { /* model/moe.c: router, experts, weighted sum -> tmp */
            moe_ffn(c, ly, ith, nth, prof ? &prof_t : NULL);
            /* its rows are this thread's; the output rows below are not */
            if (l == hp->n_layer - 1) pool_barrier(c->pool);
            PROF_MARK(ANVIL_PROF_SCATTER);
            continue;
        }
        matmul_rows(c, &ly->wgu, c->gu, 2 * (size_t)hp->n_ff, n, ith, nth);
        pool_barrier(c->pool);
        PROF_MARK(ANVIL_PROF_MATMUL);

        for (int t = t0; t < t1; t++) {
            const float *gt = c->gu + (size_t)t * 2 * hp->n_ff;
            uint8_t *a = c->act + (size_t)t * c->act_stride;
            if (hp->act == MODEL_ACT_GELU_TANH)
                ops->gelu_mul_act(a, gt, gt + hp->n_ff, hp->n_ff, ly->wdown.act);
            else
                ops->silu_mul_act(a, gt, gt + hp->n_ff, hp->n_ff, ly->wdown.act);
        }
        pool_barrier(c->pool);
        PROF_MARK(ANVIL_PROF_NORM);
        matmul_rows(c, &ly->wdown, c->tmp, (size_t)ne, n, ith, nth);
        pool_barrier(c->pool);
        PROF_MARK(ANVIL_PROF_MATMUL);
    }

    /* final residual add and output norm, for the logits rows only */
    const float *last_post = m->layers[hp->n_layer - 1].ffn_post_norm;
    int o0, o1;
    pool_split(c->n_logits, ith, nth, 1, &o0, &o1);
    for (int o = o0; o < o1; o++) {
        int t = c->out_row[o];
        float *d = c->tmp + (size_t)t * ne;
        if (last_post) ops->rmsnorm(d, d, last_post, ne, eps);
        if (hp->residual_scale != 1.0f)
            for (int i = 0; i < ne; i++) d[i] *= hp->residual_scale;
        if (c->out_embd) { /* embeddings: the normed hidden state is the output */
            ops->add_rmsnorm(c->x + (size_t)t * ne, d, c->embd + (size_t)o * ne, m->output_norm,
                             ne, eps);
            continue;
        }
        ops->add_rmsnorm(c->x + (size_t)t * ne, d, nrm, m->output_norm, ne, eps);
        ops->act[m->output.act](c->act + (size_t)o * c->act_stride, nrm, ne);
    }
    pool_barrier(c->pool);
    PROF_MARK(ANVIL_PROF_NORM);
    if (c->out_embd) return;
    lm_head(c, ith, nth);
    PROF_MARK(ANVIL_PROF_MATMUL);
}

void forward_run(struct anvil_ctx *c) { pool_run(c->pool, forward_worker, c); }
