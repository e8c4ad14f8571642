// simt/cublas.cpp — cuBLAS and cuBLASLt on the CPU: the library installed as
// both libcublas.so.13 and libcublasLt.so.13, over the runtime's services
// (simt_host.h).
//
// All three entry points (cublasSgemm, cublasGemmEx, cublasLtMatmul) turn
// their arguments into one `gemm` — the four matrices as stored, plain values
// only — check it against one contract (check_shapes, check_pointers) and
// queue it on the stream. A refused argument returns INVALID_VALUE and is
// reported through simt::fail with the function, the argument and its value.
//
// The product is a reference, not a model of the GPU's rounding: every
// element is a double sum over k in order, rounded once to the output type
// (nearest even). So an element never depends on n or on how the work is
// blocked, which is what kernels_gemm.cu's one-algorithm-per-shape rule is for.
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <exception>
#include <new>
#include <vector>

#include "cublasLt.h"

// ---- handles and descriptors ---------------------------------------------------

enum : uint32_t {
    BLAS_MAGIC = 0x626c6173,  // "blas": a live cublasHandle_t
    LT_MAGIC = 0x626c744c,    // "bltL": a live cublasLtHandle_t
};
static const uint64_t ALGO_TAG = 0x53494d54;  // "SIMT" in algo.data[0]: the one algorithm

struct cublasContext {
    uint32_t magic;         // BLAS_MAGIC until cublasDestroy
    cudaStream_t stream;    // where products run (cublasSetStream; NULL: the default stream)
    void *workspace;        // cublasSetWorkspace's buffer (kept; no product needs one)
    size_t workspace_bytes;
};

struct cublasLtContext {
    uint32_t magic;  // LT_MAGIC until cublasLtDestroy
};

// int32 fields, not enums: the attributes arrive as raw bytes and may hold
// any value, which check_shapes then names.
struct cublasLtMatmulDescData {
    int32_t compute;         // cublasComputeType_t
    int32_t scale;           // cudaDataType_t of alpha and beta
    int32_t transa, transb;  // cublasOperation_t: how the product reads A, B
};

struct cublasLtMatrixLayoutData {
    cudaDataType_t type;
    int64_t rows, cols, ld;  // column-major: element (r, c) at r + c·ld
};

// Kept but never limiting: the one algorithm needs no workspace, no split-K
// reduction and no alignment, so every preference admits it.
struct cublasLtMatmulPreferenceData {
    uint32_t search_mode;
    uint64_t max_workspace;  // bytes
    uint32_t reductions;     // cublasLtReductionScheme_t bits allowed
    uint32_t min_align[4];   // bytes A, B, C, D are aligned to
};

// ---- the product ---------------------------------------------------------------

// A matrix as stored, column-major: element (r, c) at p[r + c·ld].
struct operand {
    char name;             // 'A', 'B', 'C' or 'D'
    const void *p;         // (C in cuBLAS, D in cuBLASLt: written)
    cudaDataType_t type;
    int32_t op;            // cublasOperation_t: how the product reads it (C, D: N)
    int64_t rows, cols, ld;
    const char *ld_name;   // the argument in messages: "lda", "Adesc ld"
    const char *rows_name; // what its rows are: "m", "k", "n" (cuBLAS) or "rows" (Lt)
};

// D[m, n] = alpha·op(A)[m, k]·op(B)[k, n] + beta·C: plain values only, so
// the queued work holds after the caller has destroyed its descriptors (a
// graph replays it later). cuBLAS's C is both c and d.
struct gemm {
    operand a, b, c, d;
    int64_t m, n, k;
    float alpha, beta;  // compute type 32F: fp32 scalars
};

static int64_t op_rows(const operand &x) { return x.op == CUBLAS_OP_N ? x.rows : x.cols; }
static int64_t op_cols(const operand &x) { return x.op == CUBLAS_OP_N ? x.cols : x.rows; }

// 16-bit floats, IEEE style: half has 10 stored significand bits and
// exponent bias 15, bfloat16 7 and 127.
static double f16_to_double(uint16_t h, int mant, int bias) {
    const int e = (h >> mant) & (2 * bias + 1), f = h & ((1 << mant) - 1);
    double v;
    if (e == 2 * bias + 1) v = f ? NAN : INFINITY;
    else if (e == 0) v = ldexp(f, 1 - bias - mant);  // subnormal, zero
    else v = ldexp(f + (1 << mant), e - bias - mant);
    return h & 0x8000 ? -v : v;
}

// x rounded once to the nearest 16-bit float, ties to even; inf past the
// largest finite value.
static uint16_t f16_from_double(double x, int mant, int bias) {
    const uint16_t sign = signbit(x) ? 0x8000 : 0, inf = (uint16_t)((2 * bias + 1) << mant);
    if (isnan(x)) return sign | inf | 1 << (mant - 1);
    if (isinf(x)) return sign | inf;
    int e;
    frexp(fabs(x), &e);                                // |x| in [2^(e-1), 2^e)
    int exp = std::max(e - 1, 1 - bias);               // |x|'s exponent, or the subnormals'
    double r = nearbyint(ldexp(fabs(x), mant - exp));  // significand in units of the last place
    if (r == 2 << mant) r /= 2, exp++;                 // rounded up to the next binade
    if (exp > bias) return sign | inf;
    if (r < 1 << mant) return sign | (uint16_t)r;      // subnormal
    return sign | (uint16_t)((exp + bias) << mant | ((int)r - (1 << mant)));
}

static size_t type_size(cudaDataType_t t) { return t == CUDA_R_32F ? 4 : 2; }  // of the supported types

static double load(const void *p, cudaDataType_t t, int64_t i) {
    const char *q = (const char *)p + (size_t)i * type_size(t);
    if (t == CUDA_R_32F) {
        float f;
        memcpy(&f, q, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, q, 2);
    return t == CUDA_R_16F ? f16_to_double(h, 10, 15) : f16_to_double(h, 7, 127);
}

static void store(const void *p, cudaDataType_t t, int64_t i, double v) {
    char *q = (char *)const_cast<void *>(p) + (size_t)i * type_size(t);
    if (t == CUDA_R_32F) {
        const float f = (float)v;
        memcpy(q, &f, 4);
        return;
    }
    const uint16_t h = t == CUDA_R_16F ? f16_from_double(v, 10, 15) : f16_from_double(v, 7, 127);
    memcpy(q, &h, 2);
}

// op(x)(r, c).
static double op_load(const operand &x, int64_t r, int64_t c) {
    return load(x.p, x.type, x.op == CUBLAS_OP_N ? r + c * x.ld : c + r * x.ld);
}

// D(i, j) = alpha·sum + beta·C(i, j); C is not read when beta is 0 (it may
// be uninitialized, as cuBLAS allows).
static void store_d(const gemm &g, int64_t i, int64_t j, double sum) {
    double v = g.alpha * sum;
    if (g.beta != 0) v += g.beta * load(g.c.p, g.c.type, i + j * g.c.ld);
    store(g.d.p, g.d.type, i + j * g.d.ld, v);
}

enum { ROW_BLOCK = 64 };  // rows of op(A) converted at a time: [ROW_BLOCK, k] doubles

// The product, cache-friendly whatever the layouts: op(B)'s columns and a
// block of op(A)'s rows are first converted to doubles with k contiguous,
// then each element is a dot product, four columns at a time (independent
// sums, each still in order p = 0..k-1). A and B are not read when alpha is 0.
static void gemm_run(const gemm &g) {
    const int64_t m = g.m, n = g.n, k = g.alpha != 0 ? g.k : 0;
    if (m == 0 || n == 0) return;
    std::vector<double> bt((size_t)(n * k));                         // op(B)ᵀ [n, k]
    std::vector<double> at((size_t)(std::min<int64_t>(m, ROW_BLOCK) * k));  // op(A) rows [ROW_BLOCK, k]
    for (int64_t j = 0; j < n; j++)
        for (int64_t p = 0; p < k; p++) bt[(size_t)(j * k + p)] = op_load(g.b, p, j);
    for (int64_t i0 = 0; i0 < m; i0 += ROW_BLOCK) {
        const int64_t ni = std::min<int64_t>(ROW_BLOCK, m - i0);
        for (int64_t i = 0; i < ni; i++)
            for (int64_t p = 0; p < k; p++) at[(size_t)(i * k + p)] = op_load(g.a, i0 + i, p);
        for (int64_t j0 = 0; j0 < n; j0 += 4) {
            const double *b4[4];  // columns j0..j0+3 of op(B); past n, the last again (not stored)
            for (int t = 0; t < 4; t++) b4[t] = bt.data() + std::min(j0 + t, n - 1) * k;
            for (int64_t i = 0; i < ni; i++) {
                const double *ar = at.data() + i * k;
                double s[4] = {0, 0, 0, 0};
                for (int64_t p = 0; p < k; p++)
                    for (int t = 0; t < 4; t++) s[t] += ar[p] * b4[t][p];
                for (int t = 0; t < 4 && j0 + t < n; t++) store_d(g, i0 + i, j0 + t, s[t]);
            }
        }
    }
}

// Queues g on stream s; EXECUTION_FAILED when the runtime refuses (its own
// error says why).
static cublasStatus_t run(const char *fn, cudaStream_t s, const gemm &g) {
    auto work = [g, fn] {
        try {
            gemm_run(g);
        } catch (const std::exception &e) {  // the conversion buffers: not across the runtime
            simt::fail("%s: %lldx%lldx%lld product: %s", fn, (long long)g.m, (long long)g.n, (long long)g.k,
                       e.what());
        }
    };
    return simt::enqueue(s, work, fn) ? CUBLAS_STATUS_EXECUTION_FAILED : CUBLAS_STATUS_SUCCESS;
}

// ---- the contract --------------------------------------------------------------

static const cublasStatus_t INVALID = CUBLAS_STATUS_INVALID_VALUE;

// Reports "fn: message" as a broken contract and returns s.
__attribute__((format(printf, 3, 4))) static cublasStatus_t refuse(cublasStatus_t s, const char *fn, const char *fmt,
                                                                  ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    simt::fail("%s: %s", fn, msg);
    return s;
}

static const char *type_name(int t) {
    switch (t) {
    case CUDA_R_16F: return "CUDA_R_16F";
    case CUDA_R_16BF: return "CUDA_R_16BF";
    case CUDA_R_32F: return "CUDA_R_32F";
    case CUDA_R_64F: return "CUDA_R_64F";
    case CUDA_R_8I: return "CUDA_R_8I";
    case CUDA_R_32I: return "CUDA_R_32I";
    default: return "an unknown type";
    }
}

static const char *op_name(int32_t op) { return op == CUBLAS_OP_N ? "N" : "T"; }

// ld >= max(1, rows), as stored.
static cublasStatus_t check_ld(const char *fn, const operand &x) {
    if (x.ld >= std::max<int64_t>(1, x.rows)) return CUBLAS_STATUS_SUCCESS;
    if (x.rows < 1) return refuse(INVALID, fn, "%s %lld < 1", x.ld_name, (long long)x.ld);
    if (x.name == 'C' || x.name == 'D')
        return refuse(INVALID, fn, "%s %lld < %s %lld", x.ld_name, (long long)x.ld, x.rows_name, (long long)x.rows);
    return refuse(INVALID, fn, "%s %lld < %s %lld for op(%c) = %s", x.ld_name, (long long)x.ld, x.rows_name,
                  (long long)x.rows, x.name, op_name(x.op));
}

// Types, ops, shapes and leading dimensions; pointers aside (the heuristic
// has none). Supported: A and B both 16F, 16BF or 32F; D 32F or A's type;
// C as D; fp32 compute and scale.
static cublasStatus_t check_shapes(const char *fn, const gemm &g, int32_t compute, int32_t scale) {
    const operand &a = g.a, &b = g.b, &c = g.c, &d = g.d;
    if (a.type != b.type || (a.type != CUDA_R_16F && a.type != CUDA_R_16BF && a.type != CUDA_R_32F))
        return refuse(INVALID, fn, "A is %s and B %s: both must be CUDA_R_16F, CUDA_R_16BF or CUDA_R_32F",
                      type_name(a.type), type_name(b.type));
    if (d.type != CUDA_R_32F && d.type != a.type)
        return refuse(INVALID, fn, "%c is %s with A %s: it must be CUDA_R_32F or A's type", d.name, type_name(d.type),
                      type_name(a.type));
    if (compute != CUBLAS_COMPUTE_32F)
        return refuse(INVALID, fn, "compute type %d is not CUBLAS_COMPUTE_32F (68)", compute);
    if (scale != CUDA_R_32F) return refuse(INVALID, fn, "scale type %s is not CUDA_R_32F", type_name(scale));
    for (const operand *x : {&a, &b})
        if (x->op != CUBLAS_OP_N && x->op != CUBLAS_OP_T)
            return refuse(INVALID, fn, "op(%c) %d is not CUBLAS_OP_N or CUBLAS_OP_T", x->name, x->op);
    if (op_rows(a) != d.rows || op_cols(a) != op_rows(b) || op_cols(b) != d.cols)
        return refuse(INVALID, fn, "op(A) %lldx%lld, op(B) %lldx%lld and %c %lldx%lld do not multiply",
                      (long long)op_rows(a), (long long)op_cols(a), (long long)op_rows(b), (long long)op_cols(b),
                      d.name, (long long)d.rows, (long long)d.cols);
    if (c.type != d.type || c.rows != d.rows || c.cols != d.cols || c.ld != d.ld)
        return refuse(INVALID, fn, "C (%s %lldx%lld, ld %lld) and D (%s %lldx%lld, ld %lld) differ", type_name(c.type),
                      (long long)c.rows, (long long)c.cols, (long long)c.ld, type_name(d.type), (long long)d.rows,
                      (long long)d.cols, (long long)d.ld);
    for (const operand *x : {&a, &b, &c, &d})
        if (cublasStatus_t s = check_ld(fn, *x)) return s;
    return CUBLAS_STATUS_SUCCESS;
}

// Bytes from x's first element to its last: ld·(cols - 1) + rows elements
// (rows, cols >= 1); SIZE_MAX past the address space.
static size_t extent_bytes(const operand &x) {
    uint64_t n;
    if (__builtin_mul_overflow((uint64_t)x.ld, (uint64_t)(x.cols - 1), &n) ||
        __builtin_add_overflow(n, (uint64_t)x.rows, &n) || __builtin_mul_overflow(n, type_size(x.type), &n))
        return SIZE_MAX;
    return n;
}

// The scalars, and the matrices the product touches, whole: A and B when
// m, n, k > 0, C and D when m, n > 0.
static cublasStatus_t check_pointers(const char *fn, const gemm &g, const void *alpha, const void *beta) {
    if (!alpha || !beta) return refuse(INVALID, fn, "alpha %p, beta %p: NULL", alpha, beta);
    const bool out = g.m > 0 && g.n > 0, product = out && g.k > 0;
    for (const operand *x : {&g.a, &g.b, &g.c, &g.d}) {
        if (!(x == &g.a || x == &g.b ? product : out)) continue;
        if (!x->p)
            return refuse(INVALID, fn, "%c is NULL with m %lld, n %lld, k %lld", x->name, (long long)g.m,
                          (long long)g.n, (long long)g.k);
        const size_t bytes = extent_bytes(*x);
        if (!simt::is_device(x->p, bytes))
            return refuse(INVALID, fn, "%c %p: its %zu bytes (%s %lld, %lld columns) are not in one device allocation",
                          x->name, x->p, bytes, x->ld_name, (long long)x->ld, (long long)x->cols);
    }
    return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLAS --------------------------------------------------------------------

static cublasStatus_t check_blas(const char *fn, cublasHandle_t h) {
    if (h && h->magic == BLAS_MAGIC) return CUBLAS_STATUS_SUCCESS;
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, fn, "handle %p is not from cublasCreate", (void *)h);
}

// op(X) [r, c] (named rn, cn), as cuBLAS's arguments give it: stored r×c
// for N, c×r for T.
static operand blas_operand(char name, const char *ld_name, int32_t op, int64_t r, int64_t c, const char *rn,
                            const char *cn, const void *p, cudaDataType_t type, int64_t ld) {
    const bool n = op == CUBLAS_OP_N;
    return {name, p, type, op, n ? r : c, n ? c : r, ld, ld_name, n ? rn : cn};
}

static cublasStatus_t blas_gemm(const char *fn, cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                                int n, int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                const void *B, cudaDataType bt, int ldb, const void *beta, void *C, cudaDataType ct,
                                int ldc, cublasComputeType_t compute) {
    if (cublasStatus_t s = check_blas(fn, h)) return s;
    if (m < 0) return refuse(INVALID, fn, "m %d < 0", m);
    if (n < 0) return refuse(INVALID, fn, "n %d < 0", n);
    if (k < 0) return refuse(INVALID, fn, "k %d < 0", k);
    gemm g = {};
    g.a = blas_operand('A', "lda", ta, m, k, "m", "k", A, at, lda);
    g.b = blas_operand('B', "ldb", tb, k, n, "k", "n", B, bt, ldb);
    g.c = g.d = blas_operand('C', "ldc", CUBLAS_OP_N, m, n, "m", "n", C, ct, ldc);
    g.m = m, g.n = n, g.k = k;
    cublasStatus_t s = check_shapes(fn, g, compute, CUDA_R_32F);
    if (!s) s = check_pointers(fn, g, alpha, beta);
    if (s) return s;
    g.alpha = *(const float *)alpha, g.beta = *(const float *)beta;
    return run(fn, h->stream, g);
}

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
    if (!handle) return refuse(INVALID, "cublasCreate", "handle is NULL");
    *handle = new (std::nothrow) cublasContext{BLAS_MAGIC, NULL, NULL, 0};
    return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
    if (cublasStatus_t s = check_blas("cublasDestroy", handle)) return s;
    handle->magic = 0;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
    if (cublasStatus_t s = check_blas("cublasSetStream", handle)) return s;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes) {
    const char *fn = "cublasSetWorkspace";
    if (cublasStatus_t s = check_blas(fn, handle)) return s;
    if (bytes && !simt::is_device(workspace, bytes))
        return refuse(INVALID, fn, "workspace %p: its %zu bytes are not in one device allocation", workspace, bytes);
    handle->workspace = workspace, handle->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, const float *alpha, const float *A, int lda, const float *B, int ldb,
                              const float *beta, float *C, int ldc) {
    return blas_gemm("cublasSgemm", handle, transa, transb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb,
                     beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t) {
    return blas_gemm("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C,
                     Ctype, ldc, computeType);
}

const char *cublasGetStatusString(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

}  // extern "C"

// ---- cuBLASLt ------------------------------------------------------------------

static cublasStatus_t check_lt(const char *fn, cublasLtHandle_t h) {
    if (h && h->magic == LT_MAGIC) return CUBLAS_STATUS_SUCCESS;
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, fn, "handle %p is not from cublasLtCreate", (void *)h);
}

static operand lt_operand(char name, const char *ld_name, const cublasLtMatrixLayoutData &l, int32_t op) {
    return {name, NULL, l.type, op, l.rows, l.cols, l.ld, ld_name, "rows"};
}

// The product the descriptors describe (pointers and scalars not yet set), checked.
static cublasStatus_t lt_problem(const char *fn, cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                                 cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                 cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc, gemm *g) {
    if (cublasStatus_t s = check_lt(fn, h)) return s;
    if (!desc || !Adesc || !Bdesc || !Cdesc || !Ddesc)
        return refuse(INVALID, fn, "desc %p, Adesc %p, Bdesc %p, Cdesc %p, Ddesc %p: NULL", (void *)desc,
                      (void *)Adesc, (void *)Bdesc, (void *)Cdesc, (void *)Ddesc);
    *g = {};
    g->a = lt_operand('A', "Adesc ld", *Adesc, desc->transa);
    g->b = lt_operand('B', "Bdesc ld", *Bdesc, desc->transb);
    g->c = lt_operand('C', "Cdesc ld", *Cdesc, CUBLAS_OP_N);
    g->d = lt_operand('D', "Ddesc ld", *Ddesc, CUBLAS_OP_N);
    g->m = Ddesc->rows, g->n = Ddesc->cols, g->k = op_cols(g->a);
    return check_shapes(fn, *g, desc->compute, desc->scale);
}

// The one algorithm: tagged, no workspace (data[1]: the bytes it needs).
static cublasLtMatmulHeuristicResult_t lt_result(void) {
    cublasLtMatmulHeuristicResult_t r = {};
    r.algo.data[0] = ALGO_TAG;
    r.algo.data[1] = 0;
    r.workspaceSize = 0;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1;
    return r;
}

static cublasStatus_t check_algo(const char *fn, const cublasLtMatmulAlgo_t *algo) {
    if (!algo) return refuse(INVALID, fn, "algo is NULL");
    if (algo->data[0] != ALGO_TAG)
        return refuse(INVALID, fn, "algo tag %#llx is not from cublasLtMatmulAlgoGetHeuristic",
                      (unsigned long long)algo->data[0]);
    return CUBLAS_STATUS_SUCCESS;
}

// Where a desc attribute goes (int32 each), or NULL when not supported.
static void *desc_field(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr) {
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return &d->compute;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return &d->scale;
    case CUBLASLT_MATMUL_DESC_TRANSA: return &d->transa;
    case CUBLASLT_MATMUL_DESC_TRANSB: return &d->transb;
    }
    return NULL;
}

// Where a preference attribute goes and its size, or NULL when not supported.
static void *pref_field(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, size_t *size) {
    *size = 4;
    switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return &p->search_mode;
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: *size = 8; return &p->max_workspace;
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return &p->reductions;
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return &p->min_align[0];
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return &p->min_align[1];
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return &p->min_align[2];
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return &p->min_align[3];
    }
    return NULL;
}

// Copies an attribute's bytes into field (NULL: not supported).
static cublasStatus_t set_attribute(const char *fn, void *field, size_t want, int attr, const void *buf, size_t size) {
    if (!field) return refuse(INVALID, fn, "attribute %d is not supported", attr);
    if (!buf || size != want)
        return refuse(INVALID, fn, "attribute %d: buf %p, size %zu (want %zu)", attr, buf, size, want);
    memcpy(field, buf, want);
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
    if (!handle) return refuse(INVALID, "cublasLtCreate", "handle is NULL");
    *handle = new (std::nothrow) cublasLtContext{LT_MAGIC};
    return *handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (cublasStatus_t s = check_lt("cublasLtDestroy", handle)) return s;
    handle->magic = 0;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
    if (!desc) return refuse(INVALID, "cublasLtMatmulDescCreate", "desc is NULL");
    *desc = new (std::nothrow)
        cublasLtMatmulDescData{(int32_t)computeType, (int32_t)scaleType, CUBLAS_OP_N, CUBLAS_OP_N};
    return *desc ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
    delete desc;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void *buf, size_t size) {
    const char *fn = "cublasLtMatmulDescSetAttribute";
    if (!desc) return refuse(INVALID, fn, "desc is NULL");
    return set_attribute(fn, desc_field(desc, attr), 4, attr, buf, size);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
    const char *fn = "cublasLtMatrixLayoutCreate";
    if (!layout) return refuse(INVALID, fn, "layout is NULL");
    if (rows > INT64_MAX || cols > INT64_MAX)
        return refuse(INVALID, fn, "rows %llu, cols %llu: past INT64_MAX", (unsigned long long)rows,
                      (unsigned long long)cols);
    *layout = new (std::nothrow) cublasLtMatrixLayoutData{type, (int64_t)rows, (int64_t)cols, ld};
    return *layout ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    delete layout;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
    if (!pref) return refuse(INVALID, "cublasLtMatmulPreferenceCreate", "pref is NULL");
    *pref = new (std::nothrow) cublasLtMatmulPreferenceData{};
    return *pref ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
    delete pref;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                                    size_t size) {
    const char *fn = "cublasLtMatmulPreferenceSetAttribute";
    if (!pref) return refuse(INVALID, fn, "pref is NULL");
    size_t want;
    void *field = pref_field(pref, attr, &want);
    return set_attribute(fn, field, want, attr, buf, size);
}

// One result for every valid problem: the algorithm fits any preference.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t pref, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int *returnAlgoCount) {
    const char *fn = "cublasLtMatmulAlgoGetHeuristic";
    if (returnAlgoCount) *returnAlgoCount = 0;
    gemm g;
    if (cublasStatus_t s = lt_problem(fn, handle, desc, Adesc, Bdesc, Cdesc, Ddesc, &g)) return s;
    if (!pref || requestedAlgoCount < 1 || !heuristicResultsArray || !returnAlgoCount)
        return refuse(INVALID, fn, "pref %p, requestedAlgoCount %d, heuristicResultsArray %p, returnAlgoCount %p",
                      (void *)pref, requestedAlgoCount, (void *)heuristicResultsArray, (void *)returnAlgoCount);
    heuristicResultsArray[0] = lt_result();
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                       cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                       cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                       const cublasLtMatmulAlgo_t *algo, cublasLtMatmulHeuristicResult_t *result) {
    const char *fn = "cublasLtMatmulAlgoCheck";
    gemm g;
    if (cublasStatus_t s = lt_problem(fn, handle, desc, Adesc, Bdesc, Cdesc, Ddesc, &g)) return s;
    if (cublasStatus_t s = check_algo(fn, algo)) return s;
    if (!result) return refuse(INVALID, fn, "result is NULL");
    *result = lt_result();
    result->algo = *algo;
    return CUBLAS_STATUS_SUCCESS;
}

// algo NULL: the heuristic's choice, as in cuBLASLt.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha, const void *A,
                              cublasLtMatrixLayout_t Adesc, const void *B, cublasLtMatrixLayout_t Bdesc,
                              const void *beta, const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo, void *workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
    const char *fn = "cublasLtMatmul";
    gemm g;
    if (cublasStatus_t s = lt_problem(fn, handle, desc, Adesc, Bdesc, Cdesc, Ddesc, &g)) return s;
    const cublasLtMatmulHeuristicResult_t chosen = lt_result();
    if (!algo) algo = &chosen.algo;
    if (cublasStatus_t s = check_algo(fn, algo)) return s;
    if (workspaceSizeInBytes < algo->data[1])
        return refuse(INVALID, fn, "workspaceSizeInBytes %zu < %llu, the algorithm's", workspaceSizeInBytes,
                      (unsigned long long)algo->data[1]);
    if (workspaceSizeInBytes && !simt::is_device(workspace, workspaceSizeInBytes))
        return refuse(INVALID, fn, "workspace %p: its %zu bytes are not in one device allocation", workspace,
                      workspaceSizeInBytes);
    g.a.p = A, g.b.p = B, g.c.p = C, g.d.p = D;
    if (cublasStatus_t s = check_pointers(fn, g, alpha, beta)) return s;
    g.alpha = *(const float *)alpha, g.beta = *(const float *)beta;
    return run(fn, stream, g);
}

}  // extern "C"
