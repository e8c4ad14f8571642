// tokenizer.h — text ⇄ token ids, from the vocabulary stored in a GGUF file.
//
// Models: `llama` (SentencePiece: scores, byte fallback <0xNN>, the leading
// space "▁" rule) and `gpt2` (byte-level BPE: merge ranks, GPT-2's byte-to-
// unicode map, a regex pre-tokenizer named by tokenizer.ggml.pre — "default",
// "gpt-2", "llama-bpe", "qwen2", "starcoder" and the names llama.cpp treats as
// the same). Needs PCRE2 (-lpcre2-8).
#ifndef QUILL_TOKENIZER_H
#define QUILL_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"

typedef struct tokenizer tokenizer;

// Reads tokenizer.ggml.* from f (the tokenizer copies what it needs, so f may
// be closed afterwards). Fails with a clear message for an unsupported model.
int tok_load(tokenizer **out, const gguf_file *f, char *err);
void tok_free(tokenizer *t);

int tok_n_vocab(const tokenizer *t);
int tok_bos(const tokenizer *t);       // -1 if none
int tok_eos(const tokenizer *t);       // -1 if none
int tok_add_bos(const tokenizer *t);   // tokenizer.ggml.add_bos_token (default, as in llama.cpp:
                                       // 1 for llama and llama-bpe, 0 for other BPE vocabularies)
int tok_is_eog(const tokenizer *t, int32_t id);  // end of generation (EOS, EOT, ...)
const char *tok_model_name(const tokenizer *t);  // "llama" or "gpt2"
const char *tok_pre_name(const tokenizer *t);    // BPE pre-tokenizer ("llama-bpe", ...); "" for llama

// Encodes len bytes of text. add_bos prepends BOS when the vocabulary has one.
// parse_special: control/user-defined tokens written in the text become single
// tokens; otherwise they are plain text (user-defined tokens are matched either
// way, as in llama.cpp). *ids is malloc'd (caller frees).
// Invalid UTF-8 is encoded byte by byte, never rejected: SentencePiece by byte
// fallback; BPE makes every byte that starts no valid character a word of its
// own (the pre-tokenizer regexes only see valid UTF-8), so decoding gives the
// bytes back exactly. (SentencePiece takes a character's length from its lead
// byte, as llama.cpp does, so a broken sequence before a space swallows the
// "▁" that stands for it: "\xC3 " decodes to "\xC3▁"; and a "▁" written in
// the text decodes as the space it stands for. quill's commands refuse
// prompts that are not UTF-8; for other valid UTF-8 every vocabulary
// round-trips, which tests/fuzz/fuzz_tokenizer.c checks.)
int tok_encode(const tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
               int32_t **ids, int *n_ids, char *err);

// The bytes token `id` stands for when decoded ("▁" → " ", <0x0A> → "\n"; for
// BPE, GPT-2's stand-in characters back to their bytes: "Ġ" → " ").
// Control tokens (BOS/EOS) decode to nothing. Returns the byte count written
// (at most cap) or -1 for an id out of range. `prev` is the previous token
// (-1 at the start): SentencePiece drops the leading space of the first piece
// after BOS. (Precisely: when add_space_prefix, one leading space is dropped at
// the start, prev = -1, and after any control/user-defined/unknown token — the
// places where tok_encode adds one — so decode(encode(s)) == s. BPE ignores prev.)
int tok_decode(const tokenizer *t, int32_t prev, int32_t id, char *buf, size_t cap);

// The raw piece string of id (for `quill tokenize` and info), NUL-terminated;
// "" for an id out of range.
const char *tok_piece(const tokenizer *t, int32_t id);
// The longest raw piece in bytes: a tok_decode buffer of this size never truncates.
int tok_max_piece_len(const tokenizer *t);

// Streaming output that never splits a UTF-8 character: bytes are pushed per
// token; complete characters come back out, an incomplete tail is held.
typedef struct {
    char pending[4];
    int n_pending;
} utf8_stream;
// Appends the completed bytes of (pending + in) to out (cap >= in_len + 4);
// returns the count written. Invalid sequences are passed through unchanged.
size_t utf8_stream_push(utf8_stream *s, const char *in, size_t in_len, char *out);
// Whatever is still held (an incomplete character at the end of output).
size_t utf8_stream_flush(utf8_stream *s, char *out);

#endif
