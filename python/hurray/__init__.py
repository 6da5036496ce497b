"""hurray: tensors as one descriptor plus N buffers.

A file format (save/load/open) and an in-process handoff (the __hurray__
capsule), for dense, quantized, sparse, block-paged and composite tensors.

Layering: each module imports only modules of the layers below it.
  0  _hurray (C)       descriptor, parts, tensor, capsule, file, save, tables
  1  _hooks            late-bound calls upward (registered from above)
     _dtypes           dtype names <-> numpy (sizes and packing from C)
     _descriptor       Descriptor (fields live in C) and its parts
  2  _tensor           Tensor
  3  _sparse, _quant   SparseTensor; quantize
  4  _files            File, load, save, as_tensor
  5  _shards, _safe_open
  6  torch/            the torch adapters (reached from below through _hooks)
  7  _convert, this module, __main__
"""

import importlib

from . import _hooks, _hurray
from ._descriptor import (
    BlockAffine,
    BlockCoded,
    Buffer,
    Composite,
    Dense,
    Descriptor,
    Device,
    Extension,
    Member,
    Mxfp,
    Nf4,
    Packing,
    Paged,
    PerChannelAffine,
    PerTensorAffine,
    Shard,
    Sparse,
    Statistics,
)
from ._dtypes import DTYPES
from ._files import File, as_tensor, load, open, save
from ._hurray import (
    C_ABI_VERSION,
    ChecksumError,
    DuplicateNameError,
    FormatError,
    HurrayError,
    HurrayIOError,
    HurrayMemoryError,
    InvalidArgumentError,
    LimitError,
    NotFoundError,
    PlacementError,
    UnsupportedError,
    ValidationError,
)
from ._quant import QUANT_SCHEMES, quantize
from ._remote import (
    RemoteChangedError,
    RemoteError,
    RemoteNotFoundError,
    RemoteProtocolError,
    RemoteTimeoutError,
)
from ._remote_file import RemoteFile
from ._safe_open import SafeOpen, SafeSlice, safe_open  # noqa: F401 - the stubs name them
from ._shards import load_sharded, save_sharded, shard
from ._sparse import SparseTensor
from ._tensor import DEFAULT_OUTPUT_LIMIT, Tensor, from_dlpack, from_hurray, from_numpy
from .convert import ConversionError, ConversionIOError, convert

_hurray._set_tensor_class(Tensor)
_hooks.provide("torch", lambda: importlib.import_module(".torch", __name__).__getattribute__)

__version__ = _hurray.LIBRARY_VERSION

__all__ = [
    "BlockAffine",
    "BlockCoded",
    "Buffer",
    "C_ABI_VERSION",
    "ChecksumError",
    "Composite",
    "ConversionError",
    "ConversionIOError",
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
    "Packing",
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


def __getattr__(name: str):
    """The OSError classes of one errno (HurrayFileNotFoundError,
    ConversionPermissionError, ...) are made when first raised, as a
    HurrayIOError or ConversionIOError that is also the builtin class the
    errno maps to. Pickle finds a class by its module and name: here, in a
    process that has not made it yet."""
    import builtins
    import errno

    from .convert._common import _io_class

    for prefix, make in (("Hurray", _hurray._os_error_class), ("Conversion", _io_class)):
        builtin = getattr(builtins, name[len(prefix) :], None) if name.startswith(prefix) else None
        if isinstance(builtin, type) and issubclass(builtin, OSError) and builtin is not OSError:
            for code in sorted(errno.errorcode):
                if type(OSError(code, "")) is builtin:
                    return make(code)
    raise AttributeError(f"module 'hurray' has no attribute {name!r}")
