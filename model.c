// model.c — weights from a GGUF file and the transformer forward pass.
//
// One forward pass serves every architecture quill runs (arch.c's table):
// they differ in optional tensors (biases, per-head q/k norms, post-norms,
// sinks), fused tensors, the FFN's activation, the embedding scale and each
// layer's rope and attention window, which are data here, not branches on
// the architecture.
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
// Positions a sliding-window layer keeps beyond its window, so that rewinds by
// up to this many (speculative rollbacks, a chat turn re-rendered at its end)
// still find the window of the position they return to.
#define SWA_KEEP 256

struct model {
    gguf_file gguf;          // the mmapped file; weights point into it
    model_config cfg;
    const backend_ops *ops;
    backend *be;
    qmat tok_embd;           // [n_vocab, dim]
    qmat output_norm;        // [dim]
    qmat output;             // [n_vocab, dim] (tok_embd when tied)
    qmat rope_freqs;         // [n_rot/2] Llama-3 frequency divisors (data NULL when absent)
    qmat rope_short, rope_long;  // [n_rot/2] LongRoPE divisors (phi3; data NULL when absent)
    layer_weights *layers;   // [n_layers]
    // K and V: the full-attention layers keep every position (kv); the
    // sliding-window layers keep only the last window plus SWA_KEEP positions
    // of each sequence (kv_swa, a small pool: blocks below are returned as the
    // sequence grows). Both hold the same sequences at the same lengths.
    kvcache kv, kv_swa;
    int32_t *layer_idx;      // [n_layers] layer l's index in its cache (kv_swa when it slides)
    size_t weight_bytes;     // bytes one decode step reads (an MoE: the average token's)
    size_t total_bytes;      // bytes of all weights
    long long huge_bytes;    // bytes of the file mapped in 2 MiB pages (-1: not known or not mapped here)
    size_t x8_bytes;         // bytes of weights the backend keeps with 8 rows interleaved (qmat.x8)
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
    fwd_batch fb_swa;  // fb with kv_swa's slots and block tables (ids, pos, seq shared)
    // host staging for fb's arrays and the pass's bookkeeping (one allocation)
    void *host_mem;
    int32_t *h_ids, *h_pos, *h_seq, *h_slot, *h_slot_swa;  // [n_batch]
    int32_t *h_tables, *h_tables_swa;                        // [tables_rows, kv.max_blocks]
    int32_t *row_of;  // [kv.max_seqs] scratch: a sequence's row in h_tables, or -1
    int32_t *added;   // [kv.max_seqs] scratch: tokens a call adds to each sequence
    // per graph key (see pass_key): 0 never run, 1 run once, 2 recorded, -1 not recordable
    signed char graph_state[BACKEND_GRAPHS];
};

// ---- tensors --------------------------------------------------------------

// A weight made readable by the backend. Where the CPU backend copied it
// (x8), the file's pages under the original are dropped: they are no longer
// read, and would stay resident beside the copy.
static int upload(model *m, qmat *w, char *err) {
    const void *orig = w->data;
    if (m->ops->upload(m->be, w, err)) return -1;
    if (w->x8) {
        map_drop(orig, (size_t)w->rows * w->row_bytes);
        m->x8_bytes += (size_t)w->rows * w->row_bytes;
    }
    return 0;
}

// Looks up a tensor and checks it is [Σ rows, cols] (vectors: rows == 1) and
// of a type quill computes with; vectors (norms, biases) must be F32. Part i
// of the k parts gets the next rows[i] rows (fused tensors: phi3's attn_qkv
// and ffn_up), each uploaded on its own (a backend may repack a weight, so a
// view into an uploaded one would not do).
static int get_parts(model *m, qmat *const parts[], const int64_t rows[], int k, const char *name, int64_t cols,
                     int required, char *err) {
    int64_t total = 0;
    for (int i = 0; i < k; i++) *parts[i] = (qmat){0}, total += rows[i];
    const gguf_tensor *t = gguf_find_tensor(&m->gguf, name);
    if (!t) return required ? errf(err, "tensor '%s' is missing", name) : 0;
    char tb[16];
    int64_t t_rows = t->n_dims > 1 ? t->ne[1] : 1;
    if (t->ne[0] != cols || t_rows != total || t->ne[2] != 1 || t->ne[3] != 1)
        return errf(err, "tensor '%s': expected shape [%lld, %lld], found [%lld, %lld, %lld, %lld]",
                    name, (long long)cols, (long long)total, (long long)t->ne[0],
                    (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    const qtype_info *qi = qtype_get(t->type);
    if (!qi || !qi->compute) {
        char runs[256];
        qtype_compute_names(runs, sizeof runs);
        return errf(err, "tensor '%s' has type %s, which quill cannot compute with (it runs %s)", name,
                    qtype_name(t->type, tb), runs);
    }
    if (total == 1 && t->type != Q_F32)
        return errf(err, "tensor '%s': expected type F32, found %s", name, qtype_name(t->type, tb));
    const size_t row_bytes = qtype_row_bytes(t->type, cols);
    const uint8_t *data = t->data;
    // an embedding that is not also the output projection is only looked up, a row at a time
    const int lookup = !strcmp(name, "token_embd.weight") && gguf_find_tensor(&m->gguf, "output.weight");
    for (int i = 0; i < k; i++) {
        *parts[i] = (qmat){.type = t->type, .rows = rows[i], .cols = cols, .row_bytes = row_bytes, .data = data,
                           .lookup = lookup};
        data += (size_t)rows[i] * row_bytes;
        if (upload(m, parts[i], err)) return -1;
    }
    if (strcmp(name, "token_embd.weight")) m->weight_bytes += t->nbytes;
    m->total_bytes += t->nbytes;
    return 0;
}

static int get_tensor(model *m, qmat *out, const char *name, int64_t cols, int64_t rows, int required, char *err) {
    return get_parts(m, (qmat *const[]){out}, (const int64_t[]){rows}, 1, name, cols, required, err);
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
    if (upload(m, out, err)) return -1;
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

// "blk.<l>.<suffix>", in parts (see get_parts)
static int get_layer_parts(model *m, int l, qmat *const parts[], const int64_t rows[], int k, const char *suffix,
                           int64_t cols, int required, char *err) {
    char name[96];
    snprintf(name, sizeof name, "blk.%d.%s", l, suffix);
    return get_parts(m, parts, rows, k, name, cols, required, err);
}

// The attention's weights: q, k, v (separate, or phi3's fused attn_qkv), the
// output projection, and what the architecture adds.
static int load_attention(model *m, int l, char *err) {
    const model_config *c = &m->cfg;
    const arch_info *ai = c->ai;
    layer_weights *L = &m->layers[l];
    const int64_t qd = (int64_t)c->n_heads * c->head_dim, kvd = (int64_t)c->n_kv_heads * c->head_dim, one = 1;
    if (get_layer_parts(m, l, (qmat *const[]){&L->attn_norm}, &one, 1, "attn_norm.weight", c->dim, 1, err))
        return -1;
    int r = ai->fused_qkv
                ? get_layer_parts(m, l, (qmat *const[]){&L->wq, &L->wk, &L->wv}, (const int64_t[]){qd, kvd, kvd}, 3,
                                  "attn_qkv.weight", c->dim, 1, err)
                : get_layer_parts(m, l, (qmat *const[]){&L->wq}, &qd, 1, "attn_q.weight", c->dim, 1, err) ||
                      get_layer_parts(m, l, (qmat *const[]){&L->wk}, &kvd, 1, "attn_k.weight", c->dim, 1, err) ||
                      get_layer_parts(m, l, (qmat *const[]){&L->wv}, &kvd, 1, "attn_v.weight", c->dim, 1, err);
    if (r) return -1;
    struct { qmat *w; const char *name; int64_t cols; int required; } spec[] = {
        {&L->bq, "attn_q.bias", qd, ai->qkv_bias},
        {&L->bk, "attn_k.bias", kvd, ai->qkv_bias},
        {&L->bv, "attn_v.bias", kvd, ai->qkv_bias},
        {&L->bo, "attn_output.bias", c->dim, ai->out_bias},
        {&L->q_norm, "attn_q_norm.weight", c->head_dim, ai->qk_norm},
        {&L->k_norm, "attn_k_norm.weight", c->head_dim, ai->qk_norm},
        {&L->sinks, "attn_sinks.weight", c->n_heads, ai->sinks},
        {&L->post_attn_norm, ai->post_norms ? "post_attention_norm.weight" : NULL, c->dim, 1},
    };
    for (size_t i = 0; i < sizeof spec / sizeof *spec; i++)
        if (spec[i].name && get_layer_parts(m, l, (qmat *const[]){spec[i].w}, &one, 1, spec[i].name, spec[i].cols,
                                            spec[i].required, err))
            return -1;
    if ((L->bq.data != NULL) != (L->bk.data != NULL) || (L->bq.data != NULL) != (L->bv.data != NULL))
        return errf(err, "layer %d has some of the q/k/v biases but not all three", l);
    if ((L->q_norm.data != NULL) != (L->k_norm.data != NULL))
        return errf(err, "layer %d has one of attn_q_norm / attn_k_norm but not the other", l);
    return get_layer_parts(m, l, (qmat *const[]){&L->wo}, (const int64_t[]){c->dim}, 1, "attn_output.weight", qd, 1,
                           err);
}

// The feed-forward weights: gate and up (separate, or phi3's fused ffn_up:
// gate rows, then up rows), down, and the norms around them.
static int load_ffn(model *m, int l, char *err) {
    const model_config *c = &m->cfg;
    const arch_info *ai = c->ai;
    layer_weights *L = &m->layers[l];
    const int64_t ffn = c->ffn, dim = c->dim, one = 1;
    char norm[64];
    snprintf(norm, sizeof norm, "%s.weight", ai->ffn_norm);
    if (get_layer_parts(m, l, (qmat *const[]){&L->ffn_norm}, &one, 1, norm, dim, 1, err)) return -1;
    if (c->n_expert) {  // the experts in place of the dense FFN
        char prefix[32];
        snprintf(prefix, sizeof prefix, "blk.%d.", l);
        return load_experts(m, &L->moe, prefix, err);
    }
    int r = ai->fused_up
                ? get_layer_parts(m, l, (qmat *const[]){&L->w_gate, &L->w_up}, (const int64_t[]){ffn, ffn}, 2,
                                  "ffn_up.weight", dim, 1, err)
                : get_layer_parts(m, l, (qmat *const[]){&L->w_gate}, &ffn, 1, "ffn_gate.weight", dim, 1, err) ||
                      get_layer_parts(m, l, (qmat *const[]){&L->w_up}, &ffn, 1, "ffn_up.weight", dim, 1, err);
    return r || get_layer_parts(m, l, (qmat *const[]){&L->w_down}, &dim, 1, "ffn_down.weight", ffn, 1, err) ||
                   (ai->post_norms && get_layer_parts(m, l, (qmat *const[]){&L->post_ffn_norm}, &one, 1,
                                                      "post_ffw_norm.weight", dim, 1, err))
               ? -1
               : 0;
}

static int load_weights(model *m, char *err) {
    model_config *c = &m->cfg;
    const gguf_tensor *emb = gguf_find_tensor(&m->gguf, "token_embd.weight");
    if (!emb) return errf(err, "tensor 'token_embd.weight' is missing");
    if (emb->n_dims != 2 || emb->ne[1] < 1 || emb->ne[1] > (1 << 24))
        return errf(err, "tensor 'token_embd.weight': expected [%d, n_vocab]", c->dim);
    c->n_vocab = (int)emb->ne[1];
    const int64_t half = c->rope.n_rot / 2;
    if (get_tensor(m, &m->tok_embd, "token_embd.weight", c->dim, c->n_vocab, 1, err) ||
        get_tensor(m, &m->output_norm, "output_norm.weight", c->dim, 1, 1, err) ||
        get_tensor(m, &m->output, "output.weight", c->dim, c->n_vocab, 0, err) ||
        get_tensor(m, &m->rope_freqs, "rope_freqs.weight", half, 1, 0, err) ||
        get_tensor(m, &m->rope_short, "rope_factors_short.weight", half, 1, 0, err) ||
        get_tensor(m, &m->rope_long, "rope_factors_long.weight", half, 1, 0, err))
        return -1;
    if (!m->output.data) {  // tied: the output projection reads the whole embedding
        m->output = m->tok_embd;
        m->weight_bytes += (size_t)c->n_vocab * m->tok_embd.row_bytes;
    }
    if (c->n_expert && !(m->ops->moe_route && m->ops->moe_group && m->ops->moe_matmul && m->ops->moe_combine))
        return errf(err, "the %s backend cannot run mixture-of-experts layers", m->ops->name);
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return errf(err, "out of memory");
    for (int l = 0; l < c->n_layers; l++)
        if (load_attention(m, l, err) || load_ffn(m, l, err)) return -1;
    return 0;
}

// Each layer's rope and attention options, for a context of ctx positions per
// sequence: sliding layers take the window and their own rope; LongRoPE takes
// its long factors only when ctx exceeds the original context (llama.cpp's
// choice by the context per sequence), else the short ones.
static void setup_layers(model *m, int ctx) {
    const model_config *c = &m->cfg;
    const float *factors = m->rope_freqs.data;
    if (m->rope_short.data || m->rope_long.data)
        factors = (ctx > c->n_ctx_orig && m->rope_long.data) || !m->rope_short.data ? m->rope_long.data
                                                                                    : m->rope_short.data;
    for (int l = 0; l < c->n_layers; l++) {
        layer_weights *L = &m->layers[l];
        const int slides = arch_layer_slides(c, l);
        L->rope = slides ? c->rope_swa : c->rope;
        L->rope.freq_factors = factors;
        L->att = (attn_cfg){.scale = c->attn_scale, .window = slides ? c->n_swa : 0, .sinks = L->sinks.data};
    }
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
                         .gating = c->ai->moe_gating, .oai_glu = c->ai->oai_glu, .alpha = c->ai->glu_alpha,
                         .limit = c->ai->glu_limit};
    void **dev[] = {(void **)&m->x, (void **)&m->xb, (void **)&m->q, (void **)&m->k, (void **)&m->v,
                    (void **)&m->att, (void **)&m->hb, (void **)&m->hb2, (void **)&m->logits,
                    (void **)&fb->ids, (void **)&fb->pos, (void **)&fb->seq, (void **)&fb->slot,
                    (void **)&fb->tables, (void **)&m->fb_swa.slot, (void **)&m->fb_swa.tables, &m->moe_mem};
    const size_t dev_bytes[] = {B * c->dim * f, B * c->dim * f, B * qd * f, B * kvd * f, B * kvd * f,
                                B * qd * f, c->n_expert ? 0 : B * c->ffn * f, c->n_expert ? 0 : B * c->ffn * f,
                                (size_t)OUT_CHUNK * c->n_vocab * f, B * i4, B * i4, B * i4, B * i4,
                                tables * i4, B * i4, tables * i4, c->n_expert ? moe_scratch_bytes(&moe, m->n_batch) : 0};
    void **host[] = {(void **)&m->h_ids, (void **)&m->h_pos, (void **)&m->h_seq, (void **)&m->h_slot,
                     (void **)&m->h_tables, (void **)&m->row_of, (void **)&m->added, (void **)&m->h_slot_swa,
                     (void **)&m->h_tables_swa};
    const size_t host_bytes[] = {B * i4, B * i4, B * i4, B * i4, tables * i4, seqs * i4, seqs * i4, B * i4,
                                 tables * i4};
    const size_t nd = sizeof dev_bytes / sizeof *dev_bytes, nh = sizeof host_bytes / sizeof *host_bytes;
    const double kv_held = (double)kv_bytes(&m->kv) + (double)kv_bytes(&m->kv_swa);
    if (check_fits(kv_held, (double)carve_total(dev_bytes, nd) + (double)carve_total(host_bytes, nh), limit,
                   "the activations", "lower -c", err))
        return -1;
    m->act_mem = m->ops->alloc(m->be, carve_total(dev_bytes, nd));
    m->host_mem = calloc(1, carve_total(host_bytes, nh));
    if (!m->act_mem || !m->host_mem)
        return errf(err, "out of memory for activations (%zu MiB)", carve_total(dev_bytes, nd) >> 20);
    carve(m->act_mem, dev, dev_bytes, nd);
    carve(m->host_mem, host, host_bytes, nh);
    for (size_t s = 0; s < seqs; s++) m->row_of[s] = -1;
    fb->max_blocks = m->kv.max_blocks;
    m->fb_swa.max_blocks = m->kv_swa.max_blocks;
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
    int n_slide = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) n_slide += arch_layer_slides(&m->cfg, l);
    const int n_full = m->cfg.n_layers - n_slide;
    // a sliding layer's blocks per sequence: its window, SWA_KEEP, a pass, and
    // two for the ends (the pool never runs short: blocks leave as they come)
    m->n_batch = ctx < MAX_BATCH ? ctx : MAX_BATCH;
    if (n_seqs > m->n_batch && n_seqs > MAX_BATCH) m->n_batch = n_seqs;  // one decode step for all
    int swa_blocks = kv_blocks_for(m->cfg.n_swa + SWA_KEEP + m->n_batch) + 2;
    if (swa_blocks > kv_blocks_for(ctx)) swa_blocks = kv_blocks_for(ctx);
    const size_t swa_bytes = 2 * (size_t)n_slide * KV_BLOCK * kv_row_bytes(o->kv_type, kv_dim) * swa_blocks * n_seqs;
    const size_t block_bytes = 2 * (size_t)(n_full ? n_full : 1) * KV_BLOCK * kv_row_bytes(o->kv_type, kv_dim);
    const size_t n_blocks = o->kv_mem ? o->kv_mem / block_bytes : 0;
    if (o->kv_mem && n_blocks < 1)
        return errf(err, "a KV pool of %zu bytes holds no block (one block of %d positions is %zu bytes)",
                    o->kv_mem, KV_BLOCK, block_bytes);
    if (n_blocks > (1u << 30)) return errf(err, "a KV pool of %zu bytes is too large", o->kv_mem);
    size_t limit = m->ops->mem_available ? m->ops->mem_available(m->be) : SIZE_MAX;
    if (o->mem_limit && o->mem_limit < limit) limit = o->mem_limit;
    const double kv_total = (double)block_bytes * (n_blocks ? (double)n_blocks : (double)n_seqs * kv_blocks_for(ctx)) +
                            (double)swa_bytes;
    char what[160];
    snprintf(what, sizeof what, "the KV cache (%d layers x %d positions%s x %d values)", m->cfg.n_layers, ctx,
             n_seqs > 1 ? " x sequences" : "", kv_dim);
    if (check_fits(0, kv_total, limit, what, "lower -c or --kv-mem, or use --kv q8", err)) return -1;
    if (kv_init(&m->kv, m->ops, m->be, n_full, kv_dim, o->kv_type, ctx, n_seqs, (int)n_blocks, err) ||
        kv_init(&m->kv_swa, m->ops, m->be, n_slide, kv_dim, o->kv_type, ctx, n_seqs, swa_blocks * n_seqs, err))
        return -1;
    if (!(m->layer_idx = malloc(sizeof *m->layer_idx * (size_t)m->cfg.n_layers))) return errf(err, "out of memory");
    for (int l = 0, nf = 0, ns = 0; l < m->cfg.n_layers; l++)
        m->layer_idx[l] = arch_layer_slides(&m->cfg, l) ? ns++ : nf++;
    m->tables_rows = m->n_batch < n_seqs ? m->n_batch : n_seqs;
    if (model_seq_new(m) != 0) return errf(err, "cannot create the first sequence");
    setup_layers(m, ctx);
    return alloc_activations(m, limit, err);
}

// A backend that computes from the mapping reads all of it on every decode
// step: fault it in now, in 2 MiB pages where the kernel can (before the
// uploads, which may copy weights out of it).
static int populate_weights(model *m, char *err) {
    m->huge_bytes = -1;
    return m->ops->host_weights ? map_populate(&m->gguf.map, &m->huge_bytes, err) : 0;
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
    if (arch_read_config(&m->gguf, &m->cfg, e2) || m->ops->init(&m->be, o->n_threads, e2) ||
        populate_weights(m, e2) || load_weights(m, e2) || init_context(m, o, e2)) {
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
    if (m->kv_swa.k) kv_free(&m->kv_swa);
    free(m->layer_idx);
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
long long model_huge_page_bytes(const model *m) { return m->huge_bytes; }
size_t model_x8_bytes(const model *m) { return m->x8_bytes; }

// ---- forward --------------------------------------------------------------

// y[i] = x · w[i]ᵀ for i < k: the backend's matmul_set where it has one.
static void matmuls(model *m, float *const y[], const qmat *const w[], int k, const float *x, int n, int joint) {
    if (m->ops->matmul_set) m->ops->matmul_set(m->be, y, w, k, x, n, joint);
    else
        for (int i = 0; i < k; i++) m->ops->matmul(m->be, y[i], w[i], x, n, joint);
}

// out = norm(x) over n rows, after x += d where d is the previous block's
// output not yet added (NULL: none): one backend op either way.
static void norm_rows(model *m, float *out, float *x, const float *d, const qmat *w, int n) {
    const model_config *c = &m->cfg;
    if (d) m->ops->add_rmsnorm(m->be, out, x, d, w, n, c->dim, c->rms_eps);
    else m->ops->rmsnorm(m->be, out, x, w, n, c->dim, c->rms_eps);
}

// Attention block: x += post_norm(Wo · attention(rope(Wq·norm(x)), cache ← rope(Wk·norm(x)), Wv·norm(x)) + bo)
// (biases, per-head q/k norms and the post-norm where the layer has them).
// pend: the previous block's output, added to x first (NULL: none). The
// block's own output is left in m->xb, for the caller to add.
static void attention_block(model *m, const layer_weights *L, int l, int n, const float *pend) {
    const backend_ops *o = m->ops;
    backend *b = m->be;
    const model_config *c = &m->cfg;
    const int hd = c->head_dim, kvd = c->n_kv_heads * hd;
    norm_rows(m, m->xb, m->x, pend, &L->attn_norm, n);
    const int joint = m->fb.n_prompt;
    matmuls(m, (float *const[]){m->q, m->k, m->v}, (const qmat *const[]){&L->wq, &L->wk, &L->wv}, 3, m->xb, n, joint);
    if (L->bq.data) {
        o->add_bias(b, m->q, &L->bq, n, c->n_heads * hd);
        o->add_bias(b, m->k, &L->bk, n, kvd);
        o->add_bias(b, m->v, &L->bv, n, kvd);
    }
    if (L->q_norm.data) {  // per-head RMS norm: each head is a row of head_dim
        o->rmsnorm(b, m->q, m->q, &L->q_norm, n * c->n_heads, hd, c->rms_eps);
        o->rmsnorm(b, m->k, m->k, &L->k_norm, n * c->n_kv_heads, hd, c->rms_eps);
    }
    const int slides = L->att.window > 0, li = m->layer_idx[l];
    const kvcache *kv = slides ? &m->kv_swa : &m->kv;
    const fwd_batch *fb = slides ? &m->fb_swa : &m->fb;
    if (o->rope_store) {
        o->rope_store(b, m->q, m->k, m->v, kv->k[li], kv->v[li], c->n_heads, c->n_kv_heads, hd, m->fb.pos, &L->rope,
                      fb, kv->type);
    } else {
        o->rope(b, m->q, m->k, n, c->n_heads, c->n_kv_heads, hd, m->fb.pos, &L->rope);
        o->kv_store(b, kv->k[li], kv->v[li], m->k, m->v, fb, kvd, kv->type);
    }
    o->attention(b, m->att, m->q, kv->k[li], kv->v[li], fb, c->n_heads, c->n_kv_heads, hd, kv->type, &L->att);
    o->matmul(b, m->xb, &L->wo, m->att, n, joint);
    if (L->bo.data) o->add_bias(b, m->xb, &L->bo, n, c->dim);
    if (L->post_attn_norm.data) o->rmsnorm(b, m->xb, m->xb, &L->post_attn_norm, n, c->dim, c->rms_eps);
}

// Feed-forward block on n rows of the residual stream x, the first `joint`
// of them prompt rows (see backend.h's matmul):
// x += post_norm(W_down · (act(W_gate·norm(x)) ⊙ W_up·norm(x))), act silu or
// gelu, the post-norm where the layer has one. pend and the output as in
// attention_block.
static void ffn_block(model *m, const layer_weights *L, float *x, const float *pend, int n, int joint) {
    const backend_ops *o = m->ops;
    backend *b = m->be;
    const model_config *c = &m->cfg;
    norm_rows(m, m->xb, x, pend, &L->ffn_norm, n);
    if (L->moe.router.data) {  // mixture of experts (decode rows as alone: backend.h's moe_matmul)
        moe_ffn(&m->moe, &L->moe, m->xb, m->xb, n, joint);
        return;
    }
    matmuls(m, (float *const[]){m->hb, m->hb2}, (const qmat *const[]){&L->w_gate, &L->w_up}, 2, m->xb, n, joint);
    if (c->ai->act == ACT_GELU) o->geglu(b, m->hb, m->hb, m->hb2, (size_t)n * c->ffn);
    else o->swiglu(b, m->hb, m->hb, m->hb2, n, c->ffn);
    o->matmul(b, m->xb, &L->w_down, m->hb, n, joint);
    if (L->post_ffn_norm.data) o->rmsnorm(b, m->xb, m->xb, &L->post_ffn_norm, n, c->dim, c->rms_eps);
}

static int clamp0(int v, int hi) { return v < 0 ? 0 : v > hi ? hi : v; }

// Runs the pass in m->fb (n <= n_batch tokens) through every layer. Only
// rows keep..n-1 of the residual stream are needed afterwards (for logits),
// so the last layer's feed-forward block runs on those alone, as llama.cpp
// does; every row's K and V still reach the cache. Each block's output is
// added to the residual stream by the next block's norm (add_rmsnorm).
static void forward_pass(model *m, int keep) {
    const backend_ops *o = m->ops;
    const int n = m->fb.n, last = m->cfg.n_layers - 1, joint = m->fb.n_prompt, dim = m->cfg.dim;
    o->embed(m->be, m->x, &m->tok_embd, m->fb.ids, n);
    if (m->cfg.embed_scale != 1.0f) o->scale(m->be, m->x, m->cfg.embed_scale, (size_t)n * dim);
    const float *pend = NULL;
    for (int l = 0; l < last; l++) {
        attention_block(m, &m->layers[l], l, n, pend);
        ffn_block(m, &m->layers[l], m->x, m->xb, n, joint);
        pend = m->xb;
    }
    attention_block(m, &m->layers[last], last, n, pend);
    o->add(m->be, m->x, m->xb, (size_t)n * dim);
    if (keep < n) {
        float *x = m->x + (size_t)keep * dim;
        ffn_block(m, &m->layers[last], x, NULL, n - keep, clamp0(joint - keep, n));
        o->add(m->be, x, m->xb, (size_t)(n - keep) * dim);
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
            memcpy(m->h_tables + (size_t)n_seqs * m->kv.max_blocks, m->kv.seqs[s].table,
                   sizeof(int32_t) * m->kv.seqs[s].n_blocks);
            memcpy(m->h_tables_swa + (size_t)n_seqs++ * m->kv.max_blocks, m->kv_swa.seqs[s].table,
                   sizeof(int32_t) * m->kv_swa.seqs[s].n_blocks);
        }
        const int p = m->kv.seqs[s].len++;
        m->kv_swa.seqs[s].len++;
        m->h_slot_swa[i] = m->kv_swa.n_layers ? kv_slot(&m->kv_swa, s, p) : 0;
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
    fwd_batch *fs = &m->fb_swa;
    fs->n = n, fs->n_seqs = n_seqs, fs->n_prompt = n_prompt, fs->max_len = fb->max_len;
    fs->ids = fb->ids, fs->pos = fb->pos, fs->seq = fb->seq;
    const backend_ops *o = m->ops;
    const size_t bytes = sizeof(int32_t) * (size_t)n;
    o->to_device(m->be, (void *)fb->ids, m->h_ids, bytes);
    o->to_device(m->be, (void *)fb->pos, m->h_pos, bytes);
    o->to_device(m->be, (void *)fb->seq, m->h_seq, bytes);
    o->to_device(m->be, (void *)fb->slot, m->h_slot, bytes);
    o->to_device(m->be, (void *)fb->tables, m->h_tables, sizeof(int32_t) * (size_t)n_seqs * fb->max_blocks);
    if (m->kv_swa.n_layers) {
        o->to_device(m->be, (void *)fs->slot, m->h_slot_swa, bytes);
        o->to_device(m->be, (void *)fs->tables, m->h_tables_swa, sizeof(int32_t) * (size_t)n_seqs * fb->max_blocks);
    }
    return first_out;
}

// Reserves room in kv for every sequence t extends; on failure, gives back
// what it reserved. The sliding layers' cache first returns the blocks that
// left the window (and SWA_KEEP) of the first token each sequence adds.
static int reserve(model *m, kvcache *kv, const model_tok *t, int n, char *err) {
    for (int i = 0; i < n; i++) m->added[t[i].seq]++;
    int failed = 0;
    for (int i = 0; i < n && !failed; i++) {
        const int s = t[i].seq;
        if (m->added[s] > 0 && kv == &m->kv_swa) kv_forget(kv, s, kv->seqs[s].len - m->cfg.n_swa + 1 - SWA_KEEP);
        if (m->added[s] > 0 && kv_reserve(kv, s, m->added[s], err)) failed = 1;
        m->added[s] = -m->added[s];  // reserved (or failed): negative marks it done
    }
    for (int i = 0; i < n; i++) {
        const int s = t[i].seq;
        if (failed && m->added[s] < 0) kv_truncate(kv, s, kv->seqs[s].len);
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
    if (reserve(m, &m->kv, t, n, err)) return -1;
    float *const logits0 = logits;
    for (int done = 0; done < n;) {
        const int nb = n - done < m->n_batch ? n - done : m->n_batch;
        if (m->kv_swa.n_layers && reserve(m, &m->kv_swa, t + done, nb, err)) return -1;
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
int model_rewind(model *m, int len) { return model_seq_rewind(m, 0, len); }
int model_seq_len(const model *m, int s) { return m->kv.seqs[s].len; }
int model_kv_room(const model *m) { return m->kv.n_free * KV_BLOCK; }

int model_seq_new(model *m) {
    const int s = kv_seq_new(&m->kv);
    if (s >= 0 && kv_seq_new(&m->kv_swa) != s) {  // both hold the same sequences
        kv_seq_free(&m->kv, s);
        return -1;
    }
    return s;
}

void model_seq_free(model *m, int s) {
    kv_seq_free(&m->kv, s);
    kv_seq_free(&m->kv_swa, s);
}

// Whether the sliding layers of sequence s still hold the window that a
// token at position len reads (the positions a rewind to len keeps).
static int window_kept(const model *m, int s, int len) { return model_kv_usable(m, len, m->kv_swa.seqs[s].floor); }

int model_seq_rewind(model *m, int s, int len) {
    if (len < 0 || len > m->kv.seqs[s].len) return m->kv.seqs[s].len;
    if (!window_kept(m, s, len)) len = 0;
    kv_truncate(&m->kv, s, len);
    kv_truncate(&m->kv_swa, s, len);
    return len;
}

int model_seq_share(model *m, int dst, int src, int len) {
    if (len > m->kv.seqs[src].len) len = m->kv.seqs[src].len;
    if (!window_kept(m, src, len)) len = 0;
    kv_seq_share(&m->kv, dst, src, len);
    if (m->kv_swa.n_layers) kv_seq_share(&m->kv_swa, dst, src, len);
    else m->kv_swa.seqs[dst].len = len;  // lengths only: the cache holds no layer
    return len;
}

int model_kv_floor(const model *m) { return m->kv_swa.n_layers ? m->kv_swa.seqs[0].floor : 0; }

int model_kv_usable(const model *m, int n, int floor) {
    const int first = n - m->cfg.n_swa + 1;  // the first position the window of position n reads
    return n == 0 || !m->kv_swa.n_layers || (first > 0 ? first : 0) >= floor;
}

int model_kv_type(const model *m) { return m->kv.type; }

size_t model_kv_bytes(const model *m, int n) { return 2 * (size_t)m->cfg.n_layers * n * m->kv.row_bytes; }

// Copies positions [0, n) of sequence 0 between the pools and planes of
// `stride` positions laid out as model_kv_export documents, one block's run
// of rows at a time. A sliding layer's positions below its cache's floor are
// not held: an export writes zeros for them, an import skips them.
static void kv_copy(model *m, int n, uint8_t *buf, int stride, int export) {
    const size_t row = m->kv.row_bytes, plane = (size_t)stride * row;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const kvcache *kv = m->layers[l].att.window > 0 ? &m->kv_swa : &m->kv;
        const int li = m->layer_idx[l], floor = kv->seqs[0].floor;
        for (int kvi = 0; kvi < 2; kvi++) {
            uint8_t *pool = kvi ? kv->v[li] : kv->k[li], *p = buf + (2 * (size_t)l + kvi) * plane;
            if (export) memset(p, 0, row * (size_t)(floor < n ? floor : n));
            for (int j = floor; j < n; j += KV_BLOCK) {
                size_t bytes = row * (size_t)(n - j < KV_BLOCK ? n - j : KV_BLOCK);
                uint8_t *dev = pool + (size_t)kv_slot(kv, 0, j) * row;
                if (export) m->ops->to_host(m->be, p + j * row, dev, bytes);
                else m->ops->to_device(m->be, dev, p + j * row, bytes);
            }
        }
    }
}

int model_kv_export(model *m, int n, void *dst, char *err) {
    if (n < 0 || n > model_len(m)) return errf(err, "cannot export %d positions: the cache holds %d", n, model_len(m));
    kv_copy(m, n, dst, n, 1);
    return 0;
}

int model_kv_import(model *m, int n, const void *src, int stride, int floor, char *err) {
    if (n < 0 || n > m->kv.n_ctx || stride < n)
        return errf(err, "cannot import %d positions (stride %d): the context holds %d", n, stride, m->kv.n_ctx);
    if (!model_kv_usable(m, n, floor))
        return errf(err, "the sliding-window layers' KV starts at position %d, after the window of position %d",
                    floor, n);
    model_seq_rewind(m, 0, 0);
    // the sliding layers take only what the positions after n will read
    const int keep = n - m->cfg.n_swa + 1 - SWA_KEEP;
    if (m->kv_swa.n_layers) kv_start_at(&m->kv_swa, 0, keep > floor ? keep : floor);
    if (kv_reserve(&m->kv, 0, n, err) ||
        (m->kv_swa.n_layers && kv_reserve(&m->kv_swa, 0, n - m->kv_swa.seqs[0].len, err))) {
        model_seq_rewind(m, 0, 0);
        return -1;
    }
    kv_copy(m, n, (uint8_t *)src, stride, 0);
    m->kv.seqs[0].len = m->kv_swa.seqs[0].len = n;
    return 0;
}
