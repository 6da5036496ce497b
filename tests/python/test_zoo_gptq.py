"""GPTQ model folders (issue 18): legacy v1 4-bit with and without
desc_act/g_idx, 8-bit, gptq_v2, sharded. Each checkpoint is built byte for
byte from the format's definition (tests/python/zoo_reference.py), converted
with `hurray convert DIR out.hurray`, dequantized bit-exact against the
numpy reference, converted back byte for byte."""

from __future__ import annotations

import json

import numpy as np
import pytest
from zoo_reference import (
    assert_ok,
    assert_one_line_failure,
    convert,
    gptq_dequantize,
    listing,
    pack_along,
    round_trip,
    write_model,
)

import hurray


def _config(bits=4, group_size=16, desc_act=False, fmt=None):
    qc = {
        "quant_method": "gptq",
        "bits": bits,
        "group_size": group_size,
        "desc_act": desc_act,
        "sym": True,
        "damp_percent": 0.01,
    }
    if fmt is not None:
        qc["checkpoint_format"] = fmt
    return qc


def _layer(rng, k, n, bits=4, group_size=16, g_idx=False, v1=True):
    """(members, expected f32 [N, K]): integer codes and stored zeros drawn
    first, packed as GPTQ packs them, and the expected weight computed from
    the integers by the definition, not from the packed bytes."""
    top = 1 << bits
    lanes = 32 // bits
    g = k if group_size == -1 else group_size
    groups = -(-k // g)
    codes = rng.integers(0, top, (k, n))
    zeros = rng.integers(0, top, (groups, n))
    zeros[0, 0] = top - 1  # v1: stored 15 is zero 16
    scales = (rng.standard_normal((groups, n)) * 0.01).astype(np.float16)
    gi = np.arange(k) // g
    if g_idx:
        gi = rng.permutation(gi).astype(np.int32)  # act order: any row, any group
    members = {
        "qweight": pack_along(codes, bits, 0),
        "qzeros": pack_along(zeros, bits, 1),
        "scales": scales,
    }
    if g_idx:
        members["g_idx"] = gi.astype(np.int32)
    assert members["qweight"].shape == (k // lanes, n)
    zero = zeros + (1 if v1 else 0)
    want = scales[gi].astype(np.float32) * (codes - zero[gi]).astype(np.float32)
    return members, np.ascontiguousarray(want.T)


def _model(rng, layers, extra=True, **kw):
    tensors, ref = {}, {}
    for prefix, (k, n) in layers.items():
        members, want = _layer(rng, k, n, **kw)
        for m, a in members.items():
            tensors[f"{prefix}.{m}"] = a
        tensors[f"{prefix}.bias"] = rng.standard_normal(n).astype(np.float16)
        ref[f"{prefix}.weight"] = want
    if extra:
        tensors["model.embed_tokens.weight"] = rng.standard_normal((10, 64)).astype(np.float16)
        tensors["model.norm.weight"] = np.ones(64, np.float16)
    return tensors, ref


LAYERS = {
    "model.layers.0.self_attn.q_proj": (64, 48),
    "model.layers.0.mlp.down_proj": (128, 64),
}


@pytest.mark.parametrize(
    "group_size,desc_act",
    [(16, False), (32, True), (-1, False)],
    ids=["group16", "desc_act", "one_group"],
)
def test_gptq_v1_round_trip(tmp_path, group_size, desc_act):
    rng = np.random.default_rng(abs(group_size) + desc_act)
    tensors, ref = _model(rng, LAYERS, group_size=group_size, g_idx=desc_act)
    src = write_model(tmp_path / "m", tensors, _config(group_size=group_size, desc_act=desc_act))
    for name, want in ref.items():  # the reference from the bytes agrees with the integers
        p = name[: -len(".weight")]
        got = gptq_dequantize(
            tensors[f"{p}.qweight"],
            tensors[f"{p}.qzeros"],
            tensors[f"{p}.scales"],
            tensors.get(f"{p}.g_idx"),
            group_size=group_size,
        )
        np.testing.assert_array_equal(got, want)
    meta = round_trip(tmp_path, src, "gptq", tensors, ref)
    assert meta["zoo.family"] == "gptq"
    records = json.loads(meta["zoo.tensors"])
    assert sorted(records) == sorted(ref)
    with hurray.open(str(tmp_path / "gptq.hurray")) as f:
        assert sorted(f.keys()) == sorted(
            list(ref)
            + [f"{p}.bias" for p in LAYERS]
            + ["model.embed_tokens.weight", "model.norm.weight"]
        )
        d = f["model.layers.0.self_attn.q_proj.weight"].descriptor
        assert d.shape == (48, 64) and d.dtype == "uint4"
        assert d.quantization.block_size == (64 if group_size == -1 else group_size)
        # zero copy: the buffers are the members' bytes
        t = f["model.layers.0.self_attn.q_proj.weight"]
        assert bytes(t.buffers[0]) == tensors["model.layers.0.self_attn.q_proj.qweight"].tobytes()


def test_gptq_sharded(tmp_path):
    rng = np.random.default_rng(7)
    tensors, ref = _model(rng, LAYERS, g_idx=True)
    src = write_model(tmp_path / "m", tensors, _config(desc_act=True), shards=3)
    round_trip(tmp_path, src, "gptq3", tensors, ref, shards=3)


def test_gptq_8bit_and_v2(tmp_path):
    rng = np.random.default_rng(8)
    tensors, ref = _model(rng, LAYERS, extra=False, bits=8, group_size=32)
    src = write_model(tmp_path / "m8", tensors, _config(bits=8, group_size=32))
    round_trip(tmp_path, src, "gptq8", tensors, ref)
    tensors, ref = _model(rng, LAYERS, extra=False, v1=False)
    src = write_model(tmp_path / "v2", tensors, _config(fmt="gptq_v2"))
    round_trip(tmp_path, src, "gptqv2", tensors, ref)


def _bad(tmp_path, mutate, qc=None):
    rng = np.random.default_rng(3)
    tensors, _ = _model(rng, LAYERS, g_idx=True)
    qc = qc or _config(desc_act=True)
    mutate(tensors, qc)
    src = write_model(tmp_path / "bad", tensors, qc)
    before = listing(tmp_path)
    r = convert(src, tmp_path / "out.hurray")
    assert listing(tmp_path) == before  # the target is untouched
    return r


def test_qweight_disagreeing_with_scales(tmp_path):
    p = "model.layers.0.mlp.down_proj"

    def mutate(t, qc):
        t[f"{p}.scales"] = t[f"{p}.scales"][:, :32].copy()

    r = _bad(tmp_path, mutate)
    assert_one_line_failure(r, [f"{p}.qweight", "scales"])


def test_g_idx_out_of_range(tmp_path):
    p = "model.layers.0.self_attn.q_proj"

    def mutate(t, qc):
        t[f"{p}.g_idx"] = t[f"{p}.g_idx"].copy()
        t[f"{p}.g_idx"][5] = 4  # 64 rows / 16 = 4 groups: 0..3

    r = _bad(tmp_path, mutate)
    assert_one_line_failure(r, [f"{p}.g_idx", "entry 5", "4"])


def test_missing_config_key(tmp_path):
    r = _bad(tmp_path, lambda t, qc: qc.pop("bits"))
    assert_one_line_failure(r, ["config.json", "'bits'"])
    r = _bad(tmp_path / "2", lambda t, qc: qc.pop("group_size"))
    assert_one_line_failure(r, ["config.json", "'group_size'"])


def test_missing_member(tmp_path):
    p = "model.layers.0.self_attn.q_proj"
    r = _bad(tmp_path, lambda t, qc: t.pop(f"{p}.qzeros"))
    assert_one_line_failure(r, [f"{p}.qweight", f"{p}.qzeros"])


def test_unsupported_bits(tmp_path):
    r = _bad(tmp_path, lambda t, qc: qc.update(bits=3))
    assert_one_line_failure(r, ["'bits'", "3"])
    r = _bad(tmp_path / "2", lambda t, qc: qc.update(bits="4"))
    assert_one_line_failure(r, ["'bits'", "is '4', not an int"])


def test_group_size_larger_than_the_layer(tmp_path):
    """One group of a size past 2**64: the scales disagree, said in words."""
    r = _bad(tmp_path, lambda t, qc: qc.update(group_size=2**64 + 32))
    assert_one_line_failure(r, ["with 1 group of 18446744073709551648", "scales"])


def test_hurray_copy_keeps_the_convention(tmp_path):
    rng = np.random.default_rng(11)
    tensors, ref = _model(rng, LAYERS)
    src = write_model(tmp_path / "m", tensors, _config())
    assert_ok(convert(src, tmp_path / "a.hurray", "-q"))
    assert_ok(convert(tmp_path / "a.hurray", tmp_path / "b.hurray", "-q"))
    with hurray.open(str(tmp_path / "a.hurray")) as a, hurray.open(str(tmp_path / "b.hurray")) as b:
        assert dict(a.metadata) == dict(b.metadata)
        for k in a.keys():
            assert a[k].descriptor == b[k].descriptor
    # the copy converts back to the same tensors
    assert_ok(convert(tmp_path / "b.hurray", f"{tmp_path / 'back'}/", "-q"))
    from zoo_reference import read_folder

    assert read_folder(tmp_path / "back") == read_folder(src)
