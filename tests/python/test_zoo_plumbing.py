"""The model-folder plumbing of the safetensors zoo (python/hurray/convert/zoo):
config.json kept verbatim, grouping through the Family registry, the way back
byte for byte (file and folder targets, shards and index), --dequantize,
folder targets written atomically, hostile metadata and configs refused in
one line. A family registered here, in-process, stands for any family; the
real ones have their own test files (test_zoo_gptq.py, ...)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from zoo_reference import (
    assert_ok,
    assert_one_line_failure,
    convert,
    listing,
    read_folder,
    read_safetensors,
    write_model,
    write_safetensors,
)

import hurray
from hurray import PerChannelAffine
from hurray.convert import ConversionError, UsageError, zoo


def _build(g):
    g.expect("codes", ("int8",), 2)
    n, k = g.shape("codes")
    if g.shape("scale") != (n,):
        raise g.error("codes", f"has {n} rows, {g.source_name('scale')!r} {list(g.shape('scale'))}")
    q = PerChannelAffine(axis=0, scale_buffer=1, scale_dtype=g.dtype("scale"))
    return zoo.Built("int8", (n, k), q, [("data", "codes"), ("scales", "scale")])


@pytest.fixture(scope="module", autouse=True)
def fake_family():
    fam = zoo.register(
        zoo.Family(
            name="test-int8",
            detect=lambda qc: qc.get("quant_method") == "test-int8",
            anchor="codes",
            members=("codes", "scale"),
            optional=("shape",),
            build=_build,
        )
    )
    yield fam
    zoo.FAMILIES.remove(fam)


def _tensors(rng):
    return {
        "a.codes": rng.integers(-128, 128, (6, 8)).astype(np.int8),
        "a.scale": rng.random(6).astype(np.float32),
        "a.shape": np.array([6, 8], np.int64),
        "a.bias": rng.standard_normal(6).astype(np.float16),
        "b.codes": rng.integers(-128, 128, (4, 16)).astype(np.int8),
        "b.scale": rng.random(4).astype(np.float16),
        "emb.weight": rng.standard_normal((3, 8)).astype(np.float32),
    }


QC = {"quant_method": "test-int8"}


@pytest.mark.parametrize("shards", [1, 3])
def test_grouping_and_the_way_back(tmp_path, shards):
    rng = np.random.default_rng(shards)
    t = _tensors(rng)
    src = write_model(tmp_path / "m", t, QC, shards=shards)
    hurray.convert(str(src), str(tmp_path / "x.hurray"), quiet=True)
    with hurray.open(str(tmp_path / "x.hurray")) as f:
        assert sorted(f.keys()) == ["a.bias", "a.weight", "b.weight", "emb.weight"]
        w = f["a.weight"].dequantize()
        np.testing.assert_array_equal(w, t["a.codes"] * t["a.scale"][:, None])
        meta = dict(f.metadata)
    assert meta["zoo.family"] == "test-int8"
    with open(os.path.join(src, "config.json")) as fh:
        assert meta["zoo.config.json"] == fh.read()
    rec = json.loads(meta["zoo.tensors"])["a.weight"]
    assert [m["name"] for m in rec["members"]] == ["a.codes", "a.scale", "a.shape"]
    assert rec["members"][2]["bytes"] == t["a.shape"].tobytes().hex()
    wmap = json.loads(meta["zoo.weight_map"])
    assert sorted(wmap) == sorted(t)
    # back to a folder: the same tensors in the same shards, config.json
    hurray.convert(str(tmp_path / "x.hurray"), str(tmp_path / "back") + "/", quiet=True)
    back = read_folder(tmp_path / "back")
    assert back == read_folder(src)
    for shard in set(wmap.values()):
        names = {k for k in read_safetensors(tmp_path / "back" / shard) if k != "__metadata__"}
        assert names == {k for k, v in wmap.items() if v == shard}
    assert (tmp_path / "back" / "config.json").read_text() == (src / "config.json").read_text()
    assert (tmp_path / "back" / "model.safetensors.index.json").exists() == (shards > 1)
    # one file, npz
    hurray.convert(str(tmp_path / "x.hurray"), str(tmp_path / "one.safetensors"), quiet=True)
    one = read_safetensors(tmp_path / "one.safetensors")
    assert {k: v for k, v in one.items() if k != "__metadata__"} == read_folder(src)
    hurray.convert(str(tmp_path / "x.hurray"), str(tmp_path / "one.npz"), quiet=True)
    with np.load(tmp_path / "one.npz") as z:
        for k, a in t.items():
            assert z[k].dtype == a.dtype and z[k].tobytes() == a.tobytes()


def test_dequantize(tmp_path):
    rng = np.random.default_rng(2)
    t = _tensors(rng)
    src = write_model(tmp_path / "m", t, QC, shards=2)
    hurray.convert(str(src), str(tmp_path / "x.hurray"), quiet=True)
    for source in (src, tmp_path / "x.hurray"):
        out = tmp_path / f"deq-{os.path.basename(source)}"
        hurray.convert(str(source), str(out) + "/", quiet=True, dequantize=True)
        back = read_folder(out)
        # members that only described the quantization (a.shape) go with it
        assert sorted(back) == ["a.bias", "a.weight", "b.weight", "emb.weight"]
        assert back["a.weight"][0] == "F32"
        cfg = json.loads((out / "config.json").read_text())
        assert "quantization_config" not in cfg and cfg["model_type"] == "llama"
    # a hurray target gets float tensors, and no zoo record
    hurray.convert(str(src), str(tmp_path / "d.hurray"), quiet=True, dequantize=True)
    with hurray.open(str(tmp_path / "d.hurray")) as f:
        assert f["a.weight"].descriptor.quantization is None
        assert "zoo.tensors" not in f.metadata
        assert "quantization_config" not in json.loads(f.metadata["zoo.config.json"])
    with pytest.raises(UsageError):
        hurray.convert(
            str(src), str(tmp_path / "q.hurray"), quiet=True, dequantize=True, quantize="q8_0"
        )


def test_the_record_is_written_once(tmp_path, monkeypatch):
    # The record of grouped tensors was serialised again after each one:
    # quadratic in the layer count (4,000 GPTQ layers took 50 s, 1,000 took
    # 3.4). Counting the serialisations keeps the test free of timing.
    rng = np.random.default_rng(9)
    t = {}
    for i in range(40):
        t[f"l{i}.codes"] = rng.integers(-128, 128, (2, 8)).astype(np.int8)
        t[f"l{i}.scale"] = rng.random(2).astype(np.float32)
    src = write_model(tmp_path / "m", t, QC)
    dumped = []
    real = zoo.json.dumps

    def counting(obj, *args, **kwargs):
        text = real(obj, *args, **kwargs)
        if isinstance(obj, dict) and "l0.weight" in obj:
            dumped.append(len(obj))
        return text

    monkeypatch.setattr(zoo.json, "dumps", counting)
    hurray.convert(str(src), str(tmp_path / "x.hurray"), quiet=True)
    assert dumped == [40]
    with hurray.open(str(tmp_path / "x.hurray")) as f:
        assert len(json.loads(f.metadata["zoo.tensors"])) == 40


@pytest.mark.parametrize("via_hurray", [False, True])
def test_requantized_tensors_lose_their_record(tmp_path, via_hurray):
    # A grouped tensor requantized on the way kept its record, so converting
    # back wrote the new codes and scales under the old members' names and
    # dtypes (the byte counts agree here): garbage that loaded quietly.
    t = _tensors(np.random.default_rng(5))
    src = write_model(tmp_path / "m", t, QC)
    opts = {"quantize": "per_channel", "quantize_include": ["a.weight"], "quiet": True}
    if via_hurray:
        hurray.convert(str(src), str(tmp_path / "plain.hurray"), quiet=True)
        report = hurray.convert(str(tmp_path / "plain.hurray"), str(tmp_path / "x.hurray"), **opts)
    else:
        report = hurray.convert(str(src), str(tmp_path / "x.hurray"), **opts)
    assert "a.weight" in [r.name for r in report.rows if r.quantized]
    assert any("a.weight" in n and "plain tensor" in n for n in report.notes), report.notes
    with hurray.open(str(tmp_path / "x.hurray")) as f:
        records = json.loads(f.metadata["zoo.tensors"])
        config = json.loads(f.metadata["zoo.config.json"])
    assert sorted(records) == ["b.weight"]  # stored as it was read
    assert config["quantization_config"] == QC
    hurray.convert(str(tmp_path / "x.hurray"), str(tmp_path / "back") + "/", quiet=True)
    back = read_folder(tmp_path / "back")
    assert "a.codes" not in back and "a.scale" not in back and back["a.weight"][0] == "F32"
    assert back["b.codes"] == read_folder(src)["b.codes"]


def test_config_is_kept_when_no_record_is_left(tmp_path):
    # config.json may describe layers no family reads (they pass through as
    # stored), so it keeps its quantization_config; the note says so, and
    # says nothing of it when there is none.
    t = _tensors(np.random.default_rng(7))
    src = write_model(tmp_path / "m", t, QC)
    opts = {"quantize": "per_channel", "quantize_include": ["*.weight"], "quiet": True}
    report = hurray.convert(str(src), str(tmp_path / "x.hurray"), **opts)
    assert any("still describes them" in n for n in report.notes), report.notes
    with hurray.open(str(tmp_path / "x.hurray")) as f:
        assert "zoo.tensors" not in f.metadata
        assert json.loads(f.metadata["zoo.config.json"])["quantization_config"] == QC
        ts = {k: f[k] for k in f.keys()}
        meta = dict(f.metadata)
    config = json.loads(meta["zoo.config.json"])
    del config["quantization_config"]
    meta["zoo.config.json"] = json.dumps(config)
    hurray.convert(str(src), str(tmp_path / "plain.hurray"), quiet=True)
    with hurray.open(str(tmp_path / "plain.hurray")) as f:
        meta["zoo.tensors"] = f.metadata["zoo.tensors"]
    hurray.save(str(tmp_path / "y.hurray"), ts, meta)
    report = hurray.convert(str(tmp_path / "y.hurray"), str(tmp_path / "z.hurray"), **opts)
    notes = [n for n in report.notes if "a.weight" in n]
    assert notes and "quantization_config" not in notes[0], report.notes


@pytest.mark.parametrize("name", ["m.safetensors.index.json", "m.safetensors", "m.npz"])
@pytest.mark.parametrize("shards", [1, 2])
def test_folders_named_like_files(tmp_path, name, shards):
    # A folder is a model folder whatever its name: "m.safetensors.index.json"
    # was opened as the index inside itself (ENOENT), and the C command took
    # "m.safetensors" for a file ("is not a regular file").
    t = _tensors(np.random.default_rng(8))
    src = write_model(tmp_path / name, t, QC, shards=shards)
    out = tmp_path / "x.hurray"
    for arg in (str(src), str(src) + "/"):
        hurray.convert(arg, str(out), quiet=True)  # the test family is this process's
        with hurray.open(str(out)) as f:
            assert sorted(f.keys()) == ["a.bias", "a.weight", "b.weight", "emb.weight"]
        assert_ok(convert(arg, out, "-q"))  # the C command hands the folder to Python
        with hurray.open(str(out)) as f:
            assert sorted(f.keys()) == sorted(t)


def test_dequantize_says_when_it_cannot_read_the_format(tmp_path):
    # bitsandbytes 8-bit (int8 weight + SCB) is no family's: --dequantize
    # copied its int8 codes and kept quantization_config, reporting only
    # "0 quantized".
    qc = {"quant_method": "bitsandbytes", "load_in_8bit": True}
    t = {
        "l.weight": np.ones((4, 8), np.int8),
        "l.SCB": np.ones(4, np.float32),
    }
    src = write_model(tmp_path / "m", t, qc)
    report = hurray.convert(str(src), str(tmp_path / "d") + "/", dequantize=True, quiet=True)
    assert any("'bitsandbytes'" in n and "copied as stored" in n for n in report.notes), (
        report.notes
    )
    assert read_folder(tmp_path / "d") == read_folder(src)
    plain = hurray.convert(str(src), str(tmp_path / "x.hurray"), quiet=True)
    assert not any("does not read" in n for n in plain.notes)


def test_include_exclude_apply_to_grouped_names(tmp_path):
    t = _tensors(np.random.default_rng(3))
    src = write_model(tmp_path / "m", t, QC)
    hurray.convert(str(src), str(tmp_path / "x.hurray"), quiet=True, include=["a.*"])
    with hurray.open(str(tmp_path / "x.hurray")) as f:
        assert sorted(f.keys()) == ["a.bias", "a.weight"]
        assert sorted(json.loads(f.metadata["zoo.tensors"])) == ["a.weight"]
    hurray.convert(str(tmp_path / "x.hurray"), str(tmp_path / "b") + "/", quiet=True)
    assert sorted(read_folder(tmp_path / "b")) == ["a.bias", "a.codes", "a.scale", "a.shape"]


def test_build_errors_name_the_tensor(tmp_path):
    t = _tensors(np.random.default_rng(4))
    t["b.scale"] = np.ones(5, np.float16)
    src = write_model(tmp_path / "m", t, QC)
    with pytest.raises(
        ConversionError, match=r"test-int8: tensor 'b.codes': has 4 rows, 'b.scale' \[5\]"
    ):
        hurray.convert(str(src), str(tmp_path / "x.hurray"), quiet=True)
    assert not (tmp_path / "x.hurray").exists()
    t = _tensors(np.random.default_rng(4))
    del t["b.scale"]
    src = write_model(tmp_path / "m2", t, QC)
    with pytest.raises(ConversionError, match="'b.codes' has no 'b.scale' beside it"):
        hurray.convert(str(src), str(tmp_path / "x.hurray"), quiet=True)
    t = _tensors(np.random.default_rng(4))
    t["b.weight"] = np.ones(2, np.float32)
    src = write_model(tmp_path / "m3", t, QC)
    with pytest.raises(ConversionError, match="holds both 'b.weight' and 'b.codes'"):
        hurray.convert(str(src), str(tmp_path / "x.hurray"), quiet=True)


def test_registry():
    with pytest.raises(ValueError, match="registered twice"):
        zoo.register(zoo.Family("test-int8", lambda qc: False, "x", ("x",), _build))
    assert [f.name for f in zoo.detect({"quant_method": "test-int8"})] == ["test-int8"]
    assert zoo.detect({"quant_method": "nobody"}) == []
    assert [f.name for f in zoo.FAMILIES][:3] == ["gptq", "awq", "compressed-tensors"]


# --- folders without a family, and the CLI's one-line failures -------------------


def test_plain_folder_keeps_config(tmp_path):
    t = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    src = write_model(tmp_path / "m", t, None)
    assert_ok(convert(src, tmp_path / "x.hurray", "-q"))
    with hurray.open(str(tmp_path / "x.hurray")) as f:
        assert f.metadata["zoo.family"] == ""
        assert "zoo.tensors" not in f.metadata
    assert_ok(convert(tmp_path / "x.hurray", f"{tmp_path / 'back'}/", "-q"))
    assert listing(tmp_path / "back") == ["config.json", "model.safetensors"]
    assert read_folder(tmp_path / "back") == read_folder(src)
    # no config.json: no zoo keys, as before
    os.unlink(src / "config.json")
    assert_ok(convert(src, tmp_path / "y.hurray", "-q"))
    with hurray.open(str(tmp_path / "y.hurray")) as f:
        assert not any(k.startswith("zoo.") for k in f.metadata)


@pytest.mark.parametrize(
    "config,words",
    [
        ("{not json", ["config.json", "not valid JSON"]),
        ('{"a": 1, "a": 2}', ["config.json", "twice"]),
        ("[1, 2]", ["config.json", "not a JSON object"]),
        ('{"quantization_config": {"bits": 4}}', ["config.json", "'quant_method'"]),
        ('{"quantization_config": 7}', ["config.json", "not a JSON object"]),
    ],
    ids=["not-json", "duplicate-key", "not-object", "no-quant-method", "qc-not-object"],
)
def test_bad_config_is_one_line(tmp_path, config, words):
    src = write_model(tmp_path / "m", {"w": np.ones(2, np.float32)}, None)
    (src / "config.json").write_text(config)
    before = listing(tmp_path)
    assert_one_line_failure(convert(src, tmp_path / "x.hurray"), words)
    assert listing(tmp_path) == before


@pytest.mark.parametrize("existing", [False, True])
def test_shards_in_subfolders_come_back(tmp_path, existing):
    # The reader takes an index naming "sub/part.safetensors"; the folder
    # target refused to write it back ("not a plain *.safetensors name").
    src = tmp_path / "m"
    write_model(src, {"w": np.ones(2, np.float32)}, None)
    os.unlink(src / "model.safetensors")
    os.makedirs(src / "sub" / "deeper")
    parts = {"a": "sub/deeper/a.safetensors", "b": "b.safetensors", "c": "sub/c.safetensors"}
    for i, (name, shard) in enumerate(parts.items()):
        write_safetensors(src / shard, {name: np.full(3, i, np.float32)}, {"format": "pt"})
    (src / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 36}, "weight_map": parts})
    )
    assert_ok(convert(src, tmp_path / "x.hurray", "-q"))
    back = tmp_path / "back"
    if existing:
        os.mkdir(back)
        (back / "keep.txt").write_text("mine")
    assert_ok(convert(tmp_path / "x.hurray", f"{back}/", "-q"))
    assert read_folder(back) == read_folder(src)
    for shard in parts.values():
        assert (back / shard).is_file()
    assert sorted(os.listdir(back / "sub")) == ["c.safetensors", "deeper"]
    # A failed write into an existing folder leaves no subfolder behind.
    other = tmp_path / "other"
    os.mkdir(other)
    os.mkdir(other / "b.safetensors")  # the last shard written cannot be replaced
    r = convert(tmp_path / "x.hurray", f"{other}/")
    assert r.returncode == 1, r.stderr
    assert os.listdir(other) == ["b.safetensors"] and not os.listdir(other / "b.safetensors")


def _hurray_with(tmp_path, meta_update):
    src = write_model(tmp_path / "m", {"w": np.ones(2, np.float32)}, None)
    assert_ok(convert(src, tmp_path / "a.hurray", "-q"))
    with hurray.open(str(tmp_path / "a.hurray")) as f:
        ts = {k: f[k] for k in f.keys()}
        meta = dict(f.metadata)
        meta.update(meta_update)
        hurray.save(str(tmp_path / "b.hurray"), ts, meta)
    return tmp_path / "b.hurray"


@pytest.mark.parametrize(
    "meta,words",
    [
        (
            {"zoo.weight_map": json.dumps({"w": "../escape.safetensors"})},
            ["zoo.weight_map", "../escape"],
        ),
        ({"zoo.weight_map": json.dumps({"w": "/tmp/abs.safetensors"})}, ["zoo.weight_map"]),
        ({"zoo.weight_map": json.dumps({"w": "a/../../x.safetensors"})}, ["zoo.weight_map"]),
        ({"zoo.weight_map": json.dumps({"w": "a//x.safetensors"})}, ["zoo.weight_map"]),
        ({"zoo.weight_map": json.dumps({"w": "a/.x/y.safetensors"})}, ["zoo.weight_map"]),
        ({"zoo.index": "../x.safetensors.index.json"}, ["zoo.index"]),
        ({"zoo.index": "sub/x.safetensors.index.json"}, ["zoo.index"]),
        ({"zoo.weight_map": "[1]"}, ["zoo.weight_map"]),
        # an int among the names: min() of them raised a bare TypeError
        ({"zoo.weight_map": json.dumps({"w": "a.safetensors", "x": 1})}, ["zoo.weight_map"]),
    ],
    ids=[
        "dotdot",
        "absolute",
        "dotdot-inside",
        "empty-part",
        "hidden-part",
        "index",
        "index-in-subfolder",
        "not-object",
        "not-a-string",
    ],
)
def test_folder_target_refuses_hostile_names(tmp_path, meta, words):
    src = _hurray_with(tmp_path, meta)
    before = listing(tmp_path)
    assert_one_line_failure(convert(src, f"{tmp_path / 'out'}/"), words)
    assert listing(tmp_path) == before  # no folder, no temporary left behind


def _two_tensor_hurray(tmp_path, weight_map):
    src = write_model(
        tmp_path / "m", {"w": np.ones(2, np.float32), "v": np.zeros(3, np.int8)}, None
    )
    assert_ok(convert(src, tmp_path / "a.hurray", "-q"))
    with hurray.open(str(tmp_path / "a.hurray")) as f:
        ts = {k: f[k] for k in f.keys()}
        meta = dict(f.metadata, **{"zoo.weight_map": json.dumps(weight_map)})
        hurray.save(str(tmp_path / "b.hurray"), ts, meta)
    return tmp_path / "b.hurray"


@pytest.mark.parametrize(
    "weight_map,words",
    [
        # a file that is also the folder of another: found only once the
        # first was published, leaving an existing target half replaced
        ({"w": "x.safetensors", "v": "x.safetensors/b.safetensors"}, ["inside 'x.safetensors'"]),
        ({"w": "a.safetensors", "v": "config.json/b.safetensors"}, ["inside 'config.json'"]),
        # 3,000 levels: mkdir failed at PATH_MAX and the clean-up recursed
        ({"w": "a/" * 3000 + "x.safetensors", "v": "b.safetensors"}, ["not a plain"]),
        ({"w": "a/" * 9 + "x.safetensors", "v": "b.safetensors"}, ["not a plain"]),
    ],
    ids=["file-and-folder", "config-as-folder", "deep", "nine-levels"],
)
@pytest.mark.parametrize("existing", [False, True])
def test_subfolder_names_refused_before_writing(tmp_path, weight_map, words, existing):
    src = _two_tensor_hurray(tmp_path, weight_map)
    out = tmp_path / "out"
    if existing:
        out.mkdir()
        (out / "a.safetensors").write_text("mine")
    before = listing(tmp_path), listing(out) if existing else None
    assert_one_line_failure(convert(src, f"{out}/"), words)
    assert (listing(tmp_path), listing(out) if existing else None) == before
    if existing:
        assert (out / "a.safetensors").read_text() == "mine"


def test_subfolder_link_in_an_existing_target_is_not_followed(tmp_path):
    src = _two_tensor_hurray(tmp_path, {"w": "sub/a.safetensors", "v": "b.safetensors"})
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "sub")
    assert_one_line_failure(convert(src, f"{out}/"), ["symbolic link"])
    assert listing(elsewhere) == [] and listing(out) == ["sub"]


def test_existing_folder_untouched_on_failure(tmp_path):
    src = _hurray_with(tmp_path, {"zoo.weight_map": json.dumps({"w": "../x.safetensors"})})
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    assert_one_line_failure(convert(src, out), ["zoo.weight_map"])
    assert listing(out) == ["keep.txt"]
    # and a good conversion into it adds the files beside what is there
    good = _hurray_with(tmp_path / "g", {})
    assert_ok(convert(good, out, "-q"))
    assert listing(out) == ["config.json", "keep.txt", "model.safetensors"]


def test_named_directory_target_still_refused(tmp_path):
    src = write_model(tmp_path / "m", {"w": np.ones(2, np.float32)}, None)
    (tmp_path / "d.hurray").mkdir()
    assert_one_line_failure(convert(src, tmp_path / "d.hurray"), ["is a directory"])


def _zoo_hurray(tmp_path, mutate):
    """A zoo .hurray file (the test family) whose zoo.tensors record is
    changed by `mutate`, written with hurray.save."""
    t = _tensors(np.random.default_rng(5))
    src = write_model(tmp_path / "m", t, QC)
    hurray.convert(str(src), str(tmp_path / "a.hurray"), quiet=True)
    with hurray.open(str(tmp_path / "a.hurray")) as f:
        ts = {k: f[k] for k in f.keys()}
        meta = dict(f.metadata)
        records = json.loads(meta["zoo.tensors"])
        mutate(records["a.weight"]["members"])
        meta["zoo.tensors"] = json.dumps(records)
        hurray.save(str(tmp_path / "b.hurray"), ts, meta)
    return tmp_path / "b.hurray"


@pytest.mark.parametrize(
    "mutate,words",
    [
        (lambda ms: ms[0].update(dtype="nonsense"), ["zoo.tensors", "'nonsense'"]),
        (lambda ms: ms[0].update(dtype="uint4"), ["zoo.tensors", "whole-byte"]),
        (lambda ms: ms[0].update(shape=[2**62, 2**62]), ["'a.codes'", "needs"]),
        (lambda ms: ms[0].update(shape=[-1]), ["zoo.tensors", "shape"]),
        (lambda ms: ms[1].update(buffer=9), ["'a.scale'", "buffer 9"]),
        (lambda ms: ms[2].update(bytes="zz"), ["zoo.tensors"]),
        (lambda ms: ms[1].update(name="a.bias"), ["'a.bias'", "one would be lost"]),
        (lambda ms: ms.append(7), ["zoo.tensors"]),
    ],
    ids=["dtype", "sub-byte", "huge-shape", "negative", "buffer", "hex", "collision", "not-object"],
)
def test_hostile_zoo_record_is_one_line(tmp_path, mutate, words):
    src = _zoo_hurray(tmp_path, mutate)
    before = listing(tmp_path)
    assert_one_line_failure(convert(src, tmp_path / "out.safetensors"), words)
    assert listing(tmp_path) == before


def test_several_families_separator_and_self_named_members(tmp_path):
    """Two families on one folder: one joins members with "_" and names the
    hurray tensor after the prefix itself (gpt-oss style), the other has a
    member named like its output (bitsandbytes style) and accepts only some
    layers; the layers it declines pass through."""

    def build_sep(g):
        n, k = g.shape("blocks")
        q = PerChannelAffine(axis=0, scale_buffer=1, scale_dtype=g.dtype("scales"))
        return zoo.Built("int8", (n, k), q, [("data", "blocks"), ("scales", "scales")])

    def build_self(g):
        n, k = g.shape("weight")
        q = PerChannelAffine(axis=0, scale_buffer=1, scale_dtype=g.dtype("weight.absmax"))
        return zoo.Built("int8", (n, k), q, [("data", "weight"), ("scales", "weight.absmax")])

    fams = [
        zoo.register(
            zoo.Family(
                "test-sep",
                lambda qc: qc.get("quant_method") == "test-multi",
                "blocks",
                ("blocks", "scales"),
                build_sep,
                output_name="",
                separator="_",
            )
        ),
        zoo.register(
            zoo.Family(
                "test-self",
                lambda qc: qc.get("quant_method") == "test-multi",
                "weight.absmax",
                ("weight", "weight.absmax"),
                build_self,
                accepts=lambda prefix, qc: prefix.startswith("s"),
            )
        ),
    ]
    try:
        rng = np.random.default_rng(12)
        t = {
            "e.up_proj_blocks": rng.integers(-9, 9, (4, 8)).astype(np.int8),
            "e.up_proj_scales": rng.random(4).astype(np.float32),
            "s.weight": rng.integers(-9, 9, (3, 8)).astype(np.int8),
            "s.weight.absmax": rng.random(3).astype(np.float32),
            "t.weight": rng.integers(-9, 9, (2, 8)).astype(np.int8),
            "t.weight.absmax": rng.random(2).astype(np.float32),
        }
        src = write_model(tmp_path / "m", t, {"quant_method": "test-multi"})
        hurray.convert(str(src), str(tmp_path / "x.hurray"), quiet=True)
        with hurray.open(str(tmp_path / "x.hurray")) as f:
            assert sorted(f.keys()) == ["e.up_proj", "s.weight", "t.weight", "t.weight.absmax"]
            assert f.metadata["zoo.family"] == "test-sep,test-self"
            np.testing.assert_array_equal(
                f["s.weight"].dequantize(), t["s.weight"] * t["s.weight.absmax"][:, None]
            )
            assert f["t.weight"].descriptor.quantization is None
        hurray.convert(str(tmp_path / "x.hurray"), f"{tmp_path / 'b'}/", quiet=True)
        assert read_folder(tmp_path / "b") == read_folder(src)
    finally:
        for fam in fams:
            zoo.FAMILIES.remove(fam)


def test_also_families(tmp_path):
    """Family.also: more anchors of one convention under one name."""

    def build_for(m):
        def build(g):
            n, k = g.shape(m + "_codes")
            q = PerChannelAffine(axis=0, scale_buffer=1, scale_dtype=g.dtype(m + "_scale"))
            return zoo.Built("int8", (n, k), q, [("data", m + "_codes"), ("scales", m + "_scale")])

        return build

    def fam(m, also=()):
        return zoo.Family(
            "test-also",
            lambda qc: qc.get("quant_method") == "test-also",
            m + "_codes",
            (m + "_codes", m + "_scale"),
            build_for(m),
            output_name=m,
            also=also,
        )

    top = zoo.register(fam("up", also=(fam("down"),)))
    try:
        rng = np.random.default_rng(14)
        t = {
            "x.up_codes": rng.integers(-9, 9, (4, 8)).astype(np.int8),
            "x.up_scale": rng.random(4).astype(np.float32),
            "x.down_codes": rng.integers(-9, 9, (8, 4)).astype(np.int8),
            "x.down_scale": rng.random(8).astype(np.float32),
        }
        src = write_model(tmp_path / "m", t, {"quant_method": "test-also"})
        hurray.convert(str(src), str(tmp_path / "x.hurray"), quiet=True)
        with hurray.open(str(tmp_path / "x.hurray")) as f:
            assert sorted(f.keys()) == ["x.down", "x.up"]
            assert f.metadata["zoo.family"] == "test-also"
        hurray.convert(str(tmp_path / "x.hurray"), f"{tmp_path / 'b'}/", quiet=True)
        assert read_folder(tmp_path / "b") == read_folder(src)
    finally:
        zoo.FAMILIES.remove(top)


def test_folder_to_other_formats_copies_the_members(tmp_path):
    """A quantized folder straight into safetensors (file or folder) is
    copied, not dequantized: the same tensors, and config.json beside a
    folder; --dequantize groups and dequantizes."""
    t = _tensors(np.random.default_rng(15))
    src = write_model(tmp_path / "m", t, QC, shards=2)
    hurray.convert(str(src), str(tmp_path / "one.safetensors"), quiet=True)
    one = read_safetensors(tmp_path / "one.safetensors")
    assert {k: v for k, v in one.items() if k != "__metadata__"} == read_folder(src)
    hurray.convert(str(src), f"{tmp_path / 'copy'}/", quiet=True)
    assert read_folder(tmp_path / "copy") == read_folder(src)
    assert (tmp_path / "copy" / "config.json").read_text() == (src / "config.json").read_text()
    hurray.convert(str(src), str(tmp_path / "deq.safetensors"), quiet=True, dequantize=True)
    deq = read_safetensors(tmp_path / "deq.safetensors")
    assert "a.weight" in deq and "a.codes" not in deq


def _gptq_folder(folder, shards=2):
    from test_zoo_gptq import _config, _layer

    members, _ = _layer(np.random.default_rng(1), 64, 32)
    return write_model(folder, {f"m.l0.{m}": a for m, a in members.items()}, _config(), shards)


def test_index_names_with_dot_parts_come_back_as_a_folder(tmp_path):
    """An index listing "./model-00001-of-00002.safetensors" converted to
    hurray, but the name went into zoo.weight_map as it was, and the folder
    writer then refused to write it back."""
    src = _gptq_folder(tmp_path / "m")
    index = os.path.join(src, "model.safetensors.index.json")
    with open(index) as f:
        doc = json.load(f)
    doc["weight_map"] = {k: "./" + v for k, v in doc["weight_map"].items()}
    with open(index, "w") as f:
        json.dump(doc, f)
    assert_ok(convert(src, tmp_path / "m.hurray", "-q"))
    assert_ok(convert(tmp_path / "m.hurray", f"{tmp_path}/back/", "-q"))
    assert sorted(os.listdir(tmp_path / "back")) == sorted(
        n for n in os.listdir(src) if n.endswith((".safetensors", ".json"))
    )


def test_zoo_refusals_name_the_cause(tmp_path):
    """A shard that is a symbolic link loop was "missing"; bitsandbytes'
    load_in_4bit "false" (a string) was true; an FP8 weight [0, 0] with one
    scale gave a buffer-level C error; MXFP4 members "_blocks"/"_scales"
    formed a tensor named "" that only the writer refused."""
    src = _gptq_folder(tmp_path / "loop")
    shard = os.path.join(src, "model-00002-of-00002.safetensors")
    os.remove(shard)
    os.symlink(shard, shard)
    assert_one_line_failure(
        convert(src, tmp_path / "loop.hurray", "-q"), "Too many levels of symbolic links"
    )
    st = json.dumps({"quant_type": "nf4", "blocksize": 64, "dtype": "float32", "shape": [4, 32]})
    bnb = {
        "p.weight": np.zeros((64, 1), np.uint8),
        "p.weight.absmax": np.ones(2, np.float32),
        "p.weight.quant_map": np.linspace(-1, 1, 16).astype(np.float32),
        "p.weight.quant_state.bitsandbytes__nf4": np.frombuffer(st.encode(), np.uint8).copy(),
    }
    src = write_model(
        tmp_path / "bnb", bnb, {"quant_method": "bitsandbytes", "load_in_4bit": "false"}
    )
    assert_one_line_failure(
        convert(src, tmp_path / "bnb.hurray", "-q"), "['load_in_4bit'] is 'false', not a bool"
    )
    fp8 = {
        "m.w.weight": np.zeros((0, 0), np.uint8),
        "m.w.weight_scale_inv": np.array([0.5], np.float32),
    }
    src = write_model(
        tmp_path / "fp8",
        fp8,
        {"quant_method": "fp8", "fmt": "e4m3"},
        dtypes={"m.w.weight": "F8_E4M3"},
    )
    assert_one_line_failure(
        convert(src, tmp_path / "fp8.hurray", "-q"), "weight [0, 0] is empty and has no block"
    )
    mx = {"_blocks": np.zeros((2, 1, 16), np.uint8), "_scales": np.full((2, 1), 127, np.uint8)}
    src = write_model(tmp_path / "mx", mx, {"quant_method": "mxfp4"})
    assert_one_line_failure(
        convert(src, tmp_path / "mx.hurray", "-q"), "tensor '_blocks' has no name before '_blocks'"
    )
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".hurray")]
