"""Every exception hurray raises on purpose is a hurray.HurrayError, so one
`except hurray.HurrayError` covers the package (file-system failures are
also OSErrors). These classes were once plain Exception / RuntimeError."""

import subprocess
import sys

import numpy as np
import pytest

import hurray


def test_conversion_error_is_a_hurray_error(tmp_path):
    from hurray.convert import ConversionError, UsageError

    assert issubclass(ConversionError, hurray.HurrayError)
    assert issubclass(UsageError, hurray.HurrayError)
    assert hurray.ConversionError is ConversionError
    with pytest.raises(hurray.HurrayError) as info:
        hurray.convert(
            str(tmp_path / "missing.safetensors"), str(tmp_path / "x.hurray"), quiet=True
        )
    # A missing source is a file-system failure: an OSError too.
    assert isinstance(info.value, ConversionError)
    assert isinstance(info.value, hurray.ConversionIOError)
    assert isinstance(info.value, FileNotFoundError)
    assert info.value.status_name == "HURRAY_ERR_IO"
    assert info.value.status == hurray._hurray.STATUS["HURRAY_ERR_IO"]
    assert ConversionError.status_name == "HURRAY_ERR_UNSUPPORTED"
    assert ConversionError.status == hurray._hurray.STATUS["HURRAY_ERR_UNSUPPORTED"]


def test_usage_error_is_a_hurray_error(tmp_path):
    src = tmp_path / "a.npz"
    np.savez(src, w=np.ones((4, 64), np.float32))
    with pytest.raises(hurray.HurrayError) as info:
        hurray.convert(str(src), str(tmp_path / "b.hurray"), quantize="nope", quiet=True)
    assert type(info.value).__name__ == "UsageError"
    assert info.value.status_name == "HURRAY_ERR_INVALID_ARGUMENT"


def test_checkpoint_error_is_a_hurray_error():
    pytest.importorskip("torch")
    from hurray.torch.dcp import CheckpointError, CheckpointPathError, IncompleteCheckpointError

    for cls in (CheckpointError, IncompleteCheckpointError, CheckpointPathError):
        assert issubclass(cls, hurray.HurrayError)
        assert issubclass(cls, RuntimeError)  # what it was before: still caught as one
    assert issubclass(CheckpointPathError, ValueError)
    assert CheckpointError("x").status_name == "HURRAY_ERR_INVALID_ARGUMENT"


@pytest.mark.parametrize("value", [np.array([object()]), np.array(["x"]), None])
def test_a_dtype_without_equivalent_is_an_invalid_argument(tmp_path, value):
    target = tmp_path / "t.hurray"
    with pytest.raises(hurray.InvalidArgumentError, match="no hurray equivalent") as info:
        hurray.save(target, {"a": value})
    assert isinstance(info.value, ValueError)  # what it was before
    assert not target.exists()


def test_save_of_a_list_says_what_it_wants(tmp_path):
    with pytest.raises(TypeError, match="mapping of names to tensors, not list"):
        hurray.save(tmp_path / "t.hurray", [np.ones(3)])


def test_metadata_int_out_of_range_names_its_key(tmp_path):
    target = tmp_path / "t.hurray"
    for bad in (2**63, -(2**63) - 1, 2**70):
        with pytest.raises(OverflowError, match="metadata 'step'"):
            hurray.save(target, {"a": np.ones(1)}, metadata={"step": bad})
    hurray.save(target, {"a": np.ones(1)}, metadata={"lo": -(2**63), "hi": 2**63 - 1})
    assert hurray.open(target).metadata == {"lo": -(2**63), "hi": 2**63 - 1}


def test_convert_help_does_not_say_other_gguf_types_are_refused():
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "hurray", "convert", "--help"], capture_output=True, text=True
    ).stdout
    assert "other GGUF types are refused" not in out
    assert "Q8_1" in out


def test_file_system_errors_survive_pickling_into_a_fresh_process(tmp_path):
    """The OSError classes of one errno are made when first raised, so
    pickle could not find them by name ("attribute lookup
    HurrayFileNotFoundError on hurray failed"): an error raised in a
    ProcessPoolExecutor worker never reached the parent. And the C-raised
    one lost its message, which was set after its arguments."""
    import pickle

    caught = []
    with pytest.raises(hurray.HurrayError) as opened:
        hurray.open(tmp_path / "missing.hurray")
    caught.append(opened.value)
    with pytest.raises(hurray.ConversionError) as converted:
        hurray.convert(tmp_path / "missing.safetensors", tmp_path / "x.hurray", quiet=True)
    caught.append(converted.value)
    code = (
        "import pickle, sys\n"
        "e = pickle.loads(sys.stdin.buffer.read())\n"
        "print(type(e).__name__, isinstance(e, FileNotFoundError), e.errno, str(e))\n"
    )
    for exc in caught:
        r = subprocess.run(
            [sys.executable, "-c", code], input=pickle.dumps(exc), capture_output=True, timeout=60
        )
        assert r.returncode == 0, r.stderr.decode()[-2000:]
        want = f"{type(exc).__name__} True 2 {exc}"
        assert r.stdout.decode().strip() == want
    assert issubclass(hurray.HurrayPermissionError, PermissionError)
    assert issubclass(hurray.ConversionIsADirectoryError, hurray.ConversionIOError)
    with pytest.raises(AttributeError):
        hurray.HurrayNotAnError


def test_errors_raised_in_python_carry_their_status(tmp_path):
    """python-bindings.md: Python raises a C class through _hurray._error,
    with `status` and `status_name` as the stub declares. These were built
    directly (UnsupportedError("...")) and had neither: an
    `except hurray.HurrayError as e: log(e.status_name)` raised
    AttributeError."""
    torch = pytest.importorskip("torch")
    import hurray.torch as ht

    path = tmp_path / "q.hurray"
    hurray.save(path, {"q": hurray.quantize(np.ones((4, 64), np.float32), "nf4")})

    class Repeats:
        def items(self):
            return [("k", 1), ("k", 2)]

    cases = [
        ("HURRAY_ERR_DUPLICATE_NAME", lambda: hurray.save(tmp_path / "m.hurray", {}, Repeats())),
        ("HURRAY_ERR_UNSUPPORTED", lambda: ht.to_torch(hurray.load(path)["q"])),
        ("HURRAY_ERR_UNSUPPORTED", lambda: ht.from_torch(torch.empty(2, device="meta"))),
        ("HURRAY_ERR_UNSUPPORTED", lambda: ht.load_file(path)),
    ]
    for status_name, call in cases:
        with pytest.raises(hurray.HurrayError) as info:
            call()
        assert info.value.status_name == status_name
        assert info.value.status == hurray._hurray.STATUS[status_name]


def test_python_code_builds_no_c_error_class_directly():
    """Every hurray error raised from Python goes through _hurray._error (or
    a helper over it), which sets the status: a class called directly has
    none. Classes defined in Python (ConversionError, RemoteError,
    CheckpointError) set their own."""
    import pathlib
    import re

    names = "|".join(
        name
        for name, value in vars(hurray._hurray).items()
        if isinstance(value, type) and issubclass(value, hurray.HurrayError)
    )
    built = re.compile(rf"(?<![\w.])(?:_hurray\.)?(?:{names})\(")
    package = pathlib.Path(hurray.__file__).parent
    found = [
        f"{path.relative_to(package)}:{number}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if built.search(line) and not line.lstrip().startswith(("#", "class "))
    ]
    assert not found, "\n".join(found)
