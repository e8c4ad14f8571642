// simt/cublas_v2.h — stand-in for cuBLAS's cublas_v2.h, the part kernels*.cu
// uses, implemented on the CPU by cublas.cpp (libcublas.so.13): every
// product is a double-precision sum, run in stream order, and every argument
// a real cuBLAS would refuse is refused here, with a message saying which.
// Names and values follow the public cuBLAS API, so a trace reads the same.
#pragma once
#include <stddef.h>

#include "library_types.h"
#include "simt_host.h"

#define CUBLAS_VER_MAJOR 13
#define CUBLASAPI __attribute__((visibility("default")))  // exported, whatever -fvisibility says

typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
} cublasStatus_t;

typedef enum {
    CUBLAS_OP_N = 0,  // the matrix as stored
    CUBLAS_OP_T = 1,  // its transpose
    CUBLAS_OP_C = 2,  // its conjugate transpose (refused: real types only)
} cublasOperation_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,  // the only one supported: fp32 scale, (here double) sums
    CUBLAS_COMPUTE_64F = 70,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
} cublasComputeType_t;

typedef enum {
    CUBLAS_GEMM_DEFAULT = -1,
} cublasGemmAlgo_t;

typedef struct cublasContext *cublasHandle_t;

// As in cuBLAS, the v2 API's names are macros for the exported symbols.
#define cublasCreate cublasCreate_v2
#define cublasDestroy cublasDestroy_v2
#define cublasSetStream cublasSetStream_v2
#define cublasSetWorkspace cublasSetWorkspace_v2
#define cublasSgemm cublasSgemm_v2

// Column-major throughout: C[m, n] = alpha·op(A)·op(B) + beta·C, op(A) [m, k]
// (A stored m×k, lda >= m, for N; k×m, lda >= k, for T), op(B) [k, n], ldc >= m.
// alpha and beta are host pointers, read when the call is made.
extern "C" {
CUBLASAPI cublasStatus_t cublasCreate_v2(cublasHandle_t *handle);
CUBLASAPI cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);
CUBLASAPI cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream);
CUBLASAPI cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace, size_t bytes);
CUBLASAPI cublasStatus_t cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                        int m, int n, int k, const float *alpha, const float *A, int lda,
                                        const float *B, int ldb, const float *beta, float *C, int ldc);
CUBLASAPI const char *cublasGetStatusString(cublasStatus_t status);
// A, B: both CUDA_R_16F, CUDA_R_16BF or CUDA_R_32F; C: CUDA_R_32F or Atype;
// computeType CUBLAS_COMPUTE_32F (alpha, beta: float); algo is ignored.
CUBLASAPI cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                      int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
                                      int lda, const void *B, cudaDataType Btype, int ldb, const void *beta,
                                      void *C, cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                                      cublasGemmAlgo_t algo);
}
