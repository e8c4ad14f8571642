// kvcache.h — per-layer key/value cache, GQA-aware.
//
// Layout per layer: K and V each [n_ctx, n_kv_heads * head_dim] in fp16
// (what llama.cpp keeps, so attention rounds the same way), in backend memory.
// `len` is how many positions hold valid data; truncating to a shorter length
// is how later features roll back (speculative decoding, chat edits).
#ifndef QUILL_KVCACHE_H
#define QUILL_KVCACHE_H

#include "backend.h"

typedef struct {
    const backend_ops *ops;
    backend *be;
    int n_layers;
    int n_ctx;      // capacity in positions
    int kv_dim;     // n_kv_heads * head_dim
    int len;        // positions filled: the next token goes at position len
    void **k, **v;  // [n_layers] → fp16 [n_ctx, kv_dim]
} kvcache;

int kv_init(kvcache *kv, const backend_ops *ops, backend *be, int n_layers, int n_ctx, int kv_dim,
            char *err);
void kv_free(kvcache *kv);
// Forget positions >= len (no-op if len >= kv->len).
void kv_truncate(kvcache *kv, int len);
size_t kv_bytes(const kvcache *kv);  // device bytes held

#endif
