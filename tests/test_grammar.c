// tests/test_grammar.c — the GBNF parser, the matcher and the vocabulary mask.
//
// Independent checks: texts written by hand that each grammar must accept or
// reject (llama.cpp's grammar tests use the same kind), errors for broken
// grammars, and the trie walk's mask against a brute-force check of every
// token of a real vocabulary, one by one, from the same states.
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "gguf.h"
#include "grammar.h"
#include "json_schema.h"
#include "tokenizer.h"
#include "util.h"

static char *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = xmalloc((size_t)n + 1);
    *len = fread(s, 1, (size_t)n, f);
    fclose(f);
    return s;
}

// 1 when the whole text is a sentence of g, 0 when rejected at some byte or
// incomplete, -1 on an error.
static int matches(const grammar *g, const char *text, size_t n) {
    char err[ERR_LEN];
    gstate a = {0}, b = {0};
    gscratch sc = {0};
    int ok = gstate_start(g, &a, &sc, err) == 0;
    for (size_t i = 0; ok && i < n; i++) {
        ok = gstate_byte(g, &a, (uint8_t)text[i], &b, &sc, err) == 1;
        gstate t = a;
        a = b, b = t;
    }
    ok = ok && gstate_can_end(&a);
    gstate_free(&a), gstate_free(&b), gscratch_free(&sc);
    return ok;
}

static grammar *parse(const char *text) {
    char err[ERR_LEN];
    grammar *g;
    if (grammar_parse(&g, text, strlen(text), err)) {
        fail("grammar did not parse: %s\n%s", err, text);
        return NULL;
    }
    return g;
}

static void expect(const grammar *g, const char *text, int want) {
    int got = matches(g, text, strlen(text));
    CHECK(got == want, "'%s': expected %s", text, want ? "accepted" : "rejected");
}

static void test_shared_grammars(const char *shared) {
    static const struct {
        const char *name;
        const char *yes[4], *no[4];
    } cases[] = {
        {"json", {"{\"a\": [1, 2.5, \"x\\n\"], \"b\": {\"c\": null}}", "{}", "{\"k\": -0.5e+3}"},
                 {"{\"a\" 1}", "[1]", "{\"a\": tru}", "{\"a\": \"\x01\"}"}},
        {"json_arr", {"[\n]", "[\n1,\n\"two\",\n{\"three\": 3}]"}, {"{}", "[\n1,]"}},
        {"arithmetic", {"1+2=3\n", "(a+b)*3 = c\n"}, {"1+=2\n", "1+2=3"}},
        {"list", {"- milk\n- eggs\n"}, {"milk\n", "- \n"}},
        {"c", {"int main(){return 0;}"}, {"int main(){return 0}"}},
        {"chess", {"1. e4 e5\n2. Nf3 Nc6\n"}, {"1. e9 e5\n2. Nf3 Nc6\n"}},
        {"english", {"Hello, world."}, {"Héllo"}},
        {"japanese", {"こんにちは 世界"}, {"hello"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[512], err[ERR_LEN];
        snprintf(path, sizeof path, "%s/grammars/%s.gbnf", shared, cases[i].name);
        size_t len;
        char *text = slurp(path, &len);
        if (!text) { fail("cannot read %s", path); continue; }
        grammar *g;
        if (grammar_parse(&g, text, len, err)) {
            fail("%s: %s", path, err);
        } else {
            for (int k = 0; k < 4 && cases[i].yes[k]; k++) expect(g, cases[i].yes[k], 1);
            for (int k = 0; k < 4 && cases[i].no[k]; k++) expect(g, cases[i].no[k], 0);
            grammar_free(g);
        }
        free(text);
    }
}

static void test_syntax(void) {
    grammar *g = parse("root ::= \"a\"{2,3} [x-z]+ (\"-\" | \"+\")? [^\\n\\x41] \"\\u00e9\" . # comment\n");
    if (g) {
        expect(g, "aax-\xc3\xa9\xc3\xa9", 1);  // é written in UTF-8, then any character
        expect(g, "aaayz+b\xc3\xa9!", 1);
        expect(g, "ax-b\xc3\xa9!", 0);        // only one a
        expect(g, "aaaax-b\xc3\xa9!", 0);     // four
        expect(g, "aaxA\xc3\xa9!", 0);        // A is excluded
        grammar_free(g);
    }
    g = parse("root ::= item{3}\nitem ::= [0-9] |\n  \"x\"\n");
    if (g) {
        expect(g, "1x2", 1), expect(g, "12", 0), expect(g, "1234", 0);
        grammar_free(g);
    }
    // stacked *, + and ? fold into one repetition of the same strings
    g = parse("root ::= \"a\"?? \"b\"+ * \"c\"?+ \"d\"+++\n");
    if (g) {
        expect(g, "d", 1), expect(g, "abbcccdd", 1), expect(g, "aad", 0), expect(g, "abc", 0);
        grammar_free(g);
    }
    // an empty alternative is kept once (its copies would each expand what follows)
    g = parse("root ::= x \"!\"\nx ::= \"a\" | | \"b\" |\n");
    if (g) {
        expect(g, "!", 1), expect(g, "a!", 1), expect(g, "b!", 1), expect(g, "ab!", 0);
        int alts = 0;
        for (int i = 0; i < g->n_elems; i++) alts += g->e[i].type == G_ALT || g->e[i].type == G_END;
        CHECK(alts == 4, "alternatives: %d, want 4 (root's one; x's \"a\", \"b\" and one empty)", alts);
        grammar_free(g);
    }
    // distinct paths to one continuation: twelve a's in a row, each of four nullable
    // alternatives, reach "!" by 4^12 paths; each continuation is expanded once
    g = parse("root ::= a a a a a a a a a a a a \"!\"\na ::= \"x\"? | \"x\"? | \"x\"? | \"x\"?\n");
    if (g) {
        expect(g, "!", 1), expect(g, "xxxxxxxxxxxx!", 1), expect(g, "xxxxxxxxxxxxx!", 0);
        grammar_free(g);
    }
    // a code point split in its bytes: a partial character only survives
    // where some completion can match
    g = parse("root ::= [\\u0400-\\u04ff]+");
    if (g) {
        expect(g, "\xd0\x96\xd0\x96", 1), expect(g, "\xd0", 0), expect(g, "\xc3\xa9", 0);
        grammar_free(g);
    }
    // overlong forms and surrogates are not UTF-8: "{" written as C1 BB, U+D800 as ED A0 80
    g = parse("root ::= [^x]");
    if (g) {
        expect(g, "{", 1), expect(g, "\xc1\xbb", 0), expect(g, "\xe0\x81\xbb", 0), expect(g, "\xed\xa0\x80", 0);
        expect(g, "\xf4\x90\x80\x80", 0), expect(g, "\xf0\x9f\x98\x80", 1);
        grammar_free(g);
    }
}

static void expect_error(const char *text, const char *want) {
    char err[ERR_LEN];
    grammar *g;
    int rc = grammar_parse(&g, text, strlen(text), err);
    CHECK(rc != 0, "'%s' parsed", text);
    if (rc) CHECK(strstr(err, want) != NULL, "'%s': error '%s' lacks '%s'", text, err, want);
    else grammar_free(g);
}

static void test_errors(void) {
    expect_error("root ::= expr\nexpr ::= expr \"+\" num | num\nnum ::= [0-9]+\n", "left-recursive");
    expect_error("root ::= a\na ::= b? root \"x\"\nb ::= \"y\"\n", "left-recursive");
    expect_error("root ::= foo\n", "'foo' is used but not defined");
    expect_error("start ::= \"x\"\n", "no 'root' rule");
    expect_error("root ::= \"\\q\"\n", "unknown escape");
    expect_error("root ::= (\"a\"\n", "expected ')'");
    expect_error("root ::= [ab", "not closed");
    expect_error("root ::= \"a\"{5,2}\n", "n < m");
    expect_error("root ::= \"a\"{100000}\n", "above 1000");
    expect_error("root ::= ()*\n", "left-recursive");  // a nullable repetition
    char deep[600];
    memset(deep, '(', 300);
    snprintf(deep, sizeof deep, "root ::= %.*s", 300, "((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
             "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
             "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((("
             "(((((((((((((((((((((((((((((((((((((((((((((((((((((((((((");
    expect_error(deep, "nested deeper");
}

// The mask from the trie walk equals a token-by-token check of the whole
// vocabulary, along a text the grammar accepts: gbnf, or json.gbnf when NULL.
static void test_mask(const char *shared, const char *gbnf, const char *doc) {
    char path[512], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-llama-spm.gguf", shared);
    gguf_file f;
    tokenizer *tok;
    if (gguf_open(&f, path, err) || tok_load(&tok, &f, err)) { fail("%s: %s", path, err); return; }
    gguf_close(&f);
    snprintf(path, sizeof path, "%s/grammars/json.gbnf", shared);
    size_t len = gbnf ? strlen(gbnf) : 0;
    char *text = gbnf ? strdup(gbnf) : slurp(path, &len);
    grammar *g = NULL;
    gvocab *v = NULL;
    gconstraint *c = NULL;
    if (!text || grammar_parse(&g, text, len, err) || gvocab_new(&v, tok, err) || gcon_new(&c, g, v, err)) {
        fail("setup: %s", err);
        goto out;
    }
    int32_t *ids, n_ids;
    if (tok_encode(tok, doc, strlen(doc), 1, 0, &ids, &n_ids, err)) { fail("encode: %s", err); goto out; }
    const int V = tok_n_vocab(tok);
    long checked = 0, allowed_total = 0;
    for (int i = 1; i < n_ids; i++) {
        const uint64_t *m;
        int n = gcon_mask(c, ids[i - 1], &m, err);
        if (n < 0) { fail("mask: %s", err); break; }
        uint64_t *copy = xmalloc((size_t)(V / 64 + 1) * 8);
        memcpy(copy, m, (size_t)(V / 64 + 1) * 8);
        int count = 0;
        for (int t = 0; t < V; t++) {
            int want = gcon_allows(c, ids[i - 1], t, err);
            int got = (int)(copy[t >> 6] >> (t & 63) & 1);
            count += got;
            if (want != got) { fail("step %d token %d (%s): mask %d, brute force %d", i, t, tok_piece(tok, t), got, want); break; }
        }
        CHECK(count == n, "step %d: count %d vs %d", i, count, n);
        CHECK(copy[ids[i] >> 6] >> (ids[i] & 63) & 1, "step %d: the document's own token %d is masked", i, ids[i]);
        free(copy);
        checked += V, allowed_total += n;
        if (gcon_accept(c, ids[i - 1], ids[i], err)) { fail("accept: %s", err); break; }
    }
    CHECK(gcon_can_end(c), "the document is complete");
    CHECK(gcon_allows(c, ids[n_ids - 1], tok_eos(tok), err) == 1, "EOS allowed at the end");
    fprintf(stderr, "mask: %ld token checks over %d steps, %ld allowed\n", checked, n_ids - 1, allowed_total);
    free(ids);
out:
    gcon_free(c);
    gvocab_free(v);
    grammar_free(g);
    free(text);
    tok_free(tok);
}

// --bench: the grammar's cost per generated token for a JSON schema, as a
// sampled generation pays it (the full mask applied to the logits every step,
// then the state advanced), on the vocabularies of $SHARED/vocab. One fresh
// constraint per document: the mask cache starts cold, as in a run.
static const char BENCH_SCHEMA[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"name\": {\"type\": \"string\", \"maxLength\": 40},"
    "\"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 150},"
    "\"email\": {\"type\": \"string\", \"pattern\": \"^[a-z0-9.]+@[a-z]+\\\\.[a-z]{2,4}$\"},"
    "\"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 8},"
    "\"address\": {\"type\": \"object\", \"properties\": {\"street\": {\"type\": \"string\"},"
    "\"city\": {\"type\": \"string\"}, \"zip\": {\"type\": \"string\", \"pattern\": \"^[0-9]{5}$\"}},"
    "\"required\": [\"street\", \"city\"]},"
    "\"score\": {\"type\": \"number\", \"minimum\": 0, \"maximum\": 10}},"
    "\"required\": [\"name\", \"age\", \"tags\", \"address\"]}";
static const char BENCH_DOC[] =
    "{\"name\": \"Ada Lovelace, Countess of Lovelace\", \"age\": 36, \"tags\": [\"mathematics\", "
    "\"analytical engine\", \"poetry of science\", \"notes\"], \"address\": {\"street\": \"12 St James's Square\", "
    "\"city\": \"London\", \"zip\": \"12345\"}, \"email\": \"ada.king@example.org\", \"score\": 9.75}";

static int bench_vocab(const char *path, const grammar *g) {
    char err[ERR_LEN];
    gguf_file f;
    tokenizer *tok;
    if (gguf_open(&f, path, err) || tok_load(&tok, &f, err)) return fprintf(stderr, "%s: %s\n", path, err), 1;
    gguf_close(&f);
    double t0 = now_sec();
    gvocab *v;
    if (gvocab_new(&v, tok, err)) return fprintf(stderr, "%s\n", err), 1;
    const double t_trie = now_sec() - t0;
    int32_t *ids, n;
    if (tok_encode(tok, BENCH_DOC, sizeof BENCH_DOC - 1, 0, 0, &ids, &n, err)) return fprintf(stderr, "%s\n", err), 1;
    const int V = tok_n_vocab(tok), reps = 5;
    float *logits = xmalloc((size_t)V * sizeof *logits);
    double total = 0;
    long allowed = 0;
    for (int r = 0; r < reps; r++) {
        gconstraint *c;
        if (gcon_new(&c, g, v, err)) return fprintf(stderr, "%s\n", err), 1;
        for (int i = 0; i < n; i++) {
            memset(logits, 0, (size_t)V * sizeof *logits);  // (not timed: gcon_seconds counts the grammar alone)
            int k = gcon_apply(c, i ? ids[i - 1] : -1, logits, err);
            if (k < 0 || !(logits[ids[i]] > -1e30f)) return fprintf(stderr, "token %d masked: %s\n", i, err), 1;
            allowed += k;
            if (gcon_accept(c, i ? ids[i - 1] : -1, ids[i], err)) return fprintf(stderr, "%s\n", err), 1;
        }
        if (!gcon_must_end(c)) return fprintf(stderr, "the document does not complete the schema\n"), 1;
        total += gcon_seconds(c);
        gcon_free(c);
    }
    printf("grammar, JSON schema, %s (%d tokens): %.3f ms/token (mask + apply + advance, mean of %d tokens x %d runs, "
           "%.0f tokens allowed per step), vocabulary trie built in %.0f ms\n",
           strrchr(path, '/') + 1, V, total * 1e3 / (n * reps), n, reps, (double)allowed / (n * reps), t_trie * 1e3);
    free(logits), free(ids);
    gvocab_free(v);
    tok_free(tok);
    return 0;
}

static int bench(const char *shared) {
    char err[ERR_LEN], *gbnf, path[512];
    grammar *g;
    if (json_schema_to_gbnf(BENCH_SCHEMA, sizeof BENCH_SCHEMA - 1, &gbnf, err) ||
        grammar_parse(&g, gbnf, strlen(gbnf), err))
        return fprintf(stderr, "bench schema: %s\n", err), 1;
    free(gbnf);
    int rc = 0;
    const char *vocabs[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-llama-bpe.gguf"};
    for (int i = 0; i < 2 && !rc; i++) {
        snprintf(path, sizeof path, "%s/vocab/%s", shared, vocabs[i]);
        rc = bench_vocab(path, g);
    }
    grammar_free(g);
    return rc;
}

int main(int argc, char **argv) {
    const char *shared = getenv("SHARED") ? getenv("SHARED") : "../shared";
    if (argc > 1 && !strcmp(argv[1], "--bench")) return bench(shared);
    test_shared_grammars(shared);
    test_syntax();
    test_errors();
    test_mask(shared, NULL, "{\"name\": \"Zoë\", \"n\": [1, -2.5e3], \"ok\": true}");
    // ambiguous: dozens of parses at once, bytes the stacks' tops treat alike, UTF-8 leaves
    test_mask(shared, "root ::= (.* [a-z] | [a-zé]+ \" \"?)+ \"!\"", "héllo wörld, ça va? abc!");
    if (n_fail) fprintf(stderr, "%d failures\n", n_fail);
    return n_fail != 0;
}
