// moe.h — the mixture-of-experts feed-forward block: a router picks k of
// n_exp expert FFNs per token, and the block returns their weighted sum.
//
// Done as the hardware wants it: the pass's token × choice slots are sorted
// by expert (backend's moe_group), so each chosen expert's weights are read
// once per pass with all of its rows (backend's moe_matmul), and a decode
// step reads only the k chosen experts. Everything runs through backend ops
// on backend memory, so a device picks the experts itself (no host round
// trip) and the block can be recorded in a backend graph.
#ifndef QUILL_MOE_H
#define QUILL_MOE_H

#include <math.h>

#include "backend.h"

#define MOE_MAX_EXPERTS 1024  // experts a layer may have (arch.c checks)

// One layer's expert weights (model.c loads them).
typedef struct {
    qmat router;              // ffn_gate_inp: [n_exp, dim]
    qmat router_b;            // its bias [n_exp] (gpt-oss; data NULL when absent)
    qmat gate, up;            // ffn_{gate,up}_exps: n_exp stacked [ffn, dim] -> [n_exp·ffn, dim]
    qmat down;                // ffn_down_exps: n_exp stacked [dim, ffn] -> [n_exp·dim, ffn]
    qmat gate_b, up_b, down_b;  // expert biases [n_exp, ffn], [n_exp, ffn], [n_exp, dim] (gpt-oss; data NULL when absent)
} moe_weights;

typedef struct {
    int n_exp;      // experts
    int k;          // experts used per token
    int ffn;        // hidden width of one expert
    int dim;        // model width
    int gating;     // enum moe_gating (backend.h)
    int oai_glu;    // 0: silu(gate)·up; 1: gpt-oss's clamped SwiGLU with alpha, limit
    float alpha, limit;
} moe_cfg;

// The block's activations for up to max_tokens tokens, carved from backend
// memory the model owns (moe_scratch_bytes of it).
typedef struct {
    moe_cfg cfg;
    const backend_ops *ops;
    backend *be;
    float *logits;   // [max_tokens, n_exp] router logits
    int32_t *ids;    // [max_tokens, k] chosen experts
    float *w;        // [max_tokens, k] their weights
    moe_map map;     // the slots sorted by expert
    float *g, *u;    // [max_tokens·k, ffn] expert gate / up projections, sorted rows
    float *y;        // [max_tokens·k, dim] expert outputs, sorted rows
} moe_ctx;

size_t moe_scratch_bytes(const moe_cfg *c, int max_tokens);
void moe_init(moe_ctx *mc, const moe_cfg *c, const backend_ops *ops, backend *be, void *mem, int max_tokens);

// out [n, dim] = Σ_j w_j · expert_j(x) for each of n <= max_tokens rows of x
// [n, dim] (the normed FFN input); rows 0 .. n_joint-1 are a prompt's (see
// backend.h's matmul and moe_matmul). out may equal x.
void moe_ffn(moe_ctx *mc, const moe_weights *w, float *out, const float *x, int n, int n_joint);

// ---- the host arithmetic of the ops (cpu.c's moe ops, and the tests) ----------

// backend.h's moe_route on host memory.
void moe_route_rows(int32_t *ids, float *w, const float *logits, int n, int n_exp, int k, int gating);
// backend.h's moe_group on host memory.
void moe_group_rows(const moe_map *mp, const int32_t *ids);
// backend.h's moe_combine for output rows [i0, i1).
void moe_combine_rows(float *out, const float *y, const float *w, const moe_map *mp, int dim, int i0, int i1);
// backend.h's swiglu_oai for one value.
static inline float moe_swiglu_oai(float gate, float up, float alpha, float limit) {
    const float g = gate < limit ? gate : limit;
    const float u = up < -limit ? -limit : up > limit ? limit : up;
    return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}

#endif
