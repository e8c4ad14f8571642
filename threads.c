// threads.c — see threads.h.
//
// A job (one tp_for: its loop on every thread) is published by bumping
// `gen`; workers wait for it to change, and each joins it unless the caller
// has already closed it (ran the loop to the end: every item is claimed), so
// a worker that another process keeps off its core costs nothing; the
// caller waits for the workers that joined (`running`) to leave. Each wait
// spins for TP_SPIN_NS (the gaps between a decode step's sections are
// microseconds, and a futex wake-up costs tens of them), then sleeps on the
// word with futex(2). A sleeper first counts itself in `sleepers`, then
// re-reads the word; a waker changes the word, then reads the count (both
// sequentially consistent), so either the sleeper sees the change or the
// waker sees the sleeper, and a wake-up is never lost while the common case
// makes no system call.
#include "threads.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define TP_SPIN_NS 50000  // how long a waiting thread spins before it sleeps

typedef struct {
    _Atomic uint32_t word;  // the value waited on
    atomic_int sleepers;    // threads in futex_wait on it
} tp_event;

typedef struct {
    tpool *pool;
    int i;
} tp_worker;

// A thread's part of tp_for's items, in units: [front, back) as front | back << 32,
// which its owner takes from the front and other threads from the back.
typedef struct {
    _Alignas(64) _Atomic uint64_t fb;
} tp_part;

struct tpool {
    int n;                    // threads, the caller included
    pthread_t *threads;       // [n - 1] workers
    tp_worker *args;          // [n - 1]
    tp_event gen;             // number of the current job
    _Atomic uint32_t closed;  // number of the last job workers may no longer join
    tp_event running;         // workers that joined the current job and have not left
    atomic_int stop;
    // the current job (written before gen is bumped)
    tp_part *parts;           // [n]: thread i's part of the units
    int64_t total, unit;      // items, and items per unit
    tp_body body;
    void *ctx;
};

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Waits until e->word != old and returns the new value.
static uint32_t ev_wait(tp_event *e, uint32_t old) {
    uint32_t v;
    int64_t t0 = 0;
    for (unsigned i = 1;; i++) {
        if ((v = atomic_load_explicit(&e->word, memory_order_acquire)) != old) return v;
        if (i % 128 == 0) {  // the clock every ~128 pauses
            const int64_t t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > TP_SPIN_NS) break;
        }
        cpu_relax();
    }
    for (;;) {
        atomic_fetch_add(&e->sleepers, 1);
        if (atomic_load(&e->word) == old) syscall(SYS_futex, &e->word, FUTEX_WAIT_PRIVATE, old, NULL, NULL, 0);
        atomic_fetch_sub(&e->sleepers, 1);
        if ((v = atomic_load_explicit(&e->word, memory_order_acquire)) != old) return v;
    }
}

// After e->word changed: wakes its sleepers, if any.
static void ev_wake(tp_event *e) {
    if (atomic_load(&e->sleepers)) syscall(SYS_futex, &e->word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void ev_set(tp_event *e, uint32_t v) {
    atomic_store(&e->word, v);
    ev_wake(e);
}

// The next chunk of units for thread i: [*u0, *u1). 0 when none is left.
static int claim(tpool *p, int i, int64_t *u0, int64_t *u1) {
    for (int k = 0; k < p->n; k++) {
        tp_part *part = &p->parts[(i + k) % p->n];
        uint64_t w = atomic_load_explicit(&part->fb, memory_order_relaxed);
        for (;;) {
            const int64_t f = (int64_t)(w & 0xffffffffu), b = (int64_t)(w >> 32);
            if (f >= b) break;
            uint64_t to;
            if (k == 0) {  // its own part: a quarter of what is left, from the front
                *u0 = f, *u1 = f + (b - f + 3) / 4;
                to = (uint64_t)*u1 | (uint64_t)b << 32;
            } else {  // another's: the back half
                *u0 = b - (b - f + 1) / 2, *u1 = b;
                to = (uint64_t)f | (uint64_t)*u0 << 32;
            }
            if (atomic_compare_exchange_weak_explicit(&part->fb, &w, to, memory_order_relaxed, memory_order_relaxed))
                return 1;
        }
    }
    return 0;
}

// The job on thread i: its chunks until none is left.
static void job(tpool *p, int i) {
    for (int64_t u0, u1; claim(p, i, &u0, &u1);) {
        const int64_t e = u1 * p->unit;
        p->body(p->ctx, u0 * p->unit, e < p->total ? e : p->total);
    }
}

static void *worker_main(void *arg) {
    const tp_worker *w = arg;
    tpool *p = w->pool;
    uint32_t seen = 0;
    for (;;) {
        seen = ev_wait(&p->gen, seen);
        if (atomic_load(&p->stop)) return NULL;
        // counted in, then the job still open: the caller (which closes, then
        // counts, both sequentially consistent) waits for this worker; closed
        // (or a later job's, as this worker came late): skipped
        atomic_fetch_add(&p->running.word, 1);
        if ((int32_t)(atomic_load(&p->closed) - seen) < 0) job(p, w->i);
        if (atomic_fetch_sub(&p->running.word, 1) == 1) ev_wake(&p->running);
        // Holding no work now, the worker offers its core to whatever else is
        // ready to run there (sched_yield returns at once on an idle core).
        // On a core shared with another process, the scheduler would
        // otherwise take it away at some tick, most likely in the middle of
        // a claimed chunk, and the section's end would wait for it a whole
        // time slice (milliseconds, against ~0.4 ms sections).
        sched_yield();
    }
}

tpool *tp_create(int n_threads) {
    tpool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_threads > 1 ? n_threads : 1;
    p->threads = calloc((size_t)p->n, sizeof *p->threads);
    p->args = calloc((size_t)p->n, sizeof *p->args);
    p->parts = aligned_alloc(_Alignof(tp_part), (size_t)p->n * sizeof *p->parts);
    if (!p->threads || !p->args || !p->parts) {
        free(p->threads), free(p->args), free(p->parts), free(p);
        return NULL;
    }
    // workers take no signals: SIGINT/SIGTERM go to the main thread, whose
    // blocking reads they must interrupt (signals.h)
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int rc = 0;
    for (int i = 1; i < p->n && !rc; i++) {
        p->args[i - 1] = (tp_worker){p, i};
        rc = pthread_create(&p->threads[i - 1], NULL, worker_main, &p->args[i - 1]);
        if (rc) p->n = i;  // the workers started so far are stopped and joined
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        tp_free(p);
        errno = rc;
        return NULL;
    }
    return p;
}

void tp_free(tpool *p) {
    if (!p) return;
    atomic_store(&p->stop, 1);
    ev_set(&p->gen, atomic_load(&p->gen.word) + 1);
    for (int i = 0; i < p->n - 1; i++) pthread_join(p->threads[i], NULL);
    free(p->threads);
    free(p->args);
    free(p->parts);
    free(p);
}

void tp_for(tpool *p, int64_t total, int64_t min, int64_t align, tp_body body, void *ctx) {
    if (total <= min || p->n == 1) {
        if (total > 0) body(ctx, 0, total);
        return;
    }
    int64_t unit = min < align ? align : (min + align - 1) & ~(align - 1);
    while ((total + unit - 1) / unit > (int64_t)UINT32_MAX) unit *= 2;
    const int64_t units = (total + unit - 1) / unit;
    for (int t = 0; t < p->n; t++)
        atomic_store_explicit(&p->parts[t].fb, (uint64_t)(units * t / p->n) | (uint64_t)(units * (t + 1) / p->n) << 32,
                              memory_order_relaxed);
    p->total = total, p->unit = unit, p->body = body, p->ctx = ctx;
    // published with gen; the caller runs the job, then closes it: a worker
    // that another process keeps off its core until then never joins it
    // (and is not waited for: its part went to the threads that ran)
    const uint32_t n = atomic_load_explicit(&p->gen.word, memory_order_relaxed) + 1;
    ev_set(&p->gen, n);
    job(p, 0);
    atomic_store(&p->closed, n);
    for (uint32_t v; (v = atomic_load(&p->running.word)) != 0;) ev_wait(&p->running, v);
}
