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
neither save loadable."""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Iterator, List

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
        for s, handler in swapped.items():
            signal.signal(s, handler)
        if pending:
            postponed[pending[0]](pending[0], None)
