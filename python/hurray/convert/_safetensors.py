"""safetensors, single files and sharded (*.safetensors.index.json), read
and written natively (hurray._formats, the C parser and writer): no torch,
no safetensors package. --keep-scales exports and re-imports quantized
tensors as codes, scales and zero points."""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import numpy as np

from .. import _dtypes
from .._descriptor import BlockCoded, Buffer, Dense, Descriptor, PerTensorAffine
from .._hurray import HurrayError
from .._tensor import Tensor, from_numpy
from ._common import (
    SAFETENSORS_INDEX_KEY,
    SOURCE_DTYPES_KEY,
    ConversionError,
    _aligned,
    _check_dense_written_size,
    _contiguous,
    _first_line,
    _regular_file,
    _stored_bytes,
    is_bookkeeping,
    os_failure,
    owned_json,
    write_failure,
)
from ._source import _Source
from ._target import _DenseTarget, _note_dropped, _Out
from .layouts import describe

_KEEP_SCALES_PARTS = {"data": "", "scales": ".scales", "zero_points": ".zero_points"}


class _SafetensorsSource(_Source):
    """Read natively (hurray._formats, the C parser): no torch, no safetensors."""

    format = "safetensors"

    def __init__(
        self,
        files: Sequence[str],
        weight_map: Optional[Mapping[str, str]] = None,
        index_metadata: Any = None,
    ):
        self._files = list(files)
        meta = self._open_shards(files, weight_map)
        # --keep-scales exports: reassemble <name>, <name>.scales, <name>.zero_points
        self._quant: Dict[str, Descriptor] = {}
        self._src_dtypes: Dict[str, str] = {}
        self._meta: Dict[str, Any] = {}
        for k, v in meta.items():
            if k.startswith("hurray.") and k.endswith(".quantization"):
                name = k[len("hurray.") : -len(".quantization")]
                what = f"{self._meta_file[k]}: metadata {k!r} (tensor {name!r})"
                try:
                    self._quant[name] = Descriptor.from_dict(owned_json(v, what, dict))
                except ConversionError:
                    raise
                except (
                    ValueError,
                    KeyError,
                    TypeError,
                    OverflowError,  # a field past its C type (shape[1] 2**64)
                    HurrayError,
                    RecursionError,
                ) as exc:
                    raise ConversionError(
                        f"{what} is not a valid hurray descriptor: {_first_line(exc)}"
                    ) from None
            elif k.startswith("hurray.") and k.endswith(".dtype"):
                self._src_dtypes[k[len("hurray.") : -len(".dtype")]] = v
            else:
                self._meta["safetensors." + k] = v
        if self._src_dtypes:
            self._meta[SOURCE_DTYPES_KEY] = json.dumps(self._src_dtypes)
        if index_metadata is not None:
            self._meta[SAFETENSORS_INDEX_KEY] = json.dumps(index_metadata)
        hidden: Dict[str, str] = {}  # part -> the quantized tensor it belongs to
        for name, d in self._quant.items():
            for b in d.buffers:
                part = name + _KEEP_SCALES_PARTS.get(b.role, "." + b.role)
                if part not in self._where:
                    raise ConversionError(
                        f"tensor {name!r} is described as quantized in the "
                        f"metadata, but {part!r} is missing"
                    )
                if part != name:
                    if part in self._quant or part in hidden:
                        other = hidden.get(part, part)
                        raise ConversionError(
                            f"safetensors tensor {part!r} is claimed both by quantized tensor "
                            f"{name!r} and by {other!r} (hurray.*.quantization metadata)"
                        )
                    hidden[part] = name
        # The file's order (ascending data offsets, as the C source gives
        # them), shard after shard: a native conversion writes this order.
        self._names = [k for k in self._where if k not in hidden]

    def _open_shards(self, files, weight_map) -> Dict[str, str]:
        """Open each shard into self._sources and map each tensor to its
        (shard, index) in self._where; the shards' merged metadata, without
        its "safetensors." prefix."""
        from .. import _formats

        self._sources = []
        self._where: Dict[str, Tuple[Any, int]] = {}
        self._meta_file: Dict[str, str] = {}  # metadata key -> the shard it was read from
        meta: Dict[str, str] = {}
        holder: Dict[str, str] = {}  # tensor -> the shard that holds it
        for path in files:
            try:
                h = _formats.Source(path)
            except OSError as exc:  # hurray.HurrayIOError too
                raise os_failure(
                    exc, f"cannot read safetensors file {path}: {_first_line(exc)}"
                ) from None
            except HurrayError as exc:
                raise ConversionError(
                    f"cannot read safetensors file {path}: {_first_line(exc)}"
                ) from None
            if h.format != "safetensors":
                found = h.format  # before close(), after which the source answers nothing
                h.close()
                raise ConversionError(f"cannot read safetensors file {path}: it is a {found} file")
            self._sources.append(h)
            for k, v in h.metadata().items():
                if k.startswith("safetensors."):
                    meta.setdefault(k[len("safetensors.") :], v)
                    self._meta_file.setdefault(k[len("safetensors.") :], path)
            for i, key in enumerate(h.names()):
                # Silent loss otherwise: one of two copies, or a tensor the
                # index forgot, would be dropped without a word.
                if key in holder:
                    raise ConversionError(
                        f"tensor {key!r} is in two shards, {os.path.basename(holder[key])} and "
                        f"{os.path.basename(path)}; hurray will not pick one"
                    )
                holder[key] = path
                if weight_map is not None and key not in weight_map:
                    raise ConversionError(
                        f"shard {os.path.basename(path)} holds tensor {key!r}, which the index's "
                        "weight_map does not list; it would be lost"
                    )
                if weight_map is None or weight_map.get(key) == path:
                    self._where[key] = (h, i)
        if weight_map is not None:
            missing = sorted(set(weight_map) - set(self._where))
            if missing:
                raise ConversionError(
                    f"the index maps {missing[0]!r} to {weight_map[missing[0]]}, which does not "
                    f"hold it ({len(missing)} tensors missing)"
                )
        return meta

    def names(self):
        return list(self._names)

    def files(self):
        return list(self._files)

    def info(self, name):
        if name in self._quant:
            d = self._quant[name]
            return describe(d), d.shape, _stored_bytes(d)
        h, i = self._where[name]
        dtype, shape, nbytes = h.info(i)
        return dtype, tuple(shape), nbytes

    def _tensor(self, name) -> Tensor:
        from .._tensor import from_hurray

        h, i = self._where[name]
        try:
            return from_hurray(h.get(i))
        except (HurrayError, OSError) as exc:
            raise ConversionError(f"cannot read tensor {name!r}: {_first_line(exc)}") from None

    def get(self, name):
        if name in self._quant:
            return self._get_quantized(name)
        return self._tensor(name)

    def _get_quantized(self, name):
        d = self._quant[name]
        q = d.quantization
        buffers, parts = [], {}
        for b in d.buffers:
            part = name + _KEEP_SCALES_PARTS.get(b.role, "." + b.role)
            parts[b.role] = part_tensor = self._tensor(part)
            raw = np.frombuffer(part_tensor.buffers[0], np.uint8)
            dtype = None
            if b.role == "data":
                dtype = d.dtype
            elif b.role == "zero_points" and q is not None:
                dtype = getattr(q, "zero_point_dtype", None)
            if dtype is not None and _dtypes.is_packed(dtype):
                _check_low_bits(part, raw, dtype)
                raw = _dtypes.pack(dtype, raw)
            if raw.size != b.byte_size:
                raise ConversionError(
                    f"{part!r} holds {raw.size} bytes, the descriptor in the "
                    f"metadata places {b.byte_size}"
                )
            buf = _aligned(raw.size, max(b.alignment, 64))
            buf[:] = raw
            buffers.append(buf)
        t = Tensor(d, buffers)
        for role, (dtype, shape) in _part_forms(t).items():
            got = parts.get(role)
            if got is None:
                continue
            if (got.dtype, tuple(got.shape)) != (dtype, shape):
                part = name + _KEEP_SCALES_PARTS[role]
                raise ConversionError(
                    f"{part!r} is {got.dtype} {list(got.shape)}; the descriptor in the "
                    f"metadata makes it {dtype} {list(shape)}"
                )
        return t

    def metadata(self):
        return dict(self._meta)

    def close(self):
        for h in self._sources:
            h.close()


def _check_low_bits(part: str, raw: np.ndarray, dtype: str) -> None:
    """--keep-scales stores a sub-byte code one a byte, in its low bits: a
    byte with others set is not a code (packing would drop them and read
    0x1F as 15)."""
    bad = np.flatnonzero(raw >> _dtypes.BITS[dtype])
    if bad.size:
        i = int(bad[0])
        raise ConversionError(
            f"{part!r}: element {i} is {int(raw[i]):#04x}, but a code of dtype {dtype} is the "
            f"low {_dtypes.BITS[dtype]} bits of its byte, the others zero"
        )


def _part_forms(t: Tensor) -> Dict[str, Tuple[str, Tuple[int, ...]]]:
    """role -> (dtype, shape) of the safetensors tensor --keep-scales
    writes for that buffer of `t` (see _add_keep_scales)."""
    d, q = t.descriptor, t.descriptor.quantization
    forms = {"data": ("uint8" if _dtypes.is_packed(d.dtype) else d.dtype, tuple(d.shape))}
    if not isinstance(q, PerTensorAffine):
        scales = t.scales()
        dtype = _dtypes.from_numpy(scales.dtype)
        forms["scales"] = ("uint8" if dtype == "float8_e8m0fnu" else dtype, scales.shape)
    zp_dtype = getattr(q, "zero_point_dtype", None)
    if getattr(q, "zero_point_buffer", None) is not None:
        shape = t.zero_points().shape
        forms["zero_points"] = ("uint8" if _dtypes.is_packed(zp_dtype) else zp_dtype, shape)
    return forms


def _unique_keys(pairs):
    """json object_pairs_hook: a key given twice is refused (json keeps the
    last one silently)."""
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} appears twice in one object")
        out[k] = v
    return out


def _confined(folder: str, name: str, index: str) -> str:
    """folder/name for a shard name read from an index file, refused
    unless it is a relative path without a ".." component, so that it names
    a file inside the index's folder (symbolic links there are followed:
    the Hugging Face cache links shards to its blobs folder)."""
    parts = name.split("/")
    if (
        not name
        or "\0" in name
        or os.path.isabs(name)
        or ".." in parts
        or (os.altsep and os.altsep in name)
    ):
        raise ConversionError(
            f"{index} names shard {name!r}, which is not a file inside "
            f"its folder; refusing to read it"
        )
    return os.path.normpath(os.path.join(folder, name))


def _open_index(path: str) -> _Source:
    _regular_file(path)
    try:
        with open(path, encoding="utf-8") as f:
            index = json.load(f, object_pairs_hook=_unique_keys)
        if not isinstance(index, dict):
            raise TypeError("not a JSON object")
        weight_map = index["weight_map"]
        if not isinstance(weight_map, dict):
            raise TypeError("weight_map is not an object")
        for name, shard in weight_map.items():
            if not isinstance(shard, str):
                raise TypeError(f"weight_map[{name!r}] is not a file name: {shard!r}")
    except KeyError as exc:
        raise ConversionError(f"{path} is not a safetensors index: no {exc} key") from None
    except (OSError, ValueError, TypeError, RecursionError) as exc:
        raise ConversionError(f"{path} is not a safetensors index: {_first_line(exc)}") from None
    folder = os.path.dirname(path)
    full = {name: _confined(folder, shard, path) for name, shard in weight_map.items()}
    files = sorted(set(full.values()))
    for shard_path in files:
        try:
            os.stat(shard_path)
        except FileNotFoundError as exc:  # a ConversionFileNotFoundError, as a missing source is
            raise os_failure(
                exc,
                f"{path} names shard {os.path.relpath(shard_path, folder or '.')}"
                ", which does not exist",
                shard_path,
            ) from None
        except OSError as exc:  # a symbolic link loop (ELOOP), a denied folder
            raise os_failure(
                exc,
                f"{path} names shard {os.path.relpath(shard_path, folder or '.')}: {exc.strerror}",
                shard_path,
            ) from None
        _regular_file(shard_path, "shard ")
    src = _SafetensorsSource(files, full, index.get("metadata"))
    src.format = "safetensors (sharded)"
    return src


_SAFETENSORS_NATIVE = (
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "complex64",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e8m0fnu",
)


def _keep_scales_refusal(d) -> Optional[str]:
    """Why --keep-scales cannot write `d` as codes, scales and zero points
    (the scales of a block-coded tensor sit inside its blocks; packed or
    two-level fields store other arrays), or None."""
    from .._tensor import _PACKED_DEFAULTS

    q = d.quantization
    if not isinstance(d.layout, Dense):
        return "not dense"
    if isinstance(q, BlockCoded):
        return f"block-coded ({q.format}: its scales are inside its blocks)"
    used = [k for k, v in _PACKED_DEFAULTS.items() if getattr(q, k, v) != v]
    if used:
        return f"packed or two-level ({', '.join(used)})"
    return None


class _SafetensorsTarget(_DenseTarget):
    """Written natively (hurray._formats, the C writer, atomically): no
    torch, no safetensors package."""

    format = "safetensors"
    native = _SAFETENSORS_NATIVE

    def __init__(self, path, options):
        super().__init__(path, options)
        self._extra_meta: Dict[str, str] = {}
        self._tensors: Dict[str, Tensor] = {}
        self._origin: Dict[str, str] = {}  # written name -> what it holds, for errors

    def label(self, dtype):
        """safetensors' name of a dtype ("BF16"), as the C writer spells it."""
        from .. import _formats

        try:
            return _formats.target_form("safetensors", "", Descriptor(dtype, (0,)).encode())[0]
        except HurrayError:
            return dtype

    def put(self, name: str, array: np.ndarray, origin: Optional[str] = None) -> int:
        self._claim(name, origin)
        array = _contiguous(array)
        self._tensors[name] = from_numpy(array)
        return array.nbytes

    def _add_dense(self, name, t, source_dtype):
        array, changed, note = self.dense_array(name, t, source_dtype)
        nbytes = self.put(name, array)
        dtype = _dtypes.from_numpy(array.dtype)
        return _Out(self.label(dtype), nbytes, (lambda: array) if changed else None, note)

    def add(self, name, t, source_dtype):
        d = t.descriptor
        if self.options.keep_scales and d.quantization is not None:
            why = _keep_scales_refusal(d)
            if why is None:
                return self._add_keep_scales(name, t, source_dtype)
            out = self._add_dense(name, t, source_dtype)
            out.note += (
                f"; {why}: dequantized (--keep-scales takes dense tensors of one code per element)"
            )
            return out
        return self._add_dense(name, t, source_dtype)

    def _add_keep_scales(self, name, t, source_dtype):
        """Codes as <name>, scales as <name>.scales, zero points as
        <name>.zero_points; the descriptor (normalized: row-major, offset 0)
        in the metadata as hurray.<name>.quantization."""
        d = t.descriptor
        q = d.quantization
        _check_dense_written_size(t)
        codes = _contiguous(t.codes())
        if _dtypes.is_packed(d.dtype):
            codes = codes.view(np.uint8)  # one code per byte, its bits in the low bits
        parts = {"data": codes}
        if not isinstance(q, PerTensorAffine):
            scales = _contiguous(t.scales())
            if scales.dtype == _dtypes.to_numpy("float8_e8m0fnu"):
                scales = scales.view(np.uint8)  # E8M0 bytes
            parts["scales"] = scales
        zp_dtype = getattr(q, "zero_point_dtype", None)
        if getattr(q, "zero_point_buffer", None) is not None:
            zp = t.zero_points()
            if _dtypes.is_packed(zp_dtype):
                parts["zero_points"] = (zp & 0x0F).astype(np.uint8)
            else:
                parts["zero_points"] = zp.astype(_dtypes.to_numpy(zp_dtype))
        buffers = []
        for b in d.buffers:
            if b.role not in parts:
                raise ConversionError(
                    f"tensor {name!r}: buffer role {b.role!r} has no --keep-scales form"
                )
            a = parts[b.role]
            size = a.size * a.itemsize
            if b.role == "data" and _dtypes.is_packed(d.dtype):
                size = _dtypes.storage_bytes(d.dtype, a.size)
            if b.role == "zero_points" and _dtypes.is_packed(zp_dtype):
                size = _dtypes.storage_bytes(zp_dtype, a.size)
            buffers.append(Buffer(b.role, size, b.alignment, b.sync_mode))
        normal = d.replace(strides=None, byte_offset=0, buffers=buffers, statistics=None)
        total = 0
        for role, a in parts.items():  # put() refuses a part named like another tensor
            what = {"data": "the codes", "scales": "the scales", "zero_points": "the zero points"}[
                role
            ]
            total += self.put(
                name + _KEEP_SCALES_PARTS[role], a, f"{what} of tensor {name!r} (--keep-scales)"
            )
        spec = json.dumps(json.loads(normal.to_json()), separators=(",", ":"))
        self._extra_meta[f"hurray.{name}.quantization"] = spec
        if source_dtype:
            self._extra_meta[f"hurray.{name}.dtype"] = source_dtype
        kept = "+".join(
            ["codes"]
            + [{"scales": "scales", "zero_points": "zero points"}[r] for r in parts if r != "data"]
        )
        return _Out(f"{describe(d)} ({kept})", total)

    # Keys a target consumes itself rather than dropping (the folder target: zoo.*).
    consumed: Tuple[str, ...] = ()

    def header_metadata(self, metadata, report) -> Dict[str, Any]:
        """The __metadata__ every written file gets; the report notes the
        keys not carried."""
        meta = {}
        dropped = []
        for k, v in metadata.items():
            if k.startswith("safetensors."):
                meta[k[len("safetensors.") :]] = _as_text(k, v)
            elif not is_bookkeeping(k) and k not in self.consumed:
                dropped.append(k)
        for k in self._extra_meta:
            if k in meta:
                raise ConversionError(
                    f"--keep-scales writes __metadata__ key {k!r}, and the "
                    f"source's metadata has safetensors.{k} too"
                )
        meta.update(self._extra_meta)
        _note_dropped(
            report,
            dropped,
            "safetensors keeps only its own __metadata__, the hurray keys safetensors.*",
        )
        report.metadata_keys = len(meta)
        return meta

    def write_file(self, path: str, names, meta: Dict[str, Any]) -> None:
        """Writes tensors `names` into the file `path` (the C writer replaces
        it atomically)."""
        from .. import _formats

        try:
            _formats.write(
                path,
                "safetensors",
                [(n, self._tensors[n].__hurray__()) for n in names],
                {"safetensors." + k: v for k, v in meta.items()},
            )
        except OSError as exc:  # hurray.HurrayIOError too: a full disk
            raise write_failure(exc, self.path) from None
        except (HurrayError, ValueError, TypeError) as exc:
            raise ConversionError(f"writing {self.path}: {_first_line(exc)}") from None

    def finish(self, metadata, report):
        # publish() renames self.tmp over the target.
        self.write_file(self.tmp, list(self._tensors), self.header_metadata(metadata, report))


def _as_text(key: str, v):
    """safetensors metadata values are strings: bytes that are UTF-8 are
    one, others are refused (as the C writer refuses them), not changed.
    An int, float or bool goes to the C writer as it is, which writes its
    text ("%.17g" for a float) exactly as a native conversion does."""
    if isinstance(v, (bytes, bytearray)):
        try:
            return bytes(v).decode("utf-8")
        except UnicodeDecodeError:
            raise ConversionError(
                f"metadata {key} is not UTF-8, as safetensors __metadata__ needs"
            ) from None
    return v
