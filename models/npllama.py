"""npllama.py — a slow, plain numpy reference for checking converted GGUFs without quill.

  * SPMTokenizer: llama.cpp's SentencePiece ("llama") encoder: split into UTF-8
    characters, repeatedly merge the adjacent pair whose concatenation is the
    best-scoring vocabulary entry (ties: leftmost), byte fallback <0xNN> for leftovers.
  * LlamaRef: a float64 llama forward pass over dequantized weights (F32 F16 BF16 Q8_0
    Q4_0 Q4_1 Q5_0 Q5_1 through gguf_writer, Q4_K Q5_K Q6_K through tests/ref_quant.py)
    with llama.cpp's "normal" RoPE (adjacent pairs (2i, 2i+1)), GQA, RMSNorm, SwiGLU,
    tied or untied output. step() feeds one token through a KV cache; forward() runs a
    whole sequence from position 0 at once (what perplexity uses).
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
saves the float64 logits of every prompt position (BOS first), [n_tokens, n_vocab].
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
        w = lambda n: dequantized(r, n)  # noqa: E731
        self.emb = w("token_embd.weight")
        self.out = w("output.weight") if "output.weight" in r.tensors else self.emb
        self.norm = w("output_norm.weight")
        self.layers = [{k: w("blk.%d.%s.weight" % (i, k)) for k in
                        ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
                         "ffn_gate", "ffn_up", "ffn_down")} for i in range(self.n_layers)]
        self.reset()

    def reset(self):
        self.k = [np.zeros((0, self.n_kv, self.head_dim)) for _ in range(self.n_layers)]
        self.v = [np.zeros((0, self.n_kv, self.head_dim)) for _ in range(self.n_layers)]
        self.pos = 0

    def _rms(self, x, w):  # x: [t, dim]
        return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + self.eps) * w

    def _rope(self, x, pos):  # x: [t, heads, head_dim], pos: [t]; rotates pairs (2i, 2i+1)
        i = np.arange(self.n_rot // 2)
        theta = pos[:, None] * self.base ** (-2.0 * i / self.n_rot)  # [t, n_rot/2]
        c, s = np.cos(theta)[:, None, :], np.sin(theta)[:, None, :]
        x = x.copy()
        x0, x1 = x[..., 0:self.n_rot:2].copy(), x[..., 1:self.n_rot:2].copy()
        x[..., 0:self.n_rot:2] = x0 * c - x1 * s
        x[..., 1:self.n_rot:2] = x0 * s + x1 * c
        return x

    def _run(self, tokens):
        """Feeds tokens at positions self.pos.. after what the cache holds; logits [t, V]."""
        t, hd, group = len(tokens), self.head_dim, self.n_heads // self.n_kv
        pos = np.arange(self.pos, self.pos + t)
        x = self.emb[np.asarray(tokens)]
        n_keys = self.pos + t
        mask = np.where(np.arange(n_keys)[None, :] <= pos[:, None], 0.0, -np.inf)  # causal
        for li, L in enumerate(self.layers):
            h = self._rms(x, L["attn_norm"])
            q = self._rope((h @ L["attn_q"].T).reshape(t, self.n_heads, hd), pos)
            k = self._rope((h @ L["attn_k"].T).reshape(t, self.n_kv, hd), pos)
            v = (h @ L["attn_v"].T).reshape(t, self.n_kv, hd)
            self.k[li] = np.concatenate([self.k[li], k])
            self.v[li] = np.concatenate([self.v[li], v])
            K = np.repeat(self.k[li], group, axis=1).transpose(1, 2, 0)  # [heads, hd, T]
            V = np.repeat(self.v[li], group, axis=1).transpose(1, 0, 2)  # [heads, T, hd]
            s = q.transpose(1, 0, 2) @ K / np.sqrt(hd) + mask           # [heads, t, T]
            p = np.exp(s - s.max(axis=-1, keepdims=True))
            p /= p.sum(axis=-1, keepdims=True)
            att = (p @ V).transpose(1, 0, 2).reshape(t, self.n_heads * hd)
            x = x + att @ L["attn_output"].T
            h = self._rms(x, L["ffn_norm"])
            gate, up = h @ L["ffn_gate"].T, h @ L["ffn_up"].T
            x = x + (gate / (1 + np.exp(-gate)) * up) @ L["ffn_down"].T
        self.pos += t
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
    ids = tok.encode(a.prompt)
    if a.logits:
        np.save(a.logits, m.forward(ids))
        print("prompt ids %s" % ids, file=sys.stderr)
        return 0
    out = greedy(m, ids, a.n, stop=tok.eos)
    print("prompt ids %s, generated %s" % (ids, out), file=sys.stderr)
    print(tok.decode(out, after_bos=not a.prompt))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
