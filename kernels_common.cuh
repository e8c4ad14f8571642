// kernels_common.cuh — what the CUDA backend's files (kernels*.cu) share:
// the warp reductions and warp q8_1 quantizer, the backend struct with its
// scratch buffers and activation caches, the dlopen'ed cuBLAS entry points,
// the error recording (fail, CK/BK/LAUNCHED), grid helpers, the weight-type
// lists, and the declarations of the functions one file defines for others
// (the ops that kernels.cu's op table names among them). Private to the
// backend; host helpers are static inline and device helpers
// __device__ __forceinline__, so each file compiles on its own (no -rdc).
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <stdarg.h>

#include "kernels_qhd.cuh"
#include "kernels.h"

// ---------------------------------------------------------------------------
// Device helpers used by several kernel files
// ---------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int warp_sum_int(int v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block blk of a q8_1 activation (see q8_block) from the warp's 32 values,
// v = element 32·blk + lane.
__device__ __forceinline__ void warp_q8_1(float v, int64_t blk, int8_t *__restrict__ q, float2 *__restrict__ ds) {
    const int lane = threadIdx.x & 31;
    const float amax = warp_max(fabsf(v));
    const int qi = q8_round(v, q8_inv(amax));
    q[32 * blk + lane] = (int8_t)qi;
    const int sum = warp_sum_int(qi);
    if (lane == 0) ds[blk] = make_float2(amax / 127.0f, amax / 127.0f * (float)sum);
}

// ---------------------------------------------------------------------------
// The backend
// ---------------------------------------------------------------------------

enum { SCR_ACT, SCR_HALF, SCR_TILE, SCR_ATT, SCR_MOE, SCR_COUNT };  // scratch buffers

typedef struct {
    int used;
    int usable;  // 0: this shape's products go to blas_tiles
    cudaDataType_t atype;
    int64_t m, k, lda, ldc;
    cublasLtMatmulAlgo_t algo;
} lt_entry;

// cuBLAS and cuBLASLt are opened when a backend starts, not linked: merely
// loading them costs every process about 0.6 s of static initialization,
// which a CPU run, `quill tokenize` or a shell loop should never pay.
#define BLAS_FNS(X) X(cublasCreate) X(cublasDestroy) X(cublasSetStream) X(cublasSetWorkspace) X(cublasSgemm) \
    X(cublasGetStatusString)
#define LT_FNS(X) X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtMatmul) X(cublasLtMatmulAlgoGetHeuristic) \
    X(cublasLtMatmulDescCreate) X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) \
    X(cublasLtMatmulPreferenceCreate) X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute) \
    X(cublasLtMatrixLayoutCreate) X(cublasLtMatrixLayoutDestroy) X(cublasLtMatmulAlgoCheck)
#define BLAS_DECL(f) decltype(&f) p_##f;  // (cublas_v2.h maps some names to their _v2 symbols)
typedef cublasStatus_t (*gemm_ex_fn)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                     const void *, const void *, cudaDataType, int, const void *, cudaDataType,
                                     int, const void *, void *, cudaDataType, int, cublasComputeType_t,
                                     cublasGemmAlgo_t);  // (the header also has a C++ overload)
typedef struct {
    void *lib_blas, *lib_lt;  // dlopen handles
    gemm_ex_fn p_cublasGemmEx;
    BLAS_FNS(BLAS_DECL)
    LT_FNS(BLAS_DECL)
} blas_api;
#define BLAS_STR2(x) #x
#define BLAS_STR(x) BLAS_STR2(x)  // the symbol name after cublas_v2.h's renaming

struct backend {
    blas_api api;                      // cuBLAS entry points (blas_open)
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    void *blas_ws;                     // cuBLAS / cuBLASLt workspace [LT_WORKSPACE]
    int sm_count;
    size_t smem_optin;                 // dynamic shared memory a CTA may have
    char desc[384];
    int failed;                        // an op failed; err holds the first failure
    char err[ERR_LEN];
    void *scr[SCR_COUNT];              // scratch, grown on demand (see scratch())
    size_t scr_cap[SCR_COUNT];
    const float *act_src;              // the x whose q8_1 form SCR_ACT holds (NULL: none)
    int64_t act_len;                   // of act_src's elements (the layout is the same for every [n, cols] split)
    const float *half_src;             // the x whose fp16/bf16 form SCR_HALF holds
    int half_n, half_bf16;
    int64_t half_cols;
    void **wbuf;                       // uploaded weights, freed with the backend
    int n_wbuf, cap_wbuf;
    cudaGraphExec_t graph[BACKEND_GRAPHS];
    int capturing;                     // recording: nothing may allocate or wait
    int capture_broken;                // an op could not be recorded: graph_end fails
    int32_t *h_id, *d_id;              // the sampled id: pinned host / device
    uint64_t *d_cand;                  // [SAMPLE_CAND_MAX] the sampler's candidates
    uint8_t *stage;                    // pinned [STAGE_BYTES]: small to_device copies start here
    size_t stage_used;                 // bytes handed out since the stream was last idle
    lt_entry lt_cache[LT_ALGOS];       // one cuBLASLt algorithm per weight shape
    int gemm_per_tile;                 // QUILL_GEMM_PER_TILE=1: one GEMM per PREFILL_TILE rows
    long lt_fallbacks;                 // products cuBLASLt refused (done by blas_tiles instead)
    double roof_bw, roof_flops;        // measured by roofline (0: not yet)
    int32_t *moe_host;                 // a moe_map's offsets [n_exp + 1] then tok [n_rows], copied to the host
    size_t moe_host_cap;               // (for a prompt's expert GEMMs: kernels_moe.cu moe_host_map)
    const int32_t *moe_host_of;        // the offsets it copies (NULL: none; moe_group forgets it)
};

// Programmatic dependent launch (sm_90): in a recorded graph each of our
// kernels is launched while the one before it is still running (kernels.cu's
// programmatic_edges), and waits here, before touching memory, until that one
// has finished and its writes are visible; it lets the next one launch as
// soon as every CTA has started. Outside a graph both are no-ops. H200:
// 8B-shape decode 2%, 1B 4% faster (the ~400 launches of a step overlap).
__device__ __forceinline__ void grid_dep_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(QUILL_SIMT)
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__attribute__((format(printf, 2, 3))) static inline int fail(backend *b, const char *fmt, ...) {
    if (!b->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(b->err, sizeof b->err, fmt, ap);
        va_end(ap);
        b->failed = 1;
    }
    return -1;
}

static inline int cuda_ok(backend *b, cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return 0;
    return fail(b, "%s:%d: %s: %s", file, line, call, cudaGetErrorString(e));
}

static inline int blas_ok(backend *b, cublasStatus_t s, const char *call, const char *file, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    return fail(b, "%s:%d: %s: %s", file, line, call, b->api.p_cublasGetStatusString(s));
}

// Every CUDA / cuBLAS call goes through these: 0, or -1 with the failure recorded.
#define CK(call) cuda_ok(b, (call), #call, __FILE__, __LINE__)
#define BK(call) blas_ok(b, (call), #call, __FILE__, __LINE__)
#define LAUNCHED(name) cuda_ok(b, cudaGetLastError(), "launching " name, __FILE__, __LINE__)

static inline unsigned grid_for(int64_t items, int threads) {
    int64_t g = (items + threads - 1) / threads;
    return (unsigned)(g < 1 ? 1 : g > 65535 * 16 ? 65535 * 16 : g);  // grid-stride kernels cover the rest
}

// The activation caches remember which x a buffer holds converted; any op
// that may write memory forgets them (matmul only when its output overlaps).
static inline void act_forget(backend *b) { b->act_src = b->half_src = NULL; }

#define FOR_EACH_QTYPE(X) X(Q_Q8_0) X(Q_Q4_0) X(Q_Q4_1) X(Q_Q5_0) X(Q_Q5_1) X(Q_Q2_K) X(Q_Q3_K) X(Q_Q4_K) \
    X(Q_Q5_K) X(Q_Q6_K) X(Q_IQ4_NL) X(Q_IQ4_XS) X(Q_MXFP4)
#define FOR_EACH_TYPE(X) X(Q_F32) X(Q_F16) X(Q_BF16) FOR_EACH_QTYPE(X)

static inline unsigned blocks_for(int64_t items, int per_block) { return (unsigned)((items + per_block - 1) / per_block); }

static inline int is_quantized(uint32_t t) { return t != Q_F32 && t != Q_F16 && t != Q_BF16; }

// ---------------------------------------------------------------------------
// Defined in one file, used by others
// ---------------------------------------------------------------------------

// kernels.cu: the stream, scratch and activation caches
int stream_sync(backend *b);
void graphs_drop(backend *b);
void *scratch(backend *b, int which, size_t bytes);
int act_buf(backend *b, int n, int64_t cols, act_t *a);
void act_written(backend *b, const float *y, size_t bytes);

// kernels_matvec.cu: the decode matmul
int act_q8(backend *b, const float *x, int n, int64_t cols, act_t *a);
void matvec_rows(backend *b, float *y, const qmat *w, const float *x, int t0, int n);
void cuda_matmul_set(backend *b, float *const y[], const qmat *const w[], int k, const float *x, int n, int n_joint);

// kernels_gemm.cu: the prompt matmul (and the split between the two)
int gemm_rows(int n, int n_joint);
const void *act_half(backend *b, const float *x, int n, int64_t cols, int bf16);
void dequant_rows(backend *b, const qmat *w, int64_t r0, int64_t nr, __half *tile);
int gemm_rowwise(backend *b, int64_t m, int64_t k, int64_t lda, int64_t ldc);
void gemm_call(backend *b, const void *A, cudaDataType_t at, int64_t lda, int64_t m, int64_t k, const void *B,
               int64_t n, float *C, int64_t ldc);
void cuda_matmul(backend *b, float *y, const qmat *w, const float *x, int n, int n_joint);

// kernels_elementwise.cu
void cuda_embed(backend *b, float *out, const qmat *emb, const int32_t *ids, int n);
void cuda_rmsnorm(backend *b, float *out, const float *x, const qmat *w, int n, int dim, float eps);
void cuda_add_rmsnorm(backend *b, float *out, float *x, const float *d, const qmat *w, int n, int dim, float eps);
void cuda_add_bias(backend *b, float *y, const qmat *bias, int n, int dim);
void cuda_add(backend *b, float *y, const float *x, size_t len);
void cuda_swiglu(backend *b, float *out, const float *gate, const float *up, int n, int64_t cols);
void cuda_geglu(backend *b, float *out, const float *gate, const float *up, size_t len);
void cuda_scale(backend *b, float *x, float s, size_t len);
void cuda_rope(backend *b, float *q, float *k, int n, int n_q, int n_k, int head_dim, const int32_t *pos,
               const rope_cfg *rc);

// kernels_attention.cu
int attention_allow_smem(backend *b, int bytes);
void cuda_kv_store(backend *b, void *kpool, void *vpool, const float *k, const float *v, const fwd_batch *fb,
                   int kv_dim, int kv_type);
void cuda_rope_store(backend *b, float *q, const float *k, const float *v, void *kpool, void *vpool, int n_q,
                     int n_k, int head_dim, const int32_t *pos, const rope_cfg *rc, const fwd_batch *fb, int kv_type);
void cuda_attention(backend *b, float *out, const float *q, const void *kpool, const void *vpool,
                    const fwd_batch *fb, int n_heads, int n_kv_heads, int head_dim, int kv_type, const attn_cfg *ac);

// kernels_moe.cu
void cuda_moe_route(backend *b, int32_t *ids, float *w, const float *logits, int n, int n_exp, int k, int gating);
void cuda_moe_group(backend *b, const moe_map *mp, const int32_t *ids);
void cuda_moe_matmul(backend *b, float *const y[], const qmat *const w[], const qmat *const bias[], int k,
                     const float *x, int by_token, const moe_map *mp);
void cuda_moe_combine(backend *b, float *out, const float *y, const float *w, const moe_map *mp, int dim);
void cuda_swiglu_oai(backend *b, float *out, const float *gate, const float *up, size_t len, float alpha,
                     float limit);

// kernels_sample.cu
int32_t cuda_sample(backend *b, const float *logits, int n_vocab, const sample_cfg *sc, double u);
int sample_init(backend *b);
