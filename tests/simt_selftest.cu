// tests/simt_selftest.cu — the SIMT emulation's own checks (simt/), one case a
// process (a failure is sticky, as a device fault is):
//   build/simt/tests/simt_selftest CASE
// Built only with SIMT=1, through simt/rewrite.sh like kernels.cu. Exit 0:
// the case went as it must. `ok` and `graph` compute the right sums; every
// other case is a kernel or a call a GPU would punish, which the emulation
// must refuse, naming it on stderr (tests/simt.sh checks the words).
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__device__ float warp_sum(float v, unsigned mask) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
    return v;
}

// out[block] = Σ x over the block's slice, through shared memory and shuffles
__global__ void k_sum(const float *x, int n, float *out) {
    extern __shared__ float red[];
    float s = 0.0f;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) s += x[i];
    s = warp_sum(s, 0xffffffffu);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? red[threadIdx.x] : 0.0f;
        s = warp_sum(s, 0xffffffffu);
        if (threadIdx.x == 0) out[blockIdx.x] = s;
    }
}

__global__ void k_barrier_after_exit(float *out) {
    if (threadIdx.x == 5) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

__global__ void k_two_barriers(float *out) {
    if (threadIdx.x < 32) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1.0f;
}

__global__ void k_shfl_exited(float *out) {
    if (threadIdx.x == 3) return;
    out[threadIdx.x] = warp_sum(1.0f, 0xffffffffu);
}

__global__ void k_ldg(const uint4 *p, unsigned *out) { *out = __ldg(p).x; }

static int expect(cudaError_t e, cudaError_t want, const char *what) {
    if (e == want) return 0;
    printf("%s: got '%s', want '%s'\n", what, cudaGetErrorString(e), cudaGetErrorString(want));
    return 1;
}

// Σ of 0..n-1 by k_sum over `blocks` blocks; 0 when right
static int check_sum(const float *dout, int blocks, int n) {
    float h[64];
    if (cudaMemcpy(h, dout, sizeof(float) * blocks, cudaMemcpyDeviceToHost)) return 1;
    double s = 0;
    for (int b = 0; b < blocks; b++) s += h[b];
    const double want = 0.5 * (double)n * (n - 1);
    if (s == want) return 0;
    printf("sum %.1f, want %.1f\n", s, want);
    return 1;
}

int main(int argc, char **argv) {
    const char *c = argc > 1 ? argv[1] : "";
    const int n = 5000, blocks = 4;
    float *hx = (float *)malloc(sizeof(float) * n), *dx, *dout;
    for (int i = 0; i < n; i++) hx[i] = (float)i;
    if (cudaMalloc((void **)&dx, sizeof(float) * n) || cudaMalloc((void **)&dout, sizeof(float) * 1024) ||
        cudaMemcpy(dx, hx, sizeof(float) * n, cudaMemcpyHostToDevice))
        return 2;
    free(hx);
    int bad = 0;
    if (!strcmp(c, "ok")) {
        k_sum<<<blocks, 256, 8 * sizeof(float)>>>(dx, n, dout);
        bad = expect(cudaGetLastError(), cudaSuccess, "launch") || check_sum(dout, blocks, n);
    } else if (!strcmp(c, "graph")) {  // a recorded launch replays with the arguments it was given
        cudaStream_t s;
        cudaGraph_t g;
        cudaGraphExec_t ex;
        bad = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) || cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        k_sum<<<blocks, 128, 4 * sizeof(float), s>>>(dx, n, dout);  // recorded, not run
        bad = bad || cudaStreamEndCapture(s, &g) || cudaGraphInstantiate(&ex, g, 0) ||
              cudaMemset(dout, 0, sizeof(float) * blocks) || cudaGraphLaunch(ex, s) || cudaStreamSynchronize(s) ||
              check_sum(dout, blocks, n) || cudaGraphExecDestroy(ex) || cudaGraphDestroy(g) || cudaStreamDestroy(s);
    } else if (!strcmp(c, "barrier-exit")) {
        k_barrier_after_exit<<<1, 64>>>(dout);
        bad = cudaDeviceSynchronize() == cudaSuccess;
    } else if (!strcmp(c, "two-barriers")) {
        k_two_barriers<<<1, 64>>>(dout);
        bad = cudaDeviceSynchronize() == cudaSuccess;
    } else if (!strcmp(c, "shfl-exited")) {
        k_shfl_exited<<<1, 32>>>(dout);
        bad = cudaDeviceSynchronize() == cudaSuccess;
    } else if (!strcmp(c, "shfl-missing")) {  // a block of 16 threads, a full mask
        k_shfl_exited<<<1, 16>>>(dout);
        bad = cudaDeviceSynchronize() == cudaSuccess;
    } else if (!strcmp(c, "ldg-misaligned")) {
        k_ldg<<<1, 1>>>((const uint4 *)(dx + 1), (unsigned *)dout);
        bad = cudaDeviceSynchronize() == cudaSuccess;
    } else if (!strcmp(c, "block-too-big")) {
        k_sum<<<1, 2048, 64 * sizeof(float)>>>(dx, n, dout);
        bad = expect(cudaGetLastError(), cudaErrorInvalidConfiguration, "2048 threads");
    } else if (!strcmp(c, "smem-limit")) {  // 64 KiB of dynamic shared memory needs the attribute
        k_sum<<<1, 256, 64 << 10>>>(dx, n, dout);
        bad = expect(cudaGetLastError(), cudaErrorInvalidValue, "64 KiB without the attribute");
        bad = bad || cudaFuncSetAttribute(k_sum, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10);
        k_sum<<<1, 256, 64 << 10>>>(dx, n, dout);
        bad = bad || expect(cudaGetLastError(), cudaSuccess, "64 KiB with it") || check_sum(dout, 1, n);
    } else if (!strcmp(c, "capture-malloc") || !strcmp(c, "capture-pageable")) {
        cudaStream_t s;
        cudaGraph_t g;
        void *p;
        float h[4];
        bad = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) || cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
        cudaError_t e = !strcmp(c, "capture-malloc") ? cudaMalloc(&p, 64)
                                                      : cudaMemcpyAsync(dout, h, sizeof h, cudaMemcpyHostToDevice, s);
        bad = bad || expect(e, cudaErrorStreamCaptureUnsupported, c) ||
              expect(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated, "the capture afterwards") ||
              cudaStreamDestroy(s);
    } else {
        fprintf(stderr, "simt_selftest: unknown case '%s'\n", c);
        return 2;
    }
    cudaFree(dx), cudaFree(dout);  // (device memory is heap memory here: LeakSanitizer sees a leak)
    return bad ? 1 : 0;
}
