"""numpy .npy files: one array, read memory-mapped."""

from __future__ import annotations

import math
import os
import sys

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
from ._target import WriteErrors, _DenseTarget, _note_dropped, _Out


def _check_npy_size(path: str) -> None:
    """ConversionError if the header of the .npy at `path` asks for more
    bytes than the file holds after it. np.load's memory map then failed
    with numpy's words ("mmap length is greater than file size", an
    OverflowError for a dimension past int64, overflow warnings for a
    shape whose product is). Python integers do the sum exactly. A file
    that is not a .npy is left to np.load to say so."""
    try:
        with open(path, "rb") as fp:
            header = read_npy_header(fp)
            if header is None:
                return
            shape, _, dtype = header
            held = os.fstat(fp.fileno()).st_size - fp.tell()
    except NUMPY_FILE_ERRORS as exc:
        if isinstance(exc, OSError) or str(exc).startswith("the magic string"):
            return  # np.load says it in its own words
        said = _first_line(exc)
        if said.startswith("malformed node"):  # ast's words, with an object's address
            said = "it is not a dict of Python literals"
        raise ConversionError(f"cannot read {path}: its .npy header is not valid: {said}") from None
    if dtype.hasobject:
        return  # refused by np.load (allow_pickle=False)
    need = math.prod(shape) * dtype.itemsize
    if need > held:
        raise ConversionError(
            f"cannot read {path}: its header says {shape} of {dtype}, {need} bytes, and the "
            f"file holds {held} after it (cut short, or a damaged header)"
        )
    if math.prod(n for n in shape if n) * max(dtype.itemsize, 1) > sys.maxsize:
        # numpy counts the bytes of a mapping in int64, zeros last
        raise ConversionError(
            f"cannot read {path}: its header's shape {shape} is too large for numpy to map"
        )


class _NpySource(_Source):
    format = "npy"

    def __init__(self, path: str):
        self.path = path
        _check_npy_size(path)
        try:
            self._array = np.load(path, mmap_mode="r", allow_pickle=False)
        except NUMPY_FILE_ERRORS as exc:  # a cut or empty file too (EOFError, TokenError)
            raise ConversionError(f"cannot read {path}: {_first_line(exc)}") from None
        if not isinstance(self._array, np.ndarray):  # np.load opens an .npz whatever its name
            if hasattr(self._array, "close"):
                self._array.close()
            raise ConversionError(
                f"cannot read {path}: it is an .npz archive, not a .npy array "
                "(name it *.npz to convert its arrays)"
            )
        # The tensor is named after the file. A name that is not UTF-8 (its
        # bytes held as surrogates) cannot name a tensor in any format: its
        # odd bytes are spelled out instead (b"w\xff.npy" holds "w\\xff").
        base = os.fsencode(os.path.basename(path)).decode("utf-8", "backslashreplace")
        self._name = base[:-4] if base.endswith(".npy") else base

    def names(self):
        return [self._name]

    def info(self, name):
        a = self._array
        return str(a.dtype), tuple(a.shape), int(a.nbytes)

    def get(self, name):
        return _from_numpy_checked(self._array, name)


class _NpyTarget(_DenseTarget):
    format = "npy"
    native = _NUMPY_NATIVE

    def __init__(self, path, options):
        super().__init__(path, options)
        self._array = None

    def add(self, name, t, source_dtype):
        if self._array is not None:
            raise ConversionError(
                f"{self.path}: a .npy file holds one array, and more than one "
                "tensor is selected (choose one with --include, or write .npz)"
            )
        array, changed, note = self.dense_array(name, t, source_dtype)
        self._array = _contiguous(array)
        return _Out(str(array.dtype), array.nbytes, (lambda: array) if changed else None, note)

    def finish(self, metadata, report):
        _note_dropped(
            report, [k for k in metadata if not is_bookkeeping(k)], ".npy holds one array only"
        )
        if self._array is None:
            raise ConversionError("no tensor selected; a .npy file holds exactly one")
        try:
            # Through a plain object with write(), not the file: numpy's
            # tofile for a real file reports a failed write without its
            # errno ("writing out.npy: None").
            sink = WriteErrors(self.tmp)
            with sink.file:
                np.lib.format.write_array(sink, self._array, allow_pickle=False)
        except OSError as exc:
            raise write_failure(exc, self.path) from None
