"""hurray convert against hostile and damaged inputs, and interruptions
(issue 14, "Hardening, round two"):

  * file names read from a file (a sharded index's weight_map) are confined
    to the index's folder;
  * a .hurray source is verified against its checksums (--no-verify skips);
  * two tensors that would get one name, in any source or target naming
    scheme, are refused with both names instead of one being lost;
  * Ctrl-C (and SIGTERM) never publishes the target, and leaves no
    temporary file;
  * malformed inputs give one line on stderr and exit status 1, never a
    traceback.

Every case that can hang or crash runs in a subprocess."""

import builtins
import errno
import io
import json
import os
import re
import signal
import stat
import struct
import subprocess
import sys
import textwrap
import threading
import warnings
import zipfile

import numpy as np
import pytest

import hurray
from hurray.convert import ConversionError, convert
from hurray.convert._common import UsageError

torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")
gguf = pytest.importorskip("gguf")
import safetensors.torch as st  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore::RuntimeWarning:gguf"),
    pytest.mark.filterwarnings("ignore:The given NumPy array is not writable"),
]


def run_cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "hurray", "convert", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_one_line_failure(r, status=1, contains=None):
    assert r.returncode == status, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("hurray convert: "), lines[0]
    assert "internal error" not in lines[0], lines[0]
    if contains is not None:
        assert contains in lines[0], lines[0]
    assert r.stdout == ""


def listing(folder):
    return sorted(os.listdir(folder))


# ------------------------------------------------------------------ 1. confinement


def _outside_setup(tmp_path, shard_value):
    """tmp/secret.safetensors (not part of the checkpoint) and tmp/ckpt/ with
    an index whose weight_map names `shard_value`."""
    st.save_file({"w": torch.arange(4.0)}, tmp_path / "secret.safetensors")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    st.save_file({"b": torch.ones(2)}, ckpt / "model-00001-of-00001.safetensors")
    value = shard_value.replace("ABS", str(tmp_path / "secret.safetensors"))
    index = {"weight_map": {"b": "model-00001-of-00001.safetensors", "w": value}}
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    return ckpt


def test_a_missing_shard_is_a_file_not_found_error(tmp_path):
    """A shard the index names that does not exist was a plain
    ConversionError (errno None), where a folder as shard was already
    ConversionIsADirectoryError: `except FileNotFoundError` missed it."""
    index = tmp_path / "model.safetensors.index.json"
    index.write_text('{"weight_map": {"w": "gone.safetensors"}}')
    with pytest.raises(FileNotFoundError) as info:
        convert(index, tmp_path / "out.hurray", quiet=True)
    assert isinstance(info.value, ConversionError)
    assert info.value.filename == str(tmp_path / "gone.safetensors")
    assert "names shard gone.safetensors, which does not exist" in str(info.value)


@pytest.mark.parametrize("shard", ["../secret.safetensors", "ABS", "sub/../../secret.safetensors"])
def test_index_cannot_name_a_shard_outside_its_folder(tmp_path, shard):
    ckpt = _outside_setup(tmp_path, shard)
    out = tmp_path / "out.hurray"
    with pytest.raises(ConversionError, match="not a file inside its folder"):
        convert(ckpt, out, quiet=True)
    assert not out.exists()
    r = run_cli(ckpt / "model.safetensors.index.json", out)
    assert_one_line_failure(r, contains="refusing to read it")
    assert listing(tmp_path) == ["ckpt", "secret.safetensors"]


def test_index_shards_in_subfolders_and_symlinked_blobs_are_read(tmp_path):
    # the Hugging Face cache: snapshots/<rev>/<shard> -> ../../blobs/<hash>
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    st.save_file({"a": torch.arange(3.0)}, blobs / "0123abcd")
    snap = tmp_path / "snapshots" / "rev"
    (snap / "sub").mkdir(parents=True)
    os.symlink("../../blobs/0123abcd", snap / "model-00001-of-00002.safetensors")
    st.save_file({"b": torch.ones(2)}, snap / "sub" / "model-00002-of-00002.safetensors")
    index = {
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "sub/model-00002-of-00002.safetensors",
        }
    }
    (snap / "model.safetensors.index.json").write_text(json.dumps(index))
    convert(snap, tmp_path / "m.hurray", quiet=True)
    got = hurray.load(tmp_path / "m.hurray")
    assert got["a"].numpy().tolist() == [0, 1, 2] and got["b"].numpy().tolist() == [1, 1]


# ------------------------------------------------------------------ 2. verification


def _damaged_hurray(tmp_path):
    path = tmp_path / "src.hurray"
    values = np.arange(1000, 1256, dtype=np.float32)
    hurray.save(path, {"w": values, "b": np.ones(3, np.float32)})
    data = bytearray(path.read_bytes())
    at = data.find(values.tobytes())
    assert at > 0
    data[at + 4 * 7] ^= 0x01  # one bit of element 7
    path.write_bytes(bytes(data))
    return path


def test_damaged_hurray_source_is_refused_unless_no_verify(tmp_path):
    src = _damaged_hurray(tmp_path)
    dst = tmp_path / "out.npz"
    dst.write_bytes(b"the old target")
    r = run_cli(src, dst)
    assert_one_line_failure(r, contains="fails verification")
    assert "'w'" in r.stderr and "--no-verify" in r.stderr
    assert dst.read_bytes() == b"the old target"
    assert listing(tmp_path) == ["out.npz", "src.hurray"]
    with pytest.raises(ConversionError, match="fails verification"):
        convert(src, dst, quiet=True)
    assert dst.read_bytes() == b"the old target"

    r = run_cli(src, dst, "--no-verify", "--quiet")
    assert (r.returncode, r.stderr) == (0, "")
    w = np.load(dst)["w"]
    assert w[7] != 1007 and w[8] == 1008  # the damage came through, as asked
    convert(src, tmp_path / "again.hurray", verify=False, quiet=True)
    # only the tensors converted are verified
    convert(src, tmp_path / "b.hurray", include=["b"], quiet=True)


def test_the_c_path_also_says_no_verify_converts_a_damaged_file(tmp_path):
    """The native converter (hurray -> safetensors) said "checksum
    mismatch" and nothing of --no-verify, which the Python path names."""
    from zoo_reference import cli

    exe = cli()
    if exe is None:
        pytest.skip("the C hurray command is not built")
    src = _damaged_hurray(tmp_path)
    r = subprocess.run(
        [exe, "convert", str(src), str(tmp_path / "out.safetensors")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "checksum mismatch" in r.stderr
    assert "--no-verify converts it anyway" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


# ------------------------------------------------------------------ 3. collisions


@pytest.mark.parametrize(
    "sd,first,second,name",
    [
        ({"a": {"b": 1.0}, "a.b": 2.0}, "['a']['b']", "['a.b']", "a.b"),
        ({1: 1.0, "1": 2.0}, "[1]", "['1']", "1"),
        ({"": 1.0, "tensor": 2.0}, "['']", "['tensor']", "tensor"),
        ({"x": {"": {"y": 1.0}}, "x..y": 2.0}, "['x']['']['y']", "['x..y']", "x..y"),
    ],
)
def test_torch_names_that_collide_are_refused(tmp_path, sd, first, second, name):
    def tensors(obj):
        if isinstance(obj, dict):
            return {k: tensors(v) for k, v in obj.items()}
        return torch.full((2,), obj)

    src = tmp_path / "sd.pt"
    torch.save(tensors(sd), src)
    with pytest.raises(ConversionError) as info:
        convert(src, tmp_path / "out.hurray", quiet=True)
    msg = str(info.value)
    assert first in msg and second in msg and repr(name) in msg, msg
    assert listing(tmp_path) == ["sd.pt"]


def test_deeply_nested_torch_dict_is_flattened(tmp_path):
    depth = 1100  # deeper than Python's default recursion limit
    d = cur = {}
    for _ in range(depth):
        cur["x"] = {}
        cur = cur["x"]
    cur["t"] = torch.arange(3)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(10 * depth)
    try:
        torch.save(d, tmp_path / "deep.pt")
    finally:
        sys.setrecursionlimit(old)
    r = run_cli(tmp_path / "deep.pt", tmp_path / "deep.hurray", "--quiet")
    assert (r.returncode, r.stderr) == (0, "")
    assert hurray.load(tmp_path / "deep.hurray")["x." * depth + "t"].numpy().tolist() == [0, 1, 2]


def _shards(tmp_path, shard_a, shard_b, weight_map_text):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    st.save_file(shard_a, ckpt / "a.safetensors")
    st.save_file(shard_b, ckpt / "b.safetensors")
    (ckpt / "model.safetensors.index.json").write_text(weight_map_text)
    return ckpt


def test_sharded_tensor_in_two_shards_is_refused(tmp_path):
    ckpt = _shards(
        tmp_path,
        {"w": torch.ones(2)},
        {"w": torch.zeros(2), "v": torch.ones(1)},
        json.dumps({"weight_map": {"w": "a.safetensors", "v": "b.safetensors"}}),
    )
    with pytest.raises(
        ConversionError,
        match=r"'w' is in two shards, a.safetensors and "
        r"b.safetensors",
    ):
        convert(ckpt, tmp_path / "out.hurray", quiet=True)


def test_sharded_tensor_the_index_does_not_list_is_refused(tmp_path):
    ckpt = _shards(
        tmp_path,
        {"w": torch.ones(2)},
        {"v": torch.ones(1), "u": torch.ones(1)},
        json.dumps({"weight_map": {"w": "a.safetensors", "v": "b.safetensors"}}),
    )
    with pytest.raises(
        ConversionError,
        match="b.safetensors holds tensor 'u', which the index's weight_map does not list",
    ):
        convert(ckpt, tmp_path / "out.hurray", quiet=True)


def test_index_with_a_repeated_key_is_refused(tmp_path):
    ckpt = _shards(
        tmp_path,
        {"w": torch.ones(2)},
        {"w2": torch.ones(1)},
        '{"weight_map": {"w": "a.safetensors", "w": "b.safetensors"}}',
    )
    with pytest.raises(ConversionError, match="key 'w' appears twice"):
        convert(ckpt, tmp_path / "out.hurray", quiet=True)


def _npy_bytes(a):
    import io

    buf = io.BytesIO()
    np.lib.format.write_array(buf, a)
    return buf.getvalue()


def test_npz_members_read_as_one_name_are_refused(tmp_path):
    src = tmp_path / "two.npz"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("a.npy", _npy_bytes(np.ones(3)))
        z.writestr("a", _npy_bytes(np.zeros(3)))
    with pytest.raises(ConversionError, match="members 'a.npy' and 'a' both read as array 'a'"):
        convert(src, tmp_path / "out.hurray", quiet=True)


def _npz_with_members_sharing_bytes(path, copies: int) -> None:
    """An .npz of one deflated member and `copies` more central directory
    entries that point at its bytes (the simplest overlap: each inflates
    the same stream)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("m0.npy", _npy_bytes(np.zeros(1 << 16)))
    raw = buf.getvalue()
    eocd = raw.rindex(b"PK\x05\x06")
    cd_size, cd_offset = struct.unpack("<II", raw[eocd + 12 : eocd + 20])
    entry = raw[cd_offset : cd_offset + cd_size]
    entries = [entry] + [
        entry.replace(b"m0.npy", f"m{k}.npy".encode()) for k in range(1, copies + 1)
    ]
    cd = b"".join(entries)
    tail = raw[eocd : eocd + 22]
    tail = (
        tail[:8] + struct.pack("<HHII", len(entries), len(entries), len(cd), cd_offset) + tail[20:]
    )
    path.write_bytes(raw[:cd_offset] + cd + tail)


def test_npz_members_that_share_stored_bytes_are_refused(tmp_path):
    """Members whose stored bytes overlap each inflate the same data again:
    a 260 KB archive asked for 2 GB per 8 members, past the ~1,000x of
    deflate that security.md allows for. Python 3.11's zipfile reads them."""
    src = tmp_path / "shared.npz"
    _npz_with_members_sharing_bytes(src, copies=3)
    with zipfile.ZipFile(src) as z:
        assert len(z.namelist()) == 4  # zipfile itself takes it, on Python < 3.13
    r = run_cli(src, tmp_path / "out.hurray")
    assert_one_line_failure(r, contains="members 'm0.npy' and 'm1.npy' share stored bytes")
    assert not (tmp_path / "out.hurray").exists()
    # A central directory placed past where it says: zipfile takes every
    # member's offset as negative, and the check's seek gave a bare OSError.
    np.savez(tmp_path / "src.npz", a=np.arange(4.0))
    data = bytearray((tmp_path / "src.npz").read_bytes())
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<I", data, end + 16, struct.unpack_from("<I", data, end + 16)[0] + 1000)
    (tmp_path / "moved.npz").write_bytes(bytes(data))
    r = run_cli(tmp_path / "moved.npz", tmp_path / "out.hurray")
    assert_one_line_failure(r, contains="moved.npz: array 'a'")
    ok = tmp_path / "ok.npz"
    np.savez_compressed(ok, a=np.arange(5), b=np.ones((2, 3)))
    convert(ok, tmp_path / "out.hurray", quiet=True)
    assert sorted(hurray.load(tmp_path / "out.hurray")) == ["a", "b"]


@pytest.mark.parametrize("order", ["codes first", "scales first"])
@pytest.mark.parametrize("part,scheme", [("scales", "q4_0"), ("zero_points", "block_affine")])
def test_keep_scales_part_named_like_a_tensor_is_refused(tmp_path, order, part, scheme):
    q = hurray.quantize(
        np.linspace(-1, 3, 64, dtype=np.float32).reshape(2, 32),
        scheme,
        **({"symmetric": False} if scheme == "block_affine" else {}),
    )
    if part == "zero_points":
        assert q.descriptor.quantization.zero_point_buffer is not None
    real = np.full(3, 7.0, np.float32)
    tensors = {"w": q, f"w.{part}": real}
    if order == "scales first":
        tensors = dict(reversed(list(tensors.items())))
    src = tmp_path / "q.hurray"
    hurray.save(src, tensors)
    out = tmp_path / "out.safetensors"
    with pytest.raises(ConversionError) as info:
        convert(src, out, keep_scales=True, quiet=True)
    msg = str(info.value)
    assert f"tensor 'w.{part}'" in msg and "of tensor 'w' (--keep-scales)" in msg, msg
    assert listing(tmp_path) == ["q.hurray"]
    convert(src, out, quiet=True)  # dequantized: no parts, no collision
    assert st.load_file(out)[f"w.{part}"].tolist() == [7.0] * 3


def test_keep_scales_metadata_key_taken_by_the_source_is_refused(tmp_path):
    q = hurray.quantize(np.ones((2, 32), np.float32), "q8_0")
    src = tmp_path / "q.hurray"
    hurray.save(src, {"w": q}, {"safetensors.hurray.w.quantization": "mine"})
    with pytest.raises(ConversionError, match="'hurray.w.quantization'"):
        convert(src, tmp_path / "out.safetensors", keep_scales=True, quiet=True)


def test_keep_scales_part_claimed_twice_is_refused(tmp_path):
    q = hurray.quantize(np.ones((2, 32), np.float32), "q8_0")
    hurray.save(tmp_path / "q.hurray", {"a": q})
    convert(tmp_path / "q.hurray", tmp_path / "k.safetensors", keep_scales=True, quiet=True)
    tensors = st.load_file(tmp_path / "k.safetensors")
    with safetensors.safe_open(tmp_path / "k.safetensors", framework="pt") as f:
        meta = f.metadata()
    meta["hurray.a.scales.quantization"] = meta["hurray.a.quantization"]
    tensors["a.scales.scales"] = tensors["a.scales"].clone()
    st.save_file(tensors, tmp_path / "bad.safetensors", metadata=meta)
    with pytest.raises(ConversionError, match="'a.scales' is claimed both by"):
        convert(tmp_path / "bad.safetensors", tmp_path / "out.hurray", quiet=True)


def _one_tensor_gguf(path, strings=None):
    """A GGUF file of tensor "t" (four float32 ones) and `strings` keys."""
    w = gguf.GGUFWriter(path, "llama")
    for key, value in (strings or {}).items():
        w.add_string(key, value)
    w.add_tensor("t", np.ones(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_gguf_key_named_like_the_converters_own_is_refused(tmp_path):
    _one_tensor_gguf(tmp_path / "m.gguf", {"__types__": "{}"})
    with pytest.raises(ConversionError, match="'__types__'"):
        convert(tmp_path / "m.gguf", tmp_path / "out.hurray", quiet=True)


@pytest.mark.parametrize(
    "meta,words",
    [
        ({"gguf.": "x"}, "names a GGUF key that is empty"),
        (
            {"gguf.a": "[]", "gguf.__types__": '{"a": "ARRAY:ARRAY:INT32"}'},
            "empty array of arrays",
        ),
        ({"gguf.a": b"1.5\0junk", "gguf.__types__": '{"a": "FLOAT32"}'}, "not a number"),
        ({"gguf.a": " 1.5", "gguf.__types__": '{"a": "FLOAT32"}'}, "not a number"),
    ],
    ids=["empty-key", "empty-array-of-arrays", "nul-in-float", "blank-in-float"],
)
def test_gguf_target_refuses_what_no_reader_takes_back(tmp_path, meta, words):
    # The writer wrote an empty key and an empty array of arrays, which
    # GGUF readers (hurray's too) refuse, and wrote b"1.5\0junk" as 1.5.
    src = tmp_path / "m.hurray"
    hurray.save(src, {"t": np.ones(4, np.float32)}, meta)
    with pytest.raises(ConversionError, match=words):
        convert(src, tmp_path / "out.gguf", quiet=True)
    assert not (tmp_path / "out.gguf").exists()


def test_a_torch_target_without_torch_is_a_clear_error(tmp_path, monkeypatch):
    # It said "internal error: ModuleNotFoundError: No module named 'torch'
    # (please report it)"; reading a .pt without torch already said what
    # was missing.
    src = tmp_path / "m.hurray"
    hurray.save(src, {"t": np.ones(4, np.float32)})
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch: ImportError
    with pytest.raises(ConversionError, match="needs the 'torch' package"):
        convert(src, tmp_path / "m.pt", quiet=True)
    assert sorted(os.listdir(tmp_path)) == ["m.hurray"]


# ------------------------------------------------------------------ 4. signals

# The child converts SRC to DST through `python -m hurray convert`, with one
# function wrapped to tell the parent (a line on stdout) when to send SIGINT:
#   blocked: the target's writer library, made to behave like one that never
#            checks for signals (SIGINT held back while it runs, delivered
#            when it returns) - deterministic, and what safetensors, torch
#            and a hurray.save without signal checks do;
#   loop:    the second tensor's conversion (the signal interrupts a sleep);
#   live:    hurray.save, called as it is: the signal arrives while the C
#            writer runs.
DRIVER = textwrap.dedent(r"""
    import signal, sys, time
    src, dst, kind, phase = sys.argv[1:5]
    # Blocked in every thread that numpy, torch, ... start from here on, so
    # that the signal waits for the main thread to unblock it.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    if phase != "blocked":
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    from hurray import _files
    from hurray.convert import _driver as _convert
    from hurray.__main__ import main

    def say(word):
        sys.stdout.write(word + "\n")
        sys.stdout.flush()

    def blocked(fn):
        calls = []
        def wrapper(*a, **k):
            calls.append(1)
            if len(calls) > 1:  # abort() closing the writer again
                return fn(*a, **k)
            # main() unblocked it: blocked again here, or a handler that only
            # notes it (torch's, _deferred.py) would leave it never pending
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                say("now")
                while signal.SIGINT not in signal.sigpending():
                    time.sleep(0.002)
                return fn(*a, **k)
            finally:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        return wrapper

    def announced(fn):
        def wrapper(*a, **k):
            say("now")
            return fn(*a, **k)
        return wrapper

    if phase == "loop":
        real, calls = _convert._convert_one, []
        def one(*a, **k):
            calls.append(1)
            if len(calls) == 2:
                say("now")
                time.sleep(120)
            return real(*a, **k)
        _convert._convert_one = one
    elif phase == "inside":  # torch.save's second write, Python code called from its C++
        from hurray.convert import _target
        real_write, calls = _target.WriteErrors.write, []
        def write(self, data):
            calls.append(1)
            done = real_write(self, data)
            if len(calls) == 2:  # written, not yet said so
                say("now")
                time.sleep(0.5)
            return done
        _target.WriteErrors.write = write
    elif kind == "hurray":  # the C function itself: "now" comes right before C runs
        _files._hurray.save = (blocked if phase == "blocked" else announced)(_files._hurray.save)
    elif kind in ("safetensors", "gguf"):  # the native writer (hurray._formats, C)
        from hurray import _formats
        _formats.write = blocked(_formats.write)
    elif kind == "pt":
        import torch
        torch.save = blocked(torch.save)
    elif kind == "npz":
        import zipfile
        zipfile.ZipFile.close = blocked(zipfile.ZipFile.close)
    elif kind == "npy":
        import numpy as np
        np.lib.format.write_array = blocked(np.lib.format.write_array)
    sys.exit(main(["convert", src, dst, "--quiet"] + sys.argv[5:]))
""")


def _interrupt(tmp_path, src, kind, phase, *extra, sig=signal.SIGINT):
    dst = tmp_path / f"out.{kind}"
    old = b"the old target, which must survive\n" * 3
    dst.write_bytes(old)
    before = listing(tmp_path)
    p = subprocess.Popen(
        [sys.executable, "-c", DRIVER, str(src), str(dst), kind, phase, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = p.stdout.readline()
        assert line == "now\n", (line, p.stderr.read() if p.poll() is not None else "")
        p.send_signal(sig)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 128 + sig, (p.returncode, err)
    assert err.strip() == "hurray convert: interrupted", err
    assert dst.read_bytes() == old  # untouched
    assert listing(tmp_path) == before  # no temporary file left


@pytest.fixture(scope="module")
def hurray_source(tmp_path_factory):
    d = tmp_path_factory.mktemp("sigsrc")
    rng = np.random.default_rng(0)
    tensors = {
        f"layer{i}.weight": rng.standard_normal((64, 64), dtype=np.float32) for i in range(4)
    }
    hurray.save(d / "src.hurray", tensors)
    one = d / "one.hurray"
    hurray.save(one, {"w": tensors["layer0.weight"]})
    return d / "src.hurray", one


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hurray", "safetensors", "pt", "gguf", "npz", "npy"])
def test_sigint_while_the_target_is_written_leaves_it_untouched(tmp_path, hurray_source, kind):
    src = hurray_source[1] if kind == "npy" else hurray_source[0]
    _interrupt(tmp_path, src, kind, "blocked")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["hurray", "npz"])
def test_sigint_between_tensors_leaves_the_target_untouched(tmp_path, hurray_source, kind):
    _interrupt(tmp_path, hurray_source[0], kind, "loop")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_inside_torch_save_is_an_interrupt(tmp_path, hurray_source, sig):
    """Raised inside torch.save (in the file's write(), called from torch's
    C++), the KeyboardInterrupt made torch's writer fail with "unexpected
    pos ...", and the conversion said that, exit 1."""
    _interrupt(tmp_path, hurray_source[0], "pt", "inside", sig=sig)


def test_signals_deferred_holds_handlers_until_the_block_ends():
    """Inside, a signal only is noted; its handler runs as the block ends,
    once, and the handlers are as they were. In another thread (where no
    handler runs) the block changes nothing."""
    import threading

    from hurray._deferred import signals_deferred

    seen = []

    def handler(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt(signum)

    before = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):  # the interpreter checks for signals here
                    pass
                assert seen == []
        assert info.value.args == (signal.SIGTERM,) and seen == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) is handler
        with signals_deferred():
            pass
        assert seen == [signal.SIGTERM]
        result = []
        thread = threading.Thread(target=lambda: result.append(signals_deferred().__enter__()))
        thread.start()
        thread.join()
        assert result == [None] and signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, before)


def test_signals_deferred_runs_every_signal_that_came():
    """Only the first signal noted ran its handler: a Ctrl-C after a SIGHUP
    whose handler returned was lost, and so was a SIGTERM after it. Each
    runs once, in the order they came; when one raises, the others still
    run at the interpreter's next check."""
    from hurray._deferred import signals_deferred

    seen = []

    def note(signum, frame):
        seen.append(signum)

    def interrupt(signum, frame):
        seen.append(signum)
        raise KeyboardInterrupt(signum)

    held = (signal.SIGHUP, signal.SIGINT, signal.SIGTERM)
    before = {s: signal.getsignal(s) for s in held}
    try:
        signal.signal(signal.SIGHUP, note)
        signal.signal(signal.SIGINT, interrupt)
        signal.signal(signal.SIGTERM, note)
        with pytest.raises(KeyboardInterrupt):
            with signals_deferred():
                for s in (signal.SIGHUP, signal.SIGINT, signal.SIGHUP):
                    os.kill(os.getpid(), s)
                for _ in range(1000):
                    pass
                assert seen == []
        assert seen == [signal.SIGHUP, signal.SIGINT]
        seen.clear()
        # The first raises; the SIGTERM after it is not lost.
        try:
            with signals_deferred():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGTERM)
                for _ in range(1000):
                    pass
        except KeyboardInterrupt:
            pass
        for _ in range(1000):  # where the SIGTERM sent again runs
            pass
        assert seen == [signal.SIGINT, signal.SIGTERM]
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def _shared_pickle_checkpoint(path, data_pkl: bytes):
    """A torch zip checkpoint whose data.pkl is `data_pkl`, no storages."""
    buf = io.BytesIO()
    torch.save({"a": torch.zeros(1)}, buf)
    with (
        zipfile.ZipFile(io.BytesIO(buf.getvalue())) as src,
        zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as out,
    ):
        for info in src.infolist():
            if "/data/" not in info.filename:
                body = data_pkl if info.filename.endswith("data.pkl") else src.read(info)
                out.writestr(info.filename, body)


def test_torch_checkpoints_that_share_what_they_hold_stay_small(tmp_path):
    """A pickle refers to one object from many places for free: a state
    dict whose key was a tuple holding one tuple ten times, eight levels
    deep (972 bytes), was spelled out by str() (3.4 GB, a 522 MB traceback);
    ten levels of a dict holding one dict ten times stood for 10^10 names.
    Both are one line now, at once: keys are str or int, and the names
    built are held to a multiple of the file."""
    levels = 8
    tup = b"\x80\x02}" + b"(" * levels + b"X\x01\x00\x00\x00aq\x00" + b"h\x00" * 9 + b"t"
    for level in range(1, levels):
        tup += b"q" + bytes([level]) + (b"h" + bytes([level])) * 9 + b"t"
    _shared_pickle_checkpoint(tmp_path / "key.pt", tup + b"K\x00s.")
    r = run_cli(tmp_path / "key.pt", tmp_path / "out.hurray")
    assert_one_line_failure(r, contains="has a key of type tuple")
    nested = {"w": torch.ones(2)}
    for _ in range(10):
        nested = {str(k): nested for k in range(10)}
    torch.save(nested, tmp_path / "dicts.pt")
    assert (tmp_path / "dicts.pt").stat().st_size < 10_000
    r = run_cli(tmp_path / "dicts.pt", tmp_path / "out.hurray")
    assert_one_line_failure(r, contains="names far more entries than its size allows")
    assert not (tmp_path / "out.hurray").exists()
    # One tensor under two names (tied weights), and one dict under two,
    # convert as they did.
    tied = torch.ones(3)
    shared = {"w": torch.zeros(2)}
    torch.save({"embed": tied, "head": tied, "a": shared, "b": shared}, tmp_path / "tied.pt")
    r = run_cli(tmp_path / "tied.pt", tmp_path / "out.hurray")
    assert r.returncode == 0, r.stderr
    assert sorted(hurray.load(tmp_path / "out.hurray")) == ["a.w", "b.w", "embed", "head"]


def test_a_torch_checkpoint_with_a_short_record_is_refused(tmp_path):
    """torch.load(mmap=True) checks no record's size: a storage whose
    record was cut short ran on into the next records, and the conversion
    wrote those bytes as the tensor's, exit 0."""
    src, bad = tmp_path / "ok.pt", tmp_path / "short.pt"
    torch.save(
        {"a": torch.arange(24.0).reshape(4, 6), "b": torch.ones(3, dtype=torch.bfloat16)}, src
    )
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            zout.writestr(info, data[:10] if info.filename.endswith("/data/0") else data)
    r = run_cli(bad, tmp_path / "out.hurray")
    assert_one_line_failure(r, contains="record data/0 holds 10 bytes, and its storage needs 96")
    assert not (tmp_path / "out.hurray").exists()
    r = run_cli(src, tmp_path / "out.hurray")
    assert r.returncode == 0, r.stderr
    assert (
        hurray.load(tmp_path / "out.hurray")["a"].numpy().tolist()
        == np.arange(24.0).reshape(4, 6).tolist()
    )


def _storage_claiming_more(src, bad, pickle_edit=None, extra=None):
    """A copy of the zip checkpoint `src` whose storage of 4 elements claims
    64 (the record still holds 16 bytes)."""
    import pickletools

    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(bad, "w", zipfile.ZIP_STORED) as zout:
        pk = next(n for n in zin.namelist() if n.endswith("data.pkl"))
        data = zin.read(pk)
        if pickle_edit is not None:
            data = pickle_edit(data)
        out, last = bytearray(), 0
        for op, arg, pos in pickletools.genops(data):
            if op.name == "BININT1" and arg == 4:
                out += data[last:pos] + b"J" + (64).to_bytes(4, "little")
                last = pos + 2
        out += data[last:]
        for info in zin.infolist():
            zout.writestr(info, bytes(out) if info.filename == pk else zin.read(info.filename))
        if extra is not None:
            zout.writestr(pk.split("/")[0] + "/" + extra, b"")


@pytest.mark.parametrize("how", ["torch.cuda storage class", "a second data.pkl", "NEWOBJ"])
def test_a_short_record_the_scan_cannot_vouch_for_is_refused(tmp_path, how, monkeypatch):
    """The record check skipped a storage class spelled torch.cuda.FloatStorage,
    a zip with a second (empty) data.pkl, and a pickle its scan could not
    follow (a Parameter made by NEWOBJ); each went to the mapped load, which
    read the zip's headers and the next tensor as the storage's bytes, exit
    0. What the scan cannot vouch for now loads without mmap, and torch
    checks the record."""
    import copyreg

    if how != "torch.cuda storage class" and "asan" in os.environ.get("LD_PRELOAD", ""):
        # torch refuses these itself, with a C++ exception, and ASan preloaded
        # before libstdc++ cannot intercept __cxa_throw (make test-python-asan).
        pytest.skip("torch's C++ exceptions abort under a preloaded ASan runtime")
    src, bad = tmp_path / "ok.pt", tmp_path / "bad.pt"
    w = torch.arange(4, dtype=torch.float32)
    if how == "NEWOBJ":
        param = torch.nn.Parameter
        monkeypatch.setattr(
            param, "__reduce_ex__", lambda self, proto: (copyreg.__newobj__, (param, self.data))
        )
        w = param(w, requires_grad=False)
    torch.save({"w": w, "z": torch.full((256,), 7.0)}, src)
    monkeypatch.undo()
    edit = (
        (lambda d: d.replace(b"ctorch\nFloatStorage\n", b"ctorch.cuda\nFloatStorage\n", 1))
        if how == "torch.cuda storage class"
        else None
    )
    _storage_claiming_more(src, bad, edit, "junk/data.pkl" if how == "a second data.pkl" else None)
    r = run_cli(bad, tmp_path / "out.safetensors")
    assert_one_line_failure(r, contains="16 bytes")
    assert not (tmp_path / "out.safetensors").exists()
    r = run_cli(src, tmp_path / "out.safetensors")
    assert r.returncode == 0, r.stderr


def test_a_nested_tensor_is_refused_by_name(tmp_path):
    """A nested tensor reached .shape in the converter: RuntimeError, and the
    CLI's "internal error ... (please report it)"."""
    src = tmp_path / "nested.pt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "prototype stage"
        nested = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    torch.save({"n": nested, "w": torch.ones(3)}, src)
    r = run_cli(src, tmp_path / "out.hurray")
    assert_one_line_failure(r, contains="'n' is a nested tensor")
    with pytest.raises(hurray.ConversionError, match="nested tensor"):
        hurray.convert(src, tmp_path / "out.hurray", quiet=True)
    hurray.convert(src, tmp_path / "out.hurray", quiet=True, exclude=["n"])
    assert hurray.load(tmp_path / "out.hurray")["w"].numpy().tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize(
    "values, scanned", [("random bits", True), ("arange", True), ("random bits", False)]
)
def test_a_torch_checkpoint_with_compressed_records_converts_exactly(tmp_path, values, scanned):
    """torch.load(mmap=True) maps a record's bytes as they lie in the zip:
    a compressed record converted to its compressed bytes, exit 0 and an
    "exact" report (or, where it compressed well, was refused with torch's
    "storage that is not resizable"). torch.load without mmap inflates it."""
    t = (
        torch.from_numpy(
            np.random.default_rng(0).integers(0, 2**32, (64, 64), np.uint32).view(np.float32)
        )
        if values == "random bits"
        else torch.arange(4096, dtype=torch.float32)
    )
    src, deflated = tmp_path / "plain.pt", tmp_path / "deflated.pt"
    torch.save({"w": t}, src)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(deflated, "w") as zout:
        for info in zin.infolist():
            record = zipfile.ZipInfo(info.filename, info.date_time)
            if "/data/" in info.filename:
                record.compress_type = zipfile.ZIP_DEFLATED
            zout.writestr(record, zin.read(info.filename))
        if not scanned:  # a second data.pkl: the record scan gives up, torch does not
            zout.writestr("plain/x/data.pkl", b"junk")
    r = run_cli(deflated, tmp_path / "out.safetensors")
    assert r.returncode == 0, r.stderr
    got = st.load_file(tmp_path / "out.safetensors")["w"]
    assert torch.equal(got.view(torch.int32), t.view(torch.int32))


def test_sigterm_also_removes_the_temporary_file(tmp_path, hurray_source):
    _interrupt(tmp_path, hurray_source[0], "npz", "loop", sig=signal.SIGTERM)


@pytest.mark.slow
def test_sigint_while_hurray_save_runs(tmp_path):
    """A real SIGINT while the C writer runs on a 64 MiB conversion. With the
    writer's own signal checks (hurray.save aborts between buffers) the save
    stops early; without them it completes into the converter's temporary
    file, and the KeyboardInterrupt raised when it returns comes before the
    rename. Either way the old target survives."""
    rng = np.random.default_rng(1)
    src = tmp_path / "big.npz"
    # 256 MiB, so that the signal (sent once the child says "now") lands
    # while the writer still runs, even on a loaded machine.
    np.savez(src, **{f"t{i}": rng.standard_normal(4 << 20, dtype=np.float32) for i in range(16)})
    _interrupt(tmp_path, src, "hurray", "live", "--stats")


def test_every_target_is_fsynced_before_it_is_renamed(tmp_path, hurray_source, monkeypatch):
    events = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(
        os,
        "replace",
        lambda a, b, **kw: (
            events.append(("replace", os.path.basename(b))),
            real_replace(a, b, **kw),
        )[1],
    )
    for kind in ("hurray", "safetensors", "pt", "gguf", "npz"):
        events.clear()
        convert(hurray_source[0], tmp_path / f"o.{kind}", quiet=True)
        i = events.index(("replace", f"o.{kind}"))
        assert events[i - 1] == "fsync" and events[i + 1 :] == ["fsync"], (kind, events)
    assert listing(tmp_path) == [f"o.{k}" for k in ("gguf", "hurray", "npz", "pt", "safetensors")]


# ------------------------------------------------------------------ 5. one-line errors


def _write(path, data):
    path.write_bytes(data) if isinstance(data, bytes) else path.write_text(data)
    return path


def _npz_bytes(compressed=False):
    import io

    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, w=np.arange(4096, dtype=np.float32))
    return buf.getvalue()


def _flip_inside(data, needle_index):
    b = bytearray(data)
    b[needle_index] ^= 0xFF
    return bytes(b)


def _torch_bytes(obj):
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


class Evil:
    def __reduce__(self):
        return (print, ("this must never run",))


def _case(name, tmp_path):
    """(source, target, expected words in the one line, exit status)"""
    t = tmp_path
    index = "model.safetensors.index.json"
    npz = _npz_bytes()
    zipped = _npz_bytes(compressed=True)
    cases = {
        "bad json index": (lambda: _write(t / index, "{not json"), "not a safetensors index"),
        "index not an object": (lambda: _write(t / index, "[1, 2]"), "not a JSON object"),
        "index without weight_map": (
            lambda: _write(t / index, '{"metadata": {}}'),
            "no 'weight_map' key",
        ),
        "weight_map value not a name": (
            lambda: _write(t / index, '{"weight_map": {"w": 5}}'),
            "is not a file name: 5",
        ),
        "weight_map value with NUL": (
            lambda: _write(t / index, '{"weight_map": {"w": "a\\u0000b"}}'),
            "not a file inside its folder",
        ),
        "missing shard": (
            lambda: _write(t / index, '{"weight_map": {"w": "gone.safetensors"}}'),
            "gone.safetensors, which does not exist",
        ),
        "shard is a folder": (
            lambda: (
                (t / "dir.safetensors").mkdir(),
                _write(t / index, '{"weight_map": {"w": "dir.safetensors"}}'),
            )[1],
            "is not a regular file",
        ),
        "deeply nested index": (
            lambda: _write(t / index, "[" * 100000 + "]" * 100000),
            "not a safetensors index",
        ),
        "truncated npz": (lambda: _write(t / "x.npz", npz[: len(npz) // 2]), "cannot read"),
        "damaged npz member": (lambda: _write(t / "x.npz", _flip_inside(npz, 400)), "x.npz"),
        "damaged compressed npz": (lambda: _write(t / "x.npz", _flip_inside(zipped, 300)), "x.npz"),
        "npz member not an array": (
            lambda: _zip_with_text(t / "x.npz"),
            "member 'notes.txt' is not a .npy array",
        ),
        "truncated npy": (
            lambda: _write(t / "x.npy", _npy_bytes(np.ones(100))[:200]),
            "cannot read",
        ),
        "npy header garbage": (
            lambda: _write(t / "x.npy", b"\x93NUMPY\x01\x00\x10\x00{bad}" + b" " * 6),
            "cannot read",
        ),
        "pickle refused": (
            lambda: _write(t / "x.pt", _torch_bytes({"o": Evil()})),
            "weights_only=True",
        ),
        "truncated pt": (
            lambda: _write(t / "x.pt", _torch_bytes({"w": torch.ones(9)})[:100]),
            "x.pt",
        ),
        "gguf garbage": (lambda: _write(t / "x.gguf", b"GGUF" + b"\xff" * 60), "x.gguf"),
        "safetensors garbage": (
            lambda: _write(t / "x.safetensors", b"\x08" + b"\0" * 7 + b"{"),
            "x.safetensors",
        ),
        "hurray garbage": (lambda: _write(t / "x.hurray", b"not a hurray file" * 8), "cannot read"),
        "unknown source extension": (lambda: _write(t / "x.onnx", b"?"), "cannot tell the format"),
        "source is a fifo": (
            lambda: (os.mkfifo(t / "x.npz"), t / "x.npz")[1],
            "is not a regular file",
        ),
        "index in a folder is a fifo": (
            lambda: (os.mkfifo(t / index), t)[1],
            "is not a regular file",
        ),
    }
    make, words = cases[name]
    return make(), words


def _zip_with_text(path):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("w.npy", _npy_bytes(np.ones(2)))
        z.writestr("notes.txt", b"hello")
    return path


@pytest.mark.slow
@pytest.mark.parametrize(
    "case",
    [
        "bad json index",
        "index not an object",
        "index without weight_map",
        "weight_map value not a name",
        "weight_map value with NUL",
        "missing shard",
        "shard is a folder",
        "deeply nested index",
        "truncated npz",
        "damaged npz member",
        "damaged compressed npz",
        "npz member not an array",
        "truncated npy",
        "npy header garbage",
        "pickle refused",
        "truncated pt",
        "gguf garbage",
        "safetensors garbage",
        "hurray garbage",
        "unknown source extension",
        "source is a fifo",
        "index in a folder is a fifo",
    ],
)
def test_malformed_sources_give_one_line(tmp_path, case):
    if case == "truncated pt" and "asan" in os.environ.get("LD_PRELOAD", ""):
        # torch raises a C++ exception there, and ASan preloaded before
        # libstdc++ cannot intercept __cxa_throw (make test-python-asan).
        pytest.skip("torch's C++ exceptions abort under a preloaded ASan runtime")
    src, words = _case(case, tmp_path)
    before = listing(tmp_path)
    r = run_cli(src, tmp_path / "out.hurray", timeout=60)
    # A name whose format cannot be told is a usage error, as a target's is.
    status = 2 if case == "unknown source extension" else 1
    assert_one_line_failure(r, status=status, contains=words)
    assert listing(tmp_path) == before


def test_bad_targets_give_one_line(tmp_path):
    src = _write(tmp_path / "x.npz", _npz_bytes())
    r = run_cli(src, tmp_path / "nowhere" / "out.hurray")
    assert_one_line_failure(r, contains="cannot write into the folder")
    (tmp_path / "d.hurray").mkdir()
    r = run_cli(src, tmp_path / "d.hurray")
    assert_one_line_failure(r, contains="is a directory")
    assert (tmp_path / "d.hurray").is_dir() and os.listdir(tmp_path / "d.hurray") == []
    r = run_cli(src, tmp_path / "x.onnx")
    assert_one_line_failure(r, status=2, contains="cannot tell the format")
    (tmp_path / "file").write_bytes(b"")
    r = run_cli(src, tmp_path / "file" / "out.npz")
    assert_one_line_failure(r, contains="cannot write into the folder")
    assert listing(tmp_path) == ["d.hurray", "file", "x.npz"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder_gives_one_line(tmp_path):
    src = _write(tmp_path / "x.npz", _npz_bytes())
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        for target in ("out.hurray", "out.safetensors", "out.npz"):
            r = run_cli(src, ro / target)
            assert_one_line_failure(r, contains="Permission denied")
    finally:
        ro.chmod(0o755)
    assert os.listdir(ro) == []


def test_unwritable_folder_is_one_error_even_as_root(tmp_path, monkeypatch):
    src = _write(tmp_path / "x.npz", _npz_bytes())
    real_open = os.open

    def refusing(path, flags, *a, **k):
        if flags & os.O_EXCL:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *a, **k)

    monkeypatch.setattr(os, "open", refusing)
    for target in ("out.hurray", "out.safetensors", "out.npz", "out.gguf", "out.pt"):
        with pytest.raises(
            ConversionError,
            match=r"cannot write into the folder .*: "
            r"Permission denied$",
        ):
            convert(src, tmp_path / target, quiet=True)
    assert listing(tmp_path) == ["x.npz"]


# ------------------------------------------------- files that describe more than they hold


def _broadcast_hurray(path, n, shard=False):
    """A dense float32 tensor of n elements, all of them one stored element
    (stride 0): a file of a few hundred bytes."""
    from hurray._descriptor import Buffer, Shard

    extra = {"shard": Shard((n,), (0,))} if shard else {}
    d = hurray.Descriptor("float32", (n,), strides=(0,), buffers=[Buffer("data", 4, 4)], **extra)
    hurray.save(path, {"w": hurray.Tensor(d, [np.full(1, 2.5, np.float32).view(np.uint8)])})


@pytest.mark.parametrize("suffix", [".safetensors", ".npz", ".gguf", ".pt"])
def test_a_broadcast_tensor_is_not_written_out_past_the_output_limit(tmp_path, suffix):
    """A 250-byte file with a stride-0 tensor of 2**28 elements made convert
    write 1 GiB (2**33: allocate 32 GiB); to_dense() already refused it."""
    src = tmp_path / "b.hurray"
    _broadcast_hurray(src, 2**28)
    assert os.path.getsize(src) < 1000
    with pytest.raises(ConversionError, match="HURRAY_ERR_LIMIT"):
        convert(src, tmp_path / f"out{suffix}", quiet=True)
    assert not (tmp_path / f"out{suffix}").exists()
    # within the limit it is written out as ever
    _broadcast_hurray(src, 1000)
    convert(src, tmp_path / f"small{suffix}", quiet=True)


def test_load_sharded_holds_a_broadcast_piece_to_the_output_limit(tmp_path):
    _broadcast_hurray(tmp_path / "s.hurray", 2**28, shard=True)
    with pytest.raises(hurray.LimitError):
        hurray.load_sharded([tmp_path / "s.hurray"], "w")
    _broadcast_hurray(tmp_path / "s.hurray", 1000, shard=True)
    assert (hurray.load_sharded([tmp_path / "s.hurray"], "w") == 2.5).all()


def test_an_expanded_torch_tensor_is_not_made_contiguous_past_the_output_limit(tmp_path):
    src = tmp_path / "e.pt"
    torch.save({"w": torch.ones(1).expand(2**27)}, src)
    assert os.path.getsize(src) < 4000
    with pytest.raises(ConversionError, match="HURRAY_ERR_LIMIT"):
        convert(src, tmp_path / "e.hurray", quiet=True)
    torch.save({"w": torch.ones(1).expand(1000)}, src)
    convert(src, tmp_path / "e.hurray", quiet=True)
    assert (hurray.load(tmp_path / "e.hurray")["w"].numpy() == 1).all()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_npz_member_whose_header_claims_more_than_it_holds_is_refused(tmp_path, version):
    """numpy allocates what the header says before it reads: 236 bytes
    claimed 4 TiB (a bare MemoryError, not a ConversionError). A 3.0
    header (2.0 with UTF-8) escaped the check: "out of memory" for 4 TiB,
    and for less than the machine can map, an allocation of all of it."""
    import struct

    text = b"{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }"
    length = struct.pack("<H" if version == 1 else "<I", 0)
    text += b" " * (-(len(text) + 8 + len(length) + 1) % 64) + b"\n"
    length = struct.pack("<H" if version == 1 else "<I", len(text))
    member = b"\x93NUMPY" + bytes([version, 0]) + length + text + bytes(128)
    with zipfile.ZipFile(tmp_path / "h.npz", "w") as z:
        z.writestr("a.npy", member)
    with pytest.raises(ConversionError, match="header says 4398046511104 bytes"):
        convert(tmp_path / "h.npz", tmp_path / "h.hurray", quiet=True)


def test_messages_about_misplaced_or_mis_shaped_data_say_what_is_wrong(tmp_path):
    import struct

    from safetensors.numpy import save_file

    def s(x):
        return struct.pack("<Q", len(x)) + x

    # a GGUF whose first tensor is not at data offset 0 ("puts it at 00")
    body = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + s(b"a") + struct.pack("<I", 1)
    body += struct.pack("<Q", 8) + struct.pack("<I", 0) + struct.pack("<Q", 32)
    (tmp_path / "off.gguf").write_bytes(body + b"\0" * ((-len(body)) % 32) + b"\0" * 64)
    with pytest.raises(ConversionError, match="puts the first tensor at 0"):
        convert(tmp_path / "off.gguf", tmp_path / "off.hurray", quiet=True)
    # GPTQ with 36 outputs, which 4-bit zero points packed 8 to an int32
    # cannot hold ("has shape [4, 4], expected [4, 4]")
    d = tmp_path / "gptq36"
    d.mkdir()
    (d / "config.json").write_text(
        json.dumps({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 16}})
    )
    save_file(
        {
            "l.qweight": np.zeros((8, 36), np.int32),
            "l.qzeros": np.zeros((4, 4), np.int32),
            "l.scales": np.ones((4, 36), np.float16),
        },
        str(d / "model.safetensors"),
    )
    with pytest.raises(ConversionError, match="not a multiple of 8"):
        convert(d, tmp_path / "gptq36.hurray", quiet=True)


def test_an_empty_tensor_with_a_dimension_numpy_cannot_index_is_a_hurray_error(tmp_path):
    import struct

    h = json.dumps({"a": {"dtype": "F32", "shape": [0, 2**63 - 1], "data_offsets": [0, 0]}})
    src = tmp_path / "zh.safetensors"
    src.write_bytes(struct.pack("<Q", len(h)) + h.encode())
    convert(src, tmp_path / "zh.hurray", quiet=True)
    with pytest.raises(hurray.UnsupportedError, match="numpy cannot hold"):
        hurray.open(tmp_path / "zh.hurray")["a"].numpy()


# --------------------------------------- session 41: the command as attacked


def test_report_escapes_names_keys_and_paths(tmp_path):
    """The report printed names and metadata keys as they were: escape
    sequences reached the terminal."""
    src = tmp_path / "h.hurray"
    hurray.save(
        src,
        {"esc\x1b[31mRED": np.ones(1, np.uint8), "nl\nname": np.ones(1, np.uint8)},
        {"\x1b[31mA\nkey": "v"},
    )
    r = run_cli(src, tmp_path / "h.npz")
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout + r.stderr
    assert "esc\\x1b[31mRED" in r.stdout and "nl\\nname" in r.stdout
    assert "\\x1b[31mA\\nkey" in r.stdout  # the note on the key not carried


@pytest.mark.parametrize("content", [b"", b"\x93NUMPY\x01\x00\x10\x00{'descr': '<f4',"])
def test_empty_or_cut_npy_is_a_one_line_failure(tmp_path, content):
    for name in ("e.npy", "e.npz"):
        (tmp_path / name).write_bytes(content)
        assert_one_line_failure(
            run_cli(tmp_path / name, tmp_path / "x.hurray"), contains="cannot read"
        )


def test_pt_target_takes_empty_tensors_of_several_dtypes(tmp_path):
    """torch.save saw numpy's shared empty allocation as one storage of two
    dtypes and refused the whole file."""
    torch = pytest.importorskip("torch")
    src = tmp_path / "e.hurray"
    hurray.save(
        src, {"a": np.zeros(0, np.float32), "b": np.zeros((0, 3), np.int64), "c": np.ones(1, bool)}
    )
    r = run_cli(src, tmp_path / "e.pt", "-q")
    assert r.returncode == 0, r.stderr
    back = torch.load(tmp_path / "e.pt", weights_only=True)
    assert back["b"].shape == (0, 3) and back["b"].dtype == torch.int64 and back["c"].item()


def test_a_target_that_is_not_a_file_is_refused(tmp_path):
    """An .npz or .pt target that was a FIFO was replaced by a file."""
    fifo = tmp_path / "f.npz"
    os.mkfifo(fifo)
    src = tmp_path / "a.hurray"
    hurray.save(src, {"a": np.ones(2)})
    assert_one_line_failure(run_cli(src, fifo), contains="not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_closed_stdout_is_a_report_failure_not_an_internal_error(tmp_path):
    """Python starts with sys.stdout None when fd 1 is closed (>&-): the
    report's flush raised AttributeError, "internal error ... (please
    report it)". -q prints nothing and succeeds."""
    src = tmp_path / "a.npz"
    np.savez(src, a=np.ones(3))
    for quiet, code in (([], 1), (["-q"], 0)):
        r = subprocess.run(
            [sys.executable, "-m", "hurray", "convert", str(src), str(tmp_path / "a.hurray")]
            + quiet,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            preexec_fn=lambda: os.close(1),
        )
        assert r.returncode == code, r.stderr
        assert "internal error" not in r.stderr
        if code:  # the line the C command prints, not OSError's "[Errno 9] ..."
            assert r.stderr.startswith(
                f"hurray convert: {tmp_path / 'a.hurray'} was written, but printing its report "
                "failed: standard output is closed"
            ), r.stderr
        assert (tmp_path / "a.hurray").exists()


@pytest.mark.skipif(
    not os.path.exists("/dev/full") or not stat.S_ISCHR(os.stat("/dev/full").st_mode),
    reason="/dev/full is not the full device here (opening it would make a file)",
)
def test_report_write_failures_after_the_target_is_written(tmp_path):
    src = tmp_path / "a.hurray"
    # A report larger than a pipe's buffer (64 KiB): the write that fails
    # cannot have finished before the reader goes away.
    hurray.save(src, {f"t{i}": np.ones(4) for i in range(2000)})
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", "hurray", "convert", str(src), str(tmp_path / "a.npz")],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    assert r.returncode == 1 and r.stderr.startswith(
        f"hurray convert: {tmp_path / 'a.npz'} was written, but printing its report failed"
    ), r.stderr
    assert (tmp_path / "a.npz").exists()
    # A reader that goes away (| head) ends it quietly, as SIGPIPE would.
    p = subprocess.Popen(
        [sys.executable, "-m", "hurray", "convert", str(src), str(tmp_path / "b.npz")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    p.stdout.read(10)
    p.stdout.close()
    assert p.wait(timeout=120) == 141
    assert p.stderr.read() == b""


@pytest.mark.parametrize("flag, value", [("--threads", "100000"), ("--block-size", "9" * 30)])
def test_numbers_out_of_range_are_usage_errors(tmp_path, flag, value):
    src = tmp_path / "a.hurray"
    hurray.save(src, {"a": np.ones(2, np.float32)})
    r = run_cli(src, tmp_path / "b.hurray", flag, value)
    assert r.returncode == 2 and "internal error" not in r.stderr, r.stderr


def test_a_name_with_a_lone_surrogate_converts_and_is_shown(tmp_path):
    """The escaping added to the report and progress bar raised
    UnicodeEncodeError on a torch key holding a lone surrogate, so the
    conversion failed before writing."""
    torch = pytest.importorskip("torch")
    src = tmp_path / "s.pt"
    torch.save({"w\ud800x": torch.ones(2)}, src)
    r = run_cli(src, tmp_path / "t.pt")
    assert r.returncode == 0, r.stderr
    assert "w\\xed\\xa0\\x80x" in r.stdout
    # A .hurray file holds UTF-8 names only: a one-line refusal, not an internal error.
    assert_one_line_failure(run_cli(src, tmp_path / "s.hurray"), contains="holds a lone surrogate")


# ------------------------------------------------------------------ .npz names ending in .npy


def test_npz_array_named_like_another_member_reads_its_own_member(tmp_path):
    """Members a.npy (array 'a') and a.npy.npy (array 'a.npy'): np.load
    looks 'a.npy' up as a member first, so both arrays got a's values."""
    src = tmp_path / "alias.npz"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("a.npy", _npy_bytes(np.array([1.0, 2.0, 3.0], np.float32)))
        z.writestr("a.npy.npy", _npy_bytes(np.array([9.0, 9.0], np.float64)))
    convert(src, tmp_path / "out.hurray", quiet=True)
    back = hurray.load(tmp_path / "out.hurray")
    assert back["a"].numpy().tolist() == [1.0, 2.0, 3.0]
    assert back["a.npy"].numpy().dtype == np.float64
    assert back["a.npy"].numpy().tolist() == [9.0, 9.0]


def test_npz_member_without_npy_ending_is_still_read(tmp_path):
    src = tmp_path / "bare.npz"
    with zipfile.ZipFile(src, "w") as z:
        z.writestr("w", _npy_bytes(np.arange(4, dtype=np.int16)))
    convert(src, tmp_path / "out.hurray", quiet=True)
    assert hurray.load(tmp_path / "out.hurray")["w"].numpy().tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("order", [("a", "a.npy"), ("a.npy", "a")])
def test_npz_target_refuses_names_that_read_back_as_one(tmp_path, order):
    """Tensor 'a' is member a.npy, which np.load also returns for tensor
    'a.npy' (member a.npy.npy): the round trip swapped values silently."""
    src = tmp_path / "src.hurray"
    hurray.save(src, {n: np.full(2 + i, i, np.float32) for i, n in enumerate(order)})
    dst = tmp_path / "out.npz"
    with pytest.raises(
        ConversionError, match="tensors 'a' and 'a.npy' cannot both go into an .npz"
    ):
        convert(src, dst, quiet=True)
    assert listing(tmp_path) == ["src.hurray"]


def test_names_holding_nul_are_refused_where_the_target_cannot_hold_them(tmp_path):
    """zipfile cuts member names at NUL: 'w\\0first' and 'w\\0second' both
    became member 'w', one lost with a mere warning; hurray.save's
    ValueError was an internal error. A .pt target keeps such names."""
    src = tmp_path / "nul.pt"
    torch.save({"w\0first": torch.ones(2), "w\0second": torch.zeros(3)}, src)
    r = run_cli(src, tmp_path / "out.npz")
    assert_one_line_failure(r, contains="holds a NUL character")
    assert "out.npz" in r.stderr
    r = run_cli(src, tmp_path / "out.hurray")
    assert_one_line_failure(r, contains="NUL character")
    assert "out.hurray" in r.stderr
    assert listing(tmp_path) == ["nul.pt"]
    convert(src, tmp_path / "out.pt", quiet=True)
    assert set(torch.load(tmp_path / "out.pt", weights_only=True)) == {"w\0first", "w\0second"}


def test_an_npz_archive_named_npy_is_a_one_line_failure(tmp_path):
    """np.load returns an NpzFile for a zip, whatever the name: it reached
    the converter as an array ('internal error: AttributeError')."""
    np.savez(tmp_path / "arch.npz", a=np.arange(4.0))
    os.rename(tmp_path / "arch.npz", tmp_path / "arch.npy")
    r = run_cli(tmp_path / "arch.npy", tmp_path / "x.hurray")
    assert_one_line_failure(r, contains="is an .npz archive, not a .npy array")
    assert listing(tmp_path) == ["arch.npy"]


# ------------------------------------------------------------------ JSON metadata the converter owns

_DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    "key, value, target, match",
    [
        ("convert.source_dtypes", _DEEP, "x.npz", "'convert.source_dtypes' is not valid JSON"),
        ("convert.source_dtypes", "[1]", "x.npz", "'convert.source_dtypes' is not a JSON object"),
        ("convert.source_dtypes", '"float16"', "x.npz", "is not a JSON object"),
        ("convert.source_dtypes", '{"w": 5}', "x.npz", "gives tensor 'w' the dtype 5"),
        ("zoo.tensors", _DEEP, "x.safetensors", "'zoo.tensors' is not valid JSON"),
        ("zoo.tensors", '{"w": []}', "x.safetensors", "tensor 'w': not an object with a list"),
        ("zoo.tensors", '{"w": {"members": [5]}}', "x.npz", "tensor 'w': member 5 is not"),
        # restoring no member dropped the tensor, exit 0
        ("zoo.tensors", '{"w": {"family": "gptq", "members": []}}', "x.npz", "lists no members"),
        ("zoo.tensors", _DEEP, "x.hurray", None),  # kept as it is: the record is not read
        ("zoo.weight_map", _DEEP, "outdir/", "'zoo.weight_map' is not valid JSON"),
        ("zoo.weight_map", '{"w": 5}', "outdir/", "gives tensor 'w' the file 5"),
        ("gguf.__tensors__", _DEEP, "x.gguf", "'gguf.__tensors__' is not valid JSON"),
        ("gguf.__tensors__", "[[1]]", "x.gguf", "is not a JSON array of tensor names"),
        # not the converter's to judge: dropped from the index written
        ("safetensors_index.metadata", _DEEP, "outdir/", None),
    ],
)
def test_owned_metadata_that_is_not_the_json_it_should_be_is_one_error(
    tmp_path, key, value, target, match
):
    """Nested past the recursion limit, or of another type: RecursionError
    and AttributeError came out as internal errors."""
    src = tmp_path / "m.hurray"
    meta = {key: value}
    if key == "safetensors_index.metadata":  # read only when an index is written
        meta["zoo.index"] = "model.safetensors.index.json"
    hurray.save(src, {"w": np.ones(4, np.float32)}, meta)
    dst = f"{tmp_path}/{target}"
    # --include: a .hurray or .safetensors target would take the native C path
    r = run_cli(src, dst, "-q", "--include", "w")
    if match is None:
        assert r.returncode == 0, r.stderr
        return
    assert_one_line_failure(r, contains=match)
    assert (str(src) if target != "outdir/" else dst.rstrip("/")) in r.stderr
    assert listing(tmp_path) == ["m.hurray"]


@pytest.mark.parametrize(
    "value, match", [(_DEEP, "is not valid JSON: nested too deeply"), ("[1]", "not a JSON object")]
)
def test_a_safetensors_quantization_key_that_is_not_a_json_object_is_one_error(
    tmp_path, value, match
):
    from safetensors.numpy import save_file

    src = tmp_path / "q.safetensors"
    save_file({"w": np.ones(4, np.float32)}, str(src), metadata={"hurray.w.quantization": value})
    with pytest.raises(ConversionError, match=match) as info:
        convert(src, tmp_path / "q.npz", quiet=True)
    assert str(info.value).startswith(f"{src}: metadata 'hurray.w.quantization' (tensor 'w')")
    assert listing(tmp_path) == ["q.safetensors"]


# ------------------------------------------------------------------ --keep-scales read back


def _keep_scales_export(tmp_path, t):
    import safetensors
    import safetensors.numpy as stn

    src, out = tmp_path / "q.hurray", tmp_path / "q.safetensors"
    hurray.save(src, {"w": t})
    convert(src, out, keep_scales=True, quiet=True)
    with safetensors.safe_open(out, "np") as f:
        return stn.load_file(out), f.metadata()


_X = np.random.default_rng(0).normal(size=(4, 64)).astype(np.float32)


@pytest.mark.parametrize(
    "scheme, kw, part, edit, message",
    [
        ("q4_0", {}, "w", lambda a: a.__setitem__((0, 0), 0x1F), "element 0 is 0x1f"),
        ("nf4", {}, "w", lambda a: a.__setitem__((0, 3), 0xFF), "element 3 is 0xff"),
        ("mxfp4", {}, "w", lambda a: a.__setitem__((1, 0), 0x10), "element 64 is 0x10"),
        (
            "per_channel",
            {"dtype": "int4"},
            "w",
            lambda a: a.__setitem__((0, 0), 0xF8),
            "element 0 is 0xf8",
        ),
        (
            "block_affine",
            {"dtype": "uint4"},
            "w.zero_points",
            lambda a: a.__setitem__((0, 0), 200),
            "element 0 is 0xc8",
        ),
    ],
)
def test_keep_scales_codes_with_high_bits_set_are_refused(
    tmp_path, scheme, kw, part, edit, message
):
    """A sub-byte code is kept one a byte, in its low bits; on the way back
    the byte was packed as it was, its high bits dropped: 0x1F read as code
    15 and a zero point of 200 as 8, with no error."""
    import safetensors.numpy as stn

    parts, meta = _keep_scales_export(tmp_path, hurray.quantize(_X, scheme, **kw))
    edit(parts[part])
    stn.save_file(parts, tmp_path / "bad.safetensors", metadata=meta)
    with pytest.raises(ConversionError, match=f"'{part}': {message}"):
        convert(tmp_path / "bad.safetensors", tmp_path / "bad.hurray", quiet=True)
    assert not (tmp_path / "bad.hurray").exists()


def test_keep_scales_parts_of_another_dtype_or_shape_are_refused(tmp_path):
    """Only byte counts were compared: Q8_0 codes given as int16 [4, 32] and
    float16 [4, 2] scales as float32 [2, 2] came back as zeros and -512."""
    import safetensors.numpy as stn

    parts, meta = _keep_scales_export(tmp_path, hurray.quantize(_X, "q8_0"))
    cases = {
        "w": (
            parts["w"].view(np.int16),
            "'w' is int16 [4, 32]; the descriptor in the metadata makes it int8 [4, 64]",
        ),
        "w.scales": (
            parts["w.scales"].view(np.float32).reshape(2, 2),
            "'w.scales' is float32 [2, 2]; the descriptor in the metadata makes it float16 [4, 2]",
        ),
    }
    for name, (array, message) in cases.items():
        stn.save_file({**parts, name: array}, tmp_path / "bad.safetensors", metadata=meta)
        with pytest.raises(ConversionError, match=re.escape(message)):
            convert(tmp_path / "bad.safetensors", tmp_path / "bad.hurray", quiet=True)
    stn.save_file(parts, tmp_path / "good.safetensors", metadata=meta)
    convert(tmp_path / "good.safetensors", tmp_path / "good.hurray", quiet=True)
    got = hurray.load(tmp_path / "good.hurray")["w"]
    np.testing.assert_array_equal(got.dequantize(), hurray.quantize(_X, "q8_0").dequantize())


# ------------------------------------------------------------------ the replaced file's mode


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".npy", ".hurray", ".safetensors"])
def test_a_replaced_target_keeps_its_permission_bits(tmp_path, suffix, monkeypatch):
    """The temporary file got 0666 less the umask, so a chmod 600 target
    came back 644: readable by everyone; and while it was written, its new
    bytes were readable by everyone too."""
    from hurray.convert._target import _FileTarget

    modes = []
    publish = _FileTarget.publish

    def watched(self):
        modes.append(stat.S_IMODE(os.stat(self.tmp).st_mode))
        publish(self)

    monkeypatch.setattr(_FileTarget, "publish", watched)
    src = tmp_path / "src.hurray"
    hurray.save(src, {"w": np.ones(4, np.float32)})
    dst = tmp_path / f"t{suffix}"
    dst.write_text("secret")
    os.chmod(dst, 0o600)
    convert(src, dst, quiet=True)
    assert stat.S_IMODE(os.stat(dst).st_mode) == 0o600
    assert modes and all(m & 0o077 == 0 for m in modes), [oct(m) for m in modes]
    assert listing(tmp_path) == ["src.hurray", f"t{suffix}"]


def test_new_files_get_0666_less_the_umask_in_every_format(tmp_path):
    """hurray.save and a .hurray target gave 0644 less the umask while the
    other targets (and cp, numpy.save, torch.save) gave 0666 less it: under
    a group's 002 umask the group could not replace a .hurray file. The
    umask is the process's, so this runs in a child."""
    script = textwrap.dedent(
        """
        import os, stat, sys
        import numpy as np
        import hurray
        from hurray.convert import convert
        os.umask(0o002)
        out = sys.argv[1]
        src = os.path.join(out, "saved.hurray")
        hurray.save(src, {"w": np.ones(4, np.float32)})
        for suffix in (".hurray", ".safetensors", ".npz", ".pt", ".gguf"):
            convert(src, os.path.join(out, "t" + suffix), quiet=True)
        for name in sorted(os.listdir(out)):
            print(name, oct(stat.S_IMODE(os.stat(os.path.join(out, name)).st_mode)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    modes = dict(line.split() for line in done.stdout.splitlines())
    assert len(modes) == 6 and set(modes.values()) == {"0o664"}, modes


def _can_hide_proc() -> bool:
    try:
        r = subprocess.run(
            ["unshare", "-m", "sh", "-c", "mount -t tmpfs none /proc"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def test_without_proc_new_files_still_get_0666_less_the_umask(tmp_path):
    """Without /proc (a chroot, a minimal sandbox) the C writer makes a
    named temporary file, and took the umask for it from /proc/self/status,
    assuming 022 when that was missing: under umask 077 hurray.save and
    the native safetensors target made world-readable 0644 files. Runs in
    a mount namespace with /proc hidden; needs root (unshare -m)."""
    if not _can_hide_proc():
        pytest.skip("unshare -m with a tmpfs over /proc is not allowed here")
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        pytest.skip("the child would run under ASan, which cannot work without /proc")
    script = (
        "import os, stat, sys\n"
        "import numpy as np, hurray\n"
        "assert not os.path.exists('/proc/self/fd')\n"
        "out = sys.argv[1]\n"
        "src = os.path.join(out, 'saved.hurray')\n"
        "hurray.save(src, {'w': np.ones(4, np.float32)})\n"
        "hurray.convert(src, os.path.join(out, 't.safetensors'), quiet=True)\n"
        "for name in sorted(os.listdir(out)):\n"
        "    print(name, oct(stat.S_IMODE(os.stat(os.path.join(out, name)).st_mode)))\n"
    )
    done = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            'mount -t tmpfs none /proc && umask 077 && exec "$0" -c "$1" "$2"',
            sys.executable,
            script,
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modes = dict(line.split() for line in done.stdout.splitlines())
    assert modes == {"saved.hurray": "0o600", "t.safetensors": "0o600"}, modes


def test_a_read_only_target_is_replaced_by_a_user_who_cannot_write_it(tmp_path, monkeypatch):
    """A replaced file's mode went onto the temporary file when it was
    made, and the .npz, .npy and .pt writers open that file again by name:
    for anyone but root, converting over a 0444 target failed with EACCES.
    The mode is now applied when the file is published. The tests may run
    as root, who writes any file: opening a file without a write bit for
    writing is refused here as it is for everyone else."""
    real_open, real_os_open = builtins.open, os.open

    def refused(path, writing):
        if writing and isinstance(path, (str, bytes, os.PathLike)) and os.path.exists(path):
            if not os.stat(path).st_mode & 0o222:
                raise PermissionError(errno.EACCES, "Permission denied (as a user)", path)

    def user_open(file, mode="r", *args, **kwargs):
        refused(file, any(c in mode for c in "wa+"))
        return real_open(file, mode, *args, **kwargs)

    def user_os_open(path, flags, *args, **kwargs):
        refused(path, flags & (os.O_WRONLY | os.O_RDWR))
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", user_open)
    monkeypatch.setattr(io, "open", user_open)
    monkeypatch.setattr(os, "open", user_os_open)
    src = tmp_path / "src.hurray"
    hurray.save(src, {"w": np.ones(4, np.float32)})
    for suffix in (".npz", ".npy", ".pt", ".hurray", ".safetensors"):
        dst = tmp_path / f"t{suffix}"
        convert(src, dst, quiet=True)
        os.chmod(dst, 0o444)
        convert(src, dst, quiet=True)
        assert stat.S_IMODE(os.stat(dst).st_mode) == 0o444, suffix


def test_a_folder_target_keeps_the_permission_bits_of_the_files_it_replaces(tmp_path):
    src = tmp_path / "src.hurray"
    hurray.save(src, {"w": np.ones(4, np.float32)}, {"zoo.config.json": "{}"})
    out = tmp_path / "out"
    out.mkdir()
    for name, mode in (("model.safetensors", 0o600), ("config.json", 0o640)):
        (out / name).write_text("old")
        os.chmod(out / name, mode)
    convert(src, f"{out}/", quiet=True)
    assert stat.S_IMODE(os.stat(out / "model.safetensors").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(out / "config.json").st_mode) == 0o640
    assert (out / "config.json").read_text() == "{}"


# ------------------------------------------------------------------ the temporary file


@pytest.mark.parametrize("change", ["renamed", "replaced", "chdir"])
@pytest.mark.parametrize("kind", ["npz", "safetensors", "hurray", "gguf", "pt", "npy"])
def test_a_folder_changed_mid_conversion_gets_the_whole_file(tmp_path, kind, change, monkeypatch):
    """The temporary file was renamed and removed by path: with its folder
    renamed meanwhile, both failed and the hidden file stayed in the moved
    folder. Holding the folder open, but letting the writer libraries
    write by path, was worse: with the folder replaced (or the working
    directory changed, for a relative target) they wrote elsewhere, and an
    empty placeholder was published as the target. The writers now reach
    the file through the held folder too: the complete file lands there,
    and nothing else is left anywhere."""
    from hurray.convert import _driver

    src = tmp_path / "src.hurray"
    hurray.save(src, {"w": np.arange(6, dtype=np.float32)})
    out, moved = tmp_path / "out", tmp_path / "moved"
    out.mkdir()
    closing_notes = _driver._closing_notes

    def change_first(*args, **kw):
        if change == "chdir":
            os.chdir(tmp_path)
        else:
            os.rename(out, moved)
            if change == "replaced":
                out.mkdir()
        return closing_notes(*args, **kw)

    monkeypatch.chdir(out)
    monkeypatch.setattr(_driver, "_closing_notes", change_first)
    convert(src, f"t.{kind}" if change == "chdir" else out / f"t.{kind}", quiet=True)
    monkeypatch.undo()
    held = out if change == "chdir" else moved
    assert listing(held) == [f"t.{kind}"]
    if change == "replaced":
        assert listing(out) == []
    folders = {"renamed": ["moved"], "replaced": ["moved", "out"], "chdir": ["out"]}[change]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["src.hurray"] + folders)
    if kind != "pt":
        convert(held / f"t.{kind}", tmp_path / "back.hurray", quiet=True)
        back = hurray.load(tmp_path / "back.hurray")
        np.testing.assert_array_equal(
            next(iter(back.values())).numpy(), np.arange(6, dtype=np.float32)
        )


def test_a_failing_close_of_the_new_temporary_file_leaves_nothing(tmp_path, monkeypatch):
    """The file was made but self.tmp not yet set, so abort() left it
    behind, and the message was a bare '[Errno 28] No space left on device'."""
    src = tmp_path / "src.hurray"
    hurray.save(src, {"w": np.ones(4, np.float32)})
    out = tmp_path / "out"
    out.mkdir()
    real_close = os.close
    failed = []

    def close(fd):
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            where = ""
        real_close(fd)
        if where.startswith(str(out)) and not failed:
            failed.append(where)
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "close", close)
    with pytest.raises(ConversionError) as info:
        convert(src, out / "t.pt", quiet=True)
    monkeypatch.undo()
    assert failed, "the fault was not reached"
    assert str(info.value) == f"cannot write into the folder {out}: No space left on device"
    assert listing(out) == []


@pytest.mark.parametrize("suffix", [".npz", ".pt", ".hurray", ".safetensors", "/"])
def test_a_target_name_of_255_bytes_is_written(tmp_path, suffix):
    """The temporary name added some 30 bytes to the target's: a legal name
    of 240-255 bytes failed with 'File name too long'."""
    src = tmp_path / "src.hurray"
    hurray.save(src, {"w": np.ones(4, np.float32)})
    stem = "é" * ((255 - len(suffix.rstrip("/"))) // 2) + "m" * ((255 - len(suffix)) % 2)
    dst = f"{tmp_path}/{stem}{suffix}"
    assert len(os.fsencode(os.path.basename(dst.rstrip("/")))) >= 254
    convert(src, dst, quiet=True)
    assert listing(tmp_path) == sorted(["src.hurray", os.path.basename(dst.rstrip("/"))])
    if suffix == "/":  # again, into the folder that is there now
        convert(src, dst, quiet=True)
        assert listing(dst) == ["model.safetensors"]


def test_temporary_names_are_cut_between_characters():
    import sys

    short_name = sys.modules["hurray.convert._target"].short_name
    name = "a" + "é" * 200
    cut = short_name(name)
    assert name.startswith(cut) and len(os.fsencode(cut)) == 99  # not 100: é is 2 bytes
    assert short_name("plain") == "plain"


# ------------------------------------------------------------------ file-system failures are OSError


def _fs_case(tmp_path, case):
    np.save(tmp_path / "a.npy", np.ones(3, np.float32))
    hurray.save(tmp_path / "a.hurray", {"w": np.ones(3, np.float32)})
    (tmp_path / "file").write_text("x")
    return {
        "missing .npy": (tmp_path / "missing.npy", tmp_path / "x.hurray", FileNotFoundError),
        "missing .hurray": (tmp_path / "missing.hurray", tmp_path / "x.npz", FileNotFoundError),
        "no target folder": (tmp_path / "a.npy", tmp_path / "no" / "x.npz", FileNotFoundError),
        "folder is a file": (tmp_path / "a.hurray", tmp_path / "file" / "x.pt", NotADirectoryError),
        "target is a folder": (tmp_path / "a.hurray", tmp_path / "d.npy", IsADirectoryError),
    }[case]


@pytest.mark.parametrize(
    "case",
    [
        "missing .npy",
        "missing .hurray",
        "no target folder",
        "folder is a file",
        "target is a folder",
    ],
)
def test_file_system_failures_are_oserrors_and_conversion_errors(tmp_path, case):
    """They were plain ConversionErrors: `except FileNotFoundError` (or
    OSError) missed a missing source, unlike hurray.open's."""
    (tmp_path / "d.npy").mkdir()
    src, dst, builtin = _fs_case(tmp_path, case)
    with pytest.raises(hurray.ConversionIOError) as info:
        convert(src, f"{dst}", quiet=True)
    e = info.value
    assert isinstance(e, builtin) and isinstance(e, hurray.ConversionError)
    assert isinstance(e, hurray.HurrayError) and type(e) is type(info.value)
    assert (
        e.errno
        == {
            FileNotFoundError: 2,
            NotADirectoryError: 20,
            IsADirectoryError: 21,
        }[builtin]
    )
    assert e.strerror == os.strerror(e.errno) and e.filename
    assert "Errno" not in str(e) and len(str(e).splitlines()) == 1
    r = run_cli(src, dst)
    assert_one_line_failure(r, contains=str(e).split(":")[0])
    assert "d.npy" in listing(tmp_path)  # nothing else written, no temporary file
    assert not any(n.startswith(".") for n in listing(tmp_path))


def test_conversion_io_error_classes_are_made_once_and_exported(tmp_path):
    from hurray.convert import ConversionIOError

    assert ConversionIOError is hurray.ConversionIOError
    assert issubclass(ConversionIOError, OSError)
    assert issubclass(ConversionIOError, hurray.ConversionError)
    classes = set()
    for _ in range(2):
        with pytest.raises(FileNotFoundError) as info:
            convert(tmp_path / "missing.npz", tmp_path / "x.hurray", quiet=True)
        classes.add(type(info.value))
    assert len(classes) == 1
    assert str(info.value) == f"{tmp_path / 'missing.npz'}: no such file or directory"


def test_a_full_disk_is_an_oserror_naming_the_target(tmp_path, monkeypatch):
    """ENOSPC from a writer came out as a plain ConversionError:
    '[Errno 28] No space left on device', with no path."""
    src = tmp_path / "a.hurray"
    hurray.save(src, {"w": np.ones(3, np.float32)})

    def full(fp, *args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array", full)
    for dst in (tmp_path / "x.npy", tmp_path / "x.npz"):
        with pytest.raises(OSError) as info:
            convert(src, dst, quiet=True)
        assert isinstance(info.value, hurray.ConversionIOError) and info.value.errno == 28
        assert str(info.value) == f"writing {dst}: No space left on device"
        assert info.value.filename == str(dst)
    assert listing(tmp_path) == ["a.hurray"]


def test_a_huge_gguf_alignment_is_held_to_the_output_limit(tmp_path):
    """general.alignment comes from the source's metadata: 2^30 made a
    677-byte .hurray into a 3 GiB .gguf of padding. Now the padded data is
    held to the output limit (64 times the data, or 64 MiB); 4096 passes."""
    from hurray.convert import ConversionError, convert

    for alignment, ok in ((1 << 30, False), (4096, True)):
        src, dst = tmp_path / f"a{alignment}.hurray", tmp_path / f"a{alignment}.gguf"
        hurray.save(
            src,
            {f"t{i}": np.ones(8, np.float32) for i in range(3)},
            {
                "gguf.general.alignment": alignment,
                "gguf.__types__": json.dumps({"general.alignment": "UINT32"}),
            },
        )
        if ok:
            convert(src, dst, quiet=True)
            assert dst.stat().st_size < 64 << 10
            continue
        with pytest.raises(ConversionError, match="general.alignment 1073741824"):
            convert(src, dst, quiet=True)
        assert not dst.exists()


def test_messages_say_what_is_wrong(tmp_path):
    """A safetensors name holding NUL was called "not valid UTF-8"; an
    alignment past 32 bits was reported as "alignment 3" (the value C was
    handed to make it fail)."""
    from hurray.convert import ConversionError, convert

    header = b'{"a\\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    header += b" " * (-len(header) % 8)
    src = tmp_path / "nul.safetensors"
    src.write_bytes(len(header).to_bytes(8, "little") + header + b"\x01")
    with pytest.raises(ConversionError, match="holds a NUL"):
        convert(src, tmp_path / "nul.hurray", quiet=True)
    with pytest.raises(OverflowError, match="alignment 1099511627776"):
        hurray.Descriptor("float32", (4,), buffers=[hurray.Buffer("data", 16, 1 << 40)])


def _installed_command(*args):
    """The pip-installed command's convert (the C converter); skips where it
    has no C program (the ASan run)."""
    command = os.path.join(os.path.dirname(sys.executable), "hurray")
    r = subprocess.run(
        [command, "convert", *map(str, args)], capture_output=True, text=True, timeout=60
    )
    if r.returncode == 127 or "has no hurray package" in r.stderr:
        pytest.skip("the pip-installed command has no C program here (the ASan run)")
    return r


def _installed_convert(*args):
    """_installed_command, asserted to succeed."""
    r = _installed_command(*args)
    assert r.returncode == 0, r.stderr
    return r


def test_the_native_converter_checks_chunk_checksums_as_verify_does(tmp_path):
    """A buffer with chunk checksums (format 1.1) is judged by them (spec
    7.1), but the C converter to safetensors and GGUF checked its whole-
    buffer checksum: a damaged chunk under a right record converted, exit
    0, and a wrong record over right chunks was refused, the opposite of
    `hurray verify` and of the Python converter."""
    from _file_edits import buffer_records_at, reseal, rewrite_buffer

    chunk = 4 << 20
    big = np.random.default_rng(3).integers(-128, 128, 2 * chunk + 77, dtype=np.int8)
    src = tmp_path / "chunks.hurray"
    hurray.save(src, {"big": big})
    whole = src.read_bytes()
    damaged = big.copy()
    damaged[chunk + 100] ^= 1
    blob = bytearray(whole)
    rewrite_buffer(blob, "big", 0, damaged.tobytes())  # the record agrees, chunk 1 does not
    src.write_bytes(bytes(blob))
    with pytest.raises(hurray.ChecksumError):
        hurray.open(src).verify()
    for target in ("x.safetensors", "x.gguf"):
        r = _installed_command(src, tmp_path / target)
        assert r.returncode == 1, (r.stdout, r.stderr)
        assert f"in bytes [{chunk}, {2 * chunk})" in r.stderr
        assert not (tmp_path / target).exists()
    blob = bytearray(whole)
    struct.pack_into("<Q", blob, buffer_records_at(blob, "big") + 16, 12345)  # the record only
    reseal(blob)
    src.write_bytes(bytes(blob))
    hurray.open(src).verify()
    for target in ("y.safetensors", "y.gguf"):
        r = _installed_convert(src, tmp_path / target)
        assert "(native)" in r.stdout


def _converted_by_python_and_c(src, folder):
    """`src` converted to .hurray by hurray.convert and by the pip-installed
    command (the C converter); the two targets' paths."""
    hurray.convert(src, folder / "py.hurray", quiet=True)
    _installed_convert("-q", src, folder / "c.hurray")
    return folder / "py.hurray", folder / "c.hurray"


def test_a_1_0_file_holding_the_chunk_table_key_as_metadata_converts(tmp_path):
    """A 1.0 writer could store "hurray.chunk_checksums" as ordinary
    metadata (file-format.md 7.1); no writer may store it again, and
    converting such a file failed on it ("reserved"). The copy now goes
    without it, through Python and through the C command alike."""
    from _file_edits import reseal

    src = tmp_path / "old.hurray"
    hurray.save(src, {"a": np.arange(3.0)}, {"hurray.chunk_checksumX": "kept by 1.0", "k": 1})
    blob = bytearray(src.read_bytes())
    at = blob.rindex(b"hurray.chunk_checksumX")
    blob[at : at + 22] = b"hurray.chunk_checksums"
    reseal(blob)
    src.write_bytes(bytes(blob))
    with hurray.open(src) as f:
        assert f.metadata["hurray.chunk_checksums"] == "kept by 1.0"
    for out in _converted_by_python_and_c(src, tmp_path):
        with hurray.open(out) as f:
            assert f.metadata == {"k": 1}
            assert f["a"].numpy().tolist() == [0.0, 1.0, 2.0]


def test_a_conversion_failing_with_epipe_says_so():
    """A ConversionIOError of errno EPIPE is also a BrokenPipeError, which
    the command takes for its report's reader going away: it exited 141
    without a word."""
    code = textwrap.dedent(
        """
        import errno, sys
        import hurray.__main__ as cli
        conv = sys.modules["hurray.convert"]
        from hurray.convert._common import io_error

        def failing(*args, **kwargs):
            raise io_error("writing x.npz: Broken pipe", errno.EPIPE, "x.npz")

        conv.convert = failing
        sys.exit(cli.main(["convert", "a.hurray", "x.npz"]))
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stderr == "hurray convert: writing x.npz: Broken pipe\n"


def test_metadata_of_an_unknown_type_is_left_out_of_a_conversion(tmp_path):
    """A newer minor version's metadata type (7 here) was copied as bytes
    (type 5), which changes its meaning (file-format.md 11)."""
    from _file_edits import reseal

    src = tmp_path / "new.hurray"
    hurray.save(src, {"a": np.arange(3.0)}, {"future": b"\x01\x02", "k": 1})
    blob = bytearray(src.read_bytes())
    at = blob.rindex(b"future") + len(b"future")
    assert blob[at] == 5  # the type byte after the key
    blob[at] = 7
    reseal(blob)
    src.write_bytes(bytes(blob))
    with hurray.open(src) as f:
        assert f.metadata["future"] == b"\x01\x02"
    for out in _converted_by_python_and_c(src, tmp_path):
        with hurray.open(out) as f:
            assert f.metadata == {"k": 1}


def _two_shards(folder):
    import safetensors.numpy as stn

    folder.mkdir()
    stn.save_file({"a": np.arange(8, dtype=np.float32)}, folder / "m-00001-of-00002.safetensors")
    stn.save_file({"b": np.arange(4, dtype=np.float32)}, folder / "m-00002-of-00002.safetensors")
    weight_map = {"a": "m-00001-of-00002.safetensors", "b": "m-00002-of-00002.safetensors"}
    (folder / "m.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return folder / "m.safetensors.index.json"


def test_a_target_that_is_one_of_the_sources_shards_is_refused(tmp_path):
    """Only the index itself was compared with the target: converting a
    sharded checkpoint onto its first shard replaced it, and the checkpoint
    no longer read ("tensor 'b' is in two shards"). Converting into the
    shards' own folder wrote among them."""
    index = _two_shards(tmp_path / "shs")
    before = {p.name: p.read_bytes() for p in (tmp_path / "shs").iterdir()}
    shard = tmp_path / "shs" / "m-00001-of-00002.safetensors"
    with pytest.raises(UsageError, match="is one of the source's files"):
        convert(index, shard, quiet=True)
    with pytest.raises(UsageError, match="is a folder the source's files are in"):
        convert(index, str(tmp_path / "shs") + "/", quiet=True)
    assert {p.name: p.read_bytes() for p in (tmp_path / "shs").iterdir()} == before
    # Shards in a subfolder of the target folder: its shards would be
    # written over them (the index names "sub/...").
    import safetensors.numpy as stn

    (tmp_path / "A" / "sub").mkdir(parents=True)
    stn.save_file({"a": np.ones(2, np.float32)}, tmp_path / "A" / "sub" / "a.safetensors")
    weight_map = {"a": "sub/a.safetensors"}
    (tmp_path / "A" / "m.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    nested = tmp_path / "A" / "m.safetensors.index.json"
    for folder in ("A", "A/sub"):
        with pytest.raises(UsageError, match="is a folder the source's files are in"):
            convert(nested, str(tmp_path / folder) + "/", quiet=True)
    assert sorted(os.listdir(tmp_path / "A")) == ["m.safetensors.index.json", "sub"]
    # a folder further up overwrites nothing: converting into it is fine
    convert(nested, str(tmp_path) + "/", quiet=True)
    assert (tmp_path / "A" / "sub" / "a.safetensors").exists()
    convert(index, tmp_path / "whole.hurray", quiet=True)
    assert hurray.load(tmp_path / "whole.hurray")["b"].numpy().tolist() == [0, 1, 2, 3]


def test_torch_load_warnings_do_not_break_the_one_line_error(tmp_path):
    """torch.load warned over two lines of stderr (a pickle protocol it was
    not made for) beside the one-line error, even with -q."""
    src = tmp_path / "p4.pt"
    torch.save({"w": torch.ones(2, 2)}, src, pickle_protocol=4)
    r = run_cli(src, tmp_path / "p4.hurray", "-q")
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("hurray convert: ") and "Warning" not in r.stderr


def test_no_memory_while_reading_a_torch_checkpoint_is_a_memory_error(tmp_path, monkeypatch):
    """A MemoryError inside torch.load was reported as the file's fault:
    "torch.load(weights_only=True) refused it: MemoryError; hurray loads
    state dicts of tensors only", a ConversionError, the cause dropped."""
    from hurray.convert import _torch as convert_torch

    src = tmp_path / "m.pt"
    torch.save({"w": torch.ones(2)}, src)

    def no_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr(convert_torch, "_load", no_memory)
    with pytest.raises(MemoryError):
        convert(src, tmp_path / "m.hurray", quiet=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt"]


# --------------------------------------- session 44: writing under failure


def test_a_full_disk_is_an_os_error_for_every_target(tmp_path):
    """A write that failed (a size limit here, a full disk alike) was a
    ConversionIOError for safetensors, hurray and npz targets, but a plain
    ConversionError without errno for gguf (a HurrayIOError downgraded) and
    for .pt (torch reports "unexpected pos ..." and drops the errno)."""
    pytest.importorskip("torch")
    # torch reports a failed write by a C++ exception, which an ASan runtime
    # preloaded before libstdc++ cannot intercept (make test-python-asan).
    asan = "asan" in os.environ.get("LD_PRELOAD", "")
    targets = ("safetensors", "hurray", "gguf", "npz") + (() if asan else ("pt",))
    script = textwrap.dedent(
        f"""
        import errno, os, resource
        import numpy as np
        import hurray
        from hurray.convert import ConversionIOError
        d = {str(tmp_path)!r}
        src = os.path.join(d, "m.hurray")
        hurray.save(src, {{"w": np.ones((512, 1024), np.float32)}})
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, resource.RLIM_INFINITY))
        for ext in {targets!r}:
            dst = os.path.join(d, "out." + ext)
            with open(dst, "wb") as f:
                f.write(b"OLD")
            try:
                hurray.convert(src, dst, quiet=True)
                raise SystemExit(ext + ": no error")
            except ConversionIOError as e:
                assert isinstance(e, OSError) and e.errno == errno.EFBIG, (ext, e.errno)
                assert e.filename == dst, (ext, e.filename)
            with open(dst, "rb") as f:
                assert f.read() == b"OLD", ext
        assert sorted(os.listdir(d)) == ["m.hurray"] + sorted(
            "out." + e for e in {targets!r}
        ), os.listdir(d)
        """
    )
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr


# --------------------------------------- session 44: metadata the targets mangled


def _both_paths(src, dst):
    """(C command result or None, Python API exception or None)."""
    from zoo_reference import cli

    exe = cli()
    native = None
    if exe is not None:
        native = subprocess.run(
            [exe, "convert", "-q", str(src), str(dst)], capture_output=True, text=True, timeout=120
        )
        if native.returncode == 0:
            os.remove(dst)
    try:
        convert(src, dst, quiet=True)
        error = None
    except ConversionError as e:
        error = e
    return native, error


def _save_with_gguf_meta(path, meta, types=None):
    if types is not None:
        meta = dict(meta, **{"gguf.__types__": json.dumps(types)})
    hurray.save(path, {"x": np.arange(4, dtype=np.float32)}, meta)


@pytest.mark.parametrize(
    "value,types,why",
    [
        # yajl makes a lone high surrogate "?": it was written so
        ('["\\ud800"]', {"k": "ARRAY:STRING"}, "unpaired surrogate"),
        ('["a\\udbffb"]', {"k": "ARRAY:STRING"}, "unpaired surrogate"),
        # written as inf
        (1e39, {"k": "FLOAT32"}, "FLOAT32's range"),
        ("[1e39]", {"k": "ARRAY:FLOAT32"}, "FLOAT32's range"),
        # written as 0
        (1e-50, {"k": "FLOAT32"}, "too small for FLOAT32"),
        # one level past what the readers (this library's too) take
        ("[[[[[1]]]]]", {"k": "ARRAY:ARRAY:ARRAY:ARRAY:ARRAY:INT32"}, "nested deeper than 4"),
    ],
)
def test_gguf_metadata_the_writer_changed_is_refused(tmp_path, value, types, why):
    src, dst = tmp_path / "m.hurray", tmp_path / "o.gguf"
    _save_with_gguf_meta(src, {"gguf.k": value}, types)
    native, error = _both_paths(src, dst)
    if native is not None:
        assert native.returncode == 1 and why in native.stderr, native.stderr
    assert error is not None and why in str(error), error
    assert not dst.exists()


def test_gguf_metadata_at_the_limits_is_kept(tmp_path):
    """What the refusals above must not refuse: four levels of arrays, a
    paired surrogate, FLOAT32's largest value and infinities, and an
    untyped float past FLOAT32 (FLOAT64, where it was made inf)."""
    gguf = pytest.importorskip("gguf")
    src, dst = tmp_path / "m.hurray", tmp_path / "o.gguf"
    meta = {
        "gguf.deep": "[[[[1]]]]",
        "gguf.pair": '["\\ud83d\\ude00"]',
        "gguf.max": 3.4028234663852886e38,
        "gguf.inf": float("-inf"),
        "gguf.big": 1e39,
        "gguf.tiny": 1e-50,
        "gguf.subnormal": 2.0**-149,
    }
    types = {
        "deep": "ARRAY:ARRAY:ARRAY:ARRAY:INT32",
        "pair": "ARRAY:STRING",
        "max": "FLOAT32",
        "inf": "FLOAT32",
        "subnormal": "FLOAT32",
    }
    _save_with_gguf_meta(src, meta, types)
    convert(src, dst, quiet=True)
    fields = gguf.GGUFReader(dst).fields
    assert fields["pair"].contents() == ["\U0001f600"]
    assert fields["max"].contents() == np.float32(3.4028234663852886e38)
    assert fields["inf"].contents() == -np.inf
    assert fields["big"].types == [gguf.GGUFValueType.FLOAT64]
    assert fields["big"].contents() == 1e39
    assert fields["tiny"].types == [gguf.GGUFValueType.FLOAT64]
    assert fields["tiny"].contents() == 1e-50
    assert fields["subnormal"].contents() == np.float32(2.0**-149)
    back = tmp_path / "back.hurray"
    convert(dst, back, quiet=True)  # the reader takes what the writer wrote
    assert json.loads(hurray.open(back).metadata["gguf.deep"]) == [[[[1]]]]


def test_a_tensor_order_stored_as_bytes_is_read_on_both_paths(tmp_path):
    """gguf.__tensors__ as bytes (json.loads takes them) passed the Python
    converter and was refused by the C one."""
    src = tmp_path / "m.hurray"
    hurray.save(src, {"x": np.ones(2, np.float32)}, {"gguf.__tensors__": b'["x"]'})
    for target in ("o.gguf", "o.hurray"):
        native, error = _both_paths(src, tmp_path / target)
        if native is not None:
            assert native.returncode == 0, (target, native.stderr)
        assert error is None, (target, error)


def test_a_malformed_tensor_order_is_refused_on_both_paths(tmp_path):
    """gguf.__tensors__ of another shape was refused by the Python API and
    taken (ignored) by the C command, for every target."""
    src = tmp_path / "m.hurray"
    hurray.save(src, {"x": np.ones(2, np.float32)}, {"gguf.__tensors__": '{"x": 1}'})
    for target in ("o.gguf", "o.safetensors", "o.hurray"):
        native, error = _both_paths(src, tmp_path / target)
        if native is not None:
            assert native.returncode == 1, (target, native.stderr)
            assert "not a JSON array of tensor names" in native.stderr
        assert error is not None and "not a JSON array" in str(error), (target, error)


def test_non_utf8_safetensors_metadata_is_refused_on_both_paths(tmp_path):
    """The Python API wrote b"\\xff\\xfeA" as "\\ufffd\\ufffdA"; the C
    command refused it."""
    src, dst = tmp_path / "m.hurray", tmp_path / "o.safetensors"
    hurray.save(src, {"x": np.ones(2, np.float32)}, {"safetensors.k": b"\xff\xfeA"})
    native, error = _both_paths(src, dst)
    if native is not None:
        assert native.returncode == 1 and "not UTF-8" in native.stderr
    assert error is not None and "not UTF-8" in str(error)
    assert not dst.exists()


@pytest.mark.parametrize("shape", [[0, 2**64 - 1], [0, 4, 2**62]])
def test_a_gguf_dimension_past_int64_is_refused(tmp_path, shape):
    """An empty tensor of shape [0, 2^64 - 1] (valid in safetensors and
    hurray) was written to GGUF, whose readers (gguf-py, this library's)
    then refused the file ("its dims overflow", for no element at all);
    [0, 4, 2^62] too, whose product in ggml's order (2^62 x 4 x 0) passes
    2^63 on the way."""
    src, dst = tmp_path / "a.safetensors", tmp_path / "o.gguf"
    header = json.dumps({"a": {"dtype": "F32", "shape": shape, "data_offsets": [0, 0]}})
    header += " " * (-len(header) % 8)
    src.write_bytes(len(header).to_bytes(8, "little") + header.encode())
    native, error = _both_paths(src, dst)
    if native is not None:
        assert native.returncode == 1 and "2^63 - 1" in native.stderr, native.stderr
    assert error is not None and "2^63" in str(error), error
    assert not dst.exists()


def test_a_gguf_architecture_that_is_no_string_is_kept(tmp_path):
    """gguf.general.architecture = 5 (no recorded type) was written as the
    string "hurray": the value was lost without a word."""
    gguf = pytest.importorskip("gguf")
    src, dst = tmp_path / "m.hurray", tmp_path / "o.gguf"
    _save_with_gguf_meta(src, {"gguf.general.architecture": 5})
    convert(src, dst, quiet=True)
    field = gguf.GGUFReader(dst).fields["general.architecture"]
    assert field.contents() == 5 and field.types == [gguf.GGUFValueType.UINT32]


def test_an_unknown_option_names_the_convert_command(tmp_path):
    """`hurray convert --bogus A B` printed the top parser's usage
    ("usage: hurray [-h] COMMAND ...", "hurray: error:")."""
    r = run_cli("--bogus", tmp_path / "a.npz", tmp_path / "b.hurray")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("usage: hurray convert"), r.stderr
    assert "hurray convert: error: unrecognized arguments: --bogus" in r.stderr


@pytest.mark.parametrize("fault", [OSError(5, "Input/output error"), KeyboardInterrupt()])
@pytest.mark.parametrize("at", [1, 2, 3])
def test_a_folder_target_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch, fault, at):
    """A folder target was published one rename at a time: a failure or a
    Ctrl-C after the first left a new shard beside the old shards, index
    and config (convert.md: DST is never partly written)."""
    src = tmp_path / "src.hurray"
    hurray.save(
        src,
        {"a": np.full(64, 1.0, np.float32), "b": np.full(64, 2.0, np.float32)},
        {
            "zoo.config.json": '{"new": true}',
            "zoo.weight_map": json.dumps({"a": "m-1.safetensors", "b": "m-2.safetensors"}),
            "zoo.index": "m.safetensors.index.json",
        },
    )
    out = tmp_path / "out"
    out.mkdir()
    old = {"m-1.safetensors": b"old 1", "config.json": b'{"old": true}', "keep.txt": b"x"}
    for name, data in old.items():
        (out / name).write_bytes(data)
    real_replace = os.replace
    calls = []

    def replace(a, b, **kw):
        if os.path.dirname(os.path.abspath(b)) == str(out) and str(a).endswith(".tmp"):
            calls.append(b)
            if len(calls) == at:
                raise fault
        return real_replace(a, b, **kw)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises((ConversionError, KeyboardInterrupt)):
        convert(src, f"{out}/", quiet=True)
    monkeypatch.undo()
    assert len(calls) == at, calls
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old
    convert(src, f"{out}/", quiet=True)  # and with no fault, all of it is new
    names = sorted(p.name for p in out.iterdir())
    assert names == [
        "config.json",
        "keep.txt",
        "m-1.safetensors",
        "m-2.safetensors",
        "m.safetensors.index.json",
    ], names
    assert (out / "config.json").read_text() == '{"new": true}'


@pytest.mark.parametrize("theirs", [["theirs.safetensors"], []])
def test_a_new_folder_target_that_appears_meanwhile_is_named(tmp_path, monkeypatch, theirs):
    """Two conversions into one new folder: the second to publish got a raw
    'Directory not empty' naming its hidden temporary folder. The message
    now says the target appeared meanwhile; nothing of the loser remains.
    A folder that appeared empty (made by someone about to fill it) was
    replaced without a word, as rename(2) replaces an empty folder; it is
    refused the same way (renameat2 with RENAME_NOREPLACE)."""
    from hurray.convert import _folder

    src = tmp_path / "src.hurray"
    hurray.save(src, {"a": np.full(4, 1.0, np.float32)})
    out = tmp_path / "out"
    real = _folder._rename_noreplace

    def rename(a, b):
        if str(b) == str(out):  # the other party got there first
            out.mkdir()
            for name in theirs:
                (out / name).write_bytes(b"x")
        return real(a, b)

    monkeypatch.setattr(_folder, "_rename_noreplace", rename)
    with pytest.raises(ConversionError, match="it appeared while the conversion ran") as info:
        convert(src, f"{out}/", quiet=True)
    monkeypatch.undo()
    assert isinstance(info.value, OSError) and ".tmp" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "src.hurray"]
    assert [p.name for p in out.iterdir()] == theirs


# --------------------------------------- session 44: sharded folders as sources


def test_a_save_sharded_folder_converts_whole(tmp_path):
    """`hurray convert DIR out.safetensors` of a folder written by
    save_sharded was refused (it wanted a safetensors index); the tensors
    are assembled, checked, and the parts are protected as targets."""
    st = pytest.importorskip("safetensors.numpy")
    a = np.arange(1000, dtype=np.float32).reshape(10, 100)
    b = np.arange(5, dtype=np.int64)
    folder = tmp_path / "parts"
    parts = hurray.save_sharded(folder, {"a": a, "b": b}, parts=3, metadata={"k": "v"})
    for target in ("o.safetensors", "o.hurray", "o.npz"):
        report = convert(folder, tmp_path / target, quiet=True)
        assert {r.name for r in report.rows} == {"a", "b"}
    got = st.load_file(str(tmp_path / "o.safetensors"))
    np.testing.assert_array_equal(got["a"], a)
    np.testing.assert_array_equal(got["b"], b)
    with hurray.open(tmp_path / "o.hurray") as f:
        assert f.metadata == {"k": "v"}  # the save's id is the folder's, not the file's
        assert f.descriptor("a").shard is None
    r = run_cli(folder, parts[0])
    assert r.returncode == 2 and "one of the source's files" in r.stderr
    # A damaged part is found, as a damaged file is.
    blob = bytearray(open(parts[1], "rb").read())
    at = blob.find(a[4:7].tobytes())
    blob[at] ^= 1
    open(parts[1], "wb").write(bytes(blob))
    with pytest.raises(ConversionError, match="fails verification"):
        convert(folder, tmp_path / "x.safetensors", quiet=True)
    convert(folder, tmp_path / "x.safetensors", quiet=True, verify=False)


def test_pieces_and_extension_types_are_noted_not_hidden(tmp_path):
    """A piece of a sharded tensor (one rank's file) or a tensor of an
    extension type went to safetensors as a plain tensor, on the native
    path and the Python one, with nothing said."""
    from zoo_reference import cli

    src = tmp_path / "rank.hurray"
    piece = hurray.shard(np.ones((2, 4), np.float32), (6, 4), (2, 0))
    ext = hurray.from_numpy(np.frombuffer(b"5", np.uint8))
    ext = hurray.Tensor(
        ext.descriptor.replace(extension=hurray.Extension("torch.dcp.json")), list(ext.buffers)
    )
    hurray.save(src, {"w": piece, "step": ext})
    report = convert(src, tmp_path / "o.safetensors", quiet=True)
    notes = {r.name: r.note for r in report.rows}
    assert "a piece of a sharded tensor (6x4 at [2, 0])" in notes["w"]
    assert "extension 'torch.dcp.json' not kept" in notes["step"]
    exe = cli()
    if exe is not None:
        env = dict(os.environ, HURRAY_CONVERT_NATIVE_ONLY="1")
        r = subprocess.run(
            [exe, "convert", str(src), str(tmp_path / "n.safetensors")],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert r.returncode == 1 and "extension type" in r.stderr, r.stderr  # sorted first
    report = convert(src, tmp_path / "o.hurray", quiet=True)  # a hurray file keeps both
    assert all(not r.note for r in report.rows)


def test_a_folder_target_where_hard_links_fail(tmp_path, monkeypatch):
    """The old files were kept as hard links, with no way round a file
    system without them or protected_hardlinks: a conversion that os.replace
    alone did fine failed. They are moved aside then, and still put back."""
    src = tmp_path / "src.hurray"
    hurray.save(src, {"w": np.ones(4, np.float32)}, {"zoo.config.json": '{"new": 1}'})
    out = tmp_path / "out"
    out.mkdir()
    (out / "config.json").write_bytes(b"old")

    def no_link(*args, **kwargs):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_link)
    convert(src, f"{out}/", quiet=True)
    assert (out / "config.json").read_text() == '{"new": 1}'
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    (out / "config.json").write_bytes(b"old")
    real_replace = os.replace

    def replace(a, b, **kw):  # the second file's rename fails: the first is put back
        if str(a).endswith(".tmp") and os.path.basename(b) == "config.json":
            raise OSError(5, "Input/output error")
        return real_replace(a, b, **kw)

    before = {p.name: p.read_bytes() for p in out.iterdir()}
    other = tmp_path / "other.hurray"
    hurray.save(other, {"w": np.zeros(4, np.float32)}, {"zoo.config.json": '{"new": 2}'})
    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(ConversionError):
        convert(other, f"{out}/", quiet=True)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_expansion_is_bounded_across_the_whole_conversion(tmp_path):
    """Each tensor was held to the output limit on its own (64 MiB for a
    tensor storing 4 bytes), so a 1 KB file of N stride-0 tensors became
    N x 64 MiB, all in memory until the safetensors or GGUF file was
    written. The excess over 64x is now budgeted once per conversion."""
    one = np.array([1.0], np.float32)
    big = hurray.Descriptor(
        "float32", (4096, 4096), strides=(0, 0), buffers=[hurray.Buffer("data", 4)]
    )
    src = tmp_path / "many.hurray"
    hurray.save(src, {f"t{i}": hurray.Tensor(big, [one]) for i in range(3)})
    for target in ("o.safetensors", "o.npz", "o.gguf"):
        with pytest.raises(ConversionError, match="'t1': the tensors up to it write"):
            convert(src, tmp_path / target, quiet=True)
        assert not (tmp_path / target).exists()
    convert(src, tmp_path / "o.hurray", quiet=True)  # kept as it is: nothing expands
    small = hurray.Descriptor(
        "float32", (1024, 1024), strides=(0, 0), buffers=[hurray.Buffer("data", 4)]
    )
    ok = tmp_path / "few.hurray"
    hurray.save(ok, {f"t{i}": hurray.Tensor(small, [one]) for i in range(3)})  # 3 x 4 MiB
    convert(ok, tmp_path / "few.safetensors", quiet=True)


@pytest.mark.parametrize("when", ["link returns", "rename returns", "fsync"])
def test_a_folder_target_interrupted_leaves_no_old_files(tmp_path, monkeypatch, when):
    """A Ctrl-C as os.link/os.rename returned (before the backup was
    recorded) left a stray .tmp.old, and with the rename fallback the old
    file itself was gone; one during the folder fsync after the renames
    left every replaced file behind as a hidden .tmp.old."""
    from hurray.convert import _folder

    src = tmp_path / "src.hurray"
    hurray.save(src, {"w": np.ones(4, np.float32)}, {"zoo.config.json": '{"new": 1}'})
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.safetensors").write_bytes(b"old model")
    (out / "config.json").write_bytes(b"old config")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    real_link, real_rename = os.link, os.rename

    def link(a, b, **kw):
        if when == "rename returns":
            raise PermissionError(1, "Operation not permitted")  # the fallback runs
        real_link(a, b, **kw)
        raise KeyboardInterrupt

    def rename(a, b, **kw):
        real_rename(a, b, **kw)
        if str(b).endswith(".tmp.old"):
            raise KeyboardInterrupt

    def fsync_dir(path):
        raise KeyboardInterrupt

    if when == "fsync":
        monkeypatch.setattr(_folder, "_fsync_dir", fsync_dir)
    else:
        monkeypatch.setattr(os, "link", link)
        monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        convert(src, f"{out}/", quiet=True)
    monkeypatch.undo()
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    if when == "fsync":  # published whole before the interrupt
        assert sorted(after) == ["config.json", "model.safetensors"], after
        assert after["config.json"] == b'{"new": 1}'
    else:
        assert after == before


def test_sharded_folders_hold_the_checks_a_file_holds(tmp_path):
    """A folder of pieces got past the expansion budget (load_sharded
    assembled each before it was charged), dropped the pieces' extension
    type, kept only the first part's metadata without a word, and a folder
    whose *.hurray entries were no regular files raised NotFoundError."""
    one = np.array([1.0], np.float32)
    folder = tmp_path / "parts"
    folder.mkdir()
    for k in range(2):  # two parts, each a 2048-row piece of three stride-0 tensors
        d = hurray.Descriptor(
            "float32", (2048, 4096), strides=(0, 0), buffers=[hurray.Buffer("data", 4)]
        )
        piece = {
            f"t{i}": hurray.shard(hurray.Tensor(d, [one]), (4096, 4096), (2048 * k, 0))
            for i in range(3)
        }
        hurray.save(folder / f"p{k}.hurray", piece, {"author": "ab"[k], "license": "mit"})
    with pytest.raises(ConversionError, match="'t1': the tensors up to it write"):
        convert(folder, tmp_path / "o.safetensors", quiet=True)
    ext = hurray.from_numpy(np.arange(4, dtype=np.uint8))
    ext = hurray.Tensor(
        ext.descriptor.replace(extension=hurray.Extension("my.type")), list(ext.buffers)
    )
    small = tmp_path / "small"
    small.mkdir()
    hurray.save(small / "a.hurray", {"e": hurray.shard(ext, (8,), (0,))}, {"author": "a"})
    hurray.save(small / "b.hurray", {"e": hurray.shard(ext, (8,), (4,))}, {"author": "b", "x": 1})
    report = convert(small, tmp_path / "s.hurray", quiet=True)
    with hurray.open(tmp_path / "s.hurray") as f:
        assert f.descriptor("e").extension.name == "my.type"
        assert f.metadata == {"author": "a", "x": 1}
    assert any("'author' differs between the parts" in n for n in report.notes), report.notes
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "x.hurray").mkdir()
    with pytest.raises(ConversionError, match="no regular"):
        convert(odd, tmp_path / "x.safetensors", quiet=True)


def test_an_unfinished_dcp_save_is_refused(tmp_path):
    """A DCP folder without .metadata.hurray (a save that did not finish)
    was converted from whatever rank files it held."""
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    from hurray.torch.dcp import HurrayStorageWriter

    folder = tmp_path / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        dcp.save(
            {"w": torch.arange(12.0).reshape(3, 4)}, storage_writer=HurrayStorageWriter(folder)
        )
    report = convert(folder, tmp_path / "o.safetensors", quiet=True)
    assert [r.name for r in report.rows] == ["w"]
    (folder / ".metadata.hurray").unlink()
    with pytest.raises(ConversionError, match="did not finish"):
        convert(folder, tmp_path / "p.safetensors", quiet=True)


def test_an_expanded_torch_tensor_is_charged_before_it_is_copied(tmp_path):
    """from_torch made each expand()ed tensor contiguous before the budget
    saw it: a 2 KB .pt of six such tensors became 384 MiB."""
    torch = pytest.importorskip("torch")
    src = tmp_path / "e.pt"
    torch.save({f"t{i}": torch.ones(1).expand(4096, 4096) for i in range(3)}, src)
    for target in ("o.safetensors", "o.hurray"):
        with pytest.raises(ConversionError, match="'t1': the tensors up to it write"):
            convert(src, tmp_path / target, quiet=True)


@pytest.mark.parametrize(
    "kwargs,error",
    [
        ({"exclude": b"secret"}, TypeError),  # was the glob "b'secret'": nothing excluded
        ({"quantize": "q8_0", "quantize_exclude": [b"*"]}, TypeError),
        ({"include": 5}, TypeError),
        ({"threads": 65536}, UsageError),  # was an OverflowError mid-conversion
        ({"threads": 10**6}, UsageError),  # was taken
        ({"threads": 1.7}, TypeError),  # was truncated to 1
        ({"threads": "4"}, TypeError),
        ({"threads": float("inf")}, TypeError),
        ({"quantize": "block_affine", "block_size": -1}, UsageError),
        ({"quantize": "nf4", "block_size": 2**64}, UsageError),
        ({"quantize": "nf4", "block_size": True}, TypeError),  # was a block size of 1
    ],
)
def test_convert_arguments_are_checked_as_the_cli_checks_them(tmp_path, kwargs, error):
    src = tmp_path / "s.hurray"
    hurray.save(src, {"secret": np.ones((4, 64), np.float32)})
    with pytest.raises(error):
        convert(src, tmp_path / "o.safetensors", quiet=True, **kwargs)
    assert not (tmp_path / "o.safetensors").exists()


def test_bytes_paths_are_paths(tmp_path):
    """A bytes path failed with "endswith first arg must be bytes"."""
    src = tmp_path / "s.hurray"
    hurray.save(src, {"a": np.ones(4, np.float32)})
    convert(os.fsencode(src), os.fsencode(tmp_path / "o.npz"), quiet=True)
    assert np.load(tmp_path / "o.npz")["a"].tolist() == [1, 1, 1, 1]


def test_the_converters_own_keys_are_not_the_users_metadata(tmp_path):
    """.npz, .pt and .npy targets listed gguf.__types__ and gguf.__tensors__
    among the metadata keys "not carried"; safetensors did not."""
    src = tmp_path / "m.hurray"
    meta = {
        "gguf.general.architecture": "x",
        "gguf.__types__": json.dumps({"general.architecture": "STRING"}),
        "gguf.__tensors__": json.dumps(["a"]),
        "safetensors_index.metadata": "{}",
    }
    hurray.save(src, {"a": np.ones(4, np.float32)}, meta)
    for target in ("o.safetensors", "o.npz", "o.npy"):
        notes = convert(src, tmp_path / target, quiet=True).notes
        assert any(n.startswith("1 metadata key not carried") for n in notes), (target, notes)


def test_keep_scales_dequantizes_what_it_cannot_keep(tmp_path):
    """--keep-scales of a block-coded tensor (GGUF Q4_K: its scales sit in
    its blocks) failed the whole conversion with a message about codes();
    as for a tensor that is not dense, the row is dequantized and says why."""
    blocks = np.zeros(2 * 144, np.uint8)  # two Q4_K blocks of 256: all zeros
    d = hurray.Descriptor(
        "uint8",
        (2, 256),
        quantization=hurray.BlockCoded("ggml_q4_k", 1),
        buffers=[hurray.Buffer("data", blocks.nbytes)],
    )
    src = tmp_path / "k.hurray"
    hurray.save(src, {"w.weight": hurray.Tensor(d, [blocks]), "b": np.ones(2, np.float32)})
    report = convert(src, tmp_path / "o.safetensors", keep_scales=True, quiet=True)
    row = {r.name: r for r in report.rows}["w.weight"]
    assert "block-coded (ggml_q4_k" in row.note and "dequantized" in row.note, row.note


@pytest.mark.parametrize("target", ["out.safetensors", "out.npz", "newdir/"])
def test_interrupt_right_after_the_temporary_is_made_leaves_nothing(tmp_path, monkeypatch, target):
    # A Ctrl-C that Python delivers just after os.open (or os.mkdir) made
    # the temporary returned, before its name was stored: abort() did not
    # know the name, and the hidden file (and its descriptor) stayed.
    src = tmp_path / "src.npz"
    np.savez(src, a=np.ones(4, np.float32))
    real_open, real_mkdir = os.open, os.mkdir

    def interrupting_open(path, flags, *args, **kw):
        fd = real_open(path, flags, *args, **kw)
        if flags & os.O_EXCL and ".tmp" in str(path):
            raise KeyboardInterrupt  # the fd is lost with the frame, as a signal loses it
        return fd

    def interrupting_mkdir(path, *args, **kw):
        real_mkdir(path, *args, **kw)
        if ".tmp" in str(path):
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "open", interrupting_open)
    monkeypatch.setattr(os, "mkdir", interrupting_mkdir)
    with pytest.raises(KeyboardInterrupt):
        convert(src, f"{tmp_path}/{target}", quiet=True)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src.npz"]


def test_keys_a_hurray_source_leaves_behind_are_named_on_both_paths(tmp_path):
    # The chunk-checksum key of a 1.0 file and a newer minor version's type
    # are left out of every copy (above); the report said nothing of them,
    # and into a hurray target it claimed every key was kept.
    from _file_edits import reseal

    src = tmp_path / "mixed.hurray"
    hurray.save(
        src, {"a": np.arange(3.0)}, {"hurray.chunk_checksumX": "1.0", "future": b"\x01", "k": 1}
    )
    blob = bytearray(src.read_bytes())
    at = blob.rindex(b"hurray.chunk_checksumX")
    blob[at : at + 22] = b"hurray.chunk_checksums"
    at = blob.rindex(b"future") + len(b"future")
    blob[at] = 7
    reseal(blob)
    src.write_bytes(bytes(blob))
    line = (
        "2 metadata keys not carried (the reserved chunk-checksum key, or types of a newer file "
        "format version, which this version does not write): future, hurray.chunk_checksums"
    )
    report = hurray.convert(src, tmp_path / "py.hurray", quiet=True)
    assert line in report.notes
    r = _installed_convert(src, tmp_path / "c.hurray")
    assert "(native)" in r.stdout and f"note: {line}" in r.stdout


def test_the_report_escapes_names_an_ascii_stdout_cannot_print(tmp_path):
    """With PYTHONIOENCODING=ascii (or the C locale without coercion) a
    tensor name with a non-ASCII letter made printing the report raise
    UnicodeEncodeError: `hurray convert` said "internal error" and exited 1
    after the target was written."""
    src = tmp_path / "src.hurray"
    hurray.save(src, {"poids_\u00e9": np.zeros(3, np.float32)})
    code = "import sys, hurray; hurray.convert(sys.argv[1], sys.argv[2])"
    done = subprocess.run(
        [sys.executable, "-c", code, str(src), str(tmp_path / "out.npz")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "poids_\\xe9" in done.stdout
    assert np.load(tmp_path / "out.npz")["poids_\u00e9"].shape == (3,)


def test_a_source_that_cannot_be_looked_up_keeps_its_errno(tmp_path):
    """Every source os.path.exists() could not see was 'no such file or
    directory' (ENOENT): a symbolic link loop, a name too long."""
    loop = tmp_path / "loop.npz"
    os.symlink(loop.name, loop)
    with pytest.raises(ConversionError) as info:
        convert(loop, tmp_path / "o.hurray", quiet=True)
    assert isinstance(info.value, OSError) and info.value.errno == errno.ELOOP, info.value
    long = tmp_path / ("a" * 300 + ".npz")
    with pytest.raises(ConversionError) as info:
        convert(long, tmp_path / "o.hurray", quiet=True)
    assert info.value.errno == errno.ENAMETOOLONG, info.value
    with pytest.raises(ConversionError) as info:
        convert(tmp_path / "missing.npz", tmp_path / "o.hurray", quiet=True)
    assert info.value.errno == errno.ENOENT and "no such file" in str(info.value)


def test_a_failed_npy_write_gives_its_errno(tmp_path):
    """numpy's tofile into a real file loses the errno of a failed write:
    a .npy target said 'writing out.npy: None', errno None. The file size
    limit stands in for a full disk; the child ignores SIGXFSZ."""
    src = tmp_path / "src.hurray"
    hurray.save(src, {"a": np.arange(1 << 20, dtype=np.float32)})
    code = textwrap.dedent(
        """
        import resource, signal, sys
        from hurray.convert import convert
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))
        try:
            convert(sys.argv[1], sys.argv[2], quiet=True)
        except OSError as exc:
            print(exc.errno, exc)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(src), str(tmp_path / "out.npy")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"{errno.EFBIG} "), done.stdout
    assert "File too large" in done.stdout
    assert listing(tmp_path) == ["src.hurray"]


def test_sources_with_names_that_are_not_utf8(tmp_path):
    """A .pt whose file name is not UTF-8 was refused as if its contents
    were unsafe (torch.load(mmap=True) raised UnicodeEncodeError on the
    name); a .npy's tensor, named after such a file, failed the write with
    an error that blamed the target."""
    torch = pytest.importorskip("torch")
    pt = os.path.join(tmp_path, os.fsdecode(b"model\xff.pt"))
    torch.save({"w": torch.arange(4.0)}, pt)
    convert(pt, tmp_path / "pt.hurray", quiet=True)
    np.testing.assert_array_equal(hurray.load(tmp_path / "pt.hurray")["w"], np.arange(4.0))
    npy = os.path.join(tmp_path, os.fsdecode(b"w\xff.npy"))
    np.save(npy, np.arange(3.0))
    convert(npy, tmp_path / "npy.hurray", quiet=True)
    assert list(hurray.load(tmp_path / "npy.hurray")) == ["w\\xff"]


@pytest.mark.parametrize(
    "scheme, shape", [("q8_0", (0,)), ("q8_0", (2, 0)), ("nf4", (0,)), ("mxfp4", (0, 32))]
)
def test_keep_scales_round_trips_an_empty_quantized_tensor(tmp_path, scheme, shape):
    """Reading a --keep-scales file back put a 0-byte scales buffer at an
    unaligned address (numpy's empty slice of an aligned block points at
    the block's start): 'pointer ... is not aligned to the 64 bytes'."""
    t = hurray.quantize(np.zeros(shape, np.float32), scheme)
    src, st, back = tmp_path / "q.hurray", tmp_path / "q.safetensors", tmp_path / "b.hurray"
    hurray.save(src, {"w": t})
    convert(src, st, keep_scales=True, quiet=True)
    convert(st, back, quiet=True)
    assert hurray.load(back)["w"].descriptor == t.descriptor


def test_paths_near_path_max_are_written(tmp_path, monkeypatch):
    """Temporary files were named by their whole path: a target path of
    4076 to 4095 bytes, which open() takes, failed with ENAMETOOLONG after
    the whole file was written; and in a working directory deeper than
    4075 bytes every conversion to a short relative target failed, its
    temporary name made absolute. They are named in the folder now."""
    deep = str(tmp_path)
    while len(deep) < 4080:
        deep += "/" + "d" * min(200, 4080 - len(deep) - 1)
    os.makedirs(deep)
    target = os.path.join(deep, "m.hurray")
    assert len(target) == 4089
    hurray.save(target, {"a": np.arange(3.0)})
    assert hurray.load(target)["a"].numpy().tolist() == [0.0, 1.0, 2.0]
    monkeypatch.chdir(deep)
    hurray.save("src.hurray", {"a": np.arange(3.0)})
    for name in ("o.npz", "o.safetensors", "o.hurray"):
        convert("src.hurray", name, quiet=True)
    assert sorted(os.listdir(".")) == [
        "m.hurray",
        "o.hurray",
        "o.npz",
        "o.safetensors",
        "src.hurray",
    ]


def test_a_source_path_with_a_nul_byte_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="NUL"):
        convert(f"{tmp_path}/a\0b.npz", tmp_path / "o.hurray", quiet=True)


def test_a_file_named_double_dash_after_the_separator_is_an_operand(tmp_path):
    """`hurray convert -- SRC --` names a target file "--". Python before
    3.13 dropped that operand too, and convert got an empty list: an
    internal error. Now the target is the file "--", whose name has no
    format."""
    src = tmp_path / "a.safetensors"
    from safetensors.numpy import save_file

    save_file({"x": np.arange(4, dtype=np.float32)}, str(src))
    r = subprocess.run(
        [sys.executable, "-m", "hurray", "convert", "--", src.name, "--"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert_one_line_failure(r, status=2, contains="cannot tell the format to write from './--'")
    os.symlink(src.name, tmp_path / "--")  # and as the source
    r = subprocess.run(
        [sys.executable, "-m", "hurray", "convert", "-q", "--", "--", "o.hurray"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert_one_line_failure(r, status=2, contains="cannot tell the format of './--'")


def _dropping_privileges() -> list:
    """A command prefix under which a folder's permission bits apply: none
    for a user, setpriv without the capabilities that bypass them for
    root; None where root cannot drop them."""
    if os.geteuid() != 0:
        return []
    caps = "-dac_override,-dac_read_search"
    prefix = ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]
    try:
        ok = subprocess.run(prefix + ["true"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    return prefix if ok else None


def test_a_folder_that_may_be_written_but_not_listed_takes_new_files(tmp_path):
    """A drop box (mode 0300: write and enter, not list) cannot be opened
    for reading, and holding the target's folder open refused every save
    and conversion into it, where open(2) and numpy.save succeed. It is
    held with O_PATH instead."""
    prefix = _dropping_privileges()
    if prefix is None:
        pytest.skip("root here cannot drop CAP_DAC_OVERRIDE (no setpriv)")
    src = tmp_path / "src.hurray"
    hurray.save(src, {"w": np.arange(4, dtype=np.float32)})
    drop = tmp_path / "drop"
    drop.mkdir()
    os.chmod(drop, 0o300)
    code = textwrap.dedent(
        """
        import os, sys, numpy as np, hurray
        src, drop = sys.argv[1], sys.argv[2]
        hurray.save(os.path.join(drop, "s.hurray"), {"a": np.zeros(2)})
        for name in ("c.hurray", "c.safetensors", "c.npz"):
            hurray.convert(src, os.path.join(drop, name), quiet=True)
        print("ok")
        """
    )
    try:
        done = subprocess.run(
            prefix + [sys.executable, "-c", code, str(src), str(drop)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        os.chmod(drop, 0o700)
    assert done.returncode == 0, done.stderr[-2000:]
    assert listing(drop) == ["c.hurray", "c.npz", "c.safetensors", "s.hurray"]


@pytest.mark.parametrize("when", ["as the renames end", "twice, the second in the undo"])
def test_a_folder_target_is_all_old_or_all_new_whenever_ctrl_c_comes(tmp_path, monkeypatch, when):
    """Real Ctrl-Cs (signal.raise_signal, so Python runs the handler where it
    would) during the renames into an existing folder: one as the last
    rename's list of kept files was built left every old file behind as a
    hidden .tmp.old; a second one during the undo of the first stopped the
    undo half way, a mix of old and new shards. The step now holds the
    signals and reports them when it ends."""
    src = tmp_path / "src.hurray"
    weight_map = json.dumps({"a": "m-1.safetensors", "b": "m-2.safetensors"})
    hurray.save(
        src,
        {"a": np.full(4, 1.0, np.float32), "b": np.full(4, 2.0, np.float32)},
        {
            "zoo.config.json": '{"new": true}',
            "zoo.weight_map": weight_map,
            "zoo.index": "m.safetensors.index.json",
        },
    )
    out = tmp_path / "out"
    out.mkdir()
    old = {
        "m-1.safetensors": b"old 1",
        "m-2.safetensors": b"old 2",
        "m.safetensors.index.json": b"old index",
        "config.json": b'{"old": true}',
    }
    for name, data in old.items():
        (out / name).write_bytes(data)
    from hurray.convert import _folder

    real_replace, calls = os.replace, {"forward": 0, "back": 0, "synced": 0}
    if when == "as the renames end":
        # Once every file is in place, before the kept old ones are removed.
        real_sync = _folder._fsync_dir

        def sync(path):
            calls["synced"] += 1
            if calls["synced"] == 1:
                signal.raise_signal(signal.SIGINT)
            real_sync(path)

        monkeypatch.setattr(_folder, "_fsync_dir", sync)
    else:
        # After the second rename, and again as the undo puts back the first.
        def replace(a, b, **kw):
            real_replace(a, b, **kw)
            if str(a).endswith(".tmp.old"):
                calls["back"] += 1
                if calls["back"] == 1:
                    signal.raise_signal(signal.SIGINT)
            elif str(a).endswith(".tmp") and os.path.dirname(os.path.abspath(b)) == str(out):
                calls["forward"] += 1
                if calls["forward"] == 2:
                    signal.raise_signal(signal.SIGINT)

        monkeypatch.setattr(os, "replace", replace)
    try:
        with pytest.raises(KeyboardInterrupt):
            convert(src, f"{out}/", quiet=True)
    finally:
        monkeypatch.undo()
    assert calls["synced"] or calls["forward"] >= 2  # the interrupts were sent
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(after) == sorted(old), after  # no hidden .tmp.old left
    states = {after[n] == old[n] for n in old}
    assert states == {False} or states == {True}, after  # all new or all old


@pytest.mark.parametrize(
    "target, module, function",
    [
        ("o.hurray", "hurray._files", "save"),
        ("o.safetensors", "hurray._formats", "write"),
        ("o.gguf", "hurray._formats", "write"),
        ("o.npz", "numpy.lib.format", "write_array"),
        ("o.safetensors", "hurray._files.File", "verify"),
    ],
)
def test_the_callers_own_exception_from_a_signal_handler_is_not_relabelled(
    tmp_path, monkeypatch, target, module, function
):
    """The timeout idiom (SIGALRM whose handler raises TimeoutError) came out
    of convert() as ConversionIOError "writing DST: deadline passed" (or
    "writing DST: None"), or as ConversionError "reading tensor ...", so
    `except TimeoutError` missed it, where hurray.save lets it through. An
    OSError that no system call made now propagates unchanged."""
    import importlib

    src = tmp_path / "src.hurray"
    hurray.save(src, {"w": np.ones(8, np.float32)})
    owner_name, _, attr = module.rpartition(".")
    try:
        owner = importlib.import_module(module)
    except ImportError:
        owner = getattr(importlib.import_module(owner_name), attr)

    def deadline(*args, **kwargs):
        raise TimeoutError("deadline passed")

    monkeypatch.setattr(owner, function, deadline)
    with pytest.raises(TimeoutError, match="^deadline passed$"):
        convert(src, tmp_path / target, quiet=True)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == ["src.hurray"]


@pytest.mark.parametrize("target", ["out.hurray", "out.safetensors", "out.gguf", "out.npz"])
def test_a_failed_write_names_the_target_not_the_temporary_file(tmp_path, target):
    """A write the system refused (here RLIMIT_FSIZE: EFBIG) was reported
    with the writer's own message, which names the temporary file it was
    handed: "writing DST: [Errno 27] HURRAY_ERR_IO: write of the temporary
    file for /proc/self/fd/4/.out.hurray.PID-TOKEN.tmp failed: ...". The
    line now gives the target and the system's reason."""
    import resource

    src = tmp_path / "m.hurray"
    hurray.save(src, {"w": np.zeros(1 << 20, np.float32)})  # 4 MiB
    dst = tmp_path / target

    def small_files():
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.RLIM_INFINITY))

    r = subprocess.run(
        [sys.executable, "-m", "hurray", "convert", "-q", str(src), str(dst)],
        preexec_fn=small_files,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r
    assert r.stderr == f"hurray convert: writing {dst}: File too large\n"
    assert sorted(os.listdir(tmp_path)) == ["m.hurray"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_before_python_has_loaded_is_reported_as_an_interruption(tmp_path, signum):
    """The C command hands .npz (and other Python-only) conversions to
    Python; a Ctrl-C while Python imported numpy and the package printed a
    traceback (or numpy's "check your installation"), and SIGTERM killed it
    silently. The command now holds the signals until the converter's try
    can report them. The interpreter here sends itself the signal before it
    starts, the earliest moment there is."""
    from zoo_reference import cli

    exe = cli()
    if exe is None:
        pytest.skip("the C hurray command is not built")
    src = tmp_path / "m.hurray"
    hurray.save(src, {"w": np.ones(4, np.float32)})
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nkill -{int(signum)} $$\nexec {sys.executable} "$@"\n')
    python.chmod(0o755)
    r = subprocess.run(
        [exe, "convert", "-q", str(src), str(tmp_path / "out.npz")],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, HURRAY_PYTHON=str(python)),
    )
    assert (r.returncode, r.stderr) == (128 + signum, "hurray convert: interrupted\n"), r
    assert sorted(os.listdir(tmp_path)) == ["m.hurray", "python"]


def test_holding_signals_restores_every_handler_when_interrupted_while_swapping(monkeypatch):
    """The folder target swapped SIGINT's handler, then SIGTERM's, outside
    its try: a signal between the two left SIGINT recording forever, so a
    library caller's later Ctrl-Cs were swallowed. save_sharded's and DCP's
    copy of the helper still did so; there is one now."""
    from hurray import _deferred

    real = signal.signal
    previous_term = real(signal.SIGTERM, lambda n, f: None)
    try:
        before = signal.getsignal(signal.SIGINT)
        swaps = []

        def signal_between_swaps(signum, handler):
            swaps.append(signum)
            if len(swaps) == 2:  # as the second swap begins
                raise KeyboardInterrupt
            return real(signum, handler)

        monkeypatch.setattr(signal, "signal", signal_between_swaps)
        with pytest.raises(KeyboardInterrupt):
            with _deferred.signals_deferred():
                pass
        monkeypatch.undo()
        assert signal.getsignal(signal.SIGINT) is before
    finally:
        real(signal.SIGTERM, previous_term)


def test_holding_signals_restores_every_handler_when_interrupted_while_restoring(monkeypatch):
    """A Ctrl-C raised as SIGINT's handler came back left SIGTERM's (and
    SIGHUP's) on the recording function for good: later SIGTERMs did
    nothing."""
    from hurray import _deferred

    real = signal.signal
    term = lambda n, f: None  # noqa: E731
    previous_term = real(signal.SIGTERM, term)
    try:
        before = signal.getsignal(signal.SIGINT)

        def interrupted_as_sigint_returns(signum, handler):
            out = real(signum, handler)
            if signum == signal.SIGINT and handler is before:
                raise KeyboardInterrupt
            return out

        with pytest.raises(KeyboardInterrupt):
            with _deferred.signals_deferred():
                monkeypatch.setattr(signal, "signal", interrupted_as_sigint_returns)
        monkeypatch.undo()
        assert signal.getsignal(signal.SIGINT) is before
        assert signal.getsignal(signal.SIGTERM) is term
    finally:
        real(signal.SIGTERM, previous_term)


@pytest.mark.parametrize("scheme", ["q8_0", "q4_0"])
def test_quantizing_values_past_the_float16_scale_fails(tmp_path, scheme):
    """A tensor with |x| = 1e7 converted with --quantize q8_0 (or 6e5 with
    q4_0) was written with infinite block scales, exit 0, and `verify`
    passed it; only the report's "cosine nan" showed it, and -q hid that."""
    import safetensors.numpy as stn

    src, dst = tmp_path / "big.safetensors", tmp_path / "big.hurray"
    w = np.full((2, 32), 1e7, np.float32)
    w[1] = 6e5
    stn.save_file({"w.weight": w}, str(src))
    r = run_cli(src, dst, "--quantize", scheme, "-q")
    assert_one_line_failure(r, contains=f"element 0 (1e+07) is too large for {scheme}")
    assert not dst.exists()


def _raw_safetensors(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(len(text).to_bytes(8, "little") + text + data)


def test_safetensors_offsets_past_the_data_say_so(tmp_path):
    """A lone tensor at [96, 192) of 96 bytes of data was said to start
    "where the tensor before it left a hole": there is none, and the real
    fault is that it lies past the end of the file."""
    src = tmp_path / "past.safetensors"
    _raw_safetensors(
        src, {"a": {"dtype": "F32", "shape": [24], "data_offsets": [96, 192]}}, bytes(96)
    )
    with pytest.raises(
        ConversionError, match=r"lies at bytes \[96, 192\) of the data, past the 96"
    ):
        convert(src, tmp_path / "out.hurray", quiet=True)
    _raw_safetensors(src, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, bytes(16))
    with pytest.raises(ConversionError, match="no tensor holds the bytes before it"):
        convert(src, tmp_path / "out.hurray", quiet=True)
    assert listing(tmp_path) == ["past.safetensors"]


def test_gguf_counting_more_tensors_than_its_table_says_so(tmp_path):
    """tensor_count 5 with one tensor in the table said only "name empty,
    longer than 4096 bytes, or not UTF-8"."""
    src = tmp_path / "m.gguf"
    _one_tensor_gguf(src)
    raw = bytearray(src.read_bytes())
    raw[8:16] = (5).to_bytes(8, "little")  # after magic and version
    src.write_bytes(bytes(raw))
    with pytest.raises(
        ConversionError, match="tensor 1 of the 5 the header counts: .*a tensor count larger"
    ):
        convert(src, tmp_path / "out.hurray", quiet=True)


def _raw_npy(path, header: str, data: bytes = b"") -> None:
    text = header.encode("latin1")
    text += b" " * ((-(10 + len(text) + 1)) % 64) + b"\n"
    path.write_bytes(b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + data)


@pytest.mark.parametrize(
    "header, data, said",
    [
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (100000000000000000000,), }",
            bytes(96),
            "its header says (100000000000000000000,) of float32",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 2), }",
            bytes(96),
            "bytes, and the file holds 96 after it",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (9223372036854775807, 9223372036854775807, 0), }",
            b"",
            "is too large for numpy to map",
        ),
        (
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4, 6), }",
            bytes(50),
            "96 bytes, and the file holds 50 after it",
        ),
        (
            "dict(descr='<f4', fortran_order=False, shape=(2,))",
            bytes(8),
            "its .npy header is not valid: it is not a dict of Python literals",
        ),
    ],
)
def test_npy_headers_that_do_not_fit_the_file_are_refused_in_one_line(tmp_path, header, data, said):
    """These gave an "internal error" (OverflowError: Python int too large
    to convert to C long), numpy's overflow warnings on stderr before the
    message, "mmap length is greater than file size", or ast's words with
    an object's address."""
    src = tmp_path / "a.npy"
    _raw_npy(src, header, data)
    r = run_cli(src, tmp_path / "a.hurray", "-q")
    assert_one_line_failure(r, contains=said)
    assert listing(tmp_path) == ["a.npy"]


def test_convert_help_that_cannot_be_written_fails():
    """argparse drops the OSError of writing its help: `hurray convert
    --help >/dev/full` printed nothing and exited 0."""
    with open(os.devnull, "w") as null:
        ok = subprocess.run([sys.executable, "-m", "hurray", "convert", "--help"], stdout=null)
    assert ok.returncode == 0
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with open("/dev/full", "w") as full:
        r = subprocess.run(
            [sys.executable, "-m", "hurray", "convert", "--help"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
        )
    assert r.returncode == 1
    assert r.stderr.strip() == "hurray: writing to stdout failed: No space left on device"


def test_a_folder_holding_another_checkpoint_is_refused(tmp_path):
    """Converting into a folder that held a sharded checkpoint wrote
    model.safetensors beside the old index and shards, exit 0, and the folder
    read back as the old weights (the index wins). Files of the same names
    as the new ones are still replaced."""
    from safetensors.numpy import save_file

    folder = tmp_path / "folder"
    folder.mkdir()
    save_file({"old_a": np.zeros(4, np.float32)}, folder / "model-00001-of-00002.safetensors")
    save_file({"old_b": np.zeros(4, np.float32)}, folder / "model-00002-of-00002.safetensors")
    (folder / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "metadata": {},
                "weight_map": {
                    "old_a": "model-00001-of-00002.safetensors",
                    "old_b": "model-00002-of-00002.safetensors",
                },
            }
        )
    )
    (folder / "tokenizer.json").write_text("{}")
    before = listing(folder)
    src = tmp_path / "new.hurray"
    hurray.save(src, {"new_w": np.ones(3, np.float32)})
    r = run_cli(src, folder)
    assert_one_line_failure(r, contains="holds another checkpoint's files")
    assert "model.safetensors.index.json" in r.stderr
    assert listing(folder) == before
    for name in ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"):
        (folder / name).unlink()
    (folder / "model.safetensors.index.json").unlink()
    r = run_cli(src, folder)
    assert r.returncode == 0, r.stderr
    r = run_cli(src, folder)  # its own files again: replaced
    assert r.returncode == 0, r.stderr
    back = tmp_path / "back.hurray"
    assert run_cli(folder, back).returncode == 0
    assert hurray.open(back).keys() == ["new_w"]


def test_keep_scales_with_dequantize_is_a_usage_error(tmp_path):
    """--keep-scales --dequantize converted, exit 0, and dropped
    --keep-scales."""
    src = tmp_path / "q.hurray"
    hurray.save(src, {"w": hurray.quantize(np.ones((4, 64), np.float32), "q8_0")})
    r = run_cli(src, tmp_path / "out.safetensors", "--keep-scales", "--dequantize")
    assert r.returncode == 2, r.stderr
    assert "--dequantize and --keep-scales do not go together" in r.stderr
    assert not (tmp_path / "out.safetensors").exists()


def _open_fds_to(folder) -> list:
    """This process's descriptors whose target lies in `folder`."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)):
            out.append(target)
    return out


def test_an_interrupt_as_a_descriptor_opens_does_not_leak_it(tmp_path, monkeypatch):
    """A Ctrl-C raised as os.open returned, before the descriptor was
    stored, lost it: publish()'s held the finished temporary file open (and
    its disk space) until the process ended. Here SIGINT arrives inside
    every os.open the conversion makes, one conversion at a time."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach the main thread only")
    src = tmp_path / "s.hurray"
    hurray.save(src, {"w": np.arange(64, dtype=np.float32)})
    real_open = os.open
    calls = []

    def interrupted_open(*args, **kwargs):
        fd = real_open(*args, **kwargs)
        calls.append(args[0])
        if len(calls) == target_call:
            os.kill(os.getpid(), signal.SIGINT)  # the handler runs as this returns
        return fd

    monkeypatch.setattr(os, "open", interrupted_open)
    out = tmp_path / "out"
    out.mkdir()
    for target_call in range(1, 8):
        calls.clear()
        try:
            convert(src, out / "o.safetensors", quiet=True)
        except KeyboardInterrupt:
            pass
        assert _open_fds_to(tmp_path) == [], (target_call, calls)
    monkeypatch.undo()
    assert [p.name for p in out.iterdir() if p.name != "o.safetensors"] == []


def test_a_failed_conversion_to_pt_frees_what_it_read(tmp_path):
    """The OSError of a failed write was kept with its traceback, whose
    frames hold torch's writer, which holds the sink that kept it: a cycle
    the collector cannot see, and every failed conversion kept the source
    mapped and its tensors in memory."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        # torch's writer reports the failed write with a C++ exception, whose
        # throw a preloaded ASan runtime cannot intercept (test-python-asan).
        pytest.skip("torch's C++ exceptions abort under a preloaded ASan runtime")
    src = tmp_path / "s.hurray"
    hurray.save(src, {"w": np.arange(1 << 18, dtype=np.float32)})
    script = textwrap.dedent(
        f"""
        import gc, resource, signal, hurray
        from hurray.convert import ConversionError, convert
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        for _ in range(5):
            try:
                convert({str(src)!r}, {str(tmp_path / "o.pt")!r}, quiet=True)
            except ConversionError:
                pass
        gc.collect()
        print(sum({str(src)!r} in line for line in open("/proc/self/maps")))
        """
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "0"
