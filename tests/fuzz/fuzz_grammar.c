// tests/fuzz/fuzz_grammar.c — a GBNF grammar (grammar.c) or a JSON Schema
// (json_schema.c, when the input starts with '{') compiled, then followed by
// the matcher over a text and masked over stories260K's vocabulary, as
// --grammar and --json-schema take them from users.
//
// The input is the grammar or schema; after its first NUL byte, if any, comes
// the text to run through the matcher (else a fixed one). Hostile grammars
// must end in an error or a result, never a crash, a hang (deep nesting and
// left recursion are refused; ambiguity is bounded per step) or a leak.
#include <string.h>

#include "fuzz.h"
#include "gguf.h"
#include "grammar.h"
#include "json_schema.h"
#include "tokenizer.h"
#include "util.h"

static tokenizer *TOK;  // built once by LLVMFuzzerInitialize, read-only afterwards
static gvocab *VOCAB;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    gguf_file f;
    char err[ERR_LEN];
    if (gguf_open(&f, "models/stories260K.gguf", err) || tok_load(&TOK, &f, err)) fuzz_die("%s", err);
    gguf_close(&f);
    if (gvocab_new(&VOCAB, TOK, err)) fuzz_die("%s", err);
    return 0;
}

static grammar *compile(const char *src, size_t len, char *err) {
    grammar *g = NULL;
    if (len && src[0] == '{') {
        char *gbnf;
        if (json_schema_to_gbnf(src, len, &gbnf, err)) return NULL;
        if (grammar_parse(&g, gbnf, strlen(gbnf), err)) g = NULL;
        free(gbnf);
        return g;
    }
    return grammar_parse(&g, src, len, err) ? NULL : g;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *src = (const char *)data;
    const char *nul = memchr(src, 0, size);
    const size_t src_len = nul ? (size_t)(nul - src) : size;
    const char *text = nul ? nul + 1 : "{\"a\": [1, \"x\"]} 1+2=3\n- item\n";
    const size_t text_len = nul ? size - src_len - 1 : strlen(text);
    char err[ERR_LEN];
    grammar *g = compile(src, src_len, err);
    if (!g) return 0;
    gconstraint *c;
    if (gcon_new(&c, g, VOCAB, err)) return grammar_free(g), 0;
    const uint64_t *mask;
    int32_t prev = tok_bos(TOK);
    // the mask, then each byte of the text as a token where the vocabulary has it
    for (size_t i = 0; i < text_len && i < 64; i++) {
        if (gcon_mask(c, prev, &mask, err) < 0) break;
        int32_t *enc, n;
        if (tok_encode(TOK, text + i, 1, 0, 0, &enc, &n, err)) break;
        int ok = n == 1 ? gcon_allows(c, prev, enc[0], err) : 0;
        if (ok == 1 && gcon_accept(c, prev, enc[0], err)) ok = -1;
        if (ok == 1) prev = enc[0];
        free(enc);
        if (ok != 1) break;
        if (gcon_must_end(c)) break;
    }
    gcon_free(c);
    grammar_free(g);
    return 0;
}
