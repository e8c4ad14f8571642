// kernels.cu — the CUDA backend: backend.h's op table on an NVIDIA GPU
// (CUDA C, cuBLAS/cuBLASLt). cpu.c is the reference of every op;
// tests/test_backend_ops.c runs both on random inputs and compares.
//
// Weights. upload() copies each tensor once from the mmap into device memory,
// still quantized, repacked where the GGUF block is not a multiple of 16 bytes
// (see dl_make): quants in one plane of 16-byte-aligned rows, scales in a
// second plane. Q4_K and Q5_K keep their GGUF blocks (144 and 176 bytes).
// The 4-bit codes of IQ4_NL, IQ4_XS and MXFP4 become their int8 values by a
// byte permutation (lut4) before the integer dot.
//
// Decode (matmul with few tokens): one kernel per weight type, one warp per
// weight row, each lane loading 16 bytes of quants per step (several steps in
// flight: the loop is unrolled); the activation is first quantized to q8_1
// (blocks of 32: int8 + float scale d + d·Σq; a decode pass's rmsnorm writes
// it as it normalizes), so every block's dot product is integer (dp4a) and
// the weights are never dequantized into memory. Q4_K/Q5_K rows are
// prefetched into L2 whole before the loads. Float
// weights (F32/F16/BF16) multiply the float activation directly.
//
// Prefill (matmul over a prompt): quantized weights are dequantized tile by
// tile (GEMM_TILE_ELEMS elements, bounded scratch) to fp16 and multiplied with
// cuBLASLt (tensor cores, fp32 accumulation); F16/BF16 weights go to cuBLASLt
// as they are, F32 to cublasSgemm. backend.h's contract — prompt rows may
// depend only on their PREFILL_TILE, later rows are computed exactly as alone
// — is kept by running one cuBLASLt algorithm per weight shape, chosen once
// with split-K reductions excluded (so a row's sum does not depend on how many
// rows share the call), and every row after the prompt with the decode kernel.
//
// Attention: one split-K ("flash-decoding") kernel for every token. The keys
// of a sequence are cut into splits of a fixed length (chunk: depends on the
// context capacity and the GPU, never on the pass); a CTA runs one kv head
// (all the query heads that share it), one split and TQ tokens of one
// sequence, streaming K/V through shared memory 32 positions at a time with
// an online softmax; a merge kernel combines the splits. TQ > 1 (prompts)
// loads each K/V row once for TQ queries; each token's arithmetic is the same
// for every TQ, so a token's attention never depends on what shares its pass.
//
// Errors: every CUDA/cuBLAS call is checked (CK/BK: file:line and the call);
// ops that return void record the first failure in the backend, `status`
// reports it. No global mutable state: handles and scratch live in `backend`.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "backend.h"
#include "quant.h"
#include "util.h"
}
#include "kernels.h"

#ifndef QUILL_CUDA_ARCH
#define QUILL_CUDA_ARCH 90  // the SASS this file is built for (Makefile: CUDA_ARCH)
#endif

#define QHD static inline __host__ __device__

enum {
    MMV_MAX = 8,                  // tokens the matrix-vector kernel takes per launch
    MMV_WARPS = 4,                // weight rows (one per warp) per CTA
    MV_SET = 3,                   // matrices one k_matvec_set launch takes
    GEMM_MIN = MMV_MAX + 1,       // fewer prompt rows in a tile: the decode kernel
    ATT_THREADS = 128,            // attention CTA
    ATT_KT = 32,                  // key positions per shared-memory tile
    ATT_GMAX = 8,                 // query heads per CTA (a kv group is split beyond)
    ATT_DMAX = 256,               // largest head_dim the attention kernel takes
    ATT_CHUNK_MAX = 512,          // longest split: long contexts get more splits, not longer ones
    ATT_FLOATS = 64,              // output accumulators per thread (rows × 8 dims)
    SAMPLE_THREADS = 1024,        // the sampler's one CTA
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
static int dl_is_raw(uint32_t type, int64_t cols) {
    switch (type) {
    case Q_F32: return cols % 4 == 0;
    case Q_F16: case Q_BF16: return cols % 8 == 0;
    case Q_Q4_K: case Q_Q5_K: return 1;
    default: return 0;
    }
}

// One GGUF row (src) into the device layout's row r (dst: the whole buffer, zeroed).
static void dl_pack_row(uint32_t type, const uint8_t *src, int64_t cols, const dlayout *L, int64_t r,
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

// The 6-bit scale and min of sub-block s of a Q4_K/Q5_K block, from its 12
// scale bytes as three little-endian words (see quant.c's k4_scale_words).
QHD void k4_scale_min(int s, uint32_t w0, uint32_t w1, uint32_t w2, int *sc, int *mn) {
    if (s < 4) {
        *sc = (w0 >> 8 * s) & 63;
        *mn = (w1 >> 8 * s) & 63;
    } else {
        const int j = s - 4;
        *sc = ((w2 >> 8 * j) & 15) | ((w0 >> (8 * j + 6)) & 3) << 4;
        *mn = ((w2 >> (8 * j + 4)) & 15) | ((w1 >> (8 * j + 6)) & 3) << 4;
    }
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
        int sc, mn;
        k4_scale_min(s, hd.y, hd.z, hd.w, &sc, &mn);
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
// one 16-byte load of quants (or a whole 32-block for the block types);
// mv_item adds item `it` of row r times every token's activation to acc[t].
// The order of operations per token does not depend on NT or n, so a row
// computed with other tokens equals the row computed alone.
// ---------------------------------------------------------------------------

template <uint32_t T>
QHD int64_t mv_items(int64_t cols) {
    if constexpr (T == Q_F32) return (cols + 3) / 4;
    else if constexpr (T == Q_F16 || T == Q_BF16) return (cols + 7) / 8;
    else if constexpr (T == Q_Q4_K || T == Q_Q5_K) return cols / 256 * 8;
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
        if (t >= n) break;
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
        if (t >= n) break;
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
        if (t >= n) break;
        const int s = dot32(lo, hi, x.q + t * x.cols + 32 * it);
        const float2 ds = x.ds[t * nb + it];
        if constexpr (T == Q_Q4_0) acc[t] += d * (ds.x * (float)s - 8.0f * ds.y);
        else if constexpr (T == Q_Q5_0) acc[t] += d * (ds.x * (float)s - 16.0f * ds.y);
        else acc[t] += d * ds.x * (float)s + m * ds.y;
    }
}

// Q4_K, Q5_K: item = (super-block kb, quant chunk c, half h): 16 bytes of qs
// hold elements 16h..16h+15 of sub-blocks 2c (low nibbles) and 2c+1 (high).
// Per sub-block s: d·sc[s]·dx·Σq·qx - dmin·mn[s]·s_x (the min term once, h == 0).
template <uint32_t T, int NT>
QHD void mv_k45(const uint8_t *A, int64_t it, const act_t &x, int n, float acc[NT]) {
    constexpr int bytes = T == Q_Q4_K ? 144 : 176, qs_off = T == Q_Q4_K ? 16 : 48;
    const int64_t kb = it >> 3;
    const int c = (int)(it >> 1) & 3, h = (int)it & 1, s0 = 2 * c, s1 = 2 * c + 1;
    const uint8_t *blk = A + kb * bytes;
    const uint4 hd = ld16(blk), qv = ld16(blk + qs_off + 32 * c + 16 * h);
    uint4 qhv = make_uint4(0, 0, 0, 0);
    if constexpr (T == Q_Q5_K) qhv = ld16(blk + 16 + 16 * h);
    const float d = h2f(hd.x & 0xffff), dmin = h2f(hd.x >> 16);
    int sc0, mn0, sc1, mn1;
    k4_scale_min(s0, hd.y, hd.z, hd.w, &sc0, &mn0);
    k4_scale_min(s1, hd.y, hd.z, hd.w, &sc1, &mn1);
    uint32_t lo[4] = {0}, hi[4] = {0};  // (set below; g++ -O3 for the SIMT build cannot tell)
    for (int k = 0; k < 4; k++) {
        lo[k] = u4(qv, k) & 0x0F0F0F0F;
        hi[k] = (u4(qv, k) >> 4) & 0x0F0F0F0F;
        if constexpr (T == Q_Q5_K) {
            lo[k] |= ((u4(qhv, k) >> s0) & 0x01010101) << 4;
            hi[k] |= ((u4(qhv, k) >> s1) & 0x01010101) << 4;
        }
    }
    const int64_t nb = x.cols / 32, b0 = 8 * kb + s0, b1 = b0 + 1;
    for (int t = 0; t < NT; t++) {
        if (t >= n) break;
        const int8_t *xq = x.q + t * x.cols;
        const uint4 a0 = ld16(xq + 32 * b0 + 16 * h), a1 = ld16(xq + 32 * b1 + 16 * h);
        int i0 = 0, i1 = 0;
        for (int k = 0; k < 4; k++) i0 = dp4a(lo[k], u4(a0, k), i0);
        for (int k = 0; k < 4; k++) i1 = dp4a(hi[k], u4(a1, k), i1);
        const float2 ds0 = x.ds[t * nb + b0], ds1 = x.ds[t * nb + b1];
        float v = d * ((float)sc0 * ds0.x * (float)i0 + (float)sc1 * ds1.x * (float)i1);
        if (h == 0) v -= dmin * ((float)mn0 * ds0.y + (float)mn1 * ds1.y);
        acc[t] += v;
    }
}

// Q6_K: item = (super-block kb, half h, l16): 64 elements 128h + 32k + 16·l16
// + i (k < 4, i < 16), i.e. 16 of each of four groups of 16 (scales[8h+2k+l16]).
// q - 32 is formed per byte, so the integer dot needs no correction.
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
        for (int i = 0; i < 4; i++) {
            const uint32_t v = ((u4(src, i) >> 4 * (k >> 1)) & 0x0F0F0F0F) | ((u4(qhv, i) >> 2 * k) & 0x03030303) << 4;
            q[k][i] = vsub4(v, 0x20202020);
        }
        const int g = 8 * h + 2 * k + l16;
        sc[k] = (int8_t)(u4(sv, g / 4) >> 8 * (g % 4));
    }
    const int64_t nb = x.cols / 32;
    for (int t = 0; t < NT; t++) {
        if (t >= n) break;
        float v = 0.0f;
        for (int k = 0; k < 4; k++) {
            const int64_t blk32 = 8 * kb + 4 * h + k;
            const uint4 a = ld16(x.q + t * x.cols + 32 * blk32 + 16 * l16);
            int s = 0;
            for (int i = 0; i < 4; i++) s = dp4a(q[k][i], u4(a, i), s);
            v += (float)sc[k] * x.ds[t * nb + blk32].x * (float)s;
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
        if (t >= n) break;
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
        if (t >= n) break;
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
// Kernels
// ---------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int warp_sum_int(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the CTA (blockDim.x a multiple of 32, <= 1024); every thread gets it.
__device__ float block_sum(float v, float *red32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // red32 may still be read by a previous call
    if (lane == 0) red32[warp] = v;
    __syncthreads();
    v = lane < nw ? red32[lane] : 0.0f;
    return warp_sum(v);
}

// The warp asks L2 for the whole of a row's bytes up front (prefetches hold
// no registers), so the item loads below hit L2. Measured on an H100 (8B
// shape): Q4_K rows of 4096 columns 19.6 -> 14.3 µs, of 14336 columns 27.1 ->
// 25.5 µs; but Q6_K and Q8_0, whose lanes already load more per item, got
// slower (Q6_K 24.8 -> 30.0 µs), so only Q4_K/Q5_K rows are prefetched.
__device__ __forceinline__ void prefetch_row(const uint8_t *p, int64_t bytes) {
    const uintptr_t end = (uintptr_t)p + (uintptr_t)bytes;
#ifndef QUILL_SIMT  // (a hint only: the SIMT emulation has no L2 to fill)
    for (uintptr_t a = ((uintptr_t)p & ~(uintptr_t)127) + 128 * (threadIdx.x & 31); a < end; a += 128 * 32)
        asm volatile("prefetch.L2 [%0];" ::"l"(a));
#else
    (void)end;
#endif
}

// y[t, r] = row r of w · x[t] for t < n <= NT, by one warp.
template <uint32_t T, int NT>
__device__ __forceinline__ void mv_row(const uint8_t *__restrict__ w, const dlayout &L, int64_t rows, int64_t r,
                                       const act_t &x, int n, float *__restrict__ y) {
    if (r >= rows) return;
    if constexpr (T == Q_Q4_K || T == Q_Q5_K) prefetch_row(w + r * L.a_row, L.a_row);
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    const int64_t items = mv_items<T>(x.cols);
#pragma unroll 4
    for (int64_t it = threadIdx.x; it < items; it += 32) mv_item<T, NT>(w, L, r, it, x, n, acc);
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = warp_sum(acc[t]);
    if (threadIdx.x == 0)
        for (int t = 0; t < n && t < NT; t++) y[t * rows + r] = acc[t];
}

// y = x · wᵀ, a warp per row.
template <uint32_t T, int NT>
__global__ void __launch_bounds__(32 * MMV_WARPS)
k_matvec(const uint8_t *__restrict__ w, dlayout L, int64_t rows, act_t x, int n, float *__restrict__ y) {
    mv_row<T, NT>(w, L, rows, (int64_t)blockIdx.x * MMV_WARPS + threadIdx.y, x, n, y);
}

// Up to MV_SET matrices of one type and width against the same x in one
// launch (a decode step's Q, K and V, or gate and up): CTAs first[i] .. are
// matrix i's. Each row is k_matvec's.
typedef struct {
    const uint8_t *w[MV_SET];
    dlayout L[MV_SET];
    int64_t rows[MV_SET];
    float *y[MV_SET];
    unsigned first[MV_SET];
    int k;
} mv_set;

template <uint32_t T, int NT>
__global__ void __launch_bounds__(32 * MMV_WARPS) k_matvec_set(mv_set s, act_t x, int n) {
    int i = 0;
#pragma unroll
    for (int j = 1; j < MV_SET; j++) i += j < s.k && blockIdx.x >= s.first[j];
    mv_row<T, NT>(s.w[i], s.L[i], s.rows[i], (int64_t)(blockIdx.x - s.first[i]) * MMV_WARPS + threadIdx.y, x, n,
                  s.y[i]);
}

// Mixture of experts (backend.h's moe_matmul): CTA row blockIdx.y takes the
// blockIdx.y-th active expert e, a warp weight row r of e, against each of
// e's sorted rows x[offsets[e] ..) in groups of NT; w stacks the experts'
// matrices (row e·per_exp + r). The arithmetic per row is k_matvec's, so a
// row equals the row computed alone.
template <uint32_t T, int NT>
__global__ void __launch_bounds__(32 * MMV_WARPS)
k_matvec_moe(const uint8_t *__restrict__ w, dlayout L, int64_t per_exp, const float *__restrict__ bias, act_t x,
             const int32_t *__restrict__ offsets, const int32_t *__restrict__ active, float *__restrict__ y) {
    const int e = active[blockIdx.y];
    const int64_t r = (int64_t)blockIdx.x * MMV_WARPS + threadIdx.y;
    if (e < 0 || r >= per_exp) return;
    const int64_t row = (int64_t)e * per_exp + r, items = mv_items<T>(x.cols), nb = x.cols / 32;
    const float b = bias ? bias[row] : 0.0f;
    for (int p0 = offsets[e], p1 = offsets[e + 1]; p0 < p1; p0 += NT) {
        const int n = p1 - p0 < NT ? p1 - p0 : NT;
        act_t xs = x;
        xs.f = x.f + (int64_t)p0 * x.cols;
        if (x.q) xs.q = x.q + (int64_t)p0 * x.cols, xs.ds = x.ds + (int64_t)p0 * nb;
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) acc[t] = 0.0f;
        for (int64_t it = threadIdx.x; it < items; it += 32) mv_item<T, NT>(w, L, row, it, xs, n, acc);
#pragma unroll
        for (int t = 0; t < NT; t++) acc[t] = warp_sum(acc[t]);
        if (threadIdx.x == 0)
            for (int t = 0; t < n && t < NT; t++) y[(int64_t)(p0 + t) * per_exp + r] = acc[t] + b;
    }
}

// Block blk of a q8_1 activation (see q8_block) from the warp's 32 values,
// v = element 32·blk + lane.
__device__ __forceinline__ void warp_q8_1(float v, int64_t blk, int8_t *__restrict__ q, float2 *__restrict__ ds) {
    const int lane = threadIdx.x & 31;
    const float amax = warp_max(fabsf(v));
    const int qi = q8_round(v, q8_inv(amax));
    q[32 * blk + lane] = (int8_t)qi;
    const int sum = warp_sum_int(qi);
    if (lane == 0) ds[blk] = make_float2(amax / 127.0f, amax / 127.0f * (float)sum);
}

// x [n, cols] → q8_1; one warp per block of 32 (blocks never straddle rows:
// cols % 32 == 0).
__global__ void k_quant_q8_1(const float *__restrict__ x, int64_t blocks, int8_t *__restrict__ q,
                             float2 *__restrict__ ds) {
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (blk < blocks) warp_q8_1(x[32 * blk + (threadIdx.x & 31)], blk, q, ds);
}

// out[i] = x[i] rounded to fp16 (bf16 = 0) or bf16 (bf16 = 1).
__global__ void k_to_half(const float *__restrict__ x, int64_t len, int bf16, void *__restrict__ out) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x) {
        if (bf16) ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(x[i]);
        else ((__half *)out)[i] = __float2half_rn(x[i]);
    }
}

// Rows row0 .. row0+nrows-1 of a quantized weight as fp16 [nrows, cols]; one
// thread per block of 32. Block idx is out[32·idx .. 32·idx+31] (cols % 32
// == 0), so a CTA's blocks are one contiguous run of out: they are staged in
// shared memory and stored 16 bytes a thread, consecutive threads at
// consecutive addresses (a thread storing its own 64 bytes made every warp
// store touch 32 sectors, and the prefill spent half its time here).
template <uint32_t T>
__global__ void __launch_bounds__(DQ_THREADS) k_dequant_f16(const uint8_t *__restrict__ w, dlayout L, int64_t row0,
                                                            int64_t nrows, int64_t cols, __half *__restrict__ out) {
    __shared__ uint4 st[DQ_THREADS * 4];  // [thread][4]: its 32 halves
    const int64_t G = cols / 32, total = nrows * G, base = (int64_t)blockIdx.x * DQ_THREADS;
    const int64_t idx = base + threadIdx.x;
    if (idx < total) {
        float v[32];
        dq32<T>(w, L, row0 + idx / G, idx % G, cols, v);
        __half2 h[16];
#pragma unroll
        for (int j = 0; j < 16; j++) h[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
        memcpy(&st[4 * threadIdx.x], h, sizeof h);
    }
    __syncthreads();
    const int64_t n16 = 4 * (total - base < (int64_t)DQ_THREADS ? total - base : (int64_t)DQ_THREADS);
    uint4 *o = (uint4 *)out + 4 * base;
    for (int64_t i = threadIdx.x; i < n16; i += DQ_THREADS) o[i] = st[i];
}

// out[i, :] = row ids[i] of w as floats; one thread per 32 elements.
template <uint32_t T>
__global__ void k_embed(const uint8_t *__restrict__ w, dlayout L, int64_t cols, const int32_t *__restrict__ ids,
                        int n, float *__restrict__ out) {
    const int64_t G = (cols + 31) / 32, idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n * G) return;
    const int64_t i = idx / G, g = idx % G;
    float v[32];
    dq32<T>(w, L, ids[i], g, cols, v);
    for (int j = 0; j < 32; j++)
        if (32 * g + j < cols) out[i * cols + 32 * g + j] = v[j];
}

// One CTA per row: out = x / rms(x) * g. Q8: also out's q8_1 form into q, ds
// (k_quant_q8_1's values, without its launch: dim % 32 == 0). Thread t holds
// elements t + k·blockDim (k < RMS_PER) in registers, loaded together: a
// decode step's norm is a single CTA, which should wait for memory once, not
// once per element. Element j of warp w, k lies in q8 block w + k·(blockDim/32),
// so every warp quantizes whole blocks; a j < dim test is the same for the
// whole warp.
template <bool Q8>
__device__ __forceinline__ void rms_out(float *oi, float gj, int j, float xj, float scale, int64_t blk0,
                                        int8_t *__restrict__ q, float2 *__restrict__ ds) {
    const float v = xj * scale * gj;
    oi[j] = v;
    if constexpr (Q8) warp_q8_1(v, blk0 + j / 32, q, ds);
}

// d != NULL (add_rmsnorm): x += d first, written back (k_add's sums); out
// may equal d (each thread reads its elements of d before it writes them).
template <bool Q8>
__global__ void k_rmsnorm(float *out, float *x, const float *d, const float *__restrict__ g, int dim, float eps,
                          int8_t *__restrict__ q, float2 *__restrict__ ds) {
    __shared__ float red[32];
    const int T = blockDim.x, tid = threadIdx.x;
    float *xi = x + (int64_t)blockIdx.x * dim;
    const float *di = d ? d + (int64_t)blockIdx.x * dim : NULL;
    float *oi = out + (int64_t)blockIdx.x * dim;
    float xv[RMS_PER], gv[RMS_PER];  // g too: loaded with x, not one wait per element after the sum
#pragma unroll
    for (int k = 0; k < RMS_PER; k++) {
        const bool in = tid + k * T < dim;
        xv[k] = in ? xi[tid + k * T] : 0.0f;
        gv[k] = in ? g[tid + k * T] : 0.0f;
        if (di && in) xv[k] += di[tid + k * T];
    }
    if (di)
#pragma unroll
        for (int k = 0; k < RMS_PER; k++)
            if (tid + k * T < dim) xi[tid + k * T] = xv[k];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < RMS_PER; k++) ss += xv[k] * xv[k];
    for (int j = tid + RMS_PER * T; j < dim; j += T) {  // rows wider than the registers
        if (di) xi[j] += di[j];
        ss += xi[j] * xi[j];
    }
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    const int64_t blk0 = (int64_t)blockIdx.x * (dim / 32);
#pragma unroll
    for (int k = 0; k < RMS_PER; k++)  // (tid + k·T < dim is the same for a whole warp)
        if (tid + k * T < dim) rms_out<Q8>(oi, gv[k], tid + k * T, xv[k], scale, blk0, q, ds);
    for (int j = tid + RMS_PER * T; j < dim; j += T) rms_out<Q8>(oi, g[j], j, xi[j], scale, blk0, q, ds);
}

__global__ void k_add_bias(float *__restrict__ y, const float *__restrict__ bias, int64_t len, int dim) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += bias[i % dim];
}

__global__ void k_add(float *__restrict__ y, const float *__restrict__ x, int64_t len) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__global__ void k_swiglu(float *out, const float *gate, const float *__restrict__ up, int64_t len) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = silu_mul(gate[i], up[i]);
}

// k_swiglu for a few tokens (decode), with out's q8_1 form (k_quant_q8_1's values)
// for the down matmul, which then needs no quantizing launch; a warp per block of 32.
__global__ void k_swiglu_q8(float *out, const float *gate, const float *__restrict__ up, int64_t blocks,
                            int8_t *__restrict__ q, float2 *__restrict__ ds) {
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, i = 32 * blk + (threadIdx.x & 31);
    if (blk >= blocks) return;
    const float v = silu_mul(gate[i], up[i]);
    out[i] = v;
    warp_q8_1(v, blk, q, ds);
}

// ---- mixture of experts: routing, grouping, combining ---------------------------

// The (value, index) pair that ranks first: larger value, then lower index.
__device__ __forceinline__ void warp_argmax(float &v, int &i) {
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (oi >= 0 && (i < 0 || ov > v || (ov == v && oi < i))) v = ov, i = oi;
    }
}

// x[0..n) = softmax(x) as moe.c computes it (one thread).
__device__ void softmax_seq(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = fmaxf(mx, x[i]);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] = expf(x[i] - mx));
    const float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

// One warp per token (backend.h's moe_route; moe.c's moe_route_rows is the
// reference): k rounds of a warp argmax over the logits not yet chosen.
__global__ void k_moe_route(int32_t *__restrict__ ids, float *__restrict__ w, const float *__restrict__ logits, int n,
                            int n_exp, int k, int gating) {
    const int i = blockIdx.x * blockDim.y + threadIdx.y, lane = threadIdx.x;
    if (i >= n) return;
    const float *l = logits + (int64_t)i * n_exp;
    int32_t *id = ids + (int64_t)i * k;
    float *wi = w + (int64_t)i * k;
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bi = -1;
        for (int e = lane; e < n_exp; e += 32) {
            int taken = 0;
            for (int q = 0; q < j && !taken; q++) taken = id[q] == e;
            if (!taken && (bi < 0 || l[e] > bv)) bv = l[e], bi = e;
        }
        warp_argmax(bv, bi);
        if (lane == 0) id[j] = bi;
        __syncwarp();
    }
    if (gating == MOE_TOPK_SOFTMAX) {
        if (lane == 0) {
            for (int j = 0; j < k; j++) wi[j] = l[id[j]];
            softmax_seq(wi, k);
        }
        return;
    }
    const float mx = l[id[0]];
    double sum = 0;
    for (int e = lane; e < n_exp; e += 32) sum += (double)expf(l[e] - mx);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) {
        const float inv = (float)(1.0 / sum);
        double ws = 0;
        for (int j = 0; j < k; j++) ws += (double)(wi[j] = expf(l[id[j]] - mx) * inv);
        const float s = fmaxf((float)ws, 6.103515625e-5f);
        for (int j = 0; j < k; j++) wi[j] /= s;
    }
}

// One CTA (backend.h's moe_group): a thread per expert counts its slots, one
// thread sums the counts, then each expert's thread lays out its slots in order.
__global__ void k_moe_group(moe_map mp, const int32_t *__restrict__ ids) {
    extern __shared__ int32_t cnt[];  // [n_exp]
    const int ne = mp.n_exp;
    for (int e = threadIdx.x; e < ne; e += blockDim.x) {
        int c = 0;
        for (int s = 0; s < mp.n_rows; s++) c += ids[s] == e;
        cnt[e] = c;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int off = 0, na = 0;
        for (int e = 0; e < ne; e++) {
            mp.offsets[e] = off;
            if (cnt[e]) mp.active[na++] = e;
            off += cnt[e];
        }
        mp.offsets[ne] = off;
        for (int e = na; e < ne; e++) mp.active[e] = -1;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < ne; e += blockDim.x) {
        if (!cnt[e]) continue;
        int p = mp.offsets[e];
        for (int s = 0; s < mp.n_rows; s++)
            if (ids[s] == e) mp.pos[s] = p, mp.tok[p++] = s / mp.k;
    }
}

// xs[p, :] = x[tok[p], :] for the sorted rows.
__global__ void k_moe_gather(float *__restrict__ xs, const float *__restrict__ x, const int32_t *__restrict__ tok,
                             int64_t len, int64_t cols) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        xs[i] = x[(int64_t)tok[i / cols] * cols + i % cols];
}

// out[i, d] = Σ_j w[i, j]·y[pos[i·k + j], d], in j order (moe.c's moe_combine_rows).
__global__ void k_moe_combine(float *__restrict__ out, const float *__restrict__ y, const float *__restrict__ w,
                              const int32_t *__restrict__ pos, int64_t len, int k, int dim) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / dim, d = i % dim;
        float o = y[(int64_t)pos[t * k] * dim + d] * w[t * k];
        for (int j = 1; j < k; j++) o += y[(int64_t)pos[t * k + j] * dim + d] * w[t * k + j];
        out[i] = o;
    }
}

__global__ void k_swiglu_oai(float *out, const float *gate, const float *__restrict__ up, int64_t len, float alpha,
                             float limit) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = fminf(gate[i], limit), u = fmaxf(-limit, fminf(up[i], limit));
        out[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

__global__ void k_geglu(float *out, const float *gate, const float *__restrict__ up, int64_t len) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = gelu_f16(gate[i]) * up[i];
}

__global__ void k_scale(float *__restrict__ x, float s, int64_t len) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

// One thread per (token, head, rotated pair).
__global__ void k_rope(float *q, float *k, int n, int n_q, int n_k, int head_dim, const int32_t *__restrict__ pos,
                       rope_cfg rc, float theta_scale) {
    const int half = rc.n_rot / 2, heads = n_q + n_k;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * heads * half) return;
    const int p = (int)(idx % half);
    const int64_t th = idx / half, t = th / heads;  // token t, head h of q's then k's
    const int h = (int)(th % heads);
    float mscale;
    const float theta = rope_angle(rc, p, rope_theta(pos[t], p, theta_scale, rc.freq_factors), &mscale);
    float s, c;
    sincosf(theta, &s, &c);
    s *= mscale, c *= mscale;
    float *v = h < n_q ? q + (t * n_q + h) * head_dim : k + (t * n_k + h - n_q) * head_dim;
    const int a = rc.neox ? p : 2 * p, b = rc.neox ? p + half : 2 * p + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = fmaf(x0, c, -(x1 * s));  // contracted as cpu.c's
    v[b] = fmaf(x0, s, x1 * c);
}

// fp16 rows: one thread per value (of K and of V).
__global__ void k_kv_store(__half *__restrict__ kp, __half *__restrict__ vp, const float *__restrict__ k,
                           const float *__restrict__ v, const int32_t *__restrict__ slot, int n, int kv_dim) {
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * kv_dim) return;
    const int64_t i = idx / kv_dim, d = idx % kv_dim, row = slot[i];
    kp[row * kv_dim + d] = __float2half_rn(k[idx]);
    vp[row * kv_dim + d] = __float2half_rn(v[idx]);
}

// q8 rows (backend.h's KV_Q8): one warp per 32-value block of K or V, lane =
// value, rounded as the activations are (q8_block, quant.c's quant_block_q8).
__global__ void k_kv_store_q8(uint8_t *__restrict__ kp, uint8_t *__restrict__ vp, const float *__restrict__ k,
                              const float *__restrict__ v, const int32_t *__restrict__ slot, int n, int kv_dim,
                              int64_t row_bytes) {
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;  // (token, K|V, block)
    const int lane = threadIdx.x & 31, nb = kv_dim / 32;
    if (w >= (int64_t)n * 2 * nb) return;  // whole warps leave together: blockDim is a multiple of 32
    const int64_t i = w / (2 * nb);
    const int kvi = (int)(w / nb % 2), j = (int)(w % nb);
    const float x = (kvi ? v : k)[i * kv_dim + 32 * j + lane];
    const float amax = warp_max(fabsf(x));
    uint8_t *row = (kvi ? vp : kp) + (int64_t)slot[i] * row_bytes;
    row[32 * j + lane] = (uint8_t)(int8_t)q8_round(x, q8_inv(amax));
    if (lane == 0) ((__half *)(row + kv_dim))[j] = __float2half_rn(amax / 127.0f);
}

// ---------------------------------------------------------------------------
// Attention (see the file comment). A CTA: kv head kvh (query heads h0 ..
// h0+G-1 that read it), split s (positions p0 .. p0+chunk-1), tokens tl0 ..
// tl0+TQ-1 of the launch. Rows r = t·G + g (token t, head g). Per 32-position
// tile: K and V into shared memory, scores (one thread per row and position,
// a sequential dot over head_dim), online softmax (one warp per row), then
// O = O·corr + P·V (one thread per row and 8 dims, positions in order).
// Positions a row may not see score -inf and are skipped in P·V, so the rows
// of a CTA never change each other's arithmetic.
// ---------------------------------------------------------------------------

typedef struct {
    const float *q;             // [n, n_heads, D]
    const uint8_t *k, *v;       // pools: rows of row_bytes (backend.h's kv_type)
    int64_t row_bytes;
    int kv_q8;                  // 1: KV_Q8 rows, 0: fp16
    const int32_t *pos, *seq, *tables;
    int max_blocks;
    int t0, nt;                 // this launch: tokens t0 .. t0+nt-1 of the pass
    int tq;                     // tokens per CTA
    int n_heads, D, kv_dim, n_splits;
    att_plan P;
    float scale;
    int window;                 // > 0: sliding window (backend.h's attn_cfg)
    const float *sinks;         // [n_heads] or NULL
    float *out;                 // [n, n_heads, D]
    float *part;                // [nt, n_heads, n_splits, D] split outputs, unnormalized
    float2 *ml;                 // [nt, n_heads, n_splits] (max, sum) of each split
} attn_args;

// A head's sink logit joins the softmax sum l of a row whose running maximum
// is m (cpu.c's sink_rescale): returns the factor the output takes.
__device__ __forceinline__ float sink_fold(float sink, float m, float *l) {
    if (sink > m) {
        const float ms = expf(m - sink);
        *l = *l * ms + 1.0f;
        return ms;
    }
    *l += expf(sink - m);
    return 1.0f;
}

// Values col .. col+7 of a pool row as 8 fp16 (q8: d·q rounded to fp16).
__device__ __forceinline__ uint4 kv_load8(const uint8_t *row, int col, int kv_dim, int q8) {
    if (!q8) return ld16(row + 2 * col);
    const uint2 q = *(const uint2 *)(row + col);  // col is a multiple of 8, rows of 16 bytes
    const float d = __half2float(((const __half *)(row + kv_dim))[col / 32]);
    uint32_t w[4];
    for (int i = 0; i < 4; i++) {
        const uint32_t src = i < 2 ? q.x : q.y, sh = 16 * (i % 2);
        const __half2 h = __floats2half2_rn(d * (float)(int8_t)(src >> sh), d * (float)(int8_t)(src >> (sh + 8)));
        memcpy(&w[i], &h, 4);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

__global__ void __launch_bounds__(ATT_THREADS) k_attention(attn_args a) {
    extern __shared__ float4 att_smem4[];
    const att_plan &P = a.P;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, D = a.D;
    const int kvh = blockIdx.x / P.hchunks, hc = blockIdx.x % P.hchunks;
    const int h0 = kvh * P.group + hc * P.gcta;
    const int G = min(P.gcta, P.group - hc * P.gcta);
    const int split = blockIdx.y, p0 = split * P.chunk;
    const int tl0 = blockIdx.z * a.tq, TQ = min(a.tq, a.nt - tl0), R = TQ * G, Rm = a.tq * P.gcta;
    float *qs = (float *)att_smem4;            // [Rm][D]
    float *sc = qs + (size_t)Rm * D;           // [Rm][ATT_KT]
    float *mrow = sc + (size_t)Rm * ATT_KT, *lrow = mrow + Rm, *crow = lrow + Rm;
    int *tlen = (int *)(crow + Rm), *tseq = tlen + a.tq;
    __half *ks = (__half *)(tseq + a.tq);      // [ATT_KT][D + 2]
    __half *vs = ks + ATT_KT * (D + 2);
    const int ld = D + 2;

    if (tid < TQ) {
        const int tok = a.t0 + tl0 + tid;
        tlen[tid] = a.pos[tok] + 1;
        tseq[tid] = a.seq[tok];
    }
    __syncthreads();
    int maxlen = 0;
    for (int t = 0; t < TQ; t++) maxlen = max(maxlen, tlen[t]);
    if (p0 >= maxlen) return;  // an empty split for every token here
    for (int i = tid; i < R * D; i += ATT_THREADS) {
        const int r = i / D, d = i % D, t = r / G, g = r % G;
        qs[i] = a.q[((int64_t)(a.t0 + tl0 + t) * a.n_heads + h0 + g) * D + d];
    }
    for (int r = tid; r < R; r += ATT_THREADS) mrow[r] = -INFINITY, lrow[r] = 0.0f;

    const int du = tid % P.du, rg = tid / P.du;  // output dims 8du .. 8du+7, rows rg + P.rg·i
    float O[ATT_FLOATS / 8][8];
#pragma unroll
    for (int i = 0; i < ATT_FLOATS / 8; i++)
#pragma unroll
        for (int e = 0; e < 8; e++) O[i][e] = 0.0f;

    for (int u = 0; u < TQ; u++) {  // each distinct sequence among the tokens, once
        const int sq = tseq[u];
        bool seen = false;
        int len = 0;
        for (int t = 0; t < TQ; t++) {
            seen |= t < u && tseq[t] == sq;
            if (tseq[t] == sq) len = max(len, tlen[t]);
        }
        if (seen) continue;
        const int p1 = min(p0 + P.chunk, len);
        // the first tile any of the sequence's tokens here sees (sliding window)
        int lo = len;
        for (int t = 0; t < TQ; t++)
            if (tseq[t] == sq) lo = min(lo, a.window > 0 ? tlen[t] - a.window : 0);
        const int kfirst = lo > p0 ? p0 + (lo - p0) / ATT_KT * ATT_KT : p0;
        for (int kt0 = kfirst; kt0 < p1; kt0 += ATT_KT) {
            __syncthreads();  // the previous tile is consumed
            for (int i = tid; i < ATT_KT * P.du; i += ATT_THREADS) {
                const int j = i / P.du, c = i % P.du, p = kt0 + j;
                uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
                if (p < p1 && p >= lo) {  // below lo: no token here reads it (a sliding cache may not hold it)
                    const int64_t off = kv_row(a.tables, a.max_blocks, sq, p) * a.row_bytes;
                    const int col = kvh * D + 8 * c;
                    kv = kv_load8(a.k + off, col, a.kv_dim, a.kv_q8);
                    vv = kv_load8(a.v + off, col, a.kv_dim, a.kv_q8);
                }
                uint32_t *kd = (uint32_t *)(ks + j * ld + 8 * c), *vd = (uint32_t *)(vs + j * ld + 8 * c);
                kd[0] = kv.x, kd[1] = kv.y, kd[2] = kv.z, kd[3] = kv.w;
                vd[0] = vv.x, vd[1] = vv.y, vd[2] = vv.z, vd[3] = vv.w;
            }
            __syncthreads();
            for (int i = tid; i < R * ATT_KT; i += ATT_THREADS) {  // scores
                const int j = i % ATT_KT, r = i / ATT_KT, t = r / G, p = kt0 + j;
                float s = -INFINITY;
                if (tseq[t] == sq && p < tlen[t] && p < p1 && (a.window <= 0 || p >= tlen[t] - a.window)) {
                    const float *qr = qs + (size_t)r * D;
                    const __half2 *kr = (const __half2 *)(ks + j * ld);
                    float dot = 0.0f;
                    for (int d = 0; d < D / 2; d++) {
                        const float2 kf = __half22float2(kr[d]);
                        dot = fmaf(qr[2 * d], kf.x, dot);
                        dot = fmaf(qr[2 * d + 1], kf.y, dot);
                    }
                    s = dot * a.scale;
                }
                sc[i] = s;
            }
            __syncthreads();
            for (int r = warp; r < R; r += ATT_THREADS / 32) {  // online softmax, lane = position
                const float s = sc[r * ATT_KT + lane], mo = mrow[r];
                const float mn = fmaxf(mo, warp_max(s));
                float corr = 1.0f, p = 0.0f;
                if (mn != -INFINITY) corr = expf(mo - mn), p = expf(s - mn);
                const float ls = warp_sum(p);
                sc[r * ATT_KT + lane] = p;
                __syncwarp();  // every lane has read mrow[r] before lane 0 writes it (racecheck, H200)
                if (lane == 0) mrow[r] = mn, lrow[r] = lrow[r] * corr + ls, crow[r] = corr;
            }
            __syncthreads();
            if (rg < P.rg) {  // O = O·corr + P·V
#pragma unroll
                for (int i = 0; i < ATT_FLOATS / 8; i++) {
                    const int r = rg + P.rg * i;
                    if (r >= R) break;
                    const float c = crow[r];
#pragma unroll
                    for (int e = 0; e < 8; e++) O[i][e] *= c;
#pragma unroll 2
                    for (int j = 0; j < ATT_KT; j++) {
                        const float pj = sc[r * ATT_KT + j];
                        // positions this row may not see (a later prompt token's) add nothing,
                        // even where their V overflowed fp16: 0·inf would be NaN
                        if (pj == 0.0f) continue;
                        const __half2 *vr = (const __half2 *)(vs + j * ld + 8 * du);
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const float2 vf = __half22float2(vr[e]);
                            O[i][2 * e] += pj * vf.x;
                            O[i][2 * e + 1] += pj * vf.y;
                        }
                    }
                }
            }
        }
    }
    __syncthreads();  // mrow/lrow of the last tile are final
    if (rg >= P.rg) return;
#pragma unroll
    for (int i = 0; i < ATT_FLOATS / 8; i++) {
        const int r = rg + P.rg * i;
        if (r >= R) break;
        const int t = r / G, g = r % G, tl = tl0 + t, h = h0 + g;
        const int nsp = att_splits_of(tlen[t], P.chunk);
        if (split >= nsp) continue;  // nothing of this token in the split
        float l = lrow[r];
        if (nsp == 1) {  // the merge would compute exactly this
            const float ms = a.sinks ? sink_fold(a.sinks[h], mrow[r], &l) : 1.0f;
            float *o = a.out + ((int64_t)(a.t0 + tl) * a.n_heads + h) * D + 8 * du;
            for (int e = 0; e < 8; e++) o[e] = l > 0.0f ? O[i][e] * ms / l : 0.0f;
        } else {
            const int64_t ps = ((int64_t)tl * a.n_heads + h) * a.n_splits + split;
            float *o = a.part + ps * D + 8 * du;
            for (int e = 0; e < 8; e++) o[e] = O[i][e];
            if (du == 0) a.ml[ps] = make_float2(mrow[r], l);
        }
    }
}

// out = Σ_s e^(m_s - M)·O_s / Σ_s e^(m_s - M)·l_s over a token's splits.
__global__ void k_attn_merge(attn_args a) {
    const int h = blockIdx.x, tl = blockIdx.y, tok = a.t0 + tl;
    const int nsp = att_splits_of(a.pos[tok] + 1, a.P.chunk);
    if (nsp <= 1) return;  // written by k_attention
    const int64_t base = ((int64_t)tl * a.n_heads + h) * a.n_splits;
    const float2 *ml = a.ml + base;
    float M = -INFINITY, L = 0.0f;
    for (int s = 0; s < nsp; s++) M = fmaxf(M, ml[s].x);
    for (int s = 0; s < nsp; s++) L += expf(ml[s].x - M) * ml[s].y;
    const float ms = a.sinks ? sink_fold(a.sinks[h], M, &L) : 1.0f;
    float *o = a.out + ((int64_t)tok * a.n_heads + h) * a.D;
    for (int d = threadIdx.x; d < a.D; d += blockDim.x) {
        float acc = 0.0f;
        for (int s = 0; s < nsp; s++) acc += expf(ml[s].x - M) * a.part[(base + s) * a.D + d];
        o[d] = L > 0.0f ? acc * ms / L : 0.0f;
    }
}

// ---------------------------------------------------------------------------
// Sampling on the device: one CTA over the logits. Every token gets a unique
// 56-bit key (the logit's order bits, then 2^24-1-id), so "better" is a strict
// total order (higher logit, then lower id: sample.c's cand_better). top-k
// and top-p keep the best-first prefix that first reaches a weight (1 per
// token, or its probability in fixed point); radix select finds the key where
// that prefix ends in 7 passes of 8 bits, with integer histograms, so the
// result never depends on thread timing.
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

// exp(l - M) in units of 2^-32 (M: the largest logit, so at most 2^32).
QHD unsigned long long mass_fix(float l, float M) {
    return (unsigned long long)((double)expf(l - M) * 4294967296.0);
}

__device__ unsigned long long block_sum_u64(unsigned long long v, unsigned long long *red32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    __syncthreads();
    if (lane == 0) red32[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? red32[lane] : 0ull;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ unsigned long long block_max_u64(unsigned long long v, unsigned long long *red32) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = max(v, (unsigned long long)__shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) red32[warp] = v;
    __syncthreads();
    v = lane < (int)(blockDim.x >> 5) ? red32[lane] : 0ull;
    for (int o = 16; o > 0; o >>= 1) v = max(v, (unsigned long long)__shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

typedef struct {
    unsigned long long hist[256];
    unsigned long long red[32];
    unsigned long long bc[2];  // broadcast: prefix, need (or ~0: keep all)
    float fred[32];
    float incl[SAMPLE_THREADS];  // prefix sums of the threads' kept mass
    int chosen, last;
} sample_smem;

// The key where the best-first prefix of the tokens with key >= kmin first
// reaches `need` (weights 1, or mass_fix with by_mass); kmin when their whole
// weight stays below need.
__device__ uint64_t radix_select(const float *lg, int V, float M, uint64_t kmin, int by_mass,
                                 unsigned long long need, sample_smem *sm) {
    const int tid = threadIdx.x, lane = tid & 31;
    uint64_t prefix = 0;
    for (int pass = 0; pass < 7; pass++) {
        const int shift = 48 - 8 * pass;
        for (int i = tid; i < 256; i += blockDim.x) sm->hist[i] = 0;
        __syncthreads();
        for (int i = tid; i < V; i += blockDim.x) {
            const float l = lg[i];
            const uint64_t K = cand_key(l, i);
            if (K < kmin || (pass > 0 && (K >> (shift + 8)) != prefix)) continue;
            atomicAdd(&sm->hist[(K >> shift) & 255], by_mass ? mass_fix(l, M) : 1ull);
        }
        __syncthreads();
        if (tid < 32) {  // lane L owns digits 255-8L .. 248-8L, best first
            unsigned long long own = 0;
            for (int q = 0; q < 8; q++) own += sm->hist[255 - 8 * lane - q];
            unsigned long long incl = own;
            for (int o = 1; o < 32; o <<= 1) {
                const unsigned long long up = __shfl_up_sync(0xffffffffu, incl, o);
                if (lane >= o) incl += up;
            }
            const unsigned long long excl = incl - own;
            if (lane == 31 && incl < need) sm->bc[1] = ~0ull;  // not reachable: keep all
            if (excl < need && incl >= need) {
                unsigned long long cum = excl;
                for (int q = 0; q < 8; q++) {
                    const int dg = 255 - 8 * lane - q;
                    if (cum + sm->hist[dg] >= need) {
                        sm->bc[0] = prefix << 8 | (uint64_t)dg;
                        sm->bc[1] = need - cum;
                        break;
                    }
                    cum += sm->hist[dg];
                }
            }
        }
        __syncthreads();
        if (sm->bc[1] == ~0ull) return kmin;
        prefix = sm->bc[0];
        need = sm->bc[1];
        __syncthreads();
    }
    return prefix;
}

// Inclusive prefix sums over the CTA in thread order into incl[tid] (a fixed
// order of additions: deterministic).
__device__ void block_scan(float v, float *fred, float *incl) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 1; o < 32; o <<= 1) {
        const float up = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += up;
    }
    if (lane == 31) fred[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float w = lane < nw ? fred[lane] : 0.0f;
        for (int o = 1; o < 32; o <<= 1) {
            const float up = __shfl_up_sync(0xffffffffu, w, o);
            if (lane >= o) w += up;
        }
        if (lane < nw) fred[lane] = w;
    }
    __syncthreads();
    incl[threadIdx.x] = warp > 0 ? v + fred[warp - 1] : v;
    __syncthreads();
}

__global__ void __launch_bounds__(SAMPLE_THREADS) k_sample(const float *__restrict__ lg, int V, sample_cfg c, double u,
                                                           int32_t *out) {
    __shared__ sample_smem sm;
    const int tid = threadIdx.x;
    unsigned long long best = 0;
    for (int i = tid; i < V; i += blockDim.x) best = max(best, (unsigned long long)cand_key(lg[i], i));
    best = block_max_u64(best, sm.red);
    const int arg = best ? 0xFFFFFF - (int)(best & 0xFFFFFF) : 0;  // 0: every logit NaN
    if (!(c.temp > 0.0f)) {
        if (tid == 0) *out = arg;
        return;
    }
    const float M = lg[arg];
    // top-k, then top-p over the survivors (p at temperature 1), then min-p
    uint64_t kmin = 0;
    const int top_k_on = c.top_k > 0 && c.top_k < V;
    if (top_k_on) kmin = radix_select(lg, V, M, 0, 0, (unsigned long long)c.top_k, &sm);
    if (c.top_p < 1.0f && (top_k_on ? c.top_k : V) > 1) {
        if (c.top_p <= 0.0f) {
            kmin = best;
        } else {
            unsigned long long tot = 0;
            for (int i = tid; i < V; i += blockDim.x)
                if (cand_key(lg[i], i) >= kmin) tot += mass_fix(lg[i], M);
            tot = block_sum_u64(tot, sm.red);
            const unsigned long long need = (unsigned long long)ceil((double)c.top_p * (double)tot);
            kmin = radix_select(lg, V, M, kmin, 1, need > 0 ? need : 1, &sm);
        }
    }
    const double cut = c.min_p > 0.0f ? log((double)c.min_p) : -INFINITY;
    // draw: weights e^((l - M)/temp) over the kept tokens, walked in id order;
    // thread t owns ids [t·per, (t+1)·per)
    const int per = (V + blockDim.x - 1) / blockDim.x, lo = tid * per, hi = min(V, lo + per);
    float part = 0.0f;
    int last = -1;
    for (int i = lo; i < hi; i++) {
        const float l = lg[i];
        if (cand_key(l, i) >= kmin && (double)l - (double)M >= cut) part += expf((l - M) / c.temp), last = i;
    }
    if (tid == 0) sm.chosen = INT32_MAX, sm.last = -1;
    block_scan(part, sm.fred, sm.incl);
    // thread t's window [incl[t-1], incl[t]): together they cover [0, total)
    const float incl = sm.incl[tid], excl = tid > 0 ? sm.incl[tid - 1] : 0.0f;
    const float target = (float)(u * (double)sm.incl[blockDim.x - 1]);
    if (last >= 0) atomicMax(&sm.last, last);
    if (last >= 0 && excl <= target && target < incl) {
        float cum = excl;
        int pick = last;  // rounding may end the walk short of target: the range's last token
        for (int i = lo; i < hi; i++) {
            const float l = lg[i];
            if (cand_key(l, i) >= kmin && (double)l - (double)M >= cut) {
                cum += expf((l - M) / c.temp);
                if (cum > target) { pick = i; break; }
            }
        }
        atomicMin(&sm.chosen, pick);
    }
    __syncthreads();
    if (tid == 0) *out = sm.chosen != INT32_MAX ? sm.chosen : sm.last >= 0 ? sm.last : arg;
}

// ---------------------------------------------------------------------------
// The backend
// ---------------------------------------------------------------------------

enum { SCR_ACT, SCR_HALF, SCR_TILE, SCR_ATT, SCR_MOE, SCR_COUNT };  // scratch buffers

typedef struct {
    int used;
    int usable;  // 0: this shape's products go to blas_tiles
    cudaDataType_t atype;
    int64_t m, k, lda, ldc;
    cublasLtMatmulAlgo_t algo;
} lt_entry;

// cuBLAS and cuBLASLt are opened when a backend starts, not linked: merely
// loading them costs every process about 0.6 s of static initialization,
// which a CPU run, `quill tokenize` or a shell loop should never pay.
#define BLAS_FNS(X) X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasSetWorkspace) X(cublasSgemm) \
    X(cublasGetStatusString)
#define LT_FNS(X) X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic) \
    X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute) \
    X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulAlgoCheck)
#define BLAS_DECL(f) decltype(&f) p_##f;  // (cublas_v2.h maps some names to their _v2 symbols)
typedef cublasStatus_t (*gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                     const void *, const void *, cudaDataType, int, const void *, cudaDataType,
                                     int, const void *, void *, cudaDataType, int, cublasComputeType_t,
                                     cublasGemmAlgo_t);  // (the header also has a C++ overload)
typedef struct {
    void *lib_blas, *lib_lt;  // dlopen handles
    gemm_ex_fn p_cublasGemmEx;
    BLAS_FNS(BLAS_DECL)
    LT_FNS(BLAS_DECL)
} blas_api;
#define BLAS_STR2(x) #x
#define BLAS_STR(x) BLAS_STR2(x)  // the symbol name after cublas_v2.h's renaming

static void blas_close(blas_api *a) {
    if (a->lib_lt) dlclose(a->lib_lt);
    if (a->lib_blas) dlclose(a->lib_blas);
    memset(a, 0, sizeof *a);
}

// Opens the cuBLAS libraries this file was compiled against; 0, or -1 with err.
static int blas_open(blas_api *a, char *err) {
    char name[64];
    snprintf(name, sizeof name, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    if (!(a->lib_blas = dlopen(name, RTLD_NOW | RTLD_LOCAL))) return errf(err, "cannot load %s: %s", name, dlerror());
    snprintf(name, sizeof name, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
    if (!(a->lib_lt = dlopen(name, RTLD_NOW | RTLD_LOCAL))) return errf(err, "cannot load %s: %s", name, dlerror());
    const char *missing = NULL;
#define BLAS_LOAD(f) if (!(a->p_##f = (decltype(a->p_##f))dlsym(a->lib_blas, BLAS_STR(f)))) missing = BLAS_STR(f);
#define LT_LOAD(f) if (!(a->p_##f = (decltype(a->p_##f))dlsym(a->lib_lt, BLAS_STR(f)))) missing = BLAS_STR(f);
    BLAS_FNS(BLAS_LOAD)
    BLAS_LOAD(cublasGemmEx)
    LT_FNS(LT_LOAD)
    if (missing) return errf(err, "cuBLAS has no symbol %s", missing);
    return 0;
}

struct backend {
    blas_api api;                      // cuBLAS entry points (blas_open)
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *blas_ws;                     // cuBLAS / cuBLASLt workspace [LT_WORKSPACE]
    int sm_count;
    size_t smem_optin;                 // dynamic shared memory a CTA may have
    char desc[384];
    int failed;                        // an op failed; err holds the first failure
    char err[ERR_LEN];
    void *scr[SCR_COUNT];              // scratch, grown on demand (see scratch())
    size_t scr_cap[SCR_COUNT];
    const float *act_src;              // the x whose q8_1 form SCR_ACT holds (NULL: none)
    int64_t act_len;                   // of act_src's elements (the layout is the same for every [n, cols] split)
    const float *half_src;             // the x whose fp16/bf16 form SCR_HALF holds
    int half_n, half_bf16;
    int64_t half_cols;
    void **wbuf;                       // uploaded weights, freed with the backend
    int n_wbuf, cap_wbuf;
    cudaGraphExec_t graph[BACKEND_GRAPHS];
    int capturing;                     // recording: nothing may allocate or wait
    int capture_broken;                // an op could not be recorded: graph_end fails
    int32_t *h_id, *d_id;              // the sampled id: pinned host / device
    uint8_t *stage;                    // pinned [STAGE_BYTES]: small to_device copies start here
    size_t stage_used;                 // bytes handed out since the stream was last idle
    lt_entry lt_cache[LT_ALGOS];       // one cuBLASLt algorithm per weight shape
    int gemm_per_tile;                 // QUILL_GEMM_PER_TILE=1: one GEMM per PREFILL_TILE rows
    long lt_fallbacks;                 // products cuBLASLt refused (done by blas_tiles instead)
    double roof_bw, roof_flops;        // measured by roofline (0: not yet)
};

__attribute__((format(printf, 2, 3))) static int fail(backend *b, const char *fmt, ...) {
    if (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, sizeof b->err, fmt, ap);
        va_end(ap);
        b->failed = 1;
    }
    return -1;
}

static int cuda_ok(backend *b, cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return 0;
    return fail(b, "%s:%d: %s: %s", file, line, call, cudaGetErrorString(e));
}

static int blas_ok(backend *b, cublasStatus_t s, const char *call, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    return fail(b, "%s:%d: %s: %s", file, line, call, b->api.p_cublasGetStatusString(s));
}

// Every CUDA / cuBLAS call goes through these: 0, or -1 with the failure recorded.
#define CK(call) cuda_ok(b, (call), #call, __FILE__, __LINE__)
#define BK(call) blas_ok(b, (call), #call, __FILE__, __LINE__)
#define LAUNCHED(name) cuda_ok(b, cudaGetLastError(), "launching " name, __FILE__, __LINE__)

static unsigned grid_for(int64_t items, int threads) {
    int64_t g = (items + threads - 1) / threads;
    return (unsigned)(g < 1 ? 1 : g > 65535 * 16 ? 65535 * 16 : g);  // grid-stride kernels cover the rest
}

// Waits for the stream; the staging arena is free again after it.
static int stream_sync(backend *b) {
    if (CK(cudaStreamSynchronize(b->stream))) return -1;
    b->stage_used = 0;
    return 0;
}

static void graphs_drop(backend *b) {
    for (int i = 0; i < BACKEND_GRAPHS; i++)
        if (b->graph[i]) {
            CK(cudaGraphExecDestroy(b->graph[i]));
            b->graph[i] = NULL;
        }
}

// The activation caches remember which x a buffer holds converted; any op
// that may write memory forgets them (matmul only when its output overlaps).
static void act_forget(backend *b) { b->act_src = b->half_src = NULL; }

// Scratch buffer `which` with room for bytes, or NULL (failure recorded, or
// the capture marked broken: memory cannot move while a graph is recorded).
// Growing frees the old buffer, so recorded graphs that used it are dropped.
static void *scratch(backend *b, int which, size_t bytes) {
    if (bytes <= b->scr_cap[which]) return b->scr[which];
    if (b->capturing) {
        b->capture_broken = 1;
        return NULL;
    }
    graphs_drop(b);
    act_forget(b);
    if (b->scr[which]) {
        if (stream_sync(b) || CK(cudaFree(b->scr[which]))) return NULL;
        b->scr[which] = NULL;
        b->scr_cap[which] = 0;
    }
    bytes = (bytes + bytes / 4 + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);  // headroom, whole MiB
    if (CK(cudaMalloc(&b->scr[which], bytes))) return NULL;
    b->scr_cap[which] = bytes;
    return b->scr[which];
}

static const char *cuda_describe(backend *b) { return b->desc; }

static void *cuda_alloc(backend *b, size_t bytes) {
    void *p = NULL;
    if (b->capturing) return b->capture_broken = 1, (void *)NULL;
    if (CK(cudaMalloc(&p, bytes ? bytes : 1))) return NULL;
    // on b->stream: a plain cudaMemset runs on the legacy stream, which the
    // non-blocking b->stream does not wait for (later writes could be zeroed)
    if (CK(cudaMemsetAsync(p, 0, bytes, b->stream))) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_release(backend *b, void *p) {
    act_forget(b);
    if (b->capturing) {  // a free (and its sync) would invalidate the capture: a caller's bug
        b->capture_broken = 1;
        fail(b, "release: a graph is being recorded");
        return;
    }
    if (p && !stream_sync(b)) CK(cudaFree(p));
}

static void cuda_to_host(backend *b, void *dst, const void *src, size_t bytes) {
    if (b->capturing) {
        b->capture_broken = 1;
        return;
    }
    if (!CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, b->stream))) stream_sync(b);
}

// Stream-ordered; src may be reused on return. Small copies (a decode step's
// token map) go through the pinned arena, so they never make the driver wait
// for the stream; the arena is recycled whenever the stream is idle.
static void cuda_to_device(backend *b, void *dst, const void *src, size_t bytes) {
    if (b->capturing) {  // a recorded copy would read src at every replay
        b->capture_broken = 1;
        return;
    }
    act_forget(b);
    if (bytes <= STAGE_MAX && b->stage) {
        if (b->stage_used + bytes > STAGE_BYTES && stream_sync(b)) return;
        uint8_t *p = b->stage + b->stage_used;
        memcpy(p, src, bytes);
        b->stage_used += (bytes + 15) & ~(size_t)15;
        CK(cudaMemcpyAsync(dst, p, bytes, cudaMemcpyHostToDevice, b->stream));
        return;
    }
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, b->stream));
}

static int cuda_status(backend *b, char *err) { return b->failed ? errf(err, "%s", b->err) : 0; }

static int track_weight(backend *b, void *p) {
    if (b->n_wbuf == b->cap_wbuf) {
        int cap = b->cap_wbuf ? 2 * b->cap_wbuf : 256;
        void **nw = (void **)realloc(b->wbuf, sizeof *nw * (size_t)cap);
        if (!nw) return fail(b, "out of host memory");
        b->wbuf = nw, b->cap_wbuf = cap;
    }
    b->wbuf[b->n_wbuf++] = p;
    return 0;
}

static int type_supported(uint32_t t) {
    switch (t) {
    case Q_F32: case Q_F16: case Q_BF16: case Q_Q8_0: case Q_Q4_0: case Q_Q4_1: case Q_Q5_0: case Q_Q5_1:
    case Q_Q2_K: case Q_Q3_K: case Q_Q4_K: case Q_Q5_K: case Q_Q6_K: case Q_IQ4_NL: case Q_IQ4_XS: case Q_MXFP4: return 1;
    default: return 0;
    }
}

// The weight into device memory in dl_make's layout; w->data then points there.
static int cuda_upload(backend *b, qmat *w, char *err) {
    char tb[16];
    if (b->capturing) return b->capture_broken = 1, errf(err, "upload: a graph is being recorded");
    const qtype_info *qi = qtype_get(w->type);
    if (!qi || !type_supported(w->type))
        return errf(err, "the CUDA backend has no kernels for type %s", qtype_name(w->type, tb));
    if (w->cols % qi->block || w->row_bytes != qtype_row_bytes(w->type, w->cols))
        return errf(err, "a %s weight of %lld columns: expected a multiple of %lld", qi->name,
                    (long long)w->cols, (long long)qi->block);
    const dlayout L = dl_make(w->type, w->rows, w->cols);
    void *d = NULL;
    if (CK(cudaMalloc(&d, L.bytes))) return errf(err, "%s", b->err);
    if (track_weight(b, d)) return cudaFree(d), errf(err, "%s", b->err);
    const uint8_t *src = (const uint8_t *)w->data;
    if (dl_is_raw(w->type, w->cols)) {
        // on b->stream and waited for (see cuda_alloc)
        if (CK(cudaMemcpyAsync(d, src, (size_t)w->rows * w->row_bytes, cudaMemcpyHostToDevice, b->stream)) ||
            stream_sync(b))
            return errf(err, "%s", b->err);
    } else {
        uint8_t *host = (uint8_t *)calloc(1, L.bytes);
        if (!host) return errf(err, "out of host memory repacking a %s weight (%zu bytes)", qi->name, L.bytes);
        for (int64_t r = 0; r < w->rows; r++) dl_pack_row(w->type, src + (size_t)r * w->row_bytes, w->cols, &L, r, host);
        const int bad = CK(cudaMemcpyAsync(d, host, L.bytes, cudaMemcpyHostToDevice, b->stream)) || stream_sync(b);
        free(host);
        if (bad) return errf(err, "%s", b->err);
    }
    w->data = d;
    return 0;
}

// ---- ops --------------------------------------------------------------------

#define FOR_EACH_QTYPE(X) X(Q_Q8_0) X(Q_Q4_0) X(Q_Q4_1) X(Q_Q5_0) X(Q_Q5_1) X(Q_Q2_K) X(Q_Q3_K) X(Q_Q4_K) \
    X(Q_Q5_K) X(Q_Q6_K) X(Q_IQ4_NL) X(Q_IQ4_XS) X(Q_MXFP4)
#define FOR_EACH_TYPE(X) X(Q_F32) X(Q_F16) X(Q_BF16) FOR_EACH_QTYPE(X)

static unsigned blocks_for(int64_t items, int per_block) { return (unsigned)((items + per_block - 1) / per_block); }

static int is_quantized(uint32_t t) { return t != Q_F32 && t != Q_F16 && t != Q_BF16; }

template <uint32_t T>
static void launch_embed(backend *b, float *out, const qmat *e, const int32_t *ids, int n) {
    const dlayout L = dl_make(T, e->rows, e->cols);
    k_embed<T><<<blocks_for(n * ((e->cols + 31) / 32), 128), 128, 0, b->stream>>>(
        (const uint8_t *)e->data, L, e->cols, ids, n, out);
    LAUNCHED("k_embed");
}

static void cuda_embed(backend *b, float *out, const qmat *emb, const int32_t *ids, int n) {
    act_forget(b);
    if (n <= 0) return;
    switch (emb->type) {
#define X(T) case T: launch_embed<T>(b, out, emb, ids, n); break;
        FOR_EACH_TYPE(X)
#undef X
    default: fail(b, "embed: no CUDA kernel for type %u", emb->type);
    }
}

// SCR_ACT laid out for a q8_1 activation [n, cols]: a->q, a->ds.
static int act_buf(backend *b, int n, int64_t cols, act_t *a) {
    const size_t qbytes = (size_t)round_up((int64_t)n * cols, 256);
    uint8_t *buf = (uint8_t *)scratch(b, SCR_ACT, qbytes + (size_t)n * (cols / 32) * sizeof(float2));
    if (!buf) return -1;
    a->q = (const int8_t *)buf;
    a->ds = (const float2 *)(buf + qbytes);
    return 0;
}

// A pass of a few tokens (decode) normalizes and quantizes in one kernel: the
// matmuls that read `out` next find its q8_1 form in the activation cache.
// d != NULL: add_rmsnorm (x += d first; x is only written then).
static void rmsnorm_launch(backend *b, float *out, float *x, const float *d, const qmat *w, int n, int dim, float eps) {
    act_forget(b);
    if (n <= 0) return;
    // RMS_PER elements a thread, in whole warps (at most 1024 threads)
    const int per_warp = 32 * RMS_PER, warps = (dim + per_warp - 1) / per_warp;
    const int threads = 32 * (warps < 1 ? 1 : warps > 32 ? 32 : warps);
    const float *g = (const float *)w->data;
    if (n <= MMV_MAX && dim % 32 == 0) {
        act_t a;
        if (act_buf(b, n, dim, &a)) return;
        k_rmsnorm<true><<<(unsigned)n, threads, 0, b->stream>>>(out, x, d, g, dim, eps, (int8_t *)a.q,
                                                                (float2 *)a.ds);
        if (LAUNCHED("k_rmsnorm")) return;
        b->act_src = out, b->act_len = (int64_t)n * dim;
        return;
    }
    k_rmsnorm<false><<<(unsigned)n, threads, 0, b->stream>>>(out, x, d, g, dim, eps, NULL, NULL);
    LAUNCHED("k_rmsnorm");
}

static void cuda_rmsnorm(backend *b, float *out, const float *x, const qmat *w, int n, int dim, float eps) {
    rmsnorm_launch(b, out, (float *)x, NULL, w, n, dim, eps);  // (x is not written without d)
}

static void cuda_add_rmsnorm(backend *b, float *out, float *x, const float *d, const qmat *w, int n, int dim,
                             float eps) {
    rmsnorm_launch(b, out, x, d, w, n, dim, eps);
}

static void cuda_add_bias(backend *b, float *y, const qmat *bias, int n, int dim) {
    act_forget(b);
    const int64_t len = (int64_t)n * dim;
    if (len <= 0) return;
    k_add_bias<<<grid_for(len, 256), 256, 0, b->stream>>>(y, (const float *)bias->data, len, dim);
    LAUNCHED("k_add_bias");
}

static void cuda_add(backend *b, float *y, const float *x, size_t len) {
    act_forget(b);
    if (!len) return;
    k_add<<<grid_for((int64_t)len, 256), 256, 0, b->stream>>>(y, x, (int64_t)len);
    LAUNCHED("k_add");
}

static void cuda_swiglu(backend *b, float *out, const float *gate, const float *up, int n, int64_t cols) {
    act_forget(b);
    const int64_t len = (int64_t)n * cols;
    if (len <= 0) return;
    if (n <= MMV_MAX && cols % 32 == 0) {  // as cuda_rmsnorm: the matvec that reads out next finds it quantized
        act_t a;
        if (act_buf(b, n, cols, &a)) return;
        k_swiglu_q8<<<blocks_for(len / 32, 8), 256, 0, b->stream>>>(out, gate, up, len / 32, (int8_t *)a.q,
                                                                      (float2 *)a.ds);
        if (LAUNCHED("k_swiglu_q8")) return;
        b->act_src = out, b->act_len = len;
        return;
    }
    k_swiglu<<<grid_for(len, 256), 256, 0, b->stream>>>(out, gate, up, len);
    LAUNCHED("k_swiglu");
}

static void cuda_geglu(backend *b, float *out, const float *gate, const float *up, size_t len) {
    act_forget(b);
    if (!len) return;
    k_geglu<<<grid_for((int64_t)len, 256), 256, 0, b->stream>>>(out, gate, up, (int64_t)len);
    LAUNCHED("k_geglu");
}

static void cuda_scale(backend *b, float *x, float s, size_t len) {
    act_forget(b);
    if (!len) return;
    k_scale<<<grid_for((int64_t)len, 256), 256, 0, b->stream>>>(x, s, (int64_t)len);
    LAUNCHED("k_scale");
}

static void cuda_rope(backend *b, float *q, float *k, int n, int n_q, int n_k, int head_dim, const int32_t *pos,
                      const rope_cfg *rc) {
    act_forget(b);
    const int64_t items = (int64_t)n * (n_q + n_k) * (rc->n_rot / 2);
    if (items <= 0) return;
    const float theta_scale = powf(rc->base, -2.0f / (float)rc->n_rot);  // cpu.c's value
    k_rope<<<blocks_for(items, 256), 256, 0, b->stream>>>(q, k, n, n_q, n_k, head_dim, pos, *rc, theta_scale);
    LAUNCHED("k_rope");
}

static void cuda_kv_store(backend *b, void *kpool, void *vpool, const float *k, const float *v, const fwd_batch *fb,
                          int kv_dim, int kv_type) {
    act_forget(b);
    const int64_t items = (int64_t)fb->n * kv_dim;
    if (items <= 0) return;
    if (kv_type == KV_Q8) {  // a warp per 32 values of K or V
        k_kv_store_q8<<<blocks_for(2 * items, 256), 256, 0, b->stream>>>(
            (uint8_t *)kpool, (uint8_t *)vpool, k, v, fb->slot, fb->n, kv_dim, (int64_t)kv_row_bytes(KV_Q8, kv_dim));
        LAUNCHED("k_kv_store_q8");
        return;
    }
    k_kv_store<<<blocks_for(items, 256), 256, 0, b->stream>>>((__half *)kpool, (__half *)vpool, k, v, fb->slot,
                                                               fb->n, kv_dim);
    LAUNCHED("k_kv_store");
}

// ---- matmul: the decode kernel ------------------------------------------------

// x [n, cols] as q8_1 in SCR_ACT (kept while x is unchanged: Q, K and V, or
// gate and up, read the same x; rmsnorm may have written it already).
static int act_q8(backend *b, const float *x, int n, int64_t cols, act_t *a) {
    if (act_buf(b, n, cols, a)) return -1;
    if (b->act_src == x && b->act_len == (int64_t)n * cols) return 0;
    const int64_t blocks = (int64_t)n * cols / 32;
    k_quant_q8_1<<<blocks_for(blocks, 8), 256, 0, b->stream>>>(x, blocks, (int8_t *)a->q, (float2 *)a->ds);
    if (LAUNCHED("k_quant_q8_1")) return -1;
    b->act_src = x, b->act_len = (int64_t)n * cols;
    return 0;
}

template <uint32_t T>
static void launch_matvec(backend *b, float *y, const qmat *w, const act_t &x, int n) {
    const dlayout L = dl_make(T, w->rows, w->cols);
    const dim3 grid(blocks_for(w->rows, MMV_WARPS)), block(32, MMV_WARPS);
    // n == 1 and n > 1 compute every row the same way (see mv_item); the
    // one-token instantiation only saves registers.
    if (n == 1) k_matvec<T, 1><<<grid, block, 0, b->stream>>>((const uint8_t *)w->data, L, w->rows, x, n, y);
    else k_matvec<T, MMV_MAX><<<grid, block, 0, b->stream>>>((const uint8_t *)w->data, L, w->rows, x, n, y);
    LAUNCHED("k_matvec");
}

// Rows t0 .. n-1 of y = x·wᵀ, each computed as alone.
static void matvec_rows(backend *b, float *y, const qmat *w, const float *x, int t0, int n) {
    const int64_t cols = w->cols, rows = w->rows;
    const float *xs = x + (int64_t)t0 * cols;
    const int cnt = n - t0;
    act_t a = {NULL, NULL, xs, cols, ((uintptr_t)xs & 15) == 0 && cols % 4 == 0};
    if (is_quantized(w->type) && act_q8(b, xs, cnt, cols, &a)) return;
    for (int g = 0; g < cnt; g += MMV_MAX) {
        const int k = cnt - g < MMV_MAX ? cnt - g : MMV_MAX;
        act_t ag = a;
        ag.f = a.f + (int64_t)g * cols;
        if (a.q) ag.q = a.q + (int64_t)g * cols, ag.ds = a.ds + (int64_t)g * (cols / 32);
        float *yg = y + (int64_t)(t0 + g) * rows;
        switch (w->type) {
#define X(T) case T: launch_matvec<T>(b, yg, w, ag, k); break;
            FOR_EACH_TYPE(X)
#undef X
        default: fail(b, "matmul: no CUDA kernel for type %u", w->type); return;
        }
    }
}

// ---- mixture of experts -------------------------------------------------------

static void cuda_moe_route(backend *b, int32_t *ids, float *w, const float *logits, int n, int n_exp, int k,
                           int gating) {
    act_forget(b);
    if (n <= 0) return;
    k_moe_route<<<blocks_for(n, 4), dim3(32, 4), 0, b->stream>>>(ids, w, logits, n, n_exp, k, gating);
    LAUNCHED("k_moe_route");
}

static void cuda_moe_group(backend *b, const moe_map *mp, const int32_t *ids) {
    act_forget(b);
    k_moe_group<<<1, 256, sizeof(int32_t) * (size_t)mp->n_exp, b->stream>>>(*mp, ids);
    LAUNCHED("k_moe_group");
}

template <uint32_t T>
static void launch_matvec_moe(backend *b, float *y, const qmat *w, const qmat *bias, const act_t &x, const moe_map *mp) {
    const dlayout L = dl_make(T, w->rows, w->cols);
    const int64_t per_exp = w->rows / mp->n_exp;
    const dim3 grid(blocks_for(per_exp, MMV_WARPS), (unsigned)(mp->n_rows < mp->n_exp ? mp->n_rows : mp->n_exp));
    const dim3 block(32, MMV_WARPS);
    const float *bv = (const float *)bias->data;
    // one token (n_rows == k): every expert has one row at most
    if (mp->n_rows == mp->k)
        k_matvec_moe<T, 1><<<grid, block, 0, b->stream>>>((const uint8_t *)w->data, L, per_exp, bv, x, mp->offsets,
                                                          mp->active, y);
    else
        k_matvec_moe<T, MMV_MAX><<<grid, block, 0, b->stream>>>((const uint8_t *)w->data, L, per_exp, bv, x,
                                                                mp->offsets, mp->active, y);
    LAUNCHED("k_matvec_moe");
}

static void cuda_moe_matmul(backend *b, float *y, const qmat *w, const qmat *bias, const float *x, int by_token,
                            const moe_map *mp) {
    act_forget(b);
    const int64_t cols = w->cols, len = (int64_t)mp->n_rows * cols;
    if (len <= 0) return;
    if (by_token) {  // the sorted rows' inputs, gathered
        float *xs = (float *)scratch(b, SCR_MOE, sizeof(float) * (size_t)len);
        if (!xs) return;
        k_moe_gather<<<grid_for(len, 256), 256, 0, b->stream>>>(xs, x, mp->tok, len, cols);
        if (LAUNCHED("k_moe_gather")) return;
        x = xs;
    }
    act_t a = {NULL, NULL, x, cols, ((uintptr_t)x & 15) == 0 && cols % 4 == 0};
    if (is_quantized(w->type) && act_q8(b, x, mp->n_rows, cols, &a)) return;
    switch (w->type) {
#define X(T) case T: launch_matvec_moe<T>(b, y, w, bias, a, mp); break;
        FOR_EACH_TYPE(X)
#undef X
    default: fail(b, "moe_matmul: no CUDA kernel for type %u", w->type);
    }
    act_forget(b);
}

static void cuda_moe_combine(backend *b, float *out, const float *y, const float *w, const moe_map *mp, int dim) {
    act_forget(b);
    const int64_t len = (int64_t)(mp->n_rows / mp->k) * dim;
    if (len <= 0) return;
    k_moe_combine<<<grid_for(len, 256), 256, 0, b->stream>>>(out, y, w, mp->pos, len, mp->k, dim);
    LAUNCHED("k_moe_combine");
}

static void cuda_swiglu_oai(backend *b, float *out, const float *gate, const float *up, size_t len, float alpha,
                            float limit) {
    act_forget(b);
    if (!len) return;
    k_swiglu_oai<<<grid_for((int64_t)len, 256), 256, 0, b->stream>>>(out, gate, up, (int64_t)len, alpha, limit);
    LAUNCHED("k_swiglu_oai");
}

// ---- matmul: prompts through cuBLASLt -----------------------------------------

// x [n, cols] as fp16 (or bf16) in SCR_HALF, kept while x is unchanged.
static const void *act_half(backend *b, const float *x, int n, int64_t cols, int bf16) {
    void *buf = scratch(b, SCR_HALF, (size_t)n * cols * 2);
    if (!buf) return NULL;
    if (b->half_src == x && b->half_n == n && b->half_cols == cols && b->half_bf16 == bf16) return buf;
    k_to_half<<<grid_for((int64_t)n * cols, 256), 256, 0, b->stream>>>(x, (int64_t)n * cols, bf16, buf);
    if (LAUNCHED("k_to_half")) return NULL;
    b->half_src = x, b->half_n = n, b->half_cols = cols, b->half_bf16 = bf16;
    return buf;
}

// cuBLASLt calls: checked, and a refusal sends the product to blas_tiles.
#define LT(call) ((call) != CUBLAS_STATUS_SUCCESS)

// 1 when cuBLASLt accepts algo for C[m, n] = op(A)ᵀ·B at this n.
static int lt_check(backend *b, cublasLtMatmulDesc_t op, const cublasLtMatmulAlgo_t *algo, cudaDataType_t at,
                    int64_t m, int64_t k, int64_t lda, int64_t ldc, int64_t n) {
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulHeuristicResult_t res;
    const int ok = !LT(b->api.p_cublasLtMatrixLayoutCreate(&la, at, (uint64_t)k, (uint64_t)m, lda)) &&
                   !LT(b->api.p_cublasLtMatrixLayoutCreate(&lb, at, (uint64_t)k, (uint64_t)n, k)) &&
                   !LT(b->api.p_cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)m, (uint64_t)n, ldc)) &&
                   !LT(b->api.p_cublasLtMatmulAlgoCheck(b->lt, op, la, lb, lc, lc, algo, &res)) &&
                   res.workspaceSize <= LT_WORKSPACE;
    if (lc) b->api.p_cublasLtMatrixLayoutDestroy(lc);
    if (lb) b->api.p_cublasLtMatrixLayoutDestroy(lb);
    if (la) b->api.p_cublasLtMatrixLayoutDestroy(la);
    return ok;
}

// The decision for C[m, n] = op(A)ᵀ·B with A [m rows of k] of atype: a
// cuBLASLt algorithm chosen once per shape (for n = 8 tiles) without split-K
// reductions and checked at the GEMM's smallest and odd n, then used for
// every n, so a row's sum is the same whatever n is. The decision is
// remembered also when no algorithm qualifies (usable 0: blas_tiles), so a
// shape never switches between the two from one prompt to the next.
static lt_entry *lt_algo(backend *b, cublasLtMatmulDesc_t op, cudaDataType_t at, int64_t m, int64_t k, int64_t lda,
                         int64_t ldc) {
    int slot = -1;
    for (int i = 0; i < LT_ALGOS; i++) {
        lt_entry *e = &b->lt_cache[i];
        if (e->used && e->atype == at && e->m == m && e->k == k && e->lda == lda && e->ldc == ldc) return e;
        if (!e->used && slot < 0) slot = i;
    }
    if (slot < 0) slot = (int)((m ^ k) % LT_ALGOS);  // full: replace one
    const int64_t n_ref = 8 * PREFILL_TILE;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    const size_t ws = LT_WORKSPACE;
    const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE;  // mask: no split-K reduction
    const uint32_t align = 16;
    const int bad =
        LT(b->api.p_cublasLtMatrixLayoutCreate(&la, at, (uint64_t)k, (uint64_t)m, lda)) ||
        LT(b->api.p_cublasLtMatrixLayoutCreate(&lb, at, (uint64_t)k, (uint64_t)n_ref, k)) ||
        LT(b->api.p_cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)m, (uint64_t)n_ref, ldc)) ||
        LT(b->api.p_cublasLtMatmulPreferenceCreate(&pref)) ||
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) ||
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                                sizeof reductions)) ||
        // the model's buffers are 64-byte aligned, row offsets 16: exclude algorithms that need 256
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof align)) ||
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof align)) ||
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof align)) ||
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align)) ||
        LT(b->api.p_cublasLtMatmulAlgoGetHeuristic(b->lt, op, la, lb, lc, lc, pref, 1, &res, &nres));
    if (pref) b->api.p_cublasLtMatmulPreferenceDestroy(pref);
    if (lc) b->api.p_cublasLtMatrixLayoutDestroy(lc);
    if (lb) b->api.p_cublasLtMatrixLayoutDestroy(lb);
    if (la) b->api.p_cublasLtMatrixLayoutDestroy(la);
    int usable = !bad && nres >= 1;
    const int64_t ns[] = {GEMM_MIN, PREFILL_TILE, PREFILL_TILE + GEMM_MIN, n_ref + 1};
    for (int i = 0; usable && i < 4; i++) usable = lt_check(b, op, &res.algo, at, m, k, lda, ldc, ns[i]);
    lt_entry *e = &b->lt_cache[slot];
    *e = (lt_entry){1, usable, at, m, k, lda, ldc, {}};
    if (usable) e->algo = res.algo;
    return e;
}

// C[n, m] (ldc) = B[n, k]·A[m, k]ᵀ with cuBLASLt; -1 when the shape's
// decision (lt_algo) is blas_tiles. A refusal by cuBLASLt is not a failure:
// it makes blas_tiles the shape's decision from then on.
static int lt_matmul(backend *b, const void *A, cudaDataType_t at, int64_t lda, int64_t m, int64_t k, const void *B,
                     int64_t n, float *C, int64_t ldc) {
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    const float one = 1.0f, zero = 0.0f;
    int rc = -1;
    if (!LT(b->api.p_cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) &&
        !LT(b->api.p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) &&
        !LT(b->api.p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb)) &&
        !LT(b->api.p_cublasLtMatrixLayoutCreate(&la, at, (uint64_t)k, (uint64_t)m, lda)) &&
        !LT(b->api.p_cublasLtMatrixLayoutCreate(&lb, at, (uint64_t)k, (uint64_t)n, k)) &&
        !LT(b->api.p_cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)m, (uint64_t)n, ldc))) {
        lt_entry *e = lt_algo(b, op, at, m, k, lda, ldc);
        if (e->usable && !LT(b->api.p_cublasLtMatmul(b->lt, op, &one, A, la, B, lb, &zero, C, lc, C, lc, &e->algo,
                                                     b->blas_ws, LT_WORKSPACE, b->stream)))
            rc = 0;
        else
            e->usable = 0;
    }
    if (lc) b->api.p_cublasLtMatrixLayoutDestroy(lc);
    if (lb) b->api.p_cublasLtMatrixLayoutDestroy(lb);
    if (la) b->api.p_cublasLtMatrixLayoutDestroy(la);
    if (op) b->api.p_cublasLtMatmulDescDestroy(op);
    if (rc) b->lt_fallbacks++;
    return rc;
}

// The same product with cuBLAS, one call per PREFILL_TILE rows of B (cuBLAS
// picks its algorithm by shape; per tile, a row depends only on its tile).
static void blas_tiles(backend *b, const void *A, cudaDataType_t at, int64_t lda, int64_t m, int64_t k,
                       const void *B, int64_t n, float *C, int64_t ldc) {
    const float one = 1.0f, zero = 0.0f;
    const size_t esize = at == CUDA_R_32F ? 4 : 2;
    for (int64_t t0 = 0; t0 < n; t0 += PREFILL_TILE) {
        const int64_t nt = n - t0 < PREFILL_TILE ? n - t0 : PREFILL_TILE;
        const void *Bt = (const char *)B + (size_t)t0 * k * esize;
        float *Ct = C + t0 * ldc;
        if (at == CUDA_R_32F) {
            if (BK(b->api.p_cublasSgemm(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)nt, (int)k, &one, (const float *)A,
                               (int)lda, (const float *)Bt, (int)k, &zero, Ct, (int)ldc)))
                return;
        } else if (BK(b->api.p_cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)nt, (int)k, &one, A, at, (int)lda, Bt,
                                   at, (int)k, &zero, Ct, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT))) {
            return;
        }
    }
}

static void gemm_call(backend *b, const void *A, cudaDataType_t at, int64_t lda, int64_t m, int64_t k, const void *B,
                      int64_t n, float *C, int64_t ldc) {
    if (at != CUDA_R_32F && !b->gemm_per_tile && lt_matmul(b, A, at, lda, m, k, B, n, C, ldc) == 0) return;
    blas_tiles(b, A, at, lda, m, k, B, n, C, ldc);
}

template <uint32_t T>
static void launch_dequant(backend *b, const qmat *w, const dlayout &L, int64_t r0, int64_t nr, __half *tile) {
    k_dequant_f16<T><<<blocks_for(nr * (w->cols / 32), DQ_THREADS), DQ_THREADS, 0, b->stream>>>(
        (const uint8_t *)w->data, L, r0, nr, w->cols, tile);
    LAUNCHED("k_dequant_f16");
}

// Rows 0 .. n-1 of y = x·wᵀ (prompt rows) with tensor-core GEMMs.
static void gemm(backend *b, float *y, const qmat *w, const float *x, int n) {
    const int64_t rows = w->rows, cols = w->cols;
    const dlayout L = dl_make(w->type, rows, cols);
    if (w->type == Q_F32) {
        blas_tiles(b, w->data, CUDA_R_32F, L.a_row / 4, rows, cols, x, n, y, rows);
        return;
    }
    const int bf = w->type == Q_BF16;
    const void *xh = act_half(b, x, n, cols, bf);
    if (!xh) return;
    if (!is_quantized(w->type)) {
        gemm_call(b, w->data, bf ? CUDA_R_16BF : CUDA_R_16F, L.a_row / 2, rows, cols, xh, n, y, rows);
        return;
    }
    // quantized: row tiles dequantized to fp16 in bounded scratch (the tile
    // height depends only on the weight's shape)
    int64_t tr = (int64_t)(GEMM_TILE_ELEMS / (size_t)cols) / 128 * 128;
    tr = tr < 128 ? 128 : tr > rows ? rows : tr;
    __half *tile = (__half *)scratch(b, SCR_TILE, (size_t)tr * cols * 2);
    if (!tile) return;
    for (int64_t r0 = 0; r0 < rows; r0 += tr) {
        const int64_t nr = rows - r0 < tr ? rows - r0 : tr;
        switch (w->type) {
#define X(T) case T: launch_dequant<T>(b, w, L, r0, nr, tile); break;
            FOR_EACH_QTYPE(X)
#undef X
        default: fail(b, "matmul: no CUDA kernel for type %u", w->type); return;
        }
        gemm_call(b, tile, CUDA_R_16F, cols, nr, cols, xh, n, y + r0, rows);
    }
}

// Prompt rows in whole PREFILL_TILEs (and a last partial tile of >= GEMM_MIN
// rows) go through the GEMM; every other row through the decode kernel.
// A matmul wrote [y, y + bytes): the cached forms of an x there are stale.
static void act_written(backend *b, const float *y, size_t bytes) {
    const char *y0 = (const char *)y, *y1 = y0 + bytes;
    const float *srcs[2] = {b->act_src, b->half_src};
    const int64_t lens[2] = {b->act_len, (int64_t)b->half_n * b->half_cols};
    for (int i = 0; i < 2; i++)
        if (srcs[i] && (const char *)srcs[i] < y1 && (const char *)(srcs[i] + lens[i]) > y0) act_forget(b);
}

// Prompt rows the GEMM takes (n_joint's whole tiles, and a last partial one
// of at least GEMM_MIN rows); the others go by matvec.
static int gemm_rows(int n, int n_joint) {
    const int nj = n_joint < 0 ? 0 : n_joint > n ? n : n_joint;
    const int full = nj / PREFILL_TILE * PREFILL_TILE, rest = nj - full;
    return full + (rest >= GEMM_MIN ? rest : 0);
}

static void cuda_matmul(backend *b, float *y, const qmat *w, const float *x, int n, int n_joint) {
    if (n <= 0) return;
    const int ng = gemm_rows(n, n_joint);
    if (ng > 0) gemm(b, y, w, x, ng);
    if (ng < n) matvec_rows(b, y, w, x, ng, n);
    act_written(b, y, sizeof(float) * (size_t)n * w->rows);
}

template <uint32_t T>
static void launch_matvec_set(backend *b, float *const y[], const qmat *const w[], int k, const act_t &x, int n) {
    mv_set s = {};
    unsigned ctas = 0;
    for (int i = 0; i < k; i++) {
        s.w[i] = (const uint8_t *)w[i]->data, s.L[i] = dl_make(T, w[i]->rows, w[i]->cols), s.rows[i] = w[i]->rows;
        s.y[i] = y[i], s.first[i] = ctas, ctas += blocks_for(w[i]->rows, MMV_WARPS);
    }
    s.k = k;
    const dim3 block(32, MMV_WARPS);
    if (n == 1) k_matvec_set<T, 1><<<ctas, block, 0, b->stream>>>(s, x, n);
    else k_matvec_set<T, MMV_MAX><<<ctas, block, 0, b->stream>>>(s, x, n);
    LAUNCHED("k_matvec_set");
}

// backend.h's matmul_set: where every row goes by matvec (a decode pass) and
// the matrices share a type and a width, one launch for all (the small K and
// V alone would leave most of the GPU idle); else a matmul each.
static void cuda_matmul_set(backend *b, float *const y[], const qmat *const w[], int k, const float *x, int n,
                            int n_joint) {
    int one = k >= 1 && k <= MV_SET && n > 0 && n <= MMV_MAX && gemm_rows(n, n_joint) == 0;
    for (int i = 1; one && i < k; i++) one = w[i]->type == w[0]->type && w[i]->cols == w[0]->cols;
    if (!one) {
        for (int i = 0; i < k; i++) cuda_matmul(b, y[i], w[i], x, n, n_joint);
        return;
    }
    const int64_t cols = w[0]->cols;
    act_t a = {NULL, NULL, x, cols, ((uintptr_t)x & 15) == 0 && cols % 4 == 0};
    if (is_quantized(w[0]->type) && act_q8(b, x, n, cols, &a)) return;
    switch (w[0]->type) {
#define X(T) case T: launch_matvec_set<T>(b, y, w, k, a, n); break;
        FOR_EACH_TYPE(X)
#undef X
    default: fail(b, "matmul: no CUDA kernel for type %u", w[0]->type); return;
    }
    for (int i = 0; i < k; i++) act_written(b, y[i], sizeof(float) * (size_t)n * w[i]->rows);
}

// ---- attention ----------------------------------------------------------------

// Tokens t0 .. t0+nt-1 of the pass, tq per CTA, in launches whose split
// partials fit ATT_PART_BYTES.
static void launch_attention(backend *b, attn_args a, int t0, int nt, int tq) {
    if (nt <= 0) return;
    while (tq > 1 && att_smem(a.P, a.D, tq) > b->smem_optin) tq /= 2;
    const size_t per_tok = (size_t)a.n_heads * a.n_splits * (a.D * sizeof(float) + sizeof(float2));
    // tokens per launch: k_attn_merge's grid.y is one per token (<= 65535)
    int64_t tg = (int64_t)(ATT_PART_BYTES / per_tok) / tq * tq;
    tg = tg < tq ? tq : tg > 65535 / tq * tq ? 65535 / tq * tq : tg;
    for (int s = 0; s < nt; s += (int)tg) {
        const int cnt = nt - s < tg ? nt - s : (int)tg;
        a.t0 = t0 + s, a.nt = cnt, a.tq = tq;
        if (a.n_splits > 1) {
            char *buf = (char *)scratch(b, SCR_ATT, per_tok * cnt);
            if (!buf) return;
            a.part = (float *)buf;
            a.ml = (float2 *)(buf + (size_t)cnt * a.n_heads * a.n_splits * a.D * sizeof(float));
        }
        const dim3 grid((unsigned)(a.P.hchunks * (a.n_heads / a.P.group)), (unsigned)a.n_splits,
                        blocks_for(cnt, tq));
        k_attention<<<grid, ATT_THREADS, att_smem(a.P, a.D, tq), b->stream>>>(a);
        if (LAUNCHED("k_attention")) return;
        if (a.n_splits > 1) {
            k_attn_merge<<<dim3((unsigned)a.n_heads, (unsigned)cnt), 128, 0, b->stream>>>(a);
            if (LAUNCHED("k_attn_merge")) return;
        }
    }
}

static void cuda_attention(backend *b, float *out, const float *q, const void *kpool, const void *vpool,
                           const fwd_batch *fb, int n_heads, int n_kv_heads, int head_dim, int kv_type,
                           const attn_cfg *ac) {
    act_forget(b);
    if (fb->n <= 0) return;
    if (head_dim % (kv_type == KV_Q8 ? 32 : 8) || head_dim > ATT_DMAX || n_kv_heads <= 0 || n_heads % n_kv_heads) {
        fail(b, "attention: head_dim %d with %d/%d heads: the CUDA kernel takes head_dim a multiple of 8 (q8 KV: "
             "32) up to %d", head_dim, n_heads, n_kv_heads, ATT_DMAX);
        return;
    }
    const int capacity = fb->max_blocks * KV_BLOCK;
    attn_args a;
    memset(&a, 0, sizeof a);
    a.P = att_make_plan(n_heads, n_kv_heads, head_dim, capacity, b->sm_count);
    // splits: enough for the capacity in a decode pass or whenever a graph is
    // recorded (it replays at any length); only those the pass reaches for a prompt
    const int cap_splits = att_splits_of(capacity, a.P.chunk);
    const int len_splits = att_splits_of(fb->max_len > 0 ? fb->max_len : capacity, a.P.chunk);
    a.n_splits = b->capturing || fb->n <= MMV_MAX || len_splits > cap_splits ? cap_splits : len_splits;
    a.q = q, a.k = (const uint8_t *)kpool, a.v = (const uint8_t *)vpool;
    a.kv_q8 = kv_type == KV_Q8, a.row_bytes = (int64_t)kv_row_bytes(kv_type, n_kv_heads * head_dim);
    a.pos = fb->pos, a.seq = fb->seq, a.tables = fb->tables, a.max_blocks = fb->max_blocks;
    a.n_heads = n_heads, a.D = head_dim, a.kv_dim = n_kv_heads * head_dim;
    a.scale = ac->scale, a.window = ac->window, a.sinks = ac->sinks;
    a.out = out;
    // a prompt's tokens share K/V tiles; other tokens (one per sequence) go alone
    const int np = fb->n_prompt >= 2 ? (fb->n_prompt < fb->n ? fb->n_prompt : fb->n) : 0;
    launch_attention(b, a, 0, np, a.P.tq_max);
    launch_attention(b, a, np, fb->n - np, 1);
}

// ---- sampling, graphs, limits ---------------------------------------------------

static int32_t cuda_sample(backend *b, const float *logits, int n_vocab, const sample_cfg *sc, double u) {
    if (b->capturing) return b->capture_broken = 1, -1;
    if (n_vocab <= 0 || n_vocab > (1 << 24)) return fail(b, "sample: %d logits", n_vocab);
    k_sample<<<1, SAMPLE_THREADS, 0, b->stream>>>(logits, n_vocab, *sc, u, b->d_id);
    if (LAUNCHED("k_sample") || CK(cudaMemcpyAsync(b->h_id, b->d_id, sizeof(int32_t), cudaMemcpyDeviceToHost, b->stream)) ||
        stream_sync(b))
        return -1;
    return *b->h_id;
}

static int cuda_graph_begin(backend *b, int key, char *err) {
    if (key < 0 || key >= BACKEND_GRAPHS) return errf(err, "graph key %d is not in [0, %d)", key, BACKEND_GRAPHS);
    if (b->capturing) return errf(err, "graph %d: already recording", key);
    if (b->graph[key]) {
        if (CK(cudaGraphExecDestroy(b->graph[key]))) return errf(err, "%s", b->err);
        b->graph[key] = NULL;
    }
    act_forget(b);
    if (CK(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal))) return errf(err, "%s", b->err);
    b->capturing = 1;
    b->capture_broken = 0;
    return 0;
}

// A capture that an op could not record is not a failure of the backend: the
// caller runs the ops directly (which grows the scratch) and records later.
static int cuda_graph_end(backend *b, int key, char *err) {
    if (!b->capturing) return errf(err, "graph %d: not recording", key);
    cudaGraph_t g = NULL;
    const cudaError_t e = cudaStreamEndCapture(b->stream, &g);
    b->capturing = 0;
    act_forget(b);
    if (e != cudaSuccess || b->capture_broken || !g) {
        if (g) cudaGraphDestroy(g);
        (void)cudaGetLastError();  // clear a capture error: nothing ran
        return errf(err, "graph %d: %s", key,
                    e != cudaSuccess ? cudaGetErrorString(e) : "an op needed memory or a copy while recording");
    }
    cudaGraphExec_t ex = NULL;
    const int bad = CK(cudaGraphInstantiate(&ex, g, 0));
    CK(cudaGraphDestroy(g));
    if (bad) return errf(err, "%s", b->err);
    b->graph[key] = ex;
    return 0;
}

static int cuda_graph_replay(backend *b, int key, char *err) {
    if (key < 0 || key >= BACKEND_GRAPHS || !b->graph[key]) return errf(err, "no recorded graph %d", key);
    act_forget(b);
    if (CK(cudaGraphLaunch(b->graph[key], b->stream))) return errf(err, "%s", b->err);
    return 0;
}

#ifndef QUILL_SIMT  // (the emulation has no limits to measure: cuda_roofline)
// Device-memory bandwidth (device-to-device copies of up to 1 GiB) and bf16
// GEMM throughput (8192³ through cuBLAS), best of a few timed repetitions.
static int measure_roofline(backend *b) {
    size_t free_b = 0, total_b = 0;
    if (CK(cudaMemGetInfo(&free_b, &total_b)) || stream_sync(b)) return -1;
    size_t bytes = (size_t)1 << 30;
    while (bytes > free_b / 4 && bytes > ((size_t)64 << 20)) bytes /= 2;
    int64_t N = 8192;
    while ((size_t)N * N * 8 > free_b / 2 && N > 1024) N /= 2;
    void *src = NULL, *dst = NULL, *A = NULL, *B = NULL, *C = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    const float one = 1.0f, zero = 0.0f;
    float ms = 0;
    int bad = CK(cudaEventCreate(&e0)) || CK(cudaEventCreate(&e1)) || CK(cudaMalloc(&src, bytes)) ||
              CK(cudaMalloc(&dst, bytes)) || CK(cudaMemsetAsync(src, 1, bytes, b->stream));
    for (int rep = 0; !bad && rep < 4; rep++) {
        bad = CK(cudaEventRecord(e0, b->stream)) || CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->stream)) ||
              CK(cudaEventRecord(e1, b->stream)) || CK(cudaEventSynchronize(e1)) || CK(cudaEventElapsedTime(&ms, e0, e1));
        if (!bad && rep > 0 && 2.0 * bytes / (ms * 1e-3) > b->roof_bw) b->roof_bw = 2.0 * bytes / (ms * 1e-3);
    }
    if (src) CK(cudaFree(src));
    if (dst) CK(cudaFree(dst));
    bad = bad || CK(cudaMalloc(&A, (size_t)N * N * 2)) || CK(cudaMalloc(&B, (size_t)N * N * 2)) ||
          CK(cudaMalloc(&C, (size_t)N * N * 4)) || CK(cudaMemsetAsync(A, 0x3c, (size_t)N * N * 2, b->stream)) ||
          CK(cudaMemsetAsync(B, 0x3c, (size_t)N * N * 2, b->stream));
    for (int rep = 0; !bad && rep < 4; rep++) {
        bad = CK(cudaEventRecord(e0, b->stream)) ||
              BK(b->api.p_cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)N, (int)N, &one, A, CUDA_R_16BF, (int)N, B,
                              CUDA_R_16BF, (int)N, &zero, C, CUDA_R_32F, (int)N, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT)) ||
              CK(cudaEventRecord(e1, b->stream)) || CK(cudaEventSynchronize(e1)) || CK(cudaEventElapsedTime(&ms, e0, e1));
        const double f = 2.0 * N * N * N / (ms * 1e-3);
        if (!bad && rep > 0 && f > b->roof_flops) b->roof_flops = f;
    }
    if (A) CK(cudaFree(A));
    if (B) CK(cudaFree(B));
    if (C) CK(cudaFree(C));
    if (e0) CK(cudaEventDestroy(e0));
    if (e1) CK(cudaEventDestroy(e1));
    return bad || b->failed ? -1 : 0;
}
#endif

static int cuda_roofline(backend *b, double *mem_bw, double *gemm_flops, char *err) {
    if (b->capturing) return errf(err, "roofline: recording a graph");
#ifdef QUILL_SIMT  // the emulation's speed says nothing of a GPU's: no limits (0)
    *mem_bw = *gemm_flops = 0;
#else
    if (!(b->roof_bw > 0) && measure_roofline(b)) return errf(err, "%s", b->err);
    *mem_bw = b->roof_bw;
    *gemm_flops = b->roof_flops;
#endif
    return 0;
}

// ---- init / free ------------------------------------------------------------------

static void cuda_free(backend *b) {
    if (!b) return;
    if (b->stream) cudaStreamSynchronize(b->stream);
    graphs_drop(b);
    for (int i = 0; i < SCR_COUNT; i++) if (b->scr[i]) CK(cudaFree(b->scr[i]));
    for (int i = 0; i < b->n_wbuf; i++) CK(cudaFree(b->wbuf[i]));
    free(b->wbuf);
    if (b->blas_ws) CK(cudaFree(b->blas_ws));
    if (b->d_id) CK(cudaFree(b->d_id));
    if (b->h_id) CK(cudaFreeHost(b->h_id));
    if (b->stage) CK(cudaFreeHost(b->stage));
    if (b->lt) BK(b->api.p_cublasLtDestroy(b->lt));
    if (b->blas) BK(b->api.p_cublasDestroy(b->blas));
    if (b->stream) CK(cudaStreamDestroy(b->stream));
    blas_close(&b->api);
    free(b);
}

static int cuda_init(backend **out, int n_threads, char *err) {
    (void)n_threads;  // the GPU needs no host threads
    *out = NULL;
    char why[ERR_LEN];
    if (cuda_device_count(why) <= 0) return errf(err, "no usable CUDA device: %s", why);
    backend *b = (backend *)calloc(1, sizeof *b);
    if (!b) return errf(err, "out of memory");
    cudaDeviceProp prop;
    char e2[ERR_LEN];
    if (blas_open(&b->api, e2)) {
        blas_close(&b->api);
        free(b);
        return errf(err, "no usable CUDA: %s", e2);
    }
    if (CK(cudaSetDevice(0)) || CK(cudaGetDeviceProperties(&prop, 0)) ||
        CK(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking)) || BK(b->api.p_cublasCreate(&b->blas)) ||
        BK(b->api.p_cublasSetStream(b->blas, b->stream)) || BK(b->api.p_cublasLtCreate(&b->lt)) ||
        CK(cudaMalloc(&b->blas_ws, LT_WORKSPACE)) || BK(b->api.p_cublasSetWorkspace(b->blas, b->blas_ws, LT_WORKSPACE)) ||
        CK(cudaMallocHost((void **)&b->h_id, sizeof(int32_t))) || CK(cudaMalloc((void **)&b->d_id, sizeof(int32_t))) ||
        CK(cudaMallocHost((void **)&b->stage, STAGE_BYTES)) ||
        CK(cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                (int)prop.sharedMemPerBlockOptin))) {
        errf(err, "%s", b->err);
        cuda_free(b);
        return -1;
    }
    b->sm_count = prop.multiProcessorCount;
    b->smem_optin = prop.sharedMemPerBlockOptin;
    const char *pt = getenv("QUILL_GEMM_PER_TILE");
    b->gemm_per_tile = pt && pt[0] == '1';
    snprintf(b->desc, sizeof b->desc, "cuda, %.256s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount, (double)prop.totalGlobalMem / (1 << 30));
    *out = b;
    return 0;
}

extern "C" int cuda_device_count(char *why) {
    // Without the NVIDIA driver's control device (or WSL2's GPU device) there
    // is no GPU to find, and asking the runtime would cost every CPU run a few
    // hundred ms. The SIMT emulation is a device without a driver.
#ifndef QUILL_SIMT
    if (access("/dev/nvidiactl", F_OK) != 0 && access("/dev/dxg", F_OK) != 0)
        return snprintf(why, ERR_LEN, "the NVIDIA driver is not loaded: neither /dev/nvidiactl nor /dev/dxg exists"), -1;
#endif
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, ERR_LEN, "%s", cudaGetErrorString(e));
        return 0;
    }
    if (n <= 0) return snprintf(why, ERR_LEN, "no CUDA device is present"), 0;
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, ERR_LEN, "device 0: %s", cudaGetErrorString(e));
        return 0;
    }
    if (p.major * 10 + p.minor < QUILL_CUDA_ARCH) {
        snprintf(why, ERR_LEN, "device 0 (%s) has compute capability %d.%d; this quill has kernels for sm_%d "
                 "(rebuild with make CUDA_ARCH=sm_%d%d)", p.name, p.major, p.minor, QUILL_CUDA_ARCH, p.major, p.minor);
        return 0;
    }
    return n;
}

// Device memory cudaMalloc can still hand out (backend_ops.mem_available):
// model_load refuses a KV cache or activations larger than this up front.
// A failure is recorded (status reports it) and bounds nothing.
static size_t cuda_mem_available(backend *b) {
    size_t free_b = 0, total_b = 0;
    return CK(cudaMemGetInfo(&free_b, &total_b)) ? SIZE_MAX : free_b;
}

extern "C" const backend_ops cuda_backend = {
    .name = "cuda",
    .init = cuda_init,
    .free = cuda_free,
    .describe = cuda_describe,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .to_host = cuda_to_host,
    .to_device = cuda_to_device,
    .upload = cuda_upload,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .add_rmsnorm = cuda_add_rmsnorm,
    .matmul = cuda_matmul,
    .add_bias = cuda_add_bias,
    .add = cuda_add,
    .swiglu = cuda_swiglu,
    .geglu = cuda_geglu,
    .scale = cuda_scale,
    .rope = cuda_rope,
    .kv_store = cuda_kv_store,
    .attention = cuda_attention,
    .moe_route = cuda_moe_route,
    .moe_group = cuda_moe_group,
    .moe_matmul = cuda_moe_matmul,
    .moe_combine = cuda_moe_combine,
    .swiglu_oai = cuda_swiglu_oai,
    .matmul_set = cuda_matmul_set,
    .status = cuda_status,
    .sample = cuda_sample,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_replay = cuda_graph_replay,
    .roofline = cuda_roofline,
    .mem_available = cuda_mem_available,
};

// ---------------------------------------------------------------------------
// cuda_host_selftest: the QHD code above, run on the CPU against quant.c and
// cpu.c's definitions (no GPU needed; tests/test_backend_ops.c calls it).
// ---------------------------------------------------------------------------

typedef struct {
    uint64_t s;
} st_rng;

static uint32_t st_next(st_rng *r) {
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(r->s >> 33);
}
static float st_unif(st_rng *r) { return (float)(st_next(r) & 0xffffff) / 8388608.0f - 1.0f; }  // [-1, 1)

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

// `rows` GGUF rows of type t: random quants, scales of plausible size.
static void st_rows(st_rng *r, uint32_t t, int64_t rows, int64_t cols, uint8_t *dst) {
    const size_t rb = qtype_row_bytes(t, cols), bb = qtype_get(t)->block_bytes;
    for (size_t i = 0; i < rows * rb; i++) dst[i] = (uint8_t)st_next(r);
    const size_t nblk = rows * rb / bb;
    for (size_t k = 0; k < nblk; k++) {
        uint8_t *blk = dst + k * bb;
        const uint16_t d = f32_to_fp16(0.002f + 0.01f * fabsf(st_unif(r))), m = f32_to_fp16(0.01f * st_unif(r));
        switch (t) {
        case Q_F32: { const float f = st_unif(r); memcpy(blk, &f, 4); break; }
        case Q_F16: put16(blk, f32_to_fp16(st_unif(r))); break;
        case Q_BF16: put16(blk, f32_to_bf16(st_unif(r))); break;
        case Q_Q4_1: case Q_Q5_1: case Q_Q4_K: case Q_Q5_K: put16(blk, d), put16(blk + 2, m); break;
        case Q_Q6_K: put16(blk + 208, d); break;
        case Q_Q3_K: put16(blk + 108, d); break;
        case Q_Q2_K: put16(blk + 80, d), put16(blk + 82, d); break;
        case Q_MXFP4: blk[0] = (uint8_t)(118 + st_next(r) % 8); break;  // scales 2^-10 .. 2^-3
        default: put16(blk, d); break;  // Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS
        }
    }
}

template <uint32_t T>
static int st_dq_row(const uint8_t *packed, const dlayout &L, int64_t r, int64_t cols, float *out) {
    for (int64_t g = 0; g < (cols + 31) / 32; g++) {
        float v[32];
        dq32<T>(packed, L, r, g, cols, v);
        for (int j = 0; j < 32 && 32 * g + j < cols; j++) out[32 * g + j] = v[j];
    }
    return 0;
}

template <uint32_t T>
static float st_mv(const uint8_t *packed, const dlayout &L, int64_t r, const act_t &x, int n, int t) {
    float acc[MMV_MAX] = {0};
    for (int64_t it = 0; it < mv_items<T>(x.cols); it++) mv_item<T, MMV_MAX>(packed, L, r, it, x, n, acc);
    return acc[t];
}

template <uint32_t T>
static float st_mv1(const uint8_t *packed, const dlayout &L, int64_t r, const act_t &x) {
    float acc[1] = {0};
    for (int64_t it = 0; it < mv_items<T>(x.cols); it++) mv_item<T, 1>(packed, L, r, it, x, 1, acc);
    return acc[0];
}

// One type: repack, dequantize every row (== quant.c), and the matrix-vector
// items over 3 tokens (== a float64 product of the dequantized operands).
template <uint32_t T>
static int st_type(st_rng *rng, int64_t cols, FILE *log, char *err) {
    char tb[16];
    const char *name = qtype_name(T, tb);
    const int64_t rows = 5;
    const int n = 3;
    const size_t rb = qtype_row_bytes(T, cols);
    const dlayout L = dl_make(T, rows, cols);
    uint8_t *gguf = (uint8_t *)malloc(rows * rb), *packed = (uint8_t *)calloc(1, L.bytes);
    float *ref = (float *)malloc(sizeof(float) * cols), *got = (float *)malloc(sizeof(float) * cols);
    float *x = (float *)malloc(sizeof(float) * n * cols), *xd = (float *)malloc(sizeof(float) * n * cols);
    int8_t *xq = (int8_t *)malloc(n * cols + 16);
    float2 *xds = (float2 *)malloc(sizeof(float2) * (n * cols / 32 + 1));
    int rc = 0;
    if (!gguf || !packed || !ref || !got || !x || !xd || !xq || !xds) {
        rc = errf(err, "out of memory");
        goto done;
    }
    st_rows(rng, T, rows, cols, gguf);
    for (int64_t r = 0; r < rows; r++) dl_pack_row(T, gguf + r * rb, cols, &L, r, packed);
    for (int64_t i = 0; i < n * cols; i++) x[i] = st_unif(rng) * (i % 7 == 0 ? 4.0f : 1.0f);
    if (is_quantized(T)) {
        for (int64_t b = 0; b < n * cols / 32; b++) {
            q8_block(x + 32 * b, xq + 32 * b, &xds[b]);
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                xd[32 * b + j] = (float)xq[32 * b + j] * xds[b].x;
                sum += xq[32 * b + j];
                if (fabsf(xd[32 * b + j] - x[32 * b + j]) > 0.5001f * xds[b].x) {
                    rc = errf(err, "q8_1: element %lld: %g does not round to %g", (long long)(32 * b + j),
                              (double)x[32 * b + j], (double)xd[32 * b + j]);
                    goto done;
                }
            }
            if (xds[b].y != xds[b].x * (float)sum) {
                rc = errf(err, "q8_1: block %lld: s %g != d * sum %g", (long long)b, (double)xds[b].y,
                          (double)(xds[b].x * (float)sum));
                goto done;
            }
        }
    } else {
        memcpy(xd, x, sizeof(float) * n * cols);
    }
    for (int64_t r = 0; r < rows && !rc; r++) {
        q_dequantize_row(T, gguf + r * rb, ref, cols);
        st_dq_row<T>(packed, L, r, cols, got);
        for (int64_t e = 0; e < cols; e++)
            if (got[e] != ref[e]) {
                rc = errf(err, "%s %lld cols: row %lld element %lld dequantizes to %.9g, quant.c says %.9g", name,
                          (long long)cols, (long long)r, (long long)e, (double)got[e], (double)ref[e]);
                goto done;
            }
        const act_t a = {xq, xds, x, cols, cols % 4 == 0};
        for (int t = 0; t < n; t++) {
            double want = 0, mag = 0;
            for (int64_t e = 0; e < cols; e++) want += (double)ref[e] * xd[t * cols + e], mag += fabs((double)ref[e] * xd[t * cols + e]);
            const float y = st_mv<T>(packed, L, r, a, n, t);
            if (fabs(y - want) > 2e-6 * mag + 1e-30) {
                rc = errf(err, "%s %lld cols: row %lld token %d: matvec %.9g, float64 %.9g (|error| %.3g of %.3g)", name,
                          (long long)cols, (long long)r, t, (double)y, want, fabs(y - want), mag);
                goto done;
            }
        }
        act_t a1 = a;
        for (int t = 0; t < n; t++) {  // a token alone computes what it computes among others
            a1.q = xq + t * cols, a1.ds = xds + t * (cols / 32), a1.f = x + t * cols;
            const float alone = st_mv1<T>(packed, L, r, a1), among = st_mv<T>(packed, L, r, a, n, t);
            if (memcmp(&alone, &among, 4)) {
                rc = errf(err, "%s: row %lld token %d: %.9g alone, %.9g among %d tokens", name, (long long)r, t,
                          (double)alone, (double)among, n);
                goto done;
            }
        }
    }
    if (log) fprintf(log, "ok   host: %s %lld columns: repack, dequantize, matvec blocks\n", name, (long long)cols);
done:
    free(gguf), free(packed), free(ref), free(got), free(x), free(xd), free(xq), free(xds);
    return rc;
}

static int st_rope(FILE *log, char *err) {
    const float bases[] = {10000.0f, 500000.0f, 1e6f};
    float ff[64];
    for (int i = 0; i < 64; i++) ff[i] = 1.0f + 0.25f * (float)i;
    for (int bi = 0; bi < 3; bi++) {
        const int n_rot = 128;
        const float ts = powf(bases[bi], -2.0f / (float)n_rot);
        const int positions[] = {0, 1, 17, 4095, 131071};
        for (int pi = 0; pi < 5; pi++) {
            float theta = (float)positions[pi];  // cpu.c's loop
            for (int p = 0; p < n_rot / 2; p++) {
                const float want = theta / ff[p], got = rope_theta(positions[pi], p, ts, ff);
                if (memcmp(&want, &got, 4))
                    return errf(err, "rope: base %g pos %d pair %d: angle %.9g, cpu.c %.9g", (double)bases[bi],
                                positions[pi], p, (double)got, (double)want);
                theta *= ts;
            }
        }
    }
    if (log) fprintf(log, "ok   host: rope angles as cpu.c\n");
    return 0;
}

// Plans for the shapes quill meets: the accumulators, shared memory and grid
// limits hold.
static int st_attention_plan(FILE *log, char *err) {
    const int dims[] = {8, 16, 64, 80, 96, 128, 256}, groups[] = {1, 2, 3, 4, 7, 8, 16, 32};
    const int caps[] = {16, 512, 4096, 131072, 1 << 24}, sms[] = {132, 78, 16};  // 2^24: the loader's limit
    for (int a = 0; a < 7; a++)
        for (int g = 0; g < 8; g++)
            for (int c = 0; c < 5; c++)
                for (int s = 0; s < 3; s++) {
                    const int D = dims[a], n_kv = 8, n_heads = n_kv * groups[g];
                    const att_plan P = att_make_plan(n_heads, n_kv, D, caps[c], sms[s]);
                    const int splits = att_splits_of(caps[c], P.chunk);
                    const size_t smem = att_smem(P, D, P.tq_max);
                    const char *why = P.chunk % ATT_KT ? "chunk not a multiple of the tile"
                                    : P.gcta * P.tq_max > P.rg * (ATT_FLOATS / 8) && P.tq_max > 1 ? "rows exceed the accumulators"
                                    : P.gcta > P.rg * (ATT_FLOATS / 8) ? "heads exceed the accumulators"
                                    : P.du * P.rg > ATT_THREADS ? "threads"
                                    : splits < 1 || splits > 65535 ? "split count"
                                    : P.hchunks * P.gcta < P.group ? "heads uncovered"
                                    : smem > 160 * 1024 ? "shared memory" : NULL;
                    if (why)
                        return errf(err, "attention plan (head_dim %d, group %d, capacity %d, %d SMs): %s "
                                    "(chunk %d, tq %d, %d splits, %zu bytes)", D, groups[g], caps[c], sms[s], why,
                                    P.chunk, P.tq_max, splits, smem);
                }
    int32_t tables[2 * 4] = {7, 2, 5, 0, 1, 3, 6, 4};
    for (int sq = 0; sq < 2; sq++)
        for (int p = 0; p < 4 * KV_BLOCK; p++)
            if (kv_row(tables, 4, sq, p) != (int64_t)tables[sq * 4 + p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK)
                return errf(err, "kv_row: sequence %d position %d", sq, p);
    if (log) fprintf(log, "ok   host: attention plans and paged addressing\n");
    return 0;
}

// The sampler's keys order tokens as sample.c's cand_better does.
static int st_sample_keys(st_rng *r, FILE *log, char *err) {
    const float special[] = {-INFINITY, -1e30f, -1.0f, -0.0f, 0.0f, 1e-30f, 1.0f, 3.5f, 1e30f, INFINITY};
    for (int i = 0; i < 20000; i++) {
        const float la = i < 100 ? special[i % 10] : st_unif(r) * 8, lb = i < 100 ? special[i / 10] : (st_next(r) & 1) ? la : st_unif(r) * 8;
        const int ia = (int)(st_next(r) % 200000), ib = (int)(st_next(r) % 200000);
        const int better = la > lb || (la == lb && ia < ib);
        const int by_key = cand_key(la, ia) > cand_key(lb, ib);
        if (better != by_key && !(la == lb && ia == ib))
            return errf(err, "sampler keys: (%g, %d) vs (%g, %d): cand_better %d, keys %d", (double)la, ia, (double)lb,
                        ib, better, by_key);
    }
    if (log) fprintf(log, "ok   host: sampler keys order as sample.c\n");
    return 0;
}

extern "C" int cuda_host_selftest(FILE *log, char *err) {
    st_rng r = {12345};
    const int64_t fcols[] = {1, 37, 64, 4096};
    for (int i = 0; i < 4; i++)
        if (st_type<Q_F32>(&r, fcols[i], log, err) || st_type<Q_F16>(&r, fcols[i], log, err) ||
            st_type<Q_BF16>(&r, fcols[i], log, err))
            return -1;
    const int64_t bcols[] = {32, 96, 4096};
    for (int i = 0; i < 3; i++)
        if (st_type<Q_Q8_0>(&r, bcols[i], log, err) || st_type<Q_Q4_0>(&r, bcols[i], log, err) ||
            st_type<Q_Q4_1>(&r, bcols[i], log, err) || st_type<Q_Q5_0>(&r, bcols[i], log, err) ||
            st_type<Q_Q5_1>(&r, bcols[i], log, err) || st_type<Q_IQ4_NL>(&r, bcols[i], log, err) ||
            st_type<Q_MXFP4>(&r, bcols[i], log, err))
            return -1;
    const int64_t kcols[] = {256, 768, 4096};
    for (int i = 0; i < 3; i++)
        if (st_type<Q_Q4_K>(&r, kcols[i], log, err) || st_type<Q_Q5_K>(&r, kcols[i], log, err) ||
            st_type<Q_Q6_K>(&r, kcols[i], log, err) || st_type<Q_Q2_K>(&r, kcols[i], log, err) ||
            st_type<Q_Q3_K>(&r, kcols[i], log, err) || st_type<Q_IQ4_XS>(&r, kcols[i], log, err))
            return -1;
    return st_rope(log, err) || st_attention_plan(log, err) || st_sample_keys(&r, log, err) ? -1 : 0;
}
