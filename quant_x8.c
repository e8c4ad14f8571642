// quant_x8.c — weights with 8 rows interleaved ("x8", quant.h): the layout,
// packing and unpacking (quant.c's q_matmul_x8 drives the products).
//
// A one-token product over ggml's row-major blocks needs each row's integer
// sums gathered into lanes (one lane per row, or per block of a row), and a
// build without AVX-512 spends about as many operations on that gathering as
// on the products (quant_avx2.c). Interleaved once at load, the bytes come in
// that order: one vector load holds the same 4 bytes of 8 rows.
//
// A group of 8 rows (8g .. 8g+7) keeps the rows' blocks k together (the
// group's block k: 8 blocks' bytes), and in it each field of the block
// (x8_fields) interleaved in units of w bytes: unit i of row r at byte
// 8·w·i + w·r of the field's place. Q4_K's 1152 bytes, so:
//   [0, 16)     d of the 8 rows (fp16), [16, 32) dmin
//   [32, 128)   the scale bytes as 3 vectors of 8 dwords: vector i, dword r =
//               the row's scales[4i .. 4i+3]
//   [128, 1152) qs as 32 vectors: vector j, dword r = the row's qs[4j .. 4j+3]
// Q5_K interleaves each row's block as q5k_planes (quant_impl.h): after the
// scales its 5 planes as 40 vectors (plane i's dwords v at vector 8i + v);
// the 32-element types their fields in order (Q4_0, 144 bytes: d, then qs
// as 4 vectors; Q5_1, 192: d, m, qh as one vector, qs; MXFP4, 136: its 8
// exponent bytes, qs; Q8_0, 272: d, qs as 8 vectors), Q5_0's and Q5_1's qh
// transposed (quant_impl.h); IQ4_XS (1088 bytes) d, scales_h, scales_l as
// one vector, qs as 32 (sub-block s at vectors 4s .. 4s+3); Q2_K (672
// bytes) its 16 scales as runs of 8 bytes (run s, byte r: the row's
// scales[s]), qs as 16 vectors, d, dmin; Q3_K (880) as q3k_planes
// (quant_impl.h): 3 planes as 24 vectors, the scale bytes as 3 vectors, d;
// Q6_K (1680 bytes) ql as 32 vectors, qh as
// 16 (the AVX2 build: q6k_planes' p as 48, group g at vectors 3g .. 3g+2),
// the 16 scales as runs of 8 bytes (run s, byte r: the row's scales[s]),
// then d.
// A matrix's groups follow each other (group g at byte 8g · row bytes), its
// last group padded with copies of the last row.
#include "quant_impl.h"

#include <stdlib.h>

size_t q_x8_bytes(uint32_t type, int64_t rows, int64_t cols) {
    return (size_t)((rows + 7) / 8 * 8) * qtype_row_bytes(type, cols);
}

// A block as fields that interleave: `len` bytes at `off` in units of `w`
// bytes; unit i of row r lands at byte 8·w·i + w·r of the field's place in
// the group's block (X8_AT: 8 × off; the fields cover the block in order).
typedef struct {
    uint8_t off, len, w;
} x8_field;

#define X8_FIELD(T, f, w) {offsetof(T, f), sizeof(((T *)0)->f), w}

static int x8_fields(uint32_t type, const x8_field **f) {
    static const x8_field q4k[] = {X8_FIELD(block_q4_K, d, 2), X8_FIELD(block_q4_K, dmin, 2),
                                   X8_FIELD(block_q4_K, scales, 4), X8_FIELD(block_q4_K, qs, 4)};
    static const x8_field q5k[] = {X8_FIELD(q5k_planes, d, 2), X8_FIELD(q5k_planes, dmin, 2), X8_FIELD(q5k_planes, scales, 4),
                                   X8_FIELD(q5k_planes, p, 4)};
#if X8_Q6K_PLANES
    static const x8_field q6k[] = {X8_FIELD(q6k_planes, p, 4), X8_FIELD(q6k_planes, scales, 1), X8_FIELD(q6k_planes, d, 2)};
#else
    static const x8_field q6k[] = {X8_FIELD(block_q6_K, ql, 4), X8_FIELD(block_q6_K, qh, 4),
                                   X8_FIELD(block_q6_K, scales, 1), X8_FIELD(block_q6_K, d, 2)};
#endif
    static const x8_field q40[] = {X8_FIELD(block_q4_0, d, 2), X8_FIELD(block_q4_0, qs, 4)};
    static const x8_field q80[] = {X8_FIELD(block_q8_0, d, 2), X8_FIELD(block_q8_0, qs, 4)};
    static const x8_field q41[] = {X8_FIELD(block_q4_1, d, 2), X8_FIELD(block_q4_1, m, 2), X8_FIELD(block_q4_1, qs, 4)};
    static const x8_field q50[] = {X8_FIELD(block_q5_0, d, 2), X8_FIELD(block_q5_0, qh, 4), X8_FIELD(block_q5_0, qs, 4)};
    static const x8_field q51[] = {X8_FIELD(block_q5_1, d, 2), X8_FIELD(block_q5_1, m, 2), X8_FIELD(block_q5_1, qh, 4),
                                   X8_FIELD(block_q5_1, qs, 4)};
    static const x8_field iq4nl[] = {X8_FIELD(block_iq4_nl, d, 2), X8_FIELD(block_iq4_nl, qs, 4)};
    static const x8_field mxfp4[] = {X8_FIELD(block_mxfp4, e, 1), X8_FIELD(block_mxfp4, qs, 4)};
    static const x8_field iq4xs[] = {X8_FIELD(block_iq4_xs, d, 2), X8_FIELD(block_iq4_xs, scales_h, 2),
                                     X8_FIELD(block_iq4_xs, scales_l, 4), X8_FIELD(block_iq4_xs, qs, 4)};
    static const x8_field q2k[] = {X8_FIELD(block_q2_K, scales, 1), X8_FIELD(block_q2_K, qs, 4), X8_FIELD(block_q2_K, d, 2),
                                   X8_FIELD(block_q2_K, dmin, 2)};
    static const x8_field q3k[] = {X8_FIELD(q3k_planes, p, 4), X8_FIELD(q3k_planes, scales, 4), X8_FIELD(q3k_planes, d, 2)};
    switch (type) {
#define FIELDS(a) return *f = (a), (int)(sizeof(a) / sizeof(a)[0])
    case Q_Q4_K: FIELDS(q4k);
    case Q_Q5_K: FIELDS(q5k);
    case Q_Q6_K: FIELDS(q6k);
    case Q_Q4_0: FIELDS(q40);
    case Q_Q8_0: FIELDS(q80);
    case Q_Q4_1: FIELDS(q41);
    case Q_Q5_0: FIELDS(q50);
    case Q_Q5_1: FIELDS(q51);
    case Q_IQ4_NL: FIELDS(iq4nl);
    case Q_MXFP4: FIELDS(mxfp4);
    case Q_IQ4_XS: FIELDS(iq4xs);
    case Q_Q2_K: FIELDS(q2k);
    case Q_Q3_K: FIELDS(q3k);
#undef FIELDS
    default: return *f = NULL, 0;
    }
}

int q_x8_layout(uint32_t type) {
    const x8_field *f;
    return x8_fields(type, &f) > 0;
}

// Which weights the backend copies into the layout: those whose one-token
// products this build's x8 kernels compute faster than its kernels on
// ggml's rows. The AVX2 build's gather 8 rows' bytes into lanes at about
// the cost of the products. The AVX-512 build's stream Q4_0, Q8_0, Q4_K and
// Q6_K 20-45% slower than the x8 kernels (one thread, from DRAM), and Q5_0,
// Q5_1, Q4_1, Q2_K, Q3_K decoded 5-30% slower on the 1B shape; with Q5_K
// copied too, the 1B Q5_K_M decoded 5-8% slower. (A type goes there only
// with a one-token x8 kernel.)
int q_x8_wanted(uint32_t type) {
#if defined(Q_AVX2)
    return q_x8_layout(type);
#elif defined(Q_AVX512)
    return q_x8_layout(type) && (type == Q_Q4_K || q_decode8_avx512[type]);
#else
    (void)type;
    return 0;
#endif
}

// A Q5_K block as planes and back (v[s]: element l of sub-block s).
static void q5k_to_planes(const block_q5_K *b, q5k_planes *p) {
    memcpy(p, b, offsetof(q5k_planes, p));  // d, dmin, scales
    for (int l = 0; l < 32; l++) {
        int v[8];
        for (int s = 0; s < 8; s++) v[s] = q5k_value(b, 32 * s + l);
        p->p[0][l] = (uint8_t)(v[0] | (v[5] & 7) << 5);
        p->p[1][l] = (uint8_t)(v[1] | (v[5] >> 3) << 5 | (v[7] >> 3 & 1) << 7);
        p->p[2][l] = (uint8_t)(v[2] | (v[6] & 7) << 5);
        p->p[3][l] = (uint8_t)(v[3] | (v[6] >> 3) << 5 | (v[7] >> 4) << 7);
        p->p[4][l] = (uint8_t)(v[4] | (v[7] & 7) << 5);
    }
}

static void q5k_from_planes(const q5k_planes *p, block_q5_K *b) {
    memcpy(b, p, offsetof(q5k_planes, p));
    for (int l = 0; l < 32; l++) {
        int v[8];
        for (int i = 0; i < 5; i++) v[i] = p->p[i][l] & 31;
        v[5] = p->p[0][l] >> 5 | (p->p[1][l] >> 5 & 3) << 3;
        v[6] = p->p[2][l] >> 5 | (p->p[3][l] >> 5 & 3) << 3;
        v[7] = p->p[4][l] >> 5 | (p->p[1][l] >> 7) << 3 | (p->p[3][l] >> 7) << 4;
        int h = 0;
        for (int s = 0; s < 8; s++) h |= (v[s] >> 4) << s;
        b->qh[l] = (uint8_t)h;
        for (int c = 0; c < 4; c++) b->qs[32 * c + l] = (uint8_t)((v[2 * c] & 15) | (v[2 * c + 1] & 15) << 4);
    }
}

// A Q3_K block as planes and back (v[s]: element l of sub-block s).
static void q3k_to_planes(const block_q3_K *b, q3k_planes *p) {
    for (int l = 0; l < 32; l++) {  // element 32s + l (q2_bits: bits 2 (s % 4) of qs[32 (s / 4) + l])
        int v[8];
        for (int s = 0; s < 8; s++) v[s] = (b->qs[32 * (s / 4) + l] >> 2 * (s % 4) & 3) | ((b->hmask[l] >> s) & 1) << 2;
        p->p[0][l] = (uint8_t)(v[0] | v[1] << 3 | (v[6] & 3) << 6);
        p->p[1][l] = (uint8_t)(v[2] | v[3] << 3 | (v[7] & 3) << 6);
        p->p[2][l] = (uint8_t)(v[4] | v[5] << 3 | (v[6] >> 2) << 6 | (v[7] >> 2) << 7);
    }
    memcpy(p->scales, b->scales, sizeof p->scales);
    p->d = b->d;
}

static void q3k_from_planes(const q3k_planes *p, block_q3_K *b) {
    memset(b->hmask, 0, sizeof b->hmask);
    memset(b->qs, 0, sizeof b->qs);
    for (int l = 0; l < 32; l++) {
        const int p0 = p->p[0][l], p1 = p->p[1][l], p2 = p->p[2][l];
        const int v[8] = {p0 & 7, p0 >> 3 & 7, p1 & 7, p1 >> 3 & 7, p2 & 7, p2 >> 3 & 7,
                          p0 >> 6 | (p2 >> 6 & 1) << 2, p1 >> 6 | (p2 >> 7) << 2};
        for (int s = 0; s < 8; s++) {  // element e = 32s + l: q2_bits' place, bit s of hmask[l]
            b->qs[32 * (s / 4) + l] |= (uint8_t)((v[s] & 3) << 2 * (s % 4));
            b->hmask[l] |= (uint8_t)((v[s] >> 2) << s);
        }
    }
    memcpy(b->scales, p->scales, sizeof b->scales);
    b->d = p->d;
}

#if X8_Q6K_PLANES
// A Q6_K block as q6k_planes and back. Per half h of the block, the 4
// vectors of q6k_value's values (vector k, byte l: element 128h + 32k + l):
// 128-bit lane i holds group 8h + 2k + i, whose bytes 4t + e (t < 3) then
// take bits 2t, 2t+1 of its byte 12 + e. Each lane is stored as 16 bytes,
// the last 4 of which the next group's (or the scales) overwrite.
static void q6k_to_planes(const block_q6_K *b, q6k_planes *p) {
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    const __m256i last = _mm256_setr_epi8(12, 13, 14, 15, 12, 13, 14, 15, 12, 13, 14, 15, -1, -1, -1, -1, 12, 13, 14, 15, 12, 13,
                                          14, 15, 12, 13, 14, 15, -1, -1, -1, -1);
    const __m256i keep = _mm256_setr_epi32(0x03030303, 0x0c0c0c0c, 0x30303030, 0, 0x03030303, 0x0c0c0c0c, 0x30303030, 0);
    const __m256i up = _mm256_setr_epi32(6, 4, 2, 0, 6, 4, 2, 0);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        for (int k = 0; k < 4; k++) {
            const __m256i lo = _mm256_and_si256(k < 2 ? (k ? l1 : l0) : _mm256_srli_epi16(k & 1 ? l1 : l0, 4), m4);
            const __m256i v = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m3), 4));
            const __m256i w = _mm256_or_si256(v, _mm256_sllv_epi32(_mm256_and_si256(_mm256_shuffle_epi8(v, last), keep), up));
            _mm_storeu_si128((__m128i *)p->p[8 * h + 2 * k], _mm256_castsi256_si128(w));
            _mm_storeu_si128((__m128i *)p->p[8 * h + 2 * k + 1], _mm256_extracti128_si256(w, 1));
        }
    }
    memcpy(p->scales, b->scales, sizeof p->scales);
    p->d = b->d;
}

static void q6k_from_planes(const q6k_planes *p, block_q6_K *b) {
    memset(b->ql, 0, sizeof b->ql);
    memset(b->qh, 0, sizeof b->qh);
    for (int e = 0; e < 256; e++) {  // q6k_value's places: h = e / 128, k = e % 128 / 32, l = e % 32
        const uint8_t *g = p->p[e / 16];
        const int i = e % 16, h = e / 128, k = e % 128 / 32, l = e % 32;
        const int v = i < 12 ? g[i] & 63 : g[i - 12] >> 6 | (g[i - 8] >> 6) << 2 | (g[i - 4] >> 6) << 4;
        b->ql[64 * h + 32 * (k & 1) + l] |= (uint8_t)((v & 15) << 4 * (k >> 1));
        b->qh[32 * h + l] |= (uint8_t)((v >> 4) << 2 * k);
    }
    memcpy(b->scales, p->scales, sizeof b->scales);
    b->d = p->d;
}
#endif

// Q5_0's and Q5_1's qh as the x8 copy keeps it (quant_impl.h):
// bit 4v + j to bit 8j + v (a 4 x 8 bit transposition), and back.
static uint32_t q5_qh_to_x8(uint32_t h) {
    uint32_t o = 0;
    for (int j = 0; j < 4; j++) {  // bits j, j + 4, ..., j + 28 into byte j
        uint32_t b = h >> j & 0x11111111u;
        b = (b | b >> 3) & 0x03030303u;
        b = (b | b >> 6) & 0x000f000fu;
        b = (b | b >> 12) & 0xffu;
        o |= b << 8 * j;
    }
    return o;
}

static uint32_t q5_qh_from_x8(uint32_t o) {
    uint32_t h = 0;
    for (int j = 0; j < 4; j++) {
        uint32_t b = o >> 8 * j & 0xffu;
        b = (b | b << 12) & 0x000f000fu;
        b = (b | b << 6) & 0x03030303u;
        b = (b | b << 3) & 0x11111111u;
        h |= b << j;
    }
    return h;
}

// The types whose x8 copy keeps a block in a form of its own (same size):
// Q5_K's, Q3_K's and (AVX2) Q6_K's planes, Q5_0's and Q5_1's qh
// transposed. `to` converts ggml's block b into it at o, else back.
static int x8_own_form(uint32_t type) {
    return type == Q_Q5_K || type == Q_Q3_K || type == Q_Q5_0 || type == Q_Q5_1 || (X8_Q6K_PLANES && type == Q_Q6_K);
}

static void x8_convert(uint32_t type, const uint8_t *b, uint8_t *o, int to) {
#if X8_Q6K_PLANES
    if (type == Q_Q6_K) {
        if (to) q6k_to_planes((const block_q6_K *)b, (q6k_planes *)o);
        else q6k_from_planes((const q6k_planes *)b, (block_q6_K *)o);
        return;
    }
#endif
    if (type == Q_Q5_K) {
        if (to) q5k_to_planes((const block_q5_K *)b, (q5k_planes *)o);
        else q5k_from_planes((const q5k_planes *)b, (block_q5_K *)o);
        return;
    }
    if (type == Q_Q3_K) {
        if (to) q3k_to_planes((const block_q3_K *)b, (q3k_planes *)o);
        else q3k_from_planes((const q3k_planes *)b, (block_q3_K *)o);
        return;
    }
    const size_t at = type == Q_Q5_0 ? offsetof(block_q5_0, qh) : offsetof(block_q5_1, qh);
    memcpy(o, b, qtype_get(type)->block_bytes);
    const uint32_t h = load_u32(b + at), c = to ? q5_qh_to_x8(h) : q5_qh_from_x8(h);
    memcpy(o + at, &c, 4);
}

// Row r's block (ggml's layout) out of the group's block g.
static void x8_block(uint32_t type, const uint8_t *g, int r, uint8_t *b) {
    const x8_field *f;
    const int nf = x8_fields(type, &f);
    uint8_t own[sizeof(block_q6_K)];  // the largest block of an own form
    uint8_t *to = x8_own_form(type) ? own : b;
    for (int j = 0; j < nf; j++)
        for (int i = 0; i < f[j].len; i += f[j].w) memcpy(to + f[j].off + i, g + 8 * (f[j].off + i) + f[j].w * r, f[j].w);
    if (x8_own_form(type)) x8_convert(type, own, b, 0);
}

#if defined(__AVX2__)
// 8 units of 4 bytes of 8 rows (32 bytes at row[r] + at; h = 2) or 4 units
// (16 bytes; h = 1) and the group's vectors of them at g (vector u, dword r:
// row r's unit u), copied into the group (pack) or out of it: per 4 units a
// transposition (transpose4x8_avx2) between [row i | row i + 4] and the
// unit vectors.
ALWAYS_INLINE void x8_units(uint8_t *const row[8], size_t at, uint8_t *g, int pack, const int h) {
    __m256i v[2][4], t[2][4];
    for (int i = 0; i < 4; i++)
        if (!pack) {
            for (int k = 0; k < h; k++) v[k][i] = _mm256_loadu_si256((const __m256i *)(g + 128 * k + 32 * i));
        } else if (h == 2) {
            const __m256i a = _mm256_loadu_si256((const __m256i *)(row[i] + at)), b = _mm256_loadu_si256((const __m256i *)(row[i + 4] + at));
            v[0][i] = _mm256_permute2x128_si256(a, b, 0x20);
            v[1][i] = _mm256_permute2x128_si256(a, b, 0x31);
        } else {
            v[0][i] = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(row[i] + at))),
                                              _mm_loadu_si128((const __m128i *)(row[i + 4] + at)), 1);
        }
    for (int k = 0; k < h; k++) transpose4x8_avx2(v[k], t[k]);
    for (int i = 0; i < 4; i++)
        if (pack) {
            for (int k = 0; k < h; k++) _mm256_storeu_si256((__m256i *)(g + 128 * k + 32 * i), t[k][i]);
        } else if (h == 2) {
            _mm256_storeu_si256((__m256i *)(row[i] + at), _mm256_permute2x128_si256(t[0][i], t[1][i], 0x20));
            _mm256_storeu_si256((__m256i *)(row[i + 4] + at), _mm256_permute2x128_si256(t[0][i], t[1][i], 0x31));
        } else {
            _mm_storeu_si128((__m128i *)(row[i] + at), _mm256_castsi256_si128(t[0][i]));
            _mm_storeu_si128((__m128i *)(row[i + 4] + at), _mm256_extracti128_si256(t[0][i], 1));
        }
}
#endif

// Block k of 8 rows (row[r]: ggml's rows; at: the block's offset) and the
// group's block k at g, copied into the group (pack) or out of it.
static void x8_group_block(const x8_field *f, int nf, size_t at, uint8_t *const row[8], uint8_t *g, int pack) {
    for (int j = 0; j < nf; j++) {
        int i = 0;
#if defined(__AVX2__)
        if (f[j].w == 4) {  // 32 bytes of each row at a time, then 16
            for (; i + 32 <= f[j].len; i += 32, g += 256) x8_units(row, at + f[j].off + i, g, pack, 2);
            for (; i + 16 <= f[j].len; i += 16, g += 128) x8_units(row, at + f[j].off + i, g, pack, 1);
        }
#endif
#define X8_UNITS(W)                                                          \
    for (; i < f[j].len; i += (W))                                           \
        for (int r = 0; r < 8; r++, g += (W))                                \
            if (pack) memcpy(g, row[r] + at + f[j].off + i, (W));            \
            else memcpy(row[r] + at + f[j].off + i, g, (W));
        if (f[j].w == 4) X8_UNITS(4)
        else if (f[j].w == 2) X8_UNITS(2)
        else X8_UNITS(1)
#undef X8_UNITS
    }
}

// Blocks [0, nb) of 8 rows (row[r]) and of their group at g, copied into the
// group (pack) or out of it.
static void x8_group(uint32_t type, int64_t nb, uint8_t *const row[8], uint8_t *g, int pack) {
    const x8_field *f;
    const int nf = x8_fields(type, &f);
    const size_t bb = (size_t)f[nf - 1].off + f[nf - 1].len;  // the fields cover the block
    for (int64_t k = 0; k < nb; k++, g += 8 * bb) {
        if (!x8_own_form(type)) {
            x8_group_block(f, nf, (size_t)k * bb, row, g, pack);
            continue;
        }
        uint8_t own[8][sizeof(block_q6_K)];  // the rows' blocks in the type's own form (the largest)
        uint8_t *const orow[8] = {own[0], own[1], own[2], own[3], own[4], own[5], own[6], own[7]};
        for (int r = 0; pack && r < 8; r++) x8_convert(type, row[r] + (size_t)k * bb, own[r], 1);
        x8_group_block(f, nf, 0, orow, g, pack);
        for (int r = 0; !pack && r < 8; r++) x8_convert(type, own[r], row[r] + (size_t)k * bb, 0);
    }
}

void q_x8_pack(uint32_t type, int64_t cols, int64_t rows, int64_t g0, int64_t g1, const void *src, void *dst) {
    const size_t rb = qtype_row_bytes(type, cols);
    for (int64_t g = g0; g < g1; g++) {
        uint8_t *row[8];  // the group's rows (the last one repeated past the matrix's end); only read
        for (int r = 0; r < 8; r++) row[r] = (uint8_t *)src + (size_t)(8 * g + r < rows ? 8 * g + r : rows - 1) * rb;
        x8_group(type, cols / qtype_get(type)->block, row, (uint8_t *)dst + (size_t)(8 * g) * rb, 1);
    }
}

void q_x8_dequantize_row(uint32_t type, int64_t cols, const void *w8, int64_t r, float *dst) {
    const qtype_info *q = qtype_get(type);
    const size_t rb = qtype_row_bytes(type, cols), bb = q->block_bytes;
    const uint8_t *g = (const uint8_t *)w8 + (size_t)(r / 8 * 8) * rb;
    for (int64_t k = 0; k < cols / q->block; k++) {
        uint8_t blk[sizeof(block_q6_K)];  // the largest x8 block
        x8_block(type, g + (size_t)k * 8 * bb, (int)(r % 8), blk);
        q_dequantize_row(type, blk, dst + q->block * k, q->block);
    }
}

#define X8_PIECE 4  // groups that x8_matmul_unpacked unpacks at a time

// Rows [r0, r0 + nr) of the x8 matrix w8 unpacked into ggml's layout,
// X8_PIECE groups at a time, and multiplied by q_matmul (rows are
// independent: the same bits). -1, with nothing written, when the rows'
// copy cannot be allocated.
int x8_matmul_unpacked(uint32_t type, int64_t n, const void *w8, int64_t r0, int nr, const void *xq, size_t xs, int nt,
                       int nt_joint, float *y, size_t ldy) {
    const size_t rb = qtype_row_bytes(type, n);
    const int64_t nb = n / qtype_get(type)->block, g0 = r0 / 8, g1 = (r0 + nr + 7) / 8;
    const int64_t per = g1 - g0 < X8_PIECE ? g1 - g0 : X8_PIECE;
    uint8_t *buf = malloc((size_t)per * 8 * rb);
    if (!buf) return -1;
    for (int64_t g = g0; g < g1; g += per) {
        const int64_t ge = g1 - g < per ? g1 : g + per;
        for (int64_t h = g; h < ge; h++) {
            uint8_t *row[8];
            for (int r = 0; r < 8; r++) row[r] = buf + (size_t)(8 * (h - g) + r) * rb;
            x8_group(type, nb, row, (uint8_t *)w8 + (size_t)(8 * h) * rb, 0);  // only read
        }
        const int64_t a = r0 > 8 * g ? r0 : 8 * g, e = r0 + nr < 8 * ge ? r0 + nr : 8 * ge;
        q_matmul(type, n, buf + (size_t)(a - 8 * g) * rb, rb, (int)(e - a), xq, xs, nt, nt_joint, y + (a - r0), ldy);
    }
    free(buf);
    return 0;
}
