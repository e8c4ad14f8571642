// gguf.c — see gguf.h. A pure, bounds-checked parser over a byte buffer, plus
// gguf_open, which maps a file (mapping.c) and hands it to the parser.
//
// Nothing read from the buffer is trusted: every length and count is checked
// against the bytes that remain before anything is read or allocated for it,
// and all size arithmetic is overflow-checked. Integers are assembled byte by
// byte, so the parser is independent of the host's byte order.
#include "gguf.h"

#include "quant.h"
#include "util.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GGUF_MAGIC 0x46554747u  // "GGUF" read as a little-endian u32
#define GGUF_HEADER_BYTES 24    // magic, version, n_tensors, n_kv
#define GGUF_DEFAULT_ALIGNMENT 32
// The fewest bytes one entry can occupy, used to bound the declared counts by
// the bytes that remain before anything is allocated for them.
#define GGUF_MIN_KV_BYTES 13      // u64 key length + u32 value type + a 1-byte value
#define GGUF_MIN_TENSOR_BYTES 32  // u64 name length + u32 n_dims + 1 u64 dim + u32 type + u64 offset
#define GGUF_SHOW_LEN 96          // buffer for a name quoted in a message

// Bytes of one scalar value, by enum gguf_vtype (0 for string and array).
static const uint8_t GGUF_VT_SIZE[GGUF_FLOAT64 + 1] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

// A cursor over the buffer. ctx names what is being read ("key 'general.name'",
// "tensor 'output.weight'") so that every failure message says where it happened.
typedef struct {
    const uint8_t *buf;
    uint64_t size;
    uint64_t pos;
    char ctx[160];
    char *err;
} gguf_rd;

const char *gguf_vtype_name(uint32_t t) {
    static const char *const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    return t <= GGUF_FLOAT64 ? names[t] : "unknown type";
}

// Copies up to 80 bytes of s into out with control bytes shown as '?', so a
// hostile name can neither flood nor break the one-line error message.
static const char *gguf_show(gguf_str s, char out[GGUF_SHOW_LEN]) {
    uint64_t n = s.len < 80 ? s.len : 80;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        out[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    strcpy(out + n, s.len > n ? "..." : "");
    return out;
}

// Writes "ctx: message" into r->err and returns -1.
__attribute__((format(printf, 2, 3))) static int rd_fail(gguf_rd *r, const char *fmt, ...) {
    char msg[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (r->ctx[0]) return errf(r->err, "%s: %s", r->ctx, msg);
    return errf(r->err, "%s", msg);
}

// Returns the next n bytes and advances, or NULL (err set) if fewer remain.
static const uint8_t *rd_take(gguf_rd *r, uint64_t n, const char *what) {
    if (n > r->size - r->pos) {
        rd_fail(r, "%s (%llu bytes at offset %llu) runs past the end of the file (%llu bytes left)",
                what, (unsigned long long)n, (unsigned long long)r->pos,
                (unsigned long long)(r->size - r->pos));
        return NULL;
    }
    const uint8_t *p = r->buf + r->pos;
    r->pos += n;
    return p;
}

static uint64_t gguf_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static int rd_u32(gguf_rd *r, uint32_t *v, const char *what) {
    const uint8_t *p = rd_take(r, 4, what);
    if (!p) return -1;
    *v = (uint32_t)gguf_le(p, 4);
    return 0;
}

static int rd_u64(gguf_rd *r, uint64_t *v, const char *what) {
    const uint8_t *p = rd_take(r, 8, what);
    if (!p) return -1;
    *v = gguf_le(p, 8);
    return 0;
}

// string = u64 length + bytes.
static int rd_str(gguf_rd *r, gguf_str *s, const char *what) {
    uint64_t len;
    if (rd_u64(r, &len, what)) return -1;
    const uint8_t *p = rd_take(r, len, what);
    if (!p) return -1;
    s->ptr = (const char *)p;
    s->len = len;
    return 0;
}

// Widens the scalar at p (already bounds-checked) into kv->u, kv->i or kv->f.
static int decode_scalar(gguf_rd *r, uint32_t t, const uint8_t *p, gguf_kv *kv) {
    uint64_t bits = gguf_le(p, GGUF_VT_SIZE[t]);
    switch (t) {
    case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64:
        kv->u = bits;
        return 0;
    case GGUF_BOOL:
        if (bits > 1) return rd_fail(r, "bool value %llu, expected 0 or 1", (unsigned long long)bits);
        kv->u = bits;
        return 0;
    case GGUF_INT8: kv->i = (int8_t)bits; return 0;
    case GGUF_INT16: kv->i = (int16_t)bits; return 0;
    case GGUF_INT32: kv->i = (int32_t)bits; return 0;
    case GGUF_INT64: kv->i = (int64_t)bits; return 0;
    case GGUF_FLOAT32: {
        uint32_t b32 = (uint32_t)bits;
        float x;
        memcpy(&x, &b32, sizeof x);
        kv->f = x;
        return 0;
    }
    case GGUF_FLOAT64: memcpy(&kv->f, &bits, sizeof kv->f); return 0;
    default: return rd_fail(r, "unknown value type %u", t);
    }
}

// Array of strings: each element is at least its u64 length, which bounds the
// count before the (linear) walk that checks every length.
static int rd_str_array(gguf_rd *r, uint64_t n) {
    if (n > (r->size - r->pos) / 8)
        return rd_fail(r, "array of %llu strings is too large: only %llu bytes left",
                       (unsigned long long)n, (unsigned long long)(r->size - r->pos));
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s;
        if (rd_str(r, &s, "array string")) return -1;
    }
    return 0;
}

// array = u32 element type | u64 count | elements.
static int rd_array(gguf_rd *r, gguf_kv *kv) {
    if (rd_u32(r, &kv->arr_type, "array element type")) return -1;
    if (kv->arr_type == GGUF_ARRAY) return rd_fail(r, "nested arrays are not supported");
    if (kv->arr_type > GGUF_FLOAT64) return rd_fail(r, "unknown array element type %u", kv->arr_type);
    if (rd_u64(r, &kv->arr_n, "array count")) return -1;
    kv->arr_data = r->buf + r->pos;
    if (kv->arr_type == GGUF_STRING) return rd_str_array(r, kv->arr_n);
    uint64_t nbytes;
    if (mul_ok(kv->arr_n, GGUF_VT_SIZE[kv->arr_type], &nbytes))
        return rd_fail(r, "array of %llu %s is too large", (unsigned long long)kv->arr_n,
                       gguf_vtype_name(kv->arr_type));
    const uint8_t *p = rd_take(r, nbytes, "array data");
    if (!p) return -1;
    if (kv->arr_type == GGUF_BOOL)
        for (uint64_t i = 0; i < nbytes; i++)
            if (p[i] > 1) return rd_fail(r, "bool element %llu is %u, expected 0 or 1", (unsigned long long)i, p[i]);
    return 0;
}

// kv = string key | u32 value type | value.
static int rd_kv(gguf_rd *r, uint64_t i, gguf_kv *kv) {
    char show[GGUF_SHOW_LEN];
    snprintf(r->ctx, sizeof r->ctx, "key #%llu", (unsigned long long)i);
    if (rd_str(r, &kv->key, "key name")) return -1;
    snprintf(r->ctx, sizeof r->ctx, "key '%s'", gguf_show(kv->key, show));
    if (rd_u32(r, &kv->type, "value type")) return -1;
    if (kv->type == GGUF_STRING) return rd_str(r, &kv->s, "string value");
    if (kv->type == GGUF_ARRAY) return rd_array(r, kv);
    if (kv->type > GGUF_FLOAT64) return rd_fail(r, "unknown value type %u", kv->type);
    const uint8_t *p = rd_take(r, GGUF_VT_SIZE[kv->type], gguf_vtype_name(kv->type));
    return p ? decode_scalar(r, kv->type, p, kv) : -1;
}

// Grows *arr (elements of elem bytes, zero-filled) so that index `need` fits,
// doubling up to max. Growing as entries are actually parsed keeps a small file
// that declares a huge count from costing more memory than its size warrants.
static int gguf_grow(void **arr, uint64_t *cap, uint64_t need, uint64_t max, size_t elem, gguf_rd *r) {
    if (need < *cap) return 0;
    uint64_t ncap = *cap ? *cap * 2 : 64;
    if (ncap > max) ncap = max;
    void *p = realloc(*arr, (size_t)ncap * elem);
    if (!p) return rd_fail(r, "out of memory for %llu entries", (unsigned long long)ncap);
    memset((char *)p + *cap * elem, 0, (size_t)(ncap - *cap) * elem);
    *arr = p;
    *cap = ncap;
    return 0;
}

// Header: magic, version, n_tensors, n_kv; both counts bounded by the bytes left.
static int rd_header(gguf_rd *r, gguf_file *f) {
    if (r->size == 0) return rd_fail(r, "empty file (0 bytes), expected a GGUF file");
    if (r->size >= 4 && gguf_le(r->buf, 4) != GGUF_MAGIC) {
        char show[GGUF_SHOW_LEN];
        gguf_str m = {(const char *)r->buf, 4};
        return rd_fail(r, "not a GGUF file: magic '%s', expected 'GGUF'", gguf_show(m, show));
    }
    if (r->size < GGUF_HEADER_BYTES)
        return rd_fail(r, "file too small for a GGUF header: %llu bytes, expected at least %d",
                       (unsigned long long)r->size, GGUF_HEADER_BYTES);
    r->pos = 4;
    rd_u32(r, &f->version, "version");
    rd_u64(r, &f->n_tensors, "n_tensors");
    rd_u64(r, &f->n_kv, "n_kv");
    if (f->version != 2 && f->version != 3) {
        uint32_t swapped = __builtin_bswap32(f->version);
        return rd_fail(r, "unsupported GGUF version %u (quill reads 2 and 3)%s", f->version,
                       swapped == 2 || swapped == 3 ? "; this looks like a big-endian GGUF" : "");
    }
    uint64_t left = r->size - r->pos;
    if (f->n_kv > left / GGUF_MIN_KV_BYTES)
        return rd_fail(r, "n_kv = %llu is too large: the %llu bytes after the header hold at most %llu keys",
                       (unsigned long long)f->n_kv, (unsigned long long)left,
                       (unsigned long long)(left / GGUF_MIN_KV_BYTES));
    left -= f->n_kv * GGUF_MIN_KV_BYTES;
    if (f->n_tensors > left / GGUF_MIN_TENSOR_BYTES)
        return rd_fail(r, "n_tensors = %llu is too large: the file holds at most %llu tensor infos",
                       (unsigned long long)f->n_tensors, (unsigned long long)(left / GGUF_MIN_TENSOR_BYTES));
    return 0;
}

// FNV-1a: cheap and good enough for a few hundred names (or a hostile million).
static uint64_t gguf_hash(const char *p, uint64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return h;
}

// The name of entry i of an array of structs whose gguf_str name is at name_off.
static gguf_str entry_name(const void *items, size_t stride, size_t name_off, uint64_t i) {
    gguf_str s;
    memcpy(&s, (const char *)items + i * stride + name_off, sizeof s);
    return s;
}

// Slot of `name` in ix: either the slot holding it or the empty slot where it belongs.
static uint64_t index_probe(const gguf_index *ix, const void *items, size_t stride, size_t name_off,
                            const char *name, uint64_t len) {
    uint64_t h = gguf_hash(name, len) & ix->mask;
    while (ix->slot[h]) {
        gguf_str s = entry_name(items, stride, name_off, ix->slot[h] - 1);
        if (s.len == len && memcmp(s.ptr, name, len) == 0) return h;
        h = (h + 1) & ix->mask;
    }
    return h;
}

// Builds ix over n entries; fails naming the first duplicate name (`what`: "key", "tensor").
static int index_build(gguf_index *ix, const void *items, size_t stride, size_t name_off, uint64_t n,
                       const char *what, gguf_rd *r) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    ix->slot = calloc((size_t)cap, sizeof *ix->slot);
    if (!ix->slot) return rd_fail(r, "out of memory for a %s index of %llu entries", what, (unsigned long long)n);
    ix->mask = cap - 1;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = entry_name(items, stride, name_off, i);
        uint64_t h = index_probe(ix, items, stride, name_off, s.ptr, s.len);
        if (ix->slot[h]) {
            char show[GGUF_SHOW_LEN];
            return rd_fail(r, "duplicate %s '%s' (entries #%llu and #%llu)", what, gguf_show(s, show),
                           (unsigned long long)(ix->slot[h] - 1), (unsigned long long)i);
        }
        ix->slot[h] = i + 1;
    }
    return 0;
}

static const void *index_find(const gguf_index *ix, const void *items, size_t stride, size_t name_off,
                              const char *name) {
    if (!ix->slot || !name) return NULL;
    uint64_t h = index_probe(ix, items, stride, name_off, name, strlen(name));
    return ix->slot[h] ? (const char *)items + (ix->slot[h] - 1) * stride : NULL;
}

static int rd_kvs(gguf_rd *r, gguf_file *f) {
    uint64_t cap = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        if (gguf_grow((void **)&f->kv, &cap, i, f->n_kv, sizeof *f->kv, r)) return -1;
        if (rd_kv(r, i, &f->kv[i])) return -1;
    }
    r->ctx[0] = 0;
    return index_build(&f->kv_index, f->kv, sizeof *f->kv, offsetof(gguf_kv, key), f->n_kv, "key", r);
}

// general.alignment: optional, u32, a power of two of at least 4.
static int rd_alignment(gguf_rd *r, gguf_file *f) {
    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const gguf_kv *kv = gguf_find(f, "general.alignment");
    if (!kv) return 0;
    snprintf(r->ctx, sizeof r->ctx, "key 'general.alignment'");
    if (kv->type != GGUF_UINT32)
        return rd_fail(r, "expected u32, found %s", gguf_vtype_name(kv->type));
    if (kv->u == 0 || (kv->u & (kv->u - 1)))
        return rd_fail(r, "alignment %llu is not a non-zero power of two", (unsigned long long)kv->u);
    if (kv->u < 4)  // (a fuzzed file with alignment 1 put F32 norms at odd addresses)
        return rd_fail(r, "alignment %llu is below 4: tensor data is read in place as 4-byte floats",
                       (unsigned long long)kv->u);
    f->alignment = kv->u;
    r->ctx[0] = 0;
    return 0;
}

// Checks the type and shape of t and sets t->nbytes (all arithmetic checked).
static int tensor_size(gguf_rd *r, gguf_tensor *t) {
    const qtype_info *q = qtype_get(t->type);
    if (!q) return rd_fail(r, "unknown ggml type %u", t->type);
    uint64_t nel = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++)
        if (mul_ok(nel, (uint64_t)t->ne[d], &nel) || nel > INT64_MAX)
            return rd_fail(r, "shape [%lld, %lld, %lld, %lld]: element count overflows int64",
                           (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    if (t->ne[0] % q->block)
        return rd_fail(r, "ne[0] = %lld is not a multiple of the %s block size %lld", (long long)t->ne[0],
                       q->name, (long long)q->block);
    uint64_t row_bytes, nbytes;
    if (mul_ok((uint64_t)(t->ne[0] / q->block), q->block_bytes, &row_bytes) ||
        mul_ok(row_bytes, nel / (uint64_t)t->ne[0], &nbytes))
        return rd_fail(r, "byte size of %llu %s elements overflows", (unsigned long long)nel, q->name);
    t->nbytes = nbytes;
    return 0;
}

// tensor info = string name | u32 n_dims | u64 ne[n_dims] | u32 ggml type | u64 offset.
static int rd_tensor(gguf_rd *r, uint64_t i, gguf_tensor *t) {
    char show[GGUF_SHOW_LEN];
    snprintf(r->ctx, sizeof r->ctx, "tensor #%llu", (unsigned long long)i);
    if (rd_str(r, &t->name, "tensor name")) return -1;
    snprintf(r->ctx, sizeof r->ctx, "tensor '%s'", gguf_show(t->name, show));
    if (rd_u32(r, &t->n_dims, "n_dims")) return -1;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return rd_fail(r, "n_dims = %u, expected 1..%d", t->n_dims, GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims && rd_u64(r, &ne, "dimension")) return -1;
        if (ne < 1 || ne > INT64_MAX)
            return rd_fail(r, "ne[%u] = %llu, expected 1..2^63-1", d, (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    if (rd_u32(r, &t->type, "ggml type") || rd_u64(r, &t->offset, "data offset")) return -1;
    return tensor_size(r, t);
}

static int rd_tensors(gguf_rd *r, gguf_file *f) {
    uint64_t cap = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        if (gguf_grow((void **)&f->tensors, &cap, i, f->n_tensors, sizeof *f->tensors, r)) return -1;
        if (rd_tensor(r, i, &f->tensors[i])) return -1;
    }
    r->ctx[0] = 0;
    return index_build(&f->tensor_index, f->tensors, sizeof *f->tensors, offsetof(gguf_tensor, name),
                       f->n_tensors, "tensor", r);
}

// The data section starts at the first aligned offset after the tensor infos;
// every tensor's [offset, offset + nbytes) must be aligned and lie inside the file.
static int place_tensors(gguf_rd *r, gguf_file *f) {
    uint64_t end;
    if (add_ok(r->pos, f->alignment - 1, &end)) return rd_fail(r, "data offset overflows");
    f->data_offset = end & ~(f->alignment - 1);
    if (f->n_tensors == 0 && f->data_offset > r->size) f->data_offset = r->size;  // vocab-only files end unpadded
    if (f->data_offset > r->size)
        return rd_fail(r, "data section would start at offset %llu, past the end of the file (%llu bytes)",
                       (unsigned long long)f->data_offset, (unsigned long long)r->size);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        gguf_tensor *t = &f->tensors[i];
        char show[GGUF_SHOW_LEN];
        snprintf(r->ctx, sizeof r->ctx, "tensor '%s'", gguf_show(t->name, show));
        if (t->offset % f->alignment)
            return rd_fail(r, "data offset %llu is not a multiple of the alignment %llu",
                           (unsigned long long)t->offset, (unsigned long long)f->alignment);
        uint64_t start, stop;
        if (add_ok(f->data_offset, t->offset, &start) || add_ok(start, t->nbytes, &stop) || stop > r->size)
            return rd_fail(r, "data (%llu bytes at data offset %llu) runs past the end of the file (%llu bytes)",
                           (unsigned long long)t->nbytes, (unsigned long long)t->offset,
                           (unsigned long long)r->size);
        t->data = r->buf + start;
    }
    r->ctx[0] = 0;
    return 0;
}

int gguf_parse(gguf_file *f, const void *buf, size_t size, char *err) {
    memset(f, 0, sizeof *f);
    if (!buf && size) return errf(err, "no buffer");
    static const uint8_t empty[1];
    gguf_rd r = {.buf = buf ? buf : empty, .size = buf ? size : 0, .err = err};
    f->base = r.buf;
    f->size = size;
    if (rd_header(&r, f) || rd_kvs(&r, f) || rd_alignment(&r, f) || rd_tensors(&r, f) ||
        place_tensors(&r, f)) {
        gguf_close(f);
        return -1;
    }
    return 0;
}

int gguf_open(gguf_file *f, const char *path, char *err) {
    memset(f, 0, sizeof *f);
    file_map m;
    if (map_open(&m, path, err)) return -1;
    char perr[ERR_LEN];
    if (gguf_parse(f, m.base, m.size, perr) != 0) {
        map_close(&m);
        return errf(err, "%s: %s", path, perr);
    }
    f->map = m;
    return 0;
}

void gguf_close(gguf_file *f) {
    if (!f) return;
    free(f->kv);
    free(f->tensors);
    free(f->kv_index.slot);
    free(f->tensor_index.slot);
    map_close(&f->map);
    memset(f, 0, sizeof *f);
}

const gguf_kv *gguf_find(const gguf_file *f, const char *key) {
    return index_find(&f->kv_index, f->kv, sizeof *f->kv, offsetof(gguf_kv, key), key);
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
    return index_find(&f->tensor_index, f->tensors, sizeof *f->tensors, offsetof(gguf_tensor, name), name);
}

// ---- typed getters ----

static int is_unsigned(uint32_t t) {
    return t == GGUF_UINT8 || t == GGUF_UINT16 || t == GGUF_UINT32 || t == GGUF_UINT64;
}

static int is_signed(uint32_t t) {
    return t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64;
}

// "key 'K': expected WANT, found TYPE" (arrays shown with their element type).
static int type_err(const gguf_kv *kv, const char *want, char *err) {
    char show[GGUF_SHOW_LEN];
    if (kv->type == GGUF_ARRAY)
        return errf(err, "key '%s': expected %s, found array of %s", gguf_show(kv->key, show), want,
                    gguf_vtype_name(kv->arr_type));
    return errf(err, "key '%s': expected %s, found %s", gguf_show(kv->key, show), want,
                gguf_vtype_name(kv->type));
}

int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, char *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    char show[GGUF_SHOW_LEN];
    if (is_unsigned(kv->type)) {
        if (kv->u > UINT32_MAX)
            return errf(err, "key '%s': value %llu does not fit in u32", gguf_show(kv->key, show),
                        (unsigned long long)kv->u);
        *out = (uint32_t)kv->u;
        return 0;
    }
    if (is_signed(kv->type)) {
        if (kv->i < 0 || kv->i > (int64_t)UINT32_MAX)
            return errf(err, "key '%s': value %lld does not fit in u32", gguf_show(kv->key, show),
                        (long long)kv->i);
        *out = (uint32_t)kv->i;
        return 0;
    }
    return type_err(kv, "u32", err);
}

int gguf_get_f32(const gguf_file *f, const char *key, float *out, char *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64) return type_err(kv, "f32", err);
    if (isfinite(kv->f) && fabs(kv->f) > FLT_MAX) {
        char show[GGUF_SHOW_LEN];
        return errf(err, "key '%s': value %g is out of range for f32", gguf_show(kv->key, show), kv->f);
    }
    *out = (float)kv->f;
    return 0;
}

int gguf_get_bool(const gguf_file *f, const char *key, int *out, char *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type == GGUF_BOOL || (is_unsigned(kv->type) && kv->u <= 1)) {
        *out = (int)kv->u;
        return 0;
    }
    if (is_signed(kv->type) && (kv->i == 0 || kv->i == 1)) {
        *out = (int)kv->i;
        return 0;
    }
    if (is_unsigned(kv->type) || is_signed(kv->type)) {
        char show[GGUF_SHOW_LEN];
        long long v = is_signed(kv->type) ? (long long)kv->i : (long long)kv->u;
        return errf(err, "key '%s': expected bool (0 or 1), found %s %lld", gguf_show(kv->key, show),
                    gguf_vtype_name(kv->type), v);
    }
    return type_err(kv, "bool", err);
}

int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, char *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_STRING) return type_err(kv, "string", err);
    *out = kv->s;
    return 0;
}

int gguf_get_arr(const gguf_file *f, const char *key, uint32_t elem_type, uint64_t want_n,
                 const gguf_kv **out, char *err) {
    const gguf_kv *kv = gguf_find(f, key);
    if (!kv) return 1;
    if (kv->type != GGUF_ARRAY || kv->arr_type != elem_type) {
        char want[32];
        snprintf(want, sizeof want, "array of %s", gguf_vtype_name(elem_type));
        return type_err(kv, want, err);
    }
    if (want_n && kv->arr_n != want_n) {
        char show[GGUF_SHOW_LEN];
        return errf(err, "key '%s': expected %llu elements, found %llu", gguf_show(kv->key, show),
                    (unsigned long long)want_n, (unsigned long long)kv->arr_n);
    }
    *out = kv;
    return 0;
}

gguf_str gguf_arr_next_str(const uint8_t **p) {
    gguf_str s;
    s.len = gguf_le(*p, 8);
    s.ptr = (const char *)*p + 8;
    *p += 8 + s.len;
    return s;
}

int gguf_str_eq(gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}
