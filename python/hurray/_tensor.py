"""Tensor: a descriptor plus N buffers, and what numpy users expect of it."""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from . import _dtypes, _hooks, _hurray, _outbuf
from ._descriptor import (
    BLOCK_FORMATS,
    BlockCoded,
    Buffer,
    Composite,
    Dense,
    Descriptor,
    Mxfp,
    Nf4,
    PerChannelAffine,  # noqa: F401
    PerTensorAffine,
    Sparse,
)

# bitsandbytes' NF4 code book (float32), index 0..15: the C kernels' table.
NF4_CODE = np.array(_hurray.NF4_CODE, dtype=np.float32)


def _quantized_refusal(t: "Tensor", what: str) -> "_hurray.UnsupportedError":
    return unsupported(
        f"{what} on a quantized tensor ({type(t.descriptor.quantization).__name__}, "
        f"{t.dtype} codes) would return the raw codes, not values: use t.dequantize(dtype) "
        "for the real values, or t.codes() for the codes"
    )


_LAYOUT_DENSE = _hurray.ENUMS["layout"]["dense"]  # HurrayLayoutKind, from C
_QUANT_BLOCK_CODED = _hurray.ENUMS["quantization"]["block_coded"]

_KERNEL_DTYPES = ("float32", "float16", "bfloat16")  # what dequantize writes


def unsupported(message: str) -> "_hurray.UnsupportedError":
    """An UnsupportedError carrying the C status, like those raised in C."""
    return _hurray._error("HURRAY_ERR_UNSUPPORTED", message)


def _empty_array(shape, dtype) -> np.ndarray:
    """An array with no elements, or UnsupportedError where a dimension is
    one numpy cannot hold (a file may describe [0, 2**63]: no bytes, but
    past numpy's index type)."""
    return _numpy_shaped(lambda: np.empty(tuple(shape), dtype), shape)


def _numpy_shaped(make, shape) -> np.ndarray:
    """make(), whose ValueError for a shape numpy cannot hold (a dimension
    past its index type, a stride-0 view of more than 2^63 bytes) is the
    UnsupportedError every other refusal of such a tensor is."""
    try:
        return make()
    except ValueError:
        raise unsupported(f"numpy cannot hold an array of shape {tuple(shape)}") from None


def natural_alignment(itemsize: int) -> int:
    """The alignment a buffer of `itemsize`-byte elements declares: the
    largest power of two dividing the element size (1 for packed sub-byte
    data), at most 64. A property of the dtype, never of the address the
    data happens to sit at, so equal arrays give identical files."""
    itemsize = int(itemsize)
    return min(itemsize & -itemsize, 64) if itemsize > 0 else 1


def stored_buffer(role: str, raw: np.ndarray, itemsize: int) -> tuple:
    """(Buffer, uint8 array) for contiguous bytes of `itemsize`-byte
    elements. Zero-copy, except that data not at its natural alignment (a
    slice at an odd offset of a bytes object, say) is copied to memory
    that is."""
    align = natural_alignment(itemsize)
    if raw.size and raw.ctypes.data % align:
        block = np.empty(raw.size + align, np.uint8)
        start = (-block.ctypes.data) % align
        aligned = block[start : start + raw.size]
        aligned[...] = raw
        raw = aligned
    return Buffer(role, int(raw.size), align), raw


class _DefaultOutputLimit:
    """The library's default output-size limit: max(64 MiB, 64 x stored
    bytes) (docs/security.md, Limits)."""

    __slots__ = ()

    def __repr__(self):
        return "hurray.DEFAULT_OUTPUT_LIMIT"

    def __reduce__(self):
        return "DEFAULT_OUTPUT_LIMIT"


DEFAULT_OUTPUT_LIMIT = _DefaultOutputLimit()


# The packed and two-level fields (ADR-0024) with their defaults.
_PACKED_DEFAULTS = {
    "storage_axes": None,
    "code_packing": None,
    "zero_point_packing": None,
    "zero_point_offset": 0,
    "axis2": 0,
    "block_size2": 0,
    "group_index_buffer": None,
    "codebook_buffer": None,
    "scale_codebook_buffer": None,
    "super_scale_buffer": None,
    "scale_offset": 0,
}


def _refuse_packed(q, what: str, fields=tuple(_PACKED_DEFAULTS)) -> None:
    """codes(), scales() and zero_points() give logical, row-major arrays; a
    quantization with packed or two-level fields stores other arrays (words,
    permuted axes, scale codes, super scales), so they refuse it rather than
    give the stored bytes a wrong shape."""
    used = [k for k in fields if getattr(q, k, _PACKED_DEFAULTS[k]) != _PACKED_DEFAULTS[k]]
    if used:
        raise unsupported(
            f"{what}: this quantization stores its parts packed or in two levels "
            f"({', '.join(used)}; ADR-0024): dequantize() gives the values, and the "
            "buffers hold the stored parts as they are"
        )


def _check_out(out, shape) -> None:
    """dequantize's out: one message for each thing it is not."""
    if not isinstance(out, np.ndarray):
        raise TypeError(
            f"out must be a numpy array, not {type(out).__name__} (np.asarray(x) views a torch "
            "tensor or a buffer without copying)"
        )
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out has shape {tuple(out.shape)}; the tensor's is {tuple(shape)}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError("out must be a writable C-contiguous array")
    if _dtypes.name_of(out.dtype) not in _KERNEL_DTYPES or not out.dtype.isnative:
        raise ValueError(f"out must be native float32, float16 or bfloat16, not {out.dtype}")


class Tensor(_hurray._Tensor):
    """One descriptor plus N buffers, each kept alive by its own owner.

    Tensor(descriptor, buffers) takes C-contiguous objects with the buffer
    protocol (their bytes in row-major order), without copying; the
    placement of the buffers is validated."""

    __slots__ = ()

    def __init__(self, descriptor: Descriptor | bytes, buffers: Sequence[Any]):
        if isinstance(descriptor, Descriptor):
            encoded = descriptor.encode()
        else:
            try:  # any bytes-like object; bytes(5) would be five zero bytes
                encoded = bytes(memoryview(descriptor))
            except TypeError:
                raise TypeError(
                    "descriptor must be a Descriptor or its encoded bytes, "
                    f"not {type(descriptor).__name__}"
                ) from None
        super().__init__(encoded, list(buffers))

    # --- parts ---
    @property
    def descriptor(self) -> Descriptor:
        # Decoded once: a tensor's descriptor never changes after creation.
        d = self._descriptor_cache
        if d is None:
            d = Descriptor.decode(self._encoded)
            self._descriptor_cache = d
        return d

    @property
    def buffers(self) -> tuple:
        """Zero-copy memoryviews, in descriptor order."""
        return tuple(self._buffer(i) for i in range(self.buffer_count))

    @property
    def dtype(self) -> str:
        return self.descriptor.dtype

    @property
    def shape(self) -> tuple:
        return self.descriptor.shape

    def __repr__(self):
        try:
            descriptor = self.descriptor
        except ValueError:  # its __init__ never ran: a subclass that skips it, or __new__
            return f"<{type(self).__name__}, not initialised>"
        return f"<hurray.Tensor {descriptor!r}>"

    # --- numpy ---
    def numpy(self) -> np.ndarray:
        """A zero-copy view of a dense tensor's values. Sub-byte dtypes are
        unpacked to one element per byte, which is a copy. Raises
        UnsupportedError for other layouts, and for quantized tensors, whose
        stored elements are codes, not values: use dequantize() for the
        values or codes() for the codes. The view is read-only
        (writeable=False) when the memory is (hurray.load(readonly=True))."""
        if self._view_info()[6] != 0:
            raise _quantized_refusal(self, "numpy()")
        return self.codes()

    def codes(self) -> np.ndarray:
        """The stored elements of a dense tensor as a zero-copy view: the raw
        integer codes if the tensor is quantized (dequantize() gives the
        values), else the values, as numpy() does. A block-coded tensor's
        codes are its block bytes, shaped (*shape[:-1], bytes per row), as
        gguf-py's byte shape. Sub-byte codes (int4, uint4, fp4, fp6) are
        unpacked to one per byte, which is a copy."""
        dtype_name, shape, strides, byte_offset, data_buffer, layout, qkind = self._view_info()
        if layout != _LAYOUT_DENSE:
            kind = type(self.descriptor.layout).__name__.lower()
            instead = "member(name)" if kind == "composite" else "to_dense()"
            raise unsupported(
                f"numpy() and codes() view dense tensors, this one is {kind}; use {instead}"
            )
        if qkind != 0:
            _refuse_packed(
                self.descriptor.quantization, "codes()", ("storage_axes", "code_packing")
            )
        raw = np.frombuffer(self._buffer(data_buffer), dtype=np.uint8)
        if qkind == _QUANT_BLOCK_CODED:
            elements, size = BLOCK_FORMATS[self.descriptor.quantization.format]
            row = shape[-1] // elements * size
            count = math.prod(shape[:-1]) * row
            rows = tuple(shape[:-1]) + (row,)
            return _numpy_shaped(lambda: raw[byte_offset : byte_offset + count].reshape(rows), rows)
        numel = math.prod(shape)
        if numel == 0:  # refuses what numpy cannot index; the view below is kept
            packed = _dtypes.is_packed(dtype_name)
            _empty_array(
                shape,
                _dtypes.unpack(dtype_name, raw[:0], 0).dtype
                if packed
                else _dtypes.to_numpy(dtype_name),
            )
        if _dtypes.is_packed(dtype_name):
            size = _dtypes.storage_bytes(dtype_name, numel)
            return _dtypes.unpack(dtype_name, raw[byte_offset : byte_offset + size], numel).reshape(
                shape
            )
        dtype = _dtypes.to_numpy(dtype_name)
        if strides is None:
            flat = raw[byte_offset : byte_offset + numel * dtype.itemsize].view(dtype)
            return flat.reshape(shape)
        # Strides in elements, possibly negative: validation proved every
        # element lies inside the buffer, so numpy may index it directly.
        return _numpy_shaped(
            lambda: np.ndarray(
                shape=shape,
                dtype=dtype,
                buffer=raw,
                offset=byte_offset,
                strides=[s * dtype.itemsize for s in strides],
            ),
            shape,
        )

    def _views(self, a: np.ndarray) -> bool:
        """Whether `a` lies in this tensor's buffers (an empty array counts:
        it holds nothing a write could lose)."""
        return a.nbytes == 0 or any(
            np.may_share_memory(a, np.frombuffer(b, np.uint8)) for b in self.buffers
        )

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        if dtype is not None:
            out = out.astype(dtype, copy=False)
        if copy is False and not self._views(out):
            # numpy 2's protocol: copy=False means a view or ValueError. A
            # packed sub-byte dtype, data off its natural alignment or a
            # dtype change is a copy, and writes to it would be lost.
            raise ValueError(
                f"this {self.descriptor.dtype} tensor cannot be read as that array without a copy; "
                "use copy=None or True"
            )
        return np.array(out, copy=True) if copy else out

    # __dlpack__(stream=None, max_version=None, dl_device=None, copy=None) and
    # __dlpack_device__() are the C base class's (python/hurray/_dlpack.c):
    # every DLPack 1.x dtype, zero-copy, flagged read-only where it is.

    # --- values ---
    def _check_output(self, nbytes: int, max_output_bytes) -> None:
        """LimitError before allocating an output of nbytes beyond the limit
        (see to_dense)."""
        if max_output_bytes is DEFAULT_OUTPUT_LIMIT:
            self._check_output_size(nbytes)
        else:
            self._check_output_size(nbytes, max_output_bytes)

    def dequantize(
        self, dtype=np.float32, *, threads: int = 1, out=None, max_output_bytes=DEFAULT_OUTPUT_LIMIT
    ) -> np.ndarray:
        """The real values of a quantized tensor, as a new array of `dtype`.

        float32, float16 and bfloat16 come straight from the C kernels (with
        the GIL released; `threads` > 1 lets large tensors use more threads);
        other floating-point dtypes (float64, the float8, float6 and float4
        kinds, complex ones) are the float32 result converted; an integer
        dtype is a TypeError, and so is a real dtype (or `out`) for an
        unquantized complex tensor, whose imaginary parts it would drop. Dense and paged
        tensors of every quantization kind, and sparse tensors with
        per-tensor affine codes. An unquantized tensor gives its values.

        out: an existing C-contiguous array of the tensor's shape and of
        float32, float16 or bfloat16 to write into instead of a new array
        (reusing memory saves the page faults of a fresh allocation). Every
        layout honours it: sparse and unquantized tensors are computed as
        usual and then copied into `out`. `dtype` is ignored with `out`. No
        output-size limit applies to memory the caller provides.

        max_output_bytes: the output-size limit, as for to_dense (LimitError
        before anything is allocated)."""
        d = self.descriptor
        q = d.quantization
        threads = _hurray._threads(threads)  # every path refuses what the kernels would
        dtype = _dtypes.as_numpy(dtype)
        if dtype.kind not in "fc" and dtype.name not in _dtypes.ML_FLOAT_DTYPES:
            raise TypeError(
                f"dequantize gives real values: {dtype} is not a floating-point "
                "dtype (codes() gives the raw integer codes)"
            )
        if out is not None:  # checked first: every path below honours it
            _check_out(out, d.shape)
        else:
            # The largest array made on the way: a quantized tensor is
            # decoded to float32 first (sparse ones always, dense ones for
            # a dtype the kernels do not write), then converted.
            working = dtype.itemsize
            if q is not None and (
                isinstance(d.layout, Sparse) or _dtypes.name_of(dtype) not in _KERNEL_DTYPES
            ):
                working = max(working, 4)
            self._check_output(d.numel * working, max_output_bytes)
        if q is None and np.dtype(_dtypes.to_numpy(d.dtype)).kind == "c":
            target = out.dtype if out is not None else dtype
            if target.kind != "c":
                raise TypeError(
                    f"dequantize: the tensor is {d.dtype}; {target} would drop the "
                    "imaginary parts (ask for a complex dtype)"
                )
        if q is None or isinstance(d.layout, Sparse):
            if q is None:
                values = self.to_dense(
                    max_output_bytes=None if out is not None else max_output_bytes
                )
            else:
                # Only stored elements carry codes; the others are zeros.
                values = _dequantized_sparse(self, d).to_dense(max_output_bytes=None)
            if out is not None:
                np.copyto(out, values, casting="unsafe")
                return out
            return values.astype(dtype)
        if out is not None:
            self._dequantize(out.reshape(-1).view(np.uint8), _dtypes.from_numpy(out.dtype), threads)
            return out
        kernel = _dtypes.name_of(dtype)
        if kernel not in _KERNEL_DTYPES:
            kernel = "float32"
        if d.numel == 0:
            out = _empty_array(d.shape, _dtypes.to_numpy(kernel))
        else:
            out = _outbuf.empty(d.shape, _dtypes.to_numpy(kernel), threads)  # see _outbuf
        self._dequantize(out.reshape(-1).view(np.uint8), kernel, threads)
        return out if out.dtype == dtype else out.astype(dtype)

    def _scale_source(self):
        d = self.descriptor
        q = d.quantization
        if isinstance(q, BlockCoded):
            raise unsupported(
                f"a block-coded ({q.format}) tensor keeps its scales inside its "
                "blocks; codes() gives the block bytes"
            )
        if isinstance(q, Nf4):
            return q.absmax_buffer, q.absmax_dtype, (-(-d.numel // q.block_size),)
        if isinstance(q, Mxfp):
            return q.scale_buffer, "float8_e8m0fnu", _blocked_shape(d.shape, q.axis, q.block_size)
        if isinstance(q, PerChannelAffine):
            return q.scale_buffer, q.scale_dtype, (d.shape[q.axis],)
        return q.scale_buffer, q.scale_dtype, _blocked_shape(d.shape, q.axis, q.block_size)

    def scales(self) -> np.ndarray:
        """The quantization scales, zero-copy where the dtype allows, shaped
        like the scale tensor: (shape[axis],) per channel; the data shape
        with shape[axis] replaced by its block count for block affine and
        MX (float8_e8m0fnu); (block count,) for NF4 absmax. A 0-d float64
        array for per-tensor affine."""
        q = self.descriptor.quantization
        if q is None:
            raise unsupported("the tensor is not quantized")
        if isinstance(q, PerTensorAffine):
            return np.array(q.scale, dtype=np.float64)
        _refuse_packed(q, "scales()")
        index, dtype, shape = self._scale_source()
        return self._param(index, dtype, math.prod(shape)).reshape(shape)

    def zero_points(self) -> np.ndarray:
        """Zero points as int64, shaped like scales(): the zero-point buffer,
        or the inline zero point repeated; zeros for NF4 and MX."""
        q = self.descriptor.quantization
        if q is None:
            raise unsupported("the tensor is not quantized")
        if isinstance(q, PerTensorAffine):
            return np.array(q.zero_point, dtype=np.int64)
        _refuse_packed(q, "zero_points()")
        _, _, shape = self._scale_source()
        if isinstance(q, (Nf4, Mxfp)):
            return np.zeros(shape, dtype=np.int64)
        if q.zero_point_buffer is None:
            return np.full(shape, q.zero_point, dtype=np.int64)
        zp = self._param(q.zero_point_buffer, q.zero_point_dtype, math.prod(shape))
        return zp.astype(np.int64).reshape(shape)

    def _param(self, index: int, dtype: str, count: int) -> np.ndarray:
        raw = np.frombuffer(self._buffer(index), dtype=np.uint8)
        if _dtypes.is_packed(dtype):
            return _dtypes.unpack(dtype, raw, count)
        return raw[: count * _dtypes.to_numpy(dtype).itemsize].view(_dtypes.to_numpy(dtype))

    def to_dense(self, *, max_output_bytes=DEFAULT_OUTPUT_LIMIT) -> np.ndarray:
        """A new dense numpy array of the logical tensor's stored values (the
        codes, if quantized): sparse values scattered into zeros, pages
        gathered, strides resolved. Materialised in C for byte-sized
        dtypes; sub-byte sparse or paged tensors fall back to numpy.

        max_output_bytes: a descriptor can describe far more than it stores
        (a stride-0 8192 x 8192 float32 tensor in 4 bytes is 256 MiB dense),
        so the output is limited, and LimitError (HURRAY_ERR_LIMIT) is raised
        before anything is allocated. By default the output may take
        max(64 MiB, 64 x the tensor's stored bytes); an int is an absolute
        limit in bytes instead; None means no limit."""
        d = self.descriptor
        self._check_output(d.numel * _dtypes.to_numpy(d.dtype).itemsize, max_output_bytes)
        layout = d.layout
        if isinstance(layout, Composite):
            raise unsupported("a composite tensor has no single dense form; use member(name)")
        if _dtypes.is_packed(d.dtype):
            if isinstance(layout, Dense):
                # numpy() refuses codes; codes() gives them unpacked, as the
                # byte-sized codes below come (C refuses those stored in
                # another order or packed into words, and so does this).
                if d.quantization is None:
                    return self.numpy()
                _refuse_packed(d.quantization, "to_dense()", ("storage_axes", "code_packing"))
                return self.codes()
            packed = np.empty(_dtypes.storage_bytes(d.dtype, d.numel), dtype=np.uint8)
            self._to_dense(packed)
            unpacked = _dtypes.unpack(d.dtype, packed, d.numel)
            return _numpy_shaped(lambda: unpacked.reshape(d.shape), d.shape)
        out = _empty_array(d.shape, _dtypes.to_numpy(d.dtype))
        self._to_dense(out.reshape(-1).view(np.uint8) if out.size else out)
        return out

    def with_statistics(self) -> "Tensor":
        """The same buffers, with min, max, NaN count and zero count computed
        in one C pass and stored in the descriptor (what save(...,
        statistics=True) writes)."""
        return specialise(self._derived(self._statistics(), range(self.buffer_count), type(self)))

    def member(self, name: str) -> "Tensor":
        """Member `name` of a composite tensor as a tensor of its own, whose
        buffers are zero-copy views of the parent's."""
        d = self.descriptor
        if not isinstance(d.layout, Composite):
            raise unsupported("member() needs a composite tensor")
        encoded, used = _hurray._member(self, name)  # renumbered in C
        return specialise(self._derived(encoded, used))


def _blocked_shape(shape, axis, block):
    out = list(shape)
    out[axis] = -(-shape[axis] // block)
    return tuple(out)


def _dequantized_sparse(t: Tensor, d: Descriptor) -> Tensor:
    """The sparse tensor with its per-tensor affine codes replaced by their
    float32 values: the codes dequantized by the C kernel as a 1-D tensor,
    put in place of the values buffer (densified in C afterwards)."""
    s, q = d.layout, d.quantization
    count = s.nnz * (math.prod(s.block_shape) if s.format == "bsr" else 1)
    size = _dtypes.storage_bytes(d.dtype, count)
    raw = np.frombuffer(t._buffer(s.values_buffer), dtype=np.uint8)[
        d.byte_offset : d.byte_offset + size
    ]
    codes = Tensor(
        Descriptor(d.dtype, (count,), quantization=q, buffers=[Buffer("data", size)]), [raw]
    )
    values = codes.dequantize(np.float32, max_output_bytes=None).reshape(-1).view(np.uint8)
    buffers = list(d.buffers)
    buffers[s.values_buffer] = Buffer(buffers[s.values_buffer].role, values.size, 4)
    arrays = [t._buffer(i) for i in range(t.buffer_count)]
    arrays[s.values_buffer] = values
    return Tensor(
        d.replace(
            dtype="float32", quantization=None, byte_offset=0, buffers=buffers, statistics=None
        ),
        arrays,
    )


def from_numpy(array: np.ndarray) -> Tensor:
    """A dense tensor over a numpy array: zero-copy when the array is
    C-contiguous; sub-byte ml_dtypes arrays (int4, float4...) are packed,
    which copies."""
    array = np.asarray(array)
    name = _dtypes.from_numpy(array.dtype)
    if _dtypes.is_packed(name):
        data = _dtypes.pack(name, array)
    else:
        data = np.ascontiguousarray(array)
        if data.dtype.byteorder == ">":
            raise ValueError("big-endian arrays are not supported; use .astype('<...')")
    raw = data.reshape(-1).view(np.uint8) if data.size else np.zeros(0, np.uint8)
    size = _dtypes.storage_bytes(name, array.size)
    buffer, raw = stored_buffer("data", raw, 1 if _dtypes.is_packed(name) else data.itemsize)
    descriptor = Descriptor(name, array.shape, buffers=[Buffer("data", size, buffer.alignment)])
    return Tensor(descriptor, [raw])


def from_hurray(obj: Any) -> Tensor:
    """Consumes obj.__hurray__(): one capsule carrying every buffer."""
    capsule = obj.__hurray__() if hasattr(obj, "__hurray__") else obj
    return specialise(Tensor._from_capsule(capsule))


def specialise(t: Tensor) -> Tensor:
    """Sparse tensors are handed out as SparseTensor, whatever made them."""
    if type(t) is Tensor:
        layout = t._view_info()[5]
        if layout != _LAYOUT_DENSE and layout in _hooks.LAYOUT_CLASSES:
            t.__class__ = _hooks.LAYOUT_CLASSES[layout]
    return t


def from_dlpack(obj: Any) -> Tensor:
    """A dense tensor from any DLPack producer (numpy, torch, ...), zero-copy.
    A dense hurray tensor is taken through its capsule, which keeps every
    dtype: numpy's DLPack import has no bfloat16 or float8, and before
    numpy 2 no read-only memory and no bool."""
    if isinstance(obj, Tensor):
        d = obj.descriptor
        if isinstance(d.layout, Dense) and d.quantization is None:
            return from_hurray(obj)
        # DLPack carries values: __dlpack__ says what to use instead.
    if _hooks.is_torch_tensor(obj):
        return _hooks.torch("from_torch")(obj)
    if not hasattr(obj, "__dlpack__"):  # numpy's AttributeError otherwise
        raise TypeError(f"from_dlpack takes a DLPack producer, not {type(obj).__name__}")
    return from_numpy(np.from_dlpack(obj))
