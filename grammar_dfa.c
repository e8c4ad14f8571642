// grammar_dfa.c — the matcher's states interned and its byte transitions
// memoized, so that the vocabulary walk (grammar_vocab.c) pays a hash lookup
// per trie edge instead of a pushdown expansion.
//
// A state is identified by its canonical key: the partial character, then its
// stacks sorted. The same states come back across trie nodes (every plain
// character inside a JSON string leads to the same one, or to one of a few
// for a bounded length) and across steps, so after the first walks nearly
// every edge is a table hit. The tables only grow; gdfa_trim empties them
// between walks once they pass their bound.
#include "grammar.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

#define DFA_MAX_STATES (1 << 18)
#define DFA_MAX_WORDS (1 << 24)  // key words in all (64 MiB)

struct gdfa {
    const grammar *g;
    gbuf keys;           // every state's key, concatenated
    size_t *off;         // [cap] each state's key in keys
    int n, cap;
    int32_t *slot;       // [n_slot] open addressing over key hashes: state ids, -1 empty
    uint64_t *slot_hash; // [n_slot]
    int n_slot;
    uint64_t *tkey;      // [n_trans] sid << 8 | byte, UINT64_MAX empty
    int32_t *tval;       // [n_trans] the next state, -1: the byte is rejected
    int n_trans, used_trans;
    gstate next;         // a transition's result
    gbuf key;            // scratch key
    uint32_t **order;    // scratch: stacks to sort
    int order_cap;
};

static uint64_t hash_words(const uint32_t *w, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ w[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

gdfa *gdfa_new(const grammar *g) {
    gdfa *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->g = g;
    return d;
}

void gdfa_free(gdfa *d) {
    if (!d) return;
    free(d->keys.w), free(d->off), free(d->slot), free(d->slot_hash), free(d->tkey), free(d->tval);
    free(d->key.w), free(d->order), free(d->next.w);
    free(d);
}

void gdfa_trim(gdfa *d) {
    if (d->n < DFA_MAX_STATES && d->keys.n < DFA_MAX_WORDS) return;
    d->n = 0, d->keys.n = 0, d->used_trans = 0;
    if (d->slot) memset(d->slot, 0xff, (size_t)d->n_slot * sizeof *d->slot);
    if (d->tkey) memset(d->tkey, 0xff, (size_t)d->n_trans * sizeof *d->tkey);
}

static int cmp_stack(const void *a, const void *b) {
    const uint32_t *x = *(uint32_t *const *)a, *y = *(uint32_t *const *)b;
    if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
    return memcmp(x + 1, y + 1, x[0] * sizeof *x);
}

int gdfa_key(const gstate *s, gbuf *k, uint32_t ***order, int *order_cap) {
    if (s->n_stacks > *order_cap) {
        uint32_t **o = realloc(*order, (size_t)s->n_stacks * sizeof *o);
        if (!o) return -1;
        *order = o, *order_cap = s->n_stacks;
    }
    if (k->cap < s->n + 3) {
        uint32_t *w = realloc(k->w, (s->n + 3) * sizeof *w);
        if (!w) return -1;
        k->w = w, k->cap = s->n + 3;
    }
    int n = 0;
    for (size_t i = 0; i < s->n; i += 1 + s->w[i]) (*order)[n++] = s->w + i;
    if (n > 1) qsort(*order, (size_t)n, sizeof **order, cmp_stack);
    k->n = 0;
    k->w[k->n++] = s->part;
    k->w[k->n++] = (uint32_t)(s->part_left | s->part_len << 8);
    k->w[k->n++] = (uint32_t)s->n_stacks;
    for (int i = 0; i < n; i++) {
        memcpy(k->w + k->n, (*order)[i], ((*order)[i][0] + 1) * sizeof *k->w);
        k->n += (*order)[i][0] + 1;
    }
    return 0;
}

static int grow_slots(gdfa *d) {
    int n = d->n_slot ? d->n_slot * 2 : 1024;
    int32_t *slot = malloc((size_t)n * sizeof *slot);
    uint64_t *hash = malloc((size_t)n * sizeof *hash);
    if (!slot || !hash) return free(slot), free(hash), -1;
    memset(slot, 0xff, (size_t)n * sizeof *slot);
    for (int i = 0; i < d->n_slot; i++) {
        if (d->slot[i] < 0) continue;
        size_t j = d->slot_hash[i] & (size_t)(n - 1);
        while (slot[j] >= 0) j = (j + 1) & (size_t)(n - 1);
        slot[j] = d->slot[i], hash[j] = d->slot_hash[i];
    }
    free(d->slot), free(d->slot_hash);
    d->slot = slot, d->slot_hash = hash, d->n_slot = n;
    return 0;
}

// The id of the state whose key is d->key (added when new); -1 out of memory.
static int32_t intern_key(gdfa *d) {
    if (2 * (d->n + 1) > d->n_slot && grow_slots(d)) return -1;
    const uint64_t h = hash_words(d->key.w, d->key.n);
    size_t j = h & (size_t)(d->n_slot - 1);
    for (; d->slot[j] >= 0; j = (j + 1) & (size_t)(d->n_slot - 1)) {
        const int32_t id = d->slot[j];
        const uint32_t *k = d->keys.w + d->off[id];
        const size_t len = (id + 1 < d->n ? d->off[id + 1] : d->keys.n) - d->off[id];
        if (d->slot_hash[j] == h && len == d->key.n && !memcmp(k, d->key.w, len * sizeof *k)) return id;
    }
    if (d->n == d->cap) {
        int cap = d->cap ? d->cap * 2 : 256;
        size_t *off = realloc(d->off, (size_t)cap * sizeof *off);
        if (!off) return -1;
        d->off = off, d->cap = cap;
    }
    if (d->keys.n + d->key.n > d->keys.cap) {
        size_t cap = d->keys.cap ? d->keys.cap : 4096;
        while (cap < d->keys.n + d->key.n) cap *= 2;
        uint32_t *w = realloc(d->keys.w, cap * sizeof *w);
        if (!w) return -1;
        d->keys.w = w, d->keys.cap = cap;
    }
    d->off[d->n] = d->keys.n;
    memcpy(d->keys.w + d->keys.n, d->key.w, d->key.n * sizeof *d->key.w);
    d->keys.n += d->key.n;
    d->slot[j] = d->n, d->slot_hash[j] = h;
    return d->n++;
}

int32_t gdfa_intern(gdfa *d, const gstate *s, char *err) {
    if (gdfa_key(s, &d->key, &d->order, &d->order_cap)) return errf(err, "out of memory");
    int32_t id = intern_key(d);
    return id < 0 ? errf(err, "out of memory") : id;
}

static int grow_trans(gdfa *d) {
    int n = d->n_trans ? d->n_trans * 2 : 4096;
    uint64_t *key = malloc((size_t)n * sizeof *key);
    int32_t *val = malloc((size_t)n * sizeof *val);
    if (!key || !val) return free(key), free(val), -1;
    memset(key, 0xff, (size_t)n * sizeof *key);
    for (int i = 0; i < d->n_trans; i++) {
        if (d->tkey[i] == UINT64_MAX) continue;
        size_t j = (d->tkey[i] * 0x9e3779b97f4a7c15ull >> 20) & (size_t)(n - 1);
        while (key[j] != UINT64_MAX) j = (j + 1) & (size_t)(n - 1);
        key[j] = d->tkey[i], val[j] = d->tval[i];
    }
    free(d->tkey), free(d->tval);
    d->tkey = key, d->tval = val, d->n_trans = n;
    return 0;
}

#define T_TAKEN (-3)  // a transition's value: the byte is taken, the state it leads to not built yet

// The slot of transition key: where it is, or the empty one where it would go.
static size_t trans_slot(const gdfa *d, uint64_t key) {
    size_t j = (key * 0x9e3779b97f4a7c15ull >> 20) & (size_t)(d->n_trans - 1);
    while (d->tkey[j] != UINT64_MAX && d->tkey[j] != key) j = (j + 1) & (size_t)(d->n_trans - 1);
    return j;
}

// The value of transition key, or -4 when not recorded.
static int32_t trans_get(const gdfa *d, uint64_t key) {
    if (!d->n_trans) return -4;
    const size_t j = trans_slot(d, key);
    return d->tkey[j] == key ? d->tval[j] : -4;
}

// Records transition key's value; 0 or -1 out of memory.
static int trans_put(gdfa *d, uint64_t key, int32_t val) {
    if (2 * (d->used_trans + 1) > d->n_trans && grow_trans(d)) return -1;
    const size_t j = trans_slot(d, key);
    if (d->tkey[j] != key) d->tkey[j] = key, d->used_trans++;
    d->tval[j] = val;
    return 0;
}

// State sid as a gstate that reads its key (valid until the next intern).
static gstate state_view(const gdfa *d, int32_t sid) {
    const uint32_t *k = d->keys.w + d->off[sid];
    const size_t len = (sid + 1 < d->n ? d->off[sid + 1] : d->keys.n) - d->off[sid];
    return (gstate){.w = (uint32_t *)k + 3, .n = len - 3, .cap = len - 3, .n_stacks = (int)k[2], .part = k[0],
                    .part_left = (int)(k[1] & 0xff), .part_len = (int)(k[1] >> 8)};
}

// The smallest byte that every stack's top of s takes or refuses as it does
// ASCII byte b: the same stacks advance, so the two lead to the same state.
static uint8_t same_as(const grammar *g, const gstate *s, uint8_t b) {
    uint64_t m[2] = {~0ull, ~0ull};
    for (size_t i = 0; i < s->n; i += 1 + s->w[i]) {
        if (!s->w[i]) continue;
        const uint64_t *a = g->cs[g->e[s->w[i + s->w[i]]].val].ascii;
        const int in = (int)(a[b >> 6] >> (b & 63) & 1);
        m[0] &= in ? a[0] : ~a[0], m[1] &= in ? a[1] : ~a[1];
    }
    return m[0] ? (uint8_t)__builtin_ctzll(m[0]) : (uint8_t)(64 + __builtin_ctzll(m[1]));
}

int32_t gdfa_step(gdfa *d, int32_t sid, uint8_t b, gscratch *sc, char *err) {
    const uint64_t key = (uint64_t)sid << 8 | b;
    int32_t to = trans_get(d, key);
    if (to >= -1) return to;
    // a miss: the matcher proper, from the key seen as a state (or the step
    // of a byte it treats alike, when an earlier one)
    const gstate view = state_view(d, sid);
    const uint8_t rep = b < 0x80 && !view.part_left ? same_as(d->g, &view, b) : b;
    if (rep != b) {
        if ((to = gdfa_step(d, sid, rep, sc, err)) == -2) return -2;
    } else {
        const int r = gstate_byte(d->g, &view, b, &d->next, sc, err);
        if (r < 0) return -2;
        to = -1;
        if (r > 0 && (to = gdfa_intern(d, &d->next, err)) < 0) return -2;
    }
    if (trans_put(d, key, to)) return errf(err, "out of memory"), -2;
    return to;
}

int gdfa_takes(gdfa *d, int32_t sid, uint8_t b, char *err) {
    const uint64_t key = (uint64_t)sid << 8 | b;
    const int32_t to = trans_get(d, key);
    if (to != -4) return to != -1;
    const gstate view = state_view(d, sid);
    const int t = gstate_takes(d->g, &view, b);
    if (trans_put(d, key, t ? T_TAKEN : -1)) return errf(err, "out of memory");
    return t;
}
