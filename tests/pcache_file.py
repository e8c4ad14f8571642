#!/usr/bin/env python3
"""tests/pcache_file.py — an independent reader of quill's prompt cache files (format in pcache.h).

  pcache_file.py check FILE [--ids "1 2 3"] [--model GGUF]
      verifies magic, version, all three hashes, the exact file size, and that the payload
      is one zstd frame (decompressed by the zstd command line tool, which checks zstd's
      content checksum) of n_layers * 2 * n_tokens * n_kv_heads * head_dim fp16 values;
      with --ids, that the stored ids are those; with --model, that the shape is the model's
      (read from the GGUF metadata here). Prints n_tokens; exits 1 with a reason otherwise.
  pcache_file.py check-many MANIFEST
      the same for each line "FILE<TAB>IDS<TAB>MODEL" of MANIFEST; names every file that fails.
  pcache_file.py patch FILE FIELD VALUE
      rewrites a header field (version, kv_type, backend, ...) or a token id (FIELD id:N) and
      fixes the hashes, making a file that is intact but describes another format version,
      KV type or backend, or holds an id outside the vocabulary.

Written from the format description, not from pcache.c, so a disagreement between the two
shows up as a failing check.
"""
import struct
import subprocess
import sys

M64 = (1 << 64) - 1
K1 = 0x9E3779B97F4A7C15
K2 = 0xD6E8FEB86659FD93
HEADER = 192


def xs32(x):
    return x ^ (x >> 32)


def pc_hash64(b, seed=0):
    lane = [(seed + i * K1) & M64 for i in range(4)]
    n = len(b)
    if n % 32:
        b = b + bytes(32 - n % 32)
    words = struct.unpack("<%dQ" % (len(b) // 8), b)
    for o in range(0, len(words), 4):
        for i in range(4):
            lane[i] = xs32(((lane[i] ^ words[o + i]) * K1) & M64)
    h = (seed ^ (n * K2)) & M64
    for i in range(4):
        h = xs32(((h ^ xs32((lane[i] * K2) & M64)) * K1) & M64)
    return xs32((h * K2) & M64)


FIELDS = {  # name: (offset, struct format)
    "version": (8, "<I"), "kv_type": (12, "<I"), "model_id": (16, "<Q"), "model_size": (24, "<Q"),
    "n_layers": (32, "<I"), "n_kv_heads": (36, "<I"), "head_dim": (40, "<I"), "n_tokens": (44, "<I"),
    "codec": (48, "<I"), "swa_floor": (52, "<I"), "payload_bytes": (56, "<Q"), "payload_hash": (64, "<Q"), "ids_hash": (72, "<Q"),
    "backend": (80, "64s"), "model_name": (144, "40s"), "header_hash": (184, "<Q"),
}


def fields(b):
    return {k: struct.unpack_from(f, b, o)[0] for k, (o, f) in FIELDS.items()}


SHAPES = {}


def gguf_shape(path):
    if path not in SHAPES:
        SHAPES[path] = read_gguf_shape(path)
    return SHAPES[path]


def read_gguf_shape(path):
    """n_layers, n_kv_heads, head_dim from a GGUF's metadata (a minimal reader of the KV section)."""
    with open(path, "rb") as f:
        d = f.read(1 << 22)
    magic, ver, n_t, n_kv = struct.unpack_from("<IIQQ", d, 0)
    assert magic == 0x46554747, "not a GGUF"
    o, meta = 24, {}
    scal = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def rstr(o):
        n = struct.unpack_from("<Q", d, o)[0]
        return d[o + 8:o + 8 + n].decode("utf-8", "replace"), o + 8 + n

    def rval(t, o):
        if t == 8:
            return rstr(o)
        if t == 9:
            et, cnt = struct.unpack_from("<IQ", d, o)
            o += 12
            for _ in range(cnt):
                _, o = rval(et, o)
            return None, o
        f = "<" + scal[t]
        return struct.unpack_from(f, d, o)[0], o + struct.calcsize(f)

    for _ in range(n_kv):
        k, o = rstr(o)
        t = struct.unpack_from("<I", d, o)[0]
        v, o = rval(t, o + 4)
        meta[k] = v
    a = meta["general.architecture"]
    heads = meta[a + ".attention.head_count"]
    kv = meta.get(a + ".attention.head_count_kv", heads)
    hd = meta.get(a + ".attention.key_length", meta[a + ".embedding_length"] // heads)
    return meta[a + ".block_count"], kv, hd


def check(path, want_ids=None, model=None, quiet=False):
    b = open(path, "rb").read()
    if len(b) < HEADER or b[:8] != b"QUILLPC\n":
        return "bad magic or shorter than the header"
    h = fields(b)
    if h["version"] != 1:
        return "version %d" % h["version"]
    if pc_hash64(b[:184]) != h["header_hash"]:
        return "header hash mismatch"
    n = h["n_tokens"]
    ids_b = b[HEADER:HEADER + 4 * n]
    if pc_hash64(ids_b) != h["ids_hash"]:
        return "ids hash mismatch"
    payload = b[HEADER + 4 * n:]
    if len(payload) != h["payload_bytes"]:
        return "payload is %d bytes, header says %d" % (len(payload), h["payload_bytes"])
    if pc_hash64(payload) != h["payload_hash"]:
        return "payload hash mismatch"
    if h["kv_type"] not in (1, 2) or h["codec"] != 1:
        return "kv_type %d codec %d" % (h["kv_type"], h["codec"])
    if h["swa_floor"] > n or h["swa_floor"] % 16:
        return "sliding-window floor %d of %d positions" % (h["swa_floor"], n)
    # the zstd frame must carry a content checksum: bit 2 of the frame header descriptor
    if payload[:4] != b"\x28\xb5\x2f\xfd" or not payload[4] & 4:
        return "payload is not a zstd frame with a content checksum"
    raw = subprocess.run(["zstd", "-d", "-c", "-q"], input=payload, capture_output=True)
    if raw.returncode:
        return "zstd -d failed: " + raw.stderr.decode()
    kvd = h["n_kv_heads"] * h["head_dim"]
    # a row: fp16 values (1), or int8 values, an fp16 scale per 32 and padding to 16 bytes (2: q8)
    row = 2 * kvd if h["kv_type"] == 1 else (kvd + kvd // 16 + 15) // 16 * 16
    expect = h["n_layers"] * 2 * n * row
    if len(raw.stdout) != expect:
        return "payload decompresses to %d bytes, expected %d" % (len(raw.stdout), expect)
    ids = list(struct.unpack("<%di" % n, ids_b))
    if want_ids is not None and ids != want_ids:
        return "ids %s, expected %s" % (ids[:12], want_ids[:12])
    if model and gguf_shape(model) != (h["n_layers"], h["n_kv_heads"], h["head_dim"]):
        return "shape %s, the model's is %s" % ((h["n_layers"], h["n_kv_heads"], h["head_dim"]), gguf_shape(model))
    if not quiet:
        print(n)
    return None


def patch(path, field, value):
    b = bytearray(open(path, "rb").read())
    if field.startswith("id:"):  # ids[N], with the ids hash fixed
        struct.pack_into("<i", b, HEADER + 4 * int(field[3:]), int(value))
        n = fields(b)["n_tokens"]
        struct.pack_into("<Q", b, FIELDS["ids_hash"][0], pc_hash64(bytes(b[HEADER:HEADER + 4 * n])))
    else:
        off, fmt = FIELDS[field]
        struct.pack_into(fmt, b, off, value.encode() if "s" in fmt else int(value))
    struct.pack_into("<Q", b, 184, pc_hash64(bytes(b[:184])))
    open(path, "wb").write(b)


def main():
    a = sys.argv[1:]
    if a[:1] == ["check"]:
        ids = [int(x) for x in a[a.index("--ids") + 1].split()] if "--ids" in a else None
        model = a[a.index("--model") + 1] if "--model" in a else None
        why = check(a[1], ids, model)
        if why:
            print("pcache_file.py: %s: %s" % (a[1], why), file=sys.stderr)
            sys.exit(1)
    elif a[:1] == ["check-many"] and len(a) == 2:
        bad = 0
        for line in open(a[1]):
            path, ids, model = line.rstrip("\n").split("\t")
            why = check(path, [int(x) for x in ids.split()], model, quiet=True)
            if why:
                print("pcache_file.py: %s: %s" % (path, why), file=sys.stderr)
                bad += 1
        sys.exit(1 if bad else 0)
    elif a[:1] == ["patch"] and len(a) == 4:
        patch(a[1], a[2], a[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
