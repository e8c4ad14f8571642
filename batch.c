// batch.c — see batch.h.
//
// The loop: fill free slots from the input (records the KV pool cannot yet
// hold wait), then one forward pass: the next prefill chunk of the oldest
// sequence still prefilling, followed by one token of every decoding
// sequence. Each sequence reserves, when admitted, the KV its prompt and
// token budget can reach, so a running sequence never finds the pool full.
#include "batch.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "textout.h"
#include "grammar.h"
#include "json_schema.h"
#include "logprobs.h"
#include "reasoning.h"
#include "util.h"

#define MAX_REC_STOPS 16
#define REC_MAX_BYTES (64u << 20)  // a longer input line is an error record

typedef struct {              // one input record; then its output line
    int index;                // 0-based record number: the output order
    int line;                 // 1-based input line
    json_t *id;               // "id" as given (owned), or NULL: the line number is used
    char *prompt;             // NUL-terminated (owned)
    size_t prompt_len;
    int n;                    // max new tokens (-1: until EOS or the context end)
    sampler_params sp;
    char *stops[MAX_REC_STOPS];  // owned
    int n_stops;
    grammar *g;               // "grammar" / "json_schema" (owned), or NULL: the command line's
    int logprobs;             // "logprobs": alternatives per token (-1: none)
} record;

typedef struct {              // a sequence running in a slot
    record *r;                // NULL: the slot is free
    long order;               // admission number: the oldest prefills first
    int seq;                  // model sequence
    int32_t *ids;             // [n_ids] prompt tokens
    int n_ids;
    int n_done;               // prompt positions in the KV
    int limit;                // positions it may fill: min(prompt + n, context, pool)
    int reserved;             // KV positions promised to it (whole blocks)
    int32_t prev, next;       // last token in the KV; the sampled token to feed next
    int n_gen;
    sampler *smp;
    gconstraint *gc;          // the record's grammar, or NULL
    json_t *lp;               // the tokens' log-probabilities (with "logprobs"), or NULL
    textout out;              // the generated text (no sink: returned at the end)
    textout rout;             // the reasoning, apart (reasoning.h)
    reason_split rs;
    double t_start, t_first, t_last;
} slot;

typedef struct {
    model *m;
    const tokenizer *tok;
    const batch_opts *o;
    FILE *in, *out;
    batch_summary *sum;
    char *err;
    int eof, closed;          // input ended; output closed (EPIPE)
    int line_no, n_records;
    record *waiting;          // read, not admitted (the pool is full)
    char **done;              // [n_records] output lines not yet written (ordered mode)
    int done_cap, next_out;
    slot *slots;              // [parallel]
    long n_admitted;
    int cache_seq;            // a finished prompt kept for prefix reuse, or -1
    int32_t *cache_ids;
    int cache_len;
    int reserved;             // positions promised to live slots
    int pool;                 // positions the pool holds
    float *logits;            // [parallel + 1, n_vocab]
    gvocab *gv;               // the vocabulary trie, built for the first grammar
    model_tok *toks;          // [chunk + parallel] a pass's tokens
    slot **dec;               // [parallel] a pass's decoding slots
    double t_progress;
} run;

int batch_model_seqs(const batch_opts *o) { return o->parallel + 1; }

static int round_block(int n) { return (n + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK; }

// ---- output -------------------------------------------------------------

// Copies s[0..n) into a new NUL-terminated string, each byte that is not
// part of valid UTF-8 replaced by U+FFFD (JSON strings must be UTF-8).
static char *valid_utf8(const char *s, size_t n) { return utf8_sanitized(s, n, NULL); }

static void free_record(record *r) {
    if (!r) return;
    json_decref(r->id);
    free(r->prompt);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    grammar_free(r->g);
    free(r);
}

static int stopped(const run *R) { return R->o->stop && *R->o->stop; }

static int write_line(run *R, const char *line) {
    if (R->closed) return 0;
    if (fputs(line, R->out) < 0 || fputc('\n', R->out) < 0 || fflush(R->out)) {
        if (errno == EPIPE || stopped(R)) return R->closed = 1, 0;  // a signal may break the write
        return errf(R->err, "cannot write the output: %s", strerror(errno));
    }
    return 0;
}

// Hands record r's output line (owned) over: written now (unordered, or
// next in order) or kept until the records before it are written.
static int deliver(run *R, record *r, char *line) {
    R->sum->n_records++;
    if (R->o->unordered) {
        int rc = write_line(R, line);
        free(line);
        return rc;
    }
    R->done[r->index] = line;
    for (; R->next_out < R->n_records && R->done[R->next_out]; R->next_out++) {
        int rc = write_line(R, R->done[R->next_out]);
        free(R->done[R->next_out]);
        R->done[R->next_out] = NULL;
        if (rc) return -1;
    }
    return 0;
}

// Serializes obj (consumed) and delivers it as r's output.
static int deliver_json(run *R, record *r, json_t *obj) {
    json_t *rec = json_object();  // "id" first, for people reading the output
    if (!obj || !rec) return json_decref(obj), json_decref(rec), errf(R->err, "out of memory");
    json_object_set_new(rec, "id", r->id ? json_incref(r->id) : json_integer(r->line));
    json_object_update(rec, obj);
    json_decref(obj);
    char *line = json_dumps(rec, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));
    json_decref(rec);
    if (!line) return errf(R->err, "out of memory");
    return deliver(R, r, line);
}

// An error record for r, which is freed.
static int deliver_error(run *R, record *r, const char *msg) {
    R->sum->n_errors++;
    char *m = valid_utf8(msg, strlen(msg));
    json_t *o = json_object();
    if (o && m) {
        json_object_set_new(o, "line", json_integer(r->line));
        json_object_set_new(o, "error", json_string(m));
    }
    free(m);
    int rc = deliver_json(R, r, o);
    free_record(r);
    return rc;
}

// ---- input --------------------------------------------------------------

// "grammar": GBNF text; "json_schema": a schema (an object, or true).
static int parse_grammar(record *r, const char *key, json_t *v, char *msg) {
    char *text = NULL, err[ERR_LEN];
    size_t len;
    if (r->g) return errf(msg, "give \"grammar\" or \"json_schema\", not both");
    if (key[0] == 'g') {
        if (!json_is_string(v)) return errf(msg, "\"grammar\" must be a string (GBNF)");
        if (grammar_parse(&r->g, json_string_value(v), json_string_length(v), err)) return errf(msg, "%s", err);
        return 0;
    }
    if (!json_is_object(v) && !json_is_true(v)) return errf(msg, "\"json_schema\" must be a JSON Schema object");
    if (!(text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY))) return errf(msg, "out of memory");
    len = strlen(text);
    char *gbnf = NULL;
    int rc = json_schema_to_gbnf(text, len, &gbnf, err) || grammar_parse(&r->g, gbnf, strlen(gbnf), err);
    free(text), free(gbnf);
    return rc ? errf(msg, "%s", err) : 0;
}

// Reads the fields of one JSON record into r; a message in msg on error.
static int parse_fields(record *r, json_t *root, char *msg) {
    const char *key;
    json_t *v;
    if (!json_is_object(root)) return errf(msg, "expected a JSON object");
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "id")) r->id = json_incref(v);
        else if (!strcmp(key, "prompt")) {
            if (!json_is_string(v)) return errf(msg, "\"prompt\" must be a string");
            r->prompt_len = json_string_length(v);
            if (!(r->prompt = malloc(r->prompt_len + 1))) return errf(msg, "out of memory");
            memcpy(r->prompt, json_string_value(v), r->prompt_len + 1);
        } else if (!strcmp(key, "n")) {
            if (!json_is_integer(v) || json_integer_value(v) < -1 || json_integer_value(v) > (1 << 30))
                return errf(msg, "\"n\" must be an integer >= -1");
            r->n = (int)json_integer_value(v);
        } else if (!strcmp(key, "temp")) {
            double t = json_number_value(v);
            if (!json_is_number(v) || !(t >= 0 && t <= 100)) return errf(msg, "\"temp\" must be a number in [0, 100]");
            r->sp.temp = (float)t;
        } else if (!strcmp(key, "seed")) {
            if (!json_is_integer(v) || json_integer_value(v) < 0) return errf(msg, "\"seed\" must be an integer >= 0");
            r->sp.seed = (uint64_t)json_integer_value(v);
        } else if (!strcmp(key, "stop")) {
            if (json_is_string(v)) v = json_pack("[O]", v);
            else if (json_is_array(v)) json_incref(v);
            else return errf(msg, "\"stop\" must be a string or an array of strings");
            size_t i;
            json_t *s;
            for (int k = 0; k < r->n_stops; k++) free(r->stops[k]);
            r->n_stops = 0;
            json_array_foreach(v, i, s) {
                if (!json_is_string(s) || !json_string_length(s) || r->n_stops == MAX_REC_STOPS) {
                    json_decref(v);
                    return errf(msg, "\"stop\" must hold at most %d non-empty strings", MAX_REC_STOPS);
                }
                r->stops[r->n_stops++] = strdup(json_string_value(s));
            }
            json_decref(v);
        } else if (!strcmp(key, "logprobs")) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > SAMPLE_MAX_TOP)
                return errf(msg, "\"logprobs\" must be an integer in [0, %d]", SAMPLE_MAX_TOP);
            r->logprobs = (int)json_integer_value(v);
        } else if (!strcmp(key, "grammar") || !strcmp(key, "json_schema")) {
            if (parse_grammar(r, key, v, msg)) return -1;
        } else {
            return errf(msg, "unknown field \"%.40s\" (records have id, prompt, n, temp, seed, stop, logprobs, grammar, "
                        "json_schema)", key);
        }
    }
    if (!r->prompt) return errf(msg, "the record has no \"prompt\"");
    return 0;
}

// A record from one input line (without its newline); 0, or -1 with msg.
static int parse_record(run *R, record *r, char *line, size_t len, char *msg) {
    long bad = utf8_invalid_at(line, len);
    if (bad >= 0) return errf(msg, "invalid UTF-8 at byte %ld", bad + 1);
    if (R->o->lines) {
        if (!(r->prompt = malloc(len + 1))) return errf(msg, "out of memory");
        memcpy(r->prompt, line, len);
        r->prompt[r->prompt_len = len] = 0;
        return 0;
    }
    json_error_t je;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
    if (!root) return errf(msg, "invalid JSON at column %d: %s", je.column, je.text);
    int rc = parse_fields(r, root, msg);
    json_decref(root);
    return rc;
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

// The next valid record, or NULL at the end of the input (or on a fatal
// error: R->err set, returns NULL with *fatal). Invalid lines become error
// records on the way; blank lines are skipped.
static record *next_record(run *R, int *fatal) {
    char *line = NULL;
    size_t cap = 0;
    record *out = NULL;
    *fatal = 0;
    while (!out && !R->eof) {
        errno = 0;
        ssize_t n = getline(&line, &cap, R->in);
        if (n < 0) {
            if (ferror(R->in) && !stopped(R)) *fatal = 1, errf(R->err, "cannot read the input: %s", strerror(errno));
            R->eof = 1;
            break;
        }
        R->line_no++;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n') len--;
        if (len && line[len - 1] == '\r') len--;
        if (blank(line, len)) continue;
        record *r = calloc(1, sizeof *r);
        if (!r || R->n_records == R->done_cap) {
            int cap2 = R->done_cap ? 2 * R->done_cap : 64;
            char **d = r ? realloc(R->done, sizeof *d * (size_t)cap2) : NULL;
            if (!d) { free(r); *fatal = 1; errf(R->err, "out of memory"); break; }
            memset(d + R->done_cap, 0, sizeof *d * (size_t)(cap2 - R->done_cap));
            R->done = d, R->done_cap = cap2;
        }
        *r = (record){.index = R->n_records++, .line = R->line_no, .n = R->o->n_predict, .sp = R->o->sp,
                      .logprobs = R->o->logprobs};
        for (int i = 0; i < R->o->n_stops; i++) r->stops[r->n_stops++] = strdup(R->o->stops[i]);
        char msg[ERR_LEN];
        if (len > REC_MAX_BYTES) errf(msg, "the line is longer than %u bytes", REC_MAX_BYTES);
        if (len > REC_MAX_BYTES || parse_record(R, r, line, len, msg)) {
            if (deliver_error(R, r, msg)) { *fatal = 1; break; }
            continue;
        }
        out = r;
    }
    free(line);
    return out;
}

// ---- sequences ----------------------------------------------------------

static void free_slot(slot *s) {
    free(s->ids);
    textout_free(&s->out);
    textout_free(&s->rout);
    sampler_free(s->smp);
    gcon_free(s->gc);
    json_decref(s->lp);
    free_record(s->r);
    *s = (slot){.seq = -1};
}

// Tokenizes r into s and decides whether it can run now. Returns 1 when
// admitted, 0 when it must wait for KV room, -1 when r became an error
// record (or on a fatal error, with R->err set and *fatal).
static int admit(run *R, slot *s, record *r, int *fatal) {
    char msg[ERR_LEN];
    const int ctx = model_ctx(R->m);
    int32_t *ids;
    int n;
    *fatal = 0;
    if (tok_encode(R->tok, r->prompt, r->prompt_len, !R->o->no_bos && tok_add_bos(R->tok), R->o->special,
                   &ids, &n, msg))
        return *fatal = deliver_error(R, r, msg), -1;
    const char *why = NULL;
    if (n == 0) why = "the prompt is empty and the model has no BOS token to start from";
    else if (n > ctx) errf(msg, "the prompt is %d tokens but the context holds %d (raise -c)", n, ctx), why = msg;
    else if (round_block(n) > R->pool)
        errf(msg, "the prompt is %d tokens but the KV pool holds %d (raise --kv-mem)", n, R->pool), why = msg;
    if (why) {
        free(ids);
        *fatal = deliver_error(R, r, why);
        return -1;
    }
    int limit = r->n < 0 || (long)n + r->n > ctx ? ctx : n + r->n;
    if (limit > R->pool) limit = R->pool;
    const int need = round_block(limit);
    const int cache = R->cache_seq >= 0 ? round_block(R->cache_len) : 0;
    if (R->reserved + need > R->pool - cache && R->cache_seq >= 0) {  // drop the kept prefix first
        model_seq_free(R->m, R->cache_seq);
        R->cache_seq = -1;
    }
    if (R->reserved + need > R->pool - (R->cache_seq >= 0 ? cache : 0)) {
        free(ids);
        return 0;
    }
    *s = (slot){.r = r, .order = R->n_admitted++, .seq = model_seq_new(R->m), .ids = ids, .n_ids = n,
                .limit = limit, .reserved = need, .t_start = now_sec()};
    s->smp = sampler_new(&r->sp, model_cfg(R->m)->n_vocab);
    reason_init(&s->rs, r->prompt, r->prompt_len);
    if (s->seq < 0 || !s->smp || textout_init(&s->out, R->tok, (const char *const *)r->stops, r->n_stops, NULL) ||
        textout_init(&s->rout, R->tok, NULL, 0, NULL)) {
        *fatal = 1;
        errf(R->err, s->seq < 0 ? "no free sequence for a new prompt" : "out of memory");
        return -1;
    }
    for (int i = 0; i < n; i++) sampler_accept(s->smp, ids[i]);
    const grammar *g = r->g ? r->g : R->o->grammar;
    if (g && ((!R->gv && gvocab_new(&R->gv, R->tok, R->err)) || gcon_new(&s->gc, g, R->gv, R->err)))
        return *fatal = 1, -1;
    if (r->logprobs >= 0 && !(s->lp = json_array())) return *fatal = 1, errf(R->err, "out of memory"), -1;
    R->reserved += need;
    R->sum->prompt_tokens += n;
    return 1;
}

// Points s's first positions at the longest prompt prefix (a multiple of
// PREFILL_TILE, leaving its last token to compute) that a live sequence or
// the kept prefix already holds.
static void share_prefix(run *R, slot *s) {
    int best = 0, src = -1;
    for (int k = -1; k < R->o->parallel; k++) {
        const slot *o = k >= 0 ? &R->slots[k] : NULL;
        const int32_t *ids = o ? o->ids : R->cache_ids;
        int len = o ? (o->r && o != s ? o->n_done : 0) : (R->cache_seq >= 0 ? R->cache_len : 0);
        if (len > s->n_ids - 1) len = s->n_ids - 1;
        int l = 0;
        while (l < len && ids[l] == s->ids[l]) l++;
        l = l / PREFILL_TILE * PREFILL_TILE;
        if (l > best) best = l, src = o ? o->seq : R->cache_seq;
    }
    if (best == 0) return;
    best = model_seq_share(R->m, s->seq, src, best);  // 0 where a sliding window no longer holds it
    s->n_done = best;
    R->sum->shared_tokens += best;
}

// Keeps s's prompt (whole tiles of it) for later prompts to share, in place
// of the previous kept prefix.
static void keep_prefix(run *R, slot *s) {
    const int keep = (s->n_done < s->n_ids ? s->n_done : s->n_ids) / PREFILL_TILE * PREFILL_TILE;
    if (keep == 0) {
        model_seq_free(R->m, s->seq);
        return;
    }
    if (model_seq_rewind(R->m, s->seq, keep) == 0) {  // a sliding window no longer holds the prompt's end
        model_seq_free(R->m, s->seq);
        return;
    }
    if (R->cache_seq >= 0) model_seq_free(R->m, R->cache_seq);
    free(R->cache_ids);
    R->cache_ids = s->ids;  // taken over
    s->ids = NULL;
    R->cache_seq = s->seq;
    R->cache_len = keep;
}

static int finish(run *R, slot *s, const char *reason) {
    if (strcmp(reason, "stop") && R->o->reasoning && reason_finish(&s->rs, &s->out, &s->rout) < 0)
        return errf(R->err, "out of memory");
    if (strcmp(reason, "stop") && textout_finish(&s->out) < 0) return errf(R->err, "out of memory");
    if (textout_finish(&s->rout) < 0) return errf(R->err, "out of memory");
    batch_summary *sum = R->sum;
    const double ttft = s->t_first - s->t_start;
    const double tpot = s->n_gen > 1 ? (s->t_last - s->t_first) / (s->n_gen - 1) : 0;
    sum->gen_tokens += s->n_gen;
    if (s->n_gen > 0) sum->sum_ttft += ttft;
    if (s->n_gen > 1) sum->sum_tpot += tpot, sum->n_tpot++;
    char *text = valid_utf8(s->out.text ? s->out.text : "", s->out.len);
    json_t *o = json_object();
    if (o && text) {
        json_object_set_new(o, "text", json_string(text));
        json_object_set_new(o, "tokens", json_integer(s->n_gen));
        json_object_set_new(o, "finish_reason", json_string(reason));
        json_object_set_new(o, "prompt_tokens", json_integer(s->n_ids));
        json_object_set_new(o, "ttft_ms", json_real(s->n_gen ? round(ttft * 1e6) / 1e3 : 0));
        json_object_set_new(o, "tpot_ms", json_real(round(tpot * 1e6) / 1e3));
        if (s->gc) json_object_set_new(o, "grammar_complete", json_boolean(gcon_can_end(s->gc)));
        if (s->lp) json_object_set_new(o, "logprobs", json_pack("{sO}", "content", s->lp));
        char *rtext = s->rs.opened ? valid_utf8(s->rout.text ? s->rout.text : "", s->rout.len) : NULL;
        if (rtext) json_object_set_new(o, "reasoning", json_string(rtext));
        if (s->rs.opened) json_object_set_new(o, "reasoning_closed", json_boolean(!s->rs.think));
        free(rtext);
    }
    free(text);
    int rc = deliver_json(R, s->r, o);
    R->reserved -= s->reserved;
    if (s->seq >= 0) keep_prefix(R, s);
    free_slot(s);
    return rc;
}

// A token sampled for s (its first, from the prompt, or a decode step's),
// handled as the single-prompt decode loop handles it.
static int on_token(run *R, slot *s, int32_t id) {
    const double t = now_sec();
    if (s->n_gen == 0) s->t_first = t;
    if (tok_is_eog(R->tok, id)) return finish(R, s, "eos");
    sampler_accept(s->smp, id);
    s->n_gen++;
    s->t_last = t;
    int stop = R->o->reasoning ? reason_token(&s->rs, R->tok, s->prev, id, &s->out, &s->rout)
                               : textout_token(&s->out, s->prev, id);
    if (stop < 0) return errf(R->err, "out of memory");
    if (s->gc && gcon_accept(s->gc, s->prev, id, R->err)) return -1;
    s->prev = id;
    if (stop) return finish(R, s, "stop");
    if (s->gc && gcon_must_end(s->gc)) {  // the grammar is complete: what textout holds goes out
        if ((R->o->reasoning && reason_finish(&s->rs, &s->out, &s->rout) < 0) || textout_finish(&s->out) < 0)
            return errf(R->err, "out of memory");
        return finish(R, s, "stop");
    }
    if (s->r->n >= 0 && s->n_gen >= s->r->n) return finish(R, s, "length");
    if (model_seq_len(R->m, s->seq) >= s->limit) return finish(R, s, "context");
    s->next = id;
    return 0;
}

// ---- the step -----------------------------------------------------------

// The next token of s from its logits lg (masked in place under a grammar),
// and its log-probabilities when the record asks for them.
static int pick(run *R, slot *s, float *lg, int32_t *id) {
    // with log-probabilities the mask is always applied: they describe the distribution drawn from
    if (s->gc && s->lp && gcon_apply(s->gc, s->prev, lg, R->err) < 0) return -1;
    if (!s->gc) *id = sampler_sample(s->smp, lg);
    else if (gcon_pick(s->gc, s->smp, s->prev, lg, id, R->err)) return -1;
    if (!s->lp || tok_is_eog(R->tok, *id)) return 0;
    json_t *e = logprob_entry(R->tok, s->smp, lg, s->prev, *id, s->r->logprobs);
    return !e || json_array_append_new(s->lp, e) ? errf(R->err, "out of memory") : 0;
}

// One forward pass: a prefill chunk of the oldest prefilling sequence, then
// one token of every decoding sequence; then samples from their logits.
static int step(run *R) {
    const batch_opts *o = R->o;
    slot *pre = NULL, **dec = R->dec;
    int n = 0, n_dec = 0, n_prompt = 0;
    for (int i = 0; i < o->parallel; i++) {
        slot *s = &R->slots[i];
        if (!s->r) continue;
        if (s->n_done < s->n_ids) {
            if (!pre || s->order < pre->order) pre = s;
        } else {
            dec[n_dec++] = s;
        }
    }
    if (pre) {
        if (pre->n_done == 0) share_prefix(R, pre);
        // chunks end at multiples of the chunk size (itself a multiple of
        // PREFILL_TILE), as a lone prompt's passes do
        int c = o->chunk - pre->n_done % o->chunk;
        if (c > pre->n_ids - pre->n_done) c = pre->n_ids - pre->n_done;
        for (int i = 0; i < c; i++)
            R->toks[n++] = (model_tok){pre->ids[pre->n_done + i], pre->seq, pre->n_done + i == pre->n_ids - 1};
        n_prompt = c;
    }
    for (int i = 0; i < n_dec; i++) R->toks[n++] = (model_tok){dec[i]->next, dec[i]->seq, 1};
    if (n == 0) return 0;
    if (model_forward_batch(R->m, R->toks, n, n_prompt, R->logits, R->err)) return -1;
    R->sum->steps++;
    const int nv = model_cfg(R->m)->n_vocab;
    float *lg = R->logits;
    if (pre) {
        pre->n_done += n_prompt;
        R->sum->prefill_tokens += n_prompt;
        if (pre->n_done == pre->n_ids) {
            pre->prev = pre->ids[pre->n_ids - 1];
            int32_t id;
            if (pick(R, pre, lg, &id) || on_token(R, pre, id)) return -1;
            lg += nv;
        }
    }
    for (int i = 0; i < n_dec; i++, lg += nv) {
        int32_t id;
        if (pick(R, dec[i], lg, &id) || on_token(R, dec[i], id)) return -1;
    }
    return 0;
}

static void progress(run *R, int final) {
    const double t = now_sec();
    if (!R->o->progress || (!final && t - R->t_progress < 0.5)) return;
    R->t_progress = t;
    const batch_summary *sum = R->sum;
    fprintf(stderr, "\rquill batch: %d done, %ld tokens, %.1f tok/s ", sum->n_records, sum->gen_tokens,
            sum->wall > 0 ? sum->gen_tokens / sum->wall : 0.0);
    if (final) fputc('\n', stderr);
}

// Fills free slots from the input. Returns -1 on a fatal error.
static int fill_slots(run *R) {
    for (int i = 0; i < R->o->parallel; i++) {
        slot *s = &R->slots[i];
        while (!s->r) {
            int fatal;
            record *r = R->waiting ? R->waiting : next_record(R, &fatal);
            R->waiting = NULL;
            if (!r) return fatal ? -1 : 0;
            if (r->n == 0) {  // nothing to generate: no need to prefill either
                char msg[ERR_LEN];
                *s = (slot){.r = r, .seq = -1};
                if (tok_encode(R->tok, r->prompt, r->prompt_len, !R->o->no_bos && tok_add_bos(R->tok),
                               R->o->special, &s->ids, &s->n_ids, msg)) {
                    *s = (slot){.seq = -1};
                    if (deliver_error(R, r, msg)) return -1;
                    continue;
                }
                R->sum->prompt_tokens += s->n_ids;
                if (finish(R, s, "length")) return -1;
                continue;
            }
            int a = admit(R, s, r, &fatal);
            if (fatal) return -1;
            if (a == 0) {  // wait for room
                R->waiting = r;
                return 0;
            }
        }
    }
    return 0;
}

int batch_run(model *m, const tokenizer *tok, const batch_opts *o, FILE *in, FILE *out,
              batch_summary *sum, char *err) {
    *sum = (batch_summary){0};
    const double t0 = now_sec();
    model_seq_free(m, 0);  // sequence 0 (model_forward's) is not used here
    run R = {.m = m, .tok = tok, .o = o, .in = in, .out = out, .sum = sum, .err = err, .cache_seq = -1,
             .pool = model_kv_room(m)};
    const int nv = model_cfg(m)->n_vocab;
    if (sizeof(float) * (double)nv * (o->parallel + 1) > (double)mem_available())
        return errf(err, "the logits of %d sequences x %d tokens need more memory than is available (lower --parallel)",
                    o->parallel + 1, nv);
    R.slots = calloc((size_t)o->parallel, sizeof *R.slots);
    R.dec = calloc((size_t)o->parallel, sizeof *R.dec);
    R.logits = malloc(sizeof(float) * nv * (size_t)(o->parallel + 1));
    R.toks = malloc(sizeof *R.toks * (size_t)(o->chunk + o->parallel));
    int rc = 0;
    if (!R.slots || !R.dec || !R.logits || !R.toks) rc = errf(err, "out of memory");
    for (int i = 0; !rc && i < o->parallel; i++) R.slots[i].seq = -1;
    while (!rc && !R.closed && !stopped(&R)) {
        if (fill_slots(&R)) { rc = -1; break; }
        int live = 0;
        for (int i = 0; i < o->parallel; i++) live += R.slots[i].r != NULL;
        if (!live) {
            if (R.waiting) rc = errf(err, "internal: a record fits no empty pool");
            break;
        }
        if (step(&R)) rc = -1;
        sum->wall = now_sec() - t0;
        progress(&R, 0);
    }
    sum->interrupted = stopped(&R);
    for (int i = 0; R.slots && i < o->parallel; i++)
        if (R.slots[i].r) free_slot(&R.slots[i]);
    free_record(R.waiting);
    for (int i = 0; i < R.n_records; i++) free(R.done[i]);
    free(R.done);
    free(R.cache_ids);
    free(R.slots);
    free(R.dec);
    free(R.logits);
    free(R.toks);
    gvocab_free(R.gv);
    sum->wall = now_sec() - t0;
    progress(&R, 1);
    return rc;
}
