// kernels_attention.cu — the paged KV cache's writes (k_kv_store, fp16 or q8
// rows; k_rope_store: rope on the way) and split-K ("flash-decoding")
// attention (k_attention, then k_attn_merge over the splits); the plan and
// addressing are in kernels_qhd.cuh (att_make_plan, kv_row).
#include "kernels_common.cuh"

// fp16 rows: one thread per value (of K and of V).
__global__ void k_kv_store(__half *__restrict__ kp, __half *__restrict__ vp, const float *__restrict__ k,
                           const float *__restrict__ v, const int32_t *__restrict__ slot, int n, int kv_dim) {
    grid_dep_wait();
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * kv_dim) return;
    const int64_t i = idx / kv_dim, d = idx % kv_dim, row = slot[i];
    kp[row * kv_dim + d] = __float2half_rn(k[idx]);
    vp[row * kv_dim + d] = __float2half_rn(v[idx]);
}

// q8 rows (backend.h's KV_Q8): one warp per 32-value block of K or V, lane =
// value, rounded as the activations are (q8_block, quant.c's quant_block_q8).
__global__ void k_kv_store_q8(uint8_t *__restrict__ kp, uint8_t *__restrict__ vp, const float *__restrict__ k,
                              const float *__restrict__ v, const int32_t *__restrict__ slot, int n, int kv_dim,
                              int64_t row_bytes) {
    grid_dep_wait();
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;  // (token, K|V, block)
    const int lane = threadIdx.x & 31, nb = kv_dim / 32;
    if (w >= (int64_t)n * 2 * nb) return;  // whole warps leave together: blockDim is a multiple of 32
    const int64_t i = w / (2 * nb);
    const int kvi = (int)(w / nb % 2), j = (int)(w % nb);
    const float x = (kvi ? v : k)[i * kv_dim + 32 * j + lane];
    const float amax = warp_max(fabsf(x));
    uint8_t *row = (kvi ? vp : kp) + (int64_t)slot[i] * row_bytes;
    row[32 * j + lane] = (uint8_t)(int8_t)q8_round(x, q8_inv(amax));
    if (lane == 0) ((__half *)(row + kv_dim))[j] = __float2half_rn(amax / 127.0f);
}

// rope then kv_store in one launch (backend.h's rope_store): threads below
// q_threads turn q's pairs in place as k_rope does; the warps after them
// store K and V as k_kv_store(_q8) does (value e of token i: K's then V's),
// a K value turned as it is loaded, its pair's other value read beside it,
// by k_rope's arithmetic (k itself is not written).
template <bool Q8>
__global__ void k_rope_store(float *q, const float *__restrict__ k, const float *__restrict__ v, uint8_t *kp,
                             uint8_t *vp, const int32_t *__restrict__ slot, const int32_t *__restrict__ pos, int n,
                             int n_q, int n_k, int head_dim, rope_cfg rc, float theta_scale, int64_t q_threads,
                             int64_t row_bytes) {
    grid_dep_wait();
    const int half = rc.n_rot / 2, kv_dim = n_k * head_dim;
    const int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int a, b;
    float c, s;
    if (idx < q_threads) {
        if (idx >= (int64_t)n * n_q * half) return;
        const int64_t th = idx / half;
        rope_pair(rc, pos[th / n_q], (int)(idx % half), theta_scale, &a, &b, &c, &s);
        float *h = q + th * head_dim;
        const float2 r = rope_turn(h[a], h[b], c, s);
        h[a] = r.x, h[b] = r.y;
        return;
    }
    const int64_t j = idx - q_threads;
    if (j >= (int64_t)n * 2 * kv_dim) return;  // (Q8: whole warps, kv_dim % 32 == 0)
    const int64_t i = j / (2 * kv_dim);
    const int kvi = (int)(j / kv_dim % 2), e = (int)(j % kv_dim), d = e % head_dim;
    float x = (kvi ? v : k)[i * kv_dim + e];
    if (!kvi && d < rc.n_rot) {
        rope_pair(rc, pos[i], rc.neox ? (d < half ? d : d - half) : d / 2, theta_scale, &a, &b, &c, &s);
        const float *h = k + i * kv_dim + (e - d);
        const float2 r = rope_turn(h[a], h[b], c, s);
        x = d == a ? r.x : r.y;
    }
    uint8_t *row = (kvi ? vp : kp) + (int64_t)slot[i] * row_bytes;
    if constexpr (Q8) {
        const float amax = warp_max(fabsf(x));
        row[e] = (uint8_t)(int8_t)q8_round(x, q8_inv(amax));
        if ((threadIdx.x & 31) == 0) ((__half *)(row + kv_dim))[e / 32] = __float2half_rn(amax / 127.0f);
    } else {
        ((__half *)row)[e] = __float2half_rn(x);
    }
}

// ---------------------------------------------------------------------------
// Attention (see kernels.cu's file comment). A CTA: kv head kvh (query heads h0 ..
// h0+G-1 that read it), split s (positions p0 .. p0+chunk-1), tokens tl0 ..
// tl0+TQ-1 of the launch. Rows r = t·G + g (token t, head g). Per 32-position
// tile: K and V into shared memory, scores (one thread per row and position,
// a sequential dot over head_dim), online softmax (one warp per row), then
// O = O·corr + P·V (one thread per row and 8 dims, positions in order).
// Positions a row may not see score -inf and are skipped in P·V, so the rows
// of a CTA never change each other's arithmetic.
// ---------------------------------------------------------------------------

typedef struct {
    const float *q;             // [n, n_heads, D]
    const uint8_t *k, *v;       // pools: rows of row_bytes (backend.h's kv_type)
    int64_t row_bytes;
    int kv_q8;                  // 1: KV_Q8 rows, 0: fp16
    const int32_t *pos, *seq, *tables;
    int max_blocks;
    int t0, nt;                 // this launch: tokens t0 .. t0+nt-1 of the pass
    int tq;                     // tokens per CTA
    int n_heads, D, kv_dim, n_splits;
    att_plan P;
    float scale;
    int window;                 // > 0: sliding window (backend.h's attn_cfg)
    const float *sinks;         // [n_heads] or NULL
    float *out;                 // [n, n_heads, D]
    float *part;                // [nt, n_heads, n_splits, D] split outputs, unnormalized
    float2 *ml;                 // [nt, n_heads, n_splits] (max, sum) of each split
    int8_t *oq;                 // NULL, or out's q8_1 form (k_attn_merge)
    float2 *ods;
} attn_args;

// A head's sink logit joins the softmax sum l of a row whose running maximum
// is m (cpu.c's sink_rescale): returns the factor the output takes.
__device__ __forceinline__ float sink_fold(float sink, float m, float *l) {
    if (sink > m) {
        const float ms = expf(m - sink);
        *l = *l * ms + 1.0f;
        return ms;
    }
    *l += expf(sink - m);
    return 1.0f;
}

// Values col .. col+7 of a pool row as 8 fp16 (q8: d·q rounded to fp16).
__device__ __forceinline__ uint4 kv_load8(const uint8_t *row, int col, int kv_dim, int q8) {
    if (!q8) return ld16(row + 2 * col);
    const uint2 q = *(const uint2 *)(row + col);  // col is a multiple of 8, rows of 16 bytes
    const float d = __half2float(((const __half *)(row + kv_dim))[col / 32]);
    uint32_t w[4];
    for (int i = 0; i < 4; i++) {
        const uint32_t src = i < 2 ? q.x : q.y, sh = 16 * (i % 2);
        const __half2 h = __floats2half2_rn(d * (float)(int8_t)(src >> sh), d * (float)(int8_t)(src >> (sh + 8)));
        memcpy(&w[i], &h, 4);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
}

__global__ void __launch_bounds__(ATT_THREADS) k_attention(attn_args a) {
    grid_dep_wait();
    extern __shared__ float4 att_smem4[];
    const att_plan &P = a.P;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, D = a.D;
    const int kvh = blockIdx.x / P.hchunks, hc = blockIdx.x % P.hchunks;
    const int h0 = kvh * P.group + hc * P.gcta;
    const int G = min(P.gcta, P.group - hc * P.gcta);
    const int split = blockIdx.y, p0 = split * P.chunk;
    const int tl0 = blockIdx.z * a.tq, TQ = min(a.tq, a.nt - tl0), R = TQ * G, Rm = a.tq * P.gcta;
    float *qs = (float *)att_smem4;            // [Rm][D]
    float *sc = qs + (size_t)Rm * D;           // [Rm][ATT_KT]
    float *mrow = sc + (size_t)Rm * ATT_KT, *lrow = mrow + Rm, *crow = lrow + Rm;
    int *tlen = (int *)(crow + Rm), *tseq = tlen + a.tq;
    __half *ks = (__half *)(tseq + a.tq);      // [ATT_KT][D + 2]
    __half *vs = ks + ATT_KT * (D + 2);
    const int ld = D + 2;

    if (tid < TQ) {
        const int tok = a.t0 + tl0 + tid;
        tlen[tid] = a.pos[tok] + 1;
        tseq[tid] = a.seq[tok];
    }
    __syncthreads();
    int maxlen = 0;
    for (int t = 0; t < TQ; t++) maxlen = max(maxlen, tlen[t]);
    if (p0 >= maxlen) return;  // an empty split for every token here
    for (int i = tid; i < R * D; i += ATT_THREADS) {
        const int r = i / D, d = i % D, t = r / G, g = r % G;
        qs[i] = a.q[((int64_t)(a.t0 + tl0 + t) * a.n_heads + h0 + g) * D + d];
    }
    for (int r = tid; r < R; r += ATT_THREADS) mrow[r] = -INFINITY, lrow[r] = 0.0f;

    const int du = tid % P.du, rg = tid / P.du;  // output dims 8du .. 8du+7, rows rg + P.rg·i
    float O[ATT_FLOATS / 8][8];
#pragma unroll
    for (int i = 0; i < ATT_FLOATS / 8; i++)
#pragma unroll
        for (int e = 0; e < 8; e++) O[i][e] = 0.0f;

    for (int u = 0; u < TQ; u++) {  // each distinct sequence among the tokens, once
        const int sq = tseq[u];
        bool seen = false;
        int len = 0;
        for (int t = 0; t < TQ; t++) {
            seen |= t < u && tseq[t] == sq;
            if (tseq[t] == sq) len = max(len, tlen[t]);
        }
        if (seen) continue;
        const int p1 = min(p0 + P.chunk, len);
        // the first tile any of the sequence's tokens here sees (sliding window)
        int lo = len;
        for (int t = 0; t < TQ; t++)
            if (tseq[t] == sq) lo = min(lo, a.window > 0 ? tlen[t] - a.window : 0);
        const int kfirst = lo > p0 ? p0 + (lo - p0) / ATT_KT * ATT_KT : p0;
        for (int kt0 = kfirst; kt0 < p1; kt0 += ATT_KT) {
            __syncthreads();  // the previous tile is consumed
            for (int i = tid; i < ATT_KT * P.du; i += ATT_THREADS) {
                const int j = i / P.du, c = i % P.du, p = kt0 + j;
                uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
                if (p < p1 && p >= lo) {  // below lo: no token here reads it (a sliding cache may not hold it)
                    const int64_t off = kv_row(a.tables, a.max_blocks, sq, p) * a.row_bytes;
                    const int col = kvh * D + 8 * c;
                    kv = kv_load8(a.k + off, col, a.kv_dim, a.kv_q8);
                    vv = kv_load8(a.v + off, col, a.kv_dim, a.kv_q8);
                }
                uint32_t *kd = (uint32_t *)(ks + j * ld + 8 * c), *vd = (uint32_t *)(vs + j * ld + 8 * c);
                kd[0] = kv.x, kd[1] = kv.y, kd[2] = kv.z, kd[3] = kv.w;
                vd[0] = vv.x, vd[1] = vv.y, vd[2] = vv.z, vd[3] = vv.w;
            }
            __syncthreads();
            for (int i = tid; i < R * ATT_KT; i += ATT_THREADS) {  // scores
                const int j = i % ATT_KT, r = i / ATT_KT, t = r / G, p = kt0 + j;
                float s = -INFINITY;
                if (tseq[t] == sq && p < tlen[t] && p < p1 && (a.window <= 0 || p >= tlen[t] - a.window)) {
                    const float *qr = qs + (size_t)r * D;
                    const __half2 *kr = (const __half2 *)(ks + j * ld);
                    float dot = 0.0f;
                    for (int d = 0; d < D / 2; d++) {
                        const float2 kf = __half22float2(kr[d]);
                        dot = fmaf(qr[2 * d], kf.x, dot);
                        dot = fmaf(qr[2 * d + 1], kf.y, dot);
                    }
                    s = dot * a.scale;
                }
                sc[i] = s;
            }
            __syncthreads();
            for (int r = warp; r < R; r += ATT_THREADS / 32) {  // online softmax, lane = position
                const float s = sc[r * ATT_KT + lane], mo = mrow[r];
                const float mn = fmaxf(mo, warp_max(s));
                float corr = 1.0f, p = 0.0f;
                if (mn != -INFINITY) corr = expf(mo - mn), p = expf(s - mn);
                const float ls = warp_sum(p);
                sc[r * ATT_KT + lane] = p;
                __syncwarp();  // every lane has read mrow[r] before lane 0 writes it (racecheck, H200)
                if (lane == 0) mrow[r] = mn, lrow[r] = lrow[r] * corr + ls, crow[r] = corr;
            }
            __syncthreads();
            if (rg < P.rg) {  // O = O·corr + P·V
#pragma unroll
                for (int i = 0; i < ATT_FLOATS / 8; i++) {
                    const int r = rg + P.rg * i;
                    if (r >= R) break;
                    const float c = crow[r];
#pragma unroll
                    for (int e = 0; e < 8; e++) O[i][e] *= c;
#pragma unroll 2
                    for (int j = 0; j < ATT_KT; j++) {
                        const float pj = sc[r * ATT_KT + j];
                        // positions this row may not see (a later prompt token's) add nothing,
                        // even where their V overflowed fp16: 0·inf would be NaN
                        if (pj == 0.0f) continue;
                        const __half2 *vr = (const __half2 *)(vs + j * ld + 8 * du);
#pragma unroll
                        for (int e = 0; e < 4; e++) {
                            const float2 vf = __half22float2(vr[e]);
                            O[i][2 * e] += pj * vf.x;
                            O[i][2 * e + 1] += pj * vf.y;
                        }
                    }
                }
            }
        }
    }
    __syncthreads();  // mrow/lrow of the last tile are final
    if (rg >= P.rg) return;
#pragma unroll
    for (int i = 0; i < ATT_FLOATS / 8; i++) {
        const int r = rg + P.rg * i;
        if (r >= R) break;
        const int t = r / G, g = r % G, tl = tl0 + t, h = h0 + g;
        const int nsp = att_splits_of(tlen[t], P.chunk);
        if (split >= nsp) continue;  // nothing of this token in the split
        float l = lrow[r];
        if (nsp == 1) {  // the merge would compute exactly this
            const float ms = a.sinks ? sink_fold(a.sinks[h], mrow[r], &l) : 1.0f;
            float *o = a.out + ((int64_t)(a.t0 + tl) * a.n_heads + h) * D + 8 * du;
            for (int e = 0; e < 8; e++) o[e] = l > 0.0f ? O[i][e] * ms / l : 0.0f;
        } else {
            const int64_t ps = ((int64_t)tl * a.n_heads + h) * a.n_splits + split;
            float *o = a.part + ps * D + 8 * du;
            for (int e = 0; e < 8; e++) o[e] = O[i][e];
            if (du == 0) a.ml[ps] = make_float2(mrow[r], l);
        }
    }
}

// out = Σ_s e^(m_s - M)·O_s / Σ_s e^(m_s - M)·l_s over a token's splits; with
// a.oq (a decode pass, D % 32 == 0) also out's q8_1 form for the output
// projection (k_quant_q8_1's values: that launch is saved), a warp per 32 dims.
__global__ void k_attn_merge(attn_args a) {
    grid_dep_wait();
    const int h = blockIdx.x, tl = blockIdx.y, tok = a.t0 + tl;
    const int nsp = att_splits_of(a.pos[tok] + 1, a.P.chunk);
    if (nsp <= 1 && !a.oq) return;  // written by k_attention
    const int64_t base = ((int64_t)tl * a.n_heads + h) * a.n_splits;
    const float2 *ml = a.ml + base;
    float M = -INFINITY, L = 0.0f, ms = 1.0f;
    if (nsp > 1) {
        for (int s = 0; s < nsp; s++) M = fmaxf(M, ml[s].x);
        for (int s = 0; s < nsp; s++) L += expf(ml[s].x - M) * ml[s].y;
        if (a.sinks) ms = sink_fold(a.sinks[h], M, &L);
    }
    const int64_t o0 = ((int64_t)tok * a.n_heads + h) * a.D;
    for (int d0 = threadIdx.x & ~31; d0 < a.D; d0 += blockDim.x) {
        const int d = d0 + (threadIdx.x & 31);
        if (d >= a.D) break;  // (only where D % 32 != 0, so never with oq)
        float v;
        if (nsp > 1) {
            float acc = 0.0f;
            for (int s = 0; s < nsp; s++) acc += expf(ml[s].x - M) * a.part[(base + s) * a.D + d];
            a.out[o0 + d] = v = L > 0.0f ? acc * ms / L : 0.0f;
        } else {
            v = a.out[o0 + d];
        }
        if (a.oq) warp_q8_1(v, (o0 + d0) / 32, a.oq, a.ods);
    }
}

void cuda_kv_store(backend *b, void *kpool, void *vpool, const float *k, const float *v, const fwd_batch *fb,
                   int kv_dim, int kv_type) {
    act_forget(b);
    const int64_t items = (int64_t)fb->n * kv_dim;
    if (items <= 0) return;
    if (kv_type == KV_Q8) {  // a warp per 32 values of K or V
        k_kv_store_q8<<<blocks_for(2 * items, 256), 256, 0, b->stream>>>(
            (uint8_t *)kpool, (uint8_t *)vpool, k, v, fb->slot, fb->n, kv_dim, (int64_t)kv_row_bytes(KV_Q8, kv_dim));
        LAUNCHED("k_kv_store_q8");
        return;
    }
    k_kv_store<<<blocks_for(items, 256), 256, 0, b->stream>>>((__half *)kpool, (__half *)vpool, k, v, fb->slot,
                                                               fb->n, kv_dim);
    LAUNCHED("k_kv_store");
}

void cuda_rope_store(backend *b, float *q, const float *k, const float *v, void *kpool, void *vpool, int n_q,
                     int n_k, int head_dim, const int32_t *pos, const rope_cfg *rc, const fwd_batch *fb, int kv_type) {
    act_forget(b);
    const int kv_dim = n_k * head_dim;
    if (fb->n <= 0) return;
    const int64_t q_threads = round_up((int64_t)fb->n * n_q * (rc->n_rot / 2), 32), kv_items = (int64_t)fb->n * 2 * kv_dim;
    const float theta_scale = powf(rc->base, -2.0f / (float)rc->n_rot);  // cpu.c's value
    const unsigned grid = blocks_for(q_threads + kv_items, 256);
    const int64_t rb = (int64_t)kv_row_bytes(kv_type, kv_dim);
    if (kv_type == KV_Q8)
        k_rope_store<true><<<grid, 256, 0, b->stream>>>(q, k, v, (uint8_t *)kpool, (uint8_t *)vpool, fb->slot, pos,
                                                         fb->n, n_q, n_k, head_dim, *rc, theta_scale, q_threads, rb);
    else
        k_rope_store<false><<<grid, 256, 0, b->stream>>>(q, k, v, (uint8_t *)kpool, (uint8_t *)vpool, fb->slot, pos,
                                                          fb->n, n_q, n_k, head_dim, *rc, theta_scale, q_threads, rb);
    LAUNCHED("k_rope_store");
}

// Lets k_attention have up to bytes of dynamic shared memory (at init).
int attention_allow_smem(backend *b, int bytes) {
    return CK(cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// Tokens t0 .. t0+nt-1 of the pass, tq per CTA, in launches whose split
// partials fit ATT_PART_BYTES.
static void launch_attention(backend *b, attn_args a, int t0, int nt, int tq) {
    if (nt <= 0) return;
    while (tq > 1 && att_smem(a.P, a.D, tq) > b->smem_optin) tq /= 2;
    const size_t per_tok = (size_t)a.n_heads * a.n_splits * (a.D * sizeof(float) + sizeof(float2));
    // tokens per launch: k_attn_merge's grid.y is one per token (<= 65535)
    int64_t tg = (int64_t)(ATT_PART_BYTES / per_tok) / tq * tq;
    tg = tg < tq ? tq : tg > 65535 / tq * tq ? 65535 / tq * tq : tg;
    for (int s = 0; s < nt; s += (int)tg) {
        const int cnt = nt - s < tg ? nt - s : (int)tg;
        a.t0 = t0 + s, a.nt = cnt, a.tq = tq;
        if (a.n_splits > 1) {
            char *buf = (char *)scratch(b, SCR_ATT, per_tok * cnt);
            if (!buf) return;
            a.part = (float *)buf;
            a.ml = (float2 *)(buf + (size_t)cnt * a.n_heads * a.n_splits * a.D * sizeof(float));
        }
        const dim3 grid((unsigned)(a.P.hchunks * (a.n_heads / a.P.group)), (unsigned)a.n_splits,
                        blocks_for(cnt, tq));
        k_attention<<<grid, ATT_THREADS, att_smem(a.P, a.D, tq), b->stream>>>(a);
        if (LAUNCHED("k_attention")) return;
        if (a.n_splits > 1) {
            k_attn_merge<<<dim3((unsigned)a.n_heads, (unsigned)cnt), 128, 0, b->stream>>>(a);
            if (LAUNCHED("k_attn_merge")) return;
        }
    }
}

void cuda_attention(backend *b, float *out, const float *q, const void *kpool, const void *vpool,
                    const fwd_batch *fb, int n_heads, int n_kv_heads, int head_dim, int kv_type,
                    const attn_cfg *ac) {
    act_forget(b);
    if (fb->n <= 0) return;
    if (head_dim % (kv_type == KV_Q8 ? 32 : 8) || head_dim > ATT_DMAX || n_kv_heads <= 0 || n_heads % n_kv_heads) {
        fail(b, "attention: head_dim %d with %d/%d heads: the CUDA kernel takes head_dim a multiple of 8 (q8 KV: "
             "32) up to %d", head_dim, n_heads, n_kv_heads, ATT_DMAX);
        return;
    }
    const int capacity = fb->max_blocks * KV_BLOCK;
    attn_args a;
    memset(&a, 0, sizeof a);
    a.P = att_make_plan(n_heads, n_kv_heads, head_dim, capacity, b->sm_count);
    // splits: enough for the capacity in a decode pass or whenever a graph is
    // recorded (it replays at any length); only those the pass reaches for a prompt
    const int cap_splits = att_splits_of(capacity, a.P.chunk);
    const int len_splits = att_splits_of(fb->max_len > 0 ? fb->max_len : capacity, a.P.chunk);
    a.n_splits = b->capturing || fb->n <= MMV_MAX || len_splits > cap_splits ? cap_splits : len_splits;
    a.q = q, a.k = (const uint8_t *)kpool, a.v = (const uint8_t *)vpool;
    a.kv_q8 = kv_type == KV_Q8, a.row_bytes = (int64_t)kv_row_bytes(kv_type, n_kv_heads * head_dim);
    a.pos = fb->pos, a.seq = fb->seq, a.tables = fb->tables, a.max_blocks = fb->max_blocks;
    a.n_heads = n_heads, a.D = head_dim, a.kv_dim = n_kv_heads * head_dim;
    a.scale = ac->scale, a.window = ac->window, a.sinks = ac->sinks;
    a.out = out;
    // a prompt's tokens share K/V tiles; other tokens (one per sequence) go alone
    const int np = fb->n_prompt >= 2 ? (fb->n_prompt < fb->n ? fb->n_prompt : fb->n) : 0;
    // a decode pass's merge also quantizes out for the output projection
    act_t oa;
    const int quantize = fb->n <= MMV_MAX && head_dim % 32 == 0 && a.n_splits > 1;
    if (quantize) {
        if (act_buf(b, fb->n, (int64_t)n_heads * head_dim, &oa)) return;
        a.oq = (int8_t *)oa.q, a.ods = (float2 *)oa.ds;
    }
    launch_attention(b, a, 0, np, a.P.tq_max);
    launch_attention(b, a, np, fb->n - np, 1);
    if (quantize && !b->failed) b->act_src = out, b->act_len = (int64_t)fb->n * n_heads * head_dim;
}
