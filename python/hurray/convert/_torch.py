"""torch state dicts (.pt, .pth, .bin): read with torch.load(weights_only=True),
written with torch.save. The only formats that need torch."""

from __future__ import annotations

import io
import os
import pickle
import warnings
import zipfile
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from .. import _dtypes
from .._deferred import signals_deferred
from .._descriptor import Dense
from .._hurray import HurrayError
from .._tensor import from_numpy
from ._common import (
    ConversionError,
    _contiguous,
    _first_line,
    is_bookkeeping,
    os_failure,
    write_failure,
)
from ._source import _Source
from ._target import WriteErrors, _DenseTarget, _note_dropped, _Out


class _Inert:
    """What _StorageScan builds for every global: it accepts what the
    pickle does to an object and runs nothing."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Inert()

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, value):
        pass

    def extend(self, values):
        pass


class _StorageScan(pickle.Unpickler):
    """The storages a checkpoint's data.pkl names, as (key, storage type,
    element count), read without building any object of the file's."""

    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self.storages: List[Tuple[str, Any, int]] = []

    def find_class(self, module, name):
        return _Global(module, name)

    def persistent_load(self, pid):
        if isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage":
            # Not str() of whatever the file put there: a tuple nested in
            # itself through the memo stood for 10^8 strings in 1 KB.
            key = pid[2] if isinstance(pid[2], str) else None
            self.storages.append((key, pid[1], pid[4]))
        return _Inert()


class _Global(_Inert):
    def __init__(self, module, name):
        self.module, self.name = module, name


def _storage_dtype(torch, kind):
    """The dtype of a storage class the pickle names (torch.FloatStorage,
    torch.cuda.HalfStorage, torch.storage.UntypedStorage, ...), or None."""
    if not isinstance(kind, _Global) or not kind.name.endswith("Storage"):
        return None
    if kind.module != "torch" and not kind.module.startswith("torch."):
        return None
    if kind.name == "UntypedStorage":
        return torch.uint8
    # torch's own classes only, by name: the module could be one of torch's
    # lazily imported submodules, never imported here.
    dtype = getattr(getattr(torch, kind.name, None), "dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else None


def _check_records(torch, path: str) -> bool:
    """Whether the zip's storage records can be mapped. torch.load(mmap=True)
    maps a record's bytes as they lie in the zip and checks no record's
    size: a compressed record converted to its compressed bytes, and a
    storage whose record holds fewer bytes than it ran on into the records
    after it, exit 0 both. So the mapped load is taken only when this scan
    vouches for every storage (ConversionError for one whose record is too
    short); anything it cannot read (an odd pickle, two data.pkl, a storage
    class it does not know) goes to torch.load without mmap, which inflates
    and checks every record itself. A file that is not a zip is left to
    torch.load (the legacy format)."""
    try:
        with zipfile.ZipFile(path) as z:
            if any(i.compress_type != zipfile.ZIP_STORED for i in z.infolist()):
                return False
            pickles = [n for n in z.namelist() if n.rsplit("/", 1)[-1] == "data.pkl"]
            if len(pickles) != 1:
                return False
            prefix = pickles[0][: -len("data.pkl")] + "data/"
            records = [i for i in z.infolist() if i.filename.startswith(prefix)]
            scan = _StorageScan(z.read(pickles[0]))
    except zipfile.BadZipFile:
        return True
    except Exception:  # noqa: BLE001 - a zip this cannot read: torch.load will judge
        return False
    try:
        scan.load()
    except Exception:  # noqa: BLE001 - a pickle the scan does not follow
        return False
    sizes = {i.filename[len(prefix) :]: i.file_size for i in records}
    for key, kind, numel in scan.storages:
        dtype = _storage_dtype(torch, kind)
        if key is None or dtype is None or not isinstance(numel, int) or numel < 0:
            return False
        need = numel * dtype.itemsize
        have = sizes.get(key)
        if have is None or have < need:
            held = "is missing" if have is None else f"holds {have} bytes"
            raise ConversionError(
                f"{path}: record data/{key} {held}, and its storage needs {need} "
                "(a damaged checkpoint)"
            )
    return True


def _load(torch, path: str):
    """torch.load, weights only, mapped where the format allows. Its
    warnings (a pickle protocol it was not made for) are not printed: what
    it cannot load comes as one error line, and the rest loads."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        try:
            os.fsencode(path).decode("utf-8")
        except UnicodeDecodeError:
            # torch's mmap=True takes the name as UTF-8 and raised
            # UnicodeEncodeError for any other; a file object it reads.
            with open(path, "rb") as f:
                return torch.load(f, map_location="cpu", weights_only=True)
        if not _check_records(torch, path):
            return torch.load(path, map_location="cpu", weights_only=True)
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError as exc:
            if "mmap" not in str(exc) and "zipfile" not in str(exc):
                raise
            return torch.load(path, map_location="cpu", weights_only=True)  # legacy format


def _names_budget(path: str) -> int:
    """Characters of flattened names a checkpoint may give: nested keys
    repeat their prefixes (a few times the pickle's bytes), so 64 times
    the file and a mebibyte leaves every real state dict room."""
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    return 64 * size + (1 << 20)


class _TorchSource(_Source):
    format = "torch"

    def __init__(self, path: str):
        try:
            with signals_deferred():
                import torch
        except ImportError:  # pragma: no cover
            raise ConversionError("reading torch checkpoints needs the 'torch' package") from None
        self._torch = torch
        try:
            with signals_deferred():
                obj = _load(torch, path)
        except OSError as exc:
            raise os_failure(exc, f"cannot read {path}: {_first_line(exc)}", path) from None
        except (MemoryError, ConversionError):
            raise  # the machine's, or already said
        except Exception as exc:  # UnpicklingError and friends
            text = str(exc)
            detail = next(
                (
                    line.strip()
                    for line in text.splitlines()
                    if "Unsupported global" in line or "Unsupported operand" in line
                ),
                _first_line(exc),
            )
            why = (
                "; hurray loads state dicts of tensors only, never arbitrary pickled objects"
                if "Unsupported" in detail
                else ""
            )
            raise ConversionError(
                f"{path}: torch.load(weights_only=True) refused it: {detail}{why}"
            ) from None
        self._tensors: Dict[str, Any] = {}
        self._refused: Dict[str, str] = {}
        self._flatten(obj, _names_budget(path))
        if not self._tensors and not self._refused:
            raise ConversionError(f"{path} holds a {type(obj).__name__}, not a state dict")

    def _flatten(self, root, budget: int) -> None:
        """Nested dicts joined with "." (keys as str()), depth first in key
        order; with an explicit stack, since the nesting depth is the file's.
        Two entries that get one name ({"a": {"b": x}, "a.b": y}, or keys 1
        and "1") are refused, naming both."""
        torch = self._torch
        spelled: Dict[str, str] = {}  # name -> the entry's keys, as the checkpoint has them
        stack: List[Tuple[str, Tuple[Any, ...], Any]] = [("", (), root)]
        while stack:
            prefix, keys, obj = stack.pop()
            if isinstance(obj, Mapping) and not isinstance(obj, torch.Tensor):
                for k, v in reversed(list(obj.items())):
                    if not isinstance(k, (str, int)):  # str() of a key could be any size
                        where = "".join(f"[{k!r}]" for k in keys) or "the root object"
                        raise ConversionError(
                            f"torch checkpoint entry {where} has a key of type "
                            f"{type(k).__name__}; hurray names tensors by str or int keys"
                        )
                    name = f"{prefix}.{k}" if prefix else str(k)
                    # A pickle refers to one dict from many places for free:
                    # ten levels of a dict holding one dict ten times stood
                    # for 10^10 names in a kilobyte. The names built are held
                    # to a multiple of the file (a dict met twice still
                    # converts, as tied weights do).
                    budget -= len(name) + 1
                    if budget < 0:
                        raise ConversionError(
                            "torch checkpoint names far more entries than its size allows: "
                            "its pickle refers to the same dicts from many places"
                        )
                    stack.append((name, keys + (k,), v))
                continue
            is_tensor = isinstance(obj, torch.Tensor)
            name = prefix or ("tensor" if is_tensor else "<root>")
            where = "".join(f"[{k!r}]" for k in keys) or "the root object"
            if name in spelled:
                raise ConversionError(
                    f"torch checkpoint entries {spelled[name]} and {where} both become the name "
                    f"{name!r}; one would be lost"
                )
            spelled[name] = where
            if is_tensor and obj.is_nested:
                # Its shape cannot even be asked (torch raises RuntimeError).
                self._refused[name] = (
                    f"torch checkpoint entry {name!r} is a nested tensor (rows of different "
                    "lengths), which hurray does not store (leave it out with --exclude)"
                )
            elif is_tensor:
                self._tensors[name] = obj
            else:
                self._refused[name] = (
                    f"torch checkpoint entry {name!r} is a {type(obj).__name__}, not a tensor; "
                    "hurray converts state dicts of tensors (leave it out with --exclude)"
                )

    def names(self):
        return list(self._tensors)

    def refused(self):
        return dict(self._refused)

    def info(self, name):
        t = self._tensors[name]
        return (str(t.dtype).replace("torch.", ""), tuple(t.shape), t.numel() * t.element_size())

    def expansion(self, name):
        import torch

        t = self._tensors[name]
        if t.layout == torch.strided and not t.is_contiguous():  # from_torch copies it
            return t.numel() * t.element_size(), t.untyped_storage().nbytes()
        return None

    def get(self, name):
        import torch

        from .. import _hurray
        from ..torch import from_torch

        t = self._tensors[name]
        try:
            # A checkpoint of a few bytes can hold an expand()ed tensor of
            # gigabytes (strides of 0 over a one-element storage), which
            # from_torch makes contiguous: held to the output limit for
            # the bytes its storage holds, as to_dense() is.
            if t.layout == torch.strided and not t.is_contiguous():
                stored = t.untyped_storage().nbytes()
                _hurray._check_output_bytes(stored, t.numel() * t.element_size())
            return from_torch(t)
        except HurrayError as exc:
            raise ConversionError(f"tensor {name!r}: {_first_line(exc)}") from None


def _to_torch_array(array: np.ndarray):
    from ..torch import to_torch

    return to_torch(from_numpy(_contiguous(array)))


_TORCH_NATIVE = _dtypes.TORCH_NATIVE


class _TorchishTarget(_DenseTarget):
    """Targets holding torch tensors until one call writes them all."""

    def __init__(self, path, options):
        try:
            with signals_deferred():
                import torch  # noqa: F401
        except ImportError:  # refused before the target exists, not mid-way
            raise ConversionError(f"writing {path} needs the 'torch' package") from None
        super().__init__(path, options)
        self._tensors: Dict[str, Any] = {}
        self._origin: Dict[str, str] = {}  # written name -> what it holds, for errors
        self._pointers: set = set()

    def put(self, name: str, tensor, origin: Optional[str] = None) -> int:
        self._claim(name, origin)
        tensor = tensor.contiguous()
        ptr = tensor.data_ptr()
        if tensor.numel() == 0:
            # Empty views of numpy's shared empty allocation look to torch.save
            # like one storage seen as several dtypes: each its own, of no bytes.
            tensor = tensor.new_empty(tensor.shape)
        elif ptr in self._pointers:
            tensor = tensor.clone()  # tied weights: each tensor its own memory
        self._pointers.add(tensor.data_ptr())
        self._tensors[name] = tensor
        return tensor.numel() * tensor.element_size()

    def label(self, dtype: str) -> str:
        return dtype

    def add(self, name, t, source_dtype):
        from ..torch import _torch_of

        array, changed, note = self.dense_array(name, t, source_dtype)
        if (
            not changed
            and not note
            and t.descriptor.quantization is None
            and isinstance(t.descriptor.layout, Dense)
        ):
            # Shares the source's memory, read-only where it is mapped so:
            # torch.save only reads it (to_torch would copy it).
            tensor, _ = _torch_of(t)
        else:
            tensor = _to_torch_array(array)
        dtype = _dtypes.from_numpy(array.dtype)
        nbytes = self.put(name, tensor)
        return _Out(self.label(dtype), nbytes, (lambda: array) if changed else None, note)


class _TorchTarget(_TorchishTarget):
    format = "torch"
    native = _TORCH_NATIVE

    def finish(self, metadata, report):
        import torch

        _note_dropped(
            report,
            [k for k in metadata if not is_bookkeeping(k)],
            "a torch state dict holds tensors only",
        )
        sink = WriteErrors(self.tmp)
        try:
            with sink.file, signals_deferred():
                torch.save(self._tensors, sink)
        except Exception as exc:
            # torch turns a failed write into "unexpected pos ..." (a
            # RuntimeError without errno): the sink kept the OSError.
            failure = sink.error if sink.error is not None else exc
            if isinstance(failure, OSError):
                raise write_failure(failure, self.path) from None
            raise ConversionError(f"writing {self.path}: {_first_line(exc)}") from None
