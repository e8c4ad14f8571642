// jinja_lex.h — the Jinja lexer: template source to tokens (jinja_lex.c),
// read by the parser (jinja_parse.c).
#ifndef QUILL_JINJA_LEX_H
#define QUILL_JINJA_LEX_H

#include <stddef.h>

#include "jinja_int.h"

typedef enum {
    T_DATA,         // template text (after whitespace control)
    T_VAR_BEGIN,    // {{
    T_VAR_END,      // }}
    T_BLOCK_BEGIN,  // {%
    T_BLOCK_END,    // %}
    T_NAME,         // identifiers and keywords (if, in, and, true, ...)
    T_STRING,       // the text between the quotes, escapes not yet decoded
    T_INT,
    T_FLOAT,
    T_OP,           // + - // ( ) ... as in s[0..n)
    T_EOF,
} jtok_type;

typedef struct {
    jtok_type type;
    int line;
    const char *s;  // the token's text in the normalized source
    size_t n;
} jtok;

// Tokens of the source, T_EOF last (in t's arena; errors unwind to t->fail).
jtok *jlex(jinja_template *t, const char *src, size_t len, size_t *n_toks);

#endif
