// textout.h — generated tokens to text, with stop strings.
//
// One place for what every mode does with sampled tokens: decode each to
// bytes, keep UTF-8 characters split across tokens whole, and cut the text
// where a stop string appears. With a sink, text is written as soon as it
// can no longer be the start of a stop string (streaming); the whole text is
// kept either way (chat keeps the answer, batch returns it).
#ifndef QUILL_TEXTOUT_H
#define QUILL_TEXTOUT_H

#include <stdio.h>

#include "tokenizer.h"

typedef struct {
    const tokenizer *tok;
    const char *const *stops;  // [n_stops] non-empty strings
    int n_stops;
    FILE *sink;                // NULL: keep the text only
    char *text;                // the text so far (not NUL-terminated)
    size_t len, cap;
    size_t written;            // text[0..written) has gone to the sink
    char *piece;               // [piece_cap] one token's bytes
    int piece_cap;
    utf8_stream us;            // a character split across tokens
    int closed;                // the sink failed: stop (quietly when it was closed: EPIPE)
    int error;                 // errno of a failed write other than EPIPE (a full disk), else 0
    int stop_hit;              // the stop string the text was cut at (stops[stop_hit]), else -1
} textout;

// 0, or -1 when out of memory.
int textout_init(textout *t, const tokenizer *tok, const char *const *stops, int n_stops, FILE *sink);
void textout_free(textout *t);
// Adds token id (prev: the token before it). Returns 1 when a stop string
// appeared (the text is cut where it starts), -1 when out of memory, else 0.
int textout_token(textout *t, int32_t prev, int32_t id);
// Adds text s[0..n) that comes from no single token (reasoning.c splits
// tokens). Same results as textout_token.
int textout_text(textout *t, const char *s, size_t n);
// The end of a generation that did not stop on a stop string: a held
// partial character and held bytes go out. Returns 1 if they completed a
// stop string, -1 out of memory.
int textout_finish(textout *t);

#endif
