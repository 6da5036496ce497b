"""SparseTensor: COO, CSR, CSC and BSR, from and to scipy.sparse and torch."""

from __future__ import annotations

import math
import operator
from typing import List, Tuple

import numpy as np

from . import _dtypes, _hooks, _hurray
from ._descriptor import Buffer, Descriptor, Sparse
from ._tensor import Tensor, stored_buffer, unsupported


def _index_arrays(arrays, what: str) -> Tuple[str, List[np.ndarray]]:
    """The stored index dtype (int64 when any array is, or has values int32
    cannot hold; else int32) and the arrays in it. Integer arrays only, and
    no value changes on the way: a cast that wrapped 2**32 + 1 to 1 would
    put an entry where the caller did not."""
    # An empty list is float64 to numpy: empty holds no value to change.
    arrays = [np.asarray(a) for a in arrays]
    arrays = [a.astype(np.int32) if a.size == 0 and a.dtype.kind == "f" else a for a in arrays]
    for a in arrays:
        if a.dtype.kind not in "iu":
            raise TypeError(f"sparse {what} must be integers, not {a.dtype}")
    # The largest value of each unsigned 32- or 64-bit array, the only ones
    # that may not fit (read once; int32 and int64 arrays, the zero-copy
    # cases, are not read at all).
    largest = [
        int(a.max()) if a.size and a.dtype.kind == "u" and a.dtype.itemsize >= 4 else 0
        for a in arrays
    ]
    # Any signed 64-bit array, of either byte order (">i8" == np.int64 is false).
    wide = any(
        (a.dtype.kind == "i" and a.dtype.itemsize > 4) or m > 2**31 - 1
        for a, m in zip(arrays, largest)
    )
    index_dtype = "int64" if wide else "int32"
    target = np.dtype(index_dtype)
    out = []
    for a, m in zip(arrays, largest):
        if m > np.iinfo(target).max:
            raise ValueError(f"sparse {what}: {m} does not fit {index_dtype}")
        out.append(np.ascontiguousarray(a.astype(target, copy=False)))
    return index_dtype, out


def _stored_count(values: np.ndarray, block: tuple, indices: list, what: str) -> int:
    """nnz: the entries the index arrays name, each of which `values` must
    hold exactly (one element, or one block of shape `block` for BSR)."""
    nnz = int(indices[0].size) if indices else 0
    shapes = {tuple(a.shape) for a in indices}
    if any(a.ndim != 1 for a in indices) or len(shapes) > 1:
        raise ValueError(
            f"sparse {what} must be 1-D arrays of one length, not shapes {sorted(shapes)}"
        )
    if tuple(values.shape) != (nnz,) + block:
        raise ValueError(
            f"sparse values have shape {tuple(values.shape)}; {nnz} entries need {(nnz,) + block}"
        )
    return nnz


def _major_count(format: str, shape: tuple, block: tuple) -> int:
    """The rows a CSR or BSR indptr points into (columns for CSC; block
    rows for BSR): it holds one more pointer than that."""
    major = shape[1] if format == "csc" else shape[0]
    return major // block[0] if block and block[0] > 0 else major


def _check_indptr(indptr: np.ndarray, format: str, shape: tuple, block: tuple) -> None:
    """One pointer per row (column for CSC, block row for BSR) plus one, as
    scipy insists: a 2-D indptr, or 5 pointers for 2 rows, was stored as it
    came, the extra ones never read."""
    if len(shape) != 2:
        return  # the descriptor refuses it, with its own message
    major = _major_count(format, shape, block)
    if indptr.ndim != 1 or indptr.size != major + 1:
        raise ValueError(
            f"sparse {format} indptr must be a 1-D array of {major + 1} pointers "
            f"({major} {'columns' if format == 'csc' else 'rows'} plus one), not shape "
            f"{tuple(indptr.shape)}"
        )


def _buffer(role: str, array: np.ndarray) -> tuple:
    name = _dtypes.from_numpy(array.dtype)
    if _dtypes.is_packed(name):  # sub-byte values are stored packed, as the descriptor says
        return stored_buffer(role, _dtypes.pack(name, array), 1)
    raw = array.reshape(-1).view(np.uint8) if array.size else np.zeros(0, np.uint8)
    return stored_buffer(role, raw, array.itemsize)


def _scipy_version() -> str:
    import scipy

    return getattr(scipy, "__version__", "?")


# What from_arrays takes besides values, per format.
_FORMAT_ARGUMENTS = {
    "coo": ("coords", "canonical"),
    "csr": ("indptr", "indices"),
    "csc": ("indptr", "indices"),
    "bsr": ("indptr", "indices", "block_shape"),
}


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
        "csc" and "bsr" take indptr and indices; values have one entry per
        index (shape (nnz,)), and "bsr" values one block each (shape
        (nnz_blocks, block_rows, block_cols), or those blocks flat). Indices
        must be integers, kept exactly: int64 when any array is or holds a
        value int32 cannot, else int32. Arrays are used without copying when
        they are contiguous and of int32/int64 indices."""
        given = {
            "indices": indices is not None,
            "indptr": indptr is not None,
            "coords": coords is not None,
            "block_shape": block_shape is not None,
            "canonical": bool(canonical),
        }
        takes = _FORMAT_ARGUMENTS.get(format)
        if takes is None:
            raise ValueError(f"unknown sparse format {format!r}")
        stray = [name for name, there in given.items() if there and name not in takes]
        if stray:
            raise ValueError(f"{format!r} takes {', '.join(takes)}; not {', '.join(stray)}")
        if format == "bsr" and block_shape is None:
            raise TypeError("'bsr' needs block_shape, (block_rows, block_cols)")
        values = np.ascontiguousarray(values)
        value_dtype = _dtypes.from_numpy(values.dtype)
        if format == "coo":
            index_dtype, coords = _index_arrays(coords, "coords")
            nnz = _stored_count(values, (), coords, "coords")
            parts = [_buffer("values", values)] + [_buffer("indices", c) for c in coords]
            layout = Sparse(
                "coo",
                index_dtype,
                nnz,
                values_buffer=0,
                index_buffers=tuple(range(1, 1 + len(coords))),
                canonical=bool(canonical),
            )
        elif format in ("csr", "csc", "bsr"):
            index_dtype, (indptr, indices) = _index_arrays([indptr, indices], "indptr and indices")
            block = tuple(operator.index(b) for b in block_shape) if format == "bsr" else ()
            if block and values.ndim == 1 and values.size == indices.size * math.prod(block):
                values = values.reshape((indices.size,) + block)  # blocks given flat
            nnz = _stored_count(values, block, [indices], "indices")
            _check_indptr(indptr, format, tuple(shape), block)
            parts = [
                _buffer("values", values),
                _buffer("indptr", indptr),
                _buffer("indices", indices),
            ]
            layout = Sparse(
                format,
                index_dtype,
                nnz,
                values_buffer=0,
                indptr_buffer=1,
                indices_buffer=2,
                block_shape=block if format == "bsr" else None,
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
        if not isinstance(s, Sparse):  # made with SparseTensor(...) or _from_capsule
            raise TypeError(
                f"this SparseTensor's layout is {type(s).__name__}, not Sparse: it has no "
                "sparse parts (hurray.as_tensor gives each layout its own class)"
            )
        block = math.prod(s.block_shape) if s.format == "bsr" else 1
        values = self._array(s.values_buffer, d.dtype, s.nnz * block, d.byte_offset)
        if s.format == "bsr":
            values = values.reshape((s.nnz,) + tuple(s.block_shape))
        out = {"format": s.format, "shape": d.shape, "values": values}
        if s.format == "coo":
            out["coords"] = [self._array(i, s.index_dtype, s.nnz) for i in s.index_buffers]
        else:
            major = _major_count(s.format, d.shape, s.block_shape if s.format == "bsr" else ())
            out["indptr"] = self._array(s.indptr_buffer, s.index_dtype, major + 1)
            out["indices"] = self._array(s.indices_buffer, s.index_dtype, s.nnz)
        return out

    # --- scipy ---
    @classmethod
    def from_scipy(cls, matrix) -> "SparseTensor":
        fmt = getattr(matrix, "format", None)
        if not isinstance(fmt, str) or not callable(getattr(matrix, "tocsr", None)):
            raise TypeError(f"from_scipy takes a scipy.sparse array, not {type(matrix).__name__}")
        if fmt == "coo":
            return cls.from_arrays(
                "coo",
                matrix.shape,
                matrix.data,
                # scipy's coo_array may have any rank: coords, where it has them.
                coords=list(getattr(matrix, "coords", (matrix.row, matrix.col))),
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

        p = self.parts()  # the values, zero-copy (refused in device memory)
        kind = p["values"].dtype
        if kind.kind not in "biufc" or kind.itemsize < 4 and kind.kind == "f":
            # scipy.sparse has no float16, bfloat16, float8 or packed dtypes:
            # csr_matrix took them and failed at its first toarray().
            raise unsupported(f"scipy.sparse holds no {self.dtype} values; to_dense() gives them")
        p.update(self._checked_indices())
        if p["format"] == "coo":
            if len(p["coords"]) != 2:
                # scipy 1.13 and later hold COO of any rank as coo_array
                # (from_scipy takes them); earlier ones 2-D only.
                try:
                    return sp.coo_array((p["values"], tuple(p["coords"])), shape=p["shape"])
                except (ValueError, TypeError, AttributeError):
                    raise unsupported(
                        f"this scipy ({_scipy_version()}) holds 2-D COO only; scipy 1.13 and "
                        f"later hold rank {len(p['coords'])}"
                    ) from None
            return sp.coo_matrix((p["values"], tuple(p["coords"])), shape=p["shape"])
        ctor = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "bsr": sp.bsr_matrix}[p["format"]]
        return ctor((p["values"], p["indices"], p["indptr"]), shape=p["shape"])

    def _checked_indices(self) -> dict:
        """parts()'s index arrays as private copies, checked by placement
        validation (every index in bounds, indptr ordered): scipy checks none
        of them, and a zero-copy index array the caller still holds may have
        changed since this tensor was made (an index of 5e7 in a 3x3 matrix
        made scipy's toarray() write far outside it). The copies are checked
        in a host tensor of their own, whose values buffer is zeros
        (placement reads no value), so pinned or managed memory passes."""
        d = self.descriptor
        s = d.layout
        index = set(s.index_buffers) if s.format == "coo" else {s.indptr_buffer, s.indices_buffer}
        buffers = []
        for i, b in enumerate(d.buffers):
            block = np.zeros(b.byte_size + b.alignment, np.uint8)
            start = (-block.ctypes.data) % b.alignment
            mine = block[start : start + b.byte_size]
            if i in index:
                mine[...] = np.frombuffer(self._buffer(i), np.uint8)
            buffers.append(mine)
        host = d.replace(
            device=None, buffers=[Buffer(b.role, b.byte_size, b.alignment) for b in d.buffers]
        )
        checked = SparseTensor(host, buffers).parts()  # validates placement
        return {k: v for k, v in checked.items() if k in ("coords", "indptr", "indices")}

    # --- torch ---
    @classmethod
    def from_torch(cls, tensor) -> "SparseTensor":
        return _hooks.torch("from_torch")(tensor)

    def to_torch(self):
        return _hooks.torch("to_torch")(self)


_hooks.LAYOUT_CLASSES[_hurray.ENUMS["layout"]["sparse"]] = SparseTensor
