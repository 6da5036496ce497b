"""hurray.quantize, Tensor.dequantize / numpy / scales / zero_points, checked
bit for bit against the peers and the numpy references of quant_reference.py
(themselves checked against the peers in test_quant_reference.py):

  * ml_dtypes: every code of every MX element type and all 256 E8M0 scale
    bytes decode like ml_dtypes; encoding is ml_dtypes' saturating cast;
  * bitsandbytes (NF4, CPU): codes (nibbles swapped), absmax, values;
  * torch.quantize_per_channel (int8 / uint8): codes and dequantized values;
  * gguf.quants (Q8_0, Q4_0): block bytes and dequantized values;
  * the references for everything else, and the edge cases (zeros, NaN/Inf,
    denormals, extreme magnitudes, partial blocks, rank 0, empty, narrow float
    inputs, threads), hypothesis error bounds and file round trips."""

import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import quant_reference as ref
from _hurray_samples import aligned
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import hurray
from hurray import Buffer, Descriptor, Mxfp, Nf4

# The peers are optional: the tests that need one skip without it.
try:
    import torch
except ImportError:  # pragma: no cover
    torch = None
try:
    import bitsandbytes.functional as bnbf
except Exception:  # pragma: no cover - missing, or no usable backend
    bnbf = None
try:
    import gguf.quants as gguf_quants
    from gguf import GGMLQuantizationType as GQ
except ImportError:  # pragma: no cover
    gguf_quants = GQ = None

needs_torch = pytest.mark.skipif(torch is None, reason="needs torch")
needs_bnb = pytest.mark.skipif(bnbf is None or torch is None, reason="needs bitsandbytes")
needs_gguf = pytest.mark.skipif(gguf_quants is None, reason="needs gguf")

pytestmark = [
    pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning"),
    pytest.mark.filterwarnings("ignore::RuntimeWarning:gguf"),
]

AFFINE = ("affine", "per_channel", "block_affine")
SCHEMES = AFFINE + ("q8_0", "q4_0", "nf4") + ref.MX_SCHEMES
FP_SCHEMES = tuple(s for s in ref.MX_SCHEMES if s != "mxint8")
AXIS_SCHEMES = ("per_channel", "block_affine", "q8_0", "q4_0") + ref.MX_SCHEMES
CODE_DTYPES = ("int8", "uint8", "int4", "uint4")
SCALE_DTYPES = ("float32", "float16", "bfloat16")
HURRAY_DTYPE = {
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "fp6_e3m2": "float6_e3m2fn",
    "fp6_e2m3": "float6_e2m3fn",
    "fp4_e2m1": "float4_e2m1fn",
    "int8": "int8",
}
FLT_MAX = np.finfo(np.float32).max
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------ helpers


def varied(shape, seed, spread=6):
    """float32 data whose magnitudes vary over 2^(+-spread) element by element."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, size=shape))
    return x.astype(np.float32)


def assert_same_floats(got, want, what="values"):
    """Same dtype, shape, NaN positions, and bits everywhere else (signed zeros too)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    gnan = np.isnan(got.astype(np.float64))
    wnan = np.isnan(want.astype(np.float64))
    np.testing.assert_array_equal(gnan, wnan, err_msg=f"{what}: NaN positions")
    u = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[got.dtype.itemsize]
    gb = np.where(gnan, 0, np.ascontiguousarray(got).view(u))
    wb = np.where(wnan, 0, np.ascontiguousarray(want).view(u))
    bad = np.argwhere(gb != wb)
    assert bad.size == 0, (
        f"{what}: {len(bad)} differ, first at {tuple(bad[0])}: "
        f"{got[tuple(bad[0])]!r} != {want[tuple(bad[0])]!r}"
    )


def code_array(t, scheme):
    """Comparable codes: raw element bits (uint8) for MX, int64 otherwise."""
    codes = t.codes()
    if scheme in ref.MX:
        return np.ascontiguousarray(codes).view(np.uint8)
    return np.asarray(codes).astype(np.int64)


def expected(scheme, x, axis=None, block_size=None, dtype=None, scale_dtype=None, symmetric=None):
    """What the references give: dict(codes, scales, zps, deq) comparable with
    code_array(t), t.scales(), t.zero_points(), t.dequantize()."""
    x = ref.as_f32(x)
    if scheme == "affine":
        dtype = dtype or "int8"
        c, s, z = ref.per_tensor(x, dtype, symmetric)
        return dict(
            codes=c, scales=np.array(float(s)), zps=np.array(z), deq=ref.affine_dequantize(c, s, z)
        )
    if scheme == "per_channel":
        dtype, axis = dtype or "int8", 0 if axis is None else axis
        c, s, z = ref.per_channel(x, dtype, axis, symmetric, scale_dtype or "float32")
        return dict(codes=c, scales=s, zps=z, deq=ref.per_channel_dequantize(c, s, z, axis))
    if scheme == "block_affine":
        dtype, axis = dtype or "int8", -1 if axis is None else axis
        block_size = block_size or 32
        c, s, z = ref.block_affine(x, dtype, axis, block_size, symmetric, scale_dtype or "float32")
        return dict(codes=c, scales=s, zps=z, deq=ref.block_dequantize(c, s, z, axis, block_size))
    if scheme in ("q8_0", "q4_0"):
        c, s = (ref.q8_0 if scheme == "q8_0" else ref.q4_0)(x)
        zp = 0 if scheme == "q8_0" else 8
        return dict(
            codes=c, scales=s, zps=np.full(s.shape, zp, np.int64), deq=ref.q_dequantize(c, s, zp)
        )
    if scheme == "nf4":
        block_size = block_size or 64
        c, a = ref.nf4(x, block_size)
        return dict(codes=c, scales=a, zps=None, deq=ref.nf4_dequantize(c, a, block_size))
    axis = -1 if axis is None else axis
    c, s = ref.mx_quantize(x, scheme, axis)
    return dict(
        codes=ref.mx_code_bytes(c), scales=s, zps=None, deq=ref.mx_dequantize(c, s, scheme, axis)
    )


def check(t, x, scheme, undefined_codes=None, **kw):
    """Every part of t equals the reference; undefined_codes (bool, x.shape) marks
    codes the rules leave unspecified (q8_0/q4_0 blocks whose 1/d overflows)."""
    want = expected(scheme, x, **kw)
    assert t.shape == np.shape(x)
    codes = code_array(t, scheme)
    assert codes.shape == want["codes"].shape
    deq = t.dequantize()
    if undefined_codes is not None:
        codes = np.where(undefined_codes, 0, codes)
        want["codes"] = np.where(undefined_codes, 0, want["codes"])
        # their scale is float16 0: the values are zeros of either sign
        assert np.all(deq[undefined_codes] == 0)
        deq = np.where(undefined_codes, np.float32(0), deq)
        want["deq"] = np.where(undefined_codes, np.float32(0), want["deq"])
    np.testing.assert_array_equal(codes, want["codes"], err_msg=f"{scheme} codes")
    scales = t.scales()
    if scheme in ref.MX:
        assert scales.dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
        np.testing.assert_array_equal(
            scales.view(np.uint8), want["scales"], err_msg=f"{scheme} scale bytes"
        )
    elif scheme == "affine":
        assert scales.shape == () and scales.dtype == np.float64
        assert float(scales) == float(want["scales"])
    else:
        assert_same_floats(scales, want["scales"], f"{scheme} scales")
    if want["zps"] is not None:
        zps = t.zero_points()
        assert zps.dtype == np.int64 and zps.shape == np.shape(want["zps"])
        np.testing.assert_array_equal(zps, want["zps"], err_msg=f"{scheme} zero points")
    assert_same_floats(deq, want["deq"], f"{scheme} dequantized")
    return want


def q_undefined(x, scheme):
    """q8_0 / q4_0 elements whose block's 1/d overflows (codes undefined in ggml)."""
    if scheme not in ("q8_0", "q4_0"):
        return None
    d = ref.q_block_d(x, scheme)
    x = np.asarray(x)
    return ref.expand_blocks(ref.inverse_overflows(d), x.ndim - 1, 32, x.shape)


def same_tensor(u, t):
    assert u.descriptor == t.descriptor
    assert u.descriptor.encode() == t.descriptor.encode()
    assert len(u.buffers) == len(t.buffers)
    for i, (a, b) in enumerate(zip(u.buffers, t.buffers)):
        assert bytes(a) == bytes(b), f"buffer {i}"


def mx_tensor(scheme, codes_u8, scale_bytes, shape, axis=-1):
    """A hand-built MX tensor: codes (raw bits, row-major) and E8M0 scale bytes."""
    element, _, _, _, bits = ref.MX[scheme]
    codes_u8 = np.asarray(codes_u8, np.uint8).reshape(-1)
    data = ref.pack4(codes_u8) if bits == 4 else ref.pack6(codes_u8) if bits == 6 else codes_u8
    scale_bytes = np.asarray(scale_bytes, np.uint8).reshape(-1)
    d = Descriptor(
        HURRAY_DTYPE[element],
        shape,
        quantization=Mxfp(element, axis % len(shape), 1),
        buffers=[Buffer("data", data.size), Buffer("scales", scale_bytes.size)],
    )
    return hurray.Tensor(d, [aligned(data), aligned(scale_bytes)])


def element_values(scheme, codes_u8):
    """float32 element values of raw codes, by ml_dtypes (MXINT8: code / 64)."""
    _, ml, _, _, _ = ref.MX[scheme]
    codes_u8 = np.asarray(codes_u8, np.uint8)
    if ml is None:
        return (codes_u8.view(np.int8).astype(np.float32) / np.float32(64)).astype(np.float32)
    return codes_u8.view(ml).astype(np.float32)


# ------------------------------------------------------------ the API surface


def test_scheme_names():
    assert set(hurray.QUANT_SCHEMES) == set(SCHEMES)
    assert len(hurray.QUANT_SCHEMES) == len(SCHEMES)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_descriptor_and_buffers_of_each_scheme(scheme):
    x = varied((4, 70), seed=1)
    t = hurray.quantize(x, scheme)
    d = t.descriptor
    q = d.quantization
    d.validate()
    assert d.shape == (4, 70)
    assert [b.role for b in d.buffers] == ["data", "scales", "zero_points"][: len(d.buffers)]
    if scheme == "affine":
        assert isinstance(q, hurray.PerTensorAffine)
        assert (d.dtype, len(d.buffers)) == ("int8", 1)
        assert (q.scale, q.zero_point) == (float(t.scales()), int(t.zero_points()))
    elif scheme == "per_channel":
        assert isinstance(q, hurray.PerChannelAffine)
        assert (d.dtype, q.axis, q.scale_dtype, q.zero_point_buffer, q.zero_point) == (
            "int8",
            0,
            "float32",
            None,
            0,
        )
        assert t.scales().shape == (4,) and len(d.buffers) == 2
    elif scheme in ("block_affine", "q8_0", "q4_0"):
        assert isinstance(q, hurray.BlockAffine)
        assert (q.axis, q.block_size, q.zero_point_buffer) == (1, 32, None)
        want = {
            "block_affine": ("int8", "float32", 0),
            "q8_0": ("int8", "float16", 0),
            "q4_0": ("uint4", "float16", 8),
        }[scheme]
        assert (d.dtype, q.scale_dtype, q.zero_point) == want
        assert t.scales().shape == (4, 3) and len(d.buffers) == 2
    elif scheme == "nf4":
        assert isinstance(q, Nf4)
        assert (d.dtype, q.block_size, q.absmax_dtype) == ("uint4", 64, "float32")
        assert t.scales().shape == (5,) and len(d.buffers) == 2
    else:
        element = ref.MX[scheme][0]
        assert q == Mxfp(element, 1, 1, 32)
        assert d.dtype == HURRAY_DTYPE[element]
        assert t.scales().shape == (4, 3) and len(d.buffers) == 2
    assert all(len(b) >= r for b, r in zip(t.buffers, d.required_bytes()))


def test_asymmetric_zero_points_live_in_a_buffer_of_the_codes_dtype():
    x = varied((6, 40), seed=2)
    for dtype in CODE_DTYPES:
        t = hurray.quantize(x, "per_channel", dtype=dtype, symmetric=False)
        q = t.descriptor.quantization
        assert (q.zero_point_buffer, q.zero_point_dtype) == (2, dtype)
        assert t.descriptor.buffers[2].role == "zero_points" and len(t.buffers) == 3
    # unsigned codes default to asymmetric, signed to symmetric
    assert (
        hurray.quantize(x, "per_channel", dtype="uint8").descriptor.quantization.zero_point_buffer
        == 2
    )
    t = hurray.quantize(x, "block_affine", dtype="uint4", symmetric=True)
    assert (t.descriptor.quantization.zero_point_buffer, t.descriptor.quantization.zero_point) == (
        None,
        8,
    )
    t = hurray.quantize(x, "block_affine", dtype="uint8", symmetric=True)
    assert t.descriptor.quantization.zero_point == 128


@pytest.mark.parametrize(
    "scheme,kw",
    [
        ("q8_0", dict(axis=0)),
        ("q4_0", dict(axis=0)),
        ("q8_0", dict(block_size=16)),
        ("q4_0", dict(block_size=64)),
        ("q8_0", dict(scale_dtype="float32")),
        ("q4_0", dict(scale_dtype="bfloat16")),
        ("mxfp8_e4m3", dict(block_size=16)),
        ("mxint8", dict(block_size=64)),
        ("mxfp4", dict(block_size=31)),
        # no blocks at all: block_size was ignored without a word
        ("affine", dict(block_size=32)),
        ("per_channel", dict(block_size=64)),
        # a fixed zero point: symmetric was accepted and ignored
        ("q8_0", dict(symmetric=False)),
        ("q4_0", dict(symmetric=True)),
        ("nf4", dict(symmetric=False)),
        ("mxfp4", dict(symmetric=True)),
    ],
)
def test_fixed_options_are_refused(scheme, kw):
    with pytest.raises(hurray.InvalidArgumentError):
        hurray.quantize(np.ones((4, 64), np.float32), scheme, **kw)


def test_unknown_scheme_is_refused():
    with pytest.raises(ValueError):
        hurray.quantize(np.ones(4, np.float32), "q5_k")


# --------------------------------------- ml_dtypes: element decode, exhaustive


@pytest.mark.parametrize("scheme", ref.MX_SCHEMES)
def test_every_element_code_decodes_like_ml_dtypes(scheme):
    bits = ref.MX[scheme][4]
    n = 1 << bits
    codes = np.arange(n, dtype=np.uint8)
    grid = np.tile(codes, (3, 1))  # rows: scales 2^0, 2^-7, 2^9
    e8 = np.array([127, 120, 136], np.uint8)
    blocks = -(-n // 32)
    t = mx_tensor(scheme, grid, np.repeat(e8, blocks), grid.shape, axis=1)
    # codes(): the codes themselves, as the ml_dtypes element type (int8 for MXINT8)
    got_codes = t.codes()
    ml = ref.MX[scheme][1]
    assert got_codes.dtype == np.dtype(ml if ml is not None else np.int8)
    np.testing.assert_array_equal(np.ascontiguousarray(got_codes).view(np.uint8), grid)
    values = element_values(scheme, codes)
    want = values[None, :].astype(np.float64) * np.exp2(e8.astype(np.float64) - 127)[:, None]
    want = want.astype(np.float32)
    assert_same_floats(t.dequantize(), want, f"{scheme} elements")
    if scheme == "mxfp8_e4m3":
        assert np.isnan(t.dequantize()[:, [0x7F, 0xFF]]).all()
    if scheme == "mxfp8_e5m2":
        d = t.dequantize()
        assert np.isposinf(d[:, 0x7C]).all() and np.isneginf(d[:, 0xFC]).all()
        assert np.isnan(d[:, [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF]]).all()


@pytest.mark.parametrize("scheme", ["mxfp8_e4m3", "mxfp4", "mxfp6_e2m3", "mxint8"])
def test_every_e8m0_scale_byte_decodes_like_ml_dtypes(scheme):
    one = {"mxfp8_e4m3": 0x38, "mxfp4": 0x2, "mxfp6_e2m3": 0x8, "mxint8": 64}[scheme]
    assert element_values(scheme, np.array([one], np.uint8))[0] == 1.0
    e8 = np.arange(256, dtype=np.uint8)
    t = mx_tensor(scheme, np.full(256 * 32, one, np.uint8), e8, (256 * 32,))
    want = np.repeat(e8.view(ml_dtypes.float8_e8m0fnu).astype(np.float32), 32)
    assert_same_floats(t.dequantize(), want, "E8M0 scales")
    assert t.dequantize()[0] == np.float32(2.0**-127)  # a float32 subnormal
    assert np.isnan(t.dequantize()[255 * 32 :]).all()
    scales = t.scales()
    assert scales.dtype == np.dtype(ml_dtypes.float8_e8m0fnu)
    np.testing.assert_array_equal(scales.view(np.uint8), e8)


@pytest.mark.parametrize("scheme", ref.MX_SCHEMES)
def test_mx_dequantize_other_dtypes(scheme):
    x = varied((3, 50), seed=4, spread=20)
    t = hurray.quantize(x, scheme)
    f32 = t.dequantize()
    assert_same_floats(t.dequantize(np.float64), f32.astype(np.float64))
    assert_same_floats(t.dequantize(np.float16), f32.astype(np.float16))
    assert_same_floats(t.dequantize(ml_dtypes.bfloat16), f32.astype(ml_dtypes.bfloat16))


# ------------------------------------ ml_dtypes: encoding with the scale at 2^0


def element_sweep(scheme, seed):
    """Finite values with |v| < 2^(emax+1): uniform, log-uniform down past the
    smallest subnormal, every representable value, every midpoint (ties) and
    the floats next to the midpoints, signed zeros."""
    _, _, emax, top, _ = ref.MX[scheme]
    rng = np.random.default_rng(seed)
    limit = 2.0 ** (emax + 1)
    values = ref.all_element_values(scheme)
    pos = values[values > 0]
    mids = ((pos[:-1] + pos[1:]) / 2).astype(np.float32)
    mids = np.concatenate([mids, [pos[0] / 2, pos[0] / 4, pos[0] * 0.75]]).astype(np.float32)
    near = np.concatenate(
        [np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(0))]
    )
    logs = np.exp2(rng.uniform(-30, emax + 1, 1500)) * rng.choice([-1, 1], 1500)
    above = np.linspace(top, limit, 40, endpoint=False)  # saturate to +-top
    sweep = np.concatenate(
        [
            rng.uniform(-limit, limit, 1500),
            logs,
            values,
            mids,
            -mids,
            near,
            -near,
            above,
            -above,
            [0.0, -0.0, -1e-30, 1e-30, -1e-45],
        ]
    )
    sweep = sweep.astype(np.float32)
    return sweep[np.abs(sweep) < limit]


@pytest.mark.parametrize("scheme", ref.MX_SCHEMES)
def test_mx_element_encoding_matches_ml_dtypes(scheme):
    _, ml, _, top, _ = ref.MX[scheme]
    sweep = element_sweep(scheme, seed=len(scheme))
    rows = -(-sweep.size // 31)
    body = np.zeros(rows * 31, np.float32)
    body[: sweep.size] = sweep
    # every block holds the element max, so amax's exponent = emax: scale 2^0
    x = np.concatenate([np.full((rows, 1), top, np.float32), body.reshape(rows, 31)], axis=1)
    t = hurray.quantize(x, scheme)
    np.testing.assert_array_equal(t.scales().view(np.uint8), np.full((rows, 1), 127, np.uint8))
    if ml is None:
        want = np.clip(np.rint(x * np.float32(64)), -127, 127).astype(np.int8).view(np.uint8)
    else:
        want = np.clip(x, -top, top).astype(ml).view(np.uint8)  # ml_dtypes: RNE
    got = np.ascontiguousarray(t.codes()).view(np.uint8)
    bad = np.argwhere(got != want)
    assert bad.size == 0, (
        f"{len(bad)} codes differ; first: x={x[tuple(bad[0])]!r} "
        f"code {got[tuple(bad[0])]:#x} != {want[tuple(bad[0])]:#x}"
    )
    # and the values are ml_dtypes' values (times 2^0)
    assert_same_floats(t.dequantize(), element_values(scheme, want))
    # -0.0 keeps its sign bit (FP elements)
    if ml is not None:
        neg = x < 0
        assert np.all(np.signbit(t.dequantize())[neg])


# ---------------------------------------------- MX end to end vs the reference


def mx_data(shape, seed):
    """Random blocks spanning the float32 range: tiny, huge, subnormal, zero rows."""
    x = varied(shape, seed, spread=12)
    flat = x.reshape(-1)
    rng = np.random.default_rng(seed)
    n = flat.size
    for k, factor in enumerate([1e-38, 1e30, 2.0**-140, 1e-20, 1e33, 0.0]):
        lo = (k * 97) % max(n - 40, 1)
        flat[lo : lo + 40] *= np.float32(factor)
    flat[rng.integers(0, n, 8)] = np.float32(FLT_MAX) * rng.choice([-1, 1], 8)
    return x


@pytest.mark.parametrize("scheme", ref.MX_SCHEMES)
@pytest.mark.parametrize("axis", [-1, 0])
def test_mx_quantize_matches_reference(scheme, axis):
    x = mx_data((37, 70), seed=7)
    if axis == 0:
        x = np.ascontiguousarray(x.T)  # (70, 37): blocks of 32, 32, 6 down the columns
    t = hurray.quantize(x, scheme, axis=axis)
    assert t.descriptor.quantization.axis == axis % 2
    want = check(t, x, scheme, axis=axis)
    # buffer 0 is the codes packed in row-major order (4-bit low nibble first,
    # 6-bit little-endian stream), independently of Tensor.numpy()
    bits = ref.MX[scheme][4]
    packed = {4: ref.pack4, 6: ref.pack6}.get(bits, lambda c: np.asarray(c, np.uint8).ravel())
    raw = np.frombuffer(t.buffers[0], np.uint8)
    expect = packed(want["codes"])
    np.testing.assert_array_equal(raw[: expect.size], expect)
    np.testing.assert_array_equal(
        np.frombuffer(t.buffers[1], np.uint8)[: want["scales"].size], want["scales"].reshape(-1)
    )


# -------------------------------------------------------------- NF4 / bitsandbytes


def bnb_nf4(x, block=64):
    # Blocks run over the flat order, so bitsandbytes gets the flat array: its
    # CPU dequantize_4bit (0.50.2) is wrong for a rank-3 input whose last axis
    # is not a multiple of the block (checked against its own 1-D result).
    flat = np.array(x, np.float32).reshape(-1)
    q, state = bnbf.quantize_4bit(torch.from_numpy(flat), blocksize=block, quant_type="nf4")
    deq = bnbf.dequantize_4bit(q, state, quant_type="nf4")
    return q.numpy().reshape(-1), state.absmax.numpy(), deq.numpy()


@needs_bnb
@pytest.mark.parametrize("shape", [(64,), (8, 64), (3, 128), (16, 40), (2, 4, 96)])
def test_nf4_matches_bitsandbytes(shape):
    # whole, non-zero blocks (bitsandbytes divides in a partial last block and
    # clamps a zero absmax to 1e-38)
    x = varied(shape, seed=sum(shape))
    t = hurray.quantize(x, "nf4")
    q, absmax, deq = bnb_nf4(x)
    raw = np.frombuffer(t.buffers[0], np.uint8)[: q.size]
    np.testing.assert_array_equal(raw, ref.swap_nibbles(q))
    np.testing.assert_array_equal(
        code_array(t, "nf4").reshape(-1), ref.unpack4(ref.swap_nibbles(q), x.size)
    )
    assert_same_floats(t.scales(), absmax, "absmax")
    assert_same_floats(t.dequantize(), deq.reshape(shape), "dequantized")
    check(t, x, "nf4")


def test_nf4_table_equals_bitsandbytes():
    table = ref.NF4_TABLE
    if bnbf is not None:
        from bitsandbytes.backends.utils import CODE

        np.testing.assert_array_equal(CODE["nf4"].numpy(), table)
    # decode codes 0..15 with absmax 1 through a hand-built tensor
    d = Descriptor(
        "uint4",
        (16,),
        quantization=Nf4(64, 1, "float32"),
        buffers=[Buffer("data", 8), Buffer("scales", 4)],
    )
    t = hurray.Tensor(
        d, [aligned(ref.pack4(np.arange(16))), aligned(np.array([1.0], np.float32).view(np.uint8))]
    )
    assert_same_floats(t.dequantize(), table)
    # and the table values quantize to their own codes
    t = hurray.quantize(table, "nf4")
    np.testing.assert_array_equal(code_array(t, "nf4"), np.arange(16))


def test_nf4_ties_go_to_the_lower_code():
    mids = ref.NF4_MIDPOINTS
    x = np.concatenate(
        [
            [1.0],
            mids,
            np.nextafter(mids, np.float32(2)),
            np.nextafter(mids, np.float32(-2)),
            np.zeros(64 - 46),
        ]
    ).astype(np.float32)
    t = hurray.quantize(x, "nf4")
    codes = code_array(t, "nf4")
    np.testing.assert_array_equal(codes[1:16], np.arange(15))
    np.testing.assert_array_equal(codes[16:31], np.arange(1, 16))
    np.testing.assert_array_equal(codes[31:46], np.arange(15))
    if bnbf is None:
        return
    q, _, _ = bnb_nf4(x)
    np.testing.assert_array_equal(np.frombuffer(t.buffers[0], np.uint8)[:32], ref.swap_nibbles(q))


@pytest.mark.parametrize(
    "block_size,shape",
    [(64, (10, 20)), (32, (3, 45)), (128, (300,)), (100, (7, 30)), (64, (1,)), (64, (63,))],
)
def test_nf4_partial_blocks_and_block_sizes_match_reference(block_size, shape):
    x = varied(shape, seed=block_size)
    t = hurray.quantize(x, "nf4", block_size=block_size)
    assert t.descriptor.quantization.block_size == block_size
    assert t.scales().shape == (-(-x.size // block_size),)
    check(t, x, "nf4", block_size=block_size)


# -------------------------------------------------- per_channel vs torch

TORCH_QDTYPE = {"int8": "qint8", "uint8": "quint8"}


@needs_torch
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("scale_dtype", SCALE_DTYPES)
def test_per_channel_matches_torch(dtype, symmetric, axis, scale_dtype):
    x = varied((6, 5, 40), seed=3)
    x[1] = np.abs(x[1])
    t = hurray.quantize(
        x, "per_channel", axis=axis, dtype=dtype, symmetric=symmetric, scale_dtype=scale_dtype
    )
    q = t.descriptor.quantization
    assert (q.axis, q.scale_dtype, t.descriptor.dtype) == (axis % 3, scale_dtype, dtype)
    scales, zps = t.scales(), t.zero_points()
    assert scales.dtype == ref.SCALE_DTYPE[scale_dtype] and scales.shape == (x.shape[axis],)
    tq = torch.quantize_per_channel(
        torch.from_numpy(x),
        torch.from_numpy(scales.astype(np.float64)),
        torch.from_numpy(zps),
        axis % 3,
        getattr(torch, TORCH_QDTYPE[dtype]),
    )
    np.testing.assert_array_equal(
        code_array(t, "per_channel"), tq.int_repr().numpy().astype(np.int64)
    )
    assert_same_floats(t.dequantize(), torch.dequantize(tq).numpy())
    check(t, x, "per_channel", axis=axis, dtype=dtype, symmetric=symmetric, scale_dtype=scale_dtype)


@pytest.mark.parametrize("dtype", ["int4", "uint4"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("axis", [0, -1])
@pytest.mark.parametrize("scale_dtype", SCALE_DTYPES)
def test_per_channel_int4_matches_reference(dtype, symmetric, axis, scale_dtype):
    x = varied((7, 33), seed=8)
    t = hurray.quantize(
        x, "per_channel", axis=axis, dtype=dtype, symmetric=symmetric, scale_dtype=scale_dtype
    )
    assert t.codes().dtype == np.dtype(getattr(ml_dtypes, dtype))
    want = check(
        t, x, "per_channel", axis=axis, dtype=dtype, symmetric=symmetric, scale_dtype=scale_dtype
    )
    raw = np.frombuffer(t.buffers[0], np.uint8)
    packed = ref.pack4(want["codes"])
    np.testing.assert_array_equal(raw[: packed.size], packed)


# -------------------------------------------------------- q8_0 / q4_0 vs gguf


def refused_by_float16_scale(x, scheme):
    """(x with every block whose float16 scale would be infinite zeroed,
    the flat index quantize names for the first such block, or None).
    Blocks run along the last axis, 32 wide. ggml writes such blocks with
    an infinite scale; hurray refuses them (quantization.md §6.1)."""
    rows = np.array(x, np.float32).reshape(-1, x.shape[-1])
    first = None
    for r in range(rows.shape[0]):
        for b in range(0, rows.shape[1], 32):
            block = rows[r, b : b + 32]
            k = int(np.argmax(np.abs(block)))
            d = abs(float(block[k])) / (127.0 if scheme == "q8_0" else 8.0)
            with np.errstate(over="ignore"):
                if np.isfinite(np.float16(d)):
                    continue
            if first is None:
                first = r * rows.shape[1] + b + k
            block[:] = 0
    return rows.reshape(x.shape), first


def quantize_or_refused(x, scheme, **kw):
    """hurray.quantize of x, once it was checked to refuse x's blocks that
    float16 cannot scale (naming the right element), with them zeroed;
    (tensor, the input it holds)."""
    kept, first = refused_by_float16_scale(x, scheme)
    if first is not None:
        with pytest.raises(hurray.InvalidArgumentError, match=f"element {first} .* too large"):
            hurray.quantize(x, scheme, **kw)
    return hurray.quantize(kept, scheme, **kw), kept


def gguf_samples():
    rng = np.random.default_rng(7)
    yield varied((4, 128), 1)
    yield varied((2, 3, 64), 2, spread=12)
    ties = np.concatenate([[127.0], np.arange(-62, 62) + 0.5, np.zeros(3)])[:128]
    yield ties.reshape(4, 32).astype(np.float32)
    z = rng.uniform(-3, 3, (2, 64)).astype(np.float32)
    z[0, 5], z[0, 9] = 3.5, -3.5  # equal |max|: the first one decides d's sign
    z[0, 40], z[0, 50] = -3.5, 3.5
    z[1, :32] = np.float32(-8.0)
    z[1, 1:17] = np.arange(-8, 8) + 0.5
    yield z
    d = np.zeros((6, 32), np.float32)  # zeros, denormals next to a normal, float16 edges
    d[1] = rng.uniform(-1, 1, 32) * 1e-40
    d[1, 7] = 0.25
    d[2] = rng.uniform(-1, 1, 32) * 1e6  # q4_0: d overflows float16
    d[3] = rng.uniform(-1, 1, 32) * 1e-4  # float16 subnormal d
    d[4] = rng.uniform(-1, 1, 32) * 3e-7
    d[5] = rng.uniform(-1, 1, 32) * 9e6  # q8_0: d overflows float16
    yield d


@needs_gguf
@pytest.mark.parametrize("case", range(5))
def test_q8_0_matches_gguf(case):
    t, x = quantize_or_refused(list(gguf_samples())[case], "q8_0")
    codes, scales = t.codes(), t.scales()
    assert codes.dtype == np.int8 and scales.dtype == np.float16
    want = gguf_quants.quantize(x, GQ.Q8_0)
    np.testing.assert_array_equal(ref.gguf_q8_0_blocks(codes, scales), want)
    with np.errstate(invalid="ignore"):
        gdeq = gguf_quants.dequantize(want, GQ.Q8_0).reshape(x.shape)
    assert_same_floats(t.dequantize(), gdeq)
    np.testing.assert_array_equal(t.zero_points(), np.zeros(scales.shape, np.int64))
    check(t, x, "q8_0")


@needs_gguf
@pytest.mark.parametrize("case", range(5))
def test_q4_0_matches_gguf(case):
    t, x = quantize_or_refused(list(gguf_samples())[case], "q4_0")
    codes, scales = t.codes(), t.scales()
    assert codes.dtype == np.dtype(ml_dtypes.uint4) and scales.dtype == np.float16
    with np.errstate(invalid="ignore", over="ignore"):
        want = gguf_quants.quantize(x, GQ.Q4_0)
        gdeq = gguf_quants.dequantize(want, GQ.Q4_0).reshape(x.shape)
    np.testing.assert_array_equal(ref.gguf_q4_0_blocks(codes, scales), want)
    # straight from hurray's packed buffer (low nibble first), too
    raw = np.frombuffer(t.buffers[0], np.uint8)
    np.testing.assert_array_equal(ref.hurray_packed_to_gguf_q4_0(raw, x.shape, scales), want)
    assert_same_floats(t.dequantize(), gdeq)
    np.testing.assert_array_equal(t.zero_points(), np.full(scales.shape, 8, np.int64))
    check(t, x, "q4_0")


@pytest.mark.parametrize("scheme", ["q8_0", "q4_0"])
@pytest.mark.parametrize("shape", [(3, 45), (70,), (2, 2, 33), (5, 1)])
def test_q_partial_last_block_matches_reference(scheme, shape):
    x = varied(shape, seed=shape[-1])
    t = hurray.quantize(x, scheme)
    assert t.scales().shape == shape[:-1] + (-(-shape[-1] // 32),)
    check(t, x, scheme)


# ---------------------------------------------- block_affine and affine


@pytest.mark.parametrize("dtype", CODE_DTYPES)
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("scale_dtype", SCALE_DTYPES)
@pytest.mark.parametrize(
    "axis,block_size,shape",
    [(-1, None, (5, 70)), (0, 16, (40, 6)), (1, 7, (3, 20, 4)), (-1, 64, (2, 64))],
)
def test_block_affine_matches_reference(dtype, symmetric, scale_dtype, axis, block_size, shape):
    x = varied(shape, seed=len(shape) + (block_size or 0))
    kw = dict(axis=axis, dtype=dtype, symmetric=symmetric, scale_dtype=scale_dtype)
    if block_size is not None:
        kw["block_size"] = block_size
    t = hurray.quantize(x, "block_affine", **kw)
    q = t.descriptor.quantization
    assert (q.axis, q.block_size, q.scale_dtype) == (
        axis % len(shape),
        block_size or 32,
        scale_dtype,
    )
    assert t.scales().shape == ref.blocked_shape(shape, axis % len(shape), block_size or 32)
    check(t, x, "block_affine", **kw)


@pytest.mark.parametrize("dtype", CODE_DTYPES)
@pytest.mark.parametrize("symmetric", [True, False, None])
def test_affine_matches_reference(dtype, symmetric):
    x = varied((6, 45), seed=5, spread=3)
    t = hurray.quantize(x, "affine", dtype=dtype, symmetric=symmetric)
    want = check(t, x, "affine", dtype=dtype, symmetric=symmetric)
    q = t.descriptor.quantization
    assert q.scale == float(want["scales"]) and q.zero_point == int(want["zps"])
    assert t.zero_points().shape == () and t.zero_points().dtype == np.int64


@needs_torch
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_affine_matches_torch_per_tensor(dtype, symmetric):
    x = varied((7, 45), seed=6, spread=3)
    t = hurray.quantize(x, "affine", dtype=dtype, symmetric=symmetric)
    tq = torch.quantize_per_tensor(
        torch.from_numpy(x),
        float(t.scales()),
        int(t.zero_points()),
        getattr(torch, TORCH_QDTYPE[dtype]),
    )
    np.testing.assert_array_equal(code_array(t, "affine"), tq.int_repr().numpy())
    assert_same_floats(t.dequantize(), torch.dequantize(tq).numpy())


@pytest.mark.parametrize("scheme", AFFINE + ("q8_0", "q4_0", "nf4"))
def test_dequantize_other_dtypes(scheme):
    x = varied((4, 70), seed=12)
    t = hurray.quantize(x, scheme)
    f32 = t.dequantize()
    assert f32.dtype == np.float32
    assert_same_floats(t.dequantize(np.float64), f32.astype(np.float64))
    assert_same_floats(t.dequantize(np.float16), f32.astype(np.float16))
    assert_same_floats(t.dequantize(ml_dtypes.bfloat16), f32.astype(ml_dtypes.bfloat16))


# ------------------------------------------------- the spec's worked examples


@pytest.mark.parametrize("example", ref.WORKED_EXAMPLES, ids=lambda e: e[0])
def test_worked_examples(example):
    scheme, kwargs, x, codes_hex, scale_hex, zp = example
    t = hurray.quantize(np.array(x, np.float32), scheme, **kwargs)
    assert bytes(t.buffers[0]).hex() == codes_hex
    if scheme == "affine":
        assert np.float32(t.descriptor.quantization.scale).tobytes().hex() == scale_hex
        assert t.descriptor.quantization.zero_point == zp
    else:
        assert bytes(t.buffers[1]).hex() == scale_hex
    if zp is not None:
        assert np.all(t.zero_points() == zp)
    with np.errstate(invalid="ignore"):
        check(t, np.array(x, np.float32), scheme, **kwargs)


# ------------------------------------------------------------------ edge cases


@pytest.mark.parametrize("scheme", SCHEMES)
def test_all_zero_blocks(scheme):
    x = varied((4, 128), seed=13)
    x[1] = 0.0
    x[2, 64:] = 0.0
    x[3, :] = -0.0
    t = hurray.quantize(x, scheme)
    check(t, x, scheme)
    assert np.all(t.dequantize()[1] == 0)
    z = np.zeros((2, 64), np.float32)
    t = hurray.quantize(z, scheme)
    check(t, z, scheme)
    assert np.all(t.dequantize() == 0)


@pytest.mark.parametrize("scheme", ref.MX_SCHEMES)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_mx_block_with_nan_or_inf_gets_the_nan_scale(scheme, bad):
    x = varied((3, 96), seed=14)
    x[0, 40] = bad
    x[2, 95] = bad
    t = hurray.quantize(x, scheme)
    scale = t.scales().view(np.uint8)
    assert scale[0, 1] == 0xFF and scale[2, 2] == 0xFF
    assert (scale != 0xFF).sum() == scale.size - 2
    codes = code_array(t, scheme)
    assert np.all(codes[0, 32:64] == 0) and np.all(codes[2, 64:96] == 0)
    deq = t.dequantize()
    nan = np.zeros(x.shape, bool)
    nan[0, 32:64] = nan[2, 64:96] = True
    np.testing.assert_array_equal(np.isnan(deq), nan)
    check(t, x, scheme)
    # along axis 0 too
    xt = np.ascontiguousarray(x.T)
    t = hurray.quantize(xt, scheme, axis=0)
    check(t, xt, scheme, axis=0)
    assert np.isnan(t.dequantize()).sum() == 64


@pytest.mark.parametrize("scheme", AFFINE + ("q8_0", "q4_0", "nf4"))
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_or_inf_is_refused(scheme, bad):
    x = varied((3, 40), seed=15)
    x.reshape(-1)[77] = bad
    with pytest.raises(hurray.InvalidArgumentError) as info:
        hurray.quantize(x, scheme)
    assert info.value.status_name == "HURRAY_ERR_NOT_FINITE"
    assert info.value.status == 100
    assert "77" in str(info.value)


@pytest.mark.parametrize("scheme", AFFINE + ("q8_0", "q4_0", "nf4"))
def test_nan_is_refused_in_narrow_float_inputs(scheme):
    x = np.ones((2, 32), np.float16)
    x[1, 3] = np.nan
    with pytest.raises(hurray.InvalidArgumentError):
        hurray.quantize(x, scheme)
    with pytest.raises(hurray.InvalidArgumentError):
        hurray.quantize(x.astype(ml_dtypes.bfloat16), scheme)


@pytest.mark.parametrize("scheme, limit", [("q8_0", 127 * 65504.0), ("q4_0", 8 * 65504.0)])
@pytest.mark.parametrize("threads", [1, 4])
def test_finite_input_beyond_the_float16_scale_is_refused(scheme, limit, threads):
    """ggml's Q8_0 and Q4_0 keep an unclamped float16 scale per block: a
    block of finite values of magnitude past about 127 x 65504 (Q8_0) or
    8 x 65504 (Q4_0) got an infinite scale and decoded to infinities (and
    NaN), with no error. It is refused as a NaN is, naming the first
    element of largest magnitude of the first such block."""
    x = varied((64, 96), seed=16)
    x[40, 70] = 1.1 * limit  # block (40, 64..95)
    x[40, 71] = -1.3 * limit
    x[50, 3] = np.float32(np.finfo(np.float32).max)  # a later block
    with pytest.raises(hurray.InvalidArgumentError) as info:
        hurray.quantize(x, scheme, threads=threads)
    assert info.value.status_name == "HURRAY_ERR_NOT_FINITE"
    assert f"element {40 * 96 + 71} " in str(info.value) and "too large" in str(info.value)
    x[40, 70], x[40, 71], x[50, 3] = 0.98 * limit, -0.98 * limit, 1.0
    t = hurray.quantize(x, scheme, threads=threads)
    assert np.isfinite(t.dequantize()).all()


def denormal_data(seed):
    rng = np.random.default_rng(seed)
    x = np.zeros((6, 64), np.float32)
    tiny = np.float32(2.0**-149)
    x[0] = rng.integers(-(2**23) + 1, 2**23, 64) * tiny  # every subnormal size
    x[1] = rng.integers(-1000, 1000, 64) * tiny  # the smallest ones
    x[2] = rng.integers(-(2**23) + 1, 2**23, 64) * tiny
    x[2, 5] = 1.5  # next to a normal value
    x[3] = rng.standard_normal(64) * 1e-39
    x[3, ::3] = 0.0  # with zeros
    x[4] = np.float32(2.0**-126) * rng.choice([-1, 1], 64)  # the smallest normal
    x[5] = rng.standard_normal(64) * 1e-3
    x[5, ::4] = rng.integers(-100, 100, 16) * tiny
    return x.astype(np.float32)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_float32_denormals(scheme):
    x = denormal_data(16)
    assert np.count_nonzero((np.abs(x) < 2.0**-126) & (x != 0)) > 200
    t = hurray.quantize(x, scheme)
    undefined = q_undefined(x, scheme)
    check(t, x, scheme, undefined_codes=undefined)
    if undefined is not None:
        # codes the rules leave open still decode to zero (their scale is 0)
        assert np.all(t.dequantize()[undefined] == 0)
        codes = code_array(t, scheme)
        lo, hi = (-128, 127) if scheme == "q8_0" else (0, 15)
        assert codes.min() >= lo and codes.max() <= hi
    if scheme in ("per_channel", "block_affine"):
        for sd in ("float16", "bfloat16"):
            for symmetric in (True, False):
                t = hurray.quantize(x, scheme, scale_dtype=sd, symmetric=symmetric)
                check(t, x, scheme, scale_dtype=sd, symmetric=symmetric)


@pytest.mark.parametrize("scheme", ["affine", "per_channel", "block_affine"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "int4", "uint4"])
def test_symmetric_groups_at_float32_max_decode_finite(scheme, dtype):
    """127 x f32(FLT_MAX / 127) rounds above FLT_MAX: the extreme codes of a
    group holding +-FLT_MAX decoded to +-Inf. The scale steps down one
    value of its type instead (quantization.md 6.2 step 2)."""
    x = np.array([[FLT_MAX, -FLT_MAX, 1.0, -(2.0**127)]], np.float32)
    x = x[0] if scheme == "affine" else x
    scale_dtypes = ["float32"] if scheme == "affine" else ["float32", "float16", "bfloat16"]
    for scale_dtype in scale_dtypes:
        kw = {} if scheme == "affine" else {"scale_dtype": scale_dtype}
        t = hurray.quantize(x, scheme, dtype=dtype, symmetric=True, **kw)
        with np.errstate(over="raise"):
            values = t.dequantize().ravel()
        assert np.isfinite(values).all(), (scale_dtype, values)
        if scale_dtype != "float16":  # 65504 x 127 is far below FLT_MAX
            assert values[0] == -values[1] > np.float32(FLT_MAX) * np.float32(0.99)


@needs_torch
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_codes_differ_from_torch_only_as_the_spec_says():
    """quantization.md 7.4: with a zero point of 0 hurray's codes are
    torch's, ties included; with another zero point torch adds it in
    binary32 before rounding, and the spec's two examples differ by one."""
    ties = np.arange(-64, 64, dtype=np.float32) / np.float32(2)  # every .5 tie
    x = np.concatenate([ties, [np.float32(63.5)]])  # scale 0.5 exactly
    t = hurray.quantize(x, "affine", dtype="int8", symmetric=True)
    q = t.descriptor.quantization
    tq = torch.quantize_per_tensor(torch.from_numpy(x), q.scale, 0, torch.qint8)
    np.testing.assert_array_equal(t.codes().astype(np.int64), tq.int_repr().numpy())
    # x . inv = 2.5 with z = 63: hurray 63 + 2, torch rne(65.5)
    x = np.array([[-0.984375, 3.0, 0.0390625]], np.float32)
    t = hurray.quantize(x, "per_channel", dtype="uint8")
    assert (t.scales()[0], t.zero_points()[0]) == (0.015625, 63)
    tq = torch.quantize_per_channel(
        torch.from_numpy(x),
        torch.tensor([0.015625], dtype=torch.float64),
        torch.tensor([63]),
        0,
        torch.quint8,
    )
    assert t.codes()[0, 2] == 65 and int(tq.int_repr()[0, 2]) == 66
    # x . inv = -63.499996 with z = 128: f32(128 - 63.499996) is 64.5
    x = np.array([-158.21630859375, -79.108154296875], np.float32)
    t = hurray.quantize(x, "affine", dtype="uint8", symmetric=True)
    q = t.descriptor.quantization
    tq = torch.quantize_per_tensor(torch.from_numpy(x), q.scale, 128, torch.quint8)
    assert t.codes()[1] == 65 and int(tq.int_repr()[1]) == 64


@pytest.mark.parametrize("scheme", SCHEMES)
def test_float32_max_magnitude(scheme):
    x = varied((4, 64), seed=17)
    x[0, 3] = FLT_MAX
    x[1, 40] = -FLT_MAX
    x[2, :32] = FLT_MAX
    x[2, 32:] = -FLT_MAX
    x[3, 10], x[3, 11] = FLT_MAX, -FLT_MAX
    if scheme in ("q8_0", "q4_0") and gguf_quants is not None:
        # ggml's scale is infinite there; hurray refuses instead
        with np.errstate(over="ignore", invalid="ignore"):
            blocks = gguf_quants.quantize(x, GQ.Q8_0 if scheme == "q8_0" else GQ.Q4_0)
        assert np.isinf(blocks[0, :2].copy().view(np.float16)[0])
    if scheme in ("q8_0", "q4_0"):
        t, x = quantize_or_refused(x, scheme)
        assert not x[0, :32].any() and x[0, 32:].any()  # its first block was refused
    else:
        t = hurray.quantize(x, scheme)
    with np.errstate(over="ignore", invalid="ignore"):
        check(t, x, scheme)
    if scheme in ("per_channel", "block_affine", "affine"):
        for dtype in CODE_DTYPES:
            for symmetric in (True, False):
                kw = dict(dtype=dtype, symmetric=symmetric)
                if scheme != "affine":
                    kw["scale_dtype"] = "float16" if dtype.endswith("4") else "float32"
                t = hurray.quantize(x, scheme, **kw)
                with np.errstate(over="ignore", invalid="ignore"):
                    check(t, x, scheme, **kw)
    if scheme == "q8_0" and gguf_quants is not None:
        want = gguf_quants.quantize(x, GQ.Q8_0)
        np.testing.assert_array_equal(ref.gguf_q8_0_blocks(t.codes(), t.scales()), want)


@pytest.mark.parametrize("scheme", ref.MX_SCHEMES)
def test_mx_element_max_is_exact(scheme):
    _, _, emax, top, _ = ref.MX[scheme]
    x = np.zeros((3, 32), np.float32)
    # top and exact fractions of it (MXINT8: 0.5 and -0.25, its spacing is 2^-6)
    x[0, :4] = [top, -top, top / 2, -top / 4] if scheme != "mxint8" else [top, -top, 0.5, -0.25]
    x[1, :3] = [top * 2.0**100, -top * 2.0**100, 1.0]  # shared exponent 100
    x[2, :3] = [np.nextafter(np.float32(2.0 ** (emax + 1)), np.float32(0)), -top, 0.5]
    t = hurray.quantize(x, scheme)
    np.testing.assert_array_equal(t.scales().view(np.uint8)[:, 0], [127, 227, 127])
    deq = t.dequantize()
    np.testing.assert_array_equal(deq[0, :4], x[0, :4])
    np.testing.assert_array_equal(deq[1, :2], x[1, :2])
    assert deq[2, 0] == np.float32(top)  # saturated, not rounded up past the max
    check(t, x, scheme)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("shape", [(3, 45), (1, 33), (2, 3, 31), (97,)])
def test_length_not_a_multiple_of_the_block(scheme, shape):
    x = varied(shape, seed=int(np.prod(shape)))
    t = hurray.quantize(x, scheme)
    check(t, x, scheme)
    if scheme in ("block_affine", "q8_0", "q4_0") + ref.MX_SCHEMES:
        assert t.scales().shape == shape[:-1] + (-(-shape[-1] // 32),)


@pytest.mark.parametrize("scheme", ["affine", "nf4"])
@pytest.mark.parametrize("value", [3.25, -0.5, 0.0, 1e-40])
def test_rank0_affine_and_nf4(scheme, value):
    x = np.float32(value)
    t = hurray.quantize(x, scheme)
    assert t.shape == ()
    deq = t.dequantize()
    assert deq.shape == ()
    check(t, np.array(x), scheme)
    t = hurray.quantize(np.array(value, np.float64), scheme)  # 0-d arrays and Python floats
    assert t.shape == ()
    u = hurray.quantize(value, scheme)
    same_tensor(u, t)


@pytest.mark.parametrize("scheme", AXIS_SCHEMES)
def test_rank0_is_refused_by_the_axis_schemes(scheme):
    with pytest.raises(hurray.InvalidArgumentError):
        hurray.quantize(np.float32(1.5), scheme)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("shape", [(0,), (0, 5), (4, 0), (2, 0, 3)])
def test_empty_tensors(scheme, shape):
    x = np.zeros(shape, np.float32)
    t = hurray.quantize(x, scheme)
    assert t.shape == shape
    assert t.codes().shape == shape
    deq = t.dequantize()
    assert deq.shape == shape and deq.dtype == np.float32
    if scheme == "nf4":
        assert t.scales().shape == (0,)
    elif scheme == "per_channel":
        assert t.scales().shape == (shape[0],)
    elif scheme != "affine":
        assert t.scales().shape == shape[:-1] + (-(-shape[-1] // 32),)
        if scheme not in ref.MX:
            assert t.zero_points().shape == t.scales().shape


@pytest.mark.parametrize("scheme", SCHEMES)
def test_float16_and_bfloat16_inputs_give_their_float32_result(scheme):
    x = varied((5, 70), seed=18)
    for narrow in (np.float16, ml_dtypes.bfloat16):
        xn = x.astype(narrow)
        same_tensor(hurray.quantize(xn, scheme), hurray.quantize(xn.astype(np.float32), scheme))
        check(hurray.quantize(xn, scheme), xn.astype(np.float32), scheme)
    # float64 and integers are converted to float32 first
    same_tensor(
        hurray.quantize(x.astype(np.float64) * (1 + 1e-12), scheme),
        hurray.quantize((x.astype(np.float64) * (1 + 1e-12)).astype(np.float32), scheme),
    )
    ints = np.arange(-100, 250, dtype=np.int32).reshape(5, 70)
    same_tensor(hurray.quantize(ints, scheme), hurray.quantize(ints.astype(np.float32), scheme))
    # non-contiguous input is read as its values
    same_tensor(hurray.quantize(x.T.copy().T, scheme), hurray.quantize(x, scheme))
    same_tensor(
        hurray.quantize(x[:, ::-1], scheme),
        hurray.quantize(np.ascontiguousarray(x[:, ::-1]), scheme),
    )
    same_tensor(hurray.quantize(x.tolist(), scheme), hurray.quantize(x, scheme))


@pytest.mark.parametrize("scheme", SCHEMES)
def test_threads_give_identical_bytes(scheme):
    rng = np.random.default_rng(19)
    x = (rng.standard_normal((1024, 1040)) * np.exp2(rng.integers(-8, 9, size=(1024, 1)))).astype(
        np.float32
    )  # ~4 MiB
    one = hurray.quantize(x, scheme, threads=1)
    two = hurray.quantize(x, scheme, threads=2)
    four = hurray.quantize(x, scheme, threads=4)
    same_tensor(two, one)
    same_tensor(four, one)
    d1 = one.dequantize(threads=1)
    assert d1.tobytes() == one.dequantize(threads=2).tobytes()
    assert (
        one.dequantize(np.float16, threads=1).tobytes()
        == one.dequantize(np.float16, threads=3).tobytes()
    )
    if scheme == "per_channel":
        same_tensor(
            hurray.quantize(x, scheme, axis=1, threads=2), hurray.quantize(x, scheme, axis=1)
        )
    if scheme in ref.MX:
        same_tensor(
            hurray.quantize(x, scheme, axis=0, threads=2), hurray.quantize(x, scheme, axis=0)
        )


@pytest.mark.parametrize(
    "scheme,kw",
    [("affine", {}), ("affine", dict(dtype="uint4")), ("block_affine", {}), ("mxfp6_e3m2", {})],
)
def test_large_codes_match_the_reference_at_every_thread_count(scheme, kw):
    """Codes of a few MiB land in pages each thread populates just ahead of
    its writes (quantize.c, prefault): every thread count gives the
    reference's bytes, also on the pages at the parts' edges, with odd sizes
    so no edge falls on a page boundary."""
    x = varied((1031, 3001), 23)  # 12 MiB of float32: three parts
    for threads in (1, 2, 3):
        check(hurray.quantize(x, scheme, threads=threads, **kw), x, scheme, **kw)


@pytest.mark.parametrize(
    "scheme,kw,shape",
    [
        ("mxfp6_e3m2", {}, (3, 9000)),  # 282 blocks a row
        ("mxfp8_e4m3", {}, (2, 8224)),
        ("block_affine", dict(dtype="uint8", symmetric=False, block_size=5), (2, 3001)),
        ("block_affine", dict(dtype="int8", block_size=3, scale_dtype="bfloat16"), (3, 2000)),
    ],
)
def test_rows_of_many_blocks_match_reference(scheme, kw, shape):
    """Rows of more blocks than dequantize reads scales and zero points for
    at a time (256 groups, a piece on the stack): each piece gets its own."""
    x = mx_data(shape, seed=shape[1]) if scheme in ref.MX else varied(shape, seed=shape[1])
    check(hurray.quantize(x, scheme, **kw), x, scheme, **kw)


def test_rows_of_many_blocks_split_between_threads():
    """Above the 8 MiB at which a second thread starts, parts begin mid-row,
    in the middle of a piece of 256 groups: the same bytes as one thread."""
    x = varied((3, 800_000), seed=3)
    t = hurray.quantize(x, "block_affine", dtype="int8", symmetric=False, block_size=5)
    one = t.dequantize(threads=1)
    assert_same_floats(t.dequantize(threads=4), one)
    assert_same_floats(t.dequantize(threads=3), one)


# ------------------------------------------------------- files

VARIANTS = [(s, {}) for s in SCHEMES] + [
    ("per_channel", dict(dtype="uint8")),
    ("per_channel", dict(dtype="int4", symmetric=False, scale_dtype="bfloat16")),
    ("block_affine", dict(dtype="uint4", block_size=16, scale_dtype="float16")),
    ("affine", dict(dtype="uint4")),
    ("nf4", dict(block_size=32)),
]


@pytest.mark.parametrize(
    "scheme,kw", VARIANTS, ids=[f"{s}-{i}" for i, (s, _) in enumerate(VARIANTS)]
)
def test_save_load_round_trip(fast_dir, scheme, kw):  # noqa: F811
    x = varied((6, 75), seed=20)
    t = hurray.quantize(x, scheme, **kw)
    path = fast_dir / "q.hurray"
    hurray.save(path, {"w": t, "also": hurray.quantize(x[:2], scheme, **kw)})
    for mmap in (True, False):
        u = hurray.load(path, mmap=mmap)["w"]
        same_tensor(u, t)
        assert u.dequantize().tobytes() == t.dequantize().tobytes()
        assert np.asarray(u.codes()).tobytes() == np.asarray(t.codes()).tobytes()
        assert np.asarray(u.scales()).tobytes() == np.asarray(t.scales()).tobytes()


# ------------------------------------------------- hypothesis: error bounds

# Finite float32 values up to 2^127: a group maximum next to FLT_MAX gets a scale
# whose top code decodes past FLT_MAX (127 * f32(FLT_MAX / 127) = inf), by the
# rules; test_float32_max_magnitude pins that case exactly.
finite32 = st.floats(-(2.0**127), 2.0**127, width=32)


def arrays(elements=finite32, max_rows=4, max_cols=70):
    shapes = st.tuples(st.integers(1, max_rows), st.integers(1, max_cols))
    return hnp.arrays(np.float32, shapes, elements=elements)


def scaled_arrays():
    """Data with an interesting spread: finite floats times a power of two per row."""
    return (
        st.tuples(arrays(st.floats(-1000, 1000, width=32)), st.integers(-140, 100))
        .map(lambda a: (a[0].astype(np.float64) * 2.0 ** a[1]).astype(np.float32))
        .filter(lambda a: np.all(np.isfinite(a)))
    )


def affine_bound(x, deq, scale_el, zp_el, code_dtype):
    """|deq - x| <= scale/2 (+ float slack) wherever the code was not clipped."""
    qmin, qmax = ref.CODE_RANGE[code_dtype]
    s = scale_el.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        r = np.rint(x * (np.float32(1) / s)).astype(np.float64) + zp_el
    inside = (r >= qmin) & (r <= qmax)
    err = np.abs(deq.astype(np.float64) - x.astype(np.float64))
    s64 = s.astype(np.float64)
    bound = s64 / 2 + s64 * 2.0**-14 + np.abs(x.astype(np.float64)) * 2.0**-22 + 2.0**-149
    bad = inside & ~(err <= bound)
    assert not bad.any(), f"x={x[bad][:3]} deq={deq[bad][:3]} scale={s[bad][:3]}"


@SETTINGS
@given(
    x=st.one_of(arrays(), scaled_arrays()),
    axis=st.sampled_from([0, 1]),
    scale_dtype=st.sampled_from(SCALE_DTYPES),
)
def test_per_channel_int8_symmetric_error_is_half_a_step(x, axis, scale_dtype):
    t = hurray.quantize(x, "per_channel", axis=axis, scale_dtype=scale_dtype)
    shape = [1, 1]
    shape[axis] = x.shape[axis]
    scale = np.broadcast_to(t.scales().astype(np.float32).reshape(shape), x.shape)
    affine_bound(x, t.dequantize(), scale, np.zeros(x.shape), "int8")


@SETTINGS
@given(
    x=st.one_of(arrays(), scaled_arrays()),
    dtype=st.sampled_from(CODE_DTYPES),
    symmetric=st.booleans(),
    block=st.integers(1, 40),
    scale_dtype=st.sampled_from(SCALE_DTYPES),
)
def test_block_affine_error_is_half_a_step(x, dtype, symmetric, block, scale_dtype):
    t = hurray.quantize(
        x,
        "block_affine",
        dtype=dtype,
        symmetric=symmetric,
        block_size=block,
        scale_dtype=scale_dtype,
    )
    scale = ref.expand_blocks(t.scales().astype(np.float32), 1, block, x.shape)
    zp = ref.expand_blocks(t.zero_points(), 1, block, x.shape)
    affine_bound(x, t.dequantize(), scale, zp, dtype)


@SETTINGS
@given(
    x=st.one_of(arrays(), scaled_arrays()),
    dtype=st.sampled_from(CODE_DTYPES),
    symmetric=st.booleans(),
)
def test_affine_error_is_half_a_step(x, dtype, symmetric):
    t = hurray.quantize(x, "affine", dtype=dtype, symmetric=symmetric)
    scale = np.full(x.shape, np.float32(float(t.scales())))
    affine_bound(x, t.dequantize(), scale, np.full(x.shape, int(t.zero_points())), dtype)


@SETTINGS
@given(x=arrays(st.floats(-1e5, 1e5, width=32)))
def test_q8_0_error_is_half_a_step(x):
    t = hurray.quantize(x, "q8_0")
    d = ref.q_block_d(x, "q8_0")  # the step the codes were made with
    np.testing.assert_array_equal(t.scales(), d.astype(np.float16))
    usable = (d >= 2.0**-14) & (d <= 65504)  # float16 d normal
    d_el = ref.expand_blocks(d.astype(np.float64), 1, 32, x.shape)
    d16_el = ref.expand_blocks(d.astype(np.float16).astype(np.float64), 1, 32, x.shape)
    ok = ref.expand_blocks(usable, 1, 32, x.shape)
    codes = t.codes().astype(np.float64)
    x64 = x.astype(np.float64)
    slack = d_el * 2.0**-15 + np.abs(x64) * 2.0**-22
    assert np.all(np.abs(codes * d_el - x64)[ok] <= (d_el / 2 + slack)[ok])
    err = np.abs(t.dequantize().astype(np.float64) - x64)
    assert np.all(err[ok] <= (d_el / 2 + 127 * np.abs(d16_el - d_el) + slack)[ok])


@SETTINGS
@given(
    x=st.one_of(arrays(max_cols=100), scaled_arrays()),
    scheme=st.sampled_from(ref.MX_SCHEMES),
    axis=st.sampled_from([0, 1]),
)
def test_mx_error_is_within_half_the_element_spacing(x, scheme, axis):
    _, _, _, top, _ = ref.MX[scheme]
    t = hurray.quantize(x, scheme, axis=axis)
    s = ref.expand_blocks(t.scales().view(np.uint8), axis, 32, x.shape).astype(np.int64)
    assert np.all(s != 0xFF)
    shared = s - 127
    y = x.astype(np.float64) * np.ldexp(1.0, -shared)
    inside = np.abs(y) <= top  # not saturated
    err = np.abs(t.dequantize().astype(np.float64) - x.astype(np.float64))
    bound = ref.mx_half_spacing(y, scheme) * np.ldexp(1.0, shared) + np.ldexp(1.0, shared - 149)
    bad = inside & ~(err <= bound)
    assert not bad.any(), f"x={x[bad][:3]} err={err[bad][:3]} bound={bound[bad][:3]}"
    # and the block scale is the one the rules give
    want = expected(scheme, x, axis=axis)
    np.testing.assert_array_equal(t.scales().view(np.uint8), want["scales"])


@pytest.mark.parametrize(
    "scheme,kw",
    [
        ("mxfp8_e4m3", {}),
        ("mxfp8_e5m2", {}),
        ("mxfp4", {}),
        ("q4_0", {}),
        ("block_affine", dict(dtype="uint8", symmetric=False, scale_dtype="float16")),
        ("block_affine", dict(dtype="int8", scale_dtype="bfloat16", block_size=5)),
    ],
)
def test_rows_longer_than_the_scale_stage(scheme, kw):
    """Dequantize reads a contiguous axis's scales and zero points a few
    hundred blocks at a time (dequantize.c, GROUP_STAGE = 256): rows of more
    than 2 stages plus a partial block, on 1 and 3 threads, equal the
    reference, and equal the same blocks quantized down axis 0 (which reads
    every scale up front)."""
    block = kw.get("block_size", 32)
    x = mx_data((3, 2 * 256 * block + block + 3), seed=11)
    if scheme == "q4_0":
        t, x = quantize_or_refused(x, scheme)
    else:
        t = hurray.quantize(x, scheme, **kw)
    check(t, x, scheme, **kw)
    y = t.dequantize(threads=3)
    np.testing.assert_array_equal(t.dequantize().view(np.uint32), y.view(np.uint32))
    if scheme != "q4_0":  # GGUF blocks run along the last axis only
        t0 = hurray.quantize(np.ascontiguousarray(x.T), scheme, axis=0, **kw)
        np.testing.assert_array_equal(t0.dequantize().T.view(np.uint32), y.view(np.uint32))


def test_dequantize_into_out_reuses_the_array():
    x = np.random.default_rng(5).standard_normal((8, 64)).astype(np.float32)
    t = hurray.quantize(x, "nf4")
    out = np.full(x.shape, np.nan, np.float32)
    got = t.dequantize(out=out, threads=2)
    assert got is out
    np.testing.assert_array_equal(out, t.dequantize())
    half = np.empty(x.shape, np.float16)
    np.testing.assert_array_equal(t.dequantize(out=half), t.dequantize(np.float16))
    with pytest.raises(ValueError):
        t.dequantize(out=np.empty((8, 63), np.float32))
    with pytest.raises(ValueError):
        t.dequantize(out=np.empty(x.shape, np.float64))
    with pytest.raises(ValueError):
        t.dequantize(out=np.empty((64, 8), np.float32).T)


# --------------------------- session 41: out= apart, threads, arguments


_GROUP_INDEX_ALIAS = """
import numpy as np, hurray
from _hurray_samples import aligned
rows, cols, block = 64, 32, 8
codes = aligned(np.ones(rows * cols, np.int8))
scales = aligned(np.ones(rows * cols // block, np.float32))
backing = aligned(np.zeros(rows * cols, np.float32))
gidx = backing[: cols * 4]
gidx.view(np.int32)[:] = np.arange(cols) // block
q = hurray.BlockAffine(axis=1, block_size=block, scale_buffer=1, scale_dtype="float32",
                       group_index_buffer=2, group_index_dtype="int32")
d = hurray.Descriptor("int8", (rows, cols), quantization=q, buffers=[
    hurray.Buffer("data", rows * cols, 64), hurray.Buffer("scales", scales.size, 64),
    hurray.Buffer("group_index", cols * 4, 64)])
t = hurray.Tensor(d, [codes, scales, gidx])
assert (t.dequantize() == 1).all()
try:
    t.dequantize(out=backing.view(np.float32).reshape(rows, cols))
except hurray.InvalidArgumentError as e:
    assert "overlaps buffer 2" in str(e), e
    assert (gidx.view(np.int32) == np.arange(cols) // block).all()
    print("refused")
"""


def test_dequantize_out_over_the_group_index_is_refused():
    """The group index was checked, then read again per element while the
    output overwrote it: float bits became group numbers and the scales
    were read anywhere (a segfault from Python)."""
    r = subprocess.run(
        [sys.executable, "-c", _GROUP_INDEX_ALIAS],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.abspath(__file__)),
    )
    assert r.returncode == 0 and r.stdout.strip() == "refused", r.stderr[-2000:]


def test_dequantize_out_over_the_scales_is_refused():
    """It wrote garbage and corrupted the tensor's own scales."""
    w = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    q = hurray.quantize(w, "q8_0")
    codes = aligned(np.frombuffer(bytes(q.buffers[0]), np.uint8))
    backing = aligned(np.zeros(1024, np.uint8))
    scales = backing[:16]
    scales[:] = np.frombuffer(bytes(q.buffers[1]), np.uint8)
    t = hurray.Tensor(q.descriptor, [codes, scales])
    want = t.dequantize()
    with pytest.raises(hurray.InvalidArgumentError, match="overlaps buffer 1"):
        t.dequantize(out=backing.view(np.float32).reshape(4, 64))
    assert np.array_equal(t.dequantize(), want)


@pytest.mark.parametrize("code", ["uint4", "int4"])
def test_block_affine_4bit_zero_points_do_not_depend_on_threads(code):
    """A part could start at an odd block, and two threads then wrote one
    zero-point byte: the high nibble was lost."""
    x = np.random.default_rng(7).standard_normal((1, 3_000_032)).astype(np.float32)
    ref = hurray.quantize(x, "block_affine", dtype=code, symmetric=False, threads=1)
    for threads in (2, 3):
        for _ in range(2):
            t = hurray.quantize(x, "block_affine", dtype=code, symmetric=False, threads=threads)
            assert [bytes(b) for b in t.buffers] == [bytes(b) for b in ref.buffers]


def test_quantize_integer_options_are_range_checked():
    x = np.ones((4, 64), np.float32)
    a = hurray.quantize(x, "block_affine", block_size=np.int64(32))
    assert bytes(a.buffers[0]) == bytes(
        hurray.quantize(x, "block_affine", block_size=32).buffers[0]
    )
    with pytest.raises(OverflowError, match="block_size"):
        hurray.quantize(x, "block_affine", block_size=-1)
    with pytest.raises(OverflowError, match="block_size"):
        hurray.quantize(x, "block_affine", block_size=2**64)
    with pytest.raises(OverflowError, match=r"axis .* out of range \(-2147483648\.\.2147483647\)"):
        hurray.quantize(x, "per_channel", axis=2**40)
    for threads in (1.9, None, "2"):
        with pytest.raises(TypeError):
            hurray.quantize(x, "q8_0", threads=threads)
    with pytest.raises(TypeError, match="symmetric must be"):
        hurray.quantize(x, "per_tensor", symmetric="no")
    # True was taken as 1 for these two (threads=True was already refused).
    for option, scheme in (
        ("axis", "per_channel"),
        ("block_size", "block_affine"),
        ("threads", "q8_0"),
    ):
        with pytest.raises(TypeError, match=f"{option} must be an integer, not bool"):
            hurray.quantize(x, scheme, **{option: True})


def test_dequantize_out_messages_say_what_is_wrong():
    t = hurray.quantize(np.ones((4, 64), np.float32), "q8_0")
    with pytest.raises(TypeError, match="numpy array, not memoryview"):
        t.dequantize(out=memoryview(bytearray(1024)).cast("f", (4, 64)))
    with pytest.raises(ValueError, match="not >f4"):
        t.dequantize(out=np.zeros((4, 64), ">f4"))
    with pytest.raises(ValueError, match=r"shape \(4, 63\)"):
        t.dequantize(out=np.zeros((4, 63), np.float32))


def test_input_the_float32_cast_would_change_is_refused():
    """quantize reads other dtypes as float32: a finite float64 of 1e300
    became an infinity (q8_0 then said "NaN or infinite", MX wrote a NaN
    block and reported success), and a complex array lost its imaginary
    parts with only a warning."""
    x = np.ones(32)
    x[1] = -1e300
    for scheme in ("q8_0", "mxfp4"):
        with pytest.raises(hurray.InvalidArgumentError, match=r"element 1 \(-1e\+300\) is finite"):
            hurray.quantize(x, scheme)
    with pytest.raises(TypeError, match="real input"):
        hurray.quantize(np.ones(32, np.complex64), "q8_0")
    np.testing.assert_allclose(hurray.quantize(np.ones(32), "q8_0").dequantize(), 1, rtol=1e-3)


def test_dequantize_keeps_the_imaginary_parts_or_refuses():
    """dequantize() of an unquantized complex tensor into float32 (a new
    array or out=) dropped the imaginary parts, with only numpy's
    ComplexWarning; quantize refuses complex input for that reason."""
    t = hurray.from_numpy(np.array([1 + 2j, 3 - 4j], np.complex64))
    with pytest.raises(TypeError, match="imaginary"):
        t.dequantize()
    with pytest.raises(TypeError, match="imaginary"):
        t.dequantize(out=np.zeros(2, np.float32))
    np.testing.assert_array_equal(t.dequantize(np.complex128), [1 + 2j, 3 - 4j])


def test_dequantize_to_the_narrow_float_kinds():
    """float4/float6 targets were refused as "not a floating-point dtype"."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    q = hurray.quantize(np.linspace(-1, 1, 64).astype(np.float32), "q8_0")
    for name in ("float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"):
        dtype = np.dtype(getattr(ml_dtypes, name))
        got = q.dequantize(dtype)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, q.dequantize().astype(dtype))
