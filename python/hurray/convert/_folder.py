"""A safetensors model folder as a target (`hurray convert x.hurray out/`):
the shards a zoo source was read from (or one model.safetensors), the index
beside them when the source had one, and config.json.

Every file is written under a temporary name first; publish() renames them
into place only after all of them were written, and puts the old ones back
when a rename fails or is interrupted (replace_all), so a failure leaves
the folder as it was. A folder that does not exist yet is made under a
temporary name and renamed as a whole."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import secrets
import shutil
from typing import Dict, List, Optional, Tuple

from .._deferred import opened, signals_deferred
from .._files import fsync_dir as _fsync_dir
from .._publish import ReplaceError, remove_quietly, replace_all
from ._common import ConversionError, _first_line, io_error, os_failure, owned_json
from ._safetensors import _SafetensorsTarget
from ._target import keep_mode, short_name
from .zoo import ZOO_CONFIG_KEY, ZOO_INDEX_KEY, ZOO_KEYS, ZOO_TENSORS_KEY, ZOO_WEIGHT_MAP_KEY

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1


def _rename_noreplace(src: str, dst: str) -> None:
    """os.rename that never replaces `dst`: rename(2) replaces an empty
    folder, so a folder made at a new target while the conversion ran (by
    someone about to fill it) was silently swapped for ours. Linux's
    renameat2(RENAME_NOREPLACE) refuses atomically (EEXIST); where libc or
    the file system lacks it, a look just before the rename narrows the
    window to microseconds."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        renameat2 = None
    if renameat2 is not None:
        names = os.fsencode(src), os.fsencode(dst)
        if renameat2(_AT_FDCWD, names[0], _AT_FDCWD, names[1], _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(err, os.strerror(err), dst)
    if os.path.lexists(dst):
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)
    os.rename(src, dst)


DEFAULT_FILE = "model.safetensors"
MAX_SUBFOLDERS = 8  # below the target: the deepest layout seen is one or two
MAX_NAME_BYTES = 1024


def _plain_name(name: str, suffix: str, key: str, subfolders: bool = False) -> str:
    """A file name read from the metadata, refused unless it is a plain
    name ending with `suffix`, in the folder or (with `subfolders`) in at
    most MAX_SUBFOLDERS folders below it named as plainly: no "..", ".",
    hidden or empty part."""
    parts = name.split("/") if isinstance(name, str) and subfolders else [name]
    if (
        not isinstance(name, str)
        or not name.endswith(suffix)
        or any(not isinstance(p, str) or not p or p.startswith(".") or "/" in p for p in parts)
        or "\\" in name
        or "\0" in name
        or len(parts) > MAX_SUBFOLDERS + 1
        or len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES
    ):
        raise ConversionError(
            f"metadata {key!r} names file {name!r}, which is not a plain *{suffix} name; "
            "refusing to write it"
        )
    return name


class _SafetensorsFolderTarget(_SafetensorsTarget):
    format = "safetensors (folder)"
    consumed = ZOO_KEYS

    def __init__(self, path, options):
        super().__init__(path.rstrip("/") or "/", options)
        self._new_dir: Optional[str] = None  # the temporary folder, if the target is new
        self._written: List[Tuple[str, str]] = []  # (temporary path, final name)
        self._made: List[str] = []  # subfolders made in an existing target, to undo

    def start(self) -> None:
        parent = os.path.dirname(os.path.abspath(self.path))
        if os.path.isdir(self.path):
            return
        if os.path.lexists(self.path):
            raise io_error(f"{self.path} exists and is not a folder", errno.ENOTDIR, self.path)
        base = short_name(os.path.basename(self.path))
        # Recorded before it exists, so that a Ctrl-C right after mkdir
        # leaves nothing behind (abort() removes it, quietly if absent).
        self._new_dir = os.path.join(parent, f".{base}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
        try:
            os.mkdir(self._new_dir)
        except OSError as exc:
            self._new_dir = None  # not ours to remove
            raise os_failure(
                exc,
                f"cannot write into the folder {parent}: {exc.strerror or _first_line(exc)}",
                parent,
            ) from None

    def _tmp_path(self, name: str) -> str:
        sub, base = os.path.split(name)  # a shard may sit in a subfolder (sub/a.safetensors)
        root = self._new_dir if self._new_dir is not None else self.path
        folder = root
        for part in sub.split("/") if sub else ():
            folder = os.path.join(folder, part)
            if os.path.islink(folder):  # would write outside the target
                raise ConversionError(
                    f"{folder} is a symbolic link; refusing to write a shard through it"
                )
            if not os.path.isdir(folder):
                try:
                    os.mkdir(folder)
                except OSError as exc:
                    raise os_failure(
                        exc, f"cannot make the folder {folder}: {exc.strerror or _first_line(exc)}"
                    ) from None
                if self._new_dir is None:
                    self._made.append(folder)
        if self._new_dir is not None:
            return os.path.join(folder, base)
        return os.path.join(folder, f".{short_name(base)}.{os.getpid()}-{secrets.token_hex(4)}.tmp")

    def _shards(self, metadata) -> Tuple[Dict[str, List[str]], Optional[str], Dict[str, str]]:
        """{shard file: tensor names}, the index file name or None, and the
        weight map written into it."""
        what = f"writing {self.path}: metadata"
        text = metadata.get(ZOO_WEIGHT_MAP_KEY) or "{}"
        recorded = owned_json(text, f"{what} {ZOO_WEIGHT_MAP_KEY!r}", dict)
        records = owned_json(
            metadata.get(ZOO_TENSORS_KEY) or "{}", f"{what} {ZOO_TENSORS_KEY!r}", dict
        )
        for name, shard in recorded.items():
            if not isinstance(shard, str):
                raise ConversionError(
                    f"{what} {ZOO_WEIGHT_MAP_KEY!r} gives tensor {name!r} the file {shard!r}, "
                    "not a file name"
                )
        index = metadata.get(ZOO_INDEX_KEY)
        if index is not None:
            index = _plain_name(index, ".safetensors.index.json", ZOO_INDEX_KEY)
        first = {}  # a grouped tensor written as itself (dequantized): its first member's shard
        for name, rec in records.items():
            members = rec.get("members") if isinstance(rec, dict) else None
            for m in members if isinstance(members, list) else ():
                if isinstance(m, dict) and isinstance(m.get("name"), str) and m["name"] in recorded:
                    first.setdefault(name, recorded[m["name"]])
        default = min(recorded.values()) if recorded else DEFAULT_FILE
        shards: Dict[str, List[str]] = {}
        weight_map = {}
        for name in self._tensors:
            shard = recorded.get(name) or first.get(name) or default
            shard = _plain_name(shard, ".safetensors", ZOO_WEIGHT_MAP_KEY, subfolders=True)
            shards.setdefault(shard, []).append(name)
            weight_map[name] = shard
        if index is None and len(shards) > 1:
            index = DEFAULT_FILE + ".index.json"
        return shards, index, weight_map

    def _check_names(self, names: List[str]) -> None:
        """Refuses, before anything is written, the names that could fail
        only once some files are in place: one that is the folder of
        another ("config.json" and "config.json/b.safetensors"), and, in an
        existing target, one whose place holds a folder."""
        files = set(names)
        for name in names:
            parent = os.path.dirname(name)
            while parent:
                if parent in files:
                    raise ConversionError(
                        f"metadata {ZOO_WEIGHT_MAP_KEY!r} names {name!r} inside {parent!r}, "
                        "which is also a file it writes; refusing to write either"
                    )
                parent = os.path.dirname(parent)
            path = os.path.join(self.path, name)
            if self._new_dir is None and os.path.isdir(path) and not os.path.islink(path):
                raise ConversionError(f"{path} is a folder; refusing to replace it")
        if self._new_dir is None:
            self._check_no_other_checkpoint(files)

    def _check_no_other_checkpoint(self, files) -> None:
        """Refuses an existing folder that holds another checkpoint's index
        or shards, which this conversion would not replace: the folder
        would then be read as that checkpoint, or as both (an old index
        beside a new model.safetensors read back as the old weights)."""
        try:
            entries = os.listdir(self.path)
        except OSError:
            return  # the writes that follow say what is wrong
        others = sorted(
            n
            for n in entries
            if n.endswith((".safetensors", ".safetensors.index.json"))
            and n not in files
            and os.path.isfile(os.path.join(self.path, n))
        )
        if others:
            listed = ", ".join(others[:3]) + (
                f" and {len(others) - 3} more" if len(others) > 3 else ""
            )
            raise ConversionError(
                f"{self.path} holds another checkpoint's files ({listed}), which this "
                "conversion would not replace, and which would be read with or instead of it; "
                "remove them, or convert into an empty or new folder"
            )

    def finish(self, metadata, report):
        meta = self.header_metadata(metadata, report)
        shards, index, weight_map = self._shards(metadata)
        self._check_names(
            list(shards)
            + ([index] if index is not None else [])
            + (["config.json"] if isinstance(metadata.get(ZOO_CONFIG_KEY), str) else [])
        )
        for shard, names in sorted(shards.items()):
            tmp = self._tmp_path(shard)
            self._written.append((tmp, shard))
            self.write_file(tmp, names, meta)
        texts = {}
        if index is not None:
            index_meta = {}
            raw = metadata.get("safetensors_index.metadata")
            if raw:
                try:
                    index_meta = owned_json(raw, "the index metadata", dict)
                except ConversionError:  # not the converter's to judge: dropped
                    index_meta = {}
            if isinstance(index_meta, dict) and "total_size" in index_meta:
                index_meta["total_size"] = sum(
                    sum(len(b) for b in self._tensors[n].buffers) for n in self._tensors
                )
            texts[index] = (
                json.dumps(
                    {"metadata": index_meta, "weight_map": dict(sorted(weight_map.items()))},
                    indent=2,
                )
                + "\n"
            )
        config = metadata.get(ZOO_CONFIG_KEY)
        if isinstance(config, str):
            texts["config.json"] = config
        for name, text in texts.items():
            tmp = self._tmp_path(name)
            self._written.append((tmp, name))
            try:
                with open(tmp, "w", encoding="utf-8", newline="") as f:
                    f.write(text)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                where = os.path.join(self.path, name)
                raise os_failure(
                    exc, f"writing {where}: {exc.strerror or _first_line(exc)}"
                ) from None

    def publish(self) -> None:
        for tmp, _ in self._written:
            with opened(tmp, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)) as fd:
                os.fsync(fd)
        with signals_deferred():  # the renames and their undo are one step
            backups: List[str] = []
            if self._new_dir is not None:
                try:
                    _rename_noreplace(self._new_dir, self.path)
                except OSError as exc:
                    appeared = exc.errno in (
                        errno.ENOTEMPTY,
                        errno.EEXIST,
                        errno.ENOTDIR,
                        errno.EISDIR,
                    )
                    why = (
                        "it appeared while the conversion ran (another conversion into it?)"
                        if appeared
                        else exc.strerror or _first_line(exc)
                    )
                    raise os_failure(
                        exc, f"cannot publish {self.path}: {why}; nothing was changed", self.path
                    ) from None
                self._new_dir = None
            else:
                backups = self._replace_all()
            self.published = True
            try:
                folders = set()
                for _, name in self._written:
                    name = os.path.dirname(name)
                    while name:  # and the folders made above it
                        folders.add(name)
                        name = os.path.dirname(name)
                for folder in sorted(folders, reverse=True):
                    _fsync_dir(os.path.join(self.path, folder))
                _fsync_dir(self.path)
                _fsync_dir(os.path.dirname(os.path.abspath(self.path)))
            finally:  # an interrupt here still leaves no old files behind
                remove_quietly(backups)

    def _replace_all(self) -> List[str]:
        """Puts every written file in place in an existing folder as one
        step (replace_all): the folder is never a mix of old and new
        shards. Returns the kept old files, for the caller to remove once
        the renames are durable; a SIGKILL leaves them, hidden, as it
        leaves temporary files."""
        moves = [(tmp, os.path.join(self.path, name)) for tmp, name in self._written]
        for tmp, target in moves:
            keep_mode(tmp, target)
        try:
            return replace_all(moves)
        except ReplaceError as exc:
            target = moves[exc.index][1]
            why = exc.cause.strerror or _first_line(exc.cause)
            raise os_failure(
                exc.cause, f"cannot put {target} in place: {why}; nothing was changed", target
            ) from None

    def abort(self) -> None:
        if self.published:
            return
        if self._new_dir is not None:
            shutil.rmtree(self._new_dir, ignore_errors=True)
            return
        remove_quietly([tmp for tmp, _ in self._written])
        for folder in reversed(self._made):
            try:
                os.rmdir(folder)
            except OSError:
                pass
