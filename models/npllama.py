"""npllama.py — a slow, plain numpy reference for checking converted GGUFs without quill.

  * SPMTokenizer: llama.cpp's SentencePiece ("llama") encoder: split into UTF-8
    characters, repeatedly merge the adjacent pair whose concatenation is the
    best-scoring vocabulary entry (ties: leftmost), byte fallback <0xNN> for leftovers.
  * LlamaRef: a llama forward pass over F32/F16/BF16/Q8_0/Q4_0 weights with llama.cpp's
    "normal" RoPE (adjacent pairs (2i, 2i+1)), GQA, RMSNorm, SwiGLU, tied or untied output.
  * greedy(): argmax decoding from a prompt.

    /usr/bin/python3 models/npllama.py MODEL.gguf "Once upon a time" -n 32
prints the greedy continuation (and its ids on stderr).
"""
import heapq
import sys

import numpy as np

from gguf_reader import GGUFReader

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


class LlamaRef:
    def __init__(self, path):
        r = GGUFReader(path)
        self.r = r
        arch = r.kv["general.architecture"]
        g = lambda k, d=None: r.kv.get("%s.%s" % (arch, k), d)  # noqa: E731
        self.dim = g("embedding_length")
        self.n_layers = g("block_count")
        self.n_heads = g("attention.head_count")
        self.n_kv = g("attention.head_count_kv", self.n_heads)
        self.head_dim = g("attention.key_length", self.dim // self.n_heads)
        self.n_rot = g("rope.dimension_count", self.head_dim)
        self.eps = g("attention.layer_norm_rms_epsilon", 1e-5)
        self.base = g("rope.freq_base", 10000.0)
        w = lambda n: r.tensor_float(n).astype(np.float64)  # noqa: E731
        self.emb = w("token_embd.weight")
        self.out = w("output.weight") if "output.weight" in r.tensors else self.emb
        self.norm = w("output_norm.weight")
        self.layers = [{k: w("blk.%d.%s.weight" % (i, k)) for k in
                        ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                         "ffn_gate", "ffn_up", "ffn_down")} for i in range(self.n_layers)]
        self.reset()

    def reset(self):
        self.k = [[] for _ in range(self.n_layers)]
        self.v = [[] for _ in range(self.n_layers)]
        self.pos = 0

    def _rms(self, x, w):
        return x / np.sqrt(np.mean(x * x) + self.eps) * w

    def _rope(self, x):  # x: [heads, head_dim]; rotates pairs (2i, 2i+1)
        i = np.arange(self.n_rot // 2)
        theta = self.pos * self.base ** (-2.0 * i / self.n_rot)
        c, s = np.cos(theta), np.sin(theta)
        x = x.copy()
        x0, x1 = x[:, 0:self.n_rot:2].copy(), x[:, 1:self.n_rot:2].copy()
        x[:, 0:self.n_rot:2] = x0 * c - x1 * s
        x[:, 1:self.n_rot:2] = x0 * s + x1 * c
        return x

    def step(self, token):
        """Logits [n_vocab] after feeding token at the next position."""
        x = self.emb[token].copy()
        hd, group = self.head_dim, self.n_heads // self.n_kv
        for li, L in enumerate(self.layers):
            h = self._rms(x, L["attn_norm"])
            q = self._rope((L["attn_q"] @ h).reshape(self.n_heads, hd))
            k = self._rope((L["attn_k"] @ h).reshape(self.n_kv, hd))
            self.k[li].append(k)
            self.v[li].append((L["attn_v"] @ h).reshape(self.n_kv, hd))
            K, V = np.stack(self.k[li]), np.stack(self.v[li])  # [t, n_kv, hd]
            att = np.empty((self.n_heads, hd))
            for hh in range(self.n_heads):
                s = K[:, hh // group] @ q[hh] / np.sqrt(hd)
                p = np.exp(s - s.max())
                att[hh] = (p / p.sum()) @ V[:, hh // group]
            x = x + L["attn_output"] @ att.ravel()
            h = self._rms(x, L["ffn_norm"])
            gate, up = L["ffn_gate"] @ h, L["ffn_up"] @ h
            x = x + L["ffn_down"] @ (gate / (1 + np.exp(-gate)) * up)
        self.pos += 1
        return self.out @ self._rms(x, self.norm)


def greedy(model, prompt_ids, n, stop=None):
    model.reset()
    for t in prompt_ids[:-1]:
        model.step(t)
    last, out = prompt_ids[-1], []
    for _ in range(n):
        last = int(np.argmax(model.step(last)))
        if stop is not None and last == stop:
            break
        out.append(last)
    return out


def main(argv):
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("prompt", nargs="?", default="")
    ap.add_argument("-n", type=int, default=32)
    a = ap.parse_args(argv)
    m = LlamaRef(a.model)
    tok = SPMTokenizer(m.r)
    ids = tok.encode(a.prompt)
    out = greedy(m, ids, a.n, stop=tok.eos)
    print("prompt ids %s, generated %s" % (ids, out), file=sys.stderr)
    print(tok.decode(out, after_bos=not a.prompt))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
