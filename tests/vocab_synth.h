// tests/vocab_synth.h — tiny synthetic vocabularies for the C tests: a GGUF
// with no tensors written in memory, and the tokenizer loaded from it.
#ifndef QUILL_TESTS_VOCAB_SYNTH_H
#define QUILL_TESTS_VOCAB_SYNTH_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "tokenizer.h"

typedef struct {
    uint8_t *b;
    size_t n, cap;
} gbuf;

static inline void put(gbuf *g, const void *p, size_t n) {
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2;
        g->b = realloc(g->b, g->cap);
    }
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static inline void put_u32(gbuf *g, uint32_t v) { put(g, &v, 4); }
static inline void put_u64(gbuf *g, uint64_t v) { put(g, &v, 8); }
static inline void put_str(gbuf *g, const char *s) { put_u64(g, strlen(s)), put(g, s, strlen(s)); }
static inline void kv_head(gbuf *g, const char *key, uint32_t type) { put_str(g, key), put_u32(g, type); }

// A vocabulary: pieces with scores and types (1 normal, 2 unknown, 3 control,
// 6 byte); ids are positions.
typedef struct {
    const char *piece;
    float score;
    int32_t type;
} vpiece;

// GGUF v3 with no tensors; extra_key adds one u32 key (e.g. a bad token id).
static inline gbuf make_vocab(const char *model, const vpiece *v, int n, int space_prefix, const char *extra_key,
                              uint32_t extra_val, int n_scores) {
    gbuf g = {0};
    put(&g, "GGUF", 4), put_u32(&g, 3), put_u64(&g, 0), put_u64(&g, 5 + (extra_key != NULL));
    kv_head(&g, "tokenizer.ggml.model", GGUF_STRING), put_str(&g, model);
    kv_head(&g, "tokenizer.ggml.tokens", GGUF_ARRAY), put_u32(&g, GGUF_STRING), put_u64(&g, (uint64_t)n);
    for (int i = 0; i < n; i++) put_str(&g, v[i].piece);
    kv_head(&g, "tokenizer.ggml.scores", GGUF_ARRAY), put_u32(&g, GGUF_FLOAT32), put_u64(&g, (uint64_t)n_scores);
    for (int i = 0; i < n_scores; i++) put(&g, &v[i < n ? i : 0].score, 4);
    kv_head(&g, "tokenizer.ggml.token_type", GGUF_ARRAY), put_u32(&g, GGUF_INT32), put_u64(&g, (uint64_t)n);
    for (int i = 0; i < n; i++) put(&g, &v[i].type, 4);
    kv_head(&g, "tokenizer.ggml.add_space_prefix", GGUF_BOOL);
    uint8_t b = (uint8_t)space_prefix;
    put(&g, &b, 1);
    if (extra_key) kv_head(&g, extra_key, GGUF_UINT32), put_u32(&g, extra_val);
    return g;
}

// Parses g and loads a tokenizer; returns tok_load's rc with err set.
static inline int load_buf(gbuf *g, tokenizer **t, char *err) {
    gguf_file f = {0};
    int rc = gguf_parse(&f, g->b, g->n, err);
    if (rc == 0) rc = tok_load(t, &f, err);
    gguf_close(&f);
    return rc;
}

#endif
