// tests/check.h — what the C tests share: the failure tally (CHECK(cond,
// fmt, ...) and fail(fmt, ...) print one line to stderr and count it in
// n_fail; a test exits non-zero when n_fail is not 0), an allocator that
// exits on failure, and a deterministic generator so failures reproduce.
#ifndef QUILL_TESTS_CHECK_H
#define QUILL_TESTS_CHECK_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

__attribute__((unused)) static int n_fail;  // failures so far (tests only; the library has no globals)

__attribute__((format(printf, 1, 2), unused)) static void fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    n_fail++;
}

#define CHECK(cond, ...)                                                             \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fail(__VA_ARGS__);                                                       \
        }                                                                            \
    } while (0)

// Zeroed memory, or exit 2.
__attribute__((unused)) static void *xmalloc(size_t n) {
    void *p = calloc(1, n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

// xorshift64: a deterministic stream of 64-bit values from a nonzero seed.
typedef struct { uint64_t s; } rng_t;
__attribute__((unused)) static uint64_t rnd(rng_t *r) {
    r->s ^= r->s << 13;
    r->s ^= r->s >> 7;
    r->s ^= r->s << 17;
    return r->s;
}

#endif
