// kernels_elementwise.cu — the row-wise and element-wise ops: embed, rmsnorm
// (and add_rmsnorm, writing the q8_1 activation for decode), add_bias, add,
// swiglu (k_swiglu_q8: with q8_1 output), geglu, scale and rope.
#include "kernels_common.cuh"

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

// out[i, :] = row ids[i] of w as floats; one thread per 32 elements.
template <uint32_t T>
__global__ void k_embed(const uint8_t *__restrict__ w, dlayout L, int64_t cols, const int32_t *__restrict__ ids,
                        int n, float *__restrict__ out) {
    grid_dep_wait();
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
    grid_dep_wait();
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
    if (di) {
#pragma unroll
        for (int k = 0; k < RMS_PER; k++)
            if (tid + k * T < dim) xi[tid + k * T] = xv[k];
    }
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

// k_rmsnorm for rows of dim % 256 == 0 up to 8192 (every model width in
// practice): dim/8 threads, thread t holding elements 8t .. 8t+7 (two float4
// loads of each of x, d and g), so a q8 block of 32 is four neighbouring
// lanes: its max and its sum take two shuffles each, not k_rmsnorm's ten per
// element. Every row of such a width goes here, decode or prompt, so a row's
// sum of squares is added in one order whatever the pass.
template <bool Q8>
__global__ void k_rmsnorm8(float *out, float *x, const float *d, const float *__restrict__ g, int dim, float eps,
                           int8_t *__restrict__ q, float2 *__restrict__ ds) {
    grid_dep_wait();
    __shared__ float red[32];
    const int tid = threadIdx.x;
    const int64_t e0 = (int64_t)blockIdx.x * dim + 8 * tid;
    float v[8], gv[8];
    const float4 x0 = *(const float4 *)(x + e0), x1 = *(const float4 *)(x + e0 + 4);
    const float4 g0 = __ldg((const float4 *)(g + 8 * tid)), g1 = __ldg((const float4 *)(g + 8 * tid + 4));
    v[0] = x0.x, v[1] = x0.y, v[2] = x0.z, v[3] = x0.w, v[4] = x1.x, v[5] = x1.y, v[6] = x1.z, v[7] = x1.w;
    gv[0] = g0.x, gv[1] = g0.y, gv[2] = g0.z, gv[3] = g0.w, gv[4] = g1.x, gv[5] = g1.y, gv[6] = g1.z, gv[7] = g1.w;
    if (d) {
        const float4 d0 = *(const float4 *)(d + e0), d1 = *(const float4 *)(d + e0 + 4);
        v[0] += d0.x, v[1] += d0.y, v[2] += d0.z, v[3] += d0.w, v[4] += d1.x, v[5] += d1.y, v[6] += d1.z, v[7] += d1.w;
        *(float4 *)(x + e0) = make_float4(v[0], v[1], v[2], v[3]);
        *(float4 *)(x + e0 + 4) = make_float4(v[4], v[5], v[6], v[7]);
    }
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) ss += v[k] * v[k];
    ss = block_sum(ss, red);
    const float scale = 1.0f / sqrtf(ss / (float)dim + eps);
    float amax = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; k++) v[k] = v[k] * scale * gv[k], amax = fmaxf(amax, fabsf(v[k]));
    *(float4 *)(out + e0) = make_float4(v[0], v[1], v[2], v[3]);
    *(float4 *)(out + e0 + 4) = make_float4(v[4], v[5], v[6], v[7]);
    if constexpr (Q8) {  // warp_q8_1's values, four lanes to a block
        for (int o = 1; o < 4; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        const float inv = q8_inv(amax);
        uint32_t w[2] = {0, 0};
        int sum = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const int qi = q8_round(v[k], inv);
            sum += qi;
            w[k / 4] |= (uint32_t)(uint8_t)(int8_t)qi << 8 * (k % 4);
        }
        *(uint2 *)(q + e0) = make_uint2(w[0], w[1]);
        for (int o = 1; o < 4; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
        if (tid % 4 == 0) ds[e0 / 32] = make_float2(amax / 127.0f, amax / 127.0f * (float)sum);
    }
}

__global__ void k_add_bias(float *__restrict__ y, const float *__restrict__ bias, int64_t len, int dim) {
    grid_dep_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += bias[i % dim];
}

__global__ void k_add(float *__restrict__ y, const float *__restrict__ x, int64_t len) {
    grid_dep_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

__global__ void k_swiglu(float *out, const float *gate, const float *__restrict__ up, int64_t len) {
    grid_dep_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = silu_mul(gate[i], up[i]);
}

// k_swiglu for a few tokens (decode), with out's q8_1 form (k_quant_q8_1's values)
// for the down matmul, which then needs no quantizing launch; a warp per block of 32.
__global__ void k_swiglu_q8(float *out, const float *gate, const float *__restrict__ up, int64_t blocks,
                            int8_t *__restrict__ q, float2 *__restrict__ ds) {
    grid_dep_wait();
    const int64_t blk = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, i = 32 * blk + (threadIdx.x & 31);
    if (blk >= blocks) return;
    const float v = silu_mul(gate[i], up[i]);
    out[i] = v;
    warp_q8_1(v, blk, q, ds);
}

__global__ void k_geglu(float *out, const float *gate, const float *__restrict__ up, int64_t len) {
    grid_dep_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = gelu_f16(gate[i]) * up[i];
}

__global__ void k_scale(float *__restrict__ x, float s, int64_t len) {
    grid_dep_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x)
        x[i] *= s;
}

// One thread per (token, head, rotated pair).
__global__ void k_rope(float *q, float *k, int n, int n_q, int n_k, int head_dim, const int32_t *__restrict__ pos,
                       rope_cfg rc, float theta_scale) {
    grid_dep_wait();
    const int half = rc.n_rot / 2, heads = n_q + n_k;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * heads * half) return;
    const int p = (int)(idx % half);
    const int64_t th = idx / half, t = th / heads;  // token t, head h of q's then k's
    const int h = (int)(th % heads);
    int a, b;
    float c, s;
    rope_pair(rc, pos[t], p, theta_scale, &a, &b, &c, &s);
    float *v = h < n_q ? q + (t * n_q + h) * head_dim : k + (t * n_k + h - n_q) * head_dim;
    const float2 r = rope_turn(v[a], v[b], c, s);
    v[a] = r.x, v[b] = r.y;
}

template <uint32_t T>
static void launch_embed(backend *b, float *out, const qmat *e, const int32_t *ids, int n) {
    const dlayout L = dl_make(T, e->rows, e->cols);
    k_embed<T><<<blocks_for(n * ((e->cols + 31) / 32), 128), 128, 0, b->stream>>>(
        (const uint8_t *)e->data, L, e->cols, ids, n, out);
    LAUNCHED("k_embed");
}

void cuda_embed(backend *b, float *out, const qmat *emb, const int32_t *ids, int n) {
    act_forget(b);
    if (n <= 0) return;
    switch (emb->type) {
#define X(T) case T: launch_embed<T>(b, out, emb, ids, n); break;
        FOR_EACH_TYPE(X)
#undef X
    default: fail(b, "embed: no CUDA kernel for type %u", emb->type);
    }
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
    if (dim % 256 == 0 && dim <= 8 * 1024) {
        act_t a = {};
        const int q8 = n <= MMV_MAX;
        if (q8 && act_buf(b, n, dim, &a)) return;
        if (q8) k_rmsnorm8<true><<<(unsigned)n, dim / 8, 0, b->stream>>>(out, x, d, g, dim, eps, (int8_t *)a.q, (float2 *)a.ds);
        else k_rmsnorm8<false><<<(unsigned)n, dim / 8, 0, b->stream>>>(out, x, d, g, dim, eps, NULL, NULL);
        if (LAUNCHED("k_rmsnorm8") || !q8) return;
        b->act_src = out, b->act_len = (int64_t)n * dim;
        return;
    }
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

void cuda_rmsnorm(backend *b, float *out, const float *x, const qmat *w, int n, int dim, float eps) {
    rmsnorm_launch(b, out, (float *)x, NULL, w, n, dim, eps);  // (x is not written without d)
}

void cuda_add_rmsnorm(backend *b, float *out, float *x, const float *d, const qmat *w, int n, int dim,
                      float eps) {
    rmsnorm_launch(b, out, x, d, w, n, dim, eps);
}

void cuda_add_bias(backend *b, float *y, const qmat *bias, int n, int dim) {
    act_forget(b);
    const int64_t len = (int64_t)n * dim;
    if (len <= 0) return;
    k_add_bias<<<grid_for(len, 256), 256, 0, b->stream>>>(y, (const float *)bias->data, len, dim);
    LAUNCHED("k_add_bias");
}

void cuda_add(backend *b, float *y, const float *x, size_t len) {
    act_forget(b);
    if (!len) return;
    k_add<<<grid_for((int64_t)len, 256), 256, 0, b->stream>>>(y, x, (int64_t)len);
    LAUNCHED("k_add");
}

void cuda_swiglu(backend *b, float *out, const float *gate, const float *up, int n, int64_t cols) {
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

void cuda_geglu(backend *b, float *out, const float *gate, const float *up, size_t len) {
    act_forget(b);
    if (!len) return;
    k_geglu<<<grid_for((int64_t)len, 256), 256, 0, b->stream>>>(out, gate, up, (int64_t)len);
    LAUNCHED("k_geglu");
}

void cuda_scale(backend *b, float *x, float s, size_t len) {
    act_forget(b);
    if (!len) return;
    k_scale<<<grid_for((int64_t)len, 256), 256, 0, b->stream>>>(x, s, (int64_t)len);
    LAUNCHED("k_scale");
}

void cuda_rope(backend *b, float *q, float *k, int n, int n_q, int n_k, int head_dim, const int32_t *pos,
               const rope_cfg *rc) {
    act_forget(b);
    const int64_t items = (int64_t)n * (n_q + n_k) * (rc->n_rot / 2);
    if (items <= 0) return;
    const float theta_scale = powf(rc->base, -2.0f / (float)rc->n_rot);  // cpu.c's value
    k_rope<<<blocks_for(items, 256), 256, 0, b->stream>>>(q, k, n, n_q, n_k, head_dim, pos, *rc, theta_scale);
    LAUNCHED("k_rope");
}
