// tests/fuzz/fuzz.h — what the libFuzzer targets (tests/fuzz/fuzz_*.c) share.
//
// A target is one file, tests/fuzz/fuzz_NAME.c, that defines
// LLVMFuzzerTestOneInput over quill's real code path for one parser (and,
// when it needs set-up, LLVMFuzzerInitialize), plus its seed corpus in
// tests/fuzz/NAME/seed/ and its regression inputs in tests/fuzz/NAME/crash/.
// The Makefile builds every fuzz_*.c it finds and tests/fuzz/run.sh runs
// each one, so adding a target is adding those files.
//
// Targets run from the repository root; ../shared is $SHARED when set.
// Everything a target keeps between inputs (a loaded model, vocabularies)
// is built once in LLVMFuzzerInitialize, read-only afterwards.
#ifndef QUILL_FUZZ_H
#define QUILL_FUZZ_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#define FUZZ_MEM_LIMIT ((size_t)256 << 20)  // model_opts.mem_limit: libFuzzer's RSS limit is 2 GB

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

// Stops the fuzzer on a broken set-up (a missing file): not a finding.
__attribute__((unused, noreturn, format(printf, 1, 2))) static void fuzz_die(const char *fmt, ...);
static void fuzz_die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("fuzz set-up: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

// A path under $SHARED (default ../shared).
__attribute__((unused)) static const char *fuzz_shared(const char *rel, char *buf, size_t cap) {
    const char *shared = getenv("SHARED") ? getenv("SHARED") : "../shared";
    snprintf(buf, cap, "%s/%s", shared, rel);
    return buf;
}

// The input as a file: an anonymous memory file holding data, reachable at
// path (/proc/self/fd/N), so the code under test opens and maps it as it
// would any file. Returns the descriptor (close it afterwards).
__attribute__((unused)) static int fuzz_file(const uint8_t *data, size_t size, char path[64]) {
    int fd = memfd_create("fuzz", MFD_CLOEXEC);
    if (fd < 0) fuzz_die("memfd_create failed");
    for (size_t off = 0; off < size;) {
        ssize_t w = write(fd, data + off, size - off);
        if (w <= 0) fuzz_die("cannot write the memory file");
        off += (size_t)w;
    }
    snprintf(path, 64, "/proc/self/fd/%d", fd);
    return fd;
}

#endif
