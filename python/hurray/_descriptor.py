"""The Python face of a descriptor. Every field is a plain frozen dataclass;
encoding, decoding and validation go through libhurray (via _hurray), so
Python and C can never disagree about the format."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Tuple, Union

from . import _hurray


@dataclass(frozen=True)
class Buffer:
    """One entry of the buffer table. `alignment` is what the pointer must
    honour in memory (files always place buffers at least 64-byte aligned);
    the default, 1, asks nothing, so any numpy array fits."""
    role: str
    byte_size: int
    alignment: int = 1
    sync_mode: str = "ready"


@dataclass(frozen=True)
class Device:
    type: int = 1  # DLPack device type numbers: 1 = CPU, 2 = CUDA, ...
    id: int = 0
    memory_class: str = "host"


@dataclass(frozen=True)
class Dense:
    data_buffer: int = 0


@dataclass(frozen=True)
class Sparse:
    format: str  # "coo", "csr", "csc", "bsr"
    index_dtype: str
    nnz: int
    values_buffer: int = 0
    indptr_buffer: Optional[int] = None
    indices_buffer: Optional[int] = None
    index_buffers: Optional[Tuple[int, ...]] = None  # COO: one per dimension
    block_shape: Optional[Tuple[int, int]] = None  # BSR
    canonical: bool = False  # COO: sorted, no duplicates


@dataclass(frozen=True)
class Paged:
    axis: int
    page_size: int
    num_pages: int
    table_dtype: str = "int32"
    pool_buffer: int = 0
    table_buffer: int = 1


@dataclass(frozen=True)
class Member:
    name: str
    descriptor: "Descriptor"


@dataclass(frozen=True)
class Composite:
    members: Tuple[Member, ...] = ()


Layout = Union[Dense, Sparse, Paged, Composite]


@dataclass(frozen=True)
class PerTensorAffine:
    scale: float
    zero_point: int = 0


@dataclass(frozen=True)
class PerChannelAffine:
    axis: int
    scale_buffer: int
    scale_dtype: str = "float32"
    zero_point_buffer: Optional[int] = None
    zero_point_dtype: Optional[str] = None
    zero_point: int = 0


@dataclass(frozen=True)
class BlockAffine:
    axis: int
    block_size: int
    scale_buffer: int
    scale_dtype: str = "float16"
    zero_point_buffer: Optional[int] = None
    zero_point_dtype: Optional[str] = None
    zero_point: int = 0


@dataclass(frozen=True)
class Nf4:
    block_size: int
    absmax_buffer: int
    absmax_dtype: str = "float32"


@dataclass(frozen=True)
class Mxfp:
    """OCP MX: element is fp8_e4m3, fp8_e5m2, fp6_e3m2, fp6_e2m3, fp4_e2m1 or int8."""
    element: str
    axis: int
    scale_buffer: int
    block_size: int = 32


# Block-coded formats: elements per block and bytes per block (ggml's).
BLOCK_FORMATS = {
    "ggml_q4_1": (32, 20), "ggml_q5_0": (32, 22), "ggml_q5_1": (32, 24),
    "ggml_q2_k": (256, 84), "ggml_q3_k": (256, 110), "ggml_q4_k": (256, 144),
    "ggml_q5_k": (256, 176), "ggml_q6_k": (256, 210), "ggml_q8_k": (256, 292),
    "ggml_iq2_xxs": (256, 66), "ggml_iq2_xs": (256, 74), "ggml_iq3_xxs": (256, 98),
    "ggml_iq1_s": (256, 50), "ggml_iq4_nl": (32, 18), "ggml_iq3_s": (256, 110),
    "ggml_iq2_s": (256, 82), "ggml_iq4_xs": (256, 136), "ggml_iq1_m": (256, 56),
    "ggml_tq1_0": (256, 54), "ggml_tq2_0": (256, 66), "ggml_mxfp4": (32, 17),
    "ggml_nvfp4": (64, 36),
}


@dataclass(frozen=True)
class BlockCoded:
    """Blocks of a named format (e.g. "ggml_q4_k") that carry their own
    scales, in the data buffer (dtype uint8), row-major along the last axis.
    block_size is the format's and is filled in when not given."""
    format: str
    axis: int
    block_size: Optional[int] = None

    def __post_init__(self):
        if self.block_size is None and self.format in BLOCK_FORMATS:
            object.__setattr__(self, "block_size", BLOCK_FORMATS[self.format][0])


Quantization = Union[PerTensorAffine, PerChannelAffine, BlockAffine, Nf4, Mxfp, BlockCoded]


@dataclass(frozen=True)
class Statistics:
    min: Optional[float] = None
    max: Optional[float] = None
    nan_count: Optional[int] = None
    zero_count: Optional[int] = None


@dataclass(frozen=True)
class Shard:
    global_shape: Tuple[int, ...]
    offsets: Tuple[int, ...]


@dataclass(frozen=True)
class Extension:
    name: str
    metadata: bytes = b""


_QUANT_KINDS = {PerTensorAffine: "per_tensor_affine", PerChannelAffine: "per_channel_affine",
                BlockAffine: "block_affine", Nf4: "nf4", Mxfp: "mx", BlockCoded: "block_coded"}


def _plain(obj) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in obj.__dict__.items()}


def _float(v) -> float:
    return float(v) if not isinstance(v, str) else float(v)  # "nan", "inf", "-inf"


class Descriptor:
    """What a tensor's bytes mean: dtype, shape, layout, quantization, buffer
    table, device, and optional statistics, shard and extension type.

    Construction encodes through libhurray (so an impossible field fails at
    once); consistency is checked by validate(), or when a Tensor is built."""

    __slots__ = ("dtype", "shape", "strides", "byte_offset", "layout", "quantization", "buffers",
                 "device", "statistics", "shard", "extension", "_encoded")

    def __init__(self, dtype: str, shape: Sequence[int], *, strides: Optional[Sequence[int]] = None,
                 byte_offset: int = 0, layout: Layout = Dense(),
                 quantization: Optional[Quantization] = None, buffers: Sequence[Buffer] = (),
                 device: Device = Device(), statistics: Optional[Statistics] = None,
                 shard: Optional[Shard] = None, extension: Optional[Extension] = None):
        self._assign(dtype, shape, strides, byte_offset, layout, quantization, buffers, device,
                     statistics, shard, extension)
        object.__setattr__(self, "_encoded", _hurray.descriptor_build(self._build_dict()))

    def _assign(self, dtype, shape, strides=None, byte_offset=0, layout=Dense(),
                quantization=None, buffers=(), device=Device(), statistics=None, shard=None,
                extension=None):
        try:
            object.__getattribute__(self, "_encoded")
        except AttributeError:
            pass
        else:  # a Descriptor is immutable: __init__ may not run twice
            raise RuntimeError("Descriptor is already initialised; use replace()")
        set_ = object.__setattr__
        set_(self, "dtype", str(dtype))
        set_(self, "shape", tuple(int(d) for d in shape))
        set_(self, "strides", None if strides is None else tuple(int(s) for s in strides))
        set_(self, "byte_offset", int(byte_offset))
        set_(self, "layout", layout)
        set_(self, "quantization", quantization)
        set_(self, "buffers", tuple(buffers))
        set_(self, "device", device)
        set_(self, "statistics", statistics)
        set_(self, "shard", shard)
        set_(self, "extension", extension)

    def __setattr__(self, name, value):
        raise AttributeError("Descriptor is immutable; use replace()")

    def __reduce__(self):
        # copy, deepcopy and pickle travel through the canonical encoding.
        return (Descriptor.decode, (self._encoded,))

    def replace(self, **changes) -> "Descriptor":
        fields = {k: getattr(self, k) for k in self.__slots__ if k != "_encoded"}
        fields.update(changes)
        dtype, shape = fields.pop("dtype"), fields.pop("shape")
        return Descriptor(dtype, shape, **fields)

    # --- dict form: exactly the JSON rendering (docs/spec/descriptor-json.md) ---
    def to_dict(self) -> dict:
        """json.loads(self.to_json()): C renders it, so the two always agree;
        from_dict inverts it."""
        return json.loads(self.to_json())

    def _build_dict(self) -> dict:
        """What descriptor_build takes (member descriptors nested as these)."""
        d: dict[str, Any] = {"dtype": self.dtype, "shape": list(self.shape)}
        if self.strides is not None:
            d["strides"] = list(self.strides)
        if self.byte_offset:
            d["byte_offset"] = self.byte_offset
        d["layout"] = _layout_dict(self.layout)
        if self.quantization is not None:
            d["quantization"] = {"kind": _QUANT_KINDS[type(self.quantization)],
                                 **_plain(self.quantization)}
        d["buffers"] = [_plain(b) for b in self.buffers]
        d["device"] = _plain(self.device)
        if self.statistics is not None:
            d["statistics"] = {k: v for k, v in _plain(self.statistics).items() if v is not None}
        if self.shard is not None:
            d["shard"] = _plain(self.shard)
        if self.extension is not None:
            d["extension"] = {"name": self.extension.name, "metadata": bytes(self.extension.metadata)}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Descriptor":
        dtype, shape, fields = _fields_from_dict(d)
        return cls(dtype, shape, **fields)

    # --- binary form ---
    def encode(self) -> bytes:
        """The canonical encoding (docs/spec/descriptor-encoding.md)."""
        return self._encoded

    @classmethod
    def decode(cls, data: bytes) -> "Descriptor":
        """Decodes like the C decoder: what it accepts decodes here too (a bad
        alignment, say, is left for validate() to report as BUFFER_TABLE,
        as the spec says), and what it refuses raises the same status."""
        data = bytes(data)
        try:
            text = _hurray.descriptor_json(data)
        except UnicodeDecodeError:
            # A name that is not UTF-8 decodes in C; validation names it.
            _hurray.descriptor_validate(data)
            exc = _hurray.FormatError("HURRAY_ERR_MALFORMED: a string of the descriptor "
                                      "is not valid UTF-8")
            exc.status, exc.status_name = 5, "HURRAY_ERR_MALFORMED"
            raise exc from None
        dtype, shape, fields = _fields_from_dict(json.loads(text))
        self = object.__new__(cls)
        self._assign(dtype, shape, **fields)
        object.__setattr__(self, "_encoded", data)
        return self

    def to_json(self) -> str:
        return _hurray.descriptor_json(self._encoded)

    def validate(self) -> None:
        """Raises ValidationError (or a subclass of HurrayError) naming the field."""
        _hurray.descriptor_validate(self._encoded)

    def required_bytes(self) -> list:
        """Bytes each buffer must hold for what the descriptor places there."""
        return _hurray.descriptor_required_bytes(self._encoded)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __eq__(self, other):
        return isinstance(other, Descriptor) and self._encoded == other._encoded

    def __hash__(self):
        return hash(self._encoded)

    def __repr__(self):
        parts = [f"dtype={self.dtype!r}", f"shape={self.shape}"]
        for name in ("strides", "layout", "quantization", "statistics", "shard", "extension"):
            value = getattr(self, name)
            if value is not None and not (name == "layout" and value == Dense()):
                parts.append(f"{name}={value!r}")
        parts.append(f"buffers={len(self.buffers)}")
        return f"Descriptor({', '.join(parts)})"


def _fields_from_dict(d: dict) -> tuple:
    q = d.get("quantization")
    stats = d.get("statistics")
    ext = d.get("extension")
    return d["dtype"], d["shape"], dict(
            strides=d.get("strides"), byte_offset=d.get("byte_offset", 0),
            layout=_layout_from(d["layout"]), quantization=_quant_from(q) if q else None,
            buffers=[Buffer(**b) for b in d.get("buffers", [])],
            device=Device(**d["device"]) if "device" in d else Device(),
            statistics=None if stats is None else Statistics(
                min=None if "min" not in stats else _float(stats["min"]),
                max=None if "max" not in stats else _float(stats["max"]),
                nan_count=stats.get("nan_count"), zero_count=stats.get("zero_count")),
            shard=None if "shard" not in d else Shard(tuple(d["shard"]["global_shape"]),
                                                      tuple(d["shard"]["offsets"])),
            extension=None if ext is None else Extension(
                ext["name"], bytes.fromhex(ext.get("metadata_hex", "")) if "metadata_hex" in ext
                else bytes(ext.get("metadata", b""))))


def _layout_dict(layout) -> dict:
    if isinstance(layout, Dense):
        return {"kind": "dense", "data_buffer": layout.data_buffer}
    if isinstance(layout, Sparse):
        d = {"kind": "sparse", **_plain(layout)}
        return {k: v for k, v in d.items() if v is not None}
    if isinstance(layout, Paged):
        return {"kind": "paged", **_plain(layout)}
    if isinstance(layout, Composite):
        return {"kind": "composite",
                "members": [{"name": m.name, "descriptor": m.descriptor._build_dict()}
                            for m in layout.members]}
    raise TypeError(f"not a layout: {layout!r}")


def _layout_from(d: dict):
    kind = d["kind"]
    fields = {k: v for k, v in d.items() if k != "kind"}
    if kind == "dense":
        return Dense(**fields)
    if kind == "sparse":
        for key in ("index_buffers", "block_shape"):
            if key in fields:
                fields[key] = tuple(fields[key])
        return Sparse(**fields)
    if kind == "paged":
        return Paged(**fields)
    if kind == "composite":
        return Composite(tuple(Member(m["name"], Descriptor.from_dict(m["descriptor"]))
                               for m in d["members"]))
    raise ValueError(f"unknown layout kind {kind!r}")


def _quant_from(d: dict):
    kind = d["kind"]
    fields = {k: v for k, v in d.items() if k != "kind"}
    cls = {v: k for k, v in _QUANT_KINDS.items()}[kind]
    if cls is PerTensorAffine:
        fields["scale"] = _float(fields["scale"])
    return cls(**fields)
