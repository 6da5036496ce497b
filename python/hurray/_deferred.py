"""Signals held back while torch runs, or while a save publishes its files.

A Python signal handler that raises (Ctrl-C's KeyboardInterrupt, or the
CLI's SIGTERM handler) does so wherever the interpreter next checks for
signals. Inside torch that can be Python code called from C++: raised
during `import torch`, the exception crossed pybind11 and the process
aborted (SIGABRT, "terminate called after throwing ... KeyboardInterrupt");
raised inside `torch.save`, torch's writer failed on its way out with
"unexpected pos ..." and the conversion reported that instead of the
interrupt. While torch runs, the signals are only noted; the handler they
would have reached runs when torch returns. An interrupt therefore waits
for a `torch.save` in progress to end, and the temporary file is then
removed as for any interrupt.

A save that renames several staged files into place (save_sharded's parts,
a DCP checkpoint's rank files and metadata) holds them back too: an
interrupt between two renames left the new files beside the old ones, and
neither save loadable. So does `opened`, for the moment between os.open
returning a descriptor and the code that will close it."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import Iterator, List, Optional

_HELD = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Python-level handlers of SIGINT, SIGTERM and SIGHUP postponed to the
    end of the block (the main thread only: elsewhere no handler runs)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: List[int] = []
    saved = {s: signal.getsignal(s) for s in _HELD}
    # Only handlers that are Python code run inside torch; the default
    # action and SIG_IGN are the kernel's, and stay as they are.
    postponed = {s: h for s, h in saved.items() if callable(h)}

    def note(signum, frame):
        pending.append(signum)

    swapped = {}
    try:  # the swaps too: a signal between two of them still restores both
        for s, handler in postponed.items():
            swapped[s] = handler  # first: restoring one never swapped is harmless
            signal.signal(s, note)
        yield
    finally:
        # Every handler goes back even when a signal's handler raises as the
        # first is restored: the others stayed on `note` for good.
        # Python raises a handler's exception after a call returns or at a
        # loop's jump, never between taking the next pair and calling, so
        # counting it taken first restores each one once.
        raised, restore, done = None, list(swapped.items()), 0
        while done < len(restore):
            try:
                while done < len(restore):
                    s, handler = restore[done]
                    done += 1
                    signal.signal(s, handler)
            except BaseException as exc:  # noqa: BLE001 - raised once all are back
                raised = raised or exc
        # Each signal noted runs its handler once, in the order they came,
        # as the kernel would have delivered them: only the first ran, and a
        # Ctrl-C after a SIGHUP whose handler returned was lost.
        todo = list(dict.fromkeys(pending))
        try:
            if raised is not None:
                raise raised
            while todo:
                s = todo.pop(0)
                postponed[s](s, None)
        finally:
            # One raised: the rest are sent again, and run where Python
            # next checks for signals, as they would have without the hold.
            for s in todo:
                os.kill(os.getpid(), s)


@contextlib.contextmanager
def opened(path, flags: int, mode: int = 0o777, *, dir_fd: Optional[int] = None) -> Iterator[int]:
    """os.open(path, flags, mode, dir_fd=dir_fd), closed when the block ends.
    The signals are held from the call until the descriptor is stored: an
    interrupt raised as os.open returned lost it (a converter's temporary
    file stayed open, its disk space held, until the process ended)."""
    fd = -1
    try:
        with signals_deferred():
            fd = os.open(path, flags, mode, dir_fd=dir_fd)
        yield fd
    finally:
        if fd >= 0:
            os.close(fd)
