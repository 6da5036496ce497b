"""gpt-oss MXFP4 (quantization_config.quant_method "mxfp4").

`<p>_blocks` uint8 [..., N, K/32, 16] holds FP4 E2M1 codes, two a byte,
the LOW nibble first (element 2j in bits 0-3 of byte j, element 2j+1 in bits
4-7: transformers' convert_moe_packed_tensors writes lut[blk & 0xF] to the
even positions); `<p>_scales` uint8 [..., N, K/32] one E8M0 exponent per 32
elements along K (value = fp4 * 2^(scale - 127)). In gpt-oss these are the
experts' `gate_up_proj` [E, 2I, H] and `down_proj` [E, H, I].

hurray: one MX tensor (element fp4_e2m1, block 32 along the last axis)
named `<p>` (the name transformers gives the dequantized parameter), shape
[..., N, K]: the blocks are hurray's packed FP4 stream byte for byte (same
nibble order), the scales its E8M0 scale buffer. The orientation is the
stored one, [experts, out, in]; transformers transposes the dequantized
experts to [E, in, out] for its own matmul, which is not a storage
concern. A scale byte 0xFF decodes to NaN here (OCP E8M0); gpt-oss never
writes it.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping

from ..._descriptor import Mxfp
from .._common import ConversionError
from . import _parts
from ._parts import Part

NAME = "mxfp4"


def matches(qconfig: Mapping[str, Any]) -> bool:
    return qconfig.get("quant_method") == "mxfp4"


def plan(names: Iterable[str], qconfig: Mapping[str, Any]) -> Dict[str, Dict[str, str]]:
    """{hurray tensor name: {"blocks": ..., "scales": ...}}."""
    have = set(names)
    out: Dict[str, Dict[str, str]] = {}
    for name in have:
        prefix = _parts.strip(name, "_blocks")
        if prefix is None:
            continue
        scales = prefix + "_scales"
        if scales not in have:
            raise ConversionError(f"tensor {scales!r}: missing; its blocks {name!r} are there")
        if prefix in have:
            raise ConversionError(
                f"tensor {prefix!r} is in the checkpoint beside {name!r}; "
                "the MXFP4 weight would take its name"
            )
        out[prefix] = {"blocks": name, "scales": scales}
    for name in have:
        prefix = _parts.strip(name, "_scales")
        if prefix is not None and prefix + "_blocks" not in have and prefix not in out:
            # a lone *_scales is only ours when a *_blocks exists somewhere
            if any(n.endswith("_blocks") for n in have):
                raise ConversionError(
                    f"tensor {prefix + '_blocks'!r}: missing; its scales {name!r} are there"
                )
    return out


def build(
    weight: str, parts: Mapping[str, Part], names: Mapping[str, str], qconfig: Mapping[str, Any]
):
    blocks = _parts.need(parts, "blocks", names, weight)
    scales = _parts.need(parts, "scales", names, weight)
    bname, sname = names["blocks"], names["scales"]
    _parts.check_dtype(bname, blocks, ("uint8",))
    _parts.check_dtype(sname, scales, ("uint8", "float8_e8m0fnu"))
    bshape = _parts.shape_of(blocks)
    if len(bshape) < 3 or bshape[-1] != 16:
        raise ConversionError(
            f"tensor {bname!r}: shape {list(bshape)}, expected [..., rows, K/32, 16]"
        )
    _parts.check_shape(sname, scales, bshape[:-1], f"one scale per 16 bytes of {bname!r}")
    shape = tuple(bshape[:-2]) + (bshape[-2] * 32,)
    q = Mxfp(element="fp4_e2m1", axis=len(shape) - 1, scale_buffer=1, block_size=32)
    return _parts.tensor(weight, "float4_e2m1fn", shape, q, [("data", blocks), ("scales", scales)])
