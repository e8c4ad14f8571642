// model.c — weights from a GGUF file and the transformer forward pass.
//
// One forward pass serves every architecture quill runs (llama, qwen2, qwen3):
// they differ only in optional tensors (q/k/v biases, per-head q/k norms) and
// the rope pairing, which are data here, not branches on the architecture.
// The pass is written over the backend op table and never asks which backend
// runs it.
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "util.h"

#define DEFAULT_CTX 4096  // used when the model's own context is larger (KV memory)
#define MAX_BATCH 512     // prompt tokens per forward chunk: bounds activation memory
#define OUT_CHUNK 32      // tokens per output-projection chunk: bounds the logits buffer

struct model {
    gguf_file gguf;          // the mmapped file; weights point into it
    model_config cfg;
    const backend_ops *ops;
    backend *be;
    qmat tok_embd;           // [n_vocab, dim]
    qmat output_norm;        // [dim]
    qmat output;             // [n_vocab, dim] (tok_embd when tied)
    qmat rope_freqs;         // [n_rot/2] Llama-3 frequency divisors (data NULL when absent)
    layer_weights *layers;   // [n_layers]
    kvcache kv;
    size_t weight_bytes;     // bytes one decode step reads
    // activations: one backend allocation carved into these, for n_batch tokens
    int n_batch;
    void *act_mem;
    float *x;       // [n_batch, dim] residual stream
    float *xb;      // [n_batch, dim] normed input / projection output
    float *q;       // [n_batch, n_heads * head_dim]
    float *k, *v;   // [n_batch, kv_dim]
    float *att;     // [n_batch, n_heads * head_dim]
    float *hb, *hb2;  // [n_batch, ffn]
    float *logits;  // [OUT_CHUNK, n_vocab]
    int32_t *pos;   // host [n_batch]
};

static const char *ARCH_NAMES[] = {[ARCH_LLAMA] = "llama", [ARCH_QWEN2] = "qwen2", [ARCH_QWEN3] = "qwen3"};

// ---- metadata -------------------------------------------------------------

// Reads "<arch>.<suffix>" as u32. Returns 0, or -1 with err when required and absent.
static int meta_u32(const gguf_file *f, const char *arch, const char *suffix, uint32_t *out,
                    int required, char *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int r = gguf_get_u32(f, key, out, err);
    if (r == 1 && required) return errf(err, "missing metadata key '%s'", key);
    return r < 0 ? -1 : 0;
}

static int meta_f32(const gguf_file *f, const char *arch, const char *suffix, float *out, char *err) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return gguf_get_f32(f, key, out, err) < 0 ? -1 : 0;
}

static int read_rope_scaling(const gguf_file *f, const char *arch, model_config *c, char *err) {
    char key[128];
    gguf_str type = {"none", 4};
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (gguf_get_str(f, key, &type, err) < 0) return -1;
    float factor = 1.0f;
    if (meta_f32(f, arch, "rope.scaling.factor", &factor, err) < 0) return -1;
    if (gguf_str_eq(type, "none") || factor == 1.0f || factor == 0.0f) return 0;
    if (!gguf_str_eq(type, "linear"))
        return errf(err, "key '%s': rope scaling '%.*s' is not supported (quill knows none, linear)",
                    key, (int)type.len, type.ptr);
    if (!(factor > 0.0f)) return errf(err, "key '%s.rope.scaling.factor': must be > 0", arch);
    c->rope.freq_scale = 1.0f / factor;
    return 0;
}

static int read_config(const gguf_file *f, model_config *c, char *err) {
    gguf_str a;
    int r = gguf_get_str(f, "general.architecture", &a, err);
    if (r) return r < 0 ? -1 : errf(err, "missing metadata key 'general.architecture'");
    int found = 0;
    for (int i = 0; i < (int)(sizeof ARCH_NAMES / sizeof *ARCH_NAMES); i++)
        if (gguf_str_eq(a, ARCH_NAMES[i])) c->arch = i, found = 1;
    if (!found)
        return errf(err, "architecture '%.*s' is not supported (quill runs llama, qwen2, qwen3)",
                    (int)a.len, a.ptr);
    const char *an = ARCH_NAMES[c->arch];
    uint32_t dim, layers, heads, kv_heads = 0, ffn, ctx = 0, hd = 0, vd = 0, n_rot = 0;
    if (meta_u32(f, an, "embedding_length", &dim, 1, err) ||
        meta_u32(f, an, "block_count", &layers, 1, err) ||
        meta_u32(f, an, "attention.head_count", &heads, 1, err) ||
        meta_u32(f, an, "feed_forward_length", &ffn, 1, err) ||
        meta_u32(f, an, "attention.head_count_kv", &kv_heads, 0, err) ||
        meta_u32(f, an, "context_length", &ctx, 0, err) ||
        meta_u32(f, an, "attention.key_length", &hd, 0, err) ||
        meta_u32(f, an, "attention.value_length", &vd, 0, err) ||
        meta_u32(f, an, "rope.dimension_count", &n_rot, 0, err))
        return -1;
    if (!dim || !layers || !heads || !ffn || dim > (1u << 20) || layers > 4096 || heads > 4096 ||
        ffn > (1u << 24))
        return errf(err, "implausible hyperparameters: dim %u, layers %u, heads %u, ffn %u", dim,
                    layers, heads, ffn);
    if (!kv_heads) kv_heads = heads;
    if (!hd) hd = dim / heads;
    if (!vd) vd = hd;
    if (!n_rot) n_rot = hd;
    if (heads % kv_heads) return errf(err, "head_count %u is not a multiple of head_count_kv %u", heads, kv_heads);
    if (vd != hd) return errf(err, "value_length %u differs from key_length %u (not supported)", vd, hd);
    if (hd == 0 || hd > 1024 || n_rot > hd || n_rot % 2)
        return errf(err, "head_dim %u / rope dimension %u not supported (head_dim <= 1024, even rope dims)", hd, n_rot);
    *c = (model_config){.arch = c->arch, .dim = (int)dim, .n_layers = (int)layers,
                        .n_heads = (int)heads, .n_kv_heads = (int)kv_heads, .head_dim = (int)hd,
                        .ffn = (int)ffn, .n_ctx_train = (int)ctx, .rms_eps = 1e-5f};
    c->rope = (rope_cfg){.n_rot = (int)n_rot, .neox = c->arch != ARCH_LLAMA, .base = 10000.0f,
                         .freq_scale = 1.0f};
    if (meta_f32(f, an, "attention.layer_norm_rms_epsilon", &c->rms_eps, err) ||
        meta_f32(f, an, "rope.freq_base", &c->rope.base, err) || read_rope_scaling(f, an, c, err))
        return -1;
    if (!(c->rms_eps > 0.0f && c->rms_eps < 1.0f))
        return errf(err, "key '%s.attention.layer_norm_rms_epsilon': %g is not in (0, 1)", an, c->rms_eps);
    if (!(c->rope.base > 1.0f && c->rope.base < 1e30f))
        return errf(err, "key '%s.rope.freq_base': %g is not a finite number > 1", an, c->rope.base);
    return 0;
}

// ---- tensors --------------------------------------------------------------

// Looks up a tensor and checks it is [rows, cols] (vectors: rows == 1) and of
// a type quill computes with; vectors (norms, biases) must be F32.
static int get_tensor(model *m, qmat *out, const char *name, int64_t cols, int64_t rows,
                      int required, char *err) {
    *out = (qmat){0};
    const gguf_tensor *t = gguf_find_tensor(&m->gguf, name);
    if (!t) return required ? errf(err, "tensor '%s' is missing", name) : 0;
    char tb[16];
    int64_t t_rows = t->n_dims > 1 ? t->ne[1] : 1;
    if (t->ne[0] != cols || t_rows != rows || t->ne[2] != 1 || t->ne[3] != 1)
        return errf(err, "tensor '%s': expected shape [%lld, %lld], found [%lld, %lld, %lld, %lld]",
                    name, (long long)cols, (long long)rows, (long long)t->ne[0],
                    (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    const qtype_info *qi = qtype_get(t->type);
    if (!qi || !qi->compute)
        return errf(err, "tensor '%s' has type %s, which quill cannot compute with (it runs F32 F16 "
                    "BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K Q6_K)", name, qtype_name(t->type, tb));
    if (rows == 1 && t->type != Q_F32)
        return errf(err, "tensor '%s': expected type F32, found %s", name, qtype_name(t->type, tb));
    *out = (qmat){.type = t->type, .rows = rows, .cols = cols, .row_bytes = qtype_row_bytes(t->type, cols),
                  .data = t->data};
    if (m->ops->upload(m->be, out, err)) return -1;
    if (strcmp(name, "token_embd.weight")) m->weight_bytes += t->nbytes;
    return 0;
}

static int load_layer(model *m, int l, char *err) {
    const model_config *c = &m->cfg;
    layer_weights *L = &m->layers[l];
    const int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    const int bias = c->arch == ARCH_QWEN2, qk_norm = c->arch == ARCH_QWEN3;
    struct { qmat *w; const char *name; int64_t cols, rows; int required; } spec[] = {
        {&L->attn_norm, "attn_norm.weight", c->dim, 1, 1},
        {&L->wq, "attn_q.weight", c->dim, qd, 1},
        {&L->wk, "attn_k.weight", c->dim, kvd, 1},
        {&L->wv, "attn_v.weight", c->dim, kvd, 1},
        {&L->wo, "attn_output.weight", qd, c->dim, 1},
        {&L->bq, "attn_q.bias", qd, 1, bias},
        {&L->bk, "attn_k.bias", kvd, 1, bias},
        {&L->bv, "attn_v.bias", kvd, 1, bias},
        {&L->q_norm, "attn_q_norm.weight", c->head_dim, 1, qk_norm},
        {&L->k_norm, "attn_k_norm.weight", c->head_dim, 1, qk_norm},
        {&L->ffn_norm, "ffn_norm.weight", c->dim, 1, 1},
        {&L->w_gate, "ffn_gate.weight", c->dim, c->ffn, 1},
        {&L->w_up, "ffn_up.weight", c->dim, c->ffn, 1},
        {&L->w_down, "ffn_down.weight", c->ffn, c->dim, 1},
    };
    for (size_t i = 0; i < sizeof spec / sizeof *spec; i++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", l, spec[i].name);
        if (get_tensor(m, spec[i].w, name, spec[i].cols, spec[i].rows, spec[i].required, err)) return -1;
    }
    return 0;
}

static int load_weights(model *m, char *err) {
    model_config *c = &m->cfg;
    const gguf_tensor *emb = gguf_find_tensor(&m->gguf, "token_embd.weight");
    if (!emb) return errf(err, "tensor 'token_embd.weight' is missing");
    if (emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > (1 << 24))
        return errf(err, "tensor 'token_embd.weight': expected [%d, n_vocab]", c->dim);
    c->n_vocab = (int)emb->ne[1];
    if (get_tensor(m, &m->tok_embd, "token_embd.weight", c->dim, c->n_vocab, 1, err) ||
        get_tensor(m, &m->output_norm, "output_norm.weight", c->dim, 1, 1, err) ||
        get_tensor(m, &m->output, "output.weight", c->dim, c->n_vocab, 0, err) ||
        get_tensor(m, &m->rope_freqs, "rope_freqs.weight", c->rope.n_rot / 2, 1, 0, err))
        return -1;
    if (!m->output.data) {  // tied: the output projection reads the whole embedding
        m->output = m->tok_embd;
        m->weight_bytes += (size_t)c->n_vocab * m->tok_embd.row_bytes;
    }
    c->rope.freq_factors = m->rope_freqs.data;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return errf(err, "out of memory");
    for (int l = 0; l < c->n_layers; l++)
        if (load_layer(m, l, err)) return -1;
    return 0;
}

// One backend allocation carved into the activation buffers.
static int alloc_activations(model *m, char *err) {
    const model_config *c = &m->cfg;
    const size_t B = (size_t)m->n_batch, qd = (size_t)c->n_heads * c->head_dim,
                 kvd = (size_t)c->n_kv_heads * c->head_dim;
    float **bufs[] = {&m->x, &m->xb, &m->q, &m->k, &m->v, &m->att, &m->hb, &m->hb2, &m->logits};
    const size_t floats[] = {B * c->dim, B * c->dim, B * qd, B * kvd, B * kvd, B * qd,
                             B * c->ffn, B * c->ffn, (size_t)OUT_CHUNK * c->n_vocab};
    size_t total = 0;
    for (size_t i = 0; i < sizeof floats / sizeof *floats; i++) total += (floats[i] + 15) & ~(size_t)15;
    m->act_mem = m->ops->alloc(m->be, total * sizeof(float));
    m->pos = calloc(B, sizeof *m->pos);
    if (!m->act_mem || !m->pos) return errf(err, "out of memory for activations (%zu MiB)", total * 4 >> 20);
    float *p = m->act_mem;
    for (size_t i = 0; i < sizeof floats / sizeof *floats; i++) {
        *bufs[i] = p;
        p += (floats[i] + 15) & ~(size_t)15;
    }
    return 0;
}

static int init_context(model *m, int n_ctx, char *err) {
    int ctx = n_ctx > 0 ? n_ctx : m->cfg.n_ctx_train;
    if (ctx <= 0 || (n_ctx <= 0 && ctx > DEFAULT_CTX)) ctx = DEFAULT_CTX;
    if (ctx > (1 << 24)) return errf(err, "context of %d tokens is too large", ctx);
    m->n_batch = ctx < MAX_BATCH ? ctx : MAX_BATCH;
    if (kv_init(&m->kv, m->ops, m->be, m->cfg.n_layers, ctx, m->cfg.n_kv_heads * m->cfg.head_dim, err))
        return -1;
    return alloc_activations(m, err);
}

int model_load(model **out, const char *path, const model_opts *o, char *err) {
    *out = NULL;
    model *m = calloc(1, sizeof *m);
    if (!m) return errf(err, "out of memory");
    m->ops = o->ops ? o->ops : &cpu_backend;
    if (gguf_open(&m->gguf, path, err)) {  // err already names the path
        model_free(m);
        return -1;
    }
    char e2[ERR_LEN];
    if (read_config(&m->gguf, &m->cfg, e2) || m->ops->init(&m->be, o->n_threads, e2) ||
        load_weights(m, e2) || init_context(m, o->n_ctx, e2)) {
        errf(err, "%s: %s", path, e2);
        model_free(m);
        return -1;
    }
    *out = m;
    return 0;
}

void model_free(model *m) {
    if (!m) return;
    if (m->kv.k) kv_free(&m->kv);
    if (m->act_mem) m->ops->release(m->be, m->act_mem);
    if (m->be) m->ops->free(m->be);
    free(m->pos);
    free(m->layers);
    gguf_close(&m->gguf);
    free(m);
}

const model_config *model_cfg(const model *m) { return &m->cfg; }
const gguf_file *model_gguf(const model *m) { return &m->gguf; }
kvcache *model_kv(model *m) { return &m->kv; }
const char *model_backend_desc(model *m) { return m->ops->describe(m->be); }
size_t model_weight_bytes(const model *m) { return m->weight_bytes; }

// ---- forward --------------------------------------------------------------

// Attention block: x += Wo · attention(rope(Wq·norm(x)), cache ← rope(Wk·norm(x)), Wv·norm(x))
static void attention_block(model *m, const layer_weights *L, int l, int n, int pos0) {
    const backend_ops *o = m->ops;
    backend *b = m->be;
    const model_config *c = &m->cfg;
    const int hd = c->head_dim, kvd = c->n_kv_heads * hd;
    o->rmsnorm(b, m->xb, m->x, &L->attn_norm, n, c->dim, c->rms_eps);
    o->matmul(b, m->q, &L->wq, m->xb, n);
    o->matmul(b, m->k, &L->wk, m->xb, n);
    o->matmul(b, m->v, &L->wv, m->xb, n);
    if (L->bq.data) {
        o->add_bias(b, m->q, &L->bq, n, c->n_heads * hd);
        o->add_bias(b, m->k, &L->bk, n, kvd);
        o->add_bias(b, m->v, &L->bv, n, kvd);
    }
    if (L->q_norm.data) {  // per-head RMS norm: each head is a row of head_dim
        o->rmsnorm(b, m->q, m->q, &L->q_norm, n * c->n_heads, hd, c->rms_eps);
        o->rmsnorm(b, m->k, m->k, &L->k_norm, n * c->n_kv_heads, hd, c->rms_eps);
    }
    o->rope(b, m->q, n, c->n_heads, hd, m->pos, &c->rope);
    o->rope(b, m->k, n, c->n_kv_heads, hd, m->pos, &c->rope);
    o->kv_store(b, m->kv.k[l], m->kv.v[l], m->k, m->v, pos0, n, kvd);
    o->attention(b, m->att, m->q, m->kv.k[l], m->kv.v[l], pos0, n, c->n_heads, c->n_kv_heads, hd);
    o->matmul(b, m->xb, &L->wo, m->att, n);
    o->add(b, m->x, m->xb, (size_t)n * c->dim);
}

// Feed-forward block on n rows of the residual stream x:
// x += W_down · (silu(W_gate·norm(x)) ⊙ W_up·norm(x))
static void ffn_block(model *m, const layer_weights *L, float *x, int n) {
    const backend_ops *o = m->ops;
    backend *b = m->be;
    const model_config *c = &m->cfg;
    o->rmsnorm(b, m->xb, x, &L->ffn_norm, n, c->dim, c->rms_eps);
    o->matmul(b, m->hb, &L->w_gate, m->xb, n);
    o->matmul(b, m->hb2, &L->w_up, m->xb, n);
    o->swiglu(b, m->hb, m->hb, m->hb2, (size_t)n * c->ffn);
    o->matmul(b, m->xb, &L->w_down, m->hb, n);
    o->add(b, x, m->xb, (size_t)n * c->dim);
}

// Runs n <= n_batch tokens through every layer. Only rows keep..n-1 of the
// residual stream are needed afterwards (for logits), so the last layer's
// feed-forward block runs on those alone, as llama.cpp does; every row's K
// and V still reach the cache.
static void forward_batch(model *m, const int32_t *ids, int n, int keep) {
    const int pos0 = m->kv.len, last = m->cfg.n_layers - 1;
    for (int i = 0; i < n; i++) m->pos[i] = pos0 + i;
    m->ops->embed(m->be, m->x, &m->tok_embd, ids, n);
    for (int l = 0; l <= last; l++) {
        attention_block(m, &m->layers[l], l, n, pos0);
        if (l < last) ffn_block(m, &m->layers[l], m->x, n);
        else if (keep < n) ffn_block(m, &m->layers[l], m->x + (size_t)keep * m->cfg.dim, n - keep);
    }
    m->kv.len += n;
}

// logits[i] = output · norm(x[first + i]) for i < count, into host memory.
static void output_logits(model *m, int first, int count, float *logits) {
    const model_config *c = &m->cfg;
    for (int i = 0; i < count; i += OUT_CHUNK) {
        int k = count - i < OUT_CHUNK ? count - i : OUT_CHUNK;
        m->ops->rmsnorm(m->be, m->xb, m->x + (size_t)(first + i) * c->dim, &m->output_norm, k,
                        c->dim, c->rms_eps);
        m->ops->matmul(m->be, m->logits, &m->output, m->xb, k);
        m->ops->to_host(m->be, logits + (size_t)i * c->n_vocab, m->logits,
                        sizeof(float) * (size_t)k * c->n_vocab);
    }
}

int model_len(const model *m) { return m->kv.len; }
int model_ctx(const model *m) { return m->kv.n_ctx; }
void model_rewind(model *m, int len) { kv_truncate(&m->kv, len); }

size_t model_kv_bytes(const model *m, int n) {
    return 2 * (size_t)m->cfg.n_layers * n * m->kv.kv_dim * sizeof(uint16_t);
}

int model_kv_export(model *m, int n, uint16_t *dst, char *err) {
    if (n < 0 || n > m->kv.len) return errf(err, "cannot export %d positions: the cache holds %d", n, m->kv.len);
    size_t part = (size_t)n * m->kv.kv_dim;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        m->ops->to_host(m->be, dst + (2 * l) * part, m->kv.k[l], part * sizeof *dst);
        m->ops->to_host(m->be, dst + (2 * l + 1) * part, m->kv.v[l], part * sizeof *dst);
    }
    return 0;
}

int model_kv_import(model *m, int n, const uint16_t *src, int stride, char *err) {
    if (n < 0 || n > m->kv.n_ctx || stride < n)
        return errf(err, "cannot import %d positions (stride %d): the context holds %d", n, stride, m->kv.n_ctx);
    size_t part = (size_t)n * m->kv.kv_dim, plane = (size_t)stride * m->kv.kv_dim;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        m->ops->to_device(m->be, m->kv.k[l], src + (2 * l) * plane, part * sizeof *src);
        m->ops->to_device(m->be, m->kv.v[l], src + (2 * l + 1) * plane, part * sizeof *src);
    }
    m->kv.len = n;
    return 0;
}

int model_forward(model *m, const int32_t *ids, int n, int all_logits, float *logits, char *err) {
    if (n <= 0) return errf(err, "nothing to evaluate (0 tokens)");
    if (n > m->kv.n_ctx - m->kv.len)
        return errf(err, "%d tokens at position %d do not fit in the context of %d", n, m->kv.len,
                    m->kv.n_ctx);
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= m->cfg.n_vocab)
            return errf(err, "token id %d is outside the vocabulary (%d)", ids[i], m->cfg.n_vocab);
    for (int done = 0; done < n;) {
        int nb = n - done < m->n_batch ? n - done : m->n_batch;
        forward_batch(m, ids + done, nb, all_logits ? 0 : done + nb == n ? nb - 1 : nb);
        if (all_logits)
            output_logits(m, 0, nb, logits + (size_t)done * m->cfg.n_vocab);
        else if (done + nb == n)
            output_logits(m, nb - 1, 1, logits);
        done += nb;
    }
    return 0;
}
