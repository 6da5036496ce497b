"""Loading onto a GPU through pinned staging buffers.

Pageable memory reaches a GPU at a fraction of the bus's rate (the driver
copies it through small pinned buffers of its own, one at a time), so the
loader stages the bytes itself: worker threads pread the file straight into
one of `depth` pinned buffers (hurray_reader_read_spans, GIL released) while
the GPU copies from the others asynchronously. A tensor larger than a
staging buffer is split across several; small ones share one. Tensors that
are not bytes of the file (dequantized on load, converted by to_torch) are
copied into the staging buffers from memory instead. The measurements
behind the defaults are in docs/adr/ADR-0027-gpu-staging.md.

The device side is a small interface (CudaSink) so that the tests, which
run without a GPU, drive the same planner with CPU tensors (CpuSink).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

# Three 32 MiB buffers: the GPU copies one while the threads fill the next.
# On an H200 host (16 CPUs, bench/results/cuda.md) later calls took 35.5 ms
# a GiB (34.5-38.5 over three processes) with these, and 63.4 ms (31.2-68.9)
# with two 64 MiB buffers, although those won the sweeps inside one process
# (29.7 ms); and the first call of a process, which allocates the pinned
# memory (torch caches it afterwards), took 86 ms against 140. ADR-0027.
STAGING_BYTES = 32 << 20
STAGING_DEPTH = 3

#: Where a tensor's bytes are stored: (its name in the file, the index of its
#: data buffer, the byte offset of its first element in that buffer).
Stored = Tuple[str, int, int]


def read_threads() -> int:
    """Threads that fill a staging buffer: reading from the page cache is a
    memory copy, which one core does at a fraction of the memory's rate."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(16, cpus))


class CudaSink:
    """Staging buffers in pinned memory and asynchronous copies on the
    current stream of `device`."""

    def __init__(self, device: "torch.device") -> None:
        self.device = device

    def empty(self, shape: Sequence[int], dtype: "torch.dtype") -> "torch.Tensor":
        return torch.empty(tuple(shape), dtype=dtype, device=self.device)

    def staging(self, nbytes: int) -> "torch.Tensor":
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def copy(self, dst: "torch.Tensor", src: "torch.Tensor") -> None:
        dst.copy_(src, non_blocking=True)

    def mark(self) -> Any:
        event = torch.cuda.Event()
        event.record(torch.cuda.current_stream(self.device))
        return event

    def wait(self, mark: Any) -> None:
        mark.synchronize()

    def finish(self) -> None:
        torch.cuda.current_stream(self.device).synchronize()


class CpuSink(CudaSink):
    """The same steps with CPU tensors and synchronous copies: the tests'
    stand-in for a GPU."""

    def __init__(self) -> None:
        super().__init__(torch.device("cpu"))

    def staging(self, nbytes: int) -> "torch.Tensor":
        return torch.empty(nbytes, dtype=torch.uint8)

    def copy(self, dst: "torch.Tensor", src: "torch.Tensor") -> None:
        dst.copy_(src)

    def mark(self) -> Any:
        return None

    def wait(self, mark: Any) -> None:
        pass

    def finish(self) -> None:
        pass


def _bytes_of(t: "torch.Tensor") -> "torch.Tensor":
    flat = t.reshape(-1)
    if flat.numel() <= 1 and flat.stride(0) != 1:
        # A stored one-element tensor may have any stride ((1,) with
        # strides (2,)), which reshape keeps and view(uint8) refuses.
        flat = flat.as_strided((flat.numel(),), (1,))
    return flat.view(torch.uint8)


def _stageable(t: "torch.Tensor") -> bool:
    return (
        t.layout == torch.strided
        and not t.is_quantized
        and t.is_contiguous()
        and t.device.type == "cpu"
    )


class _Stager:
    def __init__(self, file: Any, sink: CudaSink, chunk: int, depth: int, threads: int) -> None:
        self.file = file
        self.sink = sink
        self.chunk = chunk
        self.buffers: List[Optional["torch.Tensor"]] = [None] * depth
        self.marks: List[Any] = [None] * depth
        self.slot = 0
        self.used = 0
        self.threads = threads
        # The pieces bound for the current buffer.
        self.spans: List[Tuple[str, int, int, int, int]] = []
        self.memory: List[Tuple["torch.Tensor", int]] = []  # (source bytes, at)
        self.copies: List[Tuple["torch.Tensor", int]] = []  # (destination bytes, at)

    def _buffer(self) -> "torch.Tensor":
        k = self.slot
        if self.buffers[k] is None:
            self.buffers[k] = self.sink.staging(self.chunk)
        return self.buffers[k]

    def add(
        self, dst: "torch.Tensor", stored: Optional[Stored], src: Optional["torch.Tensor"]
    ) -> None:
        """Queues dst's bytes: from the file's `stored` bytes, else from `src`."""
        out = _bytes_of(dst)
        source = None if src is None else _bytes_of(src)
        total, done = out.numel(), 0
        while done < total:
            take = min(total - done, self.chunk - self.used)
            if stored is not None:
                name, buffer, offset = stored
                self.spans.append((name, buffer, offset + done, take, self.used))
            else:
                self.memory.append((source[done : done + take], self.used))
            self.copies.append((out[done : done + take], self.used))
            self.used += take
            done += take
            if self.used == self.chunk:
                self.flush()

    def flush(self) -> None:
        if not self.copies:
            return
        k = self.slot
        if self.marks[k] is not None:
            self.sink.wait(self.marks[k])  # the device has read this buffer
        buf = self._buffer()
        if self.spans:
            self.file._read_spans(buf.numpy(), self.spans, self.threads)
        for src, at in self.memory:
            buf[at : at + src.numel()].copy_(src)
        for dst, at in self.copies:
            self.sink.copy(dst, buf[at : at + dst.numel()])
        self.marks[k] = self.sink.mark()
        self.slot = (k + 1) % len(self.buffers)
        self.used = 0
        self.spans, self.memory, self.copies = [], [], []


def stage(
    file: Any,
    items: Sequence[Tuple[str, Optional[Stored], "torch.Tensor"]],
    sink: CudaSink,
    *,
    chunk: int = STAGING_BYTES,
    depth: int = STAGING_DEPTH,
    threads: Optional[int] = None,
) -> Dict[str, "torch.Tensor"]:
    """Each item (key, stored or None, CPU tensor) becomes a tensor on the
    sink's device under `key`. With `stored` (a tensor's name in `file`, the
    index of its data buffer and the byte offset of its first element), the
    CPU tensor is a row-major view of those bytes, of which only the dtype
    and shape are used: the bytes are read from the file. Without, its
    values are copied."""
    if chunk < 1 or depth < 1:
        raise ValueError("chunk and depth must be positive")
    stager = _Stager(file, sink, chunk, depth, threads or read_threads())
    out: Dict[str, "torch.Tensor"] = {}
    for key, stored, t in items:
        if not _stageable(t):
            out[key] = t.to(sink.device)
            continue
        dst = sink.empty(t.shape, t.dtype)
        out[key] = dst
        if t.numel():
            stager.add(dst, stored, None if stored is not None else t)
    stager.flush()
    sink.finish()
    return out
