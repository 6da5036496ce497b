"""PyTorch interop: torch.Tensor <-> hurray.Tensor, and safetensors-shaped
save_file / load_file.

    from hurray.torch import from_torch, to_torch, save_file, load_file

from_torch(tensor)
    Dense CPU tensors are shared, not copied: the hurray tensor's data buffer
    is the torch tensor's memory and keeps it alive. A tensor that is not
    contiguous is made contiguous first (that copies). Quantized tensors
    (per-tensor and per-channel affine) become their integer codes plus the
    quantization parameters; sparse COO, CSR, CSC and BSR tensors become
    hurray.SparseTensor over their values and index tensors.

to_torch(t)
    Dense tensors are shared, not copied, wherever torch can hold the
    layout (torch has no negative strides: those are copied). The result
    aliases the hurray tensor's buffers and keeps them alive.

    Tensors read with ``hurray.load`` / ``hurray.open`` (mmap=True, the
    default) are views of a private, copy-on-write mapping of the file: they
    may be written, and a write copies the page it touches into this
    process's memory, never into the file. A ``readonly=True`` load maps
    the file read-only; torch has no read-only tensors (and torch.from_dlpack
    ignores DLPack's read-only flag), so to_torch gives a copy of any tensor
    with a read-only buffer (such a load, a tensor made from a read-only
    numpy array, np.memmap or bytes), dense or sparse, instead of a view that
    would crash on a write or change immutable memory. A tensor taken from a
    ``__hurray__`` capsule is copied when the capsule's context flags its
    memory read-only (ADR-0029), and stays a view otherwise.

    A copy (negative strides, which torch lacks; the codes of a quantized
    tensor that are not contiguous; dequantize= on load) is held to the
    limit of to_dense() and dequantize(): LimitError beyond
    max(64 MiB, 64x the stored bytes).

save_file(tensors, filename, metadata=None) / load_file(filename, device="cpu", *,
mmap=True, dequantize=None)
    Drop-in replacements for ``safetensors.torch.save_file`` / ``load_file``:
    zero-copy, writable (copy-on-write) tensors by default; ``dequantize=``
    turns quantized tensors into real values on load (see load_file).

hurray.torch.dcp (a submodule, imported on demand)
    HurrayStorageWriter / HurrayStorageReader: hurray as a storage backend of
    torch.distributed.checkpoint, resharding on load (docs/impl/torch-dcp.md).
"""

from __future__ import annotations

import math
import os
import warnings
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import torch

from .. import _dtypes, _hurray
from .._descriptor import (
    Composite,
    Dense,
    Descriptor,
    Paged,
    PerChannelAffine,
    PerTensorAffine,
    Sparse,
)
from .._files import File as _File
from .._files import refuse_mapped_sources as _refuse_mapped_sources
from .._files import save as _save
from .._hurray import UnsupportedError
from .._sparse import SparseTensor
from .._tensor import Tensor, from_hurray, specialise, stored_buffer, unsupported
from .._threads import map_on_threads
from . import _staged

__all__ = ["from_torch", "to_torch", "save_file", "load_file"]


def _torch_dtypes() -> Dict[str, "torch.dtype"]:
    names = _dtypes.TORCH_NATIVE
    # uint16/32/64 and the float8 types arrived in different torch releases.
    return {n: getattr(torch, n) for n in names if isinstance(getattr(torch, n, None), torch.dtype)}


# hurray dtype name <-> torch dtype, for the dtypes both know.
_TO_TORCH: Dict[str, "torch.dtype"] = _torch_dtypes()
_FROM_TORCH: Dict["torch.dtype", str] = {v: k for k, v in _TO_TORCH.items()}

# Quantized torch dtype -> (hurray code dtype, torch integer dtype of the codes).
# torch has deprecated its quantized dtypes: look them up, do not assume them.
_QUANT_CODES = {
    getattr(torch, q): (code, getattr(torch, code))
    for q, code in (("qint8", "int8"), ("quint8", "uint8"), ("qint32", "int32"))
    if hasattr(torch, q)
}
_CODES_TO_QUANT = {code: q for q, (code, _) in _QUANT_CODES.items()}

# hurray dtypes whose numpy type torch.from_numpy takes; the others
# (bfloat16, float8: ml_dtypes types) travel as same-sized integers.
_NUMPY_NATIVE = frozenset(_dtypes.NUMPY_NATIVE)

_NOT_WRITABLE = "The given NumPy array is not writable"
# An integer dtype of each element size, to move elements as raw bytes.
_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


# ---------------------------------------------------------------- torch -> hurray


def _hurray_dtype(dtype: "torch.dtype") -> str:
    try:
        return _FROM_TORCH[dtype]
    except KeyError:
        raise unsupported(
            f"torch dtype {dtype} has no hurray equivalent (hurray holds "
            f"{', '.join(sorted(_TO_TORCH))}); convert it with .to(...) first"
        ) from None


def _plain(tensor: "torch.Tensor") -> "torch.Tensor":
    """The tensor's values in memory torch and numpy can both read as they
    are: no autograd, no lazy conjugate or negative bit, row-major."""
    t = tensor.detach()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t.contiguous()


def storage_spans(t: "torch.Tensor") -> List[Tuple[int, int]]:
    """(address, length) of each storage a CPU tensor's values live in: its
    own, or a sparse tensor's index and value tensors' (what from_torch
    reads, for save()'s check against the file being written)."""
    if t.layout == torch.strided:
        parts = [t]
    elif t.layout == torch.sparse_coo:
        parts = [t._indices(), t._values()]
    elif t.layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = [t.crow_indices(), t.col_indices(), t.values()]
    elif t.layout in (torch.sparse_csc, torch.sparse_bsc):
        parts = [t.ccol_indices(), t.row_indices(), t.values()]
    else:
        parts = []
    storages = [p.untyped_storage() for p in parts if p.numel()]
    return [(s.data_ptr(), s.nbytes()) for s in storages]


def _raw(t: "torch.Tensor") -> np.ndarray:
    """The bytes of a contiguous tensor as a uint8 numpy array over the same
    memory; the array's base is a torch tensor sharing t's storage, so the
    array keeps that storage alive."""
    if t.numel() == 0:
        return np.zeros(0, np.uint8)
    # A contiguous tensor may still carry any stride on a dimension of size
    # 1 (torch.tensor([1j]).imag has stride 2), which view() refuses: the
    # same memory, seen as one flat row.
    flat = t.as_strided((t.numel(),), (1,), t.storage_offset())
    try:
        return flat.view(torch.uint8).numpy()
    except RuntimeError as exc:  # a subclass without plain memory (FakeTensor)
        raise _no_memory(t, exc) from None


def _part(role: str, t: "torch.Tensor") -> tuple:
    """(Buffer, array) for one contiguous tensor. The alignment declared is
    the element type's natural one, never the address's (files must not
    depend on where the data sat); misaligned data is copied."""
    return stored_buffer(role, _raw(t), t.element_size())


def _check_cpu(tensor: "torch.Tensor") -> None:
    if tensor.device.type != "cpu":
        raise unsupported(
            f"from_torch takes CPU tensors; this one is on {tensor.device} "
            "(move it with .cpu() first)"
        )


def _check_has_memory(tensor: "torch.Tensor") -> None:
    """A functional, fake or wrapper tensor has no storage of its own:
    .numpy() of one hands out memory that is not its data (torch's flaw),
    which would be saved without a word. torch refuses its data pointer."""
    try:
        with warnings.catch_warnings():  # a FakeTensor's "deprecated" one
            warnings.simplefilter("ignore")
            tensor.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError) as exc:
        raise _no_memory(tensor, exc) from None


def _no_memory(tensor: "torch.Tensor", exc: BaseException) -> UnsupportedError:
    """What from_torch says of a tensor torch gives no plain memory for."""
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return unsupported(
        f"from_torch takes tensors with memory of their own; this "
        f"{type(tensor).__name__} has none to read ({first})"
    )


def _from_dense(tensor: "torch.Tensor") -> Tensor:
    name = _hurray_dtype(tensor.dtype)
    t = _plain(tensor)
    buffer, raw = _part("data", t)
    descriptor = Descriptor(name, tuple(t.shape), buffers=[buffer])
    return Tensor(descriptor, [raw])


def _codes_of(q: "torch.Tensor", code_dtype: "torch.dtype") -> "torch.Tensor":
    """The integer codes of a contiguous quantized tensor, sharing its memory
    when torch allows (int_repr() copies)."""
    try:
        codes = torch.empty(0, dtype=code_dtype).set_(
            q.untyped_storage(), q.storage_offset(), q.size(), q.stride()
        )
        if codes.data_ptr() == q.data_ptr() or q.numel() == 0:
            return codes
    except (RuntimeError, TypeError, NotImplementedError):
        pass
    return q.int_repr()


def _from_quantized(tensor: "torch.Tensor") -> Tensor:
    if tensor.dtype not in _QUANT_CODES:
        raise unsupported(
            f"quantized torch dtype {tensor.dtype} is not supported (qint8, quint8 and qint32 "
            "are); use tensor.dequantize()"
        )
    scheme = tensor.qscheme()
    name, code_dtype = _QUANT_CODES[tensor.dtype]
    q = tensor.detach().contiguous()
    codes = _codes_of(q, code_dtype)
    shape = tuple(q.shape)
    data, raw = _part("data", codes)
    if scheme == torch.per_tensor_affine:
        quant = PerTensorAffine(float(q.q_scale()), int(q.q_zero_point()))
        return Tensor(Descriptor(name, shape, quantization=quant, buffers=[data]), [raw])
    if scheme == torch.per_channel_affine:
        scales = q.q_per_channel_scales().detach().to(torch.float64).contiguous()
        zero_points = q.q_per_channel_zero_points().detach().to(torch.int64).contiguous()
        scale_buffer, scale_raw = _part("scales", scales)
        zp_buffer, zp_raw = _part("zero_points", zero_points)
        quant = PerChannelAffine(
            int(q.q_per_channel_axis()),
            scale_buffer=1,
            scale_dtype="float64",
            zero_point_buffer=2,
            zero_point_dtype="int64",
        )
        descriptor = Descriptor(
            name, shape, quantization=quant, buffers=[data, scale_buffer, zp_buffer]
        )
        return Tensor(descriptor, [raw, scale_raw, zp_raw])
    raise unsupported(
        f"quantization scheme {scheme} is not supported (per_tensor_affine and "
        "per_channel_affine are); use tensor.dequantize()"
    )


def _index_dtype(*tensors: "torch.Tensor") -> str:
    dtypes = {t.dtype for t in tensors}
    if dtypes == {torch.int64}:
        return "int64"
    if dtypes == {torch.int32}:
        return "int32"
    raise unsupported(
        f"sparse indices of dtypes {sorted(map(str, dtypes))}: hurray takes "
        "int32 or int64, one dtype for all"
    )


def _coalesced(t: "torch.Tensor") -> "torch.Tensor":
    """t.coalesce(); where torch cannot sum t's dtype (float8), the
    coordinates are sorted here instead, and duplicates are refused."""
    if t.is_coalesced():
        return t
    # Asked up front, not by catching torch's NotImplementedError: a C++
    # exception aborts the process under a preloaded ASan runtime.
    if not (t.dtype.is_floating_point and t.dtype.itemsize == 1):
        return t.coalesce()
    cause = f"torch cannot add {t.dtype} values"
    indices = t._indices()
    linear = torch.zeros(indices.shape[1], dtype=torch.int64)
    for dim, n in enumerate(t.shape[: t.sparse_dim()]):
        linear = linear * n + indices[dim]
    order = torch.argsort(linear, stable=True)
    ordered = linear[order]
    if ordered.numel() > 1 and bool((ordered[1:] == ordered[:-1]).any()):
        raise unsupported(
            f"this sparse COO tensor repeats a coordinate, and torch cannot sum {t.dtype} "
            "values to coalesce it; coalesce it in a wider dtype first"
        )
    values = t._values()
    same_size = _SAME_SIZE_INT.get(values.element_size())
    if same_size is None or values.dim() != 1:
        raise unsupported(f"cannot coalesce this sparse COO tensor: {cause}")
    # Reordered as raw bytes: torch may not index the dtype either.
    raw = values.view(same_size)[order].view(values.dtype)
    return torch.sparse_coo_tensor(
        indices[:, order], raw, t.shape, dtype=t.dtype, is_coalesced=True
    )


def _from_sparse(tensor: "torch.Tensor") -> SparseTensor:
    layout = tensor.layout
    t = tensor.detach()
    shape = tuple(t.shape)
    name = _hurray_dtype(t.dtype)
    if layout == torch.sparse_coo:
        if t.dense_dim() != 0:
            raise unsupported(
                f"hybrid sparse COO tensors ({t.dense_dim()} dense dimensions) are not "
                "supported; hurray COO stores one value per coordinate"
            )
        t = _coalesced(t)
        indices = t.indices()
        parts = [_part("values", _plain(t.values()))] + [
            _part("indices", _plain(indices[i])) for i in range(indices.shape[0])
        ]
        sparse = Sparse(
            "coo",
            _index_dtype(indices),
            int(t._nnz()),
            values_buffer=0,
            index_buffers=tuple(range(1, 1 + indices.shape[0])),
            canonical=True,
        )
    else:
        if len(shape) != 2 or t.dense_dim() != 0:
            raise unsupported(
                f"hurray {layout} tensors are 2-D without dense dimensions; this one has "
                f"shape {list(shape)} with {t.dense_dim()} dense dimensions"
            )
        if layout == torch.sparse_csr:
            indptr, indices, fmt = t.crow_indices(), t.col_indices(), "csr"
        elif layout == torch.sparse_csc:
            indptr, indices, fmt = t.ccol_indices(), t.row_indices(), "csc"
        else:  # sparse_bsr
            indptr, indices, fmt = t.crow_indices(), t.col_indices(), "bsr"
        values = _plain(t.values())
        parts = [
            _part("values", values),
            _part("indptr", _plain(indptr)),
            _part("indices", _plain(indices)),
        ]
        sparse = Sparse(
            fmt,
            _index_dtype(indptr, indices),
            int(indices.numel()),
            values_buffer=0,
            indptr_buffer=1,
            indices_buffer=2,
            block_shape=tuple(int(b) for b in values.shape[1:]) if fmt == "bsr" else None,
        )
    descriptor = Descriptor(name, shape, layout=sparse, buffers=[b for b, _ in parts])
    return SparseTensor(descriptor, [raw for _, raw in parts])


def from_torch(tensor: "torch.Tensor") -> Tensor:
    """A hurray tensor over a CPU torch tensor's memory (see the module doc).

    Raises UnsupportedError for devices other than the CPU, dtypes hurray
    does not have, quantization schemes other than per-tensor and
    per-channel affine, and layouts other than strided, sparse COO, CSR,
    CSC and BSR."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"from_torch takes a torch.Tensor, not {type(tensor).__name__}")
    _check_cpu(tensor)
    _check_not_nested(tensor)
    layout = tensor.layout
    if layout == torch.strided:
        _check_has_memory(tensor)
    if tensor.is_quantized:
        if layout != torch.strided:
            raise unsupported(f"quantized tensors of layout {layout} are not supported")
        return _from_quantized(tensor)
    if layout == torch.strided:
        return _from_dense(tensor)
    if layout in (torch.sparse_coo, torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr):
        return _from_sparse(tensor)
    hint = "; convert it with .to_sparse_bsr(blocksize)" if layout == torch.sparse_bsc else ""
    raise unsupported(
        f"torch layout {layout} is not supported (strided, sparse_coo, sparse_csr, sparse_csc "
        f"and sparse_bsr are){hint}"
    )


# ---------------------------------------------------------------- hurray -> torch


def _torch_dtype(name: str, what: str = "tensor") -> "torch.dtype":
    if _dtypes.is_packed(name):
        read = (
            "t.to_dense() (a dense numpy array, one element per byte)"
            if what == "sparse tensor"
            else "t.dequantize() (real values) or t.codes() (one element per byte)"
        )
        raise unsupported(f"torch has no {name} dtype; read this {what} with {read} instead")
    try:
        return _TO_TORCH[name]
    except KeyError:
        raise unsupported(f"this torch build has no {name} dtype; use t.numpy() instead") from None


def _array_to_torch(array: np.ndarray, name: str) -> "torch.Tensor":
    """A numpy array of hurray dtype `name` as a torch tensor over the same
    memory where torch can hold its strides (not negative ones)."""
    dtype = _torch_dtype(name)
    src = (
        array
        if name in _NUMPY_NATIVE
        else array.view({1: np.uint8, 2: np.int16, 4: np.int32, 8: np.int64}[array.dtype.itemsize])
    )
    if any(s < 0 for s in src.strides):
        # torch has no negative strides: a copy. Not ascontiguousarray,
        # which returns an array numpy calls contiguous (a negative stride
        # on a dimension of size 0 or 1) as it is.
        src = src.copy(order="C")
    with warnings.catch_warnings():
        # Buffers read from a file or taken from a capsule are flagged
        # read-only; torch cannot mark a tensor read-only and warns. Whoever
        # loaded them keeps the rule not to write (see the module doc).
        warnings.filterwarnings("ignore", message=_NOT_WRITABLE, category=UserWarning)
        out = torch.from_numpy(src)
    return out if out.dtype == dtype else out.view(dtype)


def _check_copy(t: Tensor, itemsize: int) -> None:
    """LimitError before a copy of t's elements, `itemsize` bytes each: the
    limit to_dense() and dequantize() keep (max(64 MiB, 64x the stored
    bytes)), for a tensor whose strides repeat a few stored bytes (0) or
    that torch cannot view (negative): a file of a few hundred bytes could
    otherwise ask for any amount of memory."""
    t._check_output_size(math.prod(t.descriptor.shape) * itemsize)


def _param(t: Tensor, index: int, name: str, count: int, offset: int = 0) -> np.ndarray:
    """`count` elements from byte `offset` of buffer `index`: zero-copy for
    byte-sized dtypes, unpacked (a copy) for sub-byte ones."""
    if _dtypes.is_packed(name):
        raw = np.frombuffer(t._buffer(index), dtype=np.uint8)[offset:]
        if raw.size < _dtypes.storage_bytes(name, count):
            raise unsupported(
                f"buffer {index} holds fewer than the {count} {name} values "
                "the descriptor places there"
            )
        return _dtypes.unpack(name, raw, count)
    dtype = _dtypes.to_numpy(name)
    raw = np.frombuffer(t._buffer(index), dtype=np.uint8)[offset : offset + count * dtype.itemsize]
    if raw.size != count * dtype.itemsize:
        raise unsupported(
            f"buffer {index} holds fewer than the {count} {name} values the descriptor places there"
        )
    return raw.view(dtype)


def _to_quantized(t: Tensor, d: Descriptor) -> "torch.Tensor":
    q = d.quantization
    if d.dtype not in _CODES_TO_QUANT:
        raise unsupported(
            f"torch quantizes to int8, uint8 and int32 codes, not {d.dtype}; use t.dequantize()"
        )
    if isinstance(q, PerChannelAffine):
        # What torch's per-channel tensor holds; any other field (an offset,
        # a code book, super scales, packed zero points: ADR-0024) changes
        # the values, and reading past it would hand them out wrong.
        plain = PerChannelAffine(
            axis=q.axis,
            scale_buffer=q.scale_buffer,
            scale_dtype=q.scale_dtype,
            zero_point_buffer=q.zero_point_buffer,
            zero_point_dtype=q.zero_point_dtype,
            zero_point=q.zero_point,
        )
        if q != plain:
            extra = sorted(k for k in q._field_defaults if getattr(q, k) != getattr(plain, k))
            raise unsupported(
                f"torch's per-channel quantized tensors have no {', '.join(extra)}; use "
                "t.dequantize(), or load_file(..., dequantize=torch.float32)"
            )
    codes = _array_to_torch(t.codes(), d.dtype)
    if not codes.is_contiguous():  # torch's quantized tensors take contiguous codes: a copy
        _check_copy(t, codes.element_size())
        codes = codes.contiguous()
    if isinstance(q, PerTensorAffine):
        zero_points = np.array([q.zero_point], np.int64)
    elif q.zero_point_buffer is None:
        zero_points = np.full(d.shape[q.axis], q.zero_point, np.int64)
    else:
        zero_points = _param(t, q.zero_point_buffer, q.zero_point_dtype, d.shape[q.axis])
        zero_points = zero_points.astype(np.int64)
    _check_torch_zero_points(zero_points, d.dtype)
    if isinstance(q, PerTensorAffine):
        _check_torch_int32_differences(codes, int(q.zero_point), d.dtype)
        return torch._make_per_tensor_quantized_tensor(codes, float(q.scale), int(q.zero_point))
    count = d.shape[q.axis]
    scales = torch.from_numpy(_param(t, q.scale_buffer, q.scale_dtype, count).astype(np.float64))
    return torch._make_per_channel_quantized_tensor(
        codes, scales, torch.from_numpy(zero_points), int(q.axis)
    )


def _check_torch_zero_points(zero_points: np.ndarray, code_dtype: str) -> None:
    """torch takes a quantized tensor whose zero point lies outside its code
    range, then fails every operation on it ("zero_point ... is above upper
    bound"); hurray computes with any."""
    info = np.iinfo(_dtypes.to_numpy(code_dtype))
    bad = np.flatnonzero((zero_points < info.min) | (zero_points > info.max))
    if bad.size:
        raise unsupported(
            f"zero point {int(zero_points[bad[0]])} lies outside the {code_dtype} codes' range "
            f"[{info.min}, {info.max}], which torch's quantized tensors require; use "
            "t.dequantize(), or load_file(..., dequantize=torch.float32)"
        )


def _check_torch_int32_differences(codes: "torch.Tensor", zero_point: int, code_dtype: str) -> None:
    """torch's per-tensor qint32 dequantize subtracts the zero point in
    int32, which wraps: codes [2**30] with zero point -2**30 read as
    -2147483648.0. hurray's c - z is exact (quantization.md 5.1), so such a
    tensor has no torch form that keeps its values. (Per-channel tensors
    subtract in float and are exact.)"""
    if code_dtype != "int32" or codes.numel() == 0:
        return
    low, high = int(codes.min()) - zero_point, int(codes.max()) - zero_point
    if low < -(2**31) or high > 2**31 - 1:
        raise unsupported(
            f"codes minus the zero point {zero_point} reach {low if low < -(2**31) else high}, "
            "past int32, where torch's per-tensor qint32 tensors compute them (they would "
            "wrap); use t.dequantize(), or load_file(..., dequantize=torch.float32)"
        )


def _rows_sorted(indptr: np.ndarray, indices: np.ndarray) -> bool:
    """Whether each row's indices strictly increase: every entry not above
    the one before it starts a row. One pass over the indices (torch's own
    check raises a C++ exception, which a sanitizer build may not unwind)."""
    if indices.size < 2:
        return True
    low = np.flatnonzero(np.diff(indices) <= 0) + 1
    if low.size == 0:
        return True
    starts = indptr[1:-1]
    if starts.size == 0:
        return False
    at = np.minimum(np.searchsorted(starts, low), starts.size - 1)
    return bool(np.all(starts[at] == low))


def _sorted_rows(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray, dtype: str):
    """CSR/CSC/BSR parts with each row's (column's, block row's) indices
    strictly increasing, as torch requires. The format allows any order and
    repeats (layouts.md §3); those are sorted, and repeats summed in the
    element type in storage order, as hurray_tensor_to_dense sums them.
    A copy: only parts _rows_sorted refuses come here."""
    nnz = indices.size
    rows = np.repeat(np.arange(indptr.size - 1), np.diff(indptr.astype(np.int64)))
    order = np.lexsort((indices, rows))  # stable: repeats keep storage order
    rows, indices, values = rows[order], indices[order], values[order]
    first = np.ones(nnz, bool)
    first[1:] = (rows[1:] != rows[:-1]) | (indices[1:] != indices[:-1])
    if not first.all():
        if values.dtype.kind not in "iufc" or values.dtype == np.float16:
            raise unsupported(
                f"a position is stored twice and {dtype} values have no sum here; "
                "coalesce duplicates first"
            )
        summed = values[first].copy()
        np.add.at(summed, np.cumsum(first)[~first] - 1, values[~first])
        values, indices, rows = summed, indices[first], rows[first]
    counts = np.bincount(rows, minlength=indptr.size - 1)
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(indptr.dtype)
    return indptr, indices, values


def _to_sparse(t: Tensor, d: Descriptor) -> "torch.Tensor":
    s = d.layout
    if d.quantization is not None:
        raise unsupported("torch has no quantized sparse tensors; use t.dequantize()")
    _torch_dtype(d.dtype, "sparse tensor")
    block = (s.block_shape[0] * s.block_shape[1]) if s.format == "bsr" else 1
    # Values start at the descriptor's byte_offset; index buffers at byte 0.
    raw = _param(t, s.values_buffer, d.dtype, s.nnz * block, d.byte_offset)
    values = raw.reshape((s.nnz,) + tuple(s.block_shape)) if s.format == "bsr" else raw
    size = tuple(d.shape)
    # Private copies of the index arrays, checked as to_dense and to_scipy
    # check them: a zero-copy index array its maker still holds may have
    # changed since (a falling indptr asked numpy for 1.46 TiB here).
    checked = specialise(t)._checked_indices()
    try:
        if s.format == "coo":
            indices = torch.from_numpy(np.stack(checked["coords"]).astype(np.int64, copy=False))
            return torch.sparse_coo_tensor(
                indices,
                _array_to_torch(values, d.dtype),
                size,
                is_coalesced=bool(s.canonical),
                check_invariants=True,
            )
        ctor = {
            "csr": torch.sparse_csr_tensor,
            "csc": torch.sparse_csc_tensor,
            "bsr": torch.sparse_bsr_tensor,
        }[s.format]
        indptr, indices = checked["indptr"], checked["indices"]
        if not _rows_sorted(indptr, indices):
            indptr, indices, values = _sorted_rows(indptr, indices, values, d.dtype)
        return ctor(
            _array_to_torch(indptr, s.index_dtype),
            _array_to_torch(indices, s.index_dtype),
            _array_to_torch(values, d.dtype),
            size,
            check_invariants=True,
        )
    except RuntimeError as e:
        raise unsupported(f"torch refuses this {s.format} tensor: {e}") from None


def to_torch(t: Tensor) -> "torch.Tensor":
    """A torch tensor of a hurray tensor (see the module doc).

    Dense tensors are zero-copy; quantized ones (per-tensor or per-channel
    affine, int8/uint8/int32 codes) become torch quantized tensors; sparse
    ones become torch sparse COO/CSR/CSC/BSR tensors. Raises
    UnsupportedError for sub-byte dtypes (int4, uint4, float4, float6),
    other quantization kinds (block affine, NF4, MX: use t.dequantize()),
    and paged and composite layouts."""
    if not isinstance(t, Tensor):
        if hasattr(t, "__hurray__"):
            t = from_hurray(t)
        else:
            raise TypeError(f"to_torch takes a hurray.Tensor, not {type(t).__name__}")
    out, view = _torch_of(t)
    if not (view and t._protected):
        return out
    # torch has no read-only tensors: a view of read-only memory would crash
    # (or change a bytes object) on the first write, so it is copied. The
    # copy of a dense view holds every element, however few bytes a stride
    # of 0 repeats; a sparse one copies what is stored.
    if out.layout == torch.strided:
        _check_copy(t, out.element_size())
    return out.clone()


def _torch_of(t: Tensor) -> Tuple["torch.Tensor", bool]:
    """to_torch's tensor, and whether it is a view of t's memory, which is
    read-only where t._protected: only for callers that never write to it
    (the converter hands it to torch.save)."""
    d = t.descriptor
    if d.device.type != 1:
        raise unsupported(f"to_torch reads CPU tensors; this one is on {d.device}")
    layout = d.layout
    if isinstance(layout, Sparse):
        return _to_sparse(t, d), True
    if isinstance(layout, Paged):
        raise unsupported(
            "torch has no paged tensors; torch.from_numpy(t.to_dense()) gathers the pages "
            "into a dense copy"
        )
    if isinstance(layout, Composite):
        raise unsupported(
            "a composite tensor has no single torch form; convert its members one by one"
        )
    q = d.quantization
    if q is not None:
        if not isinstance(q, (PerTensorAffine, PerChannelAffine)):
            raise unsupported(
                f"torch has no {type(q).__name__} quantization; use t.dequantize() for the "
                "real values, or load_file(..., dequantize=torch.bfloat16) (or float16, "
                "float32) to dequantize on load"
            )
        return _to_quantized(t, d), False
    _torch_dtype(d.dtype)
    if any(n >= 2**63 for n in d.shape):  # no elements, but past torch's int64 sizes
        raise unsupported(f"torch cannot hold a tensor of shape {tuple(d.shape)}")
    if d.strides is None or all(s >= 0 for s in d.strides):
        out = _from_dlpack(t, d.dtype)
    else:
        _check_copy(t, _torch_dtype(d.dtype).itemsize)  # torch has no negative strides
        out = _array_to_torch(t.numpy(), d.dtype)
    return out, True


def _from_dlpack(t: Tensor, name: str) -> "torch.Tensor":
    """torch.from_dlpack(t): straight from C, no numpy round trip, bfloat16
    and float8 included (torch ignores the read-only flag). Older torch
    cannot take every capsule, and then the numpy route is taken: before
    2.9 it asks without max_version, and an unversioned capsule cannot say
    that memory is read-only, so none is given (BufferError); before 2.10
    it knows no float8 codes (RuntimeError: Unsupported code)."""
    try:
        return torch.from_dlpack(t)
    except (BufferError, RuntimeError):
        return _array_to_torch(t.numpy(), name)


# ---------------------------------------------------------------- files


def _check_not_nested(tensor: "torch.Tensor") -> None:
    # A nested tensor reports the strided layout but has no sizes to read.
    if tensor.is_nested:
        raise unsupported(
            "nested tensors are not supported; save their components (t.unbind()) instead"
        )


def _values_of(t: "torch.Tensor") -> Optional["torch.Tensor"]:
    """The strided tensor of t's values, whose memory tying is about: t
    itself, or a sparse tensor's values (index arrays shared between
    sparse tensors are structure, and nothing unties when they are stored
    twice); None for a meta tensor."""
    if t.device.type == "meta":
        return None
    if t.layout == torch.strided:
        return t
    if t.layout == torch.sparse_coo:
        return t._values()
    if t.layout in (torch.sparse_csr, torch.sparse_bsr, torch.sparse_csc, torch.sparse_bsc):
        return t.values()
    return None


def _check_shared(tensors: Mapping[str, "torch.Tensor"]) -> None:
    """safetensors' rule: tensors that share memory (tied weights, views of
    one another) are refused, since a file stores each tensor apart and
    loading would silently untie them.

    Within one storage, as safetensors judges it, two tensors whose spans
    (first to last byte) overlap share memory, interleaved views too. Two
    storages can hold the same memory as well (torch.from_numpy of two
    views of one array); across storages only tensors that cover every byte
    of their spans are compared, where overlapping spans are shared bytes:
    the real and imaginary parts of one complex array interleave, and share
    none."""
    spans: Dict["torch.device", list] = {}
    for name, tensor in tensors.items():
        t = _values_of(tensor)
        if t is None or t.numel() == 0:
            continue
        _check_has_memory(t)
        start = t.data_ptr()
        size = t.element_size()
        last = start + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) * size + size
        whole = last - start == t.numel() * size
        storage = t.untyped_storage().data_ptr()
        spans.setdefault(t.device, []).append((start, last, name, storage, whole))
    for group in spans.values():
        group.sort()
        active: list = []  # the spans reaching past the current start
        for span in group:
            start, _, name, storage, whole = span
            active = [a for a in active if a[1] > start]
            for _, _, other, other_storage, other_whole in active:
                if storage == other_storage or (whole and other_whole):
                    raise ValueError(
                        f"tensors {other!r} and {name!r} share memory (tied weights or views of "
                        "one tensor); a file stores every tensor apart, so loading would untie "
                        "them. Save one of them (and re-tie after loading), or pass a .clone() "
                        "of the other (this is safetensors' rule too)"
                    )
            active.append(span)


def save_file(
    tensors: Mapping[str, "torch.Tensor"],
    filename: Union[str, os.PathLike],
    metadata: Optional[Mapping[str, Any]] = None,
) -> None:
    """Like safetensors.torch.save_file: writes every tensor of the dict (CPU
    tensors; dense, quantized or sparse) to one hurray file, atomically.
    Metadata values may be str, int, float, bool or bytes. Tensors that
    share memory are refused with ValueError, as safetensors refuses them."""
    if not isinstance(tensors, Mapping):
        raise TypeError("tensors must be a dict of name -> torch.Tensor")
    converted = {}
    for name, tensor in tensors.items():
        if not isinstance(name, str):
            raise TypeError(f"tensor names must be str, not {type(name).__name__}")
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"{name!r} is a {type(tensor).__name__}, not a torch.Tensor")
        _check_not_nested(tensor)
    _check_shared(tensors)
    # Before from_torch copies a strided view out of a mapping that writing
    # `filename` (an open file) would truncate.
    _refuse_mapped_sources(filename, list(tensors.items()))
    for name, tensor in tensors.items():
        converted[name] = from_torch(tensor)
    _save(filename, converted, metadata)


def _device(device: Union[str, int, "torch.device", None]) -> "torch.device":
    if device is None:  # the CPU, as in safetensors and safe_open
        return torch.device("cpu")
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise TypeError(f"device must be a str, an int or a torch.device, not {device!r}")
    try:
        if isinstance(device, int):  # safetensors: an int is a CUDA index
            return torch.device("cuda", device)
        return torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise ValueError(f"device {device!r}: {e}") from None


def _available_device(device: Union[str, int, "torch.device", None], what: str) -> "torch.device":
    """_device, refused up front (UnsupportedError) where torch has no CUDA:
    torch's own .to() raises AssertionError ("not compiled with CUDA")."""
    target = _device(device)
    if target.type == "cuda" and not torch.cuda.is_available():
        raise unsupported(
            f"{what}(device={device!r}): torch sees no CUDA device here "
            f"(torch {torch.__version__}, torch.cuda.is_available() is False)"
        )
    return target


_DEQUANTIZE_TO = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
_QUANT_NONE = 0  # HurrayQuantKind: no quantization
_QUANT_PER_TENSOR = _hurray.ENUMS["quantization"]["per_tensor_affine"]
_QUANT_PER_CHANNEL = _hurray.ENUMS["quantization"]["per_channel_affine"]
_LAYOUT_DENSE = _hurray.ENUMS["layout"]["dense"]


def _threads() -> int:
    try:
        return max(1, min(len(os.sched_getaffinity(0)), 16))
    except AttributeError:  # not Linux
        return max(1, min(os.cpu_count() or 1, 16))


# Below this share of the file in the page cache load_file pre-faults the
# mapping with _COLD_THREADS concurrent MADV_POPULATE_READ calls (several
# reads in flight); above it, faults on first touch are cheaper (ADR-0021).
_COLD = 0.5
_COLD_THREADS = 4


def _dequantize_dense_all(
    pending: "list[tuple[str, Tensor]]",
    dtype: "torch.dtype",
    threads: int,
    out: Dict[str, "torch.Tensor"],
) -> None:
    """Dense quantized tensors into new tensors of `dtype`, several at once:
    the page population of each fresh output and its kernel both release
    the GIL, so a pool of `threads` threads overlaps them across tensors
    (one tensor of a few MiB is below the size at which the kernel splits
    itself). A tensor alone, or fewer tensors than threads, keeps the
    kernel's own threads."""
    jobs = []
    for name, t in pending:
        _check_copy(t, dtype.itemsize)
    for name, t in pending:
        o = torch.empty(tuple(t.descriptor.shape), dtype=dtype)
        out[name] = o
        if o.numel():
            jobs.append((t, o.view(-1).view(torch.uint8).numpy()))
    inner = threads if len(jobs) < threads else 1

    def run(job):
        t, raw = job
        _hurray._prefault(raw, False, inner)
        t._dequantize(raw, _DEQUANTIZE_TO[dtype], inner)

    if len(jobs) <= 1 or threads <= 1:
        for job in jobs:
            run(job)
        return
    map_on_threads(run, jobs, threads)


def _dequantized(t: Tensor, dtype: "torch.dtype", threads: int) -> "torch.Tensor":
    """The real values of quantized `t` as a new torch tensor of `dtype`,
    computed by the C kernels with the GIL released."""
    d = t.descriptor
    if not isinstance(d.layout, Dense):
        # Sparse and paged: the numpy path (C kernels for paged).
        array = t.dequantize(np.float32)
        return torch.from_numpy(array).to(dtype)
    _check_copy(t, dtype.itemsize)
    out = torch.empty(tuple(d.shape), dtype=dtype)
    if out.numel():
        raw = out.view(-1).view(torch.uint8).numpy()
        # Fresh memory: one populate call per thread instead of a fault per
        # 4 KiB page, which cost more than the kernel itself, and faults
        # taken by the kernel's threads did not scale (issue 19). Huge pages
        # measured slower (compaction on first touch): ADR-0021.
        _hurray._prefault(raw, False, threads)
        t._dequantize(raw, _DEQUANTIZE_TO[dtype], threads)
    return out


def load_file(
    filename: Union[str, os.PathLike],
    device: Union[str, int, "torch.device", None] = "cpu",
    *,
    mmap: bool = True,
    dequantize: Optional["torch.dtype"] = None,
) -> Dict[str, "torch.Tensor"]:
    """Like safetensors.torch.load_file: every tensor of the file, as torch
    tensors on `device`.

    mmap=True (default): zero-copy. The file is mapped private and
    copy-on-write and every CPU tensor is a view of it: writing one copies
    the touched pages into this process's memory and never changes the file.
    A file mostly absent from the page cache is pre-faulted by four
    concurrent MADV_POPULATE_READ calls; a cached one is faulted in on first
    touch, which measured cheaper (docs/adr/ADR-0021-torch-loading.md).
    mmap=False reads every tensor into memory of its own with pread.

    dequantize=torch.float32, torch.bfloat16 or torch.float16 turns every
    quantized tensor (NF4, MX, block/per-channel/per-tensor affine) into
    that dtype on load, in the C kernels with the GIL released and several
    threads; unquantized tensors are untouched. Without it, per-tensor and
    per-channel affine tensors become torch quantized tensors and other
    schemes raise UnsupportedError. Sparse tensors become torch sparse
    tensors (see to_torch).

    device="cuda[:i]" (or an int, as in safetensors): the tensors' bytes
    are read from the file by several threads straight into pinned staging
    buffers, which the GPU copies from while the next ones fill; no CPU
    tensor is made of them, whatever `mmap` says. Tensors computed on load
    (dequantize=, sub-byte dtypes) are staged from memory. Other devices:
    each CPU tensor's .to(device)."""
    if dequantize is not None and dequantize not in _DEQUANTIZE_TO:
        raise TypeError(
            f"dequantize must be torch.float32, torch.bfloat16 or torch.float16, "
            f"not {dequantize!r} (quantized codes dequantize to real values)"
        )
    target = _available_device(device, "load_file")
    sink = _staged.CudaSink(target) if target.type == "cuda" else None
    return _load(filename, target, mmap, dequantize, sink)


def _load(
    filename: Union[str, os.PathLike],
    target: "torch.device",
    mmap: bool,
    dequantize: Optional["torch.dtype"],
    sink: Optional[_staged.CudaSink],
    **stage_options: Any,
) -> Dict[str, "torch.Tensor"]:
    """load_file's work; with a `sink`, through its staging buffers
    (the tests pass a CPU one, with `stage_options` for _staged.stage)."""
    staged = sink is not None
    threads = _threads()
    out = {}
    # name -> (name, data buffer, byte offset): the stored bytes its CPU
    # tensor is a view of.
    from_file: Dict[str, Tuple[str, int, int]] = {}
    pending = []  # dense quantized tensors, dequantized together below
    # To a GPU the bytes are read into staging buffers: the mapping only
    # gives the views' dtype and shape, and is never touched.
    with _File(filename, mmap=mmap or staged) as f:
        if mmap and not staged and f.cached_fraction() < _COLD:
            # Cold: concurrent populate calls keep several reads in flight;
            # warm pages are cheaper to fault in on first touch.
            f.populate(_COLD_THREADS)
        for name in f.keys():
            t = f._file._get(name)
            _, _, strides, _, _, layout, quant = t._view_info()
            if layout == _LAYOUT_DENSE and quant == _QUANT_NONE and strides is None:
                try:
                    out[name] = torch.from_dlpack(t)  # zero-copy, from C
                    d = t.descriptor
                    from_file[name] = (name, d.layout.data_buffer, d.byte_offset)
                    continue
                except (BufferError, RuntimeError):
                    pass  # sub-byte dtypes, what an older torch cannot take: to_torch
            t = specialise(t)
            if quant != _QUANT_NONE and dequantize is not None:
                if isinstance(t.descriptor.layout, Dense):
                    out[name] = None  # keeps the file's order
                    pending.append((name, t))
                else:
                    out[name] = _dequantized(t, dequantize, threads)
            else:
                out[name] = to_torch(t)
        _dequantize_dense_all(pending, dequantize, threads, out)
        if staged:
            items = [(name, from_file.get(name), t) for name, t in out.items()]
            return _staged.stage(f._file, items, sink, **stage_options)
    if target.type == "cpu":
        return out
    return {name: t.to(target) for name, t in out.items()}
