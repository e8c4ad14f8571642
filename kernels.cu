// kernels.cu — the CUDA backend: backend.h's op table on an NVIDIA GPU
// (CUDA C, cuBLAS/cuBLASLt). cpu.c is the reference of every op;
// tests/test_backend_ops.c runs both on random inputs and compares.
//
// Weights. upload() copies each tensor once from the mmap into device memory,
// still quantized, repacked where the GGUF block is not a multiple of 16 bytes
// (see dl_make): quants in one plane of 16-byte-aligned rows, scales in a
// second plane. Q4_K and Q5_K keep their GGUF blocks (144 and 176 bytes).
// The 4-bit codes of IQ4_NL, IQ4_XS and MXFP4 become their int8 values by a
// byte permutation (lut4) before the integer dot.
//
// Decode (matmul with few tokens): one kernel per weight type, one warp per
// weight row, each lane loading 16 bytes of quants per step (several steps in
// flight: the loop is unrolled); the activation is first quantized to q8_1
// (blocks of 32: int8 + float scale d + d·Σq; a decode pass's rmsnorm writes
// it as it normalizes), so every block's dot product is integer (dp4a) and
// the weights are never dequantized into memory. Q4_K/Q5_K rows are
// prefetched into L2 whole before the loads. Float
// weights (F32/F16/BF16) multiply the float activation directly.
//
// Prefill (matmul over a prompt): quantized weights are dequantized tile by
// tile (GEMM_TILE_ELEMS elements, bounded scratch) to fp16 and multiplied with
// cuBLASLt (tensor cores, fp32 accumulation); F16/BF16 weights go to cuBLASLt
// as they are, F32 to cublasSgemm. backend.h's contract — prompt rows may
// depend only on their PREFILL_TILE, later rows are computed exactly as alone
// — is kept by running one cuBLASLt algorithm per weight shape, chosen once
// with split-K reductions excluded (so a row's sum does not depend on how many
// rows share the call), and every row after the prompt with the decode kernel.
//
// Attention: one split-K ("flash-decoding") kernel for every token. The keys
// of a sequence are cut into splits of a fixed length (chunk: depends on the
// context capacity and the GPU, never on the pass); a CTA runs one kv head
// (all the query heads that share it), one split and TQ tokens of one
// sequence, streaming K/V through shared memory 32 positions at a time with
// an online softmax; a merge kernel combines the splits. TQ > 1 (prompts)
// loads each K/V row once for TQ queries; each token's arithmetic is the same
// for every TQ, so a token's attention never depends on what shares its pass.
//
// Errors: every CUDA/cuBLAS call is checked (CK/BK: file:line and the call);
// ops that return void record the first failure in the backend, `status`
// reports it. No global mutable state: handles and scratch live in `backend`.
//
// Files. This one: the backend's life (init, free, device count, memory,
// copies, upload, scratch and the activation caches), CUDA graphs, the
// roofline and the op table. kernels_qhd.cuh: the host/device arithmetic
// (weight layout, dequantization, q8_1, per-type dot products, rope, the
// attention plan); kernels_common.cuh: the backend struct and what the files
// share. kernels_matvec.cu: decode matmul; kernels_gemm.cu: prompt matmul
// (dequantize + cuBLASLt); kernels_elementwise.cu: embed, rmsnorm, add,
// swiglu, geglu, scale, rope; kernels_attention.cu: KV store and attention;
// kernels_moe.cu: mixture of experts; kernels_sample.cu: the sampler;
// kernels_selftest.cu: cuda_host_selftest.

#include <dlfcn.h>
#include <unistd.h>

#include "kernels_common.cuh"

// ---- cuBLAS, the stream, scratch, memory, weights ------------------------------------

static void blas_close(blas_api *a) {
    if (a->lib_lt) dlclose(a->lib_lt);
    if (a->lib_blas) dlclose(a->lib_blas);
    memset(a, 0, sizeof *a);
}

// Opens the cuBLAS libraries this file was compiled against; 0, or -1 with err.
static int blas_open(blas_api *a, char *err) {
    char name[64];
    snprintf(name, sizeof name, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    if (!(a->lib_blas = dlopen(name, RTLD_NOW | RTLD_LOCAL))) return errf(err, "cannot load %s: %s", name, dlerror());
    snprintf(name, sizeof name, "libcublasLt.so.%d", CUBLAS_VER_MAJOR);
    if (!(a->lib_lt = dlopen(name, RTLD_NOW | RTLD_LOCAL))) return errf(err, "cannot load %s: %s", name, dlerror());
    const char *missing = NULL;
#define BLAS_LOAD(f) if (!(a->p_##f = (decltype(a->p_##f))dlsym(a->lib_blas, BLAS_STR(f)))) missing = BLAS_STR(f);
#define LT_LOAD(f) if (!(a->p_##f = (decltype(a->p_##f))dlsym(a->lib_lt, BLAS_STR(f)))) missing = BLAS_STR(f);
    BLAS_FNS(BLAS_LOAD)
    BLAS_LOAD(cublasGemmEx)
    LT_FNS(LT_LOAD)
    if (missing) return errf(err, "cuBLAS has no symbol %s", missing);
    return 0;
}

// Waits for the stream; the staging arena is free again after it.
int stream_sync(backend *b) {
    if (CK(cudaStreamSynchronize(b->stream))) return -1;
    b->stage_used = 0;
    return 0;
}

void graphs_drop(backend *b) {
    for (int i = 0; i < BACKEND_GRAPHS; i++)
        if (b->graph[i]) {
            CK(cudaGraphExecDestroy(b->graph[i]));
            b->graph[i] = NULL;
        }
}

// Scratch buffer `which` with room for bytes, or NULL (failure recorded, or
// the capture marked broken: memory cannot move while a graph is recorded).
// Growing frees the old buffer, so recorded graphs that used it are dropped.
void *scratch(backend *b, int which, size_t bytes) {
    if (bytes <= b->scr_cap[which]) return b->scr[which];
    if (b->capturing) {
        b->capture_broken = 1;
        return NULL;
    }
    graphs_drop(b);
    act_forget(b);
    if (b->scr[which]) {
        if (stream_sync(b) || CK(cudaFree(b->scr[which]))) return NULL;
        b->scr[which] = NULL;
        b->scr_cap[which] = 0;
    }
    bytes = (bytes + bytes / 4 + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);  // headroom, whole MiB
    if (CK(cudaMalloc(&b->scr[which], bytes))) return NULL;
    b->scr_cap[which] = bytes;
    return b->scr[which];
}

static const char *cuda_describe(backend *b) { return b->desc; }

static void *cuda_alloc(backend *b, size_t bytes) {
    void *p = NULL;
    if (b->capturing) return b->capture_broken = 1, (void *)NULL;
    if (CK(cudaMalloc(&p, bytes ? bytes : 1))) return NULL;
    // on b->stream: a plain cudaMemset runs on the legacy stream, which the
    // non-blocking b->stream does not wait for (later writes could be zeroed)
    if (CK(cudaMemsetAsync(p, 0, bytes, b->stream))) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_release(backend *b, void *p) {
    act_forget(b);
    if (b->capturing) {  // a free (and its sync) would invalidate the capture: a caller's bug
        b->capture_broken = 1;
        fail(b, "release: a graph is being recorded");
        return;
    }
    if (p && !stream_sync(b)) CK(cudaFree(p));
}

static void cuda_to_host(backend *b, void *dst, const void *src, size_t bytes) {
    if (b->capturing) {
        b->capture_broken = 1;
        return;
    }
    if (!CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, b->stream))) stream_sync(b);
}

// Stream-ordered; src may be reused on return. Small copies (a decode step's
// token map) go through the pinned arena, so they never make the driver wait
// for the stream; the arena is recycled whenever the stream is idle.
static void cuda_to_device(backend *b, void *dst, const void *src, size_t bytes) {
    if (b->capturing) {  // a recorded copy would read src at every replay
        b->capture_broken = 1;
        return;
    }
    act_forget(b);
    if (bytes <= STAGE_MAX && b->stage) {
        if (b->stage_used + bytes > STAGE_BYTES && stream_sync(b)) return;
        uint8_t *p = b->stage + b->stage_used;
        memcpy(p, src, bytes);
        b->stage_used += (bytes + 15) & ~(size_t)15;
        CK(cudaMemcpyAsync(dst, p, bytes, cudaMemcpyHostToDevice, b->stream));
        return;
    }
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, b->stream));
}

static int cuda_status(backend *b, char *err) { return b->failed ? errf(err, "%s", b->err) : 0; }

static int track_weight(backend *b, void *p) {
    if (b->n_wbuf == b->cap_wbuf) {
        int cap = b->cap_wbuf ? 2 * b->cap_wbuf : 256;
        void **nw = (void **)realloc(b->wbuf, sizeof *nw * (size_t)cap);
        if (!nw) return fail(b, "out of host memory");
        b->wbuf = nw, b->cap_wbuf = cap;
    }
    b->wbuf[b->n_wbuf++] = p;
    return 0;
}

static int type_supported(uint32_t t) {
    switch (t) {
    case Q_F32: case Q_F16: case Q_BF16: case Q_Q8_0: case Q_Q4_0: case Q_Q4_1: case Q_Q5_0: case Q_Q5_1:
    case Q_Q2_K: case Q_Q3_K: case Q_Q4_K: case Q_Q5_K: case Q_Q6_K: case Q_IQ4_NL: case Q_IQ4_XS: case Q_MXFP4: return 1;
    default: return 0;
    }
}

// The weight into device memory in dl_make's layout; w->data then points there.
static int cuda_upload(backend *b, qmat *w, char *err) {
    char tb[16];
    if (b->capturing) return b->capture_broken = 1, errf(err, "upload: a graph is being recorded");
    const qtype_info *qi = qtype_get(w->type);
    if (!qi || !type_supported(w->type))
        return errf(err, "the CUDA backend has no kernels for type %s", qtype_name(w->type, tb));
    if (w->cols % qi->block || w->row_bytes != qtype_row_bytes(w->type, w->cols))
        return errf(err, "a %s weight of %lld columns: expected a multiple of %lld", qi->name,
                    (long long)w->cols, (long long)qi->block);
    const dlayout L = dl_make(w->type, w->rows, w->cols);
    void *d = NULL;
    if (CK(cudaMalloc(&d, L.bytes))) return errf(err, "%s", b->err);
    if (track_weight(b, d)) return cudaFree(d), errf(err, "%s", b->err);
    const uint8_t *src = (const uint8_t *)w->data;
    if (dl_is_raw(w->type, w->cols)) {
        // on b->stream and waited for (see cuda_alloc)
        if (CK(cudaMemcpyAsync(d, src, (size_t)w->rows * w->row_bytes, cudaMemcpyHostToDevice, b->stream)) ||
            stream_sync(b))
            return errf(err, "%s", b->err);
    } else {
        uint8_t *host = (uint8_t *)calloc(1, L.bytes);
        if (!host) return errf(err, "out of host memory repacking a %s weight (%zu bytes)", qi->name, L.bytes);
        for (int64_t r = 0; r < w->rows; r++) dl_pack_row(w->type, src + (size_t)r * w->row_bytes, w->cols, &L, r, host);
        const int bad = CK(cudaMemcpyAsync(d, host, L.bytes, cudaMemcpyHostToDevice, b->stream)) || stream_sync(b);
        free(host);
        if (bad) return errf(err, "%s", b->err);
    }
    w->data = d;
    return 0;
}

// SCR_ACT laid out for a q8_1 activation [n, cols]: a->q, a->ds.
int act_buf(backend *b, int n, int64_t cols, act_t *a) {
    const size_t qbytes = (size_t)round_up((int64_t)n * cols, 256);
    uint8_t *buf = (uint8_t *)scratch(b, SCR_ACT, qbytes + (size_t)n * (cols / 32) * sizeof(float2));
    if (!buf) return -1;
    a->q = (const int8_t *)buf;
    a->ds = (const float2 *)(buf + qbytes);
    return 0;
}

// A matmul wrote [y, y + bytes): the cached forms of an x there are stale.
void act_written(backend *b, const float *y, size_t bytes) {
    const char *y0 = (const char *)y, *y1 = y0 + bytes;
    const float *srcs[2] = {b->act_src, b->half_src};
    const int64_t lens[2] = {b->act_len, (int64_t)b->half_n * b->half_cols};
    for (int i = 0; i < 2; i++)
        if (srcs[i] && (const char *)srcs[i] < y1 && (const char *)(srcs[i] + lens[i]) > y0) act_forget(b);
}

// ---- graphs, limits ---------------------------------------------------------------

static int cuda_graph_begin(backend *b, int key, char *err) {
    if (key < 0 || key >= BACKEND_GRAPHS) return errf(err, "graph key %d is not in [0, %d)", key, BACKEND_GRAPHS);
    if (b->capturing) return errf(err, "graph %d: already recording", key);
    if (b->graph[key]) {
        if (CK(cudaGraphExecDestroy(b->graph[key]))) return errf(err, "%s", b->err);
        b->graph[key] = NULL;
    }
    act_forget(b);
    if (CK(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal))) return errf(err, "%s", b->err);
    b->capturing = 1;
    b->capture_broken = 0;
    return 0;
}

#ifndef QUILL_SIMT  // (the emulation runs a graph's kernels one after another)
// One of our kernels (named k_...: each begins with grid_dep_wait), not a
// cuBLAS one, which may not wait.
static int waits_first(cudaGraphNode_t n) {
    cudaGraphNodeType t;
    cudaKernelNodeParams p;
    const char *name = NULL;
    if (cudaGraphNodeGetType(n, &t) != cudaSuccess || t != cudaGraphNodeTypeKernel ||
        cudaGraphKernelNodeGetParams(n, &p) != cudaSuccess || cudaFuncGetName(&name, p.func) != cudaSuccess || !name) {
        (void)cudaGetLastError();
        return 0;
    }
    if (name[0] == '_' && name[1] == 'Z')  // a mangled name: _Z, its length, the name
        for (name += 2; *name >= '0' && *name <= '9'; name++) {}
    return name[0] == 'k' && name[1] == '_';
}

// Each kernel-to-kernel edge of a recorded graph into one of ours becomes
// programmatic (see grid_dep_wait). An edge the runtime refuses to change
// stays as it was; -1 only if one could not be put back.
static int programmatic_edges(backend *b, cudaGraph_t g) {
    size_t n = 0;
    if (cudaGraphGetEdges(g, NULL, NULL, NULL, &n) != cudaSuccess || n == 0) return (void)cudaGetLastError(), 0;
    int bad = 0;
    cudaGraphNode_t *from = (cudaGraphNode_t *)calloc(n, sizeof *from), *to = (cudaGraphNode_t *)calloc(n, sizeof *to);
    cudaGraphEdgeData *ed = (cudaGraphEdgeData *)calloc(n, sizeof *ed);
    if (from && to && ed && cudaGraphGetEdges(g, from, to, ed, &n) == cudaSuccess)
        for (size_t i = 0; i < n; i++) {
            cudaGraphNodeType tf;
            if (ed[i].type != cudaGraphDependencyTypeDefault || cudaGraphNodeGetType(from[i], &tf) != cudaSuccess ||
                tf != cudaGraphNodeTypeKernel || !waits_first(to[i]))
                continue;
            cudaGraphEdgeData pe = {};
            pe.from_port = cudaGraphKernelNodePortProgrammatic;
            pe.type = cudaGraphDependencyTypeProgrammatic;
            if (cudaGraphRemoveDependencies(g, &from[i], &to[i], &ed[i], 1) != cudaSuccess) break;
            if (cudaGraphAddDependencies(g, &from[i], &to[i], &pe, 1) != cudaSuccess) {
                (void)cudaGetLastError();
                bad = CK(cudaGraphAddDependencies(g, &from[i], &to[i], &ed[i], 1));
                break;
            }
        }
    (void)cudaGetLastError();
    free(from), free(to), free(ed);
    return bad ? -1 : 0;
}
#else
static int programmatic_edges(backend *, cudaGraph_t) { return 0; }
#endif

// A capture that an op could not record is not a failure of the backend: the
// caller runs the ops directly (which grows the scratch) and records later.
static int cuda_graph_end(backend *b, int key, char *err) {
    if (!b->capturing) return errf(err, "graph %d: not recording", key);
    cudaGraph_t g = NULL;
    const cudaError_t e = cudaStreamEndCapture(b->stream, &g);
    b->capturing = 0;
    act_forget(b);
    if (e != cudaSuccess || b->capture_broken || !g) {
        if (g) cudaGraphDestroy(g);
        (void)cudaGetLastError();  // clear a capture error: nothing ran
        return errf(err, "graph %d: %s", key,
                    e != cudaSuccess ? cudaGetErrorString(e) : "an op needed memory or a copy while recording");
    }
    cudaGraphExec_t ex = NULL;
    const int bad = programmatic_edges(b, g) || CK(cudaGraphInstantiate(&ex, g, 0));
    CK(cudaGraphDestroy(g));
    if (bad) return errf(err, "%s", b->err);
    b->graph[key] = ex;
    return 0;
}

static int cuda_graph_replay(backend *b, int key, char *err) {
    if (key < 0 || key >= BACKEND_GRAPHS || !b->graph[key]) return errf(err, "no recorded graph %d", key);
    act_forget(b);
    if (CK(cudaGraphLaunch(b->graph[key], b->stream))) return errf(err, "%s", b->err);
    return 0;
}

#ifndef QUILL_SIMT  // (the emulation has no limits to measure: cuda_roofline)
// Device-memory bandwidth (device-to-device copies of up to 1 GiB) and bf16
// GEMM throughput (8192³ through cuBLAS), best of a few timed repetitions.
static int measure_roofline(backend *b) {
    size_t free_b = 0, total_b = 0;
    if (CK(cudaMemGetInfo(&free_b, &total_b)) || stream_sync(b)) return -1;
    size_t bytes = (size_t)1 << 30;
    while (bytes > free_b / 4 && bytes > ((size_t)64 << 20)) bytes /= 2;
    int64_t N = 8192;
    while ((size_t)N * N * 8 > free_b / 2 && N > 1024) N /= 2;
    void *src = NULL, *dst = NULL, *A = NULL, *B = NULL, *C = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    const float one = 1.0f, zero = 0.0f;
    float ms = 0;
    int bad = CK(cudaEventCreate(&e0)) || CK(cudaEventCreate(&e1)) || CK(cudaMalloc(&src, bytes)) ||
              CK(cudaMalloc(&dst, bytes)) || CK(cudaMemsetAsync(src, 1, bytes, b->stream));
    for (int rep = 0; !bad && rep < 4; rep++) {
        bad = CK(cudaEventRecord(e0, b->stream)) || CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, b->stream)) ||
              CK(cudaEventRecord(e1, b->stream)) || CK(cudaEventSynchronize(e1)) || CK(cudaEventElapsedTime(&ms, e0, e1));
        if (!bad && rep > 0 && 2.0 * bytes / (ms * 1e-3) > b->roof_bw) b->roof_bw = 2.0 * bytes / (ms * 1e-3);
    }
    if (src) CK(cudaFree(src));
    if (dst) CK(cudaFree(dst));
    bad = bad || CK(cudaMalloc(&A, (size_t)N * N * 2)) || CK(cudaMalloc(&B, (size_t)N * N * 2)) ||
          CK(cudaMalloc(&C, (size_t)N * N * 4)) || CK(cudaMemsetAsync(A, 0x3c, (size_t)N * N * 2, b->stream)) ||
          CK(cudaMemsetAsync(B, 0x3c, (size_t)N * N * 2, b->stream));
    for (int rep = 0; !bad && rep < 4; rep++) {
        bad = CK(cudaEventRecord(e0, b->stream)) ||
              BK(b->api.p_cublasGemmEx(b->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)N, (int)N, &one, A, CUDA_R_16BF, (int)N, B,
                              CUDA_R_16BF, (int)N, &zero, C, CUDA_R_32F, (int)N, CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT)) ||
              CK(cudaEventRecord(e1, b->stream)) || CK(cudaEventSynchronize(e1)) || CK(cudaEventElapsedTime(&ms, e0, e1));
        const double f = 2.0 * N * N * N / (ms * 1e-3);
        if (!bad && rep > 0 && f > b->roof_flops) b->roof_flops = f;
    }
    if (A) CK(cudaFree(A));
    if (B) CK(cudaFree(B));
    if (C) CK(cudaFree(C));
    if (e0) CK(cudaEventDestroy(e0));
    if (e1) CK(cudaEventDestroy(e1));
    return bad || b->failed ? -1 : 0;
}
#endif

static int cuda_roofline(backend *b, double *mem_bw, double *gemm_flops, char *err) {
    if (b->capturing) return errf(err, "roofline: recording a graph");
#ifdef QUILL_SIMT  // the emulation's speed says nothing of a GPU's: no limits (0)
    *mem_bw = *gemm_flops = 0;
#else
    if (!(b->roof_bw > 0) && measure_roofline(b)) return errf(err, "%s", b->err);
    *mem_bw = b->roof_bw;
    *gemm_flops = b->roof_flops;
#endif
    return 0;
}

// ---- init / free ------------------------------------------------------------------

static void cuda_free(backend *b) {
    if (!b) return;
    if (b->stream) cudaStreamSynchronize(b->stream);
    graphs_drop(b);
    for (int i = 0; i < SCR_COUNT; i++) if (b->scr[i]) CK(cudaFree(b->scr[i]));
    for (int i = 0; i < b->n_wbuf; i++) CK(cudaFree(b->wbuf[i]));
    free(b->wbuf);
    if (b->blas_ws) CK(cudaFree(b->blas_ws));
    if (b->d_id) CK(cudaFree(b->d_id));
    if (b->d_cand) CK(cudaFree(b->d_cand));
    if (b->h_id) CK(cudaFreeHost(b->h_id));
    if (b->stage) CK(cudaFreeHost(b->stage));
    free(b->moe_host);
    if (b->lt) BK(b->api.p_cublasLtDestroy(b->lt));
    if (b->blas) BK(b->api.p_cublasDestroy(b->blas));
    if (b->stream) CK(cudaStreamDestroy(b->stream));
    blas_close(&b->api);
    free(b);
}

static int cuda_init(backend **out, int n_threads, char *err) {
    (void)n_threads;  // the GPU needs no host threads
    *out = NULL;
    char why[ERR_LEN];
    if (cuda_device_count(why) <= 0) return errf(err, "no usable CUDA device: %s", why);
    backend *b = (backend *)calloc(1, sizeof *b);
    if (!b) return errf(err, "out of memory");
    cudaDeviceProp prop;
    char e2[ERR_LEN];
    if (blas_open(&b->api, e2)) {
        blas_close(&b->api);
        free(b);
        return errf(err, "no usable CUDA: %s", e2);
    }
    if (CK(cudaSetDevice(0)) || CK(cudaGetDeviceProperties(&prop, 0)) ||
        CK(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking)) || BK(b->api.p_cublasCreate(&b->blas)) ||
        BK(b->api.p_cublasSetStream(b->blas, b->stream)) || BK(b->api.p_cublasLtCreate(&b->lt)) ||
        CK(cudaMalloc(&b->blas_ws, LT_WORKSPACE)) || BK(b->api.p_cublasSetWorkspace(b->blas, b->blas_ws, LT_WORKSPACE)) ||
        CK(cudaMallocHost((void **)&b->h_id, sizeof(int32_t))) || CK(cudaMalloc((void **)&b->d_id, sizeof(int32_t))) ||
        CK(cudaMallocHost((void **)&b->stage, STAGE_BYTES)) ||
        attention_allow_smem(b, (int)prop.sharedMemPerBlockOptin) || sample_init(b)) {
        errf(err, "%s", b->err);
        cuda_free(b);
        return -1;
    }
    b->sm_count = prop.multiProcessorCount;
    b->smem_optin = prop.sharedMemPerBlockOptin;
    const char *pt = getenv("QUILL_GEMM_PER_TILE");
    b->gemm_per_tile = pt && pt[0] == '1';
    snprintf(b->desc, sizeof b->desc, "cuda, %.256s (sm_%d%d, %d SMs, %.0f GiB)", prop.name, prop.major, prop.minor,
             prop.multiProcessorCount, (double)prop.totalGlobalMem / (1 << 30));
    *out = b;
    return 0;
}

extern "C" int cuda_device_count(char *why) {
    // Without the NVIDIA driver's control device (or WSL2's GPU device) there
    // is no GPU to find, and asking the runtime would cost every CPU run a few
    // hundred ms. The SIMT emulation is a device without a driver.
#ifndef QUILL_SIMT
    if (access("/dev/nvidiactl", F_OK) != 0 && access("/dev/dxg", F_OK) != 0)
        return snprintf(why, ERR_LEN, "the NVIDIA driver is not loaded: neither /dev/nvidiactl nor /dev/dxg exists"), -1;
#endif
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, ERR_LEN, "%s", cudaGetErrorString(e));
        return 0;
    }
    if (n <= 0) return snprintf(why, ERR_LEN, "no CUDA device is present"), 0;
    cudaDeviceProp p;
    if ((e = cudaGetDeviceProperties(&p, 0)) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, ERR_LEN, "device 0: %s", cudaGetErrorString(e));
        return 0;
    }
    if (p.major * 10 + p.minor < QUILL_CUDA_ARCH) {
        snprintf(why, ERR_LEN, "device 0 (%s) has compute capability %d.%d; this quill has kernels for sm_%d "
                 "(rebuild with make CUDA_ARCH=sm_%d%d)", p.name, p.major, p.minor, QUILL_CUDA_ARCH, p.major, p.minor);
        return 0;
    }
    return n;
}

// Device memory cudaMalloc can still hand out (backend_ops.mem_available):
// model_load refuses a KV cache or activations larger than this up front.
// A failure is recorded (status reports it) and bounds nothing.
static size_t cuda_mem_available(backend *b) {
    size_t free_b = 0, total_b = 0;
    return CK(cudaMemGetInfo(&free_b, &total_b)) ? SIZE_MAX : free_b;
}

extern "C" const backend_ops cuda_backend = {
    .name = "cuda",
    .host_weights = 0,  // upload copies each weight to the device
    .init = cuda_init,
    .free = cuda_free,
    .describe = cuda_describe,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .to_host = cuda_to_host,
    .to_device = cuda_to_device,
    .upload = cuda_upload,
    .embed = cuda_embed,
    .rmsnorm = cuda_rmsnorm,
    .add_rmsnorm = cuda_add_rmsnorm,
    .matmul = cuda_matmul,
    .add_bias = cuda_add_bias,
    .add = cuda_add,
    .swiglu = cuda_swiglu,
    .geglu = cuda_geglu,
    .scale = cuda_scale,
    .rope = cuda_rope,
    .kv_store = cuda_kv_store,
    .rope_store = cuda_rope_store,
    .attention = cuda_attention,
    .moe_route = cuda_moe_route,
    .moe_group = cuda_moe_group,
    .moe_matmul = cuda_moe_matmul,
    .moe_combine = cuda_moe_combine,
    .swiglu_oai = cuda_swiglu_oai,
    .matmul_set = cuda_matmul_set,
    .status = cuda_status,
    .sample = cuda_sample,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .graph_replay = cuda_graph_replay,
    .roofline = cuda_roofline,
    .mem_available = cuda_mem_available,
};
