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
#define GRAPH_MAX_N 8     // passes of up to this many tokens are recorded as backend graphs

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
    size_t weight_bytes;     // bytes one decode step reads (an MoE: the average token's)
    size_t total_bytes;      // bytes of all weights
    moe_ctx moe;             // the MoE block's activations (cfg.n_expert > 0)
    // activations: one backend allocation carved into these, for n_batch tokens
    int n_batch;
    int tables_rows;         // sequences one pass can hold: min(n_batch, kv.max_seqs)
    void *act_mem;
    float *x;       // [n_batch, dim] residual stream
    float *xb;      // [n_batch, dim] normed input / projection output
    float *q;       // [n_batch, n_heads * head_dim]
    float *k, *v;   // [n_batch, kv_dim]
    float *att;     // [n_batch, n_heads * head_dim]
    float *hb, *hb2;  // [n_batch, ffn] (a dense FFN's)
    float *logits;  // [OUT_CHUNK, n_vocab]
    void *moe_mem;  // moe_scratch_bytes for n_batch tokens (an MoE), carved by moe_init
    fwd_batch fb;   // the pass's token map; its arrays are carved from act_mem too
    // host staging for fb's arrays and the pass's bookkeeping (one allocation)
    void *host_mem;
    int32_t *h_ids, *h_pos, *h_seq, *h_slot;  // [n_batch]
    int32_t *h_tables;                          // [tables_rows, kv.max_blocks]
    int32_t *row_of;  // [kv.max_seqs] scratch: a sequence's row in h_tables, or -1
    int32_t *added;   // [kv.max_seqs] scratch: tokens a call adds to each sequence
    // per graph key (see pass_key): 0 never run, 1 run once, 2 recorded, -1 not recordable
    signed char graph_state[BACKEND_GRAPHS];
};

static const char *ARCH_NAMES[] = {[ARCH_LLAMA] = "llama", [ARCH_QWEN2] = "qwen2", [ARCH_QWEN3] = "qwen3",
                                   [ARCH_QWEN3MOE] = "qwen3moe"};

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

// The mixture-of-experts keys: expert_count, expert_used_count and
// expert_feed_forward_length (each expert's hidden width).
static int read_experts(const gguf_file *f, const char *an, model_config *c, char *err) {
    uint32_t ne = 0, used = 0, ffn = 0;
    if (meta_u32(f, an, "expert_count", &ne, 1, err) || meta_u32(f, an, "expert_used_count", &used, 1, err) ||
        meta_u32(f, an, "expert_feed_forward_length", &ffn, 1, err))
        return -1;
    if (ne < 1 || ne > MOE_MAX_EXPERTS)
        return errf(err, "key '%s.expert_count': %u experts (quill runs 1 to %d)", an, ne, MOE_MAX_EXPERTS);
    if (used < 1 || used > ne)
        return errf(err, "key '%s.expert_used_count': %u is not in 1 .. expert_count (%u)", an, used, ne);
    if (ffn < 1 || ffn > (1u << 24)) return errf(err, "key '%s.expert_feed_forward_length': %u is implausible", an, ffn);
    c->n_expert = (int)ne, c->n_expert_used = (int)used, c->ffn_expert = (int)ffn;
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
        return errf(err, "architecture '%.*s' is not supported (quill runs llama, qwen2, qwen3, qwen3moe)",
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
    return c->arch == ARCH_QWEN3MOE ? read_experts(f, an, c, err) : 0;
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
    if (!qi || !qi->compute) {
        char runs[256];
        qtype_compute_names(runs, sizeof runs);
        return errf(err, "tensor '%s' has type %s, which quill cannot compute with (it runs %s)", name,
                    qtype_name(t->type, tb), runs);
    }
    if (rows == 1 && t->type != Q_F32)
        return errf(err, "tensor '%s': expected type F32, found %s", name, qtype_name(t->type, tb));
    *out = (qmat){.type = t->type, .rows = rows, .cols = cols, .row_bytes = qtype_row_bytes(t->type, cols),
                  .data = t->data};
    if (m->ops->upload(m->be, out, err)) return -1;
    if (strcmp(name, "token_embd.weight")) m->weight_bytes += t->nbytes;
    m->total_bytes += t->nbytes;
    return 0;
}

// An expert tensor: n_exp stacked [rows, cols] matrices (GGUF [cols, rows,
// n_exp]) as one qmat of n_exp·rows rows. A token reads k of the n_exp.
static int get_experts(model *m, qmat *out, const char *name, int64_t cols, int64_t rows, char *err) {
    const model_config *c = &m->cfg;
    const gguf_tensor *t = gguf_find_tensor(&m->gguf, name);
    if (!t) return errf(err, "tensor '%s' is missing", name);
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != c->n_expert || t->ne[3] != 1)
        return errf(err, "tensor '%s': expected shape [%lld, %lld, %d], found [%lld, %lld, %lld, %lld]", name,
                    (long long)cols, (long long)rows, c->n_expert, (long long)t->ne[0], (long long)t->ne[1],
                    (long long)t->ne[2], (long long)t->ne[3]);
    const qtype_info *qi = qtype_get(t->type);
    if (!qi || !qi->compute) {
        char tb[16], runs[256];
        qtype_compute_names(runs, sizeof runs);
        return errf(err, "tensor '%s' has type %s, which quill cannot compute with (it runs %s)", name,
                    qtype_name(t->type, tb), runs);
    }
    *out = (qmat){.type = t->type, .rows = rows * c->n_expert, .cols = cols,
                  .row_bytes = qtype_row_bytes(t->type, cols), .data = t->data};
    if (m->ops->upload(m->be, out, err)) return -1;
    m->weight_bytes += (size_t)((double)t->nbytes * c->n_expert_used / c->n_expert);
    m->total_bytes += t->nbytes;
    return 0;
}

// The router and the experts of layer l (prefix "blk.l."), and their biases
// where the file has them (gpt-oss): router [n_exp], experts [n_exp, rows].
static int load_experts(model *m, moe_weights *w, const char *prefix, char *err) {
    const model_config *c = &m->cfg;
    const int64_t ne = c->n_expert, f = c->ffn_expert, d = c->dim;
    char name[96];
    struct { qmat *w; const char *name; int64_t cols, rows; } mats[] = {
        {&w->gate, "ffn_gate_exps.weight", d, f}, {&w->up, "ffn_up_exps.weight", d, f},
        {&w->down, "ffn_down_exps.weight", f, d}};
    for (size_t i = 0; i < sizeof mats / sizeof *mats; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, mats[i].name);
        if (get_experts(m, mats[i].w, name, mats[i].cols, mats[i].rows, err)) return -1;
    }
    struct { qmat *w; const char *name; int64_t cols, rows; } vecs[] = {
        {&w->router, "ffn_gate_inp.weight", d, ne}, {&w->router_b, "ffn_gate_inp.bias", ne, 1},
        {&w->gate_b, "ffn_gate_exps.bias", f, ne}, {&w->up_b, "ffn_up_exps.bias", f, ne},
        {&w->down_b, "ffn_down_exps.bias", d, ne}};
    for (size_t i = 0; i < sizeof vecs / sizeof *vecs; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, vecs[i].name);
        if (get_tensor(m, vecs[i].w, name, vecs[i].cols, vecs[i].rows, i == 0, err)) return -1;
        if (i > 0 && vecs[i].w->data && vecs[i].w->type != Q_F32)
            return errf(err, "tensor '%s': expected type F32", name);
    }
    return 0;
}

static int load_layer(model *m, int l, char *err) {
    const model_config *c = &m->cfg;
    layer_weights *L = &m->layers[l];
    const int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim;
    const int bias = c->arch == ARCH_QWEN2, qk_norm = c->arch == ARCH_QWEN3 || c->arch == ARCH_QWEN3MOE;
    const int dense = c->n_expert == 0;
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
        {&L->w_gate, "ffn_gate.weight", c->dim, c->ffn, dense},
        {&L->w_up, "ffn_up.weight", c->dim, c->ffn, dense},
        {&L->w_down, "ffn_down.weight", c->ffn, c->dim, dense},
    };
    for (size_t i = 0; i < sizeof spec / sizeof *spec; i++) {
        char name[96];
        snprintf(name, sizeof name, "blk.%d.%s", l, spec[i].name);
        if (get_tensor(m, spec[i].w, name, spec[i].cols, spec[i].rows, spec[i].required, err)) return -1;
    }
    char prefix[32];
    snprintf(prefix, sizeof prefix, "blk.%d.", l);
    return dense ? 0 : load_experts(m, &L->moe, prefix, err);
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
    if (c->n_expert && !(m->ops->moe_route && m->ops->moe_group && m->ops->moe_matmul && m->ops->moe_combine))
        return errf(err, "the %s backend cannot run mixture-of-experts layers", m->ops->name);
    c->rope.freq_factors = m->rope_freqs.data;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return errf(err, "out of memory");
    for (int l = 0; l < c->n_layers; l++)
        if (load_layer(m, l, err)) return -1;
    return 0;
}

// Carves one allocation into buffers: bytes[i] (rounded up to 64) go to *bufs[i].
static void *carve(void *mem, void **const bufs[], const size_t bytes[], size_t count) {
    char *p = mem;
    for (size_t i = 0; i < count; i++) {
        *bufs[i] = p;
        p += (bytes[i] + 63) & ~(size_t)63;
    }
    return p;
}

static size_t carve_total(const size_t bytes[], size_t count) {
    size_t total = 0;
    for (size_t i = 0; i < count; i++) total += (bytes[i] + 63) & ~(size_t)63;
    return total;
}

// Fails, naming what needs the memory, unless `held` bytes already promised
// plus `bytes` more fit in limit; checked before anything is allocated, so a
// model that declares more than the machine has fails at load in one line.
static int check_fits(double held, double bytes, size_t limit, const char *what, const char *hint, char *err) {
    if (held + bytes <= (double)limit) return 0;
    char also[64] = "";
    if (held > 0) snprintf(also, sizeof also, " on top of the KV cache's %.1f MiB", held / 1048576);
    return errf(err, "%s need%s %.1f MiB%s, but only %.1f MiB of memory is available (%s)", what,
                held > 0 ? "" : "s", bytes / 1048576, also, (double)limit / 1048576, hint);
}

// One backend allocation for the activations and the pass's token map, and
// one host allocation for staging that map.
static int alloc_activations(model *m, size_t limit, char *err) {
    const model_config *c = &m->cfg;
    const size_t B = (size_t)m->n_batch, qd = (size_t)c->n_heads * c->head_dim,
                 kvd = (size_t)c->n_kv_heads * c->head_dim, f = sizeof(float), i4 = sizeof(int32_t),
                 tables = (size_t)m->tables_rows * m->kv.max_blocks, seqs = (size_t)m->kv.max_seqs;
    fwd_batch *fb = &m->fb;
    const moe_cfg moe = {.n_exp = c->n_expert, .k = c->n_expert_used, .ffn = c->ffn_expert, .dim = c->dim,
                         .gating = MOE_SOFTMAX_NORM};
    void **dev[] = {(void **)&m->x, (void **)&m->xb, (void **)&m->q, (void **)&m->k, (void **)&m->v,
                    (void **)&m->att, (void **)&m->hb, (void **)&m->hb2, (void **)&m->logits,
                    (void **)&fb->ids, (void **)&fb->pos, (void **)&fb->seq, (void **)&fb->slot,
                    (void **)&fb->tables, &m->moe_mem};
    const size_t dev_bytes[] = {B * c->dim * f, B * c->dim * f, B * qd * f, B * kvd * f, B * kvd * f,
                                B * qd * f, c->n_expert ? 0 : B * c->ffn * f, c->n_expert ? 0 : B * c->ffn * f,
                                (size_t)OUT_CHUNK * c->n_vocab * f, B * i4, B * i4, B * i4, B * i4,
                                tables * i4, c->n_expert ? moe_scratch_bytes(&moe, m->n_batch) : 0};
    void **host[] = {(void **)&m->h_ids, (void **)&m->h_pos, (void **)&m->h_seq, (void **)&m->h_slot,
                     (void **)&m->h_tables, (void **)&m->row_of, (void **)&m->added};
    const size_t host_bytes[] = {B * i4, B * i4, B * i4, B * i4, tables * i4, seqs * i4, seqs * i4};
    const size_t nd = sizeof dev_bytes / sizeof *dev_bytes, nh = sizeof host_bytes / sizeof *host_bytes;
    if (check_fits((double)kv_bytes(&m->kv), (double)carve_total(dev_bytes, nd) + (double)carve_total(host_bytes, nh),
                   limit, "the activations", "lower -c", err))
        return -1;
    m->act_mem = m->ops->alloc(m->be, carve_total(dev_bytes, nd));
    m->host_mem = calloc(1, carve_total(host_bytes, nh));
    if (!m->act_mem || !m->host_mem)
        return errf(err, "out of memory for activations (%zu MiB)", carve_total(dev_bytes, nd) >> 20);
    carve(m->act_mem, dev, dev_bytes, nd);
    carve(m->host_mem, host, host_bytes, nh);
    for (size_t s = 0; s < seqs; s++) m->row_of[s] = -1;
    fb->max_blocks = m->kv.max_blocks;
    if (c->n_expert) moe_init(&m->moe, &moe, m->ops, m->be, m->moe_mem, m->n_batch);
    return 0;
}

static int init_context(model *m, const model_opts *o, char *err) {
    int ctx = o->n_ctx > 0 ? o->n_ctx : m->cfg.n_ctx_train;
    if (ctx <= 0 || (o->n_ctx <= 0 && ctx > DEFAULT_CTX)) ctx = DEFAULT_CTX;
    if (ctx > (1 << 24)) return errf(err, "context of %d tokens is too large", ctx);
    const int n_seqs = o->n_seqs > 0 ? o->n_seqs : 1, kv_dim = m->cfg.n_kv_heads * m->cfg.head_dim;
    if (o->kv_type != KV_F16 && o->kv_type != KV_Q8) return errf(err, "unknown KV cache type %d", o->kv_type);
    if (o->kv_type == KV_Q8 && m->cfg.head_dim % 32)
        return errf(err, "a q8 KV cache needs a head size that is a multiple of 32 (this model's is %d)",
                    m->cfg.head_dim);
    const size_t block_bytes = 2 * (size_t)m->cfg.n_layers * KV_BLOCK * kv_row_bytes(o->kv_type, kv_dim);
    const size_t n_blocks = o->kv_mem ? o->kv_mem / block_bytes : 0;
    if (o->kv_mem && n_blocks < 1)
        return errf(err, "a KV pool of %zu bytes holds no block (one block of %d positions is %zu bytes)",
                    o->kv_mem, KV_BLOCK, block_bytes);
    if (n_blocks > (1u << 30)) return errf(err, "a KV pool of %zu bytes is too large", o->kv_mem);
    size_t limit = m->ops->mem_available ? m->ops->mem_available(m->be) : SIZE_MAX;
    if (o->mem_limit && o->mem_limit < limit) limit = o->mem_limit;
    const double kv_total = (double)block_bytes * (n_blocks ? (double)n_blocks : (double)n_seqs * kv_blocks_for(ctx));
    char what[160];
    snprintf(what, sizeof what, "the KV cache (%d layers x %d positions%s x %d values)", m->cfg.n_layers, ctx,
             n_seqs > 1 ? " x sequences" : "", kv_dim);
    if (check_fits(0, kv_total, limit, what, "lower -c or --kv-mem, or use --kv q8", err)) return -1;
    m->n_batch = ctx < MAX_BATCH ? ctx : MAX_BATCH;
    if (n_seqs > m->n_batch && n_seqs > MAX_BATCH) m->n_batch = n_seqs;  // one decode step for all
    if (kv_init(&m->kv, m->ops, m->be, m->cfg.n_layers, kv_dim, o->kv_type, ctx, n_seqs, (int)n_blocks, err))
        return -1;
    m->tables_rows = m->n_batch < n_seqs ? m->n_batch : n_seqs;
    if (kv_seq_new(&m->kv) != 0) return errf(err, "cannot create the first sequence");
    return alloc_activations(m, limit, err);
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
        load_weights(m, e2) || init_context(m, o, e2)) {
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
    free(m->host_mem);
    free(m->layers);
    gguf_close(&m->gguf);
    free(m);
}

const model_config *model_cfg(const model *m) { return &m->cfg; }
const gguf_file *model_gguf(const model *m) { return &m->gguf; }
const char *model_backend_desc(model *m) { return m->ops->describe(m->be); }
size_t model_weight_bytes(const model *m) { return m->weight_bytes; }
size_t model_total_weight_bytes(const model *m) { return m->total_bytes; }

// ---- forward --------------------------------------------------------------

// Attention block: x += Wo · attention(rope(Wq·norm(x)), cache ← rope(Wk·norm(x)), Wv·norm(x))
static void attention_block(model *m, const layer_weights *L, int l, int n) {
    const backend_ops *o = m->ops;
    backend *b = m->be;
    const model_config *c = &m->cfg;
    const int hd = c->head_dim, kvd = c->n_kv_heads * hd;
    o->rmsnorm(b, m->xb, m->x, &L->attn_norm, n, c->dim, c->rms_eps);
    const int joint = m->fb.n_prompt;
    o->matmul(b, m->q, &L->wq, m->xb, n, joint);
    o->matmul(b, m->k, &L->wk, m->xb, n, joint);
    o->matmul(b, m->v, &L->wv, m->xb, n, joint);
    if (L->bq.data) {
        o->add_bias(b, m->q, &L->bq, n, c->n_heads * hd);
        o->add_bias(b, m->k, &L->bk, n, kvd);
        o->add_bias(b, m->v, &L->bv, n, kvd);
    }
    if (L->q_norm.data) {  // per-head RMS norm: each head is a row of head_dim
        o->rmsnorm(b, m->q, m->q, &L->q_norm, n * c->n_heads, hd, c->rms_eps);
        o->rmsnorm(b, m->k, m->k, &L->k_norm, n * c->n_kv_heads, hd, c->rms_eps);
    }
    o->rope(b, m->q, n, c->n_heads, hd, m->fb.pos, &c->rope);
    o->rope(b, m->k, n, c->n_kv_heads, hd, m->fb.pos, &c->rope);
    o->kv_store(b, m->kv.k[l], m->kv.v[l], m->k, m->v, &m->fb, kvd, m->kv.type);
    o->attention(b, m->att, m->q, m->kv.k[l], m->kv.v[l], &m->fb, c->n_heads, c->n_kv_heads, hd, m->kv.type);
    o->matmul(b, m->xb, &L->wo, m->att, n, joint);
    o->add(b, m->x, m->xb, (size_t)n * c->dim);
}

// Feed-forward block on n rows of the residual stream x, the first `joint`
// of them prompt rows (see backend.h's matmul):
// x += W_down · (silu(W_gate·norm(x)) ⊙ W_up·norm(x))
static void ffn_block(model *m, const layer_weights *L, float *x, int n, int joint) {
    const backend_ops *o = m->ops;
    backend *b = m->be;
    const model_config *c = &m->cfg;
    o->rmsnorm(b, m->xb, x, &L->ffn_norm, n, c->dim, c->rms_eps);
    if (L->moe.router.data) {  // mixture of experts: every row computed as alone (backend.h's moe_matmul)
        moe_ffn(&m->moe, &L->moe, m->xb, m->xb, n);
        o->add(b, x, m->xb, (size_t)n * c->dim);
        return;
    }
    o->matmul(b, m->hb, &L->w_gate, m->xb, n, joint);
    o->matmul(b, m->hb2, &L->w_up, m->xb, n, joint);
    o->swiglu(b, m->hb, m->hb, m->hb2, n, c->ffn);
    o->matmul(b, m->xb, &L->w_down, m->hb, n, joint);
    o->add(b, x, m->xb, (size_t)n * c->dim);
}

static int clamp0(int v, int hi) { return v < 0 ? 0 : v > hi ? hi : v; }

// Runs the pass in m->fb (n <= n_batch tokens) through every layer. Only
// rows keep..n-1 of the residual stream are needed afterwards (for logits),
// so the last layer's feed-forward block runs on those alone, as llama.cpp
// does; every row's K and V still reach the cache.
static void forward_pass(model *m, int keep) {
    const int n = m->fb.n, last = m->cfg.n_layers - 1, joint = m->fb.n_prompt;
    m->ops->embed(m->be, m->x, &m->tok_embd, m->fb.ids, n);
    for (int l = 0; l <= last; l++) {
        attention_block(m, &m->layers[l], l, n);
        if (l < last) ffn_block(m, &m->layers[l], m->x, n, joint);
        else if (keep < n)
            ffn_block(m, &m->layers[l], m->x + (size_t)keep * m->cfg.dim, n - keep, clamp0(joint - keep, n));
    }
}

// Logits of the pass's rows i .. i+k-1 (k <= OUT_CHUNK) into m->logits.
static void logits_rows(model *m, int i, int k) {
    const model_config *c = &m->cfg;
    m->ops->rmsnorm(m->be, m->xb, m->x + (size_t)i * c->dim, &m->output_norm, k, c->dim, c->rms_eps);
    m->ops->matmul(m->be, m->logits, &m->output, m->xb, k, clamp0(m->fb.n_prompt - i, k));
}

// The pass's layers and the logits of its first OUT_CHUNK output rows: the
// unit a decode step records as a backend graph.
static void compute_pass(model *m, int first_out) {
    const int n = m->fb.n;
    forward_pass(m, first_out);
    if (first_out < n) logits_rows(m, first_out, n - first_out < OUT_CHUNK ? n - first_out : OUT_CHUNK);
}

// The graph key of a decode-shaped pass (every token wants logits, none or
// all of them a prompt's), or -1: the ops such a pass runs depend only on
// its token count and whether they are a prompt's.
static int pass_key(const model *m, int first_out) {
    const int n = m->fb.n, np = m->fb.n_prompt;
    if (!m->ops->graph_begin || n > GRAPH_MAX_N || first_out != 0 || (np != 0 && np != n)) return -1;
    const int key = (n - 1) + (np ? GRAPH_MAX_N : 0);
    return key < BACKEND_GRAPHS ? key : -1;
}

// compute_pass, through a backend graph where the backend records them: a
// shape runs directly the first time (the backend sizes its scratch), is
// recorded the second time and replayed from then on. A shape that cannot be
// recorded runs directly; a replay that fails (the backend dropped a stale
// graph) runs directly and records again next time.
static void run_pass(model *m, int first_out) {
    const backend_ops *o = m->ops;
    const int key = pass_key(m, first_out);
    char e[ERR_LEN];
    if (key < 0 || m->graph_state[key] < 0) {
        compute_pass(m, first_out);
    } else if (m->graph_state[key] == 2) {
        if (o->graph_replay(m->be, key, e) == 0) return;
        m->graph_state[key] = 1;
        compute_pass(m, first_out);
    } else if (m->graph_state[key] == 1) {
        if (o->graph_begin(m->be, key, e) == 0) {
            compute_pass(m, first_out);  // recorded, not run
            if (o->graph_end(m->be, key, e) == 0 && o->graph_replay(m->be, key, e) == 0) {
                m->graph_state[key] = 2;
                return;
            }
        }
        m->graph_state[key] = -1;
        compute_pass(m, first_out);
    } else {
        compute_pass(m, first_out);
        m->graph_state[key] = 1;
    }
}

// The index of the first of n logits that is NaN or infinite, or -1.
static long first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return (long)i;
    return -1;
}

// Copies the logits of the pass's rows first..n-1 that t asks for, in order,
// into host memory at logits (run_pass computed the first chunk); returns the
// position after the last one written. logits NULL: the rows stay in
// m->logits (one chunk at most).
static float *output_logits(model *m, const model_tok *t, int first, float *logits) {
    const model_config *c = &m->cfg;
    const int n = m->fb.n;
    for (int i = first; i < n && logits; i += OUT_CHUNK) {
        const int k = n - i < OUT_CHUNK ? n - i : OUT_CHUNK;
        if (i > first) logits_rows(m, i, k);
        for (int r = 0; r < k; r++)
            if (t[i + r].logits) {
                m->ops->to_host(m->be, logits, m->logits + (size_t)r * c->n_vocab, sizeof(float) * c->n_vocab);
                logits += c->n_vocab;
            }
    }
    return logits;
}

// Fills m->fb for t[0..n) (n <= n_batch), the first n_prompt of them a
// prompt's tokens. Positions continue each sequence. Returns the first row
// that wants logits (n if none).
static int stage_pass(model *m, const model_tok *t, int n, int n_prompt) {
    int n_seqs = 0, first_out = n;
    fwd_batch *fb = &m->fb;
    fb->max_len = 0;
    for (int i = 0; i < n; i++) {
        const int s = t[i].seq;
        if (m->row_of[s] < 0) {
            m->row_of[s] = n_seqs;
            memcpy(m->h_tables + (size_t)n_seqs++ * m->kv.max_blocks, m->kv.seqs[s].table,
                   sizeof(int32_t) * m->kv.seqs[s].n_blocks);
        }
        const int p = m->kv.seqs[s].len++;
        m->h_ids[i] = t[i].id;
        m->h_pos[i] = p;
        m->h_seq[i] = m->row_of[s];
        m->h_slot[i] = kv_slot(&m->kv, s, p);
        if (p + 1 > fb->max_len) fb->max_len = p + 1;
        if (t[i].logits && first_out == n) first_out = i;
    }
    for (int i = 0; i < n; i++) m->row_of[t[i].seq] = -1;
    fb->n = n;
    fb->n_seqs = n_seqs;
    fb->n_prompt = n_prompt;
    const backend_ops *o = m->ops;
    const size_t bytes = sizeof(int32_t) * (size_t)n;
    o->to_device(m->be, (void *)fb->ids, m->h_ids, bytes);
    o->to_device(m->be, (void *)fb->pos, m->h_pos, bytes);
    o->to_device(m->be, (void *)fb->seq, m->h_seq, bytes);
    o->to_device(m->be, (void *)fb->slot, m->h_slot, bytes);
    o->to_device(m->be, (void *)fb->tables, m->h_tables, sizeof(int32_t) * (size_t)n_seqs * fb->max_blocks);
    return first_out;
}

// Reserves KV room for every sequence t extends; on failure, gives back what
// it reserved.
static int reserve(model *m, const model_tok *t, int n, char *err) {
    for (int i = 0; i < n; i++) m->added[t[i].seq]++;
    int failed = 0;
    for (int i = 0; i < n && !failed; i++) {
        const int s = t[i].seq;
        if (m->added[s] > 0 && kv_reserve(&m->kv, s, m->added[s], err)) failed = 1;
        m->added[s] = -m->added[s];  // reserved (or failed): negative marks it done
    }
    for (int i = 0; i < n; i++) {
        const int s = t[i].seq;
        if (failed && m->added[s] < 0) kv_truncate(&m->kv, s, m->kv.seqs[s].len);
        m->added[s] = 0;
    }
    return failed ? -1 : 0;
}

// logits NULL (model_forward_sample): the last pass's first output rows stay in
// m->logits, on the backend.
int model_forward_batch(model *m, const model_tok *t, int n, int n_prompt, float *logits, char *err) {
    if (n <= 0) return errf(err, "nothing to evaluate (0 tokens)");
    if (n_prompt < 0 || n_prompt > n) return errf(err, "%d prompt tokens in a pass of %d", n_prompt, n);
    for (int i = 0; i < n; i++) {
        if (t[i].id < 0 || t[i].id >= m->cfg.n_vocab)
            return errf(err, "token id %d is outside the vocabulary (%d)", t[i].id, m->cfg.n_vocab);
        if (t[i].seq < 0 || t[i].seq >= m->kv.max_seqs || !m->kv.seqs[t[i].seq].live)
            return errf(err, "sequence %d does not exist", t[i].seq);
        if (i < n_prompt && t[i].seq != t[0].seq) return errf(err, "a prompt's tokens span two sequences");
    }
    if (reserve(m, t, n, err)) return -1;
    float *const logits0 = logits;
    for (int done = 0; done < n;) {
        const int nb = n - done < m->n_batch ? n - done : m->n_batch;
        const int first_out = stage_pass(m, t + done, nb, clamp0(n_prompt - done, nb));
        run_pass(m, first_out);
        logits = output_logits(m, t + done, first_out, logits);
        done += nb;
    }
    // ops that return nothing record their failures; to_host has waited for them
    if (m->ops->status && m->ops->status(m->be, err)) return -1;
    // NaN or inf from a model whose weights overflow: every later stage (the
    // sampler's buckets, a softmax) would compute nonsense from them
    const long bad = logits0 ? first_nonfinite(logits0, (size_t)(logits - logits0)) : -1;
    if (bad >= 0)
        return errf(err, "the model computed a non-finite logit (%g for token id %ld): its weights or "
                    "hyperparameters are broken", logits0[bad], bad % m->cfg.n_vocab);
    return 0;
}

int model_forward(model *m, const int32_t *ids, int n, int all_logits, float *logits, char *err) {
    if (n <= 0) return errf(err, "nothing to evaluate (0 tokens)");
    model_tok *t = malloc(sizeof *t * (size_t)n);
    if (!t) return errf(err, "out of memory");
    for (int i = 0; i < n; i++) t[i] = (model_tok){.id = ids[i], .seq = 0, .logits = all_logits || i == n - 1};
    int r = model_forward_batch(m, t, n, n, logits, err);
    free(t);
    return r;
}

int model_forward_sample(model *m, const int32_t *ids, int n, const sample_cfg *sc, double u, int32_t *id,
                         float *logits, char *err) {
    if (!m->ops->sample) return model_forward(m, ids, n, 0, logits, err) ? -1 : 0;
    if (model_forward(m, ids, n, 0, NULL, err)) return -1;
    *id = m->ops->sample(m->be, m->logits, m->cfg.n_vocab, sc, u);
    if (*id < 0 || *id >= m->cfg.n_vocab)
        return m->ops->status && m->ops->status(m->be, err) ? -1 : errf(err, "the backend sampled id %d", *id);
    return 1;
}

int model_roofline(model *m, double *mem_bw, double *gemm_flops, char *err) {
    *mem_bw = *gemm_flops = 0;
    if (!m->ops->roofline) return 0;
    return m->ops->roofline(m->be, mem_bw, gemm_flops, err) ? -1 : 0;
}

int model_on_device(const model *m) { return m->ops != &cpu_backend; }

// ---- sequences --------------------------------------------------------------

int model_len(const model *m) { return m->kv.seqs[0].len; }
int model_ctx(const model *m) { return m->kv.n_ctx; }
void model_rewind(model *m, int len) { kv_truncate(&m->kv, 0, len); }
int model_seq_new(model *m) { return kv_seq_new(&m->kv); }
void model_seq_free(model *m, int s) { kv_seq_free(&m->kv, s); }
int model_seq_len(const model *m, int s) { return m->kv.seqs[s].len; }
void model_seq_rewind(model *m, int s, int len) { kv_truncate(&m->kv, s, len); }
void model_seq_share(model *m, int dst, int src, int len) { kv_seq_share(&m->kv, dst, src, len); }
int model_kv_room(const model *m) { return m->kv.n_free * KV_BLOCK; }

int model_kv_type(const model *m) { return m->kv.type; }

size_t model_kv_bytes(const model *m, int n) { return 2 * (size_t)m->cfg.n_layers * n * m->kv.row_bytes; }

// Copies positions [0, n) of sequence 0 between the pools and planes of
// `stride` positions laid out as model_kv_export documents, one block's run
// of rows at a time.
static void kv_copy(model *m, int n, uint8_t *buf, int stride, int export) {
    const size_t row = m->kv.row_bytes, plane = (size_t)stride * row;
    for (int l = 0; l < m->cfg.n_layers; l++)
        for (int kvi = 0; kvi < 2; kvi++) {
            uint8_t *pool = kvi ? m->kv.v[l] : m->kv.k[l], *p = buf + (2 * (size_t)l + kvi) * plane;
            for (int j = 0; j < n; j += KV_BLOCK) {
                size_t bytes = row * (size_t)(n - j < KV_BLOCK ? n - j : KV_BLOCK);
                uint8_t *dev = pool + (size_t)kv_slot(&m->kv, 0, j) * row;
                if (export) m->ops->to_host(m->be, p + j * row, dev, bytes);
                else m->ops->to_device(m->be, dev, p + j * row, bytes);
            }
        }
}

int model_kv_export(model *m, int n, void *dst, char *err) {
    if (n < 0 || n > model_len(m)) return errf(err, "cannot export %d positions: the cache holds %d", n, model_len(m));
    kv_copy(m, n, dst, n, 1);
    return 0;
}

int model_kv_import(model *m, int n, const void *src, int stride, char *err) {
    if (n < 0 || n > m->kv.n_ctx || stride < n)
        return errf(err, "cannot import %d positions (stride %d): the context holds %d", n, stride, m->kv.n_ctx);
    kv_truncate(&m->kv, 0, 0);
    if (kv_reserve(&m->kv, 0, n, err)) return -1;
    kv_copy(m, n, (uint8_t *)src, stride, 0);
    m->kv.seqs[0].len = n;
    return 0;
}
