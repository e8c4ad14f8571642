// template.c — see template.h. Each family's renderer writes what that
// family's Jinja template writes for the same messages; where a template trims
// content (`| trim`, `.strip()`) the renderer trims too, and where it drops or
// folds the system message, so does the renderer.
#include "template.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"

static const char *const family_names[TPL_N_FAMILIES] = {
    [TPL_PLAIN] = "plain", [TPL_CHATML] = "chatml", [TPL_LLAMA2] = "llama2", [TPL_LLAMA3] = "llama3",
    [TPL_MISTRAL] = "mistral", [TPL_GEMMA] = "gemma", [TPL_PHI3] = "phi3",
};

int tpl_family_from_name(const char *name) {
    for (int f = 0; f < TPL_N_FAMILIES; f++)
        if (!strcmp(name, family_names[f])) return f;
    return -1;
}

const char *tpl_family_name(tpl_family f) { return f < TPL_N_FAMILIES ? family_names[f] : "?"; }

// The markers are the family's own special tokens, which no other family's
// template contains; the order only matters for templates that mix families.
tpl_family tpl_detect(const char *text) {
    if (!text) return TPL_PLAIN;
    if (strstr(text, "<|im_start|>")) return TPL_CHATML;
    if (strstr(text, "<|start_header_id|>")) return TPL_LLAMA3;
    if (strstr(text, "<start_of_turn>")) return TPL_GEMMA;
    if (strstr(text, "<|user|>") && strstr(text, "<|assistant|>")) return TPL_PHI3;
    if (strstr(text, "[INST]")) return strstr(text, "<<SYS>>") ? TPL_LLAMA2 : TPL_MISTRAL;
    return TPL_PLAIN;
}

// ---- reading variant details out of the template text -------------------------

// The text of a Jinja string literal that starts right after `start` in text,
// up to the first of `end` or the literal's closing quote (' or "): with
// `end` = "<|im_end|>", the default system prompt in
// "'<|im_start|>system\nYou are a helpful assistant<|im_end|>\n'". Jinja escapes
// \n \t \\ \' \" are decoded. NULL when absent or when the literal ends before
// `end` (the text is then an expression, not a constant).
static char *literal_after(const char *text, const char *start, const char *end) {
    const char *p = strstr(text, start);
    if (!p) return NULL;
    p += strlen(start);
    char *out = malloc(strlen(p) + 1);
    if (!out) return NULL;
    size_t n = 0;
    for (; *p; p++) {
        if (end && !strncmp(p, end, strlen(end))) { out[n] = 0; return out; }
        if (*p == '\'' || *p == '"') break;
        if (*p == '\\' && p[1]) {
            p++;
            out[n++] = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p;
        } else {
            out[n++] = *p;
        }
    }
    if (!end && (*p == '\'' || *p == '"')) { out[n] = 0; return out; }
    free(out);
    return NULL;
}

// The system header opening a ChatML default system prompt; templates write
// the newline either raw (from JSON) or as a Jinja escape.
static char *chatml_default_system(const char *text) {
    char *s = literal_after(text, "<|im_start|>system\n", "<|im_end|>");
    return s ? s : literal_after(text, "<|im_start|>system\\n", "<|im_end|>");
}

// Llama 3.1+ templates set `date_string` to a constant default when the caller
// passes none: that constant, else the one Meta's templates ship with.
static char *llama3_date(const char *text) {
    const char *forms[] = {"date_string = \"", "date_string = '"};
    for (int i = 0; i < 2; i++) {
        char *d = literal_after(text, forms[i], NULL);
        if (d) return d;
    }
    return strdup("26 Jul 2024");
}

static int read_variant(chat_template *t, const char *text) {
    switch (t->family) {
    case TPL_CHATML:
        t->default_system = chatml_default_system(text);
        break;
    case TPL_LLAMA3:
        if (strstr(text, "Cutting Knowledge Date") && !(t->date = llama3_date(text))) return -1;
        break;
    case TPL_PHI3:
        t->system_dropped = !strstr(text, "<|system|>");
        t->phi3_header_in_user = !strstr(text, "add_generation_prompt");
        t->phi3_bos = strstr(text, "bos_token") != NULL;
        break;
    default:
        break;
    }
    return 0;
}

int tpl_init(chat_template *t, const char *text, const char *name, const char *bos, const char *eos,
             int *recognized, char *err) {
    *t = (chat_template){0};
    *recognized = 1;
    if (name) {
        int f = tpl_family_from_name(name);
        if (f < 0)
            return errf(err, "unknown chat template '%s' (plain, chatml, llama2, llama3, mistral, gemma, phi3)",
                        name);
        t->family = (tpl_family)f;
        // --chat-template phi3 is Phi-3.5's variant (a system role, a generation prompt, no
        // BOS in the text: the tokenizer adds it)
    } else {
        t->family = tpl_detect(text);
        *recognized = t->family != TPL_PLAIN;
        if (text && read_variant(t, text)) return errf(err, "out of memory");
    }
    t->bos = strdup(bos ? bos : "");
    t->eos = strdup(eos ? eos : "");
    if (!t->bos || !t->eos) {
        tpl_free(t);
        return errf(err, "out of memory");
    }
    return 0;
}

int tpl_load(chat_template *t, const gguf_file *f, const tokenizer *tok, const char *name,
             int *recognized, char *err) {
    const gguf_kv *kv = gguf_find(f, "tokenizer.chat_template");
    char *text = NULL;
    if (kv && kv->type == GGUF_STRING && !name) {
        if (!(text = malloc(kv->s.len + 1))) return errf(err, "out of memory");
        memcpy(text, kv->s.ptr, kv->s.len);
        text[kv->s.len] = 0;
    }
    const char *bos = tok_bos(tok) >= 0 ? tok_piece(tok, tok_bos(tok)) : NULL;
    const char *eos = tok_eos(tok) >= 0 ? tok_piece(tok, tok_eos(tok)) : NULL;
    int rc = tpl_init(t, text, name, bos, eos, recognized, err);
    free(text);
    return rc;
}

void tpl_free(chat_template *t) {
    free(t->bos);
    free(t->eos);
    free(t->default_system);
    free(t->date);
    *t = (chat_template){0};
}

// ---- rendering ------------------------------------------------------------------

// A growing output string; `oom` latches the first allocation failure so the
// renderers can append without checking each call.
typedef struct {
    char *s;
    size_t len, cap;
    int oom;
} strbuf;

static void put_n(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) { b->oom = 1; return; }
        b->s = p, b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void put(strbuf *b, const char *s) { put_n(b, s, strlen(s)); }

// Jinja's `trim` / Python's strip() on the whitespace chat text contains
// (ASCII: space \t \n \r \v \f; Unicode spaces are left alone).
static int is_ws(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static void put_trimmed(strbuf *b, const char *s) {
    size_t n = strlen(s);
    while (n && is_ws(s[n - 1])) n--;
    while (n && is_ws(*s)) s++, n--;
    put_n(b, s, n);
}

static int is_role(const chat_msg *m, const char *role) { return !strcmp(m->role, role); }

// The system message, when the conversation starts with one; *rest is the
// index of the first other message.
static const char *leading_system(const chat_msg *msgs, int n, int *rest) {
    *rest = n > 0 && is_role(&msgs[0], "system");
    return *rest ? msgs[0].content : NULL;
}

static void render_plain(strbuf *b, const chat_msg *msgs, int n, int gen) {
    for (int i = 0; i < n; i++) {
        const char *label = is_role(&msgs[i], "system") ? "System: "
                          : is_role(&msgs[i], "user")   ? "User: " : "Assistant:";
        put(b, label);  // the answer keeps the leading space the model wrote after "Assistant:"
        put(b, msgs[i].content);
        put(b, "\n");
    }
    if (gen) put(b, "Assistant:");
}

static void render_chatml(const chat_template *t, strbuf *b, const chat_msg *msgs, int n, int gen) {
    if (t->default_system && !(n > 0 && is_role(&msgs[0], "system"))) {
        put(b, "<|im_start|>system\n");
        put(b, t->default_system);
        put(b, "<|im_end|>\n");
    }
    for (int i = 0; i < n; i++) {
        put(b, "<|im_start|>");
        put(b, msgs[i].role);
        put(b, "\n");
        put(b, msgs[i].content);
        put(b, "<|im_end|>\n");
    }
    if (gen) put(b, "<|im_start|>assistant\n");
}

// Llama 2: every exchange is "<s>[INST] user [/INST] answer </s>"; the system
// prompt opens the first user message inside <<SYS>> markers. Content is
// stripped. The text ends at "[/INST]" whether or not a generation prompt is asked.
static void render_llama2(const chat_template *t, strbuf *b, const chat_msg *msgs, int n) {
    int i;
    const char *sys = leading_system(msgs, n, &i);
    for (int first = 1; i < n; i++) {
        if (is_role(&msgs[i], "user")) {
            put(b, t->bos);
            put(b, "[INST] ");
            if (first && sys) {
                put(b, "<<SYS>>\n");
                put_trimmed(b, sys);
                put(b, "\n<</SYS>>\n\n");
            }
            put_trimmed(b, msgs[i].content);
            put(b, " [/INST]");
            first = 0;
        } else if (is_role(&msgs[i], "assistant")) {
            put(b, " ");
            put_trimmed(b, msgs[i].content);
            put(b, " ");
            put(b, t->eos);
        }
    }
}

static void llama3_header(strbuf *b, const char *role) {
    put(b, "<|start_header_id|>");
    put(b, role);
    put(b, "<|end_header_id|>\n\n");
}

// Llama 3: BOS, then one header-delimited block per message, content trimmed.
// 3.1+ (t->date) always opens with a system block that states the knowledge
// cutoff and the date, then the system prompt if any.
static void render_llama3(const chat_template *t, strbuf *b, const chat_msg *msgs, int n, int gen) {
    put(b, t->bos);
    int i = 0;
    if (t->date) {
        const char *sys = leading_system(msgs, n, &i);
        llama3_header(b, "system");
        put(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
        put(b, t->date);
        put(b, "\n\n");
        if (sys) put_trimmed(b, sys);
        put(b, "<|eot_id|>");
    }
    for (; i < n; i++) {
        llama3_header(b, msgs[i].role);
        put_trimmed(b, msgs[i].content);
        put(b, "<|eot_id|>");
    }
    if (gen) llama3_header(b, "assistant");
}

// Mistral: BOS once, "[INST] user [/INST]" then the answer as written and EOS;
// the system prompt opens the first user message, separated by a blank line.
static void render_mistral(const chat_template *t, strbuf *b, const chat_msg *msgs, int n) {
    int i;
    const char *sys = leading_system(msgs, n, &i);
    put(b, t->bos);
    for (int first = 1; i < n; i++) {
        if (is_role(&msgs[i], "user")) {
            put(b, "[INST] ");
            if (first && sys) {
                put(b, sys);
                put(b, "\n\n");
            }
            put(b, msgs[i].content);
            put(b, " [/INST]");
            first = 0;
        } else if (is_role(&msgs[i], "assistant")) {
            put(b, msgs[i].content);
            put(b, t->eos);
        }
    }
}

// Gemma: roles "user" and "model", content trimmed; there is no system role,
// so (as Gemma 3's template does) the system prompt opens the first user
// message, separated by a blank line.
static void render_gemma(const chat_template *t, strbuf *b, const chat_msg *msgs, int n, int gen) {
    int i;
    const char *sys = leading_system(msgs, n, &i);
    put(b, t->bos);
    for (int first = 1; i < n; i++) {
        int user = is_role(&msgs[i], "user");
        put(b, user ? "<start_of_turn>user\n" : "<start_of_turn>model\n");
        if (user && first && sys) {
            put_trimmed(b, sys);
            put(b, "\n\n");
        }
        put_trimmed(b, msgs[i].content);
        put(b, "<end_of_turn>\n");
        first = first && !user;
    }
    if (gen) put(b, "<start_of_turn>model\n");
}

// Phi-3: "<|role|>\ncontent<|end|>\n". Phi-3-mini-4k's template drops system
// messages and closes every user message with the assistant header (its text is
// the same with or without a generation prompt); later ones render the system
// message and open each assistant message with the header, and end with EOS
// when no generation prompt is asked.
static void render_phi3(const chat_template *t, strbuf *b, const chat_msg *msgs, int n, int gen) {
    if (t->phi3_bos) put(b, t->bos);
    for (int i = 0; i < n; i++) {
        const chat_msg *m = &msgs[i];
        if (is_role(m, "system")) {
            if (t->system_dropped || !*m->content) continue;
            put(b, "<|system|>\n");
        } else if (is_role(m, "user")) {
            put(b, "<|user|>\n");
        } else if (!t->phi3_header_in_user) {
            put(b, "<|assistant|>\n");
        }
        put(b, m->content);
        put(b, "<|end|>\n");
        if (t->phi3_header_in_user && is_role(m, "user")) put(b, "<|assistant|>\n");
    }
    if (!t->phi3_header_in_user) put(b, gen ? "<|assistant|>\n" : t->eos);
}

char *tpl_render(const chat_template *t, const chat_msg *msgs, int n, int add_generation_prompt,
                 size_t *len) {
    strbuf b = {0};
    put(&b, "");  // an empty conversation still gives a string
    switch (t->family) {
    case TPL_CHATML: render_chatml(t, &b, msgs, n, add_generation_prompt); break;
    case TPL_LLAMA2: render_llama2(t, &b, msgs, n); break;
    case TPL_LLAMA3: render_llama3(t, &b, msgs, n, add_generation_prompt); break;
    case TPL_MISTRAL: render_mistral(t, &b, msgs, n); break;
    case TPL_GEMMA: render_gemma(t, &b, msgs, n, add_generation_prompt); break;
    case TPL_PHI3: render_phi3(t, &b, msgs, n, add_generation_prompt); break;
    default: render_plain(&b, msgs, n, add_generation_prompt); break;
    }
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    *len = b.len;
    return b.s;
}

const char *const *tpl_stops(const chat_template *t) {
    static const char *const stops[TPL_N_FAMILIES][2] = {
        [TPL_PLAIN] = {"\nUser:", NULL},          [TPL_CHATML] = {"<|im_end|>", NULL},
        [TPL_LLAMA2] = {"[INST]", NULL},          [TPL_LLAMA3] = {"<|eot_id|>", NULL},
        [TPL_MISTRAL] = {"[INST]", NULL},         [TPL_GEMMA] = {"<end_of_turn>", NULL},
        [TPL_PHI3] = {"<|end|>", NULL},
    };
    return stops[t->family];
}
