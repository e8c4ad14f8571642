"""hostile_gguf.py — model files that are valid GGUF but hostile, for tests/t_limits.sh.

    /usr/bin/python3 tests/hostile_gguf.py SRC.gguf OUT_DIR

From SRC (stories260K) writes:
  layers-4096.gguf   block_count 4096, every layer's tensor infos pointing at layer 0's
                     data (a 2 MB file whose KV cache at -c 16777216 would take 8 TB)
  inf-norm.gguf      output_norm.weight all +inf: every logit is non-finite
  nan-embd.gguf      one row of token_embd.weight NaN (token 1, BOS): the activations
                     the quantizers see are NaN from the first layer on
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from corrupt import Gguf  # noqa: E402
from gguf_writer import VT  # noqa: E402

INF, NAN = struct.pack("<f", float("inf")), struct.pack("<f", float("nan"))


def layers_4096(src, dst):
    g = Gguf(src)
    pad = lambda n: (-n) % g.alignment  # noqa: E731
    offset, pos = {}, 0
    for t in g.tensors:  # the offsets Gguf.write lays the data out at
        offset[t["name"]] = pos
        pos += len(t["data"]) + pad(len(t["data"]))
    n_layers = next(v for k, _, v in g.kv if k.endswith(".block_count"))
    n_layers = struct.unpack("<I", n_layers)[0]
    arch = next(k for k, _, _ in g.kv if k.endswith(".block_count")).split(".")[0]
    layer0 = [t for t in g.tensors if t["name"].startswith("blk.0.")]
    g.tensors = [t for t in g.tensors if not t["name"].startswith("blk.") or t["name"].startswith("blk.0.")]
    for layer in range(1, 4096):
        for t in layer0:
            g.tensors.append(dict(name=t["name"].replace("blk.0.", "blk.%d." % layer, 1), shape=t["shape"],
                                  type=t["type"], data=b"", offset=offset[t["name"]]))
    assert n_layers >= 1
    g.set_kv(arch + ".block_count", 4096, VT.UINT32)
    g.write(dst)


def patched_values(src, dst, name, value, rows=None):
    """Tensor `name` (F32) with `value` everywhere, or in rows `rows` of a matrix."""
    g = Gguf(src)
    t = g.tensor(name)
    n = len(t["data"]) // 4
    if rows is None:
        t["data"] = value * n
    else:
        cols = t["shape"][0]
        b = bytearray(t["data"])
        for r in rows:
            b[4 * cols * r:4 * cols * (r + 1)] = value * cols
        t["data"] = bytes(b)
    g.write(dst)


def main(src, out):
    layers_4096(src, os.path.join(out, "layers-4096.gguf"))
    patched_values(src, os.path.join(out, "inf-norm.gguf"), "output_norm.weight", INF)
    patched_values(src, os.path.join(out, "nan-embd.gguf"), "token_embd.weight", NAN, rows=[1])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
