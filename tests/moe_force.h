// tests/moe_force.h — a mixture of experts' choices, recorded on the CPU and
// replayed elsewhere (tests only: one recording per process, in statics).
//
// Where a token's router scores nearly tie (the synthetic MoE files' gaps go
// down to 0.0006, synth2-margins.tsv), two implementations that round
// differently may pick different experts, and every later position moves
// with it. So a test records the CPU's choices per (layer, position) through
// force_cpu's moe_route and lets the other side take them over (force_dev,
// or the float64 reference reading force_write's file): the logits then
// differ by arithmetic alone, and where a choice differs the other side's
// own router must have had a near tie there.
#ifndef QUILL_TEST_MOE_FORCE_H
#define QUILL_TEST_MOE_FORCE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "model.h"
#include "util.h"

typedef struct {
    int n_layers, k, cap;   // layers, experts per token, positions recorded
    int n_exp;              // experts
    int calls, pos_end;     // route calls so far; positions layer 0 has seen
    int32_t *ids;           // [n_layers, cap, k]
    float *w;               // [n_layers, cap, k]
    float *logits;          // [n_layers, cap, n_exp] the router's logits
    unsigned char *known;   // [n_layers, cap]
    const backend_ops *dev; // what force_dev wraps
} moe_force;
static moe_force force;
static backend_ops force_cpu, force_dev;

static inline void force_free(void) { free(force.ids), free(force.w), free(force.logits), free(force.known); }

// The layer and the first position of a route call over n rows: each pass
// routes once per layer, layer 0 on all its rows; a later layer's rows are
// the pass's last ones (the last layer may run on the output rows alone).
static inline int force_next(int n, int *p0) {
    const int l = force.calls++ % force.n_layers;
    if (l == 0) force.pos_end += n;
    *p0 = force.pos_end - n;
    return l;
}

static inline void force_route_cpu(backend *b, int32_t *ids, float *w, const float *logits, int n, int n_exp, int k, int g) {
    cpu_backend.moe_route(b, ids, w, logits, n, n_exp, k, g);
    int p0;
    const int l = force_next(n, &p0);
    for (int i = 0; i < n && p0 + i < force.cap; i++) {
        const size_t at = (size_t)l * force.cap + p0 + i;
        memcpy(force.ids + at * k, ids + (size_t)i * k, sizeof(int32_t) * k);
        memcpy(force.w + at * k, w + (size_t)i * k, sizeof(float) * k);
        memcpy(force.logits + at * n_exp, logits + (size_t)i * n_exp, sizeof(float) * n_exp);
        force.known[at] = 1;
    }
}

static inline void force_route_dev(backend *b, int32_t *ids, float *w, const float *logits, int n, int n_exp, int k, int g) {
    force.dev->moe_route(b, ids, w, logits, n, n_exp, k, g);
    int p0;
    const int l = force_next(n, &p0);
    for (int i = 0; i < n && p0 + i < force.cap; i++) {
        const size_t at = (size_t)l * force.cap + p0 + i;
        if (!force.known[at]) continue;
        force.dev->to_device(b, ids + (size_t)i * k, force.ids + at * k, sizeof(int32_t) * k);
        force.dev->to_device(b, w + (size_t)i * k, force.w + at * k, sizeof(float) * k);
    }
}

// A new recording for a model of config c, cap positions; force_dev wraps dev.
static inline void force_reset(const model_config *c, int cap, const backend_ops *dev) {
    force_free();
    force = (moe_force){.n_layers = c->n_layers, .k = c->n_expert_used, .cap = cap, .n_exp = c->n_expert, .dev = dev};
    force.ids = xmalloc(sizeof(int32_t) * c->n_layers * cap * c->n_expert_used);
    force.w = xmalloc(sizeof(float) * c->n_layers * cap * c->n_expert_used);
    force.logits = xmalloc(sizeof(float) * c->n_layers * cap * c->n_expert);
    force.known = calloc((size_t)c->n_layers * cap, 1);
    force_cpu = cpu_backend, force_cpu.moe_route = force_route_cpu;
    force_dev = *dev, force_dev.moe_route = force_route_dev;
}

// Starts the replay of the recorded choices.
static inline void force_replay(void) { force.calls = force.pos_end = 0; }

// The recorded ids of positions [0, n) as text: per layer, per position, k ids.
static inline int force_write(const char *path, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    for (int l = 0; l < force.n_layers; l++)
        for (int p = 0; p < n; p++)
            for (int j = 0; j < force.k; j++)
                fprintf(f, "%d%c", force.ids[((size_t)l * force.cap + p) * force.k + j], j + 1 < force.k ? ' ' : '\n');
    return fclose(f);
}


#endif
