// kernels_qhd.cuh — the arithmetic the CUDA kernels share with the host:
// the launch constants, bit and load helpers, the device weight layout
// (dl_make, dl_pack_row) and each type's dequantization (dq32), the q8_1
// activation (act_t, q8_block), the matrix-vector arithmetic per weight type
// (mv_item), rope angles, paged-KV addressing, the attention plan and the
// sampler's token keys. Functions marked QHD run in kernels and, unchanged,
// on the CPU in cuda_host_selftest (kernels_selftest.cu). Private to the
// CUDA backend's files (kernels_common.cuh includes it); every function is
// static inline, so each translation unit has its own copy and no relocatable
// device code is needed.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend.h"
#include "quant.h"
#include "util.h"
}

#ifndef QUILL_CUDA_ARCH
#define QUILL_CUDA_ARCH 90  // the SASS these files are built for (Makefile: CUDA_ARCH)
#endif

#define QHD static inline __host__ __device__

enum {
    MMV_MAX = 8,                  // tokens the matrix-vector kernel takes per launch
    MMV_WARPS = 4,                // weight rows (one per warp) per CTA
    MMV_MINB = 8,                 // CTAs per SM the matrix-vector kernels fit (64 registers: more rows in flight)
    MV_SET = 3,                   // matrices one k_matvec_set launch takes
    GEMM_MIN = MMV_MAX + 1,       // fewer prompt rows in a tile: the decode kernel
    ATT_THREADS = 128,            // attention CTA
    ATT_KT = 32,                  // key positions per shared-memory tile
    ATT_GMAX = 8,                 // query heads per CTA (a kv group is split beyond)
    ATT_DMAX = 256,               // largest head_dim the attention kernel takes
    ATT_CHUNK_MAX = 512,          // longest split: long contexts get more splits, not longer ones
    ATT_FLOATS = 64,              // output accumulators per thread (rows × 8 dims)
    SAMPLE_THREADS = 1024,        // a sampler CTA
    SAMPLE_CHUNK = 4096,          // logits a k_sample_chunks CTA sorts
    SAMPLE_KP_MAX = 128,          // the largest top-k sampled by sorting (else radix select)
    SAMPLE_CAND_MAX = 8192,       // candidates k_sample_top sorts (64 KB of shared memory)
    DQ_THREADS = 128,             // k_dequant_f16 CTA
    RMS_PER = 8,                  // elements of a row a k_rmsnorm thread keeps in registers
    LT_ALGOS = 64,                // cached cuBLASLt algorithms (one per weight shape)
};
#define GEMM_TILE_ELEMS ((size_t)64 << 20)  // fp16 scratch for dequantized weight rows (128 MiB: an 8B's
                                            // 4096×14336 matrices in one tile, not an odd-sized pair)
#define ATT_PART_BYTES ((size_t)64 << 20)   // split partials per attention launch
#define LT_WORKSPACE ((size_t)32 << 20)     // cuBLAS(Lt) workspace (set, so graphs never allocate)
#define STAGE_BYTES ((size_t)1 << 20)       // pinned staging for small host-to-device copies
#define STAGE_MAX ((size_t)64 << 10)        // larger copies go from pageable memory directly

// ---------------------------------------------------------------------------
// Host/device helpers. Functions marked QHD run in kernels and, unchanged, in
// cuda_host_selftest on the CPU.
// ---------------------------------------------------------------------------

QHD float h2f(uint16_t h) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(h));
#else
    return fp16_to_f32(h);
#endif
}

QHD float bits_f(uint32_t u) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}

QHD float bf2f(uint16_t h) { return bits_f((uint32_t)h << 16); }

QHD uint4 ld16(const void *p) {  // p 16-byte aligned
#ifdef __CUDA_ARCH__
    return __ldg((const uint4 *)p);
#else
    uint4 v;
    memcpy(&v, p, 16);
    return v;
#endif
}

QHD float4 ld_f4(const void *p) {  // p 16-byte aligned
    const uint4 v = ld16(p);
    return make_float4(bits_f(v.x), bits_f(v.y), bits_f(v.z), bits_f(v.w));
}

QHD uint32_t ld32(const void *p) {  // p 4-byte aligned
#ifdef __CUDA_ARCH__
    return __ldg((const unsigned int *)p);
#else
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
#endif
}

QHD uint16_t ld_u16(const void *p) {
#ifdef __CUDA_ARCH__
    return __ldg((const unsigned short *)p);
#else
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
#endif
}

QHD uint32_t u4(const uint4 &v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

// Σ of the four signed byte products of a and b, plus c.
QHD int dp4a(uint32_t a, uint32_t b, int c) {
#ifdef __CUDA_ARCH__
    return __dp4a((int)a, (int)b, c);
#else
    for (int k = 0; k < 4; k++) c += (int8_t)(a >> 8 * k) * (int8_t)(b >> 8 * k);
    return c;
#endif
}

// dp4a with a's bytes unsigned (b's signed).
QHD int dp4a_us(uint32_t a, uint32_t b, int c) {
#if defined(__CUDA_ARCH__) && !defined(QUILL_SIMT)
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
#else
    for (int k = 0; k < 4; k++) c += (int)(uint8_t)(a >> 8 * k) * (int8_t)(b >> 8 * k);
    return c;
#endif
}

// Byte k of the result: byte (s >> 4k) & 7 of the eight bytes y:x (no sign replication).
QHD uint32_t bperm(uint32_t x, uint32_t y, uint32_t s) {
#ifdef __CUDA_ARCH__
    return __byte_perm(x, y, s);
#else
    const uint64_t v = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (uint32_t)(v >> 8 * ((s >> 4 * k) & 7) & 0xff) << 8 * k;
    return r;
#endif
}

// Per byte a - b (mod 256).
QHD uint32_t vsub4(uint32_t a, uint32_t b) {
#ifdef __CUDA_ARCH__
    return __vsub4(a, b);
#else
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) r |= (uint32_t)(uint8_t)((a >> 8 * k) - (b >> 8 * k)) << 8 * k;
    return r;
#endif
}

// Bits 0..3 of v moved to bit 4 of bytes 0..3 (Q5's fifth bit of 4 elements).
QHD uint32_t spread4(uint32_t v) {
    return (v & 1) << 4 | (v & 2) << 11 | (v & 4) << 18 | (v & 8) << 25;
}

QHD int64_t round_up(int64_t a, int64_t m) { return (a + m - 1) / m * m; }

// The value tables of the 4-bit codes, 16 int8 as 4 little-endian words
// (quant_impl.h's IQ4NL_VALUES and MXFP4_VALUES; the host self-test holds the
// dequantization to quant.c's).
QHD uint4 lut_iq4nl() { return make_uint4(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u); }
QHD uint4 lut_mxfp4() { return make_uint4(0x03020100u, 0x0c080604u, 0xfdfeff00u, 0xf4f8fafcu); }

// The table values of the four codes in the bytes of q (each 0..15), as bytes.
QHD uint32_t lut4(uint32_t q, const uint4 &t) {
#ifdef __CUDA_ARCH__
    const uint32_t b = q & 0x07070707, u = b | b >> 4;
    const uint32_t sel = (u & 0xff) | ((u >> 8) & 0xff00);  // selector nibble k = code k's low 3 bits
    const uint32_t lo = __byte_perm(t.x, t.y, sel), hi = __byte_perm(t.z, t.w, sel);
    const uint32_t m = ((q & 0x08080808) >> 3) * 0xff;      // 0xff in the bytes whose code is >= 8
    return (lo & ~m) | (hi & m);
#else
    const uint32_t w[4] = {t.x, t.y, t.z, t.w};
    uint32_t r = 0;
    for (int k = 0; k < 4; k++) {
        const uint32_t c = (q >> 8 * k) & 15;
        r |= ((w[c / 4] >> 8 * (c % 4)) & 0xff) << 8 * k;
    }
    return r;
#endif
}

// 2^(e - 128), MXFP4's scale (quant_impl.h's e8m0_half).
QHD float e8m0_half(uint32_t e) { return bits_f(e < 2 ? 0x00200000u << e : (e - 1) << 23); }

// The 6-bit scale of group g of a Q3_K super-block from its 12 scale bytes as
// three words (quant_impl.h's q3k_scale_words), minus 32.
QHD int q3k_scale(uint32_t a0, uint32_t a1, uint32_t t, int g) {
    const uint32_t lo = (g % 8 < 4 ? a0 : a1) >> (8 * (g % 4) + 4 * (g / 8));
    return (int)((lo & 15) | ((t >> (8 * (g % 4) + 2 * (g / 4))) & 3) << 4) - 32;
}

// ---------------------------------------------------------------------------
// Device weight layout. Plane A: rows of quants (a_row bytes, 16-aligned);
// plane B at b_off: rows of per-block scales (b_row bytes).
//   F32, F16, BF16  A: the values, rows padded with zeros to 16 bytes
//   Q8_0            A: int8 q[32] per block        B: fp16 d
//   Q4_0            A: GGUF's qs[16] per block     B: fp16 d
//   Q4_1            A: qs[16]                      B: fp16 d, fp16 m
//   Q5_0, Q5_1      A: qs[16]                      B: fp16 d, fp16 m (0 for Q5_0), u32 qh
//   Q4_K, Q5_K      A: the GGUF blocks (144, 176 bytes)
//   Q6_K            A: ql[128] qh[64] scales[16]   B: fp16 d
//   IQ4_NL          A: qs[16] per block            B: fp16 d
//   MXFP4           A: qs[16] per block            B: the exponent byte e
//   IQ4_XS          A: qs[128] per super-block     B: fp16 d, u16 scales_h, scales_l[4]
//   Q2_K            A: scales[16] qs[64]           B: fp16 d, fp16 dmin
//   Q3_K            A: hmask[32] qs[64] scales[12], 4 zero bytes     B: fp16 d
// ---------------------------------------------------------------------------

typedef struct {
    int64_t a_row;  // bytes per row in plane A
    int64_t b_row;  // bytes per row in plane B (0: none)
    size_t b_off;   // plane B's offset from the start (256-aligned)
    size_t bytes;   // the whole allocation
} dlayout;

QHD dlayout dl_make(uint32_t type, int64_t rows, int64_t cols) {
    dlayout L = {0, 0, 0, 0};
    const int64_t nb = cols / 32, nk = cols / 256;
    switch (type) {
    case Q_F32: L.a_row = round_up(cols * 4, 16); break;
    case Q_F16: case Q_BF16: L.a_row = round_up(cols * 2, 16); break;
    case Q_Q8_0: L.a_row = cols, L.b_row = nb * 2; break;
    case Q_Q4_0: L.a_row = cols / 2, L.b_row = nb * 2; break;
    case Q_Q4_1: L.a_row = cols / 2, L.b_row = nb * 4; break;
    case Q_Q5_0: case Q_Q5_1: L.a_row = cols / 2, L.b_row = nb * 8; break;
    case Q_Q4_K: L.a_row = nk * 144; break;
    case Q_Q5_K: L.a_row = nk * 176; break;
    case Q_Q6_K: L.a_row = nk * 208, L.b_row = nk * 2; break;
    case Q_IQ4_NL: L.a_row = cols / 2, L.b_row = nb * 2; break;
    case Q_MXFP4: L.a_row = cols / 2, L.b_row = nb; break;
    case Q_IQ4_XS: L.a_row = nk * 128, L.b_row = nk * 8; break;
    case Q_Q2_K: L.a_row = nk * 80, L.b_row = nk * 4; break;
    case Q_Q3_K: L.a_row = nk * 112, L.b_row = nk * 2; break;
    default: break;
    }
    L.b_off = (size_t)round_up(rows * L.a_row, 256);
    L.bytes = (size_t)round_up((int64_t)L.b_off + rows * L.b_row, 256);
    return L;
}

// Whether a tensor of this type can be copied to the device as it is.
static inline int dl_is_raw(uint32_t type, int64_t cols) {
    switch (type) {
    case Q_F32: return cols % 4 == 0;
    case Q_F16: case Q_BF16: return cols % 8 == 0;
    case Q_Q4_K: case Q_Q5_K: return 1;
    default: return 0;
    }
}

// One GGUF row (src) into the device layout's row r (dst: the whole buffer, zeroed).
static inline void dl_pack_row(uint32_t type, const uint8_t *src, int64_t cols, const dlayout *L, int64_t r,
                               uint8_t *dst) {
    uint8_t *A = dst + r * L->a_row, *B = dst + L->b_off + r * L->b_row;
    const int64_t nb = cols / 32, nk = cols / 256;
    switch (type) {
    case Q_F32: memcpy(A, src, (size_t)cols * 4); break;
    case Q_F16: case Q_BF16: memcpy(A, src, (size_t)cols * 2); break;
    case Q_Q8_0:
        for (int64_t b = 0; b < nb; b++) memcpy(B + 2 * b, src + 34 * b, 2), memcpy(A + 32 * b, src + 34 * b + 2, 32);
        break;
    case Q_Q4_0:
        for (int64_t b = 0; b < nb; b++) memcpy(B + 2 * b, src + 18 * b, 2), memcpy(A + 16 * b, src + 18 * b + 2, 16);
        break;
    case Q_Q4_1:
        for (int64_t b = 0; b < nb; b++) memcpy(B + 4 * b, src + 20 * b, 4), memcpy(A + 16 * b, src + 20 * b + 4, 16);
        break;
    case Q_Q5_0:  // d, qh[4], qs[16]
        for (int64_t b = 0; b < nb; b++) {
            memset(B + 8 * b, 0, 8);
            memcpy(B + 8 * b, src + 22 * b, 2);
            memcpy(B + 8 * b + 4, src + 22 * b + 2, 4);
            memcpy(A + 16 * b, src + 22 * b + 6, 16);
        }
        break;
    case Q_Q5_1:  // d, m, qh[4], qs[16]
        for (int64_t b = 0; b < nb; b++) memcpy(B + 8 * b, src + 24 * b, 8), memcpy(A + 16 * b, src + 24 * b + 8, 16);
        break;
    case Q_Q4_K: memcpy(A, src, (size_t)nk * 144); break;
    case Q_Q5_K: memcpy(A, src, (size_t)nk * 176); break;
    case Q_Q6_K:  // ql[128] qh[64] scales[16] d
        for (int64_t k = 0; k < nk; k++) memcpy(A + 208 * k, src + 210 * k, 208), memcpy(B + 2 * k, src + 210 * k + 208, 2);
        break;
    case Q_IQ4_NL:  // d, qs[16]
        for (int64_t b = 0; b < nb; b++) memcpy(B + 2 * b, src + 18 * b, 2), memcpy(A + 16 * b, src + 18 * b + 2, 16);
        break;
    case Q_MXFP4:  // e, qs[16]
        for (int64_t b = 0; b < nb; b++) B[b] = src[17 * b], memcpy(A + 16 * b, src + 17 * b + 1, 16);
        break;
    case Q_IQ4_XS:  // d, scales_h, scales_l[4], qs[128]
        for (int64_t k = 0; k < nk; k++) memcpy(B + 8 * k, src + 136 * k, 8), memcpy(A + 128 * k, src + 136 * k + 8, 128);
        break;
    case Q_Q2_K:  // scales[16] qs[64] d dmin
        for (int64_t k = 0; k < nk; k++) memcpy(A + 80 * k, src + 84 * k, 80), memcpy(B + 4 * k, src + 84 * k + 80, 4);
        break;
    case Q_Q3_K:  // hmask[32] qs[64] scales[12] d
        for (int64_t k = 0; k < nk; k++) memcpy(A + 112 * k, src + 110 * k, 108), memcpy(B + 2 * k, src + 110 * k + 108, 2);
        break;
    default: break;
    }
}

// The 6-bit scales and mins of sub-blocks 2c and 2c+1 of a Q4_K/Q5_K block,
// from its 12 scale bytes as three little-endian words w0..w2 (see quant.c's
// k4_scale_words), in bytes 0 and 1 of sc and mn: the two bytes of each word
// gathered by one byte permute, both forms computed and one chosen. No branch:
// one on the sub-block would split a warp (its lanes take different ones) and
// keep the loads that follow from being issued early.
QHD void k4_scale_min2(int c, uint32_t w0, uint32_t w1, uint32_t w2, uint32_t &sc, uint32_t &mn) {
    const uint32_t sel = c & 1 ? 0x4432 : 0x4410;  // bytes 2(c&1) and 2(c&1)+1, then zeros
    const uint32_t b0 = bperm(w0, 0, sel), b1 = bperm(w1, 0, sel), b2 = bperm(w2, 0, sel);
    sc = c < 2 ? b0 & 0x3f3f : (b2 & 0x0f0f) | ((b0 >> 2) & 0x3030);
    mn = c < 2 ? b1 & 0x3f3f : ((b2 >> 4) & 0x0f0f) | ((b1 >> 2) & 0x3030);
}

// Elements 32g .. 32g+31 of row r, as floats (elements past cols read 0).
// The arithmetic is quant.c's q_dequantize_row, term for term, except that
// either compiler may contract a multiply-add into an fma (an ulp apart).
// The scale d, the min m (Q4_1/Q5_1, else 0) and the fifth bits qh
// (Q5_0/Q5_1, else 0) of 32-element block g, from the scale plane B.
template <uint32_t T>
QHD void block32_scales(const uint8_t *B, int64_t g, float &d, float &m, uint32_t &qh) {
    m = 0.0f, qh = 0;
    if constexpr (T == Q_Q4_0) {
        d = h2f(ld_u16(B + 2 * g));
    } else if constexpr (T == Q_Q4_1) {
        const uint32_t dm = ld32(B + 4 * g);
        d = h2f(dm & 0xffff), m = h2f(dm >> 16);
    } else {
        const uint32_t dm = ld32(B + 8 * g);
        d = h2f(dm & 0xffff), qh = ld32(B + 8 * g + 4);
        if constexpr (T == Q_Q5_1) m = h2f(dm >> 16);
    }
}

// The scale of 32-element block g of IQ4_NL, MXFP4 or IQ4_XS (d·(ls - 32),
// exact) from the scale plane B of its row.
template <uint32_t T>
QHD float lut_scale(const uint8_t *B, int64_t g) {
    if constexpr (T == Q_IQ4_NL) return h2f(ld_u16(B + 2 * g));
    else if constexpr (T == Q_MXFP4) return e8m0_half(B[g]);
    else {
        const uint8_t *sb = B + 8 * (g / 8);
        const int s = (int)(g % 8);
        const uint32_t dh = ld32(sb), sl = ld32(sb + 4);
        const int ls = (int)(((sl >> 4 * s) & 15) | ((dh >> (16 + 2 * s)) & 3) << 4);
        return h2f(dh & 0xffff) * (float)(ls - 32);
    }
}

// dq32 of IQ4_NL, MXFP4, IQ4_XS: every block's 16 qs bytes are at A + 16g.
template <uint32_t T>
QHD void dq32_lut(const uint8_t *A, const uint8_t *B, int64_t g, float v[32]) {
    const uint4 q = ld16(A + 16 * g), tab = T == Q_MXFP4 ? lut_mxfp4() : lut_iq4nl();
    const float d = lut_scale<T>(B, g);
    for (int k = 0; k < 4; k++) {
        const uint32_t lo = lut4(u4(q, k) & 0x0F0F0F0F, tab), hi = lut4((u4(q, k) >> 4) & 0x0F0F0F0F, tab);
        for (int i = 0; i < 4; i++) {
            v[4 * k + i] = d * (float)(int8_t)(lo >> 8 * i);
            v[16 + 4 * k + i] = d * (float)(int8_t)(hi >> 8 * i);
        }
    }
}

// dq32 of Q2_K, Q3_K: elements 128h + 32j + l (l < 32) of super-block g / 8,
// j = g % 4, h = (g % 8) / 4; the 2-bit quants are bits 2j of qs[32h + l].
template <uint32_t T>
QHD void dq32_k23(const uint8_t *A, const uint8_t *B, int64_t g, float v[32]) {
    const int64_t k = g / 8;
    const int h = (int)(g % 8) / 4, j = (int)(g % 4);
    if constexpr (T == Q_Q2_K) {
        const uint8_t *blk = A + 80 * k;
        const uint32_t dm = ld32(B + 4 * k);
        const float d = h2f(dm & 0xffff), dmin = h2f(dm >> 16);
        for (int l = 0; l < 32; l += 4) {
            const uint32_t q4 = ld32(blk + 16 + 32 * h + l);
            const int sc = blk[8 * h + 2 * j + l / 16];
            for (int i = 0; i < 4; i++)
                v[l + i] = d * (float)(sc & 15) * (float)((q4 >> (8 * i + 2 * j)) & 3) - dmin * (float)(sc >> 4);
        }
    } else {
        const uint8_t *blk = A + 112 * k;
        const float d = h2f(ld_u16(B + 2 * k));
        const uint32_t a0 = ld32(blk + 96), a1 = ld32(blk + 100), t = ld32(blk + 104);
        for (int l = 0; l < 32; l += 4) {
            const uint32_t q4 = ld32(blk + 32 + 32 * h + l), h4 = ld32(blk + l);
            const int sc = q3k_scale(a0, a1, t, 8 * h + 2 * j + l / 16);
            for (int i = 0; i < 4; i++) {
                const int q = (int)((q4 >> (8 * i + 2 * j)) & 3) + 4 * (int)((h4 >> (8 * i + 4 * h + j)) & 1) - 4;
                v[l + i] = d * (float)sc * (float)q;
            }
        }
    }
}

template <uint32_t T>
QHD void dq32(const uint8_t *w, const dlayout &L, int64_t r, int64_t g, int64_t cols, float v[32]) {
    const uint8_t *A = w + r * L.a_row, *B = w + L.b_off + r * L.b_row;
    if constexpr (T == Q_F32 || T == Q_F16 || T == Q_BF16) {
        for (int j = 0; j < 32; j++) {
            const int64_t e = 32 * g + j;
            v[j] = e >= cols ? 0.0f
                 : T == Q_F32 ? bits_f(ld32(A + 4 * e))
                 : T == Q_F16 ? h2f(ld_u16(A + 2 * e)) : bf2f(ld_u16(A + 2 * e));
        }
    } else if constexpr (T == Q_Q8_0) {
        const float d = h2f(ld_u16(B + 2 * g));
        for (int j = 0; j < 32; j += 4) {
            const uint32_t q = ld32(A + 32 * g + j);
            for (int k = 0; k < 4; k++) v[j + k] = (float)(int8_t)(q >> 8 * k) * d;
        }
    } else if constexpr (T == Q_Q4_0 || T == Q_Q4_1 || T == Q_Q5_0 || T == Q_Q5_1) {
        const uint4 q = ld16(A + 16 * g);
        float d, m;
        uint32_t qh;
        block32_scales<T>(B, g, d, m, qh);
        const int off = T == Q_Q4_0 ? 8 : T == Q_Q5_0 ? 16 : 0;
        for (int j = 0; j < 16; j++) {
            const int byte = (u4(q, j / 4) >> 8 * (j % 4)) & 0xff;
            const int lo = (byte & 15) | (int)((qh >> j) & 1) << 4;
            const int hi = (byte >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
            v[j] = (float)(lo - off) * d + m;
            v[j + 16] = (float)(hi - off) * d + m;
        }
    } else if constexpr (T == Q_Q4_K || T == Q_Q5_K) {
        const int64_t k = g / 8;
        const int s = (int)(g % 8);
        const uint8_t *blk = A + k * (T == Q_Q4_K ? 144 : 176);
        const uint4 hd = ld16(blk);
        uint32_t scs, mns;
        k4_scale_min2(s / 2, hd.y, hd.z, hd.w, scs, mns);
        const int sc = (scs >> 8 * (s & 1)) & 0xff, mn = (mns >> 8 * (s & 1)) & 0xff;
        const float d = h2f(hd.x & 0xffff), dmin = h2f(hd.x >> 16);
        const uint8_t *qs = blk + (T == Q_Q4_K ? 16 : 48) + 32 * (s / 2);
        for (int l = 0; l < 32; l += 4) {
            const uint32_t q4 = ld32(qs + l);
            const uint32_t h4 = T == Q_Q5_K ? ld32(blk + 16 + l) : 0;
            for (int i = 0; i < 4; i++) {
                int q = (q4 >> (8 * i + 4 * (s & 1))) & 15;
                if (T == Q_Q5_K) q |= ((h4 >> (8 * i + s)) & 1) << 4;
                v[l + i] = d * (float)sc * (float)q - dmin * (float)mn;
            }
        }
    } else if constexpr (T == Q_IQ4_NL || T == Q_MXFP4 || T == Q_IQ4_XS) {
        dq32_lut<T>(A, B, g, v);
    } else if constexpr (T == Q_Q2_K || T == Q_Q3_K) {
        dq32_k23<T>(A, B, g, v);
    } else if constexpr (T == Q_Q6_K) {
        const int64_t k = g / 8;
        const int e0 = 32 * (int)(g % 8), h = e0 / 128, kk = (e0 % 128) / 32;
        const uint8_t *blk = A + 208 * k;
        const float d = h2f(ld_u16(B + 2 * k));
        for (int l = 0; l < 32; l += 4) {
            const uint32_t lo4 = ld32(blk + 64 * h + 32 * (kk & 1) + l);
            const uint32_t hi4 = ld32(blk + 128 + 32 * h + l);
            const int sc = (int8_t)blk[192 + 8 * h + 2 * kk + l / 16];
            for (int i = 0; i < 4; i++) {
                const int q = ((lo4 >> (8 * i + 4 * (kk >> 1))) & 15) | ((hi4 >> (8 * i + 2 * kk)) & 3) << 4;
                v[l + i] = d * (float)sc * (float)(q - 32);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Activations for quantized weights, q8_1: per block of 32 elements
// q = round-half-even(x · 127/amax), d = amax/127, s = d·Σq, so a block's
// dequantized values are exactly q·d and their sum exactly s.
// ---------------------------------------------------------------------------

typedef struct {
    const int8_t *q;   // [n, cols] (quantized weights)
    const float2 *ds;  // [n, cols/32] (d, s)
    const float *f;    // [n, cols] the activation itself (float weights)
    int64_t cols;
    int f_vec;         // f is 16-byte aligned and cols % 4 == 0: float4 loads
} act_t;

QHD float q8_inv(float amax) { return amax > 0.0f ? 127.0f / amax : 0.0f; }
QHD int q8_round(float x, float inv) {
    const int q = (int)rintf(x * inv);
    return q > 127 ? 127 : q < -127 ? -127 : q;
}

// One block, sequentially (the kernel k_quant_q8_1 computes the same values
// with a warp; the host self-test uses this).
QHD void q8_block(const float *x, int8_t *q, float2 *ds) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float inv = q8_inv(amax);
    int sum = 0;
    for (int j = 0; j < 32; j++) q[j] = (int8_t)q8_round(x[j], inv), sum += q[j];
    *ds = make_float2(amax / 127.0f, amax / 127.0f * (float)sum);
}

// ---------------------------------------------------------------------------
// Matrix-vector arithmetic per weight type. A row is cut into "items", each
// one 16-byte load of quants (Q4_K/Q5_K: two; or a whole 32-block for the
// block types);
// mv_item adds item `it` of row r times every token's activation to acc[t].
// The order of operations per token does not depend on NT or n, so a row
// computed with other tokens equals the row computed alone.
// ---------------------------------------------------------------------------

template <uint32_t T>
QHD int64_t mv_items(int64_t cols) {
    if constexpr (T == Q_F32) return (cols + 3) / 4;
    else if constexpr (T == Q_F16 || T == Q_BF16) return (cols + 7) / 8;
    else if constexpr (T == Q_Q4_K || T == Q_Q5_K) return cols / 256 * 4;
    else if constexpr (T == Q_Q6_K || T == Q_Q2_K || T == Q_Q3_K) return cols / 256 * 4;
    else return cols / 32;
}

QHD float half_at(const uint4 &v, int k) { return h2f((uint16_t)(u4(v, k / 2) >> 16 * (k % 2))); }
QHD float bhalf_at(const uint4 &v, int k) { return bf2f((uint16_t)(u4(v, k / 2) >> 16 * (k % 2))); }

// Float weights: 4 (F32) or 8 (F16, BF16) weights per item against the float activation.
template <uint32_t T, int NT>
QHD void mv_float(const uint8_t *A, int64_t it, const act_t &x, int n, float acc[NT]) {
    constexpr int per = T == Q_F32 ? 4 : 8;
    const int64_t e0 = it * per, cols = x.cols;
    const uint4 raw = ld16(A + 16 * it);
    float wv[per];
    for (int k = 0; k < per; k++)
        wv[k] = T == Q_F32 ? bits_f(u4(raw, k)) : T == Q_F16 ? half_at(raw, k) : bhalf_at(raw, k);
    const bool whole = x.f_vec && e0 + per <= cols;
    for (int t = 0; t < NT; t++) {
        if (t && t >= n) break;  // (n >= 1: no test when NT == 1)
        const float *xf = x.f + t * cols + e0;
        float xv[per];
        if (whole) {
#ifdef __CUDA_ARCH__
            for (int k = 0; k < per; k += 4) {
                const float4 f4 = __ldg((const float4 *)(xf + k));
                xv[k] = f4.x, xv[k + 1] = f4.y, xv[k + 2] = f4.z, xv[k + 3] = f4.w;
            }
#else
            memcpy(xv, xf, sizeof xv);
#endif
        } else {
            for (int k = 0; k < per; k++) xv[k] = e0 + k < cols ? xf[k] : 0.0f;
        }
        float s = 0.0f;
        for (int k = 0; k < per; k++) s += wv[k] * xv[k];
        acc[t] += s;
    }
}

// Q8_0: one block of 32 per item.
template <int NT>
QHD void mv_q8_0(const uint8_t *A, const uint8_t *B, int64_t it, const act_t &x, int n, float acc[NT]) {
    const uint4 w0 = ld16(A + 32 * it), w1 = ld16(A + 32 * it + 16);
    const float d = h2f(ld_u16(B + 2 * it));
    const int64_t nb = x.cols / 32;
    for (int t = 0; t < NT; t++) {
        if (t && t >= n) break;  // (n >= 1: no test when NT == 1)
        const int8_t *xq = x.q + t * x.cols + 32 * it;
        const uint4 a0 = ld16(xq), a1 = ld16(xq + 16);
        int s = 0;
        for (int k = 0; k < 4; k++) s = dp4a(u4(w0, k), u4(a0, k), s);
        for (int k = 0; k < 4; k++) s = dp4a(u4(w1, k), u4(a1, k), s);
        acc[t] += d * x.ds[t * nb + it].x * (float)s;
    }
}

// Σ of a 32-block's weight bytes (lo: elements 0..15, hi: 16..31, four per
// word) times its q8_1 activation bytes xq.
QHD int dot32(const uint32_t lo[4], const uint32_t hi[4], const int8_t *xq) {
    const uint4 a0 = ld16(xq), a1 = ld16(xq + 16);
    int s = 0;
    for (int k = 0; k < 4; k++) s = dp4a(lo[k], u4(a0, k), s);
    for (int k = 0; k < 4; k++) s = dp4a(hi[k], u4(a1, k), s);
    return s;
}

// Q4_0, Q4_1, Q5_0, Q5_1: one block of 32 per item; q = nibble (+ 16·bit).
// Q4_0/Q5_0: d·(dx·Σq·qx - off·s); Q4_1/Q5_1: d·dx·Σq·qx + m·s.
template <uint32_t T, int NT>
QHD void mv_block32(const uint8_t *A, const uint8_t *B, int64_t it, const act_t &x, int n, float acc[NT]) {
    const uint4 q = ld16(A + 16 * it);
    float d, m;
    uint32_t qh;
    block32_scales<T>(B, it, d, m, qh);
    uint32_t lo[4], hi[4];
    for (int k = 0; k < 4; k++) {
        lo[k] = u4(q, k) & 0x0F0F0F0F;
        hi[k] = (u4(q, k) >> 4) & 0x0F0F0F0F;
        if constexpr (T == Q_Q5_0 || T == Q_Q5_1) lo[k] |= spread4(qh >> 4 * k), hi[k] |= spread4(qh >> (16 + 4 * k));
    }
    const int64_t nb = x.cols / 32;
    for (int t = 0; t < NT; t++) {
        if (t && t >= n) break;  // (n >= 1: no test when NT == 1)
        const int s = dot32(lo, hi, x.q + t * x.cols + 32 * it);
        const float2 ds = x.ds[t * nb + it];
        if constexpr (T == Q_Q4_0) acc[t] += d * (ds.x * (float)s - 8.0f * ds.y);
        else if constexpr (T == Q_Q5_0) acc[t] += d * (ds.x * (float)s - 16.0f * ds.y);
        else acc[t] += d * ds.x * (float)s + m * ds.y;
    }
}


// Q4_K, Q5_K: item = (super-block kb, quant chunk c): the 32 bytes of qs that
// hold sub-blocks 2c (low nibbles) and 2c+1 (high), so a lane loads the
// header and decodes the two scales once per 64 weights. Per sub-block s:
// d·dx·(sc[s]·Σq·qx) - dmin·mn[s]·s_x. Q4_K's high nibbles stay in place
// (16·q, unsigned bytes) and the sum is shifted once, exactly.
template <uint32_t T, int NT>
QHD void mv_k45(const uint8_t *A, int64_t it, const act_t &x, int n, float acc[NT]) {
    constexpr int bytes = T == Q_Q4_K ? 144 : 176, qs_off = T == Q_Q4_K ? 16 : 48;
    const int64_t kb = it >> 2;
    const int c = (int)it & 3, s0 = 2 * c, s1 = 2 * c + 1;
    const uint8_t *blk = A + kb * bytes;
    const uint4 hd = ld16(blk), qv0 = ld16(blk + qs_off + 32 * c), qv1 = ld16(blk + qs_off + 32 * c + 16);
    uint4 qh0 = make_uint4(0, 0, 0, 0), qh1 = qh0;
    if constexpr (T == Q_Q5_K) qh0 = ld16(blk + 16), qh1 = ld16(blk + 32);
    const float d = h2f(hd.x & 0xffff), dmin = h2f(hd.x >> 16);
    uint32_t scs, mns;
    k4_scale_min2(c, hd.y, hd.z, hd.w, scs, mns);
    const int sc0 = scs & 0xff, sc1 = scs >> 8;
    const float mn0 = (float)(mns & 0xff), mn1 = (float)(mns >> 8);
    uint32_t lo[8] = {0}, hi[8] = {0};  // (set below; g++ -O3 for the SIMT build cannot tell)
    for (int k = 0; k < 8; k++) {
        const uint32_t q = u4(k < 4 ? qv0 : qv1, k & 3);
        lo[k] = q & 0x0F0F0F0F;
        if constexpr (T == Q_Q4_K) {
            hi[k] = q & 0xF0F0F0F0;
        } else {
            const uint32_t qh = u4(k < 4 ? qh0 : qh1, k & 3);
            lo[k] |= ((qh >> s0) & 0x01010101) << 4;
            hi[k] = ((q >> 4) & 0x0F0F0F0F) | ((qh >> s1) & 0x01010101) << 4;
        }
    }
    const int64_t nb = x.cols / 32, b0 = 8 * kb + s0;
    for (int t = 0; t < NT; t++) {
        if (t && t >= n) break;  // (n >= 1: no test when NT == 1)
        const int8_t *xq = x.q + t * x.cols + 32 * b0;
        const uint4 a0 = ld16(xq), a1 = ld16(xq + 16), a2 = ld16(xq + 32), a3 = ld16(xq + 48);
        const float4 ds = ld_f4(x.ds + t * nb + b0);  // (b0 even) ds[b0], ds[b0 + 1]
        int i0 = 0, i1 = 0;
        for (int k = 0; k < 4; k++) i0 = dp4a(lo[k], u4(a0, k), i0);
        for (int k = 0; k < 4; k++) i0 = dp4a(lo[4 + k], u4(a1, k), i0);
        if constexpr (T == Q_Q4_K) {
            for (int k = 0; k < 4; k++) i1 = dp4a_us(hi[k], u4(a2, k), i1);
            for (int k = 0; k < 4; k++) i1 = dp4a_us(hi[4 + k], u4(a3, k), i1);
            i1 >>= 4;
        } else {
            for (int k = 0; k < 4; k++) i1 = dp4a(hi[k], u4(a2, k), i1);
            for (int k = 0; k < 4; k++) i1 = dp4a(hi[4 + k], u4(a3, k), i1);
        }
        acc[t] += d * (ds.x * (float)(sc0 * i0) + ds.z * (float)(sc1 * i1)) - dmin * (mn0 * ds.y + mn1 * ds.w);
    }
}

// Q6_K: item = (super-block kb, half h, l16): 64 elements 128h + 32k + 16·l16
// + i (k < 4, i < 16), i.e. 16 of each of four groups of 16 (scales[8h+2k+l16]).
// The codes q (0..63) are dotted unsigned and 32·Σqx taken off after: Σ(q - 32)·qx.
template <int NT>
QHD void mv_q6_k(const uint8_t *A, const uint8_t *B, int64_t it, const act_t &x, int n, float acc[NT]) {
    const int64_t kb = it >> 2;
    const int h = (int)(it >> 1) & 1, l16 = (int)it & 1;
    const uint8_t *blk = A + 208 * kb;
    const uint4 qa = ld16(blk + 64 * h + 16 * l16), qb = ld16(blk + 64 * h + 32 + 16 * l16);
    const uint4 qhv = ld16(blk + 128 + 32 * h + 16 * l16), sv = ld16(blk + 192);
    const float d = h2f(ld_u16(B + 2 * kb));
    uint32_t q[4][4];
    int sc[4];
    for (int k = 0; k < 4; k++) {
        const uint4 &src = (k & 1) ? qb : qa;
        for (int i = 0; i < 4; i++)
            q[k][i] = ((u4(src, i) >> 4 * (k >> 1)) & 0x0F0F0F0F) | ((u4(qhv, i) >> 2 * k) & 0x03030303) << 4;
        const int g = 8 * h + 2 * k + l16;
        sc[k] = (int8_t)(u4(sv, g / 4) >> 8 * (g % 4));
    }
    const int64_t nb = x.cols / 32, b0 = 8 * kb + 4 * h;  // the item's four blocks of 32: b0 .. b0+3
    for (int t = 0; t < NT; t++) {
        if (t && t >= n) break;  // (n >= 1: no test when NT == 1)
        const float4 ds01 = ld_f4(x.ds + t * nb + b0), ds23 = ld_f4(x.ds + t * nb + b0 + 2);
        const float dx[4] = {ds01.x, ds01.z, ds23.x, ds23.z};
        float v = 0.0f;
        for (int k = 0; k < 4; k++) {
            const uint4 a = ld16(x.q + t * x.cols + 32 * (b0 + k) + 16 * l16);
            int s = 0, z = 0;
            for (int i = 0; i < 4; i++) s = dp4a_us(q[k][i], u4(a, i), s), z = dp4a(0x20202020, u4(a, i), z);
            v += (float)sc[k] * dx[k] * (float)(s - z);
        }
        acc[t] += d * v;
    }
}

// IQ4_NL, MXFP4, IQ4_XS: one block of 32 per item (IQ4_XS: a sub-block; its
// qs too are at A + 16·it); the codes' int8 values against q8_1: d·dx·Σq·qx.
template <uint32_t T, int NT>
QHD void mv_lut(const uint8_t *A, const uint8_t *B, int64_t it, const act_t &x, int n, float acc[NT]) {
    const uint4 q = ld16(A + 16 * it), tab = T == Q_MXFP4 ? lut_mxfp4() : lut_iq4nl();
    const float d = lut_scale<T>(B, it);
    uint32_t lo[4], hi[4];
    for (int k = 0; k < 4; k++) {
        lo[k] = lut4(u4(q, k) & 0x0F0F0F0F, tab);
        hi[k] = lut4((u4(q, k) >> 4) & 0x0F0F0F0F, tab);
    }
    const int64_t nb = x.cols / 32;
    for (int t = 0; t < NT; t++) {
        if (t && t >= n) break;  // (n >= 1: no test when NT == 1)
        acc[t] += d * x.ds[t * nb + it].x * (float)dot32(lo, hi, x.q + t * x.cols + 32 * it);
    }
}

// Q2_K, Q3_K: item = (super-block kb, half h, l16), as Q6_K's: 16 bytes of qs
// hold elements 128h + 32j + 16·l16 + i (j < 4, i < 16), group 8h + 2j + l16.
// Q3_K: d·Σ_j sc_j·dx_j·Σ(q - 4)·qx. Q2_K: Σ_j dx_j·(d·sc_j·Σq·qx -
// dmin·mn_j·Σqx), Σqx by dp4a against ones.
template <uint32_t T, int NT>
QHD void mv_k23(const uint8_t *A, const uint8_t *B, int64_t it, const act_t &x, int n, float acc[NT]) {
    const int64_t kb = it >> 2;
    const int h = (int)(it >> 1) & 1, l16 = (int)it & 1;
    uint32_t q[4][4];
    float a[4], m[4] = {0, 0, 0, 0};
    if constexpr (T == Q_Q2_K) {
        const uint8_t *blk = A + 80 * kb;
        const uint4 qv = ld16(blk + 16 + 32 * h + 16 * l16), sv = ld16(blk);
        const uint32_t dm = ld32(B + 4 * kb);
        const float d = h2f(dm & 0xffff), dmin = h2f(dm >> 16);
        for (int j = 0; j < 4; j++) {
            for (int i = 0; i < 4; i++) q[j][i] = (u4(qv, i) >> 2 * j) & 0x03030303;
            const int g = 8 * h + 2 * j + l16, sc = (int)(u4(sv, g / 4) >> 8 * (g % 4)) & 0xff;
            a[j] = d * (float)(sc & 15), m[j] = dmin * (float)(sc >> 4);
        }
    } else {
        const uint8_t *blk = A + 112 * kb;
        const uint4 qv = ld16(blk + 32 + 32 * h + 16 * l16), hv = ld16(blk + 16 * l16), sv = ld16(blk + 96);
        const float d = h2f(ld_u16(B + 2 * kb));
        for (int j = 0; j < 4; j++) {
            for (int i = 0; i < 4; i++) {
                const uint32_t v = ((u4(qv, i) >> 2 * j) & 0x03030303) | ((u4(hv, i) >> (4 * h + j)) & 0x01010101) << 2;
                q[j][i] = vsub4(v, 0x04040404);
            }
            a[j] = d * (float)q3k_scale(sv.x, sv.y, sv.z, 8 * h + 2 * j + l16);
        }
    }
    const int64_t nb = x.cols / 32;
    for (int t = 0; t < NT; t++) {
        if (t && t >= n) break;  // (n >= 1: no test when NT == 1)
        float v = 0.0f;
        for (int j = 0; j < 4; j++) {
            const int64_t blk32 = 8 * kb + 4 * h + j;
            const uint4 av = ld16(x.q + t * x.cols + 32 * blk32 + 16 * l16);
            int s = 0, sx = 0;
            for (int i = 0; i < 4; i++) s = dp4a(q[j][i], u4(av, i), s);
            if constexpr (T == Q_Q2_K)
                for (int i = 0; i < 4; i++) sx = dp4a(0x01010101, u4(av, i), sx);
            v += x.ds[t * nb + blk32].x * (a[j] * (float)s - m[j] * (float)sx);
        }
        acc[t] += v;
    }
}

template <uint32_t T, int NT>
QHD void mv_item(const uint8_t *w, const dlayout &L, int64_t r, int64_t it, const act_t &x, int n, float acc[NT]) {
    const uint8_t *A = w + r * L.a_row, *B = w + L.b_off + r * L.b_row;
    if constexpr (T == Q_F32 || T == Q_F16 || T == Q_BF16) mv_float<T, NT>(A, it, x, n, acc);
    else if constexpr (T == Q_Q8_0) mv_q8_0<NT>(A, B, it, x, n, acc);
    else if constexpr (T == Q_Q4_K || T == Q_Q5_K) mv_k45<T, NT>(A, it, x, n, acc);
    else if constexpr (T == Q_Q6_K) mv_q6_k<NT>(A, B, it, x, n, acc);
    else if constexpr (T == Q_IQ4_NL || T == Q_MXFP4 || T == Q_IQ4_XS) mv_lut<T, NT>(A, B, it, x, n, acc);
    else if constexpr (T == Q_Q2_K || T == Q_Q3_K) mv_k23<T, NT>(A, B, it, x, n, acc);
    else mv_block32<T, NT>(A, B, it, x, n, acc);
}

// ---------------------------------------------------------------------------
// Rope, paged KV addressing and the attention plan (shared with the self-test)
// ---------------------------------------------------------------------------

// Angle of pair p at position pos, by cpu.c's recurrence (theta *= theta_scale
// once per pair), so both backends rotate by the same float angles.
// Pair p's unscaled angle over its frequency factor (cpu.c's recurrence).
QHD float rope_theta(int pos, int p, float theta_scale, const float *ff) {
    float th = (float)pos;
    for (int i = 0; i < p; i++) th *= theta_scale;
    return ff ? th / ff[p] : th;
}

// The angle and the cos/sin scale of pair p from its unscaled angle: cpu.c's
// rope_cos_sin (backend.h's rope_cfg, ggml's rope_yarn).
QHD float rope_angle(const rope_cfg &rc, int p, float theta_extrap, float *mscale) {
    const float theta_interp = rc.freq_scale * theta_extrap;
    *mscale = rc.attn_factor;
    if (rc.ext_factor == 0.0f) return theta_interp;
    const float y = ((float)p - rc.corr_lo) / fmaxf(0.001f, rc.corr_hi - rc.corr_lo);
    const float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * rc.ext_factor;
    *mscale *= 1.0f + 0.1f * logf(1.0f / rc.freq_scale);
    return fmaf(theta_extrap, ramp, theta_interp * (1.0f - ramp));
}

// Pair p of a token at pos: its elements a, b (neox: p and p + n_rot/2; else
// 2p and 2p+1) and its scaled cos and sin.
QHD void rope_pair(const rope_cfg &rc, int pos, int p, float theta_scale, int *a, int *b, float *c, float *s) {
    *a = rc.neox ? p : 2 * p, *b = rc.neox ? p + rc.n_rot / 2 : 2 * p + 1;
    float mscale;
    sincosf(rope_angle(rc, p, rope_theta(pos, p, theta_scale, rc.freq_factors), &mscale), s, c);
    *s *= mscale, *c *= mscale;
}

// The pair (x0, x1) turned, contracted as cpu.c's.
QHD float2 rope_turn(float x0, float x1, float c, float s) {
    return make_float2(fmaf(x0, c, -(x1 * s)), fmaf(x0, s, x1 * c));
}

// gelu(x) (tanh approximation) of x rounded to fp16, rounded to fp16: cpu.c's gelu_f16.
QHD float gelu_f16(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float h = __half2float(__float2half_rn(x));
    const float g = 0.5f * h * (1.0f + tanhf(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)));
    return __half2float(__float2half_rn(g));
}

QHD int64_t kv_row(const int32_t *tables, int max_blocks, int seq, int p) {
    return (int64_t)tables[(int64_t)seq * max_blocks + p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK;
}

// How one attention launch is cut. Everything here depends on the model, the
// context capacity and the GPU, never on the tokens of a pass, so a token's
// arithmetic is the same in every pass (and in a recorded graph).
typedef struct {
    int group;     // query heads per kv head
    int gcta;      // query heads per CTA (<= ATT_GMAX)
    int hchunks;   // CTAs per kv head: ceil(group / gcta)
    int chunk;     // key positions per split (a multiple of ATT_KT)
    int tq_max;    // tokens per CTA for prompts (rows gcta·tq fit the accumulators)
    int du, rg;    // output threads: du units of 8 dims × rg row groups
} att_plan;

QHD int att_splits_of(int len, int chunk) { return (len + chunk - 1) / chunk; }

QHD att_plan att_make_plan(int n_heads, int n_kv_heads, int head_dim, int capacity, int sm_count) {
    att_plan P;
    P.group = n_heads / n_kv_heads;
    P.gcta = P.group < ATT_GMAX ? P.group : ATT_GMAX;
    P.hchunks = (P.group + P.gcta - 1) / P.gcta;
    // enough splits for two CTAs per SM on one token, splits of >= ATT_KT
    const int ctas = n_kv_heads * P.hchunks, want = (2 * sm_count + ctas - 1) / ctas;
    int chunk = (capacity + want - 1) / (want > 0 ? want : 1);
    chunk = (chunk + ATT_KT - 1) / ATT_KT * ATT_KT;
    P.chunk = chunk < ATT_KT ? ATT_KT : chunk > ATT_CHUNK_MAX ? ATT_CHUNK_MAX : chunk;
    P.du = head_dim / 8;
    P.rg = ATT_THREADS / P.du;
    int rows = P.rg * (ATT_FLOATS / 8);  // rows the accumulators hold
    if (rows > 128) rows = 128;          // and the score tile stays small
    P.tq_max = rows / P.gcta > 0 ? rows / P.gcta : 1;
    return P;
}

// Dynamic shared memory of k_attention for tq tokens per CTA.
QHD size_t att_smem(const att_plan &P, int head_dim, int tq) {
    const size_t rows = (size_t)tq * P.gcta;
    return rows * head_dim * 4          // q
         + rows * ATT_KT * 4            // scores / probabilities
         + rows * 3 * 4                 // running max, sum, correction
         + (size_t)tq * 2 * 4           // token length, sequence
         + 2 * (size_t)ATT_KT * (head_dim + 2) * 2;  // K and V tile (fp16, rows padded)
}

// ---------------------------------------------------------------------------
// The sampler's keys (kernels_sample.cu says how they are used)
// ---------------------------------------------------------------------------

QHD uint32_t ord_bits(float l) {  // monotone in l; -0 == +0; NaN lowest
    if (l != l) return 0;
    if (l == 0.0f) l = 0.0f;
    uint32_t u;
#ifdef __CUDA_ARCH__
    u = __float_as_uint(l);
#else
    memcpy(&u, &l, 4);
#endif
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

QHD uint64_t cand_key(float l, int id) { return (uint64_t)ord_bits(l) << 24 | (uint64_t)(0xFFFFFF - id); }
QHD int key_id(uint64_t K) { return 0xFFFFFF - (int)(K & 0xFFFFFF); }  // cand_key's id

// exp(l - M) in units of 2^-32 (M: the largest logit, so at most 2^32).
QHD unsigned long long mass_fix(float l, float M) {
    return (unsigned long long)((double)expf(l - M) * 4294967296.0);
}
