// threads.c — see threads.h.
//
// A job is published by bumping `gen`; workers wait for it to change, and
// each joins it unless the caller has already closed it (ran its own fn to
// the end: every item is claimed), so a worker that another process keeps
// off its core costs nothing; the caller waits for the workers that joined
// (`running`) to leave. Each wait spins for TP_SPIN_NS
// (the gaps between a decode step's sections are microseconds, and a futex
// wake-up costs tens of them), then sleeps on the word with futex(2). A
// sleeper first counts itself in `sleepers`, then re-reads the word; a waker
// changes the word, then reads the count (both sequentially consistent), so
// either the sleeper sees the change or the waker sees the sleeper, and a
// wake-up is never lost while the common case makes no system call.
#include "threads.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
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

struct tpool {
    int n;                    // threads, the caller included
    pthread_t *threads;       // [n - 1] workers
    tp_worker *args;          // [n - 1]
    tp_fn fn;                 // the current job (written before gen is bumped)
    void *ctx;
    tp_event gen;             // number of the current job
    _Atomic uint32_t closed;  // number of the last job workers may no longer join
    tp_event running;         // workers that joined the current job and have not left
    atomic_int stop;
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
        if ((int32_t)(atomic_load(&p->closed) - seen) < 0) p->fn(p->ctx, w->i, p->n);
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
    if (!p->threads || !p->args) {
        free(p->threads), free(p->args), free(p);
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
    free(p);
}

void tp_run(tpool *p, tp_fn fn, void *ctx) {
    if (p->n == 1) {
        fn(ctx, 0, 1);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    const uint32_t job = atomic_load_explicit(&p->gen.word, memory_order_relaxed) + 1;
    ev_set(&p->gen, job);  // publishes fn and ctx with it
    fn(ctx, 0, p->n);
    atomic_store(&p->closed, job);
    for (uint32_t v; (v = atomic_load(&p->running.word)) != 0;) ev_wait(&p->running, v);
}
