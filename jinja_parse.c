// jinja_parse.c — tokens to a syntax tree, with jinja2's grammar and
// operator precedence (lowest first): `x if c else y`, or, and, not,
// comparisons (chained; in, not in), + -, ~, * / // %, **, unary - +, then
// postfix .attr [key] (call), then | filter and `is` test.
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"
#include "jinja_lex.h"

#define MAX_PARSE_DEPTH 200  // nested expressions and blocks
#define MAX_CHAIN 1000       // operators, filters, subscripts in a row (a + b + ..., x | f | g ...)

typedef struct {
    jinja_template *t;
    jtok *tok;
    size_t i, n;
    int depth;
} parser;

_Noreturn static void pfail(parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
_Noreturn static void pfail(parser *P, const char *fmt, ...) {
    char msg[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jfail_at(&P->t->fail, P->tok[P->i].line, "%s", msg);
}

static jtok *cur(parser *P) { return &P->tok[P->i]; }
static jtok *peek(parser *P) { return &P->tok[P->i + (P->i + 1 < P->n)]; }
static void next(parser *P) {
    if (P->i + 1 < P->n) P->i++;
}

static int tok_is(const jtok *k, jtok_type type, const char *s) {
    return k->type == type && (!s || (k->n == strlen(s) && !memcmp(k->s, s, k->n)));
}
static int is_op(parser *P, const char *op) { return tok_is(cur(P), T_OP, op); }
static int is_name(parser *P, const char *name) { return tok_is(cur(P), T_NAME, name); }

static const char *describe(const jtok *k) {
    switch (k->type) {
    case T_EOF: return "end of template";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_END: return "end of statement block";
    case T_DATA: return "template text";
    default: return NULL;
    }
}

_Noreturn static void unexpected(parser *P, const char *wanted) {
    const jtok *k = cur(P);
    const char *d = describe(k);
    if (d) pfail(P, "unexpected %s%s%s", d, wanted ? ", expected " : "", wanted ? wanted : "");
    pfail(P, "unexpected '%.*s'%s%s", (int)(k->n > 40 ? 40 : k->n), k->s, wanted ? ", expected " : "",
          wanted ? wanted : "");
}

static void expect_op(parser *P, const char *op) {
    if (!is_op(P, op)) {
        char w[8];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(P, w);
    }
    next(P);
}

static void expect_type(parser *P, jtok_type type, const char *what) {
    if (cur(P)->type != type) unexpected(P, what);
    next(P);
}

static int skip_name(parser *P, const char *name) {
    if (!is_name(P, name)) return 0;
    next(P);
    return 1;
}

static const char *name_of(parser *P, const jtok *k) {
    char *s = ja_alloc(&P->t->arena, k->n + 1);
    memcpy(s, k->s, k->n);
    return s;
}

static const char *expect_name(parser *P) {
    if (cur(P)->type != T_NAME) unexpected(P, "a name");
    const char *s = name_of(P, cur(P));
    next(P);
    return s;
}

static jnode *node(parser *P, jnode_kind kind, int line) {
    jnode *n = ja_alloc(&P->t->arena, sizeof *n);
    n->kind = (uint8_t)kind;
    n->line = line;
    return n;
}

static void add_kid(parser *P, jnode *n, jnode *kid) {
    if ((n->n_kids & (n->n_kids - 1)) == 0) {  // 0, 1, 2, 4, ...: grow to the next power of two
        size_t cap = n->n_kids ? 2 * (size_t)n->n_kids : 1;
        n->kids = ja_grow(&P->t->arena, n->kids, sizeof *n->kids * (size_t)n->n_kids, sizeof *n->kids * cap);
    }
    n->kids[n->n_kids++] = kid;
}

// Counts one more link of an operator chain; a chain that long is refused
// (the evaluator walks it recursively).
static void chain(parser *P, int *links) {
    if (++*links > MAX_CHAIN) pfail(P, "more than %d operators in a row", MAX_CHAIN);
}

static void enter(parser *P) {
    if (++P->depth > MAX_PARSE_DEPTH) pfail(P, "the template nests deeper than %d levels", MAX_PARSE_DEPTH);
}

// ---- literals ------------------------------------------------------------------------

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1;
}

static void put_cp(parser *P, jbuf *b, uint32_t c) {
    if (c >= 0xd800 && c <= 0xdfff) pfail(P, "a string escape makes a lone surrogate (\\u%04x)", c);
    if (c > 0x10ffff) pfail(P, "a string escape is past U+10FFFF");
    utf8_put(&P->t->arena, b, c);
}

// A string literal's escapes, decoded as Python's unicode-escape codec does
// (unknown escapes stay as written).
static jstr *unescape(parser *P, const jtok *k) {
    jbuf b = {0};
    jarena *a = &P->t->arena;
    const char *s = k->s;
    for (size_t i = 0; i < k->n; i++) {
        if (s[i] != '\\' || i + 1 == k->n) {
            jb_put(a, &b, s + i, 1);
            continue;
        }
        char c = s[++i];
        const char *simple = strchr("\\'\"abfnrtv\n", c);
        if (simple && c) {
            static const char out[] = "\\'\"\a\b\f\n\r\t\v";
            if (c != '\n') jb_put(a, &b, &out[simple - "\\'\"abfnrtv\n"], 1);  // backslash-newline: nothing
        } else if (c >= '0' && c <= '7') {
            uint32_t v = 0;
            for (int d = 0; d < 3 && i < k->n && s[i] >= '0' && s[i] <= '7'; d++, i++) v = v * 8 + (uint32_t)(s[i] - '0');
            i--;
            put_cp(P, &b, v);
        } else if (c == 'x' || c == 'u' || c == 'U') {
            int len = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int d = 0; d < len; d++) {
                int h = i + 1 + d < k->n ? hexval(s[i + 1 + d]) : -1;
                if (h < 0) pfail(P, "truncated \\%c escape in a string", c);
                v = v * 16 + (uint32_t)h;
            }
            i += (size_t)len;
            put_cp(P, &b, v);
        } else if (c == 'N') {
            pfail(P, "\\N{...} escapes in strings are not supported");
        } else {
            jb_put(a, &b, s + i - 1, 2);
        }
    }
    return jb_str(a, &b);
}

static jv parse_int_literal(parser *P, const jtok *k) {
    char buf[80];
    size_t n = 0;
    for (size_t i = 0; i < k->n && n + 1 < sizeof buf; i++)
        if (k->s[i] != '_') buf[n++] = k->s[i];
    buf[n] = 0;
    int base = 10;
    const char *digits = buf;
    if (n > 1 && buf[0] == '0' && strchr("bBoOxX", buf[1])) {
        base = (buf[1] | 32) == 'b' ? 2 : (buf[1] | 32) == 'o' ? 8 : 16;
        digits = buf + 2;
    }
    char *end;
    errno = 0;
    long long v = strtoll(digits, &end, base);
    if (errno || *end || !*digits) pfail(P, "integer literal '%s' is out of range or malformed", buf);
    return jv_int(v);
}

static jv parse_float_literal(const jtok *k) {
    char buf[80];
    size_t n = 0;
    for (size_t i = 0; i < k->n && n + 1 < sizeof buf; i++)
        if (k->s[i] != '_') buf[n++] = k->s[i];
    buf[n] = 0;
    return jv_float(strtod(buf, NULL));
}

// ---- expressions --------------------------------------------------------------------

static jnode *parse_expression(parser *P, int with_condexpr);
static jnode *parse_tuple(parser *P, int simplified, int with_condexpr, const char *extra_end, int explicit_parens);
static jnode *parse_unary(parser *P, int with_filter);

static jnode *constant(parser *P, jv v, int line) {
    jnode *n = node(P, N_CONST, line);
    n->val = v;
    return n;
}

static jnode *parse_list(parser *P) {
    jnode *n = node(P, N_LIST, cur(P)->line);
    expect_op(P, "[");
    while (!is_op(P, "]")) {
        if (n->n_kids) expect_op(P, ",");
        if (is_op(P, "]")) break;
        add_kid(P, n, parse_expression(P, 1));
    }
    expect_op(P, "]");
    return n;
}

static jnode *parse_dict(parser *P) {
    jnode *n = node(P, N_DICT, cur(P)->line);
    expect_op(P, "{");
    while (!is_op(P, "}")) {
        if (n->n_kids) expect_op(P, ",");
        if (is_op(P, "}")) break;
        add_kid(P, n, parse_expression(P, 1));
        expect_op(P, ":");
        add_kid(P, n, parse_expression(P, 1));
    }
    expect_op(P, "}");
    return n;
}

static jnode *parse_primary(parser *P) {
    jtok *k = cur(P);
    int line = k->line;
    if (k->type == T_NAME) {
        next(P);
        if (tok_is(k, T_NAME, "true") || tok_is(k, T_NAME, "True")) return constant(P, jv_bool(1), line);
        if (tok_is(k, T_NAME, "false") || tok_is(k, T_NAME, "False")) return constant(P, jv_bool(0), line);
        if (tok_is(k, T_NAME, "none") || tok_is(k, T_NAME, "None")) return constant(P, jv_none(), line);
        jnode *n = node(P, N_NAME, line);
        n->name = name_of(P, k);
        return n;
    }
    if (k->type == T_STRING) {  // adjacent literals join: 'a' 'b' is 'ab'
        jbuf b = {0};
        while (cur(P)->type == T_STRING) {
            jstr *s = unescape(P, cur(P));
            jb_put(&P->t->arena, &b, s->s, s->len);
            next(P);
        }
        return constant(P, jv_str(jb_str(&P->t->arena, &b)), line);
    }
    if (k->type == T_INT || k->type == T_FLOAT) {
        next(P);
        return constant(P, k->type == T_INT ? parse_int_literal(P, k) : parse_float_literal(k), line);
    }
    if (is_op(P, "(")) {
        next(P);
        jnode *n = parse_tuple(P, 0, 1, NULL, 1);
        expect_op(P, ")");
        return n;
    }
    if (is_op(P, "[")) return parse_list(P);
    if (is_op(P, "{")) return parse_dict(P);
    unexpected(P, NULL);
}

// Arguments of a call, filter or test: (a, b, name=c). *args / **kwargs are refused.
static void parse_call_args(parser *P, jnode *n) {
    expect_op(P, "(");
    int kw = 0;
    while (!is_op(P, ")")) {
        if (n->n_kids) {
            expect_op(P, ",");
            if (is_op(P, ")")) break;
        }
        if (is_op(P, "*") || is_op(P, "**")) pfail(P, "*args and **kwargs in calls are not supported");
        if (cur(P)->type == T_NAME && tok_is(peek(P), T_OP, "=")) {
            jnode *k = node(P, N_KWARG, cur(P)->line);
            k->name = expect_name(P);
            next(P);
            k->a = parse_expression(P, 1);
            add_kid(P, n, k);
            kw = 1;
        } else {
            if (kw) pfail(P, "invalid syntax for function call expression (a positional argument after a keyword)");
            add_kid(P, n, parse_expression(P, 1));
        }
    }
    expect_op(P, ")");
}

static jnode *parse_call(parser *P, jnode *callee) {
    jnode *n = node(P, N_CALL, cur(P)->line);
    n->a = callee;
    parse_call_args(P, n);
    return n;
}

// [start:stop:step] parts, or one expression.
static jnode *parse_subscribed(parser *P) {
    int line = cur(P)->line;
    jnode *parts[3] = {NULL, NULL, NULL};
    if (!is_op(P, ":")) {
        jnode *e = parse_expression(P, 1);
        if (!is_op(P, ":")) return e;
        parts[0] = e;
    }
    next(P);  // the first ':'
    if (!is_op(P, "]") && !is_op(P, ",") && !is_op(P, ":")) parts[1] = parse_expression(P, 1);
    if (is_op(P, ":")) {
        next(P);
        if (!is_op(P, "]") && !is_op(P, ",")) parts[2] = parse_expression(P, 1);
    }
    jnode *n = node(P, N_SLICE, line);
    for (int i = 0; i < 3; i++) add_kid(P, n, parts[i]);
    return n;
}

static jnode *parse_subscript(parser *P, jnode *obj) {
    int line = cur(P)->line;
    if (is_op(P, ".")) {
        next(P);
        jtok *k = cur(P);
        if (k->type == T_NAME) {
            jnode *n = node(P, N_GETATTR, line);
            n->a = obj;
            n->name = expect_name(P);
            return n;
        }
        if (k->type != T_INT) unexpected(P, "a name or number");
        next(P);
        jnode *n = node(P, N_GETITEM, line);
        n->a = obj;
        n->b = constant(P, parse_int_literal(P, k), line);
        return n;
    }
    next(P);  // '['
    jnode *key = NULL;
    for (int i = 0; !is_op(P, "]"); i++) {
        if (i) expect_op(P, ",");
        jnode *part = parse_subscribed(P);
        // x[a, b:c] keys x with a tuple holding a slice, which nothing can be
        // indexed by (jinja2: a TypeError when it renders)
        if ((i >= 1 && part->kind == N_SLICE) || (i == 1 && key->kind == N_SLICE))
            pfail(P, "a slice inside a tuple subscript ('[a, b:c]') indexes nothing");
        if (i == 1) {
            jnode *t = node(P, N_TUPLE, line);
            add_kid(P, t, key);
            key = t;
        }
        if (i >= 1) add_kid(P, key, part);
        else key = part;
    }
    if (!key) unexpected(P, "a subscript");
    expect_op(P, "]");
    jnode *n = node(P, key->kind == N_SLICE ? N_SLICE : N_GETITEM, line);
    n->a = obj;
    if (key->kind == N_SLICE) n->kids = key->kids, n->n_kids = key->n_kids;
    else n->b = key;
    return n;
}

static jnode *parse_postfix(parser *P, jnode *n) {
    for (int links = 0;; chain(P, &links)) {
        if (is_op(P, ".") || is_op(P, "[")) n = parse_subscript(P, n);
        else if (is_op(P, "(")) n = parse_call(P, n);
        else return n;
    }
}

// `| name(args)` repeated; `input` may be NULL (filter blocks, block set).
static jnode *parse_filters(parser *P, jnode *input, int start_inline) {
    for (int links = 0; is_op(P, "|") || start_inline; chain(P, &links)) {
        if (!start_inline) next(P);
        start_inline = 0;
        jnode *n = node(P, N_FILTER, cur(P)->line);
        n->name = expect_name(P);
        if (is_op(P, ".")) pfail(P, "dotted filter names are not supported");
        n->a = input;
        if (is_op(P, "(")) parse_call_args(P, n);
        input = n;
    }
    return input;
}

static jnode *parse_test(parser *P, jnode *value) {
    jnode *n = node(P, N_TEST, cur(P)->line);
    next(P);  // 'is'
    n->op = (uint8_t)skip_name(P, "not");
    n->name = expect_name(P);
    n->a = value;
    jtok *k = cur(P);
    if (is_op(P, "(")) {
        parse_call_args(P, n);
    } else if ((k->type == T_NAME || k->type == T_STRING || k->type == T_INT || k->type == T_FLOAT || is_op(P, "[") ||
                is_op(P, "{")) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is")) pfail(P, "you cannot chain multiple tests with is");
        add_kid(P, n, parse_postfix(P, parse_primary(P)));
    }
    return n;
}

static jnode *parse_filter_expr(parser *P, jnode *n) {
    for (int links = 0;; chain(P, &links)) {
        if (is_op(P, "|")) n = parse_filters(P, n, 0);
        else if (is_name(P, "is")) n = parse_test(P, n);
        else if (is_op(P, "(")) n = parse_call(P, n);
        else return n;
    }
}

static jnode *parse_unary(parser *P, int with_filter) {
    enter(P);
    int line = cur(P)->line;
    jnode *n;
    if (is_op(P, "-") || is_op(P, "+")) {
        n = node(P, is_op(P, "-") ? N_NEG : N_POS, line);
        next(P);
        n->a = parse_unary(P, 0);
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static jnode *binop(parser *P, jop op, jnode *a, jnode *b, int line) {
    jnode *n = node(P, N_BINOP, line);
    n->op = (uint8_t)op;
    n->a = a, n->b = b;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *n = parse_unary(P, 1);
    for (int links = 0; is_op(P, "**"); chain(P, &links)) {
        int line = cur(P)->line;
        next(P);
        n = binop(P, OP_POW, n, parse_unary(P, 1), line);
    }
    return n;
}

static jnode *parse_math2(parser *P) {
    jnode *n = parse_pow(P);
    for (int links = 0;; chain(P, &links)) {
        jop op = is_op(P, "*") ? OP_MUL : is_op(P, "/") ? OP_DIV : is_op(P, "//") ? OP_FLOORDIV : is_op(P, "%") ? OP_MOD : 0;
        if (!op) return n;
        int line = cur(P)->line;
        next(P);
        n = binop(P, op, n, parse_pow(P), line);
    }
}

static jnode *parse_concat(parser *P) {
    jnode *first = parse_math2(P);
    if (!is_op(P, "~")) return first;
    jnode *n = node(P, N_CONCAT, first->line);
    add_kid(P, n, first);
    for (int links = 0; is_op(P, "~"); chain(P, &links)) {
        next(P);
        add_kid(P, n, parse_math2(P));
    }
    return n;
}

static jnode *parse_math1(parser *P) {
    jnode *n = parse_concat(P);
    for (int links = 0; is_op(P, "+") || is_op(P, "-"); chain(P, &links)) {
        jop op = is_op(P, "+") ? OP_ADD : OP_SUB;
        int line = cur(P)->line;
        next(P);
        n = binop(P, op, n, parse_concat(P), line);
    }
    return n;
}

static jnode *parse_compare(parser *P) {
    int line = cur(P)->line;
    jnode *first = parse_math1(P), *n = NULL;
    for (int links = 0;; chain(P, &links)) {
        static const char *const ops[] = {"==", "!=", "<", "<=", ">", ">="};
        static const jop codes[] = {OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE};
        jop op = 0;
        for (int i = 0; i < 6; i++)
            if (is_op(P, ops[i])) op = codes[i];
        if (op) next(P);
        else if (skip_name(P, "in")) op = OP_IN;
        else if (is_name(P, "not") && tok_is(peek(P), T_NAME, "in")) next(P), next(P), op = OP_NOTIN;
        else return n ? n : first;
        if (!n) {
            n = node(P, N_COMPARE, line);
            n->a = first;
        }
        jnode *o = node(P, N_OPERAND, cur(P)->line);
        o->op = (uint8_t)op;
        o->a = parse_math1(P);
        add_kid(P, n, o);
    }
}

static jnode *parse_not(parser *P) {
    if (!is_name(P, "not")) return parse_compare(P);
    enter(P);
    jnode *n = node(P, N_NOT, cur(P)->line);
    next(P);
    n->a = parse_not(P);
    P->depth--;
    return n;
}

static jnode *parse_and(parser *P) {
    jnode *n = parse_not(P);
    for (int links = 0; is_name(P, "and"); chain(P, &links)) {
        jnode *m = node(P, N_AND, cur(P)->line);
        next(P);
        m->a = n, m->b = parse_not(P);
        n = m;
    }
    return n;
}

static jnode *parse_or(parser *P) {
    jnode *n = parse_and(P);
    for (int links = 0; is_name(P, "or"); chain(P, &links)) {
        jnode *m = node(P, N_OR, cur(P)->line);
        next(P);
        m->a = n, m->b = parse_and(P);
        n = m;
    }
    return n;
}

static jnode *parse_condexpr(parser *P) {
    jnode *n = parse_or(P);
    for (int links = 0; is_name(P, "if"); chain(P, &links)) {
        enter(P);
        jnode *c = node(P, N_COND, cur(P)->line);
        next(P);
        c->a = n;
        c->b = parse_or(P);
        if (skip_name(P, "else")) c->c = parse_condexpr(P);
        n = c;
        P->depth--;
    }
    return n;
}

static jnode *parse_expression(parser *P, int with_condexpr) {
    enter(P);
    jnode *n = with_condexpr ? parse_condexpr(P) : parse_or(P);
    P->depth--;
    return n;
}

static int tuple_end(parser *P, const char *extra_end) {
    jtok_type t = cur(P)->type;
    return t == T_VAR_END || t == T_BLOCK_END || is_op(P, ")") || (extra_end && is_name(P, extra_end));
}

// Expressions separated by commas: one expression, or a tuple when there is
// a comma (or empty parentheses). simplified: names and literals only (targets).
static jnode *parse_tuple(parser *P, int simplified, int with_condexpr, const char *extra_end, int explicit_parens) {
    jnode *t = node(P, N_TUPLE, cur(P)->line);
    int is_tuple = 0;
    for (;;) {
        if (t->n_kids) expect_op(P, ",");
        if (tuple_end(P, extra_end)) break;
        add_kid(P, t, simplified ? parse_primary(P) : parse_expression(P, with_condexpr));
        if (!is_op(P, ",")) break;
        is_tuple = 1;
    }
    if (is_tuple) return t;
    if (t->n_kids) return t->kids[0];
    if (!explicit_parens) unexpected(P, "an expression");
    return t;
}

// ---- statements --------------------------------------------------------------------

static jnode *subparse(parser *P, const char *const *end_names);

// The body of a block up to one of end_names (a NULL-terminated list);
// with drop_needle the end name is consumed.
static jnode *parse_statements(parser *P, const char *const *end_names, int drop_needle) {
    if (is_op(P, ":")) next(P);
    expect_type(P, T_BLOCK_END, "end of statement block");
    jnode *body = subparse(P, end_names);
    if (cur(P)->type == T_EOF) {
        char want[64];
        snprintf(want, sizeof want, "'%s'", end_names[0]);
        unexpected(P, want);
    }
    if (drop_needle) next(P);
    return body;
}

static jnode *assign_target(parser *P, const char *extra_end, int with_namespace) {
    if (with_namespace && cur(P)->type == T_NAME && tok_is(peek(P), T_OP, ".")) {
        jnode *n = node(P, N_GETATTR, cur(P)->line);
        n->a = node(P, N_NAME, cur(P)->line);
        n->a->name = expect_name(P);
        next(P);
        n->name = expect_name(P);
        return n;
    }
    jnode *n = parse_tuple(P, 1, 1, extra_end, 0);
    int ok = n->kind == N_NAME;
    if (n->kind == N_TUPLE) {
        ok = n->n_kids > 0;
        for (int i = 0; i < n->n_kids; i++) ok &= n->kids[i]->kind == N_NAME;
    }
    if (!ok) pfail(P, "cannot assign to this target");
    return n;
}

static jnode *parse_for(parser *P, int line) {
    jnode *n = node(P, N_FOR, line);
    n->d = assign_target(P, "in", 0);
    if (!skip_name(P, "in")) unexpected(P, "'in'");
    n->a = parse_tuple(P, 0, 0, "recursive", 0);
    if (skip_name(P, "if")) n->e = parse_expression(P, 1);
    if (is_name(P, "recursive")) pfail(P, "recursive for loops are not supported");
    static const char *const ends[] = {"endfor", "else", NULL}, *const endfor[] = {"endfor", NULL};
    n->b = parse_statements(P, ends, 0);
    int is_else = is_name(P, "else");
    next(P);
    if (is_else) n->c = parse_statements(P, endfor, 1);
    return n;
}

static jnode *parse_if(parser *P, int line) {
    jnode *top = node(P, N_IF, line), *n = top;
    static const char *const ends[] = {"elif", "else", "endif", NULL}, *const endif[] = {"endif", NULL};
    for (;;) {
        n->a = parse_tuple(P, 0, 0, NULL, 0);
        n->b = parse_statements(P, ends, 0);
        if (skip_name(P, "elif")) {
            jnode *body = node(P, N_BODY, cur(P)->line), *elif = node(P, N_IF, cur(P)->line);
            add_kid(P, body, elif);
            n->c = body;
            n = elif;
            continue;
        }
        if (skip_name(P, "else")) n->c = parse_statements(P, endif, 1);
        else next(P);  // endif
        return top;
    }
}

static jnode *parse_set(parser *P, int line) {
    jnode *target = assign_target(P, NULL, 1);
    if (is_op(P, "=")) {
        next(P);
        jnode *n = node(P, N_SET, line);
        n->a = target;
        n->b = parse_tuple(P, 0, 1, NULL, 0);
        return n;
    }
    jnode *n = node(P, N_SETBLOCK, line);
    n->a = target;
    n->c = parse_filters(P, NULL, 0);
    static const char *const ends[] = {"endset", NULL};
    n->b = parse_statements(P, ends, 1);
    return n;
}

// (a, b=default, ...) of a macro or call block, into n's kids.
static void parse_signature(parser *P, jnode *n) {
    expect_op(P, "(");
    while (!is_op(P, ")")) {
        if (n->n_kids) expect_op(P, ",");
        jnode *arg = node(P, N_NAME, cur(P)->line);
        arg->name = expect_name(P);
        if (is_op(P, "=")) {
            next(P);
            jnode *kw = node(P, N_KWARG, arg->line);
            kw->name = arg->name;
            kw->a = parse_expression(P, 1);
            arg = kw;
        } else if (n->n_kids && n->kids[n->n_kids - 1]->kind == N_KWARG) {
            pfail(P, "non-default argument follows default argument");
        }
        add_kid(P, n, arg);
    }
    expect_op(P, ")");
}

// Whether the tree under n reads the variable `name` (a macro taking extra
// arguments must read varargs / kwargs, as in jinja2).
static int reads_name(const jnode *n, const char *name) {
    if (!n) return 0;
    if (n->kind == N_NAME && !strcmp(n->name, name)) return 1;
    const jnode *sub[] = {n->a, n->b, n->c, n->d, n->e};
    for (int i = 0; i < 5; i++)
        if (reads_name(sub[i], name)) return 1;
    for (int i = 0; i < n->n_kids; i++)
        if (reads_name(n->kids[i], name)) return 1;
    return 0;
}

static jnode *parse_macro(parser *P, int line) {
    jnode *n = node(P, N_MACRO, line);
    n->name = expect_name(P);
    parse_signature(P, n);
    static const char *const ends[] = {"endmacro", NULL};
    n->b = parse_statements(P, ends, 1);
    n->op = (uint8_t)(reads_name(n->b, "varargs") | reads_name(n->b, "kwargs") << 1);
    return n;
}

static jnode *parse_call_block(parser *P, int line) {
    jnode *n = node(P, N_CALLBLOCK, line);
    if (is_op(P, "(")) parse_signature(P, n);
    n->a = parse_expression(P, 1);
    if (n->a->kind != N_CALL) pfail(P, "expected a call");
    static const char *const ends[] = {"endcall", NULL};
    n->b = parse_statements(P, ends, 1);
    n->op = (uint8_t)(reads_name(n->b, "varargs") | reads_name(n->b, "kwargs") << 1);
    return n;
}

static jnode *parse_filter_block(parser *P, int line) {
    jnode *n = node(P, N_FILTERBLOCK, line);
    n->c = parse_filters(P, NULL, 1);
    static const char *const ends[] = {"endfilter", NULL};
    n->b = parse_statements(P, ends, 1);
    return n;
}

static jnode *parse_statement(parser *P) {
    jtok *k = cur(P);
    if (k->type != T_NAME) unexpected(P, "a tag name");
    int line = k->line;
    enter(P);
    next(P);
    jnode *n;
    if (tok_is(k, T_NAME, "for")) n = parse_for(P, line);
    else if (tok_is(k, T_NAME, "if")) n = parse_if(P, line);
    else if (tok_is(k, T_NAME, "set")) n = parse_set(P, line);
    else if (tok_is(k, T_NAME, "macro")) n = parse_macro(P, line);
    else if (tok_is(k, T_NAME, "call")) n = parse_call_block(P, line);
    else if (tok_is(k, T_NAME, "filter")) n = parse_filter_block(P, line);
    else if (tok_is(k, T_NAME, "break")) n = node(P, N_BREAK, line);
    else if (tok_is(k, T_NAME, "continue")) n = node(P, N_CONTINUE, line);
    else if (tok_is(k, T_NAME, "generation")) {  // transformers' tag: its body as is
        static const char *const ends[] = {"endgeneration", NULL};
        n = parse_statements(P, ends, 1);
    } else {
        P->i--;
        pfail(P, "unsupported tag '%.*s'", (int)(k->n > 40 ? 40 : k->n), k->s);
    }
    P->depth--;
    return n;
}

static int at_end_name(parser *P, const char *const *end_names) {
    for (int i = 0; end_names && end_names[i]; i++)
        if (is_name(P, end_names[i])) return 1;
    return 0;
}

// Text, {{ }} and {% %} up to the end of the template or a {% END %} with END in end_names
// (left as the current token).
static jnode *subparse(parser *P, const char *const *end_names) {
    jnode *body = node(P, N_BODY, cur(P)->line);
    for (;;) {
        jtok *k = cur(P);
        if (k->type == T_EOF) return body;
        if (k->type == T_DATA) {
            add_kid(P, body, constant(P, jv_str(js_new(&P->t->arena, k->s, k->n)), k->line));
            body->kids[body->n_kids - 1]->kind = N_TEXT;
            next(P);
        } else if (k->type == T_VAR_BEGIN) {
            next(P);
            jnode *n = node(P, N_PRINT, k->line);
            n->a = parse_tuple(P, 0, 1, NULL, 0);
            expect_type(P, T_VAR_END, "end of print statement");
            add_kid(P, body, n);
        } else if (k->type == T_BLOCK_BEGIN) {
            next(P);
            if (at_end_name(P, end_names)) return body;
            add_kid(P, body, parse_statement(P));
            expect_type(P, T_BLOCK_END, "end of statement block");
        } else {
            unexpected(P, NULL);
        }
    }
}

void jparse_template(jinja_template *t, const char *src, size_t len) {
    parser P = {.t = t};
    P.tok = jlex(t, src, len, &P.n);
    t->root = subparse(&P, NULL);
    if (cur(&P)->type != T_EOF) unexpected(&P, NULL);
}
