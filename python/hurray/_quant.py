"""hurray.quantize: float arrays to quantized tensors, through the C kernels."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import _dtypes, _hooks, _hurray

QUANT_SCHEMES = tuple(_hurray.ENUMS["quant_scheme"])  # the C library's, in its order

_READ_AS_IS = ("float32", "float16", "bfloat16")


def _dtype_name(dtype: Any) -> Optional[str]:
    if dtype is None or isinstance(dtype, str):
        return dtype
    return _dtypes.from_numpy(dtype)


def _as_float32(a: np.ndarray) -> np.ndarray:
    """float32 values of `a`, or an error where the cast would change them
    past rounding: a complex array loses its imaginary parts, and a finite
    float64 beyond float32's range would become an infinity (refused here as
    NOT_FINITE for every scheme, even the MX ones that encode an infinity
    in the input as a NaN block)."""
    if np.iscomplexobj(a):
        raise TypeError(f"quantize takes real input, not {a.dtype}")
    with np.errstate(over="raise"):
        try:
            return a.astype(np.float32)
        except FloatingPointError:
            pass
    big = np.flatnonzero(np.isfinite(a) & (np.abs(a) > np.finfo(np.float32).max))[0]
    raise _hurray._error(
        "HURRAY_ERR_NOT_FINITE",
        f"element {big} ({float(a.flat[big])!r}) is finite but beyond float32's range, which "
        "quantization reads its input as",
    )


def _as_float_array(array: Any) -> np.ndarray:
    if type(array).__module__.startswith("torch"):
        # bfloat16 arrives as ml_dtypes.bfloat16
        array = _hooks.torch("from_torch")(array.detach()).numpy()
    a = np.asarray(array)
    # None, str and object arrays (astype would make NaNs of them), dates and
    # durations (their counts of days or seconds are no values to quantize)
    # and records (astype would quietly take a one-field record's field) or
    # raw bytes; ml_dtypes' kinds are "V" too, and have a name
    if (
        a.dtype.kind in "OSUMm"
        or a.dtype.names is not None
        or (a.dtype.kind == "V" and _dtypes.name_of(a.dtype) is None)  # raw bytes
    ):
        raise TypeError(
            f"quantize takes an array of numbers, not {a.dtype} ({type(array).__name__})"
        )
    name = _dtypes.name_of(a.dtype)
    if name not in _READ_AS_IS:
        a = _as_float32(a)
    elif a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("="))
    # not np.ascontiguousarray: it turns a 0-d array into shape (1,)
    return a if a.flags.c_contiguous else a.copy(order="C")


def quantize(
    array: Any,
    scheme: str,
    *,
    axis: Optional[int] = None,
    block_size: Optional[int] = None,
    dtype: Any = None,
    scale_dtype: Any = None,
    symmetric: Optional[bool] = None,
    threads: int = 1,
):
    """Quantizes a float array (numpy, ml_dtypes, torch on CPU, or anything
    numpy.asarray takes) into a hurray.Tensor holding codes, scales and zero
    points in separate buffers. float32, float16 and bfloat16 are read as
    they are; other dtypes are converted to float32 first (a finite value
    beyond float32's range is refused, complex input is a TypeError).

    scheme: one of QUANT_SCHEMES. axis: the channel axis (per_channel,
    default 0) or the blocking axis (block_affine and MX, default -1).
    block_size: block_affine (default 32) and nf4 (default 64); fixed at 32
    for q8_0, q4_0 and MX; affine and per_channel take none. dtype: the
    codes of the affine kinds (int8 by default, uint8, int4, uint4).
    scale_dtype: per_channel and block_affine scales (float32 by default,
    float16, bfloat16). symmetric: zero point at
    the middle of the code range (default for signed codes) or a min/max
    range with zero points (default for unsigned). threads: how many threads
    the kernel may use on large inputs; the bytes are the same either way.
    The GIL is released while the kernel runs. See docs/spec/quantization.md.
    """
    if symmetric is not None and not isinstance(symmetric, (bool, np.bool_)):
        raise TypeError(f"symmetric must be True, False or None, not {symmetric!r}")
    if not isinstance(scheme, str):
        raise TypeError("scheme must be a string, one of hurray.QUANT_SCHEMES")
    a = _as_float_array(array)
    raw = a.reshape(-1).view(np.uint8) if a.size else np.zeros(0, np.uint8)
    sym = -1 if symmetric is None else int(bool(symmetric))
    return _hurray._quantize(
        raw,
        _dtypes.from_numpy(a.dtype),
        a.shape,
        scheme,
        axis,
        block_size,
        _dtype_name(dtype),
        _dtype_name(scale_dtype),
        sym,
        threads,  # range-checked in C, as dequantize's: a float is a TypeError
    )
