"""FP8 weights with float scales: DeepSeek-V3/R1 block checkpoints
(quant_method "fp8") and compressed-tensors "float-quantized".

DeepSeek / transformers' finegrained FP8: `<p>.weight` F8_E4M3 [N, K] and
`<p>.weight_scale_inv` F32 [ceil(N/bn), ceil(K/bk)] for
quantization_config.weight_block_size [bn, bk] (128x128 in practice); edge
blocks may be partial. Despite its name the scale multiplies:
w[i, j] = f32(fp8[i, j]) * scale_inv[i // bn, j // bk] (DeepSeek's
weight_dequant). Without weight_block_size one scale covers the tensor.

ModelOpt FP8 (quant_method "modelopt", quant_algo "FP8"): `<p>.weight`
F8_E4M3 [N, K] and `<p>.weight_scale` F32 [] (per tensor); value =
f32(fp8) * weight_scale.

compressed-tensors float-quantized: `<p>.weight` F8_E4M3 [N, K] and
`<p>.weight_scale`, whose shape says the strategy: one element (tensor),
[N, 1] or [N] (channel), [N, ceil(K/G)] (group, G from the config), or
[ceil(N/bn), ceil(K/bk)] (block, block_structure from the config);
value = f32(fp8) * f32(scale).

hurray: the FP8 codes are the data buffer, the scale tensor the scale
buffer, unchanged. Channel -> per_channel axis 0; group -> block_affine
axis 1 block G; block -> block_affine axis 0 block bn with the second
blocked axis 1 block bk; tensor -> block_affine with one 2-D block
covering the tensor (docs/spec/quantization.md §5.6, §7.5). `input_scale`
and every other tensor pass through unchanged.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..._descriptor import BlockAffine, PerChannelAffine
from . import Built, Family, Group, ZooError, register

_CODES = ("float8_e4m3fn", "float8_e5m2")
_SCALES = ("float32", "float16", "bfloat16")


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _positive(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 1 << 62:
        raise ZooError(
            f"config.json: quantization_config{where} is {value!r}, not a positive integer"
        )
    return value


def _pair(value: Any, where: str) -> Tuple[int, int]:
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise ZooError(f"config.json: quantization_config{where} is {value!r}, not [rows, columns]")
    return _positive(value[0], where + "[0]"), _positive(value[1], where + "[1]")


# --- the config ------------------------------------------------------------


def _ct_formats(qc) -> List[str]:
    out = [qc["format"]] if qc.get("format") else []
    groups = qc.get("config_groups")
    if isinstance(groups, dict):
        out += [g["format"] for g in groups.values() if isinstance(g, dict) and g.get("format")]
    return out


def _ct_weights(qc) -> List[Tuple[str, Dict[str, Any]]]:
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ZooError("config.json: quantization_config has no 'config_groups' object")
    out = []
    for name, g in groups.items():
        w = g.get("weights") if isinstance(g, dict) else None
        if not isinstance(w, dict):
            raise ZooError(
                f"config.json: quantization_config['config_groups'][{name!r}] has no 'weights' object"
            )
        out.append((name, w))
    return out


def _layer_group(prefix: str, qc) -> Optional[Dict[str, Any]]:
    """The config group that targets a layer (compressed-tensors' own
    matching, shared with the pack-quantized family), or None."""
    from .compressed_tensors import _group_of

    name = _group_of(prefix, qc)
    g = qc["config_groups"].get(name) if name is not None else None
    return g if isinstance(g, dict) else None


def layer_format(prefix: str, qc) -> Optional[str]:
    """The compressed-tensors format a layer is stored in: its config
    group's, else the top-level one."""
    g = _layer_group(prefix, qc)
    return (g.get("format") if g is not None else None) or qc.get("format")


def _check_ct(qc) -> None:
    groups = qc["config_groups"] if isinstance(qc.get("config_groups"), dict) else {}
    for name, w in _ct_weights(qc):
        g = groups.get(name)
        fmt = (g.get("format") if isinstance(g, dict) else None) or qc.get("format")
        if fmt not in (None, "float-quantized"):
            continue  # another format's group (mixed precision)
        where = f"['config_groups'][{name!r}]['weights']"
        if w.get("type", "float") != "float" or w.get("num_bits", 8) != 8:
            raise ZooError(
                f"config.json: quantization_config{where} is {w.get('type')!r} "
                f"{w.get('num_bits')!r}-bit; float-quantized weights are 8-bit floats"
            )
        if w.get("symmetric", True) is False:
            raise ZooError(
                f"config.json: quantization_config{where}: asymmetric FP8 weights are not supported"
            )
        for strategy, key in (("group", "group_size"), ("block", "block_structure")):
            if w.get("strategy") != strategy:
                continue
            if w.get(key) is None:
                raise ZooError(
                    f"config.json: quantization_config{where} has no {key!r} key "
                    f"(strategy {strategy!r})"
                )
            (_positive if strategy == "group" else _pair)(w[key], where + f"[{key!r}]")


def _check_deepseek(qc) -> None:
    if qc.get("weight_block_size") is not None:
        _pair(qc["weight_block_size"], "['weight_block_size']")
    fmt = qc.get("fmt", "e4m3")
    if fmt != "e4m3":
        raise ZooError(f"config.json: quantization_config['fmt'] is {fmt!r}; FP8 reads e4m3")


# --- the tensors -------------------------------------------------------------


def _codes(group: Group) -> Tuple[int, int]:
    group.expect("weight", _CODES, 2)
    n, k = group.shape("weight")
    return n, k


def _block(group: Group, scale: str, n: int, k: int, bn: int, bk: int, strict: bool):
    want = (_ceil(n, bn), _ceil(k, bk))
    if group.shape(scale) != want:
        if not strict:
            return None
        raise group.error(
            scale,
            f"has shape {list(group.shape(scale))}, expected {list(want)} "
            f"(weight [{n}, {k}] in {bn}x{bk} blocks)",
        )
    return BlockAffine(
        axis=0,
        block_size=bn,
        scale_buffer=1,
        scale_dtype=group.dtype(scale),
        axis2=1,
        block_size2=bk,
    )


def _one_scale(group: Group, scale: str, n: int, k: int):
    """One scale for the whole tensor: one 2-D block over both axes."""
    return BlockAffine(
        axis=0,
        block_size=max(n, 1),
        scale_buffer=1,
        scale_dtype=group.dtype(scale),
        axis2=1,
        block_size2=max(k, 1),
    )


def _built(group: Group, scale: str, n: int, k: int, q) -> Built:
    return Built(group.dtype("weight"), (n, k), q, [("data", "weight"), ("scales", scale)])


def _build_deepseek(group: Group) -> Built:
    n, k = _codes(group)
    group.expect("weight_scale_inv", _SCALES)
    shape = group.shape("weight_scale_inv")
    bs = group.config.get("weight_block_size")
    if bs is not None:
        bn, bk = _pair(bs, "['weight_block_size']")
        q = _block(group, "weight_scale_inv", n, k, bn, bk, True)
    elif _numel(shape) == 1 and len(shape) <= 2:
        if n * k == 0:  # no element, so no block: a scale there scales nothing
            raise group.error(
                "weight_scale_inv",
                f"holds one scale, but weight [{n}, {k}] is empty and has no block to scale",
            )
        q = _one_scale(group, "weight_scale_inv", n, k)
    else:
        raise group.error(
            "weight_scale_inv",
            f"has shape {list(shape)}; without weight_block_size one scale covers weight [{n}, {k}]",
        )
    return _built(group, "weight_scale_inv", n, k, q)


def _numel(shape) -> int:
    out = 1
    for s in shape:
        out *= int(s)
    return out


def _build_ct(group: Group) -> Built:
    n, k = _codes(group)
    group.expect("weight_scale", _SCALES)
    shape = tuple(group.shape("weight_scale"))
    layer = _layer_group(group.prefix, group.config)
    if layer is not None and isinstance(layer.get("weights"), dict):
        weights = [layer["weights"]]
    else:
        weights = [w for _, w in _ct_weights(group.config)]
    q: Optional[Any] = None
    if _numel(shape) == 1 and len(shape) <= 2:
        q = _one_scale(group, "weight_scale", n, k)
    elif shape in ((n, 1), (n,)):
        q = PerChannelAffine(axis=0, scale_buffer=1, scale_dtype=group.dtype("weight_scale"))
    else:
        for w in weights:
            g = w.get("group_size")
            if (
                w.get("strategy") == "group"
                and isinstance(g, int)
                and g > 0
                and shape == (n, _ceil(k, g))
            ):
                q = BlockAffine(
                    axis=1, block_size=g, scale_buffer=1, scale_dtype=group.dtype("weight_scale")
                )
                break
            if w.get("strategy") == "block" and w.get("block_structure") is not None:
                bn, bk = _pair(w["block_structure"], "['block_structure']")
                q = _block(group, "weight_scale", n, k, bn, bk, False)
                if q is not None:
                    break
    if q is None:
        raise group.error(
            "weight_scale",
            f"has shape {list(shape)}, which fits no strategy of the config for weight [{n}, {k}] "
            "(tensor [1], channel [N, 1], group [N, K/G], block [N/bn, K/bk])",
        )
    return _built(group, "weight_scale", n, k, q)


register(
    Family(
        name="fp8",
        detect=lambda qc: str(qc.get("quant_method", "")).lower() == "fp8",
        anchor="weight_scale_inv",
        members=("weight", "weight_scale_inv"),
        build=_build_deepseek,
        check_config=_check_deepseek,
    )
)
register(
    Family(
        name="compressed-tensors-fp8",
        detect=lambda qc: (
            str(qc.get("quant_method", "")).lower() == "compressed-tensors"
            and "float-quantized" in _ct_formats(qc)
        ),
        anchor="weight_scale",
        members=("weight", "weight_scale"),
        build=_build_ct,
        check_config=_check_ct,
        accepts=lambda prefix, qc: layer_format(prefix, qc) == "float-quantized",
    )
)


def _build_modelopt(group: Group) -> Built:
    n, k = _codes(group)
    group.expect("weight_scale", _SCALES)
    shape = group.shape("weight_scale")
    if _numel(shape) != 1 or len(shape) > 2:
        raise group.error(
            "weight_scale", f"has shape {list(shape)}; ModelOpt FP8 has one scale per tensor"
        )
    return _built(group, "weight_scale", n, k, _one_scale(group, "weight_scale", n, k))


def _modelopt_fp8(qc) -> bool:
    from .nvfp4 import modelopt_args

    return (
        str(qc.get("quant_method", "")).lower() == "modelopt"
        and str(modelopt_args(qc).get("quant_algo", "")).upper() == "FP8"
    )


register(
    Family(
        name="fp8-modelopt",
        detect=_modelopt_fp8,
        anchor="weight_scale",
        members=("weight", "weight_scale"),
        build=_build_modelopt,
    )
)
