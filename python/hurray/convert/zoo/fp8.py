"""FP8 weights with float scales: DeepSeek-V3/R1 block checkpoints
(quant_method "fp8") and compressed-tensors "float-quantized".

DeepSeek / transformers' finegrained FP8: `<p>.weight` F8_E4M3 [N, K] and
`<p>.weight_scale_inv` F32 [ceil(N/bn), ceil(K/bk)] for
quantization_config.weight_block_size [bn, bk] (128x128 in practice); edge
blocks may be partial. Despite its name the scale multiplies:
w[i, j] = f32(fp8[i, j]) * scale_inv[i // bn, j // bk]. Without
weight_block_size the one scale covers the tensor.

compressed-tensors float-quantized: `<p>.weight` F8_E4M3 [N, K] and
`<p>.weight_scale`, whose shape says the strategy: one element (tensor),
[N, 1] or [N] (channel), [N, K/G] (group, G from the config), or
[ceil(N/bn), ceil(K/bk)] (block, block_structure from the config).

hurray: the FP8 codes are the data buffer, the scale tensor the scale
buffer, unchanged. Channel -> per_channel axis 0; group -> block_affine
axis 1; tensor -> block_affine with one 2-D block; block -> block_affine
axis 0 block bn with the second blocked axis 1 block bk (ADR-0024).
Value = f32(code) * f32(scale), one rounding (docs/spec/quantization.md §5.1).
`<p>.input_scale` and every other tensor pass through unchanged.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional, Tuple

from ..._descriptor import BlockAffine, PerChannelAffine
from .._common import ConversionError, _shape_str
from . import _parts
from ._parts import Part

NAME = "fp8"
CODE_DTYPES = ("float8_e4m3fn", "float8_e5m2")
SCALE_DTYPES = ("float32", "float16", "bfloat16")


def _ct_weight_args(qconfig: Mapping[str, Any]) -> list:
    groups = qconfig.get("config_groups") or {}
    if not isinstance(groups, Mapping):
        raise ConversionError("config.json quantization_config.config_groups is not an object")
    out = []
    for key, group in groups.items():
        w = group.get("weights") if isinstance(group, Mapping) else None
        if isinstance(w, Mapping):
            out.append((key, group, w))
    return out


def _ct_format(qconfig: Mapping[str, Any]) -> Optional[str]:
    fmt = qconfig.get("format")
    if fmt is None:  # per-group formats (compressed-tensors >= 0.11)
        fmts = {g.get("format") for _, g, _ in _ct_weight_args(qconfig)}
        fmt = fmts.pop() if len(fmts) == 1 else None
    return fmt


def matches(qconfig: Mapping[str, Any]) -> bool:
    method = qconfig.get("quant_method")
    if method == "fp8":
        return True
    return method == "compressed-tensors" and _ct_format(qconfig) == "float-quantized"


def plan(names: Iterable[str], qconfig: Mapping[str, Any]) -> Dict[str, Dict[str, str]]:
    """{hurray weight name: {role: safetensors name}} for each FP8 weight;
    the roles are "weight" and "scale"."""
    suffix = ".weight_scale_inv" if qconfig.get("quant_method") == "fp8" else ".weight_scale"
    out: Dict[str, Dict[str, str]] = {}
    have = set(names)
    for name in have:
        prefix = _parts.strip(name, suffix)
        if prefix is None:
            continue
        weight = prefix + ".weight"
        out[weight] = {"weight": weight, "scale": name}
        if weight not in have:
            raise ConversionError(f"tensor {weight!r}: missing; its scale {name!r} is there")
    return out


def _block_structure(qconfig: Mapping[str, Any]) -> Optional[Tuple[int, int]]:
    if qconfig.get("quant_method") == "fp8":
        bs = qconfig.get("weight_block_size")
        key = "weight_block_size"
    else:
        bs = None
        key = "config_groups.*.weights.block_structure"
        for _, _, w in _ct_weight_args(qconfig):
            if w.get("block_structure") is not None:
                bs = w["block_structure"]
    if bs is None:
        return None
    if not isinstance(bs, (list, tuple)) or len(bs) != 2:
        raise ConversionError(f"config.json quantization_config.{key}: {bs!r} is not [rows, cols]")
    return (_parts.positive_int(bs[0], key + "[0]"), _parts.positive_int(bs[1], key + "[1]"))


def _group_sizes(qconfig: Mapping[str, Any]) -> set:
    return {
        w["group_size"]
        for _, _, w in _ct_weight_args(qconfig)
        if isinstance(w.get("group_size"), int) and w["group_size"] > 0
    }


def _check_ct_args(qconfig: Mapping[str, Any]) -> None:
    for key, _, w in _ct_weight_args(qconfig):
        where = f"quantization_config.config_groups.{key}.weights"
        if w.get("type", "float") != "float" or w.get("num_bits", 8) != 8:
            raise ConversionError(
                f"config.json {where}: float-quantized weights must be type float, 8 bits "
                f"(got type {w.get('type')!r}, num_bits {w.get('num_bits')!r})"
            )
        if w.get("symmetric") is False:
            raise ConversionError(
                f"config.json {where}: asymmetric FP8 weights are not supported"
            )


def build(
    weight: str, parts: Mapping[str, Part], names: Mapping[str, str], qconfig: Mapping[str, Any]
):
    """The hurray tensor for one FP8 weight."""
    w = _parts.need(parts, "weight", names, weight)
    s = _parts.need(parts, "scale", names, weight)
    sname = names["scale"]
    dtype = _parts.check_dtype(weight, w, CODE_DTYPES)
    n, k = _parts.check_rank(weight, w, (2,))
    sdtype = _parts.check_dtype(sname, s, SCALE_DTYPES)
    sshape = _parts.shape_of(s)
    deepseek = qconfig.get("quant_method") == "fp8"
    if not deepseek:
        _check_ct_args(qconfig)
    block = _block_structure(qconfig)
    q = None
    if deepseek and block is not None:
        q = _block(block, n, k, sname, sshape, sdtype, strict=True)
    elif _parts.numel(sshape) == 1 and len(sshape) <= 2:
        # one block covering both axes: the scale stays a buffer of its own
        q = _block((max(n, 1), max(k, 1)), n, k, sname, (1, 1), sdtype, strict=True)
    elif sshape in ((n, 1), (n,)) and not deepseek:
        q = PerChannelAffine(axis=0, scale_buffer=1, scale_dtype=sdtype)
    elif not deepseek and len(sshape) == 2 and sshape[0] == n:
        for g in sorted(_group_sizes(qconfig)):
            if sshape[1] == _parts.ceil_div(k, g):
                q = BlockAffine(axis=1, block_size=g, scale_buffer=1, scale_dtype=sdtype)
                break
    if q is None and not deepseek and block is not None:
        q = _block(block, n, k, sname, sshape, sdtype, strict=False)
    if q is None:
        raise ConversionError(
            f"tensor {sname!r}: shape {_shape_str(sshape)} fits no scale layout of weight "
            f"{weight!r} {_shape_str((n, k))}"
        )
    return _parts.tensor(weight, dtype, (n, k), q, [("data", w), ("scales", s)])


def _block(block, n, k, sname, sshape, sdtype, strict):
    bn, bk = block
    want = (_parts.ceil_div(n, bn), _parts.ceil_div(k, bk))
    if sshape != want:
        if not strict:
            return None
        raise ConversionError(
            f"tensor {sname!r}: shape {_shape_str(sshape)}, expected {_shape_str(want)} "
            f"(weight [{n}, {k}] in {bn}x{bk} blocks)"
        )
    return BlockAffine(
        axis=0,
        block_size=bn,
        scale_buffer=1,
        scale_dtype=sdtype,
        axis2=1,
        block_size2=bk,
    )
