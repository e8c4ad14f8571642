// cpu_attention.h — the CPU backend's attention (cpu_attention.c), for cpu.c.
#ifndef QUILL_CPU_ATTENTION_H
#define QUILL_CPU_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

// backend_ops.attention's arguments, and the split mode's scratch.
typedef struct {
    float *out;                 // [fb->n, n_heads * head_dim]
    const float *q;             // [fb->n, n_heads * head_dim]
    const void *kpool, *vpool;  // the layer's K and V pools
    const fwd_batch *fb;
    int n_heads, n_kv_heads, head_dim, kv_type;  // head_dim <= 1024
    const attn_cfg *ac;
    float *part;  // split mode (see below): attention_split_bytes of scratch; NULL: not split
} attention_job;

// A token's keys are taken in ranges of a fixed length, each range's
// softmax state merged into the next in order. A pass of few tokens splits:
// its work items are single ranges (parallel over the keys), whose states
// attention_merge then merges; otherwise each item merges its token's
// ranges itself. Both give the same bits. attention_split_bytes: the
// scratch (job.part) the split takes for a pool of n_threads, 0 where the
// pass does not split.
size_t attention_split_bytes(const attention_job *j, int n_threads);
// Work items of the pass: attention_items' range [0, count) for tp_for.
int64_t attention_items_count(const attention_job *j);
void attention_items(void *job, int64_t i0, int64_t i1);
// Split mode, after attention_items: merges the states into out, items
// [0, attention_merge_count) for tp_for.
int64_t attention_merge_count(const attention_job *j);
void attention_merge(void *job, int64_t i0, int64_t i1);

#endif
