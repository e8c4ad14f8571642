// tests/test_attention.c — the CPU backend's attention (cpu_attention.c).
//
//   build/tests/test_attention          the checks below
//   build/tests/test_attention --dump   a hash of every case's output bits (tests/t_isa.sh
//                                       compares the AVX-512, AVX2 and portable builds' dumps)
//
// Each case is one sequence of `len` cached positions (fp16 or q8 K/V in a
// paged pool whose blocks are shuffled) and a pass of its last `n` tokens.
// Checks: every output against a float64 softmax over the same stored
// values (normalized squared error), and each token's output alone (a
// one-token pass, which splits its keys into ranges over the threads) equal
// bit for bit to the same token's in the whole pass (here not split):
// the exactness contract of batching and speculative verification. Shapes
// cover head sizes 8 to 256 and not a multiple of 16, 1 to 8 query heads per
// kv head (7: tiles with unused heads), sliding windows, sinks, and lengths
// of several key ranges.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cpu_attention.h"
#include "quant.h"

typedef struct {
    int n_heads, n_kv, hd, len, n, kv_type, window, sinks;
} att_shape;

static const att_shape SHAPES[] = {
    {8, 4, 8, 60, 60, KV_F16, 0, 0},      {32, 8, 64, 700, 5, KV_F16, 0, 0},  {32, 8, 64, 700, 5, KV_Q8, 0, 0},
    {32, 8, 128, 300, 3, KV_F16, 0, 1},   {14, 2, 64, 450, 4, KV_F16, 0, 0},  {16, 16, 96, 200, 2, KV_F16, 0, 0},
    {8, 4, 256, 333, 2, KV_F16, 100, 0},  {64, 8, 64, 260, 3, KV_Q8, 0, 1},   {4, 1, 80, 129, 129, KV_F16, 0, 0},
    {16, 2, 64, 1500, 2, KV_F16, 500, 1},
};

static float gauss(rng_t *r) {
    const double u1 = ((double)(rnd(r) >> 11) + 0.5) / 9007199254740992.0, u2 = (double)(rnd(r) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

typedef struct {
    att_shape s;
    size_t row_bytes;
    uint8_t *kpool, *vpool;
    int32_t *table, *pos, *seq;
    float *q, *sinks;
    attn_cfg ac;
} att_case;

// Stores x (kv_dim values) as a pool row of the case's type.
static void store_row(const att_case *c, uint8_t *row, const float *x) {
    const int kv_dim = c->s.n_kv * c->s.hd;
    if (c->s.kv_type == KV_Q8) {
        for (int j = 0; j < kv_dim / 32; j++) ((uint16_t *)(row + kv_dim))[j] = q8_0_block(x + 32 * j, (int8_t *)row + 32 * j);
    } else {
        for (int j = 0; j < kv_dim; j++) ((uint16_t *)row)[j] = f32_to_fp16(x[j]);
    }
}

// Element e of a stored row, as the backend reads it.
static double row_value(const att_case *c, const uint8_t *row, int e) {
    const int kv_dim = c->s.n_kv * c->s.hd;
    if (c->s.kv_type == KV_Q8) return (double)((const int8_t *)row)[e] * fp16_to_f32(((const uint16_t *)(row + kv_dim))[e / 32]);
    return fp16_to_f32(((const uint16_t *)row)[e]);
}

static void build(att_case *c, const att_shape *s, rng_t *r) {
    memset(c, 0, sizeof *c);
    c->s = *s;
    const int kv_dim = s->n_kv * s->hd, nb = (s->len + KV_BLOCK - 1) / KV_BLOCK;
    c->row_bytes = kv_row_bytes(s->kv_type, kv_dim);
    c->kpool = xmalloc(c->row_bytes * (size_t)nb * KV_BLOCK);
    c->vpool = xmalloc(c->row_bytes * (size_t)nb * KV_BLOCK);
    c->table = xmalloc(sizeof(int32_t) * (size_t)nb);
    for (int b = 0; b < nb; b++) c->table[b] = b;
    for (int b = nb - 1; b > 0; b--) {  // shuffled blocks: the table, not the order, places a position
        const int o = (int)(rnd(r) % (uint64_t)(b + 1)), t = c->table[b];
        c->table[b] = c->table[o], c->table[o] = t;
    }
    float *x = xmalloc(sizeof(float) * (size_t)kv_dim);
    for (int p = 0; p < s->len; p++) {
        const size_t row = ((size_t)c->table[p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK) * c->row_bytes;
        for (int e = 0; e < kv_dim; e++) x[e] = gauss(r);
        store_row(c, c->kpool + row, x);
        for (int e = 0; e < kv_dim; e++) x[e] = gauss(r);
        store_row(c, c->vpool + row, x);
    }
    free(x);
    c->pos = xmalloc(sizeof(int32_t) * (size_t)s->n);
    c->seq = xmalloc(sizeof(int32_t) * (size_t)s->n);
    for (int i = 0; i < s->n; i++) c->pos[i] = s->len - s->n + i;
    c->q = xmalloc(sizeof(float) * (size_t)s->n * s->n_heads * s->hd);
    for (size_t i = 0; i < (size_t)s->n * s->n_heads * s->hd; i++) c->q[i] = 2.0f * gauss(r);  // peaked softmax rows
    c->sinks = xmalloc(sizeof(float) * (size_t)s->n_heads);
    for (int h = 0; h < s->n_heads; h++) c->sinks[h] = 3.0f * gauss(r);
    c->ac = (attn_cfg){.scale = 1.0f / sqrtf((float)s->hd), .window = s->window, .sinks = s->sinks ? c->sinks : NULL};
}

static void release(att_case *c) {
    free(c->kpool), free(c->vpool), free(c->table), free(c->pos), free(c->seq), free(c->q), free(c->sinks);
}

// out = attention of tokens [t0, t0 + n) of the case's pass, as cpu.c runs
// it for a pool of n_threads (split when attention_split_bytes says so: 0
// threads never, 64 whenever a token has more than one range of keys), the
// items one after another.
static void run(const att_case *c, int t0, int n, int n_threads, float *out) {
    const size_t qrow = (size_t)c->s.n_heads * c->s.hd;
    int max_len = 0;
    for (int i = t0; i < t0 + n; i++) max_len = c->pos[i] + 1 > max_len ? c->pos[i] + 1 : max_len;
    const int nb = (c->s.len + KV_BLOCK - 1) / KV_BLOCK;
    fwd_batch fb = {.n = n, .n_seqs = 1, .max_blocks = nb, .max_len = max_len, .n_prompt = n, .pos = c->pos + t0,
                    .seq = c->seq + t0, .tables = c->table};
    attention_job j = {out, c->q + (size_t)t0 * qrow, c->kpool, c->vpool, &fb, c->s.n_heads, c->s.n_kv, c->s.hd,
                       c->s.kv_type, &c->ac, NULL};
    const size_t split = attention_split_bytes(&j, n_threads);
    if (split) j.part = xmalloc(split);
    attention_items(&j, 0, attention_items_count(&j));
    if (j.part) attention_merge(&j, 0, attention_merge_count(&j));
    free(j.part);
}

// NMSE of the pass's output against a float64 softmax over the stored values.
static double nmse_f64(const att_case *c, const float *out) {
    const att_shape *s = &c->s;
    double num = 0, den = 0, *w = xmalloc(sizeof(double) * (size_t)s->len);
    for (int i = 0; i < s->n; i++)
        for (int h = 0; h < s->n_heads; h++) {
            const int kvh = h / (s->n_heads / s->n_kv), len = c->pos[i] + 1;
            const int j0 = s->window > 0 && len > s->window ? len - s->window : 0;
            const float *q = c->q + ((size_t)i * s->n_heads + h) * s->hd;
            double m = s->sinks ? c->sinks[h] : -INFINITY, sum = 0;
            for (int p = j0; p < len; p++) {
                const uint8_t *row = c->kpool + ((size_t)c->table[p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK) * c->row_bytes;
                double d = 0;
                for (int e = 0; e < s->hd; e++) d += (double)q[e] * row_value(c, row, kvh * s->hd + e);
                w[p] = d * c->ac.scale;
                m = fmax(m, w[p]);
            }
            for (int p = j0; p < len; p++) sum += w[p] = exp(w[p] - m);
            if (s->sinks) sum += exp(c->sinks[h] - m);
            for (int e = 0; e < s->hd; e++) {
                double o = 0;
                for (int p = j0; p < len; p++) {
                    const uint8_t *row = c->vpool + ((size_t)c->table[p / KV_BLOCK] * KV_BLOCK + p % KV_BLOCK) * c->row_bytes;
                    o += w[p] * row_value(c, row, kvh * s->hd + e);
                }
                o /= sum;
                const double got = out[((size_t)i * s->n_heads + h) * s->hd + e];
                num += (got - o) * (got - o), den += o * o;
            }
        }
    free(w);
    return num / den;
}

static uint64_t hash_bits(const float *x, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the bytes
    for (size_t i = 0; i < n * sizeof(float); i++) h = (h ^ ((const uint8_t *)x)[i]) * 0x100000001b3ull;
    return h;
}

int main(int argc, char **argv) {
    const int dump = argc > 1 && !strcmp(argv[1], "--dump");
    rng_t r = {0x5EEDA77Eull};
    int n_checks = 0;
    for (size_t k = 0; k < sizeof SHAPES / sizeof SHAPES[0]; k++) {
        att_case c;
        build(&c, &SHAPES[k], &r);
        const att_shape *s = &c.s;
        const size_t qrow = (size_t)s->n_heads * s->hd;
        float *all = xmalloc(sizeof(float) * qrow * (size_t)s->n);
        run(&c, 0, s->n, 0, all);  // not split
        float *alone = xmalloc(sizeof(float) * qrow * (size_t)s->n);
        for (int i = 0; i < s->n; i++) run(&c, i, 1, 64, alone + (size_t)i * qrow);  // split
        char name[96];
        snprintf(name, sizeof name, "%s %d/%d heads x %d, %d positions, pass of %d%s%s", s->kv_type == KV_Q8 ? "q8" : "f16",
                 s->n_heads, s->n_kv, s->hd, s->len, s->n, s->window ? ", window" : "", s->sinks ? ", sinks" : "");
        if (dump) {
            printf("%-60s %016llx %016llx\n", name, (unsigned long long)hash_bits(all, qrow * (size_t)s->n),
                   (unsigned long long)hash_bits(alone, qrow * (size_t)s->n));
        } else {
            const double e = nmse_f64(&c, all);
            CHECK(e < 1e-10, "%s: nmse %.3g against float64", name, e);
            CHECK(!memcmp(alone, all, sizeof(float) * qrow * (size_t)s->n),
                  "%s: a token alone differs from the same token in the pass", name);
            printf("ok   %s: nmse %.2g against float64; alone = in the pass, bit for bit\n", name, e);
            n_checks += 2;
        }
        free(all), free(alone);
        release(&c);
    }
    if (!dump) printf("test_attention: %d checks, %d failed\n", n_checks, n_fail);
    return n_fail ? 1 : 0;
}
