// simt/simt.h — the device side of quill's SIMT emulation: what CUDA C++
// gives a kernel (thread indices, __syncthreads, warp shuffles, __ldg,
// dp4a, byte_perm, atomics, vector types) for kernels*.cu compiled by g++ and
// run on the CPU. Every CUDA thread is a fiber; a block's fibers run on one OS thread
// in a seeded order, each freely until it reaches a synchronisation point
// (no implicit lock-step), and the runtime (runtime.cpp) checks at those
// points what a GPU would punish: threads at different barriers, a barrier
// some threads exited before, a shuffle whose mask names a lane that is not
// there or never comes, misaligned vector loads, launch limits.
//
// A launch `k<<<grid, block, smem, stream>>>(args)` is rewritten by the build
// (simt/rewrite.sh) into `(k | simt::cfg("k", grid, block, smem, stream))(args)`, and
// `extern __shared__ T name[];` into `T *name = simt::dyn_smem<T>(__FILE__, __LINE__);`.
#pragma once
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "simt_host.h"

#ifndef __CUDA_ARCH__
#error "simt.h: compile with -D__CUDA_ARCH__=<arch> (the Makefile's simt build does)"
#endif

// ---- qualifiers ---------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// Static shared memory: one copy per OS thread, and an OS thread runs one
// block at a time, so the fibers of a block share it and no two blocks do.
#define __shared__ static thread_local

// ---- vector types ---------------------------------------------------------------
struct __align__(8) float2 { float x, y; };
struct __align__(16) float4 { float x, y, z, w; };
struct __align__(8) uint2 { unsigned x, y; };
struct __align__(16) uint4 { unsigned x, y, z, w; };
struct __align__(8) int2 { int x, y; };
struct __align__(16) int4 { int x, y, z, w; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
};
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return {x, y}; }

// CUDA's min/max overloads for device code
#define SIMT_MINMAX(T)                                           \
    static inline T min(T a, T b) { return b < a ? b : a; }      \
    static inline T max(T a, T b) { return a < b ? b : a; }
SIMT_MINMAX(int)
SIMT_MINMAX(unsigned)
SIMT_MINMAX(long)
SIMT_MINMAX(unsigned long)
SIMT_MINMAX(long long)
SIMT_MINMAX(unsigned long long)
SIMT_MINMAX(float)
SIMT_MINMAX(double)
#undef SIMT_MINMAX

namespace simt {

// ---- the running thread ---------------------------------------------------------
struct thread_state {
    dim3 thread_idx, block_idx, block_dim, grid_dim;
    int lane, warp, linear;  // linear = x + y·bx + z·bx·by
};
// The thread state of the fiber running on this OS thread (runtime.cpp sets
// it at every switch); NULL outside a kernel. Initial-exec TLS: a kernel's
// threadIdx is one load, not a call to __tls_get_addr.
extern thread_local thread_state *current __attribute__((tls_model("initial-exec")));
static inline thread_state *self() { return current; }

// ---- synchronisation (runtime.cpp) ----------------------------------------------
enum shfl_kind { SHFL_IDX, SHFL_UP, SHFL_DOWN, SHFL_XOR, SYNC_WARP };
void syncthreads(const char *file, int line);
uint64_t shfl(shfl_kind kind, unsigned mask, uint64_t bits, int arg, int width, const char *file, int line);
void misaligned(const char *what, const void *p, size_t align, const char *file, int line);
// The launch's dynamic shared memory (what `extern __shared__ T name[]` names).
void *dyn_smem_ptr(const char *file, int line);
template <class T> T *dyn_smem(const char *file, int line) { return (T *)dyn_smem_ptr(file, line); }

template <class T> T shfl_t(shfl_kind kind, unsigned mask, T v, int arg, int width, const char *file, int line) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move at most 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = shfl(kind, mask, bits, arg, width, file, line);
    T r;
    memcpy(&r, &bits, sizeof r);
    return r;
}

template <class T> T ldg(const T *p, const char *file, int line) {
    if ((uintptr_t)p % alignof(T)) misaligned("__ldg", p, alignof(T), file, line);
    return *p;
}

// ---- atomics (real ones: blocks may run on several OS threads) -------------------
template <class T, class F> T atomic_update(T *p, F f);
template <class T> T atomic_add(T *p, T v) {
    if constexpr (std::is_floating_point_v<T>) return atomic_update(p, [v](T o) { return o + v; });
    else return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
template <class T, class F> T atomic_update(T *p, F f) {
    T old = __atomic_load_n(p, __ATOMIC_RELAXED), nv;
    do nv = f(old);
    while (!__atomic_compare_exchange(p, &old, &nv, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST));
    return old;
}

// ---- launches -----------------------------------------------------------------
struct cfg {
    const char *name;
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    cfg(const char *n, dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr)
        : name(n), grid(g), block(b), smem(s), stream(st) {}
};
// Checks the launch and runs body in every thread of every block (in the
// stream's order: at once, or recorded into the graph being captured).
void launch(const void *kernel, const cfg &c, std::function<void()> body);

// `(k | cfg)(args)`: the arguments convert to the kernel's parameter types
// at the call, as in a launch, and every thread calls k with those copies.
template <class... P> struct launcher {
    void (*k)(P...);
    cfg c;
    void operator()(P... p) const {
        void (*kf)(P...) = k;
        launch((const void *)kf, c, [kf, p...]() { kf(p...); });
    }
};
template <class... P> launcher<P...> operator|(void (*k)(P...), const cfg &c) { return {k, c}; }

}  // namespace simt

// ---- what kernels see -------------------------------------------------------------
#define threadIdx (simt::self()->thread_idx)
#define blockIdx (simt::self()->block_idx)
#define blockDim (simt::self()->block_dim)
#define gridDim (simt::self()->grid_dim)

#define __syncthreads() simt::syncthreads(__FILE__, __LINE__)
#define __syncwarp(...) simt::shfl(simt::SYNC_WARP, SIMT_MASK_OR_ALL(__VA_ARGS__), 0, 0, 32, __FILE__, __LINE__)
#define SIMT_MASK_OR_ALL(...) (0xffffffffu __VA_OPT__(& 0) __VA_OPT__(| (__VA_ARGS__)))
#define __shfl_sync(m, v, lane, ...) simt::shfl_t(simt::SHFL_IDX, m, v, lane, SIMT_WIDTH(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_up_sync(m, v, d, ...) simt::shfl_t(simt::SHFL_UP, m, v, d, SIMT_WIDTH(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_down_sync(m, v, d, ...) simt::shfl_t(simt::SHFL_DOWN, m, v, d, SIMT_WIDTH(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_xor_sync(m, v, x, ...) simt::shfl_t(simt::SHFL_XOR, m, v, x, SIMT_WIDTH(__VA_ARGS__), __FILE__, __LINE__)
#define SIMT_WIDTH(...) (32 __VA_OPT__(* 0 + (__VA_ARGS__)))
#define __ldg(p) simt::ldg(p, __FILE__, __LINE__)

static inline int __dp4a(int a, int b, int c) {
    for (int k = 0; k < 4; k++) c += (int8_t)(a >> 8 * k) * (int8_t)(b >> 8 * k);
    return c;
}
static inline unsigned __vsub4(unsigned a, unsigned b) {
    unsigned r = 0;
    for (int k = 0; k < 4; k++) r |= (unsigned)(uint8_t)((a >> 8 * k) - (b >> 8 * k)) << 8 * k;
    return r;
}
// byte k of the result: byte (s >> 4k) & 7 of the 8 bytes y:x (x the low four);
// bit 3 of the selector nibble replicates that byte's sign bit instead
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long v = (unsigned long long)y << 32 | x;
    unsigned r = 0;
    for (int k = 0; k < 4; k++) {
        const unsigned sel = (s >> 4 * k) & 15, b = (unsigned)(v >> 8 * (sel & 7)) & 0xff;
        r |= (sel & 8 ? (b & 0x80 ? 0xffu : 0u) : b) << 8 * k;
    }
    return r;
}
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }

template <class T> T atomicAdd(T *p, T v) { return simt::atomic_add(p, v); }
template <class T> T atomicMax(T *p, T v) { return simt::atomic_update(p, [v](T o) { return o < v ? v : o; }); }
template <class T> T atomicMin(T *p, T v) { return simt::atomic_update(p, [v](T o) { return v < o ? v : o; }); }
template <class T> T atomicExch(T *p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST); }
template <class T> T atomicCAS(T *p, T cmp, T v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
    return cmp;
}
