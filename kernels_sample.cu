// kernels_sample.cu — sampling on the device: one CTA over the logits
// (top-k, top-p by radix select on 56-bit keys) and cuda_sample.
#include "kernels_common.cuh"

// ---------------------------------------------------------------------------
// Sampling on the device: one CTA over the logits. Every token gets a unique
// 56-bit key (the logit's order bits, then 2^24-1-id), so "better" is a strict
// total order (higher logit, then lower id: sample.c's cand_better). top-k
// and top-p keep the best-first prefix that first reaches a weight (1 per
// token, or its probability in fixed point); radix select finds the key where
// that prefix ends in 7 passes of 8 bits, with integer histograms, so the
// result never depends on thread timing.
// ---------------------------------------------------------------------------

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

int32_t cuda_sample(backend *b, const float *logits, int n_vocab, const sample_cfg *sc, double u) {
    if (b->capturing) return b->capture_broken = 1, -1;
    if (n_vocab <= 0 || n_vocab > (1 << 24)) return fail(b, "sample: %d logits", n_vocab);
    k_sample<<<1, SAMPLE_THREADS, 0, b->stream>>>(logits, n_vocab, *sc, u, b->d_id);
    if (LAUNCHED("k_sample") || CK(cudaMemcpyAsync(b->h_id, b->d_id, sizeof(int32_t), cudaMemcpyDeviceToHost, b->stream)) ||
        stream_sync(b))
        return -1;
    return *b->h_id;
}
