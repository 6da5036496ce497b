"""Native safetensors and GGUF (hurray._formats, the C library): the files
are written by the peers' own packages (safetensors, gguf), converted with
torch, safetensors and gguf unimportable, and must come back byte for byte;
bad files get a one-line error, a non-zero exit and an untouched target,
from the Python API and from the C command line alike."""

import os
import shutil
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")
gguf = pytest.importorskip("gguf")
import gguf.quants as gq  # noqa: E402
import safetensors.torch as st  # noqa: E402
from gguf import GGMLQuantizationType as GQ  # noqa: E402
from gguf import GGUFValueType as GV  # noqa: E402

import hurray  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning:gguf")]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli():
    for cand in (
        os.environ.get("HURRAY_CLI"),
        os.path.join(ROOT, "build", "hurray"),
        shutil.which("hurray"),
    ):
        if cand and os.path.exists(cand):
            return cand
    return None


def _native_convert(src, dst):
    """`hurray convert SRC DST` on the C path only (no Python to hand to)."""
    env = dict(os.environ, HURRAY_PYTHON="/nonexistent/python", HURRAY_CONVERT_NATIVE_ONLY="1")
    return subprocess.run(
        [_cli(), "convert", str(src), str(dst)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


# Runs Python code with torch, safetensors and gguf made unimportable.
NO_PEERS = textwrap.dedent("""
    import sys
    class _Block:
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in ("torch", "safetensors", "gguf"):
                raise ImportError("blocked: " + name)
    sys.meta_path.insert(0, _Block())
""")


def run_without_peers(code, cwd):
    return subprocess.run(
        [sys.executable, "-c", NO_PEERS + textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def peers(tmp_path_factory):
    d = tmp_path_factory.mktemp("native")
    g = torch.Generator().manual_seed(0)
    sd = {
        "w.bf16": torch.randn(8, 16, generator=g).to(torch.bfloat16),
        "w.f16": torch.randn(5, generator=g).half(),
        "w.f32": torch.randn(3, 4, generator=g),
        "w.i8": torch.arange(-8, 8, dtype=torch.int8),
        "w.e4m3": torch.randn(32, generator=g).to(torch.float8_e4m3fn),
        "w.e5m2": torch.randn(8, generator=g).to(torch.float8_e5m2),
        "w.e8m0": torch.rand(8, generator=g).to(torch.float8_e8m0fnu),
        "w.u16": torch.arange(6, dtype=torch.int32).to(torch.uint16),
        "w.bool": torch.tensor([True, False, True]),
        "w.scalar": torch.tensor(1.25, dtype=torch.float64),
        "w.empty": torch.zeros(0, 3),
    }
    # One __metadata__ key: the safetensors package orders several keys
    # differently from process to process (hurray writes them sorted), so
    # only then is its own file reproducible byte for byte.
    st.save_file(sd, d / "m.safetensors", metadata={"note": "héllo"})
    x8 = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    x4 = np.random.default_rng(2).standard_normal((2, 96)).astype(np.float32)
    w = gguf.GGUFWriter(d / "m.gguf", "llama")
    w.add_string("general.name", "tiny")
    w.add_uint32("llama.context_length", 4096)
    w.add_float32("llama.rope.freq_base", 10000.5)
    w.add_array("tokenizer.ggml.tokens", ["<s>", "é", "<0x0A>"])
    w.add_key_value("test.uint64", 2**64 - 1, GV.UINT64)
    w.add_key_value("test.bytes", b"\xfe\xff", GV.STRING)
    w.add_tensor("blk.0.q8", gq.quantize(x8, GQ.Q8_0), raw_dtype=GQ.Q8_0)
    w.add_tensor("blk.0.q4", gq.quantize(x4, GQ.Q4_0), raw_dtype=GQ.Q4_0)
    w.add_tensor("tok.f16", np.random.default_rng(3).standard_normal((6, 32)).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return d


def same(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def test_python_round_trips_without_torch_safetensors_or_gguf(peers, tmp_path):
    for f in ("m.safetensors", "m.gguf"):
        shutil.copy(peers / f, tmp_path / f)
    r = run_without_peers(
        """
        import hurray
        hurray.convert("m.safetensors", "st.hurray", quiet=True)
        hurray.convert("st.hurray", "back.safetensors", quiet=True)
        hurray.convert("m.gguf", "g.hurray", quiet=True)
        hurray.convert("g.hurray", "back.gguf", quiet=True)
        assert not [m for m in sys.modules if m.split(".")[0] in ("torch", "safetensors", "gguf")]
    """,
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert same(tmp_path / "m.safetensors", tmp_path / "back.safetensors")
    assert same(tmp_path / "m.gguf", tmp_path / "back.gguf")


@pytest.mark.skipif(_cli() is None, reason="the hurray CLI is not built")
def test_cli_round_trips_natively(peers, tmp_path):
    cli = _cli()
    env = dict(os.environ, HURRAY_PYTHON="/nonexistent/python", HURRAY_CONVERT_NATIVE_ONLY="1")
    for src, mid, back in (
        ("m.safetensors", "a.hurray", "a.safetensors"),
        ("m.gguf", "b.hurray", "b.gguf"),
    ):
        for s, t in ((peers / src, tmp_path / mid), (tmp_path / mid, tmp_path / back)):
            r = subprocess.run(
                [cli, "convert", str(s), str(t)],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            assert r.returncode == 0, r.stderr
            assert "(native)" in r.stdout
        assert same(peers / src, tmp_path / back)
        r = subprocess.run([cli, "verify", str(tmp_path / mid)], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


def test_read_natively_matches_the_peers(peers):
    from hurray import _formats
    from hurray._tensor import from_hurray

    src = _formats.Source(str(peers / "m.safetensors"))
    assert src.format == "safetensors"
    want = st.load_file(peers / "m.safetensors")
    for i, name in enumerate(src.names()):
        t = from_hurray(src.get(i))
        raw = (
            want[name].contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
            if want[name].numel()
            else b""
        )
        assert bytes(t.buffers[0]) == raw, name
        assert tuple(t.shape) == tuple(want[name].shape)
    meta = src.metadata()
    assert meta["safetensors.note"] == "héllo"
    src.close()
    g = _formats.Source(str(peers / "m.gguf"))
    meta = g.metadata()
    assert meta["gguf.test.uint64"] == str(2**64 - 1)
    assert meta["gguf.test.bytes"] == b"\xfe\xff"
    assert meta["gguf.llama.context_length"] == 4096
    assert g.info(g.names().index("blk.0.q4"))[:2] == ("Q4_0", (2, 96))


def _st(header: bytes, data: bytes) -> bytes:
    header += b" " * ((8 - len(header) % 8) % 8)
    return struct.pack("<Q", len(header)) + header + data


BAD = {
    "offsets-past-end.safetensors": _st(
        b'{"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}}', bytes(16)
    ),
    "overlap.safetensors": _st(
        b'{"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},'
        b'"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}}',
        bytes(12),
    ),
    "hole.safetensors": _st(
        b'{"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},'
        b'"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}}',
        bytes(12),
    ),
    # The format stores bool elements as 0 or 1; the writer refuses a 2.
    "bool-byte-2.safetensors": _st(
        b'{"a":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}}', bytes([1, 2, 0])
    ),
    "header-100mb.safetensors": struct.pack("<Q", 100_000_001) + b"{}",
    "header-claims-100mb.safetensors": struct.pack("<Q", 100_000_000) + b"{}",
    "absurd-counts.gguf": b"GGUF" + struct.pack("<IQQ", 3, 1 << 40, 1 << 40) + bytes(32),
    "absurd-kv.gguf": b"GGUF" + struct.pack("<IQQ", 3, 0, 1 << 40) + bytes(32),
}


@pytest.fixture(scope="module")
def bad_files(peers, tmp_path_factory):
    d = tmp_path_factory.mktemp("bad")
    for name, data in BAD.items():
        (d / name).write_bytes(data)
    for f in ("m.safetensors", "m.gguf"):
        data = (peers / f).read_bytes()
        (d / f"truncated-{f}").write_bytes(data[: len(data) // 2])
    return d


@pytest.mark.parametrize("name", sorted(BAD) + ["truncated-m.safetensors", "truncated-m.gguf"])
def test_bad_input_python(bad_files, tmp_path, name):
    from hurray.convert import ConversionError, convert

    target = tmp_path / "out.hurray"
    target.write_bytes(b"untouched")
    with pytest.raises(ConversionError) as info:
        convert(bad_files / name, target, quiet=True)
    assert "\n" not in str(info.value)
    assert target.read_bytes() == b"untouched"


@pytest.mark.skipif(_cli() is None, reason="the hurray CLI is not built")
@pytest.mark.parametrize("name", sorted(BAD) + ["truncated-m.safetensors", "truncated-m.gguf"])
def test_bad_input_cli(bad_files, tmp_path, name):
    target = tmp_path / "out.hurray"
    target.write_bytes(b"untouched")
    env = dict(os.environ, HURRAY_PYTHON="/nonexistent/python")
    r = subprocess.run(
        [_cli(), "convert", str(bad_files / name), str(target)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("hurray convert: ")
    assert target.read_bytes() == b"untouched"


@pytest.mark.skipif(_cli() is None, reason="the hurray CLI is not built")
def test_cli_hands_what_needs_python_over(peers, tmp_path):
    """A quantized tensor into safetensors needs dequantizing: the C path
    declines (UNSUPPORTED, nothing written) and Python does it."""
    import hurray

    x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
    hurray.save(tmp_path / "q.hurray", {"w": hurray.quantize(x, "q8_0")})
    env = dict(os.environ, HURRAY_PYTHON=sys.executable)
    r = subprocess.run(
        [_cli(), "convert", str(tmp_path / "q.hurray"), str(tmp_path / "q.safetensors"), "--quiet"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    got = st.load_file(tmp_path / "q.safetensors")["w"]
    assert got.dtype == torch.float32 and tuple(got.shape) == (4, 64)


@pytest.mark.skipif(_cli() is None, reason="the hurray CLI is not built")
def test_typed_safetensors_metadata_is_the_same_text_on_both_paths(tmp_path):
    # The Python converter wrote json.dumps text ("0.1", "NaN"), the native
    # one C's ("0.10000000000000001", "nan"): the same command gave two files.
    src = tmp_path / "a.hurray"
    meta = {
        "safetensors.lr": 0.1,
        "safetensors.nan": float("nan"),
        "safetensors.inf": float("-inf"),
        "safetensors.zero": -0.0,
        "safetensors.n": -3,
        "safetensors.flag": True,
        "safetensors.name": "x",
    }
    hurray.save(src, {"w": np.arange(4, dtype=np.float32)}, meta)
    hurray.convert(src, tmp_path / "py.safetensors", quiet=True)
    r = _native_convert(src, tmp_path / "c.safetensors")
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "py.safetensors").read_bytes() == (tmp_path / "c.safetensors").read_bytes()


@pytest.mark.skipif(_cli() is None, reason="the hurray CLI is not built")
def test_a_safetensors_source_keeps_its_order_on_both_paths(tmp_path):
    # The Python converter sorted the names; the C source keeps the file's
    # order (ascending data offsets): GGUF targets of one command differed.
    import json

    header = {}
    for i, name in enumerate(["b", "c", "a"]):
        header[name] = {"dtype": "F32", "shape": [2], "data_offsets": [8 * i, 8 * i + 8]}
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    src = tmp_path / "s.safetensors"
    src.write_bytes(struct.pack("<Q", len(text)) + text + np.arange(6, dtype="<f4").tobytes())
    hurray.convert(src, tmp_path / "py.gguf", quiet=True)
    r = _native_convert(src, tmp_path / "c.gguf")
    assert r.returncode == 0, r.stderr
    assert [t.name for t in gguf.GGUFReader(tmp_path / "py.gguf").tensors] == ["b", "c", "a"]
    assert (tmp_path / "py.gguf").read_bytes() == (tmp_path / "c.gguf").read_bytes()


@pytest.mark.skipif(_cli() is None, reason="the hurray CLI is not built")
def test_bool_bytes_other_than_0_and_1_are_refused_by_every_target(tmp_path):
    # The hurray writer refused them, the safetensors target copied them:
    # a file a conversion back to hurray then refused.
    import json

    header = json.dumps({"b": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}).encode()
    header += b" " * (-len(header) % 8)
    src = tmp_path / "b.safetensors"
    src.write_bytes(struct.pack("<Q", len(header)) + header + bytes([0, 66]))
    for target in ("out.safetensors", "out.hurray"):
        r = _native_convert(src, tmp_path / target)
        assert r.returncode == 1, (target, r.stdout, r.stderr)
        assert "bool element 1 is 66" in r.stderr
        with pytest.raises(hurray.ConversionError, match="bool element 1 is 66"):
            hurray.convert(src, tmp_path / target, quiet=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.safetensors"]


@pytest.mark.skipif(_cli() is None, reason="the hurray CLI is not built")
def test_json_metadata_costs_a_small_multiple_of_its_text(tmp_path):
    """The C JSON reader gave every array an 8-item table: 2.25 MB of
    "[[[[]]]]," in gguf.__tensors__ took 403 MB before the convert refused
    it. Tables now start at one item (83 MB, most of it the file)."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("peak memory is the plain build's")
    src = tmp_path / "nested.hurray"
    text = "[" + ",".join(["[[[[]]]]"] * 250_000) + "]"
    hurray.save(src, {"w": np.zeros(8, np.float32)}, {"gguf.__tensors__": text})
    probe = textwrap.dedent("""
        import os, resource, subprocess, sys
        env = dict(os.environ, HURRAY_PYTHON="/nonexistent/python")
        r = subprocess.run(sys.argv[1:], capture_output=True, text=True, env=env)
        print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)
    """)
    r = subprocess.run(
        [sys.executable, "-c", probe, _cli(), "convert", str(src), str(tmp_path / "o.safetensors")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    status, peak_mib = map(int, r.stdout.split())
    assert status == 1 and peak_mib < 200, (r.stdout, r.stderr)
