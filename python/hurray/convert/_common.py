"""What every part of the converter shares: the errors, the suffixes and
metadata keys, and small helpers on tensors and paths."""

from __future__ import annotations

import errno
import json
import os
import stat
import tokenize
import zipfile
import zlib
from typing import Any, Dict, Optional

import numpy as np

from .. import _dtypes, _formats, _hurray
from .._descriptor import Dense, Descriptor
from .._tensor import DEFAULT_OUTPUT_LIMIT, Tensor, from_numpy

SOURCE_SUFFIXES = (
    ".safetensors",
    ".safetensors.index.json",
    ".gguf",
    ".npz",
    ".npy",
    ".pt",
    ".pth",
    ".bin",
    ".hurray",
)
TARGET_SUFFIXES = (".hurray", ".safetensors", ".gguf", ".npz", ".npy", ".pt", ".pth", ".bin")

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
_ANY_FLOAT = FLOAT_DTYPES + tuple(
    n for n in _dtypes.ML_DTYPES if n.startswith("float") and n not in FLOAT_DTYPES
)

# The converter's own metadata keys (include/hurray/convert.h names and
# describes them): a target uses or drops them, and they are never the
# user's metadata "not carried" (is_bookkeeping).
SOURCE_DTYPES_KEY = _formats.META_SOURCE_DTYPES
GGUF_TYPES_KEY = _formats.META_GGUF_TYPES
GGUF_TENSORS_KEY = _formats.META_GGUF_TENSORS
SAFETENSORS_INDEX_KEY = _formats.META_SAFETENSORS_INDEX
is_bookkeeping = _formats.is_bookkeeping

# What numpy raises reading a broken .npy (alone or in an .npz): its header
# is parsed as Python text (tokenize, ast), so a cut one is a TokenError or
# SyntaxError, an empty file an EOFError.
NUMPY_FILE_ERRORS = (
    ValueError,
    OSError,
    EOFError,
    SyntaxError,
    tokenize.TokenError,
    zipfile.BadZipFile,
    zlib.error,
    NotImplementedError,
)


def read_npy_header(fp):
    """(shape, fortran_order, dtype) from the .npy header at fp's position,
    leaving fp after it; None for a format version numpy does not define.
    Raises what NUMPY_FILE_ERRORS lists for a broken one."""
    version = np.lib.format.read_magic(fp)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(fp)
    if version in ((2, 0), (3, 0)):
        # 3.0 is 2.0 with a UTF-8 header; outside a structured dtype's
        # field names it is ASCII, read alike as Latin-1.
        return np.lib.format.read_array_header_2_0(fp)
    return None


class ConversionError(_hurray.HurrayError):
    """A conversion that cannot be done; the message is one line and says
    what is not supported and why."""

    # A HurrayError, so that one `except hurray.HurrayError` covers convert();
    # C raises nothing here, so the status is the nearest one for "cannot".
    status = _hurray.STATUS["HURRAY_ERR_UNSUPPORTED"]
    status_name = "HURRAY_ERR_UNSUPPORTED"


class ConversionIOError(ConversionError, OSError):
    """A conversion that failed on the file system (a missing source, a
    folder that cannot be written, a full disk). Also an OSError with errno,
    strerror and filename, and the builtin OSError subclass its errno maps
    to (a missing source is a ConversionIOError and a FileNotFoundError), as
    hurray.HurrayIOError is; str() is the one-line message."""

    status = _hurray.STATUS["HURRAY_ERR_IO"]
    status_name = "HURRAY_ERR_IO"
    message: Optional[str] = None

    def __str__(self) -> str:
        return self.message if self.message is not None else OSError.__str__(self)


# builtin OSError subclass -> its ConversionIOError twin, made once each, as
# the C extension makes HurrayIOError's (os_class in _guard.c)
_IO_CLASSES: Dict[type, type] = {}


def _io_class(errno_: Optional[int]) -> type:
    builtin = type(OSError(errno_, "")) if errno_ else OSError
    if builtin is OSError:
        return ConversionIOError
    cls = _IO_CLASSES.get(builtin)
    if cls is None:
        doc = "A ConversionIOError that is also the builtin OSError subclass its errno maps to."
        cls = type(f"Conversion{builtin.__name__}", (ConversionIOError, builtin), {"__doc__": doc})
        cls.__module__ = "hurray"
        _IO_CLASSES[builtin] = cls
    return cls


def io_error(message: str, errno_: Optional[int], filename: Optional[str] = None):
    """The ConversionIOError (of the class errno_ maps to) saying `message`."""
    cls = _io_class(errno_)
    if errno_:
        exc = (
            cls(errno_, os.strerror(errno_), filename)
            if filename
            else cls(errno_, os.strerror(errno_))
        )
    else:
        exc = cls(message)
    exc.message = message
    return exc


def not_io(exc: BaseException) -> bool:
    """True for an OSError that no system call made (errno None, and not one
    of hurray's): the TimeoutError or OSError of the caller's own signal
    handler (signal.alarm), raised while the conversion ran."""
    return (
        isinstance(exc, OSError) and exc.errno is None and not isinstance(exc, _hurray.HurrayError)
    )


def os_failure(exc: OSError, message: str, filename: Optional[str] = None) -> OSError:
    """io_error for the OSError (or hurray.HurrayIOError) `exc`; `exc` itself
    when not_io, so that the caller's own exception is raised unchanged
    instead of being reported as a failure to read SRC or write DST."""
    if not_io(exc):
        return exc
    return io_error(message, exc.errno, filename or exc.filename)


def read_descriptor(f, path: str, name: str) -> Descriptor:
    """Tensor `name`'s descriptor from the hurray file `f` at `path`; a
    damaged one is a ConversionError naming the file and the tensor (the
    reader's message says what, not where)."""
    try:
        return f.descriptor(name)
    except OSError as exc:
        raise os_failure(exc, f"cannot read {path}: {_first_line(exc)}") from None
    except _hurray.HurrayError as exc:
        raise ConversionError(f"{path}: tensor {name!r}: {_first_line(exc)}") from None


def write_failure(exc: OSError, path) -> OSError:
    """os_failure for a failed write of the target `path`, with the system's
    reason alone: the writer's own message names the temporary file it was
    given (a /proc/self/fd/N/... path that means nothing to the user)."""
    reason = os.strerror(exc.errno) if exc.errno else _first_line(exc)
    return os_failure(exc, f"writing {path}: {reason}", path)


class UsageError(ConversionError):
    """Options that do not fit together (the CLI exits with status 2)."""

    status = _hurray.STATUS["HURRAY_ERR_INVALID_ARGUMENT"]
    status_name = "HURRAY_ERR_INVALID_ARGUMENT"


def _shape_str(shape) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def _stored_bytes(d: Descriptor) -> int:
    return sum(b.byte_size for b in d.buffers)


class _ExpansionBudget:
    """What one conversion may write beyond the output limit's ratio. Each
    tensor is held to max(64 MiB, 64 x its stored bytes) when it is
    densified or dequantized; without a budget across tensors, a file of a
    thousand bytes holding N stride-0 tensors became N x 64 MiB in memory
    (safetensors and GGUF targets keep every tensor until the end). The
    excess of each tensor over 64 x its stored bytes is charged here, and
    all of them together get the 64 MiB floor once (the C library's
    HURRAY_DEFAULT_* limits, as to_dense applies them to one tensor)."""

    def __init__(self):
        self.used = 0

    def charge(self, name: str, d: Descriptor, written_bytes: int) -> None:
        self.charge_bytes(name, written_bytes, _stored_bytes(d))

    def charge_bytes(self, name: str, written_bytes: int, stored_bytes: int) -> None:
        excess = written_bytes - _hurray.DEFAULT_MAX_EXPANSION * stored_bytes
        if excess <= 0 or written_bytes > _hurray.DEFAULT_EXPANSION_FLOOR_BYTES:
            return  # within the ratio; or past a tensor's own limit, which refuses it
        self.used += excess
        if self.used > _hurray.DEFAULT_EXPANSION_FLOOR_BYTES:
            raise ConversionError(
                f"tensor {name!r}: the tensors up to it write {self.used} bytes more than "
                f"{_hurray.DEFAULT_MAX_EXPANSION}x what they store, past the "
                f"{_hurray.DEFAULT_EXPANSION_FLOOR_BYTES} bytes one conversion allows: the "
                "source describes far more than it holds (densify such tensors with "
                "to_dense and an explicit max_output_bytes instead)"
            )


def _aligned(nbytes: int, align: int = 64) -> np.ndarray:
    raw: np.ndarray = np.empty(nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    # Not raw[off:off + nbytes]: an empty slice of it points at raw's
    # start, and a 0-byte buffer of an empty tensor failed its alignment.
    return np.ndarray((nbytes,), np.uint8, buffer=raw, offset=off)


def _contiguous(array) -> np.ndarray:
    """Row-major, keeping a 0-d array 0-d (np.ascontiguousarray makes it 1-d)."""
    a = np.asarray(array)
    return a if a.flags.c_contiguous else a.copy(order="C")


def _check_dense_written_size(t: Tensor) -> None:
    """LimitError if writing a dense tensor out row-major takes more than
    the output limit allows for the bytes it stores: strides (a stride of
    0 repeats one stored element) let a file of a few hundred bytes
    describe gigabytes, which to_dense() refuses too."""
    d = t.descriptor
    t._check_output(_dtypes.storage_bytes(d.dtype, d.numel), DEFAULT_OUTPUT_LIMIT)


def _values(t: Tensor, threads: int) -> np.ndarray:
    """The real values of a tensor: dequantized (float32) if quantized,
    densified if sparse or paged, a zero-copy view if dense."""
    d = t.descriptor
    if d.quantization is not None:
        return t.dequantize(np.float32, threads=threads)
    if isinstance(d.layout, Dense):
        _check_dense_written_size(t)
        return t.numpy()
    return t.to_dense()


def _from_numpy_checked(a: np.ndarray, name: str) -> Tensor:
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    try:
        return from_numpy(a)
    except ValueError as exc:
        raise ConversionError(f"array {name!r} of dtype {a.dtype}: {_first_line(exc)}") from None


_JSON_KINDS = {dict: "object", list: "array", str: "string"}


def owned_json(text: Any, what: str, kind: type) -> Any:
    """The value of the JSON text `text` of a metadata key the converter
    owns, which `what` names in errors ("SRC: metadata 'zoo.tensors'");
    ConversionError unless it is JSON of type `kind` (dict, list or str).
    The text comes from a file, so it can be anything: not JSON, nested
    past Python's recursion limit (which json.loads meets as RecursionError),
    or another type that the caller's .get() or iteration would trip on."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ConversionError(f"{what} is not valid JSON: nested too deeply") from None
    except (TypeError, ValueError) as exc:
        raise ConversionError(f"{what} is not valid JSON: {_first_line(exc)}") from None
    if not isinstance(value, kind):
        raise ConversionError(f"{what} is not a JSON {_JSON_KINDS[kind]}")
    return value


def _regular_file(path: str, what: str = "") -> None:
    """Refuses what is not a regular file (a FIFO would block the read forever)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise os_failure(exc, f"{what}{path}: {exc.strerror or _first_line(exc)}", path) from None
    if stat.S_ISDIR(mode):
        raise io_error(f"{what}{path} is not a regular file", errno.EISDIR, path)
    if not stat.S_ISREG(mode):  # ENXIO, as hurray.open and a special-file target say
        raise io_error(f"{what}{path} is not a regular file", errno.ENXIO, path)


_NUMPY_NATIVE = _dtypes.NUMPY_NATIVE
