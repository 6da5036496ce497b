"""The descriptor lives in C (ADR-0018): its parts are C records built
straight from the HurrayDescriptor, no JSON text passes between C and
Python, and what Python needs to know (enum names, statuses and their
exceptions, dtype sizes) comes from C."""

import copy
import dataclasses
import pathlib
import pickle
import re

import numpy as np
import pytest

import hurray
from hurray import (
    BlockAffine,
    Buffer,
    Composite,
    Dense,
    Descriptor,
    Device,
    Extension,
    Member,
    Mxfp,
    Nf4,
    Paged,
    PerChannelAffine,
    PerTensorAffine,
    Shard,
    Sparse,
    Statistics,
    _hurray,
)

PACKAGE = pathlib.Path(hurray.__file__).parent

PARTS = [
    Buffer("data", 8),
    Device(),
    Dense(),
    Sparse("coo", "int32", 2, index_buffers=(1, 2)),
    Paged(0, 4, 2),
    Composite(),
    PerTensorAffine(0.5, 3),
    PerChannelAffine(0, 1),
    BlockAffine(1, 32, 1),
    Nf4(64, 1),
    Mxfp("fp4_e2m1", 1, 1),
    Statistics(min=0.0),
    Shard((4,), (0,)),
    Extension("x", b"\x00\xff"),
]


def test_no_json_text_between_c_and_python(monkeypatch):
    """Construction, decode and Tensor.descriptor never go through the JSON
    rendering (they did: descriptor_build took a dict, decode parsed JSON)."""

    def refused(*args):
        raise AssertionError("JSON or dict round trip")

    for name in ("descriptor_json", "descriptor_build"):
        if hasattr(_hurray, name):
            monkeypatch.setattr(_hurray, name, refused)
    monkeypatch.setattr("json.loads", refused)
    d = Descriptor(
        "int8",
        (4, 8),
        quantization=PerChannelAffine(0, 1),
        buffers=[Buffer("data", 32), Buffer("scales", 16, 4)],
    )
    assert Descriptor.decode(d.encode()) == d
    t = hurray.quantize(np.ones((4, 32), np.float32), "q4_0")
    assert isinstance(t.descriptor.quantization, BlockAffine)


def test_parts_are_c_records_that_behave_like_frozen_dataclasses():
    for part in PARTS:
        cls = type(part)
        assert cls.__module__ == "hurray" and not hasattr(part, "__dict__")
        assert dataclasses.is_dataclass(part)
        fields = dataclasses.asdict(part)
        assert list(fields) == list(cls.__match_args__)
        assert cls(**fields) == part and hash(cls(**fields)) == hash(part)
        assert (
            repr(part)
            == f"{cls.__name__}(" + ", ".join(f"{k}={v!r}" for k, v in fields.items()) + ")"
        )
        assert pickle.loads(pickle.dumps(part)) == part
        assert copy.deepcopy(part) == part
        with pytest.raises(AttributeError):
            setattr(part, cls.__match_args__[0], 1)
    assert dataclasses.replace(Buffer("data", 8), byte_size=16) == Buffer("data", 16, 1, "ready")
    assert Buffer("data", 8) != Buffer("data", 9) and Dense(0) != Paged(0, 4, 2)
    with pytest.raises(TypeError, match="missing required argument: 'byte_size'"):
        Buffer("data")
    with pytest.raises(TypeError, match="unexpected keyword"):
        Dense(nope=1)


def test_decoded_parts_are_read_from_the_c_descriptor():
    inner = Descriptor("float32", (2,), layout=Dense(0))
    d = Descriptor(
        "float32",
        (2,),
        layout=Composite((Member("m", inner),)),
        buffers=[Buffer("data", 8, 4)],
        statistics=Statistics(min=float("nan")),
        shard=Shard((4,), (2,)),
        extension=Extension("e", b"\x01"),
    )
    e = Descriptor.decode(d.encode())
    assert e.layout.members[0].name == "m" and e.layout.members[0].descriptor == inner
    assert e.buffers == (Buffer("data", 8, 4, "ready"),) and e.device == Device(1, 0, "host")
    assert np.isnan(e.statistics.min) and e.statistics.max is None
    assert e.shard == Shard((4,), (2,)) and e.extension == Extension("e", b"\x01")
    assert e.to_dict() == d.to_dict()


def test_tables_come_from_c():
    assert hurray.QUANT_SCHEMES == tuple(_hurray.ENUMS["quant_scheme"])
    assert hurray.DTYPES == tuple(_hurray.DTYPE_BITS)
    assert _hurray.DTYPE_BITS["int4"] == 4 and _hurray.DTYPE_BITS["float6_e3m2fn"] == 6
    assert _hurray.ENUMS["role"]["data"] == 1
    assert {c._kind for c in (Dense, Sparse, Paged, Composite)} == set(_hurray.ENUMS["layout"])
    assert {
        c._kind
        for c in (PerTensorAffine, PerChannelAffine, BlockAffine, Nf4, Mxfp, hurray.BlockCoded)
    } == set(_hurray.ENUMS["quantization"])
    for name, code in _hurray.STATUS.items():
        exc = _hurray._error(name, "detail")
        assert type(exc) is _hurray.STATUS_EXCEPTIONS[code]
        assert (exc.status, exc.status_name, exc.args[0]) == (code, name, f"{name}: detail")
    assert isinstance(_hurray._error("HURRAY_ERR_NOT_FOUND", "x"), KeyError)


def test_python_spells_no_status_number_or_c_table():
    """Status numbers, dtype sizes and scheme names are C's, not Python's."""
    for path in list(PACKAGE.glob("*.py")) + list(PACKAGE.glob("torch/*.py")):
        text = path.read_text()
        assert not re.search(r"exc\.status\s*(,|=)", text), path
        assert not re.search(r'"HURRAY_ERR_\w+":\s*\d', text), path
        assert '"float6_e3m2fn": 6' not in text, path
        assert '"mxfp8_e4m3", "mxfp8_e5m2"' not in text, path


def test_collector_tracks_only_what_can_be_in_a_cycle():
    import gc

    assert not gc.is_tracked(Buffer("data", 4))
    assert not gc.is_tracked(Sparse("coo", "int32", 2, index_buffers=(1, 2)))
    d = Descriptor.decode(Descriptor("float32", (2,), buffers=[Buffer("data", 8)]).encode())
    assert not gc.is_tracked(d) and not gc.is_tracked(d.buffers)
    # A mutable value may join a cycle later: its holder stays tracked.
    holder = {}
    m = Member("x", holder)
    holder["m"] = m
    assert gc.is_tracked(m)
