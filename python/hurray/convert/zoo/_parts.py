"""What the floating-point zoo families (fp8, bnb, nvfp4, mxfp4) share: the
checks on the safetensors tensors that make up one quantized weight, with
errors that name the tensor, and the hurray Tensor built over their bytes.

A part is a dense hurray Tensor read from the checkpoint (its descriptor
gives the safetensors dtype and shape; its one buffer holds the bytes as
stored). Each family maps every part onto one buffer of the new tensor,
byte for byte, so that converting back restores it unchanged.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..._descriptor import Buffer, Descriptor
from ..._tensor import Tensor
from .._common import ConversionError, _first_line, _shape_str

Part = Tensor


def raw(part: Part) -> np.ndarray:
    """The part's stored bytes, as a flat uint8 array (no copy)."""
    return np.frombuffer(part.buffers[0], np.uint8)


def shape_of(part: Part) -> Tuple[int, ...]:
    return tuple(part.descriptor.shape)


def need(parts: Mapping[str, Part], role: str, names: Mapping[str, str], weight: str) -> Part:
    """The part playing `role`, or a one-line error naming what is missing."""
    part = parts.get(role)
    if part is None:
        raise ConversionError(
            f"tensor {names.get(role, role)!r}: missing; quantized weight {weight!r} needs it"
        )
    return part


def check_dtype(name: str, part: Part, allowed: Sequence[str]) -> str:
    dtype = part.descriptor.dtype
    if dtype not in allowed:
        raise ConversionError(
            f"tensor {name!r}: dtype {dtype}, expected {' or '.join(allowed)}"
        )
    return dtype


def check_shape(name: str, part: Part, expected: Sequence[int], what: str = "") -> None:
    got = shape_of(part)
    if got != tuple(expected):
        why = f" ({what})" if what else ""
        raise ConversionError(
            f"tensor {name!r}: shape {_shape_str(got)}, expected {_shape_str(tuple(expected))}{why}"
        )


def check_rank(name: str, part: Part, ranks: Sequence[int]) -> Tuple[int, ...]:
    got = shape_of(part)
    if len(got) not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ConversionError(f"tensor {name!r}: shape {_shape_str(got)}, expected rank {want}")
    return got


def numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def positive_int(value: Any, key: str, where: str = "quantization_config") -> int:
    """A config value that must be a positive integer (bool is not)."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConversionError(f"config.json {where}.{key}: {value!r} is not a positive integer")
    return value


def config_key(config: Mapping[str, Any], key: str, where: str = "quantization_config") -> Any:
    if not isinstance(config, Mapping) or key not in config:
        raise ConversionError(f"config.json {where}: missing key {key!r}")
    return config[key]


def tensor(
    weight: str,
    dtype: str,
    shape: Sequence[int],
    quantization: Any,
    buffers: List[Tuple[str, Part]],
) -> Tensor:
    """The hurray tensor over the parts' own bytes: buffers[i] = (role, part).
    A descriptor the C library refuses becomes an error naming the weight."""
    arrays = [raw(p) for _, p in buffers]
    try:
        d = Descriptor(
            dtype,
            tuple(int(s) for s in shape),
            quantization=quantization,
            buffers=[Buffer(role, a.size) for (role, _), a in zip(buffers, arrays)],
        )
        return Tensor(d, arrays)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ConversionError(f"tensor {weight!r}: {_first_line(exc)}") from None
    except Exception as exc:  # HurrayError and its subclasses
        if type(exc).__module__.startswith("hurray"):
            raise ConversionError(f"tensor {weight!r}: {_first_line(exc)}") from None
        raise


def json_part(name: str, part: Part) -> Dict[str, Any]:
    """A uint8 tensor holding a JSON object (bitsandbytes' quant_state)."""
    check_dtype(name, part, ("uint8",))
    try:
        value = json.loads(bytes(raw(part)).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConversionError(f"tensor {name!r}: not a JSON object: {_first_line(exc)}") from None
    if not isinstance(value, dict):
        raise ConversionError(f"tensor {name!r}: not a JSON object")
    return value


def strip(name: str, suffix: str) -> Optional[str]:
    return name[: -len(suffix)] if name.endswith(suffix) and len(name) > len(suffix) else None
