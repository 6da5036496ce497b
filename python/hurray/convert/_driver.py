"""The conversion itself: open the source and the target by their names,
pick the tensors, quantize what the rules say, measure, write, publish."""

from __future__ import annotations

import errno
import json
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np

from .. import _dtypes
from .._deferred import opened
from .._descriptor import BlockAffine, Composite, Dense, Mxfp, Nf4
from .._hurray import HurrayError
from .._quant import QUANT_SCHEMES
from .._quant import quantize as _quantize
from .._shown import shown
from .._tensor import from_numpy as _from_numpy
from ._common import (
    FLOAT_DTYPES,
    GGUF_TENSORS_KEY,
    SOURCE_DTYPES_KEY,
    SOURCE_SUFFIXES,
    TARGET_SUFFIXES,
    ConversionError,
    UsageError,
    _ExpansionBudget,
    _first_line,
    _regular_file,
    _shape_str,
    _values,
    io_error,
    not_io,
    os_failure,
    owned_json,
)
from ._gguf import _GgufSource, _GgufTarget
from ._hurrayfile import _HurraySource, _HurrayTarget
from ._npy import _NpySource, _NpyTarget
from ._npz import _NpzSource, _NpzTarget
from ._report import ConversionReport, TensorReport, _measure
from ._rules import _patterns, _selected, _wants_quantization
from ._safetensors import _open_index, _SafetensorsSource, _SafetensorsTarget
from ._sharded import _ShardedSource
from ._source import _Source, counts_in_folder
from ._torch import _TorchSource, _TorchTarget
from .layouts import describe
from .zoo import drop_changed_records as _zoo_drop_changed
from .zoo import wrap_source as _zoo_source

# File name ending -> format, for sources and targets alike (no ending is
# the end of another, so the order does not matter).
_KINDS = (
    (".hurray", "hurray"),
    (".safetensors", "safetensors"),
    (".gguf", "gguf"),
    (".npz", "npz"),
    (".npy", "npy"),
    (".pt", "torch"),
    (".pth", "torch"),
    (".bin", "torch"),
)


def _source_kind(path: str) -> str:
    low = path.lower()
    if os.path.isdir(path):
        return "dir"
    for suffix, kind in ((".safetensors.index.json", "safetensors-index"),) + _KINDS:
        if low.endswith(suffix):
            return kind
    raise UsageError(
        f"cannot tell the format of {path!r} from its name; sources end with "
        f"{', '.join(SOURCE_SUFFIXES)} (or are a folder holding a "
        "*.safetensors.index.json)"
    )


def _check_readable(path: str, kind: str) -> List[str]:
    """Refuses a source that is missing or cannot be read (a folder's
    listing, a file opened once for reading) with a ConversionIOError;
    the folder's entries, or []."""
    try:
        os.stat(path)  # a loop, a folder that may not be searched: its own errno
    except FileNotFoundError:
        raise io_error(f"{path}: no such file or directory", errno.ENOENT, path) from None
    except OSError as exc:
        raise os_failure(exc, f"cannot read {path}: {exc.strerror}", path) from None
    except ValueError:  # a NUL byte, which no path holds
        raise UsageError(f"{path!r}: a path cannot hold a NUL byte") from None
    try:
        if kind == "dir":
            return sorted(os.listdir(path))
        _regular_file(path)  # before the open: a FIFO would block it
        with opened(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)):
            pass
    except OSError as exc:
        if isinstance(exc, ConversionError):
            raise
        raise os_failure(exc, f"cannot read {path}: {exc.strerror}", path) from None
    return []


def _open_source(path: str, verify: bool = True) -> _Source:
    kind = _source_kind(path)
    entries = _check_readable(path, kind)
    if kind == "dir":
        indexes = [n for n in entries if n.endswith(".safetensors.index.json")]
        if len(indexes) == 1:
            return _open_index(os.path.join(path, indexes[0]))
        if len(indexes) > 1:
            raise ConversionError(
                f"{path} holds {len(indexes)} *.safetensors.index.json files; "
                "name the one to convert"
            )
        files = [n for n in entries if n.endswith(".safetensors")]
        parts = [n for n in entries if counts_in_folder(n) and n not in files]
        if len(files) == 1 and not parts:
            _regular_file(os.path.join(path, files[0]))
            source = _SafetensorsSource([os.path.join(path, files[0])])
            source.folder = path
            return source
        if parts and not files:
            return _ShardedSource(path, verify)  # save_sharded's parts, a DCP folder
        raise ConversionError(
            f"{path} is a folder without a *.safetensors.index.json, holding "
            f"{len(files)} .safetensors and {len(parts)} .hurray files; name a file, or the "
            "folder of one model (one .safetensors file, or the .hurray parts of one save)"
        )
    if kind == "safetensors-index":
        return _open_index(path)
    if kind == "safetensors":
        return _SafetensorsSource([path])
    if kind == "hurray":
        return _HurraySource(path, verify)
    return {"gguf": _GgufSource, "npz": _NpzSource, "npy": _NpySource, "torch": _TorchSource}[kind](
        path
    )


def _target_kind(path: str) -> str:
    low = path.lower()
    for suffix, kind in _KINDS:
        if low.endswith(suffix):
            return kind
    if path.endswith("/") or os.path.isdir(path):
        return "safetensors-dir"  # a model folder: shards + config.json (_folder.py)
    raise UsageError(
        f"cannot tell the format to write from {path!r}; targets end with "
        f"{', '.join(TARGET_SUFFIXES)}, or are a folder (DIR/)"
    )


_TARGETS = {
    "hurray": _HurrayTarget,
    "safetensors": _SafetensorsTarget,
    "gguf": _GgufTarget,
    "npz": _NpzTarget,
    "npy": _NpyTarget,
    "torch": _TorchTarget,
}


def _folder_target(path, options):
    from ._folder import _SafetensorsFolderTarget

    return _SafetensorsFolderTarget(path, options)


_TARGETS["safetensors-dir"] = _folder_target


@dataclass
class _Options:
    scheme: Optional[str]
    quantize_include: Tuple[str, ...]
    quantize_exclude: Tuple[str, ...]
    keep_scales: bool
    stats: bool
    threads: int
    block_size: Optional[int]
    dequantize: bool = False


def _progress(total_bytes: int, count: int, quiet: bool):
    class _Null:
        def update(self, n):
            pass

        def set_postfix_str(self, s, refresh=True):
            pass

        def close(self):
            pass

    if quiet or total_bytes < (64 << 20):
        return _Null()
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return _Null()
    # disable=None: no bar when stderr is not a terminal; delay: none for quick runs
    return tqdm(
        total=total_bytes,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        desc="converting",
        file=sys.stderr,
        disable=None,
        delay=1.0,
        leave=False,
        dynamic_ncols=True,
    )


# What a conversion's failure is reported as: UnicodeEncodeError is a name a
# source allows (a torch key with a lone surrogate) that UTF-8 cannot hold.
_FAILURES = (HurrayError, OSError, UnicodeEncodeError)


# long: the public entry, whose docstring is the API's manual; the work is one call each.
def convert(
    src,
    dst,
    *,
    quantize: Optional[str] = None,
    quantize_include=(),
    quantize_exclude=(),
    include=(),
    exclude=(),
    keep_scales: bool = False,
    stats: bool = False,
    quiet: bool = False,
    threads: int = 1,
    block_size: Optional[int] = None,
    output: str = "table",
    verify: bool = True,
    dequantize: bool = False,
) -> ConversionReport:
    """Converts the checkpoint `src` into `dst`; the formats follow the file
    names (docs/impl/convert.md). Returns the ConversionReport, and prints
    it to stdout (as a table, or JSON with output="json") unless quiet.

    quantize: a scheme of hurray.QUANT_SCHEMES applied to the tensors the
    default rule picks (default_quantize_rule), plus those matching a
    quantize_include glob, minus those matching a quantize_exclude glob
    (exclude wins). include / exclude: globs choosing which tensors are
    converted at all. keep_scales: a .safetensors target gets quantized
    tensors as codes, scales and zero points instead of dequantized values.
    stats: a .hurray target stores statistics in every descriptor.
    threads: for the quantization kernels. block_size: for block_affine
    and nf4. verify: a .hurray source's tensors are checked against their
    checksums before they are converted (verify=False skips that).
    dequantize: quantized tensors are written as float values, whatever the target.
    Raises ConversionError (UsageError for options that do not fit
    together; ConversionIOError, also an OSError, for a failure of the
    file system). The target is replaced only when everything succeeded; on
    any error, KeyboardInterrupt included, it is left as it was."""
    src, dst = os.fsdecode(os.fspath(src)), os.fsdecode(os.fspath(dst))
    opts = _Options(
        quantize,
        _patterns(quantize_include),
        _patterns(quantize_exclude),
        bool(keep_scales),
        bool(stats),
        _int_option("threads", threads, 0, 65535),  # the C kernels' limit, as the CLI's
        None if block_size is None else _int_option("block_size", block_size, 1, 2**64 - 1),
        bool(dequantize),
    )
    include, exclude = _patterns(include), _patterns(exclude)  # before any file is opened
    _check_options(opts, output)
    dst_kind = _check_paths(src, dst, opts)
    source = _open_source(src, verify=bool(verify))
    target = None
    try:
        source = _checked_source(src, source, dst, dst_kind, opts)
        names = _selected_names(src, source, include, exclude)
        infos = {n: source.info(n) for n in names}  # refuses unsupported tensors up front
        target = _TARGETS[dst_kind](dst, opts)
        target.check_scheme(quantize)
        target.start()
        report = ConversionReport(src, dst, source.format, target.format, quantize)
        if stats and dst_kind != "hurray":
            report.notes.append("--stats applies to .hurray targets; ignored")
        metadata = source.metadata()
        new_dtypes = _convert_all(names, infos, source, target, opts, report, metadata, quiet)
        _finish_metadata(source, metadata, names, new_dtypes, report)
        _closing_notes(report, quantize, bool(opts.quantize_include))
        target.finish(metadata, report)
        target.publish()  # the last step: nothing after it can fail the conversion
    except BaseException as exc:
        if target is not None:
            target.abort()
        mapped = _as_conversion_error(exc)
        if mapped is None:
            raise
        raise mapped from exc
    finally:
        source.close()
    if not quiet:
        _print_report(report, output)
    return report


def _as_conversion_error(exc: BaseException) -> Optional[ConversionError]:
    """What convert() raises for `exc`: None to raise it as it is."""
    if isinstance(exc, ConversionError) or not isinstance(exc, _FAILURES) or not_io(exc):
        return None
    if isinstance(exc, OSError):  # hurray.HurrayIOError too: file-system failures stay OSError
        return os_failure(exc, _first_line(exc))
    return ConversionError(_first_line(exc))


def _print_report(report: ConversionReport, output: str) -> None:
    """After the target was published: a failure to print says so."""
    if sys.stdout is None:  # started with stdout closed (>&-): print would drop it
        raise io_error(
            f"{report.target} was written, but printing its report failed: standard output "
            "is closed",
            errno.EBADF,
        )
    text = report.to_json() if output == "json" else report.format()
    # Tensor names may hold what the stream cannot encode (an ASCII locale,
    # PYTHONIOENCODING=ascii): they are escaped, not an "internal error"
    # after the target was written.
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    text = text.encode(encoding, "backslashreplace").decode(encoding)
    try:
        print(text)
        sys.stdout.flush()  # a failed write shows here, not at exit
    except BrokenPipeError:
        raise  # the reader went away (| head): the CLI ends quietly
    except OSError as e:
        raise io_error(
            f"{report.target} was written, but printing its report failed: {e.strerror}", e.errno
        ) from None


def _int_option(name: str, value, lo: int, hi: int) -> int:
    """An int option as the CLI takes it: a float, a str or a bool is a
    TypeError (int() would truncate 1.7 and take "4"), a value out of range
    a UsageError before any work (not an OverflowError mid-conversion)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if not lo <= int(value) <= hi:
        raise UsageError(f"{name} must be from {lo} to {hi}: {value}")
    return int(value)


def _check_options(opts: _Options, output: str) -> None:
    """Refuses options that do not fit together, before any file is opened."""
    if output not in ("table", "json"):
        raise UsageError(f"output must be 'table' or 'json', not {output!r}")
    if opts.dequantize and opts.scheme is not None:
        raise UsageError("--dequantize and --quantize do not go together")
    if opts.dequantize and opts.keep_scales:
        raise UsageError("--dequantize and --keep-scales do not go together")
    if opts.scheme is None:
        if opts.block_size is not None or opts.quantize_include or opts.quantize_exclude:
            raise UsageError(
                "--block-size, --quantize-include and --quantize-exclude need --quantize"
            )
        return
    if opts.scheme not in QUANT_SCHEMES:
        raise UsageError(
            f"unknown quantization scheme {opts.scheme!r}; one of {', '.join(QUANT_SCHEMES)}"
        )
    try:  # options the scheme refuses fail here, before any work
        _quantize(np.zeros((1, 64), np.float32), opts.scheme, block_size=opts.block_size)
    except (HurrayError, ValueError) as exc:
        raise UsageError(f"--quantize {opts.scheme}: {_first_line(exc)}") from None


def _checked_source(src: str, source: _Source, dst: str, dst_kind: str, opts) -> _Source:
    """The source as converted (a model folder's families put together),
    once the target is known not to replace any file of it."""
    source = _zoo_source(src, source, _source_kind(src), dst_kind, opts.dequantize)
    _check_not_a_source_file(src, source, dst, dst_kind)
    return source


def _check_not_a_source_file(src: str, source: _Source, dst: str, dst_kind: str) -> None:
    """UsageError if the target would replace a file the source reads (a
    shard of a sharded checkpoint), or is the folder of the index or of a
    shard: a folder target writes its config.json, index and shards (named
    as the source's index names them, sub/a.safetensors too) there. A
    folder further up overwrites nothing."""
    files = source.files()
    if files and os.path.exists(dst):
        for path in [src, *files]:
            if os.path.exists(path) and os.path.samefile(path, dst):
                raise UsageError(f"{dst} is one of the source's files; write to another file")
    if source.would_read(dst):
        raise UsageError(
            f"{dst} would change what the folder {source.folder} holds (its model is read "
            "from the .safetensors or .hurray files in it); write it outside that folder"
        )
    if not files or not os.path.exists(dst):
        return
    if dst_kind != "safetensors-dir":
        return
    real_dst = os.path.realpath(dst)
    folders = {os.path.dirname(os.path.realpath(p)) for p in [src, *files]}
    if os.path.isdir(src):
        folders.add(os.path.realpath(src))
    if real_dst in folders:
        raise UsageError(f"{dst} is a folder the source's files are in; write to another folder")


def _check_paths(src: str, dst: str, opts: _Options) -> str:
    """The target's kind, once the paths and the options agree."""
    dst_kind = _target_kind(dst)
    if opts.keep_scales and dst_kind not in ("safetensors", "safetensors-dir"):
        raise UsageError(
            "--keep-scales applies to .safetensors targets (the other formats have "
            "no place for the quantization parameters)"
        )
    if os.path.exists(dst) and os.path.exists(src) and os.path.samefile(src, dst):
        raise UsageError(f"{dst} is the source itself; write to another file")
    if os.path.isdir(dst) and dst_kind != "safetensors-dir":
        raise io_error(f"{dst} is a directory; name the file to write", errno.EISDIR, dst)
    return dst_kind


def _selected_names(src: str, source: _Source, include, exclude) -> List[str]:
    seen = set()
    for n in source.names():  # each source refuses its own collisions; this is the backstop
        if n in seen:
            raise ConversionError(f"{src} holds two tensors named {n!r}")
        seen.add(n)
    names = [n for n in source.names() if _selected(n, include, exclude)]
    for name, why in source.refused().items():
        if _selected(name, include, exclude):
            raise ConversionError(why)
    # A source without tensors (a vocabulary-only GGUF) converts to a file of
    # metadata alone, as the C converter makes; a filter that selects
    # nothing is a mistake.
    if not names and (include or exclude):
        raise ConversionError(f"no tensor of {src} is selected")
    return names


def _convert_all(names, infos, source, target, opts, report, metadata, quiet) -> Dict[str, str]:
    """Converts every selected tensor into report rows; returns the float
    dtypes the quantized ones had before quantization."""
    src_dtypes = _source_dtypes(metadata, report.source)
    new_dtypes: Dict[str, str] = {}
    budget = _ExpansionBudget()
    bar = _progress(sum(i[2] for i in infos.values()), len(names), quiet)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            for name in names:
                bar.set_postfix_str(shown(name)[-40:], refresh=False)
                report.rows.append(
                    _convert_one(
                        name, infos[name], source, target, opts, src_dtypes, new_dtypes, budget
                    )
                )
                bar.update(infos[name][2])
    finally:
        bar.close()
    return new_dtypes


def _source_dtypes(metadata: Dict, src: str) -> Dict[str, str]:
    """{tensor: the float dtype it had before quantization}, as the source
    recorded it (SOURCE_DTYPES_KEY)."""
    text = metadata.get(SOURCE_DTYPES_KEY)
    if text is None:
        return {}
    what = f"{src}: metadata {SOURCE_DTYPES_KEY!r}"
    dtypes = owned_json(text, what, dict)
    for name, dtype in dtypes.items():
        if not isinstance(dtype, str):
            raise ConversionError(f"{what} gives tensor {name!r} the dtype {dtype!r}, not a name")
    return dtypes


def _finish_metadata(
    source: _Source,
    metadata: Dict,
    names: List[str],
    new_dtypes: Dict[str, str],
    report: ConversionReport,
) -> None:
    source.complete_metadata(metadata)
    _keep_zoo_records_of_copies(metadata, report)
    report.notes.extend(source.notes())
    if new_dtypes:
        metadata[SOURCE_DTYPES_KEY] = json.dumps(new_dtypes)
    else:
        metadata.pop(SOURCE_DTYPES_KEY, None)
    if GGUF_TENSORS_KEY in metadata:  # keep the file order of what is kept
        what = f"{report.source}: metadata {GGUF_TENSORS_KEY!r}"
        order = owned_json(metadata[GGUF_TENSORS_KEY], what, list)
        if not all(isinstance(n, str) for n in order):
            raise ConversionError(f"{what} is not a JSON array of tensor names")
        kept = set(names)
        metadata[GGUF_TENSORS_KEY] = json.dumps([n for n in order if n in kept])


def _keep_zoo_records_of_copies(metadata: Dict, report: ConversionReport) -> None:
    dropped, quantized_config = _zoo_drop_changed(
        metadata, {r.name for r in report.rows if r.exact}
    )
    rows = {r.name for r in report.rows}
    changed = [n for n in dropped if n in rows]  # the others were not selected
    if not changed:
        return
    shown = ", ".join(changed[:3]) + (f" (+{len(changed) - 3} more)" if len(changed) > 3 else "")
    one = len(changed) == 1
    report.notes.append(
        f"{len(changed)} tensor{'' if one else 's'} read in the source's quantized format "
        f"{'was' if one else 'were'} changed ({shown}) and will convert back as "
        f"{'a plain tensor' if one else 'plain tensors'}, not as the members "
        f"{'it was' if one else 'they were'} read from"
        + (
            "; config.json's quantization_config, kept, still describes "
            f"{'it' if one else 'them'} as stored before"
            if quantized_config
            else ""
        )
    )


def _note_partial(report: ConversionReport) -> None:
    partial = [r.name for r in report.rows if "partial" in r.note]
    if partial:
        report.notes.append(
            f"{len(partial)} tensor{'s' if len(partial) != 1 else ''} with a "
            "partial last block (see their notes)"
        )


def _closing_notes(report: ConversionReport, scheme, included: bool) -> None:
    _note_partial(report)
    _note_nothing_quantized(report, scheme, included)


def _note_nothing_quantized(report: ConversionReport, scheme, included: bool) -> None:
    """--quantize that picks nothing is almost always a surprise (a tensor
    not named like a weight): say why, once, instead of a silent 0."""
    if scheme is None or not report.rows or any(r.quantized for r in report.rows):
        return
    rule = (
        "by default it takes unquantized floating-point tensors of rank 2 whose name ends "
        'with "weight" and is not an embedding, norm or head (hurray convert --help, "what '
        '--quantize picks")'
    )
    report.notes.append(
        f"--quantize {scheme} picked no tensor: "
        + (
            "neither its default rule nor the --quantize-include patterns found an "
            "unquantized floating-point tensor it can take"
            if included
            else f"{rule}; --quantize-include PATTERN adds tensors by name"
        )
    )


def _quantized_members(d) -> bool:
    """Whether a composite holds a quantized member (at any depth)."""
    members = d.layout.members if isinstance(d.layout, Composite) else ()
    return any(
        m.descriptor.quantization is not None or _quantized_members(m.descriptor) for m in members
    )


def _left_behind(d, target) -> List[str]:
    """What of a tensor's descriptor a foreign target does not keep, which
    the report must say: that it is a piece of a larger tensor, and its
    extension type (its bytes are written as their storage dtype)."""
    if target.format == "hurray":
        return []
    notes = []
    if d.shard is not None:
        notes.append(
            f"a piece of a sharded tensor ({_shape_str(d.shard.global_shape)} at "
            f"{list(d.shard.offsets)}), written as the piece; convert its folder to assemble it"
        )
    if d.extension is not None:
        notes.append(f"extension {d.extension.name!r} not kept: written as its {d.dtype} storage")
    return notes


# long: one tensor through quantization, the target and the measurement, in order.
def _convert_one(name, info, source, target, opts, src_dtypes, new_dtypes, budget) -> TensorReport:
    label, shape, nbytes_in = info
    expanded = source.expansion(name)
    if expanded is not None:  # the source writes it dense itself: charged first
        budget.charge_bytes(name, *expanded)
    try:
        t = source.get(name)
    except ConversionError:
        raise
    except (HurrayError, ValueError, RuntimeError, OSError) as exc:
        if not_io(exc):
            raise
        raise ConversionError(f"reading tensor {name!r}: {_first_line(exc)}") from None
    d = t.descriptor
    if expanded is None and (
        target.format != "hurray" or opts.scheme is not None or opts.dequantize
    ):
        # written dense (or read dense to quantize): float32 values if quantized
        quantized = d.quantization is not None
        budget.charge(
            name, d, d.numel * 4 if quantized else _dtypes.storage_bytes(d.dtype, d.numel)
        )
    row = TensorReport(name, label, "", tuple(shape), int(nbytes_in))
    notes: List[str] = []
    ref = None
    out = t
    orig = src_dtypes.get(name)
    if _wants_quantization(name, d, opts, target, notes):
        ref = _values(t, opts.threads)
        if not isinstance(d.layout, Dense):  # quantized from its dense values
            notes.append(f"{describe(d).split(' ')[-1].strip('()')} densified")
        if d.quantization is None and d.dtype in FLOAT_DTYPES:
            orig = d.dtype
        elif d.quantization is not None:
            notes.append(f"requantized from {describe(d)}")
        try:
            out = _quantize(ref, opts.scheme, block_size=opts.block_size, threads=opts.threads)
        except (HurrayError, ValueError) as exc:
            raise ConversionError(
                f"quantizing tensor {name!r} ({_shape_str(d.shape)}) with "
                f"{opts.scheme}: {_first_line(exc)}"
            ) from None
        orig = orig or "float32"
        row.quantized = True
        q = out.descriptor.quantization
        block = getattr(q, "block_size", None)
        if isinstance(q, (BlockAffine, Mxfp)) and out.shape and out.shape[q.axis] % block:
            notes.append(f"partial block: dim {out.shape[q.axis]} is not a multiple of {block}")
        elif isinstance(q, Nf4) and out.descriptor.numel % block:
            notes.append(f"partial block: {out.descriptor.numel} elements, block {block}")
    dequantized = opts.dequantize and out.descriptor.quantization is not None
    if opts.dequantize and _quantized_members(out.descriptor):
        notes.append("composite: its quantized members are kept as they are")
    if dequantized:
        ref = _values(t, opts.threads)
        out = _from_numpy(ref.astype(_dtypes.to_numpy(orig)) if orig in FLOAT_DTYPES else ref)
        notes.append("dequantized")
    if orig and (out.descriptor.quantization is not None):
        new_dtypes[name] = orig
    notes.extend(_left_behind(out.descriptor, target))
    try:
        result = target.add(name, out, orig)
    except ConversionError:
        raise
    except (HurrayError, ValueError, RuntimeError, TypeError) as exc:
        raise ConversionError(f"writing tensor {name!r}: {_first_line(exc)}") from None
    row.output = result.label
    row.bytes_out = int(result.nbytes)
    if result.note:
        notes.append(result.note)
    if row.quantized or dequantized or result.values is not None:  # measured, never assumed
        if ref is None:
            ref = _values(t, opts.threads)
        final = (
            result.values()
            if result.values is not None
            else out.dequantize(np.float32, threads=opts.threads)
        )
        measured = _measure(ref, final, opts.threads)
        row.max_abs_error, row.rmse, row.cosine, row._sums = measured
        row.exact = False
    else:
        row._sums = (0, 0.0, 0.0, 0.0, 0.0)
    row.note = "; ".join(notes)
    return row
