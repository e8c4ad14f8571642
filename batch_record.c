// batch_record.c — `quill batch` records (batch_int.h): an input line in any
// of the formats to a record, after the decisions every format shares (its
// key, its shard, a repeated id, a result already in the resumed output),
// and a record's result or error to its output line.
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "batch_int.h"
#include "json_schema.h"
#include "sample.h"
#include "util.h"

void record_free(record *r) {
    if (!r) return;
    json_decref(r->id);
    free(r->prompt);
    for (int i = 0; i < r->n_stops; i++) free(r->stops[i]);
    json_decref(r->feat.response_format);
    grammar_free(r->g);
    free(r);
}

void input_free(batch_input *bi) {
    if (bi->tpl_state == 1) tpl_free(&bi->tpl);
    keyset_free(&bi->seen);
}

// ---- grammars and log-probabilities ------------------------------------------------

int record_set_grammar(record *r, const char *key, json_t *v, char *msg) {
    char err[ERR_LEN];
    if (r->g) return errf(msg, "give \"grammar\" or \"json_schema\", not both");
    if (!strcmp(key, "grammar")) {
        if (!json_is_string(v)) return errf(msg, "\"grammar\" must be a string (GBNF)");
        return grammar_parse(&r->g, json_string_value(v), json_string_length(v), err) ? errf(msg, "%s", err) : 0;
    }
    if (!json_is_object(v) && !json_is_true(v)) return errf(msg, "\"%s\" must be a JSON Schema object", key);
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY), *gbnf = NULL;
    if (!text) return errf(msg, "out of memory");
    int rc = json_schema_to_gbnf(text, strlen(text), &gbnf, err) || grammar_parse(&r->g, gbnf, strlen(gbnf), err);
    free(text), free(gbnf);
    return rc ? errf(msg, "%s", err) : 0;
}

int batch_features_apply(record *r, char *msg) {
    if (r->feat.logprobs) r->logprobs = r->feat.top_logprobs;
    json_t *rf = r->feat.response_format;
    if (!rf) return 0;
    const char *type = json_string_value(json_object_get(rf, "type"));
    if (!strcmp(type, "json_object")) {  // any JSON object
        json_t *object = json_pack("{s:s}", "type", "object");
        int rc = object ? record_set_grammar(r, "response_format", object, msg) : errf(msg, "out of memory");
        json_decref(object);
        return rc;
    }
    if (!strcmp(type, "json_schema")) {
        json_t *schema = json_object_get(json_object_get(rf, "json_schema"), "schema");
        if (!schema) return errf(msg, "response_format json_schema needs {\"json_schema\": {\"schema\": ...}}");
        return record_set_grammar(r, "response_format", schema, msg);
    }
    return errf(msg, "response_format \"%s\" is not supported (text, json_object, json_schema)", type);
}

// ---- quill's records --------------------------------------------------------------

int record_set_stops(record *r, json_t *v, char *msg) {
    const int max = MAX_REC_STOPS;
    if (json_is_string(v)) v = json_pack("[O]", v);
    else if (json_is_array(v)) json_incref(v);
    else return errf(msg, "\"stop\" must be a string or an array of strings");
    size_t i;
    json_t *s;
    for (int k = 0; k < r->n_stops; k++) free(r->stops[k]);
    r->n_stops = 0;
    int rc = 0;
    json_array_foreach(v, i, s) {
        if (!json_is_string(s) || !json_string_length(s) || r->n_stops == max) {
            rc = errf(msg, "\"stop\" must hold at most %d non-empty strings", max);
            break;
        }
        if (!(r->stops[r->n_stops++] = strdup(json_string_value(s)))) { rc = errf(msg, "out of memory"); break; }
    }
    json_decref(v);
    return rc;
}

static int set_prompt(record *r, const char *s, size_t n, char *msg) {
    if (!(r->prompt = malloc(n + 1))) return errf(msg, "out of memory");
    memcpy(r->prompt, s, n);
    r->prompt[r->prompt_len = n] = 0;
    return 0;
}

// Reads the fields of one quill record into r; a message in msg on error.
static int quill_fields(record *r, json_t *root, char *msg) {
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "id")) continue;  // read by record_id
        else if (!strcmp(key, "prompt")) {
            if (!json_is_string(v)) return errf(msg, "\"prompt\" must be a string");
            if (set_prompt(r, json_string_value(v), json_string_length(v), msg)) return -1;
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
            if (record_set_stops(r, v, msg)) return -1;
        } else if (!strcmp(key, "logprobs")) {
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > SAMPLE_MAX_TOP)
                return errf(msg, "\"logprobs\" must be an integer in [0, %d]", SAMPLE_MAX_TOP);
            r->logprobs = (int)json_integer_value(v);
        } else if (!strcmp(key, "grammar") || !strcmp(key, "json_schema")) {
            if (record_set_grammar(r, key, v, msg)) return -1;
        } else if (!strcmp(key, "custom_id") || !strcmp(key, "body")) {
            return errf(msg, "\"%s\" is a field of OpenAI Batch requests, but this file's first record was "
                             "one of quill's (--format openai reads them)", key);
        } else {
            return errf(msg, "unknown field \"%.40s\" (records have id, prompt, n, temp, seed, stop, logprobs, grammar, "
                        "json_schema)", key);
        }
    }
    if (!r->prompt) return errf(msg, "the record has no \"prompt\"");
    return 0;
}

// ---- ids ------------------------------------------------------------------------------

// r's id and key: quill's "id" (a string or an integer; without one, the line
// number), OpenAI's "custom_id", a `lines` record's line number. root is NULL
// for `lines` and for a line that is not JSON. 0, or -1 with msg when the
// line has an id that cannot be used (the key is then the line's).
static int record_id(batch_input *bi, record *r, json_t *root, char *msg) {
    char b[24];
    json_t *id = NULL;
    int rc = 0;
    r->key = batch_key_line(r->line);
    if (bi->format == BATCH_OPENAI) {
        if (!root) return 0;
        if (openai_custom_id(root, &id)) return errf(msg, "the request has no \"custom_id\" string");
    } else if (bi->format == BATCH_QUILL && root && (id = json_object_get(root, "id"))) {
        if (!json_is_string(id) && !json_is_integer(id)) {
            id = NULL;
            rc = errf(msg, "\"id\" must be a string or an integer");
        }
    }
    if (json_is_string(id)) {
        r->key = batch_key_of(KEY_ID, json_string_value(id), json_string_length(id));
        r->id = json_incref(id);
    } else if (json_is_integer(id) || (!rc && bi->format != BATCH_OPENAI)) {  // quill's default id: the line
        long long v = id ? (long long)json_integer_value(id) : r->line;
        r->key = batch_key_of(KEY_ID, b, (size_t)snprintf(b, sizeof b, "%lld", v));
        r->id = json_integer(v);
    }
    return rc;
}

// ---- reading ----------------------------------------------------------------------------

// The first record decides an unnamed format: an OpenAI request has "custom_id"
// (or "body"), anything else is quill's.
static void detect_format(batch_input *bi, json_t *root) {
    if (bi->format != BATCH_AUTO) return;
    bi->format = json_object_get(root, "custom_id") || json_object_get(root, "body") ? BATCH_OPENAI : BATCH_QUILL;
    bi->sum->format = bi->format;
}

// Whether the record at r->line (key r->key) runs in this run: 1 yes, 0 it is
// another shard's or already in the resumed output, -1 out of memory. *dup:
// its id came before.
static int record_runs(batch_input *bi, const record *r, int *dup) {
    const batch_opts *o = bi->o;
    if (o->n_shards > 1 && r->key.shard % (uint64_t)o->n_shards != (uint64_t)o->shard) {
        bi->sum->other_shards++;
        return 0;
    }
    int added = keyset_add(&bi->seen, r->key);  // every record of the shard, run or skipped
    if (added < 0) return -1;
    *dup = !added;
    const resume_set *d = bi->done;
    if (d && (keyset_has(&d->lines, batch_key_line(r->line)) || (!*dup && keyset_has(&d->ids, r->key)))) {
        bi->sum->resumed++;
        return 0;
    }
    return 1;
}

// Fills r (its line, defaults set) from the line; 0, or -1 with msg and *code.
static int record_parse(batch_input *bi, record *r, json_t *root, const char *parse_err, int dup, const char **code,
                        char *msg) {
    *code = ERR_INVALID;
    if (parse_err) return errf(msg, "%s", parse_err);
    if (dup) {
        *code = ERR_DUPLICATE;
        return errf(msg, "the id was used by an earlier record (ids must be unique)");
    }
    if (bi->format != BATCH_LINES && !json_is_object(root)) return errf(msg, "expected a JSON object");
    if (bi->format == BATCH_OPENAI && openai_parse(bi, r, root, code, msg)) return -1;
    if (bi->format == BATCH_QUILL && quill_fields(r, root, msg)) return -1;
    if (batch_features_apply(r, msg)) return *code = ERR_UNSUPPORTED, -1;
    return 0;
}

// One non-blank line (line[0..len), no newline) to a record: 1 with *r, 0
// when it does not run here, -1 out of memory.
static int record_of_line(batch_input *bi, char *line, size_t len, record **out, const char **code, char *msg) {
    const batch_opts *o = bi->o;
    char perr[ERR_LEN];
    const char *parse_err = NULL;
    json_t *root = NULL;
    long bad = utf8_invalid_at(line, len);
    if (len > REC_MAX_BYTES) snprintf(perr, sizeof perr, "the line is longer than %u bytes", REC_MAX_BYTES), parse_err = perr;
    else if (bad >= 0) snprintf(perr, sizeof perr, "invalid UTF-8 at byte %ld", bad + 1), parse_err = perr;
    else if (bi->format != BATCH_LINES) {
        json_error_t je;
        if (!(root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je)))
            snprintf(perr, sizeof perr, "invalid JSON at column %d: %s", je.column, je.text), parse_err = perr;
        else if (json_is_object(root)) detect_format(bi, root);
    }
    if (bi->format == BATCH_AUTO) bi->format = bi->sum->format = BATCH_QUILL;  // the first line is not JSON
    record *r = calloc(1, sizeof *r);
    if (!r) return json_decref(root), -1;
    *r = (record){.line = bi->line_no, .n = o->n_predict, .sp = o->sp, .ep = EP_QUILL, .logprobs = o->logprobs,
                  .add_bos = !o->no_bos && tok_add_bos(bi->tok), .special = o->special};
    char idmsg[ERR_LEN];
    if (record_id(bi, r, json_is_object(root) ? root : NULL, idmsg) && !parse_err) parse_err = idmsg;
    int dup = 0, runs = record_runs(bi, r, &dup);
    if (runs <= 0) return json_decref(root), record_free(r), runs;
    for (int i = 0; i < o->n_stops; i++)
        if (!(r->stops[r->n_stops++] = strdup(o->stops[i]))) return json_decref(root), record_free(r), -1;
    *msg = 0;
    if (!record_parse(bi, r, root, parse_err, dup, code, msg) && bi->format == BATCH_LINES)
        set_prompt(r, line, len, msg);
    if (r->ep != EP_CHAT) r->n_user_stops = r->n_stops;
    json_decref(root);
    r->index = bi->n_records++;
    *out = r;
    return 1;
}

int record_next(batch_input *bi, record **r, const char **code, char *msg, char *err) {
    char *line = NULL;
    size_t cap = 0;
    int rc = 0;
    *r = NULL;
    *msg = 0;
    while (!rc && !bi->eof) {
        errno = 0;
        ssize_t n = getline(&line, &cap, bi->in);
        if (n < 0) {
            if (ferror(bi->in) && !(bi->o->stop && *bi->o->stop))
                rc = errf(err, "cannot read the input: %s", strerror(errno));
            bi->eof = 1;
            break;
        }
        bi->line_no++;
        size_t len = (size_t)n;
        if (len && line[len - 1] == '\n') len--;
        if (len && line[len - 1] == '\r') len--;
        if (batch_blank(line, len)) continue;
        rc = record_of_line(bi, line, len, r, code, msg);
        if (rc < 0) errf(err, "out of memory");
    }
    free(line);
    return rc < 0 ? -1 : rc;
}

// ---- output lines ------------------------------------------------------------------------

// quill's records: "id" first, for people reading the output.
static json_t *quill_line(const record *r, json_t *fields) {
    json_t *o = json_object();
    if (!o || !fields) return json_decref(o), json_decref(fields), NULL;
    json_object_set_new(o, "id", r->id ? json_incref(r->id) : json_integer(r->line));
    json_object_update(o, fields);
    json_decref(fields);
    return o;
}

json_t *record_result(const batch_input *bi, const record *r, const batch_result *res) {
    if (bi->format == BATCH_OPENAI) return openai_result(bi, r, res);
    json_t *o = json_pack("{s:s, s:i, s:s, s:i, s:f, s:f}", "text", res->text, "tokens", res->n_gen, "finish_reason",
                          res->reason, "prompt_tokens", res->n_prompt, "ttft_ms",
                          res->n_gen ? round(res->ttft * 1e6) / 1e3 : 0.0, "tpot_ms", round(res->tpot * 1e6) / 1e3);
    if (o && res->grammar >= 0) json_object_set_new(o, "grammar_complete", json_boolean(res->grammar));
    if (o && res->lp) json_object_set_new(o, "logprobs", json_pack("{sO}", "content", res->lp));
    if (o && res->reasoning) {
        json_object_set_new(o, "reasoning", json_string(res->reasoning));
        json_object_set_new(o, "reasoning_closed", json_boolean(res->reasoning_closed));
    }
    return quill_line(r, o);
}

json_t *record_error(const batch_input *bi, const record *r, const char *code, const char *msg) {
    char *m = utf8_sanitized(msg, strlen(msg), NULL);
    json_t *o = NULL;
    if (m && bi->format == BATCH_OPENAI) o = openai_error(r, code, m);
    else if (m) o = quill_line(r, json_pack("{s:i, s:s}", "line", r->line, "error", m));
    free(m);
    return o;
}
