"""GGUF's Q8_0 and Q4_0 as hurray stores them: block_affine codes, block 32
along the last axis, float16 scales, a fixed zero point (0 for int8 codes,
8 for uint4). The block re-layout between the two is src/formats/gguf.c's."""

from __future__ import annotations

from typing import Callable, Optional

from ..._descriptor import BlockAffine, Descriptor
from . import Layout, register


def _ggml_block(dtype: str, zero_point: int, name: str) -> Callable[[Descriptor], Optional[str]]:
    def label(d: Descriptor) -> Optional[str]:
        q = d.quantization
        if not isinstance(q, BlockAffine) or d.dtype != dtype:
            return None
        # Every other field at its default: packed codes, a group index, a
        # second blocked axis, ... (GPTQ's, compressed-tensors') are not
        # GGUF's block layout, whatever their block size and scales.
        plain = BlockAffine(
            axis=len(d.shape) - 1,
            block_size=32,
            scale_buffer=q.scale_buffer,
            scale_dtype="float16",
            zero_point=zero_point,
        )
        return name if q == plain else None

    return label


Q8_0 = register(Layout("q8_0", _ggml_block("int8", 0, "q8_0"), gguf_type="Q8_0", gguf_block=32))
Q4_0 = register(Layout("q4_0", _ggml_block("uint4", 8, "q4_0"), gguf_type="Q4_0", gguf_block=32))
