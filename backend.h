// backend.h — the op table the forward pass is written against.
//
// model.c computes a transformer layer as a fixed sequence of these ops and
// never branches on which backend runs them. cpu.c implements them (the
// reference); kernels*.cu implement the same table for CUDA. All
// activation pointers are backend memory (host memory for the CPU backend);
// activation tensors are row-major float32 with one row per token.
#ifndef QUILL_BACKEND_H
#define QUILL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

// A weight as stored in the GGUF file: rows × cols elements of `type`,
// row-major (GGUF ne[0] = cols, ne[1] = rows). Vectors (norms, biases) have
// rows = 1. data is backend-readable: the mmap for the CPU backend, or the
// copy its upload made with 8 rows interleaved (x8).
typedef struct {
    uint32_t type;      // enum qtype
    int64_t rows, cols;
    size_t row_bytes;
    const void *data;
    int x8;             // data is in quant.h's x8 layout (the CPU backend's upload)
    int lookup;         // only single rows are read (an untied embedding): no upload repacks it
} qmat;

// Rotary embedding parameters of one layer, as ggml's rope_ext takes them.
// Pair p (0 <= p < n_rot/2) of a token at position pos turns by
//   θ_extrap = pos · base^(-2p/n_rot) / freq_factors[p],  θ_interp = freq_scale · θ_extrap,
//   θ = θ_interp·(1 - ramp) + θ_extrap·ramp,  ramp = ext_factor · (1 - clamp((p - corr_lo) / max(0.001, corr_hi - corr_lo), 0, 1))
// and cos θ, sin θ are scaled by attn_factor (times 1 + 0.1·ln(1/freq_scale)
// where ext_factor != 0: YaRN's mscale).
typedef struct {
    int n_rot;              // dimensions rotated per head (<= head_dim: the rest pass unchanged)
    int neox;               // 0: rotate pairs (2i, 2i+1) (llama); 1: pairs (i, i+n_rot/2) (qwen2/3)
    float base;             // theta base
    float freq_scale;       // 1 / linear (or YaRN) scaling factor (1: none)
    float attn_factor;      // scales cos and sin (1: none; LongRoPE's attention factor, YaRN's mscale)
    float ext_factor;       // YaRN extrapolation mix (0: none, 1: YaRN)
    float corr_lo, corr_hi; // YaRN correction range in pairs (see arch.c's yarn_corr_dims)
    const float *freq_factors;  // [n_rot/2] divisors of each frequency (Llama-3 rope_freqs, LongRoPE), or NULL; backend memory
} rope_cfg;

// How one layer attends (besides its shapes).
typedef struct {
    float scale;            // multiplies q·k (1/sqrt(head_dim) unless the architecture says otherwise)
    int window;             // > 0: a token at position p sees positions p-window+1 .. p only (sliding window)
    const float *sinks;     // [n_heads] one extra logit per head in every softmax row (gpt-oss), or NULL; backend memory
} attn_cfg;

// The KV cache is paged: each layer's K and V are pools of KV_BLOCK-position
// blocks, n_blocks * KV_BLOCK rows each, so a sequence's positions need not
// be contiguous and sequences can share the blocks of a common prefix. A
// sequence's block table lists its blocks in position order: position p
// lives in pool row table[p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK.
#define KV_BLOCK 16

// What a pool row holds: one position's kv_dim values (n_kv_heads × head_dim)
// of one layer's K or V.
//   KV_F16: kv_dim fp16 values (what llama.cpp keeps by default).
//   KV_Q8:  kv_dim int8 values q, then kv_dim/32 fp16 scales d, one per 32
//           consecutive values (ggml's q8_0 rounding: d = amax/127,
//           q = round(x/d) half away from zero; the value is d·q), the row
//           padded to 16 bytes. About half the bytes, so half the KV
//           traffic of a long-context decode step. Needs head_dim % 32 == 0.
enum kv_type { KV_F16, KV_Q8 };
static inline size_t kv_row_bytes(int type, int kv_dim) {
    return type == KV_Q8 ? ((size_t)kv_dim + (size_t)kv_dim / 16 + 15) / 16 * 16 : 2 * (size_t)kv_dim;
}

// Prompt rows are multiplied in tiles of this many consecutive positions
// (see matmul), so a prompt split into pieces at multiples of it (chunked
// prefill, a shared or cached prefix) computes exactly what one pass over
// the whole prompt computes.
#define PREFILL_TILE 64

// The tokens of one forward pass: n tokens from one or more sequences. The
// arrays are backend memory (the model writes them with to_device). Token i
// sits at position pos[i] of the sequence whose block table is row seq[i] of
// tables, and attends to positions 0..pos[i] of that sequence; the pass
// stores every token's K and V before any token attends, so tokens of one
// sequence in one pass see each other causally.
typedef struct {
    int n;                  // tokens in the pass
    int n_seqs;             // rows of tables
    int max_blocks;         // columns of tables (row stride)
    int max_len;            // max(pos[i]) + 1 over the pass (host value: sizes work splits)
    int n_prompt;           // leading tokens that are one prompt's consecutive tokens (host value)
    const int32_t *ids;     // [n] token ids
    const int32_t *pos;     // [n] position of each token in its sequence
    const int32_t *seq;     // [n] row of tables holding each token's block table
    const int32_t *slot;    // [n] pool row that receives each token's K and V
    const int32_t *tables;  // [n_seqs, max_blocks] block ids
} fwd_batch;

// Router gating functions (backend's moe_route).
enum moe_gating { MOE_SOFTMAX_NORM, MOE_TOPK_SOFTMAX };

// A pass's n·k expert slots sorted by expert (moe_group writes the arrays,
// backend memory): sorted row p belongs to expert e for offsets[e] <= p <
// offsets[e + 1]; active lists the experts with rows, in id order, then -1.
typedef struct {
    int n_exp;         // experts
    int k;             // experts per token
    int n_rows;        // slots: tokens × k (host value)
    int n_joint;       // tokens 0 .. n_joint-1 are a prompt's (matmul's n_joint; host value)
    int32_t *offsets;  // [n_exp + 1]
    int32_t *active;   // [n_exp]
    int32_t *tok;      // [n_rows] the token (row of the FFN input) of sorted row p
    int32_t *pos;      // [n_rows] the sorted row of slot i·k + j
} moe_map;

typedef struct backend backend;  // backend-private state: threads, scratch, handles

// The sampler settings a backend's `sample` op understands (sample.h's
// sampler_params without the repetition penalty, which needs the history).
typedef struct {
    float temp;   // <= 0: greedy
    int top_k;    // <= 0: off
    float top_p;  // >= 1: off
    float min_p;  // <= 0: off
} sample_cfg;

#define BACKEND_GRAPHS 16  // graph keys a backend keeps (see graph_begin)

typedef struct backend_ops {
    const char *name;  // "cpu", "cuda"
    // 1: computes from the mapped model file itself (upload keeps the
    // pointer), so model_load faults the file in, in 2 MiB pages (mapping.c)
    int host_weights;
    int (*init)(backend **b, int n_threads, char *err);
    void (*free)(backend *b);
    // A short description for the stats line ("cpu, 2 threads, avx512-vnni").
    const char *(*describe)(backend *b);

    // Backend memory. alloc returns zeroed memory or NULL.
    void *(*alloc)(backend *b, size_t bytes);
    void (*release)(backend *b, void *p);
    void (*to_host)(backend *b, void *dst, const void *src, size_t bytes);
    void (*to_device)(backend *b, void *dst, const void *src, size_t bytes);
    // Makes a weight readable by the backend (CPU: uses the mmap as is, or
    // an interleaved copy where its kernels read that faster; the memory
    // w->data pointed at is left as it was).
    int (*upload)(backend *b, qmat *w, char *err);

    // out[i, :] = row ids[i] of emb, dequantized. out: [n, emb->cols]; ids: backend memory
    void (*embed)(backend *b, float *out, const qmat *emb, const int32_t *ids, int n);
    // out[i, :] = x[i, :] / rms(x[i, :]) * w; x, out: [n, dim]; w: F32 [dim]. out may equal x.
    void (*rmsnorm)(backend *b, float *out, const float *x, const qmat *w, int n, int dim, float eps);
    // The residual add and the next norm in one: x += d (add's bits), then
    // out = rmsnorm(x) (rmsnorm's bits). x, d, out: [n, dim]; out may equal d.
    void (*add_rmsnorm)(backend *b, float *out, float *x, const float *d, const qmat *w, int n, int dim, float eps);
    // y[n, w->rows] = x[n, w->cols] · wᵀ. Rows 0..n_joint-1 are consecutive
    // tokens of one prompt, computed together in tiles of PREFILL_TILE rows
    // from row 0: a joint row's rounding may depend on the other rows of its
    // tile, never on rows outside it. Every row from n_joint on is computed
    // exactly as it would be alone (n == 1), so a decode token's result never
    // depends on what else shares the pass (batched decode and speculative
    // verification rely on it).
    void (*matmul)(backend *b, float *y, const qmat *w, const float *x, int n, int n_joint);
    // y[i, :] += bias for each of n rows; bias F32 [dim]
    void (*add_bias)(backend *b, float *y, const qmat *bias, int n, int dim);
    // y[0..len) += x[0..len)
    void (*add)(backend *b, float *y, const float *x, size_t len);
    // out = silu(gate) * up, elementwise over [n, cols]. out may equal gate.
    void (*swiglu)(backend *b, float *out, const float *gate, const float *up, int n, int64_t cols);
    // out[i] = gelu(gate[i]) * up[i] for i < len, gelu the tanh approximation
    // taken as ggml's CPU path takes it: of gate rounded to fp16, rounded to
    // fp16 (0 below -10, gate above 10). out may equal gate.
    void (*geglu)(backend *b, float *out, const float *gate, const float *up, size_t len);
    // x[0..len) *= s
    void (*scale)(backend *b, float *x, float s, size_t len);
    // Rotates q: [n, n_q, head_dim] and k: [n, n_k, head_dim] in place (k may
    // be NULL with n_k 0); token i is at position pos[i] (backend memory).
    void (*rope)(backend *b, float *q, float *k, int n, int n_q, int n_k, int head_dim, const int32_t *pos,
                 const rope_cfg *rc);
    // Stores k, v: [fb->n, kv_dim] (float) as kv_type rows into pool rows fb->slot[i].
    void (*kv_store)(backend *b, void *kpool, void *vpool, const float *k, const float *v,
                     const fwd_batch *fb, int kv_dim, int kv_type);
    // Optional: rope (q and k: n_q and n_k heads) then kv_store (kv_dim =
    // n_k·head_dim) in one step, with the same results, except that k is
    // not written (its turned values go to the pool only).
    void (*rope_store)(backend *b, float *q, const float *k, const float *v, void *kpool, void *vpool, int n_q,
                       int n_k, int head_dim, const int32_t *pos, const rope_cfg *rc, const fwd_batch *fb,
                       int kv_type);
    // Causal attention of the pass's tokens over their sequences' cached
    // positions (see fwd_batch). q: [n, n_heads, head_dim]; pools: kv_type
    // rows of n_kv_heads × head_dim values; out: [n, n_heads, head_dim].
    // Query head h reads kv head h / (n_heads / n_kv_heads). ac: the
    // scale, sliding window and sinks (see attn_cfg).
    void (*attention)(backend *b, float *out, const float *q, const void *kpool,
                      const void *vpool, const fwd_batch *fb, int n_heads, int n_kv_heads,
                      int head_dim, int kv_type, const attn_cfg *ac);

    // ---- Mixture of experts (moe.c drives them; see moe.h) ----
    // The router's choice for n tokens: logits [n, n_exp] (backend memory) →
    // ids [n, k] (the k experts with the largest logits, best first; ties:
    // lower id; softmax is monotonic, so these are also the top-k
    // probabilities) and their weights w [n, k]:
    //   MOE_SOFTMAX_NORM: p = softmax over all n_exp logits, w_j = p_j / Σ_k p (qwen3moe)
    //   MOE_TOPK_SOFTMAX: w = softmax over the k chosen logits (gpt-oss)
    void (*moe_route)(backend *b, int32_t *ids, float *w, const float *logits, int n, int n_exp, int k,
                      int gating);
    // Sorts the mp->n_rows = n·k slots (token i, choice j) by expert, in slot
    // order within an expert (see moe_map), from ids [n_rows] (moe_route's).
    void (*moe_group)(backend *b, const moe_map *mp, const int32_t *ids);
    // For i < k <= 2 (gate and up read the same x), every sorted row p of
    // expert e: y[i][p, :] = x[row, :] · W_eᵀ (+ bias row e) with W = w[i],
    // bias = bias[i], row = mp->tok[p] when by_token, else p. w[i]: the n_exp
    // experts' matrices stacked, rows = n_exp × (rows per expert); bias[i]:
    // F32 [n_exp, rows per expert] or data NULL. Only chosen experts' weights are
    // read, each once per call. A row of a token from mp->n_joint on is
    // computed exactly as it would be alone, so a decode token's result never
    // depends on what shares the pass. A prompt's row (token < n_joint) is
    // too, or, where its expert has enough of the pass's prompt rows, goes by
    // the backend's prompt path (CUDA: a GEMM whose arithmetic per row does
    // not depend on the other rows): which one depends on the pass, as a
    // dense prompt row's tile does.
    void (*moe_matmul)(backend *b, float *const y[], const qmat *const w[], const qmat *const bias[], int k,
                       const float *x, int by_token, const moe_map *mp);
    // out[i, :] = Σ_j w[i, j] · y[mp->pos[i·k + j], :], summed in j order
    // (llama.cpp's order); out: [n_rows / k, dim], y: [n_rows, dim] sorted rows.
    void (*moe_combine)(backend *b, float *out, const float *y, const float *w, const moe_map *mp, int dim);
    // gpt-oss's clamped SwiGLU, elementwise: g = min(gate, limit),
    // out = g·σ(alpha·g)·(clamp(up, -limit, limit) + 1). out may equal gate.
    void (*swiglu_oai)(backend *b, float *out, const float *gate, const float *up, size_t len, float alpha,
                       float limit);

    // ---- Optional ops: NULL where a backend lacks them (cpu.c has matmul_set, roofline, mem_available). ----
    // model.c checks for them (`if (ops->graph_begin)`) and never asks which
    // backend runs.

    // y[i] = matmul(w[i], x) for i < k <= 3, each with matmul's bits (its rows
    // and n_joint as there), in one go where the backend can (Q, K and V, or
    // gate and up, read the same x).
    void (*matmul_set)(backend *b, float *const y[], const qmat *const w[], int k, const float *x, int n,
                       int n_joint);

    // 0, or -1 with the first failure an earlier op met. Ops that return void
    // (kernels launched asynchronously) record their failures; this surfaces
    // them. It does not wait for the device: call it after a to_host.
    int (*status)(backend *b, char *err);

    // Picks the next token from logits [n_vocab] in backend memory, copying
    // only the id to the host: the argmax (ties: lowest id) when sc->temp <= 0,
    // else sample.c's chain without the repetition penalty (top-k → top-p →
    // min-p → temperature → draw with the uniform u in [0, 1)). The kept set
    // is sample.c's; the draw walks it in id order. -1 on failure (status).
    int32_t (*sample)(backend *b, const float *logits, int n_vocab, const sample_cfg *sc, double u);

    // Graphs of a decode step: graph_begin(key) starts recording the ops that
    // follow instead of running them, graph_end(key) stops (the recorded ops
    // have not run yet), graph_replay(key) runs them. A replay repeats the
    // same ops on the same pointers with the same host arguments, so what
    // differs between steps must be in backend memory (the fwd_batch arrays,
    // written with to_device before the replay); fb->max_len may differ, so a
    // backend that records must not size work by it. No to_host/to_device
    // between begin and end. graph_replay fails (and forgets the key) when a
    // recorded graph went stale (the backend moved its scratch memory): run
    // the ops directly and record again. Keys: 0 .. BACKEND_GRAPHS-1.
    int (*graph_begin)(backend *b, int key, char *err);
    int (*graph_end)(backend *b, int key, char *err);
    int (*graph_replay)(backend *b, int key, char *err);

    // The measured limits, for `quill bench`: memory bandwidth in bytes/s and
    // dense GEMM throughput in FLOP/s. The CPU measures reading 1 GiB on all
    // threads, again on every call (a host's bandwidth changes with what else
    // runs), and no GEMM peak (0). A device measures a device-to-device copy
    // (bytes read + written per second) and a bf16-in, fp32-accumulate GEMM
    // on the first call (a second or so), and remembers them.
    int (*roofline)(backend *b, double *mem_bw, double *gemm_flops, char *err);

    // Bytes alloc can still hand out before the machine runs short (the
    // CPU: util.h's mem_available), so that model_load refuses a KV cache or
    // activations that would not fit before allocating them.
    size_t (*mem_available)(backend *b);
} backend_ops;

extern const backend_ops cpu_backend;

#endif
