// kernels_gemm.cu — matmul over a prompt: quantized weights dequantized to fp16
// tile by tile (k_dequant_f16), the activation to fp16/bf16 (k_to_half), and
// the product through cuBLASLt with one algorithm per weight shape (cuBLAS
// where Lt refuses); cuda_matmul splits a matmul's rows between this and the
// decode kernel (kernels_matvec.cu).
#include "kernels_common.cuh"

// out[i] = x[i] rounded to fp16 (bf16 = 0) or bf16 (bf16 = 1).
__global__ void k_to_half(const float *__restrict__ x, int64_t len, int bf16, void *__restrict__ out) {
    grid_dep_wait();
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < len; i += (int64_t)gridDim.x * blockDim.x) {
        if (bf16) ((__nv_bfloat16 *)out)[i] = __float2bfloat16_rn(x[i]);
        else ((__half *)out)[i] = __float2half_rn(x[i]);
    }
}

// Rows row0 .. row0+nrows-1 of a quantized weight as fp16 [nrows, cols]; one
// thread per block of 32. Block idx is out[32·idx .. 32·idx+31] (cols % 32
// == 0), so a CTA's blocks are one contiguous run of out: they are staged in
// shared memory and stored 16 bytes a thread, consecutive threads at
// consecutive addresses (a thread storing its own 64 bytes made every warp
// store touch 32 sectors, and the prefill spent half its time here).
template <uint32_t T>
__global__ void __launch_bounds__(DQ_THREADS) k_dequant_f16(const uint8_t *__restrict__ w, dlayout L, int64_t row0,
                                                            int64_t nrows, int64_t cols, __half *__restrict__ out) {
    grid_dep_wait();
    __shared__ uint4 st[DQ_THREADS * 4];  // [thread][4]: its 32 halves
    const int64_t G = cols / 32, total = nrows * G, base = (int64_t)blockIdx.x * DQ_THREADS;
    const int64_t idx = base + threadIdx.x;
    if (idx < total) {
        float v[32];
        dq32<T>(w, L, row0 + idx / G, idx % G, cols, v);
        __half2 h[16];
#pragma unroll
        for (int j = 0; j < 16; j++) h[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
        memcpy(&st[4 * threadIdx.x], h, sizeof h);
    }
    __syncthreads();
    const int64_t n16 = 4 * (total - base < (int64_t)DQ_THREADS ? total - base : (int64_t)DQ_THREADS);
    uint4 *o = (uint4 *)out + 4 * base;
    for (int64_t i = threadIdx.x; i < n16; i += DQ_THREADS) o[i] = st[i];
}

// x [n, cols] as fp16 (or bf16) in SCR_HALF, kept while x is unchanged.
const void *act_half(backend *b, const float *x, int n, int64_t cols, int bf16) {
    void *buf = scratch(b, SCR_HALF, (size_t)n * cols * 2);
    if (!buf) return NULL;
    if (b->half_src == x && b->half_n == n && b->half_cols == cols && b->half_bf16 == bf16) return buf;
    k_to_half<<<grid_for((int64_t)n * cols, 256), 256, 0, b->stream>>>(x, (int64_t)n * cols, bf16, buf);
    if (LAUNCHED("k_to_half")) return NULL;
    b->half_src = x, b->half_n = n, b->half_cols = cols, b->half_bf16 = bf16;
    return buf;
}

// cuBLASLt calls: checked, and a refusal sends the product to blas_tiles.
#define LT(call) ((call) != CUBLAS_STATUS_SUCCESS)

// 1 when cuBLASLt accepts algo for C[m, n] = op(A)ᵀ·B at this n.
static int lt_check(backend *b, cublasLtMatmulDesc_t op, const cublasLtMatmulAlgo_t *algo, cudaDataType_t at,
                    int64_t m, int64_t k, int64_t lda, int64_t ldc, int64_t n) {
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulHeuristicResult_t res;
    const int ok = !LT(b->api.p_cublasLtMatrixLayoutCreate(&la, at, (uint64_t)k, (uint64_t)m, lda)) &&
                   !LT(b->api.p_cublasLtMatrixLayoutCreate(&lb, at, (uint64_t)k, (uint64_t)n, k)) &&
                   !LT(b->api.p_cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)m, (uint64_t)n, ldc)) &&
                   !LT(b->api.p_cublasLtMatmulAlgoCheck(b->lt, op, la, lb, lc, lc, algo, &res)) &&
                   res.workspaceSize <= LT_WORKSPACE;
    if (lc) b->api.p_cublasLtMatrixLayoutDestroy(lc);
    if (lb) b->api.p_cublasLtMatrixLayoutDestroy(lb);
    if (la) b->api.p_cublasLtMatrixLayoutDestroy(la);
    return ok;
}

// The decision for C[m, n] = op(A)ᵀ·B with A [m rows of k] of atype: a
// cuBLASLt algorithm chosen once per shape (for n = 8 tiles) without split-K
// reductions and checked at the GEMM's smallest and odd n, then used for
// every n, so a row's sum is the same whatever n is. The decision is
// remembered also when no algorithm qualifies (usable 0: blas_tiles), so a
// shape never switches between the two from one prompt to the next.
static lt_entry *lt_algo(backend *b, cublasLtMatmulDesc_t op, cudaDataType_t at, int64_t m, int64_t k, int64_t lda,
                         int64_t ldc) {
    int slot = -1;
    for (int i = 0; i < LT_ALGOS; i++) {
        lt_entry *e = &b->lt_cache[i];
        if (e->used && e->atype == at && e->m == m && e->k == k && e->lda == lda && e->ldc == ldc) return e;
        if (!e->used && slot < 0) slot = i;
    }
    if (slot < 0) slot = (int)((m ^ k) % LT_ALGOS);  // full: replace one
    const int64_t n_ref = 8 * PREFILL_TILE;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int nres = 0;
    const size_t ws = LT_WORKSPACE;
    const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_NONE;  // mask: no split-K reduction
    const uint32_t align = 16;
    const int bad =
        LT(b->api.p_cublasLtMatrixLayoutCreate(&la, at, (uint64_t)k, (uint64_t)m, lda)) ||
        LT(b->api.p_cublasLtMatrixLayoutCreate(&lb, at, (uint64_t)k, (uint64_t)n_ref, k)) ||
        LT(b->api.p_cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)m, (uint64_t)n_ref, ldc)) ||
        LT(b->api.p_cublasLtMatmulPreferenceCreate(&pref)) ||
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws)) ||
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions,
                                                sizeof reductions)) ||
        // the model's buffers are 64-byte aligned, row offsets 16: exclude algorithms that need 256
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align, sizeof align)) ||
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align, sizeof align)) ||
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align, sizeof align)) ||
        LT(b->api.p_cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align, sizeof align)) ||
        LT(b->api.p_cublasLtMatmulAlgoGetHeuristic(b->lt, op, la, lb, lc, lc, pref, 1, &res, &nres));
    if (pref) b->api.p_cublasLtMatmulPreferenceDestroy(pref);
    if (lc) b->api.p_cublasLtMatrixLayoutDestroy(lc);
    if (lb) b->api.p_cublasLtMatrixLayoutDestroy(lb);
    if (la) b->api.p_cublasLtMatrixLayoutDestroy(la);
    int usable = !bad && nres >= 1;
    const int64_t ns[] = {GEMM_MIN, PREFILL_TILE, PREFILL_TILE + GEMM_MIN, n_ref + 1};
    for (int i = 0; usable && i < 4; i++) usable = lt_check(b, op, &res.algo, at, m, k, lda, ldc, ns[i]);
    lt_entry *e = &b->lt_cache[slot];
    *e = (lt_entry){1, usable, at, m, k, lda, ldc, {}};
    if (usable) e->algo = res.algo;
    return e;
}

// The operation C = op(A)ᵀ·B in fp32 (NULL where cuBLASLt refuses it).
static cublasLtMatmulDesc_t lt_op(backend *b) {
    cublasLtMatmulDesc_t op = NULL;
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    if (LT(b->api.p_cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F))) return NULL;
    if (LT(b->api.p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta)) ||
        LT(b->api.p_cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb))) {
        b->api.p_cublasLtMatmulDescDestroy(op);
        return NULL;
    }
    return op;
}

// 1 when fp16 products C[n, m] (ldc) = B[n, k]·A[m, k]ᵀ (lda) go through
// cuBLASLt (the shape's decision, lt_algo): each row of C is then computed
// the same way whatever n is and whatever rows share the product.
int gemm_rowwise(backend *b, int64_t m, int64_t k, int64_t lda, int64_t ldc) {
    if (b->gemm_per_tile) return 0;
    cublasLtMatmulDesc_t op = lt_op(b);
    if (!op) return 0;
    const int usable = lt_algo(b, op, CUDA_R_16F, m, k, lda, ldc)->usable;
    b->api.p_cublasLtMatmulDescDestroy(op);
    return usable;
}

// C[n, m] (ldc) = B[n, k]·A[m, k]ᵀ with cuBLASLt; -1 when the shape's
// decision (lt_algo) is blas_tiles. A refusal by cuBLASLt is not a failure:
// it makes blas_tiles the shape's decision from then on.
static int lt_matmul(backend *b, const void *A, cudaDataType_t at, int64_t lda, int64_t m, int64_t k, const void *B,
                     int64_t n, float *C, int64_t ldc) {
    cublasLtMatmulDesc_t op = lt_op(b);
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    const float one = 1.0f, zero = 0.0f;
    int rc = -1;
    if (op && !LT(b->api.p_cublasLtMatrixLayoutCreate(&la, at, (uint64_t)k, (uint64_t)m, lda)) &&
        !LT(b->api.p_cublasLtMatrixLayoutCreate(&lb, at, (uint64_t)k, (uint64_t)n, k)) &&
        !LT(b->api.p_cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, (uint64_t)m, (uint64_t)n, ldc))) {
        lt_entry *e = lt_algo(b, op, at, m, k, lda, ldc);
        if (e->usable && !LT(b->api.p_cublasLtMatmul(b->lt, op, &one, A, la, B, lb, &zero, C, lc, C, lc, &e->algo,
                                                     b->blas_ws, LT_WORKSPACE, b->stream)))
            rc = 0;
        else
            e->usable = 0;
    }
    if (lc) b->api.p_cublasLtMatrixLayoutDestroy(lc);
    if (lb) b->api.p_cublasLtMatrixLayoutDestroy(lb);
    if (la) b->api.p_cublasLtMatrixLayoutDestroy(la);
    if (op) b->api.p_cublasLtMatmulDescDestroy(op);
    if (rc) b->lt_fallbacks++;
    return rc;
}

// The same product with cuBLAS, one call per PREFILL_TILE rows of B (cuBLAS
// picks its algorithm by shape; per tile, a row depends only on its tile).
static void blas_tiles(backend *b, const void *A, cudaDataType_t at, int64_t lda, int64_t m, int64_t k,
                       const void *B, int64_t n, float *C, int64_t ldc) {
    const float one = 1.0f, zero = 0.0f;
    const size_t esize = at == CUDA_R_32F ? 4 : 2;
    for (int64_t t0 = 0; t0 < n; t0 += PREFILL_TILE) {
        const int64_t nt = n - t0 < PREFILL_TILE ? n - t0 : PREFILL_TILE;
        const void *Bt = (const char *)B + (size_t)t0 * k * esize;
        float *Ct = C + t0 * ldc;
        if (at == CUDA_R_32F) {
            if (BK(b->api.p_cublasSgemm(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)nt, (int)k, &one, (const float *)A,
                               (int)lda, (const float *)Bt, (int)k, &zero, Ct, (int)ldc)))
                return;
        } else if (BK(b->api.p_cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)m, (int)nt, (int)k, &one, A, at, (int)lda, Bt,
                                   at, (int)k, &zero, Ct, CUDA_R_32F, (int)ldc, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT))) {
            return;
        }
    }
}

void gemm_call(backend *b, const void *A, cudaDataType_t at, int64_t lda, int64_t m, int64_t k, const void *B,
               int64_t n, float *C, int64_t ldc) {
    if (at != CUDA_R_32F && !b->gemm_per_tile && lt_matmul(b, A, at, lda, m, k, B, n, C, ldc) == 0) return;
    blas_tiles(b, A, at, lda, m, k, B, n, C, ldc);
}

template <uint32_t T>
static void launch_dequant(backend *b, const qmat *w, const dlayout &L, int64_t r0, int64_t nr, __half *tile) {
    k_dequant_f16<T><<<blocks_for(nr * (w->cols / 32), DQ_THREADS), DQ_THREADS, 0, b->stream>>>(
        (const uint8_t *)w->data, L, r0, nr, w->cols, tile);
    LAUNCHED("k_dequant_f16");
}

// Rows r0 .. r0+nr-1 of a quantized w as fp16 [nr, cols] in tile.
void dequant_rows(backend *b, const qmat *w, int64_t r0, int64_t nr, __half *tile) {
    const dlayout L = dl_make(w->type, w->rows, w->cols);
    switch (w->type) {
#define X(T) case T: launch_dequant<T>(b, w, L, r0, nr, tile); break;
        FOR_EACH_QTYPE(X)
#undef X
    default: fail(b, "matmul: no CUDA kernel for type %u", w->type);
    }
}

// Rows 0 .. n-1 of y = x·wᵀ (prompt rows) with tensor-core GEMMs.
static void gemm(backend *b, float *y, const qmat *w, const float *x, int n) {
    const int64_t rows = w->rows, cols = w->cols;
    const dlayout L = dl_make(w->type, rows, cols);
    if (w->type == Q_F32) {
        blas_tiles(b, w->data, CUDA_R_32F, L.a_row / 4, rows, cols, x, n, y, rows);
        return;
    }
    const int bf = w->type == Q_BF16;
    const void *xh = act_half(b, x, n, cols, bf);
    if (!xh) return;
    if (!is_quantized(w->type)) {
        gemm_call(b, w->data, bf ? CUDA_R_16BF : CUDA_R_16F, L.a_row / 2, rows, cols, xh, n, y, rows);
        return;
    }
    // quantized: row tiles dequantized to fp16 in bounded scratch (the tile
    // height depends only on the weight's shape)
    int64_t tr = (int64_t)(GEMM_TILE_ELEMS / (size_t)cols) / 128 * 128;
    tr = tr < 128 ? 128 : tr > rows ? rows : tr;
    __half *tile = (__half *)scratch(b, SCR_TILE, (size_t)tr * cols * 2);
    if (!tile) return;
    for (int64_t r0 = 0; r0 < rows && !b->failed; r0 += tr) {
        const int64_t nr = rows - r0 < tr ? rows - r0 : tr;
        dequant_rows(b, w, r0, nr, tile);
        gemm_call(b, tile, CUDA_R_16F, cols, nr, cols, xh, n, y + r0, rows);
    }
}

// Prompt rows the GEMM takes (n_joint's whole tiles, and a last partial one
// of at least GEMM_MIN rows); the others go by matvec.
int gemm_rows(int n, int n_joint) {
    const int nj = n_joint < 0 ? 0 : n_joint > n ? n : n_joint;
    const int full = nj / PREFILL_TILE * PREFILL_TILE, rest = nj - full;
    return full + (rest >= GEMM_MIN ? rest : 0);
}

// Prompt rows in whole PREFILL_TILEs (and a last partial tile of >= GEMM_MIN
// rows) go through the GEMM; every other row through the decode kernel.
void cuda_matmul(backend *b, float *y, const qmat *w, const float *x, int n, int n_joint) {
    if (n <= 0) return;
    const int ng = gemm_rows(n, n_joint);
    if (ng > 0) gemm(b, y, w, x, ng);
    if (ng < n) matvec_rows(b, y, w, x, ng, n);
    act_written(b, y, sizeof(float) * (size_t)n * w->rows);
}
