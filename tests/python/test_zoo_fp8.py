"""FP8 checkpoints: DeepSeek-V3/R1 block scales (quant_method "fp8",
weight_block_size [128, 128], `weight_scale_inv` multiplies, partial edge
blocks), compressed-tensors "float-quantized" (tensor, channel, group
and block strategies) and ModelOpt FP8 (per tensor). Written with
safetensors' own writer, byte for byte as those tools save them, and with
compressed-tensors' own compressor (test_compressed_tensors_package, whose
decompress() is then the reference); otherwise dequantization is checked
bit for bit against a numpy reference of each definition (DeepSeek's
weight_dequant: f32(fp8) * scale_inv; DeepSeek's code does not install
here), then converted back byte for byte."""

import json

import numpy as np
import pytest
import zoo_float_refs as R

import hurray
from hurray.convert.zoo import fp8

DEEPSEEK = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "quantization_config": {
        "activation_scheme": "dynamic",
        "fmt": "e4m3",
        "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
}


def _ct_config(strategy, **extra):
    weights = {
        "num_bits": 8,
        "type": "float",
        "symmetric": True,
        "strategy": strategy,
        "dynamic": False,
        "group_size": None,
        "block_structure": None,
        "observer": "minmax",
    }
    weights.update(extra)
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "quantization_status": "compressed",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": weights,
                    "input_activations": None,
                    "output_activations": None,
                }
            },
            "ignore": ["lm_head"],
        },
    }


# shapes with partial edge blocks in both axes, and an exact one
SHAPES = [(300, 200), (256, 384), (129, 1)]


def _deepseek(folder, rng, shards=1):
    tensors, refs = {}, {}
    for i, (n, k) in enumerate(SHAPES):
        p = f"model.layers.{i}.mlp.up_proj"
        codes = R.random_fp8(rng, (n, k))
        scale = (rng.random((-(-n // 128), -(-k // 128))) * 1e-2 + 1e-4).astype(np.float32)
        scale.reshape(-1)[0] = 2.0**-140  # a subnormal scale
        tensors[p + ".weight"] = R.torch_tensor(codes, "F8_E4M3")
        tensors[p + ".weight_scale_inv"] = R.torch_tensor(scale, "F32")
        refs[p + ".weight"] = R.ref_fp8_block(codes, scale, 128, 128)
    tensors["model.norm.weight"] = R.torch_tensor(np.ones(64, np.float32), "BF16")
    R.write_folder(folder, tensors, DEEPSEEK, shards=shards)
    return refs


def _ct(folder, rng, strategy, n=96, k=256, scale_dtype="F32", **extra):
    tensors, refs = {}, {}
    p = "model.layers.0.self_attn.q_proj"
    codes = R.random_fp8(rng, (n, k))
    if strategy == "tensor":
        shape = (1,)
        full = lambda s: np.broadcast_to(s.reshape(1, 1), (n, k))  # noqa: E731
    elif strategy == "channel":
        shape = (n, 1)
        full = lambda s: np.broadcast_to(s.reshape(n, 1), (n, k))  # noqa: E731
    elif strategy == "group":
        g = extra["group_size"]
        shape = (n, -(-k // g))
        full = lambda s: np.repeat(s, g, 1)[:, :k]  # noqa: E731
    else:
        bn, bk = extra["block_structure"]
        shape = (-(-n // bn), -(-k // bk))
        full = lambda s: np.repeat(np.repeat(s, bn, 0), bk, 1)[:n, :k]  # noqa: E731
    scale = (rng.random(shape) * 1e-2 + 1e-4).astype(np.float32)
    t = R.torch_tensor(scale, scale_dtype)
    scale_f32 = t.float().numpy()
    tensors[p + ".weight"] = R.torch_tensor(codes, "F8_E4M3")
    tensors[p + ".weight_scale"] = t
    tensors[p + ".input_scale"] = R.torch_tensor(np.array([0.5], np.float32), "F32")
    tensors["lm_head.weight"] = R.torch_tensor(
        rng.standard_normal((8, k)).astype(np.float32), "BF16"
    )
    refs[p + ".weight"] = R.ref_fp8_scaled(codes, full(scale_f32))
    R.write_folder(folder, tensors, _ct_config(strategy, **extra))
    return refs


CT_CASES = [
    ("tensor", {}),
    ("channel", {}),
    ("group", {"group_size": 128}),
    ("block", {"block_structure": [128, 128]}),
]


def test_deepseek_bit_exact(tmp_path):
    refs = _deepseek(tmp_path / "m", np.random.default_rng(1))
    built = R.build_all(tmp_path / "m", fp8)
    assert sorted(built) == sorted(refs)
    for name, t in built.items():
        q = t.descriptor.quantization
        assert isinstance(q, hurray.BlockAffine) and (q.block_size, q.block_size2) == (128, 128)
        assert R.bits_equal(t.dequantize(), refs[name]), name
        assert R.bits_equal(t.dequantize(threads=3), refs[name]), name


@pytest.mark.parametrize("strategy,extra", CT_CASES)
@pytest.mark.parametrize("scale_dtype", ["F32", "BF16"])
def test_compressed_tensors_bit_exact(tmp_path, strategy, extra, scale_dtype):
    refs = _ct(tmp_path / "m", np.random.default_rng(2), strategy, scale_dtype=scale_dtype, **extra)
    built = R.build_all(tmp_path / "m", fp8)
    assert sorted(built) == sorted(refs)
    for name, t in built.items():
        assert R.bits_equal(t.dequantize(), refs[name]), (strategy, name)


@pytest.mark.parametrize("shards", [1, 3])
def test_deepseek_round_trip(tmp_path, shards):
    refs = _deepseek(tmp_path / "m", np.random.default_rng(3), shards=shards)
    out = R.round_trip(tmp_path / "m", str(tmp_path), refs)
    with hurray.open(out) as f:
        assert not any(n.endswith("weight_scale_inv") for n in f.keys())
        for name, ref in refs.items():
            assert R.bits_equal(f[name].dequantize(), ref)


@pytest.mark.parametrize("strategy,extra", CT_CASES)
def test_compressed_tensors_round_trip(tmp_path, strategy, extra):
    refs = _ct(tmp_path / "m", np.random.default_rng(4), strategy, **extra)
    R.round_trip(tmp_path / "m", str(tmp_path), refs)


def _one_line_error(folder, out, *needles):
    r = R.run_convert(folder, out, expect_ok=False)
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_malformed_scale_shape(tmp_path):
    rng = np.random.default_rng(5)
    tensors = {
        "l.weight": R.torch_tensor(R.random_fp8(rng, (300, 200)), "F8_E4M3"),
        "l.weight_scale_inv": R.torch_tensor(np.ones((2, 2), np.float32), "F32"),
    }
    R.write_folder(tmp_path / "m", tensors, DEEPSEEK)
    with pytest.raises(
        Exception, match=r"'l\.weight_scale_inv'.*shape \[2, 2\], expected \[3, 2\]"
    ):
        R.build_all(tmp_path / "m", fp8)
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", "l.weight_scale_inv")


def test_malformed_ct_scale_shape(tmp_path):
    _ct(tmp_path / "m", np.random.default_rng(6), "group", group_size=128)
    # rewrite the config to claim group 64: [96, 2] no longer fits
    import json
    import os

    cfg = os.path.join(tmp_path / "m", "config.json")
    c = json.load(open(cfg))
    c["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"] = 64
    json.dump(c, open(cfg, "w"))
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", "weight_scale")


def test_missing_weight(tmp_path):
    tensors = {"l.weight_scale_inv": R.torch_tensor(np.ones((1, 1), np.float32), "F32")}
    R.write_folder(tmp_path / "m", tensors, DEEPSEEK)
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", "'l.weight'")


def test_missing_config_key(tmp_path):
    _ct(tmp_path / "m", np.random.default_rng(7), "group", group_size=128)
    import json
    import os

    cfg = os.path.join(tmp_path / "m", "config.json")
    c = json.load(open(cfg))
    del c["quantization_config"]["config_groups"]["group_0"]["weights"]["group_size"]
    json.dump(c, open(cfg, "w"))
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", "config.json", "'group_size'")


def test_wrong_weight_dtype(tmp_path):
    tensors = {
        "l.weight": R.torch_tensor(np.ones((4, 4), np.float32), "BF16"),
        "l.weight_scale_inv": R.torch_tensor(np.ones((1, 1), np.float32), "F32"),
    }
    R.write_folder(tmp_path / "m", tensors, DEEPSEEK)
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", "'l.weight'", "dtype")


@pytest.mark.parametrize(
    "block", [[2**70, 128], [0, 128], [128], "128x128", [True, 128], [128.0, 128]]
)
def test_hostile_block_size(tmp_path, block):
    rng = np.random.default_rng(9)
    tensors = {
        "l.weight": R.torch_tensor(R.random_fp8(rng, (4, 4)), "F8_E4M3"),
        "l.weight_scale_inv": R.torch_tensor(np.ones((1, 1), np.float32), "F32"),
    }
    config = json.loads(json.dumps(DEEPSEEK))
    config["quantization_config"]["weight_block_size"] = block
    R.write_folder(tmp_path / "m", tensors, config)
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", "config.json", "weight_block_size")


MODELOPT_FP8 = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "quantization_config": {
        "quant_method": "modelopt",
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": None},
        "producer": {"name": "modelopt", "version": "0.29.0"},
    },
}


def test_modelopt_fp8_per_tensor(tmp_path):
    # ModelOpt FP8: weight F8_E4M3 and a scalar f32 weight_scale (multiplies)
    rng = np.random.default_rng(13)
    tensors, refs = {}, {}
    for i, (n, k) in enumerate(SHAPES):
        p = f"model.layers.{i}.mlp.gate_proj"
        codes = R.random_fp8(rng, (n, k))
        scale = np.float32(rng.random() * 1e-2 + 1e-4)
        tensors[p + ".weight"] = R.torch_tensor(codes, "F8_E4M3")
        tensors[p + ".weight_scale"] = R.torch_tensor(np.array(scale), "F32")
        tensors[p + ".input_scale"] = R.torch_tensor(np.array(np.float32(0.1)), "F32")
        refs[p + ".weight"] = R.FP8_E4M3[codes] * scale
    R.write_folder(tmp_path / "m", tensors, MODELOPT_FP8)
    built = R.build_all(tmp_path / "m")
    assert sorted(built) == sorted(refs)
    for name, t in built.items():
        assert R.bits_equal(t.dequantize(), refs[name]), name
    R.round_trip(tmp_path / "m", str(tmp_path), refs)


@pytest.mark.parametrize(
    "strategy,extra,shape",
    [
        ("tensor", {}, (96, 256)),
        ("channel", {}, (96, 256)),
        ("group", {"group_size": 128}, (96, 256)),
        ("block", {"block_structure": [128, 128]}, (300, 200)),
    ],
)
def test_compressed_tensors_package(tmp_path, strategy, extra, shape):
    # compressed-tensors' own FloatQuantizationCompressor writes the weights
    # and its decompress() is the reference (float32 scales)
    torch = pytest.importorskip("torch")
    pytest.importorskip("compressed_tensors")
    from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme

    args = QuantizationArgs(num_bits=8, type="float", strategy=strategy, symmetric=True, **extra)
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    n, k = shape
    sshape = {
        "tensor": (1,),
        "channel": (n, 1),
        "group": (n, -(-k // 128)),
        "block": (-(-n // 128), -(-k // 128)),
    }[strategy]
    torch.manual_seed(10)
    w = torch.randn(n, k)
    scale = torch.rand(*sshape) * 1e-2 + 1e-3
    sd = FloatQuantizationCompressor.compress({"weight": w, "weight_scale": scale}, scheme)
    ref = FloatQuantizationCompressor.decompress(dict(sd), scheme)["weight"].numpy()
    assert ref.dtype == np.float32
    p = "model.layers.0.mlp.down_proj"
    tensors = {p + ".weight": sd["weight"], p + ".weight_scale": sd["weight_scale"]}
    config = _ct_config(strategy, **extra)
    R.write_folder(tmp_path / "m", tensors, config)
    t = R.build_all(tmp_path / "m")[p + ".weight"]
    assert R.bits_equal(t.dequantize(), ref)
    R.round_trip(tmp_path / "m", str(tmp_path), {p + ".weight": ref})
