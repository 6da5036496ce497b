"""Python-side work spread over a few threads, with the C kernels' rule for a
thread the system refuses (RLIMIT_NPROC, a cgroup's pids.max, no memory for
a stack): the work runs on the threads that did start, the calling one
included, instead of failing."""

from __future__ import annotations

import threading
from typing import Callable, List, Sequence, Tuple, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def map_on_threads(fn: Callable[[T], R], items: Sequence[T], threads: int) -> List[R]:
    """[fn(item) for item in items], on up to `threads` threads, the calling
    one included, each item run once. On a failure, or on Ctrl-C, the items
    not started yet are dropped, and the threads finish the ones they hold
    before this returns; the failure of the first failing item raises."""
    results: List = [None] * len(items)
    failures: List[Tuple[int, BaseException]] = []
    lock = threading.Lock()
    state = {"next": 0, "stop": False}

    def work() -> None:
        while True:
            with lock:
                i = state["next"]
                if state["stop"] or i >= len(items):
                    return
                state["next"] = i + 1
            try:
                results[i] = fn(items[i])
            except BaseException as exc:  # handed to the caller below
                with lock:
                    failures.append((i, exc))
                    state["stop"] = True
                return

    started = []
    try:
        for _ in range(min(threads, len(items)) - 1):
            helper = threading.Thread(target=work, name="hurray-worker")
            try:
                helper.start()
            except RuntimeError:  # "can't start new thread": fewer threads do it
                break
            started.append(helper)
        work()
    finally:
        with lock:
            state["stop"] = True
        for helper in started:
            helper.join()
    if failures:
        raise min(failures, key=lambda f: f[0])[1]
    return results
