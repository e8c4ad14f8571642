"""npllama.py — a slow, plain numpy reference for checking converted GGUFs without quill.

  * SPMTokenizer: llama.cpp's SentencePiece ("llama") encoder: split into UTF-8
    characters, repeatedly merge the adjacent pair whose concatenation is the
    best-scoring vocabulary entry (ties: leftmost), byte fallback <0xNN> for leftovers.
  * LlamaRef: a float64 forward pass over dequantized weights (F32 F16 BF16 Q8_0
    Q4_0 Q4_1 Q5_0 Q5_1 through gguf_writer, Q4_K Q5_K Q6_K through tests/ref_quant.py)
    of the dense architectures llama, qwen2, qwen3, gemma3 and phi3, written from their
    published definitions (not from quill): llama.cpp's "normal" RoPE (adjacent pairs) for
    llama and NEOX pairs (i, i + n_rot/2) for the others, partial rotary, Llama-3 and
    LongRoPE frequency factors, linear and YaRN scaling, GQA, RMSNorm, q/k/v biases,
    per-head q/k norms, Gemma 3's embedding scale, GELU gate, post-norms and local
    sliding-window layers with their own rope, Phi-3's fused QKV and gate+up, attention
    sinks; tied or untied output. step() feeds one token through a KV cache; forward()
    runs a whole sequence from position 0 at once (what perplexity uses).
  * greedy(): argmax decoding from a prompt.
  * perplexity(): llama.cpp's llama-perplexity protocol (as `quill ppl`): the text
    tokenized once with BOS, cut into chunks of n_ctx tokens whose first token becomes BOS,
    each chunk evaluated from an empty cache, and only positions n_ctx/2 .. n_ctx-2 scored
    (each predicting the next token).

    /usr/bin/python3 models/npllama.py MODEL.gguf "Once upon a time" -n 32
prints the greedy continuation (and its ids on stderr);
    /usr/bin/python3 models/npllama.py MODEL.gguf --ppl TEXT.txt -c 128 [--chunks N]
prints "PPL = x +/- e" like `quill ppl`;
    /usr/bin/python3 models/npllama.py MODEL.gguf "prompt" --logits OUT.npy
saves the float64 logits of every prompt position (BOS first), [n_tokens, n_vocab];
with --ids 1,2,3 the prompt is those token ids instead of a text.
"""
import heapq
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUFReader  # noqa: E402

SPACE = "\u2581"
TOKEN_CONTROL, TOKEN_BYTE = 3, 6


class SPMTokenizer:
    def __init__(self, r):
        kv = r.kv
        if kv.get("tokenizer.ggml.model") != "llama":
            raise ValueError("tokenizer model %r is not 'llama'" % kv.get("tokenizer.ggml.model"))
        self.tokens = kv["tokenizer.ggml.tokens"]
        self.scores = kv.get("tokenizer.ggml.scores", [0.0] * len(self.tokens))
        self.types = kv.get("tokenizer.ggml.token_type", [1] * len(self.tokens))
        self.index = {}
        for i, t in enumerate(self.tokens):
            self.index.setdefault(t, i)
        self.bos = kv.get("tokenizer.ggml.bos_token_id")
        self.eos = kv.get("tokenizer.ggml.eos_token_id")
        self.unk = kv.get("tokenizer.ggml.unknown_token_id", 0)
        self.add_space_prefix = kv.get("tokenizer.ggml.add_space_prefix", True)
        self.byte_ids = {}
        for i, (t, ty) in enumerate(zip(self.tokens, self.types)):
            if ty == TOKEN_BYTE and len(t) == 6:
                self.byte_ids[int(t[3:5], 16)] = i

    def encode(self, text, add_bos=True):
        ids = [self.bos] if add_bos and self.bos is not None else []
        if not text:
            return ids
        if self.add_space_prefix:
            text = " " + text
        sym = list(text.replace(" ", SPACE))
        nxt = list(range(1, len(sym))) + [-1]
        prv = list(range(-1, len(sym) - 1))
        heap = []

        def push(left):
            right = nxt[left]
            if left < 0 or right < 0:
                return
            i = self.index.get(sym[left] + sym[right])
            if i is not None:
                heapq.heappush(heap, (-self.scores[i], left, sym[left], sym[right]))

        for k in range(len(sym) - 1):
            push(k)
        while heap:
            _, left, a, b = heapq.heappop(heap)
            right = nxt[left]
            if right < 0 or sym[left] != a or sym[right] != b:
                continue  # stale: one side has merged since this pair was queued
            sym[left], sym[right] = a + b, ""
            nxt[left] = nxt[right]
            if nxt[right] >= 0:
                prv[nxt[right]] = left
            push(prv[left])
            push(left)
        k = 0
        while k >= 0:
            i = self.index.get(sym[k])
            if i is not None:
                ids.append(i)
            else:
                ids += [self.byte_ids.get(c, self.unk) for c in sym[k].encode("utf-8")]
            k = nxt[k]
        return ids

    def decode(self, ids, after_bos=False):
        """Text of ids; after_bos drops the space SentencePiece's dummy prefix added."""
        out = b""
        for i in ids:
            t, ty = self.tokens[i], self.types[i]
            if ty == TOKEN_CONTROL:
                continue
            if ty == TOKEN_BYTE:
                out += bytes([int(t[3:5], 16)])
            else:
                out += t.replace(SPACE, " ").encode("utf-8", "surrogateescape")
        text = out.decode("utf-8", "replace")
        if after_bos and self.add_space_prefix and text.startswith(" "):
            text = text[1:]
        return text


def dequantized(r, name):
    """Tensor name of reader r as float64, rows first."""
    t = r.tensors[name]
    try:
        return r.tensor_float(t).astype(np.float64)
    except ValueError:  # a type gguf_writer cannot dequantize: the K-quants
        tests = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests")
        if tests not in sys.path:
            sys.path.append(tests)
        import ref_quant
        if t.type not in ref_quant.BLOCK:
            raise ValueError("%s: %s: no dequantizer for %s" % (r.path, name, t.type_name))
        x = ref_quant.dequantize(bytes(r.tensor_bytes(t)), t.type)
        return x.reshape(tuple(reversed(t.shape)))


# What each architecture's published model does differently (Gemma 3: google's
# gemma_pytorch; Phi-3: microsoft's modeling_phi3; Qwen2/3: their configs), in the terms
# GGUF files store: neox rope pairs, sliding-window pattern (period p: layer l is local
# when l % p < p - 1; Gemma 3 is 5 local layers to each global one) and so on.
ARCHS = {
    "llama": {},
    "qwen2": {"neox": True},
    "qwen3": {"neox": True},
    "gemma3": {"neox": True, "gelu": True, "embed_scale": True, "swa_period": 6, "swa_own_rope": True},
    "phi3": {"neox": True},
    # mixtures of experts (Qwen3-MoE: Qwen's modeling_qwen3_moe; gpt-oss: openai's reference
    # torch code): "moe" says how the router weighs the experts it picks, see _moe
    "qwen3moe": {"neox": True, "moe": "softmax_renorm"},
    "gpt-oss": {"neox": True, "moe": "topk_softmax", "swa_period": 2, "ffn_norm": "post_attention_norm"},
}


def gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))


class LlamaRef:
    def __init__(self, path, n_ctx=512):
        """n_ctx: the context per sequence the model is run with (LongRoPE picks its
        long factors only when it exceeds the original context, as llama.cpp does)."""
        r = GGUFReader(path)
        self.r = r
        arch = r.kv["general.architecture"]
        if arch not in ARCHS:
            raise ValueError("%s: architecture %r is not one npllama knows" % (path, arch))
        self.a = ARCHS[arch]
        g = lambda k, d=None: r.kv.get("%s.%s" % (arch, k), d)  # noqa: E731
        self.dim = g("embedding_length")
        self.n_layers = g("block_count")
        self.n_heads = g("attention.head_count")
        self.n_kv = g("attention.head_count_kv", self.n_heads)
        self.head_dim = g("attention.key_length", self.dim // self.n_heads)
        self.n_rot = g("rope.dimension_count", self.head_dim)
        self.eps = g("attention.layer_norm_rms_epsilon", 1e-5)
        self.k_used = g("expert_used_count", 0)
        self.experts = None      # [n_layers, positions, k] experts to use instead of the router's
        self.router_margins = []  # with experts: per (layer, row), see _moe
        self.router_logits = []   # with experts: per (layer, row), the router's logits
        self.rope = self._rope_params(g, n_ctx)
        self.n_swa = g("attention.sliding_window", 0) if self.a.get("swa_period") else 0
        w = lambda n: dequantized(r, n)  # noqa: E731
        opt = lambda n: w(n) if n in r.tensors else None  # noqa: E731
        self.emb = w("token_embd.weight")
        self.out = w("output.weight") if "output.weight" in r.tensors else self.emb
        self.norm = w("output_norm.weight")
        self.layers = [self._layer(i, w, opt) for i in range(self.n_layers)]
        self.reset()

    def _rope_params(self, g, n_ctx):
        """Per kind of layer ("full", "swa"): base, linear scale s (positions × s), the
        frequency factors, the YaRN parameters (or None) and the cos/sin magnitude."""
        r, half = self.r, self.n_rot // 2
        factors = r.tensor_float(r.tensors["rope_freqs.weight"]) if "rope_freqs.weight" in r.tensors else None
        orig = g("rope.scaling.original_context_length", g("context_length"))
        if "rope_factors_short.weight" in r.tensors:  # LongRoPE
            which = "long" if n_ctx > orig else "short"
            factors = r.tensor_float(r.tensors["rope_factors_%s.weight" % which])
        factors = np.ones(half) if factors is None else np.asarray(factors, dtype=np.float64)
        kind, factor = g("rope.scaling.type", "linear"), g("rope.scaling.factor", 1.0)
        scale = 1.0 / factor if kind in ("linear", "yarn") and factor not in (0.0, 1.0) else 1.0
        mag, yarn = g("rope.scaling.attn_factor", 1.0), None
        if kind == "yarn" and scale != 1.0:
            # YaRN (Peng et al.): pairs whose wavelength fits more than beta_fast times in the
            # original context keep their frequency, those under beta_slow times interpolate,
            # a linear ramp between; cos/sin grow by 0.1 ln(factor) + 1
            def dim(beta):
                return self.n_rot * np.log(orig / (beta * 2 * np.pi)) / (2 * np.log(base))
            base = g("rope.freq_base", 10000.0)
            lo = max(0.0, np.floor(dim(g("rope.scaling.yarn_beta_fast", 32.0))))
            hi = min(self.n_rot - 1.0, np.ceil(dim(g("rope.scaling.yarn_beta_slow", 1.0))))
            yarn = (lo, hi)
            mag *= 0.1 * np.log(factor) + 1
        full = {"base": g("rope.freq_base", 10000.0), "scale": scale, "ff": factors, "yarn": yarn, "mag": mag}
        swa = dict(full)
        if self.a.get("swa_own_rope"):
            swa = {"base": 10000.0, "scale": 1.0, "ff": np.ones(half), "yarn": None, "mag": 1.0}
        swa["base"] = g("rope.freq_base_swa", swa["base"])
        return {"full": full, "swa": swa}

    def _layer(self, i, w, opt):
        b = lambda n: opt("blk.%d.%s" % (i, n))  # noqa: E731
        L = {k: b(k + ".weight") for k in ("attn_norm", "attn_output", "ffn_norm", "ffn_down", "attn_q_norm",
                                             "attn_k_norm", "post_attention_norm", "post_ffw_norm")}
        L.update({k + "_b": b(k + ".bias") for k in ("attn_q", "attn_k", "attn_v", "attn_output")})
        L["sinks"] = b("attn_sinks.weight")
        qd, kvd = self.n_heads * self.head_dim, self.n_kv * self.head_dim
        qkv = b("attn_qkv.weight")
        if qkv is not None:  # Phi-3: q, k, v rows of one matrix
            L["attn_q"], L["attn_k"], L["attn_v"] = qkv[:qd], qkv[qd:qd + kvd], qkv[qd + kvd:]
        else:
            L["attn_q"], L["attn_k"], L["attn_v"] = b("attn_q.weight"), b("attn_k.weight"), b("attn_v.weight")
        if self.a.get("ffn_norm"):  # gpt-oss: the FFN's input norm has another name
            L["ffn_norm"], L[self.a["ffn_norm"]] = L[self.a["ffn_norm"]], None
        if self.a.get("moe"):  # the router [n_exp, dim] and the experts [n_exp, rows, cols]
            L.update({k: b(k + ".weight") for k in ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps",
                                                     "ffn_down_exps")})
            L.update({k + "_b": b(k + ".bias") for k in ("ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps",
                                                          "ffn_down_exps")})
        up = b("ffn_up.weight")
        L["ffn_gate"], L["ffn_up"] = b("ffn_gate.weight"), up
        if L["ffn_gate"] is None and up is not None:  # Phi-3: gate rows, then up rows
            L["ffn_gate"], L["ffn_up"] = up[:len(up) // 2], up[len(up) // 2:]
        p = self.a.get("swa_period", 0)
        L["local"] = bool(self.n_swa and p and i % p < p - 1)
        return L

    def reset(self):
        self.k = [np.zeros((0, self.n_kv, self.head_dim)) for _ in range(self.n_layers)]
        self.v = [np.zeros((0, self.n_kv, self.head_dim)) for _ in range(self.n_layers)]
        self.pos = 0

    def _rms(self, x, w):  # x: [..., dim]
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos, rp):  # x: [t, heads, head_dim], pos: [t]
        half = self.n_rot // 2
        i = np.arange(half)
        extrap = pos[:, None] * rp["base"] ** (-2.0 * i / self.n_rot) / rp["ff"]  # [t, n_rot/2]
        theta = extrap * rp["scale"]
        if rp["yarn"] is not None:
            lo, hi = rp["yarn"]
            ramp = 1 - np.clip((i - lo) / max(0.001, hi - lo), 0, 1)  # 1: keep the frequency
            theta = theta * (1 - ramp) + extrap * ramp
        c, s = (np.cos(theta) * rp["mag"])[:, None, :], (np.sin(theta) * rp["mag"])[:, None, :]
        x = x.copy()
        if self.a.get("neox"):
            a, b = slice(0, half), slice(half, self.n_rot)
        else:
            a, b = slice(0, self.n_rot, 2), slice(1, self.n_rot, 2)
        x0, x1 = x[..., a].copy(), x[..., b].copy()
        x[..., a] = x0 * c - x1 * s
        x[..., b] = x0 * s + x1 * c
        return x

    def _proj(self, h, L, name, heads):
        y = h @ L[name].T
        if L[name + "_b"] is not None:
            y = y + L[name + "_b"]
        return y.reshape(len(h), heads, self.head_dim)

    def _attention(self, li, L, h, pos):
        t, hd, group = len(h), self.head_dim, self.n_heads // self.n_kv
        rp = self.rope["swa" if L["local"] else "full"]
        q, k = self._proj(h, L, "attn_q", self.n_heads), self._proj(h, L, "attn_k", self.n_kv)
        v = self._proj(h, L, "attn_v", self.n_kv)
        if L["attn_q_norm"] is not None:
            q, k = self._rms(q, L["attn_q_norm"]), self._rms(k, L["attn_k_norm"])
        q, k = self._rope(q, pos, rp), self._rope(k, pos, rp)
        self.k[li] = np.concatenate([self.k[li], k])
        self.v[li] = np.concatenate([self.v[li], v])
        keys = np.arange(len(self.k[li]))[None, :]
        seen = keys <= pos[:, None]  # causal
        if L["local"]:
            seen &= keys > pos[:, None] - self.n_swa
        K = np.repeat(self.k[li], group, axis=1).transpose(1, 2, 0)  # [heads, hd, T]
        V = np.repeat(self.v[li], group, axis=1).transpose(1, 0, 2)  # [heads, T, hd]
        s = q.transpose(1, 0, 2) @ K / np.sqrt(hd) + np.where(seen, 0.0, -np.inf)  # [heads, t, T]
        mx = s.max(axis=-1, keepdims=True)
        if L["sinks"] is not None:  # one more logit per head, in the sum only
            mx = np.maximum(mx, L["sinks"][:, None, None])
        p = np.exp(s - mx)
        den = p.sum(axis=-1, keepdims=True)
        if L["sinks"] is not None:
            den = den + np.exp(L["sinks"][:, None, None] - mx)
        att = (p / den @ V).transpose(1, 0, 2).reshape(t, self.n_heads * hd)
        out = att @ L["attn_output"].T
        if L["attn_output_b"] is not None:
            out = out + L["attn_output_b"]
        if L["post_attention_norm"] is not None:
            out = self._rms(out, L["post_attention_norm"])
        return out

    def _moe(self, L, h, li, pos):
        """Each row of h [t, dim] through the k experts its router picks, weighted.
        softmax_renorm (Qwen3-MoE): softmax over all experts, the k most probable,
        their probabilities renormalized to sum 1. topk_softmax (gpt-oss): the k
        largest router logits (the router has a bias), a softmax over those k; its
        experts have biases and a clamped SwiGLU: gate ≤ 7, up in [-7, 7],
        gate·σ(1.702·gate)·(up + 1)."""
        def bias(n, e=None):  # a bias, or 0 where the file has none
            return 0.0 if L[n + "_b"] is None else L[n + "_b"] if e is None else L[n + "_b"][e]
        z = h @ L["ffn_gate_inp"].T + bias("ffn_gate_inp")  # [t, n_exp]
        pick = np.argsort(-z, axis=1, kind="stable")[:, :self.k_used]  # softmax keeps the order
        if self.experts is not None:  # another implementation's choice (see main's --experts)
            forced = self.experts[li, pos]
            for i in range(len(h)):  # how far its choice is from this one's: < 0 where they differ
                rest = np.delete(z[i], forced[i])
                self.router_margins.append(z[i, forced[i]].min() - rest.max())
                self.router_logits.append(z[i])
            pick = forced
        w = np.exp(np.take_along_axis(z, pick, axis=1) - z.max(axis=1, keepdims=True))
        w /= w.sum(axis=1, keepdims=True)  # both: e^z_j / Σ over the k picked
        out = np.zeros_like(h)
        for i in range(len(h)):
            for j, e in enumerate(pick[i]):
                gate = L["ffn_gate_exps"][e] @ h[i] + bias("ffn_gate_exps", e)
                up = L["ffn_up_exps"][e] @ h[i] + bias("ffn_up_exps", e)
                if self.a["moe"] == "topk_softmax":
                    gate, up = np.minimum(gate, 7.0), np.clip(up, -7.0, 7.0)
                    act = gate / (1 + np.exp(-1.702 * gate)) * (up + 1)
                else:
                    act = gate / (1 + np.exp(-gate)) * up
                y = L["ffn_down_exps"][e] @ act + bias("ffn_down_exps", e)
                out[i] += w[i, j] * y
        return out

    def _ffn(self, L, x, li, pos):
        h = self._rms(x, L["ffn_norm"])
        if self.a.get("moe"):
            return self._moe(L, h, li, pos)
        gate, up = h @ L["ffn_gate"].T, h @ L["ffn_up"].T
        act = gelu_tanh(gate) if self.a.get("gelu") else gate / (1 + np.exp(-gate))
        out = (act * up) @ L["ffn_down"].T
        return self._rms(out, L["post_ffw_norm"]) if L["post_ffw_norm"] is not None else out

    def _run(self, tokens):
        """Feeds tokens at positions self.pos.. after what the cache holds; logits [t, V]."""
        pos = np.arange(self.pos, self.pos + len(tokens))
        x = self.emb[np.asarray(tokens)]
        if self.a.get("embed_scale"):
            x = x * np.sqrt(self.dim)
        for li, L in enumerate(self.layers):
            x = x + self._attention(li, L, self._rms(x, L["attn_norm"]), pos)
            x = x + self._ffn(L, x, li, pos)
        self.pos += len(tokens)
        return self._rms(x, self.norm) @ self.out.T

    def step(self, token):
        """Logits [n_vocab] after feeding token at the next position."""
        return self._run([token])[0]

    def forward(self, tokens):
        """Logits [len(tokens), n_vocab] of tokens at positions 0.. (the cache is reset)."""
        self.reset()
        return self._run(tokens)


def greedy(model, prompt_ids, n, stop=None, margins=None):
    """Up to n argmax tokens after prompt_ids (stop ends early, not included). margins, a
    list, gets each step's top-2 logit margin (how close that step was to a tie)."""
    model.reset()
    if len(prompt_ids) > 1:
        model._run(prompt_ids[:-1])
    last, out = prompt_ids[-1], []
    for _ in range(n):
        z = model.step(last)
        last = int(np.argmax(z))
        if margins is not None:
            margins.append(float(z[last] - np.partition(z, -2)[-2]))
        if stop is not None and last == stop:
            break
        out.append(last)
    return out


def perplexity(model, ids, n_ctx, bos, max_chunks=None):
    """llama.cpp's protocol over ids (the text tokenized once, BOS first): (ppl, its
    standard error, tokens scored). Chunk c is ids[c*n_ctx:(c+1)*n_ctx] with its first
    token replaced by bos; positions n_ctx/2 .. n_ctx-2 predict the next token."""
    n_chunks = len(ids) // n_ctx
    if n_chunks < 1 or n_ctx < 4:
        raise ValueError("%d tokens: too few for chunks of %d" % (len(ids), n_ctx))
    if max_chunks is not None:
        n_chunks = min(n_chunks, max_chunks)
    first, nll = n_ctx // 2, []
    for c in range(n_chunks):
        chunk = list(ids[c * n_ctx:(c + 1) * n_ctx])
        if bos is not None:
            chunk[0] = bos
        z = model.forward(chunk)[first:n_ctx - 1]
        mx = z.max(axis=1)
        lse = mx + np.log(np.exp(z - mx[:, None]).sum(axis=1))
        nll.append(lse - z[np.arange(len(z)), chunk[first + 1:n_ctx]])
    nll = np.concatenate(nll)
    mean, n = nll.mean(), len(nll)
    err = np.exp(mean) * np.sqrt(nll.var() / (n - 1)) if n > 1 else 0.0
    return float(np.exp(mean)), float(err), n


def main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("prompt", nargs="?", default="")
    ap.add_argument("-n", type=int, default=32, help="tokens to generate (default 32)")
    ap.add_argument("--ppl", metavar="TEXT", help="perplexity of the file TEXT instead")
    ap.add_argument("-c", type=int, default=512, help="--ppl chunk size (default 512)")
    ap.add_argument("--chunks", type=int, help="--ppl: score only the first N chunks")
    ap.add_argument("--logits", metavar="OUT.npy",
                    help="save the float64 logits of the prompt's positions instead")
    ap.add_argument("--ids", help="comma-separated token ids to use as the prompt (with --logits)")
    ap.add_argument("--last", type=int, help="--logits: only the last N positions")
    ap.add_argument("--experts", metavar="FILE",
                    help="with --logits, an MoE's experts to use: whitespace-separated ids, for each "
                         "layer each position's k; writes FILE.margins: per layer and position, the "
                         "smallest router logit chosen minus the largest not (< 0: a choice differs), "
                         "and FILE.router: the router's logits there, a line each")
    a = ap.parse_args(argv)
    m = LlamaRef(a.model)
    tok = SPMTokenizer(m.r)
    if a.ppl:
        with open(a.ppl, encoding="utf-8", errors="surrogateescape") as f:
            ids = tok.encode(f.read())
        ppl, err, n = perplexity(m, ids, a.c, tok.bos, a.chunks)
        print("PPL = %.4f +/- %.5f" % (ppl, err))
        print("%d tokens, %d scored in chunks of %d" % (len(ids), n, a.c), file=sys.stderr)
        return 0
    ids = [int(i) for i in a.ids.split(",")] if a.ids else tok.encode(a.prompt)
    if a.logits:
        if a.experts:
            m.experts = np.loadtxt(a.experts, dtype=np.int64).reshape(m.n_layers, len(ids), m.k_used)
        z = m.forward(ids)
        np.save(a.logits, z[-a.last:] if a.last else z)
        if a.experts:
            np.savetxt(a.experts + ".margins", np.array(m.router_margins))
            np.savetxt(a.experts + ".router", np.array(m.router_logits))
        print("prompt ids %s" % ids, file=sys.stderr)
        return 0
    out = greedy(m, ids, a.n, stop=tok.eos)
    print("prompt ids %s, generated %s" % (ids, out), file=sys.stderr)
    print(tok.decode(out, after_bos=not a.prompt))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
