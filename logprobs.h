// logprobs.h — per-token log-probabilities and the machine-readable output
// of a run (--logprobs N, --output-format json|jsonl).
//
// Each generated token becomes an object in OpenAI's shape:
//   {"token": "...", "id": N, "logprob": x, "bytes": [...],
//    "top_logprobs": [{"token", "id", "logprob", "bytes"}, ...]}
// "token" is the token's text (bytes that are not UTF-8 on their own, a
// character split across tokens, become U+FFFD there; "bytes" has them
// exactly). The log-probabilities are sampler_logprobs's: after the
// repetition penalty (and a grammar's mask), before temperature and
// truncation.
#ifndef QUILL_LOGPROBS_H
#define QUILL_LOGPROBS_H

#include <jansson.h>
#include <stdio.h>

#include "sample.h"
#include "tokenizer.h"

enum { OUT_TEXT, OUT_JSON, OUT_JSONL };  // --output-format

// The object for token id (after prev) drawn from logits with smp's history
// (before the token is accepted into it); top_n alternatives (0..20), or
// top_n < 0 for the token alone, without log-probabilities. NULL: out of memory.
json_t *logprob_entry(const tokenizer *tok, sampler *smp, const float *logits, int32_t prev, int32_t id, int top_n);

// A run's output in json or jsonl form.
typedef struct {
    const tokenizer *tok;
    int format;       // OUT_JSON or OUT_JSONL
    int top_n;        // --logprobs N, or -1: none
    FILE *out;
    json_t *content;  // OUT_JSON: the token objects so far
    int error;        // errno of a failed write (EPIPE: the reader left)
} genout;

int genout_init(genout *g, const tokenizer *tok, int format, int top_n, FILE *out);
// A generated token: kept (json) or written as one line at once (jsonl). 0, or -1 (memory).
int genout_token(genout *g, sampler *smp, const float *logits, int32_t prev, int32_t id);
// The final object: {"text", "finish_reason", "prompt_tokens", "completion_tokens",
// "logprobs": {"content": [...]} (json with --logprobs)} plus the members of
// extra (consumed; may be NULL). 0, or -1 (memory).
int genout_finish(genout *g, const char *text, size_t len, const char *finish, int n_prompt, int n_gen, json_t *extra);
void genout_free(genout *g);

#endif
