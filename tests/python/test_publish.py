"""replace_all: staged files put in place as one step (save_sharded's parts,
a converted safetensors folder's shards)."""

import errno
import os

import pytest

from hurray._publish import ReplaceError, replace_all


def _folder(tmp_path, old, new):
    """Targets holding `old` (None: absent) and staged files holding `new`."""
    moves = []
    for k, (o, n) in enumerate(zip(old, new)):
        target, staged = tmp_path / f"part-{k}", tmp_path / f".part-{k}.staged"
        if o is not None:
            target.write_bytes(o)
        staged.write_bytes(n)
        moves.append((str(staged), str(target)))
    return moves


def _contents(tmp_path):
    return {p.name: p.read_bytes() for p in sorted(tmp_path.iterdir()) if p.is_file()}


def test_every_file_goes_in_and_the_old_ones_are_kept_for_the_caller(tmp_path):
    moves = _folder(tmp_path, [b"old 0", None], [b"new 0", b"new 1"])
    kept = replace_all(moves)
    assert kept == [moves[0][0] + ".old"]
    assert open(kept[0], "rb").read() == b"old 0"
    assert (tmp_path / "part-0").read_bytes() == b"new 0"
    assert (tmp_path / "part-1").read_bytes() == b"new 1"
    assert not os.path.exists(moves[0][0]) and not os.path.exists(moves[1][0])


@pytest.mark.parametrize("links", [True, False], ids=["hard links", "no hard links"])
def test_a_failed_rename_puts_every_earlier_file_back(tmp_path, monkeypatch, links):
    moves = _folder(tmp_path, [b"old 0", None, b"old 2"], [b"new 0", b"new 1", b"new 2"])
    real_replace = os.replace
    if not links:

        def no_link(*a, **kw):
            raise OSError(errno.EPERM, "no hard links here")

        monkeypatch.setattr(os, "link", no_link)

    def replace(src, dst, **kw):
        if str(src).endswith(".part-2.staged"):
            raise PermissionError(errno.EACCES, "Permission denied", str(src))
        return real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(ReplaceError) as info:
        replace_all(moves)
    monkeypatch.undo()
    assert info.value.index == 2 and info.value.errno == errno.EACCES
    assert isinstance(info.value.cause, PermissionError)
    # The earlier files are back, the new one where there was none is gone,
    # no kept file is left, and the staged files not moved stay for the
    # caller to remove.
    assert _contents(tmp_path) == {
        ".part-2.staged": b"new 2",
        "part-0": b"old 0",
        "part-2": b"old 2",
    }


def test_a_folder_in_a_targets_place_is_refused_not_moved_aside(tmp_path):
    moves = _folder(tmp_path, [b"old 0", None], [b"new 0", b"new 1"])
    os.unlink(moves[1][0])
    (tmp_path / "part-1").mkdir()
    (tmp_path / "part-1" / "keep").write_bytes(b"theirs")
    (tmp_path / ".part-1.staged").write_bytes(b"new 1")
    with pytest.raises(ReplaceError) as info:
        replace_all(moves)
    assert isinstance(info.value.cause, IsADirectoryError) and info.value.index == 1
    assert (tmp_path / "part-1" / "keep").read_bytes() == b"theirs"
    assert (tmp_path / "part-0").read_bytes() == b"old 0"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".part-1.staged", "part-0", "part-1"]


def test_a_file_made_by_someone_else_where_a_move_failed_is_left_alone(tmp_path, monkeypatch):
    """The undo removes a new target only when it moved it there."""
    moves = _folder(tmp_path, [None], [b"ours"])
    real_replace = os.replace

    def replace(src, dst, **kw):
        if str(src).endswith(".staged"):
            (tmp_path / "part-0").write_bytes(b"theirs")  # made meanwhile
            raise OSError(errno.EIO, "Input/output error", str(src))
        return real_replace(src, dst, **kw)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(ReplaceError):
        replace_all(moves)
    monkeypatch.undo()
    assert (tmp_path / "part-0").read_bytes() == b"theirs"


def test_an_interrupt_is_undone_and_goes_on_as_itself(tmp_path, monkeypatch):
    moves = _folder(tmp_path, [b"old 0", b"old 1"], [b"new 0", b"new 1"])
    real_replace = os.replace

    def replace(src, dst, **kw):
        real_replace(src, dst, **kw)
        if str(src).endswith(".part-1.staged"):
            raise KeyboardInterrupt  # as the last rename returns

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(KeyboardInterrupt):
        replace_all(moves)
    monkeypatch.undo()
    assert _contents(tmp_path) == {"part-0": b"old 0", "part-1": b"old 1"}


def test_a_file_of_someone_else_in_a_sticky_folder_is_refused_before_it_is_linked(
    tmp_path, monkeypatch
):
    """The kept hard link of another user's file in a sticky folder could
    not be removed either: a failed save left it behind, hidden."""
    from hurray import _publish

    sticky = tmp_path / "shared"
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    moves = _folder(sticky, [b"theirs", None], [b"ours", b"ours too"])
    owner = os.stat(moves[0][1]).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # someone else
    monkeypatch.setattr(_publish, "_overrides_sticky", lambda: False)
    with pytest.raises(ReplaceError) as info:
        replace_all(moves)
    assert isinstance(info.value.cause, PermissionError) and info.value.index == 0
    assert _contents(sticky) == {
        ".part-0.staged": b"ours",
        ".part-1.staged": b"ours too",
        "part-0": b"theirs",
    }
