// test_tokenizer.c — tokenizer.c against independent references:
//   * llama.cpp's own tokenizer test vectors ($SHARED/vocab/*.inp/.out): every
//     string must encode (no BOS, parse_special off — as test-tokenizer-0 does)
//     to exactly llama.cpp's ids, and those reference ids must decode back;
//   * stories260K ids worked out by hand from its vocabulary (and cross-checked
//     with a separately written naive O(n^2) SentencePiece merge in Python);
//   * tiny synthetic vocabularies (GGUF built in memory) whose merges follow
//     from the algorithm by hand: score priority, leftmost ties, byte fallback;
//   * hostile inputs (invalid UTF-8, NULs, 1 MB of spaces, 10 MB of one letter)
//     that must round-trip, and the UTF-8 stream splitting characters.
// Exits 0 only when every check passed.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // memmem (the Makefile passes -D_GNU_SOURCE; this keeps other builds working)
#endif
#include "gguf.h"
#include "tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_fail, g_pass;  // test-program tallies (not library state)

#define CHECK(cond, ...)                                              \
    do {                                                              \
        if (cond) {                                                   \
            g_pass++;                                                 \
        } else {                                                      \
            g_fail++;                                                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);      \
            fprintf(stderr, __VA_ARGS__);                             \
            fputc('\n', stderr);                                      \
        }                                                             \
    } while (0)

static const char *shared_dir(void) {
    const char *s = getenv("SHARED");
    return s && *s ? s : "../shared";
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) buf = realloc(buf, (cap *= 2) + 1);
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    *len = n;
    return buf;
}

// Opens a GGUF, loads its tokenizer and closes the file (the tokenizer must not
// keep pointers into it: ASan would catch a use after munmap).
static tokenizer *load_tok(const char *rel) {
    char path[1024], err[ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/%s", shared_dir(), rel);
    gguf_file f = {0};
    if (gguf_open(&f, path, err) < 0) {
        CHECK(0, "gguf_open %s: %s", path, err);
        gguf_close(&f);
        return NULL;
    }
    tokenizer *t = NULL;
    int rc = tok_load(&t, &f, err);
    gguf_close(&f);
    CHECK(rc == 0, "tok_load %s: %s", path, err);
    return rc == 0 ? t : NULL;
}

// Decodes ids as a stream (each token with its predecessor); malloc'd, *len set.
static char *decode_all(const tokenizer *t, const int32_t *ids, int n, size_t *len) {
    size_t cap = (size_t)n * (size_t)tok_max_piece_len(t) + 1, w = 0;
    char *out = malloc(cap);
    int32_t prev = -1;
    for (int i = 0; i < n; i++) {
        int k = tok_decode(t, prev, ids[i], out + w, cap - w);
        if (k < 0) {
            CHECK(0, "tok_decode(%d) failed", ids[i]);
            break;
        }
        w += (size_t)k;
        prev = ids[i];
    }
    out[w] = '\0';
    *len = w;
    return out;
}

static int ids_equal(const int32_t *a, int na, const int32_t *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

static void print_ids(const char *what, const int32_t *ids, int n) {
    fprintf(stderr, "    %s:", what);
    for (int i = 0; i < n && i < 64; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, n > 64 ? " ...\n" : "\n");
}

// Encodes and compares with want[]; prints both on mismatch.
static void check_encode(const tokenizer *t, const char *text, size_t len, int bos, int special,
                         const int32_t *want, int n_want, const char *label) {
    int32_t *ids;
    int n;
    char err[ERR_LEN] = "";
    int rc = tok_encode(t, text, len, bos, special, &ids, &n, err);
    CHECK(rc == 0, "%s: tok_encode failed: %s", label, err);
    if (rc != 0) return;
    int ok = ids_equal(ids, n, want, n_want);
    CHECK(ok, "%s: ids differ for \"%.*s\"", label, (int)(len < 80 ? len : 80), text);
    if (!ok) print_ids("got ", ids, n), print_ids("want", want, n_want);
    free(ids);
}

// Encodes then decodes; the bytes must come back exactly.
static void check_roundtrip(const tokenizer *t, const char *text, size_t len, int bos, const char *label) {
    int32_t *ids;
    int n;
    char err[ERR_LEN] = "";
    if (tok_encode(t, text, len, bos, 0, &ids, &n, err) != 0) {
        CHECK(0, "%s: tok_encode failed: %s", label, err);
        return;
    }
    for (int i = 0; i < n; i++) CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(t), "%s: id %d out of range", label, ids[i]);
    size_t dlen;
    char *dec = decode_all(t, ids, n, &dlen);
    CHECK(dlen == len && memcmp(dec, text, len) == 0, "%s: round trip differs (%zu bytes in, %zu out)", label, len, dlen);
    free(dec);
    free(ids);
}

// ---- llama.cpp's test vectors ----

#define VOCAB_SEP "\n__ggml_vocab_test__\n"

// Splits .inp the way llama.cpp's test-tokenizer-0 does: on VOCAB_SEP, the text
// after the last separator only when non-empty. Returns the count (<= max).
static int split_inputs(char *raw, size_t len, char **s, size_t *slen, int max) {
    size_t sep = strlen(VOCAB_SEP), pos = 0;
    int n = 0;
    while (pos < len && n < max) {
        char *next = memmem(raw + pos, len - pos, VOCAB_SEP, sep);
        size_t end = next ? (size_t)(next - raw) : len;
        s[n] = raw + pos;
        slen[n++] = end - pos;
        if (!next) break;
        pos = end + sep;
    }
    return n;
}

// Parses one .out line of space-separated ids; returns the count.
static int parse_ids(char *line, int32_t *ids, int max) {
    int n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(line, " ", &save); tok && n < max; tok = strtok_r(NULL, " ", &save))
        ids[n++] = (int32_t)strtol(tok, NULL, 10);
    return n;
}

static void test_vocab_vectors(const char *name) {
    char path[1024];
    size_t ilen, olen;
    snprintf(path, sizeof path, "%s/vocab/%s.inp", shared_dir(), name);
    char *inp = read_all(path, &ilen);
    snprintf(path, sizeof path, "%s/vocab/%s.out", shared_dir(), name);
    char *out = read_all(path, &olen);
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/%s", name);
    tokenizer *t = inp && out ? load_tok(rel) : NULL;
    CHECK(inp && out, "%s: missing .inp/.out under %s/vocab", name, shared_dir());
    if (!t) goto done;
    enum { MAX_TESTS = 256, MAX_IDS = 4096 };
    char *s[MAX_TESTS];
    size_t slen[MAX_TESTS];
    int n = split_inputs(inp, ilen, s, slen, MAX_TESTS);
    char *lines[MAX_TESTS];
    int n_lines = 0;
    for (char *line = out; line < out + olen && n_lines < MAX_TESTS;) {  // one id list per line
        char *nl = memchr(line, '\n', (size_t)(out + olen - line));
        if (nl) *nl = '\0';
        lines[n_lines++] = line;
        line = nl ? nl + 1 : out + olen;
    }
    CHECK(n == n_lines && n > 0, "%s: %d inputs but %d output lines", name, n, n_lines);
    static int32_t want[MAX_IDS];  // (static: 16 KB off the stack)
    for (int i = 0; i < n && i < n_lines; i++) {
        int nw = parse_ids(lines[i], want, MAX_IDS);
        char label[64];
        snprintf(label, sizeof label, "%s #%d", name, i);
        check_encode(t, s[i], slen[i], 0, 0, want, nw, label);
        size_t dlen;
        char *dec = decode_all(t, want, nw, &dlen);
        CHECK(dlen == slen[i] && memcmp(dec, s[i], dlen) == 0, "%s: reference ids decode to \"%s\"", label, dec);
        free(dec);
    }
    printf("%s: %d llama.cpp test strings\n", name, n);
done:
    tok_free(t);
    free(inp);
    free(out);
}

// ---- real models ----

// stories260K (llama2.c's 512-piece vocabulary): ids read off its piece list
// (▁Once=403 ▁upon=407 ▁a=261 ▁time=378, ...) and cross-checked with a naive
// Python merge written separately from tokenizer.c.
static void test_stories(void) {
    tokenizer *t = load_tok("models/gguf/stories260K.gguf");
    if (!t) return;
    CHECK(tok_n_vocab(t) == 512, "stories: n_vocab %d", tok_n_vocab(t));
    CHECK(tok_bos(t) == 1 && tok_eos(t) == 2 && tok_add_bos(t) == 1, "stories: bos %d eos %d add_bos %d", tok_bos(t),
          tok_eos(t), tok_add_bos(t));
    CHECK(strcmp(tok_model_name(t), "llama") == 0, "stories: model %s", tok_model_name(t));
    CHECK(tok_is_eog(t, 2) && !tok_is_eog(t, 1) && !tok_is_eog(t, 403), "stories: eog set");
    CHECK(strcmp(tok_piece(t, 403), "\xe2\x96\x81Once") == 0 && strcmp(tok_piece(t, 9999), "") == 0, "stories: pieces");
    static const int32_t once[] = {1, 403, 407, 261, 378};
    check_encode(t, "Once upon a time", 16, 1, 0, once, 5, "stories once");
    static const int32_t lily[] = {1, 317, 391, 266, 267};  // ▁Lily ▁want ed ▁to
    check_encode(t, "Lily wanted to", 14, 1, 0, lily, 5, "stories lily");
    // ▁He ll o , ▁ W or ld ! ▁ 1 2 3
    static const int32_t hello[] = {1, 346, 306, 414, 432, 410, 448, 304, 341, 443, 410, 475, 479, 472};
    check_encode(t, "Hello, World! 123", 17, 1, 0, hello, 14, "stories hello");
    static const int32_t bos_only[] = {1};
    check_encode(t, "", 0, 1, 0, bos_only, 1, "stories empty");
    check_encode(t, "", 0, 0, 0, bos_only, 0, "stories empty no bos");
    const char *texts[] = {"Once upon a time", "Lily wanted to play with her ball.", " two  spaces ",
                           "\n\nnewlines\n", "caf\xc3\xa9 \xe2\x82\xac 5", "Z"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        check_roundtrip(t, texts[i], strlen(texts[i]), 1, "stories roundtrip bos");
        check_roundtrip(t, texts[i], strlen(texts[i]), 0, "stories roundtrip");
    }
    char buf[64];
    CHECK(tok_decode(t, 1, 403, buf, sizeof buf) == 4 && memcmp(buf, "Once", 4) == 0, "stories: no space after BOS");
    CHECK(tok_decode(t, 378, 403, buf, sizeof buf) == 5 && memcmp(buf, " Once", 5) == 0, "stories: space mid-text");
    CHECK(tok_decode(t, 378, 2, buf, sizeof buf) == 0 && tok_decode(t, -1, 1, buf, sizeof buf) == 0, "stories: control");
    CHECK(tok_decode(t, -1, 13, buf, sizeof buf) == 1 && buf[0] == '\n', "stories: <0x0A> byte");
    CHECK(tok_decode(t, -1, 512, buf, sizeof buf) == -1 && tok_decode(t, -1, -1, buf, sizeof buf) == -1, "range");
    CHECK(tok_decode(t, 378, 403, buf, 2) == 2 && memcmp(buf, " O", 2) == 0, "stories: decode truncates at cap");
    tok_free(t);
}

// Special tokens: control ones only with parse_special, user-defined ones always.
static void test_special(void) {
    tokenizer *t = load_tok("vocab/ggml-vocab-llama-spm.gguf");
    if (t) {
        // "Hello" → 15043 (▁Hello) in llama.cpp's vectors; after <s> the raw text
        // gets the "▁" prefix again, so it is the same piece.
        static const int32_t want[] = {1, 15043, 2};
        check_encode(t, "<s>Hello</s>", 12, 0, 1, want, 3, "llama-spm parse_special");
        int32_t *ids;
        int n, has_special = 0;
        char err[ERR_LEN];
        CHECK(tok_encode(t, "<s>Hello</s>", 12, 0, 0, &ids, &n, err) == 0, "encode: %s", err);
        for (int i = 0; i < n; i++) has_special |= ids[i] == 1 || ids[i] == 2;
        CHECK(!has_special && n > 3, "llama-spm: <s> as plain text must not become a control token");
        free(ids);
        check_roundtrip(t, "<s>Hello</s>", 12, 0, "llama-spm plain <s>");
        tok_free(t);
    }
    t = load_tok("vocab/ggml-vocab-phi-3.gguf");
    if (!t) return;
    // phi-3's "</s>" (id 2) is user-defined: matched even without parse_special,
    // and (llama.cpp's phi-3 rule) it swallows the spaces after it.
    static const int32_t a[] = {15043, 2};
    check_encode(t, "Hello</s>", 9, 0, 0, a, 2, "phi-3 user-defined");
    static const int32_t b[] = {2, 15043};
    check_encode(t, "</s>   Hello", 12, 0, 0, b, 2, "phi-3 rstrip");
    CHECK(tok_eos(t) == 32000 && tok_is_eog(t, 32000) && tok_is_eog(t, 32007) && !tok_is_eog(t, 32010),
          "phi-3: eos/eot (<|end|>) end generation, <|user|> does not");
    static const int32_t c[] = {32010, 15043, 32007};  // <|user|> ▁Hello <|end|>
    check_encode(t, "<|user|>Hello<|end|>", 20, 0, 1, c, 3, "phi-3 control");
    check_roundtrip(t, "Hello</s>World", 14, 0, "phi-3 user-defined round trip");
    tok_free(t);
}

static void test_unsupported(void) {
    char path[1024], err[ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-gpt-2.gguf", shared_dir());
    gguf_file f = {0};
    if (gguf_open(&f, path, err) < 0) {
        CHECK(0, "gguf_open %s: %s", path, err);
        gguf_close(&f);
        return;
    }
    tokenizer *t = (tokenizer *)&f;  // must be reset to NULL on failure
    int rc = tok_load(&t, &f, err);
    gguf_close(&f);
    CHECK(rc == -1 && t == NULL && strstr(err, "tokenizer model 'gpt2' not supported yet"), "gpt2: rc %d err '%s'", rc,
          err);
}

// ---- synthetic vocabularies: a GGUF written in memory ----

typedef struct {
    uint8_t *b;
    size_t n, cap;
} gbuf;

static void put(gbuf *g, const void *p, size_t n) {
    if (g->n + n > g->cap) {
        g->cap = (g->n + n) * 2;
        g->b = realloc(g->b, g->cap);
    }
    memcpy(g->b + g->n, p, n);
    g->n += n;
}
static void put_u32(gbuf *g, uint32_t v) { put(g, &v, 4); }
static void put_u64(gbuf *g, uint64_t v) { put(g, &v, 8); }
static void put_str(gbuf *g, const char *s) { put_u64(g, strlen(s)), put(g, s, strlen(s)); }
static void kv_head(gbuf *g, const char *key, uint32_t type) { put_str(g, key), put_u32(g, type); }

// A vocabulary: pieces with scores and types; ids are positions.
typedef struct {
    const char *piece;
    float score;
    int32_t type;
} vpiece;

// GGUF v3 with no tensors; extra_u32 adds one u32 key (e.g. a bad token id).
static gbuf make_vocab(const char *model, const vpiece *v, int n, int space_prefix, const char *extra_key,
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
static int load_buf(gbuf *g, tokenizer **t, char *err) {
    gguf_file f = {0};
    int rc = gguf_parse(&f, g->b, g->n, err);
    if (rc == 0) rc = tok_load(t, &f, err);
    gguf_close(&f);
    return rc;
}

enum { N_BASE = 3 };
static const vpiece BASE[N_BASE] = {{"<unk>", 0, 2}, {"<s>", 0, 3}, {"</s>", 0, 3}};

// Merge order worked out by hand from the scores below.
static void test_synthetic_merges(void) {
    vpiece v[] = {BASE[0], BASE[1], BASE[2],
                  {"a", -1, 1},  {"b", -1, 1},   {"c", -1, 1},   {"ab", -5, 1}, {"bc", -2, 1}, {"aa", -3, 1},
                  {"<0x61>", 0, 6}, {"<0x7A>", 0, 6}, {"<0xC3>", 0, 6}, {"<0xA9>", 0, 6}, {"<0x20>", 0, 6}};
    int n = (int)(sizeof v / sizeof v[0]);
    gbuf g = make_vocab("llama", v, n, 0, NULL, 0, n);
    tokenizer *t = NULL;
    char err[ERR_LEN] = "";
    CHECK(load_buf(&g, &t, err) == 0, "synthetic load: %s", err);
    free(g.b);
    if (!t) return;
    static const int32_t abc[] = {3, 7};  // bc (-2) beats ab (-5): a + bc
    check_encode(t, "abc", 3, 0, 0, abc, 2, "score priority");
    static const int32_t aaa[] = {8, 3};  // equal scores: the leftmost "aa" merges first
    check_encode(t, "aaa", 3, 0, 0, aaa, 2, "leftmost tie");
    static const int32_t aaaa[] = {8, 8};
    check_encode(t, "aaaa", 4, 0, 0, aaaa, 2, "leftmost tie x2");
    static const int32_t zb[] = {10, 4};  // 'z' is no piece: its byte token
    check_encode(t, "zb", 2, 0, 0, zb, 2, "byte fallback");
    static const int32_t e[] = {11, 12};  // é = C3 A9 as bytes
    check_encode(t, "\xc3\xa9", 2, 0, 0, e, 2, "multibyte fallback");
    static const int32_t q[] = {0, 3};  // '?' has neither piece nor byte token: <unk>
    check_encode(t, "?a", 2, 0, 0, q, 2, "unk fallback");
    check_roundtrip(t, "abcaab", 6, 0, "synthetic round trip");
    tok_free(t);
}

static void expect_load_error(gbuf g, const char *needle, const char *label) {
    tokenizer *t = (tokenizer *)&g;
    char err[ERR_LEN] = "";
    int rc = load_buf(&g, &t, err);
    CHECK(rc == -1 && t == NULL && strstr(err, needle), "%s: rc %d err '%s' (want '%s')", label, rc, err, needle);
    if (rc == 0) tok_free(t);
    free(g.b);
}

static void test_synthetic_errors(void) {
    vpiece v[] = {BASE[0], BASE[1], BASE[2], {"a", 0, 1}};
    expect_load_error(make_vocab("bert", v, 4, 1, NULL, 0, 4), "tokenizer model 'bert' not supported yet", "bert");
    expect_load_error(make_vocab("llama", v, 4, 1, "tokenizer.ggml.bos_token_id", 4, 4), "bos_token_id", "bos range");
    expect_load_error(make_vocab("llama", v, 4, 1, NULL, 0, 3), "tokenizer.ggml.scores", "scores count");
    vpiece dup[] = {BASE[0], BASE[1], BASE[2], {"a", 0, 1}, {"a", 0, 1}};
    expect_load_error(make_vocab("llama", dup, 5, 1, NULL, 0, 5), "twice", "duplicate piece");
    // UINT32_MAX is how converters write "no such token" (stories260K's padding id).
    gbuf g = make_vocab("llama", v, 4, 1, "tokenizer.ggml.padding_token_id", UINT32_MAX, 4);
    tokenizer *t = NULL;
    char err[ERR_LEN] = "";
    CHECK(load_buf(&g, &t, err) == 0, "pad = UINT32_MAX: %s", err);
    tok_free(t);
    free(g.b);
}

// ---- hostile and multilingual input ----

// Encodes n bytes of text, checks the round trip and prints the time (a
// benchmark figure for humans: tests never assert on wall time).
static void timed_roundtrip(const tokenizer *t, const char *text, size_t n, const char *label) {
    double t0 = now_sec();
    int32_t *ids;
    int n_ids;
    char err[ERR_LEN] = "";
    int rc = tok_encode(t, text, n, 1, 0, &ids, &n_ids, err);
    double t1 = now_sec();
    CHECK(rc == 0, "%s: %s", label, err);
    if (rc != 0) return;
    size_t dlen;
    char *dec = decode_all(t, ids, n_ids, &dlen);
    CHECK(dlen == n && memcmp(dec, text, n) == 0, "%s: round trip differs", label);
    printf("%s: %zu bytes -> %d tokens in %.3f s\n", label, n, n_ids, t1 - t0);
    free(dec);
    free(ids);
}

// Invalid UTF-8 (llama-spm vocabulary, where <0xNN> is id 3 + NN).
static void test_invalid_utf8(const tokenizer *t) {
    // Stray continuation bytes, an overlong form, a surrogate, 0xFF, truncated
    // sequences (none within 3 bytes before a space: see below).
    static const char bad[] = "\xff\xfe\x80\x80 abc\xe2\x96xyz \xc0\xaf \xed\xa0\x80 \xf0\x9f\x98xxx end\xe2";
    check_roundtrip(t, bad, sizeof bad - 1, 0, "invalid utf-8");
    check_roundtrip(t, bad, sizeof bad - 1, 1, "invalid utf-8 + bos");
    // A character's length comes from its lead byte, after spaces became "▁"
    // (E2 96 81): so "\xc3 " splits as ▁ | C3 E2 | 96 | 81, none of them a piece
    // but the first, and the escaped space comes back as raw bytes. llama.cpp
    // does the same; decoding cannot recover the space.
    static const int32_t want[] = {29871, 3 + 0xC3, 3 + 0xE2, 3 + 0x96, 3 + 0x81};
    check_encode(t, "\xc3 ", 2, 0, 0, want, 5, "truncated sequence before a space");
    // A literal "▁" in the text is a space to SentencePiece (lossy by design).
    int32_t *ids;
    int n;
    char err[ERR_LEN];
    if (tok_encode(t, "a\xe2\x96\x81" "b", 5, 0, 0, &ids, &n, err) == 0) {
        size_t len;
        char *dec = decode_all(t, ids, n, &len);
        CHECK(len == 3 && memcmp(dec, "a b", 3) == 0, "literal \u2581 should decode as a space, got '%s'", dec);
        free(dec);
        free(ids);
    }
}

static void test_hostile(const tokenizer *t) {
    test_invalid_utf8(t);
    static const char nul[] = "a\0b\0\0 c\0";
    check_roundtrip(t, nul, sizeof nul - 1, 0, "NUL bytes");
    check_roundtrip(t, "\0", 1, 0, "lone NUL");
    size_t n = 1 << 20;
    char *big = malloc(10u << 20);
    memset(big, ' ', n);
    timed_roundtrip(t, big, n, "1 MB of spaces");
    n = 10u << 20;
    memset(big, 'a', n);
    timed_roundtrip(t, big, n, "10 MB of 'a'");
    for (size_t i = 0; i < n; i++) big[i] = (char)(i * 2654435761u >> 13);  // pseudo-random bytes
    timed_roundtrip(t, big, 1 << 20, "1 MB of random bytes");
    free(big);
}

static const char *CORPUS[] = {
    "Hello, world! \xf0\x9f\x91\x8b\xf0\x9f\x8f\xbd",                             // wave + skin tone
    "family: \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7",  // ZWJ sequence
    "flag \xf0\x9f\x87\xba\xf0\x9f\x87\xa6 and \xe2\x9d\xa4\xef\xb8\x8f",               // regional pair, VS16
    "e\xcc\x81 vs \xc3\xa9, n\xcc\x83, a\xcc\x8a\xcc\x81",                               // combining marks
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe6\x96\x87\xe7\xab\xa0\xe3\x80\x82 \xe4\xb8\xad\xe6\x96\x87 "
    "\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",                                              // CJK, Hangul
    "\xd8\xa7\xd9\x84\xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a\xd8\xa9 \xd7\xa2\xd7\x91\xd7\xa8\xd7\x99\xd7\xaa "
    "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80",          // Arabic, Hebrew, Devanagari
    "\t\t\ttabs\n\n\n\r\n  \t \n   trailing   ",
    "0123456789 3.14159 -1e-9 1,000,000 0x7fffffff",
    "int main(void) {\n\tfor (int i = 0; i < n; i++) x[i] = y[i] * 2; // \"q\" 'c' \\n\n}\n",
    "    Hello\n    Hello",
    " ",
    "   ",
    "<0x0A> looks like a byte token; <s> and </s> look like control ones",
};

static void test_corpus(const tokenizer *t, const char *label) {
    for (size_t i = 0; i < sizeof CORPUS / sizeof CORPUS[0]; i++) {
        char l[96];
        snprintf(l, sizeof l, "%s corpus #%zu", label, i);
        check_roundtrip(t, CORPUS[i], strlen(CORPUS[i]), 0, l);
        check_roundtrip(t, CORPUS[i], strlen(CORPUS[i]), 1, l);
    }
}

// ---- UTF-8 stream ----

static void test_utf8_stream(void) {
    // a, € (3 bytes), 😀 (4 bytes), é (2 bytes), invalid 0xFF, z
    static const char in[] = "a\xe2\x82\xac\xf0\x9f\x98\x80\xc3\xa9\xff" "z";
    static const int want[] = {1, 0, 0, 3, 0, 0, 0, 4, 0, 2, 1, 1};  // bytes out per pushed byte
    utf8_stream s = {0};
    char out[64], all[64];
    size_t total = 0;
    for (size_t i = 0; i < sizeof in - 1; i++) {
        size_t k = utf8_stream_push(&s, in + i, 1, out);
        CHECK((int)k == want[i], "utf8 push byte %zu: %zu out, want %d", i, k, want[i]);
        memcpy(all + total, out, k);
        total += k;
    }
    total += utf8_stream_flush(&s, all + total);
    CHECK(total == sizeof in - 1 && memcmp(all, in, total) == 0, "utf8 stream: bytes lost or changed");
    // An incomplete character at the end comes out on flush.
    memset(&s, 0, sizeof s);
    CHECK(utf8_stream_push(&s, "ok\xf0\x9f", 4, out) == 2, "utf8: holds the tail");
    CHECK(utf8_stream_flush(&s, out) == 2 && memcmp(out, "\xf0\x9f", 2) == 0 && s.n_pending == 0, "utf8: flush");
    // A lead byte followed by a non-continuation is passed through, not held forever.
    CHECK(utf8_stream_push(&s, "\xe2", 1, out) == 0, "utf8: lead held");
    size_t k = utf8_stream_push(&s, "ab", 2, out);
    CHECK(k == 3 && memcmp(out, "\xe2" "ab", 3) == 0, "utf8: broken sequence passes through");
    // Split across pushes of several bytes.
    memset(&s, 0, sizeof s);
    k = utf8_stream_push(&s, "x\xf0\x9f", 3, out);
    k += utf8_stream_push(&s, "\x98\x80y", 3, out + k);
    CHECK(k == 6 && memcmp(out, "x\xf0\x9f\x98\x80y", 6) == 0, "utf8: 4-byte char split 2+2");
}

// The real vocabularies live in $SHARED; without it only the self-contained
// tests run (and say so).
static int have_shared(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf", shared_dir());
    FILE *f = fopen(path, "rb");
    if (f) fclose(f);
    else fprintf(stderr, "test_tokenizer: %s not found (set SHARED); skipping the tests on real vocabularies\n", path);
    return f != NULL;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    test_synthetic_merges();
    test_synthetic_errors();
    test_utf8_stream();
    if (!have_shared()) {
        printf("test_tokenizer: %d passed, %d failed (real vocabularies skipped)\n", g_pass, g_fail);
        return g_fail == 0 ? 0 : 1;
    }
    test_vocab_vectors("ggml-vocab-llama-spm.gguf");
    test_vocab_vectors("ggml-vocab-phi-3.gguf");
    test_vocab_vectors("ggml-vocab-llama-bpe.gguf");
    test_vocab_vectors("ggml-vocab-qwen2.gguf");
    test_vocab_vectors("ggml-vocab-gpt-2.gguf");
    test_stories();
    test_special();
    tokenizer *t = load_tok("vocab/ggml-vocab-llama-spm.gguf");
    if (t) {
        test_hostile(t);
        test_corpus(t, "llama-spm");
        tok_free(t);
    }
    t = load_tok("models/gguf/stories260K.gguf");
    if (t) {
        test_corpus(t, "stories260K");  // 512 pieces: most characters go through byte fallback
        tok_free(t);
    }
    printf("test_tokenizer: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail == 0 ? 0 : 1;
}
