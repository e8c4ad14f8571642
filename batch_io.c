// batch_io.c — record keys and key sets, the output writer and the resume
// scan of `quill batch` (batch_int.h).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch_int.h"
#include "util.h"

// ---- keys -----------------------------------------------------------------

static uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

batch_key batch_key_of(int kind, const char *bytes, size_t n) {
    uint64_t fnv = 0xcbf29ce484222325ull, h = mix64((uint64_t)kind);
    for (size_t i = 0; i < n; i++) fnv = (fnv ^ (uint8_t)bytes[i]) * 0x100000001b3ull;
    for (size_t i = 0; i < n; i += 8) {  // 8 bytes at a time, the last word zero-padded
        uint64_t w = 0;
        memcpy(&w, bytes + i, n - i < 8 ? n - i : 8);
        h = mix64(h ^ w) + 0x9e3779b97f4a7c15ull;
    }
    h = mix64(h ^ n);
    return (batch_key){fnv, h | 1};  // check != 0: a used slot
}

batch_key batch_key_line(int line) {
    char b[16];
    return batch_key_of(KEY_LINE, b, (size_t)snprintf(b, sizeof b, "%d", line));
}

static size_t slot_of(const keyset *s, batch_key k) {
    size_t i = (size_t)(k.check ^ k.shard) & (s->cap - 1);
    while (s->slots[i].check && (s->slots[i].check != k.check || s->slots[i].shard != k.shard))
        i = (i + 1) & (s->cap - 1);
    return i;
}

int keyset_has(const keyset *s, batch_key k) { return s->cap && s->slots[slot_of(s, k)].check; }

int keyset_add(keyset *s, batch_key k) {
    if (2 * (s->n + 1) > s->cap) {  // at most half full
        keyset g = {.cap = s->cap ? 2 * s->cap : 1024};
        if (!(g.slots = calloc(g.cap, sizeof *g.slots))) return -1;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slots[i].check) g.slots[slot_of(&g, s->slots[i])] = s->slots[i], g.n++;
        free(s->slots);
        *s = g;
    }
    size_t i = slot_of(s, k);
    if (s->slots[i].check) return 0;
    s->slots[i] = k;
    s->n++;
    return 1;
}

void keyset_free(keyset *s) {
    free(s->slots);
    *s = (keyset){0};
}

// ---- the output -------------------------------------------------------------

int out_write(batch_out *out, const char *line, size_t len, char *err) {
    if (out->closed) return 0;
    for (size_t off = 0; off < len;) {
        ssize_t w = write(out->fd, line + off, len - off);
        if (w > 0) { off += (size_t)w; continue; }
        if (w < 0 && errno == EINTR) continue;  // a signal: the line is finished all the same
        if (w < 0 && errno == EPIPE) return out->closed = 1, 0;
        return errf(err, "cannot write the output: %s", w < 0 ? strerror(errno) : "no progress");
    }
    const double t = now_sec();
    if (out->is_file && t - out->t_sync >= 1.0) {
        out->t_sync = t;
        return out_sync(out, err);
    }
    return 0;
}

int out_sync(batch_out *out, char *err) {
    if (!out->is_file || out->closed || !fdatasync(out->fd)) return 0;
    return errno == EINVAL || errno == EROFS ? 0 : errf(err, "cannot sync the output: %s", strerror(errno));
}

// ---- the resume scan ----------------------------------------------------------

#define SCAN_MAX_LINE ((size_t)1 << 30)  // an output line longer than this is not ours

// The key of one output line (without its newline): an error record by its
// line ({"line": N, "error"} or OpenAI's {"error": {"line": N}}), a result
// by its id (OpenAI's "custom_id", quill's "id"). 0, or -1 with msg.
static int line_key(const char *s, size_t n, batch_key *k, int *by_line, char *msg) {
    json_error_t je;
    json_t *o = json_loadb(s, n, 0, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return errf(msg, "not a JSON object%s%s", o ? "" : ": ", o ? "" : je.text);
    }
    json_t *err = json_object_get(o, "error"), *line = json_object_get(o, "line");
    if (json_is_object(err)) line = json_object_get(err, "line");
    json_t *id = json_object_get(o, json_object_get(o, "custom_id") ? "custom_id" : "id");
    int rc = 0;
    *by_line = err && !json_is_null(err);
    if (*by_line && json_is_integer(line) && json_integer_value(line) > 0 && json_integer_value(line) <= INT32_MAX)
        *k = batch_key_line((int)json_integer_value(line));
    else if (!*by_line && json_is_string(id))
        *k = batch_key_of(KEY_ID, json_string_value(id), json_string_length(id));
    else if (!*by_line && json_is_integer(id)) {
        char b[24];
        *k = batch_key_of(KEY_ID, b, (size_t)snprintf(b, sizeof b, "%lld", (long long)json_integer_value(id)));
    } else
        rc = errf(msg, *by_line ? "an error record without its input line" : "a record without an id");
    json_decref(o);
    return rc;
}

int batch_blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

// Reads fd from the start in blocks, adding each whole line's key to rs.
// Returns the offset just past the last newline, or -1 with err.
static long scan_lines(int fd, resume_set *rs, char *err) {
    size_t cap = 1 << 16, len = 0;  // buf[0..len): a line not yet ended
    char *buf = malloc(cap), msg[ERR_LEN];
    long off = 0, line_no = 0;
    if (!buf) return errf(err, "out of memory");
    for (;;) {
        if (len == cap) {
            char *b = cap >= SCAN_MAX_LINE ? NULL : realloc(buf, 2 * cap);
            if (!b) return free(buf), errf(err, "line %ld is longer than %zu bytes", line_no + 1, SCAN_MAX_LINE);
            buf = b, cap *= 2;
        }
        ssize_t r = pread(fd, buf + len, cap - len, off + (long)len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return free(buf), errf(err, "cannot read it: %s", strerror(errno));
        if (r == 0) break;
        size_t start = 0, end = len + (size_t)r;
        for (char *nl; (nl = memchr(buf + len, '\n', end - len)); len = (size_t)(nl - buf) + 1, start = len) {
            batch_key k;
            int by_line = 0;
            line_no++;
            if (batch_blank(buf + start, (size_t)(nl - buf) - start)) continue;
            if (line_key(buf + start, (size_t)(nl - buf) - start, &k, &by_line, msg))
                return free(buf), errf(err, "line %ld: %s", line_no, msg);
            if (keyset_add(by_line ? &rs->lines : &rs->ids, k) < 0) return free(buf), errf(err, "out of memory");
            rs->n++;
        }
        len = end;
        if (start) {  // keep the unfinished line at the start of buf
            memmove(buf, buf + start, len - start);
            off += (long)start, len -= start;
        }
    }
    free(buf);
    rs->torn = len > 0;
    return off;
}

int resume_scan(int fd, resume_set *rs, char *err) {
    *rs = (resume_set){0};
    struct stat st;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) return errf(err, "--resume needs -o FILE, a regular file");
    long end = scan_lines(fd, rs, err);
    if (end < 0) return -1;
    if (rs->torn && ftruncate(fd, end))  // a line cut short by a kill: it is run again
        return errf(err, "cannot cut its partial last line: %s", strerror(errno));
    return 0;
}

void resume_free(resume_set *rs) {
    keyset_free(&rs->ids);
    keyset_free(&rs->lines);
}
