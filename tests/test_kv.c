// tests/test_kv.c — the q8 KV cache (--kv q8) end to end on the CPU backend.
//
// On every shared synthetic model (head size 64), the logits of a 200-token
// prompt and of 16 decode steps after it, with K and V kept as q8, stay close
// to those of the fp16 cache that the goldens check against llama.cpp: a
// normalized squared error far below that between the logits of neighbouring
// positions (the scale of a wrong answer), and the same argmax almost
// everywhere (random weights make near-ties common). The pool takes
// kv_row_bytes per row. The attention op itself is checked against float64
// in test_backend_ops (QUILL_TEST_DEVICE=cpu).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "model.h"
#include "util.h"

enum { N_PROMPT = 200, N_DECODE = 16, N_POS = N_PROMPT + N_DECODE };

static model *load(const char *path, int kv_type) {
    model_opts o = {.ops = &cpu_backend, .n_threads = 2, .n_ctx = 512, .kv_type = kv_type};
    char err[ERR_LEN];
    model *m;
    if (model_load(&m, path, &o, err)) {
        fprintf(stderr, "test_kv: %s\n", err);
        exit(2);
    }
    return m;
}

// Logits [N_POS, n_vocab] for ids: one prompt pass, then one decode step per token.
static float *run(model *m, const int32_t *ids, int nv) {
    char err[ERR_LEN];
    float *l = malloc(sizeof(float) * N_POS * nv);
    if (!l) exit(2);
    int rc = model_forward(m, ids, N_PROMPT, 1, l, err);
    for (int i = N_PROMPT; i < N_POS && !rc; i++) rc = model_forward(m, ids + i, 1, 0, l + (size_t)i * nv, err);
    if (rc) fail("forward: %s", err);
    return l;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

static void test_model(const char *path) {
    model *f = load(path, KV_F16), *q = load(path, KV_Q8);
    const model_config *c = model_cfg(f);
    const int nv = c->n_vocab, kv_dim = c->n_kv_heads * c->head_dim;
    const size_t want_row = (size_t)kv_dim + kv_dim / 16;  // int8 values + an fp16 scale per 32
    CHECK(model_kv_bytes(q, 1) == 2 * (size_t)c->n_layers * ((want_row + 15) / 16 * 16) &&
              model_kv_bytes(f, 1) == 2 * (size_t)c->n_layers * 2 * kv_dim,
          "%s: KV bytes per position: q8 %zu, f16 %zu", path, model_kv_bytes(q, 1), model_kv_bytes(f, 1));
    int32_t ids[N_POS];
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < N_POS; i++) {
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((r >> 33) % (uint64_t)nv);
    }
    float *lf = run(f, ids, nv), *lq = run(q, ids, nv);
    double err = 0, sig = 0, near = 0;
    int agree = 0;
    for (int i = 0; i < N_POS; i++) {
        const float *a = lf + (size_t)i * nv, *b = lq + (size_t)i * nv;
        for (int v = 0; v < nv; v++) {
            err += ((double)a[v] - b[v]) * ((double)a[v] - b[v]);
            sig += (double)a[v] * a[v];
            if (i) near += ((double)a[v] - a[v - nv]) * ((double)a[v] - a[v - nv]);
        }
        agree += argmax(a, nv) == argmax(b, nv);
    }
    printf("%s: q8 vs f16 KV: logits nmse %.3g (neighbouring positions: %.3g), argmax agrees at %d of %d\n",
           path, err / sig, near / sig, agree, N_POS);
    CHECK(err / sig < 1e-3 && err * 1000 < near, "%s: q8 KV logits nmse %.3g", path, err / sig);
    CHECK(agree >= N_POS * 85 / 100, "%s: q8 KV argmax agrees at only %d of %d positions", path, agree, N_POS);
    free(lf), free(lq);
    model_free(f), model_free(q);
}

// The paged cache's bookkeeping where a sliding-window cache forgets the
// start of a sequence (kvcache.h's kv_forget, kv_start_at): freed blocks,
// table entries, floors, and a sequence sharing one that forgot its start.
static void test_forget(void) {
    char err[ERR_LEN];
    backend *be = NULL;
    kvcache kv;
    if (cpu_backend.init(&be, 1, err) || kv_init(&kv, &cpu_backend, be, 1, 32, KV_F16, 256, 2, 8, err)) {
        fail("kv_init: %s", err);
        return;
    }
    const int s = kv_seq_new(&kv);
    CHECK(kv_reserve(&kv, s, 100, err) == 0 && kv.n_free == 1, "100 positions take 7 of 8 blocks");
    kv.seqs[s].len = 100;
    kv_forget(&kv, s, 40);
    CHECK(kv.n_free == 3 && kv.seqs[s].floor == 32 && kv.seqs[s].table[0] == -1 && kv.seqs[s].table[1] == -1 &&
              kv.seqs[s].table[2] >= 0,
          "forgetting below 40 returns the 2 blocks of positions 0..31 (floor %d, %d free)", kv.seqs[s].floor,
          kv.n_free);
    kv_forget(&kv, s, 20);
    CHECK(kv.n_free == 3 && kv.seqs[s].floor == 32, "forgetting less than before changes nothing");
    const int d = kv_seq_new(&kv);
    kv_seq_share(&kv, d, s, 90);
    CHECK(kv.n_free == 3 && kv.seqs[d].floor == 32 && kv.seqs[d].table[0] == -1 && kv.ref[kv.seqs[s].table[2]] == 2,
          "a sequence sharing 90 positions shares the held blocks and the floor");
    kv_truncate(&kv, s, 0);
    CHECK(kv.n_free == 4 && kv.seqs[s].floor == 0, "truncating to 0 returns only the unshared block (%d free)",
          kv.n_free);
    kv_seq_free(&kv, d);
    CHECK(kv.n_free == 8, "every block is free again (%d)", kv.n_free);
    kv_start_at(&kv, s, 70);
    CHECK(kv.seqs[s].len == 64 && kv.seqs[s].floor == 64 && kv.n_free == 8, "starting at 70 starts at block 4");
    CHECK(kv_reserve(&kv, s, 10, err) == 0 && kv.n_free == 7 && kv.seqs[s].table[4] >= 0,
          "positions 64..73 take one block");
    kv_free(&kv);
    cpu_backend.free(be);
}

int main(void) {
    test_forget();
    const char *shared = getenv("SHARED") ? getenv("SHARED") : "../shared";
    const char *names[] = {"synth-llama-Q8_0", "synth-llama-Q4_0", "synth-llama-Q4_K_M", "synth-llama-Q5_K_M",
                           "synth-llama-Q6_K", "synth-qwen2-Q8_0", "synth-qwen3-Q4_K_M"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/models/gguf/%s.gguf", shared, names[i]);
        test_model(path);
    }
    // a head size that is not a multiple of 32: a clear error, not a wrong cache
    char path[600], err[ERR_LEN];
    snprintf(path, sizeof path, "%s/models/gguf/stories260K.gguf", shared);
    model_opts o = {.ops = &cpu_backend, .n_threads = 1, .kv_type = KV_Q8};
    model *m = NULL;
    CHECK(model_load(&m, path, &o, err) < 0 && strstr(err, "multiple of 32"), "stories260K (head size 8) with a q8 "
          "KV cache: '%s'", m ? "loaded" : err);
    model_free(m);
    printf("test_kv: %s\n", n_fail ? "FAILED" : "all passed");
    return n_fail != 0;
}
