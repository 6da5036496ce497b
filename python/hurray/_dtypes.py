"""dtype names <-> numpy dtypes (ml_dtypes for the narrow floats and int4).
Sizes and packing come from the C library."""

from __future__ import annotations

import sys

import numpy as np

from . import _hurray

# hurray dtype name -> numpy dtype of one *unpacked* element: numpy's own
# types here, the narrow floats and int4 (ml_dtypes types) added by
# _load_narrow the first time one is asked for. Importing ml_dtypes
# registers its ufunc loops and casts with numpy, 0.85 s of the 1.05 s that
# `import hurray` took (every CLI command paid it), for dtypes most calls
# never meet.
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
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "complex64": np.dtype(np.complex64),
    "complex128": np.dtype(np.complex128),
}
# ml_dtypes floats, which numpy reports with kind "V".
ML_FLOAT_DTYPES = (
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e8m0fnu",
    "float6_e3m2fn",
    "float6_e2m3fn",
    "float4_e2m1fn",
)
ML_DTYPES = ML_FLOAT_DTYPES + ("int4", "uint4")
_BY_NUMPY = {v: k for k, v in _NUMPY.items()}


def _load_narrow() -> None:
    if ML_DTYPES[-1] in _NUMPY:
        return
    import ml_dtypes

    for name in ML_DTYPES:
        if not hasattr(ml_dtypes, name):  # float8_e8m0fnu, float6_*, float4_*: 0.5.0 on
            raise ImportError(
                f"hurray needs ml_dtypes 0.5 or later (it has {name}); this is "
                f"{getattr(ml_dtypes, '__version__', 'an older one')}: "
                "pip install -U 'ml_dtypes>=0.5'"
            )
        dtype = np.dtype(getattr(ml_dtypes, name))
        _BY_NUMPY[dtype] = name
        _NUMPY[name] = dtype  # last: its presence says the table is whole


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
    found = _NUMPY.get(name)
    if found is None and name in ML_DTYPES:
        _load_narrow()
        found = _NUMPY[name]
    if found is None:
        # InvalidArgumentError: a ValueError, and a HurrayError like the rest.
        raise _hurray._error("HURRAY_ERR_INVALID_ARGUMENT", f"unknown hurray dtype {name!r}")
    return found


def as_numpy(dtype) -> np.dtype:
    """np.dtype(dtype), where hurray's own names (the ml_dtypes ones too,
    which numpy knows only once ml_dtypes is imported) are understood."""
    if isinstance(dtype, str) and dtype in ML_DTYPES:
        return to_numpy(dtype)
    return np.dtype(dtype)


def from_numpy(dtype) -> str:
    dtype = as_numpy(dtype)
    key = dtype.newbyteorder("=") if dtype.byteorder == "<" else dtype
    name = _BY_NUMPY.get(key)
    # A dtype of ml_dtypes exists only once something imported it.
    if name is None and "ml_dtypes" in sys.modules:
        _load_narrow()
        name = _BY_NUMPY.get(key)
    if name is None:
        raise _hurray._error(
            "HURRAY_ERR_INVALID_ARGUMENT", f"numpy dtype {dtype} has no hurray equivalent"
        )
    return name


def name_of(dtype) -> str | None:
    """from_numpy's name for a dtype, or None where hurray has none."""
    try:
        return from_numpy(dtype)
    except ValueError:
        return None


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
