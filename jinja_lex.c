// jinja_lex.c — template source to tokens, as jinja2's lexer with
// trim_blocks and lstrip_blocks splits it (see jinja_lex.h).
//
// Whitespace control, in jinja2's order: a `-` inside a tag start strips all
// whitespace before the tag, a `-` inside a tag end all whitespace after it;
// a block or comment tag (not `{{`) alone on its line after spaces loses the
// spaces (lstrip_blocks) unless it starts with `{%+`; a newline right after
// `%}` or `#}` is dropped (trim_blocks) unless the tag ends with `+%}`.
#include "jinja_lex.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    jinja_template *t;
    const char *s;     // the normalized source
    size_t n, pos;
    int line;
    int line_starting; // the last thing read ended a line (for lstrip_blocks at the text's start)
    jtok *toks;
    size_t n_toks, cap_toks;
    char balance[256]; // closers expected for open ( [ {
    int depth;
} lexer;

_Noreturn static void lex_fail(lexer *L, const char *fmt, const char *arg) {
    jfail_at(&L->t->fail, L->line, fmt, arg);
}

static jtok *emit(lexer *L, jtok_type type, const char *s, size_t n) {
    if (L->n_toks == L->cap_toks) {
        size_t cap = L->cap_toks ? 2 * L->cap_toks : 256;
        L->toks = ja_grow(&L->t->arena, L->toks, sizeof *L->toks * L->n_toks, sizeof *L->toks * cap);
        L->cap_toks = cap;
    }
    jtok *k = &L->toks[L->n_toks++];
    *k = (jtok){.type = type, .line = L->line, .s = s, .n = n};
    return k;
}

static int count_nl(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

// Python's str.isspace() on the code point at s[i] (0 when not whitespace), its length in *w.
static int space_at(const char *s, size_t n, size_t i, size_t *w) {
    size_t j = i;
    uint32_t c = utf8_next(s, n, &j);
    *w = j - i;
    return py_isspace(c);
}

// Length of s[0..n) without its trailing whitespace (Python's rstrip()).
static size_t rstrip_len(const char *s, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t start = end - 1, w;
        while (start > 0 && ((unsigned char)s[start] & 0xc0) == 0x80) start--;
        if (!space_at(s, n, start, &w) || start + w != end) break;
        end = start;
    }
    return end;
}

// Bytes of whitespace starting at s[i].
static size_t skip_space(const char *s, size_t n, size_t i) {
    size_t j = i, w;
    while (j < n && space_at(s, n, j, &w)) j += w;
    return j - i;
}

// jinja2 splits on \r\n, \r and \n, joins with \n, and drops one trailing newline.
static char *normalize(jarena *a, const char *src, size_t len, size_t *n) {
    char *s = ja_alloc(a, len + 1);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[k++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[k++] = src[i];
        }
    }
    if (k && s[k - 1] == '\n') k--;
    s[k] = 0;
    *n = k;
    return s;
}

// ---- text and tag starts -----------------------------------------------------------

// The text before a tag that starts at `tag` with sign ('-', '+' or 0), after
// whitespace control; emits it.
static void emit_text(lexer *L, size_t from, size_t tag, char sign, int is_variable) {
    size_t end = tag;
    const char *s = L->s + from;
    if (sign == '-') {
        end = from + rstrip_len(s, tag - from);
    } else if (sign != '+' && !is_variable) {
        size_t l_pos = from;  // the start of the tag's line within the text
        for (size_t i = tag; i > from; i--)
            if (L->s[i - 1] == '\n') { l_pos = i; break; }
        if ((l_pos > from || L->line_starting) && l_pos < tag && l_pos + skip_space(L->s, tag, l_pos) == tag)
            end = l_pos;
    }
    if (end > from) emit(L, T_DATA, s, end - from);
    L->line += count_nl(s, tag - from);
}

// A tag end at L->pos: `+%}`, `-%}` plus whitespace, or `%}` plus one newline
// (trim_blocks; `close` is "%}" or "#}"). Returns its length, 0 when none.
static size_t tag_end_len(const lexer *L, size_t p, const char *close, int trim) {
    const char *s = L->s;
    if (p + 3 <= L->n && s[p] == '+' && !memcmp(s + p + 1, close, 2)) return 3;
    if (p + 3 <= L->n && s[p] == '-' && !memcmp(s + p + 1, close, 2)) return 3 + skip_space(s, L->n, p + 3);
    if (p + 2 <= L->n && !memcmp(s + p, close, 2)) return 2 + (trim && p + 2 < L->n && s[p + 2] == '\n');
    return 0;
}

static void advance(lexer *L, size_t len) {
    L->line += count_nl(L->s + L->pos, len);
    L->line_starting = len && L->s[L->pos + len - 1] == '\n';
    L->pos += len;
}

// {# ... #}: skipped, whitespace control applied.
static void lex_comment(lexer *L) {
    for (size_t p = L->pos; p < L->n; p++) {
        size_t e = tag_end_len(L, p, "#}", 1);
        if (e) {
            advance(L, p - L->pos + e);
            return;
        }
    }
    lex_fail(L, "missing end of comment tag%s", "");
}

// `{% raw %}` from p (after `{%` and its sign)? Returns where it ends: after
// its `%}` (with a `-`: and the whitespace after; no trim_blocks here, as in
// jinja2), else 0.
static size_t raw_begin_end(const lexer *L, size_t p) {
    p += skip_space(L->s, L->n, p);
    if (p + 3 > L->n || memcmp(L->s + p, "raw", 3)) return 0;
    size_t q = p + 3 + skip_space(L->s, L->n, p + 3);
    if (q + 3 <= L->n && !memcmp(L->s + q, "-%}", 3)) return q + 3 + skip_space(L->s, L->n, q + 3);
    if (q + 2 <= L->n && !memcmp(L->s + q, "%}", 2)) return q + 2;
    return 0;
}

// The body of {% raw %}...{% endraw %} as text (whitespace control on endraw as on any block tag).
static void lex_raw(lexer *L) {
    for (size_t p = L->pos; p + 2 <= L->n; p++) {
        if (memcmp(L->s + p, "{%", 2)) continue;
        size_t q = p + 2;
        char sign = q < L->n && (L->s[q] == '-' || L->s[q] == '+') ? L->s[q++] : 0;
        q += skip_space(L->s, L->n, q);
        if (q + 6 > L->n || memcmp(L->s + q, "endraw", 6)) continue;
        q += 6;
        q += skip_space(L->s, L->n, q);
        size_t e = tag_end_len(L, q, "%}", 1);
        if (!e) continue;
        emit_text(L, L->pos, p, sign, 0);
        L->pos = p;
        advance(L, q + e - p);
        return;
    }
    lex_fail(L, "missing end of raw directive%s", "");
}

// ---- inside {{ }} and {% %} ----------------------------------------------------------

static int is_name_start(unsigned char c) { return c == '_' || (unsigned)((c | 32) - 'a') < 26u || c >= 0x80; }
static int is_name_char(unsigned char c) { return is_name_start(c) || (unsigned)(c - '0') < 10u; }
static int is_digit(unsigned char c) { return (unsigned)(c - '0') < 10u; }

// Digits with single underscores between them ((\d+_)*\d+); returns the length.
static size_t digits(const char *s, size_t n, size_t p) {
    size_t q = p;
    while (q < n && is_digit(s[q])) {
        q++;
        if (q + 1 < n && s[q] == '_' && is_digit(s[q + 1])) q++;
    }
    return q - p;
}

// A number at p: float (with a fraction or an exponent) or integer; right
// after a dot (x.0.1) only an integer. Returns its length.
static size_t lex_number(lexer *L, size_t p, int after_dot) {
    const char *s = L->s;
    size_t n = L->n, d = digits(s, n, p), q = p + d;
    if (s[p] == '0' && p + 1 < n && strchr("bBoOxX", s[p + 1])) {
        q = p + 2;
        while (q < n && (is_name_char(s[q]))) q++;
        emit(L, T_INT, s + p, q - p);
        return q - p;
    }
    int is_float = 0;
    if (after_dot) {
        emit(L, T_INT, s + p, q - p);
        return q - p;
    }
    if (q + 1 < n && s[q] == '.' && is_digit(s[q + 1])) q += 1 + digits(s, n, q + 1), is_float = 1;
    if (q < n && (s[q] | 32) == 'e') {
        size_t e = q + 1 + (q + 1 < n && (s[q + 1] == '+' || s[q + 1] == '-'));
        size_t de = e < n ? digits(s, n, e) : 0;
        if (de) q = e + de, is_float = 1;
    }
    emit(L, is_float ? T_FLOAT : T_INT, s + p, q - p);
    return q - p;
}

static size_t lex_string(lexer *L, size_t p) {
    char quote = L->s[p];
    for (size_t q = p + 1; q < L->n; q++) {
        if (L->s[q] == '\\') q++;
        else if (L->s[q] == quote) {
            emit(L, T_STRING, L->s + p + 1, q - p - 1);
            return q + 1 - p;
        }
    }
    lex_fail(L, "unterminated string%s", "");
}

static const char *const operators[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                        "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};

static size_t lex_operator(lexer *L, size_t p) {
    for (size_t i = 0; i < sizeof operators / sizeof *operators; i++) {
        size_t k = strlen(operators[i]);
        if (p + k > L->n || memcmp(L->s + p, operators[i], k)) continue;
        char c = operators[i][0];
        if (k == 1 && strchr("([{", c)) {
            if (L->depth == (int)sizeof L->balance) lex_fail(L, "brackets nested too deeply%s", "");
            L->balance[L->depth++] = c == '(' ? ')' : c == '[' ? ']' : '}';
        } else if (k == 1 && strchr(")]}", c)) {
            if (!L->depth) lex_fail(L, "unexpected '%s'", operators[i]);
            if (L->balance[--L->depth] != c) lex_fail(L, "unexpected '%s'", operators[i]);
        }
        emit(L, T_OP, L->s + p, k);
        return k;
    }
    char c[8] = {L->s[p], 0};
    lex_fail(L, "unexpected character '%s'", c);
}

// The tokens of a {{ }} (block 0) or {% %} (block 1) tag, up to and including its end.
static void lex_tag(lexer *L, int block) {
    const char *close = block ? "%}" : "}}";
    while (L->pos < L->n) {
        size_t p = L->pos, len;
        if (!L->depth && (len = tag_end_len(L, p, close, block))) {
            if (!block && L->s[p] == '+') len = 0;  // `+}}` is not an end
            if (len) {
                emit(L, block ? T_BLOCK_END : T_VAR_END, L->s + p, len);
                advance(L, len);
                return;
            }
        }
        unsigned char c = (unsigned char)L->s[p];
        size_t w;
        if (space_at(L->s, L->n, p, &w)) len = skip_space(L->s, L->n, p);
        else if (is_digit(c)) len = lex_number(L, p, p && L->s[p - 1] == '.');
        else if (is_name_start(c)) {
            len = 1;
            while (p + len < L->n && is_name_char(L->s[p + len])) len++;
            emit(L, T_NAME, L->s + p, len);
        } else if (c == '\'' || c == '"') len = lex_string(L, p);
        else len = lex_operator(L, p);
        advance(L, len);
    }
    lex_fail(L, block ? "unexpected end of template inside a block tag%s" : "unexpected end of template inside {{ }}%s",
             "");
}

// ---- the whole source ---------------------------------------------------------------

jtok *jlex(jinja_template *t, const char *src, size_t len, size_t *n_toks) {
    lexer L = {.t = t, .line = 1, .line_starting = 1};
    L.s = normalize(&t->arena, src, len, &L.n);
    while (L.pos < L.n) {
        const char *tag = NULL;
        for (size_t p = L.pos; p + 1 < L.n && !tag; p++)
            if (L.s[p] == '{' && (L.s[p + 1] == '{' || L.s[p + 1] == '%' || L.s[p + 1] == '#')) tag = L.s + p;
        if (!tag) {
            emit(&L, T_DATA, L.s + L.pos, L.n - L.pos);
            break;
        }
        size_t at = (size_t)(tag - L.s), p = at + 2;
        char kind = tag[1], sign = p < L.n && (L.s[p] == '-' || L.s[p] == '+') ? L.s[p] : 0;
        size_t raw = kind == '%' ? raw_begin_end(&L, p + !!sign) : 0;
        emit_text(&L, L.pos, at, sign, kind == '{');
        L.pos = at;
        if (raw) {
            advance(&L, raw - at);
            lex_raw(&L);
            continue;
        }
        advance(&L, 2 + !!sign);
        if (kind == '#') {
            lex_comment(&L);
        } else {
            emit(&L, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, tag, 2);
            lex_tag(&L, kind == '%');
        }
    }
    emit(&L, T_EOF, L.s + L.n, 0);
    *n_toks = L.n_toks;
    return L.toks;
}
