#!/usr/bin/python3
"""set_template.py IN.gguf OUT.gguf TEMPLATE.jinja — the same model with TEMPLATE as its
tokenizer.chat_template (every other key and tensor copied as is): a model that
chats in a real template's format, for tests/t_template.sh."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
from gguf_reader import GGUFReader  # noqa: E402
from gguf_writer import VT, GGUFWriter  # noqa: E402


def main(argv):
    if len(argv) != 4:
        sys.exit(__doc__.strip().splitlines()[0])
    src, dst, tpl = argv[1:]
    r = GGUFReader(src)
    w = GGUFWriter(dst, r.alignment)
    for key, value in r.kv.items():
        if key != "tokenizer.chat_template":
            vt = r.kv_types[key]
            w.add(key, value, vt, r.kv_arr_types.get(key) if vt == VT.ARRAY else None)
    with open(tpl, encoding="utf-8") as f:
        w.add("tokenizer.chat_template", f.read(), VT.STRING)
    for name, t in r.tensors.items():
        w.add_tensor(name, t.shape, t.type, bytes(r.tensor_bytes(t)))
    w.write()


if __name__ == "__main__":
    main(sys.argv)
