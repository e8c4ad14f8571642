// batch.h — generation for many prompts in one process: continuous batching
// over the paged KV cache.
//
// Input is JSON Lines ({"id", "prompt", "n", "temp", "seed", "stop",
// "logprobs" (0-20 alternatives per token: the result gets "logprobs"),
// "grammar" (GBNF text) or "json_schema" (a schema); only "prompt" is required) or, with `lines`, one prompt per line. Up to
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

#include <signal.h>
#include <stdio.h>

#include "grammar.h"
#include "model.h"
#include "sample.h"
#include "tokenizer.h"

typedef struct {
    sampler_params sp;         // defaults for records that give no temp / seed
    int n_predict;             // default "n" (-1: until EOS or the context end)
    const char *const *stops;  // default "stop" strings
    int n_stops;
    int lines;                 // input: one prompt per line, not JSON
    int unordered;             // output: as each finishes, not in input order
    int parallel;              // sequences decoding at once (the model holds parallel + 1)
    int chunk;                 // prompt tokens per prefill chunk (a multiple of PREFILL_TILE)
    int no_bos, special;       // as for a single prompt
    const grammar *grammar;    // --grammar / --json-schema for records without their own (NULL: none)
    int logprobs;              // --logprobs N: default "logprobs" of the records (-1: none)
    int reasoning;             // 1: a reasoning model's thinking goes to "reasoning", apart from "text"
    int progress;              // a progress line on stderr (a terminal)
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
} batch_summary;

// Sequences the model must be loaded with for o (model_opts.n_seqs).
int batch_model_seqs(const batch_opts *o);

// Runs every record of `in`, writing results to `out`. Returns 0 when it ran
// to the end of the input (error records included: see sum->n_errors), -1
// with err on a fatal error (unreadable input, failed write, out of memory).
// A closed output (EPIPE) ends the run early with 0, and so does o->stop
// (sum->interrupted). Each result is one line that ends with its newline,
// the last byte written for it, so output cut short at any instant (a kill,
// a full disk) holds whole records and at most one partial last line, which
// has no newline and is not a record; in input order (not unordered), the
// whole lines are the results of the first records of the input.
int batch_run(model *m, const tokenizer *tok, const batch_opts *o, FILE *in, FILE *out,
              batch_summary *sum, char *err);

#endif
