#!/usr/bin/python3
"""synth.py — a GGUF with seeded random weights in a real model's shape.

    /usr/bin/python3 models/synth.py --shape llama-3.2-1b --type Q4_K_M -o models/l1b-q4km.gguf
    /usr/bin/python3 models/synth.py --shape tiny --arch qwen3 --type Q8_0 -o /tmp/t.gguf

For speed and memory tests at real sizes without downloading real weights. The text it
generates is gibberish; every block is valid (finite fp16 scales sized so activations
stay sane, random quants), the tokenizer is a real one copied from a vocabulary GGUF
(all tokenizer.* keys), and the metadata is what llama.cpp expects for the architecture,
so llama.cpp loads the files too.

Shapes: tiny (dim 256, ffn 768, 4 layers, 4 heads, 2 kv heads, Llama-2 vocabulary: the
shape of ../shared/models/gguf/synth-*), llama-3.2-1b, llama-3.2-3b, llama-3.1-8b,
qwen2.5-0.5b (q/k/v biases), qwen3-0.6b (per-head q/k RMS norms, head_dim 128), and the
mixture of experts qwen3moe-mini: Qwen3-30B-A3B's layer (dim 2048, 32 query heads of 128, 4 kv
heads, experts of width 768, 8 used per token, its vocabulary) with 8 layers of 64 experts
instead of 48 of 128: 1.6 GB in Q4_K_M, of which a token reads about 0.5 GB.
--dim/--ffn/--layers/--experts/... override a shape's numbers.

Types: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q3_K Q4_K Q5_K Q6_K MXFP4 (every matrix
that type), or llama.cpp's mixes of its file types Q2_K, Q3_K_M, Q4_K_M, Q5_K_M,
IQ4_NL, IQ4_XS (some attn_v, attn_output and ffn_down matrices in more bits; see
mix_type). As llama-quantize does: the output matrix (or the tied embedding) is Q6_K for
types below 6 bits, rows that do not fill a K-quant block fall back to
IQ4_NL/Q5_0/Q5_1/Q8_0 and then F16, and norms and biases are F32. Any valid encoding
serves for speed: the quants are random, not a quantizer's search. Tensors are generated and written one
chunk at a time, so memory stays small for multi-GB files.
"""
import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUFError, GGUFReader  # noqa: E402
from gguf_writer import (FILE_TYPE, GGML_TYPES, TOKEN_UNUSED, TYPE_BY_NAME, VT,  # noqa: E402
                         GGMLType, GGUFWriter)

LLAMA3_VOCAB = "ggml-vocab-llama-bpe.gguf"
# rope_scaling: Llama 3.1's (factor, low_freq_factor, high_freq_factor, original context)
SHAPES = {
    "tiny": dict(arch="llama", dim=256, ffn=768, layers=4, heads=4, kv_heads=2, vocab=32000,
                 ctx=512, eps=1e-5, tied=False, vocab_file="ggml-vocab-llama-spm.gguf"),
    "llama-3.2-1b": dict(arch="llama", dim=2048, ffn=8192, layers=16, heads=32, kv_heads=8,
                         vocab=128256, ctx=131072, rope_base=500000.0, eps=1e-5, tied=True,
                         rope_scaling=(32.0, 1.0, 4.0, 8192), vocab_file=LLAMA3_VOCAB),
    "llama-3.2-3b": dict(arch="llama", dim=3072, ffn=8192, layers=28, heads=24, kv_heads=8,
                         vocab=128256, ctx=131072, rope_base=500000.0, eps=1e-5, tied=True,
                         rope_scaling=(32.0, 1.0, 4.0, 8192), vocab_file=LLAMA3_VOCAB),
    "llama-3.1-8b": dict(arch="llama", dim=4096, ffn=14336, layers=32, heads=32, kv_heads=8,
                         vocab=128256, ctx=131072, rope_base=500000.0, eps=1e-5, tied=False,
                         rope_scaling=(8.0, 1.0, 4.0, 8192), vocab_file=LLAMA3_VOCAB),
    "qwen2.5-0.5b": dict(arch="qwen2", dim=896, ffn=4864, layers=24, heads=14, kv_heads=2,
                         vocab=151936, ctx=32768, rope_base=1e6, eps=1e-6, tied=True,
                         vocab_file="ggml-vocab-qwen2.gguf"),
    "qwen3-0.6b": dict(arch="qwen3", dim=1024, ffn=3072, layers=28, heads=16, kv_heads=8,
                       head_dim=128, vocab=151936, ctx=40960, rope_base=1e6, eps=1e-6, tied=True,
                       vocab_file="ggml-vocab-qwen2.gguf"),
    "qwen3moe-mini": dict(arch="qwen3moe", dim=2048, ffn=6144, layers=8, heads=32, kv_heads=4,
                          head_dim=128, experts=64, experts_used=8, expert_ffn=768, vocab=151936,
                          ctx=40960, rope_base=1e6, eps=1e-6, tied=False,
                          vocab_file="ggml-vocab-qwen2.gguf"),
}
DEFAULT_ROPE_BASE = {"llama": 10000.0, "qwen2": 1e6, "qwen3": 1e6, "qwen3moe": 1e6}
# llama-quantize's fallbacks for rows that do not fill a 256-element K-quant block.
FALLBACK = {GGMLType.Q4_K: GGMLType.Q5_0, GGMLType.Q5_K: GGMLType.Q5_1,
            GGMLType.Q6_K: GGMLType.Q8_0, GGMLType.Q2_K: GGMLType.IQ4_NL,
            GGMLType.Q3_K: GGMLType.IQ4_NL, GGMLType.IQ4_XS: GGMLType.IQ4_NL}
# llama.cpp's file types that mix types (mix_type), by their base type
MIXES = {"Q2_K": GGMLType.Q2_K, "Q3_K_M": GGMLType.Q3_K, "Q4_K_M": GGMLType.Q4_K,
         "Q5_K_M": GGMLType.Q5_K, "IQ4_NL": GGMLType.IQ4_NL, "IQ4_XS": GGMLType.IQ4_XS}
PURE_FTYPE = {"Q3_K": "Q3_K_S", "Q4_K": "Q4_K_S", "Q5_K": "Q5_K_S", "MXFP4": "MXFP4_MOE"}
CHUNK_BYTES = 32 << 20


# --- random blocks -------------------------------------------------------------------
# Each maker returns nb blocks as a uint8 array [nb, block_bytes]: random bytes for the
# quants, then the fp16 scale fields overwritten with values around `unit`, chosen so the
# block's values have a standard deviation of roughly sigma.

def _f16(x):
    return np.asarray(x, dtype=np.float32).astype("<f2").view(np.uint8).reshape(-1, 2)


def _scales(rng, nb, unit):
    return unit * (np.float32(0.5) + rng.random(nb, dtype=np.float32))


def _random_bytes(rng, nb, size):
    n = nb * size
    words = rng.integers(0, 2**64 - 1, size=(n + 7) // 8, dtype=np.uint64, endpoint=True)
    return words.view(np.uint8)[:n].reshape(nb, size)


def _block_maker(t):
    """(bytes per block, function(rng, nb, sigma) -> blocks) for a quantized type."""
    # (offset of d, offset of dmin/m or None, std of a block's values in units of d —
    #  for the K-quants measured over uniform random sub-block scales/mins and quants —,
    #  centre of the quants: the min field is set to remove it)
    layouts = {
        GGMLType.Q4_0: (0, None, 4.6, 0), GGMLType.Q4_1: (0, 2, 4.6, 7.5),
        GGMLType.Q5_0: (0, None, 9.2, 0), GGMLType.Q5_1: (0, 2, 9.2, 15.5),
        GGMLType.Q8_0: (0, None, 73.6, 0),
        GGMLType.Q4_K: (0, 2, 258.0, 7.5), GGMLType.Q5_K: (0, 2, 527.0, 15.5),
        GGMLType.Q6_K: (208, None, 1367.0, 0), GGMLType.Q2_K: (80, 82, 13.9, 1.5),
        GGMLType.Q3_K: (108, None, 43.3, 0), GGMLType.IQ4_NL: (0, None, 67.4, 0),
        GGMLType.IQ4_XS: (0, None, 1246.0, 0), GGMLType.MXFP4: (0, None, 5.85, 0),
    }
    d_off, m_off, spread, centre = layouts[t]
    size = GGML_TYPES[t][2]

    def make(rng, nb, sigma):
        b = _random_bytes(rng, nb, size)
        d = _scales(rng, nb, np.float32(sigma / spread))
        if t == GGMLType.MXFP4:  # the scale is 2^(e - 128): the power of two nearest d
            b[:, 0] = np.clip(np.rint(np.log2(d)) + 128, 1, 254).astype(np.uint8)
            return b
        b[:, d_off:d_off + 2] = _f16(d)
        if m_off is not None:
            # Q4_1/Q5_1 store the block minimum m (value = d*q + m); K-quants store dmin
            # (value = d*sc*q - dmin*m): either way, centre the values on zero.
            m = -d * centre if t in (GGMLType.Q4_1, GGMLType.Q5_1) else d * centre
            b[:, m_off:m_off + 2] = _f16(m)
        return b

    return size, make


def tensor_chunks(seed, index, ggml_type, shape, kind):
    """A callable yielding the tensor's bytes chunk by chunk (what GGUFWriter streams).
    kind: "matrix" (random, std 1/sqrt(cols)), "norm" (around 1), "bias" (small)."""
    n = int(np.prod(shape, dtype=np.int64))

    def gen():
        rng = np.random.Generator(np.random.SFC64([seed, index]))
        if ggml_type in (GGMLType.F32, GGMLType.F16, GGMLType.BF16):
            per = max(1, CHUNK_BYTES // 4)
            for start in range(0, n, per):
                x = rng.standard_normal(min(per, n - start), dtype=np.float32)
                if kind == "norm":
                    x = np.float32(1) + np.float32(0.05) * x
                else:
                    x *= np.float32(0.02 if kind == "bias" else 1 / math.sqrt(shape[0]))
                yield _float_bytes(x, ggml_type)
            return
        block, block_bytes = GGML_TYPES[ggml_type][1], GGML_TYPES[ggml_type][2]
        size, make = _block_maker(ggml_type)
        nb_total, per = n // block, max(1, CHUNK_BYTES // block_bytes)
        for start in range(0, nb_total, per):
            yield make(rng, min(per, nb_total - start), 1 / math.sqrt(shape[0]))

    return gen


def _float_bytes(x, t):
    if t == GGMLType.F32:
        return x
    if t == GGMLType.F16:
        return x.astype("<f2")
    u = x.view(np.uint32)  # BF16: round to nearest even (inputs are finite)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")


# --- which type each tensor gets -------------------------------------------------------

def _use_more_bits(i, n):
    # llama.cpp's choice of the layers that get more bits in the _M mixes
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def mix_type(qname, base, role, layer, n_layers, gqa):
    """llama-quantize's choice for attn_v, attn_output and ffn_down under a mixed file
    type (llama_tensor_get_type; base elsewhere)."""
    K = GGMLType
    if role == "attn_v":
        if qname == "Q2_K":
            return K.Q4_K if gqa >= 4 else K.Q3_K
        if qname == "Q3_K_M":
            return K.Q5_K if layer < 2 else K.Q4_K
        if qname in ("IQ4_NL", "IQ4_XS") and gqa >= 4:
            return K.Q5_K
    elif role == "ffn_down":
        if qname == "Q2_K":
            return K.Q3_K
        if qname == "Q3_K_M":
            return K.Q5_K if layer < n_layers // 16 else K.Q4_K
        if qname in ("IQ4_NL", "IQ4_XS") and layer < n_layers // 8:
            return K.Q5_K
    elif role == "attn_output":
        return {"Q2_K": K.Q3_K, "Q3_K_M": K.Q4_K}.get(qname, base)
    if qname in ("Q4_K_M", "Q5_K_M") and role in ("attn_v", "ffn_down") and _use_more_bits(layer, n_layers):
        return K.Q6_K
    return base


def choose_type(qname, kind, role, layer, n_layers, cols, gqa):
    """Type of one tensor under --type qname. role: "output" (classifier, or the
    embedding when tied), "embd", "attn_v", "attn_output", "ffn_down" or "other";
    gqa: query heads per kv head."""
    if kind != "matrix":
        return GGMLType.F32
    base = MIXES.get(qname, TYPE_BY_NAME.get(qname))
    t = base
    if role == "output" and base not in (GGMLType.F32, GGMLType.F16, GGMLType.BF16,
                                         GGMLType.Q8_0, GGMLType.Q6_K):
        t = GGMLType.Q6_K
    elif qname in MIXES:
        t = mix_type(qname, base, role, layer, n_layers, gqa)
    if cols % GGML_TYPES[t][1]:
        t = FALLBACK.get(t, GGMLType.F16)
        if cols % GGML_TYPES[t][1]:
            t = GGMLType.F16
    return t


# --- the model -------------------------------------------------------------------------

def tensor_list(c):
    """[(name, shape in GGUF order (cols first), kind, role, layer)] for config c."""
    d, hd, L = c["dim"], c["head_dim"], c["layers"]
    q, kv = c["heads"] * hd, c["kv_heads"] * hd
    out = [("token_embd.weight", (d, c["vocab"]), "matrix", "output" if c["tied"] else "embd", -1)]
    if c.get("rope_scaling") and c["rope_freqs"]:
        out.append(("rope_freqs.weight", (hd // 2,), "rope_freqs", "other", -1))
    for i in range(L):
        p = "blk.%d." % i
        out.append((p + "attn_norm.weight", (d,), "norm", "other", i))
        out.append((p + "attn_q.weight", (d, q), "matrix", "other", i))
        out.append((p + "attn_k.weight", (d, kv), "matrix", "other", i))
        out.append((p + "attn_v.weight", (d, kv), "matrix", "attn_v", i))
        if c["arch"] == "qwen2":
            out += [(p + "attn_q.bias", (q,), "bias", "other", i),
                    (p + "attn_k.bias", (kv,), "bias", "other", i),
                    (p + "attn_v.bias", (kv,), "bias", "other", i)]
        if c["arch"] in ("qwen3", "qwen3moe"):
            out += [(p + "attn_q_norm.weight", (hd,), "norm", "other", i),
                    (p + "attn_k_norm.weight", (hd,), "norm", "other", i)]
        out.append((p + "attn_output.weight", (q, d), "matrix", "attn_output", i))
        out.append((p + "ffn_norm.weight", (d,), "norm", "other", i))
        if c.get("experts"):  # the router (F32, as llama-quantize keeps it) and the stacked experts
            ne, f = c["experts"], c["expert_ffn"]
            out.append((p + "ffn_gate_inp.weight", (d, ne), "router", "other", i))
            out.append((p + "ffn_gate_exps.weight", (d, f, ne), "matrix", "other", i))
            out.append((p + "ffn_up_exps.weight", (d, f, ne), "matrix", "other", i))
            out.append((p + "ffn_down_exps.weight", (f, d, ne), "matrix", "ffn_down", i))
            continue
        out.append((p + "ffn_gate.weight", (d, c["ffn"]), "matrix", "other", i))
        out.append((p + "ffn_up.weight", (d, c["ffn"]), "matrix", "other", i))
        out.append((p + "ffn_down.weight", (c["ffn"], d), "matrix", "ffn_down", i))
    out.append(("output_norm.weight", (d,), "norm", "other", -1))
    if not c["tied"]:
        out.append(("output.weight", (d, c["vocab"]), "matrix", "output", -1))
    return out


def llama3_rope_factors(c):
    """Llama-3.1 rope scaling as per-frequency divisors (the rope_freqs.weight tensor):
    long wavelengths are slowed by `factor`, short ones kept, a smooth ramp between."""
    factor, low, high, orig = c["rope_scaling"]
    hd, base = c["head_dim"], c["rope_base"]
    out = []
    for i in range(0, hd, 2):
        wavelen = 2 * math.pi * base ** (i / hd)  # of frequency base^(-i/hd)
        if wavelen < orig / high:
            out.append(1.0)
        elif wavelen > orig / low:
            out.append(factor)
        else:
            smooth = (orig / wavelen - low) / (high - low)
            out.append(1.0 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def add_metadata(w, c, qname):
    a = c["arch"]
    w.add("general.architecture", a)
    w.add("general.name", c["name"])
    w.add("general.file_type", FILE_TYPE[PURE_FTYPE.get(qname, qname)], VT.UINT32)
    if qname not in ("F32", "F16", "BF16"):
        w.add("general.quantization_version", 2, VT.UINT32)
    u32 = [("vocab_size", c["vocab"]), ("context_length", c["ctx"]),
           ("embedding_length", c["dim"]), ("block_count", c["layers"]),
           ("feed_forward_length", c["ffn"]), ("attention.head_count", c["heads"]),
           ("attention.head_count_kv", c["kv_heads"]), ("rope.dimension_count", c["head_dim"])]
    if c.get("experts"):
        u32 += [("expert_count", c["experts"]), ("expert_used_count", c["experts_used"]),
                ("expert_feed_forward_length", c["expert_ffn"])]
    if a in ("qwen3", "qwen3moe") or c["head_dim"] * c["heads"] != c["dim"]:
        u32 += [("attention.key_length", c["head_dim"]), ("attention.value_length", c["head_dim"])]
    for k, v in u32:
        w.add("%s.%s" % (a, k), int(v), VT.UINT32)
    w.add("%s.attention.layer_norm_rms_epsilon" % a, float(c["eps"]), VT.FLOAT32)
    w.add("%s.rope.freq_base" % a, float(c["rope_base"]), VT.FLOAT32)


def add_tokenizer(w, c):
    """Copies every tokenizer.* key of the vocabulary GGUF; pads the token list with
    unused [PADn] entries up to the model's vocabulary, as llama.cpp's converter does."""
    r = GGUFReader(c["vocab_path"])
    n = len(r.kv["tokenizer.ggml.tokens"])
    if n > c["vocab"]:
        raise ValueError("%s has %d tokens, more than --vocab %d" % (c["vocab_path"], n, c["vocab"]))
    pad = c["vocab"] - n
    for k, v in r.kv.items():
        if not k.startswith("tokenizer."):
            continue
        if pad and k == "tokenizer.ggml.tokens":
            v = v + ["[PAD%d]" % i for i in range(n, c["vocab"])]
        elif pad and k == "tokenizer.ggml.token_type":
            v = v + [TOKEN_UNUSED] * pad
        elif pad and k == "tokenizer.ggml.scores":
            v = v + [0.0] * pad
        w.add(k, v, r.kv_types[k], r.kv_arr_types.get(k))
    if "tokenizer.ggml.add_bos_token" not in r.kv:
        # what the real models' GGUFs say: Llama 3 starts with <|begin_of_text|>, Qwen has no BOS
        w.add("tokenizer.ggml.add_bos_token", c["arch"] == "llama")


def build_config(a):
    c = dict(SHAPES[a.shape])
    for key in ("arch", "dim", "ffn", "layers", "heads", "kv_heads", "head_dim", "vocab", "ctx",
                "rope_base", "eps", "experts", "experts_used", "expert_ffn"):
        if getattr(a, key) is not None:
            c[key] = getattr(a, key)
    if a.tied is not None:
        c["tied"] = a.tied
    c.setdefault("rope_base", DEFAULT_ROPE_BASE[c["arch"]])
    if a.head_dim is None and (a.dim is not None or a.heads is not None or "head_dim" not in c):
        c["head_dim"] = c["dim"] // c["heads"]  # a shape's own head_dim only fits its own dims
    c["rope_freqs"] = a.rope_freqs and c["arch"] == "llama"
    c["vocab_path"] = a.vocab_file or os.path.join(a.shared, "vocab", c["vocab_file"])
    if (c["arch"] == "qwen3moe") != bool(c.get("experts")):
        raise ValueError("qwen3moe (and only it) has experts: give --experts with --arch qwen3moe")
    if c.get("experts") and not 0 < c["experts_used"] <= c["experts"]:
        raise ValueError("%d experts used of %d" % (c["experts_used"], c["experts"]))
    if c["heads"] % c["kv_heads"]:
        raise ValueError("%d heads not a multiple of %d kv heads" % (c["heads"], c["kv_heads"]))
    c["name"] = a.name or "synth-%s-%s" % (a.shape, a.type)
    return c


def main(argv):
    ap = argparse.ArgumentParser(description="GGUF with random weights in a real model's shape")
    ap.add_argument("--shape", default="tiny", choices=sorted(SHAPES))
    ap.add_argument("--type", default="Q8_0",
                    choices=sorted(set(MIXES) | {"F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0",
                                                 "Q5_1", "Q8_0", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
                                                 "MXFP4"}))
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--arch", choices=["llama", "qwen2", "qwen3", "qwen3moe"])
    for k in ("dim", "ffn", "layers", "heads", "kv-heads", "head-dim", "vocab", "ctx", "experts",
              "experts-used", "expert-ffn"):
        ap.add_argument("--" + k, type=int)
    ap.add_argument("--rope-base", type=float)
    ap.add_argument("--eps", type=float)
    ap.add_argument("--tied", dest="tied", action="store_true", default=None,
                    help="no output.weight: the classifier is the embedding")
    ap.add_argument("--untied", dest="tied", action="store_false")
    ap.add_argument("--rope-freqs", action=argparse.BooleanOptionalAction, default=True,
                    help="write Llama-3.1 rope_freqs.weight (llama-3.x shapes; default on)")
    ap.add_argument("--vocab-file", help="vocabulary GGUF to copy tokenizer.* from")
    ap.add_argument("--shared", default=os.environ.get("SHARED", "../shared"),
                    help="where vocab/ lives (default $SHARED or ../shared)")
    ap.add_argument("--name", help="general.name")
    a = ap.parse_args(argv)
    try:
        return write_synth(a)
    except (OSError, GGUFError, ValueError) as e:
        print("synth: error: %s" % e, file=sys.stderr)
        return 1


def write_synth(a):
    c = build_config(a)
    w = GGUFWriter(a.output)
    add_metadata(w, c, a.type)
    add_tokenizer(w, c)
    counts = {}
    for index, (name, shape, kind, role, layer) in enumerate(tensor_list(c)):
        if kind == "rope_freqs":
            w.add_tensor(name, shape, GGMLType.F32, llama3_rope_factors(c))
            continue
        t = choose_type(a.type, kind, role, layer, c["layers"], shape[0], c["heads"] // c["kv_heads"])
        counts[GGML_TYPES[t][0]] = counts.get(GGML_TYPES[t][0], 0) + 1
        w.add_tensor(name, shape, t, tensor_chunks(a.seed, index, t, shape, kind))
    w.write()
    print("synth: %s: %s %s, %d layers, dim %d, vocab %d, %s, %.1f MB" % (
        a.output, c["arch"], a.type, c["layers"], c["dim"], c["vocab"],
        " ".join("%s×%d" % kv for kv in sorted(counts.items())),
        os.path.getsize(a.output) / 1e6), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
