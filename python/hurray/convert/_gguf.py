"""GGUF, read and written natively (hurray._formats, the C parser and
writer): no gguf package. Which quantized forms GGUF holds, their byte
sizes and the block re-layout are the C library's (src/formats/gguf.c,
convert.c); this module asks it."""

from __future__ import annotations

from typing import Any, Callable, List, Tuple

from .._descriptor import Composite, Dense, Descriptor
from .._hurray import HurrayError
from .._tensor import from_numpy
from ._common import (
    GGUF_TENSORS_KEY,
    GGUF_TYPES_KEY,
    ConversionError,
    UsageError,
    _check_dense_written_size,
    _contiguous,
    _first_line,
    _shape_str,
    is_bookkeeping,
    write_failure,
)
from ._source import _Source
from ._target import _FileTarget, _note_dropped, _Out
from .layouts import describe, gguf_layouts


class _GgufSource(_Source):
    """Read natively (hurray._formats, the C parser): no gguf package. Q8_0
    and Q4_0 blocks become block_affine codes and float16 scales in C, which
    also says which types it imports (Source.check)."""

    format = "gguf"

    def __init__(self, path: str):
        from .. import _formats

        try:
            self._src = _formats.Source(path)
        except (HurrayError, OSError) as exc:
            raise ConversionError(f"cannot read GGUF file {path}: {_first_line(exc)}") from None
        if self._src.format != "gguf":
            self._src.close()
            raise ConversionError(f"cannot read GGUF file {path}: it is a {self._src.format} file")
        self._order = self._src.names()
        self._index = {n: i for i, n in enumerate(self._order)}

    def names(self):
        return list(self._order)

    def _check(self, name) -> int:
        i = self._index[name]
        try:
            self._src.check(i)
        except HurrayError as exc:
            raise ConversionError(_first_line(exc)) from None
        return i

    def info(self, name):
        kind, shape, nbytes = self._src.info(self._check(name))
        return kind, tuple(shape), nbytes

    def get(self, name):
        from .._tensor import from_hurray

        try:
            return from_hurray(self._src.get(self._check(name)))
        except (HurrayError, OSError) as exc:
            raise ConversionError(f"cannot read tensor {name!r}: {_first_line(exc)}") from None

    def metadata(self):
        return self._src.metadata()

    def close(self):
        self._src.close()


_EXPORT_ELSEWHERE = "; export to .safetensors or .hurray instead"


class _GgufTarget(_FileTarget):
    """Dense tensors of the dtypes GGUF has and quantized tensors in a
    layout GGUF holds bit for bit (layouts.gguf_layouts()), written
    natively (hurray._formats, the C writer, atomically; it re-lays out
    codes and scales into GGUF blocks): no gguf package. Which tensor takes
    which GGUF type, and its size, the C library decides (target_form)."""

    format = "gguf"

    def __init__(self, path, options):
        super().__init__(path, options)
        self._plan: List[Tuple[str, Callable[[], Any]]] = []

    def check_scheme(self, scheme):
        schemes = [layout.name for layout in gguf_layouts()]
        if scheme is not None and scheme not in schemes:
            held = " and ".join(layout.gguf_type for layout in gguf_layouts())
            raise UsageError(
                f"GGUF holds {held} among hurray's schemes; --quantize "
                f"{scheme} cannot be written to .gguf (write .hurray or "
                ".safetensors instead)"
            )

    def quantizable(self, shape):
        block = max(
            layout.gguf_block for layout in gguf_layouts() if layout.name == self.options.scheme
        )
        if not shape or shape[-1] % block:
            return (
                f"GGUF needs the last dimension to be a multiple of {block} "
                f"(shape {_shape_str(shape)})"
            )
        return None

    def _form(self, name: str, d: Descriptor) -> Tuple[str, int]:
        """(GGUF type, stored bytes) from the C library, or why there is none."""
        from .. import _formats

        try:
            kind, nbytes = _formats.target_form("gguf", name, d.encode())
        except HurrayError as exc:
            why = _first_line(exc)
            if d.quantization is None:
                raise ConversionError(why + _EXPORT_ELSEWHERE) from None
            label = describe(d)
            hint = ""
            for layout in gguf_layouts():
                if label == layout.name and d.shape and d.shape[-1] % layout.gguf_block:
                    hint = (
                        f" (its last dimension, {d.shape[-1]}, is not a multiple of "
                        f"{layout.gguf_block})"
                    )
            raise ConversionError(
                f"cannot write tensor {name!r} ({label}{hint}) to GGUF: {why}" + _EXPORT_ELSEWHERE
            ) from None
        return kind, nbytes

    def add(self, name, t, source_dtype):
        d = t.descriptor
        if isinstance(d.layout, Composite):
            raise ConversionError(f"tensor {name!r} is a composite tensor; GGUF has no form for it")
        if d.quantization is not None:
            kind, nbytes = self._form(name, d)
            self._plan.append((name, lambda t=t: t))  # the C writer makes the blocks
            return _Out(kind, nbytes)
        note = ""
        dense = isinstance(d.layout, Dense)
        if dense:
            _check_dense_written_size(t)  # before anything is planned
        else:
            note = f"{describe(d).split(' ')[-1].strip('()')} densified"
        kind, nbytes = self._form(name, Descriptor(d.dtype, d.shape))

        def produce_dense(t=t, dense=dense):
            return from_numpy(_contiguous(t.codes() if dense else t.to_dense()))

        self._plan.append((name, produce_dense))
        return _Out(kind, nbytes, None, note)

    def finish(self, metadata, report):
        from .. import _formats

        meta = {}
        dropped = []
        for k, v in metadata.items():
            if k.startswith("gguf."):
                meta[k] = v
            elif not is_bookkeeping(k):
                dropped.append(k)
        _note_dropped(
            report, dropped, "GGUF carries only its own key-value pairs, the hurray keys gguf.*"
        )
        try:
            tensors = [(name, produce().__hurray__()) for name, produce in self._plan]
            _formats.write(self.tmp, "gguf", tensors, meta)  # publish() renames it
        except OSError as exc:  # hurray.HurrayIOError too: a full disk
            raise write_failure(exc, self.path) from None
        except (HurrayError, ValueError, TypeError) as exc:
            raise ConversionError(f"writing {self.path}: {_first_line(exc)}") from None
        kv = [k for k in meta if k not in (GGUF_TYPES_KEY, GGUF_TENSORS_KEY)]
        report.metadata_keys = len(kv) + (0 if "gguf.general.architecture" in meta else 1)

    def abort(self):
        self._plan.clear()
        super().abort()  # the temporary file
