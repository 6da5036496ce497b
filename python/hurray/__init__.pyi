"""Type stubs for the public API of the ``hurray`` package.

Everything here mirrors ``hurray/__init__.py`` and the modules it re-exports
(``_descriptor``, ``_tensor``, ``_sparse``, ``_files``, ``_dtypes`` and the C
extension ``_hurray``). Names that start with an underscore are helpers of the
stubs only and do not exist at run time, except ``Tensor._from_capsule``.
"""

import os
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, Protocol, TypeVar, final, overload, type_check_only

import numpy as np
import numpy.typing as npt
import torch as _torch
from typing_extensions import Buffer as _BufferProtocol
from typing_extensions import NotRequired, Self, TypeAlias, TypedDict

if sys.version_info >= (3, 13):
    from types import CapsuleType as _Capsule
else:
    # types.CapsuleType exists from Python 3.13. Before that the checker-only
    # stand-in of typing_extensions is used: it is what numpy's stubs return
    # from __dlpack__, so np.from_dlpack(tensor) still type-checks.
    from typing_extensions import CapsuleType as _Capsule

__all__ = [
    "BlockAffine",
    "BlockCoded",
    "Packing",
    "Buffer",
    "C_ABI_VERSION",
    "ChecksumError",
    "ConversionError",
    "ConversionIOError",
    "Composite",
    "DEFAULT_OUTPUT_LIMIT",
    "DTYPES",
    "Dense",
    "Descriptor",
    "Device",
    "DuplicateNameError",
    "Extension",
    "File",
    "FormatError",
    "HurrayError",
    "HurrayIOError",
    "HurrayMemoryError",
    "InvalidArgumentError",
    "LimitError",
    "Member",
    "Mxfp",
    "Nf4",
    "NotFoundError",
    "Paged",
    "PerChannelAffine",
    "PerTensorAffine",
    "PlacementError",
    "QUANT_SCHEMES",
    "RemoteChangedError",
    "RemoteError",
    "RemoteFile",
    "RemoteNotFoundError",
    "RemoteProtocolError",
    "RemoteTimeoutError",
    "Shard",
    "Sparse",
    "SparseTensor",
    "Statistics",
    "Tensor",
    "UnsupportedError",
    "ValidationError",
    "as_tensor",
    "convert",
    "from_dlpack",
    "from_hurray",
    "from_numpy",
    "load",
    "load_sharded",
    "open",
    "quantize",
    "safe_open",
    "save",
    "save_sharded",
    "shard",
]

_T = TypeVar("_T")
_StrPath: TypeAlias = str | os.PathLike[str]
# What open/load/File/safe_open take: a bytes path too (File.path keeps it).
_AnyPath: TypeAlias = str | bytes | os.PathLike[str] | os.PathLike[bytes]
# Anything Tensor() can take as a buffer without copying: the buffer protocol.
# numpy declares __buffer__ in its stubs only from Python 3.12, hence ndarray.
_BufferLike: TypeAlias = _BufferProtocol | np.ndarray[Any, Any]
# What File.read_buffer(out=...) fills and returns.
_WritableBufferT = TypeVar("_WritableBufferT", bound=_BufferLike)
# File metadata as read back: bytes also stands for entry types this version
# of the library does not know.
_MetadataValue: TypeAlias = str | int | float | bool | bytes
# File metadata as accepted by save(): bytes may be any buffer-protocol object.
_MetadataInput: TypeAlias = (
    str | int | float | bool | np.bool_ | np.integer[Any] | np.floating[Any] | _BufferProtocol
)
_SparseFormat: TypeAlias = Literal["coo", "csr", "csc", "bsr"]

# ---------------------------------------------------------------- constants

C_ABI_VERSION: Final[int]
"""HURRAY_C_ABI_VERSION of the libhurray this package was built against (3)."""
DTYPES: Final[tuple[str, ...]]

@type_check_only
class _DefaultOutputLimit: ...

# The default output-size limit of to_dense / dequantize: max(64 MiB, 64 x
# the tensor's stored bytes) (docs/security.md, Limits).
DEFAULT_OUTPUT_LIMIT: Final[_DefaultOutputLimit]
QUANT_SCHEMES: Final[tuple[str, ...]]
"""Scheme names hurray.quantize takes: affine, per_channel, block_affine,
q8_0, q4_0, nf4, mxfp8_e4m3, mxfp8_e5m2, mxfp6_e3m2, mxfp6_e2m3, mxfp4, mxint8."""
"""Every hurray dtype name, e.g. "float32", "bfloat16", "float8_e4m3fn", "int4"."""
__version__: Final[str]
"""The libhurray library version string."""

# ---------------------------------------------------------------- exceptions

class HurrayError(Exception):
    """Base of every hurray error.

    Errors raised for a libhurray status carry the numeric code in ``status``
    and its stable identifier (e.g. ``"HURRAY_ERR_QUANT_AXIS"``) in
    ``status_name``."""

    status: int
    status_name: str

class InvalidArgumentError(HurrayError, ValueError):
    """HURRAY_ERR_INVALID_ARGUMENT, HURRAY_ERR_STATE, HURRAY_ERR_NOT_FINITE."""

class HurrayMemoryError(HurrayError, MemoryError):
    """HURRAY_ERR_NO_MEMORY."""

class UnsupportedError(HurrayError):
    """HURRAY_ERR_UNSUPPORTED, HURRAY_ERR_ABI_VERSION."""

class FormatError(HurrayError):
    """HURRAY_ERR_TRUNCATED, _MALFORMED, _BAD_MAGIC, _RANGE, _OVERLAP."""

class ChecksumError(HurrayError):
    """HURRAY_ERR_CHECKSUM."""

class LimitError(HurrayError):
    """HURRAY_ERR_LIMIT, HURRAY_ERR_OVERFLOW."""

class ValidationError(HurrayError):
    """Descriptor validation codes 20-54."""

class PlacementError(HurrayError):
    """Buffer placement codes 60-70: BUFFER_COUNT, BUFFER_SIZE, BUFFER_ALIGNMENT,
    DEVICE_MISMATCH, SYNC_MODE_MISMATCH, PAGE_TABLE_ENTRY, SPARSE_INDEX_BOUNDS,
    SPARSE_INDPTR, SPARSE_ORDER, QUANT_GROUP_INDEX."""

class NotFoundError(HurrayError, KeyError):
    """HURRAY_ERR_NOT_FOUND: no tensor, member or metadata key of that name
    (a missing file is a HurrayIOError and FileNotFoundError)."""

class DuplicateNameError(HurrayError):
    """HURRAY_ERR_DUPLICATE_NAME."""

class HurrayIOError(HurrayError, OSError):
    """HURRAY_ERR_IO, HURRAY_ERR_CANCELLED. A failure the operating system
    reported carries errno, strerror and filename, and is also the builtin
    OSError subclass its errno maps to (e.g. HurrayFileNotFoundError derives
    from HurrayIOError and FileNotFoundError), whatever its status."""

# The HurrayIOError of one errno, made when first raised (hurray.__getattr__):
# also the builtin class the errno maps to. These are the ones a file
# system call gives; any other errno's class is made the same way.
class HurrayFileNotFoundError(HurrayIOError, FileNotFoundError): ...
class HurrayPermissionError(HurrayIOError, PermissionError): ...
class HurrayIsADirectoryError(HurrayIOError, IsADirectoryError): ...
class HurrayNotADirectoryError(HurrayIOError, NotADirectoryError): ...
class HurrayFileExistsError(HurrayIOError, FileExistsError): ...
class HurrayBlockingIOError(HurrayIOError, BlockingIOError): ...
class HurrayBrokenPipeError(HurrayIOError, BrokenPipeError): ...
class HurrayInterruptedError(HurrayIOError, InterruptedError): ...
class HurrayTimeoutError(HurrayIOError, TimeoutError): ...

class RemoteError(HurrayIOError):
    """Reading a remote file failed."""

class RemoteProtocolError(RemoteError):
    """A wrong answer to a range request: 200 instead of 206, another
    Content-Range, a body shorter or longer than announced."""

class RemoteChangedError(RemoteError):
    """The file changed between two requests (ETag, Last-Modified, size, 412)."""

class RemoteNotFoundError(RemoteError, FileNotFoundError):
    """No file at that URL."""

class RemoteTimeoutError(RemoteError, TimeoutError):
    """No answer in time, after every retry."""

# ------------------------------------------------------- descriptor parts

@final
@dataclass(frozen=True)
class Buffer:
    """One entry of the buffer table.

    role: "data", "scales", "zero_points", "values", "indices", "indptr",
    "page_pool" or "page_table"; sync_mode: "ready", "stream" or "event"."""

    role: str
    byte_size: int
    alignment: int = 1
    sync_mode: str = "ready"

@final
@dataclass(frozen=True)
class Device:
    """DLPack device type (1 = CPU, 2 = CUDA, ...), device id, and memory
    class: "host", "host_pinned", "device" or "managed"."""

    type: int = 1
    id: int = 0
    memory_class: str = "host"

@final
@dataclass(frozen=True)
class Dense:
    data_buffer: int = 0

@final
@dataclass(frozen=True)
class Sparse:
    """format "coo" uses index_buffers (one per dimension) and canonical;
    "csr", "csc" and "bsr" use indptr_buffer and indices_buffer; "bsr" also
    block_shape. index_dtype is "int32" or "int64"."""

    format: str
    index_dtype: str
    nnz: int
    values_buffer: int = 0
    indptr_buffer: int | None = None
    indices_buffer: int | None = None
    index_buffers: tuple[int, ...] | None = None
    block_shape: tuple[int, int] | None = None
    canonical: bool = False

@final
@dataclass(frozen=True)
class Paged:
    axis: int
    page_size: int
    num_pages: int
    table_dtype: str = "int32"
    pool_buffer: int = 0
    table_buffer: int = 1

@final
@dataclass(frozen=True)
class Member:
    name: str
    descriptor: Descriptor

@final
@dataclass(frozen=True)
class Composite:
    members: tuple[Member, ...] = ()

@final
@dataclass(frozen=True)
class PerTensorAffine:
    scale: float
    zero_point: int = 0

@final
@dataclass(frozen=True)
class PerChannelAffine:
    axis: int
    scale_buffer: int
    scale_dtype: str = "float32"
    zero_point_buffer: int | None = None
    zero_point_dtype: str | None = None
    zero_point: int = 0
    storage_axes: tuple[int, ...] | None = None
    code_packing: Packing | None = None
    zero_point_packing: Packing | None = None
    zero_point_offset: int = 0
    codebook_buffer: int | None = None
    scale_codebook_buffer: int | None = None
    super_scale_buffer: int | None = None
    super_scale_dtype: str | None = None
    super_block_size: int = 0
    super_op: str | None = None  # "multiply" or "divide"; multiply when a buffer is given
    scale_offset: float = 0

@final
@dataclass(frozen=True)
class BlockAffine:
    axis: int
    block_size: int
    scale_buffer: int
    scale_dtype: str = "float16"
    zero_point_buffer: int | None = None
    zero_point_dtype: str | None = None
    zero_point: int = 0
    storage_axes: tuple[int, ...] | None = None
    code_packing: Packing | None = None
    zero_point_packing: Packing | None = None
    zero_point_offset: int = 0
    axis2: int = 0
    block_size2: int = 0
    group_index_buffer: int | None = None
    group_index_dtype: str | None = None
    codebook_buffer: int | None = None
    scale_codebook_buffer: int | None = None
    super_scale_buffer: int | None = None
    super_scale_dtype: str | None = None
    super_block_size: int = 0
    super_op: str | None = None  # "multiply" or "divide"; multiply when a buffer is given
    scale_offset: float = 0

@final
@dataclass(frozen=True)
class Nf4:
    block_size: int
    absmax_buffer: int
    absmax_dtype: str = "float32"
    code_packing: Packing | None = None
    codebook_buffer: int | None = None
    scale_codebook_buffer: int | None = None
    super_scale_buffer: int | None = None
    super_scale_dtype: str | None = None
    super_block_size: int = 0
    super_op: str | None = None  # "multiply" or "divide"; multiply when a buffer is given
    scale_offset: float = 0

@final
@dataclass(frozen=True)
class Packing:
    """Codes or zero points in little-endian words of `word_bits` (8, 16 or
    32): word_bits / bits lanes per word, consecutive along storage axis
    `axis`; lane j holds element order[j] of its group (None: identity).
    docs/spec/quantization.md §5.6."""

    word_bits: int
    axis: int = 0
    order: tuple[int, ...] | None = None

@final
@dataclass(frozen=True)
class Mxfp:
    """OCP MX: element is "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3",
    "fp4_e2m1" or "int8"."""

    element: str
    axis: int
    scale_buffer: int
    block_size: int = 32

@final
@dataclass(frozen=True)
class BlockCoded:
    """Blocks of a named format ("ggml_q4_k", ...) carrying their own
    scales, in the data buffer (dtype uint8), along the last axis."""

    format: str
    axis: int
    block_size: int | None = None

@final
@dataclass(frozen=True)
class Statistics:
    min: float | None = None
    max: float | None = None
    nan_count: int | None = None
    zero_count: int | None = None

@final
@dataclass(frozen=True)
class Shard:
    global_shape: tuple[int, ...]
    offsets: tuple[int, ...]

@final
@dataclass(frozen=True)
class Extension:
    name: str
    metadata: bytes = b""

_Layout: TypeAlias = Dense | Sparse | Paged | Composite
_Quantization: TypeAlias = (
    PerTensorAffine | PerChannelAffine | BlockAffine | Nf4 | Mxfp | BlockCoded
)

# ---------------------------------------------------------------- Descriptor

class Descriptor:
    """What a tensor's bytes mean. Immutable: use replace().

    Construction encodes through libhurray, so an impossible field raises at
    once (ValueError, KeyError, TypeError or a HurrayError); consistency is
    checked by validate(), or when a Tensor is built."""

    def __init__(
        self,
        dtype: str,
        shape: Sequence[int],
        *,
        strides: Sequence[int] | None = None,
        byte_offset: int = 0,
        layout: _Layout = ...,
        quantization: _Quantization | None = None,
        buffers: Sequence[Buffer] = (),
        device: Device = ...,
        statistics: Statistics | None = None,
        shard: Shard | None = None,
        extension: Extension | None = None,
    ) -> None: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def strides(self) -> tuple[int, ...] | None: ...
    @property
    def byte_offset(self) -> int: ...
    @property
    def layout(self) -> _Layout: ...
    @property
    def quantization(self) -> _Quantization | None: ...
    @property
    def buffers(self) -> tuple[Buffer, ...]: ...
    @property
    def device(self) -> Device: ...
    @property
    def statistics(self) -> Statistics | None: ...
    @property
    def shard(self) -> Shard | None: ...
    @property
    def extension(self) -> Extension | None: ...
    @property
    def numel(self) -> int: ...
    def replace(
        self,
        *,
        dtype: str = ...,
        shape: Sequence[int] = ...,
        strides: Sequence[int] | None = ...,
        byte_offset: int = ...,
        layout: _Layout = ...,
        quantization: _Quantization | None = ...,
        buffers: Sequence[Buffer] = ...,
        device: Device = ...,
        statistics: Statistics | None = ...,
        shard: Shard | None = ...,
        extension: Extension | None = ...,
    ) -> Descriptor: ...
    def to_dict(self) -> dict[str, Any]:
        """The dict form, with the field names of the JSON rendering."""
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Self: ...
    def encode(self) -> bytes:
        """The canonical binary encoding (docs/spec/descriptor-encoding.md)."""
    @classmethod
    def decode(cls, data: _BufferProtocol, /) -> Self:
        """Decodes whatever the C decoder accepts (validate() reports the
        rest); raises what the C decoder or validator would."""
    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        """copy, deepcopy and pickle travel through encode()."""
    def to_json(self) -> str: ...
    def validate(self) -> None:
        """Raises ValidationError (or another HurrayError) naming the field."""
    def required_bytes(self) -> list[int]:
        """Bytes each buffer must hold for what the descriptor places there."""
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

# -------------------------------------------------------------------- Tensor

@type_check_only
class _SupportsHurray(Protocol):
    def __hurray__(self) -> _Capsule: ...

class Tensor:
    """One descriptor plus N buffers, each kept alive by its own owner.

    At run time a subclass of the C type ``hurray._hurray._Tensor``."""

    def __init__(
        self,
        descriptor: Descriptor | bytes | bytearray | memoryview,
        buffers: Iterable[_BufferLike],
    ) -> None: ...
    @property
    def descriptor(self) -> Descriptor: ...
    @property
    def buffers(self) -> tuple[memoryview, ...]:
        """Zero-copy memoryviews, in descriptor order."""
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def buffer_count(self) -> int: ...
    def numpy(self) -> npt.NDArray[Any]:
        """Zero-copy view of a dense tensor's values; UnsupportedError for
        other layouts and for quantized tensors (use dequantize() or
        codes()). Sub-byte dtypes are unpacked (a copy). writeable=False
        when the memory is read-only."""
    def codes(self) -> npt.NDArray[Any]:
        """The stored elements of a dense tensor, zero-copy: the raw codes if
        quantized, else the values."""
    def __array__(
        self, dtype: npt.DTypeLike | None = None, copy: bool | None = None
    ) -> npt.NDArray[Any]: ...
    if sys.version_info >= (3, 12):
        def __buffer__(self, flags: int, /) -> memoryview:
            """The elements of a dense, unquantized, row-major host tensor of a
            numpy-native dtype (bool, integers, float16/32/64, complex64/128),
            zero-copy; BufferError for any other tensor."""
    def __dlpack__(
        self,
        stream: None = None,
        *,
        max_version: tuple[int, int] | None = None,
        dl_device: tuple[int, int] | None = None,
        copy: bool | None = None,
    ) -> _Capsule:
        """A DLPack capsule exported from C: every DLPack 1.x dtype (bfloat16,
        float8), "dltensor_versioned" with the read-only flag when
        max_version >= (1, 0); BufferError for quantized, non-dense and
        sub-byte tensors."""
    def __dlpack_device__(self) -> tuple[int, int]: ...
    def dequantize(
        self,
        dtype: npt.DTypeLike = ...,
        *,
        threads: int = 1,
        out: npt.NDArray[Any] | None = None,
        max_output_bytes: int | _DefaultOutputLimit | None = ...,
    ) -> npt.NDArray[Any]:
        """Real values of a quantized tensor (C kernels for float32, float16
        and bfloat16, GIL released); TypeError for non-float dtypes. out
        (float32, float16 or bfloat16, C order, the tensor's shape) is
        honoured for every layout; threads is 0..65535 (OverflowError
        otherwise). max_output_bytes as for to_dense."""
    def scales(self) -> npt.NDArray[Any]:
        """Quantization scales, shaped like the scale tensor."""
    def with_statistics(self) -> Tensor:
        """The same buffers, with min, max, NaN count and zero count computed
        in one C pass and stored in the descriptor."""
    def member(self, name: str) -> Tensor:
        """Member `name` of a composite tensor, its buffers zero-copy views of
        the parent's; UnsupportedError for other layouts."""
    def zero_points(self) -> npt.NDArray[np.int64]:
        """Zero points as int64, shaped like scales()."""
    def to_dense(
        self, *, max_output_bytes: int | _DefaultOutputLimit | None = ...
    ) -> npt.NDArray[Any]:
        """The logical tensor as a new dense array (its codes, one an element,
        if it is quantized: dequantize() gives the values; codes stored in
        another order or packed into words are an UnsupportedError). LimitError, before any
        allocation, for an output beyond max_output_bytes: by default
        (DEFAULT_OUTPUT_LIMIT) max(64 MiB, 64 x stored bytes), an int is an
        absolute limit in bytes, None is no limit."""
    def __hurray__(self, stream: None = None) -> _Capsule:
        """One capsule named "hurray_buffer" carrying every buffer
        (docs/impl/python-bindings.md). stream must be None."""
    @classmethod
    def _from_capsule(cls, capsule: _Capsule) -> Self:
        """Consumes a "hurray_buffer" capsule and renames it "used_hurray_buffer"."""

@type_check_only
class _SparseParts(TypedDict):
    format: _SparseFormat
    shape: tuple[int, ...]
    values: npt.NDArray[Any]
    coords: NotRequired[list[npt.NDArray[Any]]]
    indptr: NotRequired[npt.NDArray[Any]]
    indices: NotRequired[npt.NDArray[Any]]

class SparseTensor(Tensor):
    """A sparse tensor: values and index buffers in descriptor order."""

    @classmethod
    def from_arrays(
        cls,
        format: _SparseFormat,
        shape: Sequence[int],
        values: npt.ArrayLike,
        *,
        indices: npt.ArrayLike | None = None,
        indptr: npt.ArrayLike | None = None,
        coords: Sequence[npt.ArrayLike] | None = None,
        block_shape: Sequence[int] | None = None,
        canonical: bool = False,
    ) -> Self: ...
    def parts(self) -> _SparseParts:
        """The stored arrays, zero-copy: values plus coords or indptr/indices."""
    @classmethod
    def from_scipy(cls, matrix: Any) -> Self:
        """From any scipy.sparse matrix or array (formats other than COO, CSR,
        CSC and BSR go through tocsr())."""
    def to_scipy(self) -> Any:
        """A scipy.sparse coo/csr/csc/bsr matrix over the stored arrays."""
    @classmethod
    def from_torch(cls, tensor: _torch.Tensor) -> Tensor:
        """Same as hurray.torch.from_torch."""
    def to_torch(self) -> _torch.Tensor: ...

# ---------------------------------------------------------------------- files

@type_check_only
class _Writable(Protocol):
    # Gets bytes of at most 1 MiB it may keep; returns how many it took
    # (the rest is offered again) or None for all; 0 is an error.
    def write(self, data: bytes, /) -> int | None: ...

class File:
    """A lazy reader: only the index is read until a tensor is asked for.
    Tensors taken from it stay valid after close()."""

    path: str | bytes
    readonly: bool
    def __init__(
        self, path: _AnyPath, *, mmap: bool = True, verify: bool = False, readonly: bool = False
    ) -> None: ...
    def keys(self) -> list[str]: ...
    def __iter__(self) -> Iterator[str]: ...
    def __len__(self) -> int: ...
    def __contains__(self, name: object) -> bool: ...
    @property
    def metadata(self) -> dict[str, _MetadataValue]: ...
    def __getitem__(self, name: str) -> Tensor:
        """Sparse tensors come back as SparseTensor; NotFoundError if absent."""
    @overload
    def get(self, name: str) -> Tensor | None: ...
    @overload
    def get(self, name: str, default: _T) -> Tensor | _T: ...
    def shape(self, name: str) -> tuple[int, ...]:
        """Shape from the index alone; cheap per tensor."""
    def dtype(self, name: str) -> str:
        """Dtype name from the index alone."""
    def descriptor(self, name: str) -> Descriptor:
        """The descriptor alone; touches no data."""
    def get_slice(self, name: str, start: int, stop: int) -> Tensor:
        """Rows [start, stop) along dimension 0 of a dense tensor, reading
        only those bytes; IndexError for a row past the end."""
    @overload
    def read_buffer(self, name: str, index: int, out: None = None) -> bytearray: ...
    @overload
    def read_buffer(self, name: str, index: int, out: _WritableBufferT) -> _WritableBufferT:
        """Buffer `index` of `name` read with pread into `out` (any writable
        buffer at least that large), or into a new bytearray."""
    def populate(self, threads: int = 1) -> None:
        """Faults in every page of the tensor data now (MADV_POPULATE_READ)."""
    def cached_fraction(self) -> float:
        """Share of the tensor data in the page cache (cachestat, else mincore)."""
    def verify(self, name: str | None = None) -> None:
        """Checks one tensor or the whole file: every checksum
        (ChecksumError), then every step a read takes (descriptor and
        placement errors as the read raises them)."""
    def get_tensors(self, names: Iterable[str]) -> dict[str, Tensor]:
        """{name: tensor}; a RemoteFile fetches neighbours together, in
        parallel pieces."""
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...

class RemoteFile(File):
    """hurray.open of a URL (https://, http://, or any fsspec URL): range
    requests, every tensor a copy of its own (returned by open())."""
    def __init__(
        self,
        url: str,
        *,
        verify: bool = False,
        verify_reads: bool = True,
        threads: int = 8,
        timeout: float | tuple[float, float] = (10.0, 60.0),
        retries: int = 3,
        suffix_bytes: int = 262144,
        headers: Mapping[str, str] | None = None,
        storage_options: Mapping[str, Any] | None = None,
    ) -> None: ...
    @property
    def requests(self) -> int: ...

def open(
    path: _AnyPath,
    *,
    mmap: bool = True,
    verify: bool = False,
    readonly: bool = False,
    verify_reads: bool = True,
    threads: int = 8,
    timeout: float | tuple[float, float] = (10.0, 60.0),
    retries: int = 3,
    suffix_bytes: int = 262144,
    headers: Mapping[str, str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> File:
    """A lazy reader; a URL gives a RemoteFile (the keyword arguments after
    readonly apply to URLs only; docs/impl/python-bindings.md, "Remote
    files")."""

def load(
    path: _AnyPath,
    *,
    mmap: bool = True,
    verify: bool = False,
    readonly: bool = False,
    verify_reads: bool = True,
    threads: int = 8,
    timeout: float | tuple[float, float] = (10.0, 60.0),
    retries: int = 3,
    suffix_bytes: int = 262144,
    headers: Mapping[str, str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
) -> dict[str, Tensor]:
    """Every tensor, zero-copy from a private copy-on-write mapping by
    default (writable; writes never reach the file); readonly=True maps the
    file read-only and the views say so."""

class SafeSlice:
    """safetensors' slice object: shape and dtype, and [...] (ints, slices
    with any step, '...') reading only the rows it needs."""

    def __init__(self, owner: SafeOpen, name: str) -> None: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    def get_shape(self) -> list[int]: ...
    def get_dtype(self) -> str: ...
    def __len__(self) -> int: ...
    def __getitem__(self, key: object) -> Any: ...

class SafeOpen:
    def __init__(
        self, filename: str | os.PathLike[str], framework: str = "pt", device: Any = "cpu"
    ) -> None: ...
    def keys(self) -> list[str]: ...
    def metadata(self) -> dict[str, _MetadataValue] | None: ...
    def get_tensor(self, name: str) -> Any:
        """A torch tensor (framework "pt") or numpy array ("np")."""
    def get_slice(self, name: str) -> SafeSlice: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> None: ...

def safe_open(filename: _AnyPath, framework: str = "pt", device: object = "cpu") -> SafeOpen:
    """safetensors.safe_open over a hurray file."""

def save(
    target: _StrPath | bytes | os.PathLike[bytes] | int | _Writable,
    tensors: Mapping[str, object],
    metadata: Mapping[str, _MetadataInput] | None = None,
    *,
    statistics: bool = False,
) -> None:
    """Writes every buffer of every tensor. target is a path (written
    atomically: temp file, fsync, rename), an int file descriptor, or a
    binary stream with write() (written sequentially, never seeked; the
    fd is used directly only for a plain io.FileIO or a BufferedWriter or
    BufferedRandom over one, never for compressors or wrappers). Values go
    through as_tensor(); names and metadata keys must be str without NUL;
    metadata values are str (no NUL), int, float, bool, bytes, or numpy
    bool/integer/floating scalars (stored as bool, int, float; TypeError for
    what has no exact value). Ctrl-C aborts: the target is untouched and
    KeyboardInterrupt propagates. A path naming a folder, FIFO, socket or
    device is refused (HurrayIOError); a replaced file keeps its permission
    bits; a symbolic link is itself replaced. To a descriptor or a stream
    with a fileno() (a subclass or compressor too), a tensor mapped from
    that same file is refused (InvalidArgumentError): save it to the path
    instead. A non-blocking raw stream raises BlockingIOError."""

# ------------------------------------------------------------ sharded tensors

_Index: TypeAlias = slice | int | np.integer[Any] | tuple[slice | int | np.integer[Any], ...]

def shard(value: object, global_shape: Sequence[int], offsets: Sequence[int]) -> Tensor:
    """The same tensor (sharing its buffers) marked as the block
    [offsets, offsets + shape) of a global tensor of global_shape.
    ValidationError HURRAY_ERR_SHARD_RANK or HURRAY_ERR_SHARD_BOUNDS when the
    shard does not fit the tensor."""

@overload
def load_sharded(
    paths_or_dir: _StrPath | Iterable[_StrPath],
    name: str,
    *,
    index: _Index | None = None,
    mmap: bool = True,
    verify: bool = False,
) -> npt.NDArray[Any]: ...
@overload
def load_sharded(
    paths_or_dir: _StrPath | Iterable[_StrPath],
    name: None = None,
    *,
    index: _Index | None = None,
    mmap: bool = True,
    verify: bool = False,
) -> dict[str, npt.NDArray[Any]]:
    """Assembles the pieces (tensors with a shard) named `name` from the
    files, or every *.hurray file of a directory, into a new array of the
    global tensor or of the region `index` selects (slices with step 1 and
    integers); a dict of every sharded tensor when name is None. Only the
    pieces the region touches are fetched. The pieces must agree on global
    shape and dtype and tile it exactly (ValidationError
    HURRAY_ERR_SHARD_BOUNDS otherwise); dense, unquantized pieces only
    (UnsupportedError). A directory must hold one finished save.
    verify=True checks each fetched piece's checksums first (ChecksumError)."""

def save_sharded(
    directory: _StrPath,
    tensors: Mapping[str, object],
    parts: int,
    axis: int = 0,
    metadata: Mapping[str, _MetadataInput] | None = None,
) -> list[str]:
    """Cuts every tensor into `parts` pieces along `axis` (numpy.array_split)
    and writes piece k of each, with its shard, to
    directory/part-{k:05d}-of-{parts:05d}.hurray, each marked with the
    call's random id (metadata hurray.save_sharded.save; load_sharded
    refuses a tensor whose pieces in one folder carry two). Returns the
    paths. `parts` is an int from 1 to 99999 and `axis` an int (TypeError,
    ValueError); tensor names are str (TypeError)."""

# --------------------------------------------------------------- conversions

def as_tensor(value: object) -> Tensor:
    """Tensor, anything with __hurray__, torch tensors, scipy.sparse
    matrices, and whatever numpy.asarray accepts."""

class ConversionError(HurrayError):
    """A conversion that cannot be done (docs/impl/convert.md)."""

class ConversionIOError(ConversionError, OSError):
    """A conversion that failed on the file system: a missing or unreadable
    source, a target folder that is missing or cannot be written, a full
    disk. Carries errno, strerror and filename, and is also the builtin
    OSError subclass its errno maps to (a missing source is a
    ConversionIOError and a FileNotFoundError); str() is the one-line
    message."""

    message: str | None

# The ConversionIOError of one errno, made when first raised (hurray.__getattr__):
# also the builtin class the errno maps to. These are the ones a file
# system call gives; any other errno's class is made the same way.
class ConversionFileNotFoundError(ConversionIOError, FileNotFoundError): ...
class ConversionPermissionError(ConversionIOError, PermissionError): ...
class ConversionIsADirectoryError(ConversionIOError, IsADirectoryError): ...
class ConversionNotADirectoryError(ConversionIOError, NotADirectoryError): ...
class ConversionFileExistsError(ConversionIOError, FileExistsError): ...
class ConversionBlockingIOError(ConversionIOError, BlockingIOError): ...
class ConversionBrokenPipeError(ConversionIOError, BrokenPipeError): ...
class ConversionInterruptedError(ConversionIOError, InterruptedError): ...
class ConversionTimeoutError(ConversionIOError, TimeoutError): ...

def convert(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    quantize: str | None = None,
    quantize_include: str | Iterable[str] = (),
    quantize_exclude: str | Iterable[str] = (),
    include: str | Iterable[str] = (),
    exclude: str | Iterable[str] = (),
    keep_scales: bool = False,
    stats: bool = False,
    quiet: bool = False,
    threads: int = 1,
    block_size: int | None = None,
    output: Literal["table", "json"] = "table",
    verify: bool = True,
    dequantize: bool = False,
) -> Any:
    """Converts a checkpoint between safetensors, GGUF, .npz/.npy, torch and hurray."""

def quantize(
    array: object,
    scheme: str,
    *,
    axis: int | None = None,
    block_size: int | None = None,
    dtype: str | npt.DTypeLike | None = None,
    scale_dtype: str | npt.DTypeLike | None = None,
    symmetric: bool | None = None,
    threads: int = 1,
) -> Tensor:
    """Quantize a float array with the C kernels (docs/spec/quantization.md)."""

def from_numpy(array: npt.ArrayLike) -> Tensor:
    """A dense tensor over the array: zero-copy when it is C-contiguous."""

def from_hurray(obj: _SupportsHurray | _Capsule) -> Tensor:
    """Consumes obj.__hurray__() (or a capsule passed directly)."""

def from_dlpack(obj: object) -> Tensor:
    """A dense tensor from any DLPack producer (numpy, torch, ...); a dense
    hurray tensor through its capsule."""
