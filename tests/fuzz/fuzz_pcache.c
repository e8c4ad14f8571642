// tests/fuzz/fuzz_pcache.c — a prompt-cache file (pcache.h's format) read by
// pcache_prompt_restore (what `--prompt-cache FILE` runs) and by pcache_load
// for the chat's /load, into models/stories260K.gguf.
//
// The file's checksums and the writer's identity (model hash and size, the
// backend's kernels) would stop nearly every mutation at the first check, so
// before the input is read this harness overwrites those fields with what
// this model on this machine writes (taken from a pcache_save at start-up)
// and recomputes the three checksums over the bytes the input's own header
// points at: the fuzzer then reaches the size checks, the token ids, the
// zstd payload and the restore. Seeds (tests/fuzz/pcache/seed/) are files
// written by `quill --prompt-cache`.
#include <string.h>

#include "fuzz.h"
#include "model.h"
#include "pcache.h"
#include "util.h"

#define MODEL "models/stories260K.gguf"

static model *M;                             // loaded once
static uint8_t ident[PCACHE_HEADER_BYTES];   // a header this model writes on this machine
static const int32_t PROMPT[] = {1, 403, 407, 261, 378, 2, 3, 4, 5, 6, 7, 8};  // the seeds' prompt starts so

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char err[ERR_LEN], tmp[] = "/tmp/fuzz_pcache_XXXXXX";
    const model_opts o = {.n_threads = 1, .n_ctx = 64};
    const int n = sizeof PROMPT / sizeof *PROMPT;
    if (model_load(&M, MODEL, &o, err)) fuzz_die("%s", err);
    float *logits = malloc(sizeof(float) * (size_t)model_cfg(M)->n_vocab);
    int fd = mkstemp(tmp);
    if (!logits || fd < 0 || model_forward(M, PROMPT, n, 0, logits, err) || pcache_save(tmp, M, MODEL, PROMPT, n, err))
        fuzz_die("cannot write a prompt cache: %s", err);
    close(fd);  // pcache_save renamed a new file over it
    FILE *f = fopen(tmp, "rb");
    if (!f || fread(ident, 1, sizeof ident, f) != sizeof ident) fuzz_die("cannot read %s back", tmp);
    fclose(f);
    unlink(tmp);
    free(logits);
    return 0;
}

static uint32_t get32(const uint8_t *b, size_t off) { uint32_t v; memcpy(&v, b + off, 4); return v; }
static uint64_t get64(const uint8_t *b, size_t off) { uint64_t v; memcpy(&v, b + off, 8); return v; }
static void put64(uint8_t *b, size_t off, uint64_t v) { memcpy(b + off, &v, 8); }

// The identity fields (model hash and size at 16..31, backend at 80..143) and
// the checksums (payload at 64, ids at 72, header at 184), as pcache.h lays them out.
static void fix_up(uint8_t *b, size_t size) {
    if (size < PCACHE_HEADER_BYTES) return;
    memcpy(b + 16, ident + 16, 16);
    memcpy(b + 80, ident + 80, 64);
    const uint64_t ids_bytes = 4ull * get32(b, 44), payload_bytes = get64(b, 56), body = size - PCACHE_HEADER_BYTES;
    if (ids_bytes <= body) {
        put64(b, 72, pc_hash64(b + PCACHE_HEADER_BYTES, ids_bytes, 0));
        if (payload_bytes <= body - ids_bytes)
            put64(b, 64, pc_hash64(b + PCACHE_HEADER_BYTES + ids_bytes, payload_bytes, 0));
    }
    put64(b, 184, pc_hash64(b, 184, 0));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *b = malloc(size ? size : 1);
    if (!b) return 0;
    memcpy(b, data, size);
    fix_up(b, size);
    char path[64], warn[ERR_LEN];
    int fd = fuzz_file(b, size, path), save;
    free(b);
    model_rewind(M, 0);
    int k = pcache_prompt_restore(path, M, MODEL, PROMPT, sizeof PROMPT / sizeof *PROMPT, &save, warn);
    if (k != model_len(M)) {
        fprintf(stderr, "pcache_prompt_restore returned %d but the cache holds %d positions\n", k, model_len(M));
        abort();
    }
    int32_t *ids = NULL;
    int n = 0;
    pcache_load(path, M, MODEL, NULL, -1, &ids, &n, warn);
    free(ids);
    close(fd);
    return 0;
}
