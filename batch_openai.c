// batch_openai.c — OpenAI Batch lines for `quill batch` (batch_int.h), as
// OpenAI's Batch API and `vllm run-batch` read and write them.
//
// A request: {"custom_id": "...", "method": "POST", "url": "/v1/chat/completions"
// or "/v1/completions", "body": {...}}. A chat body's "messages" are rendered
// by the model's chat template (template.h) and tokenized as the chat does
// (its markers are tokens; BOS unless the template writes it), and the
// template's end-of-turn strings stop generation. Body fields that change
// what is generated and that quill cannot honour are refused with an error
// record, never ignored; "model" and "user" are ignored (-m decides).
//
// A response: {"id": "batch_req_H", "custom_id": ..., "response": {"status_code":
// 200, "request_id": "req_H", "body": {"id": "chatcmpl-H" | "cmpl-H", "object":
// "chat.completion" | "text_completion", "created", "model", "choices": [one
// choice], "usage"}}, "error": null}, H a hash of the custom_id. An error:
// "response": {"status_code": 400, "request_id", "body": null} and "error":
// {"code", "message", "line"} (OpenAI's error object with the input line).
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "batch_int.h"
#include "util.h"

int openai_custom_id(json_t *root, json_t **id) {
    *id = json_object_get(root, "custom_id");
    return json_is_string(*id) ? 0 : -1;
}

// ---- the body --------------------------------------------------------------------

// A number field in [lo, hi]; 0, or -1 with msg.
static int number_in(const char *key, json_t *v, double lo, double hi, double *out, char *msg) {
    double x = json_number_value(v);
    if (!json_is_number(v) || !(x >= lo && x <= hi)) return errf(msg, "\"%s\" must be a number in [%g, %g]", key, lo, hi);
    *out = x;
    return 0;
}

// Fields a request may carry with only their default value: anything else
// asks for what quill does not do.
static int default_only(const char *key, json_t *v, char *msg) {
    int ok = json_is_null(v);
    if (!strcmp(key, "n") || !strcmp(key, "best_of")) ok |= json_is_integer(v) && json_integer_value(v) == 1;
    else if (!strcmp(key, "stream") || !strcmp(key, "echo")) ok |= json_is_false(v);
    else if (!strcmp(key, "frequency_penalty") || !strcmp(key, "presence_penalty"))
        ok |= json_is_number(v) && json_number_value(v) == 0;
    else if (!strcmp(key, "logit_bias")) ok |= json_is_object(v) && !json_object_size(v);
    else if (!strcmp(key, "suffix")) ok |= json_is_string(v) && !json_string_length(v);
    return ok ? 0 : errf(msg, "\"%s\" is not supported (only its default value)", key);
}

static const char *const DEFAULT_ONLY[] = {"n", "best_of", "stream", "echo", "frequency_penalty",
                                           "presence_penalty", "logit_bias", "suffix", NULL};
static const char *const IGNORED[] = {"model", "user", "stream_options", "metadata", "store", NULL};

static int in_list(const char *const *list, const char *key) {
    for (; *list; list++)
        if (!strcmp(*list, key)) return 1;
    return 0;
}

// logprobs, top_logprobs and response_format (batch_features_apply uses them).
static int feature_field(record *r, const char *key, json_t *v, char *msg) {
    if (!strcmp(key, "logprobs")) {  // chat: a boolean; completions: how many alternatives
        if (r->ep == EP_CHAT ? !json_is_boolean(v) && !json_is_null(v) : !json_is_integer(v) && !json_is_null(v))
            return errf(msg, "\"logprobs\" must be %s", r->ep == EP_CHAT ? "a boolean" : "an integer");
        r->feat.logprobs = json_is_true(v) || (json_is_integer(v) && json_integer_value(v) > 0);
        if (json_is_integer(v)) r->feat.top_logprobs = (int)json_integer_value(v);
    } else if (!strcmp(key, "top_logprobs")) {
        if (!json_is_null(v) && (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 20))
            return errf(msg, "\"top_logprobs\" must be an integer in [0, 20]");
        r->feat.top_logprobs = (int)json_integer_value(v);
    } else {  // response_format
        json_t *type = json_object_get(v, "type");
        if (!json_is_null(v) && !json_is_string(type)) return errf(msg, "\"response_format\" must be {\"type\": ...}");
        if (json_is_string(type) && strcmp(json_string_value(type), "text"))
            r->feat.response_format = json_incref(v);
    }
    return 0;
}

// One sampling or length field of a body; 1 when key is not one of them.
static int sampling_field(record *r, const char *key, json_t *v, char *msg) {
    double x = 0;
    if (!strcmp(key, "max_tokens") || !strcmp(key, "max_completion_tokens")) {
        if (json_is_null(v)) return 0;
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30))
            return errf(msg, "\"%s\" must be an integer >= 0", key);
        r->n = (int)json_integer_value(v);
    } else if (!strcmp(key, "temperature")) {
        if (!json_is_null(v) && number_in(key, v, 0, 100, &x, msg)) return -1;
        if (!json_is_null(v)) r->sp.temp = (float)x;
    } else if (!strcmp(key, "top_p")) {
        if (!json_is_null(v) && number_in(key, v, 0, 1, &x, msg)) return -1;
        if (!json_is_null(v)) r->sp.top_p = (float)x;
    } else if (!strcmp(key, "min_p")) {
        if (number_in(key, v, 0, 1, &x, msg)) return -1;
        r->sp.min_p = (float)x;
    } else if (!strcmp(key, "top_k")) {
        if (!json_is_integer(v) || json_integer_value(v) < -1) return errf(msg, "\"top_k\" must be an integer >= -1");
        r->sp.top_k = (int)json_integer_value(v);
    } else if (!strcmp(key, "repetition_penalty")) {
        if (number_in(key, v, 0.01, 100, &x, msg)) return -1;
        r->sp.repeat_penalty = (float)x;
    } else if (!strcmp(key, "seed")) {
        if (!json_is_integer(v) && !json_is_null(v)) return errf(msg, "\"seed\" must be an integer");
        if (json_is_integer(v)) r->sp.seed = (uint64_t)json_integer_value(v);
    } else {
        return 1;
    }
    return 0;
}

// ---- chat ---------------------------------------------------------------------------

// A message's content as text: a string, or text parts joined by newlines.
static json_t *content_text(json_t *c, int i, char *msg) {
    if (json_is_string(c) || json_is_null(c)) return json_incref(c);
    if (!json_is_array(c)) return errf(msg, "message %d: \"content\" must be a string or an array of parts", i), NULL;
    size_t k, len = 0;
    json_t *p;
    json_array_foreach(c, k, p) {
        json_t *t = json_object_get(p, "text");
        if (!json_is_string(t) || strcmp(json_string_value(json_object_get(p, "type")) ?: "", "text"))
            return errf(msg, "message %d: only text content parts are supported", i), NULL;
        len += json_string_length(t) + 1;
    }
    char *s = malloc(len + 1), *q = s;
    if (!s) return errf(msg, "out of memory"), NULL;
    json_array_foreach(c, k, p) {
        json_t *t = json_object_get(p, "text");
        if (k) *q++ = '\n';
        memcpy(q, json_string_value(t), json_string_length(t));
        q += json_string_length(t);
    }
    json_t *out = json_stringn_nocheck(s, (size_t)(q - s));
    free(s);
    return out;
}

// The messages as the template sees them: each content as text.
static json_t *chat_messages(json_t *msgs, char *msg) {
    if (!json_is_array(msgs) || !json_array_size(msgs)) return errf(msg, "\"messages\" must be a non-empty array"), NULL;
    json_t *out = json_array(), *m;
    size_t i;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m) || !json_is_string(json_object_get(m, "role"))) {
            json_decref(out);
            return errf(msg, "message %zu must be an object with a \"role\"", i), NULL;
        }
        json_t *c = content_text(json_object_get(m, "content"), (int)i, msg), *copy = json_copy(m);
        if (!c || !copy) return json_decref(c), json_decref(copy), json_decref(out), NULL;
        json_object_set_new(copy, "content", c);
        json_array_append_new(out, copy);
    }
    return out;
}

static int load_template(batch_input *bi, char *msg) {
    if (bi->tpl_state == 0) {
        int fallback = 0;
        bi->tpl_state = tpl_load(&bi->tpl, model_gguf(bi->m), bi->tok, bi->o->template_name, &fallback, bi->tpl_err)
                            ? -1 : 1;
        bi->sum->template_fallback = fallback;
    }
    return bi->tpl_state < 0 ? errf(msg, "the chat template: %s", bi->tpl_err) : 0;
}

// r's prompt: the conversation rendered, then its stops and tokenizing as the chat's.
static int chat_prompt(batch_input *bi, record *r, json_t *messages, json_t *kwargs, char *msg) {
    if (kwargs && !json_is_object(kwargs)) return errf(msg, "\"chat_template_kwargs\" must be an object");
    if (load_template(bi, msg)) return -1;
    json_t *msgs = chat_messages(messages, msg), *vars = json_object();
    if (!msgs || !vars) return json_decref(msgs), json_decref(vars), -1;
    if (bi->o->vars) json_object_update(vars, (json_t *)bi->o->vars);
    if (kwargs) json_object_update(vars, kwargs);
    int rc = tpl_render_json(&bi->tpl, msgs, NULL, vars, 1, &r->prompt, &r->prompt_len, msg);
    json_decref(msgs);
    json_decref(vars);
    if (rc) return -1;
    r->special = 1;
    r->add_bos = !bi->o->no_bos && tpl_add_bos(&bi->tpl, bi->tok, r->prompt);
    for (const char *const *s = bi->tpl.stops; s && *s && r->n_stops < MAX_REC_STOPS; s++)
        if (!(r->stops[r->n_stops++] = strdup(*s))) return errf(msg, "out of memory");
    return 0;
}

// ---- the request ------------------------------------------------------------------------

static int completion_prompt(record *r, json_t *p, char *msg) {
    if (json_is_array(p) && json_array_size(p) == 1) p = json_array_get(p, 0);
    if (!json_is_string(p)) return errf(msg, "\"prompt\" must be a string (or an array of one string)");
    if (!(r->prompt = strdup(json_string_value(p)))) return errf(msg, "out of memory");
    r->prompt_len = json_string_length(p);
    return 0;
}

static int body_fields(batch_input *bi, record *r, json_t *body, const char **code, char *msg) {
    const char *key;
    json_t *v, *text = NULL, *kwargs = NULL;
    const char *text_key = r->ep == EP_CHAT ? "messages" : "prompt";
    json_object_foreach(body, key, v) {
        int s = sampling_field(r, key, v, msg);
        if (s < 0) return -1;
        if (s == 0) continue;
        if (!strcmp(key, text_key)) text = v;
        else if (!strcmp(key, "stop")) {
            if (!json_is_null(v) && record_set_stops(r, v, msg)) return -1;
        } else if (!strcmp(key, "logprobs") || !strcmp(key, "top_logprobs") || !strcmp(key, "response_format")) {
            if (feature_field(r, key, v, msg)) return -1;
        } else if (r->ep == EP_CHAT && !strcmp(key, "chat_template_kwargs")) kwargs = v;
        else if (in_list(DEFAULT_ONLY, key)) {
            if (default_only(key, v, msg)) return *code = ERR_UNSUPPORTED, -1;
        } else if (!in_list(IGNORED, key)) {
            *code = ERR_UNSUPPORTED;
            return errf(msg, "\"%.40s\" is not supported in %s bodies", key, r->ep == EP_CHAT ? "chat" : "completion");
        }
    }
    r->n_user_stops = r->n_stops;
    if (!text) return errf(msg, "the body has no \"%s\"", text_key);
    return r->ep == EP_CHAT ? chat_prompt(bi, r, text, kwargs, msg) : completion_prompt(r, text, msg);
}

int openai_parse(batch_input *bi, record *r, json_t *root, const char **code, char *msg) {
    const char *key;
    json_t *v, *body = json_object_get(root, "body");
    const char *url = json_string_value(json_object_get(root, "url"));
    json_object_foreach(root, key, v)
        if (strcmp(key, "custom_id") && strcmp(key, "method") && strcmp(key, "url") && strcmp(key, "body"))
            return errf(msg, "unknown field \"%.40s\" (requests have custom_id, method, url, body)", key);
    if (strcmp(json_string_value(json_object_get(root, "method")) ?: "", "POST"))
        return errf(msg, "\"method\" must be \"POST\"");
    if (url && !strcmp(url, "/v1/chat/completions")) r->ep = EP_CHAT;
    else if (url && !strcmp(url, "/v1/completions")) r->ep = EP_COMPLETION;
    else return errf(msg, "\"url\" must be \"/v1/chat/completions\" or \"/v1/completions\"");
    if (!json_is_object(body)) return errf(msg, "\"body\" must be an object");
    return body_fields(bi, r, body, code, msg);
}

// ---- responses ----------------------------------------------------------------------------

static json_t *envelope(const record *r, int status, json_t *body, json_t *error) {
    char id[40], req[40];  // the custom_id's hash and the line's: one per output line
    const unsigned long long h = r->key.check ^ (uint64_t)r->line * 0x9e3779b97f4a7c15ull;
    snprintf(id, sizeof id, "batch_req_%016llx", h);
    snprintf(req, sizeof req, "req_%016llx", h);
    return json_pack("{s:s, s:O?, s:{s:i, s:s, s:o?}, s:o?}", "id", id, "custom_id", r->id, "response",
                     "status_code", status, "request_id", req, "body", body, "error", error);
}

// Log-probabilities in a completion's (legacy) shape: parallel arrays of the
// tokens, their log-probabilities, each step's alternatives as {token:
// logprob} and each token's offset in the text (code points); lp is the chat
// shape's "content" array (logprobs.c).
static json_t *completion_logprobs(json_t *lp) {
    json_t *o = json_pack("{s:[], s:[], s:[], s:[]}", "tokens", "token_logprobs", "top_logprobs", "text_offset");
    size_t i, j;
    json_t *t, *alt;
    long offset = 0;
    json_array_foreach(lp, i, t) {
        if (!o) break;
        json_t *top = json_object();
        json_array_foreach(json_object_get(t, "top_logprobs"), j, alt)
            json_object_set(top, json_string_value(json_object_get(alt, "token")), json_object_get(alt, "logprob"));
        const char *tok = json_string_value(json_object_get(t, "token"));
        json_array_append(json_object_get(o, "tokens"), json_object_get(t, "token"));
        json_array_append(json_object_get(o, "token_logprobs"), json_object_get(t, "logprob"));
        json_array_append_new(json_object_get(o, "top_logprobs"), top);
        json_array_append_new(json_object_get(o, "text_offset"), json_integer(offset));
        for (size_t k = 0, n = json_string_length(json_object_get(t, "token")); k < n; k++)
            offset += ((unsigned char)tok[k] & 0xC0) != 0x80;  // code points
    }
    return o;
}

json_t *openai_result(const batch_input *bi, const record *r, const batch_result *res) {
    char id[40];
    const int chat = r->ep == EP_CHAT;
    snprintf(id, sizeof id, "%s-%016llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)r->key.check);
    const char *finish = !strcmp(res->reason, "eos") || !strcmp(res->reason, "stop") ? "stop" : "length";
    json_t *lp = !res->lp ? json_null() : chat ? json_pack("{sO}", "content", res->lp) : completion_logprobs(res->lp);
    json_t *choice = chat ? json_pack("{s:i, s:{s:s, s:s}, s:o, s:s, s:s?}", "index", 0, "message", "role",
                                      "assistant", "content", res->text, "logprobs", lp, "finish_reason", finish,
                                      "stop_reason", res->stop)
                          : json_pack("{s:i, s:s, s:o, s:s, s:s?}", "index", 0, "text", res->text, "logprobs", lp,
                                      "finish_reason", finish, "stop_reason", res->stop);
    json_t *body = json_pack("{s:s, s:s, s:I, s:s, s:[o], s:{s:i, s:i, s:i}}", "id", id, "object",
                             chat ? "chat.completion" : "text_completion", "created", (json_int_t)time(NULL),
                             "model", bi->o->model_name ? bi->o->model_name : "quill", "choices", choice, "usage",
                             "prompt_tokens", res->n_prompt, "completion_tokens", res->n_gen, "total_tokens",
                             res->n_prompt + res->n_gen);
    return body ? envelope(r, 200, body, NULL) : NULL;
}

json_t *openai_error(const record *r, const char *code, const char *msg) {
    json_t *e = json_pack("{s:s, s:s, s:i}", "code", code, "message", msg, "line", r->line);
    return e ? envelope(r, 400, NULL, e) : NULL;
}
