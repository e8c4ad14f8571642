// quant_avx2.c — the AVX2 kernels, for machines without AVX-512, on
// ggml's rows and on the x8 layout (quant_x8.c) (quant_impl.h; empty in
// builds for other ISAs).
//
// The unit kernels perform the float operations of quant_avx512.c's on 2 × 8
// lanes (lo: lanes 0-7, hi: lanes 8-15). Integer dot products use
// VPMADDUBSW/VPMADDWD, whose pair sums stay within int16 for every weight
// range here, or AVX-VNNI's 256-bit VPDPBUSD/VPDPWSSD where the build has
// them (-mavxvnni: Intel's client CPUs since Alder Lake have AVX-VNNI but
// no AVX-512). Integer sums are exact in any order: every variant computes
// the same bits.
#include "quant_impl.h"

#if defined(Q_AVX2)

// AVX-VNNI's 256-bit VPDPBUSD and VPDPWSSD
#if defined(__AVXVNNI__)
#define DPBUSD256 _mm256_dpbusd_avx_epi32
#define DPWSSD256 _mm256_dpwssd_avx_epi32
#endif

// Dwords of rows: lane l of t[k] = dword k of the 16 bytes at p[l] (p[0..3]
// in the low 128 bits, p[4..7] in the high), k < 4.
ALWAYS_INLINE void transpose8x4(const uint8_t *const p[8], __m256i t[4]) {
    __m256i r[4];
    for (int i = 0; i < 4; i++)
        r[i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)p[i])),
                                       _mm_loadu_si128((const __m128i *)p[i + 4]), 1);
    transpose4x8_avx2(r, t);
}

// acc + Σ over 4 bytes per dword of u * s (u unsigned, s signed; |pair sums| < 2^15).
ALWAYS_INLINE __m256i dot_u8s8(__m256i acc, __m256i u, __m256i s) {
#if defined(DPBUSD256)
    return DPBUSD256(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

// Σ_v dot_u8s8 of u[v] and s[v], v < n: without VNNI, `run` VPMADDUBSW
// results at a time add up in int16 first (the caller's bound keeps them
// below 2^15).
ALWAYS_INLINE __m256i dots_u8s8(const __m256i *u, const __m256i *s, int n, int run) {
    __m256i i = _mm256_setzero_si256();
#if defined(DPBUSD256)
    (void)run;
    for (int v = 0; v < n; v++) i = dot_u8s8(i, u[v], s[v]);
#else
    for (int v0 = 0; v0 < n; v0 += run) {
        __m256i p = _mm256_maddubs_epi16(u[v0], s[v0]);
        for (int v = v0 + 1; v < v0 + run; v++) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(u[v], s[v]));
        i = _mm256_add_epi32(i, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
    }
#endif
    return i;
}

// Half h (8 blocks) of a 32-element unit: q[v] lane l = weights 4v..4v+3 of
// block l, signed for Q8_0 and as q (unsigned) otherwise; d (and m) as floats.
typedef struct {
    __m256i q[8];
    __m256 d, m;
} half_regs;

// 2^(e - 128) of 8 exponents e (as e8m0_half).
ALWAYS_INLINE __m256 mxfp4_pow2_avx2(__m256i e) {
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e)));
}

// IQ4_XS's 6-bit scales minus 32 (iq4xs_scale) of sub-block s of each
// lane: l lane: its super-block's scales_l, h: its scales_h.
ALWAYS_INLINE __m256i iq4xs_ls_avx2(__m256i l, __m256i h, __m256i s) {
    const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(l, _mm256_slli_epi32(s, 2)), _mm256_set1_epi32(15));
    const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(h, _mm256_slli_epi32(s, 1)), _mm256_set1_epi32(3));
    return _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
}

// The table types (IQ4_NL, MXFP4, IQ4_XS): half h of a unit as half_unpack
// gives it, q = the codes' values (signed, as Q8_0's), d (m unused). For
// IQ4_XS the 8 blocks are a super-block's sub-blocks.
ALWAYS_INLINE void lut_half_unpack(uint32_t type, const uint8_t *blocks, half_regs *r) {
    const uint8_t *p[8];
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    if (type == Q_IQ4_XS) {
        const block_iq4_xs *b = (const block_iq4_xs *)blocks;
        for (int l = 0; l < 8; l++) p[l] = b->qs + 16 * l;
        const __m256i ls = iq4xs_ls_avx2(_mm256_set1_epi32((int)load_u32(b->scales_l)), _mm256_set1_epi32(b->scales_h), lane);
        r->d = _mm256_mul_ps(_mm256_set1_ps(half_f32(b->d)), _mm256_cvtepi32_ps(ls));
    } else if (type == Q_MXFP4) {
        uint32_t e[8];
        for (int l = 0; l < 8; l++) p[l] = blocks + l * sizeof(block_mxfp4) + 1, e[l] = blocks[l * sizeof(block_mxfp4)];
        r->d = mxfp4_pow2_avx2(_mm256_loadu_si256((const __m256i *)e));
    } else {
        uint16_t d[8];
        for (int l = 0; l < 8; l++) p[l] = blocks + l * sizeof(block_iq4_nl) + 2, memcpy(&d[l], blocks + l * sizeof(block_iq4_nl), 2);
        r->d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
    }
    r->m = _mm256_setzero_ps();
    __m256i z[4];
    transpose8x4(p, z);
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(type == Q_MXFP4 ? MXFP4_VALUES : IQ4NL_VALUES)));
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int v = 0; v < 4; v++) {
        r->q[v] = _mm256_shuffle_epi8(tab, _mm256_and_si256(z[v], m4));
        r->q[v + 4] = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(z[v], 4), m4));
    }
}

ALWAYS_INLINE void half_unpack(uint32_t type, const uint8_t *blocks, half_regs *r) {
    if (q_is_lut(type)) {
        lut_half_unpack(type, blocks, r);
        return;
    }
    const size_t bs = block32_bytes(type);
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
    __m256i x[8];
    for (int v = 0; v < 8; v++) x[v] = _mm256_loadu_si256((const __m256i *)(a + 64 * v + 32 * h));
    __m256i i;
    if (type == Q_Q8_0 || q_is_lut(type)) {  // signed weights: |w| times x with w's sign
        __m256i i0 = _mm256_setzero_si256(), i1 = _mm256_setzero_si256();
        for (int v = 0; v < 8; v += 2) {
            i0 = dot_u8s8(i0, _mm256_sign_epi8(r->q[v], r->q[v]), _mm256_sign_epi8(x[v], r->q[v]));
            i1 = dot_u8s8(i1, _mm256_sign_epi8(r->q[v + 1], r->q[v + 1]), _mm256_sign_epi8(x[v + 1], r->q[v + 1]));
        }
        i = _mm256_add_epi32(i0, i1);
    } else {  // unsigned weights: int16 sums of 16 products of 4-bit weights, 8 of 5-bit ones (|x| <= 127)
        i = dots_u8s8(r->q, x, 8, type == Q_Q5_0 || type == Q_Q5_1 ? 4 : 8);
    }
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
    const size_t bs = block32_bytes(type);
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


// The integer dots of half h (groups 8h..8h+7) of a K16 record r with Q6_K's
// quants q[v] (lane g: its 4v..4v+3; in int16, two VPMADDUBSW results add up).
ALWAYS_INLINE __m256i q6k_dots_avx2(const __m256i q[4], const uint8_t *r, int h) {
    __m256i x[4];
    for (int v = 0; v < 4; v++) x[v] = _mm256_loadu_si256((const __m256i *)(r + 64 * v + 32 * h));
    return dots_u8s8(q, x, 4, 2);
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
        a[h] = _mm256_mul_ps(sc, _mm256_set1_ps(half_f32(b->d)));
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
                const __m256i i = _mm256_add_epi32(q6k_dots_avx2(q[h], r, h),
                                                   _mm256_loadu_si256((const __m256i *)(r + K16_C + 32 * h)));
                acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(a[h], dx), acc[t][h]);
            }
        }
    }
    for (int t = 0; t < NT; t++) out[t] = reduce16_avx2(acc[t][0], acc[t][1]);
}


// Q3_K, Q2_K (the K23 chain, quant_impl.h): q[h][v] lane g = the unsigned
// quants 16(8h + g) + 4v .. + 3; sc[h] lane g = group 8h + g's scale as two
// int16 (Q3_K's less 32), m[h] (Q2_K) its min as one. Group 8h + 2j + l16's
// 2-bit quants are bits 2j of the half's qs dwords 4 l16 + v; Q3_K's third bit
// is bit 4h + j of hmask dwords 4 l16 + v.
ALWAYS_INLINE void k23_unpack_avx2(uint32_t type, const uint8_t *blk, __m256i q[2][4], __m256i sc[2], __m256i m[2]) {
    const __m256i idx = _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4), sh = _mm256_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6);
    const __m256i hsh = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
    const uint8_t *qs = type == Q_Q2_K ? ((const block_q2_K *)blk)->qs : ((const block_q3_K *)blk)->qs;
    for (int h = 0; h < 2; h++) {
        const __m256i Q = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
        for (int v = 0; v < 4; v++) {
            const __m256i iv = _mm256_add_epi32(idx, _mm256_set1_epi32(v));
            q[h][v] = _mm256_and_si256(_mm256_srlv_epi32(_mm256_permutevar8x32_epi32(Q, iv), sh), _mm256_set1_epi8(3));
            if (type == Q_Q3_K) {
                const __m256i H = _mm256_loadu_si256((const __m256i *)((const block_q3_K *)blk)->hmask);
                const __m256i hb = _mm256_and_si256(
                    _mm256_srlv_epi32(_mm256_permutevar8x32_epi32(H, iv), _mm256_add_epi32(hsh, _mm256_set1_epi32(4 * h))),
                    _mm256_set1_epi8(1));
                q[h][v] = _mm256_or_si256(q[h][v], _mm256_slli_epi32(hb, 2));
            }
        }
    }
    const __m128i s16 = type == Q_Q3_K ? q3k_scale_vec(((const block_q3_K *)blk)->scales) : _mm_setzero_si128();
    for (int h = 0; h < 2; h++) {
        __m256i s;
        if (type == Q_Q3_K) {
            s = _mm256_sub_epi32(_mm256_cvtepu8_epi32(h ? _mm_srli_si128(s16, 8) : s16), _mm256_set1_epi32(32));
        } else {
            const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(((const block_q2_K *)blk)->scales + 8 * h)));
            s = _mm256_and_si256(b, _mm256_set1_epi32(15));
            m[h] = _mm256_srli_epi32(b, 4);
        }
        sc[h] = _mm256_or_si256(_mm256_and_si256(s, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(s, 16));
    }
}

// The sums of 8 int32 lanes of a and of b.
ALWAYS_INLINE void hsum2_epi32(__m256i a, __m256i b, int32_t *sa, int32_t *sb) {
    const __m256i p = _mm256_hadd_epi32(a, b);  // a01 a23 b01 b23 | a45 a67 b45 b67
    const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
    const __m128i t = _mm_hadd_epi32(s, s);     // a, b, a, b
    *sa = _mm_cvtsi128_si32(t), *sb = _mm_extract_epi32(t, 1);
}

ALWAYS_INLINE void k23_tile_avx2(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                                 const uint8_t *x, size_t xs, float *out, const int NT) {
    (void)n;
    const size_t bs = type == Q_Q2_K ? sizeof(block_q2_K) : sizeof(block_q3_K);
    float acc[TILE_T];
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    for (int64_t u = u0; u < u1; u++) {
        const uint8_t *blk = w + (size_t)u * bs;
        __m256i q[2][4], sc[2], m[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
        k23_unpack_avx2(type, blk, q, sc, m);
        const float d = half_f32(type == Q_Q2_K ? ((const block_q2_K *)blk)->d : ((const block_q3_K *)blk)->d);
        const float dmin = type == Q_Q2_K ? half_f32(((const block_q2_K *)blk)->dmin) : 0.0f;
        for (int t = 0; t < NT; t++) {
            const uint8_t *r = x + (size_t)t * xs + (size_t)u * K16_BYTES;
            __m256i I = _mm256_setzero_si256(), M = _mm256_setzero_si256();
            for (int h = 0; h < 2; h++) {
                const __m256i c = _mm256_loadu_si256((const __m256i *)(r + K16_C + 32 * h));
                __m256i p = _mm256_setzero_si256();  // int16: 8 products of 3-bit quants (<= 7112), c (|c| <= 8128)
                for (int v = 0; v < 4; v++)
                    p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q[h][v], _mm256_loadu_si256((const __m256i *)(r + 64 * v + 32 * h))));
                if (type == Q_Q3_K) p = _mm256_add_epi16(p, _mm256_and_si256(c, _mm256_set1_epi32(0xFFFF)));
                I = _mm256_add_epi32(I, _mm256_madd_epi16(p, sc[h]));
                if (type == Q_Q2_K) M = _mm256_add_epi32(M, _mm256_madd_epi16(m[h], c));  // m * c (|c| <= 2032)
            }
            int32_t Is, Ms;
            hsum2_epi32(I, M, &Is, &Ms);
            acc[t] = k23_chain(type, acc[t], Is, Ms, d, dmin, load_f32(r + K16_D));
        }
    }
    for (int t = 0; t < NT; t++) out[t] = acc[t];
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


// Q4_K and Q5_K for one token (decode): k4_decode8_avx2 below.

// Bit s of each byte of qh moved to bit 4 (the 5th bit of sub-block s's weights).
ALWAYS_INLINE __m256i k4_bit4_avx2(__m256i qh, int s) {
    const __m256i hb = s < 4 ? _mm256_slli_epi16(qh, 4 - s) : _mm256_srli_epi16(qh, s - 4);
    return _mm256_and_si256(hb, _mm256_set1_epi8(0x10));
}

// One row's integers of one super-block (blk) against one token's record:
// lanes 0..3 of the result sum to I, lanes 4..7 to M (k4_chain). The 6-bit
// scales unpack in one 128-bit vector (as q4k_scales4 does per lane):
// bytes 0..7 = sc[0..7], 8..15 = mn[0..7].
ALWAYS_INLINE __m256i k4_row_avx2(uint32_t type, const uint8_t *blk, const uint8_t *rec) {
    const __m128i z = _mm_loadu_si128((const __m128i *)blk);  // d | dmin << 16, then the 12 scale bytes
    const __m128i p = _mm_srlv_epi32(_mm_shuffle_epi32(z, _MM_SHUFFLE(3, 2, 3, 1)), _mm_setr_epi32(0, 0, 0, 4));
    const __m128i q = _mm_srlv_epi32(_mm_shuffle_epi32(z, _MM_SHUFFLE(2, 2, 1, 1)), _mm_setr_epi32(0, 2, 0, 2));
    const __m128i s = _mm_or_si128(_mm_and_si128(p, _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)),
                                   _mm_and_si128(q, _mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
    const __m256i sc = _mm256_broadcastsi128_si256(s);
    // M: the mins (int16, upper 128 bits) against the K4_PAIRS words (the lower 128 bits face zeros)
    const __m256i M = _mm256_madd_epi16(_mm256_cvtepu8_epi16(s), _mm256_loadu_si256((const __m256i *)(rec + K4_PAIRS - 16)));
    const __m256i m4 = _mm256_set1_epi8(15);
    const uint8_t *qs = blk + k4_qs_off(type);
    const __m256i qh = type == Q_Q5_K ? _mm256_loadu_si256((const __m256i *)(blk + K4_QH_OFF)) : _mm256_setzero_si256();
    __m256i I = _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {  // sub-blocks 2c (low nibbles of qs[32c..]) and 2c + 1 (high)
        const __m256i w = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i wlo = _mm256_and_si256(w, m4), whi = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
        if (type == Q_Q5_K) {
            wlo = _mm256_or_si256(wlo, k4_bit4_avx2(qh, 2 * c));
            whi = _mm256_or_si256(whi, k4_bit4_avx2(qh, 2 * c + 1));
        }
        const __m256i xlo = _mm256_loadu_si256((const __m256i *)(rec + k4_sub_off(2 * c)));
        const __m256i xhi = _mm256_loadu_si256((const __m256i *)(rec + k4_sub_off(2 * c + 1)));
#if defined(DPBUSD256)
        // 4-element sums (|.| <= 4 * 31 * 127: int16) of both sub-blocks packed, against
        // [sc[2c] x 4, sc[2c + 1] x 4] in each 128-bit lane (zero high bytes)
        const __m256i P = _mm256_packs_epi32(DPBUSD256(_mm256_setzero_si256(), wlo, xlo),
                                             DPBUSD256(_mm256_setzero_si256(), whi, xhi));
        const short slo = (short)(2 * c | 0x8000), shi = (short)((2 * c + 1) | 0x8000);
        const __m256i s2 = _mm256_shuffle_epi8(sc, _mm256_setr_epi16(slo, slo, slo, slo, shi, shi, shi, shi, slo, slo, slo, slo, shi, shi, shi, shi));
        I = DPWSSD256(I, P, s2);
#else
        // sc[s] in every int16 (a zero high byte)
        const __m256i s_lo = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)(2 * c | 0x8000)));
        const __m256i s_hi = _mm256_shuffle_epi8(sc, _mm256_set1_epi16((short)((2 * c + 1) | 0x8000)));
        I = _mm256_add_epi32(I, _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wlo, xlo), s_lo),
                                                 _mm256_madd_epi16(_mm256_maddubs_epi16(whi, xhi), s_hi)));
#endif
    }
    return _mm256_blend_epi32(_mm256_add_epi32(I, _mm256_permute2x128_si256(I, I, 0x01)), M, 0xf0);
}

// Sums of 8 rows' vectors (k4_row_avx2's): t[0] = I of rows 0-3 | M of
// rows 0-3, t[1] the same of rows 4-7.
ALWAYS_INLINE void k4_reduce8_avx2(const __m256i V[8], __m256i t[2]) {
    for (int g = 0; g < 2; g++) {
        __m256i S[2];
        for (int i = 0; i < 2; i++) {  // per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] of rows a, b
            const __m256i a = V[4 * g + 2 * i], b = V[4 * g + 2 * i + 1];
            S[i] = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
        }
        t[g] = _mm256_add_epi32(_mm256_unpacklo_epi64(S[0], S[1]), _mm256_unpackhi_epi64(S[0], S[1]));
    }
}

// y[r] for rows r < nvalid of 8 (rows[] holds 8 pointers) and one token x,
// as quant_avx512.c's k4_decode8: the rows read one after another, K4_PIECE
// blocks at a time, then each block's 8 integer vectors reduced into the
// rows' float chains (lanes: s1 of 4 rows | s2 of the same rows).
ALWAYS_INLINE void k4_decode8_avx2(uint32_t type, const uint8_t *const rows[8], int nvalid, int64_t n,
                                   const uint8_t *x, float *y) {
    // the d halves of 4 rows' d | dmin << 16 dwords, then their dmin halves (in each 128-bit lane)
    const __m256i dsel = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
    const size_t bb = k4_block_bytes(type);
    const int64_t nb = n / 256;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t k0 = 0; k0 < nb; k0 += K4_PIECE) {
        const int kn = nb - k0 < K4_PIECE ? (int)(nb - k0) : K4_PIECE;
        __m256i V[K4_PIECE][8];
        for (int r = 0; r < 8; r++)
            for (int k = 0; k < kn; k++) {
                const uint8_t *blk = rows[r] + (size_t)(k0 + k) * bb;
                decode_prefetch(blk, 3 * 64);
                V[k][r] = k4_row_avx2(type, blk, x + (size_t)(k0 + k) * K4_BYTES);
            }
        for (int k = 0; k < kn; k++) {
            const size_t off = (size_t)(k0 + k) * bb;
            const __m256i h = _mm256_shuffle_epi8(
                _mm256_setr_epi32((int)load_u32(rows[0] + off), (int)load_u32(rows[1] + off), (int)load_u32(rows[2] + off),
                                  (int)load_u32(rows[3] + off), (int)load_u32(rows[4] + off), (int)load_u32(rows[5] + off),
                                  (int)load_u32(rows[6] + off), (int)load_u32(rows[7] + off)),
                dsel);
            const __m256 dx = _mm256_set1_ps(load_f32(x + (size_t)(k0 + k) * K4_BYTES + K4_W));
            __m256i t[2];
            k4_reduce8_avx2(V[k], t);
            acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[0]), _mm256_mul_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(h)), dx), acc[0]);
            acc[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t[1]), _mm256_mul_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)), dx), acc[1]);
        }
    }
    float out[8];
    _mm256_storeu_ps(out, _mm256_sub_ps(_mm256_permute2f128_ps(acc[0], acc[1], 0x20), _mm256_permute2f128_ps(acc[0], acc[1], 0x31)));
    memcpy(y, out, sizeof(float) * (size_t)nvalid);
}

// The integer-sum operands of one super-block of 8 Q4_K or Q5_K rows, for
// VPMADDWD: sc[s] lane r = row r's scale of sub-block s in both int16
// halves, mn[p] lane r = its mins of sub-blocks 2p, 2p + 1; d, dmin as floats.
typedef struct {
    __m256i sc[8], mn[4];
    __m256 d, dmin;
} k_scales8;

// w[i] lane r = row r's scale bytes 4i..4i+3 (k4_scale_words on 8 rows at
// once); d, dmin: the rows' halves in order.
ALWAYS_INLINE void k_scales8_make(const __m256i w[3], __m128i d, __m128i dmin, k_scales8 *o) {
    const __m256i m6 = _mm256_set1_epi8(0x3f), m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
    const __m256i S[2] = {_mm256_and_si256(w[0], m6),  // scales 0-3, 4-7: a byte each
                          _mm256_or_si256(_mm256_and_si256(w[2], m4), _mm256_and_si256(_mm256_srli_epi32(w[0], 2), m2))};
    const __m256i N[2] = {_mm256_and_si256(w[1], m6),  // mins 0-3, 4-7
                          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w[2], 4), m4),
                                          _mm256_and_si256(_mm256_srli_epi32(w[1], 2), m2))};
    // byte b of each dword into its two int16 halves (0x80 + b: a zero byte)
    const __m256i dup = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, -128, 0, -128, 4, -124, 4, -124, 8, -120, 8, -120, 12, -116, 12, -116));
    for (int s = 0; s < 8; s++) o->sc[s] = _mm256_shuffle_epi8(S[s / 4], _mm256_add_epi8(dup, _mm256_set1_epi8((char)(s % 4))));
    // bytes b, b + 1 of each dword into its int16 halves
    const __m256i pair = _mm256_broadcastsi128_si256(
        _mm_setr_epi8(0, -128, 1, -127, 4, -124, 5, -123, 8, -120, 9, -119, 12, -116, 13, -115));
    for (int p = 0; p < 4; p++) o->mn[p] = _mm256_shuffle_epi8(N[p / 2], _mm256_add_epi8(pair, _mm256_set1_epi8((char)(2 * (p % 2)))));
    o->d = _mm256_cvtph_ps(d);
    o->dmin = _mm256_cvtph_ps(dmin);
}

// Where super-block k of the x8 group at g8 starts (quant_x8.c: its bytes
// come in the order the lanes take them).
ALWAYS_INLINE const uint8_t *k4_x8_block(uint32_t type, const uint8_t *g8, int64_t k) {
    return g8 + (size_t)k * 8 * k4_block_bytes(type);
}

// k_scales8 of super-block k of 8 rows: ggml's rows (rows[r]; g8 NULL), or
// the x8 group at g8.
ALWAYS_INLINE void k4_scales8_avx2(uint32_t type, const uint8_t *const rows[8], const uint8_t *g8, int64_t k, k_scales8 *o) {
    if (g8) {
        const uint8_t *b = k4_x8_block(type, g8, k);
        const uint8_t *sc = b + X8_AT(block_q4_K, scales);
        const __m256i w[3] = {_mm256_loadu_si256((const __m256i *)sc), _mm256_loadu_si256((const __m256i *)(sc + 32)),
                              _mm256_loadu_si256((const __m256i *)(sc + 64))};
        k_scales8_make(w, _mm_loadu_si128((const __m128i *)b), _mm_loadu_si128((const __m128i *)(b + X8_AT(block_q4_K, dmin))), o);
        return;
    }
    const uint8_t *p[8];  // the 16-byte heads: d | dmin << 16, then the scale words
    for (int r = 0; r < 8; r++) p[r] = rows[r] + (size_t)k * k4_block_bytes(type);
    __m256i t[4];
    transpose8x4(p, t);
    // per 128-bit lane the d halves of 4 rows, then their dmin halves; then d of 8 rows | dmin of 8 rows
    const __m256i h = _mm256_permute4x64_epi64(
        _mm256_shuffle_epi8(t[0], _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15))),
        _MM_SHUFFLE(3, 1, 2, 0));
    k_scales8_make(t + 1, _mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1), o);
}

// raw[v] lane r = dword v of row r's qs[32c .. 32c + 31] (v < 8); Q5_K's qh
// on ggml's rows (c < 0): dword v of its qh. (g8: Q4_K's x8 group.)
ALWAYS_INLINE void k4_dwords8_avx2(uint32_t type, const uint8_t *const rows[8], const uint8_t *g8, int64_t k, int c,
                                   __m256i raw[8]) {
    if (g8) {
        const uint8_t *v0 = k4_x8_block(type, g8, k) + 8 * (k4_qs_off(type) + 32 * (size_t)c);
        for (int v = 0; v < 8; v++) raw[v] = _mm256_loadu_si256((const __m256i *)(v0 + 32 * v));
        return;
    }
    const uint8_t *p[8], *p2[8];
    for (int r = 0; r < 8; r++)
        p[r] = rows[r] + (size_t)k * k4_block_bytes(type) + (c < 0 ? K4_QH_OFF : k4_qs_off(type) + 32 * (size_t)c), p2[r] = p[r] + 16;
    transpose8x4(p, raw);
    transpose8x4(p2, raw + 4);
}

// Q5_K's x8 planes (q5k_planes) in group block blk: lane r = row r's 5-bit
// weights 4v .. 4v+3 of sub-block s.
ALWAYS_INLINE __m256i q5k_planes8_avx2(const uint8_t *blk, int s, int v) {
    const uint8_t *p = blk + X8_AT(q5k_planes, p) + 32 * v;  // plane i at + 256 i
#define PLANE(i) _mm256_loadu_si256((const __m256i *)(p + 256 * (i)))
#define BITS(i, sh, m) _mm256_and_si256(_mm256_srli_epi16(PLANE(i), sh), _mm256_set1_epi8(m))
    if (s < 5) return _mm256_and_si256(PLANE(s), _mm256_set1_epi8(31));
    if (s < 7) return _mm256_or_si256(BITS(2 * (s - 5), 5, 7), BITS(2 * (s - 5) + 1, 2, 0x18));
    return _mm256_or_si256(_mm256_or_si256(BITS(4, 5, 7), BITS(1, 4, 8)), BITS(3, 3, 0x10));
#undef BITS
#undef PLANE
}

// acc + VPMADDWD(a, b) (one VPDPWSSD where the build has AVX-VNNI).
ALWAYS_INLINE __m256i madd_acc(__m256i acc, __m256i a, __m256i b) {
#if defined(DPBUSD256)
    return DPWSSD256(acc, a, b);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// Chunk c (sub-blocks 2c, 2c + 1) of super-block k for NT tokens (u: the
// first token's record of k), in k4_rows8_avx2's integer sums and chains
// (qh: Q5_K's on ggml's rows).
ALWAYS_INLINE void k4_chunk8_avx2(uint32_t type, const uint8_t *const rows[8], const uint8_t *g8, int64_t k, int c,
                                  const __m256i qh[8], const k_scales8 *ks, const uint8_t *u, size_t xs, int gemm,
                                  __m256i I[], __m256i M[], __m256 s1[], __m256 s2[], const int NT) {
    const int run = type == Q_Q5_K ? 4 : 8;
    const int planes = type == Q_Q5_K && g8;  // Q5_K's x8 group: q5k_planes
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256i raw[8];  // raw[v] lane r: dword v of row r's 32 qs bytes
    if (!planes) k4_dwords8_avx2(type, rows, g8, k, c, raw);
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
        const int s = 2 * c + h;
        __m256i nib[8];
        for (int v = 0; v < 8; v++) {
            if (planes) {
                nib[v] = q5k_planes8_avx2(k4_x8_block(type, g8, k), s, v);
                continue;
            }
            nib[v] = _mm256_and_si256(h ? _mm256_srli_epi16(raw[v], 4) : raw[v], m4);
            if (type == Q_Q5_K) nib[v] = _mm256_or_si256(nib[v], k4_bit4_avx2(qh[v], s));
        }
        for (int t = 0; t < NT; t++) {
            const uint8_t *a = u + (size_t)t * xs + k4_sub_off(s);  // dword v: elements 4v..4v+3
            for (int v0 = 0; v0 < 8; v0 += run) {
                __m256i acc = _mm256_maddubs_epi16(nib[v0], _mm256_set1_epi32((int)load_u32(a + 4 * v0)));
                for (int v = v0 + 1; v < v0 + run; v++)
                    acc = _mm256_add_epi16(acc, _mm256_maddubs_epi16(nib[v], _mm256_set1_epi32((int)load_u32(a + 4 * v))));
                I[t] = madd_acc(I[t], acc, ks->sc[s]);
            }
        }
    }
    for (int t = 0; t < NT; t++)
        M[t] = madd_acc(M[t], ks->mn[c], _mm256_set1_epi32((int)load_u32(u + (size_t)t * xs + K4_PAIRS + 4 * c)));
    if (gemm || c == 3) {
        for (int t = 0; t < NT; t++) {
            const __m256 dx = _mm256_set1_ps(load_f32(u + (size_t)t * xs + K4_W));
            s1[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I[t]), _mm256_mul_ps(ks->d, dx), s1[t]);
            s2[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M[t]), _mm256_mul_ps(ks->dmin, dx), s2[t]);
            I[t] = M[t] = _mm256_setzero_si256();
        }
    }
}

// Q4_K and Q5_K, 8 rows in the lanes, each running dot_k4's float chain (as
// k4_rows_n does with 16), for NT tokens; the rows are ggml's (rows[]) or an
// x8 group (g8; Q5_K's as q5k_planes). Integer sums: per sub-block, the
// VPMADDUBSW results add up in int16, 8 at a time for 4-bit weights, 4 for
// 5-bit ones (|sum| <= 8 * 2 * 15 * 128, 4 * 2 * 31 * 128 < 2^15), then
// VPMADDWD applies each row's scale. y[t * ldy + r - lo] for rows r in [lo, hi) and NT tokens, in gemm
// (per 64 elements) or gemv (per super-block) order.
ALWAYS_INLINE void k4_rows8_avx2(uint32_t type, const uint8_t *const rows[8], const uint8_t *g8, int lo, int hi, int64_t n,
                                 const uint8_t *x, size_t xs, int gemm, float *y, size_t ldy, const int NT) {
    __m256 s1[8], s2[8];
    __m256i I[8], M[8];
    for (int t = 0; t < NT; t++) s1[t] = s2[t] = _mm256_setzero_ps(), I[t] = M[t] = _mm256_setzero_si256();
    for (int64_t k = 0; k < n / 256; k++) {
        k_scales8 ks;
        k4_scales8_avx2(type, rows, g8, k, &ks);
        const uint8_t *u = x + (size_t)k * K4_BYTES;
        __m256i qh[8];  // Q5_K's rows: qh[v] lane r = dword v of row r's qh
        if (type == Q_Q5_K && !g8) k4_dwords8_avx2(type, rows, g8, k, -1, qh);
        if (NT == 1 || (type == Q_Q5_K && g8 && NT < 8)) {  // each chunk's code of its own (its sub-blocks constants)
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                if (NT == 1 && g8)  // one token streams the group: ask for the bytes DECODE_AHEAD on
                    decode_prefetch_part(k4_x8_block(type, g8, k), 8 * k4_block_bytes(type), c, 4);
                k4_chunk8_avx2(type, rows, g8, k, c, qh, &ks, u, xs, gemm, I, M, s1, s2, NT);
            }
        } else {
            for (int c = 0; c < 4; c++) k4_chunk8_avx2(type, rows, g8, k, c, qh, &ks, u, xs, gemm, I, M, s1, s2, NT);
        }
    }
    for (int t = 0; t < NT; t++) {
        float o[8];
        _mm256_storeu_ps(o, _mm256_sub_ps(s1[t], s2[t]));
        memcpy(y + (size_t)t * ldy, o + lo, sizeof(float) * (size_t)(hi - lo));
    }
}

Q_TILE_TABLE(q_tiles_avx2, unit_tile_avx2, q6k_tile_avx2, k23_tile_avx2, float_tile_avx2, float_tile_avx2)

// x8 weights (quant_x8.c): 8 rows in the lanes, each running the float
// chains that the unit kernels above run in lanes of one row.

// 8 rows' 16 float chains (acc[L] lane r: row r's lane L), each row's summed
// as reduce16 sums them: out[r].
ALWAYS_INLINE void reduce16_rows8(const __m256 acc[16], float *out) {
    __m256 h[8], q[4];
    for (int i = 0; i < 8; i++) h[i] = _mm256_add_ps(acc[8 + i], acc[i]);
    for (int i = 0; i < 4; i++) q[i] = _mm256_add_ps(h[4 + i], h[i]);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(q[0], q[2]), _mm256_add_ps(q[1], q[3])));
}

// Block b of a 32-element type's x8 group at g (x8_fields: the 8 rows' d,
// then m, qh, qs as the type has them): q[v] lane r = row r's weights 4v ..
// 4v+3, unsigned for Q4_0, Q4_1, Q5_0 and Q5_1 (the 5th bits from qh as the
// x8 copy keeps it: bit v of byte j is weight 4v + j's) and MXFP4 (its
// values + 12), signed values for Q8_0, IQ4_NL and IQ4_XS; d (and m) of
// the 8 rows (IQ4_XS: d times its sub-block's scale).
ALWAYS_INLINE void unit8_unpack_avx2(uint32_t type, const uint8_t *g, int64_t b, __m256i q[8], __m256 *d, __m256 *m) {
    const __m256i m4 = _mm256_set1_epi8(15);
    const uint8_t *blk = unit_x8_block(type, g, b), *qs = unit_x8_qs_of(type, g, b);
    if (type == Q_Q8_0) {
        for (int v = 0; v < 8; v++) q[v] = _mm256_loadu_si256((const __m256i *)(qs + 32 * v));
    } else {
        for (int v = 0; v < 4; v++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * v));
            q[v] = _mm256_and_si256(raw, m4);
            q[v + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        }
    }
    if (type == Q_Q5_0 || type == Q_Q5_1) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(blk + (type == Q_Q5_0 ? X8_AT(block_q5_0, qh) : X8_AT(block_q5_1, qh))));
        for (int v = 0; v < 8; v++) q[v] = _mm256_or_si256(q[v], k4_bit4_avx2(qh, v));
    }
    if (q_is_lut(type)) {
        __m128i t = _mm_loadu_si128((const __m128i *)(type == Q_MXFP4 ? MXFP4_VALUES : IQ4NL_VALUES));
        if (type == Q_MXFP4) t = _mm_add_epi8(t, _mm_set1_epi8(12));
        const __m256i tab = _mm256_broadcastsi128_si256(t);
        for (int v = 0; v < 8; v++) q[v] = _mm256_shuffle_epi8(tab, q[v]);
    }
    if (type == Q_MXFP4) {
        *d = mxfp4_pow2_avx2(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)blk)));
    } else if (type == Q_IQ4_XS) {  // fp16(d) * (ls - 32) of sub-block b % 8 (iq4xs_scale)
        const __m256i l = _mm256_loadu_si256((const __m256i *)(blk + X8_AT(block_iq4_xs, scales_l)));
        const __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(blk + X8_AT(block_iq4_xs, scales_h))));
        *d = _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk)),
                           _mm256_cvtepi32_ps(iq4xs_ls_avx2(l, h, _mm256_set1_epi32((int)(b % 8)))));
    } else {
        *d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
    }
    if (type == Q_Q4_1 || type == Q_Q5_1) *m = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + X8_AT(block_q4_1, m))));
}

// The 32-element types of the x8 layout, the group at g against NT tokens:
// lane L of unit u is block 16u + L, as in unit_tile_avx2, with half_token's
// integer sums and float operations on it; a lane past the row's last
// block adds the zero that a padded unit's lane adds.
ALWAYS_INLINE void unit_tile8_avx2(uint32_t type, const uint8_t *g, int64_t n, int64_t u0, int64_t u1, const uint8_t *x,
                                   size_t xs, float *out, const int NT) {
    const size_t bb = block32_bytes(type);
    __m256 acc[TILE_T][16];
    for (int t = 0; t < NT; t++)
        for (int L = 0; L < 16; L++) acc[t][L] = _mm256_setzero_ps();
    for (int64_t u = u0; u < u1; u++)
        for (int L = 0; L < 16; L++) {
            const int64_t b = 16 * u + L;
            if (b >= n / 32) {
                for (int t = 0; t < NT; t++) acc[t][L] = _mm256_add_ps(acc[t][L], _mm256_setzero_ps());
                continue;
            }
            if (NT == 1)  // one token streams the group: ask for the bytes DECODE_AHEAD on
                decode_prefetch(g + (size_t)b * 8 * bb, 8 * bb);
            __m256i q[8], aq[8];
            __m256 d, m = _mm256_setzero_ps();
            unit8_unpack_avx2(type, g, b, q, &d, &m);
#if defined(DPBUSD256)  // signed weights as value + 128, the word c = -128 Σx taking 128 Σx off (below)
            const int sgn = 0, off = type == Q_Q8_0 || type == Q_IQ4_NL || type == Q_IQ4_XS;
            for (int v = 0; off && v < 8; v++) q[v] = _mm256_xor_si256(q[v], _mm256_set1_epi8((char)0x80));
#else  // signed weights: |w| times x with w's sign
            const int sgn = type == Q_Q8_0 || type == Q_IQ4_NL || type == Q_IQ4_XS, off = 0;
#endif
            for (int v = 0; sgn && v < 8; v++) aq[v] = _mm256_sign_epi8(q[v], q[v]);
            for (int t = 0; t < NT; t++) {
                const uint8_t *a = x + (size_t)t * xs + (size_t)u * UNIT_BYTES;
                __m256i xb[8], i;
                for (int v = 0; v < 8; v++) xb[v] = _mm256_set1_epi32((int)load_u32(a + 64 * v + 4 * L));
                if (sgn) {
                    __m256i i0 = _mm256_setzero_si256(), i1 = _mm256_setzero_si256();
                    for (int v = 0; v < 8; v += 2) {
                        i0 = dot_u8s8(i0, aq[v], _mm256_sign_epi8(xb[v], q[v]));
                        i1 = dot_u8s8(i1, aq[v + 1], _mm256_sign_epi8(xb[v + 1], q[v + 1]));
                    }
                    i = _mm256_add_epi32(i0, i1);
                } else {  // int16 sums of 16 products of 4-bit weights, 8 of 5-bit ones or MXFP4's (<= 24) (|x| <= 127)
                    i = dots_u8s8(q, xb, 8, type == Q_Q4_0 || type == Q_Q4_1 ? 8 : 4);
                }
                const __m256i w = _mm256_set1_epi32((int)load_u32(a + UNIT_W + 4 * L));
                // Q4_0/Q5_0 take q - 8 / q - 16, MXFP4 its values + 12 less 12: the word is c = -128 Σx, so
                // subtract 8 Σx = -c / 16 (16 Σx = -c / 8, 12 Σx = -c / 32 - c / 16)
                if (type == Q_Q4_0) i = _mm256_add_epi32(i, _mm256_srai_epi32(w, 4));
                if (type == Q_Q5_0) i = _mm256_add_epi32(i, _mm256_srai_epi32(w, 3));
                if (type == Q_MXFP4) i = _mm256_add_epi32(i, _mm256_add_epi32(_mm256_srai_epi32(w, 5), _mm256_srai_epi32(w, 4)));
                if (off) i = _mm256_add_epi32(i, w);
                const __m256 dd = _mm256_mul_ps(d, _mm256_set1_ps(load_f32(a + UNIT_D + 4 * L)));
                acc[t][L] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), dd, acc[t][L]);
                if (type == Q_Q4_1 || type == Q_Q5_1) acc[t][L] = _mm256_fmadd_ps(m, _mm256_castsi256_ps(w), acc[t][L]);
            }
        }
    for (int t = 0; t < NT; t++) reduce16_rows8(acc[t], out + 8 * t);
}

// Q6_K, the group at g8 against NT tokens: lane j of unit u (a super-block)
// is group j, as in q6k_tile_avx2, its weights q6k_planes' vectors 3j ..
// 3j + 2 (quant_x8.c: dword r of vector 3j + t holds row r's bytes 4t ..
// 4t+3 of group j).
ALWAYS_INLINE void q6k_group8_avx2(const uint8_t *b, int64_t u, int j, const uint8_t *x, size_t xs, __m256 acc[][16],
                                   const int NT) {
    const uint8_t *p = b + X8_AT(q6k_planes, p) + 96 * j, *sc = b + X8_AT(q6k_planes, scales);
    __m256i w[3], q[4];  // q[v] lane r: row r's 6-bit weights 4v .. 4v+3 of group j
    for (int t = 0; t < 3; t++) {
        w[t] = _mm256_loadu_si256((const __m256i *)(p + 32 * t));
        q[t] = _mm256_and_si256(w[t], _mm256_set1_epi8(63));
    }
    q[3] = _mm256_or_si256(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(w[0], 6), _mm256_set1_epi8(3)),
                                           _mm256_and_si256(_mm256_srli_epi16(w[1], 4), _mm256_set1_epi8(12))),
                           _mm256_and_si256(_mm256_srli_epi16(w[2], 2), _mm256_set1_epi8(48)));
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + X8_AT(q6k_planes, d))));
    const __m256 a = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8 * j)))), d);
    for (int t = 0; t < NT; t++) {
        const uint8_t *r = x + (size_t)t * xs + (size_t)u * K16_BYTES;
        __m256i xb[4];
        for (int v = 0; v < 4; v++) xb[v] = _mm256_set1_epi32((int)load_u32(r + 64 * v + 4 * j));
        const __m256i iv = _mm256_add_epi32(dots_u8s8(q, xb, 4, 2), _mm256_set1_epi32((int)load_u32(r + K16_C + 4 * j)));
        acc[t][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iv), _mm256_mul_ps(a, _mm256_set1_ps(load_f32(r + K16_D))), acc[t][j]);
    }
}

ALWAYS_INLINE void q6k_tile8_avx2(uint32_t type, const uint8_t *g8, int64_t n, int64_t u0, int64_t u1, const uint8_t *x,
                                  size_t xs, float *out, const int NT) {
    (void)type, (void)n;
    __m256 acc[TILE_T][16];
    for (int t = 0; t < NT; t++)
        for (int j = 0; j < 16; j++) acc[t][j] = _mm256_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        const uint8_t *b = g8 + (size_t)u * 8 * sizeof(q6k_planes);
        for (int part = 0; part < 4; part++) {
            if (NT == 1)  // as in unit_tile8_avx2, a quarter at a time
                decode_prefetch_part(b, 8 * sizeof(q6k_planes), part, 4);
            for (int j = 4 * part; j < 4 * part + 4; j++) q6k_group8_avx2(b, u, j, x, xs, acc, NT);
        }
    }
    for (int t = 0; t < NT; t++) reduce16_rows8(acc[t], out + 8 * t);
}

// Q3_K's x8 planes (q3k_planes) in group block b: lane r = row r's 3-bit
// weights 4v .. 4v+3 of sub-block s.
ALWAYS_INLINE __m256i q3k_planes8_avx2(const uint8_t *b, int s, int v) {
    const uint8_t *p = b + X8_AT(q3k_planes, p) + 32 * v;  // plane i at + 256 i
#define PLANE(i) _mm256_loadu_si256((const __m256i *)(p + 256 * (i)))
#define BITS(i, sh, m) _mm256_and_si256(_mm256_srli_epi16(PLANE(i), sh), _mm256_set1_epi8(m))
    if (s < 6) return BITS(s / 2, 3 * (s & 1), 7);
    return _mm256_or_si256(BITS(s - 6, 6, 3), BITS(2, s == 6 ? 4 : 5, 4));
#undef BITS
#undef PLANE
}

// pshufb patterns on 16 bytes in each 128-bit half: dword i (row i, i + 4)
// = byte o + i (+ 4 in the upper half) as two int16 (PAIR), or bytes o + i
// and o + i + 8 as int16s (TWO).
#define PAIR(i, o) (i) + (o), -1, (i) + (o), -1
#define TWO(i, o) (i) + (o), -1, (i) + (o) + 8, -1
#define ROWS8(F, o) F(0, o), F(1, o), F(2, o), F(3, o), F(4, o), F(5, o), F(6, o), F(7, o)

// Q3_K and Q2_K (the K23 chain), group j of an x8 block b: q[v] lane r = row
// r's quants 4v .. 4v+3 of the group, sc lane r = its scale as two int16,
// and (Q2_K, j even) mn = the mins of groups j, j + 1 as two int16. Q3_K
// takes sub-block j / 2 at plane dwords 4 (j & 1) + v, and its scale from S
// (q3k_scale_words' words, 8 rows). Q2_K takes bits 2k (k = (j % 8) / 2) of
// qs vectors 8 (j / 8) + 4 (j & 1) + v: k = 0, 1 from the vector, 2, 3 from
// it shifted by 4, masked with 3 (even k) or 12 (odd k: 4 q, left in place),
// so the even groups take 4 sc and the group sums are 4 times the chain's I.
ALWAYS_INLINE void k23_group8_avx2(uint32_t type, const uint8_t *b, const __m256i S[4], int j, __m256i q[4], __m256i *sc,
                                   __m256i *mn) {
    if (type == Q_Q3_K) {
        for (int v = 0; v < 4; v++) q[v] = q3k_planes8_avx2(b, j / 2, 4 * (j & 1) + v);
        const int k = j % 4;
        const __m256i pick = _mm256_setr_epi8(PAIR(0, k), PAIR(4, k), PAIR(8, k), PAIR(12, k), PAIR(0, k), PAIR(4, k),
                                              PAIR(8, k), PAIR(12, k));
        *sc = _mm256_sub_epi16(_mm256_shuffle_epi8(S[j / 4], pick), _mm256_set1_epi16(32));
        return;
    }
    const int k = (j % 8) / 2, o = 8 * (j & 1);
    for (int v = 0; v < 4; v++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(b + X8_AT(block_q2_K, qs) + 32 * (8 * (j / 8) + 4 * (j & 1) + v)));
        q[v] = _mm256_and_si256(k < 2 ? raw : _mm256_srli_epi16(raw, 4), _mm256_set1_epi8(k & 1 ? 12 : 3));
    }
    const __m256i s2 = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b + X8_AT(block_q2_K, scales) + 16 * (j / 2))));
    *sc = _mm256_and_si256(_mm256_shuffle_epi8(s2, _mm256_setr_epi8(ROWS8(PAIR, o))), _mm256_set1_epi16(15));
    if (!(k & 1)) *sc = _mm256_slli_epi16(*sc, 2);
    if (!(j & 1)) *mn = _mm256_srli_epi16(_mm256_shuffle_epi8(s2, _mm256_setr_epi8(ROWS8(TWO, 0))), 4);
}

// Q3_K and Q2_K, the x8 group at g8 against NT tokens: each row runs the K23
// chain (quant_impl.h) in its lane, with k23_tile_avx2's integer sums.
ALWAYS_INLINE void k23_tile8_avx2(uint32_t type, const uint8_t *g8, int64_t n, int64_t u0, int64_t u1, const uint8_t *x,
                                  size_t xs, float *out, const int NT) {
    (void)n;
    const size_t bb = 8 * (type == Q_Q2_K ? sizeof(block_q2_K) : sizeof(block_q3_K));
    const __m256i m3 = _mm256_set1_epi8(3), m4 = _mm256_set1_epi8(15);
    __m256 acc[TILE_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        const uint8_t *b = g8 + (size_t)u * bb;
        if (NT == 1)  // as in unit_tile8_avx2
            decode_prefetch(b, bb);
        __m256i S[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
        if (type == Q_Q3_K) {
            const uint8_t *sc = b + X8_AT(q3k_planes, scales);
            const __m256i a0 = _mm256_loadu_si256((const __m256i *)sc), a1 = _mm256_loadu_si256((const __m256i *)(sc + 32));
            const __m256i t = _mm256_loadu_si256((const __m256i *)(sc + 64));
            for (int w = 0; w < 4; w++) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(w & 1 ? a1 : a0, 4 * (w / 2)), m4);
                const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(t, 2 * w), m3);
                S[w] = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
            }
        }
        __m256i I[TILE_T], M[TILE_T];
        // the record's c as int16s: Q3_K's c_g in the low half of dword g (|c| <= 8128, high half 0),
        // Q2_K's c_2p, c_2p+1 in dword p (|c| <= 2032)
        int32_t C16[TILE_T][16];
        for (int t = 0; t < NT; t++) {
            I[t] = M[t] = _mm256_setzero_si256();
            const uint8_t *c = x + (size_t)t * xs + (size_t)u * K16_BYTES + K16_C;
            const __m256i c0 = _mm256_loadu_si256((const __m256i *)c), c1 = _mm256_loadu_si256((const __m256i *)(c + 32));
            if (type == Q_Q2_K) {
                _mm256_storeu_si256((__m256i *)C16[t], _mm256_permute4x64_epi64(_mm256_packs_epi32(c0, c1), 0xD8));
            } else {
                _mm256_storeu_si256((__m256i *)C16[t], _mm256_and_si256(c0, _mm256_set1_epi32(0xFFFF)));
                _mm256_storeu_si256((__m256i *)(C16[t] + 8), _mm256_and_si256(c1, _mm256_set1_epi32(0xFFFF)));
            }
        }
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {  // (unrolled: j's shifts and patterns are constants)
            __m256i q[4], sc, mn = _mm256_setzero_si256();
            k23_group8_avx2(type, b, S, j, q, &sc, &mn);
            for (int t = 0; t < NT; t++) {
                const uint8_t *r = x + (size_t)t * xs + (size_t)u * K16_BYTES;
                __m256i p = _mm256_maddubs_epi16(q[0], _mm256_set1_epi32((int)load_u32(r + 4 * j)));  // int16, as k23_tile_avx2's
                for (int v = 1; v < 4; v++) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(q[v], _mm256_set1_epi32((int)load_u32(r + 64 * v + 4 * j))));
                if (type == Q_Q3_K) p = _mm256_add_epi16(p, _mm256_set1_epi32(C16[t][j]));
                I[t] = _mm256_add_epi32(I[t], _mm256_madd_epi16(p, sc));
                if (type == Q_Q2_K && !(j & 1)) M[t] = _mm256_add_epi32(M[t], _mm256_madd_epi16(mn, _mm256_set1_epi32(C16[t][j / 2])));
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + (type == Q_Q2_K ? X8_AT(block_q2_K, d) : X8_AT(q3k_planes, d)))));
        const __m256 dmin = type == Q_Q2_K ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + X8_AT(block_q2_K, dmin)))) : d;
        for (int t = 0; t < NT; t++) {
            const __m256 dx = _mm256_set1_ps(load_f32(x + (size_t)t * xs + (size_t)u * K16_BYTES + K16_D));
            acc[t] = k23_chain8(type, acc[t], type == Q_Q2_K ? _mm256_srai_epi32(I[t], 2) : I[t], M[t], d, dmin, dx);
        }
    }
    for (int t = 0; t < NT; t++) _mm256_storeu_ps(out + 8 * t, acc[t]);
}
#undef PAIR
#undef TWO
#undef ROWS8

TILE_FN(tile8_q4_0, unit_tile8_avx2, Q_Q4_0)
TILE_FN(tile8_q4_1, unit_tile8_avx2, Q_Q4_1)
TILE_FN(tile8_q5_0, unit_tile8_avx2, Q_Q5_0)
TILE_FN(tile8_q5_1, unit_tile8_avx2, Q_Q5_1)
TILE_FN(tile8_q8_0, unit_tile8_avx2, Q_Q8_0)
TILE_FN(tile8_iq4_nl, unit_tile8_avx2, Q_IQ4_NL)
TILE_FN(tile8_mxfp4, unit_tile8_avx2, Q_MXFP4)
TILE_FN(tile8_iq4_xs, unit_tile8_avx2, Q_IQ4_XS)
TILE_FN(tile8_q6_K, q6k_tile8_avx2, Q_Q6_K)
TILE_FN(tile8_q3_K, k23_tile8_avx2, Q_Q3_K)
TILE_FN(tile8_q2_K, k23_tile8_avx2, Q_Q2_K)
const tile_fn q_tiles8_avx2[Q_TYPE_COUNT] = {
    [Q_Q4_0] = tile8_q4_0, [Q_Q4_1] = tile8_q4_1,     [Q_Q5_0] = tile8_q5_0,   [Q_Q5_1] = tile8_q5_1,
    [Q_Q8_0] = tile8_q8_0, [Q_IQ4_NL] = tile8_iq4_nl, [Q_MXFP4] = tile8_mxfp4, [Q_Q6_K] = tile8_q6_K,
    [Q_Q3_K] = tile8_q3_K, [Q_Q2_K] = tile8_q2_K,     [Q_IQ4_XS] = tile8_iq4_xs};

// Tokens [0, nt) of 8 rows (lanes [lo, hi) kept; y: row lo's outputs), in
// groups as the token count allows: tokens [0, ngemm) in the gemm order
// (ngemm a multiple of 4), the rest in the gemv order. One token alone on
// ggml's rows streams them through k4_decode8_avx2, which gathers no lanes.
ALWAYS_INLINE void k4_tokens8_avx2(uint32_t type, const uint8_t *const rows[8], const uint8_t *g8, int lo, int hi,
                                   int64_t n, const uint8_t *x, size_t xs, int nt, int ngemm, float *y, size_t ldy) {
    for (int t = 0; t < nt;) {
        float *yt = y + (size_t)t * ldy;
        const uint8_t *xt = x + (size_t)t * xs;
        const int gemm = t < ngemm, left = (gemm ? ngemm : nt) - t;  // gemm: left is a multiple of 4
        if (left >= 8) k4_rows8_avx2(type, rows, g8, lo, hi, n, xt, xs, gemm, yt, ldy, 8), t += 8;
        else if (left >= 4) k4_rows8_avx2(type, rows, g8, lo, hi, n, xt, xs, gemm, yt, ldy, 4), t += 4;
        else if (left >= 2) k4_rows8_avx2(type, rows, g8, lo, hi, n, xt, xs, 0, yt, ldy, 2), t += 2;
        else if (g8) k4_rows8_avx2(type, rows, g8, lo, hi, n, xt, xs, 0, yt, ldy, 1), t += 1;
        else k4_decode8_avx2(type, rows, hi, n, xt, yt), t += 1;
    }
}

// The type a compile-time constant (q_matmul_k_avx2).
ALWAYS_INLINE void matmul_k4_avx2_t(uint32_t type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                                    size_t xs, int nt, int ngemm, float *y, size_t ldy) {
    for (int r0 = 0; r0 < nr; r0 += 8) {
        const int nv = nr - r0 < 8 ? nr - r0 : 8;
        const uint8_t *rows[8];
        for (int r = 0; r < 8; r++) rows[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws;
        k4_tokens8_avx2(type, rows, NULL, 0, nv, n, x, xs, nt, ngemm, y + r0, ldy);
    }
}

void q_matmul_k_avx2(uint32_t type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                     size_t xs, int nt, int ngemm, float *y, size_t ldy) {
    if (type == Q_Q4_K) matmul_k4_avx2_t(Q_Q4_K, n, w, ws, nr, x, xs, nt, ngemm, y, ldy);
    else matmul_k4_avx2_t(Q_Q5_K, n, w, ws, nr, x, xs, nt, ngemm, y, ldy);
}

// x8 groups (quant_x8.c): rows [lo, lo + nr) from the group at w8 on.
ALWAYS_INLINE void matmul_k4_x8_avx2_t(uint32_t type, int64_t n, const uint8_t *w8, int lo, int nr, const uint8_t *x,
                                       size_t xs, int nt, int ngemm, float *y, size_t ldy) {
    const size_t gb = (size_t)(n / 256) * 8 * k4_block_bytes(type);
    const uint8_t *const none[8] = {0};  // no ggml rows: the kernels read the group
    for (int i = 0; i < nr; w8 += gb, lo = 0) {
        const int hi = lo + nr - i < 8 ? lo + nr - i : 8;
        k4_tokens8_avx2(type, none, w8, lo, hi, n, x, xs, nt, ngemm, y + i, ldy);
        i += hi - lo;
    }
}

void q_matmul_k_x8_avx2(uint32_t type, int64_t n, const uint8_t *w8, int lo, int nr, const uint8_t *x, size_t xs,
                        int nt, int ngemm, float *y, size_t ldy) {
    if (type == Q_Q4_K) matmul_k4_x8_avx2_t(Q_Q4_K, n, w8, lo, nr, x, xs, nt, ngemm, y, ldy);
    else matmul_k4_x8_avx2_t(Q_Q5_K, n, w8, lo, nr, x, xs, nt, ngemm, y, ldy);
}

#endif  // Q_AVX2
