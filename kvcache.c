// kvcache.c — see kvcache.h.
#include "kvcache.h"

#include <stdlib.h>

#include "util.h"

int kv_init(kvcache *kv, const backend_ops *ops, backend *be, int n_layers, int n_ctx, int kv_dim,
            char *err) {
    *kv = (kvcache){.ops = ops, .be = be, .n_layers = n_layers, .n_ctx = n_ctx, .kv_dim = kv_dim};
    kv->k = calloc((size_t)n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)n_layers, sizeof *kv->v);
    if (!kv->k || !kv->v) return kv_free(kv), errf(err, "out of memory for the KV cache");
    size_t bytes = (size_t)n_ctx * kv_dim * sizeof(uint16_t);  // fp16
    for (int l = 0; l < n_layers; l++) {
        kv->k[l] = ops->alloc(be, bytes);
        kv->v[l] = ops->alloc(be, bytes);
        if (!kv->k[l] || !kv->v[l]) {
            kv_free(kv);
            return errf(err, "cannot allocate the KV cache (%d layers x %d positions x %d, %.1f MiB)",
                        n_layers, n_ctx, kv_dim, 2.0 * n_layers * bytes / (1 << 20));
        }
    }
    return 0;
}

void kv_free(kvcache *kv) {
    for (int l = 0; l < kv->n_layers && kv->k && kv->v; l++) {
        if (kv->k[l]) kv->ops->release(kv->be, kv->k[l]);
        if (kv->v[l]) kv->ops->release(kv->be, kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    kv->k = kv->v = NULL;
    kv->len = 0;
}

void kv_truncate(kvcache *kv, int len) {
    if (len >= 0 && len < kv->len) kv->len = len;
}

size_t kv_bytes(const kvcache *kv) {
    return 2 * (size_t)kv->n_layers * kv->n_ctx * kv->kv_dim * sizeof(uint16_t);
}
