"""NVFP4: FP4 E2M1 codes, an FP8 E4M3 scale per 16 along K, and an f32
per-tensor scale, as NVIDIA ModelOpt and compressed-tensors save it.

ModelOpt (config.json quantization_config quant_method "modelopt" with
quant_algo "NVFP4", or hf_quant_config.json's quantization.quant_algo):
`<p>.weight` uint8 [N, K/2], `<p>.weight_scale` F8_E4M3 [N, K/16],
`<p>.weight_scale_2` F32 [] (or [1]). ModelOpt's NVFP4QTensor.dequantize
forms the block scale first, f32(weight_scale) * weight_scale_2 (one
rounding), then multiplies the FP4 value by it.

compressed-tensors "nvfp4-pack-quantized": `<p>.weight_packed` uint8
[N, K/2], `<p>.weight_scale` F8_E4M3 [N, K/G], `<p>.weight_global_scale`
F32 [1]. Its dequantize forms f32(weight_scale) / weight_global_scale first
(the global scale DIVIDES), then multiplies the FP4 value by it.

Both pack two codes a byte, the LOW nibble first (ModelOpt:
q[..., 1::2] << 4 | q[..., 0::2]; compressed-tensors pack_fp4_to_uint8),
which is hurray's packed float4_e2m1fn stream as it is.

hurray: block_affine, dtype float4_e2m1fn, axis 1, block 16 (G), scales
float8_e4m3fn, super scale float32 over the whole tensor (super_block_size
0), op multiply (ModelOpt) or divide (compressed-tensors) (ADR-0024). The
input scales pass through unchanged.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping

from ..._descriptor import BlockAffine
from .._common import ConversionError
from . import _parts
from ._parts import Part

NAME = "nvfp4"


def _is_ct(qconfig: Mapping[str, Any]) -> bool:
    return qconfig.get("quant_method") == "compressed-tensors"


def _ct_format(qconfig: Mapping[str, Any]) -> Any:
    fmt = qconfig.get("format")
    if fmt is None:
        groups = qconfig.get("config_groups") or {}
        fmts = {g.get("format") for g in groups.values() if isinstance(g, Mapping)}
        fmt = fmts.pop() if len(fmts) == 1 else None
    return fmt


def matches(qconfig: Mapping[str, Any]) -> bool:
    method = qconfig.get("quant_method")
    if method == "compressed-tensors":
        return _ct_format(qconfig) == "nvfp4-pack-quantized"
    if method == "modelopt":
        return str(qconfig.get("quant_algo", "")).upper() == "NVFP4"
    return False


def group_size(qconfig: Mapping[str, Any]) -> int:
    if _is_ct(qconfig):
        sizes = set()
        for key, g in (qconfig.get("config_groups") or {}).items():
            w = g.get("weights") if isinstance(g, Mapping) else None
            if isinstance(w, Mapping) and w.get("group_size") is not None:
                sizes.add(
                    _parts.positive_int(
                        w["group_size"], f"config_groups.{key}.weights.group_size"
                    )
                )
        if len(sizes) > 1:
            raise ConversionError(
                "config.json quantization_config.config_groups: NVFP4 groups of different "
                f"sizes {sorted(sizes)} are not supported"
            )
        return sizes.pop() if sizes else 16
    return _parts.positive_int(qconfig.get("group_size", 16), "group_size")


def plan(names: Iterable[str], qconfig: Mapping[str, Any]) -> Dict[str, Dict[str, str]]:
    have = set(names)
    ct = _is_ct(qconfig)
    marker = ".weight_global_scale" if ct else ".weight_scale_2"
    out: Dict[str, Dict[str, str]] = {}
    for name in have:
        prefix = _parts.strip(name, marker)
        if prefix is None:
            continue
        weight = prefix + ".weight"
        codes = prefix + (".weight_packed" if ct else ".weight")
        roles = {"codes": codes, "scale": prefix + ".weight_scale", "global": name}
        for role in ("codes", "scale"):
            if roles[role] not in have:
                raise ConversionError(
                    f"tensor {roles[role]!r}: missing; {name!r} is there"
                )
        if ct and weight in have:
            raise ConversionError(
                f"tensor {weight!r} is in the checkpoint beside {codes!r}; "
                "the NVFP4 weight would take its name"
            )
        out[weight] = roles
    return out


def build(
    weight: str, parts: Mapping[str, Part], names: Mapping[str, str], qconfig: Mapping[str, Any]
):
    codes = _parts.need(parts, "codes", names, weight)
    scale = _parts.need(parts, "scale", names, weight)
    glob = _parts.need(parts, "global", names, weight)
    cname, sname, gname = names["codes"], names["scale"], names["global"]
    _parts.check_dtype(cname, codes, ("uint8",))
    n, half = _parts.check_rank(cname, codes, (2,))
    k = 2 * half
    g = group_size(qconfig)
    _parts.check_dtype(sname, scale, ("float8_e4m3fn",))
    _parts.check_shape(
        sname, scale, (n, _parts.ceil_div(k, g)), f"one scale per {g} of {cname!r}'s {k} columns"
    )
    _parts.check_dtype(gname, glob, ("float32",))
    if _parts.numel(_parts.shape_of(glob)) != 1 or len(_parts.shape_of(glob)) > 1:
        raise ConversionError(
            f"tensor {gname!r}: shape {list(_parts.shape_of(glob))}, expected [] or [1]"
        )
    q = BlockAffine(
        axis=1,
        block_size=g,
        scale_buffer=1,
        scale_dtype="float8_e4m3fn",
        super_scale_buffer=2,
        super_scale_dtype="float32",
        super_block_size=0,
        super_op="divide" if _is_ct(qconfig) else "multiply",
    )
    return _parts.tensor(
        weight,
        "float4_e2m1fn",
        (n, k),
        q,
        [("data", codes), ("scales", scale), ("super_scales", glob)],
    )
