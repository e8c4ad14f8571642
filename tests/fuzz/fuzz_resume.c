// tests/fuzz/fuzz_resume.c — `quill batch --resume`'s scan of an existing
// output file (batch_io.c's resume_scan), over hostile files: torn lines,
// invalid JSON, records without ids, NUL bytes, long lines.
//
// Input: the output file as it is. Besides sanitizer findings it checks
// what the scan promises: it fails (leaving the file as it was) or it takes
// one key per whole non-blank line and cuts the file right after its last
// newline, saying torn exactly when something followed that newline.
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "batch_int.h"
#include "fuzz.h"
#include "util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    return 0;
}

static int blank(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[64], err[ERR_LEN];
    int fd = fuzz_file(data, size, path);
    resume_set rs;
    int rc = resume_scan(fd, &rs, err);
    const off_t len = lseek(fd, 0, SEEK_END);
    const uint8_t *nl = size ? memrchr(data, '\n', size) : NULL;
    const size_t keep = nl ? (size_t)(nl - data) + 1 : 0;
    long lines = 0;
    for (size_t start = 0; start < keep;) {
        const uint8_t *e = memchr(data + start, '\n', keep - start);
        lines += !blank(data + start, (size_t)(e - data) - start);
        start = (size_t)(e - data) + 1;
    }
    if (rc && (size_t)len != size) {
        fprintf(stderr, "a failed scan changed the file (%zu -> %lld bytes): %s\n", size, (long long)len, err);
        abort();
    }
    if (!rc && ((size_t)len != keep || rs.torn != (keep < size) || rs.n != lines ||
                (long)(rs.ids.n + rs.lines.n) > rs.n)) {
        fprintf(stderr, "scan: %lld bytes kept (want %zu), torn %d, %ld records (want %ld), %zu + %zu keys\n",
                (long long)len, keep, rs.torn, rs.n, lines, rs.ids.n, rs.lines.n);
        abort();
    }
    resume_free(&rs);
    close(fd);
    return 0;
}
