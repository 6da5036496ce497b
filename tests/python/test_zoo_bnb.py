"""bitsandbytes 4-bit checkpoints as transformers saves them (NF4 and FP4,
with and without double quantization): built with bitsandbytes' own
quantize_4bit on CPU and QuantState.as_dict(packed=True) (what
transformers' Params4bit writes into the state dict); each weight becomes
one NF4-kind tensor whose dequantize() equals
bitsandbytes.functional.dequantize_4bit on CPU bit for bit, and the folder
converts back byte for byte (quant_state JSON included)."""

import json
import os

import numpy as np
import pytest
import zoo_float_refs as R

import hurray
from hurray.convert.zoo import bnb

torch = pytest.importorskip("torch")
F = pytest.importorskip("bitsandbytes.functional")


def _config(quant_type, nested):
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "quantization_config": {
            "_load_in_4bit": True,
            "_load_in_8bit": False,
            "bnb_4bit_compute_dtype": "float32",
            "bnb_4bit_quant_storage": "uint8",
            "bnb_4bit_quant_type": quant_type,
            "bnb_4bit_use_double_quant": nested,
            "llm_int8_enable_fp32_cpu_offload": False,
            "llm_int8_has_fp16_weight": False,
            "llm_int8_skip_modules": None,
            "llm_int8_threshold": 6.0,
            "load_in_4bit": True,
            "load_in_8bit": False,
            "quant_method": "bitsandbytes",
        },
    }


# (out, in): several blocks, a partial nested block, a partial 4-bit block.
# in_features is a multiple of every block size tested, or odd: bitsandbytes'
# native CPU kernel indexes blocks per row (row * ceil(in / block) + col /
# block), which is its flat definition only then (test_native_cpu_kernel_rows).
SHAPES = [(96, 256), (40, 128), (6, 9)]


def _checkpoint(folder, quant_type="nf4", nested=True, blocksize=64, shards=1, seed=0):
    torch.manual_seed(seed)
    tensors, refs = {}, {}
    for i, shape in enumerate(SHAPES):
        p = f"model.layers.{i}.mlp.down_proj"
        w = torch.randn(*shape, dtype=torch.float32)
        q, st = F.quantize_4bit(
            w, blocksize=blocksize, compress_statistics=nested, quant_type=quant_type
        )
        tensors[p + ".weight"] = q
        for k, v in st.as_dict(packed=True).items():
            tensors[p + ".weight." + k] = v
        refs[p + ".weight"] = F.dequantize_4bit(q, st).numpy()
        assert refs[p + ".weight"].dtype == np.float32 and refs[p + ".weight"].shape == shape
    tensors["model.layers.0.input_layernorm.weight"] = torch.ones(64, dtype=torch.bfloat16)
    R.write_folder(folder, tensors, _config(quant_type, nested), shards=shards)
    return refs


# Bit for bit, except the sign of a zero: bitsandbytes' FP4 kernels (CUDA,
# and the native CPU kernel in 0.50.2) give -0.0 for code 0b1000, while the
# checkpoint's own quant_map, which hurray dequantizes with, stores +0.0
# there (and bitsandbytes' generic dequantizer agrees with it).
_equal_to_bnb = R.bits_equal_but_zero_sign

CASES = [
    ("nf4", True, 64),
    ("nf4", False, 64),
    ("fp4", True, 64),
    ("fp4", False, 128),
    ("nf4", True, 32),
]


def test_reference_matches_bitsandbytes():
    # the independent numpy reference agrees with bitsandbytes on CPU
    torch.manual_seed(3)
    w = torch.randn(40, 64)
    q, st = F.quantize_4bit(w, blocksize=64, compress_statistics=True, quant_type="nf4")
    nested = (
        st.state2.code.numpy(),
        st.state2.absmax.numpy(),
        st.state2.blocksize,
        np.float32(st.offset.item()),
    )
    mine = R.ref_bnb_4bit(q.numpy(), st.absmax.numpy(), st.code.numpy(), 64, (40, 64), nested)
    assert R.bits_equal(mine, F.dequantize_4bit(q, st).numpy())


@pytest.mark.parametrize("quant_type,nested,blocksize", CASES)
def test_dequantize_bit_exact(tmp_path, quant_type, nested, blocksize):
    refs = _checkpoint(tmp_path / "m", quant_type, nested, blocksize)
    built = R.build_all(tmp_path / "m", bnb)
    assert sorted(built) == sorted(refs)
    for name, t in built.items():
        assert isinstance(t.descriptor.quantization, hurray.Nf4)
        assert t.descriptor.shape == refs[name].shape
        assert _equal_to_bnb(t.dequantize(), refs[name]), name
        assert _equal_to_bnb(t.dequantize(threads=4), refs[name]), name


@pytest.mark.parametrize("quant_type,nested,blocksize", CASES[:3])
def test_convert_round_trip(tmp_path, quant_type, nested, blocksize):
    refs = _checkpoint(tmp_path / "m", quant_type, nested, blocksize, shards=2)
    out = R.round_trip(tmp_path / "m", str(tmp_path), refs, equal=_equal_to_bnb)
    with hurray.open(out) as f:
        names = list(f.keys())
        assert not any(".absmax" in n or "quant_state" in n for n in names)
        for name, ref in refs.items():
            assert _equal_to_bnb(f[name].dequantize(), ref)


def test_native_cpu_kernel_rows(tmp_path):
    # in_features 64 < blocksize 128: bitsandbytes' quantizer and its
    # generic dequantizer (the CUDA definition) use flat blocks, its native
    # CPU kernel a block per row; hurray follows the flat definition.
    from bitsandbytes.backends.default.ops import _dequantize_4bit_compute
    from bitsandbytes.backends.utils import _get_4bit_code

    torch.manual_seed(5)
    w = torch.randn(40, 64)
    q, st = F.quantize_4bit(w, blocksize=128, compress_statistics=False, quant_type="fp4")
    generic = _dequantize_4bit_compute(
        q.reshape(-1), st.absmax, _get_4bit_code("fp4", q.device), 128, (40, 64), torch.float32
    ).numpy()
    mine = R.ref_bnb_4bit(q.numpy(), st.absmax.numpy(), st.code.numpy(), 128, (40, 64))
    assert R.bits_equal(mine, generic)
    assert not R.bits_equal(F.dequantize_4bit(q, st).numpy(), generic)
    tensors = {"l.weight": q}
    tensors.update({"l.weight." + k: v for k, v in st.as_dict(packed=True).items()})
    R.write_folder(tmp_path / "m", tensors, _config("fp4", False))
    assert R.bits_equal(R.build_all(tmp_path / "m")["l.weight"].dequantize(), generic)


def _one_line_error(folder, out, *needles):
    r = R.run_convert(folder, out, expect_ok=False)
    assert r.returncode != 0, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def _edit(folder, name, fn):
    """Rewrites one tensor of the (single-file) checkpoint."""
    from safetensors.torch import load_file, save_file

    path = os.path.join(folder, "model.safetensors")
    ts = load_file(path)
    ts[name] = fn(ts[name])
    if ts[name] is None:
        del ts[name]
    save_file(ts, path)


def test_malformed_absmax_shape(tmp_path):
    _checkpoint(tmp_path / "m")
    name = "model.layers.1.mlp.down_proj.weight.absmax"
    _edit(tmp_path / "m", name, lambda t: t[:-1].clone())
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", name, "shape")


def test_missing_nested_quant_map(tmp_path):
    _checkpoint(tmp_path / "m")
    name = "model.layers.0.mlp.down_proj.weight.nested_quant_map"
    _edit(tmp_path / "m", name, lambda t: None)
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", name)


def test_quant_state_missing_key(tmp_path):
    _checkpoint(tmp_path / "m")
    name = "model.layers.2.mlp.down_proj.weight.quant_state.bitsandbytes__nf4"

    def drop_blocksize(t):
        state = json.loads(bytes(t.numpy()).decode())
        del state["blocksize"]
        return torch.tensor(list(json.dumps(state).encode()), dtype=torch.uint8)

    _edit(tmp_path / "m", name, drop_blocksize)
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", name, "blocksize")


def test_truncated_codes(tmp_path):
    _checkpoint(tmp_path / "m", nested=False)
    name = "model.layers.0.mlp.down_proj.weight"
    _edit(tmp_path / "m", name, lambda t: t[:-3].clone())
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", name)


def test_odd_element_count_refused(tmp_path):
    torch.manual_seed(6)
    q, st = F.quantize_4bit(torch.randn(7, 9), blocksize=64, quant_type="nf4")
    tensors = {"l.weight": q}
    tensors.update({"l.weight." + k: v for k, v in st.as_dict(packed=True).items()})
    R.write_folder(tmp_path / "m", tensors, _config("nf4", True))
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", "'l.weight'", "odd number")


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_weights(tmp_path, dtype):
    # the usual checkpoint: bf16/fp16 weights, quant_state dtype the same;
    # dequantize_4bit returns that dtype, hurray's float32 rounded once to it
    import ml_dtypes

    torch.manual_seed(7)
    tdt = getattr(torch, dtype)
    q, st = F.quantize_4bit(torch.randn(96, 256).to(tdt), blocksize=64, quant_type="nf4")
    ref = F.dequantize_4bit(q, st)
    assert ref.dtype == tdt
    tensors = {"l.weight": q}
    tensors.update({"l.weight." + k: v for k, v in st.as_dict(packed=True).items()})
    R.write_folder(tmp_path / "m", tensors, _config("nf4", True))
    t = R.build_all(tmp_path / "m")["l.weight"]
    out = t.dequantize(dtype=ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float16)
    assert np.array_equal(out.view(np.int16), ref.view(torch.int16).numpy())


@pytest.mark.parametrize(
    "patch,needle",
    [
        ({"nested_blocksize": 2**70}, "nested_blocksize"),
        ({"nested_blocksize": -3}, "nested_blocksize"),
        ({"nested_offset": float("nan")}, "scale_offset"),
        ({"nested_offset": 1e300}, "scale_offset"),
        ({"nested_offset": "x"}, "nested_offset"),
        ({"blocksize": 2**64}, "blocksize"),
        ({"blocksize": True}, "blocksize"),
        ({"shape": [2**62, 2**62]}, "shape"),
        ({"shape": "8x64"}, "shape"),
        ({"dtype": "int8"}, "dtype"),
        ({"quant_type": "fp4"}, "quant_type"),
    ],
)
def test_hostile_quant_state(tmp_path, patch, needle):
    torch.manual_seed(8)
    q, st = F.quantize_4bit(
        torch.randn(8, 64), blocksize=64, quant_type="nf4", compress_statistics=True
    )
    tensors = {"l.weight": q}
    tensors.update({"l.weight." + k: v for k, v in st.as_dict(packed=True).items()})
    key = "l.weight.quant_state.bitsandbytes__nf4"
    state = json.loads(bytes(tensors[key].numpy()).decode())
    state.update(patch)
    tensors[key] = torch.tensor(list(json.dumps(state).encode()), dtype=torch.uint8)
    R.write_folder(tmp_path / "m", tensors, _config("nf4", True))
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", "'l.weight", needle)


def test_oversized_quant_state(tmp_path):
    torch.manual_seed(9)
    q, st = F.quantize_4bit(torch.randn(8, 64), blocksize=64, quant_type="nf4")
    tensors = {"l.weight": q}
    tensors.update({"l.weight." + k: v for k, v in st.as_dict(packed=True).items()})
    key = "l.weight.quant_state.bitsandbytes__nf4"
    state = json.loads(bytes(tensors[key].numpy()).decode())
    state["padding"] = "x" * 100_000
    tensors[key] = torch.tensor(list(json.dumps(state).encode()), dtype=torch.uint8)
    R.write_folder(tmp_path / "m", tensors, _config("nf4", False))
    _one_line_error(tmp_path / "m", tmp_path / "o.hurray", key, "bytes")
