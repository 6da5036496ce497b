"""hurray.convert: checkpoints between safetensors, GGUF, .npz/.npy, torch
state dicts and hurray files, optionally quantizing on the way.

The rules (formats, names, the default quantization rule, the report) are in
docs/impl/convert.md. In short:

    report = hurray.convert("model.safetensors", "model.hurray", quantize="q4_0")
    print(report.format())

Sources are read tensor by tensor (memory maps where the format allows), so a
conversion holds the source once, plus whatever new bytes it makes
(quantized codes, re-laid-out GGUF blocks, dequantized values).
"""
from __future__ import annotations

import fnmatch
import json
import math
import os
import secrets
import stat
import sys
import warnings
import zipfile
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _dtypes
from . import _files
from ._descriptor import (BlockAffine, Buffer, Composite, Dense, Descriptor, Mxfp, Nf4,
                          PerChannelAffine, PerTensorAffine)
from ._descriptor import BLOCK_FORMATS, BlockCoded
from ._hurray import HurrayError
from ._quant import QUANT_SCHEMES
from ._quant import quantize as _quantize
from ._tensor import Tensor, from_numpy

__all__ = ["convert", "ConversionError", "ConversionReport", "TensorReport", "ReportTotals",
           "default_quantize_rule", "SOURCE_SUFFIXES", "TARGET_SUFFIXES"]

SOURCE_SUFFIXES = (".safetensors", ".safetensors.index.json", ".gguf", ".npz", ".npy", ".pt",
                   ".pth", ".bin", ".hurray")
TARGET_SUFFIXES = (".hurray", ".safetensors", ".gguf", ".npz", ".npy", ".pt", ".pth", ".bin")

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
_ANY_FLOAT = FLOAT_DTYPES + ("float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float6_e3m2fn",
                             "float6_e2m3fn", "float4_e2m1fn")

# Hurray metadata keys the converter owns.
SOURCE_DTYPES_KEY = "convert.source_dtypes"   # JSON {tensor: float dtype before quantization}
GGUF_TYPES_KEY = "gguf.__types__"             # JSON {kv key: GGUF value type}, in file order
GGUF_TENSORS_KEY = "gguf.__tensors__"         # JSON [tensor names], in file order
SAFETENSORS_INDEX_KEY = "safetensors_index.metadata"  # JSON: the index's "metadata" object

_MX_NAMES = {"fp8_e4m3": "mxfp8_e4m3", "fp8_e5m2": "mxfp8_e5m2", "fp6_e3m2": "mxfp6_e3m2",
             "fp6_e2m3": "mxfp6_e2m3", "fp4_e2m1": "mxfp4", "int8": "mxint8"}


class ConversionError(Exception):
    """A conversion that cannot be done; the message is one line and says
    what is not supported and why."""


class UsageError(ConversionError):
    """Options that do not fit together (the CLI exits with status 2)."""


# ============================================================== the report

@dataclass
class TensorReport:
    """One converted tensor. Error fields compare the real values written
    against the source's (float64 arithmetic); `exact` rows were copied or
    re-laid out bit for bit and carry 0, 0 and 1.0."""
    name: str
    source_dtype: str
    output: str
    shape: Tuple[int, ...]
    bytes_in: int
    bytes_out: int = 0
    quantized: bool = False
    exact: bool = True
    max_abs_error: Optional[float] = 0.0
    rmse: Optional[float] = 0.0
    cosine: Optional[float] = 1.0
    note: str = ""
    # sums behind the totals: elements, sum of squared errors, dot, |a|^2, |b|^2
    _sums: Tuple[int, float, float, float, float] = field(default=(0, 0.0, 0.0, 0.0, 0.0),
                                                          repr=False, compare=False)

    @property
    def ratio(self) -> float:
        return _ratio_of(self.bytes_in, self.bytes_out)

    def to_dict(self) -> dict:
        return {"name": self.name, "source_dtype": self.source_dtype, "output": self.output,
                "shape": list(self.shape), "bytes_in": self.bytes_in,
                "bytes_out": self.bytes_out, "ratio": _json_float(self.ratio),
                "quantized": self.quantized, "exact": self.exact,
                "max_abs_error": _json_float(self.max_abs_error), "rmse": _json_float(self.rmse),
                "cosine": _json_float(self.cosine), "note": self.note}


@dataclass
class ReportTotals:
    tensors: int
    quantized: int
    bytes_in: int
    bytes_out: int
    max_abs_error: float
    rmse: float
    cosine: float

    @property
    def ratio(self) -> float:
        return _ratio_of(self.bytes_in, self.bytes_out)

    def to_dict(self) -> dict:
        return {"tensors": self.tensors, "quantized": self.quantized, "bytes_in": self.bytes_in,
                "bytes_out": self.bytes_out, "ratio": _json_float(self.ratio),
                "max_abs_error": _json_float(self.max_abs_error), "rmse": _json_float(self.rmse),
                "cosine": _json_float(self.cosine)}


@dataclass
class ConversionReport:
    source: str
    target: str
    source_format: str
    target_format: str
    scheme: Optional[str] = None
    rows: List[TensorReport] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    metadata_keys: int = 0

    @property
    def totals(self) -> ReportTotals:
        """Sizes summed; errors over every element of every measured tensor
        (max of the maxima, RMSE and cosine of the concatenation)."""
        n = sq = dot = na = nb = 0.0
        max_abs = 0.0
        for r in self.rows:
            c, s, d, a, b = r._sums
            n, sq, dot, na, nb = n + c, sq + s, dot + d, na + a, nb + b
            if r.max_abs_error is not None and not (r.max_abs_error <= max_abs):
                max_abs = r.max_abs_error
        rmse = math.sqrt(sq / n) if n else 0.0
        cosine = _cosine(dot, na, nb) if n else 1.0
        return ReportTotals(len(self.rows), sum(r.quantized for r in self.rows),
                            sum(r.bytes_in for r in self.rows),
                            sum(r.bytes_out for r in self.rows), max_abs, rmse, cosine)

    def to_dict(self) -> dict:
        return {"source": self.source, "target": self.target,
                "source_format": self.source_format, "target_format": self.target_format,
                "scheme": self.scheme, "tensors": [r.to_dict() for r in self.rows],
                "totals": self.totals.to_dict(), "metadata_keys": self.metadata_keys,
                "notes": list(self.notes)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def format(self) -> str:
        """The report as an aligned text table, a totals line, then notes."""
        head = ("tensor", "from", "to", "shape", "in", "out", "ratio", "max abs", "rmse",
                "cosine", "note")
        lines = []
        for r in self.rows:
            lines.append((r.name, r.source_dtype, r.output, _shape_str(r.shape),
                          _size(r.bytes_in), _size(r.bytes_out), _ratio(r.ratio),
                          _err(r.max_abs_error), _err(r.rmse), _cos(r.cosine), r.note))
        t = self.totals
        lines.append((f"total: {t.tensors} tensors, {t.quantized} quantized", "", "", "",
                      _size(t.bytes_in), _size(t.bytes_out), _ratio(t.ratio),
                      _err(t.max_abs_error), _err(t.rmse), _cos(t.cosine), ""))
        widths = [max(len(row[i]) for row in [head] + lines) for i in range(len(head))]
        right = {4, 5, 6, 7, 8, 9}

        def render(row):
            cells = [c.rjust(w) if i in right else c.ljust(w)
                     for i, (c, w) in enumerate(zip(row, widths))]
            return "  ".join(cells).rstrip()

        out = [render(head), render(tuple("-" * w for w in widths))]
        out += [render(row) for row in lines[:-1]]
        out.append(render(tuple("-" * w for w in widths)))
        out.append(render(lines[-1]))
        out.append(f"{self.source_format} -> {self.target_format}: {self.target}"
                   f" ({self.metadata_keys} metadata keys)")
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)


def _ratio_of(bytes_in: int, bytes_out: int) -> float:
    if bytes_out:
        return bytes_in / bytes_out
    return 1.0 if bytes_in == 0 else math.inf


def _json_float(v):
    if v is None or math.isfinite(v):
        return v
    return str(v)  # "inf", "nan": JSON has no literal for them


def _shape_str(shape) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def _size(nbytes: int) -> str:
    if nbytes < 1024:
        return f"{nbytes} B"
    n = float(nbytes)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            break
    return f"{n:.1f} {unit}"


def _ratio(r: float) -> str:
    return f"{r:.2f}x" if math.isfinite(r) else "-"


def _err(v) -> str:
    if v is None:
        return "-"
    return "0" if v == 0 else f"{v:.3g}"


def _cos(v) -> str:
    return "-" if v is None else f"{v:.6f}"


def _cosine(dot: float, na: float, nb: float) -> float:
    if na == 0 and nb == 0:
        return 1.0
    if na == 0 or nb == 0:
        return 0.0
    den = math.sqrt(na * nb)
    if not math.isfinite(den) or den == 0:
        den = math.sqrt(na) * math.sqrt(nb)
    c = dot / den
    return max(-1.0, min(1.0, c)) if math.isfinite(c) else c


_CHUNK = 1 << 18  # elements per step of _measure: three float64 buffers fit in L2


def _chunk_sums(a: np.ndarray, b: np.ndarray, start: int, local) -> tuple:
    """max |a-b|, sum (a-b)^2, a.b, a.a, b.b over one chunk, in float64."""
    bufs = getattr(local, "bufs", None)
    if bufs is None:
        bufs = local.bufs = (np.empty(_CHUNK), np.empty(_CHUNK), np.empty(_CHUNK))
    x, y, d = bufs
    ca, cb = a[start:start + _CHUNK], b[start:start + _CHUNK]
    m = ca.size
    x, y, d = x[:m], y[:m], d[:m]
    np.copyto(x, ca, casting="unsafe")
    np.copyto(y, cb, casting="unsafe")
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(x, y, out=d)
        top = max(float(d.max()), -float(d.min()))
        if np.isnan(top):
            top = math.nan
        return (top, float(np.einsum("i,i->", d, d)), float(np.einsum("i,i->", x, y)),
                float(np.einsum("i,i->", x, x)), float(np.einsum("i,i->", y, y)))


def _measure(ref: np.ndarray, out: np.ndarray, threads: int = 1):
    """Errors of `out` against `ref` in float64, a chunk at a time (chunks
    spread over `threads`; the sums are combined in chunk order, so the
    numbers do not depend on the thread count)."""
    import threading
    a = np.asarray(ref).reshape(-1)
    b = np.asarray(out).reshape(-1)
    if a.size != b.size:
        raise ConversionError(f"internal: {a.size} reference values against {b.size} outputs")
    if a.dtype.kind == "c" or b.dtype.kind == "c":
        a, b = a.real, b.real  # pragma: no cover - complex tensors are never quantized
    local = threading.local()
    starts = range(0, a.size, _CHUNK)
    if threads > 1 and len(starts) > 2:
        from concurrent.futures import ThreadPoolExecutor
        pool = ThreadPoolExecutor(max_workers=threads)
        try:
            parts = list(pool.map(lambda s: _chunk_sums(a, b, s, local), starts))
        finally:  # on Ctrl-C, the chunks not started yet are dropped, not waited for
            pool.shutdown(wait=True, cancel_futures=True)
    else:
        parts = [_chunk_sums(a, b, s, local) for s in starts]
    max_abs, sq, dot, na, nb = 0.0, 0.0, 0.0, 0.0, 0.0
    for top, s2, d2, a2, b2 in parts:
        if not (top <= max_abs):
            max_abs = top
        sq, dot, na, nb = sq + s2, dot + d2, na + a2, nb + b2
    n = a.size
    rmse = math.sqrt(sq / n) if n else 0.0
    return max_abs, rmse, _cosine(dot, na, nb), (n, sq, dot, na, nb)


# ============================================================== names and rules

_SKIP_WORDS = ("embed", "embd", "wte", "wpe", "norm", "ln_", ".ln", "lm_head", "router",
               "gate_inp")
_SKIP_EXACT = ("output.weight",)  # GGUF's output head (lm_head in other formats)


def default_quantize_rule(name: str, dtype: str, shape: Sequence[int],
                          quantized: bool = False) -> bool:
    """The default choice of what --quantize applies to: unquantized
    float16/bfloat16/float32/float64 tensors of rank 2 whose name ends with
    "weight" and does not look like an embedding, a norm, the output head
    or a MoE router (see docs/impl/convert.md)."""
    if quantized or dtype not in FLOAT_DTYPES or len(shape) != 2:
        return False
    low = name.lower()
    if not low.endswith("weight"):
        return False
    if low in _SKIP_EXACT or low.endswith(".gate.weight"):
        return False
    return not any(w in low for w in _SKIP_WORDS)


def _patterns(value) -> Tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes)):
        value = (value,)
    return tuple(str(v) for v in value)


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _selected(name: str, include, exclude) -> bool:
    if include and not _matches(name, include):
        return False
    return not _matches(name, exclude)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


def describe(d: Descriptor) -> str:
    """A short name for what a tensor holds: a dtype, or a scheme name."""
    q = d.quantization
    layout = d.layout
    suffix = ""
    if isinstance(layout, Composite):
        return "composite"
    if not isinstance(layout, Dense):
        suffix = f" ({getattr(layout, 'format', type(layout).__name__.lower())})"
    if q is None:
        return d.dtype + suffix
    if isinstance(q, BlockAffine):
        if (q.block_size == 32 and q.axis == len(d.shape) - 1 and q.scale_dtype == "float16"
                and q.zero_point_buffer is None):
            if d.dtype == "int8" and q.zero_point == 0:
                return "q8_0" + suffix
            if d.dtype == "uint4" and q.zero_point == 8:
                return "q4_0" + suffix
        return f"block_affine({d.dtype}, {q.block_size})" + suffix
    if isinstance(q, PerChannelAffine):
        return f"per_channel({d.dtype})" + suffix
    if isinstance(q, PerTensorAffine):
        return f"affine({d.dtype})" + suffix
    if isinstance(q, Nf4):
        return ("nf4" if q.block_size == 64 else f"nf4({q.block_size})") + suffix
    if isinstance(q, Mxfp):
        return _MX_NAMES.get(q.element, "mx") + suffix
    if isinstance(q, BlockCoded):
        return q.format.replace("ggml_", "") + suffix
    return "quantized" + suffix  # pragma: no cover


def _stored_bytes(d: Descriptor) -> int:
    return sum(b.byte_size for b in d.buffers)


def _aligned(nbytes: int, align: int = 64) -> np.ndarray:
    raw: np.ndarray = np.empty(nbytes + align, np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes]


def _contiguous(array) -> np.ndarray:
    """Row-major, keeping a 0-d array 0-d (np.ascontiguousarray makes it 1-d)."""
    a = np.asarray(array)
    return a if a.flags.c_contiguous else a.copy(order="C")


def _values(t: Tensor, threads: int) -> np.ndarray:
    """The real values of a tensor: dequantized (float32) if quantized,
    densified if sparse or paged, a zero-copy view if dense."""
    d = t.descriptor
    if d.quantization is not None:
        return t.dequantize(np.float32, threads=threads)
    if isinstance(d.layout, Dense):
        return t.numpy()
    return t.to_dense()


# ============================================================== sources

class _Source:
    format = "?"

    def names(self) -> List[str]:
        raise NotImplementedError

    def info(self, name: str) -> Tuple[str, Tuple[int, ...], int]:
        """(dtype label, shape, stored bytes), cheaply."""
        raise NotImplementedError

    def get(self, name: str) -> Tensor:
        raise NotImplementedError

    def metadata(self) -> Dict[str, Any]:
        return {}

    def refused(self) -> Dict[str, str]:
        """Entries that are not tensors: name -> why they cannot be converted."""
        return {}

    def close(self) -> None:
        pass


_ST_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
             "U8": 1, "U16": 2, "U32": 4, "U64": 8, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
             "F8_E8M0": 1, "C64": 8}
_KEEP_SCALES_PARTS = {"data": "", "scales": ".scales", "zero_points": ".zero_points"}


class _SafetensorsSource(_Source):
    """Read natively (hurray._formats, the C parser): no torch, no safetensors."""
    format = "safetensors"

    def __init__(self, files: Sequence[str], weight_map: Optional[Mapping[str, str]] = None,
                 index_metadata: Any = None):
        from . import _formats
        self._sources = []
        self._where: Dict[str, Tuple[Any, int]] = {}
        meta: Dict[str, str] = {}
        holder: Dict[str, str] = {}  # tensor -> the shard that holds it
        for path in files:
            try:
                h = _formats.Source(path)
            except (HurrayError, OSError) as exc:
                raise ConversionError(f"cannot read safetensors file {path}: "
                                      f"{_first_line(exc)}") from None
            if h.format != "safetensors":
                h.close()
                raise ConversionError(f"cannot read safetensors file {path}: it is a "
                                      f"{h.format} file")
            self._sources.append(h)
            for k, v in h.metadata().items():
                if k.startswith("safetensors."):
                    meta.setdefault(k[len("safetensors."):], v)
            for i, key in enumerate(h.names()):
                # Silent loss otherwise: one of two copies, or a tensor the
                # index forgot, would be dropped without a word.
                if key in holder:
                    raise ConversionError(
                        f"tensor {key!r} is in two shards, {os.path.basename(holder[key])} and "
                        f"{os.path.basename(path)}; hurray will not pick one")
                holder[key] = path
                if weight_map is not None and key not in weight_map:
                    raise ConversionError(
                        f"shard {os.path.basename(path)} holds tensor {key!r}, which the index's "
                        "weight_map does not list; it would be lost")
                if weight_map is None or weight_map.get(key) == path:
                    self._where[key] = (h, i)
        if weight_map is not None:
            missing = sorted(set(weight_map) - set(self._where))
            if missing:
                raise ConversionError(
                    f"the index maps {missing[0]!r} to {weight_map[missing[0]]}, which does not "
                    f"hold it ({len(missing)} tensors missing)")
        # --keep-scales exports: reassemble <name>, <name>.scales, <name>.zero_points
        self._quant: Dict[str, Descriptor] = {}
        self._src_dtypes: Dict[str, str] = {}
        self._meta: Dict[str, Any] = {}
        for k, v in meta.items():
            if k.startswith("hurray.") and k.endswith(".quantization"):
                name = k[len("hurray."):-len(".quantization")]
                try:
                    self._quant[name] = Descriptor.from_dict(json.loads(v))
                except (ValueError, KeyError, TypeError, HurrayError) as exc:
                    raise ConversionError(f"metadata {k!r} is not a valid hurray descriptor: "
                                          f"{_first_line(exc)}") from None
            elif k.startswith("hurray.") and k.endswith(".dtype"):
                self._src_dtypes[k[len("hurray."):-len(".dtype")]] = v
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
                    raise ConversionError(f"tensor {name!r} is described as quantized in the "
                                          f"metadata, but {part!r} is missing")
                if part != name:
                    if part in self._quant or part in hidden:
                        other = hidden.get(part, part)
                        raise ConversionError(
                            f"safetensors tensor {part!r} is claimed both by quantized tensor "
                            f"{name!r} and by {other!r} (hurray.*.quantization metadata)")
                    hidden[part] = name
        self._names = sorted(k for k in self._where if k not in hidden)

    def names(self):
        return list(self._names)

    def info(self, name):
        if name in self._quant:
            d = self._quant[name]
            return describe(d), d.shape, _stored_bytes(d)
        h, i = self._where[name]
        dtype, shape, nbytes = h.info(i)
        return dtype, tuple(shape), nbytes

    def _tensor(self, name) -> Tensor:
        from ._tensor import from_hurray
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
        buffers = []
        for i, b in enumerate(d.buffers):
            part = name + _KEEP_SCALES_PARTS.get(b.role, "." + b.role)
            raw = np.frombuffer(self._tensor(part).buffers[0], np.uint8)
            dtype = None
            if b.role == "data":
                dtype = d.dtype
            elif b.role == "zero_points" and q is not None:
                dtype = getattr(q, "zero_point_dtype", None)
            if dtype is not None and _dtypes.is_packed(dtype):
                raw = _dtypes.pack(dtype, raw)
            if raw.size != b.byte_size:
                raise ConversionError(f"{part!r} holds {raw.size} bytes, the descriptor in the "
                                      f"metadata places {b.byte_size}")
            buf = _aligned(raw.size, max(b.alignment, 64))
            buf[:] = raw
            buffers.append(buf)
        return Tensor(d, buffers)

    def metadata(self):
        return dict(self._meta)

    def close(self):
        for h in self._sources:
            h.close()


class _GgufSource(_Source):
    """Read natively (hurray._formats, the C parser): no gguf package. Q8_0
    and Q4_0 blocks become block_affine codes and float16 scales in C."""
    format = "gguf"
    SUPPORTED = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "F64", "I8", "I16", "I32", "I64",
                 *(f[5:].upper() for f in BLOCK_FORMATS))  # block-coded, bytes kept

    def __init__(self, path: str):
        from . import _formats
        try:
            self._src = _formats.Source(path)
        except (HurrayError, OSError) as exc:
            raise ConversionError(f"cannot read GGUF file {path}: {_first_line(exc)}") from None
        if self._src.format != "gguf":
            self._src.close()
            raise ConversionError(f"cannot read GGUF file {path}: it is a {self._src.format} "
                                  "file")
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
        from ._tensor import from_hurray
        try:
            return from_hurray(self._src.get(self._check(name)))
        except (HurrayError, OSError) as exc:
            raise ConversionError(f"cannot read tensor {name!r}: {_first_line(exc)}") from None

    def metadata(self):
        return self._src.metadata()

    def close(self):
        self._src.close()


class _NpzSource(_Source):
    format = "npz"

    def __init__(self, path: str):
        self.path = path
        try:
            self._npz = np.load(path, allow_pickle=False)
            self._zip = zipfile.ZipFile(path)
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise ConversionError(f"cannot read {path}: {_first_line(exc)}") from None
        self._members: Dict[str, str] = {}
        for member in self._zip.namelist():
            # numpy names member "a.npy" and member "a" both "a"
            name = member[:-4] if member.endswith(".npy") else member
            if name in self._members:
                raise ConversionError(f"{path}: members {self._members[name]!r} and {member!r} "
                                      f"both read as array {name!r}")
            self._members[name] = member
        self._names = list(self._npz.files)

    def names(self):
        return list(self._names)

    def info(self, name):
        member = self._members.get(name)
        header = None
        if member is not None and member.endswith(".npy"):
            try:
                with self._zip.open(member) as fp:
                    version = np.lib.format.read_magic(fp)
                    if version == (1, 0):
                        header = np.lib.format.read_array_header_1_0(fp)
                    elif version == (2, 0):
                        header = np.lib.format.read_array_header_2_0(fp)
            except _NPZ_ERRORS:
                header = None  # _array below says what is wrong
        if header is None:
            a = self._array(name)
            shape, dtype = a.shape, a.dtype
        else:
            shape, _, dtype = header
        if dtype.hasobject:
            raise ConversionError(f"{self.path}: array {name!r} holds Python objects; hurray "
                                  "converts numeric arrays only")
        return str(dtype), tuple(shape), math.prod(shape) * dtype.itemsize

    def _array(self, name):
        try:
            a = self._npz[name]
        except _NPZ_ERRORS as exc:  # object arrays, damaged or truncated members
            raise ConversionError(f"{self.path}: array {name!r}: {_first_line(exc)}") from None
        if not isinstance(a, np.ndarray):  # numpy hands out other members as bytes
            raise ConversionError(f"{self.path}: member {self._members.get(name, name)!r} is not "
                                  "a .npy array")
        return a

    def get(self, name):
        return _from_numpy_checked(self._array(name), name)

    def close(self):
        self._npz.close()
        self._zip.close()


_NPZ_ERRORS = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error,
               NotImplementedError)


def _from_numpy_checked(a: np.ndarray, name: str) -> Tensor:
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    try:
        return from_numpy(a)
    except ValueError as exc:
        raise ConversionError(f"array {name!r} of dtype {a.dtype}: {_first_line(exc)}") from None


class _NpySource(_Source):
    format = "npy"

    def __init__(self, path: str):
        self.path = path
        try:
            self._array = np.load(path, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ConversionError(f"cannot read {path}: {_first_line(exc)}") from None
        base = os.path.basename(path)
        self._name = base[:-4] if base.endswith(".npy") else base

    def names(self):
        return [self._name]

    def info(self, name):
        a = self._array
        return str(a.dtype), tuple(a.shape), int(a.nbytes)

    def get(self, name):
        return _from_numpy_checked(self._array, name)


class _TorchSource(_Source):
    format = "torch"

    def __init__(self, path: str):
        try:
            import torch
        except ImportError:  # pragma: no cover
            raise ConversionError("reading torch checkpoints needs the 'torch' package") from None
        self._torch = torch
        try:
            try:
                obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
            except RuntimeError as exc:
                if "mmap" not in str(exc) and "zipfile" not in str(exc):
                    raise
                obj = torch.load(path, map_location="cpu", weights_only=True)  # legacy format
        except OSError as exc:
            raise ConversionError(f"cannot read {path}: {_first_line(exc)}") from None
        except Exception as exc:  # UnpicklingError and friends
            text = str(exc)
            detail = next((line.strip() for line in text.splitlines()
                           if "Unsupported global" in line or "Unsupported operand" in line),
                          _first_line(exc))
            raise ConversionError(
                f"{path}: torch.load(weights_only=True) refused it: {detail}; hurray loads "
                "state dicts of tensors only, never arbitrary pickled objects") from None
        self._tensors: Dict[str, Any] = {}
        self._refused: Dict[str, str] = {}
        self._flatten(obj)
        if not self._tensors and not self._refused:
            raise ConversionError(f"{path} holds a {type(obj).__name__}, not a state dict")

    def _flatten(self, root) -> None:
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
                    stack.append((f"{prefix}.{k}" if prefix else str(k), keys + (k,), v))
                continue
            is_tensor = isinstance(obj, torch.Tensor)
            name = prefix or ("tensor" if is_tensor else "<root>")
            where = "".join(f"[{k!r}]" for k in keys) or "the root object"
            if name in spelled:
                raise ConversionError(
                    f"torch checkpoint entries {spelled[name]} and {where} both become the name "
                    f"{name!r}; one would be lost")
            spelled[name] = where
            if is_tensor:
                self._tensors[name] = obj
            else:
                self._refused[name] = (
                    f"torch checkpoint entry {name!r} is a {type(obj).__name__}, not a tensor; "
                    "hurray converts state dicts of tensors (leave it out with --exclude)")

    def names(self):
        return list(self._tensors)

    def refused(self):
        return dict(self._refused)

    def info(self, name):
        t = self._tensors[name]
        return (str(t.dtype).replace("torch.", ""), tuple(t.shape),
                t.numel() * t.element_size())

    def get(self, name):
        from .torch import from_torch
        try:
            return from_torch(self._tensors[name])
        except HurrayError as exc:
            raise ConversionError(f"tensor {name!r}: {_first_line(exc)}") from None


class _HurraySource(_Source):
    format = "hurray"

    def __init__(self, path: str, verify: bool = True):
        self.path = path
        self._verify = verify
        try:
            self._file = _files.open(path)
        except (HurrayError, OSError) as exc:
            raise ConversionError(f"cannot read {path}: {_first_line(exc)}") from None

    def names(self):
        return self._file.keys()

    def info(self, name):
        d = self._file.descriptor(name)
        return describe(d), d.shape, _stored_bytes(d)

    def get(self, name):
        if self._verify:  # every byte converted is checked against its checksum first
            try:
                self._file.verify(name)
            except HurrayError as exc:
                raise ConversionError(
                    f"{self.path}: tensor {name!r} fails verification ({_first_line(exc)}); the "
                    "file is damaged (--no-verify converts it anyway)") from None
        return self._file[name]

    def metadata(self):
        return dict(self._file.metadata)

    def close(self):
        self._file.close()


def _source_kind(path: str) -> str:
    low = path.lower()
    if os.path.isdir(path):
        return "dir"
    for suffix, kind in ((".safetensors.index.json", "safetensors-index"),
                         (".safetensors", "safetensors"), (".gguf", "gguf"), (".npz", "npz"),
                         (".npy", "npy"), (".pt", "torch"), (".pth", "torch"), (".bin", "torch"),
                         (".hurray", "hurray")):
        if low.endswith(suffix):
            return kind
    raise ConversionError(f"cannot tell the format of {path!r} from its name; sources end with "
                          f"{', '.join(SOURCE_SUFFIXES)} (or are a folder holding a "
                          "*.safetensors.index.json)")


def _regular_file(path: str, what: str = "") -> None:
    """Refuses what is not a regular file (a FIFO would block the read forever)."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ConversionError(f"{what}{path}: {exc.strerror or _first_line(exc)}") from None
    if not stat.S_ISREG(mode):
        raise ConversionError(f"{what}{path} is not a regular file")


def _open_source(path: str, verify: bool = True) -> _Source:
    kind = _source_kind(path)
    if not os.path.exists(path):
        raise ConversionError(f"{path}: no such file or directory")
    if kind != "dir":
        _regular_file(path)
    if kind == "dir":
        indexes = sorted(n for n in os.listdir(path) if n.endswith(".safetensors.index.json"))
        if len(indexes) == 1:
            return _open_index(os.path.join(path, indexes[0]))
        if len(indexes) > 1:
            raise ConversionError(f"{path} holds {len(indexes)} *.safetensors.index.json files; "
                                  "name the one to convert")
        files = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
        if len(files) == 1:
            _regular_file(os.path.join(path, files[0]))
            return _SafetensorsSource([os.path.join(path, files[0])])
        raise ConversionError(f"{path} is a folder without a *.safetensors.index.json "
                              f"(and {len(files)} .safetensors files); name a file")
    if kind == "safetensors-index":
        return _open_index(path)
    if kind == "safetensors":
        return _SafetensorsSource([path])
    if kind == "hurray":
        return _HurraySource(path, verify)
    return {"gguf": _GgufSource, "npz": _NpzSource, "npy": _NpySource,
            "torch": _TorchSource}[kind](path)


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
    if (not name or "\0" in name or os.path.isabs(name) or ".." in parts
            or (os.altsep and os.altsep in name)):
        raise ConversionError(f"{index} names shard {name!r}, which is not a file inside "
                              f"its folder; refusing to read it")
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
        if not os.path.exists(shard_path):
            raise ConversionError(f"{path} names shard {os.path.relpath(shard_path, folder or '.')}"
                                  ", which does not exist")
        _regular_file(shard_path, "shard ")
    src = _SafetensorsSource(files, full, index.get("metadata"))
    src.format = "safetensors (sharded)"
    return src


# ============================================================== targets

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


def _new_tmp(path: str) -> str:
    """Creates (O_EXCL, mode 0666 less the umask) a new hidden temporary
    file in the folder of `path`, and returns its name."""
    folder, base = os.path.split(os.path.abspath(path))
    stem, suffix = base, ""
    for s in (".npz", ".safetensors", ".gguf"):
        if base.endswith(s):
            stem, suffix = base[:-len(s)], s
            break
    while True:
        tmp = os.path.join(folder, f".{stem}.{os.getpid()}-{secrets.token_hex(4)}.tmp{suffix}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        except OSError as exc:
            raise ConversionError(f"cannot write into the folder {folder}: "
                                  f"{exc.strerror or _first_line(exc)}") from None
        os.close(fd)
        return tmp


def _fsync_dir(folder: str) -> None:
    """Best effort: the rename is done, the new file complete either way."""
    try:
        fd = os.open(folder, os.O_RDONLY | _O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class _FileTarget(_Target):
    """Every target is written into a temporary file in the target's folder
    (start), made durable and renamed over the destination only after
    everything succeeded (publish), and removed on any failure or signal
    (abort). The rename is the converter's own last step, so a signal that
    arrives while a writer library runs (which may not check for signals)
    raises before it, and the target stays untouched."""

    def __init__(self, path, options):
        super().__init__(path, options)
        self.tmp: Optional[str] = None
        self.published = False

    def start(self) -> None:
        self.tmp = _new_tmp(self.path)

    def publish(self) -> None:
        assert self.tmp is not None
        fd = os.open(self.tmp, os.O_RDONLY | _O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(self.tmp, self.path)
        self.published = True
        _fsync_dir(os.path.dirname(os.path.abspath(self.path)))

    def abort(self) -> None:
        if self.tmp is not None and not self.published:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass


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
        except (HurrayError, TypeError, OverflowError) as exc:
            raise ConversionError(f"writing {self.path}: {_first_line(exc)}") from None
        except OSError as exc:
            raise ConversionError(f"writing {self.path}: {exc.strerror or _first_line(exc)}"
                                  ) from None


class _DenseTarget(_FileTarget):
    """safetensors, torch, npz, npy: dense arrays only. Quantized tensors
    are dequantized to the dtype they had before quantization (float32 if
    unknown); dtypes the format lacks are widened exactly."""
    native: Tuple[str, ...] = ()

    def dense_array(self, name: str, t: Tensor, source_dtype: Optional[str]):
        d = t.descriptor
        if isinstance(d.layout, Composite):
            raise ConversionError(f"tensor {name!r} is a composite tensor; only .hurray files "
                                  f"hold those, {self.format} has no form for it")
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
            array = t.codes()
        wide = _widen(d.dtype, self.native)
        if wide is None:
            raise ConversionError(f"tensor {name!r} has dtype {d.dtype}, which {self.format} "
                                  "cannot hold; convert to .hurray instead")
        if wide != d.dtype:
            array = array.astype(_dtypes.to_numpy(wide))
            note = (note + "; " if note else "") + f"{self.format} has no {d.dtype}: " \
                                                    f"written as {wide} (exact)"
        return array, False, note


def _to_torch_array(array: np.ndarray):
    from .torch import to_torch
    return to_torch(from_numpy(_contiguous(array)))


_TORCH_NATIVE = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "bfloat16", "float32", "float64", "complex64", "complex128",
                 "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")
_SAFETENSORS_NATIVE = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                       "uint64", "float16", "bfloat16", "float32", "float64", "complex64",
                       "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu")
_ST_NAMES = {"bool": "BOOL", "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64",
             "uint8": "U8", "uint16": "U16", "uint32": "U32", "uint64": "U64", "float16": "F16",
             "bfloat16": "BF16", "float32": "F32", "float64": "F64", "complex64": "C64",
             "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e8m0fnu": "F8_E8M0"}


class _TorchishTarget(_DenseTarget):
    """Targets holding torch tensors until one call writes them all."""

    def __init__(self, path, options):
        super().__init__(path, options)
        self._tensors: Dict[str, Any] = {}
        self._origin: Dict[str, str] = {}  # written name -> what it holds, for errors
        self._pointers: set = set()

    def put(self, name: str, tensor, origin: Optional[str] = None) -> int:
        origin = origin or f"tensor {name!r}"
        if name in self._tensors:
            raise ConversionError(f"{origin} and {self._origin[name]} would both be written as "
                                  f"{self.format} tensor {name!r}; one would be lost")
        self._origin[name] = origin
        tensor = tensor.contiguous()
        ptr = tensor.data_ptr()
        if tensor.numel() and ptr in self._pointers:
            tensor = tensor.clone()  # tied weights: each tensor its own memory
        self._pointers.add(tensor.data_ptr())
        self._tensors[name] = tensor
        return tensor.numel() * tensor.element_size()

    def label(self, dtype: str) -> str:
        return dtype

    def add(self, name, t, source_dtype):
        from .torch import to_torch
        array, changed, note = self.dense_array(name, t, source_dtype)
        if not changed and not note and t.descriptor.quantization is None and \
                isinstance(t.descriptor.layout, Dense):
            tensor = to_torch(t)  # shares the source's memory
        else:
            tensor = _to_torch_array(array)
        dtype = _dtypes.from_numpy(array.dtype)
        nbytes = self.put(name, tensor)
        return _Out(self.label(dtype), nbytes, (lambda: array) if changed else None, note)


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
        return _ST_NAMES.get(dtype, dtype)

    def put(self, name: str, array: np.ndarray, origin: Optional[str] = None) -> int:
        origin = origin or f"tensor {name!r}"
        if name in self._tensors:
            raise ConversionError(f"{origin} and {self._origin[name]} would both be written as "
                                  f"{self.format} tensor {name!r}; one would be lost")
        self._origin[name] = origin
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
            if isinstance(d.layout, Dense):
                return self._add_keep_scales(name, t, source_dtype)
            out = self._add_dense(name, t, source_dtype)
            out.note += "; not dense: dequantized (--keep-scales takes dense tensors)"
            return out
        return self._add_dense(name, t, source_dtype)

    def _add_keep_scales(self, name, t, source_dtype):
        """Codes as <name>, scales as <name>.scales, zero points as
        <name>.zero_points; the descriptor (normalized: row-major, offset 0)
        in the metadata as hurray.<name>.quantization."""
        d = t.descriptor
        q = d.quantization
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
                raise ConversionError(f"tensor {name!r}: buffer role {b.role!r} has no "
                                      "--keep-scales form")
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
            what = {"data": "the codes", "scales": "the scales",
                    "zero_points": "the zero points"}[role]
            total += self.put(name + _KEEP_SCALES_PARTS[role], a,
                              f"{what} of tensor {name!r} (--keep-scales)")
        spec = json.dumps(json.loads(normal.to_json()), separators=(",", ":"))
        self._extra_meta[f"hurray.{name}.quantization"] = spec
        if source_dtype:
            self._extra_meta[f"hurray.{name}.dtype"] = source_dtype
        kept = "+".join(["codes"] + [{"scales": "scales", "zero_points": "zero points"}[r]
                                     for r in parts if r != "data"])
        return _Out(f"{describe(d)} ({kept})", total)

    def finish(self, metadata, report):
        from . import _formats
        meta = {}
        dropped = []
        for k, v in metadata.items():
            if k.startswith("safetensors."):
                meta[k[len("safetensors."):]] = _as_text(v)
            elif k not in (SOURCE_DTYPES_KEY, SAFETENSORS_INDEX_KEY, GGUF_TYPES_KEY,
                           GGUF_TENSORS_KEY):
                dropped.append(k)
        for k in self._extra_meta:
            if k in meta:
                raise ConversionError(f"--keep-scales writes __metadata__ key {k!r}, and the "
                                      f"source's metadata has safetensors.{k} too")
        meta.update(self._extra_meta)
        _note_dropped(report, dropped, "safetensors keeps only its own __metadata__, "
                                       "the hurray keys safetensors.*")
        report.metadata_keys = len(meta)
        try:
            # The C writer replaces self.tmp atomically; publish() renames it.
            _formats.write(self.tmp, "safetensors",
                           [(n, t.__hurray__()) for n, t in self._tensors.items()],
                           {"safetensors." + k: v for k, v in meta.items()})
        except (HurrayError, OSError, ValueError, TypeError) as exc:
            raise ConversionError(f"writing {self.path}: {_first_line(exc)}") from None


def _as_text(v) -> str:
    """safetensors metadata values are strings."""
    if isinstance(v, str):
        return v
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).decode("utf-8", "replace")
    return json.dumps(v)


class _TorchTarget(_TorchishTarget):
    format = "torch"
    native = _TORCH_NATIVE

    def finish(self, metadata, report):
        import torch
        _note_dropped(report, [k for k in metadata if k != SOURCE_DTYPES_KEY],
                      "a torch state dict holds tensors only")
        try:
            torch.save(self._tensors, self.tmp)
        except Exception as exc:
            raise ConversionError(f"writing {self.path}: {_first_line(exc)}") from None


_NUMPY_NATIVE = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                 "float16", "float32", "float64", "complex64", "complex128")


class _NpzTarget(_DenseTarget):
    """Written as np.savez does (a stored zip of .npy members), one member
    as each tensor arrives."""
    format = "npz"
    native = _NUMPY_NATIVE

    def __init__(self, path, options):
        super().__init__(path, options)
        self._zip: Optional[zipfile.ZipFile] = None

    def start(self):
        super().start()
        self._zip = zipfile.ZipFile(self.tmp, "w", zipfile.ZIP_STORED, allowZip64=True)

    def add(self, name, t, source_dtype):
        array, changed, note = self.dense_array(name, t, source_dtype)
        array = _contiguous(array)
        with self._zip.open(name + ".npy", "w", force_zip64=True) as fp:
            np.lib.format.write_array(fp, array, allow_pickle=False)
        return _Out(str(array.dtype), array.nbytes, (lambda: array) if changed else None, note)

    def finish(self, metadata, report):
        _note_dropped(report, [k for k in metadata if k != SOURCE_DTYPES_KEY],
                      ".npz holds arrays only")
        self._zip.close()

    def abort(self):
        try:
            if self._zip is not None:
                self._zip.close()
        except Exception:  # noqa: BLE001 - the file is removed next
            pass
        super().abort()


class _NpyTarget(_DenseTarget):
    format = "npy"
    native = _NUMPY_NATIVE

    def __init__(self, path, options):
        super().__init__(path, options)
        self._array = None

    def add(self, name, t, source_dtype):
        if self._array is not None:
            raise ConversionError(f"{self.path}: a .npy file holds one array, and more than one "
                                  "tensor is selected (choose one with --include, or write .npz)")
        array, changed, note = self.dense_array(name, t, source_dtype)
        self._array = _contiguous(array)
        return _Out(str(array.dtype), array.nbytes, (lambda: array) if changed else None, note)

    def finish(self, metadata, report):
        _note_dropped(report, [k for k in metadata if k != SOURCE_DTYPES_KEY],
                      ".npy holds one array only")
        if self._array is None:
            raise ConversionError("no tensor selected; a .npy file holds exactly one")
        with open(self.tmp, "wb") as fp:
            np.lib.format.write_array(fp, self._array, allow_pickle=False)


_GGUF_DENSE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "float64": "F64",
               "int8": "I8", "int16": "I16", "int32": "I32", "int64": "I64"}


def _gguf_quant_type(d: Descriptor) -> Optional[str]:
    q = d.quantization
    if isinstance(q, BlockCoded) and q.format.startswith("ggml_") and isinstance(d.layout, Dense):
        return q.format[5:].upper()  # ggml's block formats are GGUF types, blocks as they are
    if not isinstance(q, BlockAffine) or not isinstance(d.layout, Dense) or not d.shape:
        return None
    if (q.axis != len(d.shape) - 1 or q.block_size != 32 or q.scale_dtype != "float16"
            or q.zero_point_buffer is not None or d.shape[-1] % 32):
        return None
    if d.dtype == "int8" and q.zero_point == 0:
        return "Q8_0"
    if d.dtype == "uint4" and q.zero_point == 8:
        return "Q4_0"
    return None


class _GgufTarget(_FileTarget):
    """F32/F16/BF16/F64/I8-I64 dense tensors and block-affine tensors that
    are exactly Q8_0 or Q4_0, written natively (hurray._formats, the C
    writer, atomically; it re-lays out Q8_0/Q4_0 codes and scales into
    GGUF blocks): no gguf package."""
    format = "gguf"

    def __init__(self, path, options):
        super().__init__(path, options)
        self._plan: List[Tuple[str, str, Tuple[int, ...], Callable[[], np.ndarray], int]] = []

    def check_scheme(self, scheme):
        if scheme is not None and scheme not in ("q8_0", "q4_0"):
            raise UsageError(f"GGUF holds Q8_0 and Q4_0 among hurray's schemes; --quantize "
                             f"{scheme} cannot be written to .gguf (write .hurray or "
                             ".safetensors instead)")

    def quantizable(self, shape):
        if not shape or shape[-1] % 32:
            return (f"GGUF needs the last dimension to be a multiple of 32 "
                    f"(shape {_shape_str(shape)})")
        return None

    def add(self, name, t, source_dtype):
        d = t.descriptor
        note = ""
        if len(d.shape) == 0 or len(d.shape) > 4:
            raise ConversionError(f"tensor {name!r} has rank {len(d.shape)}; GGUF tensors have "
                                  "1 to 4 dimensions")
        if d.quantization is not None:
            kind = _gguf_quant_type(d)
            if kind is None:
                why = ""
                if isinstance(d.quantization, BlockAffine) and d.shape[-1] % 32 and \
                        describe(d) in ("q8_0", "q4_0"):
                    why = f" (its last dimension, {d.shape[-1]}, is not a multiple of 32)"
                raise ConversionError(
                    f"tensor {name!r} is quantized as {describe(d)}{why}, which has no exact GGUF "
                    "type (GGUF's Q8_0 and Q4_0 are block-affine int8 / uint4 codes, block 32 "
                    "along the last axis, float16 scales); export to .safetensors or .hurray "
                    "instead")
            elements, block = ((32, 34) if kind == "Q8_0" else (32, 18) if kind == "Q4_0"
                               else BLOCK_FORMATS[d.quantization.format])
            nb = d.numel // elements
            byte_shape = d.shape[:-1] + (d.shape[-1] // elements * block,)

            def produce(t=t):
                return t  # codes and scales; the C writer makes the blocks

            nbytes = nb * block
            self._plan.append((name, kind, byte_shape, produce, nbytes))
            return _Out(kind, nbytes)
        if isinstance(d.layout, Composite):
            raise ConversionError(f"tensor {name!r} is a composite tensor; GGUF has no form "
                                  "for it")
        dense = isinstance(d.layout, Dense)
        if not dense:
            note = f"{describe(d).split(' ')[-1].strip('()')} densified"
        kind = _GGUF_DENSE.get(d.dtype)
        if kind is None:
            raise ConversionError(f"tensor {name!r} has dtype {d.dtype}, which GGUF cannot "
                                  f"hold (it holds {', '.join(_GGUF_DENSE)}); export to "
                                  ".safetensors or .hurray instead")

        def produce_dense(t=t, dense=dense):
            return from_numpy(_contiguous(t.codes() if dense else t.to_dense()))

        nbytes = _dtypes.storage_bytes(d.dtype, d.numel)
        self._plan.append((name, kind, d.shape, produce_dense, nbytes))
        return _Out(kind, nbytes, None, note)

    def finish(self, metadata, report):
        from . import _formats
        meta = {}
        dropped = []
        for k, v in metadata.items():
            if k.startswith("gguf."):
                meta[k] = v
            elif k != SOURCE_DTYPES_KEY:
                dropped.append(k)
        _note_dropped(report, dropped, "GGUF carries only its own key-value pairs, the "
                                       "hurray keys gguf.*")
        try:
            tensors = [(name, produce().__hurray__()) for name, _, _, produce, _ in self._plan]
            _formats.write(self.tmp, "gguf", tensors, meta)  # publish() renames it
        except (HurrayError, OSError, ValueError, TypeError) as exc:
            raise ConversionError(f"writing {self.path}: {_first_line(exc)}") from None
        kv = [k for k in meta if k not in (GGUF_TYPES_KEY, GGUF_TENSORS_KEY)]
        report.metadata_keys = len(kv) + (0 if "gguf.general.architecture" in meta else 1)

    def abort(self):
        self._plan.clear()
        super().abort()  # the temporary file


def _note_dropped(report: ConversionReport, keys: Sequence[str], why: str) -> None:
    if keys:
        shown = ", ".join(sorted(keys)[:3]) + (f" (+{len(keys) - 3} more)" if len(keys) > 3 else "")
        plural = "s" if len(keys) != 1 else ""
        report.notes.append(f"{len(keys)} metadata key{plural} not carried ({why}): {shown}")


def _target_kind(path: str) -> str:
    low = path.lower()
    for suffix, kind in ((".hurray", "hurray"), (".safetensors", "safetensors"),
                         (".gguf", "gguf"), (".npz", "npz"), (".npy", "npy"), (".pt", "torch"),
                         (".pth", "torch"), (".bin", "torch")):
        if low.endswith(suffix):
            return kind
    raise UsageError(f"cannot tell the format to write from {path!r}; targets end with "
                     f"{', '.join(TARGET_SUFFIXES)}")


_TARGETS = {"hurray": _HurrayTarget, "safetensors": _SafetensorsTarget, "gguf": _GgufTarget,
            "npz": _NpzTarget, "npy": _NpyTarget, "torch": _TorchTarget}


# ============================================================== the conversion

@dataclass
class _Options:
    scheme: Optional[str]
    quantize_include: Tuple[str, ...]
    quantize_exclude: Tuple[str, ...]
    keep_scales: bool
    stats: bool
    threads: int
    block_size: Optional[int]


def _progress(total_bytes: int, count: int, quiet: bool):
    class _Null:
        def update(self, n):
            pass

        def set_postfix_str(self, s, refresh=True):
            pass

        def close(self):
            pass

    if quiet or total_bytes < (64 << 20):
        return _Null()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return _Null()
    # disable=None: no bar when stderr is not a terminal; delay: none for quick runs
    return tqdm(total=total_bytes, unit="B", unit_scale=True, unit_divisor=1024,
                desc="converting", file=sys.stderr, disable=None, delay=1.0, leave=False,
                dynamic_ncols=True)


def convert(src, dst, *, quantize: Optional[str] = None, quantize_include=(),
            quantize_exclude=(), include=(), exclude=(), keep_scales: bool = False,
            stats: bool = False, quiet: bool = False, threads: int = 1,
            block_size: Optional[int] = None, output: str = "table",
            verify: bool = True) -> ConversionReport:
    """Converts the checkpoint `src` into `dst`; the formats follow the file
    names (docs/impl/convert.md). Returns the ConversionReport, and prints
    it to stdout (as a table, or JSON with output="json") unless quiet.

    quantize: a scheme of hurray.QUANT_SCHEMES applied to the tensors the
    default rule picks (default_quantize_rule), plus those matching a
    quantize_include glob, minus those matching a quantize_exclude glob
    (exclude wins). include / exclude: globs choosing which tensors are
    converted at all. keep_scales: a .safetensors target gets quantized
    tensors as codes, scales and zero points instead of dequantized values.
    stats: a .hurray target stores statistics in every descriptor.
    threads: for the quantization kernels. block_size: for block_affine
    and nf4. verify: a .hurray source's tensors are checked against their
    checksums before they are converted (verify=False skips that).
    Raises ConversionError (UsageError for options that do not fit
    together). The target is replaced only when everything succeeded; on
    any error, KeyboardInterrupt included, it is left as it was."""
    src, dst = os.fspath(src), os.fspath(dst)
    opts = _Options(quantize, _patterns(quantize_include), _patterns(quantize_exclude),
                    bool(keep_scales), bool(stats), int(threads), block_size)
    include, exclude = _patterns(include), _patterns(exclude)
    if output not in ("table", "json"):
        raise UsageError(f"output must be 'table' or 'json', not {output!r}")
    if opts.threads < 0:
        raise UsageError("threads must be >= 0")
    if quantize is not None:
        if quantize not in QUANT_SCHEMES:
            raise UsageError(f"unknown quantization scheme {quantize!r}; one of "
                             f"{', '.join(QUANT_SCHEMES)}")
        try:  # options the scheme refuses fail here, before any work
            _quantize(np.zeros((1, 64), np.float32), quantize, block_size=block_size)
        except (HurrayError, ValueError) as exc:
            raise UsageError(f"--quantize {quantize}: {_first_line(exc)}") from None
    elif block_size is not None or opts.quantize_include or opts.quantize_exclude:
        raise UsageError("--block-size, --quantize-include and --quantize-exclude need "
                         "--quantize")
    dst_kind = _target_kind(dst)
    if keep_scales and dst_kind != "safetensors":
        raise UsageError("--keep-scales applies to .safetensors targets (the other formats have "
                         "no place for the quantization parameters)")
    if os.path.exists(dst) and os.path.exists(src) and os.path.samefile(src, dst):
        raise UsageError(f"{dst} is the source itself; write to another file")
    if os.path.isdir(dst):
        raise ConversionError(f"{dst} is a directory; name the file to write")
    target_cls = _TARGETS[dst_kind]

    source = _open_source(src, verify=bool(verify))
    target = None
    try:
        seen = set()
        for n in source.names():  # each source refuses its own collisions; this is the backstop
            if n in seen:
                raise ConversionError(f"{src} holds two tensors named {n!r}")
            seen.add(n)
        names = [n for n in source.names() if _selected(n, include, exclude)]
        for name, why in source.refused().items():
            if _selected(name, include, exclude):
                raise ConversionError(why)
        if not names:
            raise ConversionError(f"no tensor of {src} is selected" if include or exclude
                                  else f"{src} holds no tensors")
        infos = {n: source.info(n) for n in names}  # refuses unsupported tensors up front
        target = target_cls(dst, opts)
        target.check_scheme(quantize)
        target.start()
        report = ConversionReport(src, dst, source.format, target.format, quantize)
        if stats and dst_kind != "hurray":
            report.notes.append("--stats applies to .hurray targets; ignored")
        metadata = source.metadata()
        try:
            src_dtypes = json.loads(metadata.get(SOURCE_DTYPES_KEY, "{}"))
        except ValueError:
            src_dtypes = {}
        new_dtypes: Dict[str, str] = {}
        bar = _progress(sum(i[2] for i in infos.values()), len(names), quiet)
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                for name in names:
                    bar.set_postfix_str(name[-40:], refresh=False)
                    row = _convert_one(name, infos[name], source, target, opts, src_dtypes,
                                       new_dtypes)
                    report.rows.append(row)
                    bar.update(infos[name][2])
        finally:
            bar.close()
        if new_dtypes:
            metadata[SOURCE_DTYPES_KEY] = json.dumps(new_dtypes)
        else:
            metadata.pop(SOURCE_DTYPES_KEY, None)
        if GGUF_TENSORS_KEY in metadata:  # keep the file order of what is kept
            kept = set(names)
            metadata[GGUF_TENSORS_KEY] = json.dumps(
                [n for n in json.loads(metadata[GGUF_TENSORS_KEY]) if n in kept])
        partial = [r.name for r in report.rows if "partial" in r.note]
        if partial:
            report.notes.append(f"{len(partial)} tensor{'s' if len(partial) != 1 else ''} with a "
                                "partial last block (see their notes)")
        target.finish(metadata, report)
        target.publish()  # the last step: nothing after it can fail the conversion
    except BaseException as exc:
        if target is not None:
            target.abort()
        if isinstance(exc, ConversionError):
            raise
        if isinstance(exc, (HurrayError, OSError)):
            raise ConversionError(_first_line(exc)) from exc
        raise
    finally:
        source.close()
    if not quiet:
        print(report.to_json() if output == "json" else report.format())
    return report


def _convert_one(name, info, source, target, opts, src_dtypes, new_dtypes) -> TensorReport:
    label, shape, nbytes_in = info
    try:
        t = source.get(name)
    except ConversionError:
        raise
    except (HurrayError, ValueError, RuntimeError, OSError) as exc:
        raise ConversionError(f"reading tensor {name!r}: {_first_line(exc)}") from None
    d = t.descriptor
    row = TensorReport(name, label, "", tuple(shape), int(nbytes_in))
    notes: List[str] = []
    ref = None
    out = t
    orig = src_dtypes.get(name)
    if _wants_quantization(name, d, opts, target, notes):
        ref = _values(t, opts.threads)
        if d.quantization is None and d.dtype in FLOAT_DTYPES:
            orig = d.dtype
        elif d.quantization is not None:
            notes.append(f"requantized from {describe(d)}")
        try:
            out = _quantize(ref, opts.scheme, block_size=opts.block_size, threads=opts.threads)
        except (HurrayError, ValueError) as exc:
            raise ConversionError(f"quantizing tensor {name!r} ({_shape_str(d.shape)}) with "
                                  f"{opts.scheme}: {_first_line(exc)}") from None
        orig = orig or "float32"
        row.quantized = True
        q = out.descriptor.quantization
        block = getattr(q, "block_size", None)
        if isinstance(q, (BlockAffine, Mxfp)) and out.shape and out.shape[q.axis] % block:
            notes.append(f"partial block: dim {out.shape[q.axis]} is not a multiple of {block}")
        elif isinstance(q, Nf4) and out.descriptor.numel % block:
            notes.append(f"partial block: {out.descriptor.numel} elements, block {block}")
    if orig and (out.descriptor.quantization is not None):
        new_dtypes[name] = orig
    try:
        result = target.add(name, out, orig)
    except ConversionError:
        raise
    except (HurrayError, ValueError, RuntimeError, TypeError) as exc:
        raise ConversionError(f"writing tensor {name!r}: {_first_line(exc)}") from None
    row.output = result.label
    row.bytes_out = int(result.nbytes)
    if result.note:
        notes.append(result.note)
    if row.quantized or result.values is not None:
        if ref is None:
            ref = _values(t, opts.threads)
        final = result.values() if result.values is not None else out.dequantize(
            np.float32, threads=opts.threads)
        measured = _measure(ref, final, opts.threads)
        row.max_abs_error, row.rmse, row.cosine, row._sums = measured
        row.exact = False
    else:
        row._sums = (0, 0.0, 0.0, 0.0, 0.0)
    row.note = "; ".join(notes)
    return row


def _wants_quantization(name, d: Descriptor, opts: _Options, target: _Target, notes) -> bool:
    if opts.scheme is None or _matches(name, opts.quantize_exclude):
        return False
    quantized = d.quantization is not None
    forced = _matches(name, opts.quantize_include)
    if not forced and not default_quantize_rule(name, d.dtype, d.shape, quantized):
        return False
    if forced and not quantized and d.dtype not in _ANY_FLOAT:
        notes.append(f"--quantize-include matched, but {d.dtype} is not floating point: kept")
        return False
    if isinstance(d.layout, Composite):
        notes.append("composite: kept")
        return False
    if forced and quantized and describe(d) == opts.scheme:
        return False  # already in the scheme asked for
    why = target.quantizable(d.shape)
    if why is not None:
        if forced:
            raise ConversionError(f"tensor {name!r} cannot be quantized with {opts.scheme} for "
                                  f"{target.format}: {why}")
        notes.append(f"not quantized: {why}")
        return False
    return True
