// tests/test_template.c — chat templates.
//
// Without arguments: checks that need no reference (family names, detection of
// each family's markers, the plain fallback's text, out-of-range inputs).
// Exits 0 only when every check passed.
//
// With arguments it is the C side of tests/template_ref.py, which renders the
// same conversations with jinja2 and compares byte for byte:
//   test_template render --gguf MODEL.gguf GEN < MESSAGES
//   test_template render --text TEMPLATE_FILE BOS EOS GEN < MESSAGES
//   test_template render --name FAMILY BOS EOS GEN < MESSAGES
// MESSAGES is role NUL content NUL ... ; GEN is 0 or 1 (add_generation_prompt).
// Prints the detected family name and a newline, then the rendered text.
#include "template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "check.h"


// ---- unit checks ----------------------------------------------------------------

static void test_names(void) {
    for (int f = 0; f < TPL_N_FAMILIES; f++)
        CHECK(tpl_family_from_name(tpl_family_name((tpl_family)f)) == f, "family %d", f);
    CHECK(tpl_family_from_name("vicuna") == -1, "unknown name");
    chat_template t;
    int rec;
    char err[ERR_LEN] = "";
    CHECK(tpl_init(&t, NULL, "vicuna", "<s>", "</s>", &rec, err) == -1, "unknown name accepted");
    CHECK(strstr(err, "vicuna") != NULL, "error names it: %s", err);
}

// Marker fragments as they appear in templates (not whole templates: those are
// in template_ref.py, where jinja2 renders them).
static void test_detect(void) {
    static const struct { const char *text; tpl_family want; } cases[] = {
        {"{{ '<|im_start|>' + message['role'] }}", TPL_CHATML},
        {"{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}", TPL_LLAMA3},
        {"{{ '<start_of_turn>' + role + '\\n' }}", TPL_GEMMA},
        {"{{ '<|user|>\\n' }}...{{ '<|assistant|>\\n' }}", TPL_PHI3},
        {"{{ bos_token + '[INST] <<SYS>>\\n' }}", TPL_LLAMA2},
        {"{{ bos_token + '[INST] ' + message['content'] }}", TPL_MISTRAL},
        {"{% for m in messages %}{{ m['role'] + ': ' + m['content'] }}{% endfor %}", TPL_PLAIN},
        {"", TPL_PLAIN},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK(tpl_detect(cases[i].text) == cases[i].want, "case %zu: got %s", i,
              tpl_family_name(tpl_detect(cases[i].text)));
    CHECK(tpl_detect(NULL) == TPL_PLAIN, "NULL text");
}

static char *render(const char *text, const char *name, const chat_msg *m, int n, int gen, int *rec) {
    chat_template t;
    char err[ERR_LEN];
    if (tpl_init(&t, text, name, "<s>", "</s>", rec, err)) {
        fprintf(stderr, "tpl_init: %s\n", err);
        exit(1);
    }
    size_t len;
    char *s = tpl_render(&t, m, n, gen, &len);
    CHECK(s && strlen(s) == len, "length");
    tpl_free(&t);
    return s;
}

// The fallback has no Jinja source to compare with: its text is spelled out here.
static void test_plain(void) {
    const chat_msg m[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", " Hello."}, {"user", "Bye"}};
    int rec;
    char *s = render("{{ messages }}", NULL, m, 4, 1, &rec);
    CHECK(!rec, "a template without markers is not recognized");
    CHECK(!strcmp(s, "System: Be brief.\nUser: Hi\nAssistant: Hello.\nUser: Bye\nAssistant:"), "plain: [%s]", s);
    free(s);
    s = render(NULL, "plain", m, 0, 0, &rec);
    CHECK(!strcmp(s, ""), "empty conversation: [%s]", s);
    free(s);
}

// Variant details read from the template text.
static void test_variants(void) {
    const chat_msg m[] = {{"user", "Hi"}};
    int rec;
    char *s = render("{{ '<|im_start|>system\\nYou are \\'kind\\'.<|im_end|>\\n' }}{{ '<|im_start|>' }}",
                     NULL, m, 1, 1, &rec);
    CHECK(rec && !strcmp(s, "<|im_start|>system\nYou are 'kind'.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                            "<|im_start|>assistant\n"), "escaped default system: [%s]", s);
    free(s);
    // a system header built from an expression is no default prompt
    s = render("{{ '<|im_start|>system\\n' + sys + '<|im_end|>' }}", NULL, m, 1, 0, &rec);
    CHECK(!strcmp(s, "<|im_start|>user\nHi<|im_end|>\n"), "no default: [%s]", s);
    free(s);
    s = render("<|start_header_id|> Cutting Knowledge Date {% set date_string = \"1 Jan 2030\" %}", NULL, m, 1, 0,
               &rec);
    CHECK(strstr(s, "Today Date: 1 Jan 2030\n\n<|eot_id|>") != NULL, "llama3 date: [%s]", s);
    free(s);
}

// ---- the renderer for template_ref.py ----------------------------------------------

static char *slurp(FILE *f, size_t *n) {
    size_t cap = 4096;
    char *s = malloc(cap);
    *n = 0;
    for (size_t r; s && (r = fread(s + *n, 1, cap - *n - 1, f)) > 0;)
        if ((*n += r) + 1 == cap) s = realloc(s, cap *= 2);
    if (!s) exit(2);
    s[*n] = 0;
    return s;
}

static int cmd_render(int argc, char **argv) {
    chat_template t;
    char err[ERR_LEN];
    int rec, gen = atoi(argv[argc - 1]), rc;
    gguf_file f;
    tokenizer *tok = NULL;
    if (argc == 5 && !strcmp(argv[2], "--gguf")) {
        if (gguf_open(&f, argv[3], err) || tok_load(&tok, &f, err)) return fprintf(stderr, "%s\n", err), 2;
        rc = tpl_load(&t, &f, tok, NULL, &rec, err);
        gguf_close(&f);
        tok_free(tok);
    } else if (argc == 7 && (!strcmp(argv[2], "--text") || !strcmp(argv[2], "--name"))) {
        size_t n;
        FILE *tf = argv[2][2] == 't' ? fopen(argv[3], "rb") : NULL;
        char *text = tf ? slurp(tf, &n) : NULL;
        if (tf) fclose(tf);
        rc = tpl_init(&t, text, text ? NULL : argv[3], argv[4], argv[5], &rec, err);
        free(text);
    } else {
        return fprintf(stderr, "usage: see tests/test_template.c\n"), 2;
    }
    if (rc) return fprintf(stderr, "%s\n", err), 2;
    size_t n_in, len;
    char *in = slurp(stdin, &n_in);
    chat_msg msgs[64];
    int n = 0;
    for (size_t p = 0; p < n_in && n < 64; n++) {  // role NUL content NUL
        msgs[n].role = in + p;
        p += strlen(in + p) + 1;
        msgs[n].content = in + p;
        p += strlen(in + p) + 1;
    }
    char *s = tpl_render(&t, msgs, n, gen, &len);
    if (!s) return 2;
    printf("%s\n", tpl_family_name(t.family));
    fwrite(s, 1, len, stdout);
    free(s);
    free(in);
    tpl_free(&t);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && !strcmp(argv[1], "render")) return cmd_render(argc, argv);
    test_names();
    test_detect();
    test_plain();
    test_variants();
    if (n_fail) fprintf(stderr, "%d checks failed\n", n_fail);
    else printf("test_template: all checks passed\n");
    return n_fail ? 1 : 0;
}
