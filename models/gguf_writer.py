"""gguf_writer.py — a minimal GGUF v3 writer and numpy block quantizers.

    w = GGUFWriter("out.gguf")
    w.add("general.architecture", "llama")             # type inferred (str → STRING)
    w.add("llama.block_count", 5)                      # int ≥ 0 → UINT32 (llama.cpp's habit)
    w.add("tokenizer.ggml.token_type", [1, 2], VT.INT32)   # arrays: element type given or inferred
    w.add_tensor("token_embd.weight", (dim, n_vocab), GGMLType.F32, data)
    w.write()

add_tensor takes the shape in GGUF order (ne[0] = contiguous, i.e. (cols, rows) for a
matrix) and its data as bytes, a numpy array (written as its raw bytes, which must be
exactly the tensor's size), or a zero-argument callable returning an iterable of such
chunks. Callables run one at a time inside write(), so a multi-GB file is streamed to
disk without holding more than one tensor's chunk in memory. The file is written to a
temporary name and renamed into place, so an interrupted run never leaves a truncated
GGUF behind.

File layout (see gguf.h): header, key/values, tensor infos, padding to the alignment,
then each tensor's data at an offset that is a multiple of the alignment (32 here,
recorded as general.alignment).

The quantizers follow ggml's reference (`*_ref`) routines — the ones llama-quantize uses
without an importance matrix — so their output is byte-identical to llama.cpp's.
"""
import os
import struct

import numpy as np


class VT:
    """GGUF metadata value types."""
    UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL, STRING, ARRAY, UINT64, INT64, \
        FLOAT64 = range(13)


class GGMLType:
    F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1 = 0, 1, 2, 3, 6, 7, 8, 9
    Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K = 10, 11, 12, 13, 14, 15
    IQ4_NL, IQ4_XS, BF16, MXFP4 = 20, 23, 30, 39


# id → (name, elements per block, bytes per block); the storage types quill knows.
GGML_TYPES = {
    0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20),
    6: ("Q5_0", 32, 22), 7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 36),
    10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110), 12: ("Q4_K", 256, 144),
    13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
    16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98),
    19: ("IQ1_S", 256, 50), 20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110),
    22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136), 24: ("I8", 1, 1), 25: ("I16", 1, 2),
    26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8), 29: ("IQ1_M", 256, 56),
    30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66), 39: ("MXFP4", 32, 17),
}
TYPE_BY_NAME = {v[0]: k for k, v in GGML_TYPES.items()}

# general.file_type values (llama.cpp's LLAMA_FTYPE_*).
FILE_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9,
             "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12, "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15,
             "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "IQ4_NL": 25, "IQ4_XS": 30, "BF16": 32,
             "MXFP4_MOE": 38}

# llama.cpp token types (tokenizer.ggml.token_type).
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = \
    1, 2, 3, 4, 5, 6

_SCALAR_FMT = {VT.UINT8: "<B", VT.INT8: "<b", VT.UINT16: "<H", VT.INT16: "<h",
               VT.UINT32: "<I", VT.INT32: "<i", VT.FLOAT32: "<f", VT.BOOL: "<?",
               VT.UINT64: "<Q", VT.INT64: "<q", VT.FLOAT64: "<d"}
_ARRAY_NP = {VT.UINT8: "<u1", VT.INT8: "<i1", VT.UINT16: "<u2", VT.INT16: "<i2",
             VT.UINT32: "<u4", VT.INT32: "<i4", VT.FLOAT32: "<f4", VT.BOOL: "<u1",
             VT.UINT64: "<u8", VT.INT64: "<i8", VT.FLOAT64: "<f8"}


def type_nbytes(ggml_type, shape):
    """Bytes of a tensor of GGUF shape (ne order); ne[0] must fill whole blocks."""
    _, block, block_bytes = GGML_TYPES[ggml_type]
    n = 1
    for s in shape:
        n *= int(s)
    if shape[0] % block:
        raise ValueError("ne[0]=%d is not a multiple of the %s block (%d)"
                         % (shape[0], GGML_TYPES[ggml_type][0], block))
    return n // block * block_bytes


def _gguf_str(s):
    b = s.encode("utf-8", errors="surrogateescape") if isinstance(s, str) else bytes(s)
    return struct.pack("<Q", len(b)) + b


def _infer_vtype(v):
    if isinstance(v, (bool, np.bool_)):
        return VT.BOOL
    if isinstance(v, (int, np.integer)):
        if 0 <= v < 2**32:
            return VT.UINT32
        return VT.INT32 if -2**31 <= v < 0 else VT.INT64 if v < 0 else VT.UINT64
    if isinstance(v, (float, np.floating)):
        return VT.FLOAT32
    if isinstance(v, (str, bytes)):
        return VT.STRING
    if isinstance(v, (list, tuple, np.ndarray)):
        return VT.ARRAY
    raise TypeError("cannot infer a GGUF type for %r" % (v,))


def _encode_value(v, vt, elem_type=None):
    if vt == VT.STRING:
        return _gguf_str(v)
    if vt in _SCALAR_FMT:
        return struct.pack(_SCALAR_FMT[vt], v)
    if vt != VT.ARRAY:
        raise ValueError("unknown GGUF value type %d" % vt)
    if elem_type is None:
        if len(v) == 0:
            raise ValueError("the element type of an empty array must be given")
        first = v[0]
        elem_type = (VT.STRING if isinstance(first, (str, bytes)) else
                     VT.FLOAT32 if isinstance(first, (float, np.floating)) else
                     VT.BOOL if isinstance(first, (bool, np.bool_)) else VT.INT32)
    head = struct.pack("<IQ", elem_type, len(v))
    if elem_type == VT.STRING:
        return head + b"".join(_gguf_str(s) for s in v)
    if elem_type in _ARRAY_NP:
        return head + np.asarray(v).astype(_ARRAY_NP[elem_type]).tobytes()
    raise ValueError("unsupported array element type %d" % elem_type)


class GGUFWriter:
    def __init__(self, path, alignment=32):
        if alignment <= 0 or alignment & (alignment - 1):
            raise ValueError("alignment must be a power of two")
        self.path = path
        self.alignment = alignment
        self.kv = {}        # key → encoded bytes (type + value), insertion-ordered
        self.tensors = []   # [name, shape, type, nbytes, data]
        self.add("general.alignment", alignment, VT.UINT32)

    def add(self, key, value, vtype=None, elem_type=None):
        """Adds (or replaces) a key. vtype/elem_type default to inferred types."""
        vt = _infer_vtype(value) if vtype is None else vtype
        self.kv[key] = struct.pack("<I", vt) + _encode_value(value, vt, elem_type)

    def add_raw(self, key, vtype, value_bytes):
        """Adds a key whose value is already GGUF-encoded (copying from another file)."""
        self.kv[key] = struct.pack("<I", vtype) + value_bytes

    def add_tensor(self, name, shape, ggml_type, data):
        if any(t[0] == name for t in self.tensors):
            raise ValueError("duplicate tensor %s" % name)
        shape = tuple(int(s) for s in shape)
        if not 1 <= len(shape) <= 4:
            raise ValueError("tensor %s: %d dimensions" % (name, len(shape)))
        self.tensors.append([name, shape, ggml_type, type_nbytes(ggml_type, shape), data])

    def _pad(self, n):
        return (-n) % self.alignment

    def _header(self):
        out = [b"GGUF", struct.pack("<IQQ", 3, len(self.tensors), len(self.kv))]
        for k, v in self.kv.items():
            out += [_gguf_str(k), v]
        offset = 0
        for name, shape, ggml_type, nbytes, _ in self.tensors:
            out += [_gguf_str(name), struct.pack("<I", len(shape)),
                    struct.pack("<%dQ" % len(shape), *shape), struct.pack("<IQ", ggml_type, offset)]
            offset += nbytes + self._pad(nbytes)
        head = b"".join(out)
        return head + b"\0" * self._pad(len(head))

    def write(self):
        tmp = "%s.tmp%d" % (self.path, os.getpid())
        try:
            with open(tmp, "wb") as f:
                f.write(self._header())
                for name, shape, ggml_type, nbytes, data in self.tensors:
                    written = self._write_data(f, data)
                    if written != nbytes:
                        raise ValueError("tensor %s: %d bytes of data, expected %d (%s %s)"
                                         % (name, written, nbytes, GGML_TYPES[ggml_type][0],
                                            list(shape)))
                    f.write(b"\0" * self._pad(nbytes))
            os.replace(tmp, self.path)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise

    @staticmethod
    def _write_data(f, data):
        chunks = data() if callable(data) else [data]
        written = 0
        for c in chunks:
            if isinstance(c, np.ndarray):
                c = np.ascontiguousarray(c)
                f.write(memoryview(c).cast("B"))
                written += c.nbytes
            else:
                f.write(c)
                written += len(c)
        return written


# --- quantizers: float32 rows → ggml blocks -----------------------------------------
# Each takes an array whose last dimension is a multiple of the block size and returns
# a uint8 array of the encoded blocks (in row order).

def _blocks(x, qk):
    x = np.asarray(x, dtype=np.float32)
    if x.shape[-1] % qk:
        raise ValueError("row length %d is not a multiple of %d" % (x.shape[-1], qk))
    return x.reshape(-1, qk)


def _round_away(v):
    # C's roundf: halves away from zero (numpy's round goes to even).
    return np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))


def quantize_f16(x):
    return np.asarray(x, dtype=np.float32).astype("<f2").view(np.uint8).ravel()


def quantize_bf16(x):
    u = np.asarray(x, dtype=np.float32).view(np.uint32).ravel().astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32).ravel())
    r[nan] = ((u[nan] >> 16) | 64).astype(np.uint16)  # keep NaNs quiet NaNs, like ggml
    return r.view(np.uint8)


def quantize_q8_0(x):
    """Q8_0: per 32 values, fp16 d = amax/127 and int8 q = round(x/d)."""
    b = _blocks(x, 32)
    d = np.abs(b).max(axis=1) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    q = _round_away(b * inv[:, None]).astype(np.int8)
    out = np.empty((b.shape[0], 34), dtype=np.uint8)
    out[:, 0:2] = _fp16_bytes(d)
    out[:, 2:] = q.view(np.uint8)
    return out.ravel()


def quantize_q4_0(x):
    """Q4_0: per 32 values, d = (signed value of largest magnitude) / -8, q = x/d + 8 in
    [0, 15]; byte j holds q[j] (low nibble) and q[j+16] (high nibble)."""
    b = _blocks(x, 32)
    d, inv = _signed_max_scale(b, -8)
    q = np.minimum(15, np.trunc(b * inv[:, None] + np.float32(8.5))).astype(np.uint8)
    out = np.empty((b.shape[0], 18), dtype=np.uint8)
    out[:, 0:2] = _fp16_bytes(d)
    out[:, 2:] = _pack_nibbles(q)
    return out.ravel()


def _signed_max_scale(b, div):
    """Q4_0/Q5_0's block scale: d = (signed value of largest magnitude, the first such,
    as ggml's strict '<' scan) / div and id = 1/d (0 when d is 0), in float32."""
    idx = np.abs(b).argmax(axis=1)
    d = b[np.arange(b.shape[0]), idx] / np.float32(div)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    return d, inv


def _fp16_bytes(v):
    """Per-block float32 values as little-endian fp16, two bytes per block."""
    return v.astype("<f2").view(np.uint8).reshape(-1, 2)


def _min_max_scale(b, levels):
    """Q4_1/Q5_1's block range: min, d = (max - min)/levels and id = 1/d (0 when d is 0),
    all float32 like ggml (id comes from the unrounded d, not the stored fp16 one)."""
    mn, mx = b.min(axis=1), b.max(axis=1)
    d = (mx - mn) / np.float32(levels)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    return mn, d, inv


def _pack_nibbles(q):
    """Byte j of the 16: element j in the low nibble, element j+16 in the high one."""
    return (q[:, :16] & 15) | ((q[:, 16:] & 15) << 4)


def _pack_high_bits(q):
    """Q5's qh, a little-endian uint32 whose bit j is bit 4 of element j (j = 0..31)."""
    bits = ((q >> 4) & 1).astype(np.uint32) << np.arange(32, dtype=np.uint32)
    return bits.sum(axis=1, dtype=np.uint32).astype("<u4").view(np.uint8).reshape(-1, 4)


def quantize_q4_1(x):
    """Q4_1: per 32 values, fp16 d = (max - min)/15 and fp16 m = min, q = trunc((x - min)/d
    + 0.5) capped at 15; nibbles packed as in Q4_0."""
    b = _blocks(x, 32)
    mn, d, inv = _min_max_scale(b, 15)
    q = np.minimum(15, np.trunc((b - mn[:, None]) * inv[:, None] + np.float32(0.5)))
    q = q.astype(np.uint8)
    out = np.empty((b.shape[0], 20), dtype=np.uint8)
    out[:, 0:2] = _fp16_bytes(d)
    out[:, 2:4] = _fp16_bytes(mn)
    out[:, 4:] = _pack_nibbles(q)
    return out.ravel()


def quantize_q5_0(x):
    """Q5_0: per 32 values, d = (signed value of largest magnitude) / -16, q = x/d + 16 in
    [0, 31]; the low 4 bits packed as in Q4_0, bit 4 of element j in bit j of qh."""
    b = _blocks(x, 32)
    d, inv = _signed_max_scale(b, -16)
    q = np.minimum(31, np.trunc(b * inv[:, None] + np.float32(16.5))).astype(np.uint8)
    out = np.empty((b.shape[0], 22), dtype=np.uint8)
    out[:, 0:2] = _fp16_bytes(d)
    out[:, 2:6] = _pack_high_bits(q)
    out[:, 6:] = _pack_nibbles(q)
    return out.ravel()


def quantize_q5_1(x):
    """Q5_1: per 32 values, fp16 d = (max - min)/31 and fp16 m = min, q = trunc((x - min)/d
    + 0.5) (ggml does not cap it: it cannot pass 31); bits placed as in Q5_0."""
    b = _blocks(x, 32)
    mn, d, inv = _min_max_scale(b, 31)
    q = np.trunc((b - mn[:, None]) * inv[:, None] + np.float32(0.5)).astype(np.uint8)
    out = np.empty((b.shape[0], 24), dtype=np.uint8)
    out[:, 0:2] = _fp16_bytes(d)
    out[:, 2:4] = _fp16_bytes(mn)
    out[:, 4:8] = _pack_high_bits(q)
    out[:, 8:] = _pack_nibbles(q)
    return out.ravel()


QUANTIZERS = {GGMLType.F32: lambda x: np.asarray(x, dtype="<f4").view(np.uint8).ravel(),
              GGMLType.F16: quantize_f16, GGMLType.BF16: quantize_bf16,
              GGMLType.Q8_0: quantize_q8_0, GGMLType.Q4_0: quantize_q4_0,
              GGMLType.Q4_1: quantize_q4_1, GGMLType.Q5_0: quantize_q5_0,
              GGMLType.Q5_1: quantize_q5_1}


def quantize(x, ggml_type):
    if ggml_type not in QUANTIZERS:
        raise ValueError("no quantizer for %s" % GGML_TYPES[ggml_type][0])
    return QUANTIZERS[ggml_type](x)


def dequantize(raw, ggml_type, n):
    """The first n values of raw blocks of ggml_type as float32 (F32/F16/BF16/Q8_0/Q4_0/
    Q4_1/Q5_0/Q5_1): the inverse of the quantizers above, for tests and references.
    Computed in float32 like ggml's dequantize_row_* (d*q, then + m)."""
    b = np.frombuffer(raw, dtype=np.uint8)
    if ggml_type == GGMLType.F32:
        return b.view("<f4")[:n].copy()
    if ggml_type == GGMLType.F16:
        return b.view("<f2")[:n].astype(np.float32)
    if ggml_type == GGMLType.BF16:
        return (b.view("<u2")[:n].astype(np.uint32) << 16).view(np.float32)
    if ggml_type == GGMLType.Q8_0:
        blk = b.reshape(-1, 34)
        d = blk[:, 0:2].copy().view("<f2").astype(np.float32)
        return (blk[:, 2:].view(np.int8).astype(np.float32) * d).ravel()[:n]
    if ggml_type == GGMLType.Q4_0:
        blk = b.reshape(-1, 18)
        d = blk[:, 0:2].copy().view("<f2").astype(np.float32)
        q = np.concatenate([blk[:, 2:] & 15, blk[:, 2:] >> 4], axis=1).astype(np.float32) - 8
        return (q * d).ravel()[:n]
    layout = {GGMLType.Q4_1: (20, True, False), GGMLType.Q5_0: (22, False, True),
              GGMLType.Q5_1: (24, True, True)}
    if ggml_type in layout:
        size, has_m, has_qh = layout[ggml_type]
        blk = b.reshape(-1, size)
        d = blk[:, 0:2].copy().view("<f2").astype(np.float32)
        m = blk[:, 2:4].copy().view("<f2").astype(np.float32) if has_m else np.float32(0)
        p = 4 if has_m else 2
        q = np.zeros((blk.shape[0], 32), dtype=np.int32)
        if has_qh:
            qh = blk[:, p:p + 4].copy().view("<u4").astype(np.int64)
            q += (((qh >> np.arange(32)) & 1) << 4).astype(np.int32)
            p += 4
        qs = blk[:, p:p + 16].astype(np.int32)
        q += np.concatenate([qs & 15, qs >> 4], axis=1)
        if ggml_type == GGMLType.Q5_0:
            q -= 16
        return (q.astype(np.float32) * d + m).ravel()[:n]
    raise ValueError("no dequantizer for %s" % GGML_TYPES[ggml_type][0])
