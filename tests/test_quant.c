// tests/test_quant.c — quant.c against independent references.
//
//   build/tests/test_quant           run the tests (from the repo root; SHARED
//                                    names the shared data, default ../shared)
//   build/tests/test_quant --bench [TYPE|all [ROWSxCOLS]]   kernel speeds (default 8192x2048), no checks
//                                    (of the x8 copies where the CPU backend makes them: "Q4_K x8")
//   build/tests/test_quant --dump    hashes of q_matmul outputs (tests/t_isa.sh)
//
// References: numpy's float16 and a float64 numpy dequantizer written from the
// ggml layouts (tests/ref_quant.py, which checks itself against higher-
// precision copies of the same tensors); hand-derived activation
// quantizations; float64 dot products for q_matmul; and, for Q4_K and Q5_K,
// a re-statement of their float order (the K4 chain) that q_matmul must
// match bit for bit on every path (SIMD or scalar, one token or a tile).
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mapping.h"
#include "quant.h"
#include "threads.h"
#include "util.h"
#include "check.h"

#define PY "/usr/bin/python3"


// p, or "out of memory" and exit 2.
static void *need(void *p) {
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

// 64-byte aligned (SIMD rows), or exit 2.
static void *xmalloc64(size_t n) { return need(aligned_alloc(64, (n + 63) / 64 * 64 + 64)); }

// n bytes in 2 MiB pages where the system has them, as the CPU backend keeps
// its weight copies and as `quill bench`'s probe reads them, or exit 2. In
// 4 KiB pages the read slows more than the matvec does (on an Emerald Rapids
// VM: read-all 20-21 GB/s against 23-25), and their ratio flattered the matvec.
static void *xmap_huge(size_t n) { return need(map_anon(n)); }

static void *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = xmalloc64((size_t)n + 1);
    if (fread(p, 1, (size_t)n, f) != (size_t)n) {
        fclose(f);
        free(p);
        return NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return p;
}

static uint32_t fbits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float bitsf(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static double unif(rng_t *r) { return (double)(rnd(r) >> 11) * 0x1p-53; }
static double gauss(rng_t *r) {
    double u = unif(r) + 1e-300, v = unif(r);
    return sqrt(-2 * log(u)) * cos(6.283185307179586 * v);
}

// ---------------------------------------------------------------- fp16, bf16

// Every half converts to float and back unchanged (NaNs stay NaNs), and the
// float value matches the IEEE formula.
static void test_fp16_exhaustive(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = fp16_to_f32((uint16_t)h);
        const int e = (h >> 10) & 31, m = h & 1023;
        if (e == 31) {
            if (m ? !isnan(f) : !isinf(f)) bad++;
            if (m && !(f32_to_fp16(f) & 0x3ff)) bad++;  // NaN must not become infinity
            continue;
        }
        double want = e ? ldexp(1.0 + m / 1024.0, e - 15) : ldexp(m, -24);
        if (h & 0x8000) want = -want;
        if ((double)f != want || !!signbit(f) != !!(h & 0x8000)) bad++;
        if (f32_to_fp16(f) != h) bad++;
    }
    if (bad) fail("fp16 round trip: %d of 65536 halves wrong", bad);
}

// float -> half rounding against numpy on ties, subnormals, overflow.
static void test_fp16_rounding(const char *dir) {
    char path[512], cmd[1024];
    snprintf(path, sizeof path, "%s/f16.bin", dir);
    snprintf(cmd, sizeof cmd, PY " tests/ref_quant.py f16cases %s", path);
    if (system(cmd) != 0) return fail("'%s' failed", cmd);
    size_t len;
    uint32_t *p = read_file(path, &len);
    if (!p) return fail("cannot read %s", path);
    int bad = 0;
    for (size_t i = 0; i < len / 8; i++) {
        const uint16_t got = f32_to_fp16(bitsf(p[2 * i])), want = (uint16_t)p[2 * i + 1];
        if (got != want && bad++ < 5)
            fail("f32_to_fp16(%a) = 0x%04x, numpy 0x%04x", (double)bitsf(p[2 * i]), got, want);
    }
    if (len / 8 < 1000) fail("too few fp16 cases (%zu)", len / 8);
    free(p);
}

// bf16: hand-derived bit patterns (round to nearest even on the 16 dropped bits).
static void test_bf16(void) {
    static const struct { uint32_t f; uint16_t b; } c[] = {
        {0x3f800000, 0x3f80},  // 1.0
        {0x3f808000, 0x3f80},  // tie, even stays
        {0x3f818000, 0x3f82},  // tie, odd rounds up
        {0x3f808001, 0x3f81},  // above the tie
        {0x3f807fff, 0x3f80},  // below the tie
        {0xbf818000, 0xbf82},  // negative tie
        {0x7f7fffff, 0x7f80},  // max float rounds to infinity
        {0x7f800000, 0x7f80},  // infinity
        {0x00008000, 0x0000},  // subnormal tie to even (zero)
        {0x00018000, 0x0002},  // subnormal tie to even (up)
        {0x7f800001, 0x7fc0},  // signalling NaN becomes quiet
        {0xffc12345, 0xffc1},  // quiet NaN keeps its sign and top payload
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const uint16_t b = f32_to_bf16(bitsf(c[i].f));
        if (b != c[i].b) fail("f32_to_bf16(0x%08x) = 0x%04x, want 0x%04x", c[i].f, b, c[i].b);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = bf16_to_f32((uint16_t)h);
        if (fbits(f) != h << 16) return fail("bf16_to_f32(0x%04x) wrong", h);
        if (!isnan(f) && f32_to_bf16(f) != h) return fail("bf16 round trip 0x%04x", h);
    }
}

// ----------------------------------------------------------- dequantization

// Each fixture row, dequantized here, against ref_quant.py's float64 values.
static void test_dequant(const char *dir, const char *shared) {
    char cmd[1024], path[512];
    snprintf(cmd, sizeof cmd, PY " tests/ref_quant.py fixtures %s %s", dir, shared);
    if (system(cmd) != 0) return fail("'%s' failed (is numpy installed for " PY "?)", cmd);
    snprintf(path, sizeof path, "%s/index.txt", dir);
    FILE *idx = fopen(path, "r");
    if (!idx) return fail("no %s", path);
    char name[128];
    unsigned type, rows;
    long long n;
    int count = 0, types_seen[64] = {0};
    while (fscanf(idx, "%127s %u %lld %u", name, &type, &n, &rows) == 4) {
        size_t rl, fl;
        snprintf(path, sizeof path, "%s/%s.raw", dir, name);
        uint8_t *raw = read_file(path, &rl);
        snprintf(path, sizeof path, "%s/%s.ref", dir, name);
        double *ref = read_file(path, &fl);
        const size_t rb = qtype_row_bytes(type, n);
        if (!raw || !ref || rl != rb * rows || fl != (size_t)n * rows * 8) {
            fail("fixture %s: bad files", name);
            free(raw), free(ref);
            continue;
        }
        float *y = xmalloc64((size_t)n * sizeof(float));
        int bad = 0;
        for (unsigned r = 0; r < rows; r++) {
            q_dequantize_row(type, raw + r * rb, y, n);
            const double *want = ref + (size_t)r * n;
            double scale = 0;
            for (long long i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
            for (long long i = 0; i < n; i++)
                if (fabs(y[i] - want[i]) > 1e-6 * scale + 1e-30 && bad++ < 3)
                    fail("dequant %s row %u [%lld]: %.9g, reference %.9g", name, r, i, y[i], want[i]);
        }
        count++;
        types_seen[type & 63] = 1;
        free(y), free(raw), free(ref);
    }
    fclose(idx);
    static const int need[] = {Q_F32, Q_F16, Q_BF16, Q_Q4_0, Q_Q4_1, Q_Q5_0, Q_Q5_1, Q_Q8_0, Q_Q4_K, Q_Q5_K, Q_Q6_K,
                               Q_Q2_K, Q_Q3_K, Q_IQ4_NL, Q_IQ4_XS, Q_MXFP4};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (!types_seen[need[i]]) fail("no dequantization fixture for type %d", need[i]);
    if (count < 32) fail("only %d dequantization fixtures", count);
}

// --------------------------------------------------- activation quantization

// Decoding of quantized activation rows (layouts from quant.h).
static size_t lane_byte(int lane, int p) { return (size_t)(64 * (p / 4) + 4 * lane + p % 4); }

// q and d of element i of a row of n elements quantized for wtype.
// Q4_K activation records put sub-block s at byte 64 * (2 * (s / 4) + s % 2)
// + 32 * ((s / 2) % 2): vectors hold sub-blocks (0, 2), (1, 3), (4, 6), (5, 7).
static int k4_sub_byte(int s) { return 64 * (2 * (s / 4) + s % 2) + 32 * ((s / 2) % 2); }

// The bsums pair p (Σq of sub-blocks 2p, 2p + 1) of super-block k of a Q4_K row.
static uint32_t act_k4_pair(const uint8_t *xq, int64_t k, int p) {
    uint32_t w;
    memcpy(&w, xq + 320 * k + 288 + 4 * p, 4);
    return w;
}

static int act_q(uint32_t wtype, const uint8_t *xq, int64_t n, int64_t i, float *d) {
    (void)n;
    if (wtype == Q_Q6_K || wtype == Q_Q3_K || wtype == Q_Q2_K) {  // 384-byte records: q[256], c[16], d
        const uint8_t *rec = xq + (i / 256) * 384;
        const int j = (int)(i % 256);
        memcpy(d, rec + 320, 4);
        return (int8_t)rec[lane_byte(j / 16, j % 16)];
    }
    if (wtype == Q_Q4_K || wtype == Q_Q5_K) {  // 320-byte records: q[256] (sub-block s at k4_sub_byte(s)), d at 256
        const uint8_t *rec = xq + (i / 256) * 320;
        const int j = (int)(i % 256);
        memcpy(d, rec + 256, 4);
        return (int8_t)rec[k4_sub_byte(j / 32) + j % 32];
    }
    const uint8_t *unit = xq + (i / 512) * 640;
    const int L = (int)(i % 512) / 32, e = (int)(i % 32);
    memcpy(d, unit + 512 + 4 * L, 4);
    return (int8_t)unit[lane_byte(L, e)];
}

// The extra word of the lane holding element i (Q8_0: int c; else float s).
static int32_t act_wi(const uint8_t *xq, int64_t i) {
    int32_t c;
    memcpy(&c, xq + (i / 512) * 640 + 576 + 4 * ((i % 512) / 32), 4);
    return c;
}
static float act_ws(const uint8_t *xq, int64_t i) {
    float s;
    memcpy(&s, xq + (i / 512) * 640 + 576 + 4 * ((i % 512) / 32), 4);
    return s;
}

static double act_value(uint32_t wtype, const uint8_t *xq, int64_t n, int64_t i) {
    float f, d;
    switch (wtype) {
    case Q_F32: case Q_F16: memcpy(&f, xq + 4 * i, 4); return f;
    case Q_BF16: return bf16_to_f32((uint16_t)(xq[2 * i] | xq[2 * i + 1] << 8));
    default: { int q = act_q(wtype, xq, n, i, &d); return (double)q * d; }
    }
}

// Block 0, x = 1..32: amax 32, d = 32/127 -> fp16 0x3408 = 0.251953125
// (1032/4096); q = rint(x * 127/32) = rint(3.96875 x), e.g. 1->4,
// 3->11.90625->12, 16->63.5->64 (tie, even), 20->79.375->79, 32->127;
// Σq = 2096, s = fp16(32/127 * 2096 = 528.13) = 528.
// Block 1, x = {127, 2.5, -2.5, 0.5, 1.5, -0.5, 3.5, 0...}: amax 127,
// 127/amax = 1, so q = rint(x) with ties to even: {127, 2, -2, 0, 2, 0, 4}
// (roundf would give 3, -3, 1, 2, -1, 4), d = 1, s = Σq = 133.
// Block 2, x = {1, 19 x 31}: d = 19/127 = 0.1496063 (fp16 0.149658203125),
// q = {rint(6.684) = 7, 127...}, Σq = 3944, s = fp16(0.1496063 * 3944 =
// 590.05) = 590 (with the fp16-rounded d it would be 590.25 -> 590.5).
// Q8_0 rows store c = -128 Σq instead of s.
static void test_act_q8_0_q8_1(void) {
    float x[96] = {0};
    for (int j = 0; j < 32; j++) x[j] = (float)(j + 1);
    const float x2[7] = {127, 2.5f, -2.5f, 0.5f, 1.5f, -0.5f, 3.5f};
    memcpy(x + 32, x2, sizeof x2);
    for (int j = 64; j < 96; j++) x[j] = j == 64 ? 1.0f : 19.0f;
    const struct { int j, q; } want[] = {{0, 4}, {2, 12}, {15, 64}, {19, 79}, {31, 127}, {32, 127}, {33, 2},
                                         {34, -2}, {35, 0}, {36, 2}, {37, 0}, {38, 4}, {39, 0}, {64, 7}, {95, 127}};
    const float dwant[3] = {0.251953125f, 1.0f, 0.149658203125f}, swant[3] = {528, 133, 590};
    const int sums[3] = {2096, 133, 3944};
    for (int k = 0; k < 2; k++) {
        const uint32_t wt = k ? Q_Q4_1 : Q_Q8_0;  // Q8_1 / Q8_0 activations
        const char *name = k ? "Q8_1" : "Q8_0";
        uint8_t *xq = xmalloc64(q_act_row_bytes(wt, 96));
        q_quantize_act(wt, x, xq, 96);
        float d;
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const int q = act_q(wt, xq, 96, want[i].j, &d);
            if (q != want[i].q) fail("%s: x[%d]=%g -> q %d, want %d", name, want[i].j, x[want[i].j], q, want[i].q);
        }
        for (int b = 0; b < 3; b++) {
            act_q(wt, xq, 96, 32 * b, &d);
            if (d != dwant[b]) fail("%s block %d: d = %.9g, want %.9g", name, b, d, dwant[b]);
            if (k && act_ws(xq, 32 * b) != swant[b]) fail("Q8_1 block %d: s = %g, want %g", b, act_ws(xq, 32 * b), swant[b]);
            if (!k && act_wi(xq, 32 * b) != -128 * sums[b]) fail("Q8_0 block %d: c = %d, want %d", b, act_wi(xq, 32 * b), -128 * sums[b]);
        }
        free(xq);
    }
}

// Q8_K. Block 0: x[5] = 254 is the largest magnitude, iscale = -127/254 =
// -0.5, d = -2, q = rint(-x/2): 1 -> -0 (0), 3 -> -2 (tie even), 5 -> -2,
// -1 -> 0, 254 -> -127, -7 -> 4 (3.5 tie even). Block 1: x[0] = -4 and
// x[1] = 4 tie in magnitude; the first (-4) wins: iscale = 31.75,
// q = {-127, 127}, x[44] = 1 -> rint(31.75) = 32, d = 1/31.75.
// Block 2: all zero -> d = 0, q = 0.
// Group sums (bsums): block 0 group 0 = 0-2-2+0-127 = -131, group 1 = 4;
// block 1 group 0 = 0, group 2 = 32. Q6_K rows store c = -32 * bsums:
// 4192, -128, 0, -1024; Q3_K rows -4 * bsums, Q2_K rows bsums. Q4_K rows
// store int16 pairs of Σq per 32 (sub-blocks 2p, 2p + 1): block 0 pair 0 =
// (-127, 0), block 1 pair 0 = (0, 32), pair 1 = (0, 0).
static void test_act_q8_K(void) {
    float x[768] = {0};
    x[0] = 1, x[1] = 3, x[2] = 5, x[3] = -1, x[5] = 254, x[17] = -7;
    x[256] = -4, x[257] = 4, x[300] = 1;
    const struct { int j, q; } want[] = {{0, 0}, {1, -2}, {2, -2}, {3, 0}, {5, -127}, {17, 4}, {4, 0},
                                         {256, -127}, {257, 127}, {300, 32}, {512, 0}, {767, 0}};
    static const uint32_t wt[4] = {Q_Q6_K, Q_Q3_K, Q_Q2_K, Q_Q4_K};
    for (int k = 0; k < 4; k++) {
        uint8_t *xq = xmalloc64(q_act_row_bytes(wt[k], 768));
        q_quantize_act(wt[k], x, xq, 768);
        const char *name = qtype_get(wt[k])->name;
        float d;
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const int q = act_q(wt[k], xq, 768, want[i].j, &d);
            if (q != want[i].q) fail("Q8_K for %s: x[%d]=%g -> q %d, want %d", name, want[i].j, x[want[i].j], q, want[i].q);
        }
        const float dwant[4] = {-2.0f, 1.0f / 31.75f, 1.0f / 31.75f, 0.0f};
        const int dat[4] = {0, 256, 300, 767};
        for (int i = 0; i < 4; i++) {
            act_q(wt[k], xq, 768, dat[i], &d);
            if (d != dwant[i]) fail("Q8_K for %s: d at %d = %g, want %g", name, dat[i], d, dwant[i]);
        }
        if (wt[k] != Q_Q4_K) {  // c = mul * bsums of groups (0, 0), (0, 1), (0, 2), (1, 0), (1, 2), (2, 0)
            const int mul = wt[k] == Q_Q6_K ? -32 : wt[k] == Q_Q3_K ? -4 : 1, bsums[6] = {-131, 4, 0, 0, 32, 0};
            const int at[6][2] = {{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 2}, {2, 0}};
            for (int i = 0; i < 6; i++) {
                int32_t c;
                memcpy(&c, xq + 384 * at[i][0] + 256 + 4 * at[i][1], 4);
                if (c != mul * bsums[i])
                    fail("Q8_K for %s: c of block %d group %d = %d, want %d", name, at[i][0], at[i][1], c, mul * bsums[i]);
            }
        } else {  // int16 pairs (Σq of sub-blocks 2p, 2p + 1), per super-block
            const uint32_t want_w[4] = {0xff81u, 0x200000u, 0, 0};
            const int at[4][2] = {{0, 0}, {1, 0}, {1, 1}, {2, 0}};
            for (int i = 0; i < 4; i++)
                if (act_k4_pair(xq, at[i][0], at[i][1]) != want_w[i])
                    fail("Q8_K for Q4_K: bsums pair %d of block %d = %#x, want %#x", at[i][1], at[i][0],
                         act_k4_pair(xq, at[i][0], at[i][1]), want_w[i]);
        }
        free(xq);
    }
}

// Non-finite activations (a broken model's NaN or inf) are defined: the
// block holding one quantizes to q = 0 with d = NaN, other blocks as usual,
// and a product with the row is NaN (the fuzzed GGUF that first showed this
// drove act_q8_01 into signed overflow; make test-asan runs this under UBSan).
static void test_act_nonfinite(void) {
    static const uint32_t types[] = {Q_Q8_0, Q_Q4_1, Q_Q4_K, Q_Q5_K, Q_Q6_K};
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (int b = 0; b < 3; b++) {
            const uint32_t wt = types[t];
            const int64_t n = 512, blk = qtype_get(wt)->block == 256 ? 256 : 32;
            float x[512];
            for (int j = 0; j < n; j++) x[j] = (float)(j % 7) - 3.0f;
            x[blk + 3] = bad[b];  // the second block
            uint8_t *xq = xmalloc64(q_act_row_bytes(wt, n));
            q_quantize_act(wt, x, xq, n);
            float d0, d1;
            const int q0 = act_q(wt, xq, n, 6, &d0), q1 = act_q(wt, xq, n, blk + 6, &d1);
            if (!isfinite(d0) || q0 == 0 || !isnan(d1) || q1 != 0)
                fail("%s activations with %g: first block d %g q %d (want finite, != 0), second d %g q %d (want NaN, 0)",
                     qtype_get(wt)->name, bad[b], d0, q0, d1, q1);
            const size_t rb = qtype_row_bytes(wt, n);
            uint8_t *w = xmalloc64(rb);
            for (size_t i = 0; i < rb; i++) w[i] = (uint8_t)(i * 37 % 251 % 60);  // small finite scales
            float y = 0;
            q_matmul(wt, n, w, rb, 1, xq, q_act_row_bytes(wt, n), 1, 0, &y, 1);
            if (!isnan(y)) fail("%s: a product with a non-finite activation row is %g, want NaN", qtype_get(wt)->name, y);
            free(w);
            free(xq);
        }
}

// F16 rows hold fp16-rounded floats, BF16 rows bf16 bits.
static void test_act_float(void) {
    float x[3] = {1.0f + 0x1p-11f, 1.0f + 0x1p-11f + 0x1p-20f, 1.0f + 0x1p-8f};
    uint8_t *xq = xmalloc64(q_act_row_bytes(Q_F16, 3));
    q_quantize_act(Q_F16, x, xq, 3);
    if (act_value(Q_F16, xq, 3, 0) != 1.0 || act_value(Q_F16, xq, 3, 1) != 1.0 + 0x1p-10)
        fail("F16 activations not rounded to nearest even");
    q_quantize_act(Q_BF16, x, xq, 3);
    if (act_value(Q_BF16, xq, 3, 2) != 1.0 || act_value(Q_BF16, xq, 3, 1) != 1.0)
        fail("BF16 activations not rounded to nearest even");
    free(xq);
}

// ------------------------------------------------------------------ matmul

// A random half in ±[lo, hi).
static uint16_t rand_half(rng_t *r, double lo, double hi) {
    const double v = lo + (hi - lo) * unif(r);
    return f32_to_fp16((float)((rnd(r) & 1) ? v : -v));
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

// Random valid weight rows: random quant bits, moderate scales (d offsets
// from the ggml block layouts).
static void random_row(rng_t *r, uint32_t type, uint8_t *row, int64_t n) {
    const qtype_info *q = qtype_get(type);
    const int64_t nb = n / q->block;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *blk = row + b * q->block_bytes;
        if (type == Q_F32) {
            const float f = (float)gauss(r);
            memcpy(blk, &f, 4);
            continue;
        }
        if (type == Q_F16) { put16(blk, f32_to_fp16((float)gauss(r))); continue; }
        if (type == Q_BF16) { put16(blk, f32_to_bf16((float)gauss(r))); continue; }
        for (size_t i = 0; i < q->block_bytes; i++) blk[i] = (uint8_t)rnd(r);
        if (type == Q_Q6_K) { put16(blk + 208, rand_half(r, 1e-3, 2e-2)); continue; }
        if (type == Q_Q3_K) { put16(blk + 108, rand_half(r, 1e-3, 2e-2)); continue; }
        if (type == Q_Q2_K) { put16(blk + 80, rand_half(r, 1e-3, 5e-2)), put16(blk + 82, rand_half(r, 1e-3, 5e-2)); continue; }
        if (type == Q_MXFP4) { blk[0] = (uint8_t)(118 + rnd(r) % 8); continue; }  // e: scales 2^-10 .. 2^-3
        put16(blk, rand_half(r, 1e-3, 5e-2));
        if (type == Q_Q4_1 || type == Q_Q5_1 || type == Q_Q4_K || type == Q_Q5_K) put16(blk + 2, rand_half(r, 1e-3, 5e-2));
    }
}

typedef struct {
    uint32_t type;
    int64_t n;
    int nr, nt;
} mm_case;

// Returns the worst normalized errors of one case:
//   e_exact: |y - Σ w·xq| / Σ|w·xq| with xq the quantized activations (float64);
//            only the kernel's float rounding remains.
//   e_orig:  |y - Σ w·x| / (‖w‖‖x‖) against the original float activations.
//   e_tile:  |y(nt tokens at once) - y(one token a call)| / Σ|w·xq|.
static void run_case(rng_t *r, const mm_case *c, double err[3]) {
    const int64_t n = c->n;
    const int nr = c->nr, nt = c->nt;
    const size_t rb = qtype_row_bytes(c->type, n), ws = rb + 64;
    const size_t xs = q_act_row_bytes(c->type, n) + 64, ldy = (size_t)nr + 3;
    uint8_t *w = xmalloc64(ws * nr), *xq = xmalloc64(xs * nt);
    float *x = xmalloc64(sizeof(float) * n * nt), *wf = xmalloc64(sizeof(float) * n * nr);
    float *y = xmalloc64(sizeof(float) * ldy * nt), *y1 = xmalloc64(sizeof(float) * ldy * nt);
    for (int i = 0; i < nr; i++) {
        random_row(r, c->type, w + i * ws, n);
        q_dequantize_row(c->type, w + i * ws, wf + (size_t)i * n, n);
    }
    for (int t = 0; t < nt; t++) {
        float *xt = x + (size_t)t * n;
        const double amp = t % 3 == 2 ? 1e-3 : 1.0;  // one token in three is tiny
        for (int64_t i = 0; i < n; i++) xt[i] = (float)(amp * gauss(r) * (i % 97 == 5 ? 20 : 1));
        if (t == 3) memset(xt, 0, sizeof(float) * n);  // an all-zero token
        q_quantize_act(c->type, xt, xq + t * xs, n);
    }
    q_matmul(c->type, n, w, ws, nr, xq, xs, nt, nt, y, ldy);
    for (int t = 0; t < nt; t++) q_matmul(c->type, n, w, ws, nr, xq + t * xs, xs, 1, 1, y1 + t * ldy, ldy);
    // tokens after the joint ones must equal one-token calls bit for bit
    // (batched decode and speculative verification rely on it): half of the
    // tokens joint, then none
    float *y2 = xmalloc64(sizeof(float) * ldy * nt);
    for (int joint = nt / 2;; joint = 0) {
        q_matmul(c->type, n, w, ws, nr, xq, xs, nt, joint, y2, ldy);
        for (int t = joint; t < nt; t++)
            if (memcmp(y2 + t * ldy, y1 + t * ldy, sizeof(float) * nr))
                fail("matmul %s n=%lld nr=%d nt=%d: token %d after %d joint ones differs from a one-token call",
                     qtype_get(c->type)->name, (long long)n, nr, nt, t, joint);
        if (joint == 0) break;
    }
    free(y2);
    err[0] = err[1] = err[2] = 0;
    const int q81 = c->type == Q_Q4_1 || c->type == Q_Q5_1;
    for (int t = 0; t < nt; t++) {
        const uint8_t *xt = xq + t * xs;
        for (int i = 0; i < nr; i++) {
            const float *wi = wf + (size_t)i * n;
            double exact = 0, mag = 0, orig = 0, ww = 0, xx = 0;
            for (int64_t k = 0; k < n; k++) {
                const double a = act_value(c->type, xt, n, k), p = (double)wi[k] * a;
                exact += p, mag += fabs(p);
                orig += (double)wi[k] * x[(size_t)t * n + k];
                ww += (double)wi[k] * wi[k], xx += (double)x[(size_t)t * n + k] * x[(size_t)t * n + k];
            }
            if (q81) {  // the kernel takes m·Σx from s = fp16(d·Σq): use the same s
                for (int64_t b = 0; b < n / 32; b++) {
                    float m, d;
                    uint16_t mh;
                    memcpy(&mh, w + i * ws + b * qtype_get(c->type)->block_bytes + 2, 2);
                    m = fp16_to_f32(mh);
                    double sq = 0;
                    for (int k = 0; k < 32; k++) sq += act_q(c->type, xt, n, b * 32 + k, &d);
                    exact += (double)m * (act_ws(xt, b * 32) - (double)d * sq);
                    mag += fabs((double)m * act_ws(xt, b * 32));
                }
            }
            const double yv = y[(size_t)t * ldy + i];
            if (mag > 0) err[0] = fmax(err[0], fabs(yv - exact) / mag);
            if (ww * xx > 0) err[1] = fmax(err[1], fabs(yv - orig) / sqrt(ww * xx));
            if (mag > 0) err[2] = fmax(err[2], fabs(yv - y1[(size_t)t * ldy + i]) / mag);
            if (mag == 0 && yv != 0) err[0] = 1;
        }
    }
    free(w), free(xq), free(x), free(wf), free(y), free(y1);
}

static void test_matmul(void) {
    static const uint32_t types[] = {Q_F32, Q_F16, Q_BF16, Q_Q8_0, Q_Q4_0, Q_Q5_0, Q_Q4_1, Q_Q5_1, Q_Q4_K, Q_Q5_K, Q_Q6_K,
                                     Q_Q2_K, Q_Q3_K, Q_IQ4_NL, Q_IQ4_XS, Q_MXFP4};
    static const int shapes[][2] = {{1, 1}, {3, 2}, {7, 5}, {3, 8}, {5, 9}, {2, 17}, {37, 3}};
    rng_t r = {0x9E3779B97F4A7C15ull};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        const int64_t blk = qtype_get(type)->block;
        int64_t sizes[4];
        if (blk == 256) sizes[0] = 256, sizes[1] = 768, sizes[2] = 2304, sizes[3] = 4096;
        else if (blk == 32) sizes[0] = 32, sizes[1] = 96, sizes[2] = 544, sizes[3] = 2560;
        else sizes[0] = 1, sizes[1] = 7, sizes[2] = 172, sizes[3] = 2100;
        // tolerances: float rounding of the kernel; activation rounding vs the original x
        const double tol_exact = 2e-6, tol_tile = 2e-6;
        const double tol_orig = type == Q_F32 ? 1e-6 : type == Q_F16 ? 2e-3 : type == Q_BF16 ? 1e-2 : 2e-2;
        double worst[3] = {0, 0, 0};
        for (int si = 0; si < 4; si++)
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
                const mm_case c = {type, sizes[si], shapes[k][0], shapes[k][1]};
                if (c.n >= 2000 && c.nr * c.nt > 40) continue;  // keep the run short
                double e[3];
                run_case(&r, &c, e);
                for (int j = 0; j < 3; j++) worst[j] = fmax(worst[j], e[j]);
                if (e[0] > tol_exact || e[1] > tol_orig || e[2] > tol_tile)
                    fail("matmul %s n=%lld nr=%d nt=%d: exact %.2e (tol %.0e) orig %.2e (tol %.0e) tile %.2e",
                         qtype_get(type)->name, (long long)c.n, c.nr, c.nt, e[0], tol_exact, e[1], tol_orig, e[2]);
            }
        printf("matmul %-5s worst errors: vs quantized x %.1e, vs float x %.1e, tile vs single %.1e\n",
               qtype_get(type)->name, worst[0], worst[1], worst[2]);
    }
}

// The 6-bit scales and mins of a Q4_K/Q5_K super-block, from its 12 packed
// bytes (ggml's get_scale_min_k4, restated).
static void ref_k_scales(const uint8_t *scb, int sc[8], int mn[8]) {
    for (int s = 0; s < 8; s++) {
        sc[s] = s < 4 ? scb[s] & 63 : (scb[s + 4] & 15) | (scb[s - 4] >> 6) << 4;
        mn[s] = s < 4 ? scb[s + 4] & 63 : (scb[s + 4] >> 4) | (scb[s] >> 6) << 4;
    }
}

// The K4 float chain of Q4_K and Q5_K rows (first llama.cpp's order for
// Q4_K, that of its repacked ggml_gemv/gemm_q4_K_8x8_q8_K), one ggml block
// row (Q4_K: 144-byte blocks of fp16 d, dmin, 12 packed 6-bit scale/min
// bytes, qs[128]; Q5_K: 176 bytes, qh[32] before qs). Per super-block the
// exact integers I = Σ_s sc*Σqx and M = Σ_s mn*Σx enter two float chains,
// acc = fma(I, d_x * d, acc) and accm = fma(M, d_x * dmin, accm), once per
// super-block (one token alone, or a batch's tokens after its last full
// group of 4) or once per 64 elements (gemm); the result is acc - accm.
typedef float (*ref_dot_fn)(uint32_t type, const uint8_t *w, const uint8_t *xq, int64_t n, int gemm);

static float ref_k4_dot(uint32_t type, const uint8_t *w, const uint8_t *xq, int64_t n, int gemm) {
    const int q5 = type == Q_Q5_K, bb = q5 ? 176 : 144;
    float acc = 0.0f, accm = 0.0f;
    for (int64_t k = 0; k < n / 256; k++) {
        const uint8_t *b = w + bb * k, *scb = b + 4, *qh = b + 16, *qs = b + (q5 ? 48 : 16);
        uint16_t dh, mh;
        memcpy(&dh, b, 2), memcpy(&mh, b + 2, 2);
        int sc[8], mn[8], a[256];
        ref_k_scales(scb, sc, mn);
        float dx = 0.0f;
        for (int e = 0; e < 256; e++) a[e] = act_q(type, xq, n, 256 * k + e, &dx);
        const float d = dx * fp16_to_f32(dh), dmin = dx * fp16_to_f32(mh);
        int32_t isum = 0, imin = 0;
        for (int s = 0; s < 8; s++) {
            for (int l = 0; l < 32; l++) {
                const int q = ((qs[32 * (s / 2) + l] >> (4 * (s % 2))) & 15) + (q5 ? 16 * ((qh[l] >> s) & 1) : 0);
                isum += sc[s] * q * a[32 * s + l];
                imin += mn[s] * a[32 * s + l];
            }
            if (s % 2 == 1 && (gemm || s == 7)) {
                acc = fmaf((float)isum, d, acc);
                accm = fmaf((float)imin, dmin, accm);
                isum = imin = 0;
            }
        }
    }
    return acc - accm;
}

// The x8 copy (quant.h) of nr rows ws bytes apart; its rows dequantize as
// the originals do, bit for bit.
static uint8_t *x8_copy(uint32_t type, const uint8_t *w, size_t ws, int nr, int64_t n) {
    const size_t rb = qtype_row_bytes(type, n);
    uint8_t *dense = xmalloc64(rb * nr), *w8 = xmalloc64(q_x8_bytes(type, nr, n));
    for (int i = 0; i < nr; i++) memcpy(dense + i * rb, w + i * ws, rb);
    q_x8_pack(type, n, nr, 0, (nr + 7) / 8, dense, w8);
    float *a = xmalloc64(sizeof(float) * n), *b = xmalloc64(sizeof(float) * n);
    for (int i = 0; i < nr; i++) {
        q_dequantize_row(type, dense + i * rb, a, n);
        q_x8_dequantize_row(type, n, w8, i, b);
        if (memcmp(a, b, sizeof(float) * n)) fail("%s x8 layout: row %d of %d dequantizes differently", qtype_get(type)->name, i, nr);
    }
    free(dense), free(a), free(b);
    return w8;
}

// q_matmul's products must equal ref bit for bit (greedy outputs on near-tied
// logits depend on it) for every (rows, tokens) shape, with row counts around
// the kernels' 8- and 16-row groups and token counts that exercise every tile
// size. Tokens: gaussian, one zero row (t == 3) and tiny ones (t % 3 == 2).
static void check_order(uint32_t type, const int (*shapes)[2], size_t n_shapes, uint64_t seed,
                        ref_dot_fn ref) {
    static const int64_t sizes[] = {256, 768, 4096};
    rng_t r = {seed};
    int checked = 0, bad = 0;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++)
        for (size_t k = 0; k < n_shapes; k++) {
            const int64_t n = sizes[si];
            const int nr = shapes[k][0], nt = shapes[k][1];
            const size_t ws = qtype_row_bytes(type, n) + 32, xs = q_act_row_bytes(type, n) + 64;
            uint8_t *w = xmalloc64(ws * nr), *xq = xmalloc64(xs * nt);
            float *x = xmalloc64(sizeof(float) * n), *y = xmalloc64(sizeof(float) * nr * nt);
            for (int i = 0; i < nr; i++) random_row(&r, type, w + i * ws, n);
            for (int t = 0; t < nt; t++) {
                const double amp = t % 3 == 2 ? 1e-3 : 1.0;
                for (int64_t i = 0; i < n; i++) x[i] = t == 3 ? 0.0f : (float)(amp * gauss(&r));
                q_quantize_act(type, x, xq + t * xs, n);
            }
            // ggml's rows, then (q_x8_layout types) the x8 copy: all rows and parts starting inside a group
            uint8_t *w8 = q_x8_layout(type) ? x8_copy(type, w, ws, nr, n) : NULL;
            const int parts[][2] = {{0, nr}, {0, nr}, {nr / 2, nr - nr / 2}, {nr - 1, 1}, {1, nr - 1}};
            for (int p = 0; p < (w8 ? 5 : 1) && parts[p][1] > 0; p++) {
                const int r0 = parts[p][0], cnt = parts[p][1];
                memset(y, 0xff, sizeof(float) * nr * nt);
                if (p == 0) q_matmul(type, n, w, ws, nr, xq, xs, nt, nt, y, (size_t)nr);
                else q_matmul_x8(type, n, w8, r0, cnt, xq, xs, nt, nt, y, (size_t)nr);
                for (int t = 0; t < nt; t++)
                    for (int i = 0; i < cnt; i++, checked++) {
                        const int gemm = t < nt - nt % 4;
                        const float want = ref(type, w + (r0 + i) * ws, xq + t * xs, n, gemm), got = y[(size_t)t * nr + i];
                        if (fbits(got) != fbits(want) && bad++ < 3)
                            fail("%s order%s n=%lld nr=%d nt=%d row %d token %d: %a, the reference order gives %a",
                                 qtype_get(type)->name, p ? " (x8 layout)" : "", (long long)n, nr, nt, r0 + i, t, got, want);
                    }
            }
            free(w), free(w8), free(xq), free(x), free(y);
        }
    if (bad) fail("%s order: %d of %d products differ from the reference float order", qtype_get(type)->name, bad, checked);
    printf("%s float order (%s): %d products bit-identical to the reference's\n", qtype_get(type)->name,
           q_simd_name(), checked - bad);
}

// Q4_K and Q5_K: one token (the decode kernel, 8 rows at a time) and batches
// whose full groups of 4 tokens take the gemm order and the rest the
// one-token order.
static void test_k4_order(void) {
    static const int shapes[][2] = {{1, 1}, {8, 1}, {13, 1}, {16, 1}, {37, 1}, {17, 3}, {9, 4}, {5, 8}, {33, 13}, {3, 7}};
    check_order(Q_Q4_K, shapes, sizeof shapes / sizeof shapes[0], 0x4B4B4B4Bull, ref_k4_dot);
    check_order(Q_Q5_K, shapes, sizeof shapes / sizeof shapes[0], 0x5EED5EED5ull, ref_k4_dot);
}

// Every x8 type (quant.h): the interleaved copy's products equal q_matmul's
// on ggml's rows bit for bit (the AVX2 build's x8 kernels; elsewhere an
// unpacking path), over row ranges that start and end inside groups, unit
// tails, K chunks, joint and lone tokens; its rows dequantize the same.
static void test_x8(void) {
    static const uint32_t types[] = {Q_Q4_0, Q_Q4_1, Q_Q5_0, Q_Q5_1, Q_Q8_0, Q_IQ4_NL, Q_IQ4_XS, Q_MXFP4, Q_Q6_K, Q_Q3_K, Q_Q2_K, Q_Q4_K, Q_Q5_K};
    // (77 rows: more than the groups that unpacked products take at a time)
    static const int shapes[][2] = {{1, 1}, {8, 1}, {13, 1}, {37, 1}, {17, 3}, {9, 4}, {5, 8}, {33, 13}, {20, 17}, {77, 2}};
    rng_t r = {0x8888ull};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        const int64_t sizes[] = {256, 768, 4096, qtype_get(type)->block == 32 ? 4640 : 2816};
        int checked = 0, bad = 0;
        for (int si = 0; si < 4; si++)
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
                const int64_t n = sizes[si];
                const int nr = shapes[k][0], nt = shapes[k][1];
                const size_t rb = qtype_row_bytes(type, n), xs = q_act_row_bytes(type, n);
                uint8_t *w = xmalloc64(rb * nr), *xq = xmalloc64(xs * nt);
                float *x = xmalloc64(sizeof(float) * n), *y = xmalloc64(sizeof(float) * nr * nt),
                      *y8 = xmalloc64(sizeof(float) * nr * nt);
                for (int i = 0; i < nr; i++) random_row(&r, type, w + i * rb, n);
                for (int t = 0; t < nt; t++) {
                    for (int64_t i = 0; i < n; i++) x[i] = t == 3 ? 0.0f : (float)gauss(&r);
                    q_quantize_act(type, x, xq + t * xs, n);
                }
                uint8_t *w8 = x8_copy(type, w, rb, nr, n);
                const int parts[][2] = {{0, nr}, {nr / 2, nr - nr / 2}, {nr - 1, 1}, {1, nr - 1}};
                for (int joint = nt;; joint = joint > 1 ? joint / 2 : 0) {
                    q_matmul(type, n, w, rb, nr, xq, xs, nt, joint, y, nr);
                    for (int p = 0; p < 4 && parts[p][1] > 0; p++) {
                        memset(y8, 0xff, sizeof(float) * nr * nt);
                        q_matmul_x8(type, n, w8, parts[p][0], parts[p][1], xq, xs, nt, joint, y8, nr);
                        for (int t = 0; t < nt; t++)
                            for (int i = 0; i < parts[p][1]; i++, checked++)
                                if (fbits(y8[t * nr + i]) != fbits(y[t * nr + parts[p][0] + i]) && bad++ < 3)
                                    fail("%s x8 n=%lld rows %d..%d of %d, %d tokens (%d joint), row %d token %d: %a, q_matmul %a",
                                         qtype_get(type)->name, (long long)n, parts[p][0], parts[p][0] + parts[p][1] - 1, nr,
                                         nt, joint, parts[p][0] + i, t, y8[t * nr + i], y[t * nr + parts[p][0] + i]);
                    }
                    if (joint == 0) break;
                }
                free(w), free(w8), free(xq), free(x), free(y), free(y8);
            }
        printf("%s x8 layout (%s): %d products bit-identical to q_matmul's\n", qtype_get(type)->name, q_simd_name(),
               checked - bad);
    }
}

// ------------------------------------------------------------------- bench

// Single-thread speeds: the decode matvec over weights far larger than the
// last-level cache (BENCH_MIB of 8192 x 2048 matrices, visited in turn, as a
// decode step visits a model's matrices: GB/s of weights streamed from DRAM),
// the same on one matrix that stays in cache, and on its first rows that fit
// in L2 (L2_KIB; the best of many calls: what the kernel computes when memory
// keeps up, which a core must exceed to keep up with its share of the
// memory's bandwidth), a 64-token product called as
// cpu.c does (64-row slices), and activation quantization. Then the decode
// matvec on every core. Each DRAM figure has its limit beside it: the same
// bytes summed as `quill bench`'s probe sums them (q_read_words), on one
// thread and on every core, right after the matvec (this machine's bandwidth
// may change from one minute to the next). Best of several runs: the machine
// may be shared.
#define BENCH_MIB 512
#define L2_KIB 768
#define READ_CHUNK ((int64_t)1 << 17)  // the fewest words a thread claims: 1 MiB

static double read_gbs(const uint8_t *p, size_t bytes) {
    double best = 0;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = now_sec();
        sink += q_read_words((const uint64_t *)p, bytes / 8);
        best = fmax(best, bytes / (now_sec() - t0) / 1e9);
    }
    return best;
}

// The same on every thread of the pool, one pass.
typedef struct {
    const uint64_t *p;
    _Atomic uint64_t sum;
} read_job;

static void read_part(void *ctx, int64_t w0, int64_t w1) {
    read_job *j = ctx;
    atomic_fetch_add(&j->sum, q_read_words(j->p + w0, (size_t)(w1 - w0)));
}

static double read_all_gbs(tpool *pool, const uint8_t *p, size_t bytes) {
    read_job j = {(const uint64_t *)p, 0};
    const double t0 = now_sec();
    tp_for(pool, (int64_t)(bytes / 8), READ_CHUNK, READ_CHUNK, read_part, &j);
    return bytes / (now_sec() - t0) / 1e9;
}

// Rows [r0, r0 + nr) of the matrix at w against nt tokens (all joint), as
// the CPU backend multiplies them: through its x8 copy (x8) where this
// build's kernels want one (q_x8_wanted), else ggml's rows rb bytes apart.
static void bench_mm(uint32_t type, int x8, int64_t n, const uint8_t *w, size_t rb, int r0, int nr, const uint8_t *xq,
                     size_t xs, int nt, float *y, size_t ldy) {
    if (x8) q_matmul_x8(type, n, w, r0, nr, xq, xs, nt, nt, y, ldy);
    else q_matmul(type, n, w + (size_t)r0 * rb, rb, nr, xq, xs, nt, nt, y, ldy);
}

// The decode matvec as cpu.c runs it on all cores: each matrix's rows
// claimed by the pool's threads as they go (tp_for), 16 at a time or more.
typedef struct {
    uint32_t type;
    int x8;
    int64_t n;
    const uint8_t *w, *xq;
    size_t rb;
    float *y;
} mv_job;

static void mv_part(void *ctx, int64_t r0, int64_t r1) {
    const mv_job *j = ctx;
    bench_mm(j->type, j->x8, j->n, j->w, j->rb, (int)r0, (int)(r1 - r0), j->xq, 0, 1, j->y + r0, 0);
}

static int bench(const char *only, int rows, int64_t n) {
    static const uint32_t types[] = {Q_Q4_K, Q_Q5_K, Q_Q6_K, Q_Q8_0, Q_Q4_0, Q_Q5_0, Q_Q4_1, Q_Q5_1, Q_F16, Q_BF16, Q_F32,
                                     Q_Q2_K, Q_Q3_K, Q_IQ4_NL, Q_IQ4_XS, Q_MXFP4};
    const int ntok = 64;
    rng_t r = {42};
    size_t known = 0;
    while (only && known < sizeof types / sizeof types[0] && strcmp(only, qtype_get(types[known])->name)) known++;
    if (known == sizeof types / sizeof types[0]) {
        fprintf(stderr, "test_quant: no weight type '%s' to bench\n", only);
        return 2;
    }
    const int ncpu = (int)sysconf(_SC_NPROCESSORS_ONLN);
    tpool *pool = tp_create(ncpu);
    if (!pool) {
        fprintf(stderr, "test_quant: cannot start %d threads\n", ncpu);
        return 2;
    }
    printf("q_matmul, %s; weights %d x %lld (%d MiB of them for DRAM); one thread, \"all\": %d; best of 3\n",
           q_simd_name(), rows, (long long)n, BENCH_MIB, ncpu);
    printf("%-8s %14s %14s %13s %9s %16s %16s %18s %16s\n", "type", "DRAM matvec", "DRAM read", "cached GB/s", "L2 GB/s",
           "64-token GMAC/s", "quantize ns/el", "DRAM matvec, all", "DRAM read, all");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        if (only && strcmp(only, qtype_get(type)->name)) continue;
        const size_t rb = qtype_row_bytes(type, n), xs = q_act_row_bytes(type, n), mb = rb * rows;
        const int nmat = (int)(((size_t)BENCH_MIB << 20) / mb) + 1;
        uint8_t *w = xmap_huge(mb * nmat), *xq = xmalloc64(xs * ntok);
        float *x = xmalloc64(sizeof(float) * n * ntok), *y = xmalloc64(sizeof(float) * rows * ntok);
        for (int i = 0; i < rows; i++) random_row(&r, type, w + i * rb, n);
        const int x8 = q_x8_wanted(type);  // the matrices as the CPU backend keeps them
        if (x8) {
            uint8_t *w8 = xmap_huge(mb * nmat);
            q_x8_pack(type, n, rows, 0, rows / 8, w, w8);
            map_anon_free(w, mb * nmat);
            w = w8;
        }
        for (int m = 1; m < nmat; m++) memcpy(w + m * mb, w, mb);
        for (int64_t i = 0; i < n * ntok; i++) x[i] = (float)gauss(&r);
        double bestq = 1e9, bestd = 1e9, bestc = 1e9, bestt = 1e9;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_sec();
            for (int t = 0; t < ntok; t++) q_quantize_act(type, x + t * n, xq + t * xs, n);
            bestq = fmin(bestq, now_sec() - t0);
            t0 = now_sec();
            for (int m = 0; m < nmat; m++) bench_mm(type, x8, n, w + m * mb, rb, 0, rows, xq, xs, 1, y, rows);
            bestd = fmin(bestd, (now_sec() - t0) / nmat);
            for (int k = 0; k < 4; k++) {
                t0 = now_sec();
                bench_mm(type, x8, n, w, rb, 0, rows, xq, xs, 1, y, rows);
                bestc = fmin(bestc, now_sec() - t0);
            }
            t0 = now_sec();
            for (int r0 = 0; r0 < rows; r0 += 64) bench_mm(type, x8, n, w, rb, r0, 64, xq, xs, ntok, y + r0, rows);
            bestt = fmin(bestt, now_sec() - t0);
        }
        int l2rows = (int)((size_t)L2_KIB * 1024 / rb) / 16 * 16;
        if (l2rows > rows) l2rows = rows;
        double bestl = 1e9;
        for (int rep = 0; l2rows > 0 && rep < 200; rep++) {
            const double t0 = now_sec();
            bench_mm(type, x8, n, w, rb, 0, l2rows, xq, xs, 1, y, rows);
            bestl = fmin(bestl, now_sec() - t0);
        }
        double bestp = 1e9, best_read = 0;
        for (int rep = 0; rep < 3; rep++) {
            const double t0 = now_sec();
            for (int m = 0; m < nmat; m++) {
                mv_job j = {type, x8, n, w + m * mb, xq, rb, y};
                tp_for(pool, rows, 16, 16, mv_part, &j);
            }
            bestp = fmin(bestp, (now_sec() - t0) / nmat);
            best_read = fmax(best_read, read_all_gbs(pool, w, mb * nmat));
        }
        printf("%-5s%-3s %10.1f GB/s %9.1f GB/s %13.1f %9.1f %16.1f %16.2f %13.1f GB/s %11.1f GB/s\n", qtype_get(type)->name,
               x8 ? " x8" : "", mb / bestd / 1e9, read_gbs(w, mb * nmat), mb / bestc / 1e9, rb * l2rows / bestl / 1e9,
               (double)n * rows * ntok / bestt / 1e9, bestq / (n * ntok) * 1e9, mb / bestp / 1e9, best_read);
        map_anon_free(w, mb * nmat), free(xq), free(x), free(y);
    }
    tp_free(pool);
    return 0;
}

// ------------------------------------------------------------------- dump

// --dump: one line per product (type, shape, joint tokens) with a hash of the
// output bits, over every path of q_matmul: tails of units, the K chunks of
// multi-token products, row blocks, lone tokens. The AVX-512, AVX2 and
// portable builds must print the same lines (tests/t_isa.sh compares them).
static void dump(void) {
    static const uint32_t types[] = {Q_F32, Q_F16, Q_BF16, Q_Q8_0, Q_Q4_0, Q_Q5_0, Q_Q4_1, Q_Q5_1, Q_Q4_K, Q_Q5_K, Q_Q6_K,
                                     Q_Q2_K, Q_Q3_K, Q_IQ4_NL, Q_IQ4_XS, Q_MXFP4};
    static const int small[][2] = {{1, 1}, {3, 2}, {37, 3}, {5, 8}, {2, 17}};  // {rows, tokens}
    static const int large[][2] = {{3, 1}, {33, 5}, {2, 16}};
    rng_t r = {0xD0D0CAFEull};
    printf("q_matmul dump (%s)\n", q_simd_name());
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t type = types[ti];
        const int64_t blk = qtype_get(type)->block;
        const int64_t sizes[] = {blk == 1 ? 37 : blk, blk == 1 ? 100 : 3 * blk, blk == 1 ? 4101 : blk == 32 ? 4640 : 4096};
        for (int si = 0; si < 3; si++) {
            const int64_t n = sizes[si];
            const int (*shapes)[2] = si < 2 ? small : large;
            const int n_shapes = si < 2 ? 5 : 3;
            for (int c = 0; c < n_shapes; c++) {
                const int nr = shapes[c][0], nt = shapes[c][1];
                const size_t rb = qtype_row_bytes(type, n), xs = q_act_row_bytes(type, n);
                uint8_t *w = xmalloc64(rb * nr), *xq = xmalloc64(xs * nt);
                float *x = xmalloc64(sizeof(float) * n), *y = xmalloc64(sizeof(float) * nr * nt);
                for (int i = 0; i < nr; i++) random_row(&r, type, w + i * rb, n);
                for (int i = 0; type == Q_MXFP4 && i < nr; i++) w[i * rb] = (uint8_t)(i % 2);  // subnormal scales
                for (int t = 0; t < nt; t++) {
                    for (int64_t i = 0; i < n; i++) x[i] = (float)gauss(&r);
                    q_quantize_act(type, x, xq + t * xs, n);
                }
                uint8_t *w8 = NULL;  // the x8 copy (the x8 kernels read it; builds without them unpack it)
                if (q_x8_layout(type)) q_x8_pack(type, n, nr, 0, (nr + 7) / 8, w, w8 = xmalloc64(q_x8_bytes(type, nr, n)));
                for (int x8 = 0; x8 < 1 + !!w8; x8++)
                    for (int joint = nt;; joint = joint > 1 ? joint / 2 : 0) {
                        memset(y, 0xff, sizeof(float) * nr * nt);
                        if (x8) q_matmul_x8(type, n, w8, 0, nr, xq, xs, nt, joint, y, nr);
                        else q_matmul(type, n, w, rb, nr, xq, xs, nt, joint, y, nr);
                        uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the output bits
                        for (size_t i = 0; i < sizeof(float) * nr * nt; i++) h = (h ^ ((uint8_t *)y)[i]) * 0x100000001b3ull;
                        printf("%-4s%s n=%-5lld rows=%-2d tokens=%-2d joint=%-2d %016llx\n", qtype_get(type)->name,
                               x8 ? " x8" : "", (long long)n, nr, nt, joint, (unsigned long long)h);
                        if (joint == 0) break;
                    }
                free(w), free(w8), free(xq), free(x), free(y);
            }
        }
    }
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "--dump")) {
        dump();
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        int rows = 8192;
        long long n = 2048;
        if (argc > 3 && (sscanf(argv[3], "%dx%lld", &rows, &n) != 2 || rows < 64 || n < 256 || n % 256)) {
            fail("bad shape '%s': ROWSxCOLS, rows >= 64, cols a multiple of 256", argv[3]);
            return 2;
        }
        return bench(argc > 2 && strcmp(argv[2], "all") ? argv[2] : NULL, rows, n);
    }
    const char *shared = getenv("SHARED") ? getenv("SHARED") : "../shared";
    char dir[] = "/tmp/test_quant_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    printf("q_simd_name: %s\n", q_simd_name());
    char probe[600];
    snprintf(probe, sizeof probe, "%s/models/gguf", shared);
    if (access(probe, R_OK) != 0) fail("shared data not found at %s (set SHARED)", probe);
    test_fp16_exhaustive();
    test_bf16();
    test_fp16_rounding(dir);
    test_dequant(dir, shared);
    test_act_q8_0_q8_1();
    test_act_q8_K();
    test_act_float();
    test_act_nonfinite();
    test_matmul();
    test_k4_order();
    test_x8();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
    if (n_fail) {
        fprintf(stderr, "test_quant: %d failure(s)\n", n_fail);
        return 1;
    }
    printf("test_quant: all passed\n");
    return 0;
}
