// tests/test_sample.c — the sampler's stages against hand-computed sets and
// distributions, and against a naive full-sort reference on random logits.
// Exits 0 only when every check passed.
#include "sample.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


// ---- helpers -------------------------------------------------------------------

static void fill(sample_cand *c, const float *logits, int n) {
    for (int i = 0; i < n; i++) c[i] = (sample_cand){i, logits[i], 0.0f};
}

// Bit i set when token i is among c[0..n): compares small sets in one go.
static unsigned mask_of(const sample_cand *c, int n) {
    unsigned m = 0;
    for (int i = 0; i < n; i++) m |= 1u << c[i].id;
    return m;
}

static sampler *make(float temp, int top_k, float top_p, float min_p, uint64_t seed, int n_vocab) {
    sampler_params p = {.temp = temp, .top_k = top_k, .top_p = top_p, .min_p = min_p,
                        .repeat_penalty = 1.0f, .repeat_last_n = 64, .seed = seed};
    sampler *s = sampler_new(&p, n_vocab);
    if (!s) {
        fprintf(stderr, "sampler_new failed\n");
        exit(1);
    }
    return s;
}

// Test-local PRNG (not the sampler's) for random logits.
static uint32_t lcg(uint64_t *x) {
    *x = *x * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(*x >> 33);
}

// ---- greedy and penalties ----------------------------------------------------------

static void test_greedy(void) {
    float l[5] = {0.1f, 2.0f, -1.0f, 2.0f, 1.5f};
    sampler *s = make(0.0f, 0, 1.0f, 0.0f, 1, 5);
    int32_t t = sampler_sample(s, l);
    CHECK(t == 1, "tie between 1 and 3 must go to 1, got %d", t);
    float l2[5] = {-5.0f, -4.0f, -3.0f, -2.0f, -1.5f};
    t = sampler_sample(s, l2);
    CHECK(t == 4, "argmax of negative logits is 4, got %d", t);
    sampler_free(s);
    // Negative temp is greedy too, and the filters cannot change the argmax.
    s = make(-1.0f, 2, 0.5f, 0.5f, 1, 5);
    t = sampler_sample(s, l);
    CHECK(t == 1, "greedy with filters: expected 1, got %d", t);
    sampler_free(s);
}

static void test_penalty_stage(void) {
    const float l[5] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f};
    sample_cand c[5];
    sample_penalties pen;
    // penalty 2, history 0 1 1 4: token 1 repeats but is penalised once.
    CHECK(sample_penalties_init(&pen, 2.0f, 8, 5) == 0, "init");
    int32_t hist[] = {0, 1, 1, 4, 99, -1};  // 99 and -1 are out of range: ignored
    for (int i = 0; i < 6; i++) sample_penalties_accept(&pen, hist[i]);
    fill(c, l, 5);
    sample_penalties_apply(&pen, c, 5);
    const float want[5] = {1.0f, -2.0f, 0.5f, 3.0f, -4.0f};
    for (int i = 0; i < 5; i++) CHECK(c[i].logit == want[i], "id %d: want %g got %g", i, want[i], c[i].logit);
    // Applying again from fresh logits gives the same (the dedupe marks were cleared).
    fill(c, l, 5);
    sample_penalties_apply(&pen, c, 5);
    for (int i = 0; i < 5; i++) CHECK(c[i].logit == want[i], "2nd apply id %d: want %g got %g", i, want[i], c[i].logit);
    sample_penalties_free(&pen);

    // Window of 2: after 0 1 2 only {1, 2} are recent; penalty 1.5.
    CHECK(sample_penalties_init(&pen, 1.5f, 2, 5) == 0, "init");
    for (int i = 0; i < 3; i++) sample_penalties_accept(&pen, i);
    fill(c, l, 5);
    sample_penalties_apply(&pen, c, 5);
    const float want2[5] = {2.0f, -1.5f, 0.5f / 1.5f, 3.0f, -2.0f};
    for (int i = 0; i < 5; i++) CHECK(c[i].logit == want2[i], "window id %d: want %g got %g", i, want2[i], c[i].logit);
    sample_penalties_free(&pen);
}

static void test_penalty_greedy(void) {
    // 3.0 / 1.1 = 2.727 < 2.9: once 0 was seen, greedy moves to 1.
    float l[3] = {3.0f, 2.9f, 0.0f};
    sampler_params p = {.temp = 0, .top_k = 0, .top_p = 1, .min_p = 0,
                        .repeat_penalty = 1.1f, .repeat_last_n = 4, .seed = 1};
    sampler *s = sampler_new(&p, 3);
    CHECK(sampler_sample(s, l) == 0, "no history: 0");
    sampler_accept(s, 0);
    CHECK(sampler_sample(s, l) == 1, "0 penalised: 1");
    // Four more tokens push 0 out of the 4-token window.
    for (int i = 0; i < 4; i++) sampler_accept(s, 2);
    CHECK(sampler_sample(s, l) == 0, "0 left the window: 0");
    sampler_free(s);
}

// ---- filters on hand-computed sets ---------------------------------------------------

static void test_top_k(void) {
    sample_cand c[5];
    const float a[5] = {1, 3, 3, 2, 0}, b[5] = {1, 3, 2, 2, 0};
    fill(c, a, 5);
    int n = sample_top_k(c, 5, 2);
    CHECK(n == 2 && mask_of(c, n) == 0x06, "k=2: want {1,2}, got n=%d mask=%x", n, mask_of(c, n));
    fill(c, a, 5);
    n = sample_top_k(c, 5, 3);
    CHECK(n == 3 && mask_of(c, n) == 0x0e, "k=3: want {1,2,3}, got mask=%x", mask_of(c, n));
    fill(c, b, 5);
    n = sample_top_k(c, 5, 2);
    CHECK(n == 2 && mask_of(c, n) == 0x06, "boundary tie 2 vs 3 goes to 2, got mask=%x", mask_of(c, n));
    fill(c, a, 5);
    n = sample_top_k(c, 5, 1);
    CHECK(n == 1 && c[0].id == 1, "k=1: want 1, got %d", c[0].id);
    fill(c, a, 5);
    CHECK(sample_top_k(c, 5, 0) == 5 && sample_top_k(c, 5, 9) == 5, "k off keeps all");
}

static const float P4[4] = {0.5f, 0.25f, 0.15f, 0.1f};

static void fill_log(sample_cand *c, const float *p, int n) {
    for (int i = 0; i < n; i++) c[i] = (sample_cand){i, logf(p[i]), 0.0f};
}

static void test_top_p(void) {
    sample_cand c[4];
    // cumulative: 0.5, 0.75, 0.9, 1.0
    const struct { float p; unsigned mask; } cases[] = {
        {0.7f, 0x3}, {0.4f, 0x1}, {0.8f, 0x7}, {0.95f, 0xf}, {0.0f, 0x1}, {0.51f, 0x3}, {1.0f, 0xf}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        fill_log(c, P4, 4);
        int n = sample_top_p(c, 4, cases[k].p);
        CHECK(mask_of(c, n) == cases[k].mask, "top_p=%g: want %x got %x", cases[k].p, cases[k].mask, mask_of(c, n));
    }
    // The array order must not matter: same set when the ids arrive reversed.
    for (int i = 0; i < 4; i++) c[i] = (sample_cand){3 - i, logf(P4[3 - i]), 0.0f};
    int n = sample_top_p(c, 4, 0.7f);
    CHECK(mask_of(c, n) == 0x3, "reversed input: want {0,1}, got %x", mask_of(c, n));
    // top_p computes p at temperature 1 over the candidates.
    fill_log(c, P4, 4);
    sample_top_p(c, 4, 0.99f);
    for (int i = 0; i < 4; i++) CHECK(fabsf(c[i].p - P4[c[i].id]) < 1e-6f, "p[%d]=%g", c[i].id, c[i].p);
}

static void test_min_p(void) {
    sample_cand c[4];
    // p_max = 0.5: min_p m keeps p >= 0.5 m. (min_p = 0.3 sits exactly on
    // 0.15 and is decided by float rounding of the logits, so it is not used.)
    const struct { float m; unsigned mask; } cases[] = {
        {0.29f, 0x7}, {0.31f, 0x3}, {0.19f, 0xf}, {0.21f, 0x7}, {0.51f, 0x1}, {1.0f, 0x1}, {0.0f, 0xf}};
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        fill_log(c, P4, 4);
        int n = sample_min_p(c, 4, cases[k].m);
        CHECK(mask_of(c, n) == cases[k].mask, "min_p=%g: want %x got %x", cases[k].m, cases[k].mask, mask_of(c, n));
    }
}

static void test_draw(void) {
    // Inverse CDF over {0.25, 0, 0.75}: a zero-probability token is never drawn.
    const sample_cand c[3] = {{0, 0, 0.25f}, {1, 0, 0.0f}, {2, 0, 0.75f}};
    CHECK(sample_draw(c, 3, 0.0) == 0, "u=0");
    CHECK(sample_draw(c, 3, 0.2499) == 0, "u=0.2499");
    CHECK(sample_draw(c, 3, 0.25) == 2, "u=0.25 skips the empty token");
    CHECK(sample_draw(c, 3, 0.9999999999) == 2, "u near 1");
    const sample_cand d[3] = {{0, 0, 0.5f}, {1, 0, 0.5f}, {2, 0, 0.0f}};
    CHECK(sample_draw(d, 3, 1.0 - 0x1.0p-53) == 1, "u at the top never lands on a p=0 tail");
}

// ---- random logits against a full-sort reference -----------------------------------

static int ref_cmp(const void *a, const void *b) {
    const sample_cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit > y->logit ? -1 : 1;
    return x->id < y->id ? -1 : 1;
}

// Mass of the best m of ref (sorted best first), softmax in double.
static double ref_mass(const sample_cand *ref, int n, int m) {
    double sum = 0, head = 0;
    for (int i = 0; i < n; i++) {
        double e = exp((double)ref[i].logit - ref[0].logit);
        sum += e;
        if (i < m) head += e;
    }
    return head / sum;
}

// How many top_p keeps, by the definition: the first prefix reaching top_p.
static int ref_top_p_count(const sample_cand *ref, int n, double top_p) {
    double total = 0, cum = 0;
    for (int i = 0; i < n; i++) total += exp((double)ref[i].logit - ref[0].logit);
    for (int m = 1; m <= n; m++) {
        cum += exp((double)ref[m - 1].logit - ref[0].logit);
        if (cum / total >= top_p) return m;
    }
    return n;
}

// A top_p cut of m is right when it reaches top_p and m - 1 does not, up to
// 1e-6 of mass: the float p of the code and the double p here may disagree
// on a cut that falls exactly on a boundary (1000 equal logits, top_p 0.1).
static int top_p_cut_ok(const sample_cand *ref, int n, int m, double top_p) {
    if (m < 1 || m > n) return 0;
    int reaches = ref_mass(ref, n, m) >= top_p - 1e-6 || m == n;
    int minimal = m == 1 || ref_mass(ref, n, m - 1) < top_p + 1e-6;
    return reaches && minimal;
}

// c[0..n) must hold exactly the ids of ref[0..k). mark: [vocab] zeros, left zero.
static int same_set(const sample_cand *c, int n, const sample_cand *ref, int k, unsigned char *mark) {
    if (n != k) return 0;
    int ok = 1;
    for (int i = 0; i < k; i++) mark[ref[i].id] = 1;
    for (int i = 0; i < n; i++) ok &= mark[c[i].id];
    for (int i = 0; i < k; i++) mark[ref[i].id] = 0;
    return ok;
}

// mode 0: spread out; 1: many equal logits, so the id tie-break decides the
// cut; 2: half masked to -inf; 3: all equal (one histogram bucket).
static void random_logits(float *l, int n, uint64_t *x, int mode) {
    for (int i = 0; i < n; i++) {
        float u = (float)lcg(x) / 4294967296.0f;
        if (mode == 0) l[i] = (u - 0.5f) * 20.0f;
        if (mode == 1) l[i] = floorf(u * 16.0f) * 0.5f;
        if (mode == 2) l[i] = u < 0.5f && i > 0 ? -INFINITY : u * 8.0f;
        if (mode == 3) l[i] = 1.25f;
    }
}

static void test_random_vs_reference(void) {
    const int sizes[] = {1, 2, 7, 1000, 2047, 2048, 5000, 150001};  // both sides of the bucket threshold
    uint64_t x = 42;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        int n = sizes[si];
        float *l = malloc((size_t)n * sizeof *l);
        sample_cand *c = malloc((size_t)n * sizeof *c), *ref = malloc((size_t)n * sizeof *ref);
        unsigned char *mark = calloc((size_t)n, 1);
        for (int q = 0; q < 4; q++) {
            random_logits(l, n, &x, q);
            fill(ref, l, n);
            qsort(ref, (size_t)n, sizeof *ref, ref_cmp);
            const int ks[] = {1, 5, 40, n - 1};
            for (int ki = 0; ki < 4; ki++) {
                int k = ks[ki] < 1 ? 1 : ks[ki];
                fill(c, l, n);
                int m = sample_top_k(c, n, k);
                CHECK(same_set(c, m, ref, k < n ? k : n, mark), "top_k n=%d k=%d mode=%d", n, k, q);
            }
            const float ps[] = {0.1f, 0.5f, 0.9f, 0.99f};
            for (int pi = 0; pi < 4; pi++) {
                fill(c, l, n);
                int m = sample_top_p(c, n, ps[pi]);
                CHECK(top_p_cut_ok(ref, n, m, ps[pi]) && same_set(c, m, ref, m, mark),
                      "top_p n=%d p=%g mode=%d: kept %d, definition %d", n, ps[pi], q, m, ref_top_p_count(ref, n, ps[pi]));
            }
        }
        free(l), free(c), free(ref), free(mark);
    }
}

// ---- distributions: chi-square on 200k seeded draws -----------------------------------

#define N_DRAWS 200000

// Pearson's statistic; a token drawn where expected is 0 makes it infinite.
static double chi_square(const long *obs, const double *p, int n, long draws) {
    double chi = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] == 0) {
            if (obs[i]) return INFINITY;
            continue;
        }
        double e = p[i] * (double)draws, d = (double)obs[i] - e;
        chi += d * d / e;
    }
    return chi;
}

static void draw_counts(sampler *s, const float *l, int n, long *obs) {
    float *tmp = malloc((size_t)n * sizeof *tmp);
    memset(obs, 0, (size_t)n * sizeof *obs);
    for (long d = 0; d < N_DRAWS; d++) {
        memcpy(tmp, l, (size_t)n * sizeof *tmp);  // the sampler may modify logits
        int32_t t = sampler_sample(s, tmp);
        if (t >= 0 && t < n) obs[t]++;
        else CHECK(0, "token %d out of range", t);
    }
    free(tmp);
}

// Critical values of chi-square at alpha = 0.001, by degrees of freedom 1..3.
static const double CHI_CRIT[4] = {0, 10.828, 13.816, 16.266};

static void test_temperature_distribution(void) {
    // logits = T log p, so softmax(logits / T) = p exactly: {0.4, 0.3, 0.2, 0.1}.
    const double T = 0.5, p[4] = {0.4, 0.3, 0.2, 0.1};
    float l[4];
    for (int i = 0; i < 4; i++) l[i] = (float)(T * log(p[i]));
    sampler *s = make((float)T, 0, 1.0f, 0.0f, 1234, 4);
    long obs[4];
    draw_counts(s, l, 4, obs);
    double chi = chi_square(obs, p, 4, N_DRAWS);
    CHECK(chi < CHI_CRIT[3], "softmax(l/T): chi2=%g (counts %ld %ld %ld %ld)", chi, obs[0], obs[1], obs[2], obs[3]);
    // The same check has the power to reject wrong answers from these counts:
    // a 1% shift, the distribution at temperature 1 (p^T normalised), uniform.
    const double shifted[4] = {0.41, 0.29, 0.2, 0.1}, uniform[4] = {0.25, 0.25, 0.25, 0.25};
    double at_t1[4], z = 0;
    for (int i = 0; i < 4; i++) z += at_t1[i] = sqrt(p[i]);
    for (int i = 0; i < 4; i++) at_t1[i] /= z;
    CHECK(chi_square(obs, shifted, 4, N_DRAWS) > CHI_CRIT[3], "1%% shift not rejected");
    CHECK(chi_square(obs, at_t1, 4, N_DRAWS) > CHI_CRIT[3], "temperature 1 not rejected");
    CHECK(chi_square(obs, uniform, 4, N_DRAWS) > CHI_CRIT[3], "uniform not rejected");
    sampler_free(s);
}

static void test_filtered_distributions(void) {
    float l[4];
    for (int i = 0; i < 4; i++) l[i] = logf(P4[i]);
    long obs[4];
    // top_p 0.7 at temperature 1 keeps {0,1}; then temperature 2 gives
    // softmax(log p / 2) = sqrt(p) normalised: sqrt(.5), sqrt(.25) = .7071, .5.
    // (Temperature first would flatten p and keep {0,1,2}.)
    const double w = sqrt(0.5) + 0.5, want_p[4] = {sqrt(0.5) / w, 0.5 / w, 0, 0};
    sampler *s = make(2.0f, 0, 0.7f, 0.0f, 7, 4);
    draw_counts(s, l, 4, obs);
    double chi = chi_square(obs, want_p, 4, N_DRAWS);
    CHECK(chi < CHI_CRIT[1], "top_p then temp: chi2=%g (%ld %ld %ld %ld)", chi, obs[0], obs[1], obs[2], obs[3]);
    sampler_free(s);
    // top_k 3 at temperature 1: {.5, .25, .15} / .9.
    const double want_k[4] = {0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0};
    s = make(1.0f, 3, 1.0f, 0.0f, 8, 4);
    draw_counts(s, l, 4, obs);
    chi = chi_square(obs, want_k, 4, N_DRAWS);
    CHECK(chi < CHI_CRIT[2], "top_k 3: chi2=%g (%ld %ld %ld %ld)", chi, obs[0], obs[1], obs[2], obs[3]);
    sampler_free(s);
    // min_p 0.31 keeps p >= 0.155: {.5, .25} / .75.
    const double want_m[4] = {0.5 / 0.75, 0.25 / 0.75, 0, 0};
    s = make(1.0f, 0, 1.0f, 0.31f, 9, 4);
    draw_counts(s, l, 4, obs);
    chi = chi_square(obs, want_m, 4, N_DRAWS);
    CHECK(chi < CHI_CRIT[1], "min_p 0.31: chi2=%g (%ld %ld %ld %ld)", chi, obs[0], obs[1], obs[2], obs[3]);
    sampler_free(s);
}

// ---- determinism and "never a filtered token" ------------------------------------------

static void sequence(uint64_t seed, int32_t *out, int n) {
    float l[4];
    for (int i = 0; i < 4; i++) l[i] = logf(P4[i]);
    sampler *s = make(1.0f, 0, 1.0f, 0.0f, seed, 4);
    for (int i = 0; i < n; i++) {
        float tmp[4];
        memcpy(tmp, l, sizeof tmp);
        out[i] = sampler_sample(s, tmp);
    }
    sampler_free(s);
}

static void test_seeds(void) {
    int32_t a[1000], b[1000], c[1000], z[1000];
    sequence(99, a, 1000);
    sequence(99, b, 1000);
    sequence(100, c, 1000);
    sequence(0, z, 1000);
    CHECK(memcmp(a, b, sizeof a) == 0, "same seed, different sequence");
    CHECK(memcmp(a, c, sizeof a) != 0, "seeds 99 and 100 gave the same sequence");
    CHECK(memcmp(a, z, sizeof a) != 0, "seeds 99 and 0 gave the same sequence");
}

// Whole chain on random logits: every drawn token must survive the reference
// top_k → top_p → min_p computed by full sort.
static void test_never_filtered(void) {
    enum { N = 1000, K = 50, DRAWS = 20000 };
    const float top_p = 0.6f, min_p = 0.05f;
    uint64_t x = 7;
    float l[N], tmp[N];
    random_logits(l, N, &x, 0);
    for (int i = 0; i < N; i++) l[i] *= 0.3f;  // flatter, so all three filters bite
    sample_cand ref[N];
    fill(ref, l, N);
    qsort(ref, N, sizeof *ref, ref_cmp);
    int keep = ref_top_p_count(ref, K, top_p);  // top_p over the top-K set
    while (keep > 1 && exp((double)ref[keep - 1].logit - ref[0].logit) < min_p) keep--;
    CHECK(keep > 2 && keep < K, "test setup: want all filters active, keep=%d", keep);
    unsigned char allowed[N] = {0};
    for (int i = 0; i < keep; i++) allowed[ref[i].id] = 1;
    sampler *s = make(1.5f, K, top_p, min_p, 3, N);
    int bad = 0, distinct = 0;
    unsigned char hit[N] = {0};
    for (int d = 0; d < DRAWS; d++) {
        memcpy(tmp, l, sizeof tmp);
        int32_t t = sampler_sample(s, tmp);
        if (t < 0 || t >= N || !allowed[t]) bad++;
        else if (!hit[t]) hit[t] = 1, distinct++;
    }
    CHECK(bad == 0, "%d draws returned filtered tokens", bad);
    CHECK(distinct == keep, "every kept token should appear in %d draws: %d of %d", DRAWS, distinct, keep);
    sampler_free(s);
}

int main(void) {
    test_greedy();
    test_penalty_stage();
    test_penalty_greedy();
    test_top_k();
    test_top_p();
    test_min_p();
    test_draw();
    test_random_vs_reference();
    test_temperature_distribution();
    test_filtered_distributions();
    test_seeds();
    test_never_filtered();
    if (n_fail) {
        fprintf(stderr, "test_sample: %d checks failed\n", n_fail);
        return 1;
    }
    fprintf(stderr, "test_sample: all passed\n");
    return 0;
}
