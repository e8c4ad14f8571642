// kernels_selftest.cu — cuda_host_selftest (kernels.h): the code the kernels
// share with the host (kernels_qhd.cuh), run on the CPU against quant.c and
// cpu.c's definitions. Needs no GPU; tests/test_backend_ops.c calls it.
#include "kernels_common.cuh"

typedef struct {
    uint64_t s;
} st_rng;

static uint32_t st_next(st_rng *r) {
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(r->s >> 33);
}
static float st_unif(st_rng *r) { return (float)(st_next(r) & 0xffffff) / 8388608.0f - 1.0f; }  // [-1, 1)

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

// `rows` GGUF rows of type t: random quants, scales of plausible size.
static void st_rows(st_rng *r, uint32_t t, int64_t rows, int64_t cols, uint8_t *dst) {
    const size_t rb = qtype_row_bytes(t, cols), bb = qtype_get(t)->block_bytes;
    for (size_t i = 0; i < rows * rb; i++) dst[i] = (uint8_t)st_next(r);
    const size_t nblk = rows * rb / bb;
    for (size_t k = 0; k < nblk; k++) {
        uint8_t *blk = dst + k * bb;
        const uint16_t d = f32_to_fp16(0.002f + 0.01f * fabsf(st_unif(r))), m = f32_to_fp16(0.01f * st_unif(r));
        switch (t) {
        case Q_F32: { const float f = st_unif(r); memcpy(blk, &f, 4); break; }
        case Q_F16: put16(blk, f32_to_fp16(st_unif(r))); break;
        case Q_BF16: put16(blk, f32_to_bf16(st_unif(r))); break;
        case Q_Q4_1: case Q_Q5_1: case Q_Q4_K: case Q_Q5_K: put16(blk, d), put16(blk + 2, m); break;
        case Q_Q6_K: put16(blk + 208, d); break;
        case Q_Q3_K: put16(blk + 108, d); break;
        case Q_Q2_K: put16(blk + 80, d), put16(blk + 82, d); break;
        case Q_MXFP4: blk[0] = (uint8_t)(118 + st_next(r) % 8); break;  // scales 2^-10 .. 2^-3
        default: put16(blk, d); break;  // Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS
        }
    }
}

template <uint32_t T>
static int st_dq_row(const uint8_t *packed, const dlayout &L, int64_t r, int64_t cols, float *out) {
    for (int64_t g = 0; g < (cols + 31) / 32; g++) {
        float v[32];
        dq32<T>(packed, L, r, g, cols, v);
        for (int j = 0; j < 32 && 32 * g + j < cols; j++) out[32 * g + j] = v[j];
    }
    return 0;
}

template <uint32_t T>
static float st_mv(const uint8_t *packed, const dlayout &L, int64_t r, const act_t &x, int n, int t) {
    float acc[MMV_MAX] = {0};
    for (int64_t it = 0; it < mv_items<T>(x.cols); it++) mv_item<T, MMV_MAX>(packed, L, r, it, x, n, acc);
    return acc[t];
}

template <uint32_t T>
static float st_mv1(const uint8_t *packed, const dlayout &L, int64_t r, const act_t &x) {
    float acc[1] = {0};
    for (int64_t it = 0; it < mv_items<T>(x.cols); it++) mv_item<T, 1>(packed, L, r, it, x, 1, acc);
    return acc[0];
}

// One type: repack, dequantize every row (== quant.c), and the matrix-vector
// items over 3 tokens (== a float64 product of the dequantized operands).
template <uint32_t T>
static int st_type(st_rng *rng, int64_t cols, FILE *log, char *err) {
    char tb[16];
    const char *name = qtype_name(T, tb);
    const int64_t rows = 5;
    const int n = 3;
    const size_t rb = qtype_row_bytes(T, cols);
    const dlayout L = dl_make(T, rows, cols);
    uint8_t *gguf = (uint8_t *)malloc(rows * rb), *packed = (uint8_t *)calloc(1, L.bytes);
    float *ref = (float *)malloc(sizeof(float) * cols), *got = (float *)malloc(sizeof(float) * cols);
    float *x = (float *)malloc(sizeof(float) * n * cols), *xd = (float *)malloc(sizeof(float) * n * cols);
    int8_t *xq = (int8_t *)malloc(n * cols + 16);
    float2 *xds = (float2 *)malloc(sizeof(float2) * (n * cols / 32 + 1));
    int rc = 0;
    if (!gguf || !packed || !ref || !got || !x || !xd || !xq || !xds) {
        rc = errf(err, "out of memory");
        goto done;
    }
    st_rows(rng, T, rows, cols, gguf);
    for (int64_t r = 0; r < rows; r++) dl_pack_row(T, gguf + r * rb, cols, &L, r, packed);
    for (int64_t i = 0; i < n * cols; i++) x[i] = st_unif(rng) * (i % 7 == 0 ? 4.0f : 1.0f);
    if (is_quantized(T)) {
        for (int64_t b = 0; b < n * cols / 32; b++) {
            q8_block(x + 32 * b, xq + 32 * b, &xds[b]);
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                xd[32 * b + j] = (float)xq[32 * b + j] * xds[b].x;
                sum += xq[32 * b + j];
                if (fabsf(xd[32 * b + j] - x[32 * b + j]) > 0.5001f * xds[b].x) {
                    rc = errf(err, "q8_1: element %lld: %g does not round to %g", (long long)(32 * b + j),
                              (double)x[32 * b + j], (double)xd[32 * b + j]);
                    goto done;
                }
            }
            if (xds[b].y != xds[b].x * (float)sum) {
                rc = errf(err, "q8_1: block %lld: s %g != d * sum %g", (long long)b, (double)xds[b].y,
                          (double)(xds[b].x * (float)sum));
                goto done;
            }
        }
    } else {
        memcpy(xd, x, sizeof(float) * n * cols);
    }
    for (int64_t r = 0; r < rows && !rc; r++) {
        q_dequantize_row(T, gguf + r * rb, ref, cols);
        st_dq_row<T>(packed, L, r, cols, got);
        for (int64_t e = 0; e < cols; e++)
            if (got[e] != ref[e]) {
                rc = errf(err, "%s %lld cols: row %lld element %lld dequantizes to %.9g, quant.c says %.9g", name,
                          (long long)cols, (long long)r, (long long)e, (double)got[e], (double)ref[e]);
                goto done;
            }
        const act_t a = {xq, xds, x, cols, cols % 4 == 0};
        for (int t = 0; t < n; t++) {
            double want = 0, mag = 0;
            for (int64_t e = 0; e < cols; e++) want += (double)ref[e] * xd[t * cols + e], mag += fabs((double)ref[e] * xd[t * cols + e]);
            const float y = st_mv<T>(packed, L, r, a, n, t);
            if (fabs(y - want) > 2e-6 * mag + 1e-30) {
                rc = errf(err, "%s %lld cols: row %lld token %d: matvec %.9g, float64 %.9g (|error| %.3g of %.3g)", name,
                          (long long)cols, (long long)r, t, (double)y, want, fabs(y - want), mag);
                goto done;
            }
        }
        act_t a1 = a;
        for (int t = 0; t < n; t++) {  // a token alone computes what it computes among others
            a1.q = xq + t * cols, a1.ds = xds + t * (cols / 32), a1.f = x + t * cols;
            const float alone = st_mv1<T>(packed, L, r, a1), among = st_mv<T>(packed, L, r, a, n, t);
            if (memcmp(&alone, &among, 4)) {
                rc = errf(err, "%s: row %lld token %d: %.9g alone, %.9g among %d tokens", name, (long long)r, t,
                          (double)alone, (double)among, n);
                goto done;
            }
        }
    }
    if (log) fprintf(log, "ok   host: %s %lld columns: repack, dequantize, matvec blocks\n", name, (long long)cols);
done:
    free(gguf), free(packed), free(ref), free(got), free(x), free(xd), free(xq), free(xds);
    return rc;
}

static int st_rope(FILE *log, char *err) {
    const float bases[] = {10000.0f, 500000.0f, 1e6f};
    float ff[64];
    for (int i = 0; i < 64; i++) ff[i] = 1.0f + 0.25f * (float)i;
    for (int bi = 0; bi < 3; bi++) {
        const int n_rot = 128;
        const float ts = powf(bases[bi], -2.0f / (float)n_rot);
        const int positions[] = {0, 1, 17, 4095, 131071};
        for (int pi = 0; pi < 5; pi++) {
            float theta = (float)positions[pi];  // cpu.c's loop
            for (int p = 0; p < n_rot / 2; p++) {
                const float want = theta / ff[p], got = rope_theta(positions[pi], p, ts, ff);
                if (memcmp(&want, &got, 4))
                    return errf(err, "rope: base %g pos %d pair %d: angle %.9g, cpu.c %.9g", (double)bases[bi],
                                positions[pi], p, (double)got, (double)want);
                theta *= ts;
            }
        }
    }
    if (log) fprintf(log, "ok   host: rope angles as cpu.c\n");
    return 0;
}

// Plans for the shapes quill meets: the accumulators, shared memory and grid
// limits hold.
static int st_attention_plan(FILE *log, char *err) {
    const int dims[] = {8, 16, 64, 80, 96, 128, 256}, groups[] = {1, 2, 3, 4, 7, 8, 16, 32};
    const int caps[] = {16, 512, 4096, 131072, 1 << 24}, sms[] = {132, 78, 16};  // 2^24: the loader's limit
    for (int a = 0; a < 7; a++)
        for (int g = 0; g < 8; g++)
            for (int c = 0; c < 5; c++)
                for (int s = 0; s < 3; s++) {
                    const int D = dims[a], n_kv = 8, n_heads = n_kv * groups[g];
                    const att_plan P = att_make_plan(n_heads, n_kv, D, caps[c], sms[s]);
                    const int splits = att_splits_of(caps[c], P.chunk);
                    const size_t smem = att_smem(P, D, P.tq_max);
                    const char *why = P.chunk % ATT_KT ? "chunk not a multiple of the tile"
                                    : P.gcta * P.tq_max > P.rg * (ATT_FLOATS / 8) && P.tq_max > 1 ? "rows exceed the accumulators"
                                    : P.gcta > P.rg * (ATT_FLOATS / 8) ? "heads exceed the accumulators"
                                    : P.du * P.rg > ATT_THREADS ? "threads"
                                    : splits < 1 || splits > 65535 ? "split count"
                                    : P.hchunks * P.gcta < P.group ? "heads uncovered"
                                    : smem > 160 * 1024 ? "shared memory" : NULL;
                    if (why)
                        return errf(err, "attention plan (head_dim %d, group %d, capacity %d, %d SMs): %s "
                                    "(chunk %d, tq %d, %d splits, %zu bytes)", D, groups[g], caps[c], sms[s], why,
                                    P.chunk, P.tq_max, splits, smem);
                }
    int32_t tables[2 * 4] = {7, 2, 5, 0, 1, 3, 6, 4};
    for (int sq = 0; sq < 2; sq++)
        for (int p = 0; p < 4 * KV_BLOCK; p++)
            if (kv_row(tables, 4, sq, p) != (int64_t)tables[sq * 4 + p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK)
                return errf(err, "kv_row: sequence %d position %d", sq, p);
    if (log) fprintf(log, "ok   host: attention plans and paged addressing\n");
    return 0;
}

// The sampler's keys order tokens as sample.c's cand_better does.
static int st_sample_keys(st_rng *r, FILE *log, char *err) {
    const float special[] = {-INFINITY, -1e30f, -1.0f, -0.0f, 0.0f, 1e-30f, 1.0f, 3.5f, 1e30f, INFINITY};
    for (int i = 0; i < 20000; i++) {
        const float la = i < 100 ? special[i % 10] : st_unif(r) * 8, lb = i < 100 ? special[i / 10] : (st_next(r) & 1) ? la : st_unif(r) * 8;
        const int ia = (int)(st_next(r) % 200000), ib = (int)(st_next(r) % 200000);
        const int better = la > lb || (la == lb && ia < ib);
        const int by_key = cand_key(la, ia) > cand_key(lb, ib);
        if (better != by_key && !(la == lb && ia == ib))
            return errf(err, "sampler keys: (%g, %d) vs (%g, %d): cand_better %d, keys %d", (double)la, ia, (double)lb,
                        ib, better, by_key);
    }
    if (log) fprintf(log, "ok   host: sampler keys order as sample.c\n");
    return 0;
}

extern "C" int cuda_host_selftest(FILE *log, char *err) {
    st_rng r = {12345};
    const int64_t fcols[] = {1, 37, 64, 4096};
    for (int i = 0; i < 4; i++)
        if (st_type<Q_F32>(&r, fcols[i], log, err) || st_type<Q_F16>(&r, fcols[i], log, err) ||
            st_type<Q_BF16>(&r, fcols[i], log, err))
            return -1;
    const int64_t bcols[] = {32, 96, 4096};
    for (int i = 0; i < 3; i++)
        if (st_type<Q_Q8_0>(&r, bcols[i], log, err) || st_type<Q_Q4_0>(&r, bcols[i], log, err) ||
            st_type<Q_Q4_1>(&r, bcols[i], log, err) || st_type<Q_Q5_0>(&r, bcols[i], log, err) ||
            st_type<Q_Q5_1>(&r, bcols[i], log, err) || st_type<Q_IQ4_NL>(&r, bcols[i], log, err) ||
            st_type<Q_MXFP4>(&r, bcols[i], log, err))
            return -1;
    const int64_t kcols[] = {256, 768, 4096};
    for (int i = 0; i < 3; i++)
        if (st_type<Q_Q4_K>(&r, kcols[i], log, err) || st_type<Q_Q5_K>(&r, kcols[i], log, err) ||
            st_type<Q_Q6_K>(&r, kcols[i], log, err) || st_type<Q_Q2_K>(&r, kcols[i], log, err) ||
            st_type<Q_Q3_K>(&r, kcols[i], log, err) || st_type<Q_IQ4_XS>(&r, kcols[i], log, err))
            return -1;
    return st_rope(log, err) || st_attention_plan(log, err) || st_sample_keys(&r, log, err) ? -1 : 0;
}
