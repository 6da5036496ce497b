"""A FIFO (or other non-regular file) named *.hurray must be refused at once,
not hang the opener waiting for a writer (issue 14). Each open runs in a
subprocess with a timeout, so a hang fails the test instead of the suite."""

import os
import subprocess
import sys

import pytest

SCRIPT = r"""
import errno, sys, hurray
try:
    {call}
except (hurray.HurrayError, OSError) as e:
    print("refused:", type(e).__name__, e)
    # The C reader's errno and the path; a check in Python before it gave
    # neither, against the docs (security.md, "Not a regular file").
    assert isinstance(e, OSError) and e.errno == errno.ENXIO, (e.errno, e)
    assert e.filename == sys.argv[1], e.filename
    sys.exit(0)
print("opened")
sys.exit(1)
"""


@pytest.mark.parametrize(
    "call",
    [
        "hurray.open(sys.argv[1])",
        "hurray.load(sys.argv[1])",
        "hurray.open(sys.argv[1], mmap=False)",
        "hurray.safe_open(sys.argv[1], 'np')",
    ],
)
def test_fifo_is_refused_without_blocking(tmp_path, call):
    fifo = os.path.join(tmp_path, "pipe.hurray")
    os.mkfifo(fifo)
    try:
        out = subprocess.run(
            [sys.executable, "-c", SCRIPT.format(call=call), fifo],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{call} blocked on a FIFO")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "not a regular file" in out.stdout


def test_convert_refuses_targets_it_cannot_replace_with_an_oserror(tmp_path):
    """convert() refused a FIFO, a device or a folder as its target, and a
    file as a folder target, with a plain ConversionError; save() raises
    an OSError with errno and the path for the same targets, and so does
    convert() now."""
    import errno

    import numpy as np

    import hurray

    src = tmp_path / "src.npz"
    np.savez(src, w=np.ones(4, np.float32))
    fifo = tmp_path / "pipe.hurray"
    os.mkfifo(fifo)
    folder = tmp_path / "dir.safetensors"
    folder.mkdir()
    plain = tmp_path / "plain"
    plain.write_bytes(b"keep")
    for target, code in (
        (fifo, errno.ENXIO),
        (tmp_path / "null.hurray", errno.ENXIO),
        (folder, errno.EISDIR),
        (str(plain) + "/", errno.ENOTDIR),
    ):
        if target == tmp_path / "null.hurray":
            os.symlink("/dev/null", target)
        with pytest.raises(hurray.ConversionIOError) as info:
            hurray.convert(src, target, quiet=True)
        assert isinstance(info.value, OSError) and info.value.errno == code, info.value
        assert info.value.filename == str(target).rstrip("/"), info.value.filename
        assert str(target).rstrip("/") in str(info.value)
    assert plain.read_bytes() == b"keep"
    assert folder.is_dir() and not list(folder.iterdir())


def test_convert_refuses_sources_that_are_not_files_with_an_oserror(tmp_path):
    """A FIFO or a device as convert()'s source was a plain ConversionError,
    no OSError, no errno: hurray.open of the same path, and convert() with
    it as the target, raise ENXIO with the path."""
    import errno

    import hurray

    fifo = tmp_path / "pipe.safetensors"
    os.mkfifo(fifo)
    device = tmp_path / "zero.hurray"
    os.symlink("/dev/zero", device)
    for source in (fifo, device):
        with pytest.raises(hurray.ConversionIOError) as info:
            hurray.convert(source, tmp_path / "out.npz", quiet=True)
        assert isinstance(info.value, OSError) and info.value.errno == errno.ENXIO, info.value
        assert info.value.filename == str(source)
        assert "is not a regular file" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe.safetensors", "zero.hurray"]
