// grammar_match.c — the pushdown matcher of grammar.h: a set of stacks of
// grammar positions, advanced byte by byte.
//
// A stack lists the positions still to match, innermost last. Expansion
// replaces a rule reference on top by each of the rule's alternatives (the
// position after the reference stays below, as the return address) until
// every top is a character set or the stack is empty. Without left recursion
// (grammar.c refuses it) that ends; ambiguous grammars can still multiply the
// stacks, so their number, depth and the work per step are bounded. The work
// is counted in words of stacks copied, hashed and compared (gscratch.spent),
// which is what its time follows: a state is built in time linear in its size.
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define G_MAX_DEPTH_STACK 2048  // positions in one stack
#define G_MAX_STACKS 1024       // stacks in one state
#define G_MAX_WORK 100000       // expansion steps for one character
#define G_SEEN (4 * G_MAX_STACKS) // gscratch.seen's slots: a power of two, never over a quarter full
#define G_DONE (1 << 15)          // gscratch.done_seen's slots; a quarter of them recorded at most

struct gseen {
    uint32_t gen, hash, off;  // the state's generation; the stack's hash; where it starts in the state's words
};
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

// Counts k words of work against sc's limit: -1 (with err) past it, so that
// a hostile grammar costs a bounded time per step.
static int spend(gscratch *sc, long k, char *err) {
    sc->spent += k;
    if (sc->limit > 0 && sc->spent > sc->limit)
        return errf(err, "the grammar is too ambiguous to follow (too many parses to track at once)");
    return 0;
}

// Empties s to build a new state in it: sc->seen forgets the stacks of the
// last one (its entries are of an older generation).
static int state_begin(gstate *s, gscratch *sc, char *err) {
    state_clear(s);
    if (!sc->seen && !(sc->seen = calloc(G_SEEN, sizeof *sc->seen))) return errf(err, "out of memory");
    if (!sc->done_seen && !(sc->done_seen = calloc(G_DONE, sizeof *sc->done_seen))) return errf(err, "out of memory");
    if (++sc->gen == 0) {  // wrapped: no entry may look current
        memset(sc->seen, 0, G_SEEN * sizeof *sc->seen);
        memset(sc->done_seen, 0, G_DONE * sizeof *sc->done_seen);
        sc->gen = 1;
    }
    sc->done.n = 0, sc->n_done = 0;
    return 0;
}

static uint32_t hash_stack(const uint32_t *st, uint32_t len) {
    uint32_t h = 2166136261u ^ len;
    for (uint32_t i = 0; i < len; i++) h = (h ^ st[i]) * 16777619u;
    return h ^ h >> 15;
}

// Looks stack st[0..len) (hash h) up in table t (mask + 1 slots) among the
// entries of this generation, which point into words ([len, positions...]
// at each offset): 1 found, 0 not (*slot: the free slot for it), -1 past the
// work limit.
static int find_stack(const gseen *t, size_t mask, const uint32_t *words, const uint32_t *st, uint32_t len,
                      uint32_t h, size_t *slot, gscratch *sc, char *err) {
    size_t j = h & mask;
    for (; t[j].gen == sc->gen; j = (j + 1) & mask) {
        const uint32_t *o = words + t[j].off;
        if (t[j].hash != h || o[0] != len) continue;
        if (spend(sc, len, err)) return -1;
        if (!memcmp(o + 1, st, len * sizeof *st)) return 1;
    }
    *slot = j;
    return 0;
}

// Adds stack st[0..len) unless the state (begun by state_begin) has it already.
static int add_stack(gstate *s, const uint32_t *st, uint32_t len, gscratch *sc, char *err) {
    if (spend(sc, len + 1, err)) return -1;
    const uint32_t h = hash_stack(st, len);
    size_t j;
    const int found = find_stack(sc->seen, G_SEEN - 1, s->w, st, len, h, &j, sc, err);
    if (found) return found < 0 ? -1 : 0;
    if (s->n_stacks >= G_MAX_STACKS)
        return errf(err, "the grammar is too ambiguous to follow (more than %d parses at once)", G_MAX_STACKS);
    if (state_reserve(s, len + 1)) return errf(err, "out of memory");
    sc->seen[j] = (gseen){sc->gen, h, (uint32_t)s->n};
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
// list sc->work, whose entries are [positions..., len].
static int work_push(gscratch *sc, const uint32_t *base, uint32_t len, uint32_t top, char *err) {
    u32buf *work = &sc->work;
    uint32_t n = len + (top != UINT32_MAX);
    if (n > G_MAX_DEPTH_STACK) return errf(err, "the grammar nests deeper than %d rules", G_MAX_DEPTH_STACK);
    if (spend(sc, n + 1, err)) return -1;
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
        if (++steps > G_MAX_WORK)
            return errf(err, "the grammar is too ambiguous to follow (more than %d expansions for one character)",
                        G_MAX_WORK);
        if (spend(sc, 2 * len + 1, err)) return -1;
        // A stack expanded before for this character adds nothing new: distinct
        // paths to one continuation (x ::= a? | a? | ..., nullable rules in a
        // row) would otherwise expand it once per path, exponentially.
        const uint32_t h = hash_stack(st, len);
        size_t j;
        const int found = find_stack(sc->done_seen, G_DONE - 1, sc->done.w, st, len, h, &j, sc, err);
        if (found < 0) return -1;
        if (found) {
            work->n -= len + 1;
            continue;
        }
        if (sc->n_done < G_DONE / 4) {
            if (buf_reserve(&sc->done, len + 1)) return errf(err, "out of memory");
            sc->done_seen[j] = (gseen){sc->gen, h, (uint32_t)sc->done.n};
            sc->done.w[sc->done.n++] = len;
            memcpy(sc->done.w + sc->done.n, st, len * sizeof *st);
            sc->done.n += len;
            sc->n_done++;
        }
        // top: a reference; below it the return address (when the alternative goes on)
        const uint32_t ref = st[len - 1], rule = g->e[ref].val;
        tmp->n = 0;
        if (buf_reserve(tmp, len)) return errf(err, "out of memory");
        if (len > 1) memcpy(tmp->w, st, (len - 1) * sizeof *st);
        tmp->n = len - 1;
        if (!at_alt_end(g, ref + 1)) tmp->w[tmp->n++] = ref + 1;
        work->n -= len + 1;
        for (uint32_t a = g->rule_start[rule];;) {
            if (work_push(sc, tmp->w, (uint32_t)tmp->n, at_alt_end(g, a) ? UINT32_MAX : a, err)) return -1;
            while (!at_alt_end(g, a)) a++;
            if (g->e[a].type == G_END) break;
            a++;
        }
    }
    return 0;
}

void gscratch_free(gscratch *sc) {
    free(sc->work.w), free(sc->tmp.w), free(sc->done.w), free(sc->seen), free(sc->done_seen);
    *sc = (gscratch){0};
}

static int start_or_advance(const grammar *g, const gstate *src, uint32_t cp, int start, gstate *dst,
                            gscratch *sc, char *err) {
    sc->work.n = 0;
    int rc = state_begin(dst, sc, err);
    if (start) {
        uint32_t pos = g->rule_start[g->root];
        // the root rule as a reference: expand a one-element stack pointing at each alternative
        for (uint32_t a = pos; !rc;) {
            rc = work_push(sc, NULL, 0, at_alt_end(g, a) ? UINT32_MAX : a, err);
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
            rc = work_push(sc, st, len - 1, at_alt_end(g, top + 1) ? UINT32_MAX : top + 1, err);
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

// What a byte makes of the character under way: a whole code point (cp), or
// a partial one (part so far, left more bytes, len in all) whose valid UTF-8
// completions lie in [lo, hi].
typedef struct {
    uint32_t cp, part, lo, hi;
    int left, len;
} gchar;

// Byte b after src's partial character (if any): 1 a whole character, 2 a
// partial one, 0 never valid UTF-8.
static int next_char(const gstate *src, uint8_t b, gchar *c) {
    *c = (gchar){0};
    if (src->part_left == 0) {
        if (b < 0x80) return c->cp = b, 1;
        c->left = b >> 5 == 6 ? 1 : b >> 4 == 14 ? 2 : b >> 3 == 30 ? 3 : 0;
        if (!c->left) return 0;  // a continuation byte or 0xF8..: never UTF-8
        c->part = b & (0x3fu >> c->left), c->len = c->left + 1;
    } else {
        if ((b & 0xc0) != 0x80) return 0;
        c->part = src->part << 6 | (b & 0x3f);
        if (src->part_left == 1) return utf8_ok(c->part, src->part_len) ? (c->cp = c->part, 1) : 0;
        c->left = src->part_left - 1, c->len = src->part_len;
    }
    c->lo = c->part << (6 * c->left), c->hi = c->lo | ((1u << (6 * c->left)) - 1);
    if (c->lo < utf8_min(c->len)) c->lo = utf8_min(c->len);
    if (c->hi > 0x10ffff) c->hi = 0x10ffff;
    if (c->lo >= 0xd800 && c->hi <= 0xdfff) return 0;  // surrogates only
    return c->lo <= c->hi ? 2 : 0;
}

// 1 when the top of stack st[0..len) takes character c (or, partial, some completion of it).
static int top_takes(const grammar *g, const uint32_t *st, uint32_t len, int kind, const gchar *c) {
    if (!len) return 0;
    const gcharset *cs = &g->cs[g->e[st[len - 1]].val];
    return kind == 1 ? gcharset_has(cs, c->cp) : charset_meets(cs, c->lo, c->hi);
}

int gstate_byte(const grammar *g, const gstate *src, uint8_t b, gstate *dst, gscratch *sc, char *err) {
    gchar c;
    const int kind = next_char(src, b, &c);
    if (kind == 0) return state_clear(dst), 0;
    if (kind == 1) return start_or_advance(g, src, c.cp, 0, dst, sc, err);  // (it reads src's stacks alone)
    // partial: the stacks whose top can take one of its completions
    if (state_begin(dst, sc, err)) return -1;
    for (size_t i = 0; i < src->n; i += 1 + src->w[i])
        if (top_takes(g, src->w + i + 1, src->w[i], 2, &c) && add_stack(dst, src->w + i + 1, src->w[i], sc, err))
            return -1;
    dst->part = c.part, dst->part_left = c.left, dst->part_len = c.len;
    return dst->n_stacks > 0;
}

int gstate_takes(const grammar *g, const gstate *src, uint8_t b) {
    gchar c;
    const int kind = next_char(src, b, &c);
    for (size_t i = 0; kind && i < src->n; i += 1 + src->w[i])
        if (top_takes(g, src->w + i + 1, src->w[i], kind, &c)) return 1;
    return 0;
}

int gstate_can_end(const gstate *s) {
    if (s->part_left) return 0;
    for (size_t i = 0; i < s->n; i += 1 + s->w[i])
        if (s->w[i] == 0) return 1;
    return 0;
}

int gstate_must_end(const gstate *s) { return gstate_can_end(s) && s->n_stacks == 1; }
