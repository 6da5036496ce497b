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
                mode = os.lstat(target).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and stat.S_ISDIR(mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), target)
            backup = None if mode is None else staged + ".old"
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
