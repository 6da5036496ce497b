"""safe_open: safetensors' lazy reading API over a hurray file.

    with hurray.safe_open("model.hurray", framework="pt", device="cpu") as f:
        for name in f.keys():
            w = f.get_tensor(name)
        rows = f.get_slice("embed.weight")[1000:2000, :64]

The same methods as ``safetensors.safe_open`` (keys, get_tensor, get_slice,
metadata, context manager), so that a script switches by
changing its import. Tensors are zero-copy views of a private,
copy-on-write mapping: they may be written, and the file never changes.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Optional, Tuple

import numpy as np

from . import _dtypes, _hooks, _hurray
from ._descriptor import Dense
from ._files import File
from ._tensor import specialise, unsupported

_FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "np": "np", "numpy": "np"}


def _normalise(key: Any, shape: Tuple[int, ...]):
    """The key as one (start, stop, step) range or int per axis, with the
    axes whose step was negative (read with a positive step, then flipped)
    and the axes an int removes. Basic indexing only: ints, slices (any
    step), one Ellipsis."""
    if not isinstance(key, tuple):
        key = (key,)
    for k in key:  # before counting them, which a None or a mask would throw off
        if k is Ellipsis or isinstance(k, slice):
            continue
        if isinstance(k, (bool, np.bool_)) or k is None:
            raise TypeError("safe_open slices take ints, slices and '...' (no None, no masks)")
        if not isinstance(k, (int, np.integer)):
            raise TypeError(f"safe_open slices take ints, slices and '...', not {type(k).__name__}")
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    at = next((i for i, k in enumerate(key) if k is Ellipsis), None)
    if at is not None:
        fill = len(shape) - (len(key) - 1)
        key = key[:at] + (slice(None),) * max(fill, 0) + key[at + 1 :]
    if len(key) > len(shape):
        raise IndexError(
            f"too many indices: the tensor has {len(shape)} dimensions, {len(key)} were indexed"
        )
    key = key + (slice(None),) * (len(shape) - len(key))
    parts, flips = [], []
    kept = 0
    for axis, (k, n) in enumerate(zip(key, shape)):
        if isinstance(k, (int, np.integer)):
            i = int(k)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            parts.append(i % n)
            continue
        r = range(*k.indices(n))
        if len(r) == 0:
            parts.append(slice(0, 0, 1))
        elif r.step > 0:
            parts.append(slice(r.start, r[-1] + 1, r.step))
        else:
            parts.append(slice(r[-1], r[0] + 1, -r.step))
            flips.append(kept)
        kept += 1
    return parts, flips


def _check_torch_sliceable(t: Any, name: str) -> None:
    """torch indexes neither sparse tensors by slices nor per-channel
    quantized ones ("Setting strides is possible only on uniformly quantized
    tensor"): say so, rather than hand on torch's NotImplementedError."""
    if str(t.layout) != "torch.strided":
        kind = f"a {str(t.layout).replace('torch.', '')} tensor"
    elif t.is_quantized and "per_channel" in str(t.qscheme()):
        kind = "a per-channel quantized tensor"
    else:
        return
    raise _hurray._error(
        "HURRAY_ERR_UNSUPPORTED",
        f"get_slice({name!r}): torch cannot slice {kind}; read it whole with get_tensor",
    )


class SafeSlice:
    """A tensor not read yet: shape and dtype, and [...] that reads only the
    rows along the first axis the index needs (where the layout allows)."""

    def __init__(self, owner: "SafeOpen", name: str):
        self._owner = owner
        self._name = name
        # Its own hold on the file, as safetensors' slices keep its storage:
        # slices taken inside a `with` are read after it ends.
        self._file = owner._file
        self._shape = tuple(self._file.shape(name))
        owner._slice_made()
        self._counted = True

    def __del__(self) -> None:
        if self.__dict__.get("_counted"):
            self._owner._slice_gone()

    def get_shape(self) -> list:
        return list(self._shape)

    @property
    def shape(self) -> tuple:
        return self._shape

    def get_dtype(self) -> str:
        """safetensors' name of the dtype ("F32", "BF16", "F8_E4M3"), as
        safetensors' own get_dtype() returns it; the hurray name ("int4",
        "uint4") for a tensor safetensors could not hold as it is (a
        quantized or non-dense one, or a dtype safetensors lacks)."""
        from . import _formats

        descriptor = self._file.descriptor(self._name)
        try:
            return _formats.target_form("safetensors", "", descriptor.encode())[0]
        except _hurray.HurrayError:
            return descriptor.dtype

    def __len__(self) -> int:
        if not self._shape:
            raise TypeError("len() of a 0-d tensor")
        return self._shape[0]

    def __getitem__(self, key: Any):
        owner = self._owner
        parts, flips = _normalise(key, self._shape)
        d = self._file.descriptor(self._name)
        rows_ok = (
            isinstance(d.layout, Dense)
            and d.quantization is None
            and d.strides is None
            and not _dtypes.is_packed(d.dtype)
            and len(self._shape) > 0
        )
        if rows_ok:
            first = parts[0]
            if isinstance(first, int):
                start, stop, parts[0] = first, first + 1, 0
            else:
                start, stop = first.start, max(first.stop, first.start)
                parts[0] = slice(0, stop - start, first.step)
            # Only these rows' bytes are touched (a view of the mapping).
            t = self._file.get_slice(self._name, start, stop)
        else:
            t = self._file[self._name]
        base = owner._convert(t)
        if owner._framework == "pt":
            _check_torch_sliceable(base, self._name)
        # An array, never a scalar, as safetensors gives: numpy makes a 0-d
        # view, not a scalar, of a key that ends in "...".
        out = base[tuple(parts) + (Ellipsis,)]
        if flips:
            out = owner._flip(out, flips)
        return owner._finish(out)


class SafeOpen:
    """safetensors.safe_open over a hurray file (see the module doc)."""

    def __init__(self, filename: str | os.PathLike, framework: str = "pt", device: Any = "cpu"):
        try:
            self._framework = _FRAMEWORKS[str(framework)]
        except KeyError:
            raise ValueError(f"framework must be 'pt' or 'np', not {framework!r}") from None
        if device is None:  # safetensors' default
            device = "cpu"
        if self._framework == "np" and str(device) != "cpu":
            raise ValueError("framework='np' reads to the CPU only")
        self._device = device
        if self._framework == "pt":
            try:
                import torch  # noqa: F401  (the torch interop needs it)
            except ImportError:
                raise unsupported(
                    "safe_open(framework='pt'), the default, needs the 'torch' package; "
                    "pass framework='np' for numpy arrays"
                ) from None
            self._torch_device = _hooks.torch("_available_device")(device, "safe_open")
        self._file = File(filename)
        self._closed = False
        self._slices = 0  # those alive
        # Slices come and go on any thread, and the collector may drop one
        # (its __del__) while this thread holds the lock: reentrant.
        self._slices_lock = threading.RLock()

    # --- safetensors' methods ---
    def keys(self) -> list:
        return self._open_file().keys()

    def metadata(self) -> Optional[dict]:
        """File metadata, or None if there is none (safetensors' convention).
        Values keep their stored type (str, int, float, bool, bytes)."""
        meta = self._open_file().metadata
        return meta or None

    def get_tensor(self, name: str):
        return self._finish(self._convert(self._open_file()[name]))

    def get_slice(self, name: str) -> SafeSlice:
        self._open_file()
        return SafeSlice(self, name)

    def __enter__(self) -> "SafeOpen":
        self._open_file()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Closes the file, unless slices taken from it are still alive:
        then the last of them closes it when it is collected."""
        with self._slices_lock:
            self._closed = True
            last = not self._slices
        if last:
            self._file.close()

    def _slice_made(self) -> None:
        with self._slices_lock:
            self._slices += 1

    def _slice_gone(self) -> None:
        with self._slices_lock:
            self._slices -= 1
            last = self._closed and not self._slices
        if last:
            self._file.close()

    def _open_file(self) -> File:
        if self._closed or self._file.closed:
            raise ValueError("I/O operation on a closed hurray file")
        return self._file

    # --- framework plumbing ---
    def _convert(self, t):
        t = specialise(t)
        if self._framework == "np":
            return t.numpy()
        return _hooks.torch("to_torch")(t)

    def _flip(self, out, axes):
        if self._framework == "np":
            return np.flip(out, axis=tuple(axes))
        # torch has no flip for some dtypes (float8, uint16/32/64), and its
        # refusal is a C++ exception (which aborts a process run under
        # ASan): elements flip the same as signed integers of their width.
        import torch

        width = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(
            out.element_size()
        )
        if width is None or out.is_quantized or out.is_complex():
            return out.flip(axes)
        return out.view(width).flip(axes).view(out.dtype)

    def _finish(self, out):
        if self._framework == "np":
            return out
        if self._torch_device.type != "cpu":
            return out.to(self._torch_device)
        return out


def safe_open(filename: str | os.PathLike, framework: str = "pt", device: Any = "cpu") -> SafeOpen:
    """safetensors.safe_open over a hurray file: keys(), get_tensor(name),
    get_slice(name)[...] (ints, slices with any step, '...'; only the rows
    the index needs are read for dense tensors), metadata(), and use as a
    context manager. framework "pt" gives torch tensors (on `device`), "np"
    numpy arrays."""
    return SafeOpen(filename, framework, device)


__all__ = ["safe_open", "SafeOpen", "SafeSlice"]
