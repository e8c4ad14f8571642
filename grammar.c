// grammar.c — GBNF text to the compiled grammar of grammar.h, and its checks.
//
// The syntax is llama.cpp's: `name ::= alternatives` (a rule ends at a newline
// outside parentheses; a line may go on after `|` or `::=`), string literals
// "...", character classes [a-z] [^...], `.` (any character), groups ( ),
// postfix * + ? {m} {m,} {m,n}, comments from # to the end of the line, and
// the escapes \x.. \u.... \U........ \t \r \n \\ \" \[ \] in literals and
// classes. Names take letters, digits, '-' and '_'. A rule defined twice
// keeps its last definition, as llama.cpp does.
//
// Limits keep hostile text bounded: nesting depth, repetition counts and the
// total size of the compiled grammar.
#include "grammar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define G_MAX_DEPTH 128        // nested groups
#define G_MAX_REPEAT 1000      // m, n of {m,n}
#define G_MAX_ELEMS (1 << 22)  // compiled elements in all

typedef struct {
    gelem *e;
    int n, cap;
} evec;

typedef struct {
    char *name;
    evec body;      // alternatives, ALT-separated, END-terminated
    int defined;
    int first_use;  // byte offset of the first reference (for "undefined" errors)
} prule;

typedef struct {
    const char *s, *end, *start;
    prule *rules;
    int n_rules, cap_rules;
    gcharset *cs;
    int n_cs, cap_cs;
    long total;     // elements in all rule bodies
    char *err;
} parser;

// ---- errors and growth ---------------------------------------------------------

static int perr(parser *p, const char *at, const char *msg) {
    int line = 1, col = 1;
    for (const char *c = p->start; c < at && c < p->end; c++) {
        if (*c == '\n') line++, col = 1;
        else col++;
    }
    return errf(p->err, "grammar: line %d, column %d: %s", line, col, msg);
}

static int grow(void **buf, int *cap, int need, size_t size) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *b = realloc(*buf, (size_t)c * size);
    if (!b) return -1;
    *buf = b;
    *cap = c;
    return 0;
}

static int emit(parser *p, evec *v, int type, uint32_t val) {
    if (++p->total > G_MAX_ELEMS) return errf(p->err, "grammar: more than %d elements after expansion", G_MAX_ELEMS);
    if (grow((void **)&v->e, &v->cap, v->n + 1, sizeof *v->e)) return errf(p->err, "out of memory");
    v->e[v->n++] = (gelem){(uint8_t)type, val};
    return 0;
}

// ---- rules and character sets -----------------------------------------------------

static int rule_id(parser *p, const char *name, size_t len, int use_at) {
    for (int i = 0; i < p->n_rules; i++)
        if (strlen(p->rules[i].name) == len && !memcmp(p->rules[i].name, name, len)) return i;
    if (grow((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules)) return errf(p->err, "out of memory");
    prule *r = &p->rules[p->n_rules];
    *r = (prule){.name = strndup(name, len), .first_use = use_at};
    if (!r->name) return errf(p->err, "out of memory");
    return p->n_rules++;
}

// A helper rule for a group or repetition inside rule `parent`.
static int helper_rule(parser *p, int parent, const char *what) {
    char name[160];
    snprintf(name, sizeof name, "%.100s (%s %d)", p->rules[parent].name, what, p->n_rules);
    int id = rule_id(p, name, strlen(name), -1);
    if (id >= 0) p->rules[id].defined = 1;
    return id;
}

static int add_charset(parser *p, const gcharset *cs) {
    if (grow((void **)&p->cs, &p->cap_cs, p->n_cs + 1, sizeof *p->cs)) return errf(p->err, "out of memory");
    p->cs[p->n_cs] = *cs;
    return p->n_cs++;
}

static void charset_finish(gcharset *cs) {
    cs->ascii[0] = cs->ascii[1] = 0;
    for (uint32_t c = 0; c < 128; c++) {
        int in = 0;
        for (int i = 0; i < cs->n && !in; i++) in = c >= cs->r[i][0] && c <= cs->r[i][1];
        if (in != cs->neg) cs->ascii[c >> 6] |= 1ull << (c & 63);
    }
}

int gcharset_has(const gcharset *cs, uint32_t cp) {
    if (cp < 128) return (int)(cs->ascii[cp >> 6] >> (cp & 63)) & 1;
    int in = 0;
    for (int i = 0; i < cs->n && !in; i++) in = cp >= cs->r[i][0] && cp <= cs->r[i][1];
    return in != cs->neg;
}

// A set of one code point (string literals are sequences of these).
static int single_char(parser *p, evec *v, uint32_t cp) {
    gcharset cs = {.n = 1, .r = malloc(sizeof *cs.r)};
    if (!cs.r) return errf(p->err, "out of memory");
    cs.r[0][0] = cs.r[0][1] = cp;
    charset_finish(&cs);
    int id = add_charset(p, &cs);
    if (id < 0) free(cs.r);
    return id < 0 ? -1 : emit(p, v, G_CHARS, (uint32_t)id);
}

// ---- lexing ---------------------------------------------------------------------

static int is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// Skips blanks and comments; newlines too when newline_ok.
static void skip_space(parser *p, int newline_ok) {
    while (p->s < p->end) {
        char c = *p->s;
        if (c == '#') {
            while (p->s < p->end && *p->s != '\n') p->s++;
        } else if (c == ' ' || c == '\t' || ((c == '\n' || c == '\r') && newline_ok)) {
            p->s++;
        } else {
            break;
        }
    }
}

static int hex_val(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// One UTF-8 character of the grammar text (invalid bytes count as themselves).
static uint32_t utf8_char(parser *p) {
    const unsigned char *s = (const unsigned char *)p->s;
    int n = s[0] < 0x80 ? 1 : s[0] >> 5 == 6 ? 2 : s[0] >> 4 == 14 ? 3 : s[0] >> 3 == 30 ? 4 : 1;
    if (p->s + n > p->end) n = 1;
    uint32_t cp = n == 1 ? s[0] : s[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) { n = 1, cp = s[0]; break; }
        cp = cp << 6 | (s[i] & 0x3f);
    }
    p->s += n;
    return cp;
}

// One character of a literal or class, escapes decoded. -1 on error.
static int64_t parse_char(parser *p) {
    if (p->s >= p->end) return perr(p, p->s, "unexpected end of the grammar");
    if (*p->s != '\\') return utf8_char(p);
    const char *at = p->s++;
    if (p->s >= p->end) return perr(p, at, "unfinished escape");
    char c = *p->s++;
    int digits = c == 'x' ? 2 : c == 'u' ? 4 : c == 'U' ? 8 : 0;
    if (digits) {
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = p->s < p->end ? hex_val(*p->s) : -1;
            if (h < 0) return perr(p, at, "expected hex digits after \\x, \\u or \\U");
            v = v << 4 | (uint32_t)h;
            p->s++;
        }
        if (v > 0x10ffff) return perr(p, at, "code point past U+10FFFF");
        return v;
    }
    switch (c) {
    case 't': return '\t';
    case 'r': return '\r';
    case 'n': return '\n';
    case '\\': case '"': case '[': case ']': case '-': case '^': return (unsigned char)c;
    default: return perr(p, at, "unknown escape");
    }
}

// ---- parsing ----------------------------------------------------------------------

static int parse_alternates(parser *p, int rule, int depth);

static int parse_literal(parser *p, evec *v) {
    const char *at = p->s++;  // the opening quote
    while (p->s < p->end && *p->s != '"') {
        if (*p->s == '\n') return perr(p, at, "string literal not closed on its line");
        int64_t c = parse_char(p);
        if (c < 0 || single_char(p, v, (uint32_t)c)) return -1;
    }
    if (p->s >= p->end) return perr(p, at, "string literal not closed");
    p->s++;
    return 0;
}

static int parse_class(parser *p, evec *v) {
    const char *at = p->s++;  // '['
    gcharset cs = {0};
    int cap = 0;
    if (p->s < p->end && *p->s == '^') cs.neg = 1, p->s++;
    while (p->s < p->end && *p->s != ']') {
        int64_t lo = parse_char(p), hi = lo;
        if (lo >= 0 && p->s + 1 < p->end && *p->s == '-' && p->s[1] != ']') {
            p->s++;
            hi = parse_char(p);
            if (hi >= 0 && hi < lo) hi = perr(p, at, "character range with its end before its start");
        }
        if (lo < 0 || hi < 0) return free(cs.r), -1;
        if (grow((void **)&cs.r, &cap, cs.n + 1, sizeof *cs.r)) return free(cs.r), errf(p->err, "out of memory");
        cs.r[cs.n][0] = (uint32_t)lo, cs.r[cs.n][1] = (uint32_t)hi, cs.n++;
    }
    if (p->s >= p->end) return free(cs.r), perr(p, at, "character class not closed");
    p->s++;
    charset_finish(&cs);
    int id = add_charset(p, &cs);
    if (id < 0) return free(cs.r), -1;
    return emit(p, v, G_CHARS, (uint32_t)id);
}

static int parse_count(parser *p, long *out) {
    long x = 0;
    const char *at = p->s;
    while (p->s < p->end && *p->s >= '0' && *p->s <= '9') {
        x = x * 10 + (*p->s++ - '0');
        if (x > G_MAX_REPEAT) return perr(p, at, "repetition count above 1000");
    }
    *out = p->s == at ? -1 : x;
    return 0;
}

// Appends the body of a helper rule `id` ::= sym rest | ε (rest: a reference
// to rule `tail`, or nothing when tail < 0).
static int repeat_rule(parser *p, int id, const gelem *sym, int n_sym, int tail) {
    evec *b = &p->rules[id].body;
    for (int i = 0; i < n_sym; i++)
        if (emit(p, b, sym[i].type, sym[i].val)) return -1;
    if (tail >= 0 && emit(p, b, G_REF, (uint32_t)tail)) return -1;
    return emit(p, b, G_ALT, 0) || emit(p, b, G_END, 0) ? -1 : 0;
}

// The last symbol v->e[from..n) repeated min..max times (max < 0: unbounded).
static int apply_repeat(parser *p, int rule, evec *v, int from, long min, long max) {
    const int n_sym = v->n - from;
    gelem *sym = malloc((size_t)(n_sym ? n_sym : 1) * sizeof *sym);
    if (!sym) return errf(p->err, "out of memory");
    memcpy(sym, v->e + from, (size_t)n_sym * sizeof *sym);
    v->n = from;
    int rc = 0;
    for (long i = 0; i < min && !rc; i++)
        for (int k = 0; k < n_sym && !rc; k++) rc = emit(p, v, sym[k].type, sym[k].val);
    int tail = -1;
    if (!rc && max < 0) {  // r ::= sym r | ε
        tail = helper_rule(p, rule, "repetition");
        rc = tail < 0 || repeat_rule(p, tail, sym, n_sym, tail);
    }
    for (long i = min; !rc && max >= 0 && i < max; i++) {  // r_k ::= sym r_{k-1} | ε
        int id = helper_rule(p, rule, "repetition");
        rc = id < 0 || repeat_rule(p, id, sym, n_sym, tail);
        tail = id;
    }
    if (!rc && tail >= 0) rc = emit(p, v, G_REF, (uint32_t)tail);
    free(sym);
    return rc ? -1 : 0;
}

static int is_star_plus_q(char c) { return c == '*' || c == '+' || c == '?'; }

static int parse_postfix(parser *p, int rule, evec *v, int from, int depth) {
    char c = *p->s;
    long min = 0, max = 0;
    if (is_star_plus_q(c)) {
        p->s++;
        min = c == '+', max = c == '?' ? 1 : -1;
        // x??, x+*, ...: one repetition of the same strings (nested, each level
        // doubled the ways the matcher follows through them)
        for (skip_space(p, depth > 0); p->s < p->end && is_star_plus_q(*p->s); skip_space(p, depth > 0)) {
            c = *p->s++;
            min = min && c == '+', max = max == 1 && c == '?' ? 1 : -1;
        }
    } else {  // {m}, {m,}, {m,n}
        const char *at = p->s++;
        skip_space(p, 1);
        if (parse_count(p, &min)) return -1;
        if (min < 0) return perr(p, at, "expected a count after '{'");
        max = min;
        skip_space(p, 1);
        if (p->s < p->end && *p->s == ',') {
            p->s++;
            skip_space(p, 1);
            if (parse_count(p, &max)) return -1;
            skip_space(p, 1);
        }
        if (p->s >= p->end || *p->s != '}') return perr(p, at, "expected '}' to close the repetition");
        p->s++;
        if (max >= 0 && max < min) return perr(p, at, "repetition {m,n} with n < m");
    }
    if (from == v->n) return perr(p, p->s - 1, "repetition with nothing before it");
    return apply_repeat(p, rule, v, from, min, max);
}

// One symbol: literal, class, `.`, name or group.
static int parse_symbol(parser *p, int rule, evec *v, int depth) {
    char c = *p->s;
    if (c == '"') return parse_literal(p, v);
    if (c == '[') return parse_class(p, v);
    if (c == '.') {
        p->s++;
        gcharset cs = {.neg = 1};
        charset_finish(&cs);
        int id = add_charset(p, &cs);
        return id < 0 ? -1 : emit(p, v, G_CHARS, (uint32_t)id);
    }
    if (is_name_char(c)) {
        const char *name = p->s;
        while (p->s < p->end && is_name_char(*p->s)) p->s++;
        int id = rule_id(p, name, (size_t)(p->s - name), (int)(name - p->start));
        return id < 0 ? -1 : emit(p, v, G_REF, (uint32_t)id);
    }
    if (c == '(') {
        const char *at = p->s++;
        if (depth >= G_MAX_DEPTH) return perr(p, at, "groups nested deeper than 128");
        int id = helper_rule(p, rule, "group");
        skip_space(p, 1);
        if (id < 0 || parse_alternates(p, id, depth + 1)) return -1;
        if (p->s >= p->end || *p->s != ')') return perr(p, at, "expected ')' to close the group");
        p->s++;
        return emit(p, v, G_REF, (uint32_t)id);
    }
    return perr(p, p->s, "expected a string, class, rule name or group");
}

// A sequence up to '|', ')' or (outside groups) the end of the line.
static int parse_sequence(parser *p, int rule, evec *v, int depth) {
    while (p->s < p->end) {
        char c = *p->s;
        if (c == '|' || c == ')' || c == '\n' || c == '\r') break;
        int from = v->n;
        if (parse_symbol(p, rule, v, depth)) return -1;
        skip_space(p, depth > 0);
        while (p->s < p->end && (is_star_plus_q(*p->s) || *p->s == '{')) {
            if (parse_postfix(p, rule, v, from, depth)) return -1;
            // a second postfix repeats the whole repetition before it: x{2}{3} is x six times
            skip_space(p, depth > 0);
        }
    }
    return 0;
}

// A rule's alternatives. The body is taken out of p->rules while it is
// parsed: helper rules created meanwhile may move that array. An empty
// alternative is kept once: each copy would make the matcher expand what
// follows the rule once more (x ::= "a" | | | ... is x ::= "a" |).
static int parse_alternates(parser *p, int rule, int depth) {
    for (int had_empty = 0;;) {
        evec v = p->rules[rule].body;
        p->rules[rule].body = (evec){0};
        const int from = v.n;
        int rc = parse_sequence(p, rule, &v, depth);
        if (!rc && (v.n > from || !had_empty)) rc = emit(p, &v, G_ALT, 0);
        had_empty |= v.n == from + 1;
        p->rules[rule].body = v;
        if (rc) return -1;
        if (p->s < p->end && *p->s == '|') {
            p->s++;
            skip_space(p, 1);
            continue;
        }
        v.e[v.n - 1].type = G_END;  // the last alternative closes the rule
        return 0;
    }
}

static int parse_rule(parser *p) {
    const char *name = p->s;
    while (p->s < p->end && is_name_char(*p->s)) p->s++;
    if (p->s == name) return perr(p, name, "expected a rule name");
    int id = rule_id(p, name, (size_t)(p->s - name), -1);
    if (id < 0) return -1;
    skip_space(p, 0);
    if (p->end - p->s < 3 || memcmp(p->s, "::=", 3)) return perr(p, p->s, "expected '::='");
    p->s += 3;
    skip_space(p, 1);
    free(p->rules[id].body.e);  // a second definition replaces the first
    p->rules[id].body = (evec){0};
    p->rules[id].defined = 1;
    if (parse_alternates(p, id, 0)) return -1;
    if (p->s < p->end && *p->s == ')') return perr(p, p->s, "')' without a '(' before it");
    skip_space(p, 1);
    return 0;
}

// ---- checks -------------------------------------------------------------------------

static void parser_free(parser *p) {
    for (int i = 0; i < p->n_rules; i++) free(p->rules[i].name), free(p->rules[i].body.e);
    free(p->rules);
    for (int i = 0; i < p->n_cs; i++) free(p->cs[i].r);
    free(p->cs);
}

// nullable[r]: rule r can match the empty text (a fixed point).
static void compute_nullable(const grammar *g, uint8_t *nullable) {
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < g->n_rules; r++) {
            if (nullable[r]) continue;
            int ok = 1;  // the current alternative is nullable so far
            for (uint32_t i = g->rule_start[r];; i++) {
                const gelem *e = &g->e[i];
                if (e->type == G_ALT || e->type == G_END) {
                    if (ok) { nullable[r] = 1, changed = 1; break; }
                    if (e->type == G_END) break;
                    ok = 1;
                } else if (e->type == G_CHARS || (e->type == G_REF && !nullable[e->val])) {
                    ok = 0;
                }
            }
        }
    }
}

// The rules rule r can start with, without consuming a character: edges of
// the left-recursion check, CSR form (adj[off[r]..off[r+1])).
static int left_edges(const grammar *g, const uint8_t *nullable, uint32_t **off_out, uint32_t **adj_out) {
    uint32_t *off = malloc(((size_t)g->n_rules + 1) * sizeof *off);
    uint32_t *adj = malloc(((size_t)g->n_elems + 1) * sizeof *adj);  // at most one edge per element
    if (!off || !adj) return free(off), free(adj), -1;
    uint32_t n = 0;
    for (int r = 0; r < g->n_rules; r++) {
        off[r] = n;
        int open = 1;  // still at the start of the alternative (all before it nullable)
        for (uint32_t i = g->rule_start[r]; g->e[i].type != G_END; i++) {
            const gelem *e = &g->e[i];
            if (e->type == G_ALT) open = 1;
            else if (!open) continue;
            else if (e->type == G_CHARS) open = 0;
            else if (e->type == G_REF) adj[n++] = e->val, open = nullable[e->val];
        }
    }
    off[g->n_rules] = n;
    *off_out = off, *adj_out = adj;
    return 0;
}

// Left recursion: a rule that can reach itself without consuming a character
// would make the matcher expand forever. Depth-first over the "can start
// with" edges, iteratively (hostile grammars may chain many rules).
static int check_left_recursion(const grammar *g, const uint8_t *nullable, char *err) {
    const int n = g->n_rules;
    uint32_t *off = NULL, *adj = NULL;
    uint8_t *color = calloc((size_t)n, 1);  // 0 new, 1 on the path, 2 done
    uint32_t *node = malloc((size_t)n * sizeof *node), *edge = malloc((size_t)n * sizeof *edge);
    int rc = 0;
    if (!color || !node || !edge || left_edges(g, nullable, &off, &adj)) rc = errf(err, "out of memory");
    for (int s = 0; s < n && !rc; s++) {
        if (color[s]) continue;
        int d = 0;
        node[0] = (uint32_t)s, edge[0] = off[s], color[s] = 1;
        while (d >= 0 && !rc) {
            uint32_t r = node[d];
            if (edge[d] == off[r + 1]) { color[r] = 2, d--; continue; }
            uint32_t t = adj[edge[d]++];
            if (color[t] == 1)
                rc = errf(err, "grammar: rule '%s' is left-recursive (it can reach itself without consuming text)",
                          g->rule_name[t]);
            else if (color[t] == 0)
                d++, node[d] = t, edge[d] = off[t], color[t] = 1;
        }
    }
    free(color), free(node), free(edge), free(off), free(adj);
    return rc;
}

static int compile(parser *p, grammar *g) {
    g->n_rules = p->n_rules;
    const size_t nr = p->n_rules > 0 ? (size_t)p->n_rules : 1;
    long total = 0;
    for (int i = 0; i < p->n_rules; i++) total += p->rules[i].body.n;
    g->e = malloc((size_t)(total ? total : 1) * sizeof *g->e);
    g->rule_start = malloc(nr * sizeof *g->rule_start);
    g->rule_name = calloc(nr, sizeof *g->rule_name);
    if (!g->e || !g->rule_start || !g->rule_name) return errf(p->err, "out of memory");
    for (int i = 0; i < p->n_rules; i++) {
        g->rule_start[i] = (uint32_t)g->n_elems;
        memcpy(g->e + g->n_elems, p->rules[i].body.e, (size_t)p->rules[i].body.n * sizeof *g->e);
        g->n_elems += p->rules[i].body.n;
        g->rule_name[i] = p->rules[i].name;
        p->rules[i].name = NULL;
    }
    g->cs = p->cs, g->n_cs = p->n_cs;
    p->cs = NULL, p->n_cs = 0;
    return 0;
}

int grammar_parse(grammar **out, const char *text, size_t len, char *err) {
    *out = NULL;
    parser p = {.s = text, .end = text + len, .start = text, .err = err};
    int rc = 0;
    skip_space(&p, 1);
    while (!rc && p.s < p.end) rc = parse_rule(&p);
    for (int i = 0; !rc && i < p.n_rules; i++)
        if (!p.rules[i].defined) {
            char msg[200];
            snprintf(msg, sizeof msg, "rule '%.100s' is used but not defined", p.rules[i].name);
            rc = perr(&p, p.start + p.rules[i].first_use, msg);
        }
    int root = -1;
    for (int i = 0; i < p.n_rules; i++)
        if (!strcmp(p.rules[i].name, "root")) root = i;
    if (!rc && root < 0) rc = errf(err, "grammar: no 'root' rule");
    grammar *g = calloc(1, sizeof *g);
    if (!rc && !g) rc = errf(err, "out of memory");
    if (!rc) rc = compile(&p, g);
    uint8_t *nullable = rc ? NULL : calloc((size_t)g->n_rules, 1);
    if (!rc && !nullable) rc = errf(err, "out of memory");
    if (!rc) {
        compute_nullable(g, nullable);
        rc = check_left_recursion(g, nullable, err);
    }
    free(nullable);
    parser_free(&p);
    if (rc) {
        grammar_free(g);
        return -1;
    }
    g->root = root;
    *out = g;
    return 0;
}

void grammar_free(grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_rules && g->rule_name; i++) free(g->rule_name[i]);
    for (int i = 0; i < g->n_cs; i++) free(g->cs[i].r);
    free(g->rule_name), free(g->rule_start), free(g->e), free(g->cs);
    free(g);
}
