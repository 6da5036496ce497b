"""The interface every source format implements."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from .._tensor import Tensor


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

    def would_read(self, path: str) -> bool:
        """Whether a new file at `path` would become part of this source
        when it is read again (a sharded folder takes every *.hurray in
        it): a target must not be written there."""
        return False

    def refused(self) -> Dict[str, str]:
        """Entries that are not tensors: name -> why they cannot be converted."""
        return {}

    def close(self) -> None:
        pass
