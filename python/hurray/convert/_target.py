"""The interface every target format implements, the temporary-file
discipline they share (write aside, publish by rename, remove on failure),
and the dense targets' common step (dequantize, densify, widen)."""

from __future__ import annotations

import errno
import os
import secrets
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Iterator, Optional, Sequence, Tuple

import numpy as np

from .. import _dtypes, _formats
from .._deferred import opened, signals_deferred
from .._descriptor import Composite, Dense
from .._hurray import HurrayError
from .._shown import counted
from .._tensor import Tensor
from ._common import (
    _ANY_FLOAT,
    FLOAT_DTYPES,
    ConversionError,
    _check_dense_written_size,
    _first_line,
    io_error,
    os_failure,
    write_failure,
)
from ._report import ConversionReport
from .layouts import describe

if TYPE_CHECKING:
    from ._driver import _Options


@dataclass
class _Out:
    """What a target made of one tensor: a label, the bytes it will write,
    and, when the values changed form (dequantized), the values written."""

    label: str
    nbytes: int
    values: Optional[Callable[[], np.ndarray]] = None
    note: str = ""


def _widen(dtype: str, native: Iterable[str]) -> Optional[str]:
    """The dtype a format without `dtype` gets instead (values exact), or
    None if there is none."""
    if dtype in native:
        return dtype
    if dtype == "int4":
        return "int8"
    if dtype == "uint4":
        return "uint8"
    if dtype in _ANY_FLOAT:
        return "float32"
    return None


class _Target:
    format = "?"

    def __init__(self, path: str, options: "_Options"):
        self.path = path
        self.options = options

    def check_scheme(self, scheme: Optional[str]) -> None:
        pass

    def quantizable(self, shape) -> Optional[str]:
        """None, or why a tensor of this shape cannot be stored quantized."""
        return None

    def add(self, name: str, t: Tensor, source_dtype: Optional[str]) -> _Out:
        raise NotImplementedError

    def finish(self, metadata: Dict[str, Any], report: ConversionReport) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        pass


_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _keep_mode(fd: int, path: str) -> None:
    """Gives the file open as `fd` the permission bits of the regular file
    `path` it will replace, as the C writer does (ADR-0015 addendum): a
    chmod 600 checkpoint must not come back readable by everyone. Best
    effort: a file only its owner can read is still a good file."""
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode):
            os.fchmod(fd, st.st_mode & 0o777)
    except OSError:
        pass


def _private_until_published(fd: int, path: str) -> None:
    """While it is written, the temporary file that will replace the regular
    file `path` gives no one more than `path` gives (a chmod 600 checkpoint's
    new bytes were readable by everyone until the rename), and its owner
    may write it (the writers open it again by name)."""
    try:
        st = os.stat(path)
        if stat.S_ISREG(st.st_mode):
            os.fchmod(fd, (st.st_mode & 0o777) | 0o600)
    except OSError:
        pass


def keep_mode(tmp: str, path: str) -> None:
    """_keep_mode for a file known by name."""
    try:
        with opened(tmp, os.O_RDONLY | _O_CLOEXEC) as fd:
            _keep_mode(fd, path)
    except OSError:
        return


class WriteErrors:
    """A file that writer libraries write through, keeping the OSError of a
    failed write (a full disk, a size limit), which torch.save reports
    without it and numpy's tofile loses the errno of."""

    def __init__(self, path: str):
        self.file = open(path, "wb")  # noqa: SIM115 - closed by the caller's with
        self.error = None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as exc:
            # A copy: the exception's traceback holds the writer's frames,
            # and torch's writer (which the collector cannot see into) holds
            # this sink, a cycle that kept a failed conversion's tensors.
            self.error = OSError(exc.errno, exc.strerror, exc.filename)
            raise

    def flush(self) -> None:
        self.file.flush()


TMP_STEM_BYTES = 100


def short_name(name: str, limit: int = TMP_STEM_BYTES) -> str:
    """`name` cut to at most `limit` bytes of its file-system encoding,
    between two characters. A temporary name adds some 30 bytes to the
    target's, and a target's name may itself be NAME_MAX (255) bytes long:
    the temporary file must not be the one name that is too long."""
    kept, size = [], 0
    for ch in name:
        try:
            size += len(os.fsencode(ch))
        except UnicodeError:  # a lone surrogate: no file name holds it anyway
            size += 4
        if size > limit:
            break
        kept.append(ch)
    return "".join(kept)


def _tmp_names(base: str) -> Iterator[str]:
    """Names for a new hidden temporary file beside the target named
    `base`: the process id and a random token, so that no one else's file
    has one."""
    stem, suffix = base, ""
    for s in (".npz", ".safetensors", ".gguf"):
        if base.endswith(s):
            stem, suffix = base[: -len(s)], s
            break
    stem = short_name(stem)
    while True:
        yield f".{stem}.{os.getpid()}-{secrets.token_hex(4)}.tmp{suffix}"


def _folder_failure(exc: OSError, folder: str) -> Exception:
    why = exc.strerror or _first_line(exc)
    return os_failure(exc, f"cannot write into the folder {folder}: {why}", folder)


def _make_tmp(name: str, folder_fd: int, folder: str, path: str) -> bool:
    """Creates `name` in the folder open as `folder_fd` (O_EXCL, mode 0666
    less the umask); False when the name is taken. It gets the mode of the
    file it replaces only when published (the writers open it again by
    name, which a read-only mode would refuse); until then, no wider one."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC
    try:
        # A failed close releases the descriptor all the same (Linux).
        with opened(name, flags, 0o666, dir_fd=folder_fd) as fd:
            _private_until_published(fd, path)
    except FileExistsError:
        return False
    except OSError as exc:
        raise _folder_failure(exc, folder) from None
    return True


def _open_folder(folder: str) -> int:
    """The folder as a descriptor to make, rename and remove files in. A
    folder its user may write and enter but not list (mode 0300, a drop
    box) cannot be opened for reading: O_PATH serves all of that, losing
    only the best-effort fsync of the folder."""
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _O_CLOEXEC)
    except PermissionError as exc:
        if not hasattr(os, "O_PATH"):
            raise _folder_failure(exc, folder) from None
    except OSError as exc:
        raise _folder_failure(exc, folder) from None
    try:
        return os.open(folder, os.O_PATH | os.O_DIRECTORY | _O_CLOEXEC)
    except OSError as exc:
        raise _folder_failure(exc, folder) from None


def _through(folder_fd: int, folder: str, name: str) -> str:
    """A path to `name` in the folder open as `folder_fd`, for the writer
    libraries, which take paths: through /proc/self/fd where there is one,
    so that it reaches that folder whatever happens to its name or to the
    working directory meanwhile (and stays short near PATH_MAX)."""
    proc = f"/proc/self/fd/{folder_fd}"
    return f"{proc}/{name}" if os.path.isdir(proc) else os.path.join(folder, name)


def _check_replaceable(path: str) -> None:
    """Refuses a target that is (or links to) a folder, FIFO, socket or
    device, as the C writer does: the rename would destroy it."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # nothing there (making the temporary file says what is wrong)
    if not stat.S_ISREG(mode):  # an OSError as save() raises it: EISDIR, else ENXIO
        raise io_error(
            f"{path} is not a regular file; a conversion replaces only a file",
            errno.EISDIR if stat.S_ISDIR(mode) else errno.ENXIO,
            path,
        )


class _FileTarget(_Target):
    """Every target is written into a temporary file in the target's folder
    (start), made durable and renamed over the destination only after
    everything succeeded (publish), and removed on any failure or signal
    (abort). The rename is the converter's own last step, so a signal that
    arrives while a writer library runs (which may not check for signals)
    raises before it, and the target stays untouched.

    The folder is held open from start to the end, and the temporary file
    is made, renamed and removed relative to it, as the C writer does: a
    folder renamed or moved mid-conversion still gets the finished file,
    and a failure still finds the temporary one to remove. The writer
    libraries reach the file through the same descriptor (_through)."""

    def __init__(self, path, options):
        super().__init__(path, options)
        self.tmp: Optional[str] = None  # its path, for the writer libraries
        self._tmp_name: Optional[str] = None  # its name in the folder
        self._folder_fd: Optional[int] = None
        self.published = False

    def start(self) -> None:
        _check_replaceable(self.path)
        # Relative as given: an absolute form may pass PATH_MAX where the
        # working directory is deep, and the descriptor pins the folder.
        folder, base = os.path.split(os.fspath(self.path))
        folder = folder or os.curdir
        with signals_deferred():  # no interrupt between the open and the store
            self._folder_fd = _open_folder(folder)
        # The name is recorded before the file exists: a Ctrl-C between
        # making it and recording it would leave it behind (abort() removes
        # what it names, quietly when nothing is there).
        for name in _tmp_names(base):
            self._tmp_name, self.tmp = name, _through(self._folder_fd, folder, name)
            if _make_tmp(name, self._folder_fd, folder, self.path):
                return
            self._tmp_name = self.tmp = None

    def publish(self) -> None:
        assert self._tmp_name is not None and self._folder_fd is not None
        folder_fd = self._folder_fd
        try:
            with opened(self._tmp_name, os.O_RDONLY | _O_CLOEXEC, dir_fd=folder_fd) as fd:
                if not os.path.samestat(os.stat(self.tmp), os.fstat(fd)):
                    # Without /proc the writers took a path, and the folder
                    # or the working directory changed under it: what they
                    # wrote is not the file in the folder held open.
                    raise ConversionError(
                        f"the folder of {self.path} was moved or replaced while the "
                        "conversion ran; nothing was published"
                    )
                _keep_mode(fd, self.path)
                os.fsync(fd)
            base = os.path.basename(os.fspath(self.path))
            os.replace(self._tmp_name, base, src_dir_fd=folder_fd, dst_dir_fd=folder_fd)
        except OSError as exc:
            raise write_failure(exc, self.path) from None
        self.published = True
        try:
            os.fsync(folder_fd)  # best effort: the target is complete either way
        except OSError:
            pass
        self._close_folder()

    def abort(self) -> None:
        if self._tmp_name is not None and not self.published and self._folder_fd is not None:
            # By name in the folder held open, and by the writers' path,
            # which leads elsewhere if the folder moved without /proc.
            for name, fd in ((self._tmp_name, self._folder_fd), (self.tmp, None)):
                try:
                    os.unlink(name, dir_fd=fd)
                except OSError:
                    pass
        self._close_folder()

    def _close_folder(self) -> None:
        fd, self._folder_fd = self._folder_fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass


class _DenseTarget(_FileTarget):
    """safetensors, torch, npz, npy: dense arrays only. Quantized tensors
    are dequantized to the dtype they had before quantization (float32 if
    unknown); dtypes the format lacks are widened exactly."""

    native: Tuple[str, ...] = ()
    _origin: Dict[str, str]  # written name -> what it holds, for errors; set by subclasses

    def _claim(self, name: str, origin: Optional[str]) -> None:
        """Written name `name` for `origin` ("tensor <name>" unless said);
        ConversionError where an earlier tensor has it: one would be lost."""
        origin = origin or f"tensor {name!r}"
        if name in self._origin:
            raise ConversionError(
                f"{origin} and {self._origin[name]} would both be written as "
                f"{self.format} tensor {name!r}; one would be lost"
            )
        self._origin[name] = origin

    def dense_array(self, name: str, t: Tensor, source_dtype: Optional[str]):
        d = t.descriptor
        if isinstance(d.layout, Composite):
            raise ConversionError(
                f"tensor {name!r} is a composite tensor; only .hurray files "
                f"hold those, {self.format} has no form for it"
            )
        note = ""
        if d.quantization is not None:
            out_dtype = source_dtype if source_dtype in FLOAT_DTYPES else "float32"
            wide = _widen(out_dtype, self.native)
            if wide != out_dtype:
                note = f"{self.format} has no {out_dtype}: written as {wide}"
            threads = self.options.threads
            array = t.dequantize(_dtypes.to_numpy(wide), threads=threads)
            return array, True, ("dequantized" + (f"; {note}" if note else ""))
        if not isinstance(d.layout, Dense):
            array = t.to_dense()
            note = f"{describe(d).split(' ')[-1].strip('()')} densified"
        else:
            _check_dense_written_size(t)
            array = t.codes()
        if d.dtype == "bool":
            _check_bools(name, array)
        wide = _widen(d.dtype, self.native)
        if wide is None:
            raise ConversionError(
                f"tensor {name!r} has dtype {d.dtype}, which {self.format} "
                "cannot hold; convert to .hurray instead"
            )
        if wide != d.dtype:
            array = array.astype(_dtypes.to_numpy(wide))
            note = (
                note + "; " if note else ""
            ) + f"{self.format} has no {d.dtype}: written as {wide} (exact)"
        return array, False, note


def _check_bools(name: str, array: np.ndarray) -> None:
    """The .hurray and safetensors writers' refusal, from C, for the targets
    numpy and torch write: a bool stored as 2 went through to .npz, .npy and
    .pt, and a conversion back refused it."""
    try:
        _formats.check_bools(name, np.ascontiguousarray(array).reshape(-1).view(np.uint8))
    except HurrayError as exc:
        raise ConversionError(str(exc)) from None


def dropped_note(keys: Sequence[str], why: str) -> str:
    """The report's line for metadata keys a conversion leaves behind (the
    C command prints the same)."""
    shown = ", ".join(sorted(keys)[:3]) + (f" (+{len(keys) - 3} more)" if len(keys) > 3 else "")
    return f"{counted(len(keys), 'metadata key')} not carried ({why}): {shown}"


def _note_dropped(report: ConversionReport, keys: Sequence[str], why: str) -> None:
    if keys:
        report.notes.append(dropped_note(keys, why))
