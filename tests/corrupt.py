"""corrupt.py — broken GGUF files for tests/t_loader.sh.

    /usr/bin/python3 tests/corrupt.py SHARED OUT_DIR

Reads stories260K-Q8_0.gguf and stories260K.gguf (and, when present, the dim-256
synth-llama-Q8_0.gguf, whose rows fit the 256-element K/IQ blocks) from SHARED/models/gguf
and writes into OUT_DIR one file per case, named after the case. Three kinds:

  trunc-N.gguf   the Q8_0 file cut to its first N bytes; the cut points are listed in
                 OUT_DIR/truncations.tsv as "N<TAB>where" (where: header, metadata,
                 tensor-infos, padding, data-start, data, last-byte: one byte short of the
                 end of the last tensor); pad-trimmed.gguf: cut just after it (valid)
  byte patches   magic, version: a few bytes changed in place
  rewrites       the file parsed with models/gguf_reader.py, one thing changed (a
                 tensor's type, offset, shape or name, a key's value or type, a tensor
                 dropped) and serialized again by Gguf.write below, which lays the data
                 out afresh unless an offset is forced. Unchanged, the rewrite is byte-identical
                 to the original (checked before anything is written), so each file has
                 exactly one fault.

Which quill message each case must produce is asserted in t_loader.sh, not here.
"""
import os
import struct
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models"))
from gguf_reader import GGUFReader  # noqa: E402
from gguf_writer import VT, _encode_value, _gguf_str  # noqa: E402

# ggml type ids used below (gguf_writer.GGML_TYPES has the full table)
F32, F16, Q8_0, Q8_1, IQ2_XXS, IQ3_S, TQ1_0 = 0, 1, 8, 9, 16, 21, 34
BLOCK = {Q8_1: (32, 36), IQ2_XXS: (256, 66), IQ3_S: (256, 110), TQ1_0: (256, 54), F16: (1, 2), F32: (1, 4)}


class Gguf:
    """A GGUF file as editable lists: kv = [[key, vtype, encoded value]],
    tensors = [dict(name, shape, type, data, offset=None)]."""

    def __init__(self, path):
        r = GGUFReader(path)
        self.version = r.version
        self.alignment = r.alignment
        self.kv = [[k, r.kv_types[k], _encode_value(v, r.kv_types[k], r.kv_arr_types.get(k))]
                   for k, v in r.kv.items()]
        self.tensors = [dict(name=t.name, shape=list(t.shape), type=t.type,
                             data=bytes(r.tensor_bytes(t)), offset=None)
                        for t in r.tensors.values()]

    def tensor(self, name):
        return next(t for t in self.tensors if t["name"] == name)

    def set_kv(self, key, value, vtype, elem_type=None):
        self.set_raw(key, vtype, _encode_value(value, vtype, elem_type))

    def set_raw(self, key, vtype, enc):
        """Sets (or adds) a key whose value is already encoded (also values that
        _encode_value refuses to write)."""
        for e in self.kv:
            if e[0] == key:
                e[1:] = [vtype, enc]
                return
        self.kv.append([key, vtype, enc])

    def drop_kv(self, key):
        self.kv = [e for e in self.kv if e[0] != key]

    def drop_tensor(self, name):
        self.tensors = [t for t in self.tensors if t["name"] != name]

    def retype(self, name, ggml_type):
        """Gives a tensor another type with data of exactly the right size (a byte pattern:
        the loader must reject the type before it looks at the values)."""
        t = self.tensor(name)
        block, block_bytes = BLOCK[ggml_type]
        n = 1
        for d in t["shape"]:
            n *= d
        t["type"], t["data"] = ggml_type, bytes(i * 37 & 0x7f for i in range(n // block * block_bytes))

    def write(self, path):
        pad = lambda n: (-n) % self.alignment  # noqa: E731
        head = [b"GGUF", struct.pack("<IQQ", self.version, len(self.tensors), len(self.kv))]
        for key, vt, enc in self.kv:
            head += [_gguf_str(key), struct.pack("<I", vt), enc]
        data, pos = [], 0
        for t in self.tensors:
            off = pos if t["offset"] is None else t["offset"]
            head += [_gguf_str(t["name"]), struct.pack("<I", len(t["shape"])),
                     struct.pack("<%dQ" % len(t["shape"]), *t["shape"]), struct.pack("<IQ", t["type"], off)]
            data += [t["data"], b"\0" * pad(len(t["data"]))]
            pos += len(t["data"]) + pad(len(t["data"]))
        head = b"".join(head)
        with open(path, "wb") as f:
            f.write(head + b"\0" * pad(len(head)) + b"".join(data))


def header_sizes(path):
    """(end of the key/values, end of the tensor infos, data offset, end of the last tensor's
    data) of a file, from the sizes of its entries as Gguf re-encodes them."""
    r, g = GGUFReader(path), Gguf(path)
    kv_end = 24 + sum(8 + len(key.encode("utf-8", "surrogateescape")) + 4 + len(enc) for key, _, enc in g.kv)
    infos_end = kv_end + sum(8 + len(t["name"].encode()) + 4 + 8 * len(t["shape"]) + 4 + 8 for t in g.tensors)
    data_end = r.data_offset + max(t.offset + t.nbytes for t in r.tensors.values())
    return kv_end, infos_end, r.data_offset, data_end


def truncations(src, out):
    """Cuts spread over the whole file, each labelled with the part it falls in. The file
    ends in padding after the last tensor; cut to the end of the data (pad-trimmed.gguf) it
    is still a valid model, as it is for llama.cpp, which checks offset + size <= file size."""
    kv_end, infos_end, data_off, data_end = header_sizes(src)
    cuts = {0, 3, 4, 8, 16, 23, 24, 25, 31, 32, 40, 100, 1000, kv_end // 3, kv_end // 2, kv_end - 1,
            kv_end, kv_end + 1, (kv_end + infos_end) // 2, infos_end - 1, infos_end, data_off - 1,
            data_off, data_off + 1, data_off + 4096, data_end - 1}
    step = (data_end - data_off) // 14
    cuts |= {data_off + k * step + 7 for k in range(1, 14)}
    cuts = sorted(c for c in cuts if 0 <= c < data_end)
    blob = open(src, "rb").read()
    open(os.path.join(out, "pad-trimmed.gguf"), "wb").write(blob[:data_end])
    with open(os.path.join(out, "truncations.tsv"), "w") as lst:
        for c in cuts:
            where = ("header" if c < 24 else "metadata" if c < kv_end else "tensor-infos" if c < infos_end
                     else "padding" if c < data_off else "data-start" if c == data_off
                     else "last-byte" if c == data_end - 1 else "data")
            open(os.path.join(out, "trunc-%d.gguf" % c), "wb").write(blob[:c])
            lst.write("%d\t%s\n" % (c, where))


def patched(src, dst, at, new):
    b = bytearray(open(src, "rb").read())
    b[at:at + len(new)] = new
    open(dst, "wb").write(bytes(b))


def parse_level(q8, out):
    """Faults the GGUF parser itself must catch."""
    w = lambda name: os.path.join(out, name + ".gguf")  # noqa: E731
    patched(q8, w("magic"), 0, b"GGUX")
    patched(q8, w("magic-zeros"), 0, b"\0\0\0\0")
    patched(q8, w("version-1"), 4, struct.pack("<I", 1))
    patched(q8, w("version-4"), 4, struct.pack("<I", 4))
    patched(q8, w("version-bigendian"), 4, struct.pack(">I", 3))
    patched(q8, w("n-kv-huge"), 16, struct.pack("<Q", 1 << 62))
    patched(q8, w("n-tensors-huge"), 8, struct.pack("<Q", (1 << 64) - 1))
    patched(q8, w("key-len-huge"), 24, struct.pack("<Q", (1 << 64) - 2))

    g = Gguf(q8)
    g.tensors[-1]["offset"] = 1 << 30  # aligned, far past the end
    g.write(w("offset-past-end"))
    g = Gguf(q8)
    g.tensors[-1]["offset"] = (1 << 64) - 32  # aligned; data offset + this wraps around
    g.write(w("offset-wraps"))
    g = Gguf(q8)
    g.tensors[3]["offset"] = 16  # not a multiple of 32
    g.write(w("offset-misaligned"))

    g = Gguf(q8)
    g.tensor("blk.0.attn_q.weight")["shape"] = [1 << 40, 1 << 40]  # 2^80 elements
    g.write(w("dims-overflow"))
    g = Gguf(q8)
    g.tensor("blk.0.attn_q.weight")["shape"] = [64, 1 << 62, 4]  # 2^70 elements, each dim valid
    g.write(w("dims-overflow-3d"))
    g = Gguf(q8)
    g.tensor("blk.0.attn_q.weight")["shape"] = [64, 0]
    g.write(w("dims-zero"))
    g = Gguf(q8)
    g.tensor("blk.0.attn_q.weight")["shape"] = [64, 64, 1, 1, 1]
    g.write(w("n-dims-5"))
    g = Gguf(q8)
    g.tensor("blk.0.attn_q.weight")["shape"] = [48, 64]  # Q8_0 rows are whole 32-blocks
    g.write(w("block-misfit"))

    g = Gguf(q8)
    g.tensor("blk.0.attn_q.weight")["type"] = 99
    g.write(w("type-99"))
    g = Gguf(q8)
    g.tensor("blk.0.attn_k.weight")["name"] = "blk.0.attn_q.weight"
    g.write(w("dup-tensor"))
    g = Gguf(q8)
    g.kv.append(list(g.kv[4]))  # general.architecture again
    g.write(w("dup-key"))
    g = Gguf(q8)
    g.set_kv("general.alignment", 48, VT.UINT32)
    g.write(w("alignment-48"))
    g = Gguf(q8)
    g.set_raw("tokenizer.ggml.scores", VT.ARRAY, struct.pack("<IQIQ", VT.ARRAY, 1, VT.UINT8, 0))
    g.write(w("nested-array"))
    g = Gguf(q8)
    g.set_raw("general.name", 13, b"")  # value type 13 does not exist
    g.write(w("value-type-13"))


def model_level(q8, f32, synth, out):
    """Files that parse cleanly but are not a model quill can run."""
    w = lambda name: os.path.join(out, name + ".gguf")  # noqa: E731
    g = Gguf(q8)
    g.retype("blk.0.attn_q.weight", Q8_1)
    g.write(w("type-q8_1"))
    if synth:
        for name, ty, tensor in (("iq2_xxs", IQ2_XXS, "blk.0.attn_q.weight"), ("iq3_s", IQ3_S, "blk.1.ffn_up.weight"),
                                 ("tq1_0", TQ1_0, "output.weight")):
            g = Gguf(synth)
            g.retype(tensor, ty)
            g.write(w("type-" + name))

    g = Gguf(q8)
    g.drop_tensor("blk.0.ffn_up.weight")
    g.write(w("missing-ffn-up"))
    g = Gguf(q8)
    g.drop_tensor("token_embd.weight")
    g.write(w("missing-embd"))
    g = Gguf(q8)
    t = g.tensor("blk.0.ffn_down.weight")  # F16 [172, 64] stored transposed, same bytes
    t["shape"] = [64, 172]
    g.write(w("shape-transposed"))
    g = Gguf(q8)
    t = g.tensor("blk.2.attn_q.weight")  # Q8_0 [64, 64] stored as [64, 32] (k's shape)
    t["shape"], t["data"] = [64, 32], t["data"][:len(t["data"]) // 2]
    g.write(w("shape-rows"))
    g = Gguf(q8)
    g.set_kv("llama.block_count", 6, VT.UINT32)  # one layer more than the file has
    g.write(w("block-count-6"))

    g = Gguf(q8)
    g.set_kv("general.architecture", "gpt9", VT.STRING)
    g.write(w("arch-gpt9"))
    g = Gguf(q8)
    g.drop_kv("general.architecture")
    g.write(w("arch-missing"))
    g = Gguf(q8)
    g.drop_kv("llama.block_count")
    g.write(w("missing-block-count"))
    g = Gguf(q8)
    g.set_kv("llama.block_count", "5", VT.STRING)
    g.write(w("block-count-string"))
    g = Gguf(q8)
    g.set_kv("llama.attention.head_count", 0, VT.UINT32)
    g.write(w("head-count-0"))
    g = Gguf(q8)
    g.set_kv("llama.attention.head_count_kv", 3, VT.UINT32)  # 8 heads do not share 3 kv heads
    g.write(w("head-count-kv-3"))
    g = Gguf(q8)
    g.set_kv("llama.embedding_length", -64, VT.INT32)
    g.write(w("dim-negative"))

    g = Gguf(q8)
    g.set_kv("llama.attention.layer_norm_rms_epsilon", float("nan"), VT.FLOAT32)
    g.write(w("eps-nan"))
    g = Gguf(q8)
    g.set_kv("llama.rope.freq_base", 0.0, VT.FLOAT32)  # 0^(-2i/d): infinite angles
    g.write(w("freq-base-0"))

    g = Gguf(f32)
    t = g.tensor("blk.0.attn_norm.weight")
    t["type"], t["data"] = F16, np.frombuffer(t["data"], "<f4").astype("<f2").tobytes()
    g.write(w("norm-f16"))

    # strings from the file that end up in a message: control bytes must not break the line
    g = Gguf(q8)
    g.set_kv("general.architecture", "gpt\n9\x1b[31m", VT.STRING)
    g.write(w("ctrl-arch"))
    g = Gguf(q8)
    g.set_kv("llama.rope.scaling.type", "yarn\nx", VT.STRING)
    g.set_kv("llama.rope.scaling.factor", 2.0, VT.FLOAT32)
    g.write(w("ctrl-rope-scaling"))
    g = Gguf(q8)
    g.set_kv("tokenizer.ggml.model", "gpt\n2", VT.STRING)
    g.write(w("ctrl-tokenizer-model"))
    g = Gguf(q8)
    tokens = GGUFReader(q8).kv["tokenizer.ggml.tokens"]
    tokens[300] = tokens[301] = "a\nb"
    g.set_kv("tokenizer.ggml.tokens", tokens, VT.ARRAY, VT.STRING)
    g.write(w("ctrl-dup-piece"))

    g = Gguf(q8)
    g.set_kv("tokenizer.ggml.tokens", list(range(512)), VT.ARRAY, VT.INT32)
    g.write(w("tokens-int32"))
    g = Gguf(q8)
    g.set_kv("tokenizer.ggml.tokens", 512, VT.UINT32)
    g.write(w("tokens-scalar"))
    g = Gguf(q8)
    g.drop_kv("tokenizer.ggml.tokens")
    g.write(w("tokens-missing"))
    g = Gguf(q8)
    g.set_kv("tokenizer.ggml.scores", [0.0] * 100, VT.ARRAY, VT.FLOAT32)
    g.write(w("scores-short"))
    g = Gguf(q8)
    g.set_kv("tokenizer.ggml.bos_token_id", 9999, VT.UINT32)
    g.write(w("bos-out-of-range"))


def moe_level(moe, out):
    """A mixture of experts (synth-qwen3moe-Q8_0: 8 experts, 2 used, experts of 128)
    with its expert keys or tensors broken."""
    w = lambda name: os.path.join(out, name + ".gguf")  # noqa: E731
    for name, key, value in (("moe-used-9", "qwen3moe.expert_used_count", 9),
                             ("moe-used-0", "qwen3moe.expert_used_count", 0),
                             ("moe-experts-0", "qwen3moe.expert_count", 0),
                             ("moe-experts-7", "qwen3moe.expert_count", 7)):
        g = Gguf(moe)
        g.set_kv(key, value, VT.UINT32)
        g.write(w(name))
    g = Gguf(moe)
    g.drop_kv("qwen3moe.expert_feed_forward_length")
    g.write(w("moe-no-expert-ffn"))
    g = Gguf(moe)
    g.drop_tensor("blk.1.ffn_down_exps.weight")
    g.write(w("moe-missing-down"))
    g = Gguf(moe)
    g.drop_tensor("blk.0.ffn_gate_inp.weight")
    g.write(w("moe-missing-router"))
    g = Gguf(moe)
    t = g.tensor("blk.2.ffn_up_exps.weight")  # [256, 128, 8] as [256, 256, 4]: the same bytes
    t["shape"] = [256, 256, 4]
    g.write(w("moe-shape"))


def main(argv):
    if len(argv) != 3:
        print("usage: corrupt.py SHARED OUT_DIR", file=sys.stderr)
        return 2
    d = os.path.join(argv[1], "models", "gguf")
    q8, f32, synth = (os.path.join(d, n) for n in
                      ("stories260K-Q8_0.gguf", "stories260K.gguf", "synth-llama-Q8_0.gguf"))
    out = argv[2]
    Gguf(q8).write(os.path.join(out, "roundtrip.gguf"))
    if open(os.path.join(out, "roundtrip.gguf"), "rb").read() != open(q8, "rb").read():
        print("corrupt.py: rewriting %s unchanged does not reproduce it" % q8, file=sys.stderr)
        return 1
    truncations(q8, out)
    parse_level(q8, out)
    model_level(q8, f32, synth if os.path.exists(synth) else None, out)
    moe = os.path.join(d, "synth-qwen3moe-Q8_0.gguf")
    if os.path.exists(moe):
        moe_level(moe, out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
