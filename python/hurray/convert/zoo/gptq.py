"""GPTQ (AutoGPTQ / GPTQModel / transformers), checkpoint_format "gptq" (v1,
the default) and "gptq_v2".

Per linear layer with K in_features, N out_features, b bits (4 or 8), group
size G (-1 in the config: one group), L = 32 / b codes a word:

    qweight  int32 [K/L, N]      packed along K: code (k, n) is bits
                                 [b*(k%L), b*(k%L+1)) of qweight[k/L, n]
    qzeros   int32 [K/G, N/L]    packed along N, the same lane order;
                                 v1 stores zero - 1 (so zero = stored + 1,
                                 without wrapping: a stored 15 is 16), v2
                                 the zero itself
    scales   f16   [K/G, N]
    g_idx    int32 [K]           optional: the group of each input row
                                 (act-order / desc_act); k / G without it

    W[n, k] = scales[g, n] * (q[k, n] - zero[g, n]),  g = g_idx[k]

The hurray tensor: BLOCK_AFFINE over the logical [N, K], axis 1 (K), block
G, storage axes (1, 0) (everything is stored [K..., N...]), codes packed in
32-bit words along storage axis 0, zero points packed along storage axis 1,
zero_point_offset 1 for v1, g_idx as the group index buffer.
"""

from __future__ import annotations

from ..._descriptor import BlockAffine
from . import Built, Family, Group, ZooError, check_group_index, config_value, packing, register

_FLOATS = ("float16", "bfloat16", "float32")
_DTYPE = {4: "uint4", 8: "uint8"}


def _detect(qc) -> bool:
    return str(qc.get("quant_method", "")).lower() == "gptq" and str(
        qc.get("checkpoint_format") or "gptq"
    ).lower() in ("gptq", "gptq_v2")


def _check_config(qc) -> None:
    bits = config_value(qc, "bits", "gptq", int)
    if bits not in _DTYPE:
        raise ZooError(
            f"config.json: quantization_config['bits'] is {bits}; hurray reads GPTQ with "
            "4 or 8 bits (2 and 3 are not supported)"
        )
    g = config_value(qc, "group_size", "gptq", int)
    if g != -1 and g < 1:
        raise ZooError(f"config.json: quantization_config['group_size'] is {g} (gptq)")
    config_value(qc, "desc_act", "gptq", bool, default=False)
    config_value(qc, "sym", "gptq", bool, default=True)


def packed_int4_shapes(group: Group, bits: int, group_size: int, along_k: bool):
    """(K, N, groups) of a GPTQ/AWQ layer, its members' shapes checked
    against one another: one-line errors naming the member that disagrees."""
    lanes = 32 // bits
    for m in ("qweight", "qzeros"):
        group.expect(m, ("int32",), 2)
    group.expect("scales", _FLOATS, 2)
    qw = group.shape("qweight")
    k, n = (qw[0] * lanes, qw[1]) if along_k else (qw[0], qw[1] * lanes)
    g = k if group_size == -1 else group_size
    groups = -(-k // g) if k else 0
    if group.shape("scales") != (groups, n):
        raise group.error(
            "qweight",
            f"has shape {list(qw)}, which is {k} inputs x {n} outputs with {groups} "
            f"group{'' if groups == 1 else 's'} of {g}, but {group.source_name('scales')!r} has "
            f"shape {list(group.shape('scales'))}",
        )
    if n % lanes:
        raise group.error(
            "scales",
            f"has {n} outputs, which {bits}-bit zero points packed {lanes} to an int32 "
            f"cannot hold (not a multiple of {lanes})",
        )
    if group.shape("qzeros") != (groups, n // lanes):
        raise group.error(
            "qzeros",
            f"has shape {list(group.shape('qzeros'))}, expected {[groups, n // lanes]} "
            f"for scales of shape {[groups, n]}",
        )
    return k, n, g, groups


def _build(group: Group) -> Built:
    qc = group.config
    bits = qc["bits"]
    v1 = str(qc.get("checkpoint_format") or "gptq").lower() == "gptq"
    k, n, g, groups = packed_int4_shapes(group, bits, qc["group_size"], along_k=True)
    parts = [("data", "qweight"), ("scales", "scales"), ("zero_points", "qzeros")]
    extra = {}
    if "g_idx" in group.tensors:
        group.expect("g_idx", ("int32",), 1)
        if group.shape("g_idx") != (k,):
            raise group.error(
                "g_idx", f"has shape {list(group.shape('g_idx'))}, expected [{k}] (one per input)"
            )
        check_group_index(group, "g_idx", groups)
        extra = {"group_index_buffer": 3, "group_index_dtype": "int32"}
        parts.append(("group_index", "g_idx"))
    q = BlockAffine(
        axis=1,
        block_size=g,
        scale_buffer=1,
        scale_dtype=group.dtype("scales"),
        zero_point_buffer=2,
        zero_point_dtype=_DTYPE[bits],
        storage_axes=(1, 0),
        code_packing=packing(32, 0),
        zero_point_packing=packing(32, 1),
        zero_point_offset=1 if v1 else 0,
        **extra,
    )
    return Built(_DTYPE[bits], (n, k), q, parts)


register(
    Family(
        name="gptq",
        detect=_detect,
        anchor="qweight",
        members=("qweight", "qzeros", "scales"),
        optional=("g_idx",),
        build=_build,
        check_config=_check_config,
    )
)
