"""SparseTensor: COO, CSR, CSC and BSR, from and to scipy.sparse and torch."""

from __future__ import annotations

import math

import numpy as np

from . import _dtypes, _hooks, _hurray
from ._descriptor import Descriptor, Sparse
from ._tensor import Tensor, stored_buffer, unsupported


def _index_dtype(arrays) -> str:
    return "int64" if any(np.asarray(a).dtype == np.int64 for a in arrays) else "int32"


def _contiguous(a, dtype=None) -> np.ndarray:
    return np.ascontiguousarray(a if dtype is None else np.asarray(a).astype(dtype, copy=False))


def _buffer(role: str, array: np.ndarray) -> tuple:
    name = _dtypes.from_numpy(array.dtype)
    if _dtypes.is_packed(name):  # sub-byte values are stored packed, as the descriptor says
        return stored_buffer(role, _dtypes.pack(name, array), 1)
    raw = array.reshape(-1).view(np.uint8) if array.size else np.zeros(0, np.uint8)
    return stored_buffer(role, raw, array.itemsize)


class SparseTensor(Tensor):
    """A sparse tensor: values and index buffers in descriptor order."""

    __slots__ = ()

    @classmethod
    def from_arrays(
        cls,
        format: str,
        shape,
        values,
        *,
        indices=None,
        indptr=None,
        coords=None,
        block_shape=None,
        canonical=False,
    ) -> "SparseTensor":
        """format "coo" takes coords (one index array per dimension); "csr",
        "csc" and "bsr" take indptr and indices; "bsr" values have shape
        (nnz_blocks, block_rows, block_cols). Arrays are used without copying
        when they are contiguous and of int32/int64 indices."""
        values = _contiguous(values)
        value_dtype = _dtypes.from_numpy(values.dtype)
        if format == "coo":
            coords = [np.asarray(c) for c in coords]
            index_dtype = _index_dtype(coords)
            parts = [_buffer("values", values)] + [
                _buffer("indices", _contiguous(c, index_dtype)) for c in coords
            ]
            layout = Sparse(
                "coo",
                index_dtype,
                int(values.shape[0]) if values.ndim else 0,
                values_buffer=0,
                index_buffers=tuple(range(1, 1 + len(coords))),
                canonical=bool(canonical),
            )
        elif format in ("csr", "csc", "bsr"):
            index_dtype = _index_dtype([indptr, indices])
            parts = [
                _buffer("values", values),
                _buffer("indptr", _contiguous(indptr, index_dtype)),
                _buffer("indices", _contiguous(indices, index_dtype)),
            ]
            nnz = int(np.asarray(indices).size)
            layout = Sparse(
                format,
                index_dtype,
                nnz,
                values_buffer=0,
                indptr_buffer=1,
                indices_buffer=2,
                block_shape=tuple(int(b) for b in block_shape) if format == "bsr" else None,
            )
        else:
            raise ValueError(f"unknown sparse format {format!r}")
        descriptor = Descriptor(value_dtype, shape, layout=layout, buffers=[b for b, _ in parts])
        return cls(descriptor, [raw for _, raw in parts])

    # --- views of the parts ---
    def _array(self, index: int, dtype: str, count: int, offset: int = 0) -> np.ndarray:
        raw = np.frombuffer(self._buffer(index), dtype=np.uint8)[offset:]
        if _dtypes.is_packed(dtype):
            return _dtypes.unpack(dtype, raw, count)
        return raw[: count * _dtypes.to_numpy(dtype).itemsize].view(_dtypes.to_numpy(dtype))

    def parts(self) -> dict:
        """The stored arrays, zero-copy: values plus coords or indptr/indices."""
        d = self.descriptor
        s = d.layout
        block = math.prod(s.block_shape) if s.format == "bsr" else 1
        values = self._array(s.values_buffer, d.dtype, s.nnz * block, d.byte_offset)
        if s.format == "bsr":
            values = values.reshape((s.nnz,) + tuple(s.block_shape))
        out = {"format": s.format, "shape": d.shape, "values": values}
        if s.format == "coo":
            out["coords"] = [self._array(i, s.index_dtype, s.nnz) for i in s.index_buffers]
        else:
            major = d.shape[1] if s.format == "csc" else d.shape[0]
            if s.format == "bsr":
                major //= s.block_shape[0]
            out["indptr"] = self._array(s.indptr_buffer, s.index_dtype, major + 1)
            out["indices"] = self._array(s.indices_buffer, s.index_dtype, s.nnz)
        return out

    # --- scipy ---
    @classmethod
    def from_scipy(cls, matrix) -> "SparseTensor":
        fmt = matrix.format
        if fmt == "coo":
            return cls.from_arrays(
                "coo",
                matrix.shape,
                matrix.data,
                coords=[matrix.row, matrix.col],
                canonical=bool(getattr(matrix, "has_canonical_format", False)),
            )
        if fmt in ("csr", "csc"):
            return cls.from_arrays(
                fmt, matrix.shape, matrix.data, indptr=matrix.indptr, indices=matrix.indices
            )
        if fmt == "bsr":
            return cls.from_arrays(
                "bsr",
                matrix.shape,
                matrix.data,
                indptr=matrix.indptr,
                indices=matrix.indices,
                block_shape=matrix.blocksize,
            )
        return cls.from_scipy(matrix.tocsr())

    def to_scipy(self):
        import scipy.sparse as sp

        p = self.parts()
        if p["format"] == "coo":
            if len(p["coords"]) != 2:
                raise unsupported("scipy.sparse holds 2-D COO only")
            return sp.coo_matrix((p["values"], tuple(p["coords"])), shape=p["shape"])
        ctor = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "bsr": sp.bsr_matrix}[p["format"]]
        return ctor((p["values"], p["indices"], p["indptr"]), shape=p["shape"])

    # --- torch ---
    @classmethod
    def from_torch(cls, tensor) -> "SparseTensor":
        return _hooks.torch("from_torch")(tensor)

    def to_torch(self):
        return _hooks.torch("to_torch")(self)


_hooks.LAYOUT_CLASSES[_hurray.ENUMS["layout"]["sparse"]] = SparseTensor
