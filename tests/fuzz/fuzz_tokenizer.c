// tests/fuzz/fuzz_tokenizer.c — arbitrary prompt bytes through tok_encode and
// back through the streaming tok_decode, on every vocabulary in
// ../shared/vocab (SentencePiece and the byte-level BPE pre-tokenizers) and
// models/stories260K.gguf's.
//
// Input: byte 0 picks the vocabulary (its value modulo their count; bits 5-7
// are flags: parse_special, add_bos, and decoding 32-bit ids taken from the
// rest of the input instead of encoding it); the rest is the text. Besides
// sanitizer findings, it checks what tokenizer.h promises: every id is in
// the vocabulary, and without parse_special, decoding the ids of valid UTF-8
// (what quill's commands accept) gives the text back byte for byte (except,
// for SentencePiece, a text holding its space marker U+2581 itself).
#include <dirent.h>
#include <string.h>

#include "fuzz.h"
#include "gguf.h"
#include "tokenizer.h"
#include "util.h"

#define MAX_VOCABS 16

typedef struct {
    tokenizer *tok[MAX_VOCABS];
    char name[MAX_VOCABS][64];
    int n;
} vocabs;

static vocabs V;  // built once by LLVMFuzzerInitialize, read-only afterwards

static void add_vocab(const char *path, const char *name) {
    gguf_file f;
    char err[ERR_LEN];
    if (V.n == MAX_VOCABS) return;
    if (gguf_open(&f, path, err) || tok_load(&V.tok[V.n], &f, err)) fuzz_die("%s", err);
    gguf_close(&f);
    snprintf(V.name[V.n++], sizeof V.name[0], "%s", name);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char dir[512], path[1024];
    add_vocab("models/stories260K.gguf", "stories260K");
    struct dirent **list;  // sorted by name, so that byte 0 picks the same vocabulary everywhere
    int n = scandir(fuzz_shared("vocab", dir, sizeof dir), &list, NULL, alphasort);
    if (n < 0) fprintf(stderr, "fuzz_tokenizer: %s not found: only stories260K's vocabulary\n", dir);
    for (int i = 0; i < n; i++) {
        size_t len = strlen(list[i]->d_name);
        if (len > 5 && !strcmp(list[i]->d_name + len - 5, ".gguf")) {
            snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name);
            add_vocab(path, list[i]->d_name);
        }
        free(list[i]);
    }
    if (n >= 0) free(list);
    return 0;
}

// Decodes ids as generation does (each piece given the previous id) into out
// (cap bytes); returns the length.
static size_t decode_all(const tokenizer *t, const int32_t *ids, int n, char *out, size_t cap) {
    size_t len = 0;
    const size_t piece_cap = (size_t)tok_max_piece_len(t) + 8;
    for (int i = 0; i < n; i++) {
        char piece[4096];
        int k = tok_decode(t, i ? ids[i - 1] : -1, ids[i], piece, piece_cap < sizeof piece ? piece_cap : sizeof piece);
        if (k < 0 || len + (size_t)k > cap) continue;
        memcpy(out + len, piece, (size_t)k);
        len += (size_t)k;
    }
    return len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const int which = (data[0] & 31) % V.n, special = data[0] >> 5 & 1, bos = data[0] >> 6 & 1, raw = data[0] >> 7;
    const tokenizer *t = V.tok[which];
    const char *text = (const char *)data + 1;
    const size_t len = size - 1;
    if (raw) {  // ids straight from the input, in range or not
        int32_t ids[256];
        int n = (int)(len / 4 < 256 ? len / 4 : 256);
        memcpy(ids, text, sizeof *ids * (size_t)n);
        char *out = malloc((size_t)n * 4096 + 1);
        if (out) decode_all(t, ids, n, out, (size_t)n * 4096);
        free(out);
        for (int i = 0; i < n; i++) tok_piece(t, ids[i]);
        return 0;
    }
    int32_t *ids;
    int n;
    char err[ERR_LEN];
    if (tok_encode(t, text, len, bos, special, &ids, &n, err)) return 0;  // out of memory only
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok_n_vocab(t)) {
            fprintf(stderr, "%s: id %d at %d is outside the vocabulary of %d\n", V.name[which], ids[i], i, tok_n_vocab(t));
            abort();
        }
    char *out = malloc(len + 1);
    size_t got = out ? decode_all(t, ids, n, out, len + 1) : 0;
    // (SentencePiece writes spaces as U+2581 "▁", so a literal one decodes as a space)
    const int spm_marker = !strcmp(tok_model_name(t), "llama") && memmem(text, len, "\xe2\x96\x81", 3);
    if (out && !special && !spm_marker && utf8_invalid_at(text, len) < 0 && (got != len || memcmp(out, text, len))) {
        fprintf(stderr, "%s: %zu bytes encode to %d ids that decode to %zu different bytes\n", V.name[which], len, n, got);
        abort();
    }
    free(out);
    free(ids);
    return 0;
}
