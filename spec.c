// spec.c — see spec.h. One round, with cur = the last token handed out (not
// yet in the target's KV cache, which holds L = n_tok - 1 positions):
//
//   drafter:  d1..dK                  (the draft model autoregressively, or prompt lookup)
//   target:   [cur, d1..dK] at positions L..L+K, all logits: row i predicts position L+i+1
//   rule:     row i-1 accepts or replaces d_i; row a gives the token after the last accepted
//   commit:   d1..da and that token; target rewound to L+1+a, the drafter likewise
//
// Sampling draws the drafted tokens from the drafter's chain distribution q and
// accepts them with spec_verify_token against the target's chain distribution
// p, so each committed token is distributed exactly as p (the standard
// speculative-sampling argument: P(t) = min(p,q)(t) + (1 - Σ min(p,q)) ·
// max(0, p-q)(t) / Σ max(0, p-q) = p(t)). Both distributions come from
// sampler_probs, the chain sampler_sample draws from, with the same penalty
// history (the committed tokens plus the drafted ones before the position).
#include "spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "util.h"

// Adaptive K weighs the expected tokens of a round against a cost model in
// units of one single-token target pass: a drafted token costs the drafter's
// weight bytes over the target's (decode reads every weight once: memory
// bound), and a target pass over n positions costs 1 + SPEC_ROW_COST (n - 1)
// (the extra rows' arithmetic: 0.1-0.25 per position measured with
// tests/bench_spec.c for an 8B-shaped Q4_K_M model on one core; a model small
// enough to stay in cache pays about 1, and speculation cannot help it). The
// costs are modeled, not timed, so the rounds, and with them a seeded
// sampling run's tokens, do not depend on the machine's load.
#define SPEC_ROW_COST 0.25
// The acceptance rate: decayed counts of drafted tokens accepted and tested,
// plus 2 pseudo-tokens at SPEC_PRIOR, an optimistic start so that a draft is
// tried before it is judged. Rounds without drafting (K = 0, chosen when
// drafting does not pay) let the counts fade slowly, so drafting is retried
// now and then.
#define SPEC_PRIOR 0.8
#define SPEC_DECAY 0.9        // per round with drafted tokens
#define SPEC_DECAY_IDLE 0.97  // per round without

struct spec {
    model *target;
    model *draft;         // NULL: prompt lookup
    spec_params p;
    int n_vocab;
    int greedy;
    sampler *tsmp;        // target chain, history = tok[0..n_tok); its stream: rule and corrections
    sampler *dsmp;        // drafter chain, same history; its stream: the drafted tokens
    int32_t *tok;         // [cap] prompt, handed-out tokens, then the tokens queued by a round
    int n_tok, cap;
    int n_out;            // tokens handed out; tok[n_out..n_tok) is the queue
    int round_base;       // tok index of the last round's first token: its tlog row 0
    float *tlog;          // [(draft_max + 1) * n_vocab] target logits of one round
    float *dlog;          // [n_vocab] drafter logits (with a draft model)
    float *q;             // [draft_max * n_vocab] drafter distributions (draft model, sampling)
    float *pbuf;          // [n_vocab] one chain distribution
    double draft_cost;    // a drafted token in target passes (weight bytes; 0 for lookup)
    double acc_hits, acc_tries;  // decayed counts: drafted tokens accepted / tested
    gconstraint *gc;      // the grammar (borrowed; NULL: none): state after the committed tokens
    gstate gsaved;        // gc's state at a round's start, while drafting moves it
    spec_stats st;
};

// ---- Small helpers -------------------------------------------------------------

static int imin(int a, int b) { return a < b ? a : b; }

static int32_t argmax(const float *p, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (p[i] > p[best]) best = i;
    return best;
}

// Inverse-CDF draw (u in [0, 1)) over the weights max(0, p[i] - q[i]), where
// q NULL stands for 1 at d (d = -1: q = 0, a draw from p). Sums in double;
// -1 when every weight is 0.
static int32_t draw_residual(const float *p, const float *q, int n, int32_t d, double u) {
    double total = 0;
    for (int i = 0; i < n; i++) {
        double r = (double)p[i] - (q ? (double)q[i] : (double)(i == d));
        if (r > 0) total += r;
    }
    if (!(total > 0)) return -1;
    double target = u * total, cum = 0;
    int32_t last = -1;
    for (int i = 0; i < n; i++) {
        double r = (double)p[i] - (q ? (double)q[i] : (double)(i == d));
        if (r <= 0) continue;
        cum += r;
        last = i;
        if (cum > target) return i;
    }
    return last;  // u * total rounded up to total
}

static int32_t draw(const float *p, int n, double u) {
    int32_t t = draw_residual(p, NULL, n, -1, u);
    return t >= 0 ? t : argmax(p, n);
}

// ---- The pieces exposed for tests ----------------------------------------------

int32_t spec_verify_token(const float *p, const float *q, int n, int32_t d, double u_accept,
                          double u_resample, int *accepted) {
    double pd = p[d], qd = q ? q[d] : 1.0;
    // u < p/q without the division (q[d] > 0 whenever d was drawn from q)
    if (u_accept * qd < pd) {
        *accepted = 1;
        return d;
    }
    *accepted = 0;
    int32_t t = draw_residual(p, q, n, d, u_resample);
    // No mass left in p - q means p == q up to rounding, where a rejection has
    // probability ~0; p itself is then the right law.
    return t >= 0 ? t : draw(p, n, u_resample);
}

int spec_lookup(const int32_t *hist, int n, int ngram_min, int ngram_max, int k, int32_t *out) {
    if (ngram_min < 1) ngram_min = 1;
    for (int g = ngram_max; g >= ngram_min; g--) {
        if (n < g + 1) continue;
        const int32_t *tail = hist + n - g;
        // latest start j whose g tokens equal the tail and that has a successor
        for (int j = n - g - 1; j >= 0; j--) {
            if (memcmp(hist + j, tail, (size_t)g * sizeof *hist)) continue;
            int m = imin(k, n - (j + g));
            memcpy(out, hist + j + g, (size_t)m * sizeof *out);
            return m;
        }
    }
    return 0;
}

double spec_expected_tokens(double alpha, int k) {
    double e = 0, a = 1;
    for (int i = 0; i <= k; i++, a *= alpha) e += a;
    return e;
}

int spec_choose_k(double alpha, double draft_cost, const double *verify, int k_max) {
    int best = 0;
    double best_rate = verify[1] > 0 ? 1 / verify[1] : 0;  // K = 0: a plain decoding step
    for (int k = 1; k <= k_max; k++) {
        double cost = k * draft_cost + verify[k + 1];
        double rate = cost > 0 ? spec_expected_tokens(alpha, k) / cost : 0;
        if (rate > best_rate * (1 + 1e-9)) best = k, best_rate = rate;  // ties: the smaller K
    }
    return best;
}

// ---- Construction ------------------------------------------------------------------

// The draft must map ids to the same tokens: same count, same strings.
static int check_vocab(const model *target, const model *draft, char *err) {
    int nt = model_cfg(target)->n_vocab, nd = model_cfg(draft)->n_vocab;
    const char *why = "a draft model must share the target's vocabulary";
    if (nt != nd) return errf(err, "the draft has %d tokens, the target %d: %s", nd, nt, why);
    const gguf_kv *a = gguf_find(model_gguf(target), "tokenizer.ggml.tokens");
    const gguf_kv *b = gguf_find(model_gguf(draft), "tokenizer.ggml.tokens");
    int a_ok = a && a->type == GGUF_ARRAY && a->arr_type == GGUF_STRING;
    int b_ok = b && b->type == GGUF_ARRAY && b->arr_type == GGUF_STRING;
    if (!a_ok || !b_ok) {
        if (a_ok == b_ok) return 0;  // neither has a token list: the ids are all there is
        return errf(err, "tokenizer.ggml.tokens is missing in the %s: %s", a_ok ? "draft" : "target", why);
    }
    if (a->arr_n != b->arr_n)
        return errf(err, "the draft lists %llu tokens, the target %llu: %s", (unsigned long long)b->arr_n,
                    (unsigned long long)a->arr_n, why);
    const uint8_t *pa = a->arr_data, *pb = b->arr_data;
    for (uint64_t i = 0; i < a->arr_n; i++) {
        gguf_str sa = gguf_arr_next_str(&pa), sb = gguf_arr_next_str(&pb);
        if (sa.len == sb.len && !memcmp(sa.ptr, sb.ptr, sa.len)) continue;
        return errf(err, "token %llu is '%.*s' in the draft but '%.*s' in the target: %s", (unsigned long long)i,
                    (int)(sb.len > 40 ? 40 : sb.len), sb.ptr, (int)(sa.len > 40 ? 40 : sa.len), sa.ptr, why);
    }
    return 0;
}

int spec_new(spec **out, model *target, model *draft, const sampler_params *sp, const spec_params *p,
             char *err) {
    *out = NULL;
    if (p->draft_max < 1 || p->draft_max > SPEC_MAX_DRAFT)
        return errf(err, "the draft length %d is outside [1, %d]", p->draft_max, SPEC_MAX_DRAFT);
    if (draft && check_vocab(target, draft, err)) return -1;
    spec *s = calloc(1, sizeof *s);
    if (!s) return errf(err, "out of memory");
    s->target = target;
    s->draft = draft;
    s->p = *p;
    const size_t V = (size_t)(s->n_vocab = model_cfg(target)->n_vocab), K = (size_t)p->draft_max;
    // Streams apart from the caller's sampler, which drew the first token with
    // sp->seed: sharing it would tie the first acceptance test to that draw.
    sampler_params tp = *sp, dp = *sp;
    tp.seed = sp->seed + 1;
    dp.seed = sp->seed + 2;
    s->tsmp = sampler_new(&tp, (int)V);
    s->dsmp = sampler_new(&dp, (int)V);
    s->greedy = s->tsmp ? sampler_is_greedy(s->tsmp) : 1;
    if (draft) s->draft_cost = (double)model_weight_bytes(draft) / (double)model_weight_bytes(target);
    s->tlog = malloc((K + 1) * V * sizeof *s->tlog);
    s->pbuf = malloc(V * sizeof *s->pbuf);
    if (draft) s->dlog = malloc(V * sizeof *s->dlog);
    if (draft && !s->greedy) s->q = malloc(K * V * sizeof *s->q);
    if (!s->tsmp || !s->dsmp || !s->tlog || !s->pbuf || (draft && !s->dlog) || (draft && !s->greedy && !s->q)) {
        spec_free(s);
        return errf(err, "out of memory for speculative decoding (%zu tokens)", V);
    }
    *out = s;
    return 0;
}

void spec_free(spec *s) {
    if (!s) return;
    sampler_free(s->tsmp);
    sampler_free(s->dsmp);
    free(s->tok);
    free(s->tlog);
    free(s->dlog);
    free(s->q);
    free(s->pbuf);
    gstate_free(&s->gsaved);
    free(s);
}

void spec_set_grammar(spec *s, gconstraint *gc) { s->gc = gc; }

static int reserve(spec *s, int n, char *err) {
    if (n <= s->cap) return 0;
    int cap = s->cap ? s->cap : 256;
    while (cap < n) cap *= 2;
    int32_t *t = realloc(s->tok, (size_t)cap * sizeof *t);
    if (!t) return errf(err, "out of memory for %d tokens", cap);
    s->tok = t;
    s->cap = cap;
    return 0;
}

// Appends a decided token: history of both chains, queue.
static void commit(spec *s, int32_t id) {
    s->tok[s->n_tok++] = id;
    sampler_accept(s->tsmp, id);
    sampler_accept(s->dsmp, id);
}

int spec_begin(spec *s, const int32_t *prompt, int n, int32_t first, char *err) {
    if (model_len(s->target) != n)
        return errf(err, "speculative decoding: the target holds %d positions, the prompt is %d tokens",
                    model_len(s->target), n);
    if (reserve(s, n + 1 + SPEC_MAX_DRAFT + 1, err)) return -1;
    s->n_tok = 0;
    for (int i = 0; i < n; i++) commit(s, prompt[i]);
    commit(s, first);
    if (s->gc && (gcon_reset(s->gc, err) || gcon_accept(s->gc, prompt[n - 1], first, err))) return -1;
    s->n_out = s->round_base = s->n_tok;
    if (s->draft) model_rewind(s->draft, 0);  // its cache may hold another sequence
    return 0;
}

// ---- Drafting ----------------------------------------------------------------------

// The draft model's d[0..k): it first catches up on the committed tokens it
// has not seen (the prompt on the first round, else one or two), then runs
// its own guesses. q[j] (sampling) keeps the distribution d[j] came from.
static int propose_draft(spec *s, int k, int32_t *d, char *err) {
    const size_t V = (size_t)s->n_vocab;
    const int have = model_len(s->draft);
    if (model_forward(s->draft, s->tok + have, s->n_tok - have, 0, s->dlog, err)) return -1;
    for (int j = 0; j < k; j++) {
        float *q = s->q ? s->q + (size_t)j * V : s->pbuf;
        if (s->gc) {  // the drafter drafts within the grammar too (q is then the masked chain)
            const int32_t prev = j ? d[j - 1] : s->tok[s->n_tok - 1];
            int allowed = gcon_apply(s->gc, prev, s->dlog, err);
            if (allowed < 0) return -1;
            if (allowed == 0) return j;
        }
        sampler_probs(s->dsmp, s->dlog, d, j, q);
        d[j] = s->greedy ? argmax(q, (int)V) : draw(q, (int)V, sampler_uniform(s->dsmp));
        if (s->gc && gcon_accept(s->gc, j ? d[j - 1] : s->tok[s->n_tok - 1], d[j], err)) return -1;
        if (j + 1 < k && model_forward(s->draft, &d[j], 1, 0, s->dlog, err)) return -1;
    }
    return k;
}

// How many tokens to draft this round: the adaptive choice (or draft_max),
// within the room left in both contexts and the caller's limit.
static int round_k(spec *s, int limit) {
    int k = s->p.draft_max;
    if (!s->p.fixed) {
        double verify[SPEC_MAX_DRAFT + 2];  // [n]: one target pass over n positions
        for (int n = 1; n <= k + 1; n++) verify[n] = 1 + SPEC_ROW_COST * (n - 1);
        double alpha = (s->acc_hits + 2 * SPEC_PRIOR) / (s->acc_tries + 2);
        k = spec_choose_k(alpha, s->draft_cost, verify, k);
    }
    const int n = s->n_tok;  // target positions L..L+k must be < ctx, L = n - 1
    k = imin(k, model_ctx(s->target) - n);
    if (s->draft) k = imin(k, model_ctx(s->draft) - n + 1);  // it runs cur..d(k-1) at L..L+k-1
    if (limit > 0) k = imin(k, limit - 1);
    return k > 0 ? k : 0;
}

// ---- Verification --------------------------------------------------------------------

// Runs the target over [cur, d[0..nd)] in one pass and applies the rule.
// Returns a, the drafted tokens accepted, and sets *next to the target's
// token after them.
static int verify(spec *s, const int32_t *d, int nd, int32_t *next, char *err) {
    const size_t V = (size_t)s->n_vocab;
    model_tok t[SPEC_MAX_DRAFT + 1];
    t[0] = (model_tok){.id = s->tok[s->n_tok - 1], .seq = 0, .logits = 1};
    for (int i = 0; i < nd; i++) t[i + 1] = (model_tok){.id = d[i], .seq = 0, .logits = 1};
    // No prompt rows (n_prompt 0): each row gets exactly the logits a
    // one-token pass gives (model.h), so greedy picks the non-speculative
    // tokens bit for bit, and sampling sees the same distributions. A prompt
    // pass may round differently (the CPU's Q4_K kernel sums groups of 4
    // tokens in another order, as llama.cpp does), which would let a near tie
    // flip.
    if (model_forward_batch(s->target, t, nd + 1, 0, s->tlog, err)) return -1;
    s->st.target_passes++;
    for (int i = 0;; i++) {
        // under a grammar, row i is masked with the state after d[0..i), which
        // gc reaches as the drafted tokens are accepted below
        const int32_t prev = i ? d[i - 1] : s->tok[s->n_tok - 1];
        if (s->gc && i > 0 && gcon_accept(s->gc, i > 1 ? d[i - 2] : s->tok[s->n_tok - 1], d[i - 1], err)) return -1;
        if (s->gc && gcon_apply(s->gc, prev, s->tlog + i * V, err) < 0) return -1;
        // p: the target's chain after [cur, d[0..i)], i.e. with d[0..i) in the history
        sampler_probs(s->tsmp, s->tlog + i * V, d, i, s->pbuf);
        if (i == nd) {  // every drafted token agreed (or none was drafted): the bonus token
            *next = s->greedy ? argmax(s->pbuf, (int)V) : draw(s->pbuf, (int)V, sampler_uniform(s->tsmp));
            return i;
        }
        int ok;
        if (s->greedy) {
            *next = argmax(s->pbuf, (int)V);
            ok = *next == d[i];
        } else {
            double u1 = sampler_uniform(s->tsmp), u2 = sampler_uniform(s->tsmp);
            *next = spec_verify_token(s->pbuf, s->q ? s->q + i * V : NULL, (int)V, d[i], u1, u2, &ok);
        }
        if (!ok) return i;
    }
}

// Folds one round into the running acceptance rate: a tokens accepted, then
// (if a < nd) one rejected; tokens after a rejection were never tested.
static void learn(spec *s, int nd, int a) {
    const double decay = nd > 0 ? SPEC_DECAY : SPEC_DECAY_IDLE;
    s->acc_hits = decay * s->acc_hits + a;
    s->acc_tries = decay * s->acc_tries + (nd > 0 ? a + (a < nd) : 0);
}

static int spec_round(spec *s, int limit, char *err) {
    const int L = s->n_tok - 1;  // cur = tok[L] is not in the target's cache yet
    if (model_len(s->target) != L)
        return errf(err, "speculative decoding: the target holds %d positions, expected %d", model_len(s->target), L);
    if (reserve(s, s->n_tok + SPEC_MAX_DRAFT + 1, err)) return -1;
    const int k = round_k(s, limit);
    int32_t d[SPEC_MAX_DRAFT], next;
    double t = now_sec();
    int nd = 0;
    if (s->gc && gcon_save(s->gc, &s->gsaved)) return errf(err, "out of memory");
    if (k > 0 && s->draft) nd = propose_draft(s, k, d, err);
    else if (k > 0) nd = spec_lookup(s->tok, s->n_tok, s->p.ngram_min, s->p.ngram_max, k, d);
    if (nd < 0) return -1;
    if (s->gc && gcon_restore(s->gc, &s->gsaved)) return errf(err, "out of memory");
    const double t_draft = now_sec() - t;
    t = now_sec();
    int a = verify(s, d, nd, &next, err);
    if (a < 0) return -1;
    const double t_verify = now_sec() - t;
    s->round_base = s->n_tok;
    for (int i = 0; i < a; i++) commit(s, d[i]);
    // gc has advanced over d[0..a) in verify
    if (s->gc && gcon_accept(s->gc, s->tok[s->n_tok - 1], next, err)) return -1;
    commit(s, next);
    // keep cur and the accepted d[0..a) (positions L..L+a); next is not run yet
    if (model_rewind(s->target, L + 1 + a) != L + 1 + a)  // sliding windows keep more than a round
        return errf(err, "the target model's cache lost position %d", L + a);
    if (s->draft && model_len(s->draft) > L + 1 + a) model_rewind(s->draft, L + 1 + a);
    s->st.t_draft += t_draft;
    s->st.t_target += t_verify;
    s->st.drafted += nd;
    s->st.accepted += a;
    s->st.produced += a + 1;
    learn(s, nd, a);
    return 0;
}

int spec_next(spec *s, int limit, int32_t *out, char *err) {
    if (s->n_out == s->n_tok && spec_round(s, limit, err)) return -1;
    *out = s->tok[s->n_out++];
    return 0;
}

int spec_len(const spec *s) { return s->n_out - 1; }

const float *spec_logits(const spec *s) {
    // a round's tokens are handed out before the next round overwrites tlog
    const int row = s->n_out - 1 - s->round_base;
    return row >= 0 ? s->tlog + (size_t)row * (size_t)s->n_vocab : NULL;
}

const spec_stats *spec_get_stats(const spec *s) { return &s->st; }

void spec_stats_format(const spec_stats *st, char *line, size_t line_len, char *json, size_t json_len) {
    double rate = st->drafted ? (double)st->accepted / st->drafted : 0;
    double per_pass = st->target_passes ? (double)st->produced / st->target_passes : 0;
    snprintf(line, line_len,
             " | draft %ld tok, accepted %ld (%.1f%%), %.2f tok/target pass, draft %.1f ms, target %.1f ms",
             st->drafted, st->accepted, 100 * rate, per_pass, st->t_draft * 1e3, st->t_target * 1e3);
    snprintf(json, json_len,
             ", \"draft_tokens\": %ld, \"draft_accepted\": %ld, \"acceptance_rate\": %.4f, "
             "\"target_passes\": %ld, \"tokens_per_pass\": %.4f, \"draft_ms\": %.3f, \"target_ms\": %.3f",
             st->drafted, st->accepted, rate, st->target_passes, per_pass, st->t_draft * 1e3, st->t_target * 1e3);
}
