"""Which tensors are converted (--include/--exclude) and which are
quantized: the default rule, the globs and what a target can hold."""

from __future__ import annotations

import fnmatch
from typing import TYPE_CHECKING, Sequence, Tuple

from .._descriptor import Composite, Descriptor
from ._common import _ANY_FLOAT, FLOAT_DTYPES, ConversionError
from .layouts import describe

if TYPE_CHECKING:
    from ._driver import _Options
    from ._target import _Target

_SKIP_WORDS = ("embed", "embd", "wte", "wpe", "norm", "ln_", ".ln", "lm_head", "router", "gate_inp")
_SKIP_EXACT = ("output.weight",)  # GGUF's output head (lm_head in other formats)


def default_quantize_rule(
    name: str, dtype: str, shape: Sequence[int], quantized: bool = False
) -> bool:
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
    """A glob or a sequence of them; bytes are refused, not made "b'...'",
    which matches nothing (an exclusion silently lost)."""
    if value is None:
        return ()
    if isinstance(value, str):
        value = (value,)
    if isinstance(value, (bytes, bytearray)) or not hasattr(value, "__iter__"):
        raise TypeError(f"a glob is a str, or a list of them, not {type(value).__name__}")
    globs = tuple(value)
    for g in globs:
        if not isinstance(g, str):
            raise TypeError(f"a glob is a str, not {type(g).__name__} ({g!r})")
    return globs


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _selected(name: str, include, exclude) -> bool:
    if include and not _matches(name, include):
        return False
    return not _matches(name, exclude)


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
            raise ConversionError(
                f"tensor {name!r} cannot be quantized with {opts.scheme} for {target.format}: {why}"
            )
        notes.append(f"not quantized: {why}")
        return False
    return True
