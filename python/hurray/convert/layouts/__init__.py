"""Quantized layouts the converter knows by name: a registry of
recognisers, one a layout, each in a module of this package.

A recogniser looks at a descriptor and says whether the tensor is stored in
its layout; the first that answers names it. Reports, --quantize's "already
in that scheme" test and the error messages show that name. A layout that a
foreign format holds bit for bit says which type there (`gguf_type`), so the
targets can offer it; whether a given tensor fits that type, and its byte
size, stays the C library's decision (src/formats/convert.c).

To add a layout (the GGUF K-quants, say): a module here that calls
`register(Layout(...))`, imported at the bottom of this file, ahead of any
more general layout it is a special case of.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional

from ..._descriptor import Composite, Dense, Descriptor


@dataclass(frozen=True)
class Layout:
    """One quantized layout. `label(d)` is the layout's name for a
    descriptor stored in it (it may carry parameters, "nf4(32)"), None for
    any other. `gguf_type` is the GGUF type holding it bit for bit, and
    `gguf_block` that type's elements per block along the last axis."""

    name: str
    label: Callable[[Descriptor], Optional[str]]
    gguf_type: Optional[str] = None
    gguf_block: int = 0


LAYOUTS: List[Layout] = []


def register(layout: Layout) -> Layout:
    """Adds a layout after those registered before it (they are tried first)."""
    LAYOUTS.append(layout)
    return layout


def recognise(d: Descriptor) -> Optional[str]:
    """The name of the layout `d` is stored in, or None if none knows it."""
    for layout in LAYOUTS:
        label = layout.label(d)
        if label is not None:
            return label
    return None


def gguf_layouts() -> List[Layout]:
    """The layouts GGUF holds bit for bit, in registry order."""
    return [layout for layout in LAYOUTS if layout.gguf_type is not None]


def describe(d: Descriptor) -> str:
    """A short name for what a tensor holds: a dtype, or a layout name,
    with the sparse or paged format after it in parentheses."""
    layout = d.layout
    if isinstance(layout, Composite):
        return "composite"
    suffix = ""
    if not isinstance(layout, Dense):
        suffix = f" ({getattr(layout, 'format', type(layout).__name__.lower())})"
    if d.quantization is None:
        return d.dtype + suffix
    return (recognise(d) or "quantized") + suffix


# Registration order is match order: exact forms before general ones.
# isort: off
from . import ggml  # noqa: E402,F401  (q8_0, q4_0)
from . import affine  # noqa: E402,F401  (block_affine, per_channel, affine)
from . import nf4  # noqa: E402,F401
from . import mx  # noqa: E402,F401
from . import block_coded  # noqa: E402,F401  (GGUF's K-quant, IQ, ... blocks)
# isort: on
