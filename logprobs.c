// logprobs.c — see logprobs.h.
#include "logprobs.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

// s[0..n) as a JSON string, each byte that is not part of valid UTF-8 as U+FFFD.
static json_t *text_json(const char *s, size_t n) {
    size_t len;
    char *t = utf8_sanitized(s, n, &len);
    json_t *j = t ? json_stringn(t, len) : NULL;
    free(t);
    return j;
}

// {"token", "id", ["logprob",] "bytes"} for token id after prev.
static json_t *token_json(const tokenizer *tok, int32_t prev, int32_t id, int with_lp, float lp) {
    char buf[1024];
    int n = tok_decode(tok, prev, id, buf, sizeof buf);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = sizeof buf;
    json_t *o = json_object(), *bytes = json_array();
    if (!o || !bytes) return json_decref(o), json_decref(bytes), NULL;
    for (int i = 0; i < n; i++) json_array_append_new(bytes, json_integer((unsigned char)buf[i]));
    json_object_set_new(o, "token", text_json(buf, (size_t)n));
    json_object_set_new(o, "id", json_integer(id));
    // -inf (a token the grammar rules out) has no JSON number: null
    if (with_lp) json_object_set_new(o, "logprob", isfinite(lp) ? json_real(lp) : json_null());
    json_object_set_new(o, "bytes", bytes);
    return o;
}

json_t *logprob_entry(const tokenizer *tok, sampler *smp, const float *logits, int32_t prev, int32_t id, int top_n) {
    if (top_n < 0) return token_json(tok, prev, id, 0, 0);
    int32_t ids[SAMPLE_MAX_TOP];
    float lps[SAMPLE_MAX_TOP], lp;
    if (top_n > SAMPLE_MAX_TOP) top_n = SAMPLE_MAX_TOP;
    sampler_logprobs(smp, logits, id, top_n, &lp, ids, lps);
    json_t *o = token_json(tok, prev, id, 1, lp), *top = json_array();
    if (!o || !top) return json_decref(o), json_decref(top), NULL;
    for (int i = 0; i < top_n; i++) json_array_append_new(top, token_json(tok, prev, ids[i], 1, lps[i]));
    json_object_set_new(o, "top_logprobs", top);
    return o;
}

int genout_init(genout *g, const tokenizer *tok, int format, int top_n, FILE *out) {
    *g = (genout){.tok = tok, .format = format, .top_n = top_n, .out = out};
    if (format == OUT_JSON && !(g->content = json_array())) return -1;
    return 0;
}

void genout_free(genout *g) {
    json_decref(g->content);
    g->content = NULL;
}

static void write_line(genout *g, json_t *o) {
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(7));
    if (!s) return;
    if (!g->error && (fputs(s, g->out) < 0 || fputc('\n', g->out) < 0 || fflush(g->out)))
        g->error = errno ? errno : EIO;
    free(s);
}

int genout_token(genout *g, sampler *smp, const float *logits, int32_t prev, int32_t id) {
    json_t *e = logprob_entry(g->tok, smp, logits, prev, id, g->top_n);
    if (!e) return -1;
    if (g->format == OUT_JSON) return json_array_append_new(g->content, e) ? -1 : 0;
    write_line(g, e);
    json_decref(e);
    return 0;
}

int genout_finish(genout *g, const char *text, size_t len, const char *finish, int n_prompt, int n_gen, json_t *extra) {
    json_t *o = json_object();
    if (!o) return json_decref(extra), -1;
    json_object_set_new(o, "text", text_json(text ? text : "", len));
    json_object_set_new(o, "finish_reason", json_string(finish));
    json_object_set_new(o, "prompt_tokens", json_integer(n_prompt));
    json_object_set_new(o, "completion_tokens", json_integer(n_gen));
    if (g->format == OUT_JSON && g->top_n >= 0) {
        json_object_set_new(o, "logprobs", json_pack("{sO}", "content", g->content));
    } else if (g->format == OUT_JSON) {
        json_object_set_new(o, "tokens", json_incref(g->content));
    }
    if (extra) json_object_update(o, extra), json_decref(extra);
    write_line(g, o);
    json_decref(o);
    return 0;
}
