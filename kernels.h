// kernels.h — the CUDA backend (kernels*.cu), linked in when quill is built
// with CUDA (QUILL_CUDA defined; `make CUDA=0` leaves it out).
#ifndef QUILL_KERNELS_H
#define QUILL_KERNELS_H

#include <stdio.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

extern const backend_ops cuda_backend;

// CUDA devices this process can use: > 0; 0 with the reason in why where a
// driver is present but no device is usable ("no device", "compute
// capability 8.0 < 9.0 ..."); -1 with the reason where there is no NVIDIA
// driver at all (a CPU machine).
int cuda_device_count(char *why);

// Checks, on the host, the code that the kernels share with the host: the
// weight repacking at upload, every type's dequantization and matrix-vector
// block arithmetic, the activation quantization, rope angles, the paged-KV
// addressing and the split-K attention plan and merge. Needs no GPU.
// Returns 0, or -1 with the first failure in err; prints one line per check
// to `log` (NULL: silent).
int cuda_host_selftest(FILE *log, char *err);

#ifdef __cplusplus
}
#endif

#endif
