"""The Python face of a descriptor. The descriptor and its parts live in C
(_hy_descriptor.c, _hy_records.c): built, encoded, decoded and validated by
libhurray, so Python and C can never disagree about the format. What is left
here is API sugar: replace(), the dict form, equality and repr."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping, Union

from . import _hurray

# The parts of a descriptor are C records (_hy_records.c): immutable,
# compared and hashed by value, built straight from the C descriptor.
Buffer = _hurray.Buffer
Device = _hurray.Device
Dense = _hurray.Dense
Sparse = _hurray.Sparse
Paged = _hurray.Paged
Member = _hurray.Member
Composite = _hurray.Composite
PerTensorAffine = _hurray.PerTensorAffine
PerChannelAffine = _hurray.PerChannelAffine
BlockAffine = _hurray.BlockAffine
Nf4 = _hurray.Nf4
Mxfp = _hurray.Mxfp
BlockCoded = _hurray.BlockCoded
Statistics = _hurray.Statistics
Shard = _hurray.Shard
Extension = _hurray.Extension
Packing = _hurray.Packing


def _as_dataclass(cls) -> None:
    """Gives a C record the dataclass protocol (dataclasses.fields, asdict,
    replace, is_dataclass), as the frozen dataclasses it replaces had: the
    field table of a frozen dataclass with the same fields and defaults."""
    spec = [
        (n, Any)
        if n not in cls._field_defaults
        else (n, Any, dataclasses.field(default=cls._field_defaults[n]))
        for n in cls.__match_args__
    ]
    proto = dataclasses.make_dataclass(cls.__name__, spec, frozen=True)
    cls.__dataclass_fields__ = proto.__dataclass_fields__
    cls.__dataclass_params__ = proto.__dataclass_params__


for _record in (
    Buffer,
    Device,
    Dense,
    Sparse,
    Paged,
    Member,
    Composite,
    PerTensorAffine,
    PerChannelAffine,
    BlockAffine,
    Nf4,
    Mxfp,
    BlockCoded,
    Statistics,
    Shard,
    Extension,
    Packing,
):
    _as_dataclass(_record)

Layout = Union[Dense, Sparse, Paged, Composite]
Quantization = Union[PerTensorAffine, PerChannelAffine, BlockAffine, Nf4, Mxfp, BlockCoded]

# Block-coded formats: {name: (elements per block, bytes per block)}, from C.
BLOCK_FORMATS = _hurray.BLOCK_FORMATS


def _int_keeping_negative_zero(text: str):
    return -0.0 if text == "-0" else int(text)


class Descriptor(_hurray._Descriptor):
    """What a tensor's bytes mean: dtype, shape, layout, quantization, buffer
    table, device, and optional statistics, shard and extension type.

    The fields live in C (_hy_descriptor.c): construction builds and encodes
    the C descriptor at once (so an impossible field fails at once), decode()
    reads the parts straight from it. Consistency is checked by validate(),
    or when a Tensor is built."""

    __slots__ = ()

    def __setattr__(self, name, value):
        raise AttributeError("Descriptor is immutable; use replace()")

    def __reduce__(self):
        # copy, deepcopy and pickle travel through the canonical encoding.
        return (Descriptor.decode, (self._encoded,))

    def replace(self, **changes) -> "Descriptor":
        fields = {k: getattr(self, k) for k in _FIELDS}
        fields.update(changes)
        dtype, shape = fields.pop("dtype"), fields.pop("shape")
        return Descriptor(dtype, shape, **fields)

    # --- dict form: exactly the JSON rendering (docs/spec/descriptor-json.md) ---
    def to_dict(self) -> dict:
        """json.loads(self.to_json()): C renders it, so the two always agree;
        from_dict inverts it, except for a NaN's sign and payload: every NaN
        is written "nan" and read back as the default quiet NaN. A float
        field of -0.0 is written "-0", which json reads as the int 0: it
        stays -0.0 (no integer field is "-0")."""
        return json.loads(self.to_json(), parse_int=_int_keeping_negative_zero)

    @classmethod
    def from_dict(cls, d: dict) -> "Descriptor":
        dtype, shape, fields = _fields_from_dict(d)
        return cls(dtype, shape, **fields)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __eq__(self, other):
        return isinstance(other, Descriptor) and self._encoded == other._encoded

    def __hash__(self):
        return hash(self._encoded)

    def __repr__(self):
        try:
            parts = [f"dtype={self.dtype!r}", f"shape={self.shape}"]
        except ValueError:  # its __init__ never ran: a subclass that skips it, or __new__
            return f"<{type(self).__name__}, not initialised>"
        for name in ("strides", "layout", "quantization", "statistics", "shard", "extension"):
            value = getattr(self, name)
            if value is not None and not (name == "layout" and value == Dense()):
                parts.append(f"{name}={value!r}")
        parts.append(f"buffers={len(self.buffers)}")
        return f"Descriptor({', '.join(parts)})"


_FIELDS = (
    "dtype",
    "shape",
    "strides",
    "byte_offset",
    "layout",
    "quantization",
    "buffers",
    "device",
    "statistics",
    "shard",
    "extension",
)
_hurray._set_descriptor_class(Descriptor)


def _mapping(v: Any, what: str) -> Mapping:
    """`v` where an object belongs; TypeError naming the field otherwise
    (its .get or ** failed with an AttributeError or a bare TypeError)."""
    if not isinstance(v, Mapping):
        raise TypeError(f"{what} must be a dict, not {type(v).__name__}")
    return v


def _fields_from_dict(d: dict) -> tuple:
    d = _mapping(d, "a descriptor")
    q = d.get("quantization")
    stats = None if d.get("statistics") is None else _mapping(d["statistics"], "statistics")
    ext = None if d.get("extension") is None else _mapping(d["extension"], "extension")
    return (
        d["dtype"],
        d["shape"],
        dict(
            strides=d.get("strides"),
            byte_offset=d.get("byte_offset", 0),
            layout=_part_from(_mapping(d["layout"], "layout")),
            quantization=_part_from(_mapping(q, "quantization")) if q else None,
            buffers=[Buffer(**_mapping(b, "a buffer")) for b in d.get("buffers", [])],
            device=Device(**_mapping(d["device"], "device")) if "device" in d else Device(),
            statistics=None
            if stats is None
            else Statistics(
                min=None if "min" not in stats else _float(stats["min"]),
                max=None if "max" not in stats else _float(stats["max"]),
                nan_count=stats.get("nan_count"),
                zero_count=stats.get("zero_count"),
            ),
            shard=None
            if "shard" not in d
            else Shard(
                tuple(_mapping(d["shard"], "shard")["global_shape"]), tuple(d["shard"]["offsets"])
            ),
            extension=None if ext is None else Extension(ext["name"], _extension_metadata(ext)),
        ),
    )


_BY_KIND = {
    cls._kind: cls
    for cls in (
        Dense,
        Sparse,
        Paged,
        Composite,
        PerTensorAffine,
        PerChannelAffine,
        BlockAffine,
        Nf4,
        Mxfp,
        BlockCoded,
    )
}


def _extension_metadata(ext: dict) -> bytes:
    """An extension's metadata: "metadata_hex" (to_dict's form) or bytes-like
    "metadata"; an int is refused, which bytes() would make that many NULs."""
    if "metadata_hex" in ext:
        return bytes.fromhex(ext["metadata_hex"])
    value = ext.get("metadata", b"")
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"extension metadata is bytes, not {type(value).__name__}")
    return bytes(value)


def _float(v) -> float:
    return float(v)  # also "nan", "inf", "-inf"


def _json_value(v):
    """A JSON field value as a record field: lists become tuples, and the
    {word_bits, axis, order} objects of code_packing and zero_point_packing
    become Packing records."""
    if isinstance(v, list):
        return tuple(v)
    if isinstance(v, dict) and "word_bits" in v:
        return Packing(**{k: tuple(x) if isinstance(x, list) else x for k, x in v.items()})
    return v


def _part_from(d: dict):
    """A layout or quantization record from its JSON form."""
    cls = _BY_KIND.get(d["kind"])
    if cls is None:
        raise ValueError(f"unknown layout or quantization kind {d['kind']!r}")
    if cls is Composite:
        members = [_mapping(m, "a member") for m in d["members"]]
        return Composite(
            tuple(Member(m["name"], Descriptor.from_dict(m["descriptor"])) for m in members)
        )
    fields = {k: _json_value(v) for k, v in d.items() if k != "kind"}
    for key in ("scale", "scale_offset"):  # the float fields: "nan", "inf" in JSON
        if key in fields:
            fields[key] = _float(fields[key])
    return cls(**fields)
