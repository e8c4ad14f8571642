// main.c — quill's command line: parses arguments, picks a mode, and is the
// only place that prints errors and exits.
//
//   quill -m MODEL [options] [PROMPT]      generate (prompt from args, -f, or stdin)
//   quill info MODEL                       metadata and tensor table
//   quill ppl -m MODEL -f TEXT [-c 512]    perplexity, llama.cpp's protocol
//   quill bench -m MODEL [-p 512] [-n 128] prefill/decode speed vs the roofline
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "batch.h"
#include "chat.h"
#include "grammar.h"
#include "logprobs.h"
#include "reasoning.h"
#include "json_schema.h"
#ifdef QUILL_CUDA
#include "kernels.h"
#endif
#include "model.h"
#include "modelpath.h"
#include "pcache.h"
#include "quant.h"
#include "sample.h"
#include "signals.h"
#include "spec.h"
#include "template.h"
#include "textout.h"
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
    const char *prompt_cache;  // --prompt-cache: KV of the prompt kept in this file
    int interactive;           // -i: chat (also without -i when stdin is a terminal and no prompt)
    const char *chat_template; // --chat-template NAME|FILE (NULL: the model's)
    json_t *tvars;             // --var NAME=JSON and --think: more chat template variables (NULL: none)
    int no_gen_prompt;         // template: --no-generation-prompt
    const char *system;        // --system TEXT
    int context_stop;          // --context-full stop (default shift)
    const char *draft;         // --draft: speculative decoding with this draft model
    int lookup;                // --lookup: speculative decoding drafted by prompt lookup
    spec_params spec;          // --draft-max K, --draft-fixed
    sampler_params sp;
    int bench_p, bench_n;   // bench: prompt and generated tokens
    int n_seqs;             // batch: sequences the model holds (0: 1)
    size_t kv_mem;          // batch: --kv-mem, bytes of the KV pool (0: n_seqs full contexts)
    int device;             // DEVICE_AUTO, or --cpu / --gpu
    int kv_type;            // --kv: KV_F16 or KV_Q8
    const char *grammar;    // --grammar FILE (GBNF)
    const char *json_schema;  // --json-schema FILE|JSON; "{}" for --json
    int logprobs;           // --logprobs N: top N alternatives per token (-1: none)
    int out_format;         // --output-format: OUT_TEXT, OUT_JSON, OUT_JSONL
    int reasoning;          // --reasoning: REASON_HIDE, REASON_SHOW, REASON_OFF; -1: not given (hide; chat: show)
    char model_path[MP_PATH_MAX], draft_path[MP_PATH_MAX];  // -m, --draft resolved to files (model_file)
} options;

enum { DEVICE_AUTO, DEVICE_CPU, DEVICE_GPU };  // options.device

// What a generation run measured, for the stats line and --stats-json.
typedef struct {
    int n_prompt, n_gen;
    int n_cached;                // prompt positions restored from --prompt-cache, not prefilled
    double t_cache_write;        // seconds spent writing --prompt-cache after the prefill
    double t_prefill, t_decode;  // seconds: prompt eval (to first token), later steps
    int decode_steps;
    const char *finish;          // eos, length, stop, context
    const spec_stats *spec;      // speculative decoding's figures (NULL: off)
    const gconstraint *gc;       // the grammar (NULL: none)
    const reason_split *rs;      // the reasoning split (NULL: --reasoning off)
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

// An option's continuation lines: the words of `head`, then of `list`, then
// `tail`, wrapped at 90 columns under the options' descriptions.
static void help_words(FILE *out, const char *head, const char *list, const char *tail) {
    char buf[512];
    snprintf(buf, sizeof buf, "%s %s%s", head, list, tail);
    int col = 0;
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        const int len = (int)strlen(w);
        if (col && col + 1 + len > 90) fputc('\n', out), col = 0;
        col = col ? col + fprintf(out, " %s", w) : fprintf(out, "%25s%s", "", w);
    }
    fputc('\n', out);
}

static void usage(FILE *out) {
    fputs(
        "usage: quill -m MODEL.gguf [options] [PROMPT...]\n"
        "       quill -m MODEL.gguf [-i] [--system TEXT] [--chat-template NAME|FILE]   (chat)\n"
        "       quill info MODEL.gguf\n"
        "       quill ppl -m MODEL.gguf -f TEXT [-c 512] [-t N]\n"
        "       quill bench -m MODEL.gguf [-p 512] [-n 128] [-t N] [--stats-json FILE]\n"
        "       quill tokenize -m MODEL.gguf [--ids] [--no-bos] [--special] [TEXT]\n"
        "       quill batch -m MODEL.gguf [-i FILE] [-o FILE] [--format F] [--lines] [--shard I/N]\n"
        "                   [--resume] [--parallel N] [--chunk T] [--kv-mem SIZE] [--unordered]\n"
        "                   [generation options]\n"
        "       quill list [--json]      the models found by name (see -m): name, size, type, path\n"
        "       quill template [-m MODEL.gguf | --chat-template NAME|FILE] [--no-generation-prompt]\n"
        "                   [--var NAME=JSON] [--think MODE] [CONVERSATION.json]\n"
        "\n"
        "Generates a continuation of PROMPT (the arguments, else -f FILE, else stdin when it is\n"
        "not a terminal), taken byte for byte; only a prompt from stdin loses one trailing\n"
        "newline (what echo adds). Only generated text goes to stdout; a stats line goes to\n"
        "stderr.\n"
        "With a terminal on stdin and no prompt, or with -i, it chats (/help lists commands).\n"
        "\n"
        "options:\n",
        out);
    char archs[256], types[256];
    arch_names(archs, sizeof archs);
    qtype_compute_names(types, sizeof types);
    fputs("  -m, --model FILE       GGUF model, or its name in $QUILL_MODELS or the Hugging Face,\n"
          "                         llama.cpp, ollama or LM Studio caches (quill list);\n",
          out);
    help_words(out, "architectures:", archs, ";");
    help_words(out, "types:", types, "");
    fputs(
        "  -f, --file FILE        read the prompt (ppl: the text) from FILE\n"
        "  -n, --n-predict N      generate at most N tokens (default -1: until EOS or the\n"
        "                         context is full)\n"
        "  -c, --ctx-size N       context length in tokens (default: the model's, at most 4096)\n"
        "  -t, --threads N        CPU threads (default: all cores)\n"
        "      --cpu              run on the CPU even when a CUDA GPU is present\n"
        "      --gpu              run on the CUDA GPU; fail when there is none\n"
        "      --kv TYPE          KV cache type: f16 (default) or q8 (about half the memory and\n"
        "                         the KV reads of a long-context decode step; the model's and\n"
        "                         the draft's head size must be a multiple of 32)\n"
        "      --temp T           temperature; 0 is greedy (default 0.8)\n"
        "      --top-k K          keep the K most likely tokens; 0 off (default 40)\n"
        "      --top-p P          keep the smallest set with probability >= P; 1 off (default 0.95)\n"
        "      --min-p P          drop tokens below P x the top probability; 0 off (default 0.05)\n"
        "      --repeat-penalty R penalize the last --repeat-last-n tokens; 1 off (default 1)\n"
        "      --repeat-last-n N  window of the repetition penalty (default 64)\n"
        "      --seed S           random seed (default: from the clock, printed in the stats)\n"
        "      --stop STR         stop when STR is generated (not printed); repeatable\n"
        "      --grammar FILE     constrain the output to a GBNF grammar (llama.cpp's syntax)\n"
        "      --json-schema S    constrain the output to JSON valid under the JSON Schema S: a\n"
        "                         file, or the schema itself when it starts with '{'\n"
        "      --json             constrain the output to any JSON value\n"
        "      --logprobs N       each token's log-probability and its N (0-20) most likely\n"
        "                         alternatives, after penalties (implies --output-format json)\n"
        "      --output-format F  text (default), json (one object at the end) or jsonl (one\n"
        "                         object per token, streamed, then one with the stats)\n"
        "      --reasoning MODE   a reasoning model's thinking (<think>, gpt-oss's analysis):\n"
        "                         hide (default: not on stdout), show (on stderr; in chat\n"
        "                         dimmed, the default there), off (not split; chat and template:\n"
        "                         enable_thinking=false, reasoning_effort=low)\n"
        "      --echo             print the prompt before the generated text\n"
        "      --no-bos           do not prepend the BOS token\n"
        "      --special          control tokens written in the prompt (e.g. <s>) are tokens\n"
        "      --ids              (tokenize) print only the ids, on one line\n"
        "      --stats-json FILE  also write the stats as JSON to FILE\n"
        "      --draft FILE       speculative decoding: FILE (a smaller model with the same\n"
        "                         vocabulary) drafts tokens that the model checks in one pass;\n"
        "                         greedy output is unchanged, sampling keeps its distribution\n"
        "      --lookup           speculative decoding drafted from earlier text (n-gram lookup)\n"
        "      --draft-max K      draft at most K tokens per round (default 8), chosen from the\n"
        "                         acceptance rate; --draft-fixed: always K\n"
        "      --prompt-cache FILE  reuse the prompt's KV from FILE (the longest common prefix)\n"
        "                         and write it there after the prefill (with -n 0: only that)\n"
        "  -i, --interactive      chat, reading messages from stdin (answers on stdout)\n"
        "      --chat-template NAME  plain, chatml, llama2, llama3, mistral, gemma, phi3\n"
        "                         or a Jinja FILE (default: the model's own tokenizer.chat_template,\n"
        "                         rendered as transformers renders it; plain when it has none)\n"
        "      --var NAME=JSON    (chat, template) a chat template variable, e.g. --var\n"
        "                         enable_thinking=false or --var 'reasoning_effort=\"high\"'\n"
        "      --think MODE       (chat, template) the thinking switch: on, off (enable_thinking,\n"
        "                         Qwen3-style), low, medium, high (reasoning_effort, gpt-oss)\n"
        "      --no-generation-prompt  (template) render without the assistant turn's opening\n"
        "      --system TEXT      (chat) the system prompt\n"
        "      --context-full M   (chat) when the context fills: shift (drop the oldest turns,\n"
        "                         default) or stop (ask for /reset)\n"
        "  -q, --quiet            print nothing on stderr but errors\n"
        "  -p N, -n N             (bench) prompt and generated tokens to time\n"
        "  -h, --help             this help\n"
        "      --version          the version, git commit, CUDA build and CPU kernels\n"
        "batch (quill's JSON Lines records or OpenAI Batch requests in, the same out; see the README):\n"
        "  -i, --input FILE       read the records from FILE (default: stdin)\n"
        "  -o, --output FILE      write the results to FILE (default: stdout)\n"
        "      --format F         the input's format: openai, quill or lines (default: the first record's)\n"
        "      --lines            input is one prompt per line (--format lines)\n"
        "      --shard I/N        run only the records whose id hashes to shard I of N (default: the\n"
        "                         Slurm array task's, from SLURM_ARRAY_TASK_ID/COUNT)\n"
        "      --resume           append to -o FILE, skipping the records already in it\n"
        "      --parallel N       sequences decoding together (default 4)\n"
        "      --chunk T          prompt tokens per prefill chunk, a multiple of 64 (default 256)\n"
        "      --kv-mem SIZE      bound the KV cache (e.g. 512M); sequences wait for room\n"
        "      --unordered        write each result as it finishes, not in input order\n",
        out);
}

// The build's identity, passed by the Makefile to main.o alone (see there).
#ifndef QUILL_VERSION
#define QUILL_VERSION "unknown"
#endif
#ifndef QUILL_COMMIT
#define QUILL_COMMIT "unknown"
#endif
#ifndef QUILL_CUDA_ARCH_NAME
#define QUILL_CUDA_ARCH_NAME "unknown arch"
#endif

// quill --version: the release and git commit, whether this build has the
// CUDA backend, and the CPU backend's own description of the kernels it picks
// on this machine ("cpu, 2 threads, avx512-vnni"). Touches no GPU.
static void print_version(void) {
#if defined(QUILL_SIMT)
    const char *cuda = "on, emulated on the CPU (SIMT, a test build)";
#elif defined(QUILL_CUDA)
    const char *cuda = "on (" QUILL_CUDA_ARCH_NAME ")";
#else
    const char *cuda = "off (built without nvcc, or with make CUDA=0)";
#endif
    backend *b;
    char err[ERR_LEN];
    if (cpu_backend.init(&b, 0, err)) die("%s", err);
    printf("quill %s (commit %s)\ncuda: %s\ncpu backend: %s\n", QUILL_VERSION, QUILL_COMMIT, cuda,
           cpu_backend.describe(b));
    cpu_backend.free(b);
    if (fflush(stdout) && errno != EPIPE) die("cannot write the output: %s", strerror(errno));
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

// A model option's value: a file, or the name of a model the user already has
// (modelpath.h: $QUILL_MODELS, the Hugging Face, llama.cpp, ollama and LM
// Studio caches), written to path. Dies saying where it looked, or, for an
// ambiguous name, with one line per candidate after the first.
static const char *model_file(const char *value, char path[MP_PATH_MAX]) {
    char *msg;
    if (!mp_resolve(value, path, &msg)) return path;
    if (!msg) die("out of memory");
    fprintf(stderr, "quill: %s\n", msg);
    free(msg);
    exit(1);
}

// --var NAME=JSON: a variable for the chat template (the value is JSON; a bare
// word that is not JSON is taken as a string).
static void set_template_var(options *o, const char *arg) {
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg) die("option --var: expected NAME=JSON, got '%s'", arg);
    json_error_t je;
    json_t *v = json_loads(eq + 1, JSON_DECODE_ANY, &je);
    if (!v) die("option --var %.*s: the value is not JSON (%s); a string is written \"...\"", (int)(eq - arg), arg,
                je.text);
    if (!o->tvars && !(o->tvars = json_object())) die("out of memory");
    char *name = strndup(arg, (size_t)(eq - arg));
    if (!name || json_object_set_new(o->tvars, name, v)) die("out of memory");
    free(name);
}

// --think MODE: on / off set enable_thinking (Qwen3-style templates); low,
// medium, high set reasoning_effort (gpt-oss) and enable_thinking.
static void set_think(options *o, const char *mode) {
    static const char *const modes[] = {"on", "off", "low", "medium", "high"};
    int k = 0;
    while (k < 5 && strcmp(mode, modes[k])) k++;
    if (k == 5) die("option --think: expected on, off, low, medium or high, got '%s'", mode);
    char var[64];
    snprintf(var, sizeof var, "enable_thinking=%s", k == 1 ? "false" : "true");
    set_template_var(o, var);
    if (k >= 2) snprintf(var, sizeof var, "reasoning_effort=\"%s\"", mode), set_template_var(o, var);
}

// Parses argv[first..argc). Positional words become the prompt.
static void parse_options(options *o, int argc, char **argv, int first) {
    *o = (options){.n_predict = -1, .bench_p = 512, .bench_n = 128, .logprobs = -1, .reasoning = -1,
                   .spec = {.draft_max = 8, .ngram_min = 2, .ngram_max = 4},
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
        else if (!strcmp(a, "--version")) print_version(), exit(0);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = ARG();
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) o->file = ARG();
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) o->n_predict = o->bench_n = (int)parse_int(a, ARG(), -1, 1 << 30);
        else if (!strcmp(a, "-p")) o->bench_p = (int)parse_int(a, ARG(), 1, 1 << 20);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size")) o->n_ctx = (int)parse_int(a, ARG(), 0, 1 << 24);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) o->n_threads = (int)parse_int(a, ARG(), 0, 1024);
        else if (!strcmp(a, "--cpu")) o->device = DEVICE_CPU;
        else if (!strcmp(a, "--gpu")) o->device = DEVICE_GPU;
        else if (!strcmp(a, "--kv")) {
            const char *v = ARG();
            if (strcmp(v, "f16") && strcmp(v, "q8")) die("option --kv: expected f16 or q8, got '%s'", v);
            o->kv_type = !strcmp(v, "q8") ? KV_Q8 : KV_F16;
        }
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
        else if (!strcmp(a, "--prompt-cache")) o->prompt_cache = ARG();
        else if (!strcmp(a, "--draft")) o->draft = ARG();
        else if (!strcmp(a, "--lookup")) o->lookup = 1;
        else if (!strcmp(a, "--draft-max")) o->spec.draft_max = (int)parse_int(a, ARG(), 1, SPEC_MAX_DRAFT);
        else if (!strcmp(a, "--draft-fixed")) o->spec.fixed = 1;
        else if (!strcmp(a, "-i") || !strcmp(a, "--interactive")) o->interactive = 1;
        else if (!strcmp(a, "--chat-template")) o->chat_template = ARG();
        else if (!strcmp(a, "--var")) set_template_var(o, ARG());
        else if (!strcmp(a, "--think")) set_think(o, ARG());
        else if (!strcmp(a, "--no-generation-prompt")) o->no_gen_prompt = 1;
        else if (!strcmp(a, "--system")) o->system = ARG();
        else if (!strcmp(a, "--context-full")) {
            const char *v = ARG();
            if (strcmp(v, "shift") && strcmp(v, "stop")) die("option --context-full: expected shift or stop, got '%s'", v);
            o->context_stop = !strcmp(v, "stop");
        }
        else if (!strcmp(a, "--grammar")) o->grammar = ARG();
        else if (!strcmp(a, "--json-schema")) o->json_schema = ARG();
        else if (!strcmp(a, "--json")) o->json_schema = "{}";
        else if (!strcmp(a, "--reasoning")) {
            const char *v = ARG();
            o->reasoning = !strcmp(v, "hide") ? REASON_HIDE : !strcmp(v, "show") ? REASON_SHOW : !strcmp(v, "off")
                         ? REASON_OFF : (die("option --reasoning: expected show, hide or off, got '%s'", v), 0);
            if (o->reasoning == REASON_OFF) set_think(o, "off"), set_template_var(o, "reasoning_effort=\"low\"");
        }
        else if (!strcmp(a, "--logprobs")) o->logprobs = (int)parse_int(a, ARG(), 0, SAMPLE_MAX_TOP);
        else if (!strcmp(a, "--output-format")) {
            const char *v = ARG();
            o->out_format = !strcmp(v, "text") ? OUT_TEXT : !strcmp(v, "json") ? OUT_JSON : !strcmp(v, "jsonl") ? OUT_JSONL
                          : (die("option --output-format: expected text, json or jsonl, got '%s'", v), 0);
        }
        else if (!strcmp(a, "-q") || !strcmp(a, "--quiet")) o->quiet = 1;
        else if (!strcmp(a, "--")) { while (++i < argc) words[n_words++] = argv[i]; }
        else if (a[0] == '-' && a[1]) die("unknown option '%s' (see quill --help)", a);
        else words[n_words++] = argv[i];
#undef ARG
    }
    o->prompt = n_words ? join_args(n_words, words) : NULL;
    free(words);
    if (o->logprobs >= 0 && o->out_format == OUT_TEXT) o->out_format = OUT_JSON;  // where else would they go
    if (o->model) o->model = model_file(o->model, o->model_path);
    if (o->draft) o->draft = model_file(o->draft, o->draft_path);
}

// ---- input --------------------------------------------------------------

// Reads a whole stream; dies on a read error, or when it holds more than
// max bytes (0: no bound), before holding more than that. *len excludes the
// added NUL.
static char *read_all(FILE *f, const char *what, size_t max, size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    if (!buf) die("out of memory");
    for (size_t r; (r = fread(buf + n, 1, cap - n - 1, f)) > 0;) {
        n += r;
        if (max && n > max) die("%s is longer than %zu bytes: more than the context can hold (raise -c)", what, max);
        if (cap - n - 1 == 0 && !(buf = realloc(buf, cap *= 2))) die("out of memory reading %s", what);
    }
    if (ferror(f)) die("cannot read %s: %s", what, strerror(errno));
    buf[n] = 0;
    *len = n;
    return buf;
}

static char *read_file(const char *path, size_t max, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) die("cannot open '%s': %s", path, strerror(errno));
    char *s = read_all(f, path, max, len);
    fclose(f);
    return s;
}

// The prompt: arguments, else -f, else stdin (not a terminal), byte for byte,
// except that with drop_newline one trailing newline of stdin ("\n" or "\r\n",
// what `echo` adds) is dropped: generation does, `tokenize` does not. A file
// or stdin longer than max bytes (0: no bound) is refused as it is read.
static char *read_prompt(const options *o, int drop_newline, size_t max, size_t *len) {
    char *p;
    if (o->prompt) {
        p = strdup(o->prompt);
        if (!p) die("out of memory");
        *len = strlen(p);
    } else if (o->file) {
        p = read_file(o->file, max, len);
    } else if (!isatty(STDIN_FILENO)) {
        p = read_all(stdin, "the prompt on stdin", max ? max + 2 : 0, len);  // + the newline dropped below
        if (drop_newline && *len && p[*len - 1] == '\n') {
            p[--*len] = 0;
            if (*len && p[*len - 1] == '\r') p[--*len] = 0;
        }
    } else {
        die("no prompt: give it as an argument, with -f FILE, or on stdin (see quill --help)");
    }
    long bad = utf8_invalid_at(p, *len);
    if (bad >= 0) die("the prompt is not valid UTF-8 (byte %ld)", bad);
    return p;
}

// The most bytes a prompt that fits the context can have: every token stands
// for at most its piece's length in bytes, so a longer text is more tokens
// than the context holds whatever it says, and is refused unread.
static size_t prompt_max_bytes(const model *m, const tokenizer *tok) {
    return (size_t)model_ctx(m) * (size_t)(tok_max_piece_len(tok) > 0 ? tok_max_piece_len(tok) : 1);
}

// ---- output -------------------------------------------------------------

// ---- generation ---------------------------------------------------------

// The exit status after a command that polls signals.h's flag: 0, or 128 +
// the signal that stopped it (saying so on stderr unless quiet).
static int signal_status(int quiet) {
    const int sig = *sig_flag();
    if (sig && !quiet) fprintf(stderr, "quill: stopped by %s\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    return sig ? 128 + sig : 0;
}

// The backend: CUDA when this build has it and a GPU is usable (--gpu: or
// fail), else the CPU. *why (when not empty) says why a GPU build runs on the
// CPU, for a notice once the model has loaded.
static const backend_ops *pick_backend(const options *o, char why[ERR_LEN]) {
    why[0] = 0;
    if (o->device == DEVICE_CPU) return &cpu_backend;
#ifdef QUILL_CUDA
    char reason[ERR_LEN];
    const int n = cuda_device_count(reason);
    if (n > 0) return &cuda_backend;
    if (o->device == DEVICE_GPU) die("--gpu: no usable CUDA device (%s)", reason);
    // a machine without the NVIDIA driver is simply a CPU machine: no notice
    // (the stats line names the backend); a driver without a usable GPU is news
    if (n == 0) snprintf(why, ERR_LEN, "no CUDA device (%.400s); running on the CPU", reason);
#else
    if (o->device == DEVICE_GPU) die("--gpu: this quill was built without CUDA (build it where nvcc is installed)");
#endif
    return &cpu_backend;
}

// The model on the picked backend. A notice that a GPU build runs on the CPU
// goes to why (printed by the caller once everything has loaded, so that a
// failure stays one line).
static model *load_model_on(const options *o, char why[ERR_LEN]) {
    char err[ERR_LEN];
    model *m;
    if (!o->model) die("no model: give one with -m FILE.gguf (see quill --help)");
    model_opts mo = {.ops = pick_backend(o, why), .n_threads = o->n_threads, .n_ctx = o->n_ctx,
                     .n_seqs = o->n_seqs, .kv_mem = o->kv_mem, .kv_type = o->kv_type};
    if (model_load(&m, o->model, &mo, err)) die("%s", err);
    return m;
}

static void backend_notice(const options *o, const char *why) {
    if (why[0] && !o->quiet) fprintf(stderr, "quill: %s\n", why);
}

static model *load_model(const options *o) {
    char why[ERR_LEN];
    model *m = load_model_on(o, why);
    backend_notice(o, why);
    return m;
}

static void load(const options *o, model **m, tokenizer **tok) {
    char err[ERR_LEN], why[ERR_LEN];
    *m = load_model_on(o, why);
    if (tok_load(tok, model_gguf(*m), err)) die("%s: %s", o->model, err);
    if (tok_n_vocab(*tok) != model_cfg(*m)->n_vocab)
        die("%s: the tokenizer has %d tokens but token_embd.weight has %d rows", o->model,
            tok_n_vocab(*tok), model_cfg(*m)->n_vocab);
    backend_notice(o, why);
    const int trained = model_cfg(*m)->n_ctx_train;
    if (o->n_ctx > trained && trained > 0 && !o->quiet)
        fprintf(stderr, "quill: warning: a context of %d tokens is longer than the %d the model was trained on; "
                        "text past that may degrade\n", o->n_ctx, trained);
}

static int32_t *tokenize(const options *o, const tokenizer *tok, const char *text, size_t len, int *n) {
    char err[ERR_LEN];
    int32_t *ids;
    if (tok_encode(tok, text, len, !o->no_bos && tok_add_bos(tok), o->special, &ids, n, err)) die("%s", err);
    return ids;
}

// --stats-json: the JSON is printed into memory (stats_open), then replaces
// the file whole (stats_write), so a full disk or a kill leaves the old one.
typedef struct {
    char *buf;
    size_t len;
} membuf;

static FILE *stats_open(membuf *mb) {
    FILE *f = open_memstream(&mb->buf, &mb->len);
    if (!f) die("out of memory");
    return f;
}

static void stats_write(const char *path, FILE *f, membuf *mb) {
    char err[ERR_LEN];
    if (fclose(f)) die("out of memory");
    const void *parts[] = {mb->buf};
    const size_t lens[] = {mb->len};
    if (write_file_atomic(path, parts, lens, 1, 0666, err)) die("cannot write '%s': %s", path, err);
    free(mb->buf);
}

static void print_stats(const options *o, const gen_stats *st, model *m) {
    double ttft = st->t_prefill * 1e3, tpot = st->decode_steps ? st->t_decode * 1e3 / st->decode_steps : 0;
    double pre_tps = st->t_prefill > 0 ? (st->n_prompt - st->n_cached) / st->t_prefill : 0;
    double dec_tps = tpot > 0 ? 1e3 / tpot : 0;
    char cached[32] = "", spec_line[256] = "", spec_json[512] = "", gram_line[96] = "", gram_json[128] = "";
    char rs_line[64] = "", rs_json[96] = "";
    if (st->rs && st->rs->opened) {
        snprintf(rs_line, sizeof rs_line, " | reasoning %d tok%s", st->rs->n_think, st->rs->think ? ", not closed" : "");
        snprintf(rs_json, sizeof rs_json, ", \"reasoning_tokens\": %d, \"reasoning_closed\": %s", st->rs->n_think,
                 st->rs->think ? "false" : "true");
    }
    if (o->prompt_cache) snprintf(cached, sizeof cached, " (%d cached)", st->n_cached);
    if (st->gc) {
        const double ms = gcon_seconds(st->gc) * 1e3;
        const int done = gcon_can_end(st->gc);
        snprintf(gram_line, sizeof gram_line, " | grammar %.2f ms/tok%s", st->n_gen ? ms / st->n_gen : 0,
                 done ? "" : ", incomplete");
        snprintf(gram_json, sizeof gram_json, ", \"grammar_ms\": %.3f, \"grammar_complete\": %s", ms,
                 done ? "true" : "false");
        if (!done && !o->quiet && strcmp(st->finish, "interrupted"))
            fprintf(stderr, "\nquill: the output stopped (%s) before the grammar was complete: it is a prefix\n",
                    st->finish);
    }
    if (st->spec) spec_stats_format(st->spec, spec_line, sizeof spec_line, spec_json, sizeof spec_json);
    if (!o->quiet)
        fprintf(stderr,
                "\nquill: prompt %d tok%s, TTFT %.1f ms (%.1f tok/s) | generated %d tok, TPOT %.2f ms "
                "(%.1f tok/s)%s%s%s | %s | %s | seed %" PRIu64 "\n",
                st->n_prompt, cached, ttft, pre_tps, st->n_gen, tpot, dec_tps, spec_line, gram_line, rs_line, st->finish,
                model_backend_desc(m), o->sp.seed);
    if (!o->stats_json) return;
    membuf mb;
    FILE *f = stats_open(&mb);
    fprintf(f,
            "{\"prompt_tokens\": %d, \"cached_tokens\": %d, \"cache_write_ms\": %.3f, "
            "\"ttft_ms\": %.3f, \"prefill_tok_s\": %.3f, "
            "\"generated_tokens\": %d, \"tpot_ms\": %.3f, \"decode_tok_s\": %.3f, "
            "\"finish_reason\": \"%s\", \"backend\": \"%s\", \"seed\": %" PRIu64 "%s%s%s}\n",
            st->n_prompt, st->n_cached, st->t_cache_write * 1e3, ttft, pre_tps, st->n_gen, tpot, dec_tps,
            st->finish, model_backend_desc(m), o->sp.seed, spec_json, gram_json, rs_json);
    stats_write(o->stats_json, f, &mb);
}

// Uniform in [0, 1) for draw `step` of a seeded run (splitmix64 of seed and
// step): the backend sampler's draws, reproducible for a seed.
static double draw_uniform(uint64_t seed, uint64_t step) {
    uint64_t z = seed + (step + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
}

// Runs ids through the model and picks the next token: on the backend when it
// samples and the settings need no history (only the id comes back), else on
// the host from the logits.
static int32_t forward_sample(const options *o, model *m, sampler *smp, const int32_t *ids, int n, float *logits,
                              uint64_t step, gconstraint *gc) {
    char err[ERR_LEN];
    int32_t id;
    if (gc || o->logprobs >= 0) {  // the mask and the log-probabilities need the logits on the host
        if (model_forward(m, ids, n, 0, logits, err)) die("%s", err);
        // with log-probabilities the mask is always applied, so that they describe the distribution drawn from
        if (gc && o->logprobs >= 0 && gcon_apply(gc, ids[n - 1], logits, err) < 0) die("%s", err);
        if (!gc) return sampler_sample(smp, logits);
        if (gcon_pick(gc, smp, ids[n - 1], logits, &id, err)) die("%s", err);
        return id;
    }
    if (o->sp.repeat_penalty == 1.0f || o->sp.repeat_last_n == 0) {
        const sample_cfg sc = {o->sp.temp, o->sp.top_k, o->sp.top_p, o->sp.min_p};
        const int r = model_forward_sample(m, ids, n, &sc, draw_uniform(o->sp.seed, step), &id, logits, err);
        if (r < 0) die("%s", err);
        return r == 1 ? id : sampler_sample(smp, logits);
    }
    if (model_forward(m, ids, n, 0, logits, err)) die("%s", err);
    return sampler_sample(smp, logits);
}

// The decode loop: token `next` was sampled from the prompt's logits. With
// sd, the later tokens come from the speculative decoder instead.
// --output-format json|jsonl: the closing object, with the run's stats.
static void genout_end(genout *go, const gen_stats *st, const char *text, size_t len, const textout *rout) {
    json_t *extra = json_pack("{sfsf}", "ttft_ms", st->t_prefill * 1e3, "tpot_ms",
                              st->decode_steps ? st->t_decode * 1e3 / st->decode_steps : 0.0);
    if (extra && st->rs && st->rs->opened) {  // the reasoning apart from the text
        json_t *r = json_stringn(rout->text ? rout->text : "", rout->len);
        json_object_set_new(extra, "reasoning", r ? r : json_string("\ufffd"));
        json_object_set_new(extra, "reasoning_closed", json_boolean(!st->rs->think));
    }
    if (genout_finish(go, text, len, st->finish, st->n_prompt, st->n_gen, extra)) die("out of memory");
    if (go->error && go->error != EPIPE && !*sig_flag()) die("cannot write the output: %s", strerror(go->error));
}

static void decode_loop(const options *o, model *m, const tokenizer *tok, sampler *smp, float *logits,
                        int32_t prev, int32_t next, gen_stats *st, spec *sd, gconstraint *gc, genout *go,
                        reason_split *rs) {
    char err[ERR_LEN];
    textout out, rout;  // the answer; the reasoning (shown on stderr with --reasoning show)
    if (textout_init(&out, tok, o->stops, o->n_stops, go ? NULL : stdout) ||
        textout_init(&rout, tok, NULL, 0, o->reasoning == REASON_SHOW && !go ? stderr : NULL))
        die("out of memory");
    const float *row = logits;  // the logits next was drawn from (with sd: its verification row)
    st->finish = "length";
    while (o->n_predict < 0 || st->n_gen < o->n_predict) {
        if (tok_is_eog(tok, next)) { st->finish = "eos"; break; }
        // row: host logits whenever log-probabilities are asked for
        if (go && genout_token(go, smp, row, prev, next)) die("out of memory");
        if (go && go->error) break;  // the reader went away
        sampler_accept(smp, next);
        st->n_gen++;
        int stop = rs ? reason_token(rs, tok, prev, next, &out, &rout) : textout_token(&out, prev, next);
        if (stop < 0) die("out of memory");
        if (stop) { st->finish = "stop"; break; }
        if (out.closed) break;
        if (gc && gcon_accept(gc, prev, next, err)) die("%s", err);
        if (gc && gcon_must_end(gc)) {  // the grammar is complete: what textout holds goes out
            st->finish = "stop";
            if ((rs && reason_finish(rs, &out, &rout) < 0) || textout_finish(&out) < 0) die("out of memory");
            break;
        }
        if (o->n_predict >= 0 && st->n_gen >= o->n_predict) break;
        if (*sig_flag()) { st->finish = "interrupted"; break; }
        if ((sd ? spec_len(sd) : model_len(m)) >= model_ctx(m)) {
            st->finish = "context";
            if (!o->quiet) fprintf(stderr, "\nquill: context full (%d tokens); stopping\n", model_ctx(m));
            break;
        }
        double t = now_sec();
        prev = next;
        if (sd) {
            if (spec_next(sd, o->n_predict < 0 ? 0 : o->n_predict - st->n_gen, &next, err)) die("%s", err);
            row = spec_logits(sd);
        } else {
            next = forward_sample(o, m, smp, &next, 1, logits, (uint64_t)st->n_gen, gc);
        }
        st->t_decode += now_sec() - t;
        st->decode_steps++;
    }
    if (strcmp(st->finish, "stop") && rs && reason_finish(rs, &out, &rout) < 0) die("out of memory");
    if (strcmp(st->finish, "stop") && textout_finish(&out) < 0) die("out of memory");
    if (textout_finish(&rout) < 0) die("out of memory");
    if (rout.sink && rout.len && rout.text[rout.len - 1] != '\n') fputc('\n', stderr);
    if (out.error && !*sig_flag()) die("cannot write the output: %s", strerror(out.error));  // a full disk
    if (rs && rs->think && !o->quiet)
        fprintf(stderr, "\nquill: the model's reasoning was not closed within %d tokens (%s): it is not the answer%s\n",
                st->n_gen, st->finish, o->reasoning == REASON_SHOW ? "" : "; --reasoning show prints it");
    if (go && !go->error) genout_end(go, st, out.text, out.len, &rout);
    textout_free(&out);
    textout_free(&rout);
}

// Passes of the prompt's positions from..n-1 (a multiple of model.c's pass of
// 512 tokens, so they are the passes one call would make), so that a signal
// is seen between them; the last one picks the first new token. Returns it,
// or -1 when a signal stopped the prefill.
#define PREFILL_CHUNK 2048
static int32_t prefill(const options *o, model *m, sampler *smp, const int32_t *ids, int from, int n, float *logits,
                       gconstraint *gc) {
    char err[ERR_LEN];
    for (; n - from > PREFILL_CHUNK; from += PREFILL_CHUNK) {
        if (*sig_flag()) return -1;
        if (model_forward(m, ids + from, PREFILL_CHUNK, 0, logits, err)) die("%s", err);
    }
    return *sig_flag() ? -1 : forward_sample(o, m, smp, ids + from, n - from, logits, 0, gc);
}

// --prompt-cache: restores the prompt's cached prefix (see pcache_prompt_restore);
// an unusable file costs one warning line and a cold run, never a different output.
static int prompt_cache_restore(const options *o, model *m, const int32_t *ids, int n, int *save) {
    char warn[ERR_LEN];
    int k = pcache_prompt_restore(o->prompt_cache, m, o->model, ids, n, save, warn);
    if (warn[0] && !o->quiet) fprintf(stderr, "quill: prompt cache %s: %s; ignoring it\n", o->prompt_cache, warn);
    return k;
}

// Writes the KV of the n prompt positions to --prompt-cache; a failure is a
// warning (the generation goes on). Returns the seconds it took.
static double prompt_cache_save(const options *o, model *m, const int32_t *ids, int n) {
    char err[ERR_LEN];
    double t = now_sec();
    if (pcache_save(o->prompt_cache, m, o->model, ids, n, err) && !o->quiet)
        fprintf(stderr, "quill: prompt cache %s: not saved: %s\n", o->prompt_cache, err);
    return now_sec() - t;
}

// --draft / --lookup: the speculative decoder (NULL when neither is given).
// *draft is the draft model (or NULL), freed by the caller after the decoder.
static spec *spec_start(const options *o, model *m, model **draft) {
    char err[ERR_LEN];
    spec *sd;
    *draft = NULL;
    if (!o->draft && !o->lookup) return NULL;
    if (o->draft && o->lookup) die("--draft and --lookup are two ways of drafting: give one");
    if (o->draft) {
        char why[ERR_LEN];
        model_opts mo = {.ops = pick_backend(o, why), .n_threads = o->n_threads, .n_ctx = model_ctx(m),
                         .kv_type = o->kv_type};
        if (model_load(draft, o->draft, &mo, err)) die("%s", err);
    }
    if (spec_new(&sd, m, *draft, &o->sp, &o->spec, err)) die("%s: %s", o->draft ? o->draft : "--lookup", err);
    return sd;
}

// The grammar of --grammar, --json-schema or --json (NULL: none of them).
static grammar *grammar_opt(const options *o) {
    char err[ERR_LEN];
    grammar *g = NULL;
    if (o->grammar && o->json_schema) die("--grammar and --json-schema (or --json) are two grammars: give one");
    if ((o->grammar || o->json_schema) && grammar_load(&g, o->grammar, o->json_schema, err)) die("%s", err);
    return g;
}

// --grammar, --json-schema, --json: the compiled grammar, the vocabulary's
// trie and one generation's constraint (all NULL without them).
typedef struct {
    grammar *g;
    gvocab *v;
    gconstraint *c;
    gconstraint *spec_c;  // the speculative decoder's own (it runs ahead of the output)
} gram_ctx;

static void gram_start(const options *o, const tokenizer *tok, gram_ctx *gx) {
    char err[ERR_LEN];
    *gx = (gram_ctx){.g = grammar_opt(o)};
    if (gx->g && (gvocab_new(&gx->v, tok, err) || gcon_new(&gx->c, gx->g, gx->v, err))) die("%s", err);
}

static void gram_free(gram_ctx *gx) {
    gcon_free(gx->c);
    gcon_free(gx->spec_c);
    gvocab_free(gx->v);
    grammar_free(gx->g);
}

static int cmd_generate(const options *o) {
    model *m;
    tokenizer *tok;
    load(o, &m, &tok);
    size_t plen;
    char *prompt = read_prompt(o, 1, prompt_max_bytes(m, tok), &plen);
    sig_install();  // once the prompt is read: a signal stops the generation cleanly
    gram_ctx gx;
    gram_start(o, tok, &gx);
    if (o->out_format != OUT_TEXT && o->echo) die("--echo writes the prompt as text: not with --output-format json/jsonl");
    genout go;
    if (o->out_format != OUT_TEXT && genout_init(&go, tok, o->out_format, o->logprobs, stdout)) die("out of memory");
    genout *gop = o->out_format != OUT_TEXT ? &go : NULL;
    model *draft;
    spec *sd = spec_start(o, m, &draft);
    char err[ERR_LEN];
    if (sd && gx.g) {
        if (gcon_new(&gx.spec_c, gx.g, gx.v, err)) die("%s", err);
        spec_set_grammar(sd, gx.spec_c);
    }
    gen_stats st = {.gc = gx.c};
    reason_split rs;  // --reasoning off: no split
    reason_init(&rs, prompt, plen);
    if (o->reasoning != REASON_OFF) st.rs = &rs;
    double t0 = now_sec();
    int n;
    int32_t *ids = tokenize(o, tok, prompt, plen, &n);
    const int ctx = model_ctx(m);
    if (n == 0 || n > ctx) free(ids);  // freed before exiting: LeakSanitizer need not find it on the stack
    if (n == 0) die("the prompt is empty and the model has no BOS token to start from");
    if (n > ctx) die("the prompt is %d tokens but the context holds %d (raise -c)", n, ctx);
    if (o->echo && (fwrite(prompt, 1, plen, stdout) != plen || fflush(stdout))) return 0;
    sampler *smp = sampler_new(&o->sp, model_cfg(m)->n_vocab);
    float *logits = malloc(sizeof(float) * model_cfg(m)->n_vocab);
    if (!smp || !logits) die("out of memory");
    for (int i = 0; i < n; i++) sampler_accept(smp, ids[i]);
    st.n_prompt = n;
    if (o->n_predict != 0 || o->prompt_cache) {  // with -n 0, --prompt-cache still prefills and saves
        int save = 0;
        if (o->prompt_cache) st.n_cached = prompt_cache_restore(o, m, ids, n, &save);
        int32_t next = prefill(o, m, smp, ids, st.n_cached, n, logits, gx.c);
        if (next >= 0 && sd && spec_begin(sd, ids, n, next, err)) die("%s", err);
        st.t_prefill = now_sec() - t0;
        if (next >= 0 && save) st.t_cache_write = prompt_cache_save(o, m, ids, n);
        if (next < 0) st.finish = "interrupted";
        else if (o->n_predict != 0) decode_loop(o, m, tok, smp, logits, ids[n - 1], next, &st, sd, gx.c, gop, st.rs ? &rs : NULL), gop = NULL;
        else st.finish = "length";
    } else {
        st.finish = "length";
    }
    if (gop) genout_end(gop, &st, "", 0, NULL);  // no decode loop ran: an empty answer
    if (o->out_format != OUT_TEXT) genout_free(&go);
    st.spec = sd ? spec_get_stats(sd) : NULL;
    print_stats(o, &st, m);
    gram_free(&gx);
    spec_free(sd);
    model_free(draft);
    free(logits);
    free(ids);
    free(prompt);
    sampler_free(smp);
    tok_free(tok);
    model_free(m);
    return signal_status(o->quiet);
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
    const char *path = o.model ? o.model : o.prompt ? model_file(o.prompt, o.model_path) : NULL;
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
    char *text = read_file(o.file, 0, &len);
    int n_tok, n_ctx = o.n_ctx, n_vocab = model_cfg(m)->n_vocab;
    int32_t *ids = tokenize(&o, tok, text, len, &n_tok);
    if (n_tok < 2 * n_ctx) die("%s: %d tokens; perplexity with -c %d needs at least %d", o.file, n_tok, n_ctx, 2 * n_ctx);
    const double logit_bytes = sizeof(float) * (double)n_ctx * n_vocab;
    if (logit_bytes > (double)mem_available())
        die("the logits of %d positions x %d tokens need %.1f MiB, more than the memory available (lower -c)",
            n_ctx, n_vocab, logit_bytes / 1048576);
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

// FLOPs of one token through the matrix products (2 per multiply-add), without the output
// layer; of a mixture of experts, the router and the experts the token uses.
static double layer_flops(const model_config *c) {
    double qd = (double)c->n_heads * c->head_dim, kvd = (double)c->n_kv_heads * c->head_dim;
    double ffn = c->n_expert ? (double)c->n_expert + 3.0 * c->n_expert_used * c->ffn_expert : 3.0 * c->ffn;
    return 2.0 * c->n_layers * (c->dim * (qd + 2 * kvd) + qd * c->dim + c->dim * ffn);
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
    if (c->n_expert)  // the decode roofline counts the active weights, not all of them
        printf("mixture of experts: %d of %d experts a token: %.1f MB of weights read per token (active), "
               "%.1f MB in all\n", c->n_expert_used, c->n_expert, model_weight_bytes(m) / 1e6,
               model_total_weight_bytes(m) / 1e6);
    const long long huge = model_huge_page_bytes(m);
    if (huge >= 0)  // 4 KiB pages cost the CPU's decode a TLB miss every 4 KiB (mapping.c)
        printf("model file: %.1f MB, %.0f%% of it mapped in 2 MiB pages\n", model_gguf(m)->size / 1e6,
               100.0 * (double)huge / (double)model_gguf(m)->size);
    if (model_x8_bytes(m))
        printf("weights read from copies with 8 rows interleaved (the %s kernels' layout): %.1f MB\n",
               q_simd_name(), model_x8_bytes(m) / 1e6);
    double bw, peak, bw_after = 0;  // bytes/s the decode is measured against; GEMM FLOP/s (device only)
    if (model_roofline(m, &bw, &peak, err)) die("%s", err);
    const int device = model_on_device(m);
    // warm-up, untimed: CPU: fault the mmapped weights in and start the
    // threads; device: the whole prefill (scratch, GEMM algorithms) and two
    // decode steps (the second records the step's graph)
    if (model_forward(m, ids, device ? P : P < 8 ? P : 8, 0, logits, err)) die("%s", err);
    for (int i = 0; device && i < 2; i++)
        if (model_forward(m, &ids[i], 1, 0, logits, err)) die("%s", err);
    model_rewind(m, 0);
    double t = now_sec();
    if (model_forward(m, ids, P, 0, logits, err)) die("%s", err);
    double t_pre = now_sec() - t;
    t = now_sec();
    const sample_cfg greedy = {0};  // a decode step as generation runs it: only the id comes back
    for (int i = 0; i < N; i++) {
        int32_t id = ids[i % P], next;
        if (model_forward_sample(m, &id, 1, &greedy, 0.0, &next, logits, err) < 0) die("%s", err);
    }
    double t_dec = now_sec() - t;
    // the host's bandwidth changes with what else runs: measured again right after
    if (!device && model_roofline(m, &bw_after, &peak, err)) die("%s", err);
    // bytes one decode step reads: the weights, plus K and V of every earlier position
    double step_bytes = (double)model_weight_bytes(m) + (double)model_kv_bytes(m, 1) * (P + N / 2.0);
    double pre_flops = layer_flops(c) * P + 2.0 * c->dim * c->n_vocab;
    if (device && !(bw > 0)) {  // the SIMT emulation: nothing to measure against
        printf("roofline: skipped (%s has no device limits)\n", model_backend_desc(m));
        printf("prefill %d tokens: %.1f tok/s (%.1f ms)\n", P, P / t_pre, t_pre * 1e3);
    } else if (device) {
        printf("device memory bandwidth (measured, device-to-device copy): %.1f GB/s\n", bw / 1e9);
        printf("bf16 GEMM peak (measured, cuBLAS): %.1f TFLOP/s\n", peak / 1e12);
        printf("prefill %d tokens: %.1f tok/s (%.1f ms), %.2f TFLOP/s = %.0f%% of measured GEMM peak\n", P,
               P / t_pre, t_pre * 1e3, pre_flops / t_pre / 1e12, 100.0 * pre_flops / t_pre / peak);
    } else {
        printf("memory read bandwidth (measured): %.1f GB/s before the runs, %.1f GB/s after\n", bw / 1e9,
               bw_after / 1e9);
        printf("prefill %d tokens: %.1f tok/s (%.1f ms), %.1f GFLOP/s\n", P, P / t_pre, t_pre * 1e3,
               pre_flops / t_pre / 1e9);
    }
    const double dec_bw = step_bytes * N / t_dec;
    printf("decode %d tokens: %.1f tok/s = %.2f ms/token, %.1f MB/token, %.1f GB/s", N, N / t_dec,
           t_dec * 1e3 / N, step_bytes / 1e6, dec_bw / 1e9);
    if (bw_after > 0)
        printf(" = %.0f%% / %.0f%% of the bandwidth before / after", 100.0 * dec_bw / bw, 100.0 * dec_bw / bw_after);
    else if (bw > 0)
        printf(" = %.0f%% of measured bandwidth", 100.0 * dec_bw / bw);
    printf("\n");
    if (o.stats_json) {  // the same numbers for scripts (tests/bench_peer.py)
        FILE *f = fopen(o.stats_json, "w");
        if (!f) die("cannot write '%s': %s", o.stats_json, strerror(errno));
        fprintf(f,
                "{\"prompt_tokens\": %d, \"prefill_tok_s\": %.3f, \"generated_tokens\": %d, "
                "\"decode_tok_s\": %.3f, \"decode_bytes_per_token\": %.0f, \"bandwidth_before\": %.0f, "
                "\"bandwidth_after\": %.0f, \"gemm_peak_flops\": %.0f, \"weight_bytes_active\": %zu, "
                "\"weight_bytes_total\": %zu, \"backend\": \"%s\"}\n",
                P, P / t_pre, N, N / t_dec, step_bytes, bw, bw_after, peak, model_weight_bytes(m),
                model_total_weight_bytes(m), model_backend_desc(m));
        if (fclose(f)) die("cannot write '%s': %s", o.stats_json, strerror(errno));
    }
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
    char *text = read_prompt(&o, 0, 0, &len);
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

// ---- list -------------------------------------------------------------------

// quill list [--json]: the models the user already has, by the names -m takes.
static int cmd_list(int argc, char **argv) {
    int json = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) usage(stdout), exit(0);
        else die("usage: quill list [--json] (not '%s')", argv[i]);
    }
    char *msg;
    int n = mp_list(stdout, json, &msg);
    if (n < 0) die("%s", msg ? msg : "out of memory");
    if (n == 0) fprintf(stderr, "quill: %s\n", msg ? msg : "no models found");
    free(msg);
    if (fflush(stdout) && errno != EPIPE) die("cannot write the list: %s", strerror(errno));
    return 0;
}

// ---- template ---------------------------------------------------------------------

// quill template: a conversation (OpenAI-style JSON from the file named, or
// stdin) rendered by the chat template, byte for byte on stdout. With -m only
// the metadata and vocabulary are read.
static int cmd_template(int argc, char **argv) {
    options o;
    parse_options(&o, argc, argv, 2);
    if (!o.model && !o.chat_template)
        die("usage: quill template [-m MODEL.gguf | --chat-template NAME|FILE] [CONVERSATION.json]");
    size_t len;
    char *conv = o.prompt ? read_file(o.prompt, 0, &len) : o.file ? read_file(o.file, 0, &len)
               : !isatty(STDIN_FILENO) ? read_all(stdin, "stdin", 0, &len) : NULL;
    if (!conv) die("quill template: give the conversation as a JSON file or on stdin");
    gguf_file f;
    tokenizer *tok = NULL;
    char err[ERR_LEN];
    if (o.model && gguf_open(&f, o.model, err)) die("%s", err);
    if (o.model && tok_load(&tok, &f, err)) die("%s: %s", o.model, err);
    chat_template t;
    int fallback;
    if (tpl_load(&t, o.model ? &f : NULL, tok, o.chat_template, &fallback, err)) die("%s", err);
    if (fallback && !o.quiet) fprintf(stderr, "quill: the model has no chat template; using the plain format\n");
    char *out;
    size_t n;
    if (tpl_render_text(&t, conv, len, o.tvars, !o.no_gen_prompt, &out, &n, err)) die("%s", err);
    if ((fwrite(out, 1, n, stdout) != n || fflush(stdout)) && errno != EPIPE)
        die("cannot write the output: %s", strerror(errno));
    free(out);
    tpl_free(&t);
    if (o.model) gguf_close(&f);
    tok_free(tok);
    free(conv);
    free((char *)o.prompt);
    json_decref(o.tvars);
    return 0;
}

// ---- chat ---------------------------------------------------------------------

static int cmd_chat(const options *o) {
    if (o->prompt || o->file) die("a chat takes its messages from stdin; drop the prompt (or -f) or -i");
    if (o->stats_json || o->prompt_cache || o->echo)
        die("chat does not take %s", o->stats_json ? "--stats-json (/stats shows the numbers)" :
            o->prompt_cache ? "--prompt-cache (use /save FILE and /load FILE)" : "--echo");
    model *m;
    tokenizer *tok;
    load(o, &m, &tok);
    char err[ERR_LEN];
    grammar *g = grammar_opt(o);
    chat_opts co = {.model_path = o->model, .template_name = o->chat_template, .vars = o->tvars, .system = o->system,
                    .context_shift = !o->context_stop, .n_predict = o->n_predict, .quiet = o->quiet,
                    .stops = o->stops, .n_stops = o->n_stops, .sp = o->sp, .grammar = g,
                    .reasoning = o->reasoning < 0 ? REASON_SHOW : o->reasoning};
    sig_install();
    if (chat_run(m, tok, &co, err)) die("%s", err);
    grammar_free(g);
    tok_free(tok);
    model_free(m);
    return *sig_flag() == SIGTERM ? signal_status(o->quiet) : 0;  // Ctrl-C at the prompt ends with 0
}

// ---- batch ------------------------------------------------------------------

// A byte count: 1048576, 512K, 300M, 2G (powers of 1024).
static size_t parse_size(const char *opt, const char *v) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    const char *units = "KMGT";
    const char *u = *end ? strchr(units, *end) : NULL;
    double scale = u ? (double)(1ull << (10 * (u - units + 1))) : 1;
    if (errno || end == v || (*end && (!u || end[1])) || !(x > 0) || x * scale > 1e15)
        die("option %s: expected a size such as 512M or 2G, got '%s'", opt, v);
    return (size_t)(x * scale);
}

static FILE *open_input(const char *path) {
    if (!strcmp(path, "-")) return stdin;
    FILE *f = fopen(path, "r");
    if (!f) die("cannot open '%s': %s", path, strerror(errno));
    return f;
}

// The output's descriptor: stdout, or FILE replaced (or, resuming, appended
// to and read back), locked so that a second run on the same file fails
// rather than interleaving lines (where the file system has locks).
static int open_output(const char *path, int resume) {
    if (resume && !strcmp(path, "-")) die("--resume needs -o FILE: the results already written are read from it");
    if (!strcmp(path, "-")) return STDOUT_FILENO;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | (resume ? O_APPEND : 0), 0666);
    if (fd < 0) die("cannot open '%s': %s", path, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) && errno == EWOULDBLOCK)
        die("'%s' is being written by another process (another quill batch on the same output?)", path);
    struct stat st;
    if (!resume && !fstat(fd, &st) && S_ISREG(st.st_mode) && ftruncate(fd, 0))
        die("cannot write '%s': %s", path, strerror(errno));
    return fd;
}

// --shard I/N; without it, a Slurm array job's task picks its shard
// (SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN, in steps of
// SLURM_ARRAY_TASK_STEP, of SLURM_ARRAY_TASK_COUNT), said on stderr.
static void pick_shard(batch_opts *bo, const char *arg, int quiet) {
    if (arg) {
        int i, n, len = 0;
        if (sscanf(arg, "%d/%d%n", &i, &n, &len) != 2 || arg[len] || n < 1 || i < 0 || i >= n)
            die("option --shard: expected I/N with 0 <= I < N, got '%s'", arg);
        bo->shard = i, bo->n_shards = n;
        return;
    }
    const char *id = getenv("SLURM_ARRAY_TASK_ID"), *count = getenv("SLURM_ARRAY_TASK_COUNT");
    if (!id || !count) return;
    const char *min = getenv("SLURM_ARRAY_TASK_MIN"), *max = getenv("SLURM_ARRAY_TASK_MAX"),
               *step = getenv("SLURM_ARRAY_TASK_STEP");
    long t = parse_int("SLURM_ARRAY_TASK_ID", id, 0, INT_MAX), c = parse_int("SLURM_ARRAY_TASK_COUNT", count, 1, INT_MAX);
    long lo = min ? parse_int("SLURM_ARRAY_TASK_MIN", min, 0, INT_MAX) : 0;
    long st = step ? parse_int("SLURM_ARRAY_TASK_STEP", step, 1, INT_MAX) : 1;
    long hi = max ? parse_int("SLURM_ARRAY_TASK_MAX", max, 0, INT_MAX) : lo + (c - 1) * st;
    if (t < lo || (t - lo) % st || (t - lo) / st >= c || hi != lo + (c - 1) * st)
        die("this Slurm array (tasks %s..%s step %s, %s of them, this one %s) is not a range of task ids: "
            "give --shard I/N", min ? min : "0", max ? max : "?", step ? step : "1", count, id);
    bo->shard = (int)((t - lo) / st), bo->n_shards = (int)c;
    if (!quiet)
        fprintf(stderr, "quill batch: shard %d/%d from the Slurm array (SLURM_ARRAY_TASK_ID=%s, TASK_MIN=%ld, "
                        "TASK_COUNT=%s)\n", bo->shard, bo->n_shards, id, lo, count);
}

static void print_batch_stats(const options *o, const batch_opts *bo, const batch_summary *s, model *m) {
    const double tps = s->wall > 0 ? s->gen_tokens / s->wall : 0;
    const double ttft = s->n_records ? s->sum_ttft * 1e3 / (s->n_records - s->n_errors > 0 ? s->n_records - s->n_errors : 1) : 0;
    const double tpot = s->n_tpot ? s->sum_tpot * 1e3 / s->n_tpot : 0;
    static const char *const fmt[] = {"quill", "quill", "lines", "openai"};
    if (!o->quiet && s->template_fallback)
        fprintf(stderr, "quill batch: warning: the model has no chat template; chat requests used a plain "
                        "\"User:/Assistant:\" format (--chat-template NAME|FILE picks another)\n");
    if (!o->quiet && bo->resume)
        fprintf(stderr, "quill batch: resumed: %ld records were in the output already%s\n", s->resumed,
                s->torn ? " (its partial last line was cut off and is run again)" : "");
    if (!o->quiet)
        fprintf(stderr,
                "quill batch: %d sequences (%d errors) | prompt %ld tok (%ld computed, %ld shared) | "
                "generated %ld tok in %.2f s = %.1f tok/s | mean TTFT %.1f ms, TPOT %.2f ms | %s\n",
                s->n_records, s->n_errors, s->prompt_tokens, s->prefill_tokens, s->shared_tokens, s->gen_tokens,
                s->wall, tps, ttft, tpot, model_backend_desc(m));
    if (!o->stats_json) return;
    membuf mb;
    FILE *f = stats_open(&mb);
    fprintf(f,
            "{\"sequences\": %d, \"errors\": %d, \"prompt_tokens\": %ld, \"prefill_tokens\": %ld, "
            "\"shared_prefix_tokens\": %ld, \"generated_tokens\": %ld, \"steps\": %ld, \"wall_s\": %.3f, "
            "\"tok_s\": %.3f, \"mean_ttft_ms\": %.3f, \"mean_tpot_ms\": %.3f, \"backend\": \"%s\", "
            "\"format\": \"%s\", \"shard\": %d, \"shards\": %d, \"other_shards\": %ld, \"resumed\": %ld, "
            "\"torn\": %s, \"interrupted\": %s}\n",
            s->n_records, s->n_errors, s->prompt_tokens, s->prefill_tokens, s->shared_tokens, s->gen_tokens,
            s->steps, s->wall, tps, ttft, tpot, model_backend_desc(m), fmt[s->format], bo->shard,
            bo->n_shards ? bo->n_shards : 1, s->other_shards, s->resumed, s->torn ? "true" : "false",
            s->interrupted ? "true" : "false");
    stats_write(o->stats_json, f, &mb);
}

// "model" in OpenAI responses: -m as given, a path reduced to its file name.
static const char *model_display_name(const char *arg) {
    const char *slash = strrchr(arg, '/');
    return slash && !access(arg, F_OK) ? slash + 1 : arg;
}

static batch_format parse_format(const char *v) {
    if (!strcmp(v, "openai")) return BATCH_OPENAI;
    if (!strcmp(v, "quill")) return BATCH_QUILL;
    if (!strcmp(v, "lines")) return BATCH_LINES;
    die("option --format: expected openai, quill or lines, got '%s'", v);
}

// quill batch: batch's own options first; the rest are generation options.
static int cmd_batch(int argc, char **argv) {
    batch_opts bo = {.parallel = 4, .chunk = 256};
    const char *in_path = "-", *out_path = "-", *shard = NULL;
    size_t kv_mem = 0;
    char **rest = calloc((size_t)argc + 1, sizeof *rest);
    int n_rest = 0;
    if (!rest) die("out of memory");
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
#define BARG() (i + 1 < argc ? argv[++i] : (die("option %s needs a value", a), ""))
        if (!strcmp(a, "-i") || !strcmp(a, "--input")) in_path = BARG();
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out_path = BARG();
        else if (!strcmp(a, "--lines")) bo.format = BATCH_LINES;
        else if (!strcmp(a, "--format")) bo.format = parse_format(BARG());
        else if (!strcmp(a, "--shard")) shard = BARG();
        else if (!strcmp(a, "--resume")) bo.resume = 1;
        else if (!strcmp(a, "--unordered")) bo.unordered = 1;
        else if (!strcmp(a, "--parallel")) bo.parallel = (int)parse_int(a, BARG(), 1, 1024);
        else if (!strcmp(a, "--chunk")) {
            bo.chunk = (int)parse_int(a, BARG(), PREFILL_TILE, 1 << 16);
            if (bo.chunk % PREFILL_TILE) die("option --chunk: %d is not a multiple of %d", bo.chunk, PREFILL_TILE);
        } else if (!strcmp(a, "--kv-mem")) kv_mem = parse_size(a, BARG());
        else rest[n_rest++] = argv[i];
#undef BARG
    }
    options o;
    char err[ERR_LEN];
    parse_options(&o, n_rest, rest, 0);
    free(rest);
    if (o.prompt) die("quill batch reads prompts from -i FILE or stdin, not the arguments ('%s')", o.prompt);
    if (o.draft || o.lookup || o.prompt_cache || o.file || o.echo)
        die("batch mode does not take %s", o.draft ? "--draft" : o.lookup ? "--lookup" : o.prompt_cache ?
            "--prompt-cache" : o.file ? "-f (use -i FILE)" : "--echo");
    bo.sp = o.sp;
    bo.n_predict = o.n_predict;
    bo.stops = o.stops;
    bo.n_stops = o.n_stops;
    bo.no_bos = o.no_bos;
    bo.special = o.special;
    bo.template_name = o.chat_template;
    bo.vars = o.tvars;
    bo.model_name = model_display_name(o.model ? o.model : "quill");
    bo.output_name = out_path;
    bo.unordered |= bo.resume;  // a resumed output has no one order: write each result as it finishes
    bo.progress = !o.quiet && isatty(STDERR_FILENO);
    grammar *g = grammar_opt(&o);
    bo.grammar = g;
    bo.logprobs = o.logprobs;
    bo.reasoning = o.reasoning != REASON_OFF;
    if (o.out_format != OUT_TEXT && o.logprobs < 0) die("quill batch writes JSON Lines already (--output-format is for single runs)");
    pick_shard(&bo, shard, o.quiet);
    o.n_seqs = batch_model_seqs(&bo);
    o.kv_mem = kv_mem;
    FILE *in = open_input(in_path);
    int out = open_output(out_path, bo.resume);
    model *m;
    tokenizer *tok;
    load(&o, &m, &tok);
    batch_summary sum;
    sig_install();
    bo.stop = sig_flag();
    int rc = batch_run(m, tok, &bo, in, out, &sum, err);
    print_batch_stats(&o, &bo, &sum, m);
    if (rc) die("%s", err);
    if (out != STDOUT_FILENO && close(out)) die("cannot write '%s': %s", out_path, strerror(errno));
    if (in != stdin) fclose(in);
    grammar_free(g);
    tok_free(tok);
    model_free(m);
    json_decref(o.tvars);
    if (sum.interrupted) {
        if (!o.quiet)
            fprintf(stderr, "quill batch: %d records written before the signal; the rest were not%s\n", sum.n_records,
                    out != STDOUT_FILENO ? " (run again with --resume to finish)" : "");
        return signal_status(o.quiet);
    }
    if (sum.n_errors) die("%d of %d input records failed (see their \"error\" fields)", sum.n_errors, sum.n_records);
    return 0;
}

int main(int argc, char **argv) {
    signal(SIGPIPE, SIG_IGN);  // a closed stdout shows up as a write error: end quietly
    if (argc >= 2 && !strcmp(argv[1], "info")) return cmd_info(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "ppl")) return cmd_ppl(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "bench")) return cmd_bench(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "tokenize")) return cmd_tokenize(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "batch")) return cmd_batch(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "list")) return cmd_list(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "template")) return cmd_template(argc, argv);
    options o;
    parse_options(&o, argc, argv, 1);
    int chat = o.interactive || (!o.prompt && !o.file && isatty(STDIN_FILENO));
    if (chat && (o.draft || o.lookup)) die("--draft and --lookup work in one-shot generation, not yet in chat");
    if (!chat && o.tvars && o.reasoning != REASON_OFF)
        die("--var and --think are for chats and quill template (a prompt is used as it is)");
    int rc = chat ? cmd_chat(&o) : cmd_generate(&o);
    free((char *)o.prompt);
    json_decref(o.tvars);
    return rc;
}
