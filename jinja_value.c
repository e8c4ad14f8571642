// jinja_value.c — the Jinja engine's arena and values: strings, lists,
// dicts, and what Python makes of them (truth, ==, <, str(), repr(),
// json.dumps()), since a template's output is Python's text for its values.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_int.h"

// ---- errors and the arena -------------------------------------------------------------

_Noreturn void jfail_at(jfail *f, int line, const char *fmt, ...) {
    int k = line > 0 ? snprintf(f->msg, sizeof f->msg, "line %d: ", line) : 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->msg + k, sizeof f->msg - (size_t)k, fmt, ap);
    va_end(ap);
    longjmp(f->jb, 1);
}

struct ja_block {
    ja_block *next;
    size_t used, cap;
    _Alignas(16) char data[];
};

void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    ja_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 60000 ? n : 65536 - sizeof *b;
        if (n > a->limit || a->total + cap + sizeof *b > a->limit)
            jfail_at(a->fail, 0, "the template needs more than %zu MiB of memory", a->limit >> 20);
        b = malloc(sizeof *b + cap);
        if (!b) jfail_at(a->fail, 0, "out of memory");
        a->total += cap + sizeof *b;
        b->used = 0, b->cap = cap;
        // a big block goes behind the current one, which keeps filling
        if (a->head && n > 60000) b->next = a->head->next, a->head->next = b;
        else b->next = a->head, a->head = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void *ja_grow(jarena *a, void *p, size_t old, size_t n) {
    void *q = ja_alloc(a, n);
    if (old) memcpy(q, p, old < n ? old : n);
    return q;
}

void ja_free(jarena *a) {
    for (ja_block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
    a->total = 0;
}

// ---- strings, buffers, lists, dicts ----------------------------------------------------

jstr *js_new(jarena *a, const char *s, size_t n) {
    if (n > a->limit) jfail_at(a->fail, 0, "a string of %zu bytes is past the memory limit", n);
    jstr *r = ja_alloc(a, sizeof *r + n + 1);
    r->len = n;
    if (n) memcpy(r->s, s, n);
    r->s[n] = 0;
    return r;
}

jstr *js_cstr(jarena *a, const char *s) { return js_new(a, s, strlen(s)); }

void jb_put(jarena *a, jbuf *b, const char *s, size_t n) {
    if (b->cap - b->len < n + 1) {
        if (n > a->limit || b->len > a->limit) jfail_at(a->fail, 0, "a string is past the memory limit");
        size_t cap = (b->len + n + 1) * 2 < 64 ? 64 : (b->len + n + 1) * 2;
        b->s = ja_grow(a, b->s, b->len, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

void jb_puts(jarena *a, jbuf *b, const char *s) { jb_put(a, b, s, strlen(s)); }

jstr *jb_str(jarena *a, jbuf *b) { return js_new(a, b->s ? b->s : "", b->len); }

void jvec_push(jarena *a, jvec *v, jv x) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? 2 * v->cap : 8;
        v->v = ja_grow(a, v->v, sizeof *v->v * v->n, sizeof *v->v * cap);
        v->cap = cap;
    }
    v->v[v->n++] = x;
}

jlist *jvec_list(jarena *a, jvec *v) {
    jlist *l = ja_alloc(a, sizeof *l);
    l->n = v->n;
    l->v = v->v;
    return l;
}

jdict *jd_new(jarena *a) { return ja_alloc(a, sizeof(jdict)); }

static long jd_index(const jdict *d, jv key) {
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(d->k[i], key)) return (long)i;
    return -1;
}

void jd_set(jarena *a, jdict *d, jv key, jv val) {
    long i = jd_index(d, key);
    if (i >= 0) {
        d->v[i] = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        d->k = ja_grow(a, d->k, sizeof *d->k * d->n, sizeof *d->k * cap);
        d->v = ja_grow(a, d->v, sizeof *d->v * d->n, sizeof *d->v * cap);
        d->cap = cap;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
}

int jd_find(const jdict *d, jv key, jv *val) {
    long i = jd_index(d, key);
    if (i >= 0) *val = d->v[i];
    return i >= 0;
}

int jd_find_str(const jdict *d, const char *key, jv *val) {
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && d->k[i].s->len == n && !memcmp(d->k[i].s->s, key, n)) {
            *val = d->v[i];
            return 1;
        }
    return 0;
}

// ---- UTF-8 --------------------------------------------------------------------------

uint32_t utf8_next(const char *s, size_t n, size_t *i) {
    const unsigned char *u = (const unsigned char *)s;
    size_t p = *i;
    uint32_t c = u[p];
    int len = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (p + (size_t)len > n) len = 1;
    if (len > 1) {
        c &= 0x3f >> (len - 1);
        for (int k = 1; k < len; k++) c = (c << 6) | (u[p + k] & 0x3f);
    }
    *i = p + (size_t)len;
    return c;
}

void utf8_put(jarena *a, jbuf *b, uint32_t c) {
    char u[4];
    int n = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    if (n == 1) u[0] = (char)c;
    else {
        for (int i = n - 1; i > 0; i--) u[i] = (char)(0x80 | (c & 0x3f)), c >>= 6;
        u[0] = (char)((0xf00 >> n) | c);
    }
    jb_put(a, b, u, (size_t)n);
}

size_t utf8_len(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

size_t utf8_offset(const char *s, size_t n, size_t cp) {
    size_t i = 0;
    while (cp > 0 && i < n) {
        utf8_next(s, n, &i);
        cp--;
    }
    return i;
}

int py_isspace(uint32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// ---- truth, equality, order ------------------------------------------------------------

int jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: return v.b;
    case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0;
    case JV_STR: return v.s->len != 0;
    case JV_LIST: return (v.flags & JVF_GEN) || v.l->n != 0;
    case JV_DICT: return v.d->n != 0;
    default: return 1;
    }
}

static int is_number(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static double num(jv v) { return v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : v.b; }
static int64_t inum(jv v) { return v.t == JV_INT ? v.i : v.b; }

int jv_equal(jv a, jv b) {
    if (is_number(a) && is_number(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return inum(a) == inum(b);
        return num(a) == num(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return a.s->len == b.s->len && !memcmp(a.s->s, b.s->s, a.s->len);
    case JV_LIST:
        if ((a.flags | b.flags) & JVF_GEN) return a.l == b.l;
        if ((a.flags & JVF_TUPLE) != (b.flags & JVF_TUPLE) || a.l->n != b.l->n) return 0;
        for (size_t i = 0; i < a.l->n; i++)
            if (!jv_equal(a.l->v[i], b.l->v[i])) return 0;
        return 1;
    case JV_DICT:
        if (a.d->n != b.d->n) return 0;
        for (size_t i = 0; i < a.d->n; i++) {
            jv v;
            if (!jd_find(b.d, a.d->k[i], &v) || !jv_equal(a.d->v[i], v)) return 0;
        }
        return 1;
    case JV_NS: return a.d == b.d;
    case JV_FUNC: return a.fn == b.fn;
    case JV_LOOP: return a.loop == b.loop;
    default: return 0;
    }
}

const char *jv_type_name(jv v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v.flags & JVF_GEN ? "generator" : v.flags & JVF_VIEW ? "dict view or range" :
                         v.flags & JVF_TUPLE ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_FUNC: return "function";
    default: return "LoopContext";
    }
}

int jv_compare(jrender *r, jv a, jv b) {
    if (is_number(a) && is_number(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return (inum(a) > inum(b)) - (inum(a) < inum(b));
        return (num(a) > num(b)) - (num(a) < num(b));
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int c = memcmp(a.s->s, b.s->s, n);  // UTF-8 byte order is code point order
        return c ? c : (a.s->len > b.s->len) - (a.s->len < b.s->len);
    }
    if (a.t == JV_LIST && b.t == JV_LIST && (a.flags & JVF_TUPLE) == (b.flags & JVF_TUPLE)) {
        for (size_t i = 0; i < a.l->n && i < b.l->n; i++)
            if (!jv_equal(a.l->v[i], b.l->v[i])) return jv_compare(r, a.l->v[i], b.l->v[i]);
        return (a.l->n > b.l->n) - (a.l->n < b.l->n);
    }
    if (a.t == JV_UNDEF || b.t == JV_UNDEF) jr_need_defined(r, a.t == JV_UNDEF ? a : b);
    jr_fail(r, r->line, "'<' not supported between instances of '%s' and '%s'", jv_type_name(a), jv_type_name(b));
}

// ---- str() and repr() -------------------------------------------------------------------

// Python's repr of a float: the shortest digits that read back the same,
// positional for exponents -4..15, else scientific (1e+16, 1.5e-05).
void jv_float_repr(char out[32], double f) {
    if (isnan(f)) { strcpy(out, "nan"); return; }
    if (isinf(f)) { strcpy(out, f < 0 ? "-inf" : "inf"); return; }
    char sci[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(sci, sizeof sci, "%.*e", prec - 1, f);
        if (strtod(sci, NULL) == f) break;
    }
    // sci: [-]d[.ddd]e[+-]XX
    char digits[24];
    int nd = 0, neg = sci[0] == '-';
    const char *p = sci + neg;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    int e = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    char *o = out;
    if (neg) *o++ = '-';
    if (e >= -4 && e < 16) {
        if (e < 0) {
            o += sprintf(o, "0.");
            for (int i = 0; i < -e - 1; i++) *o++ = '0';
            o += sprintf(o, "%s", digits);
        } else {
            for (int i = 0; i <= e; i++) *o++ = i < nd ? digits[i] : '0';
            *o++ = '.';
            if (nd > e + 1) o += sprintf(o, "%s", digits + e + 1);
            else *o++ = '0';
            *o = 0;
        }
    } else {
        *o++ = digits[0];
        if (nd > 1) o += sprintf(o, ".%s", digits + 1);
        sprintf(o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

// Code points Python's repr escapes (str.isprintable() is false): controls,
// and the separators and format characters a chat text may hold.
static int py_unprintable(uint32_t c) {
    return c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad || c == 0x1680 || (c >= 0x2000 && c <= 0x200f) ||
           (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x2064) || (c >= 0x2066 && c <= 0x206f) ||
           c == 0x3000 || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb) || (c >= 0xe000 && c <= 0xf8ff) ||
           c == 0x180e || c == 0x061c || c == 0x200e || c >= 0xf0000;
}

static void repr_str(jrender *r, jbuf *b, const jstr *s) {
    jarena *a = &r->arena;
    int has_sq = memchr(s->s, '\'', s->len) != NULL, has_dq = memchr(s->s, '"', s->len) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    jb_put(a, b, &q, 1);
    for (size_t i = 0; i < s->len;) {
        size_t start = i;
        uint32_t c = utf8_next(s->s, s->len, &i);
        char esc[16];
        if (c == (uint32_t)q || c == '\\') esc[0] = '\\', esc[1] = (char)c, esc[2] = 0;
        else if (c == '\n') strcpy(esc, "\\n");
        else if (c == '\r') strcpy(esc, "\\r");
        else if (c == '\t') strcpy(esc, "\\t");
        else if (py_unprintable(c)) snprintf(esc, sizeof esc, c < 0x100 ? "\\x%02x" : c < 0x10000 ? "\\u%04x" : "\\U%08x", c);
        else {
            jb_put(a, b, s->s + start, i - start);
            continue;
        }
        jb_puts(a, b, esc);
    }
    jb_put(a, b, &q, 1);
}

static void repr_seq(jrender *r, jbuf *b, jv v) {
    if (v.flags & (JVF_GEN | JVF_VIEW))
        jr_fail(r, r->line, "cannot print a %s (add |list)", jv_type_name(v));
    int tuple = v.flags & JVF_TUPLE;
    jb_puts(&r->arena, b, tuple ? "(" : "[");
    for (size_t i = 0; i < v.l->n; i++) {
        if (i) jb_puts(&r->arena, b, ", ");
        jv_repr_to(r, b, v.l->v[i]);
    }
    jb_puts(&r->arena, b, tuple ? (v.l->n == 1 ? ",)" : ")") : "]");
}

static void repr_dict(jrender *r, jbuf *b, const jdict *d) {
    jb_puts(&r->arena, b, "{");
    for (size_t i = 0; i < d->n; i++) {
        if (i) jb_puts(&r->arena, b, ", ");
        jv_repr_to(r, b, d->k[i]);
        jb_puts(&r->arena, b, ": ");
        jv_repr_to(r, b, d->v[i]);
    }
    jb_puts(&r->arena, b, "}");
}

void jv_repr_to(jrender *r, jbuf *b, jv v) {
    jr_step(r);
    switch (v.t) {
    case JV_STR: repr_str(r, b, v.s); return;
    case JV_LIST: repr_seq(r, b, v); return;
    case JV_DICT: repr_dict(r, b, v.d); return;
    case JV_UNDEF: jb_puts(&r->arena, b, "Undefined"); return;
    case JV_NS:
        jb_puts(&r->arena, b, "<Namespace ");
        repr_dict(r, b, v.d);
        jb_puts(&r->arena, b, ">");
        return;
    case JV_FUNC: case JV_LOOP:
        jr_fail(r, r->line, "cannot print a %s", v.t == JV_FUNC ? "function or macro" : "loop object");
    default:
        jv_str_to(r, b, v);
    }
}

void jv_str_to(jrender *r, jbuf *b, jv v) {
    char num[40];
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: jb_puts(&r->arena, b, "None"); return;
    case JV_BOOL: jb_puts(&r->arena, b, v.b ? "True" : "False"); return;
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)v.i); jb_puts(&r->arena, b, num); return;
    case JV_FLOAT: jv_float_repr(num, v.f); jb_puts(&r->arena, b, num); return;
    case JV_STR: jb_put(&r->arena, b, v.s->s, v.s->len); return;
    default: jv_repr_to(r, b, v);
    }
}

jstr *jv_to_str(jrender *r, jv v) {
    if (v.t == JV_STR) return v.s;
    jbuf b = {0};
    jv_str_to(r, &b, v);
    return jb_str(&r->arena, &b);
}

// ---- json.dumps ----------------------------------------------------------------------------

typedef struct {
    int ensure_ascii, sort_keys;
    const jstr *indent, *item_sep, *key_sep;
} json_fmt;

static void json_str_out(jrender *r, jbuf *b, const char *s, size_t n, int ensure_ascii) {
    jarena *a = &r->arena;
    jb_put(a, b, "\"", 1);
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t c = utf8_next(s, n, &i);
        char esc[16];
        if (c == '"') strcpy(esc, "\\\"");
        else if (c == '\\') strcpy(esc, "\\\\");
        else if (c == '\n') strcpy(esc, "\\n");
        else if (c == '\r') strcpy(esc, "\\r");
        else if (c == '\t') strcpy(esc, "\\t");
        else if (c == '\b') strcpy(esc, "\\b");
        else if (c == '\f') strcpy(esc, "\\f");
        else if (c < 0x20 || (ensure_ascii && c >= 0x7f)) {
            if (c >= 0x10000)
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xd800 + ((c - 0x10000) >> 10), 0xdc00 + ((c - 0x10000) & 0x3ff));
            else snprintf(esc, sizeof esc, "\\u%04x", c);
        } else {
            jb_put(a, b, s + start, i - start);
            continue;
        }
        jb_puts(a, b, esc);
    }
    jb_put(a, b, "\"", 1);
}

static void json_newline(jrender *r, jbuf *b, const json_fmt *f, int level) {
    jb_put(&r->arena, b, "\n", 1);
    for (int i = 0; i < level; i++) jb_put(&r->arena, b, f->indent->s, f->indent->len);
}

static void json_value(jrender *r, jbuf *b, jv v, const json_fmt *f, int level);

// A dict key as json.dumps writes it: str as is; numbers, bools and None as text.
static jstr *json_key(jrender *r, jv k) {
    char num[40];
    switch (k.t) {
    case JV_STR: return k.s;
    case JV_NONE: return js_cstr(&r->arena, "null");
    case JV_BOOL: return js_cstr(&r->arena, k.b ? "true" : "false");
    case JV_INT: snprintf(num, sizeof num, "%lld", (long long)k.i); return js_cstr(&r->arena, num);
    case JV_FLOAT: jv_float_repr(num, k.f); return js_cstr(&r->arena, num);
    default: jr_fail(r, r->line, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

static void json_dict(jrender *r, jbuf *b, const jdict *d, const json_fmt *f, int level) {
    jarena *a = &r->arena;
    if (!d->n) { jb_puts(a, b, "{}"); return; }
    size_t *order = ja_alloc(a, sizeof *order * d->n);
    jstr **keys = ja_alloc(a, sizeof *keys * d->n);
    for (size_t i = 0; i < d->n; i++) order[i] = i, keys[i] = json_key(r, d->k[i]);
    if (f->sort_keys)  // insertion sort: stable, and dicts in templates are small
        for (size_t i = 1; i < d->n; i++)
            for (size_t j = i; j > 0 && jv_compare(r, d->k[order[j - 1]], d->k[order[j]]) > 0; j--) {
                size_t t = order[j]; order[j] = order[j - 1]; order[j - 1] = t;
            }
    jb_puts(a, b, "{");
    for (size_t i = 0; i < d->n; i++) {
        if (i) jb_put(a, b, f->item_sep->s, f->item_sep->len);
        if (f->indent) json_newline(r, b, f, level + 1);
        json_str_out(r, b, keys[order[i]]->s, keys[order[i]]->len, f->ensure_ascii);
        jb_put(a, b, f->key_sep->s, f->key_sep->len);
        json_value(r, b, d->v[order[i]], f, level + 1);
    }
    if (f->indent) json_newline(r, b, f, level);
    jb_puts(a, b, "}");
}

static void json_value(jrender *r, jbuf *b, jv v, const json_fmt *f, int level) {
    jr_step(r);
    if (level > r->lim.max_depth) jr_fail(r, r->line, "tojson: nesting deeper than %d", r->lim.max_depth);
    jarena *a = &r->arena;
    char num[40];
    switch (v.t) {
    case JV_NONE: jb_puts(a, b, "null"); return;
    case JV_BOOL: jb_puts(a, b, v.b ? "true" : "false"); return;
    case JV_INT: jv_str_to(r, b, v); return;
    case JV_FLOAT:
        if (isnan(v.f)) jb_puts(a, b, "NaN");
        else if (isinf(v.f)) jb_puts(a, b, v.f < 0 ? "-Infinity" : "Infinity");
        else jv_float_repr(num, v.f), jb_puts(a, b, num);
        return;
    case JV_STR: json_str_out(r, b, v.s->s, v.s->len, f->ensure_ascii); return;
    case JV_DICT: json_dict(r, b, v.d, f, level); return;
    case JV_LIST:
        if (v.flags & (JVF_GEN | JVF_VIEW))
            jr_fail(r, r->line, "Object of type %s is not JSON serializable", jv_type_name(v));
        if (!v.l->n) { jb_puts(a, b, "[]"); return; }
        jb_puts(a, b, "[");
        for (size_t i = 0; i < v.l->n; i++) {
            if (i) jb_put(a, b, f->item_sep->s, f->item_sep->len);
            if (f->indent) json_newline(r, b, f, level + 1);
            json_value(r, b, v.l->v[i], f, level + 1);
        }
        if (f->indent) json_newline(r, b, f, level);
        jb_puts(a, b, "]");
        return;
    default:
        if (v.t == JV_UNDEF) jr_need_defined(r, v);
        jr_fail(r, r->line, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

void jv_json_to(jrender *r, jbuf *b, jv v, int ensure_ascii, const jstr *indent, const jstr *item_sep,
                const jstr *key_sep, int sort_keys) {
    json_fmt f = {ensure_ascii, sort_keys, indent, item_sep, key_sep};
    if (!f.item_sep) f.item_sep = js_cstr(&r->arena, indent ? "," : ", ");
    if (!f.key_sep) f.key_sep = js_cstr(&r->arena, ": ");
    json_value(r, b, v, &f, 0);
}

// ---- from JSON ------------------------------------------------------------------------------

jv jv_from_json(jrender *r, const json_t *j) {
    jr_step(r);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jdict *d = jd_new(&r->arena);
        const char *key;
        json_t *val;
        size_t n = json_object_size(j), i = 0;
        d->k = ja_alloc(&r->arena, sizeof *d->k * (n + 1));
        d->v = ja_alloc(&r->arena, sizeof *d->v * (n + 1));
        d->cap = n + 1;
        json_object_foreach((json_t *)j, key, val) {  // jansson's keys are unique: no search
            if (i == n) break;
            d->k[i] = jv_str(js_cstr(&r->arena, key));
            d->v[i++] = jv_from_json(r, val);
        }
        d->n = i;
        return jv_dict(d);
    }
    case JSON_ARRAY: {
        jvec v = {0};
        size_t i;
        json_t *x;
        json_array_foreach(j, i, x) jvec_push(&r->arena, &v, jv_from_json(r, x));
        return jv_list(jvec_list(&r->arena, &v));
    }
    case JSON_STRING: return jv_str(js_new(&r->arena, json_string_value(j), json_string_length(j)));
    case JSON_INTEGER: return jv_int(json_integer_value(j));
    case JSON_REAL: return jv_float(json_real_value(j));
    case JSON_TRUE: return jv_bool(1);
    case JSON_FALSE: return jv_bool(0);
    default: return jv_none();
    }
}
