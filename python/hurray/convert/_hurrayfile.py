"""hurray files: every tensor as it is, quantized and sparse forms included."""

from __future__ import annotations

from typing import Dict

from .. import _files, _hurray
from .._hurray import HurrayError
from .._tensor import Tensor
from ._common import (
    ConversionError,
    _first_line,
    _stored_bytes,
    os_failure,
    read_descriptor,
    write_failure,
)
from ._source import _Source
from ._target import _FileTarget, _Out, dropped_note
from .layouts import describe

# Why a hurray source leaves keys behind (tools/hurray.c says the same).
LEFT_BEHIND = (
    "the reserved chunk-checksum key, or types of a newer file format version, which this "
    "version does not write"
)


class _HurraySource(_Source):
    format = "hurray"

    def __init__(self, path: str, verify: bool = True):
        self.path = path
        self._verify = verify
        try:
            self._file = _files.open(path)
        except OSError as exc:  # hurray.HurrayIOError too
            raise os_failure(exc, f"cannot read {path}: {_first_line(exc)}") from None
        except HurrayError as exc:
            raise ConversionError(f"cannot read {path}: {_first_line(exc)}") from None

    def names(self):
        return self._file.keys()

    def info(self, name):
        d = read_descriptor(self._file, self.path, name)
        return describe(d), d.shape, _stored_bytes(d)

    def get(self, name):
        if self._verify:  # every byte converted is checked against its checksum first
            try:
                self._file.verify(name)
            except HurrayError as exc:
                raise ConversionError(
                    f"{self.path}: tensor {name!r} fails verification ({_first_line(exc)}); the "
                    "file is damaged (--no-verify converts it anyway)"
                ) from None
        return self._file[name]

    def _left_out(self):
        # A 1.0 writer could store this key as ordinary metadata; 1.1
        # reserves it for the chunk table, and no writer may store it again.
        # Nor can it store a type of a newer minor version (File.metadata
        # hands those out as bytes) as what it is.
        left_out = {_hurray.CHUNK_CHECKSUMS_KEY, *self._file._file._metadata_unknown()}
        return [k for k in self._file.metadata if k in left_out]

    def metadata(self):
        left_out = set(self._left_out())
        return {k: v for k, v in self._file.metadata.items() if k not in left_out}

    def notes(self):
        left_out = self._left_out()
        return [dropped_note(left_out, LEFT_BEHIND)] if left_out else []

    def close(self):
        self._file.close()


class _HurrayTarget(_FileTarget):
    format = "hurray"

    def __init__(self, path, options):
        super().__init__(path, options)
        self._tensors: Dict[str, Tensor] = {}

    def add(self, name, t, source_dtype):
        self._tensors[name] = t
        return _Out(describe(t.descriptor), _stored_bytes(t.descriptor))

    def finish(self, metadata, report):
        report.metadata_keys = len(metadata)
        try:  # hurray.save replaces self.tmp atomically; publish() renames it
            _files.save(self.tmp, self._tensors, metadata, statistics=self.options.stats)
        except OSError as exc:  # hurray.HurrayIOError too: a full disk
            raise write_failure(exc, self.path) from None
        except (HurrayError, TypeError, OverflowError, ValueError) as exc:  # ValueError: NUL
            raise ConversionError(f"writing {self.path}: {_first_line(exc)}") from None
