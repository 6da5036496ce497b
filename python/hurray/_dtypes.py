"""dtype names <-> numpy dtypes (ml_dtypes for the narrow floats and int4)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

# hurray dtype name -> numpy dtype of one *unpacked* element.
_NUMPY = {
    "bool": np.dtype(np.bool_),
    "int8": np.dtype(np.int8),
    "int16": np.dtype(np.int16),
    "int32": np.dtype(np.int32),
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "uint16": np.dtype(np.uint16),
    "uint32": np.dtype(np.uint32),
    "uint64": np.dtype(np.uint64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "complex64": np.dtype(np.complex64),
    "complex128": np.dtype(np.complex128),
    "float8_e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn),
    "float8_e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "float8_e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "float6_e3m2fn": np.dtype(ml_dtypes.float6_e3m2fn),
    "float6_e2m3fn": np.dtype(ml_dtypes.float6_e2m3fn),
    "float4_e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
    "int4": np.dtype(ml_dtypes.int4),
    "uint4": np.dtype(ml_dtypes.uint4),
}

BITS = {
    "bool": 8, "int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16,
    "uint32": 32, "uint64": 64, "float16": 16, "bfloat16": 16, "float32": 32, "float64": 64,
    "complex64": 64, "complex128": 128, "float8_e4m3fn": 8, "float8_e5m2": 8,
    "float8_e8m0fnu": 8, "float6_e3m2fn": 6, "float6_e2m3fn": 6, "float4_e2m1fn": 4,
    "int4": 4, "uint4": 4,
}

DTYPES = tuple(BITS)
_BY_NUMPY = {v: k for k, v in _NUMPY.items()}


def to_numpy(name: str) -> np.dtype:
    try:
        return _NUMPY[name]
    except KeyError:
        raise ValueError(f"unknown hurray dtype {name!r}") from None


def from_numpy(dtype) -> str:
    dtype = np.dtype(dtype)
    try:
        return _BY_NUMPY[dtype.newbyteorder("=") if dtype.byteorder == "<" else dtype]
    except KeyError:
        raise ValueError(f"numpy dtype {dtype} has no hurray equivalent") from None


def storage_bytes(name: str, count: int) -> int:
    return (count * BITS[name] + 7) // 8


def is_packed(name: str) -> bool:
    return BITS[name] < 8


def unpack(name: str, raw: np.ndarray, count: int) -> np.ndarray:
    """Sub-byte elements, LSB-first (element 2k in the low nibble of byte k;
    6-bit elements as a little-endian bit stream), as one byte per element
    of the ml_dtypes type."""
    bits = BITS[name]
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1)
    if bits == 4:
        codes = np.empty(raw.size * 2, dtype=np.uint8)
        codes[0::2] = raw & 0x0F
        codes[1::2] = raw >> 4
    else:  # 6 bits: 4 elements in 3 bytes
        padded = np.zeros(-(-raw.size // 3) * 3, dtype=np.uint8)
        padded[: raw.size] = raw
        word = (padded[0::3].astype(np.uint32) | padded[1::3].astype(np.uint32) << 8
                | padded[2::3].astype(np.uint32) << 16)
        codes = np.stack([(word >> (6 * k)) & 0x3F for k in range(4)], axis=1).reshape(-1)
        codes = codes.astype(np.uint8)
    return codes[:count].view(to_numpy(name))


def pack(name: str, values: np.ndarray) -> np.ndarray:
    """Inverse of unpack: one-element-per-byte ml_dtypes values to packed bytes."""
    bits = BITS[name]
    codes = np.ascontiguousarray(values).reshape(-1).view(np.uint8) & ((1 << bits) - 1)
    if bits == 4:
        padded = np.zeros(codes.size + codes.size % 2, dtype=np.uint8)
        padded[: codes.size] = codes
        return (padded[0::2] | (padded[1::2] << 4)).astype(np.uint8)
    padded = np.zeros(-(-codes.size // 4) * 4, dtype=np.uint32)
    padded[: codes.size] = codes
    word = padded[0::4] | padded[1::4] << 6 | padded[2::4] << 12 | padded[3::4] << 18
    out = np.stack([word & 0xFF, (word >> 8) & 0xFF, (word >> 16) & 0xFF], axis=1).reshape(-1)
    return out[: storage_bytes(name, codes.size)].astype(np.uint8)
