"""AWQ, GEMM packing (AutoAWQ / transformers' AwqConfig, version "gemm").

Per linear layer with K in_features, N out_features, 4 bits, group size G:

    qweight  int32 [K, N/8]      packed along N: nibble j of word c holds
                                 column 8c + (0, 2, 4, 6, 1, 3, 5, 7)[j]
    qzeros   int32 [K/G, N/8]    the same packing, the zero itself
    scales   f16   [K/G, N]

    W[n, k] = scales[k/G, n] * (q[k, n] - zero[k/G, n])

The hurray tensor: BLOCK_AFFINE over the logical [N, K], axis 1 (K), block
G, storage axes (1, 0), codes and zero points packed in 32-bit words along
storage axis 1 (N) with that lane order.
"""

from __future__ import annotations

from ..._descriptor import BlockAffine
from . import Built, Family, Group, ZooError, config_value, packing, register
from .gptq import packed_int4_shapes

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def _detect(qc) -> bool:
    return (
        str(qc.get("quant_method", "")).lower() == "awq"
        and str(qc.get("version") or "gemm").lower() == "gemm"
    )


def _bits(qc) -> int:
    # transformers writes "bits"; AutoAWQ's own quant_config.json "w_bit"
    return config_value(qc, "bits" if "bits" in qc or "w_bit" not in qc else "w_bit", "awq", int)


def _group_size(qc) -> int:
    key = "group_size" if "group_size" in qc or "q_group_size" not in qc else "q_group_size"
    return config_value(qc, key, "awq", int)


def _check_config(qc) -> None:
    bits = _bits(qc)
    if bits != 4:
        raise ZooError(f"config.json: quantization_config['bits'] is {bits}; AWQ GEMM is 4-bit")
    g = _group_size(qc)
    if g != -1 and g < 1:
        raise ZooError(f"config.json: quantization_config['group_size'] is {g} (awq)")
    if not config_value(qc, "zero_point", "awq", bool, default=True):
        raise ZooError(
            "config.json: quantization_config['zero_point'] is false; hurray reads "
            "AWQ GEMM with zero points only"
        )


def _build(group: Group) -> Built:
    _, n, g, _ = packed_int4_shapes(group, 4, _group_size(group.config), along_k=False)
    k = group.shape("qweight")[0]
    q = BlockAffine(
        axis=1,
        block_size=g,
        scale_buffer=1,
        scale_dtype=group.dtype("scales"),
        zero_point_buffer=2,
        zero_point_dtype="uint4",
        storage_axes=(1, 0),
        code_packing=packing(32, 1, AWQ_ORDER),
        zero_point_packing=packing(32, 1, AWQ_ORDER),
    )
    return Built(
        "uint4", (n, k), q, [("data", "qweight"), ("scales", "scales"), ("zero_points", "qzeros")]
    )


register(
    Family(
        name="awq",
        detect=_detect,
        anchor="qweight",
        members=("qweight", "qzeros", "scales"),
        build=_build,
        check_config=_check_config,
    )
)
