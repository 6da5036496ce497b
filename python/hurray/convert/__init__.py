"""hurray.convert: checkpoints between safetensors, GGUF, .npz/.npy, torch
state dicts and hurray files, optionally quantizing on the way.

The rules (formats, names, the default quantization rule, the report) are in
docs/impl/convert.md. In short:

    report = hurray.convert("model.safetensors", "model.hurray", quantize="q4_0")
    print(report.format())

Sources are read tensor by tensor (memory maps where the format allows), so a
conversion holds the source once, plus whatever new bytes it makes
(quantized codes, dequantized values).

The package, one concern a module:
    _common         errors, suffixes, metadata keys, small helpers
    _report         the report and the error measures
    _rules          which tensors are converted and which quantized
    layouts/        one recogniser per quantized layout (a registry)
    _source, _target  what every source and target implements
    _safetensors, _gguf, _npz, _npy, _torch, _hurrayfile
                    one module per format: its source and its target
    _driver         convert(): open, select, quantize, measure, write, publish

`hurray.convert` is the function (hurray/__init__.py rebinds the name after
importing this package); import from the package with
`from hurray.convert import ...`, not `import hurray.convert.x as y`.
"""

from ._common import (  # noqa: F401
    SOURCE_SUFFIXES,
    TARGET_SUFFIXES,
    ConversionError,
    ConversionIOError,
    UsageError,
)
from ._driver import convert
from ._report import ConversionReport, ReportTotals, TensorReport
from ._rules import default_quantize_rule
from .layouts import describe  # noqa: F401

__all__ = [
    "convert",
    "ConversionError",
    "ConversionIOError",
    "UsageError",
    "ConversionReport",
    "TensorReport",
    "ReportTotals",
    "default_quantize_rule",
    "SOURCE_SUFFIXES",
    "TARGET_SUFFIXES",
]
