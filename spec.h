// spec.h — speculative decoding: a cheap drafter proposes the next K tokens,
// the target model checks all of them in one batched pass (K+1 positions, each
// weight read once), and the output is exactly what the target alone produces.
//
// Drafters: a second, smaller model with the same vocabulary (--draft), or
// prompt lookup (--lookup: the continuation of the latest earlier occurrence
// of the last few tokens). Each round:
//   draft d1..dK  →  target runs [cur, d1..dK] with all logits  →
//   accept the longest agreeing prefix d1..da, then one token from the target
//   (the correction at a+1, or a bonus token when all K agree)  →
//   both KV caches are rolled back to the accepted length.
// Greedy agrees when the target's argmax equals the drafted token: the tokens
// are the non-speculative ones. Sampling uses the rejection rule of
// spec_verify_token, so the tokens follow the target's distribution exactly.
#ifndef QUILL_SPEC_H
#define QUILL_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "grammar.h"
#include "model.h"
#include "sample.h"

#define SPEC_MAX_DRAFT 64  // the largest --draft-max

typedef struct {
    int draft_max;   // K: at most this many drafted tokens per round, 1..SPEC_MAX_DRAFT
    int fixed;       // 1: always draft_max; 0: K chosen each round from the running
                     // acceptance rate and a model of the draft and verify costs
    int ngram_min, ngram_max;  // --lookup: n-gram lengths tried, longest first
} spec_params;

// What a speculative run measured (the stats line and --stats-json).
typedef struct {
    long drafted;        // tokens proposed by the drafter
    long accepted;       // of those, tokens the target agreed with
    long produced;       // tokens the rounds produced (accepted + one per round)
    long target_passes;  // target forward passes (one per round)
    double t_draft;      // seconds in the drafter (its prompt included)
    double t_target;     // seconds in target passes and the acceptance rule
} spec_stats;

typedef struct spec spec;

// A speculative decoder for target. draft: the drafting model, whose
// vocabulary must equal the target's (NULL: prompt lookup). Both models are
// borrowed: they must outlive the decoder. sp: the sampling chain, applied
// identically to target and drafter; the decoder draws from streams of its
// own (seeds sp->seed + 1 and + 2), apart from the caller's sampler.
int spec_new(spec **out, model *target, model *draft, const sampler_params *sp, const spec_params *p,
             char *err);
void spec_free(spec *s);

// Constrains the tokens to a grammar: gc (borrowed, the decoder's own: not
// the caller's) follows the committed tokens; the drafter drafts within the
// grammar and each verified row is masked by the state after the drafted
// tokens before it, so greedy output stays the non-speculative one. Call
// before spec_begin.
void spec_set_grammar(spec *s, gconstraint *gc);
// Starts a generation: the target has run prompt[0..n) (model_len == n) and
// `first` was chosen from its logits. The penalty history starts as the prompt.
int spec_begin(spec *s, const int32_t *prompt, int n, int32_t first, char *err);
// The token after the last one handed out (after `first` at the start).
// limit: how many more tokens the caller may take, this one included
// (<= 0: no limit); it bounds how far a round drafts.
int spec_next(spec *s, int limit, int32_t *out, char *err);
// Positions a non-speculative decoder would hold in the KV cache now: the
// tokens handed out so far (prompt included), less the last one.
int spec_len(const spec *s);
// The target's logits the last token spec_next handed out was chosen from:
// the verification pass's row for its position, exactly a one-token pass's
// logits (masked by the grammar, with one), before the penalty and the chain.
// Valid until the next spec_next; NULL before the first.
const float *spec_logits(const spec *s);
const spec_stats *spec_get_stats(const spec *s);
// The stats as a stats-line segment (" | draft ...") and as JSON members
// (", \"draft_tokens\": ..."), each NUL-terminated.
void spec_stats_format(const spec_stats *st, char *line, size_t line_len, char *json, size_t json_len);

// ---- The pieces, exposed for tests ------------------------------------------

// The rejection rule for one drafted token d drawn from q: accepts with
// probability min(1, p[d] / q[d]) (u_accept uniform in [0, 1)); on rejection
// draws the replacement from max(0, p - q), normalized (u_resample). p, q:
// [n] distributions; q NULL means the drafter was deterministic (q = 1 at d).
// Returns the token that follows and sets *accepted. Drafting from q and
// applying this at each position gives tokens distributed exactly as p.
int32_t spec_verify_token(const float *p, const float *q, int n, int32_t d, double u_accept,
                          double u_resample, int *accepted);

// Prompt lookup: finds the latest earlier occurrence of the last g tokens of
// hist[0..n) (g from ngram_max down to ngram_min) and copies up to k tokens
// that followed it into out. Returns the count (0: no match).
int spec_lookup(const int32_t *hist, int n, int ngram_min, int ngram_max, int k, int32_t *out);

// Expected tokens per round when each drafted token is accepted with
// probability alpha, independently: 1 + alpha + ... + alpha^k.
double spec_expected_tokens(double alpha, int k);
// The K in [0, k_max] with the most expected tokens per unit of cost, given
// the cost of drafting one token and verify[n], the cost of a target pass over
// n positions (n = 1..k_max+1), in one unit (ties: the smaller K). K = 0 is a
// plain decoding step (one token per verify[1]): drafting that cannot pay at
// this acceptance rate is not done.
int spec_choose_k(double alpha, double draft_cost, const double *verify, int k_max);

#endif
