"""compressed-tensors (vLLM / llm-compressor), format "pack-quantized":
integer weights of b = 4 or 8 bits, symmetric or asymmetric, with group,
channel or tensor scales.

Per linear layer, weight [N, K] (torch's orientation):

    weight_packed      int32 [N, K*b/32]  elements consecutive along the
                                         last axis, low bits first, each
                                         stored as code + 2^(b-1) (unsigned)
    weight_scale       float [N, K/G] (group), [N, 1] (channel), [1] (tensor)
    weight_zero_point  asymmetric only. Group and channel: int32
                       [N*b/32, K/G], packed like the codes but along axis 0,
                       each stored as zero + 2^(b-1); tensor (and files from
                       before zero points were packed): int8, the shape of
                       weight_scale, the signed zero itself
    weight_shape       int64 [2] = [N, K]
    weight_g_idx       int32 [K], optional (actorder "group")

    W[n, k] = weight_scale[...] * (q - zero), q and zero the signed values.

With the offsets cancelling, q - zero = stored code - stored zero for packed
zero points (zero_point_offset 0), and stored code - (zero + 2^(b-1)) for
int8 ones (zero_point_offset 2^(b-1)); symmetric layers have the inline
zero point 2^(b-1). Group: BLOCK_AFFINE axis 1, block G; channel:
PER_CHANNEL_AFFINE axis 0; tensor: BLOCK_AFFINE with one block over both
axes (axis 1 block K, axis2 0 block N). Codes packed in 32-bit words along
axis 1, packed zero points along axis 0.
"""

from __future__ import annotations

import re
import re._constants as _re_ops  # the parsed form of a pattern (Python 3.11+)
from re._parser import parse as _sre_parse
from typing import Any, Dict, List, Optional, Tuple

from ..._descriptor import BlockAffine, PerChannelAffine
from . import Built, Family, Group, ZooError, check_group_index, config_value, packing, register

_FLOATS = ("float16", "bfloat16", "float32")
_DTYPE = {4: "uint4", 8: "uint8"}
_STRATEGIES = ("group", "channel", "tensor")


def _formats(qc):
    top = qc.get("format")
    groups = qc.get("config_groups")
    out = [top] if top else []
    if isinstance(groups, dict):
        out += [g.get("format") for g in groups.values() if isinstance(g, dict) and g.get("format")]
    return out


def _detect(qc) -> bool:
    return str(
        qc.get("quant_method", "")
    ).lower() == "compressed-tensors" and "pack-quantized" in _formats(qc)


def _weights(qc, name: str) -> Dict[str, Any]:
    groups = config_value(qc, "config_groups", "compressed-tensors", dict)
    g = groups[name]
    if not isinstance(g, dict):
        raise ZooError(
            f"config.json: quantization_config['config_groups'][{name!r}] is not an object"
        )
    w = g.get("weights")
    if not isinstance(w, dict):
        raise ZooError(
            f"config.json: quantization_config['config_groups'][{name!r}] has no 'weights' object"
        )
    return w


def _arg(w, name: str, key: str, types, default=None):
    where = f"config_groups[{name!r}]['weights']"
    if key not in w:
        if default is not None:
            return default
        raise ZooError(f"config.json: quantization_config {where} has no {key!r} key")
    v = w[key]
    if not isinstance(v, types) or (isinstance(v, bool) and types is int):
        raise ZooError(f"config.json: quantization_config {where}[{key!r}] is {v!r}")
    return v


def _check_config(qc) -> None:
    groups = config_value(qc, "config_groups", "compressed-tensors", dict)
    if not groups:
        raise ZooError("config.json: quantization_config['config_groups'] is empty")
    for name in groups:
        w = _weights(qc, name)
        bits = _arg(w, name, "num_bits", int)
        kind = _arg(w, name, "type", str, "int")
        strategy = _arg(w, name, "strategy", str)
        _arg(w, name, "symmetric", bool)
        if kind != "int" or bits not in _DTYPE or strategy not in _STRATEGIES:
            continue  # checked when a tensor uses it (another format may hold those)
        if strategy == "group":
            g = _arg(w, name, "group_size", int)
            if g < 1:
                raise ZooError(
                    f"config.json: quantization_config config_groups[{name!r}]['weights']"
                    f"['group_size'] is {g}"
                )


_REPEATS = (_re_ops.MAX_REPEAT, _re_ops.MIN_REPEAT, _re_ops.POSSESSIVE_REPEAT)
_CHOICES_AT_MOST = 16


def _parts(op, arg) -> list:
    """The sub-patterns of one parsed item (re._parser's form)."""
    if op in _REPEATS:
        return [arg[2]]
    if op is _re_ops.SUBPATTERN:
        return [arg[-1]]
    if op is _re_ops.BRANCH:
        return list(arg[1])
    if op is _re_ops.ATOMIC_GROUP:
        return [arg]
    if op is _re_ops.GROUPREF_EXISTS:
        return [p for p in arg[1:] if p is not None]
    if op in (_re_ops.ASSERT, _re_ops.ASSERT_NOT):
        return [arg[1]]
    return []


def _choices(items) -> Tuple[int, bool]:
    """(choice points, nested): how many places the matcher may try more
    than one way (a repetition of variable count, an alternation, a
    conditional), and whether a repetition of more than one holds such a
    place, which backtracks exponentially ("(a+)+$", "(?:a?){24}")."""
    count, nested = 0, False
    for op, arg in items:
        inner = 0
        for part in _parts(op, arg):
            c, n = _choices(part)
            inner += c
            nested = nested or n
        if op in _REPEATS and arg[1] > 1 and inner:
            nested = True
        here = (op in _REPEATS and arg[0] < arg[1]) or op in (
            _re_ops.BRANCH,
            _re_ops.GROUPREF_EXISTS,
        )
        count += inner + here
    return count, nested


def _check_target_regex(group: str, target: str) -> None:
    """A regex target that could take exponential time on a layer's name is
    refused before any name is matched: "re:(a+)+$" took 25 s on one name
    of 30 characters, and doubled with each more."""
    try:
        count, nested = _choices(list(_sre_parse(target[3:])))
    except (re.error, OverflowError, RecursionError):  # a{2**32}, deep nesting
        raise ZooError(
            f"config.json: config_groups[{group!r}] target {target!r} is not a regex"
        ) from None
    if nested or count > _CHOICES_AT_MOST:
        what = (
            "repeats a repetition or an alternation"
            if nested
            else f"holds more than {_CHOICES_AT_MOST} repetitions and alternations"
        )
        raise ZooError(
            f"config.json: config_groups[{group!r}] target {target!r} {what}, which can take "
            "exponential time to match; hurray refuses such patterns"
        )


class _Targets:
    """config_groups' targets, read once per config: plain names in a dict
    (name -> first group), so that matching a layer costs its name's
    suffixes, not every target of every group; regexes in group order."""

    def __init__(self, groups: dict):
        self.names: List[str] = []
        self.plain: Dict[str, int] = {}
        self.regexes: List[Tuple[int, str, str]] = []  # (group, target, pattern)
        self.by_class: Optional[int] = None
        for name, g in groups.items():
            if not isinstance(g, dict):
                continue
            targets = g.get("targets")
            if targets is None:
                targets = []  # no targets: the layer may still be the only group's
            elif isinstance(targets, str):
                targets = [targets]
            if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
                raise ZooError(
                    f"config.json: quantization_config config_groups[{name!r}]['targets'] "
                    f"is {targets!r}, not a list of names"
                )
            k = len(self.names)
            self.names.append(name)
            for t in targets:
                if t.startswith("re:"):
                    _check_target_regex(name, t)
                    self.regexes.append((k, t, t[3:]))
                else:
                    self.plain.setdefault(t, k)
                    if self.by_class is None and "." not in t:
                        self.by_class = k

    def group_of(self, prefix: str) -> Optional[int]:
        parts = prefix.split(".")
        hits = [self.plain.get(".".join(parts[i:]), len(self.names)) for i in range(len(parts))]
        best = min(hits, default=len(self.names))
        for k, t, pattern in self.regexes:
            if k >= best:
                break
            try:
                if re.match(pattern, prefix):
                    return k
            except (re.error, OverflowError, RecursionError):  # a{2**32}, deep nesting
                raise ZooError(
                    f"config.json: config_groups[{self.names[k]!r}] target {t!r} is not a regex"
                ) from None
        return best if best < len(self.names) else None


_TARGETS_OF: List[Tuple[object, "_Targets"]] = []  # the last config read, and its index


def _group_of(prefix: str, qc) -> Optional[str]:
    """The config group that targets a layer: a regex ("re:...") or
    module-name target first, then a class-name target ("Linear"), which
    every linear layer matches, then the only group; None if none does."""
    groups = qc.get("config_groups")
    if not isinstance(groups, dict):
        return None
    cached = _TARGETS_OF[0] if _TARGETS_OF else None  # read once: another thread may replace it
    if cached is None or cached[0] is not groups:
        cached = (groups, _Targets(groups))
        _TARGETS_OF[:] = [cached]
    index = cached[1]
    k = index.group_of(prefix)
    if k is not None:
        return index.names[k]
    if index.by_class is not None:
        return index.names[index.by_class]
    return next(iter(groups)) if len(groups) == 1 else None


def _accepts(prefix: str, qc) -> bool:
    """Layers whose config group is stored pack-quantized (another family
    may read the others: float-quantized, nvfp4-pack-quantized)."""
    name = _group_of(prefix, qc)
    if name is None:
        return True  # _scheme says why in one line
    g = qc["config_groups"][name]
    fmt = (g.get("format") if isinstance(g, dict) else None) or qc.get("format")
    return fmt == "pack-quantized"


def _scheme(group: Group) -> Dict[str, Any]:
    name = _group_of(group.prefix, group.config)
    if name is None:
        raise group.error(
            "weight_packed", "no config_groups entry of config.json targets this layer"
        )
    return _checked(group, name)


def _checked(group: Group, name: str) -> Dict[str, Any]:
    w = _weights(group.config, name)
    bits = _arg(w, name, "num_bits", int)
    kind = _arg(w, name, "type", str, "int")
    strategy = _arg(w, name, "strategy", str)
    if kind != "int" or bits not in _DTYPE or strategy not in _STRATEGIES:
        raise group.error(
            "weight_packed",
            f"config group {name!r} is {kind} {bits}-bit {strategy}; pack-quantized is read for "
            "int 4- and 8-bit group, channel and tensor strategies",
        )
    return {
        "bits": bits,
        "strategy": strategy,
        "symmetric": _arg(w, name, "symmetric", bool),
        "group_size": w.get("group_size"),
    }


def _shapes(group: Group, s: Dict[str, Any]):
    """(N, K, the scales' shape, the group size), the members' shapes
    checked against weight_shape and one another."""
    bits, strategy = s["bits"], s["strategy"]
    lanes = 32 // bits
    group.expect("weight_packed", ("int32",), 2)
    group.expect("weight_scale", _FLOATS)
    group.expect("weight_shape", ("int64", "int32"), 1)
    ws = [int(x) for x in group.array("weight_shape").reshape(-1)]
    if len(ws) != 2 or min(ws) < 1:
        raise group.error("weight_shape", f"is {ws}, expected [out_features, in_features]")
    n, k = ws
    packed = group.shape("weight_packed")
    if k % lanes:
        raise group.error("weight_packed", _partial_word("in_features", k, bits))
    if packed != (n, k // lanes):
        raise group.error(
            "weight_packed",
            f"has shape {list(packed)}, expected {[n, k // lanes]} for weight_shape {ws} "
            f"at {bits} bits",
        )
    gs = k
    if strategy == "group":
        gs = s["group_size"]
        if not isinstance(gs, int) or isinstance(gs, bool) or gs < 1:
            raise ZooError(
                f"config.json: a group config of {group.name!r} has no valid 'group_size'"
            )
        if k % gs:
            raise group.error(
                "weight_packed", f"in_features {k} is not a multiple of group_size {gs}"
            )
    want = {"group": (n, k // gs), "channel": (n, 1), "tensor": (1,)}[strategy]
    # also accepted: channel scales [N], a tensor scale of rank 0
    alike = {"group": want, "channel": (n,), "tensor": ()}[strategy]
    scale_shape = group.shape("weight_scale")
    if scale_shape not in (want, alike):
        raise group.error(
            "weight_packed",
            f"has shape {list(packed)} (weight {n}x{k}, {strategy} scales), but "
            f"{group.source_name('weight_scale')!r} has shape {list(scale_shape)}, "
            f"expected {list(want)}",
        )
    return n, k, want, gs


def _build(group: Group) -> Built:
    s = _scheme(group)
    bits, strategy = s["bits"], s["strategy"]
    n, k, want, gs = _shapes(group, s)
    parts = [("data", "weight_packed"), ("scales", "weight_scale")]
    zp: Dict[str, Any] = {}
    if "weight_zero_point" in group.tensors:
        zp = _zero_points(group, bits, strategy, want, n)
        parts.append(("zero_points", "weight_zero_point"))
    elif not s["symmetric"]:
        raise group.error(
            "weight_packed",
            f"is asymmetric in config.json, but {group.source_name('weight_zero_point')!r} "
            "is missing",
        )
    else:
        zp = {"zero_point": 1 << (bits - 1)}
    if "weight_g_idx" in group.tensors:
        if strategy != "group":
            raise group.error("weight_g_idx", f"is given for a {strategy} strategy layer")
        group.expect("weight_g_idx", ("int32",), 1)
        if group.shape("weight_g_idx") != (k,):
            raise group.error(
                "weight_g_idx", f"has shape {list(group.shape('weight_g_idx'))}, expected [{k}]"
            )
        check_group_index(group, "weight_g_idx", want[1])
        zp.update(group_index_buffer=len(parts), group_index_dtype="int32")
        parts.append(("group_index", "weight_g_idx"))
    common = dict(
        scale_buffer=1,
        scale_dtype=group.dtype("weight_scale"),
        code_packing=packing(32, 1),
        **zp,
    )
    if strategy == "group":
        q = BlockAffine(axis=1, block_size=gs, **common)
    elif strategy == "channel":
        q = PerChannelAffine(axis=0, **common)
    else:  # one block over both axes: one scale
        q = BlockAffine(axis=1, block_size=k, axis2=0, block_size2=n, **common)
    return Built(_DTYPE[bits], (n, k), q, parts)


def _partial_word(what: str, count: int, bits: int) -> str:
    lanes = 32 // bits
    return (
        f"packs {lanes} values to an int32 word, and {what} {count} leaves the last word "
        f"partly filled; hurray reads packed values only when {what} is a multiple of {lanes}"
    )


def _zero_points(group: Group, bits: int, strategy: str, scale_shape, n: int) -> Dict[str, Any]:
    """The zero-point fields for weight_zero_point as stored."""
    lanes = 32 // bits
    dtype, shape = group.dtype("weight_zero_point"), group.shape("weight_zero_point")
    if dtype == "int32" and strategy != "tensor":
        if n % lanes:
            raise group.error("weight_zero_point", _partial_word("out_features", n, bits))
        want = (n // lanes, scale_shape[1])
        if shape != want:
            raise group.error(
                "weight_zero_point",
                f"has shape {list(shape)}, expected {list(want)} (packed along the outputs)",
            )
        return {
            "zero_point_buffer": 2,
            "zero_point_dtype": _DTYPE[bits],
            "zero_point_packing": packing(32, 0),
        }
    if dtype == "int8" and (
        shape == tuple(scale_shape) or shape in ((), (1,)) and strategy == "tensor"
    ):
        return {
            "zero_point_buffer": 2,
            "zero_point_dtype": "int8",
            "zero_point_offset": 1 << (bits - 1),
        }
    raise group.error(
        "weight_zero_point",
        f"is {dtype} {list(shape)}; expected packed int32 or int8 {list(scale_shape)}",
    )


register(
    Family(
        name="compressed-tensors",
        detect=_detect,
        anchor="weight_packed",
        members=("weight_packed", "weight_scale", "weight_shape"),
        optional=("weight_zero_point", "weight_g_idx"),
        build=_build,
        check_config=_check_config,
        accepts=_accepts,
    )
)
