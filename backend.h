// backend.h — the op table the forward pass is written against.
//
// model.c computes a transformer layer as a fixed sequence of these ops and
// never branches on which backend runs them. cpu.c implements them (the
// reference); kernels.cu will implement the same table for CUDA. All
// activation pointers are backend memory (host memory for the CPU backend);
// activation tensors are row-major float32 with one row per token.
#ifndef QUILL_BACKEND_H
#define QUILL_BACKEND_H

#include <stddef.h>
#include <stdint.h>

// A weight as stored in the GGUF file: rows × cols elements of `type`,
// row-major (GGUF ne[0] = cols, ne[1] = rows). Vectors (norms, biases) have
// rows = 1. data is backend-readable: the mmap for the CPU backend.
typedef struct {
    uint32_t type;      // enum qtype
    int64_t rows, cols;
    size_t row_bytes;
    const void *data;
} qmat;

// Rotary embedding parameters of one model.
typedef struct {
    int n_rot;              // dimensions rotated per head (== head_dim here)
    int neox;               // 0: rotate pairs (2i, 2i+1) (llama); 1: pairs (i, i+n_rot/2) (qwen2/3)
    float base;             // theta base
    float freq_scale;       // 1 / linear scaling factor (1: none)
    const float *freq_factors;  // [n_rot/2] divisors of each frequency (Llama-3 rope_freqs), or NULL
} rope_cfg;

typedef struct backend backend;  // backend-private state: threads, scratch, handles

typedef struct backend_ops {
    const char *name;  // "cpu"
    int (*init)(backend **b, int n_threads, char *err);
    void (*free)(backend *b);
    // A short description for the stats line ("cpu, 2 threads, avx512-vnni").
    const char *(*describe)(backend *b);

    // Backend memory. alloc returns zeroed memory or NULL.
    void *(*alloc)(backend *b, size_t bytes);
    void (*release)(backend *b, void *p);
    void (*to_host)(backend *b, void *dst, const void *src, size_t bytes);
    void (*to_device)(backend *b, void *dst, const void *src, size_t bytes);
    // Makes a weight readable by the backend (CPU: uses the mmap as is).
    int (*upload)(backend *b, qmat *w, char *err);

    // out[i, :] = row ids[i] of emb, dequantized. out: [n, emb->cols]
    void (*embed)(backend *b, float *out, const qmat *emb, const int32_t *ids, int n);
    // out[i, :] = x[i, :] / rms(x[i, :]) * w; x, out: [n, dim]; w: F32 [dim]. out may equal x.
    void (*rmsnorm)(backend *b, float *out, const float *x, const qmat *w, int n, int dim, float eps);
    // y[n, w->rows] = x[n, w->cols] · wᵀ
    void (*matmul)(backend *b, float *y, const qmat *w, const float *x, int n);
    // y[i, :] += bias for each of n rows; bias F32 [dim]
    void (*add_bias)(backend *b, float *y, const qmat *bias, int n, int dim);
    // y[0..len) += x[0..len)
    void (*add)(backend *b, float *y, const float *x, size_t len);
    // out[i] = silu(gate[i]) * up[i] for i < len. out may equal gate.
    void (*swiglu)(backend *b, float *out, const float *gate, const float *up, size_t len);
    // Rotates x: [n, n_heads, head_dim] in place; token i is at position pos[i].
    void (*rope)(backend *b, float *x, int n, int n_heads, int head_dim, const int32_t *pos,
                 const rope_cfg *rc);
    // Stores k, v: [n, kv_dim] (float) into the layer's cache rows pos0..pos0+n-1.
    void (*kv_store)(backend *b, void *kcache, void *vcache, const float *k, const float *v,
                     int pos0, int n, int kv_dim);
    // Causal attention of n query tokens at positions pos0..pos0+n-1 against
    // cache rows 0..pos0+n-1. q: [n, n_heads, head_dim]; caches: [n_ctx, n_kv_heads, head_dim];
    // out: [n, n_heads, head_dim]. Query head h reads kv head h / (n_heads / n_kv_heads).
    void (*attention)(backend *b, float *out, const float *q, const void *kcache,
                      const void *vcache, int pos0, int n, int n_heads, int n_kv_heads,
                      int head_dim);
} backend_ops;

extern const backend_ops cpu_backend;

#endif
