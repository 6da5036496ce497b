"""bitsandbytes 4-bit (NF4 and FP4), with or without double quantization,
as transformers saves it (quantization_config quant_method "bitsandbytes",
load_in_4bit). For a linear `<p>` (Params4bit's state dict, from
QuantState.as_dict(packed=True)):

  <p>.weight                  uint8 [ceil(numel/2), 1]: the codes, two a
                              byte, the FIRST element in the HIGH nibble
  <p>.weight.absmax           float32 [blocks], or uint8 [blocks] when nested
  <p>.weight.quant_map        float32 [16]: the code book (NF4 or FP4)
  <p>.weight.nested_absmax    float32 [ceil(blocks / nested_blocksize)]  (nested)
  <p>.weight.nested_quant_map float32 [256]: the 8-bit dynamic map      (nested)
  <p>.weight.quant_state.bitsandbytes__nf4 (or __fp4)
                              uint8: a JSON object with quant_type,
                              blocksize, dtype, shape and, nested,
                              nested_blocksize, nested_dtype, nested_offset

bitsandbytes.functional.dequantize_4bit forms each block's absmax first:
nested_quant_map[absmax[b]] * nested_absmax[b // nested_blocksize], then
`absmax += offset` (float32); then quant_map[code] * absmax[i // blocksize]
over the flat row-major elements.

hurray: the NF4 kind (flat row-major order), block = blocksize, codes
packed in 8-bit words with lane order [1, 0] (high nibble first), code
book = quant_map; nested: absmax uint8 with scale code book =
nested_quant_map, super scales = nested_absmax (super_block_size =
nested_blocksize, multiply) and scale_offset = nested_offset
(docs/spec/quantization.md §5.6, §7.5). The quant_state JSON is no buffer:
the conversion keeps its bytes in the metadata and restores them.
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict

from ..._descriptor import Nf4
from . import INLINE_LIMIT, Built, Family, Group, config_value, packing, register

_STATES = ("weight.quant_state.bitsandbytes__nf4", "weight.quant_state.bitsandbytes__fp4")
_NESTED = ("weight.nested_absmax", "weight.nested_quant_map")
_DTYPES = ("float32", "float16", "bfloat16")
_LIMIT = 1 << 62  # sizes at or past this are no tensor's


def _state(group: Group) -> tuple:
    have = [s for s in _STATES if s in group.tensors]
    if len(have) != 1:
        raise group.error(
            "weight",
            "has no quant_state.bitsandbytes__nf4 (or __fp4) beside it"
            if not have
            else "has both an nf4 and an fp4 quant_state",
        )
    member = have[0]
    group.expect(member, ("uint8",))
    size = math.prod(group.shape(member))
    if size > INLINE_LIMIT:  # kept in the metadata, and parsed whole: a few hundred bytes
        raise group.error(member, f"is {size} bytes; a quant_state is at most {INLINE_LIMIT}")
    try:
        state = json.loads(bytes(group.array(member)).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise group.error(member, f"does not hold a JSON object: {exc}") from None
    if not isinstance(state, dict):
        raise group.error(member, "does not hold a JSON object")
    return member, state


def _key(group: Group, member: str, state: Dict[str, Any], key: str, kinds) -> Any:
    if key not in state:
        raise group.error(member, f"has no {key!r} key")
    v = state[key]
    if isinstance(v, bool) or not isinstance(v, kinds):
        raise group.error(member, f"has {key!r} {v!r}")
    return v


def _shaped(group: Group, member: str, dtypes, shape, what: str) -> None:
    group.expect(member, dtypes)
    if tuple(group.shape(member)) != tuple(shape):
        raise group.error(
            member, f"has shape {list(group.shape(member))}, expected {list(shape)} ({what})"
        )


def _build(group: Group) -> Built:
    member, state = _state(group)
    kind = _key(group, member, state, "quant_type", str)
    if not member.endswith("__" + kind):
        raise group.error(member, f"says quant_type {kind!r}")
    block = _key(group, member, state, "blocksize", int)
    shape = _key(group, member, state, "shape", list)
    if (
        not 0 < block < _LIMIT
        or not shape
        or not all(
            isinstance(s, int) and not isinstance(s, bool) and 0 <= s < _LIMIT for s in shape
        )
    ):
        raise group.error(member, f"has blocksize {block!r} and shape {shape!r}")
    dtype = str(_key(group, member, state, "dtype", str)).replace("torch.", "")
    if dtype not in _DTYPES:
        raise group.error(member, f"has dtype {dtype!r}, not a 16- or 32-bit float")
    n = math.prod(shape)
    blocks = -(-n // block)
    group.expect("weight", ("uint8",))
    if math.prod(group.shape("weight")) != -(-n // 2):
        raise group.error(
            "weight",
            f"has {math.prod(group.shape('weight'))} bytes, expected {-(-n // 2)} for the "
            f"{n} 4-bit codes of shape {shape}",
        )
    if n % 2:
        # bitsandbytes pads the last byte's low nibble; hurray's packed words
        # must fill the packed axis (docs/spec/quantization.md §5.6)
        raise group.error(
            "weight", f"holds an odd number of 4-bit codes ({n}, shape {shape}); not supported"
        )
    _shaped(group, "weight.quant_map", ("float32",), (16,), "the 4-bit code book")
    nested = "nested_blocksize" in state
    for m in _NESTED:
        if (m in group.tensors) != nested:
            raise group.error(
                m if not nested else member,
                "is there without nested_blocksize in the quant_state"
                if not nested
                else f"has nested_blocksize, but {group.source_name(m)!r} is missing",
            )
    parts = [("data", "weight"), ("scales", "weight.absmax"), ("codebook", "weight.quant_map")]
    fields: Dict[str, Any] = dict(
        block_size=block, absmax_buffer=1, codebook_buffer=2, code_packing=packing(8, 0, (1, 0))
    )
    if not nested:
        _shaped(group, "weight.absmax", ("float32",), (blocks,), f"one per {block} elements")
        fields["absmax_dtype"] = "float32"
    else:
        nblock = _key(group, member, state, "nested_blocksize", int)
        offset = _key(group, member, state, "nested_offset", (int, float))
        if not 0 < nblock < _LIMIT:
            raise group.error(member, f"has nested_blocksize {nblock}")
        _shaped(group, "weight.absmax", ("uint8",), (blocks,), f"one code per {block} elements")
        _shaped(
            group,
            "weight.nested_absmax",
            ("float32",),
            (-(-blocks // nblock),),
            f"one per {nblock} absmax codes",
        )
        _shaped(group, "weight.nested_quant_map", ("float32",), (256,), "the absmax code book")
        parts += [("super_scales", "weight.nested_absmax"), ("codebook", "weight.nested_quant_map")]
        fields.update(
            absmax_dtype="uint8",
            super_scale_buffer=3,
            super_scale_dtype="float32",
            super_block_size=nblock,
            super_op="multiply",
            scale_offset=float(offset),
            scale_codebook_buffer=4,
        )
    return Built("uint4", tuple(shape), Nf4(**fields), parts)


def _four_bit(qc) -> bool:
    """load_in_4bit (or transformers' _load_in_4bit), which must be a bool:
    the string "false" is true to Python."""
    return any(
        config_value(qc, key, "bitsandbytes", bool, default=False)
        for key in ("load_in_4bit", "_load_in_4bit")
    )


register(
    Family(
        name="bitsandbytes",
        detect=lambda qc: (
            str(qc.get("quant_method", "")).lower() == "bitsandbytes" and _four_bit(qc)
        ),
        anchor="weight.absmax",
        members=("weight", "weight.absmax", "weight.quant_map"),
        optional=_NESTED + _STATES,
        build=_build,
    )
)
