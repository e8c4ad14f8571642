// jinja_eval.c — runs a parsed template: expressions to values, statements
// to text. Scoping follows jinja2: each for-loop turn and each macro call has
// its own scope (a `set` there is gone after it; namespace() objects are how
// templates carry values out), `if` has none, and a name is looked up from
// the innermost scope out to the variables passed in, then the globals.
// Also the entry points of jinja.h.
#include <locale.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja_int.h"

enum { FLOW_NORMAL, FLOW_BREAK, FLOW_CONTINUE };

_Noreturn void jr_fail(jrender *r, int line, const char *fmt, ...) {
    char msg[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jfail_at(&r->fail, line, "%s", msg);
}

void jr_step(jrender *r) {
    if (++r->steps > r->lim.max_steps)
        jr_fail(r, r->line, "the template ran past %ld evaluation steps (a loop too long?)", r->lim.max_steps);
}

jv jr_undef_msg(jrender *r, const char *fmt, ...) {
    char msg[ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return jv_undef(js_cstr(&r->arena, msg));
}

void jr_need_defined(jrender *r, jv v) {
    if (v.t == JV_UNDEF) jr_fail(r, r->line, "%s", v.s ? v.s->s : "a value is undefined");
}

// ---- scopes ------------------------------------------------------------------------------

static jscope *scope_new(jrender *r, jscope *parent) {
    jscope *s = ja_alloc(&r->arena, sizeof *s);
    s->parent = parent;
    return s;
}

static void scope_set(jrender *r, jscope *s, const char *name, jv v) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        s->names = ja_grow(&r->arena, s->names, sizeof *s->names * s->n, sizeof *s->names * cap);
        s->vals = ja_grow(&r->arena, s->vals, sizeof *s->vals * s->n, sizeof *s->vals * cap);
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
}

static jv lookup(jrender *r, jscope *s, const char *name) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->names[i] == name || !strcmp(s->names[i], name)) return s->vals[i];
    jv g = jl_global(r, name);
    return g.t != JV_UNDEF ? g : jr_undef_msg(r, "'%s' is undefined", name);
}

// ---- output -------------------------------------------------------------------------------

static void emit(jrender *r, const char *s, size_t n) {
    if (r->out->len + n > r->lim.max_output)
        jr_fail(r, r->line, "the rendered text passes the output limit of %zu bytes", r->lim.max_output);
    jb_put(&r->arena, r->out, s, n);
}

static int exec_body(jrender *r, const jnode *body, jscope *sc);

// Runs body with its text going to a string of its own (macros, block set, filter blocks).
static jstr *capture(jrender *r, const jnode *body, jscope *sc) {
    jbuf *saved = r->out, b = {0};
    r->out = &b;
    int flow = exec_body(r, body, sc);
    if (flow != FLOW_NORMAL) jr_fail(r, r->line, "break or continue outside a loop");
    r->out = saved;
    return jb_str(&r->arena, &b);
}

// ---- calls ---------------------------------------------------------------------------------

static jv eval(jrender *r, const jnode *n, jscope *sc);

// Positional and keyword arguments of n's kids (N_KWARG for the latter).
static jargs eval_args(jrender *r, const jnode *n, jscope *sc, int extra_kw) {
    jargs a = {.line = n->line};
    a.v = ja_alloc(&r->arena, sizeof *a.v * (size_t)(n->n_kids + 1));
    a.kw = ja_alloc(&r->arena, sizeof *a.kw * (size_t)(n->n_kids + extra_kw + 1));
    for (int i = 0; i < n->n_kids; i++) {
        const jnode *k = n->kids[i];
        if (k->kind == N_KWARG) a.kw[a.n_kw++] = (jkwarg){k->name, eval(r, k->a, sc)};
        else a.v[a.n++] = eval(r, k, sc);
    }
    return a;
}

// Binds a macro's (or a call block's) parameters in sc: positional
// arguments, then keywords, then defaults; the rest go to varargs / kwargs.
static void bind_params(jrender *r, const jfunc *f, const jargs *a, jscope *sc) {
    const jnode *m = f->macro;
    int np = m->n_kids;
    jvec varargs = {0};
    jdict *kwargs = jd_new(&r->arena);
    for (int i = 0; i < a->n; i++) {
        if (i < np) scope_set(r, sc, m->kids[i]->name, a->v[i]);
        else jvec_push(&r->arena, &varargs, a->v[i]);
    }
    for (int k = 0; k < a->n_kw; k++) {
        int found = -1;
        for (int i = 0; i < np; i++)
            if (!strcmp(m->kids[i]->name, a->kw[k].name)) found = i;
        if (found >= 0 && found < a->n)
            jr_fail(r, a->line, "macro '%s' got multiple values for argument '%s'", f->name, a->kw[k].name);
        if (found >= 0) scope_set(r, sc, m->kids[found]->name, a->kw[k].val);
        else if (!strcmp(a->kw[k].name, "caller")) scope_set(r, sc, "caller", a->kw[k].val);
        else if (m->op & 2) jd_set(&r->arena, kwargs, jv_str(js_cstr(&r->arena, a->kw[k].name)), a->kw[k].val);
        else jr_fail(r, a->line, "macro '%s' takes no keyword argument '%s'", f->name, a->kw[k].name);
    }
    if (varargs.n && !(m->op & 1))
        jr_fail(r, a->line, "macro '%s' takes not more than %d argument(s)", f->name, np);
    for (int i = a->n; i < np; i++) {
        const jnode *p = m->kids[i];
        int given = 0;  // by keyword
        for (size_t k = 0; k < sc->n && !given; k++) given = !strcmp(sc->names[k], p->name);
        if (given) continue;
        scope_set(r, sc, p->name,
                  p->kind == N_KWARG ? eval(r, p->a, sc) : jr_undef_msg(r, "parameter '%s' was not provided", p->name));
    }
    scope_set(r, sc, "varargs", jv_list(jvec_list(&r->arena, &varargs)));
    scope_set(r, sc, "kwargs", jv_dict(kwargs));
}

static jv call_macro(jrender *r, const jfunc *f, const jargs *a) {
    if (++r->depth > r->lim.max_depth) jr_fail(r, a->line, "macro calls nest deeper than %d", r->lim.max_depth);
    jscope *sc = scope_new(r, f->closure);
    bind_params(r, f, a, sc);
    jstr *s = capture(r, f->macro->b, sc);
    r->depth--;
    return jv_str(s);
}

jv jr_call(jrender *r, jv f, const jargs *a) {
    jr_step(r);
    if (f.t == JV_UNDEF && (f.flags & JVF_UNSAFE)) jr_fail(r, a->line, "%s", f.s->s);
    if (f.t == JV_UNDEF) jr_need_defined(r, f);
    if (f.t != JV_FUNC) jr_fail(r, a->line, "'%s' object is not callable", jv_type_name(f));
    int saved = r->line;
    r->line = a->line;
    jv v = f.fn->fn ? f.fn->fn(r, f.fn->self, a) : call_macro(r, f.fn, a);
    r->line = saved;
    return v;
}

// ---- expressions ----------------------------------------------------------------------------

static int64_t checked(jrender *r, int overflow, int64_t v, const char *op) {
    if (overflow) jr_fail(r, r->line, "integer overflow in %s", op);
    return v;
}

static int is_num(jv v) { return v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT; }
static int is_int(jv v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t ival(jv v) { return v.t == JV_INT ? v.i : v.b; }
static double fval(jv v) { return v.t == JV_FLOAT ? v.f : (double)ival(v); }

_Noreturn static void bad_operands(jrender *r, const char *op, jv a, jv b) {
    jr_need_defined(r, a);
    jr_need_defined(r, b);
    jr_fail(r, r->line, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a), jv_type_name(b));
}

// s repeated k times (str * int, list * int).
static jv repeat(jrender *r, jv s, int64_t k) {
    if (k < 0) k = 0;
    if (s.t == JV_STR) {
        if (s.s->len && (uint64_t)k > r->lim.max_output / s.s->len) jr_fail(r, r->line, "a repeated string is too long");
        jbuf b = {0};
        for (int64_t i = 0; i < k; i++) jb_put(&r->arena, &b, s.s->s, s.s->len);
        jv out = jv_str(jb_str(&r->arena, &b));
        out.flags = s.flags;
        return out;
    }
    if (s.l->n && (uint64_t)k > (uint64_t)r->lim.max_steps / s.l->n) jr_fail(r, r->line, "a repeated list is too long");
    jvec v = {0};
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < s.l->n; j++) jvec_push(&r->arena, &v, s.l->v[j]);
    jv out = jv_list(jvec_list(&r->arena, &v));
    out.flags = s.flags;
    return out;
}

static jv concat_seq(jrender *r, jv a, jv b) {
    if (a.t == JV_STR) {
        jbuf o = {0};
        jb_put(&r->arena, &o, a.s->s, a.s->len);
        jb_put(&r->arena, &o, b.s->s, b.s->len);
        return jv_str(jb_str(&r->arena, &o));
    }
    jvec v = {0};
    for (size_t i = 0; i < a.l->n; i++) jvec_push(&r->arena, &v, a.l->v[i]);
    for (size_t i = 0; i < b.l->n; i++) jvec_push(&r->arena, &v, b.l->v[i]);
    jv out = jv_list(jvec_list(&r->arena, &v));
    out.flags = a.flags;
    return out;
}

static jv arith_float(jrender *r, jop op, double x, double y) {
    switch (op) {
    case OP_ADD: return jv_float(x + y);
    case OP_SUB: return jv_float(x - y);
    case OP_MUL: return jv_float(x * y);
    case OP_POW: return jv_float(pow(x, y));
    default: break;
    }
    if (y == 0) jr_fail(r, r->line, "division by zero");
    if (op == OP_DIV) return jv_float(x / y);
    double q = floor(x / y), m = fmod(x, y);
    if (m != 0 && ((m < 0) != (y < 0))) m += y;
    return jv_float(op == OP_FLOORDIV ? q : m);
}

static jv arith_int(jrender *r, jop op, int64_t x, int64_t y) {
    int64_t v = 0;
    int o;
    switch (op) {
    case OP_ADD: o = __builtin_add_overflow(x, y, &v); return jv_int(checked(r, o, v, "+"));
    case OP_SUB: o = __builtin_sub_overflow(x, y, &v); return jv_int(checked(r, o, v, "-"));
    case OP_MUL: o = __builtin_mul_overflow(x, y, &v); return jv_int(checked(r, o, v, "*"));
    case OP_DIV: return arith_float(r, op, (double)x, (double)y);
    case OP_POW: {
        if (y < 0) return jv_float(pow((double)x, (double)y));
        int64_t acc = 1;
        for (int64_t i = 0; i < y; i++) {
            o = __builtin_mul_overflow(acc, x, &v);
            acc = checked(r, o, v, "**");
            if (acc == 0 || acc == 1) break;
            if (acc == -1) { acc = (y - i - 1) % 2 ? -acc : acc; break; }
        }
        return jv_int(acc);
    }
    default: break;
    }
    if (y == 0) jr_fail(r, r->line, "integer division or modulo by zero");
    if (x == INT64_MIN && y == -1) jr_fail(r, r->line, "integer overflow in //");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) q--, m += y;
    return jv_int(op == OP_FLOORDIV ? q : m);
}

static jv arith(jrender *r, jop op, jv a, jv b) {
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (is_num(a) && is_num(b)) {
        if (is_int(a) && is_int(b)) return arith_int(r, op, ival(a), ival(b));
        return arith_float(r, op, fval(a), fval(b));
    }
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR && ((a.flags | b.flags) & JVF_SAFE)) {
        jv joined = concat_seq(r, jl_escape(r, a), jl_escape(r, b));
        joined.flags = JVF_SAFE;
        return joined;
    }
    if (op == OP_ADD && a.t == b.t && (a.t == JV_STR || (a.t == JV_LIST && (a.flags & JVF_TUPLE) == (b.flags & JVF_TUPLE))))
        return concat_seq(r, a, b);
    if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST) && is_int(b)) return repeat(r, a, ival(b));
    if (op == OP_MUL && (b.t == JV_STR || b.t == JV_LIST) && is_int(a)) return repeat(r, b, ival(a));
    if (op == OP_MOD && a.t == JV_STR) jr_fail(r, r->line, "printf-style string formatting (str %% x) is not supported");
    bad_operands(r, names[op], a, b);
}

static int contains(jrender *r, jv hay, jv needle) {
    if (hay.t == JV_STR) {
        if (needle.t != JV_STR) {
            jr_need_defined(r, needle);
            jr_fail(r, r->line, "'in <string>' requires string as left operand, not %s", jv_type_name(needle));
        }
        return needle.s->len == 0 || memmem(hay.s->s, hay.s->len, needle.s->s, needle.s->len) != NULL;
    }
    if (hay.t == JV_DICT) { jv v; return jd_find(hay.d, needle, &v); }
    if (hay.t == JV_UNDEF) return 0;
    if (hay.t != JV_LIST) jr_fail(r, r->line, "argument of type '%s' is not iterable", jv_type_name(hay));
    for (size_t i = 0; i < hay.l->n; i++)
        if (jv_equal(hay.l->v[i], needle)) return 1;
    return 0;
}

static int compare_op(jrender *r, jop op, jv a, jv b) {
    switch (op) {
    case OP_EQ: return jv_equal(a, b);
    case OP_NE: return !jv_equal(a, b);
    case OP_IN: return contains(r, b, a);
    case OP_NOTIN: return !contains(r, b, a);
    default: break;
    }
    int c = jv_compare(r, a, b);
    return op == OP_LT ? c < 0 : op == OP_LE ? c <= 0 : op == OP_GT ? c > 0 : c >= 0;
}

static jv eval_seq(jrender *r, const jnode *n, jscope *sc) {
    jvec v = {0};
    for (int i = 0; i < n->n_kids; i++) jvec_push(&r->arena, &v, eval(r, n->kids[i], sc));
    jv out = jv_list(jvec_list(&r->arena, &v));
    if (n->kind == N_TUPLE) out.flags = JVF_TUPLE;
    return out;
}

// A filter chain; the innermost input is `body` when the chain stands on NULL.
static jv eval_filter(jrender *r, const jnode *n, jscope *sc, jv body) {
    jv v = n->a ? (n->a->kind == N_FILTER ? eval_filter(r, n->a, sc, body) : eval(r, n->a, sc)) : body;
    jargs a = eval_args(r, n, sc, 0);
    r->line = n->line;
    return jl_filter(r, n->name, v, &a);
}

static jv eval_call(jrender *r, const jnode *n, jscope *sc, jv caller) {
    jv f = eval(r, n->a, sc);
    jargs a = eval_args(r, n, sc, 1);
    if (caller.t == JV_FUNC) a.kw[a.n_kw++] = (jkwarg){"caller", caller};
    return jr_call(r, f, &a);
}

static jv eval_slice(jrender *r, const jnode *n, jscope *sc) {
    jv obj = eval(r, n->a, sc), part[3];
    jr_need_defined(r, obj);
    for (int i = 0; i < 3; i++) part[i] = n->kids[i] ? eval(r, n->kids[i], sc) : jv_none();
    r->line = n->line;
    return jl_slice(r, obj, part[0], part[1], part[2]);
}

static jv eval_compare(jrender *r, const jnode *n, jscope *sc) {
    jv left = eval(r, n->a, sc);
    for (int i = 0; i < n->n_kids; i++) {
        jv right = eval(r, n->kids[i]->a, sc);
        r->line = n->line;
        if (!compare_op(r, n->kids[i]->op, left, right)) return jv_bool(0);
        left = right;
    }
    return jv_bool(1);
}

static jv eval_unary(jrender *r, const jnode *n, jscope *sc) {
    jv v = eval(r, n->a, sc);
    r->line = n->line;
    if (n->kind == N_NOT) return jv_bool(!jv_truthy(v));
    if (!is_num(v)) {
        jr_need_defined(r, v);
        jr_fail(r, n->line, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+', jv_type_name(v));
    }
    if (n->kind == N_POS) return v.t == JV_BOOL ? jv_int(v.b) : v;
    if (v.t == JV_FLOAT) return jv_float(-v.f);
    return jv_int(checked(r, ival(v) == INT64_MIN, -ival(v), "-"));
}

static jv eval_inner(jrender *r, const jnode *n, jscope *sc) {
    switch ((jnode_kind)n->kind) {
    case N_CONST: return n->val;
    case N_NAME: return lookup(r, sc, n->name);
    case N_GETATTR: {
        jv obj = eval(r, n->a, sc);
        r->line = n->line;
        jr_need_defined(r, obj);
        return jl_getattr(r, obj, n->name);
    }
    case N_GETITEM: {
        jv obj = eval(r, n->a, sc), key = eval(r, n->b, sc);
        r->line = n->line;
        jr_need_defined(r, obj);
        return jl_getitem(r, obj, key);
    }
    case N_SLICE: return eval_slice(r, n, sc);
    case N_CALL: return eval_call(r, n, sc, jv_none());
    case N_FILTER: return eval_filter(r, n, sc, jv_none());
    case N_TEST: {
        jv v = eval(r, n->a, sc);
        jargs a = eval_args(r, n, sc, 0);
        r->line = n->line;
        return jv_bool(jl_test(r, n->name, v, &a) != n->op);
    }
    case N_NEG: case N_POS: case N_NOT: return eval_unary(r, n, sc);
    case N_BINOP: {
        jv a = eval(r, n->a, sc), b = eval(r, n->b, sc);
        r->line = n->line;
        return arith(r, n->op, a, b);
    }
    case N_AND: { jv a = eval(r, n->a, sc); return jv_truthy(a) ? eval(r, n->b, sc) : a; }
    case N_OR: { jv a = eval(r, n->a, sc); return jv_truthy(a) ? a : eval(r, n->b, sc); }
    case N_CONCAT: {
        jbuf b = {0};
        for (int i = 0; i < n->n_kids; i++) jv_str_to(r, &b, eval(r, n->kids[i], sc));
        return jv_str(jb_str(&r->arena, &b));
    }
    case N_COMPARE: return eval_compare(r, n, sc);
    case N_COND:
        if (jv_truthy(eval(r, n->b, sc))) return eval(r, n->a, sc);
        return n->c ? eval(r, n->c, sc) : jr_undef_msg(r, "the inline if-expression on line %d evaluated to false "
                                                          "and no else section was defined", n->line);
    case N_LIST: case N_TUPLE: return eval_seq(r, n, sc);
    case N_DICT: {
        jdict *d = jd_new(&r->arena);
        for (int i = 0; i + 1 < n->n_kids; i += 2) {
            jv k = eval(r, n->kids[i], sc);
            jd_set(&r->arena, d, k, eval(r, n->kids[i + 1], sc));
        }
        return jv_dict(d);
    }
    default: jr_fail(r, n->line, "internal error: node %d is not an expression", n->kind);
    }
}

static jv eval(jrender *r, const jnode *n, jscope *sc) {
    jr_step(r);
    if (++r->depth > r->lim.max_depth) jr_fail(r, n->line, "expressions nest deeper than %d", r->lim.max_depth);
    int saved = r->line;
    r->line = n->line;
    jv v = eval_inner(r, n, sc);
    r->line = saved;
    r->depth--;
    return v;
}

// ---- statements --------------------------------------------------------------------------------

static void assign(jrender *r, const jnode *target, jv v, jscope *sc) {
    if (target->kind == N_NAME) {
        scope_set(r, sc, target->name, v);
        return;
    }
    if (target->kind == N_GETATTR) {
        jv ns = lookup(r, sc, target->a->name);
        if (ns.t != JV_NS) jr_fail(r, target->line, "cannot assign attribute on non-namespace object");
        jd_set(&r->arena, ns.d, jv_str(js_cstr(&r->arena, target->name)), v);
        return;
    }
    jv items = v.t == JV_LIST ? v : jl_iterable(r, v);  // a tuple of names: unpack
    if (items.l->n != (size_t)target->n_kids)
        jr_fail(r, target->line, "%s values to unpack (expected %d, got %zu)",
                items.l->n < (size_t)target->n_kids ? "not enough" : "too many", target->n_kids, items.l->n);
    for (int i = 0; i < target->n_kids; i++) scope_set(r, sc, target->kids[i]->name, items.l->v[i]);
}

static int exec_for(jrender *r, const jnode *n, jscope *sc) {
    jv it = eval(r, n->a, sc);
    r->line = n->line;
    jv items = jl_iterable(r, it);
    if (n->e) {  // {% for x in xs if cond %}: the loop sees only the items that pass
        jvec kept = {0};
        for (size_t i = 0; i < items.l->n; i++) {
            jscope *t = scope_new(r, sc);
            assign(r, n->d, items.l->v[i], t);
            if (jv_truthy(eval(r, n->e, t))) jvec_push(&r->arena, &kept, items.l->v[i]);
        }
        items = jv_list(jvec_list(&r->arena, &kept));
    }
    if (!items.l->n) return n->c ? exec_body(r, n->c, scope_new(r, sc)) : FLOW_NORMAL;
    jloop *loop = ja_alloc(&r->arena, sizeof *loop);
    loop->items = items.l;
    for (size_t i = 0; i < items.l->n; i++) {
        jr_step(r);
        loop->index0 = i;
        jscope *t = scope_new(r, sc);
        scope_set(r, t, "loop", (jv){.t = JV_LOOP, .loop = loop});
        assign(r, n->d, items.l->v[i], t);
        int flow = exec_body(r, n->b, t);
        if (flow == FLOW_BREAK) break;
    }
    return FLOW_NORMAL;
}

static jv make_func(jrender *r, const jnode *n, jscope *sc) {
    jfunc *f = ja_alloc(&r->arena, sizeof *f);
    f->name = n->name ? n->name : "caller";
    f->macro = n;
    f->closure = sc;
    return (jv){.t = JV_FUNC, .fn = f};
}

static void exec_set_block(jrender *r, const jnode *n, jscope *sc) {
    jv text = jv_str(capture(r, n->b, sc));
    if (n->c) text = eval_filter(r, n->c, sc, text);
    assign(r, n->a, text, sc);
}

static int exec_stmt(jrender *r, const jnode *n, jscope *sc) {
    r->line = n->line;
    switch ((jnode_kind)n->kind) {
    case N_TEXT: emit(r, n->val.s->s, n->val.s->len); return FLOW_NORMAL;
    case N_PRINT: {
        jv v = eval(r, n->a, sc);
        if (v.t == JV_STR) emit(r, v.s->s, v.s->len);
        else if (v.t != JV_UNDEF) {
            jstr *s = jv_to_str(r, v);
            emit(r, s->s, s->len);
        }
        return FLOW_NORMAL;
    }
    case N_IF:
        if (jv_truthy(eval(r, n->a, sc))) return exec_body(r, n->b, sc);
        return n->c ? exec_body(r, n->c, sc) : FLOW_NORMAL;
    case N_FOR: return exec_for(r, n, sc);
    case N_SET: assign(r, n->a, eval(r, n->b, sc), sc); return FLOW_NORMAL;
    case N_SETBLOCK: exec_set_block(r, n, sc); return FLOW_NORMAL;
    case N_MACRO: scope_set(r, sc, n->name, make_func(r, n, sc)); return FLOW_NORMAL;
    case N_CALLBLOCK: {
        jstr *s = jv_to_str(r, eval_call(r, n->a, sc, make_func(r, n, sc)));
        emit(r, s->s, s->len);
        return FLOW_NORMAL;
    }
    case N_FILTERBLOCK: {
        jstr *s = jv_to_str(r, eval_filter(r, n->c, sc, jv_str(capture(r, n->b, sc))));
        emit(r, s->s, s->len);
        return FLOW_NORMAL;
    }
    case N_BODY: return exec_body(r, n, sc);
    case N_BREAK: return FLOW_BREAK;
    case N_CONTINUE: return FLOW_CONTINUE;
    default: jr_fail(r, n->line, "internal error: node %d is not a statement", n->kind);
    }
}

static int exec_body(jrender *r, const jnode *body, jscope *sc) {
    if (++r->depth > r->lim.max_depth) jr_fail(r, body->line, "blocks nest deeper than %d", r->lim.max_depth);
    int flow = FLOW_NORMAL;
    for (int i = 0; i < body->n_kids && flow == FLOW_NORMAL; i++) {
        jr_step(r);
        flow = exec_stmt(r, body->kids[i], sc);
    }
    r->depth--;
    return flow;
}

// ---- entry points ---------------------------------------------------------------------------------

int jinja_parse(jinja_template **out, const char *src, size_t len, char *err) {
    *out = NULL;
    long bad = utf8_invalid_at(src, len);
    if (bad >= 0) return errf(err, "the template is not valid UTF-8 (byte %ld)", bad);
    if (memchr(src, 0, len)) return errf(err, "the template holds a NUL byte");
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) return errf(err, "out of memory");
    t->arena = (jarena){.limit = (size_t)1 << 30, .fail = &t->fail};
    if (setjmp(t->fail.jb)) {
        snprintf(err, ERR_LEN, "%s", t->fail.msg);
        jinja_free(t);
        return -1;
    }
    jparse_template(t, src, len);
    *out = t;
    return 0;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t);
}

static jinja_limits limits_or_default(const jinja_limits *lim) {
    jinja_limits l = lim ? *lim : (jinja_limits){0};
    if (!l.max_output) l.max_output = (size_t)16 << 20;
    if (!l.max_memory) l.max_memory = (size_t)256 << 20;
    if (!l.max_steps) l.max_steps = 20000000;
    if (!l.max_depth) l.max_depth = 1024;
    if (!l.now) l.now = time(NULL);
    return l;
}

// The render proper, between setjmp and the cleanup.
static void render(jrender *r, const jinja_template *t, const json_t *vars) {
    r->globals = scope_new(r, NULL);
    const char *key;
    json_t *val;
    json_object_foreach((json_t *)vars, key, val) {
        jstr *name = js_cstr(&r->arena, key);
        scope_set(r, r->globals, name->s, jv_from_json(r, val));
    }
    jbuf *out = ja_alloc(&r->arena, sizeof *out);
    jb_put(&r->arena, out, "", 0);
    r->out = out;
    if (exec_body(r, t->root, scope_new(r, r->globals)) != FLOW_NORMAL)
        jr_fail(r, r->line, "break or continue outside a loop");
}

int jinja_render(const jinja_template *t, const json_t *vars, const jinja_limits *lim, char **out, size_t *len,
                 char *err) {
    *out = NULL;
    *len = 0;
    if (!json_is_object(vars)) return errf(err, "the template variables must be a JSON object");
    jrender *r = calloc(1, sizeof *r);
    if (!r) return errf(err, "out of memory");
    r->lim = limits_or_default(lim);
    r->arena = (jarena){.limit = r->lim.max_memory, .fail = &r->fail};
    int rc = 0;
    if (setjmp(r->fail.jb)) {
        snprintf(err, ERR_LEN, "%s", r->fail.msg);
        rc = -1;
    } else {
        render(r, t, vars);
        if (!(*out = malloc(r->out->len + 1))) {
            rc = errf(err, "out of memory");
        } else {
            memcpy(*out, r->out->s, r->out->len + 1);
            *len = r->out->len;
        }
    }
    if (r->locale) freelocale((locale_t)r->locale);
    ja_free(&r->arena);
    free(r);
    return rc;
}

int jinja_render_text(const char *src, size_t src_len, const char *vars_json, size_t vars_len,
                      const jinja_limits *lim, char **out, size_t *len, char *err) {
    *out = NULL;
    *len = 0;
    json_error_t je;
    json_t *vars = json_loadb(vars_json, vars_len, 0, &je);
    if (!vars) return errf(err, "the variables are not JSON: %s", je.text);
    jinja_template *t;
    int rc = jinja_parse(&t, src, src_len, err);
    if (!rc) rc = jinja_render(t, vars, lim, out, len, err);
    jinja_free(t);
    json_decref(vars);
    return rc;
}
