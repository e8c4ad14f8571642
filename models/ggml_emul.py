"""ggml_emul.py — a numpy forward pass that rounds the way llama.cpp's CPU backend does.

npllama.py computes in float64 and answers "is the model right?". This file answers "what
would llama.cpp print?": every step ggml rounds is rounded the same way, bit for bit where
it matters, each behind a switch, so a greedy divergence can be pinned on one rounding.
Written from ggml's CPU sources (ops.cpp, vec.h/vec.cpp, simd-mappings.h, arch/x86/quants.c,
arch/x86/repack.cpp, repack.cpp, llamafile/sgemm.cpp, ggml-quants.c) and llama.cpp's graph.

Why bit-exactness: on these random-weight models one flipped rounding of one int8
activation moves the logits by ~0.1-0.3, more than the top-2 margin at many steps. With the
defaults below (a native gcc/clang build on an AVX-512 x86 machine) this reproduces all 14
rows of ../shared/golden/synth.tsv; dropping any one of --isa avx512, --rope-fma first or
--accum kernel loses 1-4 rows.

What is emulated:
  * weights: exact dequantization (F32 F16 BF16 Q8_0 Q4_0 Q4_K Q5_K Q6_K); token embeddings
    through it (get_rows); matmuls through the integer parts.
  * matmul activations quantized to the weight's vec_dot_type: Q8_0 (AVX2 quantize_row_q8_0:
    d = fp16(amax/127), q = rint(x*(127/amax))) or Q8_K (quantize_row_q8_K_ref: iscale =
    -127/max with max the first element of largest |x|, q = min(127, rint(iscale*x)),
    d = 1/iscale).
  * matmul accumulation (--accum kernel), per x86 kernel; integer sums are exact:
      Q8_0 (vec_dot_q8_0_q8_0, tinyBLAS_Q0_AVX for batches): 8 lanes of 4 consecutive
        products per 32-block, lane = fmaf(d_w*d_x, lane_sum, lane), hsum_float_8;
      Q4_0 repacked q4_0_8x8 gemv/gemm: acc = fmaf(block_sum, d_w*d_x, acc) per 32-block;
      Q4_K repacked q4_K_8x8: separate scale and min accumulators with factor
        f32(fp16(d)*d_x), one fma per super-block (gemv, n%4 leftover rows) or per 64 elements
        (gemm, the first 4*(n//4) rows of a batch), result = acc - acc_min;
      Q5_K / Q6_K (and Q4_K with --no-repack) vec_dot AVX2: 8 int32 lanes with the kernel's
        element sets (Q6_K subtracts 32*scale*bsum per lane), d = f32(d_x*fp16(d_w)),
        hsum_float_8, Q5_K mins through fmaf(dmin, imin, summs), Q4_K mins in 4 lanes.
    --accum f64 instead sums exactly and rounds once.
  * llama.cpp's graph: the prompt is one batch; in the last layer only the output row goes
    through the FFN (so it takes the gemv path of a repacked type).
  * RMSNorm: float32 squares summed in double, mean and 1/sqrtf(mean+eps) in float32,
    y = (x*scale)*w.
  * RoPE: ggml's cache (theta = pos, theta *= powf(base, -2/n_rot) per pair in float32, libm
    cosf/sinf); x0*c - x1*s contracted as fmaf(x0, c, -(x1*s)) like a C++ build (--rope-fma).
  * K and V stored as fp16; flash attention (ggml_compute_forward_flash_attn_ext_f16_one_chunk):
    q to fp16, s = ggml_vec_dot_f16(k, q) in the build's lane order (--isa), times scale;
    online softmax with expf; V accumulator in fp16 (scale pass and mad pass each round to
    fp16); S = fmaf(S, ms, vs); out = fp32(VKQ) * (1/S).
  * SwiGLU: silu through ggml_v_expf (AVX-512 or AVX2 polynomial), x/(1+e), times up.
  * residual adds, qwen2 biases, qwen3 per-head q/k RMSNorm in float32.

    /usr/bin/python3 models/ggml_emul.py MODEL.gguf "PROMPT" -n 16 [--top2] [--dump F.npy]
    /usr/bin/python3 models/ggml_emul.py --golden ../shared/golden/synth.tsv [--forced] [--top2]
--forced teacher-forces the golden text and lists every step where the golden token is not
the emulation's argmax. Each row takes a few seconds.
"""
import argparse
import ctypes
import ctypes.util
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_reader import GGUFReader  # noqa: E402
from npllama import SPMTokenizer  # noqa: E402

F32, F16, Q4_0, Q8_0, Q4_K, Q5_K, Q6_K, BF16 = 0, 1, 2, 8, 12, 13, 14, 30
f32 = np.float32

# ---------------------------------------------------------------- C library math
_libm = ctypes.CDLL(ctypes.util.find_library("m"))
for _name in ("expf", "cosf", "sinf", "powf", "sqrtf"):
    getattr(_libm, _name).restype = ctypes.c_float
_libm.expf.argtypes = _libm.cosf.argtypes = _libm.sinf.argtypes = [ctypes.c_float]
_libm.sqrtf.argtypes = [ctypes.c_float]
_libm.powf.argtypes = [ctypes.c_float, ctypes.c_float]


def c_expf(a):
    """glibc expf elementwise (float32 in, float32 out)."""
    a = np.asarray(a, dtype=f32)
    return np.array([_libm.expf(float(v)) for v in a.ravel()], dtype=f32).reshape(a.shape)


def fma32(a, b, c):
    """float32 fused multiply-add: a*b is exact in float64; one rounding (two, rarely, when
    a*b + c needs more than 53 bits — far below anything this tool resolves)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64) + np.asarray(c, np.float64)).astype(f32)


def to_f16(x):
    return np.asarray(x, dtype=f32).astype(np.float16).astype(f32)


def to_bf16(x):
    u = np.asarray(x, dtype=f32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16  # round to nearest even (no NaNs here)
    return (u.astype(np.uint32) << 16).view(f32)


# ---------------------------------------------------------------- dequantization (exact)
def _half(b):
    return np.ascontiguousarray(b).view(np.float16).astype(np.float64)


def _k_scale_min(s):
    """[nb, 12] packed 6-bit scales/mins of Q4_K/Q5_K -> ([nb, 8], [nb, 8])."""
    s = s.astype(np.int64)
    sc = np.empty((s.shape[0], 8), np.int64)
    mn = np.empty_like(sc)
    sc[:, :4], mn[:, :4] = s[:, 0:4] & 63, s[:, 4:8] & 63
    sc[:, 4:] = (s[:, 8:12] & 0xF) | ((s[:, 0:4] >> 6) << 4)
    mn[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)
    return sc, mn


def dequant(raw, typ, n):
    """float64 values of n elements of a tensor's raw bytes (exactly ggml's float32 values)."""
    b = np.frombuffer(raw, dtype=np.uint8)
    if typ == F32:
        return b.view("<f4").astype(np.float64)
    if typ == F16:
        return b.view("<f2").astype(np.float64)
    if typ == BF16:
        return (b.view("<u2").astype(np.uint32) << 16).view(f32).astype(np.float64)
    if typ == Q8_0:
        b = b.reshape(-1, 34)
        return (_half(b[:, :2]) * b[:, 2:].view(np.int8)).ravel()
    if typ == Q4_0:
        b = b.reshape(-1, 18)
        qs = b[:, 2:].astype(np.int64)
        q = np.concatenate([qs & 15, qs >> 4], axis=1) - 8
        return (_half(b[:, :2]) * q).ravel()
    if typ in (Q4_K, Q5_K):
        b = b.reshape(-1, 144 if typ == Q4_K else 176)
        d, dmin = _half(b[:, 0:2]), _half(b[:, 2:4])
        sc, mn = _k_scale_min(b[:, 4:16])
        qs = b[:, 16:144] if typ == Q4_K else b[:, 48:176]
        qs = qs.astype(np.int64).reshape(-1, 4, 32)                # 4 chunks of 64 values
        q = np.stack([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32)  # sub-block sb = 2*chunk + hi
        if typ == Q5_K:
            qh = b[:, 16:48].astype(np.int64)                        # bit sb of qh[l]
            q = q + 16 * ((qh[:, None, :] >> np.arange(8)[None, :, None]) & 1)
        return (d[:, :, None] * sc[:, :, None] * q - dmin[:, :, None] * mn[:, :, None]).ravel()
    if typ == Q6_K:
        b = b.reshape(-1, 210)
        ql = b[:, 0:128].astype(np.int64).reshape(-1, 2, 64)
        qh = b[:, 128:192].astype(np.int64).reshape(-1, 2, 32)
        sc = b[:, 192:208].view(np.int8).astype(np.int64)
        d = _half(b[:, 208:210])
        q = np.stack([(ql[:, :, 0:32] & 15) | (((qh >> 0) & 3) << 4),
                      (ql[:, :, 32:64] & 15) | (((qh >> 2) & 3) << 4),
                      (ql[:, :, 0:32] >> 4) | (((qh >> 4) & 3) << 4),
                      (ql[:, :, 32:64] >> 4) | (((qh >> 6) & 3) << 4)], axis=2) - 32
        q = q.reshape(-1, 16, 16)                                    # groups of 16, in order
        return (d[:, :, None] * sc[:, :, None] * q).ravel()
    raise ValueError("type %d not supported" % typ)


VEC_DOT_TYPE = {F32: "f32", F16: "f16", BF16: "bf16", Q8_0: "q8_0", Q4_0: "q8_0",
                Q4_K: "q8_K", Q5_K: "q8_K", Q6_K: "q8_K"}


# ---------------------------------------------------------------- activation quantization
def quant_q8_0(x, ref=False):
    """x: [n, k] float32 -> float64 values q*d as ggml's quantize_row_q8_0 would give them.
    AVX2 (default): d = fp16(amax/127), q = rint(x*(127/amax)). ref: id = 1/d, roundf."""
    n, k = x.shape
    xb = x.reshape(n, k // 32, 32)
    amax = np.abs(xb).max(axis=2)                                       # float32
    d = (amax / f32(127)).astype(f32)
    with np.errstate(divide="ignore", invalid="ignore"):
        if ref:
            idv = np.where(d != 0, f32(1) / d, f32(0)).astype(f32)
        else:
            idv = np.where(amax != 0, f32(127) / amax, f32(0)).astype(f32)
    v = (xb * idv[:, :, None]).astype(f32)
    q = np.trunc(v + np.copysign(f32(0.5), v)) if ref else np.rint(v)   # roundf vs RNE
    dh = d.astype(np.float16).astype(np.float64)
    return (q.astype(np.float64) * dh[:, :, None]).reshape(n, k)


def quant_q8_K(x):
    """x: [n, k] float32 -> float64 values q*d of quantize_row_q8_K_ref."""
    n, k = x.shape
    xb = x.reshape(n, k // 256, 256)
    idx = np.abs(xb).argmax(axis=2)                                     # first largest |x|
    mx = np.take_along_axis(xb, idx[:, :, None], axis=2)[:, :, 0]
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(mx != 0, f32(-127) / mx, f32(0)).astype(f32)
        d = np.where(mx != 0, f32(1) / iscale, f32(0)).astype(f32)
    q = np.minimum(np.rint((xb * iscale[:, :, None]).astype(f32)), 127)
    return (q.astype(np.float64) * d[:, :, None].astype(np.float64)).reshape(n, k)


def decode_ints(raw, typ, rows, cols):
    """Integer parts of a quantized matrix, as the x86 kernels see them (float64 arrays):
    Q8_0/Q4_0: q [R, nb, 32] signed, d [R, nb];
    Q4_K/Q5_K: q [R, nb, 256] unsigned, sc/mn [R, nb, 8], d/dmin [R, nb];
    Q6_K: q [R, nb, 256] unsigned (0..63), sc [R, nb, 16] signed, d [R, nb]."""
    b = np.frombuffer(raw, dtype=np.uint8)
    if typ in (Q8_0, Q4_0):
        b = b.reshape(rows, -1, 34 if typ == Q8_0 else 18)
        d = _half(b[..., :2]).reshape(rows, -1)
        if typ == Q8_0:
            q = b[..., 2:].view(np.int8).astype(np.float64)
        else:
            qs = b[..., 2:].astype(np.int64)
            q = (np.concatenate([qs & 15, qs >> 4], axis=-1) - 8).astype(np.float64)
        return dict(q=q, d=d)
    if typ in (Q4_K, Q5_K):
        b = b.reshape(rows * (cols // 256), 144 if typ == Q4_K else 176)
        d, dmin = _half(b[:, 0:2])[:, 0], _half(b[:, 2:4])[:, 0]
        sc, mn = _k_scale_min(b[:, 4:16])
        qs = (b[:, 16:144] if typ == Q4_K else b[:, 48:176]).astype(np.int64).reshape(-1, 4, 32)
        q = np.stack([qs & 15, qs >> 4], axis=2).reshape(-1, 8, 32)
        if typ == Q5_K:
            qh = b[:, 16:48].astype(np.int64)
            q = q + 16 * ((qh[:, None, :] >> np.arange(8)[None, :, None]) & 1)
        R = lambda a, *sh: a.reshape(rows, cols // 256, *sh).astype(np.float64)  # noqa: E731
        return dict(q=R(q, 256), sc=R(sc, 8), mn=R(mn, 8), d=R(d), dmin=R(dmin))
    if typ == Q6_K:
        b = b.reshape(rows * (cols // 256), 210)
        ql = b[:, 0:128].astype(np.int64).reshape(-1, 2, 64)
        qh = b[:, 128:192].astype(np.int64).reshape(-1, 2, 32)
        q = np.stack([(ql[:, :, 0:32] & 15) | (((qh >> 0) & 3) << 4),
                      (ql[:, :, 32:64] & 15) | (((qh >> 2) & 3) << 4),
                      (ql[:, :, 0:32] >> 4) | (((qh >> 4) & 3) << 4),
                      (ql[:, :, 32:64] >> 4) | (((qh >> 6) & 3) << 4)], axis=2)
        sc = b[:, 192:208].view(np.int8)
        R = lambda a, *sh: a.reshape(rows, cols // 256, *sh).astype(np.float64)  # noqa: E731
        return dict(q=R(q, 256), sc=R(sc, 16), d=R(_half(b[:, 208:210])[:, 0]))
    return None


class Mat:
    """A weight matrix [rows, cols]: float64 dequantized values (w) and, for the quantized
    types, the integer parts the x86 kernels multiply (k)."""

    def __init__(self, r, name, ints=True):
        t = r.tensors[name]
        self.name = name
        self.type = t.type
        self.cols = t.shape[0]
        self.rows = int(np.prod(t.shape[1:], dtype=np.int64))
        raw = r.tensor_bytes(t)
        self.w = dequant(raw, t.type, self.rows * self.cols).reshape(self.rows, self.cols)
        self.k = decode_ints(raw, t.type, self.rows, self.cols) if ints else None
        if self.k is not None and t.type in (Q4_K, Q5_K):   # sc*q per element
            k = self.k
            k["scq"] = (k["q"].reshape(self.rows, -1, 8, 32) * k["sc"][..., None]).reshape(k["q"].shape)
        if self.k is not None and t.type == Q6_K:
            k = self.k
            k["scq"] = (k["q"].reshape(self.rows, -1, 16, 16) * k["sc"][..., None]).reshape(k["q"].shape)

    def row(self, i):
        return self.w[i].astype(f32)


# ---------------------------------------------------------------- exact x86 kernels
def fma_chain(terms_a, terms_b):
    """acc = fmaf(a_i, b_i, acc) for i along axis 1 (float32, starting from 0).
    terms_*: [R, n, ...] float64 holding float32 values."""
    acc = np.zeros((terms_a.shape[0],) + terms_a.shape[2:], f32)
    for i in range(terms_a.shape[1]):
        acc = fma32(terms_a[:, i], terms_b[:, i], acc)
    return acc


def hsum8(v):
    """hsum_float_8 / tinyBLAS hsum of [..., 8] float32: (hi+lo), then (0+2)+(1+3)."""
    r = (v[..., 4:] + v[..., :4]).astype(f32)
    return ((r[..., 0] + r[..., 2]).astype(f32) + (r[..., 1] + r[..., 3]).astype(f32)).astype(f32)


def q8_blocks(x, bs, ref=False):
    """Integer q and scale d of an activation row as quantize_row_q8_0 (bs 32, AVX2) or
    quantize_row_q8_K (bs 256) produce them: q [nb, bs], d [nb] (float64 holding the exact
    fp16 / float32 scale)."""
    x = np.asarray(x, dtype=f32).reshape(-1, bs)
    if bs == 32:
        amax = np.abs(x).max(axis=1)
        d = (amax / f32(127)).astype(f32)
        with np.errstate(divide="ignore"):
            if ref:   # quantize_row_q8_0_ref: id = 1/d, roundf (half away from zero)
                idv = np.where(d != 0, f32(1) / d, f32(0)).astype(f32)
            else:
                idv = np.where(amax != 0, f32(127) / amax, f32(0)).astype(f32)
        v = (x * idv[:, None]).astype(f32)
        q = np.trunc(v + np.copysign(f32(0.5), v)) if ref else np.rint(v)
        return q.astype(np.float64), d.astype(np.float16).astype(np.float64)
    idx = np.abs(x).argmax(axis=1)
    mx = x[np.arange(x.shape[0]), idx]
    with np.errstate(divide="ignore"):
        iscale = np.where(mx != 0, f32(-127) / mx, f32(0)).astype(f32)
        d = np.where(mx != 0, f32(1) / iscale, f32(0)).astype(f32)
    q = np.minimum(np.rint((x * iscale[:, None]).astype(f32)), 127)
    return q.astype(np.float64), d.astype(np.float64)


def kernel_dot(W, x, path, q8_0_ref=False):
    """One activation row x [cols] float32 against every row of W with the f32 accumulation
    order of llama.cpp's x86 kernel; path: 'vec' (vec_dot / tinyBLAS), 'gemv', 'gemm'
    (repacked Q4_0 / Q4_K). Returns float32 [rows]."""
    k, R, t = W.k, W.rows, W.type
    if t in (Q8_0, Q4_0):
        qa, da = q8_blocks(x, 32, q8_0_ref)                          # [nb, 32], [nb]
        D = k["d"] * da[None, :]                                     # fp16*fp16: exact
        if t == Q4_0 and path != "vec":                              # q4_0_8x8 gemv/gemm
            isum = np.einsum("rbe,be->rb", k["q"], qa)
            return fma_chain(isum, D)
        lanes = np.einsum("rbtu,btu->rbt", k["q"].reshape(R, -1, 8, 4), qa.reshape(-1, 8, 4))
        return hsum8(fma_chain(np.broadcast_to(D[..., None], lanes.shape), lanes))
    qa, da = q8_blocks(x, 256)                                       # [nb, 256], [nb]
    bs16 = qa.reshape(-1, 16, 16).sum(axis=2)                        # Q8_K bsums
    if t == Q6_K:                                                    # ggml_vec_dot_q6_K_q8_K (AVX2)
        # lane t of chunk (j, k): elements 128j + 32k + 4t + u
        P = np.einsum("rbjktu,bjktu->rbt", k["scq"].reshape(R, -1, 2, 4, 8, 4), qa.reshape(-1, 2, 4, 8, 4))
        C = 32 * np.einsum("rbtv,btv->rbt", k["sc"].reshape(R, -1, 8, 2), bs16.reshape(-1, 8, 2))
        lanes = (P - C).astype(f32).astype(np.float64)               # cvtepi32_ps
        d = (da[None, :] * k["d"]).astype(f32).astype(np.float64)   # y.d * fp16(x.d)
        return hsum8(fma_chain(np.broadcast_to(d[..., None], lanes.shape), lanes))
    bs32 = qa.reshape(-1, 8, 32).sum(axis=2)
    if t == Q5_K or (t == Q4_K and path == "vec"):                   # vec_dot_q{4,5}_K_q8_K (AVX2)
        # lane t: elements 32s + 4t + u of each sub-block s
        lanes = np.einsum("rbstu,bstu->rbt", k["scq"].reshape(R, -1, 8, 8, 4), qa.reshape(-1, 8, 8, 4))
        lanes = lanes.astype(f32).astype(np.float64)
        d = (da[None, :] * k["d"]).astype(f32).astype(np.float64)
        dmin = -(da[None, :] * k["dmin"]).astype(f32).astype(np.float64)
        acc = hsum8(fma_chain(np.broadcast_to(d[..., None], lanes.shape), lanes))
        if t == Q4_K:   # acc_m: 4 lanes m[2p]*bsum[2p] + m[2p+1]*bsum[2p+1], fma per super-block
            prod = np.einsum("rbpv,bpv->rbp", k["mn"].reshape(R, -1, 4, 2), bs32.reshape(-1, 4, 2))
            am = fma_chain(np.broadcast_to(dmin[..., None], prod.shape), prod.astype(f32).astype(np.float64))
            am = ((am[:, 0] + am[:, 2]).astype(f32) + (am[:, 1] + am[:, 3]).astype(f32)).astype(f32)
            return (acc + am).astype(f32)
        imin = np.einsum("rbs,bs->rb", k["mn"], bs32).astype(f32).astype(np.float64)
        summs = np.zeros(R, f32)
        for i in range(imin.shape[1]):                               # summs += dmin * imin
            summs = fma32(dmin[:, i], imin[:, i], summs)
        return (acc + summs).astype(f32)
    # Q4_K repacked (q4_K_8x8): gemv = one fma per super-block, gemm = one per 64 elements
    D = (da[None, :] * k["d"]).astype(f32).astype(np.float64)
    Dm = (da[None, :] * k["dmin"]).astype(f32).astype(np.float64)
    Isb = np.einsum("rbse,bse->rbs", k["scq"].reshape(R, -1, 4, 64), qa.reshape(-1, 4, 64))
    Msb = np.einsum("rbsv,bsv->rbs", k["mn"].reshape(R, -1, 4, 2), bs32.reshape(-1, 4, 2))
    if path == "gemm":
        n = Isb.shape[1] * 4
        s1 = fma_chain(Isb.reshape(R, n).astype(f32).astype(np.float64), np.repeat(D, 4, axis=1))
        s2 = fma_chain(Msb.reshape(R, n).astype(f32).astype(np.float64), np.repeat(Dm, 4, axis=1))
    else:
        s1 = fma_chain(Isb.sum(axis=2).astype(f32).astype(np.float64), D)
        s2 = fma_chain(Msb.sum(axis=2).astype(f32).astype(np.float64), Dm)
    return (s1 - s2).astype(f32)


# ---------------------------------------------------------------- ggml_v_expf / silu
_C = {k: f32(float.fromhex(v)) for k, v in dict(
    r="0x1.8p23", l2e="0x1.715476p+0", ln2hi="0x1.62e4p-1", ln2lo="0x1.7f7d1cp-20",
    c5="0x1.0e4020p-7", c4="0x1.573e2ep-5", c3="0x1.555e66p-3", c2="0x1.fffdb6p-2",
    c1="0x1.ffffecp-1").items()}


def v_expf(x, isa):
    """ggml_v_expf (vec.h) on float32 x, AVX2+FMA or AVX-512 flavour."""
    x = np.asarray(x, dtype=f32)
    z = fma32(x, _C["l2e"], _C["r"])
    n = (z - _C["r"]).astype(f32)
    b = fma32(-n, _C["ln2lo"], fma32(-n, _C["ln2hi"], x))
    u = (b * b).astype(f32)
    p = fma32(fma32(_C["c5"], b, _C["c4"]), u, fma32(_C["c3"], b, _C["c2"]))
    if isa == "avx512":     # any other value: the AVX2 flavour
        j = fma32(p, u, fma32(_C["c1"], b, f32(1)))
        with np.errstate(over="ignore", under="ignore"):
            res = np.ldexp(j, n.astype(np.int32)).astype(f32)           # scalef: exact scaling
        big = np.abs(n) > 192
        return np.where(big, np.where(n <= 0, f32(0), f32(np.inf)), res).astype(f32)
    j = fma32(p, u, (_C["c1"] * b).astype(f32))
    e = (z.view(np.int32).astype(np.int64) << 23).astype(np.uint32)      # int shift, wraps
    k = (e + np.uint32(0x3F800000)).view(f32)
    res = fma32(j, k, k)
    c = np.abs(n) > 126
    if not c.any():
        return res
    g = np.where(n <= 0, np.uint32(0x82000000), np.uint32(0))
    s1 = (g + np.uint32(0x7F000000)).view(f32)
    s2 = (e - g).view(f32)
    d = np.abs(n) > 192
    with np.errstate(over="ignore", under="ignore"):
        alt = (fma32(s2, j, s2) * s1).astype(f32)
        return np.where(d, (s1 * s1).astype(f32), np.where(c, alt, res)).astype(f32)


def swiglu(g, u, opt):
    """ggml_vec_swiglu_f32: silu(g) * u in float32."""
    g = np.asarray(g, dtype=f32)
    if opt.silu == "vexpf":
        e = v_expf((f32(0) - g).astype(f32), opt.isa)
    else:
        e = c_expf(-g)
    silu = (g / (f32(1) + e).astype(f32)).astype(f32)
    return (silu * u).astype(f32)


# ---------------------------------------------------------------- the model
class Emul:
    def __init__(self, path, opt):
        r = GGUFReader(path)
        self.r, self.opt = r, opt
        arch = r.kv["general.architecture"]
        if arch not in ("llama", "qwen2", "qwen3"):
            raise ValueError("architecture %r not supported" % arch)
        self.arch = arch
        g = lambda k, d=None: r.kv.get("%s.%s" % (arch, k), d)  # noqa: E731
        self.dim = g("embedding_length")
        self.n_layers = g("block_count")
        self.n_heads = g("attention.head_count")
        self.n_kv = g("attention.head_count_kv", self.n_heads)
        self.head_dim = g("attention.key_length", self.dim // self.n_heads)
        self.n_rot = g("rope.dimension_count", self.head_dim)
        self.eps = f32(g("attention.layer_norm_rms_epsilon", 1e-5))
        self.base = f32(g("rope.freq_base", 10000.0))
        self.neox = arch in ("qwen2", "qwen3")
        vec = lambda n: Mat(r, n, ints=False).w.ravel().astype(f32)  # noqa: E731
        self.emb = Mat(r, "token_embd.weight", ints="output.weight" not in r.tensors)
        self.out = Mat(r, "output.weight") if "output.weight" in r.tensors else self.emb
        self.norm = vec("output_norm.weight")
        self.layers = []
        for i in range(self.n_layers):
            p = "blk.%d." % i
            L = {k: Mat(r, p + k + ".weight") for k in ("attn_q", "attn_k", "attn_v", "attn_output",
                                                       "ffn_gate", "ffn_up", "ffn_down")}
            for k in ("attn_norm", "ffn_norm", "attn_q_norm", "attn_k_norm"):
                if p + k + ".weight" in r.tensors:
                    L[k] = vec(p + k + ".weight")
            for k in ("attn_q", "attn_k", "attn_v"):
                if p + k + ".bias" in r.tensors:
                    L[k + "_b"] = vec(p + k + ".bias")
            self.layers.append(L)
        # rope: theta_scale = powf(base, -2.0f/n_dims)
        self.theta_scale = f32(_libm.powf(float(self.base), float(f32(-2.0) / f32(self.n_rot))))
        self._rope_cache = {}
        self.reset()

    def reset(self):
        self.K = [np.zeros((0, self.n_kv, self.head_dim), f32) for _ in range(self.n_layers)]
        self.V = [np.zeros((0, self.n_kv, self.head_dim), f32) for _ in range(self.n_layers)]
        self.pos = 0

    # -- ops ------------------------------------------------------------------------
    def matmul(self, W, x):
        """x: [n, cols] float32 -> [n, rows] float32, as ggml_mul_mat on the CPU with n
        activation rows in one batch (rows 0..4*(n//4)-1 of a repacked type go through gemm)."""
        x = np.asarray(x, dtype=f32).reshape(-1, W.cols)
        vdt = VEC_DOT_TYPE[W.type]
        if self.opt.act_quant and self.opt.accum == "kernel" and W.k is not None:
            n = x.shape[0]
            repacked = self.opt.repack and W.type in (Q4_0, Q4_K) and W.rows % 8 == 0
            out = np.empty((n, W.rows), f32)
            for i in range(n):
                path = "vec" if not repacked else ("gemm" if n > 3 and i < n - n % 4 else "gemv")
                out[i] = kernel_dot(W, x[i], path, self.opt.q8_0 == "ref")
            return out
        if not self.opt.act_quant:
            xa = x.astype(np.float64)
        elif vdt == "q8_0":
            xa = quant_q8_0(x, ref=self.opt.q8_0 == "ref")
        elif vdt == "q8_K":
            xa = quant_q8_K(x)
        elif vdt == "f16":
            xa = to_f16(x).astype(np.float64)
        elif vdt == "bf16":
            xa = to_bf16(x).astype(np.float64)
        else:
            xa = x.astype(np.float64)
        return (xa @ W.w.T).astype(f32)

    def rmsnorm(self, x, w):
        """x: [n, d] float32, w: [d] -> float32 (ggml_compute_forward_rms_norm_f32 + mul)."""
        x = np.asarray(x, dtype=f32)
        d = x.shape[-1]
        if self.opt.rms == "f64":
            xx = x.astype(np.float64)
            return (xx / np.sqrt(np.mean(xx * xx, axis=-1, keepdims=True) + float(self.eps)) * w).astype(f32)
        sq = (x * x).astype(f32).astype(np.float64)
        s = np.cumsum(sq, axis=-1)[..., -1]                     # sequential double sum
        mean = (s / d).astype(f32)
        scale = (f32(1) / np.sqrt((mean + self.eps).astype(f32))).astype(f32)  # sqrtf is exact-rounded
        return ((x * scale[..., None]).astype(f32) * w).astype(f32)

    def rope_cs(self, pos):
        """(cos, sin) [n_rot/2] float32 for one position, from ggml's rope cache recurrence."""
        if pos not in self._rope_cache:
            theta = f32(pos)
            cs = np.empty(self.n_rot // 2, f32)
            sn = np.empty(self.n_rot // 2, f32)
            for i in range(self.n_rot // 2):
                cs[i] = _libm.cosf(float(theta))
                sn[i] = _libm.sinf(float(theta))
                theta = f32(theta * self.theta_scale)
            self._rope_cache[pos] = (cs, sn)
        return self._rope_cache[pos]

    def rope(self, x, pos):
        """x: [heads, head_dim] float32 rotated in place for position pos."""
        cs, sn = self.rope_cs(pos)
        h = self.n_rot // 2
        if self.neox:
            i0, i1 = np.arange(h), np.arange(h) + h
        else:
            i0, i1 = np.arange(0, self.n_rot, 2), np.arange(1, self.n_rot, 2)
        x0, x1 = x[:, i0].copy(), x[:, i1].copy()
        mode = self.opt.rope_fma
        if mode == "none":
            a = ((x0 * cs).astype(f32) - (x1 * sn).astype(f32)).astype(f32)
            b = ((x0 * sn).astype(f32) + (x1 * cs).astype(f32)).astype(f32)
        elif mode == "first":   # fma(x0, c, -(x1*s)), fma(x0, s, x1*c)
            a = fma32(x0, cs, -(x1 * sn).astype(f32))
            b = fma32(x0, sn, (x1 * cs).astype(f32))
        else:                   # fma(-x1, s, x0*c), fma(x1, c, x0*s)
            a = fma32(-x1, sn, (x0 * cs).astype(f32))
            b = fma32(x1, cs, (x0 * sn).astype(f32))
        x[:, i0], x[:, i1] = a, b
        return x

    def dot_f16(self, K, q):
        """ggml_vec_dot_f16(k, q) for each key: K [T, D] and q [D] hold fp16 values (as float32).
        Returns float32 [T] with the lane order and reduction of the AVX2 / AVX-512 kernel."""
        T, D = K.shape
        P = (K * q).astype(f32)                    # products of two fp16: exact in float32
        if self.opt.isa == "seq8":                 # one 8-lane accumulator (quill's dot_f16)
            acc = np.zeros((T, 8), f32)
            for i in range(0, D - D % 8, 8):
                acc = (acc + P[:, i:i + 8]).astype(f32)
            res = hsum8(acc).astype(np.float64)
            return (res + P[:, D - D % 8:].astype(np.float64).sum(axis=1)).astype(f32)
        epr = 16 if self.opt.isa == "avx512" else 8
        step = 4 * epr
        npd = D - D % step
        acc = np.zeros((T, 4, epr), f32)
        for i in range(0, npd, step):              # sum[j] = fma(x, y, sum[j]) == sum[j] + P
            acc = (acc + P[:, i:i + step].reshape(T, 4, epr)).astype(f32)
        x0 = (acc[:, 0] + acc[:, 2]).astype(f32)
        x1 = (acc[:, 1] + acc[:, 3]).astype(f32)
        x0 = (x0 + x1).astype(f32)
        if epr == 8:    # _mm_add_ps(lo, hi); hadd; hadd
            t0 = (x0[:, :4] + x0[:, 4:]).astype(f32)
            res = ((t0[:, 0] + t0[:, 1]).astype(f32) + (t0[:, 2] + t0[:, 3]).astype(f32)).astype(f32)
        else:           # _mm512_reduce_add_ps: 16 -> 8 -> 4 -> (0+2, 1+3) -> sum
            t8 = (x0[:, :8] + x0[:, 8:]).astype(f32)
            t4 = (t8[:, :4] + t8[:, 4:]).astype(f32)
            res = ((t4[:, 0] + t4[:, 2]).astype(f32) + (t4[:, 1] + t4[:, 3]).astype(f32)).astype(f32)
        res = res.astype(np.float64)               # ggml_float sumf; leftovers in double
        if npd < D:
            res = res + P[:, npd:].astype(np.float64).sum(axis=1)
        return res.astype(f32)

    def attention(self, q, li, n_keys):
        """q: [H, D] float32 of one query; keys 0..n_keys-1 of layer li (causal mask). -> [H, D]."""
        K, V = self.K[li][:n_keys], self.V[li][:n_keys]   # [T, n_kv, D], fp16 values
        H, D = q.shape
        grp = H // self.n_kv
        scale = f32(1.0 / np.sqrt(float(D)))        # 1.0f/sqrtf(n_embd_head)
        mode = self.opt.attn
        if mode == "f32":
            out = np.empty((H, D), f32)
            for h in range(H):
                s = K[:, h // grp].astype(np.float64) @ q[h].astype(np.float64) * float(scale)
                p = np.exp(s - s.max())
                out[h] = (p / p.sum()) @ V[:, h // grp].astype(np.float64)
            return out
        qh = to_f16(q)
        s = np.stack([self.dot_f16(K[:, h // grp], qh[h]) for h in range(H)])  # [H, T]
        s = (s * scale).astype(f32)
        if mode == "nofa":  # kq f32 -> soft_max_ext -> probs to fp16 -> f16 mul_mat with V
            out = np.empty((H, D), f32)
            for h in range(H):
                m = s[h].max()
                e = c_expf((s[h] - m).astype(f32))
                ssum = f32(e.astype(np.float64).sum())
                p = to_f16((e * (f32(1) / ssum)).astype(f32))
                out[h] = (p.astype(np.float64) @ V[:, h // grp].astype(np.float64)).astype(f32)
            return out
        # fa16: ggml_compute_forward_flash_attn_ext_f16_one_chunk, all heads at once
        Vh = V[:, np.arange(H) // grp]               # [T, H, D]
        acc = np.zeros((H, D), f32)                 # fp16 values
        M = np.full(H, -np.inf, f32)
        S = np.zeros(H, f32)
        for j in range(K.shape[0]):
            sj = s[:, j]
            new = sj > M
            ms = np.ones(H, f32)
            vs = np.ones(H, f32)
            if new.any():
                ms[new] = c_expf((M[new] - sj[new]).astype(f32))  # expf(-inf) = 0 first time
                M = np.where(new, sj, M).astype(f32)
                acc[new] = to_f16(acc[new] * ms[new, None])
            old = ~new
            if old.any():
                vs[old] = c_expf((sj[old] - M[old]).astype(f32))
            acc = to_f16(fma32(Vh[j], vs[:, None], acc))
            S = fma32(S, ms, vs) if self.opt.s_fma else ((S * ms).astype(f32) + vs).astype(f32)
        inv = np.where(S == 0, f32(0), f32(1) / S).astype(f32)
        return (acc * inv[:, None]).astype(f32)

    # -- forward --------------------------------------------------------------------
    def forward(self, tokens):
        """float32 logits [n_vocab] of the last of tokens, fed as one batch at the next
        positions (llama.cpp's prompt processing; generation feeds one token at a time)."""
        H, KV, D = self.n_heads, self.n_kv, self.head_dim
        n = len(tokens)
        x = np.stack([self.emb.row(t) for t in tokens])                      # [n, dim]
        for li, L in enumerate(self.layers):
            h = self.rmsnorm(x, L["attn_norm"])
            q, k, v = (self.matmul(L[m], h) for m in ("attn_q", "attn_k", "attn_v"))
            if "attn_q_b" in L:
                q, k, v = ((a + L[m + "_b"]).astype(f32) for a, m in
                           ((q, "attn_q"), (k, "attn_k"), (v, "attn_v")))
            q, k, v = q.reshape(n, H, D), k.reshape(n, KV, D), v.reshape(n, KV, D)
            if "attn_q_norm" in L:
                q = self.rmsnorm(q, L["attn_q_norm"])
                k = self.rmsnorm(k, L["attn_k_norm"])
            for i in range(n):
                q[i], k[i] = self.rope(q[i], self.pos + i), self.rope(k[i], self.pos + i)
            kv16 = self.opt.attn != "f32"
            self.K[li] = np.concatenate([self.K[li], to_f16(k) if kv16 else k])
            self.V[li] = np.concatenate([self.V[li], to_f16(v) if kv16 else v])
            att = np.stack([self.attention(q[i], li, self.pos + i + 1) for i in range(n)])
            x = (x + self.matmul(L["attn_output"], att.reshape(n, H * D))).astype(f32)
            if li == self.n_layers - 1:      # llama.cpp keeps only the output row from here
                x = x[-1:]
            h = self.rmsnorm(x, L["ffn_norm"])
            gate, up = self.matmul(L["ffn_gate"], h), self.matmul(L["ffn_up"], h)
            x = (x + self.matmul(L["ffn_down"], swiglu(gate, up, self.opt))).astype(f32)
        self.pos += n
        return self.matmul(self.out, self.rmsnorm(x, self.norm))[0]

    def step(self, token):
        return self.forward([token])


def top2(logits):
    a = int(np.argmax(logits))
    l2 = logits.copy()
    l2[a] = -np.inf
    b = int(np.argmax(l2))
    return a, float(logits[a]), b, float(logits[b])


def greedy(model, ids, n, trace=None):
    """Greedy ids; trace (a list) gets (top1, l1, top2, l2, logits) per step."""
    model.reset()
    lg, out = model.forward(ids), []
    for _ in range(n):
        a, la, b, lb = top2(lg)
        if trace is not None:
            trace.append((a, la, b, lb, lg))
        out.append(a)
        lg = model.step(a)
    return out


def forced(model, tok, ids, want):
    """Teacher-force the golden text: at each step feed the best-scoring token whose piece
    continues want. Returns per step (golden id, its logit, our top id, top logit, logits)."""
    model.reset()
    lg, rest, steps = model.forward(ids), want.encode("utf-8"), []
    while rest:
        order = np.argsort(-lg, kind="stable")
        g = None
        for c in order[:4000]:
            piece = tok.decode([int(c)]).encode("utf-8")
            if piece and rest.startswith(piece):
                g = int(c)
                break
        if g is None:
            break
        steps.append((g, float(lg[g]), int(order[0]), float(lg[order[0]]), lg))
        rest = rest[len(tok.decode([g]).encode("utf-8")):]
        if rest:
            lg = model.step(g)
    return steps


def options(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model", nargs="?")
    ap.add_argument("prompt", nargs="?", default="")
    ap.add_argument("-n", type=int, default=16)
    ap.add_argument("--golden", help="golden TSV (model, prompt, n, continuation) to check")
    ap.add_argument("--shared", default=None, help="shared dir (default: the golden file's ../..)")
    ap.add_argument("--top2", action="store_true", help="print per-step top-2 logits")
    ap.add_argument("--forced", action="store_true",
                    help="also teacher-force the golden text and list steps where it is not our argmax")
    ap.add_argument("--dump", help="directory: write per-row logits as .npy")
    ap.add_argument("--no-act-quant", dest="act_quant", action="store_false",
                    help="matmul on float32 activations (no Q8_0/Q8_K quantization)")
    ap.add_argument("--q8-0", choices=("avx2", "ref"), default="avx2",
                    help="Q8_0 activation quantizer: AVX2 (127/amax, RNE) or scalar ref (1/d, roundf)")
    ap.add_argument("--attn", choices=("fa16", "f32", "nofa"), default="fa16",
                    help="fa16: ggml CPU flash attention; nofa (approximate): kq, softmax, probs->f16, f16 V dot; f32: float64 softmax, f32 KV")
    ap.add_argument("--isa", choices=("avx2", "avx512", "seq8"), default="avx512",
                    help="SIMD flavour of llama.cpp's build: vec_dot_f16 lane order and ggml_v_expf "
                         "(seq8: one 8-lane accumulator, as quill's dot_f16; AVX2 expf)")
    ap.add_argument("--silu", choices=("vexpf", "libm"), default="vexpf")
    ap.add_argument("--rope-fma", choices=("none", "first", "second"), default="first",
                    help="RoPE x0*c - x1*s contraction: first = fmaf(x0, c, -(x1*s)) (gcc/clang "
                         "-ffp-contract default), none = two rounded products")
    ap.add_argument("--no-s-fma", dest="s_fma", action="store_false",
                    help="FA: S = S*ms + vs with two roundings instead of fmaf(S, ms, vs)")
    ap.add_argument("--rms", choices=("ggml", "f64"), default="ggml")
    ap.add_argument("--accum", choices=("kernel", "f64"), default="kernel",
                    help="kernel: each x86 kernel's float32 lane/fma order; f64: exact sums rounded once")
    ap.add_argument("--no-repack", dest="repack", action="store_false",
                    help="Q4_0/Q4_K through vec_dot instead of the repacked 8x8 gemv/gemm")
    return ap.parse_args(argv)


def run_golden(opt):
    shared = opt.shared or os.path.dirname(os.path.dirname(os.path.abspath(opt.golden)))
    models, ok_all = {}, 0
    rows = [l.rstrip("\n").split("\t") for l in open(opt.golden, encoding="utf-8") if l.strip()]
    for mname, prompt, n, want in rows:
        want = json.loads(want)
        if mname not in models:
            models[mname] = Emul(os.path.join(shared, "models", "gguf", mname), opt)
        m = models[mname]
        tok = SPMTokenizer(m.r)
        trace = []
        out = greedy(m, tok.encode(prompt), int(n), trace)
        got = tok.decode(out)
        # find the first step where the golden text stops being a prefix
        first_bad = None
        for i in range(len(out)):
            if not want.startswith(tok.decode(out[:i + 1])):
                first_bad = i
                break
        ok = got == want
        ok_all += ok
        print("%s %s %r" % ("ok  " if ok else "FAIL", mname, prompt))
        if not ok:
            print("     want %r\n     got  %r" % (want, got))
            if first_bad is not None:
                a, la, b, lb, _ = trace[first_bad]
                print("     first differs at step %d: top %d (%.5f) 2nd %d (%.5f) margin %.5f"
                      % (first_bad, a, la, b, lb, la - lb))
        if opt.forced:
            for i, (g, lgold, t, ltop, _) in enumerate(forced(m, tok, tok.encode(prompt), want)):
                if g != t:
                    print("     forced step %2d: golden %6d %-14r %.5f below our top %6d %-14r %.5f by %.5f"
                          % (i, g, tok.tokens[g], lgold, t, tok.tokens[t], ltop, ltop - lgold))
        if opt.top2:
            for i, (a, la, b, lb, _) in enumerate(trace):
                print("     %2d top %6d %-14r %.5f  2nd %6d %-14r %.5f  margin %.5f"
                      % (i, a, tok.tokens[a], la, b, tok.tokens[b], lb, la - lb))
        if opt.dump:
            os.makedirs(opt.dump, exist_ok=True)
            stem = "%s__%s" % (mname.replace(".gguf", ""), "".join(c if c.isalnum() else "_" for c in prompt))
            np.save(os.path.join(opt.dump, stem + ".npy"), np.stack([t[4] for t in trace]))
            np.save(os.path.join(opt.dump, stem + ".ids.npy"), np.array(out))
    print("%d/%d rows reproduced" % (ok_all, len(rows)))
    return 0 if ok_all == len(rows) else 1


def main(argv):
    opt = options(argv)
    if opt.golden:
        return run_golden(opt)
    if not opt.model:
        print("need MODEL or --golden", file=sys.stderr)
        return 2
    m = Emul(opt.model, opt)
    tok = SPMTokenizer(m.r)
    ids = tok.encode(opt.prompt)
    trace = []
    out = greedy(m, ids, opt.n, trace)
    print("prompt ids %s, generated %s" % (ids, out), file=sys.stderr)
    if opt.top2:
        for i, (a, la, b, lb, _) in enumerate(trace):
            print("%2d top %6d %-14r %.5f  2nd %6d %-14r %.5f  margin %.5f"
                  % (i, a, tok.tokens[a], la, b, tok.tokens[b], lb, la - lb), file=sys.stderr)
    if opt.dump:
        np.save(opt.dump, np.stack([t[4] for t in trace]))
    print(tok.decode(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
