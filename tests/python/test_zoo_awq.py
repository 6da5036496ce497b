"""AWQ GEMM model folders (issue 18). Each checkpoint is built byte for byte
from the format's definition (tests/python/zoo_reference.py: nibble j of a
word holds column 8c + (0, 2, 4, 6, 1, 3, 5, 7)[j]), converted with `hurray
convert DIR out.hurray`, dequantized bit-exact against the numpy reference
(and against compressed-tensors' own AutoAWQ converter where it is
installed), converted back byte for byte."""

from __future__ import annotations

import numpy as np
import pytest
from zoo_reference import (
    AWQ_ORDER,
    assert_ok,
    assert_one_line_failure,
    awq_dequantize,
    convert,
    listing,
    pack_along,
    round_trip,
    write_model,
)

import hurray


def _config(group_size=32, **extra):
    qc = {
        "quant_method": "awq",
        "bits": 4,
        "group_size": group_size,
        "version": "gemm",
        "zero_point": True,
        "modules_to_not_convert": None,
    }
    qc.update(extra)
    return qc


def _layer(rng, k, n, group_size=32):
    g = k if group_size == -1 else group_size
    groups = -(-k // g)
    codes = rng.integers(0, 16, (k, n))
    zeros = rng.integers(0, 16, (groups, n))
    scales = (rng.standard_normal((groups, n)) * 0.02).astype(np.float16)
    members = {
        "qweight": pack_along(codes, 4, 1, AWQ_ORDER),
        "qzeros": pack_along(zeros, 4, 1, AWQ_ORDER),
        "scales": scales,
    }
    assert members["qweight"].shape == (k, n // 8)
    gi = np.arange(k) // g
    want = scales[gi].astype(np.float32) * (codes - zeros[gi]).astype(np.float32)
    return members, np.ascontiguousarray(want.T), codes


LAYERS = {"model.layers.0.self_attn.o_proj": (64, 64), "model.layers.1.mlp.up_proj": (64, 96)}


def _model(rng, group_size=32):
    tensors, ref = {}, {}
    for prefix, (k, n) in LAYERS.items():
        members, want, _ = _layer(rng, k, n, group_size)
        tensors.update({f"{prefix}.{m}": a for m, a in members.items()})
        ref[f"{prefix}.weight"] = want
    tensors["lm_head.weight"] = rng.standard_normal((8, 64)).astype(np.float16)
    return tensors, ref


def test_awq_order_by_hand():
    """Nibble j of word c holds column 8c + AWQ_ORDER[j]: column 1 sits in
    nibble 4, column 2 in nibble 1."""
    codes = np.zeros((1, 8), np.int64)
    codes[0, 1] = 0xA
    codes[0, 2] = 0x3
    word = int(pack_along(codes, 4, 1, AWQ_ORDER)[0, 0].view(np.uint32))
    assert word == (0xA << 16) | (0x3 << 4)


@pytest.mark.parametrize("group_size", [32, -1], ids=["group32", "one_group"])
def test_awq_round_trip(tmp_path, group_size):
    rng = np.random.default_rng(40 + group_size)
    tensors, ref = _model(rng, group_size)
    src = write_model(tmp_path / "m", tensors, _config(group_size))
    for name, want in ref.items():
        p = name[: -len(".weight")]
        got = awq_dequantize(
            tensors[f"{p}.qweight"],
            tensors[f"{p}.qzeros"],
            tensors[f"{p}.scales"],
            group_size=group_size,
        )
        np.testing.assert_array_equal(got, want)
    meta = round_trip(tmp_path, src, "awq", tensors, ref, shards=1)
    assert meta["zoo.family"] == "awq"
    with hurray.open(str(tmp_path / "awq.hurray")) as f:
        d = f["model.layers.1.mlp.up_proj.weight"].descriptor
        assert d.shape == (96, 64) and d.dtype == "uint4"


def test_awq_sharded(tmp_path):
    rng = np.random.default_rng(5)
    tensors, ref = _model(rng)
    src = write_model(tmp_path / "m", tensors, _config(), shards=2)
    round_trip(tmp_path, src, "awq2", tensors, ref, shards=2)


def test_awq_against_compressed_tensors(tmp_path):
    """compressed-tensors' AutoAWQ converter turns each layer into its own
    signed int4 form, and its dequantize (float16 arithmetic) must equal ours
    rounded to float16: the float32 product is exact, so one rounding either
    way."""
    pytest.importorskip("compressed_tensors")
    import torch
    from compressed_tensors.entrypoints.convert.converters.autoawq import AutoAWQConverter
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    rng = np.random.default_rng(6)
    tensors, ref = _model(rng)
    src = write_model(tmp_path / "m", tensors, _config())
    assert_ok(convert(src, tmp_path / "a.hurray", "-q"))
    conv = AutoAWQConverter(bits=4, group_size=32, zero_point=True)
    args = QuantizationArgs(
        num_bits=4, type="int", symmetric=False, strategy="group", group_size=32
    )
    with hurray.open(str(tmp_path / "a.hurray")) as f:
        for p in LAYERS:
            q, scale, zero = conv._convert_gemm_module(
                torch.from_numpy(tensors[f"{p}.qweight"]),
                torch.from_numpy(tensors[f"{p}.scales"]),
                torch.from_numpy(tensors[f"{p}.qzeros"]),
            )
            theirs = dequantize(q, scale, zero, args).numpy()
            assert theirs.dtype == np.float16 and theirs.shape == ref[f"{p}.weight"].shape
            ours = f[f"{p}.weight"].dequantize(np.float16)
            np.testing.assert_array_equal(ours.view(np.uint16), theirs.view(np.uint16))
            np.testing.assert_array_equal(ref[f"{p}.weight"].astype(np.float16), theirs)


def _bad(tmp_path, mutate):
    rng = np.random.default_rng(9)
    tensors, _ = _model(rng)
    qc = _config()
    mutate(tensors, qc)
    src = write_model(tmp_path / "bad", tensors, qc)
    before = listing(tmp_path)
    r = convert(src, tmp_path / "out.hurray")
    assert listing(tmp_path) == before
    return r


def test_qweight_disagreeing_with_scales(tmp_path):
    p = "model.layers.0.self_attn.o_proj"

    def mutate(t, qc):
        t[f"{p}.qweight"] = t[f"{p}.qweight"][:16].copy()  # one group of 32, scales have 2

    assert_one_line_failure(_bad(tmp_path, mutate), [f"{p}.qweight", "scales"])


def test_qzeros_disagreeing(tmp_path):
    p = "model.layers.1.mlp.up_proj"

    def mutate(t, qc):
        t[f"{p}.qzeros"] = t[f"{p}.qzeros"][:, :4].copy()

    assert_one_line_failure(_bad(tmp_path, mutate), [f"{p}.qzeros"])


def test_missing_config_key(tmp_path):
    assert_one_line_failure(
        _bad(tmp_path, lambda t, qc: qc.pop("group_size")), ["config.json", "'group_size'"]
    )
    assert_one_line_failure(
        _bad(tmp_path / "2", lambda t, qc: qc.pop("quant_method")),
        ["config.json", "'quant_method'"],
    )


def test_other_awq_versions_pass_through(tmp_path):
    """GEMV (another packing) is not grouped: its tensors are kept as they are."""
    rng = np.random.default_rng(10)
    tensors, _ = _model(rng)
    src = write_model(tmp_path / "m", tensors, _config(version="gemv"))
    assert_ok(convert(src, tmp_path / "g.hurray", "-q"))
    with hurray.open(str(tmp_path / "g.hurray")) as f:
        assert sorted(f.keys()) == sorted(tensors)
        assert f.metadata["zoo.family"] == ""
