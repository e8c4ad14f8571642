// batch.h — generation for many prompts in one process: continuous batching
// over the paged KV cache.
//
// Input is one record per line in one of three formats (batch_format):
// quill's JSON Lines ({"id", "prompt", "n", "temp", "seed", "stop",
// "logprobs" (0-20 alternatives per token: the result gets "logprobs"),
// "grammar" (GBNF text) or "json_schema" (a schema); only "prompt" is
// required), OpenAI Batch requests ({"custom_id", "method", "url", "body"},
// as `vllm run-batch` reads them; batch_openai.c), or one prompt per line.
// Output has the input's shape: quill's result records, or OpenAI Batch
// response lines. Every record has an id (batch_int.h): shards pick records
// by its hash, resume skips the ids already in the output, and a repeated id
// is an error record. Up to
// `parallel` sequences decode together, one forward pass per step (each
// weight read once for all of them); a finished sequence's slot is refilled
// from the input at once. A new prompt is prefilled in chunks that share the
// steps with the running decodes, and a prompt that starts like an earlier
// one (a common system prompt) takes that prefix's KV blocks instead of
// prefilling it again. Output is one JSON object per input record, in input
// order (or as each finishes, with `unordered`).
//
// Every sequence computes exactly what `quill` computes for its prompt
// alone: decode tokens are batch-invariant (backend.h's matmul), and prompt
// chunks and shared prefixes are cut at multiples of PREFILL_TILE.
#ifndef QUILL_BATCH_H
#define QUILL_BATCH_H

#include <jansson.h>
#include <signal.h>
#include <stdio.h>

#include "grammar.h"
#include "model.h"
#include "sample.h"
#include "tokenizer.h"

typedef enum { BATCH_AUTO, BATCH_QUILL, BATCH_LINES, BATCH_OPENAI } batch_format;

typedef struct {
    sampler_params sp;         // defaults for records that give no temp / seed
    int n_predict;             // default "n" (-1: until EOS or the context end)
    const char *const *stops;  // default "stop" strings
    int n_stops;
    batch_format format;       // the input's; BATCH_AUTO: the first record decides (OpenAI when
                               // it has "custom_id", else quill's)
    int shard, n_shards;       // run only the records whose id hashes to shard (n_shards 0: all)
    int resume;                // the output (out_fd, a regular file) already holds results:
                               // skip their records, cut a torn last line, append
    const char *template_name; // chat records: --chat-template (NULL: the model's own)
    const json_t *vars;        // chat records: more template variables (--var); NULL: none
    const char *model_name;    // "model" in OpenAI responses
    const char *output_name;   // the output's name, for messages
    int unordered;             // output: as each finishes, not in input order
    int parallel;              // sequences decoding at once (the model holds parallel + 1)
    int chunk;                 // prompt tokens per prefill chunk (a multiple of PREFILL_TILE)
    int no_bos, special;       // as for a single prompt
    const grammar *grammar;    // --grammar / --json-schema for records without their own (NULL: none)
    int logprobs;              // --logprobs N: default "logprobs" of the records (-1: none)
    int reasoning;             // 1: a reasoning model's thinking goes to "reasoning", apart from "text"
    int progress;              // a progress line on stderr (a terminal): done/total, tok/s, ETA
    volatile sig_atomic_t *stop;  // non-zero (signals.h's flag) ends the run after the current
                                  // step, writing nothing more; NULL: never
} batch_opts;

typedef struct {
    int n_records;             // results written (including errors)
    int n_errors;              // error records
    long prompt_tokens;        // tokens of all prompts
    long prefill_tokens;       // prompt tokens actually computed
    long shared_tokens;        // prompt tokens taken from another sequence's KV
    long gen_tokens;           // tokens generated
    long steps;                // forward passes
    double wall;               // seconds, first read to last write
    double sum_ttft, sum_tpot; // seconds, over sequences (tpot over those with > 1 token)
    int n_tpot;
    int interrupted;           // the run ended early on o->stop
    batch_format format;       // the format the input was read in
    long resumed;              // records skipped: their results were in the output already
    int torn;                  // resume cut a partial last line off the output
    long other_shards;         // records left to the other shards
    int template_fallback;     // chat records used the plain format (the model has no template)
} batch_summary;

// Sequences the model must be loaded with for o (model_opts.n_seqs).
int batch_model_seqs(const batch_opts *o);

// Runs every record of `in`, writing results to out_fd, each line with one
// write() whose last byte is its newline (fdatasync at most once a second
// and at the end where out_fd is a file). Returns 0 when it ran
// to the end of the input (error records included: see sum->n_errors), -1
// with err on a fatal error (unreadable input, failed write, out of memory).
// A closed output (EPIPE) ends the run early with 0, and so does o->stop
// (sum->interrupted). Each result is one line that ends with its newline,
// the last byte written for it, so output cut short at any instant (a kill,
// a full disk) holds whole records and at most one partial last line, which
// has no newline and is not a record; in input order (not unordered), the
// whole lines are the results of the first records of the input.
int batch_run(model *m, const tokenizer *tok, const batch_opts *o, FILE *in, int out_fd,
              batch_summary *sum, char *err);

#endif
