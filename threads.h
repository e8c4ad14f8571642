// threads.h — the CPU backend's worker threads: run one function on every
// thread, and hand out work in chunks that threads claim as they go.
//
// Why not OpenMP: a decode step is ~100 parallel sections of ~100 µs each,
// and on a machine where another process holds a core the thread sharing
// that core runs half the time. Work claimed dynamically (tp_for) lets the
// threads that run take over its share; waiting threads spin briefly, then
// sleep (a futex), so a stalled thread can be moved onto the core they free;
// a worker done with its part yields its core to whatever else waits there.
#ifndef QUILL_THREADS_H
#define QUILL_THREADS_H

#include <stdint.h>

typedef struct tpool tpool;

// A pool of n_threads (>= 1) including the caller: n_threads - 1 workers are
// started. NULL when they cannot be (errno set).
tpool *tp_create(int n_threads);
void tp_free(tpool *p);

typedef void (*tp_body)(void *ctx, int64_t i0, int64_t i1);

// body(ctx, i0, i1) over items [0, total) in chunks of at least `min` items
// (except the last), each starting at a multiple of `align` (a power of 2);
// returns when every item is done. On the caller alone when total <= min.
//
// Each thread takes its own contiguous part of the items, a quarter of what
// is left there at a time, front to back, so one thread's chunks follow one
// another in memory (a decode's matvec streams its rows: a chunk that starts
// where the thread's last one ended finds its first lines already asked for,
// where one elsewhere starts cold and ran ~40% slower from DRAM here). A
// thread whose part is empty takes the back half of what is left in
// another's, so threads finish together, and a worker that another process
// keeps off its core holds at most a quarter of its part: the others take
// the rest (its part too, when it never starts). One caller at a time (the
// pool's owner); body must not call tp_for.
void tp_for(tpool *p, int64_t total, int64_t min, int64_t align, tp_body body, void *ctx);

#endif
