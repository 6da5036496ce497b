"""Type stubs for ``hurray.torch``: torch.Tensor <-> hurray.Tensor, and
save_file / load_file shaped like ``safetensors.torch``."""

import os
import sys
from collections.abc import Mapping
from typing import Protocol, type_check_only

import torch
from typing_extensions import Buffer as _BufferProtocol
from typing_extensions import TypeAlias

if sys.version_info >= (3, 13):
    from types import CapsuleType as _Capsule
else:
    from typing_extensions import CapsuleType as _Capsule

from .. import Tensor

__all__ = ["from_torch", "to_torch", "save_file", "load_file"]

_StrPath: TypeAlias = str | os.PathLike[str]
_MetadataInput: TypeAlias = str | int | float | bool | _BufferProtocol

@type_check_only
class _SupportsHurray(Protocol):
    def __hurray__(self) -> _Capsule: ...

def from_torch(tensor: torch.Tensor) -> Tensor:
    """A hurray tensor over a CPU torch tensor's memory: dense tensors are
    shared (non-contiguous ones are made contiguous first), quantized ones
    become codes plus parameters, sparse ones a hurray.SparseTensor.
    UnsupportedError for other devices, dtypes, schemes and layouts."""

def to_torch(t: Tensor | _SupportsHurray) -> torch.Tensor:
    """A torch tensor of a hurray tensor (zero-copy for dense tensors);
    objects with __hurray__ are consumed first."""

def save_file(
    tensors: Mapping[str, torch.Tensor],
    filename: _StrPath,
    metadata: Mapping[str, _MetadataInput] | None = None,
) -> None:
    """Like safetensors.torch.save_file; metadata values may also be int,
    float, bool or bytes. Tensors sharing memory raise ValueError."""

def load_file(
    filename: _StrPath,
    device: str | int | torch.device | None = "cpu",
    *,
    mmap: bool = True,
    dequantize: torch.dtype | None = None,
) -> dict[str, torch.Tensor]:
    """Like safetensors.torch.load_file: zero-copy views of a private,
    copy-on-write mapping by default (writable; the file never changes);
    mmap=False reads into memory of its own. dequantize=torch.float32,
    bfloat16 or float16 turns quantized tensors into that dtype on load.
    device="cuda" reads the file on several threads into pinned staging
    buffers that the GPU copies from."""
