// simt/simt_host.h — the runtime's services to the stand-in libraries
// (cublas.cpp): stream order, device-pointer checks, contract failures.
#pragma once
#include <stddef.h>

#include <functional>

struct simt_stream;
typedef struct simt_stream *cudaStream_t;

namespace simt {
// Runs fn in s's order: at once, or recorded into the graph being captured
// on s (replayed by cudaGraphLaunch). `what` names the work in messages.
// 0, or a CUDA error code (the capture was invalid, an earlier launch failed).
int enqueue(cudaStream_t s, std::function<void()> fn, const char *what);
// Whether [p, p + bytes) lies inside one live device allocation.
bool is_device(const void *p, size_t bytes);
// A broken contract (a launch limit, a cuBLAS argument, divergence): the
// message goes to stderr once, the runtime's error becomes sticky (as a
// device fault is on a GPU), and later calls return it.
void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
}  // namespace simt
