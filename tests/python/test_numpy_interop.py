"""numpy, ml_dtypes and DLPack interop: zero-copy views, sub-byte packing
(checked bit by bit), dequantize() of every quantization kind against an
independent numpy computation written here, and to_dense() of sparse and
paged tensors."""

import math

import ml_dtypes
import numpy as np
import pytest
from _hurray_samples import aligned

import hurray
from hurray import (
    BlockAffine,
    Buffer,
    Descriptor,
    Mxfp,
    Nf4,
    Paged,
    PerChannelAffine,
    PerTensorAffine,
    Sparse,
)

# bitsandbytes' NF4 code book (bitsandbytes/functional.py), written out here
# independently of hurray._tensor.NF4_CODE.
NF4 = np.array(
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
    ]
)


# ------------------------------------------------- independent bit decoders


def nibbles(raw: bytes, count: int) -> np.ndarray:
    """4-bit codes, element 2k in the low nibble of byte k."""
    return np.array([(raw[i // 2] >> (4 * (i % 2))) & 0xF for i in range(count)], np.uint8)


def sixes(raw: bytes, count: int) -> np.ndarray:
    """6-bit codes from a little-endian bit stream."""
    stream = int.from_bytes(raw, "little")
    return np.array([(stream >> (6 * i)) & 0x3F for i in range(count)], np.uint8)


def minifloat(code: int, ebits: int, mbits: int, bias: int, nan=None) -> float:
    sign = -1.0 if (code >> (ebits + mbits)) & 1 else 1.0
    e = (code >> mbits) & ((1 << ebits) - 1)
    m = code & ((1 << mbits) - 1)
    if nan is not None and nan(e, m):
        return float("nan")
    if e == 0:
        return sign * (m / 2**mbits) * 2.0 ** (1 - bias)
    return sign * (1 + m / 2**mbits) * 2.0 ** (e - bias)


E4M3_NAN = lambda e, m: e == 15 and m == 7  # noqa: E731
E5M2_NAN = lambda e, m: e == 31  # noqa: E731  (inf and NaN; none in these tests)

DECODE = {  # MX element -> (bits, code -> float)
    "fp8_e4m3": (8, lambda c: minifloat(c, 4, 3, 7, E4M3_NAN)),
    "fp8_e5m2": (8, lambda c: minifloat(c, 5, 2, 15, E5M2_NAN)),
    "fp6_e3m2": (6, lambda c: minifloat(c, 3, 2, 3)),
    "fp6_e2m3": (6, lambda c: minifloat(c, 2, 3, 1)),
    "fp4_e2m1": (4, lambda c: minifloat(c, 2, 1, 1)),
    "int8": (8, lambda c: (c - 256 if c >= 128 else c) / 64.0),  # MXINT8: 1.6 fixed point
}
ML_DTYPE = {
    "fp8_e4m3": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "fp6_e3m2": ml_dtypes.float6_e3m2fn,
    "fp6_e2m3": ml_dtypes.float6_e2m3fn,
    "fp4_e2m1": ml_dtypes.float4_e2m1fn,
}
HURRAY_DTYPE = {
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "fp6_e3m2": "float6_e3m2fn",
    "fp6_e2m3": "float6_e2m3fn",
    "fp4_e2m1": "float4_e2m1fn",
    "int8": "int8",
}


def codes_of(raw: bytes, bits: int, count: int) -> np.ndarray:
    if bits == 4:
        return nibbles(raw, count)
    if bits == 6:
        return sixes(raw, count)
    return np.frombuffer(raw, np.uint8)[:count].copy()


def tensor(descriptor, *arrays):
    return hurray.Tensor(
        descriptor, [aligned(np.ascontiguousarray(a).view(np.uint8)) for a in arrays]
    )


def pack4(codes) -> np.ndarray:
    codes = [int(c) & 0xF for c in codes]
    codes += [0] * (len(codes) % 2)
    return np.array([codes[i] | codes[i + 1] << 4 for i in range(0, len(codes), 2)], np.uint8)


def pack6(codes) -> np.ndarray:
    stream = 0
    for i, c in enumerate(codes):
        stream |= (int(c) & 0x3F) << (6 * i)
    return np.frombuffer(stream.to_bytes(math.ceil(len(codes) * 6 / 8), "little"), np.uint8)


# ------------------------------------------------------------- zero copy


@pytest.mark.parametrize(
    "dtype",
    [
        np.float32,
        np.float64,
        np.int8,
        np.uint16,
        np.int64,
        np.complex64,
        np.complex128,
        np.bool_,
        np.float16,
    ],
)
def test_asarray_of_dense_is_zero_copy(dtype):
    a = (np.arange(24) % 3).astype(dtype).reshape(2, 3, 4)
    t = hurray.from_numpy(a)
    view = np.asarray(t)
    assert np.shares_memory(view, a)
    assert view.dtype == a.dtype and view.shape == a.shape
    np.testing.assert_array_equal(view, a)
    assert np.shares_memory(t.numpy(), a)
    a[0, 0, 0] = 1  # a writable source: the view sees writes
    assert view[0, 0, 0] == a[0, 0, 0]
    assert not np.shares_memory(np.array(t, copy=True), a)
    wide = np.result_type(a.dtype, np.float64)
    assert np.asarray(t, dtype=wide).dtype == wide


@pytest.mark.parametrize(
    "dtype",
    [ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e8m0fnu],
)
def test_ml_dtypes_arrays_are_zero_copy(dtype):
    a = np.array([0.5, 1, 2, 4, 8, 16], np.float32).astype(dtype).reshape(2, 3)
    t = hurray.from_numpy(a)
    assert t.dtype == np.dtype(dtype).name
    view = np.asarray(t)
    assert view.dtype == np.dtype(dtype)
    assert np.shares_memory(view, a)
    np.testing.assert_array_equal(view.view(np.uint8), a.view(np.uint8))
    u = hurray.from_hurray(t)
    assert np.shares_memory(np.asarray(u), a)


def test_strided_descriptor_views_without_copy():
    base = aligned(np.arange(6, dtype=np.float64).view(np.uint8))
    t = hurray.Tensor(
        Descriptor(
            "float64", (3, 2), strides=(1, -3), byte_offset=24, buffers=[Buffer("data", 48)]
        ),
        [base],
    )
    view = t.numpy()
    np.testing.assert_array_equal(view, [[3, 0], [4, 1], [5, 2]])
    assert np.shares_memory(view, base)


def test_non_contiguous_and_fortran_arrays_are_copied_in_c_order():
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    for src in (a[:, ::2], np.asfortranarray(a)):
        t = hurray.from_numpy(src)
        np.testing.assert_array_equal(t.numpy(), src)
        assert t.numpy().flags.c_contiguous


def test_read_only_sources_give_read_only_views():
    a = np.arange(4, dtype=np.float32)
    a.flags.writeable = False
    view = np.asarray(hurray.from_numpy(a))
    assert not view.flags.writeable
    assert np.shares_memory(view, a)


def test_big_endian_arrays_are_refused():
    with pytest.raises(ValueError):
        hurray.from_numpy(np.arange(3, dtype=">i4"))


# ----------------------------------------------------------------- DLPack


def test_numpy_from_dlpack_is_zero_copy():
    a = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    t = hurray.from_numpy(a)
    assert t.__dlpack_device__() == (1, 0)
    b = np.from_dlpack(t)
    assert np.shares_memory(b, a)
    np.testing.assert_array_equal(b, a)


def test_hurray_from_dlpack_is_zero_copy():
    a = np.arange(10, dtype=np.int64)
    t = hurray.from_dlpack(a)
    assert isinstance(t, hurray.Tensor)
    assert t.dtype == "int64" and t.shape == (10,)
    assert np.shares_memory(t.numpy(), a)


def test_dlpack_stream_must_be_none_and_narrow_types_do_not_travel():
    t = hurray.from_numpy(np.zeros(3, np.float32))
    with pytest.raises(ValueError):
        t.__dlpack__(stream=1)
    # Sub-byte dtypes do not travel (bfloat16 and float8 do: test_dlpack.py).
    with pytest.raises(BufferError, match="sub-byte"):
        hurray.from_numpy(np.zeros(4, ml_dtypes.int4)).__dlpack__(max_version=(1, 0))


# ------------------------------------------------------ sub-byte packing

SUB_BYTE = {
    "int4": (ml_dtypes.int4, 4, np.arange(-8, 8)),
    "uint4": (ml_dtypes.uint4, 4, np.arange(0, 16)),
    "float4_e2m1fn": (
        ml_dtypes.float4_e2m1fn,
        4,
        [0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.5, -1, -1.5, -2, -3, -4, -6],
    ),
    "float6_e3m2fn": (
        ml_dtypes.float6_e3m2fn,
        6,
        [0, 0.0625, 0.25, 1, 1.25, 3.5, 8, 28, -0.125, -2.5, -16, -28],
    ),
    "float6_e2m3fn": (
        ml_dtypes.float6_e2m3fn,
        6,
        [0, 0.125, 0.875, 1, 1.125, 2.75, 7.5, -0.25, -1.5, -3.25, -7.5],
    ),
}


@pytest.mark.parametrize("name", sorted(SUB_BYTE))
@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 7, 8, 33])
def test_sub_byte_packing_round_trip(name, count):
    dtype, bits, pool = SUB_BYTE[name]
    values = np.resize(np.asarray(pool, np.float32), count).astype(dtype)
    t = hurray.from_numpy(values)
    assert t.dtype == name
    size = math.ceil(count * bits / 8)
    assert t.descriptor.buffers[0].byte_size == size
    raw = bytes(t._buffer(0))
    assert len(raw) == size
    back = np.asarray(t)
    assert back.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(back.astype(np.float32), values.astype(np.float32))
    # Independent check of the bit layout.
    expected_codes = values.view(np.uint8) & ((1 << bits) - 1)
    got_codes = codes_of(raw, bits, count)
    np.testing.assert_array_equal(got_codes, expected_codes)
    expected_raw = pack4(expected_codes) if bits == 4 else pack6(expected_codes)
    assert raw == expected_raw.tobytes()
    # Unused trailing bits are zero.
    assert int.from_bytes(raw, "little") >> (count * bits) == 0


def test_element_0_is_the_low_nibble_of_byte_0():
    t = hurray.from_numpy(np.array([1, 2, 3], ml_dtypes.uint4))
    assert bytes(t._buffer(0)) == bytes([0x21, 0x03])
    t = hurray.from_numpy(np.array([-1, 0], ml_dtypes.int4))
    assert bytes(t._buffer(0)) == bytes([0x0F])
    t = hurray.from_numpy(np.array([6.0, -0.5], ml_dtypes.float4_e2m1fn))
    assert bytes(t._buffer(0)) == bytes([0x97])  # 6.0 = 0b0111, -0.5 = 0b1001


def test_six_bit_elements_are_a_little_endian_bit_stream():
    codes = [0b000001, 0b000010, 0b000011, 0b111111]
    values = np.array(codes, np.uint8).view(ml_dtypes.float6_e2m3fn)
    t = hurray.from_numpy(values)
    stream = 0b111111_000011_000010_000001
    assert bytes(t._buffer(0)) == stream.to_bytes(3, "little")


def test_packed_buffers_from_raw_bytes_unpack_the_same_way():
    raw = np.array([0xA5, 0x3C, 0x0F], np.uint8)
    t = tensor(Descriptor("uint4", (2, 3), buffers=[Buffer("data", 3)]), raw)
    np.testing.assert_array_equal(
        t.numpy().astype(np.int64), nibbles(raw.tobytes(), 6).reshape(2, 3)
    )


# -------------------------------------------------------------- dequantize


def test_dequantize_per_tensor_affine():
    codes = np.array([0, 1, 127, 128, 200, 255], np.uint8)
    t = tensor(
        Descriptor(
            "uint8", (2, 3), quantization=PerTensorAffine(0.0125, 128), buffers=[Buffer("data", 6)]
        ),
        codes,
    )
    # binary32 throughout: the inline scale is rounded to float32 first, as torch does
    expected = ((codes.astype(np.float32) - 128) * np.float32(0.0125)).reshape(2, 3)
    np.testing.assert_array_equal(t.dequantize(), expected)
    assert t.dequantize().dtype == np.float32
    assert t.dequantize(np.float64).dtype == np.float64


def test_dequantize_per_tensor_affine_int4():
    values = np.array([-8, -3, 0, 7, 5], ml_dtypes.int4)
    t = tensor(
        Descriptor(
            "int4", (5,), quantization=PerTensorAffine(0.5, -2), buffers=[Buffer("data", 3)]
        ),
        pack4(values.view(np.uint8)),
    )
    np.testing.assert_array_equal(t.dequantize(), (np.array([-8, -3, 0, 7, 5]) + 2) * 0.5)


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("zero_points", ["none", "inline", "buffer"])
def test_dequantize_per_channel_affine(axis, zero_points):
    rng = np.random.default_rng(axis)
    codes = rng.integers(-128, 128, size=(4, 6)).astype(np.int8)
    n = codes.shape[axis]
    scales = rng.uniform(0.01, 2, size=n).astype(np.float32)
    zps = rng.integers(-5, 6, size=n).astype(np.int8)
    quant = PerChannelAffine(
        axis,
        1,
        "float32",
        zero_point_buffer=2 if zero_points == "buffer" else None,
        zero_point_dtype="int8" if zero_points == "buffer" else None,
        zero_point=3 if zero_points == "inline" else 0,
    )
    buffers = [Buffer("data", 24), Buffer("scales", 4 * n)]
    arrays = [codes, scales]
    if zero_points == "buffer":
        buffers.append(Buffer("zero_points", n))
        arrays.append(zps)
    t = tensor(Descriptor("int8", (4, 6), quantization=quant, buffers=buffers), *arrays)
    # The decode formula is binary32: (float)(code - zp) * scale, one rounding.
    expected = np.empty((4, 6), np.float32)
    for i in range(4):
        for j in range(6):
            c = (i, j)[axis]
            zp = {"none": 0, "inline": 3, "buffer": int(zps[c])}[zero_points]
            expected[i, j] = np.float32(int(codes[i, j]) - zp) * scales[c]
    np.testing.assert_array_equal(t.dequantize(), expected)
    np.testing.assert_array_equal(t.dequantize(np.float64), expected.astype(np.float64))


def test_dequantize_gguf_q8_0():
    """Q8_0: blocks of 32 int8 codes along each row, x = d * q, d float16."""
    rng = np.random.default_rng(8)
    codes = rng.integers(-127, 128, size=(3, 96)).astype(np.int8)
    d = rng.uniform(0.001, 0.1, size=(3, 3)).astype(np.float16)
    t = tensor(
        Descriptor(
            "int8",
            (3, 96),
            quantization=BlockAffine(1, 32, 1, "float16"),
            buffers=[Buffer("data", 288), Buffer("scales", 18)],
        ),
        codes,
        d,
    )
    expected = np.empty((3, 96), np.float64)
    for row in range(3):
        for block in range(3):
            q = codes[row, block * 32 : (block + 1) * 32].astype(np.float64)
            expected[row, block * 32 : (block + 1) * 32] = q * float(d[row, block])
    np.testing.assert_allclose(t.dequantize(np.float64), expected, rtol=1e-12)


def test_dequantize_gguf_q4_0():
    """Q4_0: uint4 codes q in blocks of 32, x = d * (q - 8)."""
    rng = np.random.default_rng(4)
    q = rng.integers(0, 16, size=(2, 64))
    d = np.array([[0.5, 0.25], [1.5, 0.0625]], np.float16)
    data = pack4(q.reshape(-1))
    t = tensor(
        Descriptor(
            "uint4",
            (2, 64),
            quantization=BlockAffine(1, 32, 1, "float16", zero_point=8),
            buffers=[Buffer("data", 64), Buffer("scales", 8)],
        ),
        data,
        d,
    )
    # Codes read back from the packed bytes independently.
    codes = nibbles(data.tobytes(), 128).reshape(2, 64).astype(np.float64)
    np.testing.assert_array_equal(codes, q)
    expected = (codes - 8) * np.repeat(d.astype(np.float64), 32, axis=1)
    np.testing.assert_allclose(t.dequantize(np.float64), expected, rtol=1e-12)


def test_dequantize_block_affine_with_zero_point_buffer_and_partial_block():
    """Blocks of 16 along axis 0 of a (40, 3) tensor: 3 blocks, the last of 8."""
    rng = np.random.default_rng(5)
    q = rng.integers(0, 256, size=(40, 3)).astype(np.uint8)
    scales = rng.uniform(0.1, 1, size=(3, 3)).astype(ml_dtypes.bfloat16)
    zps = rng.integers(0, 256, size=(3, 3)).astype(np.uint8)
    t = tensor(
        Descriptor(
            "uint8",
            (40, 3),
            quantization=BlockAffine(
                0, 16, 1, "bfloat16", zero_point_buffer=2, zero_point_dtype="uint8"
            ),
            buffers=[Buffer("data", 120), Buffer("scales", 18), Buffer("zero_points", 9)],
        ),
        q,
        scales,
        zps,
    )
    expected = np.empty((40, 3))
    for i in range(40):
        for j in range(3):
            b = i // 16
            expected[i, j] = (int(q[i, j]) - int(zps[b, j])) * float(scales[b, j])
    np.testing.assert_allclose(t.dequantize(np.float64), expected, rtol=1e-12)


@pytest.mark.parametrize("absmax_dtype", ["float32", "float16", "bfloat16"])
def test_dequantize_nf4(absmax_dtype):
    rng = np.random.default_rng(44)
    q = rng.integers(0, 16, size=200)  # 4 blocks of 64, the last one partial
    absmax = rng.uniform(0.1, 5, size=4).astype(hurray._dtypes.to_numpy(absmax_dtype))
    data = pack4(q)
    t = tensor(
        Descriptor(
            "uint4",
            (10, 20),
            quantization=Nf4(64, 1, absmax_dtype),
            buffers=[Buffer("data", 100), Buffer("scales", absmax.nbytes)],
        ),
        data,
        absmax,
    )
    codes = nibbles(data.tobytes(), 200)
    expected = np.array([NF4[codes[i]] * float(absmax[i // 64]) for i in range(200)])
    np.testing.assert_allclose(t.dequantize(), expected.reshape(10, 20), rtol=1e-6)


def test_nf4_code_book_matches_bitsandbytes():
    np.testing.assert_array_equal(hurray._tensor.NF4_CODE, NF4.astype(np.float32))


def mx_codes(element, count, seed):
    rng = np.random.default_rng(seed)
    bits = DECODE[element][0]
    if element == "int8":
        return rng.integers(0, 256, size=count).astype(np.uint8)
    codes = rng.integers(0, 1 << bits, size=count).astype(np.uint8)
    if element == "fp8_e4m3":
        codes[(codes & 0x7F) == 0x7F] = 0x3C  # no NaN codes in the elements
    if element == "fp8_e5m2":
        codes[(codes & 0x7C) == 0x7C] = 0x3C  # no inf/NaN codes
    return codes


@pytest.mark.parametrize("element", sorted(DECODE))
@pytest.mark.parametrize("axis", [0, 1])
def test_dequantize_mx(element, axis):
    bits, decode = DECODE[element]
    shape = (2, 64) if axis == 1 else (64, 2)
    codes = mx_codes(element, 128, seed=bits + axis)
    grid = codes.reshape(shape)
    data = pack4(codes) if bits == 4 else pack6(codes) if bits == 6 else codes
    # Block scales (E8M0): 2^(e - 127); 0xFF is NaN. blocks: (2, 2) either way.
    e8m0 = np.array([127, 120, 134, 0xFF], np.uint8)
    t = tensor(
        Descriptor(
            HURRAY_DTYPE[element],
            shape,
            quantization=Mxfp(element, axis, 1),
            buffers=[Buffer("data", data.size), Buffer("scales", 4)],
        ),
        data,
        e8m0,
    )
    blocks = e8m0.reshape(2, 2)
    expected = np.empty(shape)
    for i in range(shape[0]):
        for j in range(shape[1]):
            bi, bj = (i, j // 32) if axis == 1 else (i // 32, j)
            e = int(blocks[bi, bj])
            scale = float("nan") if e == 0xFF else 2.0 ** (e - 127)
            expected[i, j] = decode(int(grid[i, j])) * scale
    got = t.dequantize(np.float64)
    np.testing.assert_allclose(got, expected, rtol=1e-12, equal_nan=True)
    assert np.isnan(got).sum() == 32  # exactly the block with scale 0xFF
    # Cross-check the elements with ml_dtypes' own conversion.
    if element in ML_DTYPE:
        ml = grid.view(ML_DTYPE[element]).astype(np.float64)
        mine = np.vectorize(lambda c: decode(int(c)))(grid)
        np.testing.assert_array_equal(ml, mine)
        np.testing.assert_array_equal(t.codes().astype(np.float64), ml)


def test_mx_scale_is_e8m0_like_ml_dtypes():
    e = np.arange(256, dtype=np.uint8)
    ml = e.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    mine = np.where(e == 0xFF, np.nan, np.ldexp(1.0, e.astype(np.int32) - 127))
    np.testing.assert_array_equal(ml, mine)


def test_dequantize_without_quantization_is_the_values():
    a = np.arange(6, dtype=np.int16).reshape(2, 3)
    np.testing.assert_array_equal(hurray.from_numpy(a).dequantize(), a.astype(np.float32))


# -------------------------------------------------------------- to_dense


def sparse_tensor(fmt, shape, values, index_dtype, **parts):
    values = np.ascontiguousarray(values)
    dtype = hurray._dtypes.from_numpy(values.dtype)
    if fmt == "coo":
        coords = [np.asarray(c, index_dtype) for c in parts["coords"]]
        layout = Sparse(
            "coo",
            np.dtype(index_dtype).name,
            len(coords[0]),
            0,
            index_buffers=tuple(range(1, 1 + len(coords))),
        )
        arrays = [values] + coords
        roles = ["values"] + ["indices"] * len(coords)
    else:
        indptr = np.asarray(parts["indptr"], index_dtype)
        indices = np.asarray(parts["indices"], index_dtype)
        layout = Sparse(
            fmt,
            np.dtype(index_dtype).name,
            len(indices),
            0,
            1,
            2,
            block_shape=parts.get("block_shape"),
        )
        arrays = [values, indptr, indices]
        roles = ["values", "indptr", "indices"]
    d = Descriptor(
        dtype, shape, layout=layout, buffers=[Buffer(r, a.nbytes) for r, a in zip(roles, arrays)]
    )
    return hurray.SparseTensor(d, [aligned(a.view(np.uint8)) for a in arrays])


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_to_dense_of_every_sparse_format(index_dtype):
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    dense = rng.normal(size=(6, 8)) * (rng.random((6, 8)) < 0.35)
    csr, csc = sp.csr_matrix(dense), sp.csc_matrix(dense)
    bsr = sp.bsr_matrix(dense, blocksize=(3, 2))
    coo = sp.coo_matrix(dense)
    cases = {
        "coo": sparse_tensor("coo", (6, 8), coo.data, index_dtype, coords=[coo.row, coo.col]),
        "csr": sparse_tensor(
            "csr", (6, 8), csr.data, index_dtype, indptr=csr.indptr, indices=csr.indices
        ),
        "csc": sparse_tensor(
            "csc", (6, 8), csc.data, index_dtype, indptr=csc.indptr, indices=csc.indices
        ),
        "bsr": sparse_tensor(
            "bsr",
            (6, 8),
            bsr.data,
            index_dtype,
            indptr=bsr.indptr,
            indices=bsr.indices,
            block_shape=(3, 2),
        ),
    }
    for fmt, t in cases.items():
        np.testing.assert_array_equal(t.to_dense(), dense, err_msg=fmt)
        np.testing.assert_array_equal(t.to_scipy().toarray(), dense, err_msg=fmt)


def test_to_dense_of_coo_sums_duplicates_and_handles_rank_3():
    t = sparse_tensor(
        "coo",
        (2, 3, 4),
        np.array([1.0, 2.0, 4.0], np.float32),
        np.int64,
        coords=[[0, 0, 1], [1, 1, 2], [3, 3, 0]],
    )
    expected = np.zeros((2, 3, 4), np.float32)
    expected[0, 1, 3] = 3.0
    expected[1, 2, 0] = 4.0
    np.testing.assert_array_equal(t.to_dense(), expected)


def paged_case(shape, axis, page_size, num_pages, table, dtype=np.float32, table_dtype=np.int32):
    """A pool filled with distinct values and a hand-written page table; the
    expected logical tensor is gathered here, element by element."""
    inner = shape[axis + 1 :]
    pool = (np.arange(num_pages * page_size * math.prod(inner)) * 0.5).astype(dtype)
    pool = pool.reshape((num_pages, page_size) + tuple(inner))
    table = np.asarray(table, table_dtype)
    logical = np.empty(shape, dtype)
    outer_shape = shape[:axis]
    for outer in np.ndindex(*outer_shape) if outer_shape else [()]:
        row = np.ravel_multi_index(outer, outer_shape) if outer_shape else 0
        for pos in range(shape[axis]):
            page = table.reshape(-1, math.ceil(shape[axis] / page_size))[row, pos // page_size]
            logical[outer + (pos,)] = pool[page, pos % page_size]
    d = Descriptor(
        np.dtype(dtype).name if dtype is not ml_dtypes.bfloat16 else "bfloat16",
        shape,
        layout=Paged(axis, page_size, num_pages, np.dtype(table_dtype).name),
        buffers=[Buffer("page_pool", pool.nbytes), Buffer("page_table", table.nbytes)],
    )
    return hurray.Tensor(d, [aligned(pool.view(np.uint8)), aligned(table.view(np.uint8))]), logical


@pytest.mark.parametrize("case", ["kv_cache", "shared_prefix", "axis0", "axis2_int64", "bfloat16"])
def test_to_dense_of_paged(case):
    args = {
        # 2 sequences x 40 tokens x 4 heads x 8 dims, pages of 16 tokens.
        "kv_cache": ((2, 40, 4, 8), 1, 16, 8, [[5, 0, 3], [7, 2, 6]]),
        # Both sequences share their first page (a common prefix).
        "shared_prefix": ((2, 10, 3), 1, 4, 5, [[4, 1, 2], [4, 0, 3]]),
        "axis0": ((7, 3), 0, 2, 6, [5, 0, 2, 1]),
        "axis2_int64": ((2, 2, 5, 2), 2, 3, 9, [[8, 0], [1, 7], [2, 3], [6, 4]]),
        "bfloat16": ((1, 33, 2), 1, 16, 3, [[2, 0, 1]]),
    }[case]
    kwargs = {"table_dtype": np.int64} if case == "axis2_int64" else {}
    if case == "bfloat16":
        kwargs["dtype"] = ml_dtypes.bfloat16
    t, logical = paged_case(*args, **kwargs)
    t.descriptor.validate()
    dense = t.to_dense()
    assert dense.shape == logical.shape and dense.dtype == logical.dtype
    np.testing.assert_array_equal(dense.view(np.uint8), logical.view(np.uint8))


def test_page_table_entry_outside_the_pool_is_refused():
    pool = np.zeros((4, 2, 3), np.float32)
    table = np.array([[0, 4]], np.int32)  # page 4 of a pool of 4
    d = Descriptor(
        "float32",
        (1, 4, 3),
        layout=Paged(1, 2, 4),
        buffers=[Buffer("page_pool", pool.nbytes), Buffer("page_table", 8)],
    )
    with pytest.raises(hurray.PlacementError) as info:
        hurray.Tensor(d, [pool, table])
    assert info.value.status_name == "HURRAY_ERR_PAGE_TABLE_ENTRY"


def test_numpy_of_non_dense_layouts_is_unsupported():
    t, _ = paged_case((1, 4, 2), 1, 2, 2, [[1, 0]])
    with pytest.raises(hurray.UnsupportedError):
        t.numpy()
    np.testing.assert_array_equal(np.asarray(t.to_dense()), t.to_dense())


def test_to_dense_of_paged_sub_byte_dtype():
    pool = np.arange(12, dtype=np.uint8)  # 24 uint4 codes: 4 pages of 2 x 3
    table = np.array([[3, 1, 0], [2, 0, 1]], np.int32)
    d = Descriptor(
        "uint4",
        (2, 5, 3),
        layout=Paged(1, 2, 4, "int32"),
        buffers=[Buffer("page_pool", 12), Buffer("page_table", 24)],
    )
    t = hurray.Tensor(d, [aligned(pool), aligned(table.view(np.uint8))])
    codes = nibbles(pool.tobytes(), 24).reshape(4, 2, 3)
    expected = np.concatenate([codes[table[s]].reshape(6, 3)[:5] for s in range(2)])
    np.testing.assert_array_equal(t.to_dense().astype(np.int64), expected.reshape(2, 5, 3))


def quantized_csr(zero_point):
    """[[10, -], [20, 30]] as uint8 codes with per-tensor affine (0.5, zero_point)."""
    d = Descriptor(
        "uint8",
        (2, 2),
        layout=Sparse("csr", "int32", 3, 0, 1, 2),
        quantization=PerTensorAffine(0.5, zero_point),
        buffers=[Buffer("values", 3), Buffer("indptr", 12), Buffer("indices", 12)],
    )
    return hurray.SparseTensor(
        d,
        [
            aligned(np.array([10, 20, 30], np.uint8)),
            aligned(np.array([0, 1, 3], np.int32).view(np.uint8)),
            aligned(np.array([0, 0, 1], np.int32).view(np.uint8)),
        ],
    )


def test_dequantize_per_tensor_affine_on_sparse_values():
    np.testing.assert_array_equal(quantized_csr(0).dequantize(), [[5, 0], [10, 15]])


def test_dequantize_sparse_with_zero_point_keeps_unstored_elements_zero():
    np.testing.assert_array_equal(quantized_csr(10).dequantize(), [[0, 0], [5, 10]])


def test_rank_3_coo_is_a_coo_array_where_scipy_has_one():
    import scipy

    t = sparse_tensor("coo", (2, 2, 2), np.ones(1, np.float32), np.int64, coords=[[0], [1], [1]])
    if tuple(int(x) for x in scipy.__version__.split(".")[:2]) < (1, 13):
        with pytest.raises(hurray.UnsupportedError):
            t.to_scipy()
    else:
        np.testing.assert_array_equal(t.to_scipy().toarray(), t.to_dense())


def test_strided_view_of_a_buffer_with_slack():
    data = aligned(np.arange(5, dtype=np.float32).view(np.uint8)[:18])
    d = Descriptor("float32", (2, 2), strides=(1, 2), buffers=[Buffer("data", 18)])
    d.validate()
    t = hurray.Tensor(d, [data])
    np.testing.assert_array_equal(t.numpy(), [[0, 2], [1, 3]])


def test_sparse_values_honour_byte_offset():
    values = np.array([99, 1, 2, 3], np.float64)  # element 0 is 8 bytes in
    d = Descriptor(
        "float64",
        (2, 2),
        byte_offset=8,
        layout=Sparse("csr", "int32", 3, 0, 1, 2),
        buffers=[Buffer("values", 32), Buffer("indptr", 12), Buffer("indices", 12)],
    )
    d.validate()
    t = hurray.SparseTensor(
        d,
        [
            aligned(values.view(np.uint8)),
            aligned(np.array([0, 1, 3], np.int32).view(np.uint8)),
            aligned(np.array([0, 0, 1], np.int32).view(np.uint8)),
        ],
    )
    np.testing.assert_array_equal(t.to_dense(), [[1, 0], [2, 3]])


@pytest.mark.skipif(
    np.lib.NumpyVersion(np.__version__) < "2.0.0",
    reason="numpy < 2 has no copy= in asarray nor in __array__",
)
def test_asarray_copy_false_is_a_view_or_refused():
    """numpy 2's __array__(copy=False) means a view or ValueError; a packed
    int4 tensor gave an unpacked copy, and writes to it were lost."""
    t = hurray.from_numpy(np.array([1, -2, 3, 0], dtype=ml_dtypes.int4))
    with pytest.raises(ValueError, match="without a copy"):
        np.asarray(t, copy=False)
    assert np.asarray(t).tolist() == [1, -2, 3, 0]
    f = hurray.from_numpy(np.arange(3, dtype=np.float32))
    v = np.asarray(f, copy=False)
    v[0] = 7
    assert f.numpy().tolist() == [7, 1, 2]
    assert np.asarray(hurray.from_numpy(np.zeros((0, 3), ml_dtypes.int4)), copy=False).shape == (
        0,
        3,
    )


def test_from_dlpack_of_a_hurray_tensor_keeps_every_dtype():
    """hurray.from_dlpack passed a hurray tensor to numpy's DLPack import,
    which has no bfloat16 or float8 (RuntimeError); its capsule has all."""
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.bool_):
        a = np.array([1, 0, 1], dtype=dtype)
        back = hurray.from_dlpack(hurray.from_numpy(a))
        assert (
            back.numpy().tobytes() == a.tobytes() and back.descriptor.dtype == np.dtype(dtype).name
        )
