"""NVFP4: FP4 E2M1 codes, an FP8 E4M3 scale per 16 along K, and an f32
per-tensor scale, as NVIDIA ModelOpt and compressed-tensors save it.

ModelOpt (config.json quantization_config quant_method "modelopt",
quant_algo "NVFP4"): `<p>.weight` uint8 [N, K/2], `<p>.weight_scale`
F8_E4M3 [N, K/16], `<p>.weight_scale_2` F32 [] (or [1]), `<p>.input_scale`.
NVFP4QTensor.dequantize forms the block scale first,
f32(weight_scale) * weight_scale_2 (one rounding), then multiplies the FP4
value by it.

compressed-tensors "nvfp4-pack-quantized": `<p>.weight_packed` uint8
[N, K/2], `<p>.weight_scale` F8_E4M3 [N, K/G], `<p>.weight_global_scale`
F32 [1], `<p>.input_global_scale`. Its dequantize forms
f32(weight_scale) / weight_global_scale first (the global scale DIVIDES),
then multiplies the FP4 value by it.

Both pack two codes a byte, the LOW nibble first (ModelOpt:
q[..., 1::2] << 4 | q[..., 0::2]; compressed-tensors' pack_fp4_to_uint8),
which is hurray's packed float4_e2m1fn stream as it is.

hurray: block_affine, dtype float4_e2m1fn, axis 1, block 16 (G), scales
float8_e4m3fn, super scale float32 over the whole tensor (super_block_size
0), op multiply (ModelOpt) or divide (compressed-tensors)
(docs/spec/quantization.md §5.6, §7.5). Input scales pass through.
"""

from __future__ import annotations

from typing import Any

from ..._descriptor import BlockAffine
from . import Built, Family, Group, ZooError, register
from . import fp8 as _fp8


def _ct_formats(qc):
    out = [qc["format"]] if qc.get("format") else []
    groups = qc.get("config_groups")
    if isinstance(groups, dict):
        out += [g["format"] for g in groups.values() if isinstance(g, dict) and g.get("format")]
    return out


def _positive(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 62:
        raise ZooError(
            f"config.json: quantization_config{where} is {value!r}, not a positive integer"
        )
    return value


def modelopt_args(qc) -> dict:
    """ModelOpt's quantization arguments: config.json's quantization_config
    itself, or its "quantization" object (hf_quant_config.json's shape)."""
    inner = qc.get("quantization")
    return inner if isinstance(inner, dict) else qc


def _group_size(qc, prefix=None) -> int:
    """The NVFP4 group: ModelOpt's group_size (16 by default); for
    compressed-tensors the layer's config group's (every NVFP4 group's
    when `prefix` is None, which must agree)."""
    if str(qc.get("quant_method", "")).lower() != "compressed-tensors":
        return _positive(modelopt_args(qc).get("group_size", 16), "['group_size']")
    if prefix is not None:
        from .compressed_tensors import _group_of

        name = _group_of(prefix, qc)
        g = qc["config_groups"].get(name) if name is not None else None
        w = g.get("weights") if isinstance(g, dict) else None
        if isinstance(w, dict):
            if "group_size" not in w:
                raise ZooError(
                    f"config.json: quantization_config['config_groups'][{name!r}]['weights'] "
                    "has no 'group_size' key"
                )
            return _positive(
                w["group_size"], f"['config_groups'][{name!r}]['weights']['group_size']"
            )
    sizes = set()
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ZooError("config.json: quantization_config has no 'config_groups' object")
    for name, g in groups.items():
        if isinstance(g, dict) and (g.get("format") or qc.get("format")) != "nvfp4-pack-quantized":
            continue
        w = g.get("weights") if isinstance(g, dict) else None
        if not isinstance(w, dict):
            raise ZooError(
                f"config.json: quantization_config['config_groups'][{name!r}] has no 'weights' object"
            )
        if "group_size" not in w:
            raise ZooError(
                f"config.json: quantization_config['config_groups'][{name!r}]['weights'] "
                "has no 'group_size' key"
            )
        sizes.add(
            _positive(w["group_size"], f"['config_groups'][{name!r}]['weights']['group_size']")
        )
    return min(sizes) if sizes else 16  # each layer uses its own group's


def _build_for(codes: str, glob: str, op: str):
    def build(group: Group) -> Built:
        g = _group_size(group.config, group.prefix)
        group.expect(codes, ("uint8",), 2)
        n, half = group.shape(codes)
        k = 2 * half
        group.expect("weight_scale", ("float8_e4m3fn",))
        want = (n, -(-k // g))
        if tuple(group.shape("weight_scale")) != want:
            raise group.error(
                "weight_scale",
                f"has shape {list(group.shape('weight_scale'))}, expected {list(want)} "
                f"(one per {g} of the {k} columns of {group.source_name(codes)!r})",
            )
        group.expect(glob, ("float32",))
        gshape = tuple(group.shape(glob))
        if gshape not in ((), (1,)):
            raise group.error(glob, f"has shape {list(gshape)}, expected [] or [1]")
        q = BlockAffine(
            axis=1,
            block_size=g,
            scale_buffer=1,
            scale_dtype="float8_e4m3fn",
            super_scale_buffer=2,
            super_scale_dtype="float32",
            super_block_size=0,
            super_op=op,
        )
        parts = [("data", codes), ("scales", "weight_scale"), ("super_scales", glob)]
        return Built("float4_e2m1fn", (n, k), q, parts)

    return build


def _check(qc) -> None:
    _group_size(qc)


register(
    Family(
        name="nvfp4-modelopt",
        detect=lambda qc: (
            str(qc.get("quant_method", "")).lower() == "modelopt"
            and str(modelopt_args(qc).get("quant_algo", "")).upper() == "NVFP4"
        ),
        anchor="weight_scale_2",
        members=("weight", "weight_scale", "weight_scale_2"),
        build=_build_for("weight", "weight_scale_2", "multiply"),
        check_config=_check,
    )
)
register(
    Family(
        name="nvfp4-compressed-tensors",
        detect=lambda qc: (
            str(qc.get("quant_method", "")).lower() == "compressed-tensors"
            and "nvfp4-pack-quantized" in _ct_formats(qc)
        ),
        anchor="weight_global_scale",
        members=("weight_packed", "weight_scale", "weight_global_scale"),
        build=_build_for("weight_packed", "weight_global_scale", "divide"),
        check_config=_check,
        accepts=lambda prefix, qc: _fp8.layer_format(prefix, qc) == "nvfp4-pack-quantized",
    )
)
