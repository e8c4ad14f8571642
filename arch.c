// arch.c — the architecture table and the metadata of one model (arch.h).
#include "arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "moe.h"
#include "util.h"

// What llama.cpp's graph for each architecture reads (src/models/*.cpp there).
static const arch_info ARCHS[] = {
    {.name = "llama", .ffn_norm = "ffn_norm"},
    {.name = "qwen2", .neox = 1, .qkv_bias = 1, .ffn_norm = "ffn_norm"},
    {.name = "qwen3", .neox = 1, .qk_norm = 1, .ffn_norm = "ffn_norm"},
    // every 6th layer global (l % 6 == 5), the others local with their own rope
    {.name = "gemma3", .neox = 1, .qk_norm = 1, .post_norms = 1, .embed_scale = 1, .act = ACT_GELU,
     .swa_period = 6, .swa_own_rope = 1, .ffn_norm = "ffn_norm"},
    {.name = "phi3", .neox = 1, .fused_qkv = 1, .fused_up = 1, .swa_ignored = 1, .longrope = 1,
     .ffn_norm = "ffn_norm"},
    // even layers slide, odd ones attend fully
    {.name = "gpt-oss", .neox = 1, .qkv_bias = 1, .out_bias = 1, .sinks = 1, .swa_period = 2, .moe = 1,
     .moe_gating = MOE_TOPK_SOFTMAX, .oai_glu = 1, .glu_alpha = 1.702f, .glu_limit = 7.0f,
     .ffn_norm = "post_attention_norm"},
    {.name = "qwen3moe", .neox = 1, .qk_norm = 1, .moe = 1, .moe_gating = MOE_SOFTMAX_NORM, .ffn_norm = "ffn_norm"},
};
#define N_ARCHS (int)(sizeof ARCHS / sizeof *ARCHS)

void arch_names(char *buf, size_t size) {
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < N_ARCHS && used < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? ", " : "", ARCHS[i].name);
}

int arch_layer_slides(const model_config *c, int l) {
    return c->n_swa > 0 && c->swa_period > 0 && l % c->swa_period < c->swa_period - 1;
}

// "<arch>.<suffix>" into key.
static const char *akey(char key[128], const model_config *c, const char *suffix) {
    snprintf(key, 128, "%s.%s", c->ai->name, suffix);
    return key;
}

// Reads "<arch>.<suffix>" as u32. Returns 0, or -1 with err when required and absent.
static int meta_u32(const gguf_file *f, const model_config *c, const char *suffix, uint32_t *out, int required,
                    char *err) {
    char key[128];
    int r = gguf_get_u32(f, akey(key, c, suffix), out, err);
    if (r == 1 && required) return errf(err, "missing metadata key '%s'", key);
    return r < 0 ? -1 : 0;
}

static int meta_f32(const gguf_file *f, const model_config *c, const char *suffix, float *out, char *err) {
    char key[128];
    return gguf_get_f32(f, akey(key, c, suffix), out, err) < 0 ? -1 : 0;
}

// YaRN's correction range (ggml's ggml_rope_yarn_corr_dims): the pairs whose
// wavelength fits beta_fast / beta_slow times into the original context.
static float yarn_corr_dim(int n_rot, int n_ctx_orig, float beta, float base) {
    return (float)n_rot * logf((float)n_ctx_orig / (beta * 2.0f * (float)M_PI)) / (2.0f * logf(base));
}

// YaRN's magnitude correction (as llama.cpp's context sets yarn_attn_factor):
// the rope scales cos/sin by 1 + 0.1·ln(factor) itself, so this cancels it
// unless a log multiplier asks for another one.
static float yarn_mscale(float factor, float mscale) { return factor <= 1.0f ? 1.0f : 0.1f * mscale * logf(factor) + 1.0f; }

static int read_yarn(const gguf_file *f, model_config *c, float factor, char *err) {
    rope_cfg *r = &c->rope;
    float beta_fast = 32.0f, beta_slow = 1.0f, log_mul = 0.0f;
    r->ext_factor = 1.0f;
    if (c->n_ctx_orig <= 0)
        return errf(err, "YaRN rope scaling needs '%s.rope.scaling.original_context_length' or a context_length",
                    c->ai->name);
    if (meta_f32(f, c, "rope.scaling.yarn_beta_fast", &beta_fast, err) ||
        meta_f32(f, c, "rope.scaling.yarn_beta_slow", &beta_slow, err) ||
        meta_f32(f, c, "rope.scaling.yarn_ext_factor", &r->ext_factor, err) ||
        meta_f32(f, c, "rope.scaling.yarn_log_multiplier", &log_mul, err))
        return -1;
    if (!(beta_fast > 0.0f && beta_slow > 0.0f))
        return errf(err, "key '%s.rope.scaling.yarn_beta_fast/slow': %g / %g must be > 0", c->ai->name, beta_fast,
                    beta_slow);
    const float a = log_mul != 0.0f ? yarn_mscale(factor, 1.0f) / yarn_mscale(factor, log_mul)
                                    : yarn_mscale(factor, 1.0f);
    if (r->ext_factor != 0.0f) r->attn_factor *= a * (1.0f / (1.0f + 0.1f * logf(factor)));
    const float lo = floorf(yarn_corr_dim(r->n_rot, c->n_ctx_orig, beta_fast, r->base));
    const float hi = ceilf(yarn_corr_dim(r->n_rot, c->n_ctx_orig, beta_slow, r->base));
    r->corr_lo = lo > 0.0f ? lo : 0.0f;
    r->corr_hi = hi < (float)(r->n_rot - 1) ? hi : (float)(r->n_rot - 1);
    return 0;
}

// rope.scaling.{type,factor,attn_factor} and YaRN's keys into c->rope.
static int read_rope_scaling(const gguf_file *f, model_config *c, char *err) {
    char key[128];
    gguf_str type = {"linear", 6};  // llama.cpp's default
    if (gguf_get_str(f, akey(key, c, "rope.scaling.type"), &type, err) < 0) return -1;
    float factor = 1.0f;
    if (meta_f32(f, c, "rope.scaling.factor", &factor, err) < 0 ||
        meta_f32(f, c, "rope.scaling.attn_factor", &c->rope.attn_factor, err) < 0)
        return -1;
    if (!(c->rope.attn_factor > 0.0f && c->rope.attn_factor < 1e6f))
        return errf(err, "key '%s.rope.scaling.attn_factor': %g is not in (0, 1e6)", c->ai->name, c->rope.attn_factor);
    if (gguf_str_eq(type, "none") || factor == 1.0f || factor == 0.0f) return 0;
    if (!gguf_str_eq(type, "linear") && !gguf_str_eq(type, "yarn"))
        return errf(err, "key '%s': rope scaling '%.*s' is not supported (quill knows none, linear, yarn)",
                    key, (int)type.len, type.ptr);
    if (!(factor > 0.0f && factor < 1e6f)) return errf(err, "key '%s.rope.scaling.factor': must be > 0", c->ai->name);
    c->rope.freq_scale = 1.0f / factor;
    return gguf_str_eq(type, "yarn") ? read_yarn(f, c, factor, err) : 0;
}

static int find_arch(const gguf_file *f, model_config *c, char *err) {
    gguf_str a;
    int r = gguf_get_str(f, "general.architecture", &a, err);
    if (r) return r < 0 ? -1 : errf(err, "missing metadata key 'general.architecture'");
    char runs[256];
    arch_names(runs, sizeof runs);
    for (int i = 0; i < N_ARCHS; i++)
        if (gguf_str_eq(a, ARCHS[i].name)) {
            c->ai = &ARCHS[i];
            return 0;
        }
    return errf(err, "architecture '%.*s' is not supported (quill runs %s)", (int)a.len, a.ptr, runs);
}

// The shapes: dims, heads, layers.
static int read_shapes(const gguf_file *f, model_config *c, char *err) {
    uint32_t dim, layers, heads, kv_heads = 0, ffn, ctx = 0, hd = 0, vd = 0, n_rot = 0;
    if (meta_u32(f, c, "embedding_length", &dim, 1, err) || meta_u32(f, c, "block_count", &layers, 1, err) ||
        meta_u32(f, c, "attention.head_count", &heads, 1, err) ||
        meta_u32(f, c, "feed_forward_length", &ffn, 1, err) ||
        meta_u32(f, c, "attention.head_count_kv", &kv_heads, 0, err) ||
        meta_u32(f, c, "context_length", &ctx, 0, err) || meta_u32(f, c, "attention.key_length", &hd, 0, err) ||
        meta_u32(f, c, "attention.value_length", &vd, 0, err) ||
        meta_u32(f, c, "rope.dimension_count", &n_rot, 0, err))
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
    c->dim = (int)dim, c->n_layers = (int)layers, c->n_heads = (int)heads, c->n_kv_heads = (int)kv_heads;
    c->head_dim = (int)hd, c->ffn = (int)ffn, c->n_ctx_train = (int)ctx;
    c->rope = (rope_cfg){.n_rot = (int)n_rot, .neox = c->ai->neox, .base = 10000.0f, .freq_scale = 1.0f,
                         .attn_factor = 1.0f};
    return 0;
}

// The mixture-of-experts keys: expert_count, expert_used_count and
// expert_feed_forward_length (each expert's hidden width).
static int read_experts(const gguf_file *f, model_config *c, char *err) {
    const char *an = c->ai->name;
    uint32_t ne = 0, used = 0, ffn = 0;
    if (meta_u32(f, c, "expert_count", &ne, 1, err) || meta_u32(f, c, "expert_used_count", &used, 1, err) ||
        meta_u32(f, c, "expert_feed_forward_length", &ffn, 1, err))
        return -1;
    if (ne < 1 || ne > MOE_MAX_EXPERTS)
        return errf(err, "key '%s.expert_count': %u experts (quill runs 1 to %d)", an, ne, MOE_MAX_EXPERTS);
    if (used < 1 || used > ne)
        return errf(err, "key '%s.expert_used_count': %u is not in 1 .. expert_count (%u)", an, used, ne);
    if (ffn < 1 || ffn > (1u << 24)) return errf(err, "key '%s.expert_feed_forward_length': %u is implausible", an, ffn);
    c->n_expert = (int)ne, c->n_expert_used = (int)used, c->ffn_expert = (int)ffn;
    return 0;
}

// The sliding window: its size, which layers slide, and their rope.
static int read_swa(const gguf_file *f, model_config *c, char *err) {
    const arch_info *ai = c->ai;
    uint32_t n_swa = 0, period = (uint32_t)ai->swa_period;
    if (ai->swa_ignored) return meta_u32(f, c, "attention.sliding_window", &n_swa, 0, err);
    if (!ai->swa_period) return 0;
    if (meta_u32(f, c, "attention.sliding_window", &n_swa, 1, err) ||
        meta_u32(f, c, "attention.sliding_window_pattern", &period, 0, err))
        return -1;
    if (n_swa > (1u << 30)) return errf(err, "key '%s.attention.sliding_window': %u is too large", ai->name, n_swa);
    c->n_swa = (int)n_swa, c->swa_period = (int)period;
    c->rope_swa = c->rope;
    if (ai->swa_own_rope) {  // llama.cpp: base 10000 unless the file says, never scaled
        c->rope_swa = (rope_cfg){.n_rot = c->rope.n_rot, .neox = c->rope.neox, .base = 10000.0f,
                                 .freq_scale = 1.0f, .attn_factor = 1.0f};
    }
    if (meta_f32(f, c, "rope.freq_base_swa", &c->rope_swa.base, err)) return -1;
    if (!(c->rope_swa.base > 1.0f && c->rope_swa.base < 1e30f))
        return errf(err, "key '%s.rope.freq_base_swa': %g is not a finite number > 1", ai->name, c->rope_swa.base);
    return 0;
}

int arch_read_config(const gguf_file *f, model_config *c, char *err) {
    *c = (model_config){.rms_eps = 1e-5f, .embed_scale = 1.0f};
    if (find_arch(f, c, err) || read_shapes(f, c, err)) return -1;
    const char *an = c->ai->name;
    uint32_t orig = 0;
    if (meta_f32(f, c, "attention.layer_norm_rms_epsilon", &c->rms_eps, err) ||
        meta_f32(f, c, "rope.freq_base", &c->rope.base, err) ||
        meta_u32(f, c, "rope.scaling.original_context_length", &orig, 0, err))
        return -1;
    c->n_ctx_orig = orig ? (int)orig : c->n_ctx_train;
    if (!(c->rms_eps > 0.0f && c->rms_eps < 1.0f))
        return errf(err, "key '%s.attention.layer_norm_rms_epsilon': %g is not in (0, 1)", an, c->rms_eps);
    if (!(c->rope.base > 1.0f && c->rope.base < 1e30f))
        return errf(err, "key '%s.rope.freq_base': %g is not a finite number > 1", an, c->rope.base);
    if (read_rope_scaling(f, c, err) || read_swa(f, c, err) || (c->ai->moe && read_experts(f, c, err))) return -1;
    c->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    if (c->ai->embed_scale) c->embed_scale = sqrtf((float)c->dim);
    return 0;
}
