"""save, load and open: hurray files from Python."""

from __future__ import annotations

import contextlib
import gc
import io
import numbers
import operator
import os
import stat
import threading
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import numpy as np

from . import _dtypes, _hooks, _hurray, _remote
from ._deferred import opened
from ._descriptor import Descriptor
from ._shown import counted
from ._sparse import SparseTensor
from ._tensor import Tensor, from_hurray, from_numpy, specialise

# numpy dtype -> hurray dtype name for the arrays save() hands to C as they
# are (None: the dtype goes through a Tensor). Filled on first sight of each
# dtype: a dict lookup is the whole per-array Python cost of the fast path.
_PLAIN_DTYPES: dict = {}


if hasattr(os, "register_at_fork"):  # a child re-makes File locks a vanished thread held
    os.register_at_fork(after_in_child=_hurray._after_fork_in_child)


def _plain_dtype(dtype) -> Optional[str]:
    try:
        return _PLAIN_DTYPES[dtype]
    except KeyError:
        pass
    name = None
    if dtype.byteorder != ">":
        name = _dtypes.name_of(dtype)
        if name is not None and _dtypes.is_packed(name):
            name = None
    _PLAIN_DTYPES[dtype] = name
    return name


# The collector is paused while save builds its items, and given back as
# the first of the overlapping saves found it: each save switching it off
# and back on by itself turned it on under another thread's save, or
# left it off for good.
# Reentrant: a signal handler that saves (a checkpoint on SIGTERM) may run
# on the main thread while a save there holds it.
_PAUSE_LOCK = threading.RLock()
_resume = False
# The saves in progress, per thread: a forked child keeps one thread's.
_pauses_by_thread: Dict[int, int] = {}


def _pauses() -> int:
    return sum(_pauses_by_thread.values())


@contextlib.contextmanager
def _collections_paused() -> Iterator[None]:
    global _resume
    # Counted before acting on the way in, and after on the way out: a save
    # in a signal handler that runs between the two steps (same thread, so
    # the lock lets it in) then nests inside this one instead of taking the
    # paused collector for the application's choice.
    me = threading.get_ident()
    with _PAUSE_LOCK:
        _pauses_by_thread[me] = _pauses_by_thread.get(me, 0) + 1
        if _pauses() == 1:
            _resume = gc.isenabled()
            gc.disable()
    try:
        yield
    finally:
        with _PAUSE_LOCK:
            if _pauses() == 1 and _resume:
                gc.enable()
            _pauses_by_thread[me] -= 1
            if not _pauses_by_thread[me]:
                del _pauses_by_thread[me]


def _collections_after_fork() -> None:
    """A child forked while another thread's save paused the collector kept
    it off for good: that thread, which would give it back, is not in the
    child. Only the forking thread's own pauses are kept, and the lock,
    which a vanished thread may hold, is made anew."""
    global _PAUSE_LOCK
    _PAUSE_LOCK = threading.RLock()
    me = threading.get_ident()
    mine = _pauses_by_thread.get(me, 0)
    if not mine and _pauses() and _resume:
        gc.enable()
    _pauses_by_thread.clear()
    if mine:
        _pauses_by_thread[me] = mine


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_collections_after_fork)


def _plain_or_tensor(value: Any):
    """A numpy array of a byte-sized, little-endian dtype travels to the
    writer as (dtype name, array): C takes its shape and bytes from the
    buffer protocol and builds its descriptor, and every such array of a
    save goes out in one C call (hurray_writer_write_dense_batch), which
    saves the per-tensor Python work that dominates files of many small
    tensors. The address does not matter: the file records the dtype's
    natural alignment, never where the data sat."""
    if type(value) is np.ndarray:
        name = _plain_dtype(value.dtype)
        if name is not None:
            if not value.flags.c_contiguous:
                value = np.ascontiguousarray(value)
            return (name, value)
    return as_tensor(value)


def tensor_names(names) -> list:
    """get_tensors' names as a list: one str (or bytes) is a TypeError, not
    its characters."""
    if isinstance(names, (str, bytes)):
        raise TypeError(f"get_tensors takes an iterable of names, not one {type(names).__name__}")
    return list(names)


def as_tensor(value: Any) -> Tensor:
    """Tensor, anything with __hurray__, numpy arrays, scipy.sparse
    matrices and torch tensors."""
    if isinstance(value, Tensor):
        return specialise(value)  # a plain Tensor of a sparse layout: a SparseTensor
    if hasattr(value, "__hurray__"):
        return from_hurray(value)
    if _hooks.is_torch_tensor(value):
        return _hooks.torch("from_torch")(value)
    if type(value).__module__.startswith("scipy.sparse"):
        return SparseTensor.from_scipy(value)
    return from_numpy(np.asarray(value))


def _file_fd(target) -> Optional[int]:
    """The descriptor of a stream that writes straight to a file, else None.
    Only the exact io classes qualify: a compressor (gzip, bz2, lzma), a
    subclass or a wrapper may have fileno() but transform what write() gets,
    and writing to the fd would bypass it."""
    raw = target
    if type(target) in (io.BufferedWriter, io.BufferedRandom):
        raw = target.raw
    if type(raw) is not io.FileIO:
        return None
    try:
        return target.fileno()
    except (OSError, ValueError):
        return None


def _tensor_name(name: Any) -> str:
    if not isinstance(name, str):
        raise TypeError(f"tensor names must be str, not {type(name).__name__} ({name!r})")
    return name


def _metadata_value(key: Any, value: Any) -> Any:
    """numpy scalars become the Python value they hold (exactly, or a
    TypeError); the C layer takes str, int, float, bool and bytes-like."""
    if not isinstance(key, str):
        raise TypeError(f"metadata keys must be str, not {type(key).__name__} ({key!r})")
    if isinstance(value, np.ndarray):
        raise TypeError(
            f"metadata {key!r}: a numpy array is not a metadata value; "
            "use .item() for a scalar or .tobytes() for raw bytes"
        )
    if isinstance(value, np.generic):
        if isinstance(value, (np.str_, np.bytes_)):
            return value
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, np.integer):
            if not -(2**63) <= int(value) < 2**63:  # np.uint64 past int64
                raise TypeError(
                    f"metadata {key!r}: {type(value).__name__} {value} has no int64 value "
                    "(metadata integers are int64)"
                )
            return int(value)
        if isinstance(value, np.floating):
            out = float(value)
            if not (np.isnan(value) or type(value)(out) == value):
                raise TypeError(
                    f"metadata {key!r}: {type(value).__name__} {value!r} has no exact float64 value"
                )
            return out
        raise TypeError(
            f"metadata {key!r}: values are str, int, float, bool or bytes, "
            f"not {type(value).__name__}"
        )
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        # C would say only "int too big to convert", naming no key.
        raise OverflowError(f"metadata {key!r}: {value} does not fit a 64-bit signed integer")
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, numbers.Number):  # Decimal, Fraction, complex: not stored exactly
        raise TypeError(
            f"metadata {key!r}: values are str, int, float, bool or bytes, "
            f"not {type(value).__name__}"
        )
    return value


def save(
    target,
    tensors: Mapping[str, Any],
    metadata: Optional[Mapping[str, Any]] = None,
    *,
    statistics: bool = False,
) -> None:
    """Writes every buffer of every tensor. `target` is a path (written
    atomically: temp file, fsync, rename), an int file descriptor, or a
    binary stream with write() (written sequentially, never seeked).
    Metadata values may be str, int, float, bool or bytes. With
    statistics=True, min, max, NaN count and zero count are computed in one
    C pass per tensor (where its kind allows) and stored in its descriptor.
    A path naming a folder, FIFO, socket or device is refused; a replaced
    file keeps its permission bits; a symbolic link is itself replaced. To
    a descriptor or a stream with a fileno() (a subclass or compressor
    too), a tensor mapped from that same file is refused: save it to the
    path instead. A non-blocking raw stream raises BlockingIOError."""
    # Two tuples a tensor and no cycle among them: with a million tensors,
    # collections scanning them again and again cost more than building them.
    if not callable(getattr(tensors, "items", None)):  # duck-typed, as items() is all we use
        raise TypeError(
            f"tensors must be a mapping of names to tensors, not {type(tensors).__name__}"
        )
    pairs = list(tensors.items())  # once: a lazy mapping builds each value once
    stream = target  # a file object given inline lives, and its descriptor stays open, to the end
    if isinstance(target, (str, bytes, os.PathLike)):
        target = os.fspath(target)
    else:
        fd = _file_fd(target)
        if fd is not None:
            target.flush()  # Python's buffer first, then ours, in order
            target = fd
    refuse_mapped_sources(target, pairs)
    with _collections_paused():
        items = [(_tensor_name(name), _plain_or_tensor(value)) for name, value in pairs]
    if metadata is not None:
        if not callable(getattr(metadata, "items", None)):
            raise TypeError(f"metadata must be a mapping, not {type(metadata).__name__}")
        checked = {}
        for k, v in metadata.items():  # a mapping's items() may repeat a key
            value = _metadata_value(k, v)
            if k in checked:  # as a repeated tensor name is
                raise _hurray._error("HURRAY_ERR_DUPLICATE_NAME", f"metadata key {k!r} given twice")
            checked[k] = value
        metadata = checked
    if not isinstance(target, (str, int)):
        _refuse_streamed_from_its_file(target, items)
    _hurray.save(target, items, metadata, statistics)
    del stream


def _refuse_streamed_from_its_file(stream, items) -> None:
    """Through write(), the C writer cannot see where the bytes go: a
    tensor mapped from the file that a subclass of FileIO, or a compressor
    over it, truncated at open is refused here (its bytes are gone: SIGBUS)."""
    fd = _written_file(stream)
    if fd is not None:
        _hurray._check_not_mapped_from(fd, lambda: list(_item_spans(items)))


def _item_spans(items):
    for name, value in items:
        buffers = (value[1],) if isinstance(value, tuple) else value.buffers
        for b in buffers:
            a = np.frombuffer(b, np.uint8) if not isinstance(b, np.ndarray) else b
            if a.size:
                yield (name, *_array_span(a))


def refuse_mapped_sources(target, pairs) -> None:
    """Refuses (InvalidArgumentError), before any of them is read, values of
    `pairs` whose memory is mapped from the regular file that `target` (a
    descriptor or a plain file object) writes: the copy Python makes of a
    strided or sparse value would read pages that the write truncates
    (SIGBUS). Any stream with a fileno() counts, a subclass or a compressor
    too: opening its file truncated it whatever writes to it. Paths and
    streams without a file pass: nothing truncates what is read."""
    fd = _written_file(target)
    if fd is not None:
        _hurray._check_not_mapped_from(fd, lambda: list(_copied_spans(pairs)))


def _written_file(target) -> Optional[int]:
    """The descriptor of the regular file `target` (a descriptor, or any
    stream with a fileno()) writes into, else None (a path, a pipe, a
    stream without a file)."""
    if isinstance(target, (str, bytes, os.PathLike)):
        return None
    fd = target
    if not isinstance(fd, int):
        try:
            fd = target.fileno()
        except Exception:  # noqa: BLE001 - no usable descriptor: nothing to check
            return None
    if not isinstance(fd, int) or isinstance(fd, bool):
        return None
    return fd if _is_regular_file(fd) else None


def _is_regular_file(fd: int) -> bool:
    try:
        return stat.S_ISREG(os.fstat(fd).st_mode)
    except (OSError, OverflowError):
        return False  # the writer says what is wrong with it


def _array_span(a: np.ndarray) -> Tuple[int, int]:
    """(address, length) of the memory an array's elements lie in."""
    low = high = a.__array_interface__["data"][0]
    for n, stride in zip(a.shape, a.strides):
        if stride < 0:
            low += stride * (n - 1)
        else:
            high += stride * (n - 1)
    return low, high + a.itemsize - low


def _copied_spans(pairs):
    """(name, address, length) of the memory of each value that is read in
    Python before the writer sees it, so the writer cannot check it first:
    a non-contiguous or byte-swapped array, a torch tensor (its whole
    storage; a sparse one's parts), a scipy.sparse matrix's arrays. A list
    of arrays is not looked into."""
    for name, value in pairs:
        if not isinstance(name, str):
            continue  # refused with its reason when the items are built
        if isinstance(value, np.ndarray):
            if value.size and not (value.flags.c_contiguous and _plain_dtype(value.dtype)):
                yield (name, *_array_span(value))
            continue
        module = type(value).__module__
        if module.startswith("scipy.sparse"):
            for part in ("data", "indices", "indptr", "row", "col"):
                a = getattr(value, part, None)
                if isinstance(a, np.ndarray) and a.size:
                    yield (name, *_array_span(a))
        elif _hooks.is_torch_tensor(value) and getattr(value, "is_cpu", False):
            for span in _hooks.torch("storage_spans")(value):
                yield (name, *span)


def fsync_dir(folder: str) -> None:
    """Makes a rename in `folder` durable, best effort: the renamed file is
    complete either way (the converter and the DCP writer share it)."""
    try:  # a failed fsync or close is past the rename: nothing to report
        with opened(folder, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)) as fd:
            os.fsync(fd)
    except OSError:
        pass


class File:
    """A lazy reader: nothing but the index is read until a tensor is asked
    for. Tensors taken from it stay valid after close()."""

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        mmap: bool = True,
        verify: bool = False,
        readonly: bool = False,
    ):
        # A FIFO, socket or device is refused by the C reader, which opens
        # without blocking, with its errno (ENXIO) and the path.
        path = os.fspath(path)  # once: a PathLike may answer differently each time
        self._file = _hurray._File(path, mmap, verify, readonly)
        # Per-tensor lookups go straight to C: the Python frame of the
        # methods below cost as much as the lookup itself (issue 19).
        self.shape = self._file.shape
        self.dtype = self._file.dtype
        self.path = path
        self.readonly = bool(readonly)

    def keys(self) -> list:
        return self._file.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, name: object) -> bool:
        try:
            self._file._descriptor(name)
            return True
        except (_hurray.NotFoundError, TypeError):
            return False
        except ValueError:
            if self._file.closed:  # as every other use of a closed file
                raise
            return False  # a NUL in the name

    @property
    def metadata(self) -> dict:
        return self._file._metadata()

    def __getitem__(self, name: str) -> Tensor:
        return specialise(self._file._get(name))

    def get(self, name: str, default=None):
        try:
            return self[name]
        except _hurray.NotFoundError:
            return default

    def descriptor(self, name: str) -> Descriptor:
        """The descriptor alone; touches no data."""
        return Descriptor.decode(self._file._descriptor(name))

    def shape(self, name: str) -> tuple:
        """The logical shape of `name`, read from the index alone (no
        Descriptor object is built: cheap enough to call per tensor)."""
        return self._file.shape(name)

    def dtype(self, name: str) -> str:
        """The dtype name of `name` (the codes' dtype if quantized)."""
        return self._file.dtype(name)

    def get_slice(self, name: str, start: int, stop: int) -> Tensor:
        """Rows [start, stop) along dimension 0 of a dense tensor, reading
        only those bytes; IndexError for a row past the end."""
        start, stop = operator.index(start), operator.index(stop)
        if start < 0 or stop < 0:
            raise IndexError(f"rows count from 0, not [{start}, {stop})")
        shape = self._file.shape(name)
        if shape and max(start, stop) > shape[0]:  # C's RANGE would read as a bad file
            raise IndexError(f"rows [{start}, {stop}) of {name!r}: it has {shape[0]} rows")
        return self._file._get_rows(name, start, max(stop - start, 0))

    def read_buffer(self, name: str, index: int, out=None):
        """Buffer `index` of `name` read with pread into `out` (any writable
        buffer at least that large), or into a new bytearray."""
        if out is None:
            buffers = self.descriptor(name).buffers
            i = operator.index(index)
            if not 0 <= i < len(buffers):  # buffers[-1] would read the last one's size
                raise IndexError(f"tensor {name!r} has {len(buffers)} buffers, not a buffer {i}")
            out = bytearray(buffers[i].byte_size)
        self._file._read_buffer(name, index, out)
        return out

    def populate(self, threads: int = 1) -> None:
        """Faults in every page of the file's tensor data now, in one call
        per thread (MADV_POPULATE_READ), so that reading the tensors later
        takes no page faults; pages stay shared with the page cache. With
        mmap=False it only advises the kernel to read ahead."""
        self._file._populate(threads)

    def cached_fraction(self) -> float:
        """The share (0 to 1) of the file's tensor data in the page cache now
        (cachestat, else mincore; reads nothing)."""
        return self._file._cached_fraction()

    def verify(self, name: Optional[str] = None) -> None:
        """Checks one tensor, or the whole file: every checksum (ChecksumError
        names the first mismatch), then every step a read of each tensor
        takes (its descriptor and buffer placement), so that a file that
        verifies can be read whole."""
        self._file.verify(name)

    def get_tensors(self, names) -> dict:
        """{name: tensor} for every name; a remote file fetches them in
        parallel (hurray.open of a URL)."""
        return {name: self[name] for name in tensor_names(names)}

    def close(self) -> None:
        self._file.close()

    @property
    def closed(self) -> bool:
        return self._file.closed

    def __reduce_ex__(self, protocol):
        raise TypeError("a hurray.File cannot be copied or pickled; open the path again")

    def __enter__(self) -> "File":
        if self.closed:  # as `with` on a closed Python file
            raise ValueError("I/O operation on a closed hurray file")
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self):
        state = "closed" if self.closed else counted(len(self), "tensor")
        return f"<hurray.File {self.path!r} ({state})>"


def open(
    path: str | os.PathLike,
    *,
    mmap: bool = True,
    verify: bool = False,
    readonly: bool = False,
    **remote,
) -> File:
    """A lazy reader (see File and load for mmap and readonly). A URL
    (https://, http://, or any fsspec URL such as s3:// or memory://) is
    read with range requests: see hurray.RemoteFile for the `remote`
    options (verify_reads, threads, timeout, retries, suffix_bytes,
    headers, storage_options)."""
    if _remote.is_url(path):
        from ._remote_file import RemoteFile

        return RemoteFile(path, verify=verify, **remote)
    if remote:
        raise TypeError(
            f"open() got unexpected keyword arguments {sorted(remote)} for a local file "
            "(options beyond mmap, verify and readonly are for URLs: see hurray.RemoteFile)"
        )
    return File(path, mmap=mmap, verify=verify, readonly=readonly)


def load(
    path: str | os.PathLike,
    *,
    mmap: bool = True,
    verify: bool = False,
    readonly: bool = False,
    **remote,
) -> dict:
    """Every tensor; placement is validated before any is returned.

    mmap=True (default): zero-copy views of a private, copy-on-write mapping
    of the file. They may be written: a write copies the page it lands on
    into this process's memory and never reaches the file. mmap=False reads
    every buffer into memory of its own (pread).
    readonly=True: a shared read-only mapping instead; the views say so
    (numpy writeable=False, the DLPack read-only flag), and numpy refuses
    writes with ValueError. docs/impl/python-bindings.md ("Memory")."""
    with open(path, mmap=mmap, verify=verify, readonly=readonly, **remote) as f:
        if type(f) is File:  # every tensor in one C call; a RemoteFile fetches in parallel
            # The collector is left alone: the tensors are not tracked by it
            # (hy_tensor_alloc), so it has nothing of theirs to scan.
            tensors, special = f._file._get_all()
            for name in special:
                tensors[name] = specialise(tensors[name])
            return tensors
        return f.get_tensors(f.keys())
