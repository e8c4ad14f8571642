// kernels_moe.cu — mixture of experts: routing (k_moe_route), grouping a
// pass's rows by expert (k_moe_group), gathering, the experts' matvec
// (k_matvec_moe, mv_item's arithmetic) and a prompt's expert GEMMs
// (moe_gemm), combining, and gpt-oss's clamped swiglu (k_swiglu_oai).
#include "kernels_common.cuh"

enum {
    MOE_GEMM_RUN = 16,  // experts dequantized by one launch for a prompt's GEMMs (at most)
    MOE_SET = 2,        // matrices a moe_matmul takes (gate and up)
};

// How many of expert rows [p0, p1) a prompt pass gives to the GEMM (tokens
// 0 .. nj-1 are the prompt's): its rows of prompt tokens, which come first
// (sorted rows keep token order), when there are at least GEMM_MIN of them;
// else none.
static __host__ __device__ inline int moe_gemm_rows(const int32_t *tok, int p0, int p1, int nj) {
    int lo = p0, hi = p1;
    while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (tok[mid] < nj) lo = mid + 1;
        else hi = mid;
    }
    return lo - p0 >= GEMM_MIN ? lo - p0 : 0;
}

// The matrices of one k_matvec_moe launch (of one type and shape): z's
// weights, bias (NULL: none), output, and nj: the prompt's tokens when its
// GEMM took rows (see moe_gemm_rows), else 0.
typedef struct {
    const uint8_t *w[MOE_SET];
    const float *bias[MOE_SET];
    float *y[MOE_SET];
    int nj[MOE_SET];
} moe_set;

// Mixture of experts (backend.h's moe_matmul): CTA (x, y, z) takes matrix z
// of the set and the y-th active expert e, a warp weight row r of e, against
// each of e's sorted rows x[offsets[e] ..) in groups of NT (with x_one, x is
// one token's row, which every sorted row reads; rows a prompt's GEMM took
// are skipped); w stacks the experts' matrices (row e·per_exp + r). The
// arithmetic per row is k_matvec_set's, so a row equals the row computed
// alone.
template <uint32_t T, int NT>
__global__ void __launch_bounds__(32 * MMV_WARPS)
k_matvec_moe(moe_set s, dlayout L, int64_t per_exp, act_t x, int x_one, const int32_t *__restrict__ offsets,
             const int32_t *__restrict__ active, const int32_t *__restrict__ tok) {
    grid_dep_wait();
    const int e = active[blockIdx.y], z = blockIdx.z, nj = s.nj[z];
    const int64_t r = (int64_t)blockIdx.x * MMV_WARPS + threadIdx.y;
    if (e < 0 || r >= per_exp) return;
    const int64_t row = (int64_t)e * per_exp + r, items = mv_items<T>(x.cols), nb = x.cols / 32;
    const uint8_t *w = s.w[z];
    float *y = s.y[z];
    const float b = s.bias[z] ? s.bias[z][row] : 0.0f;
    const int p_end = offsets[e + 1];
    for (int p0 = offsets[e] + (nj ? moe_gemm_rows(tok, offsets[e], p_end, nj) : 0), p1 = p_end; p0 < p1; p0 += NT) {
        const int n = p1 - p0 < NT ? p1 - p0 : NT;
        const int64_t xr = x_one ? 0 : p0;
        act_t xs = x;
        xs.f = x.f + xr * x.cols;
        if (x.q) xs.q = x.q + xr * x.cols, xs.ds = x.ds + xr * nb;
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
// reference): k rounds of a warp argmax over the logits not yet chosen. Lane
// L holds experts L, L + 32, ...; bit i of its `taken` marks L + 32i chosen,
// so a round needs no memory round trip.
__global__ void k_moe_route(int32_t *__restrict__ ids, float *__restrict__ w, const float *__restrict__ logits, int n,
                            int n_exp, int k, int gating) {
    grid_dep_wait();
    const int i = blockIdx.x * blockDim.y + threadIdx.y, lane = threadIdx.x;
    if (i >= n) return;
    const float *l = logits + (int64_t)i * n_exp;
    int32_t *id = ids + (int64_t)i * k;
    float *wi = w + (int64_t)i * k;
    uint32_t taken = 0;  // n_exp <= MOE_MAX_EXPERTS = 32 · 32
    for (int j = 0; j < k; j++) {
        float bv = -INFINITY;
        int bi = -1;
        for (int e = lane, b = 0; e < n_exp; e += 32, b++)
            if (!(taken >> b & 1) && (bi < 0 || l[e] > bv)) bv = l[e], bi = e;
        warp_argmax(bv, bi);  // every lane ends with the winner
        if (bi >= 0 && (bi & 31) == lane) taken |= 1u << (bi >> 5);
        if (lane == 0) id[j] = bi;
    }
    __syncwarp();
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
    grid_dep_wait();
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
    grid_dep_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        xs[i] = x[(int64_t)tok[i / cols] * cols + i % cols];
}

// out[i, d] = Σ_j w[i, j]·y[pos[i·k + j], d], in j order (moe.c's moe_combine_rows).
__global__ void k_moe_combine(float *__restrict__ out, const float *__restrict__ y, const float *__restrict__ w,
                              const int32_t *__restrict__ pos, int64_t len, int k, int dim) {
    grid_dep_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / dim, d = i % dim;
        float o = y[(int64_t)pos[t * k] * dim + d] * w[t * k];
        for (int j = 1; j < k; j++) o += y[(int64_t)pos[t * k + j] * dim + d] * w[t * k + j];
        out[i] = o;
    }
}

__global__ void k_swiglu_oai(float *out, const float *gate, const float *__restrict__ up, int64_t len, float alpha,
                             float limit) {
    grid_dep_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x) {
        const float g = fminf(gate[i], limit), u = fmaxf(-limit, fminf(up[i], limit));
        out[i] = g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
    }
}

void cuda_moe_route(backend *b, int32_t *ids, float *w, const float *logits, int n, int n_exp, int k,
                    int gating) {
    if (n <= 0) return;
    act_written(b, (const float *)ids, sizeof(int32_t) * (size_t)n * k);
    act_written(b, w, sizeof(float) * (size_t)n * k);
    k_moe_route<<<blocks_for(n, 4), dim3(32, 4), 0, b->stream>>>(ids, w, logits, n, n_exp, k, gating);
    LAUNCHED("k_moe_route");
}

void cuda_moe_group(backend *b, const moe_map *mp, const int32_t *ids) {
    const size_t rows = sizeof(int32_t) * (size_t)mp->n_rows, exps = sizeof(int32_t) * (size_t)mp->n_exp;
    act_written(b, (const float *)mp->offsets, exps + sizeof(int32_t));
    act_written(b, (const float *)mp->active, exps);
    act_written(b, (const float *)mp->pos, rows);
    act_written(b, (const float *)mp->tok, rows);
    b->moe_host_of = NULL;
    k_moe_group<<<1, 256, sizeof(int32_t) * (size_t)mp->n_exp, b->stream>>>(*mp, ids);
    LAUNCHED("k_moe_group");
}

template <uint32_t T>
static void launch_matvec_moe(backend *b, const moe_set &s, int k, const qmat *w, const act_t &x, int x_one,
                              const moe_map *mp) {
    const dlayout L = dl_make(T, w->rows, w->cols);
    const int64_t per_exp = w->rows / mp->n_exp;
    const dim3 grid(blocks_for(per_exp, MMV_WARPS), (unsigned)(mp->n_rows < mp->n_exp ? mp->n_rows : mp->n_exp), k);
    const dim3 block(32, MMV_WARPS);
    // one token (n_rows == k): every expert has one row at most
    if (mp->n_rows == mp->k)
        k_matvec_moe<T, 1><<<grid, block, 0, b->stream>>>(s, L, per_exp, x, x_one, mp->offsets, mp->active, mp->tok);
    else
        k_matvec_moe<T, MMV_MAX><<<grid, block, 0, b->stream>>>(s, L, per_exp, x, x_one, mp->offsets, mp->active,
                                                                mp->tok);
    LAUNCHED("k_matvec_moe");
}

// The map's offsets and tok on the host (one wait per moe_group: gate, up
// and down share it); NULL on failure.
static const int32_t *moe_host_map(backend *b, const moe_map *mp) {
    const size_t need = (size_t)mp->n_exp + 1 + (size_t)mp->n_rows;
    if (b->moe_host_of == mp->offsets) return b->moe_host;
    if (need > b->moe_host_cap) {
        int32_t *h = (int32_t *)realloc(b->moe_host, sizeof(int32_t) * need);
        if (!h) return fail(b, "out of memory"), (const int32_t *)NULL;
        b->moe_host = h, b->moe_host_cap = need;
    }
    if (CK(cudaMemcpyAsync(b->moe_host, mp->offsets, sizeof(int32_t) * ((size_t)mp->n_exp + 1), cudaMemcpyDeviceToHost,
                           b->stream)) ||
        CK(cudaMemcpyAsync(b->moe_host + mp->n_exp + 1, mp->tok, sizeof(int32_t) * (size_t)mp->n_rows,
                           cudaMemcpyDeviceToHost, b->stream)) ||
        stream_sync(b))
        return NULL;
    b->moe_host_of = mp->offsets;
    return b->moe_host;
}

// A prompt's expert products (x: the sorted rows' inputs): each expert's
// moe_gemm_rows go through a GEMM (its weights dequantized to fp16, as
// kernels_gemm.cu's prompt matmul does, a run of experts at a time) where
// cuBLASLt has a row-wise algorithm for the shape. Returns the rows left to
// the matvec (all of them where this path does not apply), -1 on failure.
static int moe_gemm(backend *b, float *y, const qmat *w, const qmat *bias, const float *x, const moe_map *mp) {
    const int64_t per_exp = w->rows / mp->n_exp, cols = w->cols, elems = per_exp * cols;
    const int nj = mp->n_joint;
    if (nj < GEMM_MIN || b->capturing || !is_quantized(w->type) || cols % 8 || per_exp % 4 ||
        (size_t)elems > GEMM_TILE_ELEMS || !gemm_rowwise(b, per_exp, cols, cols, per_exp))
        return mp->n_rows;
    const int32_t *off = moe_host_map(b, mp);
    if (!off) return -1;
    const int32_t *tok = off + mp->n_exp + 1;
    int left = mp->n_rows, e0 = mp->n_exp;  // e0: the first expert with GEMM rows
    for (int e = mp->n_exp - 1; e >= 0; e--) {
        const int g = moe_gemm_rows(tok, off[e], off[e + 1], nj);
        if (g) left -= g, e0 = e;
    }
    if (left == mp->n_rows) return left;
    const int run = (size_t)elems * MOE_GEMM_RUN <= GEMM_TILE_ELEMS ? MOE_GEMM_RUN : (int)(GEMM_TILE_ELEMS / (size_t)elems);
    __half *tile = (__half *)scratch(b, SCR_TILE, sizeof(__half) * (size_t)elems * (size_t)(run < mp->n_exp ? run : mp->n_exp));
    const __half *xh = tile ? (const __half *)act_half(b, x, mp->n_rows, cols, 0) : NULL;
    if (!xh) return -1;
    for (int ea = e0; ea < mp->n_exp && !b->failed;) {  // experts ea .. eb-1 dequantized together
        const int eb = ea + run < mp->n_exp ? ea + run : mp->n_exp;
        dequant_rows(b, w, ea * per_exp, (eb - ea) * per_exp, tile);
        int next = mp->n_exp;
        for (int e = ea; e < eb && !b->failed; e++) {
            const int g = moe_gemm_rows(tok, off[e], off[e + 1], nj);
            if (!g) continue;
            float *ye = y + (int64_t)off[e] * per_exp;
            gemm_call(b, tile + (e - ea) * elems, CUDA_R_16F, cols, per_exp, cols, xh + (int64_t)off[e] * cols, g, ye,
                      per_exp);
            if (bias->data) {
                qmat be = *bias;
                be.data = (const float *)bias->data + e * per_exp;
                cuda_add_bias(b, ye, &be, g, (int)per_exp);
            }
        }
        for (int e = eb; e < mp->n_exp && next == mp->n_exp; e++)
            if (moe_gemm_rows(tok, off[e], off[e + 1], nj)) next = e;
        ea = next;
    }
    return b->failed ? -1 : left;
}

// One token's slots (n_rows == k) read its row of x in place: no gather, and
// its q8_1 form is the one the norm before wrote. Other passes gather the
// sorted rows' inputs first (once for gate and up); a prompt's go through
// moe_gemm where they can. The matrices left to the matvec go in one launch.
void cuda_moe_matmul(backend *b, float *const y[], const qmat *const w[], const qmat *const bias[], int k,
                     const float *x, int by_token, const moe_map *mp) {
    int same = k >= 1 && k <= MOE_SET;  // one type and shape
    for (int i = 1; same && i < k; i++)
        same = w[i]->type == w[0]->type && w[i]->rows == w[0]->rows && w[i]->cols == w[0]->cols;
    if (!same) {
        for (int i = 0; i < k; i++) cuda_moe_matmul(b, y + i, w + i, bias + i, 1, x, by_token, mp);
        return;
    }
    const int64_t cols = w[0]->cols, len = (int64_t)mp->n_rows * cols;
    if (len <= 0) return;
    const int x_one = by_token && mp->n_rows == mp->k;
    if (by_token && !x_one) {
        float *xs = (float *)scratch(b, SCR_MOE, sizeof(float) * (size_t)len);
        if (!xs) return;
        act_written(b, xs, sizeof(float) * (size_t)len);
        k_moe_gather<<<grid_for(len, 256), 256, 0, b->stream>>>(xs, x, mp->tok, len, cols);
        if (LAUNCHED("k_moe_gather")) return;
        x = xs;
    }
    moe_set s = {};
    int left = 0;
    for (int i = 0; i < k; i++) {
        const int li = x_one ? mp->n_rows : moe_gemm(b, y[i], w[i], bias[i], x, mp);
        if (li < 0) return;
        s.w[i] = (const uint8_t *)w[i]->data, s.bias[i] = (const float *)bias[i]->data, s.y[i] = y[i];
        s.nj[i] = li < mp->n_rows ? mp->n_joint : 0;  // skip the rows moe_gemm took
        left += li;
    }
    if (left > 0) {
        act_t a = {NULL, NULL, x, cols, ((uintptr_t)x & 15) == 0 && cols % 4 == 0};
        if (is_quantized(w[0]->type) && act_q8(b, x, x_one ? 1 : mp->n_rows, cols, &a)) return;
        switch (w[0]->type) {
#define X(T) case T: launch_matvec_moe<T>(b, s, k, w[0], a, x_one, mp); break;
            FOR_EACH_TYPE(X)
#undef X
        default: fail(b, "moe_matmul: no CUDA kernel for type %u", w[0]->type);
        }
    }
    for (int i = 0; i < k; i++) act_written(b, y[i], sizeof(float) * (size_t)mp->n_rows * (w[i]->rows / mp->n_exp));
}

void cuda_moe_combine(backend *b, float *out, const float *y, const float *w, const moe_map *mp, int dim) {
    const int64_t len = (int64_t)(mp->n_rows / mp->k) * dim;
    if (len <= 0) return;
    act_written(b, out, sizeof(float) * (size_t)len);
    k_moe_combine<<<grid_for(len, 256), 256, 0, b->stream>>>(out, y, w, mp->pos, len, mp->k, dim);
    LAUNCHED("k_moe_combine");
}

void cuda_swiglu_oai(backend *b, float *out, const float *gate, const float *up, size_t len, float alpha,
                     float limit) {
    act_forget(b);
    if (!len) return;
    k_swiglu_oai<<<grid_for((int64_t)len, 256), 256, 0, b->stream>>>(out, gate, up, (int64_t)len, alpha, limit);
    LAUNCHED("k_swiglu_oai");
}
