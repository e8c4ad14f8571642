// kernels_matvec.cu — matmul with few tokens (decode): one kernel per weight
// type, a warp per weight row, up to MV_SET matrices against the same x in one
// launch (k_matvec_set), on the q8_1 activation (k_quant_q8_1, cached in
// SCR_ACT) for quantized weights; the per-type arithmetic is mv_item in
// kernels_qhd.cuh.
#include "kernels_common.cuh"

// y[t, r] = row r of w · x[t] for t < n <= NT, by one warp.
template <uint32_t T, int NT>
__device__ __forceinline__ void mv_row(const uint8_t *__restrict__ w, const dlayout &L, int64_t rows, int64_t r,
                                       const act_t &x, int n, float *__restrict__ y) {
    if (r >= rows) return;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = 0.0f;
    // An item a lane at a time. Two at a time, summed apart, helped while
    // Q4_K's scale decode branched (H200, 8B shape: 4.02 -> 3.69 ms/token);
    // since it does not, that was 1.7% slower on the 8B, the same on the 1B.
    const int64_t items = mv_items<T>(x.cols);
    for (int64_t it = threadIdx.x; it < items; it += 32) mv_item<T, NT>(w, L, r, it, x, n, acc);
#pragma unroll
    for (int t = 0; t < NT; t++) acc[t] = warp_sum(acc[t]);
    if (threadIdx.x == 0)
        for (int t = 0; t < n && t < NT; t++) y[t * rows + r] = acc[t];
}

// Up to MV_SET matrices of one width against the same x in one launch (a
// decode step's Q, K and V, or gate and up; a single matmul is a set of one):
// CTAs first[i] .. are matrix i's, MMV_WARPS rows each, a warp a row. The
// matrices are of type T, or T2 where alt[i] (k_matvec_set<T, T2> is
// instantiated for the pairs a K-quant mix puts together: Q4_K_M's V in Q6_K).
typedef struct {
    const uint8_t *w[MV_SET];
    dlayout L[MV_SET];
    int64_t rows[MV_SET];
    float *y[MV_SET];
    unsigned first[MV_SET];
    unsigned char alt[MV_SET];
    int k;
} mv_set;

__device__ __forceinline__ int set_matrix(const mv_set &s, unsigned cta) {
    int i = 0;
#pragma unroll
    for (int j = 1; j < MV_SET; j++) i += j < s.k && cta >= s.first[j];
    return i;
}

template <uint32_t T, uint32_t T2, int NT>
__global__ void __launch_bounds__(32 * MMV_WARPS, MMV_MINB) k_matvec_set(mv_set s, act_t x, int n) {
    grid_dep_wait();
    const int i = set_matrix(s, blockIdx.x);
    const int64_t r = (int64_t)(blockIdx.x - s.first[i]) * MMV_WARPS + threadIdx.y;
    if constexpr (T2 != T)
        if (s.alt[i]) return mv_row<T2, NT>(s.w[i], s.L[i], s.rows[i], r, x, n, s.y[i]);
    mv_row<T, NT>(s.w[i], s.L[i], s.rows[i], r, x, n, s.y[i]);
}

// x [n, cols] → q8_1; one warp per block of 32 (blocks never straddle rows:
// cols % 32 == 0).
__global__ void k_quant_q8_1(const float *__restrict__ x, int64_t blocks, int8_t *__restrict__ q,
                             float2 *__restrict__ ds) {
    grid_dep_wait();
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (blk < blocks) warp_q8_1(x[32 * blk + (threadIdx.x & 31)], blk, q, ds);
}

// x [n, cols] as q8_1 in SCR_ACT (kept while x is unchanged: Q, K and V, or
// gate and up, read the same x; rmsnorm may have written it already).
int act_q8(backend *b, const float *x, int n, int64_t cols, act_t *a) {
    if (act_buf(b, n, cols, a)) return -1;
    if (b->act_src == x && b->act_len == (int64_t)n * cols) return 0;
    const int64_t blocks = (int64_t)n * cols / 32;
    k_quant_q8_1<<<blocks_for(blocks, 8), 256, 0, b->stream>>>(x, blocks, (int8_t *)a->q, (float2 *)a->ds);
    if (LAUNCHED("k_quant_q8_1")) return -1;
    b->act_src = x, b->act_len = (int64_t)n * cols;
    return 0;
}

template <uint32_t T, uint32_t T2 = T>
static void launch_matvec_set(backend *b, float *const y[], const qmat *const w[], int k, const act_t &x, int n) {
    mv_set s = {};
    unsigned ctas = 0;
    for (int i = 0; i < k; i++) {
        s.w[i] = (const uint8_t *)w[i]->data, s.L[i] = dl_make(w[i]->type, w[i]->rows, w[i]->cols);
        s.rows[i] = w[i]->rows, s.y[i] = y[i], s.alt[i] = w[i]->type != T;
        s.first[i] = ctas, ctas += blocks_for(w[i]->rows, MMV_WARPS);
    }
    s.k = k;
    const dim3 block(32, MMV_WARPS);
    // n == 1 and n > 1 compute every row the same way (see mv_item); the
    // one-token instantiation only saves registers.
    if (n == 1) k_matvec_set<T, T2, 1><<<ctas, block, 0, b->stream>>>(s, x, n);
    else k_matvec_set<T, T2, MMV_MAX><<<ctas, block, 0, b->stream>>>(s, x, n);
    LAUNCHED("k_matvec_set");
}

// One launch for w[0..k): of one type, or Q4_K or Q5_K with Q6_K (a K-quant
// mix's V). Returns -1, launching nothing, for another mix.
static int launch_set(backend *b, float *const y[], const qmat *const w[], int k, const act_t &x, int n) {
    uint32_t t = w[0]->type, t2 = t;
    for (int i = 1; i < k; i++)
        if (w[i]->type != t) {
            if (t2 != t && w[i]->type != t2) return -1;
            t2 = w[i]->type;
        }
    if (t2 != t) {
        const uint32_t other = t == Q_Q6_K ? t2 : t2 == Q_Q6_K ? t : 0;
        if (other == Q_Q4_K) launch_matvec_set<Q_Q4_K, Q_Q6_K>(b, y, w, k, x, n);
        else if (other == Q_Q5_K) launch_matvec_set<Q_Q5_K, Q_Q6_K>(b, y, w, k, x, n);
        else return -1;
        return 0;
    }
    switch (t) {
#define X(T) case T: launch_matvec_set<T>(b, y, w, k, x, n); break;
        FOR_EACH_TYPE(X)
#undef X
    default: fail(b, "matmul: no CUDA kernel for type %u", t);
    }
    return 0;
}

// Rows t0 .. n-1 of y = x·wᵀ, each computed as alone.
void matvec_rows(backend *b, float *y, const qmat *w, const float *x, int t0, int n) {
    const int64_t cols = w->cols, rows = w->rows;
    const float *xs = x + (int64_t)t0 * cols;
    const int cnt = n - t0;
    act_t a = {NULL, NULL, xs, cols, ((uintptr_t)xs & 15) == 0 && cols % 4 == 0};
    if (is_quantized(w->type) && act_q8(b, xs, cnt, cols, &a)) return;
    for (int g = 0; g < cnt && !b->failed; g += MMV_MAX) {
        act_t ag = a;
        ag.f = a.f + (int64_t)g * cols;
        if (a.q) ag.q = a.q + (int64_t)g * cols, ag.ds = a.ds + (int64_t)g * (cols / 32);
        float *const yg[1] = {y + (int64_t)(t0 + g) * rows};
        launch_set(b, yg, &w, 1, ag, cnt - g < MMV_MAX ? cnt - g : MMV_MAX);
    }
}

// backend.h's matmul_set: where every row goes by matvec (a decode pass) and
// the matrices share a width, one launch (launch_set's mixes), else one for
// each type among them; a prompt, a matmul each.
void cuda_matmul_set(backend *b, float *const y[], const qmat *const w[], int k, const float *x, int n,
                     int n_joint) {
    int one = k >= 1 && k <= MV_SET && n > 0 && n <= MMV_MAX && gemm_rows(n, n_joint) == 0;
    for (int i = 1; one && i < k; i++) one = w[i]->cols == w[0]->cols;
    if (!one) {
        for (int i = 0; i < k; i++) cuda_matmul(b, y[i], w[i], x, n, n_joint);
        return;
    }
    const int64_t cols = w[0]->cols;
    act_t a = {NULL, NULL, x, cols, ((uintptr_t)x & 15) == 0 && cols % 4 == 0};
    int quantized = 0;
    for (int i = 0; i < k; i++) quantized |= is_quantized(w[i]->type);
    if (quantized && act_q8(b, x, n, cols, &a)) return;
    if (launch_set(b, y, w, k, a, n)) {
        int done[MV_SET] = {0};
        for (int i = 0; i < k; i++) {
            float *yg[MV_SET];
            const qmat *wg[MV_SET];
            int g = 0;
            for (int j = i; j < k; j++)
                if (!done[j] && w[j]->type == w[i]->type) yg[g] = y[j], wg[g++] = w[j], done[j] = 1;
            if (g) launch_set(b, yg, wg, g, a, n);
        }
    }
    for (int i = 0; i < k; i++) act_written(b, y[i], sizeof(float) * (size_t)n * w[i]->rows);
}
