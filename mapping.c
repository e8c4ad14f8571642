// mapping.c — a model file mapped read-only, and its weights in 2 MiB pages.
//
// A decode step on the CPU streams every weight once. Mapped in 4 KiB pages,
// that is a TLB miss every 4 KiB, and the hardware prefetchers stop at every
// page boundary: decode of the 1B Q4_K_M ran 8-10% slower (2 threads, AVX-512)
// than from the same file mapped in 2 MiB pages, which llama.cpp's kernels
// and quill's otherwise share. Linux maps a file in 2 MiB pages where the page
// cache holds it in 2 MiB folios (a filesystem with large folios, ext4 or xfs
// on recent kernels) and the mapping is 2 MiB-aligned. Faults in a
// MADV_HUGEPAGE mapping read the file into such folios; a file that is cached
// in small ones (read with read(), or just written, as a download is) stays
// in them. map_populate then drops the file's pages from the cache and reads
// it again through the mapping: once, as later runs find the large folios.
#include "mapping.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

// p rounded down / up to a 2 MiB boundary.
static uintptr_t huge_down(const void *p) { return (uintptr_t)p & ~(uintptr_t)(HUGE_PAGE - 1); }
static uintptr_t huge_up(const void *p) { return huge_down((const uint8_t *)p + HUGE_PAGE - 1); }

int map_open(file_map *m, const char *path, char *err) {
    memset(m, 0, sizeof *m);
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return errf(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        const int e = errno;
        close(fd);
        return errf(err, "%s: cannot stat: %s", path, strerror(e));
    }
    const char *bad = S_ISDIR(st.st_mode)    ? "is a directory, expected a GGUF file"
                      : !S_ISREG(st.st_mode) ? "is not a regular file"
                      : st.st_size == 0      ? "empty file (0 bytes), expected a GGUF file"
                                             : NULL;
    if (bad) {
        close(fd);
        return errf(err, "%s: %s", path, bad);
    }
    // reserve 2 MiB more than the file, map the file at the first aligned
    // address inside, and give back the rest
    const size_t size = (size_t)st.st_size, page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t span = (size + page - 1) / page * page;
    uint8_t *r = size > SIZE_MAX / 2 ? (errno = ENOMEM, MAP_FAILED)
                                     : mmap(NULL, span + HUGE_PAGE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    uint8_t *a = r == MAP_FAILED ? MAP_FAILED : (uint8_t *)huge_up(r);
    if (a != MAP_FAILED && mmap(a, size, PROT_READ, MAP_PRIVATE | MAP_FIXED, fd, 0) == MAP_FAILED) {
        const int e = errno;
        munmap(r, span + HUGE_PAGE);
        errno = e, a = MAP_FAILED;
    }
    if (a == MAP_FAILED) {
        const int e = errno;
        close(fd);
        return errf(err, "%s: cannot mmap %zu bytes: %s", path, size, strerror(e));
    }
    if (a > r) munmap(r, (size_t)(a - r));
    munmap(a + span, (size_t)(r + HUGE_PAGE - a));  // r + span + HUGE_PAGE - (a + span)
    *m = (file_map){.base = a, .size = size, .fd = fd};
    return 0;
}

void map_close(file_map *m) {
    if (!m || !m->base) return;
    munmap((void *)m->base, m->size);
    close(m->fd);
    memset(m, 0, sizeof *m);
}

// Faults every page of [p, p + n) in.
static void fault_in(const uint8_t *p, size_t n) {
    if (madvise((void *)p, n, MADV_POPULATE_READ) == 0) return;
    for (size_t i = 0; i < n; i += 4096) (void)*(const volatile uint8_t *)(p + i);  // kernels before 5.14
}

// Bytes of [p, p + n) mapped in 2 MiB pages (FilePmdMapped of the mappings
// /proc/self/smaps lists there), or -1 without /proc.
static long long pmd_bytes(const uint8_t *p, size_t n) {
    FILE *f = fopen("/proc/self/smaps", "re");
    if (!f) return -1;
    char line[512];
    long long total = 0;
    int inside = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        long long kb;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            inside = lo < (uintptr_t)(p + n) && hi > (uintptr_t)p;
        else if (inside && sscanf(line, "FilePmdMapped: %lld kB", &kb) == 1)
            total += kb * 1024;
    }
    fclose(f);
    return total;
}

// Maps [off, off + n) of the file again in place (dropping this process's
// pages of it), drops its pages from the page cache where nobody else maps
// them, and faults it in anew, in 2 MiB folios where the filesystem can. A
// MAP_FIXED mmap that fails (out of memory) may have unmapped the range: an
// error then, as the caller cannot read it.
static int reread(file_map *m, size_t off, size_t n, char *err) {
    uint8_t *p = (uint8_t *)m->base + off;
    if (mmap(p, n, PROT_READ, MAP_PRIVATE | MAP_FIXED, m->fd, (off_t)off) == MAP_FAILED)
        return errf(err, "cannot map the file again: %s", strerror(errno));
    posix_fadvise(m->fd, (off_t)off, (off_t)n, POSIX_FADV_DONTNEED);
    madvise(p, n, MADV_HUGEPAGE);
    fault_in(p, n);
    return 0;
}

int map_populate(file_map *m, long long *huge, char *err) {
    *huge = -1;
    if (!m->base) return 0;
    uint8_t *p = (uint8_t *)m->base;
    madvise(p, m->size, MADV_HUGEPAGE);  // may fail (no THP): the pages stay small
    fault_in(p, m->size);
    const long long can = (long long)(m->size / HUGE_PAGE * HUGE_PAGE);
    *huge = pmd_bytes(p, m->size);
    if (*huge < 0 || can < (long long)(4 * HUGE_PAGE) || *huge >= can / 10 * 9) return 0;
    // Whether the filesystem caches in 2 MiB folios at all: some of the file
    // already is, or else the last whole 2 MiB, read again, comes back as one
    // (none of the file was in 2 MiB pages, so that part was not either).
    if (*huge == 0) {
        if (reread(m, (size_t)can - HUGE_PAGE, HUGE_PAGE, err)) return -1;
        if ((*huge = pmd_bytes(p, m->size)) <= 0) return 0;
    }
    if (reread(m, 0, m->size, err)) return -1;
    *huge = pmd_bytes(p, m->size);
    return 0;
}

void *map_anon(size_t n) {
    const size_t len = (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    uint8_t *raw = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return NULL;
    uint8_t *p = (uint8_t *)huge_up(raw);
    if (p > raw) munmap(raw, (size_t)(p - raw));
    if (raw + HUGE_PAGE > p) munmap(p + len, (size_t)(raw + HUGE_PAGE - p));
    madvise(p, len, MADV_HUGEPAGE);  // may fail (no THP): the pages stay small
    return p;
}

void map_anon_free(void *p, size_t n) {
    if (p) munmap(p, (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1));
}

void map_drop(const void *p, size_t n) {
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const uintptr_t a = ((uintptr_t)p + page - 1) & ~(uintptr_t)(page - 1), e = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
    if (e > a) madvise((void *)a, e - a, MADV_DONTNEED);
}
