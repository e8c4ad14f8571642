// arch.h — the architectures quill runs, as data, and the metadata that
// configures one model.
//
// model.c's forward pass is written once; what differs between llama, qwen2,
// qwen3, gemma3, phi3, qwen3moe and gpt-oss (optional tensors, where the norms sit, the FFN's
// activation, the embedding scale, the rope pairing, which layers slide) is
// a row of arch.c's table, read here into a model_config. An architecture
// that is not in the table, or a key it needs that the file lacks, fails at
// load with one line naming it.
#ifndef QUILL_ARCH_H
#define QUILL_ARCH_H

#include "backend.h"
#include "gguf.h"

enum ffn_act { ACT_SILU, ACT_GELU };  // the gate's activation: SwiGLU or GeGLU (tanh gelu)

// What the forward pass reads for one architecture. Tensors marked required
// here must be in the file; the others are used when present (llama.cpp
// treats them the same way).
typedef struct {
    const char *name;     // general.architecture
    int neox;             // rope pairs (i, i + n_rot/2) instead of (2i, 2i+1)
    int qkv_bias;         // attn_{q,k,v}.bias required (qwen2, gpt-oss)
    int out_bias;         // attn_output.bias required (gpt-oss)
    int qk_norm;          // per-head attn_{q,k}_norm required (qwen3, gemma3)
    int post_norms;       // post_attention_norm / post_ffw_norm on the sublayer outputs (gemma3)
    int fused_qkv;        // attn_qkv: q, then k, then v rows (phi3)
    int fused_up;         // ffn_up: gate rows, then up rows, no ffn_gate (phi3)
    int embed_scale;      // embeddings × sqrt(dim) (gemma3)
    int act;              // enum ffn_act
    int swa_period;       // sliding-window pattern: layer l slides iff l % period < period - 1 (0: no sliding)
    int swa_own_rope;     // sliding layers: base rope.freq_base_swa (default 10000), no scaling (gemma3)
    int swa_ignored;      // attention.sliding_window is read and ignored, as llama.cpp does (phi3)
    int sinks;            // attn_sinks required (gpt-oss)
    int longrope;         // rope_factors_{short,long} (phi3)
    int moe;              // mixture-of-experts FFN: expert_count, ... required, experts in place of the dense FFN
    int moe_gating;       // enum moe_gating (backend.h): how the router's logits become weights
    int oai_glu;          // the experts' GLU is gpt-oss's clamped SwiGLU, with these (llama.cpp's values):
    float glu_alpha, glu_limit;
    const char *ffn_norm; // the norm before the FFN (gpt-oss calls it post_attention_norm)
} arch_info;

typedef struct {
    const arch_info *ai;
    int n_vocab;
    int dim;          // embedding width
    int n_layers;
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int ffn;          // feed-forward hidden width
    int n_expert;     // experts per MoE layer (0: a dense FFN)
    int n_expert_used;  // experts each token uses
    int ffn_expert;   // hidden width of one expert
    int n_ctx_train;  // context length from metadata
    int n_ctx_orig;   // the context the rope was trained for (YaRN, LongRoPE): original_context_length
    float rms_eps;
    float attn_scale; // multiplies q·k: 1/sqrt(head_dim)
    float embed_scale;  // multiplies the input embeddings (1: none)
    int n_swa;        // sliding window in positions (0: none)
    int swa_period;   // sliding layers: l % swa_period < swa_period - 1 (0: none)
    rope_cfg rope;    // full-attention layers (freq_factors set per layer by model.c)
    rope_cfg rope_swa;  // sliding layers
} model_config;

// Reads general.architecture and the hyperparameters into c (n_vocab is set
// by the loader from the embedding). 0, or -1 with err naming the key.
int arch_read_config(const gguf_file *f, model_config *c, char *err);
// 1 when layer l attends through the sliding window.
int arch_layer_slides(const model_config *c, int l);
// The architectures this build runs, comma-separated, into buf.
void arch_names(char *buf, size_t size);

#endif
