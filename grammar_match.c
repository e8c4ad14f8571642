// grammar_match.c — the pushdown matcher of grammar.h: a set of stacks of
// grammar positions, advanced byte by byte.
//
// A stack lists the positions still to match, innermost last. Expansion
// replaces a rule reference on top by each of the rule's alternatives (the
// position after the reference stays below, as the return address) until
// every top is a character set or the stack is empty. Without left recursion
// (grammar.c refuses it) that ends; ambiguous grammars can still multiply the
// stacks, so their number, depth and the work per step are bounded.
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define G_MAX_DEPTH_STACK 2048  // positions in one stack
#define G_MAX_STACKS 1024       // stacks in one state
#define G_MAX_WORK 100000       // expansion steps for one character

typedef gbuf u32buf;

static int buf_reserve(u32buf *b, size_t extra) {
    if (b->n + extra <= b->cap) return 0;
    size_t cap = b->cap ? b->cap * 2 : 64;
    while (cap < b->n + extra) cap *= 2;
    uint32_t *w = realloc(b->w, cap * sizeof *w);
    if (!w) return -1;
    b->w = w, b->cap = cap;
    return 0;
}

void gstate_free(gstate *s) {
    free(s->w);
    *s = (gstate){0};
}

static int state_reserve(gstate *s, size_t extra) {
    u32buf b = {s->w, s->n, s->cap};
    if (buf_reserve(&b, extra)) return -1;
    s->w = b.w, s->cap = b.cap;
    return 0;
}

int gstate_copy(gstate *dst, const gstate *src) {
    dst->n = 0;
    if (state_reserve(dst, src->n)) return -1;
    if (src->n) memcpy(dst->w, src->w, src->n * sizeof *dst->w);
    dst->n = src->n, dst->n_stacks = src->n_stacks;
    dst->part = src->part, dst->part_left = src->part_left, dst->part_len = src->part_len;
    return 0;
}

static void state_clear(gstate *s) {
    s->n = 0, s->n_stacks = 0, s->part = 0, s->part_left = 0, s->part_len = 0;
}

// Counts k units of work against sc's limit: -1 (with err) past it, so that
// a hostile grammar costs a bounded time per step.
static int spend(gscratch *sc, long k, char *err) {
    sc->spent += k;
    if (sc->limit > 0 && sc->spent > sc->limit)
        return errf(err, "the grammar is too ambiguous to follow (too many parses to track at once)");
    return 0;
}

// Adds stack st[0..len) unless the state has it already.
static int add_stack(gstate *s, const uint32_t *st, uint32_t len, gscratch *sc, char *err) {
    if (spend(sc, s->n_stacks + 1, err)) return -1;
    for (size_t i = 0; i < s->n; i += 1 + s->w[i])
        if (s->w[i] == len && (!len || !memcmp(s->w + i + 1, st, len * sizeof *st))) return 0;
    if (s->n_stacks >= G_MAX_STACKS)
        return errf(err, "the grammar is too ambiguous to follow (more than %d parses at once)", G_MAX_STACKS);
    if (state_reserve(s, len + 1)) return errf(err, "out of memory");
    s->w[s->n++] = len;
    if (len) memcpy(s->w + s->n, st, len * sizeof *st);
    s->n += len;
    s->n_stacks++;
    return 0;
}

static int at_alt_end(const grammar *g, uint32_t pos) {
    return g->e[pos].type == G_ALT || g->e[pos].type == G_END;
}

// Pushes stack base[0..len) plus `top` (when top != UINT32_MAX) onto the work
// list, whose entries are [positions..., len].
static int work_push(u32buf *work, const uint32_t *base, uint32_t len, uint32_t top, char *err) {
    uint32_t n = len + (top != UINT32_MAX);
    if (n > G_MAX_DEPTH_STACK) return errf(err, "the grammar nests deeper than %d rules", G_MAX_DEPTH_STACK);
    if (buf_reserve(work, n + 1)) return errf(err, "out of memory");
    if (len) memmove(work->w + work->n, base, len * sizeof *base);
    if (top != UINT32_MAX) work->w[work->n + len] = top;
    work->w[work->n + n] = n;
    work->n += n + 1;
    return 0;
}

// Expands every stack on the work list into dst.
static int expand(const grammar *g, gscratch *sc, gstate *dst, char *err) {
    u32buf *work = &sc->work, *tmp = &sc->tmp;
    long steps = 0;
    while (work->n) {
        uint32_t len = work->w[work->n - 1];
        uint32_t *st = work->w + work->n - 1 - len;
        if (len == 0 || g->e[st[len - 1]].type == G_CHARS) {
            work->n -= len + 1;
            if (add_stack(dst, st, len, sc, err)) return -1;
            continue;
        }
        if (++steps > G_MAX_WORK || spend(sc, 1, err))
            return errf(err, "the grammar is too ambiguous to follow (more than %d expansions for one character)",
                        G_MAX_WORK);
        // top: a reference; below it the return address (when the alternative goes on)
        const uint32_t ref = st[len - 1], rule = g->e[ref].val;
        tmp->n = 0;
        if (buf_reserve(tmp, len)) return errf(err, "out of memory");
        if (len > 1) memcpy(tmp->w, st, (len - 1) * sizeof *st);
        tmp->n = len - 1;
        if (!at_alt_end(g, ref + 1)) tmp->w[tmp->n++] = ref + 1;
        work->n -= len + 1;
        for (uint32_t a = g->rule_start[rule];;) {
            if (work_push(work, tmp->w, (uint32_t)tmp->n, at_alt_end(g, a) ? UINT32_MAX : a, err)) return -1;
            while (!at_alt_end(g, a)) a++;
            if (g->e[a].type == G_END) break;
            a++;
        }
    }
    return 0;
}

void gscratch_free(gscratch *sc) {
    free(sc->work.w), free(sc->tmp.w);
    *sc = (gscratch){0};
}

static int start_or_advance(const grammar *g, const gstate *src, uint32_t cp, int start, gstate *dst,
                            gscratch *sc, char *err) {
    int rc = 0;
    sc->work.n = 0;
    state_clear(dst);
    if (start) {
        uint32_t pos = g->rule_start[g->root];
        // the root rule as a reference: expand a one-element stack pointing at each alternative
        for (uint32_t a = pos; !rc;) {
            rc = work_push(&sc->work, NULL, 0, at_alt_end(g, a) ? UINT32_MAX : a, err);
            while (!at_alt_end(g, a)) a++;
            if (g->e[a].type == G_END) break;
            a++;
        }
        if (!rc) rc = expand(g, sc, dst, err);
    } else {
        for (size_t i = 0; i < src->n && !rc; i += 1 + src->w[i]) {
            const uint32_t len = src->w[i], *st = src->w + i + 1;
            if (len == 0) continue;
            const uint32_t top = st[len - 1];
            if (!gcharset_has(&g->cs[g->e[top].val], cp)) continue;
            rc = work_push(&sc->work, st, len - 1, at_alt_end(g, top + 1) ? UINT32_MAX : top + 1, err);
            if (!rc) rc = expand(g, sc, dst, err);
        }
    }
    return rc ? -1 : dst->n_stacks > 0;
}

int gstate_start(const grammar *g, gstate *s, gscratch *sc, char *err) {
    int r = start_or_advance(g, NULL, 0, 1, s, sc, err);
    return r < 0 ? -1 : 0;
}

// 1 when some code point in [lo, hi] is in cs.
static int charset_meets(const gcharset *cs, uint32_t lo, uint32_t hi) {
    if (!cs->neg) {
        for (int i = 0; i < cs->n; i++)
            if (cs->r[i][0] <= hi && cs->r[i][1] >= lo) return 1;
        return 0;
    }
    // negated: is [lo, hi] not wholly covered by the ranges?
    for (uint32_t x = lo;;) {
        int moved = 0;
        for (int i = 0; i < cs->n; i++)
            if (cs->r[i][0] <= x && cs->r[i][1] >= x) {
                if (cs->r[i][1] >= hi) return 0;
                x = cs->r[i][1] + 1, moved = 1;
            }
        if (!moved) return 1;
    }
}

// The smallest code point a UTF-8 sequence of len bytes may encode (shorter
// forms of a smaller one are invalid: overlong).
static uint32_t utf8_min(int len) { return len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000; }

// 1 when cp is a valid code point for a sequence of len bytes.
static int utf8_ok(uint32_t cp, int len) {
    return cp >= utf8_min(len) && cp <= 0x10ffff && (cp < 0xd800 || cp > 0xdfff);
}

// dst = the stacks of src whose top can match a character in [lo, hi], the
// completions of the partial character (part, left more bytes, len in all)
// that are valid UTF-8.
static int keep_partial(const grammar *g, const gstate *src, uint32_t part, int left, int len, gstate *dst,
                        gscratch *sc, char *err) {
    uint32_t lo = part << (6 * left), hi = lo | ((1u << (6 * left)) - 1);
    state_clear(dst);
    if (lo < utf8_min(len)) lo = utf8_min(len);
    if (hi > 0x10ffff) hi = 0x10ffff;
    if (lo >= 0xd800 && hi <= 0xdfff) return 0;  // surrogates only
    if (lo > hi) return 0;
    for (size_t i = 0; i < src->n; i += 1 + src->w[i]) {
        const uint32_t len = src->w[i], *st = src->w + i + 1;
        if (len && charset_meets(&g->cs[g->e[st[len - 1]].val], lo, hi) && add_stack(dst, st, len, sc, err)) return -1;
    }
    dst->part = part, dst->part_left = left, dst->part_len = len;
    return dst->n_stacks > 0;
}

int gstate_byte(const grammar *g, const gstate *src, uint8_t b, gstate *dst, gscratch *sc, char *err) {
    if (src->part_left == 0) {
        if (b < 0x80) return start_or_advance(g, src, b, 0, dst, sc, err);
        int left = b >> 5 == 6 ? 1 : b >> 4 == 14 ? 2 : b >> 3 == 30 ? 3 : 0;
        if (!left) return state_clear(dst), 0;  // a continuation byte or 0xF8..: never UTF-8
        return keep_partial(g, src, b & (0x3fu >> left), left, left + 1, dst, sc, err);
    }
    if ((b & 0xc0) != 0x80) return state_clear(dst), 0;
    const uint32_t part = src->part << 6 | (b & 0x3f);
    if (src->part_left > 1) return keep_partial(g, src, part, src->part_left - 1, src->part_len, dst, sc, err);
    if (!utf8_ok(part, src->part_len)) return state_clear(dst), 0;
    gstate whole = *src;
    whole.part = 0, whole.part_left = 0;
    return start_or_advance(g, &whole, part, 0, dst, sc, err);
}

int gstate_can_end(const gstate *s) {
    if (s->part_left) return 0;
    for (size_t i = 0; i < s->n; i += 1 + s->w[i])
        if (s->w[i] == 0) return 1;
    return 0;
}

int gstate_must_end(const gstate *s) { return gstate_can_end(s) && s->n_stacks == 1; }
