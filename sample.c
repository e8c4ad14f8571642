// sample.c — see sample.h. The chain, in llama.cpp's order:
//   penalties → top-k → top-p → min-p → temperature → softmax → draw.
// top-p and min-p look at the distribution at temperature 1 (before the
// temperature stage), as llama.cpp's default chain does.
//
// Nothing here sorts: top-k and top-p are a bucket histogram plus a quickselect
// (expected O(n)), so a 150k vocabulary costs a few linear passes per token.
#include "sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// ---- Candidate ordering and partition ---------------------------------------

// A strict total order (higher logit first, ties to the lower id), so every
// selection below keeps the same set however the input happens to be arranged.
static int cand_better(const sample_cand *a, const sample_cand *b) {
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static void cand_swap(sample_cand *a, sample_cand *b) {
    sample_cand t = *a;
    *a = *b;
    *b = t;
}

// Partitions c[lo..hi) (hi - lo >= 1) around a median-of-three pivot and
// returns its final index m: c[lo..m) are better than c[m], c[m+1..hi) worse.
static int cand_partition(sample_cand *c, int lo, int hi) {
    int mid = lo + (hi - lo) / 2, last = hi - 1;
    // Median of three guards against logits that arrive already ordered by id.
    if (cand_better(&c[mid], &c[lo])) cand_swap(&c[mid], &c[lo]);
    if (cand_better(&c[last], &c[lo])) cand_swap(&c[last], &c[lo]);
    if (cand_better(&c[last], &c[mid])) cand_swap(&c[last], &c[mid]);
    cand_swap(&c[mid], &c[last]);
    int store = lo;
    for (int i = lo; i < last; i++)
        if (cand_better(&c[i], &c[last])) cand_swap(&c[i], &c[store++]);
    cand_swap(&c[store], &c[last]);
    return store;
}

// ---- Repetition penalty -------------------------------------------------------

int sample_penalties_init(sample_penalties *pen, float penalty, int last_n, int n_vocab) {
    memset(pen, 0, sizeof *pen);
    pen->penalty = penalty;
    pen->n_vocab = n_vocab;
    pen->cap = last_n > 0 ? last_n : 0;
    if (pen->cap == 0) return 0;
    pen->ring = malloc((size_t)pen->cap * sizeof *pen->ring);
    pen->seen = calloc((size_t)n_vocab, 1);
    return pen->ring && pen->seen ? 0 : -1;
}

void sample_penalties_free(sample_penalties *pen) {
    free(pen->ring);
    free(pen->seen);
    memset(pen, 0, sizeof *pen);
}

void sample_penalties_accept(sample_penalties *pen, int32_t id) {
    // An id the vocabulary does not have could never be penalised anyway;
    // dropping it keeps apply free of bounds checks.
    if (pen->cap == 0 || id < 0 || id >= pen->n_vocab) return;
    pen->ring[pen->head] = id;
    pen->head = (pen->head + 1) % pen->cap;
    if (pen->len < pen->cap) pen->len++;
}

void sample_penalties_apply(sample_penalties *pen, sample_cand *c, int n) {
    if (pen->len == 0 || pen->penalty == 1.0f || n != pen->n_vocab) return;
    // `seen` makes a token that repeats within the window count once.
    for (int i = 0; i < pen->len; i++) {
        int32_t id = pen->ring[i];
        if (pen->seen[id]) continue;
        pen->seen[id] = 1;
        float *l = &c[id].logit;
        *l = *l > 0 ? *l / pen->penalty : *l * pen->penalty;
    }
    for (int i = 0; i < pen->len; i++) pen->seen[pen->ring[i]] = 0;
}

// ---- Selecting the best prefix by count (top-k) or by mass (top-p) -------------
// Both ask: which best-first prefix first reaches a weight `need`, where each
// token weighs 1 (top-k) or its p (top-p)? A quickselect answers in expected
// O(n) but mispredicts a branch per element; over 150k logits a histogram of
// logit buckets first finds the one bucket where the cut falls (as llama.cpp's
// top-p does), so the quickselect only runs inside that bucket.

enum {
    SAMPLE_BUCKETS = 256,       // over [min, max] logit
    SAMPLE_BUCKET_MIN_N = 2048  // below this the quickselect alone is cheaper
};

static double weight_sum(const sample_cand *c, int lo, int hi, int by_mass) {
    if (!by_mass) return hi - lo;
    double s = 0;
    for (int i = lo; i < hi; i++) s += c[i].p;
    return s;
}

// Weighted quickselect over c[lo..hi): returns the end of the shortest
// best-first prefix that reaches `need` (all earlier c are kept already).
static int select_weight(sample_cand *c, int lo, int hi, double need, int by_mass) {
    while (lo < hi) {
        int m = cand_partition(c, lo, hi);
        double above = weight_sum(c, lo, m, by_mass);  // strictly better than the pivot
        double pivot = by_mass ? c[m].p : 1.0;
        if (above >= need) {
            hi = m;
        } else if (above + pivot >= need) {
            return m + 1;  // the pivot is the token that crosses
        } else {
            need -= above + pivot;
            lo = m + 1;
        }
    }
    return lo;  // only when rounding left `need` unmet: keep what was reached
}

typedef struct {
    float max;    // highest logit: bucket 0 starts there
    float scale;  // buckets per logit unit
} sample_buckets;

// Non-decreasing as the logit falls (float ops are monotone), so every token
// of a lower bucket is strictly better than every token of a higher one.
static int bucket_of(const sample_buckets *bk, float logit) {
    float t = (bk->max - logit) * bk->scale;
    return t < SAMPLE_BUCKETS - 1 ? (int)t : SAMPLE_BUCKETS - 1;  // NaN too
}

// Moves the candidates of c[lo..n) in bucket b (exact) or above it to c[lo..).
static int gather(sample_cand *c, int lo, int n, const sample_buckets *bk, int b, int exact) {
    for (int i = lo; i < n; i++) {
        int bi = bucket_of(bk, c[i].logit);
        if (exact ? bi == b : bi < b) cand_swap(&c[i], &c[lo++]);
    }
    return lo;
}

// Leaves the buckets above the crossing one in c[0..*lo), the crossing bucket
// in c[*lo..*hi); returns the weight still needed from the crossing bucket.
static double bucket_prefilter(sample_cand *c, int n, double need, int by_mass, int *lo, int *hi) {
    float max = c[0].logit, min = max;
    for (int i = 1; i < n; i++) {
        if (c[i].logit > max) max = c[i].logit;
        if (c[i].logit < min) min = c[i].logit;
    }
    sample_buckets bk = {max, SAMPLE_BUCKETS / (max - min)};
    if (!isfinite(bk.scale)) bk.scale = 0;  // equal or infinite logits: one bucket
    double w[SAMPLE_BUCKETS] = {0};
    for (int i = 0; i < n; i++) w[bucket_of(&bk, c[i].logit)] += by_mass ? c[i].p : 1.0;
    int b = 0;
    double cum = 0;
    while (b < SAMPLE_BUCKETS - 1 && cum + w[b] < need) cum += w[b++];
    *lo = gather(c, 0, n, &bk, b, 0);
    *hi = gather(c, *lo, n, &bk, b, 1);
    return need - cum;
}

static int select_best(sample_cand *c, int n, double need, int by_mass) {
    int lo = 0, hi = n;
    if (n >= SAMPLE_BUCKET_MIN_N) need = bucket_prefilter(c, n, need, by_mass, &lo, &hi);
    int kept = select_weight(c, lo, hi, need, by_mass);
    return kept > 0 ? kept : 1;
}

// ---- Filters -------------------------------------------------------------------

int sample_top_k(sample_cand *c, int n, int k) {
    if (k <= 0 || k >= n) return n;
    return select_best(c, n, k, 0);
}

void sample_softmax(sample_cand *c, int n) {
    float max = c[0].logit;
    for (int i = 1; i < n; i++)
        if (c[i].logit > max) max = c[i].logit;
    for (int i = 0; i < n; i++) c[i].p = expf(c[i].logit - max);
    // double: 150k terms summed in float lose the small ones
    double sum = weight_sum(c, 0, n, 1);
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) c[i].p *= inv;
}

// The smallest best-first set whose mass reaches top_p; never sorted.
int sample_top_p(sample_cand *c, int n, float top_p) {
    if (!(top_p < 1.0f) || n <= 1) return n;
    if (top_p <= 0.0f) return sample_top_k(c, n, 1);  // "at least one"
    sample_softmax(c, n);
    return select_best(c, n, top_p, 1);
}

int sample_min_p(sample_cand *c, int n, float min_p) {
    if (!(min_p > 0.0f) || n <= 1) return n;
    float max = c[0].logit;
    for (int i = 1; i < n; i++)
        if (c[i].logit > max) max = c[i].logit;
    // p_i / p_max = exp(l_i - l_max), so the test needs no softmax; double
    // keeps the comparison from flipping on float rounding near the cut.
    double cut = log((double)min_p);
    int kept = 0;
    for (int i = 0; i < n; i++)
        if ((double)c[i].logit - (double)max >= cut) c[kept++] = c[i];
    return kept;
}

void sample_temp(sample_cand *c, int n, float temp) {
    for (int i = 0; i < n; i++) c[i].logit /= temp;
}

int32_t sample_argmax(const sample_cand *c, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (cand_better(&c[i], &c[best])) best = i;
    return c[best].id;
}

int32_t sample_draw(const sample_cand *c, int n, double u) {
    double total = weight_sum(c, 0, n, 1), target = u * total, cum = 0;
    int last_nonzero = 0;
    for (int i = 0; i < n; i++) {
        if (c[i].p <= 0) continue;
        cum += c[i].p;
        last_nonzero = i;
        if (cum > target) return c[i].id;
    }
    // u * total can round up to total; the answer is then the last live token.
    return c[last_nonzero].id;
}

// ---- RNG: xoshiro256**, seeded through splitmix64 ------------------------------
// Self-contained so a seed gives the same tokens on every libc.

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro_next(uint64_t s[4]) {
    uint64_t result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

// Uniform in [0, 1) from the top 53 bits: every value is an exact double.
static double rng_uniform(uint64_t s[4]) { return (double)(xoshiro_next(s) >> 11) * 0x1.0p-53; }

// ---- The sampler ------------------------------------------------------------------

struct sampler {
    sampler_params params;
    int n_vocab;
    sample_cand *cand;     // [n_vocab] working set, refilled per token
    sample_penalties pen;  // ring of recent tokens
    int32_t *ring_save;    // [pen.cap] pen.ring while sampler_probs adds its extra tokens
    uint64_t rng[4];       // xoshiro256** state
};

sampler *sampler_new(const sampler_params *p, int n_vocab) {
    if (!p || n_vocab <= 0) return NULL;
    sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->params = *p;
    s->n_vocab = n_vocab;
    s->cand = malloc((size_t)n_vocab * sizeof *s->cand);
    int pen_ok = sample_penalties_init(&s->pen, p->repeat_penalty, p->repeat_last_n, n_vocab);
    if (pen_ok == 0 && s->pen.cap > 0) s->ring_save = malloc((size_t)s->pen.cap * sizeof *s->ring_save);
    if (!s->cand || pen_ok != 0 || (s->pen.cap > 0 && !s->ring_save)) {
        sampler_free(s);
        return NULL;
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    return s;
}

void sampler_free(sampler *s) {
    if (!s) return;
    free(s->cand);
    free(s->ring_save);
    sample_penalties_free(&s->pen);
    free(s);
}

void sampler_accept(sampler *s, int32_t id) { sample_penalties_accept(&s->pen, id); }

static int is_greedy(const sampler_params *p) { return !(p->temp > 0.0f); }

// The chain up to the draw: leaves the candidates that may be drawn in
// s->cand[0..n) and returns n. Greedy leaves the argmax alone, with p = 1;
// otherwise p is the softmax at the temperature over the survivors.
static int sampler_chain(sampler *s, const float *logits) {
    const sampler_params *p = &s->params;
    sample_cand *c = s->cand;
    int n = s->n_vocab;
    for (int i = 0; i < n; i++) c[i] = (sample_cand){i, logits[i], 0.0f};
    sample_penalties_apply(&s->pen, c, n);
    // Greedy skips the filters: none of them can remove the argmax.
    if (is_greedy(p)) {
        c[0] = c[sample_argmax(c, n)];  // c is in id order, so the id is the index
        c[0].p = 1.0f;
        return 1;
    }
    n = sample_top_k(c, n, p->top_k);
    n = sample_top_p(c, n, p->top_p);
    n = sample_min_p(c, n, p->min_p);
    sample_temp(c, n, p->temp);
    sample_softmax(c, n);
    return n;
}

int32_t sampler_sample(sampler *s, float *logits) {
    int n = sampler_chain(s, logits);
    if (is_greedy(&s->params)) return s->cand[0].id;
    return sample_draw(s->cand, n, rng_uniform(s->rng));
}

void sampler_probs(sampler *s, const float *logits, const int32_t *extra, int n_extra, float *probs) {
    sample_penalties *pen = &s->pen;
    const int len = pen->len, head = pen->head;
    if (pen->cap > 0 && n_extra > 0) memcpy(s->ring_save, pen->ring, (size_t)pen->cap * sizeof *pen->ring);
    for (int i = 0; i < n_extra; i++) sample_penalties_accept(pen, extra[i]);
    int n = sampler_chain(s, logits);
    if (pen->cap > 0 && n_extra > 0) memcpy(pen->ring, s->ring_save, (size_t)pen->cap * sizeof *pen->ring);
    pen->len = len;
    pen->head = head;
    memset(probs, 0, (size_t)s->n_vocab * sizeof *probs);
    for (int i = 0; i < n; i++) probs[s->cand[i].id] = s->cand[i].p;
}

void sampler_logprobs(sampler *s, const float *logits, int32_t chosen, int top_n, float *chosen_lp, int32_t *top_ids,
                      float *top_lps) {
    sample_cand *c = s->cand;
    const int n = s->n_vocab;
    for (int i = 0; i < n; i++) c[i] = (sample_cand){i, logits[i], 0.0f};
    sample_penalties_apply(&s->pen, c, n);
    float max = c[0].logit;
    for (int i = 1; i < n; i++)
        if (c[i].logit > max) max = c[i].logit;
    double sum = 0;  // log-sum-exp in double: 150k terms
    for (int i = 0; i < n; i++) sum += exp((double)c[i].logit - max);
    const double lse = max + log(sum);
    *chosen_lp = chosen >= 0 && chosen < n ? (float)(c[chosen].logit - lse) : -INFINITY;
    if (top_n > SAMPLE_MAX_TOP) top_n = SAMPLE_MAX_TOP;
    int k = 0;  // insertion into the best top_n so far (top_n is small)
    for (int i = 0; i < n && top_n > 0; i++) {
        if (k == top_n && !cand_better(&c[i], &c[top_ids[k - 1]])) continue;
        int j = k < top_n ? k++ : k - 1;
        while (j > 0 && cand_better(&c[i], &c[top_ids[j - 1]])) top_ids[j] = top_ids[j - 1], j--;
        top_ids[j] = i;
    }
    for (int j = 0; j < k; j++) top_lps[j] = (float)(c[top_ids[j]].logit - lse);
}

double sampler_uniform(sampler *s) { return rng_uniform(s->rng); }

int sampler_is_greedy(const sampler *s) { return is_greedy(&s->params); }
