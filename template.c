// template.c — see template.h. The built-in formats are Jinja sources
// rendered by the same engine as a model's own template (tests/template_ref.py
// checks each against jinja2); they follow each family's documented prompt
// format with the same special tokens as the families' real templates.
#include "template.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// ---- the built-in formats ------------------------------------------------------------

// "System: ...\nUser: ...\nAssistant: ...\n" — for models without a template.
// The answer keeps the space the model writes after "Assistant:".
static const char PLAIN[] =
    "{%- for m in messages -%}\n"
    "{{- 'System: ' if m.role == 'system' else 'User: ' if m.role == 'user' else 'Assistant:' -}}\n"
    "{{- m.content ~ '\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt %}Assistant:{% endif -%}\n";

// ChatML: "<|im_start|>{role}\n{text}<|im_end|>\n" per message, no BOS (Qwen, SmolLM, ...).
static const char CHATML[] =
    "{%- for m in messages -%}\n"
    "<|im_start|>{{ m.role }}{{ '\\n' }}{{ m.content }}<|im_end|>{{ '\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}<|im_start|>assistant{{ '\\n' }}{%- endif -%}\n";

// Llama 2: "<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {answer} </s>" per
// exchange; only the first user message carries the system block; text trimmed.
static const char LLAMA2[] =
    "{%- set ns = namespace(sys=none, first=true) -%}\n"
    "{%- if messages and messages[0].role == 'system' -%}{%- set ns.sys = messages[0].content | trim -%}{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    "  {%- if m.role == 'user' -%}\n"
    "    {{ bos_token }}[INST] {% if ns.first and ns.sys is not none %}<<SYS>>{{ '\\n' }}{{ ns.sys }}{{ '\\n' }}"
    "<</SYS>>{{ '\\n\\n' }}{% endif -%}\n"
    "    {{ m.content | trim }} [/INST]\n"
    "    {%- set ns.first = false -%}\n"
    "  {%- elif m.role == 'assistant' -%}\n"
    "    {{ ' ' }}{{ m.content | trim }} {{ eos_token }}\n"
    "  {%- endif -%}\n"
    "{%- endfor -%}\n";

// Llama 3: BOS, then "<|start_header_id|>{role}<|end_header_id|>\n\n{text}<|eot_id|>" per
// message, text trimmed.
static const char LLAMA3[] =
    "{{- bos_token -}}\n"
    "{%- for m in messages -%}\n"
    "<|start_header_id|>{{ m.role }}<|end_header_id|>{{ '\\n\\n' }}{{ m.content | trim }}<|eot_id|>\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}<|start_header_id|>assistant<|end_header_id|>{{ '\\n\\n' }}{%- endif -%}\n";

// Mistral (v0.1 - v0.3): "<s>[INST] {user} [/INST]{answer}</s>"; the system prompt opens
// the first user message, followed by a blank line.
static const char MISTRAL[] =
    "{%- set ns = namespace(sys=none, first=true) -%}\n"
    "{%- if messages and messages[0].role == 'system' -%}{%- set ns.sys = messages[0].content -%}{%- endif -%}\n"
    "{{- bos_token -}}\n"
    "{%- for m in messages -%}\n"
    "  {%- if m.role == 'user' -%}\n"
    "    [INST] {% if ns.first and ns.sys is not none %}{{ ns.sys }}{{ '\\n\\n' }}{% endif %}{{ m.content }} [/INST]\n"
    "    {%- set ns.first = false -%}\n"
    "  {%- elif m.role == 'assistant' -%}\n"
    "    {{ m.content }}{{ eos_token }}\n"
    "  {%- endif -%}\n"
    "{%- endfor -%}\n";

// Gemma: "<start_of_turn>{user|model}\n{text}<end_of_turn>\n", text trimmed; no system
// turn, so the system prompt opens the first user turn followed by a blank line.
static const char GEMMA[] =
    "{%- set ns = namespace(prefix='', start=0) -%}\n"
    "{%- if messages and messages[0].role == 'system' -%}{%- set ns.prefix = (messages[0].content | trim) + '\\n\\n' -%}"
    "{%- set ns.start = 1 -%}{%- endif -%}\n"
    "{{- bos_token -}}\n"
    "{%- for m in messages[ns.start:] -%}\n"
    "<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}{{ '\\n' }}\n"
    "{%- if loop.first %}{{ ns.prefix }}{% endif %}{{ m.content | trim }}<end_of_turn>{{ '\\n' }}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}<start_of_turn>model{{ '\\n' }}{%- endif -%}\n";

// Phi-3.5: "<|system|>\n...<|end|>\n<|user|>\n...<|end|>\n<|assistant|>\n...<|end|>\n",
// then "<|assistant|>\n" to answer, or EOS without a generation prompt.
static const char PHI3[] =
    "{%- for m in messages -%}\n"
    "{%- if m.role == 'system' and m.content -%}<|system|>{{ '\\n' }}{{ m.content }}<|end|>{{ '\\n' }}\n"
    "{%- elif m.role == 'user' -%}<|user|>{{ '\\n' }}{{ m.content }}<|end|>{{ '\\n' }}\n"
    "{%- elif m.role == 'assistant' -%}<|assistant|>{{ '\\n' }}{{ m.content }}<|end|>{{ '\\n' }}\n"
    "{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}<|assistant|>{{ '\\n' }}{%- else -%}{{ eos_token }}{%- endif -%}\n";

const char *const tpl_builtin_names[] = {"plain", "chatml", "llama2", "llama3", "mistral", "gemma", "phi3", NULL};
static const char *const builtin_sources[] = {PLAIN, CHATML, LLAMA2, LLAMA3, MISTRAL, GEMMA, PHI3};

const char *tpl_builtin_source(const char *name) {
    for (int i = 0; tpl_builtin_names[i]; i++)
        if (!strcmp(name, tpl_builtin_names[i])) return builtin_sources[i];
    return NULL;
}

// Text that ends the assistant's turn when a model writes it as plain text
// rather than as an end-of-generation token, found from the format's markers.
static const char *const *stops_for(const char *source) {
    static const char *const plain[] = {"\nUser:", NULL}, *const chatml[] = {"<|im_end|>", NULL},
                             *const llama3[] = {"<|eot_id|>", NULL}, *const inst[] = {"[INST]", NULL},
                             *const gemma[] = {"<end_of_turn>", NULL}, *const phi3[] = {"<|end|>", NULL},
                             *const none[] = {NULL};
    if (strstr(source, "<|im_start|>")) return chatml;
    if (strstr(source, "<|start_header_id|>")) return llama3;
    if (strstr(source, "<start_of_turn>")) return gemma;
    if (strstr(source, "<|user|>") && strstr(source, "<|assistant|>")) return phi3;
    if (strstr(source, "[INST]")) return inst;
    if (source == PLAIN) return plain;
    return none;
}

int tpl_add_bos(const chat_template *t, const tokenizer *tok, const char *text) {
    return tok_add_bos(tok) && !(t->bos && *t->bos && !strncmp(text, t->bos, strlen(t->bos)));
}

// ---- loading --------------------------------------------------------------------------

int tpl_init(chat_template *t, const char *source, size_t len, const char *name, const char *bos, const char *eos,
             char *err) {
    *t = (chat_template){0};
    char e[ERR_LEN];
    if (jinja_parse(&t->jt, source, len, e)) return errf(err, "chat template %s: %s", name, e);
    t->name = strdup(name);
    t->bos = bos ? strdup(bos) : NULL;
    t->eos = eos ? strdup(eos) : NULL;
    t->stops = stops_for(source);
    if (!t->name || (bos && !t->bos) || (eos && !t->eos)) {
        tpl_free(t);
        return errf(err, "out of memory");
    }
    return 0;
}

void tpl_free(chat_template *t) {
    jinja_free(t->jt);
    free(t->name);
    free(t->bos);
    free(t->eos);
    *t = (chat_template){0};
}

static char *read_text_file(const char *path, size_t *len, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return errf(err, "cannot open chat template '%s': %s", path, strerror(errno)), NULL;
    char *s = NULL;
    size_t cap = 0, n = 0;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            char *p = realloc(s, cap = 2 * cap + 8192);
            if (!p) {
                free(s);
                fclose(f);
                return errf(err, "out of memory"), NULL;
            }
            s = p;
        }
        size_t r = fread(s + n, 1, 4096, f);
        n += r;
        if (r < 4096) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) return free(s), errf(err, "cannot read chat template '%s'", path), NULL;
    s[n] = 0;
    *len = n;
    return s;
}

int tpl_load(chat_template *t, const gguf_file *f, const tokenizer *tok, const char *choice, int *fallback,
             char *err) {
    const char *bos = tok && tok_bos(tok) >= 0 ? tok_piece(tok, tok_bos(tok)) : NULL;
    const char *eos = tok && tok_eos(tok) >= 0 ? tok_piece(tok, tok_eos(tok)) : NULL;
    *fallback = 0;
    const char *builtin = choice ? tpl_builtin_source(choice) : NULL;
    if (builtin || (!choice && !(f && gguf_find(f, "tokenizer.chat_template")))) {
        *fallback = !choice;
        const char *name = choice ? choice : "plain";
        int rc = tpl_init(t, builtin ? builtin : PLAIN, strlen(builtin ? builtin : PLAIN), name, bos, eos, err);
        t->builtin = 1;
        return rc;
    }
    if (choice) {
        size_t len;
        char *text = read_text_file(choice, &len, err);
        if (!text) {
            if (!strchr(choice, '/') && !strstr(choice, ".jinja"))
                return errf(err, "unknown chat template '%s' (a .jinja file, or one of plain, chatml, llama2, llama3, "
                                 "mistral, gemma, phi3)", choice);
            return -1;
        }
        int rc = tpl_init(t, text, len, choice, bos, eos, err);
        free(text);
        return rc;
    }
    const gguf_kv *kv = gguf_find(f, "tokenizer.chat_template");
    if (kv->type != GGUF_STRING) return errf(err, "tokenizer.chat_template is not a string");
    if (!tpl_init(t, kv->s.ptr, kv->s.len, "tokenizer.chat_template", bos, eos, err)) return 0;
    size_t n = strlen(err);
    snprintf(err + n, ERR_LEN - n, " (--chat-template NAME|FILE picks another)");
    return -1;
}

// ---- rendering ------------------------------------------------------------------------

// strftime_now's clock: SOURCE_DATE_EPOCH when set (reproducible output), else now.
static time_t render_clock(void) {
    const char *s = getenv("SOURCE_DATE_EPOCH");
    char *end;
    long long v = s && *s ? strtoll(s, &end, 10) : 0;
    return s && *s && !*end && v > 0 ? (time_t)v : time(NULL);
}

int tpl_render_json(const chat_template *t, const json_t *messages, const json_t *tools, const json_t *vars,
                    int add_generation_prompt, char **out, size_t *len, char *err) {
    json_t *ctx = json_object();
    if (!ctx) return errf(err, "out of memory");
    // transformers' order: special tokens, then the caller's variables, which may replace them
    if (t->bos) json_object_set_new(ctx, "bos_token", json_string(t->bos));
    if (t->eos) json_object_set_new(ctx, "eos_token", json_string(t->eos));
    if (vars) json_object_update(ctx, (json_t *)vars);
    json_object_set(ctx, "messages", (json_t *)messages);
    json_object_set_new(ctx, "tools", tools ? json_incref((json_t *)tools) : json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(add_generation_prompt));
    jinja_limits lim = {.now = render_clock()};
    char e[ERR_LEN];
    int rc = jinja_render(t->jt, ctx, &lim, out, len, e);
    json_decref(ctx);
    if (rc) return errf(err, "chat template %s: %s", t->name, e);
    return 0;
}

int tpl_render(const chat_template *t, const chat_msg *msgs, int n, const json_t *vars, int add_generation_prompt,
               char **out, size_t *len, char *err) {
    json_t *list = json_array();
    for (int i = 0; list && i < n; i++) {
        json_t *m = json_pack("{s:s, s:s}", "role", msgs[i].role, "content", msgs[i].content);
        if (!m || json_array_append_new(list, m)) list = (json_decref(list), NULL);
    }
    if (!list) return errf(err, "out of memory (or a message is not UTF-8)");
    int rc = tpl_render_json(t, list, NULL, vars, add_generation_prompt, out, len, err);
    json_decref(list);
    return rc;
}

int tpl_render_text(const chat_template *t, const char *json, size_t json_len, const json_t *vars,
                    int add_generation_prompt, char **out, size_t *len, char *err) {
    json_error_t je;
    json_t *root = json_loadb(json, json_len, 0, &je);
    if (!root) return errf(err, "the conversation is not JSON: line %d: %s", je.line, je.text);
    json_t *messages = json_is_array(root) ? root : json_object_get(root, "messages");
    json_t *tools = json_is_object(root) ? json_object_get(root, "tools") : NULL;
    int rc;
    if (!json_is_array(messages))
        rc = errf(err, "the conversation must be a list of messages or an object with a \"messages\" list");
    else if (tools && !json_is_array(tools) && !json_is_null(tools))
        rc = errf(err, "\"tools\" must be a list");
    else
        rc = tpl_render_json(t, messages, json_is_null(tools) ? NULL : tools, vars, add_generation_prompt, out, len, err);
    json_decref(root);
    return rc;
}
