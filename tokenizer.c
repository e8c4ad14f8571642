// tokenizer.c — see tokenizer.h.
//
// Two algorithms, both following llama.cpp so prompts get the ids llama.cpp
// gives them (the golden outputs and its test vectors depend on that).
//
// SentencePiece (`llama`):
//   1. partition: special-token strings in the text become single tokens (only
//      user-defined ones unless parse_special), longest token first (a byte trie
//      of the special pieces finds the few that occur, so there is no pass over
//      the text per special token);
//   2. each remaining raw fragment gets "▁" prepended when add_space_prefix and it
//      starts the text or follows a special token, and every ' ' becomes "▁";
//   3. the fragment is split into UTF-8 characters, and the adjacent pair whose
//      concatenation is the highest-scoring vocabulary piece is merged (leftmost on
//      ties) until no pair is a piece — a priority queue with lazy deletion makes
//      this O(n log n);
//   4. a symbol that is not a piece falls back to its bytes as <0xNN> tokens.
//
// Byte-level BPE (`gpt2`: GPT-2, Llama 3, Qwen2, ...):
//   1. the same partition;
//   2. each raw fragment is cut into words by the pre-tokenizer that
//      tokenizer.ggml.pre names: one to four PCRE2 regexes applied in turn, where
//      every match and every gap between matches becomes a word (llama.cpp's
//      unicode_regex_split). Bytes that are not valid UTF-8 never reach a regex:
//      each is a word of its own, so any byte string encodes and decodes exactly;
//   3. a word starts as one symbol per byte — the piece of GPT-2's printable
//      stand-in character for that byte — and the adjacent pair with the lowest
//      merge rank (tokenizer.ggml.merges) is merged, leftmost on ties, until no
//      pair has a rank; the same priority queue as above;
//   4. decoding maps every stand-in character back to its byte.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // memmem (the Makefile passes -D_GNU_SOURCE; this keeps other builds working)
#endif
#include "tokenizer_int.h"
#include "util.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- growable arrays ----

typedef struct {
    int32_t *v;
    size_t n, cap;
} id_vec;

static int ids_push(id_vec *a, int32_t id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 64;
        if (cap > (size_t)INT_MAX) cap = (size_t)INT_MAX;
        if (a->n == cap) return -1;  // more ids than an int can count
        int32_t *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = id;
    return 0;
}

// A piece of the input: raw text [off, off+len) when id < 0, else special token id.
typedef struct {
    size_t off, len;
    int32_t id;
} frag;

typedef struct {
    frag *v;
    size_t n, cap;
} frag_vec;

static int frags_push(frag_vec *a, size_t off, size_t len, int32_t id) {
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        frag *v = realloc(a->v, cap * sizeof *v);
        if (!v) return -1;
        a->v = v;
        a->cap = cap;
    }
    a->v[a->n++] = (frag){off, len, id};
    return 0;
}

// ---- special-token partition ----

static int is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Splits raw fragment fr around every occurrence of special token id, left to right.
static int split_fragment(const tokenizer *t, const char *text, frag fr, int32_t id, frag_vec *out) {
    const char *piece = piece_ptr(t, id);
    size_t plen = t->tok[id].len;
    size_t off = fr.off, len = fr.len;
    while (len > 0) {
        const char *m = memmem(text + off, len, piece, plen);
        if (!m) return frags_push(out, off, len, -1);
        size_t left = (size_t)(m - (text + off));
        if (left > 0 && frags_push(out, off, left, -1) < 0) return -1;
        if (frags_push(out, 0, 0, id) < 0) return -1;
        off += left + plen;
        len -= left + plen;
        while (t->tok[id].rstrip && len > 0 && is_ascii_space(text[off])) off++, len--;
    }
    return 0;
}

// Whether special piece s is cut out of raw text (user-defined ones always).
static int special_applies(const tokenizer *t, int s, int parse_special) {
    return parse_special || t->tok[t->special[s]].type == TT_USER;
}

// present[s] = 1 for each applicable special piece that occurs in text: one
// walk down the trie from every byte that starts a special piece.
static void find_specials(const tokenizer *t, const char *text, size_t len, int parse_special, uint8_t *present) {
    const uint8_t *u = (const uint8_t *)text;
    for (size_t p = 0; p < len; p++) {
        if (!t->special_first[u[p]]) continue;
        int32_t node = 0;
        for (size_t k = p; k < len && (node = tok_trie_child(t->trie, node, u[k])) >= 0; k++) {
            int s = t->trie[node].special;
            if (s >= 0 && special_applies(t, s, parse_special)) present[s] = 1;
        }
    }
}

// Splits every raw fragment of *out around special piece s (double-buffered in *next).
static int split_all(const tokenizer *t, const char *text, int s, frag_vec *out, frag_vec *next) {
    next->n = 0;
    for (size_t i = 0; i < out->n; i++) {
        int rc = out->v[i].id >= 0 ? frags_push(next, 0, 0, out->v[i].id)
                                   : split_fragment(t, text, out->v[i], t->special[s], next);
        if (rc < 0) return -1;
    }
    frag_vec tmp = *out;
    *out = *next;
    *next = tmp;
    return 0;
}

// Cuts special tokens out of text: *out becomes raw fragments and special ids
// in order. Like llama.cpp, one piece at a time, longest first, each splitting
// all fragments left so far; pieces that do not occur in the text are skipped.
static int partition(const tokenizer *t, const char *text, size_t len, int parse_special, frag_vec *out) {
    if (len > 0 && frags_push(out, 0, len, -1) < 0) return -1;
    if (len == 0 || t->n_special == 0) return 0;
    uint8_t *present = calloc((size_t)t->n_special, 1);
    if (!present) return -1;
    find_specials(t, text, len, parse_special, present);
    frag_vec next = {0};
    int rc = 0;
    for (int s = 0; rc == 0 && s < t->n_special; s++)
        if (present[s]) rc = split_all(t, text, s, out, &next);
    free(next.v);
    free(present);
    return rc;
}

// ---- UTF-8 ----

// Bytes a sequence starting with lead byte c needs, or 0 for a byte that cannot
// start one (continuation bytes, C0/C1, F5..FF).
static int utf8_need(uint8_t c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

// ---- merge queue (SentencePiece and BPE) ----

// A candidate merge of symbol `left` with its right neighbour. Entries go stale
// when either side merges elsewhere; each algorithm recognises that when the
// entry is taken (lazy deletion).
typedef struct {
    uint64_t key;   // priority (the larger key merges first); left = ~low 32 bits
    uint32_t size;  // SentencePiece: bytes of the merged symbol; BPE: unused
    uint32_t pad;   // 16 bytes: four heap children fill one cache line
} mq_pair;

// The candidates come from two queues, the larger key first. The pairs of the
// original symbols (most of them) are sorted once into `init`, which is then
// read in order; pairs that merges create go to a heap. Popping a heap of n
// entries costs cache misses all the way down, so keeping the initial pairs out
// of it makes hostile inputs (10 MB of one letter) markedly faster. BPE reuses
// one queue for every word of a text: n_* reset, buffers kept.
typedef struct {
    uint64_t *init;  // keys of the initial pairs, descending
    size_t n_init, pos_init, cap_init;
    mq_pair *heap;   // 4-ary max-heap by key: children of i are 4i+1 .. 4i+4
    size_t n_heap, cap_heap;
} merge_queue;

static int32_t key_left(uint64_t key) { return (int32_t)~(uint32_t)key; }

static void mq_reset(merge_queue *q) { q->n_init = q->pos_init = q->n_heap = 0; }

static void mq_free(merge_queue *q) {
    free(q->init);
    free(q->heap);
}

// Room for n initial keys.
static int mq_reserve_init(merge_queue *q, size_t n) {
    if (n <= q->cap_init) return 0;
    uint64_t *v = realloc(q->init, n * sizeof *v);
    if (!v) return -1;
    q->init = v;
    q->cap_init = n;
    return 0;
}

static int mq_reserve_heap(merge_queue *q, size_t n) {
    if (n <= q->cap_heap) return 0;
    mq_pair *h = realloc(q->heap, n * sizeof *h);
    if (!h) return -1;
    q->heap = h;
    q->cap_heap = n;
    return 0;
}

static int heap_push(merge_queue *q, mq_pair p) {
    if (q->n_heap == q->cap_heap && mq_reserve_heap(q, q->cap_heap ? q->cap_heap * 2 : 64) < 0) return -1;
    size_t i = q->n_heap++;
    while (i > 0 && p.key > q->heap[(i - 1) / 4].key) {
        q->heap[i] = q->heap[(i - 1) / 4];
        i = (i - 1) / 4;
    }
    q->heap[i] = p;
    return 0;
}

static mq_pair heap_pop(merge_queue *q) {
    mq_pair top = q->heap[0], last = q->heap[--q->n_heap];
    size_t i = 0, n = q->n_heap;
    for (;;) {
        size_t c = 4 * i + 1, best = c;
        if (c >= n) break;
        for (size_t k = c + 1; k < c + 4 && k < n; k++)
            if (q->heap[k].key > q->heap[best].key) best = k;
        if (q->heap[best].key <= last.key) break;
        q->heap[i] = q->heap[best];
        i = best;
    }
    if (n > 0) q->heap[i] = last;
    return top;
}

// Takes the best candidate from either queue; 0 when both are empty. *from_init
// says it is an initial pair (whose size field is not filled in).
static int mq_next(merge_queue *q, mq_pair *p, int *from_init) {
    *from_init = q->pos_init < q->n_init && (q->n_heap == 0 || q->init[q->pos_init] > q->heap[0].key);
    if (*from_init) {
        p->key = q->init[q->pos_init++];
        return 1;
    }
    if (q->n_heap == 0) return 0;
    *p = heap_pop(q);
    return 1;
}

static int cmp_key_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x < y) - (x > y);
}

// Sorts the initial keys descending. They arrive in ascending `left` (=
// descending low half), so a stable sort on the high half alone suffices:
// insertion sort for a short word, qsort for a medium one, and two 16-bit LSD
// radix passes for big inputs. The radix scratch is the (still empty) heap's
// memory, which the merges reuse: fewer fresh pages to fault in.
static int mq_sort_init(merge_queue *q) {
    size_t n = q->n_init;
    uint64_t *v = q->init;
    if (n < 16) {
        for (size_t i = 1; i < n; i++) {
            uint64_t x = v[i];
            size_t j = i;
            for (; j > 0 && v[j - 1] < x; j--) v[j] = v[j - 1];
            v[j] = x;
        }
        return 0;
    }
    if (n < 4096) {
        qsort(v, n, sizeof *v, cmp_key_desc);
        return 0;
    }
    size_t *count = malloc(65536 * sizeof *count);
    if (!count || mq_reserve_heap(q, (n * sizeof *v + sizeof *q->heap - 1) / sizeof *q->heap) < 0)
        return free(count), -1;
    uint64_t *src = v, *dst = (uint64_t *)(void *)q->heap;
    for (int shift = 32; shift < 64; shift += 16) {
        memset(count, 0, 65536 * sizeof *count);
        for (size_t i = 0; i < n; i++) count[0xffff - (src[i] >> shift & 0xffff)]++;  // descending
        size_t sum = 0;
        for (size_t d = 0; d < 65536; d++) sum += count[d], count[d] = sum - count[d];
        for (size_t i = 0; i < n; i++) dst[count[0xffff - (src[i] >> shift & 0xffff)]++] = src[i];
        uint64_t *x = src;
        src = dst, dst = x;
    }
    free(count);  // after an even number of passes the result is back in q->init
    return 0;
}

// ---- SentencePiece merging ----

// A symbol: characters [start, start+len) of the escaped text. Merging absorbs a
// symbol into its left neighbour, so live symbols form a linked list; len 0 = dead.
typedef struct {
    int32_t prev, next;  // neighbours in the list, -1 at the ends
    uint32_t start, len;
} spm_sym;

typedef struct {
    const tokenizer *t;
    const char *text;
    size_t n_text;
    spm_sym *sym;
    int32_t n_sym;
    merge_queue q;  // stale entries are recognised by the size no longer matching
} spm_state;

// Maps a score (not NaN, not -0) to a uint32 with the same order, so heap keys
// compare as integers: flip all bits of negatives, set the sign bit of positives.
static uint32_t score_rank(float f) {
    const uint32_t u = f32_bits(f);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}

// Higher score first, then leftmost.
static uint64_t spm_key(float score, int32_t left) {
    return (uint64_t)score_rank(score) << 32 | (uint32_t)~(uint32_t)left;
}

// The next candidate, with the size of an initial pair (two original
// characters: up to the third one's start) filled in.
static int spm_next(spm_state *st, mq_pair *p) {
    int from_init;
    if (!mq_next(&st->q, p, &from_init)) return 0;
    if (from_init) {
        int32_t left = key_left(p->key);
        p->size = (uint32_t)(left + 2 < st->n_sym ? st->sym[left + 2].start : st->n_text) - st->sym[left].start;
    }
    return 1;
}

// The piece id for symbols left + right, or -1.
static int32_t pair_piece(const spm_state *st, int32_t left, int32_t right) {
    const spm_sym *l = &st->sym[left];
    return tok_lookup(st->t, st->text + l->start, l->len + st->sym[right].len);  // right starts where left ends
}

// Queues the merge of left with right if their concatenation is a piece.
static int try_pair(spm_state *st, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    int32_t id = pair_piece(st, left, right);
    if (id < 0) return 0;
    uint32_t size = st->sym[left].len + st->sym[right].len;
    return heap_push(&st->q, (mq_pair){spm_key(st->t->tok[id].score, left), size, 0});
}

// Every adjacent pair of original characters that forms a piece.
static int spm_init_pairs(spm_state *st) {
    if (mq_reserve_init(&st->q, (size_t)(st->n_sym > 1 ? st->n_sym - 1 : 1)) < 0) return -1;
    for (int32_t i = 1; i < st->n_sym; i++) {
        int32_t id = pair_piece(st, i - 1, i);
        if (id >= 0) st->q.init[st->q.n_init++] = spm_key(st->t->tok[id].score, i - 1);
    }
    return mq_sort_init(&st->q);
}

// Splits text into characters the way llama.cpp does: the length comes from the
// lead byte alone (so invalid UTF-8 still makes progress), clipped at the end.
static void spm_split(spm_state *st) {
    static const uint8_t LEN[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    int32_t k = 0;
    size_t n = st->n_text;
    for (size_t off = 0; off < n; k++) {
        size_t len = LEN[(uint8_t)st->text[off] >> 4];
        if (len > n - off) len = n - off;
        st->sym[k] = (spm_sym){k - 1, off + len < n ? k + 1 : -1, (uint32_t)off, (uint32_t)len};
        off += len;
    }
    st->n_sym = k;
}

// Repeatedly applies the best candidate merge that is still valid.
static int spm_merge(spm_state *st) {
    mq_pair p;
    while (spm_next(st, &p)) {
        int32_t left = key_left(p.key);
        spm_sym *l = &st->sym[left];
        if (l->len == 0 || l->next < 0) continue;
        spm_sym *r = &st->sym[l->next];
        if (l->len + r->len != p.size) continue;  // stale: a side merged elsewhere
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (l->next >= 0) st->sym[l->next].prev = left;
        if (try_pair(st, l->prev, left) < 0 || try_pair(st, left, l->next) < 0) return -1;
    }
    return 0;
}

// Emits one final symbol: its piece, else its bytes as byte tokens, else <unk>.
static int spm_emit(const tokenizer *t, const char *s, uint32_t n, id_vec *out, char *err) {
    int32_t id = tok_lookup(t, s, n);
    if (id >= 0) return ids_push(out, id) < 0 ? errf(err, "out of memory for token ids") : 0;
    int all_bytes = 1;
    for (uint32_t i = 0; i < n; i++) all_bytes &= t->byte_tok[(uint8_t)s[i]] >= 0;
    if (!all_bytes) {
        if (t->unk < 0)
            return errf(err, "text has a character the vocabulary cannot encode (no byte tokens, no <unk>)");
        return ids_push(out, t->unk) < 0 ? errf(err, "out of memory for token ids") : 0;
    }
    for (uint32_t i = 0; i < n; i++)
        if (ids_push(out, t->byte_tok[(uint8_t)s[i]]) < 0) return errf(err, "out of memory for token ids");
    return 0;
}

// Tokenizes already-escaped text (n bytes, n < 2^31) and appends the ids to out.
static int spm_tokenize(const tokenizer *t, const char *text, size_t n, id_vec *out, char *err) {
    if (n == 0) return 0;
    spm_state st = {.t = t, .text = text, .n_text = n};
    st.sym = malloc(n * sizeof *st.sym);
    int rc = st.sym ? 0 : -1;
    if (rc == 0) spm_split(&st);
    if (rc == 0) rc = spm_init_pairs(&st);
    if (rc == 0) rc = spm_merge(&st);
    if (rc < 0) rc = errf(err, "out of memory tokenizing %zu bytes", n);
    for (int32_t i = 0; rc == 0 && i >= 0; i = st.sym[i].next)
        rc = spm_emit(t, text + st.sym[i].start, st.sym[i].len, out, err);
    mq_free(&st.q);
    free(st.sym);
    return rc;
}

// One raw fragment: "▁" prefix when asked, spaces escaped, then merged.
static int spm_encode_raw(const tokenizer *t, const char *s, size_t n, int prefix, id_vec *out, char *err) {
    size_t cap = SPM_SPACE_LEN * (n + 1);
    char *buf = malloc(cap);
    if (!buf) return errf(err, "out of memory escaping %zu bytes of text", n);
    size_t m = 0;
    if (prefix) memcpy(buf, SPM_SPACE, SPM_SPACE_LEN), m = SPM_SPACE_LEN;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') memcpy(buf + m, SPM_SPACE, SPM_SPACE_LEN), m += SPM_SPACE_LEN;
        else buf[m++] = s[i];
    }
    int rc = spm_tokenize(t, buf, m, out, err);
    free(buf);
    return rc;
}

// SentencePiece over the partitioned text: a raw fragment at the start or right
// after a special token gets the "▁" prefix (llama.cpp's rule).
static int spm_encode(const tokenizer *t, const char *text, const frag_vec *fr, id_vec *out, char *err) {
    int prev_special = 1;
    for (size_t i = 0; i < fr->n; i++) {
        const frag *f = &fr->v[i];
        if (f->id >= 0) {
            if (ids_push(out, f->id) < 0) return errf(err, "out of memory for token ids");
            prev_special = 1;
            continue;
        }
        if (spm_encode_raw(t, text + f->off, f->len, t->add_space_prefix && prev_special, out, err) < 0) return -1;
        prev_special = 0;
    }
    return 0;
}

// ---- byte-level BPE encoding ----

// Length of the valid UTF-8 character at s (n >= 1 bytes left), or 0 when s
// starts no valid character (stray continuation byte, overlong form, surrogate,
// above U+10FFFF, truncated) — the same rules PCRE2's UTF check applies.
static size_t utf8_valid_char(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    size_t need = (size_t)utf8_need(c);
    if (need == 0 || need > n) return 0;
    uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range excludes overlongs and surrogates
    if (c == 0xE0) lo = 0xA0;
    else if (c == 0xED) hi = 0x9F;
    else if (c == 0xF0) lo = 0x90;
    else if (c == 0xF4) hi = 0x8F;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t k = 2; k < need; k++)
        if ((s[k] & 0xC0) != 0x80) return 0;
    return need;
}

// A symbol of a word. Symbols start as one per byte, so a symbol's index is the
// offset of its first byte; merging absorbs the right symbol into the left one,
// which takes the merged piece's id. Live symbols form a linked list.
typedef struct {
    int32_t id;          // the piece; -1 when the vocabulary lacks the byte's character; BPE_DEAD once absorbed
    int32_t prev, next;  // neighbours, -1 at the ends
} bpe_sym;

#define BPE_DEAD INT32_MIN

// The state of one tok_encode call (the tokenizer stays read-only, so threads
// may share it). Buffers grow to the longest word and are reused for all words.
typedef struct {
    const tokenizer *t;
    pcre2_match_data *md[TOK_MAX_REGEX];  // one per regex: the levels nest
    bpe_sym *sym;
    size_t cap_sym;
    merge_queue q;  // stale entries are recognised by their pair's rank no longer matching
    char *mapped;   // ignore_merges: a word in stand-in characters, 2 * max_len bytes
    id_vec *out;
    char *err;
} bpe_state;

// Lowest rank first, then leftmost.
static uint64_t bpe_key(int32_t rank, int32_t left) {
    return (uint64_t)~(uint32_t)rank << 32 | (uint32_t)~(uint32_t)left;
}
static int32_t key_rank(uint64_t key) { return (int32_t)~(uint32_t)(key >> 32); }

// Appends the id of a final symbol starting at byte *w. A byte whose stand-in
// character is no piece (not in a real GPT-2 style vocabulary) becomes <unk>.
static int bpe_emit(bpe_state *st, int32_t id, const uint8_t *w) {
    if (id < 0) id = st->t->unk;
    if (id < 0) return errf(st->err, "the vocabulary has no piece for byte 0x%02X and no <unk> token", *w);
    return ids_push(st->out, id) < 0 ? errf(st->err, "out of memory for token ids") : 0;
}

// The piece that is the whole word (in stand-in characters), or -1.
static int32_t bpe_whole_word(bpe_state *st, const uint8_t *w, size_t n) {
    if (n > st->t->max_len) return -1;  // each byte takes at least one byte of the piece
    size_t m = 0;
    for (size_t i = 0; i < n; i++) m += tok_byte_char(st->t, w[i], st->mapped + m);
    return tok_lookup(st->t, st->mapped, m);
}

// One symbol per byte, and the initial candidate pairs, sorted.
static int bpe_setup(bpe_state *st, const uint8_t *w, int32_t n) {
    if ((size_t)n > st->cap_sym) {
        bpe_sym *v = realloc(st->sym, (size_t)n * sizeof *v);
        if (!v) return -1;
        st->sym = v;
        st->cap_sym = (size_t)n;
    }
    for (int32_t i = 0; i < n; i++) st->sym[i] = (bpe_sym){st->t->byte_tok[w[i]], i - 1, i + 1 < n ? i + 1 : -1};
    mq_reset(&st->q);
    if (mq_reserve_init(&st->q, (size_t)n - 1) < 0) return -1;
    for (int32_t i = 1; i < n; i++) {
        const bpe_merge *m = tok_merge_find(st->t, st->sym[i - 1].id, st->sym[i].id);
        if (m) st->q.init[st->q.n_init++] = bpe_key(m->rank, i - 1);
    }
    return mq_sort_init(&st->q);
}

// Queues the merge of left with right if the pair has a rank.
static int bpe_try_pair(bpe_state *st, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const bpe_merge *m = tok_merge_find(st->t, st->sym[left].id, st->sym[right].id);
    return m ? heap_push(&st->q, (mq_pair){bpe_key(m->rank, left), 0, 0}) : 0;
}

// Repeatedly applies the lowest-ranked merge that is still valid. An entry is
// valid when its left symbol lives and forms, with its current right
// neighbour, the pair of the entry's rank (ranks identify pairs uniquely).
static int bpe_merge_word(bpe_state *st) {
    mq_pair p;
    int from_init;
    while (mq_next(&st->q, &p, &from_init)) {
        int32_t left = key_left(p.key);
        bpe_sym *l = &st->sym[left];
        if (l->id == BPE_DEAD || l->next < 0) continue;
        bpe_sym *r = &st->sym[l->next];
        const bpe_merge *m = tok_merge_find(st->t, l->id, r->id);
        if (!m || m->rank != key_rank(p.key)) continue;  // stale: a side merged elsewhere
        l->id = m->id;
        r->id = BPE_DEAD;
        l->next = r->next;
        if (l->next >= 0) st->sym[l->next].prev = left;
        if (bpe_try_pair(st, l->prev, left) < 0 || bpe_try_pair(st, left, l->next) < 0) return -1;
    }
    return 0;
}

// One pre-tokenized word (n < 2^31 bytes) → ids.
static int bpe_word(bpe_state *st, const uint8_t *w, size_t n) {
    const tokenizer *t = st->t;
    if (n == 1) return bpe_emit(st, t->byte_tok[w[0]], w);
    if (t->ignore_merges) {
        int32_t id = bpe_whole_word(st, w, n);
        if (id >= 0) return bpe_emit(st, id, w);
    }
    if (bpe_setup(st, w, (int32_t)n) < 0 || bpe_merge_word(st) < 0)
        return errf(st->err, "out of memory tokenizing a word of %zu bytes", n);
    for (int32_t i = 0; i >= 0; i = st->sym[i].next)
        if (bpe_emit(st, st->sym[i].id, w + i) < 0) return -1;
    return 0;
}

// pcre2_match on the JIT when there is one (the interpreter if the JIT runs out
// of stack). Returns 1 with *ov set, 0 for no match, -1 with err set.
static int re_match(bpe_state *st, int level, const char *s, size_t n, size_t pos, PCRE2_SIZE **ov) {
    const pcre2_code *re = st->t->re[level];
    pcre2_match_data *md = st->md[level];
    pcre2_match_context *mctx = st->t->mctx;
    int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, mctx);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, mctx);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc < 0) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return errf(st->err, "pre-tokenizer '%s': regex %d failed %zu bytes into a %zu-byte run: %s",
                    st->t->pre_name, level, pos, n, (const char *)msg);
    }
    *ov = pcre2_get_ovector_pointer(md);
    return 1;
}

// Runs regex `level` over s[0..n) (valid UTF-8): every match and every gap
// between matches is a piece for the next regex or, after the last, a word.
static int pre_split(bpe_state *st, int level, const char *s, size_t n) {
    if (level == st->t->n_re) return bpe_word(st, (const uint8_t *)s, n);
    size_t pos = 0, done = 0;  // done: the text before it has been handed on
    while (pos < n) {
        PCRE2_SIZE *ov = NULL;
        int rc = re_match(st, level, s, n, pos, &ov);
        if (rc <= 0) {
            if (rc < 0) return -1;
            break;
        }
        if (ov[1] == ov[0]) {  // an empty match makes no piece: step over one character
            size_t k = ov[0] < n ? utf8_valid_char((const uint8_t *)s + ov[0], n - ov[0]) : 1;
            pos = ov[0] + (k ? k : 1);
            continue;
        }
        if (ov[0] > done && pre_split(st, level + 1, s + done, ov[0] - done) < 0) return -1;
        if (pre_split(st, level + 1, s + ov[0], ov[1] - ov[0]) < 0) return -1;
        pos = done = ov[1];
    }
    return n > done ? pre_split(st, level + 1, s + done, n - done) : 0;
}

// One raw fragment: runs of valid UTF-8 go through the pre-tokenizer; every
// byte that starts no valid character is a word of its own.
static int bpe_fragment(bpe_state *st, const char *s, size_t n) {
    const uint8_t *u = (const uint8_t *)s;
    for (size_t pos = 0; pos < n;) {
        size_t end = pos, k;
        while (end < n && (k = utf8_valid_char(u + end, n - end)) > 0) end += k;
        if (end > pos && pre_split(st, 0, s + pos, end - pos) < 0) return -1;
        if (end == n) break;
        if (bpe_word(st, u + end, 1) < 0) return -1;
        pos = end + 1;
    }
    return 0;
}

static void bpe_state_free(bpe_state *st) {
    for (int i = 0; i < TOK_MAX_REGEX; i++) pcre2_match_data_free(st->md[i]);  // NULL is fine
    free(st->sym);
    mq_free(&st->q);
    free(st->mapped);
}

static int bpe_state_init(bpe_state *st, const tokenizer *t, id_vec *out, char *err) {
    *st = (bpe_state){.t = t, .out = out, .err = err};
    st->mapped = malloc(2 * (size_t)t->max_len + 2);
    int ok = st->mapped != NULL;
    for (int i = 0; i < t->n_re; i++) ok &= (st->md[i] = pcre2_match_data_create_from_pattern(t->re[i], NULL)) != NULL;
    return ok ? 0 : errf(err, "out of memory for the pre-tokenizer");
}

// Byte-level BPE over the partitioned text.
static int bpe_encode(const tokenizer *t, const char *text, const frag_vec *fr, id_vec *out, char *err) {
    bpe_state st;
    int rc = bpe_state_init(&st, t, out, err);
    for (size_t i = 0; rc == 0 && i < fr->n; i++) {
        const frag *f = &fr->v[i];
        if (f->id >= 0) rc = ids_push(out, f->id) < 0 ? errf(err, "out of memory for token ids") : 0;
        else rc = bpe_fragment(&st, text + f->off, f->len);
    }
    bpe_state_free(&st);
    return rc;
}

// Symbol indices and offsets are 32-bit, and escaping triples a text of spaces.
#define TOK_MAX_TEXT ((size_t)(INT32_MAX / SPM_SPACE_LEN - 1))

int tok_encode(const tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
               int32_t **ids, int *n_ids, char *err) {
    *ids = NULL;
    *n_ids = 0;
    if (len > TOK_MAX_TEXT)
        return errf(err, "text of %zu bytes is too long to tokenize (max %zu)", len, TOK_MAX_TEXT);
    id_vec out = {0};
    frag_vec fr = {0};
    int rc = 0;
    if (add_bos && t->bos >= 0 && ids_push(&out, t->bos) < 0) rc = errf(err, "out of memory for token ids");
    if (rc == 0 && partition(t, text, len, parse_special, &fr) < 0)
        rc = errf(err, "out of memory splitting special tokens");
    if (rc == 0) {
        switch (t->model) {
        case TOKM_SPM: rc = spm_encode(t, text, &fr, &out, err); break;
        case TOKM_BPE: rc = bpe_encode(t, text, &fr, &out, err); break;
        }
    }
    free(fr.v);
    if (rc < 0) {
        free(out.v);
        return -1;
    }
    *ids = out.v ? out.v : malloc(sizeof *out.v);  // no ids still hands back a pointer to free
    if (!*ids) return errf(err, "out of memory for token ids");
    *n_ids = (int)out.n;
    return 0;
}

// ---- decoding ----

// Copies n bytes of s into buf (at most cap), turning "▁" into ' ' and, with
// strip, dropping one leading space.
static int unescape_piece(const char *s, size_t n, int strip, char *buf, size_t cap) {
    size_t w = 0;
    for (size_t i = 0; i < n && w < cap;) {
        char c = s[i];
        size_t step = 1;
        if (n - i >= SPM_SPACE_LEN && memcmp(s + i, SPM_SPACE, SPM_SPACE_LEN) == 0) c = ' ', step = SPM_SPACE_LEN;
        i += step;
        if (strip && w == 0 && c == ' ') {
            strip = 0;
            continue;
        }
        strip = 0;
        buf[w++] = c;
    }
    return (int)w;
}

// A byte-level piece back to bytes: each stand-in character becomes its byte;
// any other character (a piece from outside GPT-2's alphabet) is copied as is.
// Never longer than the piece.
static int unmap_piece(const tokenizer *t, const char *s, size_t n, char *buf, size_t cap) {
    size_t w = 0;
    for (size_t i = 0; i < n && w < cap;) {
        uint8_t c = (uint8_t)s[i];
        int cp = c < 0x80 ? c : -1;
        size_t len = 1;
        if (c >= 0xC2 && c <= 0xC5 && i + 1 < n && ((uint8_t)s[i + 1] & 0xC0) == 0x80)
            cp = (c & 0x1F) << 6 | ((uint8_t)s[i + 1] & 0x3F), len = 2;  // U+0080 .. U+017F
        int b = cp >= 0 && cp < BPE_N_CHARS ? t->cp_byte[cp] : -1;
        if (b >= 0) {
            buf[w++] = (char)b;
            i += len;
            continue;
        }
        size_t k = c < 0x80 ? 1 : (size_t)utf8_need(c);  // a character outside the alphabet: copied whole
        if (k == 0) k = 1;
        if (k > n - i) k = n - i;
        for (size_t j = 0; j < k && w < cap; j++) buf[w++] = s[i + j];
        i += k;
    }
    return (int)w;
}

static int copy_piece(const char *s, size_t n, char *buf, size_t cap) {
    size_t w = n < cap ? n : cap;
    memcpy(buf, s, w);
    return (int)w;
}

// SentencePiece decoding drops the "▁" the encoder added: the one leading the
// first piece of the text and the first piece after a special token (where the
// encoder adds one too).
static int strips_space(const tokenizer *t, int32_t prev) {
    if (!t->add_space_prefix) return 0;
    return prev < 0 || (prev < t->n_vocab && is_special_type(t->tok[prev].type));
}

int tok_decode(const tokenizer *t, int32_t prev, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= t->n_vocab) return -1;
    const tok_entry *e = &t->tok[id];
    const char *s = piece_ptr(t, id);
    switch (e->type) {
    case TT_NORMAL:
        if (t->model == TOKM_BPE) return unmap_piece(t, s, e->len, buf, cap);
        return unescape_piece(s, e->len, strips_space(t, prev), buf, cap);
    case TT_BYTE:
        if (e->byte < 0) return copy_piece(s, e->len, buf, cap);
        if (cap == 0) return 0;
        buf[0] = (char)e->byte;
        return 1;
    case TT_USER: return copy_piece(s, e->len, buf, cap);
    default: return 0;  // control, unknown, unused: not text
    }
}

// ---- UTF-8 streaming ----

// Length of an incomplete but so-far valid character at the end of s[0..n), or 0.
static size_t utf8_incomplete_tail(const uint8_t *s, size_t n) {
    for (size_t k = 1; k <= 3 && k <= n; k++) {
        uint8_t c = s[n - k];
        if (c >= 0x80 && c < 0xC0) continue;  // continuation: keep looking for the lead
        int need = utf8_need(c);
        return need > (int)k ? k : 0;
    }
    return 0;
}

size_t utf8_stream_push(utf8_stream *s, const char *in, size_t in_len, char *out) {
    size_t n = (size_t)s->n_pending;
    memcpy(out, s->pending, n);
    memmove(out + n, in, in_len);
    n += in_len;
    size_t tail = utf8_incomplete_tail((const uint8_t *)out, n);
    memcpy(s->pending, out + n - tail, tail);
    s->n_pending = (int)tail;
    return n - tail;
}

size_t utf8_stream_flush(utf8_stream *s, char *out) {
    size_t n = (size_t)s->n_pending;
    memcpy(out, s->pending, n);
    s->n_pending = 0;
    return n;
}
