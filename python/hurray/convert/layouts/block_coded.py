"""GGUF's other quantized types (the K-quants, IQ, TQ, MXFP4, NVFP4, Q4_1,
Q5_0, Q5_1) as hurray stores them: block-coded tensors, their GGUF blocks
unchanged, named by the GGUF type ("q4_k"). GGUF takes them back as that
type (src/formats/convert.c decides); they are not offered to --quantize,
which hurray cannot write in these formats, so there is no gguf_type."""

from __future__ import annotations

from typing import Optional

from ..._descriptor import BlockCoded, Descriptor
from . import Layout, register


def _block_coded(d: Descriptor) -> Optional[str]:
    q = d.quantization
    if not isinstance(q, BlockCoded):
        return None
    return q.format[len("ggml_") :] if q.format.startswith("ggml_") else q.format


register(Layout("block_coded", _block_coded))
