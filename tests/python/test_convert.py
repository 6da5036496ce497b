"""hurray convert: checkpoints made with the peers' own writers (safetensors,
gguf, numpy, torch) converted to hurray and back.

What the converter issue asks to be shown:
  * safetensors -> hurray -> safetensors is byte-identical in every tensor,
    metadata included (single files and sharded checkpoints);
  * GGUF Q8_0/Q4_0 -> hurray -> GGUF gives the same block bytes (and, with
    F32/F16/BF16 tensors and typed KV pairs, the same file);
  * .npz, .npy and torch round trips are exact;
  * unsupported GGUF types are refused with their name;
and also: the default quantization rule and its overrides, the report's
numbers, --quiet, --keep-scales, the CLI's exit codes, and torch files
loaded with weights_only=True (a pickled object is refused)."""

import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import hurray
from hurray.convert import (
    ConversionError,
    UsageError,
    _driver,
    convert,
    default_quantize_rule,
    describe,
)

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")
gguf = pytest.importorskip("gguf")
import gguf.quants as gq  # noqa: E402
import safetensors.torch as st  # noqa: E402
from gguf import GGMLQuantizationType as GQ  # noqa: E402
from gguf import GGUFValueType as GV  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning:gguf"),
    pytest.mark.filterwarnings("ignore:The given NumPy array is not writable"),
]


# ------------------------------------------------------------------ helpers


def run_cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "hurray", "convert", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )


def st_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def st_tensors(path):
    """{name: (dtype string, shape, raw bytes)} and the __metadata__, read
    with safetensors itself."""
    out = {}
    with safetensors.safe_open(path, framework="pt") as f:
        meta = f.metadata()
        for k in f.keys():
            t = f.get_tensor(k)
            flat = t.contiguous().reshape(-1)
            raw = flat.view(torch.uint8).numpy().tobytes() if t.numel() else b""
            out[k] = (str(t.dtype), tuple(t.shape), raw)
    return out, meta


def gguf_contents(path):
    """{key: (GGUF types, raw bytes of every part)} and {tensor: (type, dims,
    data bytes)}, as gguf.GGUFReader sees them."""
    r = gguf.GGUFReader(path)
    kv = {}
    for k, f in r.fields.items():
        if k.startswith("GGUF."):
            continue
        kv[k] = ([GV(int(t)).name for t in f.types], [bytes(p.tobytes()) for p in f.parts])
    tensors = {
        t.name: (t.tensor_type.name, tuple(int(d) for d in t.shape), np.asarray(t.data).tobytes())
        for t in r.tensors
    }
    return kv, tensors


def rnd(shape, seed, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------ fixtures

ST_METADATA = {"format": "pt", "producer": "test_convert", "json": '{"a": [1, 2]}'}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Small checkpoints written by the peers' own writers."""
    d = tmp_path_factory.mktemp("convert")
    g = torch.Generator().manual_seed(0)
    sd = {
        "model.embed_tokens.weight": torch.randn(96, 64, generator=g).to(torch.bfloat16),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(64, 64, generator=g).half(),
        "model.layers.0.mlp.up_proj.weight": torch.randn(128, 64, generator=g).to(torch.bfloat16),
        "model.layers.0.mlp.up_proj.bias": torch.randn(128, generator=g),
        "model.layers.0.mlp.odd_proj.weight": torch.randn(8, 45, generator=g),
        "model.layers.0.input_layernorm.weight": torch.randn(64, generator=g).half(),
        "model.norm.weight": torch.randn(64, generator=g),
        "lm_head.weight": torch.randn(96, 64, generator=g),
        "position_ids": torch.arange(17, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "counts": torch.arange(-5, 5, dtype=torch.int8),
        "bytes": torch.arange(7, dtype=torch.uint8),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
    }
    paths = {"sd": sd}
    paths["st"] = d / "model.safetensors"
    st.save_file(sd, paths["st"], metadata=ST_METADATA)

    # a sharded checkpoint: two shards and an index
    shard_dir = d / "sharded"
    shard_dir.mkdir()
    names = sorted(sd)
    weight_map = {}
    for i, part in enumerate((names[::2], names[1::2])):
        fname = f"model-{i + 1:05d}-of-00002.safetensors"
        st.save_file({k: sd[k] for k in part}, shard_dir / fname, metadata={"format": "pt"})
        weight_map.update({k: fname for k in part})
    with open(shard_dir / "model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {"total_size": 12345}, "weight_map": weight_map}, f)
    paths["shards"] = shard_dir

    # GGUF: F32, F16, BF16, Q8_0, Q4_0 tensors and typed KV pairs
    x8 = rnd((6, 64), 1)
    x4 = rnd((2, 3, 96), 2)
    paths["gguf_x"] = {"blk.0.ffn_up.weight": x8, "blk.0.ffn_down.weight": x4}
    w = gguf.GGUFWriter(d / "model.gguf", "llama")
    w.add_string("general.name", "tiny")
    w.add_uint32("llama.context_length", 2048)
    w.add_float32("llama.rope.freq_base", 10000.5)
    w.add_bool("llama.use_parallel_residual", True)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "héllo", "<0x0A>"])
    w.add_array("tokenizer.ggml.token_type", [1, 3, 1, 6])
    w.add_array("tokenizer.ggml.scores", [0.0, -1.5, 2.25, 1e-8])
    w.add_key_value("test.int64", -(2**40), GV.INT64)
    w.add_key_value("test.uint64", 2**64 - 3, GV.UINT64)
    w.add_key_value("test.float64", 1 / 3, GV.FLOAT64)
    w.add_key_value("test.int8", -7, GV.INT8)
    w.add_key_value("test.uint16", 65535, GV.UINT16)
    w.add_key_value("test.bools", [True, False], GV.ARRAY, sub_type=GV.BOOL)
    w.add_key_value("test.not_utf8", b"\xff\xfeab", GV.STRING)
    w.add_key_value("test.tokens_not_utf8", ["ok", b"\xc3"], GV.ARRAY, sub_type=GV.STRING)
    w.add_tensor("blk.0.ffn_up.weight", gq.quantize(x8, GQ.Q8_0), raw_dtype=GQ.Q8_0)
    w.add_tensor("blk.0.ffn_down.weight", gq.quantize(x4, GQ.Q4_0), raw_dtype=GQ.Q4_0)
    w.add_tensor("token_embd.weight", rnd((10, 64), 3, np.float16))
    bf = rnd((4, 32), 4).astype(ml_dtypes.bfloat16)
    w.add_tensor("blk.0.attn_q.weight", bf.view(np.uint8), raw_dtype=GQ.BF16)
    w.add_tensor("output_norm.weight", rnd((64,), 5))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    paths["gguf"] = d / "model.gguf"

    # GGUF files with types hurray must refuse: Q8_1 (gguf-py and ggml
    # disagree on its block size, and nothing defines its dequantization)
    # and Q1_0 (no published dequantization in gguf-py)
    for kind in ("Q8_1", "Q1_0"):
        w = gguf.GGUFWriter(d / f"{kind}.gguf", "llama")
        w.add_tensor("output_norm.weight", rnd((64,), 6))
        if kind == "Q8_1":  # gguf-py's 40-byte block (ggml's is 36); the bytes do not matter
            w.add_tensor("blk.0.ffn_up.weight", np.zeros((2, 40), np.uint8), raw_dtype=GQ.Q8_1)
        else:  # 128 elements per 18-byte block
            w.add_tensor("blk.0.ffn_up.weight", np.zeros((2, 18), np.uint8), raw_dtype=GQ.Q1_0)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        paths[kind] = d / f"{kind}.gguf"

    # numpy
    arrays = {
        "w": rnd((5, 7), 8),
        "h": rnd((3,), 9, np.float16),
        "d": rnd((2, 2), 10, np.float64),
        "i": np.arange(12, dtype=np.int32).reshape(3, 4),
        "u": np.arange(5, dtype=np.uint16),
        "b": np.array([True, False]),
        "c": (rnd((3,), 11) + 1j).astype(np.complex64),
        "z": np.zeros((0, 3), np.float32),
        "s": np.array(2.5, np.float32),
    }
    paths["arrays"] = arrays
    paths["npz"] = d / "arrays.npz"
    np.savez(paths["npz"], **arrays)
    paths["npy"] = d / "single.npy"
    np.save(paths["npy"], np.asfortranarray(rnd((4, 6), 12)))

    # torch state dicts: nested, with tied weights and a non-contiguous view
    emb = torch.randn(16, 8, generator=g)
    tsd = {
        "encoder": {
            "embed.weight": emb,
            "layer.weight": torch.randn(8, 8, generator=g).to(torch.bfloat16),
        },
        "head.weight": emb,  # tied
        "head.bias": torch.randn(16, generator=g).t(),
        "steps": torch.tensor(1000, dtype=torch.int64),
        "flags": torch.tensor([True, False]),
        "half": torch.randn(3, 5, generator=g).half()[:, ::2],
    }
    paths["tsd"] = tsd
    paths["pt"] = d / "model.pt"
    torch.save(tsd, paths["pt"])
    paths["pt_extra"] = d / "with_epoch.pt"
    torch.save({"w": torch.ones(2, 2), "epoch": 3}, paths["pt_extra"])
    paths["pt_evil"] = d / "evil.bin"
    torch.save({"w": torch.ones(2), "obj": Evil()}, paths["pt_evil"])
    return paths


class Evil:
    """Anything but a tensor: torch.load(weights_only=True) must refuse it."""

    def __reduce__(self):
        return (print, ("this must never run",))


@pytest.fixture
def out(tmp_path):
    return tmp_path


# ------------------------------------------------------------------ safetensors


def test_safetensors_round_trip_is_byte_identical(files, out):
    h = out / "m.hurray"
    convert(files["st"], h, quiet=True)
    with hurray.open(h) as f:
        meta = f.metadata
        assert sorted(f.keys()) == sorted(files["sd"])
        assert f.descriptor("model.embed_tokens.weight").dtype == "bfloat16"
    assert {k: meta[f"safetensors.{k}"] for k in ST_METADATA} == ST_METADATA
    back = out / "back.safetensors"
    convert(h, back, quiet=True)
    want, want_meta = st_tensors(files["st"])
    got, got_meta = st_tensors(back)
    assert got_meta == want_meta == ST_METADATA
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name
    # the headers place every tensor identically, so the data sections are equal
    hw, hg = st_header(files["st"]), st_header(back)
    hw.pop("__metadata__"), hg.pop("__metadata__")
    assert hg == hw
    size = os.path.getsize(files["st"])
    assert os.path.getsize(back) == size


@pytest.mark.parametrize("form", ["index", "folder"])
def test_sharded_safetensors(files, out, form):
    src = files["shards"] / "model.safetensors.index.json" if form == "index" else files["shards"]
    h = out / "m.hurray"
    report = convert(src, h, quiet=True)
    assert report.source_format == "safetensors (sharded)"
    assert len(report.rows) == len(files["sd"])
    with hurray.open(h) as f:
        assert json.loads(f.metadata["safetensors_index.metadata"]) == {"total_size": 12345}
        assert f.metadata["safetensors.format"] == "pt"
    back = out / "one.safetensors"
    convert(h, back, quiet=True)
    want, _ = st_tensors(files["st"])
    got, meta = st_tensors(back)
    assert got == want
    assert meta == {"format": "pt"}


def test_safetensors_to_safetensors_with_filters(files, out):
    dst = out / "some.safetensors"
    report = convert(
        files["st"], dst, include=["model.*"], exclude=["*.bias", "*norm*"], quiet=True
    )
    got, _ = st_tensors(dst)
    assert (
        sorted(got)
        == sorted(r.name for r in report.rows)
        == [
            "model.embed_tokens.weight",
            "model.layers.0.mlp.odd_proj.weight",
            "model.layers.0.mlp.up_proj.weight",
            "model.layers.0.self_attn.q_proj.weight",
        ]
    )
    with pytest.raises(ConversionError, match="no tensor"):
        convert(files["st"], out / "none.hurray", include=["nothing*"], quiet=True)


# ------------------------------------------------------------------ GGUF


def test_gguf_round_trip_same_blocks_and_kv(files, out):
    h = out / "g.hurray"
    convert(files["gguf"], h, quiet=True)
    back = out / "back.gguf"
    convert(h, back, quiet=True)
    kv_want, t_want = gguf_contents(files["gguf"])
    kv_got, t_got = gguf_contents(back)
    assert t_got.keys() == t_want.keys()
    for name in t_want:
        assert t_got[name] == t_want[name], name  # type, dims and every block byte
    assert {t[0] for t in t_want.values()} == {"Q8_0", "Q4_0", "F16", "BF16", "F32"}
    assert kv_got == kv_want  # every key, its GGUF type(s) and value
    # with the same KV order and tensor order, the same file
    with open(files["gguf"], "rb") as a, open(back, "rb") as b:
        assert a.read() == b.read()


def test_gguf_import_is_block_affine_with_separate_scales(files, out):
    h = out / "g.hurray"
    convert(files["gguf"], h, quiet=True)
    with hurray.open(h) as f:
        meta = f.metadata
        for name, scheme, dtype in (
            ("blk.0.ffn_up.weight", "q8_0", "int8"),
            ("blk.0.ffn_down.weight", "q4_0", "uint4"),
        ):
            x = files["gguf_x"][name]
            t = f[name]
            assert t.shape == x.shape  # GGUF's innermost-first dims, reversed
            q = t.descriptor.quantization
            assert isinstance(q, hurray.BlockAffine)
            assert (t.dtype, q.axis, q.block_size, q.scale_dtype) == (
                dtype,
                x.ndim - 1,
                32,
                "float16",
            )
            assert [b.role for b in t.descriptor.buffers] == ["data", "scales"]
            # the same tensor hurray's own quantizer makes, bit for bit
            mine = hurray.quantize(x, scheme)
            assert t.descriptor == mine.descriptor
            assert [bytes(b) for b in t.buffers] == [bytes(b) for b in mine.buffers]
            want = gq.dequantize(
                gq.quantize(x, getattr(GQ, scheme.upper())), getattr(GQ, scheme.upper())
            ).reshape(x.shape)
            np.testing.assert_array_equal(t.dequantize(), want)
        assert f["blk.0.attn_q.weight"].dtype == "bfloat16"
        assert f["token_embd.weight"].dtype == "float16"
    assert meta["gguf.general.name"] == "tiny"
    assert meta["gguf.llama.context_length"] == 2048
    assert meta["gguf.llama.rope.freq_base"] == 10000.5
    assert meta["gguf.llama.use_parallel_residual"] is True
    assert meta["gguf.test.int64"] == -(2**40)
    assert json.loads(meta["gguf.tokenizer.ggml.tokens"]) == ["<s>", "</s>", "héllo", "<0x0A>"]
    assert json.loads(meta["gguf.tokenizer.ggml.token_type"]) == [1, 3, 1, 6]
    types = json.loads(meta["gguf.__types__"])
    assert types["llama.context_length"] == "UINT32"
    assert types["tokenizer.ggml.tokens"] == "ARRAY:STRING"
    assert types["tokenizer.ggml.token_type"] == "ARRAY:INT32"
    assert types["test.uint64"] == "UINT64"
    assert meta["gguf.test.not_utf8"] == b"\xff\xfeab"  # not UTF-8: kept as bytes


@pytest.mark.parametrize(
    "digits, expected",
    [
        ("18446744073709551615", 2**64 - 1),
        ("18446744073709551616", None),  # 2**64 was written as 2**64 - 1
        ("99999999999999999999", None),
        ("+5", None),
        (" 12", None),
        ("", None),
    ],
)
def test_gguf_uint64_metadata_kept_as_digits_is_exact_or_refused(out, digits, expected):
    """hurray keeps a GGUF UINT64 past 2**63 - 1 as decimal digits; writing
    it back must give that value, or refuse what is not one."""
    src, dst = out / "u64.hurray", out / "u64.gguf"
    hurray.save(
        src,
        {"w": np.zeros(32, np.float32)},
        metadata={
            "gguf.k": digits,
            "gguf.a": json.dumps([digits]),
            "gguf.__types__": '{"k": "UINT64", "a": "ARRAY:UINT64"}',
        },
    )
    if expected is None:
        with pytest.raises(ConversionError, match="integer"):
            convert(src, dst, quiet=True)
        assert not dst.exists()
        return
    convert(src, dst, quiet=True)
    r = gguf.GGUFReader(dst)
    assert int(r.fields["k"].parts[-1][0]) == expected
    assert [int(r.fields["a"].parts[i][0]) for i in r.fields["a"].data] == [expected]


@pytest.mark.parametrize("kind", ["Q8_1", "Q1_0"])
def test_gguf_unsupported_types_are_refused_by_name(files, out, kind):
    with pytest.raises(ConversionError) as info:
        convert(files[kind], out / "x.hurray", quiet=True)
    msg = str(info.value)
    assert kind in msg and "blk.0.ffn_up.weight" in msg and "Q8_0" in msg
    assert not (out / "x.hurray").exists()
    if kind == "Q1_0":
        r = run_cli(files[kind], out / "x.hurray")
        assert r.returncode == 1
        assert kind in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""
    # the other tensors convert once it is left out
    convert(files[kind], out / "y.hurray", exclude=["blk.*"], quiet=True)
    assert hurray.load(out / "y.hurray").keys() == {"output_norm.weight"}


def test_a_vocabulary_only_gguf_converts_to_its_metadata(out):
    """llama.cpp ships GGUF files of a tokenizer and no tensors. The C
    converter took them; the Python one refused ("holds no tensors"), so
    any option that hands over to Python (--include, a .npz target) did."""
    src = out / "vocab.gguf"
    w = gguf.GGUFWriter(src, "llama")
    w.add_string("tokenizer.ggml.model", "gpt2")
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    for suffix in (".hurray", ".safetensors", ".npz", ".pt", ".gguf"):
        convert(src, out / f"v{suffix}", quiet=True)
    with hurray.open(out / "v.hurray") as f:
        assert len(f) == 0 and f.metadata["gguf.tokenizer.ggml.model"] == "gpt2"
    back = gguf.GGUFReader(out / "v.gguf")
    assert len(back.tensors) == 0
    assert [
        bytes(back.fields["tokenizer.ggml.tokens"].parts[i])
        for i in back.fields["tokenizer.ggml.tokens"].data
    ] == [b"a", b"b", b"c"]
    with pytest.raises(ConversionError, match="a .npy file holds exactly one"):
        convert(src, out / "v.npy", quiet=True)
    with pytest.raises(ConversionError, match="no tensor of .* is selected"):
        convert(src, out / "w.hurray", include=["blk.*"], quiet=True)


@pytest.mark.parametrize("scheme", ["q8_0", "q4_0"])
def test_hurray_quantized_tensors_export_as_real_gguf_types(files, out, scheme):
    x = rnd((4, 128), 20)
    h = out / "q.hurray"
    hurray.save(h, {"w": hurray.quantize(x, scheme), "b": rnd((4,), 21)})
    g = out / "q.gguf"
    report = convert(h, g, quiet=True)
    assert {r.name: r.output for r in report.rows} == {"w": scheme.upper(), "b": "F32"}
    _, tensors = gguf_contents(g)
    kind, dims, data = tensors["w"]
    assert (kind, dims) == (scheme.upper(), (128, 4))
    assert data == gq.quantize(x, getattr(GQ, scheme.upper())).tobytes()


def test_a_rank_0_tensor_goes_to_gguf_and_back(out):
    """GGUF's n_dims 0 was read as a rank-0 tensor but not written: such a
    file did not survive GGUF -> hurray -> GGUF."""
    src = out / "s.hurray"
    hurray.save(src, {"s": np.array(3.5, np.float32), "v": np.arange(3, dtype=np.int32)})
    convert(src, out / "s.gguf", quiet=True)
    r = gguf.GGUFReader(out / "s.gguf")
    got = {t.name: (list(t.shape), t.data.tolist()) for t in r.tensors}
    assert got == {"s": ([], 3.5), "v": ([3], [0, 1, 2])}
    convert(out / "s.gguf", out / "back.hurray", quiet=True)
    back = hurray.load(out / "back.hurray")
    assert back["s"].shape == () and float(back["s"].numpy()) == 3.5
    run = run_cli(out / "back.hurray", out / "again.gguf")
    assert run.returncode == 0, run.stderr
    assert (out / "again.gguf").read_bytes() == (out / "s.gguf").read_bytes()


def test_quantize_on_the_way_to_gguf(files, out):
    g = out / "q.gguf"
    no_gguf_form = ["bytes", "mask", "scalar", "empty"]  # uint8, bool, rank 0, 0 elements
    report = convert(files["st"], g, quantize="q8_0", exclude=no_gguf_form, quiet=True)
    rows = {r.name: r for r in report.rows}
    assert rows["model.layers.0.mlp.up_proj.weight"].output == "Q8_0"
    assert rows["model.layers.0.self_attn.q_proj.weight"].output == "Q8_0"
    # 45 columns: no GGUF block layout, so the default rule leaves it alone
    odd = rows["model.layers.0.mlp.odd_proj.weight"]
    assert odd.output == "F32" and not odd.quantized and "multiple of 32" in odd.note
    _, tensors = gguf_contents(g)
    x = files["sd"]["model.layers.0.self_attn.q_proj.weight"].numpy()
    assert (
        tensors["model.layers.0.self_attn.q_proj.weight"][2]
        == gq.quantize(x.astype(np.float32), GQ.Q8_0).tobytes()
    )
    with pytest.raises(ConversionError, match="multiple of 32"):
        convert(
            files["st"],
            out / "r.gguf",
            quantize="q8_0",
            exclude=no_gguf_form,
            quantize_include=["*odd_proj.weight"],
            quiet=True,
        )


def test_gguf_export_refusals(files, out):
    h = out / "n.hurray"
    hurray.save(h, {"w": hurray.quantize(rnd((4, 64), 22), "nf4")})
    with pytest.raises(ConversionError, match=r"nf4.*\.safetensors"):
        convert(h, out / "n.gguf", quiet=True)
    assert not os.listdir(out) == ["n.gguf"] and not (out / "n.gguf").exists()
    with pytest.raises(UsageError, match="nf4"):
        convert(files["st"], out / "n.gguf", quantize="nf4", quiet=True)
    hurray.save(h, {"u": np.arange(4, dtype=np.uint8)})
    with pytest.raises(ConversionError, match="uint8"):
        convert(h, out / "u.gguf", quiet=True)


# ------------------------------------------------------------------ numpy and torch


def test_npz_round_trip_is_exact(files, out):
    h = out / "a.hurray"
    convert(files["npz"], h, quiet=True)
    back = out / "back.npz"
    convert(h, back, quiet=True)
    with np.load(back, allow_pickle=False) as z:
        assert sorted(z.files) == sorted(files["arrays"])
        for k, a in files["arrays"].items():
            b = z[k]
            assert b.dtype == a.dtype and b.shape == a.shape
            assert b.tobytes() == a.tobytes(), k


def test_npy_round_trip_is_exact(files, out):
    h = out / "s.hurray"
    convert(files["npy"], h, quiet=True)
    assert hurray.load(h).keys() == {"single"}
    back = out / "back.npy"
    convert(h, back, quiet=True)
    a, b = np.load(files["npy"]), np.load(back)
    assert b.dtype == a.dtype and np.array_equal(a, b)
    with pytest.raises(ConversionError, match="one array"):
        convert(files["npz"], out / "many.npy", quiet=True)


def test_torch_round_trip_is_exact(files, out):
    h = out / "t.hurray"
    convert(files["pt"], h, quiet=True)
    back = out / "back.pt"
    convert(h, back, quiet=True)
    got = torch.load(back, weights_only=True)
    tsd = files["tsd"]
    want = {
        "encoder.embed.weight": tsd["encoder"]["embed.weight"],
        "encoder.layer.weight": tsd["encoder"]["layer.weight"],
        **{k: v for k, v in tsd.items() if k != "encoder"},
    }  # nested dicts flatten with "."
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k].dtype == v.dtype and got[k].shape == v.shape, k
        assert torch.equal(got[k], v), k
    # straight on to safetensors (which refuses shared memory): tied weights become two
    convert(files["pt"], out / "t.safetensors", quiet=True)
    got, _ = st_tensors(out / "t.safetensors")
    assert got["head.weight"] == got["encoder.embed.weight"]


def test_torch_files_load_with_weights_only(files, out, capsys):
    with pytest.raises(ConversionError, match="weights_only") as info:
        convert(files["pt_evil"], out / "e.hurray", quiet=True)
    assert "Unsupported global" in str(info.value) and "\n" not in str(info.value)
    assert "this must never run" not in "".join(capsys.readouterr())  # nothing was called
    assert not (out / "e.hurray").exists()
    # a plain non-tensor entry is refused by name, and can be left out
    with pytest.raises(ConversionError, match="'epoch' is a int"):
        convert(files["pt_extra"], out / "x.hurray", quiet=True)
    convert(files["pt_extra"], out / "x.hurray", exclude=["epoch"], quiet=True)
    assert hurray.load(out / "x.hurray").keys() == {"w"}


def test_bfloat16_to_npz_is_widened_exactly(files, out):
    dst = out / "w.npz"
    report = convert(files["st"], dst, include=["model.embed_tokens.weight"], quiet=True)
    (row,) = report.rows
    assert row.output == "float32" and "no bfloat16" in row.note and row.exact
    with np.load(dst) as z:
        want = files["sd"]["model.embed_tokens.weight"].float().numpy()
        np.testing.assert_array_equal(z["model.embed_tokens.weight"], want)


# ------------------------------------------------------------------ quantization rules


@pytest.mark.parametrize(
    "name,dtype,shape,want",
    [
        ("model.layers.0.mlp.up_proj.weight", "bfloat16", (128, 64), True),
        ("blk.0.ffn_up.weight", "float32", (64, 64), True),
        ("transformer.h.0.attn.c_attn.weight", "float16", (64, 192), True),
        ("model.layers.0.mlp.up_proj.bias", "float32", (128,), False),
        ("model.embed_tokens.weight", "float32", (96, 64), False),
        ("token_embd.weight", "float32", (96, 64), False),
        ("transformer.wte.weight", "float32", (96, 64), False),
        ("transformer.wpe.weight", "float32", (96, 64), False),
        ("model.layers.0.input_layernorm.weight", "float32", (64, 64), False),
        ("transformer.h.0.ln_1.weight", "float32", (64, 64), False),
        ("blk.0.attn_norm.weight", "float32", (64, 64), False),
        ("lm_head.weight", "float32", (96, 64), False),
        ("output.weight", "float32", (96, 64), False),
        ("model.layers.0.block_sparse_moe.gate.weight", "float32", (8, 64), False),
        ("blk.0.ffn_gate_inp.weight", "float32", (8, 64), False),
        ("model.layers.0.mlp.gate_proj.weight", "float32", (128, 64), True),
        ("conv.weight", "float32", (8, 3, 3, 3), False),
        ("ids.weight", "int64", (8, 8), False),
        ("model.layers.0.mlp.up_proj.weight_scale", "float32", (8, 8), False),
    ],
)
def test_default_quantize_rule(name, dtype, shape, want):
    assert default_quantize_rule(name, dtype, shape) is want


QUANTIZED_BY_DEFAULT = {
    "model.layers.0.self_attn.q_proj.weight",
    "model.layers.0.mlp.up_proj.weight",
    "model.layers.0.mlp.odd_proj.weight",
}


def test_quantize_on_the_way_default_and_overrides(files, out):
    report = convert(files["st"], out / "q.hurray", quantize="q4_0", quiet=True)
    assert {r.name for r in report.rows if r.quantized} == QUANTIZED_BY_DEFAULT
    with hurray.open(out / "q.hurray") as f:
        for r in report.rows:
            q = f.descriptor(r.name).quantization
            assert (q is not None) == r.quantized, r.name
        assert json.loads(f.metadata["convert.source_dtypes"]) == {
            "model.layers.0.self_attn.q_proj.weight": "float16",
            "model.layers.0.mlp.up_proj.weight": "bfloat16",
            "model.layers.0.mlp.odd_proj.weight": "float32",
        }
    odd = next(r for r in report.rows if r.name.endswith("odd_proj.weight"))
    assert "partial block" in odd.note
    report = convert(
        files["st"],
        out / "q2.hurray",
        quantize="q8_0",
        quantize_include=["lm_head.*", "model.norm.weight", "position_ids"],
        quantize_exclude=["*.q_proj.*", "model.norm.*"],
        quiet=True,
    )
    rows = {r.name: r for r in report.rows}
    assert {n for n, r in rows.items() if r.quantized} == (
        QUANTIZED_BY_DEFAULT - {"model.layers.0.self_attn.q_proj.weight"} | {"lm_head.weight"}
    )
    assert "not floating point" in rows["position_ids"].note  # forced, but int64 stays


@pytest.mark.parametrize("scheme", hurray.QUANT_SCHEMES)
def test_every_scheme_on_the_way(files, out, scheme):
    h = out / "q.hurray"
    report = convert(files["st"], h, quantize=scheme, quiet=True, threads=2)
    rows = {r.name: r for r in report.rows}
    assert {n for n, r in rows.items() if r.quantized} == QUANTIZED_BY_DEFAULT
    loaded = hurray.load(h)
    for name in QUANTIZED_BY_DEFAULT:
        r = rows[name]
        t = loaded[name]
        assert t.descriptor.quantization is not None and r.output == describe(t.descriptor)
        assert r.bytes_out == sum(b.byte_size for b in t.descriptor.buffers) < r.bytes_in * 1.2
        assert 0.9 < r.cosine <= 1.0 and r.max_abs_error > 0 and not r.exact
        # the report's numbers are those of the stored tensor against the source
        x = files["sd"][name].float().numpy().astype(np.float64)
        err = t.dequantize().astype(np.float64) - x
        assert r.rmse == pytest.approx(np.sqrt(np.mean(err**2)), rel=1e-9)
        assert r.max_abs_error == np.abs(err).max()


@pytest.mark.parametrize("scheme", ["q8_0", "nf4", "mxfp4", "per_channel"])
def test_quantized_export_to_safetensors_dequantizes_to_source_dtype(files, out, scheme):
    h = out / "q.hurray"
    convert(files["st"], h, quantize=scheme, quiet=True)
    dst = out / "deq.safetensors"
    report = convert(h, dst, quiet=True)
    got, meta = st_tensors(dst)
    assert meta == ST_METADATA
    assert got["model.layers.0.mlp.up_proj.weight"][0] == "torch.bfloat16"
    assert got["model.layers.0.self_attn.q_proj.weight"][0] == "torch.float16"
    q = hurray.load(h)["model.layers.0.mlp.up_proj.weight"]
    want = q.dequantize(ml_dtypes.bfloat16)
    raw = got["model.layers.0.mlp.up_proj.weight"][2]
    assert raw == want.tobytes()
    row = next(r for r in report.rows if r.name == "model.layers.0.mlp.up_proj.weight")
    assert row.note == "dequantized" and not row.exact


@pytest.mark.parametrize(
    "case",
    [
        "q4_0",
        "q8_0",
        "nf4",
        "mxfp4",
        "mxfp6_e2m3",
        "mxfp8_e4m3",
        "mxint8",
        "asym_per_channel",
        "asym_block_uint4",
        "block_int4",
        "affine",
    ],
)
def test_keep_scales_round_trip(out, case):
    x = rnd((6, 64), 30)
    if case == "asym_per_channel":
        t = hurray.quantize(x, "per_channel", dtype="uint8", symmetric=False)
    elif case == "asym_block_uint4":
        t = hurray.quantize(
            x, "block_affine", dtype="uint4", symmetric=False, block_size=16, scale_dtype="bfloat16"
        )
    elif case == "block_int4":
        t = hurray.quantize(x, "block_affine", dtype="int4", scale_dtype="float16")
    else:
        t = hurray.quantize(x, case)
    h = out / "q.hurray"
    hurray.save(h, {"w": t, "bias": rnd((6,), 31)})
    dst = out / "k.safetensors"
    convert(h, dst, keep_scales=True, quiet=True)
    got, meta = st_tensors(dst)
    spec = json.loads(meta["hurray.w.quantization"])
    want_kind = json.loads(t.descriptor.to_json())["quantization"]["kind"]
    assert spec["quantization"]["kind"] == want_kind
    codes = got["w"]
    assert codes[1] == (6, 64)
    if t.dtype in ("uint4", "int4", "float4_e2m1fn", "float6_e2m3fn"):
        assert codes[0] == "torch.uint8"  # one code per byte
        assert bytes(np.ascontiguousarray(t.codes()).view(np.uint8)) == codes[2]
    has_scales = case != "affine"
    assert ("w.scales" in got) == has_scales
    assert ("w.zero_points" in got) == case.startswith("asym")
    if has_scales:
        assert got["w.scales"][1] == t.scales().shape
    # and back: the same descriptor and buffers
    back = out / "back.hurray"
    convert(dst, back, quiet=True)
    with hurray.open(back) as f:
        assert sorted(f.keys()) == ["bias", "w"]
        w = f["w"]
        assert w.descriptor == t.descriptor
        assert [bytes(b) for b in w.buffers] == [bytes(b) for b in t.buffers]


def test_keep_scales_back_through_the_c_command(out):
    # The C command converts safetensors to hurray itself, and took the
    # parts for plain tensors: "hurray convert k.safetensors back.hurray"
    # gave a uint8 w and a w.scales. The native converter now refuses such
    # a file, and the command hands it to Python, which rebuilds w.
    from zoo_reference import cli

    exe = cli()
    if exe is None:
        pytest.skip("the C hurray command is not built")
    t = hurray.quantize(rnd((6, 64), 32), "q4_0")
    hurray.save(out / "q.hurray", {"w": t})
    convert(out / "q.hurray", out / "k.safetensors", keep_scales=True, quiet=True)

    def run(dst, **env):
        return subprocess.run(
            [exe, "convert", "-q", str(out / "k.safetensors"), str(out / dst)],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, HURRAY_PYTHON=sys.executable, **env),
        )

    done = run("back.hurray")
    assert done.returncode == 0, done.stderr
    with hurray.open(out / "back.hurray") as f:
        assert sorted(f.keys()) == ["w"] and f["w"].descriptor == t.descriptor
    native = run("native.hurray", HURRAY_CONVERT_NATIVE_ONLY="1")
    assert native.returncode == 1 and "w is stored in parts" in native.stderr, native.stderr
    assert not (out / "native.hurray").exists()


# ------------------------------------------------------------------ the report


def test_report_numbers(files, out):
    # lossless: copied tensors are exact
    report = convert(files["st"], out / "m.hurray", quiet=True)
    for r in report.rows:
        assert r.exact and not r.quantized
        assert (r.max_abs_error, r.rmse, r.cosine) == (0.0, 0.0, 1.0)
        assert r.bytes_in == r.bytes_out and r.ratio == 1.0
    t = report.totals
    assert t.tensors == len(files["sd"]) and t.quantized == 0 and t.ratio == 1.0
    # lossless but measured: GGUF blocks dequantized to float32
    report = convert(files["gguf"], out / "g.safetensors", quiet=True)
    rows = {r.name: r for r in report.rows}
    for name in ("blk.0.ffn_up.weight", "blk.0.ffn_down.weight"):
        r = rows[name]
        assert not r.exact and r.output == "F32"
        assert (r.max_abs_error, r.rmse, r.cosine) == (0.0, 0.0, 1.0)
        assert r.bytes_out == 4 * np.prod(r.shape)
    # lossy: nf4 of a normal matrix; numbers checked against numpy
    x = rnd((64, 256), 40)
    np.save(out / "x.npy", x)
    report = convert(
        out / "x.npy", out / "x.hurray", quantize="nf4", quantize_include=["x"], quiet=True
    )
    (row,) = report.rows
    assert row.quantized and row.output == "nf4" and row.source_dtype == "float32"
    deq = hurray.load(out / "x.hurray")["x"].dequantize().astype(np.float64)
    err = deq - x.astype(np.float64)
    assert row.max_abs_error == pytest.approx(np.abs(err).max(), rel=1e-12)
    assert row.rmse == pytest.approx(np.sqrt(np.mean(err**2)), rel=1e-9)
    cos = (deq * x).sum() / np.sqrt((deq * deq).sum() * (x.astype(np.float64) ** 2).sum())
    assert row.cosine == pytest.approx(cos, rel=1e-12)
    assert 0.98 < row.cosine < 1.0 and 0 < row.rmse < 0.15
    assert row.bytes_in == x.nbytes
    assert row.bytes_out == x.size // 2 + 4 * (x.size // 64)
    assert row.ratio == pytest.approx(x.nbytes / row.bytes_out)
    assert report.totals.cosine == pytest.approx(row.cosine)
    d = report.to_dict()
    assert d["tensors"][0]["name"] == "x" and d["totals"]["quantized"] == 1
    text = report.format()
    assert "x" in text and "nf4" in text and "total: 1 tensor, 1 quantized" in text


def test_a_nan_error_stays_nan_in_the_row_and_the_total(out):
    """The report kept the larger error with `not (x <= max)`: once the
    maximum was NaN, the next finite value replaced it. A NaN in the first
    2**18 elements of a tensor, or in the first of three tensors, showed as
    a finite max abs beside a NaN rmse."""
    big = np.linspace(-1, 1, 512 * 1024, dtype=np.float32).reshape(512, 1024)
    big[0, 0] = np.nan
    np.savez(out / "n.npz", big=big, a=np.full((32, 64), np.nan, np.float32), b=rnd((32, 64), 3))
    report = convert(
        out / "n.npz", out / "n.hurray", quantize="mxfp4", quantize_include=["*"], quiet=True
    )
    rows = {r.name: r for r in report.rows}
    assert math.isnan(rows["big"].max_abs_error) and math.isnan(rows["a"].max_abs_error)
    assert not math.isnan(rows["b"].max_abs_error)
    assert math.isnan(report.totals.max_abs_error)


def test_printed_report_and_quiet(files, out, capsys):
    convert(files["st"], out / "a.hurray", quantize="q8_0")
    printed = capsys.readouterr()
    lines = printed.out.splitlines()
    assert lines[0].split()[:4] == ["tensor", "from", "to", "shape"]
    assert any(
        line.startswith("model.layers.0.mlp.up_proj.weight") and "q8_0" in line for line in lines
    )
    assert any(line.startswith("total:") for line in lines)
    convert(files["st"], out / "b.hurray", quantize="q8_0", quiet=True)
    assert capsys.readouterr() == ("", "")
    convert(files["st"], out / "c.hurray", output="json")
    d = json.loads(capsys.readouterr().out)
    assert d["totals"]["tensors"] == len(files["sd"])


def test_progress_bar_only_when_asked_for_and_worth_it():
    tqdm = pytest.importorskip("tqdm").tqdm
    assert not isinstance(_driver._progress(1 << 40, 10, quiet=True), tqdm)
    assert not isinstance(_driver._progress(1 << 10, 10, quiet=False), tqdm)
    bar = _driver._progress(1 << 40, 10, quiet=False)
    assert isinstance(bar, tqdm)  # shown only when stderr is a terminal (disable=None)
    bar.close()


def test_stats_are_stored(files, out):
    convert(files["st"], out / "s.hurray", stats=True, quiet=True)
    with hurray.open(out / "s.hurray") as f:
        s = f.descriptor("lm_head.weight").statistics
        x = files["sd"]["lm_head.weight"].numpy()
        assert s is not None and s.min == float(x.min()) and s.max == float(x.max())


# ------------------------------------------------------------------ the CLI


def test_cli_exit_codes_and_output(files, out):
    # .npz sources keep these subprocesses free of the torch import
    r = run_cli(
        files["npz"],
        out / "a.hurray",
        "--quantize",
        "q4_0",
        "--quantize-include",
        "w",
        "--threads",
        "2",
    )
    assert r.returncode == 0, r.stderr
    assert "total: 9 tensors, 1 quantized" in r.stdout and "q4_0" in r.stdout
    assert r.stderr == ""
    r = run_cli(files["npz"], out / "b.hurray", "--quiet")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    r = run_cli(files["npz"], out / "c.hurray", "--json", "--include", "w", "--include", "h")
    assert r.returncode == 0
    assert sorted(t["name"] for t in json.loads(r.stdout)["tensors"]) == ["h", "w"]
    # usage errors: 2
    for args in (
        [files["npz"], out / "d.hurray", "--quantize", "q3_k"],
        [files["npz"], out / "d.npz", "--keep-scales"],
        [files["npz"], out / "d.unknown"],
    ):
        r = run_cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and r.stderr.strip()
    # conversion errors: 1, one line
    for args in (
        [out / "missing.safetensors", out / "e.hurray"],
        [files["npz"], out / "e.gguf"],
    ):  # complex64 has no GGUF type
        r = run_cli(*args)
        assert r.returncode == 1, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
        assert r.stderr.startswith("hurray convert: ") and r.stdout == ""
    assert not (out / "e.hurray").exists() and not (out / "e.gguf").exists()
    assert sorted(os.listdir(out)) == ["a.hurray", "b.hurray", "c.hurray"]  # no temp files


def test_usage_errors_in_the_library(files, out):
    with pytest.raises(UsageError, match="need --quantize"):
        convert(files["npz"], out / "x.hurray", quantize_include=["w"], quiet=True)
    with pytest.raises(UsageError, match="block size"):
        convert(files["npz"], out / "x.hurray", quantize="q8_0", block_size=64, quiet=True)
    with pytest.raises(UsageError, match="source itself"):
        convert(files["npz"], files["npz"], quiet=True)
    with pytest.raises(UsageError, match="cannot tell the format"):
        convert(out / "x.onnx", out / "x.hurray", quiet=True)
    assert os.listdir(out) == []


def test_usage_errors_exit_2_on_every_path(files, out):
    """The same mistake gave 1 or 2: a target that is the source was 1 on
    the C path and 2 on Python's, a source format that cannot be told 1 and
    a target format 2."""
    from zoo_reference import cli

    exe = cli()
    hurray.save(out / "a.hurray", {"w": np.ones(4, np.float32)})
    cases = [
        [out / "a.hurray", out / "a.hurray"],
        [out / "a.hurray", out / "a.hurray", "--json"],
        [out / "x.onnx", out / "x.hurray"],
        [out / "a.hurray", out / "x.onnx"],
    ]
    for args in cases:
        for command in [[sys.executable, "-m", "hurray"]] + ([[exe]] if exe else []):
            r = subprocess.run(
                command + ["convert", *map(str, args)],
                capture_output=True,
                text=True,
                timeout=120,
                env=dict(os.environ, HURRAY_PYTHON=sys.executable),
            )
            assert r.returncode == 2, (command, args, r.stderr)
            assert r.stderr.startswith("hurray convert: error: "), r.stderr


def test_help_convert_is_converts_help():
    """`hurray help convert` printed the top-level usage."""
    from zoo_reference import cli

    exe = cli()
    if exe is None:
        pytest.skip("the C hurray command is not built")
    r = subprocess.run(
        [exe, "help", "convert"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, HURRAY_PYTHON=sys.executable),
    )
    assert r.returncode == 0 and r.stdout.startswith("usage: hurray convert"), r.stderr


def test_cli_help():
    r = subprocess.run(
        [sys.executable, "-m", "hurray", "convert", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0
    for word in (
        "--quantize",
        "--quantize-include",
        "--quantize-exclude",
        "--include",
        "--exclude",
        "--keep-scales",
        "--stats",
        "--quiet",
        "--json",
        "safetensors",
        "GGUF",
        "weights_only",
        "q4_0",
    ):
        assert word in r.stdout, word
    r = subprocess.run([sys.executable, "-m", "hurray"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2


def test_exported_from_the_package():
    assert hurray.convert is convert
    assert _driver.ConversionError is hurray.ConversionError


def test_quantize_that_picks_nothing_says_why(out):
    # A stranger's first try: a matrix named "w" and --quantize nf4. The
    # default rule takes names ending in "weight", so nothing is quantized;
    # the report used to end with a silent "0 quantized".
    np.save(out / "w.npy", rnd((64, 256), 41))
    report = convert(out / "w.npy", out / "w.hurray", quantize="nf4", quiet=True)
    assert not report.rows[0].quantized
    (note,) = [n for n in report.notes if "picked no tensor" in n]
    assert "--quantize nf4" in note and "--quantize-include" in note
    assert "note: --quantize nf4 picked no tensor" in report.format()
    picked = convert(
        out / "w.npy", out / "w2.hurray", quantize="nf4", quantize_include=["w"], quiet=True
    )
    assert picked.rows[0].quantized
    assert not any("picked no tensor" in n for n in picked.notes)
    plain = convert(out / "w.npy", out / "w3.hurray", quiet=True)
    assert not any("picked no tensor" in n for n in plain.notes)


def test_a_dequantized_row_is_measured(tmp_path):
    """--dequantize wrote float16 values of a q8_0 tensor (recorded as
    float16 before quantization) and reported the row exact, error 0, where
    the export without the flag measured 0.00098: dequantized rows are
    measured, as the report's docs say."""
    rng = np.random.default_rng(0)
    hurray.save(
        tmp_path / "src.hurray", {"w.weight": rng.standard_normal((64, 64)).astype(np.float16)}
    )
    convert(tmp_path / "src.hurray", tmp_path / "q.hurray", quantize="q8_0", quiet=True)
    values = hurray.load(tmp_path / "q.hurray")["w.weight"].dequantize(np.float64)
    for target in ("out.hurray", "out.safetensors"):
        row = convert(tmp_path / "q.hurray", tmp_path / target, dequantize=True, quiet=True).rows[0]
        assert not row.exact and row.note == "dequantized"
        if target == "out.hurray":
            written = hurray.load(tmp_path / target)["w.weight"].numpy().astype(np.float64)
            assert row.max_abs_error == np.abs(written - values).max() > 0


def test_quantizing_a_sparse_tensor_notes_that_it_was_densified(tmp_path):
    # Other targets note "coo densified"; --quantize into a hurray file
    # turned a sparse tensor dense with an empty note column.
    s = hurray.SparseTensor.from_arrays(
        "coo", (4, 8), np.ones(3, np.float32), coords=[[0, 1, 2], [1, 2, 3]]
    )
    hurray.save(tmp_path / "s.hurray", {"w.weight": s})
    report = hurray.convert(
        tmp_path / "s.hurray",
        tmp_path / "q.hurray",
        quantize="affine",
        quantize_include=["*"],
        quiet=True,
    )
    assert report.rows[0].note == "coo densified"


def test_dequantize_notes_the_quantized_members_of_a_composite(tmp_path):
    # --dequantize promises every quantized tensor as floats; a composite's
    # quantized members stayed quantized with an empty note.
    q = hurray.quantize(np.linspace(-1, 1, 64, dtype=np.float32), "affine")
    qd = q.descriptor
    member = hurray.Descriptor(
        qd.dtype, qd.shape, layout=hurray.Dense(0), quantization=qd.quantization
    )
    c = hurray.Descriptor(
        qd.dtype,
        (1,),
        layout=hurray.Composite((hurray.Member("q", member),)),
        buffers=list(qd.buffers),
    )
    hurray.save(tmp_path / "c.hurray", {"c": hurray.Tensor(c, list(q.buffers))})
    report = hurray.convert(
        tmp_path / "c.hurray", tmp_path / "d.hurray", dequantize=True, quiet=True
    )
    assert "its quantized members are kept" in report.rows[0].note


def test_nothing_quantized_with_an_include_pattern_says_so(tmp_path):
    # The note suggested --quantize-include even when one was given.
    hurray.save(tmp_path / "a.hurray", {"steps": np.arange(4, dtype=np.int64)})
    report = hurray.convert(
        tmp_path / "a.hurray",
        tmp_path / "b.hurray",
        quantize="affine",
        quantize_include=["*"],
        quiet=True,
    )
    (note,) = [n for n in report.notes if "picked no tensor" in n]
    assert "nor the --quantize-include patterns" in note
    assert "adds tensors by name" not in note


def _raw_safetensors(path, header, data=b""):
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + data)


def test_a_sharded_index_naming_a_gguf_shard_is_refused_in_one_line(out):
    """The shard's format was read after the shard was closed: "internal
    error: ValueError: the source is closed" from the CLI, a bare ValueError
    from convert()."""
    ck = out / "ck"
    ck.mkdir()
    st.save_file({"x": torch.arange(3.0)}, ck / "a.safetensors")
    w = gguf.GGUFWriter(ck / "g.gguf", "llama")
    w.add_tensor("y", np.ones(2, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    index = {"weight_map": {"x": "a.safetensors", "y": "g.gguf"}}
    (ck / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ConversionError, match="g.gguf: it is a gguf file"):
        convert(ck, out / "o.hurray", quiet=True)
    r = run_cli(ck, out / "o.hurray")
    assert r.returncode == 1 and "internal error" not in r.stderr
    assert "it is a gguf file" in r.stderr
    assert not (out / "o.hurray").exists()


def test_kept_scales_metadata_with_an_integer_past_its_c_type_is_refused(out):
    """OverflowError (a field past uint64) escaped the converter's check of a
    --keep-scales descriptor, which caught ValueError and TypeError only."""
    desc = {
        "dtype": "int8",
        "shape": [2, 2**64],
        "layout": {"kind": "dense", "data_buffer": 0},
        "buffers": [{"role": "data", "byte_size": 64, "alignment": 64, "sync_mode": "ready"}],
    }
    src = out / "ks.safetensors"
    header = {
        "__metadata__": {"hurray.w.quantization": json.dumps(desc)},
        "w": {"dtype": "I8", "shape": [2, 32], "data_offsets": [0, 64]},
    }
    _raw_safetensors(src, header, bytes(64))
    with pytest.raises(ConversionError, match="not a valid hurray descriptor"):
        convert(src, out / "o.npz", quiet=True)
    assert not (out / "o.npz").exists()


@pytest.mark.parametrize("target", ["o.npz", "o.npy", "o.pt"])
def test_bools_stored_as_neither_0_nor_1_are_refused_by_every_target(out, target):
    """The .hurray and .safetensors targets refused a bool stored as 2; the
    targets numpy and torch write copied it through."""
    src = out / "b.safetensors"
    _raw_safetensors(src, {"a": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, b"\1\2")
    with pytest.raises(ConversionError, match="bool element 1 is 2"):
        convert(src, out / target, quiet=True)
    assert not (out / target).exists()
    ok = out / "ok.safetensors"
    _raw_safetensors(ok, {"a": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, b"\1\0")
    convert(ok, out / target, quiet=True)


def test_a_target_that_would_change_its_source_folder_is_refused(out):
    """`convert ckpt/ ckpt/merged.hurray` wrote a whole tensor beside the
    parts, exit 0: every *.hurray in the folder is a part, so the
    checkpoint it read no longer loaded."""
    ckpt = out / "ckpt"
    hurray.save_sharded(ckpt, {"w": np.arange(64, dtype=np.float32).reshape(16, 4)}, 4)
    before = sorted(os.listdir(ckpt))
    for target in (ckpt / "merged.hurray", f"{ckpt}/./x.hurray", ckpt / "m.safetensors"):
        with pytest.raises(UsageError, match="would change what the folder"):
            convert(ckpt, target, quiet=True)
    r = run_cli(f"{ckpt}/", ckpt / "merged.hurray")
    assert r.returncode == 2 and "would change what the folder" in r.stderr
    assert sorted(os.listdir(ckpt)) == before
    convert(ckpt, ckpt / ".hidden.hurray", quiet=True)  # hidden names are not parts
    convert(ckpt, ckpt / "w.npz", quiet=True)  # not a model file of a folder
    assert hurray.load_sharded(ckpt, "w").shape == (16, 4)
    # A folder of one .safetensors file: a second model file makes it two.
    one = out / "one"
    one.mkdir()
    st.save_file({"x": torch.arange(3.0)}, one / "model.safetensors")
    for name in ("merged.hurray", "other.safetensors"):
        with pytest.raises(UsageError, match="would change what the folder"):
            convert(one, one / name, quiet=True)
    convert(one / "model.safetensors", one / "merged.hurray", quiet=True)  # a file, named


def _unknown_sync_mode(path, name):
    """Sets the first buffer's sync mode of tensor `name` in the file at
    `path` to 8, which no reader knows, and reseals the index."""
    from _file_edits import descriptor_at, reseal

    blob = bytearray(path.read_bytes())
    start, length = descriptor_at(blob, name)
    encoded = bytes(blob[start : start + length])
    d = hurray.Descriptor.decode(encoded)
    b = d.buffers[0]
    stream = d.replace(buffers=[hurray.Buffer(b.role, b.byte_size, b.alignment, "stream")])
    (at,) = [i for i, (x, y) in enumerate(zip(encoded, stream.encode())) if x != y]
    blob[start + at] = 8
    reseal(blob)
    path.write_bytes(bytes(blob))


def test_a_damaged_descriptor_is_named_by_file_and_tensor(out):
    """The converter reported "HURRAY_ERR_UNSUPPORTED: buffers[0].sync_mode:
    unknown mode 8" without the file or the tensor; from a sharded folder,
    as "internal error: UnsupportedError"."""
    src = out / "d.hurray"
    hurray.save(src, {"w": np.arange(2, dtype=np.float32)})
    _unknown_sync_mode(src, "w")
    with pytest.raises(ConversionError, match=r"d\.hurray: tensor 'w': .*unknown mode 8"):
        convert(src, out / "o.npz", quiet=True)
    parts = hurray.save_sharded(out / "sh", {"w": np.arange(8, dtype=np.float32)}, 2)
    _unknown_sync_mode(Path(parts[1]), "w")
    with pytest.raises(ConversionError, match=r"part-00001-of-00002\.hurray: tensor 'w': "):
        convert(out / "sh", out / "o.npz", quiet=True)
    r = run_cli(out / "sh", out / "o.npz")
    assert r.returncode == 1 and "internal error" not in r.stderr


def test_help_with_stdout_closed_is_a_failure():
    """With stdout closed, `convert --help` wrote its text to stderr and
    exited 0 (sys.stdout is None; argparse passed file=None)."""
    for args in (["convert", "--help"], ["--help"], ["ls", "--help"]):
        r = subprocess.run(
            [sys.executable, "-m", "hurray", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=lambda: os.close(1),
            timeout=60,
        )
        assert r.returncode == 1, (args, r.stderr)
        assert r.stderr.strip() == "hurray: writing to stdout failed: Bad file descriptor"
    # With stderr closed, a usage error is still one (exit 2), not a failure
    # to write stdout (exit 1).
    r = subprocess.run(
        [sys.executable, "-m", "hurray", "convert"],
        capture_output=True,
        preexec_fn=lambda: os.close(2),
        timeout=60,
    )
    assert r.returncode == 2 and b"writing to stdout failed" not in r.stdout
