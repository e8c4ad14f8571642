// util.h — small shared helpers: error buffers and checked arithmetic.
//
// Library code never exits: a failing function returns -1 (or NULL) and writes
// one line into the caller's error buffer, naming the file, key or tensor and
// the expected vs actual value. Only main.c prints it and exits.
#ifndef QUILL_UTIL_H
#define QUILL_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define ERR_LEN 512  // size of every error buffer passed as `char *err`

// Formats a message into err (printf-style) and returns -1, so a failure
// path reads `return errf(err, "tensor %s: expected %d dims, got %d", ...)`.
int errf(char *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// A float's bits and back (the same 32 bits, no conversion).
static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

// Overflow-checked size arithmetic: return 0 and set *out, or -1 on overflow.
static inline int mul_ok(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_mul_overflow(a, b, out) ? -1 : 0; }
static inline int add_ok(uint64_t a, uint64_t b, uint64_t *out) { return __builtin_add_overflow(a, b, out) ? -1 : 0; }

// Index of the first byte of s[0..n) that is not part of a valid UTF-8
// sequence (overlong forms, surrogates and code points past U+10FFFF are
// invalid), or -1 when all of it is valid.
long utf8_invalid_at(const char *s, size_t n);

// A NUL-terminated malloc'd copy of s[0..n) with each byte that is not part
// of valid UTF-8 replaced by U+FFFD (JSON strings must be UTF-8); *len (when
// not NULL) gets its length. NULL when out of memory.
char *utf8_sanitized(const char *s, size_t n, size_t *len);

// Bytes of memory this process can still take: the kernel's MemAvailable
// (free memory plus what can be reclaimed), bounded by RLIMIT_AS and
// RLIMIT_DATA when they are set. SIZE_MAX when it cannot tell.
size_t mem_available(void);

// Writes parts[0..n) (lens[i] bytes each) to path (given `mode` less the
// umask) through a temp file beside it, fsync, rename over path and fsync of
// the directory: a crash or kill at any instant, or a full disk, leaves the
// old file or the whole new one, never a mix. The temp file is unnamed until
// it is whole (O_TMPFILE, linked as "path.tmp-PID" just before the rename),
// so a kill leaves no debris, except in that instant or where the file system
// lacks O_TMPFILE ("path.tmp-XXXXXX" from the start). A path that exists
// but is no regular file (a symlink such as /dev/stdout, a FIFO, a device)
// is written in place instead: there is nothing to replace. 0, or -1 with the
// reason in err (without the path; the temp file removed).
int write_file_atomic(const char *path, const void *const *parts, const size_t *lens, int n, unsigned mode,
                      char *err);

// Monotonic wall clock in seconds.
double now_sec(void);

#endif
