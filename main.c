// main.c — quill's command line: parses arguments, picks a mode, and is the
// only place that prints errors and exits.
//
//   quill -m MODEL [options] [PROMPT]      generate (prompt from args, -f, or stdin)
//   quill info MODEL                       metadata and tensor table
//   quill ppl -m MODEL -f TEXT [-c 512]    perplexity, llama.cpp's protocol
//   quill bench -m MODEL [-p 512] [-n 128] prefill/decode speed vs the roofline
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "model.h"
#include "quant.h"
#include "sample.h"
#include "tokenizer.h"
#include "util.h"

#define MAX_STOPS 16

typedef struct {
    const char *model;      // -m
    const char *prompt;     // positional arguments joined (owned)
    const char *file;       // -f: prompt / text file
    int n_predict;          // -n: max new tokens (-1: until EOS or context end)
    int n_ctx;              // -c (0: model default)
    int n_threads;          // -t (0: all cores)
    int echo, quiet, no_bos;
    int special;            // --special: control tokens written in the text are tokens
    int ids_only;           // tokenize: --ids
    const char *stops[MAX_STOPS];
    int n_stops;
    const char *stats_json;
    sampler_params sp;
    int bench_p, bench_n;   // bench: prompt and generated tokens
} options;

// What a generation run measured, for the stats line and --stats-json.
typedef struct {
    int n_prompt, n_gen;
    double t_prefill, t_decode;  // seconds: prompt eval (to first token), later steps
    int decode_steps;
    const char *finish;          // eos, length, stop, context
} gen_stats;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
// Prints "quill: MESSAGE" as one line (control bytes from files shown as '?') and exits 1.
static void die(const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *c = msg; *c; c++)
        if ((unsigned char)*c < 0x20 || *c == 0x7f) *c = '?';
    fprintf(stderr, "quill: %s\n", msg);
    exit(1);
}

static void usage(FILE *out) {
    fputs(
        "usage: quill -m MODEL.gguf [options] [PROMPT...]\n"
        "       quill info MODEL.gguf\n"
        "       quill ppl -m MODEL.gguf -f TEXT [-c 512] [-t N]\n"
        "       quill bench -m MODEL.gguf [-p 512] [-n 128] [-t N]\n"
        "       quill tokenize -m MODEL.gguf [--ids] [--no-bos] [--special] [TEXT]\n"
        "\n"
        "Generates a continuation of PROMPT (the arguments, else -f FILE, else stdin when it is\n"
        "not a terminal). Only generated text goes to stdout; a stats line goes to stderr.\n"
        "\n"
        "options:\n"
        "  -m, --model FILE       GGUF model (llama, qwen2, qwen3; F32 F16 BF16 Q8_0 Q4_0 Q4_1\n"
        "                         Q5_0 Q5_1 Q4_K Q5_K Q6_K)\n"
        "  -f, --file FILE        read the prompt (ppl: the text) from FILE\n"
        "  -n, --n-predict N      generate at most N tokens (default -1: until EOS or the\n"
        "                         context is full)\n"
        "  -c, --ctx-size N       context length in tokens (default: the model's, at most 4096)\n"
        "  -t, --threads N        CPU threads (default: all cores)\n"
        "      --temp T           temperature; 0 is greedy (default 0.8)\n"
        "      --top-k K          keep the K most likely tokens; 0 off (default 40)\n"
        "      --top-p P          keep the smallest set with probability >= P; 1 off (default 0.95)\n"
        "      --min-p P          drop tokens below P x the top probability; 0 off (default 0.05)\n"
        "      --repeat-penalty R penalize the last --repeat-last-n tokens; 1 off (default 1)\n"
        "      --repeat-last-n N  window of the repetition penalty (default 64)\n"
        "      --seed S           random seed (default: from the clock, printed in the stats)\n"
        "      --stop STR         stop when STR is generated (not printed); repeatable\n"
        "      --echo             print the prompt before the generated text\n"
        "      --no-bos           do not prepend the BOS token\n"
        "      --special          control tokens written in the prompt (e.g. <s>) are tokens\n"
        "      --ids              (tokenize) print only the ids, on one line\n"
        "      --stats-json FILE  also write the stats as JSON to FILE\n"
        "  -q, --quiet            print nothing on stderr but errors\n"
        "  -p N, -n N             (bench) prompt and generated tokens to time\n"
        "  -h, --help             this help\n",
        out);
}

// ---- argument parsing -------------------------------------------------------

static long parse_int(const char *opt, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        die("option %s: expected an integer in [%ld, %ld], got '%s'", opt, lo, hi, v);
    return x;
}

static float parse_float(const char *opt, const char *v, float lo, float hi) {
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi))
        die("option %s: expected a number in [%g, %g], got '%s'", opt, lo, hi, v);
    return x;
}

static char *join_args(int argc, char **argv) {
    size_t len = 1;
    for (int i = 0; i < argc; i++) len += strlen(argv[i]) + 1;
    char *s = calloc(len, 1);
    if (!s) die("out of memory");
    for (int i = 0; i < argc; i++) {
        if (i) strcat(s, " ");
        strcat(s, argv[i]);
    }
    return s;
}

// Parses argv[first..argc). Positional words become the prompt.
static void parse_options(options *o, int argc, char **argv, int first) {
    *o = (options){.n_predict = -1, .bench_p = 512, .bench_n = 128,
                   .sp = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                          .repeat_penalty = 1.0f, .repeat_last_n = 64,
                          .seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32)}};
    char **words = calloc((size_t)argc + 1, sizeof *words);
    int n_words = 0;
    if (!words) die("out of memory");
    for (int i = first; i < argc; i++) {
        const char *a = argv[i];
#define ARG() (i + 1 < argc ? argv[++i] : (die("option %s needs a value", a), ""))
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage(stdout), exit(0);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = ARG();
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) o->file = ARG();
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) o->n_predict = o->bench_n = (int)parse_int(a, ARG(), -1, 1 << 30);
        else if (!strcmp(a, "-p")) o->bench_p = (int)parse_int(a, ARG(), 1, 1 << 20);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) o->n_ctx = (int)parse_int(a, ARG(), 0, 1 << 24);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) o->n_threads = (int)parse_int(a, ARG(), 0, 1024);
        else if (!strcmp(a, "--temp")) o->sp.temp = parse_float(a, ARG(), 0, 100);
        else if (!strcmp(a, "--top-k")) o->sp.top_k = (int)parse_int(a, ARG(), 0, 1 << 30);
        else if (!strcmp(a, "--top-p")) o->sp.top_p = parse_float(a, ARG(), 0, 1);
        else if (!strcmp(a, "--min-p")) o->sp.min_p = parse_float(a, ARG(), 0, 1);
        else if (!strcmp(a, "--repeat-penalty")) o->sp.repeat_penalty = parse_float(a, ARG(), 0.01f, 100);
        else if (!strcmp(a, "--repeat-last-n")) o->sp.repeat_last_n = (int)parse_int(a, ARG(), 0, 1 << 20);
        else if (!strcmp(a, "--seed")) o->sp.seed = (uint64_t)parse_int(a, ARG(), 0, LONG_MAX);
        else if (!strcmp(a, "--stop")) {
            if (o->n_stops == MAX_STOPS) die("at most %d --stop strings", MAX_STOPS);
            o->stops[o->n_stops] = ARG();
            if (!*o->stops[o->n_stops]) die("option --stop: the string is empty");
            o->n_stops++;
        } else if (!strcmp(a, "--echo")) o->echo = 1;
        else if (!strcmp(a, "--no-bos")) o->no_bos = 1;
        else if (!strcmp(a, "--special")) o->special = 1;
        else if (!strcmp(a, "--ids")) o->ids_only = 1;
        else if (!strcmp(a, "--stats-json")) o->stats_json = ARG();
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--")) { while (++i < argc) words[n_words++] = argv[i]; }
        else if (a[0] == '-' && a[1]) die("unknown option '%s' (see quill --help)", a);
        else words[n_words++] = argv[i];
#undef ARG
    }
    o->prompt = n_words ? join_args(n_words, words) : NULL;
    free(words);
}

// ---- input --------------------------------------------------------------

// Reads a whole stream; dies on a read error. *len excludes the added NUL.
static char *read_all(FILE *f, const char *what, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) die("out of memory");
    for (size_t r; (r = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (cap - n - 1 == 0 && !(buf = realloc(buf, cap *= 2))) die("out of memory reading %s", what);
    }
    if (ferror(f)) die("cannot read %s: %s", what, strerror(errno));
    buf[n] = 0;
    *len = n;
    return buf;
}

static char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open '%s': %s", path, strerror(errno));
    char *s = read_all(f, path, len);
    fclose(f);
    return s;
}

// Index of the first byte that is not part of a valid UTF-8 sequence, or -1.
static long utf8_invalid_at(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return (long)i;
        uint32_t cp = len == 1 ? c : c & (0x7f >> len);
        for (int k = 1; k < len; k++) {
            if ((u[i + k] & 0xc0) != 0x80) return (long)i;
            cp = cp << 6 | (u[i + k] & 0x3f);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return (long)i;
        i += len;
    }
    return -1;
}

// The prompt: arguments, else -f, else stdin (not a terminal). One trailing
// newline (what `echo` adds) is dropped.
static char *read_prompt(const options *o, size_t *len) {
    char *p;
    if (o->prompt) {
        p = strdup(o->prompt);
        if (!p) die("out of memory");
        *len = strlen(p);
    } else if (o->file) {
        p = read_file(o->file, len);
    } else if (!isatty(STDIN_FILENO)) {
        p = read_all(stdin, "stdin", len);
    } else {
        die("no prompt: give it as an argument, with -f FILE, or on stdin (see quill --help)");
    }
    if (*len && p[*len - 1] == '\n') p[--*len] = 0;
    if (*len && p[*len - 1] == '\r') p[--*len] = 0;
    long bad = utf8_invalid_at(p, *len);
    if (bad >= 0) die("the prompt is not valid UTF-8 (byte %ld)", bad);
    return p;
}

// ---- output -------------------------------------------------------------

// Streams generated text to stdout, holding back any tail that could be the
// start of a stop string, and cutting the text where a stop string appears.
typedef struct {
    const options *o;
    char *buf;
    size_t len, cap;
    int closed;  // stdout went away (EPIPE): keep quiet, stop generating
} emitter;

static void emit_write(emitter *e, const char *s, size_t n) {
    if (e->closed || !n) return;
    if (fwrite(s, 1, n, stdout) != n || fflush(stdout)) e->closed = 1;
}

// Returns 1 when a stop string was found (text before it is written).
static int emit(emitter *e, const char *s, size_t n) {
    if (e->len + n > e->cap) {
        e->cap = (e->len + n) * 2 + 64;
        if (!(e->buf = realloc(e->buf, e->cap))) die("out of memory");
    }
    if (n) memcpy(e->buf + e->len, s, n);
    e->len += n;
    size_t hold = 0;
    for (int i = 0; i < e->o->n_stops; i++) {
        const char *st = e->o->stops[i];
        size_t sl = strlen(st);
        char *hit = memmem(e->buf, e->len, st, sl);
        if (hit) {
            emit_write(e, e->buf, (size_t)(hit - e->buf));
            e->len = 0;
            return 1;
        }
        for (size_t k = sl - 1; k > hold; k--)  // longest tail that is a prefix of st
            if (k <= e->len && !memcmp(e->buf + e->len - k, st, k)) { hold = k; break; }
    }
    emit_write(e, e->buf, e->len - hold);
    memmove(e->buf, e->buf + e->len - hold, hold);
    e->len = hold;
    return 0;
}

static void emit_finish(emitter *e) {
    emit_write(e, e->buf, e->len);
    e->len = 0;
    free(e->buf);
}

// ---- generation ---------------------------------------------------------

static model *load_model(const options *o) {
    char err[ERR_LEN];
    model *m;
    if (!o->model) die("no model: give one with -m FILE.gguf (see quill --help)");
    model_opts mo = {.ops = &cpu_backend, .n_threads = o->n_threads, .n_ctx = o->n_ctx};
    if (model_load(&m, o->model, &mo, err)) die("%s", err);
    return m;
}

static void load(const options *o, model **m, tokenizer **tok) {
    char err[ERR_LEN];
    *m = load_model(o);
    if (tok_load(tok, model_gguf(*m), err)) die("%s: %s", o->model, err);
    if (tok_n_vocab(*tok) != model_cfg(*m)->n_vocab)
        die("%s: the tokenizer has %d tokens but token_embd.weight has %d rows", o->model,
            tok_n_vocab(*tok), model_cfg(*m)->n_vocab);
}

static int32_t *tokenize(const options *o, const tokenizer *tok, const char *text, size_t len, int *n) {
    char err[ERR_LEN];
    int32_t *ids;
    if (tok_encode(tok, text, len, !o->no_bos && tok_add_bos(tok), o->special, &ids, n, err)) die("%s", err);
    return ids;
}

static void print_stats(const options *o, const gen_stats *st, model *m) {
    double ttft = st->t_prefill * 1e3, tpot = st->decode_steps ? st->t_decode * 1e3 / st->decode_steps : 0;
    double pre_tps = st->t_prefill > 0 ? st->n_prompt / st->t_prefill : 0, dec_tps = tpot > 0 ? 1e3 / tpot : 0;
    if (!o->quiet)
        fprintf(stderr,
                "\nquill: prompt %d tok, TTFT %.1f ms (%.1f tok/s) | generated %d tok, TPOT %.2f ms "
                "(%.1f tok/s) | %s | %s | seed %" PRIu64 "\n",
                st->n_prompt, ttft, pre_tps, st->n_gen, tpot, dec_tps, st->finish,
                model_backend_desc(m), o->sp.seed);
    if (!o->stats_json) return;
    FILE *f = fopen(o->stats_json, "w");
    if (!f) die("cannot write '%s': %s", o->stats_json, strerror(errno));
    fprintf(f,
            "{\"prompt_tokens\": %d, \"ttft_ms\": %.3f, \"prefill_tok_s\": %.3f, "
            "\"generated_tokens\": %d, \"tpot_ms\": %.3f, \"decode_tok_s\": %.3f, "
            "\"finish_reason\": \"%s\", \"backend\": \"%s\", \"seed\": %" PRIu64 "}\n",
            st->n_prompt, ttft, pre_tps, st->n_gen, tpot, dec_tps, st->finish,
            model_backend_desc(m), o->sp.seed);
    if (fclose(f)) die("cannot write '%s': %s", o->stats_json, strerror(errno));
}

// Decodes one token into text and streams it; 1 when a stop string hit.
static int emit_token(emitter *e, utf8_stream *us, const tokenizer *tok, int32_t prev, int32_t id) {
    char piece[512], out[sizeof piece + 8];
    int n = tok_decode(tok, prev, id, piece, sizeof piece);
    if (n < 0) die("token id %d has no text", id);
    size_t k = utf8_stream_push(us, piece, (size_t)n, out);
    return emit(e, out, k);
}

// The decode loop: token `next` was sampled from the prompt's logits.
static void decode_loop(const options *o, model *m, const tokenizer *tok, sampler *smp, float *logits,
                        int32_t prev, int32_t next, gen_stats *st) {
    char err[ERR_LEN];
    emitter e = {.o = o};
    utf8_stream us = {0};
    st->finish = "length";
    while (o->n_predict < 0 || st->n_gen < o->n_predict) {
        if (tok_is_eog(tok, next)) { st->finish = "eos"; break; }
        sampler_accept(smp, next);
        st->n_gen++;
        if (emit_token(&e, &us, tok, prev, next)) { st->finish = "stop"; us.n_pending = 0; break; }
        if (e.closed) break;
        if (o->n_predict >= 0 && st->n_gen >= o->n_predict) break;
        if (model_len(m) >= model_ctx(m)) {
            st->finish = "context";
            if (!o->quiet) fprintf(stderr, "\nquill: context full (%d tokens); stopping\n", model_ctx(m));
            break;
        }
        double t = now_sec();
        if (model_forward(m, &next, 1, 0, logits, err)) die("%s", err);
        prev = next;
        next = sampler_sample(smp, logits);
        st->t_decode += now_sec() - t;
        st->decode_steps++;
    }
    char tail[8];
    size_t k = utf8_stream_flush(&us, tail);
    if (!emit(&e, tail, k)) emit_finish(&e); else free(e.buf);
}

static int cmd_generate(const options *o) {
    size_t plen;
    char *prompt = read_prompt(o, &plen);
    model *m;
    tokenizer *tok;
    load(o, &m, &tok);
    char err[ERR_LEN];
    gen_stats st = {0};
    double t0 = now_sec();
    int n;
    int32_t *ids = tokenize(o, tok, prompt, plen, &n);
    if (n == 0) die("the prompt is empty and the model has no BOS token to start from");
    if (n > model_ctx(m)) die("the prompt is %d tokens but the context holds %d (raise -c)", n, model_ctx(m));
    if (o->echo && (fwrite(prompt, 1, plen, stdout) != plen || fflush(stdout))) return 0;
    sampler *smp = sampler_new(&o->sp, model_cfg(m)->n_vocab);
    float *logits = malloc(sizeof(float) * model_cfg(m)->n_vocab);
    if (!smp || !logits) die("out of memory");
    for (int i = 0; i < n; i++) sampler_accept(smp, ids[i]);
    st.n_prompt = n;
    if (o->n_predict != 0) {
        if (model_forward(m, ids, n, 0, logits, err)) die("%s", err);
        int32_t next = sampler_sample(smp, logits);
        st.t_prefill = now_sec() - t0;
        decode_loop(o, m, tok, smp, logits, ids[n - 1], next, &st);
    } else {
        st.finish = "length";
    }
    print_stats(o, &st, m);
    free(logits);
    free(ids);
    free(prompt);
    sampler_free(smp);
    tok_free(tok);
    model_free(m);
    return 0;
}

// ---- info ---------------------------------------------------------------

static void print_value(const gguf_kv *kv) {
    switch (kv->type) {
    case GGUF_STRING: {
        size_t n = kv->s.len > 120 ? 120 : kv->s.len;
        putchar('"');
        for (size_t i = 0; i < n; i++) {
            unsigned char c = (unsigned char)kv->s.ptr[i];
            if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
            else putchar(c);
        }
        printf("\"%s", kv->s.len > 120 ? "..." : "");
        break;
    }
    case GGUF_ARRAY: printf("[%s x %" PRIu64 "]", gguf_vtype_name(kv->arr_type), kv->arr_n); break;
    case GGUF_FLOAT32: case GGUF_FLOAT64: printf("%g", kv->f); break;
    case GGUF_BOOL: printf("%s", kv->u ? "true" : "false"); break;
    case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64: printf("%" PRId64, kv->i); break;
    default: printf("%" PRIu64, kv->u); break;
    }
}

static int cmd_info(int argc, char **argv) {
    options o;
    parse_options(&o, argc, argv, 2);
    const char *path = o.model ? o.model : o.prompt;
    if (!path) die("usage: quill info MODEL.gguf");
    gguf_file f;
    char err[ERR_LEN];
    if (gguf_open(&f, path, err)) die("%s", err);
    printf("%s: GGUF v%u, %" PRIu64 " metadata keys, %" PRIu64 " tensors, alignment %" PRIu64 "\n\n",
           path, f.version, f.n_kv, f.n_tensors, f.alignment);
    for (uint64_t i = 0; i < f.n_kv; i++) {
        printf("%-44.*s ", (int)f.kv[i].key.len, f.kv[i].key.ptr);
        print_value(&f.kv[i]);
        putchar('\n');
    }
    printf("\n%-36s %-8s %-26s %12s\n", "tensor", "type", "shape", "bytes");
    uint64_t total = 0, params = 0;
    for (uint64_t i = 0; i < f.n_tensors; i++) {
        const gguf_tensor *t = &f.tensors[i];
        char shape[64], tb[16];
        int k = snprintf(shape, sizeof shape, "[%" PRId64, t->ne[0]);
        for (uint32_t d = 1; d < t->n_dims; d++) k += snprintf(shape + k, sizeof shape - k, ", %" PRId64, t->ne[d]);
        snprintf(shape + k, sizeof shape - k, "]");
        printf("%-36.*s %-8s %-26s %12" PRIu64 "\n", (int)t->name.len, t->name.ptr,
               qtype_name(t->type, tb), shape, t->nbytes);
        total += t->nbytes;
        params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    printf("\n%.3f M parameters, %.2f MiB of tensor data (%.2f bits per parameter)\n", params / 1e6,
           total / 1048576.0, params ? 8.0 * total / params : 0);
    gguf_close(&f);
    free((char *)o.prompt);
    return 0;
}

// ---- perplexity -----------------------------------------------------------

// -log softmax(logits)[target], in double.
static double nll(const float *logits, int n_vocab, int32_t target) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)logits[i] - mx);
    return log(sum) - ((double)logits[target] - mx);
}

// llama.cpp's llama-perplexity protocol: the text tokenized once (with BOS),
// split into chunks of n_ctx tokens, each chunk's first token replaced by BOS,
// and only the second half of each chunk scored.
static int cmd_ppl(int argc, char **argv) {
    options o;
    parse_options(&o, argc, argv, 2);
    if (!o.file) die("quill ppl needs the text: -f FILE");
    if (!o.n_ctx) o.n_ctx = 512;
    model *m;
    tokenizer *tok;
    load(&o, &m, &tok);
    size_t len;
    char *text = read_file(o.file, &len);
    int n_tok, n_ctx = o.n_ctx, n_vocab = model_cfg(m)->n_vocab;
    int32_t *ids = tokenize(&o, tok, text, len, &n_tok);
    if (n_tok < 2 * n_ctx) die("%s: %d tokens; perplexity with -c %d needs at least %d", o.file, n_tok, n_ctx, 2 * n_ctx);
    float *logits = malloc(sizeof(float) * (size_t)n_ctx * n_vocab);
    if (!logits) die("out of memory");
    const int n_chunk = n_tok / n_ctx, first = n_ctx / 2;
    double sum = 0, sum2 = 0, t0 = now_sec();
    long count = 0;
    char err[ERR_LEN];
    for (int c = 0; c < n_chunk; c++) {
        int32_t *chunk = ids + (size_t)c * n_ctx, saved = chunk[0];
        if (tok_bos(tok) >= 0 && !o.no_bos) chunk[0] = tok_bos(tok);
        model_rewind(m, 0);
        if (model_forward(m, chunk, n_ctx, 1, logits, err)) die("%s", err);
        chunk[0] = saved;
        for (int j = first; j < n_ctx - 1; j++) {
            double v = nll(logits + (size_t)j * n_vocab, n_vocab, chunk[j + 1]);
            sum += v, sum2 += v * v, count++;
        }
        if (!o.quiet) fprintf(stderr, "[%d]%.4f%s", c + 1, exp(sum / count), c + 1 == n_chunk ? "\n" : " ");
    }
    double mean = sum / count, var = sum2 / count - mean * mean;
    double ppl = exp(mean), err_ppl = count > 1 ? ppl * sqrt(var / (count - 1)) : 0;
    printf("PPL = %.4f +/- %.5f\n", ppl, err_ppl);
    if (!o.quiet)
        fprintf(stderr, "quill: %d chunks of %d tokens, %ld scored, %.2f s, %s\n", n_chunk, n_ctx, count,
                now_sec() - t0, model_backend_desc(m));
    free(logits);
    free(ids);
    free(text);
    free((char *)o.prompt);
    tok_free(tok);
    model_free(m);
    return 0;
}

// ---- bench --------------------------------------------------------------

// Memory read bandwidth in bytes/s: the best of a few passes summing a buffer
// far larger than the caches, on all threads. Decode cannot beat this.
static double measure_read_bandwidth(int n_threads) {
    const size_t n = (size_t)1 << 27;  // 1 GiB of uint64
    uint64_t *buf = malloc(n * sizeof *buf);
    if (!buf) die("out of memory for the bandwidth test");
    if (n_threads <= 0) n_threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
#pragma omp parallel for num_threads(n_threads)
    for (size_t i = 0; i < n; i++) buf[i] = i;
    double best = 0;
    volatile uint64_t sink = 0;
    for (int rep = 0; rep < 4; rep++) {
        uint64_t s = 0;
        double t = now_sec();
#pragma omp parallel for reduction(+ : s) num_threads(n_threads)
        for (size_t i = 0; i < n; i++) s += buf[i];
        t = now_sec() - t;
        sink += s;
        if (n * sizeof *buf / t > best) best = n * sizeof *buf / t;
    }
    free(buf);
    return best;
}

// FLOPs of one token through the matrix products (2 per multiply-add), without the output layer.
static double layer_flops(const model_config *c) {
    double qd = (double)c->n_heads * c->head_dim, kvd = (double)c->n_kv_heads * c->head_dim;
    return 2.0 * c->n_layers * (c->dim * (qd + 2 * kvd) + qd * c->dim + 3.0 * c->dim * c->ffn);
}

static int cmd_bench(int argc, char **argv) {
    options o;
    parse_options(&o, argc, argv, 2);
    o.n_ctx = o.n_ctx ? o.n_ctx : o.bench_p + o.bench_n;
    model *m = load_model(&o);  // random token ids: no tokenizer needed
    const model_config *c = model_cfg(m);
    const int P = o.bench_p, N = o.bench_n;
    if (P + N > model_ctx(m)) die("-p %d + -n %d exceed the context of %d", P, N, model_ctx(m));
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)P);
    float *logits = malloc(sizeof(float) * c->n_vocab);
    if (!ids || !logits) die("out of memory");
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < P; i++) r = r * 6364136223846793005ull + 1, ids[i] = (int32_t)((r >> 33) % c->n_vocab);
    char err[ERR_LEN];
    fprintf(stderr, "quill bench: %s on %s\n", o.model, model_backend_desc(m));
    double bw = measure_read_bandwidth(o.n_threads);
    // warm-up: fault the mmapped weights in and start the threads, untimed
    if (model_forward(m, ids, P < 8 ? P : 8, 0, logits, err)) die("%s", err);
    model_rewind(m, 0);
    double t = now_sec();
    if (model_forward(m, ids, P, 0, logits, err)) die("%s", err);
    double t_pre = now_sec() - t;
    t = now_sec();
    for (int i = 0; i < N; i++) {
        int32_t id = ids[i % P];
        if (model_forward(m, &id, 1, 0, logits, err)) die("%s", err);
    }
    double t_dec = now_sec() - t;
    // bytes one decode step reads: the weights, plus K and V of every earlier position
    double kv_pos_bytes = 2.0 * c->n_layers * c->n_kv_heads * c->head_dim * sizeof(uint16_t);
    double step_bytes = (double)model_weight_bytes(m) + kv_pos_bytes * (P + N / 2.0);
    double pre_flops = layer_flops(c) * P + 2.0 * c->dim * c->n_vocab;
    printf("memory read bandwidth (measured): %.1f GB/s\n", bw / 1e9);
    printf("prefill %d tokens: %.1f tok/s (%.1f ms), %.1f GFLOP/s\n", P, P / t_pre, t_pre * 1e3,
           pre_flops / t_pre / 1e9);
    printf("decode %d tokens: %.1f tok/s = %.2f ms/token, %.1f MB/token, %.1f GB/s = %.0f%% of measured "
           "bandwidth\n", N, N / t_dec, t_dec * 1e3 / N, step_bytes / 1e6, step_bytes * N / t_dec / 1e9,
           100.0 * step_bytes * N / t_dec / bw);
    free(ids);
    free(logits);
    free((char *)o.prompt);
    model_free(m);
    return 0;
}

// ---- tokenize -------------------------------------------------------------

// Prints the token ids of TEXT (arguments, -f, or stdin), or "id<TAB>piece" per
// line. Reads only the vocabulary, so vocabulary-only GGUF files work.
static int cmd_tokenize(int argc, char **argv) {
    options o;
    parse_options(&o, argc, argv, 2);
    if (!o.model) die("usage: quill tokenize -m MODEL.gguf [--ids] [--no-bos] [TEXT]");
    size_t len;
    char *text = read_prompt(&o, &len);
    gguf_file f;
    tokenizer *tok;
    char err[ERR_LEN];
    if (gguf_open(&f, o.model, err)) die("%s", err);
    if (tok_load(&tok, &f, err)) die("%s: %s", o.model, err);
    gguf_close(&f);
    int n;
    int32_t *ids = tokenize(&o, tok, text, len, &n);
    for (int i = 0; i < n; i++) {
        if (o.ids_only) printf("%s%d", i ? " " : "", ids[i]);
        else printf("%d\t%s\n", ids[i], tok_piece(tok, ids[i]));
    }
    if (o.ids_only) putchar('\n');
    if (fflush(stdout)) die("cannot write the output: %s", strerror(errno));
    free(ids);
    free(text);
    free((char *)o.prompt);
    tok_free(tok);
    return 0;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);  // a closed stdout shows up as a write error: end quietly
    if (argc >= 2 && !strcmp(argv[1], "info")) return cmd_info(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "ppl")) return cmd_ppl(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "bench")) return cmd_bench(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "tokenize")) return cmd_tokenize(argc, argv);
    options o;
    parse_options(&o, argc, argv, 1);
    int rc = cmd_generate(&o);
    free((char *)o.prompt);
    return rc;
}
