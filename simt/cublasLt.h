// simt/cublasLt.h — stand-in for cuBLAS's cublasLt.h, the part kernels*.cu
// uses, implemented on the CPU by cublas.cpp (libcublasLt.so.13). There is
// one algorithm: the heuristic offers it for every valid problem, it needs no
// workspace and no split-K reduction, and its sums do not depend on n.
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "cublas_v2.h"

typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescData *cublasLtMatmulDesc_t;              // op: compute, scale types, TRANSA/B
typedef struct cublasLtMatrixLayoutData *cublasLtMatrixLayout_t;          // a stored matrix: type, rows, cols, ld
typedef struct cublasLtMatmulPreferenceData *cublasLtMatmulPreference_t;  // the heuristic's limits

typedef struct {
    uint64_t data[8];  // opaque to callers
} cublasLtMatmulAlgo_t;

typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;  // bytes the algorithm needs
    cublasStatus_t state;  // SUCCESS: algo is usable
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
    CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,  // int32 cublasComputeType_t
    CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,    // int32 cudaDataType_t of alpha, beta
    CUBLASLT_MATMUL_DESC_TRANSA = 3,        // int32 cublasOperation_t
    CUBLASLT_MATMUL_DESC_TRANSB = 4,        // int32 cublasOperation_t
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,            // uint32
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,    // uint64
    CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,  // uint32 of cublasLtReductionScheme_t bits
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,  // uint32
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,  // uint32
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,  // uint32
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,  // uint32
} cublasLtMatmulPreferenceAttributes_t;

typedef enum {
    CUBLASLT_REDUCTION_SCHEME_NONE = 0,
    CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,
    CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,
    CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,
    CUBLASLT_REDUCTION_SCHEME_MASK = 7,
} cublasLtReductionScheme_t;

// D = alpha·op(A)·op(B) + beta·C, column-major; the layouts describe the
// matrices as stored, the desc's TRANSA/TRANSB say how the product reads them.
extern "C" {
CUBLASAPI cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle);
CUBLASAPI cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
CUBLASAPI cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t computeType,
                                                  cudaDataType_t scaleType);
CUBLASAPI cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
CUBLASAPI cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                                        const void *buf, size_t size);
CUBLASAPI cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type, uint64_t rows,
                                                    uint64_t cols, int64_t ld);
CUBLASAPI cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
CUBLASAPI cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
CUBLASAPI cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
CUBLASAPI cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                              cublasLtMatmulPreferenceAttributes_t attr,
                                                              const void *buf, size_t size);
CUBLASAPI cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                        cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                        cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                        cublasLtMatmulPreference_t pref, int requestedAlgoCount,
                                                        cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                                        int *returnAlgoCount);
CUBLASAPI cublasStatus_t cublasLtMatmulAlgoCheck(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                                 cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                                 cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                                 const cublasLtMatmulAlgo_t *algo,
                                                 cublasLtMatmulHeuristicResult_t *result);
CUBLASAPI cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void *alpha,
                                        const void *A, cublasLtMatrixLayout_t Adesc, const void *B,
                                        cublasLtMatrixLayout_t Bdesc, const void *beta, const void *C,
                                        cublasLtMatrixLayout_t Cdesc, void *D, cublasLtMatrixLayout_t Ddesc,
                                        const cublasLtMatmulAlgo_t *algo, void *workspace,
                                        size_t workspaceSizeInBytes, cudaStream_t stream);
}
