"""NVFP4 checkpoints as NVIDIA ModelOpt saves them (weight uint8 [N, K/2],
weight_scale F8_E4M3 [N, K/16], weight_scale_2 f32 scalar, input_scale)
and as compressed-tensors saves them ("nvfp4-pack-quantized":
weight_packed, weight_scale, weight_global_scale). compressed-tensors
installs here: test_compressed_tensors_package uses its compressor as the
writer and its dequantize as the reference. ModelOpt does not, so its
checkpoints are written byte for byte from the definition, and
dequantization is checked bit for bit against numpy copies of each
package's dequantize: ModelOpt forms f32(scale) *
weight_scale_2 first, compressed-tensors f32(scale) / weight_global_scale
first, then one multiplication by the FP4 value."""

import json

import numpy as np
import pytest
import zoo_float_refs as R

import hurray
from hurray.convert.zoo import nvfp4

MODELOPT = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "quantization_config": {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "group_size": 16,
        "kv_cache_quant_algo": None,
        "exclude_modules": ["lm_head"],
        "producer": {"name": "modelopt", "version": "0.29.0"},
    },
}

CT = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "quantization_config": {
        "quant_method": "compressed-tensors",
        "format": "nvfp4-pack-quantized",
        "quantization_status": "compressed",
        "config_groups": {
            "group_0": {
                "targets": ["Linear"],
                "weights": {
                    "num_bits": 4,
                    "type": "float",
                    "strategy": "tensor_group",
                    "group_size": 16,
                    "symmetric": True,
                    "dynamic": False,
                },
                "input_activations": {
                    "num_bits": 4,
                    "type": "float",
                    "strategy": "tensor_group",
                    "group_size": 16,
                    "symmetric": True,
                    "dynamic": "local",
                },
            }
        },
        "ignore": ["lm_head"],
    },
}

SHAPES = [(64, 256), (48, 32), (3, 16)]


def _fp8_scales(rng, shape):
    # positive finite E4M3 bytes, the full exponent range (0x01..0x7E)
    return rng.integers(1, 0x7F, size=shape, dtype=np.uint8)


def _checkpoint(folder, rng, flavour, shards=1):
    tensors, refs = {}, {}
    for i, (n, k) in enumerate(SHAPES):
        p = f"model.layers.{i}.self_attn.o_proj"
        packed = rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
        scale = _fp8_scales(rng, (n, k // 16))
        glob = np.float32(rng.random() * 3e-3 + 1e-4)
        if flavour == "modelopt":
            tensors[p + ".weight"] = R.torch_tensor(packed, "U8")
            tensors[p + ".weight_scale"] = R.torch_tensor(scale, "F8_E4M3")
            tensors[p + ".weight_scale_2"] = R.torch_tensor(np.array(glob), "F32")
            tensors[p + ".input_scale"] = R.torch_tensor(np.array(np.float32(0.25)), "F32")
            refs[p + ".weight"] = R.ref_nvfp4_modelopt(packed, scale, glob)
        else:
            glob = np.float32(1.0 / glob)  # compressed-tensors divides by it
            tensors[p + ".weight_packed"] = R.torch_tensor(packed, "U8")
            tensors[p + ".weight_scale"] = R.torch_tensor(scale, "F8_E4M3")
            tensors[p + ".weight_global_scale"] = R.torch_tensor(np.array([glob]), "F32")
            tensors[p + ".input_global_scale"] = R.torch_tensor(np.array([np.float32(9.0)]), "F32")
            refs[p + ".weight"] = R.ref_nvfp4_ct(packed, scale, glob)
    tensors["lm_head.weight"] = R.torch_tensor(
        rng.standard_normal((8, 32)).astype(np.float32), "BF16"
    )
    R.write_folder(folder, tensors, MODELOPT if flavour == "modelopt" else CT, shards=shards)
    return refs


def test_order_of_scaling_matters():
    # the two orders differ on these data, so the bit-exact checks below
    # do tell "scale first" from "value times scale, then times global"
    rng = np.random.default_rng(11)
    packed = rng.integers(0, 256, size=(64, 128), dtype=np.uint8)
    scale = _fp8_scales(rng, (64, 16))
    glob = np.float32(0.0013)
    first = R.ref_nvfp4_modelopt(packed, scale, glob)
    vals = R.unpack_fp4_low_first(packed)
    later = (vals * np.repeat(R.FP8_E4M3[scale], 16, axis=1)) * glob
    assert not R.bits_equal(first, later)


def test_modelopt_nested_quantization_config(tmp_path):
    # quant_algo inside a "quantization" object, as hf_quant_config.json has it
    refs = _checkpoint(tmp_path / "m", np.random.default_rng(14), "modelopt")
    import os

    cfg = os.path.join(tmp_path / "m", "config.json")
    c = json.load(open(cfg))
    qc = c["quantization_config"]
    c["quantization_config"] = {
        "quant_method": "modelopt",
        "producer": qc["producer"],
        "quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]},
    }
    with open(cfg, "w") as f:
        json.dump(c, f, indent=2)
    built = R.build_all(tmp_path / "m")
    assert sorted(built) == sorted(refs)
    for name, t in built.items():
        assert R.bits_equal(t.dequantize(), refs[name]), name


@pytest.mark.parametrize("flavour", ["modelopt", "compressed-tensors"])
def test_dequantize_bit_exact(tmp_path, flavour):
    refs = _checkpoint(tmp_path / "m", np.random.default_rng(1), flavour)
    built = R.build_all(tmp_path / "m", nvfp4)
    assert sorted(built) == sorted(refs)
    for name, t in built.items():
        d = t.descriptor
        assert d.dtype == "float4_e2m1fn" and isinstance(d.quantization, hurray.BlockAffine)
        assert R.bits_equal(t.dequantize(), refs[name]), name
        assert R.bits_equal(t.dequantize(threads=4), refs[name]), name


@pytest.mark.parametrize("flavour,shards", [("modelopt", 1), ("compressed-tensors", 2)])
def test_convert_round_trip(tmp_path, flavour, shards):
    refs = _checkpoint(tmp_path / "m", np.random.default_rng(2), flavour, shards)
    out = R.round_trip(tmp_path / "m", str(tmp_path), refs)
    with hurray.open(out) as f:
        names = list(f.keys())
        assert not any(
            n.endswith(("weight_scale", "weight_scale_2", "weight_packed")) for n in names
        )
        for name, ref in refs.items():
            assert R.bits_equal(f[name].dequantize(), ref)


def _one_line_error(folder, out, *needles):
    r = R.run_convert(folder, out, expect_ok=False)
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_malformed_scale_shape(tmp_path):
    rng = np.random.default_rng(3)
    tensors = {
        "l.weight": R.torch_tensor(rng.integers(0, 256, (8, 16), dtype=np.uint8), "U8"),
        "l.weight_scale": R.torch_tensor(_fp8_scales(rng, (8, 3)), "F8_E4M3"),
        "l.weight_scale_2": R.torch_tensor(np.array(np.float32(1.0)), "F32"),
    }
    R.write_folder(tmp_path / "m", tensors, MODELOPT)
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", "'l.weight_scale'", "shape")


def test_missing_global_scale_partner(tmp_path):
    rng = np.random.default_rng(4)
    tensors = {
        "l.weight_packed": R.torch_tensor(rng.integers(0, 256, (8, 16), dtype=np.uint8), "U8"),
        "l.weight_global_scale": R.torch_tensor(np.array([np.float32(1.0)]), "F32"),
    }
    R.write_folder(tmp_path / "m", tensors, CT)
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", "'l.weight_scale'")


def test_missing_config_key(tmp_path):
    _checkpoint(tmp_path / "m", np.random.default_rng(5), "compressed-tensors")
    import json
    import os

    cfg = os.path.join(tmp_path / "m", "config.json")
    c = json.load(open(cfg))
    c["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = "sixteen"
    json.dump(c, open(cfg, "w"))
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", "group_size")


def test_mixed_compressed_tensors_formats(tmp_path):
    # llm-compressor's mixed precision: each config group has its format;
    # the FP8 family reads the float-quantized layers, NVFP4 the others
    rng = np.random.default_rng(12)
    config = json.loads(json.dumps(CT))
    qc = config["quantization_config"]
    qc["format"] = "mixed-precision"
    qc["config_groups"]["group_0"]["format"] = "nvfp4-pack-quantized"
    qc["config_groups"]["group_0"]["targets"] = ["re:.*o_proj$"]
    qc["config_groups"]["group_1"] = {
        "format": "float-quantized",
        "targets": ["re:.*q_proj$"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
    }
    packed = rng.integers(0, 256, size=(32, 32), dtype=np.uint8)
    scale = _fp8_scales(rng, (32, 4))
    glob = np.float32(300.0)
    codes = R.random_fp8(rng, (16, 64))
    ch = (rng.random((16, 1)) * 1e-2).astype(np.float32)
    tensors = {
        "m.o_proj.weight_packed": R.torch_tensor(packed, "U8"),
        "m.o_proj.weight_scale": R.torch_tensor(scale, "F8_E4M3"),
        "m.o_proj.weight_global_scale": R.torch_tensor(np.array([glob]), "F32"),
        "m.q_proj.weight": R.torch_tensor(codes, "F8_E4M3"),
        "m.q_proj.weight_scale": R.torch_tensor(ch, "F32"),
    }
    R.write_folder(tmp_path / "m", tensors, config)
    refs = {
        "m.o_proj.weight": R.ref_nvfp4_ct(packed, scale, glob),
        "m.q_proj.weight": R.ref_fp8_scaled(codes, np.broadcast_to(ch, (16, 64))),
    }
    built = R.build_all(tmp_path / "m")
    assert sorted(built) == sorted(refs)
    for name, t in built.items():
        assert R.bits_equal(t.dequantize(), refs[name]), name
    R.round_trip(tmp_path / "m", str(tmp_path), refs)


def test_compressed_tensors_package(tmp_path):
    # compressed-tensors' own NVFP4PackedCompressor writes the weights; its
    # unpack_fp4_from_uint8 and dequantize (in float32) are the reference
    torch = pytest.importorskip("torch")
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.nvfp4.base import NVFP4PackedCompressor
    from compressed_tensors.compressors.nvfp4.helpers import unpack_fp4_from_uint8
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    args = QuantizationArgs(
        num_bits=4, type="float", strategy="tensor_group", group_size=16, symmetric=True
    )
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    torch.manual_seed(11)
    n, k = 64, 256
    w = torch.randn(n, k)
    g = torch.tensor([448.0 * 6.0]) / w.abs().max()
    scale = w.reshape(n, k // 16, 16).abs().amax(-1) / 6.0 * g
    sd = NVFP4PackedCompressor.compress(
        {"weight": w, "weight_scale": scale, "weight_global_scale": g}, scheme
    )
    packed = sd["weight_packed"]
    ref = dequantize(
        x_q=unpack_fp4_from_uint8(packed, n, k, dtype=torch.float32),
        scale=sd["weight_scale"].to(torch.float32),
        args=args,
        global_scale=sd["weight_global_scale"],
        dtype=torch.float32,
    ).numpy()
    assert ref.dtype == np.float32
    # and the independent numpy reading agrees with the package
    mine = R.ref_nvfp4_ct(
        packed.numpy(),
        sd["weight_scale"].view(torch.uint8).numpy(),
        sd["weight_global_scale"].numpy()[0],
    )
    assert R.bits_equal(mine, ref)
    p = "model.layers.0.self_attn.o_proj"
    tensors = {p + "." + key: v for key, v in sd.items()}
    R.write_folder(tmp_path / "m", tensors, CT)
    t = R.build_all(tmp_path / "m")[p + ".weight"]
    assert R.bits_equal(t.dequantize(), ref)
    R.round_trip(tmp_path / "m", str(tmp_path), {p + ".weight": ref})
