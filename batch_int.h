// batch_int.h — what the parts of `quill batch` share:
//   batch.c         the engine: slots, admission, the forward passes, the run loop
//   batch_record.c  records: input lines in each format to records (ids, shards,
//                   duplicates, resume skips), results and errors to output lines
//   batch_openai.c  the OpenAI Batch format: request bodies in, response lines out
//   batch_io.c      record keys and key sets, the output writer, the resume scan
#ifndef QUILL_BATCH_INT_H
#define QUILL_BATCH_INT_H

#include <jansson.h>
#include <stdint.h>

#include "batch.h"
#include "grammar.h"
#include "template.h"

#define MAX_REC_STOPS 16
#define REC_MAX_BYTES (64u << 20)  // a longer input line is an error record

// ---- keys (batch_io.c) ----------------------------------------------------

// A record's identity. Its bytes are the id's: a string id's UTF-8 bytes, an
// integer id's decimal digits, and for a record without a readable id (a
// `lines` record, a JSON record without "id", a line that is not JSON) its
// 1-based line number in decimal. `shard` is FNV-1a 64 of those bytes (the
// shard is shard % n_shards); `check` is a second 64-bit hash of the bytes and
// the kind, so that the 128 bits tell keys apart (a false match among a
// billion keys has odds of about 1e-21).
typedef struct {
    uint64_t shard, check;
} batch_key;

enum { KEY_ID = 'i', KEY_LINE = 'l' };  // an id; a line number (the key of an error record)

batch_key batch_key_of(int kind, const char *bytes, size_t n);
batch_key batch_key_line(int line);  // KEY_LINE of a line number

// A set of keys (open addressing on key.check).
typedef struct {
    batch_key *slots;  // [cap]; check == 0 && shard == 0: empty
    size_t cap, n;
} keyset;

int keyset_add(keyset *s, batch_key k);  // 1 added, 0 already there, -1 out of memory
int keyset_has(const keyset *s, batch_key k);
void keyset_free(keyset *s);

// ---- the output (batch_io.c) ----------------------------------------------

typedef struct {
    int fd;
    int closed;         // EPIPE: the reader went away; nothing more is written
    int is_file;        // a regular file: fdatasync now and then
    double t_sync;      // when it was last synced
} batch_out;

// Writes line[0..len) (its newline included) with write() until all of it is
// out, whatever signal interrupts it. 0; 0 with out->closed on EPIPE; -1 with
// err on any other failure.
int out_write(batch_out *out, const char *line, size_t len, char *err);
// fdatasync where the output is a file (the end of a run). 0, or -1 with err.
int out_sync(batch_out *out, char *err);

// What an earlier run left in the output (resume): the keys of its records
// (results by id, error records by line), how many, and whether a partial
// last line was cut off (the file is truncated to its last newline). A line
// that is neither is an error: the file is not this command's output.
typedef struct {
    keyset ids, lines;
    long n;
    int torn;
} resume_set;

// Reads fd (a regular file opened for appending) from the start. 0, or -1
// with err ("line N: ...").
int resume_scan(int fd, resume_set *rs, char *err);
void resume_free(resume_set *rs);
// Whether s[0..n) is blank (spaces, tabs, CRs): a line that is no record.
int batch_blank(const char *s, size_t n);

// ---- records ----------------------------------------------------------------

typedef enum { EP_QUILL, EP_CHAT, EP_COMPLETION } batch_endpoint;  // what a record asks for

// What an OpenAI request asks for beyond the prompt and sampling, as parsed;
// batch_features_apply turns it into the record's grammar and logprobs.
typedef struct {
    int logprobs;               // log-probabilities of the chosen tokens (0: off)
    int top_logprobs;           // and of the N likeliest tokens at each step
    json_t *response_format;    // {"type": "json_object" | "json_schema", ...} (owned); NULL: text
} batch_features;

typedef struct {              // one input record; then its output line
    int index;                // 0-based record number (of those this run runs): the output order
    int line;                 // 1-based input line
    json_t *id;               // the id written back: quill's "id" or the line number, OpenAI's
                              // custom_id; NULL: none could be read (owned)
    batch_key key;
    batch_endpoint ep;
    char *prompt;             // the text to tokenize, NUL-terminated (owned); a chat's rendered
    size_t prompt_len;        // conversation
    int add_bos, special;     // tokenizing it: a BOS first; control tokens written in it are tokens
    int n;                    // max new tokens (-1: until EOS or the context end)
    sampler_params sp;
    char *stops[MAX_REC_STOPS];  // owned: the record's (or the command line's) stop strings,
    int n_stops, n_user_stops;   // then a chat template's end-of-turn strings
    batch_features feat;
    grammar *g;               // "grammar" / "json_schema" / response_format (owned); NULL: the command line's
    int logprobs;             // log-probabilities with this many alternatives per token (-1: none)
} record;

// A finished generation, for the output line.
typedef struct {
    const char *text;         // valid UTF-8, NUL-terminated
    int n_gen, n_prompt;
    const char *reason;       // eos, length, stop, context
    const char *stop;         // the stop string that ended it (reason "stop"), else NULL
    double ttft, tpot;        // seconds
    json_t *lp;               // the tokens' log-probabilities (borrowed), or NULL
    int grammar;              // under a grammar: whether it was complete at the end; -1: none
    const char *reasoning;    // a reasoning model's thinking (valid UTF-8), or NULL: none opened
    int reasoning_closed;     // whether it was closed (with reasoning)
} batch_result;

// The input side of a run: the format, the chat template (loaded for the
// first chat record), the ids seen so far, and what resume skips.
typedef struct {
    const batch_opts *o;
    model *m;
    const tokenizer *tok;
    FILE *in;
    batch_format format;      // decided by the first record when o->format is BATCH_AUTO
    chat_template tpl;
    int tpl_state;            // 0 not loaded, 1 loaded, -1 failed (tpl_err)
    char tpl_err[512];
    keyset seen;              // keys of the records read (of this shard)
    resume_set *done;         // NULL: not resuming
    int line_no, n_records, eof;
    batch_summary *sum;
} batch_input;

// batch_record.c
// The next line of the input as a record (*r, owned by the caller), 0 at the
// end of the input, -1 on a fatal error (err). Lines of other shards and
// records resume skips are passed over; a line that cannot run comes back
// as a record with *msg set (an error record to write), code its kind.
int record_next(batch_input *bi, record **r, const char **code, char *msg, char *err);
void record_free(record *r);
// The output line of a result or an error, as JSON (NULL: out of memory).
json_t *record_result(const batch_input *bi, const record *r, const batch_result *res);
json_t *record_error(const batch_input *bi, const record *r, const char *code, const char *msg);
void input_free(batch_input *bi);
// A "stop" field (a string or an array of strings) in place of r's stops. 0, or -1 with msg.
int record_set_stops(record *r, json_t *v, char *msg);
// r's OpenAI features (r->feat) as its grammar and logprobs: 0, or -1 with msg
// when quill cannot honour them.
int batch_features_apply(record *r, char *msg);
// A "grammar" (GBNF text) or "json_schema" (a schema) field as r's grammar. 0, or -1 with msg.
int record_set_grammar(record *r, const char *key, json_t *v, char *msg);

// batch_openai.c
// The custom_id of a request line (a JSON object): 0 and *id (borrowed), or
// -1 when it has none that is a string.
int openai_custom_id(json_t *root, json_t **id);
// Fills r from a request; the chat template is bi's (loaded on first use).
// 0, or -1 with msg (and *code, an OpenAI error code).
int openai_parse(batch_input *bi, record *r, json_t *root, const char **code, char *msg);
json_t *openai_result(const batch_input *bi, const record *r, const batch_result *res);
json_t *openai_error(const record *r, const char *code, const char *msg);

// Error codes (OpenAI's "error.code"; quill's error records carry the message only).
#define ERR_INVALID "invalid_request"
#define ERR_DUPLICATE "duplicate_custom_id"
#define ERR_CONTEXT "context_length_exceeded"
#define ERR_UNSUPPORTED "unsupported_parameter"

#endif
