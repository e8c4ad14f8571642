// jinja_int.h — what the Jinja engine's files share (see jinja.h): the arena
// every parse and render allocates from, the error exit, values, the syntax
// tree and the render state. Not used outside jinja_*.c.
//
// Errors unwind with longjmp to the entry point (jinja_parse, jinja_render),
// which frees the arena: everything a parse or render allocates lives in its
// arena, so nothing leaks and no function checks for failure on its way up.
#ifndef QUILL_JINJA_INT_H
#define QUILL_JINJA_INT_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"
#include "util.h"

// ---- the error exit and the arena ---------------------------------------------

typedef struct {
    jmp_buf jb;
    char msg[ERR_LEN];
} jfail;

_Noreturn void jfail_at(jfail *f, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

typedef struct ja_block ja_block;
typedef struct {
    ja_block *head;  // the block being filled, then older ones
    size_t total;    // bytes allocated from the system so far
    size_t limit;    // most bytes it may allocate (then: an error)
    jfail *fail;     // where exhaustion unwinds to
} jarena;

void *ja_alloc(jarena *a, size_t n);                    // zeroed, 16-byte aligned; never NULL
void *ja_grow(jarena *a, void *p, size_t old, size_t n);  // a larger copy (the old one stays until the end)
void ja_free(jarena *a);

// ---- values --------------------------------------------------------------------

typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_FUNC, JV_LOOP } jv_type;
enum {
    JVF_TUPLE = 1,   // JV_LIST: a Python tuple (repr with parentheses)
    JVF_UNSAFE = 2,  // JV_UNDEF: an attribute the sandbox refuses (calling it is an error)
    JVF_GEN = 4,     // JV_LIST: a generator (what map, select, items... return): always true,
                     // no len(), not printable, read once (jlist.pos)
    JVF_VIEW = 8,    // JV_LIST: dict.items() / keys() / values(), range(): not printable or JSON
    JVF_SAFE = 16,   // JV_STR: markupsafe's Markup (|safe, |escape): `+` HTML-escapes a plain str
                     // joined to it, as Markup.__add__ / __radd__ do
};

typedef struct jstr {
    size_t len;
    char s[];  // len bytes of UTF-8, then a NUL
} jstr;

typedef struct jv jv;
typedef struct {
    size_t n;
    jv *v;
    size_t pos;  // a generator: the items before pos are consumed
} jlist;  // immutable once built (but for a generator's pos)

typedef struct {
    size_t n, cap;
    jv *k, *v;  // keys and values in insertion order
} jdict;

struct jfunc;
struct jloop;
struct jv {
    uint8_t t;      // jv_type
    uint8_t flags;  // JVF_*
    union {
        int b;               // JV_BOOL
        int64_t i;           // JV_INT
        double f;            // JV_FLOAT
        jstr *s;             // JV_STR; JV_UNDEF: what is undefined, for the error (may be NULL)
        jlist *l;            // JV_LIST
        jdict *d;            // JV_DICT, JV_NS (a namespace's attributes)
        struct jfunc *fn;    // JV_FUNC
        struct jloop *loop;  // JV_LOOP
    };
};

static inline jv jv_undef(jstr *why) { return (jv){.t = JV_UNDEF, .s = why}; }
static inline jv jv_none(void) { return (jv){.t = JV_NONE}; }
static inline jv jv_bool(int b) { return (jv){.t = JV_BOOL, .b = !!b}; }
static inline jv jv_int(int64_t i) { return (jv){.t = JV_INT, .i = i}; }
static inline jv jv_float(double f) { return (jv){.t = JV_FLOAT, .f = f}; }
static inline jv jv_str(jstr *s) { return (jv){.t = JV_STR, .s = s}; }
static inline jv jv_list(jlist *l) { return (jv){.t = JV_LIST, .l = l}; }
static inline jv jv_dict(jdict *d) { return (jv){.t = JV_DICT, .d = d}; }

// A growable byte buffer in the arena.
typedef struct {
    char *s;
    size_t len, cap;
} jbuf;

// A growable list in the arena.
typedef struct {
    jv *v;
    size_t n, cap;
} jvec;

// ---- the syntax tree -------------------------------------------------------------

typedef enum {
    // expressions
    N_CONST,     // val
    N_NAME,      // name
    N_GETATTR,   // a.name
    N_GETITEM,   // a[b]
    N_SLICE,     // a[b:c:d] (kids[0..3): start, stop, step; each may be NULL)
    N_CALL,      // a(kids): positional then N_KWARG
    N_KWARG,     // name=a
    N_FILTER,    // a | name(kids); a NULL in a filter block or block set (the body)
    N_TEST,      // a is [not] name(kids); op: 1 when negated
    N_NEG,       // -a
    N_POS,       // +a
    N_NOT,       // not a
    N_BINOP,     // a op b, op one of + - * / // % **
    N_AND,       // a and b
    N_OR,        // a or b
    N_CONCAT,    // kids joined with ~
    N_COMPARE,   // a, then kids: N_OPERAND (op, a) chained
    N_OPERAND,
    N_COND,      // a if b else c (c may be NULL)
    N_LIST,      // [kids]
    N_TUPLE,     // (kids)
    N_DICT,      // {kids[2i]: kids[2i+1]}
    // statements
    N_BODY,      // kids in order
    N_TEXT,      // template text: val
    N_PRINT,     // {{ a }}
    N_IF,        // if a: b (N_BODY) else c (N_BODY or NULL)
    N_FOR,       // for d (N_NAME or N_TUPLE of names) in a [if e]: b else c
    N_SET,       // set a (N_NAME, N_TUPLE of names, or N_GETATTR on a name: ns.x) = b
    N_SETBLOCK,  // set a [| filters in c]: body b
    N_MACRO,     // macro name(kids: N_NAME or N_KWARG with a default): body b
    N_CALLBLOCK, // call(kids as in N_MACRO) a (an N_CALL): body b, the caller
    N_FILTERBLOCK, // filter c (an N_FILTER chain on NULL): body b
    N_BREAK,
    N_CONTINUE,
} jnode_kind;

typedef enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW,
               OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN } jop;

typedef struct jnode jnode;
struct jnode {
    uint8_t kind;  // jnode_kind
    uint8_t op;    // jop, or N_TEST's negation
    int line;      // template line, for errors
    const char *name;
    jnode *a, *b, *c, *d, *e;
    jnode **kids;
    int n_kids;
    jv val;
};

struct jinja_template {
    jarena arena;  // the tree and its strings
    jfail fail;    // parse errors
    jnode *root;   // N_BODY
};

// The lexer's and parser's shared entry: fills t->root (errors unwind to t->fail).
void jparse_template(jinja_template *t, const char *src, size_t len);

// ---- the render state ------------------------------------------------------------

typedef struct jscope jscope;
struct jscope {
    jscope *parent;
    size_t n, cap;
    const char **names;
    jv *vals;
};

typedef struct jfunc jfunc;
typedef struct jrender jrender;

// A loop's state, read through `loop.*`.
typedef struct jloop {
    const jlist *items;
    size_t index0;
    jv last_changed;  // loop.changed's memory (JV_UNDEF: never called)
    int changed_called;
} jloop;

// A keyword argument of a call.
typedef struct {
    const char *name;
    jv val;
} jkwarg;

// The arguments of a call, evaluated.
typedef struct {
    int n, n_kw;
    jv *v;
    jkwarg *kw;
    int line;
} jargs;

typedef jv (*jbuiltin)(jrender *r, jv self, const jargs *a);

struct jfunc {
    const char *name;
    jbuiltin fn;          // a builtin or bound method (self is the object), or NULL
    jv self;
    const jnode *macro;   // a macro (N_MACRO) or a call block's caller (N_CALLBLOCK)
    jscope *closure;      // where the macro was defined / the call block stands
    jv caller;            // a macro called from a call block: its `caller`
};

struct jrender {
    jfail fail;
    jarena arena;
    jinja_limits lim;
    long steps;
    int depth;
    jbuf *out;         // where text goes now (a macro or block set captures into its own)
    jscope *globals;   // the variables passed in
    int line;          // the line being evaluated, for errors in the library
    void *locale;      // a C.UTF-8 locale_t for case mapping beyond ASCII (made when first needed)
};

_Noreturn void jr_fail(jrender *r, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

// ---- values (jinja_value.c) ----------------------------------------------------------

jstr *js_new(jarena *a, const char *s, size_t n);
jstr *js_cstr(jarena *a, const char *s);
void jb_put(jarena *a, jbuf *b, const char *s, size_t n);
void jb_puts(jarena *a, jbuf *b, const char *s);
jstr *jb_str(jarena *a, jbuf *b);
void jvec_push(jarena *a, jvec *v, jv x);
jlist *jvec_list(jarena *a, jvec *v);
jdict *jd_new(jarena *a);
void jd_set(jarena *a, jdict *d, jv key, jv val);
int jd_find(const jdict *d, jv key, jv *val);        // 1 when found
int jd_find_str(const jdict *d, const char *key, jv *val);

int jv_truthy(jv v);
int jv_equal(jv a, jv b);
// <0, 0, >0; fails (a Python TypeError) for values that do not order
int jv_compare(jrender *r, jv a, jv b);
const char *jv_type_name(jv v);  // Python's: 'str', 'int', 'NoneType', 'dict', ...
// str(v) and repr(v) appended to b
void jv_str_to(jrender *r, jbuf *b, jv v);
void jv_repr_to(jrender *r, jbuf *b, jv v);
jstr *jv_to_str(jrender *r, jv v);
// json.dumps(v, ensure_ascii, indent (NULL: none), separators (NULL: default), sort_keys)
void jv_json_to(jrender *r, jbuf *b, jv v, int ensure_ascii, const jstr *indent, const jstr *item_sep,
                const jstr *key_sep, int sort_keys);
jv jv_from_json(jrender *r, const json_t *j);
void jv_float_repr(char out[32], double f);

// UTF-8 helpers
size_t utf8_len(const char *s, size_t n);                 // code points
size_t utf8_offset(const char *s, size_t n, size_t cp);   // byte offset of code point cp (n past the end)
uint32_t utf8_next(const char *s, size_t n, size_t *i);   // decodes at *i, advances
void utf8_put(jarena *a, jbuf *b, uint32_t c);             // appends c's UTF-8
int py_isspace(uint32_t c);                               // str.isspace()

// ---- the evaluator (jinja_eval.c) ------------------------------------------------------

jv jr_call(jrender *r, jv f, const jargs *a);
void jr_step(jrender *r);
jv jr_undef_msg(jrender *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// fails for an undefined value (with its message)
void jr_need_defined(jrender *r, jv v);

// ---- the library (jinja_lib.c) ----------------------------------------------------------

jv jl_filter(jrender *r, const char *name, jv v, const jargs *a);
int jl_test(jrender *r, const char *name, jv v, const jargs *a);
jv jl_getattr(jrender *r, jv obj, const char *name);
jv jl_getitem(jrender *r, jv obj, jv key);
jv jl_slice(jrender *r, jv obj, jv start, jv stop, jv step);
jv jl_global(jrender *r, const char *name);   // range, namespace, ...; JV_UNDEF when none
jv jl_iterable(jrender *r, jv v);              // the items a for loop or filter walks (a JV_LIST)
jv jl_escape(jrender *r, jv v);                // markupsafe.escape: a JVF_SAFE string

#endif
