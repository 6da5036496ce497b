"""Sample tensors of every layout and quantization kind, built by hand as
hurray.Tensor(Descriptor(...), [numpy arrays]), for the file and numpy
tests. Not a test module (no test_ prefix).

Each sample is (descriptor, arrays): arrays[i] is buffer i, as uint8 bytes
of exactly the declared byte_size, deterministic contents.
"""

from __future__ import annotations

import math
import os

import ml_dtypes
import numpy as np

from hurray import (
    BlockAffine,
    Buffer,
    Composite,
    Dense,
    Descriptor,
    Extension,
    Member,
    Mxfp,
    Nf4,
    Paged,
    PerChannelAffine,
    PerTensorAffine,
    Shard,
    Sparse,
    Statistics,
    _dtypes,
)

MX_DTYPE = {
    "fp8_e4m3": "float8_e4m3fn",
    "fp8_e5m2": "float8_e5m2",
    "fp6_e3m2": "float6_e3m2fn",
    "fp6_e2m3": "float6_e2m3fn",
    "fp4_e2m1": "float4_e2m1fn",
    "int8": "int8",
}


def aligned(data: np.ndarray, alignment: int = 64) -> np.ndarray:
    """A copy of uint8 `data` whose address is a multiple of `alignment`."""
    data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    block = np.zeros(data.size + alignment, np.uint8)
    start = (-block.ctypes.data) % alignment
    # Not block[start:start + n]: numpy leaves an empty slice's pointer at
    # the start of the block.
    out = np.ndarray((data.size,), np.uint8, buffer=block, offset=start)
    out[:] = data
    assert out.ctypes.data % alignment == 0
    return out


def raw(array) -> np.ndarray:
    """C-order bytes of an array, as a fresh uint8 array."""
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8).copy()


def random_bytes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8)


def finite(dtype: str, count: int, seed: int) -> np.ndarray:
    """`count` finite values of an ml_dtypes / numpy dtype, one per element."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-4, 4, size=count).astype(_dtypes.to_numpy(dtype))


def B(role, size, alignment=64):
    return Buffer(role, size, alignment)


def dense(dtype="float32", shape=(3, 4), seed=0):
    count = math.prod(shape)
    size = _dtypes.storage_bytes(dtype, count)
    return Descriptor(dtype, shape, buffers=[B("data", size)]), [random_bytes(size, seed)]


def dense_values(array):
    """A dense sample over the given (unpacked) values."""
    array = np.asarray(array)
    name = _dtypes.from_numpy(array.dtype)
    data = _dtypes.pack(name, array) if _dtypes.is_packed(name) else raw(array)
    return Descriptor(name, array.shape, buffers=[B("data", data.size)]), [data]


def dense_strided():
    base = np.arange(6, dtype=np.float64)
    return (
        Descriptor("float64", (3, 2), strides=(1, -3), byte_offset=24, buffers=[B("data", 48)]),
        [raw(base)],
    )


def coo():
    values = np.array([1.5, -2.0, 3.25], np.float32)
    coords = [
        np.array([0, 1, 3], np.int64),
        np.array([4, 0, 2], np.int64),
        np.array([5, 1, 0], np.int64),
    ]
    d = Descriptor(
        "float32",
        (4, 5, 6),
        layout=Sparse("coo", "int64", 3, 0, index_buffers=(1, 2, 3), canonical=True),
        buffers=[B("values", 12)] + [B("indices", 24)] * 3,
    )
    return d, [raw(values)] + [raw(c) for c in coords]


def compressed(fmt):
    # The 3 x 4 matrix [[1, 0, 2, 0], [0, 0, 0, 3], [4, 5, 0, 0]].
    if fmt == "csr":
        values = np.array([1, 2, 3, 4, 5], np.float64)
        indptr = np.array([0, 2, 3, 5], np.int32)
        indices = np.array([0, 2, 3, 0, 1], np.int32)
    else:
        values = np.array([1, 4, 5, 2, 3], np.float64)
        indptr = np.array([0, 2, 3, 4, 5], np.int32)
        indices = np.array([0, 2, 2, 0, 1], np.int32)
    d = Descriptor(
        "float64",
        (3, 4),
        layout=Sparse(fmt, "int32", 5, 0, 1, 2),
        buffers=[B("values", 40), B("indptr", indptr.nbytes), B("indices", 20)],
    )
    return d, [raw(values), raw(indptr), raw(indices)]


COMPRESSED_DENSE = np.array([[1, 0, 2, 0], [0, 0, 0, 3], [4, 5, 0, 0]], np.float64)


def bsr():
    values = np.arange(1, 19, dtype=np.float16).reshape(3, 2, 3)
    indptr = np.array([0, 2, 3], np.int64)
    indices = np.array([0, 1, 1], np.int64)
    d = Descriptor(
        "float16",
        (4, 6),
        layout=Sparse("bsr", "int64", 3, 0, 1, 2, block_shape=(2, 3)),
        buffers=[B("values", 36), B("indptr", 24), B("indices", 24)],
    )
    return d, [raw(values), raw(indptr), raw(indices)]


def bsr_dense():
    values = np.arange(1, 19, dtype=np.float16).reshape(3, 2, 3)
    out = np.zeros((4, 6), np.float16)
    out[0:2, 0:3] = values[0]
    out[0:2, 3:6] = values[1]
    out[2:4, 3:6] = values[2]
    return out


def paged():
    """2 sequences x 40 tokens x 4 heads x 8 dims, 16 tokens a page, a
    pool of 8 pages; returns (descriptor, arrays, logical tensor)."""
    bf16 = np.dtype(ml_dtypes.bfloat16)
    rng = np.random.default_rng(7)
    pool = rng.uniform(-8, 8, size=(8, 16, 4, 8)).astype(bf16)
    table = np.array([[5, 0, 3], [7, 2, 6]], np.int32)
    logical = np.empty((2, 40, 4, 8), bf16)
    for s in range(2):
        for blk in range(3):
            n = min(16, 40 - blk * 16)
            logical[s, blk * 16 : blk * 16 + n] = pool[table[s, blk], :n]
    d = Descriptor(
        "bfloat16",
        (2, 40, 4, 8),
        layout=Paged(1, 16, 8, "int32", 0, 1),
        buffers=[B("page_pool", pool.nbytes), B("page_table", table.nbytes)],
    )
    return d, [raw(pool), raw(table)], logical


def composite():
    base = np.arange(-16, 16, dtype=np.int8).reshape(8, 4)
    scales = np.linspace(0.1, 0.8, 8).astype(np.float32)
    a = np.arange(16, dtype=np.float32).reshape(8, 2)
    b = -np.arange(8, dtype=np.float32).reshape(2, 4)
    d = Descriptor(
        "float32",
        (8, 4),
        layout=Composite(
            (
                Member(
                    "base",
                    Descriptor(
                        "int8",
                        (8, 4),
                        layout=Dense(0),
                        quantization=PerChannelAffine(0, 1, "float32"),
                    ),
                ),
                Member("lora_a", Descriptor("float32", (8, 2), layout=Dense(2))),
                Member("lora_b", Descriptor("float32", (2, 4), layout=Dense(3))),
            )
        ),
        buffers=[B("data", 32), B("scales", 32), B("data", 64), B("data", 32)],
    )
    return d, [raw(base), raw(scales), raw(a), raw(b)]


def per_tensor():
    codes = np.arange(0, 256, 16, dtype=np.uint8)
    d = Descriptor(
        "uint8", (16,), quantization=PerTensorAffine(0.0125, 128), buffers=[B("data", 16)]
    )
    return d, [raw(codes)]


def per_channel(zero_points=True):
    codes = np.arange(-6, 6, dtype=np.int8).reshape(4, 3)
    scales = np.array([0.5, 0.25, 2.0, 0.125], np.float32)
    zps = np.array([0, 1, -2, 3], np.int8)
    q = PerChannelAffine(
        0,
        1,
        "float32",
        zero_point_buffer=2 if zero_points else None,
        zero_point_dtype="int8" if zero_points else None,
    )
    buffers = [B("data", 12), B("scales", 16)] + ([B("zero_points", 4)] if zero_points else [])
    arrays = [raw(codes), raw(scales)] + ([raw(zps)] if zero_points else [])
    return Descriptor("int8", (4, 3), quantization=q, buffers=buffers), arrays


def q8_0():
    """GGUF Q8_0: int8 codes, blocks of 32 along rows, one float16 d each."""
    codes = np.random.default_rng(1).integers(-127, 128, size=(2, 64), dtype=np.int8)
    scales = np.array([0.5, 0.25, 0.125, 2.0], np.float16)
    d = Descriptor(
        "int8",
        (2, 64),
        quantization=BlockAffine(1, 32, 1, "float16"),
        buffers=[B("data", 128), B("scales", 8)],
    )
    return d, [raw(codes), raw(scales)]


def q4_0():
    """GGUF Q4_0: uint4 codes q, value (q - 8) * d, blocks of 32."""
    q = np.random.default_rng(2).integers(0, 16, size=(2, 64)).astype(ml_dtypes.uint4)
    scales = np.array([0.5, 1.0, 0.25, 3.0], np.float16)
    d = Descriptor(
        "uint4",
        (2, 64),
        quantization=BlockAffine(1, 32, 1, "float16", zero_point=8),
        buffers=[B("data", 64), B("scales", 8)],
    )
    return d, [_dtypes.pack("uint4", q), raw(scales)]


def block_zero_points():
    q = np.random.default_rng(3).integers(0, 16, size=(4, 128)).astype(ml_dtypes.uint4)
    scales = np.linspace(0.5, 4, 8).astype(ml_dtypes.bfloat16)
    zps = np.arange(8, dtype=np.uint8)
    d = Descriptor(
        "uint4",
        (4, 128),
        quantization=BlockAffine(
            1, 64, 1, "bfloat16", zero_point_buffer=2, zero_point_dtype="uint8"
        ),
        buffers=[B("data", 256), B("scales", 16), B("zero_points", 8)],
    )
    return d, [_dtypes.pack("uint4", q), raw(scales), raw(zps)]


def nf4():
    q = np.random.default_rng(4).integers(0, 16, size=(8, 16)).astype(ml_dtypes.uint4)
    absmax = np.array([0.75, 3.5], np.float32)
    d = Descriptor(
        "uint4",
        (8, 16),
        quantization=Nf4(64, 1, "float32"),
        buffers=[B("data", 64), B("scales", 8)],
    )
    return d, [_dtypes.pack("uint4", q), raw(absmax)]


def mx(element):
    dtype = MX_DTYPE[element]
    if element == "int8":
        codes = np.random.default_rng(5).integers(-128, 128, size=(2, 64)).astype(np.int8)
        data = raw(codes)
    else:
        codes = finite(dtype, 128, 6).reshape(2, 64)
        data = _dtypes.pack(dtype, codes) if _dtypes.is_packed(dtype) else raw(codes)
    scales = np.array([127, 120, 130, 0xFF], np.uint8)  # 1, 2^-7, 2^3, NaN
    d = Descriptor(
        dtype,
        (2, 64),
        quantization=Mxfp(element, 1, 1),
        buffers=[B("data", data.size), B("scales", 4)],
    )
    return d, [data, scales]


def optional_fields():
    values = np.array([[-1.5, 0, 3.25, 0], [1, 2, 3, float("nan")]], np.float32)
    d = Descriptor(
        "float32",
        (2, 4),
        buffers=[B("data", 32)],
        statistics=Statistics(min=-1.5, max=3.25, nan_count=1, zero_count=2),
        shard=Shard((8, 4), (6, 0)),
        extension=Extension("example.temperature", b'{"unit":"K"}'),
    )
    return d, [raw(values)]


def _aligned(make):
    def build():
        d, arrays = make()[:2]
        return d, [aligned(a) for a in arrays]

    return build


_SAMPLES = {
    "dense_float32": lambda: dense("float32", (3, 4)),
    "dense_scalar_bool": lambda: (
        Descriptor("bool", (), buffers=[B("data", 1)]),
        [np.array([1], np.uint8)],
    ),
    "dense_empty": lambda: dense("float64", (0, 3)),
    "dense_strided": dense_strided,
    "dense_int4": lambda: dense_values(np.arange(-3, 4).astype(ml_dtypes.int4)),
    "dense_float6": lambda: dense_values(finite("float6_e2m3fn", 8, 9)),
    "sparse_coo": coo,
    "sparse_csr": lambda: compressed("csr"),
    "sparse_csc": lambda: compressed("csc"),
    "sparse_bsr": bsr,
    "paged_kv_cache": lambda: paged()[:2],
    "composite_lora": composite,
    "quant_per_tensor_affine": per_tensor,
    "quant_per_channel_affine": lambda: per_channel(False),
    "quant_per_channel_affine_zero_points": lambda: per_channel(True),
    "quant_block_affine_q8_0": q8_0,
    "quant_block_affine_q4_0": q4_0,
    "quant_block_affine_zero_points": block_zero_points,
    "quant_nf4": nf4,
    **{f"quant_mx_{e}": (lambda e=e: mx(e)) for e in MX_DTYPE},
    "optional_fields": optional_fields,
}

SAMPLES = {name: _aligned(make) for name, make in _SAMPLES.items()}


def mappings(path) -> list:
    """(start, end) of every mapping of `path` in /proc/self/maps."""
    real = os.path.realpath(path)
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and parts[5].strip().split(" (deleted)")[0] == real:
                start, end = (int(x, 16) for x in parts[0].split("-"))
                out.append((start, end))
    return out


def inside(address: int, size: int, ranges) -> bool:
    return any(start <= address and address + size <= end for start, end in ranges)
