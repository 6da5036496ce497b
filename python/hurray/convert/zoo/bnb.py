"""bitsandbytes 4-bit (NF4 and FP4), with or without double quantization,
as transformers saves it (quantization_config quant_method "bitsandbytes",
load_in_4bit). For a linear `<p>`:

  <p>.weight                 uint8 [ceil(numel/2), 1]: codes, two a byte,
                             the FIRST element in the HIGH nibble
  <p>.weight.absmax          float32 [blocks], or uint8 [blocks] when nested
  <p>.weight.quant_map       float32 [16]: the code book (NF4 or FP4)
  <p>.weight.nested_absmax   float32 [ceil(blocks / nested_blocksize)]   (nested)
  <p>.weight.nested_quant_map float32 [256]: the 8-bit dynamic map       (nested)
  <p>.weight.quant_state.bitsandbytes__nf4 (or __fp4)
                             uint8: a JSON object with quant_type, blocksize,
                             dtype, shape and, nested, nested_blocksize,
                             nested_dtype, nested_offset

bitsandbytes.functional.dequantize_4bit forms each block's absmax first,
nested_quant_map[absmax[b]] * nested_absmax[b // nested_blocksize] + offset
(float32, dequantize_blockwise then `absmax += offset`), then
quant_map[code] * absmax[block].

hurray: the NF4 kind over the flat row-major [out, in] element order, block
= blocksize, codes packed with word_bits 8 and lane order {1, 0} (high
nibble first), code book = quant_map; nested: absmax uint8 with scale code
book = nested_quant_map, super scales = nested_absmax, super_block_size =
nested_blocksize, multiply, scale_offset = nested_offset (ADR-0024). Every
tensor above but the quant_state is one buffer, byte for byte; the
quant_state JSON is kept verbatim by the conversion's metadata.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, Mapping

from ..._descriptor import Nf4
from .._common import ConversionError
from . import _parts
from ._parts import Part

NAME = "bitsandbytes"
_STATE = ".quant_state.bitsandbytes__"
_DTYPES = ("float32", "float16", "bfloat16")


def matches(qconfig: Mapping[str, Any]) -> bool:
    return qconfig.get("quant_method") == "bitsandbytes" and bool(
        qconfig.get("load_in_4bit") or qconfig.get("_load_in_4bit")
    )


def plan(names: Iterable[str], qconfig: Mapping[str, Any]) -> Dict[str, Dict[str, str]]:
    have = set(names)
    out: Dict[str, Dict[str, str]] = {}
    for name in have:
        at = name.find(_STATE)
        if at <= 0 or name[at + len(_STATE) :] not in ("nf4", "fp4"):
            continue
        weight = name[:at]
        if weight in out:
            raise ConversionError(f"tensor {weight!r}: two quant_state tensors, one is {name!r}")
        roles = {
            "codes": weight,
            "absmax": weight + ".absmax",
            "quant_map": weight + ".quant_map",
            "state": name,
        }
        if weight + ".nested_absmax" in have or weight + ".nested_quant_map" in have:
            roles["nested_absmax"] = weight + ".nested_absmax"
            roles["nested_quant_map"] = weight + ".nested_quant_map"
        for role, part in roles.items():
            if part not in have:
                raise ConversionError(f"tensor {part!r}: missing; {name!r} is there")
        out[weight] = roles
    return out


def _state(sname: str, state: Dict[str, Any], key: str) -> Any:
    if key not in state:
        raise ConversionError(f"tensor {sname!r}: quant_state has no {key!r}")
    return state[key]


def build(
    weight: str, parts: Mapping[str, Part], names: Mapping[str, str], qconfig: Mapping[str, Any]
):
    sname = names["state"]
    state = _parts.json_part(sname, _parts.need(parts, "state", names, weight))
    kind = _state(sname, state, "quant_type")
    if kind not in ("nf4", "fp4") or not sname.endswith("__" + kind):
        raise ConversionError(f"tensor {sname!r}: quant_type {kind!r} does not match its name")
    block = _state(sname, state, "blocksize")
    if isinstance(block, bool) or not isinstance(block, int) or block <= 0:
        raise ConversionError(f"tensor {sname!r}: blocksize {block!r} is not a positive integer")
    shape = _state(sname, state, "shape")
    if (
        not isinstance(shape, list)
        or not shape
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
    ):
        raise ConversionError(f"tensor {sname!r}: shape {shape!r} is not a list of sizes")
    dtype = str(_state(sname, state, "dtype")).replace("torch.", "")
    if dtype not in _DTYPES:
        raise ConversionError(f"tensor {sname!r}: dtype {dtype!r} is not a 16/32-bit float")
    n = math.prod(shape)
    blocks = _parts.ceil_div(n, block)

    codes = _parts.need(parts, "codes", names, weight)
    _parts.check_dtype(weight, codes, ("uint8",))
    if _parts.numel(_parts.shape_of(codes)) != _parts.ceil_div(n, 2):
        raise ConversionError(
            f"tensor {weight!r}: {_parts.numel(_parts.shape_of(codes))} bytes, "
            f"expected {_parts.ceil_div(n, 2)} for {n} 4-bit codes (quant_state shape {shape})"
        )
    qmap = _parts.need(parts, "quant_map", names, weight)
    _parts.check_dtype(names["quant_map"], qmap, ("float32",))
    _parts.check_shape(names["quant_map"], qmap, (16,), "the 4-bit code book")
    absmax = _parts.need(parts, "absmax", names, weight)
    nested = "nested_absmax" in names
    if nested != ("nested_blocksize" in state):
        raise ConversionError(
            f"tensor {sname!r}: nested_blocksize "
            f"{'missing' if nested else 'given'}, nested tensors {'given' if nested else 'missing'}"
        )
    buffers = [("data", codes), ("scales", absmax), ("codebook", qmap)]
    fields: Dict[str, Any] = dict(
        block_size=block,
        absmax_buffer=1,
        codebook_buffer=2,
        code_packing={"word_bits": 8, "axis": 0, "order": (1, 0)},
    )
    if not nested:
        _parts.check_dtype(names["absmax"], absmax, ("float32",))
        _parts.check_shape(names["absmax"], absmax, (blocks,), f"one per {block} elements")
        fields["absmax_dtype"] = "float32"
    else:
        nblock = _state(sname, state, "nested_blocksize")
        if isinstance(nblock, bool) or not isinstance(nblock, int) or nblock <= 0:
            raise ConversionError(
                f"tensor {sname!r}: nested_blocksize {nblock!r} is not a positive integer"
            )
        offset = _state(sname, state, "nested_offset")
        if isinstance(offset, bool) or not isinstance(offset, (int, float)):
            raise ConversionError(f"tensor {sname!r}: nested_offset {offset!r} is not a number")
        _parts.check_dtype(names["absmax"], absmax, ("uint8",))
        _parts.check_shape(names["absmax"], absmax, (blocks,), f"one per {block} elements")
        nabs = _parts.need(parts, "nested_absmax", names, weight)
        nmap = _parts.need(parts, "nested_quant_map", names, weight)
        _parts.check_dtype(names["nested_absmax"], nabs, ("float32",))
        _parts.check_shape(
            names["nested_absmax"],
            nabs,
            (_parts.ceil_div(blocks, nblock),),
            f"one per {nblock} absmax codes",
        )
        _parts.check_dtype(names["nested_quant_map"], nmap, ("float32",))
        _parts.check_shape(names["nested_quant_map"], nmap, (256,), "the 8-bit absmax code book")
        buffers += [("super_scales", nabs), ("codebook", nmap)]
        fields.update(
            absmax_dtype="uint8",
            super_scale_buffer=3,
            super_scale_dtype="float32",
            super_block_size=nblock,
            super_op="multiply",
            scale_offset=float(offset),
            scale_codebook_buffer=4,
        )
    return _parts.tensor(weight, "uint4", shape, Nf4(**fields), buffers)
