// jinja_lib.c — what templates call: jinja2's filters and tests, the Python
// str / dict / list methods the sandbox lets through, attribute and item
// access with jinja2's fallbacks, and the globals (range, namespace, dict,
// and transformers' raise_exception and strftime_now).
//
// Each follows the Python function it stands for, down to what it returns
// for Undefined and None; where a filter returns a generator in jinja2
// (map, select, items, ...) the result is marked JVF_GEN and behaves like
// one (always true, no length, read once). Text case mapping goes through
// glibc's C.UTF-8 tables; the few characters whose Python mapping is not
// one code point to one are refused rather than mapped differently.
#include <ctype.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <wctype.h>

#include "jinja_int.h"

// ---- arguments -----------------------------------------------------------------------------

#define MAX_PARAMS 6

// A call's arguments bound to named parameters: positional first, then by keyword.
typedef struct {
    jv v[MAX_PARAMS];
    int given[MAX_PARAMS];
} params;

// Binds a's arguments to names[0..np); extra or unknown ones are an error.
static params bind(jrender *r, const jargs *a, const char *what, const char *const *names, int np) {
    params p = {0};
    if (a->n > np) jr_fail(r, r->line, "%s takes at most %d argument%s (%d given)", what, np, np == 1 ? "" : "s", a->n);
    for (int i = 0; i < a->n; i++) p.v[i] = a->v[i], p.given[i] = 1;
    for (int k = 0; k < a->n_kw; k++) {
        int i = 0;
        while (i < np && strcmp(names[i], a->kw[k].name)) i++;
        if (i == np) jr_fail(r, r->line, "%s got an unexpected keyword argument '%s'", what, a->kw[k].name);
        if (p.given[i]) jr_fail(r, r->line, "%s got multiple values for argument '%s'", what, names[i]);
        p.v[i] = a->kw[k].val, p.given[i] = 1;
    }
    return p;
}

#define BIND(what, ...)                                                               \
    static const char *const names_[] = {__VA_ARGS__};                                \
    params p = bind(r, a, what, names_, (int)(sizeof names_ / sizeof *names_))

static jv arg_or(const params *p, int i, jv dflt) { return p->given[i] ? p->v[i] : dflt; }

static jstr *need_str(jrender *r, jv v, const char *what) {
    if (v.t != JV_STR) {
        jr_need_defined(r, v);
        jr_fail(r, r->line, "%s must be a string, not %s", what, jv_type_name(v));
    }
    return v.s;
}

static int64_t need_int(jrender *r, jv v, const char *what) {
    if (v.t != JV_INT && v.t != JV_BOOL) {
        jr_need_defined(r, v);
        jr_fail(r, r->line, "%s must be an integer, not %s", what, jv_type_name(v));
    }
    return v.t == JV_INT ? v.i : v.b;
}

static jv str_v(jrender *r, const char *s, size_t n) { return jv_str(js_new(&r->arena, s, n)); }

static jv list_of(jrender *r, jvec *v, int flags) {
    jv l = jv_list(jvec_list(&r->arena, v));
    l.flags = (uint8_t)flags;
    return l;
}

// ---- iteration ---------------------------------------------------------------------------------

// The items iterating v yields (a list; a generator is consumed).
jv jl_iterable(jrender *r, jv v) {
    jvec out = {0};
    switch (v.t) {
    case JV_LIST:
        if (v.flags & JVF_GEN) {
            for (size_t i = v.l->pos; i < v.l->n; i++) jvec_push(&r->arena, &out, v.l->v[i]);
            v.l->pos = v.l->n;
            return list_of(r, &out, 0);
        }
        v.flags &= JVF_TUPLE;  // list(d.items()) is a list; list((1, 2)) too, but iterating keeps what it walks
        return v;
    case JV_DICT:
        for (size_t i = 0; i < v.d->n; i++) jvec_push(&r->arena, &out, v.d->k[i]);
        return list_of(r, &out, 0);
    case JV_STR:
        for (size_t i = 0; i < v.s->len;) {
            size_t start = i;
            utf8_next(v.s->s, v.s->len, &i);
            jvec_push(&r->arena, &out, str_v(r, v.s->s + start, i - start));
        }
        return list_of(r, &out, 0);
    case JV_UNDEF: return list_of(r, &out, 0);
    default: jr_fail(r, r->line, "'%s' object is not iterable", jv_type_name(v));
    }
}

// len(v), as Python's (code points of a str).
static int64_t length(jrender *r, jv v) {
    switch (v.t) {
    case JV_STR: return (int64_t)utf8_len(v.s->s, v.s->len);
    case JV_LIST:
        if (v.flags & JVF_GEN) jr_fail(r, r->line, "object of type 'generator' has no len()");
        return (int64_t)v.l->n;
    case JV_DICT: return (int64_t)v.d->n;
    case JV_UNDEF: return 0;
    default: jr_fail(r, r->line, "object of type '%s' has no len()", jv_type_name(v));
    }
}

// ---- text ---------------------------------------------------------------------------------------

// Python's strip / lstrip / rstrip: whitespace, or any code point of chars.
static jv strip(jrender *r, const jstr *s, const jstr *chars, int left, int right) {
    size_t b = 0, e = s->len;
    for (;;) {  // from the left
        if (!left || b >= e) break;
        size_t i = b;
        uint32_t c = utf8_next(s->s, e, &i);
        int hit = chars ? memmem(chars->s, chars->len, s->s + b, i - b) != NULL : py_isspace(c);
        if (!hit) break;
        b = i;
    }
    while (right && e > b) {
        size_t start = e - 1;
        while (start > b && ((unsigned char)s->s[start] & 0xc0) == 0x80) start--;
        size_t i = start;
        uint32_t c = utf8_next(s->s, e, &i);
        int hit = chars ? memmem(chars->s, chars->len, s->s + start, e - start) != NULL : py_isspace(c);
        if (!hit) break;
        e = start;
    }
    return str_v(r, s->s + b, e - b);
}

// One code point in upper (up) or lower case, as Python maps it; the few
// that Python maps to several code points, or by context, are refused.
static void put_case(jrender *r, jbuf *b, uint32_t c, int up) {
    if (c < 0x80) {
        char ch = (char)(up ? toupper((int)c) : tolower((int)c));
        jb_put(&r->arena, b, &ch, 1);
        return;
    }
    if (up && c == 0xdf) { jb_puts(&r->arena, b, "SS"); return; }
    if (!up && c == 0x130) { jb_puts(&r->arena, b, "i\xcc\x87"); return; }
    if ((up && (c == 0x149 || c == 0x1f0 || c == 0x390 || c == 0x3b0 || c == 0x587 || (c >= 0x1e96 && c <= 0x1e9a) ||
                (c >= 0x1f80 && c <= 0x1fff) || (c >= 0xfb00 && c <= 0xfb17))) || (!up && c == 0x3a3))
        jr_fail(r, r->line, "case mapping of U+%04X is not supported", c);
    if (!r->locale) r->locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (!r->locale) jr_fail(r, r->line, "case mapping beyond ASCII needs the C.UTF-8 locale");
    utf8_put(&r->arena, b, (uint32_t)(up ? towupper_l((wint_t)c, r->locale) : towlower_l((wint_t)c, r->locale)));
}

static int is_cased_letter(jrender *r, uint32_t c) {
    if (c < 0x80) return isalpha((int)c);
    if (!r->locale) r->locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    return r->locale && (iswupper_l((wint_t)c, r->locale) || iswlower_l((wint_t)c, r->locale));
}

enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_PY_TITLE, CASE_JINJA_TITLE };

// str.upper(), lower(), capitalize(), title(), and jinja2's title filter
// (words start after - space ( { [ <).
static jv change_case(jrender *r, const jstr *s, int how) {
    jbuf b = {0};
    jb_put(&r->arena, &b, "", 0);
    int start = 1;  // at a word start (title) or the string's start (capitalize)
    for (size_t i = 0; i < s->len;) {
        uint32_t c = utf8_next(s->s, s->len, &i);
        int up = how == CASE_UPPER || ((how == CASE_CAPITALIZE || how == CASE_PY_TITLE || how == CASE_JINJA_TITLE) && start);
        put_case(r, &b, c, up);
        if (how == CASE_CAPITALIZE) start = 0;
        else if (how == CASE_PY_TITLE) start = !is_cased_letter(r, c);
        else if (how == CASE_JINJA_TITLE) start = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c);
    }
    return jv_str(jb_str(&r->arena, &b));
}

// str.replace(old, new, count): with an empty old, new goes between the code points.
static jv replace(jrender *r, const jstr *s, const jstr *old, const jstr *new, int64_t count) {
    jbuf b = {0};
    jb_put(&r->arena, &b, "", 0);
    size_t i = 0;
    for (int64_t k = 0; count < 0 || k < count; k++) {
        if (!old->len) {
            jb_put(&r->arena, &b, new->s, new->len);
            if (i >= s->len) { i = s->len + 1; break; }
            size_t j = i;
            utf8_next(s->s, s->len, &j);
            jb_put(&r->arena, &b, s->s + i, j - i);
            i = j;
            continue;
        }
        const char *hit = i <= s->len ? memmem(s->s + i, s->len - i, old->s, old->len) : NULL;
        if (!hit) break;
        jb_put(&r->arena, &b, s->s + i, (size_t)(hit - s->s) - i);
        jb_put(&r->arena, &b, new->s, new->len);
        i = (size_t)(hit - s->s) + old->len;
        jr_step(r);
    }
    if (i < s->len) jb_put(&r->arena, &b, s->s + i, s->len - i);
    return jv_str(jb_str(&r->arena, &b));
}

// str.split(sep, maxsplit) and rsplit (from the right).
static jv split(jrender *r, const jstr *s, const jstr *sep, int64_t maxsplit, int from_right) {
    jvec out = {0};
    if (sep && !sep->len) jr_fail(r, r->line, "empty separator");
    if (!sep) {  // runs of whitespace, no empty strings
        size_t *starts = ja_alloc(&r->arena, sizeof *starts * (s->len + 1)), *ends = ja_alloc(&r->arena, sizeof *ends * (s->len + 1));
        size_t nw = 0;
        for (size_t i = 0; i < s->len;) {
            size_t j = i;
            if (py_isspace(utf8_next(s->s, s->len, &j))) { i = j; continue; }
            starts[nw] = i;
            while (i < s->len) {
                j = i;
                if (py_isspace(utf8_next(s->s, s->len, &j))) break;
                i = j;
            }
            ends[nw++] = i;
        }
        if (maxsplit < 0 || (size_t)maxsplit + 1 >= nw) {
            for (size_t k = 0; k < nw; k++) jvec_push(&r->arena, &out, str_v(r, s->s + starts[k], ends[k] - starts[k]));
        } else if (!from_right) {
            for (int64_t k = 0; k < maxsplit; k++) jvec_push(&r->arena, &out, str_v(r, s->s + starts[k], ends[k] - starts[k]));
            jv rest = strip(r, js_new(&r->arena, s->s + starts[maxsplit], s->len - starts[maxsplit]), NULL, 0, 1);
            jvec_push(&r->arena, &out, rest);
        } else {
            size_t first = nw - (size_t)maxsplit;
            jvec_push(&r->arena, &out, strip(r, js_new(&r->arena, s->s, ends[first - 1]), NULL, 1, 0));
            for (size_t k = first; k < nw; k++) jvec_push(&r->arena, &out, str_v(r, s->s + starts[k], ends[k] - starts[k]));
        }
        return list_of(r, &out, 0);
    }
    jvec rev = {0};  // rsplit: pieces from the right, reversed at the end
    size_t prev = 0, end = s->len;
    for (int64_t k = 0; maxsplit < 0 || k < maxsplit; k++) {
        jr_step(r);
        if (!from_right) {
            const char *hit = memmem(s->s + prev, s->len - prev, sep->s, sep->len);
            if (!hit) break;
            jvec_push(&r->arena, &out, str_v(r, s->s + prev, (size_t)(hit - s->s) - prev));
            prev = (size_t)(hit - s->s) + sep->len;
        } else {
            size_t at = end >= sep->len ? end - sep->len + 1 : 0;
            while (at-- > 0 && memcmp(s->s + at, sep->s, sep->len)) {}
            if (at == (size_t)-1) break;
            jvec_push(&r->arena, &rev, str_v(r, s->s + at + sep->len, end - at - sep->len));
            end = at;
        }
    }
    if (!from_right) {
        jvec_push(&r->arena, &out, str_v(r, s->s + prev, s->len - prev));
        return list_of(r, &out, 0);
    }
    jvec_push(&r->arena, &out, str_v(r, s->s, end));
    for (size_t k = rev.n; k-- > 0;) jvec_push(&r->arena, &out, rev.v[k]);
    return list_of(r, &out, 0);
}

// str.format with {} / {0} / {name} fields and {{ }}; format specs and
// conversions are refused.
static jv format(jrender *r, const jstr *fmt, const jargs *a) {
    jbuf b = {0};
    jb_put(&r->arena, &b, "", 0);
    int auto_index = 0;
    for (size_t i = 0; i < fmt->len; i++) {
        char c = fmt->s[i];
        if ((c == '{' || c == '}') && i + 1 < fmt->len && fmt->s[i + 1] == c) {
            jb_put(&r->arena, &b, &c, 1);
            i++;
            continue;
        }
        if (c == '}') jr_fail(r, r->line, "single '}' encountered in format string");
        if (c != '{') {
            jb_put(&r->arena, &b, &c, 1);
            continue;
        }
        const char *close = memchr(fmt->s + i, '}', fmt->len - i);
        if (!close) jr_fail(r, r->line, "single '{' encountered in format string");
        const char *field = fmt->s + i + 1;
        size_t n = (size_t)(close - field);
        if (memchr(field, ':', n) || memchr(field, '!', n) || memchr(field, '.', n) || memchr(field, '[', n))
            jr_fail(r, r->line, "str.format: only plain {} fields are supported");
        jv v = jv_undef(NULL);
        if (n == 0 || isdigit((unsigned char)field[0])) {
            long k = n ? strtol(field, NULL, 10) : auto_index++;
            if (k >= a->n) jr_fail(r, r->line, "Replacement index %ld out of range for positional args tuple", k);
            v = a->v[k];
        } else {
            int found = 0;
            for (int k = 0; k < a->n_kw && !found; k++)
                if (strlen(a->kw[k].name) == n && !memcmp(a->kw[k].name, field, n)) v = a->kw[k].val, found = 1;
            if (!found) jr_fail(r, r->line, "str.format: no argument '%.*s'", (int)n, field);
        }
        jv_str_to(r, &b, v);
        i = (size_t)(close - fmt->s);
    }
    return jv_str(jb_str(&r->arena, &b));
}

// startswith / endswith with a str or a tuple of str.
static int affix(jrender *r, const jstr *s, jv what, int end) {
    if (what.t == JV_LIST && (what.flags & JVF_TUPLE)) {
        for (size_t i = 0; i < what.l->n; i++)
            if (affix(r, s, what.l->v[i], end)) return 1;
        return 0;
    }
    const jstr *x = need_str(r, what, end ? "endswith's argument" : "startswith's argument");
    return x->len <= s->len && !memcmp(s->s + (end ? s->len - x->len : 0), x->s, x->len);
}

static jv str_join(jrender *r, const jstr *sep, jv items) {
    jv l = jl_iterable(r, items);
    jbuf b = {0};
    jb_put(&r->arena, &b, "", 0);
    for (size_t i = 0; i < l.l->n; i++) {
        if (i) jb_put(&r->arena, &b, sep->s, sep->len);
        if (l.l->v[i].t != JV_STR)
            jr_fail(r, r->line, "sequence item %zu: expected str instance, %s found", i, jv_type_name(l.l->v[i]));
        jb_put(&r->arena, &b, l.l->v[i].s->s, l.l->v[i].s->len);
    }
    return jv_str(jb_str(&r->arena, &b));
}

static int64_t find(const jstr *s, const jstr *sub, int from_right) {
    if (sub->len > s->len) return -1;
    for (size_t k = 0; k <= s->len - sub->len; k++) {
        size_t at = from_right ? s->len - sub->len - k : k;
        if (!memcmp(s->s + at, sub->s, sub->len)) return (int64_t)utf8_len(s->s, at);
    }
    return -1;
}

static jv str_method(jrender *r, jv self, const jargs *a);
static jv dict_method(jrender *r, jv self, const jargs *a);
static jv list_method(jrender *r, jv self, const jargs *a);
static jv loop_method(jrender *r, jv self, const jargs *a);

// The method being called is the bound function's name: self is a list [object, name].
static const char *method_name(jv self) { return self.l->v[1].s->s; }

static jv str_method_plain(jrender *r, jv self, const jargs *a);

// Markup's methods escape their arguments and return Markup: only those
// without arguments are taken, their str results marked safe again.
static jv str_method(jrender *r, jv self, const jargs *a) {
    if (!(self.l->v[0].flags & JVF_SAFE)) return str_method_plain(r, self, a);
    if (a->n || a->n_kw) jr_fail(r, r->line, "str.%s with arguments on a |safe string is not supported", method_name(self));
    jv v = str_method_plain(r, self, a);
    if (v.t == JV_STR) v.flags = JVF_SAFE;
    return v;
}

static jv str_method_plain(jrender *r, jv self, const jargs *a) {
    const jstr *s = self.l->v[0].s;
    const char *m = method_name(self);
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        BIND(m, "chars");
        jv chars = arg_or(&p, 0, jv_none());
        return strip(r, s, chars.t == JV_NONE ? NULL : need_str(r, chars, "chars"), m[0] != 'r', m[0] != 'l');
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        BIND(m, "sep", "maxsplit");
        jv sep = arg_or(&p, 0, jv_none());
        return split(r, s, sep.t == JV_NONE ? NULL : need_str(r, sep, "sep"), need_int(r, arg_or(&p, 1, jv_int(-1)), "maxsplit"),
                     m[0] == 'r');
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        BIND(m, "prefix");
        if (!p.given[0]) jr_fail(r, r->line, "%s takes exactly one argument", m);
        return jv_bool(affix(r, s, p.v[0], m[0] == 'e'));
    }
    if (!strcmp(m, "upper") || !strcmp(m, "lower") || !strcmp(m, "capitalize") || !strcmp(m, "title")) {
        BIND(m);
        (void)p;
        if (!strcmp(m, "capitalize"))  // the first code point upper, the rest lower
            return change_case(r, jv_to_str(r, change_case(r, s, CASE_LOWER)), CASE_CAPITALIZE);
        if (!strcmp(m, "title")) return change_case(r, jv_to_str(r, change_case(r, s, CASE_LOWER)), CASE_PY_TITLE);
        return change_case(r, s, m[0] == 'u' ? CASE_UPPER : CASE_LOWER);
    }
    if (!strcmp(m, "replace")) {
        BIND(m, "old", "new", "count");
        if (!p.given[1]) jr_fail(r, r->line, "replace expected at least 2 arguments");
        return replace(r, s, need_str(r, p.v[0], "old"), need_str(r, p.v[1], "new"), need_int(r, arg_or(&p, 2, jv_int(-1)), "count"));
    }
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "count")) {
        BIND(m, "sub");
        const jstr *sub = need_str(r, arg_or(&p, 0, jv_none()), "sub");
        if (m[0] != 'c') return jv_int(find(s, sub, m[0] == 'r'));
        if (!sub->len) return jv_int((int64_t)utf8_len(s->s, s->len) + 1);
        int64_t k = 0;
        for (const char *q = s->s; (q = memmem(q, s->len - (size_t)(q - s->s), sub->s, sub->len)); q += sub->len) k++;
        return jv_int(k);
    }
    if (!strcmp(m, "format")) return format(r, s, a);
    if (!strcmp(m, "join")) {
        BIND(m, "iterable");
        return str_join(r, s, arg_or(&p, 0, jv_undef(NULL)));
    }
    if (!strcmp(m, "splitlines")) {
        BIND(m);
        (void)p;
        jvec out = {0};
        size_t start = 0;
        for (size_t i = 0; i < s->len;) {
            size_t j = i;
            uint32_t c = utf8_next(s->s, s->len, &j);
            if (c == '\n' || c == '\r' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e) || c == 0x85 || c == 0x2028 || c == 0x2029) {
                jvec_push(&r->arena, &out, str_v(r, s->s + start, i - start));
                if (c == '\r' && j < s->len && s->s[j] == '\n') j++;
                start = j;
            }
            i = j;
        }
        if (start < s->len) jvec_push(&r->arena, &out, str_v(r, s->s + start, s->len - start));
        return list_of(r, &out, 0);
    }
    if (!strcmp(m, "isdigit") || !strcmp(m, "isalpha") || !strcmp(m, "isalnum") || !strcmp(m, "isspace")) {
        BIND(m);
        (void)p;
        int ok = s->len > 0;
        for (size_t i = 0; i < s->len && ok;) {
            uint32_t c = utf8_next(s->s, s->len, &i);
            if (c >= 0x80 && m[2] != 's') jr_fail(r, r->line, "str.%s of non-ASCII text is not supported", m);
            ok = m[2] == 'd' ? isdigit((int)c) : m[2] == 's' ? py_isspace(c) : m[4] == 'h' ? isalpha((int)c) : isalnum((int)c);
        }
        return jv_bool(ok);
    }
    jr_fail(r, r->line, "str.%s is not supported", m);
}

static jv view(jrender *r, const jdict *d, int what) {  // 0 keys, 1 values, 2 items
    jvec out = {0};
    for (size_t i = 0; i < d->n; i++) {
        if (what < 2) {
            jvec_push(&r->arena, &out, what ? d->v[i] : d->k[i]);
            continue;
        }
        jvec pair = {0};
        jvec_push(&r->arena, &pair, d->k[i]);
        jvec_push(&r->arena, &pair, d->v[i]);
        jvec_push(&r->arena, &out, list_of(r, &pair, JVF_TUPLE));
    }
    return list_of(r, &out, JVF_VIEW);
}

static jv dict_method(jrender *r, jv self, const jargs *a) {
    const jdict *d = self.l->v[0].d;
    const char *m = method_name(self);
    if (!strcmp(m, "get")) {
        BIND(m, "key", "default");
        if (!p.given[0]) jr_fail(r, r->line, "get expected at least 1 argument, got 0");
        jv v;
        return jd_find(d, p.v[0], &v) ? v : arg_or(&p, 1, jv_none());
    }
    BIND(m);
    (void)p;
    return view(r, d, !strcmp(m, "keys") ? 0 : !strcmp(m, "values") ? 1 : 2);
}

static jv list_method(jrender *r, jv self, const jargs *a) {
    jv l = self.l->v[0];
    const char *m = method_name(self);
    BIND(m, "value");
    int64_t k = 0;
    for (size_t i = 0; i < l.l->n; i++) {
        if (!jv_equal(l.l->v[i], p.v[0])) continue;
        if (m[0] == 'i') return jv_int((int64_t)i);
        k++;
    }
    if (m[0] == 'i') jr_fail(r, r->line, "list.index(x): x not in list");
    return jv_int(k);
}

// loop.cycle(a, b, ...) and loop.changed(x, ...).
static jv loop_method(jrender *r, jv self, const jargs *a) {
    jloop *loop = self.l->v[0].loop;
    if (!strcmp(method_name(self), "cycle")) {
        if (!a->n) jr_fail(r, r->line, "no items for cycling given");
        return a->v[loop->index0 % (size_t)a->n];
    }
    jvec v = {0};
    for (int i = 0; i < a->n; i++) jvec_push(&r->arena, &v, a->v[i]);
    jv now = list_of(r, &v, 0);
    int changed = !loop->changed_called || !jv_equal(now, loop->last_changed);
    loop->changed_called = 1;
    loop->last_changed = now;
    return jv_bool(changed);
}

static jv bound(jrender *r, jv obj, const char *name, jbuiltin fn) {
    jvec v = {0};
    jvec_push(&r->arena, &v, obj);
    jvec_push(&r->arena, &v, jv_str(js_cstr(&r->arena, name)));
    jfunc *f = ja_alloc(&r->arena, sizeof *f);
    f->name = name;
    f->fn = fn;
    f->self = list_of(r, &v, 0);
    return (jv){.t = JV_FUNC, .fn = f};
}

static int in_list(const char *name, const char *const *names) {
    for (; *names; names++)
        if (!strcmp(name, *names)) return 1;
    return 0;
}

// ---- attribute and item access ---------------------------------------------------------------------

static jv unsafe(jrender *r, const char *name, jv obj) {
    jv u = jr_undef_msg(r, "access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(obj));
    u.flags = JVF_UNSAFE;
    return u;
}

// getattr(obj, name) as the sandbox does it: a method or attribute first;
// else, for a dict, the item; mutating methods of lists and dicts are refused.
jv jl_getattr(jrender *r, jv obj, const char *name) {
    static const char *const str_methods[] = {"strip", "lstrip", "rstrip", "split", "rsplit", "startswith", "endswith",
        "upper", "lower", "capitalize", "title", "replace", "find", "rfind", "count", "format", "join", "splitlines",
        "isdigit", "isalpha", "isalnum", "isspace", NULL};
    static const char *const dict_methods[] = {"get", "items", "keys", "values", NULL};
    static const char *const dict_mutators[] = {"pop", "popitem", "update", "setdefault", "clear", NULL};
    static const char *const list_mutators[] = {"append", "extend", "insert", "pop", "remove", "reverse", "sort", "clear", NULL};
    if (name[0] == '_') return unsafe(r, name, obj);
    jv v;
    switch (obj.t) {
    case JV_STR:
        if (in_list(name, str_methods)) return bound(r, obj, name, str_method);
        return jr_undef_msg(r, "'str object' has no attribute '%s'", name);
    case JV_DICT:
        if (in_list(name, dict_methods)) return bound(r, obj, name, dict_method);
        if (in_list(name, dict_mutators)) return unsafe(r, name, obj);
        if (jd_find_str(obj.d, name, &v)) return v;
        return jr_undef_msg(r, "'dict object' has no attribute '%s'", name);
    case JV_NS:
        if (jd_find_str(obj.d, name, &v)) return v;
        return jr_undef_msg(r, "'Namespace' object has no attribute '%s'", name);
    case JV_LIST:
        if (!(obj.flags & (JVF_GEN | JVF_VIEW)) && (!strcmp(name, "index") || !strcmp(name, "count")))
            return bound(r, obj, name, list_method);
        if (!(obj.flags & (JVF_GEN | JVF_VIEW)) && in_list(name, list_mutators)) return unsafe(r, name, obj);
        return jr_undef_msg(r, "'%s object' has no attribute '%s'", jv_type_name(obj), name);
    case JV_LOOP: {
        const jloop *l = obj.loop;
        size_t i = l->index0, n = l->items->n;
        if (!strcmp(name, "index")) return jv_int((int64_t)i + 1);
        if (!strcmp(name, "index0")) return jv_int((int64_t)i);
        if (!strcmp(name, "revindex")) return jv_int((int64_t)(n - i));
        if (!strcmp(name, "revindex0")) return jv_int((int64_t)(n - i - 1));
        if (!strcmp(name, "first")) return jv_bool(i == 0);
        if (!strcmp(name, "last")) return jv_bool(i + 1 == n);
        if (!strcmp(name, "length")) return jv_int((int64_t)n);
        if (!strcmp(name, "depth")) return jv_int(1);
        if (!strcmp(name, "depth0")) return jv_int(0);
        if (!strcmp(name, "previtem")) return i ? l->items->v[i - 1] : jr_undef_msg(r, "there is no previous item");
        if (!strcmp(name, "nextitem")) return i + 1 < n ? l->items->v[i + 1] : jr_undef_msg(r, "there is no next item");
        if (!strcmp(name, "cycle") || !strcmp(name, "changed")) return bound(r, obj, name, loop_method);
        return jr_undef_msg(r, "'LoopContext' object has no attribute '%s'", name);
    }
    case JV_NONE: return jr_undef_msg(r, "'None' has no attribute '%s'", name);
    default: return jr_undef_msg(r, "'%s object' has no attribute '%s'", jv_type_name(obj), name);
    }
}

// Python's index normalization for a sequence of n: -1 is the last; out of range: -1.
static long seq_index(jv key, size_t n) {
    int64_t i = key.t == JV_INT ? key.i : key.b;
    if (i < 0) i += (int64_t)n;
    return i >= 0 && (uint64_t)i < n ? (long)i : -1;
}

// obj[key] as the sandbox does it: the item first, else (for a str key) the attribute.
jv jl_getitem(jrender *r, jv obj, jv key) {
    int int_key = key.t == JV_INT || key.t == JV_BOOL;
    jv v;
    if (obj.t == JV_DICT && jd_find(obj.d, key, &v)) return v;
    if (obj.t == JV_LIST && int_key && !(obj.flags & JVF_GEN)) {
        long i = seq_index(key, obj.l->n);
        if (i >= 0) return obj.l->v[i];
    }
    if (obj.t == JV_STR && int_key) {
        long i = seq_index(key, utf8_len(obj.s->s, obj.s->len));
        if (i >= 0) {
            size_t b = utf8_offset(obj.s->s, obj.s->len, (size_t)i), e = b;
            utf8_next(obj.s->s, obj.s->len, &e);
            return str_v(r, obj.s->s + b, e - b);
        }
    }
    if (key.t == JV_STR && obj.t != JV_DICT) return jl_getattr(r, obj, key.s->s);
    if (key.t == JV_STR) {
        jv a = jl_getattr(r, obj, key.s->s);
        if (a.t == JV_FUNC || (a.flags & JVF_UNSAFE)) return a;
    }
    jbuf b = {0};
    jv_repr_to(r, &b, key);
    return jr_undef_msg(r, "'%s object' has no element %s", jv_type_name(obj), b.s);
}

// Python's slice indices for a sequence of n.
static void slice_bounds(jrender *r, jv start, jv stop, jv step, size_t n, int64_t *b, int64_t *e, int64_t *st) {
    *st = step.t == JV_NONE ? 1 : need_int(r, step, "a slice step");
    if (*st == 0) jr_fail(r, r->line, "slice step cannot be zero");
    int64_t len = (int64_t)n, lo = *st > 0 ? 0 : -1, hi = *st > 0 ? len : len - 1;
    int64_t v[2] = {*st > 0 ? lo : hi, *st > 0 ? hi : lo};
    jv in[2] = {start, stop};
    for (int k = 0; k < 2; k++) {
        if (in[k].t == JV_NONE) continue;
        int64_t x = need_int(r, in[k], "a slice index");
        if (x < 0) x += len;
        v[k] = x < lo ? lo : x > hi ? hi : x;
    }
    *b = v[0], *e = v[1];
}

jv jl_slice(jrender *r, jv obj, jv start, jv stop, jv step) {
    int64_t b, e, st;
    if (obj.t == JV_STR) {
        size_t n = utf8_len(obj.s->s, obj.s->len);
        slice_bounds(r, start, stop, step, n, &b, &e, &st);
        if (st == 1) {
            size_t ob = b < e ? utf8_offset(obj.s->s, obj.s->len, (size_t)b) : 0;
            size_t oe = b < e ? utf8_offset(obj.s->s, obj.s->len, (size_t)e) : 0;
            return str_v(r, obj.s->s + ob, oe - ob);
        }
        jv chars = jl_iterable(r, obj);
        jbuf out = {0};
        jb_put(&r->arena, &out, "", 0);
        for (int64_t i = b; st > 0 ? i < e : i > e; i += st) jb_put(&r->arena, &out, chars.l->v[i].s->s, chars.l->v[i].s->len);
        return jv_str(jb_str(&r->arena, &out));
    }
    if (obj.t != JV_LIST || (obj.flags & JVF_GEN)) jr_fail(r, r->line, "'%s' object is not subscriptable", jv_type_name(obj));
    slice_bounds(r, start, stop, step, obj.l->n, &b, &e, &st);
    jvec out = {0};
    for (int64_t i = b; st > 0 ? i < e : i > e; i += st) jvec_push(&r->arena, &out, obj.l->v[i]);
    return list_of(r, &out, obj.flags & JVF_TUPLE);
}

// ---- filters ----------------------------------------------------------------------------------------

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
static jv f_tojson(jrender *r, jv v, const jargs *a) {
    BIND("tojson", "ensure_ascii", "indent", "separators", "sort_keys");
    const jstr *indent = NULL, *item_sep = NULL, *key_sep = NULL;
    jv ind = arg_or(&p, 1, jv_none()), sep = arg_or(&p, 2, jv_none());
    if (ind.t == JV_STR) indent = ind.s;
    else if (ind.t != JV_NONE) {
        int64_t k = need_int(r, ind, "indent");
        if (k > 1000) jr_fail(r, r->line, "tojson: indent %lld is too large", (long long)k);
        jbuf b = {0};
        for (int64_t i = 0; i < k; i++) jb_put(&r->arena, &b, " ", 1);
        indent = jb_str(&r->arena, &b);
    }
    if (sep.t != JV_NONE) {
        if (sep.t != JV_LIST || (sep.flags & JVF_GEN) || sep.l->n != 2) jr_fail(r, r->line, "tojson: separators must be a pair of strings");
        item_sep = need_str(r, sep.l->v[0], "a separator");
        key_sep = need_str(r, sep.l->v[1], "a separator");
    }
    jbuf b = {0};
    jv_json_to(r, &b, v, jv_truthy(arg_or(&p, 0, jv_bool(0))), indent, item_sep, key_sep,
               jv_truthy(arg_or(&p, 3, jv_bool(0))));
    return jv_str(jb_str(&r->arena, &b));
}

// map(attribute=...) / map('filter', args...), select/reject('test', args...),
// selectattr/rejectattr('attr', 'test', args...): a generator over the items.
static jv attr_path(jrender *r, jv item, const jstr *path) {  // "a.b.0"
    const char *s = path->s;
    for (;;) {
        const char *dot = strchr(s, '.');
        size_t n = dot ? (size_t)(dot - s) : strlen(s);
        char *part = ja_alloc(&r->arena, n + 1);
        memcpy(part, s, n);
        jv key = isdigit((unsigned char)part[0]) ? jv_int(strtoll(part, NULL, 10)) : jv_str(js_cstr(&r->arena, part));
        jr_need_defined(r, item);
        item = jl_getitem(r, item, key);
        if (!dot) return item;
        s = dot + 1;
    }
}

static jargs rest_args(const jargs *a, int skip) {
    jargs rest = *a;
    rest.n = a->n > skip ? a->n - skip : 0;
    rest.v = a->v + (a->n > skip ? skip : a->n);
    return rest;
}

static jv f_map(jrender *r, jv v, const jargs *a) {
    jv items = jv_truthy(v) ? jl_iterable(r, v) : jv_list(jvec_list(&r->arena, &(jvec){0}));  // jinja2: `if value:`
    jvec out = {0};
    if (a->n_kw && !a->n) {
        BIND("map", "attribute", "default");
        const jstr *attr = need_str(r, arg_or(&p, 0, jv_none()), "map's attribute");
        for (size_t i = 0; i < items.l->n; i++) {
            jv x = attr_path(r, items.l->v[i], attr);
            jvec_push(&r->arena, &out, x.t == JV_UNDEF && p.given[1] ? p.v[1] : x);
        }
        return list_of(r, &out, JVF_GEN);
    }
    if (!a->n) jr_fail(r, r->line, "map requires a filter argument");
    const jstr *name = need_str(r, a->v[0], "map's filter name");
    jargs rest = rest_args(a, 1);
    for (size_t i = 0; i < items.l->n; i++) jvec_push(&r->arena, &out, jl_filter(r, name->s, items.l->v[i], &rest));
    return list_of(r, &out, JVF_GEN);
}

static jv f_select(jrender *r, jv v, const jargs *a, int by_attr, int keep) {
    jv items = jv_truthy(v) ? jl_iterable(r, v) : jv_list(jvec_list(&r->arena, &(jvec){0}));  // jinja2: `if value:`
    const jstr *attr = by_attr ? need_str(r, a->n ? a->v[0] : jv_none(), "the attribute") : NULL;
    int first = by_attr;
    const jstr *test = a->n > first ? need_str(r, a->v[first], "the test name") : NULL;
    jargs rest = rest_args(a, first + 1);
    jvec out = {0};
    for (size_t i = 0; i < items.l->n; i++) {
        jv x = attr ? attr_path(r, items.l->v[i], attr) : items.l->v[i];
        int ok = test ? jl_test(r, test->s, x, &rest) : jv_truthy(x);
        if (ok == keep) jvec_push(&r->arena, &out, items.l->v[i]);
    }
    return list_of(r, &out, JVF_GEN);
}

static jv f_join(jrender *r, jv v, const jargs *a) {
    BIND("join", "d", "attribute");
    jv items = jl_iterable(r, v);
    const jstr *sep = jv_to_str(r, arg_or(&p, 0, str_v(r, "", 0)));
    jbuf b = {0};
    jb_put(&r->arena, &b, "", 0);
    for (size_t i = 0; i < items.l->n; i++) {
        if (i) jb_put(&r->arena, &b, sep->s, sep->len);
        jv x = p.given[1] ? attr_path(r, items.l->v[i], jv_to_str(r, p.v[1])) : items.l->v[i];
        jv_str_to(r, &b, x);
    }
    return jv_str(jb_str(&r->arena, &b));
}

// sort keys: attribute lookup, and case folding of strings unless case_sensitive.
static jv sort_key(jrender *r, jv x, const jstr *attr, int case_sensitive) {
    if (attr) x = attr_path(r, x, attr);
    if (!case_sensitive && x.t == JV_STR) return change_case(r, x.s, CASE_LOWER);
    return x;
}

static jv sorted(jrender *r, jv items, const jstr *attr, int case_sensitive, int reverse, int by_value) {
    size_t n = items.l->n;
    jv *keys = ja_alloc(&r->arena, sizeof *keys * (n + 1)), *vals = ja_alloc(&r->arena, sizeof *vals * (n + 1));
    for (size_t i = 0; i < n; i++) {
        vals[i] = items.l->v[i];
        jv k = by_value >= 0 ? vals[i].l->v[by_value] : vals[i];
        keys[i] = sort_key(r, k, attr, case_sensitive);
    }
    for (size_t i = 1; i < n; i++)  // insertion sort: stable like Python's
        for (size_t j = i; j > 0; j--) {
            int c = jv_compare(r, keys[j - 1], keys[j]);
            if (reverse ? c >= 0 : c <= 0) break;
            jv t = keys[j]; keys[j] = keys[j - 1]; keys[j - 1] = t;
            t = vals[j]; vals[j] = vals[j - 1]; vals[j - 1] = t;
            jr_step(r);
        }
    jvec out = {vals, n, n + 1};
    return list_of(r, &out, 0);
}

static jv f_sort(jrender *r, jv v, const jargs *a) {
    BIND("sort", "reverse", "case_sensitive", "attribute");
    jv attr = arg_or(&p, 2, jv_none());
    return sorted(r, jl_iterable(r, v), attr.t == JV_NONE ? NULL : jv_to_str(r, attr),
                  jv_truthy(arg_or(&p, 1, jv_bool(0))), jv_truthy(arg_or(&p, 0, jv_bool(0))), -1);
}

static jv f_dictsort(jrender *r, jv v, const jargs *a) {
    BIND("dictsort", "case_sensitive", "by", "reverse");
    if (v.t != JV_DICT) jr_fail(r, r->line, "dictsort: expected a mapping, not %s", jv_type_name(v));
    jv by = arg_or(&p, 1, str_v(r, "key", 3));
    int pos = !strcmp(need_str(r, by, "by")->s, "key") ? 0 : !strcmp(by.s->s, "value") ? 1 : -1;
    if (pos < 0) jr_fail(r, r->line, "You can only sort by either \"key\" or \"value\"");
    return sorted(r, view(r, v.d, 2), NULL, jv_truthy(arg_or(&p, 0, jv_bool(0))), jv_truthy(arg_or(&p, 2, jv_bool(0))), pos);
}

static jv f_unique(jrender *r, jv v, const jargs *a) {
    BIND("unique", "case_sensitive", "attribute");
    jv items = jl_iterable(r, v), attr = arg_or(&p, 1, jv_none());
    int cs = jv_truthy(arg_or(&p, 0, jv_bool(0)));
    jvec out = {0}, seen = {0};
    for (size_t i = 0; i < items.l->n; i++) {
        jv k = sort_key(r, items.l->v[i], attr.t == JV_NONE ? NULL : jv_to_str(r, attr), cs);
        int dup = 0;
        for (size_t j = 0; j < seen.n && !dup; j++) dup = jv_equal(seen.v[j], k);
        if (dup) continue;
        jvec_push(&r->arena, &seen, k);
        jvec_push(&r->arena, &out, items.l->v[i]);
    }
    return list_of(r, &out, JVF_GEN);
}

static jv f_minmax(jrender *r, jv v, const jargs *a, int max) {
    BIND(max ? "max" : "min", "case_sensitive", "attribute");
    jv items = jl_iterable(r, v), attr = arg_or(&p, 1, jv_none());
    if (!items.l->n) return jr_undef_msg(r, "No aggregated item, sequence was empty.");
    jv best = items.l->v[0];
    const jstr *at = attr.t == JV_NONE ? NULL : jv_to_str(r, attr);
    int cs = jv_truthy(arg_or(&p, 0, jv_bool(0)));
    for (size_t i = 1; i < items.l->n; i++) {
        int c = jv_compare(r, sort_key(r, items.l->v[i], at, cs), sort_key(r, best, at, cs));
        if (max ? c > 0 : c < 0) best = items.l->v[i];
    }
    return best;
}

static jv f_indent(jrender *r, jv v, const jargs *a) {
    BIND("indent", "width", "first", "blank");
    jv w = arg_or(&p, 0, jv_int(4));
    const jstr *pad;
    if (w.t == JV_STR) pad = w.s;
    else {
        int64_t k = need_int(r, w, "width");
        jbuf b = {0};
        for (int64_t i = 0; i < k && i < 1000; i++) jb_put(&r->arena, &b, " ", 1);
        pad = jb_str(&r->arena, &b);
    }
    int first = jv_truthy(arg_or(&p, 1, jv_bool(0))), blank = jv_truthy(arg_or(&p, 2, jv_bool(0)));
    const jstr *s = jv_to_str(r, v);
    jbuf b = {0};
    jb_put(&r->arena, &b, "", 0);
    // jinja2: lines split on \n (a trailing newline stays); blank lines not indented unless blank
    size_t start = 0;
    for (int line = 0;; line++) {
        const char *nl = memchr(s->s + start, '\n', s->len - start);
        size_t end = nl ? (size_t)(nl - s->s) : s->len;
        int is_blank = 1;
        for (size_t i = start; i < end && is_blank;) is_blank = py_isspace(utf8_next(s->s, end, &i));
        if ((line > 0 || first) && (blank || !is_blank) && (nl || end > start || line == 0))
            jb_put(&r->arena, &b, pad->s, pad->len);
        jb_put(&r->arena, &b, s->s + start, end - start);
        if (!nl) break;
        jb_put(&r->arena, &b, "\n", 1);
        start = end + 1;
    }
    return jv_str(jb_str(&r->arena, &b));
}

static jv f_int(jrender *r, jv v, const jargs *a) {
    BIND("int", "default", "base");
    jv dflt = arg_or(&p, 0, jv_int(0));
    int64_t base = need_int(r, arg_or(&p, 1, jv_int(10)), "base");
    if (v.t == JV_INT || v.t == JV_BOOL) return jv_int(v.t == JV_INT ? v.i : v.b);
    if (v.t == JV_FLOAT) return isfinite(v.f) && fabs(v.f) < 9.2e18 ? jv_int((int64_t)v.f) : dflt;
    if (v.t != JV_STR) return dflt;
    jv t = strip(r, v.s, NULL, 1, 1);
    char *end;
    long long x = strtoll(t.s->s, &end, (int)base);
    if (t.s->len && !*end) return jv_int(x);
    double f = strtod(t.s->s, &end);
    if (t.s->len && !*end && isfinite(f) && fabs(f) < 9.2e18) return jv_int((int64_t)f);
    return dflt;
}

static jv f_float(jrender *r, jv v, const jargs *a) {
    BIND("float", "default");
    jv dflt = arg_or(&p, 0, jv_float(0));
    if (v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT) return jv_float(v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : v.b);
    if (v.t != JV_STR) return dflt;
    jv t = strip(r, v.s, NULL, 1, 1);
    char *end;
    double f = strtod(t.s->s, &end);
    return t.s->len && !*end ? jv_float(f) : dflt;
}

static jv f_first_last(jrender *r, jv v, int last) {
    if (v.t == JV_LIST && (v.flags & JVF_GEN)) {
        if (last) jr_fail(r, r->line, "'generator' object is not reversible");
        if (v.l->pos < v.l->n) return v.l->v[v.l->pos++];
        return jr_undef_msg(r, "No first item, sequence was empty.");
    }
    if (v.t == JV_DICT && last) jr_fail(r, r->line, "last of a mapping is not supported");
    jv items = jl_iterable(r, v);
    if (!items.l->n) return jr_undef_msg(r, "No %s item, sequence was empty.", last ? "last" : "first");
    return items.l->v[last ? items.l->n - 1 : 0];
}

static jv f_reverse(jrender *r, jv v) {
    if (v.t == JV_STR) {
        jv chars = jl_iterable(r, v);
        jbuf b = {0};
        jb_put(&r->arena, &b, "", 0);
        for (size_t i = chars.l->n; i-- > 0;) jb_put(&r->arena, &b, chars.l->v[i].s->s, chars.l->v[i].s->len);
        return jv_str(jb_str(&r->arena, &b));
    }
    jv items = jl_iterable(r, v);
    jvec out = {0};
    for (size_t i = items.l->n; i-- > 0;) jvec_push(&r->arena, &out, items.l->v[i]);
    return list_of(r, &out, JVF_GEN);
}

jv jl_escape(jrender *r, jv v) {
    if (v.t == JV_STR && (v.flags & JVF_SAFE)) return v;
    const jstr *s = jv_to_str(r, v);
    jbuf b = {0};
    jb_put(&r->arena, &b, "", 0);
    for (size_t i = 0; i < s->len; i++) {
        char c = s->s[i];
        const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        if (e) jb_puts(&r->arena, &b, e);
        else jb_put(&r->arena, &b, &c, 1);
    }
    jv out = jv_str(jb_str(&r->arena, &b));
    out.flags = JVF_SAFE;
    return out;
}

static jv f_items(jrender *r, jv v) {
    if (v.t == JV_UNDEF) return jv_list(jvec_list(&r->arena, &(jvec){0}));
    if (v.t != JV_DICT) jr_fail(r, r->line, "Can only get item pairs from a mapping.");
    jv l = view(r, v.d, 2);
    l.flags = JVF_GEN;
    return l;
}

static jv f_sum(jrender *r, jv v, const jargs *a) {
    BIND("sum", "attribute", "start");
    jv items = jl_iterable(r, v), total = arg_or(&p, 1, jv_int(0)), attr = arg_or(&p, 0, jv_none());
    for (size_t i = 0; i < items.l->n; i++) {
        jv x = attr.t == JV_NONE ? items.l->v[i] : attr_path(r, items.l->v[i], jv_to_str(r, attr));
        int both_int = (total.t == JV_INT || total.t == JV_BOOL) && (x.t == JV_INT || x.t == JV_BOOL);
        int64_t s;
        if (both_int && !__builtin_add_overflow(total.t == JV_INT ? total.i : total.b, x.t == JV_INT ? x.i : x.b, &s)) total = jv_int(s);
        else if ((total.t == JV_INT || total.t == JV_FLOAT || total.t == JV_BOOL) && (x.t == JV_INT || x.t == JV_FLOAT || x.t == JV_BOOL))
            total = jv_float((total.t == JV_FLOAT ? total.f : total.t == JV_INT ? (double)total.i : total.b) +
                             (x.t == JV_FLOAT ? x.f : x.t == JV_INT ? (double)x.i : x.b));
        else jr_fail(r, r->line, "sum: unsupported operand types '%s' and '%s'", jv_type_name(total), jv_type_name(x));
    }
    return total;
}

static jv f_round(jrender *r, jv v, const jargs *a) {
    BIND("round", "precision", "method");
    int64_t prec = need_int(r, arg_or(&p, 0, jv_int(0)), "precision");
    const jstr *method = need_str(r, arg_or(&p, 1, str_v(r, "common", 6)), "method");
    double x = v.t == JV_FLOAT ? v.f : v.t == JV_INT ? (double)v.i : v.t == JV_BOOL ? v.b : NAN;
    if (isnan(x) && v.t != JV_FLOAT) jr_fail(r, r->line, "round: expected a number, not %s", jv_type_name(v));
    if (prec < -300 || prec > 300) jr_fail(r, r->line, "round: precision out of range");
    double m = pow(10, (double)prec), y = x * m;
    y = !strcmp(method->s, "floor") ? floor(y) : !strcmp(method->s, "ceil") ? ceil(y) : nearbyint(y);  // half to even
    if (strcmp(method->s, "common") && strcmp(method->s, "floor") && strcmp(method->s, "ceil"))
        jr_fail(r, r->line, "method must be common, ceil or floor");
    return jv_float(y / m);
}

// A filter that needs only the value.
static int simple_filter(jrender *r, const char *name, jv v, const jargs *a, jv *out) {
    if (a->n || a->n_kw) return 0;
    if (!strcmp(name, "length") || !strcmp(name, "count")) *out = jv_int(length(r, v));
    else if (!strcmp(name, "string")) *out = v.t == JV_STR ? v : jv_str(jv_to_str(r, v));  // a Markup stays one
    else if (!strcmp(name, "upper")) *out = change_case(r, jv_to_str(r, v), CASE_UPPER);
    else if (!strcmp(name, "lower")) *out = change_case(r, jv_to_str(r, v), CASE_LOWER);
    else if (!strcmp(name, "capitalize")) *out = change_case(r, jv_to_str(r, change_case(r, jv_to_str(r, v), CASE_LOWER)), CASE_CAPITALIZE);
    else if (!strcmp(name, "title")) *out = change_case(r, jv_to_str(r, change_case(r, jv_to_str(r, v), CASE_LOWER)), CASE_JINJA_TITLE);
    else if (!strcmp(name, "safe")) *out = jv_str(jv_to_str(r, v)), out->flags = JVF_SAFE;
    else if (!strcmp(name, "list")) *out = jl_iterable(r, v), out->flags = 0;
    else if (!strcmp(name, "first") || !strcmp(name, "last")) *out = f_first_last(r, v, name[0] == 'l');
    else if (!strcmp(name, "items")) *out = f_items(r, v);
    else if (!strcmp(name, "reverse")) *out = f_reverse(r, v);
    else if (!strcmp(name, "escape") || !strcmp(name, "e")) *out = jl_escape(r, v);
    else if (!strcmp(name, "abs")) {
        if (v.t == JV_FLOAT) *out = jv_float(fabs(v.f));
        else *out = jv_int(llabs((long long)need_int(r, v, "abs's value")));
    } else return 0;
    return 1;
}

jv jl_filter(jrender *r, const char *name, jv v, const jargs *a) {
    jr_step(r);
    jv out;
    if (simple_filter(r, name, v, a, &out)) return out;
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        BIND(name, "default_value", "boolean");
        int use = v.t == JV_UNDEF || (jv_truthy(arg_or(&p, 1, jv_bool(0))) && !jv_truthy(v));
        return use ? arg_or(&p, 0, str_v(r, "", 0)) : v;
    }
    if (!strcmp(name, "trim")) {
        BIND(name, "chars");
        jv chars = arg_or(&p, 0, jv_none());
        jv t = strip(r, jv_to_str(r, v), chars.t == JV_NONE ? NULL : need_str(r, chars, "chars"), 1, 1);
        if (v.t == JV_STR) t.flags = v.flags & JVF_SAFE;  // Markup.strip gives a Markup
        return t;
    }
    if (!strcmp(name, "replace")) {
        BIND(name, "old", "new", "count");
        jv count = arg_or(&p, 2, jv_none());
        return replace(r, jv_to_str(r, v), jv_to_str(r, arg_or(&p, 0, jv_undef(NULL))), jv_to_str(r, arg_or(&p, 1, jv_undef(NULL))),
                       count.t == JV_NONE ? -1 : need_int(r, count, "count"));
    }
    if (!strcmp(name, "tojson")) return f_tojson(r, v, a);
    if (!strcmp(name, "join")) return f_join(r, v, a);
    if (!strcmp(name, "map")) return f_map(r, v, a);
    if (!strcmp(name, "select") || !strcmp(name, "reject")) return f_select(r, v, a, 0, name[0] == 's');
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr")) return f_select(r, v, a, 1, name[0] == 's');
    if (!strcmp(name, "sort")) return f_sort(r, v, a);
    if (!strcmp(name, "dictsort")) return f_dictsort(r, v, a);
    if (!strcmp(name, "unique")) return f_unique(r, v, a);
    if (!strcmp(name, "min") || !strcmp(name, "max")) return f_minmax(r, v, a, name[1] == 'a');
    if (!strcmp(name, "indent")) return f_indent(r, v, a);
    if (!strcmp(name, "int")) return f_int(r, v, a);
    if (!strcmp(name, "float")) return f_float(r, v, a);
    if (!strcmp(name, "sum")) return f_sum(r, v, a);
    if (!strcmp(name, "round")) return f_round(r, v, a);
    if (!strcmp(name, "attr")) {
        BIND(name, "name");
        return jl_getattr(r, v, need_str(r, arg_or(&p, 0, jv_none()), "attr's name")->s);
    }
    static const char *const known[] = {"length", "count", "string", "upper", "lower", "capitalize", "title", "safe",
        "list", "first", "last", "items", "reverse", "escape", "e", "abs", NULL};
    if (in_list(name, known)) jr_fail(r, r->line, "filter '%s' takes no arguments", name);
    jr_fail(r, r->line, "No filter named '%s' found.", name);
}

// ---- tests -----------------------------------------------------------------------------------------------

static int t_compare(jrender *r, const char *name, jv v, jv other) {
    static const char *const eq[] = {"eq", "equalto", "==", NULL}, *const ne[] = {"ne", "!=", NULL},
        *const lt[] = {"lt", "lessthan", "<", NULL}, *const le[] = {"le", "<=", NULL},
        *const gt[] = {"gt", "greaterthan", ">", NULL}, *const ge[] = {"ge", ">=", NULL};
    if (in_list(name, eq)) return jv_equal(v, other);
    if (in_list(name, ne)) return !jv_equal(v, other);
    int c = 0;
    if (in_list(name, lt)) return (c = jv_compare(r, v, other)) < 0;
    if (in_list(name, le)) return jv_compare(r, v, other) <= 0;
    if (in_list(name, gt)) return jv_compare(r, v, other) > 0;
    if (in_list(name, ge)) return jv_compare(r, v, other) >= 0;
    if (!strcmp(name, "in")) {
        if (other.t == JV_STR) return v.t == JV_STR && memmem(other.s->s, other.s->len, v.s->s, v.s->len) != NULL;
        if (other.t == JV_DICT) { jv x; return jd_find(other.d, v, &x); }
        jv items = jl_iterable(r, other);
        for (size_t i = 0; i < items.l->n; i++)
            if (jv_equal(items.l->v[i], v)) return 1;
        return 0;
    }
    if (!strcmp(name, "sameas")) return v.t == other.t && (v.t == JV_NONE || v.t == JV_UNDEF || (v.t == JV_BOOL && v.b == other.b) ||
                                                          (v.t != JV_BOOL && jv_equal(v, other) && v.t >= JV_LIST));
    if (!strcmp(name, "divisibleby")) {
        int64_t d = need_int(r, other, "divisibleby's argument");
        if (!d) jr_fail(r, r->line, "integer division or modulo by zero");
        return need_int(r, v, "the value") % d == 0;
    }
    return -1;
}

int jl_test(jrender *r, const char *name, jv v, const jargs *a) {
    jr_step(r);
    int t = v.t;
    if (a->n == 1 && !a->n_kw) {
        int c = t_compare(r, name, v, a->v[0]);
        if (c >= 0) return c;
    }
    if (a->n || a->n_kw) jr_fail(r, r->line, "test '%s' does not take these arguments", name);
    if (!strcmp(name, "defined")) return t != JV_UNDEF;
    if (!strcmp(name, "undefined")) return t == JV_UNDEF;
    if (!strcmp(name, "none")) return t == JV_NONE;
    if (!strcmp(name, "string")) return t == JV_STR;
    if (!strcmp(name, "mapping")) return t == JV_DICT;
    if (!strcmp(name, "iterable")) return t == JV_STR || t == JV_LIST || t == JV_DICT || t == JV_UNDEF || t == JV_LOOP;
    if (!strcmp(name, "sequence")) return t == JV_STR || (t == JV_LIST && !(v.flags & JVF_GEN)) || t == JV_DICT || t == JV_UNDEF;
    if (!strcmp(name, "number")) return t == JV_INT || t == JV_FLOAT || t == JV_BOOL;
    if (!strcmp(name, "integer")) return t == JV_INT;
    if (!strcmp(name, "float")) return t == JV_FLOAT;
    if (!strcmp(name, "boolean")) return t == JV_BOOL;
    if (!strcmp(name, "true")) return t == JV_BOOL && v.b;
    if (!strcmp(name, "false")) return t == JV_BOOL && !v.b;
    if (!strcmp(name, "callable")) return t == JV_FUNC || t == JV_UNDEF;
    if (!strcmp(name, "odd") || !strcmp(name, "even")) return (need_int(r, v, "the value") & 1) == (name[0] == 'o');
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {  // str.islower(): cased letters, all in that case
        const jstr *s = jv_to_str(r, v);
        int cased = 0;
        for (size_t i = 0; i < s->len; i++) {
            unsigned char c = (unsigned char)s->s[i];
            if (c >= 0x80) jr_fail(r, r->line, "test '%s' of non-ASCII text is not supported", name);
            if (isalpha(c)) {
                cased = 1;
                if (name[0] == 'l' ? isupper(c) : islower(c)) return 0;
            }
        }
        return cased;
    }
    if (!strcmp(name, "escaped")) return 0;
    static const char *const two[] = {"eq", "equalto", "==", "ne", "!=", "lt", "lessthan", "<", "le", "<=", "gt",
        "greaterthan", ">", "ge", ">=", "in", "sameas", "divisibleby", NULL};
    if (in_list(name, two)) jr_fail(r, r->line, "test '%s' needs one argument", name);
    jr_fail(r, r->line, "No test named '%s' found.", name);
}

// ---- globals ---------------------------------------------------------------------------------------------

static jv g_range(jrender *r, jv self, const jargs *a) {
    (void)self;
    if (a->n_kw || a->n < 1 || a->n > 3) jr_fail(r, r->line, "range expected 1 to 3 integer arguments");
    int64_t start = 0, stop, step = 1;
    if (a->n == 1) stop = need_int(r, a->v[0], "range's argument");
    else start = need_int(r, a->v[0], "range's argument"), stop = need_int(r, a->v[1], "range's argument");
    if (a->n == 3) step = need_int(r, a->v[2], "range's step");
    if (!step) jr_fail(r, r->line, "range() arg 3 must not be zero");
    double count = ceil(((double)stop - (double)start) / (double)step);
    if (count > 100000) jr_fail(r, r->line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    jvec out = {0};
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) jvec_push(&r->arena, &out, jv_int(i));
    return list_of(r, &out, 0);
}

static jv g_namespace(jrender *r, jv self, const jargs *a) {
    (void)self;
    jdict *d = jd_new(&r->arena);
    if (a->n > 1) jr_fail(r, r->line, "namespace takes at most one positional argument");
    if (a->n) {
        if (a->v[0].t != JV_DICT) jr_fail(r, r->line, "namespace's argument must be a mapping");
        for (size_t i = 0; i < a->v[0].d->n; i++) jd_set(&r->arena, d, a->v[0].d->k[i], a->v[0].d->v[i]);
    }
    for (int k = 0; k < a->n_kw; k++) jd_set(&r->arena, d, jv_str(js_cstr(&r->arena, a->kw[k].name)), a->kw[k].val);
    return (jv){.t = JV_NS, .d = d};
}

static jv g_dict(jrender *r, jv self, const jargs *a) {
    jv ns = g_namespace(r, self, a);
    return jv_dict(ns.d);
}

static jv g_raise_exception(jrender *r, jv self, const jargs *a) {
    (void)self;
    jr_fail(r, r->line, "%s", a->n ? jv_to_str(r, a->v[0])->s : "raise_exception called");
}

static jv g_strftime_now(jrender *r, jv self, const jargs *a) {
    (void)self;
    BIND("strftime_now", "format");
    const jstr *fmt = need_str(r, arg_or(&p, 0, jv_none()), "strftime_now's format");
    if (fmt->len > 256) jr_fail(r, r->line, "strftime_now: the format is too long");
    struct tm tm;
    if (!localtime_r(&r->lim.now, &tm)) jr_fail(r, r->line, "strftime_now: the clock is out of range");
    char out[4096];
    size_t n = strftime(out, sizeof out, fmt->s, &tm);
    if (!n && fmt->len) jr_fail(r, r->line, "strftime_now: the date is too long");
    return str_v(r, out, n);
}

jv jl_global(jrender *r, const char *name) {
    static const struct { const char *name; jbuiltin fn; } globals[] = {
        {"range", g_range}, {"namespace", g_namespace}, {"dict", g_dict},
        {"raise_exception", g_raise_exception}, {"strftime_now", g_strftime_now},
    };
    for (size_t i = 0; i < sizeof globals / sizeof *globals; i++)
        if (!strcmp(name, globals[i].name)) {
            jfunc *f = ja_alloc(&r->arena, sizeof *f);
            f->name = globals[i].name;
            f->fn = globals[i].fn;
            return (jv){.t = JV_FUNC, .fn = f};
        }
    return jv_undef(NULL);
}
