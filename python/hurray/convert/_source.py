"""The interface every source format implements."""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Tuple

from .. import _shards
from .._tensor import Tensor


def counts_in_folder(name: str) -> bool:
    """Whether a file of this name is one of the model files a folder source
    is told by (_driver._open_source): *.safetensors, or a *.hurray part."""
    return name.endswith(".safetensors") or _shards.is_part_name(name)


class _Source:
    format = "?"

    def names(self) -> List[str]:
        raise NotImplementedError

    def info(self, name: str) -> Tuple[str, Tuple[int, ...], int]:
        """(dtype label, shape, stored bytes), cheaply."""
        raise NotImplementedError

    def get(self, name: str) -> Tensor:
        raise NotImplementedError

    def expansion(self, name: str) -> Optional[Tuple[int, int]]:
        """(bytes, stored bytes) when get() itself writes the tensor out
        dense from fewer stored bytes (assembling pieces, making a strided
        view contiguous): the conversion's expansion budget is charged
        before get() runs. None: nothing of the kind, the tensor get()
        returns is charged as it is."""
        return None

    def metadata(self) -> Dict[str, Any]:
        return {}

    def notes(self) -> List[str]:
        """What the report should say about the source as a whole."""
        return []

    def complete_metadata(self, metadata: Dict[str, Any]) -> None:
        """Adds to `metadata` (what metadata() returned) what only the
        conversion of the tensors told; called once, after the last get()."""

    def files(self) -> List[str]:
        """The files read besides the source path itself (a sharded
        checkpoint's shards): a target must not replace one."""
        return []

    #: The folder this source was found in by what it holds (a folder of one
    #: .safetensors file, or of .hurray parts), else None.
    folder: Optional[str] = None

    def would_read(self, path: str) -> bool:
        """Whether a new file at `path` would change what this source is when
        it is read again (one more part of a sharded folder, or a second
        model file beside the one a folder holds): a target must not be
        written there."""
        if self.folder is None:
            return False
        here = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        return here == os.path.realpath(self.folder) and counts_in_folder(os.path.basename(path))

    def refused(self) -> Dict[str, str]:
        """Entries that are not tensors: name -> why they cannot be converted."""
        return {}

    def close(self) -> None:
        pass
