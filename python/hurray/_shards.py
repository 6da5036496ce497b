"""Sharded tensors: pieces of one global tensor spread over several files.

A piece carries a shard (docs/spec/descriptor-encoding.md, SHARD): it is the
block [offsets, offsets + shape) of a global tensor of global_shape. The
pieces of one tensor must tile the global shape exactly: every element in
exactly one piece. shard() marks a tensor as a piece, save_sharded() cuts
arrays into pieces and writes one file per part, load_sharded() checks the
tiling and assembles the whole global tensor or any rectangular region of
it, fetching only the pieces that region touches.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import math
import os
import secrets
from dataclasses import dataclass
from typing import (
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import numpy as np

from . import _dtypes, _hurray
from ._deferred import signals_deferred
from ._descriptor import Dense, Descriptor, Shard
from ._files import File, _tensor_name, as_tensor, fsync_dir, save
from ._publish import ReplaceError, remove_quietly, replace_all
from ._tensor import Tensor, _numpy_shaped, specialise

Box = Tuple[Tuple[int, ...], Tuple[int, ...]]  # (lo, hi), hi exclusive

# Pieces named in full in an error message; more are counted.
_LISTED = 8
# Work bound of the box subtraction that names the gaps of a broken tiling.
_MAX_GAP_BOXES = 4096


def _error(status_name: str, message: str, errno_: int = 0, filename: Optional[str] = None):
    """The exception C raises for that status (the class and code from C);
    with an errno, the HurrayIOError subclass C raises for it."""
    return _hurray._error(status_name, message, errno_, filename)


def _io_error(exc: OSError, what: str, filename: Optional[str] = None) -> BaseException:
    """A system call's OSError as the HurrayIOError C would raise for it,
    naming `filename` (a target, where the call named a hidden staged
    file that is gone by the time anyone reads the error) or the call's.
    A HurrayIOError's strerror is its whole message, which names that
    file: its errno's own text stands in."""
    if not exc.errno:
        return exc
    reason = os.strerror(exc.errno) if isinstance(exc, _hurray.HurrayError) else exc.strerror
    return _error("HURRAY_ERR_IO", f"{what}: {reason}", exc.errno, filename or exc.filename)


# --------------------------------------------------------------------- shard


def shard(value: Any, global_shape: Sequence[int], offsets: Sequence[int]) -> Tensor:
    """The same tensor marked as the block [offsets, offsets + shape) of a
    global tensor of global_shape. Zero-copy: the result shares the
    buffers of `value` (anything as_tensor takes). Raises ValidationError
    HURRAY_ERR_SHARD_RANK when the ranks differ and HURRAY_ERR_SHARD_BOUNDS
    when the block reaches past the global shape."""
    t = as_tensor(value)
    # Integers as they are (Shard checks them): int() truncated 8.9 to 8
    # and parsed "8".
    descriptor = t.descriptor.replace(shard=Shard(tuple(global_shape), tuple(offsets)))
    # The same handles (pinned memory, a stream to wait on), not views of them.
    return specialise(t._derived(descriptor.encode(), range(t.buffer_count)))


# --------------------------------------------------------------- box algebra


def _volume(box: Box) -> int:
    lo, hi = box
    return math.prod(h - l for l, h in zip(lo, hi))


def _intersect(a: Box, b: Box) -> Optional[Box]:
    lo = tuple(max(x, y) for x, y in zip(a[0], b[0]))
    hi = tuple(min(x, y) for x, y in zip(a[1], b[1]))
    if any(l >= h for l, h in zip(lo, hi)):
        return None
    return lo, hi


def _subtract(a: Box, b: Box) -> List[Box]:
    """a minus b, as at most 2 * rank disjoint boxes."""
    cut = _intersect(a, b)
    if cut is None:
        return [a]
    out = []
    lo, hi = list(a[0]), list(a[1])
    for k in range(len(lo)):
        if lo[k] < cut[0][k]:
            out.append((tuple(lo), tuple(hi[:k] + [cut[0][k]] + hi[k + 1 :])))
        if cut[1][k] < hi[k]:
            out.append((tuple(lo[:k] + [cut[1][k]] + lo[k + 1 :]), tuple(hi)))
        lo[k], hi[k] = cut[0][k], cut[1][k]
    return out


def _fmt_box(box: Box) -> str:
    return "[" + ", ".join(f"{l}:{h}" for l, h in zip(*box)) + "]"


# -------------------------------------------------------------------- pieces


#: The metadata key save_sharded marks each part with: one random id per
#: call, so that load_sharded tells the parts of one save from a mix of two
#: (a save that failed part way leaves the earlier parts behind it).
SAVE_KEY = "hurray.save_sharded.save"

# A torch.distributed.checkpoint folder (hurray/torch/dcp.py, which takes
# these from here): read without torch by the converter, which must know a
# finished save from an unfinished one.
DCP_FORMAT = "hurray.torch.dcp"
DCP_METADATA_FILE = ".metadata.hurray"
DCP_FORMAT_KEY = "hurray.dcp.format"
DCP_SAVE_ID_KEY = "hurray.dcp.save_id"
DCP_METADATA_KEY = "hurray.dcp.metadata"

#: The most parts save_sharded writes: their names hold five digits.
MAX_PARTS = 99999


@dataclass
class _Piece:
    path: str
    name: str
    descriptor: Descriptor
    box: Box
    save: Optional[str] = None
    file: Optional[Tuple[int, int, int, int]] = None  # _identity before pass 1 opened it

    def label(self) -> str:
        return f"{os.path.basename(self.path)}[{self.name!r}] {_fmt_box(self.box)}"


def _listing(pieces: Sequence[_Piece]) -> str:
    shown = ", ".join(p.label() for p in pieces[:_LISTED])
    more = len(pieces) - _LISTED
    return shown + (f" and {more} more" if more > 0 else "")


class _TooIrregular(Exception):
    """The sweep gave up: the boxes lie so that it would compare most pairs."""


#: Pairs of boxes the sweep compares before it gives up (about a second).
_SWEEP_PAIRS = 1_000_000

#: Above this rank a box's 2**rank corners cost more than they save.
_CORNER_RANK = 10

#: Corners the count may hold (2**rank a box, about 150 bytes each): past
#: it the overlap search decides. 16,000 boxes of a 1.7 MB DCP metadata
#: file whose corners never cancel held 16 million (1.6 GB).
_CORNER_BUDGET = 1 << 18


def _cut_axes(boxes: Sequence[Box], shape: Sequence[int]) -> List[int]:
    """The axes some box does not span whole."""
    return [k for k in range(len(shape)) if any(lo[k] or hi[k] != shape[k] for lo, hi in boxes)]


def tiles_exactly(boxes: Sequence[Box], shape: Sequence[int]) -> Optional[bool]:
    """Whether non-empty boxes inside `shape` cover each of its elements
    exactly once, in time linear in the boxes (None above _CORNER_RANK, or
    past _CORNER_BUDGET corners).
    Each box's corners are counted; the boxes' indicator functions add up to
    the whole box's modulo 2 exactly when every point is a corner of an even
    number of boxes, outer corners excepted (the mixed difference of an
    indicator is +-1 at its box's corners, and is invertible modulo 2). A
    sum that is odd everywhere in the shape and adds up to its volume is
    one everywhere. Axes every box spans whole are left out first: they
    change neither answer (a rank-12 checkpoint cut along two axes counts
    the corners of a rank-2 one)."""
    cut = _cut_axes(boxes, shape)
    if len(cut) > _CORNER_RANK or len(boxes) << len(cut) > _CORNER_BUDGET:
        return None
    shape = [shape[k] for k in cut]
    boxes = [(tuple(lo[k] for k in cut), tuple(hi[k] for k in cut)) for lo, hi in boxes]
    rank = len(shape)
    if sum(_volume(b) for b in boxes) != math.prod(shape):
        return False
    odd: set = set()
    for lo, hi in boxes:
        odd.symmetric_difference_update(itertools.product(*zip(lo, hi)))
    return odd == set(itertools.product(*zip((0,) * rank, shape)))


class Tiling(NamedTuple):
    """What is wrong with boxes that should tile a shape: `overlap`, the
    indices of two boxes that overlap; or `gap`, they are disjoint and leave
    elements uncovered; or neither, the cuts are too irregular to say where
    (`counted`: the corner count found a fault; False: above _CORNER_RANK,
    nothing is known)."""

    overlap: Optional[Tuple[int, int]] = None
    gap: bool = False
    counted: bool = True


def tiling_fault(boxes: Sequence[Box], shape: Sequence[int]) -> Optional[Tiling]:
    """None when the non-empty boxes, each inside `shape`, cover each of its
    elements exactly once; otherwise what is wrong. The corner count decides
    in linear time; the search for an overlap only says what is wrong (or,
    past the corner count's rank, decides with a larger, finite budget), and
    a sweep for it would give up on irregular cuts of a valid tiling."""
    counted = tiles_exactly(boxes, shape)
    if counted:
        return None
    # Past the corner count's rank the search is all there is; past its
    # budget of corners the boxes are many, and a search as long is not.
    alone = counted is None and len(_cut_axes(boxes, shape)) > _CORNER_RANK
    try:
        pair = overlapping_pair(boxes, budget=_SWEEP_PAIRS * (100 if alone else 1))
    except _TooIrregular:
        return Tiling(counted=counted is not None)
    if pair is not None:
        return Tiling(overlap=pair)
    # Disjoint boxes inside the shape tile it iff their volumes add up to it.
    if sum(_volume(b) for b in boxes) != math.prod(shape):
        return Tiling(gap=True)
    return None


def overlapping_pair(
    boxes: Sequence[Box], budget: Optional[int] = _SWEEP_PAIRS
) -> Optional[Tuple[int, int]]:
    """The indices of two boxes that overlap, or None; an empty box overlaps
    nothing. Linear in the boxes for the layouts shards have: each box is
    marked in the grid their offsets cut the shape into, and the first cell
    marked twice names the pair. Only when that grid has far more cells than
    there are boxes (irregular cuts) does a sweep compare neighbours; it
    raises _TooIrregular after `budget` comparisons (None: no limit)."""
    live = [i for i, (lo, hi) in enumerate(boxes) if all(h > o for o, h in zip(lo, hi))]
    if len(live) < 2:
        return None
    rank = len(boxes[live[0]][0])
    cuts = [
        sorted({c for i in live for c in (boxes[i][0][k], boxes[i][1][k])}) for k in range(rank)
    ]
    if math.prod(len(c) - 1 for c in cuts) <= 4 * len(live) + 1024:
        return _overlap_in_grid(boxes, live, cuts)
    return _overlap_by_sweep(boxes, live, budget)


def _overlap_in_grid(boxes, live, cuts) -> Optional[Tuple[int, int]]:
    # Every cell is marked at most once before the first overlap is found,
    # so the work is bounded by the grid's size.
    position = [{c: n for n, c in enumerate(cut)} for cut in cuts]
    owner: Dict[tuple, int] = {}
    for i in live:
        lo, hi = boxes[i]
        spans = [range(position[k][lo[k]], position[k][hi[k]]) for k in range(len(cuts))]
        for cell in itertools.product(*spans):
            j = owner.setdefault(cell, i)
            if j != i:
                return j, i
    return None


def _overlap_by_sweep(boxes, live, budget: Optional[int]) -> Optional[Tuple[int, int]]:
    """A sweep along the axis where the boxes lie thinnest (the least
    extent per unit of its span: how many boxes cover a point there), so
    that each box is compared with the few that share its stretch."""
    rank = len(boxes[live[0]][0])

    def depth(k: int) -> float:
        span = max(boxes[i][1][k] for i in live) - min(boxes[i][0][k] for i in live)
        return sum(boxes[i][1][k] - boxes[i][0][k] for i in live) / span

    axis = min(range(rank), key=depth)
    order = sorted(live, key=lambda i: boxes[i][0][axis])
    for n, i in enumerate(order):
        for j in order[n + 1 :]:
            if boxes[j][0][axis] >= boxes[i][1][axis]:
                break
            if budget is not None:
                budget -= 1
                if budget < 0:
                    raise _TooIrregular
            if _intersect(boxes[i], boxes[j]) is not None:
                return i, j
    return None


def _check_one_save(name: str, pieces: List[_Piece]) -> None:
    """ValidationError if pieces of `name` in one folder come from different
    save_sharded calls: what a save that stopped part way leaves (its new
    parts beside the old ones) tiles like a checkpoint and holds two. A
    second call into the same folder with the same part count replaces every
    part, so only a failure leaves two ids there; calls into separate
    folders (one per rank, each cutting its own piece further) do not meet.
    Pieces saved otherwise carry no id and go with any."""
    first_in: Dict[str, _Piece] = {}
    for p in pieces:
        if p.save is None:
            continue
        first = first_in.setdefault(os.path.dirname(os.path.realpath(p.path)), p)
        if p.save != first.save:
            raise _error(
                "HURRAY_ERR_SHARD_BOUNDS",
                f"tensor {name!r}: {first.path} and {p.path} come from different saves "
                f"({first.save} and {p.save}): a save_sharded stopped part way, or parts of "
                "two were mixed",
            )


# long: one check after another over the pieces (agreement, layout, tiling), each with its status.
def _check_pieces(name: str, pieces: List[_Piece]) -> Tuple[Tuple[int, ...], str]:
    """Agreement, layout and exact tiling; returns (global_shape, dtype)."""
    _check_one_save(name, pieces)
    first = pieces[0]
    global_shape = first.descriptor.shard.global_shape
    dtype = first.descriptor.dtype
    for p in pieces[1:]:
        g = p.descriptor.shard.global_shape
        if g != global_shape:
            status = (
                "HURRAY_ERR_SHARD_RANK"
                if len(g) != len(global_shape)
                else "HURRAY_ERR_SHARD_BOUNDS"
            )
            raise _error(
                status,
                f"tensor {name!r}: pieces disagree on the global shape: "
                f"{first.label()} says {global_shape}, {p.label()} says {g}",
            )
        if p.descriptor.dtype != dtype:
            raise _error(
                "HURRAY_ERR_DTYPE",
                f"tensor {name!r}: pieces disagree on the dtype: {first.label()} is "
                f"{dtype}, {p.label()} is {p.descriptor.dtype}",
            )
    for p in pieces:
        d = p.descriptor
        if not isinstance(d.layout, Dense):
            raise _error(
                "HURRAY_ERR_UNSUPPORTED",
                f"tensor {name!r}: piece {p.label()} has a "
                f"{type(d.layout).__name__.lower()} layout; load_sharded assembles "
                "dense pieces only (read the pieces with hurray.open)",
            )
        if d.quantization is not None:
            raise _error(
                "HURRAY_ERR_UNSUPPORTED",
                f"tensor {name!r}: piece {p.label()} is quantized "
                f"({type(d.quantization).__name__}); load_sharded assembles "
                "unquantized pieces only (dequantize each piece with hurray.open)",
            )

    solid = [p for p in pieces if _volume(p.box) > 0]
    fault = tiling_fault([p.box for p in solid], global_shape)
    if fault is None:
        return tuple(global_shape), dtype
    if fault.overlap is not None:
        a, b = solid[fault.overlap[0]], solid[fault.overlap[1]]
        raise _error(
            "HURRAY_ERR_SHARD_BOUNDS",
            f"tensor {name!r}: pieces {a.label()} and {b.label()} overlap in "
            f"{_fmt_box(_intersect(a.box, b.box))}",
        )
    if not fault.gap:
        raise _error(
            "HURRAY_ERR_SHARD_BOUNDS",
            f"tensor {name!r}: the {len(solid)} pieces do not cover the global shape "
            f"{tuple(global_shape)} exactly once (they overlap or leave a gap, cut too "
            f"irregularly to say where); pieces found: {_listing(pieces)}"
            if fault.counted
            else f"tensor {name!r}: its {len(solid)} pieces are cut on more than "
            f"{_CORNER_RANK} axes too irregularly to check that they tile the global "
            f"shape {tuple(global_shape)}; pieces found: {_listing(pieces)}",
        )
    covered, total = sum(_volume(p.box) for p in solid), math.prod(global_shape)
    missing: List[Box] = [((0,) * len(global_shape), tuple(global_shape))]
    for p in solid:
        missing = [r for m in missing for r in _subtract(m, p.box)]
        if len(missing) > _MAX_GAP_BOXES:
            break
    example = (
        ", e.g. " + ", ".join(_fmt_box(m) for m in missing[:3])
        if len(missing) <= _MAX_GAP_BOXES
        else ""
    )
    raise _error(
        "HURRAY_ERR_SHARD_BOUNDS",
        f"tensor {name!r}: the pieces leave {total - covered} of the "
        f"{total} elements of the global shape {tuple(global_shape)} uncovered"
        f"{example}; pieces found: {_listing(pieces)}",
    )


# ----------------------------------------------------------------- load_sharded


def is_part_name(name: str) -> bool:
    """Whether a file of this name in a folder is one of its parts: glob's
    "*.hurray", so hidden names (the staged parts of a save) are not."""
    return not name.startswith(".") and name.endswith(".hurray")


def _paths(paths_or_dir) -> List[str]:
    if isinstance(paths_or_dir, (str, bytes, os.PathLike)):
        path = os.fsdecode(paths_or_dir)
        if os.path.isdir(path):
            found = []
            try:  # not glob, which reads a folder it may not list as an empty one
                names = os.listdir(path)
            except OSError as e:
                raise _error(
                    "HURRAY_ERR_IO", f"cannot list the folder {path!r}: {e.strerror}", e.errno, path
                ) from None
            for name in sorted(names):
                if not is_part_name(name):
                    continue
                p = os.path.join(path, name)
                if os.path.isfile(p):
                    found.append(p)
                elif not os.path.isdir(p):
                    # Never opened (a FIFO would block the open), and never
                    # passed over: the part it should be would only show as
                    # a region no piece covers.
                    broken = os.path.islink(p) and not os.path.exists(p)
                    what = "a broken symbolic link" if broken else "not a regular file"
                    raise _error(
                        "HURRAY_ERR_IO",
                        f"{p} is {what}; a part cannot be read from it",
                        errno.ENOENT if broken else errno.ENXIO,  # ENXIO: as opening it says
                        p,
                    )
            if not found:
                raise _error("HURRAY_ERR_NOT_FOUND", f"no *.hurray files in {path!r}")
            return found
        return [path]
    return [os.fsdecode(p) for p in paths_or_dir]


def _region(index, global_shape: Tuple[int, ...]) -> Tuple[Box, Tuple[int, ...]]:
    """The box an index selects, and the axes that integers drop."""
    rank = len(global_shape)
    if index is None:
        index = ()
    elif not isinstance(index, tuple):
        index = (index,)
    if len(index) > rank:
        raise IndexError(f"{len(index)} indices for a tensor of rank {rank}")
    lo, hi, dropped = [], [], []
    for k, dim in enumerate(global_shape):
        item = index[k] if k < len(index) else slice(None)
        if isinstance(item, slice):
            start, stop, step = item.indices(dim)
            if step != 1:
                raise ValueError(f"index {k}: only steps of 1 are supported, got {item.step}")
            lo.append(start)
            hi.append(max(start, stop))
        elif isinstance(item, (int, np.integer)) and not isinstance(item, bool):
            i = int(item) + (dim if item < 0 else 0)
            if not 0 <= i < dim:
                raise IndexError(f"index {int(item)} is out of bounds for axis {k} of size {dim}")
            lo.append(i)
            hi.append(i + 1)
            dropped.append(k)
        else:
            raise TypeError(
                f"index {k}: slices and integers only (basic slicing), got {type(item).__name__}"
            )
    return (tuple(lo), tuple(hi)), tuple(dropped)


def _rows_readable(d: Descriptor) -> bool:
    """Whether File.get_slice can read rows of this piece alone."""
    if d.strides is not None or not d.shape:
        return False
    row = math.prod(d.shape[1:])
    return row * _dtypes.BITS[d.dtype] % 8 == 0


def _fetch(f: File, piece: _Piece, cut: Box) -> np.ndarray:
    """The part `cut` (global coordinates) of a piece, reading rows along
    dimension 0 only when that is all that is needed."""
    lo, hi = piece.box
    local = [slice(c0 - l, c1 - l) for c0, c1, l in zip(cut[0], cut[1], lo)]
    d = piece.descriptor
    if local and (local[0].start, local[0].stop) != (0, d.shape[0]) and _rows_readable(d):
        rows = f.get_slice(piece.name, local[0].start, local[0].stop).codes()
        return rows[(slice(None),) + tuple(local[1:])]
    return f[piece.name].codes()[tuple(local)]


def _identity(path: str) -> Optional[Tuple[int, int, int, int]]:
    """(device, inode, size, mtime in ns) of the file at `path`: a save
    replaces a file by rename (another inode), a write in place moves its
    mtime. None where it cannot be had."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _check_unchanged(f: File, piece: _Piece) -> None:
    """ValidationError if the file pass 2 reopened is not the one pass 1
    checked: a save into the folder in between replaced it, and its values
    would mix with the other parts' (the save id, or the piece, differs, or
    the file itself: pieces written without a save id, with the same
    descriptor and other values, looked the same). Pass 1 took the file's
    identity before it opened the file, and this is called after pass 2
    opened it: a replacement at any moment between is seen (one just after
    pass 2 opened it, too, though pass 2 reads the file it opened)."""
    save_id = f.metadata.get(SAVE_KEY, f.metadata.get(DCP_SAVE_ID_KEY))
    try:
        same = save_id == piece.save and f.descriptor(piece.name) == piece.descriptor
    except _hurray.NotFoundError:
        same = False
    if same and piece.file is not None:
        same = _identity(piece.path) == piece.file
    if not same:
        raise _error(
            "HURRAY_ERR_SHARD_BOUNDS",
            f"tensor {piece.name!r}: {piece.path} was replaced while load_sharded read the "
            "parts (another save into the folder); load again once it has finished",
        )


def check_one_finished_save(
    folder: str,
    ids: Mapping[str, Optional[str]],
    dcp: bool,
    read_metadata: Callable[[str], Any],
    one_save: bool = True,
) -> Optional[str]:
    """Why the parts of `folder` cannot be assembled, or None. `ids` maps
    each part to the save id it carries (save_sharded's or a DCP rank
    file's), or None; `dcp`: some part says it is a DCP rank file;
    `read_metadata(path)`: a file's metadata. A torch.distributed.checkpoint
    save must have finished (.metadata.hurray), every part must carry the
    save id it names, and every rank file it lists must be there: else
    tensors would be assembled from two saves, or go missing without a word.
    With `one_save`, any two saves' parts are refused too (the converter's
    rule: load_sharded compares the ids of each tensor's pieces instead, so
    that one folder may hold two save_sharded calls of different tensors).
    (Shared by load_sharded of a folder and the converter, which reads such
    folders without torch.)"""
    saves: Dict[str, str] = {}
    for path, save_id in ids.items():
        if save_id is not None:
            saves.setdefault(str(save_id), path)
    if one_save and len(saves) > 1:
        (a, pa), (b, pb) = list(saves.items())[:2]
        return (
            f"{pa} and {pb} come from different saves ({a} and {b}): a save stopped part "
            "way, or parts of two were mixed"
        )
    meta_path = os.path.join(folder, DCP_METADATA_FILE)
    if not (os.path.lexists(meta_path) or dcp):
        return None
    if not os.path.isfile(meta_path):
        return f"a torch.distributed.checkpoint save that did not finish (no {DCP_METADATA_FILE})"
    meta = read_metadata(meta_path)
    finished = meta.get(DCP_SAVE_ID_KEY)
    if not isinstance(finished, str):
        return f"{DCP_METADATA_FILE} names no save id"
    for path, save_id in ids.items():
        if save_id is None or str(save_id) != finished:
            return (
                f"{path} is not of the save {DCP_METADATA_FILE} describes: a later save "
                "stopped part way, or a file was put beside it"
            )
    try:
        listed = json.loads(meta[DCP_METADATA_KEY])["files"]
        if not isinstance(listed, list) or not all(isinstance(n, str) for n in listed):
            raise TypeError
    except (KeyError, TypeError, ValueError, RecursionError):
        return f"{DCP_METADATA_FILE} holds no list of its rank files"
    present = {os.path.basename(p) for p in ids}
    missing = [n for n in listed if n not in present]
    if missing:
        shown = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        return f"{DCP_METADATA_FILE} lists rank files that are missing: {shown}"
    return None


def _check_assembled_size(pieces: List[_Piece], region: Box, dtype: str) -> None:
    """LimitError if the result takes more than the output limit allows for
    the bytes the pieces store: strides let a piece of a few bytes describe
    gigabytes (a stride of 0 repeats one element), which to_dense() refuses
    too."""
    stored = sum(b.byte_size for p in pieces for b in p.descriptor.buffers)
    written = _volume(region) * _dtypes.to_numpy(dtype).itemsize
    _hurray._check_output_bytes(stored, min(written, 2**64 - 1))


def load_sharded(
    paths_or_dir,
    name: Optional[str] = None,
    *,
    index=None,
    mmap: bool = True,
    verify: bool = False,
) -> Union[np.ndarray, Dict[str, np.ndarray]]:
    """Assembles sharded tensors from the pieces stored in several files.

    `paths_or_dir` is a list of files, one file, or a directory (every
    *.hurray file in it, sorted). Every tensor piece named `name` that has
    a shard is used (tensors without one are ignored); with name=None, the
    result is a dict with every sharded tensor. The pieces must agree on the
    global shape (ValidationError HURRAY_ERR_SHARD_BOUNDS, or _SHARD_RANK
    when ranks differ) and dtype (HURRAY_ERR_DTYPE) and tile the global
    shape with no overlap and no gap (HURRAY_ERR_SHARD_BOUNDS, naming the
    pieces or the uncovered region). Only dense, unquantized pieces are
    assembled (UnsupportedError otherwise).

    `index` (slices with step 1 and integers, as in basic numpy indexing)
    selects a region of the global tensor: only the pieces that intersect
    it are fetched, and of those only the needed rows where the layout
    allows. Every file's index is read to check the tiling, one file open at
    a time; then only the files holding needed pieces are opened again to
    fetch them. The result is a new array.

    Of a directory that holds a torch.distributed.checkpoint save, the save
    must have finished and every rank file be of the save its
    .metadata.hurray describes (ValidationError HURRAY_ERR_SHARD_BOUNDS). A *.hurray entry that is not a regular file
    (a broken link, a FIFO) is a HurrayIOError, not passed over.

    verify=True checks the checksums of every piece fetched, as
    File.verify(name) does, before its values are used (ChecksumError); by
    default, as for load(), they are not checked."""
    folder = None
    if isinstance(paths_or_dir, (str, bytes, os.PathLike)) and os.path.isdir(
        os.fsdecode(paths_or_dir)
    ):
        folder = os.fsdecode(paths_or_dir)
    return _load(
        _paths(paths_or_dir), name, index, lambda path: File(path, mmap=mmap), folder, verify
    )


@contextlib.contextmanager
def _naming(path: str) -> Iterator[None]:
    """A part's failure (a damaged index, a checksum) as the same error
    naming the part: the reader's message says what, not which of a
    hundred parts. File-system errors name their file already."""
    try:
        yield
    except _hurray.HurrayError as exc:
        text = str(exc)
        if isinstance(exc, OSError) or path in text or not getattr(exc, "status_name", None):
            raise
        text = text[len(exc.status_name) + 2 :] if text.startswith(exc.status_name + ": ") else text
        raise _error(exc.status_name, f"{path}: {text}") from None


# long: pass 1 (descriptors, checks) and pass 2 (fetches) of load_sharded, in order.
def _load(
    paths: List[str],
    name: Optional[str],
    index,
    open_file: Callable[[str], Any],
    folder: Optional[str] = None,
    verify: bool = False,
) -> Union[np.ndarray, Dict[str, np.ndarray]]:
    """load_sharded over `paths`, each opened with open_file(path) (a
    context manager giving a File), which a caller that reads many tensors
    from the same parts points at files it keeps open. `folder`: the
    folder they are every *.hurray file of, which must hold one finished
    save (check_one_finished_save)."""
    pieces: Dict[str, List[_Piece]] = {}
    unsharded: Dict[str, str] = {}
    ids: Dict[str, Optional[str]] = {}
    dcp = False
    # Pass 1: descriptors only, one file open at a time (parts may outnumber fds).
    for path in paths:
        identity = _identity(path)
        with _naming(path), open_file(path) as f:
            # save_sharded's id, or a DCP rank file's: pieces of two saves never mix
            save_id = f.metadata.get(SAVE_KEY, f.metadata.get(DCP_SAVE_ID_KEY))
            ids[path] = None if save_id is None else str(save_id)
            dcp = dcp or f.metadata.get(DCP_FORMAT_KEY) == DCP_FORMAT
            for n in [name] if name is not None else f.keys():
                try:
                    d = f.descriptor(n)
                except _hurray.NotFoundError:
                    continue
                if d.shard is None:
                    unsharded.setdefault(n, path)
                    continue
                box = (d.shard.offsets, tuple(o + s for o, s in zip(d.shard.offsets, d.shape)))
                pieces.setdefault(n, []).append(_Piece(path, n, d, box, save_id, identity))
    if folder is not None:

        def read_metadata(path: str):
            with _naming(path), open_file(path) as f:
                return f.metadata

        why = check_one_finished_save(folder, ids, dcp, read_metadata, one_save=False)
        if why is not None:
            raise _error("HURRAY_ERR_SHARD_BOUNDS", f"{folder}: {why}")
    if name is not None and name not in pieces:
        where = f" (only without a shard, in {unsharded[name]!r})" if name in unsharded else ""
        raise _error(
            "HURRAY_ERR_NOT_FOUND", f"no sharded tensor {name!r} in {len(paths)} files{where}"
        )
    for n in pieces:
        if n in unsharded:
            raise _error(
                "HURRAY_ERR_SHARD_BOUNDS",
                f"tensor {n!r} is whole (no shard) in {unsharded[n]!r} but "
                f"sharded in {pieces[n][0].path!r}",
            )
    checked = {n: _check_pieces(n, ps) for n, ps in pieces.items()}

    # Pass 2: only the pieces that meet the region, each file opened once.
    results, dropped_axes = {}, {}
    wanted: Dict[str, list] = {}
    for n, ps in pieces.items():
        global_shape, dtype = checked[n]
        region, dropped_axes[n] = _region(index, global_shape)
        _check_assembled_size(ps, region, dtype)
        shape = tuple(h - l for l, h in zip(*region))
        results[n] = _numpy_shaped(lambda: np.empty(shape, _dtypes.to_numpy(dtype)), shape)
        for p in ps:
            cut = _intersect(p.box, region) if _volume(region) else None
            if cut is not None:
                dst = tuple(slice(c0 - r, c1 - r) for c0, c1, r in zip(cut[0], cut[1], region[0]))
                wanted.setdefault(p.path, []).append((p, cut, dst))
    for path in paths:
        if path not in wanted:
            continue
        with _naming(path), open_file(path) as f:
            checked = set()
            for p, cut, dst in wanted.pop(path):
                _check_unchanged(f, p)
                if verify and p.name not in checked:
                    f.verify(p.name)
                    checked.add(p.name)
                results[p.name][dst] = _fetch(f, p, cut)
    out = {}
    for n, result in results.items():
        dropped = dropped_axes[n]
        out[n] = (
            result.reshape(tuple(s for k, s in enumerate(result.shape) if k not in dropped))
            if dropped
            else result
        )
    return out[name] if name is not None else out


# ----------------------------------------------------------------- save_sharded


def save_sharded(
    directory,
    tensors: Mapping[str, Any],
    parts: int,
    axis: int = 0,
    metadata: Optional[Mapping[str, Any]] = None,
) -> List[str]:
    """Cuts every tensor into `parts` pieces along `axis` (numpy.array_split:
    the first len % parts pieces one longer) and writes piece k of every
    tensor, marked with its shard, to directory/part-{k:05d}-of-{parts:05d}.hurray
    (with `metadata` in each file). Returns the paths in part order.

    Values are dense, unquantized tensors or anything as_tensor takes; a
    value that is itself a piece is cut further, its pieces keeping its
    global shape. Existing files in `directory` are left alone but for parts
    of the same names, which are replaced: write a different part count
    into a fresh directory, since load_sharded reads every *.hurray file of
    a directory. The parts are written under hidden names
    (.part-....hurray.ID) and renamed into place once every one is, so a
    save that fails (a full disk, Ctrl-C) leaves the directory as it was,
    and one created for it is removed again. Each part records one random
    id per call (metadata hurray.save_sharded.save): load_sharded refuses
    pieces of a tensor in one folder that come from two calls, as a process
    killed between two renames leaves them."""
    if isinstance(parts, bool) or not isinstance(parts, (int, np.integer)):
        raise TypeError(f"parts must be an int, not {type(parts).__name__}")
    if not 1 <= parts <= MAX_PARTS:
        raise ValueError(f"parts must be from 1 to {MAX_PARTS}, got {parts!r}")
    parts = int(parts)
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"axis must be an int, not {type(axis).__name__}")
    directory = os.fspath(directory)
    split: Dict[str, List[Tensor]] = {}
    for name, value in tensors.items():
        _tensor_name(name)
        t = as_tensor(value)
        d = t.descriptor
        if not isinstance(d.layout, Dense) or d.quantization is not None:
            raise _error(
                "HURRAY_ERR_UNSUPPORTED",
                f"tensor {name!r}: save_sharded cuts dense, unquantized tensors only",
            )
        array = t.numpy()
        if array.ndim == 0:
            raise ValueError(f"tensor {name!r} is a scalar: there is no axis to cut along")
        ax = int(axis)
        if not -array.ndim <= ax < array.ndim:
            raise ValueError(f"tensor {name!r}: axis {axis} is out of range for rank {array.ndim}")
        ax %= array.ndim
        global_shape = d.shard.global_shape if d.shard is not None else array.shape
        base = d.shard.offsets if d.shard is not None else (0,) * array.ndim
        pieces, start = [], 0
        for piece in np.array_split(array, parts, axis=ax):
            offsets = list(base)
            offsets[ax] += start
            start += piece.shape[ax]
            p = as_tensor(np.ascontiguousarray(piece))
            pd = p.descriptor.replace(
                shard=Shard(tuple(global_shape), tuple(offsets)), extension=d.extension
            )
            pieces.append(Tensor(pd, list(p.buffers)))
        split[name] = pieces
    return _write_parts(directory, split, parts, metadata)


def _publish(staged: List[str], paths: List[str], directory: str) -> None:
    """Renames every staged part into place, or none (replace_all): a
    rename that fails part way puts the earlier save's parts back, so that
    the folder holds that save as it was. The caller defers signals around
    it and removes the parts never renamed."""
    try:
        kept = replace_all(list(zip(staged, paths)))
    except ReplaceError as exc:
        fsync_dir(directory)
        raise _io_error(
            exc.cause,
            f"cannot put part {exc.index} in place as {paths[exc.index]}",
            paths[exc.index],
        ) from None
    fsync_dir(directory)
    remove_quietly(kept)


def _write_parts(
    directory: str, split: Dict[str, List[Tensor]], parts: int, metadata: Optional[Mapping]
) -> List[str]:
    """save_sharded's writing: part k of every tensor to its file, every
    part under a hidden name until all are written."""
    made = []  # the folders makedirs makes, deepest first
    folder = os.path.abspath(directory)
    while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
        made.append(folder)
        folder = os.path.dirname(folder)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise _io_error(exc, f"cannot make the folder {directory}") from None
    save_id = secrets.token_hex(8)
    metadata = {**(metadata or {}), SAVE_KEY: save_id}
    paths = [os.path.join(directory, f"part-{k:05d}-of-{parts:05d}.hurray") for k in range(parts)]
    # Every part is written under a hidden name first and renamed into place
    # once all are: a save that fails part way (a full disk, Ctrl-C) leaves
    # the parts of an earlier save with the same names as they were.
    staged = [os.path.join(directory, f".{os.path.basename(p)}.{save_id}") for p in paths]
    published = False
    try:
        for k in range(parts):
            try:
                save(staged[k], {name: pieces[k] for name, pieces in split.items()}, metadata)
            except OSError as exc:  # it names the staged file, which is gone by now
                raise _io_error(exc, f"cannot write {paths[k]}", paths[k]) from None
        # Ctrl-C between two renames left new parts beside old ones, and
        # neither save loadable: it now waits for the new one to be whole.
        with signals_deferred():
            _publish(staged, paths, directory)
            published = True
    except BaseException:
        if not published:
            remove_quietly(staged)  # those not written yet are not there
        for folder in made:
            try:
                os.rmdir(folder)  # only while it is still empty
            except OSError:
                break
        raise
    return paths
