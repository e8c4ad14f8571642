// pcache.c — the prompt cache file: see pcache.h for the format.
//
// Everything read from the file is untrusted: the fixed header is checked
// against its own hash before any field is used, every size is bounded by the
// file's real size and by what this model needs (n_tokens <= model_ctx, the
// payload decompresses to exactly model_kv_bytes), and nothing is restored
// into the model until the whole file has been verified.
#include "pcache.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include "util.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pcache.c reads and writes its little-endian format with host loads and stores"
#endif

#define PC_MAGIC "QUILLPC\n"
#define PC_NAME_LEN 40     // model file name field
#define PC_BACKEND_LEN 64  // backend identity field
#define PC_ZSTD_LEVEL 1    // fast; 3 gained 0.4% of size on the 1B-shaped model, -1 lost 8%

// ---- the hash (format in pcache.h) -----------------------------------------

#define K1 0x9E3779B97F4A7C15ull
#define K2 0xD6E8FEB86659FD93ull

static inline uint64_t xs32(uint64_t x) { return x ^ (x >> 32); }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

uint64_t pc_hash64(const void *data, size_t len, uint64_t seed) {
    const uint8_t *p = data;
    uint64_t lane[4];
    for (int i = 0; i < 4; i++) lane[i] = seed + (uint64_t)i * K1;
    size_t full = len & ~(size_t)31;
    for (size_t o = 0; o < full; o += 32)
        for (int i = 0; i < 4; i++) lane[i] = xs32((lane[i] ^ rd64(p + o + 8 * i)) * K1);
    if (len > full) {
        uint8_t last[32] = {0};
        memcpy(last, p + full, len - full);
        for (int i = 0; i < 4; i++) lane[i] = xs32((lane[i] ^ rd64(last + 8 * i)) * K1);
    }
    uint64_t h = seed ^ ((uint64_t)len * K2);
    for (int i = 0; i < 4; i++) h = xs32((h ^ xs32(lane[i] * K2)) * K1);
    return xs32(h * K2);
}

// ---- model identity ---------------------------------------------------------

#define ID_FULL_LIMIT ((size_t)8 << 20)  // tensor data up to this size is hashed whole
#define ID_WINDOW 4096                   // bytes per sample of larger tensor data
#define ID_STRIDE_SAMPLES 256            // evenly spaced samples over the whole data section

// A 64-bit identity of the model file, cheap enough for every run: ~1 ms for
// the 0.8 GB Llama-3.2-1B-shaped Q4_K_M, where hashing all of it took 50 ms
// from the page cache (16 GB/s) — most of a 75 ms warm restore — and would
// grow with the model (and read it all from disk on a cold start). It hashes
// everything that defines the computation except the bulk of the weight
// values: the whole metadata and tensor-info region (architecture,
// hyperparameters, tokenizer, every tensor's name, type, shape and offset),
// the file size, and samples of the weights: each tensor's first, middle and
// last 4 KiB plus 256 windows spread over the data section. Another model, a
// re-quantization or a fine-tune changes all of these; only a deliberate edit
// of unsampled weight bytes would go unnoticed. Small models are hashed whole.
static uint64_t model_identity(const gguf_file *f) {
    uint64_t h = pc_hash64(f->base, (size_t)f->data_offset, f->size);
    size_t data = f->size - (size_t)f->data_offset;
    const uint8_t *d = f->base + f->data_offset;
    if (data <= ID_FULL_LIMIT) return pc_hash64(d, data, h);
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        size_t w = t->nbytes < ID_WINDOW ? (size_t)t->nbytes : ID_WINDOW;
        size_t at[3] = {0, ((size_t)t->nbytes - w) / 2, (size_t)t->nbytes - w};
        for (int k = 0; k < 3; k++) h = pc_hash64((const uint8_t *)t->data + at[k], w, h);
    }
    for (size_t i = 0; i < ID_STRIDE_SAMPLES; i++)
        h = pc_hash64(d + (data - ID_WINDOW) / (ID_STRIDE_SAMPLES - 1) * i, ID_WINDOW, h);
    return h;
}

// ---- the header ---------------------------------------------------------------

typedef struct {
    uint32_t version, kv_type;
    uint64_t model_id, model_size;
    uint32_t n_layers, n_kv_heads, head_dim, n_tokens, codec, swa_floor;
    uint64_t payload_bytes, payload_hash, ids_hash;
    char backend[PC_BACKEND_LEN + 1];  // NUL-terminated copies of the padded fields
    char model_name[PC_NAME_LEN + 1];
    uint64_t header_hash;
} pc_header;

// Byte offsets of the fields (the table in pcache.h).
enum {
    OFF_VERSION = 8, OFF_KV_TYPE = 12, OFF_MODEL_ID = 16, OFF_MODEL_SIZE = 24, OFF_N_LAYERS = 32,
    OFF_N_KV_HEADS = 36, OFF_HEAD_DIM = 40, OFF_N_TOKENS = 44, OFF_CODEC = 48, OFF_SWA_FLOOR = 52,
    OFF_PAYLOAD_BYTES = 56, OFF_PAYLOAD_HASH = 64, OFF_IDS_HASH = 72, OFF_BACKEND = 80,
    OFF_MODEL_NAME = OFF_BACKEND + PC_BACKEND_LEN, OFF_HEADER_HASH = OFF_MODEL_NAME + PC_NAME_LEN,
};
_Static_assert(OFF_HEADER_HASH + 8 == PCACHE_HEADER_BYTES, "header layout");

static uint32_t get32(const uint8_t *b, int off) { uint32_t v; memcpy(&v, b + off, 4); return v; }
static uint64_t get64(const uint8_t *b, int off) { uint64_t v; memcpy(&v, b + off, 8); return v; }
static void put32(uint8_t *b, int off, uint32_t v) { memcpy(b + off, &v, 4); }
static void put64(uint8_t *b, int off, uint64_t v) { memcpy(b + off, &v, 8); }

// Copies a NUL-padded text field, showing bytes that are not printable ASCII as '?'.
static void get_text(char *dst, const uint8_t *b, int off, int len) {
    int i = 0;
    for (; i < len && b[off + i]; i++) dst[i] = b[off + i] >= 0x20 && b[off + i] < 0x7f ? (char)b[off + i] : '?';
    dst[i] = 0;
}

static void header_encode(const pc_header *h, uint8_t b[PCACHE_HEADER_BYTES]) {
    memset(b, 0, PCACHE_HEADER_BYTES);
    memcpy(b, PC_MAGIC, 8);
    put32(b, OFF_VERSION, h->version), put32(b, OFF_KV_TYPE, h->kv_type);
    put64(b, OFF_MODEL_ID, h->model_id), put64(b, OFF_MODEL_SIZE, h->model_size);
    put32(b, OFF_N_LAYERS, h->n_layers), put32(b, OFF_N_KV_HEADS, h->n_kv_heads);
    put32(b, OFF_HEAD_DIM, h->head_dim), put32(b, OFF_N_TOKENS, h->n_tokens), put32(b, OFF_CODEC, h->codec);
    put32(b, OFF_SWA_FLOOR, h->swa_floor);
    put64(b, OFF_PAYLOAD_BYTES, h->payload_bytes), put64(b, OFF_PAYLOAD_HASH, h->payload_hash);
    put64(b, OFF_IDS_HASH, h->ids_hash);
    memcpy(b + OFF_BACKEND, h->backend, strnlen(h->backend, PC_BACKEND_LEN));
    memcpy(b + OFF_MODEL_NAME, h->model_name, strnlen(h->model_name, PC_NAME_LEN));
    put64(b, OFF_HEADER_HASH, pc_hash64(b, OFF_HEADER_HASH, 0));
}

static void header_decode(const uint8_t b[PCACHE_HEADER_BYTES], pc_header *h) {
    h->version = get32(b, OFF_VERSION), h->kv_type = get32(b, OFF_KV_TYPE);
    h->model_id = get64(b, OFF_MODEL_ID), h->model_size = get64(b, OFF_MODEL_SIZE);
    h->n_layers = get32(b, OFF_N_LAYERS), h->n_kv_heads = get32(b, OFF_N_KV_HEADS);
    h->head_dim = get32(b, OFF_HEAD_DIM), h->n_tokens = get32(b, OFF_N_TOKENS), h->codec = get32(b, OFF_CODEC);
    h->swa_floor = get32(b, OFF_SWA_FLOOR);
    h->payload_bytes = get64(b, OFF_PAYLOAD_BYTES), h->payload_hash = get64(b, OFF_PAYLOAD_HASH);
    h->ids_hash = get64(b, OFF_IDS_HASH);
    get_text(h->backend, b, OFF_BACKEND, PC_BACKEND_LEN);
    get_text(h->model_name, b, OFF_MODEL_NAME, PC_NAME_LEN);
    h->header_hash = get64(b, OFF_HEADER_HASH);
}

// The backend description without the parts that do not change the KV: the
// thread count ("cpu, 2 threads, avx2" -> "cpu, avx2": every output element
// is computed by one thread) and memory sizes ("cuda, NVIDIA H100 80GB HBM3
// (sm_90, 132 SMs, 79 GiB)" -> "cuda, NVIDIA H100 80GB HBM3 (sm_90, 132 SMs").
// The kernels that run (the SIMD level, the GPU and its SM count, which can
// steer kernel choice) may round differently, so they stay.
static void backend_identity(model *m, char out[PC_BACKEND_LEN + 1]) {
    size_t n = 0;
    for (const char *d = model_backend_desc(m); *d;) {
        d += strspn(d, ", ");
        size_t len = strcspn(d, ",");
        int skip = memmem(d, len, "thread", 6) || memmem(d, len, "iB", 2);
        if (len && !skip && n + 2 + len <= PC_BACKEND_LEN) {
            if (n) out[n++] = ',', out[n++] = ' ';
            memcpy(out + n, d, len);
            n += len;
        }
        d += len;
    }
    out[n] = 0;
}

// The header this model would write for n tokens (payload fields left 0).
static void expected_header(model *m, const char *model_path, int n, pc_header *h) {
    const gguf_file *f = model_gguf(m);
    const model_config *c = model_cfg(m);
    *h = (pc_header){.version = PCACHE_VERSION, .kv_type = model_kv_type(m) == KV_Q8 ? PCACHE_KV_Q8 : PCACHE_KV_F16, .model_id = model_identity(f),
                     .model_size = f->size, .n_layers = (uint32_t)c->n_layers,
                     .n_kv_heads = (uint32_t)c->n_kv_heads, .head_dim = (uint32_t)c->head_dim,
                     .n_tokens = (uint32_t)n, .codec = PCACHE_CODEC_ZSTD};
    backend_identity(m, h->backend);
    const char *base = model_path ? strrchr(model_path, '/') : NULL;
    base = base ? base + 1 : model_path ? model_path : "";
    snprintf(h->model_name, sizeof h->model_name, "%s", base);
}

// ---- big buffers ---------------------------------------------------------------

// A buffer of tens of MB (the KV, its compressed form) in transparent huge pages
// where the kernel allows: first touching it then takes 1/512 of the page faults,
// which is most of a warm start's time where faults are dear (in a VM here,
// ~15 us per 4 KiB page: 250 ms for 64 MiB of malloc'd memory, 10 ms in huge pages).
typedef struct {
    void *p;        // size usable bytes, 2 MiB aligned
    size_t size;
    void *base;     // the mapping, for munmap
    size_t mapped;
} bigbuf;

static int big_alloc(bigbuf *b, size_t size, char *err) {
    const size_t huge = (size_t)2 << 20;
    *b = (bigbuf){.size = size, .mapped = (size + huge - 1) / huge * huge + huge};
    b->base = mmap(NULL, b->mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b->base == MAP_FAILED) return b->base = NULL, errf(err, "out of memory for a buffer of %zu bytes", size);
    b->p = (void *)(((uintptr_t)b->base + huge - 1) / huge * huge);
    madvise(b->p, (size + huge - 1) / huge * huge, MADV_HUGEPAGE);  // advice: the kernel may refuse it
    return 0;
}

static void big_free(bigbuf *b) {
    if (b->base) munmap(b->base, b->mapped);
    b->base = b->p = NULL;
}

// ---- the payload: zstd ---------------------------------------------------------

// Compresses kv (n bytes) into out, a zstd frame of *out_len bytes with its
// content size and content checksum. fp16 values go in as they are: split
// into low and high byte planes they compressed no better (1B-shaped synthetic
// model: 90.0% of the raw size either way; stories260K 88.4% vs 88.5%;
// tinystories-656K 81.8% vs 79.3%) and took longer.
static int compress_kv(const void *kv, size_t n, bigbuf *out, size_t *out_len, char *err) {
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    if (!cc) return errf(err, "out of memory for zstd");
    if (big_alloc(out, ZSTD_compressBound(n), err)) return ZSTD_freeCCtx(cc), -1;
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, PC_ZSTD_LEVEL);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores > 1 && n >= ((size_t)4 << 20))  // threads pay off from a few MiB; a libzstd without them ignores this
        ZSTD_CCtx_setParameter(cc, ZSTD_c_nbWorkers, cores < 8 ? (int)cores : 8);
    size_t r = ZSTD_compress2(cc, out->p, out->size, kv, n);
    ZSTD_freeCCtx(cc);
    if (ZSTD_isError(r)) return big_free(out), errf(err, "zstd: %s", ZSTD_getErrorName(r));
    *out_len = r;
    return 0;
}

// Decompresses a payload that must hold exactly n bytes into kv.
static int decompress_kv(const uint8_t *p, size_t len, void *kv, size_t n, char *err) {
    unsigned long long content = ZSTD_getFrameContentSize(p, len);
    if (content != (unsigned long long)n)
        return errf(err, "corrupt payload (its zstd frame holds %s, expected %zu bytes of KV)",
                    content == ZSTD_CONTENTSIZE_UNKNOWN || content == ZSTD_CONTENTSIZE_ERROR ? "no size" : "another size",
                    n);
    if (ZSTD_findFrameCompressedSize(p, len) != len)
        return errf(err, "corrupt payload (the zstd frame does not span it exactly)");
    size_t r = ZSTD_decompress(kv, n, p, len);  // also checks zstd's content checksum
    if (ZSTD_isError(r) || r != n)
        return errf(err, "corrupt payload (zstd: %s)", ZSTD_isError(r) ? ZSTD_getErrorName(r) : "short frame");
    return 0;
}

// ---- writing -----------------------------------------------------------------

int pcache_save(const char *path, model *m, const char *model_path, const int32_t *ids, int n, char *err) {
    if (n < 0 || n > model_len(m))
        return errf(err, "cannot save %d positions: the cache holds %d", n, model_len(m));
    pc_header h;
    expected_header(m, model_path, n, &h);
    h.swa_floor = (uint32_t)(model_kv_floor(m) < n ? model_kv_floor(m) : n);
    bigbuf kv, payload;
    size_t plen = 0;
    if (big_alloc(&kv, model_kv_bytes(m, n), err)) return -1;
    if (model_kv_export(m, n, kv.p, err) || compress_kv(kv.p, kv.size, &payload, &plen, err)) {
        big_free(&kv);
        return -1;
    }
    big_free(&kv);
    h.payload_bytes = plen;
    h.payload_hash = pc_hash64(payload.p, plen, 0);
    h.ids_hash = pc_hash64(ids, sizeof *ids * (size_t)n, 0);
    uint8_t hb[PCACHE_HEADER_BYTES];
    header_encode(&h, hb);
    const void *parts[] = {hb, ids, payload.p};
    const size_t lens[] = {sizeof hb, sizeof *ids * (size_t)n, plen};
    int rc = write_file_atomic(path, parts, lens, 3, 0600, err);
    big_free(&payload);
    return rc;
}

// ---- reading -----------------------------------------------------------------

// Checks the fixed header at the start of the file's size bytes: magic,
// version, size, then its own hash; decodes it.
static int read_header(const uint8_t *b, uint64_t size, pc_header *h, char *err) {
    size_t have = size < PCACHE_HEADER_BYTES ? (size_t)size : PCACHE_HEADER_BYTES;
    if (memcmp(b, PC_MAGIC, have < 8 ? have : 8)) return errf(err, "not a quill prompt cache (bad magic)");
    if (have >= OFF_VERSION + 4 && get32(b, OFF_VERSION) > PCACHE_VERSION)
        return errf(err, "format version %u is newer than this quill's (%d)", get32(b, OFF_VERSION), PCACHE_VERSION);
    if (have >= OFF_VERSION + 4 && get32(b, OFF_VERSION) != PCACHE_VERSION)
        return errf(err, "unknown format version %u", get32(b, OFF_VERSION));
    if (have < PCACHE_HEADER_BYTES)
        return errf(err, "truncated (%" PRIu64 " bytes, shorter than the %d-byte header)", size, PCACHE_HEADER_BYTES);
    header_decode(b, h);
    if (pc_hash64(b, OFF_HEADER_HASH, 0) != h->header_hash) return errf(err, "corrupt header (checksum mismatch)");
    return 0;
}

static const char *kv_type_name(uint32_t t) {
    return t == PCACHE_KV_F16 ? "f16" : t == PCACHE_KV_Q8 ? "q8" : "unknown";
}

// Checks the header's identity fields against this model and the sizes against the file.
static int check_header(const pc_header *h, const pc_header *want, model *m, uint64_t size, char *err) {
    if (h->kv_type != want->kv_type)
        return errf(err, "KV type %s, this run uses %s (--kv)", kv_type_name(h->kv_type), kv_type_name(want->kv_type));
    if (h->model_id != want->model_id || h->model_size != want->model_size)
        return errf(err, "written for another model (%s)", h->model_name[0] ? h->model_name : "unnamed");
    if (strcmp(h->backend, want->backend))
        return errf(err, "written by backend '%s', this run uses '%s' (their KV may round differently)",
                    h->backend, want->backend);
    if (h->n_layers != want->n_layers || h->n_kv_heads != want->n_kv_heads || h->head_dim != want->head_dim)
        return errf(err, "KV shape %u layers x %u kv heads x %u does not match the model's %u x %u x %u",
                    h->n_layers, h->n_kv_heads, h->head_dim, want->n_layers, want->n_kv_heads, want->head_dim);
    if (h->codec != PCACHE_CODEC_ZSTD) return errf(err, "unknown payload codec %u", h->codec);
    if (h->n_tokens > (uint32_t)model_ctx(m))
        return errf(err, "holds %u tokens, more than the context of %d", h->n_tokens, model_ctx(m));
    if (h->payload_bytes > ZSTD_compressBound(model_kv_bytes(m, (int)h->n_tokens)))
        return errf(err, "corrupt header (payload of %" PRIu64 " bytes)", h->payload_bytes);
    uint64_t expect = PCACHE_HEADER_BYTES + 4ull * h->n_tokens + h->payload_bytes;
    if (size < expect) return errf(err, "truncated (%" PRIu64 " of %" PRIu64 " bytes)", size, expect);
    if (size > expect) return errf(err, "%" PRIu64 " bytes of trailing garbage", size - expect);
    return 0;
}

// Checks the token ids that follow the header; copies them into *out.
static int read_ids(const uint8_t *b, const pc_header *h, int n_vocab, int32_t **out, char *err) {
    size_t bytes = sizeof **out * h->n_tokens;
    if (pc_hash64(b + PCACHE_HEADER_BYTES, bytes, 0) != h->ids_hash) return errf(err, "corrupt token ids (checksum mismatch)");
    int32_t *ids = malloc(bytes ? bytes : 1);
    if (!ids) return errf(err, "out of memory");
    memcpy(ids, b + PCACHE_HEADER_BYTES, bytes);
    for (uint32_t i = 0; i < h->n_tokens; i++)
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            errf(err, "corrupt token ids (id %d at %u is outside the vocabulary of %d)", ids[i], i, n_vocab);
            return free(ids), -1;
        }
    *out = ids;
    return 0;
}

// Checks and decompresses the payload, then restores its first k positions.
static int restore_payload(const uint8_t *b, const pc_header *h, model *m, int k, char *err) {
    const uint8_t *p = b + PCACHE_HEADER_BYTES + 4ull * h->n_tokens;
    size_t plen = (size_t)h->payload_bytes;
    if (pc_hash64(p, plen, 0) != h->payload_hash) return errf(err, "corrupt payload (checksum mismatch)");
    bigbuf kv;
    if (big_alloc(&kv, model_kv_bytes(m, (int)h->n_tokens), err)) return -1;
    int rc = decompress_kv(p, plen, kv.p, kv.size, err);
    if (!rc) {
        char e2[ERR_LEN];
        rc = model_kv_import(m, k, kv.p, (int)h->n_tokens, (int)h->swa_floor, e2);
        if (rc) model_rewind(m, 0), errf(err, "cannot restore the KV: %s", e2);
    }
    big_free(&kv);
    return rc;
}

// Everything after open: the file's size bytes are mapped at b.
static int load_mapped(const uint8_t *b, uint64_t size, model *m, const char *model_path, const int32_t *ids,
                       int n_ids, int32_t **cached, int *n_cached, char *err) {
    pc_header h, want;
    int32_t *cids = NULL;
    if (read_header(b, size, &h, err)) return -1;
    expected_header(m, model_path, 0, &want);
    if (check_header(&h, &want, m, size, err) || read_ids(b, &h, model_cfg(m)->n_vocab, &cids, err)) return -1;
    int n = (int)h.n_tokens, k = 0;
    if (n_ids < 0) k = n;
    else while (k < n && k < n_ids && cids[k] == ids[k]) k++;
    if (h.swa_floor > h.n_tokens) return free(cids), errf(err, "corrupt header (sliding-window floor %u of %u "
                                                           "positions)", h.swa_floor, h.n_tokens);
    // the sliding-window layers hold positions swa_floor.. only: a prefix whose
    // next token reads an earlier one cannot be continued
    if (!model_kv_usable(m, k, (int)h.swa_floor)) k = 0;
    if (k == 0) model_rewind(m, 0);  // nothing to restore: the payload is not even read
    else if (restore_payload(b, &h, m, k, err)) return free(cids), -1;
    if (n_cached) *n_cached = n;
    if (cached) *cached = cids;
    else free(cids);
    return k;
}

int pcache_load(const char *path, model *m, const char *model_path, const int32_t *ids, int n_ids,
                int32_t **cached_ids, int *n_cached, char *err) {
    if (cached_ids) *cached_ids = NULL;
    if (n_cached) *n_cached = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errf(err, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) return close(fd), errf(err, "cannot stat: %s", strerror(errno));
    if (!S_ISREG(st.st_mode)) return close(fd), errf(err, "%s", S_ISDIR(st.st_mode) ? "is a directory" : "not a regular file");
    if (st.st_size == 0) return close(fd), errf(err, "empty file");
    // mapped, not read: copying tens of MB into fresh memory costs more than decompressing it
    size_t size = (size_t)st.st_size;
    void *b = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (b == MAP_FAILED) return errf(err, "cannot map: %s", strerror(errno));
    int k = load_mapped(b, size, m, model_path, ids, n_ids, cached_ids, n_cached, err);
    munmap(b, size);
    return k;
}

int pcache_prompt_restore(const char *path, model *m, const char *model_path, const int32_t *ids, int n,
                          int *save, char *warn) {
    warn[0] = 0;
    struct stat st;
    if (stat(path, &st)) {  // absent: a cold run that writes it; anything else: say why
        *save = errno == ENOENT;
        if (errno != ENOENT) errf(warn, "cannot stat: %s", strerror(errno));
        return 0;
    }
    *save = S_ISREG(st.st_mode);
    int k = pcache_load(path, m, model_path, ids, n, NULL, NULL, warn);
    if (k < 0) return 0;
    *save = k < n;  // the file lacks part of the prompt (or diverges from it)
    if (k == n) k = model_rewind(m, k - 1);
    return k;
}
