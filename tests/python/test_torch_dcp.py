"""hurray.torch.dcp: torch.distributed.checkpoint on hurray files.

Real process groups (gloo) of world sizes 1, 2 and 4 are started with
torch.multiprocessing.start_processes. The ranks are forked from this
process (start_method="fork") after torch, DTensor and torch._dynamo are
imported here once: a spawned rank re-imports all of torch, which costs
more than the rest of the test on a small machine. Every rank runs with one
intra-op thread (no OpenMP pool crosses the fork).

A model plus its Adam state and DTensor-sharded tensors (cut along rows
and along columns, unevenly, one rank's piece empty) are saved at world size
4, then loaded at 4, 2 (also with the other placement) and 1; every value
must come back bit for bit. The reference values are written by the saving
rank 0 with torch.save (a test artefact, not part of the checkpoint).
"""

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import torch._dynamo  # noqa: E402,F401,F811 - imported once here, inherited by forked ranks
import torch.distributed.checkpoint as dcp  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.distributed.checkpoint.api import CheckpointException  # noqa: E402
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner  # noqa: E402
from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex  # noqa: E402
from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType  # noqa: E402
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.tensor import DTensor, Shard, distribute_tensor  # noqa: E402

import hurray  # noqa: E402
from hurray.torch import dcp as hdcp  # noqa: E402
from hurray.torch.dcp import (  # noqa: E402
    CheckpointError,
    HurrayStorageReader,
    HurrayStorageWriter,
    IncompleteCheckpointError,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ----------------------------------------------------------------- helpers


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank, fn, world_size, port, args):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        fn(rank, world_size, *args)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def run_group(world_size, fn, *args):
    """fn(rank, world_size, *args) in every rank of a fresh gloo group."""
    mp.start_processes(
        _rank_main,
        args=(fn, world_size, _free_port(), args),
        nprocs=world_size,
        start_method="fork",
        join=True,
    )


def _model():
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))


def _trained():
    torch.manual_seed(0)
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, betas=(0.8, 0.95))
    model(torch.randn(4, 12)).pow(2).sum().backward()
    opt.step()
    opt.zero_grad()
    return model, opt


def _global_tensors():
    g = torch.Generator().manual_seed(5)
    return {
        "rows": torch.randn(10, 6, generator=g),  # 3, 3, 3, 1 rows at 4 ranks
        "cols": torch.randn(5, 11, generator=g),  # columns 3, 3, 3, 2
        "tiny": torch.arange(3, dtype=torch.int64),  # rank 3's piece is empty
        "half": torch.randn(8, 4, generator=g).to(torch.bfloat16),
    }


_SAME = {"rows": 0, "cols": 1, "tiny": 0, "half": 0}
_SWAPPED = {"rows": 1, "cols": 0, "tiny": 0, "half": 1}
EXTRA = {"epoch": 7, "note": "hello", "betas": (0.8, 0.95), "seen": [1, 2, 3]}


def _flatten(prefix, obj, out):
    """DCP's flat names of the tensors of a nested state dict."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _flatten(f"{prefix}.{i}", v, out)
    elif isinstance(obj, DTensor):
        out[prefix] = obj.full_tensor()
    elif isinstance(obj, torch.Tensor):
        out[prefix] = obj
    return out


def _state(rank, world_size, model, opt, dims, fill):
    msd, osd = get_state_dict(model, opt)
    tensors = _global_tensors()
    if world_size > 1:
        mesh = init_device_mesh("cpu", (world_size,))
        sharded = {
            k: distribute_tensor(v if not fill else torch.zeros_like(v), mesh, [Shard(dims[k])])
            for k, v in tensors.items()
        }
    else:
        sharded = {k: torch.zeros_like(v) for k, v in tensors.items()}
    extra = dict(EXTRA) if not fill else {"epoch": 0, "note": "", "betas": (0.0, 0.0), "seen": []}
    return {"model": msd, "optim": osd, "sharded": sharded, "extra": extra}


def _save_ranks(rank, world_size, path, reference):
    model, opt = _trained()
    state = _state(rank, world_size, model, opt, _SAME, fill=False)
    dcp.save(state, storage_writer=HurrayStorageWriter(path))
    if rank == 0:
        flat = _flatten("", {k: state[k] for k in ("model", "optim", "sharded")}, {})
        torch.save(
            {
                "model": model.state_dict(),
                "optim": opt.state_dict(),
                "flat": {k: v.clone() for k, v in flat.items()},
            },
            reference,
        )
    else:
        _flatten("", state["sharded"], {})  # full_tensor() is a collective
    dist.barrier()
    # The same world size reads it back at once.
    _load_ranks(rank, world_size, path, reference, "same")


def _load_ranks(rank, world_size, path, reference, placement, record=None):
    ref = torch.load(reference, weights_only=True)
    torch.manual_seed(100 + rank)  # other values than the saved ones
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=0.5)
    dims = _SAME if placement == "same" else _SWAPPED
    state = _state(rank, world_size, model, opt, dims, fill=True)
    dcp.load(state, storage_reader=HurrayStorageReader(path, verify=True))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    for k, v in ref["model"].items():
        assert torch.equal(model.state_dict()[k], v), k
    got = opt.state_dict()
    assert got["param_groups"] == ref["optim"]["param_groups"]
    for p, s in ref["optim"]["state"].items():
        for k, v in s.items():
            assert torch.equal(got["state"][p][k], v), (p, k)
    assert state["extra"] == EXTRA, state["extra"]
    for k, v in state["sharded"].items():
        if isinstance(v, DTensor):
            assert v.placements == (Shard(dims[k]),)
            v = v.full_tensor()
        assert v.dtype == ref["flat"][f"sharded.{k}"].dtype
        assert torch.equal(v, ref["flat"][f"sharded.{k}"]), k


def _load_twice_recording(rank, world_size, path, reference, log_dir):
    """World size 2: the same placements, then rows and columns swapped. The
    first load records the regions of the stored pieces of sharded.rows
    that this rank copied (with mmap, only the pages under them are read;
    with mmap=False, only their rows)."""
    regions = []
    region_of = HurrayStorageReader._region

    def spy(self, f, req, loc):
        array, dtype, mapped = region_of(self, f, req, loc)
        if loc.name == "sharded.rows":
            regions.append([list(req.storage_offsets), list(array.shape)])
            assert mapped[0] <= array.ctypes.data < mapped[1]  # a view of the mapping
        return array, dtype, mapped

    HurrayStorageReader._region = spy
    try:
        _load_ranks(rank, world_size, path, reference, "same")
    finally:
        HurrayStorageReader._region = region_of
    with open(os.path.join(log_dir, f"rows-{rank}.json"), "w") as f:
        json.dump(regions, f)
    _load_ranks(rank, world_size, path, reference, "swapped")


def _load_one(rank, world_size, path, reference):
    _load_ranks(rank, world_size, path, reference, "same")


# ---------------------------------------------------------- the checkpoint


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A checkpoint saved at world size 4 (and loaded back at 4)."""
    root = tmp_path_factory.mktemp("dcp")
    path, reference = str(root / "ckpt"), str(root / "reference.pt")
    run_group(4, _save_ranks, path, reference)
    return path, reference


def test_layout_of_the_directory(saved):
    path, _ = saved
    assert sorted(os.listdir(path)) == [".metadata.hurray"] + [
        f"rank-{r:05d}.hurray" for r in range(4)
    ]
    with hurray.open(os.path.join(path, ".metadata.hurray")) as f:
        assert f.keys() == []
        md = f.metadata
    assert md["hurray.dcp.format"] == "hurray.torch.dcp"
    assert md["hurray.dcp.world_size"] == 4
    doc = json.loads(md["hurray.dcp.metadata"])
    assert doc["files"] == [f"rank-{r:05d}.hurray" for r in range(4)]
    rows = doc["state_dict"]["sharded.rows"]
    assert rows["shape"] == [10, 6] and rows["dtype"] == "float32"
    assert [(c["offsets"], c["sizes"], c["file"]) for c in rows["chunks"]] == [
        ([0, 0], [3, 6], "rank-00000.hurray"),
        ([3, 0], [3, 6], "rank-00001.hurray"),
        ([6, 0], [3, 6], "rank-00002.hurray"),
        ([9, 0], [1, 6], "rank-00003.hurray"),
    ]
    assert doc["state_dict"]["extra.epoch"]["kind"] == "json"
    for r in range(4):
        with hurray.open(os.path.join(path, f"rank-{r:05d}.hurray"), verify=True) as f:
            assert f.metadata["hurray.dcp.save_id"] == md["hurray.dcp.save_id"]
            assert f.metadata["hurray.dcp.rank"] == r
            if r == 1:
                d = f.descriptor("sharded.cols")
                assert d.shard == hurray.Shard((5, 11), (0, 3)) and d.shape == (5, 3)
            for name in f.keys():
                ext = f.descriptor(name).extension
                if ext is not None:  # non-tensor state: JSON text, no pickle
                    assert ext.name == "torch.dcp.json"
                    json.loads(bytes(f[name].numpy()))
    owner = doc["state_dict"]["extra.betas"]["file"]
    with hurray.open(os.path.join(path, owner)) as f:
        assert json.loads(bytes(f["extra.betas"].numpy())) == {"tuple": [0.8, 0.95]}


def test_metadata_round_trips_without_pickle(saved):
    path, _ = saved
    md = HurrayStorageReader(path).read_metadata()
    rows = md.state_dict_metadata["sharded.rows"]
    assert rows.size == torch.Size([10, 6]) and rows.properties.dtype == torch.float32
    assert rows.chunks[3] == ChunkStorageMetadata(torch.Size([9, 0]), torch.Size([1, 6]))
    assert md.planner_data["optim.param_groups.0.betas"] == ("optim", "param_groups", 0, "betas")
    assert md.storage_data[MetadataIndex("sharded.rows", [3, 0])].file == "rank-00001.hurray"
    raw = open(os.path.join(path, ".metadata.hurray"), "rb").read()
    assert b"\x80\x04" not in raw and b"torch._utils" not in raw  # no pickle stream


def test_load_at_world_size_2_reshards_and_reads_only_overlaps(saved, tmp_path):
    path, reference = saved
    run_group(2, _load_twice_recording, path, reference, str(tmp_path))
    # sharded.rows: stored as 3+3+3+1 rows, loaded as 5+5: each rank fetched
    # exactly its 5 rows, from the pieces they overlap.
    # Rank 0 wants rows 0:5: all of piece 0:3, rows 0:2 of piece 3:6. Rank 1
    # wants rows 5:10: row 2 of piece 3:6, all of 6:9 and of 9:10.
    expected = {
        0: [[[0, 0], [3, 6]], [[0, 0], [2, 6]]],
        1: [[[2, 0], [1, 6]], [[0, 0], [3, 6]], [[0, 0], [1, 6]]],
    }
    for rank in range(2):
        regions = json.load(open(tmp_path / f"rows-{rank}.json"))
        assert sorted(regions) == sorted(expected[rank]), regions


def test_load_at_world_size_1(saved):
    path, reference = saved
    run_group(1, _load_one, path, reference)


def test_load_sharded_reads_it_without_torch(saved, tmp_path):
    path, reference = saved
    out = tmp_path / "assembled.npz"
    code = (
        "import sys\n"
        "sys.modules['torch'] = None  # any import of torch fails\n"
        "import numpy as np, hurray\n"
        f"arrays = hurray.load_sharded({path!r})\n"
        "assert 'torch' not in [m.split('.')[0] for m in sys.modules if sys.modules[m]]\n"
        "np.savez(sys.argv[1], **{k: (v.view(np.uint16) if v.dtype.name == 'bfloat16' else v)"
        " for k, v in arrays.items()})\n"
    )
    subprocess.run([sys.executable, "-c", code, str(out)], check=True, cwd=tmp_path)
    ref = torch.load(reference, weights_only=True)["flat"]
    got = dict(np.load(out))
    assert sorted(got) == sorted(ref)
    for k, v in ref.items():
        expected = (
            v.view(torch.int16).numpy().view(np.uint16) if v.dtype == torch.bfloat16 else v.numpy()
        )
        np.testing.assert_array_equal(got[k], expected, err_msg=k)
        assert got[k].shape == expected.shape


def _cli():
    for candidate in (
        os.environ.get("HURRAY_CLI"),
        os.path.join(REPO, "build", "hurray"),
        os.path.join(REPO, "stage", "bin", "hurray"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    pytest.skip("the hurray CLI is not built (make build)")


def test_hurray_ls_lists_the_directory(saved):
    path, _ = saved
    out = subprocess.run([_cli(), "ls", path], capture_output=True, text=True)
    if out.returncode == 1 and "Is a directory" in out.stderr + out.stdout:
        pytest.skip("this hurray CLI predates directory listing")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:2] == ["FILE", "NAME"]
    rows = [line.split() for line in lines[1:] if line.startswith("rank-")]
    assert {r[0] for r in rows} == {f"rank-{r:05d}.hurray" for r in range(4)}
    cols = [r for r in rows if r[1] == "sharded.cols"]
    assert len(cols) == 4 and all("shard=" in " ".join(r) for r in cols)
    assert any(line.startswith(".metadata.hurray") for line in lines)


# --------------------------------------------------- unfinished and damaged


class _KilledInFinish(HurrayStorageWriter):
    def finish(self, metadata, results):
        os.kill(os.getpid(), signal.SIGKILL)  # the coordinator dies before publishing


class _KilledPublishing(HurrayStorageWriter):
    def _publish(self, files):
        os.unlink(os.path.join(self.path, hdcp.METADATA_FILE))  # as _publish begins
        os.kill(os.getpid(), signal.SIGKILL)


def _save_then_die(rank, world_size, path, writer):
    dcp.save({"w": torch.full((4, 4), 1.0)}, storage_writer=HurrayStorageWriter(path))
    dist.barrier()
    # A complete checkpoint is in place; now a second save dies in finish().
    dcp.save({"w": torch.full((4, 4), 2.0)}, storage_writer=writer(path))


def _load_w(path):
    state = {"w": torch.zeros(4, 4)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(state, storage_reader=HurrayStorageReader(path), no_dist=True)
    return state["w"]


def test_killed_before_publishing_keeps_the_earlier_checkpoint(tmp_path):
    # Every rank's files wait under hidden names until finish() publishes
    # them: a save that dies before then leaves the earlier one whole.
    path = str(tmp_path / "ckpt")
    os.makedirs(path)
    hurray.save(os.path.join(path, "rank-00003.hurray"), {"w": np.zeros(2)})  # a stale rank
    with pytest.raises((mp.ProcessExitedException, mp.ProcessRaisedException)):
        run_group(2, _save_then_die, path, _KilledInFinish)
    names = sorted(os.listdir(path))
    assert {".metadata.hurray", "rank-00000.hurray", "rank-00001.hurray"} <= set(names)
    assert "rank-00003.hurray" not in names  # the first save removed the stale rank file
    assert sum(n.startswith(".rank-") for n in names) == 2  # the dead save's files, hidden
    assert torch.equal(_load_w(path), torch.full((4, 4), 1.0))
    assert sorted(hurray.load_sharded(path)) == ["w"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(
            {"w": torch.full((4, 4), 3.0)}, storage_writer=HurrayStorageWriter(path), no_dist=True
        )
    assert sorted(os.listdir(path)) == [".metadata.hurray", "rank-00000.hurray"]
    assert torch.equal(_load_w(path), torch.full((4, 4), 3.0))


def test_killed_while_publishing_is_refused(tmp_path):
    path = str(tmp_path / "ckpt")
    os.makedirs(path)
    with pytest.raises((mp.ProcessExitedException, mp.ProcessRaisedException)):
        run_group(2, _save_then_die, path, _KilledPublishing)
    assert ".metadata.hurray" not in os.listdir(path)
    with pytest.raises(
        IncompleteCheckpointError,
        match=r"is incomplete: finish\(\) did not complete "
        r"\(no \.metadata\.hurray\)",
    ):
        HurrayStorageReader(path).read_metadata()
    with pytest.raises(BaseException, match="finish\\(\\) did not complete"):
        _load_w(path)


def test_ctrl_c_while_finish_publishes_leaves_the_new_save_whole(tmp_path, monkeypatch):
    """A SIGINT while finish() renamed this save's files into place (the
    earlier metadata already removed) raised at once, and the except path
    removed this save's staged metadata: neither save loaded. Publishing
    now finishes first; the interrupt comes after, over the new save."""
    import signal

    path = str(tmp_path / "ckpt")
    _save_local(path, {"w": torch.full((4, 4), 1.0)})
    real_replace = os.replace

    def replace(src, dst):
        if dst.endswith("rank-00000.hurray"):
            os.kill(os.getpid(), signal.SIGINT)
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(BaseException) as info:
        _save_local(path, {"w": torch.full((4, 4), 2.0)})
    assert "KeyboardInterrupt" in repr(info.value)
    monkeypatch.setattr(os, "replace", real_replace)
    assert sorted(os.listdir(path)) == [".metadata.hurray", "rank-00000.hurray"]
    assert torch.equal(_load_w(path), torch.full((4, 4), 2.0))


def test_a_metadata_write_that_fails_keeps_the_earlier_checkpoint(tmp_path, monkeypatch):
    """finish() removed the earlier metadata and renamed this save's files
    into place before it wrote the new metadata: a write that failed there
    (a full disk, a quota, Ctrl-C) left neither save loadable. The metadata
    is now written under a hidden name first; publishing only renames."""
    path = str(tmp_path / "ckpt")
    _save_local(path, {"w": torch.full((4, 4), 1.0)})
    before = {n: open(os.path.join(path, n), "rb").read() for n in os.listdir(path)}
    real_save = hdcp.save

    def full_disk(target, *args, **kwargs):
        if hdcp.METADATA_FILE in os.path.basename(target):  # under any name
            raise OSError(errno.ENOSPC, "No space left on device", target)
        return real_save(target, *args, **kwargs)

    monkeypatch.setattr(hdcp, "save", full_disk)
    with pytest.raises(BaseException, match="No space left on device"):
        _save_local(path, {"w": torch.full((4, 4), 2.0)})
    after = {n: open(os.path.join(path, n), "rb").read() for n in os.listdir(path)}
    assert {n: after[n] for n in before} == before  # the earlier save, byte for byte
    assert all(n.startswith(".rank-") for n in set(after) - set(before))  # hidden, for now
    assert torch.equal(_load_w(path), torch.full((4, 4), 1.0))
    monkeypatch.setattr(hdcp, "save", real_save)
    _save_local(path, {"w": torch.full((4, 4), 3.0)})
    assert sorted(os.listdir(path)) == [".metadata.hurray", "rank-00000.hurray"]
    assert torch.equal(_load_w(path), torch.full((4, 4), 3.0))


def _refused_by_one_rank(rank, world_size, path):
    dcp.save({"w": torch.full((4, 4), 1.0)}, storage_writer=HurrayStorageWriter(path))
    dist.barrier()
    # Replicated: DCP stores it once, on one rank, so only that rank meets
    # the value JSON cannot hold; the others wrote their files fine.
    state = {"w": torch.full((4, 4), 2.0), "best": np.float64(0.25)}
    with pytest.raises(BaseException):  # CheckpointException, on every rank
        dcp.save(state, storage_writer=HurrayStorageWriter(path))


def test_a_save_refused_on_one_rank_keeps_the_earlier_checkpoint(tmp_path):
    path = str(tmp_path / "ckpt")
    run_group(2, _refused_by_one_rank, path)
    assert torch.equal(_load_w(path), torch.full((4, 4), 1.0))


def _swap_rank_files(path):
    a, b = os.path.join(path, "rank-00000.hurray"), os.path.join(path, "rank-00001.hurray")
    os.rename(a, a + ".x")
    os.rename(b, a)
    os.rename(a + ".x", b)


def _save_sharded_w(rank, world_size, path):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world_size,))
    w = distribute_tensor(torch.arange(24.0).reshape(4, 6), mesh, [Shard(0)])
    dcp.save({"w": w}, storage_writer=HurrayStorageWriter(path))


def test_swapped_rank_files_are_refused(tmp_path):
    # Each piece's own shard and rank are checked against the metadata: the
    # save id alone let swapped files load each other's rows.
    path = str(tmp_path / "ckpt")
    run_group(2, _save_sharded_w, path)
    _swap_rank_files(path)
    state = {"w": torch.zeros(4, 6)}
    with pytest.raises(BaseException, match="damaged|places it at"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.load(state, storage_reader=HurrayStorageReader(path), no_dist=True)


def test_a_reused_writer_draws_a_new_save_id_per_save(tmp_path):
    writer = HurrayStorageWriter(tmp_path)
    ids = []
    for step in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dcp.save({"w": torch.full((2,), float(step))}, storage_writer=writer, no_dist=True)
        with hurray.open(os.path.join(tmp_path, "rank-00000.hurray")) as f:
            ids.append(f.metadata["hurray.dcp.save_id"])
    assert ids[0] != ids[1]


# ------------------------------------------------ in-process (no group)


def _save_local(path, state, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dcp.save(state, storage_writer=HurrayStorageWriter(path, **kw), no_dist=True)


def _load_local(path, state, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(state, storage_reader=HurrayStorageReader(path, **kw), no_dist=True)


def test_metadata_equals_what_dcp_planned(tmp_path):
    model, opt = _trained()
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd, "extra": dict(EXTRA)}
    md = _save_local(tmp_path, state)
    got = HurrayStorageReader(tmp_path).read_metadata()
    assert got.state_dict_metadata == md.state_dict_metadata
    assert got.planner_data == md.planner_data
    assert got.storage_data == md.storage_data
    assert got.version == md.version
    assert got.storage_meta.save_id == md.storage_meta.save_id


def test_checksums_are_verified_on_request(tmp_path):
    _save_local(tmp_path, {"w": torch.arange(64, dtype=torch.float32)})
    rank0 = tmp_path / "rank-00000.hurray"
    data = bytearray(rank0.read_bytes())
    with hurray.open(rank0) as f:
        start = data.find(f["w"].numpy().tobytes())
    data[start + 4 * 5] ^= 0x40  # one bit of element 5
    rank0.write_bytes(bytes(data))
    out = {"w": torch.zeros(64)}
    _load_local(tmp_path, out)  # unverified: the flipped bit comes through
    assert out["w"][5] != 5 and torch.equal(out["w"][6:], torch.arange(6, 64.0))
    with pytest.raises(BaseException, match="checksum"):
        _load_local(tmp_path, {"w": torch.zeros(64)}, verify=True)


def test_two_saves_mixed_are_refused(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _save_local(a, {"w": torch.ones(3)})
    _save_local(b, {"w": torch.zeros(3)})
    shutil.copy(b / "rank-00000.hurray", a / "rank-00000.hurray")
    with pytest.raises(BaseException, match="mixes two saves"):
        _load_local(a, {"w": torch.zeros(3)})


def test_overwrite_false_and_missing_directory(tmp_path):
    _save_local(tmp_path, {"w": torch.ones(3)})
    with pytest.raises(BaseException, match="overwrite=False"):
        _save_local(tmp_path, {"w": torch.ones(3)}, overwrite=False)
    with pytest.raises(CheckpointError, match="not a directory"):
        HurrayStorageReader(tmp_path / "nope").read_metadata()
    assert HurrayStorageWriter.validate_checkpoint_id(tmp_path / "new")
    assert not HurrayStorageWriter.validate_checkpoint_id("s3://bucket/x")
    assert HurrayStorageReader.validate_checkpoint_id(tmp_path)
    assert not HurrayStorageReader.validate_checkpoint_id(tmp_path / "nope")
    meta = HurrayStorageWriter(tmp_path).storage_meta()
    assert meta.checkpoint_id == str(tmp_path) and meta.save_id


class _IntEnum(int):
    pass


def test_objects_without_json_form_need_opt_in(tmp_path):
    state = {"w": torch.ones(2), "odd": _IntEnum(3), "fine": {"a": (1, None, float("inf"))}}
    with pytest.raises(BaseException, match="no exact JSON form"):
        _save_local(tmp_path / "a", state)
    _save_local(tmp_path / "b", state, allow_opaque_bytes=True)
    back = {"w": torch.zeros(2), "odd": None, "fine": {"a": None}}
    with pytest.raises(BaseException, match="allow_opaque_bytes=True"):
        _load_local(tmp_path / "b", back)
    _load_local(tmp_path / "b", back, allow_opaque_bytes=True)
    assert type(back["odd"]) is _IntEnum and back["odd"] == 3
    assert back["fine"] == {"a": (1, None, float("inf"))}


def _edit_chunks(path, fqn, edit):
    meta = os.path.join(path, hdcp.METADATA_FILE)
    with hurray.open(meta) as f:
        md = dict(f.metadata)
    doc = json.loads(md["hurray.dcp.metadata"])
    edit(doc["state_dict"][fqn]["chunks"])
    md["hurray.dcp.metadata"] = json.dumps(doc)
    hurray.save(meta, {}, md)


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda c: c[1].__setitem__("offsets", [1, 0]), "overlap"),
        (lambda c: c.pop(), "do not cover"),
        (lambda c: c.clear(), "do not cover"),
        (lambda c: c[0].__setitem__("offsets", [-2, 0]), "not inside"),
        (lambda c: c[0].__setitem__("sizes", [2]), "rank"),
    ],
    ids=["overlap", "gap", "none", "negative", "rank"],
)
def test_chunks_that_do_not_tile_the_tensor_are_refused(tmp_path, edit, words):
    """Edited chunk offsets or sizes loaded shifted or partial values, and a
    gap left the target's old values, all without an error."""
    w = torch.arange(20.0).reshape(5, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(
            {"w": w},
            storage_writer=HurrayStorageWriter(tmp_path),
            planner=_TwoChunkPlanner(),
            no_dist=True,
        )
    _edit_chunks(tmp_path, "w", edit)
    with pytest.raises(CheckpointError, match=words):
        HurrayStorageReader(tmp_path).read_metadata()
    with pytest.raises(BaseException, match=words):
        _load_local(tmp_path, {"w": torch.full((5, 4), -1.0)})


def test_an_irregular_but_exact_tiling_is_read(tmp_path):
    """130 rows, each cut into bricks shifted by its row number: a valid
    tiling whose cuts defeat the overlap search, which raised the private
    _TooIrregular (no CheckpointError, no message). The corner count now
    decides first, as for load_sharded's pieces."""
    k, width = 130, 4
    cols = k * width + k
    _save_local(tmp_path, {"w": torch.zeros(k, cols)})
    chunks = []
    for r in range(k):
        edges = sorted({0, cols, *(r + 1 + width * c for c in range(k))})
        chunks += [
            {"offsets": [r, a], "sizes": [1, b - a], "file": "rank-00000.hurray", "name": "w"}
            for a, b in zip(edges, edges[1:])
        ]
    _edit_chunks(tmp_path, "w", lambda c: c.__setitem__(slice(None), chunks))
    metadata = HurrayStorageReader(tmp_path).read_metadata()
    assert len(metadata.state_dict_metadata["w"].chunks) == len(chunks)
    chunks[-1]["sizes"] = [1, chunks[-1]["sizes"][1] - 1]  # a gap of one element
    _edit_chunks(tmp_path, "w", lambda c: c.__setitem__(slice(None), chunks))
    with pytest.raises(CheckpointError, match="do not cover|too irregularly"):
        HurrayStorageReader(tmp_path).read_metadata()


def _edit_doc(path, edit):
    meta = os.path.join(path, hdcp.METADATA_FILE)
    with hurray.open(meta) as f:
        md = dict(f.metadata)
    doc = json.loads(md["hurray.dcp.metadata"])
    edit(doc, md)
    md["hurray.dcp.metadata"] = json.dumps(doc)
    hurray.save(meta, {}, md)


def test_metadata_without_a_save_id_or_with_names_of_the_wrong_type_is_refused(tmp_path):
    """A chunk's name of 3 failed only in read_data, with a TypeError; a
    save id missing from both places was a bare KeyError; and a null one in
    both passed, which turned off the check that refuses a rank file of
    another save. All are CheckpointErrors naming the file now."""
    state = {"w": torch.arange(12.0).reshape(3, 4)}
    cases = {
        "name": lambda doc, md: doc["state_dict"]["w"]["chunks"][0].__setitem__("name", 3),
        "missing": lambda doc, md: (doc.pop("save_id"), md.pop(hdcp._K_SAVE_ID)),
        "null": lambda doc, md: (doc.__setitem__("save_id", None), md.pop(hdcp._K_SAVE_ID)),
        # what the other ranks check their rank files against
        "storage_meta": lambda doc, md: doc["storage_meta"].__setitem__("save_id", "other"),
    }
    for case, edit in cases.items():
        path = tmp_path / case
        _save_local(path, dict(state))
        _edit_doc(path, edit)
        with pytest.raises(CheckpointError, match="strings, not|no save id") as info:
            HurrayStorageReader(path).read_metadata()
        assert hdcp.METADATA_FILE in str(info.value), case


def test_metadata_naming_a_tensor_the_file_lacks_is_a_checkpoint_error(tmp_path):
    """A chunk whose name the rank file does not hold failed in read_data
    with hurray's NotFoundError (a KeyError), not a CheckpointError."""
    _save_local(tmp_path, {"w": torch.arange(12.0).reshape(3, 4)})
    _edit_chunks(tmp_path, "w", lambda c: c[0].__setitem__("name", "zz"))
    with pytest.raises(BaseException, match="names the tensor 'zz', which this file does not"):
        _load_local(tmp_path, {"w": torch.zeros(3, 4)})


def test_malformed_json_items_are_checkpoint_errors(tmp_path):
    _save_local(tmp_path, {"w": torch.arange(8.0), "step": 3})
    rank = os.path.join(tmp_path, "rank-00000.hurray")
    with hurray.open(rank) as f:
        md = dict(f.metadata)
        w = np.array(f["w"].numpy())
    for payload in [
        b'{"dict":[[[1,2],3]]}',
        b'{"tuple":5}',
        b'{"float":[1]}',
        b"[" * 5000 + b"]" * 5000,
    ]:
        t = hurray.from_numpy(np.frombuffer(payload, np.uint8).copy())
        ext = hurray.Extension(hdcp.JSON_EXTENSION)
        hurray.save(
            rank,
            {"w": w, "step": hurray.Tensor(t.descriptor.replace(extension=ext), list(t.buffers))},
            md,
        )
        with pytest.raises(BaseException, match="malformed JSON item"):
            _load_local(tmp_path, {"w": torch.zeros(8), "step": 0})


@pytest.mark.parametrize("dtype", ["qint8", "complex32"])
def test_a_metadata_dtype_no_hurray_file_holds_is_a_checkpoint_error(tmp_path, dtype):
    """A torch dtype in the metadata that no hurray file holds raised
    UnsupportedError, not the CheckpointError torch-dcp.md gives bad
    metadata."""
    _save_local(tmp_path, {"w": torch.arange(6.0)})
    _edit_doc(tmp_path, lambda doc, md: doc["state_dict"]["w"].update(torch_dtype=dtype))
    with pytest.raises(BaseException, match="none a hurray checkpoint holds"):
        _load_local(tmp_path, {"w": torch.zeros(6)})


def test_a_strided_json_item_is_refused_before_it_is_read(tmp_path):
    """A JSON item of one stored byte repeated (stride 0) over 2**29
    elements was materialised (512 MiB) before the JSON parse refused it."""
    _save_local(tmp_path, {"w": torch.arange(8.0), "step": 3})
    rank = os.path.join(tmp_path, "rank-00000.hurray")
    with hurray.open(rank) as f:
        md = dict(f.metadata)
        w = np.array(f["w"].numpy())
    d = hurray.Descriptor(
        "uint8",
        (2**29,),
        strides=(0,),
        extension=hurray.Extension(hdcp.JSON_EXTENSION),
        buffers=[hurray.Buffer("data", 1)],
    )
    hurray.save(rank, {"w": w, "step": hurray.Tensor(d, [np.frombuffer(b"7", np.uint8)])}, md)
    with pytest.raises(BaseException, match="is not a plain 1-D uint8 torch.dcp.json item"):
        _load_local(tmp_path, {"w": torch.zeros(8), "step": 0})


class _TwoChunkPlanner(DefaultSavePlanner):
    """Saves tensor "w" as two chunks of one rank (rows 0:2 and 2:5)."""

    def create_local_plan(self):
        plan = super().create_local_plan()
        items = []
        for item in plan.items:
            if item.index.fqn != "w":
                items.append(item)
                continue
            td = item.tensor_data
            for lo, n in ((0, 2), (2, 3)):
                chunk = ChunkStorageMetadata(torch.Size([lo, 0]), torch.Size([n, 4]))
                items.append(
                    WriteItem(
                        index=MetadataIndex("w", [lo, 0]),
                        type=WriteItemType.SHARD,
                        tensor_data=TensorWriteData(chunk, td.properties, td.size),
                    )
                )
        plan = type(plan)(
            items=items, storage_data=plan.storage_data, planner_data=plan.planner_data
        )
        self.plan = plan
        return plan

    def resolve_data(self, item):
        if item.index.fqn == "w":
            lo = item.tensor_data.chunk.offsets[0]
            return self.state_dict["w"][lo : lo + item.tensor_data.chunk.sizes[0]]
        return super().resolve_data(item)


def test_several_chunks_of_one_tensor_on_one_rank(tmp_path):
    w = torch.arange(20, dtype=torch.float32).reshape(5, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(
            {"w": w, "v": torch.ones(2)},
            storage_writer=HurrayStorageWriter(tmp_path),
            planner=_TwoChunkPlanner(),
            no_dist=True,
        )
    assert sorted(os.listdir(tmp_path)) == [
        ".metadata.hurray",
        "rank-00000-1.hurray",
        "rank-00000.hurray",
    ]
    out = {"w": torch.zeros(5, 4), "v": torch.zeros(2)}
    _load_local(tmp_path, out, verify=True)
    assert torch.equal(out["w"], w) and torch.equal(out["v"], torch.ones(2))
    np.testing.assert_array_equal(hurray.load_sharded(tmp_path, "w"), w.numpy())
    _load_local(tmp_path, out, mmap=False)
    assert torch.equal(out["w"], w)


def test_module_constants():
    assert hdcp.METADATA_FILE == ".metadata.hurray"
    assert (hdcp.JSON_EXTENSION, hdcp.BYTES_EXTENSION) == ("torch.dcp.json", "torch.dcp.bytes")


class _NotJSON:
    pass


@pytest.mark.parametrize(
    "bad, words",
    [
        ({"odd": _NotJSON()}, "no exact JSON form"),
        ({"q": torch.quantize_per_tensor(torch.ones(4), 0.5, 0, torch.qint8)}, "quantized"),
        ({"s": torch.eye(3).to_sparse()}, "sparse_coo"),
        ({"f": torch.zeros(2, dtype=torch.float8_e4m3fnuz)}, "no hurray equivalent"),
        ({"": torch.ones(2)}, "cannot name a hurray tensor"),
    ],
)
def test_a_refused_save_leaves_the_earlier_checkpoint(tmp_path, bad, words):
    """These used to be found only after the earlier save was deleted (or,
    for sparse tensors, never: the checkpoint saved and could not be read)."""
    _save_local(tmp_path, {"w": torch.full((2, 3), 7.0), "x": torch.arange(4)})
    before = sorted(os.listdir(tmp_path))
    with pytest.raises(BaseException, match=words):
        _save_local(tmp_path, {"w": torch.zeros(2, 3), **bad})
    assert sorted(os.listdir(tmp_path)) == before  # no staged file left either
    out = {"w": torch.zeros(2, 3), "x": torch.zeros(4, dtype=torch.int64)}
    _load_local(tmp_path, out)
    assert torch.equal(out["w"], torch.full((2, 3), 7.0))
    assert torch.equal(out["x"], torch.arange(4))


def test_a_failed_rename_leaves_no_staged_file(tmp_path, monkeypatch):
    """The staged rank file was removed only when writing it failed; a
    failure while removing the earlier save or renaming left it behind."""
    _save_local(tmp_path, {"w": torch.ones(3)})

    def refuse(src, dst):
        raise OSError(errno.EIO, "injected", dst)

    monkeypatch.setattr(hdcp.os, "replace", refuse)
    with pytest.raises(BaseException, match="injected"):
        _save_local(tmp_path, {"w": torch.zeros(3)})
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".rank-")]


def test_a_rename_that_fails_while_publishing_keeps_the_earlier_checkpoint(tmp_path, monkeypatch):
    """finish() removed the earlier metadata before renaming this save's
    files into place: a rename refused there (a rank file another user owns
    in a sticky folder) left the old rank files without metadata, and the
    earlier checkpoint no longer loaded."""
    path = str(tmp_path / "ckpt")
    _save_local(path, {"w": torch.full((4, 4), 1.0)})
    before = {n: open(os.path.join(path, n), "rb").read() for n in os.listdir(path)}
    real_replace = os.replace

    def refuse_rank_files(src, dst, **kw):
        if os.path.basename(str(dst)) == "rank-00000.hurray" and not str(src).endswith(".old"):
            raise PermissionError(errno.EPERM, "Operation not permitted", str(src))
        return real_replace(src, dst, **kw)

    monkeypatch.setattr(hdcp.os, "replace", refuse_rank_files)
    with pytest.raises(BaseException) as info:
        _save_local(path, {"w": torch.full((4, 4), 2.0)})
    monkeypatch.undo()
    assert "rank-00000.hurray in place" in str(info.value)
    after = {n: open(os.path.join(path, n), "rb").read() for n in os.listdir(path)}
    assert after == before  # the earlier save, byte for byte, and nothing else
    assert torch.equal(_load_w(path), torch.full((4, 4), 1.0))


def test_a_later_save_removes_the_kept_files_a_dead_coordinator_left(tmp_path):
    """A coordinator that died while publishing left the earlier rank file
    kept beside the new one ('.rank-00000.hurray.<id>.old'), a whole rank
    file that no later save removed."""
    path = tmp_path / "ckpt"
    _save_local(str(path), {"w": torch.full((4, 4), 1.0)})
    left = path / f".rank-00000.hurray.{'ab' * 16}.old"
    left.write_bytes(b"an earlier rank file")
    _save_local(str(path), {"w": torch.full((4, 4), 2.0)})
    assert sorted(os.listdir(path)) == [".metadata.hurray", "rank-00000.hurray"]


def test_a_folder_in_the_metadatas_place_is_refused_before_anything_moves(tmp_path):
    """It was moved aside like the metadata it was taken for, the save
    published, and every later save failed on removing it."""
    path = tmp_path / "ckpt"
    path.mkdir()
    (path / hdcp.METADATA_FILE).mkdir()
    with pytest.raises(BaseException, match="Is a directory"):
        _save_local(str(path), {"w": torch.full((4, 4), 1.0)})
    assert (path / hdcp.METADATA_FILE).is_dir()
    assert not [n for n in os.listdir(path) if not n.startswith(".")]


def test_a_smaller_save_removes_the_earlier_rank_files(tmp_path):
    hurray.save(os.path.join(tmp_path, "rank-00000-1.hurray"), {"w": np.zeros(2)})
    hurray.save(os.path.join(tmp_path, "rank-00004.hurray"), {"w": np.zeros(2)})
    # and what a save that died between writing and renaming left
    hurray.save(os.path.join(tmp_path, ".rank-00000.hurray." + "ab" * 16), {"w": np.zeros(2)})
    (tmp_path / "notes.txt").write_text("kept")
    _save_local(tmp_path, {"w": torch.ones(3)})
    assert sorted(os.listdir(tmp_path)) == [".metadata.hurray", "notes.txt", "rank-00000.hurray"]


def _refused_on_one_rank(rank, world_size, path):
    dcp.save({"w": torch.full((4,), 7.0)}, storage_writer=HurrayStorageWriter(path))
    dist.barrier()
    state = {"w": torch.zeros(4)}
    if rank == 1:
        state["s"] = torch.eye(2).to_sparse()
    try:
        dcp.save(state, storage_writer=HurrayStorageWriter(path))
    except CheckpointException as e:  # every rank fails, rank 0 naming rank 1
        assert 1 in e.failures, e
    else:
        raise AssertionError("saved")


def test_a_tensor_one_rank_cannot_store_fails_every_rank_while_planning(tmp_path):
    """Only the refusing rank used to fail, in write_data, after the other
    rank had removed the earlier save's metadata and replaced its file."""
    path = str(tmp_path / "ckpt")
    run_group(2, _refused_on_one_rank, path)
    out = {"w": torch.zeros(4)}
    _load_local(path, out)
    assert torch.equal(out["w"], torch.full((4,), 7.0))


def _load_like(path, like):
    state = {"w": torch.zeros_like(like)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.load(state, storage_reader=HurrayStorageReader(path), no_dist=True)
    return state["w"]


def _save_quietly(state, path, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return dcp.save(state, storage_writer=HurrayStorageWriter(path), no_dist=True, **kw)


def test_a_planner_that_resolves_another_dtype_fails_before_publishing(tmp_path):
    """A planner whose transform_object cast to bfloat16 saved, replaced the
    earlier checkpoint, and every load then refused the new one (the
    metadata said float32, the file bfloat16)."""

    class ToBf16(DefaultSavePlanner):
        def transform_object(self, write_item, object):
            if isinstance(object, torch.Tensor) and object.dtype == torch.float32:
                return object.to(torch.bfloat16)
            return super().transform_object(write_item, object)

    path = str(tmp_path / "ckpt")
    _save_quietly({"w": torch.tensor([1.0, 2.5, 3.0])}, path)
    with pytest.raises(CheckpointException, match="resolved a torch.bfloat16 tensor"):
        _save_quietly({"w": torch.tensor([4.0, 5.0, 6.0])}, path, planner=ToBf16())
    earlier = torch.tensor([1.0, 2.5, 3.0])
    assert torch.equal(_load_like(path, earlier), earlier)  # the earlier one stays


def test_plan_caching_is_refused_before_anything_is_written(tmp_path):
    """With DefaultSavePlanner(enable_plan_caching=True) every save after the
    first wrote its files under the first save's id and failed, leaving
    hidden files no later save removed."""
    path = str(tmp_path / "ckpt")
    _save_quietly({"w": torch.ones(2)}, path)
    for _ in range(2):
        with pytest.raises(CheckpointException, match="plan caching"):
            _save_quietly(
                {"w": torch.zeros(2)}, path, planner=DefaultSavePlanner(enable_plan_caching=True)
            )
    assert sorted(os.listdir(path)) == [".metadata.hurray", "rank-00000.hurray"]
    assert torch.equal(_load_like(path, torch.ones(2)), torch.ones(2))


@pytest.mark.parametrize("key", ["a\x00b", ""])
def test_keys_hurray_cannot_name_are_checkpoint_errors(tmp_path, key):
    """A NUL in a key gave a bare ValueError, and an empty key an
    InvalidArgumentError, where the docs promise a CheckpointError naming it."""
    with pytest.raises(CheckpointException, match="cannot name a hurray tensor"):
        _save_quietly({key: torch.ones(1)}, str(tmp_path / "ckpt"))
