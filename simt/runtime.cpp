// simt/runtime.cpp — the SIMT emulation's runtime: fibers and the block
// scheduler (the checks of simt.h's synchronisation points), and the CUDA
// runtime API of cuda_runtime.h on the CPU. Built into libsimt.so, which
// the emulated programs and the cuBLAS stand-ins (cublas.cpp) share.
//
// Like a driver it has process-wide state (allocations, the sticky error):
// one `rt` object, guarded by its mutex where blocks may touch it.
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_runtime.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN 1
#else
#define SIMT_ASAN 0
#endif

enum {
    FIBER_STACK = 64 << 10,  // bytes of stack per CUDA thread (a guard page below)
    MAX_THREADS = 1024,      // threads per block
    SMEM_DEFAULT = 48 << 10, // dynamic shared memory without cudaFuncSetAttribute
    SMEM_OPTIN = 227 << 10,  // the most an H100 allows after it
};
static const unsigned char POISON = 0xff;  // fresh device and shared memory: NaN as floats, -1 as ints

// ---------------------------------------------------------------------------
// Process state
// ---------------------------------------------------------------------------

struct simt_stream {
    unsigned flags = 0;
    bool capturing = false, invalidated = false;
    cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
    std::thread::id capture_thread;
    struct simt_graph *graph = nullptr;  // being recorded
};

struct graph_node {
    std::string what;
    std::function<void()> run;
};
struct simt_graph {
    std::vector<graph_node> nodes;
};
struct simt_graph_exec : simt_graph {};  // an instantiated copy
struct simt_event {
    double t = -1;  // seconds, when the stream reached it
};

static struct runtime {
    std::mutex mu;
    std::map<uintptr_t, size_t> device, pinned;  // live allocations: start → bytes
    std::map<const void *, int> smem_limit;      // kernel → dynamic shared memory it may use
    std::vector<simt_stream *> capturing;        // streams recording a graph
    cudaError_t sticky = cudaSuccess, last = cudaSuccess;
    size_t in_use = 0;
    simt_stream legacy;                           // stream 0
    unsigned long launches = 0;                   // seeds each launch's thread order
} rt;

static double now_s() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static cudaError_t set_last(cudaError_t e) {
    if (e != cudaSuccess && rt.last == cudaSuccess) rt.last = e;
    return e;
}

// Sticky failures (what a device fault is on a GPU): every later call returns it.
static cudaError_t sticky(cudaError_t e) {
    std::lock_guard<std::mutex> g(rt.mu);
    if (rt.sticky == cudaSuccess) rt.sticky = e;
    return set_last(rt.sticky);
}

static cudaError_t check_sticky() { return rt.sticky != cudaSuccess ? set_last(rt.sticky) : cudaSuccess; }

static void report(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void report(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("simt: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

// The backend opens cuBLAS by soname (dlopen("libcublas.so.13")). Under ASan
// that dlopen goes through an interceptor and loses the caller's RUNPATH, so
// the system's cuBLAS could be found instead of the stand-ins that lie beside
// this library: they are loaded here first, by path, and a dlopen by soname
// then returns them (and they stay loaded while the backend opens and closes them).
__attribute__((constructor)) static void load_stand_ins() {
    Dl_info info;
    if (!dladdr((void *)&load_stand_ins, &info) || !info.dli_fname) return;
    std::string dir = info.dli_fname;
    dir.erase(dir.find_last_of('/') + 1);
    for (const char *name : {"libcublas.so.13", "libcublasLt.so.13"})
        if (!dlopen((dir + name).c_str(), RTLD_NOW | RTLD_LOCAL)) report("cannot load the stand-in %s%s: %s", dir.c_str(), name, dlerror());
}

static bool range_in(const std::map<uintptr_t, size_t> &m, const void *p, size_t bytes) {
    auto it = m.upper_bound((uintptr_t)p);
    if (it == m.begin()) return false;
    --it;
    return (uintptr_t)p + bytes <= it->first + it->second && (uintptr_t)p >= it->first;
}

namespace simt {
bool is_device(const void *p, size_t bytes) {
    std::lock_guard<std::mutex> g(rt.mu);
    return range_in(rt.device, p, bytes ? bytes : 1);
}
}  // namespace simt

static simt_stream *stream_of(cudaStream_t s) { return s ? s : &rt.legacy; }

// A call CUDA forbids while a stream captures (allocation, synchronisation):
// it fails and invalidates the capture, as in CUDA.
static cudaError_t capture_unsafe(const char *what) {
    std::lock_guard<std::mutex> g(rt.mu);
    for (simt_stream *s : rt.capturing) {
        if (s->mode == cudaStreamCaptureModeRelaxed) continue;
        if (s->mode == cudaStreamCaptureModeThreadLocal && s->capture_thread != std::this_thread::get_id()) continue;
        s->invalidated = true;
        report("%s during stream capture: not permitted (the capture is invalidated)", what);
        return set_last(cudaErrorStreamCaptureUnsupported);
    }
    return cudaSuccess;
}

namespace simt {
int enqueue(cudaStream_t st, std::function<void()> fn, const char *what) {
    if (cudaError_t e = check_sticky()) return e;
    simt_stream *s = stream_of(st);
    if (s->capturing) {
        if (s->invalidated) return set_last(cudaErrorStreamCaptureInvalidated);
        s->graph->nodes.push_back({what, std::move(fn)});
        return cudaSuccess;
    }
    fn();
    return check_sticky();
}
}  // namespace simt

// ---------------------------------------------------------------------------
// Fibers: a context switch saves the callee-saved registers on the stack it
// leaves and loads those of the one it enters (no system call).
// ---------------------------------------------------------------------------

extern "C" void simt_ctx_switch(void **save_sp, void *load_sp);
extern "C" void simt_fiber_trampoline(void);
extern "C" __attribute__((visibility("hidden"), noreturn)) void simt_fiber_main(void);

#if defined(__x86_64__)
asm(R"(
    .text
    .globl simt_ctx_switch
    .hidden simt_ctx_switch
    .type simt_ctx_switch, @function
simt_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    fnstcw (%rsp)
    stmxcsr 8(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    fldcw (%rsp)
    ldmxcsr 8(%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size simt_ctx_switch, .-simt_ctx_switch

    .globl simt_fiber_trampoline
    .hidden simt_fiber_trampoline
    .type simt_fiber_trampoline, @function
simt_fiber_trampoline:
    call simt_fiber_main
    ud2
    .size simt_fiber_trampoline, .-simt_fiber_trampoline
)");

// A fresh stack whose first switch-in "returns" into the trampoline: the
// frame simt_ctx_switch pops (control words, six registers, return address),
// the same for every fiber of an OS thread, so it is built once. Fiber i's
// stack top is set 192·i bytes (mod 4 KiB) lower: tops at one offset modulo
// the page would all fall into the same cache sets and evict each other at
// every switch.
static void *initial_sp(char *stack, size_t size, uint64_t *frame, int i) {
    if (!frame[8]) {
        uint16_t fcw;
        uint32_t mxcsr;
        asm volatile("fnstcw %0" : "=m"(fcw));
        asm volatile("stmxcsr %0" : "=m"(mxcsr));
        memcpy(&frame[0], &fcw, 2);
        memcpy(&frame[1], &mxcsr, 4);
        frame[8] = (uint64_t)(uintptr_t)&simt_fiber_trampoline;
    }
#if SIMT_ASAN  // a finished fiber leaves its frames' redzones poisoned (it never returns)
    __asan_unpoison_memory_region(stack, size);
#endif
    char *top = (char *)(((uintptr_t)(stack + size - (size_t)(192 * i) % 4096)) & ~(uintptr_t)15);
    uint64_t *sp = (uint64_t *)(top - 88);  // ≡ 8 (mod 16), as a saved sp is
    memcpy(sp, frame, 88);
    return sp;
}
#else
#error "simt: the fiber switch is written for x86-64 only"
#endif

namespace {

enum fiber_state { READY, AT_BARRIER, IN_SHUFFLE, DONE, ABORTED };

struct fiber {
    simt::thread_state ts;
    void *sp = nullptr;
    char *stack = nullptr;   // FIBER_STACK bytes above a guard page
    fiber_state state = READY;
    const char *file = nullptr;  // where it waits
    int line = 0;
    uint64_t shfl_result = 0;
    void *asan_fake = nullptr;
};

// A warp's exchange in progress (a shuffle or __syncwarp all its lanes must reach).
struct exchange {
    unsigned live = 0;      // lanes the block has that have not exited
    bool active = false;
    simt::shfl_kind kind = simt::SHFL_IDX;
    unsigned mask = 0, arrived = 0;
    int width = 32;
    const char *file = nullptr;
    int line = 0;
    uint64_t val[32];
    int arg[32];
};

struct block_run {
    const char *kernel;
    dim3 block_idx;
    int n;                 // threads
    fiber *f;              // [n]
    exchange *x;           // [warps]
    void *smem;            // dynamic shared memory (exact size, poisoned)
    bool failed;
    const int *order;      // [n] the order threads are run in (thread_order)
    int cursor;            // where next_ready looks first
};

// Per OS thread: the fiber stacks and the scheduler's own context. Trivially
// destructible, so the thread_local needs no init guard on every access (the
// stacks stay mapped until the process ends).
struct scheduler {
    char *stacks[MAX_THREADS];     // FIBER_STACK bytes each, above a guard page
    int n_stacks;
    void *sp;                      // the scheduler's saved sp while a fiber runs
    void *asan_fake;
    const void *bottom;            // the scheduler stack's bounds (ASan)
    size_t size;
    fiber *cur;
    block_run *blk;
    const std::function<void()> *body;
    bool from_main;                // the switch in progress leaves the scheduler
    uint64_t fresh[11];            // a new fiber's first frame (control words, registers, trampoline)
};
thread_local scheduler sched __attribute__((tls_model("initial-exec")));

char *stack_for(int i) {
    while (sched.n_stacks <= i) {
        char *m = (char *)mmap(nullptr, FIBER_STACK + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) {
            report("cannot map a fiber stack: %s", strerror(errno));
            abort();
        }
        mprotect(m, 4096, PROT_NONE);  // a stack overflow faults instead of corrupting a neighbour
        sched.stacks[sched.n_stacks++] = m + 4096;
    }
    return sched.stacks[i];
}

void asan_start(void **fake, const void *bottom, size_t size) {
#if SIMT_ASAN
    __sanitizer_start_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}
void asan_finish(void *fake, const void **bottom, size_t *size) {
#if SIMT_ASAN
    __sanitizer_finish_switch_fiber(fake, bottom, size);
#else
    (void)fake, (void)bottom, (void)size;
#endif
}

// The scheduler runs f; returns when no thread of the block can run (or it failed).
void run_fiber(fiber *f) {
    sched.cur = f, simt::current = &f->ts, sched.from_main = true;
    asan_start(&sched.asan_fake, f->stack, FIBER_STACK);
    simt_ctx_switch(&sched.sp, f->sp);
    asan_finish(sched.asan_fake, nullptr, nullptr);
    sched.cur = nullptr, simt::current = nullptr;
}

// The next thread to run, in the block's order after the last one started.
fiber *next_ready(block_run *b) {
    for (int t = 0; t < b->n; t++) {
        const int k = b->cursor + t < b->n ? b->cursor + t : b->cursor + t - b->n;
        fiber *f = &b->f[b->order[k]];
        if (f->state == READY) {
            b->cursor = k + 1 < b->n ? k + 1 : 0;
            return f;
        }
    }
    return nullptr;
}

// The running thread f stops (its state says why): the next ready thread of
// the block runs, straight from f's stack (one switch, not two through the
// scheduler), or the scheduler when none can. Returns when f runs again.
void pass_on(fiber *f) {
    block_run *b = sched.blk;
    const bool dying = f->state == DONE || f->state == ABORTED;
    fiber *g = b->failed || f->state == ABORTED ? nullptr : next_ready(b);
    if (g) {
        sched.cur = g, simt::current = &g->ts, sched.from_main = false;
        asan_start(dying ? nullptr : &f->asan_fake, g->stack, FIBER_STACK);
        simt_ctx_switch(&f->sp, g->sp);
    } else {
        asan_start(dying ? nullptr : &f->asan_fake, sched.bottom, sched.size);
        simt_ctx_switch(&f->sp, sched.sp);
    }
    asan_finish(f->asan_fake, nullptr, nullptr);
}

}  // namespace

namespace simt {
thread_local thread_state *current __attribute__((tls_model("initial-exec"))) = nullptr;
}  // namespace simt

static void check_exit(block_run &b, const fiber &f);

extern "C" void simt_fiber_main(void) {
    const void *bottom = nullptr;
    size_t size = 0;
    asan_finish(nullptr, &bottom, &size);
    if (sched.from_main) sched.bottom = bottom, sched.size = size;  // the scheduler's stack
    fiber *f = sched.cur;
    (*sched.body)();
    f->state = DONE;
    check_exit(*sched.blk, *f);
    pass_on(f);
    __builtin_unreachable();
}

// ---------------------------------------------------------------------------
// Checks at the synchronisation points
// ---------------------------------------------------------------------------

static void vfail_here(cudaError_t code, const char *fmt, va_list ap) {
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fiber *f = sched.cur;
    block_run *b = sched.blk;
    if (f && b)
        report("%s, block (%u,%u,%u) thread (%u,%u,%u): %s", b->kernel, b->block_idx.x, b->block_idx.y,
               b->block_idx.z, f->ts.thread_idx.x, f->ts.thread_idx.y, f->ts.thread_idx.z, msg);
    else if (b)
        report("%s, block (%u,%u,%u): %s", b->kernel, b->block_idx.x, b->block_idx.y, b->block_idx.z, msg);
    else
        report("%s", msg);
    sticky(code);
    if (b) b->failed = true;
}

// A failure: reported; inside a kernel the block stops (this fiber never
// resumes), outside one the call returns.
static void fail_here(cudaError_t code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail_here(cudaError_t code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail_here(code, fmt, ap);
    va_end(ap);
    if (fiber *f = sched.cur) {
        f->state = ABORTED;
        pass_on(f);
        __builtin_unreachable();
    }
}

namespace simt {
void fail(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail_here(cudaErrorLaunchFailure, "%s", msg);
}

void misaligned(const char *what, const void *p, size_t align, const char *file, int line) {
    fail_here(cudaErrorMisalignedAddress, "%s of %p, which is not %zu-byte aligned, at %s:%d", what, p, align, file,
              line);
}

void *dyn_smem_ptr(const char *file, int line) {
    block_run *b = sched.blk;
    if (!b || !sched.cur) {
        fail_here(cudaErrorLaunchFailure, "dynamic shared memory used outside a kernel at %s:%d", file, line);
        return nullptr;
    }
    return b->smem;
}

void syncthreads(const char *file, int line) {
    fiber *f = sched.cur;
    if (!f) return;  // host code calling a device helper
    f->state = AT_BARRIER, f->file = file, f->line = line;
    pass_on(f);
}

// The lane that completes an exchange computes every lane's result.
static void complete(exchange &x, fiber *warp0) {
    for (int l = 0; l < 32; l++) {
        if (!(x.mask >> l & 1)) continue;
        int src = l;
        const int w = x.width, base = l & ~(w - 1), pos = l & (w - 1);
        switch (x.kind) {
        case SHFL_IDX: src = base + (x.arg[l] & (w - 1)); break;
        case SHFL_UP: src = pos >= x.arg[l] ? l - x.arg[l] : l; break;
        case SHFL_DOWN: src = pos + x.arg[l] < w ? l + x.arg[l] : l; break;
        case SHFL_XOR: src = (pos ^ x.arg[l]) < w ? base + (pos ^ x.arg[l]) : l; break;
        case SYNC_WARP: break;
        }
        if (!(x.mask >> src & 1))
            fail_here(cudaErrorLaunchFailure, "lane %d reads lane %d, which is not in the mask 0x%08x (%s:%d)", l, src,
                      x.mask, x.file, x.line);
        fiber *lf = warp0 + l;
        lf->shfl_result = x.val[src];
        if (lf->state == IN_SHUFFLE) lf->state = READY;
    }
    x.active = false;
}

uint64_t shfl(shfl_kind kind, unsigned mask, uint64_t bits, int arg, int width, const char *file, int line) {
    fiber *f = sched.cur;
    block_run *b = sched.blk;
    if (!f) return bits;  // host code
    const int lane = f->ts.lane, w0 = f->ts.linear - lane;
    exchange &x = b->x[f->ts.warp];
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail_here(cudaErrorLaunchFailure, "shuffle width %d is not a power of two <= 32 at %s:%d", width, file, line);
    if (!(mask >> lane & 1))
        fail_here(cudaErrorLaunchFailure, "mask 0x%08x at %s:%d does not name the calling lane %d", mask, file, line,
                  lane);
    if (mask & ~x.live) {
        const int l = __builtin_ctz(mask & ~x.live);
        fail_here(cudaErrorLaunchFailure, "mask 0x%08x at %s:%d names lane %d, which %s", mask, file, line, l,
                  w0 + l >= b->n ? "the block does not have" : "has exited");
    }
    if (!x.active) {
        x.active = true, x.kind = kind, x.mask = mask, x.arrived = 0, x.width = width, x.file = file, x.line = line;
    } else if (x.kind != kind || x.mask != mask || x.width != width) {
        fail_here(cudaErrorLaunchFailure,
                  "lane %d reaches %s:%d (mask 0x%08x) while lanes 0x%08x of its warp wait at %s:%d (mask 0x%08x)",
                  lane, file, line, mask, x.arrived, x.file, x.line, x.mask);
    }
    x.val[lane] = bits, x.arg[lane] = arg, x.arrived |= 1u << lane;
    if (x.arrived == x.mask) {
        complete(x, b->f + w0);
        return f->shfl_result;
    }
    f->state = IN_SHUFFLE, f->file = file, f->line = line;
    pass_on(f);
    return f->shfl_result;
}
}  // namespace simt

// ---------------------------------------------------------------------------
// Blocks and launches
// ---------------------------------------------------------------------------

// The order a block's threads are run in: QUILL_SIMT_SEED unset or 0: forward,
// 1: reversed, else a permutation drawn from the seed, the launch and the block.
static void thread_order(int *order, int n, uint64_t launch, uint64_t block) {
    static const char *env = getenv("QUILL_SIMT_SEED");
    const uint64_t seed = env ? strtoull(env, nullptr, 0) : 0;
    for (int i = 0; i < n; i++) order[i] = seed == 1 ? n - 1 - i : i;
    if (seed <= 1) return;
    uint64_t r = seed ^ (launch * 0x9e3779b97f4a7c15ull) ^ (block * 0xbf58476d1ce4e5b9ull);
    for (int i = n - 1; i > 0; i--) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        const int j = (int)(r % (uint64_t)(i + 1));
        std::swap(order[i], order[j]);
    }
}

// A failure the scheduler finds (no fiber is running): the block stops.
static void block_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void block_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfail_here(cudaErrorLaunchFailure, fmt, ap);
    va_end(ap);
}

// A thread exited: no lane of its warp may be waiting for it in an exchange.
static void check_exit(block_run &b, const fiber &f) {
    exchange &x = b.x[f.ts.warp];
    x.live &= ~(1u << f.ts.lane);
    if (x.active && (x.mask >> f.ts.lane & 1) && !(x.arrived >> f.ts.lane & 1))
        block_fail("thread %d exited while lanes 0x%08x of its warp wait for it at %s:%d (mask 0x%08x)", f.ts.linear,
                   x.arrived, x.file, x.line, x.mask);
}

// When no thread of the block can run: 1 when all have exited; releases a
// barrier every live thread has reached (0); fails the block (-1) on a
// barrier some thread exited before, on threads at different barriers, and
// on a deadlock.
static int settle(block_run &b) {
    int done = 0, at = 0, first_at = -1, first_done = -1, first_wait = -1;
    for (int i = 0; i < b.n; i++) {
        const fiber &f = b.f[i];
        if (f.state == DONE) done++, first_done = first_done < 0 ? i : first_done;
        else if (f.state == AT_BARRIER) at++, first_at = first_at < 0 ? i : first_at;
        else if (f.state == IN_SHUFFLE && first_wait < 0) first_wait = i;
    }
    if (done == b.n) return 1;
    if (at && at + done == b.n) {
        const fiber &a = b.f[first_at];
        if (done) {
            block_fail("__syncthreads at %s:%d never completes: thread %d has exited", a.file, a.line, first_done);
            return -1;
        }
        for (int i = 0; i < b.n; i++)
            if (b.f[i].file != a.file || b.f[i].line != a.line) {
                block_fail("threads wait at different barriers: thread %d at %s:%d, thread %d at %s:%d", first_at,
                           a.file, a.line, i, b.f[i].file, b.f[i].line);
                return -1;
            }
        for (int i = 0; i < b.n; i++) b.f[i].state = READY;
        return 0;
    }
    const fiber *w = first_wait >= 0 ? &b.f[first_wait] : nullptr, *a = first_at >= 0 ? &b.f[first_at] : nullptr;
    block_fail("deadlock: thread %d waits in a warp exchange at %s:%d, thread %d at __syncthreads at %s:%d",
               first_wait, w ? w->file : "-", w ? w->line : 0, first_at, a ? a->file : "-", a ? a->line : 0);
    return -1;
}

static void run_block(block_run &b, const std::function<void()> &body, dim3 grid, dim3 block, const int *order) {
    for (int i = 0; i < b.n; i++) {
        fiber &f = b.f[i];
        f.ts.thread_idx = dim3(i % block.x, i / block.x % block.y, i / (block.x * block.y));
        f.ts.block_idx = b.block_idx, f.ts.block_dim = block, f.ts.grid_dim = grid;
        f.ts.lane = i % 32, f.ts.warp = i / 32, f.ts.linear = i;
        f.stack = stack_for(i);
        f.sp = initial_sp(f.stack, FIBER_STACK, sched.fresh, i);
        f.state = READY, f.file = nullptr, f.line = 0, f.asan_fake = nullptr;
    }
    for (int w = 0; w < (b.n + 31) / 32; w++) {
        const int lanes = b.n - 32 * w < 32 ? b.n - 32 * w : 32;
        b.x[w].active = false, b.x[w].live = lanes == 32 ? ~0u : (1u << lanes) - 1;
    }
    sched.blk = &b, sched.body = &body;
    b.order = order, b.cursor = 0;
    for (;;) {
        if (fiber *f = next_ready(&b)) run_fiber(f);
        if (b.failed || settle(b)) break;
    }
    sched.blk = nullptr, sched.body = nullptr;
}

// A launch's blocks, shared by the OS threads that run them.
struct grid_job {
    const char *name;
    const std::function<void()> *body;
    dim3 grid, block;
    size_t smem;
    uint64_t launch_no, blocks;
    std::atomic<uint64_t> next{0};  // the next block to take
    std::atomic<bool> stop{false};  // a block failed
};

// Takes blocks of j until none are left (or one failed), one at a time.
static void work_on(grid_job &j) {
    const int n = (int)(j.block.x * j.block.y * j.block.z);
    std::vector<fiber> fv(n);
    std::vector<exchange> xv((n + 31) / 32);
    std::vector<int> order(n);
    for (uint64_t i; !j.stop && (i = j.next++) < j.blocks;) {
        const dim3 idx((unsigned)(i % j.grid.x), (unsigned)(i / j.grid.x % j.grid.y),
                       (unsigned)(i / ((uint64_t)j.grid.x * j.grid.y)));
        block_run b = {j.name, idx, n, fv.data(), xv.data(), nullptr, false, nullptr, 0};
        if (j.smem) {  // exactly the launch's bytes, poisoned: ASan sees an overrun
            if (!(b.smem = malloc(j.smem))) {
                report("%s: out of memory for %zu bytes of shared memory", j.name, j.smem);
                sticky(cudaErrorMemoryAllocation);
                j.stop = true;
                return;
            }
            memset(b.smem, POISON, j.smem);
        }
        thread_order(order.data(), n, j.launch_no, i);
        run_block(b, *j.body, j.grid, j.block, order.data());
        free(b.smem);
        if (b.failed) j.stop = true;
    }
}

// OS threads that run blocks beside the launching one (QUILL_SIMT_THREADS,
// default: the cores, at most 8). Blocks run in parallel as on a GPU; each
// OS thread runs one block at a time, the unit of __shared__ memory.
static struct block_pool {
    std::mutex m;
    std::condition_variable wake, idle;
    std::vector<std::thread> threads;
    grid_job *job = nullptr;
    uint64_t generation = 0;  // one per job handed out
    size_t finished = 0;      // threads done with the current job (each takes every job)
    bool quit = false;

    void start() {
        const char *env = getenv("QUILL_SIMT_THREADS");
        int n = env ? atoi(env) : (int)std::thread::hardware_concurrency();
        n = n < 1 ? 1 : n > 8 ? 8 : n;
        for (int i = 1; i < n; i++) threads.emplace_back([this] { loop(); });
    }
    void loop() {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lk(m);
        for (;;) {
            wake.wait(lk, [&] { return quit || generation != seen; });
            if (quit) return;
            seen = generation;
            grid_job *j = job;
            lk.unlock();
            work_on(*j);
            lk.lock();
            if (++finished == threads.size()) idle.notify_all();
        }
    }
    void run(grid_job &j) {
        static std::once_flag once;
        std::call_once(once, [this] { start(); });
        if (threads.empty() || j.blocks < 2) return work_on(j);
        {
            std::lock_guard<std::mutex> lk(m);
            job = &j, finished = 0, generation++;
        }
        wake.notify_all();
        work_on(j);
        std::unique_lock<std::mutex> lk(m);
        idle.wait(lk, [&] { return finished == threads.size(); });  // j lives on this stack
        job = nullptr;
    }
    ~block_pool() {
        {
            std::lock_guard<std::mutex> lk(m);
            quit = true;
        }
        wake.notify_all();
        for (std::thread &t : threads) t.join();
    }
} pool;

static void run_grid(const char *name, const std::function<void()> &body, dim3 grid, dim3 block, size_t smem,
                     uint64_t launch_no) {
    grid_job j;
    j.name = name, j.body = &body, j.grid = grid, j.block = block, j.smem = smem, j.launch_no = launch_no;
    j.blocks = (uint64_t)grid.x * grid.y * grid.z;
    pool.run(j);
}

namespace simt {
void launch(const void *kernel, const cfg &c, std::function<void()> body) {
    const dim3 g = c.grid, k = c.block;
    const unsigned long long threads = (unsigned long long)k.x * k.y * k.z;
    const char *bad = !threads ? "an empty block"
                    : k.x > 1024 || k.y > 1024 || k.z > 64 || threads > MAX_THREADS ? "more than 1024 threads per block (or a block dimension over its limit)"
                    : !g.x || !g.y || !g.z ? "an empty grid"
                    : g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535 ? "a grid dimension over its limit (x < 2^31, y and z <= 65535)"
                    : nullptr;
    if (bad) {
        report("launch of %s with grid (%u,%u,%u), block (%u,%u,%u): %s", c.name, g.x, g.y, g.z, k.x, k.y, k.z, bad);
        set_last(cudaErrorInvalidConfiguration);
        return;
    }
    int limit = SMEM_DEFAULT;
    {
        std::lock_guard<std::mutex> lk(rt.mu);
        auto it = rt.smem_limit.find(kernel);
        if (it != rt.smem_limit.end()) limit = it->second;
    }
    if (c.smem > (size_t)limit) {
        report("launch of %s: %zu bytes of dynamic shared memory, over its limit of %d (cudaFuncSetAttribute raises it)",
               c.name, c.smem, limit);
        set_last(cudaErrorInvalidValue);
        return;
    }
    const uint64_t launch_no = ++rt.launches;
    const char *name = c.name;
    const size_t smem = c.smem;
    set_last((cudaError_t)enqueue(c.stream, [name, body, g, k, smem, launch_no] { run_grid(name, body, g, k, smem, launch_no); },
                                  name));
}
}  // namespace simt

// ---------------------------------------------------------------------------
// The runtime API
// ---------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int *count) {
    *count = 1;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int device) {
    if (device != 0) return set_last(cudaErrorInvalidValue);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "simt emulation");
    p->totalGlobalMem = (size_t)8 << 30;
    p->sharedMemPerBlock = SMEM_DEFAULT, p->sharedMemPerBlockOptin = SMEM_OPTIN;
    p->warpSize = 32, p->maxThreadsPerBlock = MAX_THREADS, p->multiProcessorCount = 132;  // an H100's
    p->major = __CUDA_ARCH__ / 100, p->minor = __CUDA_ARCH__ / 10 % 10;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : set_last(cudaErrorInvalidValue); }

cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes) {
    std::lock_guard<std::mutex> g(rt.mu);
    *total_bytes = (size_t)8 << 30;
    *free_bytes = rt.in_use < *total_bytes ? *total_bytes - rt.in_use : 0;
    return check_sticky();
}

cudaError_t cudaGetLastError(void) {
    const cudaError_t e = rt.sticky != cudaSuccess ? rt.sticky : rt.last;
    rt.last = cudaSuccess;
    return e;
}

cudaError_t cudaPeekAtLastError(void) { return rt.sticky != cudaSuccess ? rt.sticky : rt.last; }

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorLaunchFailure: return "unspecified launch failure (see the simt: line above)";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation is not valid in the stream's current state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorMisalignedAddress: return "misaligned address";
    default: return "unknown error";
    }
}

cudaError_t cudaDeviceSynchronize(void) {
    if (cudaError_t e = capture_unsafe("cudaDeviceSynchronize")) return e;
    return check_sticky();
}

// ---- memory ----

static cudaError_t alloc_in(std::map<uintptr_t, size_t> &m, void **p, size_t bytes, bool poison) {
    *p = nullptr;
    void *q = malloc(bytes ? bytes : 1);
    if (!q) return set_last(cudaErrorMemoryAllocation);
    if (poison) memset(q, POISON, bytes);
    std::lock_guard<std::mutex> g(rt.mu);
    m[(uintptr_t)q] = bytes;
    rt.in_use += bytes;
    *p = q;
    return cudaSuccess;
}

static cudaError_t free_in(std::map<uintptr_t, size_t> &m, void *p) {
    if (!p) return cudaSuccess;
    std::lock_guard<std::mutex> g(rt.mu);
    auto it = m.find((uintptr_t)p);
    if (it == m.end()) return set_last(cudaErrorInvalidDevicePointer);
    rt.in_use -= it->second;
    m.erase(it);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t bytes) {
    if (cudaError_t e = check_sticky()) return e;
    if (cudaError_t e = capture_unsafe("cudaMalloc")) return e;
    return alloc_in(rt.device, p, bytes, true);
}

cudaError_t cudaFree(void *p) {
    if (cudaError_t e = capture_unsafe("cudaFree")) return e;
    if (cudaError_t e = free_in(rt.device, p)) return e;
    return check_sticky();
}

cudaError_t cudaMallocHost(void **p, size_t bytes) {
    if (cudaError_t e = capture_unsafe("cudaMallocHost")) return e;
    return alloc_in(rt.pinned, p, bytes, false);
}

cudaError_t cudaFreeHost(void *p) {
    if (cudaError_t e = capture_unsafe("cudaFreeHost")) return e;
    return free_in(rt.pinned, p);
}

// Both sides of a copy checked against the kind: device memory is what
// cudaMalloc returned (the whole range inside one allocation).
static cudaError_t check_copy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, const char *what) {
    const bool dd = simt::is_device(dst, bytes), sd = simt::is_device(src, bytes);
    const bool ok = kind == cudaMemcpyHostToDevice ? dd && !sd
                  : kind == cudaMemcpyDeviceToHost ? sd && !dd
                  : kind == cudaMemcpyDeviceToDevice ? dd && sd
                  : kind == cudaMemcpyHostToHost ? !dd && !sd : kind == cudaMemcpyDefault;
    if (ok) return cudaSuccess;
    report("%s of %zu bytes, kind %d: destination %p is %s, source %p is %s", what, bytes, (int)kind, dst,
           dd ? "device memory" : "not (all) device memory", src, sd ? "device memory" : "not (all) device memory");
    return set_last(cudaErrorInvalidValue);
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    if (!bytes) return check_sticky();
    if (cudaError_t e = check_copy(dst, src, bytes, kind, "cudaMemcpyAsync")) return e;
    simt_stream *st = stream_of(s);
    if (st->capturing && kind != cudaMemcpyDeviceToDevice) {
        const void *host = kind == cudaMemcpyHostToDevice ? src : dst;
        bool pinned;
        {
            std::lock_guard<std::mutex> g(rt.mu);
            pinned = range_in(rt.pinned, host, bytes);
        }
        if (!pinned) {
            st->invalidated = true;
            report("cudaMemcpyAsync from or to pageable host memory during stream capture (the capture is invalidated)");
            return set_last(cudaErrorStreamCaptureUnsupported);
        }
    }
    return (cudaError_t)simt::enqueue(s, [dst, src, bytes] { memcpy(dst, src, bytes); }, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
    if (cudaError_t e = capture_unsafe("cudaMemcpy")) return e;
    if (cudaError_t e = check_copy(dst, src, bytes, kind, "cudaMemcpy")) return e;
    if (cudaError_t e = check_sticky()) return e;
    memcpy(dst, src, bytes);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s) {
    if (!bytes) return check_sticky();
    if (!simt::is_device(p, bytes)) {
        report("cudaMemsetAsync of %zu bytes at %p: not (all) device memory", bytes, p);
        return set_last(cudaErrorInvalidValue);
    }
    return (cudaError_t)simt::enqueue(s, [p, value, bytes] { memset(p, value, bytes); }, "cudaMemsetAsync");
}

cudaError_t cudaMemset(void *p, int value, size_t bytes) {
    if (cudaError_t e = capture_unsafe("cudaMemset")) return e;
    return cudaMemsetAsync(p, value, bytes, nullptr);
}

cudaError_t simt_func_set_attribute(const void *func, cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > SMEM_OPTIN)
        return set_last(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> g(rt.mu);
    rt.smem_limit[func] = value;
    return cudaSuccess;
}

// ---- streams and graphs ----

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags) {
    *s = new simt_stream;
    (*s)->flags = flags;
    return check_sticky();
}

cudaError_t cudaStreamCreate(cudaStream_t *s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (!s) return set_last(cudaErrorInvalidResourceHandle);
    if (s->capturing) return set_last(cudaErrorStreamCaptureUnsupported);
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (stream_of(s)->capturing) {
        stream_of(s)->invalidated = true;
        report("cudaStreamSynchronize on a capturing stream (the capture is invalidated)");
        return set_last(cudaErrorStreamCaptureUnsupported);
    }
    if (cudaError_t e = capture_unsafe("cudaStreamSynchronize")) return e;
    return check_sticky();
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    if (!s) return set_last(cudaErrorStreamCaptureUnsupported);  // the legacy stream cannot capture
    if (s->capturing) return set_last(cudaErrorIllegalState);
    s->capturing = true, s->invalidated = false, s->mode = mode, s->capture_thread = std::this_thread::get_id();
    s->graph = new simt_graph;
    std::lock_guard<std::mutex> g(rt.mu);
    rt.capturing.push_back(s);
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    *g = nullptr;
    if (!s || !s->capturing) return set_last(cudaErrorIllegalState);
    {
        std::lock_guard<std::mutex> lk(rt.mu);
        for (size_t i = 0; i < rt.capturing.size(); i++)
            if (rt.capturing[i] == s) rt.capturing.erase(rt.capturing.begin() + (long)i);
    }
    s->capturing = false;
    if (s->invalidated) {
        delete s->graph;
        s->graph = nullptr;
        return set_last(cudaErrorStreamCaptureInvalidated);
    }
    *g = s->graph;
    s->graph = nullptr;
    return check_sticky();
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *ex, cudaGraph_t g, unsigned long long flags) {
    (void)flags;
    if (!g) return set_last(cudaErrorInvalidValue);
    *ex = new simt_graph_exec{*g};
    return check_sticky();
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t ex, cudaStream_t s) {
    if (!ex) return set_last(cudaErrorInvalidValue);
    for (const graph_node &n : ex->nodes)
        if (int e = simt::enqueue(s, n.run, n.what.c_str())) return set_last((cudaError_t)e);
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t ex) {
    delete ex;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}

// ---- events: the time the stream reached them ----

cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = new simt_event;
    return check_sticky();
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e) return set_last(cudaErrorInvalidResourceHandle);
    return (cudaError_t)simt::enqueue(s, [e] { e->t = now_s(); }, "cudaEventRecord");
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return set_last(cudaErrorInvalidResourceHandle);
    if (cudaError_t err = capture_unsafe("cudaEventSynchronize")) return err;
    return check_sticky();
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a || !b || a->t < 0 || b->t < 0) return set_last(cudaErrorInvalidResourceHandle);
    *ms = (float)((b->t - a->t) * 1e3);
    return check_sticky();
}
