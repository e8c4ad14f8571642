// chat.c — see chat.h.
//
// The conversation is a list of messages; the KV cache holds the tokens of
// the conversation as last rendered plus the answer generated since, mirrored
// token by token in chat.kv_ids. A turn renders all messages again (the new
// user message and the generation prompt included) and compares the tokens
// with kv_ids: the common prefix stays, the rest is rewound and prefilled.
// Rendering again rather than appending keeps every template's rules (system
// prompts folded into the first turn, trimming, a re-tokenized answer whose
// tokens differ from the ones sampled) without special cases: where the text
// differs, the prefix simply ends there.
#include "chat.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lineread.h"
#include "pcache.h"
#include "signals.h"
#include "template.h"
#include "textout.h"
#include "grammar.h"
#include "reasoning.h"
#include "util.h"

#define PREFILL_CHUNK 256  // tokens per forward pass while prefilling: Ctrl-C is seen between chunks
#define MAX_STOPS 20       // the template's stop string and --stop's (at most 16)

typedef struct {
    int n_prompt;         // tokens prefilled this turn
    int n_reused;         // tokens kept from the KV cache
    int n_gen;            // tokens generated
    int decode_steps;     // forward passes after the first token
    double t_prefill;     // seconds from the user's message to the first token (TTFT)
    double t_decode;      // seconds in the later steps
    const char *finish;   // eos, length, stop, context, interrupted
} turn_stats;

// A message of the conversation. An assistant's reasoning is kept apart from
// its content (the answer), and the template gets it as a field of its own.
typedef struct {
    const char *role;
    char *content;
    char *reasoning;  // NULL: none
} message;

typedef struct {
    model *m;
    const tokenizer *tok;
    const chat_opts *o;
    chat_template tpl;
    sampler *smp;
    gvocab *gv;               // --grammar / --json-schema: the vocabulary trie (NULL: none)
    gconstraint *gc;          // each answer's grammar state (NULL: none)
    reason_split rs;          // the answer's reasoning, apart (reasoning.h); set up from the rendered prompt
    textout rout;             // the reasoning: shown on stderr (dimmed on a terminal) or dropped
    float *logits;            // [n_vocab]
    const char *stops[MAX_STOPS];  // the template's stop strings, then --stop's
    int n_stops;
    message *msgs;            // the conversation; contents owned
    int n_msgs, cap_msgs;
    int32_t *kv_ids;          // [model_ctx] the token at each cached position
    lineread *lr;
    volatile sig_atomic_t *interrupted;  // signals.h's flag: SIGINT ends an answer, SIGTERM the chat
    // session totals, for /stats
    int turns;
    long n_prefilled, n_reused, n_generated;
    double t_prefill, t_decode;
} chat;

static void vsay(const char *fmt, va_list ap) {
    fputs("quill: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

static void note(const chat *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// A notice on stderr ("quill: ..."), unless -q.
static void note(const chat *c, const char *fmt, ...) {
    if (c->o->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
}

static void complain(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// What the user has to act on (a failed command, a full context): shown even with -q.
static void complain(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsay(fmt, ap);
    va_end(ap);
}

// ---- the conversation ---------------------------------------------------------

static int msg_push(chat *c, const char *role, const char *content, size_t len) {
    if (c->n_msgs == c->cap_msgs) {
        int cap = c->cap_msgs ? 2 * c->cap_msgs : 16;
        message *p = realloc(c->msgs, sizeof *p * (size_t)cap);
        if (!p) return -1;
        c->msgs = p, c->cap_msgs = cap;
    }
    char *s = strndup(content, len);
    if (!s) return -1;
    c->msgs[c->n_msgs++] = (message){role, s, NULL};
    return 0;
}

// Removes msgs[i..i+n).
static void msg_remove(chat *c, int i, int n) {
    if (n <= 0) return;
    for (int k = i; k < i + n; k++) free(c->msgs[k].content), free(c->msgs[k].reasoning);
    memmove(c->msgs + i, c->msgs + i + n, sizeof *c->msgs * (size_t)(c->n_msgs - i - n));
    c->n_msgs -= n;
}

static int has_system(const chat *c) { return c->n_msgs && !strcmp(c->msgs[0].role, "system"); }

// Drops the oldest exchange (a user message and the answers up to the next
// user message), never the system message or the last user message.
// Returns 0 when there was none to drop.
static int drop_oldest(chat *c) {
    int first = has_system(c), next = first + 1;
    while (next < c->n_msgs && strcmp(c->msgs[next].role, "user")) next++;
    if (next >= c->n_msgs) return 0;  // msgs[first] is the current user message
    msg_remove(c, first, next - first);
    return 1;
}

// Replaces the system message (text NULL or "": removes it).
static int set_system(chat *c, const char *text) {
    if (has_system(c)) msg_remove(c, 0, 1);
    if (!text || !*text) return 0;
    if (msg_push(c, "system", text, strlen(text))) return -1;
    message sys = c->msgs[c->n_msgs - 1];
    memmove(c->msgs + 1, c->msgs, sizeof *c->msgs * (size_t)(c->n_msgs - 1));
    c->msgs[0] = sys;
    return 0;
}

// The messages as templates read them: {"role", "content"}, and an
// assistant's reasoning under each name templates read it by (reasoning_content:
// Qwen3, DeepSeek, GLM, MiniMax...; thinking: gpt-oss, LFM2; reasoning: vLLM's),
// so that the template decides whether a past turn's thinking is shown again
// (most drop it; some keep it, as GLM-4.7 with clear_thinking=false).
// NULL: out of memory, or text that is not UTF-8.
static json_t *messages_json(const chat *c) {
    static const char *const names[] = {"reasoning_content", "thinking", "reasoning"};
    json_t *list = json_array();
    for (int i = 0; list && i < c->n_msgs; i++) {
        const message *m = &c->msgs[i];
        json_t *o = json_pack("{s:s, s:s}", "role", m->role, "content", m->content);
        for (int k = 0; o && m->reasoning && k < 3; k++)
            if (json_object_set_new(o, names[k], json_string(m->reasoning))) o = (json_decref(o), NULL);
        if (!o || json_array_append_new(list, o)) list = (json_decref(list), NULL);
    }
    return list;
}

// The conversation's tokens: all messages rendered with the generation
// prompt, then `partial` (an answer cut short by a context shift). *ids
// malloc'd. Returns 0, -1 on a fatal error, TEMPLATE_REFUSED when the template
// refuses the conversation (raise_exception: roles must alternate, ...).
#define TEMPLATE_REFUSED 2
static int conv_tokens(chat *c, const char *partial, size_t partial_len, int32_t **ids, int *n, char *err) {
    size_t len;
    char *text;
    json_t *msgs = messages_json(c);
    if (!msgs) return errf(err, "out of memory (or a message is not UTF-8)"), TEMPLATE_REFUSED;
    int refused = tpl_render_json(&c->tpl, msgs, NULL, c->o->vars, 1, &text, &len, err);
    json_decref(msgs);
    if (refused) return TEMPLATE_REFUSED;
    if (partial_len) {
        char *p = realloc(text, len + partial_len + 1);
        if (!p) return free(text), errf(err, "out of memory");
        memcpy(p + len, partial, partial_len);
        p[len += partial_len] = 0;
        text = p;
    }
    // parse_special: the template's markers (<|im_start|>, <s>) are single tokens;
    // BOS is added unless the template wrote it
    int rc = tok_encode(c->tok, text, len, tpl_add_bos(&c->tpl, c->tok, text), 1, ids, n, err);
    if (!partial_len) reason_init(&c->rs, text, len);  // a template may open the reasoning itself
    free(text);
    return rc;
}

// ---- the KV cache -------------------------------------------------------------

// Makes the cache hold ids[0..n): keeps the prefix it shares with kv_ids and
// prefills the rest in chunks; the logits after ids[n-1] end in c->logits.
// Returns 1 when Ctrl-C stopped the prefill (the cache then holds a prefix).
static int sync_kv(chat *c, const int32_t *ids, int n, turn_stats *st, char *err) {
    int have = model_len(c->m), k = 0;
    if (n <= 0) return errf(err, "the conversation rendered to no tokens");
    while (k < have && k < n && c->kv_ids[k] == ids[k]) k++;
    if (k == n) k--;  // everything is cached: the last token runs again for its logits
    k = model_rewind(c->m, k);  // 0 where a sliding window no longer holds what position k reads
    st->n_reused = k;
    st->n_prompt = n - k;
    for (int i = k; i < n; i++) sampler_accept(c->smp, ids[i]);
    while (k < n) {
        if (*c->interrupted) return 1;
        int b = n - k < PREFILL_CHUNK ? n - k : PREFILL_CHUNK;
        if (model_forward(c->m, ids + k, b, 0, c->logits, err)) return -1;
        memcpy(c->kv_ids + k, ids + k, sizeof *ids * (size_t)b);
        k += b;
    }
    return 0;
}

// Tokens an answer should have room for when the turn starts; fewer are
// accepted (the answer then meets the end of the context) rather than
// dropping the whole conversation.
static int answer_room(const chat *c) {
    int ctx = model_ctx(c->m), want = c->o->n_predict > 0 ? c->o->n_predict : ctx / 4;
    return want < ctx / 2 ? want : ctx / 2;
}

// Tokenizes the conversation (+ partial answer), dropping the oldest
// exchanges under --context-full shift until the prompt leaves room to
// answer (counted in *dropped). Returns 1 when it cannot fit (the caller says
// what to do), TEMPLATE_REFUSED when the template refuses it.
static int fit_context(chat *c, const char *partial, size_t plen, int32_t **ids, int *n, int *dropped,
                       char *err) {
    int ctx = model_ctx(c->m);
    for (;;) {
        int rc = conv_tokens(c, partial, plen, ids, n, err);
        if (rc) return rc;
        if (*n + answer_room(c) <= ctx || (*n < ctx && !c->o->context_shift)) break;
        if (!c->o->context_shift || !drop_oldest(c)) {
            if (*n < ctx) break;  // no room to spare, but some
            free(*ids);
            return 1;
        }
        free(*ids);
        ++*dropped;
    }
    return 0;
}

static void note_dropped(const chat *c, int dropped) {
    if (dropped)
        note(c, "context full (%d tokens): dropped the oldest %d exchange%s; re-reading the rest",
             model_ctx(c->m), dropped, dropped > 1 ? "s" : "");
}

// ---- streaming the answer ------------------------------------------------------

// The end of the answer: a held partial character and held bytes go out
// (unless it stopped on a stop string), and the answer ends with a newline
// on stdout so each answer is its own line(s). -1 when out of memory.
static int ans_finish(textout *a, int stopped) {
    if (!stopped && textout_finish(a) < 0) return -1;
    if (!a->closed && (!a->len || a->text[a->len - 1] != '\n') && (fputc('\n', stdout) == EOF || fflush(stdout)))
        a->closed = 1, a->error = errno == EPIPE ? 0 : errno;
    return 0;
}

// ---- a turn --------------------------------------------------------------------

// Under --context-full shift, when the answer reaches the end of the context:
// drops the oldest exchanges and re-reads the conversation with the answer so
// far. Returns 0 (logits ready for the next token), 1 when nothing can be
// dropped, -1 on error.
static int shift_mid_answer(chat *c, textout *a, turn_stats *st, char *err) {
    int32_t *ids;
    int n, dropped = 1;
    if (!drop_oldest(c)) return 1;
    // the answer's text, with a character still being completed written as its bytes
    size_t plen = a->len;
    char *text = malloc(a->len + sizeof a->us.pending);
    if (!text) return errf(err, "out of memory");
    if (a->len) memcpy(text, a->text, a->len);
    memcpy(text + plen, a->us.pending, (size_t)a->us.n_pending);
    plen += (size_t)a->us.n_pending;
    int rc = fit_context(c, text, plen, &ids, &n, &dropped, err);
    free(text);
    note_dropped(c, dropped);
    if (rc == TEMPLATE_REFUSED) return -1;
    if (rc) return rc;
    turn_stats re = {0};
    double t = now_sec();
    rc = sync_kv(c, ids, n, &re, err);
    free(ids);
    st->n_prompt += re.n_prompt;
    st->t_decode += now_sec() - t;
    return rc < 0 ? -1 : rc ? 1 : 0;
}

// Token next of the answer: to the answer or, apart, the reasoning (dimmed
// on a terminal while it lasts). textout_token's result.
static int say(chat *c, textout *a, int32_t prev, int32_t next) {
    if (c->o->reasoning == REASON_OFF) return textout_token(a, prev, next);
    const int was = c->rs.think, dim = c->rout.sink && isatty(fileno(c->rout.sink));
    int rc = reason_token(&c->rs, c->tok, prev, next, a, &c->rout);
    if (c->rout.sink && was != c->rs.think) {
        if (!was && dim) fputs("\033[2m", stderr);
        if (was && textout_finish(&c->rout) < 0) rc = -1;
        if (was) fputs(dim ? "\033[0m\n" : "\n", stderr);
    }
    return rc;
}

// The next token from c->logits (after `prev`), within the grammar if any.
static int pick(chat *c, int32_t prev, int32_t *out, char *err) {
    if (!c->gc) return *out = sampler_sample(c->smp, c->logits), 0;
    return gcon_pick(c->gc, c->smp, prev, c->logits, out, err);
}

// Streams the answer from the first sampled token `next`. Returns the finish
// reason, or NULL on error.
static const char *generate(chat *c, textout *a, int32_t next, turn_stats *st, char *err) {
    const chat_opts *o = c->o;
    int32_t prev = model_len(c->m) ? c->kv_ids[model_len(c->m) - 1] : -1;
    for (;;) {
        if (*c->interrupted) return "interrupted";
        if (tok_is_eog(c->tok, next)) return "eos";
        if (o->n_predict == 0) return "length";
        sampler_accept(c->smp, next);
        st->n_gen++;
        int stop = say(c, a, prev, next);
        if (stop < 0) return errf(err, "out of memory"), NULL;
        if (stop) return "stop";
        if (a->closed) return "closed";
        if (c->gc && gcon_accept(c->gc, prev, next, err)) return NULL;
        if (c->gc && gcon_must_end(c->gc))  // the grammar is complete: what is held goes out
            return textout_finish(a) < 0 ? (errf(err, "out of memory"), NULL) : "stop";
        if (o->n_predict > 0 && st->n_gen >= o->n_predict) return "length";  // no pass for an unused token
        double t = now_sec();
        if (model_len(c->m) >= model_ctx(c->m)) {
            int rc = o->context_shift ? shift_mid_answer(c, a, st, err) : 1;
            if (rc < 0) return NULL;
            if (rc > 0) return "context";
        } else {
            if (model_forward(c->m, &next, 1, 0, c->logits, err)) return NULL;
            c->kv_ids[model_len(c->m) - 1] = next;
        }
        prev = next;
        if (pick(c, prev, &next, err)) return NULL;
        st->t_decode += now_sec() - t;
        st->decode_steps++;
    }
}

// The answer's end for the reasoning: held text out, a reasoning never closed
// reported, and the reasoning's text handed to *reasoning (malloc'd, bytes
// that are not UTF-8 as U+FFFD; NULL when there was none): the answer alone is
// the assistant's content, its reasoning a field apart. -1: memory.
static int end_reasoning(chat *c, textout *a, const turn_stats *st, char **reasoning) {
    *reasoning = NULL;
    if (c->o->reasoning == REASON_OFF) return 0;
    if (strcmp(st->finish, "stop") && reason_finish(&c->rs, a, &c->rout) < 0) return -1;
    if (c->rs.think) {
        if (c->rout.sink && (textout_finish(&c->rout) < 0 || fputs(isatty(STDERR_FILENO) ? "\033[0m\n" : "\n", stderr) < 0))
            return -1;
        complain("the model's reasoning was not closed within the answer's %d tokens (%s): it is not the answer",
                 st->n_gen, st->finish);
    }
    if (c->rs.opened && !(*reasoning = utf8_sanitized(c->rout.text ? c->rout.text : "", c->rout.len, NULL)))
        return -1;
    FILE *sink = c->rout.sink;
    textout_free(&c->rout);
    return textout_init(&c->rout, c->tok, NULL, 0, sink);
}

static void print_turn_stats(chat *c, const turn_stats *st) {
    c->turns++;
    c->n_prefilled += st->n_prompt, c->n_reused += st->n_reused, c->n_generated += st->n_gen;
    c->t_prefill += st->t_prefill, c->t_decode += st->t_decode;
    double tpot = st->decode_steps ? st->t_decode * 1e3 / st->decode_steps : 0;
    note(c, "prompt %d tok (%d reused), TTFT %.1f ms | generated %d tok, TPOT %.2f ms (%.1f tok/s) | %s | "
         "context %d/%d", st->n_prompt, st->n_reused, st->t_prefill * 1e3, st->n_gen, tpot,
         tpot > 0 ? 1e3 / tpot : 0, st->finish, model_len(c->m), model_ctx(c->m));
}

// One exchange: the user's message in, the answer out. Returns 0, 1 when
// stdout went away (the chat ends), -1 on error.
static int chat_turn(chat *c, const char *user, char *err) {
    double t0 = now_sec();
    turn_stats st = {0};
    int32_t *ids;
    int n, dropped = 0;
    if (msg_push(c, "user", user, strlen(user))) return errf(err, "out of memory");
    int rc = fit_context(c, NULL, 0, &ids, &n, &dropped, err);
    note_dropped(c, dropped);
    if (rc == TEMPLATE_REFUSED) {  // the message is not sent; the chat goes on
        msg_remove(c, c->n_msgs - 1, 1);
        complain("%s", err);
        return 0;
    }
    if (rc) {
        msg_remove(c, c->n_msgs - 1, 1);
        if (rc > 0)
            complain("context full: the conversation with this message is %d tokens and the context holds %d; %s",
                 n, model_ctx(c->m), c->o->context_shift ? "send a shorter message" : "/reset to start over");
        return rc < 0 ? -1 : 0;
    }
    rc = sync_kv(c, ids, n, &st, err);
    free(ids);
    if (rc < 0) return -1;
    textout a;
    if (textout_init(&a, c->tok, c->stops, c->n_stops, stdout)) return errf(err, "out of memory");
    if (rc > 0) {
        st.finish = "interrupted";
    } else {
        int32_t next;
        if ((c->gc && gcon_reset(c->gc, err)) || pick(c, model_len(c->m) ? c->kv_ids[model_len(c->m) - 1] : -1, &next, err))
            return textout_free(&a), -1;
        st.t_prefill = now_sec() - t0;
        if (!(st.finish = generate(c, &a, next, &st, err))) return textout_free(&a), -1;
    }
    char *reasoning;
    if (end_reasoning(c, &a, &st, &reasoning)) return free(reasoning), textout_free(&a), errf(err, "out of memory");
    int unsent = !st.n_gen && !strcmp(st.finish, "interrupted");
    if (!unsent && ans_finish(&a, !strcmp(st.finish, "stop"))) return textout_free(&a), errf(err, "out of memory");
    const int closed = a.closed, werr = *c->interrupted ? 0 : a.error;  // a signal may break a write
    if (unsent) {
        msg_remove(c, c->n_msgs - 1, 1);  // stopped before any answer: as if never sent
        rc = 0;
    } else {  // kept as UTF-8 (a message is a JSON string): bytes that are not, such as
              // a character cut by Ctrl-C, as U+FFFD
        size_t len;
        char *content = utf8_sanitized(a.text ? a.text : "", a.len, &len);
        rc = !content || msg_push(c, "assistant", content, len);
        free(content);
        if (!rc) c->msgs[c->n_msgs - 1].reasoning = reasoning, reasoning = NULL;
    }
    free(reasoning);
    textout_free(&a);
    if (rc) return errf(err, "out of memory");
    if (werr) return errf(err, "cannot write the answer: %s", strerror(werr));
    if (!strcmp(st.finish, "context") && !c->o->context_shift)
        complain("context full (%d tokens): /reset to start a new conversation", model_ctx(c->m));
    if (!closed) print_turn_stats(c, &st);
    return closed;
}

// ---- /save and /load -------------------------------------------------------------
//
// /save FILE writes the KV cache and its token ids with pcache_save (FILE), and
// the messages beside it in FILE.chat, a small text file:
//   quill-chat 3\n
//   then per message: ROLE SPACE BYTES \n CONTENT \n, or for an answer with
//   reasoning ROLE SPACE BYTES SPACE RBYTES \n CONTENT \n REASONING \n
//   end COUNT HASH\n   (COUNT messages; HASH: pc_hash64 of every byte before
//                        this line, 16 hex digits)
// Both files are replaced whole (write_file_atomic), so a kill or a full disk
// leaves the previous save. /load reads both back; the trailer rejects a file
// cut short or damaged (version 1, written before it, had none; version 2 kept
// no reasoning). The messages are needed to render the next turn; the cache
// spares re-reading them (a KV file newer or older than the messages costs
// only a longer prefill: the next turn keeps the longest prefix of the cache's
// tokens that the messages give).

static char *sidecar_path(const char *path) {
    size_t n = strlen(path) + sizeof ".chat";
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s.chat", path);
    return p;
}

static int save_messages(const chat *c, const char *path, char *err) {
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return errf(err, "out of memory");
    fprintf(f, "quill-chat 3\n");
    for (int i = 0; i < c->n_msgs; i++) {
        const message *m = &c->msgs[i];
        if (m->reasoning)
            fprintf(f, "%s %zu %zu\n%s\n%s\n", m->role, strlen(m->content), strlen(m->reasoning), m->content,
                    m->reasoning);
        else
            fprintf(f, "%s %zu\n%s\n", m->role, strlen(m->content), m->content);
    }
    fflush(f);
    fprintf(f, "end %d %016" PRIx64 "\n", c->n_msgs, pc_hash64(buf, len, 0));
    if (fclose(f)) return free(buf), errf(err, "out of memory");
    const void *parts[] = {buf};
    const size_t lens[] = {len};
    char e2[ERR_LEN];
    int rc = write_file_atomic(path, parts, lens, 1, 0600, e2);  // the conversation is private
    free(buf);
    return rc ? errf(err, "%s: %s", path, e2) : 0;
}

static const char *known_role(const char *r) {
    static const char *const roles[] = {"system", "user", "assistant"};
    for (int i = 0; i < 3; i++)
        if (!strcmp(r, roles[i])) return roles[i];
    return NULL;
}

// Copies the next line of b[*at..n), without its newline, into line (a
// header or trailer line: shorter than 64 bytes). 0, or -1 when no whole
// line of that size is left.
static int next_line(const char *b, size_t n, size_t *at, char line[64]) {
    const char *nl = *at < n ? memchr(b + *at, '\n', n - *at) : NULL;
    const size_t len = nl ? (size_t)(nl - b) - *at : 0;
    if (!nl || len >= 64) return -1;
    memcpy(line, b + *at, len);
    line[len] = 0;
    *at += len + 1;
    return 0;
}

// Steps over a text of len bytes and its newline at b[*at..n): 0, or -1 when
// they are not there (or the text holds a NUL).
static int msg_text(const char *b, size_t n, size_t *at, size_t len) {
    if (len >= n - *at || b[*at + len] != '\n' || memchr(b + *at, 0, len)) return -1;
    *at += len + 1;
    return 0;
}

// Parses a FILE.chat's bytes b[0..n) into fresh (the file is untrusted: every
// field is checked). 0, or -1 when it is not a whole chat file.
static int parse_messages(chat *fresh, const char *b, size_t n) {
    size_t at = 0;
    char line[64];
    if (next_line(b, n, &at, line)) return -1;
    const int version = !strcmp(line, "quill-chat 3")   ? 3
                        : !strcmp(line, "quill-chat 2") ? 2
                        : !strcmp(line, "quill-chat 1") ? 1
                                                        : 0;
    if (!version) return -1;
    int used = 0;
    for (;;) {
        const size_t start = at;
        if (version == 1 && at == n) return 0;  // version 1 files simply end
        if (next_line(b, n, &at, line)) return -1;
        int count;
        uint64_t hash;
        if (version >= 2 && sscanf(line, "end %d %16" SCNx64 "%n", &count, &hash, &used) == 2 && !line[used])
            return count == fresh->n_msgs && at == n && hash == pc_hash64(b, start, 0) ? 0 : -1;
        char role[16];
        size_t len, rlen = 0;
        const char *r;
        const int has_reasoning =
            version >= 3 && sscanf(line, "%15s %zu %zu%n", role, &len, &rlen, &used) == 3 && !line[used];
        if (!has_reasoning && (sscanf(line, "%15s %zu%n", role, &len, &used) != 2 || line[used])) return -1;
        const char *text = b + at;
        if (!(r = known_role(role)) || msg_text(b, n, &at, len) || msg_push(fresh, r, text, len)) return -1;
        if (has_reasoning) {  // the answer's reasoning follows
            const char *rtext = b + at;
            if (msg_text(b, n, &at, rlen) || !(fresh->msgs[fresh->n_msgs - 1].reasoning = strndup(rtext, rlen)))
                return -1;
        }
    }
}

// Reads a FILE.chat into a fresh message list. On success c's messages are replaced.
static int load_messages(chat *c, const char *path, char *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return errf(err, "cannot open %s: %s", path, strerror(errno));
    char *b = NULL;
    long n = fseek(f, 0, SEEK_END) ? -1 : ftell(f);
    if (n >= 0 && n < (1l << 30) && !fseek(f, 0, SEEK_SET) && (b = malloc((size_t)n + 1)) &&
        fread(b, 1, (size_t)n, f) != (size_t)n)
        n = -1;
    fclose(f);
    chat fresh = {0};
    if (n < 0 || !b || parse_messages(&fresh, b, (size_t)n)) {
        free(b);
        msg_remove(&fresh, 0, fresh.n_msgs);
        free(fresh.msgs);
        return errf(err, "%s is not a quill chat file (or is damaged or cut short)", path);
    }
    free(b);
    msg_remove(c, 0, c->n_msgs);
    free(c->msgs);
    c->msgs = fresh.msgs, c->n_msgs = fresh.n_msgs, c->cap_msgs = fresh.cap_msgs;
    return 0;
}

static void cmd_save(chat *c, const char *path) {
    char err[ERR_LEN];
    char *side = sidecar_path(path);
    if (!side) {
        complain("/save: out of memory");
        return;
    }
    if (pcache_save(path, c->m, c->o->model_path, c->kv_ids, model_len(c->m), err)) complain("/save %s: %s", path, err);
    else if (save_messages(c, side, err)) complain("/save: %s", err);
    else note(c, "saved %d messages (%d tokens) to %s and %s", c->n_msgs, model_len(c->m), path, side);
    free(side);
}

static void cmd_load(chat *c, const char *path) {
    char err[ERR_LEN];
    char *side = sidecar_path(path);
    if (!side) {
        complain("/load: out of memory");
        return;
    }
    int32_t *ids = NULL;
    int n = 0;
    // the messages first: if they are unusable, the cache is left alone
    if (load_messages(c, side, err)) {
        complain("/load: %s", err);
    } else if (pcache_load(path, c->m, c->o->model_path, NULL, -1, &ids, &n, err) < 0) {
        model_rewind(c->m, 0);  // the messages changed: the next turn reads them all
        complain("/load %s: %s; loaded the %d messages, which the next turn reads anew", path, err, c->n_msgs);
    } else {
        memcpy(c->kv_ids, ids, sizeof *ids * (size_t)model_len(c->m));
        note(c, "loaded %d messages (%d tokens) from %s", c->n_msgs, model_len(c->m), path);
    }
    free(ids);
    free(side);
}

// ---- commands ------------------------------------------------------------------

static void cmd_stats(chat *c) {
    double pre = c->t_prefill > 0 ? c->n_prefilled / c->t_prefill : 0, dec = c->t_decode > 0 ? c->n_generated / c->t_decode : 0;
    fprintf(stderr,
            "quill: %d turns, %d messages, context %d/%d tokens | prefilled %ld tok (%.1f tok/s), reused %ld | "
            "generated %ld tok (%.1f tok/s) | template %s | %s | seed %" PRIu64 "\n",
            c->turns, c->n_msgs, model_len(c->m), model_ctx(c->m), c->n_prefilled, pre, c->n_reused,
            c->n_generated, dec, c->tpl.name, model_backend_desc(c->m), c->o->sp.seed);
}

static void cmd_help(void) {
    fputs("  /reset          start a new conversation (the system prompt stays)\n"
          "  /stats          totals for this session\n"
          "  /system TEXT    set the system prompt (empty: none); the next turn re-reads the chat\n"
          "  /save FILE      save the conversation: its KV cache to FILE, its messages to FILE.chat\n"
          "  /load FILE      resume a conversation saved with /save\n"
          "  /help, /quit    this list; end the chat (as Ctrl-D does)\n"
          "  //text          send \"/text\" as a message\n"
          "A line ending in \\ continues on the next; \"\"\" starts and ends a block of lines.\n"
          "Ctrl-C stops an answer; at an empty prompt it ends the chat.\n",
          stderr);
}

// Runs a /command. Returns 1 for /quit, 0 otherwise (problems are reported).
static int chat_command(chat *c, const char *line) {
    size_t k = strcspn(line, " \t");
    const char *arg = line + k + strspn(line + k, " \t");
#define IS(name) (k == strlen(name) && !strncmp(line, name, k))
    if (IS("/quit") || IS("/exit")) return 1;
    if (IS("/help")) cmd_help();
    else if (IS("/stats")) cmd_stats(c);
    else if (IS("/reset")) {
        msg_remove(c, has_system(c), c->n_msgs - has_system(c));
        model_rewind(c->m, 0);
        note(c, "new conversation");
    } else if (IS("/system")) {
        if (set_system(c, arg)) complain("/system: out of memory");
        else note(c, *arg ? "system prompt set" : "system prompt removed");
    } else if ((IS("/save") || IS("/load")) && !*arg) complain("%.*s needs a file name", (int)k, line);
    else if (IS("/save")) cmd_save(c, arg);
    else if (IS("/load")) cmd_load(c, arg);
    else complain("unknown command %.*s (see /help)", (int)k, line);
#undef IS
    return 0;
}

// ---- setup and the loop ---------------------------------------------------------

static int chat_init(chat *c, model *m, const tokenizer *tok, const chat_opts *o, char *err) {
    *c = (chat){.m = m, .tok = tok, .o = o, .interrupted = sig_flag()};
    int fallback;
    if (tpl_load(&c->tpl, model_gguf(m), tok, o->template_name, &fallback, err)) return -1;
    if (fallback && !o->quiet)
        fprintf(stderr, "quill: warning: the model has no chat template; using a plain \"User:/Assistant:\" format "
                        "(--chat-template NAME|FILE picks another)\n");
    for (const char *const *s = c->tpl.stops; *s && c->n_stops < MAX_STOPS; s++) c->stops[c->n_stops++] = *s;
    for (int i = 0; i < o->n_stops && c->n_stops < MAX_STOPS; i++) c->stops[c->n_stops++] = o->stops[i];
    c->smp = sampler_new(&o->sp, model_cfg(m)->n_vocab);
    c->logits = malloc(sizeof(float) * (size_t)model_cfg(m)->n_vocab);
    c->kv_ids = malloc(sizeof(int32_t) * (size_t)model_ctx(m));
    if (!c->smp || !c->logits || !c->kv_ids || set_system(c, o->system)) return errf(err, "out of memory");
    if (o->grammar && (gvocab_new(&c->gv, tok, err) || gcon_new(&c->gc, o->grammar, c->gv, err))) return -1;
    // the reasoning is shown unless --reasoning hide (or off, where it is not split from the answer)
    if (textout_init(&c->rout, tok, NULL, 0, o->reasoning == REASON_SHOW ? stderr : NULL)) return errf(err, "out of memory");
    model_rewind(m, 0);
    return 0;
}

static void chat_free(chat *c) {
    lr_close(c->lr);
    msg_remove(c, 0, c->n_msgs);
    free(c->msgs);
    free(c->kv_ids);
    free(c->logits);
    sampler_free(c->smp);
    gcon_free(c->gc);
    gvocab_free(c->gv);
    textout_free(&c->rout);
    tpl_free(&c->tpl);
}

// Reads messages and answers them until the user leaves. 0, or -1 on error.
static int chat_loop(chat *c, char *err) {
    for (;;) {
        char *line, warn[ERR_LEN];
        if (*c->interrupted == SIGTERM) return 0;  // the caller exits with its status
        *c->interrupted = 0;
        enum lr_status st = lr_read(c->lr, &line, warn);
        if (warn[0]) note(c, "warning: %s", warn);
        if (st == LR_EOF || st == LR_INTERRUPT) {
            if (lr_is_tty(c->lr)) fputc('\n', stderr);
            return 0;
        }
        if (st == LR_CANCEL) continue;
        int rc = 0;
        if (line[0] == '/' && line[1] != '/') {
            rc = chat_command(c, line);
        } else if (line[strspn(line, " \t\n")]) {
            rc = chat_turn(c, line + (line[0] == '/'), err);  // "//text" sends "/text"
        }
        free(line);
        if (rc) return rc < 0 ? -1 : 0;
    }
}

int chat_run(model *m, const tokenizer *tok, const chat_opts *o, char *err) {
    chat c;
    int rc = chat_init(&c, m, tok, o, err);
    char *history = rc ? NULL : lr_history_path();
    if (!rc && !(c.lr = lr_open(stdin, isatty(STDIN_FILENO) ? history : NULL, c.interrupted, err))) rc = -1;
    free(history);
    if (!rc) {
        if (!o->quiet)
            fprintf(stderr, "quill: chat with %s (template %s, context %d tokens). /help lists commands; "
                            "Ctrl-D or Ctrl-C at an empty prompt ends.\n",
                    o->model_path, c.tpl.name, model_ctx(m));
        rc = chat_loop(&c, err);
    }
    chat_free(&c);
    return rc;
}
