"""hurray: tensors as one descriptor plus N buffers.

A file format (save/load/open) and an in-process handoff (the __hurray__
capsule), for dense, quantized, sparse, block-paged and composite tensors.
"""
from . import _hurray
from ._descriptor import (BlockAffine, Buffer, Composite, Dense, Descriptor, Device, Extension,
                          Member, Mxfp, Nf4, Paged, PerChannelAffine, PerTensorAffine, Shard,
                          Sparse, Statistics)
from ._dtypes import DTYPES
from ._convert import ConversionError, convert
from ._files import File, as_tensor, load, open, save
from ._remote import (RemoteChangedError, RemoteError, RemoteNotFoundError, RemoteProtocolError,
                      RemoteTimeoutError)
from ._remote_file import RemoteFile
from ._quant import QUANT_SCHEMES, quantize
from ._safe_open import safe_open
from ._hurray import (C_ABI_VERSION, ChecksumError, DuplicateNameError, FormatError,
                      HurrayError, HurrayIOError, HurrayMemoryError, InvalidArgumentError,
                      LimitError, NotFoundError, PlacementError, UnsupportedError,
                      ValidationError)
from ._shards import load_sharded, save_sharded, shard
from ._sparse import SparseTensor
from ._tensor import DEFAULT_OUTPUT_LIMIT, Tensor, from_dlpack, from_hurray, from_numpy

_hurray._set_tensor_class(Tensor)

__version__ = _hurray.LIBRARY_VERSION

__all__ = [
    "BlockAffine", "Buffer", "C_ABI_VERSION", "ChecksumError", "Composite", "ConversionError",
    "DEFAULT_OUTPUT_LIMIT", "DTYPES", "Dense",
    "Descriptor", "Device", "DuplicateNameError", "Extension", "File", "FormatError",
    "HurrayError", "HurrayIOError", "HurrayMemoryError", "InvalidArgumentError", "LimitError",
    "Member", "Mxfp", "Nf4", "NotFoundError", "Paged", "PerChannelAffine", "PerTensorAffine",
    "PlacementError", "QUANT_SCHEMES", "RemoteChangedError", "RemoteError", "RemoteFile",
    "RemoteNotFoundError", "RemoteProtocolError", "RemoteTimeoutError",
    "Shard", "Sparse", "SparseTensor", "Statistics", "Tensor",
    "UnsupportedError", "ValidationError", "as_tensor", "convert", "from_dlpack", "from_hurray",
    "from_numpy", "load", "load_sharded", "open", "quantize", "safe_open", "save", "save_sharded",
    "shard",
]
