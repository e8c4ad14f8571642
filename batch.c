// batch.c — see batch.h.
//
// The loop: fill free slots from the input (records the KV pool cannot yet
// hold wait), then one forward pass: the next prefill chunk of the oldest
// sequence still prefilling, followed by one token of every decoding
// sequence. Each sequence reserves, when admitted, the KV its prompt and
// token budget can reach, so a running sequence never finds the pool full.
#include "batch.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batch_int.h"
#include "textout.h"
#include "grammar.h"
#include "json_schema.h"
#include "logprobs.h"
#include "reasoning.h"
#include "util.h"

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
    batch_input in;
    batch_out out;
    batch_summary *sum;
    char *err;
    record *waiting;          // read, not admitted (the pool is full)
    char **done;              // [in.n_records] output lines not yet written (ordered mode)
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
    double t0, t_progress;
    long total;               // non-blank input lines (progress; 0: unknown)
} run;

int batch_model_seqs(const batch_opts *o) { return o->parallel + 1; }

static int round_block(int n) { return (n + KV_BLOCK - 1) / KV_BLOCK * KV_BLOCK; }

// ---- output -------------------------------------------------------------

static int stopped(const run *R) { return R->o->stop && *R->o->stop; }

static int write_line(run *R, const char *line) {
    return out_write(&R->out, line, strlen(line), R->err);
}

// Hands record r's output line (owned, newline included) over: written now
// (unordered, or next in order) or kept until the records before it are
// written. The record is freed.
static int deliver(run *R, record *r, char *line) {
    R->sum->n_records++;
    const int index = r->index;
    record_free(r);
    if (R->o->unordered) {
        int rc = write_line(R, line);
        free(line);
        return rc;
    }
    R->done[index] = line;
    for (; R->next_out < R->in.n_records && R->done[R->next_out]; R->next_out++) {
        int rc = write_line(R, R->done[R->next_out]);
        free(R->done[R->next_out]);
        R->done[R->next_out] = NULL;
        if (rc) return -1;
    }
    return 0;
}

// Serializes obj (consumed) as one line and delivers it as r's output.
static int deliver_json(run *R, record *r, json_t *obj) {
    char *line = obj ? json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9)) : NULL;
    json_decref(obj);
    size_t n = line ? strlen(line) : 0;
    char *l = line ? realloc(line, n + 2) : NULL;
    if (!l) return free(line), record_free(r), errf(R->err, "out of memory");
    l[n] = '\n', l[n + 1] = 0;
    return deliver(R, r, l);
}

// An error record for r, which is freed.
static int deliver_error(run *R, record *r, const char *code, const char *msg) {
    R->sum->n_errors++;
    return deliver_json(R, r, record_error(&R->in, r, code, msg));
}

// Makes room in R->done for record number index (ordered output only).
static int grow_done(run *R, int index) {
    if (R->o->unordered || index < R->done_cap) return 0;
    int cap = R->done_cap ? 2 * R->done_cap : 64;
    char **d = realloc(R->done, sizeof *d * (size_t)cap);
    if (!d) return errf(R->err, "out of memory");
    memset(d + R->done_cap, 0, sizeof *d * (size_t)(cap - R->done_cap));
    R->done = d, R->done_cap = cap;
    return 0;
}

// The next record that runs, or NULL at the end of the input (or on a fatal
// error: R->err set, *fatal). Lines that cannot run become error records on
// the way.
static record *next_record(run *R, int *fatal) {
    for (;;) {
        record *r;
        const char *code = ERR_INVALID;
        char msg[ERR_LEN];
        int rc = record_next(&R->in, &r, &code, msg, R->err);
        *fatal = rc < 0;
        if (rc <= 0) return NULL;
        if (grow_done(R, r->index)) return record_free(r), *fatal = 1, NULL;
        if (!*msg) return r;
        if (deliver_error(R, r, code, msg)) return *fatal = 1, NULL;
    }
}

// ---- sequences ----------------------------------------------------------

static void free_slot(slot *s) {
    free(s->ids);
    textout_free(&s->out);
    textout_free(&s->rout);
    sampler_free(s->smp);
    gcon_free(s->gc);
    json_decref(s->lp);
    record_free(s->r);
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
    if (tok_encode(R->tok, r->prompt, r->prompt_len, r->add_bos, r->special, &ids, &n, msg))
        return *fatal = deliver_error(R, r, ERR_INVALID, msg), -1;
    const char *why = NULL;
    if (n == 0) why = "the prompt is empty and the model has no BOS token to start from";
    else if (n > ctx) errf(msg, "the prompt is %d tokens but the context holds %d (raise -c)", n, ctx), why = msg;
    else if (round_block(n) > R->pool)
        errf(msg, "the prompt is %d tokens but the KV pool holds %d (raise --kv-mem)", n, R->pool), why = msg;
    if (why) {
        free(ids);
        *fatal = deliver_error(R, r, n ? ERR_CONTEXT : ERR_INVALID, why);
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
    const record *r = s->r;
    batch_result res = {.n_gen = s->n_gen, .n_prompt = s->n_ids, .reason = reason,
                        .ttft = s->n_gen ? s->t_first - s->t_start : 0,
                        .tpot = s->n_gen > 1 ? (s->t_last - s->t_first) / (s->n_gen - 1) : 0};
    if (!strcmp(reason, "stop") && s->out.stop_hit >= 0 && s->out.stop_hit < r->n_user_stops)
        res.stop = r->stops[s->out.stop_hit];  // not a chat template's end of turn
    sum->gen_tokens += s->n_gen;
    if (s->n_gen > 0) sum->sum_ttft += res.ttft;
    if (s->n_gen > 1) sum->sum_tpot += res.tpot, sum->n_tpot++;
    char *text = utf8_sanitized(s->out.text ? s->out.text : "", s->out.len, NULL);
    res.text = text;
    res.lp = s->lp;
    res.grammar = s->gc ? gcon_can_end(s->gc) : -1;
    char *rtext = s->rs.opened ? utf8_sanitized(s->rout.text ? s->rout.text : "", s->rout.len, NULL) : NULL;
    res.reasoning = rtext;
    res.reasoning_closed = s->rs.opened ? !s->rs.think : -1;
    json_t *line = text && (rtext || !s->rs.opened) ? record_result(&R->in, r, &res) : NULL;
    free(rtext);
    free(text);
    int rc = deliver_json(R, s->r, line);
    s->r = NULL;  // freed by deliver_json
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

// Lines in the input when it is a regular file (read with pread: the
// stream's position stays), for the progress line; 0 when unknown.
static long count_lines(FILE *in) {
    struct stat st;
    if (fstat(fileno(in), &st) || !S_ISREG(st.st_mode)) return 0;
    char buf[1 << 16];
    long n = 0, last = '\n';
    ssize_t r;
    for (off_t off = 0; (r = pread(fileno(in), buf, sizeof buf, off)) > 0; off += r) {
        for (char *p = buf; (p = memchr(p, '\n', (size_t)(buf + r - p))); p++) n++;
        last = buf[r - 1];
    }
    return n + (last != '\n');
}

static void hms(char *b, size_t cap, double s) {
    long t = s > 0 && s < 1e9 ? (long)(s + 0.5) : 0;
    snprintf(b, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

// The progress line on a terminal, redrawn at most twice a second: records
// done of this run's total (estimated from the lines read so far while the
// input runs: a shard's share of the file is known only at its end), tokens/s
// and the time left at the rate so far.
static void progress(run *R, int final) {
    const double t = now_sec();
    if (!R->o->progress || (!final && t - R->t_progress < 0.5)) return;
    R->t_progress = t;
    const batch_summary *sum = R->sum;
    if (final) {
        fputs("\r\033[K", stderr);  // the summary line follows
        return;
    }
    const long ours = R->in.n_records + sum->resumed, done = sum->n_records + sum->resumed;
    double total = R->in.eof || !R->total || !R->in.line_no ? (double)ours
                 : (double)R->total * (double)ours / R->in.line_no;
    if (total < done) total = (double)done;
    const double rate = sum->wall > 0 ? sum->n_records / sum->wall : 0;
    char eta[32] = "?";
    if (rate > 0 && (R->in.eof || R->total)) hms(eta, sizeof eta, (total - done) / rate);
    fprintf(stderr, "\r\033[Kquill batch: %ld/%s%.0f records (%ld resumed, %d errors) | %.1f tok/s | ETA %s", done,
            R->in.eof ? "" : "~", total, sum->resumed, sum->n_errors, sum->wall > 0 ? sum->gen_tokens / sum->wall : 0.0,
            eta);
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
                if (tok_encode(R->tok, r->prompt, r->prompt_len, r->add_bos, r->special, &s->ids, &s->n_ids, msg)) {
                    *s = (slot){.seq = -1};
                    if (deliver_error(R, r, ERR_INVALID, msg)) return -1;
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

// The run's input and output state: the output checked (a file to append to
// when resuming, its earlier records read), the input's format.
static int run_open(run *R, FILE *in, int out_fd, resume_set *done) {
    const batch_opts *o = R->o;
    struct stat st;
    R->in = (batch_input){.o = o, .m = R->m, .tok = R->tok, .in = in, .format = o->format, .sum = R->sum};
    R->sum->format = o->format;
    R->out = (batch_out){.fd = out_fd, .is_file = !fstat(out_fd, &st) && S_ISREG(st.st_mode), .t_sync = now_sec()};
    if (o->progress) R->total = count_lines(in);
    if (!o->resume) return 0;
    char msg[ERR_LEN];
    if (resume_scan(out_fd, done, msg))
        return errf(R->err, "--resume: %s: %s", o->output_name ? o->output_name : "the output", msg);
    R->in.done = done;
    R->sum->torn = done->torn;
    return 0;
}

int batch_run(model *m, const tokenizer *tok, const batch_opts *o, FILE *in, int out_fd,
              batch_summary *sum, char *err) {
    *sum = (batch_summary){0};
    const double t0 = now_sec();
    model_seq_free(m, 0);  // sequence 0 (model_forward's) is not used here
    run R = {.m = m, .tok = tok, .o = o, .sum = sum, .err = err, .cache_seq = -1, .pool = model_kv_room(m)};
    resume_set done = {0};
    const int nv = model_cfg(m)->n_vocab;
    if (sizeof(float) * (double)nv * (o->parallel + 1) > (double)mem_available())
        return errf(err, "the logits of %d sequences x %d tokens need more memory than is available (lower --parallel)",
                    o->parallel + 1, nv);
    R.slots = calloc((size_t)o->parallel, sizeof *R.slots);
    R.dec = calloc((size_t)o->parallel, sizeof *R.dec);
    R.logits = malloc(sizeof(float) * nv * (size_t)(o->parallel + 1));
    R.toks = malloc(sizeof *R.toks * (size_t)(o->chunk + o->parallel));
    int rc = run_open(&R, in, out_fd, &done);
    if (!rc && (!R.slots || !R.dec || !R.logits || !R.toks)) rc = errf(err, "out of memory");
    for (int i = 0; !rc && i < o->parallel; i++) R.slots[i].seq = -1;
    while (!rc && !R.out.closed && !stopped(&R)) {
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
    if (!rc) rc = out_sync(&R.out, err);
    sum->interrupted = stopped(&R);
    for (int i = 0; R.slots && i < o->parallel; i++)
        if (R.slots[i].r) free_slot(&R.slots[i]);
    record_free(R.waiting);
    for (int i = 0; i < R.in.n_records && i < R.done_cap; i++) free(R.done[i]);
    free(R.done);
    input_free(&R.in);
    resume_free(&done);
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
