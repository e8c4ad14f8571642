// quant.c — see quant.h. Block layouts are ggml's, byte for byte.
//
// Contents: the type table; fp16/bf16 conversions; row dequantization;
// activation quantization (llama.cpp's values in quill's own SIMD-friendly
// row layout, described in quant.h); and q_matmul with three
// implementations picked at compile time: AVX-512 VNNI (this file's hot
// path), AVX2 (Q4_K and Q5_K run the portable code) and portable C (it states
// the math the SIMD kernels reorganize). All three compute the same bits.
#include "quant.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__F16C__)
#define Q_AVX512 1
#endif
#if !defined(Q_AVX512) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define Q_AVX2 1
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

// Every type id ggml has assigned and still defines. Sizes: block_bytes per
// `block` elements. compute/dot_type are filled for the types quill runs.
static const qtype_info QTYPES[Q_TYPE_COUNT] = {
    [0] = {"F32", 1, 4, 1, Q_F32},
    [1] = {"F16", 1, 2, 1, Q_F16},
    [2] = {"Q4_0", 32, 18, 1, Q_Q8_0},
    [3] = {"Q4_1", 32, 20, 1, Q_Q8_1},
    [6] = {"Q5_0", 32, 22, 1, Q_Q8_0},
    [7] = {"Q5_1", 32, 24, 1, Q_Q8_1},
    [8] = {"Q8_0", 32, 34, 1, Q_Q8_0},
    [9] = {"Q8_1", 32, 36, 0, 0},
    [10] = {"Q2_K", 256, 84, 0, 0},
    [11] = {"Q3_K", 256, 110, 0, 0},
    [12] = {"Q4_K", 256, 144, 1, Q_Q8_K},
    [13] = {"Q5_K", 256, 176, 1, Q_Q8_K},
    [14] = {"Q6_K", 256, 210, 1, Q_Q8_K},
    [15] = {"Q8_K", 256, 292, 0, 0},
    [16] = {"IQ2_XXS", 256, 66, 0, 0},
    [17] = {"IQ2_XS", 256, 74, 0, 0},
    [18] = {"IQ3_XXS", 256, 98, 0, 0},
    [19] = {"IQ1_S", 256, 50, 0, 0},
    [20] = {"IQ4_NL", 32, 18, 0, 0},
    [21] = {"IQ3_S", 256, 110, 0, 0},
    [22] = {"IQ2_S", 256, 82, 0, 0},
    [23] = {"IQ4_XS", 256, 136, 0, 0},
    [24] = {"I8", 1, 1, 0, 0},
    [25] = {"I16", 1, 2, 0, 0},
    [26] = {"I32", 1, 4, 0, 0},
    [27] = {"I64", 1, 8, 0, 0},
    [28] = {"F64", 1, 8, 0, 0},
    [29] = {"IQ1_M", 256, 56, 0, 0},
    [30] = {"BF16", 1, 2, 1, Q_BF16},
    [34] = {"TQ1_0", 256, 54, 0, 0},
    [35] = {"TQ2_0", 256, 66, 0, 0},
    [39] = {"MXFP4", 32, 17, 0, 0},
};

const qtype_info *qtype_get(uint32_t type) {
    if (type >= Q_TYPE_COUNT || !QTYPES[type].name) return NULL;
    return &QTYPES[type];
}

const char *qtype_name(uint32_t type, char buf[16]) {
    const qtype_info *q = qtype_get(type);
    if (q) return q->name;
    snprintf(buf, 16, "type %u", type);
    return buf;
}

size_t qtype_row_bytes(uint32_t type, int64_t n) {
    const qtype_info *q = qtype_get(type);
    return q ? (size_t)(n / q->block) * q->block_bytes : 0;
}

// ---------------------------------------------------------------------------
// Half and bfloat16 conversions
// ---------------------------------------------------------------------------

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float fp16_to_f32(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000 | man << 13);  // inf, NaN
    if (exp == 0) {                                                    // zero, subnormal: man * 2^-24
        const float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | (exp + 112) << 23 | man << 13);  // rebias 15 -> 127
#endif
}

uint16_t f32_to_fp16(float f) {
#if defined(__F16C__)
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
#else
    const uint32_t x = f32_bits(f), sign = (x >> 16) & 0x8000, ax = x & 0x7fffffff;
    if (ax > 0x7f800000) return (uint16_t)(sign | 0x7e00 | ((ax >> 13) & 0x3ff));  // quiet NaN
    if (ax >= 0x477ff000) return (uint16_t)(sign | 0x7c00);  // >= 65520 rounds to infinity
    if (ax >= 0x38800000) {  // normal half (>= 2^-14): drop 13 mantissa bits, ties to even
        uint32_t h = (ax >> 13) - (112u << 10), rem = ax & 0x1fff;
        h += rem > 0x1000 || (rem == 0x1000 && (h & 1));  // a carry correctly bumps the exponent
        return (uint16_t)(sign | h);
    }
    // Subnormal half: the value is m * 2^-shift in units of 2^-24 (the half
    // subnormal step), m the 24-bit float significand.
    const int shift = 126 - (int)(ax >> 23);
    if (shift > 24) return (uint16_t)sign;  // below 2^-25: rounds to zero
    const uint32_t m = (ax & 0x7fffff) | 0x800000;
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    q += rem > half || (rem == half && (q & 1));
    return (uint16_t)(sign | q);
#endif
}

float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t f32_to_bf16(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 0x40);  // keep NaN, make it quiet
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);                 // round to nearest even
}

// ---------------------------------------------------------------------------
// ggml block layouts (a fp16_t is raw half bits)
// ---------------------------------------------------------------------------

typedef uint16_t fp16_t;

// 32 weights (q - 8) * d; qs[j] holds element j (low nibble) and j + 16 (high).
typedef struct { fp16_t d; uint8_t qs[16]; } block_q4_0;
// 32 weights q * d + m, nibbles as Q4_0.
typedef struct { fp16_t d, m; uint8_t qs[16]; } block_q4_1;
// 32 weights (q - 16) * d; bit e of the little-endian qh is element e's 5th bit.
typedef struct { fp16_t d; uint8_t qh[4]; uint8_t qs[16]; } block_q5_0;
// 32 weights q * d + m, bits as Q5_0.
typedef struct { fp16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } block_q5_1;
// 32 weights q * d.
typedef struct { fp16_t d; int8_t qs[32]; } block_q8_0;
// 256 weights in 8 sub-blocks of 32: d * sc[s] * q - dmin * mn[s], with 6-bit
// sc/mn packed in scales[12]. qs[32c + l]: low nibble = sub-block 2c element
// l, high nibble = sub-block 2c + 1 element l.
typedef struct { fp16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } block_q4_K;
// As Q4_K plus a 5th bit: bit s of qh[l] belongs to sub-block s element l.
typedef struct { fp16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } block_q5_K;
// 256 weights d * scales[e / 16] * (q - 32), q 6 bits: 4 in ql, 2 in qh (see q6k_value).
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; fp16_t d; } block_q6_K;

_Static_assert(sizeof(block_q4_0) == 18, "block_q4_0");
_Static_assert(sizeof(block_q4_1) == 20, "block_q4_1");
_Static_assert(sizeof(block_q5_0) == 22, "block_q5_0");
_Static_assert(sizeof(block_q5_1) == 24, "block_q5_1");
_Static_assert(sizeof(block_q8_0) == 34, "block_q8_0");
_Static_assert(sizeof(block_q4_K) == 144, "block_q4_K");
_Static_assert(sizeof(block_q5_K) == 176, "block_q5_K");
_Static_assert(sizeof(block_q6_K) == 210, "block_q6_K");

static inline uint32_t load_u32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline float load_f32(const void *p) { float v; memcpy(&v, p, 4); return v; }

// Unpacks the 12 scale bytes of Q4_K/Q5_K into 8 scales and 8 mins (6 bits
// each), four per 32-bit word: {scales 0-3, scales 4-7, mins 0-3, mins 4-7}.
// Sub-blocks 0-3 keep theirs in the low 6 bits of bytes 0-3 (scale) and 4-7
// (min); sub-blocks 4-7 take the low/high nibble of bytes 8-11 and borrow the
// top two bits of bytes 0-3 (scale) / 4-7 (min) as their bits 4-5.
static inline void k4_scale_words(const uint8_t q[12], uint32_t out[4]) {
    const uint32_t w0 = load_u32(q), w1 = load_u32(q + 4), w2 = load_u32(q + 8);
    out[0] = w0 & 0x3f3f3f3f;
    out[1] = (w2 & 0x0f0f0f0f) | ((w0 >> 2) & 0x30303030);
    out[2] = w1 & 0x3f3f3f3f;
    out[3] = ((w2 >> 4) & 0x0f0f0f0f) | ((w1 >> 2) & 0x30303030);
}

static inline void k4_scales(const uint8_t q[12], uint8_t sc[8], uint8_t mn[8]) {
    uint32_t w[4];
    k4_scale_words(q, w);
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(w[j / 4] >> (8 * (j % 4)));
        mn[j] = (uint8_t)(w[2 + j / 4] >> (8 * (j % 4)));
    }
}

// The 6-bit value (0..63) of element e (0..255) of a Q6_K block. Each half of
// 128 elements uses 64 ql bytes and 32 qh bytes: element 32*k + l of the half
// (k < 4, l < 32) takes the low (k < 2) or high nibble of ql[l + 32*(k & 1)]
// and bits 2k, 2k+1 of qh[l].
static inline int q6k_value(const block_q6_K *b, int e) {
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int lo = (b->ql[64 * h + 32 * (k & 1) + l] >> (4 * (k >> 1))) & 15;
    const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return lo | hi << 4;
}

static inline int q5k_value(const block_q5_K *b, int e) {
    const int s = e / 32, l = e % 32;
    return ((b->qs[32 * (s / 2) + l] >> (4 * (s & 1))) & 15) | ((b->qh[l] >> s) & 1) << 4;
}

static inline int q4k_value(const block_q4_K *b, int e) {
    const int s = e / 32, l = e % 32;
    return (b->qs[32 * (s / 2) + l] >> (4 * (s & 1))) & 15;
}

// Integer values of one 32-weight block, before scale/offset: q in [0, 16)
// for Q4_*, [0, 32) for Q5_*, signed for Q8_0.
static void block32_values(uint32_t type, const void *blk, int q[32]) {
    const uint8_t *qs;
    uint32_t qh = 0;
    switch (type) {
    case Q_Q8_0:
        for (int j = 0; j < 32; j++) q[j] = ((const block_q8_0 *)blk)->qs[j];
        return;
    case Q_Q4_0: qs = ((const block_q4_0 *)blk)->qs; break;
    case Q_Q4_1: qs = ((const block_q4_1 *)blk)->qs; break;
    case Q_Q5_0: qs = ((const block_q5_0 *)blk)->qs; qh = load_u32(((const block_q5_0 *)blk)->qh); break;
    default:     qs = ((const block_q5_1 *)blk)->qs; qh = load_u32(((const block_q5_1 *)blk)->qh); break;
    }
    for (int j = 0; j < 16; j++) {
        q[j] = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
        q[j + 16] = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
    }
}

// ---------------------------------------------------------------------------
// Dequantization
// ---------------------------------------------------------------------------

static void dequant_block32(uint32_t type, const uint8_t *src, float *dst, int64_t nb) {
    const size_t bs = QTYPES[type].block_bytes;
    for (int64_t i = 0; i < nb; i++, src += bs, dst += 32) {
        int q[32];
        block32_values(type, src, q);
        const float d = fp16_to_f32(load_u32(src) & 0xffff);
        const int has_min = type == Q_Q4_1 || type == Q_Q5_1;
        const float m = has_min ? fp16_to_f32(load_u32(src) >> 16) : 0.0f;
        const int off = type == Q_Q4_0 ? 8 : type == Q_Q5_0 ? 16 : 0;
        for (int j = 0; j < 32; j++) dst[j] = (float)(q[j] - off) * d + m;
    }
}

static void dequant_q4_K(const block_q4_K *b, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, dst += 256) {
        uint8_t sc[8], mn[8];
        k4_scales(b->scales, sc, mn);
        const float d = fp16_to_f32(b->d), dmin = fp16_to_f32(b->dmin);
        for (int e = 0; e < 256; e++)
            dst[e] = d * sc[e / 32] * (float)q4k_value(b, e) - dmin * mn[e / 32];
    }
}

static void dequant_q5_K(const block_q5_K *b, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, dst += 256) {
        uint8_t sc[8], mn[8];
        k4_scales(b->scales, sc, mn);
        const float d = fp16_to_f32(b->d), dmin = fp16_to_f32(b->dmin);
        for (int e = 0; e < 256; e++)
            dst[e] = d * sc[e / 32] * (float)q5k_value(b, e) - dmin * mn[e / 32];
    }
}

static void dequant_q6_K(const block_q6_K *b, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, dst += 256) {
        const float d = fp16_to_f32(b->d);
        for (int e = 0; e < 256; e++) dst[e] = d * b->scales[e / 16] * (float)(q6k_value(b, e) - 32);
    }
}

void q_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n) {
    const uint8_t *s = src;
    switch (type) {
    case Q_F32: memcpy(dst, src, (size_t)n * 4); break;
    case Q_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = fp16_to_f32((uint16_t)(s[2 * i] | s[2 * i + 1] << 8));
        break;
    case Q_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32((uint16_t)(s[2 * i] | s[2 * i + 1] << 8));
        break;
    case Q_Q4_0: case Q_Q4_1: case Q_Q5_0: case Q_Q5_1: case Q_Q8_0:
        dequant_block32(type, s, dst, n / 32);
        break;
    case Q_Q4_K: dequant_q4_K(src, dst, n / 256); break;
    case Q_Q5_K: dequant_q5_K(src, dst, n / 256); break;
    case Q_Q6_K: dequant_q6_K(src, dst, n / 256); break;
    default: memset(dst, 0, (size_t)n * sizeof(float)); break;  // callers reject non-compute types
    }
}

// ---------------------------------------------------------------------------
// Activation quantization (layouts in quant.h)
// ---------------------------------------------------------------------------

// The 32-element layouts share one "unit" shape: 16 lanes of 32 elements
// (one block or K sub-block per lane), stored as q[512] then 16 floats d
// (UNIT_D) then 16 words (UNIT_W: the Q8_0 correction, the Q8_1 s or the
// Q8_K bsums pair).
#define UNIT 512
#define UNIT_BYTES 640
#define UNIT_D 512
#define UNIT_W 576

// Byte of element p of lane L in a lane-transposed group: lane L holds one
// scale group, and each 64-byte vector holds 4 consecutive elements of every
// lane, so one dot-product instruction covers 16 groups.
static inline size_t lane_pos(int L, int p) { return (size_t)(64 * (p >> 2) + 4 * L + (p & 3)); }

static inline int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

// Q6_K activation rows: one 384-byte record per super-block: q[256], int32
// c[16] at K16_C, float d at K16_D (six aligned cache lines, one pointer).
#define K16_BYTES 384
#define K16_C 256
#define K16_D 320

// Q4_K activation rows: one 320-byte record per super-block: q[256] with
// sub-block s at k4_sub_off(s), then 16 words: word 0 = d (float), words
// 8..11 = the int16 pairs (Σq of sub-block 2p, Σq of sub-block 2p + 1),
// the rest 0. The q order pairs each 64-byte vector with 64 bytes of Q4_K's
// qs: qs[0..63] hold sub-blocks 0 and 2 in their low nibbles and 1 and 3 in
// the high ones, so vector j = 0, 1, 2, 3 holds sub-blocks (0, 2), (1, 3),
// (4, 6), (5, 7), 32 elements each in element order.
#define K4_BYTES 320
#define K4_W 256       // the 16 words
#define K4_PAIRS 288   // word 8: the first bsums pair

static inline size_t k4_sub_off(int s) { return (size_t)(64 * (2 * (s >> 2) + (s & 1)) + 32 * ((s >> 1) & 1)); }

enum act_layout { ACT_NONE, ACT_F32, ACT_F16, ACT_BF16, ACT_Q8_0, ACT_Q8_1, ACT_K32, ACT_K16, ACT_K4 };

static enum act_layout act_layout_of(uint32_t wtype) {
    switch (wtype) {
    case Q_F32: return ACT_F32;
    case Q_F16: return ACT_F16;
    case Q_BF16: return ACT_BF16;
    case Q_Q8_0: case Q_Q4_0: case Q_Q5_0: return ACT_Q8_0;
    case Q_Q4_1: case Q_Q5_1: return ACT_Q8_1;
    case Q_Q4_K: return ACT_K4;
    case Q_Q5_K: return ACT_K32;
    case Q_Q6_K: return ACT_K16;
    default: return ACT_NONE;
    }
}

size_t q_act_row_bytes(uint32_t wtype, int64_t n) {
    switch (act_layout_of(wtype)) {
    case ACT_F32: case ACT_F16: return (size_t)round_up(4 * n, 64);
    case ACT_BF16: return (size_t)round_up(2 * n, 64);
    case ACT_Q8_0: case ACT_Q8_1: case ACT_K32: return (size_t)((n + UNIT - 1) / UNIT) * UNIT_BYTES;
    case ACT_K16: return (size_t)(n / 256) * K16_BYTES;
    case ACT_K4: return (size_t)(n / 256) * K4_BYTES;
    default: return 0;
    }
}

#if defined(Q_AVX2)
// 32 int32 values (within int8's range) to bytes, in order.
static inline void store_i8x32(int8_t *q, const __m256i v[4]) {
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256((__m256i *)q, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
#endif

// Q8_0 / Q8_1 of one block of 32, as llama.cpp's AVX2 quantize_row_q8_0/1:
// d = amax/127, q = round-half-even(x * (127/amax)). Returns d (before any
// fp16 rounding); q[] in element order, *sum = Σq.
static float quant_block_q8(const float *x, int8_t q[32], int *sum) {
#if defined(Q_AVX512)
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    // cvtps_epi32 rounds half-even under the default MXCSR, as rintf does
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, _mm512_set1_ps(id)));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, _mm512_set1_ps(id)));
    _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(q1));
    *sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
    return d;
#elif defined(Q_AVX2)
    __m256 v[4], m = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        m = _mm256_max_ps(m, _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v[k]));
    }
    float mm[8], amax = 0.0f;
    _mm256_storeu_ps(mm, m);
    for (int j = 0; j < 8; j++) amax = fmaxf(amax, mm[j]);
    const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    __m256i qi[4];  // cvtps rounds half-even under the default MXCSR, as rintf does
    for (int k = 0; k < 4; k++) qi[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], _mm256_set1_ps(id)));
    store_i8x32(q, qi);
    const __m256i s4 = _mm256_add_epi32(_mm256_add_epi32(qi[0], qi[1]), _mm256_add_epi32(qi[2], qi[3]));
    __m128i s2 = _mm_add_epi32(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
    s2 = _mm_add_epi32(s2, _mm_unpackhi_epi64(s2, s2));
    *sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 1)));
    return d;
#else
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f, id = amax != 0.0f ? 127.0f / amax : 0.0f;
    *sum = 0;
    for (int j = 0; j < 32; j++) {
        q[j] = (int8_t)rintf(x[j] * id);
        *sum += q[j];
    }
    return d;
#endif
}

uint16_t q8_0_block(const float *x, int8_t q[32]) {
    int sum;
    return f32_to_fp16(quant_block_q8(x, q, &sum));
}

// Q8_K of one super-block as llama.cpp's quantize_row_q8_K_ref: scaled by
// the signed element of largest magnitude (the first such), rounded half-even,
// clamped to 127. Returns d (0 for an all-zero block, q all 0).
static float quant_block_q8_K(const float *x, int8_t q[256]) {
    float amax = 0.0f, max = 0.0f;
#if defined(Q_AVX512)
    __m512 m = _mm512_setzero_ps();
    for (int k = 0; k < 16; k++) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)));
    amax = _mm512_reduce_max_ps(m);
    for (int k = 0; k < 16 && amax != 0.0f; k++) {  // the first element reaching amax gives the sign
        const __mmask16 hit = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * k)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
        if (hit) { max = x[16 * k + __builtin_ctz(hit)]; break; }
    }
#elif defined(Q_AVX2)
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 32; k++) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)));
    float mm[8];
    _mm256_storeu_ps(mm, m);
    for (int j = 0; j < 8; j++) amax = fmaxf(amax, mm[j]);
    for (int k = 0; k < 32 && amax != 0.0f; k++) {  // the first element reaching amax gives the sign
        const int hit = _mm256_movemask_ps(
            _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * k)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
        if (hit) { max = x[8 * k + __builtin_ctz((unsigned)hit)]; break; }
    }
#else
    for (int j = 0; j < 256; j++) {
        const float ax = fabsf(x[j]);
        if (ax > amax) { amax = ax; max = x[j]; }
    }
#endif
    if (amax == 0.0f) {
        memset(q, 0, 256);
        return 0.0f;
    }
    const float iscale = -127.0f / max;
#if defined(Q_AVX512)
    for (int k = 0; k < 16; k++) {
        const __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * k), _mm512_set1_ps(iscale)));
        _mm_storeu_si128((__m128i *)(q + 16 * k), _mm512_cvtepi32_epi8(_mm512_min_epi32(v, _mm512_set1_epi32(127))));
    }
#elif defined(Q_AVX2)
    for (int k = 0; k < 8; k++) {
        __m256i qi[4];
        for (int i = 0; i < 4; i++)
            qi[i] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * k + 8 * i), _mm256_set1_ps(iscale))),
                                     _mm256_set1_epi32(127));
        store_i8x32(q + 32 * k, qi);
    }
#else
    for (int j = 0; j < 256; j++) {
        const int v = (int)rintf(iscale * x[j]);
        q[j] = (int8_t)(v < 127 ? v : 127);
    }
#endif
    return 1.0f / iscale;
}

static int sum_i8(const int8_t *q, int n) {
    int s = 0;
    for (int j = 0; j < n; j++) s += q[j];
    return s;
}

// Writes lane L of a unit: its 32 q (4 per vector), d and the extra word w
// (float or int32 bits).
static void unit_lane(uint8_t *unit, int L, const int8_t q[32], float d, const void *w) {
    for (int v = 0; v < 8; v++) memcpy(unit + 64 * v + 4 * L, q + 4 * v, 4);
    memcpy(unit + UNIT_D + 4 * L, &d, 4);
    memcpy(unit + UNIT_W + 4 * L, w, 4);
}

// Q8_0 / Q8_1 rows (blocks of 32, 16 per unit). The Q8_0 word is
// c = -128 * Σq: the kernels feed weights to VPDPBUSD as w + 128 (unsigned)
// and c removes the 128 * Σx this adds. The Q8_1 word is s = fp16(d * Σq),
// with d before its own fp16 rounding, as llama.cpp.
static void act_q8_01(int q81, const float *x, uint8_t *dst, int64_t n) {
    memset(dst, 0, (size_t)((n + UNIT - 1) / UNIT) * UNIT_BYTES);
    for (int64_t b = 0; b < n / 32; b++) {
        int8_t q[32];
        int sum;
        const float d = quant_block_q8(x + 32 * b, q, &sum);
        const float s = fp16_to_f32(f32_to_fp16(d * (float)sum));
        const int32_t c = -128 * sum;
        unit_lane(dst + (b / 16) * UNIT_BYTES, (int)(b % 16), q, fp16_to_f32(f32_to_fp16(d)),
                  q81 ? (const void *)&s : (const void *)&c);
    }
}

// Q8_K rows for Q5_K: lane = 32-element sub-block (two super-blocks per
// unit), d = the super-block's d; the word is the int16 pair (Σq of
// sub-block 2p, Σq of sub-block 2p + 1) in both lanes of pair p (llama.cpp's
// bsums, summed in pairs, as its kernels use them for the mins).
static void act_k32(const float *x, uint8_t *dst, int64_t n) {
    memset(dst, 0, (size_t)((n + UNIT - 1) / UNIT) * UNIT_BYTES);
    for (int64_t k = 0; k < n / 256; k++) {
        int8_t q[256];
        const float d = quant_block_q8_K(x + 256 * k, q);
        int bs[8];
        for (int s = 0; s < 8; s++) bs[s] = sum_i8(q + 32 * s, 32);
        for (int s = 0; s < 8; s++) {
            const int64_t B = 8 * k + s;  // sub-block index in the row
            const uint32_t pair = (uint16_t)bs[s & ~1] | (uint32_t)bs[s | 1] << 16;
            unit_lane(dst + (B / 16) * UNIT_BYTES, (int)(B % 16), q + 32 * s, d, &pair);
        }
    }
}

// Q8_K rows for Q4_K: per super-block q[256] in k4_sub_off order, d and
// the bsums pairs (layout at K4_BYTES).
static void act_k4(const float *x, uint8_t *dst, int64_t n) {
    memset(dst, 0, q_act_row_bytes(Q_Q4_K, n));
    for (int64_t k = 0; k < n / 256; k++) {
        int8_t q[256];
        const float d = quant_block_q8_K(x + 256 * k, q);
        uint8_t *rec = dst + k * K4_BYTES;
        for (int s = 0; s < 8; s++) memcpy(rec + k4_sub_off(s), q + 32 * s, 32);
        memcpy(rec + K4_W, &d, 4);
        for (int p = 0; p < 4; p++) {
            const uint32_t pair = (uint16_t)sum_i8(q + 64 * p, 32) | (uint32_t)sum_i8(q + 64 * p + 32, 32) << 16;
            memcpy(rec + K4_PAIRS + 4 * p, &pair, 4);
        }
    }
}

// Q8_K rows for Q6_K: per super-block 256 q (lane = group of 16), c = -32 *
// Σq per group (Q6_K's weights q - 32 enter VPDPBUSD as the unsigned q), d.
static void act_k16(const float *x, uint8_t *dst, int64_t n) {
    memset(dst, 0, q_act_row_bytes(Q_Q6_K, n));
    for (int64_t k = 0; k < n / 256; k++) {
        int8_t q[256];
        const float d = quant_block_q8_K(x + 256 * k, q);
        uint8_t *rec = dst + k * K16_BYTES;
        for (int g = 0; g < 16; g++) {
            for (int v = 0; v < 4; v++) memcpy(rec + 64 * v + 4 * g, q + 16 * g + 4 * v, 4);
            const int32_t c = -32 * sum_i8(q + 16 * g, 16);
            memcpy(rec + K16_C + 4 * g, &c, 4);
        }
        memcpy(rec + K16_D, &d, 4);
    }
}

// x rounded to fp16 and back, n values.
static void round_fp16(const float *x, uint8_t *o, int64_t n) {
    int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps((float *)(o + 4 * i), _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
#endif
    for (; i < n; i++) {
        const float v = fp16_to_f32(f32_to_fp16(x[i]));
        memcpy(o + 4 * i, &v, 4);
    }
}

void q_quantize_act(uint32_t wtype, const float *x, void *dst, int64_t n) {
    uint8_t *o = dst;
    const size_t bytes = q_act_row_bytes(wtype, n);
    switch (act_layout_of(wtype)) {
    case ACT_F32:
        memcpy(o, x, (size_t)n * 4);
        memset(o + 4 * n, 0, bytes - (size_t)(4 * n));
        break;
    case ACT_F16:
        round_fp16(x, o, n);
        memset(o + 4 * n, 0, bytes - (size_t)(4 * n));
        break;
    case ACT_BF16:
        for (int64_t i = 0; i < n; i++) {
            const uint16_t v = f32_to_bf16(x[i]);
            memcpy(o + 2 * i, &v, 2);
        }
        memset(o + 2 * n, 0, bytes - (size_t)(2 * n));
        break;
    case ACT_Q8_0: act_q8_01(0, x, o, n); break;
    case ACT_Q8_1: act_q8_01(1, x, o, n); break;
    case ACT_K32: act_k32(x, o, n); break;
    case ACT_K16: act_k16(x, o, n); break;
    case ACT_K4: act_k4(x, o, n); break;
    default: break;
    }
}

// ---------------------------------------------------------------------------
// Portable kernels. Q4_K and Q5_K: one weight row against one activation row,
// in llama.cpp's float orders, which their SIMD kernels keep bit for bit.
// ---------------------------------------------------------------------------

// Σ q[j] * x[j] over lane L of a unit (q: 32 weight values).
static int lane_dot(const int q[32], const uint8_t *unit, int L) {
    int s = 0;
    for (int j = 0; j < 32; j++) s += q[j] * (int8_t)unit[lane_pos(L, j)];
    return s;
}

// The integer min part of super-block k of a Q5_K row, M = Σ mn[s] * Σx_s
// over its sub-blocks s (Σx from the activation's bsums pairs); exact.
static int32_t k32_min_sum(const uint8_t mn[8], const uint8_t *x, int64_t k) {
    const uint8_t *u0 = x + (8 * k / 16) * UNIT_BYTES;
    int32_t m = 0;
    for (int p = 0; p < 4; p++) {
        const uint32_t pair = load_u32(u0 + UNIT_W + 4 * ((8 * k + 2 * p) % 16));
        m += mn[2 * p] * (int16_t)(pair & 0xffff) + mn[2 * p + 1] * (int16_t)(pair >> 16);
    }
    return m;
}

// ggml's horizontal sum of 8 float lanes (hsum_float_8): the upper half onto
// the lower, then (0 + 2) + (1 + 3).
static inline float hsum8_ggml(const float a[8]) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}


// Lane j's integer sum of one Q5_K super-block (see dot_q5_K): isum[j] =
// Σ_s sc[s] * Σ q*x over elements 32s + 4j .. 32s + 4j + 3; the activations
// are lanes L0.. of unit u0.
__attribute__((unused))  // the AVX2 build has its own
static void q5k_ints_c(const block_q5_K *b, const uint8_t sc[8], const uint8_t *u0, int L0, int32_t isum[8]) {
    for (int j = 0; j < 8; j++) {
        isum[j] = 0;
        for (int s = 0; s < 8; s++) {
            int32_t p = 0;
            for (int i = 0; i < 4; i++) p += q5k_value(b, 32 * s + 4 * j + i) * (int8_t)u0[lane_pos(L0 + s, 4 * j + i)];
            isum[j] += sc[s] * p;
        }
    }
}

// Q4_K in the float order of llama.cpp's repacked q4_K_8x8 kernels: per
// super-block the integer sums I = Σ sc * Σ q*x and M = Σ mn * Σx (Σx from
// the activation's bsums pairs) enter two float accumulators, s1 with
// D = fp16(d) * d_x and s2 with Dm = fp16(dmin) * d_x (each rounded to
// float), one fma per super-block (gemv: decode and leftover tokens) or per
// 64 elements (gemm: tokens in full groups of 4); the result is s1 - s2
// (dot_q4_K). q4k_chain takes one super-block: I[p] and M[p] are pair p's
// parts of I and M (sub-blocks 2p and 2p + 1), rec its activation record.
static inline void q4k_chain(const block_q4_K *b, const uint8_t *rec, const int32_t I[4], const int32_t M[4],
                             int gemm, float *s1, float *s2) {
    const float dx = load_f32(rec + K4_W);
    const float D = fp16_to_f32(b->d) * dx, Dm = fp16_to_f32(b->dmin) * dx;
    int32_t isum = 0, msum = 0;
    for (int p = 0; p < 4; p++) {
        isum += I[p];
        msum += M[p];
        if (gemm || p == 3) {
            *s1 = fmaf((float)isum, D, *s1);
            *s2 = fmaf((float)msum, Dm, *s2);
            isum = msum = 0;
        }
    }
}


// Pair p's parts of I and M for one Q4_K super-block (see q4k_chain):
// sub-blocks 2p and 2p + 1, rec its activation record (Σx from its bsums pairs).
__attribute__((unused))  // the AVX2 build has its own
static void q4k_ints_c(const block_q4_K *b, const uint8_t *rec, int32_t I[4], int32_t M[4]) {
    uint8_t sc[8], mn[8];
    k4_scales(b->scales, sc, mn);
    for (int p = 0; p < 4; p++) {
        I[p] = 0;
        for (int s = 2 * p; s < 2 * p + 2; s++) {
            int32_t dot = 0;
            for (int j = 0; j < 32; j++) dot += q4k_value(b, 32 * s + j) * (int8_t)rec[k4_sub_off(s) + j];
            I[p] += sc[s] * dot;
        }
        const uint32_t pair = load_u32(rec + K4_PAIRS + 4 * p);
        M[p] = mn[2 * p] * (int16_t)(pair & 0xffff) + mn[2 * p + 1] * (int16_t)(pair >> 16);
    }
}

// ---------------------------------------------------------------------------
// Unit kernels: the float order every build shares
//
// Apart from Q4_K and Q5_K (above: llama.cpp's own float orders), a weight
// row is cut into units of 16 lanes (16 blocks of 32, the 16 groups of a
// Q6_K super-block, 16 floats, or 16 pairs of bf16). Each lane runs its own
// float chain over the row's units, one fma per unit (integer dot products,
// exact in any order, times the scales), and the 16 lanes are summed at the
// end in the order of GCC's _mm512_reduce_add_ps (reduce16). The AVX-512 and
// AVX2 kernels perform these same float operations, so every build computes
// the same bits; the portable kernels here state them one lane at a time.
// ---------------------------------------------------------------------------

#define TILE_T 16           // tokens sharing one unpacked weight unit (register tile)
#define ROW_BLOCK 32        // rows revisited by every token tile (their weights stay in L2)
#define K_CHUNK_BYTES 2560  // activation bytes per token per pass (TILE_T tokens' worth stay in L1)
#define LONE_X_BYTES 49152  // at most, activation bytes of a lone token tile (whole rows; L1's size)

// out[t] = Σ over units [u0, u1) of dot(weight row w, activation row t),
// t < tn; tn is 1, 2, 4, 8 or TILE_T; activation rows are xs bytes apart.
typedef void (*tile_fn)(const uint8_t *w, int64_t n, int64_t u0, int64_t u1, const uint8_t *x,
                        size_t xs, int tn, float *out);

// Calls body(args..., NT) with NT the compile-time constant equal to tn, a
// power of two (the driver splits other counts).
#define TILE_SWITCH(body, ...)                    \
    switch (tn) {                                 \
    case 1: body(__VA_ARGS__, 1); break;          \
    case 2: body(__VA_ARGS__, 2); break;          \
    case 4: body(__VA_ARGS__, 4); break;          \
    case 8: body(__VA_ARGS__, 8); break;          \
    default: body(__VA_ARGS__, 16); break;        \
    }

// The sum of 16 lanes as _mm512_reduce_add_ps forms it: the upper 8 onto the
// lower, then the upper 4 of those onto the lower, then (0 + 2) + (1 + 3).
static inline float reduce16(const float a[16]) {
    float h[8], q[4];
    for (int i = 0; i < 8; i++) h[i] = a[8 + i] + a[i];
    for (int i = 0; i < 4; i++) q[i] = h[4 + i] + h[i];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

// 32-element types: lane L of unit u is block 16u + L (blocks past the row's
// end count as zero blocks): acc += fp16(d_w) * d_x * Σ w*x, with w = q - 8,
// q - 16 or q; then for Q4_1/Q5_1 acc += fp16(m_w) * s_x.
__attribute__((unused)) static void block32_kernel_c(uint32_t type, const uint8_t *w, int64_t n, int64_t u0,
                                                     int64_t u1, const uint8_t *x, size_t xs, float *out, int tn) {
    const size_t bs = QTYPES[type].block_bytes;
    const int64_t nb = n / 32;
    const int q81 = type == Q_Q4_1 || type == Q_Q5_1;
    const int off = type == Q_Q4_0 ? 8 : type == Q_Q5_0 ? 16 : 0;
    float acc[TILE_T][16] = {{0}};
    for (int64_t u = u0; u < u1; u++) {
        int q[16][32] = {{0}};
        float d[16] = {0}, m[16] = {0};
        for (int L = 0; L < 16 && 16 * u + L < nb; L++) {
            const uint8_t *blk = w + (size_t)(16 * u + L) * bs;
            block32_values(type, blk, q[L]);
            for (int j = 0; j < 32; j++) q[L][j] -= off;
            d[L] = fp16_to_f32(load_u32(blk) & 0xffff);
            m[L] = q81 ? fp16_to_f32(load_u32(blk) >> 16) : 0.0f;
        }
        for (int t = 0; t < tn; t++) {
            const uint8_t *a = x + (size_t)t * xs + (size_t)u * UNIT_BYTES;
            for (int L = 0; L < 16; L++) {
                acc[t][L] = fmaf((float)lane_dot(q[L], a, L), d[L] * load_f32(a + UNIT_D + 4 * L), acc[t][L]);
                if (q81) acc[t][L] = fmaf(m[L], load_f32(a + UNIT_W + 4 * L), acc[t][L]);
            }
        }
    }
    for (int t = 0; t < tn; t++) out[t] = reduce16(acc[t]);
}

// Q6_K: unit = super-block, lane g = group of 16: acc += (sc_g * fp16(d)) *
// d_x * (Σ q*x + c_g), q unsigned (0..63), c_g = -32 Σx stored with x.
__attribute__((unused)) static void q6k_kernel_c(uint32_t type, const uint8_t *w, int64_t n, int64_t u0,
                                                 int64_t u1, const uint8_t *x, size_t xs, float *out, int tn) {
    (void)type, (void)n;
    float acc[TILE_T][16] = {{0}};
    for (int64_t u = u0; u < u1; u++) {
        const block_q6_K *b = (const block_q6_K *)w + u;
        int q[256];
        float a[16];
        for (int e = 0; e < 256; e++) q[e] = q6k_value(b, e);
        for (int g = 0; g < 16; g++) a[g] = (float)b->scales[g] * fp16_to_f32(b->d);
        for (int t = 0; t < tn; t++) {
            const uint8_t *r = x + (size_t)t * xs + (size_t)u * K16_BYTES;
            const float dx = load_f32(r + K16_D);
            for (int g = 0; g < 16; g++) {
                int32_t i = (int32_t)load_u32(r + K16_C + 4 * g);
                for (int p = 0; p < 16; p++) i += q[16 * g + p] * (int8_t)r[lane_pos(g, p)];
                acc[t][g] = fmaf((float)i, a[g] * dx, acc[t][g]);
            }
        }
    }
    for (int t = 0; t < tn; t++) out[t] = reduce16(acc[t]);
}

// Weight element i of a float row, 0 past its end.
static inline float float_weight(uint32_t type, const uint8_t *w, int64_t n, int64_t i) {
    if (i >= n) return 0.0f;
    if (type == Q_F32) return load_f32(w + 4 * i);
    const uint16_t h = (uint16_t)(w[2 * i] | w[2 * i + 1] << 8);
    return type == Q_F16 ? fp16_to_f32(h) : bf16_to_f32(h);
}

// F32/F16 (x: f32 values, fp16-rounded for F16): lane L = element 16u + L,
// acc += w * x. BF16 (x: bf16): lane L = elements 32u + 2L + 1 and 32u + 2L,
// in that order, as VDPBF16PS adds them.
__attribute__((unused)) static void float_kernel_c(uint32_t type, const uint8_t *w, int64_t n, int64_t u0,
                                                   int64_t u1, const uint8_t *x, size_t xs, float *out, int tn) {
    for (int t = 0; t < tn; t++) {
        const uint8_t *xt = x + (size_t)t * xs;
        float acc[16] = {0};
        for (int64_t u = u0; u < u1; u++) {
            for (int L = 0; L < 16; L++) {
                if (type != Q_BF16) {
                    const int64_t i = 16 * u + L;
                    acc[L] = fmaf(float_weight(type, w, n, i), i < n ? load_f32(xt + 4 * i) : 0.0f, acc[L]);
                    continue;
                }
                for (int64_t i = 32 * u + 2 * L + 1; i >= 32 * u + 2 * L; i--) {
                    const float xv = i < n ? bf16_to_f32((uint16_t)(xt[2 * i] | xt[2 * i + 1] << 8)) : 0.0f;
                    acc[L] = fmaf(xv, float_weight(type, w, n, i), acc[L]);
                }
            }
        }
        out[t] = reduce16(acc);
    }
}

// ---------------------------------------------------------------------------
// AVX-512 VNNI kernels
//
// Each quantized kernel works on "units" of 16 scale groups (16 blocks of 32,
// 16 K sub-blocks of 32, or the 16 groups of a Q6_K super-block). A unit's
// weights are unpacked once into registers in the same lane-transposed order
// as the activation rows: vector v, lane L = weights 4v..4v+3 of group L.
// Weights are VPDPBUSD's unsigned operand and activations its signed one (so
// they load straight from memory); a run of VPDPBUSD leaves group L's integer
// dot product in lane L, and one float multiply-add per token applies every
// group's scales at once. An unpacked unit serves up to TILE_T tokens.
// ---------------------------------------------------------------------------
#if defined(Q_AVX512)

static inline __m512i load512(const void *p) { return _mm512_loadu_si512(p); }

static inline __m512i iota16(void) { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }

// One stage of an 8-vector transposition: exchanges bit `stage` of the
// vector index (a holds 0, b holds 1) with bit `stage` of the lane index.
ALWAYS_INLINE void swap_stage(__m512i *a, __m512i *b, int stage) {
    static const int32_t idx[3][2][16] = {
        {{0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30},
         {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}},
        {{0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
         {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31}},
        {{0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
         {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31}},
    };
    const __m512i lo = _mm512_permutex2var_epi32(*a, load512(idx[stage][0]), *b);
    const __m512i hi = _mm512_permutex2var_epi32(*a, load512(idx[stage][1]), *b);
    *a = lo;
    *b = hi;
}

// Transposes the 8x8 dword blocks of 8 vectors, separately in each 256-bit
// half h: afterwards q[v] lane 8h + m holds what q[m] lane 8h + v held.
ALWAYS_INLINE void transpose8(__m512i q[8]) {
    for (int s = 0; s < 3; s++)
        for (int k = 0; k < 8; k++)
            if (!(k & (1 << s))) swap_stage(&q[k], &q[k | 1 << s], s);
}

// --- units of 16 lanes × 32 weights: the 32-element types -----------------

typedef struct {
    __m512i q[8];  // q[v] lane L: weights 4v..4v+3 of lane L's group, unsigned
    __m512 d;      // lane L: scale of the integer dot
    __m512 m;      // lane L: factor of x's s (Q4_1/Q5_1: m)
} unit_regs;

// Q8_0: z[k] = [block k | block 8+k] (8 dwords each); the transposition puts
// the block in the lane (lane 8j+k = block 8j+k) and the dword in the vector.
ALWAYS_INLINE void q8_0_qs(const block_q8_0 *b, __m512i q[8]) {
    for (int k = 0; k < 8; k++)
        q[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)b[k].qs)),
                                  _mm256_loadu_si256((const __m256i *)b[k + 8].qs), 1);
    transpose8(q);
}

// 4-bit types: z[k] = blocks k, 4+k, 8+k, 12+k (4 qs dwords each); two
// stages give z[v] lane b = qs dword v of block b. Low nibbles are weights
// 4v..4v+3, high nibbles weights 16+4v..16+4v+3.
ALWAYS_INLINE void nibble_qs(const uint8_t *blocks, size_t bs, size_t qs_off, __m512i q[8]) {
    __m512i z[4];
    for (int k = 0; k < 4; k++) {
        const uint8_t *p = blocks + qs_off + (size_t)k * bs;
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)p));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 4 * bs)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 8 * bs)), 2);
        z[k] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(p + 12 * bs)), 3);
    }
    swap_stage(&z[0], &z[1], 0);
    swap_stage(&z[2], &z[3], 0);
    swap_stage(&z[0], &z[2], 1);
    swap_stage(&z[1], &z[3], 1);
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int v = 0; v < 4; v++) {
        q[v] = _mm512_and_si512(z[v], m4);
        q[v + 4] = _mm512_and_si512(_mm512_srli_epi16(z[v], 4), m4);
    }
}

// Spreads bits 4v..4v+3 of each lane of `bits` to bit 4 of its 4 bytes.
ALWAYS_INLINE __m512i spread_bits(__m512i bits, int v) {
    const __m512i table = _mm512_setr_epi32(
        0x00000000, 0x00000010, 0x00001000, 0x00001010, 0x00100000, 0x00100010, 0x00101000, 0x00101010,
        0x10000000, 0x10000010, 0x10001000, 0x10001010, 0x10100000, 0x10100010, 0x10101000, 0x10101010);
    // permutexvar reads only the low 4 bits of each index
    return _mm512_permutexvar_epi32(_mm512_srlv_epi32(bits, _mm512_set1_epi32(4 * v)), table);
}

// Q5_0/Q5_1: lane b's qh (bit e = weight e's 5th bit) from a gather.
ALWAYS_INLINE void add_high_bits(const uint8_t *blocks, size_t bs, size_t qh_off, __m512i q[8]) {
    const __m512i qh = _mm512_i32gather_epi32(_mm512_mullo_epi32(iota16(), _mm512_set1_epi32((int)bs)),
                                              blocks + qh_off, 1);
    for (int v = 0; v < 8; v++) q[v] = _mm512_or_si512(q[v], spread_bits(qh, v));
}

// d (and m) of 16 blocks: the dword at each block's start holds d | m << 16.
ALWAYS_INLINE void block_scales(const uint8_t *blocks, size_t bs, unit_regs *r) {
    const __m512i dm = _mm512_i32gather_epi32(_mm512_mullo_epi32(iota16(), _mm512_set1_epi32((int)bs)), blocks, 1);
    r->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
    r->m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
}

// Unpacks one full unit (16 blocks) of `type` into r.
ALWAYS_INLINE void unit_unpack(uint32_t type, const uint8_t *blocks, unit_regs *r) {
    const size_t bs = QTYPES[type].block_bytes;
    if (type == Q_Q8_0) q8_0_qs((const block_q8_0 *)blocks, r->q);
    else nibble_qs(blocks, bs, type == Q_Q4_0 ? 2 : type == Q_Q4_1 ? 4 : type == Q_Q5_0 ? 6 : 8, r->q);
    if (type == Q_Q5_0 || type == Q_Q5_1) add_high_bits(blocks, bs, type == Q_Q5_0 ? 2 : 4, r->q);
    block_scales(blocks, bs, r);
    // signed weights w enter as w + 128: Q8_0 flips the sign bit, Q4_0 adds
    // 128 - 8, Q5_0 adds 128 - 16; the activation's c removes 128 * Σx
    const int add = type == Q_Q8_0 ? 128 : type == Q_Q4_0 ? 120 : type == Q_Q5_0 ? 112 : 0;
    for (int v = 0; add && v < 8; v++) r->q[v] = _mm512_add_epi8(r->q[v], _mm512_set1_epi8((char)add));
}

// One unit of one token: acc += d_w * d_x * Σ q*x per lane (+ c for the
// +128 offset), and for Q8_1-style units acc += m * s.
ALWAYS_INLINE void unit_token(uint32_t type, const unit_regs *r, const uint8_t *a, __m512 *acc) {
    const int has_c = type == Q_Q8_0 || type == Q_Q4_0 || type == Q_Q5_0;
    __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
    for (int v = 0; v < 8; v += 2) {
        i0 = _mm512_dpbusd_epi32(i0, r->q[v], load512(a + 64 * v));
        i1 = _mm512_dpbusd_epi32(i1, r->q[v + 1], load512(a + 64 * v + 64));
    }
    i0 = _mm512_add_epi32(i0, i1);
    if (has_c) i0 = _mm512_add_epi32(i0, load512(a + UNIT_W));  // (added last: see q6k_token)
    const __m512 dd = _mm512_mul_ps(r->d, _mm512_loadu_ps(a + UNIT_D));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), dd, *acc);
    if (!has_c) *acc = _mm512_fmadd_ps(r->m, _mm512_loadu_ps(a + UNIT_W), *acc);
}

ALWAYS_INLINE void unit_tile_n(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                               const uint8_t *x, size_t xs, float *out, const int NT) {
    const size_t bs = QTYPES[type].block_bytes;
    const int64_t per = 16;  // blocks per unit
    const int64_t nb = n / QTYPES[type].block;
    __m512 acc[TILE_T];
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        const uint8_t *blocks = w + (size_t)(u * per) * bs;
        uint8_t pad[16 * sizeof(block_q8_0)];  // a last, partial unit, padded with zero blocks
        if (nb - per * u < per) {
            memset(pad, 0, sizeof pad);
            memcpy(pad, blocks, (size_t)(nb - per * u) * bs);
            blocks = pad;
        }
        unit_regs r;
        unit_unpack(type, blocks, &r);
        const uint8_t *a = x + (size_t)u * UNIT_BYTES;
#pragma GCC unroll 16
        for (int t = 0; t < NT; t++) unit_token(type, &r, a + (size_t)t * xs, &acc[t]);
    }
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}


// --- Q6_K (unit = one super-block, lane = group of 16) ---------------------

typedef struct {
    __m512i q[4];  // q[v] lane g: the 6-bit weights 16g+4v..16g+4v+3 (0..63)
    __m512 a;      // lane g: d * scale of group g
} q6k_regs;

// Lane g = group g of half g/8, quarter k = (g%8)/2: its low 4 bits are
// nibble k/2 of ql dword 16(g/8) + 8(k%2) + 4(g%2) + v, its top 2 bits are
// bits 2k, 2k+1 of qh dword 8(g/8) + 4(g%2) + v (rotated to bits 4, 5).
ALWAYS_INLINE void q6k_unpack(const block_q6_K *b, q6k_regs *r) {
    const __m512i l0 = load512(b->ql), l1 = load512(b->ql + 64), qh = load512(b->qh);
    const __m512i lidx = _mm512_setr_epi32(0, 4, 8, 12, 0, 4, 8, 12, 16, 20, 24, 28, 16, 20, 24, 28);
    const __m512i lsh = _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4);
    const __m512i hidx = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 8, 12, 8, 12, 8, 12, 8, 12);
    const __m512i rot = _mm512_setr_epi32(4, 4, 2, 2, 0, 0, 30, 30, 4, 4, 2, 2, 0, 0, 30, 30);
    for (int v = 0; v < 4; v++) {
        const __m512i vv = _mm512_set1_epi32(v);
        const __m512i lo = _mm512_srlv_epi32(_mm512_permutex2var_epi32(l0, _mm512_add_epi32(lidx, vv), l1), lsh);
        const __m512i hv = _mm512_permutexvar_epi32(_mm512_add_epi32(hidx, vv), qh);
        const __m512i hb = _mm512_and_si512(_mm512_rolv_epi32(hv, rot), _mm512_set1_epi8(0x30));
        r->q[v] = _mm512_ternarylogic_epi32(lo, hb, _mm512_set1_epi8(15), 0xEC);  // (lo & 15) | hb
    }
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)b->scales)));
    r->a = _mm512_mul_ps(sc, _mm512_set1_ps(fp16_to_f32(b->d)));
}

// One super-block of one token (q: its activation record: 256 q, 16
// corrections c = -32 Σx, d_x): acc += d_x * Σ_g a_g * (c_g + Σ q*x).
ALWAYS_INLINE void q6k_token(const q6k_regs *r, const uint8_t *q, __m512 *acc) {
    // (c is added last: GCC 12 bounces a loaded accumulator through the stack)
    __m512i i0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), r->q[0], load512(q));
    __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), r->q[1], load512(q + 64));
    i0 = _mm512_dpbusd_epi32(i0, r->q[2], load512(q + 128));
    i1 = _mm512_dpbusd_epi32(i1, r->q[3], load512(q + 192));
    const __m512i i = _mm512_add_epi32(_mm512_add_epi32(i0, i1), load512(q + K16_C));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i), _mm512_mul_ps(r->a, _mm512_set1_ps(load_f32(q + K16_D))), *acc);
}

ALWAYS_INLINE void q6k_tile_n(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                              const uint8_t *x, size_t xs, float *out, const int NT) {
    (void)type, (void)n;
    __m512 acc[TILE_T];
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        q6k_regs r;
        q6k_unpack((const block_q6_K *)w + u, &r);
        const uint8_t *q = x + (size_t)u * K16_BYTES;
#pragma GCC unroll 16
        for (int t = 0; t < NT; t++) q6k_token(&r, q + t * xs, &acc[t]);
    }
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}


// --- Q4_K: lanes = 16 weight rows (llama.cpp's repacked float order) --------
//
// llama.cpp runs Q4_K through its repacked q4_K_8x8 kernels, whose float
// accumulators advance once per super-block (gemv) or per 64 elements
// (gemm) in a fixed serial order, so here each lane is one weight row and
// runs that same chain; integer sums are exact in any order. Activations
// are broadcast: dword v of sub-block s of super-block k is at record k,
// byte k4_sub_off(s) + 4v (layout at K4_BYTES).

#define Q4K_TILE_T 8  // tokens per pass over a group of 16 rows (at most)

// Bytes ahead of the current block that q4k_rows_n and q4k_decode8 prefetch
// in each row: 8 or 16 streams at DRAM latency need more requests in flight
// than the hardware prefetcher issues (a 2-thread matvec went from ~50 to
// ~62 GB/s; q4k_rows_n on weights from DRAM got about 25% faster).
#define Q4K_PREFETCH (2 * sizeof(block_q4_K))

// z[v] lane r = dword v of the 16 bytes at rows[r] + off (v < 4).
ALWAYS_INLINE void rows_load16(const uint8_t *const rows[16], size_t off, __m512i z[4]) {
    for (int k = 0; k < 4; k++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(rows[k] + off)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[4 + k] + off)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[8 + k] + off)), 2);
        z[k] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[12 + k] + off)), 3);
    }
    swap_stage(&z[0], &z[1], 0);
    swap_stage(&z[2], &z[3], 0);
    swap_stage(&z[0], &z[2], 1);
    swap_stage(&z[1], &z[3], 1);
}

// q[v] lane r = dword v of the 32 bytes at rows[r] + off (v < 8).
ALWAYS_INLINE void rows_load32(const uint8_t *const rows[16], size_t off, __m512i q[8]) {
    for (int k = 0; k < 8; k++)
        q[k] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(rows[k] + off))),
                                  _mm256_loadu_si256((const __m256i *)(rows[k + 8] + off)), 1);
    transpose8(q);
}

// Per-row scales of super-block k, lanes = rows: sc[s] (int), mnp[p] = the
// int16 pair (mn[2p], mn[2p+1]), d and dmin as float.
ALWAYS_INLINE void q4k_rows_scales(const uint8_t *const rows[16], size_t off, __m512i sc[8], __m512i mnp[4],
                                   __m512 *d, __m512 *dmin) {
    __m512i h[4];  // dwords: d | dmin << 16, then the 12 scale bytes
    rows_load16(rows, off, h);
    *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h[0]));
    *dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h[0], 16)));
    const __m512i m6 = _mm512_set1_epi8(0x3f), m4 = _mm512_set1_epi8(15), hi2 = _mm512_set1_epi8(0x30);
    const __m512i w[4] = {   // as k4_scale_words
        _mm512_and_si512(h[1], m6),
        _mm512_or_si512(_mm512_and_si512(h[3], m4), _mm512_and_si512(_mm512_srli_epi32(h[1], 2), hi2)),
        _mm512_and_si512(h[2], m6),
        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(h[3], 4), m4), _mm512_and_si512(_mm512_srli_epi32(h[2], 2), hi2)),
    };
    const __m512i lo8 = _mm512_set1_epi32(0xff), byte2 = _mm512_set1_epi32(0xff0000);
    for (int s = 0; s < 8; s++) sc[s] = _mm512_and_si512(_mm512_srli_epi32(w[s / 4], 8 * (s % 4)), lo8);
    for (int p = 0; p < 4; p++) {  // bytes (b0, b1) of the word -> b0 | b1 << 16
        const __m512i x = _mm512_srli_epi32(w[2 + p / 2], 16 * (p % 2));
        mnp[p] = _mm512_or_si512(_mm512_and_si512(x, lo8), _mm512_and_si512(_mm512_slli_epi32(x, 8), byte2));
    }
}

ALWAYS_INLINE __m512i bcast32(const uint8_t *p) { return _mm512_set1_epi32((int)load_u32(p)); }

// y[t * ldy + r] for rows r < nvalid of the group and NT tokens.
ALWAYS_INLINE void q4k_rows_n(const uint8_t *const rows[16], int nvalid, int64_t n, const uint8_t *x, size_t xs,
                              int gemm, float *y, size_t ldy, const int NT) {
    __m512 s1[Q4K_TILE_T], s2[Q4K_TILE_T];
    __m512i I[Q4K_TILE_T], M[Q4K_TILE_T];
    for (int t = 0; t < NT; t++) s1[t] = s2[t] = _mm512_setzero_ps(), I[t] = M[t] = _mm512_setzero_si512();
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int64_t k = 0; k < n / 256; k++) {
        const size_t off = (size_t)k * sizeof(block_q4_K);
        __m512i sc[8], mnp[4];
        __m512 dw, dmw;
        q4k_rows_scales(rows, off, sc, mnp, &dw, &dmw);
        for (int r = 0; r < 16; r++)  // the 3 cache lines a block ahead may touch
            for (int l = 0; l < 3; l++) _mm_prefetch((const char *)rows[r] + off + Q4K_PREFETCH + 64 * l, _MM_HINT_T0);
        const uint8_t *u = x + (size_t)k * K4_BYTES;  // this super-block's activation record
        for (int c = 0; c < 4; c++) {
            __m512i raw[8], nib[8];
            rows_load32(rows, off + offsetof(block_q4_K, qs) + 32 * (size_t)c, raw);
            for (int h = 0; h < 2; h++) {
                const size_t sub = k4_sub_off(2 * c + h);
                for (int v = 0; v < 8; v++) nib[v] = _mm512_and_si512(h ? _mm512_srli_epi16(raw[v], 4) : raw[v], m4);
                for (int t = 0; t < NT; t++) {
                    const uint8_t *a = u + (size_t)t * xs + sub;  // dword v: elements 4v..4v+3
                    __m512i i0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nib[0], bcast32(a));
                    __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nib[1], bcast32(a + 4));
                    for (int v = 2; v < 8; v += 2) {
                        i0 = _mm512_dpbusd_epi32(i0, nib[v], bcast32(a + 4 * v));
                        i1 = _mm512_dpbusd_epi32(i1, nib[v + 1], bcast32(a + 4 * v + 4));
                    }
                    // |i0|, |i1| <= 16 * 15 * 127 fit int16, so VPDPWSSD against
                    // sc (high half 0) multiplies them exactly
                    I[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(I[t], i0, sc[2 * c + h]), i1, sc[2 * c + h]);
                }
            }
            for (int t = 0; t < NT; t++)
                M[t] = _mm512_dpwssd_epi32(M[t], mnp[c], bcast32(u + (size_t)t * xs + K4_PAIRS + 4 * c));
            if (gemm || c == 3) {
                for (int t = 0; t < NT; t++) {
                    const __m512 dx = _mm512_set1_ps(load_f32(u + (size_t)t * xs + K4_W));
                    s1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I[t]), _mm512_mul_ps(dw, dx), s1[t]);
                    s2[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M[t]), _mm512_mul_ps(dmw, dx), s2[t]);
                    I[t] = M[t] = _mm512_setzero_si512();
                }
            }
        }
    }
    const __mmask16 keep = (__mmask16)((1u << nvalid) - 1);
    for (int t = 0; t < NT; t++) _mm512_mask_storeu_ps(y + (size_t)t * ldy, keep, _mm512_sub_ps(s1[t], s2[t]));
}

// --- Q4_K decode: one token, 8 rows streamed side by side ------------------
//
// One token (decode, and llama.cpp's gemv leftovers of a batch) runs the
// same per-row float chain as q4k_rows_n with NT = 1: per super-block, exact
// integers I and M, then s1 = fma(I, fp16(d) * d_x, s1) and s2 = fma(M,
// fp16(dmin) * d_x, s2). Only the integer work is arranged differently: each
// row's qs load straight from memory (64 bytes a vector, no transposition),
// paired with the activation record's vectors (see K4_BYTES), and the
// 8 rows' integer vectors are summed by one transposing reduction.

// Per 4 rows (128-bit lane r = row r's 16 header bytes: d | dmin << 16, the
// 12 scale bytes), the unpacked 6-bit values: lane r bytes 0..7 = sc[0..7],
// bytes 8..15 = mn[0..7] (k4_scale_words, lane by lane).
ALWAYS_INLINE __m512i q4k_scales4(__m512i z) {
    const __m512i p = _mm512_srlv_epi32(_mm512_shuffle_epi32(z, _MM_SHUFFLE(3, 2, 3, 1)),   // s0 s2 s1 s2>>4
                                        _mm512_set4_epi32(4, 0, 0, 0));
    const __m512i q = _mm512_srlv_epi32(_mm512_shuffle_epi32(z, _MM_SHUFFLE(2, 2, 1, 1)),   // s0 s0>>2 s1 s1>>2
                                        _mm512_set4_epi32(2, 0, 2, 0));
    const __m512i lo = _mm512_and_si512(p, _mm512_set4_epi32(0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f));
    return _mm512_ternarylogic_epi32(lo, q, _mm512_set4_epi32(0x30303030, 0, 0x30303030, 0), 0xF8);  // lo | (q & m)
}

// 128-bit lane i of v in all four lanes (the switch keeps the shuffle's
// immediate a constant also where the caller's loop is not unrolled).
ALWAYS_INLINE __m512i lane128_bcast(__m512i v, int i) {
    switch (i) {
    case 0: return _mm512_shuffle_i32x4(v, v, 0x00);
    case 1: return _mm512_shuffle_i32x4(v, v, 0x55);
    case 2: return _mm512_shuffle_i32x4(v, v, 0xaa);
    default: return _mm512_shuffle_i32x4(v, v, 0xff);
    }
}

// The header vector of 4 rows (128-bit lane r = rows[r]'s first 16 bytes at off).
ALWAYS_INLINE __m512i q4k_headers4(const uint8_t *const rows[4], size_t off) {
    __m512i z = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(rows[0] + off)));
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(rows[1] + off)), 1);
    z = _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(rows[2] + off)), 2);
    return _mm512_inserti32x4(z, _mm_loadu_si128((const __m128i *)(rows[3] + off)), 3);
}

#define B2(s) s, -128  // a pshufb word: byte s of the lane, then a zero byte
#define B8(a, b) B2(a), B2(a), B2(a), B2(a), B2(b), B2(b), B2(b), B2(b)
#define Z16 -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128, -128
// pshufb controls on a row's 16 scale bytes (q4k_scales4's lane, in all four
// lanes): the int16 scales of packs(P0, P1) and packs(P2, P3) (q4k_decode8),
// and the (mn[2p], mn[2p + 1]) pairs in dwords 8..11, facing K4_PAIRS.
static const int8_t Q4K_SC01[64] = {B8(0, 1), B8(0, 1), B8(2, 3), B8(2, 3)};
static const int8_t Q4K_SC23[64] = {B8(4, 5), B8(4, 5), B8(6, 7), B8(6, 7)};
static const int8_t Q4K_MN[64] = {Z16, Z16, B2(8), B2(9), B2(10), B2(11), B2(12), B2(13), B2(14), B2(15), Z16};
#undef B2
#undef B8
#undef Z16

// One row's integers of one super-block: lanes 0..7 of the result sum to I,
// lanes 8..15 to M. q: the row's qs; sc: the row's scale bytes in every
// 128-bit lane; X: the activation record's 4 q vectors; pairs: its words.
ALWAYS_INLINE __m512i q4k_decode_row(const uint8_t *q, __m512i sc, const __m512i X[4], __m512i pairs) {
    const __m512i m4 = _mm512_set1_epi8(15), zero = _mm512_setzero_si512();
    const __m512i w0 = load512(q), w1 = load512(q + 64);
    // P0..P3 dword lanes 0..7 / 8..15: Σ q*x over 4 elements of sub-blocks
    // (0 | 2), (1 | 3), (4 | 6), (5 | 7); |P| <= 4 * 15 * 128 packs into int16
    const __m512i P0 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(w0, m4), X[0]);
    const __m512i P1 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(_mm512_srli_epi16(w0, 4), m4), X[1]);
    const __m512i P2 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(w1, m4), X[2]);
    const __m512i P3 = _mm512_dpbusd_epi32(zero, _mm512_and_si512(_mm512_srli_epi16(w1, 4), m4), X[3]);
    __m512i I = _mm512_dpwssd_epi32(zero, _mm512_packs_epi32(P0, P1), _mm512_shuffle_epi8(sc, load512(Q4K_SC01)));
    I = _mm512_dpwssd_epi32(I, _mm512_packs_epi32(P2, P3), _mm512_shuffle_epi8(sc, load512(Q4K_SC23)));
    // fold I's 16 lanes into 8, then M's 4 products into lanes 8..11
    const __m512i F = _mm512_maskz_add_epi32(0x00ff, I, _mm512_shuffle_i64x2(I, I, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm512_dpwssd_epi32(F, _mm512_shuffle_epi8(sc, load512(Q4K_MN)), pairs);
}

// Sums of 8 vectors' 128-bit lanes: V[r] lanes 0,1 (I) and 2,3 (M) of row r
// end up in lane r % 4 of 128-bit lane 2 * (r / 4) (I) and 2 * (r / 4) + 1 (M).
ALWAYS_INLINE __m512i q4k_reduce8(const __m512i V[8]) {
    __m512i S[4], Q[2];
    for (int i = 0; i < 4; i++)  // [a0+a2, b0+b2, a1+a3, b1+b3] per 128-bit lane
        S[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(V[2 * i], V[2 * i + 1]),
                                _mm512_unpackhi_epi32(V[2 * i], V[2 * i + 1]));
    for (int i = 0; i < 2; i++)  // lane r of each 128-bit lane: row 4i + r's sum over it
        Q[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(S[2 * i], S[2 * i + 1]),
                                _mm512_unpackhi_epi64(S[2 * i], S[2 * i + 1]));
    return _mm512_add_epi32(_mm512_shuffle_i32x4(Q[0], Q[1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(Q[0], Q[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

// y[r] for rows r < nvalid of 8 (rows[] holds 8 pointers) and one token x.
static void q4k_decode8(const uint8_t *const rows[8], int nvalid, int64_t n, const uint8_t *x, float *y) {
    // halves of the two header vectors: d of rows 0-3, dmin of rows 0-3, d of 4-7, dmin of 4-7
    const __m512i dsel = _mm512_setr_epi32(0 | 8 << 16, 16 | 24 << 16, 1 | 9 << 16, 17 | 25 << 16,
                                           32 | 40 << 16, 48 | 56 << 16, 33 | 41 << 16, 49 | 57 << 16,
                                           0, 0, 0, 0, 0, 0, 0, 0);
    __m512 acc = _mm512_setzero_ps();  // lanes as q4k_reduce8: s1 and s2 of each row
    for (int64_t k = 0; k < n / 256; k++) {
        const size_t off = (size_t)k * sizeof(block_q4_K);
        const uint8_t *rec = x + (size_t)k * K4_BYTES;
        const __m512i X[4] = {load512(rec), load512(rec + 64), load512(rec + 128), load512(rec + 192)};
        const __m512i pairs = load512(rec + K4_W);
        const __m512i ha = q4k_headers4(rows, off), hb = q4k_headers4(rows + 4, off);
        const __m512i sa = q4k_scales4(ha), sb = q4k_scales4(hb);
        __m512i V[8];
        for (int r = 0; r < 8; r++)  // the 3 cache lines a block ahead may touch (past the end: harmless)
            for (int l = 0; l < 3; l++) _mm_prefetch((const char *)rows[r] + off + Q4K_PREFETCH + 64 * l, _MM_HINT_T0);
        for (int r = 0; r < 8; r++) {
            const __m512i s4 = r < 4 ? sa : sb;
            const __m512i sc = lane128_bcast(s4, r % 4);  // row r's scale bytes, 4 times
            V[r] = q4k_decode_row(rows[r] + off + offsetof(block_q4_K, qs), sc, X, pairs);
        }
        const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(ha, dsel, hb)));
        const __m512 D = _mm512_mul_ps(dw, _mm512_set1_ps(load_f32(rec + K4_W)));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q4k_reduce8(V)), D, acc);
    }
    const __m512 res = _mm512_sub_ps(acc, _mm512_shuffle_f32x4(acc, acc, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512 out = _mm512_maskz_compress_ps(0x0f0f, res);  // lanes 0-3, 8-11: s1 - s2 of rows 0-7
    _mm512_mask_storeu_ps(y, (__mmask16)((1u << nvalid) - 1), out);
}

// Tokens [0, ngemm) run llama.cpp's gemm (ngemm a multiple of 4), the rest
// its gemv: each of those exactly as one token alone, whether q4k_decode8
// computes it or q4k_rows_n (same float chain, cheaper for several tokens).
static void matmul_q4_K(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt,
                        int ngemm, float *y, size_t ldy) {
    for (int r0 = 0; r0 < nr; r0 += 16) {
        const int nv = nr - r0 < 16 ? nr - r0 : 16;
        const uint8_t *rows[16];
        for (int r = 0; r < 16; r++) rows[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws;
        for (int t = 0; t < nt;) {
            float *yt = y + (size_t)t * ldy + r0;
            const uint8_t *xt = x + (size_t)t * xs;
            const int gemm = t < ngemm, left = (gemm ? ngemm : nt) - t;
            if (left >= 8) {
                q4k_rows_n(rows, nv, n, xt, xs, gemm, yt, ldy, 8);
                t += 8;
            } else if (left >= 4) {
                q4k_rows_n(rows, nv, n, xt, xs, gemm, yt, ldy, 4);
                t += 4;
            } else if (left >= 2) {
                q4k_rows_n(rows, nv, n, xt, xs, 0, yt, ldy, 2);
                t += 2;
            } else {  // one token: the decode kernel, 8 rows at a time
                for (int r = 0; r < nv; r += 8)
                    q4k_decode8(rows + r, nv - r < 8 ? nv - r : 8, n, xt, yt + r);
                t += 1;
            }
        }
    }
}

// --- Q5_K: lanes = 16 weight rows (llama.cpp's vec_dot float order) ------
//
// llama.cpp's x86 Q5_K kernel (ggml_vec_dot_q5_K_q8_K, AVX2 code: there is
// no AVX-512 one) keeps 8 float lanes per row, lane j gathering elements
// 32s + 4j .. 32s + 4j + 3 of every sub-block s, and one fma per lane and
// super-block; the mins go to a scalar chain. Here, as for Q4_K, a vector
// lane is a weight row, and each of ggml's 8 lanes is its own vector:
// acc[j] lane r follows row r's lane j (dot_q5_K states the math).

#define Q5K_TILE_T 16  // tokens per pass over a group of 16 rows (at most)

// The 5-bit weights of one super-block of 16 rows at byte off: W[s][j]
// lane r = weights 4j..4j+3 of sub-block s of row r. Bit s of qh byte e is
// the 5th bit of element e of sub-block s; a shift by 4 - s moves it to bit 4.
ALWAYS_INLINE void q5k_rows_weights(const uint8_t *const rows[16], size_t off, __m512i W[8][8]) {
    __m512i qh[8], raw[8];
    rows_load32(rows, off + offsetof(block_q5_K, qh), qh);
    const __m512i m4 = _mm512_set1_epi8(15), bit4 = _mm512_set1_epi8(0x10);
    for (int c = 0; c < 4; c++) {
        rows_load32(rows, off + offsetof(block_q5_K, qs) + 32 * (size_t)c, raw);
        for (int h = 0; h < 2; h++) {
            const int s = 2 * c + h;
            for (int j = 0; j < 8; j++) {
                const __m512i lo = _mm512_and_si512(h ? _mm512_srli_epi16(raw[j], 4) : raw[j], m4);
                const __m512i hb = s < 4 ? _mm512_slli_epi32(qh[j], 4 - s) : _mm512_srli_epi32(qh[j], s - 4);
                W[s][j] = _mm512_ternarylogic_epi32(lo, hb, bit4, 0xF8);  // lo | (hb & bit4)
            }
        }
    }
}

// y[t * ldy + r] for rows r < nvalid of the group and NT tokens.
ALWAYS_INLINE void q5k_rows_n(const uint8_t *const rows[16], int nvalid, int64_t n, const uint8_t *x, size_t xs,
                              float *y, size_t ldy, const int NT) {
    __m512 acc[Q5K_TILE_T][8], S[Q5K_TILE_T];
    for (int t = 0; t < NT; t++) {
        S[t] = _mm512_setzero_ps();
        for (int j = 0; j < 8; j++) acc[t][j] = _mm512_setzero_ps();
    }
    const __m512i zero = _mm512_setzero_si512();
    for (int64_t k = 0; k < n / 256; k++) {
        const size_t off = (size_t)k * sizeof(block_q5_K);
        __m512i sc[8], mnp[4], W[8][8];
        __m512 dw, dmw;
        q4k_rows_scales(rows, off, sc, mnp, &dw, &dmw);  // d, dmin, scales: as in Q4_K
        q5k_rows_weights(rows, off, W);
        const uint8_t *u = x + (size_t)(k / 2) * UNIT_BYTES;  // this super-block's unit
        const int L0 = (int)(8 * k % 16);                      // its first lane
        for (int t = 0; t < NT; t++) {
            const uint8_t *a = u + (size_t)t * xs;
            const __m512 dx = _mm512_set1_ps(load_f32(a + UNIT_D + 4 * L0));
            const __m512 D = _mm512_mul_ps(dw, dx);
            for (int j = 0; j < 8; j++) {
                // Σ q*x over 4 elements is at most 4 * 31 * 127 in magnitude: it
                // fits int16, so VPDPWSSD against sc (high half 0) scales it exactly
                __m512i i0 = zero, i1 = zero;
                for (int s = 0; s < 8; s += 2) {
                    const uint8_t *p = a + 64 * j + 4 * (L0 + s);
                    i0 = _mm512_dpwssd_epi32(i0, _mm512_dpbusd_epi32(zero, W[s][j], bcast32(p)), sc[s]);
                    i1 = _mm512_dpwssd_epi32(i1, _mm512_dpbusd_epi32(zero, W[s + 1][j], bcast32(p + 4)), sc[s + 1]);
                }
                acc[t][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)), D, acc[t][j]);
            }
            __m512i M = zero;
            for (int p = 0; p < 4; p++) M = _mm512_dpwssd_epi32(M, mnp[p], bcast32(a + UNIT_W + 4 * (L0 + 2 * p)));
            S[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dmw, dx), S[t]);
        }
    }
    const __mmask16 keep = (__mmask16)((1u << nvalid) - 1);
    for (int t = 0; t < NT; t++) {
        const __m512 *v = acc[t];  // hsum_float_8's pairing: ((0+4) + (2+6)) + ((1+5) + (3+7))
        const __m512 h = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(v[0], v[4]), _mm512_add_ps(v[2], v[6])),
                                       _mm512_add_ps(_mm512_add_ps(v[1], v[5]), _mm512_add_ps(v[3], v[7])));
        _mm512_mask_storeu_ps(y + (size_t)t * ldy, keep, _mm512_sub_ps(h, S[t]));
    }
}

static void matmul_q5_K(int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x, size_t xs, int nt,
                        float *y, size_t ldy) {
    for (int r0 = 0; r0 < nr; r0 += 16) {
        const int nv = nr - r0 < 16 ? nr - r0 : 16;
        const uint8_t *rows[16];
        for (int r = 0; r < 16; r++) rows[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws;
        int tn;
        for (int t = 0; t < nt; t += tn) {
            for (tn = Q5K_TILE_T; tn > nt - t;) tn /= 2;
            float *yt = y + (size_t)t * ldy + r0;
            const uint8_t *xt = x + (size_t)t * xs;
            switch (tn) {
            case 16: q5k_rows_n(rows, nv, n, xt, xs, yt, ldy, 16); break;
            case 8: q5k_rows_n(rows, nv, n, xt, xs, yt, ldy, 8); break;
            case 4: q5k_rows_n(rows, nv, n, xt, xs, yt, ldy, 4); break;
            case 2: q5k_rows_n(rows, nv, n, xt, xs, yt, ldy, 2); break;
            default: q5k_rows_n(rows, nv, n, xt, xs, yt, ldy, 1); break;
            }
        }
    }
}

// --- float types (unit = 16 elements; 32 for BF16) -------------------------

ALWAYS_INLINE void f_tile_n(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                            const uint8_t *x, size_t xs, float *out, const int NT) {
    __m512 acc[TILE_T];
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        const int64_t i = 16 * u;
        const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
        const __m512 wv = type == Q_F32 ? _mm512_maskz_loadu_ps(k, w + 4 * i)
                                        : _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, w + 2 * i));
#pragma GCC unroll 16
        for (int t = 0; t < NT; t++)
            acc[t] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(k, x + (size_t)t * xs + 4 * i), acc[t]);
    }
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}

// bf16 pairs: VDPBF16PS where available, else widened to f32 and added in its
// order, the odd element's product first (the products are exact; VDPBF16PS
// also flushes subnormals, the one difference).
ALWAYS_INLINE __m512 bf16_fma(__m512 acc, __m512i xv, __m512i wv) {
#if defined(__AVX512BF16__)
    return _mm512_dpbf16_ps(acc, (__m512bh)xv, (__m512bh)wv);
#else
    const __m512i hi = _mm512_set1_epi32((int)0xffff0000);
    acc = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(xv, hi)),
                          _mm512_castsi512_ps(_mm512_and_si512(wv, hi)), acc);
    return _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(xv, 16)),
                           _mm512_castsi512_ps(_mm512_slli_epi32(wv, 16)), acc);
#endif
}

ALWAYS_INLINE void bf16_tile_n(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                               const uint8_t *x, size_t xs, float *out, const int NT) {
    (void)type;
    __m512 acc[TILE_T];
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        const int64_t i = 32 * u;
        const __mmask32 k = n - i >= 32 ? (__mmask32)0xffffffffu : (__mmask32)((1u << (n - i)) - 1);
        const __m512i wv = _mm512_maskz_loadu_epi16(k, w + 2 * i);
#pragma GCC unroll 16
        for (int t = 0; t < NT; t++)
            acc[t] = bf16_fma(acc[t], _mm512_maskz_loadu_epi16(k, x + (size_t)t * xs + 2 * i), wv);
    }
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) out[t] = _mm512_reduce_add_ps(acc[t]);
}


#define BLOCK32_KERNEL unit_tile_n
#define Q6K_KERNEL q6k_tile_n
#define FLOAT_KERNEL f_tile_n
#define BF16_KERNEL bf16_tile_n
#endif  // Q_AVX512

// ---------------------------------------------------------------------------
// AVX2 unit kernels (machines without AVX-512): the float operations of the
// unit kernels above on 2 × 8 lanes (lo: lanes 0-7, hi: lanes 8-15). Integer
// dot products use VPMADDUBSW/VPMADDWD, whose pair sums stay within int16 for
// every weight range here.
// ---------------------------------------------------------------------------
#if defined(Q_AVX2)

// reduce16 of the lanes lo (0-7) and hi (8-15).
ALWAYS_INLINE float reduce16_avx2(__m256 lo, __m256 hi) {
    const __m256 h = _mm256_add_ps(hi, lo);
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// Dwords of rows: lane l of t[k] = dword k of the 16 bytes at p[l] (p[0..3]
// in the low 128 bits, p[4..7] in the high), k < 4.
ALWAYS_INLINE void transpose8x4(const uint8_t *const p[8], __m256i t[4]) {
    __m256i r[4];
    for (int i = 0; i < 4; i++)
        r[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p[i])),
                                       _mm_loadu_si128((const __m128i *)p[i + 4]), 1);
    const __m256i a = _mm256_unpacklo_epi32(r[0], r[1]), b = _mm256_unpackhi_epi32(r[0], r[1]);
    const __m256i c = _mm256_unpacklo_epi32(r[2], r[3]), d = _mm256_unpackhi_epi32(r[2], r[3]);
    t[0] = _mm256_unpacklo_epi64(a, c);
    t[1] = _mm256_unpackhi_epi64(a, c);
    t[2] = _mm256_unpacklo_epi64(b, d);
    t[3] = _mm256_unpackhi_epi64(b, d);
}

// Σ over 4 bytes per dword of u * s (u unsigned, s signed; |pair sums| < 2^15).
ALWAYS_INLINE __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// Half h (8 blocks) of a 32-element unit: q[v] lane l = weights 4v..4v+3 of
// block l, signed for Q8_0 and as q (unsigned) otherwise; d (and m) as floats.
typedef struct {
    __m256i q[8];
    __m256 d, m;
} half_regs;

ALWAYS_INLINE void half_unpack(uint32_t type, const uint8_t *blocks, half_regs *r) {
    const size_t bs = QTYPES[type].block_bytes;
    const uint8_t *p[8];
    uint16_t d[8], m[8];
    for (int l = 0; l < 8; l++) {
        const uint8_t *b = blocks + l * bs;
        d[l] = (uint16_t)load_u32(b);
        m[l] = (uint16_t)(load_u32(b) >> 16);
        p[l] = b + (type == Q_Q4_1 ? 4 : type == Q_Q5_0 ? 6 : type == Q_Q5_1 ? 8 : 2);  // the qs
    }
    r->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
    r->m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)m));
    if (type == Q_Q8_0) {
        const uint8_t *p2[8];
        for (int l = 0; l < 8; l++) p2[l] = p[l] + 16;
        transpose8x4(p, r->q);
        transpose8x4(p2, r->q + 4);
        return;
    }
    __m256i z[4];
    transpose8x4(p, z);
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int v = 0; v < 4; v++) {
        r->q[v] = _mm256_and_si256(z[v], m4);
        r->q[v + 4] = _mm256_and_si256(_mm256_srli_epi16(z[v], 4), m4);
    }
    if (type == Q_Q5_0 || type == Q_Q5_1) {  // bit e of qh: the 5th bit of weight e
        uint32_t qh[8];
        for (int l = 0; l < 8; l++) qh[l] = load_u32(blocks + l * bs + 2 + 2 * (type == Q_Q5_1));
        const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
        for (int v = 0; v < 8; v++) {  // 4 bits to bit 0 of 4 bytes (disjoint shifts: no carries), then bit 4
            const __m256i b4 = _mm256_and_si256(_mm256_srli_epi32(h, 4 * v), _mm256_set1_epi32(15));
            const __m256i spread = _mm256_and_si256(_mm256_mullo_epi32(b4, _mm256_set1_epi32(0x00204081)),
                                                    _mm256_set1_epi32(0x01010101));
            r->q[v] = _mm256_or_si256(r->q[v], _mm256_slli_epi32(spread, 4));
        }
    }
}

// One half of one unit of one token (a: the unit's activations).
ALWAYS_INLINE __m256 half_token(uint32_t type, const half_regs *r, const uint8_t *a, int h, __m256 acc) {
    __m256i i0 = _mm256_setzero_si256(), i1 = _mm256_setzero_si256();
    for (int v = 0; v < 8; v += 2) {
        const __m256i x0 = _mm256_loadu_si256((const __m256i *)(a + 64 * v + 32 * h));
        const __m256i x1 = _mm256_loadu_si256((const __m256i *)(a + 64 * v + 64 + 32 * h));
        if (type == Q_Q8_0) {
            i0 = _mm256_add_epi32(i0, dot_u8s8(_mm256_sign_epi8(r->q[v], r->q[v]), _mm256_sign_epi8(x0, r->q[v])));
            i1 = _mm256_add_epi32(i1, dot_u8s8(_mm256_sign_epi8(r->q[v + 1], r->q[v + 1]),
                                               _mm256_sign_epi8(x1, r->q[v + 1])));
        } else {
            i0 = _mm256_add_epi32(i0, dot_u8s8(r->q[v], x0));
            i1 = _mm256_add_epi32(i1, dot_u8s8(r->q[v + 1], x1));
        }
    }
    __m256i i = _mm256_add_epi32(i0, i1);
    const __m256i w = _mm256_loadu_si256((const __m256i *)(a + UNIT_W + 32 * h));
    // Q4_0/Q5_0 take q - 8 / q - 16: the word is c = -128 Σx, so subtract 8 Σx = -c / 16 (16 Σx = -c / 8)
    if (type == Q_Q4_0) i = _mm256_add_epi32(i, _mm256_srai_epi32(w, 4));
    if (type == Q_Q5_0) i = _mm256_add_epi32(i, _mm256_srai_epi32(w, 3));
    const __m256 dd = _mm256_mul_ps(r->d, _mm256_loadu_ps((const float *)(a + UNIT_D + 32 * h)));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), dd, acc);
    if (type == Q_Q4_1 || type == Q_Q5_1) acc = _mm256_fmadd_ps(r->m, _mm256_castsi256_ps(w), acc);
    return acc;
}

ALWAYS_INLINE void unit_tile_avx2(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                                  const uint8_t *x, size_t xs, float *out, const int NT) {
    const size_t bs = QTYPES[type].block_bytes;
    const int64_t nb = n / 32;
    __m256 acc[TILE_T][2];
    for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        const uint8_t *blocks = w + (size_t)(16 * u) * bs;
        uint8_t pad[16 * sizeof(block_q8_0)];  // a last, partial unit, padded with zero blocks
        if (nb - 16 * u < 16) {
            memset(pad, 0, sizeof pad);
            memcpy(pad, blocks, (size_t)(nb - 16 * u) * bs);
            blocks = pad;
        }
        const uint8_t *a = x + (size_t)u * UNIT_BYTES;
        for (int h = 0; h < 2; h++) {
            half_regs r;
            half_unpack(type, blocks + 8 * h * bs, &r);
            for (int t = 0; t < NT; t++) acc[t][h] = half_token(type, &r, a + (size_t)t * xs, h, acc[t][h]);
        }
    }
    for (int t = 0; t < NT; t++) out[t] = reduce16_avx2(acc[t][0], acc[t][1]);
}


// Q6_K: q[h][v] lane g = weights 16(8h + g) + 4v .. + 3 (0..63), a[h] lane g
// = sc * fp16(d) of group 8h + g.
ALWAYS_INLINE void q6k_unpack_avx2(const block_q6_K *b, __m256i q[2][4], __m256 a[2]) {
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        // N[k]: elements 32k..32k+31 of this half (groups 2k, 2k+1), as ggml's AVX2 kernel unpacks them
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i hb = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        const __m256i N[4] = {
            _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m30)),
            _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m30)),
            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m30)),
        };
        // R[i] = [group i | group i + 4]; a 4x4 dword transposition in each 128-bit half
        const __m256i R[4] = {_mm256_permute2x128_si256(N[0], N[2], 0x20), _mm256_permute2x128_si256(N[0], N[2], 0x31),
                              _mm256_permute2x128_si256(N[1], N[3], 0x20), _mm256_permute2x128_si256(N[1], N[3], 0x31)};
        const __m256i s0 = _mm256_unpacklo_epi32(R[0], R[1]), s1 = _mm256_unpackhi_epi32(R[0], R[1]);
        const __m256i s2 = _mm256_unpacklo_epi32(R[2], R[3]), s3 = _mm256_unpackhi_epi32(R[2], R[3]);
        q[h][0] = _mm256_unpacklo_epi64(s0, s2);
        q[h][1] = _mm256_unpackhi_epi64(s0, s2);
        q[h][2] = _mm256_unpacklo_epi64(s1, s3);
        q[h][3] = _mm256_unpackhi_epi64(s1, s3);
        const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->scales + 8 * h))));
        a[h] = _mm256_mul_ps(sc, _mm256_set1_ps(fp16_to_f32(b->d)));
    }
}

ALWAYS_INLINE void q6k_tile_avx2(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                                 const uint8_t *x, size_t xs, float *out, const int NT) {
    (void)type, (void)n;
    __m256 acc[TILE_T][2];
    for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        __m256i q[2][4];
        __m256 a[2];
        q6k_unpack_avx2((const block_q6_K *)w + u, q, a);
        for (int t = 0; t < NT; t++) {
            const uint8_t *r = x + (size_t)t * xs + (size_t)u * K16_BYTES;
            const __m256 dx = _mm256_set1_ps(load_f32(r + K16_D));
            for (int h = 0; h < 2; h++) {
                __m256i i0 = dot_u8s8(q[h][0], _mm256_loadu_si256((const __m256i *)(r + 32 * h)));
                __m256i i1 = dot_u8s8(q[h][1], _mm256_loadu_si256((const __m256i *)(r + 64 + 32 * h)));
                i0 = _mm256_add_epi32(i0, dot_u8s8(q[h][2], _mm256_loadu_si256((const __m256i *)(r + 128 + 32 * h))));
                i1 = _mm256_add_epi32(i1, dot_u8s8(q[h][3], _mm256_loadu_si256((const __m256i *)(r + 192 + 32 * h))));
                const __m256i i = _mm256_add_epi32(_mm256_add_epi32(i0, i1),
                                                   _mm256_loadu_si256((const __m256i *)(r + K16_C + 32 * h)));
                acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(a[h], dx), acc[t][h]);
            }
        }
    }
    for (int t = 0; t < NT; t++) out[t] = reduce16_avx2(acc[t][0], acc[t][1]);
}


// Float types: 16 lanes of weights (and of x for F32/F16) widened to f32, a
// last partial unit through zeroed buffers. BF16 lanes hold pairs: the odd
// element's product is added first, as VDPBF16PS does.
ALWAYS_INLINE void float_load_avx2(uint32_t type, const uint8_t *p, __m256 v[4]) {
    if (type == Q_F32) {
        v[0] = _mm256_loadu_ps((const float *)p);
        v[1] = _mm256_loadu_ps((const float *)(p + 32));
    } else if (type == Q_F16) {
        v[0] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
        v[1] = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)));
    } else {  // per half: odd elements (high words), even elements (low words)
        for (int h = 0; h < 2; h++) {
            const __m256i z = _mm256_loadu_si256((const __m256i *)(p + 32 * h));
            v[2 * h] = _mm256_castsi256_ps(_mm256_and_si256(z, _mm256_set1_epi32((int)0xffff0000)));
            v[2 * h + 1] = _mm256_castsi256_ps(_mm256_slli_epi32(z, 16));
        }
    }
}

// Unit u of a row of n elements (a last partial unit through a zeroed buffer).
ALWAYS_INLINE void float_unit_avx2(uint32_t type, const uint8_t *w, int64_t n, int64_t u, __m256 v[4]) {
    const int64_t per = type == Q_BF16 ? 32 : 16, i = per * u, wb = type == Q_F32 ? 4 : 2;
    if (n - i >= per) {
        float_load_avx2(type, w + wb * i, v);
        return;
    }
    uint8_t buf[64] = {0};
    memcpy(buf, w + wb * i, (size_t)(wb * (n - i)));
    float_load_avx2(type, buf, v);
}

ALWAYS_INLINE void float_tile_avx2(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                                   const uint8_t *x, size_t xs, float *out, const int NT) {
    __m256 acc[TILE_T][2];
    for (int t = 0; t < NT; t++) acc[t][0] = acc[t][1] = _mm256_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        __m256 wv[4], xv[4];
        float_unit_avx2(type, w, n, u, wv);
        for (int t = 0; t < NT; t++) {
            const uint8_t *xt = x + (size_t)t * xs;
            if (type == Q_BF16) {
                float_unit_avx2(Q_BF16, xt, n, u, xv);
                for (int h = 0; h < 2; h++)
                    acc[t][h] = _mm256_fmadd_ps(xv[2 * h + 1], wv[2 * h + 1], _mm256_fmadd_ps(xv[2 * h], wv[2 * h], acc[t][h]));
            } else {
                float_unit_avx2(Q_F32, xt, n, u, xv);
                for (int h = 0; h < 2; h++) acc[t][h] = _mm256_fmadd_ps(wv[h], xv[h], acc[t][h]);
            }
        }
    }
    for (int t = 0; t < NT; t++) out[t] = reduce16_avx2(acc[t][0], acc[t][1]);
}


// Q4_K and Q5_K: the integer sums of one super-block (q4k_ints_c, q5k_ints_c).

// The lane sums of four vectors (integers: exact in any order).
ALWAYS_INLINE __m128i hsum4_i32_avx2(const __m256i P[4]) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(P[0], P[1]), _mm256_hadd_epi32(P[2], P[3]));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

ALWAYS_INLINE void q4k_ints_avx2(const block_q4_K *b, const uint8_t *rec, int32_t I[4], int32_t M[4]) {
    uint32_t wd[4];
    k4_scale_words(b->scales, wd);
    // the 8 scales as int16, in both 128-bit lanes; the 8 mins as int16
    const __m256i sc = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)wd)));
    const __m128i mn = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(wd + 2)));
    _mm_storeu_si128((__m128i *)M, _mm_madd_epi16(mn, _mm_loadu_si128((const __m128i *)(rec + K4_PAIRS))));
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i P[4];  // P[p]: sub-blocks 2p (low nibbles of qs[32p..]) and 2p + 1 (high), scaled
    for (int p = 0; p < 4; p++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * p));
        const __m256i lo = _mm256_loadu_si256((const __m256i *)(rec + k4_sub_off(2 * p)));
        const __m256i hi = _mm256_loadu_si256((const __m256i *)(rec + k4_sub_off(2 * p + 1)));
        // scale 2p (2p + 1) in every int16: bytes 4p, 4p + 1 (4p + 2, 4p + 3) of each lane
        const __m256i s_lo = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(4 * p | (4 * p + 1) << 8)));
        const __m256i s_hi = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)((4 * p + 2) | (4 * p + 3) << 8)));
        P[p] = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(q, m4), lo), s_lo),
                                _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(q, 4), m4), hi), s_hi));
    }
    _mm_storeu_si128((__m128i *)I, hsum4_i32_avx2(P));
}

// The scales of one super-block of 8 Q4_K or Q5_K rows (the same header:
// d, dmin, the 12 scale bytes): scw[s] lane r = row r's scale of sub-block s
// and mnw[p] lane r = its mins of sub-blocks 2p, 2p + 1, as int16 pairs for
// VPMADDWD; d and dmin as floats.
typedef struct {
    uint32_t scw[8][8], mnw[4][8];
    __m256 d, dmin;
} k_scales8;

ALWAYS_INLINE void k_rows8_scales(const uint8_t *const rows[8], size_t off, k_scales8 *o) {
    uint16_t d[8], dmin[8];
    for (int r = 0; r < 8; r++) {
        const block_q4_K *b = (const block_q4_K *)(rows[r] + off);
        uint8_t sc[8], mn[8];
        k4_scales(b->scales, sc, mn);
        for (int s = 0; s < 8; s++) o->scw[s][r] = sc[s] * 0x10001u;
        for (int p = 0; p < 4; p++) o->mnw[p][r] = mn[2 * p] | (uint32_t)mn[2 * p + 1] << 16;
        d[r] = b->d, dmin[r] = b->dmin;
    }
    o->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
    o->dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)dmin));
}

// Q4_K for several tokens: lanes = 8 weight rows, each running dot_q4_K's
// float chain (as q4k_rows_n does with 16). Integer sums: per sub-block, the
// 8 VPMADDUBSW results add up in int16 (|sum| <= 8 * 2 * 15 * 127 < 2^15),
// then VPMADDWD applies each row's scale. y[t * ldy + r] for rows r < nvalid
// and NT tokens, in gemm (per 64 elements) or gemv (per super-block) order.
ALWAYS_INLINE void q4k_rows8_avx2(const uint8_t *const rows[8], int nvalid, int64_t n, const uint8_t *x,
                                  size_t xs, int gemm, float *y, size_t ldy, const int NT) {
    __m256 s1[8], s2[8];
    __m256i I[8], M[8];
    for (int t = 0; t < NT; t++) s1[t] = s2[t] = _mm256_setzero_ps(), I[t] = M[t] = _mm256_setzero_si256();
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int64_t k = 0; k < n / 256; k++) {
        const size_t off = (size_t)k * sizeof(block_q4_K);
        k_scales8 ks;
        k_rows8_scales(rows, off, &ks);
        const __m256 dw = ks.d, dmw = ks.dmin;
        const uint8_t *u = x + (size_t)k * K4_BYTES;
        for (int c = 0; c < 4; c++) {
            const uint8_t *p[8], *p2[8];
            for (int r = 0; r < 8; r++) p[r] = rows[r] + off + offsetof(block_q4_K, qs) + 32 * c, p2[r] = p[r] + 16;
            __m256i raw[8];  // raw[v] lane r: dword v of row r's 32 qs bytes
            transpose8x4(p, raw);
            transpose8x4(p2, raw + 4);
            for (int h = 0; h < 2; h++) {
                const int s = 2 * c + h;
                __m256i nib[8];
                for (int v = 0; v < 8; v++) nib[v] = _mm256_and_si256(h ? _mm256_srli_epi16(raw[v], 4) : raw[v], m4);
                const __m256i sc = _mm256_loadu_si256((const __m256i *)ks.scw[s]);
                for (int t = 0; t < NT; t++) {
                    const uint8_t *a = u + (size_t)t * xs + k4_sub_off(s);  // dword v: elements 4v..4v+3
                    __m256i acc = _mm256_maddubs_epi16(nib[0], _mm256_set1_epi32((int)load_u32(a)));
                    for (int v = 1; v < 8; v++)
                        acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(nib[v], _mm256_set1_epi32((int)load_u32(a + 4 * v))));
                    I[t] = _mm256_add_epi32(I[t], _mm256_madd_epi16(acc, sc));
                }
            }
            const __m256i mn = _mm256_loadu_si256((const __m256i *)ks.mnw[c]);
            for (int t = 0; t < NT; t++)
                M[t] = _mm256_add_epi32(M[t], _mm256_madd_epi16(mn, _mm256_set1_epi32((int)load_u32(u + (size_t)t * xs + K4_PAIRS + 4 * c))));
            if (gemm || c == 3) {
                for (int t = 0; t < NT; t++) {
                    const __m256 dx = _mm256_set1_ps(load_f32(u + (size_t)t * xs + K4_W));
                    s1[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[t]), _mm256_mul_ps(dw, dx), s1[t]);
                    s2[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M[t]), _mm256_mul_ps(dmw, dx), s2[t]);
                    I[t] = M[t] = _mm256_setzero_si256();
                }
            }
        }
    }
    for (int t = 0; t < NT; t++) {
        float o[8];
        _mm256_storeu_ps(o, _mm256_sub_ps(s1[t], s2[t]));
        memcpy(y + (size_t)t * ldy, o, sizeof(float) * (size_t)nvalid);
    }
}

// Q5_K for several tokens: lanes = 8 weight rows, each running dot_q5_K's
// float chains (as q5k_rows_n does with 16): acc[t][j] lane r follows row r's
// lane j, S[t] its mins.
ALWAYS_INLINE void q5k_rows8_avx2(const uint8_t *const rows[8], int nvalid, int64_t n, const uint8_t *x,
                                  size_t xs, float *y, size_t ldy, const int NT) {
    __m256 acc[8][8], S[8];
    for (int t = 0; t < NT; t++) {
        S[t] = _mm256_setzero_ps();
        for (int j = 0; j < 8; j++) acc[t][j] = _mm256_setzero_ps();
    }
    const __m256i m4 = _mm256_set1_epi8(15), bit4 = _mm256_set1_epi8(0x10);
    for (int64_t k = 0; k < n / 256; k++) {
        const size_t off = (size_t)k * sizeof(block_q5_K);
        k_scales8 ks;
        k_rows8_scales(rows, off, &ks);
        const __m256 dw = ks.d, dmw = ks.dmin;
        // W[s][j] lane r: the 5-bit weights 4j..4j+3 of sub-block s of row r
        __m256i W[8][8], qh[8];
        const uint8_t *p[8], *p2[8];
        for (int r = 0; r < 8; r++) p[r] = rows[r] + off + offsetof(block_q5_K, qh), p2[r] = p[r] + 16;
        transpose8x4(p, qh);
        transpose8x4(p2, qh + 4);
        for (int c = 0; c < 4; c++) {
            __m256i raw[8];
            for (int r = 0; r < 8; r++) p[r] = rows[r] + off + offsetof(block_q5_K, qs) + 32 * c, p2[r] = p[r] + 16;
            transpose8x4(p, raw);
            transpose8x4(p2, raw + 4);
            for (int h = 0; h < 2; h++) {
                const int s = 2 * c + h;
                for (int j = 0; j < 8; j++) {  // bit s of each qh byte moved to bit 4
                    const __m256i hb = s < 4 ? _mm256_slli_epi16(qh[j], 4 - s) : _mm256_srli_epi16(qh[j], s - 4);
                    W[s][j] = _mm256_or_si256(_mm256_and_si256(h ? _mm256_srli_epi16(raw[j], 4) : raw[j], m4),
                                              _mm256_and_si256(hb, bit4));
                }
            }
        }
        const uint8_t *u = x + (size_t)(k / 2) * UNIT_BYTES;  // this super-block's unit
        const int L0 = (int)(8 * k % 16);                      // its first lane
        for (int t = 0; t < NT; t++) {
            const uint8_t *a = u + (size_t)t * xs;
            const __m256 dx = _mm256_set1_ps(load_f32(a + UNIT_D + 4 * L0));
            const __m256 D = _mm256_mul_ps(dw, dx);
            for (int j = 0; j < 8; j++) {
                __m256i i = _mm256_setzero_si256();
                for (int s = 0; s < 8; s++) {
                    const __m256i xv = _mm256_set1_epi32((int)load_u32(a + 64 * j + 4 * (L0 + s)));
                    i = _mm256_add_epi32(i, _mm256_madd_epi16(_mm256_maddubs_epi16(W[s][j], xv),
                                                              _mm256_loadu_si256((const __m256i *)ks.scw[s])));
                }
                acc[t][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), D, acc[t][j]);
            }
            __m256i M = _mm256_setzero_si256();
            for (int q = 0; q < 4; q++)
                M = _mm256_add_epi32(M, _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)ks.mnw[q]),
                                                          _mm256_set1_epi32((int)load_u32(a + UNIT_W + 4 * (L0 + 2 * q)))));
            S[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(dmw, dx), S[t]);
        }
    }
    for (int t = 0; t < NT; t++) {
        const __m256 *v = acc[t];  // hsum_float_8's pairing: ((0+4) + (2+6)) + ((1+5) + (3+7))
        const __m256 h = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(v[0], v[4]), _mm256_add_ps(v[2], v[6])),
                                       _mm256_add_ps(_mm256_add_ps(v[1], v[5]), _mm256_add_ps(v[3], v[7])));
        float o[8];
        _mm256_storeu_ps(o, _mm256_sub_ps(h, S[t]));
        memcpy(y + (size_t)t * ldy, o, sizeof(float) * (size_t)nvalid);
    }
}

ALWAYS_INLINE void q5k_ints_avx2(const block_q5_K *b, const uint8_t sc[8], const uint8_t *u0, int L0,
                                 int32_t isum[8]) {
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    // X[s]: the 32 activations of sub-block s in element order (dword v of
    // lane L0 + s is at 64v + 4(L0 + s): an 8x8 dword transposition)
    const uint8_t *p[8], *p2[8];
    for (int v = 0; v < 8; v++) p[v] = u0 + 64 * v + 4 * L0, p2[v] = p[v] + 16;
    __m256i X[8];
    transpose8x4(p, X);       // X[j] lane v: dword v of lane L0 + j
    transpose8x4(p2, X + 4);  // lanes L0 + 4 ..
    const __m256i qh = _mm256_loadu_si256((const __m256i *)b->qh);
    __m256i acc = _mm256_setzero_si256();
    for (int s = 0; s < 8; s++) {
        const __m256i qs = _mm256_loadu_si256((const __m256i *)(b->qs + 32 * (s / 2)));
        const __m256i lo = _mm256_and_si256(s & 1 ? _mm256_srli_epi16(qs, 4) : qs, m4);
        const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), one);
        const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
        acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(q, X[s]), _mm256_set1_epi16(sc[s])));
    }
    _mm256_storeu_si256((__m256i *)isum, acc);
}

#define BLOCK32_KERNEL unit_tile_avx2
#define Q6K_KERNEL q6k_tile_avx2
#define FLOAT_KERNEL float_tile_avx2
#define BF16_KERNEL float_tile_avx2
#endif  // Q_AVX2

// ---------------------------------------------------------------------------
// Q4_K and Q5_K, one row against one token: the portable and AVX2 path
// ---------------------------------------------------------------------------

// lane[j] = fma(isum[j], D, lane[j]), j < 8
#if defined(Q_AVX2)
#define LANES8_FMA(lane, isum, D)                                                                  \
    _mm256_storeu_ps(lane, _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_loadu_si256((const __m256i *)(isum))), \
                                           _mm256_set1_ps(D), _mm256_loadu_ps(lane)))
#define Q4K_INTS q4k_ints_avx2
#define Q5K_INTS q5k_ints_avx2
#else
#define LANES8_FMA(lane, isum, D) \
    for (int j = 0; j < 8; j++) (lane)[j] = fmaf((float)(isum)[j], (D), (lane)[j])
#define Q4K_INTS q4k_ints_c
#define Q5K_INTS q5k_ints_c
#endif

// Q4_K: q4k_chain states the float order.
__attribute__((unused))  // the AVX-512 build has its own Q4_K kernels
static float dot_q4_K(const uint8_t *w, const uint8_t *x, int64_t n, int gemm) {
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t k = 0; k < n / 256; k++, w += sizeof(block_q4_K)) {
        const uint8_t *rec = x + k * K4_BYTES;
        int32_t I[4], M[4];
        Q4K_INTS((const block_q4_K *)w, rec, I, M);
        q4k_chain((const block_q4_K *)w, rec, I, M, gemm, &s1, &s2);
    }
    return s1 - s2;
}

// Q5_K in the float order of llama.cpp's x86 ggml_vec_dot_q5_K_q8_K (its
// AVX2 code, which AVX-512 builds run too): 8 float lanes, lane j holding
// elements 32s + 4j .. 32s + 4j + 3 of every sub-block s. Per super-block,
// lane j's exact integer sum Σ_s sc[s] * Σ q*x enters with one fma by
// D = d_x * fp16(d); the mins run in their own chain S = fma(Dm, M, S) with
// Dm = d_x * fp16(dmin) and M = Σ mn[s] * Σx_s. The result is
// hsum8(lanes) - S (llama.cpp adds summs = -S).
__attribute__((unused))  // the AVX-512 build has its own Q5_K kernels
static float dot_q5_K(const uint8_t *w, const uint8_t *x, int64_t n) {
    float lane[8] = {0};
    float S = 0.0f;
    for (int64_t k = 0; k < n / 256; k++, w += sizeof(block_q5_K)) {
        const block_q5_K *b = (const block_q5_K *)w;
        uint8_t sc[8], mn[8];
        k4_scales(b->scales, sc, mn);
        const uint8_t *u0 = x + (8 * k / 16) * UNIT_BYTES;
        const int L0 = (int)(8 * k % 16);
        const float dx = load_f32(u0 + UNIT_D + 4 * L0);
        const float D = fp16_to_f32(b->d) * dx, Dm = fp16_to_f32(b->dmin) * dx;
        int32_t isum[8];
        Q5K_INTS(b, sc, u0, L0, isum);
        LANES8_FMA(lane, isum, D);
        S = fmaf((float)k32_min_sum(mn, x, k), Dm, S);
    }
    return hsum8_ggml(lane) - S;
}

#if defined(Q_AVX2)
// Q4_K and Q5_K on AVX2: single tokens row by row (dot_q4_K, dot_q5_K),
// groups of tokens 8 rows at a time; Q4_K's tokens [0, ngemm)
// in the gemm order (as matmul_q4_K).
static void matmul_k_avx2(uint32_t type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                          size_t xs, int nt, int ngemm, float *y, size_t ldy) {
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const int nv = nr - r0 < 8 ? nr - r0 : 8;
        const uint8_t *rows[8];
        for (int r = 0; r < 8; r++) rows[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws;
        for (int t = 0; t < nt;) {
            float *yt = y + (size_t)t * ldy + r0;
            const uint8_t *xt = x + (size_t)t * xs;
            const int gemm = t < ngemm, left = (gemm ? ngemm : nt) - t;  // gemm: left is a multiple of 4
#define K_ROWS8(NT)                                                               \
    (type == Q_Q4_K ? q4k_rows8_avx2(rows, nv, n, xt, xs, gemm, yt, ldy, NT) \
                    : q5k_rows8_avx2(rows, nv, n, xt, xs, yt, ldy, NT))
            if (left >= 8) K_ROWS8(8), t += 8;
            else if (left >= 4) K_ROWS8(4), t += 4;
            else if (left >= 2) K_ROWS8(2), t += 2;
            else {
                for (int r = 0; r < nv; r++)
                    yt[r] = type == Q_Q4_K ? dot_q4_K(rows[r], xt, n, 0) : dot_q5_K(rows[r], xt, n);
                t += 1;
            }
#undef K_ROWS8
        }
    }
}

#endif

// ---------------------------------------------------------------------------
// The unit kernels' driver (every build)
// ---------------------------------------------------------------------------

#if !defined(Q_AVX512) && !defined(Q_AVX2)
#define BLOCK32_KERNEL block32_kernel_c
#define Q6K_KERNEL q6k_kernel_c
#define FLOAT_KERNEL float_kernel_c
#define BF16_KERNEL float_kernel_c
#endif

// The tile functions: each ISA's kernels, NT a compile-time constant.
#define TILE_FN(name, kernel, type)                                                                    \
    static void name(const uint8_t *w, int64_t n, int64_t u0, int64_t u1, const uint8_t *x, size_t xs, \
                     int tn, float *out) {                                                            \
        TILE_SWITCH(kernel, type, w, n, u0, u1, x, xs, out)                                           \
    }
TILE_FN(tile_q8_0, BLOCK32_KERNEL, Q_Q8_0)
TILE_FN(tile_q4_0, BLOCK32_KERNEL, Q_Q4_0)
TILE_FN(tile_q5_0, BLOCK32_KERNEL, Q_Q5_0)
TILE_FN(tile_q4_1, BLOCK32_KERNEL, Q_Q4_1)
TILE_FN(tile_q5_1, BLOCK32_KERNEL, Q_Q5_1)
TILE_FN(tile_q6_K, Q6K_KERNEL, Q_Q6_K)
TILE_FN(tile_f32, FLOAT_KERNEL, Q_F32)
TILE_FN(tile_f16, FLOAT_KERNEL, Q_F16)
TILE_FN(tile_bf16, BF16_KERNEL, Q_BF16)
#undef TILE_FN

// The tile kernel of a weight type and the elements in one of its units.
static tile_fn tile_for(uint32_t type, int64_t *unit) {
    *unit = UNIT;
    switch (type) {
    case Q_Q8_0: return tile_q8_0;
    case Q_Q4_0: return tile_q4_0;
    case Q_Q5_0: return tile_q5_0;
    case Q_Q4_1: return tile_q4_1;
    case Q_Q5_1: return tile_q5_1;
    case Q_Q6_K: *unit = 256; return tile_q6_K;
    case Q_BF16: *unit = 32; return tile_bf16;
    case Q_F16: *unit = 16; return tile_f16;
    default: *unit = 16; return tile_f32;
    }
}

// Cache blocking around the tile kernel. For one token (decode) every row is
// one streaming pass over its weights. For more, a block of ROW_BLOCK rows is
// revisited by each token tile, K_CHUNK_BYTES of each token's activations at
// a time, so the weights come from L2 and the activations from L1. Token
// tiles are TILE_T tokens, the remainder split in powers of 2. The first
// token tile streams the rows in from memory, fetching the next row ahead.
// Lone tokens (see q_matmul) take one pass over K as a single token does: a
// tile computes each token alone, but chunking would round the sum of the
// chunks' partial sums. Without chunks, their tiles are kept to LONE_X_BYTES.
static void matmul_units(uint32_t wtype, int64_t n, const uint8_t *w, size_t ws, int nr,
                         const uint8_t *x, size_t xs, int nt, int lone, float *y, size_t ldy) {
    int64_t unit;
    const tile_fn tile = tile_for(wtype, &unit);
    const int64_t nu = (n + unit - 1) / unit;
    const int64_t unit_bytes = (int64_t)q_act_row_bytes(wtype, unit);  // >= the bytes a unit spans
    const int64_t kc_max = K_CHUNK_BYTES / unit_bytes > 0 ? K_CHUNK_BYTES / unit_bytes : 1;
    const int64_t n_chunks = nt == 1 || lone ? 1 : (nu + kc_max - 1) / kc_max;
    const int64_t kc = (nu + n_chunks - 1) / n_chunks;  // balanced chunks
    const size_t rb = qtype_row_bytes(wtype, n);
    for (int r0 = 0; r0 < nr; r0 += ROW_BLOCK) {
        const int r1 = nr - r0 < ROW_BLOCK ? nr : r0 + ROW_BLOCK;
        for (int64_t u0 = 0; u0 < nu; u0 += kc) {
            const int64_t u1 = nu - u0 < kc ? nu : u0 + kc;
            int tn;
            for (int t0 = 0; t0 < nt; t0 += tn) {
                for (tn = TILE_T; tn > nt - t0;) tn /= 2;
                while (lone && tn > 1 && (size_t)tn * xs > LONE_X_BYTES) tn /= 2;
                for (int r = r0; r < r1; r++) {
                    float out[TILE_T];
                    if (nt > 1 && t0 == 0 && u0 == 0 && r + 1 < r1)
                        for (size_t l = 0; l < rb; l += 64) __builtin_prefetch(w + (size_t)(r + 1) * ws + l, 0, 3);
                    tile(w + (size_t)r * ws, n, u0, u1, x + (size_t)t0 * xs, xs, tn, out);
                    for (int t = 0; t < tn; t++) {
                        float *yp = y + (size_t)(t0 + t) * ldy + r;
                        *yp = u0 == 0 ? out[t] : *yp + out[t];
                    }
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

// nt tokens computed jointly, or (lone) each as a one-token call would (see
// q_matmul). Q5_K's kernel computes every token alone in any case.
static void matmul_tokens(uint32_t wtype, int64_t n, const uint8_t *w, size_t w_stride, int nr,
                          const uint8_t *xq, size_t xq_stride, int nt, int lone, float *y, size_t ldy) {
    const int ngemm = lone ? 0 : nt - nt % 4;  // llama.cpp's gemm takes full groups of 4 tokens, gemv the rest
    if (wtype != Q_Q4_K && wtype != Q_Q5_K) matmul_units(wtype, n, w, w_stride, nr, xq, xq_stride, nt, lone, y, ldy);
#if defined(Q_AVX512)
    else if (wtype == Q_Q4_K) matmul_q4_K(n, w, w_stride, nr, xq, xq_stride, nt, ngemm, y, ldy);
    else matmul_q5_K(n, w, w_stride, nr, xq, xq_stride, nt, y, ldy);
#elif defined(Q_AVX2)
    else matmul_k_avx2(wtype, n, w, w_stride, nr, xq, xq_stride, nt, ngemm, y, ldy);
#else
    else
        for (int r = 0; r < nr; r++)
            for (int t = 0; t < nt; t++) {
                const uint8_t *wr = w + (size_t)r * w_stride, *xt = xq + (size_t)t * xq_stride;
                y[(size_t)t * ldy + r] = wtype == Q_Q4_K ? dot_q4_K(wr, xt, n, t < ngemm) : dot_q5_K(wr, xt, n);
            }
#endif
}

void q_matmul(uint32_t wtype, int64_t n, const void *w, size_t w_stride, int nr, const void *xq,
              size_t xq_stride, int nt, int nt_joint, float *y, size_t ldy) {
    const qtype_info *q = qtype_get(wtype);
    if (!q || !q->compute || nr <= 0 || nt <= 0) return;
    if (nt_joint > nt) nt_joint = nt;
    if (nt_joint < 0) nt_joint = 0;
    if (nt_joint > 0) matmul_tokens(wtype, n, w, w_stride, nr, xq, xq_stride, nt_joint, 0, y, ldy);
    // lone tokens share each weight block's decoding, each keeping its own float chain
    if (nt > nt_joint)
        matmul_tokens(wtype, n, w, w_stride, nr, (const uint8_t *)xq + (size_t)nt_joint * xq_stride, xq_stride,
                      nt - nt_joint, 1, y + (size_t)nt_joint * ldy, ldy);
}

const char *q_simd_name(void) {
#if defined(Q_AVX512)
    return "avx512-vnni";
#elif defined(Q_AVX2)
    return "avx2";
#else
    return "scalar";
#endif
}
