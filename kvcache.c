// kvcache.c — see kvcache.h.
#include "kvcache.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

int kv_init(kvcache *kv, const backend_ops *ops, backend *be, int n_layers, int kv_dim, int type, int n_ctx,
            int max_seqs, int n_blocks, char *err) {
    const int max_blocks = kv_blocks_for(n_ctx);
    if (n_blocks <= 0) n_blocks = max_seqs * max_blocks;
    *kv = (kvcache){.ops = ops, .be = be, .n_layers = n_layers, .kv_dim = kv_dim, .type = type,
                    .row_bytes = kv_row_bytes(type, kv_dim), .n_ctx = n_ctx, .max_blocks = max_blocks,
                    .n_blocks = n_blocks, .max_seqs = max_seqs};
    kv->k = calloc((size_t)n_layers, sizeof *kv->k);
    kv->v = calloc((size_t)n_layers, sizeof *kv->v);
    kv->ref = calloc((size_t)n_blocks, sizeof *kv->ref);
    kv->free = malloc(sizeof *kv->free * (size_t)n_blocks);
    kv->seqs = calloc((size_t)max_seqs, sizeof *kv->seqs);
    int32_t *tables = malloc(sizeof *tables * (size_t)max_seqs * max_blocks);
    if (!kv->k || !kv->v || !kv->ref || !kv->free || !kv->seqs || !tables) {
        free(tables);
        kv_free(kv);
        return errf(err, "out of memory for the KV cache tables");
    }
    for (int s = 0; s < max_seqs; s++) kv->seqs[s].table = tables + (size_t)s * max_blocks;
    for (int i = 0; i < n_blocks; i++) kv->free[i] = n_blocks - 1 - i;  // block 0 is taken first
    kv->n_free = n_blocks;
    // one allocation for every layer's K and V pools (a backend may give a
    // large one larger pages: cpu.c's cpu_alloc)
    const size_t bytes = (size_t)n_blocks * KV_BLOCK * kv->row_bytes;
    if (!(kv->pools = ops->alloc(be, 2 * (size_t)n_layers * bytes))) {
        kv_free(kv);
        return errf(err, "cannot allocate the KV cache (%d layers x %d blocks x %d positions x %zu bytes, "
                    "%.1f MiB: lower -c or --kv-mem%s)", n_layers, n_blocks, KV_BLOCK, kv->row_bytes,
                    2.0 * n_layers * bytes / (1 << 20), type == KV_Q8 ? "" : ", or use --kv q8");
    }
    for (int l = 0; l < n_layers; l++) {
        kv->k[l] = (uint8_t *)kv->pools + 2 * (size_t)l * bytes;
        kv->v[l] = (uint8_t *)kv->pools + (2 * (size_t)l + 1) * bytes;
    }
    return 0;
}

void kv_free(kvcache *kv) {
    if (kv->pools) kv->ops->release(kv->be, kv->pools);
    free(kv->k);
    free(kv->v);
    free(kv->ref);
    free(kv->free);
    if (kv->seqs) free(kv->seqs[0].table);  // one allocation holds every table
    free(kv->seqs);
    *kv = (kvcache){0};
}

size_t kv_bytes(const kvcache *kv) {
    return 2 * (size_t)kv->n_layers * kv->n_blocks * KV_BLOCK * kv->row_bytes;
}

int kv_seq_new(kvcache *kv) {
    for (int s = 0; s < kv->max_seqs; s++)
        if (!kv->seqs[s].live) {
            kv->seqs[s].live = 1;
            kv->seqs[s].len = kv->seqs[s].n_blocks = kv->seqs[s].floor = 0;
            return s;
        }
    return -1;
}

static void release(kvcache *kv, int32_t b) {
    if (b >= 0 && --kv->ref[b] == 0) kv->free[kv->n_free++] = b;
}

static void drop_blocks(kvcache *kv, kv_seq *q, int keep) {
    for (; q->n_blocks > keep; q->n_blocks--) release(kv, q->table[q->n_blocks - 1]);
    if (q->n_blocks * KV_BLOCK < q->floor) q->floor = q->n_blocks * KV_BLOCK;
}

void kv_forget(kvcache *kv, int s, int pos) {
    kv_seq *q = &kv->seqs[s];
    const int end = pos / KV_BLOCK < q->n_blocks ? pos / KV_BLOCK : q->n_blocks;
    for (int i = q->floor / KV_BLOCK; i < end; i++) release(kv, q->table[i]), q->table[i] = -1;
    if (end * KV_BLOCK > q->floor) q->floor = end * KV_BLOCK;
}

void kv_start_at(kvcache *kv, int s, int pos) {
    kv_seq *q = &kv->seqs[s];
    drop_blocks(kv, q, 0);
    q->n_blocks = pos / KV_BLOCK;
    for (int i = 0; i < q->n_blocks; i++) q->table[i] = -1;
    q->len = q->floor = q->n_blocks * KV_BLOCK;
}

void kv_seq_free(kvcache *kv, int s) {
    drop_blocks(kv, &kv->seqs[s], 0);
    kv->seqs[s].len = 0;
    kv->seqs[s].live = 0;
}

void kv_seq_share(kvcache *kv, int dst, int src, int len) {
    kv_seq *d = &kv->seqs[dst], *q = &kv->seqs[src];
    if (len > q->len) len = q->len;
    drop_blocks(kv, d, 0);
    d->n_blocks = kv_blocks_for(len);
    for (int i = 0; i < d->n_blocks; i++)
        if ((d->table[i] = q->table[i]) >= 0) kv->ref[d->table[i]]++;
    d->len = len;
    d->floor = q->floor < d->n_blocks * KV_BLOCK ? q->floor : d->n_blocks * KV_BLOCK;
}

void kv_truncate(kvcache *kv, int s, int len) {
    kv_seq *q = &kv->seqs[s];
    if (len < 0 || len > q->len) return;
    q->len = len;  // also drops blocks reserved beyond len
    drop_blocks(kv, q, kv_blocks_for(len));
}

// Gives block index i of q a private copy of its shared block (every layer's
// K and V rows, through host memory: this happens once per divergence).
static int copy_on_write(kvcache *kv, kv_seq *q, int i, char *err) {
    const size_t bytes = (size_t)KV_BLOCK * kv->row_bytes;
    uint8_t *buf = malloc(bytes);
    if (!buf) return errf(err, "out of memory");
    int32_t old = q->table[i], b = kv->free[--kv->n_free];
    for (int l = 0; l < kv->n_layers; l++)
        for (int kvi = 0; kvi < 2; kvi++) {
            char *pool = kvi ? kv->v[l] : kv->k[l];
            kv->ops->to_host(kv->be, buf, pool + (size_t)old * bytes, bytes);
            kv->ops->to_device(kv->be, pool + (size_t)b * bytes, buf, bytes);
        }
    free(buf);
    kv->ref[old]--;
    kv->ref[b] = 1;
    q->table[i] = b;
    return 0;
}

int kv_reserve(kvcache *kv, int s, int n, char *err) {
    kv_seq *q = &kv->seqs[s];
    const int end = q->len + n;
    if (end > kv->n_ctx)
        return errf(err, "%d tokens at position %d do not fit in the context of %d", n, q->len, kv->n_ctx);
    const int first = q->len / KV_BLOCK;  // the first block written
    const int cow = first < q->n_blocks && kv->ref[q->table[first]] > 1;
    const int need = kv_blocks_for(end) - q->n_blocks + cow;
    if (need > kv->n_free)
        return errf(err, "the KV cache is full (%d free blocks of %d positions, %d needed)", kv->n_free,
                    KV_BLOCK, need);
    if (cow && copy_on_write(kv, q, first, err)) return -1;
    while (q->n_blocks < kv_blocks_for(end)) {
        int32_t b = kv->free[--kv->n_free];
        kv->ref[b] = 1;
        q->table[q->n_blocks++] = b;
    }
    return 0;
}
