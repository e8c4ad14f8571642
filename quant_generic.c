// quant_generic.c — the portable C kernels (builds without AVX2 or AVX-512:
// quant_impl.h). They state one lane at a time the float operations the SIMD
// kernels reorganize, and compute the same bits.
#include "quant_impl.h"

#if !defined(Q_AVX512) && !defined(Q_AVX2)

// Σ q[j] * x[j] over lane L of a unit (q: 32 weight values).
static int lane_dot(const int q[32], const uint8_t *unit, int L) {
    int s = 0;
    for (int j = 0; j < 32; j++) s += q[j] * (int8_t)unit[lane_pos(L, j)];
    return s;
}

// Pair p's parts of I and M for one Q4_K or Q5_K block (see k4_chain):
// sub-blocks 2p and 2p + 1, rec its activation record (Σx from its bsums pairs).
static void k4_ints_c(uint32_t type, const uint8_t *blk, const uint8_t *rec, int32_t I[4], int32_t M[4]) {
    uint8_t sc[8], mn[8];
    k4_scales(((const block_q4_K *)blk)->scales, sc, mn);
    for (int p = 0; p < 4; p++) {
        I[p] = 0;
        for (int s = 2 * p; s < 2 * p + 2; s++) {
            int32_t dot = 0;
            for (int j = 0; j < 32; j++) {
                const int e = 32 * s + j;
                const int q = type == Q_Q5_K ? q5k_value((const block_q5_K *)blk, e) : q4k_value((const block_q4_K *)blk, e);
                dot += q * (int8_t)rec[k4_sub_off(s) + j];
            }
            I[p] += sc[s] * dot;
        }
        const uint32_t pair = load_u32(rec + K4_PAIRS + 4 * p);
        M[p] = mn[2 * p] * (int16_t)(pair & 0xffff) + mn[2 * p + 1] * (int16_t)(pair >> 16);
    }
}

// IQ4_XS sub-block B of a row as a lane: its 32 values and d = fp16(d) *
// (ls - 32) (exact).
static void iq4xs_lane(const uint8_t *w, int64_t B, int q[32], float *d) {
    const block_iq4_xs *b = (const block_iq4_xs *)w + B / 8;
    const int s = (int)(B % 8);
    for (int j = 0; j < 16; j++) {
        q[j] = IQ4NL_VALUES[b->qs[16 * s + j] & 15];
        q[j + 16] = IQ4NL_VALUES[b->qs[16 * s + j] >> 4];
    }
    *d = half_f32(b->d) * (float)iq4xs_scale(b, s);
}

// 32-element types: lane L of unit u is block 16u + L (blocks past the row's
// end count as zero blocks; IQ4_XS: sub-block): acc += d_w * d_x * Σ w*x,
// with w = q - 8, q - 16, q or the table's value and d_w = fp16(d) (MXFP4:
// 2^(e - 128); IQ4_XS: fp16(d) * (ls - 32)); then for Q4_1/Q5_1
// acc += fp16(m_w) * s_x.
static void block32_kernel_c(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                             const uint8_t *x, size_t xs, float *out, int tn) {
    const size_t bs = block32_bytes(type);
    const int64_t nb = n / 32;
    const int q81 = type == Q_Q4_1 || type == Q_Q5_1;
    const int off = type == Q_Q4_0 ? 8 : type == Q_Q5_0 ? 16 : 0;
    float acc[TILE_T][16] = {{0}};
    for (int64_t u = u0; u < u1; u++) {
        int q[16][32] = {{0}};
        float d[16] = {0}, m[16] = {0};
        for (int L = 0; L < 16 && 16 * u + L < nb; L++) {
            const uint8_t *blk = w + (size_t)(16 * u + L) * bs;
            if (type == Q_IQ4_XS) {
                iq4xs_lane(w, 16 * u + L, q[L], &d[L]);
                continue;
            }
            block32_values(type, blk, q[L]);
            for (int j = 0; j < 32; j++) q[L][j] -= off;
            d[L] = block32_d(type, blk);
            m[L] = q81 ? half_f32(load_u32(blk) >> 16) : 0.0f;
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

// Q6_K: unit = super-block, lane g = group of 16, q unsigned (0..63), c_g =
// -32 Σx stored with x (act_k16): acc += sc_g * fp16(d) * d_x * (Σ q*x + c_g).
static void q6k_kernel_c(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                         const uint8_t *x, size_t xs, float *out, int tn) {
    (void)type, (void)n;
    float acc[TILE_T][16] = {{0}};
    for (int64_t u = u0; u < u1; u++) {
        const block_q6_K *b = (const block_q6_K *)w + u;
        int q[256];
        for (int e = 0; e < 256; e++) q[e] = q6k_value(b, e);
        for (int t = 0; t < tn; t++) {
            const uint8_t *r = x + (size_t)t * xs + (size_t)u * K16_BYTES;
            const float dx = load_f32(r + K16_D);
            for (int g = 0; g < 16; g++) {
                int32_t i = (int32_t)load_u32(r + K16_C + 4 * g);
                for (int p = 0; p < 16; p++) i += q[16 * g + p] * (int8_t)r[lane_pos(g, p)];
                acc[t][g] = fmaf((float)i, (float)b->scales[g] * half_f32(b->d) * dx, acc[t][g]);
            }
        }
    }
    for (int t = 0; t < tn; t++) out[t] = reduce16(acc[t]);
}

// Q3_K, Q2_K: the K23 chain (quant_impl.h), unit = super-block; the record's
// c_g (act_k16) is -4 Σx for Q3_K's q - 4 and Σx for Q2_K's min term.
static void k23_kernel_c(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                         const uint8_t *x, size_t xs, float *out, int tn) {
    (void)n;
    float acc[TILE_T] = {0};
    for (int64_t u = u0; u < u1; u++) {
        int q[256], sc[16], m[16] = {0};
        float d, dmin = 0.0f;
        if (type == Q_Q3_K) {
            const block_q3_K *b = (const block_q3_K *)w + u;
            uint32_t sw[4];
            q3k_scale_words(b->scales, sw);
            for (int e = 0; e < 256; e++) q[e] = q2_bits(b->qs, e) | ((b->hmask[e % 32] >> (e / 32)) & 1) << 2;
            for (int g = 0; g < 16; g++) sc[g] = q3k_scale(sw, g);
            d = half_f32(b->d);
        } else {
            const block_q2_K *b = (const block_q2_K *)w + u;
            for (int e = 0; e < 256; e++) q[e] = q2_bits(b->qs, e);
            for (int g = 0; g < 16; g++) sc[g] = b->scales[g] & 15, m[g] = b->scales[g] >> 4;
            d = half_f32(b->d), dmin = half_f32(b->dmin);
        }
        for (int t = 0; t < tn; t++) {
            const uint8_t *r = x + (size_t)t * xs + (size_t)u * K16_BYTES;
            int32_t I = 0, M = 0;
            for (int g = 0; g < 16; g++) {
                const int32_t c = (int32_t)load_u32(r + K16_C + 4 * g);
                int32_t i = type == Q_Q3_K ? c : 0;
                for (int p = 0; p < 16; p++) i += q[16 * g + p] * (int8_t)r[lane_pos(g, p)];
                I += sc[g] * i, M += m[g] * c;
            }
            acc[t] = k23_chain(type, acc[t], I, M, d, dmin, load_f32(r + K16_D));
        }
    }
    for (int t = 0; t < tn; t++) out[t] = acc[t];
}

// Weight element i of a float row, 0 past its end.
static inline float float_weight(uint32_t type, const uint8_t *w, int64_t n, int64_t i) {
    if (i >= n) return 0.0f;
    if (type == Q_F32) return load_f32(w + 4 * i);
    const uint16_t h = (uint16_t)(w[2 * i] | w[2 * i + 1] << 8);
    return type == Q_F16 ? half_f32(h) : bf16_to_f32(h);
}

// F32/F16 (x: f32 values, fp16-rounded for F16): lane L = element 16u + L,
// acc += w * x. BF16 (x: bf16): lane L = elements 32u + 2L + 1 and 32u + 2L,
// in that order, as VDPBF16PS adds them.
static void float_kernel_c(uint32_t type, const uint8_t *w, int64_t n, int64_t u0, int64_t u1,
                           const uint8_t *x, size_t xs, float *out, int tn) {
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

Q_TILE_TABLE(q_tiles_generic, block32_kernel_c, q6k_kernel_c, k23_kernel_c, float_kernel_c, float_kernel_c)

// One row against one token at a time (dot_k4).
void q_matmul_k_generic(uint32_t type, int64_t n, const uint8_t *w, size_t ws, int nr, const uint8_t *x,
                        size_t xs, int nt, int ngemm, float *y, size_t ldy) {
    for (int r = 0; r < nr; r++)
        for (int t = 0; t < nt; t++) {
            const uint8_t *wr = w + (size_t)r * ws, *xt = x + (size_t)t * xs;
            y[(size_t)t * ldy + r] = dot_k4(type, wr, xt, n, t < ngemm, k4_ints_c);
        }
}

#endif
