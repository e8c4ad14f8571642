// kernels_sample.cu — sampling on the device: greedy and top-k sampling by
// sorting (each CTA sorts a chunk of the logits, one CTA the chunks' best),
// anything else by radix select in one CTA over all the logits; cuda_sample.
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

// Inclusive prefix sum over the warp's lanes (all 32 present).
template <class T> __device__ T warp_incl(T v) {
    const int lane = threadIdx.x & 31;
    for (int o = 1; o < 32; o <<= 1) {
        const T up = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += up;
    }
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
            const unsigned long long incl = warp_incl(own), excl = incl - own;
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
    v = warp_incl(v);
    if (lane == 31) fred[warp] = v;
    __syncthreads();
    if (warp == 0) {
        const float w = warp_incl(lane < nw ? fred[lane] : 0.0f);
        if (lane < nw) fred[lane] = w;
    }
    __syncthreads();
    incl[threadIdx.x] = warp > 0 ? v + fred[warp - 1] : v;
    __syncthreads();
}

__global__ void __launch_bounds__(SAMPLE_THREADS) k_sample(const float *__restrict__ lg, int V, sample_cfg c, double u,
                                                           int32_t *out) {
    grid_dep_wait();
    __shared__ sample_smem sm;
    const int tid = threadIdx.x;
    unsigned long long best = 0;
    for (int i = tid; i < V; i += blockDim.x) best = max(best, (unsigned long long)cand_key(lg[i], i));
    best = block_max_u64(best, sm.red);
    const int arg = best ? key_id(best) : 0;  // 0: every logit NaN
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
// Greedy and top-k (k <= SAMPLE_KP_MAX): the same keys, but no pass over the
// whole vocabulary in one CTA. k_sample_chunks: CTA c sorts the keys of ids
// [c·SAMPLE_CHUNK, (c+1)·SAMPLE_CHUNK) and keeps its best kp (k rounded up to
// a power of two; greedy: its maximum, unsorted); k_sample_top sorts those,
// takes the best k (the kept set top-k leaves, as the key order is strict),
// then top-p as the best-first prefix reaching need (integer masses: sums in
// any order are exact), min-p, and the draw over the survivors in id order.
// (The radix select of k_sample spent ~2 ms on Llama-3's 128k logits on an
// H200: one CTA, and its first histogram pass has nearly every logit adding
// to the same few bins.)
// ---------------------------------------------------------------------------

// s[0..n) into descending order (n a power of two), by the whole CTA.
__device__ void block_sort_desc(uint64_t *s, int n) {
    __syncthreads();
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n / 2; i += blockDim.x) {
                const int a = 2 * i - (i & (j - 1)), c = a + j;  // the i-th pair j apart
                const uint64_t x = s[a], y = s[c];
                if (((a & k) == 0) == (x < y)) s[a] = y, s[c] = x;  // descending where (a & k) == 0
            }
            __syncthreads();
        }
}

__global__ void __launch_bounds__(SAMPLE_THREADS) k_sample_chunks(const float *__restrict__ lg, int V, int kp,
                                                                  uint64_t *__restrict__ cand) {
    grid_dep_wait();
    __shared__ uint64_t s[SAMPLE_CHUNK];
    __shared__ unsigned long long red[32];
    const int base = blockIdx.x * SAMPLE_CHUNK;
    unsigned long long best = 0;
    for (int i = threadIdx.x; i < SAMPLE_CHUNK; i += blockDim.x) {
        s[i] = base + i < V ? cand_key(lg[base + i], base + i) : 0;  // 0: below every token
        best = max(best, (unsigned long long)s[i]);
    }
    if (kp == 1) {  // greedy or top-k 1: the chunk's best, no sort
        best = block_max_u64(best, red);
        if (threadIdx.x == 0) cand[blockIdx.x] = best;
        return;
    }
    block_sort_desc(s, SAMPLE_CHUNK);
    for (int i = threadIdx.x; i < kp; i += blockDim.x) cand[(int64_t)blockIdx.x * kp + i] = s[i];
}

// Over nc candidates (n2 = nc rounded up to a power of two, keys in dynamic
// shared memory); c.top_k < V and, when sampling, 0 < c.top_k <= kp.
__global__ void __launch_bounds__(SAMPLE_THREADS) k_sample_top(const float *__restrict__ lg,
                                                               const uint64_t *__restrict__ cand, int nc, int n2,
                                                               sample_cfg c, double u, int32_t *out) {
    grid_dep_wait();
    extern __shared__ uint64_t s[];
    __shared__ unsigned long long mass[SAMPLE_KP_MAX];
    __shared__ float fred[32], incl[SAMPLE_THREADS];
    __shared__ int ord_id[SAMPLE_KP_MAX], top_n, kept_n, picked;
    const int tid = threadIdx.x;
    for (int i = tid; i < n2; i += blockDim.x) s[i] = i < nc ? cand[i] : 0;
    block_sort_desc(s, n2);
    const int arg = s[0] ? key_id(s[0]) : 0;  // 0: every logit NaN
    if (!(c.temp > 0.0f)) {
        if (tid == 0) *out = arg;
        return;
    }
    const float M = lg[arg];
    int n = c.top_k;  // top-k: s[0..n)
    if (c.top_p < 1.0f && n > 1) {
        if (c.top_p <= 0.0f) {
            n = 1;
        } else {  // the shortest best-first prefix whose mass reaches ceil(top_p · total)
            if (tid < n) mass[tid] = mass_fix(lg[key_id(s[tid])], M);
            if (tid == 0) top_n = n;
            __syncthreads();
            if (tid < 32) {  // lane L sums s[4L..4L+3] (n <= 128), then a warp scan
                unsigned long long own = 0;
                for (int q = 0; q < 4; q++) own += 4 * tid + q < n ? mass[4 * tid + q] : 0ull;
                const unsigned long long sum = warp_incl(own);
                const unsigned long long tot = __shfl_sync(0xffffffffu, sum, 31);
                unsigned long long need = (unsigned long long)ceil((double)c.top_p * (double)tot);
                if (need == 0) need = 1;
                unsigned long long cum = sum - own;
                if (cum < need && sum >= need)
                    for (int q = 0; q < 4; q++)
                        if ((cum += mass[4 * tid + q]) >= need) {
                            top_n = 4 * tid + q + 1;
                            break;
                        }
            }
            __syncthreads();
            n = top_n;
        }
    }
    // min-p, then the draw: weights e^((l - M)/temp) over the survivors in id order
    const double cut = c.min_p > 0.0f ? log((double)c.min_p) : -INFINITY;
    int id = -1, rank = 0;
    float l = 0.0f;
    if (tid < n) {
        id = key_id(s[tid]), l = lg[id];
        if (!((double)l - (double)M >= cut)) id = -1;
    }
    if (tid < SAMPLE_KP_MAX) ord_id[tid] = tid < n ? id : -1;
    if (tid == 0) kept_n = 0, picked = -1;
    __syncthreads();
    if (id >= 0) {
        for (int j = 0; j < n; j++) rank += ord_id[j] >= 0 && ord_id[j] < id;
        atomicAdd(&kept_n, 1);
    }
    __syncthreads();
    if (id >= 0) ord_id[rank] = id;  // (each survivor read every ord_id before the barrier)
    __syncthreads();
    const int m = kept_n;
    float w = 0.0f;
    if (tid < m) w = expf((lg[ord_id[tid]] - M) / c.temp);
    block_scan(w, fred, incl);
    const float target = (float)(u * (double)incl[blockDim.x - 1]), hi = incl[tid], lo = tid > 0 ? incl[tid - 1] : 0.0f;
    if (tid < m && lo <= target && target < hi) picked = ord_id[tid];
    __syncthreads();
    // rounding may leave target past the last window: the last survivor (none: the best)
    if (tid == 0) *out = picked >= 0 ? picked : m > 0 ? ord_id[m - 1] : arg;
}

// Device memory for k_sample_top's candidates and its shared memory (at init).
int sample_init(backend *b) {
    return CK(cudaMalloc((void **)&b->d_cand, sizeof(uint64_t) * SAMPLE_CAND_MAX)) ||
           CK(cudaFuncSetAttribute(k_sample_top, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)sizeof(uint64_t) * SAMPLE_CAND_MAX));
}

static int pow2_at_least(int n) {
    int p = 1;
    while (p < n) p <<= 1;
    return p;
}

int32_t cuda_sample(backend *b, const float *logits, int n_vocab, const sample_cfg *sc, double u) {
    if (b->capturing) return b->capture_broken = 1, -1;
    if (n_vocab <= 0 || n_vocab > (1 << 24)) return fail(b, "sample: %d logits", n_vocab);
    const int chunks = (n_vocab + SAMPLE_CHUNK - 1) / SAMPLE_CHUNK;
    const int kp = !(sc->temp > 0.0f) ? 1 : sc->top_k > 0 && sc->top_k < n_vocab ? pow2_at_least(sc->top_k) : 0;
    if (kp > 0 && kp <= SAMPLE_KP_MAX && chunks * kp <= SAMPLE_CAND_MAX) {
        const int nc = chunks * kp, n2 = pow2_at_least(nc);
        k_sample_chunks<<<chunks, SAMPLE_THREADS, 0, b->stream>>>(logits, n_vocab, kp, b->d_cand);
        if (LAUNCHED("k_sample_chunks")) return -1;
        k_sample_top<<<1, SAMPLE_THREADS, sizeof(uint64_t) * n2, b->stream>>>(logits, b->d_cand, nc, n2, *sc, u, b->d_id);
        if (LAUNCHED("k_sample_top")) return -1;
    } else {
        k_sample<<<1, SAMPLE_THREADS, 0, b->stream>>>(logits, n_vocab, *sc, u, b->d_id);
        if (LAUNCHED("k_sample")) return -1;
    }
    if (CK(cudaMemcpyAsync(b->h_id, b->d_id, sizeof(int32_t), cudaMemcpyDeviceToHost, b->stream)) || stream_sync(b))
        return -1;
    return *b->h_id;
}
