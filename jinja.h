// jinja.h — a Jinja2 interpreter for chat templates (the tokenizer.chat_template
// of a GGUF, or a .jinja file), rendering byte for byte what Hugging Face
// transformers renders with jinja2: an ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and loop controls, transformers' tojson,
// raise_exception, strftime_now and {% generation %}.
//
// Covered: {{ }}, {% if/elif/else %}, for (loop.*, else, an if filter),
// break/continue, set (also block set and namespace()), macros and call,
// filter blocks, raw, whitespace control, Python-like expressions (slices,
// `in`, `~`, conditional expressions, chained comparisons), the str/dict
// methods templates use, the builtin filters and tests chat templates use.
// What is not covered is an error naming the template line, never a guess.
//
// A template is untrusted input: parsing and rendering are bounded (nesting
// depth, evaluation steps, memory, output size) and each limit is an error.
// The implementation: jinja_lex.c (source → tokens), jinja_parse.c (tokens →
// tree), jinja_value.c (values, Python's str/repr/json.dumps), jinja_eval.c
// (the tree walker), jinja_lib.c (filters, tests, methods, globals).
#ifndef QUILL_JINJA_H
#define QUILL_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <time.h>

typedef struct jinja_template jinja_template;

// Bounds on one render; a zero field takes the default in brackets.
typedef struct {
    size_t max_output;  // bytes of rendered text [16 MiB]
    size_t max_memory;  // bytes of values and buffers the render may hold [256 MiB]
    long max_steps;     // evaluation steps: expressions, statements, loop turns [20 M]
    int max_depth;      // nesting of expressions, blocks and macro calls [1024]
    time_t now;         // strftime_now's clock [time(NULL)]
} jinja_limits;

// Parses template source (UTF-8; newlines \r\n and \r read as \n, one
// trailing newline dropped, as jinja2 does). Returns 0, or -1 with err
// ("line N: ..." for a syntax error).
int jinja_parse(jinja_template **t, const char *src, size_t len, char *err);
void jinja_free(jinja_template *t);

// Renders with the variables of `vars` (a JSON object; JSON null is None,
// objects keep their key order). *out is malloc'd and NUL-terminated, *len
// bytes. Returns 0, or -1 with err: "line N: ..." for a template error
// (raise_exception's message, an undefined value used, a type error, a
// sandbox refusal, a limit) or an allocation failure. lim may be NULL.
int jinja_render(const jinja_template *t, const json_t *vars, const jinja_limits *lim, char **out, size_t *len,
                 char *err);

// Parse and render in one call: template source and the variables as JSON
// text (a fuzzing entry point: any bytes in either are handled).
int jinja_render_text(const char *src, size_t src_len, const char *vars_json, size_t vars_len,
                      const jinja_limits *lim, char **out, size_t *len, char *err);

#endif
