// quant.c — see quant.h. Block layouts are ggml's, byte for byte.
//
// Contents: the type table; fp16/bf16 conversions; row dequantization;
// activation quantization (llama.cpp's values in quill's own SIMD-friendly
// row layout, described in quant.h); and the driver of q_matmul (ggml's
// rows) and q_matmul_x8 (quant_x8.c's interleaved rows), which runs the
// kernels of the ISA the build targets (quant_impl.h: quant_avx512.c,
// quant_avx2.c or quant_generic.c; all three compute the same bits).
#include "quant_impl.h"

#include <stdio.h>

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
    [10] = {"Q2_K", 256, 84, 1, Q_Q8_K},
    [11] = {"Q3_K", 256, 110, 1, Q_Q8_K},
    [12] = {"Q4_K", 256, 144, 1, Q_Q8_K},
    [13] = {"Q5_K", 256, 176, 1, Q_Q8_K},
    [14] = {"Q6_K", 256, 210, 1, Q_Q8_K},
    [15] = {"Q8_K", 256, 292, 0, 0},
    [16] = {"IQ2_XXS", 256, 66, 0, 0},
    [17] = {"IQ2_XS", 256, 74, 0, 0},
    [18] = {"IQ3_XXS", 256, 98, 0, 0},
    [19] = {"IQ1_S", 256, 50, 0, 0},
    [20] = {"IQ4_NL", 32, 18, 1, Q_Q8_0},
    [21] = {"IQ3_S", 256, 110, 0, 0},
    [22] = {"IQ2_S", 256, 82, 0, 0},
    [23] = {"IQ4_XS", 256, 136, 1, Q_Q8_0},
    [24] = {"I8", 1, 1, 0, 0},
    [25] = {"I16", 1, 2, 0, 0},
    [26] = {"I32", 1, 4, 0, 0},
    [27] = {"I64", 1, 8, 0, 0},
    [28] = {"F64", 1, 8, 0, 0},
    [29] = {"IQ1_M", 256, 56, 0, 0},
    [30] = {"BF16", 1, 2, 1, Q_BF16},
    [34] = {"TQ1_0", 256, 54, 0, 0},
    [35] = {"TQ2_0", 256, 66, 0, 0},
    [39] = {"MXFP4", 32, 17, 1, Q_Q8_0},
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

void qtype_compute_names(char *buf, size_t len) {
    size_t used = 0;
    buf[0] = 0;
    for (uint32_t t = 0; t < Q_TYPE_COUNT; t++)
        if (QTYPES[t].name && QTYPES[t].compute && used < len)
            used += (size_t)snprintf(buf + used, len - used, "%s%s", used ? " " : "", QTYPES[t].name);
}

// ---------------------------------------------------------------------------
// Half and bfloat16 conversions
// ---------------------------------------------------------------------------

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
// Dequantization
// ---------------------------------------------------------------------------

static void dequant_block32(uint32_t type, const uint8_t *src, float *dst, int64_t nb) {
    const size_t bs = QTYPES[type].block_bytes;
    for (int64_t i = 0; i < nb; i++, src += bs, dst += 32) {
        int q[32];
        block32_values(type, src, q);
        const float d = block32_d(type, src);
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

static void dequant_q2_K(const block_q2_K *b, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, dst += 256) {
        const float d = fp16_to_f32(b->d), dmin = fp16_to_f32(b->dmin);
        for (int e = 0; e < 256; e++) {
            const int sc = b->scales[e / 16];
            dst[e] = d * (float)(sc & 15) * (float)q2_bits(b->qs, e) - dmin * (float)(sc >> 4);
        }
    }
}

static void dequant_q3_K(const block_q3_K *b, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++, dst += 256) {
        const float d = fp16_to_f32(b->d);
        uint32_t w[4];
        q3k_scale_words(b->scales, w);
        for (int e = 0; e < 256; e++) {
            const int q = q2_bits(b->qs, e) + 4 * ((b->hmask[e % 32] >> (e / 32)) & 1) - 4;
            dst[e] = d * (float)q3k_scale(w, e / 16) * (float)q;
        }
    }
}

static void dequant_iq4_xs(const block_iq4_xs *b, float *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b++) {
        const float d = fp16_to_f32(b->d);
        for (int s = 0; s < 8; s++, dst += 32) {
            const float dl = d * (float)iq4xs_scale(b, s);
            for (int j = 0; j < 16; j++) {
                dst[j] = dl * (float)IQ4NL_VALUES[b->qs[16 * s + j] & 15];
                dst[j + 16] = dl * (float)IQ4NL_VALUES[b->qs[16 * s + j] >> 4];
            }
        }
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
    case Q_Q4_0: case Q_Q4_1: case Q_Q5_0: case Q_Q5_1: case Q_Q8_0: case Q_IQ4_NL: case Q_MXFP4:
        dequant_block32(type, s, dst, n / 32);
        break;
    case Q_Q2_K: dequant_q2_K(src, dst, n / 256); break;
    case Q_Q3_K: dequant_q3_K(src, dst, n / 256); break;
    case Q_IQ4_XS: dequant_iq4_xs(src, dst, n / 256); break;
    case Q_Q4_K: dequant_q4_K(src, dst, n / 256); break;
    case Q_Q5_K: dequant_q5_K(src, dst, n / 256); break;
    case Q_Q6_K: dequant_q6_K(src, dst, n / 256); break;
    default: memset(dst, 0, (size_t)n * sizeof(float)); break;  // callers reject non-compute types
    }
}

// ---------------------------------------------------------------------------
// Activation quantization (layouts in quant.h)
// ---------------------------------------------------------------------------

static inline int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

enum act_layout { ACT_NONE, ACT_F32, ACT_F16, ACT_BF16, ACT_Q8_0, ACT_Q8_1, ACT_K16, ACT_K4 };

static enum act_layout act_layout_of(uint32_t wtype) {
    switch (wtype) {
    case Q_F32: return ACT_F32;
    case Q_F16: return ACT_F16;
    case Q_BF16: return ACT_BF16;
    case Q_Q8_0: case Q_Q4_0: case Q_Q5_0: case Q_IQ4_NL: case Q_IQ4_XS: case Q_MXFP4: return ACT_Q8_0;
    case Q_Q4_1: case Q_Q5_1: return ACT_Q8_1;
    case Q_Q4_K: case Q_Q5_K: return ACT_K4;
    case Q_Q6_K: case Q_Q3_K: case Q_Q2_K: return ACT_K16;
    default: return ACT_NONE;
    }
}

size_t q_act_row_bytes(uint32_t wtype, int64_t n) {
    switch (act_layout_of(wtype)) {
    case ACT_F32: case ACT_F16: return (size_t)round_up(4 * n, 64);
    case ACT_BF16: return (size_t)round_up(2 * n, 64);
    case ACT_Q8_0: case ACT_Q8_1: return (size_t)((n + UNIT - 1) / UNIT) * UNIT_BYTES;
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

// 1 when none of x[0..n) is NaN or infinite (an exponent of all ones).
static int all_finite(const float *x, int n) {
    uint32_t bad = 0;
    for (int j = 0; j < n; j++) {
        uint32_t u;
        memcpy(&u, x + j, 4);
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}

// A block holding NaN or inf (a broken model's activations) would make the
// float-to-int conversions below undefined and Σq garbage: it quantizes to
// q = 0 with d = NaN instead, so every product with it is NaN and the
// forward pass reports non-finite logits (model.c).
static float quant_block_nonfinite(int8_t *q, int n, int *sum) {
    memset(q, 0, (size_t)n);
    if (sum) *sum = 0;
    return NAN;
}

// Q8_0 / Q8_1 of one block of 32, as llama.cpp's AVX2 quantize_row_q8_0/1:
// d = amax/127, q = round-half-even(x * (127/amax)). Returns d (before any
// fp16 rounding); q[] in element order, *sum = Σq.
static float quant_block_q8(const float *x, int8_t q[32], int *sum) {
    if (!all_finite(x, 32)) return quant_block_nonfinite(q, 32, sum);
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
    if (!all_finite(x, 256)) return quant_block_nonfinite(q, 256, NULL);
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

// Q8_K rows for Q4_K and Q5_K: per super-block q[256] in k4_sub_off order, d and
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

// Q8_K rows for Q6_K, Q3_K, Q2_K: per super-block 256 q (lane = group of 16),
// c = c_mul * Σq per group, d. Q6_K's weights q - 32 (Q3_K's q - 4) enter
// VPDPBUSD as the unsigned q and c = -32 Σq (-4 Σq) corrects; Q2_K's min
// term takes c = Σq itself.
static void act_k16(const float *x, uint8_t *dst, int64_t n, int c_mul) {
    memset(dst, 0, q_act_row_bytes(Q_Q6_K, n));
    for (int64_t k = 0; k < n / 256; k++) {
        int8_t q[256];
        const float d = quant_block_q8_K(x + 256 * k, q);
        uint8_t *rec = dst + k * K16_BYTES;
        for (int g = 0; g < 16; g++) {
            for (int v = 0; v < 4; v++) memcpy(rec + 64 * v + 4 * g, q + 16 * g + 4 * v, 4);
            const int32_t c = c_mul * sum_i8(q + 16 * g, 16);
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
    case ACT_K16: act_k16(x, o, n, wtype == Q_Q6_K ? -32 : wtype == Q_Q3_K ? -4 : 1); break;
    case ACT_K4: act_k4(x, o, n); break;
    default: break;
    }
}

// ---------------------------------------------------------------------------
// The unit kernels' driver (every build)
// ---------------------------------------------------------------------------

// Cache blocking of the unit kernels (matmul_units).
#define ROW_BLOCK 32        // rows revisited by every token tile (their weights stay in L2)
#define K_CHUNK_BYTES 2560  // activation bytes per token per pass (TILE_T tokens' worth stay in L1)
#define LONE_X_BYTES 49152  // at most, activation bytes of a lone token tile (whole rows; L1's size)

// The tile kernel of a weight type and the elements in one of its units.
static tile_fn tile_for(uint32_t type, int64_t *unit) {
    *unit = qtype_get(type)->block == 256 && type != Q_IQ4_XS ? 256  // the K16 types: a super-block
          : type == Q_BF16 ? 32 : type == Q_F16 || type == Q_F32 ? 16 : UNIT;
    return Q_ISA(q_tiles)[type];
}

// The weights of a product: ggml's rows from w on, ws bytes apart, or x8
// groups (quant.h) from w on, ws bytes apart, of whose rows lo, lo + 1, ...
// are asked for (lo < 8).
typedef struct {
    const uint8_t *w;
    size_t ws;
    int x8, lo;
} wsrc;

// Cache blocking around the tile kernel. For one token (decode) every row is
// one streaming pass over its weights. For more, a block of ROW_BLOCK rows is
// revisited by each token tile, K_CHUNK_BYTES of each token's activations at
// a time, so the weights come from L2 and the activations from L1. Token
// tiles are TILE_T tokens, the remainder split in powers of 2. The first
// token tile streams the rows in from memory, fetching the next row ahead.
// Lone tokens (see q_matmul) take one pass over K as a single token does: a
// tile computes each token alone, but chunking would round the sum of the
// chunks' partial sums. Without chunks, their tiles are kept to LONE_X_BYTES.
// x8 weights go a group of 8 rows at a time (the x8 tile kernels; two
// groups for the AVX-512 build's prompts), in the same blocks, chunks and
// tiles: the same float operations per row.
static void matmul_units(uint32_t wtype, int64_t n, const wsrc *s, int nr, const uint8_t *x, size_t xs, int nt,
                         int lone, float *y, size_t ldy) {
    int64_t unit;
    tile_fn tile = tile_for(wtype, &unit);
    tile16_fn tile16 = NULL;  // two x8 groups a call
#if defined(Q_AVX512)
    if (s->x8 && nt > 1) tile16 = q_tiles16_avx512[wtype];
    // One token: one group a call, its weights one stream. The prompts' kernels
    // (two groups a call) ran one token 1.3-1.45x faster with the weights in
    // cache (Q4_0, Q8_0, IQ4_XS), but read two streams from memory, and there
    // the 1B decode lost (Emerald Rapids VM, 2 threads, medians of 3: Q4_0 25.7
    // -> 22.3 tok/s, Q8_0 17.9 -> 14.2; IQ4_XS 23.9 -> 25.8); read as one
    // stream (the two groups' blocks interleaved: an experiment) it gained
    // nothing measurable (Q4_0 24.7 -> 24.7, Q8_0 18.1 -> 16.7, IQ4_NL 22.5 -> 25.0).
    // Given the next two groups' lines ahead as it goes (the prompts' `next`),
    // the two-group kernel decoded as fast as this, no faster (2026-11-29, 4
    // rounds: Q4_0 26.4 -> 26.0, Q8_0 17.6 -> 18.4).
    if (s->x8 && nt == 1) tile = q_decode8_avx512[wtype];  // the same units, 8 rows a call
#elif defined(Q_AVX2)
    if (s->x8) tile = q_tiles8_avx2[wtype];  // the same units, 8 rows a call
#endif
    const int64_t nu = (n + unit - 1) / unit;
    const int64_t unit_bytes = (int64_t)q_act_row_bytes(wtype, unit);  // >= the bytes a unit spans
    const int64_t kc_max = K_CHUNK_BYTES / unit_bytes > 0 ? K_CHUNK_BYTES / unit_bytes : 1;
    const int64_t n_chunks = nt == 1 || lone ? 1 : (nu + kc_max - 1) / kc_max;
    const int64_t kc = (nu + n_chunks - 1) / n_chunks;  // balanced chunks
    const int per = tile16 ? 16 : s->x8 ? 8 : 1;           // rows per kernel call
    const int grp = s->x8 ? 8 : 1;                          // rows per s->ws bytes
    const size_t ib = (size_t)per * qtype_row_bytes(wtype, n);  // the bytes it reads
    const int v0 = s->x8 ? s->lo : 0, v1 = v0 + nr;         // the rows computed (of those from s->w on)
    for (int b0 = v0 / per * per; b0 < v1; b0 += ROW_BLOCK) {
        const int b1 = v1 - b0 < ROW_BLOCK ? v1 : b0 + ROW_BLOCK;
        for (int64_t u0 = 0; u0 < nu; u0 += kc) {
            const int64_t u1 = nu - u0 < kc ? nu : u0 + kc;
            int tn;
            for (int t0 = 0; t0 < nt; t0 += tn) {
                for (tn = TILE_T; tn > nt - t0;) tn /= 2;
                while (lone && tn > 1 && (size_t)tn * xs > LONE_X_BYTES) tn /= 2;
                for (int v = b0; v < b1; v += per) {
                    const uint8_t *wi = s->w + (size_t)(v / grp) * s->ws;
                    float out[TILE_T * 16];  // out[per * t + row of the call]
                    const int fetch = nt > 1 && t0 == 0 && u0 == 0 && v + per < v1;  // the next call's rows
                    if (tile16) {  // (its second group: the first again past the rows asked for)
                        tile16(wi, v + 8 < v1 ? wi + s->ws : wi, fetch ? wi + 2 * s->ws : NULL, n, u0, u1,
                               x + (size_t)t0 * xs, xs, tn, out);
                    } else {
                        if (fetch)
                            for (size_t l = 0; l < ib; l += 64) __builtin_prefetch(wi + s->ws + l, 0, 3);
                        if (nt == 1 && !s->x8) decode_prefetch(wi, ib);  // a row's worth (the x8 kernels ask as they go)
                        tile(wi, n, u0, u1, x + (size_t)t0 * xs, xs, tn, out);
                    }
                    for (int r = v < v0 ? v0 : v; r < v + per && r < v1; r++)
                        for (int t = 0; t < tn; t++) {
                            float *yp = y + (size_t)(t0 + t) * ldy + (r - v0);
                            *yp = u0 == 0 ? out[per * t + r - v] : *yp + out[per * t + r - v];
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
static void matmul_tokens(uint32_t wtype, int64_t n, const wsrc *s, int nr, const uint8_t *xq, size_t xq_stride,
                          int nt, int lone, float *y, size_t ldy) {
    const int ngemm = lone ? 0 : nt - nt % 4;  // llama.cpp's gemm takes full groups of 4 tokens, gemv the rest
    if (wtype != Q_Q4_K && wtype != Q_Q5_K) matmul_units(wtype, n, s, nr, xq, xq_stride, nt, lone, y, ldy);
#if defined(Q_AVX512)
    else if (s->x8) q_matmul_k_x8_avx512(wtype, n, s->w, s->lo, nr, xq, xq_stride, nt, ngemm, y, ldy);
#elif defined(Q_AVX2)
    else if (s->x8) q_matmul_k_x8_avx2(wtype, n, s->w, s->lo, nr, xq, xq_stride, nt, ngemm, y, ldy);
#endif
    else Q_ISA(q_matmul_k)(wtype, n, s->w, s->ws, nr, xq, xq_stride, nt, ngemm, y, ldy);
}

static void matmul(uint32_t wtype, int64_t n, const wsrc *s, int nr, const void *xq, size_t xq_stride, int nt,
                   int nt_joint, float *y, size_t ldy) {
    if (nt_joint > nt) nt_joint = nt;
    if (nt_joint < 0) nt_joint = 0;
    if (nt == 1)  // the kernels prefetch ahead as they go: the first bytes here
        decode_prefetch_head(s->w, s->x8 ? (size_t)(s->lo + nr + 7) / 8 * s->ws : (size_t)nr * s->ws);
    if (nt_joint > 0) matmul_tokens(wtype, n, s, nr, xq, xq_stride, nt_joint, 0, y, ldy);
    // lone tokens share each weight block's decoding, each keeping its own float chain
    if (nt > nt_joint)
        matmul_tokens(wtype, n, s, nr, (const uint8_t *)xq + (size_t)nt_joint * xq_stride, xq_stride, nt - nt_joint, 1,
                      y + (size_t)nt_joint * ldy, ldy);
}

void q_matmul(uint32_t wtype, int64_t n, const void *w, size_t w_stride, int nr, const void *xq,
              size_t xq_stride, int nt, int nt_joint, float *y, size_t ldy) {
    const qtype_info *q = qtype_get(wtype);
    if (!q || !q->compute || nr <= 0 || nt <= 0) return;
    const wsrc s = {w, w_stride, 0, 0};
    matmul(wtype, n, &s, nr, xq, xq_stride, nt, nt_joint, y, ldy);
}

// Whether this build's x8 kernels take a product of nt tokens, or it goes
// through unpacked rows: builds without x8 kernels (which never pack: only
// tests come here), and the AVX-512 build's products it has no x8 kernel
// for: the prompts of Q6_K (its kernels on ggml's rows, the unpacking
// included, run 30% faster than x8 ones did), and Q5_K (never packed
// there: q_x8_wanted).
static int x8_kernels(uint32_t wtype, int nt) {
#if defined(Q_AVX512)
    return wtype == Q_Q4_K || (nt == 1 ? q_decode8_avx512[wtype] != NULL : q_tiles16_avx512[wtype] != NULL);
#elif defined(Q_X8)
    (void)wtype, (void)nt;
    return 1;
#else
    (void)wtype, (void)nt;
    return 0;
#endif
}

void q_matmul_x8(uint32_t wtype, int64_t n, const void *w8, int64_t r0, int nr, const void *xq, size_t xq_stride,
                 int nt, int nt_joint, float *y, size_t ldy) {
    if (!q_x8_layout(wtype) || nr <= 0 || nt <= 0) return;
    if (!x8_kernels(wtype, nt) && !x8_matmul_unpacked(wtype, n, w8, r0, nr, xq, xq_stride, nt, nt_joint, y, ldy)) return;
#if !defined(Q_X8)  // no memory for the unpacked rows, and no kernels to fall back on
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < nr; i++) y[(size_t)t * ldy + i] = NAN;
    return;
#endif
    // (unpacked rows without memory: the x8 kernels compute the same bits)
    const size_t gb = 8 * qtype_row_bytes(wtype, n);  // a group's bytes
    const wsrc s = {(const uint8_t *)w8 + (size_t)(r0 / 8) * gb, gb, 1, (int)(r0 % 8)};
    matmul(wtype, n, &s, nr, xq, xq_stride, nt, nt_joint, y, ldy);
}

// Left to the hardware prefetcher, an AVX2 build's loop read a quarter less
// than an AVX-512 one on an Emerald Rapids VM.
uint64_t q_read_words(const uint64_t *p, size_t n) {
    uint64_t s = 0;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        decode_prefetch((const uint8_t *)(p + i), 64);
        for (int k = 0; k < 8; k++) s += p[i + k];
    }
    for (; i < n; i++) s += p[i];
    return s;
}

const char *q_simd_name(void) {
#if defined(Q_AVX512)
    return "avx512-vnni";
#elif defined(Q_AVX2) && defined(__AVXVNNI__)
    return "avx2-vnni";
#elif defined(Q_AVX2)
    return "avx2";
#else
    return "scalar";
#endif
}
