// tests/fuzz/fuzz_batch.c — `quill batch` input (quill's JSON Lines, OpenAI
// Batch requests, or --lines) through batch_run as the command runs it, on the tiny model
// tests/fuzz/gguf/seed/tiny-llama-q8_0.gguf (a 32-position context bounds
// every record's generation, so an input of a few KB runs in milliseconds).
//
// Input: byte 0 holds flags (bit 0 --lines, bit 1 --unordered, bit 2
// --special, bit 3 --no-bos, bits 4-5 --parallel 1..4, bits 6-7: 0 the
// format the first record says, 1 --format openai, 2 --format quill, 3 the
// first record's format and --shard 1/2); the rest is the input stream.
// Besides sanitizer findings it checks batch.h's promise that a run that
// reaches the end of its input writes one JSON object per record, error
// records included: as many output lines as non-blank input lines, less
// those left to the other shard.
#include <jansson.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "batch.h"
#include "fuzz.h"
#include "util.h"

#define MODEL "tests/fuzz/gguf/seed/tiny-llama-q8_0.gguf"

static tokenizer *TOK;  // loaded once; the model is loaded per input (batch_run uses it up)

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    gguf_file f;
    char err[ERR_LEN];
    if (gguf_open(&f, MODEL, err) || tok_load(&TOK, &f, err)) fuzz_die("%s", err);
    gguf_close(&f);
    return 0;
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

// Non-blank lines of in[0..n) (the last one may lack its newline).
static int count_records(const char *in, size_t n) {
    int count = 0;
    for (size_t start = 0; start < n;) {
        const char *nl = memchr(in + start, '\n', n - start);
        size_t end = nl ? (size_t)(nl - in) : n;
        count += !blank(in + start, end - start);
        start = end + 1;
    }
    return count;
}

// Every line of out[0..n) is a JSON object with an "id"; returns their count.
// (OpenAI's lines have one too: "batch_req_...".)
static int check_output(const char *out, size_t n) {
    int lines = 0;
    for (size_t start = 0; start < n; lines++) {
        const char *nl = memchr(out + start, '\n', n - start);
        if (!nl) {
            fprintf(stderr, "an output line lacks its newline\n");
            abort();
        }
        json_t *o = json_loadb(out + start, (size_t)(nl - out) - start, JSON_ALLOW_NUL, NULL);  // a token may be "\u0000"
        if (!json_is_object(o) || !json_object_get(o, "id")) {
            fprintf(stderr, "output line %d is not a JSON object with an id: %.*s\n", lines + 1,
                    (int)((size_t)(nl - out) - start), out + start);
            abort();
        }
        json_decref(o);
        start = (size_t)(nl - out) + 1;
    }
    return lines;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const batch_format formats[] = {BATCH_AUTO, BATCH_OPENAI, BATCH_QUILL, BATCH_AUTO};
    const int mode = data[0] >> 6;
    const batch_opts o = {.sp = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .repeat_penalty = 1.0f,
                                 .repeat_last_n = 64, .seed = 1},
                          .n_predict = 4, .format = data[0] & 1 ? BATCH_LINES : formats[mode],
                          .unordered = data[0] >> 1 & 1, .special = data[0] >> 2 & 1, .no_bos = data[0] >> 3 & 1,
                          .parallel = 1 + (data[0] >> 4 & 3), .chunk = PREFILL_TILE,
                          .shard = mode == 3, .n_shards = mode == 3 ? 2 : 0, .model_name = "tiny"};
    const model_opts mo = {.n_threads = 1, .n_ctx = 32, .n_seqs = batch_model_seqs(&o), .mem_limit = FUZZ_MEM_LIMIT};
    model *m;
    char err[ERR_LEN], *out = NULL;
    size_t out_len = 0;
    if (model_load(&m, MODEL, &mo, err)) fuzz_die("%s", err);
    FILE *in = size > 1 ? fmemopen((void *)(data + 1), size - 1, "r") : fopen("/dev/null", "r");
    int outfd = memfd_create("out", MFD_CLOEXEC);
    if (!in || outfd < 0) fuzz_die("cannot open the streams");
    batch_summary sum;
    int rc = batch_run(m, TOK, &o, in, outfd, &sum, err);
    fclose(in);
    out_len = (size_t)lseek(outfd, 0, SEEK_END);
    if (!(out = malloc(out_len + 1)) || pread(outfd, out, out_len, 0) != (ssize_t)out_len) fuzz_die("cannot read the output");
    close(outfd);
    const int want = count_records((const char *)data + 1, size - 1) - (int)sum.other_shards;
    const int got = check_output(out, out_len);
    if (rc == 0 && (got != want || sum.n_records != want)) {
        fprintf(stderr, "%d input records gave %d output lines (summary: %d)\n", want, got, sum.n_records);
        abort();
    }
    free(out);
    model_free(m);
    return 0;
}
