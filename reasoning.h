// reasoning.h — a reasoning model's thinking kept apart from its answer.
//
// The generated tokens are split into reasoning and answer text:
//   - text between <think> and </think> (Qwen3, QwQ, DeepSeek-R1 and their
//     distills; the markers may be added tokens or plain text);
//   - gpt-oss's harmony channels: <|channel|>analysis<|message|> ... <|end|> is
//     reasoning, <|channel|>final<|message|> ... the answer; the headers
//     (<|start|>assistant, the channel names) are neither.
// The markers themselves go to neither side. A template whose generation
// prompt opens the reasoning (ends in "<think>\n", or in "<|start|>assistant"
// for the channel header) starts the split in that state (reason_init).
#ifndef QUILL_REASONING_H
#define QUILL_REASONING_H

#include "textout.h"
#include "tokenizer.h"

enum { REASON_HIDE, REASON_SHOW, REASON_OFF };  // --reasoning hide (default), show, off

typedef struct {
    int think;        // inside the reasoning
    int header;       // inside a harmony header (after <|start|> / <|channel|>, before <|message|>)
    char head[32];    // the header's text so far (the channel name), truncated
    int head_len;
    char pend[16];    // text that may be the start of <think> / </think>
    int pend_len;
    int opened;       // reasoning was seen (a marker, or the prompt opened it)
    int n_think;      // tokens generated inside the reasoning
} reason_split;

// Starts a split after prompt[0..len) (the text the model continues, special
// tokens written out).
void reason_init(reason_split *r, const char *prompt, size_t len);
// Token id (after prev) into the answer or the reasoning (NULL: dropped).
// Returns textout_text's result for the answer (1: a stop string), or -1.
int reason_token(reason_split *r, const tokenizer *tok, int32_t prev, int32_t id, textout *answer, textout *reasoning);
// The end: held text goes where it belongs. 1: a stop string in the answer, -1: memory.
int reason_finish(reason_split *r, textout *answer, textout *reasoning);

#endif
