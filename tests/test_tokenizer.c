// test_tokenizer.c — tokenizer.c against independent references:
//   * llama.cpp's own tokenizer test vectors ($SHARED/vocab/*.inp/.out) for all
//     five vocabularies (SentencePiece: llama-spm, phi-3; byte-level BPE:
//     llama-bpe, qwen2, gpt-2): every string must encode (no BOS, parse_special
//     off — as test-tokenizer-0 does) to exactly llama.cpp's ids, and those
//     reference ids must decode back;
//   * BPE special tokens, ids cross-checked with a separately written naive
//     Python byte-level BPE (the `regex` module, O(n^2) merging);
//   * stories260K ids worked out by hand from its vocabulary (and cross-checked
//     with a separately written naive O(n^2) SentencePiece merge in Python);
//   * tiny synthetic vocabularies (GGUF built in memory) whose merges follow
//     from the algorithm by hand: score priority, leftmost ties, byte fallback;
//   * tiny synthetic BPE vocabularies: rank priority, leftmost ties, the
//     pre-tokenizers, ignore_merges;
//   * a multilingual corpus (tests/tok_corpus.txt) that must round-trip through
//     every vocabulary, whole and line by line;
//   * hostile inputs (invalid UTF-8, NULs, 1 MB of spaces, 10 MB of one letter,
//     ...) that must round-trip, and the UTF-8 stream splitting characters.
// Exits 0 only when every check passed.
//   build/tests/test_tokenizer --bench   prints load time and encode/decode
//                                        MB/s per vocabulary (asserts nothing)
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // memmem (the Makefile passes -D_GNU_SOURCE; this keeps other builds working)
#endif
#include "gguf.h"
#include "tokenizer.h"
#include "util.h"
#include "vocab_synth.h"

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

// Encodes and compares with want[]; prints both on mismatch. 1 when equal.
static int check_encode(const tokenizer *t, const char *text, size_t len, int bos, int special,
                         const int32_t *want, int n_want, const char *label) {
    int32_t *ids;
    int n;
    char err[ERR_LEN] = "";
    int rc = tok_encode(t, text, len, bos, special, &ids, &n, err);
    CHECK(rc == 0, "%s: tok_encode failed: %s", label, err);
    if (rc != 0) return 0;
    int ok = ids_equal(ids, n, want, n_want);
    CHECK(ok, "%s: ids differ for \"%.*s\"", label, (int)(len < 80 ? len : 80), text);
    if (!ok) print_ids("got ", ids, n), print_ids("want", want, n_want);
    free(ids);
    return ok;
}

// Encodes then decodes; the bytes must come back as the text.
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
    CHECK(dlen == len && memcmp(dec, text, len) == 0, "%s: round trip differs (%zu bytes in, %zu out)", label, len,
          dlen);
    free(dec);
    free(ids);
}

// ---- llama.cpp's test vectors ----

// The vocabularies in $SHARED/vocab (ggml-vocab-NAME.gguf), each with llama.cpp's vectors.
static const char *const VOCABS[] = {"llama-spm", "phi-3", "llama-bpe", "qwen2", "gpt-2"};

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
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.inp", shared_dir(), name);
    char *inp = read_all(path, &ilen);
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.out", shared_dir(), name);
    char *out = read_all(path, &olen);
    char rel[256];
    snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", name);
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
    int n_enc = 0, n_dec = 0;
    for (int i = 0; i < n && i < n_lines; i++) {
        int nw = parse_ids(lines[i], want, MAX_IDS);
        char label[64];
        snprintf(label, sizeof label, "%s #%d", name, i);
        n_enc += check_encode(t, s[i], slen[i], 0, 0, want, nw, label);
        size_t dlen;
        char *dec = decode_all(t, want, nw, &dlen);
        int ok = dlen == slen[i] && memcmp(dec, s[i], dlen) == 0;
        CHECK(ok, "%s: reference ids decode to \"%s\"", label, dec);
        n_dec += ok;
        free(dec);
    }
    printf("%s: %d/%d llama.cpp strings encode to its ids, %d/%d of its id lists decode back\n", name, n_enc, n,
           n_dec, n);
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
    // phi-3's "</s>" (id 2) is typed user-defined, but llama.cpp makes it a control
    // token (it ends generation): text unless parse_special; with it, (llama.cpp's
    // phi-3 rule) it swallows the spaces after it.
    static const int32_t b[] = {2, 15043};
    check_encode(t, "</s>   Hello", 12, 0, 1, b, 2, "phi-3 rstrip");
    CHECK(tok_eos(t) == 32000 && tok_is_eog(t, 32000) && tok_is_eog(t, 32007) && tok_is_eog(t, 2) &&
              !tok_is_eog(t, 32010),
          "phi-3: eos/eot (<|end|>) and </s> end generation, <|user|> does not");
    static const int32_t c[] = {32010, 15043, 32007};  // <|user|> ▁Hello <|end|>
    check_encode(t, "<|user|>Hello<|end|>", 20, 0, 1, c, 3, "phi-3 control");
    check_roundtrip(t, "Hello</s>World", 14, 0, "phi-3 </s> as text round trip");
    tok_free(t);
}

// Chat markers without and with parse_special, as llama.cpp tokenizes them. The
// ids are llama-tokenize's output (llama.cpp's tools/tokenize, built CPU-only):
//   llama-tokenize -m ../shared/vocab/ggml-vocab-VOCAB.gguf -p "TEXT" --ids --log-disable --no-bos --no-parse-special
// for special 0, and the same without --no-parse-special (its default parses
// special tokens) for special 1. llama.cpp makes the pieces that end a turn
// control tokens whatever their type in the file, so "</s>" — user-defined in
// phi-3, normal in qwen2 — is plain text unless parse_special.
#define MARKERS "<s> </s> <|endoftext|> <|im_start|>"
static const struct {
    const char *vocab, *text;
    int special;
    const char *ids;  // as llama-tokenize prints them, without the brackets and commas
} MARKER_CASES[] = {
    {"phi-3", MARKERS, 0,
     "529 29879 29958 1533 29879 29958 529 29989 355 974 726 29989 29958 529 29989 326 29918 2962 29989 29958"},
    {"phi-3", MARKERS, 1, "1 259 2 32000 29871 529 29989 326 29918 2962 29989 29958"},
    {"phi-3", "Hello</s>   World", 0, "15043 829 29879 29958 259 2787"},
    {"phi-3", "Hello</s>   World", 1, "15043 2 2787"},
    {"phi-3", "<|user|> Hello <|end|> <s> x", 0,
     "529 29989 1792 29989 29958 15043 529 29989 355 29989 29958 529 29879 29958 921"},
    {"phi-3", "<|user|> Hello <|end|> <s> x", 1, "32010 15043 29871 32007 1 29871 921"},
    {"llama-spm", MARKERS, 0,
     "529 29879 29958 1533 29879 29958 529 29989 355 974 726 29989 29958 529 29989 326 29918 2962 29989 29958"},
    {"llama-spm", MARKERS, 1, "1 259 2 29871 529 29989 355 974 726 29989 29958 529 29989 326 29918 2962 29989 29958"},
    {"llama-spm", "Hello</s>   World", 0, "15043 829 29879 29958 259 2787"},
    {"llama-spm", "Hello</s>   World", 1, "15043 2 1678 2787"},
    {"qwen2", MARKERS, 0, "44047 29 690 82 29 82639 8691 723 427 91 29 82639 318 4906 91 29"},
    {"qwen2", MARKERS, 1, "44047 29 220 128247 220 151643 220 151644"},
    {"qwen2", "Hello</s>   World", 0, "9707 522 82 29 256 4337"},
    {"qwen2", "Hello</s>   World", 1, "9707 128247 256 4337"},
};

static void test_markers(void) {
    tokenizer *t = NULL;
    const char *loaded = NULL;  // the vocabulary t holds (cases are grouped by vocabulary)
    for (size_t i = 0; i < sizeof MARKER_CASES / sizeof MARKER_CASES[0]; i++) {
        const char *vocab = MARKER_CASES[i].vocab;
        if (!loaded || strcmp(loaded, vocab) != 0) {
            char rel[128];
            snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", vocab);
            tok_free(t);
            t = load_tok(rel);
            loaded = vocab;
        }
        if (!t) continue;
        char ids[256], label[96];
        int32_t want[64];
        snprintf(ids, sizeof ids, "%s", MARKER_CASES[i].ids);
        int n = parse_ids(ids, want, 64);
        snprintf(label, sizeof label, "%s markers #%zu%s", vocab, i, MARKER_CASES[i].special ? " (parse_special)" : "");
        const char *text = MARKER_CASES[i].text;
        check_encode(t, text, strlen(text), 0, MARKER_CASES[i].special, want, n, label);
    }
    tok_free(t);
}

// Byte-level BPE metadata as llama.cpp reads it: BOS/EOS from the file,
// add_bos from the pre-tokenizer (llama-bpe adds BOS, qwen2/gpt-2 do not), and
// end-of-generation ids found by their text.
static void test_bpe_meta(void) {
    tokenizer *t = load_tok("vocab/ggml-vocab-llama-bpe.gguf");
    if (t) {
        CHECK(strcmp(tok_model_name(t), "gpt2") == 0 && strcmp(tok_pre_name(t), "llama-bpe") == 0, "llama-bpe names");
        CHECK(tok_n_vocab(t) == 128256 && tok_bos(t) == 128000 && tok_eos(t) == 128001 && tok_add_bos(t) == 1,
              "llama-bpe: n_vocab %d bos %d eos %d add_bos %d", tok_n_vocab(t), tok_bos(t), tok_eos(t), tok_add_bos(t));
        CHECK(tok_is_eog(t, 128001) && tok_is_eog(t, 128009) && !tok_is_eog(t, 128000) && !tok_is_eog(t, 128006),
              "llama-bpe: <|end_of_text|> and <|eot_id|> end generation, <|begin_of_text|> does not");
        static const int32_t hello[] = {128000, 9906, 1917};  // <|begin_of_text|> Hello Ġworld
        check_encode(t, "Hello world", 11, 1, 0, hello, 3, "llama-bpe bos");
        tok_free(t);
    }
    t = load_tok("vocab/ggml-vocab-qwen2.gguf");
    if (t) {
        CHECK(strcmp(tok_pre_name(t), "qwen2") == 0 && tok_add_bos(t) == 0 && tok_bos(t) == 151643 &&
                  tok_eos(t) == 151643,
              "qwen2: pre %s add_bos %d bos %d eos %d", tok_pre_name(t), tok_add_bos(t), tok_bos(t), tok_eos(t));
        CHECK(tok_is_eog(t, 151643) && tok_is_eog(t, 151645) && !tok_is_eog(t, 151644),
              "qwen2: <|endoftext|> and <|im_end|> end generation, <|im_start|> does not");
        tok_free(t);
    }
    t = load_tok("vocab/ggml-vocab-gpt-2.gguf");
    if (t) {
        CHECK(strcmp(tok_pre_name(t), "gpt-2") == 0 && tok_add_bos(t) == 0 && tok_bos(t) == 50256 &&
                  tok_eos(t) == 50256 && tok_is_eog(t, 50256) && !tok_is_eog(t, 50255),
              "gpt-2: pre %s add_bos %d bos %d eos %d", tok_pre_name(t), tok_add_bos(t), tok_bos(t), tok_eos(t));
        char buf[16];  // "Ġ" (U+0120) stands for ' ', "Ċ" (U+010A) for '\n': pieces 220 and 198
        CHECK(tok_decode(t, -1, 220, buf, sizeof buf) == 1 && buf[0] == ' ', "gpt-2: Ġ decodes to a space");
        CHECK(tok_decode(t, -1, 198, buf, sizeof buf) == 1 && buf[0] == '\n', "gpt-2: Ċ decodes to a newline");
        CHECK(tok_decode(t, -1, 50256, buf, sizeof buf) == 0, "gpt-2: <|endoftext|> (control) decodes to nothing");
        CHECK(tok_decode(t, -1, 50257, buf, sizeof buf) == -1, "gpt-2: id out of range");
        tok_free(t);
    }
}

// Ids of the plain parts come from the naive Python reference (see the top).
static void test_bpe_special(void) {
    tokenizer *t = load_tok("vocab/ggml-vocab-qwen2.gguf");
    if (t) {
        static const char chat[] = "<|im_start|>user\nHello<|im_end|>";
        static const int32_t want[] = {151644, 872, 198, 9707, 151645};  // ... user Ċ Hello ...
        check_encode(t, chat, sizeof chat - 1, 0, 1, want, 5, "qwen2 parse_special");
        static const int32_t plain[] = {27, 91, 318, 6213, 91, 29};  // "<|im_end|>" as text: < | im _end | >
        check_encode(t, "<|im_end|>", 10, 0, 0, plain, 6, "qwen2 control as text");
        check_roundtrip(t, chat, sizeof chat - 1, 0, "qwen2 control as text round trip");
        // [PAD151646] is user-defined: matched without parse_special, decoded as written.
        static const int32_t pad[] = {13048, 220, 151646, 1052};  // Hi Ġ [PAD151646] Ġthere
        check_encode(t, "Hi [PAD151646] there", 20, 0, 0, pad, 4, "qwen2 user-defined");
        check_roundtrip(t, "Hi [PAD151646] there", 20, 0, "qwen2 user-defined round trip");
        tok_free(t);
    }
    t = load_tok("vocab/ggml-vocab-llama-bpe.gguf");
    if (!t) return;
    static const char turn[] = "<|start_header_id|>user<|end_header_id|>Hello<|eot_id|>";
    static const int32_t want[] = {128006, 882, 128007, 9906, 128009};
    check_encode(t, turn, sizeof turn - 1, 0, 1, want, 5, "llama-bpe parse_special");
    static const int32_t plain[] = {27, 91, 68, 354, 851, 91, 29};  // < | e ot _id | >
    check_encode(t, "<|eot_id|>", 10, 0, 0, plain, 7, "llama-bpe control as text");
    check_roundtrip(t, turn, sizeof turn - 1, 1, "llama-bpe control as text round trip");
    // Bytes that start no valid UTF-8 character are words of their own, each
    // the piece of its byte's stand-in character: ÿ = 187, â = 158, Ĥ (0x82) =
    // 224, Ã = 127 (llama.cpp would turn them into U+FFFD and lose them).
    static const int32_t bad1[] = {64, 187, 65};
    check_encode(t, "a\xff" "b", 3, 0, 0, bad1, 3, "llama-bpe invalid byte");
    static const int32_t bad2[] = {158, 224};
    check_encode(t, "\xe2\x82", 2, 0, 0, bad2, 2, "llama-bpe truncated character");
    static const int32_t bad3[] = {220, 127};
    check_encode(t, " \xc3", 2, 0, 0, bad3, 2, "llama-bpe truncated character after a space");
    tok_free(t);
}

// ---- synthetic vocabularies: a GGUF written in memory (vocab_synth.h) ----

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

// Each family's end-of-turn pieces end generation (Gemma 3, Phi-3/4, gpt-oss); a
// look-alike that is not one does not. In gpt-oss's harmony vocabulary (with
// <|return|> and <|call|>) <|end|> only closes a message: the analysis message
// ends in it and the final answer follows, so it does not end generation
// (llama.cpp's rule, src/llama-vocab.cpp).
static void test_synthetic_end_of_turn(void) {
    vpiece v[] = {BASE[0], BASE[1], BASE[2], {"<end_of_turn>", 0, 3}, {"<|end|>", 0, 3}, {"<|return|>", 0, 3},
                  {"<|call|>", 0, 3}, {"<|start|>", 0, 3}, {"<start_of_turn>", 0, 3}, {"a", -1, 1}};
    for (int harmony = 0; harmony < 2; harmony++) {
        int n = (int)(sizeof v / sizeof v[0]);
        gbuf g = make_vocab("llama", v, harmony ? n : 5, 0, NULL, 0, harmony ? n : 5);  // phi: up to <|end|>
        tokenizer *t = NULL;
        char err[ERR_LEN] = "";
        CHECK(load_buf(&g, &t, err) == 0, "end-of-turn vocab: %s", err);
        free(g.b);
        if (!t) return;
        if (!harmony) {
            CHECK(tok_is_eog(t, 2) && tok_is_eog(t, 3) && tok_is_eog(t, 4),
                  "</s>, <end_of_turn>, <|end|> (no harmony tokens) end generation");
        } else {
            CHECK(tok_is_eog(t, 2) && tok_is_eog(t, 3) && tok_is_eog(t, 5) && tok_is_eog(t, 6),
                  "</s>, <end_of_turn>, <|return|>, <|call|> end generation");
            CHECK(!tok_is_eog(t, 4), "<|end|> beside <|return|> and <|call|> (harmony) does not end generation");
            CHECK(!tok_is_eog(t, 1) && !tok_is_eog(t, 7) && !tok_is_eog(t, 8) && !tok_is_eog(t, 9),
                  "<s>, <|start|>, <start_of_turn>, a do not end generation");
        }
        tok_free(t);
    }
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

// A byte-level BPE vocabulary: pieces (those like "<|...|>" control, the rest
// normal), merges (n_merges < 0: no merges key), pre-tokenizer (NULL: no key),
// BOS = EOS = the last piece.
static gbuf make_bpe_vocab(const char *const *pieces, int n, const char *const *merges, int n_merges, const char *pre) {
    gbuf g = {0};
    put(&g, "GGUF", 4), put_u32(&g, 3), put_u64(&g, 0), put_u64(&g, 5 + (n_merges >= 0) + (pre != NULL));
    kv_head(&g, "tokenizer.ggml.model", GGUF_STRING), put_str(&g, "gpt2");
    kv_head(&g, "tokenizer.ggml.tokens", GGUF_ARRAY), put_u32(&g, GGUF_STRING), put_u64(&g, (uint64_t)n);
    for (int i = 0; i < n; i++) put_str(&g, pieces[i]);
    kv_head(&g, "tokenizer.ggml.token_type", GGUF_ARRAY), put_u32(&g, GGUF_INT32), put_u64(&g, (uint64_t)n);
    for (int i = 0; i < n; i++) put_u32(&g, strncmp(pieces[i], "<|", 2) == 0 ? 3 : 1);
    if (n_merges >= 0) {
        kv_head(&g, "tokenizer.ggml.merges", GGUF_ARRAY), put_u32(&g, GGUF_STRING), put_u64(&g, (uint64_t)n_merges);
        for (int i = 0; i < n_merges; i++) put_str(&g, merges[i]);
    }
    if (pre) kv_head(&g, "tokenizer.ggml.pre", GGUF_STRING), put_str(&g, pre);
    kv_head(&g, "tokenizer.ggml.bos_token_id", GGUF_UINT32), put_u32(&g, (uint32_t)n - 1);
    kv_head(&g, "tokenizer.ggml.eos_token_id", GGUF_UINT32), put_u32(&g, (uint32_t)n - 1);
    return g;
}

// "Ġ" (U+0120) is GPT-2's stand-in for a space.
static const char *const BPE_PIECES[] = {"a",  "b",  "c",  "\xc4\xa0", "ab", "bc", "abc", "\xc4\xa0" "a", "aa",
                                         "ca", "1",  "2",  "3",        "4",  "12", "34",  "123",          "<|end|>"};
enum { N_BPE_PIECES = sizeof BPE_PIECES / sizeof BPE_PIECES[0] };
// Ranks are line numbers; the last two lines name no pieces and are skipped.
static const char *const BPE_MERGES[] = {"b c", "a b", "a bc", "\xc4\xa0 a", "a a", "3 4", "1 2", "12 3",
                                         "x y", "nospace"};

static tokenizer *load_bpe_vocab(const char *pre) {
    gbuf g = make_bpe_vocab(BPE_PIECES, N_BPE_PIECES, BPE_MERGES, 10, pre);
    tokenizer *t = NULL;
    char err[ERR_LEN] = "";
    CHECK(load_buf(&g, &t, err) == 0, "synthetic bpe (%s): %s", pre ? pre : "no pre", err);
    free(g.b);
    return t;
}

// Merge order worked out by hand from the ranks above.
static void test_synthetic_bpe(void) {
    tokenizer *t = load_bpe_vocab("gpt-2");
    if (!t) return;
    static const int32_t abc[] = {6};  // b c (rank 0) before a b (rank 1), then a bc: abc
    check_encode(t, "abc", 3, 0, 0, abc, 1, "bpe rank priority");
    static const int32_t aaa[] = {8, 0};  // equal ranks: the leftmost "a a" first
    check_encode(t, "aaa", 3, 0, 0, aaa, 2, "bpe leftmost tie");
    static const int32_t words[] = {0, 3, 6};  // "a" | " abc": Ġ a b c → Ġ a bc → Ġ abc (no "Ġ abc" merge)
    check_encode(t, "a abc", 5, 0, 0, words, 3, "bpe words");
    static const int32_t ca[] = {2, 0};  // "ca" is a piece, but no merge makes it
    check_encode(t, "ca", 2, 0, 0, ca, 2, "bpe no merge");
    static const int32_t num[] = {14, 15};  // one word: 3 4 (rank 5) first, then 1 2; no "12 34"
    check_encode(t, "1234", 4, 0, 0, num, 2, "gpt-2 digits");
    static const int32_t end[] = {4, 17, 2};
    check_encode(t, "ab<|end|>c", 10, 0, 1, end, 3, "bpe control token");
    CHECK(tok_add_bos(t) == 0 && tok_bos(t) == 17 && tok_is_eog(t, 17), "gpt-2 pre: no BOS added by default");
    char buf[8], err[ERR_LEN] = "";
    CHECK(tok_decode(t, -1, 7, buf, sizeof buf) == 2 && memcmp(buf, " a", 2) == 0, "Ġa decodes to \" a\"");
    int32_t *ids = NULL;
    int n;
    CHECK(tok_encode(t, "az", 2, 0, 0, &ids, &n, err) == -1 && strstr(err, "byte 0x7A"),
          "a byte without a piece and no <unk>: rc error, err '%s'", err);
    free(ids);
    tok_free(t);
    static const int32_t split3[] = {16, 13};  // \p{N}{1,3} (llama-bpe) and [0-9]{3} (default): 123 | 4
    static const int32_t split1[] = {10, 11, 12, 13};  // \p{N} (qwen2): one digit per word
    const char *pres[] = {"llama-bpe", "default", NULL, "qwen2"};
    const int32_t *want[] = {split3, split3, split3, split1};
    for (int i = 0; i < 4; i++) {
        t = load_bpe_vocab(pres[i]);
        if (!t) continue;
        check_encode(t, "1234", 4, 0, 0, want[i], i < 3 ? 2 : 4, pres[i] ? pres[i] : "no pre (default)");
        if (i == 0) {
            static const int32_t whole[] = {17, 9};  // ignore_merges: a word that is a piece stays whole
            check_encode(t, "ca", 2, 1, 0, whole, 2, "llama-bpe ignore_merges (+ BOS)");
            CHECK(tok_add_bos(t) == 1, "llama-bpe adds BOS by default");
        }
        tok_free(t);
    }
}

static void test_synthetic_bpe_errors(void) {
    expect_load_error(make_bpe_vocab(BPE_PIECES, N_BPE_PIECES, BPE_MERGES, -1, "gpt-2"), "tokenizer.ggml.merges",
                      "bpe without merges");
    expect_load_error(make_bpe_vocab(BPE_PIECES, N_BPE_PIECES, BPE_MERGES, 10, "nope"),
                      "pre-tokenizer 'nope' not supported", "unknown pre-tokenizer");
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

// Invalid UTF-8 the SentencePiece way (llama-spm vocabulary, where <0xNN> is
// id 3 + NN); test_hostile checks round trips for every vocabulary.
static void test_invalid_utf8(const tokenizer *t) {
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

// Fills n bytes with copies of unit (of unit_len bytes), cut at n.
static void fill(char *buf, size_t n, const char *unit, size_t unit_len) {
    for (size_t i = 0; i < n; i++) buf[i] = unit[i % unit_len];
}

// Hostile input for any vocabulary: it must encode without error and decode
// back byte for byte, in time linear-ish in its size (the times are printed).
static void test_hostile(const tokenizer *t, const char *name) {
    char label[96];
    // Stray continuation bytes, overlong forms, a surrogate, 0xFF, above
    // U+10FFFF, truncated sequences (SentencePiece cannot take one right before
    // a space back: see test_invalid_utf8; BPE can, see the second string).
    static const char bad[] = "\xff\xfe\x80\x80 abc\xe2\x96xyz \xc0\xaf \xed\xa0\x80 \xf0\x9f\x98xxx end\xe2";
    static const char bad_bpe[] = "\xc3 \xe2\x82 x\xf0\x9f\x98 \xf4\x90\x80\x80 \xef\xbf\xbf\xc1\xbf\xe0\x80\xaf";
    snprintf(label, sizeof label, "%s: invalid utf-8", name);
    check_roundtrip(t, bad, sizeof bad - 1, 0, label);
    check_roundtrip(t, bad, sizeof bad - 1, 1, label);
    if (strcmp(tok_model_name(t), "gpt2") == 0) check_roundtrip(t, bad_bpe, sizeof bad_bpe - 1, 0, label);
    static const char nul[] = "a\0b\0\0 c\0";
    snprintf(label, sizeof label, "%s: NUL bytes", name);
    check_roundtrip(t, nul, sizeof nul - 1, 0, label);
    check_roundtrip(t, "\0", 1, 0, label);
    static const struct { const char *what, *unit; size_t unit_len, n; } BIG[] = {
        {"1 MB of spaces", " ", 1, 1u << 20},
        {"10 MB of 'a' (one word)", "a", 1, 10u << 20},
        {"1 MB of newlines", "\n", 1, 1u << 20},
        {"1 MB of digits", "7", 1, 1u << 20},
        {"1 MB of combining accents", "\xcc\x81", 2, 1u << 20},
        {"1 MB of \"<|\"", "<|", 2, 1u << 20},
    };
    char *big = malloc(10u << 20);
    for (size_t i = 0; i < sizeof BIG / sizeof BIG[0]; i++) {
        fill(big, BIG[i].n, BIG[i].unit, BIG[i].unit_len);
        snprintf(label, sizeof label, "%s: %s", name, BIG[i].what);
        timed_roundtrip(t, big, BIG[i].n, label);
    }
    if (strcmp(name, "llama-bpe") == 0) {  // past PCRE2's default match limit of 10 million backtracks
        fill(big, 10u << 20, " ", 1);
        snprintf(label, sizeof label, "%s: 10 MB of spaces", name);
        timed_roundtrip(t, big, 10u << 20, label);
    }
    for (size_t i = 0; i < 1u << 20; i++) big[i] = (char)(i * 2654435761u >> 13);  // pseudo-random bytes
    snprintf(label, sizeof label, "%s: 1 MB of random bytes", name);
    timed_roundtrip(t, big, 1u << 20, label);
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

// tests/tok_corpus.txt (run from the repository root, as tests/run.sh does).
static char *read_corpus(size_t *len) {
    char *c = read_all("tests/tok_corpus.txt", len);
    CHECK(c != NULL, "tests/tok_corpus.txt not found (run from the repository root)");
    return c;
}

// Round trips: the short texts above, the corpus file whole, and each of its lines.
static void test_corpus(const tokenizer *t, const char *vocab, const char *corpus, size_t len) {
    char l[96];
    for (size_t i = 0; i < sizeof CORPUS / sizeof CORPUS[0]; i++) {
        snprintf(l, sizeof l, "%s corpus #%zu", vocab, i);
        check_roundtrip(t, CORPUS[i], strlen(CORPUS[i]), 0, l);
        check_roundtrip(t, CORPUS[i], strlen(CORPUS[i]), 1, l);
    }
    if (!corpus) return;
    snprintf(l, sizeof l, "%s tok_corpus.txt", vocab);
    check_roundtrip(t, corpus, len, 0, l);
    check_roundtrip(t, corpus, len, 1, l);
    int line = 1;
    for (const char *p = corpus, *end = corpus + len; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        snprintf(l, sizeof l, "%s tok_corpus.txt line %d", vocab, line);
        check_roundtrip(t, p, n, 0, l);
        p += n + 1;
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

// ---- --bench: encode/decode speed per vocabulary (numbers only) ----

// src repeated until n bytes (malloc'd), or NULL when src is empty.
static char *repeat_to(const char *src, size_t src_len, size_t n) {
    char *out = src_len ? malloc(n) : NULL;
    for (size_t i = 0; out && i < n; i += src_len) memcpy(out + i, src, n - i < src_len ? n - i : src_len);
    return out;
}

// Best of three encodes of text: seconds (-1 on error); the ids of the last in *ids.
static double time_encode(const tokenizer *t, const char *text, size_t n, int32_t **ids, int *n_ids) {
    double best = 1e30;
    char err[ERR_LEN] = "";
    for (int r = 0; r < 3; r++) {
        free(*ids);
        *ids = NULL;
        double t0 = now_sec();
        if (tok_encode(t, text, n, 0, 0, ids, n_ids, err) < 0) {
            fprintf(stderr, "bench: %s\n", err);
            return -1;
        }
        double dt = now_sec() - t0;
        best = dt < best ? dt : best;
    }
    return best;
}

// Seconds to decode ids piece by piece into one buffer (as a streaming caller would).
static double time_decode(const tokenizer *t, const int32_t *ids, int n_ids) {
    char *buf = malloc((size_t)tok_max_piece_len(t) + 1);
    size_t total = 0;
    double t0 = now_sec();
    for (int i = 0; buf && i < n_ids; i++) {
        int k = tok_decode(t, i ? ids[i - 1] : -1, ids[i], buf, (size_t)tok_max_piece_len(t) + 1);
        total += k > 0 ? (size_t)k : 0;
    }
    double dt = now_sec() - t0;
    free(buf);
    return total ? dt : -1;
}

// One row: load time, then per text encode MB/s, bytes per token, decode MB/s.
static void bench_vocab(const char *vocab, char *const *texts, const char *const *names, int n_texts, size_t n) {
    char path[1024], err[ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", shared_dir(), vocab);
    gguf_file f = {0};
    tokenizer *t = NULL;
    double t0 = now_sec();
    int rc = gguf_open(&f, path, err);
    if (rc == 0) rc = tok_load(&t, &f, err);
    double load = now_sec() - t0;
    gguf_close(&f);
    if (rc < 0) {
        printf("%-10s %s\n", vocab, err);
        return;
    }
    printf("%-10s %6.1f ms", vocab, load * 1e3);
    for (int i = 0; i < n_texts; i++) {
        int32_t *ids = NULL;
        int n_ids = 0;
        double enc = time_encode(t, texts[i], n, &ids, &n_ids);
        if (enc < 0) break;
        double dec = time_decode(t, ids, n_ids);
        printf(" | %s: encode %5.1f MB/s, %4.2f bytes/token, decode %6.1f MB/s", names[i], n / enc / 1e6,
               (double)n / n_ids, n / dec / 1e6);
        free(ids);
    }
    printf("\n");
    tok_free(t);
}

// English (the GPL-3 text in $SHARED/golden) and the multilingual corpus,
// each repeated to 1 MiB, through every vocabulary, on one thread.
static int run_bench(void) {
    size_t n_en = 0, n_ml = 0, n = 1u << 20;
    char path[1024];
    snprintf(path, sizeof path, "%s/golden/gpl-3.txt", shared_dir());
    char *en = read_all(path, &n_en), *ml = read_all("tests/tok_corpus.txt", &n_ml);
    char *texts[2] = {repeat_to(en, n_en, n), repeat_to(ml, n_ml, n)};
    static const char *const names[2] = {"english", "multilingual"};
    int rc = 0;
    if (!texts[0] || !texts[1]) {
        fprintf(stderr, "bench: need %s and tests/tok_corpus.txt (run from the repository root)\n", path);
        rc = 1;
    } else {
        printf("tokenizer: 1 MiB of each text, best of 3 encodes (no BOS, parse_special off), one thread\n");
        printf("%-10s %9s\n", "vocab", "load");
        for (size_t i = 0; i < sizeof VOCABS / sizeof VOCABS[0]; i++) bench_vocab(VOCABS[i], texts, names, 2, n);
    }
    free(texts[0]);
    free(texts[1]);
    free(en);
    free(ml);
    return rc;
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

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) return run_bench();
    if (argc > 1) {
        fprintf(stderr, "usage: %s [--bench]   (run from the repository root; SHARED=../shared)\n", argv[0]);
        return 2;
    }
    test_synthetic_merges();
    test_synthetic_end_of_turn();
    test_synthetic_errors();
    test_synthetic_bpe();
    test_synthetic_bpe_errors();
    test_utf8_stream();
    if (!have_shared()) {
        printf("test_tokenizer: %d passed, %d failed (real vocabularies skipped)\n", g_pass, g_fail);
        return g_fail == 0 ? 0 : 1;
    }
    for (size_t i = 0; i < sizeof VOCABS / sizeof VOCABS[0]; i++) test_vocab_vectors(VOCABS[i]);
    test_stories();
    test_special();
    test_markers();
    test_bpe_meta();
    test_bpe_special();
    size_t corpus_len = 0;
    char *corpus = read_corpus(&corpus_len);
    for (size_t i = 0; i < sizeof VOCABS / sizeof VOCABS[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", VOCABS[i]);
        tokenizer *t = load_tok(rel);
        if (!t) continue;
        if (i == 0) test_invalid_utf8(t);
        test_corpus(t, VOCABS[i], corpus, corpus_len);
        test_hostile(t, VOCABS[i]);
        tok_free(t);
    }
    tokenizer *t = load_tok("models/gguf/stories260K.gguf");
    if (t) {
        test_corpus(t, "stories260K", corpus, corpus_len);  // 512 pieces: most characters go through byte fallback
        tok_free(t);
    }
    free(corpus);
    printf("test_tokenizer: %d passed, %d failed\n", g_pass, g_fail);
    return g_fail == 0 ? 0 : 1;
}
