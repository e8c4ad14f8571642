// quant.h — GGML tensor types: block layouts, dequantization, activation
// quantization and the dot-product kernels the CPU backend multiplies with.
//
// Types and ids are ggml's (the ids GGUF stores). quill computes with:
//   F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K,
//   Q6_K, IQ4_NL, IQ4_XS, MXFP4
// Every other known ggml type has a name and a block size (so `quill info`
// can list it and the loader can size it) but is rejected for compute.
//
// Matrix products follow llama.cpp's CPU scheme: activations are first
// quantized to the weight type's "dot type" (Q8_0 for Q4_0/Q5_0/Q8_0 and the
// 4-bit table types IQ4_NL/IQ4_XS/MXFP4, Q8_1 for Q4_1/Q5_1, Q8_K for the
// K-quants, F16 for F16, BF16 for BF16, F32 for F32), then integer (or
// half-precision) dot products run block by block without ever dequantizing a
// weight matrix.
#ifndef QUILL_QUANT_H
#define QUILL_QUANT_H

#include <stddef.h>
#include <stdint.h>

enum qtype {
    Q_F32 = 0, Q_F16 = 1, Q_Q4_0 = 2, Q_Q4_1 = 3, Q_Q5_0 = 6, Q_Q5_1 = 7,
    Q_Q8_0 = 8, Q_Q8_1 = 9, Q_Q2_K = 10, Q_Q3_K = 11, Q_Q4_K = 12,
    Q_Q5_K = 13, Q_Q6_K = 14, Q_Q8_K = 15, Q_IQ4_NL = 20, Q_IQ4_XS = 23, Q_BF16 = 30,
    Q_MXFP4 = 39,
    Q_TYPE_COUNT = 40,  // ids at or above this are unknown
};

typedef struct {
    const char *name;    // "Q4_K"
    int64_t block;       // elements per block (1 for F32/F16/BF16)
    size_t block_bytes;  // bytes per block
    int compute;         // 1 when quill can compute with it (dequantize + matmul)
    uint32_t dot_type;   // activation type for dot products (only if compute)
} qtype_info;

// NULL for ids ggml never assigned or has removed (treat as "unknown type").
const qtype_info *qtype_get(uint32_t type);
// Name for messages, also for unknown ids ("type 99").
const char *qtype_name(uint32_t type, char buf[16]);
// Bytes of n elements; n must be a multiple of the block size (checked by caller).
size_t qtype_row_bytes(uint32_t type, int64_t n);
// buf = the names of the types quill computes with, space-separated
// ("F32 F16 ..."; 256 bytes hold them all).
void qtype_compute_names(char *buf, size_t len);

// half and bfloat16 conversions (round to nearest even, like ggml).
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

// dst[0..n) = the n elements of a row of `type` (n a multiple of the block).
void q_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);
// One block of 32 values as ggml's x86 quantize_row_q8_0 (the q8 KV cache's
// rounding): q = round-half-even(x·127/amax); returns d = amax/127 as fp16.
uint16_t q8_0_block(const float *x, int8_t q[32]);

// Activation quantization for multiplying with weights of type wtype:
// q_act_row_bytes is the size of one quantized activation row of n elements,
// q_quantize_act writes it (n a multiple of wtype's block).
//
// The values are llama.cpp's (x86 CPU path): Q8_0 and Q8_1 blocks of 32 with
// d = amax/127 rounded to fp16 and q = round-half-even(x * 127/amax); Q8_1
// adds s = fp16(d * Σq); Q8_K blocks of 256 with d = -max/127 (max: the
// element of largest |x|, first one on ties), q = min(127, rint(x * -127/max))
// and llama.cpp's bsums (Σq per 16); F16/BF16 round x to nearest even.
// The row LAYOUT is quant.c's own, arranged for the SIMD kernels, and depends
// on the weight type: a row quantized for wtype is only for weights of wtype.
//   F32 weights:  float[n] (x copied)
//   F16 weights:  float[n] holding fp16-rounded values
//   BF16 weights: uint16 bf16[n]
//   Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS, MXFP4 (Q8_0 values), Q4_1, Q5_1
//         (Q8_1 values): units of 512 elements (the last one zero-padded),
//         640 bytes each: int8 q[512], float d[16], then 16 words w. Lane L
//         of a unit is a block of 32 consecutive elements (IQ4_XS: a
//         sub-block); byte 64*v + 4*L + i of q holds element 32*L + 4*v + i
//         (v < 8, i < 4). w is int32 -128*Σq for Q8_0 values, float s for
//         Q8_1 values.
//   Q4_K, Q5_K (Q8_K values): one 320-byte record per super-block: int8 q[256],
//         then 16 words. Sub-block s (32 elements, in order) starts at byte
//         64 * (2 * (s / 4) + s % 2) + 32 * ((s / 2) % 2), so the four
//         64-byte vectors hold sub-blocks (0, 2), (1, 3), (4, 6), (5, 7),
//         as the nibbles of Q4_K's qs do. Word 0 is float d, words 8..11 the
//         int16 pairs (Σq of sub-block 2p, Σq of sub-block 2p+1), others 0.
//   Q6_K, Q3_K, Q2_K (Q8_K values): one 384-byte record per super-block:
//         int8 q[256], int32 c[16], float d, 60 bytes padding. Byte
//         64*v + 4*g + i of q holds element 16*g + 4*v + i (v < 4, i < 4);
//         c[g] = -32 * bsums[g] (Q6_K), -4 * bsums[g] (Q3_K), bsums[g] (Q2_K).
// Rows are padded (with zeros) to a multiple of 64 bytes, so 64-byte-aligned
// buffers keep every row aligned.
size_t q_act_row_bytes(uint32_t wtype, int64_t n);
void q_quantize_act(uint32_t wtype, const float *x, void *dst, int64_t n);

// The matrix kernel. For r in [0, nr) and t in [0, nt):
//   y[t * ldy + r] = dot(row r of w, activation row t of xq)
// w: nr weight rows of `wtype`, n elements each, w_stride bytes apart.
// xq: nt activation rows from q_quantize_act, xq_stride bytes apart.
// Each weight block is loaded once and used for several tokens (prefill);
// nt == 1 is the decode matvec. Tokens 0..nt_joint-1 are computed jointly,
// in llama.cpp's batch float order (which depends on how many there are);
// each token from nt_joint on is computed exactly as a call with nt == 1
// would compute it, so its result does not depend on the others.
// Single-threaded: the caller splits rows.
void q_matmul(uint32_t wtype, int64_t n, const void *w, size_t w_stride, int nr,
              const void *xq, size_t xq_stride, int nt, int nt_joint, float *y, size_t ldy);

// Weights with 8 rows interleaved ("x8", quant_x8.c): Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0, IQ4_NL, IQ4_XS, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K
// matrices have this second layout (q_x8_layout), which the kernels of some
// builds read faster at one token (q_x8_wanted: the AVX2 ones, where
// gathering 8 rows' bytes into lanes costs as much as the products, and the
// AVX-512 ones for the types it has one-token x8 kernels for); the CPU
// backend repacks such weights once at load. An x8 matrix of `rows` rows
// takes q_x8_bytes: groups of 8 rows, group g at byte 8g · (a row's bytes),
// the last one padded with copies of the last row. Its products are
// q_matmul's, bit for bit.
int q_x8_layout(uint32_t type);
int q_x8_wanted(uint32_t type);
size_t q_x8_bytes(uint32_t type, int64_t rows, int64_t cols);
// Groups [g0, g1) of the x8 copy dst of the rows × cols matrix src (row-major).
void q_x8_pack(uint32_t type, int64_t cols, int64_t rows, int64_t g0, int64_t g1, const void *src, void *dst);
// dst[0..cols) = row r of the x8 matrix w8, dequantized.
void q_x8_dequantize_row(uint32_t type, int64_t cols, const void *w8, int64_t r, float *dst);
// q_matmul over rows [r0, r0 + nr) of the x8 matrix w8 (the matrix's start):
// y[t * ldy + i] = dot(row r0 + i, activation row t).
void q_matmul_x8(uint32_t wtype, int64_t n, const void *w8, int64_t r0, int nr, const void *xq,
                 size_t xq_stride, int nt, int nt_joint, float *y, size_t ldy);

// The sum of the n 8-byte words at p, read as the one-token kernels read
// their weights (each line asked for ahead: quant_impl.h's decode_prefetch):
// what a memory-bandwidth probe times, so that decode's share of it compares
// like with like. Single-threaded: the caller splits the words.
uint64_t q_read_words(const uint64_t *p, size_t n);

// Which SIMD path q_matmul uses on this machine ("avx512-vnni", "avx2", "scalar").
const char *q_simd_name(void);

#endif
