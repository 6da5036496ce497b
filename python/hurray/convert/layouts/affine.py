"""The general affine layouts: block_affine of any block, per channel, per tensor."""

from __future__ import annotations

from typing import Optional

from ..._descriptor import BlockAffine, Descriptor, PerChannelAffine, PerTensorAffine
from . import Layout, register


def _block_affine(d: Descriptor) -> Optional[str]:
    q = d.quantization
    return f"block_affine({d.dtype}, {q.block_size})" if isinstance(q, BlockAffine) else None


def _per_channel(d: Descriptor) -> Optional[str]:
    return f"per_channel({d.dtype})" if isinstance(d.quantization, PerChannelAffine) else None


def _per_tensor(d: Descriptor) -> Optional[str]:
    return f"affine({d.dtype})" if isinstance(d.quantization, PerTensorAffine) else None


register(Layout("block_affine", _block_affine))
register(Layout("per_channel", _per_channel))
register(Layout("affine", _per_tensor))
