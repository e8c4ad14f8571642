#!/usr/bin/python3
"""ref_quant.py — independent float64 references for tests/test_quant.c.

Written from the ggml block-layout specification (ggml-common.h; MXFP4 from
the OCP Microscaling spec), not from quant.c: a minimal GGUF reader, numpy
dequantizers for every type quill computes with, and numpy's float16 rounding.

  ref_quant.py fixtures OUT SHARED   dequantization fixtures (see write_fixture)
  ref_quant.py f16cases OUT          float32 -> float16 rounding cases

Before writing fixtures it checks itself: each llama.cpp-quantized tensor,
dequantized here, must be close to the same tensor in a higher-precision file
of the same model (stories260K F32, synth-llama Q8_0). A layout misread here
would fail that check rather than agree with a matching misread in C. MXFP4
(gpt-oss experts) has no higher-precision copy: its check is the encoder's
mark instead, every block's largest value 4 or 6 times its scale (llama.cpp
picks the scale 2^(floor(log2 amax) - 2), and E2M1 rounds amax/scale in
[4, 8) to 4 or 6).
Exits non-zero with a message on any failure, including a missing numpy.
"""
import os
import struct
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("ref_quant.py: numpy is missing (install python3-numpy for /usr/bin/python3)")

F32, F16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 3, 6, 7, 8, 12, 13, 14, 30
Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4 = 10, 11, 20, 23, 39
# type -> (elements per block, bytes per block)
BLOCK = {F32: (1, 4), F16: (1, 2), BF16: (1, 2), Q4_0: (32, 18), Q4_1: (32, 20), Q5_0: (32, 22),
         Q5_1: (32, 24), Q8_0: (32, 34), Q4_K: (256, 144), Q5_K: (256, 176), Q6_K: (256, 210),
         Q2_K: (256, 84), Q3_K: (256, 110), IQ4_NL: (32, 18), IQ4_XS: (256, 136), MXFP4: (32, 17)}
# IQ4_NL / IQ4_XS: the 16 values a 4-bit code stands for (ggml's kvalues_iq4nl)
IQ4NL = np.array([-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float64)
# OCP MX E2M1: bit 3 the sign, bits 0-2 the magnitude
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6], dtype=np.float64)
E2M1 = np.concatenate([E2M1, -E2M1])


# ---------------------------------------------------------------- GGUF reading
def read_gguf(path):
    """Returns {name: (type, ne tuple, bytes)} for every tensor of a GGUF file."""
    buf = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, buf, pos)
        pos += struct.calcsize("<" + fmt)
        return vals

    def string():
        nonlocal pos
        (n,) = take("Q")
        s = buf[pos:pos + n].decode("utf-8", "replace")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def value(t):
        if t in scalar:
            return take(scalar[t])[0]
        if t == 8:
            return string()
        if t == 9:
            et, cnt = take("IQ")
            return [value(et) for _ in range(cnt)]
        raise ValueError(f"{path}: unknown GGUF value type {t}")

    if buf[:4] != b"GGUF":
        raise ValueError(f"{path}: not a GGUF file")
    pos = 4
    _version, n_tensors, n_kv = take("IQQ")
    align = 32
    for _ in range(n_kv):
        key = string()
        (t,) = take("I")
        v = value(t)
        if key == "general.alignment":
            align = v
    infos = []
    for _ in range(n_tensors):
        name = string()
        (nd,) = take("I")
        ne = take("Q" * nd)
        typ, off = take("IQ")
        infos.append((name, ne, typ, off))
    base = (pos + align - 1) // align * align
    out = {}
    for name, ne, typ, off in infos:
        nel = int(np.prod(ne))
        per, bb = BLOCK.get(typ, (None, None))
        if per is None:
            continue
        size = nel // per * bb
        out[name] = (typ, ne, buf[base + off:base + off + size])
    return out


# ------------------------------------------------------------- dequantization
def half(a):
    return np.ascontiguousarray(a).view(np.float16).astype(np.float64)


def blocks_of(raw, bb):
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, bb)


def deq_32(raw, typ):
    """Q4_0/Q4_1/Q5_0/Q5_1/Q8_0: 32 weights per block."""
    b = blocks_of(raw, BLOCK[typ][1])
    d = half(b[:, 0:2])[:, 0:1]
    if typ == Q8_0:
        return (b[:, 2:34].view(np.int8).astype(np.float64) * d).ravel()
    has_m = typ in (Q4_1, Q5_1)
    m = half(b[:, 2:4])[:, 0:1] if has_m else 0.0
    p = 4 if has_m else 2
    if typ in (Q5_0, Q5_1):
        qh = b[:, p:p + 4].copy().view("<u4").astype(np.int64)      # [nb, 1]
        bits = (qh >> np.arange(32)) & 1                             # [nb, 32]: element e's 5th bit
        p += 4
    else:
        bits = np.zeros((b.shape[0], 32), dtype=np.int64)
    qs = b[:, p:p + 16].astype(np.int64)
    q = np.concatenate([qs & 15, qs >> 4], axis=1) + 16 * bits       # elements 0..15 low, 16..31 high
    off = {Q4_0: 8, Q5_0: 16}.get(typ, 0)
    return ((q - off) * d + m).ravel()


def k_scale_min(sc12):
    """[nb, 12] packed bytes -> (scales [nb, 8], mins [nb, 8]), 6 bits each."""
    s = sc12.astype(np.int64)
    scale = np.zeros((s.shape[0], 8), dtype=np.int64)
    mn = np.zeros_like(scale)
    for j in range(8):
        if j < 4:
            scale[:, j] = s[:, j] & 63
            mn[:, j] = s[:, j + 4] & 63
        else:
            scale[:, j] = (s[:, j + 4] & 0xF) | ((s[:, j - 4] >> 6) << 4)
            mn[:, j] = (s[:, j + 4] >> 4) | ((s[:, j] >> 6) << 4)
    return scale, mn


def deq_q4_K_q5_K(raw, typ):
    b = blocks_of(raw, BLOCK[typ][1])
    d = half(b[:, 0:2])[:, 0]
    dmin = half(b[:, 2:4])[:, 0]
    scale, mn = k_scale_min(b[:, 4:16])
    if typ == Q5_K:
        qh = b[:, 16:48].astype(np.int64)
        qs = b[:, 48:176].astype(np.int64)
    else:
        qh = None
        qs = b[:, 16:144].astype(np.int64)
    out = np.zeros((b.shape[0], 256))
    # 64 weights per 32-byte chunk: low nibbles first, then high nibbles
    for chunk in range(4):
        q32 = qs[:, 32 * chunk:32 * chunk + 32]
        for half_i, q in enumerate((q32 & 15, q32 >> 4)):
            sb = 2 * chunk + half_i
            if qh is not None:
                q = q + 16 * ((qh >> sb) & 1)
            out[:, 32 * sb:32 * sb + 32] = (d * scale[:, sb])[:, None] * q - (dmin * mn[:, sb])[:, None]
    return out.ravel()


def deq_q6_K(raw):
    b = blocks_of(raw, 210)
    ql = b[:, 0:128].astype(np.int64)
    qh = b[:, 128:192].astype(np.int64)
    sc = b[:, 192:208].view(np.int8).astype(np.float64)
    d = half(b[:, 208:210])[:, 0]
    out = np.zeros((b.shape[0], 256))
    for h in range(2):                     # two halves of 128
        L, H = ql[:, 64 * h:64 * h + 64], qh[:, 32 * h:32 * h + 32]
        quarters = [(L[:, 0:32] & 15) | (((H >> 0) & 3) << 4),
                    (L[:, 32:64] & 15) | (((H >> 2) & 3) << 4),
                    (L[:, 0:32] >> 4) | (((H >> 4) & 3) << 4),
                    (L[:, 32:64] >> 4) | (((H >> 6) & 3) << 4)]
        for k, q in enumerate(quarters):
            e0 = 128 * h + 32 * k          # 32 elements, two scale groups of 16
            for g in range(2):
                s = sc[:, (e0 + 16 * g) // 16]
                out[:, e0 + 16 * g:e0 + 16 * g + 16] = (d * s)[:, None] * (q[:, 16 * g:16 * g + 16] - 32)
    return out.ravel()


def nibbles(qs):
    """[nb, 16] bytes -> [nb, 32] codes: elements 0..15 the low nibbles, 16..31 the high."""
    q = qs.astype(np.int64)
    return np.concatenate([q & 15, q >> 4], axis=1)


def deq_iq4_nl(raw):
    b = blocks_of(raw, 18)
    return (IQ4NL[nibbles(b[:, 2:18])] * half(b[:, 0:2])).ravel()


def deq_mxfp4(raw):
    """OCP MX: E2M1 values times the E8M0 scale 2^(e - 127)."""
    b = blocks_of(raw, 17)
    scale = np.ldexp(1.0, b[:, 0:1].astype(np.int64) - 127)
    return (E2M1[nibbles(b[:, 1:17])] * scale).ravel()


def deq_iq4_xs(raw):
    b = blocks_of(raw, 136)
    d = half(b[:, 0:2])                                      # [nb, 1]
    sh = b[:, 2:4].copy().view("<u2").astype(np.int64)       # [nb, 1]
    sl = b[:, 4:8].astype(np.int64)
    out = np.zeros((b.shape[0], 256))
    for s in range(8):
        ls = ((sl[:, s // 2] >> 4 * (s % 2)) & 15) | (((sh[:, 0] >> 2 * s) & 3) << 4)
        q = IQ4NL[nibbles(b[:, 8 + 16 * s:8 + 16 * s + 16])]
        out[:, 32 * s:32 * s + 32] = (d[:, 0] * (ls - 32))[:, None] * q
    return out.ravel()


def two_bit_quants(qs):
    """[nb, 64] Q2_K/Q3_K qs -> [nb, 256]: element 128h + 32j + l is bits 2j of byte 32h + l."""
    q = qs.astype(np.int64)
    out = np.zeros((q.shape[0], 256), dtype=np.int64)
    for h in range(2):
        for j in range(4):
            out[:, 128 * h + 32 * j:128 * h + 32 * j + 32] = (q[:, 32 * h:32 * h + 32] >> 2 * j) & 3
    return out


def deq_q2_K(raw):
    b = blocks_of(raw, 84)
    sc = np.repeat(b[:, 0:16].astype(np.int64), 16, axis=1)  # group e // 16's byte, per element
    d, dmin = half(b[:, 80:82]), half(b[:, 82:84])
    return (d * (sc & 15) * two_bit_quants(b[:, 16:80]) - dmin * (sc >> 4)).ravel()


def deq_q3_K(raw):
    b = blocks_of(raw, 110)
    hm = b[:, 0:32].astype(np.int64)
    high = np.concatenate([(hm >> k) & 1 for k in range(8)], axis=1)  # element 32k + l: bit k of hmask[l]
    q = two_bit_quants(b[:, 32:96]) + 4 * high - 4
    s = b[:, 96:108].astype(np.int64)
    sc = np.zeros((b.shape[0], 16), dtype=np.int64)
    for g in range(16):  # low 4 bits: nibble g // 8 of byte g % 8; high 2: bits 2 (g // 4) of byte 8 + g % 4
        sc[:, g] = ((s[:, g % 8] >> 4 * (g // 8)) & 15) | (((s[:, 8 + g % 4] >> 2 * (g // 4)) & 3) << 4)
    d = half(b[:, 108:110])
    return (d * np.repeat(sc - 32, 16, axis=1) * q).ravel()


def dequantize(raw, typ):
    if typ == F32:
        return np.frombuffer(raw, dtype="<f4").astype(np.float64)
    if typ == F16:
        return np.frombuffer(raw, dtype="<f2").astype(np.float64)
    if typ == BF16:
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return u.view(np.float32).astype(np.float64)
    if typ in (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0):
        return deq_32(raw, typ)
    if typ in (Q4_K, Q5_K):
        return deq_q4_K_q5_K(raw, typ)
    if typ == Q6_K:
        return deq_q6_K(raw)
    table = {Q2_K: deq_q2_K, Q3_K: deq_q3_K, IQ4_NL: deq_iq4_nl, IQ4_XS: deq_iq4_xs, MXFP4: deq_mxfp4}
    if typ in table:
        return table[typ](raw)
    raise ValueError(f"type {typ} not handled")


# ------------------------------------------------------------------ fixtures
# (file, tensor, higher-precision file for the self-check, max relative RMS error)
REAL = [
    ("stories260K.gguf", "blk.0.attn_q.weight", None, 0),
    ("stories260K-F16.gguf", "blk.1.ffn_up.weight", "stories260K.gguf", 1e-3),
    ("stories260K-BF16.gguf", "blk.1.ffn_up.weight", "stories260K.gguf", 5e-3),
    ("stories260K-Q8_0.gguf", "blk.2.attn_k.weight", "stories260K.gguf", 1e-2),
    ("stories260K-Q4_0.gguf", "token_embd.weight", "stories260K.gguf", 0.15),
    ("stories260K-Q4_K_M.gguf", "blk.0.attn_q.weight", "stories260K.gguf", 0.08),   # Q5_0
    ("synth-llama-Q8_0.gguf", "blk.0.attn_q.weight", None, 0),
    ("synth-llama-Q4_0.gguf", "blk.0.ffn_down.weight", "synth-llama-Q8_0.gguf", 0.15),
    ("synth-llama-Q4_K_M.gguf", "blk.0.attn_q.weight", "synth-llama-Q8_0.gguf", 0.12),  # Q4_K
    ("synth-llama-Q4_K_M.gguf", "output.weight", "synth-llama-Q8_0.gguf", 0.04),        # Q6_K
    ("synth-llama-Q5_K_M.gguf", "blk.1.ffn_down.weight", "synth-llama-Q8_0.gguf", 0.06),  # Q5_K
    ("synth-llama-Q6_K.gguf", "blk.2.ffn_gate.weight", "synth-llama-Q8_0.gguf", 0.04),
    ("synth-llama-IQ4_NL.gguf", "blk.0.ffn_up.weight", "synth-llama-Q8_0.gguf", 0.10),
    ("synth-llama-IQ4_XS.gguf", "blk.1.attn_q.weight", "synth-llama-Q8_0.gguf", 0.10),
    ("synth-llama-Q2_K.gguf", "blk.0.ffn_gate.weight", "synth-llama-Q8_0.gguf", 0.36),   # Q2_K
    ("synth-llama-Q2_K.gguf", "blk.2.ffn_down.weight", "synth-llama-Q8_0.gguf", 0.19),   # Q3_K
    ("synth-llama-Q3_K_M.gguf", "token_embd.weight", "synth-llama-Q8_0.gguf", 0.19),     # Q3_K
    ("synth-gptoss-MXFP4.gguf", "blk.1.ffn_gate_exps.weight", "mxfp4", 0),
    ("synth-gptoss-MXFP4.gguf", "blk.3.ffn_down_exps.weight", "mxfp4", 0),
]


def mxfp4_mark(raw):
    """llama.cpp's MXFP4 encoder: each nonzero block's largest |value| is 4 or 6 scales."""
    b = blocks_of(raw, 17)
    top = np.abs(E2M1[nibbles(b[:, 1:17])]).max(axis=1)
    bad = np.count_nonzero((top != 4) & (top != 6) & (top != 0))
    return "%d of %d blocks' largest value is not 4 or 6 times the scale" % (bad, len(top)) if bad else None


def rows_of(ne, typ, raw, max_rows):
    """First max_rows rows of a 2-D tensor: (n per row, rows, bytes)."""
    n = ne[0]
    per, bb = BLOCK[typ]
    row_bytes = n // per * bb
    rows = min(max_rows, len(raw) // row_bytes)
    return n, rows, raw[:rows * row_bytes]


def write_fixture(out, index, name, typ, n, rows, raw):
    """NAME.raw: the rows' bytes; NAME.ref: float64 dequantized values; index line."""
    ref = dequantize(raw, typ)
    assert ref.size == n * rows, (name, ref.size, n, rows)
    open(os.path.join(out, name + ".raw"), "wb").write(raw)
    open(os.path.join(out, name + ".ref"), "wb").write(ref.astype("<f8").tobytes())
    index.write(f"{name} {typ} {n} {rows}\n")


def random_blocks(rng, typ, nb):
    """Random valid blocks: random bits with finite, moderate fp16 scales."""
    per, bb = BLOCK[typ]
    b = rng.integers(0, 256, size=(nb, bb), dtype=np.uint8)

    def put_half(col, lo, hi):
        v = (rng.uniform(lo, hi, nb) * rng.choice([-1, 1], nb)).astype(np.float16)
        b[:, col:col + 2] = v.view(np.uint8).reshape(nb, 2)

    if typ == Q6_K:
        put_half(208, 1e-3, 1e-1)
    elif typ == Q3_K:
        put_half(108, 1e-3, 1e-1)
    elif typ == Q2_K:
        put_half(80, 1e-3, 1e-1)
        put_half(82, 1e-3, 1e-1)
    elif typ == MXFP4:  # every exponent but those whose values overflow float32, 0 and 1 (subnormal) included
        b[:, 0] = np.concatenate([[0, 1, 2, 127, 250], rng.integers(0, 251, nb - 5)])
    else:
        put_half(0, 1e-3, 1e-1)
        if typ in (Q4_1, Q5_1, Q4_K, Q5_K):
            put_half(2, 1e-3, 1e-1)
    return b.tobytes()


def fixtures(out, shared):
    gg = os.path.join(shared, "models", "gguf")
    files = {}

    def tensor(fname, tname):
        if fname not in files:
            files[fname] = read_gguf(os.path.join(gg, fname))
        if tname not in files[fname]:
            sys.exit(f"ref_quant.py: {fname} has no tensor {tname}")
        return files[fname][tname]

    failures = []
    with open(os.path.join(out, "index.txt"), "w") as index:
        for i, (fname, tname, better, tol) in enumerate(REAL):
            typ, ne, raw = tensor(fname, tname)
            if better == "mxfp4":
                why = mxfp4_mark(raw)
                if why:
                    failures.append(f"{fname}:{tname}: {why}")
            elif better:  # self-check against a higher-precision copy of the same tensor
                btyp, bne, braw = tensor(better, tname)
                a, b = dequantize(raw, typ), dequantize(braw, btyp)
                err = np.sqrt(np.mean((a - b) ** 2) / np.mean(b ** 2))
                if not err < tol:
                    failures.append(f"{fname}:{tname} (type {typ}) vs {better}: relative RMS {err:.4f} > {tol}")
            n, rows, part = rows_of(ne, typ, raw, 48)
            write_fixture(out, index, f"real{i}_t{typ}", typ, n, rows, part)
        rng = np.random.default_rng(1234)
        for typ in (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4):
            per = BLOCK[typ][0]
            nb = 64 if per == 32 else 8
            write_fixture(out, index, f"rand_t{typ}", typ, per * nb, 1, random_blocks(rng, typ, nb))
    if failures:
        sys.exit("ref_quant.py: reference self-check failed:\n  " + "\n  ".join(failures))


def f16cases(out):
    """float32 bits and numpy's float16 (round to nearest even) of tricky values."""
    rng = np.random.default_rng(7)
    vals = [0.0, -0.0, 1.0, -2.5, 65504.0, 65519.99, 65520.0, 1e6, -1e6, np.inf, -np.inf,
            2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * 1.0000001, 3 * 2.0 ** -26, 2.0 ** -26,
            1e-10, 6.1e-5, 5.96e-8, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11, 1 + 2.0 ** -11 + 2.0 ** -20,
            2048 + 1, 2048 + 3, 4096 + 2, 4096 + 6, 0.1, 1 / 3]
    f = np.array(vals, dtype=np.float32)
    # exact ties between adjacent halves, and the halves' neighbours in float32
    h = rng.integers(0, 0x7bff, 4000, dtype=np.uint16)
    lo = h.view(np.float16).astype(np.float32)
    hi = (h + 1).astype(np.uint16).view(np.float16).astype(np.float32)
    mid = ((lo.astype(np.float64) + hi.astype(np.float64)) / 2).astype(np.float32)
    rand = (rng.standard_normal(4000) * 2.0 ** rng.integers(-30, 17, 4000)).astype(np.float32)
    f = np.concatenate([f, mid, -mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(0)),
                        rand]).astype(np.float32)
    with np.errstate(over="ignore"):
        h16 = f.astype(np.float16)
    pairs = np.stack([f.view(np.uint32), h16.view(np.uint16).astype(np.uint32)], axis=1)
    pairs.astype("<u4").tofile(out)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "fixtures":
        fixtures(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "f16cases":
        f16cases(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
