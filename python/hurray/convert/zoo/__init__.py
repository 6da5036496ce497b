"""The safetensors quantization zoo: model folders whose quantized linear
layers are spread over several tensors (GPTQ's qweight/qzeros/scales/g_idx,
AWQ's, compressed-tensors' weight_packed/weight_scale/...) and described by
config.json's `quantization_config`. A registry of families, one a module of
this package, like convert/layouts/.

What happens (docs/impl/convert.md, "Quantized model folders"):

- `hurray convert DIR out.hurray`, DIR a folder (or its
  *.safetensors.index.json) with a config.json beside the tensors: the
  family whose `detect(quantization_config)` says yes groups, for every
  tensor named `<prefix>.<anchor>`, the tensors `<prefix>.<member>` into ONE
  hurray tensor `<prefix>.weight` (logical shape [out_features,
  in_features], torch's orientation). Its buffers are the members' bytes,
  unchanged (zero copy where the source mapping is aligned); the
  descriptor says how to read them (docs/spec/quantization.md §5.6). Every
  other tensor passes through as it is.
- The source convention goes in the hurray file's metadata (ADR-0017
  entries, all strings): ZOO_FAMILY_KEY, ZOO_CONFIG_KEY (config.json's text,
  verbatim), ZOO_TENSORS_KEY (per hurray tensor: its family and its members'
  original names, dtypes, shapes, and which buffer holds each),
  ZOO_WEIGHT_MAP_KEY (source tensor -> shard file) and ZOO_INDEX_KEY (the
  index file's name, sharded sources only).
- Converting that hurray file to any other format (safetensors file or
  folder, npz, torch) gives the members back by default: same names,
  dtypes, shapes, bytes (restore_source below). A folder target also gets
  config.json and the recorded shards (convert/_folder.py). --dequantize
  writes float32 weights instead, and config.json without its
  quantization_config.

## Adding a family (the registry interface)

A module here that calls `register(Family(...))`, imported at the bottom of
this file:

    Family(
        name="gptq",                       # stored in the metadata; unique
        detect=lambda qc: ...,             # quantization_config (dict) -> bool:
                                           #   whether this family reads (part of)
                                           #   the folder; several may say yes
        anchor="qweight",                  # the member whose presence marks a
                                           #   quantized weight <prefix>.<anchor>
        members=("qweight", "qzeros", "scales"),   # required suffixes
        optional=("g_idx",),               # suffixes taken when present
        build=build,                       # Group -> Built (below)
        check_config=None,                 # optional: quantization_config ->
                                           #   None, raising ZooError on a bad one
                                           #   (called once, before any tensor)
        output_name="weight",              # the hurray tensor is <prefix>.<output_name>
                                           #   ("": <prefix> itself)
        separator=".",                     # members are <prefix><separator><member>
                                           #   (gpt-oss: "_", gate_up_proj_blocks)
        accepts=None,                      # optional: (prefix, quantization_config)
                                           #   -> bool, whether this family reads
                                           #   that layer (compressed-tensors: its
                                           #   config group's format)
        also=(),                           # more Family records of the same
                                           #   convention (other anchors), offered
                                           #   right after it; not registered
    )

Each tensor ending in <separator><anchor> is offered to the detected
families in registry order; the first whose anchor matches and that
accepts the layer groups it. A member may be named like the output
(bitsandbytes: the packed `weight` is a member of `<prefix>.weight`).

`build(group)` gets a `Group`: `prefix`, `name` (the hurray tensor's name),
`tensors` ({member suffix: hurray Tensor, dense, as read from the source}),
`config` (quantization_config) and `family`. It returns
`Built(dtype, shape, quantization, parts)`: the hurray dtype of the codes, the
logical shape, the quantization record (hurray.BlockAffine(...) etc., its
buffer indices counting `parts`), and `parts`, one entry per descriptor
buffer in order: `(role, source)` where role is the buffer role ("data",
"scales", "zero_points", "group_index", "codebook", "super_scales") and
source is a member suffix (its bytes, unchanged) or a numpy array (bytes
the family makes; not restored, since no source tensor holds them). Members
not used as a buffer (compressed-tensors' weight_shape, bnb's quant_state
blob) are recorded in the metadata with their bytes, and restored from
there; keep those small (INLINE_LIMIT bytes). On malformed input raise
`group.error(member, "what is wrong")`: a ZooError whose one-line message
names the tensor. Helpers: `group.shape(member)`, `group.dtype(member)`,
`group.array(member)` (a zero-copy numpy view), `config_value(qc, key,
family, types)` (a missing or mistyped key is a one-line error).

Restoring is generic (members back from the buffers and the metadata), so a
family needs no restore function as long as its buffers are its members'
bytes.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from ... import _dtypes
from ..._descriptor import Buffer, Descriptor
from ..._hurray import HurrayError
from ..._tensor import Tensor, from_numpy, natural_alignment
from .._common import ConversionError, _first_line, _regular_file, owned_json
from .._source import _Source

# Metadata keys the zoo owns (docs/impl/convert.md, "Metadata").
ZOO_FAMILY_KEY = "zoo.family"  # str: the detected families' names, comma-separated ("" for none)
ZOO_CONFIG_KEY = "zoo.config.json"  # str: config.json's text, verbatim
ZOO_TENSORS_KEY = "zoo.tensors"  # JSON {hurray tensor: {"family", "members": [...]}}
ZOO_WEIGHT_MAP_KEY = "zoo.weight_map"  # JSON {source tensor: shard file name}
ZOO_INDEX_KEY = "zoo.index"  # str: the index file name (sharded sources)
ZOO_KEYS = (ZOO_FAMILY_KEY, ZOO_CONFIG_KEY, ZOO_TENSORS_KEY, ZOO_WEIGHT_MAP_KEY, ZOO_INDEX_KEY)

CONFIG_LIMIT = 16 << 20  # config.json larger than this is refused (it is read whole)
INLINE_LIMIT = 4096  # bytes of a member kept in the metadata rather than a buffer


class ZooError(ConversionError):
    """A malformed quantized checkpoint; the message is one line naming the
    tensor or the config.json key."""


@dataclass
class Group:
    """The source tensors of one quantized weight, handed to Family.build."""

    prefix: str
    name: str
    tensors: Dict[str, Tensor]
    config: Dict[str, Any]
    family: "Family"

    def source_name(self, member: str) -> str:
        return self.prefix + self.family.separator + member

    def error(self, member: Optional[str], message: str) -> ZooError:
        what = self.source_name(member) if member else self.name
        return ZooError(f"{self.family.name}: tensor {what!r}: {message}")

    def shape(self, member: str) -> Tuple[int, ...]:
        return tuple(self.tensors[member].shape)

    def dtype(self, member: str) -> str:
        return self.tensors[member].dtype

    def array(self, member: str) -> np.ndarray:
        return self.tensors[member].numpy()

    def expect(self, member: str, dtypes: Sequence[str], rank: Optional[int] = None) -> None:
        """A one-line error unless the member has one of `dtypes` (and `rank`)."""
        if self.dtype(member) not in dtypes:
            raise self.error(
                member, f"has dtype {self.dtype(member)}, expected {' or '.join(dtypes)}"
            )
        if rank is not None and len(self.shape(member)) != rank:
            raise self.error(member, f"has shape {list(self.shape(member))}, expected rank {rank}")


Part = Tuple[str, Union[str, np.ndarray]]


@dataclass
class Built:
    """What Family.build makes of a Group (see the module docstring)."""

    dtype: str
    shape: Tuple[int, ...]
    quantization: Any
    parts: List[Part]


@dataclass(frozen=True)
class Family:
    name: str
    detect: Callable[[Dict[str, Any]], bool]
    anchor: str
    members: Tuple[str, ...]
    build: Callable[[Group], Built]
    optional: Tuple[str, ...] = ()
    check_config: Optional[Callable[[Dict[str, Any]], None]] = None
    output_name: str = "weight"
    separator: str = "."
    accepts: Optional[Callable[[str, Dict[str, Any]], bool]] = None
    # More anchors of the same convention, grouped with it (not registered
    # themselves; they may share its name): gpt-oss's gate_up_proj_blocks
    # and down_proj_blocks.
    also: Tuple["Family", ...] = ()


FAMILIES: List[Family] = []


def register(family: Family) -> Family:
    """Adds a family after those registered before it (they are tried first)."""
    if any(f.name == family.name for f in FAMILIES):
        raise ValueError(f"zoo family {family.name!r} registered twice")
    FAMILIES.append(family)
    return family


def detect(qc: Dict[str, Any]) -> List[Family]:
    """The families that read (part of) a quantization_config, in registry
    order; empty when none does."""
    return [family for family in FAMILIES if family.detect(qc)]


_MISSING = object()


def config_value(qc: Dict[str, Any], key: str, family: str, types=None, default=_MISSING):
    """quantization_config[key]; a one-line error naming the key when it is
    missing (and no default is given) or not of `types`."""
    if key not in qc:
        if default is not _MISSING:
            return default
        raise ZooError(f"config.json: quantization_config has no {key!r} key ({family})")
    value = qc[key]
    if types is not None and (
        not isinstance(value, types) or isinstance(value, bool) and bool not in _tuple(types)
    ):
        names = " or ".join(t.__name__ for t in _tuple(types))
        raise ZooError(
            f"config.json: quantization_config[{key!r}] is {value!r}, not "
            f"{'an' if names[0] in 'aeiou' else 'a'} {names} ({family})"
        )
    return value


def packing(word_bits: int, axis: int, order: Optional[Sequence[int]] = None):
    """A code_packing / zero_point_packing record (hurray.Packing,
    docs/spec/quantization.md §5.6): lanes of `word_bits`-bit little-endian
    words along storage axis `axis`, lane j holding element order[j] of its
    group (identity when None)."""
    from ..._descriptor import Packing

    return Packing(int(word_bits), int(axis), tuple(int(x) for x in order) if order else None)


def check_group_index(group: Group, member: str, groups: int) -> None:
    """A one-line error naming the tensor when a group index (GPTQ g_idx)
    holds a group outside [0, groups). The C kernel checks it too; this
    says which entry, before anything is written."""
    g = group.array(member)
    if g.size and (int(g.min()) < 0 or int(g.max()) >= groups):
        bad = int(np.flatnonzero((g < 0) | (g >= groups))[0])
        raise group.error(
            member,
            f"entry {bad} is {int(g.reshape(-1)[bad])}, outside the {groups} groups of the scales",
        )


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


# ---------------------------------------------------------------------------
# config.json and the folder


def _unique_keys(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} appears twice in one object")
        out[k] = v
    return out


def read_config(folder: str) -> Optional[Tuple[str, Dict[str, Any]]]:
    """(text, parsed) of folder/config.json, or None when there is none."""
    path = os.path.join(folder, "config.json")
    if not os.path.lexists(path):
        return None
    _regular_file(path)
    try:
        with open(path, "rb") as f:
            raw = f.read(CONFIG_LIMIT + 1)
    except OSError as exc:
        raise ConversionError(f"{path}: {exc.strerror or _first_line(exc)}") from None
    if len(raw) > CONFIG_LIMIT:
        raise ConversionError(
            f"{path} is larger than {CONFIG_LIMIT >> 20} MiB; refusing to read it"
        )
    try:
        text = raw.decode("utf-8")
        parsed = json.loads(text, object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConversionError(f"{path} is not valid JSON: {_first_line(exc)}") from None
    if not isinstance(parsed, dict):
        raise ConversionError(f"{path} is not a JSON object")
    return text, parsed


def _weight_map(folder: str, src: str, source: _Source) -> Tuple[Dict[str, str], Optional[str]]:
    """(source tensor -> shard file name, the index file name or None)."""
    if not os.path.isdir(src):  # the index itself (a folder may be named like one)
        index = os.path.basename(src)
    else:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors.index.json"))
        index = names[0] if names else None
    if index is None:
        files = sorted(n for n in os.listdir(folder) if n.endswith(".safetensors"))
        return {n: files[0] for n in source.names()}, None
    with open(os.path.join(folder, index), encoding="utf-8") as f:  # read before, so valid
        weight_map = json.load(f)["weight_map"]
    # As the folder writer will name them ("./a.safetensors" is "a.safetensors":
    # the reader confined every name to the folder already).
    return {str(k): posixpath.normpath(str(v)) for k, v in weight_map.items()}, index


# ---------------------------------------------------------------------------
# The folder source: groups members into one tensor each


class _ZooSource(_Source):
    """A safetensors folder source with its quantized weights grouped."""

    def __init__(
        self, inner: _Source, families: List[Family], qc, meta: Dict[str, str], record: bool
    ):
        self.inner = inner
        self._record = record
        names = ", ".join(f.name for f in families)
        self.format = inner.format + (f" ({names})" if families else "")
        self.qc = qc
        self._meta = meta
        # hurray tensor -> (family, prefix, {member suffix: source name})
        self._groups: Dict[str, Tuple[Family, str, Dict[str, str]]] = {}
        hidden: Dict[str, str] = {}
        names_in = inner.names()
        present = set(names_in)
        offered = [f for family in families for f in (family,) + tuple(family.also)]
        for n in names_in:
            for family in offered:
                suffix = family.separator + family.anchor
                if not n.endswith(suffix):
                    continue
                prefix = n[: -len(suffix)]
                if family.accepts is not None and not family.accepts(prefix, qc):
                    continue
                self._group(family, n, prefix, present, hidden)
                break
        self._names = sorted([n for n in names_in if n not in hidden] + list(self._groups))
        self._built: Dict[str, Dict[str, Any]] = {}
        self.note = ""  # what the report says of the folder as a whole

    def _group(self, family: Family, n: str, prefix: str, present, hidden) -> None:
        out = prefix + (f".{family.output_name}" if family.output_name else "")
        if not out:  # a member named with no prefix ("_blocks"): the writer would refuse ""
            raise ZooError(
                f"{family.name}: tensor {n!r} has no name before {family.separator + family.anchor!r}, "
                "so the tensor it forms would have none"
            )
        members = {}
        for m in family.members + family.optional:
            full = prefix + family.separator + m
            if full in present:
                members[m] = full
            elif m in family.members:
                raise ZooError(
                    f"{family.name}: tensor {n!r} has no {full!r} beside it "
                    f"(a {family.name} weight needs {', '.join(family.members)})"
                )
        if out in present and out not in members.values():
            raise ZooError(
                f"{family.name}: the source holds both {out!r} and {n!r}; "
                f"{n!r} would be converted into {out!r}"
            )
        for full in members.values():
            if full in hidden:
                raise ZooError(
                    f"{family.name}: tensor {full!r} belongs to both {hidden[full]!r} and {out!r}"
                )
            hidden[full] = out
        self._groups[out] = (family, prefix, members)

    def names(self):
        return list(self._names)

    def info(self, name):
        if name not in self._groups:
            return self.inner.info(name)
        family, _, members = self._groups[name]
        infos = [self.inner.info(full) for full in members.values()]
        anchor = self.inner.info(members[family.anchor])
        label = f"{family.name} ({anchor[0]} {'x'.join(map(str, anchor[1]))})"
        # The logical shape is the family's to say: build once (views, no
        # copies kept), which also checks the layer before anything is written.
        shape = tuple(self._build(name)[0].shape)
        return label, shape, sum(i[2] for i in infos)

    def _build(self, name: str) -> Tuple[Tensor, Dict[str, Any]]:
        family, prefix, members = self._groups[name]
        tensors = {m: self.inner.get(full) for m, full in members.items()}
        group = Group(prefix, name, tensors, self.qc, family)
        try:
            return _assemble(group, family.build(group))
        except ConversionError:
            raise
        except (HurrayError, ValueError, TypeError, OverflowError) as exc:
            raise ZooError(f"{family.name}: tensor {name!r}: {_first_line(exc)}") from None

    def get(self, name):
        if name not in self._groups:
            return self.inner.get(name)
        t, record = self._build(name)
        if self._record:
            self._built[name] = record
        return t

    def metadata(self):
        meta = dict(self.inner.metadata())
        meta.update(self._meta)
        return meta

    def complete_metadata(self, metadata):
        # Once, at the end: serialising the record after each tensor made a
        # conversion quadratic in the number of quantized layers.
        if self._built:
            metadata[ZOO_TENSORS_KEY] = json.dumps(
                self._built, separators=(",", ":"), sort_keys=True
            )

    def refused(self):
        return self.inner.refused()

    def notes(self):
        return [self.note] if self.note else []

    def files(self):
        return self.inner.files()

    def close(self):
        self.inner.close()


def _assemble(group: Group, built: Built) -> Tuple[Tensor, Dict[str, Any]]:
    """The hurray tensor of a Built, and its metadata record."""
    buffers: List[Buffer] = []
    raws: List[np.ndarray] = []
    used: Dict[str, int] = {}
    for i, (role, src) in enumerate(built.parts):
        if isinstance(src, str):
            t = group.tensors[src]
            raw = np.frombuffer(t.buffers[0], np.uint8)
            itemsize = max(1, _dtypes.BITS[t.dtype] // 8)
            used[src] = i
        else:
            arr = np.ascontiguousarray(src)
            raw = arr.reshape(-1).view(np.uint8)
            itemsize = arr.dtype.itemsize
        align = natural_alignment(itemsize)
        if raw.size and raw.ctypes.data % align:
            block = np.empty(raw.size + align, np.uint8)
            start = (-block.ctypes.data) % align
            block[start : start + raw.size] = raw
            raw = block[start : start + raw.size]
        buffers.append(Buffer(role, int(raw.size), align))
        raws.append(raw)
    d = Descriptor(
        built.dtype, tuple(built.shape), quantization=built.quantization, buffers=buffers
    )
    t = Tensor(d, raws)
    members = []
    for m, t_m in group.tensors.items():
        entry: Dict[str, Any] = {
            "name": group.source_name(m),
            "dtype": t_m.dtype,
            "shape": list(t_m.shape),
        }
        if m in used:
            entry["buffer"] = used[m]
        else:
            raw = bytes(t_m.buffers[0])
            if len(raw) > INLINE_LIMIT:
                raise group.error(m, f"is {len(raw)} bytes and not a buffer of the hurray tensor")
            entry["bytes"] = raw.hex()
        members.append(entry)
    return t, {"family": group.family.name, "members": members}


def open_folder(src: str, source: _Source, dequantize: bool, group: bool = True) -> _Source:
    """`source` (a safetensors folder or index at `src`) with its quantized
    weights grouped when a config.json beside it has a quantization_config
    a family knows (and `group`: the target keeps quantized tensors, or
    --dequantize asks for the values); `source` itself when there is no
    config.json."""
    folder = src if os.path.isdir(src) else os.path.dirname(src)
    got = read_config(folder or ".")
    if got is None:
        return source
    text, config = got
    weight_map, index = _weight_map(folder or ".", src, source)
    qc = config.get("quantization_config")
    families: List[Family] = []
    if qc is not None:
        if not isinstance(qc, dict):
            raise ZooError("config.json: quantization_config is not a JSON object")
        config_value(qc, "quant_method", "quantization_config", str)
        families = detect(qc)
        for family in families:
            if family.check_config is not None:
                family.check_config(qc)
    meta = {
        ZOO_FAMILY_KEY: ",".join(f.name for f in families),
        ZOO_CONFIG_KEY: _dequantized_config(text, config) if dequantize and families else text,
        ZOO_WEIGHT_MAP_KEY: json.dumps(weight_map, separators=(",", ":")),
    }
    if index is not None:
        meta[ZOO_INDEX_KEY] = index
    if not group:  # the members go to the target as they are, config.json beside them
        families = []
    zoo_source = _ZooSource(source, families, qc, meta, record=not dequantize)
    if dequantize and qc is not None and not families:
        zoo_source.note = (
            f"--dequantize: config.json's quantization_config (quant_method "
            f"{qc.get('quant_method')!r}) is a format hurray does not read: its tensors "
            "were copied as stored, still quantized"
        )
    return zoo_source


def _dequantized_config(text: str, config: Dict[str, Any]) -> str:
    """config.json for float weights: without its quantization_config."""
    if "quantization_config" not in config:
        return text
    out = {k: v for k, v in config.items() if k != "quantization_config"}
    return json.dumps(out, indent=2, ensure_ascii=False) + "\n"


def drop_changed_records(meta: Dict[str, Any], exact: set) -> Tuple[List[str], bool]:
    """Keeps the zoo record of only the tensors in `exact` (stored as they
    were read). A record says which source members a tensor's buffers are;
    a tensor requantized on the way has other buffers, and with its old
    record converted back into the old members' names and dtypes: garbage
    that loaded without error. Returns the tensors whose record went, and
    whether config.json still has a quantization_config. That is kept: it
    may also describe layers no family reads, which pass through as stored,
    and only the user knows whether any are left."""
    try:
        records = owned_json(meta.get(ZOO_TENSORS_KEY), ZOO_TENSORS_KEY, dict)
    except ConversionError:
        records = None  # a hostile record is refused where it is read
    if not isinstance(records, dict):
        return [], False
    changed = sorted(n for n in records if n not in exact)
    if changed:
        kept = {n: rec for n, rec in records.items() if n in exact}
        if kept:
            meta[ZOO_TENSORS_KEY] = json.dumps(kept, separators=(",", ":"), sort_keys=True)
        else:
            del meta[ZOO_TENSORS_KEY]
    try:
        parsed = owned_json(meta.get(ZOO_CONFIG_KEY), ZOO_CONFIG_KEY, dict)
    except ConversionError:
        parsed = None  # no config.json, or one that is not an object: none to keep
    return changed, parsed is not None and "quantization_config" in parsed


# ---------------------------------------------------------------------------
# The way back: a hurray file's zoo tensors as their source members


def _records(meta: Dict[str, Any], src: str) -> Dict[str, Dict[str, Any]]:
    raw = meta.get(ZOO_TENSORS_KEY)
    if raw is None:
        return {}
    what = f"{src}: metadata {ZOO_TENSORS_KEY!r}"
    records = owned_json(raw, what, dict)
    for name, rec in records.items():
        try:
            if not isinstance(rec, dict) or not isinstance(rec.get("members"), list):
                raise TypeError("not an object with a list of members")
            if not rec["members"]:
                # Restoring it would give nothing back for the tensor: dropped, exit 0.
                raise ValueError("it lists no members")
            for m in rec["members"]:
                if not isinstance(m, dict):
                    raise TypeError(f"member {m!r} is not an object")
                _check_member(m)
        except (ValueError, TypeError, KeyError) as exc:
            raise ConversionError(
                f"{what} is not a valid zoo record: tensor {name!r}: {_first_line(exc)}"
            ) from None
    return records


def _check_member(m: Dict[str, Any]) -> None:
    """A member record read from a file: a string name, a whole-byte dtype
    hurray knows, a shape of non-negative ints, and a buffer index or hex
    bytes (TypeError / ValueError otherwise)."""
    if not isinstance(m["name"], str) or not m["name"]:
        raise TypeError(f"member name {m['name']!r} is not a string")
    dtype = m["dtype"]
    if not isinstance(dtype, str) or dtype not in _dtypes.BITS or _dtypes.BITS[dtype] % 8:
        raise TypeError(f"member {m['name']!r}: dtype {dtype!r} is not a whole-byte hurray dtype")
    shape = m["shape"]
    if not isinstance(shape, list) or not all(
        isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in shape
    ):
        raise TypeError(f"member {m['name']!r}: shape {shape!r} is not a list of sizes")
    if "buffer" in m:
        if not isinstance(m["buffer"], int) or isinstance(m["buffer"], bool):
            raise TypeError(f"member {m['name']!r}: buffer {m['buffer']!r} is not an index")
    else:
        bytes.fromhex(m["bytes"])  # TypeError / ValueError unless hex text


class _RestoreSource(_Source):
    """A hurray source whose zoo tensors read as their original members."""

    def __init__(self, inner: _Source, records: Dict[str, Dict[str, Any]]):
        self.inner = inner
        self.format = inner.format
        self._records = records
        self._member: Dict[str, Tuple[str, Dict[str, Any]]] = {}
        self._names: List[str] = []
        inner_names = inner.names()
        for n in inner_names:
            rec = records.get(n)
            if rec is None:
                self._names.append(n)
                continue
            for m in rec["members"]:
                if m["name"] in self._member or (m["name"] != n and m["name"] in inner_names):
                    raise ConversionError(
                        f"zoo tensor {n!r} restores {m['name']!r}, which another tensor also "
                        "gives; one would be lost"
                    )
                self._member[m["name"]] = (n, m)
                self._names.append(m["name"])
        self._cache: Tuple[Optional[str], Optional[Tensor]] = (None, None)

    def names(self):
        return list(self._names)

    def _spec(self, m) -> Tuple[np.dtype, Tuple[int, ...], int]:
        dtype = _dtypes.to_numpy(m["dtype"])
        shape = tuple(int(x) for x in m["shape"])
        nbytes = dtype.itemsize
        for x in shape:  # Python ints: a hostile shape cannot wrap
            nbytes *= x
        return dtype, shape, nbytes

    def info(self, name):
        if name not in self._member:
            return self.inner.info(name)
        _, m = self._member[name]
        _, shape, nbytes = self._spec(m)
        return m["dtype"], shape, nbytes

    def _whole(self, name: str) -> Tensor:
        if self._cache[0] != name:
            self._cache = (name, self.inner.get(name))
        return self._cache[1]  # type: ignore[return-value]

    def get(self, name):
        if name not in self._member:
            return self.inner.get(name)
        whole, m = self._member[name]
        dtype, shape, nbytes = self._spec(m)
        if "buffer" in m:
            t = self._whole(whole)
            i = int(m["buffer"])
            if not 0 <= i < t.buffer_count:
                raise ConversionError(
                    f"zoo tensor {whole!r}: member {name!r} is buffer {i}, which it does not have"
                )
            raw = np.frombuffer(t.buffers[i], np.uint8)
        else:
            raw = np.frombuffer(bytes.fromhex(m["bytes"]), np.uint8)
        if raw.size != nbytes:
            raise ConversionError(
                f"zoo tensor {whole!r}: member {name!r} ({m['dtype']} {list(shape)}) needs "
                f"{nbytes} bytes, the file holds {raw.size}"
            )
        return from_numpy(raw.view(dtype).reshape(shape))

    def metadata(self):
        meta = dict(self.inner.metadata())
        meta.pop(ZOO_TENSORS_KEY, None)  # the members are plain tensors now
        return meta

    def refused(self):
        return self.inner.refused()

    def close(self):
        self.inner.close()


class _DequantizedMeta(_Source):
    """A hurray source converted with --dequantize: its zoo tensors become
    float weights, so the zoo record goes and config.json loses its
    quantization_config."""

    def __init__(self, inner: _Source):
        self.inner = inner
        self.format = inner.format

    def names(self):
        return self.inner.names()

    def info(self, name):
        return self.inner.info(name)

    def get(self, name):
        return self.inner.get(name)

    def metadata(self):
        meta = dict(self.inner.metadata())
        meta.pop(ZOO_TENSORS_KEY, None)
        text = meta.get(ZOO_CONFIG_KEY)
        try:
            config = owned_json(text, ZOO_CONFIG_KEY, dict)
        except ConversionError:
            config = None  # passed on as it is
        if config is not None:
            meta[ZOO_CONFIG_KEY] = _dequantized_config(text, config)
        return meta

    def refused(self):
        return self.inner.refused()

    def close(self):
        self.inner.close()


def wrap_source(
    src: str, source: _Source, src_kind: str, dst_kind: str, dequantize: bool
) -> _Source:
    """The driver's one hook: a folder source gets its zoo tensors grouped;
    a hurray source with zoo tensors gives their members back (any target
    but hurray, unless --dequantize). A folder into another format is
    grouped only for --dequantize: otherwise its tensors are copied."""
    if src_kind in ("dir", "safetensors-index"):
        return open_folder(src, source, dequantize, group=dst_kind == "hurray" or dequantize)
    if src_kind == "hurray":
        meta = source.metadata()
        if ZOO_TENSORS_KEY not in meta:
            return source
        if dequantize:
            return _DequantizedMeta(source)
        if dst_kind != "hurray":
            return _RestoreSource(source, _records(meta, src))
    return source


# Registration order is match order.
# isort: off
from . import gptq  # noqa: E402,F401
from . import awq  # noqa: E402,F401
from . import compressed_tensors  # noqa: E402,F401
from . import fp8  # noqa: E402,F401  (DeepSeek block, compressed-tensors float-quantized)
from . import bnb  # noqa: E402,F401  (bitsandbytes NF4 / FP4)
from . import nvfp4  # noqa: E402,F401  (ModelOpt, compressed-tensors)
from . import mxfp4  # noqa: E402,F401  (gpt-oss)
# isort: on
