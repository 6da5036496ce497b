"""hurray.torch.dcp: a checkpoint cannot make the reader open files outside
its directory (issue 14, path traversal).

.metadata.hurray names the rank file of every stored item. A name that is
not a plain file name (``../other/rank-00000.hurray``, an absolute path, a
sub-folder), or a file in the directory that is a symbolic link resolving
outside it, is refused with CheckpointPathError before anything is read
from it, or even checked for existence. Malformed metadata is a
CheckpointError, never a KeyError."""

import json
import os
import shutil
import warnings

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
import torch.distributed.checkpoint as dcp  # noqa: E402

import hurray  # noqa: E402
from hurray.torch.dcp import (  # noqa: E402
    METADATA_FILE,
    CheckpointError,
    CheckpointPathError,
    HurrayStorageReader,
    HurrayStorageWriter,
)

RANK0 = "rank-00000.hurray"


def _save(path, state):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, storage_writer=HurrayStorageWriter(path), no_dist=True)


def _load(path, state):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(state, storage_reader=HurrayStorageReader(path), no_dist=True)


def _rewrite(ckpt, edit):
    """Applies edit(doc) to the JSON document of ckpt/.metadata.hurray."""
    meta = ckpt / METADATA_FILE
    with hurray.open(meta) as f:
        md = dict(f.metadata)
    doc = json.loads(md["hurray.dcp.metadata"])
    edit(doc)
    md["hurray.dcp.metadata"] = json.dumps(doc)
    hurray.save(meta, {}, md)


def _rename_rank_file(doc, new):
    doc["files"] = [new if f == RANK0 else f for f in doc["files"]]
    for e in doc["state_dict"].values():
        for c in e.get("chunks", [e]):
            if c.get("file") == RANK0:
                c["file"] = new


@pytest.fixture
def two(tmp_path):
    """tmp/ckpt (the checkpoint given to the reader) and tmp/other, a copy
    of it (the same save): a file outside the checkpoint that the reader
    would accept if it were inside."""
    ckpt = tmp_path / "ckpt"
    _save(ckpt, {"w": torch.arange(8.0), "step": 3})
    shutil.copytree(ckpt, tmp_path / "other")
    return ckpt, tmp_path / "other"


@pytest.mark.parametrize(
    "name", ["../other/" + RANK0, "ABSOLUTE", "sub/" + RANK0, "..", "", "../nowhere/" + RANK0]
)
def test_metadata_naming_a_file_outside_is_refused(two, name):
    ckpt, other = two
    if name == "ABSOLUTE":
        name = str(other / RANK0)
    if name.startswith("sub/"):
        (ckpt / "sub").mkdir()
        shutil.copy(ckpt / RANK0, ckpt / "sub" / RANK0)
    os.unlink(ckpt / RANK0)
    _rewrite(ckpt, lambda doc: _rename_rank_file(doc, name))
    with pytest.raises(CheckpointPathError) as info:
        HurrayStorageReader(ckpt).read_metadata()
    assert repr(name) in str(info.value) and "nothing is read" in str(info.value)
    assert isinstance(info.value, CheckpointError) and isinstance(info.value, ValueError)
    with pytest.raises(BaseException, match="nothing is read"):  # DCP wraps it
        _load(ckpt, {"w": torch.zeros(8), "step": 0})


def test_rank_file_linked_outside_is_refused(two):
    ckpt, other = two
    os.unlink(ckpt / RANK0)
    os.symlink(os.path.join("..", "other", RANK0), ckpt / RANK0)
    with pytest.raises(CheckpointPathError, match="outside the checkpoint directory"):
        HurrayStorageReader(ckpt).read_metadata()
    with pytest.raises(BaseException, match="outside the checkpoint directory"):
        _load(ckpt, {"w": torch.zeros(8), "step": 0})


def test_metadata_file_linked_outside_is_refused(two):
    ckpt, other = two
    os.unlink(ckpt / METADATA_FILE)
    os.symlink(other / METADATA_FILE, ckpt / METADATA_FILE)
    with pytest.raises(CheckpointPathError, match="outside the checkpoint directory"):
        HurrayStorageReader(ckpt).read_metadata()


def test_links_inside_the_directory_are_followed(two, tmp_path):
    ckpt, _ = two
    os.rename(ckpt / RANK0, ckpt / "stored.hurray")
    os.symlink("stored.hurray", ckpt / RANK0)
    out = {"w": torch.zeros(8), "step": 0}
    _load(ckpt, out)
    assert torch.equal(out["w"], torch.arange(8.0)) and out["step"] == 3
    # a checkpoint reached through a linked directory is still inside itself
    os.symlink(ckpt, tmp_path / "alias")
    out = {"w": torch.zeros(8), "step": 0}
    _load(tmp_path / "alias", out)
    assert torch.equal(out["w"], torch.arange(8.0))


def test_reader_checks_names_where_it_opens_them(two):
    ckpt, other = two
    reader = HurrayStorageReader(ckpt)
    for name in ("../other/" + RANK0, str(other / RANK0), "a/b"):
        with pytest.raises(CheckpointPathError):
            reader._open(name)
    reader._open(RANK0).close()


@pytest.mark.parametrize(
    "edit",
    [
        lambda doc: doc.pop("state_dict"),
        lambda doc: doc["state_dict"]["w"].pop("chunks"),
        lambda doc: doc["state_dict"]["w"]["chunks"][0].pop("file"),
        lambda doc: doc["state_dict"]["w"].update(kind=None),
        lambda doc: doc.update(files=None),
        lambda doc: doc["state_dict"]["w"]["chunks"][0].update(file=5),
    ],
    ids=[
        "no state_dict",
        "no chunks",
        "chunk without file",
        "unknown kind",
        "files not a list",
        "file not a string",
    ],
)
def test_malformed_metadata_is_a_checkpoint_error(two, edit):
    ckpt, _ = two
    _rewrite(ckpt, edit)
    with pytest.raises(CheckpointError):
        HurrayStorageReader(ckpt).read_metadata()
