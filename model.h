// model.h — a transformer loaded from GGUF, and its forward pass.
#ifndef QUILL_MODEL_H
#define QUILL_MODEL_H

#include "arch.h"
#include "backend.h"
#include "gguf.h"
#include "kvcache.h"
#include "moe.h"

// One layer's weights (data NULL where absent) and how it attends.
typedef struct {
    qmat attn_norm, wq, wk, wv, wo;   // wq: [n_heads*head_dim, dim] ... (phi3: row ranges of attn_qkv)
    qmat bq, bk, bv, bo;              // biases (qwen2: q/k/v; gpt-oss: all four)
    qmat q_norm, k_norm;              // per-head norms [head_dim] (qwen3, gemma3)
    qmat post_attn_norm, post_ffn_norm;  // norms of the sublayer outputs [dim] (gemma3)
    qmat sinks;                       // [n_heads] attention sink logits (gpt-oss)
    qmat ffn_norm, w_gate, w_up, w_down;  // dense FFN (phi3: gate and up are row ranges of ffn_up; data NULL in an MoE layer)
    moe_weights moe;                  // the experts (router data NULL in a dense layer)
    rope_cfg rope;                    // this layer's rope (sliding layers may have their own)
    attn_cfg att;                     // scale, window, sinks
} layer_weights;

typedef struct model model;

typedef struct {
    const backend_ops *ops;
    int n_threads;
    int n_ctx;       // positions per sequence; 0: from metadata
    int n_seqs;      // sequences that can be live at once; 0: 1
    size_t kv_mem;   // bytes of the KV pool; 0: room for n_seqs full contexts
    int kv_type;     // enum kv_type (backend.h): KV_F16 (0) or KV_Q8
    size_t mem_limit;  // bytes the KV cache and activations may take; 0: what the
                       // backend has left (its mem_available op; no bound without one)
} model_opts;

int model_load(model **out, const char *path, const model_opts *o, char *err);
void model_free(model *m);

const model_config *model_cfg(const model *m);
const gguf_file *model_gguf(const model *m);
const char *model_backend_desc(model *m);
// Bytes of weights one decode step reads (for the bandwidth roofline): of
// an MoE, the active bytes (every expert's share counted expert_used_count /
// expert_count times, the bytes an average token reads).
size_t model_weight_bytes(const model *m);
// Bytes of all weights (the output projection included; of an MoE, every expert).
size_t model_total_weight_bytes(const model *m);
// Bytes of the model file the CPU backend reads through 2 MiB pages (see
// mapping.c); -1 where not known, or the weights live on a device.
long long model_huge_page_bytes(const model *m);
// Bytes of weights the backend copied at load with 8 rows interleaved
// (quant.h's x8: the CPU backend, where its kernels read them faster so).
size_t model_x8_bytes(const model *m);

// Runs n tokens at positions model_len(m) .. +n-1 of sequence 0 (which
// exists from model_load) and appends them to its KV cache. Writes logits of
// the last token ([n_vocab]) or, with all_logits, of every token
// ([n, n_vocab]) into logits (host memory). Fails if the tokens do not fit in
// the context.
int model_forward(model *m, const int32_t *ids, int n, int all_logits, float *logits, char *err);

// model_forward for n tokens of sequence 0, then the next token picked on the
// backend from the last token's logits, which stay there (see backend.h's
// `sample`: no repetition penalty; u uniform in [0, 1)). Returns 1 with *id;
// 0 when the backend cannot sample: then the logits are in `logits` (host,
// [n_vocab]) for the host sampler; -1 with err on failure.
int model_forward_sample(model *m, const int32_t *ids, int n, const sample_cfg *sc, double u, int32_t *id,
                         float *logits, char *err);

// The backend's measured limits (backend.h's roofline; 0 where it measures
// none): 0, or -1 with err on failure.
int model_roofline(model *m, double *mem_bw, double *gemm_flops, char *err);
// 1 when the model runs on a device (CUDA, or its emulation), 0 on the CPU.
int model_on_device(const model *m);

// Sequence 0, which model_forward extends.
int model_len(const model *m);   // positions in the KV cache: the next token goes here
int model_ctx(const model *m);   // capacity of a sequence in positions
// Forgets cached positions >= len (speculative rollback, chat edits, re-runs)
// and returns the positions kept: len, or 0 where the sliding-window layers
// no longer hold the window position len reads (they keep SWA_KEEP = 256
// positions beyond it); then the caller prefills from 0.
int model_rewind(model *m, int len);
// The KV cache's element type (enum kv_type).
int model_kv_type(const model *m);
// The K and V of cached positions [0, n), as [n_layers][2 (K, V)][n] pool
// rows (backend.h's kv_row_bytes each; model_kv_bytes in all).
size_t model_kv_bytes(const model *m, int n);
int model_kv_export(model *m, int n, void *dst, char *err);
// A sliding layer's positions below model_kv_floor(m) are not held (zeros in
// an export). Replaces the cache with n positions read from model_kv_export's
// layout of `stride` >= n positions (so a prefix of a longer export can be
// restored), whose sliding layers hold positions floor.. (the exporter's
// model_kv_floor); fails unless model_kv_usable(m, n, floor).
int model_kv_import(model *m, int n, const void *src, int stride, int floor, char *err);
int model_kv_floor(const model *m);
// Whether n positions whose sliding layers hold positions floor.. can be
// continued: n is 0, the model has no sliding layers, or the window of
// position n lies at or after floor.
int model_kv_usable(const model *m, int n, int floor);

// ---- Several sequences in one pass (batched generation) --------------------

// One token of a batched pass.
typedef struct {
    int32_t id;   // token id
    int seq;      // the sequence it extends, at that sequence's next position
    int logits;   // 1: return its logits
} model_tok;

int model_seq_new(model *m);                 // a new empty sequence, or -1 when all are live
void model_seq_free(model *m, int s);
int model_seq_len(const model *m, int s);
// model_rewind for sequence s: returns the positions kept (len or 0).
int model_seq_rewind(model *m, int s, int len);
// Makes empty sequence dst share the first len positions of src (their KV
// blocks are shared, copied only when one of them writes into a shared block).
// Returns the positions shared: len, or 0 where src's sliding layers no
// longer hold the window of position len (see model_rewind).
int model_seq_share(model *m, int dst, int src, int len);
// Positions the KV pool can still take (free blocks × block size).
int model_kv_room(const model *m);
// Runs t[0..n) (each sequence's tokens in position order) in one pass over
// the weights per chunk of the batch size. The first n_prompt tokens are
// consecutive tokens of one sequence's prompt, computed together as
// model_forward computes a prompt; every later token gets exactly the
// logits it would get alone in a one-token model_forward, whatever else
// shares the pass. logits: [count of t[i].logits, n_vocab], in the order of
// t. Fails, changing nothing, if a sequence would outgrow its context or the
// pool.
int model_forward_batch(model *m, const model_tok *t, int n, int n_prompt, float *logits, char *err);

#endif
