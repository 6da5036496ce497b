"""Every GGUF tensor type gguf-py knows, through hurray and back.

Each file is written by gguf-py's own GGUFWriter, with blocks from
gguf.quants.quantize where gguf-py can quantize the type and otherwise
random valid blocks built from the block layout (docs/spec/quantization.md,
"Block-coded formats"), plus edge blocks: zero, subnormal, largest, Inf and
NaN scales, and extreme codes. Each file must:

- convert to .hurray (the C CLI and hurray.convert) with its tensor names;
- dequantize in C to exactly gguf.quants.dequantize, bit for bit in
  float32 (Q8_K, which gguf-py cannot dequantize, against ggml's
  definition written here in numpy);
- convert back to a GGUF file byte-identical to the original: the same
  tensor types, data and every key-value pair.
"""

import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hurray
from hurray import BlockCoded, ConversionError, Descriptor

gguf = pytest.importorskip("gguf")
import gguf.quants as gq  # noqa: E402
from gguf import GGMLQuantizationType as GQ  # noqa: E402
from gguf.constants import GGML_QUANT_SIZES  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning")]

REPO = Path(__file__).resolve().parents[2]


def _cli():
    for cand in (
        os.environ.get("HURRAY_CLI"),
        str(REPO / "build" / "hurray"),
        shutil.which("hurray"),
    ):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


CLI = _cli()

DENSE = ["F32", "F16", "BF16", "F64", "I8", "I16", "I32", "I64"]
AFFINE = ["Q8_0", "Q4_0"]  # block_affine codes + float16 scales, as before
CODED = [
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "Q2_K",
    "Q3_K",
    "Q4_K",
    "Q5_K",
    "Q6_K",
    "Q8_K",
    "IQ1_S",
    "IQ1_M",
    "IQ2_XXS",
    "IQ2_XS",
    "IQ2_S",
    "IQ3_XXS",
    "IQ3_S",
    "IQ4_NL",
    "IQ4_XS",
    "TQ1_0",
    "TQ2_0",
    "MXFP4",
    "NVFP4",
]
QUANT = AFFINE + CODED

# Byte offsets of each block's float16 scale fields.
F16_AT = {
    "Q8_0": [0],
    "Q4_0": [0],
    "Q4_1": [0, 2],
    "Q5_0": [0],
    "Q5_1": [0, 2],
    "Q2_K": [80, 82],
    "Q3_K": [108],
    "Q4_K": [0, 2],
    "Q5_K": [0, 2],
    "Q6_K": [208],
    "IQ2_XXS": [0],
    "IQ2_XS": [0],
    "IQ2_S": [0],
    "IQ3_XXS": [0],
    "IQ3_S": [0],
    "IQ1_S": [0],
    "IQ4_NL": [0],
    "IQ4_XS": [0],
    "TQ1_0": [52],
    "TQ2_0": [64],
}

F16_EDGES = [
    0x0000,
    0x8000,
    0x0001,
    0x8001,
    0x03FF,
    0x0400,
    0x3C00,
    0x7BFF,
    0xFBFF,
    0x7C00,
    0xFC00,
    0x7E00,
    0x7C01,
    0xFE00,
    0x7FFF,
]
F32_EDGES = [
    0x00000000,
    0x80000000,
    0x00000001,
    0x007FFFFF,
    0x3F800000,
    0x7F7FFFFF,
    0x7F800000,
    0xFF800000,
    0x7FC00000,
    0x7F800001,
]
BYTE_EDGES = [0x00, 0x01, 0x02, 0x7E, 0x7F, 0x80, 0x81, 0xFE, 0xFF]
CODE_FILLS = [0x00, 0xFF, 0x80, 0x7F, 0x55, 0xAA]


def sizes(kind):
    return GGML_QUANT_SIZES[GQ[kind]]


def set_iq1m_d(block, bits):
    """IQ1_M keeps its float16 scale in the top nibbles of 4 uint16s."""
    sc = block[48:56].view(np.uint16).copy()
    for k in range(4):
        sc[k] = (sc[k] & 0x0FFF) | (((bits >> (4 * k)) & 0xF) << 12)
    block[48:56] = sc.view(np.uint8)


def set_scale(kind, block, value_bits):
    """value_bits: float16 bits (float32 for Q8_K, a byte for MXFP4/NVFP4)."""
    if kind == "IQ1_M":
        set_iq1m_d(block, value_bits & 0xFFFF)
    elif kind == "Q8_K":
        block[0:4] = np.array([value_bits], np.uint32).view(np.uint8)
    elif kind == "MXFP4":
        block[0] = value_bits & 0xFF
    elif kind == "NVFP4":
        block[0:4] = value_bits & 0xFF
    else:
        for at in F16_AT[kind]:
            block[at : at + 2] = np.array([value_bits & 0xFFFF], np.uint16).view(np.uint8)


def random_blocks(kind, rows, nblocks, rng):
    """Random code bytes with finite, moderate scales: valid blocks."""
    _, size = sizes(kind)
    data = rng.integers(0, 256, size=(rows, nblocks, size), dtype=np.uint8)
    for r in range(rows):
        for b in range(nblocks):
            if kind == "Q8_K":
                bits = int(np.float32(rng.normal()).view(np.uint32))
            elif kind in ("MXFP4", "NVFP4"):
                continue  # every byte is a valid scale
            else:
                bits = int(np.float16(rng.normal() * 0.1).view(np.uint16))
            set_scale(kind, data[r, b], bits)
    return data.reshape(rows, nblocks * size)


def edge_blocks(kind, rng):
    """One row per edge scale, each block's other bytes a fill pattern."""
    _, size = sizes(kind)
    edges = F32_EDGES if kind == "Q8_K" else BYTE_EDGES if kind in ("MXFP4", "NVFP4") else F16_EDGES
    rows = []
    for e in edges:
        row = []
        for fill in CODE_FILLS:
            block = np.full(size, fill, np.uint8)
            set_scale(kind, block, e)
            row.append(block)
        rows.append(np.concatenate(row))
    return np.stack(rows)


def quantized_blocks(kind, rng):
    """gguf-py's own quantizer output, where it has one."""
    x = rng.normal(size=(3, 2 * sizes(kind)[0])).astype(np.float32)
    try:
        return gq.quantize(x, GQ[kind])
    except NotImplementedError:
        return None


def q8_k_reference(raw):
    """ggml's dequantize_row_q8_K: y = d * q, d a float32, q int8 (gguf-py
    has no Q8_K dequantizer)."""
    blocks = raw.reshape(-1, 292)
    d = blocks[:, :4].copy().view(np.float32)
    q = blocks[:, 4:260].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(raw.shape[:-1] + (raw.shape[-1] // 292 * 256,))


def reference(kind, raw):
    if kind == "Q8_K":
        return q8_k_reference(raw)
    return gq.dequantize(raw, GQ[kind])


def same_bits(a, b):
    a = np.ascontiguousarray(a, np.float32)
    b = np.ascontiguousarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def write_gguf(path, tensors, kv=True):
    """tensors: name -> (kind, array): raw block bytes for quantized kinds."""
    w = gguf.GGUFWriter(str(path), "llama")
    if kv:
        w.add_name("tiny")
        w.add_uint8("test.u8", 200)
        w.add_int8("test.i8", -5)
        w.add_uint16("test.u16", 60000)
        w.add_int16("test.i16", -30000)
        w.add_uint32("test.u32", 4000000000)
        w.add_int32("test.i32", -2000000000)
        w.add_uint64("test.u64", 2**64 - 1)
        w.add_int64("test.i64", -(2**62))
        w.add_float32("test.f32", 0.1)
        w.add_float64("test.f64", 1e300)
        w.add_bool("test.bool", True)
        w.add_string("test.str", "héllo")
        w.add_array("test.arr", [1, 2, 3])
        w.add_array("test.strs", ["a", "bc"])
    for name, (kind, arr) in tensors.items():
        if kind in ("F32", "F16", "F64", "I8", "I16", "I32", "I64"):
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, arr, raw_dtype=GQ[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def cli_convert(src, dst):
    return subprocess.run(
        [CLI, "convert", str(src), str(dst)], capture_output=True, text=True, timeout=120
    )


def convert_both_ways(tmp_path, src, via):
    h = tmp_path / "x.hurray"
    back = tmp_path / "back.gguf"
    if via == "cli":
        r = cli_convert(src, h)
        assert r.returncode == 0, r.stderr
        r = cli_convert(h, back)
        assert r.returncode == 0, r.stderr
    else:
        hurray.convert(str(src), str(h), quiet=True)
        hurray.convert(str(h), str(back), quiet=True)
    return h, back


def gguf_pairs(path):
    """Every key-value pair and tensor (type, dims, bytes) as gguf-py reads it."""
    r = gguf.GGUFReader(str(path))
    kv = {
        f.name: (tuple(f.types), [bytes(p.tobytes()) for p in f.parts]) for f in r.fields.values()
    }
    ts = {
        t.name: (t.tensor_type, tuple(int(x) for x in t.shape), bytes(t.data.tobytes()))
        for t in r.tensors
    }
    return kv, ts


VIA = ["python"] + (["cli"] if CLI else [])


# ------------------------------------------------------------ per type


@pytest.mark.parametrize("via", VIA)
@pytest.mark.parametrize("kind", QUANT)
def test_quantized_type_is_exact_in_and_out(tmp_path, kind, via):
    rng = np.random.default_rng(sum(map(ord, kind)))
    tensors = {
        f"blk.0.{kind.lower()}.random": (kind, random_blocks(kind, 4, 3, rng)),
        f"blk.0.{kind.lower()}.edges": (kind, edge_blocks(kind, rng)),
    }
    quantized = quantized_blocks(kind, rng)
    if quantized is not None:
        tensors[f"blk.0.{kind.lower()}.gguf_py"] = (kind, quantized)
    tensors["output_norm.weight"] = ("F32", rng.normal(size=(64,)).astype(np.float32))
    src = tmp_path / "model.gguf"
    write_gguf(src, tensors)
    h, back = convert_both_ways(tmp_path, src, via)

    f = hurray.open(str(h))
    assert set(f.keys()) == set(tensors)
    for name, (k, raw) in tensors.items():
        if k != kind:
            continue
        t = f[name]
        q = t.descriptor.quantization
        if kind in CODED:
            assert q == BlockCoded(format="ggml_" + kind.lower(), axis=1)
            assert t.descriptor.dtype == "uint8"
            assert np.array_equal(t.codes(), raw)  # the blocks, byte for byte
        ref = reference(kind, raw)
        got = t.dequantize()
        where = np.argwhere(got.view(np.uint32) != ref.view(np.uint32))[:5]
        assert same_bits(got, ref), (name, where)
        assert same_bits(t.dequantize(threads=4), ref)
    f.close()
    assert back.read_bytes() == src.read_bytes()


@pytest.mark.parametrize("kind", DENSE)
def test_dense_type_round_trips_byte_identical(tmp_path, kind):
    rng = np.random.default_rng(len(kind))
    np_type = {
        "F32": np.float32,
        "F16": np.float16,
        "F64": np.float64,
        "I8": np.int8,
        "I16": np.int16,
        "I32": np.int32,
        "I64": np.int64,
    }
    if kind == "BF16":
        raw = rng.integers(0, 2**16, size=(3, 8), dtype=np.uint16).view(np.uint8)
        raw = raw.reshape(3, 16)
    elif kind.startswith("I"):
        info = np.iinfo(np_type[kind])
        raw = rng.integers(info.min, info.max, size=(3, 8), dtype=np_type[kind], endpoint=True)
    else:
        raw = rng.normal(size=(3, 8)).astype(np_type[kind])
    src = tmp_path / "d.gguf"
    write_gguf(src, {"t": (kind, raw)})
    for via in VIA:
        _, back = convert_both_ways(tmp_path, src, via)
        assert back.read_bytes() == src.read_bytes()
    t = hurray.load(str(tmp_path / "x.hurray"))["t"]
    assert np.array_equal(
        np.asarray(t.codes()).view(np.uint8).ravel(),
        np.ascontiguousarray(raw).view(np.uint8).ravel(),
    )


def test_every_gguf_type_is_covered():
    """Each type gguf-py defines is imported or knowingly refused."""
    refused = {"Q8_1", "Q1_0"}  # no dequantization defined by gguf-py (nor a single size)
    known = set(DENSE) | set(QUANT) | refused
    assert {t.name for t in GQ} <= known


def test_all_types_in_one_file_keep_every_kv_pair(tmp_path):
    rng = np.random.default_rng(7)
    tensors = {f"t.{k}": (k, random_blocks(k, 2, 2, rng)) for k in QUANT}
    src = tmp_path / "all.gguf"
    write_gguf(src, tensors)
    _, back = convert_both_ways(tmp_path, src, "python")
    assert back.read_bytes() == src.read_bytes()
    assert gguf_pairs(back) == gguf_pairs(src)


def test_dequantize_to_float16_and_bfloat16_narrows_the_float32_values(tmp_path):
    import ml_dtypes

    rng = np.random.default_rng(3)
    src = tmp_path / "n.gguf"
    raw = random_blocks("Q4_K", 2, 2, rng)
    write_gguf(src, {"w": ("Q4_K", raw)}, kv=False)
    hurray.convert(str(src), str(tmp_path / "n.hurray"), quiet=True)
    t = hurray.load(str(tmp_path / "n.hurray"))["w"]
    f32 = t.dequantize()
    assert np.array_equal(t.dequantize(np.float16), f32.astype(np.float16))
    assert np.array_equal(
        t.dequantize(ml_dtypes.bfloat16).view(np.uint16),
        f32.astype(ml_dtypes.bfloat16).view(np.uint16),
    )


def test_large_tensor_threads_agree(tmp_path):
    rng = np.random.default_rng(11)
    raw = random_blocks("IQ2_XS", 64, 8, rng)
    src = tmp_path / "big.gguf"
    write_gguf(src, {"w": ("IQ2_XS", raw)}, kv=False)
    hurray.convert(str(src), str(tmp_path / "big.hurray"), quiet=True)
    t = hurray.load(str(tmp_path / "big.hurray"))["w"]
    ref = gq.dequantize(raw, GQ.IQ2_XS)
    for threads in (1, 2, 3, 8):
        assert same_bits(t.dequantize(threads=threads), ref)


# ------------------------------------------------------------ descriptor


def test_block_coded_descriptor_round_trips_and_validates():
    d = Descriptor(
        "uint8",
        (2, 512),
        quantization=BlockCoded("ggml_q6_k", 1),
        buffers=[hurray.Buffer("data", 2 * 2 * 210)],
    )
    d.validate()
    assert d.quantization.block_size == 256
    assert Descriptor.decode(d.encode()) == d
    assert d.to_dict()["quantization"] == {
        "kind": "block_coded",
        "format": "ggml_q6_k",
        "axis": 1,
        "block_size": 256,
    }
    assert Descriptor.from_dict(d.to_dict()) == d


@pytest.mark.parametrize(
    "change, status",
    [
        (dict(dtype="int8"), "HURRAY_ERR_QUANT_DTYPE"),
        (dict(shape=(2, 500)), "HURRAY_ERR_QUANT_BLOCK_SIZE"),
        (dict(quantization=BlockCoded("ggml_q6_k", 0)), "HURRAY_ERR_QUANT_AXIS"),
        (dict(buffers=[hurray.Buffer("data", 2 * 2 * 210 - 1)]), "HURRAY_ERR_BUFFER_TOO_SMALL"),
        (dict(strides=(512, 1)), "HURRAY_ERR_STRIDES"),
    ],
)
def test_block_coded_validation_rules(change, status):
    fields = dict(
        dtype="uint8",
        shape=(2, 512),
        quantization=BlockCoded("ggml_q6_k", 1),
        buffers=[hurray.Buffer("data", 2 * 2 * 210)],
    )
    fields.update(change)
    with pytest.raises(hurray.HurrayError) as info:
        Descriptor(fields.pop("dtype"), fields.pop("shape"), **fields).validate()
    assert info.value.status_name == status


def test_unknown_block_format_is_refused():
    with pytest.raises(ValueError):
        Descriptor(
            "uint8",
            (256,),
            quantization=BlockCoded("ggml_q9_k", 0),
            buffers=[hurray.Buffer("data", 100)],
        )


def test_block_coded_decode_of_unknown_format_is_unsupported():
    d = Descriptor(
        "uint8",
        (256,),
        quantization=BlockCoded("ggml_q4_k", 0),
        buffers=[hurray.Buffer("data", 144)],
    )
    enc = bytearray(d.encode())
    at = enc.find(struct.pack("<HI", 0x003B, 8))
    assert at >= 0
    enc[at + 6] = 99  # format 99: no such block format
    with pytest.raises(hurray.HurrayError) as info:
        Descriptor.decode(bytes(enc))
    assert info.value.status_name == "HURRAY_ERR_UNSUPPORTED"


def test_block_coded_tensor_refuses_scales_and_to_dense(tmp_path):
    rng = np.random.default_rng(5)
    src = tmp_path / "s.gguf"
    write_gguf(src, {"w": ("Q4_K", random_blocks("Q4_K", 1, 1, rng))}, kv=False)
    hurray.convert(str(src), str(tmp_path / "s.hurray"), quiet=True)
    t = hurray.load(str(tmp_path / "s.hurray"))["w"]
    with pytest.raises(hurray.UnsupportedError):
        t.scales()
    with pytest.raises(hurray.UnsupportedError):
        t.to_dense()
    with pytest.raises(hurray.UnsupportedError):
        t.numpy()


def test_statistics_skip_block_coded_tensors(tmp_path):
    """The writer's statistics walk codes element by element; block bytes
    are not that (it read past the buffer before this was refused)."""
    rng = np.random.default_rng(9)
    src = tmp_path / "st.gguf"
    write_gguf(
        src,
        {
            "w": ("Q6_K", random_blocks("Q6_K", 2, 1, rng)),
            "b": ("F32", np.arange(4, dtype=np.float32)),
        },
        kv=False,
    )
    hurray.convert(str(src), str(tmp_path / "st.hurray"), stats=True, quiet=True)
    f = hurray.load(str(tmp_path / "st.hurray"))
    assert f["w"].descriptor.statistics is None
    assert f["b"].descriptor.statistics is not None
    with pytest.raises(hurray.UnsupportedError):
        f["w"].with_statistics()


# ------------------------------------------------------------ malformed


def write_short_tensor(path, second):
    """A Q4_K tensor declared [2, 256] (576 bytes) holding only 100."""
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor(
        "blk.0.attn_q.weight", np.zeros(100, np.uint8), raw_shape=(2, 288), raw_dtype=GQ.Q4_K
    )
    if second:
        w.add_tensor(
            "blk.0.attn_k.weight",
            np.zeros(144 * 8, np.uint8),
            raw_shape=(8, 144),
            raw_dtype=GQ.Q4_K,
        )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("second", [False, True])
def test_tensor_byte_size_not_matching_its_type_is_one_line_naming_it(tmp_path, second):
    src = tmp_path / "bad.gguf"
    write_short_tensor(src, second)
    dst = tmp_path / "bad.hurray"
    dst.write_bytes(b"untouched")
    with pytest.raises(ConversionError) as info:
        hurray.convert(str(src), str(dst), quiet=True)
    msg = str(info.value)
    assert "\n" not in msg and "blk.0.attn_q.weight" in msg and "Q4_K" in msg
    assert "576 bytes" in msg
    assert dst.read_bytes() == b"untouched"
    if CLI:
        r = cli_convert(src, dst)
        assert r.returncode == 1 and r.stdout == ""
        assert len(r.stderr.strip().splitlines()) == 1
        assert "blk.0.attn_q.weight" in r.stderr and "Traceback" not in r.stderr
        assert dst.read_bytes() == b"untouched"


def test_block_coded_dims_not_whole_blocks_are_refused(tmp_path):
    """A first dim that is not a multiple of the type's block (hand-made:
    gguf-py will not write one)."""
    src = tmp_path / "ok.gguf"
    write_gguf(src, {"blk.0.w": ("Q6_K", np.zeros((1, 210), np.uint8))}, kv=False)
    data = bytearray(src.read_bytes())
    name = b"blk.0.w"
    at = data.find(name) + len(name)
    n_dims = struct.unpack_from("<I", data, at)[0]
    assert n_dims == 2 and struct.unpack_from("<Q", data, at + 4)[0] == 256
    struct.pack_into("<QQ", data, at + 4, 128, 2)  # 256 elements, but 128 per row
    (tmp_path / "bad.gguf").write_bytes(bytes(data))
    with pytest.raises(ConversionError) as info:
        hurray.convert(str(tmp_path / "bad.gguf"), str(tmp_path / "bad.hurray"), quiet=True)
    assert "blk.0.w" in str(info.value) and "Q6_K" in str(info.value)
    assert not (tmp_path / "bad.hurray").exists()


# ------------------------------------------------------------ generated tables


def test_grid_tables_equal_gguf_py():
    """src/quant/ggml_grids.c is what scripts/gen_ggml_grids.py makes from
    gguf-py's tables today."""
    committed = REPO / "src" / "quant" / "ggml_grids.c"
    script = REPO / "scripts" / "gen_ggml_grids.py"
    if not committed.exists() or not script.exists():
        pytest.skip("needs the source tree")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True)
    assert r.stdout == committed.read_text()
    r = subprocess.run(
        [sys.executable, str(script), "--text"], capture_output=True, text=True, check=True
    )
    assert r.stdout == (REPO / "docs" / "spec" / "ggml-iq-grids.txt").read_text()


def test_ksigns_rule_equals_gguf_py_table():
    """docs/spec defines ksigns by rule (parity bit on top); gguf-py lists it."""
    table = np.frombuffer(gq.IQ2_XXS.ksigns, np.uint8)
    rule = [i | ((bin(i).count("1") & 1) << 7) for i in range(128)]
    assert table.tolist() == rule


@pytest.mark.parametrize("bits", [0x7F800001, 0xFFA00000, 0x7FC12345])
def test_a_float32_nan_key_keeps_its_bits(tmp_path, bits):
    # A FLOAT32 NaN went through a float-to-double conversion, which makes a
    # signalling NaN quiet: 0x7F800001 came back 0x7FC00001, with no note.
    src = tmp_path / "a.gguf"
    w = gguf.GGUFWriter(str(src), "llama")
    w.add_float32("x.f", 1.25)
    w.add_tensor("w", np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    raw = bytearray(src.read_bytes())
    at = raw.find(struct.pack("<f", 1.25))
    raw[at : at + 4] = struct.pack("<I", bits)
    src.write_bytes(bytes(raw))
    hurray.convert(src, tmp_path / "b.hurray", quiet=True)
    hurray.convert(tmp_path / "b.hurray", tmp_path / "c.gguf", quiet=True)
    assert (tmp_path / "c.gguf").read_bytes() == src.read_bytes()


def test_tensor_names_past_ggml_s_limit_are_refused_for_gguf(tmp_path):
    # ggml keeps names in char[64] with their NUL and refuses a file with a
    # longer one; the GGUF target wrote such files without a word.
    src = tmp_path / "a.hurray"
    hurray.save(src, {"n" * 63: np.ones(2, np.float32)})
    hurray.convert(src, tmp_path / "ok.gguf", quiet=True)
    assert [t.name for t in gguf.GGUFReader(tmp_path / "ok.gguf").tensors] == ["n" * 63]
    hurray.save(src, {"n" * 64: np.ones(2, np.float32)})
    with pytest.raises(ConversionError, match="64 bytes; GGUF readers"):
        hurray.convert(src, tmp_path / "long.gguf", quiet=True)
    assert not (tmp_path / "long.gguf").exists()
