// quant_avx512.c — the AVX-512 VNNI kernels (quant_impl.h; empty in builds
// for other ISAs).
//
// Each quantized kernel works on "units" of 16 scale groups (16 blocks of 32,
// 16 K sub-blocks of 32, or the 16 groups of a Q6_K super-block). A unit's
// weights are unpacked once into registers in the same lane-transposed order
// as the activation rows: vector v, lane L = weights 4v..4v+3 of group L.
// Weights are VPDPBUSD's unsigned operand and activations its signed one (so
// they load straight from memory); a run of VPDPBUSD leaves group L's integer
// dot product in lane L, and one float multiply-add per token applies every
// group's scales at once. An unpacked unit serves up to TILE_T tokens.
#include "quant_impl.h"

#if defined(Q_AVX512)

static inline __m512i load512(const void *p) { return _mm512_loadu_si512(p); }
ALWAYS_INLINE __m512i bcast32(const uint8_t *p) { return _mm512_set1_epi32((int)load_u32(p)); }

// Two x8 groups' vectors at the same place (a, b: 32 bytes each, 8 rows'
// units) as one: rows 0-7, then 8-15.
ALWAYS_INLINE __m512i x8_pair(const uint8_t *a, const uint8_t *b) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a)),
                              _mm256_loadu_si256((const __m256i *)b), 1);
}

// Two x8 groups' fp16 fields (a, b: 8 rows' halves each) as 16 floats.
ALWAYS_INLINE __m512 x8_pair_halves(const uint8_t *a, const uint8_t *b) {
    return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                                   _mm_loadu_si128((const __m128i *)b), 1));
}


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

// Q5_0/Q5_1: lane b's qh (bit e = weight e's 5th bit).
ALWAYS_INLINE void add_high_bits(const uint8_t *blocks, size_t bs, size_t qh_off, __m512i q[8]) {
    uint32_t w[16];  // one by one, not a gather (see block_scales)
    for (int b = 0; b < 16; b++) w[b] = load_u32(blocks + qh_off + (size_t)b * bs);
    const __m512i qh = _mm512_loadu_si512(w);
    for (int v = 0; v < 8; v++) q[v] = _mm512_or_si512(q[v], spread_bits(qh, v));
}

// d (and m) of 16 blocks: the dword at each block's start holds d | m << 16.
// (Loaded one by one: a gather of the 16 dwords took ~30% of a Q4_0 matvec.)
ALWAYS_INLINE void block_scales(const uint8_t *blocks, size_t bs, unit_regs *r) {
    uint32_t w[16];
    for (int b = 0; b < 16; b++) w[b] = load_u32(blocks + (size_t)b * bs);
    const __m512i dm = _mm512_loadu_si512(w);
    r->d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
    r->m = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
}

// --- IQ4_NL, MXFP4, IQ4_XS: 4-bit codes into a value table ----------------
//
// VPSHUFB looks the codes up in a table of their values + 128 (VPDPBUSD's
// unsigned operand; the activation's c removes the 128 Σx, as for Q8_0).
// IQ4_XS runs as a 32-element type: a unit is two super-blocks, lane L
// sub-block L.

// The table's values + 128, in every 128-bit lane.
ALWAYS_INLINE __m512i lut_table(uint32_t type) {
    const __m128i t = _mm_loadu_si128((const __m128i *)(type == Q_MXFP4 ? MXFP4_VALUES : IQ4NL_VALUES));
    return _mm512_broadcast_i32x4(_mm_xor_si128(t, _mm_set1_epi8((char)0x80)));
}

// 2^(e - 128) of 16 exponents e (as e8m0_half).
ALWAYS_INLINE __m512 mxfp4_pow2(__m512i e) {
    const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(_mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2)), normal, subnormal));
}

// MXFP4's scales of 16 blocks (the exponent byte leads each block; loaded
// one by one, see block_scales).
ALWAYS_INLINE __m512 mxfp4_scales(const uint8_t *blocks) {
    uint32_t w[16];
    for (int b = 0; b < 16; b++) w[b] = blocks[b * sizeof(block_mxfp4)];
    return mxfp4_pow2(_mm512_loadu_si512(w));
}

// IQ4_XS's 6-bit scales minus 32 (iq4xs_scale) of sub-block s of each lane:
// l lane: its super-block's scales_l, h: its scales_h from bit h_at on.
ALWAYS_INLINE __m512i iq4xs_ls512(__m512i l, __m512i h, int h_at, __m512i s) {
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(l, _mm512_slli_epi32(s, 2)), _mm512_set1_epi32(15));
    const __m512i hi = _mm512_and_si512(_mm512_srlv_epi32(h, _mm512_add_epi32(_mm512_slli_epi32(s, 1), _mm512_set1_epi32(h_at))),
                                        _mm512_set1_epi32(3));
    return _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
}

// Two IQ4_XS super-blocks (sb): q[v], q[v + 4] lane L = the low and high
// nibbles of dword v of sub-block L's 16 qs bytes; d lane L = fp16(d) * (ls - 32).
ALWAYS_INLINE void iq4xs_unpack(const uint8_t *sb, unit_regs *r) {
    __m512i X[4];  // X[k]: the 64 qs bytes of sub-blocks 4k..4k+3
    for (int k = 0; k < 4; k++)
        X[k] = load512(sb + (k / 2) * sizeof(block_iq4_xs) + offsetof(block_iq4_xs, qs) + 64 * (k % 2));
    const __m512i m4 = _mm512_set1_epi8(15);
    for (int v = 0; v < 4; v++) {  // lane 8h + 4k + j: dword 4j + v of X[2h + k]
        const __m512i idx = _mm512_add_epi32(_mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28),
                                             _mm512_set1_epi32(v));
        const __m512i z = _mm512_mask_blend_epi32(0xff00, _mm512_permutex2var_epi32(X[0], idx, X[1]),
                                                  _mm512_permutex2var_epi32(X[2], idx, X[3]));
        r->q[v] = _mm512_and_si512(z, m4);
        r->q[v + 4] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
    }
    const block_iq4_xs *b = (const block_iq4_xs *)sb;
    // per super-block: dword d | scales_h << 16, dword scales_l
    const __m512i h = _mm512_inserti64x4(_mm512_set1_epi32((int)load_u32(&b[0])), _mm256_set1_epi32((int)load_u32(&b[1])), 1);
    const __m512i l = _mm512_inserti64x4(_mm512_set1_epi32((int)load_u32(b[0].scales_l)),
                                         _mm256_set1_epi32((int)load_u32(b[1].scales_l)), 1);
    const __m512i s = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);  // the sub-block
    r->d = _mm512_mul_ps(_mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)), _mm512_cvtepi32_ps(iq4xs_ls512(l, h, 16, s)));
}

// A unit of a table type: q = the codes' values + 128, d (m unused).
ALWAYS_INLINE void lut_unpack(uint32_t type, const uint8_t *blocks, unit_regs *r) {
    if (type == Q_IQ4_XS) {
        iq4xs_unpack(blocks, r);
    } else {
        nibble_qs(blocks, block32_bytes(type), type == Q_MXFP4 ? offsetof(block_mxfp4, qs) : offsetof(block_iq4_nl, qs), r->q);
        if (type == Q_MXFP4) r->d = mxfp4_scales(blocks);
        else block_scales(blocks, sizeof(block_iq4_nl), r);
    }
    const __m512i tab = lut_table(type);
    for (int v = 0; v < 8; v++) r->q[v] = _mm512_shuffle_epi8(tab, r->q[v]);
}

// Unpacks one full unit (16 blocks) of `type` into r.
ALWAYS_INLINE void unit_unpack(uint32_t type, const uint8_t *blocks, unit_regs *r) {
    if (q_is_lut(type)) {
        lut_unpack(type, blocks, r);
        return;
    }
    const size_t bs = block32_bytes(type);
    if (type == Q_Q8_0) q8_0_qs((const block_q8_0 *)blocks, r->q);
    else nibble_qs(blocks, bs, type == Q_Q4_0 ? 2 : type == Q_Q4_1 ? 4 : type == Q_Q5_0 ? 6 : 8, r->q);
    if (type == Q_Q5_0 || type == Q_Q5_1) add_high_bits(blocks, bs, type == Q_Q5_0 ? 2 : 4, r->q);
    block_scales(blocks, bs, r);
    // Q8_0's signed weights w enter as w + 128 (the sign bit flipped; the
    // activation's c removes 128 * Σx); Q4_0's and Q5_0's as their unsigned
    // codes (unit_token removes the offset 8 or 16 through c)
    for (int v = 0; type == Q_Q8_0 && v < 8; v++) r->q[v] = _mm512_xor_si512(r->q[v], _mm512_set1_epi8((char)0x80));
}

// What a 32-element type's integer sum takes from the activation's word c =
// -128 Σx: Q8_0's and the table types' weights enter + 128 (c), Q4_0's and
// Q5_0's as their codes q, for q - 8 and q - 16 (8 Σx = -c / 16, 16 Σx = -c / 8).
ALWAYS_INLINE __m512i unit_c512(uint32_t type, __m512i c) {
    return type == Q_Q4_0 ? _mm512_srai_epi32(c, 4) : type == Q_Q5_0 ? _mm512_srai_epi32(c, 3) : c;
}

// One unit of one token: acc += d_w * d_x * Σ q*x per lane (+ c for
// Q8_0's and the table types' +128, Q4_0's -8, Q5_0's -16), and for
// Q8_1-style units acc += m * s.
ALWAYS_INLINE void unit_token(uint32_t type, const unit_regs *r, const uint8_t *a, __m512 *acc) {
    const int has_c = type == Q_Q8_0 || type == Q_Q4_0 || type == Q_Q5_0 || q_is_lut(type);
    __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
    for (int v = 0; v < 8; v += 2) {
        i0 = _mm512_dpbusd_epi32(i0, r->q[v], load512(a + 64 * v));
        i1 = _mm512_dpbusd_epi32(i1, r->q[v + 1], load512(a + 64 * v + 64));
    }
    i0 = _mm512_add_epi32(i0, i1);
    if (has_c) i0 = _mm512_add_epi32(i0, unit_c512(type, load512(a + UNIT_W)));  // (c added last: see q6k_token)
    const __m512 dd = _mm512_mul_ps(r->d, _mm512_loadu_ps(a + UNIT_D));
    *acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), dd, *acc);
    if (!has_c) *acc = _mm512_fmadd_ps(r->m, _mm512_loadu_ps(a + UNIT_W), *acc);
}

ALWAYS_INLINE void unit_tile_n(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                               const uint8_t *x, size_t xs, float *out, const int NT) {
    const size_t bs = block32_bytes(type);
    const int64_t per = 16;  // blocks per unit
    const int64_t nb = n / 32;
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


// --- x8 weights, 16 rows in the lanes: the 32-element types ---------------

// 16 rows' 16 float chains per token (lane[L][t] lane r: row r's lane L),
// each row's summed as reduce16 sums them: out[16 t + r].
ALWAYS_INLINE void reduce16_rows16(__m512 lane[16][TILE_T], float *out, const int NT) {
    for (int t = 0; t < NT; t++) {
        __m512 h[8], q[4];
        for (int i = 0; i < 8; i++) h[i] = _mm512_add_ps(lane[8 + i][t], lane[i][t]);
        for (int i = 0; i < 4; i++) q[i] = _mm512_add_ps(h[4 + i], h[i]);
        _mm512_storeu_ps(out + 16 * t, _mm512_add_ps(_mm512_add_ps(q[0], q[2]), _mm512_add_ps(q[1], q[3])));
    }
}

// The 32-element types' x8 blocks, two of them in the lanes (a block's 8
// rows in lanes 0-7, the other's in 8-15; quant_x8.c's layout), as VPDPBUSD
// takes them: unsigned, Q8_0's and the table types' values + 128.

// A vector of the two blocks' qs, raw (lanes 0-7: weights 4v_lo .. +3 in
// the low nibbles, lanes 8-15: 4v_hi .. +3; Q8_0: the values), as weights:
// its low or high nibbles (hi; weights 16 on), with Q5_0's and Q5_1's 5th
// bits from qh (unit_qh512; bit v of each byte is weight 4v + j's).
ALWAYS_INLINE __m512i unit_w512(uint32_t type, __m512i raw, int hi, __m512i qh, int v_lo, int v_hi) {
    if (type == Q_Q8_0) return _mm512_xor_si512(raw, _mm512_set1_epi8((char)0x80));
    __m512i w = _mm512_and_si512(hi ? _mm512_srli_epi16(raw, 4) : raw, _mm512_set1_epi8(15));
    if (type == Q_Q5_0 || type == Q_Q5_1) {  // bit v of each byte rotated to bit 4
        const __m512i turn = _mm512_rolv_epi32(qh, _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32((4 - v_lo) & 31),
                                                                           _mm512_set1_epi32((4 - v_hi) & 31)));
        w = _mm512_ternarylogic_epi32(w, turn, _mm512_set1_epi8(0x10), 0xf8);  // w | (turn & 0x10)
    }
    return q_is_lut(type) ? _mm512_shuffle_epi8(lut_table(type), w) : w;
}

// Q5_0's and Q5_1's qh of blocks a (lanes 0-7) and b (8-15); zero otherwise.
ALWAYS_INLINE __m512i unit_qh512(uint32_t type, const uint8_t *a, const uint8_t *b) {
    if (type != Q_Q5_0 && type != Q_Q5_1) return _mm512_setzero_si512();
    const size_t o = type == Q_Q5_0 ? X8_AT(block_q5_0, qh) : X8_AT(block_q5_1, qh);
    return x8_pair(a + o, b + o);
}

// The scales d of blocks a (lanes 0-7) and b (8-15), group blocks as
// unit_x8_block gives them (IQ4_XS: d times the scale of sub-blocks sa, sb).
ALWAYS_INLINE __m512 unit_d512(uint32_t type, const uint8_t *a, int sa, const uint8_t *b, int sb) {
    if (type == Q_MXFP4)
        return mxfp4_pow2(_mm512_cvtepu8_epi32(_mm_set_epi64x((long long)load_u64(b), (long long)load_u64(a))));
    if (type != Q_IQ4_XS) return x8_pair_halves(a, b);
    const __m512i l = x8_pair(a + X8_AT(block_iq4_xs, scales_l), b + X8_AT(block_iq4_xs, scales_l));
    const __m512i h = _mm512_cvtepu16_epi32(_mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(a + X8_AT(block_iq4_xs, scales_h)))),
        _mm_loadu_si128((const __m128i *)(b + X8_AT(block_iq4_xs, scales_h))), 1));
    const __m512i s = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(sa), _mm512_set1_epi32(sb));
    return _mm512_mul_ps(x8_pair_halves(a, b), _mm512_cvtepi32_ps(iq4xs_ls512(l, h, 0, s)));
}

// Two x8 groups (quant_x8.c; a's rows in lanes 0-7, b's in 8-15) of a
// 32-element type against NT tokens, each row running unit_tile_n's float
// chains: its lane L takes block 16u + L of unit u, so lane[L][t] holds 16
// rows' chains of lane L for token t, with unit_token's operations. A
// block's weights load once for the NT tokens; a block past the row's last
// one adds +0, as a padded unit's lane does. With `next`, the two groups
// from there on are fetched as these are read.
ALWAYS_INLINE void unit_tile16(uint32_t type, const uint8_t *a, const uint8_t *b, const uint8_t *next, int64_t n,
                               int64_t u0, int64_t u1, const uint8_t *x, size_t xs, float *out, const int NT) {
    const size_t bb = block32_bytes(type);
    const int64_t nb = n / 32;
    const int has_m = type == Q_Q4_1 || type == Q_Q5_1;
    __m512 lane[16][TILE_T];
    for (int L = 0; L < 16; L++)
        for (int t = 0; t < NT; t++) lane[L][t] = _mm512_setzero_ps();
    for (int64_t u = u0; u < u1; u++)
        for (int L = 0; L < 16; L++) {
            const int64_t k = 16 * u + L;  // the block
            if (k >= nb) {
                for (int t = 0; t < NT; t++) lane[L][t] = _mm512_add_ps(lane[L][t], _mm512_setzero_ps());
                continue;
            }
            const size_t at = (size_t)k * 8 * bb;
            if (next)
                for (size_t l = 0; l < 8 * bb; l += 64) {
                    _mm_prefetch((const char *)next + at + l, _MM_HINT_T0);
                    _mm_prefetch((const char *)next + (size_t)nb * 8 * bb + at + l, _MM_HINT_T0);
                }
            const uint8_t *ka = unit_x8_block(type, a, k), *kb = unit_x8_block(type, b, k);
            const uint8_t *qa = unit_x8_qs_of(type, a, k), *qb = unit_x8_qs_of(type, b, k);
            const __m512i qh = unit_qh512(type, ka, kb);
            __m512i q[8];  // q[v] lane r: row r's weights 4v .. 4v+3
            for (int v = 0; v < (type == Q_Q8_0 ? 8 : 4); v++) {
                const __m512i raw = x8_pair(qa + 32 * v, qb + 32 * v);
                q[v] = unit_w512(type, raw, 0, qh, v, v);
                if (type != Q_Q8_0) q[v + 4] = unit_w512(type, raw, 1, qh, v + 4, v + 4);
            }
            const __m512 d = unit_d512(type, ka, (int)(k % 8), kb, (int)(k % 8));
            const __m512 m = has_m ? x8_pair_halves(ka + X8_AT(block_q4_1, m), kb + X8_AT(block_q4_1, m)) : d;
#pragma GCC unroll 16
            for (int t = 0; t < NT; t++) {  // unit_token's operations on lane L
                const uint8_t *r = x + (size_t)t * xs + (size_t)u * UNIT_BYTES + 4 * L;
                __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
                for (int v = 0; v < 8; v += 2) {
                    i0 = _mm512_dpbusd_epi32(i0, q[v], bcast32(r + 64 * v));
                    i1 = _mm512_dpbusd_epi32(i1, q[v + 1], bcast32(r + 64 * v + 64));
                }
                const __m512i c = bcast32(r + UNIT_W);
                i0 = _mm512_add_epi32(i0, i1);
                if (!has_m)
                    i0 = _mm512_add_epi32(i0, unit_c512(type, c));
                const __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(load_f32(r + UNIT_D)));
                lane[L][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), dd, lane[L][t]);
                if (has_m) lane[L][t] = _mm512_fmadd_ps(m, _mm512_castsi512_ps(c), lane[L][t]);
            }
        }
    reduce16_rows16(lane, out, NT);
}

// --- x8 weights, one token: two of a group's vectors in the lanes ---------
//
// A 512-bit load takes two consecutive vectors of an x8 group (8 rows'
// dwords each), so one group streams through half the instructions of the
// AVX2 x8 kernels, which a core needs to keep up with its share of the
// memory's bandwidth. The activations are permuted to match (vpermt2d), and
// each row runs the AVX2 x8 kernel's float chains on the same values.

// 64 weight bytes as two 32-byte loads: the blocks of Q4_0, Q8_0 and Q6_K
// groups (144, 272, 1680 bytes) leave most 64-byte loads straddling two
// cache lines, and those streamed about 5% slower from memory here.
ALWAYS_INLINE __m512i load512_halves(const uint8_t *p) { return x8_pair(p, p + 32); }

// Lanes 0-7 = lane i of a, lanes 8-15 = lane k of b.
ALWAYS_INLINE __m512i lanes2(__m512i a, int i, __m512i b, int k) {
    return _mm512_permutex2var_epi32(a, _mm512_setr_epi32(i, i, i, i, i, i, i, i, 16 + k, 16 + k, 16 + k, 16 + k,
                                                          16 + k, 16 + k, 16 + k, 16 + k), b);
}

// Lanes 0-7 = lane i of a, lanes 8-15 = lane k of a: lanes2 of one source,
// whose VPERMD keeps its index (VPERMI2D overwrites it: a copy per use).
ALWAYS_INLINE __m512i lanes1(__m512i a, int i, int k) {
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(i, i, i, i, i, i, i, i, k, k, k, k, k, k, k, k), a);
}

// Lanes 0-7 = the sum of a's halves, lanes 8-15 = b's.
ALWAYS_INLINE __m512i fold2(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xEE));
}

// 8 rows' 16 float chains in pairs (acc[p] lanes 0-7: chain 2p, 8-15: chain
// 2p + 1), each row's summed as reduce16 sums them: out[r].
ALWAYS_INLINE void reduce16_pairs8(const __m512 acc[8], float *out) {
    __m512 s[4];
    for (int p = 0; p < 4; p++) s[p] = _mm512_add_ps(acc[p + 4], acc[p]);
    for (int m = 0; m < 2; m++) s[m] = _mm512_add_ps(s[m + 2], s[m]);
    const __m512 f = _mm512_add_ps(s[0], s[1]);
    _mm256_storeu_ps(out, _mm256_add_ps(_mm512_castps512_ps256(f), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(f), 1))));
}

// The 32-element types of the x8 layout, one token against the x8 group at
// g8 (unit_tile8_avx2's chains, lane L of unit u = block 16u + L): per pass
// blocks L and L + 1, whose chains acc[L / 2] holds in lanes 0-7 and 8-15,
// with unit_token's operations. The activation word c removes what the
// weights' offsets add (unit_tile16's sums; Q4_1/Q5_1: it is s, for m);
// a block past the row's last adds nothing.
ALWAYS_INLINE void unit_decode8(uint32_t type, const uint8_t *g8, int64_t n, int64_t u0, int64_t u1, const uint8_t *x,
                                float *out) {
    const size_t bb = 8 * block32_bytes(type);  // a block of the group
    const int64_t nb = n / 32;
    const int has_m = type == Q_Q4_1 || type == Q_Q5_1;
    __m512 acc[8];
    for (int p = 0; p < 8; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        const uint8_t *a = x + (size_t)u * UNIT_BYTES;
        __m512i xv[8];
        for (int v = 0; v < 8; v++) xv[v] = load512(a + 64 * v);
        const __m512i W = load512(a + UNIT_W);
        const __m512i cw = unit_c512(type, W);
        const __m512i dxw = load512(a + UNIT_D);
        for (int L = 0; L < 16 && 16 * u + L < nb; L += 2) {
            const int two = 16 * u + L + 1 < nb;  // block L + 1 is there
            const int64_t k0 = 16 * u + L, k1 = two ? k0 + 1 : k0;
            const uint8_t *b0 = unit_x8_block(type, g8, k0), *b1 = unit_x8_block(type, g8, k1);
            decode_prefetch(g8 + (size_t)k0 * bb, 2 * bb);
            __m512i i[2];
            for (int e = 0; e < 2; e++) {
                const uint8_t *be = e ? b1 : b0, *qs = unit_x8_qs_of(type, g8, e ? k1 : k0);
                const __m512i qh = unit_qh512(type, be, be);
                __m512i w[4];  // w[k] lanes 0-7: weights 4v .. 4v+3 with v = 2k, lanes 8-15: v = 2k + 1
                for (int m = 0; m < (type == Q_Q8_0 ? 4 : 2); m++) {
                    const __m512i raw = load512_halves(qs + 64 * m);
                    w[m] = unit_w512(type, raw, 0, qh, 2 * m, 2 * m + 1);
                    if (type != Q_Q8_0) w[m + 2] = unit_w512(type, raw, 1, qh, 4 + 2 * m, 5 + 2 * m);
                }
                __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
                for (int m = 0; m < 4; m += 2) {
                    s0 = _mm512_dpbusd_epi32(s0, w[m], lanes2(xv[2 * m], L + e, xv[2 * m + 1], L + e));
                    s1 = _mm512_dpbusd_epi32(s1, w[m + 1], lanes2(xv[2 * m + 2], L + e, xv[2 * m + 3], L + e));
                }
                i[e] = _mm512_add_epi32(s0, s1);
            }
            __m512i iv = fold2(i[0], i[1]);
            if (!has_m) iv = _mm512_add_epi32(iv, lanes1(cw, L, L + 1));
            const __mmask16 k = two ? 0xffff : 0x00ff;
            const __m512 dd = _mm512_maskz_mul_ps(k, unit_d512(type, b0, (int)(k0 % 8), b1, (int)(k1 % 8)),
                                                  _mm512_castsi512_ps(lanes1(dxw, L, L + 1)));
            acc[L / 2] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iv), dd, acc[L / 2]);
            if (has_m)
                acc[L / 2] = _mm512_fmadd_ps(_mm512_maskz_mov_ps(k, x8_pair_halves(b0 + X8_AT(block_q4_1, m), b1 + X8_AT(block_q4_1, m))),
                                             _mm512_castsi512_ps(lanes1(W, L, L + 1)), acc[L / 2]);
        }
    }
    reduce16_pairs8(acc, out);
}

// Q3_K's scale words (q3k_scale_words) of the rows in the lanes, from their
// x8 scale bytes 0-7 (a0), 8-15 (a1) and 16-23 (t): (lo & 15) | (hi & 3) << 4.
ALWAYS_INLINE void q3k_words512(__m512i a0, __m512i a1, __m512i t, __m512i S[4]) {
    for (int w = 0; w < 4; w++)
        S[w] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(w & 1 ? a1 : a0, 4 * (w / 2)),
                                         _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(t, 2 * w), _mm512_set1_epi8(3)), 4),
                                         _mm512_set1_epi8(15), 0xEC);
}

// 8 rows' fp16 field at p as floats, in both halves.
ALWAYS_INLINE __m512 halves8_twice(const uint8_t *p) {
    const __m512 f = _mm512_castps256_ps512(_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)));
    return _mm512_shuffle_f32x4(f, f, 0x44);
}

// Vectors v and v + 4 of an x8 run at p (32 bytes each) in one register.
ALWAYS_INLINE __m512i vectors_v4(const uint8_t *p) { return x8_pair(p, p + 128); }

// Q6_K, Q3_K and Q2_K (the K16 types), one token against the x8 group at g8:
// per pass groups j = 2s and 2s + 1 of a super-block, in lanes 0-7 and 8-15.
// Q6_K runs q6k_tile8_avx2's chains (acc[s], with q6k_token's operations;
// reduced in reduce16's order), Q3_K and Q2_K each row's K23 chain (as
// k23_tile8_avx2): the passes' scaled group sums add up in I and M, whose
// halves fold into the rows' sums once per super-block. Group j takes the
// vectors m < 4 of a run of 8, group j + 1 the vectors m + 4: Q6_K's ql
// vectors 16h + 8(k & 1) on (nibble k >> 1; s = 4h + k) with qh vectors 8h
// on (bits 2k, 2k + 1), Q3_K's plane dwords of sub-block s, Q2_K's qs
// vectors 8 (j / 8) on (bits 2k); q[m] lanes: group j's weights 4m .. 4m+3
// (0-7), group j + 1's (8-15), so a pass's sums need no folding and each
// token vector one single-source permute (lanes1).
ALWAYS_INLINE void k16_decode8(uint32_t type, const uint8_t *g8, int64_t n, int64_t u0, int64_t u1, const uint8_t *x,
                               float *out) {
    (void)n;
    const size_t bb = 8 * (type == Q_Q6_K ? sizeof(block_q6_K) : type == Q_Q2_K ? sizeof(block_q2_K) : sizeof(block_q3_K));
    const __m512i m3 = _mm512_set1_epi8(3), m4 = _mm512_set1_epi8(15);
    __m512 acc[8];  // Q6_K's chains
    __m256 chain = _mm256_setzero_ps();  // Q3_K's and Q2_K's (lane r: row r)
    for (int p = 0; p < 8; p++) acc[p] = _mm512_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        const uint8_t *b = g8 + (size_t)u * bb, *r = x + (size_t)u * K16_BYTES;
        __m512i I = _mm512_setzero_si512(), M = _mm512_setzero_si512();  // Q3_K, Q2_K: lanes 0-7 groups 2s, 8-15 2s + 1
        const __m512i xv[4] = {load512(r), load512(r + 64), load512(r + 128), load512(r + 192)}, cv = load512(r + K16_C);
        const __m512 dx = _mm512_set1_ps(load_f32(r + K16_D));
        const __m512 d = halves8_twice(b + (type == Q_Q6_K ? X8_AT(block_q6_K, d) : type == Q_Q2_K ? X8_AT(block_q2_K, d)
                                                                                              : X8_AT(q3k_planes, d)));
        const __m512 dmin = type == Q_Q2_K ? halves8_twice(b + X8_AT(block_q2_K, dmin)) : d;
        __m512i S[4];  // Q3_K: q3k_scale_words' words of the 8 rows, in both halves
        if (type == Q_Q3_K) {
            const uint8_t *sc = b + X8_AT(q3k_planes, scales);
            const __m512i a0 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)sc));
            const __m512i a1 = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(sc + 32)));
            q3k_words512(a0, a1, _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(sc + 64))), S);
        }
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const int j = 2 * s, h = s / 4, k = s % 4;  // and j + 1
            decode_prefetch_part(b, bb, s, 8);
            __m512i q[4];
            for (int m = 0; m < 4; m++) {
                if (type == Q_Q6_K) {
                    const __m512i l = vectors_v4(b + X8_AT(block_q6_K, ql) + 32 * (16 * h + 8 * (k & 1) + m));
                    const __m512i H = vectors_v4(b + X8_AT(block_q6_K, qh) + 32 * (8 * h + m));
                    const __m512i hi = k == 0 ? _mm512_slli_epi16(H, 4) : k == 1 ? _mm512_slli_epi16(H, 2)
                                     : k == 2 ? H : _mm512_srli_epi16(H, 2);
                    q[m] = _mm512_ternarylogic_epi32(k >> 1 ? _mm512_srli_epi16(l, 4) : l, _mm512_and_si512(hi, _mm512_set1_epi8(0x30)),
                                                     m4, 0xEC);  // (l & 15) | hi
                } else if (type == Q_Q2_K) {
                    const __m512i raw = vectors_v4(b + X8_AT(block_q2_K, qs) + 32 * (8 * h + m));
                    q[m] = _mm512_and_si512(_mm512_srli_epi16(raw, 2 * k), m3);
                } else if (s < 6) {
                    const uint8_t *p = b + X8_AT(q3k_planes, p) + 32 * m + 256 * (s / 2);  // plane i at + 256 i
                    q[m] = _mm512_and_si512(_mm512_srli_epi16(vectors_v4(p), 3 * (s & 1)), _mm512_set1_epi8(7));
                } else {  // bits 6-7 of plane s - 6, bit s of plane 2 as bit 2
                    const uint8_t *p = b + X8_AT(q3k_planes, p) + 32 * m;
                    const __m512i hb = _mm512_and_si512(_mm512_srli_epi16(vectors_v4(p + 512), s == 6 ? 4 : 5), _mm512_set1_epi8(4));
                    q[m] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(vectors_v4(p + 256 * (s - 6)), 6), hb, m3, 0xEC);  // (a & 3) | hb
                }
            }
            const __m512i i0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0], lanes1(xv[0], j, j + 1)), q[1],
                                                   lanes1(xv[1], j, j + 1));
            const __m512i i1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), q[2], lanes1(xv[2], j, j + 1)), q[3],
                                                   lanes1(xv[3], j, j + 1));
            const __m512i c = lanes1(cv, j, j + 1);
            __m512i iv = _mm512_add_epi32(i0, i1);
            if (type == Q_Q6_K) {
                iv = _mm512_add_epi32(iv, c);
                const __m512 a = _mm512_mul_ps(
                    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + X8_AT(block_q6_K, scales) + 8 * j)))), d);
                acc[s] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iv), _mm512_mul_ps(a, dx), acc[s]);
            } else if (type == Q_Q3_K) {  // the scales as low int16s times the sums (as k23_token)
                iv = _mm512_add_epi32(iv, c);
                const __m512i sh = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(8 * (j % 4)), _mm512_set1_epi32(8 * ((j + 1) % 4)));
                const __m512i sc = _mm512_and_si512(_mm512_srlv_epi32(S[j / 4], sh), _mm512_set1_epi32(63));
                I = _mm512_add_epi32(I, _mm512_madd_epi16(iv, _mm512_and_si512(_mm512_sub_epi32(sc, _mm512_set1_epi32(32)),
                                                                                 _mm512_set1_epi32(0xFFFF))));
            } else {
                const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(b + X8_AT(block_q2_K, scales) + 8 * j)));
                I = _mm512_add_epi32(I, _mm512_madd_epi16(iv, _mm512_and_si512(sc, _mm512_set1_epi32(15))));
                M = _mm512_add_epi32(M, _mm512_madd_epi16(c, _mm512_srli_epi32(sc, 4)));
            }
        }
        if (type != Q_Q6_K)  // the K23 chain on the folded halves
            chain = k23_chain8(type, chain, _mm256_add_epi32(_mm512_castsi512_si256(I), _mm512_extracti64x4_epi64(I, 1)),
                               _mm256_add_epi32(_mm512_castsi512_si256(M), _mm512_extracti64x4_epi64(M, 1)),
                               _mm512_castps512_ps256(d), _mm512_castps512_ps256(dmin), _mm512_castps512_ps256(dx));
    }
    if (type == Q_Q6_K) reduce16_pairs8(acc, out);
    else _mm256_storeu_ps(out, chain);
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
    r->a = _mm512_mul_ps(sc, _mm512_set1_ps(half_f32(b->d)));
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


// --- Q3_K, Q2_K (the K23 chain, quant_impl.h; lane = group of 16) -----------
//
// As Q6_K: lane g's unsigned quants against the activation record, and c
// (act_k16) for Q3_K's offset 4 or Q2_K's min term; each super-block's integer
// sums I and M (lanes summed) advance the row's one float chain.

typedef struct {
    __m512i q[4];   // q[v] lane g: quants 16g+4v..16g+4v+3 (Q3_K 0..7, Q2_K 0..3)
    __m512i sc, m;  // lane g: its scale (Q3_K's less 32) as the low int16, (Q2_K) its min
    float d, dmin;
} k23_regs;

// Lane g = group 8h + 2j + l16 (h < 2, j < 4, l16 < 2): its 2-bit quants are
// bits 2j of qs dwords 8h + 4 l16 + v; Q3_K's third bit is bit 4h + j of
// hmask dwords 4 l16 + v.
ALWAYS_INLINE void k23_unpack(uint32_t type, const uint8_t *blk, k23_regs *r) {
    const __m512i qidx = _mm512_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4, 8, 12, 8, 12, 8, 12, 8, 12);
    const __m512i qsh = _mm512_setr_epi32(0, 0, 2, 2, 4, 4, 6, 6, 0, 0, 2, 2, 4, 4, 6, 6);
    const __m512i hsh = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    // bit 4h + j of every byte of lane g (Q3_K's third bits)
    const __m512i hbit = _mm512_sllv_epi32(_mm512_set1_epi8(1), hsh);
    const __m512i qs = load512(type == Q_Q2_K ? ((const block_q2_K *)blk)->qs : ((const block_q3_K *)blk)->qs);
    for (int v = 0; v < 4; v++) {
        const __m512i vv = _mm512_set1_epi32(v);
        const __m512i lo = _mm512_srlv_epi32(_mm512_permutexvar_epi32(_mm512_add_epi32(qidx, vv), qs), qsh);
        r->q[v] = _mm512_and_si512(lo, _mm512_set1_epi8(3));
        if (type == Q_Q3_K) {
            const __m512i hm = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)((const block_q3_K *)blk)->hmask));
            const __m512i hidx = _mm512_and_si512(_mm512_add_epi32(qidx, vv), _mm512_set1_epi32(7));
            const __mmask64 k = _mm512_test_epi8_mask(_mm512_permutexvar_epi32(hidx, hm), hbit);
            r->q[v] = _mm512_mask_add_epi8(r->q[v], k, r->q[v], _mm512_set1_epi8(4));
        }
    }
    if (type == Q_Q3_K) {
        const block_q3_K *b = (const block_q3_K *)blk;
        const __m512i sc = _mm512_sub_epi32(_mm512_cvtepu8_epi32(q3k_scale_vec(b->scales)), _mm512_set1_epi32(32));
        r->sc = _mm512_and_si512(sc, _mm512_set1_epi32(0xFFFF));
        r->d = half_f32(b->d), r->dmin = 0.0f;
    } else {
        const block_q2_K *b = (const block_q2_K *)blk;
        const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)b->scales));
        r->sc = _mm512_and_si512(sc, _mm512_set1_epi32(15));
        r->m = _mm512_srli_epi32(sc, 4);
        r->d = half_f32(b->d), r->dmin = half_f32(b->dmin);
    }
}

// One super-block of one token (q: its activation record). The group sums
// (Q3_K: with c, Σ (q - 4) x) fit in int16, so VPMADDWD multiplies them by
// the scales, and the min term's c (|c| <= 2032) by the mins.
ALWAYS_INLINE void k23_token(uint32_t type, const k23_regs *r, const uint8_t *q, float *acc) {
    __m512i i0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), r->q[0], load512(q));
    __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), r->q[1], load512(q + 64));
    i0 = _mm512_dpbusd_epi32(i0, r->q[2], load512(q + 128));
    i1 = _mm512_dpbusd_epi32(i1, r->q[3], load512(q + 192));
    const __m512i c = load512(q + K16_C);
    __m512i i = _mm512_add_epi32(i0, i1);
    if (type == Q_Q3_K) i = _mm512_add_epi32(i, c);
    const int32_t I = _mm512_reduce_add_epi32(_mm512_madd_epi16(i, r->sc));
    const int32_t M = type == Q_Q2_K ? _mm512_reduce_add_epi32(_mm512_madd_epi16(c, r->m)) : 0;
    *acc = k23_chain(type, *acc, I, M, r->d, r->dmin, load_f32(q + K16_D));
}

ALWAYS_INLINE void k23_tile_n(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                              const uint8_t *x, size_t xs, float *out, const int NT) {
    (void)n;
    const size_t bs = type == Q_Q2_K ? sizeof(block_q2_K) : sizeof(block_q3_K);
    float acc[TILE_T];
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    for (int64_t u = u0; u < u1; u++) {
        k23_regs r;
        k23_unpack(type, w + (size_t)u * bs, &r);
        const uint8_t *q = x + (size_t)u * K16_BYTES;
#pragma GCC unroll 16
        for (int t = 0; t < NT; t++) k23_token(type, &r, q + t * xs, &acc[t]);
    }
#pragma GCC unroll 16
    for (int t = 0; t < NT; t++) out[t] = acc[t];
}


// Group j of Q3_K or Q2_K x8 blocks a (rows in lanes 0-7) and b (8-15), as
// k23_group8_avx2 takes it for 8 rows: q[v] lane r = row r's quants 4v ..
// 4v+3, sc = its scale as the low int16 (Q2_K's even groups 4 sc, their odd
// k masked in place as 4 q), mn (Q2_K) its min; S: Q3_K's scale words.
ALWAYS_INLINE void k23_group16(uint32_t type, const uint8_t *a, const uint8_t *b, const __m512i S[4], int j, __m512i q[4],
                               __m512i *sc, __m512i *mn) {
    const __m512i m3 = _mm512_set1_epi8(3);
    const int s = j / 2, k = (j % 8) / 2;
    for (int v = 0; v < 4; v++) {
        if (type == Q_Q2_K) {
            const size_t o = X8_AT(block_q2_K, qs) + 32 * (8 * (j / 8) + 4 * (j & 1) + v);
            const __m512i raw = x8_pair(a + o, b + o);
            q[v] = _mm512_and_si512(k < 2 ? raw : _mm512_srli_epi16(raw, 4), _mm512_set1_epi8(k & 1 ? 12 : 3));
        } else if (s < 6) {
            const size_t o = X8_AT(q3k_planes, p) + 32 * (4 * (j & 1) + v) + 256 * (s / 2);
            q[v] = _mm512_and_si512(_mm512_srli_epi16(x8_pair(a + o, b + o), 3 * (s & 1)), _mm512_set1_epi8(7));
        } else {  // bits 6-7 of plane s - 6, bit s of plane 2 as bit 2
            const size_t o = X8_AT(q3k_planes, p) + 32 * (4 * (j & 1) + v);
            const __m512i hb = _mm512_and_si512(_mm512_srli_epi16(x8_pair(a + o + 512, b + o + 512), s == 6 ? 4 : 5), _mm512_set1_epi8(4));
            const size_t op = o + 256 * (s - 6);
            q[v] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(x8_pair(a + op, b + op), 6), hb, m3, 0xEC);  // (a & 3) | hb
        }
    }
    if (type == Q_Q2_K) {
        const size_t o = X8_AT(block_q2_K, scales) + 8 * j;
        const __m512i raw = _mm512_cvtepu8_epi32(_mm_set_epi64x((long long)load_u64(b + o), (long long)load_u64(a + o)));
        *sc = _mm512_and_si512(raw, _mm512_set1_epi32(15));
        if (!(k & 1)) *sc = _mm512_slli_epi32(*sc, 2);
        *mn = _mm512_srli_epi32(raw, 4);
    } else {
        const __m512i s6 = _mm512_and_si512(_mm512_srli_epi32(S[j / 4], 8 * (j % 4)), _mm512_set1_epi32(63));
        *sc = _mm512_and_si512(_mm512_sub_epi32(s6, _mm512_set1_epi32(32)), _mm512_set1_epi32(0xFFFF));
    }
}

// k23_chain8 (quant_impl.h) for 16 rows in the lanes.
ALWAYS_INLINE __m512 k23_chain16(uint32_t type, __m512 acc, __m512i I, __m512i M, __m512 d, __m512 dmin, __m512 dx) {
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(I), _mm512_mul_ps(d, dx), acc);
    return type == Q_Q2_K ? _mm512_fnmadd_ps(_mm512_cvtepi32_ps(M), _mm512_mul_ps(dmin, dx), acc) : acc;
}

#define K23_TILE_T 8  // tokens a pass of k23_tile16 (their integer sums stay in registers)

// Two x8 groups of Q3_K or Q2_K (a's rows in lanes 0-7, b's in 8-15) against
// NT tokens, each row running the K23 chain in its lane with k23_token's
// integer sums; a group's weights load once for K23_TILE_T tokens (Q2_K:
// its sums are 4 times I). With `next`, the two groups from there on are
// fetched as these are read.
ALWAYS_INLINE void k23_tile16(uint32_t type, const uint8_t *a, const uint8_t *b, const uint8_t *next, int64_t n,
                              int64_t u0, int64_t u1, const uint8_t *x, size_t xs, float *out, const int NT) {
    const size_t bb = 8 * (type == Q_Q2_K ? sizeof(block_q2_K) : sizeof(block_q3_K));
    const size_t gb = (size_t)(n / 256) * bb;  // a group's bytes
    __m512 acc[TILE_T];
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t u = u0; u < u1; u++) {
        const uint8_t *ba = a + (size_t)u * bb, *bq = b + (size_t)u * bb;
        if (next)
            for (size_t l = 0; l < bb; l += 64) {
                _mm_prefetch((const char *)next + (size_t)u * bb + l, _MM_HINT_T0);
                _mm_prefetch((const char *)next + gb + (size_t)u * bb + l, _MM_HINT_T0);
            }
        __m512i S[4];  // Q3_K: q3k_scale_words' words of the 16 rows
        if (type == Q_Q3_K) {
            const size_t o = X8_AT(q3k_planes, scales);
            q3k_words512(x8_pair(ba + o, bq + o), x8_pair(ba + o + 32, bq + o + 32), x8_pair(ba + o + 64, bq + o + 64), S);
        }
        const size_t od = type == Q_Q2_K ? X8_AT(block_q2_K, d) : X8_AT(q3k_planes, d);
        const __m512 d = x8_pair_halves(ba + od, bq + od);
        const __m512 dmin = type == Q_Q2_K ? x8_pair_halves(ba + X8_AT(block_q2_K, dmin), bq + X8_AT(block_q2_K, dmin)) : d;
        for (int t0 = 0; t0 < NT; t0 += K23_TILE_T) {
            const int nt = NT < K23_TILE_T ? NT : K23_TILE_T;
            const uint8_t *xu = x + (size_t)t0 * xs + (size_t)u * K16_BYTES;
            __m512i I[K23_TILE_T], M[K23_TILE_T];
            for (int t = 0; t < nt; t++) I[t] = M[t] = _mm512_setzero_si512();
            for (int j = 0; j < 16; j++) {  // (not unrolled: 16 copies of the tokens' bodies would not fit the caches)
                __m512i q[4], sc, mn = _mm512_setzero_si512();
                k23_group16(type, ba, bq, S, j, q, &sc, &mn);
#pragma GCC unroll 16
                for (int t = 0; t < nt; t++) {
                    const uint8_t *r = xu + (size_t)t * xs + 4 * j;
                    __m512i i0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[0], bcast32(r));
                    __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[1], bcast32(r + 64));
                    i0 = _mm512_dpbusd_epi32(i0, q[2], bcast32(r + 128));
                    i1 = _mm512_dpbusd_epi32(i1, q[3], bcast32(r + 192));
                    const __m512i c = bcast32(r + K16_C);
                    __m512i i = _mm512_add_epi32(i0, i1);  // |i| <= 24384 (Q2_K's 4 q), Q3_K's with c <= 8128: an int16
                    if (type == Q_Q3_K) i = _mm512_add_epi32(i, c);
                    I[t] = _mm512_add_epi32(I[t], _mm512_madd_epi16(i, sc));
                    if (type == Q_Q2_K) M[t] = _mm512_add_epi32(M[t], _mm512_madd_epi16(c, mn));
                }
            }
#pragma GCC unroll 16
            for (int t = 0; t < nt; t++) {
                const __m512 dx = _mm512_set1_ps(load_f32(xu + (size_t)t * xs + K16_D));
                acc[t0 + t] = k23_chain16(type, acc[t0 + t], type == Q_Q2_K ? _mm512_srai_epi32(I[t], 2) : I[t], M[t], d, dmin, dx);
            }
        }
    }
    for (int t = 0; t < NT; t++) _mm512_storeu_ps(out + 16 * t, acc[t]);
}


// --- Q4_K and Q5_K: lanes = 16 weight rows (the K4 float chain) -------------
//
// The K4 chain (k4_chain) advances each row's float accumulators once per
// super-block (one token alone) or per 64 elements (gemm) in a fixed serial
// order, so here each lane is one weight row and runs that chain; integer
// sums are exact in any order. Activations are broadcast: dword v of
// sub-block s of super-block k is at record k, byte k4_sub_off(s) + 4v
// (layout at K4_BYTES). The kernels take the type as a compile-time
// constant (matmul_k4): Q5_K adds each weight's 5th bit from qh.

#define K4_TILE_T 8  // tokens per pass over a group of 16 rows (at most)

// Bytes ahead of the current block that k4_rows_n prefetches in each of its
// 16 rows: 16 streams at DRAM latency need more requests in flight than the
// hardware prefetcher issues (k4_rows_n on weights from DRAM got about 25%
// faster). The one-token kernel streams one row at a time (DECODE_AHEAD).
#define K4_ROWS_PREFETCH (2 * sizeof(block_q4_K))

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

// The 16 rows that a K4 kernel reads side by side: ggml's rows (rows[r]),
// or two Q4_K x8 groups (quant_x8.c; g[0]'s rows in lanes 0-7, g[1]'s in 8-15).
typedef struct {
    const uint8_t *const *rows;
    const uint8_t *g[2];
} rows16;

// A vector of 8 rows' dword at byte o of their block k: in an x8 group
// (block bytes bb) at 8 o of the group's block (a 4-byte-unit field).
ALWAYS_INLINE __m512i x8_pair_load(const rows16 *src, size_t bb, int64_t k, size_t o) {
    const size_t at = (size_t)k * 8 * bb + 8 * o;
    return x8_pair(src->g[0] + at, src->g[1] + at);
}

// q[v] lane r = dword v of row r's 32 bytes at byte o of block k (v < 8).
ALWAYS_INLINE void rows16_load32(const rows16 *src, size_t bb, int64_t k, size_t o, __m512i q[8]) {
    if (!src->rows)
        for (int v = 0; v < 8; v++) q[v] = x8_pair_load(src, bb, k, o + 4 * (size_t)v);
    else
        rows_load32(src->rows, (size_t)k * bb + o, q);
}

// Per-row scales of super-block k, lanes = rows: sc[s] (int), mnp[p] = the
// int16 pair (mn[2p], mn[2p+1]), d and dmin as float.
ALWAYS_INLINE void q4k_rows_scales(const rows16 *src, size_t bb, int64_t k, __m512i sc[8], __m512i mnp[4], __m512 *d,
                                   __m512 *dmin) {
    __m512i h[4];  // dwords: d | dmin << 16, then the 12 scale bytes
    if (src->rows) {
        rows_load16(src->rows, (size_t)k * bb, h);
        *d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h[0]));
        *dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(h[0], 16)));
    } else {  // the x8 d and dmin fields: 8 halves each
        const uint8_t *a = src->g[0] + (size_t)k * 8 * bb, *b = src->g[1] + (size_t)k * 8 * bb;
        *d = x8_pair_halves(a + X8_AT(block_q4_K, d), b + X8_AT(block_q4_K, d));
        *dmin = x8_pair_halves(a + X8_AT(block_q4_K, dmin), b + X8_AT(block_q4_K, dmin));
        for (int i = 1; i < 4; i++) h[i] = x8_pair_load(src, bb, k, offsetof(block_q4_K, scales) + 4 * (size_t)(i - 1));
    }
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

// Bit s of each byte of qh, as 16 added to the weight bytes of v.
ALWAYS_INLINE __m512i add_bit4(__m512i v, __m512i qh, __m512i bit_s) {
    return _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(qh, bit_s), v, _mm512_set1_epi8(16));
}

// y[t * ldy + r - lo] for rows r in [lo, hi) of the 16 and NT tokens.
ALWAYS_INLINE void k4_rows_n(uint32_t type, const rows16 *src, int lo, int hi, int64_t n, const uint8_t *x, size_t xs,
                             int gemm, float *y, size_t ldy, const int NT) {
    __m512 s1[K4_TILE_T], s2[K4_TILE_T];
    __m512i I[K4_TILE_T], M[K4_TILE_T];
    for (int t = 0; t < NT; t++) s1[t] = s2[t] = _mm512_setzero_ps(), I[t] = M[t] = _mm512_setzero_si512();
    const __m512i m4 = _mm512_set1_epi8(15);
    const size_t bb = k4_block_bytes(type);
    for (int64_t k = 0; k < n / 256; k++) {
        __m512i sc[8], mnp[4], qh[8];
        __m512 dw, dmw;
        q4k_rows_scales(src, bb, k, sc, mnp, &dw, &dmw);
        if (type == Q_Q5_K) rows16_load32(src, bb, k, K4_QH_OFF, qh);  // qh[v] lane r: dword v of row r's qh
        if (src->rows) {
            for (int r = 0; r < 16; r++)  // the 3 cache lines a block ahead may touch
                for (int l = 0; l < 3; l++)
                    _mm_prefetch((const char *)src->rows[r] + k * bb + K4_ROWS_PREFETCH + 64 * l, _MM_HINT_T0);
        } else {
            for (int g = 0; g < 2; g++)  // the groups' blocks as far ahead
                for (size_t l = 0; l < 8 * bb; l += 64)
                    _mm_prefetch((const char *)src->g[g] + (k * 8 * bb + 8 * K4_ROWS_PREFETCH) + l, _MM_HINT_T0);
        }
        const uint8_t *u = x + (size_t)k * K4_BYTES;  // this super-block's activation record
        for (int c = 0; c < 4; c++) {
            __m512i raw[8], nib[8];
            rows16_load32(src, bb, k, k4_qs_off(type) + 32 * (size_t)c, raw);
            for (int h = 0; h < 2; h++) {
                const int s = 2 * c + h;
                for (int v = 0; v < 8; v++) {
                    nib[v] = _mm512_and_si512(h ? _mm512_srli_epi16(raw[v], 4) : raw[v], m4);
                    if (type == Q_Q5_K) nib[v] = add_bit4(nib[v], qh[v], _mm512_set1_epi8((char)(1 << s)));
                }
                // partial sums of G dwords (4 products each) stay within
                // int16 (G * 4 * 31 * 128 < 2^15 for Q5_K's G = 2, 15 for
                // Q4_K's G = 4), so VPDPWSSD against sc (high half 0)
                // multiplies them exactly
                const int G = type == Q_Q5_K ? 2 : 4;
                for (int t = 0; t < NT; t++) {
                    const uint8_t *a = u + (size_t)t * xs + k4_sub_off(s);  // dword v: elements 4v..4v+3
                    for (int v0 = 0; v0 < 8; v0 += 2 * G) {
                        __m512i i0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nib[v0], bcast32(a + 4 * v0));
                        __m512i i1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), nib[v0 + 1], bcast32(a + 4 * v0 + 4));
                        for (int v = v0 + 2; v < v0 + 2 * G; v += 2) {
                            i0 = _mm512_dpbusd_epi32(i0, nib[v], bcast32(a + 4 * v));
                            i1 = _mm512_dpbusd_epi32(i1, nib[v + 1], bcast32(a + 4 * v + 4));
                        }
                        I[t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(I[t], i0, sc[s]), i1, sc[s]);
                    }
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
    for (int t = 0; t < NT; t++) {
        float o[16];
        _mm512_storeu_ps(o, _mm512_sub_ps(s1[t], s2[t]));
        memcpy(y + (size_t)t * ldy, o + lo, sizeof(float) * (size_t)(hi - lo));
    }
}

// --- Q4_K and Q5_K decode: one token, 8 rows at a time ---------------------
//
// One token (decode, and a batch's lone tokens) runs the same per-row float
// chain as k4_rows_n with NT = 1: per super-block, exact integers I and M,
// then s1 = fma(I, fp16(d) * d_x, s1) and s2 = fma(M, fp16(dmin) * d_x, s2).
// Only the integer work is arranged differently: each row's qs load
// straight from memory (64 bytes a vector, no transposition), paired with
// the activation record's vectors (see K4_BYTES), and the 8 rows' integer
// vectors of a block are summed by one transposing reduction. The rows are
// read one after another, not side by side: a single memory stream, which
// a 2-core decode read ~25% faster than 8 streams.

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
// and the (mn[2p], mn[2p + 1]) pairs in dwords 4..7, facing K4_PAIRS.
static const int8_t Q4K_SC01[64] = {B8(0, 1), B8(0, 1), B8(2, 3), B8(2, 3)};
static const int8_t Q4K_SC23[64] = {B8(4, 5), B8(4, 5), B8(6, 7), B8(6, 7)};
static const int8_t Q4K_MN[64] = {Z16, B2(8), B2(9), B2(10), B2(11), B2(12), B2(13), B2(14), B2(15), Z16, Z16};
#undef B2
#undef B8
#undef Z16

// Bit a of the qh bytes in the low 256 bits, bit b in the high ones: the
// 5th bits of the sub-blocks whose weights a 64-byte qs vector holds.
ALWAYS_INLINE __m512i bits_ab(int a, int b) {
    return _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << a)), _mm256_set1_epi8((char)(1 << b)), 1);
}

// One row's integers of one super-block: lanes 0..3 of the result sum to I,
// lanes 4..7 to M. blk: the row's block; sc: the row's scale bytes in
// every 128-bit lane; X: the activation record's 4 q vectors; pairs: its
// K4_PAIRS words in dwords 4..7.
ALWAYS_INLINE __m256i k4_decode_row(uint32_t type, const uint8_t *blk, __m512i sc, const __m512i X[4],
                                    __m512i pairs) {
    const __m512i m4 = _mm512_set1_epi8(15), zero = _mm512_setzero_si512();
    const uint8_t *q = blk + k4_qs_off(type);
    const __m512i w0 = load512(q), w1 = load512(q + 64);
    // the weights of sub-blocks (0 | 2), (1 | 3), (4 | 6), (5 | 7)
    __m512i W[4] = {_mm512_and_si512(w0, m4), _mm512_and_si512(_mm512_srli_epi16(w0, 4), m4),
                    _mm512_and_si512(w1, m4), _mm512_and_si512(_mm512_srli_epi16(w1, 4), m4)};
    if (type == Q_Q5_K) {  // element l of each sub-block: byte l of qh, in both halves
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + K4_QH_OFF)));
        for (int j = 0; j < 4; j++) W[j] = add_bit4(W[j], qh, bits_ab(j % 2 + 4 * (j / 2), j % 2 + 4 * (j / 2) + 2));
    }
    // P0..P3 dword lanes 0..7 / 8..15: Σ q*x over 4 elements of sub-blocks
    // (0 | 2), (1 | 3), (4 | 6), (5 | 7); |P| <= 4 * 31 * 128 packs into int16
    const __m512i P0 = _mm512_dpbusd_epi32(zero, W[0], X[0]);
    const __m512i P1 = _mm512_dpbusd_epi32(zero, W[1], X[1]);
    const __m512i P2 = _mm512_dpbusd_epi32(zero, W[2], X[2]);
    const __m512i P3 = _mm512_dpbusd_epi32(zero, W[3], X[3]);
    __m512i I = _mm512_dpwssd_epi32(zero, _mm512_packs_epi32(P0, P1), _mm512_shuffle_epi8(sc, load512(Q4K_SC01)));
    I = _mm512_dpwssd_epi32(I, _mm512_packs_epi32(P2, P3), _mm512_shuffle_epi8(sc, load512(Q4K_SC23)));
    // fold I's 16 lanes into 4, then M's 4 products into lanes 4..7
    const __m512i F = _mm512_add_epi32(I, _mm512_shuffle_i64x2(I, I, _MM_SHUFFLE(1, 0, 3, 2)));
    const __m512i G = _mm512_maskz_add_epi32(0x000f, F, _mm512_shuffle_i64x2(F, F, _MM_SHUFFLE(0, 0, 0, 1)));
    return _mm512_castsi512_si256(_mm512_dpwssd_epi32(G, _mm512_shuffle_epi8(sc, load512(Q4K_MN)), pairs));
}

// Sums of 8 rows' vectors (k4_decode_row's): the I of row r in lane r % 4 of
// 128-bit lane 2 * (r / 4), its M in lane r % 4 of 128-bit lane 2 * (r / 4) + 1.
ALWAYS_INLINE __m512i q4k_reduce8(const __m256i V[8]) {
    __m512i Z[4], S[2];
    for (int i = 0; i < 4; i++)  // 128-bit lanes: row i's I, M parts; row i + 4's
        Z[i] = _mm512_inserti64x4(_mm512_castsi256_si512(V[i]), V[i + 4], 1);
    for (int i = 0; i < 2; i++)  // [a0+a2, b0+b2, a1+a3, b1+b3] per 128-bit lane
        S[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(Z[2 * i], Z[2 * i + 1]),
                                _mm512_unpackhi_epi32(Z[2 * i], Z[2 * i + 1]));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(S[0], S[1]), _mm512_unpackhi_epi64(S[0], S[1]));
}

// y[r] for rows r < nvalid of 8 (rows[] holds 8 pointers) and one token x.
// The rows are read one after another (one memory stream), K4_PIECE
// blocks at a time; then each block's 8 integer vectors are reduced and
// enter the float chains in block order.
ALWAYS_INLINE void k4_decode8(uint32_t type, const uint8_t *const rows[8], int nvalid, int64_t n, const uint8_t *x,
                              float *y) {
    // halves of the two header vectors: d of rows 0-3, dmin of rows 0-3, d of 4-7, dmin of 4-7
    const __m512i dsel = _mm512_setr_epi32(0 | 8 << 16, 16 | 24 << 16, 1 | 9 << 16, 17 | 25 << 16,
                                           32 | 40 << 16, 48 | 56 << 16, 33 | 41 << 16, 49 | 57 << 16,
                                           0, 0, 0, 0, 0, 0, 0, 0);
    const size_t bb = k4_block_bytes(type);
    const int64_t nb = n / 256;
    __m512 acc = _mm512_setzero_ps();  // lanes as q4k_reduce8: s1 and s2 of each row
    for (int64_t k0 = 0; k0 < nb; k0 += K4_PIECE) {
        const int kn = nb - k0 < K4_PIECE ? (int)(nb - k0) : K4_PIECE;
        __m256i V[K4_PIECE][8];
        for (int r = 0; r < 8; r++)
            for (int k = 0; k < kn; k++) {
                const uint8_t *blk = rows[r] + (size_t)(k0 + k) * bb, *rec = x + (size_t)(k0 + k) * K4_BYTES;
                decode_prefetch(blk, 3 * 64);
                const __m512i X[4] = {load512(rec), load512(rec + 64), load512(rec + 128), load512(rec + 192)};
                const __m512i sc = q4k_scales4(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)blk)));
                V[k][r] = k4_decode_row(type, blk, sc, X, _mm512_maskz_loadu_epi32(0x00f0, rec + K4_PAIRS - 16));
            }
        for (int k = 0; k < kn; k++) {
            const size_t off = (size_t)(k0 + k) * bb;
            const __m512i ha = q4k_headers4(rows, off), hb = q4k_headers4(rows + 4, off);
            const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(ha, dsel, hb)));
            const __m512 D = _mm512_mul_ps(dw, _mm512_set1_ps(load_f32(x + (size_t)(k0 + k) * K4_BYTES + K4_W)));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q4k_reduce8(V[k])), D, acc);
        }
    }
    const __m512 res = _mm512_sub_ps(acc, _mm512_shuffle_f32x4(acc, acc, _MM_SHUFFLE(2, 3, 0, 1)));
    const __m512 out = _mm512_maskz_compress_ps(0x0f0f, res);  // lanes 0-3, 8-11: s1 - s2 of rows 0-7
    _mm512_mask_storeu_ps(y, (__mmask16)((1u << nvalid) - 1), out);
}

// Q4_K, one token against rows [lo, hi) of the x8 group at g8
// (y[r - lo]), in k4_rows8_avx2's one-token chains: a 512-bit vector holds
// qs dwords v, v + 1 (v even) of the 8 rows, so lanes 0-7 and 8-15 sum the
// even and the odd dwords (≤ 8 products: within int16, as VPDPWSSD against
// the scales wants), and the halves fold, exactly, before the float chains.
// The scales are q4k_rows_scales' for the group in both halves.
ALWAYS_INLINE void k4_decode8_x8(uint32_t type, const uint8_t *g8, int lo, int hi, int64_t n, const uint8_t *x,
                                 float *y) {
    const size_t bb = k4_block_bytes(type);
    const rows16 src = {NULL, {g8, g8}};
    const __m512i m4 = _mm512_set1_epi8(15);
    __m256 s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps();
    for (int64_t k = 0; k < n / 256; k++) {
        const uint8_t *blk = g8 + (size_t)k * 8 * bb, *u = x + (size_t)k * K4_BYTES;
        __m512i sc[8], mnp[4];
        __m512 dw, dmw;
        q4k_rows_scales(&src, bb, k, sc, mnp, &dw, &dmw);
        __m512i I2[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};  // h's chains (integers: the same sum)
        __m256i M = _mm256_setzero_si256();
        // unrolled, the prefetches' bounds are constants and the loop one straight run: 302
        // instructions a super-block of the group, against ~500 (gcc kept the loop, its
        // prefetches in small loops of their own, and spilled)
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            __m512i raw[4];  // qs dwords 2w, 2w + 1 of the rows' 32 bytes c
            decode_prefetch_part(blk, 8 * bb, c, 4);
            for (int w = 0; w < 4; w++) raw[w] = load512(blk + 8 * (k4_qs_off(type) + 32 * (size_t)c) + 64 * w);
            for (int h = 0; h < 2; h++) {
                const int s = 2 * c + h;
                const __m512i xa = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(u + k4_sub_off(s))));
                __m512i nib[4], X[4];
                for (int w = 0; w < 4; w++) {
                    nib[w] = _mm512_and_si512(h ? _mm512_srli_epi16(raw[w], 4) : raw[w], m4);
                    X[w] = lanes1(xa, 2 * w, 2 * w + 1);
                }
                const __m512i i0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), nib[0], X[0]), nib[1], X[1]);
                const __m512i i1 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), nib[2], X[2]), nib[3], X[3]);
                I2[h] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(I2[h], i0, sc[s]), i1, sc[s]);
            }
            M = _mm256_dpwssd_epi32(M, _mm512_castsi512_si256(mnp[c]), _mm256_set1_epi32((int)load_u32(u + K4_PAIRS + 4 * c)));
        }
        const __m256 dx = _mm256_set1_ps(load_f32(u + K4_W));
        const __m512i I = _mm512_add_epi32(I2[0], I2[1]);
        const __m256i I8 = _mm256_add_epi32(_mm512_castsi512_si256(I), _mm512_extracti64x4_epi64(I, 1));
        s1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(I8), _mm256_mul_ps(_mm512_castps512_ps256(dw), dx), s1);
        s2 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(M), _mm256_mul_ps(_mm512_castps512_ps256(dmw), dx), s2);
    }
    float o[8];
    _mm256_storeu_ps(o, _mm256_sub_ps(s1, s2));
    memcpy(y, o + lo, sizeof(float) * (size_t)(hi - lo));
}

// Up to 8 of `left` (>= 2) tokens through k4_rows_n: how many.
ALWAYS_INLINE int k4_tokens16(uint32_t type, const rows16 *src, int lo, int hi, int64_t n, const uint8_t *x, size_t xs,
                              int gemm, int left, float *y, size_t ldy) {
    if (left >= 8) return k4_rows_n(type, src, lo, hi, n, x, xs, gemm, y, ldy, 8), 8;
    if (left >= 4) return k4_rows_n(type, src, lo, hi, n, x, xs, gemm, y, ldy, 4), 4;
    return k4_rows_n(type, src, lo, hi, n, x, xs, 0, y, ldy, 2), 2;
}

// Tokens [0, ngemm) run the gemm order (ngemm a multiple of 4), the rest
// one token's: each of those exactly as one token alone, whether k4_decode8
// computes it or k4_rows_n (same float chain, cheaper for several tokens).
ALWAYS_INLINE void matmul_k4_t(uint32_t type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                               size_t xs, int nt, int ngemm, float *y, size_t ldy) {
    for (int r0 = 0; r0 < nr; r0 += 16) {
        const int nv = nr - r0 < 16 ? nr - r0 : 16;
        const uint8_t *rows[16];
        for (int r = 0; r < 16; r++) rows[r] = w + (size_t)(r0 + (r < nv ? r : nv - 1)) * ws;
        const rows16 src = {rows, {NULL, NULL}};
        for (int t = 0; t < nt;) {
            float *yt = y + (size_t)t * ldy + r0;
            const uint8_t *xt = x + (size_t)t * xs;
            const int gemm = t < ngemm, left = (gemm ? ngemm : nt) - t;
            if (left >= 2) {
                t += k4_tokens16(type, &src, 0, nv, n, xt, xs, gemm, left, yt, ldy);
            } else {  // one token: the decode kernel, 8 rows at a time
                for (int r = 0; r < nv; r += 8)
                    k4_decode8(type, rows + r, nv - r < 8 ? nv - r : 8, n, xt, yt + r);
                t += 1;
            }
        }
    }
}

// x8 groups (quant_x8.c): rows [lo, lo + nr) from the group at w8 on, two
// groups at a time (the second the first again past the rows asked for); a
// lone token through k4_decode8_x8, a group at a time.
ALWAYS_INLINE void matmul_k4_x8_t(uint32_t type, int64_t n, const uint8_t *w8, int lo, int nr, const uint8_t *x,
                                  size_t xs, int nt, int ngemm, float *y, size_t ldy) {
    const size_t gb = (size_t)(n / 256) * 8 * k4_block_bytes(type);
    for (int i = 0; i < nr; w8 += 2 * gb, lo = 0) {
        const int hi = lo + nr - i < 16 ? lo + nr - i : 16;
        const rows16 src = {NULL, {w8, hi > 8 ? w8 + gb : w8}};
        for (int t = 0; t < nt;) {
            float *yt = y + (size_t)t * ldy + i;
            const uint8_t *xt = x + (size_t)t * xs;
            const int gemm = t < ngemm, left = (gemm ? ngemm : nt) - t;
            if (left >= 2) t += k4_tokens16(type, &src, lo, hi, n, xt, xs, gemm, left, yt, ldy);
            else {  // one token: each group alone
                k4_decode8_x8(type, w8, lo, hi < 8 ? hi : 8, n, xt, yt);
                if (hi > 8) k4_decode8_x8(type, w8 + gb, 0, hi - 8, n, xt, yt + 8 - lo);
                t += 1;
            }
        }
        i += hi - lo;
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

Q_TILE_TABLE(q_tiles_avx512, unit_tile_n, q6k_tile_n, k23_tile_n, f_tile_n, bf16_tile_n)

#define TILE16_FN(name, kernel, type)                                                                        \
    static void name(const uint8_t *a, const uint8_t *b, const uint8_t *next, int64_t n, int64_t u0, int64_t u1, \
                     const uint8_t *x, size_t xs, int tn, float *out) {                                          \
        TILE_SWITCH(kernel, type, a, b, next, n, u0, u1, x, xs, out)                                             \
    }
TILE16_FN(tile16_q4_0, unit_tile16, Q_Q4_0)
TILE16_FN(tile16_q4_1, unit_tile16, Q_Q4_1)
TILE16_FN(tile16_q5_0, unit_tile16, Q_Q5_0)
TILE16_FN(tile16_q5_1, unit_tile16, Q_Q5_1)
TILE16_FN(tile16_q8_0, unit_tile16, Q_Q8_0)
TILE16_FN(tile16_iq4_nl, unit_tile16, Q_IQ4_NL)
TILE16_FN(tile16_mxfp4, unit_tile16, Q_MXFP4)
TILE16_FN(tile16_iq4_xs, unit_tile16, Q_IQ4_XS)
TILE16_FN(tile16_q3_K, k23_tile16, Q_Q3_K)
TILE16_FN(tile16_q2_K, k23_tile16, Q_Q2_K)
const tile16_fn q_tiles16_avx512[Q_TYPE_COUNT] = {
    [Q_Q4_0] = tile16_q4_0, [Q_Q4_1] = tile16_q4_1,     [Q_Q5_0] = tile16_q5_0,   [Q_Q5_1] = tile16_q5_1,
    [Q_Q8_0] = tile16_q8_0, [Q_IQ4_NL] = tile16_iq4_nl, [Q_MXFP4] = tile16_mxfp4, [Q_IQ4_XS] = tile16_iq4_xs,
    [Q_Q3_K] = tile16_q3_K, [Q_Q2_K] = tile16_q2_K};
// A one-token tile function over a decode8 kernel (the driver's tn is 1).
#define DECODE8_FN(name, kernel, type)                                                                      \
    static void name(const uint8_t *w, int64_t n, int64_t u0, int64_t u1, const uint8_t *x, size_t xs, int tn, \
                     float *out) {                                                                          \
        (void)xs, (void)tn;                                                                                 \
        kernel(type, w, n, u0, u1, x, out);                                                                 \
    }
DECODE8_FN(decode8_q4_0, unit_decode8, Q_Q4_0)
DECODE8_FN(decode8_q4_1, unit_decode8, Q_Q4_1)
DECODE8_FN(decode8_q5_0, unit_decode8, Q_Q5_0)
DECODE8_FN(decode8_q5_1, unit_decode8, Q_Q5_1)
DECODE8_FN(decode8_q8_0, unit_decode8, Q_Q8_0)
DECODE8_FN(decode8_iq4_nl, unit_decode8, Q_IQ4_NL)
DECODE8_FN(decode8_mxfp4, unit_decode8, Q_MXFP4)
DECODE8_FN(decode8_iq4_xs, unit_decode8, Q_IQ4_XS)
DECODE8_FN(decode8_q6_K, k16_decode8, Q_Q6_K)
DECODE8_FN(decode8_q3_K, k16_decode8, Q_Q3_K)
DECODE8_FN(decode8_q2_K, k16_decode8, Q_Q2_K)
const tile_fn q_decode8_avx512[Q_TYPE_COUNT] = {
    [Q_Q4_0] = decode8_q4_0, [Q_Q4_1] = decode8_q4_1,     [Q_Q5_0] = decode8_q5_0,   [Q_Q5_1] = decode8_q5_1,
    [Q_Q8_0] = decode8_q8_0, [Q_IQ4_NL] = decode8_iq4_nl, [Q_MXFP4] = decode8_mxfp4, [Q_Q6_K] = decode8_q6_K,
    [Q_Q3_K] = decode8_q3_K, [Q_Q2_K] = decode8_q2_K,     [Q_IQ4_XS] = decode8_iq4_xs};

void q_matmul_k_avx512(uint32_t type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                       size_t xs, int nt, int ngemm, float *y, size_t ldy) {
    if (type == Q_Q4_K) matmul_k4_t(Q_Q4_K, n, w, ws, nr, x, xs, nt, ngemm, y, ldy);
    else matmul_k4_t(Q_Q5_K, n, w, ws, nr, x, xs, nt, ngemm, y, ldy);
}

void q_matmul_k_x8_avx512(uint32_t type, int64_t n, const uint8_t *w8, int lo, int nr, const uint8_t *x, size_t xs,
                          int nt, int ngemm, float *y, size_t ldy) {
    (void)type;  // Q4_K (quant.c's x8_kernels)
    matmul_k4_x8_t(Q_Q4_K, n, w8, lo, nr, x, xs, nt, ngemm, y, ldy);
}

#endif  // Q_AVX512
