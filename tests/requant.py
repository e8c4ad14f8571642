#!/usr/bin/python3
"""requant.py IN.gguf OUT.gguf TYPE — the same model with its matrices re-quantized.

Every 2-D tensor whose rows fill TYPE's blocks is dequantized (any type
tests/ref_quant.py reads, K-quants included) and quantized to TYPE with
models/gguf_writer.py's ggml-reference quantizers; vectors (norms, biases) and
all metadata, tokenizer included, are copied. A lower-bit copy of a model is
the natural draft model for speculative decoding (tests/t_spec.sh).
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
sys.path.insert(0, HERE)
import numpy as np  # noqa: E402
from gguf_reader import GGUFReader  # noqa: E402
from gguf_writer import FILE_TYPE, GGML_TYPES, TYPE_BY_NAME, VT, GGUFWriter, quantize  # noqa: E402
from ref_quant import dequantize  # noqa: E402


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__.strip().splitlines()[0])
    src, dst, tname = argv[1:]
    if tname not in TYPE_BY_NAME:
        sys.exit("requant.py: unknown type %s" % tname)
    qtype = TYPE_BY_NAME[tname]
    block = GGML_TYPES[qtype][1]
    r = GGUFReader(src)
    w = GGUFWriter(dst, r.alignment)
    for key, value in r.kv.items():
        vt = r.kv_types[key]
        w.add(key, value, vt, r.kv_arr_types.get(key) if vt == VT.ARRAY else None)
    if tname in FILE_TYPE:
        w.add("general.file_type", FILE_TYPE[tname], VT.UINT32)
    for name, t in r.tensors.items():
        raw = bytes(r.tensor_bytes(t))
        if len(t.shape) == 2 and t.shape[0] % block == 0:
            x = dequantize(raw, t.type).astype(np.float32).reshape(t.shape[1], t.shape[0])
            w.add_tensor(name, t.shape, qtype, quantize(x, qtype))
        else:
            w.add_tensor(name, t.shape, t.type, raw)
    w.write()


if __name__ == "__main__":
    main(sys.argv)
