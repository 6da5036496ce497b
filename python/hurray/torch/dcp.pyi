"""Type stubs for ``hurray.torch.dcp``: a hurray storage backend for
torch.distributed.checkpoint."""

import os
from typing import Any

from torch.distributed.checkpoint.metadata import Metadata, MetadataIndex, StorageMeta
from torch.distributed.checkpoint.planner import LoadPlan, LoadPlanner, SavePlan, SavePlanner
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from hurray import HurrayError

__all__ = [
    "HurrayStorageWriter",
    "HurrayStorageReader",
    "CheckpointError",
    "IncompleteCheckpointError",
    "CheckpointPathError",
    "METADATA_FILE",
    "BYTES_EXTENSION",
    "FORMAT",
    "FORMAT_VERSION",
    "JSON_EXTENSION",
]

FORMAT: str
FORMAT_VERSION: int
METADATA_FILE: str
BYTES_EXTENSION: str
JSON_EXTENSION: str

class CheckpointError(HurrayError, RuntimeError):
    """A checkpoint directory that cannot be written or read as asked."""

class IncompleteCheckpointError(CheckpointError):
    """The save that wrote this directory did not finish (no .metadata.hurray)."""

class CheckpointPathError(CheckpointError, ValueError):
    """The checkpoint names a file outside its directory (a path with a
    separator, or a symbolic link resolving outside); nothing is read."""

class HurrayStorageWriter(StorageWriter):
    """One rank-NNNNN.hurray per rank (chunks marked with their shard), then
    .metadata.hurray (DCP's Metadata as JSON) written last by finish()."""

    path: str
    overwrite: bool
    save_id: str
    rank: int | None
    is_coordinator: bool
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        overwrite: bool = True,
        allow_opaque_bytes: bool = False,
    ) -> None: ...
    @property
    def checkpoint_id(self) -> str: ...
    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None: ...
    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None: ...
    def storage_meta(self) -> StorageMeta | None: ...
    def prepare_local_plan(self, plan: SavePlan) -> SavePlan: ...
    def prepare_global_plan(self, plans: list[SavePlan]) -> list[SavePlan]: ...
    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[list[WriteResult]]: ...
    def finish(self, metadata: Metadata, results: list[list[WriteResult]]) -> None: ...
    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool: ...

class HurrayStorageReader(StorageReader):
    """Reads and reshards a checkpoint of HurrayStorageWriter; verify=True
    checks the checksum of every piece read from."""

    path: str
    verify: bool
    mmap: bool
    load_id: str
    storage_data: dict[MetadataIndex, Any]
    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        verify: bool = False,
        mmap: bool = True,
        allow_opaque_bytes: bool = False,
    ) -> None: ...
    @property
    def checkpoint_id(self) -> str: ...
    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None: ...
    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata: ...
    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None: ...
    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan: ...
    def prepare_global_plan(self, plans: list[LoadPlan]) -> list[LoadPlan]: ...
    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]: ...
    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool: ...
