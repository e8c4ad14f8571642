// template.h — chat templates: a conversation rendered as the text a chat
// model was trained on.
//
// A model's format is the Jinja template in its GGUF (tokenizer.chat_template),
// rendered by quill's Jinja engine (jinja.h) exactly as Hugging Face
// transformers renders it, with the variables transformers passes: messages,
// tools (None without tools), documents (None), add_generation_prompt,
// bos_token, eos_token, and any others the caller gives (enable_thinking,
// reasoning_effort, ...). --chat-template picks a .jinja file instead, or one
// of the built-in formats (plain, chatml, llama2, llama3, mistral, gemma,
// phi3), which are Jinja sources too; a model without a template gets the
// plain "User: / Assistant:" format.
//
// strftime_now (templates that print today's date) reads the clock, or
// SOURCE_DATE_EPOCH when it is set (reproducible renderings and the tests).
#ifndef QUILL_TEMPLATE_H
#define QUILL_TEMPLATE_H

#include <jansson.h>
#include <stddef.h>

#include "gguf.h"
#include "jinja.h"
#include "tokenizer.h"

typedef struct {
    const char *role;     // "system", "user", "assistant", ...
    const char *content;  // UTF-8 text, NUL-terminated
} chat_msg;

typedef struct {
    jinja_template *jt;       // the parsed template
    char *name;               // for messages: "tokenizer.chat_template", a built-in name or the file (owned)
    char *bos, *eos;          // the BOS / EOS pieces (bos_token, eos_token); NULL: not passed (owned)
    const char *const *stops; // text that ends an answer when the model writes it as text (NULL-terminated)
    int builtin;              // a built-in format (not the model's or a file)
} chat_template;

// The built-in formats: their names (NULL-terminated) and Jinja sources.
extern const char *const tpl_builtin_names[];
const char *tpl_builtin_source(const char *name);  // NULL for an unknown name

// A template from Jinja source; name is what messages call it. bos/eos may
// be NULL. Fails ("NAME: line N: ...") when the source does not parse.
int tpl_init(chat_template *t, const char *source, size_t len, const char *name, const char *bos, const char *eos,
             char *err);
void tpl_free(chat_template *t);

// The template a run uses: `choice` (--chat-template: a built-in name or a
// .jinja file) when given, else the model's tokenizer.chat_template, else
// the plain format (*fallback set to 1 then, for a warning). bos/eos come
// from the vocabulary.
int tpl_load(chat_template *t, const gguf_file *f, const tokenizer *tok, const char *choice, int *fallback,
             char *err);

// Renders a conversation: messages (a JSON array of {"role", "content", ...}
// objects, passed as they are), tools (a JSON array, or NULL), vars (a JSON
// object of more variables, or NULL). *out is malloc'd, *len bytes. Fails
// with the template's error (raise_exception's message, a line number).
int tpl_render_json(const chat_template *t, const json_t *messages, const json_t *tools, const json_t *vars,
                    int add_generation_prompt, char **out, size_t *len, char *err);

// The same for plain role/content messages.
int tpl_render(const chat_template *t, const chat_msg *msgs, int n, const json_t *vars, int add_generation_prompt,
               char **out, size_t *len, char *err);

// Whether a rendered conversation's tokens start with a BOS that tokenizing
// must add: when the vocabulary wants one and the template did not write it.
int tpl_add_bos(const chat_template *t, const tokenizer *tok, const char *text);

// A conversation as OpenAI-style JSON text, {"messages": [...], "tools": [...]}
// or a bare list of messages, rendered (for `quill template`).
int tpl_render_text(const chat_template *t, const char *json, size_t json_len, const json_t *vars,
                    int add_generation_prompt, char **out, size_t *len, char *err);

#endif
