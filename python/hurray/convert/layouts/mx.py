"""The OCP microscaling (MX) layouts, named by their element type."""

from __future__ import annotations

from typing import Optional

from ..._descriptor import Descriptor, Mxfp
from . import Layout, register

_MX_NAMES = {
    "fp8_e4m3": "mxfp8_e4m3",
    "fp8_e5m2": "mxfp8_e5m2",
    "fp6_e3m2": "mxfp6_e3m2",
    "fp6_e2m3": "mxfp6_e2m3",
    "fp4_e2m1": "mxfp4",
    "int8": "mxint8",
}


def _mx(d: Descriptor) -> Optional[str]:
    q = d.quantization
    return _MX_NAMES.get(q.element, "mx") if isinstance(q, Mxfp) else None


register(Layout("mx", _mx))
