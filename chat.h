// chat.h — the interactive chat REPL (`quill -m MODEL` on a terminal, or -i).
//
// Each turn renders the whole conversation with the model's chat template
// (template.h), tokenizes it, keeps the longest prefix the KV cache already
// holds, and prefills only the rest, so a new turn costs its own tokens.
// Answers stream to stdout; prompts, notices and the per-turn stats line go
// to stderr. Ctrl-C stops an answer; Ctrl-C at an empty prompt or Ctrl-D ends
// the chat, and so does SIGTERM, after the current forward pass (signals.h:
// the caller installs the handlers). Commands: /reset /stats /system /save /load /help /quit.
#ifndef QUILL_CHAT_H
#define QUILL_CHAT_H

#include <jansson.h>

#include "grammar.h"
#include "model.h"
#include "sample.h"
#include "tokenizer.h"

typedef struct {
    const char *model_path;     // -m: named in /save files, checked by /load
    const char *template_name;  // --chat-template NAME|FILE (NULL: the model's own)
    const json_t *vars;         // more template variables (--var, --think); NULL: none
    const char *system;         // --system (NULL: none)
    int context_shift;          // --context-full shift (1: drop the oldest turns) or stop (0)
    int n_predict;              // -n: most tokens per answer (-1: until the end of the turn)
    int quiet;                  // -q: no banner or stats
    const char *const *stops;   // --stop strings, n_stops of them
    int n_stops;
    sampler_params sp;
    const grammar *grammar;     // --grammar / --json-schema: every answer follows it (NULL: free text)
    int reasoning;              // reasoning.h's REASON_*: the thinking shown (dimmed) on stderr, hidden, or not split
} chat_opts;

// Runs the chat on stdin until Ctrl-D, Ctrl-C at an empty prompt, /quit, or
// the end of the input. Returns 0, or -1 with err set (a model or allocation
// failure).
int chat_run(model *m, const tokenizer *tok, const chat_opts *o, char *err);

#endif
