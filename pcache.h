// pcache.h — the prompt cache: a sequence's KV state on disk, zstd-compressed.
//
// `quill --prompt-cache FILE` restores the longest common token prefix of the
// file and the prompt and prefills only the rest; the chat REPL's /save and
// /load use the same files to resume a conversation.
//
// File format, version 1 (integers little-endian):
//   offset size
//      0    8  magic "QUILLPC\n"
//      8    4  u32 version (PCACHE_VERSION; a larger one is "a future version")
//     12    4  u32 KV type: 1 = fp16 (PCACHE_KV_F16), 2 = q8 (PCACHE_KV_Q8: backend.h's KV_Q8 rows)
//     16    8  u64 model identity (see pcache.c: model_identity)
//     24    8  u64 model file size in bytes
//     32    4  u32 n_layers
//     36    4  u32 n_kv_heads
//     40    4  u32 head_dim
//     44    4  u32 n_tokens (positions stored)
//     48    4  u32 payload codec: 1 = one zstd frame of the KV (PCACHE_CODEC_ZSTD)
//     52    4  u32 sliding-window floor: the sliding-window layers' K and V are held
//              from this position on (zeros before; 0 in a model without them)
//     56    8  u64 payload bytes (the compressed KV that follows the ids)
//     64    8  u64 hash of the payload bytes (pc_hash64, seed 0)
//     72    8  u64 hash of the ids' bytes (pc_hash64, seed 0)
//     80   64  backend identity, NUL-padded ("cpu, avx512-vnni": the description
//              without thread count and memory size; KV computed by other kernels
//              may round differently, so a cache is only reused by the same kernels)
//    144   40  file name of the model that wrote it, NUL-padded (for messages only)
//    184    8  u64 hash of bytes [0, 184) (pc_hash64, seed 0): checked before any
//              other field but magic and version is believed
//    192       i32 ids[n_tokens]
//              payload: one zstd frame whose content is model_kv_export's layout,
//              [n_layers][2 (K, V)][n_tokens] pool rows (fp16: n_kv_heads * head_dim
//              values; q8: see backend.h's kv_row_bytes), with its content size and
//              content checksum set
// The file is exactly 192 + 4 * n_tokens + payload bytes long.
//
// pc_hash64 (seed s, bytes p[0..len)): four 64-bit lanes, lane i starting at
// s + i * K1; each 32-byte stripe feeds its 8-byte words w_i (the last, partial
// stripe zero-padded) as lane_i = xs32((lane_i ^ w_i) * K1) where
// xs32(x) = x ^ (x >> 32); then h = s ^ (len * K2), and for each lane
// h = xs32((h ^ xs32(lane_i * K2)) * K1); the result is xs32(h * K2).
// K1 = 0x9E3779B97F4A7C15, K2 = 0xD6E8FEB86659FD93. Each step is a bijection
// of the lane, so any change confined to one 8-byte word is always detected.
#ifndef QUILL_PCACHE_H
#define QUILL_PCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"

#define PCACHE_VERSION 1
#define PCACHE_KV_F16 1
#define PCACHE_KV_Q8 2
#define PCACHE_CODEC_ZSTD 1
#define PCACHE_HEADER_BYTES 192

// Writes the first n cached positions of m (n <= model_len(m)) and their token
// ids to path atomically (util.h's write_file_atomic: a temp file in the same
// directory, mode 0600 as it holds the conversation, fsync, rename over path,
// fsync of the directory). Returns 0, or -1 with a one-line reason in err
// (without the path; the temp file is removed). model_path names the model
// in the header.
int pcache_save(const char *path, model *m, const char *model_path, const int32_t *ids, int n, char *err);

// Reads path; if it belongs to this model, KV type, shape and backend,
// restores the KV of the longest common prefix of its ids and ids[0..n_ids)
// (n_ids = -1: all of them, for /load) into sequence 0, and returns that count
// k >= 0 (model_len(m) == k afterwards), with the file's ids in
// *cached_ids/*n_cached (malloc'd, caller frees; cached_ids may be NULL).
// Returns -1 with a one-line reason in err (without the path) when the file is
// missing, unusable, from another model, corrupt, truncated or of a future
// version; then the model's cache is left as it was (the caller warns and runs
// cold), unless model_kv_import itself failed midway, which empties it. Every field is checked before anything is allocated or restored: the
// ids must fit in the file, n_tokens in model_ctx(m), the payload must have
// both checksums right and decompress to exactly model_kv_bytes(m, n_tokens).
int pcache_load(const char *path, model *m, const char *model_path, const int32_t *ids, int n_ids,
                int32_t **cached_ids, int *n_cached, char *err);

// For `--prompt-cache path`: before prefilling the prompt ids[0..n) (n >= 1)
// into the empty sequence 0, restores what path holds of it and returns k, the
// positions that need no prefill (model_len(m) == k; at most n - 1, since the
// last prompt token must run to give the logits of the first new token).
// Never fails: when the file is unusable it is ignored (k = 0) and its reason
// is put in warn (warn[0] == 0 when there is nothing to say: the file is
// absent, or it was used). *save tells whether to write the cache after the
// prefill: the file was absent, unusable, or lacks some of the prompt; a path
// that exists but is not a regular file is left alone.
int pcache_prompt_restore(const char *path, model *m, const char *model_path, const int32_t *ids, int n,
                          int *save, char *warn);

// The 64-bit hash of the file format (above), exposed for tests.
uint64_t pc_hash64(const void *p, size_t len, uint64_t seed);

#endif
