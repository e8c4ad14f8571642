// grammar_vocab.c — which tokens a grammar allows next: a trie of the
// vocabulary's token bytes walked from the matcher's state, and a mask cache.
//
// Tokens are sorted by their bytes and laid out as a trie whose children are
// contiguous. One depth-first walk per step advances the state one byte per
// trie edge; a subtree whose prefix the grammar rejects is never entered, so
// a step costs the nodes of the allowed prefixes, not the vocabulary times
// the token length. The mask is cached by the state (its stacks, sorted, and
// the partial character): inside a JSON string, or between the fields of an
// object, the same states come back again and again.
//
// SentencePiece drops a token's leading space after BOS and control tokens
// (tok_decode's `prev`): the trie holds the bytes with the space, and a walk
// after such a token enters the subtree under ' ' without consuming it. The
// few tokens that keep their space there (the byte token <0x20>, added
// tokens) are then checked one by one.
#include "grammar.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sample.h"
#include "util.h"

#define GC_CACHE 64  // cached masks per generation
// Work bounds (gscratch units: words of stacks copied, hashed or compared) for
// one mask and for one token: real grammars stay far below (a JSON schema's
// first mask over 128k tokens: about 150k); a hostile, highly ambiguous one
// gets an error after ~10-20 ms.
#define GC_MASK_WORK 16000000L
#define GC_TOKEN_WORK 4000000L

typedef struct {
    uint32_t child;          // first child node; children are contiguous
    uint32_t n_child;
    uint32_t tok_lo, tok_hi; // v->ids[tok_lo..tok_hi): tokens whose bytes end here
    uint8_t byte;            // the edge from the parent
} tnode;

struct gvocab {
    const tokenizer *tok;
    int n_vocab;
    tnode *nodes;
    int n_nodes, cap_nodes;
    int32_t *ids;            // token ids sorted by bytes (tokens that decode to text)
    char *bytes;             // every token's bytes, concatenated (sorting only)
    uint32_t *off, *len;     // [n_vocab] each token's bytes in `bytes`
    int32_t *eog;            // end-of-generation ids
    int n_eog;
    int32_t *keep;           // tokens that start with ' ' and keep it where others drop theirs
    int n_keep;
    int32_t space_tok;       // a token decoding to ' ' + more, for the leading-space rule (-1: none)
    int space_len;           // its length with the space
    int max_len;             // longest token in bytes
    char *piece;             // [max_len + 1] decode scratch (single-threaded use)
};

// ---- building the trie ----------------------------------------------------------

static int cmp_tok(const void *a, const void *b, void *arg) {
    const gvocab *sort_v = arg;
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const uint32_t lx = sort_v->len[x], ly = sort_v->len[y];
    int c = memcmp(sort_v->bytes + sort_v->off[x], sort_v->bytes + sort_v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    return lx != ly ? (lx < ly ? -1 : 1) : (x < y ? -1 : x > y);
}

static uint8_t tok_byte(const gvocab *v, int32_t id, uint32_t depth) {
    return (uint8_t)v->bytes[v->off[id] + depth];
}

static int new_nodes(gvocab *v, int n) {
    if (v->n_nodes + n > v->cap_nodes) {
        int cap = v->cap_nodes ? v->cap_nodes : 1024;
        while (cap < v->n_nodes + n) cap *= 2;
        tnode *p = realloc(v->nodes, (size_t)cap * sizeof *p);
        if (!p) return -1;
        v->nodes = p, v->cap_nodes = cap;
    }
    int first = v->n_nodes;
    memset(v->nodes + first, 0, (size_t)n * sizeof *v->nodes);
    v->n_nodes += n;
    return first;
}

// Fills node `node` with the sorted tokens ids[lo..hi), which share their
// first `depth` bytes.
static int build(gvocab *v, int node, uint32_t lo, uint32_t hi, uint32_t depth) {
    uint32_t i = lo;
    while (i < hi && v->len[v->ids[i]] == depth) i++;
    v->nodes[node].tok_lo = lo, v->nodes[node].tok_hi = i;
    int groups = 0;
    for (uint32_t j = i; j < hi; j++)
        if (j == i || tok_byte(v, v->ids[j], depth) != tok_byte(v, v->ids[j - 1], depth)) groups++;
    if (!groups) return 0;
    int first = new_nodes(v, groups);
    if (first < 0) return -1;
    v->nodes[node].child = (uint32_t)first, v->nodes[node].n_child = (uint32_t)groups;
    for (int k = 0; i < hi; k++) {
        uint32_t j = i + 1;
        const uint8_t b = tok_byte(v, v->ids[i], depth);
        while (j < hi && tok_byte(v, v->ids[j], depth) == b) j++;
        v->nodes[first + k].byte = b;
        if (build(v, first + k, i, j, depth + 1)) return -1;
        i = j;
    }
    return 0;
}

// A token that decodes to ' ' and more after a text token: the probe for
// whether `prev` makes the tokenizer drop a leading space.
static void find_space_token(gvocab *v) {
    v->space_tok = -1;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        int with = tok_decode(v->tok, id, id, v->piece, (size_t)v->max_len + 1);
        if (with < 2 || v->piece[0] != ' ') continue;
        int without = tok_decode(v->tok, -1, id, v->piece, (size_t)v->max_len + 1);
        if (without == with - 1) {
            v->space_tok = id, v->space_len = with;
            return;
        }
    }
}

// Every token's bytes as decoded after a text token (`prev` = the probe).
static int collect_bytes(gvocab *v) {
    size_t total = 0, cap = 1 << 16;
    v->bytes = malloc(cap);
    if (!v->bytes) return -1;
    const int32_t prev = v->space_tok;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        int n = tok_decode(v->tok, prev, id, v->piece, (size_t)v->max_len + 1);
        if (n < 0) n = 0;
        if (total + (size_t)n > cap) {
            while (total + (size_t)n > cap) cap *= 2;
            char *b = realloc(v->bytes, cap);
            if (!b) return -1;
            v->bytes = b;
        }
        memcpy(v->bytes + total, v->piece, (size_t)n);
        v->off[id] = (uint32_t)total, v->len[id] = (uint32_t)n;
        total += (size_t)n;
    }
    return 0;
}

int gvocab_new(gvocab **out, const tokenizer *tok, char *err) {
    gvocab *v = calloc(1, sizeof *v);
    *out = NULL;
    if (!v) return errf(err, "out of memory");
    v->tok = tok, v->n_vocab = tok_n_vocab(tok);
    v->max_len = tok_max_piece_len(tok) + 8;
    v->piece = malloc((size_t)v->max_len + 1);
    v->off = malloc((size_t)v->n_vocab * sizeof *v->off);
    v->len = malloc((size_t)v->n_vocab * sizeof *v->len);
    v->ids = malloc((size_t)v->n_vocab * sizeof *v->ids);
    v->eog = malloc((size_t)v->n_vocab * sizeof *v->eog);
    if (!v->piece || !v->off || !v->len || !v->ids || !v->eog) return gvocab_free(v), errf(err, "out of memory");
    find_space_token(v);
    if (collect_bytes(v)) return gvocab_free(v), errf(err, "out of memory");
    int n = 0;
    for (int32_t id = 0; id < v->n_vocab; id++) {
        if (tok_is_eog(tok, id)) v->eog[v->n_eog++] = id;
        else if (v->len[id] > 0) v->ids[n++] = id;  // tokens with no text are never allowed
        if (v->space_tok >= 0 && v->len[id] > 0 && v->bytes[v->off[id]] == ' ' &&
            tok_decode(tok, -1, id, v->piece, (size_t)v->max_len + 1) == (int)v->len[id]) {
            int32_t *k = realloc(v->keep, (size_t)(v->n_keep + 1) * sizeof *k);
            if (!k) return gvocab_free(v), errf(err, "out of memory");
            v->keep = k, v->keep[v->n_keep++] = id;
        }
    }
    qsort_r(v->ids, (size_t)n, sizeof *v->ids, cmp_tok, v);
    if (new_nodes(v, 1) < 0 || build(v, 0, 0, (uint32_t)n, 0)) return gvocab_free(v), errf(err, "out of memory");
    free(v->bytes);
    v->bytes = NULL;
    *out = v;
    return 0;
}

void gvocab_free(gvocab *v) {
    if (!v) return;
    free(v->nodes), free(v->ids), free(v->bytes), free(v->off), free(v->len), free(v->eog), free(v->piece);
    free(v->keep);
    free(v);
}

// ---- one generation ---------------------------------------------------------------

typedef struct {
    uint64_t hash;
    uint32_t *key;
    size_t key_n;
    uint64_t *mask;
    int n_allowed;
    uint64_t used;  // last use (LRU)
} gc_entry;

struct gconstraint {
    const grammar *g;
    const gvocab *v;
    gstate state;           // after the text so far
    gdfa *dfa;              // the states the walks meet, and their transitions
    gstate tmp[2];          // token-by-token checks
    gscratch sc;
    uint64_t *mask;         // [words] the walk's output
    int words;
    gc_entry cache[GC_CACHE];
    uint64_t clock;
    gbuf key;               // the current state's cache key
    uint32_t **order;       // scratch of gdfa_key
    int order_cap;
    double seconds;
    char *err;              // the walk's error buffer
};

int gcon_new(gconstraint **out, const grammar *g, const gvocab *v, char *err) {
    gconstraint *c = calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return errf(err, "out of memory");
    c->g = g, c->v = v, c->words = v->n_vocab / 64 + 1;
    c->dfa = gdfa_new(g);
    c->mask = malloc((size_t)c->words * sizeof *c->mask);
    if (!c->dfa || !c->mask) return gcon_free(c), errf(err, "out of memory");
    if (gcon_reset(c, err)) return gcon_free(c), -1;
    *out = c;
    return 0;
}

void gcon_free(gconstraint *c) {
    if (!c) return;
    gstate_free(&c->state), gstate_free(&c->tmp[0]), gstate_free(&c->tmp[1]);
    for (int i = 0; i < GC_CACHE; i++) free(c->cache[i].key), free(c->cache[i].mask);
    gscratch_free(&c->sc);
    gdfa_free(c->dfa);
    free(c->mask), free(c->key.w), free(c->order);
    free(c);
}

int gcon_reset(gconstraint *c, char *err) {
    c->sc.spent = 0, c->sc.limit = GC_TOKEN_WORK;
    return gstate_start(c->g, &c->state, &c->sc, err);
}

// Marks the tokens of node n's subtree that the grammar allows from state
// sid (the state at node n).
static int walk(gconstraint *c, const tnode *n, int32_t sid) {
    const gvocab *v = c->v;
    for (uint32_t k = 0; k < n->n_child; k++) {
        const tnode *ch = &v->nodes[n->child + k];
        int32_t to;
        if (ch->n_child) {
            if ((to = gdfa_step(c->dfa, sid, ch->byte, &c->sc, c->err)) == -2) return -1;
        } else {  // a leaf: whether its byte is taken, not the state after it
            const int t = gdfa_takes(c->dfa, sid, ch->byte, c->err);
            if (t < 0) return -1;
            to = t ? sid : -1;
        }
        if (to < 0) continue;
        for (uint32_t t = ch->tok_lo; t < ch->tok_hi; t++) c->mask[v->ids[t] >> 6] |= 1ull << (v->ids[t] & 63);
        if (ch->n_child && walk(c, ch, to)) return -1;
    }
    return 0;
}

// 1 when decoding after prev drops a leading space (SentencePiece after BOS
// or a control token).
static int drops_space(const gconstraint *c, int32_t prev) {
    const gvocab *v = c->v;
    if (v->space_tok < 0) return 0;
    return tok_decode(v->tok, prev, v->space_tok, v->piece, (size_t)v->max_len + 1) < v->space_len;
}

static int walk_all(gconstraint *c, int skip_space) {
    const gvocab *v = c->v;
    const tnode *root = &v->nodes[0];
    memset(c->mask, 0, (size_t)c->words * sizeof *c->mask);
    gdfa_trim(c->dfa);
    const int32_t sid = gdfa_intern(c->dfa, &c->state, c->err);
    if (sid < 0) return -1;
    if (!skip_space) return walk(c, root, sid);
    // the ' ' edge is not consumed: its subtree starts from the root's state
    for (uint32_t k = 0; k < root->n_child; k++) {
        const tnode *ch = &v->nodes[root->child + k];
        if (ch->byte != ' ') continue;
        tnode sp = *ch;  // its own token (a lone space) decodes to nothing: not allowed
        sp.tok_lo = sp.tok_hi = 0;
        if (walk(c, &sp, sid)) return -1;
    }
    for (uint32_t k = 0; k < root->n_child; k++) {
        const tnode *ch = &v->nodes[root->child + k];
        if (ch->byte == ' ') continue;
        tnode one = {.child = root->child + k, .n_child = 1};
        if (walk(c, &one, sid)) return -1;
    }
    return 0;
}

// ---- the mask cache ---------------------------------------------------------------

// The cache key of the state: its canonical key and the space rule.
static int make_key(gconstraint *c, int skip_space, uint64_t *hash) {
    gbuf *k = &c->key;
    if (gdfa_key(&c->state, k, &c->order, &c->order_cap)) return -1;
    if (k->n == k->cap) {
        uint32_t *w = realloc(k->w, (k->cap + 1) * sizeof *w);
        if (!w) return -1;
        k->w = w, k->cap++;
    }
    k->w[k->n++] = (uint32_t)skip_space;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < k->n; i++) h = (h ^ k->w[i]) * 1099511628211ull;
    *hash = h;
    return 0;
}

static gc_entry *cache_find(gconstraint *c, uint64_t hash) {
    for (int i = 0; i < GC_CACHE; i++) {
        gc_entry *e = &c->cache[i];
        if (e->mask && e->hash == hash && e->key_n == c->key.n && !memcmp(e->key, c->key.w, c->key.n * 4)) return e;
    }
    return NULL;
}

static void cache_put(gconstraint *c, uint64_t hash, int n_allowed) {
    gc_entry *e = &c->cache[0];
    for (int i = 1; i < GC_CACHE; i++)
        if (c->cache[i].used < e->used) e = &c->cache[i];
    if (!e->mask) e->mask = malloc((size_t)c->words * sizeof *e->mask);
    uint32_t *key = realloc(e->key, (c->key.n ? c->key.n : 1) * sizeof *key);
    if (!e->mask || !key) {  // no room: simply not cached
        free(e->mask), free(key ? key : e->key);
        *e = (gc_entry){0};
        return;
    }
    e->key = key, e->key_n = c->key.n, e->hash = hash, e->n_allowed = n_allowed, e->used = ++c->clock;
    memcpy(e->key, c->key.w, c->key.n * sizeof *key);
    memcpy(e->mask, c->mask, (size_t)c->words * sizeof *e->mask);
}

static int run_token(gconstraint *c, int32_t prev, int32_t id, char *err);

static int popcount_mask(const uint64_t *m, int words) {
    int n = 0;
    for (int i = 0; i < words; i++) n += __builtin_popcountll(m[i]);
    return n;
}

int gcon_mask(gconstraint *c, int32_t prev, const uint64_t **mask, char *err) {
    double t0 = now_sec();
    const int skip = drops_space(c, prev);
    uint64_t hash;
    if (make_key(c, skip, &hash)) return errf(err, "out of memory");
    gc_entry *e = cache_find(c, hash);
    int n;
    if (e) {
        memcpy(c->mask, e->mask, (size_t)c->words * sizeof *c->mask);
        e->used = ++c->clock;
        n = e->n_allowed;
    } else {
        c->err = err;
        c->sc.spent = 0, c->sc.limit = GC_MASK_WORK;
        if (walk_all(c, skip)) return -1;
        for (int i = 0; skip && i < c->v->n_keep; i++) {  // walked as if their space went: check them whole
            const int32_t id = c->v->keep[i];
            const int r = run_token(c, prev, id, err);
            if (r == -1) return -1;
            c->mask[id >> 6] &= ~(1ull << (id & 63));
            if (r >= 0) c->mask[id >> 6] |= 1ull << (id & 63);
        }
        if (gstate_can_end(&c->state))
            for (int i = 0; i < c->v->n_eog; i++) c->mask[c->v->eog[i] >> 6] |= 1ull << (c->v->eog[i] & 63);
        n = popcount_mask(c->mask, c->words);
        cache_put(c, hash, n);
    }
    *mask = c->mask;
    c->seconds += now_sec() - t0;
    return n;
}

int gcon_apply(gconstraint *c, int32_t prev, float *logits, char *err) {
    const uint64_t *m;
    int n = gcon_mask(c, prev, &m, err);
    if (n < 0) return -1;
    double t0 = now_sec();
    for (int i = 0; i < c->v->n_vocab; i++)
        if (!(m[i >> 6] >> (i & 63) & 1)) logits[i] = -INFINITY;
    c->seconds += now_sec() - t0;
    return n;
}

// Runs token id's bytes through the state into c->tmp; returns the index of
// the tmp holding the result, -2 when rejected, -1 on error.
static int run_token(gconstraint *c, int32_t prev, int32_t id, char *err) {
    const gvocab *v = c->v;
    if (id < 0 || id >= v->n_vocab) return -2;
    if (tok_is_eog(v->tok, id)) return gstate_can_end(&c->state) ? -3 : -2;
    int n = tok_decode(v->tok, prev, id, v->piece, (size_t)v->max_len + 1);
    if (n <= 0) return -2;
    const gstate *src = &c->state;
    int cur = 0;
    c->sc.spent = 0, c->sc.limit = GC_TOKEN_WORK;
    for (int i = 0; i < n; i++, cur ^= 1) {
        int r = gstate_byte(c->g, src, (uint8_t)v->piece[i], &c->tmp[cur], &c->sc, err);
        if (r <= 0) return r < 0 ? -1 : -2;
        src = &c->tmp[cur];
    }
    return cur ^ 1;
}

int gcon_allows(gconstraint *c, int32_t prev, int32_t id, char *err) {
    double t0 = now_sec();
    int r = run_token(c, prev, id, err);
    c->seconds += now_sec() - t0;
    return r == -1 ? -1 : r >= 0 || r == -3;
}

int gcon_accept(gconstraint *c, int32_t prev, int32_t id, char *err) {
    double t0 = now_sec();
    int r = run_token(c, prev, id, err);
    if (r == -1) return -1;
    if (r == -2) return errf(err, "grammar: token %d is not allowed here", id);
    if (r >= 0 && gstate_copy(&c->state, &c->tmp[r])) return errf(err, "out of memory");
    c->seconds += now_sec() - t0;
    return 0;
}

int gcon_must_end(const gconstraint *c) { return gstate_must_end(&c->state); }
int gcon_can_end(const gconstraint *c) { return gstate_can_end(&c->state); }
int gcon_save(const gconstraint *c, gstate *to) { return gstate_copy(to, &c->state); }
int gcon_restore(gconstraint *c, const gstate *from) { return gstate_copy(&c->state, from); }
double gcon_seconds(const gconstraint *c) { return c->seconds; }

int gcon_pick(gconstraint *c, sampler *smp, int32_t prev, float *logits, int32_t *out, char *err) {
    // Greedy: the unconstrained argmax is the constrained one whenever the
    // grammar allows it, which saves the mask on most steps.
    if (sampler_is_greedy(smp)) {
        int32_t id = sampler_sample(smp, logits);
        int ok = gcon_allows(c, prev, id, err);
        if (ok < 0) return -1;
        if (ok) return *out = id, 0;
    }
    int n = gcon_apply(c, prev, logits, err);
    if (n < 0) return -1;
    if (n == 0) return errf(err, "the grammar allows no token of the vocabulary here (the text so far cannot go on)");
    *out = sampler_sample(smp, logits);
    return 0;
}
