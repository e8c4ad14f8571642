// json_schema.c — see json_schema.h. Each subschema becomes a GBNF rule
// (r1, r2, ...) written to the output as it is compiled; the generic JSON
// rules (value, object, array, string, number, ...) come first.
#include "json_schema.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define JS_MAX_DEPTH 64      // nested subschemas
#define JS_MAX_DIGITS 18     // integers compiled exactly (int64 without overflow)

static const char BASE_RULES[] =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( string ws \":\" ws value ws ( \",\" ws string ws \":\" ws value ws )* )? \"}\"\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    // a JSON string character that needs no escape: what a regex's . and classes may produce
    "plainchar ::= [^\"\\\\\\x7F\\x00-\\x1F]\n";

typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

typedef struct {
    sbuf out;        // the rules so far
    int n_rules;
    json_t *root;    // the whole schema ($ref "#...")
    json_t *refs;    // $ref string -> rule name compiled (or being compiled)
    int depth;
    char *err;
} jsc;

// ---- strings ---------------------------------------------------------------------

__attribute__((format(printf, 2, 3))) static int sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (k < 0) return -1;
    if (b->n + (size_t)k + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + (size_t)k + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) return -1;
        b->s = s, b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
    return 0;
}

// A malloc'd formatted string (NULL: out of memory).
__attribute__((format(printf, 1, 2))) static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

// s[0..n) as a GBNF string literal (quotes, backslashes and control bytes escaped).
static int gbnf_literal(sbuf *b, const char *s, size_t n) {
    int rc = sb_printf(b, "\"");
    for (size_t i = 0; i < n && !rc; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') rc = sb_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f) rc = sb_printf(b, "\\x%02x", c);
        else rc = sb_printf(b, "%c", c);
    }
    return rc || sb_printf(b, "\"");
}

// A JSON value written compactly, as a GBNF literal (const, enum).
static char *json_literal(jsc *c, const json_t *v) {
    char *txt = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    sbuf b = {0};
    if (!txt || gbnf_literal(&b, txt, strlen(txt))) {
        free(txt), free(b.s);
        errf(c->err, "out of memory");
        return NULL;
    }
    free(txt);
    return b.s;
}

// A new rule `name ::= body`; returns the name (malloc'd) and frees body.
static char *new_rule(jsc *c, char *body) {
    if (!body) return NULL;
    char *name = fmt("r%d", ++c->n_rules);
    if (!name || sb_printf(&c->out, "%s ::= %s\n", name, body)) {
        free(name), free(body);
        errf(c->err, "out of memory");
        return NULL;
    }
    free(body);
    return name;
}

static char *oom(jsc *c) {
    errf(c->err, "out of memory");
    return NULL;
}

// ---- integers: an exact grammar for a range ----------------------------------------

// Digit strings from lo to hi of the same length (lo <= hi) as GBNF
// alternatives appended to b, each prefixed by `prefix` (a sequence text).
static int same_len(sbuf *b, const char *prefix, const char *lo, const char *hi, int *first) {
    size_t n = strlen(lo);
    if (n == 0) return sb_printf(b, "%s%s\"\"", *first ? (*first = 0, "") : " | ", prefix);
    if (lo[0] == hi[0]) {
        char p[256];
        snprintf(p, sizeof p, "%s\"%c\" ", prefix, lo[0]);
        return same_len(b, p, lo + 1, hi + 1, first);
    }
    char zeros[JS_MAX_DIGITS + 2], nines[JS_MAX_DIGITS + 2], p[256];
    memset(zeros, '0', n - 1), memset(nines, '9', n - 1);
    zeros[n - 1] = nines[n - 1] = 0;
    const int lo_full = !strcmp(lo + 1, zeros), hi_full = !strcmp(hi + 1, nines);
    char a = lo_full ? lo[0] : (char)(lo[0] + 1), z = hi_full ? hi[0] : (char)(hi[0] - 1);
    if (!lo_full) {
        snprintf(p, sizeof p, "%s\"%c\" ", prefix, lo[0]);
        if (same_len(b, p, lo + 1, nines, first)) return -1;
    }
    char rest[32] = "";
    if (n > 1) snprintf(rest, sizeof rest, " [0-9]{%zu}", n - 1);
    if (a <= z && sb_printf(b, "%s%s[%c-%c]%s", *first ? (*first = 0, "") : " | ", prefix, a, z, rest)) return -1;
    if (!hi_full) {
        snprintf(p, sizeof p, "%s\"%c\" ", prefix, hi[0]);
        if (same_len(b, p, zeros, hi + 1, first)) return -1;
    }
    return 0;
}

static long long pow10ll(int k) {
    long long p = 1;
    while (k-- > 0) p *= 10;
    return p;
}

// Non-negative integers in [lo, hi] without leading zeros (hi < 0: no upper
// bound, up to JS_MAX_DIGITS digits), as alternatives in b.
static int nonneg_range(sbuf *b, long long lo, long long hi, int *first) {
    for (int d = 1; d <= JS_MAX_DIGITS; d++) {
        long long dlo = d == 1 ? 0 : pow10ll(d - 1), dhi = pow10ll(d) - 1;
        long long a = lo > dlo ? lo : dlo, z = hi >= 0 && hi < dhi ? hi : dhi;
        if (a > z) continue;
        if (a == dlo && z == dhi && hi < 0 && d > 1) {  // every longer length too
            if (sb_printf(b, "%s[1-9] [0-9]{%d,%d}", *first ? (*first = 0, "") : " | ", d - 1, JS_MAX_DIGITS - 1))
                return -1;
            return 0;
        }
        char x[32], y[32];
        snprintf(x, sizeof x, "%lld", a), snprintf(y, sizeof y, "%lld", z);
        if (same_len(b, "", x, y, first)) return -1;
    }
    return 0;
}

#define NO_LO LLONG_MIN
#define NO_HI LLONG_MAX

// An expression for the integers in [lo, hi] (NO_LO / NO_HI: unbounded), or
// NULL when empty (*empty set) or on error.
static char *int_range(jsc *c, long long lo, long long hi, int *empty) {
    sbuf b = {0};
    int first = 1, rc = sb_printf(&b, "(");
    *empty = 0;
    if (!rc && lo < 0) {  // negatives: "-" m for m in [max(1, -hi), -lo]
        long long mlo = hi >= 0 ? 1 : -hi, mhi = lo == NO_LO ? -1 : -lo;
        if (mhi < 0 || mlo <= mhi) {
            sbuf neg = {0};
            int f2 = 1;
            rc = nonneg_range(&neg, mlo, mhi, &f2) || sb_printf(&b, "\"-\" (%s)", neg.s ? neg.s : "\"\"");
            free(neg.s);
            first = 0;
        }
    }
    if (!rc && hi >= 0) {
        if (!first) rc = sb_printf(&b, " | ");
        first = 1;
        rc = rc || nonneg_range(&b, lo > 0 ? lo : 0, hi == NO_HI ? -1 : hi, &first);
        first = 0;
    }
    if (!rc && first) *empty = 1;
    if (rc || sb_printf(&b, ")")) return free(b.s), oom(c);
    if (*empty) return free(b.s), NULL;
    return b.s;
}

// ---- numbers ----------------------------------------------------------------------

// A numeric bound of schema s: *set when present; *excl for the exclusive
// form (the number form of draft 6+, or draft 4's boolean); the tighter of
// key and excl_key when both are numbers.
static void read_bound(const json_t *s, const char *key, const char *excl_key, int is_min, double *v, int *set,
                       int *excl) {
    const json_t *b = json_object_get(s, key), *e = json_object_get(s, excl_key);
    *set = 0, *excl = 0;
    if (json_is_number(b)) *v = json_number_value(b), *set = 1;
    if (json_is_number(e)) {
        double ev = json_number_value(e);
        if (!*set || (is_min ? ev >= *v : ev <= *v)) *v = ev, *set = 1, *excl = 1;
    }
    if (json_is_true(e) && *set) *excl = 1;
}

typedef struct {
    long long L, H;    // the integers allowed: [L, H] (NO_LO / NO_HI: unbounded)
    long long cl, fh;  // ceil(minimum), floor(maximum) whatever their exclusiveness
} num_bounds;

static int get_bounds(jsc *c, const json_t *s, num_bounds *nb) {
    double lo = 0, hi = 0;
    int has_lo, has_hi, ex_lo, ex_hi;
    read_bound(s, "minimum", "exclusiveMinimum", 1, &lo, &has_lo, &ex_lo);
    read_bound(s, "maximum", "exclusiveMaximum", 0, &hi, &has_hi, &ex_hi);
    const double lim = 9e17;
    if ((has_lo && !(fabs(lo) <= lim)) || (has_hi && !(fabs(hi) <= lim)))
        return errf(c->err, "json schema: a bound beyond +-9e17 is not supported");
    nb->cl = has_lo ? (long long)ceil(lo) : NO_LO;
    nb->fh = has_hi ? (long long)floor(hi) : NO_HI;
    nb->L = has_lo && ex_lo && floor(lo) == lo ? nb->cl + 1 : nb->cl;
    nb->H = has_hi && ex_hi && floor(hi) == hi ? nb->fh - 1 : nb->fh;
    return 0;
}

static int has_bounds(const json_t *s) {
    return json_object_get(s, "minimum") || json_object_get(s, "maximum") || json_object_get(s, "exclusiveMinimum") ||
           json_object_get(s, "exclusiveMaximum");
}

static char *gen_integer(jsc *c, const json_t *s) {
    if (!has_bounds(s)) return strdup("integer");
    num_bounds nb;
    int empty = 1;
    if (get_bounds(c, s, &nb)) return NULL;
    char *e = nb.L <= nb.H ? int_range(c, nb.L, nb.H, &empty) : NULL;
    if (!e && empty) errf(c->err, "json schema: no integer lies within the bounds");
    return e;
}

// Appends `sep` PREFIX (integers in [lo, hi]) SUFFIX to b when the range is
// not empty; *any records that something was written.
static int number_part(jsc *c, sbuf *b, const char *prefix, long long lo, long long hi, const char *suffix, int *any) {
    int empty;
    if (lo > hi) return 0;
    char *e = int_range(c, lo, hi, &empty);
    if (!e) return empty ? 0 : -1;
    int rc = sb_printf(b, "%s%s%s%s", *any ? " | " : "", prefix, e, suffix);
    *any = 1;
    free(e);
    return rc;
}

// Bounded numbers (see json_schema.h): the integers in [L, H], and decimals
// k.ddd / -m.ddd whose fraction ends in a non-zero digit, so each lies
// strictly between two integers: k in [max(ceil(min), 0), floor(max) - 1],
// m in [max(0, -floor(max)), -ceil(min) - 1]. The fraction has at most 6
// digits, which a double keeps apart from the bound.
static char *gen_number(jsc *c, const json_t *s) {
    if (!has_bounds(s)) return strdup("number");
    num_bounds nb;
    if (get_bounds(c, s, &nb)) return NULL;
    const char *frac = " \".\" [0-9]{0,5} [1-9]";
    sbuf b = {0};
    int any = 0, rc = sb_printf(&b, "(");
    rc = rc || number_part(c, &b, "", nb.L, nb.H, "", &any);
    rc = rc || number_part(c, &b, "", nb.cl > 0 ? nb.cl : 0, nb.fh == NO_HI ? NO_HI : nb.fh - 1, frac, &any);
    rc = rc || number_part(c, &b, "\"-\" ", nb.fh >= 0 ? 0 : -nb.fh, nb.cl == NO_LO ? NO_HI : -nb.cl - 1, frac, &any);
    if (rc || sb_printf(&b, ")")) {
        free(b.s);
        return c->err[0] ? NULL : oom(c);
    }
    if (!any) {
        free(b.s);
        errf(c->err, "json schema: no number lies within the bounds");
        return NULL;
    }
    return b.s;
}

// ---- regular expressions (pattern) -------------------------------------------------

typedef struct {
    const char *s, *end, *start;
    jsc *c;
} rx;

static char *rx_alt(rx *r, int depth);

static char *rx_err(rx *r, const char *what) {
    errf(r->c->err, "json schema: pattern: %s at offset %ld (quill compiles a regex subset: literals, classes, "
                    ". \\d \\w \\s, groups, |, * + ? {m,n}, ^ and $ at the ends)", what, (long)(r->s - r->start));
    return NULL;
}

// One character of the decoded string as its JSON text, as a GBNF sequence.
static int json_char(sbuf *b, uint32_t cp) {
    char u[5] = {0};
    if (cp == '"') return sb_printf(b, "\"\\\\\\\"\"");   // JSON \"
    if (cp == '\\') return sb_printf(b, "\"\\\\\\\\\"");  // JSON \\ (two backslashes)
    if (cp == '\n') return sb_printf(b, "\"\\\\n\"");
    if (cp == '\t') return sb_printf(b, "\"\\\\t\"");
    if (cp == '\r') return sb_printf(b, "\"\\\\r\"");
    if (cp < 0x20 || cp == 0x7f) return sb_printf(b, "\"\\\\u%04x\"", cp);
    if (cp < 0x80) u[0] = (char)cp;
    else if (cp < 0x800) u[0] = (char)(0xc0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63));
    else if (cp < 0x10000) u[0] = (char)(0xe0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 63)), u[2] = (char)(0x80 | (cp & 63));
    else u[0] = (char)(0xf0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 63)), u[2] = (char)(0x80 | (cp >> 6 & 63)),
         u[3] = (char)(0x80 | (cp & 63));
    return gbnf_literal(b, u, strlen(u));
}

static uint32_t rx_utf8(rx *r) {
    const unsigned char *s = (const unsigned char *)r->s;
    int n = s[0] < 0x80 ? 1 : s[0] >> 5 == 6 ? 2 : s[0] >> 4 == 14 ? 3 : 4;
    if (r->s + n > r->end) n = 1;
    uint32_t cp = n == 1 ? s[0] : s[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) cp = cp << 6 | (s[i] & 0x3f);
    r->s += n;
    return cp;
}

// Appends a code point to a GBNF class body (escaped where GBNF needs it).
static int class_cp(sbuf *b, uint32_t cp) {
    if (cp < 0x20 || cp == 0x7f || cp == ']' || cp == '\\' || cp == '-' || cp == '^' || cp == '"' || cp == '[')
        return sb_printf(b, "\\x%02x", cp);
    return sb_printf(b, cp > 0xffff ? "\\U%08x" : cp >= 0x80 ? "\\u%04x" : "%c", cp);
}

// A regex class [...] as a GBNF class limited to characters JSON writes
// unescaped (a subset of what the regex allows: always valid).
static char *rx_class(rx *r) {
    sbuf b = {0};
    int neg = 0, rc = 0;
    r->s++;
    if (r->s < r->end && *r->s == '^') neg = 1, r->s++;
    rc = sb_printf(&b, "[%s", neg ? "^\"\\\\\\x7F\\x00-\\x1F" : "");
    int first = 1;
    while (!rc && r->s < r->end && (*r->s != ']' || first)) {
        first = 0;
        if (*r->s == '\\' && r->s + 1 < r->end) {
            char e = r->s[1];
            r->s += 2;
            if (e == 'd') rc = sb_printf(&b, "0-9");
            else if (e == 'w') rc = sb_printf(&b, "a-zA-Z0-9_");
            else if (e == 's') rc = sb_printf(&b, " ");
            else if (strchr("DWSbB", e)) return free(b.s), rx_err(r, "\\D, \\W, \\S or \\b inside a class");
            else if (e == 'n' || e == 't' || e == 'r') continue;  // written escaped in JSON: left out (negated: already)
            else rc = class_cp(&b, (uint8_t)e);
            continue;
        }
        uint32_t lo = rx_utf8(r), hi = lo;
        if (r->s + 1 < r->end && *r->s == '-' && r->s[1] != ']') r->s++, hi = rx_utf8(r);
        if (hi < lo) return free(b.s), rx_err(r, "a class range with its end before its start");
        // positive classes leave out what JSON must escape
        if (!neg && hi < 0x20) continue;
        if (!neg && lo < 0x20) lo = 0x20;
        if (!neg && (lo <= '"' && hi >= '"')) {
            if (lo < '"') rc = rc || class_cp(&b, lo) || sb_printf(&b, "-") || class_cp(&b, '"' - 1);
            lo = '"' + 1;
            if (lo > hi) continue;
        }
        if (!neg && (lo <= '\\' && hi >= '\\')) {
            if (lo < '\\') rc = rc || class_cp(&b, lo) || sb_printf(&b, "-") || class_cp(&b, '\\' - 1);
            lo = '\\' + 1;
            if (lo > hi) continue;
        }
        rc = rc || class_cp(&b, lo);
        if (hi > lo) rc = rc || sb_printf(&b, "-") || class_cp(&b, hi);
    }
    if (r->s >= r->end) return free(b.s), rx_err(r, "a class not closed");
    r->s++;
    if (rc || sb_printf(&b, "]")) return free(b.s), oom(r->c);
    if (!strcmp(b.s, "[]")) return free(b.s), rx_err(r, "a class with no character JSON writes unescaped");
    return b.s;
}

static char *rx_atom(rx *r, int depth) {
    char ch = *r->s;
    sbuf b = {0};
    if (ch == '(') {
        r->s++;
        if (r->s < r->end && *r->s == '?') {
            if (r->s + 1 < r->end && r->s[1] == ':') r->s += 2;
            else return rx_err(r, "lookaround or named groups");
        }
        if (depth > JS_MAX_DEPTH) return rx_err(r, "groups nested too deep");
        char *in = rx_alt(r, depth + 1);
        if (!in) return NULL;
        if (r->s >= r->end || *r->s != ')') return free(in), rx_err(r, "expected ')'");
        r->s++;
        char *g = fmt("(%s)", in);
        free(in);
        return g ? g : oom(r->c);
    }
    if (ch == '[') return rx_class(r);
    if (ch == '.') return r->s++, strdup("plainchar");
    if (ch == '^' || ch == '$') return rx_err(r, "an anchor inside the pattern");
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{') return rx_err(r, "a quantifier with nothing before it");
    uint32_t cp;
    if (ch == '\\') {
        if (r->s + 1 >= r->end) return rx_err(r, "a trailing backslash");
        char e = r->s[1];
        r->s += 2;
        if (e == 'd') return strdup("[0-9]");
        if (e == 'w') return strdup("[a-zA-Z0-9_]");
        if (e == 's') return strdup("[ ]");
        if (e == 'D') return strdup("[^0-9\"\\\\\\x7F\\x00-\\x1F]");
        if (e == 'W') return strdup("[^a-zA-Z0-9_\"\\\\\\x7F\\x00-\\x1F]");
        if (e == 'S') return strdup("[^ \"\\\\\\x7F\\x00-\\x1F\\t\\n\\r\\x0b\\x0c]");
        if ((e >= '0' && e <= '9') || e == 'b' || e == 'B' || e == 'p' || e == 'P' || e == 'u' || e == 'x')
            return rx_err(r, "backreferences, \\b, \\p, \\u and \\x escapes");
        cp = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : (uint8_t)e;
    } else {
        cp = rx_utf8(r);
    }
    if (json_char(&b, cp)) return free(b.s), oom(r->c);
    return b.s;
}

static char *rx_seq(rx *r, int depth) {
    sbuf b = {0};
    int rc = sb_printf(&b, "(\"\"");  // an empty sequence matches the empty text
    while (!rc && r->s < r->end && *r->s != '|' && *r->s != ')') {
        char *a = rx_atom(r, depth);
        if (!a) return free(b.s), NULL;
        rc = sb_printf(&b, " %s", a);
        free(a);
        if (!rc && r->s < r->end && strchr("*+?{", *r->s)) {
            const char *q = r->s;
            if (*q == '{') {
                const char *close = memchr(q, '}', (size_t)(r->end - q));
                if (!close) return free(b.s), rx_err(r, "'{' without '}'");
                rc = sb_printf(&b, "%.*s", (int)(close - q + 1), q);
                r->s = close + 1;
            } else {
                rc = sb_printf(&b, "%c", *q);
                r->s++;
            }
            if (r->s < r->end && (*r->s == '?' || *r->s == '+')) r->s++;  // lazy / possessive: same strings
            if (r->s < r->end && strchr("*+{", *r->s)) return free(b.s), rx_err(r, "a quantifier after a quantifier");
        }
    }
    if (rc || sb_printf(&b, ")")) return free(b.s), oom(r->c);
    return b.s;
}

static char *rx_alt(rx *r, int depth) {
    sbuf b = {0};
    int rc = 0;
    for (;;) {
        char *s = rx_seq(r, depth);
        if (!s) return free(b.s), NULL;
        rc = sb_printf(&b, "%s%s", b.n ? " | " : "", s);
        free(s);
        if (rc) return free(b.s), oom(r->c);
        if (r->s < r->end && *r->s == '|') { r->s++; continue; }
        return b.s;
    }
}

static char *gen_pattern(jsc *c, const char *pat) {
    size_t n = strlen(pat);
    int head = n && pat[0] == '^', tail = n > (size_t)head && pat[n - 1] == '$' && (n < 2 || pat[n - 2] != '\\');
    rx r = {pat + head, pat + n - tail, pat, c};
    char *body = rx_alt(&r, 0);
    if (!body) return NULL;
    if (r.s != r.end) return free(body), rx_err(&r, "an unmatched ')'");
    // unanchored: the regex may match anywhere in the string
    char *e = fmt("\"\\\"\" %s(%s)%s \"\\\"\"", head ? "" : "plainchar* ", body, tail ? "" : " plainchar*");
    free(body);
    return e ? e : oom(c);
}

// ---- strings, arrays, objects ------------------------------------------------------

static long get_count(const json_t *s, const char *key, long dflt) {
    const json_t *v = json_object_get(s, key);
    return json_is_integer(v) && json_integer_value(v) >= 0 ? (long)json_integer_value(v) : dflt;
}

static char *gen_string(jsc *c, const json_t *s) {
    const json_t *pat = json_object_get(s, "pattern");
    long lo = get_count(s, "minLength", 0), hi = get_count(s, "maxLength", -1);
    if (json_is_string(pat)) {
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength")) {
            errf(c->err, "json schema: pattern together with minLength/maxLength is not supported");
            return NULL;
        }
        return gen_pattern(c, json_string_value(pat));
    }
    if (lo == 0 && hi < 0) return strdup("string");
    if (hi >= 0 && hi < lo) return errf(c->err, "json schema: maxLength < minLength"), NULL;
    if (lo > 1000 || hi > 1000) return errf(c->err, "json schema: string lengths above 1000 are not supported"), NULL;
    char *e = hi < 0 ? fmt("\"\\\"\" char{%ld,} \"\\\"\"", lo) : fmt("\"\\\"\" char{%ld,%ld} \"\\\"\"", lo, hi);
    return e ? e : oom(c);
}

static char *gen(jsc *c, json_t *s);

static char *gen_array(jsc *c, json_t *s) {
    json_t *items = json_object_get(s, "items");
    long lo = get_count(s, "minItems", 0), hi = get_count(s, "maxItems", -1);
    if (!items && lo == 0 && hi < 0) return strdup("array");
    if (hi >= 0 && hi < lo) return errf(c->err, "json schema: maxItems < minItems"), NULL;
    if (lo > 1000 || hi > 1000) return errf(c->err, "json schema: item counts above 1000 are not supported"), NULL;
    char *it = items ? gen(c, items) : strdup("value");
    if (!it) return NULL;
    char *e;
    if (hi == 0) e = fmt("\"[\" ws \"]\"");
    else if (lo == 0 && hi < 0) e = fmt("\"[\" ws ( %s ws ( \",\" ws %s ws )* )? \"]\"", it, it);
    else if (lo == 0) e = fmt("\"[\" ws ( %s ws ( \",\" ws %s ws ){0,%ld} )? \"]\"", it, it, hi - 1);
    else if (hi < 0) e = fmt("\"[\" ws %s ws ( \",\" ws %s ws ){%ld,} \"]\"", it, it, lo - 1);
    else e = fmt("\"[\" ws %s ws ( \",\" ws %s ws ){%ld,%ld} \"]\"", it, it, lo - 1, hi - 1);
    free(it);
    return e ? e : oom(c);
}

// `"name" ws ":" ws VALUE ws` for a property.
static char *member(jsc *c, const char *name, json_t *schema) {
    char *v = schema ? gen(c, schema) : strdup("value");
    if (!v) return NULL;
    json_t *js = json_string(name);
    char *key = js ? json_literal(c, js) : NULL;
    json_decref(js);
    char *m = key ? fmt("%s ws \":\" ws %s ws", key, v) : NULL;
    free(v), free(key);
    return m ? m : oom(c);
}

static int is_required(const json_t *req, const char *name) {
    size_t i;
    json_t *v;
    json_array_foreach(req, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), name)) return 1;
    return 0;
}

// Collects the members: required first (schema order), then optional, then
// the additional-property pattern (when allowed) as the last "optional"
// entry, marked repeatable.
static int object_members(jsc *c, json_t *s, char ***mem, int *n_req, int *n) {
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    const char *k;
    json_t *v;
    size_t np = json_object_size(props) + json_array_size(req) + 1;
    *mem = calloc(np, sizeof **mem);
    *n = 0;
    if (!*mem) return errf(c->err, "out of memory");
    for (int pass = 0; pass < 2; pass++) {
        json_object_foreach(props, k, v) {
            if (is_required(req, k) != !pass) continue;
            if (!((*mem)[(*n)++] = member(c, k, v))) return -1;
        }
        if (pass == 0) {  // required names the properties lack: any value
            size_t i;
            json_t *r;
            json_array_foreach(req, i, r) if (json_is_string(r) && !json_object_get(props, json_string_value(r)))
                if (!((*mem)[(*n)++] = member(c, json_string_value(r), NULL))) return -1;
            *n_req = *n;
        }
    }
    int extra = addl ? !json_is_false(addl) : !props;
    if (extra) {
        char *val = json_is_object(addl) ? gen(c, addl) : strdup("value");
        (*mem)[*n] = val ? fmt("string ws \":\" ws %s ws", val) : NULL;
        free(val);
        if (!(*mem)[(*n)++]) return -1;
    }
    return extra;
}

// The optional members from i on, each with its leading comma; the last is
// repeatable when `extra`.
static int optional_tail(sbuf *b, char **mem, int i, int n, int extra) {
    int rc = 0;
    for (int k = i; k < n && !rc; k++) rc = sb_printf(b, " ( \",\" ws %s )%c", mem[k], extra && k == n - 1 ? '*' : '?');
    return rc;
}

static char *gen_object(jsc *c, json_t *s) {
    char **mem = NULL;
    int n_req = 0, n = 0;
    int extra = object_members(c, s, &mem, &n_req, &n);
    sbuf b = {0};
    int rc = extra < 0 || sb_printf(&b, "\"{\" ws");
    if (!rc && n_req > 0) {
        for (int k = 0; k < n_req && !rc; k++) rc = sb_printf(&b, k ? " \",\" ws %s" : " %s", mem[k]);
        rc = rc || optional_tail(&b, mem, n_req, n, extra);
    } else if (!rc && n > 0) {  // nothing required: the first member present has no comma
        rc = sb_printf(&b, " (");
        for (int k = 0; k < n && !rc; k++) {
            rc = sb_printf(&b, "%s%s", k ? " | " : " ", mem[k]);
            rc = rc || optional_tail(&b, mem, extra && k == n - 1 ? k : k + 1, n, extra);
        }
        rc = rc || sb_printf(&b, " )?");
    }
    rc = rc || sb_printf(&b, " \"}\"");
    for (int k = 0; k < n; k++) free(mem[k]);
    free(mem);
    if (rc) {
        free(b.s);
        if (extra >= 0 && !c->err[0]) oom(c);
        return NULL;
    }
    return b.s;
}

// ---- the dispatcher -----------------------------------------------------------------

static json_t *resolve_ref(jsc *c, const char *ref) {
    if (!strcmp(ref, "#")) return c->root;
    const char *prefixes[] = {"#/$defs/", "#/definitions/"};
    for (int i = 0; i < 2; i++) {
        size_t k = strlen(prefixes[i]);
        if (strncmp(ref, prefixes[i], k)) continue;
        json_t *defs = json_object_get(c->root, i ? "definitions" : "$defs");
        json_t *t = json_object_get(defs, ref + k);
        if (t) return t;
    }
    errf(c->err, "json schema: $ref '%.200s' not found (quill resolves #, #/$defs/NAME, #/definitions/NAME)", ref);
    return NULL;
}

static char *gen_ref(jsc *c, const char *ref) {
    json_t *known = json_object_get(c->refs, ref);
    if (known) return strdup(json_string_value(known));
    json_t *target = resolve_ref(c, ref);
    if (!target) return NULL;
    char *name = fmt("r%d", ++c->n_rules);  // reserved before compiling: refs may recurse
    if (!name || json_object_set_new(c->refs, ref, json_string(name))) return free(name), oom(c);
    char *body = gen(c, target);
    if (!body) return free(name), NULL;
    int rc = sb_printf(&c->out, "%s ::= %s\n", name, body);
    free(body);
    if (rc) return free(name), oom(c);
    return name;
}

// ---- oneOf: branches that cannot both match -----------------------------------------
// oneOf admits a value that exactly one branch matches. Its rule is the
// alternation of the branches' rules, which is exact when no value a branch's
// rule produces is one another branch admits; that is proven below from the
// schemas (each branch's rule produces only values its schema admits), and a
// oneOf it cannot prove is an error. Proofs: the JSON types apart; const/enum
// values the other branch rejects; objects with a required property whose
// values the two branches' schemas keep apart (a discriminator), or a required
// property the other branch forbids (additionalProperties false) or lacks
// while producing no other members.

enum { T_NULL = 1, T_BOOL = 2, T_NUM = 4, T_STR = 8, T_ARR = 16, T_OBJ = 32, T_ANY = 63 };
#define ONEOF_DEPTH 16  // nested proofs ($refs may recurse)

static int value_type(const json_t *v) {
    switch (json_typeof(v)) {
    case JSON_NULL: return T_NULL;
    case JSON_TRUE: case JSON_FALSE: return T_BOOL;
    case JSON_INTEGER: case JSON_REAL: return T_NUM;  // 1 and 1.0 are one value
    case JSON_STRING: return T_STR;
    case JSON_ARRAY: return T_ARR;
    default: return T_OBJ;
    }
}

static int type_mask(const json_t *type) {
    if (json_is_array(type)) {
        int m = 0;
        size_t i;
        json_t *t;
        json_array_foreach(type, i, t) m |= type_mask(t);
        return m;
    }
    static const char *names[] = {"null", "boolean", "number", "string", "array", "object", "integer"};
    static const int bits[] = {T_NULL, T_BOOL, T_NUM, T_STR, T_ARR, T_OBJ, T_NUM};
    for (int i = 0; i < 7; i++)
        if (json_is_string(type) && !strcmp(json_string_value(type), names[i])) return bits[i];
    return T_ANY;
}

// s with its $refs followed (NULL: a $ref that is not found, with c->err set).
static json_t *deref(jsc *c, json_t *s) {
    json_t *r;
    for (int i = 0; i < ONEOF_DEPTH && json_is_object(s) && json_is_string(r = json_object_get(s, "$ref")); i++)
        s = resolve_ref(c, json_string_value(r));
    return s;
}

// Whether a and b may be the same JSON value (python-jsonschema's equality:
// numbers by value, booleans apart from numbers).
static int may_equal(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    if (json_typeof(a) != json_typeof(b)) return 0;
    const char *k;
    json_t *v;
    size_t i;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b)) return 0;
        json_array_foreach(a, i, v) if (!may_equal(v, json_array_get(b, i))) return 0;
        return 1;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b)) return 0;
        json_object_foreach(a, k, v) if (!json_object_get(b, k) || !may_equal(v, json_object_get(b, k))) return 0;
        return 1;
    }
    return json_equal(a, b);
}

// The values a const or an enum lists (NULL: neither).
static json_t *listed_values(json_t *s, json_t **one) {
    json_t *t = json_object_get(s, "const");
    if (t) {
        *one = json_pack("[O]", t);
        return *one;
    }
    t = json_object_get(s, "enum");
    return json_is_array(t) ? t : NULL;
}

// The types of the values s admits (a superset).
static int admitted_types(jsc *c, json_t *s, int depth) {
    if (!(s = deref(c, s)) || !json_is_object(s) || depth > ONEOF_DEPTH) return T_ANY;
    int m = json_object_get(s, "type") ? type_mask(json_object_get(s, "type")) : T_ANY;
    json_t *one = NULL, *vals = listed_values(s, &one), *alts, *v;
    size_t i;
    if (vals) {
        int vm = 0;
        json_array_foreach(vals, i, v) vm |= value_type(v);
        m &= vm;
    }
    json_decref(one);
    if ((alts = json_object_get(s, "anyOf")) || (alts = json_object_get(s, "oneOf"))) {
        int am = 0;
        json_array_foreach(alts, i, v) am |= admitted_types(c, v, depth + 1);
        m &= am;
    }
    return m;
}

// The types of the values s's rule produces (gen_body's order of keywords).
static int produced_types(jsc *c, json_t *s, int depth) {
    if (!(s = deref(c, s)) || !json_is_object(s) || depth > ONEOF_DEPTH) return T_ANY;
    json_t *one = NULL, *vals = listed_values(s, &one), *alts, *v;
    size_t i;
    int m = 0;
    if (vals) {
        json_array_foreach(vals, i, v) m |= value_type(v);
        return json_decref(one), m;
    }
    if ((alts = json_object_get(s, "anyOf")) || (alts = json_object_get(s, "oneOf"))) {
        json_array_foreach(alts, i, v) m |= produced_types(c, v, depth + 1);
        return m;
    }
    if (json_object_get(s, "type")) return type_mask(json_object_get(s, "type"));
    if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties")) return T_OBJ;
    return json_object_get(s, "items") ? T_ARR : T_ANY;
}

// 1 when s certainly rejects the value v.
static int rejects(jsc *c, json_t *s, json_t *v, int depth) {
    if (!(s = deref(c, s)) || !json_is_object(s) || depth > ONEOF_DEPTH) return 0;
    if (!(value_type(v) & admitted_types(c, s, depth))) return 1;
    json_t *one = NULL, *vals = listed_values(s, &one), *x, *alts;
    size_t i;
    int r = 0;
    if (vals) {
        r = 1;
        json_array_foreach(vals, i, x) if (may_equal(x, v)) r = 0;
        json_decref(one);
        if (r) return 1;
    }
    if ((alts = json_object_get(s, "anyOf")) || (alts = json_object_get(s, "oneOf"))) {
        r = json_array_size(alts) > 0;
        json_array_foreach(alts, i, x) r = r && rejects(c, x, v, depth + 1);
        if (r) return 1;
    }
    if (!json_is_object(v)) return 0;
    json_t *props = json_object_get(s, "properties"), *addl = json_object_get(s, "additionalProperties");
    json_array_foreach(json_object_get(s, "required"), i, x)
        if (json_is_string(x) && !json_object_get(v, json_string_value(x))) return 1;
    const char *k;
    json_object_foreach(v, k, x) {
        json_t *p = json_object_get(props, k);
        if (p ? rejects(c, p, x, depth + 1) : json_is_false(addl) && !json_object_get(s, "patternProperties"))
            return 1;
    }
    return 0;
}

static int excludes(jsc *c, json_t *a, json_t *b, int depth);

// a (object schema compiled by gen_object) and b: an object a's rule produces
// is one b rejects, through a required property of a.
static int objects_exclude(jsc *c, json_t *a, json_t *b, int depth) {
    json_t *pa = json_object_get(a, "properties"), *pb = json_object_get(b, "properties"), *r;
    json_t *addl_a = json_object_get(a, "additionalProperties");
    const int a_extra = addl_a ? !json_is_false(addl_a) : !pa;  // object_members' rule
    const int b_closed = json_is_false(json_object_get(b, "additionalProperties")) &&
                         !json_object_get(b, "patternProperties");
    size_t i;
    json_array_foreach(json_object_get(a, "required"), i, r) {  // members a always produces
        const char *k = json_string_value(r);
        if (!k) continue;
        json_t *sa = json_object_get(pa, k), *sb = json_object_get(pb, k);
        if (sb ? sa && excludes(c, sa, sb, depth + 1) : b_closed) return 1;
    }
    json_array_foreach(json_object_get(b, "required"), i, r) {  // members b needs that a never produces
        const char *k = json_string_value(r);
        if (k && !a_extra && !json_object_get(pa, k) && !is_required(json_object_get(a, "required"), k)) return 1;
    }
    return 0;
}

// 1 when no value a's rule produces is a value b admits.
static int excludes(jsc *c, json_t *a, json_t *b, int depth) {
    if (depth > ONEOF_DEPTH || !(a = deref(c, a)) || !(b = deref(c, b))) return 0;
    if (!json_is_object(a) || !json_is_object(b)) return 0;
    const int common = produced_types(c, a, depth) & admitted_types(c, b, depth);
    if (!common) return 1;
    json_t *one = NULL, *vals = listed_values(a, &one), *v;
    size_t i;
    int r = 1;
    if (vals) {  // a produces exactly these
        json_array_foreach(vals, i, v) r = r && rejects(c, b, v, depth + 1);
        return json_decref(one), r;
    }
    if ((vals = listed_values(b, &one))) {  // b admits at most these
        json_array_foreach(vals, i, v) r = r && rejects(c, a, v, depth + 1);
        json_decref(one);
        if (r) return 1;
    }
    if (common != T_OBJ || json_object_get(a, "anyOf") || json_object_get(a, "oneOf")) return 0;
    return objects_exclude(c, a, b, depth);
}

// 0 when oneOf's branches are pairwise exclusive; else -1 with c->err set.
static int oneof_check(jsc *c, json_t *list) {
    size_t i, j;
    json_t *a, *b;
    json_array_foreach(list, i, a) json_array_foreach(list, j, b) {
        if (i == j || excludes(c, a, b, 0)) continue;
        if (c->err[0]) return -1;  // a $ref not found
        return errf(c->err, "json schema: oneOf with overlapping branches is not supported (a value of branch %zu "
                    "may match branch %zu too; quill needs different types, distinct const/enum values, or objects "
                    "kept apart by a required property)", i, j);
    }
    return 0;
}

// anyOf / oneOf / enum / a list of types: alternatives.
static char *gen_alternatives(jsc *c, json_t *list, int literal, json_t *base) {
    sbuf b = {0};
    size_t i;
    json_t *v;
    int rc = sb_printf(&b, "(");
    json_array_foreach(list, i, v) {
        char *e;
        if (literal) {
            e = json_literal(c, v);
        } else if (base) {  // "type": [...]: the same schema with one type each
            json_t *one = json_copy(base);
            if (!one || json_object_set(one, "type", v)) return json_decref(one), free(b.s), oom(c);
            e = gen(c, one);
            json_decref(one);
        } else {
            e = gen(c, v);
        }
        if (!e) return free(b.s), NULL;
        rc = rc || sb_printf(&b, "%s%s", i ? " | " : "", e);
        free(e);
    }
    if (rc || sb_printf(&b, ")")) return free(b.s), oom(c);
    if (!strcmp(b.s, "()")) return free(b.s), errf(c->err, "json schema: an empty enum, anyOf or oneOf"), NULL;
    return b.s;
}

static char *gen_typed(jsc *c, json_t *s, const char *type) {
    if (!strcmp(type, "string")) return gen_string(c, s);
    if (!strcmp(type, "integer")) return gen_integer(c, s);
    if (!strcmp(type, "number")) return gen_number(c, s);
    if (!strcmp(type, "boolean")) return strdup("boolean");
    if (!strcmp(type, "null")) return strdup("null");
    if (!strcmp(type, "object")) return gen_object(c, s);
    if (!strcmp(type, "array")) return gen_array(c, s);
    errf(c->err, "json schema: unknown type '%.100s'", type);
    return NULL;
}

static char *gen_body(jsc *c, json_t *s) {
    if (json_is_true(s)) return strdup("value");
    if (!json_is_object(s)) return errf(c->err, "json schema: a schema must be an object or true"), NULL;
    json_t *t, *type = json_object_get(s, "type");
    if ((t = json_object_get(s, "$ref"))) {
        if (!json_is_string(t)) return errf(c->err, "json schema: $ref must be a string"), NULL;
        return gen_ref(c, json_string_value(t));
    }
    if ((t = json_object_get(s, "const"))) {
        json_t *one = json_array();
        if (!one || json_array_append(one, t)) return json_decref(one), oom(c);
        char *e = gen_alternatives(c, one, 1, NULL);
        json_decref(one);
        return e;
    }
    if ((t = json_object_get(s, "enum"))) {
        if (!json_is_array(t)) return errf(c->err, "json schema: enum must be an array"), NULL;
        return gen_alternatives(c, t, 1, NULL);
    }
    if ((t = json_object_get(s, "anyOf")) || (t = json_object_get(s, "oneOf"))) {
        if (!json_is_array(t)) return errf(c->err, "json schema: anyOf/oneOf must be an array"), NULL;
        if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf"))
            return errf(c->err, "json schema: anyOf and oneOf in one schema are not supported"), NULL;
        if (t == json_object_get(s, "oneOf") && oneof_check(c, t)) return NULL;
        return gen_alternatives(c, t, 0, NULL);
    }
    if (json_object_get(s, "allOf") || json_object_get(s, "not") || json_object_get(s, "if"))
        return errf(c->err, "json schema: allOf, not and if/then/else are not supported"), NULL;
    if (json_is_array(type)) return gen_alternatives(c, type, 0, s);
    if (json_is_string(type)) return gen_typed(c, s, json_string_value(type));
    if (type) return errf(c->err, "json schema: type must be a string or a list"), NULL;
    if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties")) return gen_object(c, s);
    if (json_object_get(s, "items")) return gen_array(c, s);
    return strdup("value");
}

// A rule for schema s; returns its name.
static char *gen(jsc *c, json_t *s) {
    if (++c->depth > JS_MAX_DEPTH) {
        errf(c->err, "json schema: nested deeper than %d", JS_MAX_DEPTH);
        c->depth--;
        return NULL;
    }
    char *body = gen_body(c, s);
    c->depth--;
    if (!body) {
        if (!c->err[0]) errf(c->err, "out of memory");
        return NULL;
    }
    if (!strchr(body, ' ') && !strchr(body, '"')) return body;  // already a name
    return new_rule(c, body);
}

int json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, char *err) {
    json_error_t je;
    err[0] = 0;
    *gbnf = NULL;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!root) return errf(err, "json schema: not JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    jsc c = {.root = root, .refs = json_object(), .err = err};
    int rc = !c.refs || sb_printf(&c.out, "%s", BASE_RULES) ? errf(err, "out of memory") : 0;
    char *top = rc ? NULL : gen(&c, root);
    if (!top) rc = -1;
    if (!rc && sb_printf(&c.out, "root ::= %s\n", top)) rc = errf(err, "out of memory");
    free(top);
    json_decref(root);
    json_decref(c.refs);
    if (rc) return free(c.out.s), -1;
    *gbnf = c.out.s;
    return 0;
}

static char *read_text(const char *path, size_t *len, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return errf(err, "cannot open '%s': %s", path, strerror(errno)), NULL;
    sbuf b = {0};
    char chunk[65536];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (sb_printf(&b, "%.*s", (int)k, chunk)) return fclose(f), free(b.s), errf(err, "out of memory"), NULL;
    int bad = ferror(f);
    fclose(f);
    if (bad) return free(b.s), errf(err, "cannot read '%s'", path), NULL;
    if (memchr(b.s ? b.s : "", 0, b.n)) return free(b.s), errf(err, "'%s' holds a NUL byte", path), NULL;
    *len = b.n;
    return b.s ? b.s : strdup("");
}

int grammar_load(grammar **out, const char *gbnf_file, const char *json_schema, char *err) {
    size_t len;
    char *text = NULL, *gbnf = NULL;
    *out = NULL;
    err[0] = 0;
    if (gbnf_file) {
        if (!(text = read_text(gbnf_file, &len, err))) return -1;
        int rc = grammar_parse(out, text, len, err);
        free(text);
        if (rc) {
            char msg[ERR_LEN];
            snprintf(msg, sizeof msg, "%s: %s", gbnf_file, err);
            memcpy(err, msg, ERR_LEN);
        }
        return rc;
    }
    const char *p = json_schema;
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    int inline_json = *p == '{' || !strcmp(p, "true");
    if (inline_json) text = strdup(json_schema), len = strlen(json_schema);
    else text = read_text(json_schema, &len, err);
    if (!text) return err[0] ? -1 : errf(err, "out of memory");
    int rc = json_schema_to_gbnf(text, len, &gbnf, err);
    if (rc && !inline_json) {
        char msg[ERR_LEN];
        snprintf(msg, sizeof msg, "%s: %s", json_schema, err);
        memcpy(err, msg, ERR_LEN);
    }
    free(text);
    if (!rc && grammar_parse(out, gbnf, strlen(gbnf), err)) {
        char msg[ERR_LEN];
        snprintf(msg, sizeof msg, "json schema: compiled to a grammar quill refuses (%s)", err);
        memcpy(err, msg, ERR_LEN);
        rc = -1;
    }
    free(gbnf);
    return rc;
}
