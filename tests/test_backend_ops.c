// tests/test_backend_ops.c — every CUDA op against the CPU op (cpu.c, the
// reference) on random inputs, odd sizes and every weight type.
//
//   build/tests/test_backend_ops          the host self-test of kernels_qhd.cuh's
//                                         shared code, then every op on the GPU
//   build/tests/test_backend_ops --quick  fewer shapes (for compute-sanitizer)
//
// Without a GPU (or in a CPU-only build) the GPU part prints that it was
// skipped and the test passes. Errors are normalized mean squared errors
// (NMSE = Σ(got - want)² / Σ want²) against an independent reference: a
// float64 product of the dequantized operands (matmul), a float64 softmax
// over the cached K/V (attention, fp16 and q8), or cpu.c where both must agree to
// rounding. Batch invariance (a decode row computes exactly what it computes
// alone; a prompt split at PREFILL_TILE computes what one pass does) and graph
// replays are checked bit for bit.
//
// QUILL_TEST_DEVICE=cpu runs the "device" side on cpu.c too (the ops it has):
// a check of this harness — its references, thresholds and invariance
// checks — on a machine without a GPU.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "moe.h"
#include "quant.h"
#include "sample.h"
#include "util.h"
#include "check.h"

#ifndef QUILL_CUDA
int main(void) {
    puts("skipped: quill was built without CUDA (CUDA=0)");
    return 0;
}
#else
#include "kernels.h"

static int n_checks, n_failed;  // tests only; the library has no globals

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    n_checks++;
    if (!ok) n_failed++;
    printf("%s ", ok ? "ok  " : "FAIL");
    vprintf(fmt, ap);
    putchar('\n');
    va_end(ap);
}

static float unif(rng_t *r) { return (float)((rnd(r) >> 40) * 0x1p-24) * 2.0f - 1.0f; }  // [-1, 1)
static float gauss(rng_t *r) {
    double u = ((rnd(r) >> 11) + 1) * 0x1p-53, v = (rnd(r) >> 11) * 0x1p-53;
    return (float)(sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
}

static double nmse(const float *got, const float *want, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)got[i] - want[i];
        e += d * d, s += (double)want[i] * want[i];
    }
    return s > 0 ? e / s : e;
}

static double nmse_d(const float *got, const double *want, size_t n) {
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = got[i] - want[i];
        e += d * d, s += want[i] * want[i];
    }
    return s > 0 ? e / s : e;
}

// ---- the two backends and device buffers ----------------------------------

typedef struct {
    const backend_ops *C, *G;
    backend *cb, *gb;
    int quick;
} ctx;

static void *dev_copy(ctx *x, const void *host, size_t bytes) {
    void *d = x->G->alloc(x->gb, bytes);
    if (!d) {
        char err[ERR_LEN] = "";
        if (x->G->status) x->G->status(x->gb, err);
        fprintf(stderr, "device allocation of %zu bytes failed: %s\n", bytes, err);
        exit(2);
    }
    if (host) x->G->to_device(x->gb, d, host, bytes);
    return d;
}

static void *host_copy(ctx *x, const void *dev, size_t bytes) {
    void *h = xmalloc(bytes);
    x->G->to_host(x->gb, h, dev, bytes);
    return h;
}

static int gpu_ok(ctx *x, const char *what) {
    char err[ERR_LEN];
    if (!x->G->status || x->G->status(x->gb, err) == 0) return 1;
    check(0, "%s: the CUDA backend failed: %s", what, err);
    return 0;
}

// ---- random weights -----------------------------------------------------------

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

// rows of type t as GGUF stores them: random quants, plausible scales.
static uint8_t *random_rows(rng_t *r, uint32_t t, int64_t rows, int64_t cols) {
    const size_t rb = qtype_row_bytes(t, cols), bb = qtype_get(t)->block_bytes;
    uint8_t *w = xmalloc(rows * rb);
    for (size_t i = 0; i < rows * rb; i++) w[i] = (uint8_t)rnd(r);
    for (size_t k = 0; k < rows * rb / bb; k++) {
        uint8_t *b = w + k * bb;
        const uint16_t d = f32_to_fp16(0.002f + 0.01f * fabsf(unif(r))), m = f32_to_fp16(0.01f * unif(r));
        switch (t) {
        case Q_F32: { const float f = gauss(r); memcpy(b, &f, 4); break; }
        case Q_F16: put16(b, f32_to_fp16(gauss(r))); break;
        case Q_BF16: put16(b, f32_to_bf16(gauss(r))); break;
        case Q_Q4_1: case Q_Q5_1: case Q_Q4_K: case Q_Q5_K: put16(b, d), put16(b + 2, m); break;
        case Q_Q6_K: put16(b + 208, d); break;
        case Q_Q3_K: put16(b + 108, d); break;
        case Q_Q2_K: put16(b + 80, d), put16(b + 82, d); break;
        case Q_MXFP4: b[0] = (uint8_t)(118 + rnd(r) % 8); break;  // scales 2^-10 .. 2^-3
        default: put16(b, d); break;
        }
    }
    return w;
}

// A weight on both backends: cpu->data is host memory, gpu->data device memory.
static void make_weight(ctx *x, rng_t *r, uint32_t t, int64_t rows, int64_t cols, qmat *cpu, qmat *gpu) {
    *cpu = (qmat){.type = t, .rows = rows, .cols = cols, .row_bytes = qtype_row_bytes(t, cols),
                  .data = random_rows(r, t, rows, cols)};
    *gpu = *cpu;
    char err[ERR_LEN];
    if (x->G->upload(x->gb, gpu, err)) {
        fprintf(stderr, "upload failed: %s\n", err);
        exit(2);
    }
}

static float *dequantized(const qmat *w) {
    float *d = xmalloc(sizeof(float) * w->rows * w->cols);
    for (int64_t r = 0; r < w->rows; r++)
        q_dequantize_row(w->type, (const uint8_t *)w->data + r * w->row_bytes, d + r * w->cols, w->cols);
    return d;
}

// ---- embed, rmsnorm, elementwise, rope ----------------------------------------------

static void test_embed(ctx *x, rng_t *r) {
    const uint32_t types[] = {Q_F32, Q_F16, Q_BF16, Q_Q8_0, Q_Q4_0, Q_Q4_1, Q_Q5_0, Q_Q5_1, Q_Q4_K, Q_Q5_K, Q_Q6_K,
                              Q_Q2_K, Q_Q3_K, Q_IQ4_NL, Q_IQ4_XS, Q_MXFP4};
    for (size_t ti = 0; ti < sizeof types / sizeof *types; ti++) {
        const int64_t blk = qtype_get(types[ti])->block, cols = blk == 256 ? 512 : blk == 32 ? 96 : 37;
        const int rows = 50, n = 7;
        qmat wc, wg;
        make_weight(x, r, types[ti], rows, cols, &wc, &wg);
        int32_t ids[7] = {0, rows - 1, 3, 3, 17, 42, 1};
        int32_t *dids = dev_copy(x, ids, sizeof ids);
        float *want = xmalloc(sizeof(float) * n * cols), *dout = dev_copy(x, NULL, sizeof(float) * n * cols);
        x->C->embed(x->cb, want, &wc, ids, n);
        x->G->embed(x->gb, dout, &wg, dids, n);
        float *got = host_copy(x, dout, sizeof(float) * n * cols);
        char tb[16];
        if (gpu_ok(x, "embed"))
            check(nmse(got, want, n * cols) < 1e-12, "embed %s %lld cols: nmse %.3g", qtype_name(types[ti], tb),
                  (long long)cols, nmse(got, want, n * cols));
        x->G->release(x->gb, dids), x->G->release(x->gb, dout);
        free(want), free(got), free((void *)wc.data);
    }
}

// An op that wrote dout ([n, cols], on the device) may leave its q8_1 form for
// the matmul that reads it next: that matmul (Q4_0) must equal one of a copy,
// which is quantized anew.
static int matmul_after_ok(ctx *x, rng_t *r, const float *dout, int n, int64_t cols) {  // cols % 32 == 0
    qmat wc, wg;
    make_weight(x, r, Q_Q4_0, 40, cols, &wc, &wg);  // (its arithmetic reads both d and s of the q8_1 form)
    const size_t ob = sizeof(float) * n * cols, yb = sizeof(float) * n * 40;
    float *y1 = dev_copy(x, NULL, yb), *y2 = dev_copy(x, NULL, yb);
    x->G->matmul(x->gb, y1, &wg, dout, n, 0);
    float *ho = host_copy(x, dout, ob), *c = dev_copy(x, ho, ob);
    x->G->matmul(x->gb, y2, &wg, c, n, 0);
    float *h1 = host_copy(x, y1, yb), *h2 = host_copy(x, y2, yb);
    const int same = gpu_ok(x, "matmul after an op") && !memcmp(h1, h2, yb);
    void *dev[] = {y1, y2, c};
    for (int i = 0; i < 3; i++) x->G->release(x->gb, dev[i]);
    free(ho), free(h1), free(h2), free((void *)wc.data);
    return same;
}

static void test_rmsnorm(ctx *x, rng_t *r) {
    const int dims[] = {1, 7, 64, 1001, 4096}, ns[] = {1, 5, 24};
    for (int di = 0; di < 5; di++)
        for (int ni = 0; ni < 3; ni++) {
            const int dim = dims[di], n = ns[ni];
            float *xv = xmalloc(sizeof(float) * n * dim), *g = xmalloc(sizeof(float) * dim);
            for (int i = 0; i < n * dim; i++) xv[i] = gauss(r) * (i % 13 ? 1.0f : 20.0f);
            for (int i = 0; i < dim; i++) g[i] = 1.0f + 0.1f * gauss(r);
            qmat wc = {.type = Q_F32, .rows = 1, .cols = dim, .row_bytes = 4 * (size_t)dim, .data = g}, wg = wc;
            wg.data = dev_copy(x, g, sizeof(float) * dim);
            float *dx = dev_copy(x, xv, sizeof(float) * n * dim);
            x->G->rmsnorm(x->gb, dx, dx, &wg, n, dim, 1e-5f);  // in place, as the per-head norms run
            x->C->rmsnorm(x->cb, xv, xv, &wc, n, dim, 1e-5f);
            float *got = host_copy(x, dx, sizeof(float) * n * dim);
            if (gpu_ok(x, "rmsnorm"))
                check(nmse(got, xv, n * dim) < 1e-12, "rmsnorm %d x %d: nmse %.3g", n, dim, nmse(got, xv, n * dim));
            x->G->release(x->gb, dx), x->G->release(x->gb, (void *)wg.data);
            free(xv), free(g), free(got);
        }
}

// add_rmsnorm(out == d, as the model runs it) equals add then rmsnorm, bit for
// bit, on each backend; the device's equals the CPU's within rounding; the
// matmul that reads the output next equals one of a copy. 4096 and 8192 take
// the device's vector kernel, 10240 is wider than k_rmsnorm keeps in registers.
static void test_add_rmsnorm(ctx *x, rng_t *r) {
    const int dims[] = {64, 1001, 4096, 8192, 10240}, ns[] = {1, 5, 24};
    for (int di = 0; di < 5; di++)
        for (int ni = 0; ni < 3; ni++) {
            const int dim = dims[di], n = ns[ni];
            const size_t len = (size_t)n * dim, bytes = sizeof(float) * len;
            float *xv = xmalloc(bytes), *dv = xmalloc(bytes), *g = xmalloc(sizeof(float) * dim);
            for (size_t i = 0; i < len; i++) xv[i] = gauss(r) * 3, dv[i] = gauss(r);
            for (int i = 0; i < dim; i++) g[i] = 1.0f + 0.1f * gauss(r);
            qmat wc = {.type = Q_F32, .rows = 1, .cols = dim, .row_bytes = 4 * (size_t)dim, .data = g}, wg = wc;
            wg.data = dev_copy(x, g, sizeof(float) * dim);
            // the CPU: separate (x1, o1) and fused (x2, into d2)
            float *x1 = xmalloc(bytes), *o1 = xmalloc(bytes), *x2 = xmalloc(bytes), *d2 = xmalloc(bytes);
            memcpy(x1, xv, bytes), memcpy(x2, xv, bytes), memcpy(d2, dv, bytes);
            x->C->add(x->cb, x1, dv, len), x->C->rmsnorm(x->cb, o1, x1, &wc, n, dim, 1e-5f);
            x->C->add_rmsnorm(x->cb, d2, x2, d2, &wc, n, dim, 1e-5f);
            // the device, the same two ways
            float *gx1 = dev_copy(x, xv, bytes), *gd = dev_copy(x, dv, bytes), *go1 = dev_copy(x, NULL, bytes);
            float *gx2 = dev_copy(x, xv, bytes), *gd2 = dev_copy(x, dv, bytes);
            x->G->add(x->gb, gx1, gd, len), x->G->rmsnorm(x->gb, go1, gx1, &wg, n, dim, 1e-5f);
            x->G->add_rmsnorm(x->gb, gd2, gx2, gd2, &wg, n, dim, 1e-5f);
            float *hx1 = host_copy(x, gx1, bytes), *ho1 = host_copy(x, go1, bytes);
            float *hx2 = host_copy(x, gx2, bytes), *ho2 = host_copy(x, gd2, bytes);
            if (gpu_ok(x, "add_rmsnorm"))
                check(!memcmp(x1, x2, bytes) && !memcmp(o1, d2, bytes) && !memcmp(hx1, hx2, bytes) &&
                          !memcmp(ho1, ho2, bytes) && nmse(ho2, d2, len) < 1e-12 && !memcmp(hx2, x2, bytes),
                      "add_rmsnorm %d x %d: equals add then rmsnorm bit for bit on both backends; device nmse %.3g",
                      n, dim, nmse(ho2, d2, len));
            if (dim % 32 == 0)
                check(matmul_after_ok(x, r, gd2, n, dim), "add_rmsnorm %d x %d, then a Q4_0 matmul of its output: equal "
                  "bit for bit to one of a copy", n, dim);
            void *dev[] = {gx1, gd, go1, gx2, gd2, (void *)wg.data};
            for (int i = 0; i < 6; i++) x->G->release(x->gb, dev[i]);
            void *host[] = {xv, dv, g, x1, o1, x2, d2, hx1, ho1, hx2, ho2};
            for (int i = 0; i < 11; i++) free(host[i]);
        }
}

static void test_elementwise(ctx *x, rng_t *r) {
    const size_t lens[] = {1, 7, 1000003};
    for (int li = 0; li < 3; li++) {
        const size_t len = lens[li];
        const int dim = len > 7 ? 1001 : (int)len, n = (int)(len / dim);
        float *a = xmalloc(4 * len), *b = xmalloc(4 * len), *bias = xmalloc(4 * (size_t)dim);
        for (size_t i = 0; i < len; i++) a[i] = gauss(r) * 4, b[i] = gauss(r);
        for (int i = 0; i < dim; i++) bias[i] = gauss(r);
        float *da = dev_copy(x, a, 4 * len), *db = dev_copy(x, b, 4 * len), *dbias = dev_copy(x, bias, 4 * (size_t)dim);
        qmat bc = {.type = Q_F32, .rows = 1, .cols = dim, .row_bytes = 4 * (size_t)dim, .data = bias}, bg = bc;
        bg.data = dbias;
        x->C->add(x->cb, a, b, len), x->G->add(x->gb, da, db, len);
        x->C->add_bias(x->cb, a, &bc, n, dim), x->G->add_bias(x->gb, da, &bg, n, dim);
        x->C->swiglu(x->cb, a, a, b, n, dim), x->G->swiglu(x->gb, da, da, db, n, dim);  // out == gate, as the model runs it
        x->C->scale(x->cb, a, 3.5f, len), x->G->scale(x->gb, da, 3.5f, len);
        x->C->geglu(x->cb, b, a, b, len), x->G->geglu(x->gb, db, da, db, len);  // out == up: both read first
        float *ga = host_copy(x, da, 4 * len), *gb = host_copy(x, db, 4 * len);
        if (gpu_ok(x, "elementwise"))
            check(nmse(ga, a, len) < 1e-12 && nmse(gb, b, len) < 1e-12,
                  "add, add_bias, swiglu, scale, geglu over %zu: nmse %.3g %.3g", len, nmse(ga, a, len),
                  nmse(gb, b, len));
        x->G->release(x->gb, da), x->G->release(x->gb, db), x->G->release(x->gb, dbias);
        free(a), free(b), free(bias), free(ga), free(gb);
    }
}

// The device's rope_store against its rope then kv_store, on random q, k, v
// of n tokens stored to scattered pool rows.
static int rope_store_ok(ctx *x, rng_t *r, int n, int heads, int kv_heads, int hd, const int32_t *dpos,
                         const rope_cfg *rg, int kt) {
    const int kv_dim = kv_heads * hd, rows = 3 * n + 2;
    const size_t nq = (size_t)n * heads * hd, nk = (size_t)n * kv_dim, rb = kv_row_bytes(kt, kv_dim);
    float *h = xmalloc(sizeof(float) * (nq + 2 * nk));
    for (size_t i = 0; i < nq + 2 * nk; i++) h[i] = gauss(r);
    int32_t slot[64];
    for (int i = 0; i < n; i++) slot[i] = 3 * (n - 1 - i) + 1;
    int32_t *dslot = dev_copy(x, slot, sizeof(int32_t) * n);
    const fwd_batch fb = {.n = n, .slot = dslot};
    float *a = dev_copy(x, h, sizeof(float) * (nq + 2 * nk)), *b = dev_copy(x, h, sizeof(float) * (nq + 2 * nk));
    void *pools[4], *zero = calloc(rows, rb);
    if (!zero) abort();
    for (int i = 0; i < 4; i++) pools[i] = dev_copy(x, zero, rb * rows);
    free(zero);
    x->G->rope(x->gb, a, a + nq, n, heads, kv_heads, hd, dpos, rg);
    x->G->kv_store(x->gb, pools[0], pools[1], a + nq, a + nq + nk, &fb, kv_dim, kt);
    x->G->rope_store(x->gb, b, b + nq, b + nq + nk, pools[2], pools[3], heads, kv_heads, hd, dpos, rg, &fb, kt);
    float *ha = host_copy(x, a, sizeof(float) * nq), *hb = host_copy(x, b, sizeof(float) * (nq + 2 * nk));
    int same = gpu_ok(x, "rope_store") && !memcmp(ha, hb, sizeof(float) * nq) &&
               !memcmp(hb + nq, h + nq, sizeof(float) * 2 * nk);
    for (int i = 0; i < 2; i++) {
        uint8_t *p1 = host_copy(x, pools[i], rb * rows), *p2 = host_copy(x, pools[i + 2], rb * rows);
        same &= !memcmp(p1, p2, rb * rows);
        free(p1), free(p2);
    }
    for (int i = 0; i < 4; i++) x->G->release(x->gb, pools[i]);
    x->G->release(x->gb, a), x->G->release(x->gb, b), x->G->release(x->gb, dslot);
    free(h), free(ha), free(hb);
    return same;
}

static void test_rope(ctx *x, rng_t *r) {
    const int dims[] = {64, 128}, n = 9, heads = 3, kv_heads = 2;
    for (int di = 0; di < 2; di++)
        for (int variant = 0; variant < 16; variant++) {
            const int hd = dims[di], n_rot = variant & 4 ? hd / 2 : hd;
            float ff[64];
            for (int i = 0; i < n_rot / 2; i++) ff[i] = 1.0f + 0.37f * (float)i;
            // variant & 8: YaRN (factor 32, original context 4096, as gpt-oss) with an attention factor
            rope_cfg rc = {.n_rot = n_rot, .neox = variant & 1, .base = 500000.0f,
                           .freq_scale = variant & 2 ? 0.25f : variant & 8 ? 1.0f / 32 : 1.0f,
                           .attn_factor = variant & 8 ? 1.19f : 1.0f, .ext_factor = variant & 8 ? 1.0f : 0.0f,
                           .corr_lo = 5.0f, .corr_hi = 17.0f, .freq_factors = variant & 2 ? ff : NULL};
            rope_cfg rg = rc;
            float *dff = rc.freq_factors ? dev_copy(x, ff, sizeof ff) : NULL;
            rg.freq_factors = dff;
            int32_t pos[9] = {0, 1, 2, 15, 16, 511, 4095, 32768, 131071};
            // q (heads) and k (kv heads) rotated together; a copy of each alone
            const size_t nq = (size_t)n * heads * hd, nk = (size_t)n * kv_heads * hd;
            float *v = xmalloc(sizeof(float) * (nq + nk)), *v1 = xmalloc(sizeof(float) * (nq + nk));
            for (size_t i = 0; i < nq + nk; i++) v[i] = v1[i] = gauss(r);
            int32_t *dpos = dev_copy(x, pos, sizeof pos);
            float *dv = dev_copy(x, v, sizeof(float) * (nq + nk)), *dv1 = dev_copy(x, v, sizeof(float) * (nq + nk));
            x->C->rope(x->cb, v, v + nq, n, heads, kv_heads, hd, pos, &rc);
            x->G->rope(x->gb, dv, dv + nq, n, heads, kv_heads, hd, dpos, &rg);
            x->C->rope(x->cb, v1, NULL, n, heads, 0, hd, pos, &rc);
            x->C->rope(x->cb, v1 + nq, NULL, n, kv_heads, 0, hd, pos, &rc);
            x->G->rope(x->gb, dv1, NULL, n, heads, 0, hd, dpos, &rg);
            x->G->rope(x->gb, dv1 + nq, NULL, n, kv_heads, 0, hd, dpos, &rg);
            const size_t bytes = sizeof(float) * (nq + nk);
            float *got = host_copy(x, dv, bytes), *got1 = host_copy(x, dv1, bytes);
            if (gpu_ok(x, "rope"))
                check(nmse(got, v, nq + nk) < 1e-12 && !memcmp(v, v1, bytes) && !memcmp(got, got1, bytes),
                      "rope head_dim %d n_rot %d neox %d scaled %d yarn %d: nmse %.3g; q and k together equal each "
                      "alone, bit for bit", hd, n_rot, variant & 1, (variant & 2) != 0, (variant & 8) != 0,
                      nmse(got, v, nq + nk));
            for (int kt = KV_F16; kt <= KV_Q8 && x->G->rope_store; kt++)
                check(rope_store_ok(x, r, n, heads, kv_heads, hd, dpos, &rg, kt),
                      "rope_store (%s) head_dim %d n_rot %d neox %d scaled %d yarn %d: q and the pools equal rope "
                      "then kv_store's bit for bit, k unchanged", kt == KV_Q8 ? "q8" : "f16", hd, n_rot, variant & 1,
                      (variant & 2) != 0, (variant & 8) != 0);
            x->G->release(x->gb, dpos), x->G->release(x->gb, dv), x->G->release(x->gb, dv1);
            if (dff) x->G->release(x->gb, dff);
            free(v), free(v1), free(got), free(got1);
        }
}

// ---- matmul -----------------------------------------------------------------------

typedef struct { int64_t rows, cols; int n, n_joint; } mm_case;

static double mm_threshold(uint32_t t) {
    switch (t) {
    case Q_F32: return 1e-10;
    case Q_F16: return 2e-6;   // the GEMM rounds activations to fp16
    case Q_BF16: return 1e-4;  // ... to bf16
    default: return 5e-4;      // q8_1 activations (decode), fp16 (GEMM)
    }
}

// y[t, r] = Σ w[r, e]·x[t, e] in float64.
static double *mm_reference(const float *wd, const float *xv, int64_t rows, int64_t cols, int n) {
    double *y = xmalloc(sizeof(double) * n * rows);
    for (int t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            double s = 0;
            for (int64_t e = 0; e < cols; e++) s += (double)wd[r * cols + e] * xv[t * cols + e];
            y[t * rows + r] = s;
        }
    return y;
}

static float *gpu_matmul(ctx *x, const qmat *wg, const float *dx, int64_t cols, int n, int n_joint) {
    float *dy = dev_copy(x, NULL, sizeof(float) * n * wg->rows);
    x->G->matmul(x->gb, dy, wg, dx, n, n_joint);
    float *y = host_copy(x, dy, sizeof(float) * n * wg->rows);
    x->G->release(x->gb, dy);
    (void)cols;
    return y;
}

// Rows >= n_joint equal their one-token results; a prompt split at
// PREFILL_TILE equals the whole prompt.
static void mm_invariance(ctx *x, const qmat *wg, const float *dx, const float *y, const mm_case *c, const char *name) {
    const int64_t rows = wg->rows, cols = wg->cols;
    int same = 1;
    for (int t = c->n_joint; t < c->n; t += (c->n - c->n_joint) / 3 + 1) {
        float *y1 = gpu_matmul(x, wg, dx + t * cols, cols, 1, 0);
        same &= !memcmp(y1, y + t * rows, sizeof(float) * rows);
        free(y1);
    }
    for (int t0 = PREFILL_TILE; t0 < c->n_joint; t0 += PREFILL_TILE) {  // the prompt cut at t0
        const int nj = c->n_joint - t0;
        float *yp = gpu_matmul(x, wg, dx + t0 * cols, cols, nj, nj);
        same &= !memcmp(yp, y + t0 * rows, sizeof(float) * rows * nj);
        free(yp);
    }
    if (c->n_joint > PREFILL_TILE) {
        float *yp = gpu_matmul(x, wg, dx, cols, PREFILL_TILE, PREFILL_TILE);
        same &= !memcmp(yp, y, sizeof(float) * rows * PREFILL_TILE);
        free(yp);
    }
    check(same, "matmul %s %lld x %lld, %d tokens (%d prompt): rows alone / prompt cut at tiles equal bit for bit",
          name, (long long)rows, (long long)cols, c->n, c->n_joint);
}

static void test_matmul_type(ctx *x, rng_t *r, uint32_t t) {
    char tb[16];
    const char *name = qtype_name(t, tb);
    const int64_t blk = qtype_get(t)->block;
    const int64_t small = blk == 1 ? 37 : blk == 32 ? 96 : 256, mid = blk == 1 ? 64 : blk == 32 ? 4096 : 768;
    const mm_case all[] = {
        {7, small, 1, 1},  {7, small, 3, 0},    {129, mid, 9, 9},   {129, mid, 70, 70}, {1030, 4096, 2, 2},
        {130, mid, 130, 130}, {33, mid, 130, 70}, {5, blk == 1 ? 1 : small, 8, 8},
    };
    const int n_cases = x->quick ? 3 : (int)(sizeof all / sizeof *all);
    for (int ci = 0; ci < n_cases; ci++) {
        const mm_case *c = &all[ci];
        qmat wc, wg;
        make_weight(x, r, t, c->rows, c->cols, &wc, &wg);
        float *xv = xmalloc(sizeof(float) * c->n * c->cols), *yc = xmalloc(sizeof(float) * c->n * c->rows);
        for (int64_t i = 0; i < c->n * c->cols; i++) xv[i] = gauss(r);
        float *dx = dev_copy(x, xv, sizeof(float) * c->n * c->cols);
        float *wd = dequantized(&wc);
        double *want = mm_reference(wd, xv, c->rows, c->cols, c->n);
        x->C->matmul(x->cb, yc, &wc, xv, c->n, c->n_joint);
        float *yg = gpu_matmul(x, &wg, dx, c->cols, c->n, c->n_joint);
        if (gpu_ok(x, "matmul")) {
            const size_t len = (size_t)c->n * c->rows;
            const double eg = nmse_d(yg, want, len), ec = nmse_d(yc, want, len);
            check(eg < mm_threshold(t), "matmul %s %lld x %lld, %d tokens (%d prompt): nmse %.3g (cpu %.3g)", name,
                  (long long)c->rows, (long long)c->cols, c->n, c->n_joint, eg, ec);
            if (c->n > 1 && !x->quick) mm_invariance(x, &wg, dx, yg, c, name);
        }
        x->G->release(x->gb, dx);
        free(xv), free(yc), free(yg), free(wd), free(want), free((void *)wc.data);
    }
}

// matmul_set (Q, K, V of one type in one launch or parallel section; on the
// GPU Q4_K or Q5_K with Q6_K in one launch too, other mixes a launch per type;
// a prompt a matmul each) equals the matmuls one by one, bit for bit, on each
// backend.
static void test_matmul_set(ctx *x, rng_t *r) {
    if (!x->G->matmul_set || !x->C->matmul_set) return;
    const struct { uint32_t t[3]; int k, n, n_joint; } cases[] = {
        {{Q_Q4_K, Q_Q4_K, Q_Q4_K}, 3, 1, 0}, {{Q_Q4_K, Q_Q4_K, Q_Q4_K}, 3, 5, 0}, {{Q_Q8_0, Q_Q8_0}, 2, 1, 1},
        {{Q_Q4_K, Q_Q4_K, Q_Q6_K}, 3, 2, 0}, {{Q_F16, Q_F16, Q_F16}, 3, 3, 0},    {{Q_Q4_0, Q_Q4_0}, 2, 20, 20},
        {{Q_Q4_K, Q_Q6_K, Q_Q4_K}, 3, 1, 0}, {{Q_F16, Q_Q8_0, Q_F16}, 3, 4, 0},    {{Q_Q6_K, Q_Q5_K, Q_Q5_K}, 3, 3, 0},
        {{Q_Q4_K, Q_Q4_K, Q_Q6_K}, 3, 1, 1}, {{Q_Q4_K, Q_Q6_K, Q_Q4_K}, 3, 7, 7},
    };
    const int64_t cols = 512, rows[3] = {384, 128, 128};
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const int k = cases[ci].k, n = cases[ci].n;
        qmat wc[3], wg[3];
        float *dy[3], *xv = xmalloc(sizeof(float) * n * cols);
        for (int i = 0; i < k; i++) {
            make_weight(x, r, cases[ci].t[i], rows[i], cols, &wc[i], &wg[i]);
            dy[i] = dev_copy(x, NULL, sizeof(float) * n * rows[i]);
        }
        for (int64_t i = 0; i < n * cols; i++) xv[i] = gauss(r);
        float *dx = dev_copy(x, xv, sizeof(float) * n * cols);
        x->G->matmul_set(x->gb, dy, (const qmat *const[]){&wg[0], &wg[1], &wg[2]}, k, dx, n, cases[ci].n_joint);
        int same = gpu_ok(x, "matmul_set");
        float *yc[3];  // the CPU's
        for (int i = 0; i < k; i++) yc[i] = xmalloc(sizeof(float) * n * rows[i]);
        x->C->matmul_set(x->cb, yc, (const qmat *const[]){&wc[0], &wc[1], &wc[2]}, k, xv, n, cases[ci].n_joint);
        for (int i = 0; i < k; i++) {
            float *y1 = xmalloc(sizeof(float) * n * rows[i]);
            x->C->matmul(x->cb, y1, &wc[i], xv, n, cases[ci].n_joint);
            same &= !memcmp(yc[i], y1, sizeof(float) * n * rows[i]);
            free(y1), free(yc[i]);
        }
        for (int i = 0; same && i < k; i++) {
            float *ys = host_copy(x, dy[i], sizeof(float) * n * rows[i]);
            float *y1 = gpu_matmul(x, &wg[i], dx, cols, n, cases[ci].n_joint);
            same &= !memcmp(ys, y1, sizeof(float) * n * rows[i]);
            free(ys), free(y1);
        }
        char tb[16];
        check(same, "matmul_set of %d (%s first), %d tokens (%d prompt): each equals its matmul bit for bit", k,
              qtype_name(cases[ci].t[0], tb), n, cases[ci].n_joint);
        for (int i = 0; i < k; i++) x->G->release(x->gb, dy[i]), free((void *)wc[i].data);
        x->G->release(x->gb, dx);
        free(xv);
    }
}

static void test_matmul(ctx *x, rng_t *r) {
    const uint32_t types[] = {Q_F32, Q_F16, Q_BF16, Q_Q8_0, Q_Q4_0, Q_Q4_1, Q_Q5_0, Q_Q5_1, Q_Q4_K, Q_Q5_K, Q_Q6_K,
                              Q_Q2_K, Q_Q3_K, Q_IQ4_NL, Q_IQ4_XS, Q_MXFP4};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) test_matmul_type(x, r, types[i]);
    test_matmul_set(x, r);
}

// ---- kv_store + attention ---------------------------------------------------------------

// A paged cache of three sequences and a pass over some of their tokens.
typedef struct {
    int n_heads, n_kv, hd, kv_dim, kv_type;
    int n_blocks, max_blocks;
    size_t row_bytes, pool_bytes;  // kv_row_bytes; n_blocks * KV_BLOCK rows
    uint8_t *kpool, *vpool;        // host copies
    int n;                         // tokens in the pass
    int32_t pos[80], seq[80], slot[80], ids[80];
    int32_t *tables;               // [3, max_blocks]
    int n_prompt;
} att_case;

// Value e of a pool row, read as backend.h documents the row layout.
static float kv_value(const att_case *a, const uint8_t *row, int e) {
    uint16_t h;
    if (a->kv_type == KV_F16) return memcpy(&h, row + 2 * e, 2), fp16_to_f32(h);
    memcpy(&h, row + a->kv_dim + 2 * (e / 32), 2);
    return fp16_to_f32(h) * (float)(int8_t)row[e];
}

// A random pool row: gaussian fp16 values, or random int8 values with scales of a gaussian's.
static void kv_random_row(rng_t *r, const att_case *a, uint8_t *row) {
    memset(row, 0, a->row_bytes);
    for (int e = 0; e < a->kv_dim; e++) {
        if (a->kv_type == KV_F16) put16(row + 2 * e, f32_to_fp16(gauss(r)));
        else row[e] = (uint8_t)(int8_t)(int)(rnd(r) % 255 - 127);
    }
    for (int j = 0; a->kv_type == KV_Q8 && j < a->kv_dim / 32; j++)
        put16(row + a->kv_dim + 2 * j, f32_to_fp16((2.0f + fabsf(gauss(r))) / 127.0f));
}

static void att_build(rng_t *r, att_case *a, int n_heads, int n_kv, int hd, int max_blocks, int kv_type) {
    *a = (att_case){.n_heads = n_heads, .n_kv = n_kv, .hd = hd, .kv_dim = n_kv * hd, .kv_type = kv_type,
                    .max_blocks = max_blocks, .row_bytes = kv_row_bytes(kv_type, n_kv * hd)};
    const int lens[3] = {70, 1, 300};  // sequence 0: a 70-token prompt; 1, 2: one decode token each
    a->n_blocks = 0;
    for (int s = 0; s < 3; s++) a->n_blocks += (lens[s] + KV_BLOCK - 1) / KV_BLOCK;
    a->n_blocks += 3;  // free blocks in between
    a->tables = xmalloc(sizeof(int32_t) * 3 * max_blocks);
    int32_t *perm = xmalloc(sizeof(int32_t) * a->n_blocks);
    for (int i = 0; i < a->n_blocks; i++) perm[i] = i;
    for (int i = a->n_blocks - 1; i > 0; i--) {
        const int j = (int)(rnd(r) % (uint64_t)(i + 1));
        const int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int i = 0; i < 3 * max_blocks; i++) a->tables[i] = 0x7fffffff;  // unused entries: far out of the pool
    int next = 0;
    for (int s = 0; s < 3; s++)
        for (int b = 0; b < (lens[s] + KV_BLOCK - 1) / KV_BLOCK; b++) a->tables[s * max_blocks + b] = perm[next++];
    free(perm);
    a->pool_bytes = (size_t)a->n_blocks * KV_BLOCK * a->row_bytes;
    a->kpool = xmalloc(a->pool_bytes), a->vpool = xmalloc(a->pool_bytes);
    for (int i = 0; i < a->n_blocks * KV_BLOCK; i++)
        kv_random_row(r, a, a->kpool + i * a->row_bytes), kv_random_row(r, a, a->vpool + i * a->row_bytes);
    a->n = 0;
    for (int p = 0; p < 70; p++) a->pos[a->n] = p, a->seq[a->n++] = 0;
    a->pos[a->n] = 0, a->seq[a->n++] = 1;
    a->pos[a->n] = 299, a->seq[a->n++] = 2;
    a->n_prompt = 70;
    for (int i = 0; i < a->n; i++) {
        const int32_t *t = a->tables + a->seq[i] * max_blocks;
        a->slot[i] = t[a->pos[i] / KV_BLOCK] * KV_BLOCK + a->pos[i] % KV_BLOCK;
        a->ids[i] = 0;
    }
}

// The pass's tokens first .. first+n-1 as a fwd_batch (device arrays in *dev).
static fwd_batch att_batch(ctx *x, const att_case *a, int first, int n, int n_prompt, void **dev) {
    fwd_batch fb = {.n = n, .n_seqs = 3, .max_blocks = a->max_blocks, .n_prompt = n_prompt};
    for (int i = first; i < first + n; i++) fb.max_len = a->pos[i] + 1 > fb.max_len ? a->pos[i] + 1 : fb.max_len;
    const size_t b = sizeof(int32_t) * n;
    fb.ids = dev[0] = dev_copy(x, a->ids + first, b);
    fb.pos = dev[1] = dev_copy(x, a->pos + first, b);
    fb.seq = dev[2] = dev_copy(x, a->seq + first, b);
    fb.slot = dev[3] = dev_copy(x, a->slot + first, b);
    fb.tables = dev[4] = dev_copy(x, a->tables, sizeof(int32_t) * 3 * a->max_blocks);
    return fb;
}

static void att_batch_free(ctx *x, void **dev) {
    for (int i = 0; i < 5; i++) x->G->release(x->gb, dev[i]);
}

// float64 attention of token i over its sequence's cache (the window's
// positions), with ac's scale and sinks.
static void att_reference(const att_case *a, const attn_cfg *ac, const float *sinks, const float *q, int i,
                          double *out) {
    const int group = a->n_heads / a->n_kv, len = a->pos[i] + 1;
    const int p0 = ac->window > 0 && len > ac->window ? len - ac->window : 0;
    const int32_t *t = a->tables + a->seq[i] * a->max_blocks;
    double *s = xmalloc(sizeof(double) * len);
    for (int h = 0; h < a->n_heads; h++) {
        const float *qh = q + ((size_t)i * a->n_heads + h) * a->hd;
        const size_t col = (size_t)(h / group) * a->hd;
        double mx = sinks ? sinks[h] : -INFINITY, sum = 0;
        for (int p = p0; p < len; p++) {
            const uint8_t *row = a->kpool + ((size_t)t[p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK) * a->row_bytes;
            double d = 0;
            for (int e = 0; e < a->hd; e++) d += (double)qh[e] * kv_value(a, row, (int)col + e);
            s[p] = d * ac->scale;
            mx = s[p] > mx ? s[p] : mx;
        }
        for (int e = 0; e < a->hd; e++) out[h * a->hd + e] = 0;
        if (sinks) sum = exp(sinks[h] - mx);
        for (int p = p0; p < len; p++) {
            const uint8_t *row = a->vpool + ((size_t)t[p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK) * a->row_bytes;
            const double w = exp(s[p] - mx);
            sum += w;
            for (int e = 0; e < a->hd; e++) out[h * a->hd + e] += w * kv_value(a, row, (int)col + e);
        }
        for (int e = 0; e < a->hd; e++) out[h * a->hd + e] /= sum;
    }
    free(s);
}

static float *gpu_attention(ctx *x, const att_case *a, const attn_cfg *ac, const float *dq_all, void *dk, void *dv,
                            int first, int n, int n_prompt) {
    void *dev[5];
    fwd_batch fb = att_batch(x, a, first, n, n_prompt, dev);
    const size_t qrow = (size_t)a->n_heads * a->hd;
    float *dout = dev_copy(x, NULL, sizeof(float) * n * qrow);
    x->G->attention(x->gb, dout, dq_all + first * qrow, dk, dv, &fb, a->n_heads, a->n_kv, a->hd, a->kv_type, ac);
    float *out = host_copy(x, dout, sizeof(float) * n * qrow);
    x->G->release(x->gb, dout);
    att_batch_free(x, dev);
    return out;
}

// variant 1: a sliding window of 40 positions, sinks and another scale (gpt-oss's attention)
static void test_attention_shape(ctx *x, rng_t *r, int n_heads, int n_kv, int hd, int max_blocks, int kv_type,
                                 int variant) {
    att_case a;
    att_build(r, &a, n_heads, n_kv, hd, max_blocks, kv_type);
    char tn[48];
    snprintf(tn, sizeof tn, "%s%s", kv_type == KV_Q8 ? "q8" : "f16", variant ? " window 40, sinks" : "");
    float *sinks = xmalloc(sizeof(float) * n_heads);
    for (int h = 0; h < n_heads; h++) sinks[h] = 2.0f * gauss(r) + (h % 3 == 0 ? 6.0f : 0.0f);  // some sinks dominate
    float *dsinks = dev_copy(x, sinks, sizeof(float) * n_heads);
    const attn_cfg acc = {.scale = variant ? 0.3f : 1.0f / sqrtf((float)hd), .window = variant ? 40 : 0,
                          .sinks = variant ? sinks : NULL};
    attn_cfg acg = acc;
    acg.sinks = variant ? dsinks : NULL;
    const size_t pool = a.pool_bytes, qrow = (size_t)n_heads * hd;
    void *dk = dev_copy(x, a.kpool, pool), *dv = dev_copy(x, a.vpool, pool);
    // kv_store: the pass's own K and V into both pools
    float *k = xmalloc(sizeof(float) * a.n * a.kv_dim), *v = xmalloc(sizeof(float) * a.n * a.kv_dim);
    for (size_t i = 0; i < (size_t)a.n * a.kv_dim; i++) k[i] = gauss(r), v[i] = gauss(r);
    float *dkn = dev_copy(x, k, sizeof(float) * a.n * a.kv_dim), *dvn = dev_copy(x, v, sizeof(float) * a.n * a.kv_dim);
    void *dev[5];
    fwd_batch fbc = {.n = a.n, .n_seqs = 3, .max_blocks = max_blocks, .n_prompt = a.n_prompt, .ids = a.ids,
                     .pos = a.pos, .seq = a.seq, .slot = a.slot, .tables = a.tables};
    for (int i = 0; i < a.n; i++) fbc.max_len = a.pos[i] + 1 > fbc.max_len ? a.pos[i] + 1 : fbc.max_len;
    fwd_batch fbg = att_batch(x, &a, 0, a.n, a.n_prompt, dev);
    x->C->kv_store(x->cb, a.kpool, a.vpool, k, v, &fbc, a.kv_dim, kv_type);
    x->G->kv_store(x->gb, dk, dv, dkn, dvn, &fbg, a.kv_dim, kv_type);
    uint8_t *gk = host_copy(x, dk, pool), *gv = host_copy(x, dv, pool);
    check(!memcmp(gk, a.kpool, pool) && !memcmp(gv, a.vpool, pool),
          "kv_store %s %d kv heads x %d: pools equal bit for bit", tn, n_kv, hd);
    // the stored rows hold the values: fp16 rounds to half an ulp; a q8 value is
    // within half a step d = amax/127 of its block, plus d's own fp16 rounding (127 · 2^-11 steps)
    double worst = 0;
    for (int i = 0; i < a.n; i++)
        for (int e = 0; e < a.kv_dim; e++) {
            const float *src = k + (size_t)i * a.kv_dim;
            float amax = 0;
            for (int j = e / 32 * 32; j < e / 32 * 32 + 32 && j < a.kv_dim; j++) amax = fmaxf(amax, fabsf(src[j]));
            const double step = kv_type == KV_Q8 ? amax / 127.0 : fmax(fabs(src[e]) / 1024.0, 0x1p-24);
            const double err = fabs(kv_value(&a, a.kpool + (size_t)a.slot[i] * a.row_bytes, e) - src[e]);
            worst = fmax(worst, step > 0 ? err / step : err);
        }
    check(worst <= (kv_type == KV_Q8 ? 0.5 + 127 * 0x1p-11 : 0.5), "kv_store %s %d kv heads x %d: stored values within half a step (worst %.3f)", tn,
          n_kv, hd, worst);
    // attention of the whole pass, against float64 and cpu.c
    float *q = xmalloc(sizeof(float) * a.n * qrow), *oc = xmalloc(sizeof(float) * a.n * qrow);
    for (size_t i = 0; i < a.n * qrow; i++) q[i] = gauss(r);
    float *dq = dev_copy(x, q, sizeof(float) * a.n * qrow);
    x->C->attention(x->cb, oc, q, a.kpool, a.vpool, &fbc, n_heads, n_kv, hd, kv_type, &acc);
    float *og = gpu_attention(x, &a, &acg, dq, dk, dv, 0, a.n, a.n_prompt);
    double *want = xmalloc(sizeof(double) * a.n * qrow);
    for (int i = 0; i < a.n; i++) att_reference(&a, &acc, acc.sinks, q, i, want + i * qrow);
    if (gpu_ok(x, "attention")) {
        const double eg = nmse_d(og, want, a.n * qrow), ec = nmse_d(oc, want, a.n * qrow);
        // cpu.c's fp16 accumulator (as llama.cpp's) reaches ~4e-7; fp32 on the GPU should be far below
        // q8 values are rounded to fp16 in the GPU's tiles: ~1e-8
        check(eg < 1e-6 && ec < 1e-6, "attention %s %d/%d heads x %d, capacity %d: nmse %.3g (cpu %.3g)", tn,
              n_heads, n_kv, hd, max_blocks * KV_BLOCK, eg, ec);
        // invariance: each decode token alone; the prompt cut at 64; a lone prompt token
        int same = 1;
        for (int i = a.n_prompt; i < a.n; i++) {
            float *o1 = gpu_attention(x, &a, &acg, dq, dk, dv, i, 1, 1);
            same &= !memcmp(o1, og + i * qrow, sizeof(float) * qrow);
            free(o1);
        }
        float *p1 = gpu_attention(x, &a, &acg, dq, dk, dv, 0, 64, 64);
        float *p2 = gpu_attention(x, &a, &acg, dq, dk, dv, 64, 6, 6);
        same &= !memcmp(p1, og, sizeof(float) * 64 * qrow) && !memcmp(p2, og + 64 * qrow, sizeof(float) * 6 * qrow);
        float *p3 = gpu_attention(x, &a, &acg, dq, dk, dv, 37, 1, 1);
        same &= !memcmp(p3, og + 37 * qrow, sizeof(float) * qrow);
        free(p1), free(p2), free(p3);
        check(same, "attention %s %d/%d heads x %d: tokens alone, in a prompt cut at 64 and in the pass equal bit "
              "for bit", tn, n_heads, n_kv, hd);
        // a decode pass's attention may leave its output's q8_1 form for the output projection
        void *dev6[5];
        fwd_batch fb = att_batch(x, &a, 64, 6, 6, dev6);
        float *o6 = dev_copy(x, NULL, sizeof(float) * 6 * qrow);
        x->G->attention(x->gb, o6, dq + 64 * qrow, dk, dv, &fb, n_heads, n_kv, hd, kv_type, &acg);
        check(matmul_after_ok(x, r, o6, 6, (int64_t)qrow),
              "attention %s %d/%d heads x %d, then a Q4_0 matmul of its output: equal bit for bit to one of a copy", tn,
              n_heads, n_kv, hd);
        att_batch_free(x, dev6);
        x->G->release(x->gb, o6);
    }
    att_batch_free(x, dev);
    void *bufs[] = {dk, dv, dkn, dvn, dq, dsinks};
    for (int i = 0; i < 6; i++) x->G->release(x->gb, bufs[i]);
    free(k), free(v), free(q), free(oc), free(og), free(want), free(gk), free(gv), free(sinks);
    free(a.kpool), free(a.vpool), free(a.tables);
}

static void test_attention(ctx *x, rng_t *r) {
    const int shapes[][4] = {  // n_heads, n_kv_heads, head_dim, max_blocks
        {8, 4, 8, 32}, {8, 8, 16, 32}, {4, 4, 64, 32}, {32, 8, 128, 64}, {14, 2, 64, 32},
        {16, 8, 128, 1024}, {8, 1, 256, 32}, {24, 8, 80, 32}, {32, 2, 64, 32},
    };
    const int n = x->quick ? 3 : (int)(sizeof shapes / sizeof *shapes);
    for (int i = 0; i < n; i++)
        for (int kt = KV_F16; kt <= KV_Q8; kt++)
            for (int variant = 0; variant < 2; variant++)
                if (kt == KV_F16 || shapes[i][2] % 32 == 0)
                    test_attention_shape(x, r, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], kt, variant);
}

// ---- sampling -----------------------------------------------------------------------------

// sample.c's kept set (top-k → top-p → min-p at temperature 1), then the draw
// in id order over e^((l - max)/temp), as backend.h's `sample` promises.
// Returns the id, or -1 when u falls within a hair of a boundary (an earlier
// version went on walking after such a u and returned a later token: most of
// the draws of a flat 152k-token distribution were misjudged). probe >= 0:
// span gets the kept mass before and through token probe, as fractions of the
// total (where a draw of u lands on probe: span[0] <= u < span[1]).
static int32_t sample_reference(const float *lg, int V, const sample_cfg *sc, double u, int probe, double span[2]) {
    sample_cand *c = xmalloc(sizeof *c * V);
    for (int i = 0; i < V; i++) c[i] = (sample_cand){i, lg[i], 0};
    int32_t best = sample_argmax(c, V);
    if (!(sc->temp > 0)) return free(c), best;
    int n = sample_top_k(c, V, sc->top_k);
    n = sample_top_p(c, n, sc->top_p);
    n = sample_min_p(c, n, sc->min_p);
    char *kept = calloc((size_t)V, 1);
    if (!kept) abort();
    for (int i = 0; i < n; i++) kept[c[i].id] = 1;
    double total = 0;
    for (int i = 0; i < V; i++) if (kept[i]) total += exp((double)(lg[i] - lg[best]) / sc->temp);
    const double target = u * total;
    double cum = 0;
    int32_t id = -1;
    // the device sums in float: a target within 1e-5 of a boundary is too
    // close to call (-2, which ends the walk: a later token must not be taken)
    for (int i = 0; i < V && (id == -1 || i <= probe); i++) {
        if (!kept[i]) continue;
        const double w = exp((double)(lg[i] - lg[best]) / sc->temp);
        if (i == probe) span[0] = cum / total, span[1] = (cum + w) / total;
        if (id == -1 && (fabs(cum + w - target) < 1e-5 * total || fabs(cum - target) < 1e-5 * total)) id = -2;
        else if (id == -1 && cum + w > target) id = i;
        cum += w;
    }
    free(c), free(kept);
    return id == -2 ? -1 : id;
}

static void test_sample(ctx *x, rng_t *r) {
    if (!x->G->sample) return;
    const int vocabs[] = {1000, 151936};
    const sample_cfg cfgs[] = {
        {0, 40, 0.95f, 0.05f}, {0.8f, 40, 0.95f, 0.05f}, {1.0f, 0, 0.9f, 0}, {0.7f, 1, 1, 0},
        {1.2f, 0, 0, 0}, {1.0f, 0, 1, 0.2f}, {0.5f, 7, 1, 0}, {2.0f, 0, 1, 0},
        {0.9f, 100, 0.9f, 0.02f}, {1.0f, 300, 0.95f, 0},  // the largest top-k sorted, and one past it
    };
    for (int vi = 0; vi < 2; vi++) {
        const int V = vocabs[vi];
        float *lg = xmalloc(sizeof(float) * V);
        for (int i = 0; i < V; i++) lg[i] = 3 * gauss(r);
        for (int i = 0; i < 20; i++) lg[(rnd(r) % V)] = 9.5f;  // ties at the top, across top-k's cut
        float *dl = dev_copy(x, lg, sizeof(float) * V);
        for (size_t ci = 0; ci < sizeof cfgs / sizeof *cfgs; ci++) {
            int agree = 0, tried = 0;
            // (fewer draws over the large vocabulary: each sorts 38 chunks, slow under the emulation)
            for (int k = 0; k < (x->quick ? 5 : V > 100000 ? 20 : 60); k++) {
                const double u = (rnd(r) >> 11) * 0x1p-53;
                const int32_t want = sample_reference(lg, V, &cfgs[ci], u, -1, NULL);
                if (want < 0) continue;
                const int32_t got = x->G->sample(x->gb, dl, V, &cfgs[ci], u);
                tried++, agree += got == want;
                if (got != want && tried - agree <= 3) {
                    double span[2] = {-1, -1};
                    sample_reference(lg, V, &cfgs[ci], u, got, span);
                    printf("     u %.17g: cuda %d (where u in [%.9f, %.9f) of the kept mass lands), reference %d\n", u,
                           got, span[0], span[1], want);
                }
            }
            if (gpu_ok(x, "sample"))
                check(agree == tried && tried > 0, "sample %d logits, temp %g top_k %d top_p %g min_p %g: %d/%d draws as the reference",
                      V, cfgs[ci].temp, cfgs[ci].top_k, cfgs[ci].top_p, cfgs[ci].min_p, agree, tried);
        }
        x->G->release(x->gb, dl);
        free(lg);
    }
}

// ---- mixture of experts ---------------------------------------------------------------------

typedef struct {
    int n_exp, k, ffn, dim, n;  // experts, used, expert width, model width, tokens
    uint32_t type;              // the experts' weight type
    int gating, oai;            // enum moe_gating; gpt-oss's biases and clamped SwiGLU
    int nj;                     // the first nj tokens are a prompt's (moe_ffn's n_joint)
    uint32_t up_type;           // up's weight type where it differs from gate's (0: the same)
} moe_case;

// One layer's MoE weights on both backends (router F32, experts of c->type).
typedef struct {
    moe_weights c, g;
    float *bias_host[4];  // router, gate, up, down biases (host; NULL without)
} moe_w;

static qmat moe_bias(ctx *x, rng_t *r, int rows, int cols, float scale, float **host, qmat *gpu) {
    float *b = xmalloc(sizeof(float) * rows * cols);
    for (int i = 0; i < rows * cols; i++) b[i] = scale * gauss(r);
    *host = b;
    qmat q = {.type = Q_F32, .rows = rows, .cols = cols, .row_bytes = 4 * (size_t)cols, .data = b};
    *gpu = q;
    gpu->data = dev_copy(x, b, sizeof(float) * rows * cols);
    return q;
}

static void moe_make(ctx *x, rng_t *r, const moe_case *c, moe_w *w) {
    memset(w, 0, sizeof *w);
    make_weight(x, r, Q_F32, c->n_exp, c->dim, &w->c.router, &w->g.router);
    make_weight(x, r, c->type, (int64_t)c->n_exp * c->ffn, c->dim, &w->c.gate, &w->g.gate);
    make_weight(x, r, c->up_type ? c->up_type : c->type, (int64_t)c->n_exp * c->ffn, c->dim, &w->c.up, &w->g.up);
    make_weight(x, r, c->type, (int64_t)c->n_exp * c->dim, c->ffn, &w->c.down, &w->g.down);
    if (!c->oai) return;
    w->c.router_b = moe_bias(x, r, 1, c->n_exp, 1.0f, &w->bias_host[0], &w->g.router_b);
    w->c.gate_b = moe_bias(x, r, c->n_exp, c->ffn, 0.5f, &w->bias_host[1], &w->g.gate_b);
    w->c.up_b = moe_bias(x, r, c->n_exp, c->ffn, 0.5f, &w->bias_host[2], &w->g.up_b);
    w->c.down_b = moe_bias(x, r, c->n_exp, c->dim, 0.5f, &w->bias_host[3], &w->g.down_b);
}

static void moe_w_free(ctx *x, moe_w *w) {
    const qmat *cm[] = {&w->c.router, &w->c.gate, &w->c.up, &w->c.down};
    for (int i = 0; i < 4; i++) free((void *)cm[i]->data);
    const qmat *gb[] = {&w->g.router_b, &w->g.gate_b, &w->g.up_b, &w->g.down_b};
    for (int i = 0; i < 4; i++)
        if (gb[i]->data) x->G->release(x->gb, (void *)gb[i]->data), free(w->bias_host[i]);
}

static moe_cfg moe_cfg_of(const moe_case *c) {
    return (moe_cfg){.n_exp = c->n_exp, .k = c->k, .ffn = c->ffn, .dim = c->dim, .gating = c->gating,
                     .oai_glu = c->oai, .alpha = 1.702f, .limit = 7.0f};
}

// The float64 reference of the block for token i, with the experts ids[0..k)
// (the CPU's choice, checked against the reference's own where they are clear).
static void moe_reference(const moe_case *c, const moe_w *w, const float *dq[3], const float *xi, const int32_t *ids,
                          double *out) {
    double l[256], wt[16], h[512];
    for (int e = 0; e < c->n_exp; e++) {
        double s = w->bias_host[0] ? w->bias_host[0][e] : 0;
        for (int d = 0; d < c->dim; d++) s += (double)((const float *)w->c.router.data)[e * c->dim + d] * xi[d];
        l[e] = s;
    }
    // both gatings give e^l_j / Σ_chosen e^l (a softmax over all renormalized
    // over the k is one over the k); they differ in rounding only
    double ws = 0;
    for (int j = 0; j < c->k; j++) wt[j] = exp(l[ids[j]] - l[ids[0]]), ws += wt[j];
    for (int j = 0; j < c->k; j++) wt[j] /= ws;
    for (int d = 0; d < c->dim; d++) out[d] = 0;
    for (int j = 0; j < c->k; j++) {
        const int e = ids[j];
        for (int f = 0; f < c->ffn; f++) {
            double gv = 0, uv = 0;
            const int64_t row = (int64_t)e * c->ffn + f;
            for (int d = 0; d < c->dim; d++) gv += (double)dq[0][row * c->dim + d] * xi[d], uv += (double)dq[1][row * c->dim + d] * xi[d];
            if (c->oai) {
                gv += w->bias_host[1][row], uv += w->bias_host[2][row];
                gv = gv < 7 ? gv : 7, uv = uv < -7 ? -7 : uv > 7 ? 7 : uv;
                h[f] = gv / (1 + exp(-1.702 * gv)) * (uv + 1);
            } else {
                h[f] = gv / (1 + exp(-gv)) * uv;
            }
        }
        for (int d = 0; d < c->dim; d++) {
            const int64_t row = (int64_t)e * c->dim + d;
            double y = c->oai ? w->bias_host[3][row] : 0;
            for (int f = 0; f < c->ffn; f++) y += (double)dq[2][row * c->ffn + f] * h[f];
            out[d] += wt[j] * y;
        }
    }
}

// The block on one backend: moe_ffn over x [n, dim] (backend memory); its
// context's buffers stay readable in *mc.
static float *moe_run(const backend_ops *o, backend *be, const moe_case *c, const moe_weights *w, const float *dx,
                      int n, int n_joint, moe_ctx *mc, void **mem) {
    const moe_cfg cfg = moe_cfg_of(c);
    *mem = o->alloc(be, moe_scratch_bytes(&cfg, c->n));
    moe_init(mc, &cfg, o, be, *mem, c->n);
    float *out = o->alloc(be, sizeof(float) * n * c->dim);
    moe_ffn(mc, w, out, dx, n, n_joint);
    return out;
}

// Sorted rows agree between the backends when their maps do: row p of a, of
// width `width`, against b.
static double moe_rows_nmse(ctx *x, const float *cpu, const float *dev, int rows, int width) {
    float *g = host_copy(x, dev, sizeof(float) * rows * width);
    const double e = nmse(g, cpu, (size_t)rows * width);
    free(g);
    return e;
}

static void test_moe_case(ctx *x, rng_t *r, const moe_case *c) {
    char tb[16], tu[16], both[40];
    const char *tn = qtype_name(c->type, tb);
    if (c->up_type) snprintf(both, sizeof both, "%s (up %s)", tn, qtype_name(c->up_type, tu)), tn = both;
    moe_w w;
    moe_make(x, r, c, &w);
    const size_t xb = sizeof(float) * c->n * c->dim;
    float *xv = xmalloc(xb);
    for (int i = 0; i < c->n * c->dim; i++) xv[i] = gauss(r) * 0.5f;
    float *cx = x->C->alloc(x->cb, xb), *gx = dev_copy(x, xv, xb);
    memcpy(cx, xv, xb);
    moe_ctx cm, gm;
    void *cmem, *gmem;
    float *co = moe_run(x->C, x->cb, c, &w.c, cx, c->n, c->nj, &cm, &cmem);
    float *go = moe_run(x->G, x->gb, c, &w.g, gx, c->n, c->nj, &gm, &gmem);
    const int rows = c->n * c->k;
    int32_t *gids = host_copy(x, gm.ids, 4 * (size_t)rows), *gpos = host_copy(x, gm.map.pos, 4 * (size_t)rows);
    int32_t *gtok = host_copy(x, gm.map.tok, 4 * (size_t)rows), *goff = host_copy(x, gm.map.offsets, 4 * (size_t)(c->n_exp + 1));
    int32_t *gact = host_copy(x, gm.map.active, 4 * (size_t)c->n_exp);
    float *gw = host_copy(x, gm.w, 4 * (size_t)rows), *gout = host_copy(x, go, xb);
    if (gpu_ok(x, "moe")) {
        const int same_ids = !memcmp(gids, cm.ids, 4 * (size_t)rows);
        const int same_map = !memcmp(gpos, cm.map.pos, 4 * (size_t)rows) && !memcmp(gtok, cm.map.tok, 4 * (size_t)rows) &&
                             !memcmp(goff, cm.map.offsets, 4 * (size_t)(c->n_exp + 1)) &&
                             !memcmp(gact, cm.map.active, 4 * (size_t)c->n_exp);
        int map_ok = cm.map.offsets[0] == 0 && cm.map.offsets[c->n_exp] == rows;  // the CPU's map is a sorting
        for (int s = 0; s < rows; s++) {
            const int p = cm.map.pos[s], e = cm.ids[s];
            map_ok &= p >= cm.map.offsets[e] && p < cm.map.offsets[e + 1] && cm.map.tok[p] == s / c->k;
        }
        check(same_ids && same_map && map_ok, "moe_route + moe_group %d experts, top %d, %d tokens: ids and map equal "
              "the CPU's, a sorting by expert", c->n_exp, c->k, c->n);
        // (the router's logits are float dot products summed in another order on
        // each backend: relative errors of ~1e-6 are rounding; 1.17e-12 was seen on an H200)
        check(nmse(gw, cm.w, rows) < 1e-10, "moe_route weights (%s): nmse %.3g", c->gating ? "top-k softmax" : "softmax, renormalized",
              nmse(gw, cm.w, rows));
        if (same_ids && same_map) {
            const double eg = moe_rows_nmse(x, cm.g, gm.g, rows, c->ffn), ey = moe_rows_nmse(x, cm.y, gm.y, rows, c->dim);
            check(eg < mm_threshold(c->type) && ey < mm_threshold(c->type),
                  "moe_matmul %s experts %dx%d, %s: gate/up+glu nmse %.3g, down nmse %.3g", tn, c->ffn, c->dim,
                  c->oai ? "biases, clamped swiglu" : "silu", eg, ey);
        }
        // both against the float64 reference, with the CPU's choice of experts
        const float *dq[3] = {dequantized(&w.c.gate), dequantized(&w.c.up), dequantized(&w.c.down)};
        double *want = xmalloc(sizeof(double) * c->n * c->dim);
        for (int i = 0; i < c->n; i++) moe_reference(c, &w, dq, xv + (size_t)i * c->dim, cm.ids + (size_t)i * c->k, want + (size_t)i * c->dim);
        const double ec = nmse_d(co, want, (size_t)c->n * c->dim), eg = nmse_d(gout, want, (size_t)c->n * c->dim);
        check(ec < 2 * mm_threshold(c->type) && eg < 2 * mm_threshold(c->type),
              "moe block %s, %d tokens vs float64: cpu nmse %.3g, device %.3g", tn, c->n, ec, eg);
        for (int i = 0; i < 3; i++) free((void *)dq[i]);
        free(want);
        // each decode row computed as alone: token t through the block by itself
        int same = 1;
        for (int t = c->nj; t < c->n; t += (c->n - c->nj) / 3 + 1) {
            moe_ctx m1;
            void *mem1;
            float *o1 = moe_run(x->G, x->gb, c, &w.g, gx + (size_t)t * c->dim, 1, 0, &m1, &mem1);
            float *h1 = host_copy(x, o1, sizeof(float) * c->dim);
            same &= !memcmp(h1, gout + (size_t)t * c->dim, sizeof(float) * c->dim);
            x->G->release(x->gb, o1), x->G->release(x->gb, mem1), free(h1);
        }
        if (c->n - c->nj > 1)
            check(same, "moe block %s: each of %d decode tokens (after %d prompt tokens) alone equals its row of the "
                  "batch, bit for bit", tn, c->n - c->nj, c->nj);
        if (c->nj) {  // the prompt's rows took the prompt path (fp16 GEMMs): not the decode path's bits
            moe_ctx md;
            void *memd;
            float *od = moe_run(x->G, x->gb, c, &w.g, gx, c->n, 0, &md, &memd);
            float *hd = host_copy(x, od, xb);
            int differ = 0;
            for (int t = 0; t < c->nj; t++) differ += memcmp(hd + (size_t)t * c->dim, gout + (size_t)t * c->dim, sizeof(float) * c->dim) != 0;
            check(differ > 0 || x->G == x->C, "moe block %s, a prompt of %d tokens: %d of its rows by the prompt path "
                  "(they differ from the decode path's)", tn, c->nj, differ);
            x->G->release(x->gb, od), x->G->release(x->gb, memd), free(hd);
        }
    }
    x->C->release(x->cb, cx), x->C->release(x->cb, co), x->C->release(x->cb, cmem);
    x->G->release(x->gb, gx), x->G->release(x->gb, go), x->G->release(x->gb, gmem);
    free(gids), free(gpos), free(gtok), free(goff), free(gact), free(gw), free(gout), free(xv);
    moe_w_free(x, &w);
}

// The decode step's MoE block recorded once and replayed on new input: the
// device picks other experts without the host.
static void test_moe_graph(ctx *x, rng_t *r) {
    if (!x->G->graph_begin) return;
    const moe_case c = {8, 2, 256, 256, 1, Q_Q4_K, MOE_SOFTMAX_NORM, 0, 0, 0};
    moe_w w;
    moe_make(x, r, &c, &w);
    float xv[256];
    for (int i = 0; i < 256; i++) xv[i] = gauss(r);
    float *dx = dev_copy(x, xv, sizeof xv);
    moe_ctx m;
    void *mem;
    char err[ERR_LEN] = "";
    float *out = moe_run(x->G, x->gb, &c, &w.g, dx, 1, 0, &m, &mem);  // sizes the scratch
    int ok = x->G->graph_begin(x->gb, 5, err) == 0;
    moe_ffn(&m, &w.g, out, dx, 1, 0);
    ok = ok && x->G->graph_end(x->gb, 5, err) == 0;
    int same = 1, moved = 0;
    int32_t ids0[2];
    x->G->to_host(x->gb, ids0, m.ids, sizeof ids0);
    for (int rep = 0; rep < 4 && ok; rep++) {
        for (int i = 0; i < 256; i++) xv[i] = gauss(r);
        x->G->to_device(x->gb, dx, xv, sizeof xv);
        ok = x->G->graph_replay(x->gb, 5, err) == 0;
        float *yr = host_copy(x, out, sizeof xv);
        int32_t ids[2];
        x->G->to_host(x->gb, ids, m.ids, sizeof ids);
        moved |= memcmp(ids, ids0, sizeof ids) != 0;
        moe_ffn(&m, &w.g, out, dx, 1, 0);
        float *yd = host_copy(x, out, sizeof xv);
        same &= !memcmp(yr, yd, sizeof xv);
        free(yr), free(yd);
    }
    check(ok && same && moved && gpu_ok(x, "moe graph"), "moe graph: replays on new input choose other experts and equal "
          "the block run directly%s%s", ok ? "" : ": ", ok ? "" : err);
    x->G->release(x->gb, dx), x->G->release(x->gb, out), x->G->release(x->gb, mem);
    moe_w_free(x, &w);
}

// silu(g)·u against float64, each value within 1e-6 of the reference (relative;
// cpu.c's silu is a polynomial, not libm's expf): gaussian g, then g where the
// exponent's range ends (|g| near 87, where cpu.c clamps, and far beyond) and
// tiny ones; a length that is no multiple of a vector; out == gate.
static void test_swiglu(ctx *x, rng_t *r) {
    static const float edge[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-7f, -1e-7f, 0.5f, -0.5f, 10, -10, 20, -20, 30, -30, 80,
                                 -80, 86.9f, -86.9f, 87, -87, 87.1f, -87.1f, 88, -88, 89, -89, 100, -100, 1e4f, -1e4f,
                                 1e30f, -1e30f};
    const size_t len = 100003, n_edge = sizeof edge / sizeof *edge;
    float *g = xmalloc(4 * len), *u = xmalloc(4 * len), *o = xmalloc(4 * len);
    for (size_t i = 0; i < len; i++) g[i] = i < n_edge ? edge[i] : gauss(r) * 6, u[i] = gauss(r);
    float *dg = dev_copy(x, g, 4 * len), *du = dev_copy(x, u, 4 * len);
    memcpy(o, g, 4 * len);
    x->C->swiglu(x->cb, o, o, u, 1, (int64_t)len);
    x->G->swiglu(x->gb, dg, dg, du, 1, (int64_t)len);
    float *got = host_copy(x, dg, 4 * len);
    double worst_c = 0, worst_g = 0;
    size_t at_c = 0, at_g = 0;
    for (size_t i = 0; i < len; i++) {
        const double want = g[i] / (1 + exp(-(double)g[i])) * u[i], tol = 1e-6 * fabs(want) + 1e-30;
        const double ec = fabs(o[i] - want) / tol, eg = fabs(got[i] - want) / tol;
        if (!(ec <= worst_c)) worst_c = ec, at_c = i;  // NaN counts as the worst
        if (!(eg <= worst_g)) worst_g = eg, at_g = i;
    }
    if (gpu_ok(x, "swiglu"))
        check(worst_c <= 1 && worst_g <= 1,
              "swiglu over %zu vs float64: worst error %.2g of the tolerance at g = %g (cpu), %.2g at g = %g (device)", len,
              worst_c, g[at_c], worst_g, g[at_g]);
    x->G->release(x->gb, dg), x->G->release(x->gb, du);
    free(g), free(u), free(o), free(got);
}

static void test_swiglu_oai(ctx *x, rng_t *r) {
    const size_t len = 100003;
    float *g = xmalloc(4 * len), *u = xmalloc(4 * len), *o = xmalloc(4 * len);
    for (size_t i = 0; i < len; i++) g[i] = gauss(r) * 6, u[i] = gauss(r) * 6;
    float *dg = dev_copy(x, g, 4 * len), *du = dev_copy(x, u, 4 * len);
    x->C->swiglu_oai(x->cb, o, g, u, len, 1.702f, 7.0f);
    x->G->swiglu_oai(x->gb, dg, dg, du, len, 1.702f, 7.0f);
    float *got = host_copy(x, dg, 4 * len);
    double *want = xmalloc(8 * len);
    for (size_t i = 0; i < len; i++) {
        const double gv = g[i] < 7 ? g[i] : 7, uv = u[i] < -7 ? -7 : u[i] > 7 ? 7 : u[i];
        want[i] = gv / (1 + exp(-1.702 * gv)) * (uv + 1);
    }
    if (gpu_ok(x, "swiglu_oai"))
        check(nmse_d(got, want, len) < 1e-12 && nmse_d(o, want, len) < 1e-12,
              "swiglu_oai over %zu (clamps at 7 biting): nmse %.3g (cpu %.3g)", len, nmse_d(got, want, len),
              nmse_d(o, want, len));
    x->G->release(x->gb, dg), x->G->release(x->gb, du);
    free(g), free(u), free(o), free(got), free(want);
}

static void test_moe(ctx *x, rng_t *r) {
    const moe_case all[] = {
        {8, 2, 128, 256, 1, Q_Q8_0, MOE_SOFTMAX_NORM, 0, 0, 0},   {8, 2, 256, 256, 37, Q_Q4_K, MOE_SOFTMAX_NORM, 0, 0, 0},
        {8, 2, 128, 256, 5, Q_Q5_0, MOE_SOFTMAX_NORM, 0, 0, 0},   {8, 2, 128, 128, 9, Q_MXFP4, MOE_TOPK_SOFTMAX, 1, 0, 0},
        {40, 8, 256, 256, 3, Q_Q6_K, MOE_SOFTMAX_NORM, 0, 0, 0},  {128, 8, 32, 256, 70, Q_Q4_0, MOE_SOFTMAX_NORM, 0, 0, 0},
        {8, 8, 32, 128, 2, Q_F16, MOE_TOPK_SOFTMAX, 1, 0, 0},
        // prompts (the first nj tokens): experts with enough prompt rows by GEMM, in runs of experts
        {40, 8, 256, 256, 64, Q_Q4_K, MOE_SOFTMAX_NORM, 0, 56, 0}, {8, 2, 128, 128, 48, Q_MXFP4, MOE_TOPK_SOFTMAX, 1, 48, 0},
        // gate and up of different types: one moe_matmul call, a launch each
        {8, 2, 256, 256, 40, Q_Q4_K, MOE_SOFTMAX_NORM, 0, 36, Q_Q5_K},
    };
    const int n_cases = x->quick ? 2 : (int)(sizeof all / sizeof *all);
    for (int i = 0; i < n_cases; i++) test_moe_case(x, r, &all[i]);
    test_swiglu(x, r);
    test_swiglu_oai(x, r);
    test_moe_graph(x, r);
}

// ---- graphs, upload errors, limits ------------------------------------------------------------

static void test_graph(ctx *x, rng_t *r) {
    if (!x->G->graph_begin) return;
    const int64_t rows = 300, cols = 512;
    qmat wc, wg;
    make_weight(x, r, Q_Q4_K, rows, cols, &wc, &wg);
    float g[512], xv[2 * 512];
    for (int i = 0; i < 512; i++) g[i] = 1 + 0.1f * gauss(r);
    for (int i = 0; i < 2 * 512; i++) xv[i] = gauss(r);
    qmat nw = {.type = Q_F32, .rows = 1, .cols = cols, .row_bytes = 4 * cols, .data = dev_copy(x, g, sizeof g)};
    float *dx = dev_copy(x, xv, sizeof xv), *dn = dev_copy(x, NULL, sizeof xv), *dy = dev_copy(x, NULL, 4 * 2 * rows);
    char err[ERR_LEN];
    // warm up (scratch), record, then replay on new input
    x->G->rmsnorm(x->gb, dn, dx, &nw, 2, cols, 1e-5f), x->G->matmul(x->gb, dy, &wg, dn, 2, 0);
    int ok = x->G->graph_begin(x->gb, 3, err) == 0;
    x->G->rmsnorm(x->gb, dn, dx, &nw, 2, cols, 1e-5f), x->G->matmul(x->gb, dy, &wg, dn, 2, 0);
    ok = ok && x->G->graph_end(x->gb, 3, err) == 0;
    for (int i = 0; i < 2 * 512; i++) xv[i] = gauss(r);
    x->G->to_device(x->gb, dx, xv, sizeof xv);
    ok = ok && x->G->graph_replay(x->gb, 3, err) == 0;
    float *yr = host_copy(x, dy, 4 * 2 * rows);
    x->G->rmsnorm(x->gb, dn, dx, &nw, 2, cols, 1e-5f), x->G->matmul(x->gb, dy, &wg, dn, 2, 0);
    float *yd = host_copy(x, dy, 4 * 2 * rows);
    check(ok && gpu_ok(x, "graph") && !memcmp(yr, yd, 4 * 2 * rows), "graph: a replay on new input equals the ops run directly%s%s",
          ok ? "" : ": ", ok ? "" : err);
    // a much bigger matmul (its fp16 activations alone: 16 MiB, more than any
    // op before asked for) grows the scratch: the recorded graph is dropped, replay says so
    enum { BIG = 16384 };
    float *big = dev_copy(x, NULL, sizeof(float) * BIG * cols), *ybig = dev_copy(x, NULL, sizeof(float) * BIG * rows);
    x->G->matmul(x->gb, ybig, &wg, big, BIG, BIG);
    check(x->G->graph_replay(x->gb, 3, err) != 0, "graph: stale after the scratch grew (%s)", err);
    void *bufs[] = {(void *)nw.data, dx, dn, dy, big, ybig};
    for (int i = 0; i < 6; i++) x->G->release(x->gb, bufs[i]);
    free(yr), free(yd), free((void *)wc.data);
}

static void test_upload_errors(ctx *x) {
    if (x->G == x->C) return;  // cpu.c takes any weight as it is
    uint8_t blk[84] = {0};
    qmat w = {.type = 16 /* IQ2_XXS */, .rows = 1, .cols = 256, .row_bytes = 66, .data = blk};
    char err[ERR_LEN] = "";
    check(x->G->upload(x->gb, &w, err) != 0 && strstr(err, "IQ2_XXS"), "upload of an IQ2_XXS weight fails naming the type (%s)",
          err);
}

static void test_roofline(ctx *x) {
    if (!x->G->roofline || x->G == &cpu_backend) return;  // the device limits (the CPU measures no GEMM peak)
#ifdef QUILL_SIMT
    printf("skip roofline: the SIMT emulation has no device limits to measure\n");
    return;
#endif
    double bw = 0, flops = 0;
    char err[ERR_LEN] = "";
    const int rc = x->G->roofline(x->gb, &bw, &flops, err);
    check(rc == 0 && bw > 1e11 && flops > 1e13, "roofline: %.0f GB/s device memory, %.1f TFLOP/s bf16 GEMM %s", bw / 1e9,
          flops / 1e12, err);
}

int main(int argc, char **argv) {
    ctx x = {.C = &cpu_backend, .G = &cuda_backend, .quick = argc > 1 && !strcmp(argv[1], "--quick")};
    char err[ERR_LEN], why[ERR_LEN];
    if (cuda_host_selftest(stdout, err)) {
        printf("FAIL host self-test: %s\n", err);
        return 1;
    }
    const char *dev = getenv("QUILL_TEST_DEVICE");
    if (dev && !strcmp(dev, "cpu")) {
        x.G = &cpu_backend;
        printf("QUILL_TEST_DEVICE=cpu: the device side runs on cpu.c (a check of this test)\n");
    } else if (cuda_device_count(why) <= 0) {
        printf("skipped: no CUDA device (%s); the GPU tests need one (make test-cuda)\n", why);
        return 0;
    }
    if (x.C->init(&x.cb, 0, err) || x.G->init(&x.gb, 0, err)) {
        printf("FAIL backend init: %s\n", err);
        return 1;
    }
    printf("cpu: %s\ncuda: %s\n", x.C->describe(x.cb), x.G->describe(x.gb));
    rng_t r = {0x9e3779b97f4a7c15ull};
    test_embed(&x, &r);
    test_rmsnorm(&x, &r);
    test_add_rmsnorm(&x, &r);
    test_elementwise(&x, &r);
    test_rope(&x, &r);
    test_matmul(&x, &r);
    test_attention(&x, &r);
    test_sample(&x, &r);
    test_moe(&x, &r);
    test_graph(&x, &r);
    test_upload_errors(&x);
    if (!x.quick) test_roofline(&x);
    check(gpu_ok(&x, "end"), "the device backend reports no failure at the end");
    x.G->free(x.gb);
    x.C->free(x.cb);
    printf("%d checks, %d failed\n", n_checks, n_failed);
    return n_failed ? 1 : 0;
}
#endif
