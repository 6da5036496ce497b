"""dtype names <-> numpy dtypes (ml_dtypes for the narrow floats and int4).
Sizes and packing come from the C library."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from . import _hurray

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

# Bits per element, and so which dtypes are packed: the C library's table.
BITS = dict(_hurray.DTYPE_BITS)

DTYPES = tuple(BITS)

# The dtypes numpy has a type of its own for: torch.from_numpy takes them,
# and a converter keeps them (the others are ml_dtypes types).
NUMPY_NATIVE = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
)
# The dtypes torch has a dtype of the same name for (some only in newer
# torch releases: hurray.torch looks each up).
TORCH_NATIVE = NUMPY_NATIVE + ("bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")
_BY_NUMPY = {v: k for k, v in _NUMPY.items()}


def to_numpy(name: str) -> np.dtype:
    try:
        return _NUMPY[name]
    except KeyError:
        # InvalidArgumentError: a ValueError, and a HurrayError like the rest.
        raise _hurray._error(
            "HURRAY_ERR_INVALID_ARGUMENT", f"unknown hurray dtype {name!r}"
        ) from None


def from_numpy(dtype) -> str:
    dtype = np.dtype(dtype)
    try:
        return _BY_NUMPY[dtype.newbyteorder("=") if dtype.byteorder == "<" else dtype]
    except KeyError:
        raise _hurray._error(
            "HURRAY_ERR_INVALID_ARGUMENT", f"numpy dtype {dtype} has no hurray equivalent"
        ) from None


def storage_bytes(name: str, count: int) -> int:
    return (count * BITS[name] + 7) // 8


def is_packed(name: str) -> bool:
    return BITS[name] < 8


def unpack(name: str, raw: np.ndarray, count: int) -> np.ndarray:
    """Sub-byte elements (packed LSB-first, include/hurray/dtype.h) as one
    byte per element of the ml_dtypes type; unpacked in C."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    codes = np.frombuffer(_hurray._unpack(name, raw, count), dtype=np.uint8)
    return codes.view(to_numpy(name))


def pack(name: str, values: np.ndarray) -> np.ndarray:
    """Inverse of unpack: one-element-per-byte ml_dtypes values to packed bytes."""
    codes = np.ascontiguousarray(values).reshape(-1).view(np.uint8)
    return np.frombuffer(_hurray._pack(name, codes), dtype=np.uint8).copy()
