// tests/test_threads.c — tp_for (threads.h): every item is handed out once,
// in chunks of the promised shape, on pools of 1 to 8 threads; and a thread
// that stalls inside its first chunk holds no more than that chunk: the
// others take the rest of its part.
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "check.h"
#include "threads.h"

typedef struct {
    int64_t total, min, align;
    _Atomic unsigned char *seen;  // [total]: times each item was handed out
    atomic_int bad_shape;
} cover_job;

static void cover(void *ctx, int64_t i0, int64_t i1) {
    cover_job *j = ctx;
    if (i0 < 0 || i1 > j->total || i0 >= i1 || i0 % j->align || (i1 - i0 < j->min && i1 != j->total))
        atomic_fetch_add(&j->bad_shape, 1);
    for (int64_t i = i0 > 0 ? i0 : 0; i < i1 && i < j->total; i++) atomic_fetch_add(&j->seen[i], 1);
}

static void check_cover(tpool *pool, int n, int64_t total, int64_t min, int64_t align) {
    cover_job j = {total, min, align, xmalloc((size_t)total + 1), 0};
    tp_for(pool, total, min, align, cover, &j);
    int64_t wrong = 0;
    for (int64_t i = 0; i < total; i++) wrong += j.seen[i] != 1;
    CHECK(!wrong && !j.bad_shape, "%d threads, %lld items, min %lld, align %lld: %lld items not handed out once, "
          "%d chunks of the wrong shape", n, (long long)total, (long long)min, (long long)align, (long long)wrong,
          j.bad_shape);
    free((void *)j.seen);
}

// Items [0, total): the thread that takes item 0 (the caller: the front of
// its part) waits there until every other item is done (or 20 s pass).
typedef struct {
    int64_t total;
    atomic_llong done;   // items done by the threads that did not stall
    atomic_llong first;  // the end of the stalled chunk
    atomic_int other;    // chunks the stalled thread took after its first
    int timed_out;
} stall_job;

static _Thread_local int stalled;

static void stall(void *ctx, int64_t i0, int64_t i1) {
    stall_job *j = ctx;
    if (i0 != 0) {
        if (stalled) atomic_fetch_add(&j->other, 1);
        else atomic_fetch_add(&j->done, i1 - i0);
        return;
    }
    stalled = 1;
    atomic_store(&j->first, i1);
    const struct timespec ms = {0, 1000000};
    int waited = 0;
    while (atomic_load(&j->done) < j->total - i1 && waited < 20000) nanosleep(&ms, NULL), waited++;
    j->timed_out = waited >= 20000;
}

int main(void) {
    static const int64_t totals[] = {0, 1, 5, 15, 16, 17, 63, 64, 65, 1000, 12345, 1 << 20};
    static const int64_t shapes[][2] = {{1, 1}, {4, 1}, {16, 16}, {100, 64}, {32768, 64}};  // {min, align}
    for (int n = 1; n <= 8; n++) {
        tpool *pool = tp_create(n);
        if (!pool) {
            fprintf(stderr, "test_threads: cannot start %d threads\n", n);
            return 2;
        }
        for (size_t t = 0; t < sizeof totals / sizeof totals[0]; t++)
            for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
                check_cover(pool, n, totals[t], shapes[s][0], shapes[s][1]);
        for (int rep = 0; rep < 200; rep++) check_cover(pool, n, 4096 + rep, 16, 16);  // back to back
        tp_free(pool);
    }
    // A stalled thread: 2 threads, 1000 items; its first chunk is at most a
    // quarter of its part (500: 125, less where the other thread came first
    // and took the back of it), and the other thread does everything else.
    tpool *pool = tp_create(2);
    if (!pool) {
        fprintf(stderr, "test_threads: cannot start 2 threads\n");
        return 2;
    }
    stall_job j = {.total = 1000};
    tp_for(pool, j.total, 1, 1, stall, &j);
    CHECK(!j.timed_out, "the worker did not finish the items in 20 s while the caller stalled");
    const long long first = atomic_load(&j.first), done = atomic_load(&j.done);
    CHECK(first >= 1 && first <= 125 && !atomic_load(&j.other) && done == j.total - first,
          "the stalled thread's first chunk ended at %lld (at most 125), it took %d more, the other did %lld of %lld",
          first, atomic_load(&j.other), done, (long long)j.total - first);
    tp_free(pool);
    if (n_fail) return 1;
    printf("test_threads: ok\n");
    return 0;
}
