"""numpy .npz archives: each array read from its own member with numpy's
.npy reader (no pickles), written as np.savez writes them, one member as
each tensor arrives."""

from __future__ import annotations

import math
import struct
import zipfile
from typing import Dict, Optional, Set, Tuple

import numpy as np

from ._common import (
    _NUMPY_NATIVE,
    NUMPY_FILE_ERRORS,
    ConversionError,
    _contiguous,
    _first_line,
    _from_numpy_checked,
    is_bookkeeping,
    read_npy_header,
    write_failure,
)
from ._source import _Source
from ._target import _DenseTarget, _note_dropped, _Out


def _shared_members(path: str, zf: zipfile.ZipFile) -> Optional[Tuple[str, str]]:
    """Two members whose stored bytes (local header, then data) overlap, or
    None. Deflate inflates at most about 1,000 bytes from each stored byte,
    but members that all run into one shared deflate stream each inflate it
    again: 260 KB asked for 2 GB per 8 members. Python 3.13's zipfile
    refuses such archives; 3.11's and 3.12's do not."""
    spans = []
    with open(path, "rb") as f:
        for info in zf.infolist():
            if info.header_offset < 0:  # a central directory that lies about its place
                return None  # zipfile says what is wrong when the member is read
            f.seek(info.header_offset + 26)  # the local header's name and extra lengths
            lengths = f.read(4)
            if len(lengths) < 4:
                return None
            name_len, extra_len = struct.unpack("<HH", lengths)
            start = info.header_offset
            spans.append(
                (start, start + 30 + name_len + extra_len + info.compress_size, info.filename)
            )
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        if start < end:
            return a, b
    return None


class _NpzSource(_Source):
    format = "npz"

    def __init__(self, path: str):
        self.path = path
        try:
            self._zip = zipfile.ZipFile(path)
        except NUMPY_FILE_ERRORS as exc:
            raise ConversionError(f"cannot read {path}: {_first_line(exc)}") from None
        shared = _shared_members(path, self._zip)
        if shared is not None:
            self._zip.close()
            raise ConversionError(
                f"{path}: members {shared[0]!r} and {shared[1]!r} share stored bytes "
                "(a zip made to inflate far more than it holds)"
            )
        self._members: Dict[str, str] = {}
        for member in self._zip.namelist():
            # numpy names member "a.npy" and member "a" both "a"
            name = member[:-4] if member.endswith(".npy") else member
            if name in self._members:
                self._zip.close()
                raise ConversionError(
                    f"{path}: members {self._members[name]!r} and {member!r} "
                    f"both read as array {name!r}"
                )
            self._members[name] = member
        self._names = list(self._members)

    def names(self):
        return list(self._names)

    def _header(self, name):
        """(shape, fortran_order, dtype) from the member's .npy header, or
        None where it cannot be read (_array then says what is wrong)."""
        member = self._members.get(name)
        if member is None:
            return None
        try:
            with self._zip.open(member) as fp:
                return read_npy_header(fp)
        except NUMPY_FILE_ERRORS:
            return None

    def info(self, name):
        header = self._header(name)
        if header is None:
            a = self._array(name)
            shape, dtype = a.shape, a.dtype
        else:
            shape, _, dtype = header
        if dtype.hasobject:
            raise ConversionError(
                f"{self.path}: array {name!r} holds Python objects; hurray "
                "converts numeric arrays only"
            )
        return str(dtype), tuple(shape), math.prod(shape) * dtype.itemsize

    def _array(self, name):
        header = self._header(name)
        if header is not None and not header[2].hasobject:
            # numpy allocates what the header says before reading: a member
            # of a few bytes that claims terabytes is refused first.
            need = math.prod(header[0]) * header[2].itemsize
            held = self._zip.getinfo(self._members[name]).file_size
            if need > held:
                raise ConversionError(
                    f"{self.path}: array {name!r}: its header says {need} bytes, "
                    f"the member holds {held}"
                )
        try:
            return self._read_member(self._members[name])
        except NUMPY_FILE_ERRORS as exc:  # object arrays, damaged or truncated members
            raise ConversionError(f"{self.path}: array {name!r}: {_first_line(exc)}") from None
        except MemoryError:
            raise ConversionError(f"{self.path}: array {name!r}: out of memory") from None

    def _read_member(self, member: str) -> np.ndarray:
        """The array in `member` itself: np.load looks a name up as a member
        first, so its array "a.npy" would be member "a.npy" (array "a"),
        not "a.npy.npy", and the size check above would guard another one."""
        with self._zip.open(member) as fp:
            if fp.read(len(np.lib.format.MAGIC_PREFIX)) != np.lib.format.MAGIC_PREFIX:
                raise ConversionError(f"{self.path}: member {member!r} is not a .npy array")
            fp.seek(0)
            return np.lib.format.read_array(fp, allow_pickle=False)

    def get(self, name):
        return _from_numpy_checked(self._array(name), name)

    def close(self):
        self._zip.close()


class _NpzTarget(_DenseTarget):
    """Written as np.savez does (a stored zip of .npy members), one member
    as each tensor arrives."""

    format = "npz"
    native = _NUMPY_NATIVE

    def __init__(self, path, options):
        super().__init__(path, options)
        self._zip: Optional[zipfile.ZipFile] = None
        self._names: Set[str] = set()

    def start(self):
        super().start()
        self._zip = zipfile.ZipFile(self.tmp, "w", zipfile.ZIP_STORED, allowZip64=True)

    def _check_name(self, name: str) -> None:
        """Refuses a name the archive cannot give back: tensor "a" is member
        "a.npy", which readers (np.load, this converter's) take for tensor
        "a.npy" as well, so "a" and "a.npy" would come back as one; and a
        name holding NUL, which zipfile cuts there ("w\\0a" and "w\\0b"
        would both be member "w", one lost with a mere warning)."""
        if "\0" in name:
            raise ConversionError(
                f"{self.path}: tensor {name!r} holds a NUL character, which .npz member "
                "names cannot hold (a .pt target keeps such names)"
            )
        other = name[:-4] if name.endswith(".npy") else name + ".npy"
        if other in self._names:
            first, second = sorted((name, other), key=len)
            raise ConversionError(
                f"{self.path}: tensors {first!r} and {second!r} cannot both go into an .npz: "
                f"tensor {first!r} is written as member {second!r}, which numpy also hands out as "
                f"tensor {second!r}; one would be lost (write another format)"
            )
        self._names.add(name)

    def add(self, name, t, source_dtype):
        self._check_name(name)
        array, changed, note = self.dense_array(name, t, source_dtype)
        array = _contiguous(array)
        try:
            with self._zip.open(name + ".npy", "w", force_zip64=True) as fp:
                np.lib.format.write_array(fp, array, allow_pickle=False)
        except OSError as exc:
            raise write_failure(exc, self.path) from None
        return _Out(str(array.dtype), array.nbytes, (lambda: array) if changed else None, note)

    def finish(self, metadata, report):
        _note_dropped(
            report, [k for k in metadata if not is_bookkeeping(k)], ".npz holds arrays only"
        )
        try:
            self._zip.close()  # writes the central directory
        except OSError as exc:
            raise write_failure(exc, self.path) from None

    def abort(self):
        try:
            if self._zip is not None:
                self._zip.close()
        except Exception:  # noqa: BLE001 - the file is removed next
            pass
        super().abort()
