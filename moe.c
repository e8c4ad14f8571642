// moe.c — the mixture-of-experts feed-forward block (see moe.h), and the host
// arithmetic of its backend ops.
#include "moe.h"

#include <math.h>
#include <string.h>

#define N_BUFS 10

// The sizes of moe_ctx's buffers, in carving order.
static void scratch_sizes(const moe_cfg *c, int max_tokens, size_t sz[N_BUFS]) {
    const size_t n = (size_t)max_tokens, rows = n * (size_t)c->k, f = sizeof(float), i4 = sizeof(int32_t);
    const size_t s[N_BUFS] = {n * c->n_exp * f, rows * i4, rows * f, ((size_t)c->n_exp + 1) * i4,
                              (size_t)c->n_exp * i4, rows * i4, rows * i4, rows * c->ffn * f, rows * c->ffn * f,
                              rows * c->dim * f};
    memcpy(sz, s, sizeof s);
}

static size_t align64(size_t b) { return (b + 63) & ~(size_t)63; }

size_t moe_scratch_bytes(const moe_cfg *c, int max_tokens) {
    size_t sz[N_BUFS], total = 0;
    scratch_sizes(c, max_tokens, sz);
    for (int i = 0; i < N_BUFS; i++) total += align64(sz[i]);
    return total;
}

void moe_init(moe_ctx *mc, const moe_cfg *c, const backend_ops *ops, backend *be, void *mem, int max_tokens) {
    *mc = (moe_ctx){.cfg = *c, .ops = ops, .be = be};
    mc->map.n_exp = c->n_exp;
    mc->map.k = c->k;
    void **bufs[N_BUFS] = {(void **)&mc->logits, (void **)&mc->ids, (void **)&mc->w, (void **)&mc->map.offsets,
                           (void **)&mc->map.active, (void **)&mc->map.tok, (void **)&mc->map.pos,
                           (void **)&mc->g, (void **)&mc->u, (void **)&mc->y};
    size_t sz[N_BUFS];
    scratch_sizes(c, max_tokens, sz);
    char *p = mem;
    for (int i = 0; i < N_BUFS; i++) *bufs[i] = p, p += align64(sz[i]);
}

// router → top-k → experts' gate and up (sorted rows) → GLU → down → weighted
// sum. Rows of one expert are contiguous from moe_group on, so each
// moe_matmul reads a chosen expert's weights once for all its rows.
void moe_ffn(moe_ctx *mc, const moe_weights *w, float *out, const float *x, int n, int n_joint) {
    const moe_cfg *c = &mc->cfg;
    const backend_ops *o = mc->ops;
    backend *b = mc->be;
    mc->map.n_rows = n * c->k;
    mc->map.n_joint = n_joint < 0 ? 0 : n_joint > n ? n : n_joint;
    o->matmul(b, mc->logits, &w->router, x, n, 0);
    if (w->router_b.data) o->add_bias(b, mc->logits, &w->router_b, n, c->n_exp);
    o->moe_route(b, mc->ids, mc->w, mc->logits, n, c->n_exp, c->k, c->gating);
    o->moe_group(b, &mc->map, mc->ids);
    o->moe_matmul(b, (float *const[]){mc->g, mc->u}, (const qmat *const[]){&w->gate, &w->up},
                  (const qmat *const[]){&w->gate_b, &w->up_b}, 2, x, 1, &mc->map);
    const size_t len = (size_t)mc->map.n_rows * c->ffn;
    if (c->oai_glu) o->swiglu_oai(b, mc->g, mc->g, mc->u, len, c->alpha, c->limit);
    else o->swiglu(b, mc->g, mc->g, mc->u, mc->map.n_rows, c->ffn);
    o->moe_matmul(b, &mc->y, (const qmat *const[]){&w->down}, (const qmat *const[]){&w->down_b}, 1, mc->g, 0, &mc->map);
    o->moe_combine(b, out, mc->y, mc->w, &mc->map, c->dim);
}

// ---- host arithmetic ------------------------------------------------------------

// x[0..n) = softmax(x) as ggml computes it: e^(x - max) summed in double,
// then scaled by 1/sum.
static void softmax(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] = expf(x[i] - mx));
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

// ids[0..k) = the k largest of l[0..n) in descending order (ties: lower index).
static void top_k(const float *l, int n, int k, int32_t *ids) {
    unsigned char taken[MOE_MAX_EXPERTS] = {0};
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int e = 0; e < n; e++)
            if (!taken[e] && (best < 0 || l[e] > l[best])) best = e;
        ids[j] = best;
        taken[best] = 1;
    }
}

void moe_route_rows(int32_t *ids, float *w, const float *logits, int n, int n_exp, int k, int gating) {
    float p[MOE_MAX_EXPERTS];
    for (int i = 0; i < n; i++) {
        const float *l = logits + (size_t)i * n_exp;
        int32_t *id = ids + (size_t)i * k;
        float *wi = w + (size_t)i * k;
        top_k(l, n_exp, k, id);
        if (gating == MOE_TOPK_SOFTMAX) {
            for (int j = 0; j < k; j++) wi[j] = l[id[j]];
            softmax(wi, k);
            continue;
        }
        memcpy(p, l, sizeof(float) * (size_t)n_exp);
        softmax(p, n_exp);
        double sum = 0;
        for (int j = 0; j < k; j++) sum += (double)(wi[j] = p[id[j]]);
        const float s = (float)sum < 6.103515625e-5f ? 6.103515625e-5f : (float)sum;  // llama.cpp's clamp
        for (int j = 0; j < k; j++) wi[j] /= s;
    }
}

void moe_group_rows(const moe_map *mp, const int32_t *ids) {
    const int ne = mp->n_exp;
    int32_t next[MOE_MAX_EXPERTS];  // the next free row of each expert
    for (int e = 0; e <= ne; e++) mp->offsets[e] = 0;
    for (int s = 0; s < mp->n_rows; s++) mp->offsets[ids[s] + 1]++;
    int na = 0;
    for (int e = 0; e < ne; e++) {
        if (mp->offsets[e + 1]) mp->active[na++] = e;  // still expert e's count here
        mp->offsets[e + 1] += mp->offsets[e];
        next[e] = mp->offsets[e];
    }
    for (int e = na; e < ne; e++) mp->active[e] = -1;
    for (int s = 0; s < mp->n_rows; s++) {
        const int p = next[ids[s]]++;
        mp->pos[s] = p;
        mp->tok[p] = s / mp->k;
    }
}

void moe_combine_rows(float *out, const float *y, const float *w, const moe_map *mp, int dim, int i0, int i1) {
    const int k = mp->k;
    for (int i = i0; i < i1; i++) {
        float *o = out + (size_t)i * dim;
        const float *wi = w + (size_t)i * k;
        const float *y0 = y + (size_t)mp->pos[(size_t)i * k] * dim;
        for (int d = 0; d < dim; d++) o[d] = y0[d] * wi[0];
        for (int j = 1; j < k; j++) {
            const float *yj = y + (size_t)mp->pos[(size_t)i * k + j] * dim;
            for (int d = 0; d < dim; d++) o[d] += yj[d] * wi[j];
        }
    }
}
