#!/usr/bin/python3
"""convert.py — llama2.c checkpoints and Hugging Face Llama models → GGUF (arch "llama").

    /usr/bin/python3 models/convert.py INPUT [--tokenizer TOK] [--type T] -o OUT.gguf
    /usr/bin/python3 models/convert.py --shared ../shared --out models

INPUT is recognised by its content:
  * llama2.c v0 float32 checkpoint (.bin): 7 int32 (dim, hidden_dim, n_layers, n_heads,
    n_kv_heads, vocab_size, seq_len; vocab_size < 0 means an untied classifier), then
    fp32 weights in llama2.c's order. Needs a llama2.c tokenizer.bin (--tokenizer, or
    tok<vocab>.bin / tokenizer.bin next to the checkpoint) or a vocabulary GGUF.
  * llama2.c version-2 int8 checkpoint: magic "ak42", version 2, 256-byte header with the
    7 params, a shared-classifier byte and the group size; fp32 norms, then per weight
    int8 values followed by one fp32 scale per group. Becomes a Q8_0 GGUF.
  * a Hugging Face Llama directory: config.json, model.safetensors (F32/F16/BF16),
    tokenizer.json (SentencePiece-style BPE: ▁ normalizer, byte fallback).

--type (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) re-quantizes the 2-D weights, token
embeddings included, with ggml's reference quantizers; default: F32 for float inputs, Q8_0
for int8 ones. Rows that do not fill whole blocks (stories260K's ffn_down: 172) fall back to
F16, as llama-quantize does. Norms stay F32. A tied classifier is not written (output.weight
absent means "use token_embd.weight").

--shared mode converts the models in SHARED/models into OUT (what `make models` runs):
stories260K.gguf, stories260K-q80.gguf, tinystories-656K.gguf. Outputs newer than all
their inputs (and than this converter) are left alone; one line per file goes to stderr.

Rotary layout. llama.cpp's "llama" rope (what quill runs) rotates adjacent pairs
(2i, 2i+1) of each head. llama2.c's run.c does the same, so its wq/wk are copied as is.
Hugging Face Llama rotates pairs (i, i + head_dim/2) ("rotate half"), so HF q/k rows are
permuted per head: new row 2i = old row i, new row 2i+1 = old row i + head_dim/2.
"""
import argparse
import json
import os
import re
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUFReader  # noqa: E402
from gguf_writer import (FILE_TYPE, GGML_TYPES, TOKEN_BYTE, TOKEN_CONTROL,  # noqa: E402
                         TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_UNUSED, TOKEN_USER_DEFINED,
                         TYPE_BY_NAME, VT, GGMLType, GGUFWriter, quantize)

LLAMA2C_V2_MAGIC = 0x616B3432  # "ak42"
SPIECE_SPACE = "\u2581"        # ▁, SentencePiece's visible space


class ConvertError(Exception):
    pass


class Vocab:
    """A SentencePiece-style ("llama") vocabulary as GGUF stores it."""

    def __init__(self, tokens, scores, types, bos, eos, unk, add_space_prefix=True,
                 add_bos=True, add_eos=False):
        self.tokens, self.scores, self.types = tokens, scores, types
        self.bos, self.eos, self.unk = bos, eos, unk
        self.add_space_prefix, self.add_bos, self.add_eos = add_space_prefix, add_bos, add_eos
        self.gguf_kv = None  # set instead when copying tokenizer.* from a vocabulary GGUF


class Model:
    """What the writer needs: hyperparameters, weights by GGUF name, a vocabulary."""

    def __init__(self, name, hp, tensors, vocab, default_type):
        self.name = name
        # hp: dim, ffn, n_layers, n_heads, n_kv_heads, head_dim, n_vocab, n_ctx, rms_eps,
        #     rope_base
        self.hp = hp
        self.tensors = tensors  # [(gguf name, float32 ndarray, rows first)]
        self.vocab = vocab
        self.default_type = default_type


def _layer_names(i):
    return {k: "blk.%d.%s.weight" % (i, k) for k in
            ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm",
             "ffn_gate", "ffn_up", "ffn_down")}


def _ordered(tensors, n_layers):
    """Puts tensors in the conventional order: embeddings, layers, final norm, output."""
    order = ["token_embd.weight"]
    for i in range(n_layers):
        order += list(_layer_names(i).values())
    order += ["output_norm.weight", "output.weight"]
    rank = {n: k for k, n in enumerate(order)}
    return sorted(tensors, key=lambda t: rank.get(t[0], len(order)))


# --- llama2.c ------------------------------------------------------------------------

def _llama2c_hparams(dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len, path):
    if min(dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len) <= 0 \
            or dim % n_heads or n_heads % n_kv_heads:
        raise ConvertError("%s: implausible llama2.c header (dim %d, hidden %d, layers %d, "
                           "heads %d, kv heads %d, vocab %d, seq %d)"
                           % (path, dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len))
    return dict(dim=dim, ffn=hidden, n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads,
                head_dim=dim // n_heads, n_vocab=vocab, n_ctx=seq_len, rms_eps=1e-5,
                rope_base=10000.0)


def _llama2c_shapes(hp, shared):
    """(name, [rows, cols]) of the matrices in llama2.c's order; layer-stacked in files."""
    d, f, L, kv = hp["dim"], hp["ffn"], hp["n_layers"], hp["n_kv_heads"] * hp["head_dim"]
    per_layer = [("attn_q", [d, d]), ("attn_k", [kv, d]), ("attn_v", [kv, d]),
                 ("attn_output", [d, d]), ("ffn_gate", [f, d]), ("ffn_down", [d, f]),
                 ("ffn_up", [f, d])]
    mats = [("token_embd.weight", [hp["n_vocab"], d])]
    for kind, shape in per_layer:
        mats += [("blk.%d.%s.weight" % (i, kind), shape) for i in range(L)]
    if not shared:
        mats.append(("output.weight", [hp["n_vocab"], d]))
    return mats


class _Cursor:
    """Sequential float32/int8 reads over a checkpoint buffer with bounds checks."""

    def __init__(self, buf, pos, path):
        self.buf, self.pos, self.path = buf, pos, path

    def take(self, dtype, count, what):
        size = np.dtype(dtype).itemsize * count
        if self.pos + size > len(self.buf):
            raise ConvertError("%s: file ends inside %s (need %d bytes at offset %d, have %d)"
                               % (self.path, what, size, self.pos, len(self.buf) - self.pos))
        a = np.frombuffer(self.buf, dtype=dtype, count=count, offset=self.pos)
        self.pos += size
        return a

    def expect_end(self):
        if self.pos != len(self.buf):
            raise ConvertError("%s: %d unexpected bytes after the weights (read %d of %d)"
                               % (self.path, len(self.buf) - self.pos, self.pos, len(self.buf)))


def read_llama2c_v0(path, buf):
    dim, hidden, L, nh, nkv, vocab, seq = struct.unpack_from("<7i", buf, 0)
    shared = vocab > 0
    hp = _llama2c_hparams(dim, hidden, L, nh, nkv, abs(vocab), seq, path)
    c = _Cursor(buf, 28, path)
    d, f, kv = dim, hidden, nkv * hp["head_dim"]
    t = {"token_embd.weight": c.take("<f4", abs(vocab) * d, "token_embd").reshape(-1, d)}

    def stacked(kind, rows, cols):
        a = c.take("<f4", L * rows * cols, kind).reshape(L, rows, cols)
        for i in range(L):
            t["blk.%d.%s.weight" % (i, kind)] = a[i] if rows > 1 else a[i, 0]

    stacked("attn_norm", 1, d)
    stacked("attn_q", d, d)
    stacked("attn_k", kv, d)
    stacked("attn_v", kv, d)
    stacked("attn_output", d, d)
    stacked("ffn_norm", 1, d)
    stacked("ffn_gate", f, d)
    stacked("ffn_down", d, f)
    stacked("ffn_up", f, d)
    t["output_norm.weight"] = c.take("<f4", d, "output_norm")
    c.take("<f4", seq * hp["head_dim"], "freq_cis (unused: RoPE is recomputed)")
    if not shared:
        t["output.weight"] = c.take("<f4", abs(vocab) * d, "output").reshape(-1, d)
    c.expect_end()
    return hp, t


def _v2_tensor(c, rows, cols, gs, name, path):
    """One version-2 weight: rows*cols int8 then one fp32 scale per group of gs."""
    n = rows * cols
    if n % gs:
        raise ConvertError("%s: %s has %d values, not a multiple of the group size %d"
                           % (path, name, n, gs))
    q = c.take("i1", n, name + " int8 values").reshape(-1, gs)
    s = c.take("<f4", n // gs, name + " scales")
    # export.py sets scale = max|w|/127, so every group holds a ±127 (or is all zero):
    # a cheap check that the values and scales are where we think they are.
    qmax = np.abs(q.astype(np.int16)).max(axis=1)
    if not np.all((qmax == 127) | ((qmax == 0) & (s == 0))) or not np.all(np.isfinite(s)):
        raise ConvertError("%s: %s does not look like llama2.c Q8_0 groups (max |q| should be "
                           "127 in every group)" % (path, name))
    return (q.astype(np.float32) * s[:, None]).reshape(rows, cols)


def read_llama2c_v2(path, buf):
    if len(buf) < 256:
        raise ConvertError("%s: shorter than the 256-byte version-2 header" % path)
    _, version, dim, hidden, L, nh, nkv, vocab, seq = struct.unpack_from("<Ii7i", buf, 0)
    shared, gs = struct.unpack_from("<Bi", buf, 36)
    if version != 2:
        raise ConvertError("%s: llama2.c format version %d; only 0 (float32 legacy) and 2 "
                           "(int8) are supported" % (path, version))
    if gs <= 0:
        raise ConvertError("%s: group size %d" % (path, gs))
    hp = _llama2c_hparams(dim, hidden, L, nh, nkv, vocab, seq, path)
    c = _Cursor(buf, 256, path)
    t = {}
    for kind in ("attn_norm", "ffn_norm"):
        a = c.take("<f4", L * dim, kind).reshape(L, dim)
        for i in range(L):
            t["blk.%d.%s.weight" % (i, kind)] = a[i]
    t["output_norm.weight"] = c.take("<f4", dim, "output_norm")
    for name, (rows, cols) in _llama2c_shapes(hp, shared):
        t[name] = _v2_tensor(c, rows, cols, gs, name, path)
    c.expect_end()
    return hp, t


def read_llama2c_tokenizer(path, n_vocab):
    """llama2.c tokenizer.bin → Vocab, with the conventions of llama.cpp's llama2.c
    converter (so the result matches the GGUFs it makes): ids 0/1/2 become <unk>/<s>/</s>
    (unknown/control), empty pieces are control, <0xNN> pieces are byte tokens, spaces
    are written as ▁, and the file's scores are kept as they are."""
    with open(path, "rb") as f:
        buf = f.read()
    c = _Cursor(buf, 4, path)
    tokens, scores, types = [], [], []
    for i in range(n_vocab):
        score = float(c.take("<f4", 1, "token %d score" % i)[0])
        n = int(c.take("<i4", 1, "token %d length" % i)[0])
        if n < 0:
            raise ConvertError("%s: token %d has length %d" % (path, i, n))
        text = c.take("u1", n, "token %d text" % i).tobytes().decode("utf-8", "surrogateescape")
        ttype = TOKEN_NORMAL
        if i == 0:
            text, ttype = "<unk>", TOKEN_UNKNOWN
        elif i in (1, 2):
            text, ttype = ("<s>", "</s>")[i - 1], TOKEN_CONTROL
        elif text == "":
            ttype = TOKEN_CONTROL
        elif re.match(r"<0x[0-9A-Fa-f]{1,2}", text):
            ttype = TOKEN_BYTE
        tokens.append(text.replace(" ", SPIECE_SPACE))
        scores.append(score)
        types.append(ttype)
    if c.pos != len(buf):
        raise ConvertError("%s: %d bytes left after %d tokens: is this the tokenizer of a model "
                           "with a different vocabulary size?" % (path, len(buf) - c.pos, n_vocab))
    # llama2.c's run.c prepends a space to the prompt (the "dummy prefix"), like SentencePiece.
    return Vocab(tokens, scores, types, bos=1, eos=2, unk=0, add_space_prefix=True)


def _gguf_vocab(path, n_vocab):
    """Copies tokenizer.* from a vocabulary GGUF (llama.cpp's --copy-vocab-from-model)."""
    r = GGUFReader(path)
    n = len(r.kv.get("tokenizer.ggml.tokens", []))
    if n != n_vocab:
        raise ConvertError("%s: %d tokens, the model has %d" % (path, n, n_vocab))
    v = Vocab(None, None, None, None, None, None)
    v.gguf_kv = [(k, r.kv[k], r.kv_types[k], r.kv_arr_types.get(k))
                 for k in r.kv if k.startswith("tokenizer.")]
    return v


def _find_tokenizer(model_path, n_vocab, given):
    if given:
        return given
    d = os.path.dirname(os.path.abspath(model_path))
    for cand in ("tok%d.bin" % n_vocab, "tokenizer.bin"):
        if os.path.exists(os.path.join(d, cand)):
            return os.path.join(d, cand)
    raise ConvertError("%s: no tokenizer found (tried tok%d.bin and tokenizer.bin next to it); "
                       "give one with --tokenizer" % (model_path, n_vocab))


def load_llama2c(path, tokenizer_path):
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 28:
        raise ConvertError("%s: too short for a llama2.c checkpoint" % path)
    v2 = struct.unpack_from("<I", buf, 0)[0] == LLAMA2C_V2_MAGIC
    hp, t = (read_llama2c_v2 if v2 else read_llama2c_v0)(path, buf)
    tok = _find_tokenizer(path, hp["n_vocab"], tokenizer_path)
    with open(tok, "rb") as f:
        is_gguf = f.read(4) == b"GGUF"
    read_vocab = _gguf_vocab if is_gguf else read_llama2c_tokenizer
    vocab = read_vocab(tok, hp["n_vocab"])
    name = os.path.splitext(os.path.basename(path))[0]
    return Model(name, hp, list(t.items()), vocab, GGMLType.Q8_0 if v2 else GGMLType.F32)


# --- Hugging Face ----------------------------------------------------------------------

def read_safetensors(path):
    """name → float32 ndarray for every tensor of a .safetensors file."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ConvertError("%s: too short for safetensors" % path)
    n = struct.unpack_from("<Q", buf, 0)[0]
    if 8 + n > len(buf):
        raise ConvertError("%s: header length %d past the end of the file" % (path, n))
    header = json.loads(buf[8:8 + n])
    base = 8 + n
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dt, shape, (a, b) = info["dtype"], info["shape"], info["data_offsets"]
        if not 0 <= a <= b <= len(buf) - base:
            raise ConvertError("%s: %s: data offsets [%d, %d) outside the file"
                               % (path, name, a, b))
        raw = np.frombuffer(buf, dtype=np.uint8, count=b - a, offset=base + a)
        if dt == "F32":
            x = raw.view("<f4")
        elif dt == "F16":
            x = raw.view("<f2").astype(np.float32)
        elif dt == "BF16":
            x = (raw.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ConvertError("%s: %s: dtype %s not supported" % (path, name, dt))
        if x.size != int(np.prod(shape, dtype=np.int64)):
            raise ConvertError("%s: %s: %d values for shape %s" % (path, name, x.size, shape))
        out[name] = x.reshape(shape)
    return out


def rotate_half_to_interleaved(w, n_heads):
    """Reorders the rows of a q/k projection [n_heads*head_dim, dim] within each head so
    that HF's rotate-half RoPE pairs (i, i+head_dim/2) become llama.cpp's adjacent pairs
    (2i, 2i+1)."""
    rows, cols = w.shape
    hd = rows // n_heads
    return w.reshape(n_heads, 2, hd // 2, cols).swapaxes(1, 2).reshape(rows, cols)


_HF_LAYER = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def _hf_tensors(st, hp, tied, path):
    if tied and "model.embed_tokens.weight" not in st and "lm_head.weight" in st:
        # safetensors stores a shared tensor once; with tied embeddings transformers may
        # keep it under lm_head.weight only (this model's __metadata__ records the alias).
        st = dict(st)
        st["model.embed_tokens.weight"] = st.pop("lm_head.weight")
    t = {}
    for name, x in st.items():
        m = re.fullmatch(r"model\.layers\.(\d+)\.(.+)\.weight", name)
        if name == "model.embed_tokens.weight":
            t["token_embd.weight"] = x
        elif name == "model.norm.weight":
            t["output_norm.weight"] = x
        elif name == "lm_head.weight":
            if not tied:
                t["output.weight"] = x
        elif m and m.group(2) in _HF_LAYER:
            kind = _HF_LAYER[m.group(2)]
            if kind == "attn_q":
                x = rotate_half_to_interleaved(x, hp["n_heads"])
            elif kind == "attn_k":
                x = rotate_half_to_interleaved(x, hp["n_kv_heads"])
            t["blk.%s.%s.weight" % (m.group(1), kind)] = x
        elif name.endswith("rotary_emb.inv_freq"):
            continue  # recomputed from rope_theta
        else:
            raise ConvertError("%s: unexpected tensor %s" % (path, name))
    want = {"token_embd.weight", "output_norm.weight"}
    for i in range(hp["n_layers"]):
        want |= set(_layer_names(i).values())
    missing = sorted(want - set(t))
    if missing:
        raise ConvertError("%s: missing tensors: %s" % (path, ", ".join(missing[:5])))
    return t


def _hf_hparams(cfg, path):
    if cfg.get("model_type") != "llama":
        raise ConvertError("%s: model_type %r; only llama is supported"
                           % (path, cfg.get("model_type")))
    if cfg.get("rope_scaling"):
        raise ConvertError("%s: rope_scaling %r is not supported" % (path, cfg["rope_scaling"]))
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise ConvertError("%s: attention/mlp biases are not supported for llama" % path)
    nh = cfg["num_attention_heads"]
    return dict(dim=cfg["hidden_size"], ffn=cfg["intermediate_size"],
                n_layers=cfg["num_hidden_layers"], n_heads=nh,
                n_kv_heads=cfg.get("num_key_value_heads", nh),
                head_dim=cfg.get("head_dim") or cfg["hidden_size"] // nh,
                n_vocab=cfg["vocab_size"], n_ctx=cfg.get("max_position_embeddings", 2048),
                rms_eps=cfg.get("rms_norm_eps", 1e-6), rope_base=cfg.get("rope_theta", 10000.0))


def _normalizer_prepends_space(tj):
    """True when tokenizer.json adds a leading ▁ (SentencePiece's add_dummy_prefix)."""
    norm = tj.get("normalizer") or {}
    steps = norm.get("normalizers", [norm]) if norm.get("type") == "Sequence" else [norm]
    replaces_space = any(s.get("type") == "Replace" and s.get("pattern", {}).get("String") == " "
                         and s.get("content") == SPIECE_SPACE for s in steps)
    prepends = any(s.get("type") == "Prepend" and s.get("prepend") == SPIECE_SPACE for s in steps)
    pre = tj.get("pre_tokenizer") or {}
    if pre.get("type") == "Metaspace":  # newer tokenizers: the pre-tokenizer does both
        replaces_space = True
        prepends = (pre.get("prepend_scheme", "always") != "never"
                    and pre.get("add_prefix_space", True))
    elif pre:
        raise ConvertError("tokenizer.json: pre_tokenizer %s is not SentencePiece-style"
                           % pre.get("type"))
    if not replaces_space:
        raise ConvertError("tokenizer.json: no ' ' → ▁ normalization: not a SentencePiece-style "
                           "BPE, cannot be written as tokenizer.ggml.model 'llama'")
    return prepends


def hf_bpe_to_spm_scores(vocab, merges):
    """Scores that make SentencePiece's greedy "merge the best-scoring adjacent pair"
    follow BPE's "apply the lowest-ranked merge first": the token a merge of rank r
    (1-based) creates scores -r. Single characters are never produced by a merge, so
    their score is never consulted; they get 0."""
    scores = {}
    for r, m in enumerate(merges, 1):
        a, b = m.split(" ", 1) if isinstance(m, str) else m
        scores.setdefault(a + b, -float(r))
    return scores


def read_hf_vocab(d, cfg):
    with open(os.path.join(d, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    tcfg = {}
    if os.path.exists(os.path.join(d, "tokenizer_config.json")):
        with open(os.path.join(d, "tokenizer_config.json"), encoding="utf-8") as f:
            tcfg = json.load(f)
    model = tj["model"]
    if model.get("type") != "BPE":
        raise ConvertError("%s/tokenizer.json: model type %s, expected BPE"
                           % (d, model.get("type")))
    add_space_prefix = _normalizer_prepends_space(tj)
    vocab = dict(model["vocab"])
    added = {a["id"]: a for a in tj.get("added_tokens", [])}
    for i, a in added.items():
        vocab[a["content"]] = i
    n = max(cfg["vocab_size"], max(vocab.values()) + 1)
    by_id = {i: s for s, i in vocab.items()}
    merge_scores = hf_bpe_to_spm_scores(vocab, model.get("merges", []))
    unk = vocab.get(model.get("unk_token")) if model.get("unk_token") else None
    tokens, scores, types = [], [], []
    for i in range(n):
        s = by_id.get(i)
        if s is None:  # embedding rows beyond the tokenizer: never produced
            tokens.append("[PAD%d]" % i)
            scores.append(-1e9)
            types.append(TOKEN_UNUSED)
            continue
        if i == unk:
            ttype = TOKEN_UNKNOWN
        elif i in added:
            ttype = TOKEN_CONTROL if added[i].get("special") else TOKEN_USER_DEFINED
        elif re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", s):
            ttype = TOKEN_BYTE
        else:
            ttype = TOKEN_NORMAL
        tokens.append(s)
        scores.append(merge_scores.get(s, 0.0) if ttype == TOKEN_NORMAL else 0.0)
        types.append(ttype)
    bos = _special_id(tcfg.get("bos_token"), vocab, cfg.get("bos_token_id"))
    eos = _special_id(tcfg.get("eos_token"), vocab, cfg.get("eos_token_id"))
    return Vocab(tokens, scores, types, bos=bos, eos=eos, unk=unk,
                 add_space_prefix=add_space_prefix, add_bos=tcfg.get("add_bos_token", True),
                 add_eos=tcfg.get("add_eos_token", False))


def _special_id(tok, vocab, fallback):
    if isinstance(tok, dict):
        tok = tok.get("content")
    if tok is not None and tok in vocab:
        return vocab[tok]
    return fallback


def load_hf(d):
    with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    hp = _hf_hparams(cfg, d)
    st_path = os.path.join(d, "model.safetensors")
    if not os.path.exists(st_path):
        raise ConvertError("%s: no model.safetensors (sharded checkpoints are not supported)" % d)
    st = read_safetensors(st_path)
    tied = cfg.get("tie_word_embeddings", "lm_head.weight" not in st)
    t = _hf_tensors(st, hp, tied, st_path)
    if t["token_embd.weight"].shape[0] != hp["n_vocab"]:
        raise ConvertError("%s: embedding has %d rows, config vocab_size %d"
                           % (d, t["token_embd.weight"].shape[0], hp["n_vocab"]))
    vocab = read_hf_vocab(d, cfg)
    return Model(os.path.basename(os.path.normpath(d)), hp, list(t.items()), vocab, GGMLType.F32)


# --- writing ---------------------------------------------------------------------------

def _tensor_type(x, want):
    """want for matrices whose rows fill whole blocks, else F16 (llama-quantize's last
    fallback); vectors stay F32."""
    if x.ndim == 1:
        return GGMLType.F32
    if x.shape[-1] % GGML_TYPES[want][1]:
        return GGMLType.F16
    return want


def _add_vocab(w, v):
    if v.gguf_kv is not None:
        for key, value, vt, et in v.gguf_kv:
            w.add(key, value, vt, et)
        return
    w.add("tokenizer.ggml.model", "llama")
    w.add("tokenizer.ggml.pre", "default")
    w.add("tokenizer.ggml.tokens", v.tokens, VT.ARRAY, VT.STRING)
    w.add("tokenizer.ggml.scores", v.scores, VT.ARRAY, VT.FLOAT32)
    w.add("tokenizer.ggml.token_type", v.types, VT.ARRAY, VT.INT32)
    for key, tid in (("bos", v.bos), ("eos", v.eos), ("unknown", v.unk)):
        if tid is not None:
            w.add("tokenizer.ggml.%s_token_id" % key, int(tid), VT.UINT32)
    w.add("tokenizer.ggml.add_bos_token", bool(v.add_bos))
    w.add("tokenizer.ggml.add_eos_token", bool(v.add_eos))
    w.add("tokenizer.ggml.add_space_prefix", bool(v.add_space_prefix))


def write_model(m, out, wtype=None):
    wtype = m.default_type if wtype is None else wtype
    hp = m.hp
    w = GGUFWriter(out)
    w.add("general.architecture", "llama")
    w.add("general.name", m.name)
    w.add("general.file_type", FILE_TYPE[GGML_TYPES[wtype][0]], VT.UINT32)
    if wtype not in (GGMLType.F32, GGMLType.F16, GGMLType.BF16):
        w.add("general.quantization_version", 2, VT.UINT32)
    w.add("llama.vocab_size", hp["n_vocab"], VT.UINT32)
    w.add("llama.context_length", hp["n_ctx"], VT.UINT32)
    w.add("llama.embedding_length", hp["dim"], VT.UINT32)
    w.add("llama.block_count", hp["n_layers"], VT.UINT32)
    w.add("llama.feed_forward_length", hp["ffn"], VT.UINT32)
    w.add("llama.rope.dimension_count", hp["head_dim"], VT.UINT32)
    w.add("llama.attention.head_count", hp["n_heads"], VT.UINT32)
    w.add("llama.attention.head_count_kv", hp["n_kv_heads"], VT.UINT32)
    if hp["head_dim"] * hp["n_heads"] != hp["dim"]:
        w.add("llama.attention.key_length", hp["head_dim"], VT.UINT32)
        w.add("llama.attention.value_length", hp["head_dim"], VT.UINT32)
    w.add("llama.attention.layer_norm_rms_epsilon", float(hp["rms_eps"]), VT.FLOAT32)
    w.add("llama.rope.freq_base", float(hp["rope_base"]), VT.FLOAT32)
    _add_vocab(w, m.vocab)
    for name, x in _ordered(m.tensors, hp["n_layers"]):
        x = np.ascontiguousarray(x, dtype=np.float32)
        if not np.all(np.isfinite(x)):
            raise ConvertError("%s: tensor %s has non-finite values" % (m.name, name))
        t = _tensor_type(x, wtype)
        w.add_tensor(name, tuple(reversed(x.shape)), t, quantize(x, t))
    w.write()
    return wtype


def load_any(path, tokenizer=None):
    if os.path.isdir(path):
        if not os.path.exists(os.path.join(path, "config.json")):
            raise ConvertError("%s: a directory without config.json" % path)
        return load_hf(path)
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic == b"GGUF":
        raise ConvertError("%s is already GGUF" % path)
    return load_llama2c(path, tokenizer)


# --- --shared mode ---------------------------------------------------------------------

def shared_jobs(shared, out):
    src = os.path.join(shared, "models")
    l2c = os.path.join(src, "llama2c")
    tok = os.path.join(l2c, "tok512.bin")
    hf = os.path.join(src, "tinystories-656K")
    return [
        (os.path.join(out, "stories260K.gguf"), os.path.join(l2c, "stories260K.bin"), tok),
        (os.path.join(out, "stories260K-q80.gguf"), os.path.join(l2c, "stories260K-q80-v2.bin"),
         tok),
        (os.path.join(out, "tinystories-656K.gguf"), hf, None),
    ]


def _inputs_of(path, tok):
    files = [os.path.abspath(__file__), os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                     "gguf_writer.py")]
    if os.path.isdir(path):
        files += [os.path.join(path, n) for n in os.listdir(path)]
    else:
        files.append(path)
    return files + ([tok] if tok else [])


def convert_shared(shared, out):
    os.makedirs(out, exist_ok=True)
    for dst, src, tok in shared_jobs(shared, out):
        inputs = _inputs_of(src, tok)
        missing = [p for p in inputs if not os.path.exists(p)]
        if missing:
            raise ConvertError("%s: input missing: %s" % (dst, missing[0]))
        if os.path.exists(dst) and os.path.getmtime(dst) >= max(map(os.path.getmtime, inputs)):
            print("convert: %s is up to date" % dst, file=sys.stderr)
            continue
        m = load_any(src, tok)
        t = write_model(m, dst)
        print("convert: %s <- %s (%s, %.1f MB)" % (dst, src, GGML_TYPES[t][0],
                                                 os.path.getsize(dst) / 1e6), file=sys.stderr)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("input", nargs="?", help="llama2.c .bin or Hugging Face model directory")
    ap.add_argument("--tokenizer", help="llama2.c tokenizer.bin or a vocabulary GGUF")
    ap.add_argument("-o", "--output", help="output .gguf")
    ap.add_argument("--type", choices=["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0",
                                       "Q5_1"],
                    help="weight type (default: F32, or Q8_0 for int8 checkpoints)")
    ap.add_argument("--shared", help="convert the models in SHARED/models (with --out)")
    ap.add_argument("--out", help="output directory for --shared")
    a = ap.parse_args(argv)
    try:
        if a.shared:
            if a.input or a.output or not a.out:
                ap.error("--shared takes --out DIR and no INPUT/-o")
            convert_shared(a.shared, a.out)
            return 0
        if not a.input or not a.output:
            ap.error("INPUT and -o OUT are required")
        m = load_any(a.input, a.tokenizer)
        t = write_model(m, a.output, TYPE_BY_NAME[a.type] if a.type else None)
        print("convert: %s <- %s (%s, %.1f MB)" % (a.output, a.input, GGML_TYPES[t][0],
                                                 os.path.getsize(a.output) / 1e6), file=sys.stderr)
        return 0
    except (ConvertError, OSError, ValueError, KeyError) as e:
        print("convert: error: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
