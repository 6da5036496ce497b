"""gpt-oss MXFP4 (quantization_config.quant_method "mxfp4").

`<p>_blocks` uint8 [..., N, K/32, 16] holds FP4 E2M1 codes, two a byte, the
LOW nibble first (transformers' convert_moe_packed_tensors writes
lut[blk & 0x0F] to the even positions and lut[blk >> 4] to the odd ones);
`<p>_scales` uint8 [..., N, K/32] one E8M0 exponent per 32 elements along
K: value = fp4 * 2^(scale - 127). In gpt-oss these are the experts'
`gate_up_proj` [E, 2I, H] and `down_proj` [E, H, I].

hurray: one MX tensor (element fp4_e2m1, block 32 along the last axis)
named `<p>` (the name transformers gives the dequantized parameter), shape
[..., N, K]: the blocks are hurray's packed FP4 stream byte for byte (same
nibble order), the scales its E8M0 scale buffer. The orientation is the
stored one, [experts, out, in]; transformers transposes the dequantized
experts to [E, in, out] for its own matmul, which is not a storage concern.
A scale byte 0xFF decodes to NaN here (OCP E8M0); gpt-oss never writes it.
"""

from __future__ import annotations

from ..._descriptor import Mxfp
from . import Built, Family, Group, register


def _build(group: Group) -> Built:
    group.expect("blocks", ("uint8",))
    group.expect("scales", ("uint8", "float8_e8m0fnu"))
    bshape = tuple(group.shape("blocks"))
    if len(bshape) < 3 or bshape[-1] != 16:
        raise group.error("blocks", f"has shape {list(bshape)}, expected [..., rows, K/32, 16]")
    if tuple(group.shape("scales")) != bshape[:-1]:
        raise group.error(
            "scales",
            f"has shape {list(group.shape('scales'))}, expected {list(bshape[:-1])} "
            f"(one per 16 bytes of {group.source_name('blocks')!r})",
        )
    shape = bshape[:-2] + (bshape[-2] * 32,)
    q = Mxfp(element="fp4_e2m1", axis=len(shape) - 1, scale_buffer=1, block_size=32)
    return Built("float4_e2m1fn", shape, q, [("data", "blocks"), ("scales", "scales")])


# <p>_blocks and <p>_scales become <p> (gate_up_proj, down_proj)
register(
    Family(
        name="mxfp4",
        detect=lambda qc: str(qc.get("quant_method", "")).lower() == "mxfp4",
        anchor="blocks",
        members=("blocks", "scales"),
        build=_build,
        output_name="",
        separator="_",
    )
)
