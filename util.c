// util.c — see util.h.
#include "util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int errf(char *err, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, ERR_LEN, fmt, ap);
        va_end(ap);
    }
    return -1;
}

double now_sec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

long utf8_invalid_at(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return (long)i;
        uint32_t cp = len == 1 ? c : c & (0x7f >> len);
        for (int k = 1; k < len; k++) {
            if ((u[i + k] & 0xc0) != 0x80) return (long)i;
            cp = cp << 6 | (u[i + k] & 0x3f);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return (long)i;
        i += len;
    }
    return -1;
}

size_t mem_available(void) {
    size_t avail = SIZE_MAX;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[128];
    unsigned long long kb;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
            avail = kb < SIZE_MAX / 1024 ? (size_t)kb * 1024 : SIZE_MAX;
            break;
        }
    if (f) fclose(f);
    const int res[2] = {RLIMIT_AS, RLIMIT_DATA};
    for (int i = 0; i < 2; i++) {
        struct rlimit rl;
        if (!getrlimit(res[i], &rl) && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < avail) avail = rl.rlim_cur;
    }
    return avail;
}

static int write_all(int fd, const void *p, size_t len) {
    for (const uint8_t *b = p; len;) {
        ssize_t w = write(fd, b, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        b += w, len -= (size_t)w;
    }
    return 0;
}

// fsync of the directory holding path, so the rename itself is durable (best effort).
static void sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    if (!dir) return;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) fsync(fd), close(fd);
    free(dir);
}

// A file for path's new contents in path's directory: unnamed (O_TMPFILE)
// where the file system allows, so a crash before it is linked leaves
// nothing behind; else "path.tmp-XXXXXX". *named: the name given (malloc'd),
// NULL for an unnamed file. -1 with errno on failure.
static int open_temp(const char *path, unsigned mode, char **named) {
    *named = NULL;
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    int fd = dir ? open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, mode & 0777) : -1;
    free(dir);
    if (fd >= 0) return fd;
    size_t n = strlen(path) + 16;
    if (!(*named = malloc(n))) return errno = ENOMEM, -1;
    snprintf(*named, n, "%s.tmp-XXXXXX", path);
    fd = mkostemp(*named, O_CLOEXEC);  // mode 0600: the caller's mode is set with fchmod
    const mode_t mask = umask(0);
    umask(mask);
    if (fd >= 0 && (mode & ~mask & 0777) != 0600) fchmod(fd, mode & ~mask & 0777);
    if (fd < 0) free(*named), *named = NULL;
    return fd;
}

// Gives an unnamed file (open_temp) the name "path.tmp-PID", to be renamed
// over path (linkat cannot replace a file). 0, or -1 with errno.
static int link_temp(int fd, const char *path, char **named) {
    size_t n = strlen(path) + 32;
    if (!(*named = malloc(n))) return errno = ENOMEM, -1;
    snprintf(*named, n, "%s.tmp-%ld", path, (long)getpid());
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    unlink(*named);  // left by a dead process that had this pid
    return linkat(AT_FDCWD, proc, AT_FDCWD, *named, AT_SYMLINK_FOLLOW);
}

// Writes path in place (open with O_TRUNC, as fopen "w" does): for a path that
// is no regular file, such as /dev/stdout (a symlink into /proc) or a FIFO,
// which a rename would replace instead of writing to.
static int write_in_place(const char *path, const void *const *parts, const size_t *lens, int n, unsigned mode,
                          char *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 0777);
    int ok = fd >= 0;
    for (int i = 0; i < n && ok; i++) ok = write_all(fd, parts[i], lens[i]) == 0;
    int e = errno;
    if (fd >= 0 && close(fd) && ok) ok = 0, e = errno;
    return ok ? 0 : errf(err, "cannot write: %s", strerror(e));
}

int write_file_atomic(const char *path, const void *const *parts, const size_t *lens, int n, unsigned mode,
                      char *err) {
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) return write_in_place(path, parts, lens, n, mode, err);
    char *tmp;
    int fd = open_temp(path, mode, &tmp);
    if (fd < 0) return errf(err, "cannot create a temp file beside it: %s", strerror(errno));
    int ok = 1;
    for (int i = 0; i < n && ok; i++) ok = write_all(fd, parts[i], lens[i]) == 0;
    if (ok) ok = fsync(fd) == 0;
    if (ok && !tmp) ok = link_temp(fd, path, &tmp) == 0;
    int e = errno;
    if (close(fd) && ok) ok = 0, e = errno;
    if (ok && rename(tmp, path)) ok = 0, e = errno;
    if (!ok) {
        if (tmp) unlink(tmp);
        free(tmp);
        return errf(err, "cannot write: %s", strerror(e));
    }
    free(tmp);
    sync_dir(path);
    return 0;
}

char *utf8_sanitized(const char *s, size_t n, size_t *len) {
    char *out = malloc(3 * n + 1), *p = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n;) {
        long bad = utf8_invalid_at(s + i, n - i);
        size_t ok = bad < 0 ? n - i : (size_t)bad;
        memcpy(p, s + i, ok);
        p += ok, i += ok;
        if (i < n) memcpy(p, "\xEF\xBF\xBD", 3), p += 3, i++;
    }
    *p = 0;
    if (len) *len = (size_t)(p - out);
    return out;
}
