"""Reading files where they live (issue 20): HTTP range requests against a
real server on 127.0.0.1 that counts requests and bytes, fsspec memory://
and file://, servers that lie, and `hurray ls|info|verify URL` from the
pip-installed command. Anything that could crash the process (the C
reader calling back into Python) also runs once in a subprocess."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time
from typing import List

import numpy as np
import pytest

import hurray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from range_server import RangeServer  # noqa: E402

SUFFIX = hurray._remote.SUFFIX_BYTES
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.dirname(sys.executable)


def _tensors():
    rng = np.random.default_rng(20)
    out = {
        f"layer{i:02d}.weight": rng.standard_normal((256, 128 + 64 * i)).astype(np.float32)
        for i in range(8)
    }
    out["embed"] = rng.standard_normal((4096, 64)).astype(np.float16)
    out["q"] = hurray.quantize(rng.standard_normal((512, 256)).astype(np.float32), "q8_0")
    out["tiny"] = np.arange(3, dtype=np.int64)
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A file of about 2.6 MiB (larger than the suffix read at open) and a small one."""
    folder = tmp_path_factory.mktemp("remote")
    big = folder / "big.hurray"
    tensors = _tensors()
    hurray.save(big, tensors, {"producer": "test_remote", "step": 7})
    small = folder / "small.hurray"
    hurray.save(small, {"a": np.arange(10, dtype=np.float32)}, {"k": "v"})
    return {
        "big": big,
        "small": small,
        "tensors": tensors,
        "big_bytes": big.read_bytes(),
        "small_bytes": small.read_bytes(),
    }


@pytest.fixture()
def server(files):
    with RangeServer(
        {"/big.hurray": files["big_bytes"], "/small.hurray": files["small_bytes"]}
    ) as s:
        yield s


def _buffer_bytes(t):
    return [bytes(memoryview(b).cast("B")) for b in t.buffers]


def _ranges(server):
    out = []
    for _, spec, sent in server.log:
        first, last = spec[len("bytes=") :].split("-")
        out.append((first, last, sent))
    return out


def _buffer_spans(path, name):
    """(start, end) of each buffer of `name` in the file, from the index
    (through the local reader: read_buffer offsets are not public, so the
    bytes of each buffer are located by content)."""
    data = path.read_bytes()
    spans = []
    with hurray.open(path) as f:
        for i, b in enumerate(f.descriptor(name).buffers):
            raw = bytes(f.read_buffer(name, i))
            at = data.find(raw) if raw else -1
            spans.append((at, at + len(raw)))
    return spans


def test_open_costs_two_requests(files, server):
    f = hurray.open(server.url("/big.hurray"))
    assert server.requests == 2
    specs = sorted(spec for _, spec, _ in server.log)
    assert specs == [f"bytes=-{SUFFIX}", "bytes=0-63"]
    assert server.bytes_sent == SUFFIX + 64
    assert sorted(f.keys()) == sorted(files["tensors"])
    assert f.metadata == {"producer": "test_remote", "step": 7}
    assert f.requests == 2
    f.close()


def test_small_file_whole_in_the_first_request(files, server):
    with hurray.open(server.url("/small.hurray")) as f:
        assert server.requests <= 2
        assert server.bytes_sent <= len(files["small_bytes"]) + 64
        server.reset()
        np.testing.assert_array_equal(np.asarray(f["a"]), np.arange(10, dtype=np.float32))
        assert server.requests == 0  # already in the suffix


@pytest.mark.parametrize("name", ["layer00.weight", "layer03.weight", "q", "embed"])
def test_one_tensor_one_request_only_its_bytes(files, server, name):
    f = hurray.open(server.url("/big.hurray"))
    server.reset()
    t = f[name]
    spans = _buffer_spans(files["big"], name)
    lo, hi = min(s for s, _ in spans), max(e for _, e in spans)
    suffix_start = len(files["big_bytes"]) - SUFFIX
    if lo >= suffix_start:
        assert server.requests == 0
    else:
        assert server.requests == 1
        first, last, sent = _ranges(server)[0]
        assert int(first) == lo
        # Only this tensor's bytes: its buffers and the padding between them
        # (under 4 KiB each), nothing kept from open fetched again.
        assert int(last) + 1 <= hi
        assert sent <= sum(e - s for s, e in spans) + 4096 * len(spans)
    want = files["tensors"][name]
    if isinstance(want, np.ndarray):
        np.testing.assert_array_equal(np.asarray(t), want)
    else:
        assert _buffer_bytes(t) == _buffer_bytes(want)
    f.close()


def test_get_tensors_and_load_match_local(files, server):
    local = hurray.load(files["big"], mmap=False)
    with hurray.open(server.url("/big.hurray"), threads=4) as f:
        server.reset()
        got = f.get_tensors(list(f.keys()))
        # Tensors next to each other are fetched together: the whole data
        # region before the suffix kept from open, in one request, each
        # byte once.
        assert server.requests == 1
        assert server.bytes_sent <= len(files["big_bytes"]) - SUFFIX
        server.reset()
        # In windows of at most 512 KiB: more requests, same bytes.
        raw = hurray._remote.prefetched_get(f._file, f._source, list(f.keys()), 512 << 10)
        assert 1 < server.requests <= len(local)
        assert server.bytes_sent <= len(files["big_bytes"]) - SUFFIX
        assert sorted(raw) == sorted(local)
    remote = hurray.load(server.url("/big.hurray"))
    for name, t in local.items():
        for out in (got[name], remote[name]):
            assert out.descriptor == t.descriptor
            assert _buffer_bytes(out) == _buffer_bytes(t)


def test_verify_reads_each_byte_once(files, server):
    with hurray.open(server.url("/big.hurray")) as f:
        f.verify()
    covered = []
    size = len(files["big_bytes"])
    for first, last, sent in _ranges(server):
        start = size - int(last) if first == "" else int(first)
        end = size if first == "" else int(last) + 1
        assert sent == end - start
        covered.append((start, end))
    covered.sort()
    for (a, b), (c, d) in zip(covered, covered[1:]):
        assert b <= c, f"bytes {c}..{b} fetched twice"
    # Nothing fetched but header, tensor data and the tail read at open.
    assert server.bytes_sent <= size


def test_verify_of_a_sparse_tensor_reads_its_values_once(tmp_path):
    """verify checks placement after the checksums; for a sparse tensor
    that reads its indices, and it used to fetch the whole tensor again,
    values included (a second download of what may be gigabytes)."""
    scipy_sparse = pytest.importorskip("scipy.sparse")
    m = scipy_sparse.random(64, 4096, density=0.5, format="csr", random_state=3)
    path = tmp_path / "sparse.hurray"
    hurray.save(path, {"m": m.astype(np.float64)})
    data = path.read_bytes()
    with RangeServer({"/s.hurray": data}) as s:
        with hurray.open(s.url("/s.hurray")) as f:
            f.verify()
        values = m.nnz * 8
        assert s.bytes_sent < len(data) + values // 2, (s.bytes_sent, len(data))


def test_a_read_checks_chunks_as_verify_does(tmp_path):
    """Verify checks a buffer longer than a chunk against its chunk
    checksums in every mode; a URL read with verify_reads checked its whole
    checksum, so a file whose chunk table was damaged verified as bad and
    read as good (and the other way round)."""
    from _file_edits import reseal

    path = tmp_path / "chunked.hurray"
    big = np.arange(9 << 20, dtype=np.uint8)  # three 4 MiB chunks
    hurray.save(path, {"big": big})
    blob = bytearray(path.read_bytes())
    table = blob.rindex(b"hurray.chunk_checksums") + len(b"hurray.chunk_checksums")
    assert blob[table] == 6  # the type; then u32 value_len, u64 chunk_size, the sums
    blob[table + 1 + 4 + 8 + 8] ^= 1  # the second chunk's sum
    reseal(blob)
    with RangeServer({"/c.hurray": bytes(blob)}) as s:
        with hurray.open(s.url("/c.hurray")) as f:
            with pytest.raises(hurray.ChecksumError, match=r"in bytes \[4194304, 8388608\)"):
                f.verify()
            with pytest.raises(hurray.ChecksumError, match=r"in bytes \[4194304, 8388608\)"):
                f["big"]


def test_large_index_needs_a_third_request(tmp_path):
    tensors = {f"t{i:05d}": np.full(4, i, np.int32) for i in range(300)}
    path = tmp_path / "many.hurray"
    hurray.save(path, tensors)
    with RangeServer({"/m.hurray": path.read_bytes()}) as s:
        with hurray.open(s.url("/m.hurray"), suffix_bytes=4096) as f:
            assert s.requests == 3
            assert len(f) == 300
            s.reset()
            got = f.get_tensors(["t00000", "t00299"])
            assert s.requests <= 2
            np.testing.assert_array_equal(np.asarray(got["t00299"]), np.full(4, 299, np.int32))


def test_get_slice_and_read_buffer_remote(files, server):
    with hurray.open(server.url("/big.hurray")) as f:
        server.reset()
        rows = f.get_slice("layer02.weight", 10, 14)
        np.testing.assert_array_equal(np.asarray(rows), files["tensors"]["layer02.weight"][10:14])
        assert server.requests == 1
        assert server.bytes_sent == 4 * 256 * 4
        out = f.read_buffer("tiny", 0)
        assert bytes(out) == files["tensors"]["tiny"].tobytes()


# ------------------------------------------------------------------ fsspec


def test_fsspec_memory_and_file(files):
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    with fs.open("/remote-test/big.hurray", "wb") as out:
        out.write(files["big_bytes"])
    for url in ("memory:///remote-test/big.hurray", "file://" + str(files["big"])):
        with hurray.open(url) as f:
            assert sorted(f.keys()) == sorted(files["tensors"])
            got = f.get_tensors(["layer01.weight", "embed"])
            np.testing.assert_array_equal(np.asarray(got["embed"]), files["tensors"]["embed"])
            f.verify()
        loaded = hurray.load(url)
        np.testing.assert_array_equal(
            np.asarray(loaded["layer07.weight"]), files["tensors"]["layer07.weight"]
        )
    with pytest.raises(FileNotFoundError):
        hurray.open("memory:///remote-test/absent.hurray")
    fs.rm("/remote-test/big.hurray")


# ------------------------------------------------------------------ faults


def test_an_encoded_answer_is_refused(files, server):
    """A range answered gzip-encoded (asked for as it is) was read as the
    file's bytes: get_slice and unchecked reads returned other values with
    no error, and checked ones blamed the file (ChecksumError)."""
    url = server.url("/big.hurray")
    kw = dict(retries=0, timeout=5.0)
    with hurray.open(url, **kw) as f:
        server.fault = "gzip"
        try:
            for read in (
                lambda: f.get_slice("embed", 0, 2),
                lambda: f["embed"],
                lambda: f.verify(),
            ):
                with pytest.raises(hurray.RemoteProtocolError, match="gzip-encoded"):
                    read()
        finally:
            server.fault = None
        np.testing.assert_array_equal(np.asarray(f["embed"]), files["tensors"]["embed"])
    with hurray.open(url, verify_reads=False, **kw) as f:
        server.fault = "gzip"
        try:
            with pytest.raises(hurray.RemoteProtocolError, match="gzip-encoded"):
                f["embed"]
        finally:
            server.fault = None


def test_lying_servers(files, server):
    url = server.url("/big.hurray")
    kw = dict(retries=1, timeout=2.0)
    server.fault = "ignore_range"
    with pytest.raises(hurray.RemoteProtocolError, match="ignored the Range"):
        hurray.open(url, **kw)
    server.fault = "wrong_range"
    with pytest.raises(hurray.RemoteProtocolError, match="Content-Range"):
        hurray.open(url, **kw)
    server.fault = "short"
    server.reset()
    with pytest.raises(hurray.RemoteProtocolError, match="ended"):
        hurray.open(url, **kw)
    assert server.requests >= 2  # retried
    server.fault = "slow"
    server.slow_seconds = 1.0
    with pytest.raises(hurray.RemoteTimeoutError) as info:
        hurray.open(url, retries=0, timeout=0.2)
    assert isinstance(info.value, TimeoutError) and isinstance(info.value, OSError)
    assert isinstance(info.value, hurray.HurrayError)
    server.fault = "flaky"
    server.reset()
    with hurray.open(url, retries=3) as f:  # two 503s, then answers
        assert len(f) == len(files["tensors"])
    server.fault = None
    with pytest.raises(hurray.RemoteNotFoundError) as missing:
        hurray.open(server.url("/absent.hurray"))
    assert isinstance(missing.value, FileNotFoundError)
    for cls in (
        hurray.RemoteError,
        hurray.RemoteProtocolError,
        hurray.RemoteChangedError,
        hurray.RemoteNotFoundError,
        hurray.RemoteTimeoutError,
    ):
        assert issubclass(cls, OSError) and issubclass(cls, hurray.HurrayError)


def test_a_body_that_drips_is_a_timeout(files, server):
    """Each byte comes well within the read timeout, so only the floor on
    the body's rate ends the request: before it, the 256 KiB suffix at 20
    bytes a second took three and a half hours."""
    server.fault = "drip"
    server.drip_seconds = 0.05
    started = time.monotonic()
    with pytest.raises(hurray.RemoteTimeoutError, match="bytes/s floor") as info:
        hurray.open(server.url("/big.hurray"), retries=1, timeout=0.5)
    assert isinstance(info.value, TimeoutError)
    assert time.monotonic() - started < 10
    suffixes = [r for _, r, _ in server.log if r.startswith("bytes=-")]
    assert len(suffixes) == 2, server.log  # a timeout is retried


def test_server_claiming_a_huge_file(files, server):
    """The claimed size plays the file size: the trailer's index no longer
    ends where the trailer starts, refused before anything is sized by it."""
    server.fault = "huge"
    with pytest.raises(hurray.FormatError):
        hurray.open(server.url("/big.hurray"))
    assert server.bytes_sent <= SUFFIX + 64


def test_file_changed_between_requests(files, server):
    url = server.url("/big.hurray")
    f = hurray.open(url)
    server.fault = "change"  # from the next request on, another ETag
    with pytest.raises(hurray.RemoteChangedError):
        f["layer00.weight"]
    f.close()


def test_corrupt_data_is_caught_by_checksums(files):
    data = bytearray(files["big_bytes"])
    spans = _buffer_spans(files["big"], "layer01.weight")
    data[spans[0][0] + 100] ^= 0xFF
    with RangeServer({"/bad.hurray": bytes(data)}) as s:
        with hurray.open(s.url("/bad.hurray")) as f:
            with pytest.raises(hurray.ChecksumError):
                f["layer01.weight"]
            with pytest.raises(hurray.ChecksumError):
                f.verify()
            f["layer00.weight"]  # intact neighbours still read
        with hurray.open(s.url("/bad.hurray"), verify_reads=False) as f:
            f["layer01.weight"]  # unchecked, as asked


def test_hostile_structure_refused_like_a_local_file(files, tmp_path):
    data = bytearray(files["small_bytes"])
    data[-70] ^= 0x01  # inside the index: its checksum no longer matches
    local = tmp_path / "bad.hurray"
    local.write_bytes(bytes(data))
    with pytest.raises(hurray.ChecksumError):
        hurray.open(local)
    with RangeServer({"/bad.hurray": bytes(data)}) as s:
        with pytest.raises(hurray.ChecksumError):
            hurray.open(s.url("/bad.hurray"))
        s.files["/junk"] = b"\x00" * 300
        with pytest.raises(hurray.FormatError):
            hurray.open(s.url("/junk"))


def test_in_a_subprocess(files, server):
    """The C reader calling back into Python, from several threads, in a
    process of its own: a crash would fail this test, not the run."""
    code = textwrap.dedent(f"""
        import hurray, numpy as np
        f = hurray.open({server.url("/big.hurray")!r}, threads=4)
        for _ in range(3):
            got = f.get_tensors(list(f.keys()))
        f.verify()
        f.close()
        try:
            f["embed"]
        except ValueError:
            print("closed ok")
        print(len(got))
    """)
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["closed", "ok", str(len(files["tensors"]))]


def test_ctrl_c_reaches_a_thread_waiting_for_the_files_lock(files, server):
    """While another thread's verify waited on a slow server, holding the
    File's lock, the main thread's keys() waited for that lock with no way
    to interrupt it: Ctrl-C came out only when the server answered."""
    code = textwrap.dedent(f"""
        import os, signal, threading, time, hurray
        f = hurray.open({server.url("/big.hurray")!r}, retries=1, timeout=30)
        threading.Thread(target=f.verify, daemon=True).start()
        time.sleep(0.5)
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        started = time.monotonic()
        try:
            f.keys()
            print("no interrupt", flush=True)
        except KeyboardInterrupt:
            print("interrupted", time.monotonic() - started < 4, flush=True)
        os._exit(0)  # not waiting for the verify thread: flushed above
    """)
    size = len(files["big_bytes"])  # what open reads ends the file; verify's do not
    server.on_range = lambda start, end: time.sleep(6) if end < size - 1 else None
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.stdout.split() == ["interrupted", "True"], (p.stdout, p.stderr)


def test_a_forked_child_reads_through_its_own_threads_and_connections(tmp_path):
    """After the parent had fetched on the pool's threads (tensors of more
    than 16 MiB), a forked child's fetches waited for ever: its executor
    believed it had the parent's idle workers and started none. The child
    now makes its own threads and connections (python-bindings.md: a child
    can use the File)."""
    path = tmp_path / "large.hurray"
    hurray.save(path, {f"t{i}": np.full(5 << 20, i, np.float32) for i in range(2)})
    with RangeServer({"/large.hurray": path.read_bytes()}) as large:
        url = large.url("/large.hurray")
        p = _fork_and_read(url)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["child", "0", "parent", "True"], p.stdout


def _fork_and_read(url):
    # A thread of the parent holds the backend's lock at the fork, as one
    # counting its request does: it stays held in the child.
    code = textwrap.dedent(f"""
        import os, signal, threading, time, hurray
        from hurray import _remote
        f = hurray.open({url!r}, threads=4)
        names = list(f.keys())
        f.get_tensors(names)
        backend = next(o for o in list(_remote._AFTER_FORK) if isinstance(o, _remote.HttpBackend))
        held = threading.Event()
        def hold():
            with backend._lock:
                held.set()
                time.sleep(3)
        threading.Thread(target=hold, daemon=True).start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)
            got = f.get_tensors(names)
            f.verify()
            os._exit(0 if len(got) == len(names) else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        print("parent", len(f.get_tensors(names)) == len(names))
    """)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


# --------------------------------------------------------------------- CLI


@pytest.mark.parametrize("command", ["ls", "info", "verify"])
def test_cli_on_a_url(files, server, command):
    launcher = os.path.join(SCRIPTS, "hurray")
    if not os.path.exists(launcher):
        pytest.skip("no pip-installed hurray command")
    url = server.url("/big.hurray")
    env = dict(os.environ)
    env.pop("HURRAY_PYTHON", None)
    p = subprocess.run(
        [launcher, command, url], capture_output=True, text=True, timeout=120, env=env
    )
    assert p.returncode == 0, p.stderr
    local = subprocess.run(
        [launcher, command, str(files["big"])], capture_output=True, text=True, timeout=120
    )
    if command == "ls":
        if local.returncode == 0:  # the C program (absent in the ASan tree)
            assert p.stdout.split() == local.stdout.split()
        assert "layer00.weight" in p.stdout
    elif command == "verify":
        assert "OK" in p.stdout and str(len(files["tensors"])) in p.stdout
    else:
        assert "tensors: %d" % len(files["tensors"]) in p.stdout
    bad = subprocess.run(
        [launcher, command, server.url("/absent.hurray")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and "404" in bad.stderr


def test_cli_verify_counts_agree_with_their_nouns(files, server):
    """verify of a file of one tensor said "OK, 1 tensors, 1 buffers
    verified", from a URL as from a path."""
    launcher = _launcher()
    env = dict(os.environ)
    env.pop("HURRAY_PYTHON", None)

    def verify(where):
        return subprocess.run(
            [launcher, "verify", where], capture_output=True, text=True, timeout=120, env=env
        )

    url = verify(server.url("/small.hurray"))
    assert url.returncode == 0, url.stderr
    assert url.stdout.endswith(": OK, 1 tensor, 1 buffer verified\n"), url.stdout
    local = verify(str(files["small"]))
    if local.returncode == 0:  # the C program (absent in the ASan tree)
        assert local.stdout.endswith(": OK, 1 tensor, 1 buffer verified\n"), local.stdout


def _launcher():
    launcher = os.path.join(SCRIPTS, "hurray")
    if not os.path.exists(launcher):
        pytest.skip("no pip-installed hurray command")
    return launcher


@pytest.mark.parametrize("planted", ["hurray/__init__.py", "numpy.py"])
def test_cli_on_a_url_runs_no_code_from_the_current_directory(files, server, tmp_path, planted):
    """The launcher ran `python -m hurray`, which puts the current directory
    first on sys.path: `hurray ls URL` in a folder holding a hurray/ or a
    numpy.py ran that code in place of the installed package."""
    launcher = _launcher()
    target = tmp_path / planted
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("import sys\nprint('PLANTED CODE RAN')\nsys.exit(99)\n")
    p = subprocess.run(
        [launcher, "ls", server.url("/big.hurray")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert "PLANTED" not in p.stdout + p.stderr and p.returncode == 0, (p.returncode, p.stderr)
    assert "layer00.weight" in p.stdout


@pytest.fixture(scope="module")
def varied(tmp_path_factory):
    """Every column `ls` and `info` format differently: a sparse layout,
    statistics, block-coded and MX quantization, bool/bytes/float metadata,
    and names and values with terminal control sequences (an untrusted
    remote file must not drive the terminal)."""
    path = tmp_path_factory.mktemp("varied") / "varied.hurray"
    rng = np.random.default_rng(3)
    w = rng.standard_normal((8, 64)).astype(np.float32)
    coded = hurray.Tensor(
        hurray.Descriptor(
            "uint8",
            (1, 256),
            quantization=hurray.BlockCoded(format="ggml_q4_k", axis=1, block_size=256),
            buffers=[hurray.Buffer("data", 144)],
        ),
        [np.zeros(144, np.uint8)],
    )
    sparse = hurray.SparseTensor.from_arrays(
        "coo", (4, 4), np.ones(2, np.float32), coords=[np.array([0, 1]), np.array([1, 2])]
    )
    hurray.save(
        path,
        {
            "dense": w,
            "mx": hurray.quantize(w, "mxfp4"),
            "q4k": coded,
            "sp": sparse,
            "evil\x1b[31m\\\u202e": np.zeros(2, np.float32),
        },
        metadata={
            "s": "v\x1b[2J",
            "b": True,
            "by": b"\x00\x01",
            "f": 0.1,
            "n": float("nan"),
            "ni": -float("inf"),
            "ns": "nan",
            "fi": 5.0,
            "fz": -0.0,
        },
        statistics=True,
    )
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["ls", "--help", "FILE"],
        ["info", "--json", "--json", "FILE"],
        ["info", "FILE", "--", "-dash"],
        ["info", "--", "FILE", "--json"],
        ["info", "FILE", "-x"],
        ["ls", "FILE", "a", "b"],
        ["info", "FILE", "a", "b", "c"],
        ["ls", "FILE"],
        ["info", "--json", "FILE"],
    ],
)
def test_the_url_path_reads_arguments_and_prints_as_the_c_command(tmp_path, args):
    """Options were read differently (--help, a repeated --json and "--"
    were usage errors, "--" only worked first), names were padded by
    characters where C pads by bytes, a negative NaN printed as "nan" where
    C prints "-nan", and C's ls put two spaces only before min=."""
    launcher = _launcher()
    path = tmp_path / "p.hurray"
    hurray.save(
        path,
        {
            "-dash": np.ones(3, np.float32),
            "--json": np.ones(2, np.float32),
            "naïve ünïcode": np.ones(2, np.float32),
            "empty": np.zeros((0, 3), np.float32),
        },
        metadata={"n": -float("nan")},
        statistics=True,
    )
    local = subprocess.run(
        [launcher, *(str(path) if a == "FILE" else a for a in args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if local.returncode == 127 or "has no hurray package" in local.stderr:
        pytest.skip("the C program is absent in this tree")
    with RangeServer({"/p.hurray": path.read_bytes()}) as s:
        url = s.url("/p.hurray")
        remote = subprocess.run(
            [launcher, *(url if a == "FILE" else a for a in args)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert (remote.returncode, remote.stderr) == (local.returncode, local.stderr)
    assert remote.stdout.replace(url, "FILE") == local.stdout.replace(str(path), "FILE")
    if args == ["ls", "FILE"]:
        assert "0  nan=0 zeros=0\n" in local.stdout
    if args == ["info", "--json", "FILE"]:
        assert '"n": {"float": "nan"}' in local.stdout  # no sign: the spec's three words


@pytest.mark.parametrize("command", [["info"], ["cat"]])
def test_a_missing_name_is_reported_as_the_url_path_reports_it(varied, command):
    """The C command named the status constant where every other message
    names the file: "hurray: HURRAY_ERR_NOT_FOUND: no tensor ...", and the
    URL path "hurray: URL: no tensor ..."."""
    launcher = _launcher()
    local = subprocess.run(
        [launcher, *command, str(varied), "nope"], capture_output=True, text=True, timeout=120
    )
    if local.returncode == 127 or "has no hurray package" in local.stderr:
        pytest.skip("the C program is absent in this tree")
    assert local.returncode == 1
    assert local.stderr == f'hurray: {varied}: no tensor "nope" in the file\n'
    if command == ["info"]:
        with RangeServer({"/v.hurray": varied.read_bytes()}) as s:
            url = s.url("/v.hurray")
            remote = subprocess.run(
                [launcher, "info", url, "nope"], capture_output=True, text=True, timeout=120
            )
        assert remote.returncode == 1
        assert remote.stderr == f'hurray: {url}: no tensor "nope" in the file\n'


@pytest.mark.parametrize(
    "args", [["ls", "URL"], ["info", "URL"], ["info", "--json", "URL"], ["info", "URL", "sp"]]
)
def test_cli_on_a_url_prints_what_the_c_command_prints(varied, args):
    """`hurray ls|info URL` printed Python's own renderings: "sparse" for
    sparse-coo, "block-coded" for ggml_q4_k, no statistics, True and
    b'\\x00\\x01' for metadata, a blank line after every descriptor, no
    `info --json` or `info URL NAME` at all, and names unescaped, so a
    hostile file's escape sequences reached the terminal."""
    launcher = _launcher()
    with RangeServer({"/v.hurray": varied.read_bytes()}) as s:
        url = s.url("/v.hurray")
        remote = subprocess.run(
            [launcher, *(url if a == "URL" else a for a in args)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert remote.returncode == 0, remote.stderr
    out = remote.stdout
    assert "\x1b" not in out and "\u202e" not in out
    if args == ["ls", "URL"]:
        assert "sparse-coo" in out and "ggml_q4_k" in out and "mxfp4-e2m1" in out
        assert "min=" in out and "zeros=" in out
        assert "evil\\x1b[31m\\\\\\u{202e}" in out
    elif args == ["info", "URL"]:
        assert (
            "b = true" in out and "by = <2 bytes> 0001" in out and "f = 0.10000000000000001" in out
        )
        assert "\n\n\n" not in out and "}\n\n\n" not in out and "}\n\ntensor" in out
    elif args == ["info", "--json", "URL"]:
        import json

        doc = json.loads(out)
        meta = doc["metadata"]
        assert meta["by"] == {"bytes_hex": "0001"} and meta["n"] == {"float": "nan"}
        # A float NaN and the string "nan" read apart (they were both "nan").
        assert meta["ni"] == {"float": "-inf"} and meta["ns"] == "nan"
        # An integral float reads as a float (it was "5", an int), -0.0 keeps its sign.
        assert type(meta["fi"]) is float and meta["fi"] == 5.0
        assert type(meta["fz"]) is float and str(meta["fz"]) == "-0.0"
        assert doc["tensors"]["sp"]["layout"]["kind"] == "sparse"
    else:
        assert "tensor sp:" in out and "tensor dense" not in out
    local_cmd = [launcher, *(str(varied) if a == "URL" else a for a in args)]
    local = subprocess.run(local_cmd, capture_output=True, text=True, timeout=120)
    if local.returncode == 0:  # the C program (absent in the ASan tree)
        assert out.replace(url, str(varied)) == local.stdout


def test_cli_on_a_url_into_a_closed_pipe_is_quiet(tmp_path):
    # `hurray ls URL | head -2` printed "[Errno 32] Broken pipe" on stderr;
    # the C command, ended by SIGPIPE, prints nothing there.
    path = tmp_path / "many.hurray"
    hurray.save(path, {f"t{i}": np.ones(2, np.float32) for i in range(3000)})
    with RangeServer({"/m.hurray": path.read_bytes()}) as s:
        p = subprocess.Popen(
            [_launcher(), "ls", s.url("/m.hurray")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert p.stdout.readline().startswith(b"NAME")
        p.stdout.close()
        _, err = p.communicate(timeout=120)
    assert err == b"" and p.returncode in (141, -13), (p.returncode, err)


def _batch_cut_short(tmp_path, on_range: str, caught: str, said: str) -> List[str]:
    """Runs verify() of a file whose a and c are read in one batch of two
    parallel runs (a with the first 60 MiB of z_mid's chunks, c 8 MiB
    further on), with `on_range(start, end)` (source text; a and c are the
    offsets of their data) as the server's hook; what the subprocess says:
    whether c's run ended before `caught` was raised, and whether memory
    allocated after the reader freed the batch stayed clean. In a
    subprocess, as it crashed."""
    code = textwrap.dedent(
        f"""
        import os, signal, sys, threading, time, numpy as np, hurray
        sys.path.insert(0, {HERE!r})
        from range_server import RangeServer
        p = {str(tmp_path / "gap.hurray")!r}
        hurray.save(p, {{"a": np.full(1 << 18, 1.0, np.float32),
                         "z_mid": np.zeros(17 << 20, np.float32),
                         "c": np.full(1 << 18, 3.0, np.float32)}})
        data = open(p, "rb").read()
        a = data.find(np.full(16, 1.0, np.float32).tobytes())
        c = data.find(np.full(16, 3.0, np.float32).tobytes())
        done = {{}}
        """
    )
    code += textwrap.dedent(on_range)
    code += textwrap.dedent(
        f"""
        with RangeServer({{"/gap.hurray": data}}) as s:
            f = hurray.open(s.url("/gap.hurray"))
            s.on_range = on_range
            try:
                f.verify()
                print("verified")
            except {caught}:
                raised = time.monotonic()
                print("c served before the {said}" if done.get("c", raised) < raised else "early")
            f.close()
            junk = [np.zeros(2 << 20, np.uint8) for _ in range(8)]
            time.sleep(1.5)
            print("clean" if not any(j.any() for j in junk) else "overwritten")
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()


def test_a_failed_batch_waits_for_its_other_runs(tmp_path):
    """When a's run failed, the error went up at once while c's run was
    still fetching: c's late bytes were written into the batch's buffer,
    which C had freed (heap corruption, abort). Now the error waits until
    c's run is done."""
    on_range = """
        def on_range(start, end):
            if start <= a < end:
                return 404
            if start <= c < end:
                time.sleep(1.0)
                done["c"] = time.monotonic()
            return None
    """
    said = _batch_cut_short(tmp_path, on_range, "hurray.RemoteError", "error")
    assert said == ["c", "served", "before", "the", "error", "clean"], said


def test_ctrl_c_waits_for_the_runs_it_interrupted(tmp_path):
    """As above, with Ctrl-C instead of a failed run: the KeyboardInterrupt
    that ended the wait for c's run went up at once (SIGSEGV, a
    heap-use-after-free under ASan). Now the interrupt waits until every
    started run is done."""
    on_range = """
        def on_range(start, end):
            if start <= c < end:
                threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
                time.sleep(1.5)
                done["c"] = time.monotonic()
            return None
    """
    said = _batch_cut_short(tmp_path, on_range, "KeyboardInterrupt", "interrupt")
    assert said == ["c", "served", "before", "the", "interrupt", "clean"], said


def test_ctrl_c_ends_runs_that_are_slow_but_not_stalled(tmp_path):
    """The runs Ctrl-C interrupts are waited for (above), and a run that
    stays just above the rate floor would be waited for until its last
    byte: hours for a large tensor, with every further Ctrl-C ignored. An
    interrupted batch now abandons its runs at their next read."""
    code = textwrap.dedent(
        f"""
        import os, signal, sys, threading, time, numpy as np, hurray
        sys.path.insert(0, {HERE!r})
        from range_server import RangeServer
        p = {str(tmp_path / "gap.hurray")!r}
        hurray.save(p, {{"a": np.full(1 << 18, 1.0, np.float32),
                         "z_mid": np.zeros(17 << 20, np.float32),
                         "c": np.full(1 << 18, 3.0, np.float32)}})
        with RangeServer({{"/gap.hurray": open(p, "rb").read()}}) as s:
            f = hurray.open(s.url("/gap.hurray"), timeout=(2, 2))
            s.fault, s.drip_bytes, s.drip_seconds = "drip", 4096, 0.5  # 8 KiB/s
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
            started = time.monotonic()
            try:
                f.verify()
            except KeyboardInterrupt:
                print("interrupted after %.0f s" % (time.monotonic() - started))
            s.fault = None
            f.close()
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-2000:]
    words = done.stdout.split()
    assert words[:2] == ["interrupted", "after"] and int(words[2]) < 10, done.stdout


@pytest.mark.parametrize("when", ["open", "big read", "verify"])
def test_ctrl_c_stops_retrying_a_server_that_does_not_answer(tmp_path, when):
    """docs/security.md: after Ctrl-C the wait is one read timeout at most.
    The requests in flight were tried again up to `retries` times each, a
    read timeout every time (4 minutes with the defaults): at open, the
    header request the interrupted open waited for, and in a read fetched
    in several runs, every run. Now a batch that is over is not retried."""
    code = textwrap.dedent(
        f"""
        import os, signal, sys, threading, time, numpy as np, hurray
        sys.path.insert(0, {HERE!r})
        from range_server import RangeServer
        p = {str(tmp_path / "big.hurray")!r}
        hurray.save(p, {{"big": np.ones(48 << 20, np.uint8)}})
        with RangeServer({{"/big.hurray": open(p, "rb").read()}}) as s:
            s.slow_seconds = 60
            if {when!r} == "open":
                s.fault = "slow"
            else:
                f = hurray.open(s.url("/big.hurray"), timeout=(2, 3))
                s.fault = "slow"
            threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
            started = time.monotonic()
            try:
                if {when!r} == "open":
                    hurray.open(s.url("/big.hurray"), timeout=(2, 3))
                elif {when!r} == "big read":
                    f["big"]
                else:
                    f.verify()
            except KeyboardInterrupt:
                print("interrupted after %.1f s" % (time.monotonic() - started), flush=True)
            os._exit(0)  # the server's handlers still sleep
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    words = done.stdout.split()
    assert words[:2] == ["interrupted", "after"], done.stdout
    assert float(words[2]) < 6, done.stdout  # one read timeout (3 s); with retries 12 s and more


def test_a_refused_connection_is_not_a_timeout():
    # urllib3 makes a refused connection a kind of ConnectTimeoutError, and
    # it was reported (and retried) as RemoteTimeoutError.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(hurray.RemoteError, match="Failed to establish") as caught:
        hurray.open(f"http://127.0.0.1:{port}/x.hurray", retries=0)
    assert not isinstance(caught.value, TimeoutError)


def test_cli_url_errors_are_one_clear_line(files, server):
    """A failure names the URL once, as the C command does for a path (it was
    "hurray ls: URL: URL: HTTP 404" and "hurray ls: URL: HURRAY_ERR_...: ..."),
    and `cat`/`convert` of a URL say that only ls, info and verify read URLs
    (the C program said "No such file or directory")."""
    launcher = _launcher()
    url = server.url("/absent.hurray")
    p = subprocess.run([launcher, "ls", url], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert p.stderr.strip() == f"hurray: {url}: HTTP 404"
    # As the C command words a local file's fault: no status name, one URL.
    cut = server.url("/cut.hurray")
    server.files["/cut.hurray"] = files["small_bytes"][:-10]
    p = subprocess.run([launcher, "verify", cut], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1
    assert p.stderr.strip() == (
        f"hurray: {cut}: no trailer at the end: the file is truncated or was never finished"
    )
    p = subprocess.run(
        [launcher, "info", server.url("/small.hurray"), "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1 and "no tensor" in p.stderr and "Traceback" not in p.stderr
    for command in (["cat", server.url("/small.hurray"), "a"], ["convert", url, "x.npz"]):
        p = subprocess.run([launcher, *command], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2
        assert p.stderr.strip() == f"hurray {command[0]}: URLs are read by ls, info and verify only"


def test_python_cli_on_a_local_folder_prints_the_c_commands_line(tmp_path):
    """`python -m hurray ls DIR` printed OSError's text, "[Errno 21]
    HURRAY_ERR_IO: DIR is not a regular file (a directory): 'DIR'", where
    the C command prints "hurray: DIR: DIR is not a regular file (a
    directory)"."""
    p = subprocess.run(
        [sys.executable, "-m", "hurray", "ls", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 1
    assert p.stderr.strip() == f"hurray: {tmp_path}: {tmp_path} is not a regular file (a directory)"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs mkfifo")
def test_a_file_url_of_a_fifo_or_a_folder_is_refused_at_once(tmp_path):
    """fsspec opened a FIFO named by a file:// URL, which blocks until a
    writer comes: `hurray ls file:///.../fifo.hurray` hung for good, where
    the C command refuses the local path at once. A folder raised a bare
    IsADirectoryError."""
    pytest.importorskip("fsspec")
    os.mkfifo(tmp_path / "fifo.hurray")
    for path in (tmp_path / "fifo.hurray", tmp_path):
        p = subprocess.run(
            [sys.executable, "-m", "hurray", "ls", f"file://{path}"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert p.returncode == 1 and "is not a regular file" in p.stderr, p.stderr


def test_fsspec_missing_back_end_or_file_is_a_remote_error(files):
    """s3:// without s3fs raised fsspec's ImportError (and `hurray ls s3://...`
    printed a traceback); a missing memory:// file said only its path."""
    pytest.importorskip("fsspec")
    import importlib.util

    for scheme, module in (("s3", "s3fs"), ("gs", "gcsfs")):
        if importlib.util.find_spec(module) is not None:
            continue
        with pytest.raises(hurray.RemoteError, match=module):
            hurray.open(f"{scheme}://bucket/model.hurray")
        p = subprocess.run(
            [sys.executable, "-m", "hurray", "ls", f"{scheme}://bucket/model.hurray"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and module in p.stderr
        assert p.stderr.count(f"{scheme}://bucket/model.hurray") == 1, p.stderr
    with pytest.raises(hurray.RemoteError, match="Protocol not known"):
        hurray.open("nosuchscheme://x/y.hurray")
    with pytest.raises(FileNotFoundError, match="no such file"):
        hurray.open("memory:///remote-test/absent.hurray")


def test_empty_remote_file_reads_as_an_empty_local_file(server):
    """A suffix request of an empty file is answered 416 with
    `Content-Range: bytes */0`; that was "range not satisfiable
    (bytes=-262144)", now it is what an empty local file gives."""
    server.files["/empty.hurray"] = b""
    with pytest.raises(hurray.HurrayError, match="file of 0 bytes is shorter"):
        hurray.open(server.url("/empty.hurray"))


def test_remote_errors_are_named_as_exported():
    """A traceback said hurray._remote.RemoteProtocolError, a private module;
    the classes are hurray.RemoteError and so on, and pickle by that name."""
    import pickle

    for name in (
        "RemoteError",
        "RemoteProtocolError",
        "RemoteChangedError",
        "RemoteNotFoundError",
        "RemoteTimeoutError",
    ):
        cls = getattr(hurray, name)
        assert f"{cls.__module__}.{cls.__qualname__}" == f"hurray.{name}"
        assert type(pickle.loads(pickle.dumps(cls("x")))) is cls


def test_url_credentials_authenticate_and_stay_out_of_messages(files, server):
    """https://user:password@host/...: urllib3 ignored the user part, so the
    server answered 401, and every message repeated the password."""
    import base64

    class AuthServer(RangeServer):
        def _handle(self, h, head=False):
            token = base64.b64encode(b"me:s3cret pw").decode()
            if h.headers.get("Authorization") != "Basic " + token:
                with self.lock:
                    self.log.append((h.path, h.headers.get("Range"), 0))
                    index = len(self.log) - 1
                return self._send(h, index, 401, {}, b"", head)
            return super()._handle(h, head)

    with AuthServer({"/s.hurray": files["small_bytes"]}) as s:
        url = s.url("/s.hurray").replace("http://", "http://me:s3cret%20pw@")
        with hurray.open(url) as f:
            assert f.keys() == ["a"]
        bad = url.replace("s3cret", "wrong")
        with pytest.raises(hurray.RemoteError) as info:
            hurray.open(bad)
        assert "401" in str(info.value) and "wrong" not in str(info.value)
        assert "me:***@127.0.0.1" in str(info.value)
        p = subprocess.run(
            [sys.executable, "-m", "hurray", "ls", bad], capture_output=True, text=True, timeout=120
        )
        assert p.returncode == 1 and "wrong" not in p.stderr and "401" in p.stderr, p.stderr
        with hurray.open(url) as f:
            assert "s3cret" not in repr(f) and "me:***@" in repr(f)


def test_shown_urls_hide_every_credential():
    """A password holding "@" was shown after its "@", and a user part
    alone (a token, sent as Basic authentication) was shown whole."""
    from hurray._remote import shown_url

    assert shown_url("http://u:p@ss@h/x") == "http://u:***@h/x"
    assert shown_url("https://TOKEN@host/m.hurray") == "https://***@host/m.hurray"
    assert shown_url("https://host/a@b") == "https://host/a@b"
    assert shown_url("http://h/x") == "http://h/x"


@pytest.mark.parametrize(
    "content_length, total, error",
    [
        ("\u00b2", 8, "Content-Length"),
        ("8", 1 << 64, "claims a size"),
        ("0" * 4999 + "8", 8, "Content-Length"),
        ("8", "9" * 5000, "bad Content-Range"),
    ],
    ids=["superscript", "2^64", "5000-digit length", "5000-digit total"],
)
def test_odd_numbers_from_a_server_are_protocol_errors(content_length, total, error):
    """A superscript digit passed str.isdigit() and then broke int(); a size
    past 64 bits reached C as an OverflowError without the URL; a number of
    over 4300 digits made int() raise a ValueError (more than 20 digits are
    now refused, and the message quotes at most 80 characters of it)."""

    def answer(conn):
        head = (
            "HTTP/1.1 206 Partial Content\r\n"
            + (
                f"Content-Range: bytes 0-7/{total}\r\n"
                if isinstance(total, str)
                else f"Content-Range: bytes {total - 8}-{total - 1}/{total}\r\n"
            )
            + f"Content-Length: {content_length}\r\nConnection: close\r\n\r\n"
        )
        conn.sendall(head.encode("latin-1") + bytes(8))

    raw = _RawServer(answer)
    try:
        with pytest.raises(hurray.RemoteProtocolError, match=error) as info:
            hurray.open(raw.url, retries=0)
        assert len(str(info.value)) < 400
        with pytest.raises(ValueError, match="retries"):
            hurray.open(raw.url, retries=-1)
    finally:
        raw.close()


def test_redirects_are_followed(files, server):
    """A hub or CDN answers 302 with the bytes elsewhere; the pool was made
    with retries=False, which hands the 302 back instead of following it
    ("HTTP 302")."""
    import http.server
    import threading

    target = server.url("/small.hurray")

    class Redirect(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/small.hurray"
        with hurray.open(url) as f:
            np.testing.assert_array_equal(np.asarray(f["a"]), np.arange(10, dtype=np.float32))
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_redirect_on_a_kept_connection(files, server):
    """A 302 with an empty body from a keep-alive server, to the same host
    (a load balancer's or a bucket website's shape), failed every read:
    its response was never read to its end, so the next request on that
    connection found it still open (ResponseNotReady), on every retry."""
    server.redirects["/old.hurray"] = "/small.hurray"
    try:
        for retries in (0, 2):
            with hurray.open(server.url("/old.hurray"), retries=retries, threads=1) as f:
                np.testing.assert_array_equal(np.asarray(f["a"]), np.arange(10, dtype=np.float32))
    finally:
        del server.redirects["/old.hurray"]


class _RawServer:
    """A TCP server that answers each connection with `answer(conn)`, on
    its own thread, after reading the request's head."""

    def __init__(self, answer):
        import socket
        import threading

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.connections = 0
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/f.hurray"

        def serve():
            while True:
                try:
                    conn, _ = self.sock.accept()
                except OSError:
                    return
                self.connections += 1
                threading.Thread(target=self._one, args=(conn, answer), daemon=True).start()

        threading.Thread(target=serve, daemon=True).start()

    @staticmethod
    def _one(conn, answer):
        with conn:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            try:
                answer(conn)
            except OSError:
                pass

    def close(self):
        self.sock.close()


def _redirect_is_followed_at_once(answer):
    """`answer` redirects to small.hurray: open() follows it within the
    timeouts and reads the file."""
    raw = _RawServer(answer)
    try:
        started = time.monotonic()
        with hurray.open(raw.url, timeout=(2, 2), retries=0) as f:
            np.testing.assert_array_equal(np.asarray(f["a"]), np.arange(10, dtype=np.float32))
        assert time.monotonic() - started < 10
    finally:
        raw.close()


def test_a_redirect_body_that_never_ends_is_not_read(files, server):
    """urllib3 read a redirect's whole body before following it: a 302 with
    a body that never ends held open() forever. Redirects are now followed
    here, their bodies dropped unread."""
    target = server.url("/small.hurray").encode()

    def answer(conn):
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: " + target + b"\r\n")
        conn.sendall(b"Content-Length: 1125899906842624\r\n\r\n")
        while True:
            conn.sendall(bytes(1 << 16))

    _redirect_is_followed_at_once(answer)


@pytest.mark.parametrize("pace", ["flood", "trickle"])
def test_a_chunked_redirect_body_is_not_read(files, server, pace):
    """A 302 announcing Content-Length 0 and a chunked body was read as a
    short body, but a chunked body is read to its last chunk: one that
    never ended held open() forever (and a flood of chunks filled memory).
    A chunked redirect's connection is dropped unread."""
    target = server.url("/small.hurray").encode()

    def answer(conn):
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: " + target + b"\r\n")
        conn.sendall(b"Content-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = bytes(1 << 16) if pace == "flood" else b"x"
        while True:
            conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            if pace == "trickle":
                time.sleep(0.5)

    _redirect_is_followed_at_once(answer)


def test_answers_that_never_finish_their_headers_are_cut(files):
    """http.client skips "100 Continue" answers without end, and each one
    arrives within the read timeout: open() never returned. The status
    line and headers now have a deadline of two read timeouts. (Sent a few
    a second: CPython 3.14 refuses a 101st interim answer by itself.)"""

    def answer(conn):
        while True:
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            time.sleep(0.1)

    raw = _RawServer(answer)
    try:
        started = time.monotonic()
        with pytest.raises(hurray.RemoteTimeoutError, match="status line and headers") as e:
            hurray.open(raw.url, timeout=(1, 1), retries=0)
        assert time.monotonic() - started < 10
        # urllib3's own str() put its pool first: "URL: None: no status line..."
        assert str(e.value) == f"{raw.url}: no status line and headers within 2 s"
    finally:
        raw.close()


def test_headers_cut_by_their_deadline_are_a_timeout_and_retried(files):
    """A status line at once, then the headers a byte at a time: the
    deadline shut the socket down, http.client took that end of the stream
    for the end of the headers and answered with those it had, and open()
    failed at once with a RemoteProtocolError ("bad Content-Range None"),
    not retried. It is the RemoteTimeoutError of the deadline, retried."""
    answers = []

    def answer(conn):
        answers.append(1)
        conn.sendall(b"HTTP/1.1 206 Partial Content\r\n")
        for byte in b"Content-Range: bytes 0-63/525280\r\nContent-Length: 64\r\n\r\n":
            conn.sendall(bytes([byte]))
            time.sleep(0.5)

    raw = _RawServer(answer)
    try:
        with pytest.raises(hurray.RemoteTimeoutError, match="status line and headers"):
            hurray.open(raw.url, timeout=(1, 1), retries=1)
        assert len(answers) >= 2  # retried
    finally:
        raw.close()


def test_two_content_lengths_are_a_protocol_error_not_retried(files):
    """Content-Length twice with two values: urllib3's InvalidHeader came
    out as a RemoteError and was retried like a broken connection. A
    malformed answer is a RemoteProtocolError, which asking again does not
    mend."""
    answers = []

    def answer(conn):
        answers.append(1)
        conn.sendall(
            b"HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-63/100000\r\n"
            b"Content-Length: 64\r\nContent-Length: 69\r\n\r\n" + bytes(64)
        )

    raw = _RawServer(answer)
    try:
        with pytest.raises(hurray.RemoteProtocolError, match="Content-Length"):
            hurray.open(raw.url, timeout=(5, 5), retries=3)
        assert len(answers) <= 2  # the suffix and the header, each once
    finally:
        raw.close()


def test_a_flood_of_interim_answers_is_refused(files):
    """100 Continue as fast as the socket takes it: a RemoteTimeoutError at
    the deadline where http.client skips them without end, a
    RemoteProtocolError where it refuses the 101st (CPython 3.14), never a
    bare RemoteError."""

    def answer(conn):
        while True:
            conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")

    raw = _RawServer(answer)
    try:
        started = time.monotonic()
        with pytest.raises((hurray.RemoteTimeoutError, hurray.RemoteProtocolError)):
            hurray.open(raw.url, timeout=(1, 1), retries=0)
        assert time.monotonic() - started < 10
    finally:
        raw.close()


def test_a_redirect_to_another_scheme_is_refused_once():
    """A redirect to file:///etc/passwd failed as a transient error and was
    tried four times; only http(s) redirects are followed."""

    def answer(conn):
        conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\n")
        conn.sendall(b"Content-Length: 0\r\n\r\n")

    raw = _RawServer(answer)
    try:
        with pytest.raises(hurray.RemoteError, match="only http"):
            hurray.open(raw.url, retries=3)
        assert raw.connections <= 2  # the suffix and the header, not retried
    finally:
        raw.close()


def test_a_redirect_with_a_short_body_keeps_its_connection(files, server):
    """Redirects followed by hurray closed every redirect's connection, so
    each request through a hub's 302 paid a new connection; a short body is
    now read and dropped, and the connection serves the next request."""
    import http.server
    import threading

    target = server.url("/big.hurray")
    connections = []

    class Redirect(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle(self):
            connections.append(1)
            super().handle()

        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", target)
            self.send_header("Content-Length", "5")
            self.end_headers()
            self.wfile.write(b"moved")

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/big.hurray"
        with hurray.open(url, threads=1) as f:
            names = f.keys()[:4]
            for name in names:
                f[name]
        assert len(connections) <= 2, len(connections)  # open fetches two ranges at once
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_launcher_reads_only_file_as_a_url_and_restores_sigpipe(tmp_path):
    """The launcher took any later argument that looked like a URL (a
    tensor NAME) for one, and exec'd the C program with SIGPIPE ignored,
    so `hurray ls big | head` wrote on into the closed pipe."""
    launcher = os.path.join(SCRIPTS, "hurray")
    if not os.path.exists(launcher):
        pytest.skip("no pip-installed hurray command")
    path = tmp_path / "a.hurray"
    hurray.save(path, {"http://x": np.arange(3, dtype=np.uint8)})
    p = subprocess.run([launcher, "cat", str(path), "http://x"], capture_output=True, timeout=60)
    if p.returncode == 127 or b"has no hurray package" in p.stderr:
        pytest.skip("the C program is absent in this tree")
    assert p.returncode == 0 and p.stdout == bytes([0, 1, 2]), p.stderr
    many = tmp_path / "many.hurray"
    hurray.save(many, {f"t{i:05d}": np.ones(1) for i in range(20000)})
    p = subprocess.Popen(
        [launcher, "ls", str(many)], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    p.stdout.read(10)
    p.stdout.close()
    assert p.wait(timeout=60) == -signal.SIGPIPE, p.stderr.read()


def test_launcher_takes_a_url_pattern_as_a_convert_option_value(tmp_path):
    """Every convert argument was checked for a URL: --exclude 'http://*'
    (a tensor name pattern) was refused with "URLs are read by ls, info and
    verify only"."""
    launcher = _launcher()
    src = tmp_path / "a.npz"
    np.savez(src, **{"http://x": np.ones(2), "w": np.ones(3)})
    p = subprocess.run(
        [launcher, "convert", str(src), str(tmp_path / "o.hurray"), "-q", "--exclude", "http://*"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # The launcher decides before it looks for the C program.
    assert "URLs are read by ls, info and verify only" not in p.stderr
    if p.returncode == 127 or "has no hurray package" in p.stderr:
        pytest.skip("the C program is absent in this tree")
    assert p.returncode == 0, p.stderr
    assert hurray.load(tmp_path / "o.hurray").keys() == {"w"}
    # argparse takes a unique prefix for the option, and so does the launcher
    p = subprocess.run(
        [launcher, "convert", str(src), str(tmp_path / "p.hurray"), "-q", "--excl", "http://*"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    p = subprocess.run(
        [launcher, "convert", "--include", "w", "http://host/a.hurray", str(tmp_path / "b.hurray")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 2 and "URLs are read by ls, info and verify only" in p.stderr


# --------------------------------------- session 44: remote reads attacked


def test_a_tensor_larger_than_the_window_is_not_held_twice(tmp_path, monkeypatch):
    """load/get_tensors fetched a tensor larger than the prefetch window
    whole into prefetch blocks, then copied it: twice its size at peak,
    where the docs promise the window. It is read on its own now, in
    pieces on the threads, straight into its memory."""
    from hurray import _remote

    monkeypatch.setattr(_remote, "PREFETCH_WINDOW", 1 << 20)
    monkeypatch.setattr(_remote, "PREFETCH_PIECE", 256 << 10)
    big = np.arange(2 << 20, dtype=np.float32)
    small = {f"s{i}": np.full(100, i, np.float32) for i in range(3)}
    path = tmp_path / "w.hurray"
    hurray.save(path, {"s0": small["s0"], "big": big, "s1": small["s1"], "s2": small["s2"]})
    held = []
    prefetch = _remote.RangeSource.prefetch

    def spy(self, spans):
        blocks = prefetch(self, spans)
        held.append(sum(len(b) for _, b in blocks))
        return blocks

    monkeypatch.setattr(_remote.RangeSource, "prefetch", spy)
    with RangeServer({"/w.hurray": path.read_bytes()}) as s:
        with hurray.open(s.url("/w.hurray"), suffix_bytes=128) as f:
            s.reset()
            got = f.get_tensors(["s2", "big", "s0", "s1"])
            assert list(got) == ["s2", "big", "s0", "s1"]  # the caller's order
            np.testing.assert_array_equal(np.asarray(got["big"]), big)
            for name, value in small.items():
                np.testing.assert_array_equal(np.asarray(got[name]), value)
            assert max(held) <= 1 << 20, held
            pieces = [n for _, _, n in s.log if n >= 128 << 10]
            assert len(pieces) == (big.nbytes + (256 << 10) - 1) // (256 << 10), pieces


def test_concurrent_get_tensors_keep_no_blocks(files, server):
    """prefetch and forget replaced the source's block list without a lock:
    one thread's forget could be undone by another's prefetch, pinning up
    to a window of fetched bytes for the file's life; close() kept them."""
    import threading

    f = hurray.open(server.url("/big.hurray"), suffix_bytes=128)
    names = list(files["tensors"])
    f[names[0]]  # the rest of the index is kept from here on
    base = list(f._source._blocks)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:

        def work(i):
            for j in range(15):
                f.get_tensors([names[(i + j) % len(names)], names[(i + j + 1) % len(names)]])

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(switch)
    assert f._source._blocks == base
    f.close()
    assert f._source._blocks == []


def test_a_back_end_failing_as_it_starts_is_a_remote_error_without_the_password():
    """A back end that fails while fsspec builds it (an FTP server that
    refuses the connection) raised its bare ConnectionRefusedError, naming
    no URL; back ends' messages, which quote the URL, printed its password."""
    fsspec = pytest.importorskip("fsspec")
    from fsspec.spec import AbstractFileSystem

    class Refusing(AbstractFileSystem):
        protocol = "hurraytestrefuse"

        def __init__(self, *args, **kwargs):
            raise ConnectionRefusedError(111, "Connection refused")

    class Quoting(AbstractFileSystem):
        protocol = "hurraytestquote"

        def info(self, path, **kwargs):
            raise RuntimeError(f"cannot stat 'hurraytestquote://alice:s3cret-pw@{path}'")

    fsspec.register_implementation("hurraytestrefuse", Refusing, clobber=True)
    fsspec.register_implementation("hurraytestquote", Quoting, clobber=True)
    with pytest.raises(hurray.RemoteError, match="ConnectionRefusedError") as e:
        hurray.open("hurraytestrefuse://alice:s3cret-pw@host/m.hurray")
    assert "alice:***@host" in str(e.value) and "s3cret" not in str(e.value)
    with pytest.raises(hurray.RemoteError, match="RuntimeError") as e:
        hurray.open("hurraytestquote://alice:s3cret-pw@host/m.hurray")
    assert "s3cret" not in str(e.value), str(e.value)


@pytest.mark.parametrize("cut", ["/", "?", "#"])
def test_a_raw_password_that_breaks_the_url_is_still_masked(cut):
    """A password with a raw "/", "?" or "#" (the URL breaks RFC 3986, as
    a pasted one does) was printed in "not a URL that can be parsed"."""
    url = f"http://alice:pa{cut}ss-word@127.0.0.1:1/m.hurray"
    with pytest.raises(hurray.RemoteError) as e:
        hurray.open(url, retries=0)
    assert "ss-word" not in str(e.value) and "alice:***@127.0.0.1" in str(e.value), str(e.value)
    assert e.value.__context__ is None  # urllib3's error quotes it too
    # An "@" in a path or query is no password: such URLs stay as written.
    for plain in (
        "hf://org/repo@main/m.hurray",
        "https://example.com:8443/models/a@main.hurray",
        "https://host/f.hurray?t=12:00&who=me@x.org",
        "s3://bucket/run:3/model@v2.hurray",
    ):
        assert hurray._remote.shown_url(plain) == plain


@pytest.mark.parametrize(
    "unit, lengths, ok",
    [("Bytes", ["8"], True), ("bytes", ["8", "8"], True), ("bytes", ["8", "9"], False)],
)
def test_header_forms_the_rfc_allows(unit, lengths, ok):
    """A Content-Range unit written "Bytes" (units are case-insensitive) and
    a Content-Length repeated with the same value were refused, the second
    as "Content-Length 8, 8 disagrees"."""
    blob = bytearray(8)

    def answer(conn):
        head = f"HTTP/1.1 206 Partial Content\r\nContent-Range: {unit} 0-7/8\r\n"
        head += "".join(f"Content-Length: {n}\r\n" for n in lengths)
        conn.sendall(head.encode() + b"Connection: close\r\n\r\n" + bytes(blob))

    raw = _RawServer(answer)
    try:
        if ok:  # the 8 bytes arrive; an 8-byte file is then too short to open
            with pytest.raises(hurray.FormatError):
                hurray.open(raw.url, retries=0)
        else:  # http.client refuses different values itself
            with pytest.raises(hurray.RemoteError, match="Content-Length"):
                hurray.open(raw.url, retries=0)
    finally:
        raw.close()


def test_ls_columns_line_up_with_non_ascii_names(tmp_path):
    """ls padded names by bytes (printf's %-40s), so a row with "naïve" or
    "☃" had its DTYPE column one or two places left of the others; the URL
    path copied that."""
    launcher = _launcher()
    path = tmp_path / "u.hurray"
    names = ["naïve ünïcode", "plain", "☃", "日本"]
    hurray.save(path, {n: np.ones(2, np.float32) for n in names})
    local = subprocess.run([launcher, "ls", str(path)], capture_output=True, text=True, timeout=120)
    if local.returncode == 127 or "has no hurray package" in local.stderr:
        pytest.skip("the C program is absent in this tree")
    assert local.returncode == 0, local.stderr
    lines = local.stdout.splitlines()
    at = lines[0].index("DTYPE")
    assert all(line[at:].startswith("float32") for line in lines[1:]), lines
    with RangeServer({"/u.hurray": path.read_bytes()}) as s:
        remote = subprocess.run(
            [launcher, "ls", s.url("/u.hurray")], capture_output=True, text=True, timeout=120
        )
    assert remote.stdout == local.stdout


def _sockets(settle_to: frozenset = None) -> frozenset:
    """The open sockets of this process, by inode (the test server's too: it
    runs here, and closes its side of a connection soon after the client
    closes); with `settle_to`, waits up to 5 s for every socket not in it to
    close. Inodes, not a count: a socket an earlier test left to the
    collector could close meanwhile and hide a new one."""
    deadline = time.monotonic() + 5
    while True:
        open_now = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                link = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:"):
                open_now.add(link)
        if settle_to is None or open_now <= settle_to or time.monotonic() > deadline:
            return frozenset(open_now)
        time.sleep(0.01)


def test_close_and_load_leave_no_connection_open(files, server):
    # close() shut the thread pool but not the HTTP pool, and a failure
    # path kept the source in a cycle: sockets lived until gc ran.
    gc.collect()
    gc.disable()
    try:
        before = _sockets()
        with hurray.open(server.url("/big.hurray"), threads=4) as f:
            f.get_tensors(list(f.keys()))
        assert _sockets(before) <= before
        for _ in range(5):
            hurray.load(server.url("/big.hurray"))
        assert _sockets(before) <= before
    finally:
        gc.enable()


@pytest.mark.parametrize("threads_that_start", [0, 1])
def test_a_refused_thread_fetches_the_runs_on_fewer_threads(
    tmp_path, monkeypatch, threads_that_start
):
    """A read of several runs on the pool raised "can't start new thread"
    where the system refused one (RLIMIT_NPROC, pids.max), and the run
    whose submit failed stayed queued for a thread that did start, to
    write into memory C frees once the read returns. The pool is now shut
    down first and what did not run is fetched on the calling thread."""
    import threading

    from hurray import _remote

    monkeypatch.setattr(_remote, "PREFETCH_WINDOW", 1 << 20)
    monkeypatch.setattr(_remote, "PREFETCH_PIECE", 64 << 10)
    big = np.arange(1 << 20, dtype=np.float32)
    small = {f"s{i}": np.full(2048, i, np.float32) for i in range(64)}  # prefetched in pieces
    path = tmp_path / "w.hurray"
    hurray.save(path, {"big": big, **small})
    started = []
    start = threading.Thread.start

    def refuse(self):
        if not self.name.startswith("hurray-remote") or len(started) < threads_that_start:
            started.append(self.name)
            return start(self)
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    with RangeServer({"/w.hurray": path.read_bytes()}) as s:
        with hurray.open(s.url("/w.hurray"), suffix_bytes=128) as f:
            for _ in range(2):  # and again, with the pool made anew
                got = f.get_tensors(["big"])
                np.testing.assert_array_equal(np.asarray(got["big"]), big)
                got = f.get_tensors(list(small))
                for name, value in small.items():
                    np.testing.assert_array_equal(np.asarray(got[name]), value)
            f.verify()


def test_a_failed_run_ends_its_own_batch_at_once_and_no_other(tmp_path):
    """The first failure of a batch was raised only once every run before
    it had finished (a 403 on the second 16 MiB piece waited for the first
    at the server's pace), and it abandoned the body reads of every thread
    on the same file: another thread's healthy read of "b" failed with "the
    read was abandoned"."""
    import threading

    p = tmp_path / "ab.hurray"
    hurray.save(
        p, {"a": np.full(10_000_000, 2.0, np.float32), "b": np.full(1 << 20, 5.0, np.float32)}
    )
    data = p.read_bytes()
    a_at = data.find(np.full(16, 2.0, np.float32).tobytes())
    with RangeServer({"/ab.hurray": data}) as s:
        f = hurray.open(s.url("/ab.hurray"))
        s.fault, s.drip_bytes, s.drip_seconds = "drip", 1 << 20, 0.25
        # a's second piece is refused at once; every other answer drips
        # 1 MiB each 0.25 s (a's first piece: 4 s, b: 1 s).
        s.on_range = lambda start, end: (
            403 if a_at + (1 << 20) < start < a_at + (32 << 20) else None
        )
        got = {}

        def read_b():
            try:
                got["b"] = f.get_tensors(["b"])["b"].numpy()
            except Exception as exc:  # noqa: BLE001 - reported below
                got["b"] = exc

        thread = threading.Thread(target=read_b)
        thread.start()
        time.sleep(0.3)  # b's body is dripping
        began = time.monotonic()
        with pytest.raises(hurray.RemoteError, match="HTTP 403"):
            f["a"]
        took = time.monotonic() - began
        thread.join(60)
        f.close()
    assert isinstance(got["b"], np.ndarray), got["b"]
    assert np.all(got["b"] == 5.0)
    assert took < 3.0, took  # not the 4 s of the first piece's body


def test_get_tensors_of_one_str_is_a_type_error(server):
    """RemoteFile.get_tensors("ab") read tensors "a" and "b", where a local
    File says TypeError."""
    with hurray.open(server.url("/small.hurray")) as f:
        with pytest.raises(TypeError, match="not one str"):
            f.get_tensors("ab")


def test_a_timeout_that_sockets_cannot_take_is_refused_at_open(server):
    """timeout=inf passed urllib3's check and raised OverflowError from
    socket.settimeout at the first request."""
    for timeout in (float("inf"), 1e10, 0, -1, (5, float("nan"))):
        with pytest.raises(ValueError, match="timeout must be"):
            hurray.open(server.url("/small.hurray"), timeout=timeout)


def test_a_chunked_answer_leaves_its_connection_clean(tmp_path):
    """A 206 in chunked transfer coding whose last, empty chunk comes after
    the bytes: the connection went back to the pool with "0\\r\\n\\r\\n"
    unread, and the next request on it read "0" as its status line
    (RemoteProtocolError with retries=0)."""
    import http.server
    import re
    import socketserver
    import threading

    p = tmp_path / "ck.hurray"
    hurray.save(p, {f"w{i}": np.full((64, 64), i, np.float32) for i in range(4)})
    data = p.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):
            a, b = re.match(r"bytes=(\d*)-(\d*)$", self.headers["Range"]).groups()
            if a == "":
                s, e = len(data) - min(int(b), len(data)), len(data)
            else:
                s, e = int(a), min(int(b) + 1, len(data))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {s}-{e - 1}/{len(data)}")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(b"%x\r\n" % (e - s) + data[s:e] + b"\r\n")
            self.wfile.flush()
            time.sleep(0.1)
            self.wfile.write(b"0\r\n\r\n")

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    httpd = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/ck.hurray"
        for _ in range(3):
            with hurray.open(url, retries=0, threads=1) as f:
                assert [float(f[f"w{i}"].numpy()[0, 0]) for i in range(4)] == [0, 1, 2, 3]
    finally:
        httpd.shutdown()


def test_threads_are_checked_as_the_local_api_checks_them():
    """threads was taken as max(1, int(threads)): 2**62 sized urllib3's
    connection pool slot by slot and never returned, -1 and 1.5 passed, and
    None gave an internal TypeError. Nothing is fetched before the check."""
    url = "http://127.0.0.1:9/never.hurray"  # the discard port: no request is made
    for bad in (2**62, -1, 65536):
        with pytest.raises(OverflowError, match="threads"):
            hurray.open(url, threads=bad)
    for bad in (None, "4", 1.5, True):
        with pytest.raises(TypeError):
            hurray.open(url, threads=bad)
