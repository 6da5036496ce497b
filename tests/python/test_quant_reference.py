"""Self-checks of the numpy references in quant_reference.py against the
peers they claim to reproduce, without hurray's quantize: bitsandbytes
(NF4, CPU), gguf.quants (Q8_0, Q4_0), torch.quantize_per_channel /
quantize_per_tensor (affine int8/uint8), torch's float8 casts and a brute
force nearest-value search (MX elements), math.frexp (MX shared exponent)."""

import math

import ml_dtypes
import numpy as np
import pytest
import quant_reference as ref

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None
try:
    import bitsandbytes.functional as bnbf
except Exception:  # pragma: no cover
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
    pytest.mark.filterwarnings("ignore::RuntimeWarning"),
]  # gguf's inf / NaN casts


def varied(shape, seed, spread=6):
    """Random float32 data whose magnitude varies by rows and positions."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, size=shape))
    return x.astype(np.float32)


# ----------------------------------------------------------------- packing


def test_pack_unpack_round_trip():
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 7, 64):
        c4 = rng.integers(0, 16, n)
        assert ref.pack4(c4).size == (n + 1) // 2
        np.testing.assert_array_equal(ref.unpack4(ref.pack4(c4), n), c4)
        c6 = rng.integers(0, 64, n)
        assert ref.pack6(c6).size == (6 * n + 7) // 8
        np.testing.assert_array_equal(ref.unpack6(ref.pack6(c6), n), c6)
    # element 2k in the low nibble; 6-bit little-endian stream
    assert ref.pack4([1, 2, 3]).tolist() == [0x21, 0x03]
    assert ref.pack6([0x3F, 0, 0, 0]).tolist() == [0x3F, 0, 0]
    assert ref.pack6([0, 1, 0, 0]).tolist() == [0x40, 0, 0]
    assert ref.pack6([0, 0, 0, 0x3F]).tolist() == [0, 0, 0xFC]
    assert ref.swap_nibbles(np.array([0x12, 0xF0], np.uint8)).tolist() == [0x21, 0x0F]


# -------------------------------------------------------------------- NF4


def bnb_nf4(x, block):
    q, state = bnbf.quantize_4bit(torch.from_numpy(x.copy()), blocksize=block, quant_type="nf4")
    deq = bnbf.dequantize_4bit(q, state, quant_type="nf4")
    return q.numpy().reshape(-1), state.absmax.numpy(), deq.numpy()


@needs_bnb
def test_nf4_table_is_bitsandbytes_table():
    from bitsandbytes.backends.utils import CODE

    np.testing.assert_array_equal(ref.NF4_TABLE, CODE["nf4"].numpy())
    _, state = bnbf.quantize_4bit(torch.ones(64), blocksize=64, quant_type="nf4")
    np.testing.assert_array_equal(ref.NF4_TABLE, state.code.numpy())


@needs_bnb
@pytest.mark.parametrize("shape", [(64,), (8, 64), (3, 128), (16, 40)])
def test_nf4_reference_matches_bitsandbytes(shape):
    # bitsandbytes divides (instead of multiplying by 1/absmax) in a partial last
    # block, and clamps a zero absmax: whole, non-zero blocks only.
    x = varied(shape, seed=sum(shape))
    codes, absmax = ref.nf4(x, 64)
    q, bnb_absmax, bnb_deq = bnb_nf4(x, 64)
    np.testing.assert_array_equal(ref.swap_nibbles(q), ref.pack4(codes))
    np.testing.assert_array_equal(absmax, bnb_absmax)
    deq = ref.nf4_dequantize(codes, absmax, 64)
    np.testing.assert_array_equal(
        deq.reshape(-1).view(np.uint32), bnb_deq.reshape(-1).view(np.uint32)
    )


@needs_bnb
def test_nf4_reference_ties_go_to_the_lower_code_like_bitsandbytes():
    # absmax 1 -> y == x exactly; put elements on every midpoint.
    t = ref.NF4_MIDPOINTS
    x = np.concatenate(
        [
            [1.0],
            t,
            np.nextafter(t, np.float32(2)),
            np.nextafter(t, np.float32(-2)),
            np.zeros(64 - 1 - 3 * 15),
        ]
    ).astype(np.float32)
    codes, absmax = ref.nf4(x, 64)
    assert absmax[0] == 1
    np.testing.assert_array_equal(codes[1:16], np.arange(15))  # tie -> lower
    np.testing.assert_array_equal(codes[16:31], np.arange(1, 16))
    np.testing.assert_array_equal(codes[31:46], np.arange(15))
    assert codes[-1] == 7
    q, bnb_absmax, _ = bnb_nf4(x, 64)
    np.testing.assert_array_equal(ref.swap_nibbles(q), ref.pack4(codes))


# ------------------------------------------------------------ q8_0 / q4_0


def q_samples():
    rng = np.random.default_rng(7)
    yield varied((4, 128), 1)
    # ties of roundf: amax 127 -> d = 1, id = 1
    ties = np.concatenate([[127.0], np.arange(-62, 62) + 0.5, np.zeros(3)])[:128]
    yield ties.reshape(4, 32).astype(np.float32)
    # q4_0 ties: max -8 -> d = 1, and equal |max| of both signs (first one wins)
    z = rng.uniform(-3, 3, (2, 64)).astype(np.float32)
    z[0, 5], z[0, 9] = 3.5, -3.5
    z[0, 40], z[0, 50] = -3.5, 3.5
    z[1, :32] = np.float32(-8.0)
    z[1, 1:17] = np.arange(-8, 8) + 0.5
    yield z
    # zeros, denormals next to a normal value, large, small scales (float16 subnormal d)
    d = np.zeros((5, 32), np.float32)
    d[1] = rng.uniform(-1, 1, 32) * 1e-40
    d[1, 7] = 0.25
    d[2] = rng.uniform(-1, 1, 32) * 1e6
    d[3] = rng.uniform(-1, 1, 32) * 1e-4
    d[4] = rng.uniform(-1, 1, 32) * 3e-7
    yield d.astype(np.float32)


@needs_gguf
def test_q8_0_reference_matches_gguf():
    for x in q_samples():
        codes, scales = ref.q8_0(x)
        got = ref.gguf_q8_0_blocks(codes, scales)
        want = gguf_quants.quantize(x, GQ.Q8_0)
        np.testing.assert_array_equal(got, want)
        deq = ref.q_dequantize(codes, scales, 0)
        np.testing.assert_array_equal(deq, gguf_quants.dequantize(want, GQ.Q8_0).reshape(x.shape))


@needs_gguf
def test_q4_0_reference_matches_gguf():
    for x in q_samples():
        codes, scales = ref.q4_0(x)
        got = ref.gguf_q4_0_blocks(codes, scales)
        want = gguf_quants.quantize(x, GQ.Q4_0)
        np.testing.assert_array_equal(got, want)
        packed = ref.pack4(codes)
        np.testing.assert_array_equal(ref.hurray_packed_to_gguf_q4_0(packed, x.shape, scales), want)
        deq = ref.q_dequantize(codes, scales, 8)
        np.testing.assert_array_equal(deq, gguf_quants.dequantize(want, GQ.Q4_0).reshape(x.shape))


@needs_gguf
def test_q8_0_float32_max_overflows_the_scale_like_gguf():
    x = np.zeros((1, 32), np.float32)
    x[0, 3] = np.finfo(np.float32).max
    x[0, 4] = -1.0
    codes, scales = ref.q8_0(x)
    assert np.isinf(scales[0, 0])
    np.testing.assert_array_equal(
        ref.gguf_q8_0_blocks(codes, scales), gguf_quants.quantize(x, GQ.Q8_0)
    )


# ------------------------------------------------------ affine vs torch

TORCH_DTYPE = {"int8": "qint8", "uint8": "quint8"}


@needs_torch
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("scale_dtype", ["float32", "float16", "bfloat16"])
def test_per_channel_reference_matches_torch(dtype, symmetric, axis, scale_dtype):
    x = varied((6, 5, 40), seed=3)
    x[1] = np.abs(x[1])  # a channel with no negatives (asymmetric lo = 0)
    codes, scales, zps = ref.per_channel(x, dtype, axis, symmetric, scale_dtype)
    q = torch.quantize_per_channel(
        torch.from_numpy(x),
        torch.from_numpy(scales.astype(np.float64)),
        torch.from_numpy(zps),
        axis % 3,
        getattr(torch, TORCH_DTYPE[dtype]),
    )
    np.testing.assert_array_equal(codes, q.int_repr().numpy().astype(np.int64))
    deq = ref.per_channel_dequantize(codes, scales, zps, axis)
    np.testing.assert_array_equal(deq, torch.dequantize(q).numpy())


@needs_torch
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_per_channel_reference_zero_points_match_torch_observer(dtype, symmetric):
    from torch.ao.quantization.observer import PerChannelMinMaxObserver

    x = varied((8, 33), seed=11)
    qscheme = torch.per_channel_symmetric if symmetric else torch.per_channel_affine
    obs = PerChannelMinMaxObserver(
        ch_axis=0, dtype=getattr(torch, TORCH_DTYPE[dtype]), qscheme=qscheme
    )
    obs(torch.from_numpy(x))
    t_scales, t_zps = obs.calculate_qparams()
    _, scales, zps = ref.per_channel(x, dtype, 0, symmetric, "float32")
    if not symmetric:
        # same rule (MinMaxObserver): zero points equal, scales equal
        np.testing.assert_array_equal(zps, t_zps.numpy())
        np.testing.assert_allclose(scales, t_scales.numpy(), rtol=2e-7)
    else:
        # torch's symmetric scale is amax / 127.5; ours is amax / 127 (the notes)
        np.testing.assert_array_equal(zps, t_zps.numpy())


@needs_torch
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_per_tensor_reference_matches_torch(dtype, symmetric):
    x = varied((7, 45), seed=5, spread=3)
    codes, scale, zp = ref.per_tensor(x, dtype, symmetric)
    q = torch.quantize_per_tensor(
        torch.from_numpy(x), float(scale), zp, getattr(torch, TORCH_DTYPE[dtype])
    )
    np.testing.assert_array_equal(codes, q.int_repr().numpy().astype(np.int64))
    np.testing.assert_array_equal(
        ref.affine_dequantize(codes, scale, zp), torch.dequantize(q).numpy()
    )


def test_block_affine_reference_is_per_channel_of_each_block():
    x = varied((4, 70), seed=9)
    for dtype in ("int8", "uint8", "int4", "uint4"):
        for symmetric in (True, False):
            codes, scales, zps = ref.block_affine(x, dtype, -1, 32, symmetric, "float16")
            assert scales.shape == zps.shape == (4, 3)
            for b in range(3):
                c, s, z = ref.per_channel(
                    x[:, 32 * b : 32 * b + 32], dtype, 0, symmetric, "float16"
                )
                np.testing.assert_array_equal(codes[:, 32 * b : 32 * b + 32], c)
                np.testing.assert_array_equal(scales[:, b], s)
                np.testing.assert_array_equal(zps[:, b], z)
            codes0, scales0, _ = ref.block_affine(x.T, dtype, 0, 32, symmetric, "float16")
            np.testing.assert_array_equal(codes0, codes.T)
            np.testing.assert_array_equal(scales0, scales.T)


def test_affine_scale_clamp_and_zero_groups():
    x = np.zeros((3, 4), np.float32)
    x[1] = 1e-42
    x[2] = [1e8, -1e8, 0, 3]
    for sd, smallest, largest in (
        ("float32", 2.0**-126, np.finfo(np.float32).max),
        ("float16", 2.0**-14, 65504.0),
        ("bfloat16", 2.0**-126, None),
    ):
        _, scales, _ = ref.per_channel(x, "int8", 0, True, sd)
        assert scales.dtype == ref.SCALE_DTYPE[sd]
        assert float(scales[0]) == smallest and float(scales[1]) == smallest
        if sd == "float16":
            assert float(scales[2]) == 65504.0
    _, scales, zps = ref.per_channel(x, "uint8", 0, False, "float32")
    assert float(scales[0]) == 2.0**-126 and zps[0] == 0


# ------------------------------------------------------------------- MX


def brute_element(y: float, scheme: str) -> float:
    """Nearest representable element value, ties to the even code, saturating."""
    values = ref.all_element_values(scheme)
    top = values[-1]
    y = min(max(y, -top), top)
    dist = np.abs(values - y)
    best = np.flatnonzero(dist == dist.min())
    if best.size == 1:
        return float(values[best[0]])
    # tie: the value whose last mantissa bit (code) is even
    _, ml, _, _, _ = ref.MX[scheme]
    if ml is None:
        return float(values[best[0]] if round(values[best[0]] * 64) % 2 == 0 else values[best[1]])
    for i in best:
        code = int(np.array(values[i]).astype(ml).view(np.uint8))
        if code % 2 == 0:
            return float(values[i])
    raise AssertionError


@pytest.mark.parametrize("scheme", ref.MX_SCHEMES)
def test_mx_element_encode_matches_brute_force(scheme):
    rng = np.random.default_rng(len(scheme))
    values = ref.all_element_values(scheme)
    pos = values[values > 0]
    mids = (pos[:-1] + pos[1:]) / 2
    top = float(values[-1])
    y = np.concatenate(
        [
            rng.uniform(-2 * top, 2 * top, 300),
            mids,
            -mids,
            values,
            [0.0, -0.0, top * 1.99, -top * 1.99, pos[0] / 2, pos[0] / 4],
        ]
    )
    y = y.astype(np.float32)
    got = ref.mx_element_decode(ref.mx_element_encode(y, scheme), scheme)
    want = np.array([brute_element(float(v), scheme) for v in y])
    np.testing.assert_array_equal(got, want)
    # -0.0 keeps its sign bit (FP elements)
    if scheme != "mxint8":
        neg0 = ref.mx_element_encode(np.array([-0.0, -pos[0] / 4], np.float32), scheme)
        assert np.all(np.signbit(neg0.astype(np.float32)))


@needs_torch
@pytest.mark.parametrize(
    "scheme,tdtype", [("mxfp8_e4m3", "float8_e4m3fn"), ("mxfp8_e5m2", "float8_e5m2")]
)
def test_mx_fp8_element_encode_matches_torch(scheme, tdtype):
    rng = np.random.default_rng(3)
    top = ref.MX[scheme][3]
    y = (rng.uniform(-1, 1, 4000) * np.exp2(rng.integers(-20, 1, 4000)) * top).astype(np.float32)
    ours = ref.mx_code_bytes(ref.mx_element_encode(y, scheme))
    theirs = torch.from_numpy(y).to(getattr(torch, tdtype)).view(torch.uint8).numpy()
    np.testing.assert_array_equal(ours, theirs)


def test_mx_shared_exponent_is_floor_log2():
    rng = np.random.default_rng(1)
    a = np.concatenate(
        [
            np.abs(rng.standard_normal(200)) * np.exp2(rng.integers(-120, 120, 200)),
            [1.0, 2.0, 0.5, np.finfo(np.float32).max, 2.0**-126],
        ]
    ).astype(np.float32)
    e = ref.float32_exponent(a)
    want = [math.frexp(float(v))[1] - 1 for v in a]
    np.testing.assert_array_equal(e, want)
    assert ref.float32_exponent(np.float32(0.0)) == -127
    assert ref.float32_exponent(np.float32(1e-40)) == -127


@pytest.mark.parametrize("scheme", ref.MX_SCHEMES)
@pytest.mark.parametrize("axis", [-1, 0])
def test_mx_reference_round_trip_error_is_within_the_element_spacing(scheme, axis):
    x = varied((40, 70), seed=2, spread=10)
    codes, scale = ref.mx_quantize(x, scheme, axis)
    assert scale.shape == ((40, 3) if axis == -1 else (2, 70))
    deq = ref.mx_dequantize(codes, scale, scheme, axis)
    s = ref.expand_blocks(scale, axis % 2, 32, x.shape).astype(np.int64)
    y = x.astype(np.float64) * np.ldexp(1.0, 127 - s)
    top = ref.MX[scheme][3]
    inside = np.abs(y) <= top
    err = np.abs(deq.astype(np.float64) - x) * np.ldexp(1.0, 127 - s)
    assert np.all(err[inside] <= ref.mx_half_spacing(y, scheme)[inside])


def test_e8m0_decode_matches_ml_dtypes():
    e = np.arange(256, dtype=np.uint8)
    codes = np.full(256 * 32, 0x38, np.uint8).view(ml_dtypes.float8_e4m3fn)  # 1.0
    deq = ref.mx_dequantize(codes, e, "mxfp8_e4m3")
    want = np.repeat(e.view(ml_dtypes.float8_e8m0fnu).astype(np.float32), 32)
    np.testing.assert_array_equal(deq, want)


# ------------------------------------------------- the spec's worked examples


@pytest.mark.parametrize("example", ref.WORKED_EXAMPLES, ids=lambda e: e[0])
def test_reference_reproduces_the_worked_examples(example):
    scheme, kwargs, x, codes_hex, scale_hex, zp = example
    codes, scales, got_zp = ref.reference_bytes(scheme, kwargs, x)
    assert codes.hex() == codes_hex
    assert scales.hex() == scale_hex
    assert got_zp == zp


@needs_bnb
def test_nf4_worked_example_bitsandbytes_bytes():
    # (bitsandbytes' smallest block is 64: zeros after the example keep its absmax)
    x = torch.zeros(64)
    x[:4] = torch.tensor([0.4, -0.8, 0.1, 2.0])
    q, _ = bnbf.quantize_4bit(x, blocksize=64, quant_type="nf4")
    assert q.numpy().tobytes()[:2].hex() == "938f"
