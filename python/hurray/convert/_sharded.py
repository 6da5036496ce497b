"""A folder of hurray files holding sharded tensors (save_sharded's parts,
a torch.distributed.checkpoint folder written by HurrayStorageWriter):
each sharded tensor assembled whole by load_sharded, each tensor without a
shard as it is."""

from __future__ import annotations

import collections
import contextlib
import math
import os
from typing import Dict, List, Optional, Tuple

from .. import _dtypes, _files, _hurray, _shards
from .._descriptor import Descriptor
from .._hurray import HurrayError
from .._tensor import Tensor, from_numpy
from ._common import ConversionError, _first_line, _stored_bytes, os_failure, read_descriptor
from ._source import _Source
from .layouts import describe

#: Parts kept open at once (a folder may hold more parts than there are fds).
OPEN_PARTS = 64

# The keys a part carries for its save, not for the model: a file made of
# the assembled tensors is no part of that save.
_PART_KEYS = (_shards.SAVE_KEY, "hurray.dcp.")


class _Piece:
    """What the scan learned of a sharded tensor."""

    def __init__(self, d: Descriptor):
        self.dtype = d.dtype
        self.global_shape = tuple(d.shard.global_shape)
        self.extension = d.extension
        self.stored = 0
        self.files: List[str] = []


class _ShardedSource(_Source):
    format = "hurray (sharded folder)"

    def __init__(self, folder: str, verify: bool = True):
        self.path = self.folder = folder
        self._verify = verify
        self._open_files: "collections.OrderedDict[str, _files.File]" = collections.OrderedDict()
        try:
            self._paths = _shards._paths(folder)
        except _hurray.NotFoundError:
            raise ConversionError(
                f"{folder}: no regular *.hurray file to read (FIFOs, folders and hidden files "
                "are not parts)"
            ) from None
        except HurrayError as exc:  # a *.hurray entry that is no file: named
            if isinstance(exc, OSError):
                raise os_failure(exc, f"{folder}: {_first_line(exc)}") from None
            raise ConversionError(f"{folder}: {_first_line(exc)}") from None
        self._sharded: Dict[str, _Piece] = {}
        self._whole: Dict[str, str] = {}  # name -> the file holding it
        self._metadata: Dict = {}
        self._notes: List[str] = []
        ids: Dict[str, Optional[str]] = {}  # part -> the save id it carries
        dcp = [False]  # some part says it is a DCP rank file
        try:
            for path in self._paths:
                self._scan(path, ids, dcp)
            self._check_dcp(ids, dcp[0])
        except BaseException:
            self.close()
            raise
        for name in self._sharded.keys() & self._whole.keys():
            raise ConversionError(
                f"{folder}: tensor {name!r} is whole in {self._whole[name]} and sharded in "
                f"{self._sharded[name].files[0]}"
            )

    def _file(self, path: str) -> _files.File:
        """`path` opened once and kept (the least recently used closed past
        OPEN_PARTS): every tensor reads its parts without parsing their
        indexes again."""
        f = self._open_files.pop(path, None)
        if f is None:
            try:
                f = _files.open(path)
            except OSError as exc:  # hurray.HurrayIOError too
                raise os_failure(exc, f"cannot read {path}: {_first_line(exc)}") from None
            except HurrayError as exc:
                raise ConversionError(f"cannot read {path}: {_first_line(exc)}") from None
            if len(self._open_files) >= OPEN_PARTS:
                self._open_files.popitem(last=False)[1].close()
        self._open_files[path] = f
        return f

    def _scan(self, path: str, ids: Dict[str, Optional[str]], dcp: List[bool]) -> None:
        f = self._file(path)
        unknown = set(f._file._metadata_unknown())  # as _HurraySource leaves them
        meta = {k: v for k, v in f.metadata.items() if k not in unknown}
        save_id = meta.get(_shards.SAVE_KEY, meta.get(_shards.DCP_SAVE_ID_KEY))
        ids[path] = None if save_id is None else str(save_id)
        dcp[0] = dcp[0] or meta.get(_shards.DCP_FORMAT_KEY) == _shards.DCP_FORMAT
        self._merge_metadata(path, meta)
        for name in f.keys():
            d = read_descriptor(f, path, name)
            if d.shard is None:
                if name in self._whole:
                    raise ConversionError(
                        f"{self.path}: tensor {name!r} is in both {self._whole[name]} and {path}"
                    )
                self._whole[name] = path
                continue
            piece = self._sharded.setdefault(name, _Piece(d))
            piece.files.append(path)
            piece.stored += _stored_bytes(d)

    def _merge_metadata(self, path: str, meta: Dict) -> None:
        for key, value in meta.items():
            if key.startswith(_PART_KEYS):
                continue
            if key not in self._metadata:
                self._metadata[key] = value
            elif self._metadata[key] != value:
                self._notes.append(
                    f"metadata {key!r} differs between the parts: the first part's value is kept "
                    f"({os.path.basename(path)} has another)"
                )

    def _check_dcp(self, ids: Dict[str, Optional[str]], dcp: bool) -> None:
        why = _shards.check_one_finished_save(self.path, ids, dcp, lambda p: self._file(p).metadata)
        if why is not None:
            raise ConversionError(f"{self.path}: {why}")

    def names(self):
        return sorted(self._sharded) + [n for n in self._whole if n not in self._sharded]

    def info(self, name):
        piece = self._sharded.get(name)
        if piece is not None:
            return piece.dtype, piece.global_shape, piece.stored
        d = self._file(self._whole[name]).descriptor(name)
        return describe(d), d.shape, _stored_bytes(d)

    def expansion(self, name) -> Optional[Tuple[int, int]]:
        piece = self._sharded.get(name)
        if piece is None:
            return None
        return _dtypes.storage_bytes(piece.dtype, math.prod(piece.global_shape)), piece.stored

    def _check(self, path: str, name: str) -> None:
        if not self._verify:
            return
        try:
            self._file(path).verify(name)
        except HurrayError as exc:
            raise ConversionError(
                f"{path}: tensor {name!r} fails verification ({_first_line(exc)}); the "
                "file is damaged (--no-verify converts it anyway)"
            ) from None

    def get(self, name):
        piece = self._sharded.get(name)
        files = piece.files if piece is not None else [self._whole[name]]
        for path in files:
            self._check(path, name)
        try:
            if piece is None:
                return self._file(files[0])[name]
            array = _shards._load(
                files, name, None, lambda p: contextlib.nullcontext(self._file(p))
            )
            t = from_numpy(array)
            if piece.extension is not None:  # as the pieces have it
                t = Tensor(t.descriptor.replace(extension=piece.extension), list(t.buffers))
            return t
        except OSError as exc:
            raise os_failure(
                exc, f"cannot read {name!r} from {self.path}: {_first_line(exc)}"
            ) from None
        except HurrayError as exc:
            raise ConversionError(f"{self.path}: tensor {name!r}: {_first_line(exc)}") from None

    def metadata(self):
        return {k: v for k, v in self._metadata.items() if k != _hurray.CHUNK_CHECKSUMS_KEY}

    def notes(self):
        return list(self._notes)

    def files(self):
        return list(self._paths)

    def close(self):
        while self._open_files:
            self._open_files.popitem()[1].close()
