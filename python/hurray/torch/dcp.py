"""hurray as a storage backend of torch.distributed.checkpoint (DCP).

    import torch.distributed.checkpoint as dcp
    from hurray.torch.dcp import HurrayStorageWriter, HurrayStorageReader

    dcp.save(state_dict, storage_writer=HurrayStorageWriter("ckpt/step-100"))
    dcp.load(state_dict, storage_reader=HurrayStorageReader("ckpt/step-100"))

DCP plans the save and the load (which rank writes which chunk, which stored
chunk overlaps which target shard); this module stores and fetches the bytes.
A checkpoint directory holds (docs/impl/torch-dcp.md has the details):

    rank-00000.hurray ...   one file per rank: every chunk that rank wrote,
                            named by its fully qualified name (fqn) and
                            marked with its shard (global shape + offsets);
                            DCP's non-tensor items as JSON text in uint8
                            tensors of the extension type "torch.dcp.json"
    .metadata.hurray        written last, by the coordinator, in finish():
                            no tensors, and DCP's Metadata as JSON in the
                            file metadata (never a pickle)

A directory without .metadata.hurray is an unfinished save: the reader
refuses it (IncompleteCheckpointError). Nothing in the directory is a
pickle: a non-tensor item that JSON cannot hold exactly (anything but None,
bool, int, float, str, list, tuple and dict of them) is refused, unless
both the writer and the reader pass allow_opaque_bytes=True; then DCP's own
serialized bytes (torch.save) are kept as "torch.dcp.bytes" and DCP
unpickles them on load. The rank files are plain sharded
hurray files: ``hurray.load_sharded(DIR)`` assembles every tensor without
torch and ``hurray ls DIR`` lists them.

The reader reshards: the world size and the placements of the load may
differ from the save's. DCP's planner matches every target shard with the
stored chunks it overlaps; each overlap is copied straight from the file's
read-only mapping into the target tensor (one copy, no intermediate
buffer), touching only the rows (and, within them, the columns) it needs.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import io
import json
import math
import numbers
import os
import re
import sys
import uuid
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    TensorProperties,
    TensorStorageMetadata,
)

try:  # the save id DCP hands its storage, from torch 2.4
    from torch.distributed.checkpoint.metadata import StorageMeta
except ImportError:  # pragma: no cover - older torch
    raise ImportError(
        f"hurray.torch.dcp needs torch 2.4 or later (DCP's StorageMeta); this is torch "
        f"{torch.__version__}"
    ) from None
from torch.distributed.checkpoint.planner import (
    LoadItemType,
    LoadPlan,
    LoadPlanner,
    SavePlan,
    SavePlanner,
    WriteItemType,
)
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter, WriteResult
from torch.futures import Future

from .. import _hurray, _shards
from .._deferred import signals_deferred
from .._descriptor import Extension
from .._files import File, save
from .._files import fsync_dir as _fsync_dir
from .._hurray import UnsupportedError
from .._publish import ReplaceError, remove_quietly, replace_all
from .._shards import _volume, shard
from .._tensor import Tensor, from_numpy
from . import _array_to_torch, _hurray_dtype, from_torch

__all__ = [
    "HurrayStorageWriter",
    "HurrayStorageReader",
    "CheckpointError",
    "IncompleteCheckpointError",
    "CheckpointPathError",
    "METADATA_FILE",
    "JSON_EXTENSION",
    "BYTES_EXTENSION",
    "FORMAT",
    "FORMAT_VERSION",
]

FORMAT = _shards.DCP_FORMAT
FORMAT_VERSION = 1
METADATA_FILE = _shards.DCP_METADATA_FILE
JSON_EXTENSION = "torch.dcp.json"
BYTES_EXTENSION = "torch.dcp.bytes"

# File metadata keys.
_K_FORMAT = _shards.DCP_FORMAT_KEY
_K_VERSION = "hurray.dcp.format_version"
_K_SAVE_ID = _shards.DCP_SAVE_ID_KEY
_K_RANK = "hurray.dcp.rank"
_K_WORLD = "hurray.dcp.world_size"
_K_METADATA = "hurray.dcp.metadata"

_RANK_FILE = re.compile(r"rank-\d{5,}(-\d+)?\.hurray")
# A staged rank file, or the earlier one replace_all keeps beside it until
# the save is published (".old": left by a coordinator that died then).
_STAGED_FILE = re.compile(r"\.(rank-\d{5,}(?:-\d+)?\.hurray)\.([0-9a-f]{32})(?:\.old)?")
_STAGED_METADATA = re.compile(re.escape("." + METADATA_FILE) + r"\.[0-9a-f]{32}")

try:  # the version string DCP's own FileSystemWriter stamps on its metadata
    from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION as _DCP_VERSION
except ImportError:  # pragma: no cover - older torch
    _DCP_VERSION = "1.0.0"


class CheckpointError(_hurray.HurrayError, RuntimeError):
    """A checkpoint directory that cannot be written or read as asked."""

    # A HurrayError (one `except hurray.HurrayError` covers every hurray
    # failure) and still the RuntimeError it always was.
    status = _hurray.STATUS["HURRAY_ERR_INVALID_ARGUMENT"]
    status_name = "HURRAY_ERR_INVALID_ARGUMENT"


class IncompleteCheckpointError(CheckpointError):
    """The save that wrote this directory did not finish (no .metadata.hurray)."""


class CheckpointPathError(CheckpointError, ValueError):
    """The checkpoint names a file outside its directory: a path with a
    separator (``../other/rank-00000.hurray``, an absolute path), or a
    symbolic link that resolves outside it. Nothing is read from it."""


def _confined(directory: str, name: Any, what: str) -> str:
    """directory/name, for a file name read from the checkpoint (or fixed,
    like .metadata.hurray), refused with CheckpointPathError unless it is a
    plain file name (no separator, not "." or "..") whose real path, symbolic
    links resolved, lies inside the directory's real path."""
    if (
        not isinstance(name, str)
        or name in ("", ".", "..")
        or "/" in name
        or "\0" in name
        or (os.altsep is not None and os.altsep in name)
    ):
        raise CheckpointPathError(
            f"{what} names the file {name!r}, which is not a plain file "
            f"name inside the checkpoint directory {directory}; nothing "
            "is read from it"
        )
    path = os.path.join(directory, name)
    top = os.path.realpath(directory)
    real = os.path.realpath(path)
    if os.path.dirname(real) != top:
        raise CheckpointPathError(
            f"{path} resolves to {real}, outside the checkpoint directory "
            f"{top}; nothing is read from it"
        )
    return path


# madvise(2) for the pages of a file mapping under an array (Linux):
# DONTNEED after a copy drops them from this process's resident set (they
# stay in the page cache), so a load's RSS does not grow by the checkpoint's
# size. (WILLNEED before the copy was measured slower than plain faults.)
_MADV_DONTNEED = 4
_PAGE = 4096
try:
    _libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
    _madvise_fn = _libc.madvise if _libc is not None else None
    if _madvise_fn is not None:
        _madvise_fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        _madvise_fn.restype = ctypes.c_int
    import mmap as _mmap

    _PAGE = _mmap.PAGESIZE
except (OSError, AttributeError):  # pragma: no cover - no libc madvise
    _madvise_fn = None


def _madvise(array: "np.ndarray", advice: int, mapped: Tuple[int, int]) -> None:
    """Best effort. Only for an array lying inside `mapped` (the address
    range of a buffer of a file mapping): DONTNEED on private memory would
    discard its contents."""
    if _madvise_fn is None or array.size == 0:
        return
    low = high = array.ctypes.data
    for n, stride in zip(array.shape, array.strides):
        if stride < 0:
            low += (n - 1) * stride
        else:
            high += (n - 1) * stride
    high += array.itemsize
    if low < mapped[0] or high > mapped[1]:
        return
    start = low - low % _PAGE
    _madvise_fn(start, high - start, advice)


def _rank_file(rank: int, k: int) -> str:
    return f"rank-{rank:05d}.hurray" if k == 0 else f"rank-{rank:05d}-{k}.hurray"


def _staged_name(name: str, save_id: str) -> str:
    """The hidden name a rank file or the metadata file has until finish()
    publishes the save."""
    return f".{name}.{save_id}"


def _rank_of(rank_file: str) -> int:
    return int(rank_file[len("rank-") :].split("-")[0].split(".")[0])


@dataclasses.dataclass(frozen=True)
class _Assignment:
    """SavePlan.storage_data of one rank, set by the coordinator."""

    rank: int
    world_size: int
    save_id: str


@dataclasses.dataclass(frozen=True)
class _Location:
    """Where one stored item is: WriteResult.storage_data and
    Metadata.storage_data values. kind: "tensor", "json" or "bytes"."""

    file: str
    name: str
    kind: str = "tensor"


# ------------------------------------------------------------ JSON encoding


def _dtype_name(dtype: "torch.dtype") -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _torch_attr(name: str, kind: type, what: str):
    value = getattr(torch, name, None)
    if not isinstance(value, kind):
        raise CheckpointError(
            f"{what} {name!r} of the checkpoint is unknown to torch {torch.__version__}"
        )
    return value


def _encode_value(v: Any, where: str) -> Any:
    """planner_data as JSON: tuples, dicts (any hashable keys) and
    non-finite floats tagged as one-key objects; nothing else allowed."""
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, numbers.Integral):
        return int(v)
    if isinstance(v, numbers.Real):
        f = float(v)
        return f if math.isfinite(f) else {"float": repr(f)}
    if isinstance(v, list):
        return [_encode_value(x, where) for x in v]
    if isinstance(v, tuple):
        return {"tuple": [_encode_value(x, where) for x in v]}
    if isinstance(v, dict):
        return {"dict": [[_encode_value(k, where), _encode_value(x, where)] for k, x in v.items()]}
    raise CheckpointError(
        f"{where} holds a {type(v).__name__}; hurray stores it as JSON (None, bool, int, float, "
        "str, list, tuple and dict only) and never pickles it"
    )


class _NotJSON(Exception):
    pass


def _encode_exact(v: Any) -> Any:
    """A non-tensor item as JSON, only if decoding gives back an equal
    object of the same types (no subclasses: no IntEnum, no namedtuple)."""
    t = type(v)
    if v is None or t is bool or t is str or t is int:
        return v
    if t is float:
        return v if math.isfinite(v) else {"float": repr(v)}
    if t is list:
        return [_encode_exact(x) for x in v]
    if t is tuple:
        return {"tuple": [_encode_exact(x) for x in v]}
    if t is dict:
        return {"dict": [[_encode_exact(k), _encode_exact(x)] for k, x in v.items()]}
    raise _NotJSON(t.__name__)


def _decode_value(v: Any) -> Any:
    if isinstance(v, list):
        return [_decode_value(x) for x in v]
    if isinstance(v, dict):
        if len(v) == 1:
            ((tag, body),) = v.items()
            if tag == "tuple":
                return tuple(_decode_value(x) for x in body)
            if tag == "dict":
                return {_decode_value(k): _decode_value(x) for k, x in body}
            if tag == "float":
                return float(body)
        raise CheckpointError(f"malformed planner_data in the checkpoint metadata: {v!r}")
    return v


def _new(cls, **fields):
    """A dataclass of torch's with the fields this torch has."""
    known = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in fields.items() if k in known})


def _encode_metadata(metadata: Metadata, save_id: str, world_size: int, files: List[str]) -> dict:
    storage = metadata.storage_data or {}
    entries = {}
    for fqn, md in metadata.state_dict_metadata.items():
        if isinstance(md, BytesStorageMetadata):
            loc = storage.get(MetadataIndex(fqn))
            if loc is None:
                raise CheckpointError(f"no rank wrote the non-tensor item {fqn!r}")
            entries[fqn] = {"kind": loc.kind, "file": loc.file, "name": loc.name}
            continue
        if not isinstance(md, TensorStorageMetadata):
            raise CheckpointError(f"{fqn!r}: unknown storage metadata {type(md).__name__}")
        p = md.properties
        chunks = []
        for c in md.chunks:
            loc = storage.get(MetadataIndex(fqn, c.offsets))
            if loc is None:
                raise CheckpointError(
                    f"no rank wrote the chunk of {fqn!r} at offsets {list(c.offsets)}"
                )
            chunks.append(
                {
                    "offsets": list(c.offsets),
                    "sizes": list(c.sizes),
                    "file": loc.file,
                    "name": loc.name,
                }
            )
        entries[fqn] = {
            "kind": "tensor",
            "dtype": _hurray_dtype(p.dtype),
            "torch_dtype": _dtype_name(p.dtype),
            "shape": list(md.size),
            "layout": _dtype_name(getattr(p, "layout", torch.strided)),
            "requires_grad": bool(getattr(p, "requires_grad", False)),
            "memory_format": _dtype_name(getattr(p, "memory_format", torch.contiguous_format)),
            "pin_memory": bool(getattr(p, "pin_memory", False)),
            "chunks": chunks,
        }
    sm = metadata.storage_meta
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "dcp_version": metadata.version,
        "torch_version": torch.__version__,
        "save_id": save_id,
        "world_size": world_size,
        "files": files,
        "state_dict": entries,
        "planner_data": _encode_value(metadata.planner_data, "Metadata.planner_data"),
        "storage_meta": None
        if sm is None
        else {
            "checkpoint_id": None if sm.checkpoint_id is None else os.fspath(sm.checkpoint_id),
            "save_id": sm.save_id,
            "modules": list(getattr(sm, "modules", None) or []),
        },
    }


def _check_tiling(fqn: str, shape, chunks) -> None:
    """The chunks of a tensor lie inside it, do not overlap and cover it:
    otherwise a load would leave part of the target as it was, or put values
    in the wrong place, without an error."""
    boxes = []
    for c in chunks:
        lo, n = tuple(c.offsets), tuple(c.sizes)
        if len(lo) != len(shape) or len(n) != len(shape):
            raise CheckpointError(
                f"{fqn!r}: a chunk at {list(lo)} of {list(n)} does not have the tensor's rank "
                f"{len(shape)}"
            )
        if any(o < 0 or k < 0 or o + k > s for o, k, s in zip(lo, n, shape)):
            raise CheckpointError(
                f"{fqn!r}: a chunk at {list(lo)} of {list(n)} is not inside the shape {list(shape)}"
            )
        boxes.append((lo, tuple(o + k for o, k in zip(lo, n))))
    solid = [b for b in boxes if _volume(b) > 0]
    fault = _shards.tiling_fault(solid, shape)
    if fault is None:
        return
    if fault.overlap is not None:
        a, b = solid[fault.overlap[0]][0], solid[fault.overlap[1]][0]
        raise CheckpointError(f"{fqn!r}: the chunks at {list(a)} and {list(b)} overlap")
    if fault.gap:
        raise CheckpointError(f"{fqn!r}: the chunks do not cover the shape {list(shape)}")
    raise CheckpointError(
        f"{fqn!r}: its {len(solid)} chunks are cut too irregularly to check that they tile "
        f"the shape {list(shape)}" + (" (they overlap or leave a gap)" if fault.counted else "")
    )


def _location(file: Any, name: Any, kind: str = "tensor") -> "_Location":
    """Where an item is stored: a file and a tensor name, both str (a number
    or a list there failed only when read, and not as a CheckpointError)."""
    if not isinstance(file, str) or not isinstance(name, str):
        raise TypeError(f"a file and a tensor name are strings, not {file!r} and {name!r}")
    return _Location(file, name, kind)


def _decode_metadata(doc: dict) -> Metadata:
    state_dict_metadata: Dict[str, Any] = {}
    storage_data: Dict[MetadataIndex, _Location] = {}
    for fqn, e in doc["state_dict"].items():
        if e["kind"] in ("json", "bytes"):
            state_dict_metadata[fqn] = BytesStorageMetadata()
            storage_data[MetadataIndex(fqn)] = _location(e["file"], e["name"], e["kind"])
            continue
        if e["kind"] != "tensor":
            raise CheckpointError(f"{fqn!r}: unknown item kind {e['kind']!r}")
        properties = _new(
            TensorProperties,
            dtype=_torch_attr(e["torch_dtype"], torch.dtype, "dtype"),
            layout=_torch_attr(e.get("layout", "strided"), torch.layout, "layout"),
            requires_grad=bool(e.get("requires_grad", False)),
            memory_format=_torch_attr(
                e.get("memory_format", "contiguous_format"), torch.memory_format, "memory format"
            ),
            pin_memory=bool(e.get("pin_memory", False)),
        )
        chunks = []
        for c in e["chunks"]:
            offsets = torch.Size(c["offsets"])
            chunks.append(ChunkStorageMetadata(offsets=offsets, sizes=torch.Size(c["sizes"])))
            storage_data[MetadataIndex(fqn, offsets)] = _location(c["file"], c["name"])
        shape = torch.Size(e["shape"])
        _check_tiling(fqn, shape, chunks)
        state_dict_metadata[fqn] = TensorStorageMetadata(
            properties=properties, size=shape, chunks=chunks
        )
    sm = doc.get("storage_meta") or {}
    storage_meta = _new(  # the save id the other ranks check their rank files against
        StorageMeta,
        checkpoint_id=sm.get("checkpoint_id"),
        save_id=doc["save_id"],  # checked: the file's and the document's
        modules=list(sm.get("modules") or []),
    )
    return _new(
        Metadata,
        state_dict_metadata=state_dict_metadata,
        planner_data=_decode_value(doc.get("planner_data")),
        storage_data=storage_data,
        storage_meta=storage_meta,
        version=doc.get("dcp_version"),
    )


# ------------------------------------------------------------------- writer


def _bytes_tensor(payload: bytes, extension: str) -> Tensor:
    """A non-tensor item as a 1-D uint8 tensor of an extension type:
    torch.dcp.json (UTF-8 JSON text) or torch.dcp.bytes (DCP's bytes)."""
    t = from_numpy(np.frombuffer(payload, dtype=np.uint8) if payload else np.zeros(0, np.uint8))
    return Tensor(t.descriptor.replace(extension=Extension(extension)), list(t.buffers))


def _is_default(planner: SavePlanner) -> bool:
    """Whether the planner serializes non-tensor items as DCP's default one
    does: torch.save of the state-dict object as it is."""
    cls = type(planner)
    return (
        isinstance(planner, DefaultSavePlanner)
        and cls.resolve_data is DefaultSavePlanner.resolve_data
        and cls.transform_object is DefaultSavePlanner.transform_object
    )


def _json_item(planner: SavePlanner, item) -> Optional[str]:
    """The JSON text of a non-tensor item, when the planner is DCP's default
    one (whose bytes are torch.save of the state-dict object as it is) and
    JSON holds the object exactly; None otherwise."""
    if not _is_default(planner):
        return None
    try:
        return json.dumps(
            _encode_exact(planner.lookup_object(item.index)), separators=(",", ":"), allow_nan=False
        )
    except (_NotJSON, KeyError, ValueError, TypeError):
        return None


_QUANTIZED_DTYPES = tuple(
    getattr(torch, n)
    for n in ("qint8", "quint8", "qint32", "quint4x2", "quint2x4")
    if hasattr(torch, n)
)


def _check_storable(fqn: str, t) -> None:
    """`t` (a tensor or DCP's TensorProperties) can be a chunk of the
    checkpoint: dense, of a dtype hurray has. The metadata and the reader
    describe plain dense chunks."""
    quantized = getattr(t, "is_quantized", False) or t.dtype in _QUANTIZED_DTYPES
    layout = getattr(t, "layout", torch.strided)
    if quantized or layout != torch.strided:
        raise CheckpointError(
            f"{fqn!r}: a {'quantized' if quantized else layout} tensor; DCP checkpoints hold "
            "dense tensors (save t.to_dense() or t.dequantize())"
        )
    _hurray_dtype(t.dtype)


def _check_key(fqn: str) -> None:
    """CheckpointError naming a state dict key hurray cannot name a tensor
    by (torch's own writer takes any str): a lone surrogate, a NUL, none."""
    try:
        fqn.encode("utf-8")
    except UnicodeEncodeError:
        raise CheckpointError(
            f"state dict key {fqn!r} is not valid UTF-8 text (a lone surrogate); "
            "hurray names tensors in UTF-8"
        ) from None
    if not fqn or "\0" in fqn:
        raise CheckpointError(
            f"state dict key {fqn!r} cannot name a hurray tensor (names are non-empty "
            "and hold no NUL character)"
        )


def _check_as_planned(fqn: str, tensor: "torch.Tensor", td) -> None:
    """CheckpointError where the planner resolved a tensor other than the one
    it planned (a transform_object that casts to bfloat16): the metadata
    says what the plan says, and the reader refuses what disagrees with it,
    so the save would replace an earlier one with one no load can read."""
    planned = td.properties.dtype
    sizes = tuple(td.chunk.sizes)
    if tensor.dtype != planned or tuple(tensor.shape) != sizes:
        raise CheckpointError(
            f"state dict item {fqn!r}: the planner resolved a {tensor.dtype} tensor of shape "
            f"{tuple(tensor.shape)} where its plan says {planned} of shape {sizes}; DCP's "
            "metadata would not describe what is stored (change the plan too, in "
            "create_local_plan)"
        )


class HurrayStorageWriter(StorageWriter):
    """Writes a DCP checkpoint as hurray files into the directory `path`.

    Every rank writes its rank-{rank:05d}.hurray (each chunk it saves,
    marked with its shard) under a hidden name. Only once every rank has
    (DCP calls finish() on the coordinator after all ranks' write_data
    succeeded) does the coordinator remove the .metadata.hurray and the rank
    files an earlier save left in `path` (with overwrite=False it refuses
    such a directory), rename the new files into place and write
    .metadata.hurray last, atomically. So a save that any rank refuses, for
    what it holds or a full disk, leaves the earlier checkpoint intact, and
    a directory is never left looking complete while holding a partial
    save. Hidden files of a save that failed are removed by the next one.
    Each save draws a fresh save id, also when one writer is reused.

    Non-tensor items (DCP's BytesStorageMetadata: optimizer hyperparameters,
    step counters, ...) are stored as JSON ("torch.dcp.json" tensors). One
    that JSON cannot hold exactly raises CheckpointError, unless
    allow_opaque_bytes=True: then DCP's serialized bytes (a torch.save
    pickle) are stored as they are ("torch.dcp.bytes"), and the reader
    needs allow_opaque_bytes=True as well.
    """

    def __init__(
        self, path: str | os.PathLike, *, overwrite: bool = True, allow_opaque_bytes: bool = False
    ) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.overwrite = overwrite
        self.allow_opaque_bytes = allow_opaque_bytes
        self.save_id = uuid.uuid4().hex
        self.rank: Optional[int] = None
        self.is_coordinator = False

    @property
    def checkpoint_id(self) -> str:
        return self.path

    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.save_id = uuid.uuid4().hex

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        if kwargs.get("use_collectives", True) is False:
            raise CheckpointError(
                "HurrayStorageWriter writes one global .metadata.hurray and needs "
                "use_collectives=True"
            )
        self.is_coordinator = is_coordinator
        rank = kwargs.get("rank")
        if rank is None:
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        self.rank = int(rank)

    def storage_meta(self) -> Optional[StorageMeta]:
        return StorageMeta(checkpoint_id=self.path, save_id=self.save_id)

    def prepare_local_plan(self, plan: SavePlan) -> SavePlan:
        # What the plan tells of each tensor is checked on every rank before
        # the global plan: such a refusal fails the save on all ranks before
        # any of them removes an earlier save.
        for item in plan.items:
            if item.type != WriteItemType.BYTE_IO and item.tensor_data is not None:
                _check_storable(item.index.fqn, item.tensor_data.properties)
        try:
            os.makedirs(self.path, exist_ok=True)
        except OSError as exc:
            raise _shards._io_error(exc, f"cannot make the folder {self.path}") from None
        return plan

    def prepare_global_plan(self, plans: List[SavePlan]) -> List[SavePlan]:
        # The coordinator, before any rank writes. An earlier save is removed
        # by finish(), once every rank has written this one.
        meta = os.path.join(self.path, METADATA_FILE)
        stale = [n for n in os.listdir(self.path) if _RANK_FILE.fullmatch(n)]
        if (os.path.exists(meta) or stale) and not self.overwrite:
            raise CheckpointError(f"{self.path} already holds a checkpoint and overwrite=False")
        # One id per save, even from a writer DCP does not reset (it resets
        # only when given a checkpoint_id): two saves' files never share one.
        self.save_id = uuid.uuid4().hex
        return [
            dataclasses.replace(p, storage_data=_Assignment(i, len(plans), self.save_id))
            for i, p in enumerate(plans)
        ]

    def write_data(self, plan: SavePlan, planner: SavePlanner) -> Future[List[WriteResult]]:
        a = plan.storage_data
        if not isinstance(a, _Assignment):
            raise CheckpointError(
                "write_data got a plan that HurrayStorageWriter.prepare_global_plan did not make"
            )
        if getattr(planner, "_enable_plan_caching", False):
            # A cached plan is the first save's, assignment and save id
            # included: every later save wrote its files under the old id,
            # and finish() found none of this save's.
            raise CheckpointError(
                "HurrayStorageWriter cannot use DCP's plan caching "
                "(DefaultSavePlanner(enable_plan_caching=True)): a cached plan carries an "
                "earlier save's assignment; save without it"
            )
        files: List[Dict[str, Tensor]] = [{}]
        results = []
        for item in plan.items:
            fqn = item.index.fqn
            _check_key(fqn)
            k = 0
            while fqn in files[k]:  # several chunks of one tensor: one file each
                k += 1
                if k == len(files):
                    files.append({})
            kind = "tensor"
            if item.type == WriteItemType.BYTE_IO:
                text = _json_item(planner, item)
                if text is not None:
                    payload, kind = text.encode("utf-8"), "json"
                elif self.allow_opaque_bytes:
                    data = planner.resolve_data(item)
                    payload = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
                    kind = "bytes"
                elif not _is_default(planner):
                    raise CheckpointError(
                        f"non-tensor item {fqn!r}: hurray stores non-tensor items as JSON only "
                        f"with DCP's DefaultSavePlanner ({type(planner).__name__} may change "
                        "them); hurray does not store pickles unless "
                        "HurrayStorageWriter(..., allow_opaque_bytes=True)"
                    )
                else:
                    what = type(_lookup(planner, item)).__name__
                    raise CheckpointError(
                        f"non-tensor item {fqn!r} ({what}) has no exact JSON form (None, bool, "
                        "int, float, str, list, tuple and dict of them); hurray does not store "
                        "pickles unless HurrayStorageWriter(..., allow_opaque_bytes=True)"
                    )
                t = _bytes_tensor(payload, JSON_EXTENSION if kind == "json" else BYTES_EXTENSION)
                size = len(payload)
            else:
                data = planner.resolve_data(item)
                tensor = data.detach()
                _check_storable(fqn, tensor)  # a planner may resolve what it did not plan
                td = item.tensor_data
                _check_as_planned(fqn, tensor, td)
                if tensor.device.type != "cpu":
                    tensor = tensor.cpu()
                t = shard(from_torch(tensor), td.size, td.chunk.offsets)
                size = tensor.numel() * tensor.element_size()
            files[k][fqn] = t
            results.append(
                WriteResult(
                    index=item.index,
                    size_in_bytes=size,
                    storage_data=_Location(_rank_file(a.rank, k), fqn, kind),
                )
            )
        metadata = {
            _K_FORMAT: FORMAT,
            _K_VERSION: FORMAT_VERSION,
            _K_SAVE_ID: a.save_id,
            _K_RANK: a.rank,
            _K_WORLD: a.world_size,
        }
        self._write_files(a, files, metadata)
        fut: Future[List[WriteResult]] = Future()
        fut.set_result(results)
        return fut

    def _write_files(self, a: _Assignment, files: List[Dict[str, Tensor]], metadata: dict) -> None:
        """This rank's files, under hidden names (finish() renames them):
        nothing of an earlier save is touched here."""
        staged: List[str] = []
        try:
            for k, tensors in enumerate(files):
                staged.append(
                    os.path.join(self.path, _staged_name(_rank_file(a.rank, k), a.save_id))
                )
                save(staged[-1], tensors, metadata)
        except BaseException:
            for path in staged:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            raise

    def _publish(self, files: List[str]) -> None:
        """Every rank wrote its files and the metadata is written under its
        hidden name: the earlier save goes (its metadata first, so the
        directory never looks complete while it holds a mix), this save's
        files take their names, its metadata last, and whatever else an
        earlier or failed save left (rank files this save does not have,
        hidden files of other saves) is removed. Only renames and removals
        from here: nothing that a full disk refuses. Ctrl-C waits for the
        end: between the removal and the last rename it left neither the
        earlier save nor this one loadable."""
        with signals_deferred():
            self._publish_now(files)

    def _publish_now(self, files: List[str]) -> None:
        meta = os.path.join(self.path, METADATA_FILE)
        names = list(files) + [METADATA_FILE]
        staged = [os.path.join(self.path, _staged_name(name, self.save_id)) for name in names]
        targets = [os.path.join(self.path, name) for name in names]
        # The earlier metadata is moved aside, not removed: if a rename
        # below fails (a rank file another user owns in a sticky folder),
        # the earlier save is put back whole; removed, it was lost. Its
        # hidden name is a staged one, which a later save clears away.
        aside = None
        try:
            if os.path.isdir(meta) and not os.path.islink(meta):  # never moved aside
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), meta)
            candidate = os.path.join(self.path, _staged_name(METADATA_FILE, uuid.uuid4().hex))
            try:
                os.replace(meta, candidate)
                aside = candidate
                _fsync_dir(self.path)
            except FileNotFoundError:
                pass
            kept = replace_all(list(zip(staged, targets)))
        except BaseException as exc:
            remove_quietly(staged)  # those moved into place are gone already
            where = ""
            if aside is not None:
                try:
                    os.replace(aside, meta)
                except OSError:
                    where = f"; the earlier metadata is at {aside}"
            try:
                _fsync_dir(self.path)
            except OSError:
                pass  # the error that stopped the save is the one to report
            if isinstance(exc, ReplaceError):
                target = targets[exc.index]
                raise _shards._io_error(
                    exc.cause, f"cannot put {target} in place{where}", target
                ) from None
            if isinstance(exc, OSError):
                raise _shards._io_error(exc, f"cannot publish the save in {self.path}") from None
            raise
        _fsync_dir(self.path)  # the renames durable before the kept files go
        remove_quietly(kept + ([aside] if aside is not None else []))
        keep = set(files)
        for n in os.listdir(self.path):
            if (
                (_RANK_FILE.fullmatch(n) and n not in keep)
                or _STAGED_FILE.fullmatch(n)
                or _STAGED_METADATA.fullmatch(n)
            ):
                try:
                    os.unlink(os.path.join(self.path, n))
                except (FileNotFoundError, IsADirectoryError, PermissionError):
                    pass  # gone, or a folder by that name: not ours to remove
        _fsync_dir(self.path)

    def finish(self, metadata: Metadata, results: List[List[WriteResult]]) -> None:
        metadata.version = _DCP_VERSION
        storage_data = {}
        files = set()
        for rank, wr_list in enumerate(results):
            files.add(_rank_file(rank, 0))
            for wr in wr_list:
                storage_data[wr.index] = wr.storage_data
                files.add(wr.storage_data.file)
        metadata.storage_data = storage_data
        metadata.storage_meta = self.storage_meta()
        missing = [
            f
            for f in sorted(files)
            if not os.path.exists(os.path.join(self.path, _staged_name(f, self.save_id)))
        ]
        if missing:
            raise CheckpointError(
                f"rank files of this save missing from {self.path} (is it on storage every "
                f"rank shares?): {missing}"
            )
        doc = _encode_metadata(metadata, self.save_id, len(results), sorted(files))
        # Written before anything of the earlier save is touched: a write
        # that fails (a full disk, a quota, Ctrl-C) leaves that save whole.
        save(
            os.path.join(self.path, _staged_name(METADATA_FILE, self.save_id)),
            {},
            {
                _K_FORMAT: FORMAT,
                _K_VERSION: FORMAT_VERSION,
                _K_SAVE_ID: self.save_id,
                _K_WORLD: len(results),
                _K_METADATA: json.dumps(doc, separators=(",", ":"), allow_nan=False),
            },
        )
        self._publish(sorted(files))

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        try:
            path = os.fspath(checkpoint_id)
        except TypeError:
            return False
        return isinstance(path, str) and "://" not in path


def _lookup(planner: SavePlanner, item) -> Any:
    try:
        return planner.lookup_object(item.index)  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - only for the error message
        return None


# ------------------------------------------------------------------- reader


def _read_metadata_file(path: str) -> dict:
    """The JSON document of DIR/.metadata.hurray (the file's index checksum
    is verified by opening it)."""
    meta = os.path.join(path, METADATA_FILE)
    if not os.path.isdir(path):
        raise CheckpointError(f"no checkpoint at {path}: not a directory")
    if not os.path.lexists(meta):
        found = sorted(n for n in os.listdir(path) if _RANK_FILE.fullmatch(n))
        extra = f"; it holds {len(found)} rank files of a save that did not finish" if found else ""
        raise IncompleteCheckpointError(
            f"checkpoint at {path} is incomplete: finish() did not complete "
            f"(no {METADATA_FILE}){extra}"
        )
    meta = _confined(path, METADATA_FILE, "the checkpoint")
    with File(meta) as f:
        md = f.metadata
    if md.get(_K_FORMAT) != FORMAT or _K_METADATA not in md:
        raise CheckpointError(f"{meta} is not a {FORMAT} checkpoint metadata file")
    version = md.get(_K_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise CheckpointError(
            f"{meta} has {FORMAT} format version {version!r}; this hurray "
            f"reads versions up to {FORMAT_VERSION}"
        )
    try:
        doc = json.loads(md[_K_METADATA])
    except (TypeError, ValueError, RecursionError) as e:
        raise CheckpointError(f"{meta}: malformed checkpoint metadata: {e}") from None
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("files"), list)
        or not isinstance(doc.get("state_dict"), dict)
    ):
        raise CheckpointError(
            f"{meta}: malformed checkpoint metadata (no files list or state_dict object)"
        )
    sm = doc.get("storage_meta")
    if (
        not isinstance(doc.get("save_id"), str)
        or doc["save_id"] != md.get(_K_SAVE_ID)
        or (isinstance(sm, dict) and sm.get("save_id") not in (None, doc["save_id"]))
    ):
        # Without one, a rank file of any save (or of none) would pass; the
        # storage_meta's is what the other ranks check theirs against.
        raise CheckpointError(f"{meta}: no save id, or its save ids disagree")
    return doc


class HurrayStorageReader(StorageReader):
    """Reads a checkpoint written by HurrayStorageWriter, resharding to
    whatever the load asks for.

    verify=True checks the xxh3 checksums of every stored piece a rank reads
    from (whole pieces: checksums are per buffer) before copying from it.
    mmap=True (the default) copies each overlap straight from the file's
    mapping; mmap=False reads with pread (the rows needed only, for pieces
    cut along dimension 0).

    Non-tensor items stored as JSON are handed to DCP re-serialized from
    the decoded value; opaque "torch.dcp.bytes" items (which DCP unpickles)
    are refused unless allow_opaque_bytes=True."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        verify: bool = False,
        mmap: bool = True,
        allow_opaque_bytes: bool = False,
    ) -> None:
        super().__init__()
        self.path = os.fspath(path)
        self.verify = verify
        self.mmap = mmap
        self.allow_opaque_bytes = allow_opaque_bytes
        self.load_id = uuid.uuid4().hex
        self.storage_data: Dict[MetadataIndex, _Location] = {}
        self._save_id: Optional[str] = None
        self._dtypes: Dict[str, str] = {}

    @property
    def checkpoint_id(self) -> str:
        return self.path

    def reset(self, checkpoint_id: str | os.PathLike | None = None) -> None:
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.storage_data = {}
        self._save_id = None
        self.load_id = uuid.uuid4().hex

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        doc = _read_metadata_file(self.path)
        what = f"{METADATA_FILE} of {self.path}"
        # Every file named is checked before any is looked at: no probing
        # for files outside the directory, not even for their existence.
        listed = [_confined(self.path, f, what) for f in doc["files"]]
        missing = [os.path.basename(p) for p in listed if not os.path.exists(p)]
        if missing:
            raise CheckpointError(
                f"checkpoint at {self.path} is damaged: {METADATA_FILE} lists "
                f"rank files that are missing: {missing}"
            )
        try:
            metadata = _decode_metadata(doc)
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError, AttributeError, RecursionError) as e:
            raise CheckpointError(
                f"{what}: malformed checkpoint metadata: {type(e).__name__}: {e}"
            ) from None
        for loc in (metadata.storage_data or {}).values():
            _confined(self.path, loc.file, what)
        metadata.storage_meta.load_id = self.load_id
        self._save_id = doc["save_id"]
        return metadata

    def set_up_storage_reader(
        self, metadata: Metadata, is_coordinator: bool, *args: Any, **kwargs: Any
    ) -> None:
        if metadata.storage_data is None:
            raise CheckpointError("the checkpoint metadata has no storage_data")
        self.storage_data = metadata.storage_data
        if metadata.storage_meta is not None and metadata.storage_meta.save_id:
            self._save_id = metadata.storage_meta.save_id
        self._dtypes = {}
        for fqn, md in metadata.state_dict_metadata.items():
            if not isinstance(md, TensorStorageMetadata):
                continue
            try:
                self._dtypes[fqn] = _hurray_dtype(md.properties.dtype)
            except UnsupportedError:  # a torch dtype, but none a hurray file holds
                raise CheckpointError(
                    f"{fqn!r}: the checkpoint metadata's dtype {md.properties.dtype} is "
                    "none a hurray checkpoint holds"
                ) from None

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans: List[LoadPlan]) -> List[LoadPlan]:
        return plans

    def _open(self, name: str) -> File:
        # Checked again where it is used: storage_data may come from another
        # rank, or from a caller's Metadata, not from read_metadata.
        path = _confined(self.path, name, "the checkpoint metadata")
        f = File(path, mmap=self.mmap)
        save_id = f.metadata.get(_K_SAVE_ID)
        if self._save_id is not None and save_id != self._save_id:
            f.close()
            raise CheckpointError(
                f"checkpoint at {self.path} mixes two saves: {name} was written by save "
                f"{save_id!r}, {METADATA_FILE} by save {self._save_id!r}"
            )
        rank = f.metadata.get(_K_RANK)
        if _RANK_FILE.fullmatch(os.path.basename(name)) and rank != _rank_of(
            os.path.basename(name)
        ):
            f.close()
            raise CheckpointError(
                f"checkpoint at {self.path} is damaged: {name} holds rank {rank!r}'s items "
                "(rank files renamed or copied over one another)"
            )
        return f

    def _region(self, f: File, req, loc: _Location) -> Tuple[np.ndarray, str, Tuple[int, int]]:
        """The stored region a ReadItem asks for, its dtype, and the address
        range of the mapped buffer it lies in ((0, 0) if not mapped). With
        mmap, a view of the file's mapping (nothing is read until the copy
        touches its pages); with mmap=False, the rows needed read with pread."""
        name = loc.name
        mapped = (0, 0)
        if self.mmap:
            piece = f[name]
            dtype, shape = piece.dtype, tuple(piece.shape)
            if piece.buffer_count == 1:
                data = np.frombuffer(piece.buffers[0], dtype=np.uint8)
                if data.size:
                    mapped = (data.ctypes.data, data.ctypes.data + data.size)
        else:
            piece = None
            dtype, shape = f._file._shape(name)
            shape = tuple(shape)
        fqn = req.storage_index.fqn
        stored = f.descriptor(name).shard
        offsets = tuple(int(o) for o in (req.storage_index.offset or ()))
        if stored is not None and offsets and tuple(stored.offsets) != offsets:
            raise CheckpointError(
                f"{f.path}[{name!r}] is the piece at {list(stored.offsets)}; the checkpoint "
                f"metadata places it at {list(offsets)}"
            )
        if fqn in self._dtypes and dtype != self._dtypes[fqn]:
            raise CheckpointError(
                f"{f.path}[{name!r}] is {dtype}; the checkpoint metadata says {self._dtypes[fqn]}"
            )
        lo = tuple(int(o) for o in req.storage_offsets)
        n = tuple(int(x) for x in req.lengths)
        if len(shape) != len(lo) or any(o + k > s for o, k, s in zip(lo, n, shape)):
            raise CheckpointError(
                f"{f.path}[{name!r}] has shape {list(shape)}; the load asks "
                f"for {list(n)} elements at {list(lo)}"
            )
        if piece is None and shape and (lo[0], n[0]) != (0, shape[0]):
            array = f.get_slice(name, lo[0], lo[0] + n[0]).numpy()
            index = (slice(None),) + tuple(slice(o, o + k) for o, k in zip(lo[1:], n[1:]))
        else:
            array = (piece if piece is not None else f[name]).numpy()
            index = tuple(slice(o, o + k) for o, k in zip(lo, n))
        return (array[index] if index else array), dtype, mapped

    def _object_bytes(self, f: File, loc: _Location) -> io.BytesIO:
        """A non-tensor item as the bytes DCP's load_bytes takes."""
        t = f[loc.name]
        ext = t.descriptor.extension
        expected = JSON_EXTENSION if loc.kind == "json" else BYTES_EXTENSION
        strides = t.descriptor.strides
        if (
            ext is None
            or ext.name != expected
            or t.dtype != "uint8"
            or len(t.shape) != 1
            or (strides is not None and tuple(strides) != (1,))
        ):
            # Strides too: a byte repeated (stride 0) over 2**40 elements
            # was materialised before the JSON parse could refuse it.
            raise CheckpointError(
                f"{f.path}[{loc.name!r}] is not a plain 1-D uint8 {expected} item"
            )
        payload = t.numpy().tobytes()
        if loc.kind == "bytes":
            if not self.allow_opaque_bytes:
                raise CheckpointError(
                    f"{f.path}[{loc.name!r}] is an opaque torch.dcp.bytes item, which DCP "
                    "unpickles on load; pass HurrayStorageReader(..., allow_opaque_bytes=True) "
                    "if you trust this checkpoint"
                )
            return io.BytesIO(payload)
        try:
            value = _decode_value(json.loads(payload.decode("utf-8")))
        except (UnicodeDecodeError, ValueError, TypeError, RecursionError, CheckpointError) as e:
            raise CheckpointError(f"{f.path}[{loc.name!r}]: malformed JSON item: {e}") from None
        out = io.BytesIO()
        torch.save(value, out)  # what DCP's load_bytes reads back with torch.load
        out.seek(0)
        return out

    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future[None]:
        per_file: Dict[str, List[Tuple[Any, _Location]]] = {}
        for req in plan.items:
            try:
                loc = self.storage_data[req.storage_index]
            except KeyError:
                raise CheckpointError(
                    f"the checkpoint metadata has no stored item {req.storage_index}"
                ) from None
            per_file.setdefault(loc.file, []).append((req, loc))
        for name in sorted(per_file):
            f = self._open(name)
            try:
                verified = set()
                for req, loc in per_file[name]:
                    if loc.name not in f:  # the metadata edited, or of another save
                        raise CheckpointError(
                            f"{os.path.join(self.path, name)}: the checkpoint metadata names "
                            f"the tensor {loc.name!r}, which this file does not hold"
                        )
                    if self.verify and loc.name not in verified:
                        f.verify(loc.name)
                        verified.add(loc.name)
                    if req.type == LoadItemType.BYTE_IO:
                        planner.load_bytes(req, self._object_bytes(f, loc))
                        continue
                    region, dtype, mapped = self._region(f, req, loc)
                    src = _array_to_torch(region, dtype)
                    target = planner.resolve_tensor(req).detach()
                    if target.size() != src.size():
                        raise CheckpointError(
                            f"{req.storage_index}: the target has size "
                            f"{list(target.size())}, the stored region "
                            f"{list(src.size())}"
                        )
                    target.copy_(src)
                    if self.mmap:
                        _madvise(region, _MADV_DONTNEED, mapped)
                    del src, region
                    planner.commit_tensor(req, target)
            finally:
                f.close()
        fut: Future[None] = Future()
        fut.set_result(None)
        return fut

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike) -> bool:
        try:
            path = os.fspath(checkpoint_id)
        except TypeError:
            return False
        return isinstance(path, str) and os.path.isdir(path)
