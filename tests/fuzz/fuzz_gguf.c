// tests/fuzz/fuzz_gguf.c — a GGUF file from the internet: the parser, the
// tokenizer's load, and model_load (hyperparameters, tensor table, shapes,
// offsets, types) as `quill -m FILE` runs them, then a short forward pass
// (so weights that overflow reach the activation quantizers and the logits
// check). Seeds: tests/fuzz/gguf/seed/ (tests/fuzz/make_seeds.py).
#include <string.h>

#include "fuzz.h"
#include "gguf.h"
#include "model.h"
#include "tokenizer.h"
#include "util.h"

#define FUZZ_CTX 32

// The tokenizer as tok_load reads it from the parsed file, and a few words
// through it (tokenizer-only GGUFs, like ../shared/vocab's, stop here).
static void tokenizer_part(const uint8_t *data, size_t size) {
    gguf_file f;
    tokenizer *tok;
    char err[ERR_LEN];
    if (gguf_parse(&f, data, size, err)) return;
    if (!tok_load(&tok, &f, err)) {
        int32_t *ids;
        int n;
        static const char text[] = "Once upon a time, <s> there was\n\xe2\x96\x81 caf\xc3\xa9";
        if (!tok_encode(tok, text, sizeof text - 1, 1, 1, &ids, &n, err)) {
            char piece[512];
            for (int i = 0; i < n; i++) tok_decode(tok, i ? ids[i - 1] : -1, ids[i], piece, sizeof piece);
            free(ids);
        }
        tok_free(tok);
    }
    gguf_close(&f);
}

// model_load over the input and two passes: a 3-token prompt, one decode token.
static void model_part(const char *path) {
    model *m;
    char err[ERR_LEN];
    const model_opts o = {.n_threads = 1, .n_ctx = FUZZ_CTX, .mem_limit = FUZZ_MEM_LIMIT};
    if (model_load(&m, path, &o, err)) return;
    const int nv = model_cfg(m)->n_vocab;
    float *logits = malloc(sizeof(float) * (size_t)nv);
    const int32_t ids[3] = {1 % nv, 2 % nv, (nv - 1)};
    if (logits && !model_forward(m, ids, 3, 0, logits, err)) model_forward(m, ids + 2, 1, 0, logits, err);
    free(logits);
    model_free(m);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tokenizer_part(data, size);
    char path[64];
    int fd = fuzz_file(data, size, path);
    model_part(path);
    close(fd);
    return 0;
}
