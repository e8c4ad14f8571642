// tokenizer_vocab.c — loading a tokenizer from a GGUF file's vocabulary
// (tokenizer.h): the pieces and their hash table, scores and types, the
// special tokens (the end-of-generation set, the partition's trie), and for
// byte-level BPE the byte map, the merge table and the pre-tokenizer's
// regexes. Encoding and decoding are tokenizer.c's.
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // qsort_r (the Makefile passes -D_GNU_SOURCE; this keeps other builds working)
#endif
#include "tokenizer_int.h"
#include "mapping.h"  // HUGE_PAGE
#include "util.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

// ---- vocabulary: pieces, hash table ----

// Allocates a big table (released with free). Where the kernel has transparent
// huge pages on request, asks for them: a table filled at random otherwise
// faults in every 4 KB page, and on a virtual machine that costs more than the
// filling itself (a 128k-token vocabulary's merge table: 8 MB, ~25 ms).
static void *alloc_big(size_t bytes) {
#ifdef MADV_HUGEPAGE
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

// The id of the piece s[0..n), or -1.
int32_t tok_lookup(const tokenizer *t, const char *s, size_t n) {
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
int32_t tok_trie_child(const trie_node *trie, int32_t node, uint8_t c) {
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
            int32_t k = tok_trie_child(t->trie, node, p[i]);
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
size_t tok_byte_char(const tokenizer *t, uint8_t b, char *out) {
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
const bpe_merge *tok_merge_find(const tokenizer *t, int32_t a, int32_t b) {
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
            t->byte_tok[b] = tok_lookup(t, s, tok_byte_char(t, (uint8_t)b, s));
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
