// kvcache.h — the paged key/value cache: a block pool shared by sequences.
//
// Each layer's K and V are pools of n_blocks blocks of KV_BLOCK positions
// (n_blocks * KV_BLOCK rows of backend.h's kv_type: fp16, what llama.cpp
// keeps, so attention rounds the same way, or q8), in backend memory. A sequence is a length and a
// block table; blocks are taken from the free list as it grows and returned
// when it shrinks or ends. Sequences that share a prompt prefix share its
// blocks (reference counts); a shared block is copied before a sequence
// writes into it (copy-on-write), so sharing never changes what any
// sequence sees.
#ifndef QUILL_KVCACHE_H
#define QUILL_KVCACHE_H

#include "backend.h"

typedef struct {
    int len;          // positions filled: the next token goes at position len
    int floor;        // positions below it were forgotten (kv_forget; a multiple of KV_BLOCK): their table entries are -1
    int n_blocks;     // blocks in table (covering positions 0 .. n_blocks*KV_BLOCK-1)
    int live;         // 1 while the sequence exists
    int32_t *table;   // [max_blocks] block ids, in position order
} kv_seq;

typedef struct {
    const backend_ops *ops;
    backend *be;
    int n_layers;
    int kv_dim;       // n_kv_heads * head_dim
    int type;         // enum kv_type
    size_t row_bytes; // kv_row_bytes(type, kv_dim)
    int n_ctx;        // positions one sequence may hold
    int max_blocks;   // blocks one sequence may hold: ceil(n_ctx / KV_BLOCK)
    int n_blocks;     // blocks in the pool
    void **k, **v;    // [n_layers] → [n_blocks * KV_BLOCK] rows of row_bytes, in pools
    void *pools;      // the one allocation (backend_ops.alloc) holding every layer's K and V
    int32_t *ref;     // [n_blocks] sequences holding each block (0: free)
    int32_t *free;    // [n_blocks] stack of free block ids
    int n_free;
    int max_seqs;
    kv_seq *seqs;     // [max_seqs]
} kvcache;

// A pool of n_blocks blocks (0: enough for max_seqs full sequences) for up
// to max_seqs sequences of n_ctx positions each. No sequence exists yet.
int kv_init(kvcache *kv, const backend_ops *ops, backend *be, int n_layers, int kv_dim, int type, int n_ctx,
            int max_seqs, int n_blocks, char *err);
void kv_free(kvcache *kv);
size_t kv_bytes(const kvcache *kv);  // backend bytes held by the pools

// A new empty sequence: its id, or -1 when all max_seqs are live.
int kv_seq_new(kvcache *kv);
// Ends a sequence and returns its blocks.
void kv_seq_free(kvcache *kv, int s);
// Makes dst (a live, empty sequence) share the first len positions of src
// (and what src forgot of them).
void kv_seq_share(kvcache *kv, int dst, int src, int len);
// Forgets positions >= len of s, returning blocks reserved beyond them
// (no-op if len > its length).
void kv_truncate(kvcache *kv, int s, int len);
// Makes positions len .. len+n-1 of s writable: allocates blocks and copies
// a shared last block. Returns 0, or -1 (nothing changed) when the pool or
// the sequence's context would overflow.
int kv_reserve(kvcache *kv, int s, int n, char *err);
// Returns the blocks of s that hold only positions below pos (a sliding
// window's cache: what no later token reads); their table entries become -1.
void kv_forget(kvcache *kv, int s, int pos);
// Makes the empty sequence s start at position pos (rounded down to a block):
// positions below it are forgotten, as kv_forget leaves them.
void kv_start_at(kvcache *kv, int s, int pos);
// Pool row holding position p of s (floor <= p < reserved capacity).
static inline int32_t kv_slot(const kvcache *kv, int s, int p) {
    return kv->seqs[s].table[p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK;
}
// Blocks a sequence of n positions needs beyond the ones it shares.
static inline int kv_blocks_for(int n) { return (n + KV_BLOCK - 1) / KV_BLOCK; }

#endif
