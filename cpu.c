// cpu.c — the CPU backend: the reference implementation of backend.h.
//
// Threads: a pool (threads.c) of the thread count fixed at init. Work is
// claimed in chunks as threads go, so a thread that another process slows
// down does less of it. Matrix products hand out chunks of weight rows (a
// memory-bound decode streams each chunk once; a compute-bound prefill runs
// every token tile over a chunk while it is in cache). Attention
// (cpu_attention.c) hands out (token, slice of heads) items, or for a
// decode (token, slice, range of keys) items whose states it then merges.
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SSE__)
#include <immintrin.h>
#endif

#include "backend.h"
#include "cpu_attention.h"
#include "mapping.h"
#include "moe.h"
#include "quant.h"
#include "threads.h"
#include "util.h"

// Fresh anonymous memory in 2 MiB pages (map_anon), `used` bytes of it
// taken. The weights' interleaved copies are taken in order from arenas of
// X8_ARENA bytes: from aligned_alloc, a quarter of the 1B Q4_K_M's copies
// came back in 4 KiB pages (memory malloc had touched before), a TLB miss
// every 4 KiB of a decode's stream.
#define X8_ARENA ((size_t)256 << 20)
typedef struct {
    uint8_t *base;
    size_t size, used;
} anon_block;

// Scratch buffers that grow on demand; never shrink until free.
enum { SCR_ACT, SCR_ATT, SCR_COUNT };  // activations' q8 copies; attention's split states

struct backend {
    int n_threads;
    tpool *pool;
    void *scr[SCR_COUNT];
    size_t scr_cap[SCR_COUNT];
    anon_block *x8;  // [n_x8] where the weights' interleaved copies live (cpu_upload), freed with the backend
    size_t n_x8;
    anon_block *big; // [n_big] what cpu_alloc took from map_anon and cpu_release has not given back
    size_t n_big;
    char desc[96];
};

static void *scratch(backend *b, int which, size_t bytes) {
    if (bytes > b->scr_cap[which]) {
        free(b->scr[which]);
        b->scr[which] = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        b->scr_cap[which] = b->scr[which] ? bytes : 0;
    }
    return b->scr[which];
}

static int cpu_init(backend **out, int n_threads, char *err) {
    backend *b = calloc(1, sizeof *b);
    if (!b) return errf(err, "out of memory");
    b->n_threads = n_threads > 0 ? n_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (b->n_threads < 1) b->n_threads = 1;
    if (!(b->pool = tp_create(b->n_threads))) {
        free(b);
        return errf(err, "cannot start %d threads: %s", n_threads, strerror(errno));
    }
    snprintf(b->desc, sizeof b->desc, "cpu, %d thread%s, %s", b->n_threads,
             b->n_threads == 1 ? "" : "s", q_simd_name());
    *out = b;
    return 0;
}

static void cpu_free(backend *b) {
    if (!b) return;
    tp_free(b->pool);
    for (int i = 0; i < SCR_COUNT; i++) free(b->scr[i]);
    for (size_t i = 0; i < b->n_x8; i++) map_anon_free(b->x8[i].base, b->x8[i].size);
    free(b->x8);
    for (size_t i = 0; i < b->n_big; i++) map_anon_free(b->big[i].base, b->big[i].size);
    free(b->big);
    free(b);
}

static const char *cpu_describe(backend *b) { return b->desc; }
// Allocations of 2 MiB or more (the KV cache, the activations) from
// map_anon, whole in 2 MiB pages where the kernel gives them: a decode step
// reads the slice of each KV row that a thread's heads need, rows 1 KiB or
// more apart, and in 4 KiB pages (calloc's; the cache was a pool of 1.2 MB
// for each layer, K and V) a TLB miss every few rows: at 1,000 positions
// the 1B's decode spent ~10% more time in attention (perf samples, Emerald
// Rapids VM).
static void *cpu_alloc(backend *b, size_t bytes) {
    if (bytes < HUGE_PAGE) return calloc(1, bytes ? bytes : 1);
    anon_block *list = realloc(b->big, (b->n_big + 1) * sizeof *list);
    if (!list) return NULL;
    b->big = list;
    void *p = map_anon(bytes);
    if (p) b->big[b->n_big++] = (anon_block){p, bytes, bytes};
    return p;
}

static void cpu_release(backend *b, void *p) {
    for (size_t i = 0; i < b->n_big; i++)
        if (b->big[i].base == p) {
            map_anon_free(p, b->big[i].size);
            b->big[i] = b->big[--b->n_big];
            return;
        }
    free(p);
}
static size_t cpu_mem_available(backend *b) { (void)b; return mem_available(); }
static void cpu_copy(backend *b, void *dst, const void *src, size_t n) { (void)b; memcpy(dst, src, n); }

typedef struct {
    const qmat *w;
    void *copy;
} x8_job;

static void x8_pack_groups(void *ctx, int64_t g0, int64_t g1) {
    const x8_job *j = ctx;
    q_x8_pack(j->w->type, j->w->cols, j->w->rows, g0, g1, j->w->data, j->copy);
}

// A weight that this build's kernels read faster with 8 rows interleaved
// (quant.h's x8) is copied once into that layout (the caller may drop the
// original); the others are read from the mapping as they are.
static int cpu_upload(backend *b, qmat *w, char *err) {
    if (w->lookup || !q_x8_wanted(w->type) || w->row_bytes != qtype_row_bytes(w->type, w->cols)) return 0;
    const size_t bytes = (q_x8_bytes(w->type, w->rows, w->cols) + 63) & ~(size_t)63;
    anon_block *a = b->n_x8 ? &b->x8[b->n_x8 - 1] : NULL;
    if (!a || a->size - a->used < bytes) {
        anon_block *list = realloc(b->x8, (b->n_x8 + 1) * sizeof *list);
        if (!list) return errf(err, "out of memory");
        b->x8 = list;
        a = &list[b->n_x8];
        a->size = bytes > X8_ARENA ? bytes : X8_ARENA;
        a->used = 0;
        if (!(a->base = map_anon(a->size)))
            return errf(err, "out of memory: %zu bytes for a weight's interleaved copy", bytes);
        b->n_x8++;
    }
    void *copy = a->base + a->used;
    a->used += bytes;
    x8_job j = {w, copy};
    tp_for(b->pool, (w->rows + 7) / 8, 64, 1, x8_pack_groups, &j);
    w->data = copy;
    w->x8 = 1;
    return 0;
}

static void cpu_embed(backend *b, float *out, const qmat *emb, const int32_t *ids, int n) {
    (void)b;
    for (int i = 0; i < n; i++) {
        float *o = out + (size_t)i * emb->cols;
        if (emb->x8) q_x8_dequantize_row(emb->type, emb->cols, emb->data, ids[i], o);
        else q_dequantize_row(emb->type, (const uint8_t *)emb->data + (size_t)ids[i] * emb->row_bytes, o, emb->cols);
    }
}

typedef struct {
    float *out;
    const float *x, *g;
    int dim;
    float eps;
    float *acc;       // add_rmsnorm: acc (== x) += d first
    const float *d;
} rmsnorm_job;

// Sums in double like ggml, so norms of wide rows do not lose bits.
static void rmsnorm_rows(void *ctx, int64_t i0, int64_t i1) {
    const rmsnorm_job *j = ctx;
    const int dim = j->dim;
    for (int64_t i = i0; i < i1; i++) {
        if (j->d)
            for (int e = 0; e < dim; e++) j->acc[(size_t)i * dim + e] += j->d[(size_t)i * dim + e];
        const float *xi = j->x + (size_t)i * dim;
        float *oi = j->out + (size_t)i * dim;
        double ss = 0;
        for (int e = 0; e < dim; e++) ss += (double)(xi[e] * xi[e]);  // float square, double sum (ggml)
        float scale = 1.0f / sqrtf((float)(ss / dim) + j->eps);
        for (int e = 0; e < dim; e++) oi[e] = xi[e] * scale * j->g[e];
    }
}

static void cpu_rmsnorm(backend *b, float *out, const float *x, const qmat *w, int n, int dim,
                        float eps) {
    rmsnorm_job j = {out, x, w->data, dim, eps, NULL, NULL};
    tp_for(b->pool, n, 8, 1, rmsnorm_rows, &j);
}

static void cpu_add_rmsnorm(backend *b, float *out, float *x, const float *d, const qmat *w, int n, int dim,
                            float eps) {
    rmsnorm_job j = {out, x, w->data, dim, eps, x, d};
    tp_for(b->pool, n, 8, 1, rmsnorm_rows, &j);
}

// Token tile and row chunk: in a prefill, a chunk of MM_ROW_TILE rows (≈ 64
// rows × a row's bytes) stays in cache while every token tile passes over it.
#define MM_TOK_TILE PREFILL_TILE
#define MM_ROW_TILE 64

typedef struct {
    float *y;
    const qmat *w;
    const float *x;
    uint8_t *xq;   // [n] activation rows, arow bytes each
    size_t arow;
    int n, n_joint;
} matmul_job;

static void quantize_rows(void *ctx, int64_t t0, int64_t t1) {
    const matmul_job *j = ctx;
    for (int64_t t = t0; t < t1; t++)
        q_quantize_act(j->w->type, j->x + (size_t)t * j->w->cols, j->xq + (size_t)t * j->arow, j->w->cols);
}

// q_matmul over rows [r0, r1) of w, in whichever layout it has.
static void weight_rows(const qmat *w, int64_t r0, int64_t r1, const uint8_t *xq, size_t xs, int nt, int joint,
                        float *y, size_t ldy) {
    if (w->x8) q_matmul_x8(w->type, w->cols, w->data, r0, (int)(r1 - r0), xq, xs, nt, joint, y, ldy);
    else q_matmul(w->type, w->cols, (const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, (int)(r1 - r0),
                  xq, xs, nt, joint, y, ldy);
}

// Weight rows [r0, r1) against every token.
static void matmul_rows(void *ctx, int64_t r0, int64_t r1) {
    const matmul_job *j = ctx;
    const qmat *w = j->w;
    for (int t0 = 0; t0 < j->n; t0 += MM_TOK_TILE) {
        const int ntok = j->n - t0 < MM_TOK_TILE ? j->n - t0 : MM_TOK_TILE;
        const int joint = j->n_joint - t0 < 0 ? 0 : j->n_joint - t0;
        weight_rows(w, r0, r1, j->xq + (size_t)t0 * j->arow, j->arow, ntok, joint, j->y + (size_t)t0 * w->rows + r0,
                    (size_t)w->rows);
    }
}

// A parallel section's chunks of weight rows: a prefill's are row tiles; a
// decode's at least 16 rows and 32 KiB.
static int64_t matmul_chunk(const qmat *w, int n) {
    if (n != 1) return MM_ROW_TILE;
    const int64_t min = ((int64_t)(32768 / w->row_bytes) + 15) & ~(int64_t)15;
    return min < 16 ? 16 : min;
}

// What a chunk's rows are a multiple of: 16 in a decode, a row tile in a prefill.
static int64_t matmul_align(int n) { return n == 1 ? 16 : MM_ROW_TILE; }

// matmul_section's matrices as one row range: rows first[i] .. first[i+1]-1 are w[i]'s.
typedef struct {
    matmul_job j[3];
    int64_t first[4];
    int k;
} matmul_set_job;

static void matmul_set_rows(void *ctx, int64_t r0, int64_t r1) {
    const matmul_set_job *s = ctx;
    for (int i = 0; i < s->k; i++) {
        const int64_t a = r0 > s->first[i] ? r0 : s->first[i], e = r1 < s->first[i + 1] ? r1 : s->first[i + 1];
        if (a < e) matmul_rows((void *)&s->j[i], a - s->first[i], e - s->first[i]);
    }
}

// y[i] = x · w[i]ᵀ for k <= 3 matrices of one width, in one parallel section
// over their rows after one quantization of x for each type among them. The
// rows of every matrix but the last must be a multiple of the chunk
// alignment (so each starts on one): every chunk is then cut where a matrix
// alone would cut it, and the bits do not depend on the company.
static void matmul_section(backend *b, float *const y[], const qmat *const w[], int k, const float *x, int n,
                           int n_joint) {
    matmul_set_job s = {.k = k};
    size_t at[3], arow[3], bytes = 0;  // where each matrix's quantized x starts in the scratch; its rows' bytes
    int own[3];                        // whether it is the first of its type (and quantizes x)
    int64_t chunk = INT64_MAX;
    for (int i = 0; i < k; i++) {
        int j = 0;
        while (w[j]->type != w[i]->type) j++;
        own[i] = j == i;
        arow[i] = q_act_row_bytes(w[i]->type, w[i]->cols);
        at[i] = own[i] ? bytes : at[j];
        if (own[i]) bytes += arow[i] * (size_t)n;
        s.first[i + 1] = s.first[i] + w[i]->rows;
        const int64_t c = matmul_chunk(w[i], n);
        if (c < chunk) chunk = c;
    }
    uint8_t *xq = scratch(b, SCR_ACT, bytes);
    for (int i = 0; i < k; i++) {
        s.j[i] = (matmul_job){y[i], w[i], x, xq + at[i], arow[i], n, n_joint};
        if (own[i]) tp_for(b->pool, n, 4, 1, quantize_rows, &s.j[i]);
    }
    tp_for(b->pool, s.first[k], chunk, matmul_align(n), matmul_set_rows, &s);
}

static void cpu_matmul(backend *b, float *y, const qmat *w, const float *x, int n, int n_joint) {
    matmul_section(b, &y, &w, 1, x, n, n_joint);
}

// backend.h's matmul_set (k <= 3): one matmul_section, or where a matrix
// other than the last has a partial chunk of rows, a cpu_matmul each.
static void cpu_matmul_set(backend *b, float *const y[], const qmat *const w[], int k, const float *x, int n,
                           int n_joint) {
    for (int i = 0; i + 1 < k; i++)
        if (w[i]->rows % matmul_align(n)) {
            for (int j = 0; j < k; j++) cpu_matmul(b, y[j], w[j], x, n, n_joint);
            return;
        }
    matmul_section(b, y, w, k, x, n, n_joint);
}

static void cpu_add_bias(backend *b, float *y, const qmat *bias, int n, int dim) {
    (void)b;
    const float *bv = bias->data;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < dim; j++) y[(size_t)i * dim + j] += bv[j];
}

static void cpu_add(backend *b, float *y, const float *x, size_t len) {
    (void)b;
    for (size_t i = 0; i < len; i++) y[i] += x[i];
}

typedef struct {
    float *out;
    const float *gate, *up;
} swiglu_job;

// silu(g) = g / (1 + e^-g) without a call into libm, so that the loop below vectorizes (glibc's
// expf costs 3-9 ns a value: ~25 µs in each layer of a 1B model's decode step, against ~5 µs here).
// e^-|g| by Cody-Waite reduction and Cephes' degree-5 polynomial (within 2.3e-7 of expf for
// |g| < 87; from 87 on, and for NaN, it is taken as 0: silu is then g or -0, and NaN stays
// NaN), then σ(g) = 1/(1 + e^-g) for g ≥ 0 and e^g/(1 + e^g) for g < 0. Branch-free; with no
// a * b + c contracted (gcc's -std=c11), the AVX-512, AVX2 and portable builds compute the same bits.
static float silu_f32(float g) {
    const uint32_t gb = f32_bits(g), ab = gb & 0x7fffffffu, keep = ab < 0x42ae0000u ? ~0u : 0;  // |g| < 87.0f
    const float x = -bits_f32(ab & keep);
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f; // round(x / ln 2)
    float f = x - n * 0.693359375f;
    f = f + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * f + 1.3981999507e-3f;
    p = p * f + 8.3334519073e-3f;
    p = p * f + 4.1665795894e-2f;
    p = p * f + 1.6666665459e-1f;
    p = p * f + 5.0000001201e-1f;
    const float e = (p * (f * f) + f + 1.0f) * bits_f32((uint32_t)((int32_t)n + 127) << 23); // e^-|g|
    const uint32_t neg = (uint32_t)((int32_t)gb >> 31);
    const uint32_t tb = f32_bits(e) & keep;
    const float t = bits_f32(tb);
    const float num = bits_f32((tb & neg) | (0x3f800000u & ~neg)); // g < 0 ? t : 1
    return g * (num / (1.0f + t));
}

static void swiglu_range(void *ctx, int64_t i0, int64_t i1) {
    const swiglu_job *j = ctx;
    // out may be gate itself: a block goes through a local array, so no alias check stops gcc
    // from vectorizing
    enum { BLOCK = 16 };
    int64_t i = i0;
    for (; i + BLOCK <= i1; i += BLOCK) {
        float r[BLOCK];
        for (int k = 0; k < BLOCK; k++) r[k] = silu_f32(j->gate[i + k]) * j->up[i + k];
        memcpy(j->out + i, r, sizeof r);
    }
    for (; i < i1; i++) j->out[i] = silu_f32(j->gate[i]) * j->up[i];
}

static void cpu_swiglu(backend *b, float *out, const float *gate, const float *up, int n, int64_t cols) {
    swiglu_job j = {out, gate, up};
    tp_for(b->pool, (int64_t)n * cols, 2048, 64, swiglu_range, &j);
}

// ---- mixture of experts ---------------------------------------------------------

typedef struct {
    int32_t *ids;
    float *w;
    const float *logits;
    int n_exp, k, gating;
} moe_route_job;

static void moe_route_range(void *ctx, int64_t i0, int64_t i1) {
    const moe_route_job *j = ctx;
    moe_route_rows(j->ids + i0 * j->k, j->w + i0 * j->k, j->logits + i0 * j->n_exp, (int)(i1 - i0), j->n_exp, j->k,
                   j->gating);
}

static void cpu_moe_route(backend *b, int32_t *ids, float *w, const float *logits, int n, int n_exp, int k,
                          int gating) {
    moe_route_job j = {ids, w, logits, n_exp, k, gating};
    tp_for(b->pool, n, 16, 1, moe_route_range, &j);
}

static void cpu_moe_group(backend *b, const moe_map *mp, const int32_t *ids) {
    (void)b;
    moe_group_rows(mp, ids);
}

typedef struct {
    float *y;
    const qmat *w, *bias;
    const float *x;
    int by_token;
    const moe_map *mp;
    uint8_t *xq;      // [n_rows] activation rows in sorted order, arow bytes each
    size_t arow;
    int64_t per_exp;  // weight rows per expert
    int64_t chunk;    // weight rows per work item
    int64_t chunks;   // work items per expert
} moe_mm_job;

static void moe_quantize_rows(void *ctx, int64_t p0, int64_t p1) {
    const moe_mm_job *j = ctx;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t src = j->by_token ? j->mp->tok[p] : p;
        q_quantize_act(j->w->type, j->x + (size_t)src * j->w->cols, j->xq + (size_t)p * j->arow, j->w->cols);
    }
}

// Items [i0, i1): item i is chunk i % chunks of the weight rows of the
// (i / chunks)-th active expert, against all of that expert's rows.
static void moe_matmul_items(void *ctx, int64_t i0, int64_t i1) {
    const moe_mm_job *j = ctx;
    const qmat *w = j->w;
    for (int64_t i = i0; i < i1; i++) {
        const int e = j->mp->active[i / j->chunks];
        const int64_t r0 = i % j->chunks * j->chunk, r1 = r0 + j->chunk < j->per_exp ? r0 + j->chunk : j->per_exp;
        const int p0 = j->mp->offsets[e], cnt = j->mp->offsets[e + 1] - p0;
        float *y = j->y + (size_t)p0 * j->per_exp + r0;
        weight_rows(w, (int64_t)e * j->per_exp + r0, (int64_t)e * j->per_exp + r1, j->xq + (size_t)p0 * j->arow, j->arow,
                    cnt, 0, y, (size_t)j->per_exp);
        if (!j->bias->data) continue;
        const float *bias = (const float *)j->bias->data + (size_t)e * j->per_exp + r0;
        for (int t = 0; t < cnt; t++)
            for (int64_t r = 0; r < r1 - r0; r++) y[(size_t)t * j->per_exp + r] += bias[r];
    }
}

static void moe_matmul1(backend *b, float *y, const qmat *w, const qmat *bias, const float *x, int by_token,
                        const moe_map *mp) {
    const size_t arow = q_act_row_bytes(w->type, w->cols);
    moe_mm_job j = {y, w, bias, x, by_token, mp, scratch(b, SCR_ACT, arow * (size_t)mp->n_rows), arow,
                    w->rows / mp->n_exp, MM_ROW_TILE, 0};
    tp_for(b->pool, mp->n_rows, 4, 1, moe_quantize_rows, &j);
    int active = 0;
    while (active < mp->n_exp && mp->active[active] >= 0) active++;
    if (mp->n_rows <= mp->n_exp) {  // decode-sized: rows stream once, in chunks of >= 16 rows and 32 KiB
        j.chunk = (((int64_t)(32768 / w->row_bytes) + 15) & ~(int64_t)15);
        if (j.chunk < 16) j.chunk = 16;
    }
    if (j.chunk > j.per_exp) j.chunk = j.per_exp;
    j.chunks = (j.per_exp + j.chunk - 1) / j.chunk;
    tp_for(b->pool, active * j.chunks, 1, 1, moe_matmul_items, &j);
}

static void cpu_moe_matmul(backend *b, float *const y[], const qmat *const w[], const qmat *const bias[], int k,
                           const float *x, int by_token, const moe_map *mp) {
    for (int i = 0; i < k; i++) moe_matmul1(b, y[i], w[i], bias[i], x, by_token, mp);
}

typedef struct {
    float *out;
    const float *y, *w;
    const moe_map *mp;
    int dim;
} moe_combine_job;

static void moe_combine_range(void *ctx, int64_t i0, int64_t i1) {
    const moe_combine_job *j = ctx;
    moe_combine_rows(j->out, j->y, j->w, j->mp, j->dim, (int)i0, (int)i1);
}

static void cpu_moe_combine(backend *b, float *out, const float *y, const float *w, const moe_map *mp, int dim) {
    moe_combine_job j = {out, y, w, mp, dim};
    tp_for(b->pool, mp->n_rows / mp->k, 16, 1, moe_combine_range, &j);
}

typedef struct {
    float *out;
    const float *gate, *up;
    float alpha, limit;
} swiglu_oai_job;

static void swiglu_oai_range(void *ctx, int64_t i0, int64_t i1) {
    const swiglu_oai_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->out[i] = moe_swiglu_oai(j->gate[i], j->up[i], j->alpha, j->limit);
}

static void cpu_swiglu_oai(backend *b, float *out, const float *gate, const float *up, size_t len, float alpha,
                           float limit) {
    swiglu_oai_job j = {out, gate, up, alpha, limit};
    tp_for(b->pool, (int64_t)len, 2048, 64, swiglu_oai_range, &j);
}

// gelu(x) by the tanh approximation, of x rounded to fp16 and rounded to
// fp16, as ggml's CPU path reads it from its fp16 table.
static float gelu_f16(float x) {
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    const float h = fp16_to_f32(f32_to_fp16(x));
    const float g = 0.5f * h * (1.0f + tanhf(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)));
    return fp16_to_f32(f32_to_fp16(g));
}

// cos and sin of pair p's angle (theta_extrap: the unscaled angle over the
// frequency factor), scaled: backend.h's rope_cfg, in ggml's rope_yarn order.
static void rope_cos_sin(const rope_cfg *rc, int p, float theta_extrap, float *c, float *s) {
    const float theta_interp = rc->freq_scale * theta_extrap;
    float theta = theta_interp, mscale = rc->attn_factor;
    if (rc->ext_factor != 0.0f) {
        const float y = ((float)p - rc->corr_lo) / fmaxf(0.001f, rc->corr_hi - rc->corr_lo);
        const float ramp = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * rc->ext_factor;
        theta = fmaf(theta_extrap, ramp, theta_interp * (1.0f - ramp));
        mscale *= 1.0f + 0.1f * logf(1.0f / rc->freq_scale);
    }
    *c = cosf(theta) * mscale;
    *s = sinf(theta) * mscale;
}

static void geglu_range(void *ctx, int64_t i0, int64_t i1) {
    const swiglu_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->out[i] = gelu_f16(j->gate[i]) * j->up[i];
}

static void cpu_geglu(backend *b, float *out, const float *gate, const float *up, size_t len) {
    swiglu_job j = {out, gate, up};
    tp_for(b->pool, (int64_t)len, 2048, 64, geglu_range, &j);
}

static void cpu_scale(backend *b, float *x, float s, size_t len) {
    (void)b;
    for (size_t i = 0; i < len; i++) x[i] *= s;
}

// Rotation angles follow ggml's recurrence (theta *= theta_scale per pair) and
// its YaRN mix (backend.h's rope_cfg) so positions round exactly as
// llama.cpp's do.
static void cpu_rope(backend *b, float *q, float *k, int n, int n_q, int n_k, int head_dim, const int32_t *pos,
                     const rope_cfg *rc) {
    (void)b;
    const int nr = rc->n_rot, half = nr / 2;
    const float theta_scale = powf(rc->base, -2.0f / (float)nr);
    float cs[512], sn[512];  // n_rot <= 1024 (checked at load)
    for (int i = 0; i < n; i++) {
        float theta = (float)pos[i];
        for (int p = 0; p < half; p++) {
            rope_cos_sin(rc, p, rc->freq_factors ? theta / rc->freq_factors[p] : theta, &cs[p], &sn[p]);
            theta *= theta_scale;
        }
        for (int h = 0; h < n_q + n_k; h++) {
            float *v = h < n_q ? q + ((size_t)i * n_q + h) * head_dim : k + ((size_t)i * n_k + h - n_q) * head_dim;
            for (int p = 0; p < half; p++) {
                int a = rc->neox ? p : 2 * p, c = rc->neox ? p + half : 2 * p + 1;
                float x0 = v[a], x1 = v[c];
                // contracted as gcc compiles llama.cpp's C++ (fp-contract=fast)
                v[a] = fmaf(x0, cs[p], -(x1 * sn[p]));
                v[c] = fmaf(x0, sn[p], x1 * cs[p]);
            }
        }
    }
}

static void cpu_kv_store(backend *b, void *kpool, void *vpool, const float *k, const float *v,
                         const fwd_batch *fb, int kv_dim, int kv_type) {
    (void)b;
    const size_t rb = kv_row_bytes(kv_type, kv_dim);
    for (int i = 0; i < fb->n; i++)
        for (int kvi = 0; kvi < 2; kvi++) {
            uint8_t *row = (uint8_t *)(kvi ? vpool : kpool) + (size_t)fb->slot[i] * rb;
            const float *x = (kvi ? v : k) + (size_t)i * kv_dim;
            if (kv_type == KV_Q8) {
                uint16_t *d = (uint16_t *)(row + kv_dim);
                for (int j = 0; j < kv_dim / 32; j++) d[j] = q8_0_block(x + 32 * j, (int8_t *)row + 32 * j);
            } else {
                for (int j = 0; j < kv_dim; j++) ((uint16_t *)row)[j] = f32_to_fp16(x[j]);
            }
        }
}

static void cpu_attention(backend *b, float *out, const float *q, const void *kpool,
                          const void *vpool, const fwd_batch *fb, int n_heads, int n_kv_heads,
                          int head_dim, int kv_type, const attn_cfg *ac) {
    attention_job j = {out, q, kpool, vpool, fb, n_heads, n_kv_heads, head_dim, kv_type, ac, NULL};
    const size_t split = attention_split_bytes(&j, b->n_threads);
    if (split) j.part = scratch(b, SCR_ATT, split);  // out of memory: not split, the same bits
    tp_for(b->pool, attention_items_count(&j), 1, 1, attention_items, &j);
    if (j.part) tp_for(b->pool, attention_merge_count(&j), 1, 1, attention_merge, &j);
}

typedef struct {
    uint64_t *buf;
    size_t n;
    _Atomic uint64_t sum;
} read_job;

static void fill_words(void *ctx, int64_t i0, int64_t i1) {
    const read_job *j = ctx;
    for (int64_t i = i0; i < i1; i++) j->buf[i] = (uint64_t)i;
}

static void sum_words(void *ctx, int64_t i0, int64_t i1) {
    read_job *j = ctx;
    atomic_fetch_add_explicit(&j->sum, q_read_words(j->buf + i0, (size_t)(i1 - i0)), memory_order_relaxed);
}

// The memory's read bandwidth: the best of 4 passes summing 1 GiB (far more
// than any cache) on every thread. A decode step cannot read faster. The
// GiB comes in 2 MiB pages where the system has them, as the weights'
// copies do (map_anon): in 4 KiB pages (malloc's) the passes read ~5%
// less on an Emerald Rapids VM, which flattered decode's share of it.
static int cpu_roofline(backend *b, double *mem_bw, double *gemm_flops, char *err) {
    read_job j = {.n = (size_t)1 << 27};
    if (!(j.buf = map_anon(j.n * sizeof *j.buf))) return errf(err, "out of memory for the bandwidth test (1 GiB)");
    const int64_t chunk = 1 << 17;  // 1 MiB
    tp_for(b->pool, (int64_t)j.n, chunk, chunk, fill_words, &j);
    double best = 0;
    for (int rep = 0; rep < 4; rep++) {
        const double t = now_sec();
        tp_for(b->pool, (int64_t)j.n, chunk, chunk, sum_words, &j);
        const double dt = now_sec() - t;
        if (j.n * sizeof *j.buf / dt > best) best = j.n * sizeof *j.buf / dt;
    }
    map_anon_free(j.buf, j.n * sizeof *j.buf);
    *mem_bw = best;
    *gemm_flops = 0;
    return 0;
}

const backend_ops cpu_backend = {
    .name = "cpu",
    .host_weights = 1,
    .init = cpu_init,
    .free = cpu_free,
    .describe = cpu_describe,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .to_host = cpu_copy,
    .to_device = cpu_copy,
    .upload = cpu_upload,
    .embed = cpu_embed,
    .rmsnorm = cpu_rmsnorm,
    .add_rmsnorm = cpu_add_rmsnorm,
    .matmul = cpu_matmul,
    .add_bias = cpu_add_bias,
    .add = cpu_add,
    .swiglu = cpu_swiglu,
    .geglu = cpu_geglu,
    .scale = cpu_scale,
    .rope = cpu_rope,
    .kv_store = cpu_kv_store,
    .attention = cpu_attention,
    .moe_route = cpu_moe_route,
    .moe_group = cpu_moe_group,
    .moe_matmul = cpu_moe_matmul,
    .moe_combine = cpu_moe_combine,
    .swiglu_oai = cpu_swiglu_oai,
    .matmul_set = cpu_matmul_set,
    .roofline = cpu_roofline,
    .mem_available = cpu_mem_available,
};
