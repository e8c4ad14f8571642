"""gguf_reader.py — a small, checking GGUF (v2/v3) reader for quill's tools and tests.

    r = GGUFReader("model.gguf")
    r.kv["general.architecture"]          # python value (str, int, float, bool, list)
    r.kv_types["general.architecture"]    # GGUF value type id (see gguf_writer.VT)
    t = r.tensors["token_embd.weight"]    # TensorInfo: name, shape (ne order), type, offset
    r.tensor_bytes(t)                     # the raw bytes (memoryview into an mmap)
    r.tensor_array(t)                     # numpy array for F32/F16 (shape reversed: rows first)
    r.tensor_float(t)                     # float32 copy, dequantizing BF16 and Q8_0/Q4_*/Q5_* too

Every length and offset is checked against the file size; a malformed file raises
GGUFError naming what is wrong. Run as a script it prints the metadata and tensor list:
    /usr/bin/python3 models/gguf_reader.py FILE.gguf
"""
import mmap
import struct
import sys

import numpy as np

from gguf_writer import GGML_TYPES, VT, dequantize, type_nbytes

_SCALAR = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h", VT.UINT32: "<I",
           VT.INT32: "<i", VT.FLOAT32: "<f", VT.BOOL: "<?", VT.UINT64: "<Q", VT.INT64: "<q",
           VT.FLOAT64: "<d"}
_NP = {VT.UINT8: "<u1", VT.INT8: "<i1", VT.UINT16: "<u2", VT.INT16: "<i2", VT.UINT32: "<u4",
       VT.INT32: "<i4", VT.FLOAT32: "<f4", VT.BOOL: "<u1", VT.UINT64: "<u8", VT.INT64: "<i8",
       VT.FLOAT64: "<f8"}


class GGUFError(Exception):
    pass


class TensorInfo:
    def __init__(self, name, shape, ggml_type, offset):
        self.name = name
        self.shape = shape          # ggml order: shape[0] is the contiguous dimension
        self.type = ggml_type
        self.offset = offset        # relative to the data section
        self.nbytes = type_nbytes(ggml_type, shape)

    @property
    def type_name(self):
        return GGML_TYPES[self.type][0] if self.type in GGML_TYPES else "type%d" % self.type

    def __repr__(self):
        return "%s %s %s" % (self.name, self.type_name, list(self.shape))


class GGUFReader:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.pos = 0
        self._parse()

    # -- primitive reads, all bounds-checked --------------------------------------
    def _take(self, n, what):
        if n < 0 or self.pos + n > len(self.buf):
            raise GGUFError("%s: %s runs past the end of the file (offset %d, need %d bytes)"
                            % (self.path, what, self.pos, n))
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def _u32(self, what):
        return struct.unpack("<I", self._take(4, what))[0]

    def _u64(self, what):
        return struct.unpack("<Q", self._take(8, what))[0]

    def _str(self, what):
        n = self._u64(what + " length")
        return self._take(n, what).decode("utf-8", errors="surrogateescape")

    def _value(self, vt, what):
        if vt == VT.STRING:
            return self._str(what)
        if vt in _SCALAR:
            fmt = _SCALAR[vt]
            return struct.unpack(fmt, self._take(struct.calcsize(fmt), what))[0]
        if vt == VT.ARRAY:
            et = self._u32(what + " element type")
            n = self._u64(what + " count")
            if et == VT.ARRAY:
                raise GGUFError("%s: %s: nested arrays are not supported" % (self.path, what))
            if et in _NP:
                size = np.dtype(_NP[et]).itemsize
                arr = np.frombuffer(self._take(n * size, what), dtype=_NP[et])
                return [bool(x) for x in arr] if et == VT.BOOL else arr.tolist()
            if et == VT.STRING:
                return [self._str(what + "[%d]" % i) for i in range(n)]
            raise GGUFError("%s: %s: unknown array element type %d" % (self.path, what, et))
        raise GGUFError("%s: %s: unknown value type %d" % (self.path, what, vt))

    # -- the file ---------------------------------------------------------------
    def _parse(self):
        magic = self._take(4, "magic")
        if magic != b"GGUF":
            raise GGUFError("%s: not a GGUF file (magic %r)" % (self.path, magic))
        self.version = self._u32("version")
        if self.version not in (2, 3):
            raise GGUFError("%s: unsupported GGUF version %d" % (self.path, self.version))
        n_tensors = self._u64("tensor count")
        n_kv = self._u64("kv count")
        self.kv, self.kv_types, self.kv_arr_types = {}, {}, {}
        for _ in range(n_kv):
            key = self._str("key")
            vt = self._u32(key + " type")
            if vt == VT.ARRAY:
                save = self.pos
                self.kv_arr_types[key] = self._u32(key + " element type")
                self.pos = save
            if key in self.kv:
                raise GGUFError("%s: duplicate key %s" % (self.path, key))
            self.kv[key] = self._value(vt, key)
            self.kv_types[key] = vt
        self.tensors = {}
        for _ in range(n_tensors):
            name = self._str("tensor name")
            n_dims = self._u32(name + " n_dims")
            if not 1 <= n_dims <= 4:
                raise GGUFError("%s: tensor %s: n_dims %d" % (self.path, name, n_dims))
            shape = tuple(self._u64(name + " dim") for _ in range(n_dims))
            ggml_type = self._u32(name + " type")
            offset = self._u64(name + " offset")
            if ggml_type not in GGML_TYPES:
                raise GGUFError("%s: tensor %s: unknown type %d" % (self.path, name, ggml_type))
            if shape[0] % GGML_TYPES[ggml_type][1]:
                raise GGUFError("%s: tensor %s: ne[0]=%d not a multiple of the %s block"
                                % (self.path, name, shape[0], GGML_TYPES[ggml_type][0]))
            if name in self.tensors:
                raise GGUFError("%s: duplicate tensor %s" % (self.path, name))
            self.tensors[name] = TensorInfo(name, shape, ggml_type, offset)
        self.alignment = self.kv.get("general.alignment", 32)
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise GGUFError("%s: general.alignment %d is not a power of two"
                            % (self.path, self.alignment))
        self.data_offset = (self.pos + self.alignment - 1) // self.alignment * self.alignment
        for t in self.tensors.values():
            if t.offset % self.alignment:
                raise GGUFError("%s: tensor %s: offset %d not aligned to %d"
                                % (self.path, t.name, t.offset, self.alignment))
            if self.data_offset + t.offset + t.nbytes > len(self.buf):
                raise GGUFError("%s: tensor %s: data [%d, +%d) runs past the end of the file"
                                % (self.path, t.name, t.offset, t.nbytes))
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in self.tensors.values())
        for a, b in zip(spans, spans[1:]):
            if b[0] < a[1]:
                raise GGUFError("%s: tensors %s and %s overlap" % (self.path, a[2], b[2]))

    def tensor_bytes(self, t):
        if isinstance(t, str):
            t = self.tensors[t]
        start = self.data_offset + t.offset
        return memoryview(self.buf)[start:start + t.nbytes]

    def tensor_array(self, t):
        """F32/F16 tensors as numpy arrays, rows first (numpy shape = reversed ne)."""
        if isinstance(t, str):
            t = self.tensors[t]
        dt = {0: "<f4", 1: "<f2"}.get(t.type)
        if dt is None:
            raise GGUFError("%s: tensor %s is %s, not F32/F16" % (self.path, t.name, t.type_name))
        return np.frombuffer(self.tensor_bytes(t), dtype=dt).reshape(tuple(reversed(t.shape)))


    def tensor_float(self, t):
        """Any tensor whose type gguf_writer.dequantize knows, as float32 rows first."""
        if isinstance(t, str):
            t = self.tensors[t]
        n = int(np.prod(t.shape, dtype=np.int64))
        return dequantize(self.tensor_bytes(t), t.type, n).reshape(tuple(reversed(t.shape)))


def _short(v):
    if isinstance(v, list):
        head = ", ".join(repr(x) for x in v[:6])
        return "[%s%s] (%d)" % (head, ", ..." if len(v) > 6 else "", len(v))
    return repr(v)


def main(argv):
    if len(argv) != 2:
        print("usage: gguf_reader.py FILE.gguf", file=sys.stderr)
        return 2
    r = GGUFReader(argv[1])
    print("GGUF v%d, %d kv, %d tensors, alignment %d, data at %d"
          % (r.version, len(r.kv), len(r.tensors), r.alignment, r.data_offset))
    for k, v in r.kv.items():
        print("  %-45s %s" % (k, _short(v)))
    for t in r.tensors.values():
        print("  %-30s %-5s %-22s offset %d" % (t.name, t.type_name, list(t.shape), t.offset))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv))
    except BrokenPipeError:  # `| head`: stop quietly
        sys.stderr.close()
        sys.exit(0)
    except GGUFError as e:
        print("gguf_reader: %s" % e, file=sys.stderr)
        sys.exit(1)
