"""Staged files put in place as one step.

save_sharded writes every part, and a conversion into an existing
safetensors folder every shard, under a hidden name first. Renaming them
into place one by one could stop half way (a part another user owns in a
sticky folder, a folder where a file goes, Ctrl-C): the folder would then
hold new files beside old ones, and neither save would load. replace_all
keeps every file it replaces until all the new ones are in, and puts the
old ones back if a rename fails.

The caller holds signals back around the call (signals_deferred) and
removes the kept files once the renames are durable."""

from __future__ import annotations

import errno
import os
import stat
from typing import List, Optional, Sequence, Tuple


class ReplaceError(OSError):
    """A rename of replace_all failed; every earlier file is back in place.
    `index` is the move that failed, `cause` the OSError it raised."""

    def __init__(self, index: int, cause: OSError):
        super().__init__(cause.errno, cause.strerror, cause.filename)
        self.index = index
        self.cause = cause


_CAP_FOWNER = 3  # linux/capability.h


def _overrides_sticky() -> bool:
    """Whether this process holds CAP_FOWNER (Linux: /proc/self/status);
    elsewhere, whether it is root."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_FOWNER & 1)
    except (OSError, ValueError, IndexError):
        pass
    return (os.geteuid() if hasattr(os, "geteuid") else 0) == 0


def _refuse_sticky(target: str, st: os.stat_result) -> None:
    """PermissionError where the kernel would refuse to replace `target`
    (owned by someone else, in a sticky folder that is not ours: /tmp, a
    shared drop folder), before the hard link that keeps it is made: that
    link would be someone else's file in such a folder too, which no undo
    could remove. CAP_FOWNER (root's, normally) overrides the rule."""
    euid = os.geteuid() if hasattr(os, "geteuid") else 0
    if st.st_uid == euid or _overrides_sticky():
        return
    folder = os.stat(os.path.dirname(os.path.abspath(target)))
    if folder.st_mode & stat.S_ISVTX and folder.st_uid != euid:
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), target)


def _keep(target: str, backup: str) -> None:
    """A second name for `target`: a hard link, or where there is none (a
    file system without them, a file protected_hardlinks keeps from this
    user) the file itself moved there, absent until the next rename."""
    try:
        os.link(target, backup, follow_symlinks=False)
    except OSError:
        os.rename(target, backup)


def replace_all(moves: Sequence[Tuple[str, str]]) -> List[str]:
    """Renames each staged file of `moves` (staged, target) onto its target.
    A target it replaces is kept as `staged + ".old"` until every move is
    done. On any exception the targets replaced so far get their earlier
    files back, those that were new are removed, and the exception goes on
    (an OSError as ReplaceError); the staged files not moved yet stay for
    the caller to remove. A folder in a target's place is refused, never
    moved aside. Returns the kept files, for the caller to remove."""
    done: List[Tuple[str, str, Optional[str]]] = []  # (staged, target, its backup or None)
    k = 0
    try:
        for k, (staged, target) in enumerate(moves):
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                st = None
            if st is not None:
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target)
                _refuse_sticky(target, st)
            backup = None if st is None else staged + ".old"
            # Recorded before the calls: an exception raised as one returns
            # must still find what it made.
            done.append((staged, target, backup))
            if backup is not None:
                _keep(target, backup)
            os.replace(staged, target)
    except BaseException as exc:
        for staged, target, backup in reversed(done):
            try:
                if backup is not None and os.path.lexists(backup):
                    # A no-op while both still name the old file (a rename
                    # of two links to one file does nothing): the link is
                    # then dropped.
                    os.replace(backup, target)
                    if os.path.lexists(backup):
                        os.unlink(backup)
                elif backup is None and not os.path.lexists(staged):
                    # Moved here, where the folder had no file: a target
                    # someone else made while the move failed is theirs.
                    if os.path.lexists(target):
                        os.unlink(target)
            except OSError:
                pass  # the error that stopped the renames is the one to report
        if isinstance(exc, OSError):
            raise ReplaceError(k, exc) from None
        raise
    return [backup for _, _, backup in done if backup is not None]


def remove_quietly(paths: Sequence[str]) -> None:
    for path in paths:
        try:
            os.unlink(path)
        except OSError:
            pass
