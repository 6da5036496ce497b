"""Late-bound calls upward: the few places where a lower layer hands a value
to a higher one (a torch tensor to the torch adapters, a sparse tensor to
SparseTensor) go through here. The higher layer registers itself (or
hurray/__init__.py registers a loader for it), so no module imports one
above it. This module imports nothing of hurray."""

from __future__ import annotations

import sys
from typing import Any, Callable, Dict

# Python class for tensors of a layout kind (the C HurrayLayoutKind value).
LAYOUT_CLASSES: Dict[int, type] = {}

_LOADERS: Dict[str, Callable[[], Any]] = {}


def provide(name: str, loader: Callable[[], Any]) -> None:
    """Registers how to get `name` when first asked (an import, typically)."""
    _LOADERS[name] = loader


def get(name: str) -> Any:
    return _LOADERS[name]()


def torch(attr: str) -> Any:
    """hurray.torch.<attr>: the torch adapters, imported on first use."""
    return get("torch")(attr)


def is_torch_tensor(value: Any) -> bool:
    """Whether `value` is a torch.Tensor, a subclass defined outside torch
    (a Parameter subclass of the user's) included. torch is never imported
    here: a torch tensor exists only once torch is."""
    module = sys.modules.get("torch")
    tensor = getattr(module, "Tensor", None)
    return isinstance(tensor, type) and isinstance(value, tensor)
