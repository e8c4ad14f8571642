// test_gguf.c — the GGUF reader against real files and hostile buffers.
//
// 1. Synthetic files built by a tiny writer below: a valid one whose every value
//    must round-trip, and one mutation per check the parser promises (each must
//    fail with a message containing a given substring).
// 2. Every GGUF in $SHARED: facts checked against literals obtained independently
//    (a throwaway Python `struct` reader written while writing this test, and `xxd`
//    of the headers), not against anything quill produced.
// 3. Truncations of stories260K-Q8_0.gguf: every prefix of the header region and a
//    sample through the data section, each parsed from an exactly-sized malloc'd
//    copy so that ASan catches any over-read.
#include "gguf.h"
#include "util.h"

#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int n_checks, n_failed;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        n_checks++;                                                        \
        if (!(cond)) {                                                     \
            n_failed++;                                                    \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

// ---- a tiny GGUF writer ----

typedef struct {
    uint8_t *p;
    size_t n, cap;
} wbuf;

static void w_raw(wbuf *b, const void *src, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) { fprintf(stderr, "out of memory\n"); exit(2); }
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void w_le(wbuf *b, uint64_t v, int nbytes) {
    for (int i = 0; i < nbytes; i++) {
        uint8_t c = (uint8_t)(v >> (8 * i));
        w_raw(b, &c, 1);
    }
}
static void w_u32(wbuf *b, uint32_t v) { w_le(b, v, 4); }
static void w_u64(wbuf *b, uint64_t v) { w_le(b, v, 8); }
static void w_str(wbuf *b, const char *s) { w_u64(b, strlen(s)); w_raw(b, s, strlen(s)); }
static void w_f32(wbuf *b, float x) { uint32_t u; memcpy(&u, &x, 4); w_u32(b, u); }
static void w_f64(wbuf *b, double x) { uint64_t u; memcpy(&u, &x, 8); w_u64(b, u); }

static void w_header(wbuf *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    w_raw(b, "GGUF", 4);
    w_u32(b, version);
    w_u64(b, n_tensors);
    w_u64(b, n_kv);
}
static void w_key(wbuf *b, const char *key, uint32_t type) { w_str(b, key); w_u32(b, type); }
static void w_kv_u32(wbuf *b, const char *key, uint32_t v) { w_key(b, key, GGUF_UINT32); w_u32(b, v); }

static void w_tinfo(wbuf *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                    uint64_t offset) {
    w_str(b, name);
    w_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) w_u64(b, ne[d]);
    w_u32(b, type);
    w_u64(b, offset);
}

// Pads to a multiple of align; returns the new length (the data section start).
static size_t w_pad(wbuf *b, size_t align) {
    while (b->n % align) w_raw(b, "", 1);
    return b->n;
}

// n bytes of a recognisable pattern: byte i of the data section is (i * 7 + 1) & 255.
static void w_data(wbuf *b, size_t start, size_t n) {
    for (size_t i = 0; i < n; i++) {
        uint8_t c = (uint8_t)((b->n - start) * 7 + 1);
        w_raw(b, &c, 1);
    }
}

// A file with one tensor, no keys, default alignment 32, and data_bytes of data.
static wbuf one_tensor(const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
    wbuf b = {0};
    w_header(&b, 3, 1, 0);
    w_tinfo(&b, name, n_dims, ne, type, offset);
    size_t start = w_pad(&b, 32);
    w_data(&b, start, data_bytes);
    return b;
}

// ---- parse helpers ----

// Parses an exactly-sized heap copy of buf[0..n) (so ASan sees over-reads).
// Returns the rc; *copy must be freed by the caller after gguf_close.
static int parse_copy(gguf_file *f, const uint8_t *buf, size_t n, uint8_t **copy, char *err) {
    *copy = malloc(n ? n : 1);
    if (n) memcpy(*copy, buf, n);
    err[0] = 0;
    return gguf_parse(f, *copy, n, err);
}

// Checks that a failed parse left a clean state and a one-line message.
static void check_clean_failure(const gguf_file *f, const char *err, const char *label) {
    CHECK(err[0] != 0, "%s: empty error message", label);
    CHECK(strchr(err, '\n') == NULL, "%s: message spans lines: %s", label, err);
    CHECK(f->kv == NULL && f->tensors == NULL && f->kv_index.slot == NULL && f->tensor_index.slot == NULL,
          "%s: failed parse left allocations behind", label);
}

static void expect_fail(wbuf *b, const char *label, const char *substr) {
    gguf_file f;
    uint8_t *copy;
    char err[ERR_LEN];
    int rc = parse_copy(&f, b->p, b->n, &copy, err);
    CHECK(rc == -1, "%s: parse succeeded, expected failure", label);
    if (rc == -1) {
        check_clean_failure(&f, err, label);
        CHECK(strstr(err, substr) != NULL, "%s: message lacks '%s': %s", label, substr, err);
        printf("  %-34s -> %s\n", label, err);
    }
    gguf_close(&f);
    free(copy);
    free(b->p);
    b->p = NULL;
}

static void expect_ok(wbuf *b, const char *label) {
    gguf_file f;
    uint8_t *copy;
    char err[ERR_LEN];
    int rc = parse_copy(&f, b->p, b->n, &copy, err);
    CHECK(rc == 0, "%s: expected success, got: %s", label, err);
    gguf_close(&f);
    free(copy);
    free(b->p);
    b->p = NULL;
}

// ---- 1. the valid synthetic file ----

#define V_ALIGN 64
// Tensor data offsets (relative to the data section), each a multiple of V_ALIGN.
#define V_OFF_A 0    // "a": F32 [4, 2]      = 32 bytes
#define V_OFF_B 64   // "b": Q8_0 [32, 3]    = 3 blocks x 34 = 102 bytes
#define V_OFF_C 192  // "c": IQ2_XXS [256]   = 1 block x 66 = 66 bytes (parses; not computable)
#define V_OFF_D 320  // "d": F16 [1, 2, 3, 4] = 24 x 2 = 48 bytes
#define V_DATA_BYTES 368

static void w_valid_kvs(wbuf *b) {
    w_key(b, "t.u8", GGUF_UINT8); w_le(b, 200, 1);
    w_key(b, "t.i8", GGUF_INT8); w_le(b, (uint8_t)-100, 1);
    w_key(b, "t.u16", GGUF_UINT16); w_le(b, 60000, 2);
    w_key(b, "t.i16", GGUF_INT16); w_le(b, (uint16_t)-30000, 2);
    w_kv_u32(b, "t.u32", 4000000000u);
    w_key(b, "t.i32", GGUF_INT32); w_u32(b, (uint32_t)-2000000000);
    w_key(b, "t.f32", GGUF_FLOAT32); w_f32(b, 1.5f);
    w_key(b, "t.bool", GGUF_BOOL); w_le(b, 1, 1);
    w_key(b, "t.str", GGUF_STRING); w_str(b, "hello");
    w_key(b, "t.u64", GGUF_UINT64); w_u64(b, (1ull << 63) + 5);
    w_key(b, "t.i64", GGUF_INT64); w_u64(b, (uint64_t)(-(INT64_C(1) << 62) - 3));
    w_key(b, "t.f64", GGUF_FLOAT64); w_f64(b, -2.25e100);
    w_key(b, "t.f64b", GGUF_FLOAT64); w_f64(b, 0.125);
    w_key(b, "t.one", GGUF_INT32); w_u32(b, 1);
    w_key(b, "t.arr_u8", GGUF_ARRAY); w_u32(b, GGUF_UINT8); w_u64(b, 3); w_raw(b, "\x01\x02\x03", 3);
    w_key(b, "t.arr_str", GGUF_ARRAY); w_u32(b, GGUF_STRING); w_u64(b, 3);
    w_str(b, "a"); w_str(b, ""); w_str(b, "xyz");
    w_key(b, "t.arr_f32", GGUF_ARRAY); w_u32(b, GGUF_FLOAT32); w_u64(b, 2); w_f32(b, 0.5f); w_f32(b, -1.0f);
    w_key(b, "t.arr_empty", GGUF_ARRAY); w_u32(b, GGUF_INT32); w_u64(b, 0);
    w_key(b, "t.arr_bool", GGUF_ARRAY); w_u32(b, GGUF_BOOL); w_u64(b, 2); w_raw(b, "\x01\x00", 2);
    w_kv_u32(b, "general.alignment", V_ALIGN);
}
#define V_N_KV 20

// Returns the buffer; *data_start is where the writer put the data section.
static wbuf build_valid(size_t *data_start) {
    wbuf b = {0};
    w_header(&b, 3, 4, V_N_KV);
    w_valid_kvs(&b);
    w_tinfo(&b, "a", 2, (uint64_t[]){4, 2}, 0, V_OFF_A);
    w_tinfo(&b, "b", 2, (uint64_t[]){32, 3}, 8, V_OFF_B);
    w_tinfo(&b, "c", 1, (uint64_t[]){256}, 16, V_OFF_C);
    w_tinfo(&b, "d", 4, (uint64_t[]){1, 2, 3, 4}, 1, V_OFF_D);
    *data_start = w_pad(&b, V_ALIGN);
    w_data(&b, *data_start, V_DATA_BYTES);
    return b;
}

static void check_valid_scalars(const gguf_file *f) {
    const gguf_kv *kv;
    kv = gguf_find(f, "t.u8"); CHECK(kv && kv->type == GGUF_UINT8 && kv->u == 200, "u8");
    kv = gguf_find(f, "t.i8"); CHECK(kv && kv->type == GGUF_INT8 && kv->i == -100, "i8");
    kv = gguf_find(f, "t.u16"); CHECK(kv && kv->u == 60000, "u16");
    kv = gguf_find(f, "t.i16"); CHECK(kv && kv->i == -30000, "i16");
    kv = gguf_find(f, "t.u32"); CHECK(kv && kv->u == 4000000000u, "u32");
    kv = gguf_find(f, "t.i32"); CHECK(kv && kv->i == -2000000000, "i32");
    kv = gguf_find(f, "t.f32"); CHECK(kv && kv->type == GGUF_FLOAT32 && kv->f == 1.5, "f32");
    kv = gguf_find(f, "t.bool"); CHECK(kv && kv->type == GGUF_BOOL && kv->u == 1, "bool");
    kv = gguf_find(f, "t.str"); CHECK(kv && gguf_str_eq(kv->s, "hello"), "string");
    kv = gguf_find(f, "t.u64"); CHECK(kv && kv->u == (1ull << 63) + 5, "u64");
    kv = gguf_find(f, "t.i64"); CHECK(kv && kv->i == -(INT64_C(1) << 62) - 3, "i64");
    kv = gguf_find(f, "t.f64"); CHECK(kv && kv->f == -2.25e100, "f64");
    kv = gguf_find(f, "t.arr_u8");
    CHECK(kv && kv->arr_type == GGUF_UINT8 && kv->arr_n == 3 && memcmp(kv->arr_data, "\x01\x02\x03", 3) == 0, "arr u8");
    kv = gguf_find(f, "t.arr_f32");
    float x[2] = {0};
    if (kv) memcpy(x, kv->arr_data, 8);
    CHECK(kv && kv->arr_n == 2 && x[0] == 0.5f && x[1] == -1.0f, "arr f32");
    kv = gguf_find(f, "t.arr_empty"); CHECK(kv && kv->arr_type == GGUF_INT32 && kv->arr_n == 0, "empty array");
    kv = gguf_find(f, "t.arr_bool");
    CHECK(kv && kv->arr_type == GGUF_BOOL && kv->arr_n == 2 && memcmp(kv->arr_data, "\x01\x00", 2) == 0, "arr bool");
    kv = gguf_find(f, "t.arr_str");
    CHECK(kv && kv->arr_type == GGUF_STRING && kv->arr_n == 3, "arr str");
    if (kv && kv->arr_n == 3) {
        const uint8_t *p = kv->arr_data;
        gguf_str s0 = gguf_arr_next_str(&p), s1 = gguf_arr_next_str(&p), s2 = gguf_arr_next_str(&p);
        CHECK(gguf_str_eq(s0, "a") && gguf_str_eq(s1, "") && gguf_str_eq(s2, "xyz"), "string array walk");
        CHECK(!gguf_str_eq(s2, "xy") && !gguf_str_eq(s2, "xyzz"), "gguf_str_eq on prefixes");
    }
    CHECK(gguf_find(f, "t.missing") == NULL && gguf_find(f, "t.u") == NULL, "absent keys");
}

static void check_valid_getters(const gguf_file *f) {
    char err[ERR_LEN] = "";
    uint32_t u = 7;
    CHECK(gguf_get_u32(f, "t.u8", &u, err) == 0 && u == 200, "u32 from u8");
    CHECK(gguf_get_u32(f, "t.u32", &u, err) == 0 && u == 4000000000u, "u32 from u32");
    CHECK(gguf_get_u32(f, "t.one", &u, err) == 0 && u == 1, "u32 from i32");
    u = 7;
    CHECK(gguf_get_u32(f, "t.nope", &u, err) == 1 && u == 7, "absent u32 leaves out untouched");
    CHECK(gguf_get_u32(f, "t.i32", &u, err) == -1 && strstr(err, "does not fit"), "negative i32 as u32: %s", err);
    CHECK(gguf_get_u32(f, "t.u64", &u, err) == -1 && strstr(err, "does not fit"), "big u64 as u32: %s", err);
    CHECK(gguf_get_u32(f, "t.str", &u, err) == -1 && strcmp(err, "key 't.str': expected u32, found string") == 0,
          "string as u32: %s", err);
    CHECK(gguf_get_u32(f, "t.arr_u8", &u, err) == -1 && strstr(err, "found array of u8"), "array as u32: %s", err);
    float x = 0;
    CHECK(gguf_get_f32(f, "t.f32", &x, err) == 0 && x == 1.5f, "f32");
    CHECK(gguf_get_f32(f, "t.f64b", &x, err) == 0 && x == 0.125f, "f32 from f64");
    CHECK(gguf_get_f32(f, "t.f64", &x, err) == -1 && strstr(err, "out of range"), "huge f64 as f32: %s", err);
    CHECK(gguf_get_f32(f, "t.u32", &x, err) == -1 && strstr(err, "expected f32, found u32"), "u32 as f32: %s", err);
    int bv = 5;
    CHECK(gguf_get_bool(f, "t.bool", &bv, err) == 0 && bv == 1, "bool");
    CHECK(gguf_get_bool(f, "t.one", &bv, err) == 0 && bv == 1, "bool from i32 1");
    CHECK(gguf_get_bool(f, "t.u8", &bv, err) == -1 && strstr(err, "expected bool"), "u8 200 as bool: %s", err);
    CHECK(gguf_get_bool(f, "t.str", &bv, err) == -1 && strstr(err, "found string"), "string as bool: %s", err);
    gguf_str s = {0};
    CHECK(gguf_get_str(f, "t.str", &s, err) == 0 && gguf_str_eq(s, "hello"), "get_str");
    CHECK(gguf_get_str(f, "t.u8", &s, err) == -1 && strstr(err, "expected string, found u8"), "u8 as str: %s", err);
    const gguf_kv *kv = NULL;
    CHECK(gguf_get_arr(f, "t.arr_str", GGUF_STRING, 3, &kv, err) == 0 && kv && kv->arr_n == 3, "get_arr");
    CHECK(gguf_get_arr(f, "t.arr_str", GGUF_STRING, 0, &kv, err) == 0, "get_arr any count");
    CHECK(gguf_get_arr(f, "t.arr_str", GGUF_STRING, 4, &kv, err) == -1 && strstr(err, "expected 4 elements, found 3"),
          "get_arr count: %s", err);
    CHECK(gguf_get_arr(f, "t.arr_str", GGUF_UINT32, 0, &kv, err) == -1 &&
          strstr(err, "expected array of u32, found array of string"), "get_arr type: %s", err);
    CHECK(gguf_get_arr(f, "t.u8", GGUF_UINT8, 0, &kv, err) == -1 && strstr(err, "found u8"), "scalar as arr: %s", err);
    CHECK(strcmp(gguf_vtype_name(GGUF_FLOAT32), "f32") == 0 && strcmp(gguf_vtype_name(GGUF_STRING), "string") == 0 &&
          gguf_vtype_name(99) != NULL, "gguf_vtype_name");
}

// Tensor checks: shapes, types, and data pointers at writer-known positions.
static void check_valid_tensors(const gguf_file *f, const uint8_t *buf, size_t data_start) {
    CHECK(f->alignment == V_ALIGN && f->data_offset == data_start, "alignment %llu data_offset %llu (want %zu)",
          (unsigned long long)f->alignment, (unsigned long long)f->data_offset, data_start);
    const gguf_tensor *a = gguf_find_tensor(f, "a"), *b = gguf_find_tensor(f, "b");
    const gguf_tensor *c = gguf_find_tensor(f, "c"), *d = gguf_find_tensor(f, "d");
    CHECK(a && b && c && d && !gguf_find_tensor(f, "e") && !gguf_find_tensor(f, ""), "find tensors");
    if (!(a && b && c && d)) return;
    CHECK(a->n_dims == 2 && a->ne[0] == 4 && a->ne[1] == 2 && a->ne[2] == 1 && a->ne[3] == 1 && a->type == 0 &&
          a->nbytes == 32 && a->data == buf + data_start + V_OFF_A, "tensor a");
    CHECK(b->type == 8 && b->nbytes == 102 && b->data == buf + data_start + V_OFF_B, "tensor b (Q8_0)");
    CHECK(c->type == 16 && c->nbytes == 66 && c->data == buf + data_start + V_OFF_C, "tensor c (IQ2_XXS)");
    CHECK(d->n_dims == 4 && d->ne[3] == 4 && d->nbytes == 48 && d->data == buf + data_start + V_OFF_D, "tensor d");
    CHECK(((const uint8_t *)b->data)[0] == (uint8_t)(V_OFF_B * 7 + 1), "tensor b's first data byte");
}

static void test_valid(void) {
    printf("valid synthetic file:\n");
    size_t data_start;
    wbuf w = build_valid(&data_start);
    gguf_file f;
    uint8_t *copy;
    char err[ERR_LEN];
    int rc = parse_copy(&f, w.p, w.n, &copy, err);
    CHECK(rc == 0, "valid synthetic file: %s", err);
    if (rc == 0) {
        CHECK(f.version == 3 && f.n_kv == V_N_KV && f.n_tensors == 4, "header counts");
        check_valid_scalars(&f);
        check_valid_getters(&f);
        check_valid_tensors(&f, copy, data_start);
    }
    gguf_close(&f);
    CHECK(f.kv == NULL && f.base == NULL, "gguf_close clears the struct");
    gguf_close(&f);  // twice is harmless
    free(copy);
    free(w.p);
    printf("  %d checks so far\n", n_checks);
}

// ---- 1b. mutations ----

static void test_header_mutations(void) {
    wbuf b;
    printf("header mutations:\n");
    b = (wbuf){0};
    expect_fail(&b, "empty buffer", "empty");
    b = (wbuf){0};
    w_raw(&b, "GGUF\x03\x00\x00\x00\x00", 9);
    expect_fail(&b, "9-byte buffer", "too small");
    b = one_tensor("x", 1, (uint64_t[]){8}, 0, 0, 32);
    b.p[0] ^= 0x20;
    expect_fail(&b, "flipped magic", "not a GGUF file");
    for (uint32_t v = 1; v <= 4; v++) {
        b = (wbuf){0};
        w_header(&b, v, 0, 1);
        w_kv_u32(&b, "k", 1);
        if (v == 2 || v == 3) expect_ok(&b, "version 2/3");
        else expect_fail(&b, v == 1 ? "version 1" : "version 4", "quill reads 2 and 3");
    }
    b = (wbuf){0};
    w_header(&b, 0x03000000u, 0, 0);
    expect_fail(&b, "byte-swapped version", "big-endian");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1ull << 60);
    w_kv_u32(&b, "k", 1);
    expect_fail(&b, "n_kv = 2^60", "too large");
    b = (wbuf){0};  // every key takes at least 13 bytes (u64 length, u32 type, 1-byte value): 2 need 26
    w_header(&b, 3, 0, 2);
    w_kv_u32(&b, "k", 1);
    expect_fail(&b, "n_kv = 2 in 17 bytes", "too large");
    b = (wbuf){0};  // every tensor info takes at least 32 bytes: one "x" of 33 bytes leaves no room for 2
    w_header(&b, 3, 2, 0);
    w_tinfo(&b, "x", 1, (uint64_t[]){8}, 0, 0);
    expect_fail(&b, "n_tensors = 2 in 33 bytes", "too large");
    b = (wbuf){0};
    w_header(&b, 3, 1ull << 60, 1);
    w_kv_u32(&b, "k", 1);
    expect_fail(&b, "n_tensors = 2^60", "too large");
    b = (wbuf){0};
    w_header(&b, 3, 0, 3);  // claims 3 keys, holds 1 plus junk (enough bytes to pass the count bound)
    w_kv_u32(&b, "k", 1);
    for (int i = 0; i < 26; i++) w_raw(&b, "\xff", 1);
    expect_fail(&b, "n_kv larger than the keys present", "past the end");
    b = (wbuf){0};
    w_header(&b, 3, 0, 0);
    expect_ok(&b, "no keys, no tensors");
}

static void test_kv_mutations(void) {
    wbuf b;
    printf("metadata mutations:\n");
    b = (wbuf){0};
    w_header(&b, 3, 0, 2);
    w_kv_u32(&b, "general.name", 1);
    w_kv_u32(&b, "general.name", 2);
    expect_fail(&b, "duplicate key", "duplicate key 'general.name'");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_u64(&b, 1ull << 60);
    w_raw(&b, "abcdefghijklmnop", 16);
    expect_fail(&b, "key length 2^60", "past the end");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", GGUF_STRING);
    w_u64(&b, ~0ull);
    w_raw(&b, "abcdefgh", 8);
    expect_fail(&b, "string value length 2^64-1", "past the end");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", GGUF_ARRAY);
    w_u32(&b, GGUF_ARRAY);
    w_u64(&b, 1);
    w_u32(&b, GGUF_UINT8);
    w_u64(&b, 1);
    w_raw(&b, "\x05", 1);
    expect_fail(&b, "nested array", "nested");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", GGUF_ARRAY);
    w_u32(&b, GGUF_STRING);
    w_u64(&b, 1ull << 60);
    w_str(&b, "a");
    expect_fail(&b, "string array count 2^60", "too large");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", GGUF_ARRAY);
    w_u32(&b, GGUF_STRING);
    w_u64(&b, 2);
    w_str(&b, "a");
    w_u64(&b, 1ull << 62);
    expect_fail(&b, "string array element length 2^62", "past the end");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", GGUF_ARRAY);
    w_u32(&b, GGUF_UINT32);
    w_u64(&b, 1ull << 62);
    w_u32(&b, 0);
    expect_fail(&b, "u32 array count 2^62 (bytes overflow)", "too large");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", GGUF_ARRAY);
    w_u32(&b, GGUF_UINT8);
    w_u64(&b, 1ull << 40);
    w_u32(&b, 0);
    expect_fail(&b, "u8 array count 2^40", "past the end");
}

static void test_kv_type_mutations(void) {
    wbuf b;
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", 13);
    w_u64(&b, 0);
    expect_fail(&b, "unknown value type 13", "key 'k': unknown value type 13");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", GGUF_ARRAY);
    w_u32(&b, 42);
    w_u64(&b, 0);
    expect_fail(&b, "unknown array element type", "unknown array element type 42");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", GGUF_BOOL);
    w_le(&b, 2, 1);
    w_raw(&b, "\0\0\0\0\0\0\0\0\0\0\0\0\0", 13);
    expect_fail(&b, "bool value 2", "expected 0 or 1");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "k", GGUF_ARRAY);
    w_u32(&b, GGUF_BOOL);
    w_u64(&b, 3);
    w_raw(&b, "\x01\x00\x07", 3);
    expect_fail(&b, "bool array element 7", "expected 0 or 1");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "bad\nname", GGUF_UINT64);
    w_raw(&b, "\0\0\0", 3);
    expect_fail(&b, "control byte in a key name", "key 'bad?name'");
}

static void test_alignment_mutations(void) {
    printf("alignment mutations:\n");
    const uint32_t bad[] = {0, 3, 48};
    for (int i = 0; i < 3; i++) {
        wbuf b = {0};
        w_header(&b, 3, 0, 1);
        w_kv_u32(&b, "general.alignment", bad[i]);
        expect_fail(&b, bad[i] ? "alignment not a power of two" : "alignment 0", "power of two");
    }
    for (uint32_t a = 1; a <= 2; a++) {  // F32 data would sit at odd addresses (found by fuzz_gguf)
        wbuf b = {0};
        w_header(&b, 3, 0, 1);
        w_kv_u32(&b, "general.alignment", a);
        expect_fail(&b, "alignment below 4", "is below 4: tensor data is read in place as 4-byte floats");
    }
    wbuf b = {0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "general.alignment", GGUF_STRING);
    w_str(&b, "32");
    expect_fail(&b, "alignment as a string", "key 'general.alignment': expected u32, found string");
    b = (wbuf){0};
    w_header(&b, 3, 0, 1);
    w_key(&b, "general.alignment", GGUF_UINT64);
    w_u64(&b, 32);
    expect_fail(&b, "alignment as u64", "expected u32, found u64");
    b = (wbuf){0};  // offset 32 is aligned to the default 32 but not to 64
    w_header(&b, 3, 1, 1);
    w_kv_u32(&b, "general.alignment", 64);
    w_tinfo(&b, "x", 1, (uint64_t[]){8}, 0, 32);
    size_t start = w_pad(&b, 64);
    w_data(&b, start, 64);
    expect_fail(&b, "offset not a multiple of 64", "not a multiple of the alignment 64");
}

static void test_tensor_mutations(void) {
    wbuf b;
    printf("tensor mutations:\n");
    b = one_tensor("x", 1, (uint64_t[]){8}, 0, 0, 32);
    expect_ok(&b, "F32 [8] ending exactly at the end");
    b = one_tensor("x", 1, (uint64_t[]){8}, 0, 0, 31);
    expect_fail(&b, "data one byte short", "past the end");
    b = one_tensor("x", 1, (uint64_t[]){8}, 0, 64, 32);
    expect_fail(&b, "offset past the end", "past the end");
    b = one_tensor("x", 1, (uint64_t[]){8}, 0, 1ull << 63, 32);
    expect_fail(&b, "offset 2^63", "past the end");
    b = one_tensor("x", 1, (uint64_t[]){8}, 0, ~0ull - 31, 32);
    expect_fail(&b, "offset near 2^64 (sum overflows)", "past the end");
    b = one_tensor("x", 1, (uint64_t[]){8}, 0, 4, 64);
    expect_fail(&b, "offset 4 with alignment 32", "not a multiple of the alignment 32");
    b = one_tensor("x", 2, (uint64_t[]){1ull << 32, 1ull << 32}, 0, 0, 32);
    expect_fail(&b, "ne product 2^64", "overflow");
    b = one_tensor("x", 2, (uint64_t[]){1ull << 62, 2}, 0, 0, 32);
    expect_fail(&b, "ne product 2^63", "overflow");
    b = one_tensor("x", 1, (uint64_t[]){1ull << 62}, 28, 0, 32);
    expect_fail(&b, "F64 [2^62]: bytes overflow", "overflow");
    b = one_tensor("x", 2, (uint64_t[]){8, 0}, 0, 0, 32);
    expect_fail(&b, "dimension 0", "ne[1] = 0");
    b = one_tensor("x", 1, (uint64_t[]){1ull << 63}, 0, 0, 32);
    expect_fail(&b, "dimension 2^63", "ne[0] = 9223372036854775808");
    b = one_tensor("x", 0, NULL, 0, 0, 32);
    expect_fail(&b, "n_dims 0", "n_dims = 0");
    b = one_tensor("x", 5, (uint64_t[]){1, 1, 1, 1, 1}, 0, 0, 32);
    expect_fail(&b, "n_dims 5", "n_dims = 5");
    b = one_tensor("blk.0.attn_q.weight", 1, (uint64_t[]){8}, 99, 0, 32);
    expect_fail(&b, "unknown type 99", "tensor 'blk.0.attn_q.weight': unknown ggml type 99");
    b = one_tensor("x", 1, (uint64_t[]){100}, 12, 0, 256);
    expect_fail(&b, "Q4_K row of 100", "not a multiple of the Q4_K block size 256");
    b = one_tensor("x", 1, (uint64_t[]){256}, 16, 0, 66);
    expect_ok(&b, "IQ2_XXS parses");
    b = (wbuf){0};
    w_header(&b, 3, 2, 0);
    w_tinfo(&b, "blk.0.ffn_up.weight", 1, (uint64_t[]){8}, 0, 0);
    w_tinfo(&b, "blk.0.ffn_up.weight", 1, (uint64_t[]){8}, 0, 32);
    size_t start = w_pad(&b, 32);
    w_data(&b, start, 64);
    expect_fail(&b, "duplicate tensor", "duplicate tensor 'blk.0.ffn_up.weight'");
    b = (wbuf){0};
    w_header(&b, 3, 1, 0);
    w_u64(&b, 1ull << 60);
    w_raw(&b, "0123456789abcdef0123456789abcdef", 32);
    expect_fail(&b, "tensor name length 2^60", "past the end");
}

// ---- 2. real files ----

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    long sz = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(sz > 0 ? (size_t)sz : 1);
    *n = p && sz > 0 ? fread(p, 1, (size_t)sz, fp) : 0;
    fclose(fp);
    return p;
}

static int count_type(const gguf_file *f, uint32_t type) {
    int n = 0;
    for (uint64_t i = 0; i < f->n_tensors; i++) n += f->tensors[i].type == type;
    return n;
}

// The k-th string (0-based) of a string array, by walking it.
static gguf_str nth_str(const gguf_kv *kv, uint64_t k) {
    const uint8_t *p = kv->arr_data;
    gguf_str s = {0};
    for (uint64_t i = 0; i <= k && i < kv->arr_n; i++) s = gguf_arr_next_str(&p);
    return s;
}

static uint32_t u32_of(const gguf_file *f, const char *key) {
    uint32_t v = 0xdeadbeef;
    char err[ERR_LEN];
    if (gguf_get_u32(f, key, &v, err) != 0) return 0xdeadbeef;
    return v;
}

static int str_is(const gguf_file *f, const char *key, const char *want) {
    gguf_str s;
    char err[ERR_LEN];
    return gguf_get_str(f, key, &s, err) == 0 && gguf_str_eq(s, want);
}

// Invariants any parsed file must satisfy, and that every index lookup finds its entry.
static void check_generic(const gguf_file *f, const char *path) {
    for (uint64_t i = 0; i < f->n_kv; i++) {
        char key[256];
        snprintf(key, sizeof key, "%.*s", (int)(f->kv[i].key.len < 255 ? f->kv[i].key.len : 255), f->kv[i].key.ptr);
        CHECK(gguf_find(f, key) == &f->kv[i], "%s: gguf_find('%s')", path, key);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 255 ? t->name.len : 255), t->name.ptr);
        CHECK(gguf_find_tensor(f, name) == t, "%s: gguf_find_tensor('%s')", path, name);
        const uint8_t *d = t->data;
        CHECK(d >= f->base + f->data_offset && d + t->nbytes <= f->base + f->size, "%s: '%s' data in file", path, name);
    }
    CHECK(f->data_offset <= f->size, "%s: data_offset", path);
}

// stories260K.gguf (llama.cpp's llama2.c converter, all F32): values from the Python
// struct reader; n_tensors 48 = 0x30 and n_kv 19 = 0x13 also read off `xxd`.
static void check_stories(const gguf_file *f) {
    CHECK(f->version == 3 && f->n_tensors == 48 && f->n_kv == 19, "stories header");
    CHECK(f->alignment == 32 && f->data_offset == 14176, "stories data_offset %llu", (unsigned long long)f->data_offset);
    CHECK(str_is(f, "general.architecture", "llama"), "stories arch");
    CHECK(u32_of(f, "llama.embedding_length") == 64 && u32_of(f, "llama.block_count") == 5 &&
          u32_of(f, "llama.feed_forward_length") == 172 && u32_of(f, "llama.attention.head_count") == 8 &&
          u32_of(f, "llama.attention.head_count_kv") == 4 && u32_of(f, "llama.context_length") == 128,
          "stories hyperparameters");
    CHECK(u32_of(f, "tokenizer.ggml.seperator_token_id") == 4294967295u, "u32 max round-trips");
    float eps = 0;
    char err[ERR_LEN];
    CHECK(gguf_get_f32(f, "llama.attention.layer_norm_rms_epsilon", &eps, err) == 0 && eps == 1e-5f, "rms eps");
    const gguf_tensor *t = gguf_find_tensor(f, "token_embd.weight");
    CHECK(t && t->n_dims == 2 && t->ne[0] == 64 && t->ne[1] == 512 && t->type == 0 && t->offset == 0 &&
          t->nbytes == 64 * 512 * 4 && t->data == f->base + 14176, "token_embd.weight");
    t = gguf_find_tensor(f, "output_norm.weight");
    CHECK(t && t->n_dims == 1 && t->ne[0] == 64 && t->offset == 131072, "output_norm.weight");
    t = gguf_find_tensor(f, "blk.4.ffn_down.weight");
    CHECK(t && t->ne[0] == 172 && t->ne[1] == 64 && t->offset == 1082880, "blk.4.ffn_down.weight");
    const gguf_kv *kv = NULL;
    CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING, 512, &kv, err) == 0, "512 tokens: %s", err);
    if (kv) {
        CHECK(gguf_str_eq(nth_str(kv, 0), "<unk>") && gguf_str_eq(nth_str(kv, 2), "</s>") &&
              gguf_str_eq(nth_str(kv, 3), "<0x00>") && gguf_str_eq(nth_str(kv, 100), "<0x61>") &&
              gguf_str_eq(nth_str(kv, 511), "\xe2\x80\x8a"), "stories token strings");
    }
    CHECK(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_FLOAT32, 512, &kv, err) == 0, "scores: %s", err);
    float s300 = 0;
    if (kv) memcpy(&s300, kv->arr_data + 300 * 4, 4);
    CHECK(s300 == -41.0f, "scores[300] = %g", s300);
    CHECK(gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_INT32, 512, &kv, err) == 0, "token_type: %s", err);
}

static void check_model_facts(const gguf_file *f, const char *base) {
    char err[ERR_LEN];
    if (strcmp(base, "stories260K.gguf") == 0) check_stories(f);
    if (strcmp(base, "stories260K-Q8_0.gguf") == 0)
        CHECK(f->data_offset == 14240 && count_type(f, 8) == 32 && count_type(f, 0) == 11 && count_type(f, 1) == 5 &&
              u32_of(f, "general.file_type") == 7, "stories Q8_0 types");
    if (strcmp(base, "synth-llama-Q4_K_M.gguf") == 0) {
        CHECK(f->n_tensors == 39 && count_type(f, 12) == 25 && count_type(f, 14) == 5 && count_type(f, 0) == 9,
              "synth Q4_K_M: Q4_K/Q6_K/F32 counts");
        const gguf_tensor *t = gguf_find_tensor(f, "output.weight");
        CHECK(t && t->type == 14 && t->ne[0] == 256 && t->ne[1] == 32000 && t->nbytes == 32000 * 210, "output Q6_K");
        CHECK(u32_of(f, "general.alignment") == 32 && u32_of(f, "llama.vocab_size") == 32000, "synth kvs");
        int bos = -1, eos = -1;
        CHECK(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &bos, err) == 0 && bos == 1 &&
              gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &eos, err) == 0 && eos == 0, "add_bos/eos");
        const gguf_kv *kv = NULL;
        CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING, 32000, &kv, err) == 0 && kv &&
              gguf_str_eq(nth_str(kv, 31999), "\xe7\xbb\x99"), "synth last token");
    }
    if (strcmp(base, "synth-qwen2-Q8_0.gguf") == 0) {
        float fb = 0;
        CHECK(str_is(f, "general.architecture", "qwen2") &&
              gguf_get_f32(f, "qwen2.rope.freq_base", &fb, err) == 0 && fb == 1e6f, "qwen2 kvs");
        const gguf_tensor *t = gguf_find_tensor(f, "blk.0.attn_k.bias");
        CHECK(t && t->n_dims == 1 && t->ne[0] == 128 && t->type == 0 && t->offset == 17409024, "qwen2 bias");
    }
}

// Vocab-only files (no tensors, no trailing padding): counts from the Python reader.
static void check_vocab_facts(const gguf_file *f, const char *base) {
    static const struct {
        const char *file;
        uint64_t n_tokens, n_merges;  // n_merges 0: no merges key
        const char *last_token, *last_merge;
        uint32_t bos, eos;
    } V[] = {
        {"ggml-vocab-gpt-2.gguf", 50257, 50000, "<|endoftext|>", "\xc4\xa0\x67\x20\x61\x7a\x65\x64", 50256, 50256},
        {"ggml-vocab-llama-bpe.gguf", 128256, 280147, "<|reserved_special_token_250|>",
         "\xc3\xa9\xc4\xb6\x20\xc2\xa6", 128000, 128001},
        {"ggml-vocab-qwen2.gguf", 151936, 151387, "[PAD151935]", "\xc3\xa2\xc2\xbd\x20\xc4\xb9", 151643, 151643},
        {"ggml-vocab-llama-spm.gguf", 32000, 0, "\xe7\xbb\x99", NULL, 1, 2},
        {"ggml-vocab-phi-3.gguf", 32064, 0, "[PAD32063]", NULL, 1, 32000},
    };
    char err[ERR_LEN];
    for (size_t i = 0; i < sizeof V / sizeof V[0]; i++) {
        if (strcmp(base, V[i].file) != 0) continue;
        CHECK(f->n_tensors == 0 && f->data_offset == f->size, "%s: no tensors", base);
        const gguf_kv *kv = NULL;
        CHECK(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING, V[i].n_tokens, &kv, err) == 0 && kv &&
              gguf_str_eq(nth_str(kv, V[i].n_tokens - 1), V[i].last_token), "%s tokens: %s", base, err);
        if (V[i].n_merges)
            CHECK(gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_STRING, V[i].n_merges, &kv, err) == 0 && kv &&
                  gguf_str_eq(nth_str(kv, V[i].n_merges - 1), V[i].last_merge), "%s merges: %s", base, err);
        CHECK(u32_of(f, "tokenizer.ggml.bos_token_id") == V[i].bos && u32_of(f, "tokenizer.ggml.eos_token_id") == V[i].eos,
              "%s bos/eos", base);
    }
}

static void test_real_files(const char *shared) {
    printf("real files:\n");
    const char *dirs[] = {"models/gguf", "vocab"};
    int n_files = 0;
    for (int d = 0; d < 2; d++) {
        char pattern[1024];
        snprintf(pattern, sizeof pattern, "%s/%s/*.gguf", shared, dirs[d]);
        glob_t g;
        if (glob(pattern, 0, NULL, &g) != 0) continue;
        for (size_t i = 0; i < g.gl_pathc; i++) {
            const char *path = g.gl_pathv[i], *base = strrchr(path, '/') + 1;
            gguf_file f;
            char err[ERR_LEN];
            int rc = gguf_open(&f, path, err);
            CHECK(rc == 0, "%s", err);
            if (rc == 0) {
                check_generic(&f, path);
                check_model_facts(&f, base);
                check_vocab_facts(&f, base);
                printf("  %-28s v%u %3llu tensors %2llu keys\n", base, f.version, (unsigned long long)f.n_tensors,
                       (unsigned long long)f.n_kv);
            }
            gguf_close(&f);
            n_files++;
        }
        globfree(&g);
    }
    // ../shared grows (new architectures and quant types): every file present
    // must parse, and at least the 13 model + 5 vocab files of its first
    // version must be there, so that a wrong path cannot pass by finding none
    CHECK(n_files >= 18, "expected at least 13 model + 5 vocab GGUFs, found %d", n_files);
}

// ---- 3. truncations ----

#define Q8_DATA_OFFSET 14240  // stories260K-Q8_0.gguf: end of header + padding (Python reader)
#define Q8_LAST_END 379152    // end of its last tensor's data; the file has 16 bytes of padding after it

// Parses an exactly-sized copy of all[0..len): returns 1 when it failed cleanly;
// *past is set when the message says "past the end".
static int truncation_fails(const uint8_t *all, size_t len, int *past) {
    gguf_file f;
    uint8_t *copy;
    char err[ERR_LEN];
    int rc = parse_copy(&f, all, len, &copy, err);
    int clean = rc == -1 && err[0] && !strchr(err, '\n') && !f.kv && !f.tensors;
    *past = strstr(err, "past the end") != NULL;
    gguf_close(&f);
    free(copy);
    return clean;
}

static void test_truncations(const char *shared) {
    char path[1024];
    snprintf(path, sizeof path, "%s/models/gguf/stories260K-Q8_0.gguf", shared);
    size_t n = 0;
    uint8_t *all = read_all(path, &n);
    CHECK(all && n == 379168, "read %s (%zu bytes)", path, n);
    if (!all || n != 379168) { free(all); return; }
    int bad = 0, n_head = 0, n_data = 0, past_data = 0, past;
    for (size_t len = 0; len <= Q8_DATA_OFFSET; len++, n_head++) bad += !truncation_fails(all, len, &past);
    // Through the data section, ending one byte short of the last tensor's end.
    for (size_t len = Q8_DATA_OFFSET + 1;; len += 997) {
        if (len >= Q8_LAST_END) len = Q8_LAST_END - 1;
        bad += !truncation_fails(all, len, &past);
        past_data += past;
        n_data++;
        if (len == Q8_LAST_END - 1) break;
    }
    CHECK(bad == 0, "%d of %d truncations did not fail cleanly", bad, n_head + n_data);
    CHECK(past_data == n_data, "%d of %d data-section truncations said 'past the end'", past_data, n_data);
    for (size_t l = Q8_LAST_END; l <= n; l += 8) {  // the trailing padding may go
        gguf_file f;
        uint8_t *copy;
        char err[ERR_LEN];
        CHECK(parse_copy(&f, all, l, &copy, err) == 0, "length %zu (all tensors present): %s", l, err);
        gguf_close(&f);
        free(copy);
    }
    printf("truncations of stories260K-Q8_0.gguf: %d header-region and %d data-section prefixes failed cleanly\n",
           n_head, n_data);
    free(all);
}

static void test_open_errors(const char *shared) {
    printf("gguf_open errors:\n");
    gguf_file f;
    char err[ERR_LEN];
    CHECK(gguf_open(&f, "/nonexistent/x.gguf", err) == -1 && strstr(err, "/nonexistent/x.gguf: cannot open"), "%s", err);
    gguf_close(&f);
    CHECK(gguf_open(&f, "/tmp", err) == -1 && strstr(err, "/tmp: is a directory"), "%s", err);
    gguf_close(&f);
    char tmp[] = "/tmp/test_gguf_XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    CHECK(gguf_open(&f, tmp, err) == -1 && strstr(err, "empty file") && strncmp(err, tmp, strlen(tmp)) == 0, "%s", err);
    printf("  %s\n", err);
    gguf_close(&f);
    // A truncated real header: the message must start with the path.
    char src[1024];
    snprintf(src, sizeof src, "%s/models/gguf/stories260K.gguf", shared);
    size_t n = 0;
    uint8_t *all = read_all(src, &n);
    if (all && n > 5000) {
        CHECK(write(fd, all, 5000) == 5000, "write");
        CHECK(gguf_open(&f, tmp, err) == -1 && strncmp(err, tmp, strlen(tmp)) == 0 && strstr(err, "past the end"),
              "%s", err);
        printf("  %s\n", err);
        gguf_close(&f);
    }
    free(all);
    close(fd);
    unlink(tmp);
}

// mapping.c: the file lands at a 2 MiB-aligned address (2 MiB pages need
// it), and map_populate, which may map the file again in place after
// dropping its page cache, leaves the same bytes at the same address. The
// share of 2 MiB pages depends on the kernel and filesystem: printed only.
static void test_mapping(void) {
    printf("mapping:\n");
    char tmp[] = "/tmp/test_map_XXXXXX";
    const int fd = mkstemp(tmp);
    CHECK(fd >= 0, "mkstemp");
    if (fd < 0) return;
    const size_t n = (size_t)13 << 20;  // 6.5 huge pages: the re-read path runs for files of 8 MiB and up
    uint8_t *want = malloc(n);
    uint64_t r = 0x2545F4914F6CDD1Dull;
    for (size_t i = 0; want && i < n; i++) r ^= r << 13, r ^= r >> 7, r ^= r << 17, want[i] = (uint8_t)r;
    for (size_t off = 0; want && off < n; off += 65536)  // small writes: small page-cache folios
        CHECK(write(fd, want + off, 65536) == 65536, "write");
    CHECK(fsync(fd) == 0, "fsync");  // clean pages, which the page cache can drop
    file_map m;
    char err[ERR_LEN];
    CHECK(map_open(&m, tmp, err) == 0, "%s", err);
    if (m.base && want) {
        CHECK(((uintptr_t)m.base & (((uintptr_t)2 << 20) - 1)) == 0, "base %p is not 2 MiB-aligned", (void *)m.base);
        const uint8_t *before = m.base;
        long long huge = 0;
        CHECK(map_populate(&m, &huge, err) == 0, "%s", err);
        CHECK(m.base == before && m.size == n && memcmp(m.base, want, n) == 0, "the mapping changed in map_populate");
        CHECK(huge >= -1 && huge <= (long long)n, "%lld bytes in 2 MiB pages of %zu", huge, n);
        printf("  %zu bytes, %lld of them in 2 MiB pages after map_populate\n", n, huge);
        CHECK(map_populate(&m, &huge, err) == 0 && memcmp(m.base, want, n) == 0, "a second map_populate");
    }
    map_close(&m);
    CHECK(m.base == NULL, "map_close leaves the map zeroed");
    map_close(&m);  // twice: nothing to do
    free(want);
    close(fd);
    unlink(tmp);
}

int main(void) {
    const char *shared = getenv("SHARED");
    if (!shared || !*shared) shared = "../shared";
    test_valid();
    test_header_mutations();
    test_kv_mutations();
    test_kv_type_mutations();
    test_alignment_mutations();
    test_tensor_mutations();
    test_open_errors(shared);
    test_mapping();
    char probe[1024];
    snprintf(probe, sizeof probe, "%s/models/gguf/stories260K-Q8_0.gguf", shared);
    if (access(probe, R_OK) == 0) {
        test_real_files(shared);
        test_truncations(shared);
    } else {
        CHECK(0, "%s not found: set SHARED to the shared data directory", probe);
    }
    printf("test_gguf: %d checks, %d failed\n", n_checks, n_failed);
    return n_failed ? 1 : 0;
}
