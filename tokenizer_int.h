// tokenizer_int.h — what tokenizer.c (encoding, decoding) and
// tokenizer_vocab.c (loading a GGUF vocabulary) share: the tokenizer's
// fields and the vocabulary's lookups. Private to those two files.
#ifndef QUILL_TOKENIZER_INT_H
#define QUILL_TOKENIZER_INT_H

#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stddef.h>
#include <stdint.h>

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

static inline const char *piece_ptr(const tokenizer *t, int32_t id) { return t->arena + t->tok[id].off; }

static inline int is_special_type(int type) { return type == TT_CONTROL || type == TT_USER || type == TT_UNKNOWN; }

// The id of the piece s[0..n), or -1.
int32_t tok_lookup(const tokenizer *t, const char *s, size_t n);

// The child of a special-piece trie node under byte c, or -1.
int32_t tok_trie_child(const trie_node *trie, int32_t node, uint8_t c);

// Writes the UTF-8 of byte b's stand-in character (1 or 2 bytes) to out.
size_t tok_byte_char(const tokenizer *t, uint8_t b, char *out);

// The merge of pieces a and b, or NULL (also for a symbol without a piece, id < 0).
const bpe_merge *tok_merge_find(const tokenizer *t, int32_t a, int32_t b);

#endif
