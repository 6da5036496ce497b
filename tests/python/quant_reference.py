"""Independent numpy references for hurray's quantization kernels, written
from the rules of the quantization notes (IEEE binary32 arithmetic, round
half to even unless a rule says otherwise). Nothing here imports hurray.

Conventions: every quantizer takes a float array (converted to float32 the
way hurray.quantize does: float16 / bfloat16 / float64 / integers -> float32)
and returns plain numpy arrays:
  codes   - one element per input element, same shape (int64 for the
            integer kinds, ml_dtypes arrays for the MX float elements);
  scales  - in the scale dtype, shaped like hurray's Tensor.scales();
  zero points - int64, shaped like the scales.
Not a test module (no test_ prefix)."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

F32 = np.float32

# ------------------------------------------------------------------ inputs


def as_f32(x) -> np.ndarray:
    """What hurray.quantize reads: float32 values, C-contiguous."""
    return np.asarray(x).astype(np.float32, order="C")  # (ascontiguousarray makes 0-d 1-d)


def _finite_or_raise(x: np.ndarray):
    bad = np.flatnonzero(~np.isfinite(x.reshape(-1)))
    if bad.size:
        raise ValueError(f"not finite at flat index {int(bad[0])}")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def blocked_shape(shape, axis: int, block: int) -> tuple:
    out = list(shape)
    out[axis] = ceil_div(shape[axis], block)
    return tuple(out)


def expand_blocks(blocks: np.ndarray, axis: int, block: int, shape) -> np.ndarray:
    """Per-block parameters repeated to one per element along `axis`."""
    return np.take(np.repeat(blocks, block, axis=axis), np.arange(shape[axis]), axis=axis)


# ------------------------------------------------------------- bit packing


def pack4(codes) -> np.ndarray:
    """4-bit codes (any int-like array) -> bytes, element 2k in the low nibble of byte k."""
    c = (np.asarray(codes).reshape(-1).astype(np.int64) & 0xF).astype(np.uint8)
    if c.size % 2:
        c = np.concatenate([c, np.zeros(1, np.uint8)])
    return (c[0::2] | (c[1::2] << 4)).astype(np.uint8)


def unpack4(raw, count: int) -> np.ndarray:
    raw = np.asarray(raw, np.uint8).reshape(-1)
    out = np.empty(raw.size * 2, np.uint8)
    out[0::2] = raw & 0xF
    out[1::2] = raw >> 4
    return out[:count]


def pack6(codes) -> np.ndarray:
    """6-bit codes -> little-endian bit stream (element i at stream bits [6i, 6i+6))."""
    c = np.asarray(codes).reshape(-1).astype(np.int64) & 0x3F
    nbytes = ceil_div(c.size * 6, 8)
    out = np.zeros(nbytes, np.uint8)
    for i, v in enumerate(c.tolist()):
        bit = 6 * i
        word = v << (bit % 8)
        out[bit // 8] |= word & 0xFF
        if word >> 8:
            out[bit // 8 + 1] |= word >> 8
    return out


def unpack6(raw, count: int) -> np.ndarray:
    stream = int.from_bytes(bytes(np.asarray(raw, np.uint8).reshape(-1)), "little")
    return np.array([(stream >> (6 * i)) & 0x3F for i in range(count)], np.uint8)


def swap_nibbles(raw) -> np.ndarray:
    """hurray (element 2k low nibble) <-> bitsandbytes (element 2k high nibble)."""
    raw = np.asarray(raw, np.uint8)
    return ((raw & 0x0F) << 4 | (raw >> 4)).astype(np.uint8)


# ----------------------------------------------------------- affine kinds

CODE_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int4": (-8, 7), "uint4": (0, 15)}
SYM_P = {"int8": 127, "uint8": 127, "int4": 7, "uint4": 7}
SYM_ZP = {"int8": 0, "uint8": 128, "int4": 0, "uint4": 8}
SCALE_DTYPE = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}
# [smallest normal, largest finite] of each scale dtype, as float32.
SCALE_RANGE = {
    "float32": (F32(2.0**-126), F32(np.finfo(np.float32).max)),
    "float16": (F32(2.0**-14), F32(65504.0)),
    "bfloat16": (F32(2.0**-126), F32(float(ml_dtypes.finfo(ml_dtypes.bfloat16).max))),
}


def default_symmetric(dtype: str) -> bool:
    return dtype in ("int8", "int4")


def _round_scale(scale_f32: np.ndarray, scale_dtype: str) -> np.ndarray:
    lo, hi = SCALE_RANGE[scale_dtype]
    s = np.clip(np.asarray(scale_f32, np.float32), lo, hi)  # inf -> hi; never NaN here
    return s.astype(SCALE_DTYPE[scale_dtype])


def _symmetric_fit(scales: np.ndarray, p: int) -> np.ndarray:
    """§6.2 step 2's last rule: each scale whose P multiple is infinite in
    binary32 becomes the next smaller value of its type."""
    out = np.array(scales, copy=True)
    with np.errstate(over="ignore"):
        while (bad := np.isinf(F32(p) * out.astype(np.float32))).any():
            out[bad] = np.nextafter(out[bad], out.dtype.type(0))
    return out


def affine_params(groups: np.ndarray, dtype: str, symmetric: bool, scale_dtype: str):
    """groups: float32 (G, n) -> (scales in scale dtype (G,), zero points int64 (G,))."""
    qmin, qmax = CODE_RANGE[dtype]
    g = groups.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        if symmetric:
            amax = np.max(np.abs(g), axis=-1, initial=F32(0))
            scale = (amax / F32(SYM_P[dtype])).astype(np.float32)
            scales = _symmetric_fit(_round_scale(scale, scale_dtype), SYM_P[dtype])
            zps = np.full(scales.shape, SYM_ZP[dtype], np.int64)
        else:
            lo = np.min(g, axis=-1, initial=F32(0)).astype(np.float32)
            hi = np.max(g, axis=-1, initial=F32(0)).astype(np.float32)
            scale = ((hi - lo) / F32(qmax - qmin)).astype(np.float32)
            scales = _round_scale(scale, scale_dtype)
            s_r = scales.astype(np.float32)
            r = np.rint((lo / s_r).astype(np.float32)).astype(np.float64)
            zps = np.clip(qmin - r, qmin, qmax).astype(np.int64)
    return scales, zps


def affine_codes(x: np.ndarray, scale, zp, dtype: str) -> np.ndarray:
    """code = clamp(zp + rne(x * (1.0f / scale)), qmin, qmax); scale/zp broadcast to x."""
    qmin, qmax = CODE_RANGE[dtype]
    s = np.asarray(scale).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        inv = (F32(1.0) / s).astype(np.float32)
        r = np.rint((x.astype(np.float32) * inv).astype(np.float32)).astype(np.float64)
    return np.clip(np.asarray(zp, np.float64) + r, qmin, qmax).astype(np.int64)


def affine_dequantize(codes, scale, zp) -> np.ndarray:
    """(float)(code - zp) * scale in float32; scale/zp broadcast to codes."""
    diff = (np.asarray(codes, np.int64) - np.asarray(zp, np.int64)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        return (diff * np.asarray(scale).astype(np.float32)).astype(np.float32)


def per_tensor(x, dtype="int8", symmetric=None, scale_dtype="float32"):
    """-> codes int64 (x.shape), scale (float32 scalar), zero point (int)."""
    x = as_f32(x)
    _finite_or_raise(x)
    symmetric = default_symmetric(dtype) if symmetric is None else symmetric
    scales, zps = affine_params(x.reshape(1, -1), dtype, symmetric, scale_dtype)
    codes = affine_codes(x, scales[0], zps[0], dtype)
    return codes, scales[0], int(zps[0])


def per_channel(x, dtype="int8", axis=0, symmetric=None, scale_dtype="float32"):
    """-> codes int64 (x.shape), scales (C,) in scale dtype, zero points int64 (C,)."""
    x = as_f32(x)
    _finite_or_raise(x)
    symmetric = default_symmetric(dtype) if symmetric is None else symmetric
    axis = axis % x.ndim
    moved = np.moveaxis(x, axis, 0)
    groups = moved.reshape(moved.shape[0], -1)
    scales, zps = affine_params(groups, dtype, symmetric, scale_dtype)
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    codes = affine_codes(x, scales.reshape(shape), zps.reshape(shape), dtype)
    return codes, scales, zps


def _blocks_last(x: np.ndarray, block: int):
    """Yield (b, slice) of the blocks along the last axis."""
    n = x.shape[-1]
    for b in range(ceil_div(n, block)):
        yield b, slice(b * block, min(n, (b + 1) * block))


def block_affine(x, dtype="int8", axis=-1, block_size=32, symmetric=None, scale_dtype="float32"):
    """-> codes int64 (x.shape), scales (blocked shape), zero points int64 (blocked shape)."""
    x = as_f32(x)
    _finite_or_raise(x)
    symmetric = default_symmetric(dtype) if symmetric is None else symmetric
    axis = axis % x.ndim
    m = np.moveaxis(x, axis, -1)
    nb = ceil_div(m.shape[-1], block_size)
    scales = np.zeros(m.shape[:-1] + (nb,), SCALE_DTYPE[scale_dtype])
    zps = np.zeros(m.shape[:-1] + (nb,), np.int64)
    codes = np.zeros(m.shape, np.int64)
    lead = int(np.prod(m.shape[:-1], dtype=np.int64))
    for b, sl in _blocks_last(m, block_size):
        blk = m[..., sl].reshape(lead, -1)
        s, z = affine_params(blk, dtype, symmetric, scale_dtype)
        scales[..., b] = s.reshape(m.shape[:-1])
        zps[..., b] = z.reshape(m.shape[:-1])
        codes[..., sl] = affine_codes(
            m[..., sl], s.reshape(m.shape[:-1] + (1,)), z.reshape(m.shape[:-1] + (1,)), dtype
        )
    return (np.moveaxis(codes, -1, axis), np.moveaxis(scales, -1, axis), np.moveaxis(zps, -1, axis))


def block_dequantize(codes, scales, zps, axis, block_size, dtype_out=np.float32):
    shape = np.shape(codes)
    axis = axis % len(shape)
    s = expand_blocks(np.asarray(scales), axis, block_size, shape)
    z = expand_blocks(np.asarray(zps), axis, block_size, shape)
    return affine_dequantize(codes, s, z)


def per_channel_dequantize(codes, scales, zps, axis):
    shape = np.shape(codes)
    axis = axis % len(shape)
    bshape = [1] * len(shape)
    bshape[axis] = shape[axis]
    return affine_dequantize(
        codes, np.asarray(scales).reshape(bshape), np.asarray(zps).reshape(bshape)
    )


# ------------------------------------------------------------ q8_0 / q4_0


def roundf(v: np.ndarray) -> np.ndarray:
    """C roundf of float32 values: half away from zero (exact in float64)."""
    v = np.asarray(v, np.float64)
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def q8_0(x):
    """ggml quantize_row_q8_0_ref along the last axis, last block possibly shorter.
    -> codes int64 (x.shape), scales float16 (..., nblocks)."""
    x = as_f32(x)
    _finite_or_raise(x)
    n = x.shape[-1]
    nb = ceil_div(n, 32)
    codes = np.zeros(x.shape, np.int64)
    scales = np.zeros(x.shape[:-1] + (nb,), np.float16)
    for b, sl in _blocks_last(x, 32):
        blk = x[..., sl]
        amax = np.max(np.abs(blk), axis=-1, keepdims=True)
        d = (amax / F32(127)).astype(np.float32)
        with np.errstate(divide="ignore", over="ignore"):
            inv = np.where(d == 0, F32(0), F32(1) / d).astype(np.float32)
        inv = np.where(np.isfinite(inv), inv, F32(0))  # spec §6.3/§6.4: overflowing 1/d -> 0
        with np.errstate(invalid="ignore", over="ignore"):
            r = roundf((blk * inv).astype(np.float32))
        # 1/d overflows to inf when amax < ~127 * 2^-128: ggml's codes are then
        # undefined (float -> int8 of inf/NaN); their scale is float16 0, so the
        # decoded block is 0 whatever they are. Here: NaN -> 0, +-inf clamped.
        codes[..., sl] = np.clip(
            np.nan_to_num(r, nan=0.0, posinf=127, neginf=-128), -128, 127
        ).astype(np.int64)
        with np.errstate(over="ignore"):
            scales[..., b] = d[..., 0].astype(np.float16)
    return codes, scales


def q4_0(x):
    """ggml quantize_row_q4_0_ref along the last axis. -> codes int64 0..15, scales float16."""
    x = as_f32(x)
    _finite_or_raise(x)
    n = x.shape[-1]
    nb = ceil_div(n, 32)
    codes = np.zeros(x.shape, np.int64)
    scales = np.zeros(x.shape[:-1] + (nb,), np.float16)
    for b, sl in _blocks_last(x, 32):
        blk = x[..., sl]
        # ggml: scan in order from mx = +0, replace on a strictly larger |x|: the
        # first element of largest magnitude, and +0 for a block of (signed) zeros
        imax = np.argmax(np.abs(blk), axis=-1)[..., None]
        mx = np.take_along_axis(blk, imax, axis=-1)
        mx = np.where(mx == 0, F32(0), mx).astype(np.float32)
        d = (mx / F32(-8)).astype(np.float32)
        with np.errstate(divide="ignore", over="ignore"):
            inv = np.where(d == 0, F32(0), F32(1) / d).astype(np.float32)
        inv = np.where(np.isfinite(inv), inv, F32(0))  # spec §6.3/§6.4: overflowing 1/d -> 0
        with np.errstate(invalid="ignore", over="ignore"):
            t = np.trunc(((blk * inv).astype(np.float32) + F32(8.5)).astype(np.float32))
        # (codes undefined in ggml when 1/d overflows, as for q8_0; scale is 0 there)
        codes[..., sl] = np.clip(np.nan_to_num(t, nan=0.0, posinf=15, neginf=0), 0, 15).astype(
            np.int64
        )
        with np.errstate(over="ignore"):
            scales[..., b] = d[..., 0].astype(np.float16)
    return codes, scales


def inverse_overflows(scales_like_d: np.ndarray) -> np.ndarray:
    """Where 1.0f / d is inf for the float32 d of a q8_0 / q4_0 block."""
    with np.errstate(divide="ignore", over="ignore"):
        d = np.asarray(scales_like_d, np.float32)
        return (d != 0) & np.isinf(F32(1) / d)


def q_block_d(x, scheme: str) -> np.ndarray:
    """The float32 d of each q8_0 (amax / 127) or q4_0 (max / -8) block along the
    last axis, before its rounding to float16."""
    x = as_f32(x)
    out = np.zeros(x.shape[:-1] + (ceil_div(x.shape[-1], 32),), np.float32)
    for b, sl in _blocks_last(x, 32):
        blk = x[..., sl]
        if scheme == "q8_0":
            out[..., b] = np.max(np.abs(blk), axis=-1) / F32(127)
        else:
            imax = np.argmax(np.abs(blk), axis=-1)[..., None]
            mx = np.take_along_axis(blk, imax, axis=-1)[..., 0]
            out[..., b] = np.where(mx == 0, F32(0), mx).astype(np.float32) / F32(-8)
    return out


def q_dequantize(codes, scales_f16, zero_point: int) -> np.ndarray:
    """(code - zp) * float32(scale), blocks of 32 along the last axis."""
    codes = np.asarray(codes)
    s = expand_blocks(np.asarray(scales_f16).astype(np.float32), codes.ndim - 1, 32, codes.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        return ((codes.astype(np.int64) - zero_point).astype(np.float32) * s).astype(np.float32)


def gguf_q8_0_blocks(codes, scales_f16) -> np.ndarray:
    """hurray q8_0 codes (..., n) + scales (..., n/32) -> GGUF block bytes (..., n/32*34)."""
    codes = np.asarray(codes).astype(np.int8)
    assert codes.shape[-1] % 32 == 0
    nb = codes.shape[-1] // 32
    q = codes.reshape(codes.shape[:-1] + (nb, 32)).view(np.uint8)
    d = (
        np.ascontiguousarray(np.asarray(scales_f16, np.float16))
        .reshape(codes.shape[:-1] + (nb, 1))
        .view(np.uint8)
    )
    return np.concatenate([d, q], axis=-1).reshape(codes.shape[:-1] + (nb * 34,))


def gguf_q4_0_blocks(codes, scales_f16) -> np.ndarray:
    """hurray q4_0 codes (unpacked, ..., n) + scales -> GGUF block bytes (..., n/32*18):
    byte j of a block = element j (low nibble) | element j+16 (high nibble)."""
    codes = np.asarray(codes).astype(np.uint8)
    assert codes.shape[-1] % 32 == 0
    nb = codes.shape[-1] // 32
    q = codes.reshape(codes.shape[:-1] + (nb, 32))
    qs = (q[..., :16] & 0xF) | ((q[..., 16:] & 0xF) << 4)
    d = (
        np.ascontiguousarray(np.asarray(scales_f16, np.float16))
        .reshape(codes.shape[:-1] + (nb, 1))
        .view(np.uint8)
    )
    return np.concatenate([d, qs.astype(np.uint8)], axis=-1).reshape(codes.shape[:-1] + (nb * 18,))


def hurray_packed_to_gguf_q4_0(packed, shape, scales_f16) -> np.ndarray:
    """The same, starting from hurray's packed buffer (low nibble first, row-major)."""
    codes = unpack4(packed, math.prod(shape)).reshape(shape)
    return gguf_q4_0_blocks(codes, scales_f16)


# ------------------------------------------------------------------- NF4

NF4_TABLE = np.array(
    [
        -1.0,
        -0.6961928009986877,
        -0.5250730514526367,
        -0.39491748809814453,
        -0.28444138169288635,
        -0.18477343022823334,
        -0.09105003625154495,
        0.0,
        0.07958029955625534,
        0.16093020141124725,
        0.24611230194568634,
        0.33791524171829224,
        0.44070982933044434,
        0.5626170039176941,
        0.7229568362236023,
        1.0,
    ],
    dtype=np.float32,
)
NF4_MIDPOINTS = ((NF4_TABLE[:-1] + NF4_TABLE[1:]) / F32(2)).astype(np.float32)


def nf4(x, block_size=64):
    """-> codes int64 0..15 (x.shape), absmax float32 (ceil(numel/block),)."""
    x = as_f32(x)
    _finite_or_raise(x)
    flat = x.reshape(-1)
    nb = ceil_div(flat.size, block_size)
    codes = np.zeros(flat.size, np.int64)
    absmax = np.zeros(nb, np.float32)
    for b in range(nb):
        blk = flat[b * block_size : (b + 1) * block_size]
        a = np.max(np.abs(blk)).astype(np.float32)
        with np.errstate(divide="ignore", over="ignore"):
            inv = F32(0) if a == 0 else (F32(1) / a).astype(np.float32)
        if not np.isfinite(inv):
            inv = F32(0)  # spec §6.5: an absmax whose inverse overflows encodes as zeros
        with np.errstate(invalid="ignore", over="ignore"):
            y = (blk * inv).astype(np.float32)
        # number of midpoints T with y > T (NaN, from 0 * inf, counts none)
        codes[b * block_size : (b + 1) * block_size] = (y[:, None] > NF4_MIDPOINTS[None, :]).sum(1)
        absmax[b] = a
    return codes.reshape(x.shape), absmax


def nf4_dequantize(codes, absmax, block_size=64) -> np.ndarray:
    codes = np.asarray(codes)
    flat = codes.reshape(-1).astype(np.int64)
    a = np.repeat(np.asarray(absmax, np.float32), block_size)[: flat.size]
    return (NF4_TABLE[flat] * a).astype(np.float32).reshape(codes.shape)


# -------------------------------------------------------------------- MX

# scheme -> element name, ml_dtypes type (None: int8), emax, element max, bits
MX = {
    "mxfp8_e4m3": ("fp8_e4m3", ml_dtypes.float8_e4m3fn, 8, 448.0, 8),
    "mxfp8_e5m2": ("fp8_e5m2", ml_dtypes.float8_e5m2, 15, 57344.0, 8),
    "mxfp6_e3m2": ("fp6_e3m2", ml_dtypes.float6_e3m2fn, 4, 28.0, 6),
    "mxfp6_e2m3": ("fp6_e2m3", ml_dtypes.float6_e2m3fn, 2, 7.5, 6),
    "mxfp4": ("fp4_e2m1", ml_dtypes.float4_e2m1fn, 2, 6.0, 4),
    "mxint8": ("int8", None, 0, 127 / 64, 8),
}
MX_SCHEMES = tuple(MX)


def float32_exponent(a: np.ndarray) -> np.ndarray:
    """Biased exponent field - 127 of float32 values (0 and subnormals: -127)."""
    bits = np.ascontiguousarray(np.asarray(a, np.float32)).view(np.uint32)
    return ((bits >> np.uint32(23)) & np.uint32(0xFF)).astype(np.int64) - 127


def mx_element_encode(y: np.ndarray, scheme: str) -> np.ndarray:
    """Element codes of already-scaled values y (float32, finite)."""
    _, ml, _, mx, _ = MX[scheme]
    y = np.asarray(y, np.float32)
    if ml is None:
        return np.clip(np.rint((y * F32(64)).astype(np.float32)), -127, 127).astype(np.int8)
    return np.clip(y, F32(-mx), F32(mx)).astype(ml)


def mx_element_decode(codes, scheme: str) -> np.ndarray:
    """float64 values of element codes (ml_dtypes array, or int8 for MXINT8)."""
    _, ml, _, _, _ = MX[scheme]
    codes = np.asarray(codes)
    if ml is None:
        return codes.astype(np.int8).astype(np.float64) / 64.0
    return codes.astype(ml).astype(np.float64)


def mx_quantize(x, scheme: str, axis: int = -1):
    """-> codes (ml_dtypes array or int8, x.shape), scale bytes uint8 (blocked shape)."""
    _, ml, emax, _, _ = MX[scheme]
    x = as_f32(x)
    axis = axis % x.ndim
    m = np.moveaxis(x, axis, -1)
    nb = ceil_div(m.shape[-1], 32)
    scale = np.zeros(m.shape[:-1] + (nb,), np.uint8)
    codes = np.zeros(m.shape, np.uint8)
    for b, sl in _blocks_last(m, 32):
        blk = m[..., sl]
        finite = np.all(np.isfinite(blk), axis=-1)
        amax = np.max(np.where(np.isfinite(blk), np.abs(blk), F32(0)), axis=-1)
        shared = np.clip(float32_exponent(amax) - emax, -127, 127)
        # y = x * 2^-shared, exact in float64, then float32 (rounds only on underflow)
        with np.errstate(invalid="ignore", over="ignore"):
            y = (blk.astype(np.float64) * np.ldexp(1.0, -shared)[..., None]).astype(np.float32)
        y = np.where(finite[..., None], y, F32(0))
        c = mx_element_encode(y, scheme).view(np.uint8)
        codes[..., sl] = np.where(finite[..., None], c, np.uint8(0))
        scale[..., b] = np.where(finite, shared + 127, 0xFF).astype(np.uint8)
    codes = np.ascontiguousarray(np.moveaxis(codes, -1, axis))
    codes = codes.view(ml if ml is not None else np.int8)
    return codes, np.ascontiguousarray(np.moveaxis(scale, -1, axis))


def mx_dequantize(codes, scale_bytes, scheme: str, axis: int = -1) -> np.ndarray:
    """element(code) * 2^(s - 127) in float32; s = 0xFF -> NaN for the block."""
    codes = np.asarray(codes)
    axis = axis % codes.ndim
    s = expand_blocks(np.asarray(scale_bytes, np.uint8), axis, 32, codes.shape).astype(np.int64)
    v = mx_element_decode(codes, scheme)
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.where(s == 0xFF, np.nan, v * np.ldexp(1.0, s - 127))
        return out.astype(np.float32)  # the float64 product is exact; one rounding (overflow)


def mx_code_bytes(codes) -> np.ndarray:
    """The raw per-element code bits (uint8) of an ml_dtypes / int8 code array."""
    return np.ascontiguousarray(codes).view(np.uint8)


def mx_half_spacing(y: np.ndarray, scheme: str) -> np.ndarray:
    """Half the distance between consecutive representable element values around |y|
    (the maximum round-to-nearest error at that magnitude, within range)."""
    _, ml, _, _, _ = MX[scheme]
    if ml is None:
        return np.full(np.shape(y), 0.5 / 64)
    fi = ml_dtypes.finfo(ml)
    emin = int(fi.minexp)
    mbits = int(fi.nmant)
    a = np.abs(np.asarray(y, np.float64))
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    e = np.maximum(np.where(a > 0, e, emin), emin)
    return np.ldexp(0.5, (e - mbits).astype(np.int64))


def all_element_values(scheme: str) -> np.ndarray:
    """Every finite value of the element type, sorted, as float64 (no duplicates of 0)."""
    _, ml, _, _, bits = MX[scheme]
    if ml is None:
        return np.arange(-127, 128) / 64.0
    v = np.arange(1 << bits, dtype=np.uint8).view(ml).astype(np.float64)
    return np.unique(v[np.isfinite(v)])


# ------------------------------------------- worked examples (spec section 8)

# (scheme, keyword arguments, input, code buffer hex, scale buffer hex, zero point)
# Bytes as docs/spec/quantization.md section 8 gives them; the q4_0 example has
# the section 6.4 FMA case (-1.6500001, bits 0xBFD33334 -> code 3) appended.
WORKED_EXAMPLES = [
    ("affine", dict(dtype="int8"), [0.5, -1.27, 0.02, 0.625], "3281023e", "0ad7233c", 0),
    ("affine", dict(dtype="uint8"), [-0.5, 0.1, 2.0, 0.75], "003dff7f", "a1a0203c", 51),
    ("q8_0", {}, [0.5, -1.27, 0.02, 0.005], "32810201", "1f21", 0),
    ("q4_0", {}, [-2.4, 0.5, 1.0, 2.4, 0.0, -0.3, -1.6500001], "a0fb7803", "cd34", 8),
    ("nf4", dict(block_size=4), [0.4, -0.8, 0.1, 2.0], "39f8", "00000040", None),
    ("mxfp4", {}, [0.5, -3.1, 15.0, 0.75], "b017", "80", None),
    ("mxfp8_e4m3", {}, [1000.0, -0.01, 3.3, 0.0], "7e833d00", "80", None),
    ("mxfp6_e2m3", {}, [1.0, -0.3, 7.5, 2.25], "88f845", "7f", None),
    ("mxint8", {}, [0.3, -1.0, 0.015, 2.5], "0ae00050", "80", None),
    ("mxfp8_e5m2", {}, [1.0, float("nan"), 2.0], "000000", "ff", None),
]


def reference_bytes(scheme: str, kwargs: dict, x):
    """(code buffer bytes, scale bytes, zero point) the references give for a 1-d input."""
    x = as_f32(x)
    if scheme == "affine":
        codes, scale, zp = per_tensor(x, kwargs.get("dtype", "int8"))
        return (
            codes.astype(np.int8 if kwargs.get("dtype") == "int8" else np.uint8).tobytes(),
            np.float32(scale).tobytes(),
            zp,
        )
    if scheme == "q8_0":
        codes, scales = q8_0(x)
        return codes.astype(np.int8).tobytes(), scales.tobytes(), 0
    if scheme == "q4_0":
        codes, scales = q4_0(x)
        return pack4(codes).tobytes(), scales.tobytes(), 8
    if scheme == "nf4":
        codes, absmax = nf4(x, kwargs.get("block_size", 64))
        return pack4(codes).tobytes(), absmax.tobytes(), None
    codes, scale = mx_quantize(x, scheme)
    raw = mx_code_bytes(codes)
    bits = MX[scheme][4]
    packed = pack4(raw) if bits == 4 else pack6(raw) if bits == 6 else raw
    return packed.tobytes(), scale.tobytes(), None
