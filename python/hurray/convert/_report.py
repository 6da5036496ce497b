"""The conversion report: one row a tensor, totals, and the error measures
(max abs, RMSE, cosine against the source's values, in float64)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import numpy as np

from .._shown import counted, shown
from .._threads import map_on_threads
from ._common import ConversionError, _shape_str


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
    _sums: Tuple[int, float, float, float, float] = field(
        default=(0, 0.0, 0.0, 0.0, 0.0), repr=False, compare=False
    )

    @property
    def ratio(self) -> float:
        return _ratio_of(self.bytes_in, self.bytes_out)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "source_dtype": self.source_dtype,
            "output": self.output,
            "shape": list(self.shape),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "ratio": _json_float(self.ratio),
            "quantized": self.quantized,
            "exact": self.exact,
            "max_abs_error": _json_float(self.max_abs_error),
            "rmse": _json_float(self.rmse),
            "cosine": _json_float(self.cosine),
            "note": self.note,
        }


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
        return {
            "tensors": self.tensors,
            "quantized": self.quantized,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "ratio": _json_float(self.ratio),
            "max_abs_error": _json_float(self.max_abs_error),
            "rmse": _json_float(self.rmse),
            "cosine": _json_float(self.cosine),
        }


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
            if r.max_abs_error is not None:
                max_abs = _max_keeping_nan(max_abs, r.max_abs_error)
        rmse = math.sqrt(sq / n) if n else 0.0
        cosine = _cosine(dot, na, nb) if n else 1.0
        return ReportTotals(
            len(self.rows),
            sum(r.quantized for r in self.rows),
            sum(r.bytes_in for r in self.rows),
            sum(r.bytes_out for r in self.rows),
            max_abs,
            rmse,
            cosine,
        )

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "target": self.target,
            "source_format": self.source_format,
            "target_format": self.target_format,
            "scheme": self.scheme,
            "tensors": [r.to_dict() for r in self.rows],
            "totals": self.totals.to_dict(),
            "metadata_keys": self.metadata_keys,
            "notes": list(self.notes),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def format(self) -> str:
        """The report as an aligned text table, a totals line, then notes."""
        head = (
            "tensor",
            "from",
            "to",
            "shape",
            "in",
            "out",
            "ratio",
            "max abs",
            "rmse",
            "cosine",
            "note",
        )
        lines = []
        for r in self.rows:
            lines.append(
                (
                    shown(r.name),
                    r.source_dtype,
                    r.output,
                    _shape_str(r.shape),
                    _size(r.bytes_in),
                    _size(r.bytes_out),
                    _ratio(r.ratio),
                    _err(r.max_abs_error),
                    _err(r.rmse),
                    _cos(r.cosine),
                    shown(r.note, 0),
                )
            )
        t = self.totals
        lines.append(
            (
                f"total: {counted(t.tensors, 'tensor')}, {t.quantized} quantized",
                "",
                "",
                "",
                _size(t.bytes_in),
                _size(t.bytes_out),
                _ratio(t.ratio),
                _err(t.max_abs_error),
                _err(t.rmse),
                _cos(t.cosine),
                "",
            )
        )
        widths = [max(len(row[i]) for row in [head] + lines) for i in range(len(head))]
        right = {4, 5, 6, 7, 8, 9}

        def render(row):
            cells = [
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(row, widths))
            ]
            return "  ".join(cells).rstrip()

        out = [render(head), render(tuple("-" * w for w in widths))]
        out += [render(row) for row in lines[:-1]]
        out.append(render(tuple("-" * w for w in widths)))
        out.append(render(lines[-1]))
        out.append(
            f"{self.source_format} -> {self.target_format}: {shown(self.target, 0)}"
            f" ({counted(self.metadata_keys, 'metadata key')})"
        )
        out += [f"note: {shown(n, 0)}" for n in self.notes]
        return "\n".join(out)


def _ratio_of(bytes_in: int, bytes_out: int) -> float:
    if bytes_out:
        return bytes_in / bytes_out
    return 1.0 if bytes_in == 0 else math.inf


def _json_float(v):
    if v is None or math.isfinite(v):
        return v
    return str(v)  # "inf", "nan": JSON has no literal for them


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


def _max_keeping_nan(a: float, b: float) -> float:
    """The larger, NaN once either is: an error that was NaN somewhere stays
    NaN in every total (a later finite maximum replaced it)."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return max(a, b)


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
    ca, cb = a[start : start + _CHUNK], b[start : start + _CHUNK]
    m = ca.size
    x, y, d = x[:m], y[:m], d[:m]
    np.copyto(x, ca, casting="unsafe")
    np.copyto(y, cb, casting="unsafe")
    with np.errstate(invalid="ignore", over="ignore"):
        np.subtract(x, y, out=d)
        top = max(float(d.max()), -float(d.min()))
        if np.isnan(top):
            top = math.nan
        return (
            top,
            float(np.einsum("i,i->", d, d)),
            float(np.einsum("i,i->", x, y)),
            float(np.einsum("i,i->", x, x)),
            float(np.einsum("i,i->", y, y)),
        )


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
        parts = map_on_threads(lambda s: _chunk_sums(a, b, s, local), starts, threads)
    else:
        parts = [_chunk_sums(a, b, s, local) for s in starts]
    max_abs, sq, dot, na, nb = 0.0, 0.0, 0.0, 0.0, 0.0
    for top, s2, d2, a2, b2 in parts:
        max_abs = _max_keeping_nan(max_abs, top)
        sq, dot, na, nb = sq + s2, dot + d2, na + a2, nb + b2
    n = a.size
    rmse = math.sqrt(sq / n) if n else 0.0
    return max_abs, rmse, _cosine(dot, na, nb), (n, sq, dot, na, nb)
