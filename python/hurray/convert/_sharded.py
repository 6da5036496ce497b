"""A folder of hurray files holding sharded tensors (save_sharded's parts,
a torch.distributed.checkpoint folder written by HurrayStorageWriter):
each sharded tensor assembled whole by load_sharded, each tensor without a
shard as it is."""

from __future__ import annotations

from typing import Dict, List, Tuple

from .. import _files, _hurray, _shards
from .._hurray import HurrayError
from .._tensor import from_numpy
from ._common import ConversionError, _first_line, _stored_bytes, os_failure
from ._source import _Source
from .layouts import describe


class _ShardedSource(_Source):
    format = "hurray (sharded folder)"

    def __init__(self, folder: str, verify: bool = True):
        self.path = folder
        self._verify = verify
        self._paths = _shards._paths(folder)
        # name -> (dtype, global shape, stored bytes, the files holding it)
        self._sharded: Dict[str, Tuple[str, Tuple[int, ...], int, List[str]]] = {}
        self._whole: Dict[str, str] = {}  # name -> the file holding it
        self._metadata: Dict = {}
        for path in self._paths:
            self._scan(path)
        for name in self._sharded.keys() & self._whole.keys():
            raise ConversionError(
                f"{folder}: tensor {name!r} is whole in {self._whole[name]} and sharded in "
                f"{self._sharded[name][3][0]}"
            )

    def _open(self, path: str) -> _files.File:
        try:
            return _files.open(path)
        except OSError as exc:  # hurray.HurrayIOError too
            raise os_failure(exc, f"cannot read {path}: {_first_line(exc)}") from None
        except HurrayError as exc:
            raise ConversionError(f"cannot read {path}: {_first_line(exc)}") from None

    def _scan(self, path: str) -> None:
        with self._open(path) as f:
            if not self._metadata:  # the parts of one save carry the same metadata
                unknown = set(f._file._metadata_unknown())  # as _HurraySource leaves them
                self._metadata = {k: v for k, v in f.metadata.items() if k not in unknown}
            for name in f.keys():
                d = f.descriptor(name)
                if d.shard is None:
                    if name in self._whole:
                        raise ConversionError(
                            f"{self.path}: tensor {name!r} is in both {self._whole[name]} "
                            f"and {path}"
                        )
                    self._whole[name] = path
                    continue
                dtype, shape, stored, files = self._sharded.get(
                    name, (d.dtype, tuple(d.shard.global_shape), 0, [])
                )
                files.append(path)
                self._sharded[name] = (dtype, shape, stored + _stored_bytes(d), files)

    def names(self):
        return sorted(self._sharded) + [n for n in self._whole if n not in self._sharded]

    def info(self, name):
        if name in self._sharded:
            dtype, shape, stored, _ = self._sharded[name]
            return dtype, shape, stored
        with self._open(self._whole[name]) as f:
            d = f.descriptor(name)
        return describe(d), d.shape, _stored_bytes(d)

    def _check(self, path: str, name: str) -> None:
        if not self._verify:
            return
        with self._open(path) as f:
            try:
                f.verify(name)
            except HurrayError as exc:
                raise ConversionError(
                    f"{path}: tensor {name!r} fails verification ({_first_line(exc)}); the "
                    "file is damaged (--no-verify converts it anyway)"
                ) from None

    def get(self, name):
        files = self._sharded[name][3] if name in self._sharded else [self._whole[name]]
        for path in files:
            self._check(path, name)
        try:
            if name in self._sharded:
                return from_numpy(_shards.load_sharded(files, name))
            with _files.File(self._whole[name], mmap=False) as f:
                return f[name]
        except OSError as exc:
            raise os_failure(
                exc, f"cannot read {name!r} from {self.path}: {_first_line(exc)}"
            ) from None
        except HurrayError as exc:
            raise ConversionError(f"{self.path}: tensor {name!r}: {_first_line(exc)}") from None

    def metadata(self):
        left_out = {_hurray.CHUNK_CHECKSUMS_KEY, _shards.SAVE_KEY}
        return {k: v for k, v in self._metadata.items() if k not in left_out}

    def files(self):
        return list(self._paths)
