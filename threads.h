// threads.h — the CPU backend's worker threads: run one function on every
// thread, and hand out work in chunks that threads claim as they go.
//
// Why not OpenMP: a decode step is ~100 parallel sections of ~100 µs each,
// and on a machine where another process holds a core the thread sharing
// that core runs half the time. Work claimed dynamically (tp_claim) lets the
// threads that run take over its share; waiting threads spin briefly, then
// sleep (a futex), so a stalled thread can be moved onto the core they free;
// a worker done with its part yields its core to whatever else waits there.
#ifndef QUILL_THREADS_H
#define QUILL_THREADS_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct tpool tpool;

// fn(ctx, i, n) runs on thread i of n (the caller is thread 0).
typedef void (*tp_fn)(void *ctx, int i, int n);

// A pool of n_threads (>= 1) including the caller: n_threads - 1 workers are
// started. NULL when they cannot be (errno set).
tpool *tp_create(int n_threads);
void tp_free(tpool *p);

// Runs fn on the caller and on each worker that starts before the caller's
// fn returns, and returns when all of those have returned: fn must hand out
// its work dynamically (tp_claim), since a worker that another process keeps
// off its core does not run it (and is not waited for). One caller at a time
// (the pool's owner); fn must not call tp_run.
void tp_run(tpool *p, tp_fn fn, void *ctx);

// Dynamic work: items [0, total) handed out in chunks, in order, as threads
// ask (*next starts at 0). Returns the first item of a claimed chunk and sets
// *end past its last; total when none is left. A chunk is 1/(4n) of what is
// left (n: the pool's threads), so the first chunks are large (few claims)
// and the last ones small (threads finish together), and never fewer than
// `min` items (except the last chunk), a multiple of `align` (a power of 2).
static inline int64_t tp_claim(atomic_int_fast64_t *next, int64_t total, int64_t min, int64_t align, int n,
                               int64_t *end) {
    int64_t i = atomic_load_explicit(next, memory_order_relaxed);
    for (;;) {
        if (i >= total) return total;
        int64_t c = ((total - i) / (4 * n) + align - 1) & ~(align - 1);
        if (c < min) c = min;
        const int64_t e = total - i > c ? i + c : total;
        if (atomic_compare_exchange_weak_explicit(next, &i, e, memory_order_relaxed, memory_order_relaxed)) {
            *end = e;
            return i;
        }
    }
}

#endif
