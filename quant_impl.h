// quant_impl.h — what quant.c and its kernel files share (internal; the API
// is quant.h): the ISA a build targets, ggml's block layouts, the activation
// row layouts (described in quant.h), and the unit-kernel scheme.
//
// Files: quant.c (type table, conversions, dequantization, activation
// quantization, the q_matmul driver); quant_x8.c (weights with 8 rows
// interleaved, for the AVX2 kernels); the kernels of one ISA each, every file
// compiled in every build and empty but for this header where its ISA is not
// the build's: quant_avx512.c (AVX-512 VNNI), quant_avx2.c (AVX2),
// quant_generic.c (portable C: it states the math the SIMD kernels
// reorganize). All three compute the same bits (tests/t_isa.sh).
#ifndef QUILL_QUANT_IMPL_H
#define QUILL_QUANT_IMPL_H

#include "quant.h"
#include "util.h"

#include <math.h>
#include <stddef.h>
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
// Builds with kernels on the x8 layout (quant_x8.c): the AVX2 and AVX-512 ones.
#if defined(Q_AVX512) || defined(Q_AVX2)
#define Q_X8 1
#endif

#define ALWAYS_INLINE static inline __attribute__((always_inline))

// fp16_to_f32, inline where the CPU converts halves itself.
ALWAYS_INLINE float half_f32(uint16_t h) {
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    return fp16_to_f32(h);
#endif
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

// 256 weights in 16 groups of 16: d * (scales[g] & 15) * q - dmin * (scales[g] >> 4),
// q 2 bits: element 128h + 32j + l (h < 2, j < 4, l < 32) in bits 2j, 2j+1 of
// qs[32h + l]; its group is (128h + 32j + l) / 16.
typedef struct { uint8_t scales[16]; uint8_t qs[64]; fp16_t d, dmin; } block_q2_K;
// 256 weights d * (sc[g] - 32) * (q - 4), q 3 bits: the low two as Q2_K's qs,
// the third is bit e / 32 of hmask[e % 32]; sc 6 bits, packed in scales[12]
// (see q3k_scale_words).
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; fp16_t d; } block_q3_K;
// 32 weights IQ4NL_VALUES[nibble] * d, nibbles as Q4_0.
typedef struct { fp16_t d; uint8_t qs[16]; } block_iq4_nl;
// 256 weights in 8 sub-blocks of 32: d * (ls[s] - 32) * IQ4NL_VALUES[nibble];
// ls 6 bits: the low 4 are nibble s of scales_l (low nibble first), the high 2
// bits 2s, 2s+1 of scales_h; qs[16s .. 16s+15] hold sub-block s as Q4_0's qs.
typedef struct { fp16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } block_iq4_xs;
// 32 weights MXFP4_VALUES[nibble] * 2^(e - 128), nibbles as Q4_0 (OCP MX: E2M1
// values with an E8M0 scale 2^(e - 127); ggml doubles the values, halves the scale).
typedef struct { uint8_t e; uint8_t qs[16]; } block_mxfp4;

_Static_assert(sizeof(block_q2_K) == 84, "block_q2_K");
_Static_assert(sizeof(block_q3_K) == 110, "block_q3_K");
_Static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl");
_Static_assert(sizeof(block_iq4_xs) == 136, "block_iq4_xs");
_Static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4");

// The value tables of the 4-bit codes (ggml's kvalues_iq4nl, kvalues_mxfp4).
static const int8_t IQ4NL_VALUES[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
static const int8_t MXFP4_VALUES[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

// 2^(e - 128), MXFP4's scale (subnormal for e < 2).
static inline float e8m0_half(uint8_t e) {
    return bits_f32(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

static inline uint32_t load_u32(const void *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t load_u64(const void *p) { uint64_t v; memcpy(&v, p, 8); return v; }
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
// for Q4_*, [0, 32) for Q5_*, signed for Q8_0, the table's for IQ4_NL/MXFP4.
static inline void block32_values(uint32_t type, const void *blk, int q[32]) {
    const uint8_t *qs;
    uint32_t qh = 0;
    switch (type) {
    case Q_Q8_0:
        for (int j = 0; j < 32; j++) q[j] = ((const block_q8_0 *)blk)->qs[j];
        return;
    case Q_IQ4_NL: case Q_MXFP4: {
        const int8_t *tab = type == Q_MXFP4 ? MXFP4_VALUES : IQ4NL_VALUES;
        qs = type == Q_MXFP4 ? ((const block_mxfp4 *)blk)->qs : ((const block_iq4_nl *)blk)->qs;
        for (int j = 0; j < 16; j++) q[j] = tab[qs[j] & 15], q[j + 16] = tab[qs[j] >> 4];
        return;
    }
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

// Whether a type's 4-bit codes index a value table (IQ4NL_VALUES, MXFP4_VALUES).
static inline int q_is_lut(uint32_t type) { return type == Q_IQ4_NL || type == Q_IQ4_XS || type == Q_MXFP4; }

// The scale d of a 32-element block.
static inline float block32_d(uint32_t type, const uint8_t *blk) {
    uint16_t h;
    memcpy(&h, blk, 2);
    return type == Q_MXFP4 ? e8m0_half(blk[0]) : half_f32(h);
}

// Bytes of one block of a 32-element type (a constant where type is one).
// IQ4_XS, which the unit kernels treat as one: 17, a 32nd of its 136-byte
// super-block of 8 sub-blocks.
static inline size_t block32_bytes(uint32_t type) {
    switch (type) {
    case Q_IQ4_NL: return sizeof(block_iq4_nl);
    case Q_MXFP4: return sizeof(block_mxfp4);
    case Q_IQ4_XS: return sizeof(block_iq4_xs) / 8;
    case Q_Q8_0: return sizeof(block_q8_0);
    case Q_Q4_0: return sizeof(block_q4_0);
    case Q_Q4_1: return sizeof(block_q4_1);
    case Q_Q5_0: return sizeof(block_q5_0);
    default: return sizeof(block_q5_1);
    }
}

// The 6-bit scale of sub-block s of an IQ4_XS super-block, minus 32.
static inline int iq4xs_scale(const block_iq4_xs *b, int s) {
    return (((b->scales_l[s / 2] >> 4 * (s % 2)) & 15) | ((b->scales_h >> 2 * s) & 3) << 4) - 32;
}

// The 16 group scales of a Q3_K super-block (6 bits, before subtracting 32),
// four per word: group g's low 4 bits are nibble g / 8 of scales[g % 8], its
// high 2 bits 2 (g / 4), 2 (g / 4) + 1 of scales[8 + g % 4].
static inline void q3k_scale_words(const uint8_t q[12], uint32_t w[4]) {
    const uint32_t a0 = load_u32(q), a1 = load_u32(q + 4), t = load_u32(q + 8);
    w[0] = (a0 & 0x0f0f0f0f) | (t & 0x03030303) << 4;
    w[1] = (a1 & 0x0f0f0f0f) | (t >> 2 & 0x03030303) << 4;
    w[2] = (a0 >> 4 & 0x0f0f0f0f) | (t >> 4 & 0x03030303) << 4;
    w[3] = (a1 >> 4 & 0x0f0f0f0f) | (t >> 6 & 0x03030303) << 4;
}

#if defined(Q_AVX512) || defined(Q_AVX2)
// q3k_scale_words as one vector, built in registers: a vector load of the
// words' four scalar stores stalls on store forwarding (Q3_K's one-token
// kernel ran 30% (AVX-512) and 57% (AVX2) faster without it).
static inline __m128i q3k_scale_vec(const uint8_t q[12]) {
    const __m128i a = _mm_shuffle_epi32(_mm_loadl_epi64((const __m128i *)q), 0x44);  // a0 a1 a0 a1
    const __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 4, 4)), _mm_set1_epi8(0x0f));
    const __m128i t = _mm_srlv_epi32(_mm_set1_epi32((int)load_u32(q + 8)), _mm_setr_epi32(0, 2, 4, 6));
    return _mm_or_si128(lo, _mm_slli_epi32(_mm_and_si128(t, _mm_set1_epi8(3)), 4));
}
#endif

// Group g's scale of a Q3_K super-block, minus 32.
static inline int q3k_scale(const uint32_t w[4], int g) { return (int)((w[g / 4] >> 8 * (g % 4)) & 63) - 32; }

// The 2-bit quant of element e of a Q2_K (and the low bits of a Q3_K) block.
static inline int q2_bits(const uint8_t qs[64], int e) {
    return (qs[32 * (e / 128) + e % 32] >> 2 * ((e % 128) / 32)) & 3;
}

// ---------------------------------------------------------------------------
// Activation row layouts (quant.h)
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

// Q6_K activation rows: one 384-byte record per super-block: q[256], int32
// c[16] at K16_C, float d at K16_D (six aligned cache lines, one pointer).
#define K16_BYTES 384
#define K16_C 256
#define K16_D 320

// Q4_K and Q5_K activation rows: one 320-byte record per super-block:
// q[256] with sub-block s at k4_sub_off(s), then 16 words: word 0 = d
// (float), words 8..11 = the int16 pairs (Σq of sub-block 2p, Σq of
// sub-block 2p + 1), the rest 0. The q order pairs each 64-byte vector with
// 64 bytes of the weights' qs: qs[0..63] hold sub-blocks 0 and 2 in their
// low nibbles and 1 and 3 in the high ones, so vector j = 0, 1, 2, 3 holds
// sub-blocks (0, 2), (1, 3), (4, 6), (5, 7), 32 elements each in element
// order.
#define K4_BYTES 320
#define K4_W 256       // the 16 words
#define K4_PAIRS 288   // word 8: the first bsums pair

static inline size_t k4_sub_off(int s) { return (size_t)(64 * (2 * (s >> 2) + (s & 1)) + 32 * ((s >> 1) & 1)); }

// Q4_K and Q5_K (the "K4" types) share a block's head (d, dmin, the 12
// scale bytes: block_q4_K's first fields), the activation record above and
// the float chain below; Q5_K keeps the 5th bits (qh) between head and qs.
static inline size_t k4_block_bytes(uint32_t type) { return type == Q_Q5_K ? sizeof(block_q5_K) : sizeof(block_q4_K); }
static inline size_t k4_qs_off(uint32_t type) {
    return type == Q_Q5_K ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
}
#define K4_QH_OFF offsetof(block_q5_K, qh)

// The K4 float chain (first llama.cpp's order for Q4_K, its repacked
// q4_K_8x8 kernels'): per super-block the integer sums I = Σ sc * Σ q*x and
// M = Σ mn * Σx (Σx from the activation's bsums pairs) enter two float
// accumulators, s1 with D = fp16(d) * d_x and s2 with Dm = fp16(dmin) * d_x
// (each rounded to float), one fma per super-block (one token alone: decode
// and lone tokens) or per 64 elements (gemm: tokens in full groups of 4);
// the result is s1 - s2 (dot_k4). k4_chain takes one super-block: I[p] and
// M[p] are pair p's parts of I and M (sub-blocks 2p and 2p + 1), rec its
// activation record.
static inline void k4_chain(const block_q4_K *b, const uint8_t *rec, const int32_t I[4], const int32_t M[4],
                            int gemm, float *s1, float *s2) {
    const float dx = load_f32(rec + K4_W);
    const float D = half_f32(b->d) * dx, Dm = half_f32(b->dmin) * dx;
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

// One K4 row against one token: k4_chain states the float order; ints: the
// ISA's integer sums of one block (as k4_ints_c in quant_generic.c).
typedef void (*k4_ints_fn)(uint32_t type, const uint8_t *blk, const uint8_t *rec, int32_t I[4], int32_t M[4]);
ALWAYS_INLINE float dot_k4(uint32_t type, const uint8_t *w, const uint8_t *x, int64_t n, int gemm, k4_ints_fn ints) {
    float s1 = 0.0f, s2 = 0.0f;
    for (int64_t k = 0; k < n / 256; k++, w += k4_block_bytes(type)) {
        const uint8_t *rec = x + k * K4_BYTES;
        int32_t I[4], M[4];
        ints(type, w, rec, I, M);
        k4_chain((const block_q4_K *)w, rec, I, M, gemm, &s1, &s2);
    }
    return s1 - s2;
}

// Q3_K and Q2_K (the K23 chain): one float chain per row, advanced once per
// super-block by its integer sums: I = Σ_g sc_g Σ_{e in g} q_e x_e, and for
// Q2_K M = Σ_g m_g Σ_{e in g} x_e (Q3_K: sc_g its scale - 32 and q_e its
// quant - 4; Q2_K: sc_g, m_g its scale's low and high nibble). Exact in any
// order; every build then performs these float operations.
static inline float k23_chain(uint32_t type, float acc, int32_t I, int32_t M, float d, float dmin, float dx) {
    acc = fmaf((float)I, d * dx, acc);
    return type == Q_Q2_K ? fmaf(-(float)M, dmin * dx, acc) : acc;
}

// ---------------------------------------------------------------------------
// Unit kernels: the float order every build shares
//
// Apart from Q4_K and Q5_K (above: the K4 chain) and Q3_K and Q2_K (the K23
// chain, whose unit is a super-block), a weight row is cut into units of 16
// lanes (16 blocks of 32, the 16 groups of a Q6_K super-block, 16 floats, or
// 16 pairs of bf16). Each lane runs its own
// float chain over the row's units, one fma per unit (integer dot products,
// exact in any order, times the scales), and the 16 lanes are summed at the
// end in the order of GCC's _mm512_reduce_add_ps (reduce16). The AVX-512 and
// AVX2 kernels perform these same float operations, so every build computes
// the same bits; the portable kernels (quant_generic.c) state them one lane at a
// time.
// ---------------------------------------------------------------------------

#define TILE_T 16           // tokens sharing one unpacked weight unit (register tile)

// One token (decode) streams each weight row once, and a core running the
// kernels needs more reads in flight than the hardware prefetcher issues: the
// kernels ask for each line twice as they go, DECODE_FAR bytes ahead into the
// outer caches (T2: the read from memory starts early without taking the L1's
// miss buffers for long), then DECODE_AHEAD bytes ahead into every level (T0).
// Not the non-temporal hint, though each byte is read once: on an Intel server
// core (Emerald Rapids) prefetchnta made the one-token products 1.5-1.9x
// slower, from DRAM and from the last-level cache alike. There (2-core VM, 1B
// shape) the far requests took Q4_K_M decode from 23.6 to 27-28.5 tok/s.
#define DECODE_AHEAD 8192
#define DECODE_FAR 16384

// The `bytes` that start DECODE_AHEAD (and DECODE_FAR) after p, asked for.
ALWAYS_INLINE void decode_prefetch(const uint8_t *p, size_t bytes) {
    for (size_t l = 0; l < bytes; l += 64) __builtin_prefetch(p + DECODE_AHEAD + l, 0, 3);
    for (size_t l = 0; l < bytes; l += 64) __builtin_prefetch(p + DECODE_FAR + l, 0, 1);
}

// Part i of `parts` of decode_prefetch(p, bytes) (the same lines in all):
// a kernel that asks for a block's lines a part at a time between its
// computations, not all at once, ran up to 15% faster with the weights in
// cache (Q6_K, and Q4_K's AVX2 kernel, on the Emerald Rapids VM:
// `test_quant --bench TYPE 512x2048`).
ALWAYS_INLINE void decode_prefetch_part(const uint8_t *p, size_t bytes, int i, int parts) {
    const size_t step = ((bytes + (size_t)parts - 1) / (size_t)parts + 63) & ~(size_t)63, at = (size_t)i * step;
    if (at < bytes) decode_prefetch(p + at, bytes - at < step ? bytes - at : step);
}

// What the kernels' own requests do not cover on entry: the first `all` bytes
// at p, up to DECODE_FAR, the near ones into every level and the rest outward.
ALWAYS_INLINE void decode_prefetch_head(const uint8_t *p, size_t all) {
    for (size_t l = 0; l < all && l < DECODE_AHEAD; l += 64) __builtin_prefetch(p + l, 0, 3);
    for (size_t l = DECODE_AHEAD; l < all && l < DECODE_FAR; l += 64) __builtin_prefetch(p + l, 0, 1);
}

// The Q4_K/Q5_K decode kernels (k4_decode8) read 8 rows K4_PIECE
// super-blocks at a time (8 rows x 32 x 32 B = 8 KiB of integer vectors).
#define K4_PIECE 32

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

#if defined(__AVX2__)
// A dword transposition between 8 rows' 4 dwords (v[i]: rows i and i + 4,
// 16 bytes each) and 4 vectors of 8 rows (v[k] lane r: row r's dword k),
// either way: the same operations invert it.
ALWAYS_INLINE void transpose4x8_avx2(const __m256i v[4], __m256i t[4]) {
    const __m256i a = _mm256_unpacklo_epi32(v[0], v[1]), b = _mm256_unpackhi_epi32(v[0], v[1]);
    const __m256i c = _mm256_unpacklo_epi32(v[2], v[3]), d = _mm256_unpackhi_epi32(v[2], v[3]);
    t[0] = _mm256_unpacklo_epi64(a, c);
    t[1] = _mm256_unpackhi_epi64(a, c);
    t[2] = _mm256_unpacklo_epi64(b, d);
    t[3] = _mm256_unpackhi_epi64(b, d);
}

// reduce16 of the lanes lo (0-7) and hi (8-15).
ALWAYS_INLINE float reduce16_avx2(__m256 lo, __m256 hi) {
    const __m256 h = _mm256_add_ps(hi, lo);
    __m128 s = _mm_add_ps(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// k23_chain for 8 rows in the lanes: their super-block's sums I, M and
// factors d, dmin, against one token's dx.
ALWAYS_INLINE __m256 k23_chain8(uint32_t type, __m256 acc, __m256i I, __m256i M, __m256 d, __m256 dmin, __m256 dx) {
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I), _mm256_mul_ps(d, dx), acc);
    return type == Q_Q2_K ? _mm256_fnmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(dmin, dx), acc) : acc;
}
#endif

// A tile function over the ISA kernel `kernel`, the weight type fixed.
#define TILE_FN(name, kernel, type)                                                                    \
    static void name(const uint8_t *w, int64_t n, int64_t u0, int64_t u1, const uint8_t *x, size_t xs, \
                     int tn, float *out) {                                                            \
        TILE_SWITCH(kernel, type, w, n, u0, u1, x, xs, out)                                           \
    }

// Each ISA file's tile functions and its table q_tiles_ISA (quant.c's driver
// picks the build's), over its kernels for the 32-element types (UNIT), Q6_K
// (Q6K), Q3_K and Q2_K (K23: the K23 chain), F32/F16 (FLT) and BF16 (BF16).
#define Q_TILE_TABLE(table, UNIT, Q6K, K23, FLT, BF16)                                          \
    TILE_FN(tile_q8_0, UNIT, Q_Q8_0)                                                            \
    TILE_FN(tile_q4_0, UNIT, Q_Q4_0)                                                            \
    TILE_FN(tile_q5_0, UNIT, Q_Q5_0)                                                            \
    TILE_FN(tile_q4_1, UNIT, Q_Q4_1)                                                            \
    TILE_FN(tile_q5_1, UNIT, Q_Q5_1)                                                            \
    TILE_FN(tile_q6_K, Q6K, Q_Q6_K)                                                             \
    TILE_FN(tile_q3_K, K23, Q_Q3_K)                                                             \
    TILE_FN(tile_q2_K, K23, Q_Q2_K)                                                             \
    TILE_FN(tile_iq4_nl, UNIT, Q_IQ4_NL)                                                        \
    TILE_FN(tile_iq4_xs, UNIT, Q_IQ4_XS)                                                        \
    TILE_FN(tile_mxfp4, UNIT, Q_MXFP4)                                                          \
    TILE_FN(tile_f32, FLT, Q_F32)                                                               \
    TILE_FN(tile_f16, FLT, Q_F16)                                                               \
    TILE_FN(tile_bf16, BF16, Q_BF16)                                                            \
    const tile_fn table[Q_TYPE_COUNT] = {                                                       \
        [Q_Q8_0] = tile_q8_0,   [Q_Q4_0] = tile_q4_0,     [Q_Q5_0] = tile_q5_0,                 \
        [Q_Q4_1] = tile_q4_1,   [Q_Q5_1] = tile_q5_1,     [Q_Q6_K] = tile_q6_K,                 \
        [Q_Q3_K] = tile_q3_K,   [Q_Q2_K] = tile_q2_K,     [Q_IQ4_NL] = tile_iq4_nl,             \
        [Q_IQ4_XS] = tile_iq4_xs, [Q_MXFP4] = tile_mxfp4, [Q_F32] = tile_f32,                   \
        [Q_F16] = tile_f16,     [Q_BF16] = tile_bf16,                                           \
    };

// ---------------------------------------------------------------------------
// The kernel file of the build's ISA exports, to quant.c's driver:
//   q_tiles_ISA[type]: the tile function of a unit-kernel type (every type
//     quill computes with but Q4_K and Q5_K);
//   q_matmul_k_ISA: Q4_K and Q5_K, whose kernels run their own loops: y[t *
//     ldy + r] for nr rows and nt tokens (q_matmul's arguments), tokens
//     [0, ngemm) in the gemm order (ngemm a multiple of 4; see k4_chain), the rest
//     each as one token alone.
// ---------------------------------------------------------------------------
#if defined(Q_AVX512)
#define Q_ISA(f) f##_avx512
#elif defined(Q_AVX2)
#define Q_ISA(f) f##_avx2
#else
#define Q_ISA(f) f##_generic
#endif

extern const tile_fn Q_ISA(q_tiles)[Q_TYPE_COUNT];
void Q_ISA(q_matmul_k)(uint32_t type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                       size_t xs, int nt, int ngemm, float *y, size_t ldy);

// x8 weights (quant.h, quant_x8.c). In a group's block a field of ggml's
// block starts at 8 times its offset there (the fields keep their order and
// each takes 8 rows' bytes): X8_AT(block_q6_K, qh) = 8 * 128.
#define X8_AT(T, field) (8 * offsetof(T, field))
// Where the qs of a 32-element type's block start in an x8 group's block.
static inline size_t unit_x8_qs(uint32_t type) {
    switch (type) {
    case Q_Q4_1: return X8_AT(block_q4_1, qs);
    case Q_Q5_0: return X8_AT(block_q5_0, qs);
    case Q_Q5_1: return X8_AT(block_q5_1, qs);
    case Q_MXFP4: return X8_AT(block_mxfp4, qs);
    case Q_IQ4_NL: return X8_AT(block_iq4_nl, qs);
    case Q_Q8_0: return X8_AT(block_q8_0, qs);
    case Q_IQ4_XS: return X8_AT(block_iq4_xs, qs);
    default: return X8_AT(block_q4_0, qs);
    }
}
// Block b (lane b % 16 of unit b / 16) of a 32-element type's x8 group at
// g: the group's block that holds it (IQ4_XS: the super-block, of which b
// is sub-block b % 8), and where its qs start.
static inline const uint8_t *unit_x8_block(uint32_t type, const uint8_t *g, int64_t b) {
    if (type == Q_IQ4_XS) return g + (size_t)(b / 8) * 8 * sizeof(block_iq4_xs);
    return g + (size_t)b * 8 * block32_bytes(type);
}
static inline const uint8_t *unit_x8_qs_of(uint32_t type, const uint8_t *g, int64_t b) {
    return unit_x8_block(type, g, b) + unit_x8_qs(type) + (type == Q_IQ4_XS ? (size_t)8 * 16 * (b % 8) : 0);
}
// Q5_0's and Q5_1's qh in an x8 group: per row a dword whose
// byte j holds in bit v the 5th bit of weight 4v + j (ggml's qh: bit 4v +
// j), so a vector of 8 rows' weights 4v .. 4v+3 takes its 5th bits by one
// shift of the 8 rows' qh (quant_x8.c converts).
// Q5_K's block in an x8 group: d, dmin and scales as in block_q5_K, then the
// row's 5-bit weights as five planes of 32 bytes, which take fewer
// operations to take apart than qs and qh. Byte l of plane i holds element
// l of sub-block i (i < 5) in bits 0-4; bits 5-7 of the planes hold
// sub-blocks 5-7: v5 = p0 >> 5 | (p1 >> 5 & 3) << 3, v6 = p2 >> 5 |
// (p3 >> 5 & 3) << 3, v7 = p4 >> 5 | (p1 >> 7) << 3 | (p3 >> 7) << 4
// (quant_x8.c converts).
typedef struct { fp16_t d, dmin; uint8_t scales[12]; uint8_t p[5][32]; } q5k_planes;
_Static_assert(sizeof(q5k_planes) == sizeof(block_q5_K), "q5k_planes");
// Q3_K's block in an x8 group: its 3-bit weights (2 bits of qs, 1 of
// hmask) as three planes of 32 bytes, then scales and d as in block_q3_K.
// Byte l of the planes holds element l of sub-block s: s = 0, 1 in bits
// 0-2, 3-5 of plane 0, s = 2, 3 of plane 1, s = 4, 5 of plane 2; s = 6 as
// bits 6-7 of plane 0 and bit 6 of plane 2 (its third bit), s = 7 as bits
// 6-7 of plane 1 and bit 7 of plane 2 (quant_x8.c converts).
typedef struct { uint8_t p[3][32]; uint8_t scales[12]; fp16_t d; } q3k_planes;
_Static_assert(sizeof(q3k_planes) == sizeof(block_q3_K), "q3k_planes");
// Q6_K's block in the AVX2 build's x8 groups (X8_Q6K_PLANES): its 6-bit
// weights four in three bytes, then scales and d as in block_q6_K. Group g
// (elements 16g .. 16g+15) takes the 12 bytes p[g]: byte 4t + e (t < 3,
// e < 4) holds element 16g + 4t + e in bits 0-5 and bits 2t, 2t+1 of
// element 16g + 12 + e in bits 6-7. A vector of 8 rows' weights comes apart
// in one operation (elements 4t .. 4t+3) or eight (12 .. 15), against about
// four from ql and qh (quant_x8.c converts). The AVX-512 build keeps
// ggml's fields: its prompts unpack Q6_K's x8 rows into ggml's layout.
typedef struct { uint8_t p[16][12]; int8_t scales[16]; fp16_t d; } q6k_planes;
_Static_assert(sizeof(q6k_planes) == sizeof(block_q6_K), "q6k_planes");
#if defined(Q_AVX2)
#define X8_Q6K_PLANES 1
#else
#define X8_Q6K_PLANES 0
#endif
// The AVX2 build's x8 kernels (quant_avx2.c):
//   q_tiles8_avx2[type]: as a tile function, for the 8 rows of the group at
//     w (out[8 t + r]: token t, row r), for the unit-kernel types of the layout;
//   q_matmul_k_x8_avx2: as q_matmul_k, rows [lo, lo + nr) of the x8 matrix
//     whose group 0 starts at w8 (lo < 8).
// Products without x8 kernels (quant.c's x8_kernels) go through
// x8_matmul_unpacked (quant_x8.c: q_matmul_x8's arguments), which unpacks
// the rows into ggml's layout for q_matmul.
#if defined(Q_AVX2)
extern const tile_fn q_tiles8_avx2[Q_TYPE_COUNT];
void q_matmul_k_x8_avx2(uint32_t type, int64_t n, const uint8_t *w8, int lo, int nr, const uint8_t *x, size_t xs,
                        int nt, int ngemm, float *y, size_t ldy);
#endif
// The AVX-512 build's x8 kernels (quant_avx512.c):
//   q_tiles16_avx512[type] (the 32-element types, Q2_K, Q3_K): for two or more tokens, a tile
//     function over the groups a and b, 16 rows in the lanes (out[16 t + r]:
//     token t, row r; rows 8-15 are b's), fetching the two groups from next
//     on as it goes (NULL: none);
//   q_decode8_avx512[type] (the 32-element types, Q2_K, Q3_K, Q6_K): for one token, as
//     q_tiles8_avx2 (tn is 1);
//   q_matmul_k_x8_avx512: as q_matmul_k_x8_avx2, for Q4_K.
typedef void (*tile16_fn)(const uint8_t *a, const uint8_t *b, const uint8_t *next, int64_t n, int64_t u0, int64_t u1,
                          const uint8_t *x, size_t xs, int tn, float *out);
#if defined(Q_AVX512)
extern const tile16_fn q_tiles16_avx512[Q_TYPE_COUNT];
extern const tile_fn q_decode8_avx512[Q_TYPE_COUNT];
void q_matmul_k_x8_avx512(uint32_t type, int64_t n, const uint8_t *w8, int lo, int nr, const uint8_t *x, size_t xs,
                          int nt, int ngemm, float *y, size_t ldy);
#endif
int x8_matmul_unpacked(uint32_t type, int64_t n, const void *w8, int64_t r0, int nr, const void *xq, size_t xs,
                       int nt, int nt_joint, float *y, size_t ldy);

#endif
