// simt/library_types.h — stand-in for CUDA's library_types.h: the data types
// cuBLAS names (values as in CUDA, so a trace reads the same).
#pragma once

typedef enum cudaDataType_t {
    CUDA_R_16F = 2,
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16BF = 14,
    CUDA_R_8I = 3,
    CUDA_R_32I = 10,
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;
