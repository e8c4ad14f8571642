// gguf.h — a read-only, bounds-checked view of a GGUF file.
//
// GGUF layout (v2 and v3; all integers little-endian):
//   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
//   n_kv ×  { string key | u32 value_type | value }
//   n_tensors × { string name | u32 n_dims | u64 ne[n_dims] | u32 ggml_type | u64 offset }
//   padding to general.alignment (default 32) | tensor data (offsets relative to here,
//   each a multiple of the alignment)
// where string = u64 length + bytes (not NUL-terminated), and an array value is
//   u32 element_type | u64 count | elements.
// ne[0] is the innermost (contiguous) dimension: a weight [rows=out, cols=in] has
// ne[0] = in, ne[1] = out.
//
// gguf_parse is a pure function over a buffer: it trusts nothing, checking every
// length, count, offset and dimension product against the buffer size, and
// fails with one line naming the key or tensor. After a successful parse every
// pointer in the structures below points inside the buffer and every size fits.
#ifndef QUILL_GGUF_H
#define QUILL_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "mapping.h"

enum gguf_vtype {
    GGUF_UINT8 = 0, GGUF_INT8 = 1, GGUF_UINT16 = 2, GGUF_INT16 = 3,
    GGUF_UINT32 = 4, GGUF_INT32 = 5, GGUF_FLOAT32 = 6, GGUF_BOOL = 7,
    GGUF_STRING = 8, GGUF_ARRAY = 9, GGUF_UINT64 = 10, GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
};

typedef struct {
    const char *ptr;  // into the file; NOT NUL-terminated
    uint64_t len;
} gguf_str;

typedef struct {
    gguf_str key;
    uint32_t type;          // enum gguf_vtype
    // scalars (type != STRING/ARRAY): the value widened; exactly one is meaningful
    uint64_t u;             // unsigned ints and bool
    int64_t i;              // signed ints
    double f;               // float32/float64
    gguf_str s;             // type == GGUF_STRING
    // arrays (type == GGUF_ARRAY)
    uint32_t arr_type;      // element type (never ARRAY: nested arrays are rejected)
    uint64_t arr_n;         // element count
    const uint8_t *arr_data;  // first element; strings are (u64 len, bytes) back to back
} gguf_kv;

#define GGUF_MAX_DIMS 4

typedef struct {
    gguf_str name;
    uint32_t n_dims;
    int64_t ne[GGUF_MAX_DIMS];  // unused dims are 1
    uint32_t type;               // ggml type id (see quant.h); may be unsupported
    uint64_t offset;             // relative to the data section
    const void *data;            // inside the buffer
    uint64_t nbytes;             // checked to fit in the buffer
} gguf_tensor;

// Open-addressing hash from a name to its entry: slot[h & mask] holds the entry's
// index + 1 (0 = empty). Built by gguf_parse; makes gguf_find/gguf_find_tensor O(1)
// and duplicate detection linear even for hostile files.
typedef struct {
    uint64_t *slot;  // owned; mask + 1 slots (a power of two, at least 2x the entries)
    uint64_t mask;
} gguf_index;

typedef struct {
    const uint8_t *base;  // the whole file (mapped read-only by gguf_open)
    size_t size;
    file_map map;         // gguf_open's mapping of base (zeroed after gguf_parse of a caller's buffer)
    uint32_t version;
    uint64_t n_kv;
    gguf_kv *kv;          // owned array of n_kv
    uint64_t n_tensors;
    gguf_tensor *tensors; // owned array of n_tensors
    uint64_t alignment;
    uint64_t data_offset; // start of the tensor data section in the file (for a file
                          // without tensors that ends unpadded: the file size)
    gguf_index kv_index;      // key -> kv
    gguf_index tensor_index;  // tensor name -> tensor
} gguf_file;

// mmaps path read-only and parses it. On failure returns -1 with err set
// (prefixed by the path) and leaves f safe to gguf_close.
int gguf_open(gguf_file *f, const char *path, char *err);
// Parses a buffer the caller keeps alive. Tensor data must lie inside it.
int gguf_parse(gguf_file *f, const void *buf, size_t size, char *err);
void gguf_close(gguf_file *f);

const gguf_kv *gguf_find(const gguf_file *f, const char *key);  // NULL if absent
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

// Typed getters. Return 0 on success; 1 if the key is absent (out untouched);
// -1 with err set if present with a type that cannot convert (e.g. string for
// u32, negative for unsigned, out of range).
int gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out, char *err);
int gguf_get_f32(const gguf_file *f, const char *key, float *out, char *err);
int gguf_get_bool(const gguf_file *f, const char *key, int *out, char *err);
int gguf_get_str(const gguf_file *f, const char *key, gguf_str *out, char *err);
// Array getter: checks the element type (and, unless want_n is 0, the count).
int gguf_get_arr(const gguf_file *f, const char *key, uint32_t elem_type, uint64_t want_n,
                 const gguf_kv **out, char *err);

// Walks a validated string array: *p starts at kv->arr_data; returns the next string
// and advances *p. Only valid for GGUF_STRING arrays from a parsed file.
gguf_str gguf_arr_next_str(const uint8_t **p);

// Compare a gguf_str with a C string.
int gguf_str_eq(gguf_str s, const char *c);

const char *gguf_vtype_name(uint32_t t);

#endif
