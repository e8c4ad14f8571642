// tests/test_template.c — chat templates and the Jinja engine.
//
// Without arguments: checks that need no reference — template errors name
// their line, every limit on a hostile template is a clear error (deep
// nesting, long loops, macro recursion, huge output and strings), the
// built-in formats and --chat-template choices load, and random mutations
// of the real templates in $SHARED/templates never crash (under ASan/UBSan
// in the sanitized build). Exits 0 only when every check passed.
//
// With arguments it is the C side of tests/template_ref.py, which renders the
// same conversations with jinja2 and compares byte for byte:
//   test_template render TEMPLATE.jinja CONVS.json BOS EOS
//   test_template render-family NAME CONVS.json BOS EOS
//   test_template families        the built-in formats: [{"name", "source"}]
// CONVS.json is a list of {"name", "messages", "tools"?, "vars"?}; each is
// rendered with the generation prompt, then without; the output is a JSON
// list of {"text": ...} or {"error": ...} in that order.
//   test_template bench TEMPLATE.jinja   (make bench) time to render 20 turns
#include "template.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "jinja.h"
#include "util.h"

static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 16;
    char *s = malloc(cap);
    *n = 0;
    for (size_t r; s && (r = fread(s + *n, 1, cap - *n - 1, f)) > 0;)
        if ((*n += r) + 1 == cap) s = realloc(s, cap *= 2);
    fclose(f);
    if (!s) exit(2);
    s[*n] = 0;
    return s;
}

// Renders src with vars (JSON text); returns the text or NULL with err.
static char *render(const char *src, const char *vars, const jinja_limits *lim, char *err) {
    char *out;
    size_t len;
    if (jinja_render_text(src, strlen(src), vars, strlen(vars), lim, &out, &len, err)) return NULL;
    return out;
}

static void expect_text(const char *src, const char *vars, const char *want) {
    char err[ERR_LEN] = "";
    char *got = render(src, vars, NULL, err);
    CHECK(got && !strcmp(got, want), "%s: got [%s] (%s), want [%s]", src, got ? got : "NULL", err, want);
    free(got);
}

static void expect_error(const char *what, const char *src, const char *vars, const jinja_limits *lim,
                         const char *want_in_err) {
    char err[ERR_LEN] = "";
    char *got = render(src, vars, lim, err);
    CHECK(!got && strstr(err, want_in_err), "%s: want an error with [%s], got [%s] / [%.80s]", what, want_in_err, err,
          got ? got : "");
    free(got);
}

// ---- unit checks ----------------------------------------------------------------------------

// Errors name the template line; what the engine does not support is refused.
static void test_errors(void) {
    expect_error("syntax", "a\nb\n{% if x %}\n{{ 1 + }}\n{% endif %}", "{}", NULL, "line 4:");
    expect_error("unclosed block", "{% for x in y %}\n\nabc", "{}", NULL, "'endfor'");
    expect_error("unknown tag", "\n{% include 'x.jinja' %}", "{}", NULL, "line 2: unsupported tag 'include'");
    expect_error("unknown filter", "\n\n{{ x | frobnicate }}", "{\"x\": 1}", NULL, "line 3: No filter named 'frobnicate'");
    expect_error("raise_exception", "{% if true %}\n{{ raise_exception('roles must alternate') }}{% endif %}", "{}", NULL,
                 "line 2: roles must alternate");
    expect_error("undefined attribute", "{{ a.b.c }}", "{\"a\": {}}", NULL, "'dict object' has no attribute 'b'");
    // a tuple key with a slice in it once reached the evaluator as a slice of nothing (fuzz_template)
    expect_error("slice in a tuple subscript", "{{ a[1, :] }}", "{\"a\": [1, 2]}", NULL, "slice inside a tuple");
    expect_error("slice first in a tuple subscript", "{{ a[:1, 0] }}", "{\"a\": [1, 2]}", NULL, "slice inside a tuple");
    expect_error("sandbox", "{% set l = [] %}{{ l.append(1) }}", "{}", NULL, "unsafe");
    expect_error("not UTF-8", "\xff{{ 1 }}", "{}", NULL, "not valid UTF-8");
    expect_error("variables not an object", "x", "[1]", NULL, "JSON object");
    // what jinja2 does with undefined and None, in the cases templates lean on
    expect_text("{{ x }}|{{ x is defined }}|{{ none.y is defined }}|{{ (x or 'd') }}", "{}", "|False|False|d");
    expect_text("{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.content }}{% endfor %}",
                "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}]}",
                "1u");
}

// Each limit is a clear error, not a crash or a hang.
static void test_limits(void) {
    char *deep = malloc(20001);
    for (int i = 0; i < 10000; i++) deep[i] = '(';
    strcpy(deep + 10000, "");
    char *src = malloc(20100);
    snprintf(src, 20100, "{{ %s1 }}", deep);
    expect_error("nested parentheses", src, "{}", NULL, "brackets nested too deeply");
    src[0] = 0;
    for (int i = 0; i < 300; i++) strcat(src, "{% if true %}");
    expect_error("nested blocks", src, "{}", NULL, "nests deeper");
    strcpy(src, "{{ 1");  // long operator chains: refused at 1000 (the evaluator recurses on them)
    for (int i = 0; i < 1500; i++) strcat(src, " + 1");
    strcat(src, " }}");
    expect_error("a long chain of +", src, "{}", NULL, "operators in a row");
    strcpy(src, "{{ 'x'");
    for (int i = 0; i < 1500; i++) strcat(src, " | trim");
    strcat(src, " }}");
    expect_error("a long chain of filters", src, "{}", NULL, "operators in a row");
    strcpy(src, "{{ 0");
    for (int i = 0; i < 900; i++) strcat(src, " + 1");
    strcat(src, " }}");
    expect_text(src, "{}", "900");
    free(deep);
    free(src);
    expect_error("macro recursion", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", NULL, "deeper than");
    jinja_limits lim = {.max_steps = 100000};
    expect_error("long loop", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}",
                 &lim, "evaluation steps");
    expect_error("range", "{{ range(1000000) | length }}", "{}", NULL, "Range too big");
    lim = (jinja_limits){.max_output = 1000};
    expect_error("output", "{% for i in range(2000) %}x{% endfor %}", "{}", &lim, "output limit");
    lim = (jinja_limits){.max_memory = 1 << 20};
    expect_error("memory", "{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                           "{% endfor %}{{ ns.s | length }}", "{}", &lim, "memory");
    expect_error("string repeat", "{{ 'x' * 100000000000 }}", "{}", NULL, "too long");
    expect_error("integer overflow", "{{ 9223372036854775807 + 1 }}", "{}", NULL, "overflow");
}

static void test_choices(void) {
    chat_template t;
    char err[ERR_LEN] = "";
    int fallback;
    CHECK(tpl_load(&t, NULL, NULL, "vicuna", &fallback, err) == -1 && strstr(err, "unknown chat template 'vicuna'"),
          "unknown name: %s", err);
    CHECK(tpl_load(&t, NULL, NULL, "no/such/file.jinja", &fallback, err) == -1 && strstr(err, "cannot open"),
          "missing file: %s", err);
    for (int i = 0; tpl_builtin_names[i]; i++) {
        const char *name = tpl_builtin_names[i];
        CHECK(!tpl_init(&t, tpl_builtin_source(name), strlen(tpl_builtin_source(name)), name, "<s>", "</s>", err),
              "%s: %s", name, err);
        chat_msg m[] = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", " Hello."}, {"user", "Bye"}};
        char *out;
        size_t len;
        CHECK(!tpl_render(&t, m, 4, NULL, 1, &out, &len, err) && strlen(out) == len && strstr(out, "Bye"), "%s: %s",
              name, err);
        if (!strcmp(name, "plain"))  // no Jinja source to compare with: its text is spelled out here
            CHECK(!strcmp(out, "System: Be brief.\nUser: Hi\nAssistant: Hello.\nUser: Bye\nAssistant:"), "plain: [%s]",
                  out);
        free(out);
        tpl_free(&t);
    }
}

// Random byte edits of the real templates: parse and render each; any
// outcome but a crash (or an ASan/UBSan report) is fine.
static void test_mutations(void) {
    const char *shared = getenv("SHARED") ? getenv("SHARED") : "../shared";
    char path[4096], list[4096];
    snprintf(list, sizeof list, "ls %s/templates/*.jinja 2>/dev/null", shared);
    FILE *p = popen(list, "r");
    if (!p) return;
    uint64_t rng = 12345;
    const char *vars = "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": "
                       "\"hi\"}, {\"role\": \"assistant\", \"content\": \"a\", \"reasoning_content\": \"r\"}, "
                       "{\"role\": \"user\", \"content\": \"x\"}], \"add_generation_prompt\": true, \"bos_token\": "
                       "\"<s>\", \"eos_token\": \"</s>\", \"tools\": null}";
    static const char pieces[][8] = {"{{", "}}", "{%", "%}", "-", "(", ")", "[", "]", "'", "\"", "|", ".", "~", "if",
                                     "for", "end", "\\", "*", "\n", "0", "9999", "loop", "ns", "is"};
    int n_files = 0, n_runs = 0;
    jinja_limits lim = {.max_steps = 200000, .max_output = 1 << 20, .max_memory = 64 << 20};
    while (fgets(path, sizeof path, p)) {
        path[strcspn(path, "\n")] = 0;
        size_t len;
        char *src = slurp(path, &len);
        if (!src) continue;
        n_files++;
        for (int m = 0; m < 25; m++) {
            char *mut = malloc(len + 64);
            memcpy(mut, src, len + 1);
            size_t n = len;
            for (int k = 0; k < 1 + m % 4; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                size_t at = n ? (rng >> 33) % n : 0;
                const char *piece = pieces[(rng >> 17) % (sizeof pieces / sizeof *pieces)];
                size_t pl = strlen(piece);
                if ((rng >> 7) & 1) {  // replace bytes with a piece
                    if (at + pl <= n) memcpy(mut + at, piece, pl);
                } else if (n + pl < len + 64) {  // insert it
                    memmove(mut + at + pl, mut + at, n - at + 1);
                    memcpy(mut + at, piece, pl);
                    n += pl;
                }
            }
            mut[n] = 0;
            char err[ERR_LEN], *out;
            size_t olen;
            if (!jinja_render_text(mut, n, vars, strlen(vars), &lim, &out, &olen, err)) free(out);
            n_runs++;
            free(mut);
        }
        free(src);
    }
    pclose(p);
    CHECK(n_files > 0, "no templates in %s/templates", shared);
    printf("test_template: %d mutated templates from %d files parsed and rendered\n", n_runs, n_files);
}

// ---- the renderer for template_ref.py --------------------------------------------------------------

static json_t *render_all(const chat_template *t, const json_t *convs) {
    json_t *results = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(convs, i, c) {
        for (int gen = 1; gen >= 0; gen--) {
            char *out, err[ERR_LEN];
            size_t len;
            json_t *tools = json_object_get(c, "tools");
            if (tpl_render_json(t, json_object_get(c, "messages"), tools, json_object_get(c, "vars"), gen, &out, &len,
                                err)) {
                json_array_append_new(results, json_pack("{s:s}", "error", err));
            } else {
                json_array_append_new(results, json_pack("{s:s%}", "text", out, len));
                free(out);
            }
        }
    }
    return results;
}

static int cmd_render(int argc, char **argv) {
    if (argc != 6) return fprintf(stderr, "usage: see tests/test_template.c\n"), 2;
    chat_template t;
    char err[ERR_LEN];
    json_error_t je;
    json_t *convs = json_load_file(argv[3], 0, &je);
    if (!convs) return fprintf(stderr, "%s: %s\n", argv[3], je.text), 2;
    int rc;
    if (!strcmp(argv[1], "render-family")) {
        const char *src = tpl_builtin_source(argv[2]);
        rc = src ? tpl_init(&t, src, strlen(src), argv[2], argv[4], argv[5], err) : errf(err, "no format %s", argv[2]);
    } else {
        size_t len;
        char *src = slurp(argv[2], &len);
        rc = src ? tpl_init(&t, src, len, argv[2], argv[4], argv[5], err) : errf(err, "cannot read %s", argv[2]);
        free(src);
    }
    json_t *results;
    if (rc) {  // a template that does not parse: every rendering is that error
        results = json_array();
        for (size_t i = 0; i < 2 * json_array_size(convs); i++) json_array_append_new(results, json_pack("{s:s}", "error", err));
    } else {
        results = render_all(&t, convs);
        tpl_free(&t);
    }
    json_dumpf(results, stdout, JSON_COMPACT);
    json_decref(results);
    json_decref(convs);
    return 0;
}

static int cmd_families(void) {
    json_t *list = json_array();
    for (int i = 0; tpl_builtin_names[i]; i++)
        json_array_append_new(list, json_pack("{s:s, s:s}", "name", tpl_builtin_names[i], "source",
                                              tpl_builtin_source(tpl_builtin_names[i])));
    json_dumpf(list, stdout, JSON_COMPACT);
    json_decref(list);
    return 0;
}

// make bench: a 20-turn conversation through the template, the best of many runs.
static int cmd_bench(const char *path) {
    size_t len;
    char *src = slurp(path, &len), err[ERR_LEN];
    chat_template t;
    if (!src || tpl_init(&t, src, len, path, "<s>", "</s>", err)) return fprintf(stderr, "%s: %s\n", path, src ? err : "unreadable"), 1;
    chat_msg m[21] = {{"system", "You are a helpful assistant."}};
    for (int i = 1; i <= 20; i++)
        m[i] = (chat_msg){i % 2 ? "user" : "assistant", i % 2 ? "Tell me something about the number seven, please."
                                                              : "Seven is a prime number, and the number of days in a week."};
    double best = 1e9;
    size_t out_len = 0;
    for (int k = 0; k < 200; k++) {
        char *out;
        double t0 = now_sec();
        if (tpl_render(&t, m, 21, NULL, 1, &out, &out_len, err)) return fprintf(stderr, "%s\n", err), 1;
        double dt = now_sec() - t0;
        best = dt < best ? dt : best;
        free(out);
    }
    printf("chat template %s (%zu bytes): 20 turns rendered in %.3f ms (%zu bytes of prompt)\n", path, len, best * 1e3,
           out_len);
    tpl_free(&t);
    free(src);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "render") || !strcmp(argv[1], "render-family"))) return cmd_render(argc, argv);
    if (argc > 1 && !strcmp(argv[1], "families")) return cmd_families();
    if (argc > 2 && !strcmp(argv[1], "bench")) return cmd_bench(argv[2]);
    test_errors();
    test_limits();
    test_choices();
    test_mutations();
    if (n_fail) fprintf(stderr, "%d checks failed\n", n_fail);
    else printf("test_template: all checks passed\n");
    return n_fail ? 1 : 0;
}
