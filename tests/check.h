// tests/check.h — the failure tally the C tests share. CHECK(cond, fmt, ...)
// and fail(fmt, ...) print one line to stderr and count it in n_fail; a test
// exits non-zero when n_fail is not 0.
#ifndef QUILL_TESTS_CHECK_H
#define QUILL_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>

static int n_fail;  // failures so far (tests only; the library has no globals)

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

#endif
