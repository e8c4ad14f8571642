// tests/bench_spec.c — what speculative decoding can gain on this machine:
// measured target passes over n = 1..K+1 positions and draft steps, and the
// speed-up they imply as a function of the acceptance rate. A benchmark, not a
// test: `make build/tests/bench_spec`, then
//
//   build/tests/bench_spec TARGET.gguf [DRAFT.gguf] [-t THREADS] [-k KMAX] [-r REPS] [-c CTX] [--gpu]
//
// (--gpu: both models on the CUDA backend; default the CPU.)
//
// Each pass runs after a 64-token context, so the KV cache is not empty; the
// REPS rounds go over every size in turn, so a burst of load from other
// processes hits all sizes alike. The table uses each size's fastest pass
// (load only ever adds time); medians are printed beside it. Speed-up of K
// drafted tokens at acceptance rate a
// (each token accepted independently with probability a):
//   E(a, K) = 1 + a + ... + a^K tokens per round,
//   cost(K) = K * draft_step + target_pass(K + 1),
//   speed-up = E(a, K) * target_pass(1) / cost(K).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "spec.h"
#include "util.h"
#ifdef QUILL_CUDA
#include "kernels.h"
#endif

enum { CTX0 = 64 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Seconds of one pass of n positions after CTX0 cached ones, run as spec.c
// runs them: decode rows (no prompt tokens), every row's logits.
static double time_pass(model *m, const int32_t *ids, int n, float *logits) {
    char err[ERR_LEN];
    model_tok tok[SPEC_MAX_DRAFT + 1];
    for (int i = 0; i < n; i++) tok[i] = (model_tok){.id = ids[CTX0 + i], .seq = 0, .logits = 1};
    model_rewind(m, CTX0);
    double t0 = now_sec();
    if (model_forward_batch(m, tok, n, 0, logits, err)) {
        fprintf(stderr, "bench_spec: %s\n", err);
        exit(1);
    }
    return now_sec() - t0;
}

// t[reps]: the fastest into *min, the median into *med.
static void summarize(double *t, int reps, double *min, double *med) {
    qsort(t, reps, sizeof *t, cmp_double);
    *min = t[0];
    *med = t[reps / 2];
}

static model *load(const char *path, const backend_ops *ops, int threads, int ctx) {
    char err[ERR_LEN];
    model *m;
    model_opts mo = {.ops = ops, .n_threads = threads, .n_ctx = ctx};
    if (model_load(&m, path, &mo, err)) {
        fprintf(stderr, "bench_spec: %s\n", err);
        exit(1);
    }
    return m;
}

// Prefills CTX0 pseudo-random tokens (and faults the weights in).
static void warm(model *m, const int32_t *ids, float *logits) {
    char err[ERR_LEN];
    model_rewind(m, 0);
    if (model_forward(m, ids, CTX0, 0, logits, err)) {
        fprintf(stderr, "bench_spec: %s\n", err);
        exit(1);
    }
}

int main(int argc, char **argv) {
    const char *tpath = NULL, *dpath = NULL;
    int threads = 0, kmax = 8, reps = 5, ctx = 256;
    const backend_ops *ops = &cpu_backend;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-k") && i + 1 < argc) kmax = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) ctx = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--gpu")) {
#ifdef QUILL_CUDA
            char why[ERR_LEN];
            if (cuda_device_count(why) <= 0) {
                fprintf(stderr, "bench_spec: --gpu: %s\n", why);
                return 1;
            }
            ops = &cuda_backend;
#else
            fprintf(stderr, "bench_spec: --gpu: built without CUDA\n");
            return 1;
#endif
        }
        else if (!tpath) tpath = argv[i];
        else dpath = argv[i];
    }
    if (!tpath || kmax < 1 || kmax > SPEC_MAX_DRAFT || reps < 1 || ctx < CTX0 + kmax + 1) {
        fprintf(stderr, "usage: bench_spec TARGET.gguf [DRAFT.gguf] [-t N] [-k KMAX<=%d] [-r REPS] [-c CTX] [--gpu]\n",
                SPEC_MAX_DRAFT);
        return 1;
    }
    model *t = load(tpath, ops, threads, ctx), *d = dpath ? load(dpath, ops, threads, ctx) : NULL;
    const int V = model_cfg(t)->n_vocab;
    int32_t *ids = malloc(sizeof(int32_t) * (CTX0 + kmax + 1));
    float *logits = malloc(sizeof(float) * V * (kmax + 1));
    uint64_t r = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < CTX0 + kmax + 1; i++) r = r * 6364136223846793005ull + 1, ids[i] = (int32_t)((r >> 33) % V);
    printf("target %s (%s), %.0f MB of weights\n", tpath, model_backend_desc(t), model_weight_bytes(t) / 1e6);
    warm(t, ids, logits);
    if (d) warm(d, ids, logits);
    double pass[SPEC_MAX_DRAFT + 2], med[SPEC_MAX_DRAFT + 2], step = 0, step_med = 0;
    double *runs = malloc(sizeof(double) * reps * (kmax + 2));  // [n][reps]; n = 0: the draft step
    for (int r = 0; r < reps; r++)
        for (int n = d ? 0 : 1; n <= kmax + 1; n++)
            runs[n * reps + r] = n ? time_pass(t, ids, n, logits) : time_pass(d, ids, 1, logits);
    for (int n = 1; n <= kmax + 1; n++) {
        summarize(runs + n * reps, reps, &pass[n], &med[n]);
        printf("  target pass over %2d positions: %8.2f ms = %.2f x one position (median %.2f ms)\n", n,
               pass[n] * 1e3, pass[n] / pass[1], med[n] * 1e3);
    }
    if (d) {
        summarize(runs, reps, &step, &step_med);
        printf("draft %s: %.0f MB, one step %.2f ms = %.3f target passes (median %.2f ms)\n", dpath,
               model_weight_bytes(d) / 1e6, step * 1e3, step / pass[1], step_med * 1e3);
    } else {
        printf("no draft: prompt lookup, drafting ~free\n");
    }
    printf("\nspeed-up over plain decoding at acceptance rate a (best K in brackets):\n");
    for (int i = 1; i <= 9; i++) {
        double a = i / 10.0, best = 0;
        int best_k = 1;
        printf("  a = %.1f:", a);
        for (int k = 1; k <= kmax; k++) {
            double s = spec_expected_tokens(a, k) * pass[1] / (k * step + pass[k + 1]);
            if (k <= 4 || k == kmax) printf("  K=%d %.2fx", k, s);
            if (s > best) best = s, best_k = k;
        }
        printf("  [K=%d %.2fx]\n", best_k, best);
    }
    free(runs);
    free(ids);
    free(logits);
    model_free(d);
    model_free(t);
    return 0;
}
