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

// ---- Log-probabilities (--logprobs) ------------------------------------------
// As OpenAI reports them: log_softmax of the logits after the repetition
// penalty (with the history recorded so far), before temperature and
// truncation. *chosen_lp: token chosen's; top_ids/top_lps[0..top_n): the
// top_n most likely tokens, best first (ties: lower id). top_n <= 20.
#define SAMPLE_MAX_TOP 20
void sampler_logprobs(sampler *s, const float *logits, int32_t chosen, int top_n, float *chosen_lp, int32_t *top_ids,
                      float *top_lps);

// ---- What speculative decoding needs (spec.c) ------------------------------
// The distribution sampler_sample would draw from, over the whole vocabulary:
// probs[n_vocab], 0 for every token the chain filters out, the survivors
// summing to 1; greedy puts 1 on the argmax. The `extra` tokens count as
// accepted after the recorded history (a drafted continuation not yet
// committed); the sampler itself is left unchanged.
void sampler_probs(sampler *s, const float *logits, const int32_t *extra, int n_extra, float *probs);
// The next uniform in [0, 1) of the sampler's random stream (the stream
// sampler_sample draws from).
double sampler_uniform(sampler *s);
// 1 when the chain is greedy (temp <= 0).
int sampler_is_greedy(const sampler *s);

// ---- The stages, exposed so each can be tested on its own. ----------------
// Each works on a candidates array c[0..n) and returns the new count where it
// filters; survivors are moved to the front, in no promised order. The order
// within a stage is deterministic, so a seeded run repeats exactly.

typedef struct {
    int32_t id;    // token id
    float logit;   // score after the stages so far
    float p;       // probability; valid only after sample_softmax / sample_top_p
} sample_cand;

// Repetition penalty with its ring of the last `cap` accepted tokens
// (llama.cpp semantics: each distinct token in the ring once, logit / penalty
// if logit > 0 else logit * penalty).
typedef struct {
    float penalty;     // 1: off
    int32_t *ring;     // [cap] most recent accepted ids, circular
    int cap;           // repeat_last_n; 0: no history kept
    int len;           // ids in the ring, <= cap
    int head;          // ring slot the next accepted id goes to
    uint8_t *seen;     // [n_vocab] scratch, all zero between calls
    int n_vocab;       // ids outside [0, n_vocab) are not recorded
} sample_penalties;

// 0, or -1 on allocation failure (pen is then safe to free).
int sample_penalties_init(sample_penalties *pen, float penalty, int last_n, int n_vocab);
void sample_penalties_free(sample_penalties *pen);
void sample_penalties_accept(sample_penalties *pen, int32_t id);
// c must be in id order (c[i].id == i, n == n_vocab): the chain's first stage.
void sample_penalties_apply(sample_penalties *pen, sample_cand *c, int n);

// Keeps the k highest logits (ties: lower id). k <= 0 or k >= n: no-op.
int sample_top_k(sample_cand *c, int n, int k);
// Sets p = softmax(logit) over c[0..n).
void sample_softmax(sample_cand *c, int n);
// Softmax at the current logits, then keeps the smallest set of most probable
// tokens whose probabilities sum to >= top_p (at least one).
int sample_top_p(sample_cand *c, int n, float top_p);
// Drops tokens with p < min_p * p_max, i.e. logit < max_logit + log(min_p).
int sample_min_p(sample_cand *c, int n, float min_p);
// logit /= temp (temp > 0).
void sample_temp(sample_cand *c, int n, float temp);
// Highest logit, ties to the lowest id.
int32_t sample_argmax(const sample_cand *c, int n);
// Inverse-CDF draw over p (need not sum to 1) for u in [0,1).
int32_t sample_draw(const sample_cand *c, int n, double u);

#endif
