"""NF4: 4-bit NormalFloat codes with per-block absmax scales (block 64 unless named)."""

from __future__ import annotations

from typing import Optional

from ..._descriptor import Descriptor, Nf4
from . import Layout, register


def _nf4(d: Descriptor) -> Optional[str]:
    q = d.quantization
    if not isinstance(q, Nf4):
        return None
    return "nf4" if q.block_size == 64 else f"nf4({q.block_size})"


register(Layout("nf4", _nf4))
