"""make_seeds.py — the GGUF seeds of the fuzz targets (tests/fuzz/gguf/seed/).

    /usr/bin/python3 tests/fuzz/make_seeds.py [SHARED]

Also writes the tokenizer target's seeds from SHARED/vocab (default ../shared).

Writes five tiny models (30-60 KB each, so that mutations often land in the header and
tensor table rather than in the weights), one per code path of model_load: llama with
Q8_0 matrices and a tied output, qwen2 with q/k/v biases in F16, qwen3 with per-head q/k
norms in Q4_0/Q4_1/Q5_0/Q5_1 and a BF16 embedding, llama with rope_freqs, GQA and
F32/Q8_0, and llama with Q4_K/Q5_K/Q6_K rows (dim 256, attention.key_length 32, no
tokenizer). The others carry the 512-token SentencePiece vocabulary of
models/stories260K.gguf, so tok_load and the batch target (which runs
tiny-llama-q8_0.gguf) find a real tokenizer.
The weights are seeded random numbers: the files are reproducible byte for byte.
"""
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
from gguf_reader import GGUFReader  # noqa: E402
from gguf_writer import GGML_TYPES, GGMLType as T, GGUFWriter, quantize  # noqa: E402
from synth import _block_maker  # noqa: E402

VOCAB_FROM = os.path.join(HERE, "..", "..", "models", "stories260K.gguf")


def tensor(w, rng, name, cols, rows, ggml_type):
    shape = (cols,) if rows == 1 else (cols, rows)
    if GGML_TYPES[ggml_type][1] == 256:  # K-quants: random blocks as models/synth.py makes them
        w.add_tensor(name, shape, ggml_type, _block_maker(ggml_type)[1](rng, cols * rows // 256, 0.3))
        return
    x = (rng.standard_normal(cols * rows) * 0.3).astype(np.float32)
    if rows == 1:
        x = 1.0 + 0.1 * x
    w.add_tensor(name, shape, ggml_type, quantize(x, ggml_type) if ggml_type != T.F32 else x)


def write(path, arch, dim, heads, kv_heads, ffn, types, extra=(), hd=None, n_vocab=None):
    """n_vocab given: a model without a tokenizer, n_vocab rows; hd given: attention.key_length."""
    rng = np.random.default_rng(len(path))
    w = GGUFWriter(path)
    w.add("general.architecture", arch)
    for k, v in [("embedding_length", dim), ("block_count", 1), ("attention.head_count", heads),
                 ("attention.head_count_kv", kv_heads), ("feed_forward_length", ffn),
                 ("context_length", 64)] + ([("attention.key_length", hd)] if hd else []):
        w.add("%s.%s" % (arch, k), v)
    w.add("%s.attention.layer_norm_rms_epsilon" % arch, 1e-5)
    if n_vocab is None:
        r = GGUFReader(VOCAB_FROM)
        n_vocab = len(r.kv["tokenizer.ggml.tokens"])
        for k, v in r.kv.items():
            if k.startswith("tokenizer."):
                w.add(k, v, r.kv_types[k], r.kv_arr_types.get(k))
    hd = hd or dim // heads
    mat, emb = types
    tensor(w, rng, "token_embd.weight", dim, n_vocab, emb)
    tensor(w, rng, "output_norm.weight", dim, 1, T.F32)
    mats = [("attn_q", dim, heads * hd), ("attn_k", dim, kv_heads * hd), ("attn_v", dim, kv_heads * hd),
            ("attn_output", heads * hd, dim), ("ffn_gate", dim, ffn), ("ffn_up", dim, ffn),
            ("ffn_down", ffn, dim)]
    for i, (name, cols, rows) in enumerate(mats):
        tensor(w, rng, "blk.0.%s.weight" % name, cols, rows, mat[i % len(mat)])
    tensor(w, rng, "blk.0.attn_norm.weight", dim, 1, T.F32)
    tensor(w, rng, "blk.0.ffn_norm.weight", dim, 1, T.F32)
    for name, cols in extra:
        tensor(w, rng, name, cols(hd), 1, T.F32)
    w.write()


def tokenizer_seeds(shared):
    """tests/fuzz/tokenizer/seed/: llama.cpp's tokenizer test strings (SHARED/vocab/*.inp),
    each behind a selector byte cycling over the vocabularies and the flags (fuzz_tokenizer.c)."""
    out = os.path.join(HERE, "tokenizer", "seed")
    os.makedirs(out, exist_ok=True)
    inp = os.path.join(shared, "vocab", "ggml-vocab-llama-bpe.gguf.inp")
    texts = open(inp, "rb").read().split(b"\n__ggml_vocab_test__\n")
    texts = [t for t in texts if t][:40]
    for i, t in enumerate(texts):
        selector = (i % 6) | (0x20 if i % 5 == 4 else 0) | (0x40 if i % 3 == 0 else 0)
        with open(os.path.join(out, "inp-%02d" % i), "wb") as f:
            f.write(bytes([selector]) + t)


def main():
    tokenizer_seeds(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "..", "..", "shared"))
    out = os.path.join(HERE, "gguf", "seed")
    os.makedirs(out, exist_ok=True)
    write(os.path.join(out, "tiny-llama-q8_0.gguf"), "llama", 32, 4, 4, 64, ([T.Q8_0], T.Q8_0))
    write(os.path.join(out, "tiny-qwen2-f16.gguf"), "qwen2", 32, 4, 2, 32, ([T.F16], T.F16),
          [("blk.0.attn_q.bias", lambda hd: 4 * hd), ("blk.0.attn_k.bias", lambda hd: 2 * hd),
           ("blk.0.attn_v.bias", lambda hd: 2 * hd)])
    write(os.path.join(out, "tiny-qwen3-q4.gguf"), "qwen3", 32, 2, 1, 32,
          ([T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1], T.BF16),
          [("blk.0.attn_q_norm.weight", lambda hd: hd), ("blk.0.attn_k_norm.weight", lambda hd: hd)])
    write(os.path.join(out, "tiny-llama-gqa-f32.gguf"), "llama", 32, 4, 1, 32, ([T.F32, T.Q8_0], T.Q8_0),
          [("rope_freqs.weight", lambda hd: hd // 2)])
    # the K-quants need rows of 256: dim 256 with 32-wide heads, a small FFN and vocabulary
    write(os.path.join(out, "tiny-llama-kquants.gguf"), "llama", 256, 1, 1, 32,
          ([T.Q4_K, T.Q5_K, T.Q6_K, T.Q8_0, T.Q4_K, T.Q5_K, T.Q8_0], T.Q6_K), hd=32, n_vocab=32)


if __name__ == "__main__":
    main()
