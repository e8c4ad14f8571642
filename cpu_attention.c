// cpu_attention.c — the CPU backend's attention over the paged KV cache.
//
// A work item is one token's slice of query heads (whole kv heads' worth,
// up to ATT_STATE floats of accumulators) against a range of its keys. The
// item reads whole rows (the slice's columns of each K and V row, in row
// order: reading one kv head's slice of every row, as this code once did,
// left decode at 2,048 positions waiting on memory at half the speed of
// decode at 8). Keys go ATT_CHUNK at a time: their K rows give every head's
// scores, each head's running softmax (max M, sum S) takes the whole chunk
// with one vectorized exponential, then the V rows are added into float
// accumulators. A token's keys are cut into ranges of ATT_RANGE whose
// states merge in order: a decode step hands the ranges to the threads and
// merges after (attention_merge), a longer pass merges within each item.
//
// Float order: every value is computed in 16 lanes (v16 below), element i of
// a row in lane i % 16, each lane's sum in element order, and the 16 lanes
// summed in the order of GCC's _mm512_reduce_add_ps (as quant_impl.h's
// reduce16); the exponential is the same fma chain in every lane. The
// AVX-512, AVX2 (two halves of 8) and portable builds compute the same bits,
// and a token computes the same alone as in any batch (tests/test_attention.c).
#include "cpu_attention.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "quant.h"
#include "quant_impl.h"  // reduce16, reduce16_avx2: the kernels' lane-sum order

#if defined(__AVX512F__) && defined(__F16C__)
#define ATT_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define ATT_AVX2 1
#endif

#define ATT_CHUNK 64       // keys scored before each softmax update
#define ATT_RANGE 128      // keys of one partial state (a multiple of ATT_CHUNK)
#define ATT_STATE 2048     // floats of accumulators one work item keeps: its query heads × head_dim
#define ATT_GROUP 16       // keys whose rows are converted to float together (a 16-lane tile)
#define ATT_MAX_HEADS 64   // query heads of one work item
#define ATT_PAD 16         // floats between a converted row's end and the next (see att_slice)
#define ATT_AHEAD 64       // keys ahead whose rows a group's conversion asks for (see row_values)

// ---- v16: 16 float lanes ----------------------------------------------------

#if defined(ATT_AVX512)
typedef __m512 v16;
static inline __mmask16 tail_mask(int n) { return n >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << n) - 1); }
// (masked only at a tail: a masked store does not forward to a later load)
static inline v16 v_load(const float *p, int n) { return n >= 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(tail_mask(n), p); }
static inline void v_store(float *p, v16 a, int n) {
    if (n >= 16) _mm512_storeu_ps(p, a);
    else _mm512_mask_storeu_ps(p, tail_mask(n), a);
}
static inline v16 v_set1(float x) { return _mm512_set1_ps(x); }
static inline v16 v_add(v16 a, v16 b) { return _mm512_add_ps(a, b); }
static inline v16 v_mul(v16 a, v16 b) { return _mm512_mul_ps(a, b); }
static inline v16 v_fma(v16 a, v16 b, v16 c) { return _mm512_fmadd_ps(a, b, c); }
static inline float v_sum(v16 a) { return _mm512_reduce_add_ps(a); }
static inline v16 v_f16(const uint16_t *p, int n) {
    return _mm512_cvtph_ps(n >= 16 ? _mm256_loadu_si256((const __m256i *)p) : _mm256_maskz_loadu_epi16(tail_mask(n), p));
}
static inline v16 v_i8(const int8_t *p, int n) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(n >= 16 ? _mm_loadu_si128((const __m128i *)p)
                                                            : _mm_maskz_loadu_epi8(tail_mask(n), p)));
}
static inline v16 v_round(v16 a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// 2^n for integral n in [-126, 127]
static inline v16 v_pow2(v16 n) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23));
}
// a where x >= lo, else 0
static inline v16 v_zero_below(v16 a, v16 x, float lo) {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(lo), _CMP_GE_OQ), a);
}
// a > b ? a : b lane by lane (VMAXPS: b where either is NaN); the largest lane
static inline v16 v_max(v16 a, v16 b) { return _mm512_max_ps(a, b); }
static inline float v_max_all(v16 a) { return _mm512_reduce_max_ps(a); }
#elif defined(ATT_AVX2)
typedef struct { __m256 lo, hi; } v16;  // lanes 0-7, 8-15
static inline __m256i mask8(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline v16 v_load(const float *p, int n) {
    if (n >= 16) return (v16){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
    return (v16){_mm256_maskload_ps(p, mask8(n)), _mm256_maskload_ps(p + 8, mask8(n - 8))};
}
static inline void v_store(float *p, v16 a, int n) {
    if (n >= 16) {
        _mm256_storeu_ps(p, a.lo), _mm256_storeu_ps(p + 8, a.hi);
    } else {
        _mm256_maskstore_ps(p, mask8(n), a.lo), _mm256_maskstore_ps(p + 8, mask8(n - 8), a.hi);
    }
}
static inline v16 v_set1(float x) { return (v16){_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
static inline v16 v_add(v16 a, v16 b) { return (v16){_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
static inline v16 v_mul(v16 a, v16 b) { return (v16){_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
static inline v16 v_fma(v16 a, v16 b, v16 c) {
    return (v16){_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
static inline float v_sum(v16 a) { return reduce16_avx2(a.lo, a.hi); }
static inline v16 v_f16(const uint16_t *p, int n) {
    uint16_t b[16] = {0};
    if (n < 16) memcpy(b, p, sizeof(uint16_t) * (size_t)n), p = b;
    return (v16){_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 8)))};
}
static inline v16 v_i8(const int8_t *p, int n) {
    int8_t b[16] = {0};
    if (n < 16) memcpy(b, p, (size_t)n), p = b;
    return (v16){_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p))),
                 _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8))))};
}
static inline v16 v_round(v16 a) {
    const int m = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return (v16){_mm256_round_ps(a.lo, m), _mm256_round_ps(a.hi, m)};
}
static inline __m256 pow2_8(__m256 n) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
}
static inline v16 v_pow2(v16 n) { return (v16){pow2_8(n.lo), pow2_8(n.hi)}; }
static inline v16 v_zero_below(v16 a, v16 x, float lo) {
    const __m256 l = _mm256_set1_ps(lo);
    return (v16){_mm256_and_ps(a.lo, _mm256_cmp_ps(x.lo, l, _CMP_GE_OQ)),
                 _mm256_and_ps(a.hi, _mm256_cmp_ps(x.hi, l, _CMP_GE_OQ))};
}
static inline v16 v_max(v16 a, v16 b) { return (v16){_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
static inline float v_max_all(v16 a) {
    __m256 m = _mm256_max_ps(a.lo, a.hi);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}
#else
typedef struct { float l[16]; } v16;
static inline v16 v_load(const float *p, int n) {
    v16 r = {{0}};
    for (int i = 0; i < 16 && i < n; i++) r.l[i] = p[i];
    return r;
}
static inline void v_store(float *p, v16 a, int n) {
    for (int i = 0; i < 16 && i < n; i++) p[i] = a.l[i];
}
static inline v16 v_set1(float x) {
    v16 r;
    for (int i = 0; i < 16; i++) r.l[i] = x;
    return r;
}
static inline v16 v_add(v16 a, v16 b) {
    for (int i = 0; i < 16; i++) a.l[i] += b.l[i];
    return a;
}
static inline v16 v_mul(v16 a, v16 b) {
    for (int i = 0; i < 16; i++) a.l[i] *= b.l[i];
    return a;
}
static inline v16 v_fma(v16 a, v16 b, v16 c) {
    for (int i = 0; i < 16; i++) c.l[i] = fmaf(a.l[i], b.l[i], c.l[i]);
    return c;
}
static inline float v_sum(v16 a) { return reduce16(a.l); }
static inline v16 v_f16(const uint16_t *p, int n) {
    v16 r = {{0}};
    for (int i = 0; i < 16 && i < n; i++) r.l[i] = fp16_to_f32(p[i]);
    return r;
}
static inline v16 v_i8(const int8_t *p, int n) {
    v16 r = {{0}};
    for (int i = 0; i < 16 && i < n; i++) r.l[i] = (float)p[i];
    return r;
}
static inline v16 v_round(v16 a) {
    for (int i = 0; i < 16; i++) a.l[i] = nearbyintf(a.l[i]);
    return a;
}
static inline v16 v_pow2(v16 n) {
    for (int i = 0; i < 16; i++) {
        const uint32_t u = (uint32_t)((int32_t)n.l[i] + 127) << 23;
        memcpy(&n.l[i], &u, 4);
    }
    return n;
}
static inline v16 v_zero_below(v16 a, v16 x, float lo) {
    for (int i = 0; i < 16; i++) a.l[i] = x.l[i] >= lo ? a.l[i] : 0.0f;
    return a;
}
static inline v16 v_max(v16 a, v16 b) {
    for (int i = 0; i < 16; i++) a.l[i] = a.l[i] > b.l[i] ? a.l[i] : b.l[i];
    return a;
}
static inline float v_max_all(v16 a) {
    float m = a.l[0];
    for (int i = 1; i < 16; i++) m = a.l[i] > m ? a.l[i] : m;
    return m;
}
#endif

// e^x lane by lane, for x <= 0: 2^n · e^f with n = round(x·log2 e) and
// f = x - n·ln 2 (in two parts), e^f by Cephes' expf polynomial (relative
// error ~1e-7). Below -64 the result is 0: such a weight is under 2^-92 of
// the row's largest (nothing a float sum of it can hold), and the products
// of the weights kept with fp16 or q8 values stay normal floats (a
// subnormal operand costs x86 a microcode assist: decode of a long q8
// context once ran 8x slower on them).
static inline v16 v_exp_neg(v16 x) {
    const v16 n = v_round(v_mul(x, v_set1(1.44269504088896341f)));
    v16 f = v_fma(n, v_set1(-0.693359375f), x);
    f = v_fma(n, v_set1(2.12194440e-4f), f);
    v16 p = v_set1(1.9875691500e-4f);
    p = v_fma(p, f, v_set1(1.3981999507e-3f));
    p = v_fma(p, f, v_set1(8.3334519073e-3f));
    p = v_fma(p, f, v_set1(4.1665795894e-2f));
    p = v_fma(p, f, v_set1(1.6666665459e-1f));
    p = v_fma(p, f, v_set1(5.0000001201e-1f));
    const v16 y = v_add(v_fma(p, v_mul(f, f), f), v_set1(1.0f));
    return v_zero_below(v_mul(y, v_pow2(v_zero_below(n, x, -64.0f))), x, -64.0f);
}

// e^x of one float, as v_exp_neg computes it (x <= 0).
static float exp_neg(float x) {
    float r[16];
    v_store(r, v_exp_neg(v_set1(x)), 16);
    return r[0];
}

#if !defined(ATT_AVX512)
// Σ a[i]·b[i] over i < n, in 16 lanes.
static float dot(const float *a, const float *b, int n) {
    v16 acc = v_set1(0.0f);
    for (int i = 0; i < n; i += 16) acc = v_fma(v_load(a + i, n - i), v_load(b + i, n - i), acc);
    return v_sum(acc);
}
#endif

// ---- one work item: a token's slice of query heads over a range of keys ----

// The item's shapes: query heads [h0, h0 + nh), which read kv heads
// [kv0, kv0 + nkv) (hq query heads each), columns [kv0·hd, (kv0 + nkv)·hd)
// of every pool row. Its rows converted to float lie bw floats apart,
// ATT_PAD more than their nkv·hd (rows 1 KiB apart, as the 1B's fp16 pool
// rows are, converted ~8% slower: loads waiting on stores at the same
// offset in 4 KiB, it seems), head h's columns at col[h] in each.
typedef struct {
    const attention_job *j;
    int h0, nh, kv0, nkv, hq, hd, bw;
    size_t row_bytes;
    int col[ATT_MAX_HEADS];
} att_slice;

// The softmax state of a slice's heads over some keys: running max M, sum
// S of e^(s - M), and Σ e^(s - M)·v (acc: [nh, hd]).
typedef struct {
    float M[ATT_MAX_HEADS], S[ATT_MAX_HEADS];
    float acc[ATT_STATE];
} att_state;

static void state_empty(att_state *st, int nh, int hd) {
    for (int h = 0; h < nh; h++) st->M[h] = -INFINITY, st->S[h] = 0.0f;
    memset(st->acc, 0, sizeof(float) * (size_t)nh * (size_t)hd);
}

// out[0 .. nkv·hd) = the slice's values of pool row r of `pool` (fp16, or
// q8's d·q, exact in float). Meanwhile it asks for the same columns of row
// `ahead` (NULL: none) into L2, a cache line per line read: left to the
// hardware prefetcher, decode's attention read its rows at ~5 GB/s a
// thread (1B, 1,024 positions, Emerald Rapids VM), and asking for a
// group's rows in one burst gained nothing.
static void row_values(const att_slice *sl, const uint8_t *pool, size_t r, float *out, const uint8_t *ahead) {
    const uint8_t *row = pool + r * sl->row_bytes;
    const int n = sl->nkv * sl->hd, col = sl->kv0 * sl->hd;
    if (sl->j->kv_type == KV_Q8) {
        const int8_t *q = (const int8_t *)row + col;
        const uint16_t *d = (const uint16_t *)(row + sl->j->n_kv_heads * sl->hd) + col / 32;
        if (ahead)
            for (int o = 0; o < n / 16; o += 64) __builtin_prefetch(ahead + ((const uint8_t *)d - row) + o, 0, 2);
        for (int i = 0; i < n; i += 16) {
            if (ahead && i % 64 == 0) __builtin_prefetch(ahead + col + i, 0, 2);
            v_store(out + i, v_mul(v_i8(q + i, n - i), v_set1(fp16_to_f32(d[i / 32]))), n - i);
        }
    } else {
        const uint16_t *h = (const uint16_t *)row + col;
        for (int i = 0; i < n; i += 16) {
            if (ahead && i % 32 == 0) __builtin_prefetch(ahead + 2 * (size_t)(col + i), 0, 2);
            v_store(out + i, v_f16(h + i, n - i), n - i);
        }
    }
}

#if defined(ATT_AVX512)
// out[p] = the sum of P[p]'s 16 lanes, each in reduce16's order (lanes
// 0-7 + 8-15, then 0-3 + 4-7, then (0 + 2) + (1 + 3)), the 16 reductions
// done together in a tree of shuffles: after the last level lane 4k + e
// holds the sum of P[k + 4e].
static inline void reduce16x16(const __m512 P[16], float out[16]) {
    __m512 T[8], U[4], V[2];
    for (int i = 0; i < 8; i++)
        T[i] = _mm512_add_ps(_mm512_shuffle_f32x4(P[2 * i], P[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_f32x4(P[2 * i], P[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int i = 0; i < 4; i++)
        U[i] = _mm512_add_ps(_mm512_shuffle_f32x4(T[2 * i], T[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm512_shuffle_f32x4(T[2 * i], T[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int i = 0; i < 2; i++)
        V[i] = _mm512_add_ps(_mm512_shuffle_ps(U[2 * i], U[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(U[2 * i], U[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 R = _mm512_add_ps(_mm512_shuffle_ps(V[0], V[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(V[0], V[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, R));
}
#endif

// out[j] = Σ q[i]·k[j][i] over i < n for the 16 rows k[j] (kstride floats
// apart), each as a 16-lane dot product: lane l sums i = l mod 16 in order,
// then the lanes in reduce16's order.
static void dots16(const float *q, const float *k, size_t kstride, int n, float out[16]) {
#if defined(ATT_AVX512)
    __m512 P[16];  // the 16 keys' lanes: 16 independent fma chains
#pragma GCC unroll 16
    for (int j = 0; j < 16; j++) P[j] = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __m512 qi = v_load(q + i, n - i);
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) P[j] = v_fma(qi, v_load(k + j * kstride + i, n - i), P[j]);
    }
    reduce16x16(P, out);
#else
    for (int j = 0; j < 16; j++) out[j] = dot(q, k + j * kstride, n);
#endif
}

// The slice's columns of rows [0, n) of a group (n <= ATT_GROUP), as
// floats, to buf[j · bw ...]; rows past n are zeros. ahead[0 .. na): the
// rows ATT_AHEAD keys later, asked for meanwhile.
static void group_values(const att_slice *sl, const uint8_t *pool, const size_t *rows, int n, float *buf,
                         const size_t *ahead, int na) {
    for (int j = 0; j < ATT_GROUP; j++) {
        if (j < n) row_values(sl, pool, rows[j], buf + (size_t)j * sl->bw, j < na ? pool + ahead[j] * sl->row_bytes : NULL);
        else memset(buf + (size_t)j * sl->bw, 0, sizeof(float) * (size_t)(sl->nkv * sl->hd));
    }
}

// acc[0 .. hd) = acc·r + Σ p[j]·v[j] over the group's rows j < n (v: rows
// vstride floats apart), each element's fmas in key order; 64 columns at a
// time, held in registers.
static void add_values(float *acc, float r, const float *p, const float *v, size_t vstride, int n, int hd) {
    for (int c = 0; c < hd; c += 64) {
        const int m = hd - c < 64 ? hd - c : 64;
        v16 A[4] = {v_set1(0.0f), v_set1(0.0f), v_set1(0.0f), v_set1(0.0f)};
        for (int b = 0; b < 4 && 16 * b < m; b++) {
            A[b] = v_load(acc + c + 16 * b, m - 16 * b);
            if (r != 1.0f) A[b] = v_mul(A[b], v_set1(r));
        }
        for (int j = 0; j < n; j++) {
            const v16 pj = v_set1(p[j]);
            for (int b = 0; b < 4 && 16 * b < m; b++)
                A[b] = v_fma(pj, v_load(v + j * vstride + c + 16 * b, m - 16 * b), A[b]);
        }
        for (int b = 0; b < 4 && 16 * b < m; b++) v_store(acc + c + 16 * b, A[b], m - 16 * b);
    }
}

// The scores s[h][g0 + j] of the slice's heads for the group's keys j < 16
// (rows [0, n) valid, the rest scored 0); buf: room for converted rows;
// ahead, na: as group_values takes them.
static void group_scores(const att_slice *sl, const float *q, const size_t *rows, int n, float s[][ATT_CHUNK],
                         int g0, float *buf, const size_t *ahead, int na) {
    const int nh = sl->nh, hd = sl->hd;
    const float scale = sl->j->ac->scale;
    group_values(sl, sl->j->kpool, rows, n, buf, ahead, na);
    for (int h = 0; h < nh; h++) {
        float d[16];
        dots16(q + (size_t)h * hd, buf + sl->col[h], (size_t)sl->bw, hd, d);
        for (int j = 0; j < 16; j++) s[h][g0 + j] = d[j] * scale;
    }
}

// st->acc of every head += its weights s[h][g0 + j] times the group's V rows
// j < n, each head's accumulators first scaled by r[h] (r NULL: not at all).
static void group_add(const att_slice *sl, const size_t *rows, int n, float s[][ATT_CHUNK], int g0,
                      const float *r, att_state *st, float *buf, const size_t *ahead, int na) {
    const int nh = sl->nh, hd = sl->hd;
    group_values(sl, sl->j->vpool, rows, n, buf, ahead, na);
    for (int h = 0; h < nh; h++)
        add_values(st->acc + (size_t)h * hd, r ? r[h] : 1.0f, s[h] + g0, buf + sl->col[h], (size_t)sl->bw, n, hd);
}

// st = the slice's softmax state over keys [a, b) of the sequence whose
// block table is `table`, from the empty state, ATT_CHUNK keys at a time:
// the chunk's K rows give every head's scores, each head's state takes the
// whole chunk (one exponential over it), then the V rows are added in. Rows
// are read whole (the slice's columns), ATT_GROUP at a time, each group
// asking for the rows ATT_AHEAD keys on (up to len, the sequence's end).
static void range_state(const att_slice *sl, const float *q, const int32_t *table, int a, int b, int len,
                        att_state *st) {
    const int nh = sl->nh;
    float s[ATT_MAX_HEADS][ATT_CHUNK], buf[ATT_GROUP * (ATT_STATE + ATT_PAD)];
    size_t rows_all[ATT_RANGE + ATT_AHEAD];  // the range's rows, and those ahead of its last
    const int end = len - b < ATT_AHEAD ? len : b + ATT_AHEAD;
    for (int j = 0; j < end - a; j++) rows_all[j] = (size_t)table[(a + j) / KV_BLOCK] * KV_BLOCK + (a + j) % KV_BLOCK;
    state_empty(st, nh, sl->hd);
    for (int c0 = a; c0 < b; c0 += ATT_CHUNK) {
        const int cn = b - c0 < ATT_CHUNK ? b - c0 : ATT_CHUNK;
        const size_t *rows = rows_all + (c0 - a), *ahead = rows + ATT_AHEAD;
        int na[ATT_CHUNK / ATT_GROUP];  // rows ahead of each group's
        for (int g = 0; g < cn; g += ATT_GROUP) {
            const int left = end - (c0 + ATT_AHEAD + g);
            na[g / ATT_GROUP] = left < 0 ? 0 : left < ATT_GROUP ? left : ATT_GROUP;
        }
        for (int g = 0; g < cn; g += ATT_GROUP)
            group_scores(sl, q, rows + g, cn - g < ATT_GROUP ? cn - g : ATT_GROUP, s, g, buf, ahead + g, na[g / ATT_GROUP]);
        // s becomes the weights e^(s - M), the last 16 lanes padded with e^-inf = 0
        float r[ATT_MAX_HEADS];  // e^(M_before - M): rescales what came before
        for (int h = 0; h < nh; h++) {
            for (int j = cn; j % 16; j++) s[h][j] = -INFINITY;
            // the running max, lane by lane (a NaN score never taken), then
            // over the lanes: the same value in any order but for the sign
            // of a zero, which no difference s - m or M - m below can show
            v16 mv = v_set1(st->M[h]);
            for (int j = 0; j < cn; j += 16) mv = v_max(v_load(s[h] + j, 16), mv);
            const float m = v_max_all(mv);
            r[h] = exp_neg(st->M[h] - m);
            st->M[h] = m;
            v16 sum = v_set1(0.0f);
            for (int j = 0; j < cn; j += 16) {
                const v16 e = v_exp_neg(v_add(v_load(s[h] + j, 16), v_set1(-m)));
                v_store(s[h] + j, e, 16);
                sum = v_add(sum, e);
            }
            st->S[h] = st->S[h] * r[h] + v_sum(sum);
        }
        for (int g = 0; g < cn; g += ATT_GROUP)
            group_add(sl, rows + g, cn - g < ATT_GROUP ? cn - g : ATT_GROUP, s, g, g ? NULL : r, st, buf, ahead + g,
                      na[g / ATT_GROUP]);
    }
}

// t = the softmax state over t's keys and p's (p's keys after t's).
static void state_merge(att_state *t, const float *M, const float *S, const float *acc, int nh, int hd) {
    for (int h = 0; h < nh; h++) {
        const float m = t->M[h] > M[h] ? t->M[h] : M[h];
        const float ea = exp_neg(t->M[h] - m), eb = exp_neg(M[h] - m);
        t->S[h] = t->S[h] * ea + S[h] * eb;
        t->M[h] = m;
        float *ta = t->acc + (size_t)h * hd;
        const float *pa = acc + (size_t)h * hd;
        for (int i = 0; i < hd; i += 16)
            v_store(ta + i, v_fma(v_load(pa + i, hd - i), v_set1(eb), v_mul(v_load(ta + i, hd - i), v_set1(ea))), hd - i);
    }
}

// out = acc / S per head, a head's sink logit joining S (not acc) as ggml's
// flash attention adds it, after the keys.
static void state_out(const att_slice *sl, att_state *st, float *out) {
    const float *sinks = sl->j->ac->sinks;
    for (int h = 0; h < sl->nh; h++) {
        float ms = 1.0f;
        if (sinks) {
            const float sk = sinks[sl->h0 + h], M = st->M[h];
            float vs = 1.0f;
            if (sk > M) ms = exp_neg(M - sk);
            else vs = exp_neg(sk - M);
            st->S[h] = st->S[h] * ms + vs;
        }
        const float inv = st->S[h] == 0.0f ? 0.0f : 1.0f / st->S[h];
        for (int d = 0; d < sl->hd; d++) out[h * sl->hd + d] = st->acc[(size_t)h * sl->hd + d] * ms * inv;
    }
}

// ---- the work items ---------------------------------------------------------

// Query heads per item: as many as ATT_STATE floats of accumulators hold,
// and for a pass of one token (a decode) at most half the heads, so that two
// threads share it even when its keys are too few to split. Whole kv heads'
// query heads where they fit, so that the kv columns an item reads
// (ATT_STATE / hq floats a row at most) stay within ATT_STATE.
static int slice_heads(const attention_job *j) {
    const int hq = j->n_heads / j->n_kv_heads;
    int n = ATT_STATE / j->head_dim;
    n = n > ATT_MAX_HEADS ? ATT_MAX_HEADS : n < 1 ? 1 : n;
    if (j->fb->n == 1 && 2 * n > j->n_heads && j->n_heads >= 2 * hq) n = j->n_heads / 2;
    if (n >= hq) n -= n % hq;
    return n < j->n_heads ? n : j->n_heads;
}

static int n_slices(const attention_job *j) { return (j->n_heads + slice_heads(j) - 1) / slice_heads(j); }

// Ranges of ATT_RANGE keys a pass's longest token has (split mode's items per slice).
static int max_ranges(const attention_job *j) { return (j->fb->max_len + ATT_RANGE - 1) / ATT_RANGE; }

// Floats of one partial state of a slice (split mode): M, S, acc.
static size_t part_floats(const attention_job *j) { return (size_t)slice_heads(j) * (2 + (size_t)j->head_dim); }

static att_slice slice_of(const attention_job *j, int s) {
    const int per = slice_heads(j), hq = j->n_heads / j->n_kv_heads;
    att_slice sl = {j, s * per, j->n_heads - s * per < per ? j->n_heads - s * per : per, 0, 0, hq, j->head_dim, 0,
                    kv_row_bytes(j->kv_type, j->n_kv_heads * j->head_dim), {0}};
    sl.kv0 = sl.h0 / hq;
    sl.nkv = (sl.h0 + sl.nh - 1) / hq - sl.kv0 + 1;
    sl.bw = sl.nkv * sl.hd + ATT_PAD;
    for (int h = 0; h < sl.nh; h++) sl.col[h] = ((sl.h0 + h) / hq - sl.kv0) * sl.hd;
    return sl;
}

// Token t's keys: [*a, len) (a > 0 when a sliding window hides the earlier ones).
static int token_keys(const attention_job *j, int t, int *a) {
    const int len = j->fb->pos[t] + 1, w = j->ac->window;
    *a = w > 0 && len > w ? len - w : 0;
    return len;
}

size_t attention_split_bytes(const attention_job *j, int n_threads) {
    const int64_t items = (int64_t)j->fb->n * n_slices(j);
    if (items >= 4 * (int64_t)n_threads || max_ranges(j) < 2) return 0;
    return sizeof(float) * part_floats(j) * (size_t)items * (size_t)max_ranges(j);
}

int64_t attention_items_count(const attention_job *j) {
    return (int64_t)j->fb->n * n_slices(j) * (j->part ? max_ranges(j) : 1);
}

void attention_items(void *ctx, int64_t i0, int64_t i1) {
    const attention_job *j = ctx;
    const int ns = n_slices(j), nr = j->part ? max_ranges(j) : 1;
    att_state st, part;
    for (int64_t i = i0; i < i1; i++) {
        const int t = (int)(i / ((int64_t)ns * nr)), s = (int)(i / nr % ns), r = (int)(i % nr);
        const att_slice sl = slice_of(j, s);
        const size_t off = ((size_t)t * j->n_heads + sl.h0) * j->head_dim;
        const int32_t *table = j->fb->tables + (size_t)j->fb->seq[t] * j->fb->max_blocks;
        int a;
        const int len = token_keys(j, t, &a);
        if (j->part) {  // one range: its partial state, for attention_merge
            if (a + r * ATT_RANGE >= len) continue;
            const int b = a + (r + 1) * ATT_RANGE < len ? a + (r + 1) * ATT_RANGE : len;
            range_state(&sl, j->q + off, table, a + r * ATT_RANGE, b, len, &part);
            float *p = j->part + (size_t)i * part_floats(j);
            memcpy(p, part.M, sizeof(float) * (size_t)sl.nh);
            memcpy(p + sl.nh, part.S, sizeof(float) * (size_t)sl.nh);
            memcpy(p + 2 * sl.nh, part.acc, sizeof(float) * (size_t)sl.nh * (size_t)sl.hd);
            continue;
        }
        // every range in turn, merged as attention_merge merges them
        state_empty(&st, sl.nh, sl.hd);
        for (int k0 = a; k0 < len; k0 += ATT_RANGE) {
            range_state(&sl, j->q + off, table, k0, k0 + ATT_RANGE < len ? k0 + ATT_RANGE : len, len, &part);
            state_merge(&st, part.M, part.S, part.acc, sl.nh, sl.hd);
        }
        state_out(&sl, &st, j->out + off);
    }
}

int64_t attention_merge_count(const attention_job *j) { return (int64_t)j->fb->n * n_slices(j); }

void attention_merge(void *ctx, int64_t i0, int64_t i1) {
    const attention_job *j = ctx;
    const int ns = n_slices(j), nr = max_ranges(j);
    att_state st;
    for (int64_t i = i0; i < i1; i++) {  // item i: token i / ns, slice i % ns
        const int t = (int)(i / ns);
        const att_slice sl = slice_of(j, (int)(i % ns));
        int a;
        const int len = token_keys(j, t, &a);
        state_empty(&st, sl.nh, sl.hd);
        for (int r = 0; a + r * ATT_RANGE < len; r++) {
            const float *p = j->part + ((size_t)i * nr + r) * part_floats(j);
            state_merge(&st, p, p + sl.nh, p + 2 * sl.nh, sl.nh, sl.hd);
        }
        state_out(&sl, &st, j->out + ((size_t)t * j->n_heads + sl.h0) * j->head_dim);
    }
}
