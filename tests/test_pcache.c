// test_pcache.c — the prompt cache file through its C API (pcache.h).
//
//   build/tests/test_pcache              the tests (from the repo root; SHARED names the shared data)
//   build/tests/test_pcache --bench MODEL CACHE
//                                        timings and sizes for a cache that quill wrote for MODEL
//
// 1. pc_hash64: every single-byte change of a buffer changes it; lengths are told apart.
// 2. Round trip on stories260K (fp16 KV) and a synthetic llama (q8 KV): a saved and
//    reloaded cache gives back the exact KV bytes (model_kv_export before and after), the
//    ids, and bitwise the same logits for the next token; a prefix restore gives the
//    prefix; n_ids = -1 restores everything. A q8 cache is refused by an fp16 run.
// 3. Hostile files: every byte of the header and ids flipped, a spread of payload bytes
//    flipped, truncations at every header/ids length and through the payload, a byte
//    appended: each must fail (-1 with a message) and leave the model's cache as it was.
//    Another model's cache, a cache longer than the context, saves that cannot be written.
// 4. pcache_prompt_restore (--prompt-cache): how much is restored and when to save.
#include "pcache.h"
#include "util.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

static int g_fail;

#define fail(...) (g_fail++, fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__), fprintf(stderr, __VA_ARGS__), \
                   fputc('\n', stderr))

static model *load_kv(const char *path, int n_ctx, int kv_type) {
    model_opts o = {.ops = &cpu_backend, .n_threads = 2, .n_ctx = n_ctx, .kv_type = kv_type};
    char err[ERR_LEN];
    model *m;
    if (model_load(&m, path, &o, err)) {
        fprintf(stderr, "test_pcache: %s\n", err);
        exit(2);
    }
    return m;
}

static model *load(const char *path, int n_ctx) { return load_kv(path, n_ctx, KV_F16); }

static uint8_t *slurp(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *p = malloc(*len + 1);
    if (p && fread(p, 1, *len, f) != *len) free(p), p = NULL;
    fclose(f);
    return p;
}

static void spit(const char *path, const uint8_t *p, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, len, f) != len || fclose(f)) {
        fprintf(stderr, "test_pcache: cannot write %s\n", path);
        exit(2);
    }
}

// ---- 1. the hash --------------------------------------------------------------

static void test_hash(void) {
    uint8_t buf[100];
    for (int i = 0; i < 100; i++) buf[i] = (uint8_t)(i * 37 + 11);
    uint64_t h = pc_hash64(buf, sizeof buf, 0);
    if (h != pc_hash64(buf, sizeof buf, 0)) fail("hash is not deterministic");
    if (h == pc_hash64(buf, sizeof buf, 1)) fail("seed does not change the hash");
    for (int i = 0; i < 100; i++)
        for (int bit = 0; bit < 8; bit++) {
            buf[i] ^= (uint8_t)(1 << bit);
            if (pc_hash64(buf, sizeof buf, 0) == h) fail("flipping bit %d of byte %d does not change the hash", bit, i);
            buf[i] ^= (uint8_t)(1 << bit);
        }
    uint8_t zero[70] = {0};
    uint64_t seen[71];
    for (int n = 0; n <= 70; n++) {
        seen[n] = pc_hash64(zero, (size_t)n, 0);
        for (int j = 0; j < n; j++)
            if (seen[j] == seen[n]) fail("%d and %d zero bytes hash alike", j, n);
    }
}

// ---- 2. round trip --------------------------------------------------------------

static int count_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) n += strstr(e->d_name, ".tmp-") != NULL;
    if (d) closedir(d);
    return n;
}

// The first n positions of each [layer][K/V] plane of a [2 * n_layers][stride] export of rows of row bytes.
static int planes_equal(const uint8_t *a, int stride_a, const uint8_t *b, int stride_b, int n, int planes, size_t row) {
    for (int p = 0; p < planes; p++)
        if (memcmp(a + (size_t)p * stride_a * row, b + (size_t)p * stride_b * row, (size_t)n * row)) return 0;
    return 1;
}

static void test_round_trip(const char *mpath, const char *dir, int kv_type) {
    char err[ERR_LEN], path[600];
    snprintf(path, sizeof path, "%s/rt.cache", dir);
    enum { N = 20 };
    int32_t ids[N + 1];
    for (int i = 0; i < N + 1; i++) ids[i] = 1 + (i * 53) % 500;
    model *a = load_kv(mpath, 64, kv_type), *b = load_kv(mpath, 64, kv_type);
    const model_config *c = model_cfg(a);
    const int nv = c->n_vocab, planes = 2 * c->n_layers;
    const size_t row = model_kv_bytes(a, 1) / planes;
    float *la = malloc(sizeof(float) * nv), *lb = malloc(sizeof(float) * nv);
    uint8_t *ea = malloc(model_kv_bytes(a, N)), *eb = malloc(model_kv_bytes(a, N));
    if (model_forward(a, ids, N, 0, la, err) || model_kv_export(a, N, ea, err)) fail("%s", err);
    if (pcache_save(path, a, mpath, ids, N + 1, err) == 0) fail("saving more positions than cached succeeded");
    if (pcache_save(path, a, mpath, ids, N, err)) fail("save: %s", err);
    if (count_temp_files(dir)) fail("a temp file was left in %s", dir);

    // everything back (/load): the same ids, KV bytes and next-token logits
    int32_t *cids = NULL;
    int ncached = -1;
    int k = pcache_load(path, b, mpath, NULL, -1, &cids, &ncached, err);
    if (k != N || ncached != N || model_len(b) != N) fail("load all: k %d, n_cached %d, len %d (%s)", k, ncached, model_len(b), k < 0 ? err : "");
    else {
        if (memcmp(cids, ids, sizeof ids[0] * N)) fail("load all: the ids differ");
        if (model_kv_export(b, N, eb, err) || memcmp(ea, eb, model_kv_bytes(a, N))) fail("load all: the KV differs");
        if (model_forward(a, ids + N, 1, 0, la, err) || model_forward(b, ids + N, 1, 0, lb, err)) fail("%s", err);
        if (memcmp(la, lb, sizeof(float) * nv)) fail("load all: the next token's logits differ");
    }
    free(cids);

    // a prompt that shares 7 tokens: exactly those come back
    int32_t other[N];
    memcpy(other, ids, sizeof other);
    other[7] = ids[7] == 5 ? 6 : 5;
    k = pcache_load(path, b, mpath, other, N, NULL, NULL, err);
    if (k != 7 || model_len(b) != 7) fail("prefix load: k %d, len %d (%s)", k, model_len(b), k < 0 ? err : "");
    else if (model_kv_export(b, 7, eb, err) || !planes_equal(ea, N, eb, 7, 7, planes, row)) fail("prefix load: the KV differs");
    // a shorter prompt: its length; no common token: 0, nothing restored
    k = pcache_load(path, b, mpath, ids, 5, NULL, NULL, err);
    if (k != 5 || model_len(b) != 5) fail("short prompt: k %d, len %d", k, model_len(b));
    other[0] = ids[0] + 1;
    k = pcache_load(path, b, mpath, other, N, NULL, NULL, err);
    if (k != 0 || model_len(b) != 0) fail("no common prefix: k %d, len %d", k, model_len(b));

    // an empty cache is valid too
    if (pcache_save(path, a, mpath, ids, 0, err)) fail("save 0: %s", err);
    if ((k = pcache_load(path, b, mpath, ids, N, NULL, NULL, err)) != 0) fail("load of an empty cache: %d (%s)", k, err);
    if (kv_type == KV_Q8) {  // a q8 cache in an fp16 run: refused, saying why
        model *f = load_kv(mpath, 64, KV_F16);
        if (pcache_save(path, a, mpath, ids, N, err)) fail("save: %s", err);
        if (pcache_load(path, f, mpath, ids, N, NULL, NULL, err) >= 0 || !strstr(err, "KV type q8, this run uses f16"))
            fail("a q8 cache loaded by an fp16 run: '%s'", err);
        model_free(f);
    }
    free(la), free(lb), free(ea), free(eb);
    model_free(a), model_free(b);
}

// pcache_prompt_restore, what --prompt-cache runs before the prefill: k and the save flag.
static void test_prompt_restore(const char *mpath, const char *dir) {
    char err[ERR_LEN], warn[ERR_LEN], path[600];
    snprintf(path, sizeof path, "%s/prompt.cache", dir);
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = 1 + i * 11;
    model *m = load(mpath, 64);
    float *lg = malloc(sizeof(float) * model_cfg(m)->n_vocab);
    int save = -1, k = pcache_prompt_restore(path, m, mpath, ids, 10, &save, warn);
    if (k != 0 || save != 1 || warn[0]) fail("absent file: k %d, save %d, warn '%s'", k, save, warn);
    if (model_forward(m, ids, 10, 0, lg, err) || pcache_save(path, m, mpath, ids, 10, err)) fail("%s", err);
    model_rewind(m, 0);
    k = pcache_prompt_restore(path, m, mpath, ids, 10, &save, warn);  // all cached: the last token still runs
    if (k != 9 || model_len(m) != 9 || save != 0 || warn[0]) fail("same prompt: k %d, len %d, save %d", k, model_len(m), save);
    model_rewind(m, 0);
    k = pcache_prompt_restore(path, m, mpath, ids, 12, &save, warn);  // a longer prompt: the file is extended
    if (k != 10 || model_len(m) != 10 || save != 1) fail("longer prompt: k %d, len %d, save %d", k, model_len(m), save);
    model_rewind(m, 0);
    k = pcache_prompt_restore(path, m, mpath, ids, 6, &save, warn);  // a prefix of the file: nothing new to save
    if (k != 5 || save != 0) fail("shorter prompt: k %d, save %d", k, save);
    model_rewind(m, 0);
    k = pcache_prompt_restore(dir, m, mpath, ids, 10, &save, warn);
    if (k != 0 || save != 0 || !strstr(warn, "directory")) fail("a directory: k %d, save %d, warn '%s'", k, save, warn);
    spit(path, (const uint8_t *)"QUILLPC\n", 8);
    k = pcache_prompt_restore(path, m, mpath, ids, 10, &save, warn);
    if (k != 0 || save != 1 || !strstr(warn, "truncated")) fail("a bad file: k %d, save %d, warn '%s'", k, save, warn);
    free(lg);
    model_free(m);
}

// ---- 3. hostile files -------------------------------------------------------------

// pcache_load of bytes p[0..len) must fail with a message and leave m at its 3 positions.
static void expect_reject(model *m, const char *mpath, const char *path, const uint8_t *p, size_t len,
                          const int32_t *ids, const char *what, size_t at) {
    char err[ERR_LEN] = "";
    spit(path, p, len);
    int k = pcache_load(path, m, mpath, ids, 8, NULL, NULL, err);
    if (k >= 0) fail("%s at %zu: accepted (k = %d)", what, at, k);
    else if (!err[0] || strchr(err, '\n')) fail("%s at %zu: no one-line message", what, at);
    if (model_len(m) != 3) fail("%s at %zu: the model's cache changed (len %d)", what, at, model_len(m));
}

static void test_hostile(const char *mpath, const char *dir) {
    char err[ERR_LEN], good[600], bad[600];
    snprintf(good, sizeof good, "%s/good.cache", dir);
    snprintf(bad, sizeof bad, "%s/bad.cache", dir);
    int32_t ids[8] = {1, 400, 31, 77, 5, 9, 300, 2};
    model *m = load(mpath, 64);
    float *lg = malloc(sizeof(float) * model_cfg(m)->n_vocab);
    if (model_forward(m, ids, 8, 0, lg, err) || pcache_save(good, m, mpath, ids, 8, err)) fail("%s", err);
    model_rewind(m, 3);
    size_t len;
    uint8_t *p = slurp(good, &len);
    if (!p) { fail("cannot read back %s", good); return; }
    const size_t fixed = PCACHE_HEADER_BYTES + 4 * 8;  // header and ids
    for (size_t i = 0; i < fixed; i++) {
        p[i] ^= 0x40;
        expect_reject(m, mpath, bad, p, len, ids, "flipped header/ids byte", i);
        p[i] ^= 0x40;
    }
    for (size_t j = 0; j < 64; j++) {
        size_t i = fixed + (len - fixed - 1) * j / 63;
        p[i] ^= 0x01;
        expect_reject(m, mpath, bad, p, len, ids, "flipped payload byte", i);
        p[i] ^= 0x01;
    }
    for (size_t l = 0; l < fixed; l++) expect_reject(m, mpath, bad, p, l, ids, "truncated", l);
    for (size_t j = 0; j < 64; j++) {
        size_t l = fixed + (len - fixed - 1) * j / 63;
        expect_reject(m, mpath, bad, p, l, ids, "truncated", l);
    }
    uint8_t *longer = malloc(len + 1);
    memcpy(longer, p, len);
    longer[len] = 0;
    expect_reject(m, mpath, bad, longer, len + 1, ids, "a byte appended", len);
    free(longer);
    // the intact file still loads (the cases above failed for their fault, not the setup's)
    spit(bad, p, len);
    int k = pcache_load(bad, m, mpath, ids, 8, NULL, NULL, err);
    if (k != 8) fail("the intact copy: k %d (%s)", k, k < 0 ? err : "");
    model_rewind(m, 3);
    // a directory, a missing file
    if (pcache_load(dir, m, mpath, ids, 8, NULL, NULL, err) >= 0 || !strstr(err, "directory")) fail("a directory: '%s'", err);
    snprintf(bad, sizeof bad, "%s/missing.cache", dir);
    if (pcache_load(bad, m, mpath, ids, 8, NULL, NULL, err) >= 0 || !strstr(err, "No such file")) fail("a missing file: '%s'", err);
    // unwritable targets: an error, no temp file left, the old file untouched
    snprintf(bad, sizeof bad, "%s/no/such/dir.cache", dir);
    if (pcache_save(bad, m, mpath, ids, 3, err) == 0 || !strstr(err, "temp file")) fail("save into a missing dir: '%s'", err);
    if (pcache_save(dir, m, mpath, ids, 3, err) == 0) fail("save over a directory succeeded");
    if (count_temp_files(dir)) fail("a failed save left a temp file");
    free(p);
    free(lg);
    model_free(m);
}

// Another model's cache (the same shape, other weights), and one longer than the context.
static void test_other_model(const char *mpath, const char *other, const char *dir) {
    char err[ERR_LEN], path[600];
    snprintf(path, sizeof path, "%s/other.cache", dir);
    int32_t ids[40];
    for (int i = 0; i < 40; i++) ids[i] = 1 + i * 7;
    model *a = load(other, 64), *b = load(mpath, 32);
    float *lg = malloc(sizeof(float) * model_cfg(a)->n_vocab);
    if (model_forward(a, ids, 40, 0, lg, err) || pcache_save(path, a, other, ids, 40, err)) fail("%s", err);
    if (pcache_load(path, b, mpath, ids, 8, NULL, NULL, err) >= 0 || !strstr(err, "another model"))
        fail("another model's cache: '%s'", err);
    model_free(a);
    a = load(mpath, 64);
    if (model_forward(a, ids, 40, 0, lg, err) || pcache_save(path, a, mpath, ids, 40, err)) fail("%s", err);
    if (pcache_load(path, b, mpath, ids, 8, NULL, NULL, err) >= 0 || !strstr(err, "context"))
        fail("a cache longer than the context: '%s'", err);
    free(lg);
    model_free(a), model_free(b);
}

// ---- --bench ----------------------------------------------------------------------

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define REPS 5
#define TIME_MEDIAN(label, stmt)                                        \
    do {                                                                \
        double ts[REPS];                                                \
        for (int r_ = 0; r_ < REPS; r_++) {                             \
            double t_ = now_sec();                                      \
            stmt;                                                       \
            ts[r_] = now_sec() - t_;                                    \
        }                                                               \
        qsort(ts, REPS, sizeof *ts, cmp_double);                        \
        printf("%-52s %9.1f ms (median of %d; min %.1f)\n", label, ts[REPS / 2] * 1e3, REPS, ts[0] * 1e3); \
    } while (0)

// The KV with fp16 split into byte planes per 64 KiB chunk (as pcache.c stores it).
static void split(uint16_t *v, size_t n) {
    uint8_t *tmp = malloc(65536);
    for (size_t o = 0; o < n; o += 32768) {
        size_t c = n - o < 32768 ? n - o : 32768;
        for (size_t i = 0; i < c; i++) tmp[i] = (uint8_t)v[o + i], tmp[c + i] = (uint8_t)(v[o + i] >> 8);
        memcpy(v + o, tmp, 2 * c);
    }
    free(tmp);
}

static void bench_codec(const uint16_t *kv, size_t bytes) {
    uint16_t *sp = malloc(bytes);
    memcpy(sp, kv, bytes);
    split(sp, bytes / 2);
    size_t cap = ZSTD_compressBound(bytes);
    uint8_t *out = malloc(cap), *back = malloc(bytes);
    const char *names[] = {"interleaved fp16", "byte planes"};
    const void *src[] = {kv, sp};
    int levels[] = {-1, 1, 3};
    for (int s = 0; s < 2; s++)
        for (int li = 0; li < 3; li++)
            for (int workers = 0; workers <= 2; workers += 2) {
                ZSTD_CCtx *cc = ZSTD_createCCtx();
                ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, levels[li]);
                ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
                ZSTD_CCtx_setParameter(cc, ZSTD_c_nbWorkers, workers);
                size_t r = 0;
                char label[96];
                snprintf(label, sizeof label, "  zstd %2d, %s, %d workers: compress", levels[li], names[s], workers);
                TIME_MEDIAN(label, r = ZSTD_compress2(cc, out, cap, src[s], bytes));
                printf("    -> %zu bytes = %.1f%% of the raw KV\n", r, 100.0 * r / bytes);
                snprintf(label, sizeof label, "  zstd %2d, %s: decompress", levels[li], names[s]);
                if (!workers) TIME_MEDIAN(label, ZSTD_decompress(back, bytes, out, r));
                ZSTD_freeCCtx(cc);
            }
    free(sp), free(out), free(back);
}

static int bench(const char *mpath, const char *cache) {
    char err[ERR_LEN], tmp[600];
    model *m = load(mpath, 4096);
    int32_t *ids = NULL;
    int n = 0;
    if (pcache_load(cache, m, mpath, NULL, -1, &ids, &n, err) < 0) {
        fprintf(stderr, "test_pcache --bench: %s: %s\n", cache, err);
        return 2;
    }
    const gguf_file *f = model_gguf(m);
    size_t raw = model_kv_bytes(m, n);
    printf("%s: %d cached tokens, raw KV %zu bytes (%.1f MiB), cache file:\n", mpath, n, raw, raw / 1048576.0);
    snprintf(tmp, sizeof tmp, "%s.bench", cache);
    volatile uint64_t sink = 0;
    char label[96];
    snprintf(label, sizeof label, "pc_hash64 of the whole model file (%.0f MB)", f->size / 1e6);
    TIME_MEDIAN(label, sink += pc_hash64(f->base, f->size, 0));
    int32_t none = ids[0] + 1;
    TIME_MEDIAN("pcache_load, no common prefix (identity + header + ids)", pcache_load(cache, m, mpath, &none, 1, NULL, NULL, err));
    TIME_MEDIAN("pcache_load, everything (read, check, unzstd, import)", pcache_load(cache, m, mpath, ids, n, NULL, NULL, err));
    uint16_t *kv = malloc(raw);
    TIME_MEDIAN("model_kv_export", model_kv_export(m, n, kv, err));
    TIME_MEDIAN("model_kv_import", model_kv_import(m, n, kv, n, model_kv_floor(m), err));
    TIME_MEDIAN("pcache_save (export, zstd, write, fsync, rename)", pcache_save(tmp, m, mpath, ids, n, err));
    struct stat st;
    if (!stat(tmp, &st)) printf("    -> %lld bytes = %.1f%% of the raw KV\n", (long long)st.st_size, 100.0 * st.st_size / raw);
    unlink(tmp);
    bench_codec(kv, raw);
    (void)sink;
    free(kv), free(ids);
    model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "--bench")) return bench(argv[2], argv[3]);
    const char *shared = getenv("SHARED") ? getenv("SHARED") : "../shared";
    char mpath[600], other[600], synth[600], dir[] = "/tmp/test_pcache.XXXXXX";
    snprintf(mpath, sizeof mpath, "%s/models/gguf/stories260K.gguf", shared);
    snprintf(other, sizeof other, "%s/models/gguf/stories260K-Q8_0.gguf", shared);
    snprintf(synth, sizeof synth, "%s/models/gguf/synth-llama-Q8_0.gguf", shared);  // head size 64: q8 KV
    if (access(mpath, R_OK) || access(other, R_OK) || access(synth, R_OK)) {
        fprintf(stderr, "test_pcache: %s, %s or %s not found (set SHARED)\n", mpath, other, synth);
        return 1;
    }
    if (!mkdtemp(dir)) return fprintf(stderr, "test_pcache: mkdtemp failed\n"), 1;
    test_hash();
    test_round_trip(mpath, dir, KV_F16);
    test_round_trip(synth, dir, KV_Q8);
    test_prompt_restore(mpath, dir);
    test_hostile(mpath, dir);
    test_other_model(mpath, other, dir);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "test_pcache: could not remove %s\n", dir);
    if (g_fail) {
        fprintf(stderr, "test_pcache: %d failure(s)\n", g_fail);
        return 1;
    }
    printf("test_pcache: all passed\n");
    return 0;
}
