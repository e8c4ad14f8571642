// tests/test_spec.c — speculative decoding's pieces and its exactness in law.
//
//   build/tests/test_spec    (from the repo root; SHARED names the shared data)
//
// 1. The rejection rule (spec_verify_token) on synthetic p/q pairs: tokens
//    drafted from q and passed through the rule, thousands of times, must
//    follow p by a chi-square test at significance 1e-3; the same harness must
//    reject (p-value < 1e-6) two broken rules: resampling from p instead of
//    max(0, p - q) on rejection, and testing against a q other than the one
//    the token was drawn from (filters applied to the drafter inconsistently).
// 2. Prompt lookup and the choice of K on hand-made cases.
// 3. End to end on stories260K (F32) at temperature 1 with a repetition
//    penalty: the first two tokens from the speculative decoder (Q4_0 draft,
//    and prompt lookup), and from the plain sampler, over thousands of seeds,
//    against their exact joint law computed from the target's logits.
// Exits 0 only when every check passed.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model.h"
#include "sample.h"
#include "spec.h"
#include "tokenizer.h"
#include "util.h"
#include "check.h"


#define PASS_LEVEL 1e-3   // a correct rule must not be rejected at this significance
#define BROKEN_LEVEL 1e-6 // a broken one must be rejected at least this clearly

// ---- Statistics ----------------------------------------------------------------

// Test-local PRNG (splitmix64), independent of the sampler's.
static double urand(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

static int32_t draw_from(const float *p, int n, double u) {
    double cum = 0;
    int last = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] <= 0) continue;
        cum += p[i];
        last = i;
        if (cum > u) return i;
    }
    return last;
}

// Regularized upper incomplete gamma Q(a, x): a series for x < a + 1, else a
// continued fraction (modified Lentz).
static double gamma_q(double a, double x) {
    if (x <= 0) return 1;
    double lead = exp(-x + a * log(x) - lgamma(a));
    if (x < a + 1) {
        double term = 1 / a, sum = term;
        for (int n = 1; n < 1000 && fabs(term) > 1e-15 * fabs(sum); n++) sum += term *= x / (a + n);
        return 1 - lead * sum;
    }
    double b = x + 1 - a, c = 1e300, d = 1 / b, h = d;
    for (int i = 1; i < 1000; i++) {
        double an = -i * (i - a);
        b += 2;
        d = an * d + b;
        d = fabs(d) < 1e-300 ? 1e-300 : d;
        c = b + an / c;
        c = fabs(c) < 1e-300 ? 1e-300 : c;
        d = 1 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1) < 1e-15) break;
    }
    return lead * h;
}

// Pearson's chi-square p-value of counts[0..n) (total N) against probabilities
// expect[0..n). Cells expecting fewer than 5 are pooled into one; a count in a
// cell of probability 0 is an outright failure (p-value 0).
static double chi_square_p(const long *counts, const double *expect, int n, long N, int *df_out) {
    double chi = 0, pool_e = 0, pool_c = 0;
    int cells = 0;
    *df_out = 0;
    for (int i = 0; i < n; i++) {
        double e = expect[i] * N;
        if (expect[i] <= 0) {
            if (counts[i]) return 0;
            continue;
        }
        if (e < 5) {
            pool_e += e, pool_c += counts[i];
            continue;
        }
        chi += (counts[i] - e) * (counts[i] - e) / e;
        cells++;
    }
    if (pool_e > 0) chi += (pool_c - pool_e) * (pool_c - pool_e) / pool_e, cells++;
    *df_out = cells - 1;
    return cells > 1 ? gamma_q((cells - 1) / 2.0, chi / 2) : 1;
}

static void test_gamma_q(void) {
    // chi-square survival values from tables: df 1 at 3.841 -> 0.05, df 10 at 23.209 -> 0.01
    CHECK(fabs(gamma_q(0.5, 3.841 / 2) - 0.05) < 1e-4, "Q(1/2, 3.841/2) = %g", gamma_q(0.5, 3.841 / 2));
    CHECK(fabs(gamma_q(5, 23.209 / 2) - 0.01) < 1e-4, "Q(5, 23.209/2) = %g", gamma_q(5, 23.209 / 2));
    CHECK(fabs(gamma_q(2, 1.0) - 2 * exp(-1.0)) < 1e-12, "Q(2, 1) = 2/e, got %g", gamma_q(2, 1.0));
}

// ---- 1. The rejection rule on synthetic distributions ---------------------------

enum { NV = 6, TRIALS = 20000 };

enum rule { RULE_EXACT, RULE_RESAMPLE_FROM_P, RULE_WRONG_Q };

// One drafted-and-verified token under a rule. q_draw: what the token is
// drawn from; RULE_WRONG_Q tests it against q_test instead.
static int32_t one_token(enum rule r, const float *p, const float *q_draw, const float *q_test, uint64_t *rng) {
    int32_t d = q_draw ? draw_from(q_draw, NV, urand(rng)) : 2;  // NULL: deterministic draft 2
    double u1 = urand(rng), u2 = urand(rng);
    int ok;
    int32_t t = spec_verify_token(p, r == RULE_WRONG_Q ? q_test : q_draw, NV, d, u1, u2, &ok);
    if (r == RULE_RESAMPLE_FROM_P && !ok) t = draw_from(p, NV, u2);  // the classic bug
    return t;
}

// p-value of TRIALS tokens under rule r against p; also the acceptance rate.
static double run_rule(enum rule r, const float *p, const float *q_draw, const float *q_test, uint64_t seed,
                       double *acc_rate) {
    long counts[NV] = {0}, acc = 0;
    uint64_t rng = seed;
    for (int i = 0; i < TRIALS; i++) {
        uint64_t replay = rng;  // the draw one_token will make
        int32_t d = q_draw ? draw_from(q_draw, NV, urand(&replay)) : 2;
        int32_t t = one_token(r, p, q_draw, q_test, &rng);
        counts[t]++;
        acc += t == d;  // a rejection never yields d: it needs p[d] < q[d], so max(0, p - q) is 0 at d
    }
    double expect[NV];
    for (int i = 0; i < NV; i++) expect[i] = p[i];
    int df;
    *acc_rate = (double)acc / TRIALS;
    return chi_square_p(counts, expect, NV, TRIALS, &df);
}

static void test_rule(void) {
    static const struct {
        const char *name;
        float p[NV], q[NV];
        int deterministic;  // q is one-hot at token 2 (prompt lookup): passed as NULL
    } cases[] = {
        {"overlapping", {0.4f, 0.3f, 0.2f, 0.1f, 0, 0}, {0.1f, 0.1f, 0.2f, 0.3f, 0.3f, 0}, 0},
        {"disjoint", {0.5f, 0.5f, 0, 0, 0, 0}, {0, 0, 0.25f, 0.25f, 0.25f, 0.25f}, 0},
        {"equal", {0.1f, 0.2f, 0.3f, 0.2f, 0.1f, 0.1f}, {0.1f, 0.2f, 0.3f, 0.2f, 0.1f, 0.1f}, 0},
        {"greedy target", {0, 0, 0, 1, 0, 0}, {0.2f, 0.2f, 0.2f, 0.2f, 0.1f, 0.1f}, 0},
        {"lookup draft", {0.3f, 0.1f, 0.4f, 0.05f, 0.15f, 0}, {0}, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        const float *q = cases[c].deterministic ? NULL : cases[c].q;
        double acc, pv = run_rule(RULE_EXACT, cases[c].p, q, q, 1000 + c, &acc);
        // expected acceptance: sum of min(p, q)
        double want = 0;
        for (int i = 0; i < NV; i++) want += fmin(cases[c].p[i], q ? q[i] : i == 2);
        printf("rule %-14s exact rule:           p-value %.3g, accepted %.3f (sum min(p,q) %.3f)\n",
               cases[c].name, pv, acc, want);
        CHECK(pv > PASS_LEVEL, "%s: the exact rule fails the chi-square test (p-value %g)", cases[c].name, pv);
        CHECK(fabs(acc - want) < 0.02, "%s: acceptance %.3f, expected %.3f", cases[c].name, acc, want);
    }
    // The harness must see these broken rules (the overlapping case).
    const float *p = cases[0].p, *q = cases[0].q;
    double acc, pv = run_rule(RULE_RESAMPLE_FROM_P, p, q, q, 77, &acc);
    printf("rule overlapping    resample from p:      p-value %.3g (must be < %g)\n", pv, BROKEN_LEVEL);
    CHECK(pv < BROKEN_LEVEL, "resampling from p was not detected (p-value %g)", pv);
    // drafted from the drafter's top-2 (filters applied to it) but tested against its unfiltered q
    const float q_top2[NV] = {0, 0, 0, 0.5f, 0.5f, 0};
    pv = run_rule(RULE_WRONG_Q, p, q_top2, q, 78, &acc);
    printf("rule overlapping    q of another chain:   p-value %.3g (must be < %g)\n", pv, BROKEN_LEVEL);
    CHECK(pv < BROKEN_LEVEL, "an inconsistent q was not detected (p-value %g)", pv);
}

// ---- 2. sampler_probs, prompt lookup and the choice of K -------------------------

// sampler_probs with extra tokens equals a sampler that accepted them, leaves
// its sampler unchanged, sums to 1, and is one-hot at the argmax when greedy.
static void test_probs(void) {
    enum { N = 50 };
    float logits[N], a[N], b[N], c[N];
    uint64_t rng = 7;
    for (int i = 0; i < N; i++) logits[i] = (float)(4 * urand(&rng) - 2);
    logits[17] = 3.0f, logits[22] = 2.9f;  // the top two: penalizing them shows
    const int32_t hist[] = {3, 9, 9, 41}, extra[] = {17, 3, 22};
    for (int greedy = 0; greedy < 2; greedy++) {
        sampler_params sp = {.temp = greedy ? 0.0f : 0.9f, .top_k = 20, .top_p = 0.9f, .min_p = 0.02f,
                             .repeat_penalty = 1.7f, .repeat_last_n = 5, .seed = 1};
        sampler *s = sampler_new(&sp, N), *t = sampler_new(&sp, N);
        for (int i = 0; i < 4; i++) sampler_accept(s, hist[i]), sampler_accept(t, hist[i]);
        sampler_probs(s, logits, NULL, 0, c);
        sampler_probs(s, logits, extra, 3, a);
        for (int i = 0; i < 3; i++) sampler_accept(t, extra[i]);
        sampler_probs(t, logits, NULL, 0, b);
        CHECK(!memcmp(a, b, sizeof a), "greedy %d: extra tokens differ from accepted ones", greedy);
        CHECK(memcmp(a, c, sizeof a), "greedy %d: the extra tokens changed nothing (penalty not applied?)", greedy);
        sampler_probs(s, logits, NULL, 0, b);
        CHECK(!memcmp(b, c, sizeof b), "greedy %d: sampler_probs changed the sampler's history", greedy);
        double sum = 0;
        int ones = 0;
        for (int i = 0; i < N; i++) sum += a[i], ones += a[i] == 1.0f;
        CHECK(fabs(sum - 1) < 1e-5, "greedy %d: probabilities sum to %g", greedy, sum);
        if (greedy) {
            float l[N];
            memcpy(l, logits, sizeof l);
            int32_t pick = sampler_sample(t, l);
            CHECK(ones == 1 && a[pick] == 1.0f, "greedy: not one-hot at sampler_sample's pick %d", pick);
        }
        sampler_free(s);
        sampler_free(t);
    }
}

static void test_lookup(void) {
    int32_t out[8];
    //              0  1  2  3  4  5  6  7  8
    int32_t h[] = {5, 6, 7, 8, 9, 5, 6, 7, 1};
    // tail [6 7 1]/[7 1] never occurred, [1] neither: no draft
    CHECK(spec_lookup(h, 9, 1, 3, 4, out) == 0, "no match expected");
    // tail ... 5 6 7: matches at 0, continuation 8 9 5 6 7 (capped at k)
    int n = spec_lookup(h, 8, 1, 3, 4, out);
    CHECK(n == 4 && out[0] == 8 && out[1] == 9 && out[2] == 5 && out[3] == 6, "got %d: %d %d", n, out[0], out[1]);
    // the latest occurrence wins: 1 2 X 1 2 Y 1 2 -> Y
    int32_t h2[] = {1, 2, 10, 1, 2, 11, 1, 2};
    n = spec_lookup(h2, 8, 1, 2, 1, out);
    CHECK(n == 1 && out[0] == 11, "latest match: got %d, %d", n, out[0]);
    // the continuation stops at the end of the history
    int32_t h3[] = {4, 4, 4};
    n = spec_lookup(h3, 3, 1, 2, 8, out);
    CHECK(n == 1 && out[0] == 4, "overlapping match: got %d", n);
    // longer n-grams first: [3 4] matches at 2 (-> 9), while [4] alone matches later (-> 7)
    int32_t h4[] = {0, 1, 3, 4, 9, 4, 7, 3, 4};
    n = spec_lookup(h4, 9, 1, 2, 1, out);
    CHECK(n == 1 && out[0] == 9, "bigram first: got %d", out[0]);
    n = spec_lookup(h4, 9, 1, 1, 1, out);
    CHECK(n == 1 && out[0] == 7, "unigram: got %d", out[0]);
}

static void test_choose_k(void) {
    CHECK(fabs(spec_expected_tokens(0.5, 3) - 1.875) < 1e-12, "1 + .5 + .25 + .125");
    CHECK(spec_expected_tokens(1.0, 4) == 5, "all accepted: k + 1");
    double flat[SPEC_MAX_DRAFT + 2], linear[SPEC_MAX_DRAFT + 2];
    for (int n = 0; n < SPEC_MAX_DRAFT + 2; n++) flat[n] = 1.0, linear[n] = 1.0 + 0.25 * n;
    // free drafts, flat verification, high acceptance: draft all the way
    CHECK(spec_choose_k(0.95, 0.0, flat, 16) == 16, "got %d", spec_choose_k(0.95, 0.0, flat, 16));
    // hopeless drafts: no drafting (a plain step)
    CHECK(spec_choose_k(0.05, 0.1, flat, 16) == 0, "got %d", spec_choose_k(0.05, 0.1, flat, 16));
    // a draft that costs a target pass per token can never pay
    CHECK(spec_choose_k(0.99, 1.0, flat, 16) == 0, "got %d", spec_choose_k(0.99, 1.0, flat, 16));
    // costly verification of long drafts: somewhere in between, and larger for better acceptance
    int k7 = spec_choose_k(0.7, 0.05, linear, 16), k9 = spec_choose_k(0.9, 0.05, linear, 16);
    CHECK(k7 > 1 && k7 < 16 && k9 > k7, "k(0.7) = %d, k(0.9) = %d", k7, k9);
}

// ---- 3. End to end: the first two tokens at temperature 1 ------------------------

// Runs per law; fewer under the sanitizers (QUILL_SANITIZED, set by make
// test-asan), where each costs ~10x: the test is as exact, with less power.
static int e2e_trials(void) { return getenv("QUILL_SANITIZED") ? 1000 : 3000; }

typedef struct {
    model *target;
    tokenizer *tok;
    int32_t *prompt;
    int n;               // prompt tokens; the last one plays the first generated token
    sampler_params sp;
    int V;
    double *joint;       // [V * V] exact P(t1, t2)
    float **logits1;     // [V] target logits after t1 (NULL where P(t1) = 0)
    float *logits0;      // [V] the target's logits for t1
} e2e;

static sampler *history_sampler(const e2e *e, uint64_t seed) {
    sampler_params sp = e->sp;
    sp.seed = seed;
    sampler *s = sampler_new(&sp, e->V);
    for (int i = 0; s && i < e->n; i++) sampler_accept(s, e->prompt[i]);
    return s;
}

// The exact joint law of the two tokens after the prompt, from the target's
// logits through sampler_probs: P(t1) P(t2 | t1), the second with t1 in the
// penalty history.
static int e2e_reference(e2e *e, char *err) {
    const int V = e->V, n = e->n;
    float *p1 = malloc(sizeof(float) * V), *p2 = malloc(sizeof(float) * V);
    sampler *s = history_sampler(e, 1);
    e->joint = calloc((size_t)V * V, sizeof *e->joint);
    e->logits0 = malloc(sizeof(float) * V);
    e->logits1 = calloc((size_t)V, sizeof *e->logits1);
    if (!p1 || !p2 || !s || !e->joint || !e->logits0 || !e->logits1) return errf(err, "out of memory");
    model_rewind(e->target, 0);
    if (model_forward(e->target, e->prompt, n, 0, e->logits0, err)) return -1;
    sampler_probs(s, e->logits0, NULL, 0, p1);
    for (int32_t t1 = 0; t1 < V; t1++) {
        if (p1[t1] <= 0) continue;
        model_rewind(e->target, n);
        if (!(e->logits1[t1] = malloc(sizeof(float) * V))) return errf(err, "out of memory");
        if (model_forward(e->target, &t1, 1, 0, e->logits1[t1], err)) return -1;
        sampler_probs(s, e->logits1[t1], &t1, 1, p2);
        for (int t2 = 0; t2 < V; t2++) e->joint[(size_t)t1 * V + t2] = (double)p1[t1] * p2[t2];
    }
    sampler_free(s);
    free(p1);
    free(p2);
    return 0;
}

static double e2e_p_value(const e2e *e, const long *counts, long N, const char *what) {
    int df;
    double pv = chi_square_p(counts, e->joint, e->V * e->V, N, &df);
    printf("e2e %-22s %ld runs, %d degrees of freedom: p-value %.3g\n", what, N, df, pv);
    return pv;
}

// The plain sampler (no speculation) over the cached logits: checks that the
// reference law is the one sampler_sample draws from.
static void e2e_plain(const e2e *e) {
    const int V = e->V;
    long *counts = calloc((size_t)V * V, sizeof *counts);
    float *l = malloc(sizeof(float) * V);
    for (int r = 0; counts && l && r < e2e_trials(); r++) {
        sampler *s = history_sampler(e, 5000 + r);
        memcpy(l, e->logits0, sizeof(float) * V);
        int32_t t1 = sampler_sample(s, l);
        sampler_accept(s, t1);
        memcpy(l, e->logits1[t1], sizeof(float) * V);
        int32_t t2 = sampler_sample(s, l);
        counts[(size_t)t1 * V + t2]++;
        sampler_free(s);
    }
    double pv = e2e_p_value(e, counts, e2e_trials(), "plain sampler");
    CHECK(pv > PASS_LEVEL, "the plain sampler disagrees with the reference law (p-value %g)", pv);
    free(counts);
    free(l);
}

// The speculative decoder from the prompt (its last token as `first`), so
// both generated tokens pass through drafting and the rule.
static void e2e_spec(const e2e *e, model *draft, const char *what) {
    const int V = e->V;
    long *counts = calloc((size_t)V * V, sizeof *counts), drafted = 0, accepted = 0;
    spec_params p = {.draft_max = 3, .fixed = 1, .ngram_min = 1, .ngram_max = 3};
    char err[ERR_LEN];
    int ok = counts != NULL;
    model_rewind(e->target, 0);
    ok = ok && !model_forward(e->target, e->prompt, e->n - 1, 0, e->logits0 /* scratch */, err);
    for (int r = 0; ok && r < e2e_trials(); r++) {
        spec *s;
        sampler_params sp = e->sp;
        sp.seed = 100000 + r;
        model_rewind(e->target, e->n - 1);
        int32_t t1, t2;
        ok = !spec_new(&s, e->target, draft, &sp, &p, err) &&
             !spec_begin(s, e->prompt, e->n - 1, e->prompt[e->n - 1], err) && !spec_next(s, 0, &t1, err) &&
             !spec_next(s, 0, &t2, err);
        if (ok) {
            counts[(size_t)t1 * V + t2]++;
            drafted += spec_get_stats(s)->drafted;
            accepted += spec_get_stats(s)->accepted;
        }
        spec_free(s);
    }
    CHECK(ok, "%s: %s", what, err);
    if (ok) {
        printf("e2e %-22s drafted %ld, accepted %ld\n", what, drafted, accepted);
        double pv = e2e_p_value(e, counts, e2e_trials(), what);
        CHECK(pv > PASS_LEVEL, "%s: the two tokens disagree with the target's law (p-value %g)", what, pv);
        CHECK(accepted > 0 && accepted < drafted, "%s: drafts must be both accepted and rejected", what);
    }
    free(counts);
}

static void test_e2e(const char *shared) {
    char tpath[600], dpath[600], err[ERR_LEN];
    snprintf(tpath, sizeof tpath, "%s/models/gguf/stories260K.gguf", shared);
    snprintf(dpath, sizeof dpath, "%s/models/gguf/stories260K-Q4_0.gguf", shared);
    if (access(tpath, R_OK) || access(dpath, R_OK)) {
        CHECK(0, "%s or %s not found (set SHARED)", tpath, dpath);
        return;
    }
    e2e e = {.sp = {.temp = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.02f, .repeat_penalty = 1.5f,
                    .repeat_last_n = 3}};
    model *draft = NULL;
    model_opts mo = {.ops = &cpu_backend, .n_threads = 1, .n_ctx = 64};
    const char *text = "Tom had a big ball. Tom had a";
    int ok = !model_load(&e.target, tpath, &mo, err) && !model_load(&draft, dpath, &mo, err) &&
             !tok_load(&e.tok, model_gguf(e.target), err) &&
             !tok_encode(e.tok, text, strlen(text), 1, 0, &e.prompt, &e.n, err);
    if (ok) e.V = model_cfg(e.target)->n_vocab;
    if (!ok || e2e_reference(&e, err)) {
        CHECK(0, "%s", err);
    } else {
        e2e_plain(&e);
        e2e_spec(&e, draft, "Q4_0 draft");
        e2e_spec(&e, NULL, "prompt lookup");
    }
    for (int i = 0; e.logits1 && i < e.V; i++) free(e.logits1[i]);
    free(e.logits1);
    free(e.logits0);
    free(e.joint);
    free(e.prompt);
    tok_free(e.tok);
    model_free(draft);
    model_free(e.target);
}

int main(void) {
    const char *shared = getenv("SHARED") ? getenv("SHARED") : "../shared";
    test_gamma_q();
    test_rule();
    test_probs();
    test_lookup();
    test_choose_k();
    test_e2e(shared);
    if (n_fail) {
        fprintf(stderr, "test_spec: %d failure(s)\n", n_fail);
        return 1;
    }
    printf("test_spec: all passed\n");
    return 0;
}
