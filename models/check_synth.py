#!/usr/bin/python3
"""check_synth.py — structural checks of a GGUF model file (used on synth.py's output).

    check_synth.py FILE.gguf [--like REF.gguf]

Checks, printing each failure to stderr (exit 1 if any):
  * the file parses (gguf_reader checks every offset, size, alignment and overlap);
  * the architecture's hyperparameters are present and every expected tensor exists with
    the shape they imply (q/k/v/output, ffn, norms; qwen2 biases, qwen3 q/k norms;
    output.weight or a tied embedding), and no unexpected tensor is present;
  * the tokenizer has one token per embedding row and in-range bos/eos ids;
  * every fp16 scale of every quantized block is finite (MXFP4: no exponent is 255, E8M0's
    NaN), F32/F16 data is finite;
  * with --like: the same tensors with the same types and shapes as REF (e.g. a file
    llama-quantize made) and the same hyperparameters.
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUFReader  # noqa: E402
from gguf_writer import GGML_TYPES  # noqa: E402

# byte offsets of the fp16 scale fields inside one block, per ggml type id
SCALE_FIELDS = {2: [0], 3: [0, 2], 6: [0], 7: [0, 2], 8: [0], 10: [80, 82], 11: [108],
                12: [0, 2], 13: [0, 2], 14: [208], 20: [0], 23: [0]}
MXFP4 = 39  # the exponent byte leads each 17-byte block
HPARAMS = ["context_length", "embedding_length", "block_count", "feed_forward_length",
           "attention.head_count", "attention.head_count_kv", "rope.dimension_count",
           "attention.layer_norm_rms_epsilon", "rope.freq_base", "attention.key_length",
           "attention.value_length", "vocab_size"]


class Checker:
    def __init__(self, path):
        self.path, self.failures = path, 0

    def expect(self, ok, msg):
        if not ok:
            self.failures += 1
            print("FAIL %s: %s" % (self.path, msg), file=sys.stderr)
        return ok


def expected_tensors(r, c):
    kv, arch = r.kv, r.kv.get("general.architecture")
    g = lambda k, d=None: kv.get("%s.%s" % (arch, k), d)  # noqa: E731
    need = ["embedding_length", "block_count", "feed_forward_length", "attention.head_count"]
    if not all(c.expect(g(k) is not None, "%s.%s missing" % (arch, k)) for k in need):
        return None
    d, L, ffn, nh = (g(k) for k in need)
    nkv = g("attention.head_count_kv", nh)
    hd = g("attention.key_length", d // nh)
    n_vocab = len(kv.get("tokenizer.ggml.tokens", []))
    want = {"token_embd.weight": (d, n_vocab), "output_norm.weight": (d,)}
    if "output.weight" in r.tensors:
        want["output.weight"] = (d, n_vocab)
    if "rope_freqs.weight" in r.tensors:
        want["rope_freqs.weight"] = (g("rope.dimension_count", hd) // 2,)
    for i in range(L):
        p = "blk.%d." % i
        want.update({p + "attn_norm.weight": (d,), p + "attn_q.weight": (d, nh * hd),
                     p + "attn_k.weight": (d, nkv * hd), p + "attn_v.weight": (d, nkv * hd),
                     p + "attn_output.weight": (nh * hd, d), p + "ffn_norm.weight": (d,),
                     p + "ffn_gate.weight": (d, ffn), p + "ffn_up.weight": (d, ffn),
                     p + "ffn_down.weight": (ffn, d)})
        if arch == "qwen2":
            want.update({p + "attn_q.bias": (nh * hd,), p + "attn_k.bias": (nkv * hd,),
                         p + "attn_v.bias": (nkv * hd,)})
        if arch == "qwen3":
            want.update({p + "attn_q_norm.weight": (hd,), p + "attn_k_norm.weight": (hd,)})
    return want


def check_structure(r, c):
    arch = r.kv.get("general.architecture")
    c.expect(arch in ("llama", "qwen2", "qwen3"), "architecture %r" % arch)
    want = expected_tensors(r, c)
    if want is None:
        return
    for name, shape in want.items():
        t = r.tensors.get(name)
        if c.expect(t is not None, "tensor %s missing" % name):
            c.expect(tuple(t.shape) == shape, "%s: shape %s, expected %s" % (name, t.shape, shape))
    extra = sorted(set(r.tensors) - set(want))
    c.expect(not extra, "unexpected tensors %s" % extra[:5])
    kv = r.kv
    n = len(kv.get("tokenizer.ggml.tokens", []))
    c.expect(kv.get("tokenizer.ggml.model") in ("llama", "gpt2"),
             "tokenizer.ggml.model %r" % kv.get("tokenizer.ggml.model"))
    c.expect(kv.get("%s.vocab_size" % arch, n) == n, "vocab_size != token count")
    for k in ("token_type", "scores"):
        arr = kv.get("tokenizer.ggml." + k)
        c.expect(arr is None or len(arr) == n, "tokenizer.ggml.%s: %d entries for %d tokens"
                 % (k, len(arr or []), n))
    for k in ("bos", "eos"):
        tid = kv.get("tokenizer.ggml.%s_token_id" % k)
        c.expect(tid is None or 0 <= tid < n, "%s id %s out of range" % (k, tid))


def check_data(r, c):
    for t in r.tensors.values():
        raw = np.frombuffer(r.tensor_bytes(t), dtype=np.uint8)
        if t.type in (0, 1, 30):  # F32, F16, BF16
            c.expect(np.all(np.isfinite(r.tensor_float(t))), "%s: non-finite values" % t.name)
        elif t.type == MXFP4:
            c.expect(np.all(raw.reshape(-1, 17)[:, 0] != 255), "%s: an MXFP4 exponent is 255 (NaN)" % t.name)
        elif t.type in SCALE_FIELDS:
            blocks = raw.reshape(-1, GGML_TYPES[t.type][2])
            for off in SCALE_FIELDS[t.type]:
                d = blocks[:, off:off + 2].copy().view("<f2")
                c.expect(np.all(np.isfinite(d)), "%s: non-finite fp16 scale at byte %d of a block"
                         % (t.name, off))
        else:
            c.expect(False, "%s: type %s not checked" % (t.name, t.type_name))


def check_like(r, ref, c):
    a = {n: (t.type_name, tuple(t.shape)) for n, t in r.tensors.items()}
    b = {n: (t.type_name, tuple(t.shape)) for n, t in ref.tensors.items()}
    for n in sorted(set(a) | set(b)):
        c.expect(a.get(n) == b.get(n), "%s: ours %s, reference %s" % (n, a.get(n), b.get(n)))
    arch = ref.kv["general.architecture"]
    c.expect(r.kv.get("general.architecture") == arch, "architecture differs from reference")
    for k in HPARAMS:
        key = "%s.%s" % (arch, k)
        if key in ref.kv:
            c.expect(r.kv.get(key) == ref.kv[key], "%s: ours %r, reference %r"
                     % (key, r.kv.get(key), ref.kv[key]))
    c.expect(r.kv.get("general.file_type") == ref.kv.get("general.file_type"), "file_type differs")


def main(argv):
    if len(argv) not in (1, 3) or (len(argv) == 3 and argv[1] != "--like"):
        print(__doc__, file=sys.stderr)
        return 2
    c = Checker(argv[0])
    r = GGUFReader(argv[0])
    check_structure(r, c)
    check_data(r, c)
    if len(argv) == 3:
        check_like(r, GGUFReader(argv[2]), c)
    if not c.failures:
        print("ok %s: %d tensors" % (argv[0], len(r.tensors)))
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
