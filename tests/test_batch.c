// tests/test_batch.c — several sequences in one forward pass over the paged
// KV cache, against the single-sequence path (which the golden tests hold to
// llama.cpp's outputs).
//
//   build/tests/test_batch    (from the repo root; SHARED names the shared data)
//
// Checked: interleaved sequences in one pass give each sequence's own logits;
// a sequence sharing another's prefix (copy-on-write at a partly filled
// block) continues exactly like one that prefilled the prefix itself, and
// the sharing leaves the source untouched; rewinding frees blocks; a full
// pool is an error that changes nothing.
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "util.h"
#include "check.h"


static model *load(const char *path, int n_seqs, size_t kv_mem) {
    char err[ERR_LEN];
    model *m;
    model_opts o = {.ops = &cpu_backend, .n_threads = 2, .n_ctx = 256, .n_seqs = n_seqs, .kv_mem = kv_mem};
    if (model_load(&m, path, &o, err)) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    return m;
}

// Largest |a - b| relative to the largest |b| over n values.
static double rel_diff(const float *a, const float *b, int n) {
    double d = 0, s = 1e-30;
    for (int i = 0; i < n; i++) {
        if (fabs(a[i] - b[i]) > d) d = fabs(a[i] - b[i]);
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return d / s;
}

static void forward_ok(model *m, const model_tok *t, int n, float *logits) {
    char err[ERR_LEN];
    if (model_forward_batch(m, t, n, 0, logits, err)) fail("forward: %s", err);
}

// Logits of every position of ids, one sequence alone, one token a pass
// (how decode runs: what a non-prompt token of a batched pass must equal).
static float *reference(model *ref, const int32_t *ids, int n) {
    char err[ERR_LEN];
    const int nv = model_cfg(ref)->n_vocab;
    float *out = malloc(sizeof(float) * nv * n);
    model_rewind(ref, 0);
    for (int i = 0; i < n; i++)
        if (!out || model_forward(ref, ids + i, 1, 0, out + (size_t)i * nv, err))
            fail("reference forward: %s", out ? err : "oom");
    return out;
}

// Bit for bit: the batched rows must round exactly as lone ones.
static void compare(const char *what, const float *got, const float *want, int nv) {
    if (memcmp(got, want, sizeof(float) * nv))
        fail("%s: logits differ by %.3g (relative) from a lone pass", what, rel_diff(got, want, nv));
}

static void test_model(const char *path) {
    printf("%s\n", path);
    model *ref = load(path, 1, 0), *m = load(path, 4, 0);
    const int nv = model_cfg(m)->n_vocab;
    enum { NA = 37, NB = 21 };  // A spans partly filled blocks; B is shorter
    int32_t a[NA + 1], b[NB];
    for (int i = 0; i < NA + 1; i++) a[i] = (i * 7 + 3) % nv;
    for (int i = 0; i < NB; i++) b[i] = (i * 13 + 1) % nv;
    float *ra = reference(ref, a, NA + 1), *rb = reference(ref, b, NB);

    // A and B interleaved in one pass, in sequences 1 and 2 (0 stays empty).
    int s1 = model_seq_new(m), s2 = model_seq_new(m);
    model_tok t[NA + NB];
    float *out = malloc(sizeof(float) * nv * (NA + NB));
    int n = 0;
    for (int i = 0; i < NA || i < NB; i++) {
        if (i < NA) t[n++] = (model_tok){a[i], s1, 1};
        if (i < NB) t[n++] = (model_tok){b[i], s2, 1};
    }
    forward_ok(m, t, n, out);
    for (int i = 0, ia = 0, ib = 0; i < n; i++) {
        char what[64];
        snprintf(what, sizeof what, "interleaved token %d (seq %d)", i, t[i].seq);
        compare(what, out + (size_t)i * nv, t[i].seq == s1 ? ra + (size_t)ia++ * nv : rb + (size_t)ib++ * nv,
                nv);
    }
    if (model_seq_len(m, s1) != NA || model_seq_len(m, s2) != NB) fail("sequence lengths after the pass");

    // Sequence 3 shares A's first 20 positions (block 1 partly filled), then
    // continues with A's tokens 20..NA: a copy-on-write of block 1.
    int s3 = model_seq_new(m);
    model_seq_share(m, s3, s1, 20);
    int room = model_kv_room(m);
    for (int i = 20; i < NA; i++) t[i - 20] = (model_tok){a[i], s3, 1};
    forward_ok(m, t, NA - 20, out);
    for (int i = 20; i < NA; i++) compare("shared prefix, own continuation", out + (size_t)(i - 20) * nv,
                                          ra + (size_t)i * nv, nv);
    if (room - model_kv_room(m) != 2 * 16) fail("sharing: expected 2 new blocks (1 copy + 1), used %d positions",
                                                room - model_kv_room(m));
    // The source is untouched: its next token still matches the reference.
    t[0] = (model_tok){a[NA], s1, 1};
    forward_ok(m, t, 1, out);
    compare("source after its prefix was shared and written", out, ra + (size_t)NA * nv, nv);

    // A decode step of all three live sequences at once.
    model_seq_rewind(m, s1, 10);
    model_seq_rewind(m, s3, 30);
    model_seq_rewind(m, s2, 5);
    model_tok d[3] = {{a[10], s1, 1}, {a[30], s3, 1}, {b[5], s2, 1}};
    forward_ok(m, d, 3, out);
    compare("batched decode, seq 1", out, ra + (size_t)10 * nv, nv);
    compare("batched decode, seq 3", out + nv, ra + (size_t)30 * nv, nv);
    compare("batched decode, seq 2", out + 2 * (size_t)nv, rb + (size_t)5 * nv, nv);

    // A prompt prefilled in the same pass as decode tokens of others: its
    // last logits equal a model_forward of the prompt alone, the decode rows
    // equal lone passes.
    float *rp = malloc(sizeof(float) * nv);
    char err[ERR_LEN];
    model_seq_free(m, s2);
    model_rewind(ref, 0);
    if (model_forward(ref, b, NB, 0, rp, err)) fail("reference prompt: %s", err);
    int s4 = model_seq_new(m);
    model_tok p[NB + 2];
    for (int i = 0; i < NB; i++) p[i] = (model_tok){b[i], s4, i == NB - 1};
    p[NB] = (model_tok){a[11], s1, 1};
    p[NB + 1] = (model_tok){a[31], s3, 1};
    if (model_forward_batch(m, p, NB + 2, NB, out, err)) fail("mixed pass: %s", err);
    compare("prompt prefilled beside decode tokens", out, rp, nv);
    compare("decode beside a prompt, seq 1", out + nv, ra + (size_t)11 * nv, nv);
    compare("decode beside a prompt, seq 3", out + 2 * (size_t)nv, ra + (size_t)31 * nv, nv);
    model_seq_free(m, s4);
    free(rp);

    // Freeing returns every block.
    model_seq_free(m, s1);
    model_seq_free(m, s3);
    if (model_kv_room(m) != 4 * 256) fail("blocks leaked: room %d, expected %d", model_kv_room(m), 4 * 256);
    free(out);
    free(ra);
    free(rb);
    model_free(ref);
    model_free(m);
}

// A prompt split at a multiple of PREFILL_TILE — in two calls, or with its
// first part shared from another sequence — computes exactly what one pass
// over it does.
static void test_split_prompt(const char *path) {
    model *m = load(path, 2, 0);
    const int nv = model_cfg(m)->n_vocab, n = PREFILL_TILE + 37;
    int32_t ids[PREFILL_TILE + 37];
    for (int i = 0; i < n; i++) ids[i] = (i * 11 + 5) % nv;
    float *whole = malloc(sizeof(float) * nv), *split = malloc(sizeof(float) * nv);
    char err[ERR_LEN];
    if (model_forward(m, ids, n, 0, whole, err)) fail("whole prompt: %s", err);
    model_rewind(m, 0);
    if (model_forward(m, ids, PREFILL_TILE, 0, split, err) ||
        model_forward(m, ids + PREFILL_TILE, n - PREFILL_TILE, 0, split, err))
        fail("split prompt: %s", err);
    compare("prompt split at PREFILL_TILE", split, whole, nv);
    int s1 = model_seq_new(m);
    model_seq_share(m, s1, 0, PREFILL_TILE);
    model_tok t[PREFILL_TILE + 37];
    for (int i = PREFILL_TILE; i < n; i++) t[i - PREFILL_TILE] = (model_tok){ids[i], s1, i == n - 1};
    if (model_forward_batch(m, t, n - PREFILL_TILE, n - PREFILL_TILE, split, err)) fail("shared prompt: %s", err);
    compare("prompt with a shared first tile", split, whole, nv);
    free(whole);
    free(split);
    model_free(m);
}

// A pool of 3 blocks: a 40-token sequence fits (all 3), a second one does not, and
// the failed pass leaves both sequences as they were.
static void test_pool_full(const char *path) {
    const model_config *c;
    model *probe = load(path, 1, 0);
    c = model_cfg(probe);
    size_t block = 2 * (size_t)c->n_layers * 16 * c->n_kv_heads * c->head_dim * sizeof(uint16_t);
    model_free(probe);
    model *m = load(path, 2, 3 * block);
    char err[ERR_LEN];
    float *out = malloc(sizeof(float) * model_cfg(m)->n_vocab);
    model_tok t[40];
    int s1 = model_seq_new(m);
    for (int i = 0; i < 40; i++) t[i] = (model_tok){i + 1, s1, i == 39};
    forward_ok(m, t, 40, out);
    for (int i = 0; i < 40; i++) t[i].seq = 0;
    if (!model_forward_batch(m, t, 40, 0, out, err)) fail("a pass past the pool's size succeeded");
    else if (!strstr(err, "KV cache is full")) fail("pool full: unexpected message '%s'", err);
    if (model_seq_len(m, 0) != 0 || model_seq_len(m, s1) != 40 || model_kv_room(m) != 0)
        fail("a failed pass changed the cache (len %d/%d, room %d)", model_seq_len(m, 0), model_seq_len(m, s1),
             model_kv_room(m));
    free(out);
    model_free(m);
}

int main(void) {
    const char *shared = getenv("SHARED") ? getenv("SHARED") : "../shared";
    char path[600];
    // F32 (stories260K), a quantized synthetic model with GQA and qk-norm, and an MoE.
    snprintf(path, sizeof path, "%s/models/gguf/stories260K.gguf", shared);
    test_model(path);
    test_pool_full(path);
    test_split_prompt(path);
    snprintf(path, sizeof path, "%s/models/gguf/synth-qwen3-Q4_K_M.gguf", shared);
    test_model(path);
    test_split_prompt(path);
    // a mixture of experts: rows of a pass share the experts' matrix products
    snprintf(path, sizeof path, "%s/models/gguf/synth-qwen3moe-Q4_K_M.gguf", shared);
    test_model(path);
    test_split_prompt(path);
    // gemma3: its local layers' K/V in their own cache (model.c's kv_swa) beside the global one's
    snprintf(path, sizeof path, "%s/models/gguf/synth-gemma3-Q4_K_M.gguf", shared);
    test_model(path);
    test_split_prompt(path);
    if (n_fail) {
        fprintf(stderr, "test_batch: %d failure(s)\n", n_fail);
        return 1;
    }
    printf("test_batch: all passed\n");
    return 0;
}
