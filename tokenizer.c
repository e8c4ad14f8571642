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
// The vocabulary, hash table, special-token partition and decoding are shared.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // memmem, qsort_r (the Makefile passes -D_GNU_SOURCE; this keeps other builds working)
#endif
#include "tokenizer.h"
#include "util.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

// tokenizer.ggml.token_type values (SentencePiece's piece types). Anything else
// is kept as 0, "undefined", and like llama.cpp decodes to nothing.
enum { TT_UNDEFINED = 0, TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };

enum tok_model { TOKM_SPM, TOKM_BPE };

// "▁" (U+2581), SentencePiece's visible stand-in for a space.
#define SPM_SPACE "\xe2\x96\x81"
#define SPM_SPACE_LEN 3

#define TOK_MAX_VOCAB (1 << 24)  // keeps hash-slot arithmetic in 32 bits
#define TOK_MAX_EOG 16
#define TOK_MAX_REGEX 4           // regexes in one pre-tokenizer
#define TOK_MAX_MERGES (1 << 26)  // ranks and hash-slot arithmetic stay in 32 bits
#define BPE_N_CHARS 324           // GPT-2's stand-in characters are U+0021 .. U+0143

typedef struct {
    uint32_t off;   // start of the piece in tokenizer.arena (NUL-terminated there)
    uint32_t len;   // piece length in bytes
    float score;    // merge priority: the higher-scoring pair merges first (no NaN, no -0)
    uint8_t type;   // TT_*
    uint8_t rstrip; // special token that swallows the whitespace after it (phi-3)
    int16_t byte;   // the byte a TT_BYTE piece "<0xNN>" stands for, else -1
} tok_entry;

// One BPE merge "a b" (rank = its line in tokenizer.ggml.merges, lower merges
// first), in an open-addressing table keyed by the ids of a and b.
typedef struct {
    uint64_t key;    // (uint64)id_a << 32 | id_b; MERGE_EMPTY for a free slot
    int32_t rank;
    int32_t id;      // the piece a+b
} bpe_merge;

#define MERGE_EMPTY UINT64_MAX

// The special pieces as a byte trie: one pass over a text finds which of them
// occur, so the partition needs no pass per special token (Qwen2 has ~300).
typedef struct {
    int32_t child, sibling;  // first child, next sibling (node indices; -1 = none)
    int32_t special;         // index into tokenizer.special of the piece ending here, or -1
    uint8_t byte;            // the byte on the edge into this node
} trie_node;

struct tokenizer {
    enum tok_model model;
    const char *model_name;  // tokenizer.ggml.model, for messages and `quill info`
    const char *pre_name;    // BPE: the pre-tokenizer (tokenizer.ggml.pre), else ""
    int n_vocab;
    tok_entry *tok;          // [n_vocab]
    char *arena;             // every piece, NUL-terminated, back to back
    int32_t *slot;           // hash table piece -> id (open addressing, -1 = empty)
    uint32_t slot_mask;      // slot count - 1 (a power of two >= 2 * n_vocab)
    uint32_t max_len;        // longest piece: no merge can produce anything longer
    int32_t byte_tok[256];   // token for a raw byte (SentencePiece's byte fallback; BPE: the
                             // piece of its stand-in character), -1 if none
    int32_t *special;        // ids partitioned out of raw text, longest piece first
    int n_special;
    trie_node *trie;         // the special pieces (node 0 = root), n_trie nodes
    int n_trie;
    uint8_t special_first[256];  // 1 for each byte that starts a special piece
    int32_t bos, eos, unk, pad, eot, eom;  // -1 when the vocabulary has none
    int32_t eog[TOK_MAX_EOG];              // ids that end generation
    int n_eog;
    int add_bos;             // tokenizer.ggml.add_bos_token
    int add_space_prefix;    // tokenizer.ggml.add_space_prefix
    int remove_extra_ws;     // tokenizer.ggml.remove_extra_whitespaces: read, but like
                             // llama.cpp's SPM path, not applied
    // byte-level BPE only
    bpe_merge *merge;        // merge table (open addressing), merge_mask + 1 slots; holds the
    uint32_t merge_mask;     // merges whose halves and result are all pieces
    pcre2_code *re[TOK_MAX_REGEX];  // the pre-tokenizer, applied in order (JIT-compiled
    int n_re;                       // when PCRE2 has a JIT; interpreted otherwise)
    pcre2_match_context *mctx;      // no match limit (read-only while matching)
    int ignore_merges;       // a word that is a piece is emitted whole (Llama 3)
    uint16_t byte_cp[256];   // byte -> GPT-2's stand-in code point (U+0021 .. U+0143)
    int16_t cp_byte[BPE_N_CHARS];  // the inverse, -1 for code points that stand for none
};

// ---- vocabulary: pieces, hash table ----

// Allocates a big table (released with free). Where the kernel has transparent
// huge pages on request, asks for them: a table filled at random otherwise
// faults in every 4 KB page, and on a virtual machine that costs more than the
// filling itself (a 128k-token vocabulary's merge table: 8 MB, ~25 ms).
static void *alloc_big(size_t bytes) {
#ifdef MADV_HUGEPAGE
    enum { HUGE_PAGE = 1 << 21 };
    if (bytes >= HUGE_PAGE) {
        void *p = NULL;
        if (posix_memalign(&p, HUGE_PAGE, bytes) != 0) return NULL;
        (void)madvise(p, bytes, MADV_HUGEPAGE);  // advice only: a refusal changes nothing
        return p;
    }
#endif
    return malloc(bytes);
}

static uint32_t hash_piece(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return (uint32_t)(h ^ (h >> 32));
}

static const char *piece_ptr(const tokenizer *t, int32_t id) { return t->arena + t->tok[id].off; }

// The id of the piece s[0..n), or -1.
static int32_t tok_lookup(const tokenizer *t, const char *s, size_t n) {
    if (n == 0 || n > t->max_len) return -1;
    for (uint32_t i = hash_piece(s, n) & t->slot_mask;; i = (i + 1) & t->slot_mask) {
        int32_t id = t->slot[i];
        if (id < 0) return -1;
        if (t->tok[id].len == n && memcmp(piece_ptr(t, id), s, n) == 0) return id;
    }
}

// Inserts id; fails on a piece that is already there (an ambiguous vocabulary).
static int hash_insert(tokenizer *t, int32_t id, char *err) {
    const char *s = piece_ptr(t, id);
    uint32_t n = t->tok[id].len;
    for (uint32_t i = hash_piece(s, n) & t->slot_mask;; i = (i + 1) & t->slot_mask) {
        int32_t other = t->slot[i];
        if (other < 0) {
            t->slot[i] = id;
            return 0;
        }
        if (t->tok[other].len == n && memcmp(piece_ptr(t, other), s, n) == 0)
            return errf(err, "key 'tokenizer.ggml.tokens': piece '%.*s' appears twice (ids %d and %d)",
                        (int)(n < 40 ? n : 40), s, other, id);
    }
}

// Copies tokenizer.ggml.tokens into one arena and indexes it.
static int load_pieces(tokenizer *t, const gguf_file *f, char *err) {
    const gguf_kv *kv;
    int rc = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STRING, 0, &kv, err);
    if (rc < 0) return -1;
    if (rc == 1) return errf(err, "key 'tokenizer.ggml.tokens' not found: the file has no vocabulary");
    if (kv->arr_n == 0 || kv->arr_n > TOK_MAX_VOCAB)
        return errf(err, "key 'tokenizer.ggml.tokens': expected 1..%d pieces, found %llu", TOK_MAX_VOCAB,
                    (unsigned long long)kv->arr_n);
    t->n_vocab = (int)kv->arr_n;
    uint64_t total = 0;
    const uint8_t *p = kv->arr_data;
    for (int i = 0; i < t->n_vocab; i++) total += gguf_arr_next_str(&p).len + 1;
    if (total > UINT32_MAX) return errf(err, "key 'tokenizer.ggml.tokens': %llu bytes of pieces (max 4 GiB)",
                                        (unsigned long long)total);
    uint32_t n_slots = 2;
    while (n_slots < 2u * (uint32_t)t->n_vocab) n_slots *= 2;
    t->tok = alloc_big((size_t)t->n_vocab * sizeof *t->tok);  // every entry is written below
    t->arena = malloc((size_t)total);
    t->slot = malloc((size_t)n_slots * sizeof *t->slot);
    if (!t->tok || !t->arena || !t->slot) return errf(err, "out of memory for a vocabulary of %d pieces", t->n_vocab);
    memset(t->slot, 0xff, (size_t)n_slots * sizeof *t->slot);  // all -1
    t->slot_mask = n_slots - 1;
    uint32_t off = 0;
    p = kv->arr_data;
    for (int i = 0; i < t->n_vocab; i++) {
        gguf_str s = gguf_arr_next_str(&p);
        memcpy(t->arena + off, s.ptr, s.len);
        t->arena[off + s.len] = '\0';
        t->tok[i] = (tok_entry){.off = off, .len = (uint32_t)s.len, .type = TT_NORMAL, .byte = -1};
        off += (uint32_t)s.len + 1;
        if (s.len > t->max_len) t->max_len = (uint32_t)s.len;
        if (s.len > 0 && hash_insert(t, i, err) < 0) return -1;  // an empty piece can never match
    }
    return 0;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

// "<0xNN>" → NN, else -1.
static int parse_byte_piece(const char *s, uint32_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hex_digit(s[3]), lo = hex_digit(s[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// tokenizer.ggml.scores (f32, optional → 0) and token_type (i32, optional → normal).
static int load_scores_types(tokenizer *t, const gguf_file *f, char *err) {
    const gguf_kv *kv;
    int rc = gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_FLOAT32, (uint64_t)t->n_vocab, &kv, err);
    if (rc < 0) return -1;
    for (int i = 0; rc == 0 && i < t->n_vocab; i++) {
        float s;
        memcpy(&s, kv->arr_data + 4 * (size_t)i, 4);  // array data is not aligned
        t->tok[i].score = isnan(s) ? -INFINITY : s + 0.0f;  // no NaN, no -0: keeps ranks a total order
    }
    rc = gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_INT32, (uint64_t)t->n_vocab, &kv, err);
    if (rc < 0) return -1;
    for (int i = 0; rc == 0 && i < t->n_vocab; i++) {
        int32_t ty;
        memcpy(&ty, kv->arr_data + 4 * (size_t)i, 4);
        t->tok[i].type = ty >= TT_NORMAL && ty <= TT_BYTE ? (uint8_t)ty : TT_UNDEFINED;
    }
    for (int i = 0; i < t->n_vocab; i++)
        if (t->tok[i].type == TT_BYTE) t->tok[i].byte = (int16_t)parse_byte_piece(piece_ptr(t, i), t->tok[i].len);
    return 0;
}

// Reads an optional token id. UINT32_MAX is how converters write "none".
static int load_id(const tokenizer *t, const gguf_file *f, const char *key, int32_t *id, char *err) {
    uint32_t v;
    int rc = gguf_get_u32(f, key, &v, err);
    if (rc < 0) return -1;
    if (rc == 1) return 0;
    if (v == UINT32_MAX) {
        *id = -1;
        return 0;
    }
    if (v >= (uint32_t)t->n_vocab)
        return errf(err, "key '%s': token id %u is out of range (n_vocab %d)", key, v, t->n_vocab);
    *id = (int32_t)v;
    return 0;
}

static int load_flag(const gguf_file *f, const char *key, int *out, char *err) {
    int rc = gguf_get_bool(f, key, out, err);
    return rc < 0 ? -1 : 0;
}

// Special ids and flags, over the model's defaults already in t.
static int load_specials(tokenizer *t, const gguf_file *f, char *err) {
    const struct { const char *key; int32_t *id; } IDS[] = {
        {"tokenizer.ggml.bos_token_id", &t->bos},     {"tokenizer.ggml.eos_token_id", &t->eos},
        {"tokenizer.ggml.unknown_token_id", &t->unk}, {"tokenizer.ggml.padding_token_id", &t->pad},
        {"tokenizer.ggml.eot_token_id", &t->eot},     {"tokenizer.ggml.eom_token_id", &t->eom},
    };
    for (size_t i = 0; i < sizeof IDS / sizeof IDS[0]; i++)
        if (load_id(t, f, IDS[i].key, IDS[i].id, err) < 0) return -1;
    if (load_flag(f, "tokenizer.ggml.add_bos_token", &t->add_bos, err) < 0 ||
        load_flag(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix, err) < 0 ||
        load_flag(f, "tokenizer.ggml.remove_extra_whitespaces", &t->remove_extra_ws, err) < 0)
        return -1;
    if (t->add_bos && t->bos < 0)
        return errf(err, "key 'tokenizer.ggml.add_bos_token' is true, but the vocabulary has no BOS token");
    return 0;
}

// Token ids by their text, for the ids GGUF files do not name (as llama.cpp does).
static int32_t find_first(const tokenizer *t, const char *const *names, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int32_t id = tok_lookup(t, names[i], strlen(names[i]));
        if (id >= 0) return id;
    }
    return -1;
}

static void add_eog(tokenizer *t, int32_t id) {
    if (id < 0 || t->n_eog == TOK_MAX_EOG) return;
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    t->eog[t->n_eog++] = id;
}

// A piece llama.cpp recognises by its text as ending a turn is a control token
// whatever type the file gave it: llama.cpp adds its control flag to the type,
// and a control flag wins over the others, so even a user-defined piece (phi-3's
// "</s>") is then only parsed as special and decodes to nothing.
static int32_t mark_control(tokenizer *t, int32_t id) {
    if (id >= 0) t->tok[id].type = TT_CONTROL;
    return id;
}

// End of generation: EOS, EOT, EOM, and the end-of-turn pieces chat models use
// (llama.cpp's list, found by text): Gemma's <end_of_turn>, Phi-3's <|end|>,
// gpt-oss's <|return|> and <|call|>, ... In gpt-oss's harmony format <|end|>
// closes a message, not the turn (the analysis message ends in it, and the
// final answer follows): a vocabulary with <|return|> and <|call|> does not
// end generation at <|end|>, as llama.cpp decides.
static void build_eog(tokenizer *t) {
    static const char *const EOT[] = {"<|eot_id|>",      "<|im_end|>", "<|end|>", "<end_of_turn>",
                                      "<|endoftext|>",   "<|end_of_text|>", "<EOT>", "_<EOT>",
                                      "<end_of_utterance>", "<|return|>", "<|call|>"};
    static const char *const EOM[] = {"<|eom_id|>"};
    static const char *const EOG[] = {"</s>"};  // llama.cpp ends generation at these too, but not as EOT
    size_t n_eot = sizeof EOT / sizeof EOT[0], n_eog = sizeof EOG / sizeof EOG[0];
    if (t->eot < 0) t->eot = find_first(t, EOT, n_eot);
    if (t->eom < 0) t->eom = find_first(t, EOM, 1);
    add_eog(t, t->eos);
    add_eog(t, t->eot);
    add_eog(t, t->eom);
    add_eog(t, mark_control(t, find_first(t, EOM, 1)));
    for (size_t i = 0; i < n_eot; i++) add_eog(t, mark_control(t, find_first(t, &EOT[i], 1)));
    for (size_t i = 0; i < n_eog; i++) add_eog(t, mark_control(t, find_first(t, &EOG[i], 1)));
    static const char *const HARMONY[] = {"<|return|>", "<|call|>", "<|end|>"};
    const int32_t ret = find_first(t, &HARMONY[0], 1), call = find_first(t, &HARMONY[1], 1),
                  end = find_first(t, &HARMONY[2], 1);
    if (ret >= 0 && call >= 0 && end >= 0)
        for (int i = 0; i < t->n_eog; i++)
            if (t->eog[i] == end) t->eog[i--] = t->eog[--t->n_eog];
}

static int is_special_type(int type) { return type == TT_CONTROL || type == TT_USER || type == TT_UNKNOWN; }

// qsort over ids: longest piece first (ties by id, so the order is deterministic).
static int cmp_special(const void *a, const void *b, void *ctx) {
    const tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->tok[x].len != t->tok[y].len) return t->tok[x].len > t->tok[y].len ? -1 : 1;
    return (x > y) - (x < y);
}

// llama.cpp marks a phi-3 vocabulary's special tokens (but <unk>, <s> and
// <|endoftext|>) as swallowing the whitespace that follows them in a prompt; it
// recognises phi-3 by general.name.
static void apply_phi3_rstrip(tokenizer *t, const gguf_file *f) {
    gguf_str name;
    if (gguf_get_str(f, "general.name", &name, NULL) != 0) return;
    char low[64];
    size_t n = name.len < sizeof low - 1 ? name.len : sizeof low - 1;
    for (size_t i = 0; i < n; i++) {
        char c = name.ptr[i];
        low[i] = c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    low[n] = '\0';
    if (!strstr(low, "phi-3") && !strstr(low, "phi3")) return;
    for (int i = 0; i < t->n_special; i++) t->tok[t->special[i]].rstrip = 1;
    static const char *const KEEP[] = {"<unk>", "<s>", "<|endoftext|>"};
    for (size_t i = 0; i < sizeof KEEP / sizeof KEEP[0]; i++) {
        int32_t id = tok_lookup(t, KEEP[i], strlen(KEEP[i]));
        if (id >= 0) t->tok[id].rstrip = 0;
    }
}

// The child of node under byte c, or -1.
static int32_t trie_child(const trie_node *trie, int32_t node, uint8_t c) {
    int32_t k = trie[node].child;
    while (k >= 0 && trie[k].byte != c) k = trie[k].sibling;
    return k;
}

// Inserts every special piece into the trie (at most one node per piece byte).
static int build_trie(tokenizer *t, char *err) {
    size_t cap = 1;
    for (int s = 0; s < t->n_special; s++) cap += t->tok[t->special[s]].len;
    if (cap > INT32_MAX) return errf(err, "%zu bytes of special pieces (max %d)", cap, INT32_MAX);
    t->trie = malloc(cap * sizeof *t->trie);
    if (!t->trie) return errf(err, "out of memory for %d special tokens", t->n_special);
    t->trie[0] = (trie_node){-1, -1, -1, 0};
    t->n_trie = 1;
    for (int s = 0; s < t->n_special; s++) {
        const uint8_t *p = (const uint8_t *)piece_ptr(t, t->special[s]);
        int32_t node = 0;
        for (uint32_t i = 0; i < t->tok[t->special[s]].len; i++) {
            int32_t k = trie_child(t->trie, node, p[i]);
            if (k < 0) {
                k = t->n_trie++;
                t->trie[k] = (trie_node){-1, t->trie[node].child, -1, p[i]};
                t->trie[node].child = k;
            }
            node = k;
        }
        t->trie[node].special = s;
        t->special_first[p[0]] = 1;
    }
    return 0;
}

// Control, user-defined and unknown pieces are cut out of raw text before
// merging (the user-defined ones always, the others only with parse_special).
static int build_special_list(tokenizer *t, const gguf_file *f, char *err) {
    int n = 0;
    for (int i = 0; i < t->n_vocab; i++) n += is_special_type(t->tok[i].type) && t->tok[i].len > 0;
    t->special = malloc(((size_t)n + 1) * sizeof *t->special);
    if (!t->special) return errf(err, "out of memory for %d special tokens", n);
    for (int i = 0; i < t->n_vocab; i++)
        if (is_special_type(t->tok[i].type) && t->tok[i].len > 0) t->special[t->n_special++] = i;
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, cmp_special, t);
    apply_phi3_rstrip(t, f);
    return build_trie(t, err);
}

// ---- byte-level BPE: byte map, merges, pre-tokenizer ----

// GPT-2's byte-to-unicode map: the printable Latin-1 bytes stand for themselves,
// the 68 others (controls, space, DEL, NBSP, soft hyphen) for U+0100 onwards in
// byte order, so that every piece is printable text without spaces.
static void build_byte_map(tokenizer *t) {
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        t->byte_cp[b] = (uint16_t)(printable ? b : next++);
    }
    for (int c = 0; c < BPE_N_CHARS; c++) t->cp_byte[c] = -1;
    for (int b = 0; b < 256; b++) t->cp_byte[t->byte_cp[b]] = (int16_t)b;
}

// Writes the UTF-8 of byte b's stand-in character (1 or 2 bytes) to out.
static size_t byte_char(const tokenizer *t, uint8_t b, char *out) {
    uint16_t cp = t->byte_cp[b];
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static uint64_t merge_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }
static uint32_t hash_key(uint64_t key) {  // murmur3's 64-bit finalizer: every key bit reaches the low bits
    key ^= key >> 33;
    key *= 0xff51afd7ed558ccdull;
    key ^= key >> 33;
    key *= 0xc4ceb9fe1a85ec53ull;
    return (uint32_t)(key ^ key >> 33);
}

// The merge of pieces a and b, or NULL (also for a symbol without a piece, id < 0).
static const bpe_merge *merge_find(const tokenizer *t, int32_t a, int32_t b) {
    if (a < 0 || b < 0) return NULL;
    uint64_t key = merge_key(a, b);
    for (uint32_t i = hash_key(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const bpe_merge *m = &t->merge[i];
        if (m->key == key) return m;
        if (m->key == MERGE_EMPTY) return NULL;
    }
}

// Adds a merge unless its pair is already there: the first line wins, as in llama.cpp.
static void merge_insert(tokenizer *t, bpe_merge m) {
    for (uint32_t i = hash_key(m.key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        if (t->merge[i].key == m.key) return;
        if (t->merge[i].key == MERGE_EMPTY) {
            t->merge[i] = m;
            return;
        }
    }
}

// Resolves the merge line s = "a b" (split at the first space after the first
// byte, as llama.cpp does) into the ids of a, b and a+b; 0 when one is not a
// piece (such a merge could never apply). buf holds max_len bytes.
static int parse_merge(const tokenizer *t, gguf_str s, char *buf, int32_t ids[3]) {
    const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
    if (!sp) return 0;
    size_t na = (size_t)(sp - s.ptr), nb = s.len - na - 1;
    if (na + nb > t->max_len) return 0;
    ids[0] = tok_lookup(t, s.ptr, na);
    ids[1] = tok_lookup(t, sp + 1, nb);
    if (ids[0] < 0 || ids[1] < 0) return 0;
    memcpy(buf, s.ptr, na);
    memcpy(buf + na, sp + 1, nb);
    ids[2] = tok_lookup(t, buf, na + nb);
    return ids[2] >= 0;
}

// tokenizer.ggml.merges → the merge table (load factor at most 2/3).
static int load_merges(tokenizer *t, const gguf_file *f, char *err) {
    const gguf_kv *kv;
    int rc = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_STRING, 0, &kv, err);
    if (rc < 0) return -1;
    if (rc == 1) return errf(err, "key 'tokenizer.ggml.merges' not found: a gpt2 vocabulary needs its merges");
    if (kv->arr_n > TOK_MAX_MERGES)
        return errf(err, "key 'tokenizer.ggml.merges': %llu merges (max %d)", (unsigned long long)kv->arr_n,
                    TOK_MAX_MERGES);
    uint32_t n_slots = 2;
    while (n_slots < kv->arr_n + kv->arr_n / 2 + 1) n_slots *= 2;
    t->merge = alloc_big((size_t)n_slots * sizeof *t->merge);
    char *buf = malloc((size_t)t->max_len + 1);
    if (!t->merge || !buf) {
        free(buf);
        return errf(err, "out of memory for %llu merges", (unsigned long long)kv->arr_n);
    }
    memset(t->merge, 0xff, (size_t)n_slots * sizeof *t->merge);  // every key MERGE_EMPTY
    t->merge_mask = n_slots - 1;
    // Each insert lands at a random slot of a table far bigger than the cache:
    // prefetch it and insert it a few merges later, when the line has arrived.
    enum { AHEAD = 8 };
    bpe_merge ring[AHEAD];
    const uint8_t *p = kv->arr_data;
    uint64_t k = 0;  // merges parsed into the ring
    for (uint64_t i = 0; i < kv->arr_n; i++) {
        int32_t ids[3];
        if (!parse_merge(t, gguf_arr_next_str(&p), buf, ids)) continue;
        bpe_merge m = {merge_key(ids[0], ids[1]), (int32_t)i, ids[2]};
        __builtin_prefetch(&t->merge[hash_key(m.key) & t->merge_mask], 1);
        if (k >= AHEAD) merge_insert(t, ring[k % AHEAD]);  // in rank order: the first line of a pair wins
        ring[k++ % AHEAD] = m;
    }
    for (uint64_t j = k > AHEAD ? k - AHEAD : 0; j < k; j++) merge_insert(t, ring[j % AHEAD]);
    free(buf);
    return 0;
}

// Pre-tokenizer regexes, as llama.cpp writes them (it spells the original
// case-insensitive (?i:'s|'t|...) out as '[sS]|'[tT]|...). Applied in order;
// RE_DEFAULT is what llama.cpp uses when a file names no pre-tokenizer.
enum { RE_DEFAULT, RE_GPT2, RE_LLAMA3, RE_QWEN2, RE_STARCODER };

#define RE_GPT2_WORDS "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_CONTRACTIONS_CI "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_LLAMA3_TAIL "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

static const char *const PRE_REGEX[][TOK_MAX_REGEX] = {
    [RE_DEFAULT] = {"[\\p{P}\\$\\+<=>\\^~\\|]+", RE_GPT2_WORDS, "\\p{N}+", "[0-9][0-9][0-9]"},
    [RE_GPT2] = {RE_GPT2_WORDS},
    [RE_LLAMA3] = {RE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}" RE_LLAMA3_TAIL},
    [RE_QWEN2] = {RE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}" RE_LLAMA3_TAIL},
    [RE_STARCODER] = {"\\p{N}", RE_GPT2_WORDS},
};

// tokenizer.ggml.pre names → regexes and llama.cpp's per-name flags.
static const struct {
    const char *name;
    uint8_t re;
    uint8_t ignore_merges;  // a word that is a piece is emitted whole
    uint8_t add_bos;        // default for tokenizer.ggml.add_bos_token
} PRE_TYPES[] = {
    {"default", RE_DEFAULT, 0, 0},     {"llama-bpe", RE_LLAMA3, 1, 1},   {"llama3", RE_LLAMA3, 1, 1},
    {"llama-v3", RE_LLAMA3, 1, 1},     {"falcon3", RE_LLAMA3, 1, 1},     {"dbrx", RE_LLAMA3, 0, 0},
    {"smaug-bpe", RE_LLAMA3, 0, 0},    {"qwen2", RE_QWEN2, 0, 0},        {"deepseek-r1-qwen", RE_QWEN2, 0, 0},
    {"stablelm2", RE_QWEN2, 0, 0},     {"megrez", RE_QWEN2, 0, 0},       {"gpt-2", RE_GPT2, 0, 0},
    {"phi-2", RE_GPT2, 0, 0},          {"mpt", RE_GPT2, 0, 0},           {"olmo", RE_GPT2, 0, 0},
    {"jais", RE_GPT2, 0, 0},           {"starcoder", RE_STARCODER, 0, 0}, {"refact", RE_STARCODER, 0, 0},
    {"command-r", RE_STARCODER, 0, 0}, {"smollm", RE_STARCODER, 0, 0},   {"codeshell", RE_STARCODER, 0, 0},
};

// Compiles the regexes of one pre-tokenizer, JIT-compiling each where PCRE2 can.
// PCRE2's default match limit (10 million backtracks) would fail a run of more
// than 10 million whitespace characters: \s*[\r\n]+ backtracks once per
// character before \s+(?!\S) takes the whole run. Such backtracking is linear
// (a run is scanned by the match that consumes it), so the limit is lifted.
static int compile_pre(tokenizer *t, int which, char *err) {
    t->mctx = pcre2_match_context_create(NULL);
    if (!t->mctx) return errf(err, "out of memory for the pre-tokenizer");
    pcre2_set_match_limit(t->mctx, UINT32_MAX);
    for (int i = 0; i < TOK_MAX_REGEX && PRE_REGEX[which][i]; i++) {
        int code;
        PCRE2_SIZE off;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)PRE_REGEX[which][i], PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP,
                                       &code, &off, NULL);
        if (!re) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(code, msg, sizeof msg);
            return errf(err, "pre-tokenizer '%s': regex %d does not compile at offset %zu: %s", t->pre_name, i,
                        (size_t)off, (const char *)msg);
        }
        t->re[t->n_re++] = re;
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // without a JIT, pcre2_match interprets
    }
    return 0;
}

// tokenizer.ggml.pre (absent: "default", as in llama.cpp) → pre-tokenizer and flags.
static int load_pre(tokenizer *t, const gguf_file *f, char *err) {
    gguf_str pre = {"default", 7};
    if (gguf_get_str(f, "tokenizer.ggml.pre", &pre, err) < 0) return -1;
    for (size_t i = 0; i < sizeof PRE_TYPES / sizeof PRE_TYPES[0]; i++) {
        if (!gguf_str_eq(pre, PRE_TYPES[i].name)) continue;
        t->pre_name = PRE_TYPES[i].name;
        t->ignore_merges = PRE_TYPES[i].ignore_merges;
        t->add_bos = PRE_TYPES[i].add_bos;
        return compile_pre(t, PRE_TYPES[i].re, err);
    }
    return errf(err, "key 'tokenizer.ggml.pre': pre-tokenizer '%.*s' not supported (supported: default, gpt-2, "
                     "llama-bpe, qwen2, starcoder and names llama.cpp treats as the same)",
                (int)(pre.len < 64 ? pre.len : 64), pre.ptr);
}

static int load_bpe(tokenizer *t, const gguf_file *f, char *err) {
    build_byte_map(t);
    if (load_pre(t, f, err) < 0) return -1;
    return load_merges(t, f, err);
}

// The token for a raw byte: SentencePiece's "<0xNN>" byte fallback (else the
// one-byte piece); byte-level BPE's piece of the byte's stand-in character.
static void build_byte_table(tokenizer *t) {
    for (int b = 0; b < 256; b++) {
        char s[8];
        if (t->model == TOKM_BPE) {
            t->byte_tok[b] = tok_lookup(t, s, byte_char(t, (uint8_t)b, s));
            continue;
        }
        snprintf(s, sizeof s, "<0x%02X>", b);
        char raw = (char)b;
        int32_t id = tok_lookup(t, s, 6);
        t->byte_tok[b] = id >= 0 ? id : tok_lookup(t, &raw, 1);
    }
}

// Which algorithm tokenizer.ggml.model names.
static int find_model(tokenizer *t, gguf_str model, char *err) {
    t->pre_name = "";
    if (gguf_str_eq(model, "llama")) {
        t->model = TOKM_SPM;
        t->model_name = "llama";
        return 0;
    }
    if (gguf_str_eq(model, "gpt2")) {
        t->model = TOKM_BPE;
        t->model_name = "gpt2";
        return 0;
    }
    return errf(err, "tokenizer model '%.*s' not supported yet (supported: llama, gpt2)",
                (int)(model.len < 64 ? model.len : 64), model.ptr);
}

// Per-model defaults, before the file's own keys override them (llama.cpp's).
static void set_model_defaults(tokenizer *t) {
    t->pad = t->eot = t->eom = -1;
    t->remove_extra_ws = 0;
    switch (t->model) {
    case TOKM_SPM:
        t->bos = t->n_vocab > 1 ? 1 : -1;
        t->eos = t->n_vocab > 2 ? 2 : -1;
        t->unk = 0;
        t->add_bos = 1;
        t->add_space_prefix = 1;
        break;
    case TOKM_BPE:  // add_bos comes from the pre-tokenizer (load_pre)
        t->bos = t->eos = t->n_vocab > 11 ? 11 : -1;
        t->unk = -1;
        t->add_bos = 0;
        t->add_space_prefix = 0;
        break;
    }
}

// Everything after the model name, in dependency order.
static int load_all(tokenizer *t, const gguf_file *f, char *err) {
    if (load_pieces(t, f, err) < 0) return -1;
    set_model_defaults(t);
    if (load_scores_types(t, f, err) < 0) return -1;
    if (t->model == TOKM_BPE && load_bpe(t, f, err) < 0) return -1;
    if (load_specials(t, f, err) < 0) return -1;
    build_eog(t);  // before the special list: it may turn end-of-turn pieces into control tokens
    if (build_special_list(t, f, err) < 0) return -1;
    build_byte_table(t);
    return 0;
}

int tok_load(tokenizer **out, const gguf_file *f, char *err) {
    *out = NULL;
    gguf_str model;
    int rc = gguf_get_str(f, "tokenizer.ggml.model", &model, err);
    if (rc < 0) return -1;
    if (rc == 1) return errf(err, "key 'tokenizer.ggml.model' not found: the file has no tokenizer");
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return errf(err, "out of memory for the tokenizer");
    if (find_model(t, model, err) < 0 || load_all(t, f, err) < 0) {
        tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void tok_free(tokenizer *t) {
    if (!t) return;
    free(t->tok);
    free(t->arena);
    free(t->slot);
    free(t->special);
    free(t->trie);
    free(t->merge);
    for (int i = 0; i < t->n_re; i++) pcre2_code_free(t->re[i]);
    pcre2_match_context_free(t->mctx);  // NULL is fine
    free(t);
}

int tok_n_vocab(const tokenizer *t) { return t->n_vocab; }
int tok_bos(const tokenizer *t) { return t->bos; }
int tok_eos(const tokenizer *t) { return t->eos; }
int tok_add_bos(const tokenizer *t) { return t->add_bos; }
const char *tok_model_name(const tokenizer *t) { return t->model_name; }
const char *tok_pre_name(const tokenizer *t) { return t->pre_name; }
int tok_max_piece_len(const tokenizer *t) { return (int)t->max_len; }

int tok_is_eog(const tokenizer *t, int32_t id) {
    for (int i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return 1;
    return 0;
}

const char *tok_piece(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? piece_ptr(t, id) : "";
}

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
        for (size_t k = p; k < len && (node = trie_child(t->trie, node, u[k])) >= 0; k++) {
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
    uint32_t u;
    memcpy(&u, &f, 4);
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
    for (size_t i = 0; i < n; i++) m += byte_char(st->t, w[i], st->mapped + m);
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
        const bpe_merge *m = merge_find(st->t, st->sym[i - 1].id, st->sym[i].id);
        if (m) st->q.init[st->q.n_init++] = bpe_key(m->rank, i - 1);
    }
    return mq_sort_init(&st->q);
}

// Queues the merge of left with right if the pair has a rank.
static int bpe_try_pair(bpe_state *st, int32_t left, int32_t right) {
    if (left < 0 || right < 0) return 0;
    const bpe_merge *m = merge_find(st->t, st->sym[left].id, st->sym[right].id);
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
        const bpe_merge *m = merge_find(st->t, l->id, r->id);
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
