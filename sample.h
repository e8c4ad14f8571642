// sample.h — choosing the next token from logits, as a chain of small stages.
//
// Chain (llama.cpp's order): repetition penalty → top-k → top-p → min-p →
// temperature → draw. temp <= 0 is greedy (argmax, ties to the lowest id).
#ifndef QUILL_SAMPLE_H
#define QUILL_SAMPLE_H

#include <stdint.h>

typedef struct {
    float temp;            // 0: greedy
    int top_k;             // <= 0: off
    float top_p;           // >= 1: off
    float min_p;           // <= 0: off
    float repeat_penalty;  // 1: off
    int repeat_last_n;     // how many recent tokens the penalty looks at
    uint64_t seed;
} sampler_params;

typedef struct sampler sampler;

// NULL on allocation failure.
sampler *sampler_new(const sampler_params *p, int n_vocab);
void sampler_free(sampler *s);
// Picks a token. logits [n_vocab] may be modified.
int32_t sampler_sample(sampler *s, float *logits);
// Records a token in the penalty history (prompt tokens and generated ones).
void sampler_accept(sampler *s, int32_t id);

#endif
