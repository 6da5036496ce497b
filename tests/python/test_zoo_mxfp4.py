"""gpt-oss MXFP4 checkpoints (quantization_config quant_method "mxfp4"):
`*_blocks` uint8 [E, N, K/32, 16] and `*_scales` uint8 E8M0 [E, N, K/32]
become one MX tensor [E, N, K]; dequantization is checked bit for bit
against a float32 numpy copy of transformers' convert_moe_packed_tensors
(transformers does not install here), and the folder converts back byte
for byte."""

import os

import numpy as np
import pytest
import zoo_float_refs as R

import hurray
from hurray.convert.zoo import mxfp4

CONFIG = {
    "architectures": ["GptOssForCausalLM"],
    "model_type": "gpt_oss",
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_local_experts": 3,
    "quantization_config": {
        "modules_to_not_convert": ["model.layers.*.self_attn", "model.embed_tokens", "lm_head"],
        "quant_method": "mxfp4",
    },
}


def _checkpoint(folder, rng, shards=1, scales_dtype="U8"):
    E, H, I = 3, 64, 96
    tensors, refs = {}, {}
    for layer in range(2):
        p = f"model.layers.{layer}.mlp.experts."
        for proj, (n, k) in (("gate_up_proj", (2 * I, H)), ("down_proj", (H, I))):
            blocks = rng.integers(0, 256, size=(E, n, k // 32, 16), dtype=np.uint8)
            # every exponent the format can give a finite value, edges included
            scales = rng.integers(0, 255, size=(E, n, k // 32), dtype=np.uint8)
            scales.reshape(-1)[:3] = [0, 127, 254]
            tensors[p + proj + "_blocks"] = R.torch_tensor(blocks, "U8")
            tensors[p + proj + "_scales"] = R.torch_tensor(scales, scales_dtype)
            tensors[p + proj + "_bias"] = R.torch_tensor(
                rng.standard_normal((E, n)).astype(np.float32), "F32"
            )
            refs[p + proj] = R.ref_mxfp4(blocks, scales)
        tensors[f"model.layers.{layer}.self_attn.q_proj.weight"] = R.torch_tensor(
            rng.standard_normal((H, H)).astype(np.float32), "BF16"
        )
    R.write_folder(folder, tensors, CONFIG, shards=shards)
    return refs


def test_reference_matches_nibble_order():
    # convert_moe_packed_tensors puts lut[blk & 0xF] at even positions
    blocks = np.zeros((1, 1, 16), np.uint8)
    blocks[0, 0, 0] = 0x72  # low nibble 2 (1.0), high nibble 7 (6.0)
    v = R.ref_mxfp4(blocks, np.full((1, 1), 127, np.uint8))
    assert v[0, 0] == 1.0 and v[0, 1] == 6.0


def test_dequantize_bit_exact(tmp_path):
    refs = _checkpoint(tmp_path / "m", np.random.default_rng(1))
    built = R.build_all(tmp_path / "m", mxfp4)
    assert sorted(built) == sorted(refs)
    for name, t in built.items():
        d = t.descriptor
        assert d.dtype == "float4_e2m1fn" and isinstance(d.quantization, hurray.Mxfp)
        assert d.shape == refs[name].shape
        assert R.bits_equal(t.dequantize(), refs[name]), name
        assert R.bits_equal(t.dequantize(threads=4), refs[name]), name


def test_scale_byte_ff_is_a_nan_block_where_transformers_gives_2_to_128(tmp_path):
    """The one documented difference (convert.md, quantization.md §7.5):
    E8M0 0xFF is NaN for the whole block in OCP MX, which hurray follows;
    transformers' ldexp makes it 2^128. gpt-oss never writes it."""
    blocks = np.full((1, 1, 2, 16), 0x21, np.uint8)  # codes 0.5 and 1.0 in turn
    scales = np.array([[[255, 128]]], np.uint8)
    p = "model.layers.0.mlp.experts.down_proj"
    tensors = {
        p + "_blocks": R.torch_tensor(blocks, "U8"),
        p + "_scales": R.torch_tensor(scales, "U8"),
    }
    R.write_folder(tmp_path / "m", tensors, CONFIG)
    got = R.build_all(tmp_path / "m", mxfp4)[p].dequantize().reshape(-1)
    ref = R.ref_mxfp4(blocks, scales).reshape(-1)
    assert np.isnan(got[:32]).all()
    assert not np.isnan(ref[:32]).any() and np.isinf(ref[1])
    assert R.bits_equal(got[32:], ref[32:])


@pytest.mark.parametrize("shards", [1, 2])
def test_convert_round_trip(tmp_path, shards):
    refs = _checkpoint(tmp_path / "m", np.random.default_rng(2), shards=shards)
    out = R.round_trip(tmp_path / "m", str(tmp_path), refs)
    with hurray.open(out) as f:
        for name, ref in refs.items():
            t = f[name]
            assert t.descriptor.shape == ref.shape
            assert R.bits_equal(t.dequantize(), ref)
        assert not any(n.endswith("_blocks") or n.endswith("_scales") for n in f.keys())


def test_e8m0_scales_dtype_round_trip(tmp_path):
    refs = _checkpoint(tmp_path / "m", np.random.default_rng(3), scales_dtype="F8_E8M0")
    R.round_trip(tmp_path / "m", str(tmp_path), refs)


def test_malformed_scales_shape(tmp_path):
    rng = np.random.default_rng(4)
    tensors = {
        "e.gate_up_proj_blocks": R.torch_tensor(np.zeros((2, 8, 2, 16), np.uint8), "U8"),
        "e.gate_up_proj_scales": R.torch_tensor(np.zeros((2, 8, 3), np.uint8), "U8"),
    }
    R.write_folder(tmp_path / "m", tensors, CONFIG)
    with pytest.raises(Exception, match=r"e\.gate_up_proj_scales.*shape"):
        R.build_all(tmp_path / "m", mxfp4)
    r = R.run_convert(tmp_path / "m", tmp_path / "o.hurray", expect_ok=False)
    assert r.returncode != 0
    assert "e.gate_up_proj_scales" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    del rng


def test_missing_scales(tmp_path):
    tensors = {"e.down_proj_blocks": R.torch_tensor(np.zeros((1, 4, 1, 16), np.uint8), "U8")}
    R.write_folder(tmp_path / "m", tensors, CONFIG)
    r = R.run_convert(tmp_path / "m", tmp_path / "o.hurray", expect_ok=False)
    assert r.returncode != 0 and "e.down_proj_scales" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_truncated_member(tmp_path):
    _checkpoint(tmp_path / "m", np.random.default_rng(5))
    path = os.path.join(tmp_path / "m", "model.safetensors")
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 100)
    r = R.run_convert(tmp_path / "m", tmp_path / "o.hurray", expect_ok=False)
    # safetensors checks the whole data section when it opens the file
    assert r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1
    assert "model.safetensors" in r.stderr and "TRUNCATED" in r.stderr
