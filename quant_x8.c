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
// Q5_K has qh as 8 such vectors before qs; Q4_0 (144 bytes) and Q8_0 (272)
// d, then qs as 4 and 8 vectors; Q6_K (1680 bytes) ql as 32 vectors, qh as
// 16, the 16 scales as runs of 8 bytes (run s, byte r: the row's
// scales[s]), then d.
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
    static const x8_field q5k[] = {X8_FIELD(block_q5_K, d, 2), X8_FIELD(block_q5_K, dmin, 2), X8_FIELD(block_q5_K, scales, 4),
                                   X8_FIELD(block_q5_K, qh, 4), X8_FIELD(block_q5_K, qs, 4)};
    static const x8_field q6k[] = {X8_FIELD(block_q6_K, ql, 4), X8_FIELD(block_q6_K, qh, 4),
                                   X8_FIELD(block_q6_K, scales, 1), X8_FIELD(block_q6_K, d, 2)};
    static const x8_field q40[] = {X8_FIELD(block_q4_0, d, 2), X8_FIELD(block_q4_0, qs, 4)};
    static const x8_field q80[] = {X8_FIELD(block_q8_0, d, 2), X8_FIELD(block_q8_0, qs, 4)};
    switch (type) {
    case Q_Q4_K: return *f = q4k, 4;
    case Q_Q5_K: return *f = q5k, 5;
    case Q_Q6_K: return *f = q6k, 4;
    case Q_Q4_0: return *f = q40, 2;
    case Q_Q8_0: return *f = q80, 2;
    default: return *f = NULL, 0;
    }
}

int q_x8_layout(uint32_t type) {
    const x8_field *f;
    return x8_fields(type, &f) > 0;
}

int q_x8_wanted(uint32_t type) {
#if defined(Q_AVX2)
    return q_x8_layout(type);
#else
    (void)type;
    return 0;
#endif
}

// Row r's block (ggml's layout) out of the group's block g.
static void x8_block(uint32_t type, const uint8_t *g, int r, uint8_t *b) {
    const x8_field *f;
    const int nf = x8_fields(type, &f);
    for (int j = 0; j < nf; j++)
        for (int i = 0; i < f[j].len; i += f[j].w) memcpy(b + f[j].off + i, g + 8 * (f[j].off + i) + f[j].w * r, f[j].w);
}

void q_x8_pack(uint32_t type, int64_t cols, int64_t rows, int64_t g0, int64_t g1, const void *src, void *dst) {
    const qtype_info *q = qtype_get(type);
    const size_t rb = qtype_row_bytes(type, cols), bb = q->block_bytes;
    const x8_field *f;
    const int nf = x8_fields(type, &f);
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *row[8];  // the group's rows (the last one repeated past the matrix's end)
        for (int r = 0; r < 8; r++) row[r] = (const uint8_t *)src + (size_t)(8 * g + r < rows ? 8 * g + r : rows - 1) * rb;
        uint8_t *d = (uint8_t *)dst + (size_t)(8 * g) * rb;  // written in order
        for (int64_t k = 0; k < cols / q->block; k++)
            for (int j = 0; j < nf; j++) {
                const size_t at = (size_t)k * bb + f[j].off;
#define X8_UNITS(W)                                                        \
    for (int i = 0; i < f[j].len; i += (W))                                \
        for (int r = 0; r < 8; r++, d += (W)) memcpy(d, row[r] + at + i, (W));
                if (f[j].w == 4) X8_UNITS(4)
                else if (f[j].w == 2) X8_UNITS(2)
                else X8_UNITS(1)
#undef X8_UNITS
            }
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

// Builds without x8 kernels for a type (which never pack it: tests come
// here): each row unpacked and multiplied alone (rows are independent: the
// same bits). Should the row's copy not be allocated, its outputs are NaN.
void x8_matmul_unpacked(uint32_t type, int64_t n, const void *w8, int64_t r0, int nr, const void *xq, size_t xs,
                        int nt, int nt_joint, float *y, size_t ldy) {
    const qtype_info *q = qtype_get(type);
    const size_t rb = qtype_row_bytes(type, n), bb = q->block_bytes;
    uint8_t *row = malloc(rb);
    for (int i = 0; i < nr; i++) {
        const int64_t r = r0 + i;
        const uint8_t *g = (const uint8_t *)w8 + (size_t)(r / 8 * 8) * rb;
        if (!row) {
            for (int t = 0; t < nt; t++) y[(size_t)t * ldy + i] = NAN;
            continue;
        }
        for (int64_t k = 0; k < n / q->block; k++) x8_block(type, g + (size_t)k * 8 * bb, (int)(r % 8), row + (size_t)k * bb);
        q_matmul(type, n, row, rb, 1, xq, xs, nt, nt_joint, y + i, ldy);
    }
    free(row);
}
