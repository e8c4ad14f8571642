// template.h — chat templates: a conversation [{role, content}] rendered as the
// text a chat model was trained on.
//
// GGUF files carry the model's template as Jinja source (tokenizer.chat_template).
// quill does not run Jinja: it recognizes the family by distinctive markers
// (`<|im_start|>` → ChatML, `<|start_header_id|>` → Llama 3, ...) plus a few
// variant details read from the text (a default system prompt, whether system
// messages are rendered), and renders that family's format in C, byte for byte
// what the template itself renders (tests/t_template.sh checks each family
// against jinja2). An unrecognized template falls back to a plain
// "User: ... / Assistant: ..." format.
#ifndef QUILL_TEMPLATE_H
#define QUILL_TEMPLATE_H

#include <stddef.h>

#include "gguf.h"
#include "tokenizer.h"

typedef enum {
    TPL_PLAIN,    // "System: ...\nUser: ...\nAssistant: ...\n" — the fallback
    TPL_CHATML,   // <|im_start|>role\n...<|im_end|>\n (Qwen, SmolLM, many fine-tunes)
    TPL_LLAMA2,   // <s>[INST] <<SYS>>\n...\n<</SYS>>\n\n... [/INST] ... </s>
    TPL_LLAMA3,   // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|> (3.0 – 3.3)
    TPL_MISTRAL,  // <s>[INST] ... [/INST]...</s> (v0.1 – v0.3 SentencePiece format)
    TPL_GEMMA,    // <start_of_turn>user\n...<end_of_turn>\n, assistant as "model"
    TPL_PHI3,     // <|user|>\n...<|end|>\n<|assistant|>\n
    TPL_N_FAMILIES
} tpl_family;

typedef struct {
    const char *role;     // "system", "user" or "assistant"
    const char *content;  // UTF-8 text, NUL-terminated
} chat_msg;

// A recognized template: the family and the variant details that change its text.
typedef struct {
    tpl_family family;
    char *bos, *eos;         // the BOS / EOS pieces (bos_token, eos_token), "" if none (owned)
    char *default_system;    // ChatML: system prompt used when the chat has none (Qwen2,
                             // SmolLM2); NULL if the template adds none (owned)
    char *date;              // Llama 3.1+: the "Today Date:" of the always-present system
                             // header; NULL for Llama 3.0, which has no such header (owned)
    int system_dropped;      // the template renders no system message (Phi-3 mini 4k)
    int phi3_header_in_user; // Phi-3 mini 4k: "<|assistant|>\n" closes every user message,
                             // with no generation prompt; otherwise it opens each assistant one
    int phi3_bos;            // Phi-3 variants differ in whether bos_token starts the text
} chat_template;

// Family names for --chat-template: "plain", "chatml", "llama2", "llama3",
// "mistral", "gemma", "phi3". Returns -1 for an unknown name.
int tpl_family_from_name(const char *name);
const char *tpl_family_name(tpl_family f);

// Detects the family of Jinja template text; TPL_PLAIN when no marker matches.
tpl_family tpl_detect(const char *text);

// Builds a template from the model's Jinja text (detected), or from a family
// name when `name` is non-NULL (then `text` may be NULL and the family's common
// variant is used). bos/eos: the vocabulary's BOS/EOS pieces (NULL for none).
// Fails for an unknown name or out of memory. *recognized is 0 when the text
// matched no family (the caller warns and falls back to TPL_PLAIN).
int tpl_init(chat_template *t, const char *text, const char *name, const char *bos, const char *eos,
             int *recognized, char *err);
void tpl_free(chat_template *t);
// tpl_init with the model's tokenizer.chat_template (absent: unrecognized) and
// the vocabulary's BOS/EOS pieces.
int tpl_load(chat_template *t, const gguf_file *f, const tokenizer *tok, const char *name,
             int *recognized, char *err);

// Renders msgs[0..n) (a system message, if any, first), then the opening of the
// assistant's turn when add_generation_prompt. Returns malloc'd NUL-terminated
// text (*len bytes), or NULL when out of memory.
char *tpl_render(const chat_template *t, const chat_msg *msgs, int n, int add_generation_prompt,
                 size_t *len);

// Text that marks the end of the assistant's turn when the model writes it as
// plain text rather than as an end-of-generation token (the plain format's
// "\nUser:"); NULL-terminated list.
const char *const *tpl_stops(const chat_template *t);

#endif
